package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// leakCheck fails the test when library handles created during it are still live at its end.
func leakCheck(t *testing.T) {
	before := LiveHandleCount()
	t.Cleanup(func() {
		if after := LiveHandleCount(); after != before {
			t.Errorf("live library handles: %d before, %d after (a leak)", before, after)
		}
	})
}

var testOpts = map[string]any{"config": map[string]any{"provider": "test", "model": "m1"}, "system": "You are terse."}

func newPair(t *testing.T) (*Session, *Agent) {
	t.Helper()
	s, err := NewMemorySession(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAgent(s, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); s.Close() })
	return s, a
}

func text(s string) map[string]any {
	return map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": s}}}
}

func respond(t *testing.T, a *Agent, s string) {
	t.Helper()
	msg := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": s}}}
	if _, err := a.RecordResponse(map[string]any{"message": msg}); err != nil {
		t.Fatal(err)
	}
}

// turn runs one whole turn: start, request, response, end.
func turn(t *testing.T, a *Agent, user, answer string) *Request {
	t.Helper()
	if _, err := a.StartTurn(user); err != nil {
		t.Fatal(err)
	}
	r, err := a.NextRequest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	respond(t, a, answer)
	if err := a.EndTurn("completed"); err != nil {
		t.Fatal(err)
	}
	return r
}

func lastEvent(t *testing.T, s *Session) map[string]any {
	t.Helper()
	b, err := s.Events(0, -1)
	if err != nil {
		t.Fatal(err)
	}
	var evs []map[string]any
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	return evs[len(evs)-1]
}

func TestVersionAndABI(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(Version(), "0.") {
		t.Errorf("version %q", Version())
	}
}

// Status names come from the library (lls_status_name): the same word an error's detail
// carries as kind, "status(N)" for a value the library does not define.
func TestStatusNamesComeFromTheLibrary(t *testing.T) {
	for s, want := range map[Status]string{
		StatusOK: "ok", StatusCorruptLog: "corrupt-log", StatusReadOnly: "read-only",
		StatusInvalidHandle: "invalid-handle", StatusOutOfMemory: "out-of-memory", statusClosed: "closed",
		StatusNonconforming: "nonconforming", 22: "status(22)", 99: "status(99)", 999: "status(999)", -7: "status(-7)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", int32(s), got, want)
		}
	}
	if got := ErrCorruptLog.Error(); got != "llmsession: corrupt-log" {
		t.Errorf("ErrCorruptLog.Error() = %q", got)
	}

	// An error from a failing call: its Kind is the detail's, and the library's name of its code.
	path := filepath.Join(t.TempDir(), "junk.jsonl")
	if err := os.WriteFile(path, []byte("junk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenFile(path, nil)
	var le *Error
	if !errors.As(err, &le) || le.Code != StatusCorruptLog || le.Kind != "corrupt-log" || le.Kind != le.Code.String() {
		t.Fatalf("opening a junk log: %v", err)
	}
	if !strings.HasPrefix(le.Error(), "llmsession: [corrupt-log] ") {
		t.Errorf("error text %q", le.Error())
	}
}

func TestErrorsCarryStatus(t *testing.T) {
	leakCheck(t)
	s, err := NewMemorySession(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	_, err = NewAgent(s, json.RawMessage(`{"config": `))
	var le *Error
	if !errors.As(err, &le) || le.Code != StatusMalformedJSON || le.Kind != "malformed-json" {
		t.Fatalf("malformed options: %v", err)
	}
	if !errors.Is(err, ErrMalformedJSON) || errors.Is(err, ErrInvalidInput) {
		t.Errorf("errors.Is on %v", err)
	}
	if le.Field("line") == nil {
		t.Errorf("detail without line: %s", le.Detail)
	}

	_, err = NewAgent(s, map[string]any{"config": map[string]any{"provider": "p"}})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(fmt.Sprint(err.(*Error).Field("field")), "model") {
		t.Errorf("missing model: %v (%s)", err, err.(*Error).Detail)
	}

	a, err := NewAgent(s, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := NewAgent(s, testOpts); !errors.Is(err, ErrBusy) {
		t.Errorf("second agent: %v", err)
	}
	if _, err := a.NextRequest(context.Background()); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("request without a turn: %v", err)
	}
	if _, err := a.StartTurn("hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("again"); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("second turn: %v", err)
	}
	if _, err := a.RecordToolResult(map[string]any{"callId": "nope", "text": "x"}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("unknown call id: %v", err)
	}
	if err := a.SetPolicy(map[string]any{"contextWindow": 0}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("invalid policy: %v", err)
	}
	if err := a.Dispose(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("after"); !errors.Is(err, ErrDisposed) {
		t.Errorf("after dispose: %v", err)
	}
	a.Close()
	if _, err := a.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	if _, err := Render("nope", []byte(`{}`), 0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("unknown renderer: %v", err)
	}
}

func TestCallbackErrorIsTheCause(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	mine := errors.New("the plugin is offline")
	if err := a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
		return nil, mine
	}); err != nil {
		t.Fatal(err)
	}
	a.StartTurn("hi")
	_, err := a.NextRequest(context.Background())
	if !errors.Is(err, ErrListener) || !errors.Is(err, mine) || !strings.Contains(err.Error(), "the plugin is offline") {
		t.Fatalf("got %v", err)
	}
}

type panicValue struct{ n int }

func TestPanicInCallbackIsReRaised(t *testing.T) {
	leakCheck(t)
	// Through lls_callback_invoke (no session).
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		InvokeCallback(context.Background(), func(ctx context.Context, in json.RawMessage) (any, error) {
			panic("boom")
		}, []byte(`{}`))
		t.Error("InvokeCallback returned after a panic")
	}()

	// Through an agent operation: the original value comes back after the call returned.
	s, a := newPair(t)
	calls := 0
	a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
		calls++
		if calls == 1 {
			panic(&panicValue{7})
		}
		return in.Rest, nil
	})
	a.StartTurn("hi")
	func() {
		defer func() {
			v := recover()
			if p, ok := v.(*panicValue); !ok || p.n != 7 {
				t.Errorf("recovered %v", v)
			}
		}()
		a.NextRequest(context.Background())
	}()
	// The library saw a failed callback: the turn ended with an error; the agent goes on.
	if ev := lastEvent(t, s); ev["type"] != "turn/end" || ev["data"].(map[string]any)["reason"] != "error" {
		t.Errorf("last event %v", ev)
	}
	turn(t, a, "again", "fine")
}

