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

// BenchmarkNextBodyView is the Go harness of benches/bindings.sh (docs/performance.md, "Binding
// overhead"): the fixture is written by `cargo run --example bench_bindings -- write DIR` and
// named by LLMSESSION_BENCH_DIR (skipped without it); the driver adds the provider replies
// (DIR/replies.jsonl). Same procedure as the Rust harness (examples/bench_bindings.rs): per
// round, fork DIR/session.jsonl into memory, create an agent, give it the "openai" renderer,
// open a turn and build its first body (untimed), then for each exchange record the provider's
// raw reply (RecordBody) and the tool result and build the next body (Agent.NextBodyView, the
// view released once read). One op is one exchange, timed whole (time.Now around the step),
// and the body alone is timed separately. Round 0 warms up (untimed). The benchmark's own timer
// stays stopped: testing.B's StartTimer and StopTimer read the memory statistics, which stops
// the world, and twice per step that is a cost no host has and one that slows the steps around
// it (docs/performance.md, "Go's copying body and per-step costs"); ns/op is set to the mean
// step instead.
//
// Reported: ns/op (mean step) and the medians median-next-ns and median-step-ns. With
// LLMSESSION_BENCH_OUT set, the samples ("next_ns step_ns" per op) are written there, the last
// body of the first timed round to OUT.body, and "bytes=N digest=D" (that body's length and its
// envelope's digest) to stdout.
//
//	go test -run '^$' -bench NextBodyView -benchtime 300x
func BenchmarkNextBodyView(b *testing.B) {
	benchSteps(b, true, func(a *Agent, ctx context.Context, keep func([]byte)) (int, string, error) {
		v, err := a.NextBodyView(ctx)
		if err != nil {
			return 0, "", err
		}
		defer v.Release()
		keep(v.Bytes())
		return v.Len(), v.Info.Digest, nil
	})
}

// BenchmarkAppendNextBody is BenchmarkNextBodyView with the body copied into Go memory as a host
// that sends one body after the other does it: Agent.AppendNextBody into one buffer kept across
// the steps (passed back emptied, buf[:0], once the previous body was read). This is the
// "copied" harness of benches/bindings.sh (gocopy).
func BenchmarkAppendNextBody(b *testing.B) {
	var buf []byte
	benchSteps(b, true, func(a *Agent, ctx context.Context, keep func([]byte)) (int, string, error) {
		body, info, err := a.AppendNextBody(ctx, buf[:0])
		if err != nil {
			return 0, "", err
		}
		buf = body
		keep(body)
		return len(body), info.Digest, nil
	})
}

// BenchmarkNextBody is BenchmarkNextBodyView with Agent.NextBody: every body copied into a fresh
// Go slice (allocated, zeroed and later collected per step).
func BenchmarkNextBody(b *testing.B) {
	benchSteps(b, true, func(a *Agent, ctx context.Context, keep func([]byte)) (int, string, error) {
		body, err := a.NextBody(ctx)
		if err != nil {
			return 0, "", err
		}
		keep(body.Bytes)
		return len(body.Bytes), body.Info.Digest, nil
	})
}

// BenchmarkNextRequest is the harness on the envelope path before the hot path: the response
// recorded as parsed JSON (RecordResponse of DIR/inputs.jsonl's message) and the request built
// with Agent.NextRequest (the envelope copied into a []byte, RequestInfo parsed from JSON).
func BenchmarkNextRequest(b *testing.B) {
	benchSteps(b, false, func(a *Agent, ctx context.Context, keep func([]byte)) (int, string, error) {
		req, err := a.NextRequest(ctx)
		if err != nil {
			return 0, "", err
		}
		keep(req.Envelope)
		return len(req.Envelope), req.Info.Digest, nil
	})
}

// BenchmarkNextRequestView is BenchmarkNextRequest with Agent.NextRequestView (the envelope
// lent, not copied into Go memory).
func BenchmarkNextRequestView(b *testing.B) {
	benchSteps(b, false, func(a *Agent, ctx context.Context, keep func([]byte)) (n int, digest string, err error) {
		err = a.NextRequestView(ctx, func(env []byte, info RequestInfo) error {
			n, digest = len(env), info.Digest
			keep(env)
			return nil
		})
		return n, digest, err
	})
}

// benchSteps runs the steps: with body, on the hot path (SetRenderer, RecordBody of the raw
// replies), otherwise on the envelope path. request builds the next request (or body) and
// returns its size and digest; it hands the bytes to keep while they are valid (copied, in
// round 1, for OUT.body; the copy's time is not counted).
func benchSteps(b *testing.B, body bool, request func(a *Agent, ctx context.Context, keep func([]byte)) (int, string, error)) {
	dir := os.Getenv("LLMSESSION_BENCH_DIR")
	if dir == "" {
		b.Skip("LLMSESSION_BENCH_DIR is not set (see benches/bindings.sh)")
	}
	lines, err := readLines(filepath.Join(dir, "inputs.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	agentOpts, forkOpts, user, exchanges := lines[0], lines[1], lines[2], lines[3:]
	var replies [][]byte
	if body {
		if replies, err = readLines(filepath.Join(dir, "replies.jsonl")); err != nil {
			b.Fatal(err)
		}
		if len(replies) != len(exchanges)/2 {
			b.Fatalf("replies.jsonl has %d replies for %d exchanges", len(replies), len(exchanges)/2)
		}
	}
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
	var last []byte
	ignore := func([]byte) {}
	for round := 0; len(next) < b.N; round++ {
		child, err := parent.Fork(&fork)
		if err != nil {
			b.Fatal(err)
		}
		a, err := NewAgent(child, json.RawMessage(agentOpts))
		if err != nil {
			b.Fatal(err)
		}
		if body {
			if err := a.SetRenderer("openai", nil); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := a.StartTurn(json.RawMessage(user)); err != nil {
			b.Fatal(err)
		}
		if _, _, err := request(a, ctx, ignore); err != nil {
			b.Fatal(err)
		}
		for k := 0; k+1 < len(exchanges) && (round == 0 || len(next) < b.N); k += 2 {
			// The copy for OUT.body is not part of the step: its time is taken out.
			keep := ignore
			var excluded time.Duration
			if round == 1 {
				keep = func(v []byte) {
					c0 := time.Now()
					last = append(last[:0], v...)
					excluded = time.Since(c0)
				}
			}
			t0 := time.Now()
			if body {
				if _, _, err := a.RecordBody(replies[k/2]); err != nil {
					b.Fatal(err)
				}
			} else if _, err := a.RecordResponse(json.RawMessage(exchanges[k])); err != nil {
				b.Fatal(err)
			}
			if _, err := a.RecordToolResult(json.RawMessage(exchanges[k+1])); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			n, d, err := request(a, ctx, keep)
			t2 := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			if round == 1 {
				bytes, digest = n, d
			}
			if round > 0 {
				next = append(next, t2.Sub(t1)-excluded)
				step = append(step, t2.Sub(t0)-excluded)
			}
		}
		a.Close()
		child.Close()
	}
	b.ReportMetric(float64(mean(step).Nanoseconds()), "ns/op")
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
		if body {
			if err := os.WriteFile(out+".body", last, 0o644); err != nil {
				b.Fatal(err)
			}
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

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
