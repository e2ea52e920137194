package llmsession

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const clockPrices = `{"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}`

const clockReply = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"end_turn",` +
	`"content":[{"type":"text","text":"It reads the forecast."}],` +
	`"usage":{"input_tokens":40,"output_tokens":8,"cache_read_input_tokens":0,"cache_creation_input_tokens":30000}}`

// clockAgent is an Anthropic agent after one turn whose request wrote 30000 tokens to the cache.
func clockAgent(t *testing.T) (*Session, *Agent) {
	t.Helper()
	s, err := NewMemorySession(nil)
	must(t, err)
	a, err := NewAgent(s, map[string]any{
		"config": map[string]any{"provider": "anthropic", "model": "claude-sonnet-4-5"}, "system": "You are a coding agent.", "checkRequests": true})
	must(t, err)
	must(t, a.SetRenderer("anthropic", nil))
	_, err = a.StartTurn("What does the weather module do?")
	must(t, err)
	_, err = a.NextBody(context.Background())
	must(t, err)
	_, _, err = a.RecordBody([]byte(clockReply))
	must(t, err)
	must(t, a.EndTurn("completed"))
	return s, a
}

func TestCacheClockKeepsWarmThroughTheRecordPath(t *testing.T) {
	s, a := clockAgent(t)
	defer s.Close()
	defer a.Close()
	d, err := a.CacheClock(&ClockOptions{Prices: json.RawMessage(clockPrices)})
	must(t, err)
	if d.State.Tier != "5m" || d.State.TTLMs != 300000 || d.State.LastRequestAt == 0 {
		t.Fatalf("state %+v", d.State)
	}
	if next, ok := d.NextDecisionAt(); !ok || next.UnixMilli() != d.State.LastRequestAt+290000 {
		t.Errorf("next decision %v %v (decision %s: %s)", next, ok, d.Decision, d.Reason)
	}
	// Eight seconds before expiry, the host back in twenty minutes: keep warm.
	never := 0.0
	d, err = a.CacheClock(&ClockOptions{Prices: json.RawMessage(clockPrices), Now: d.State.LastRequestAt + 292000,
		ReturnModel: &ReturnModel{GapsMs: []int64{1200000}, NeverReturns: &never}})
	must(t, err)
	// One keep-warm request at the hour tier bridges the twenty minutes (docs/caching.md,
	// "Keeping warm at a longer tier"): the body's cache marks carry its TTL.
	if d.Decision != DecisionKeepWarm || d.Tier != "1h" || d.Recorded == 0 || !strings.Contains(d.Reason, "keeping warm pays") {
		t.Fatalf("decision %s at %q (recorded %d): %s", d.Decision, d.Tier, d.Recorded, d.Reason)
	}
	b, err := a.KeepaliveBody()
	must(t, err)
	if b.Info.Purpose != PurposeKeepalive || !strings.Contains(string(b.Bytes), `"max_tokens":1`) || !strings.Contains(string(b.Bytes), `"ttl":"1h"`) {
		t.Errorf("keep-warm body %s, info %+v", b.Bytes, b.Info)
	}
	_, calls, err := a.RecordBody([]byte(clockReply))
	must(t, err)
	if calls != 0 {
		t.Errorf("a keep-warm answer opens no tool call, got %d", calls)
	}
	v, err := s.VerifyOf()
	must(t, err)
	if v.Requests != 1 || v.Keepalives != 1 || v.Decisions != 1 {
		t.Errorf("verify %+v", v)
	}
}

func TestCacheClockOptionsNameTheField(t *testing.T) {
	s, a := clockAgent(t)
	defer s.Close()
	defer a.Close()
	_, err := a.CacheClock(&ClockOptions{TierBilling: "all"})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalidInput) || e.Field("field") != "options.tierBilling" {
		t.Fatalf("got %v", err)
	}
	// Without a decision to compact, an idle compaction is refused.
	if _, err := a.CompactIdle(context.Background()); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("CompactIdle without a decision: %v", err)
	}
}
