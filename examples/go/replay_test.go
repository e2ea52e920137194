package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// recordedLog is a session that `make demo` recorded against llama-server (docs/demo.md,
// "Replay"): the demo's script, prefix and workspace, with the model's real replies.
const recordedLog = "demo/recorded-session.jsonl"

// demoSystem is the system prompt scripts/demo/run.sh gives the host.
const demoSystem = "You are a coding agent working in the weather-cli repository. Answer briefly. Use the read_file tool to read files."

// runDemoOffline runs the host's agent loop with the demo's options (those of
// scripts/demo/run.sh), every request answered by the recorded log instead of the server.
func runDemoOffline(t *testing.T, system, workspace string) (*host, error) {
	t.Helper()
	rp, err := llmsession.OpenReplay(recordedLog)
	if err != nil {
		t.Fatalf("open the recorded log: %v", err)
	}
	t.Cleanup(func() { rp.Close() })
	turns, err := loadScript("demo/script.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, sampling := callConfig("SmolLM2-135M-Instruct", 48, 0, 42)
	h := &host{workspace: workspace, sampling: sampling, rep: &recorder{}, replay: rp}
	err = h.run(cfg, "", "demo/prefix", system, 8192, 0.9, 64, 400, false, time.Minute, turns)
	return h, err
}

func TestDemoLoopReplaysOffline(t *testing.T) {
	h, err := runDemoOffline(t, demoSystem, "demo/workspace")
	if err != nil {
		t.Fatalf("the offline run: %v", err)
	}
	if !h.rep.Verified || h.rep.Landed < 1 {
		t.Fatalf("verified %v, compactions landed %d", h.rep.Verified, h.rep.Landed)
	}
	conversations, summaries := 0, 0
	for _, x := range h.rep.Requests {
		switch x.Kind {
		case kindConversation:
			conversations++
		case kindSummary:
			summaries++
		}
		if x.Explain == nil {
			t.Fatalf("request without explain figures: %+v", x)
		}
	}
	if conversations < 20 || summaries < 1 {
		t.Fatalf("%d conversation and %d summarisation requests replayed", conversations, summaries)
	}
	// The recorded figures come back with the answers: the summarisation request read most of
	// its prompt from the cache, as on the server.
	for _, x := range h.rep.Requests {
		if x.Kind == kindSummary && ratioOf(x) < summaryMinRatio {
			t.Fatalf("the recorded summarisation request read %d of %d tokens from cache", x.CachedTokens, x.PromptTokens)
		}
	}
}

func TestDemoLoopDivergenceIsNamed(t *testing.T) {
	// Another system prompt: the first request differs at the system prompt's first line.
	_, err := runDemoOffline(t, demoSystem+" Today is Monday.", "demo/workspace")
	var le *llmsession.Error
	if !errors.As(err, &le) || le.Code != llmsession.StatusReconstruction {
		t.Fatalf("want a reconstruction error, got %v", err)
	}
	if le.Field("component") != "system" || le.Field("request") != "1" || !strings.Contains(le.Message, "request 1 (turn 1 step 1) differs from the recorded one at system line 1") {
		t.Fatalf("divergence: %s %s", le.Message, le.Detail)
	}

	// A workspace file that changed since the recording: the request carrying its contents
	// (the one after the first host-scripted read_file) differs there, in the history.
	ws := t.TempDir()
	if err := copyDir("demo/workspace", ws); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(ws, "units", "units.go")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, append(b, []byte("\n// edited after the recording\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runDemoOffline(t, demoSystem, ws)
	if !errors.As(err, &le) || le.Code != llmsession.StatusReconstruction {
		t.Fatalf("want a reconstruction error, got %v", err)
	}
	if le.Field("component") != "history" || !strings.Contains(le.Message, "request 3 (turn 2 step 2) differs from the recorded one at history index 4, byte 1333") {
		t.Fatalf("divergence: %s %s", le.Message, le.Detail)
	}
}

func copyDir(from, to string) error {
	return filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
