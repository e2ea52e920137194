// Command example drives an llmsession agent against any OpenAI-compatible chat completions
// endpoint (OpenAI, DeepSeek, vLLM, llama.cpp's llama-server, ...).
//
//	example -base-url http://127.0.0.1:8766/v1 -model m -log session.jsonl \
//	        -prefix-dir notes/ -context-window 4096 "first question" "second question"
//
// Every file in -prefix-dir becomes one message of the session prefix (through a prefix
// listener). Each positional argument is one user turn (without any, one turn per line of
// standard input). Requests are rendered by the library ("openai" renderer), sent with
// net/http, and their responses parsed by the library. Compaction (automatic, once the prompt
// nears -context-window, or forced with -compact) asks the same endpoint for the summary,
// sending the summarisation request the library built. Per request it prints the prompt
// tokens, the cached tokens and the leading messages shared with the previous request.
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.baseURL, "/")+"/chat/completions", bytes.NewReader(body))
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

// parsed is what the library's response parser gives.
type parsed struct {
	Message      json.RawMessage `json:"message"`
	Usage        json.RawMessage `json:"usage"`
	FinishReason string          `json:"finishReason"`
}

// rawUsage reads the provider's own usage figures (for the per-request report).
func rawUsage(body []byte) (prompt, cached int) {
	var r struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Timings struct {
			CacheN int `json:"cache_n"`
		} `json:"timings"`
	}
	_ = json.Unmarshal(body, &r)
	cached = r.Usage.PromptTokensDetails.CachedTokens
	if cached == 0 {
		cached = r.Timings.CacheN // llama.cpp without prompt_tokens_details
	}
	return r.Usage.PromptTokens, cached
}

// parse turns a response body into the message and usage to record; it uses the library's
// parser and maps usage itself when the body lacks what the library needs.
func parse(body []byte) (parsed, error) {
	var p parsed
	out, err := llmsession.ParseResponse("openai", body)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(out, &p); err != nil {
		return p, err
	}
	if len(p.Usage) == 0 {
		// inputTokens is the uncached part; cached tokens are reported separately.
		prompt, cached := rawUsage(body)
		var r struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(body, &r)
		if prompt > 0 {
			p.Usage, _ = json.Marshal(map[string]any{"inputTokens": prompt - cached, "cacheReadTokens": cached, "outputTokens": r.Usage.CompletionTokens})
		}
	}
	return p, nil
}

func textOf(message json.RawMessage) string {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(message, &m)
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func toolCalls(message json.RawMessage) []string {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"content"`
	}
	_ = json.Unmarshal(message, &m)
	var ids []string
	for _, c := range m.Content {
		if c.Type == "tool-call" {
			ids = append(ids, c.ID)
		}
	}
	return ids
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

// summariser compacts with the session's own model: it renders the library's summarisation
// request (which replays the last request's prefix, so the provider's cache hits) and sends it.
func summariser(c *client) llmsession.Summariser {
	return func(ctx context.Context, in llmsession.SummaryInput) (llmsession.SummaryOutput, error) {
		body, err := llmsession.Render("openai", in.Request, in.PrefixLen)
		if err != nil {
			return llmsession.SummaryOutput{}, err
		}
		status, resp, err := c.post(ctx, body)
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
		prompt, cached := rawUsage(resp)
		fmt.Printf("  [summary] prompt %d tokens, cached %d, shared leading messages %d\n", prompt, cached, in.SharedMessages)
		return llmsession.SummaryOutput{Text: textOf(p.Message), Usage: p.Usage, Truncated: p.FinishReason == "max-tokens"}, nil
	}
}

// runTurn runs one user turn to its end.
func runTurn(ctx context.Context, c *client, a *llmsession.Agent, prompt string) error {
	if _, err := a.StartTurn(prompt); err != nil {
		return err
	}
	for {
		r, err := a.NextRequest(ctx)
		if err != nil {
			return err // the library has ended the turn (aborted / error)
		}
		body, err := llmsession.Render("openai", r.Envelope, r.Info.PrefixLen)
		if err != nil {
			a.EndTurn("error")
			return err
		}
		status, resp, err := c.post(ctx, body)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(resp))
		}
		if err != nil {
			overflow := status != 0 && llmsession.IsContextOverflow(status, resp)
			retry, perr := a.ProviderError(ctx, err.Error(), overflow)
			if perr == nil && retry {
				fmt.Println("  context overflow: compacted, retrying")
				continue
			}
			a.EndTurn("error")
			return errors.Join(err, perr)
		}
		p, err := parse(resp)
		if err != nil {
			a.EndTurn("error")
			return err
		}
		prompt, cached := rawUsage(resp)
		fmt.Printf("  [request turn %d step %d] prompt %d tokens, cached %d, shared leading messages %d of %d\n",
			r.Info.Turn, r.Info.Step, prompt, cached, r.Info.SharedMessages, r.Info.MessageCount)
		rec := map[string]any{"message": p.Message}
		if len(p.Usage) > 0 {
			rec["usage"] = p.Usage
		}
		if _, err := a.RecordResponse(rec); err != nil {
			a.EndTurn("error")
			return err
		}
		if t := textOf(p.Message); t != "" {
			fmt.Printf("assistant: %s\n", strings.TrimSpace(t))
		}
		calls := toolCalls(p.Message)
		if len(calls) == 0 {
			reason := "completed"
			if p.FinishReason == "max-tokens" {
				reason = "max-tokens"
			}
			return a.EndTurn(reason)
		}
		for _, id := range calls { // this example offers no tools
			if _, err := a.RecordToolResult(map[string]any{"callId": id, "text": "no tools are available", "isError": true}); err != nil {
				return err
			}
		}
	}
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
	flag.Parse()
	if *baseURL == "" {
		fmt.Fprintln(os.Stderr, "example: -base-url is required")
		os.Exit(2)
	}
	if err := run(*baseURL, *model, *logPath, *prefixDir, *system, *window, *threshold, *retained, *summaryMax, *maxTokens, *compact, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(baseURL, model, logPath, prefixDir, system string, window int, threshold float64, retained, summaryMax, maxTokens int, compact bool, timeout time.Duration, prompts []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &client{baseURL: baseURL, apiKey: os.Getenv("OPENAI_API_KEY"), http: &http.Client{}}

	var s *llmsession.Session
	var err error
	if logPath != "" {
		s, err = llmsession.OpenFile(logPath, nil)
	} else {
		s, err = llmsession.NewMemorySession(nil)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	opts := map[string]any{
		"config": map[string]any{"provider": "openai", "model": model, "maxTokens": maxTokens},
		"system": system,
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
	if prefixDir != "" {
		if err := a.AddPrefixListener(prefixFromDir(prefixDir)); err != nil {
			return err
		}
	}
	if err := a.SetSummariser(summariser(c)); err != nil {
		return err
	}

	if len(prompts) == 0 {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				prompts = append(prompts, t)
			}
		}
	}
	for _, p := range prompts {
		fmt.Printf("user: %s\n", p)
		if err := runTurn(ctx, c, a, p); err != nil {
			return err
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
	v, err := s.Verify()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	fmt.Printf("verify: %s\n", v)
	return nil
}
