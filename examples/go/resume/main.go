// Command resume is one worker of a session kept in PostgreSQL: it opens the session named by
// a store URL, runs its user turns against an OpenAI-compatible endpoint, and exits. Run it
// twice, as two workers on two machines would (another process, another working directory):
// the second resumes where the first stopped, and its first request starts with the first
// worker's whole conversation, so the provider reads that prompt from its cache.
//
//	resume -store 'postgres://user:pw@db:5432/app?session=ticket-42' -worker A \
//	       -base-url http://127.0.0.1:8766/v1 "first question" "second question"
//	resume -store 'postgres://user:pw@db:5432/app?session=ticket-42' -worker B -must-exist \
//	       -base-url http://127.0.0.1:8766/v1 "third question"
//
// For each request it prints the prompt tokens and those the server read from its cache
// (`prompt_tokens_details.cached_tokens`, or llama-server's `timings.cache_n`); -report appends
// one JSON line per request to a file. The store URL may also be a file: path. See
// docs/storage-postgres.md ("Resuming on another machine").
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
	"strings"
	"time"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// usage is the provider's own figures for one request.
type usage struct {
	Prompt, Cached, Completion int
}

func readUsage(body []byte) usage {
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
	u := usage{Prompt: r.Usage.PromptTokens, Cached: r.Usage.PromptTokensDetails.CachedTokens, Completion: r.Usage.CompletionTokens}
	if u.Cached == 0 {
		u.Cached = r.Timings.CacheN
	}
	return u
}

// reportRow is one line of -report.
type reportRow struct {
	Worker       string `json:"worker"`
	Session      string `json:"session"`
	Turn         uint64 `json:"turn"`
	Step         uint64 `json:"step"`
	Messages     int    `json:"messages"`
	PromptTokens int    `json:"promptTokens"`
	CachedTokens int    `json:"cachedTokens"`
	Cwd          string `json:"cwd"`
	Pid          int    `json:"pid"`
}

type worker struct {
	name    string
	baseURL string
	http    *http.Client
	report  *os.File
	session string
}

func (w *worker) post(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(w.baseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if k := os.Getenv("OPENAI_API_KEY"); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := w.http.Do(req)
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

// turn runs one user turn (no tools: one request, one answer).
func (w *worker) turn(ctx context.Context, a *llmsession.Agent, text string) error {
	if _, err := a.StartTurn(text); err != nil {
		return err
	}
	r, err := a.NextRequest(ctx)
	if err != nil {
		return err
	}
	body, err := llmsession.Render("openai", r.Envelope, r.Info.PrefixLen)
	var resp []byte
	if err == nil {
		resp, err = w.post(ctx, body)
	}
	if err != nil {
		return errors.Join(err, a.EndTurn("error"))
	}
	p, err := llmsession.ParseResponseOf("openai", resp)
	if err != nil {
		return errors.Join(err, a.EndTurn("error"))
	}
	u := readUsage(resp)
	fmt.Printf("worker %s: turn %d: prompt %d tokens, %d read from cache, %d messages\n", w.name, r.Info.Turn, u.Prompt, u.Cached, r.Info.MessageCount)
	if w.report != nil {
		cwd, _ := os.Getwd()
		line, _ := json.Marshal(reportRow{Worker: w.name, Session: w.session, Turn: r.Info.Turn, Step: r.Info.Step, Messages: r.Info.MessageCount,
			PromptTokens: u.Prompt, CachedTokens: u.Cached, Cwd: cwd, Pid: os.Getpid()})
		if _, err := fmt.Fprintf(w.report, "%s\n", line); err != nil {
			return err
		}
	}
	if _, err := a.RecordResponse(p); err != nil {
		return errors.Join(err, a.EndTurn("error"))
	}
	reason := "completed"
	if p.FinishReason == llmsession.FinishMaxTokens {
		reason = "max-tokens"
	}
	return a.EndTurn(reason)
}

func run() error {
	store := flag.String("store", os.Getenv("LLMSESSION_STORE"), "store URL: postgres://user:pw@host:port/db?session=ID (or file:PATH)")
	name := flag.String("worker", "A", "a name for this worker, printed with its figures")
	baseURL := flag.String("base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible base URL, e.g. http://127.0.0.1:8766/v1")
	model := flag.String("model", "default", "model name sent with every request")
	system := flag.String("system", "You are a helpful, concise assistant.", "system prompt")
	maxTokens := flag.Int("max-tokens", 48, "maximum tokens per answer")
	mustExist := flag.Bool("must-exist", false, "resume only: fail when the store holds no such session")
	reportPath := flag.String("report", "", "append one JSON line per request to this file")
	timeout := flag.Duration("timeout", 5*time.Minute, "time limit for the whole run")
	flag.Parse()
	if *store == "" || *baseURL == "" || flag.NArg() == 0 {
		return errors.New("usage: resume -store URL -base-url URL [-worker NAME] [-must-exist] TURN...")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// One writer at a time: a second worker on the same session gets ErrLocked until this one
	// exits (its lease goes with its connection).
	s, err := llmsession.OpenURL(*store, &llmsession.URLOptions{MustExist: *mustExist})
	if errors.Is(err, llmsession.ErrLocked) {
		return fmt.Errorf("another worker is running this session: %w", err)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	id, _ := s.ID()
	stats, _ := s.Stats()
	fmt.Printf("worker %s (pid %d): session %s opened: %s\n", *name, os.Getpid(), id, stats)

	a, err := llmsession.NewAgent(s, map[string]any{
		// Greedy sampling with a fixed seed: both workers send the same config (an unknown
		// config field such as seed is passed through into every body).
		"config": map[string]any{"provider": "openai", "model": *model, "maxTokens": *maxTokens, "temperature": 0, "seed": 7},
		"system": *system,
	})
	if err != nil {
		return err
	}
	defer a.Close()
	w := &worker{name: *name, baseURL: *baseURL, session: id, http: &http.Client{Timeout: 3 * time.Minute}}
	if *reportPath != "" {
		f, err := os.OpenFile(*reportPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		w.report = f
	}
	for _, t := range flag.Args() {
		if err := w.turn(ctx, a, t); err != nil {
			return err
		}
	}
	if _, err := s.Verify(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "resume:", err)
		os.Exit(1)
	}
}
