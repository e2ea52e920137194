package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// goodReport is a run that keeps every rule: two requests, a compaction whose summary request
// reads 97.9 % from cache, the peer-style request that reads little, and the request after it;
// with llmsession explain's figures beside the server's.
func goodReport() report {
	r := report{Verified: true, Landed: 1, StreamTurns: "even", Requests: []row{
		{Kind: kindConversation, Instance: 1, Turn: 1, Step: 1, PromptTokens: 2400, CachedTokens: 0, CompletionTokens: 48, PrefixLen: 3, PrefixTokens: 2300,
			Explain: &explained{ID: "1"}},
		{Kind: kindConversation, Instance: 1, Turn: 2, Step: 1, PromptTokens: 7300, CachedTokens: 2447, CompletionTokens: 48, SharedMessages: 5, PrefixLen: 3,
			Streamed: true, Deltas: 31, DeltaTextMatches: true,
			Explain: &explained{ID: "2", ComparedWith: "1", Extends: true, ExpectedCachedTokens: 2400}},
		{Kind: kindSummary, PromptTokens: 7500, CachedTokens: 7340, CompletionTokens: 40, SharedMessages: 7, PrefixLen: 3,
			Explain: &explained{ID: "c1", ComparedWith: "2", Extends: true, ExpectedCachedTokens: 7300}},
		{Kind: kindPeer, PromptTokens: 7600, CachedTokens: 6},
		{Kind: kindConversation, Instance: 1, Turn: 3, Step: 1, PromptTokens: 3000, CachedTokens: 2305, CompletionTokens: 12, SharedMessages: 3, PrefixLen: 3,
			AfterCompaction: "landed", PrefixTokens: 2300,
			Explain: &explained{ID: "3", ComparedWith: "c1", ExpectedCachedTokens: 2310, Divergence: "history index 0, byte 35 differs"}},
	}}
	for i, x := range r.Requests {
		if x.Kind == kindConversation {
			r.Requests[i].Logged = &loggedUsage{Prompt: x.PromptTokens, Cached: x.CachedTokens, Completion: x.CompletionTokens}
		}
	}
	return r
}

func violationsOf(t *testing.T, r report) []string {
	t.Helper()
	_, v := checkReport(r)
	return v
}

func wantViolation(t *testing.T, r report, fragment string) {
	t.Helper()
	v := violationsOf(t, r)
	for _, s := range v {
		if strings.Contains(s, fragment) {
			return
		}
	}
	t.Fatalf("no violation mentioning %q; got %q", fragment, v)
}

func TestCheckReportPasses(t *testing.T) {
	checked, v := checkReport(goodReport())
	if len(v) != 0 {
		t.Fatalf("violations on a good report: %q", v)
	}
	if len(checked) != 13 {
		t.Fatalf("checked %d rules, want 13: %q", len(checked), checked)
	}
}

