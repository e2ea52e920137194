// Command example drives an llmsession agent against any OpenAI-compatible chat completions
// endpoint (OpenAI, DeepSeek, vLLM, llama.cpp's llama-server, ...).
//
//	example -base-url http://127.0.0.1:8766/v1 -model m -log session.jsonl \
//	        -prefix-dir notes/ -context-window 4096 "first question" "second question"
//
// Every file in -prefix-dir becomes one message of the session prefix (through a prefix
// listener). Each positional argument is one user turn (without any, one turn per line of
// standard input; with -script, the turns of a JSON script). Requests are rendered by the
// library ("openai" renderer), sent with net/http, and their responses parsed by the library.
// Compaction (automatic, once the prompt nears -context-window, or forced with -compact) asks
// the same endpoint for the summary, sending the summarisation request the library built.
// Per request it prints the prompt tokens, the cached tokens and the leading messages shared
// with the previous request.
//
// With -stream, the requests of the chosen turns are sent with "stream": true (and usage asked
// for in the last chunk); the host feeds the server-sent events to the library's stream
// accumulator, prints the text as it arrives, and records what the accumulator gives, which is
// what parsing the non-streamed body gives.
//
// The demo (`make demo`, docs/demo.md) adds: -workspace (a read_file tool over a folder, which
// the host calls itself in the turns the script names), -peer-summary (after each summarisation
// request, the same summary asked for in the style of a harness without a shared prefix),
// -llama (llama.cpp extras: the token length of system + tools + session prefix), -report (a
// JSON report of every request, with llmsession explain's expected cacheable tokens) and
// -check-report (the end-to-end rules, applied to a report).
//
// -replay LOG runs the same host loop offline: every request is answered from a recorded
// session log (llmsession's Replay) instead of the server, and the run fails at the first
// request that differs from the recorded one, naming where (docs/demo.md, "Replay").
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

type client struct {
	baseURL string
	apiKey  string
	http    *http.Client
}

// post sends a rendered body to /chat/completions and returns the status and the body.
func (c *client) post(ctx context.Context, body []byte) (int, []byte, error) {
	return c.postTo(ctx, strings.TrimRight(c.baseURL, "/")+"/chat/completions", body)
}

func (c *client) postTo(ctx context.Context, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// postStream sends a rendered body with "stream": true to /chat/completions. On HTTP 200 the
// event stream goes through the library's accumulator (ReadStream), onDelta sees each delta as
// it arrives, and the result is the response and the rebuilt non-streamed body; on another
// status it is the status and the error body, as post gives.
func (c *client) postStream(ctx context.Context, body []byte, onDelta func(llmsession.Delta)) (int, json.RawMessage, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.baseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	// llama-server closes the connection after a streamed reply without saying so; a pooled
	// connection would make the next POST fail with EOF. One connection per stream.
	req.Close = true
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, b, err
	}
	parsed, rebuilt, err := llmsession.ReadStream("openai", resp.Body, onDelta)
	return resp.StatusCode, parsed, rebuilt, err
}

// withStreaming asks for a streamed response, with the usage in the last chunk.
func withStreaming(body []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["stream"] = true
	m["stream_options"] = map[string]any{"include_usage": true}
	return json.Marshal(m)
}

// streamSpec says which turns stream their requests: "" (none), "all", "even", "odd", or a
// comma-separated list of turn numbers.
type streamSpec struct {
	mode  string
	turns map[uint64]bool
}

func parseStreamSpec(s string) (streamSpec, error) {
	switch s {
	case "", "all", "even", "odd":
		return streamSpec{mode: s}, nil
	}
	spec := streamSpec{mode: s, turns: map[uint64]bool{}}
	for _, f := range strings.Split(s, ",") {
		var n uint64
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n == 0 {
			return streamSpec{}, fmt.Errorf("-stream: %q is not all, even, odd or a list of turn numbers", s)
		}
		spec.turns[n] = true
	}
	return spec, nil
}

