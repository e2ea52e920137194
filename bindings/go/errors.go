package llmsession

/*
#include <llmsession.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"syscall"
)

// Status is a library status code (lls_status). Every non-zero Status is also an error value,
// so it can serve as an errors.Is target: errors.Is(err, llmsession.ErrCancelled).
type Status int32

// Status codes (stable values, see docs/abi.md).
const (
	StatusOK               Status = 0
	StatusMalformedJSON    Status = 1
	StatusInvalidInput     Status = 2
	StatusOutOfOrder       Status = 3
	StatusBusy             Status = 4
	StatusCorruptLog       Status = 5
	StatusStorage          Status = 6
	StatusCancelled        Status = 7
	StatusDisposed         Status = 8
	StatusListener         Status = 9
	StatusSummariser       Status = 10
	StatusReconstruction   Status = 11
	StatusInvalidPolicy    Status = 12
	StatusOverflowBudget   Status = 13
	StatusNothingToCompact Status = 14
	StatusTokenizer        Status = 15
	StatusPoisoned         Status = 16
	StatusInternal         Status = 17
	StatusLocked           Status = 18
	StatusConflict         Status = 19
	StatusReadOnly         Status = 20
	StatusNonconforming    Status = 21
	StatusNullPointer      Status = 100
	StatusInvalidUTF8      Status = 101
	StatusInvalidHandle    Status = 102
	StatusPanic            Status = 103
	StatusInvalidArgument  Status = 104
	StatusReplyState       Status = 105
	StatusOutOfMemory      Status = 106
	statusClosed           Status = -1
)

// Sentinel errors for errors.Is: an *Error matches the Status of its code.
var (
	ErrMalformedJSON    error = StatusMalformedJSON
	ErrInvalidInput     error = StatusInvalidInput
	ErrOutOfOrder       error = StatusOutOfOrder
	ErrBusy             error = StatusBusy
	ErrCorruptLog       error = StatusCorruptLog
	ErrStorage          error = StatusStorage
	ErrCancelled        error = StatusCancelled
	ErrDisposed         error = StatusDisposed
	ErrListener         error = StatusListener
	ErrSummariser       error = StatusSummariser
	ErrReconstruction   error = StatusReconstruction
	ErrInvalidPolicy    error = StatusInvalidPolicy
	ErrOverflowBudget   error = StatusOverflowBudget
	ErrNothingToCompact error = StatusNothingToCompact
	ErrTokenizer        error = StatusTokenizer
	ErrPoisoned         error = StatusPoisoned
	ErrInternal         error = StatusInternal
	// ErrLocked: the session is in use (another writer holds its lock or lease).
	ErrLocked error = StatusLocked
	// ErrConflict: the store refused an append because another writer appended first; refresh
	// or reopen the session.
	ErrConflict error = StatusConflict
	// ErrReadOnly: the session was opened read-only.
	ErrReadOnly error = StatusReadOnly
	// ErrNonconforming: a store failed the conformance kit (CheckStore, CheckStoreURL).
	ErrNonconforming   error = StatusNonconforming
	ErrInvalidHandle   error = StatusInvalidHandle
	ErrInvalidArgument error = StatusInvalidArgument
	ErrReplyState      error = StatusReplyState
	// ErrClosed is returned by a method of a Session, Agent or Cancel after Close.
	ErrClosed error = statusClosed
)

// String is the status's stable kind name ("cancelled", "invalid-input", ...), as the library
// names it (lls_status_name) and as error details carry it in `kind`; "closed" for ErrClosed,
// and "status(N)" for a value the loaded library does not define.
func (s Status) String() string {
	if s == statusClosed {
		return "closed"
	}
	// A static string of the library's: read, never freed.
	name := C.GoString(C.lls_status_name(C.lls_status(s)))
	if name == "unknown" {
		return fmt.Sprintf("status(%d)", int32(s))
	}
	return name
}

// Error makes a Status usable as an error (and as an errors.Is target).
func (s Status) Error() string {
	if s == statusClosed {
		return "llmsession: the handle was closed"
	}
	return "llmsession: " + s.String()
}

// Error is a library error: the status code, the message and the JSON detail (which field,
// which seq, which line, ...). errors.Is(err, llmsession.ErrX) compares the code;
// errors.As(err, &e) gives the *Error. Unwrap gives the cause when one is known: the
// context's error for a cancelled operation, the error a Go callback returned, or the operating
// system's error (a syscall.Errno) when the library reports one (the detail's "os" field: a
// missing file or directory, permission denied, ...), so errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, fs.ErrPermission) work.
type Error struct {
	Code    Status          // the status code
	Kind    string          // the detail's kind, e.g. "invalid-input"
	Message string          // the library's message
	Detail  json.RawMessage // the JSON detail object (kind, status, message, field, seq, ...)
	cause   error
}

// Error formats the error as "llmsession: [kind] message".
func (e *Error) Error() string {
	k := e.Kind
	if k == "" {
		k = e.Code.String()
	}
	return fmt.Sprintf("llmsession: [%s] %s", k, e.Message)
}

// Is reports whether target is the Status of this error's code (or an *Error with that code).
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Status:
		return t == e.Code
	case *Error:
		return t.Code == e.Code
	}
	return false
}

// Unwrap returns the cause, when known: the context's error, a callback's error, or the OS
// error (syscall.Errno) the library reported in the detail's "os" field.
func (e *Error) Unwrap() error { return e.cause }

// Errno is the operating system's error number the library reported for a failed file
// operation (the detail's "os" field), and whether there was one. A storage error the OS did
// not report (a file that is not a regular file, a log over the size limit) has none.
func (e *Error) Errno() (syscall.Errno, bool) {
	var d struct {
		OS *int64 `json:"os"`
	}
	if json.Unmarshal(e.Detail, &d) != nil || d.OS == nil || *d.OS <= 0 {
		return 0, false
	}
	return syscall.Errno(*d.OS), true
}

// Field returns a string or number field of the detail (e.g. "field", "callback", "seq").
func (e *Error) Field(name string) any {
	var m map[string]any
	if json.Unmarshal(e.Detail, &m) != nil {
		return nil
	}
	return m[name]
}

// takeError converts and frees an lls_error.
func takeError(st C.lls_status, e *C.lls_error) *Error {
	if e == nil {
		return &Error{Code: Status(st), Kind: Status(st).String(), Message: Status(st).String()}
	}
	out := &Error{
		Code:    Status(C.lls_error_code(e)),
		Message: C.GoString(C.lls_error_message(e)),
		Detail:  json.RawMessage(C.GoString(C.lls_error_detail(e))),
	}
	C.lls_error_free(e)
	var d struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(out.Detail, &d) == nil {
		out.Kind = d.Kind
	}
	if errno, ok := out.Errno(); ok {
		out.cause = errno
	}
	return out
}
