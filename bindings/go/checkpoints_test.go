package llmsession

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Checkpoints (docs/log.md, "Checkpoints"): a session writes them as its options say, reopens
// from the last one with the same events, and a directory lists its logs.
func TestCheckpointsAndDirectoryListing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	every := uint64(3)
	s, err := OpenFile(path, &SessionOptions{ID: "cp", Checkpoints: &Checkpoints{EveryEvents: &every}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := s.Append(map[string]any{"type": "host/note", "data": map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	events, _ := s.Events(0, -1)
	if n := strings.Count(string(events), `"type":"session/checkpoint"`); n != 3 {
		t.Fatalf("10 host events, a checkpoint every 3: want 3 checkpoints, got %d in %s", n, events)
	}
	if _, err := s.Append(map[string]any{"type": "session/checkpoint", "data": map[string]any{}}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("a host's checkpoint: want ErrInvalidInput, got %v", err)
	}
	s.Close()
	for _, check := range []string{"", "bounded", "full"} {
		r, err := OpenFile(path, &SessionOptions{Check: check})
		if err != nil {
			t.Fatalf("check %q: %v", check, err)
		}
		again, _ := r.Events(0, -1)
		if string(again) != string(events) {
			t.Fatalf("check %q: the reopened session's events differ", check)
		}
		if _, err := r.Verify(); err != nil {
			t.Fatalf("check %q: verify: %v", check, err)
		}
		r.Close()
	}
	if _, err := OpenFile(path, &SessionOptions{Check: "sideways"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("check sideways: want ErrInvalidInput, got %v", err)
	}
	off, err := NewMemorySession(&SessionOptions{Checkpoints: &Checkpoints{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	for i := 0; i < 2000; i++ {
		if _, err := off.Append(map[string]any{"type": "host/note", "data": map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	if ev, _ := off.Events(0, -1); strings.Contains(string(ev), "session/checkpoint") {
		t.Fatal("Off: no checkpoint is written")
	}
	other, err := OpenFile(filepath.Join(dir, "t.jsonl"), &SessionOptions{ID: "another"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := ListSessions("file:"+dir, nil)
	if err != nil || len(list) != 2 || list[0].ID != "another" || !list[0].InUse || list[1].ID != "cp" || list[1].Events != 13 {
		t.Fatalf("the directory lists both logs, ordered by id: %+v %v", list, err)
	}
	other.Close()
}
