package llmsession

/*
#include <stdbool.h>
#include <stdint.h>
#include <llmsession.h>
*/
import "C"

import "encoding/json"

// Provider-native compaction (docs/go.md, "Native compaction"; docs/compaction.md): Anthropic's
// on-demand compaction and OpenAI's POST /responses/compact, as requests the host sends (now or
// in the background, while the conversation goes on) and whose answers the library records.
// Threshold compaction needs no call of its own: with a policy whose Mechanism is "native" or
// "auto" the conversation requests carry the provider's setting, and RecordBody / RecordResponse
// record a compaction block the answer holds.

// NativeRequest is a native compaction request (BeginNativeCompaction): POST Body to Endpoint,
// with the Anthropic beta flags in Betas (header anthropic-beta). Envelope is the logged request
// (its SHA-256 is Digest); Seqs are the messages the block will replace.
type NativeRequest struct {
	Format         string   `json:"format"`
	Endpoint       string   `json:"endpoint"`
	Betas          []string `json:"betas"`
	Envelope       string   `json:"envelope"`
	Body           string   `json:"body"`
	Digest         string   `json:"digest"`
	Span           [2]int   `json:"span"`
	Seqs           []uint64 `json:"seqs"`
	MessageCount   int      `json:"messageCount"`
	SharedMessages int      `json:"sharedMessages"`
	// Raw is the JSON the library returned.
	Raw json.RawMessage `json:"-"`
}

// NativeOutcome is how a native compaction ended: Outcome "landed" (the block replaced Seqs) or
// "failed" (Error says why; the history is as it was).
type NativeOutcome struct {
	Outcome    string   `json:"outcome"`
	Format     string   `json:"format"`
	Span       [2]int   `json:"span"`
	Seqs       []uint64 `json:"seqs"`
	Error      string   `json:"error,omitempty"`
	StopReason string   `json:"stopReason,omitempty"`
	// Raw is the JSON the library returned.
	Raw json.RawMessage `json:"-"`
}

// BeginNativeCompaction builds a native compaction request for the agent's route over the whole
// history and logs its start (lls_agent_native_compaction_begin). Send it, then hand the answer
// to RecordNativeCompaction, or report a failure with FailNativeCompaction.
func (a *Agent) BeginNativeCompaction() (*NativeRequest, error) {
	b, err := a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_native_compaction_begin(p, o, n, e)
	})
	if err != nil {
		return nil, err
	}
	r := &NativeRequest{Raw: b}
	return r, json.Unmarshal(b, r)
}

// RecordNativeCompaction records the provider's raw answer to the native compaction request in
// flight (lls_agent_native_compaction_record): a compaction block lands; any other answer is a
// failed attempt, logged (Outcome "failed").
func (a *Agent) RecordNativeCompaction(body []byte) (*NativeOutcome, error) {
	bp, bn := cbuf(body)
	return a.nativeOutcome(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_native_compaction_record(p, bp, bn, o, n, e)
	})
}

// FailNativeCompaction reports that the native compaction request in flight failed (a timeout,
// a transport error), saying why (lls_agent_native_compaction_fail).
func (a *Agent) FailNativeCompaction(why string) (*NativeOutcome, error) {
	wb := []byte(why)
	wp, wn := cbuf(wb)
	return a.nativeOutcome(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_native_compaction_fail(p, wp, wn, o, n, e)
	})
}

// RequestBetas are the Anthropic beta flags the last request needs (native compaction's: send
// them as the anthropic-beta header): "betas" of lls_agent_request_info, empty when none.
func (a *Agent) RequestBetas() ([]string, error) {
	b, err := a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_request_info(p, o, n, e)
	})
	if err != nil {
		return nil, err
	}
	var info struct {
		Betas []string `json:"betas"`
	}
	return info.Betas, json.Unmarshal(b, &info)
}

func (a *Agent) nativeOutcome(f func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status) (*NativeOutcome, error) {
	b, err := a.str(f)
	if err != nil {
		return nil, err
	}
	o := &NativeOutcome{Raw: b}
	return o, json.Unmarshal(b, o)
}