func TestContextCancelsComposition(t *testing.T) {
	leakCheck(t)
	s, a := newPair(t)
	started := make(chan *Reply, 1)
	answered := make(chan struct{})
	a.AddPrefixListenerAsync(func(ctx context.Context, in PrefixInput, r *Reply) {
		go func() {
			defer close(answered)
			started <- r
			<-ctx.Done() // done once the operation's token has tripped
			// The library stopped waiting; the reply must still be answered (and is discarded).
			if err := r.Complete([]any{}); err != nil {
				t.Errorf("late answer: %v", err)
			}
		}()
	})
	a.StartTurn("hi")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := a.NextRequest(ctx)
	<-answered
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if ev := lastEvent(t, s); ev["data"].(map[string]any)["reason"] != "aborted" {
		t.Errorf("last event %v", ev)
	}
}

func TestCancelTokenFromCallback(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	c, err := NewCancel()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a.AddPreStepListener(func(ctx context.Context, in PreStepInput) error { return c.Trip() })
	a.StartTurn("hi")
	if _, err := a.NextRequest(WithCancel(context.Background(), c)); !errors.Is(err, ErrCancelled) {
		t.Fatalf("got %v", err)
	}
	if !c.Tripped() {
		t.Error("token not tripped")
	}
}

// compactable gives an agent with two finished turns and an async summariser.
func compactable(t *testing.T, s AsyncSummariser) (*Session, *Agent) {
	ses, a := newPair(t)
	if err := a.SetSummariserAsync(s); err != nil {
		t.Fatal(err)
	}
	turn(t, a, strings.Repeat("read the logs ", 200), strings.Repeat("the logs are fine ", 200))
	turn(t, a, "and now?", "done")
	return ses, a
}

