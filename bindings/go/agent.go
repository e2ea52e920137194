package llmsession

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"unsafe"
)

// Agent is one agent instance over a session: it drives turns and steps, builds every
// request, and runs compaction. Safe for concurrent use (the library serialises calls); inside
// the agent's own callbacks only Dispose (and the Session's methods) may be called.
type Agent struct {
	h       handle
	session *Session
}

// PrefixInput is what a session prefix listener receives.
type PrefixInput struct {
	Rest     []json.RawMessage `json:"rest"` // what the listeners registered after this one produced
	Instance uint64            `json:"instance"`
	Turn     uint64            `json:"turn"`
}

// PrefixListener contributes to the session prefix: it returns rest extended with its own
// messages (prepend them to keep registration order). It runs once per instance.
type PrefixListener func(ctx context.Context, in PrefixInput) ([]json.RawMessage, error)

// PreStepInput is what a pre-step listener receives before every request.
type PreStepInput struct {
	Prefix []json.RawMessage `json:"prefix"`
	System *string           `json:"system"`
	Tools  json.RawMessage   `json:"tools"`
	Turn   uint64            `json:"turn"`
	Step   uint64            `json:"step"`
	Raw    json.RawMessage   `json:"-"` // the input exactly as received
}

// PreStepListener runs before every request; it may append context to the session.
type PreStepListener func(ctx context.Context, in PreStepInput) error

// SummaryInput is what the summariser receives.
type SummaryInput struct {
	Request        json.RawMessage `json:"request"` // the summarisation request envelope
	Provider       string          `json:"provider"`
	Model          string          `json:"model"`
	MaxTokens      *uint64         `json:"maxTokens"`
	Digest         string          `json:"digest"`
	SharedMessages int             `json:"sharedMessages"`
	PrefixLen      int             `json:"prefixLen"`
}

