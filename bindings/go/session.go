package llmsession

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"math"
	"runtime"
	"unsafe"
)

// Session is the append-only event log of one conversation (in memory, in a JSONL file or in
// a host store). Safe for concurrent use; Close it when done.
type Session struct {
	h handle
}

// Checkpoints says when a session writes checkpoints (docs/log.md, "Checkpoints"): the derived
// state an open needs, so that an open reads the log from the last one instead of the whole
// history. Nil fields take the library's defaults (every 1000 events or 1 MiB of records, and
// at the end of each landed compaction; 0 turns a trigger off); Off writes none (a log an older
// library must read). Since ABI 2 minor 6.
type Checkpoints struct {
	EveryEvents  *uint64 `json:"everyEvents,omitempty"`
	EveryBytes   *uint64 `json:"everyBytes,omitempty"`
	AtCompaction *bool   `json:"atCompaction,omitempty"`
	Off          bool    `json:"-"`
}

// MarshalJSON writes the option as the library takes it (false for Off).
func (c Checkpoints) MarshalJSON() ([]byte, error) {
	if c.Off {
		return []byte("false"), nil
	}
	type plain Checkpoints
	return json.Marshal(plain(c))
}

// SessionOptions are the options of opening or creating a session (all optional).
type SessionOptions struct {
	ID         string `json:"id,omitempty"`         // the session id of a new session (random when empty)
	Durability string `json:"durability,omitempty"` // "every-event", "turn-end" or "never"
	// Check is how an open checks the stored log: "bounded" (the default: from its last
	// checkpoint) or "full" (all of it). Since ABI 2 minor 6.
	Check string `json:"check,omitempty"`
	// Checkpoints: when the session writes checkpoints (nil: the defaults).
	Checkpoints *Checkpoints `json:"checkpoints,omitempty"`
	// ReadOnly (files): open without the write lock; appends and agents fail with ErrReadOnly,
	// Refresh follows the writer. Nothing is created or changed.
	ReadOnly bool `json:"readOnly,omitempty"`
	// Mode (files): the permission bits of a log this open creates, in octal ("0640");
	// default "0600".
	Mode string `json:"mode,omitempty"`
}

// ForkOptions are the options of Fork (all optional).
type ForkOptions struct {
	SeedLength *uint64 `json:"seedLength,omitempty"` // events to seed with (default: all)
	Path       string  `json:"path,omitempty"`       // keep the fork in this JSONL file (else memory)
	ID         string  `json:"id,omitempty"`
	Durability string  `json:"durability,omitempty"`
	// Checkpoints: when the fork writes checkpoints (nil: the defaults). Since ABI 2 minor 6.
	Checkpoints *Checkpoints `json:"checkpoints,omitempty"`
}

func optsJSON(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return toJSON(v)
}

func wrapSession(p *C.lls_session) *Session {
	s := &Session{h: handle{ptr: unsafe.Pointer(p), free: func(p unsafe.Pointer) { C.lls_session_free((*C.lls_session)(p)) }}}
	runtime.SetFinalizer(s, (*Session).Close)
	return s
}

// NewMemorySession creates a session kept in memory. opts may be nil.
func NewMemorySession(opts *SessionOptions) (*Session, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o []byte
	if opts != nil {
		o, _ = toJSON(opts)
	}
	var p *C.lls_session
	op, on := cbufOpt(o)
	err := call(nil, func(e **C.lls_error) C.lls_status { return C.lls_session_new_memory(op, on, &p, e) })
	if err != nil {
		return nil, err
	}
	return wrapSession(p), nil
}

// cbufOpt is cbuf for an optional argument (nil gives NULL).
func cbufOpt(b []byte) (*C.char, C.size_t) {
	if b == nil {
		return nil, 0
	}
	return cbuf(b)
}

// OpenFile opens the session stored in a JSONL file, or creates it when the file is missing
// or empty. A writing open holds the file's lock until Close: a second writer, in this process
// or another, gets an error matching ErrLocked. A torn last line is cut (kept in a sidecar
// file) and a crashed turn closed (see LoadReport). With opts.ReadOnly nothing is locked,
// created or changed.
func OpenFile(path string, opts *SessionOptions) (*Session, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o []byte
	if opts != nil {
		o, _ = toJSON(opts)
	}
	pb := []byte(path)
	pp, pn := cbuf(pb)
	op, on := cbufOpt(o)
	var p *C.lls_session
	err := call(nil, func(e **C.lls_error) C.lls_status { return C.lls_session_open_file(pp, pn, op, on, &p, e) })
	if err != nil {
		return nil, err
	}
	return wrapSession(p), nil
}

// StoreFunc is a host store: it receives one JSON request per storage operation
// ({"op":"load"}, {"op":"append","sessionId","seq","records","header"?}, {"op":"sync"},
// {"op":"undo","from"}, {"op":"cut","keep","reason"}) and returns the JSON answer (see
// lls_session_open_store and docs/storage.md): an append whose seq is taken answers
// {"conflict": why}, a load of a session another writer holds {"locked": why}. It runs while
// the session is locked: it must not call into the session.
type StoreFunc func(ctx context.Context, req json.RawMessage) (any, error)

