package llmsession

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkNextRequest is the Go harness of benches/bindings.sh (docs/performance.md, "Binding
// overhead"): the fixture is written by `cargo run --example bench_bindings -- write DIR` and
// named by LLMSESSION_BENCH_DIR (skipped without it). Same procedure as the Rust harness
// (examples/bench_bindings.rs): per round, fork DIR/session.jsonl into memory, create an
// agent, open a turn and build its first request (untimed), then for each exchange of
// DIR/inputs.jsonl record the response and the tool result and build the next request. One
// op is one exchange; the timer runs over the whole step, and the request alone
// (Agent.NextRequest, what a Go host gets) is timed separately. Round 0 warms up (untimed).
//
// Reported: ns/op (mean step) and the medians median-next-ns and median-step-ns. With
// LLMSESSION_BENCH_OUT set, the samples ("next_ns step_ns" per op) are written there, and
// "bytes=N digest=D" (the last request of the first timed round) to stdout.
//
//	go test -run '^$' -bench NextRequest -benchtime 300x
func BenchmarkNextRequest(b *testing.B) {
	benchSteps(b, func(a *Agent, ctx context.Context) (int, string, error) {
		req, err := a.NextRequest(ctx)
		if err != nil {
			return 0, "", err
		}
		return len(req.Envelope), req.Info.Digest, nil
	})
}

// BenchmarkNextRequestView is BenchmarkNextRequest with Agent.NextRequestView (the envelope
// lent, not copied into Go memory).
func BenchmarkNextRequestView(b *testing.B) {
	benchSteps(b, func(a *Agent, ctx context.Context) (n int, digest string, err error) {
		err = a.NextRequestView(ctx, func(env []byte, info RequestInfo) error {
			n, digest = len(env), info.Digest
			return nil
		})
		return n, digest, err
	})
}

// benchSteps runs the steps; request builds the next request and returns its size and digest.
func benchSteps(b *testing.B, request func(a *Agent, ctx context.Context) (int, string, error)) {
	dir := os.Getenv("LLMSESSION_BENCH_DIR")
	if dir == "" {
		b.Skip("LLMSESSION_BENCH_DIR is not set (see benches/bindings.sh)")
	}
	lines, err := readLines(filepath.Join(dir, "inputs.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	agentOpts, forkOpts, user, exchanges := lines[0], lines[1], lines[2], lines[3:]
	var fork ForkOptions
	if err := json.Unmarshal(forkOpts, &fork); err != nil {
		b.Fatal(err)
	}
	parent, err := OpenFile(filepath.Join(dir, "session.jsonl"), &SessionOptions{Durability: "never"})
	if err != nil {
		b.Fatal(err)
	}
	defer parent.Close()
	ctx := context.Background()

	b.StopTimer()
	next := make([]time.Duration, 0, b.N)
	step := make([]time.Duration, 0, b.N)
	var bytes int
	var digest string
	for round := 0; len(next) < b.N; round++ {
		child, err := parent.Fork(&fork)
		if err != nil {
			b.Fatal(err)
		}
		a, err := NewAgent(child, json.RawMessage(agentOpts))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.StartTurn(json.RawMessage(user)); err != nil {
			b.Fatal(err)
		}
		if _, _, err := request(a, ctx); err != nil {
			b.Fatal(err)
		}
		for k := 0; k+1 < len(exchanges) && (round == 0 || len(next) < b.N); k += 2 {
			if round > 0 {
				b.StartTimer()
			}
			t0 := time.Now()
			if _, err := a.RecordResponse(json.RawMessage(exchanges[k])); err != nil {
				b.Fatal(err)
			}
			if _, err := a.RecordToolResult(json.RawMessage(exchanges[k+1])); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			n, d, err := request(a, ctx)
			t2 := time.Now()
			if round > 0 {
				b.StopTimer()
			}
			if err != nil {
				b.Fatal(err)
			}
			bytes = n
			if round == 1 {
				digest = d
			}
			if round > 0 {
				next = append(next, t2.Sub(t1))
				step = append(step, t2.Sub(t0))
			}
		}
		a.Close()
		child.Close()
	}
	b.ReportMetric(float64(median(next).Nanoseconds()), "median-next-ns")
	b.ReportMetric(float64(median(step).Nanoseconds()), "median-step-ns")
	if out := os.Getenv("LLMSESSION_BENCH_OUT"); out != "" && b.N > 1 {
		var sb strings.Builder
		for i := range next {
			fmt.Fprintf(&sb, "%d %d\n", next[i].Nanoseconds(), step[i].Nanoseconds())
		}
		if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("bytes=%d digest=%s\n", bytes, digest)
	}
}

func readLines(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lines) < 5 {
		return nil, fmt.Errorf("%s: too few lines", path)
	}
	return lines, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
