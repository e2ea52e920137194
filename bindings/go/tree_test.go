package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

// A parent with two tool calls spawns two children that run in goroutines of their own; they
// finish in any order, and the parent's results are logged in call order with the children's
// ids. Each child's first body extends the parent's last; the tree explains and verifies.
func TestSpawnTwoChildrenInParallel(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	s, a := newPair(t)
	if err := a.SetRenderer("openai", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("Fix both bugs."); err != nil {
		t.Fatal(err)
	}
	parentBody, err := a.NextBody(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]any{"role": "assistant", "content": []any{
		map[string]any{"type": "tool-call", "id": "c1", "name": "task", "arguments": `{"bug":1}`},
		map[string]any{"type": "tool-call", "id": "c2", "name": "task", "arguments": `{"bug":2}`},
	}}
	if _, err := a.RecordResponse(map[string]any{"message": calls}); err != nil {
		t.Fatal(err)
	}
	type kid struct {
		s *Session
		a *Agent
	}
	kids := make([]kid, 2)
	for i, c := range []string{"c1", "c2"} {
		cs, ca, err := a.Spawn(SpawnOptions{CallID: c, Directive: "Fix bug " + c + "."})
		if err != nil {
			t.Fatal(err)
		}
		kids[i] = kid{cs, ca}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outcomes := make([]ChildOutcome, 2)
	for i := range kids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			k := kids[i]
			body, err := k.a.NextBody(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			// The child's body starts with the parent's, up to the end of its conversation.
			pm := string(parentBody.Bytes)
			end := strings.Index(pm, `],"model"`)
			if end < 0 || !strings.HasPrefix(string(body.Bytes), pm[:end]) || !strings.Contains(string(body.Bytes), DefaultPlaceholder) {
				errs[i] = errors.New("the child's body does not extend the parent's: " + string(body.Bytes))
				return
			}
			msg := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "fixed " + []string{"one", "two"}[i]}}}
			if _, err := k.a.RecordResponse(map[string]any{"message": msg}); err != nil {
				errs[i] = err
				return
			}
			outcomes[i], errs[i] = a.FinishChild(k.a, "")
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if outcomes[0].Recorded+outcomes[1].Recorded != 2 || outcomes[0].Answer != "fixed one" || outcomes[1].CallID != "c2" {
		t.Fatalf("outcomes: %+v", outcomes)
	}
	evs, err := s.EventsOf(0, -1)
	if err != nil {
		t.Fatal(err)
	}
	var results []map[string]any
	for _, e := range evs {
		if e.Type == "tool/result" {
			var d map[string]any
			_ = json.Unmarshal(e.Data, &d)
			results = append(results, d)
		}
	}
	id1, _ := kids[0].s.ID()
	if len(results) != 2 || results[0]["callId"] != "c1" || results[0]["child"] != id1 {
		t.Fatalf("results: %v", results)
	}
	if _, err := a.NextBody(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := s.Explain(&ExplainOptions{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	var tree struct {
		Nodes []struct {
			ID, Kind string
		} `json:"nodes"`
		Totals struct {
			Nodes int `json:"nodes"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(raw, &tree); err != nil || tree.Totals.Nodes != 3 || tree.Nodes[1].Kind != "spawn" {
		t.Fatalf("tree: %s (%v)", raw, err)
	}
	for _, k := range kids {
		if _, err := k.s.Verify(); err != nil {
			t.Fatal(err)
		}
		k.a.Close()
		k.s.Close()
	}
}

// A child may not change its model; an open call is needed; a woken child keeps its options.
func TestSpawnErrorsAndWake(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	_, a := newPair(t)
	if _, _, err := a.Spawn(SpawnOptions{Directive: "x"}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("spawn before any request: %v", err)
	}
	turn(t, a, "hello", "hi")
	cs, ca, err := a.Spawn(SpawnOptions{Directive: "Summarise."})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	err = ca.SetOptions(map[string]any{"config": map[string]any{"provider": "test", "model": "m2"}, "system": "You are terse."})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "is a child agent") {
		t.Fatalf("a child changing its model: %v", err)
	}
	if _, err := ca.NextRequest(ctx); err != nil {
		t.Fatal(err)
	}
	respond(t, ca, "done")
	ca.Close()
	w, err := WakeAgent(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.StartTurn("more"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.NextRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Verify(); err != nil {
		t.Fatal(err)
	}
}
