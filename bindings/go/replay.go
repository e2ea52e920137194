package llmsession

/*
#include <llmsession.h>
*/
import "C"

import (
	"encoding/json"
	"runtime"
	"unsafe"
)

// Replay is a recorded session that answers requests: hand it each request envelope your
// agent loop would send to a provider (Request.Envelope, or a summariser's SummaryInput.Request)
// and it returns the recorded answer when the envelope is the recorded request, byte for byte,
// or an error naming the first divergence (ErrReconstruction; the error's Field("component"),
// Field("index"), ... say where). It lets a host test its own loop offline and
// deterministically. Safe for concurrent use; Close it when done.
type Replay struct {
	h handle
}

// ReplayAnswer is a recorded answer (lls_replay_answer). For a conversation request, Outcome is
// "response" (pass Response to Agent.RecordResponse as it is), "error" (pass Error and
// Overflow to Agent.ProviderError) or "cancelled"; for a summarisation request, "summary"
// (Summary is the summariser's reply) or "failed" (fail the summariser with Error).
type ReplayAnswer struct {
	Purpose  string          `json:"purpose"`
	ID       string          `json:"id"`
	Turn     uint64          `json:"turn,omitempty"`
	Step     uint64          `json:"step,omitempty"`
	Outcome  string          `json:"outcome"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    string          `json:"error,omitempty"`
	Overflow bool            `json:"overflow,omitempty"`
	Summary  *SummaryOutput  `json:"summary,omitempty"`
}

func wrapReplay(p *C.lls_replay) *Replay {
	r := &Replay{h: handle{ptr: unsafe.Pointer(p), free: func(p unsafe.Pointer) { C.lls_replay_free((*C.lls_replay)(p)) }}}
	runtime.SetFinalizer(r, (*Replay).Close)
	return r
}

// OpenReplay reads a stored JSONL log (without opening it as a session) and replays it.
func OpenReplay(path string) (*Replay, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	pb := []byte(path)
	pp, pn := cbuf(pb)
	var p *C.lls_replay
	if err := call(nil, func(e **C.lls_error) C.lls_status { return C.lls_replay_open_file(pp, pn, &p, e) }); err != nil {
		return nil, err
	}
	return wrapReplay(p), nil
}

// NewReplay replays the session's log as it is now.
func NewReplay(s *Session) (*Replay, error) {
	var p *C.lls_replay
	err := s.with(nil, func(sp *C.lls_session, e **C.lls_error) C.lls_status { return C.lls_replay_new(sp, &p, e) })
	if err != nil {
		return nil, err
	}
	return wrapReplay(p), nil
}

// Answer returns the recorded answer to a request envelope, as JSON (see ReplayAnswer).
func (r *Replay) Answer(envelope []byte) (json.RawMessage, error) {
	p, err := r.h.acquire()
	if err != nil {
		return nil, err
	}
	defer r.h.release()
	ep, en := cbuf(envelope)
	return outString(nil, func(out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_replay_answer((*C.lls_replay)(p), ep, en, out, n, e)
	})
}

// AnswerOf is Answer, decoded.
func (r *Replay) AnswerOf(envelope []byte) (ReplayAnswer, error) {
	var a ReplayAnswer
	b, err := r.Answer(envelope)
	if err != nil {
		return a, err
	}
	err = json.Unmarshal(b, &a)
	return a, err
}

// Info is {"sessionId","requests","answered","next"?}: open the host's session with
// sessionId (every request carries it); next is the id of the request expected next.
func (r *Replay) Info() (json.RawMessage, error) {
	p, err := r.h.acquire()
	if err != nil {
		return nil, err
	}
	defer r.h.release()
	return outString(nil, func(out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_replay_info((*C.lls_replay)(p), out, n, e)
	})
}

// Close frees the replay.
func (r *Replay) Close() error {
	r.h.close()
	runtime.SetFinalizer(r, nil)
	return nil
}