func TestCheckReportCacheMissWithinInstance(t *testing.T) {
	r := goodReport()
	r.Requests[1].CachedTokens = 2398 // previous prompt 2400, one token short of 2400 - 1
	wantViolation(t, r, "less than the previous prompt 2400 - 1")
	r.Requests[1].CachedTokens = 2399 // exactly previous - 1 passes
	r.Requests[1].Logged.Cached = 2399
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

func TestCheckReportNewInstanceHasNoRule(t *testing.T) {
	r := goodReport()
	r.Requests[1].Instance = 2 // the first request of another instance: cold is fine
	r.Requests[1].CachedTokens = 0
	r.Requests[1].Logged.Cached = 0
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

func TestCheckReportSummaryBelowThreshold(t *testing.T) {
	r := goodReport()
	r.Requests[2].Explain.ComparedWith = "" // this test is about the 95 % rule only
	r.Requests[2].CachedTokens = 7124       // 94.99 %
	wantViolation(t, r, "less than 95%")
	r.Requests[2].CachedTokens = 7125 // 95 % exactly passes
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

func TestCheckReportPeerReadsTooMuch(t *testing.T) {
	r := goodReport()
	r.Requests[3].CachedTokens = 800
	wantViolation(t, r, "more than 10%")
	r.Requests[3].CachedTokens = 7400
	wantViolation(t, r, "not less than the summarisation request's 7340")
}

func TestCheckReportPeerMissing(t *testing.T) {
	r := goodReport()
	r.Requests = append(r.Requests[:3:3], r.Requests[4])
	wantViolation(t, r, "1 summarisation requests but 0 peer-style requests")
}

func TestCheckReportAfterCompaction(t *testing.T) {
	r := goodReport()
	r.Requests[4].CachedTokens = 2299 // less than system + tools + prefix
	wantViolation(t, r, "less than system + tools + prefix (2300)")

	r = goodReport()
	r.Requests[4].SharedMessages = 2
	wantViolation(t, r, "shares 2 leading messages, less than the 3 of the session prefix")

	r = goodReport()
	r.Requests[4].PrefixTokens = 0
	wantViolation(t, r, "was not measured")
}

func TestCheckReportExplainAgainstTheServer(t *testing.T) {
	// An extension: the server reads the earlier prompt but its last token, plus at most the
	// earlier reply.
	r := goodReport()
	r.Requests[1].CachedTokens = 2398 // below expected 2400 - 1 (also below rule 1)
	wantViolation(t, r, "outside expected 2400 - 1 .. expected + 48 reply tokens")
	r.Requests[1].CachedTokens = 2449 // above 2400 + 48
	wantViolation(t, r, "explain, request 2 (2) extends 1: the server read 2449 tokens from cache")
	r.Requests[1].CachedTokens = 2448
	r.Requests[1].Logged.Cached = 2448 // the log records what the server reported
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
	// A partial share: within 3 % of the expected figure.
	r = goodReport()
	r.Requests[4].Explain.ExpectedCachedTokens = 2200 // 2305 is 4.8 % above
	wantViolation(t, r, "expected 2200 (more than 3% off)")
	r.Requests[4].Explain.ExpectedCachedTokens = 2240 // 2.9 % below 2305
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
	// Figures missing, or compared with a request the report lacks.
	r = goodReport()
	r.Requests[4].Explain = nil
	wantViolation(t, r, "request 5 has no explain figures")
	r = goodReport()
	r.Requests[4].Explain.ComparedWith = "c9"
	wantViolation(t, r, "compared with c9, which the report does not have")
}

func TestCheckReportBelowCacheable(t *testing.T) {
	// 2.5 % below the cacheable estimate after the compaction: within the partial-share
	// tolerance, but below 99 % of what the server could have reused.
	r := goodReport()
	r.Requests[4].CachedTokens = 2252
	wantViolation(t, r, "request 5 (3) read 2252 of 2310 cacheable tokens from cache (97.5%), below 99%")
	// The first request of an instance has no such rule.
	r = goodReport()
	r.Requests[0].Explain.ExpectedCachedTokens = 100
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

func TestCheckReportNoCompaction(t *testing.T) {
	r := goodReport()
	r.Landed = 0
	wantViolation(t, r, "no automatic compaction landed")
	r = goodReport()
	r.Requests = r.Requests[:2]
	wantViolation(t, r, "no automatic compaction landed (0 summarisation requests")
}

func TestCheckReportRunFailed(t *testing.T) {
	r := goodReport()
	r.Error = "HTTP 500: boom"
	r.Verified = false
	wantViolation(t, r, "the run failed: HTTP 500: boom")
	wantViolation(t, r, "not verified")
}

func TestRunCheckExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	b, _ := json.Marshal(goodReport())
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runCheck(good); code != 0 {
		t.Fatalf("runCheck(good) = %d, want 0", code)
	}
	bad := goodReport()
	bad.Requests[2].CachedTokens = 10
	b, _ = json.Marshal(bad)
	badPath := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(badPath, b, 0o644)
	if code := runCheck(badPath); code != 1 {
		t.Fatalf("runCheck(bad) = %d, want 1", code)
	}
	if code := runCheck(filepath.Join(dir, "missing.json")); code != 2 {
		t.Fatalf("runCheck(missing) = %d, want 2", code)
	}
	_ = os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o644)
	if code := runCheck(filepath.Join(dir, "junk.json")); code != 2 {
		t.Fatalf("runCheck(junk) = %d, want 2", code)
	}
}

func TestFlattenTranscript(t *testing.T) {
	msgs := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":[{"type":"text","text":"read it"}]}`),
		json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool-call","id":"c1","name":"read_file","arguments":"{\"path\":\"a.go\"}"}]}`),
		json.RawMessage(`{"role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"package a"}]}]}`),
	}
	got := flatten(msgs)
	want := "[user]\nread it\n\n[assistant]\nok\n\n[assistant calls read_file {\"path\":\"a.go\"}]\n\n[tool result]\npackage a\n\n"
	if got != want {
		t.Fatalf("flatten:\n%q\nwant\n%q", got, want)
	}
}

