package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// Request kinds in the report.
const (
	kindConversation = "conversation" // a request of a turn
	kindSummary      = "summary"      // the library's summarisation request
	kindPeer         = "peer-summary" // the peer-style request for the same summary
)

// row is one request sent to the server, with the provider's figures.
type row struct {
	Kind     string `json:"kind"`
	Instance uint64 `json:"instance,omitempty"`
	Turn     uint64 `json:"turn,omitempty"`
	Step     uint64 `json:"step,omitempty"`
	// PromptTokens, CachedTokens and CompletionTokens are the server's usage figures
	// (prompt_tokens, prompt_tokens_details.cached_tokens, completion_tokens).
	PromptTokens     int `json:"promptTokens"`
	CachedTokens     int `json:"cachedTokens"`
	CompletionTokens int `json:"completionTokens"`
	// SharedMessages is the library's count of leading messages shared with the previous
	// request (for a summary: with the last routed request); MessageCount and PrefixLen
	// describe the request's messages (PrefixLen = session prefix messages).
	SharedMessages int    `json:"sharedMessages"`
	MessageCount   int    `json:"messageCount"`
	PrefixLen      int    `json:"prefixLen"`
	FinishReason   string `json:"finishReason,omitempty"`
	// AfterCompaction is "landed" or "failed" for the first request built after a compaction ran
	// (in the gate), "idle" after the cache clock's idle compaction (idle.go).
	AfterCompaction string `json:"afterCompaction,omitempty"`
	// PrefixTokens (-llama) is the token length of system + tools + session prefix, measured on
	// the first request of an instance and on the first request after a compaction.
	PrefixTokens int `json:"prefixTokens,omitempty"`
	// ToolCall names the host-scripted tool call added to this request's reply.
	ToolCall string `json:"toolCall,omitempty"`
	// Streamed: the request was sent with "stream": true; Deltas is how many deltas the
	// library's stream accumulator gave, DeltaTextMatches whether their text, put together,
	// equals the text of the recorded message.
	Streamed         bool `json:"streamed,omitempty"`
	Deltas           int  `json:"deltas,omitempty"`
	DeltaTextMatches bool `json:"deltaTextMatches,omitempty"`
	// Logged is the usage recorded in the log with the response (conversation requests).
	Logged *loggedUsage `json:"logged,omitempty"`
	// Explain is what llmsession explain says of this request (conversation and summary rows;
	// absent for the peer-style request, which the library did not build).
	Explain *explained `json:"explain,omitempty"`
}

// explained is one request of llmsession's explanation of the log (Session.Explain).
type explained struct {
	ID string `json:"id"`
	// ComparedWith is the earlier request it shares its cacheable prefix with ("" for the
	// first); Extends says that it extends that request whole.
	ComparedWith string `json:"comparedWith,omitempty"`
	Extends      bool   `json:"extends"`
	SharedTokens int    `json:"sharedTokens"`
	// ExpectedCachedTokens is what the provider could have read from its cache.
	ExpectedCachedTokens int    `json:"expectedCachedTokens"`
	Cause                string `json:"cause"`
	// Divergence names where it parts from the earlier request ("" when it extends it).
	Divergence string `json:"divergence,omitempty"`
	// UncachedTokens are the prompt tokens the server did not read from its cache, and Causes
	// what explain charges them to (they sum to UncachedTokens).
	UncachedTokens int      `json:"uncachedTokens"`
	Causes         []charge `json:"causes,omitempty"`
}

// charge is the part of a request's uncached tokens explain charges to one cause.
type charge struct {
	Cause  string `json:"cause"`
	Tokens int    `json:"tokens"`
}

// loggedUsage is a recorded usage as prompt (uncached + cache read + cache write), cached
// (cache read) and completion tokens, comparable with the server's figures.
type loggedUsage struct {
	Prompt     int `json:"promptTokens"`
	Cached     int `json:"cachedTokens"`
	Completion int `json:"completionTokens"`
}

// report is what -report writes.
type report struct {
	Log string `json:"log,omitempty"`
	// StreamTurns is the -stream setting of the run ("" when nothing was streamed).
	StreamTurns string `json:"streamTurns,omitempty"`
	Error       string `json:"error,omitempty"`
	Verified    bool   `json:"verified"`
	Landed      int    `json:"compactionsLanded"`
	Requests    []row  `json:"requests"`
	// Spend is explain's uncached prompt tokens of the whole log by cause.
	Spend map[string]int `json:"spend,omitempty"`
	// Idle is the idle pause after the turns (-idle-ttl; idle.go).
	Idle *idleReport `json:"idle,omitempty"`
}

// recorder collects the rows of a run.
type recorder struct {
	report
}

func (r *recorder) add(x row) { r.Requests = append(r.Requests, x) }

func (r *recorder) summaries() int {
	n := 0
	for _, x := range r.Requests {
		if x.Kind == kindSummary {
			n++
		}
	}
	return n
}

// firstOf reports whether no conversation request of instance was recorded yet.
func (r *recorder) firstOf(instance uint64) bool {
	for _, x := range r.Requests {
		if x.Kind == kindConversation && x.Instance == instance {
			return false
		}
	}
	return true
}

