package llmsession

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkNaiveHost is the Go naive-host harness of benches/bindings.sh (docs/performance.md,
// "The provider body against a naive host"): llmsession and a naive Go host build the same
// OpenAI chat-completions body side by side, step by step, on the fixture in
// LLMSESSION_BENCH_DIR (skipped without it; written by `bench_bindings write DIR N`, plus the
// provider replies in DIR/replies.jsonl that the driver writes).
//
// The naive host is what a Go host without the library does: it keeps the body as typed Go
// values (the messages in the provider's shape), and per step decodes the provider's reply with
// encoding/json, appends the assistant message and the tool result, and encodes the whole body
// again. It starts from the first request's body as the library rendered it, decoded into its
// types (untimed), so both start on identical bytes; after every step the two bodies are
// compared byte for byte and the benchmark fails on the first difference.
//
// llmsession (LLMSESSION_BENCH_PATH, default "body"): "body" is the hot path (SetRenderer once,
// then per step RecordBody of the raw reply, RecordToolResult and NextBodyView, the view released
// once compared); "render" is the path before it (ParseResponse, RecordResponse,
// RecordToolResult, NextRequestView and RenderWithOptions of the envelope).
//
// Per step the pair is timed back to back, in alternating order: "next" is the body build
// alone (NextBodyView and, after the comparison, Release; the naive host's encoding), "step"
// the whole step. Round 0 warms up. As in BenchmarkNextBodyView, the steps are timed with
// time.Now and the benchmark's timer stays stopped (no stop-the-world per step); ns/op is the
// mean of the pair's steps (llmsession's and the naive host's together).
// With LLMSESSION_BENCH_OUT set, every timed step appends "lls_next naive_next lls_step
// naive_step" (ns) there, the last body of the first timed round goes to OUT.body, and
// "bytes=N digest=D" (the body's length, the envelope's digest) to stdout.
//
//	go test -run '^$' -bench NaiveHost -benchtime 100x
func BenchmarkNaiveHost(b *testing.B) {
	dir := os.Getenv("LLMSESSION_BENCH_DIR")
	if dir == "" {
		b.Skip("LLMSESSION_BENCH_DIR is not set (see benches/bindings.sh)")
	}
	path := os.Getenv("LLMSESSION_BENCH_PATH")
	if path == "" {
		path = "body"
	}
	lines, err := readLines(filepath.Join(dir, "inputs.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	replies, err := readLines(filepath.Join(dir, "replies.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	agentOpts, forkOpts, user, exchanges := lines[0], lines[1], lines[2], lines[3:]
	if len(replies) != len(exchanges)/2 {
		b.Fatalf("replies.jsonl has %d replies for %d exchanges", len(replies), len(exchanges)/2)
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
	type sample struct{ llsNext, naiveNext, llsStep, naiveStep time.Duration }
	samples := make([]sample, 0, b.N)
	var last []byte
	var digest, stepDigest string
	for round := 0; len(samples) < b.N; round++ {
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
		h, err := newLlsHost(a, path)
		if err != nil {
			b.Fatal(err)
		}
		first, _, err := h.build(ctx)
		if err != nil {
			b.Fatal(err)
		}
		naive, err := newNaiveHost(first)
		h.done()
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k+1 < len(exchanges) && (round == 0 || len(samples) < b.N); k += 2 {
			reply, result := replies[k/2], exchanges[k+1]
			var s sample
			llsStep := func() {
				t0 := time.Now()
				if err := h.record(reply, result); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, stepDigest, err = h.build(ctx); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				s.llsNext, s.llsStep = t2.Sub(t1), t2.Sub(t0)
			}
			naiveStep := func() {
				t0 := time.Now()
				if err := naive.record(reply, result); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := naive.build(); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				s.naiveNext, s.naiveStep = t2.Sub(t1), t2.Sub(t0)
			}
			if k/2%2 == 0 {
				llsStep()
				naiveStep()
			} else {
				naiveStep()
				llsStep()
			}
			if !bytes.Equal(h.body, naive.body) {
				b.Fatalf("round %d, exchange %d: the naive host's body differs from llmsession's: %s", round, k/2, firstDifference(naive.body, h.body))
			}
			if round == 1 {
				last, digest = append(last[:0], h.body...), stepDigest
			}
			// Giving the body back is part of llmsession's cost (after the comparison, which
			// reads it).
			r0 := time.Now()
			h.done()
			r := time.Since(r0)
			s.llsNext += r
			s.llsStep += r
			if round > 0 {
				samples = append(samples, s)
			}
		}
		a.Close()
		child.Close()
	}
	var total time.Duration
	for _, s := range samples {
		total += s.llsStep + s.naiveStep
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(max(len(samples), 1)), "ns/op")
	if out := os.Getenv("LLMSESSION_BENCH_OUT"); out != "" && b.N > 1 {
		var sb strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&sb, "%d %d %d %d\n", s.llsNext.Nanoseconds(), s.naiveNext.Nanoseconds(), s.llsStep.Nanoseconds(), s.naiveStep.Nanoseconds())
		}
		if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(out+".body", last, 0o644); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("bytes=%d digest=%s\n", len(last), digest)
	}
}

// llsHost is llmsession's side of the harness: body is the last body built, valid until done.
type llsHost struct {
	a       *Agent
	path    string
	body    []byte
	release func()
}

func newLlsHost(a *Agent, path string) (*llsHost, error) {
	h := &llsHost{a: a, path: path}
	switch path {
	case "body":
		if err := a.SetRenderer("openai", nil); err != nil {
			return nil, err
		}
	case "render":
	default:
		return nil, fmt.Errorf("LLMSESSION_BENCH_PATH: %q is neither \"body\" nor \"render\"", path)
	}
	return h, nil
}

func (h *llsHost) record(reply, result []byte) error {
	if h.path == "body" {
		if _, _, err := h.a.RecordBody(reply); err != nil {
			return err
		}
	} else {
		parsed, err := ParseResponse("openai", reply)
		if err != nil {
			return err
		}
		if _, err := h.a.RecordResponse(parsed); err != nil {
			return err
		}
	}
	_, err := h.a.RecordToolResult(json.RawMessage(result))
	return err
}

// build builds the next body into h.body and returns it with the envelope's digest.
func (h *llsHost) build(ctx context.Context) ([]byte, string, error) {
	if h.path == "body" {
		v, err := h.a.NextBodyView(ctx)
		if err != nil {
			return nil, "", err
		}
		h.body, h.release = v.Bytes(), v.Release
		return h.body, v.Info.Digest, nil
	}
	var digest string
	err := h.a.NextRequestView(ctx, func(env []byte, info RequestInfo) error {
		body, err := RenderWithOptions("openai", env, &RenderOptions{PrefixLen: info.PrefixLen})
		h.body, digest = body, info.Digest
		return err
	})
	return h.body, digest, err
}

// done gives the last body back (the view form) once it is no longer read.
func (h *llsHost) done() {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	h.body = nil
}

// The naive host's typed body: an OpenAI chat-completions request, fields in the order the
// library writes them (its JSON objects have sorted keys), so encoding/json writes the same bytes.
type naiveBody struct {
	Messages       []naiveMessage `json:"messages"`
	Model          string         `json:"model"`
	PromptCacheKey string         `json:"prompt_cache_key"`
	Tools          []naiveTool    `json:"tools"`
}

type naiveMessage struct {
	Content    *string         `json:"content"`
	Role       string          `json:"role"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []naiveToolCall `json:"tool_calls,omitempty"`
}

type naiveToolCall struct {
	Function struct {
		Arguments string `json:"arguments"`
		Name      string `json:"name"`
	} `json:"function"`
	ID   string `json:"id"`
	Type string `json:"type"`
}

type naiveTool struct {
	Function struct {
		Description string          `json:"description"`
		Name        string          `json:"name"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
	Type string `json:"type"`
}

// The parts of a chat-completions response and of a tool result the naive host reads.
type naiveReply struct {
	Choices []struct {
		Message naiveMessage `json:"message"`
	} `json:"choices"`
}

type naiveToolResult struct {
	CallID  string `json:"callId"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
}

type naiveHost struct {
	state naiveBody
	out   bytes.Buffer
	body  []byte
}

func newNaiveHost(first []byte) (*naiveHost, error) {
	h := &naiveHost{}
	if err := json.Unmarshal(first, &h.state); err != nil {
		return nil, err
	}
	if err := h.build(); err != nil {
		return nil, err
	}
	if !bytes.Equal(h.body, first) {
		return nil, fmt.Errorf("the naive host does not write the first body back as it was: %s", firstDifference(h.body, first))
	}
	return h, nil
}

func (h *naiveHost) record(reply, result []byte) error {
	var r naiveReply
	if err := json.Unmarshal(reply, &r); err != nil {
		return err
	}
	if len(r.Choices) == 0 {
		return fmt.Errorf("a reply without choices")
	}
	var t naiveToolResult
	if err := json.Unmarshal(result, &t); err != nil {
		return err
	}
	texts := make([]string, len(t.Content))
	for i, c := range t.Content {
		texts[i] = c.Text
	}
	text := strings.Join(texts, "\n")
	h.state.Messages = append(h.state.Messages, r.Choices[0].Message,
		naiveMessage{Content: &text, Role: "tool", ToolCallID: t.CallID})
	return nil
}

// build encodes the body as json.Marshal does, except for HTML escaping: Marshal writes '<', '>'
// and '&' as \u003c, \u003e, \u0026, which the provider reads the same but which are not the
// library's bytes (the fixture's source text is full of '<' and '>'), so the same encoder runs
// with SetEscapeHTML(false).
func (h *naiveHost) build() error {
	h.out.Reset()
	enc := json.NewEncoder(&h.out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&h.state); err != nil {
		return err
	}
	h.body = bytes.TrimSuffix(h.out.Bytes(), []byte("\n"))
	return nil
}

// firstDifference describes where two bodies part.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(i-60, 0)
	return fmt.Sprintf("%d and %d bytes, first difference at byte %d: %q instead of %q", len(got), len(want), i,
		got[from:min(i+60, len(got))], want[from:min(i+60, len(want))])
}
