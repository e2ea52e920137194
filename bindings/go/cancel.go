package llmsession

/*
#include <stdbool.h>
#include <llmsession.h>
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Cancel is a library cancel token. Operations take a context.Context and trip a token of
// their own when it is done; attach a Cancel to the context with WithCancel to trip the
// operation's token directly — synchronously, e.g. from inside a callback, where a context's
// cancellation would only be noticed by a watching goroutine a moment later.
// A tripped token stays tripped.
type Cancel struct {
	h handle
}

// NewCancel creates an untripped token. Close it when done (a finalizer frees a forgotten one).
func NewCancel() (*Cancel, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var p *C.lls_cancel
	var e *C.lls_error
	if rc := C.lls_cancel_new(&p, &e); rc != 0 {
		return nil, takeError(rc, e)
	}
	c := &Cancel{h: handle{ptr: unsafe.Pointer(p), free: func(p unsafe.Pointer) { C.lls_cancel_free((*C.lls_cancel)(p)) }}}
	runtime.SetFinalizer(c, (*Cancel).Close)
	return c, nil
}

// Trip trips the token: operations waiting on it end with ErrCancelled. Idempotent; safe from
// any goroutine at any time.
func (c *Cancel) Trip() error {
	p, err := c.h.acquire()
	if err != nil {
		return err
	}
	defer c.h.release()
	var e *C.lls_error
	if rc := C.lls_cancel_trip((*C.lls_cancel)(p), &e); rc != 0 {
		return takeError(rc, e)
	}
	return nil
}

// Tripped reports whether the token was tripped.
func (c *Cancel) Tripped() bool {
	p, err := c.h.acquire()
	if err != nil {
		return false
	}
	defer c.h.release()
	var b C.bool
	var e *C.lls_error
	if rc := C.lls_cancel_is_tripped((*C.lls_cancel)(p), &b, &e); rc != 0 {
		C.lls_error_free(e)
		return false
	}
	return bool(b)
}

// Close frees the token (an operation still using it keeps it alive until it returns).
func (c *Cancel) Close() error {
	c.h.close()
	runtime.SetFinalizer(c, nil)
	return nil
}

type cancelKey struct{}

// WithCancel returns a context carrying c: operations given the context use c as their cancel
// token (and also trip it when the context is done).
func WithCancel(ctx context.Context, c *Cancel) context.Context {
	return context.WithValue(ctx, cancelKey{}, c)
}

// opCancel gives the token for one operation and a cleanup to call after it: the token of a
// Cancel attached with WithCancel, or a new one, tripped when ctx is done (by a function
// registered with context.AfterFunc: no goroutine per operation for the standard library's
// contexts). A ctx that can never be done gets no token (nil: never cancelled).
//
// It also returns the context the operation's callbacks receive: it carries ctx's values and
// is done only once the token has been tripped, so a callback that answers when its context is
// done cannot race the cancellation (the operation then reliably fails with ErrCancelled).
//
// The common case, a ctx that can never be done (context.Background, or only values) and no
// Cancel attached, costs next to nothing: no token, no watcher, and for the callbacks an
// opEndCtx, which makes its channel only if a callback asks for it.
func opCancel(ctx context.Context) (*C.lls_cancel, context.Context, func(), error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c, _ := ctx.Value(cancelKey{}).(*Cancel)
	if c == nil && ctx.Done() == nil {
		if _, ok := ctx.Deadline(); !ok {
			oc := &opEndCtx{Context: ctx}
			return nil, oc, oc.end, nil
		}
	}
	cbctx, cbCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var tok *C.lls_cancel
	var cleanup []func()
	if c != nil {
		p, err := c.h.acquire()
		if err != nil {
			cbCancel(nil)
			return nil, nil, nil, err
		}
		tok = (*C.lls_cancel)(p)
		cleanup = append(cleanup, c.h.release)
	} else if ctx.Done() == nil {
		// ctx can never be done: no token, which the library reads as "never cancelled" (saves
		// creating and freeing one per call).
	} else {
		var e *C.lls_error
		if rc := C.lls_cancel_new(&tok, &e); rc != 0 {
			cbCancel(nil)
			return nil, nil, nil, takeError(rc, e)
		}
		t := tok
		cleanup = append(cleanup, func() { C.lls_cancel_free(t) })
	}
	if ctx.Err() != nil {
		C.lls_cancel_trip(tok, nil)
		cbCancel(context.Cause(ctx))
	} else if ctx.Done() != nil {
		tripped := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(tripped)
			C.lls_cancel_trip(tok, nil)
			cbCancel(context.Cause(ctx))
		})
		// Runs first: the trip must be done (or never start) before the token is released.
		cleanup = append([]func(){func() {
			if !stop() {
				<-tripped
			}
		}}, cleanup...)
	}
	return tok, cbctx, func() {
		for _, f := range cleanup {
			f()
		}
		cbCancel(nil)
	}, nil
}

// opEndCtx is the callbacks' context of an operation whose own context can never be done: it
// carries that context's values and is done once the operation has returned (Err
// context.Canceled), as the context opCancel makes otherwise — so a callback's worker that
// waits for it (an asynchronous reply the operation stopped waiting for, on disposal) is still
// released — but its channel is made only when a callback asks for it (Done).
type opEndCtx struct {
	context.Context // the operation's context, for Value

	mu    sync.Mutex
	done  chan struct{}
	ended bool
}

func (c *opEndCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *opEndCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.ended {
			close(c.done)
		}
	}
	return c.done
}

func (c *opEndCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return context.Canceled
	}
	return nil
}

func (c *opEndCtx) String() string { return "llmsession operation context" }

// end marks the operation returned.
func (c *opEndCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended = true
		if c.done != nil {
			close(c.done)
		}
	}
}
