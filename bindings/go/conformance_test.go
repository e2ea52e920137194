package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// leasedStores is a host store keeping many sessions, with a writer lease per session, as a
// database-backed host keeps them; ignoreHead makes it a broken one that appends at whatever
// seq a request names.
type leasedStores struct {
	mu         sync.Mutex
	records    map[string][]string
	lease      map[string]int // session -> the handle holding its lease
	next       int
	ignoreHead bool
	closed     int
}

func newLeasedStores(ignoreHead bool) *leasedStores {
	return &leasedStores{records: map[string][]string{}, lease: map[string]int{}, ignoreHead: ignoreHead}
}

// open is the StoreOpener: one StoreFunc per handle.
func (l *leasedStores) open(id string) (StoreFunc, error) {
	l.mu.Lock()
	l.next++
	me := l.next
	l.mu.Unlock()
	return func(ctx context.Context, req json.RawMessage) (any, error) {
		var r struct {
			Op, Header      *string
			Records         []string
			Seq, From, Keep int
		}
		if err := json.Unmarshal(req, &r); err != nil || r.Op == nil {
			return nil, fmt.Errorf("bad store request %s", req)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		recs := l.records[id]
		switch *r.Op {
		case "close":
			l.closed++
			if l.lease[id] == me {
				delete(l.lease, id)
			}
		case "load":
			if h, held := l.lease[id]; held && h != me {
				return map[string]any{"locked": fmt.Sprintf("handle %d holds the lease", h)}, nil
			}
			l.lease[id] = me
			return map[string]any{"records": append([]string{}, recs...)}, nil
		case "append":
			fits := (r.Header != nil) == (len(recs) == 0) && (len(recs) == 0 || r.Seq == len(recs)-1)
			if !fits && !l.ignoreHead {
				return map[string]any{"conflict": fmt.Sprintf("seq %d is not the next one", r.Seq)}, nil
			}
			if r.Header != nil {
				recs = append(recs, *r.Header)
			}
			l.records[id] = append(recs, r.Records...)
		case "undo":
			l.records[id] = recs[:min(r.From, len(recs))]
		case "cut":
			l.records[id] = recs[:min(r.Keep, len(recs))]
			return map[string]any{"savedTo": "the quarantine map"}, nil
		}
		return true, nil
	}, nil
}

func TestCheckStorePassesAGoHostStore(t *testing.T) {
	l := newLeasedStores(false)
	r, err := CheckStore(l.open)
	if err != nil {
		t.Fatalf("CheckStore: %v (report %+v)", err, r)
	}
	if !r.Passed || r.Store != "host store" || len(r.Cases) != 11 {
		t.Fatalf("report: %+v", r)
	}
	for _, c := range r.Cases {
		if !c.Passed {
			t.Errorf("%s: %s", c.Case, c.Detail)
		}
	}
	if l.closed != l.next {
		t.Errorf("the kit opened %d handles and closed %d", l.next, l.closed)
	}
}

func TestCheckStoreNamesTheCasesABrokenStoreFails(t *testing.T) {
	r, err := CheckStore(newLeasedStores(true).open)
	if !errors.Is(err, ErrNonconforming) {
		t.Fatalf("err = %v, want ErrNonconforming", err)
	}
	if r == nil || r.Passed {
		t.Fatalf("report: %+v", r)
	}
	failed := map[string]string{}
	for _, c := range r.Cases {
		if !c.Passed {
			failed[c.Case] = c.Detail
		}
	}
	if d := failed["conditional-append"]; d != "append with expected head 2 succeeded although the store holds 3 events" {
		t.Errorf("conditional-append: %q", d)
	}
	if _, ok := failed["batch-atomicity"]; !ok {
		t.Errorf("batch-atomicity passed: %+v", r.Cases)
	}
	if _, ok := failed["create-and-reload"]; ok {
		t.Errorf("create-and-reload failed: %s", failed["create-and-reload"])
	}
	if !strings.Contains(err.Error(), "conditional-append") {
		t.Errorf("error: %v", err)
	}
}

func TestCheckStoreRefusesAnUnknownCaseAndAFailedOpen(t *testing.T) {
	if _, err := CheckStore(newLeasedStores(false).open, "nope"); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("unknown case: %v", err)
	}
	broken := func(id string) (StoreFunc, error) { return nil, errors.New("no database today") }
	r, err := CheckStore(broken, "undo")
	if !errors.Is(err, ErrNonconforming) || len(r.Cases) != 1 || !strings.Contains(r.Cases[0].Detail, "no database today") {
		t.Fatalf("err = %v, report %+v", err, r)
	}
}

func TestCheckStoreURLFile(t *testing.T) {
	r, err := CheckStoreURL("file:" + t.TempDir())
	if err != nil || !r.Passed {
		t.Fatalf("err = %v, report %+v", err, r)
	}
}

func TestCheckStoreURLPostgres(t *testing.T) {
	r, err := CheckStoreURL(pgURL(t))
	if err != nil {
		t.Fatalf("err = %v, report %+v", err, r)
	}
}
