// Package llmsession is the Go binding of llmsession, the session-state library for LLM
// agents (an append-only event log from which every request is rebuilt byte for byte, a
// frozen per-instance session prefix, and cache-friendly compaction).
//
// It wraps the C ABI (include/llmsession.h) with cgo. How it links the library is chosen by a
// build tag (link_*.go): by default the static library the released module carries
// (internal/native/linux_amd64, linux/amd64 only; not in the repository), with
// -tags llmsession_system the one pkg-config finds (`llmsession.pc`: an installed library or
// the checkout's build). Handles (Session, Agent, Cancel) are safe for use by several goroutines;
// the library serialises calls internally. Close every handle when done; a finalizer frees
// forgotten ones as a safety net. See docs/go.md.
package llmsession

/*
#include <stdlib.h>
#include <llmsession.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// ABIVersion is the C ABI version this binding was written against (LLS_ABI_VERSION).
const ABIVersion = 2

// ABIMinor is the ABI minor version (compatible additions to ABIVersion) this binding uses:
// 1 brought the provider-body hot path (SetRenderer, NextBody, RecordBody, ...), 2 the
// status names (lls_status_name, behind Status.String and every Error's Kind), 3 the observer
// hook (lls_set_observer, behind SetObserver and SetLogger), 4 the finish reason of a recorded
// response (lls_agent_record_body_info, behind RecordBody and Recorded.FinishReason), 5 the
// store conformance kit (lls_store_conformance, behind CheckStore and CheckStoreURL), 6 native
// compaction (lls_agent_native_compaction_*, behind BeginNativeCompaction,
// RecordNativeCompaction and FailNativeCompaction) and agent trees (lls_agent_spawn and
// lls_agent_finish_child, behind Spawn and FinishChild) and the cache clock (lls_agent_cache_clock and
// lls_agent_keepalive_body, behind CacheClock, KeepaliveBody and CompactIdle), 7 checkpoints
// (the Checkpoints and Check options of every open, directory listings).
const ABIMinor = 7

// abiErr is non-nil when the loaded library speaks another ABI; every constructor returns it.
var abiErr error

func init() {
	if got := uint32(C.lls_abi_version()); got != ABIVersion || C.LLS_ABI_VERSION != ABIVersion {
		abiErr = fmt.Errorf("llmsession: the loaded library has ABI version %d (version %s), but this Go binding needs ABI version %d; rebuild or install a matching libllmsession",
			got, C.GoString(C.lls_version()), ABIVersion)
	} else if minor := uint32(C.lls_abi_minor()); minor < ABIMinor {
		abiErr = fmt.Errorf("llmsession: the loaded library has ABI version %d.%d (version %s), but this Go binding needs %d.%d or later; install a newer libllmsession",
			got, minor, C.GoString(C.lls_version()), ABIVersion, ABIMinor)
	}
}

// CheckABI reports whether the loaded C library has the ABI version this binding needs.
// Constructors (NewMemorySession, OpenFile, NewCancel, ...) return the same error.
func CheckABI() error { return abiErr }

// Version is the loaded library's version, e.g. "0.2.0".
func Version() string { return C.GoString(C.lls_version()) }

// LiveHandleCount is the number of live library handles in the process (sessions, agents,
// cancel tokens, errors, pending replies, ...): a leak check for tests.
func LiveHandleCount() int { return int(C.lls_live_handle_count()) }

// LiveStringCount is the number of strings the library has handed out and not yet freed,
// views not yet released (BodyView) included: a leak check for tests.
func LiveStringCount() int { return int(C.lls_live_string_count()) }

// toJSON encodes an argument: json.RawMessage and []byte are taken as JSON text, anything
// else is marshalled with encoding/json.
func toJSON(v any) ([]byte, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return x, nil
	case []byte:
		return x, nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, &Error{Code: StatusInvalidInput, Kind: StatusInvalidInput.String(), Message: "cannot encode argument as JSON: " + err.Error()}
		}
		return b, nil
	}
}

// empty is a one-byte buffer whose address is passed for zero-length input (never NULL).
var empty = C.CString("")

// cbuf returns a pointer and length for a Go byte slice passed to C for the call only.
func cbuf(b []byte) (*C.char, C.size_t) {
	if len(b) == 0 {
		return empty, 0
	}
	return (*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b))
}

// takeString copies and frees a string returned by the library.
func takeString(p *C.char, n C.size_t) []byte {
	if p == nil {
		return nil
	}
	b := C.GoBytes(unsafe.Pointer(p), C.int(n))
	C.lls_string_free(p)
	return b
}

// outString runs a call with a (char **out, size_t *out_len) result.
func outString(ctx opCtx, f func(out **C.char, n *C.size_t, e **C.lls_error) C.lls_status) ([]byte, error) {
	var p *C.char
	var n C.size_t
	err := call(ctx, func(e **C.lls_error) C.lls_status { return f(&p, &n, e) })
	if err != nil {
		return nil, err
	}
	return takeString(p, n), nil
}
