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
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

// opCtx is the context of one library call.
type opCtx = context.Context

// opState is what the callbacks of one library call share with it: the call's context, and a
// panic or error raised by a Go callback, re-raised or attached after the call returns.
type opState struct {
	ctx      context.Context
	panicked bool
	panicVal any
	cbErr    error
}

// call runs one library call whose callbacks may run Go code: it converts the status to an
// *Error and re-raises a panic of a callback once the library call has returned.
//
// The callbacks find the call's opState without any goroutine identity: the library calls back
// only on the thread that made the call, so the call locks its goroutine to the thread, stores
// a cgo.Handle of its opState in a C thread-local (goshim_op_swap) for the duration of the
// library call, and the C trampoline passes that value to llsGoCallback. A callback that calls
// the library again nests: the inner call saves and restores the outer one's value.
func call(ctx opCtx, f func(e **C.lls_error) C.lls_status) error {
	if ctx == nil {
		ctx = context.Background()
	}
	st := &opState{ctx: ctx}
	var e *C.lls_error
	rc := runOp(st, func() C.lls_status { return f(&e) })
	if st.panicked {
		if e != nil {
			C.lls_error_free(e)
		}
		panic(st.panicVal)
	}
	if rc == 0 {
		return nil
	}
	err := takeError(rc, e)
	if err.Code == StatusCancelled && ctx.Err() != nil {
		err.cause = context.Cause(ctx)
	} else if st.cbErr != nil && err.cause == nil {
		err.cause = st.cbErr
	}
	return err
}

// runOp makes st the running operation of this thread while f runs (see call).
func runOp(st *opState, f func() C.lls_status) C.lls_status {
	runtime.LockOSThread()
	h := cgo.NewHandle(st)
	prev := C.goshim_op_swap(C.uintptr_t(h))
	defer func() {
		C.goshim_op_swap(prev)
		h.Delete()
		runtime.UnlockOSThread()
	}()
	return f()
}

// opOf is the operation a callback runs for: the value the trampoline read from the thread's
// goshim_op (0: a callback outside any call of this binding).
func opOf(op C.uintptr_t) *opState {
	if op == 0 {
		return nil
	}
	st, _ := cgo.Handle(uintptr(op)).Value().(*opState)
	return st
}

// callbackState is a registered Go callback: synchronous (answers by returning) or
// asynchronous (answers its Reply later, from any goroutine).
type callbackState struct {
	sync  func(ctx context.Context, in []byte) ([]byte, error)
	async func(ctx context.Context, in []byte, r *Reply)
}

func newHandle(st *callbackState) C.uintptr_t { return C.uintptr_t(cgo.NewHandle(st)) }

// Reply is the answer slot of an asynchronous callback: answer it exactly once, from any
// goroutine, with Complete or Fail. After the operation was cancelled, answering is still
// required (and harmless: the answer is discarded). A Reply dropped unanswered is failed by a
// finalizer, as a safety net.
type Reply struct {
	p    *C.lls_reply
	used atomic.Bool
}

func newReply(p *C.lls_reply) *Reply { return &Reply{p: p} }

// Complete answers the reply with v (json.RawMessage / []byte as JSON text, anything else
// marshalled).
func (r *Reply) Complete(v any) error {
	b, err := toJSON(v)
	if err != nil {
		_ = r.Fail(err)
		return err
	}
	if !r.used.CompareAndSwap(false, true) {
		return &Error{Code: StatusReplyState, Kind: StatusReplyState.String(), Message: "the reply was already answered"}
	}
	p, n := cbuf(b)
	var e *C.lls_error
	if rc := C.lls_reply_complete(r.p, p, n, &e); rc != 0 {
		return takeError(rc, e)
	}
	return nil
}

// Fail fails the reply with err's message; the library call fails with ErrListener (or the
// status of the operation the callback served, e.g. ErrSummariser).
func (r *Reply) Fail(err error) error {
	msg := "callback failed"
	if err != nil {
		msg = err.Error()
	}
	if !r.used.CompareAndSwap(false, true) {
		return &Error{Code: StatusReplyState, Kind: StatusReplyState.String(), Message: "the reply was already answered"}
	}
	return replyFail(r.p, msg)
}

func replyFail(p *C.lls_reply, msg string) error {
	b := []byte(msg)
	bp, n := cbuf(b)
	var e *C.lls_error
	if rc := C.lls_reply_fail(p, bp, n, &e); rc != 0 {
		return takeError(rc, e)
	}
	return nil
}

func replyDropped(r *Reply) {
	if r.used.CompareAndSwap(false, true) {
		_ = replyFail(r.p, "the Go callback dropped its Reply without answering it")
	}
}