func TestContextCancelsSummarisation(t *testing.T) {
	leakCheck(t)
	started := make(chan *Reply, 1)
	answered := make(chan struct{})
	_, a := compactable(t, func(ctx context.Context, in SummaryInput, r *Reply) {
		go func() {
			defer close(answered)
			started <- r
			<-ctx.Done() // the operation's context: done when it is cancelled
			r.Fail(ctx.Err())
		}()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := a.Compact(ctx, nil)
	<-answered
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestPendingReplyFromAnotherGoroutine(t *testing.T) {
	leakCheck(t)
	var replies sync.WaitGroup
	defer replies.Wait()
	var seen SummaryInput
	s, a := compactable(t, func(ctx context.Context, in SummaryInput, r *Reply) {
		seen = in
		replies.Add(1)
		go func() {
			defer replies.Done()
			r.Complete(SummaryOutput{Text: "The user asked about logs; they are fine."})
		}()
	})
	res, err := a.CompactOf(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeLanded || len(res.Seqs) == 0 || res.Request.Digest == "" || res.Span[1] < res.Span[0] {
		t.Fatalf("outcome %s", res.Raw)
	}
	if !strings.Contains(string(seen.Request), "compaction") {
		t.Errorf("summary request %s", seen.Request)
	}
	if h, _ := s.History(); !strings.Contains(string(h), "they are fine") {
		t.Errorf("history %s", h)
	}
	// A pending reply answered twice: the second answer is refused.
	got, err := InvokeCallbackAsync(context.Background(), func(ctx context.Context, in json.RawMessage, r *Reply) {
		replies.Add(1)
		go func() {
			defer replies.Done()
			r.Complete(map[string]any{"echo": in})
			if err := r.Complete(1); !errors.Is(err, ErrReplyState) {
				t.Errorf("second answer: %v", err)
			}
		}()
	}, []byte(`{"x":1}`))
	if err != nil || string(got) != `{"echo":{"x":1}}` {
		t.Errorf("invoke: %s %v", got, err)
	}
}

func TestDisposeFromAnotherGoroutineEndsAWait(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	started := make(chan *Reply, 1)
	a.AddPrefixListenerAsync(func(ctx context.Context, in PrefixInput, r *Reply) { started <- r })
	a.StartTurn("hi")
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := <-started
		if err := a.Dispose(); err != nil {
			t.Errorf("dispose: %v", err)
		}
		r.Complete([]any{})
	}()
	if _, err := a.NextRequest(context.Background()); !errors.Is(err, ErrDisposed) {
		t.Fatalf("got %v", err)
	}
	<-done
}

func TestListenersTokenCounterAndStore(t *testing.T) {
	leakCheck(t)
	var mu sync.Mutex
	records := []string{}
	s, err := OpenStore(func(ctx context.Context, req json.RawMessage) (any, error) {
		var r struct {
			Op      string   `json:"op"`
			Records []string `json:"records"`
			Header  *string  `json:"header"`
		}
		if err := json.Unmarshal(req, &r); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.Op {
		case "load":
			return map[string]any{"records": records}, nil
		case "append":
			if r.Header != nil {
				records = append(records, *r.Header)
			}
			records = append(records, r.Records...)
		}
		return true, nil
	}, &SessionOptions{ID: "stored"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := NewAgent(s, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
		m, _ := json.Marshal(text("project notes"))
		return append([]json.RawMessage{m}, in.Rest...), nil
	})
	var steps int
	a.AddPreStepListener(func(ctx context.Context, in PreStepInput) error {
		steps++
		if len(in.Prefix) != 1 {
			t.Errorf("pre-step prefix %v", in.Prefix)
		}
		_, err := s.AppendContext(text("plugin context"))
		return err
	})
	a.SetTokenCounter(func(ctx context.Context, item json.RawMessage) (int, error) { return len(item) / 4, nil })
	r := turn(t, a, "hello", "hi")
	if r.Info.PrefixLen != 1 || !strings.Contains(string(r.Envelope), "plugin context") || steps != 1 {
		t.Errorf("request %+v %s", r.Info, r.Envelope)
	}
	m, err := a.Measure(context.Background())
	if err != nil || !strings.Contains(string(m), `"counter":"host"`) {
		t.Errorf("measure %s %v", m, err)
	}
	mu.Lock()
	n := len(records)
	mu.Unlock()
	if n < 5 {
		t.Errorf("store holds %d records", n)
	}
	for i, rec := range records[:n] {
		if !json.Valid([]byte(rec)) {
			t.Errorf("stored record %d is not JSON: %q", i, rec)
		}
	}
	if _, err := s.Verify(); err != nil {
		t.Error(err)
	}
	body, err := Render("openai", r.Envelope, r.Info.PrefixLen)
	if err != nil || !strings.Contains(string(body), `"messages"`) {
		t.Errorf("render %s %v", body, err)
	}
}

func TestConcurrentAgents(t *testing.T) {
	leakCheck(t)
	var wg, replies sync.WaitGroup
	defer replies.Wait()
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s, err := NewMemorySession(nil)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			a, err := NewAgent(s, testOpts)
			if err != nil {
				errs <- err
				return
			}
			defer a.Close()
			a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
				m, _ := json.Marshal(text(fmt.Sprintf("notes of agent %d", g)))
				return append([]json.RawMessage{m}, in.Rest...), nil
			})
			a.SetSummariserAsync(func(ctx context.Context, in SummaryInput, r *Reply) {
				// lls_reply_complete may still be returning when the library call has
				// returned: the leak check waits for it.
				replies.Add(1)
				go func() { defer replies.Done(); r.Complete(SummaryOutput{Text: "short"}) }()
			})
			for i := 0; i < 5; i++ {
				if _, err := a.StartTurn(fmt.Sprintf("question %d %s", i, strings.Repeat("x ", 100))); err != nil {
					errs <- err
					return
				}
				r, err := a.NextRequest(context.Background())
				if err != nil {
					errs <- err
					return
				}
				if !strings.Contains(string(r.Envelope), fmt.Sprintf("notes of agent %d", g)) {
					errs <- fmt.Errorf("agent %d got another prefix", g)
				}
				msg := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "answer"}}}
				if _, err := a.RecordResponse(map[string]any{"message": msg}); err != nil {
					errs <- err
					return
				}
				a.EndTurn("completed")
			}
			if _, err := a.Compact(context.Background(), nil); err != nil {
				errs <- err
			}
			if _, err := s.Verify(); err != nil {
				errs <- err
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSharedAgentAcrossGoroutines(t *testing.T) {
	leakCheck(t)
	s, a := newPair(t)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				a.Stats()
				s.History()
				a.Inject("context from a goroutine")
			}
		}()
	}
	wg.Wait()
	turn(t, a, "hi", "ok")
}