func TestRunToolStaysInWorkspace(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644)
	if text, isErr := runTool(dir, llmsession.Block{Type: llmsession.BlockToolCall, Name: "read_file", Arguments: `{"path":"a.txt"}`}); isErr || text != "hello" {
		t.Fatalf("read a.txt: %q %v", text, isErr)
	}
	for _, args := range []string{`{"path":"../etc/passwd"}`, `{"path":"/etc/passwd"}`, `{}`, `not json`} {
		if text, isErr := runTool(dir, llmsession.Block{Type: llmsession.BlockToolCall, Name: "read_file", Arguments: args}); !isErr {
			t.Fatalf("read_file %s succeeded: %q", args, text)
		}
	}
	if _, isErr := runTool(dir, llmsession.Block{Type: llmsession.BlockToolCall, Name: "write_file", Arguments: `{}`}); !isErr {
		t.Fatal("an unknown tool succeeded")
	}
}

func TestCheckReportStreamedTurns(t *testing.T) {
	r := goodReport()
	r.Requests[1].DeltaTextMatches = false
	wantViolation(t, r, "the text of its deltas differs from the recorded message")
	r = goodReport()
	r.Requests[1].Deltas = 0
	wantViolation(t, r, "was streamed but gave no delta")
	r = goodReport()
	r.Requests[1].Streamed = false
	wantViolation(t, r, "-stream even was set but no request was streamed")
	r = goodReport()
	r.Requests[0].Streamed, r.Requests[0].Deltas, r.Requests[0].DeltaTextMatches = true, 5, true
	r.Requests[4].Streamed, r.Requests[4].Deltas, r.Requests[4].DeltaTextMatches = true, 5, true
	wantViolation(t, r, "there is no non-streamed turn to compare with")
	// A run without -stream has no streaming rule.
	r = goodReport()
	r.StreamTurns = ""
	r.Requests[1].Streamed = false
	if v := violationsOf(t, r); len(v) != 0 {
		t.Fatalf("violations: %q", v)
	}
}

func TestCheckReportLoggedUsage(t *testing.T) {
	r := goodReport()
	r.Requests[1].Logged.Cached = 2400
	wantViolation(t, r, "the log recorded prompt 7300, cached 2400, completion 48; the server reported 7300, 2447, 48")
	r = goodReport()
	r.Requests[4].Logged = nil
	wantViolation(t, r, "no usage was recorded in the log")
}

func TestStreamSpec(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []uint64
	}{{"", nil}, {"all", []uint64{1, 2, 3, 4}}, {"even", []uint64{2, 4}}, {"odd", []uint64{1, 3}}, {"1, 4", []uint64{1, 4}}} {
		s, err := parseStreamSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for turn := uint64(1); turn <= 4; turn++ {
			if s.streams(turn) {
				got = append(got, turn)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%q streams %v, want %v", c.spec, got, c.want)
		}
	}
	for _, bad := range []string{"2,x", "0", "evens"} {
		if _, err := parseStreamSpec(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
