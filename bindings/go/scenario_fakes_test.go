package llmsession

// The declarative fakes of the shared scenario files (docs/scenarios.md, "Fakes") as Go funcs:
// prefix and pre-step listeners, the summariser, the host token counter, and a host store over
// a list of records. They act on the world the driver (scenarios_test.go) plays a scenario in,
// and journal what they receive for its transcript.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// fake is a declarative fake's spec and state.
type fake struct {
	index int // its position among the listeners (or pre-step listeners)
	spec  map[string]any
	mu    sync.Mutex
	calls int
	held  []json.RawMessage
}

func newFake(i int, v any) *fake {
	m, _ := v.(map[string]any)
	return &fake{index: i, spec: m, held: rawList(m["messages"])}
}

func (f *fake) str(key, def string) string {
	if s, ok := f.spec[key].(string); ok {
		return s
	}
	return def
}

// next counts a call and reports whether it behaves as its kind says (within "times").
func (f *fake) next() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	t, ok := count(f.spec["times"])
	return !ok || uint64(f.calls-1) < t
}

// effect does what an armed fake of kind k does besides answering: trips the cancel token,
// disposes the instance, or appends messages to the session as plugin or host context.
func (w *world) effect(k string, f *fake, a *Agent, s *Session) error {
	var msgs any
	source := "plugin"
	switch k {
	case "cancel":
		w.trip()
	case "dispose":
		w.mu.Lock()
		w.disposed = true
		w.mu.Unlock()
		return a.Dispose()
	case "append-event":
		msgs = f.spec["events"]
	case "inject":
		msgs = f.spec["messages"]
	case "append-during":
		msgs, source = f.spec["messages"], "host"
	}
	for _, m := range rawList(msgs) {
		ev := map[string]any{"type": "user/message", "data": map[string]any{"message": m, "source": source}, "surfaceOp": "append"}
		if _, err := s.Append(ev); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) prefixListener(f *fake, a *Agent, s *Session) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		w.journal(map[string]any{"callback": "prefix", "listener": f.index, "input": decode(raw)})
		var in PrefixInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		active, k := f.next(), f.str("kind", "delegate")
		f.mu.Lock()
		held := append([]json.RawMessage(nil), f.held...)
		f.mu.Unlock()
		if active {
			if err := w.effect(k, f, a, s); err != nil {
				return nil, err
			}
		}
		switch {
		case k == "append":
			return joinMsgs(in.Rest, held), nil
		case k == "delegate" || k == "dispose" && active:
			return joinMsgs(nil, in.Rest), nil
		case k == "fail" && active:
			return nil, errors.New(f.str("message", "listener failed"))
		case k == "invalid" && active:
			return json.Marshal(f.spec["output"])
		}
		return joinMsgs(held, in.Rest), nil
	}
}

func (w *world) preStep(f *fake, a *Agent, s *Session) PreStepListener {
	return func(ctx context.Context, in PreStepInput) error {
		active, k := f.next(), f.str("kind", "record")
		w.journal(map[string]any{"callback": "preStep", "listener": f.index, "input": decode(in.Raw)})
		switch {
		case !active:
			return nil
		case k == "fail":
			return errors.New("pre-step failed")
		}
		return w.effect(k, f, a, s)
	}
}

func (w *world) summariserFor(spec any, a *Agent, s *Session) Summariser {
	if spec == nil {
		spec = map[string]any{"kind": "fixed"}
	}
	f := newFake(0, spec)
	return func(ctx context.Context, in SummaryInput) (SummaryOutput, error) {
		var count any // the envelope's number of messages (null when it has none)
		if m, ok := asMap(decode(in.Request))["messages"].([]any); ok {
			count = len(m)
		}
		w.mu.Lock()
		w.summaries = append(w.summaries, append([]byte(nil), in.Request...))
		w.mu.Unlock()
		w.journal(map[string]any{"callback": "summariser", "input": map[string]any{
			"digest": in.Digest, "provider": in.Provider, "model": in.Model, "maxTokens": in.MaxTokens,
			"sharedMessages": in.SharedMessages, "prefixLen": in.PrefixLen, "bytes": len(in.Request), "messageCount": count}})
		active, k := f.next(), f.str("kind", "fixed")
		out := SummaryOutput{Text: f.str("text", "Summary of the work so far.")}
		if u, ok := f.spec["usage"]; ok {
			out.Usage, _ = json.Marshal(u)
		}
		if !active {
			return out, nil
		}
		switch k {
		case "fail":
			return out, errors.New("summariser unavailable")
		case "empty":
			out.Text = "   "
		case "truncated":
			out.Truncated = true
		case "long":
			out.Text = strings.Repeat("very long summary ", 20000)
		case "cancel":
			w.trip()
			return out, errors.New("cancelled")
		}
		return out, w.effect(k, f, a, s)
	}
}

// counterFor is a host token counter: the characters of the item's strings, per token.
func (w *world) counterFor(spec any, a *Agent, s *Session) TokenCounter {
	f := newFake(0, spec)
	per := 4
	if p, ok := count(f.spec["perToken"]); ok {
		per = max(int(p), 1)
	}
	return func(ctx context.Context, item json.RawMessage) (int, error) {
		w.mu.Lock()
		w.counterCalls++
		w.mu.Unlock()
		active, k := f.next(), f.str("kind", "chars")
		n := (stringChars(decode(item)) + per - 1) / per
		switch {
		case !active:
			return n, nil
		case k == "fail":
			return 0, errors.New("token counter failed")
		}
		return n, w.effect(k, f, a, s)
	}
}

// memStore is a host store over a list of records (what a database-backed host would do).
func memStore(initial []json.RawMessage) StoreFunc {
	var mu sync.Mutex
	var records []string
	for _, r := range initial {
		records = append(records, string(r))
	}
	return func(ctx context.Context, req json.RawMessage) (any, error) {
		var r struct {
			Op, Header      *string
			Records         []string
			Seq, From, Keep int
		}
		if err := json.Unmarshal(req, &r); err != nil || r.Op == nil {
			return nil, fmt.Errorf("bad store request %s", req)
		}
		mu.Lock()
		defer mu.Unlock()
		switch *r.Op {
		case "load":
			return map[string]any{"records": append([]string{}, records...)}, nil
		case "append": // conditional: seq must be the next one
			if (r.Header != nil) != (len(records) == 0) || (len(records) > 0 && r.Seq != len(records)-1) {
				return map[string]any{"conflict": fmt.Sprintf("seq %d is not the next one", r.Seq)}, nil
			}
			if r.Header != nil {
				records = append(records, *r.Header)
			}
			records = append(records, r.Records...)
		case "undo":
			records = records[:min(r.From, len(records))]
		case "cut":
			records = records[:min(r.Keep, len(records))]
		case "sync":
		default:
			return nil, fmt.Errorf("unknown store op %q", *r.Op)
		}
		return true, nil
	}
}

func rawList(v any) []json.RawMessage {
	out := []json.RawMessage{}
	for _, m := range asList(v) {
		b, _ := json.Marshal(m)
		out = append(out, b)
	}
	return out
}

func joinMsgs(a, b []json.RawMessage) json.RawMessage {
	out, _ := json.Marshal(append(append([]json.RawMessage{}, a...), b...))
	return out
}

// stringChars counts the characters of every string in a decoded JSON value (keys left out).
func stringChars(v any) int {
	n := 0
	switch x := v.(type) {
	case string:
		n = utf8.RuneCountInString(x)
	case []any:
		for _, e := range x {
			n += stringChars(e)
		}
	case map[string]any:
		for _, e := range x {
			n += stringChars(e)
		}
	}
	return n
}