func TestPanicInSummariserAndAsyncCallback(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	a.SetSummariser(func(ctx context.Context, in SummaryInput) (SummaryOutput, error) {
		panic(fmt.Errorf("summariser exploded"))
	})
	turn(t, a, strings.Repeat("long question ", 100), strings.Repeat("long answer ", 100))
	turn(t, a, "short", "ok")
	func() {
		defer func() {
			if v, ok := recover().(error); !ok || v.Error() != "summariser exploded" {
				t.Errorf("recovered %v", v)
			}
		}()
		a.Compact(context.Background(), nil)
		t.Error("Compact returned after a panic")
	}()
	// Panicking before handing the reply off: the reply is failed, the panic re-raised.
	func() {
		defer func() {
			if v := recover(); v != 42 {
				t.Errorf("recovered %v", v)
			}
		}()
		InvokeCallbackAsync(context.Background(), func(ctx context.Context, in json.RawMessage, r *Reply) { panic(42) }, []byte(`1`))
	}()
}

func TestNextRequestViewLendsTheEnvelope(t *testing.T) {
	leakCheck(t)
	_, a := newPair(t)
	if _, err := a.StartTurn("look at the view"); err != nil {
		t.Fatal(err)
	}
	var kept []byte
	var info RequestInfo
	err := a.NextRequestView(context.Background(), func(env []byte, ri RequestInfo) error {
		kept = append([]byte(nil), env...)
		info = ri
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != info.Bytes || info.Step != 1 || info.Digest == "" {
		t.Fatalf("envelope of %d bytes, info %+v", len(kept), info)
	}
	var env struct {
		Messages []struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(kept, &env); err != nil {
		t.Fatal(err)
	}
	if got := env.Messages[len(env.Messages)-1].Content[0].Text; got != "look at the view" {
		t.Fatalf("last message %q", got)
	}
	// The view's error comes back as is; the request was built (its step is open).
	respond(t, a, "ok")
	if err := a.EndTurn("completed"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("again"); err != nil {
		t.Fatal(err)
	}
	mine := errors.New("the host's own failure")
	if err := a.NextRequestView(context.Background(), func([]byte, RequestInfo) error { return mine }); err != mine {
		t.Fatalf("got %v, want the view's error", err)
	}
	if ri, err := a.RequestInfo(); err != nil || ri.Step != 1 || ri.Turn != 2 {
		t.Fatalf("request info %+v, %v", ri, err)
	}
	// Out of order: the view is not called.
	called := false
	if err := a.NextRequestView(context.Background(), func([]byte, RequestInfo) error { called = true; return nil }); !errors.Is(err, ErrOutOfOrder) || called {
		t.Fatalf("got %v (view called: %v), want ErrOutOfOrder", err, called)
	}
}