// OpenStore opens (or creates, when the store is empty) a session kept in a host store.
func OpenStore(store StoreFunc, opts *SessionOptions) (*Session, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o []byte
	if opts != nil {
		o, _ = toJSON(opts)
	}
	h := newHandle(&callbackState{sync: func(ctx context.Context, in []byte) ([]byte, error) {
		out, err := store(ctx, in)
		if err != nil {
			return nil, err
		}
		return toJSON(out)
	}})
	op, on := cbufOpt(o)
	var p *C.lls_session
	err := call(nil, func(e **C.lls_error) C.lls_status { return C.goshim_open_store(h, op, on, &p, e) })
	if err != nil {
		return nil, err
	}
	return wrapSession(p), nil
}

// Close frees the session (an agent over it keeps its state alive until the agent is closed).
func (s *Session) Close() error {
	s.h.close()
	runtime.SetFinalizer(s, nil)
	return nil
}

func (s *Session) with(ctx opCtx, f func(p *C.lls_session, e **C.lls_error) C.lls_status) error {
	p, err := s.h.acquire()
	if err != nil {
		return err
	}
	defer s.h.release()
	return call(ctx, func(e **C.lls_error) C.lls_status { return f((*C.lls_session)(p), e) })
}

func (s *Session) str(f func(p *C.lls_session, out **C.char, n *C.size_t, e **C.lls_error) C.lls_status) (json.RawMessage, error) {
	var out *C.char
	var n C.size_t
	if err := s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status { return f(p, &out, &n, e) }); err != nil {
		return nil, err
	}
	return takeString(out, n), nil
}

// Fork creates a new session seeded with this one's first events. opts may be nil.
func (s *Session) Fork(opts *ForkOptions) (*Session, error) {
	var o []byte
	if opts != nil {
		o, _ = toJSON(opts)
	}
	op, on := cbufOpt(o)
	var out *C.lls_session
	if err := s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status {
		return C.lls_session_fork(p, op, on, &out, e)
	}); err != nil {
		return nil, err
	}
	return wrapSession(out), nil
}

// ID is the session id.
func (s *Session) ID() (string, error) {
	b, err := s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_id(p, o, n, e)
	})
	return string(b), err
}

// Info is the session's header record (the first line of its log).
func (s *Session) Info() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_info(p, o, n, e)
	})
}

// LoadReport says what loading found and repaired.
func (s *Session) LoadReport() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_load_report(p, o, n, e)
	})
}

// Events returns the events with seq from up to, not including, to (to < 0: to the end), as a
// JSON array.
func (s *Session) Events(from uint64, to int64) (json.RawMessage, error) {
	t := uint64(math.MaxUint64)
	if to >= 0 {
		t = uint64(to)
	}
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_events(p, C.uint64_t(from), C.uint64_t(t), o, n, e)
	})
}

// History is the derived history (the messages every request carries after the prefix).
func (s *Session) History() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_history(p, o, n, e)
	})
}

// Header is the folded request header, or null before the first request.
func (s *Session) Header() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_header(p, o, n, e)
	})
}

// Stats are counters over the log.
func (s *Session) Stats() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_stats(p, o, n, e)
	})
}

// ExportJSONL is the whole log as a JSONL file holds it, every record exactly as stored
// (chained digests included): written to a file, it opens to this session.
func (s *Session) ExportJSONL() ([]byte, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_export(p, o, n, e)
	})
}

// Verify rebuilds every recorded request from the log and compares digests.
func (s *Session) Verify() (json.RawMessage, error) {
	return s.str(func(p *C.lls_session, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_verify(p, o, n, e)
	})
}

// Append appends one event {"type","data","surfaceOp"?,"sources"?} and returns its seq.
// Allowed from inside an agent callback.
func (s *Session) Append(event any) (uint64, error) {
	b, err := toJSON(event)
	if err != nil {
		return 0, err
	}
	bp, bn := cbuf(b)
	var seq C.uint64_t
	err = s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status {
		return C.lls_session_append(p, bp, bn, &seq, e)
	})
	return uint64(seq), err
}

// AppendContext appends a user message as plugin context (a user/message event with source
// "plugin", surfaceOp "append"): the way a listener adds context to the current request.
func (s *Session) AppendContext(message any) (uint64, error) {
	m, err := toJSON(message)
	if err != nil {
		return 0, err
	}
	ev := map[string]any{"type": "user/message", "data": map[string]any{"message": json.RawMessage(m), "source": "plugin"}, "surfaceOp": "append"}
	return s.Append(ev)
}

// Refresh reads what the store holds beyond this handle's last event (what another writer
// appended since) and returns how many new events it read: a read-only handle's way to follow
// a live session, and a writer's way back after ErrConflict (with no live agent).
func (s *Session) Refresh() (uint64, error) {
	var n C.uint64_t
	err := s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status { return C.lls_session_refresh(p, &n, e) })
	return uint64(n), err
}

