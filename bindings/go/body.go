package llmsession

/*
#include <stdbool.h>
#include <stdint.h>
#include <llmsession.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"unsafe"
)

// The one-way hot path (docs/go.md, "The provider body"): give the agent a renderer once, then
// per step NextBodyView (or NextBody, or AppendNextBody into a buffer reused across steps) for
// the provider body ready to POST, and RecordBody (or RecordStream) for the provider's reply.
// The envelope stays the logged truth (LastEnvelope).

// Purposes of a request (RequestInfo.Purpose).
const (
	PurposeConversation = "conversation"
	PurposeCompaction   = "compaction"
	// PurposeKeepalive is the cache clock's keep-warm request (KeepaliveBody).
	PurposeKeepalive = "keepalive"
)

// SetRenderer gives the agent a renderer ("openai", "openai-responses", "anthropic",
// "gemini", "gemini-interactions") and render options (nil: the defaults; PrefixLen must be 0, the agent uses its own
// session prefix length). Each history message is then rendered once and reused.
func (a *Agent) SetRenderer(renderer string, opts *RenderOptions) error {
	var o []byte
	if opts != nil {
		var err error
		if o, err = toJSON(opts); err != nil {
			return err
		}
	}
	rb := []byte(renderer)
	rp, rn := cbuf(rb)
	op, on := cbufOpt(o)
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_set_renderer(p, rp, rn, op, on, e)
	})
}

// Body is a provider body copied into Go memory (NextBody): keep it as long as needed.
type Body struct {
	Bytes []byte
	Info  RequestInfo
}

// BodyView is a provider body lent by the library (NextBodyView): Bytes is the library's own
// buffer, without a copy, valid until Release. The agent's renderer keeps the same buffer and
// renders the next body from it: read Bytes, never write into it. Release it once the body was
// sent (a view that is never released keeps its buffer until the process ends; there is no
// finalizer, since a slice taken from Bytes would outlive it). A BodyView is also an io.Reader
// and io.WriterTo over the body (for an http.Request body: http.NewRequest(method, url, v));
// reading is safe against a concurrent Release, which waits for the read. After Release, Bytes
// panics and Read and WriteTo fail with ErrClosed; a slice obtained from Bytes before must not
// be used any more.
type BodyView struct {
	// Info describes the request (read from the library's fixed record, no JSON).
	Info RequestInfo

	mu   sync.Mutex
	live bool
	ptr  *C.char
	b    []byte
	off  int // how much Read and WriteTo consumed
}

// Bytes is the body, valid until Release. It panics after Release.
func (v *BodyView) Bytes() []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live {
		panic("llmsession: BodyView.Bytes after Release")
	}
	return v.b
}

// Len is the body's length in bytes (0 after Release).
func (v *BodyView) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.b)
}

// Read reads the body from where the last Read or WriteTo stopped (io.EOF at its end); after
// Release it fails with ErrClosed.
func (v *BodyView) Read(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live {
		return 0, ErrClosed
	}
	if v.off >= len(v.b) {
		return 0, io.EOF
	}
	n := copy(p, v.b[v.off:])
	v.off += n
	return n, nil
}

// WriteTo writes the rest of the body to w (io.Copy uses it); after Release it fails with
// ErrClosed. The view stays held while w runs: Release from another goroutine waits for it.
func (v *BodyView) WriteTo(w io.Writer) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live {
		return 0, ErrClosed
	}
	n, err := w.Write(v.b[v.off:])
	v.off += n
	return int64(n), err
}

// Release gives the buffer back to the library. Idempotent.
func (v *BodyView) Release() {
	v.mu.Lock()
	p := v.ptr
	v.ptr, v.b, v.live = nil, nil, false
	v.mu.Unlock()
	if p != nil {
		C.lls_string_free(p)
	}
}

// Released reports whether Release was called.
func (v *BodyView) Released() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.live
}

// NextBodyView builds the next request exactly as NextRequest does (logged and verified the same
// way) and lends its provider body for the agent's renderer (SetRenderer; ErrOutOfOrder without
// one). ctx cancels composition, listeners and summarisation, as for NextRequest.
func (a *Agent) NextBodyView(ctx context.Context) (*BodyView, error) {
	out, n, info, err := a.nextBody(ctx)
	if err != nil {
		return nil, err
	}
	v := &BodyView{Info: info, ptr: out, live: true}
	if out != nil && n > 0 {
		v.b = unsafe.Slice((*byte)(unsafe.Pointer(out)), n)
	}
	return v, nil
}

// NextBody is NextBodyView with the body copied into Go memory (and the view released): Bytes
// is a fresh slice the caller owns. A host that sends one body after the other can reuse one
// buffer instead (AppendNextBody).
func (a *Agent) NextBody(ctx context.Context) (*Body, error) {
	b, info, err := a.AppendNextBody(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &Body{Bytes: b, Info: info}, nil
}

// AppendNextBody is NextBody in the append form (as strconv.AppendInt and append): it builds
// the next request as NextBodyView does, appends its provider body to dst and returns the
// extended slice with the request's info. A host that sends the bodies one after the other
// keeps one buffer across steps and passes it back emptied once the previous body was sent:
//
//	var buf []byte
//	for ... {
//		body, info, err := a.AppendNextBody(ctx, buf[:0])
//		if err != nil { ... }
//		send(body, info) // body is Go memory: keep it as long as needed, until it is reused
//		buf = body
//	}
//
// When dst has the capacity for the body, nothing is allocated for it (the body is copied from
// the library's buffer into dst's array, and that buffer is given back before the return);
// otherwise append grows dst as usual. On an error dst is returned unchanged, as given.
func (a *Agent) AppendNextBody(ctx context.Context, dst []byte) ([]byte, RequestInfo, error) {
	out, n, info, err := a.nextBody(ctx)
	if err != nil {
		return dst, RequestInfo{}, err
	}
	if out != nil {
		if n > 0 {
			dst = append(dst, unsafe.Slice((*byte)(unsafe.Pointer(out)), n)...)
		}
		C.lls_string_free(out)
	}
	return dst, info, nil
}

// nextBody runs lls_agent_next_body: the library's buffer (the caller frees it with
// lls_string_free; nil or empty on an error), its length and the request's info.
func (a *Agent) nextBody(ctx context.Context) (*C.char, int, RequestInfo, error) {
	var out *C.char
	var n C.size_t
	var info C.lls_request_info
	err := a.withCancel(ctx, func(p *C.lls_agent, tok *C.lls_cancel, e **C.lls_error) C.lls_status {
		return C.lls_agent_next_body(p, tok, &out, &n, &info, e)
	})
	if err != nil {
		if out != nil {
			C.lls_string_free(out)
		}
		return nil, 0, RequestInfo{}, err
	}
	return out, int(n), requestInfoOf(&info), nil
}

// requestInfoOf reads an lls_request_info.
func requestInfoOf(in *C.lls_request_info) RequestInfo {
	purpose := PurposeConversation
	switch in.purpose {
	case C.LLS_PURPOSE_COMPACTION:
		purpose = PurposeCompaction
	case C.LLS_PURPOSE_KEEPALIVE:
		purpose = PurposeKeepalive
	}
	return RequestInfo{
		Turn:           uint64(in.turn),
		Step:           uint64(in.step),
		Digest:         C.GoString(&in.digest[0]),
		Bytes:          int(in.envelope_len),
		PrefixLen:      int(in.prefix_len),
		MessageCount:   int(in.message_count),
		SharedMessages: int(in.shared_messages),
		Instance:       uint64(in.instance),
		StepSeq:        uint64(in.step_seq),
		Purpose:        purpose,
	}
}

// LastEnvelope is the envelope of the last request the agent built: the logged bytes whose
// digest RequestInfo.Digest is.
func (a *Agent) LastEnvelope() (json.RawMessage, error) {
	return a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_last_envelope(p, o, n, e)
	})
}

// RecordBody records the provider's raw, non-streamed response body for the open step, parsed
// with the agent's renderer format (SetRenderer): seq is the assistant/message event's seq,
// toolCalls how many tool calls the response made.
// The finish reason is not logged: RecordBodyOf gives it (Recorded.FinishReason).
func (a *Agent) RecordBody(body []byte) (seq uint64, toolCalls int, err error) {
	r, err := a.recordBody(body)
	return r.seq, r.toolCalls, err
}

// RecordStream records a streamed response from its accumulator at the stream's end, as
// Stream.Finish(partial) gives it: an error for a failed or cut stream, or with partial what a
// cut stream delivered so far (finish reason "incomplete", which RecordStreamOf gives).
func (a *Agent) RecordStream(s *Stream, partial bool) (seq uint64, toolCalls int, err error) {
	r, err := a.recordStream(s, partial)
	return r.seq, r.toolCalls, err
}

// recordedInfo is an lls_recorded_info, read.
type recordedInfo struct {
	seq          uint64
	toolCalls    int
	finishReason string
}

func recordedOf(r *C.lls_recorded_info) recordedInfo {
	return recordedInfo{seq: uint64(r.seq), toolCalls: int(r.tool_calls), finishReason: C.GoString(&r.finish_reason[0])}
}

func (a *Agent) recordBody(body []byte) (recordedInfo, error) {
	bp, bn := cbuf(body)
	var r C.lls_recorded_info
	err := a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_record_body_info(p, bp, bn, &r, e)
	})
	if err != nil {
		return recordedInfo{}, err
	}
	return recordedOf(&r), nil
}

func (a *Agent) recordStream(s *Stream, partial bool) (recordedInfo, error) {
	sp, err := s.h.acquire()
	if err != nil {
		return recordedInfo{}, err
	}
	defer s.h.release()
	var r C.lls_recorded_info
	err = a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_record_stream_info(p, (*C.lls_stream)(sp), C.bool(partial), &r, e)
	})
	if err != nil {
		return recordedInfo{}, err
	}
	return recordedOf(&r), nil
}
