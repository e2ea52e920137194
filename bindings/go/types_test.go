package llmsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wire marshals v as the library writes JSON (no HTML escaping).
func wire(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// The typed values marshal to the exact wire form: the constructors' output is the library's
// bytes, and what the library gives decodes and re-encodes to the same bytes (unknown fields
// and opaque blocks included).
func TestTypedValuesMarshalToTheWireForm(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{UserText("hi <b>"), `{"role":"user","content":[{"text":"hi <b>","type":"text"}]}`},
		{ToolCallBlock("c1", "read", `{"path":"a"}`), `{"arguments":"{\"path\":\"a\"}","id":"c1","name":"read","type":"tool-call"}`},
		{ToolResultBlock("c1", nil, false), `{"content":[],"isError":false,"toolCallId":"c1","type":"tool-result"}`},
		{ImageURL("https://x/y.png"), `{"type":"image","url":"https://x/y.png"}`},
		{ImageData("image/png", "AAAA"), `{"data":"AAAA","mediaType":"image/png","type":"image"}`},
		{Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: Count(0)}, `{"inputTokens":10,"outputTokens":2,"cacheReadTokens":0}`},
		{Usage{InputTokens: 10, OutputTokens: 2}, `{"inputTokens":10,"outputTokens":2}`},
		{ToolResult{CallID: "c1", Text: "ok"}, `{"callId":"c1","text":"ok"}`},
		{ToolResult{CallID: "c1", Content: []Block{TextBlock("no")}, IsError: true}, `{"callId":"c1","content":[{"text":"no","type":"text"}],"isError":true}`},
		{Tool{Name: "read", Description: "Read a file"}, `{"name":"read","description":"Read a file","parameters":{}}`},
		{Tool{Provider: &ProviderTool{Format: "anthropic", Tool: json.RawMessage(`{"name":"web_search","type":"web_search_20250305"}`)}},
			`{"type":"provider","format":"anthropic","tool":{"name":"web_search","type":"web_search_20250305"}}`},
		{FileData("application/pdf", "JVBE", "a.pdf"), `{"data":"JVBE","filename":"a.pdf","mediaType":"application/pdf","type":"file"}`},
		{FileByID("video/mp4", "files/abc"), `{"fileId":"files/abc","mediaType":"video/mp4","type":"file"}`},
		{FileURL("application/pdf", "https://x/a.pdf"), `{"mediaType":"application/pdf","type":"file","url":"https://x/a.pdf"}`},
		{AgentOptions{Config: CallConfig{Provider: "p", Model: "m", MaxTokens: Count(64), Extra: map[string]json.RawMessage{"seed": json.RawMessage(`42`)}},
			Policy: &Policy{ContextWindow: 4096, Threshold: 0.5}},
			`{"config":{"provider":"p","model":"m","maxTokens":64,"seed":42},"policy":{"contextWindow":4096,"threshold":0.5}}`},
	} {
		if got := wire(t, c.v); got != c.want {
			t.Errorf("%T:\n got %s\nwant %s", c.v, got, c.want)
		}
	}

	// Round trip of what the library holds: an opaque block, unknown fields, provenance.
	in := `{"role":"assistant","content":[{"data":7,"type":"image","x":1},{"text":"a","type":"text","zz":true},{"kind":"map","type":"widget"},` +
		`{"content":[{"text":"r","type":"text"}],"isError":true,"toolCallId":"c","type":"tool-result"}],` +
		`"provenance":{"provider":"p","model":"m","region":"eu"},"meta":{"a":1}}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if got := wire(t, m); got != in {
		t.Errorf("round trip:\n got %s\nwant %s", got, in)
	}
	if m.Content[2].Type != "widget" || string(m.Content[2].Extra["kind"]) != `"map"` || m.Provenance.Model != "m" || !m.Content[3].IsError {
		t.Errorf("decoded %+v", m)
	}

	// A provider tool as the library gives it decodes with its key in the list, and back.
	var tool Tool
	const provider = `{"type":"provider","format":"openai-responses","tool":{"server_label":"deepwiki","type":"mcp"}}`
	if err := json.Unmarshal([]byte(provider), &tool); err != nil {
		t.Fatal(err)
	}
	if tool.Name != "openai-responses:mcp:deepwiki" || tool.Provider == nil || wire(t, tool) != provider {
		t.Errorf("provider tool %+v: %s", tool, wire(t, tool))
	}
	var file Block
	if err := json.Unmarshal([]byte(`{"fileId":"f","filename":"a.pdf","mediaType":"application/pdf","type":"file"}`), &file); err != nil {
		t.Fatal(err)
	}
	if file.FileID != "f" || file.Filename != "a.pdf" || file.MediaType != "application/pdf" || len(file.Extra) != 0 {
		t.Errorf("file block %+v", file)
	}

	// A mistyped known field is an error naming it.
	var b Block
	if err := json.Unmarshal([]byte(`{"type":"text","text":7}`), &b); err == nil || !strings.Contains(err.Error(), "text") {
		t.Errorf("a number as text: %v", err)
	}
}

const toolReply = `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",` +
	`"function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},"finish_reason":"tool_calls"}],` +
	`"usage":{"prompt_tokens":30,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":20}}}`

