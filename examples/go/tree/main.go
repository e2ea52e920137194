// Command tree runs an agent tree against an OpenAI-compatible server (llama-server in
// `make e2e`): a lead agent reads five files of the demo's workspace, then hands two tasks to
// two child agents that run in parallel, each in a goroutine of its own. Each child's first
// request is the lead's last request extended by the lead's tool calls, one placeholder result
// per call and the child's directive, so the server reads it from the cache the lead left. The
// children's answers become the lead's tool results (in call order, whichever finishes first);
// the lead goes on; then the first child is woken from its log, as another process would, and
// asked one more question.
//
//	tree -base-url http://127.0.0.1:8766/v1 -dir build/e2e/tree -prefix-dir examples/go/demo/prefix \
//	     -workspace examples/go/demo/workspace -report build/e2e/tree/report.json -min-read 0.95
//
// It prints, per request, the prompt tokens and those the server read from its cache
// (`prompt_tokens_details.cached_tokens`, or llama-server's `timings.cache_n`); with -min-read
// it fails when a child's first request, or the woken child's, read less than that share. The
// logs (DIR/lead.jsonl and the children beside it, DIR/lead.task_1.jsonl, ...) are what
// `llmsession tree` and `llmsession explain --tree` read. See docs/demo.md ("The agent tree").
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// figures are the server's own numbers for one request.
type figures struct {
	Node         string  `json:"node"`
	What         string  `json:"what"`
	PromptTokens int     `json:"promptTokens"`
	CachedTokens int     `json:"cachedTokens"`
	Read         float64 `json:"read"`
	Checked      bool    `json:"checked"` // held to -min-read
}

func readUsage(body []byte) (prompt, cached int) {
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
		cached = r.Timings.CacheN
	}
	return r.Usage.PromptTokens, cached
}

type runner struct {
	baseURL string
	http    *http.Client
	mu      sync.Mutex
	rows    []figures
}

func (r *runner) post(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(r.baseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, err
}

// step sends the agent's next request and returns the model's reply (not yet recorded).
func (r *runner) step(ctx context.Context, a *llmsession.Agent, node, what string, checked bool) (*llmsession.Response, error) {
	b, err := a.NextBody(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := r.post(ctx, b.Bytes)
	if err != nil {
		_, _ = a.ProviderError(ctx, err.Error(), false)
		return nil, err
	}
	p, err := llmsession.ParseResponseOf("openai", resp)
	if err != nil {
		return nil, err
	}
	prompt, cached := readUsage(resp)
	f := figures{Node: node, What: what, PromptTokens: prompt, CachedTokens: cached, Checked: checked}
	if prompt > 0 {
		f.Read = float64(cached) / float64(prompt)
	}
	r.mu.Lock()
	r.rows = append(r.rows, f)
	r.mu.Unlock()
	fmt.Printf("  [%s, %s] prompt %d tokens, %d read from cache (%.1f%%), %d messages\n", node, what, prompt, cached, 100*f.Read, b.Info.MessageCount)
	return p, nil
}

// prefixOf composes the session prefix from the files of dir, one user message each.
func prefixOf(dir string) llmsession.PrefixListener {
	return func(ctx context.Context, in llmsession.PrefixInput) ([]json.RawMessage, error) {
		names, err := filepath.Glob(filepath.Join(dir, "*.md"))
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
		out := make([]json.RawMessage, 0, len(names)+len(in.Rest))
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			m, _ := json.Marshal(llmsession.UserText(fmt.Sprintf("<file name=%q>\n%s</file>", filepath.Base(n), b)))
			out = append(out, m)
		}
		return append(out, in.Rest...), nil
	}
}

func textOf(m llmsession.Message) string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" && b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, " ")
}