// streams reports whether the requests of turn are streamed.
func (s streamSpec) streams(turn uint64) bool {
	switch s.mode {
	case "":
		return false
	case "all":
		return true
	case "even":
		return turn%2 == 0
	case "odd":
		return turn%2 == 1
	}
	return s.turns[turn]
}

// parsed is what the library's response parser gives: the message, usage and finish reason.
type parsed = llmsession.Response

// providerUsage is the provider's own usage figures (for the per-request report).
type providerUsage struct {
	prompt, cached, completion int
}

// rawUsage reads the provider's own usage figures.
func rawUsage(body []byte) providerUsage {
	var r struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Timings struct {
			CacheN int `json:"cache_n"`
		} `json:"timings"`
	}
	_ = json.Unmarshal(body, &r)
	u := providerUsage{prompt: r.Usage.PromptTokens, cached: r.Usage.PromptTokensDetails.CachedTokens, completion: r.Usage.CompletionTokens}
	if u.cached == 0 {
		u.cached = r.Timings.CacheN // llama.cpp without prompt_tokens_details
	}
	return u
}

// parse turns a response body into the message and usage to record; it uses the library's
// parser and maps usage itself when the body lacks what the library needs.
func parse(body []byte) (parsed, error) {
	p, err := llmsession.ParseResponseOf("openai", body)
	if err != nil {
		return parsed{}, err
	}
	if p.Usage == nil {
		p.Usage = usageOf(rawUsage(body))
	}
	return *p, nil
}

// usageOf maps the provider's figures when the library's parser found no usage object
// (inputTokens is the uncached part; cached tokens are reported separately); nil without any.
func usageOf(u providerUsage) *llmsession.Usage {
	if u.prompt == 0 {
		return nil
	}
	return &llmsession.Usage{InputTokens: uint64(u.prompt - u.cached), CacheReadTokens: llmsession.Count(uint64(u.cached)), OutputTokens: uint64(u.completion)}
}

// loggedOf reads back the usage recorded with a response, as prompt / cached / completion.
func loggedOf(u *llmsession.Usage) *loggedUsage {
	if u == nil {
		return nil
	}
	return &loggedUsage{Prompt: int(u.PromptTokens()), Cached: int(u.CachedTokens()), Completion: int(u.OutputTokens)}
}

// liveText prints a streamed reply as its text deltas arrive (on one line, at most 160
// characters) and keeps the whole text, to compare with the recorded message.
type liveText struct {
	text   strings.Builder
	shown  int
	deltas int
}

func (l *liveText) add(d llmsession.Delta) {
	l.deltas++
	if d.Type != "text" {
		return
	}
	if l.text.Len() == 0 {
		fmt.Print("assistant (streamed): ")
	}
	l.text.WriteString(d.Text)
	for _, r := range d.Text {
		if l.shown >= 160 {
			if l.shown == 160 {
				fmt.Print("...")
				l.shown++
			}
			break
		}
		if r == '\n' || r == '\t' || r == '\r' {
			r = ' '
		}
		fmt.Print(string(r))
		l.shown++
	}
}

// end finishes the printed line.
func (l *liveText) end() {
	if l.text.Len() > 0 {
		fmt.Println()
	}
}

// textOf is the text of a message's text blocks, concatenated (as their deltas arrive).
func textOf(m llmsession.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == llmsession.BlockText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// oneLine shortens a reply for the console.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "..."
	}
	return s
}

// prefixFromDir is a prefix listener: one user message per file of dir, in name order.
func prefixFromDir(dir string) llmsession.PrefixListener {
	return func(ctx context.Context, in llmsession.PrefixInput) ([]json.RawMessage, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		var mine []json.RawMessage
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			m, _ := json.Marshal(llmsession.UserText(fmt.Sprintf("Reference file %s:\n\n%s", e.Name(), b)))
			mine = append(mine, m)
		}
		return append(mine, in.Rest...), nil
	}
}

// readFileTool is the schema of the demo's one tool.
var readFileTool = llmsession.Tool{
	Name:        "read_file",
	Description: "Read a text file of the workspace. Paths are relative to the workspace root.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"file path, e.g. units/units.go"}},` +
		`"required":["path"],"additionalProperties":false}`),
}

