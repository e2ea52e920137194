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

// cacheHost runs two turns on a fresh session with the given system prompt; answers come from
// answer (a scripted provider, or a replay).
func cacheHost(t *testing.T, s *Session, system string, answer func(envelope []byte) (json.RawMessage, error)) error {
	t.Helper()
	a, err := NewAgent(s, map[string]any{"config": map[string]any{"provider": "openai", "model": "gpt-5"}, "system": system})
	if err != nil {
		return err
	}
	defer a.Close()
	for _, u := range []string{"first", "second"} {
		if _, err := a.StartTurn(UserText(u)); err != nil {
			return err
		}
		r, err := a.NextRequest(context.Background())
		if err != nil {
			return err
		}
		resp, err := answer(r.Envelope)
		if err != nil {
			a.EndTurn("error")
			return err
		}
		if _, err := a.RecordResponse(resp); err != nil {
			return err
		}
		if err := a.EndTurn("completed"); err != nil {
			return err
		}
	}
	return nil
}

func scripted(envelope []byte) (json.RawMessage, error) {
	return json.RawMessage(`{"message":{"role":"assistant","content":[{"type":"text","text":"ok"}]},` +
		`"usage":{"inputTokens":10,"outputTokens":2,"cacheReadTokens":90}}`), nil
}

func TestRenderWithOptions(t *testing.T) {
	leakCheck(t)
	env := []byte(`{"provider":"openai","model":"m","system":"S","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}],"sessionId":"sess-1","purpose":"conversation"}`)
	body, err := RenderWithOptions("openai", env, nil)
	if err != nil || !strings.Contains(string(body), `"prompt_cache_key":"sess-1"`) {
		t.Fatalf("default key: %s %v", body, err)
	}
	body, err = RenderWithOptions("openai", env, &RenderOptions{PromptCacheKey: false})
	if err != nil || strings.Contains(string(body), "prompt_cache_key") {
		t.Fatalf("key off: %s %v", body, err)
	}
	body, err = RenderWithOptions("openai", env, &RenderOptions{PromptCacheKey: "tenant", PromptCacheRetention: "24h"})
	if err != nil || !strings.Contains(string(body), `"prompt_cache_key":"tenant"`) || !strings.Contains(string(body), `"prompt_cache_retention":"24h"`) {
		t.Fatalf("custom key: %s %v", body, err)
	}
	body, err = RenderWithOptions("anthropic", env, &RenderOptions{CacheTTL: "1h"})
	if err != nil || strings.Count(string(body), `"cache_control":{"ttl":"1h","type":"ephemeral"}`) != 2 {
		t.Fatalf("ttl: %s %v", body, err)
	}
	if _, err := RenderWithOptions("anthropic", env, &RenderOptions{CacheTTL: "2h"}); !errors.Is(err, ErrInvalidInput) ||
		!strings.Contains(err.Error(), `options.cacheTtl: expected "5m" or "1h", got "2h"`) {
		t.Fatalf("bad ttl: %v", err)
	}
	if _, err := RenderWithOptions("openai", env, &RenderOptions{PrefixLen: 5}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("prefixLen too large: %v", err)
	}
}

