package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The concurrency test of issue #11, through the Go binding and under `go test -race`:
// concurrencyWorkers goroutines each drive agents on their own session for a number of turns
// (tool calls, automatic compaction). The prefix listener and the summariser are asynchronous:
// they hand their Reply to service goroutines, which complete it. A chaos goroutine trips the
// running operation's Cancel of a random worker, and now and then disposes a worker's agent
// from outside; the worker then takes a new instance over the same session. A watchdog ends
// the process (with every goroutine's stack) if the test does not finish, so a deadlock fails
// instead of hanging. At the end every log verifies and no library handle is left.
//
// LLMSESSION_GO_CONCURRENCY_TURNS sets the turns per worker (default 1000; `make test` runs
// the default).

const concurrencyWorkers = 8

// The watchdog's limit: generous, it only turns a deadlock into a failure.
const concurrencyWatchdog = 15 * time.Minute

type concWorker struct {
	id      int
	session *Session
	agent   atomic.Pointer[Agent]
	cancel  atomic.Pointer[Cancel]
	calls   int
	// Turns that completed, and turns that ended otherwise (cancelled, disposed).
	completed, otherwise int
	instances            int
	// NewAgent calls refused with ErrBusy right after a disposal from another goroutine.
	busy int
}

type replyJob struct {
	r    *Reply
	prep func() any
}

func concurrencyTurns(t *testing.T) int {
	if v := os.Getenv("LLMSESSION_GO_CONCURRENCY_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("LLMSESSION_GO_CONCURRENCY_TURNS=%q: expected a positive number", v)
		}
		return n
	}
	return 1000
}

var concPolicy = map[string]any{"contextWindow": 6000, "threshold": 0.5, "retainedTokens": 300, "summaryMaxTokens": 400}

var concOpts = map[string]any{
	"config": map[string]any{"provider": "p", "model": "m"},
	"system": "You are a careful agent.",
	"tools":  []any{map[string]any{"name": "read", "description": "Read a file", "parameters": map[string]any{"type": "object"}}},
	"policy": concPolicy,
}