//export llsGoCallback
func llsGoCallback(userdata unsafe.Pointer, in *C.char, n C.size_t, reply *C.lls_reply, opHandle C.uintptr_t) C.int32_t {
	st := cgo.Handle(uintptr(userdata)).Value().(*callbackState)
	input := C.GoBytes(unsafe.Pointer(in), C.int(n))
	op := opOf(opHandle)
	ctx := context.Background()
	if op != nil {
		ctx = op.ctx
	}
	if st.async != nil {
		r := newReply(reply)
		runtime.SetFinalizer(r, replyDropped)
		if v, ok := runCatching(func() { st.async(ctx, input, r) }); ok {
			return C.LLS_CB_PENDING
		} else {
			notePanic(op, v)
			if r.used.CompareAndSwap(false, true) {
				_ = replyFail(reply, fmt.Sprintf("Go callback panicked: %v", v))
				return C.LLS_CB_ERROR
			}
			return C.LLS_CB_PENDING
		}
	}
	var out []byte
	var cbErr error
	if v, ok := runCatching(func() { out, cbErr = st.sync(ctx, input) }); !ok {
		notePanic(op, v)
		_ = replyFail(reply, fmt.Sprintf("Go callback panicked: %v", v))
		return C.LLS_CB_ERROR
	}
	if cbErr != nil {
		if op != nil {
			op.cbErr = cbErr
		}
		_ = replyFail(reply, cbErr.Error())
		return C.LLS_CB_ERROR
	}
	p, l := cbuf(out)
	var e *C.lls_error
	if rc := C.lls_reply_set_json(reply, p, l, &e); rc != 0 {
		// The reply was answered with this failure; the library call reports it.
		C.lls_error_free(e)
	}
	return C.LLS_CB_OK
}

// runCatching runs f and reports a panic's value (ok false) instead of unwinding into C.
func runCatching(f func()) (v any, ok bool) {
	ok = true
	func() {
		defer func() {
			if !ok {
				v = recover()
			}
		}()
		ok = false
		f()
		ok = true
	}()
	return v, ok
}

func notePanic(op *opState, v any) {
	if op == nil {
		// A callback outside any call made by this binding: nothing to re-raise it after.
		return
	}
	if !op.panicked {
		op.panicked, op.panicVal = true, v
	}
}

//export llsGoUserdataFree
func llsGoUserdataFree(userdata unsafe.Pointer) {
	cgo.Handle(uintptr(userdata)).Delete()
}

// jsonFunc adapts a typed synchronous callback.
func jsonFunc[In any](f func(ctx context.Context, in In) (any, error)) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, raw []byte) ([]byte, error) {
		var in In
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, fmt.Errorf("llmsession: cannot decode callback input: %w", err)
		}
		out, err := f(ctx, in)
		if err != nil {
			return nil, err
		}
		return toJSON(out)
	}
}

// InvokeCallback runs fn exactly as the library runs its listeners and summariser (through
// lls_callback_invoke: the same trampoline, reply rules and errors) and returns its answer.
// A self-test of the binding's callback path; ctx cancels a pending reply's wait.
func InvokeCallback(ctx context.Context, fn func(ctx context.Context, in json.RawMessage) (any, error), in []byte) (json.RawMessage, error) {
	return invoke(ctx, &callbackState{sync: func(ctx context.Context, raw []byte) ([]byte, error) {
		out, err := fn(ctx, raw)
		if err != nil {
			return nil, err
		}
		return toJSON(out)
	}}, in)
}

// InvokeCallbackAsync is InvokeCallback for an asynchronous callback that answers its Reply
// later, from any goroutine.
func InvokeCallbackAsync(ctx context.Context, fn func(ctx context.Context, in json.RawMessage, r *Reply), in []byte) (json.RawMessage, error) {
	return invoke(ctx, &callbackState{async: func(ctx context.Context, raw []byte, r *Reply) { fn(ctx, raw, r) }}, in)
}

func invoke(ctx context.Context, st *callbackState, in []byte) (json.RawMessage, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	tok, cbctx, done, err := opCancel(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	h := newHandle(st)
	p, n := cbuf(in)
	out, err := outString(cbctx, func(out **C.char, l *C.size_t, e **C.lls_error) C.lls_status {
		return C.goshim_callback_invoke(h, p, n, tok, out, l, e)
	})
	return out, attachCause(ctx, err)
}

// attachCause makes a cancellation caused by ctx unwrap to ctx's cause.
func attachCause(ctx context.Context, err error) error {
	if e, ok := err.(*Error); ok && e.Code == StatusCancelled && ctx != nil && ctx.Err() != nil {
		e.cause = context.Cause(ctx)
	}
	return err
}

func cgoHandleDelete(h C.uintptr_t) { cgo.Handle(uintptr(h)).Delete() }