// SummaryOutput is the summariser's answer.
type SummaryOutput struct {
	Text      string          `json:"text"`
	Usage     json.RawMessage `json:"usage,omitempty"`
	Provider  string          `json:"provider,omitempty"`
	Model     string          `json:"model,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// Summariser writes the summary compaction asks for.
type Summariser func(ctx context.Context, in SummaryInput) (SummaryOutput, error)

// AsyncSummariser answers later, from any goroutine, with r.Complete(SummaryOutput) or
// r.Fail(err); ctx is done when the operation is cancelled.
type AsyncSummariser func(ctx context.Context, in SummaryInput, r *Reply)

// TokenCounter counts the tokens of one item ({"kind":"system","text"},
// {"kind":"tools","tools"} or {"kind":"message","message"}), framing included.
type TokenCounter func(ctx context.Context, item json.RawMessage) (int, error)

// RequestInfo describes a built request.
type RequestInfo struct {
	Turn           uint64 `json:"turn"`
	Step           uint64 `json:"step"`
	Digest         string `json:"digest"`
	Bytes          int    `json:"bytes"`
	PrefixLen      int    `json:"prefixLen"`
	MessageCount   int    `json:"messageCount"`
	SharedMessages int    `json:"sharedMessages"`
	Instance       uint64 `json:"instance"`
	StepSeq        uint64 `json:"stepSeq"`
	// Purpose is PurposeConversation or PurposeCompaction (set by NextBody and NextBodyView).
	Purpose string `json:"purpose,omitempty"`
}

// Request is a built request: the envelope (the exact logged bytes) and its description.
type Request struct {
	Envelope json.RawMessage
	Info     RequestInfo
}

// NewAgent creates an agent instance over s. opts is {"config": {"provider","model",...},
// "system"?, "tools"?, "checkRequests"?, "policy"?, "tokenizer"?} (a map, a struct or JSON).
func NewAgent(s *Session, opts any) (*Agent, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	b, err := toJSON(opts)
	if err != nil {
		return nil, err
	}
	bp, bn := cbuf(b)
	var out *C.lls_agent
	if err := s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status {
		return C.lls_agent_new(p, bp, bn, &out, e)
	}); err != nil {
		return nil, err
	}
	a := &Agent{session: s, h: handle{ptr: unsafe.Pointer(out), free: func(p unsafe.Pointer) { C.lls_agent_free((*C.lls_agent)(p)) }}}
	runtime.SetFinalizer(a, (*Agent).Close)
	return a, nil
}

// Session is the session this agent was created over.
func (a *Agent) Session() *Session { return a.session }

func (a *Agent) with(ctx opCtx, f func(p *C.lls_agent, e **C.lls_error) C.lls_status) error {
	p, err := a.h.acquire()
	if err != nil {
		return err
	}
	defer a.h.release()
	return call(ctx, func(e **C.lls_error) C.lls_status { return f((*C.lls_agent)(p), e) })
}

// withCancel runs an operation that takes a cancel token, tripped when ctx is done.
func (a *Agent) withCancel(ctx context.Context, f func(p *C.lls_agent, tok *C.lls_cancel, e **C.lls_error) C.lls_status) error {
	if ctx == nil {
		ctx = context.Background()
	}
	tok, cbctx, done, err := opCancel(ctx)
	if err != nil {
		return err
	}
	defer done()
	return attachCause(ctx, a.with(cbctx, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return f(p, tok, e) }))
}

func (a *Agent) jsonArg(v any, f func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status) error {
	b, err := toJSON(v)
	if err != nil {
		return err
	}
	bp, bn := cbuf(b)
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return f(p, bp, bn, e) })
}

func (a *Agent) str(f func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status) (json.RawMessage, error) {
	var out *C.char
	var n C.size_t
	if err := a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return f(p, &out, &n, e) }); err != nil {
		return nil, err
	}
	return takeString(out, n), nil
}

// SetOptions replaces the agent options (effective at the next request).
func (a *Agent) SetOptions(opts any) error {
	return a.jsonArg(opts, func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_set_options(p, b, n, e)
	})
}

// SetPolicy sets the compaction policy (a policy, a table {"default","models"}, or nil).
func (a *Agent) SetPolicy(policy any) error {
	return a.jsonArg(policy, func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_set_policy(p, b, n, e)
	})
}

// SetTokenizer counts tokens with a HuggingFace tokenizer.json from now on.
func (a *Agent) SetTokenizer(path string) error {
	pb := []byte(path)
	pp, pn := cbuf(pb)
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_set_tokenizer(p, pp, pn, e)
	})
}

// ClearTokenCounter goes back to the built-in token estimate.
func (a *Agent) ClearTokenCounter() error {
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return C.lls_agent_clear_token_counter(p, e) })
}

func (a *Agent) register(what C.int, st *callbackState) error {
	h := newHandle(st) // the library owns it from here on and deletes it through the free hook
	p, err := a.h.acquire()
	if err != nil {
		cgoHandleDelete(h)
		return err
	}
	defer a.h.release()
	return call(nil, func(e **C.lls_error) C.lls_status { return C.goshim_agent_register((*C.lls_agent)(p), what, h, e) })
}

// AddPrefixListener adds a session prefix listener (run once per instance, in a waterfall).
func (a *Agent) AddPrefixListener(l PrefixListener) error {
	return a.register(C.GOSHIM_PREFIX, &callbackState{sync: jsonFunc(func(ctx context.Context, in PrefixInput) (any, error) {
		out, err := l(ctx, in)
		if out == nil && err == nil {
			out = []json.RawMessage{}
		}
		return out, err
	})})
}

// AddPrefixMessages adds a prefix listener on typed messages: rest is in.Rest decoded, and it
// returns the list to pass on (its own messages and rest: prepend its own to keep registration
// order), e.g. append([]Message{UserText("project notes")}, rest...).
func (a *Agent) AddPrefixMessages(l func(ctx context.Context, in PrefixInput, rest []Message) ([]Message, error)) error {
	return a.register(C.GOSHIM_PREFIX, &callbackState{sync: jsonFunc(func(ctx context.Context, in PrefixInput) (any, error) {
		rest := make([]Message, len(in.Rest))
		for i, m := range in.Rest {
			if err := json.Unmarshal(m, &rest[i]); err != nil {
				return nil, fmt.Errorf("llmsession: cannot decode the prefix listener's rest[%d]: %w", i, err)
			}
		}
		out, err := l(ctx, in, rest)
		if out == nil && err == nil {
			out = []Message{}
		}
		return out, err
	})})
}

// AddPrefixListenerRaw adds a prefix listener working on raw JSON: it receives the input
// object {"rest","instance","turn"} and returns the JSON array of messages (validated by the
// library).
func (a *Agent) AddPrefixListenerRaw(l func(ctx context.Context, in json.RawMessage) (json.RawMessage, error)) error {
	return a.register(C.GOSHIM_PREFIX, &callbackState{sync: func(ctx context.Context, raw []byte) ([]byte, error) {
		return l(ctx, raw)
	}})
}

// AddPrefixListenerAsync adds a prefix listener that answers its Reply later (with the
// extended message array), from any goroutine.
func (a *Agent) AddPrefixListenerAsync(l func(ctx context.Context, in PrefixInput, r *Reply)) error {
	return a.register(C.GOSHIM_PREFIX, &callbackState{async: func(ctx context.Context, raw []byte, r *Reply) {
		var in PrefixInput
		if err := json.Unmarshal(raw, &in); err != nil {
			_ = r.Fail(err)
			return
		}
		l(ctx, in, r)
	}})
}

// AddPreStepListener adds a listener that runs before every request.
func (a *Agent) AddPreStepListener(l PreStepListener) error {
	return a.register(C.GOSHIM_PRE_STEP, &callbackState{sync: func(ctx context.Context, raw []byte) ([]byte, error) {
		var in PreStepInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		in.Raw = raw
		if err := l(ctx, in); err != nil {
			return nil, err
		}
		return []byte("null"), nil
	}})
}

// SetSummariser sets the summariser compaction calls.
func (a *Agent) SetSummariser(s Summariser) error {
	return a.register(C.GOSHIM_SUMMARISER, &callbackState{sync: jsonFunc(func(ctx context.Context, in SummaryInput) (any, error) {
		return s(ctx, in)
	})})
}

// SetSummariserAsync sets a summariser that answers its Reply later, from any goroutine
// (e.g. after an HTTP call). The operation's cancellation ends the library's wait (ctx is done
// then); the Reply must still be answered.
func (a *Agent) SetSummariserAsync(s AsyncSummariser) error {
	return a.register(C.GOSHIM_SUMMARISER, &callbackState{async: func(ctx context.Context, raw []byte, r *Reply) {
		var in SummaryInput
		if err := json.Unmarshal(raw, &in); err != nil {
			_ = r.Fail(err)
			return
		}
		s(ctx, in, r)
	}})
}

// SetTokenCounter sets a host token counter.
func (a *Agent) SetTokenCounter(c TokenCounter) error {
	return a.register(C.GOSHIM_TOKEN_COUNTER, &callbackState{sync: func(ctx context.Context, raw []byte) ([]byte, error) {
		n, err := c(ctx, raw)
		if err != nil {
			return nil, err
		}
		return toJSON(n)
	}})
}

func userMessage(msg any) any {
	if s, ok := msg.(string); ok {
		return UserText(s)
	}
	return msg
}

// StartTurn opens a turn with the user's message (a message, or a string for a text message)
// and returns the turn number.
func (a *Agent) StartTurn(msg any) (uint64, error) {
	var turn C.uint64_t
	err := a.jsonArg(userMessage(msg), func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_start_turn(p, b, n, &turn, e)
	})
	return uint64(turn), err
}

// NextRequest builds the next request of the open turn (composing the prefix once per
// instance, running pre-step listeners and, under pressure, compaction). ctx cancels
// composition, listeners and summarisation.
func (a *Agent) NextRequest(ctx context.Context) (*Request, error) {
	var r *Request
	err := a.nextRequest(ctx, func(out *C.char, n C.size_t, info RequestInfo) error {
		r = &Request{Envelope: takeString(out, n), Info: info}
		return nil
	})
	return r, err
}

// NextRequestView builds the next request like NextRequest, but lends the envelope instead of
// copying it into Go memory: view runs with the library's own buffer, valid only until view
// returns (do not keep envelope or a slice of it; copy what must outlive the call), and its
// error is returned. For hosts that use the bytes at once (write them into a request body,
// hash or render them): at 1k messages the envelope is half a megabyte, and copying it into
// the Go heap costs more than building it.
func (a *Agent) NextRequestView(ctx context.Context, view func(envelope []byte, info RequestInfo) error) error {
	return a.nextRequest(ctx, func(out *C.char, n C.size_t, info RequestInfo) error {
		defer C.lls_string_free(out)
		var env []byte
		if n > 0 {
			env = unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n))
		}
		return view(env, info)
	})
}

// nextRequest builds the next request and its description in one acquisition of the agent and
// hands the library's envelope buffer to use, which owns it from then on (frees it, or takes it
// with takeString). On failure the buffer is freed here and use is not called.
func (a *Agent) nextRequest(ctx context.Context, use func(out *C.char, n C.size_t, info RequestInfo) error) error {
	var out *C.char
	var n C.size_t
	var info *C.char
	var in C.size_t
	err := a.withCancel(ctx, func(p *C.lls_agent, tok *C.lls_cancel, e **C.lls_error) C.lls_status {
		rc := C.lls_agent_next_request(p, tok, &out, &n, e)
		if rc == 0 {
			// Still inside the same acquisition; the info describes this request unless
			// another goroutine raced a request on the same agent in between.
			rc = C.lls_agent_request_info(p, &info, &in, e)
		}
		return rc
	})
	var ri RequestInfo
	if err == nil {
		err = json.Unmarshal(takeString(info, in), &ri)
	} else if info != nil {
		C.lls_string_free(info)
	}
	if err != nil {
		if out != nil {
			C.lls_string_free(out)
		}
		return err
	}
	return use(out, n, ri)
}

// RequestInfo describes the last request NextRequest built.
func (a *Agent) RequestInfo() (RequestInfo, error) {
	var ri RequestInfo
	b, err := a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_request_info(p, o, n, e)
	})
	if err == nil {
		err = json.Unmarshal(b, &ri)
	}
	return ri, err
}

// RecordResponse records the provider's response {"message", "usage"?} and returns the seq
// of the assistant/message event.
func (a *Agent) RecordResponse(resp any) (uint64, error) {
	var seq C.uint64_t
	err := a.jsonArg(resp, func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_record_response(p, b, n, &seq, e)
	})
	return uint64(seq), err
}

// RecordToolResult records {"callId", "content"|"text", "isError"?} and returns how many
// results were written to the log now.
func (a *Agent) RecordToolResult(result any) (int, error) {
	var w C.size_t
	err := a.jsonArg(result, func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_record_tool_result(p, b, n, &w, e)
	})
	return int(w), err
}

// Inject adds durable host context (a user message, or a string) carried by the next request.
// deferred is true when it waits for the open request or tool batch to close.
func (a *Agent) Inject(msg any) (seq uint64, deferred bool, err error) {
	var s C.uint64_t
	err = a.jsonArg(userMessage(msg), func(p *C.lls_agent, b *C.char, n C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_inject(p, b, n, &s, e)
	})
	if uint64(s) == uint64(C.LLS_SEQ_NONE) {
		return 0, true, err
	}
	return uint64(s), false, err
}

// ProviderError records that the provider failed the open request. With overflow the agent
// compacts; retry is then true: ask for the request again.
func (a *Agent) ProviderError(ctx context.Context, message string, overflow bool) (retry bool, err error) {
	b, _ := json.Marshal(map[string]any{"message": message, "overflow": overflow})
	bp, bn := cbuf(b)
	var r C.int32_t
	err = a.withCancel(ctx, func(p *C.lls_agent, tok *C.lls_cancel, e **C.lls_error) C.lls_status {
		return C.lls_agent_provider_error(p, bp, bn, tok, &r, e)
	})
	return r == 1, err
}

// EndTurn ends the open turn ("completed", "max-tokens", "aborted", "error", "rejected",
// "disposed", "interrupted").
func (a *Agent) EndTurn(reason string) error {
	rb := []byte(reason)
	rp, rn := cbuf(rb)
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_end_turn(p, rp, rn, e)
	})
}

// Compact compacts now; opts is nil or {"span": [start, end]}. It returns {"outcome",
// "span", "seqs", "request", "error"?}.
func (a *Agent) Compact(ctx context.Context, opts any) (json.RawMessage, error) {
	var b []byte
	if opts != nil {
		var err error
		if b, err = toJSON(opts); err != nil {
			return nil, err
		}
	}
	bp, bn := cbufOpt(b)
	var out *C.char
	var n C.size_t
	err := a.withCancel(ctx, func(p *C.lls_agent, tok *C.lls_cancel, e **C.lls_error) C.lls_status {
		return C.lls_agent_compact(p, bp, bn, tok, &out, &n, e)
	})
	res := takeString(out, n)
	return res, err
}

// Measure measures the prompt the next request would carry.
func (a *Agent) Measure(ctx context.Context) (json.RawMessage, error) {
	var out *C.char
	var n C.size_t
	err := a.with(ctx, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return C.lls_agent_measure(p, &out, &n, e) })
	return takeString(out, n), err
}

// Stats are this instance's statistics.
func (a *Agent) Stats() (json.RawMessage, error) {
	return a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_stats(p, o, n, e)
	})
}

// Prefix is the instance's frozen session prefix, or null before it was composed.
func (a *Agent) Prefix() (json.RawMessage, error) {
	return a.str(func(p *C.lls_agent, o **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_prefix(p, o, n, e)
	})
}

// Dispose ends the instance (an open turn ends "disposed"; callbacks are released). Callable
// from any goroutine at any time, including from the agent's own callbacks, where it
// interrupts the running operation.
func (a *Agent) Dispose() error {
	return a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status { return C.lls_agent_dispose(p, e) })
}

// Close disposes the instance if still live and frees the agent (once no call uses it).
func (a *Agent) Close() error {
	runtime.SetFinalizer(a, nil)
	if p := a.h.peek(); p != nil {
		_ = call(nil, func(e **C.lls_error) C.lls_status { return C.lls_agent_dispose((*C.lls_agent)(p), e) })
	}
	a.h.close()
	return nil
}