// attachExplain puts llmsession's explanation of the log beside the rows: its requests (in log
// order) are the conversation and summary rows, in the order they were sent.
func (r *recorder) attachExplain(ex json.RawMessage) error {
	var e struct {
		Requests []struct {
			explained
			Kind       string `json:"kind"`
			Divergence *struct {
				Component string `json:"component"`
				Summary   string `json:"summary"`
			} `json:"divergence"`
		} `json:"requests"`
		Totals struct {
			Spend map[string]int `json:"spend"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(ex, &e); err != nil {
		return err
	}
	r.Spend = e.Totals.Spend
	// The cache clock's keep-warm requests (idle.go) have no row of their own.
	kept := e.Requests[:0]
	for _, q := range e.Requests {
		if q.Kind != "keepalive" {
			kept = append(kept, q)
		}
	}
	e.Requests = kept
	k := 0
	for i := range r.Requests {
		x := &r.Requests[i]
		if x.Kind == kindPeer {
			continue
		}
		if k >= len(e.Requests) {
			return fmt.Errorf("the log explains %d requests, the host sent more", len(e.Requests))
		}
		q := e.Requests[k]
		k++
		if want := map[string]string{kindConversation: "conversation", kindSummary: "compaction"}[x.Kind]; q.Kind != want {
			return fmt.Errorf("request %d is a %s request, the log's request %s a %s one", i+1, x.Kind, q.ID, q.Kind)
		}
		ex := q.explained
		if q.Divergence != nil {
			ex.Divergence = q.Divergence.Summary
		}
		x.Explain = &ex
	}
	if k != len(e.Requests) {
		return fmt.Errorf("the log explains %d requests, the host sent %d", len(e.Requests), k)
	}
	return nil
}

func (r *recorder) write(path, logPath string, runErr error) error {
	r.Log = logPath
	if runErr != nil {
		r.Error = runErr.Error()
	}
	b, err := json.MarshalIndent(r.report, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// withArticle is "a landed", "a failed", "an idle".
func withArticle(word string) string {
	if strings.HasPrefix(word, "i") {
		return "an " + word
	}
	return "a " + word
}

func pct(cached, prompt int) string {
	if prompt == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", float64(cached)*100/float64(prompt))
}

// printTable prints every request, then each summarisation request beside its peer-style twin.
func (r *recorder) printTable(w io.Writer) {
	fmt.Fprintf(w, "\nrequests (prompt and cached tokens as the server reported them; expected: llmsession explain's cacheable tokens;\n")
	fmt.Fprintf(w, "hit: cached / prompt; of exp.: cached / expected)\n")
	fmt.Fprintf(w, "%3s  %-20s %7s %7s %7s %8s %8s  %-13s %s\n", "#", "request", "prompt", "cached", "hit", "expected", "of exp.", "shared msgs", "note")
	prev := map[uint64]int{}
	for i, x := range r.Requests {
		name, shared, note := "", fmt.Sprintf("%d of %d", x.SharedMessages, x.MessageCount), ""
		switch x.Kind {
		case kindConversation:
			name = fmt.Sprintf("turn %d step %d", x.Turn, x.Step)
			p, seen := prev[x.Instance]
			switch {
			case !seen:
				note = "first request of the instance (cold)"
				if x.PrefixTokens > 0 {
					note += fmt.Sprintf("; system+tools+prefix = %d tokens", x.PrefixTokens)
				}
			case x.AfterCompaction != "":
				note = "after " + withArticle(x.AfterCompaction) + " compaction: history rewritten"
				if x.PrefixTokens > 0 {
					note += fmt.Sprintf("; system+tools+prefix = %d tokens", x.PrefixTokens)
				}
			default:
				note = fmt.Sprintf("previous prompt %d", p)
			}
			if x.ToolCall != "" {
				note += "; reply + host tool call " + x.ToolCall
			}
			if x.Streamed {
				note += "; streamed"
			}
			prev[x.Instance] = x.PromptTokens
		case kindSummary:
			name = "summarisation"
			note = "the library's request: prefix + region + instruction"
		case kindPeer:
			name = "  peer-style summary"
			shared = "-"
			note = "own system prompt + flattened transcript"
		}
		expected, ofExpected := "-", "-"
		if x.Explain != nil {
			expected = fmt.Sprint(x.Explain.ExpectedCachedTokens)
			ofExpected = pct(x.CachedTokens, x.Explain.ExpectedCachedTokens)
		}
		fmt.Fprintf(w, "%3d  %-20s %7d %7d %7s %8s %8s  %-13s %s\n", i+1, name, x.PromptTokens, x.CachedTokens, pct(x.CachedTokens, x.PromptTokens), expected, ofExpected, shared, note)
	}
	// What explain charges every uncached prompt token to (docs/caching.md, "Cache economics").
	fmt.Fprintf(w, "\nuncached prompt tokens by cause (llmsession explain; they sum to prompt - cached)\n")
	for i, x := range r.Requests {
		if x.Explain == nil {
			continue
		}
		var parts []string
		for _, c := range x.Explain.Causes {
			parts = append(parts, fmt.Sprintf("%s %d", c.Cause, c.Tokens))
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Fprintf(w, "%3d  %-6s %7d  %s\n", i+1, x.Explain.ID, x.Explain.UncachedTokens, strings.Join(parts, ", "))
	}
	if len(r.Spend) > 0 {
		var parts []string
		for _, k := range []string{"growth", "header-change", "resume", "compaction", "retry-after-overflow", "inject", "edit", "context-edit", "expiry", "below-minimum", "unexplained"} {
			if n := r.Spend[k]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, n))
			}
		}
		fmt.Fprintf(w, "session: %s\n", strings.Join(parts, ", "))
	}
	n := 0
	for i, x := range r.Requests {
		if x.Kind != kindSummary {
			continue
		}
		n++
		fmt.Fprintf(w, "\ncompaction summary request %d, same summary asked for two ways:\n", n)
		fmt.Fprintf(w, "  llmsession (replays the last request's prefix): prompt %5d, cached %5d (%s), uncached %5d\n",
			x.PromptTokens, x.CachedTokens, pct(x.CachedTokens, x.PromptTokens), x.PromptTokens-x.CachedTokens)
		if i+1 < len(r.Requests) && r.Requests[i+1].Kind == kindPeer {
			y := r.Requests[i+1]
			fmt.Fprintf(w, "  peer-style (own system prompt, transcript):      prompt %5d, cached %5d (%s), uncached %5d\n",
				y.PromptTokens, y.CachedTokens, pct(y.CachedTokens, y.PromptTokens), y.PromptTokens-y.CachedTokens)
		}
	}
}

// peerMaxTokens caps the reply of the peer-style request, which is not used.
const peerMaxTokens = 16

// peerSystem is the system prompt of the peer-style summarisation request: a harness that has
// a dedicated summariser call, which sees the conversation as one flattened transcript.
const peerSystem = "You are a summarisation assistant. You receive the transcript of a conversation between a " +
	"user and a coding agent, and you write the checkpoint that the instructions after the transcript ask for."

// flatten writes the messages of an envelope as a plain-text transcript.
func flatten(messages []json.RawMessage) string {
	var b strings.Builder
	for _, raw := range messages {
		var m struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				Text      string `json:"text"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
				Content   []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		for _, c := range m.Content {
			switch c.Type {
			case "text":
				fmt.Fprintf(&b, "[%s]\n%s\n\n", m.Role, c.Text)
			case "tool-call":
				fmt.Fprintf(&b, "[%s calls %s %s]\n\n", m.Role, c.Name, c.Arguments)
			case "tool-result":
				var parts []string
				for _, t := range c.Content {
					if t.Type == "text" {
						parts = append(parts, t.Text)
					}
				}
				fmt.Fprintf(&b, "[tool result]\n%s\n\n", strings.Join(parts, "\n"))
			}
		}
	}
	return b.String()
}

// peerSummary sends the summary request a harness without a shared prefix would send for the
// same compaction: its own system prompt, no tools, and one user message holding the same
// messages (session prefix and region) as a flattened transcript, then the same instruction.
func (h *host) peerSummary(ctx context.Context, in llmsession.SummaryInput) error {
	var env struct {
		Model     string            `json:"model"`
		MaxTokens *int              `json:"maxTokens"`
		Messages  []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(in.Request, &env); err != nil {
		return err
	}
	if len(env.Messages) == 0 {
		return fmt.Errorf("the summarisation request has no messages")
	}
	last := len(env.Messages) - 1
	var lastMsg llmsession.Message
	if err := json.Unmarshal(env.Messages[last], &lastMsg); err != nil {
		return err
	}
	instruction := textOf(lastMsg)
	user := "Transcript:\n\n" + flatten(env.Messages[:last]) + "Instructions:\n\n" + instruction
	body := map[string]any{
		"model":    env.Model,
		"messages": []any{map[string]any{"role": "system", "content": peerSystem}, map[string]any{"role": "user", "content": user}},
	}
	// Only the prompt figures are compared and the reply is thrown away, so the output is
	// capped (peerMaxTokens) instead of the summary budget: this saves minutes on a CPU.
	body["max_tokens"] = peerMaxTokens
	if env.MaxTokens != nil && *env.MaxTokens < peerMaxTokens {
		body["max_tokens"] = *env.MaxTokens
	}
	for k, v := range h.sampling {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	status, resp, err := h.c.post(ctx, b)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", status, resp)
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(resp, &r)
	finish := ""
	if len(r.Choices) > 0 {
		finish = r.Choices[0].FinishReason
	}
	u := rawUsage(resp)
	fmt.Printf("  [peer-style summary] prompt %d tokens, cached %d, reply %d tokens (%s)\n", u.prompt, u.cached, u.completion, finish)
	h.rep.add(row{Kind: kindPeer, PromptTokens: u.prompt, CachedTokens: u.cached, CompletionTokens: u.completion, MessageCount: 2, FinishReason: finish})
	return nil
}