// runTool runs a tool call against the workspace and returns the result text.
func runTool(workspace string, call llmsession.Block) (string, bool) {
	if workspace == "" || call.Name != "read_file" {
		return "no such tool: " + call.Name, true
	}
	var args struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args.Path == "" {
		return "read_file: arguments must be {\"path\": \"...\"}", true
	}
	clean := filepath.Clean(args.Path)
	if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
		return "read_file: the path must stay inside the workspace", true
	}
	b, err := os.ReadFile(filepath.Join(workspace, clean))
	if err != nil {
		return "read_file: " + err.Error(), true
	}
	return string(b), false
}

// turnSpec is one user turn of a -script file.
type turnSpec struct {
	User string `json:"user"`
	// ReadFile makes the host call read_file on this path after the model's first reply of the
	// turn (SmolLM2 and other small models do not call tools by themselves).
	ReadFile string `json:"readFile,omitempty"`
}

func loadScript(path string) ([]turnSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s struct {
		Turns []turnSpec `json:"turns"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, t := range s.Turns {
		if strings.TrimSpace(t.User) == "" {
			return nil, fmt.Errorf("%s: turns[%d].user is empty", path, i)
		}
	}
	return s.Turns, nil
}

// host is one run of the example.
type host struct {
	c         *client
	workspace string
	sampling  map[string]any // sent with every request (temperature, seed)
	peer      bool
	llama     bool
	stream    streamSpec
	rep       *recorder
	a         *llmsession.Agent
	// replay answers every request from a recorded log instead of the server (-replay).
	replay *llmsession.Replay
	// idle is the pause after the scripted turns (-idle-ttl; idle.go); pendingAfter marks the
	// first request after a compaction made outside a request ("idle").
	idle         *idleSpec
	pendingAfter string
}

// summariser compacts with the session's own model: it renders the library's summarisation
// request (which replays the last request's prefix, so the provider's cache hits) and sends it.
// With -peer-summary it then sends the peer-style request for the same summary.
func (h *host) summariser() llmsession.Summariser {
	return func(ctx context.Context, in llmsession.SummaryInput) (llmsession.SummaryOutput, error) {
		if h.replay != nil {
			return h.replaySummary(in)
		}
		body, err := llmsession.Render("openai", in.Request, in.PrefixLen)
		if err == nil {
			body, err = h.bodyWithSampling(body)
		}
		if err != nil {
			return llmsession.SummaryOutput{}, err
		}
		status, resp, err := h.c.post(ctx, body)
		if err != nil {
			return llmsession.SummaryOutput{}, err
		}
		if status != http.StatusOK {
			return llmsession.SummaryOutput{}, fmt.Errorf("summarisation request: HTTP %d: %s", status, resp)
		}
		p, err := parse(resp)
		if err != nil {
			return llmsession.SummaryOutput{}, err
		}
		u := rawUsage(resp)
		count := messageCount(in.Request)
		fmt.Printf("  [summary] prompt %d tokens, cached %d, shared leading messages %d of %d, reply %d tokens (%s)\n",
			u.prompt, u.cached, in.SharedMessages, count, u.completion, p.FinishReason)
		h.rep.add(row{Kind: kindSummary, PromptTokens: u.prompt, CachedTokens: u.cached, CompletionTokens: u.completion,
			SharedMessages: in.SharedMessages, MessageCount: count, PrefixLen: in.PrefixLen, FinishReason: p.FinishReason})
		if h.peer {
			if err := h.peerSummary(ctx, in); err != nil {
				return llmsession.SummaryOutput{}, fmt.Errorf("peer-style summary request: %w", err)
			}
		}
		out := llmsession.SummaryOutput{Text: textOf(p.Message), Truncated: p.FinishReason == llmsession.FinishMaxTokens}
		if p.Usage != nil {
			out.Usage, _ = json.Marshal(p.Usage)
		}
		return out, nil
	}
}

func messageCount(envelope json.RawMessage) int {
	var e struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(envelope, &e)
	return len(e.Messages)
}

// bodyWithSampling adds the host's sampling fields to a rendered body where it lacks them.
func (h *host) bodyWithSampling(body []byte) ([]byte, error) {
	if len(h.sampling) == 0 {
		return body, nil
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	for k, v := range h.sampling {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// measurePrefix asks llama-server (-llama) for the token length of system + tools + the
// session prefix of a rendered body: /apply-template renders them, /tokenize counts. 0 when
// the server does not offer these endpoints.
func (h *host) measurePrefix(ctx context.Context, body []byte, prefixLen int) int {
	if !h.llama {
		return 0
	}
	var b struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    json.RawMessage   `json:"tools,omitempty"`
	}
	if json.Unmarshal(body, &b) != nil {
		return 0
	}
	n := prefixLen
	var first struct {
		Role string `json:"role"`
	}
	if len(b.Messages) > 0 && json.Unmarshal(b.Messages[0], &first) == nil && first.Role == "system" {
		n++
	}
	if n > len(b.Messages) {
		return 0
	}
	root := strings.TrimSuffix(strings.TrimRight(h.c.baseURL, "/"), "/v1")
	req, _ := json.Marshal(map[string]any{"messages": b.Messages[:n], "tools": b.Tools})
	status, resp, err := h.c.postTo(ctx, root+"/apply-template", req)
	if err != nil || status != http.StatusOK {
		return 0
	}
	var t struct {
		Prompt string `json:"prompt"`
	}
	if json.Unmarshal(resp, &t) != nil {
		return 0
	}
	// The template ends with the generation prompt; the request goes on with the history there.
	prompt := strings.TrimSuffix(t.Prompt, "<|im_start|>assistant\n")
	req, _ = json.Marshal(map[string]any{"content": prompt, "add_special": false, "parse_special": true})
	status, resp, err = h.c.postTo(ctx, root+"/tokenize", req)
	if err != nil || status != http.StatusOK {
		return 0
	}
	var tk struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if json.Unmarshal(resp, &tk) != nil {
		return 0
	}
	return len(tk.Tokens)
}

// runTurn runs one user turn to its end.
func (h *host) runTurn(ctx context.Context, turn turnSpec) error {
	a := h.a
	if _, err := a.StartTurn(turn.User); err != nil {
		return err
	}
	for {
		landedBefore, summariesBefore := h.compactionsLanded(), h.rep.summaries()
		r, err := a.NextRequest(ctx)
		if err != nil {
			return err // the library has ended the turn (aborted / error)
		}
		after := h.pendingAfter
		h.pendingAfter = ""
		if h.rep.summaries() > summariesBefore {
			after = "failed"
			if h.compactionsLanded() > landedBefore {
				after = "landed"
			}
		}
		// A request of a streamed turn is sent with "stream": true and put together by the
		// library's stream accumulator; live collects its deltas (what a user watches arrive).
		streamed := h.replay == nil && h.stream.streams(r.Info.Turn)
		var live liveText
		p, u, body, retry, err := h.complete(ctx, r, streamed, &live)
		if err != nil {
			a.EndTurn("error")
			return err
		}
		if retry {
			fmt.Println("  context overflow: compacted, retrying")
			continue
		}
		rw := row{Kind: kindConversation, Instance: r.Info.Instance, Turn: r.Info.Turn, Step: r.Info.Step,
			PromptTokens: u.prompt, CachedTokens: u.cached, CompletionTokens: u.completion,
			SharedMessages: r.Info.SharedMessages, MessageCount: r.Info.MessageCount, PrefixLen: r.Info.PrefixLen,
			FinishReason: p.FinishReason, AfterCompaction: after, Logged: loggedOf(p.Usage)}
		if streamed {
			rw.Streamed = true
			rw.Deltas = live.deltas
			rw.DeltaTextMatches = live.text.String() == textOf(p.Message)
		}
		if h.rep.firstOf(r.Info.Instance) || after != "" {
			rw.PrefixTokens = h.measurePrefix(ctx, body, r.Info.PrefixLen)
		}
		note := ""
		if after != "" {
			note = ", after " + withArticle(after) + " compaction"
		}
		if streamed {
			note += fmt.Sprintf(", streamed (%d deltas)", live.deltas)
		}
		fmt.Printf("  [request turn %d step %d] prompt %d tokens, cached %d, shared leading messages %d of %d%s\n",
			r.Info.Turn, r.Info.Step, u.prompt, u.cached, r.Info.SharedMessages, r.Info.MessageCount, note)
		if t := textOf(p.Message); t != "" && !streamed {
			fmt.Printf("assistant: %s\n", oneLine(t, 160))
		}
		msg := p.Message
		calls := msg.ToolCalls()
		if turn.ReadFile != "" && r.Info.Step == 1 && len(calls) == 0 {
			// The host-scripted tool round: the assistant message gets a read_file call.
			args, _ := json.Marshal(map[string]string{"path": turn.ReadFile})
			call := llmsession.ToolCallBlock(fmt.Sprintf("call_t%d_1", r.Info.Turn), "read_file", string(args))
			msg.Content = append(msg.Content, call)
			calls = []llmsession.Block{call}
			rw.ToolCall = "read_file " + turn.ReadFile
			fmt.Printf("  (host-scripted tool call: read_file %s)\n", turn.ReadFile)
		}
		h.rep.add(rw)
		if _, err := a.RecordResponse(llmsession.Response{Message: msg, Usage: p.Usage}); err != nil {
			a.EndTurn("error")
			return err
		}
		if len(calls) == 0 {
			reason := "completed"
			if p.FinishReason == llmsession.FinishMaxTokens {
				reason = "max-tokens"
			}
			return a.EndTurn(reason)
		}
		for _, call := range calls {
			text, isErr := runTool(h.workspace, call)
			if _, err := a.RecordToolResult(llmsession.ToolResult{CallID: call.ID, Text: text, IsError: isErr}); err != nil {
				return err
			}
		}
	}
}

// complete sends one conversation request and returns the parsed reply, its usage figures and
// the body sent; retry is true when a context overflow was recovered (ask for the request
// again). With -replay the recorded log answers instead of the server.
func (h *host) complete(ctx context.Context, r *llmsession.Request, streamed bool, live *liveText) (p parsed, u providerUsage, body []byte, retry bool, err error) {
	a := h.a
	if h.replay != nil {
		ans, err := h.replay.AnswerOf(r.Envelope)
		if err != nil {
			return p, u, nil, false, err
		}
		switch ans.Outcome {
		case "response":
			p, u, err = fromRecorded(ans.Response)
			return p, u, nil, false, err
		case "error":
			retry, perr := a.ProviderError(ctx, ans.Error, ans.Overflow)
			if perr == nil && retry {
				return p, u, nil, true, nil
			}
			return p, u, nil, false, errors.Join(errors.New(ans.Error), perr)
		default:
			return p, u, nil, false, fmt.Errorf("the recorded request %s was %s", ans.ID, ans.Outcome)
		}
	}
	body, err = llmsession.Render("openai", r.Envelope, r.Info.PrefixLen)
	if err == nil {
		body, err = h.bodyWithSampling(body)
	}
	if err != nil {
		return p, u, nil, false, err
	}
	var status int
	var resp []byte
	if streamed {
		var out json.RawMessage
		if body, err = withStreaming(body); err != nil {
			return p, u, nil, false, err
		}
		status, out, resp, err = h.c.postStream(ctx, body, live.add)
		live.end()
		if err == nil && status == http.StatusOK {
			err = json.Unmarshal(out, &p)
		}
	} else {
		status, resp, err = h.c.post(ctx, body)
	}
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(resp))
	}
	if err != nil {
		overflow := status != 0 && status != http.StatusOK && llmsession.IsContextOverflow(status, resp)
		var le *llmsession.Error
		if errors.As(err, &le) && le.Field("overflow") == true {
			overflow = true // the provider's error event inside the stream said so
		}
		retry, perr := a.ProviderError(ctx, err.Error(), overflow)
		if perr == nil && retry {
			return p, u, body, true, nil
		}
		return p, u, body, false, errors.Join(err, perr)
	}
	if !streamed {
		if p, err = parse(resp); err != nil {
			return p, u, body, false, err
		}
	} else if p.Usage == nil {
		p.Usage = usageOf(rawUsage(resp))
	}
	return p, rawUsage(resp), body, false, nil
}

// fromRecorded reads a recorded response {message, usage?, finishReason?} (-replay) and its
// usage figures.
func fromRecorded(response json.RawMessage) (parsed, providerUsage, error) {
	var p parsed
	if err := json.Unmarshal(response, &p); err != nil {
		return p, providerUsage{}, err
	}
	return p, usageFigures(p.Usage), nil
}

// usageFigures turns a library Usage into the report's figures.
func usageFigures(u *llmsession.Usage) providerUsage {
	if u == nil {
		return providerUsage{}
	}
	return providerUsage{prompt: int(u.PromptTokens()), cached: int(u.CachedTokens()), completion: int(u.OutputTokens)}
}

// rawUsageFigures is usageFigures of a Usage in JSON (a summariser's reply).
func rawUsageFigures(usage json.RawMessage) providerUsage {
	var u llmsession.Usage
	if len(usage) == 0 || json.Unmarshal(usage, &u) != nil {
		return providerUsage{}
	}
	return usageFigures(&u)
}

// replaySummary answers a summarisation request from the recorded log (-replay).
func (h *host) replaySummary(in llmsession.SummaryInput) (llmsession.SummaryOutput, error) {
	ans, err := h.replay.AnswerOf(in.Request)
	if err != nil {
		return llmsession.SummaryOutput{}, err
	}
	if ans.Outcome != "summary" || ans.Summary == nil {
		return llmsession.SummaryOutput{}, fmt.Errorf("recorded summarisation request %s: %s %s", ans.ID, ans.Outcome, ans.Error)
	}
	u := rawUsageFigures(ans.Summary.Usage)
	count := messageCount(in.Request)
	fmt.Printf("  [summary, recorded] prompt %d tokens, cached %d, shared leading messages %d of %d\n", u.prompt, u.cached, in.SharedMessages, count)
	h.rep.add(row{Kind: kindSummary, PromptTokens: u.prompt, CachedTokens: u.cached, CompletionTokens: u.completion,
		SharedMessages: in.SharedMessages, MessageCount: count, PrefixLen: in.PrefixLen})
	return *ans.Summary, nil
}

// compactionsLanded is the instance's count of landed compactions.
func (h *host) compactionsLanded() int {
	b, err := h.a.Stats()
	if err != nil {
		return 0
	}
	var s struct {
		Compactions int `json:"compactions"`
	}
	_ = json.Unmarshal(b, &s)
	return s.Compactions
}

func main() {
	baseURL := flag.String("base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible base URL, e.g. http://127.0.0.1:8766/v1")
	model := flag.String("model", "default", "model name sent with every request")
	logPath := flag.String("log", "", "session log (JSONL); empty: in memory")
	prefixDir := flag.String("prefix-dir", "", "directory whose files become the session prefix")
	window := flag.Int("context-window", 0, "context window for the compaction policy (0: no automatic compaction)")
	threshold := flag.Float64("threshold", 0.5, "compaction threshold, a fraction of -context-window")
	retained := flag.Int("retained-tokens", 0, "tokens of recent history kept verbatim by compaction (0: the policy's default)")
	summaryMax := flag.Int("summary-max-tokens", 256, "output limit of the summarisation request")
	system := flag.String("system", "You are a helpful, concise assistant.", "system prompt")
	maxTokens := flag.Int("max-tokens", 256, "maximum tokens per answer")
	compact := flag.Bool("compact", false, "compact once after the last turn (with the same model)")
	timeout := flag.Duration("timeout", 5*time.Minute, "time limit for the whole run")
	script := flag.String("script", "", "JSON file {\"turns\":[{\"user\",\"readFile\"?}]}: the user turns (instead of arguments)")
	workspace := flag.String("workspace", "", "offer a read_file tool over this folder")
	temperature := flag.Float64("temperature", -1, "sampling temperature sent with every request (negative: not sent)")
	seed := flag.Int("seed", -1, "seed sent with every request (negative: not sent)")
	peer := flag.Bool("peer-summary", false, "after each summarisation request, send the peer-style request for the same summary")
	llama := flag.Bool("llama", false, "the server is llama.cpp's llama-server: also measure system + tools + prefix in tokens")
	report := flag.String("report", "", "write a JSON report of every request to this file")
	checkReport := flag.String("check-report", "", "check a report against the end-to-end rules (docs/demo.md) and exit")
	streamFlag := flag.String("stream", "", "stream the requests of these turns: all, even, odd, or a list such as 2,5,8")
	replayLog := flag.String("replay", "", "answer every request from this recorded session log instead of a server (offline)")
	idleTTL := flag.Duration("idle-ttl", 0, "after the turns, pause with the cache clock, llama-server given this TTL (0: no pause; idle.go)")
	idleMargin := flag.Duration("idle-margin", 5*time.Second, "how long before expiry the cache clock acts during the pause")
	idleAfter := flag.Int("idle-after", 0, "the pause comes after this scripted turn (0: after the last one, then -idle-return)")
	idleReturn := flag.String("idle-return", "I am back. What was the plan again?", "the user's turn after a pause that follows the last scripted turn")
	flag.Parse()
	if *checkReport != "" {
		os.Exit(runCheck(*checkReport))
	}
	if *baseURL == "" && *replayLog == "" {
		fmt.Fprintln(os.Stderr, "example: -base-url (or -replay LOG) is required")
		os.Exit(2)
	}
	spec, err := parseStreamSpec(*streamFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(2)
	}
	var turns []turnSpec
	if *script != "" {
		var err error
		if turns, err = loadScript(*script); err != nil {
			fmt.Fprintln(os.Stderr, "example:", err)
			os.Exit(2)
		}
	}
	for _, p := range flag.Args() {
		turns = append(turns, turnSpec{User: p})
	}
	cfg, sampling := callConfig(*model, *maxTokens, *temperature, *seed)
	h := &host{
		c:         &client{baseURL: *baseURL, apiKey: os.Getenv("OPENAI_API_KEY"), http: &http.Client{}},
		workspace: *workspace,
		sampling:  sampling,
		peer:      *peer,
		llama:     *llama,
		stream:    spec,
		rep:       &recorder{},
	}
	h.rep.StreamTurns = *streamFlag
	if *idleTTL > 0 {
		h.idle = &idleSpec{ttl: *idleTTL, margin: *idleMargin, after: *idleAfter, back: turnSpec{User: *idleReturn}}
	}
	if *replayLog != "" {
		r, err := llmsession.OpenReplay(*replayLog)
		if err != nil {
			fmt.Fprintln(os.Stderr, "example:", err)
			os.Exit(1)
		}
		defer r.Close()
		h.replay, h.peer, h.llama = r, false, false
	}
	err = h.run(cfg, *logPath, *prefixDir, *system, *window, *threshold, *retained, *summaryMax, *compact, *timeout, turns)
	if *report != "" {
		if werr := h.rep.write(*report, *logPath, err); werr != nil {
			fmt.Fprintln(os.Stderr, "example: report:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	h.rep.printTable(os.Stdout)
	h.rep.printIdle(os.Stdout)
}

// callConfig is the call config of every request, and the sampling fields the host adds to
// a body that lacks them (negative temperature or seed: not sent).
func callConfig(model string, maxTokens int, temperature float64, seed int) (cfg, sampling map[string]any) {
	cfg = map[string]any{"provider": "openai", "model": model, "maxTokens": maxTokens}
	sampling = map[string]any{}
	if temperature >= 0 {
		cfg["temperature"] = temperature
		sampling["temperature"] = temperature
	}
	if seed >= 0 {
		cfg["seed"] = seed // an unknown config field: passed through into every body
		sampling["seed"] = seed
	}
	return cfg, sampling
}

func (h *host) run(cfg map[string]any, logPath, prefixDir, system string, window int, threshold float64, retained, summaryMax int,
	compact bool, timeout time.Duration, turns []turnSpec) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var s *llmsession.Session
	var err error
	var sopts *llmsession.SessionOptions
	if h.replay != nil {
		// Every request carries the session id: the offline session takes the recorded one.
		info, err := h.replay.Info()
		if err != nil {
			return err
		}
		var i struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(info, &i)
		sopts = &llmsession.SessionOptions{ID: i.SessionID}
	}
	if logPath != "" {
		s, err = llmsession.OpenFile(logPath, sopts)
	} else {
		s, err = llmsession.NewMemorySession(sopts)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	opts := map[string]any{"config": cfg, "system": system}
	if h.workspace != "" {
		opts["tools"] = []llmsession.Tool{readFileTool}
	}
	if window > 0 {
		policy := map[string]any{"contextWindow": window, "threshold": threshold, "summaryMaxTokens": summaryMax}
		if retained > 0 {
			policy["retainedTokens"] = retained
		}
		opts["policy"] = policy
	}
	a, err := llmsession.NewAgent(s, opts)
	if err != nil {
		return err
	}
	defer a.Close()
	h.a = a
	if prefixDir != "" {
		if err := a.AddPrefixListener(prefixFromDir(prefixDir)); err != nil {
			return err
		}
	}
	if err := a.SetSummariser(h.summariser()); err != nil {
		return err
	}

	if len(turns) == 0 {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				turns = append(turns, turnSpec{User: t})
			}
		}
	}
	pause := h.idle != nil && h.replay == nil
	for i, t := range turns {
		fmt.Printf("user: %s\n", oneLine(t.User, 160))
		if err := h.runTurn(ctx, t); err != nil {
			return err
		}
		if pause && h.idle.pausesAfter(i+1, len(turns)) {
			if err := h.idlePause(ctx); err != nil {
				return err
			}
			if i+1 == len(turns) {
				fmt.Printf("user: %s\n", oneLine(h.idle.back.User, 160))
				if err := h.runTurn(ctx, h.idle.back); err != nil {
					return err
				}
			}
		}
	}
	if compact {
		out, err := a.Compact(ctx, nil)
		var le *llmsession.Error
		switch {
		case errors.As(err, &le) && le.Code == llmsession.StatusSummariser:
			// The compaction ran and was rejected (e.g. a summary not smaller than the span):
			// logged as failed, the conversation is unchanged.
			fmt.Printf("compaction failed: %s\n", le.Message)
		case err != nil:
			return fmt.Errorf("compaction: %w", err)
		default:
			fmt.Printf("compaction: %s\n", out)
		}
	}
	stats, _ := a.Stats()
	fmt.Printf("agent stats: %s\n", stats)
	h.rep.Landed = h.compactionsLanded()
	v, err := s.Verify()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	fmt.Printf("verify: %s\n", v)
	h.rep.Verified = true
	ex, err := s.Explain(nil)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if err := h.rep.attachExplain(ex); err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if h.idle != nil {
		// The pause priced at the clock's prices and TTL.
		rules, _ := json.Marshal(map[string]any{"openai": map[string]any{"ttlSeconds": int64(h.idle.ttl / time.Second)}})
		ex, err := s.Explain(&llmsession.ExplainOptions{Prices: idlePrices, CacheRules: rules})
		if err == nil {
			err = h.rep.attachIdleGap(ex)
		}
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
	}
	if h.replay != nil {
		info, _ := h.replay.Info()
		var i struct {
			Requests int `json:"requests"`
			Answered int `json:"answered"`
		}
		_ = json.Unmarshal(info, &i)
		if i.Answered != i.Requests {
			return fmt.Errorf("replay: the host sent %d of the %d recorded requests", i.Answered, i.Requests)
		}
		fmt.Printf("replay: all %d recorded requests were sent again, byte for byte, and answered\n", i.Answered)
	}
	return nil
}