func TestExplainNamesTheChangedSystemLine(t *testing.T) {
	leakCheck(t)
	s, err := NewMemorySession(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := NewAgent(s, map[string]any{"config": map[string]any{"provider": "openai", "model": "gpt-5"}, "system": "Be brief.\nToday is Monday."})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, sys := range []string{"Be brief.\nToday is Monday.", "Be brief.\nToday is Tuesday."} {
		if err := a.SetOptions(map[string]any{"config": map[string]any{"provider": "openai", "model": "gpt-5"}, "system": sys}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.StartTurn(UserText([]string{"one", "two"}[i])); err != nil {
			t.Fatal(err)
		}
		if _, err := a.NextRequest(context.Background()); err != nil {
			t.Fatal(err)
		}
		resp, _ := scripted(nil)
		if _, err := a.RecordResponse(resp); err != nil {
			t.Fatal(err)
		}
		if err := a.EndTurn("completed"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := s.Explain(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ex struct {
		Requests []struct {
			ID         string `json:"id"`
			Cause      string `json:"cause"`
			Divergence *struct {
				Component string `json:"component"`
				Line      int    `json:"line"`
				Event     string `json:"event"`
			} `json:"divergence"`
			CachedTokens         int `json:"cachedTokens"`
			ExpectedCachedTokens int `json:"expectedCachedTokens"`
		} `json:"requests"`
		Totals struct {
			Spend map[string]int `json:"spend"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(out, &ex); err != nil {
		t.Fatal(err)
	}
	if len(ex.Requests) != 2 || ex.Requests[1].Divergence == nil {
		t.Fatalf("explain: %s", out)
	}
	d := ex.Requests[1].Divergence
	if d.Component != "system" || d.Line != 2 || d.Event != "header-change" || ex.Requests[1].Cause != "header-change" {
		t.Fatalf("divergence: %+v", d)
	}
	if ex.Totals.Spend["header-change"] != 10 {
		t.Fatalf("spend: %v", ex.Totals.Spend)
	}
	if _, err := s.Explain(&ExplainOptions{Tokenizer: "/nonexistent/tokenizer.json"}); !errors.Is(err, ErrTokenizer) {
		t.Fatalf("bad tokenizer: %v", err)
	}
	// A price table prices every request with usage; a bad one names the field.
	priced, err := s.Explain(&ExplainOptions{Prices: json.RawMessage(`{"openai": {"input": 1, "cachedInput": 0.1, "output": 2}}`)})
	if err != nil {
		t.Fatal(err)
	}
	var cost struct {
		Totals struct {
			Cost struct {
				Total   float64 `json:"total"`
				NoCache float64 `json:"noCache"`
			} `json:"cost"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(priced, &cost); err != nil || cost.Totals.Cost.Total <= 0 || cost.Totals.Cost.NoCache < cost.Totals.Cost.Total {
		t.Fatalf("cost: %s (%v)", priced, err)
	}
	_, err = s.Explain(&ExplainOptions{Prices: json.RawMessage(`{"openai": {"input": 1}}`)})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "prices.openai.cachedInput: is required") {
		t.Fatalf("bad prices: %v", err)
	}
}

func TestReplayAnswersTheRecordedLoop(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "recorded.jsonl")
	s, err := OpenFile(path, &SessionOptions{ID: "rec-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cacheHost(t, s, "Be brief.", scripted); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// The same loop, offline: every answer comes from the recording.
	rp, err := OpenReplay(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	offline, _ := NewMemorySession(&SessionOptions{ID: "rec-1"})
	defer offline.Close()
	err = cacheHost(t, offline, "Be brief.", func(env []byte) (json.RawMessage, error) {
		a, err := rp.AnswerOf(env)
		if err != nil {
			return nil, err
		}
		if a.Outcome != "response" || a.Purpose != "conversation" {
			t.Fatalf("answer %+v", a)
		}
		return a.Response, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := rp.Info()
	if !strings.Contains(string(info), `"answered":2`) || !strings.Contains(string(info), `"sessionId":"rec-1"`) {
		t.Fatalf("info %s", info)
	}
	if _, err := offline.Verify(); err != nil {
		t.Fatal(err)
	}

	// A host whose system prompt changed: the first request differs at system line 1.
	rp2, err := NewReplay(offline)
	if err != nil {
		t.Fatal(err)
	}
	defer rp2.Close()
	other, _ := NewMemorySession(&SessionOptions{ID: "rec-1"})
	defer other.Close()
	err = cacheHost(t, other, "Be very brief.", func(env []byte) (json.RawMessage, error) { return rp2.Answer(env) })
	var le *Error
	if !errors.As(err, &le) || le.Code != StatusReconstruction {
		t.Fatalf("want a reconstruction error, got %v", err)
	}
	if le.Field("component") != "system" || le.Field("request") != "1" || !strings.Contains(le.Message, "differs from the recorded one at system line 1") {
		t.Fatalf("divergence: %s %s", le.Message, le.Detail)
	}

	// Bad input.
	if _, err := OpenReplay(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, ErrStorage) {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "junk.jsonl"), []byte("junk\n"), 0o644)
	if _, err := OpenReplay(filepath.Join(dir, "junk.jsonl")); !errors.Is(err, ErrCorruptLog) {
		t.Fatalf("junk: %v", err)
	}
	if _, err := ExplainFile(filepath.Join(dir, "junk.jsonl"), nil); !errors.Is(err, ErrCorruptLog) {
		t.Fatalf("explain junk: %v", err)
	}
	ex, err := ExplainFile(path, nil)
	if err != nil || !strings.Contains(string(ex), `"conversationRequests":2`) {
		t.Fatalf("explain file: %s %v", ex, err)
	}
	rp.Close()
	if _, err := rp.Answer([]byte(`{}`)); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}
