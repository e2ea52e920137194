package llmsession

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkResume is the Go resume harness of benches/bindings.sh (docs/performance.md, "Resume
// and memory against a naive host"): on the resume fixture in LLMSESSION_BENCH_DIR (skipped
// without it; `bench_bindings write-log DIR EVENTS`), each iteration times, back to back in
// alternating order:
//
//   - the naive host's resume: read DIR/session.jsonl and json.Unmarshal every line into a
//     map[string]any (what a Go host that keeps its own JSONL log does to get its state back;
//     it checks nothing and builds no body);
//   - llmsession's: OpenFile of a fresh copy of the log (the copy is untimed; the open reads,
//     checks the hash chain and every event, and derives the history), NewAgent, SetRenderer,
//     StartTurn of the next user message and NextBodyView, then Release and Close.
//
// Iteration 0 warms up. With LLMSESSION_BENCH_OUT set, every timed iteration appends "lls_ns
// naive_ns" there and "bytes=N digest=D" (the body built) goes to stdout.
//
//	go test -run '^$' -bench Resume -benchtime 5x
func BenchmarkResume(b *testing.B) {
	dir := os.Getenv("LLMSESSION_BENCH_DIR")
	if dir == "" {
		b.Skip("LLMSESSION_BENCH_DIR is not set (see benches/bindings.sh)")
	}
	lines, err := resumeInputs(dir)
	if err != nil {
		b.Fatal(err)
	}
	log := filepath.Join(dir, "session.jsonl")
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	ctx := context.Background()
	b.StopTimer()
	type sample struct{ lls, naive time.Duration }
	var samples []sample
	var bodyLen int
	var digest string
	for i := 0; len(samples) < b.N; i++ {
		copyPath := filepath.Join(tmp, fmt.Sprintf("resume-%d.jsonl", i))
		if err := os.WriteFile(copyPath, data, 0o644); err != nil {
			b.Fatal(err)
		}
		var s sample
		lls := func() {
			t0 := time.Now()
			n, d, err := resumeLls(ctx, copyPath, lines[0], lines[2])
			s.lls = time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			bodyLen, digest = n, d
		}
		naive := func() {
			t0 := time.Now()
			if _, err := resumeNaive(log); err != nil {
				b.Fatal(err)
			}
			s.naive = time.Since(t0)
		}
		b.StartTimer()
		if i%2 == 0 {
			lls()
			naive()
		} else {
			naive()
			lls()
		}
		b.StopTimer()
		os.Remove(copyPath)
		if i > 0 {
			samples = append(samples, s)
		}
	}
	if out := os.Getenv("LLMSESSION_BENCH_OUT"); out != "" {
		var sb strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&sb, "%d %d\n", s.lls.Nanoseconds(), s.naive.Nanoseconds())
		}
		if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("bytes=%d digest=%s\n", bodyLen, digest)
	}
}

// resumeInputs reads the resume fixture's inputs.jsonl: the agent options, the fork options and
// the user message.
func resumeInputs(dir string) ([][]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, "inputs.jsonl"))
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) < 3 {
		return nil, fmt.Errorf("%s/inputs.jsonl: %d lines, expected 3", dir, len(lines))
	}
	return lines, nil
}

// resumeLls opens the log, builds the next body and gives everything back; it returns the
// body's length and digest.
func resumeLls(ctx context.Context, path string, agentOpts, user []byte) (int, string, error) {
	s, err := OpenFile(path, &SessionOptions{Durability: "never"})
	if err != nil {
		return 0, "", err
	}
	defer s.Close()
	a, err := NewAgent(s, json.RawMessage(agentOpts))
	if err != nil {
		return 0, "", err
	}
	defer a.Close()
	if err := a.SetRenderer("openai", nil); err != nil {
		return 0, "", err
	}
	if _, err := a.StartTurn(json.RawMessage(user)); err != nil {
		return 0, "", err
	}
	v, err := a.NextBodyView(ctx)
	if err != nil {
		return 0, "", err
	}
	n, d := len(v.Bytes()), v.Info.Digest
	v.Release()
	return n, d, nil
}

// resumeNaive is the naive host's resume: every line of the file decoded into a map.
func resumeNaive(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var events []map[string]any
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			return nil, err
		}
		events = append(events, m)
	}
	return events, nil
}

// TestResumeMemory is the Go memory probe of benches/bindings.sh: with LLMSESSION_BENCH_DIR set
// (skipped without it) it opens the small log DIR/warm/session.jsonl, builds its body and
// closes it (the library's one-off costs), reads the process's VmRSS (/proc/self/status) after
// a collection,
// opens a fresh copy of DIR/session.jsonl, reads it again, builds the next body (held, the
// view), reads it a third time, and prints "memory file=BYTES open_kib=GROWTH body_kib=GROWTH"
// (the growth of the resident size over the first reading). Run it alone in its process (the
// driver does), so nothing else this process did is in the figures.
func TestResumeMemory(t *testing.T) {
	dir := os.Getenv("LLMSESSION_BENCH_DIR")
	if dir == "" {
		t.Skip("LLMSESSION_BENCH_DIR is not set (see benches/bindings.sh)")
	}
	lines, err := resumeInputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "resume.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	size := len(data)
	data = nil
	rss := func() int {
		runtime.GC()
		debug.FreeOSMemory()
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("no VmRSS in /proc/self/status")
		return 0
	}
	// The library's one-off costs (its code paged in, lazily built tables, the allocator's
	// first arenas) are not the session's: a small log of the same shape (DIR/warm,
	// benches/bindings.sh writes it) is opened, a body built and everything closed before the
	// first reading.
	warm, err := os.ReadFile(filepath.Join(dir, "warm", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	warmPath := filepath.Join(t.TempDir(), "warm.jsonl")
	if err := os.WriteFile(warmPath, warm, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resumeLls(context.Background(), warmPath, lines[0], lines[2]); err != nil {
		t.Fatal(err)
	}
	warm = nil
	before := rss()
	s, err := OpenFile(path, &SessionOptions{Durability: "never"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opened := rss()
	a, err := NewAgent(s, json.RawMessage(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.SetRenderer("openai", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTurn(json.RawMessage(lines[2])); err != nil {
		t.Fatal(err)
	}
	v, err := a.NextBodyView(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	built := rss()
	fmt.Printf("memory file=%d open_kib=%d body_kib=%d body=%d\n", size, opened-before, built-before, len(v.Bytes()))
	v.Release()
}
