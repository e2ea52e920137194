package llmsession

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// ConformanceCase is the outcome of one case of the store conformance kit.
type ConformanceCase struct {
	Case   string `json:"case"`   // the case's name, e.g. "conditional-append"
	Passed bool   `json:"passed"` // whether the store did what the contract requires
	Detail string `json:"detail"` // what was checked; for a failure, what was wrong
}

// ConformanceReport is what CheckStore and CheckStoreURL found.
type ConformanceReport struct {
	Store  string            `json:"store"`
	Passed bool              `json:"passed"`
	Cases  []ConformanceCase `json:"cases"`
}

// StoreOpener opens a handle on session sessionID of the host store under test, for
// CheckStore: the same id means the same records (a second writer, a stale writer), a new id
// an empty session. The StoreFunc answers the requests of that handle as for OpenStore, and
// receives {"op":"close"} when the kit is done with the handle (what closing a session means
// to a host store: its lock or lease goes). An error fails the open (ErrStorage).
type StoreOpener func(sessionID string) (StoreFunc, error)

// CheckStore runs the store conformance kit (docs/storage.md, "Conformance kit for your own
// store") against a host store: the store contract (batch atomicity, conditional appends and
// their conflicts, two writers, a stale writer, undo, cut, sync, load-from, a session round
// trip) as named cases, each on a session of its own. cases limits the run to the cases
// named (all when none). It returns the report, and an error matching ErrNonconforming when a
// case failed (the report is returned with it), or another error when the kit could not run
// (an unknown case name: ErrInvalidInput). See lls_store_conformance.
func CheckStore(open StoreOpener, cases ...string) (*ConformanceReport, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var mu sync.Mutex
	handles := map[uint64]StoreFunc{}
	h := newHandle(&callbackState{sync: func(ctx context.Context, in []byte) ([]byte, error) {
		var req struct {
			Op        string `json:"op"`
			Handle    uint64 `json:"handle"`
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		mu.Lock()
		store, ok := handles[req.Handle]
		mu.Unlock()
		switch {
		case req.Op == "open":
			s, err := open(req.SessionID)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			handles[req.Handle] = s
			mu.Unlock()
			return []byte("true"), nil
		case !ok:
			return nil, fmt.Errorf("llmsession: the conformance kit named handle %d, which it did not open", req.Handle)
		case req.Op == "close":
			mu.Lock()
			delete(handles, req.Handle)
			mu.Unlock()
		}
		out, err := store(ctx, in)
		if err != nil {
			return nil, err
		}
		return toJSON(out)
	}})
	o := conformanceOptions(cases)
	op, on := cbufOpt(o)
	return conformanceReport(func(p **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.goshim_store_conformance(h, op, on, p, n, e)
	})
}

// CheckStoreURL runs the store conformance kit against a store named by URL: "file:DIR" (a
// directory: one JSONL log per case is created in it) or "postgres://..." without session=
// (one session per case, left in the database). Results as for CheckStore. See
// lls_store_conformance_url.
func CheckStoreURL(url string, cases ...string) (*ConformanceReport, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	ub := []byte(url)
	up, un := cbuf(ub)
	op, on := cbufOpt(conformanceOptions(cases))
	return conformanceReport(func(p **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_store_conformance_url(up, un, op, on, p, n, e)
	})
}

func conformanceOptions(cases []string) []byte {
	if len(cases) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"cases": cases})
	return b
}

// conformanceReport runs a kit call: its report comes with LLS_OK and with
// LLS_ERR_NONCONFORMING alike.
func conformanceReport(f func(p **C.char, n *C.size_t, e **C.lls_error) C.lls_status) (*ConformanceReport, error) {
	var p *C.char
	var n C.size_t
	err := call(nil, func(e **C.lls_error) C.lls_status { return f(&p, &n, e) })
	out := takeString(p, n)
	if out == nil {
		return nil, err
	}
	var r ConformanceReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return nil, jerr
	}
	return &r, err
}
