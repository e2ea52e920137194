package llmsession

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The observer is process-wide: these tests do not run in parallel (t.Parallel tests wait for
// them), restore the silent default when they end, and read only their own sessions.

// tornLog writes a log holding one host event and a torn last line: opening it cuts a record.
func tornLog(t *testing.T, id string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "torn.jsonl")
	s, err := OpenFile(path, &SessionOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(map[string]any{"type": "host/note", "data": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"host/no`)
	f.Close()
	return path
}

func openClose(t *testing.T, path string) {
	t.Helper()
	s, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestObserverReceivesACutTail(t *testing.T) {
	t.Cleanup(func() { SetObserver(nil, LevelDebug) })
	path := tornLog(t, "go-observe-cut")
	var mu sync.Mutex
	var seen []Observation
	if err := SetObserver(func(o Observation) {
		if o.SessionID == "go-observe-cut" {
			mu.Lock()
			seen = append(seen, o)
			mu.Unlock()
		}
	}, LevelWarn); err != nil {
		t.Fatal(err)
	}
	openClose(t, path)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("want one observation, got %+v", seen)
	}
	o := seen[0]
	if o.Kind != "log-cut" || o.Level != LevelWarn || o.Level.String() != "warn" {
		t.Fatalf("got %+v", o)
	}
	if o.Fields["records"] != 1.0 || o.Fields["line"] != 3.0 {
		t.Fatalf("fields %v", o.Fields)
	}
	saved, _ := o.Fields["savedTo"].(string)
	if b, err := os.ReadFile(saved); err != nil || string(b) != `{"type":"host/no` {
		t.Fatalf("savedTo %q: %q, %v", saved, b, err)
	}
	if !strings.Contains(o.Message, "cut 1 record") {
		t.Fatalf("message %q", o.Message)
	}
	var raw map[string]any
	if err := json.Unmarshal(o.Raw, &raw); err != nil || raw["kind"] != "log-cut" || raw["sessionId"] != "go-observe-cut" {
		t.Fatalf("raw %s: %v", o.Raw, err)
	}
}

func TestObserverLevelFiltersAndNilClears(t *testing.T) {
	t.Cleanup(func() { SetObserver(nil, LevelDebug) })
	path := tornLog(t, "go-observe-quiet")
	calls := 0
	if err := SetObserver(func(o Observation) {
		if o.SessionID == "go-observe-quiet" {
			calls++
		}
	}, LevelError); err != nil {
		t.Fatal(err)
	}
	openClose(t, path) // log-cut is a warning
	if calls != 0 {
		t.Fatalf("a warning passed an error minimum (%d calls)", calls)
	}
	if err := SetObserver(nil, LevelDebug); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{")
	f.Close()
	openClose(t, path)
	if calls != 0 {
		t.Fatalf("a cleared observer was called")
	}
	err := SetObserver(func(Observation) {}, Level(9))
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Code != StatusInvalidArgument {
		t.Fatalf("a bad level: %v", err)
	}
}

func TestObserverPanicIsContained(t *testing.T) {
	t.Cleanup(func() { SetObserver(nil, LevelDebug) })
	path := tornLog(t, "go-observe-panic")
	if err := SetObserver(func(Observation) { panic("observer bug") }, LevelDebug); err != nil {
		t.Fatal(err)
	}
	openClose(t, path) // the open succeeds; the panic went nowhere
}

func TestSetLoggerMapsLevelsAndFieldsToSlog(t *testing.T) {
	t.Cleanup(func() { SetObserver(nil, LevelDebug) })
	path := tornLog(t, "go-observe-slog")
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := SetLogger(logger, LevelDebug); err != nil {
		t.Fatal(err)
	}
	openClose(t, path)
	SetLogger(nil, LevelDebug)
	var rec map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["sessionId"] == "go-observe-slog" && m["kind"] == "log-cut" {
			rec = m
		}
	}
	if rec == nil {
		t.Fatalf("no log-cut record in %s", buf.String())
	}
	if rec["level"] != "WARN" || rec["records"] != 1.0 || !strings.Contains(rec["msg"].(string), "cut 1 record") {
		t.Fatalf("record %v", rec)
	}
	if LevelError.SlogLevel() != slog.LevelError || LevelDebug.SlogLevel() != slog.LevelDebug {
		t.Fatal("level mapping")
	}
}