const textReply = `{"choices":[{"message":{"role":"assistant","content":"It says hello."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":50,"completion_tokens":4}}`

// The tool loop with the binding's types only: options, tool, tool calls, tool result, report.
func TestTypedToolLoop(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := NewAgent(s, AgentOptions{
		Config: CallConfig{Provider: "openai", Model: "m"},
		System: "Be brief.",
		Tools:  []Tool{{Name: "read_file", Description: "Read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.SetRenderer("openai", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn(UserText("What is in a.txt?")); err != nil {
		t.Fatal(err)
	}
	replies := []string{toolReply, textReply}
	var calls []Block
	for step := 0; ; step++ {
		if _, err := a.NextBody(context.Background()); err != nil {
			t.Fatal(err)
		}
		rec, err := a.RecordBodyOf([]byte(replies[step]))
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.ToolCalls()) == 0 {
			if rec.Message.Text() != "It says hello." || rec.Usage == nil || rec.Usage.InputTokens != 50 {
				t.Fatalf("final answer %+v usage %+v", rec.Message, rec.Usage)
			}
			break
		}
		if rec.Usage == nil || rec.Usage.CachedTokens() != 20 || rec.Usage.PromptTokens() != 30 {
			t.Fatalf("usage %+v", rec.Usage)
		}
		for _, c := range rec.ToolCalls() {
			calls = append(calls, c)
			var args struct{ Path string }
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || args.Path != "a.txt" {
				t.Fatalf("arguments %q: %v", c.Arguments, err)
			}
			if _, err := a.RecordToolResult(ToolResult{CallID: c.ID, Text: "hello"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.EndTurn("completed"); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].ID != "call_1" || calls[0].Name != "read_file" {
		t.Fatalf("tool calls %+v", calls)
	}

	// History: the typed messages re-encode to the library's bytes.
	raw, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	hist, err := s.HistoryOf()
	if err != nil {
		t.Fatal(err)
	}
	if got := wire(t, hist); got != string(raw) {
		t.Fatalf("history re-encoded:\n got %s\nwant %s", got, raw)
	}
	if len(hist) != 4 || hist[2].Content[0].Type != BlockToolResult || hist[2].Content[0].ToolCallID != "call_1" {
		t.Fatalf("history %+v", hist)
	}
	evs, err := s.EventsOf(0, -1)
	if err != nil || len(evs) == 0 || evs[0].Type != "turn/start" || !json.Valid(evs[0].Raw) {
		t.Fatalf("events %v %+v", err, evs)
	}
	rep, err := s.VerifyOf()
	if err != nil || rep.Requests != 2 || rep.Events != uint64(len(evs)) || !json.Valid(rep.Raw) {
		t.Fatalf("verify %+v %v", rep, err)
	}
	if rep, err := VerifyFileOf(path); err != nil || rep.Requests != 2 {
		t.Fatalf("verify file %+v %v", rep, err)
	}
}

// ParseResponseOf gives what RecordResponse takes; FinishOf the same for a stream; every
// fixture's message re-encodes to the library's bytes.
func TestParseResponseOfAndFinishOf(t *testing.T) {
	leakCheck(t)
	for _, name := range []string{"openai-chat-tools", "openai-chat-reasoning", "anthropic-tools", "gemini-tools", "openai-responses-tools"} {
		format := strings.TrimSuffix(strings.TrimSuffix(name, "-tools"), "-reasoning")
		format = strings.Replace(format, "openai-chat", "openai", 1)
		raw, err := ParseResponse(format, fixture(t, name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := ParseResponseOf(format, fixture(t, name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(r.Raw) != string(raw) || wire(t, r) != string(raw) {
			t.Errorf("%s: re-encoded\n got %s\nwant %s", name, wire(t, r), raw)
		}
		if strings.HasSuffix(name, "-tools") && (len(r.ToolCalls()) == 0 || r.FinishReason != FinishToolCalls) {
			t.Errorf("%s: tool calls %+v finish %q", name, r.ToolCalls(), r.FinishReason)
		}
		st, err := NewStream(format)
		if err != nil {
			t.Fatal(err)
		}
		stream := "sse"
		if name == "gemini-array" {
			stream = "stream.json"
		}
		if _, err := st.Write(fixture(t, name+"."+stream)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := st.FinishOf(false)
		st.Close()
		if err != nil || wire(t, f.Message) != wire(t, r.Message) {
			t.Errorf("%s: stream finish %v\n got %s\nwant %s", name, err, wire(t, f), wire(t, r))
		}
	}

	_, a := newPair(t)
	if _, err := a.StartTurn("hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NextRequest(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := ParseResponseOf("openai", []byte(textReply))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := a.RecordResponseOf(r)
	if err != nil || rec.Message.Text() != "It says hello." || rec.Message.Provenance == nil {
		t.Fatalf("recorded %+v %v", rec, err)
	}
	if _, err := ParseResponseOf("openai", []byte(`{"choices":7}`)); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("a bad body: %v", err)
	}
}

// LoadReportOf says what opening a log with a torn last line cut.
func TestLoadReportOf(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(map[string]any{"type": "host/note", "data": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.LoadReportOf(); err != nil || rep.CutRecords != 0 {
		t.Fatalf("a fresh log: %+v %v", rep, err)
	}
	s.Close()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"host/note","se`)
	f.Close()
	s, err = OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.LoadReportOf()
	if err != nil || rep.CutRecords != 1 || rep.CutAtLine != 3 || rep.CutSavedTo == "" || !json.Valid(rep.Raw) {
		t.Fatalf("a torn tail: %+v %v", rep, err)
	}
}

// A typed prefix listener sees the later listeners' messages decoded and passes typed ones on.
func TestAddPrefixMessages(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	var seen []Message
	if err := a.AddPrefixMessages(func(ctx context.Context, in PrefixInput, rest []Message) ([]Message, error) {
		seen = rest
		return append([]Message{UserText("project notes"), UserMessage(ImageURL("https://x/diagram.png"))}, rest...), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
		return append([]json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"text","text":"from the raw listener","x":1}]}`)}, in.Rest...), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("hi"); err != nil {
		t.Fatal(err)
	}
	r, err := a.NextRequest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Info.PrefixLen != 3 || len(seen) != 1 || seen[0].Text() != "from the raw listener" || string(seen[0].Content[0].Extra["x"]) != "1" {
		t.Fatalf("prefix length %d, rest seen %+v", r.Info.PrefixLen, seen)
	}
	prefix, err := a.PrefixOf()
	if err != nil || len(prefix) != 3 || prefix[0].Text() != "project notes" || prefix[1].Content[0].URL != "https://x/diagram.png" ||
		string(prefix[2].Content[0].Extra["x"]) != "1" {
		t.Fatalf("prefix %+v %v", prefix, err)
	}
}
