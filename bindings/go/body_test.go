package llmsession

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

// The one-way hot path through the Go binding: SetRenderer, NextBodyView / NextBody,
// LastEnvelope, RecordBody, RecordStream.

// A provider as the tests see it: its renderer, the options given to SetRenderer and a raw
// reply calling read_file (call_<n>).
type hotProvider struct {
	renderer string
	opts     *RenderOptions
	reply    func(n int) string
}

var hotProviders = []hotProvider{
	{"openai", &RenderOptions{PromptCacheKey: "tenant-7"}, func(n int) string {
		return fmt.Sprintf(`{"id":"c%d","object":"chat.completion","model":"m-test","choices":[{"index":0,"message":{"role":"assistant","content":"Reading it.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":10}}`, n, n)
	}},
	{"openai-responses", nil, func(n int) string {
		return fmt.Sprintf(`{"id":"resp_%d","object":"response","status":"completed","model":"m-test","output":[{"type":"message","id":"msg_%d","role":"assistant","content":[{"type":"output_text","text":"Reading it.","annotations":[]}]},{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"read_file","arguments":"{\"path\":\"a.txt\"}"}],"usage":{"input_tokens":50,"output_tokens":10}}`, n, n, n, n)
	}},
	{"anthropic", &RenderOptions{CacheTTL: "1h"}, func(n int) string {
		return fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","model":"m-test","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call_%d","name":"read_file","input":{"path":"a.txt"}}],"stop_reason":"tool_use","usage":{"input_tokens":50,"output_tokens":10}}`, n, n)
	}},
	{"openai", &RenderOptions{PromptCacheBreakpoints: true, PromptCacheOptions: &PromptCacheOptions{Mode: "explicit", TTL: "30m"}}, func(n int) string {
		return fmt.Sprintf(`{"id":"c%d","object":"chat.completion","model":"m-test","choices":[{"index":0,"message":{"role":"assistant","content":"Reading it.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":10}}`, n, n)
	}},
	{"gemini-interactions", nil, func(n int) string {
		return fmt.Sprintf(`{"id":"int_%d","status":"requires_action","model":"m-test","steps":[{"type":"model_output","content":[{"type":"text","text":"Reading it."}]},{"type":"function_call","id":"call_%d","name":"read_file","arguments":{"path":"a.txt"},"signature":"c2ln"}],"usage":{"total_input_tokens":50,"total_output_tokens":10}}`, n, n)
	}},
	{"gemini", nil, func(n int) string {
		return fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":"Reading it."},{"functionCall":{"id":"call_%d","name":"read_file","args":{"path":"a.txt"}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":50,"candidatesTokenCount":10},"modelVersion":"m-test"}`, n)
	}},
}

// hotAgent is an agent with a read_file tool; system is its system prompt.
func hotAgent(t *testing.T, system string) (*Session, *Agent) {
	t.Helper()
	s, err := NewMemorySession(&SessionOptions{ID: "hot-test"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAgent(s, map[string]any{
		"config": map[string]any{"provider": "p", "model": "m-test", "maxTokens": 256},
		"system": system,
		"tools": []any{map[string]any{"name": "read_file", "description": "Read a file",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}},
		"checkRequests": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, a
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkBody checks that a body is the rendering of the agent's logged envelope, and that the
// info read from the C record says what the JSON description says.
func checkBody(t *testing.T, a *Agent, p hotProvider, body []byte, info RequestInfo) {
	t.Helper()
	env, err := a.LastEnvelope()
	must(t, err)
	sum := sha256.Sum256(env)
	if d := "sha256:" + hex.EncodeToString(sum[:]); d != info.Digest {
		t.Errorf("%s: digest %s, the logged envelope's is %s", p.renderer, info.Digest, d)
	}
	opts := RenderOptions{PrefixLen: info.PrefixLen}
	if p.opts != nil {
		opts = *p.opts
		opts.PrefixLen = info.PrefixLen
	}
	fresh, err := RenderWithOptions(p.renderer, env, &opts)
	must(t, err)
	if !bytes.Equal(fresh, body) {
		t.Errorf("%s: the body is not the rendering of the logged envelope:\n%s\n%s", p.renderer, body, fresh)
	}
	ri, err := a.RequestInfo()
	must(t, err)
	ri.Purpose = PurposeConversation
	if ri != info {
		t.Errorf("%s: info %+v, JSON info %+v", p.renderer, info, ri)
	}
	if info.Bytes != len(env) {
		t.Errorf("%s: info.Bytes %d, envelope %d bytes", p.renderer, info.Bytes, len(env))
	}
}

func TestNextBodyIsTheRenderedEnvelopeForEveryRenderer(t *testing.T) {
	before := LiveHandleCount()
	ctx := context.Background()
	for _, p := range hotProviders {
		s, a := hotAgent(t, "You are a careful coding agent.")
		must(t, a.SetRenderer(p.renderer, p.opts))
		_, err := a.StartTurn("Read a.txt")
		must(t, err)
		v, err := a.NextBodyView(ctx)
		must(t, err)
		checkBody(t, a, p, v.Bytes(), v.Info)
		if p.opts != nil && p.opts.PromptCacheBreakpoints && !bytes.Contains(v.Bytes(), []byte(`"prompt_cache_breakpoint":{"mode":"explicit"}`)) {
			t.Errorf("%s: no breakpoint in %s", p.renderer, v.Bytes())
		}
		if v.Info.Turn != 1 || v.Info.Step != 1 || v.Info.Purpose != PurposeConversation {
			t.Errorf("%s: info %+v", p.renderer, v.Info)
		}
		v.Release()
		for n := 1; n <= 3; n++ {
			seq, calls, err := a.RecordBody([]byte(p.reply(n)))
			must(t, err)
			if calls != 1 || seq == 0 {
				t.Errorf("%s: RecordBody gave seq %d, %d tool calls", p.renderer, seq, calls)
			}
			_, err = a.RecordToolResult(map[string]any{"callId": fmt.Sprintf("call_%d", n), "text": "contents of a.txt"})
			must(t, err)
			b, err := a.NextBody(ctx)
			must(t, err)
			checkBody(t, a, p, b.Bytes, b.Info)
			if b.Info.Step != uint64(n+1) || b.Info.SharedMessages == 0 {
				t.Errorf("%s: step %d info %+v", p.renderer, n+1, b.Info)
			}
		}
		h, err := s.History()
		must(t, err)
		if c := bytes.Count(h, []byte(`"read_file"`)); c != 3 {
			t.Errorf("%s: %d recorded tool calls in the history, want 3", p.renderer, c)
		}
		a.Close()
		s.Close()
	}
	if n := LiveHandleCount(); n != before {
		t.Errorf("live handles %d, before %d", n, before)
	}
}

// A system prompt large enough that the library lends the body (4 KiB and more); 100 KB, so
// that a body view is also a large buffer.
var bigSystem = strings.Repeat("Be exact and brief. ", 5000)

func TestBodyViewIsValidUntilRelease(t *testing.T) {
	ctx := context.Background()
	p := hotProviders[0]
	s, a := hotAgent(t, bigSystem)
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer(p.renderer, p.opts))
	_, err := a.StartTurn("Read a.txt")
	must(t, err)
	strs := LiveStringCount()
	v, err := a.NextBodyView(ctx)
	must(t, err)
	if n := LiveStringCount(); n != strs+1 {
		t.Errorf("library strings while the view is held: %d, want %d", n, strs+1)
	}
	if v.Len() < 64*1024 {
		t.Fatalf("the body is %d bytes, too small to be lent", v.Len())
	}
	kept := append([]byte(nil), v.Bytes()...)
	env, err := a.LastEnvelope()
	must(t, err)
	// More steps: new bodies are built and released, other buffers are allocated and freed.
	for n := 1; n <= 3; n++ {
		_, _, err := a.RecordBody([]byte(p.reply(n)))
		must(t, err)
		_, err = a.RecordToolResult(map[string]any{"callId": fmt.Sprintf("call_%d", n), "text": strings.Repeat("x", 70000)})
		must(t, err)
		w, err := a.NextBodyView(ctx)
		must(t, err)
		if bytes.Equal(w.Bytes(), kept) {
			t.Fatal("a later body equals the first")
		}
		w.Release()
	}
	if !bytes.Equal(v.Bytes(), kept) {
		t.Fatal("the view's bytes changed before Release")
	}
	fresh, err := RenderWithOptions(p.renderer, env, &RenderOptions{PromptCacheKey: "tenant-7"})
	must(t, err)
	if !bytes.Equal(v.Bytes(), fresh) {
		t.Fatal("the view is not the first request's body")
	}
	var sink bytes.Buffer
	if n, err := io.Copy(&sink, v); err != nil || n != int64(len(kept)) || !bytes.Equal(sink.Bytes(), kept) {
		t.Fatalf("io.Copy of the view: %d bytes, %v", n, err)
	}
	if n, err := v.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Errorf("Read after the whole body: %d, %v, want io.EOF", n, err)
	}
	v2, err := a.NextBodyView(ctx)
	if !errors.Is(err, ErrOutOfOrder) || v2 != nil {
		t.Errorf("a second request with one open: %v", err)
	}

	if n := LiveStringCount(); n != strs+1 {
		t.Errorf("library strings after later views were released: %d, want %d", n, strs+1)
	}
	v.Release()
	if n := LiveStringCount(); n != strs {
		t.Errorf("library strings after Release: %d, want %d (the body was not freed)", n, strs)
	}
	if !v.Released() || v.Len() != 0 {
		t.Errorf("after Release: released %v, len %d", v.Released(), v.Len())
	}
	if _, err := v.WriteTo(&sink); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteTo after Release: %v, want ErrClosed", err)
	}
	if _, err := v.Read(make([]byte, 10)); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Release: %v, want ErrClosed", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "after Release") {
				t.Errorf("Bytes after Release: recovered %v, want a panic naming the release", r)
			}
		}()
		_ = v.Bytes()
	}()
	v.Release() // a second Release does nothing
}

func TestNextBodyCopiesIntoGoMemory(t *testing.T) {
	ctx := context.Background()
	s, a := hotAgent(t, bigSystem)
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer("anthropic", nil))
	_, err := a.StartTurn("hello")
	must(t, err)
	b, err := a.NextBody(ctx)
	must(t, err)
	env, err := a.LastEnvelope()
	must(t, err)
	want, err := RenderWithOptions("anthropic", env, nil)
	must(t, err)
	if !bytes.Equal(b.Bytes, want) {
		t.Fatal("NextBody is not the rendered envelope")
	}
	b.Bytes[0] = 'X' // Go memory: the host may change or keep it
	if b.Info.PrefixLen != 0 || b.Info.MessageCount != 1 {
		t.Errorf("info %+v", b.Info)
	}
}

func TestRecordStreamRecordsTheStreamedReply(t *testing.T) {
	ctx := context.Background()
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer("openai", nil))
	_, err := a.StartTurn("Lis café.txt")
	must(t, err)
	_, err = a.NextBody(ctx)
	must(t, err)
	st, err := NewStream("openai")
	must(t, err)
	defer st.Close()
	_, err = io.Copy(st, bytes.NewReader(fixture(t, "openai-chat-tools.sse")))
	must(t, err)
	seq, calls, err := a.RecordStream(st, false)
	must(t, err)
	if calls != 2 || seq == 0 {
		t.Errorf("RecordStream: seq %d, %d tool calls, want 2", seq, calls)
	}
	h, err := s.History()
	must(t, err)
	if !bytes.Contains(h, []byte(`"id":"call_Rb2"`)) || !bytes.Contains(h, []byte("café.txt")) {
		t.Errorf("history %s", h)
	}
	// A stream of another format than the renderer's is refused and changes nothing.
	for _, id := range []string{"call_Qa1", "call_Rb2"} {
		_, err = a.RecordToolResult(map[string]any{"callId": id, "text": "ok"})
		must(t, err)
	}
	_, err = a.NextBody(ctx)
	must(t, err)
	other, err := NewStream("anthropic")
	must(t, err)
	defer other.Close()
	_, err = io.Copy(other, bytes.NewReader(fixture(t, "anthropic-tools.sse")))
	must(t, err)
	events, _ := s.Events(0, -1)
	if _, _, err := a.RecordStream(other, false); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("an anthropic stream on an openai agent: %v, want ErrInvalidInput", err)
	}
	if after, _ := s.Events(0, -1); !bytes.Equal(after, events) {
		t.Error("the refused stream changed the log")
	}
	// A cut stream: an error, then its partial message.
	cut, err := NewStream("openai")
	must(t, err)
	defer cut.Close()
	sse := fixture(t, "openai-chat-tools.sse")
	_, err = cut.Write(sse[:len(sse)/2])
	must(t, err)
	if _, _, err := a.RecordStream(cut, false); err == nil {
		t.Fatal("a cut stream recorded as complete")
	}
	if _, _, err := a.RecordStream(cut, true); err != nil {
		t.Fatalf("the partial message: %v", err)
	}
	cut.Close()
	if _, _, err := a.RecordStream(cut, true); !errors.Is(err, ErrClosed) {
		t.Errorf("a closed stream: %v, want ErrClosed", err)
	}
}

func TestRecordedGivesTheFinishReason(t *testing.T) {
	ctx := context.Background()
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer("anthropic", nil))
	_, err := a.StartTurn("Cherche l'herbe")
	must(t, err)
	// Anthropic's stop reasons, normalised; none gives "".
	for _, c := range []struct{ stop, want string }{
		{`"pause_turn"`, FinishPauseTurn},
		{`"refusal"`, FinishRefusal},
		{`"model_context_window_exceeded"`, FinishContextOverflow},
		{`"max_tokens"`, FinishMaxTokens},
		{`null`, ""},
		{`"end_turn"`, FinishStop},
	} {
		_, err = a.NextBody(ctx)
		must(t, err)
		body := `{"content":[{"type":"text","text":"Verte 🌱"}],"stop_reason":` + c.stop + `,"usage":{"input_tokens":3,"output_tokens":1}}`
		rec, err := a.RecordBodyOf([]byte(body))
		must(t, err)
		if rec.FinishReason != c.want || rec.Seq == 0 || rec.Message.Text() != "Verte 🌱" {
			t.Errorf("stop_reason %s: %+v, want finish %q", c.stop, rec, c.want)
		}
	}
	must(t, a.EndTurn("completed"))
	events, err := s.Events(0, -1)
	must(t, err)
	if bytes.Contains(events, []byte("finishReason")) || bytes.Contains(events, []byte("pause-turn")) {
		t.Error("the finish reason was logged")
	}

	// Streams: the stream's reason, and "incomplete" for a cut one recorded with partial.
	_, err = a.StartTurn("Lis café.txt")
	must(t, err)
	_, err = a.NextBody(ctx)
	must(t, err)
	st, err := NewStream("anthropic")
	must(t, err)
	defer st.Close()
	_, err = st.Write(fixture(t, "anthropic-tools.sse"))
	must(t, err)
	rec, err := a.RecordStreamOf(st, false)
	must(t, err)
	if rec.FinishReason != FinishToolCalls || len(rec.ToolCalls()) != 1 {
		t.Fatalf("stream: %+v", rec)
	}
	_, err = a.RecordToolResult(map[string]any{"callId": rec.ToolCalls()[0].ID, "text": "ok"})
	must(t, err)
	_, err = a.NextBody(ctx)
	must(t, err)
	cut, err := NewStream("anthropic")
	must(t, err)
	defer cut.Close()
	sse := fixture(t, "anthropic-citations.sse")
	_, err = cut.Write(sse[:len(sse)*2/3])
	must(t, err)
	rec, err = a.RecordStreamOf(cut, true)
	must(t, err)
	if rec.FinishReason != FinishIncomplete {
		t.Errorf("a cut stream recorded with partial: %+v", rec)
	}
	// RecordResponseOf passes on the reason of the Response it records.
	_, err = a.NextBody(ctx)
	must(t, err)
	rec, err = a.RecordResponseOf(&Response{Message: Message{Role: "assistant", Content: []Block{TextBlock("Fini.")}}, FinishReason: FinishStop})
	must(t, err)
	if rec.FinishReason != FinishStop {
		t.Errorf("RecordResponseOf: %+v", rec)
	}
	must(t, a.EndTurn("completed"))
}

func TestHotPathErrorsChangeNothing(t *testing.T) {
	ctx := context.Background()
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	_, err := a.StartTurn("hello")
	must(t, err)
	if _, err := a.NextBodyView(ctx); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("NextBodyView without a renderer: %v, want ErrOutOfOrder", err)
	}
	if err := a.SetRenderer("telegraph", nil); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("an unknown renderer: %v, want ErrInvalidInput", err)
	}
	var le *Error
	if err := a.SetRenderer("openai", &RenderOptions{PrefixLen: 1}); !errors.As(err, &le) || le.Code != StatusInvalidInput || le.Field("field") != "options.prefixLen" {
		t.Errorf("a prefixLen option: %v, want ErrInvalidInput naming options.prefixLen", err)
	}
	must(t, a.SetRenderer("openai", nil))
	if _, _, err := a.RecordBody([]byte(hotProviders[0].reply(1))); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("RecordBody with no step open: %v, want ErrOutOfOrder", err)
	}
	_, err = a.NextBody(ctx)
	must(t, err)
	events, _ := s.Events(0, -1)
	for _, bad := range []struct {
		body string
		want error
	}{
		{`{"choices":`, ErrMalformedJSON},
		{hotProviders[2].reply(1), ErrInvalidInput}, // an Anthropic body on an OpenAI agent
		{`{"choices":[]}`, ErrInvalidInput},
		{"", ErrMalformedJSON},
	} {
		if _, _, err := a.RecordBody([]byte(bad.body)); !errors.Is(err, bad.want) {
			t.Errorf("RecordBody(%.30q): %v, want %v", bad.body, err, bad.want)
		}
	}
	if after, _ := s.Events(0, -1); !bytes.Equal(after, events) {
		t.Error("a refused body changed the log")
	}
	_, _, err = a.RecordBody([]byte(hotProviders[0].reply(1)))
	must(t, err)
}

func TestNextBodyViewCancelled(t *testing.T) {
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer("openai", nil))
	_, err := a.StartTurn("hello")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.NextBodyView(ctx); !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want ErrCancelled caused by context.Canceled", err)
	}
	ev, err := s.Events(0, -1)
	must(t, err)
	var events []struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	must(t, json.Unmarshal(ev, &events))
	if last := events[len(events)-1]; last.Type != "turn/end" || !bytes.Contains(last.Data, []byte(`"aborted"`)) {
		t.Errorf("last event %s %s, want turn/end aborted", last.Type, last.Data)
	}
}

// hotStep records the provider's reply n (calling read_file as call_<n>) and its tool result.
func hotStep(t *testing.T, a *Agent, reply, result []byte) {
	t.Helper()
	_, _, err := a.RecordBody(reply)
	must(t, err)
	_, err = a.RecordToolResult(json.RawMessage(result))
	must(t, err)
}

// hotSteps are the replies and tool results of steps 1..n for hotProviders[0], encoded ahead so
// that a step allocates nothing in the test itself.
func hotSteps(n int) (replies, results [][]byte) {
	for i := 1; i <= n; i++ {
		replies = append(replies, []byte(hotProviders[0].reply(i)))
		results = append(results, []byte(fmt.Sprintf(`{"callId":"call_%d","content":[{"type":"text","text":"contents of a.txt"}]}`, i)))
	}
	return replies, results
}

func TestAppendNextBodyAppendsToDst(t *testing.T) {
	ctx := context.Background()
	p := hotProviders[0]
	s, a := hotAgent(t, bigSystem)
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer(p.renderer, p.opts))
	_, err := a.StartTurn("Read a.txt")
	must(t, err)
	head := []byte("POST /v1/chat/completions\n")
	dst := append(make([]byte, 0, len(head)), head...)
	out, info, err := a.AppendNextBody(ctx, dst)
	must(t, err)
	if !bytes.Equal(out[:len(head)], head) {
		t.Fatalf("the bytes before the body changed: %q", out[:len(head)])
	}
	checkBody(t, a, p, out[len(head):], info)
	if info.Turn != 1 || info.Step != 1 || info.Purpose != PurposeConversation {
		t.Errorf("info %+v", info)
	}

	// The same bytes as NextBody: two agents on identical sessions, one step each way.
	replies, results := hotSteps(1)
	s2, a2 := hotAgent(t, bigSystem)
	defer s2.Close()
	defer a2.Close()
	must(t, a2.SetRenderer(p.renderer, p.opts))
	_, err = a2.StartTurn("Read a.txt")
	must(t, err)
	first, err := a2.NextBody(ctx)
	must(t, err)
	if !bytes.Equal(first.Bytes, out[len(head):]) || first.Info.Digest != info.Digest {
		t.Fatal("AppendNextBody and NextBody built different first bodies")
	}
	hotStep(t, a, replies[0], results[0])
	hotStep(t, a2, replies[0], results[0])
	appended, info, err := a.AppendNextBody(ctx, nil)
	must(t, err)
	copied, err := a2.NextBody(ctx)
	must(t, err)
	if !bytes.Equal(appended, copied.Bytes) || info != copied.Info {
		t.Errorf("AppendNextBody(nil) %d bytes %+v, NextBody %d bytes %+v", len(appended), info, len(copied.Bytes), copied.Info)
	}
	checkBody(t, a, p, appended, info)
}

func TestAppendNextBodyReusesDst(t *testing.T) {
	ctx := context.Background()
	s, a := hotAgent(t, bigSystem)
	defer s.Close()
	defer a.Close()
	p := hotProviders[0]
	must(t, a.SetRenderer(p.renderer, p.opts))
	_, err := a.StartTurn("Read a.txt")
	must(t, err)
	first, err := a.NextBody(ctx)
	must(t, err)
	const steps = 24
	replies, results := hotSteps(steps)
	buf := make([]byte, 0, 2*len(first.Bytes)) // room for the body, which grows a little per step
	k := 0
	step := func(next func()) {
		hotStep(t, a, replies[k], results[k])
		k++
		next()
	}
	var out []byte
	var info RequestInfo
	appendStep := func() {
		out, info, err = a.AppendNextBody(ctx, buf[:0])
		if err != nil {
			t.Fatal(err)
		}
	}
	viewStep := func() {
		v, err := a.NextBodyView(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v.Release()
	}

	step(appendStep)
	if len(out) <= len(first.Bytes) || &out[0] != &buf[:1][0] || cap(out) != cap(buf) {
		t.Fatalf("the body (%d bytes, capacity %d) is not in dst's array (capacity %d)", len(out), cap(out), cap(buf))
	}
	checkBody(t, a, p, out, info)

	// With the capacity there, the append form allocates nothing for the body: no more than the
	// view (which lends the library's buffer), and far fewer bytes than the body has.
	viewAllocs := testing.AllocsPerRun(5, func() { step(viewStep) })
	appendAllocs := testing.AllocsPerRun(5, func() { step(appendStep) })
	if appendAllocs > viewAllocs {
		t.Errorf("a step allocates %v times with AppendNextBody into a large enough dst, %v with NextBodyView", appendAllocs, viewAllocs)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 5
	for i := 0; i < n; i++ {
		step(appendStep)
	}
	runtime.ReadMemStats(&m1)
	if perStep := (m1.TotalAlloc - m0.TotalAlloc) / n; perStep > uint64(len(out)/8) {
		t.Errorf("a step allocates %d bytes with AppendNextBody into a large enough dst (the body is %d bytes)", perStep, len(out))
	}
	if &out[0] != &buf[:1][0] {
		t.Error("the body moved out of dst's array")
	}
	checkBody(t, a, p, out, info)

	// Without the capacity, append grows dst as usual, keeping what it held (and a call that
	// fails, here with the request still open, gives dst back as it was).
	small := []byte("{}")
	out, info, err = a.AppendNextBody(ctx, small[:1:1])
	if !errors.Is(err, ErrOutOfOrder) || len(out) != 1 || cap(out) != 1 || &out[0] != &small[0] {
		t.Fatalf("AppendNextBody with the request open: %v, %q (capacity %d), want ErrOutOfOrder and dst as given", err, out, cap(out))
	}
	step(func() { out, info, err = a.AppendNextBody(ctx, small[:1:1]) })
	must(t, err)
	if out[0] != '{' || &out[0] == &small[0] || small[1] != '}' {
		t.Error("a dst without the capacity was not grown by a copy")
	}
	checkBody(t, a, p, out[1:], info)
}

func TestAppendNextBodyErrorsLeaveDst(t *testing.T) {
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	_, err := a.StartTurn("hello")
	must(t, err)
	dst := make([]byte, 3, 64)
	copy(dst, "abc")
	same := func(what string, out []byte) {
		t.Helper()
		if len(out) != 3 || cap(out) != 64 || &out[0] != &dst[0] || string(out) != "abc" || string(dst[:4:4][3:]) != "\x00" {
			t.Errorf("%s: got %q (len %d, capacity %d), want dst untouched", what, out, len(out), cap(out))
		}
	}
	out, info, err := a.AppendNextBody(context.Background(), dst)
	if !errors.Is(err, ErrOutOfOrder) || info != (RequestInfo{}) {
		t.Errorf("AppendNextBody without a renderer: %v %+v, want ErrOutOfOrder", err, info)
	}
	same("without a renderer", out)
	must(t, a.SetRenderer("openai", nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, _, err = a.AppendNextBody(ctx, dst)
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want ErrCancelled caused by context.Canceled", err)
	}
	same("cancelled", out)
}

// A context that can be done still cancels the body while it is being built (the operation's
// token is tripped from a context.AfterFunc), with the context's cause; one that is never
// done is not watched at all, and the callbacks still see its values.
func TestNextBodyContexts(t *testing.T) {
	leakCheck(t)
	s, a := hotAgent(t, "You help.")
	defer s.Close()
	defer a.Close()
	must(t, a.SetRenderer("openai", nil))
	type key struct{}
	type call struct {
		value any
		err   error
	}
	var seen []call
	var ctxs []context.Context
	must(t, a.AddPreStepListener(func(ctx context.Context, in PreStepInput) error {
		seen = append(seen, call{ctx.Value(key{}), ctx.Err()})
		ctxs = append(ctxs, ctx)
		return nil
	}))
	_, err := a.StartTurn("hello")
	must(t, err)

	// Never done: values only. The callbacks' context has them, and is done once the call
	// returned (as for a context that can be done), without a token or a watcher.
	goroutines := runtime.NumGoroutine()
	vctx := context.WithValue(context.Background(), key{}, "v")
	_, _, err = a.AppendNextBody(vctx, nil)
	must(t, err)
	if len(seen) != 1 || seen[0] != (call{"v", nil}) {
		t.Fatalf("the listener's context: %+v, want its value, not done", seen)
	}
	select {
	case <-ctxs[0].Done():
	default:
		t.Error("the listener's context is not done after the call")
	}
	if err := ctxs[0].Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("the listener's context after the call: %v, want context.Canceled", err)
	}
	replies, results := hotSteps(3)
	hotStep(t, a, replies[0], results[0])

	// Cancellable but not cancelled: the call succeeds and nothing stays behind.
	cctx, cancel := context.WithCancel(vctx)
	_, _, err = a.AppendNextBody(cctx, nil)
	must(t, err)
	if len(seen) != 2 || seen[1] != (call{"v", nil}) || ctxs[1].Err() == nil {
		t.Fatalf("the listener's context: %+v (after the call: %v), want its value, not done during the call", seen, ctxs[1].Err())
	}
	cancel() // after the call: trips nothing (the token is gone)
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the calls, %d before", n, goroutines)
	}

	// Cancelled while the prefix listener runs (composing the first request of another agent):
	// ErrCancelled with the context's cause.
	s2, a2 := hotAgent(t, "You help.")
	defer s2.Close()
	defer a2.Close()
	must(t, a2.SetRenderer("openai", nil))
	started := make(chan struct{})
	answered := make(chan struct{})
	must(t, a2.AddPrefixListenerAsync(func(ctx context.Context, in PrefixInput, r *Reply) {
		go func() {
			defer close(answered)
			close(started)
			<-ctx.Done() // done once the operation's token has tripped
			_ = r.Complete([]any{})
		}()
	}))
	_, err = a2.StartTurn("hello")
	must(t, err)
	dctx, cancelD := context.WithCancelCause(vctx)
	defer cancelD(nil)
	cause := errors.New("the host gave up")
	go func() {
		<-started
		cancelD(cause)
	}()
	out, _, err := a2.AppendNextBody(dctx, []byte("x"))
	<-answered
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, cause) {
		t.Fatalf("cancelled during composition: %v, want ErrCancelled caused by %v", err, cause)
	}
	if string(out) != "x" {
		t.Errorf("dst after a cancelled call: %q", out)
	}
}