func run() error {
	baseURL := flag.String("base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible base URL, e.g. http://127.0.0.1:8766/v1")
	model := flag.String("model", "default", "model name sent with every request")
	dir := flag.String("dir", "", "where the logs go (DIR/lead.jsonl and the children beside it); it must not hold them yet")
	prefixDir := flag.String("prefix-dir", "", "directory whose *.md files become the lead's session prefix")
	workspace := flag.String("workspace", "", "the folder the lead reads five files of")
	maxTokens := flag.Int("max-tokens", 24, "maximum tokens per answer")
	reportPath := flag.String("report", "", "write the figures of every request (JSON) to this file")
	minRead := flag.Float64("min-read", 0, "fail when a child's first request, or the woken child's, reads less than this share from the cache")
	timeout := flag.Duration("timeout", 20*time.Minute, "time limit for the whole run")
	flag.Parse()
	if *baseURL == "" || *dir == "" || *workspace == "" {
		return errors.New("usage: tree -base-url URL -dir DIR -workspace DIR [-prefix-dir DIR] [-report FILE] [-min-read 0.95]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	leadPath := filepath.Join(*dir, "lead.jsonl")
	r := &runner{baseURL: *baseURL, http: &http.Client{Timeout: 5 * time.Minute}}

	// ---- the lead ----------------------------------------------------------------------------
	s, err := llmsession.OpenFile(leadPath, &llmsession.SessionOptions{ID: "lead"})
	if err != nil {
		return err
	}
	defer s.Close()
	tool := func(name, desc string) map[string]any {
		return map[string]any{"name": name, "description": desc, "parameters": map[string]any{
			"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string"}}, "required": []string{"arg"}}}
	}
	a, err := llmsession.NewAgent(s, map[string]any{
		// Greedy sampling with a fixed seed (seed is passed through into every body).
		"config": map[string]any{"provider": "openai", "model": *model, "maxTokens": *maxTokens, "temperature": 0, "seed": 7},
		"system": "You are the lead of a small team of coding agents working in the weather-cli repository. Read what you need, then hand tasks to subagents with the task tool. Answer briefly.",
		"tools":  []any{tool("read_file", "Read a file of the repository"), tool("task", "Hand a task to a subagent")},
	})
	if err != nil {
		return err
	}
	defer a.Close()
	if *prefixDir != "" {
		if err := a.AddPrefixListener(prefixOf(*prefixDir)); err != nil {
			return err
		}
	}
	if err := a.SetRenderer("openai", nil); err != nil {
		return err
	}
	fmt.Println("lead: reads five files of the workspace, then hands out two tasks")
	if _, err := a.StartTurn("Issues #12 (Fahrenheit rounding) and #15 (no HTTP timeout) need fixing. Read the code, then hand each issue to a subagent."); err != nil {
		return err
	}
	p, err := r.step(ctx, a, "lead", "reads the code", false)
	if err != nil {
		return err
	}
	// Host-scripted tool rounds (a 135M model does not call tools reliably): the reply gets the
	// calls a lead would make, as the demo's host does.
	files := []string{"units/units.go", "units/units_test.go", "forecast/forecast.go", "forecast/forecast_test.go", "render/table.go"}
	msg := p.Message
	for i, f := range files {
		args, _ := json.Marshal(map[string]string{"arg": f})
		msg.Content = append(msg.Content, llmsession.ToolCallBlock(fmt.Sprintf("read_%d", i+1), "read_file", string(args)))
	}
	if _, err := a.RecordResponse(llmsession.Response{Message: msg, Usage: p.Usage}); err != nil {
		return err
	}
	for i, f := range files {
		b, err := os.ReadFile(filepath.Join(*workspace, f))
		if err != nil {
			return err
		}
		if _, err := a.RecordToolResult(llmsession.ToolResult{CallID: fmt.Sprintf("read_%d", i+1), Text: string(b)}); err != nil {
			return err
		}
	}
	p, err = r.step(ctx, a, "lead", "plans the tasks", false)
	if err != nil {
		return err
	}
	tasks := []struct{ id, directive string }{
		{"task_1", "Fix issue #12: make units.ToFahrenheit round to one decimal. Say which lines change."},
		{"task_2", "Fix issue #15: give forecast.Fetch a default HTTP timeout. Say which lines change."},
	}
	msg = p.Message
	for i, t := range tasks {
		args, _ := json.Marshal(map[string]string{"arg": fmt.Sprintf("issue #%d", []int{12, 15}[i])})
		msg.Content = append(msg.Content, llmsession.ToolCallBlock(t.id, "task", string(args)))
	}
	if _, err := a.RecordResponse(llmsession.Response{Message: msg, Usage: p.Usage}); err != nil {
		return err
	}

	// ---- two children, in parallel -------------------------------------------------------------
	type child struct {
		s       *llmsession.Session
		a       *llmsession.Agent
		outcome llmsession.ChildOutcome
		err     error
	}
	kids := make([]*child, len(tasks))
	for i, t := range tasks {
		cs, ca, err := a.Spawn(llmsession.SpawnOptions{CallID: t.id, Directive: t.directive})
		if err != nil {
			return err
		}
		kids[i] = &child{s: cs, a: ca}
	}
	var wg sync.WaitGroup
	for i, k := range kids {
		wg.Add(1)
		go func(i int, k *child) {
			defer wg.Done()
			id, _ := k.s.ID()
			p, err := r.step(ctx, k.a, id, "first request", true)
			if err == nil {
				_, err = k.a.RecordResponse(*p)
			}
			if err != nil {
				k.outcome, k.err = a.FinishChild(k.a, err.Error())
				k.err = errors.Join(err, k.err)
				return
			}
			k.outcome, k.err = a.FinishChild(k.a, "")
			if k.err == nil {
				fmt.Printf("  %s answered %s (%d result(s) logged now): %q\n", id, k.outcome.CallID, k.outcome.Recorded, k.outcome.Answer)
			}
		}(i, k)
	}
	wg.Wait()
	for _, k := range kids {
		if k.err != nil {
			return k.err
		}
	}

	// ---- the lead goes on ---------------------------------------------------------------------
	p, err = r.step(ctx, a, "lead", "reads the answers", false)
	if err != nil {
		return err
	}
	if _, err := a.RecordResponse(*p); err != nil {
		return err
	}
	if err := a.EndTurn("completed"); err != nil {
		return err
	}
	fmt.Printf("lead: %s\n", textOf(p.Message))

	// ---- the first child, woken from its log ----------------------------------------------------
	first, _ := kids[0].s.ID()
	for _, k := range kids {
		k.a.Close()
		k.s.Close()
	}
	path := filepath.Join(*dir, "lead.task_1.jsonl")
	ws, err := llmsession.OpenFile(path, nil)
	if err != nil {
		return err
	}
	defer ws.Close()
	w, err := llmsession.WakeAgent(ws, nil)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.SetRenderer("openai", nil); err != nil {
		return err
	}
	fmt.Printf("%s: woken from %s after the lead went on\n", first, path)
	if _, err := w.StartTurn("Does your fix change any test?"); err != nil {
		return err
	}
	p, err = r.step(ctx, w, first, "woken", true)
	if err != nil {
		return err
	}
	if _, err := w.RecordResponse(*p); err != nil {
		return err
	}
	if err := w.EndTurn("completed"); err != nil {
		return err
	}
	for _, sess := range []*llmsession.Session{s, ws} {
		if _, err := sess.Verify(); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
	}
	if *reportPath != "" {
		b, _ := json.MarshalIndent(r.rows, "", "  ")
		if err := os.WriteFile(*reportPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	var low []string
	for _, f := range r.rows {
		if f.Checked && f.Read < *minRead {
			low = append(low, fmt.Sprintf("%s (%s): %.1f%%", f.Node, f.What, 100*f.Read))
		}
	}
	if len(low) > 0 {
		return fmt.Errorf("read less than %.0f%% of the prompt from the cache: %s", 100**minRead, strings.Join(low, "; "))
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tree:", err)
		os.Exit(1)
	}
}