// Sync makes every appended event durable now.
func (s *Session) Sync() error {
	return s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status { return C.lls_session_sync(p, e) })
}

// VerifyFile verifies a stored JSONL log without opening it as a session.
func VerifyFile(path string) (json.RawMessage, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	pb := []byte(path)
	pp, pn := cbuf(pb)
	return outString(nil, func(o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_verify_file(pp, pn, o, n, e)
	})
}

// Render renders a request envelope into a provider's JSON body ("openai", "openai-responses",
// "anthropic", "gemini" or "gemini-interactions") with the default options; prefixLen is how many leading messages are
// the session prefix.
func Render(renderer string, envelope []byte, prefixLen int) (json.RawMessage, error) {
	rb := []byte(renderer)
	rp, rn := cbuf(rb)
	ep, en := cbuf(envelope)
	return outString(nil, func(o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_render(rp, rn, ep, en, C.size_t(prefixLen), o, n, e)
	})
}

// RenderOptions are the options of RenderWithOptions (docs/render.md, docs/caching.md); the
// zero value is the default rendering.
type RenderOptions struct {
	// PrefixLen is how many leading envelope messages are the session prefix.
	PrefixLen int `json:"prefixLen,omitempty"`
	// PromptCacheKey is the OpenAI-compatible prompt_cache_key: nil sends the envelope's
	// session id (the default), false sends none, a string sends that key.
	PromptCacheKey any `json:"promptCacheKey,omitempty"`
	// PromptCacheRetention is sent verbatim as prompt_cache_retention ("in_memory", "24h").
	PromptCacheRetention string `json:"promptCacheRetention,omitempty"`
	// CacheTTL is the ttl of the Anthropic cache breakpoints: "5m" or "1h" ("": the default).
	CacheTTL string `json:"cacheTtl,omitempty"`
	// PromptCacheOptions is OpenAI's prompt_cache_options (gpt-5.6 and later; both OpenAI
	// formats); its TTL with PromptCacheRetention is an error.
	PromptCacheOptions *PromptCacheOptions `json:"promptCacheOptions,omitempty"`
	// PromptCacheBreakpoints places OpenAI's prompt_cache_breakpoint marks at the end of the
	// system prompt, the session prefix and the history.
	PromptCacheBreakpoints bool `json:"promptCacheBreakpoints,omitempty"`
	// CacheDiagnostics sends Anthropic's diagnostics.previous_message_id (the id of the
	// previous response, which the log keeps; null on the first turn). Since ABI 2 minor 5.
	CacheDiagnostics bool `json:"cacheDiagnostics,omitempty"`
}

// PromptCacheOptions is OpenAI's prompt_cache_options: Mode "implicit" or "explicit", TTL
// (e.g. "30m"); empty fields are not sent.
type PromptCacheOptions struct {
	Mode string `json:"mode,omitempty"`
	TTL  string `json:"ttl,omitempty"`
}

// RenderWithOptions renders a request envelope into a provider's JSON body, as Render does,
// with render options (nil: the defaults).
func RenderWithOptions(renderer string, envelope []byte, opts *RenderOptions) (json.RawMessage, error) {
	var o []byte
	if opts != nil {
		var err error
		if o, err = toJSON(opts); err != nil {
			return nil, err
		}
	}
	rb := []byte(renderer)
	rp, rn := cbuf(rb)
	ep, en := cbuf(envelope)
	op, on := cbufOpt(o)
	return outString(nil, func(out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_render_with_options(rp, rn, ep, en, op, on, out, n, e)
	})
}

// ParseResponse parses a provider response body ("openai", "openai-responses", "anthropic",
// "gemini" or "gemini-interactions") into {"message","usage"?,"finishReason"?}, which
// Agent.RecordResponse takes as it is. For a streamed response use a Stream (or ReadStream).
func ParseResponse(renderer string, body []byte) (json.RawMessage, error) {
	rb := []byte(renderer)
	rp, rn := cbuf(rb)
	bp, bn := cbuf(body)
	return outString(nil, func(o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_parse_response(rp, rn, bp, bn, o, n, e)
	})
}

// UsageFromProvider maps a provider usage object ("openai", "llama.cpp", "deepseek",
// "openai-responses", "anthropic", "gemini") into the library's Usage JSON.
func UsageFromProvider(provider string, usage []byte) (json.RawMessage, error) {
	pb := []byte(provider)
	pp, pn := cbuf(pb)
	up, un := cbuf(usage)
	return outString(nil, func(o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_usage_from_provider(pp, pn, up, un, o, n, e)
	})
}

// IsContextOverflow reports whether a provider error (HTTP status and body) says the prompt
// does not fit the context window.
func IsContextOverflow(status int, body []byte) bool {
	bp, bn := cbuf(body)
	return bool(C.lls_is_context_overflow(C.uint16_t(status), bp, bn))
}