// newInstance creates an agent over w.session with the asynchronous callbacks. Right after a
// disposal from another goroutine the session may still be held for a moment (ErrBusy): retry.
func (w *concWorker) newInstance(jobs chan<- replyJob) (*Agent, error) {
	var a *Agent
	for {
		var err error
		a, err = NewAgent(w.session, concOpts)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBusy) {
			return nil, err
		}
		w.busy++
		runtime.Gosched()
	}
	w.instances++
	s := w.session
	if err := a.AddPrefixListenerAsync(func(ctx context.Context, in PrefixInput, r *Reply) {
		jobs <- replyJob{r: r, prep: func() any {
			return append([]json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"text","text":"workspace: /src"}]}`)}, in.Rest...)
		}}
	}); err != nil {
		return nil, err
	}
	if err := a.AddPreStepListener(func(ctx context.Context, in PreStepInput) error {
		if in.Step == 2 && in.Turn%7 == 0 {
			_, err := s.AppendContext(UserText(fmt.Sprintf("note for turn %d", in.Turn)))
			return err
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := a.SetSummariserAsync(func(ctx context.Context, in SummaryInput, r *Reply) {
		jobs <- replyJob{r: r, prep: func() any {
			return SummaryOutput{Text: fmt.Sprintf("SUMMARY of %d shared messages", in.SharedMessages), Usage: json.RawMessage(`{"inputTokens":50,"outputTokens":20}`)}
		}}
	}); err != nil {
		return nil, err
	}
	w.agent.Store(a)
	return a, nil
}

// turn runs one turn; an error ends it (the caller ends the turn otherwise).
func (w *concWorker) turn(a *Agent, n int) error {
	c, err := NewCancel()
	if err != nil {
		return err
	}
	w.cancel.Store(c)
	defer func() {
		w.cancel.Store(nil)
		c.Close()
	}()
	ctx := WithCancel(context.Background(), c)
	if _, err := a.StartTurn(fmt.Sprintf("turn %d: read two files", n)); err != nil {
		return err
	}
	if _, err := a.NextRequest(ctx); err != nil {
		return err
	}
	w.calls++
	id1, id2 := fmt.Sprintf("w%d-c%d-a", w.id, w.calls), fmt.Sprintf("w%d-c%d-b", w.id, w.calls)
	call := func(id string) map[string]any {
		return map[string]any{"type": "tool-call", "id": id, "name": "read", "arguments": `{"path":"f"}`}
	}
	resp := map[string]any{"message": map[string]any{"role": "assistant", "content": []any{call(id1), call(id2)}},
		"usage": map[string]any{"inputTokens": 100 + n, "outputTokens": 10, "cacheReadTokens": 50}}
	if _, err := a.RecordResponse(resp); err != nil {
		return err
	}
	// Results in reverse order.
	for _, id := range []string{id2, id1} {
		if _, err := a.RecordToolResult(map[string]any{"callId": id, "text": fmt.Sprintf("%s: %0400d", id, n)}); err != nil {
			return err
		}
	}
	if _, err := a.NextRequest(ctx); err != nil {
		return err
	}
	if _, err := a.RecordResponse(map[string]any{"message": map[string]any{"role": "assistant",
		"content": []any{map[string]any{"type": "text", "text": "done"}}}}); err != nil {
		return err
	}
	return a.EndTurn("completed")
}

func (w *concWorker) run(turns int, jobs chan<- replyJob) error {
	a, err := w.newInstance(jobs)
	if err != nil {
		return err
	}
	for n := 1; n <= turns; n++ {
		err := w.turn(a, n)
		if err == nil {
			w.completed++
			continue
		}
		w.otherwise++
		switch {
		case errors.Is(err, ErrCancelled):
			// The turn may still be open (or already closed by the failed operation), and the
			// agent may have been disposed in the meantime.
			e := a.EndTurn("aborted")
			if e == nil || errors.Is(e, ErrOutOfOrder) {
				continue
			}
			if !errors.Is(e, ErrDisposed) {
				return fmt.Errorf("worker %d turn %d: end after a cancel: %w", w.id, n, e)
			}
			fallthrough
		case errors.Is(err, ErrDisposed):
			w.agent.Store(nil)
			a.Close()
			if a, err = w.newInstance(jobs); err != nil {
				return fmt.Errorf("worker %d turn %d: new instance: %w", w.id, n, err)
			}
		default:
			return fmt.Errorf("worker %d turn %d: %w", w.id, n, err)
		}
	}
	w.agent.Store(nil)
	return a.Close()
}

func TestConcurrencyAgentsCancelsAndDisposals(t *testing.T) {
	turns := concurrencyTurns(t)
	before := LiveHandleCount()
	finished := make(chan struct{})
	go func() {
		select {
		case <-finished:
		case <-time.After(concurrencyWatchdog):
			buf := make([]byte, 1<<22)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "watchdog: the concurrency test did not finish within %v (deadlock?)\n%s\n", concurrencyWatchdog, buf)
			os.Exit(2)
		}
	}()
	start := time.Now()

	// Service goroutines complete the asynchronous callbacks' replies.
	jobs := make(chan replyJob, 64)
	var services sync.WaitGroup
	var answered atomic.Int64
	for i := 0; i < 2; i++ {
		services.Add(1)
		go func() {
			defer services.Done()
			for j := range jobs {
				if err := j.r.Complete(j.prep()); err != nil {
					t.Errorf("completing a reply: %v", err)
				}
				answered.Add(1)
			}
		}()
	}

	workers := make([]*concWorker, concurrencyWorkers)
	for i := range workers {
		s, err := NewMemorySession(nil)
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = &concWorker{id: i, session: s}
	}

	// The chaos goroutine: trips a random worker's running operation; about one time in a
	// hundred it disposes the worker's agent from here instead.
	stop := make(chan struct{})
	var cancels, disposes atomic.Int64
	var chaos sync.WaitGroup
	chaos.Add(1)
	go func() {
		defer chaos.Done()
		rng := rand.New(rand.NewSource(11))
		for {
			select {
			case <-stop:
				return
			default:
			}
			w := workers[rng.Intn(len(workers))]
			if rng.Intn(100) == 0 {
				if a := w.agent.Load(); a != nil {
					if err := a.Dispose(); err == nil {
						disposes.Add(1)
					} else if !errors.Is(err, ErrClosed) {
						t.Errorf("dispose from the chaos goroutine: %v", err)
					}
				}
			} else if c := w.cancel.Load(); c != nil {
				if err := c.Trip(); err == nil {
					cancels.Add(1)
				} else if !errors.Is(err, ErrClosed) {
					t.Errorf("trip from the chaos goroutine: %v", err)
				}
			}
			// Let the workers make progress between two actions.
			for i := 0; i < 200; i++ {
				runtime.Gosched()
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Add(1)
		go func(i int, w *concWorker) {
			defer wg.Done()
			errs[i] = w.run(turns, jobs)
		}(i, w)
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	close(jobs)
	services.Wait()
	close(finished)

	completed, otherwise, instances, busy := 0, 0, 0, 0
	for i, w := range workers {
		if errs[i] != nil {
			t.Errorf("worker %d: %v", i, errs[i])
		}
		completed += w.completed
		otherwise += w.otherwise
		instances += w.instances
		busy += w.busy
		if _, err := w.session.Verify(); err != nil {
			t.Errorf("worker %d: the log does not verify: %v", i, err)
		}
		stats, err := w.session.Stats()
		if err != nil {
			t.Errorf("worker %d: stats: %v", i, err)
		}
		var st struct {
			Compactions int `json:"compactions"`
		}
		_ = json.Unmarshal(stats, &st)
		if turns >= 100 && st.Compactions == 0 {
			t.Errorf("worker %d: no compaction ran (stats %s)", i, stats)
		}
		w.session.Close()
	}
	if completed+otherwise != concurrencyWorkers*turns {
		t.Errorf("%d turns completed and %d ended otherwise, want %d in all", completed, otherwise, concurrencyWorkers*turns)
	}
	runtime.GC()
	if after := LiveHandleCount(); after != before {
		t.Errorf("live library handles: %d before, %d after", before, after)
	}
	t.Logf("%d workers x %d turns in %v: %d completed, %d ended otherwise; %d agent instances (%d ErrBusy retries); %d cancels and %d disposes from the chaos goroutine; %d async replies completed",
		concurrencyWorkers, turns, time.Since(start).Round(time.Millisecond), completed, otherwise, instances, busy, cancels.Load(), disposes.Load(), answered.Load())
}
