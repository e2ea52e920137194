package llmsession

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/json"
	"runtime"
	"unsafe"
)

// DefaultPlaceholder is the result text a child sees for each of its parent's open tool calls
// (its own included) when SpawnOptions.Placeholder is empty: one constant, so that sibling
// children share everything up to their directives.
const DefaultPlaceholder = "This tool call is being worked on by another agent; its result is not shown here."

// SpawnOptions are the options of Spawn (lls_agent_spawn).
type SpawnOptions struct {
	// CallID is the open tool call of the parent's last assistant message the child answers;
	// empty spawns at a turn boundary (no call of the parent may wait then).
	CallID string `json:"callId,omitempty"`
	// Directive is the child's task, the last user message of its first request: a string (a
	// text message) or a message.
	Directive any `json:"directive"`
	// Placeholder replaces DefaultPlaceholder.
	Placeholder string `json:"placeholder,omitempty"`
	// ID is the child session's id (default: the parent's id, a dot and the call id).
	ID         string `json:"id,omitempty"`
	Durability string `json:"durability,omitempty"`
	// Path keeps the child in this JSONL file, URL in the store it names; by default it lives
	// where the parent's store keeps children (beside a JSONL parent, named after it; in the
	// parent's database; in memory for a parent in memory).
	Path string `json:"path,omitempty"`
	URL  string `json:"url,omitempty"`
	// CacheTTL is the TTL of the child's Anthropic cache breakpoints ("5m" or "1h"; default
	// the parent's render options).
	CacheTTL string `json:"cacheTtl,omitempty"`
	// MaxTurns bounds the child's requests (0: no bound).
	MaxTurns uint64 `json:"maxTurns,omitempty"`
}

// ChildOutcome is what finishing a child gave its parent.
type ChildOutcome struct {
	Child  string `json:"child"`            // the child session's id
	CallID string `json:"callId,omitempty"` // the parent's call it answered
	Answer string `json:"answer"`           // its last message's text, or why it failed
	// IsError: the child failed (its turn did not complete).
	IsError bool `json:"isError"`
	// Recorded is how many tool results this call wrote to the parent's log: 0 while an
	// earlier call of the same message still waits (results are logged in call order).
	Recorded int `json:"recorded"`
}

// Spawn spawns a child agent from one of a's open tool calls (or at a turn boundary): a new
// session seeded with a's events, whose first request extends a's last one (same config,
// cache key, system, tools and session prefix) with a's assistant message, one placeholder
// result per open call and the directive. It returns the child's session and agent (close
// both); the child has a's renderer and may not change model, tools or system. Children are
// independent: run each in a goroutine of its own, and FinishChild them in any order.
func (a *Agent) Spawn(opts SpawnOptions) (*Session, *Agent, error) {
	if s, ok := opts.Directive.(string); ok {
		opts.Directive = UserText(s)
	}
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, nil, err
	}
	bp, bn := cbuf(b)
	var cs *C.lls_session
	var ca *C.lls_agent
	if err := a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_spawn(p, bp, bn, &cs, &ca, e)
	}); err != nil {
		return nil, nil, err
	}
	s := wrapSession(cs)
	child := &Agent{session: s, h: handle{ptr: unsafe.Pointer(ca), free: func(p unsafe.Pointer) { C.lls_agent_free((*C.lls_agent)(p)) }}}
	runtime.SetFinalizer(child, (*Agent).Close)
	return s, child, nil
}

// FinishChild ends child's open turn (completed; with a non-empty failure, error) and records
// its answer as a's result of the call it answers, with the child's id. Safe to call from the
// child's goroutine while siblings finish in theirs: results are logged in call order.
func (a *Agent) FinishChild(child *Agent, failure string) (ChildOutcome, error) {
	var out ChildOutcome
	var o []byte
	if failure != "" {
		o, _ = json.Marshal(map[string]string{"error": failure})
	}
	cp, err := child.h.acquire()
	if err != nil {
		return out, err
	}
	defer child.h.release()
	op, on := cbufOpt(o)
	raw, err := a.str(func(p *C.lls_agent, r **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_finish_child(p, (*C.lls_agent)(cp), op, on, r, n, e)
	})
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(raw, &out)
	return out, err
}

// WakeAgent creates an agent over s that sends what s's last request carried (its latest
// request header): a child woken in another process, or any session resumed without knowing
// its options. opts is nil or {"checkRequests"?, "policy"?, "tokenizer"?}.
func WakeAgent(s *Session, opts map[string]any) (*Agent, error) {
	if opts == nil {
		opts = map[string]any{}
	}
	return NewAgent(s, opts)
}
