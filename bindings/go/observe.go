package llmsession

/*
#include <stdint.h>
#include <llmsession.h>

lls_status goshim_set_observer(uintptr_t handle, int32_t min_level, lls_error **err);
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/cgo"
	"sort"
	"unsafe"
)

// Level is how much an Observation matters (docs/observe.md).
type Level int

// The observation levels, lowest first (LLS_LEVEL_DEBUG ... LLS_LEVEL_ERROR).
const (
	LevelDebug Level = C.LLS_LEVEL_DEBUG // detail of the library's decisions
	LevelInfo  Level = C.LLS_LEVEL_INFO  // something the library did on its own, as designed
	LevelWarn  Level = C.LLS_LEVEL_WARN  // something went wrong and was handled
	LevelError Level = C.LLS_LEVEL_ERROR // something failed and was not made good
)

// String is the level's wire name: "debug", "info", "warn" or "error".
func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarn:
		return "warn"
	case LevelError:
		return "error"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// SlogLevel is the log/slog level of the same name.
func (l Level) SlogLevel() slog.Level {
	switch l {
	case LevelDebug:
		return slog.LevelDebug
	case LevelInfo:
		return slog.LevelInfo
	case LevelWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// Observation is one thing the library did on its own (a torn log tail cut, a writer refused,
// an automatic compaction that failed, a request sent over the threshold, ...). docs/observe.md
// lists every Kind and its Fields.
type Observation struct {
	Kind      string          // stable kebab-case name, e.g. "log-cut"
	Level     Level           // how much it matters
	Message   string          // one sentence for a human
	SessionID string          // the session it concerns ("" when not known)
	Fields    map[string]any  // the kind's own fields (numbers are float64, as encoding/json decodes them)
	Raw       json.RawMessage // the whole observation as the library sent it
}

// observerState is what the library's userdata handle holds.
type observerState struct {
	fn func(Observation)
}

// SetObserver sets the process-wide observer: from now on fn receives every Observation at
// min or above. fn nil clears it (the default: the library reports nothing). One observer at a
// time; setting one replaces the one before it.
//
// fn runs synchronously on the goroutine whose library call caused the event, possibly on
// several goroutines at once, and must return quickly. It must not call into llmsession (not
// even SetObserver). A panic in fn is recovered and the observation dropped.
func SetObserver(fn func(Observation), min Level) error {
	if abiErr != nil {
		return abiErr
	}
	var h C.uintptr_t
	if fn != nil {
		h = C.uintptr_t(cgo.NewHandle(&observerState{fn: fn}))
	}
	var e *C.lls_error
	// On failure the library has already freed the handle (llsGoObserverFree).
	if rc := C.goshim_set_observer(h, C.int32_t(min), &e); rc != 0 {
		return takeError(rc, e)
	}
	return nil
}

// SetLogger sends observations at min or above to logger, the slog way: the Observation's
// level as the slog level, its Message as the message, and attributes "kind", "sessionId"
// (when known) and each field (in key order). A nil logger clears the observer. The
// logger's handler runs on the library's calling goroutine: it should be quick (slog's text
// and JSON handlers are).
func SetLogger(logger *slog.Logger, min Level) error {
	if logger == nil {
		return SetObserver(nil, min)
	}
	return SetObserver(func(o Observation) {
		logger.LogAttrs(context.Background(), o.Level.SlogLevel(), o.Message, o.Attrs()...)
	}, min)
}

// Attrs are the observation as slog attributes: "kind", "sessionId" (when known), then each
// field in key order.
func (o Observation) Attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, len(o.Fields)+2)
	attrs = append(attrs, slog.String("kind", o.Kind))
	if o.SessionID != "" {
		attrs = append(attrs, slog.String("sessionId", o.SessionID))
	}
	keys := make([]string, 0, len(o.Fields))
	for k := range o.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, o.Fields[k]))
	}
	return attrs
}

// parseObservation decodes the library's JSON: the common keys, and the rest as Fields.
func parseObservation(level Level, raw []byte) Observation {
	o := Observation{Level: level, Raw: json.RawMessage(raw)}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		o.Kind, o.Message = "unreadable", string(raw)
		return o
	}
	o.Kind, _ = m["kind"].(string)
	o.Message, _ = m["message"].(string)
	o.SessionID, _ = m["sessionId"].(string)
	for _, k := range []string{"kind", "level", "message", "sessionId"} {
		delete(m, k)
	}
	o.Fields = m
	return o
}

//export llsGoObserve
func llsGoObserve(userdata unsafe.Pointer, level C.int32_t, text *C.char, n C.size_t) {
	st := cgo.Handle(uintptr(userdata)).Value().(*observerState)
	o := parseObservation(Level(level), C.GoBytes(unsafe.Pointer(text), C.int(n)))
	// A panic must not unwind into the library: it is dropped with the observation.
	_, _ = runCatching(func() { st.fn(o) })
}

//export llsGoObserverFree
func llsGoObserverFree(userdata unsafe.Pointer) {
	cgo.Handle(uintptr(userdata)).Delete()
}
