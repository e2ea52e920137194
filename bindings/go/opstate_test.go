package llmsession

import (
	"context"
	"encoding/json"
	"testing"
)

type ctxKey struct{}

// A callback that calls the library nests a call inside the running one; after it returns, the
// running call's later callbacks still find their call: its context values, and a panic that
// is re-raised when NextRequest returns.
func TestCallbacksFindTheirCallAfterANestedCall(t *testing.T) {
	leakCheck(t)
	s, a := newPair(t)
	if err := a.AddPrefixListener(func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error) {
		if _, err := s.AppendContext(UserText("appended from the prefix listener")); err != nil { // a nested call
			return nil, err
		}
		return in.Rest, nil
	}); err != nil {
		t.Fatal(err)
	}
	var seen any
	if err := a.AddPreStepListener(func(ctx context.Context, in PreStepInput) error {
		seen = ctx.Value(ctxKey{})
		if prefix, err := in.PrefixMessages(); err != nil || len(prefix) != 0 {
			t.Errorf("pre-step prefix %+v %v", prefix, err)
		}
		if tools, err := in.ToolList(); err != nil || len(tools) != 0 {
			t.Errorf("pre-step tools %+v %v", tools, err)
		}
		panic("after the nested call")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn("hi"); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "the operation's value")
	func() {
		defer func() {
			if v := recover(); v != "after the nested call" {
				t.Errorf("recovered %v", v)
			}
		}()
		a.NextRequest(ctx)
		t.Error("NextRequest returned after a panic")
	}()
	if seen != "the operation's value" {
		t.Errorf("the pre-step listener's context carried %v", seen)
	}
}
