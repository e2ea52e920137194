package llmsession

/*
#include <stdbool.h>
#include <stdlib.h>
#include <llmsession.h>
*/
import "C"

import (
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"unsafe"
)

// Stream accumulates one streamed provider response (lls_stream): write the raw bytes of
// the event stream to it as they arrive (it is an io.Writer, so io.Copy from an HTTP response
// body works), take the deltas for display with NextDelta, and call Finish for the response,
// which is what ParseResponse gives for the non-streamed body and goes to Agent.RecordResponse
// as it is. Formats: "openai" (chat completion chunks), "openai-responses", "anthropic",
// "gemini", "gemini-interactions". Safe for use by several goroutines (calls are serialised), though a stream is one
// response and is naturally fed from one place. Close it when done.
type Stream struct {
	h handle
}

// Delta is a piece of a streamed response, for display. Type is "text", "reasoning" or
// "tool-call"; Index counts the blocks of that type in the final message. A tool call's first
// delta has its ID and Name; Arguments are fragments of its arguments.
type Delta struct {
	Type      string `json:"type"`
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Text      string `json:"text,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// NewStream creates a stream accumulator for one response in format.
func NewStream(format string) (*Stream, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	fb := []byte(format)
	fp, fn := cbuf(fb)
	var p *C.lls_stream
	var e *C.lls_error
	if rc := C.lls_stream_new(fp, fn, &p, &e); rc != 0 {
		return nil, takeError(rc, e)
	}
	s := &Stream{h: handle{ptr: unsafe.Pointer(p), free: func(p unsafe.Pointer) { C.lls_stream_free((*C.lls_stream)(p)) }}}
	runtime.SetFinalizer(s, (*Stream).Close)
	return s, nil
}

// Write feeds the next bytes of the event stream (any chunking). It returns len(p) or the
// stream's error: a malformed event, or the provider's error event (errors.As gives the *Error;
// Field("stream") is "malformed" or "provider-error", Field("overflow") says whether the
// provider reported a context overflow). Once it failed, every later Write fails the same way.
func (s *Stream) Write(p []byte) (int, error) {
	ptr, err := s.h.acquire()
	if err != nil {
		return 0, err
	}
	defer s.h.release()
	bp, bn := cbuf(p)
	var e *C.lls_error
	if rc := C.lls_stream_feed((*C.lls_stream)(ptr), bp, bn, &e); rc != 0 {
		return 0, takeError(rc, e)
	}
	return len(p), nil
}

// NextDelta takes the next delta, or returns nil when every delta so far was taken.
func (s *Stream) NextDelta() (*Delta, error) {
	ptr, err := s.h.acquire()
	if err != nil {
		return nil, err
	}
	defer s.h.release()
	var o *C.char
	var n C.size_t
	var e *C.lls_error
	if rc := C.lls_stream_next_delta((*C.lls_stream)(ptr), &o, &n, &e); rc != 0 {
		return nil, takeError(rc, e)
	}
	if o == nil {
		return nil, nil
	}
	var d Delta
	if err := json.Unmarshal(takeString(o, n), &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Finish ends the stream and returns {"message","usage"?,"finishReason"?}. A stream that failed
// or ended before its terminal event (a cut connection: Field("stream") is "incomplete") is an
// error, unless partial is true: then the message assembled so far comes back with
// finishReason "incomplete" (record it only if that is what you want).
func (s *Stream) Finish(partial bool) (json.RawMessage, error) {
	ptr, err := s.h.acquire()
	if err != nil {
		return nil, err
	}
	defer s.h.release()
	var o *C.char
	var n C.size_t
	var e *C.lls_error
	if rc := C.lls_stream_finish((*C.lls_stream)(ptr), C.bool(partial), &o, &n, &e); rc != 0 {
		return nil, takeError(rc, e)
	}
	return takeString(o, n), nil
}

// Body returns the provider body rebuilt from the events so far, in the non-streamed shape
// (after a complete stream, that response with the provider's extras, e.g. llama.cpp timings).
func (s *Stream) Body() (json.RawMessage, error) {
	ptr, err := s.h.acquire()
	if err != nil {
		return nil, err
	}
	defer s.h.release()
	var o *C.char
	var n C.size_t
	var e *C.lls_error
	if rc := C.lls_stream_body((*C.lls_stream)(ptr), &o, &n, &e); rc != 0 {
		return nil, takeError(rc, e)
	}
	return takeString(o, n), nil
}

// Close frees the stream.
func (s *Stream) Close() error {
	s.h.close()
	runtime.SetFinalizer(s, nil)
	return nil
}

// ReadStream reads a whole event stream from r (an HTTP response body, say) into a Stream of
// format, calling onDelta (may be nil) for each delta as soon as it arrives, and returns the
// finished response and the rebuilt body. A read error of r (a cut connection) or a stream
// error ends it with that error; nothing is returned to record then.
func ReadStream(format string, r io.Reader, onDelta func(Delta)) (response, body json.RawMessage, err error) {
	s, err := NewStream(format)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	buf := make([]byte, 32*1024)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := s.Write(buf[:n]); err != nil {
				return nil, nil, err
			}
			if onDelta != nil {
				for {
					d, err := s.NextDelta()
					if err != nil {
						return nil, nil, err
					}
					if d == nil {
						break
					}
					onDelta(*d)
				}
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, nil, rerr
		}
	}
	response, err = s.Finish(false)
	if err != nil {
		return nil, nil, err
	}
	body, err = s.Body()
	return response, body, err
}
