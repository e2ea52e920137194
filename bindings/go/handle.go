package llmsession

import (
	"sync"
	"unsafe"
)

// handle guards a library pointer against use after free: calls acquire it for their
// duration, and Close frees it once no call uses it any more (immediately, or when the last
// running call returns — so Close from inside a callback is safe).
type handle struct {
	mu      sync.Mutex
	ptr     unsafe.Pointer
	users   int
	closing bool
	free    func(unsafe.Pointer)
}

func (h *handle) acquire() (unsafe.Pointer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil || h.closing {
		return nil, ErrClosed
	}
	h.users++
	return h.ptr, nil
}

func (h *handle) release() {
	h.mu.Lock()
	h.users--
	p := h.takeIfDone()
	h.mu.Unlock()
	if p != nil {
		h.free(p)
	}
}

// takeIfDone (mu held) returns the pointer to free when closing and unused.
func (h *handle) takeIfDone() unsafe.Pointer {
	if h.closing && h.users == 0 && h.ptr != nil {
		p := h.ptr
		h.ptr = nil
		return p
	}
	return nil
}

// close marks the handle closed; it reports false when it already was.
func (h *handle) close() bool {
	h.mu.Lock()
	if h.closing || h.ptr == nil {
		h.mu.Unlock()
		return false
	}
	h.closing = true
	p := h.takeIfDone()
	h.mu.Unlock()
	if p != nil {
		h.free(p)
	}
	return true
}

// peek returns the pointer without counting a use (for Dispose while a call runs).
func (h *handle) peek() unsafe.Pointer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ptr
}
