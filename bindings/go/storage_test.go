package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One writer per file: a second writing open, in the same process here, is refused with
// ErrLocked; a read-only open follows the writer with Refresh and refuses writes.
func TestOneWriterPerFileAndReadOnlyFollower(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	w, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a created log is private (0600): %v %v", fi.Mode(), err)
	}
	_, err = OpenFile(path, nil)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: want ErrLocked, got %v", err)
	}
	var le *Error
	if !errors.As(err, &le) || !strings.Contains(le.Message, path) || le.Field("holder") == nil {
		t.Fatalf("the error names the file and the holder: %v (%s)", err, le.Detail)
	}
	r, err := OpenFile(path, &SessionOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Append(map[string]any{"type": "host/note", "data": map[string]any{}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("append on a reader: want ErrReadOnly, got %v", err)
	}
	if _, err := NewAgent(r, map[string]any{"config": map[string]string{"provider": "p", "model": "m"}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("an agent on a reader: want ErrReadOnly, got %v", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := w.Append(map[string]any{"type": "host/note", "data": map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.Refresh()
	if err != nil || n != 3 {
		t.Fatalf("refresh: %d new events, %v (want 3)", n, err)
	}
	a, _ := w.Events(0, -1)
	b, _ := r.Events(0, -1)
	if string(a) != string(b) {
		t.Fatalf("the reader's events differ from the writer's:\n%s\n%s", a, b)
	}
	exported, err := w.ExportJSONL()
	onDisk, _ := os.ReadFile(path)
	if err != nil || string(exported) != string(onDisk) {
		t.Fatalf("ExportJSONL is the file as stored: %v", err)
	}
	w.Close()
	w2, err := OpenFile(path, nil)
	if err != nil {
		t.Fatalf("the lock goes with Close: %v", err)
	}
	w2.Close()
}

// A host store that refuses an append as a conflict: ErrConflict, nothing changes, and the
// session appends nothing until Refresh.
func TestHostStoreConflict(t *testing.T) {
	records := []string{}
	conflict := false
	store := func(ctx context.Context, req json.RawMessage) (any, error) {
		var r struct {
			Op      string   `json:"op"`
			Seq     int      `json:"seq"`
			Records []string `json:"records"`
			Header  *string  `json:"header"`
		}
		if err := json.Unmarshal(req, &r); err != nil {
			return nil, err
		}
		switch r.Op {
		case "load":
			return map[string]any{"records": records}, nil
		case "append":
			if conflict {
				return map[string]any{"conflict": "another worker wrote this seq"}, nil
			}
			if r.Header != nil {
				records = append(records, *r.Header)
			}
			records = append(records, r.Records...)
		}
		return true, nil
	}
	s, err := OpenStore(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	note := map[string]any{"type": "host/note", "data": map[string]any{}}
	if _, err := s.Append(note); err != nil {
		t.Fatal(err)
	}
	conflict = true
	if _, err := s.Append(note); !errors.Is(err, ErrConflict) {
		t.Fatalf("want ErrConflict, got %v", err)
	}
	conflict = false
	if _, err := s.Append(note); !errors.Is(err, ErrConflict) {
		t.Fatalf("until refreshed the session refuses appends: %v", err)
	}
	if _, err := s.Refresh(); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.Append(note); err != nil || seq != 1 {
		t.Fatalf("after refresh: seq %d, %v", seq, err)
	}
	if len(records) != 3 {
		t.Fatalf("the store holds %d records, want 3", len(records))
	}
}
