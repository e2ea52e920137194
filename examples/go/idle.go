package main

// The idle pause of the demo and of `make e2e` (issue 35, docs/demo.md "The idle pause"): after
// the scripted turns the user goes quiet, and an idle timer drives the library's cache clock
// (Agent.CacheClock) until the user comes back with one more turn.
//
// llama-server keeps a slot's prompt until another prompt evicts it: it has no TTL. The pause
// gives it one through the clock's cacheRules ({"openai": {"ttlSeconds": N}}, -idle-ttl), so
// the clock has something to decide; and since llama-server bills nothing, the clock weighs
// costs with a price table of the shape hosted providers publish (idlePrices: relative units,
// a cached read a tenth of the input price, a cache write 1.25 times it, output 4 times it).
// The user is said to come back in an hour (the clock's return model), so the clock compacts
// while the cache is warm; the user then returns at once (the demo does not wait out the hour),
// and the first request after the pause reads the compacted context's prefix (system, tools,
// session prefix) from llama-server's cache. llmsession explain prices the pause: what it cost,
// and what letting the cache expire would have cost instead.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

// idlePrices is the price table the clock weighs costs with (relative units per million
// tokens, not llama-server's: it bills nothing).
var idlePrices = json.RawMessage(`{"openai": {"input": 1, "cachedInput": 0.1, "cacheWrite": 1.25, "output": 4}}`)

// idleSpec is the pause the host makes (-idle-ttl, -idle-after, -idle-return).
type idleSpec struct {
	ttl    time.Duration // the TTL given to llama-server through cacheRules
	margin time.Duration // how long before expiry the clock acts
	after  int           // the pause comes after this scripted turn (0: after the last one)
	back   turnSpec      // the user's turn after a pause that follows the last scripted turn
}

// pausesAfter reports whether the pause comes after scripted turn n (1-based) of count.
func (s *idleSpec) pausesAfter(n, count int) bool {
	if s.after <= 0 || s.after > count {
		return n == count
	}
	return n == s.after
}

// idleDecision is one answer of the clock during the pause.
type idleDecision struct {
	At       int64  `json:"at"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Recorded uint64 `json:"recorded,omitempty"`
}

// idleReport is what the pause did, in the report.
type idleReport struct {
	TTLMs     int64          `json:"ttlMs"`
	Decisions []idleDecision `json:"decisions"`
	// Compacted: the idle compaction landed.
	Compacted bool `json:"compacted"`
	// FirstAfter is the report index (0-based) of the first conversation request after it.
	FirstAfter int `json:"firstAfter"`
	// Gap is llmsession explain's report of the pause (gaps[]: cost and each action's cost).
	Gap json.RawMessage `json:"gap,omitempty"`
}

// clockOptions are the options the host asks the clock with.
func (s *idleSpec) clockOptions() *llmsession.ClockOptions {
	never := 0.0
	minContext := int64(0)
	rules, _ := json.Marshal(map[string]any{"openai": map[string]any{"ttlSeconds": int64(s.ttl / time.Second)}})
	return &llmsession.ClockOptions{
		Prices:      idlePrices,
		CacheRules:  rules,
		MarginMs:    s.margin.Milliseconds(),
		ReturnModel: &llmsession.ReturnModel{GapsMs: []int64{time.Hour.Milliseconds()}, NeverReturns: &never},
		Compaction:  &llmsession.ClockCompaction{MinContextTokens: &minContext},
	}
}

// idlePause is the pause: ask the clock, act on its decision, sleep until it says to ask
// again, until it compacted or let the cache expire. The user's next turn (the next scripted
// one, or -idle-return after the last) follows.
func (h *host) idlePause(ctx context.Context) error {
	s := h.idle
	a := h.a
	// The keep-warm request is built as a provider body: the agent needs a renderer for it.
	if err := a.SetRenderer("openai", nil); err != nil {
		return err
	}
	rep := &idleReport{TTLMs: s.ttl.Milliseconds()}
	h.rep.Idle = rep
	fmt.Printf("idle pause: llama-server has no TTL; the clock is given %s (cacheRules), the user returns in an hour (its model)\n", s.ttl)
	opts := s.clockOptions()
	for {
		d, err := a.CacheClock(opts)
		if err != nil {
			return fmt.Errorf("cache clock: %w", err)
		}
		rep.Decisions = append(rep.Decisions, idleDecision{At: d.At, Decision: d.Decision, Reason: d.Reason, Recorded: d.Recorded})
		fmt.Printf("  [clock] %s: %s\n", d.Decision, d.Reason)
		done := false
		switch d.Decision {
		case llmsession.DecisionCompact:
			out, err := a.CompactIdle(ctx)
			if err != nil {
				return fmt.Errorf("idle compaction: %w", err)
			}
			rep.Compacted = out.Outcome == "landed"
			h.pendingAfter = "idle"
			fmt.Printf("  [clock] idle compaction: %s\n", out.Outcome)
			done = true
		case llmsession.DecisionKeepWarm:
			if err := h.keepWarm(ctx); err != nil {
				return err
			}
		case llmsession.DecisionLetExpire:
			done = true
		}
		next, ok := d.NextDecisionAt()
		if done || !ok {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
	// The user comes back: the next request is the first after the pause.
	rep.FirstAfter = len(h.rep.Requests)
	fmt.Println("idle pause: the user is back")
	return nil
}

// keepWarm sends the keep-warm request and records its answer (it never enters the history).
func (h *host) keepWarm(ctx context.Context) error {
	b, err := h.a.KeepaliveBody()
	if err != nil {
		return fmt.Errorf("keep-warm request: %w", err)
	}
	body, err := h.bodyWithSampling(b.Bytes)
	if err != nil {
		return err
	}
	status, resp, err := h.c.post(ctx, body)
	if err == nil && status != 200 {
		err = fmt.Errorf("HTTP %d: %s", status, resp)
	}
	if err != nil {
		_, _ = h.a.ProviderError(ctx, err.Error(), false)
		return nil
	}
	u := rawUsage(resp)
	fmt.Printf("  [keep-warm] prompt %d tokens, cached %d\n", u.prompt, u.cached)
	_, _, err = h.a.RecordBody(resp)
	return err
}

// attachIdleGap puts explain's report of the pause (the gap after the last scripted request)
// into the report.
func (r *recorder) attachIdleGap(ex json.RawMessage) error {
	if r.Idle == nil {
		return nil
	}
	var e struct {
		Gaps []json.RawMessage `json:"gaps"`
	}
	if err := json.Unmarshal(ex, &e); err != nil {
		return err
	}
	for _, g := range e.Gaps {
		var x struct {
			Compactions int `json:"compactions"`
		}
		if json.Unmarshal(g, &x) == nil && x.Compactions > 0 {
			r.Idle.Gap = g
		}
	}
	return nil
}

// idleGap is the part of explain's gap report the rules and the table read.
type idleGap struct {
	After       string `json:"after"`
	Before      string `json:"before"`
	GapMs       int64  `json:"gapMs"`
	Compactions int    `json:"compactions"`
	Keepalives  int    `json:"keepalives"`
	Context     int    `json:"contextTokens"`
	Decisions   []struct {
		Decision string `json:"decision"`
	} `json:"decisions"`
	Cost *struct {
		Actions float64 `json:"actions"`
		Return  float64 `json:"return"`
		Total   float64 `json:"total"`
	} `json:"cost"`
	Options []struct {
		Option string  `json:"option"`
		Tier   string  `json:"tier"`
		Cost   float64 `json:"cost"`
	} `json:"options"`
	Best string `json:"best"`
}

func (g idleGap) option(name string) (float64, bool) {
	for _, o := range g.Options {
		if o.Option == name {
			return o.Cost, true
		}
	}
	return 0, false
}

// printIdle prints what the pause did and what it would have cost without the compaction.
func (r *recorder) printIdle(w io.Writer) {
	p := r.Idle
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nthe idle pause (a %d s TTL given to llama-server through cacheRules; relative prices)\n", p.TTLMs/1000)
	for _, d := range p.Decisions {
		fmt.Fprintf(w, "  clock: %s\n", d.Decision)
	}
	if p.FirstAfter < len(r.Requests) {
		x := r.Requests[p.FirstAfter]
		fmt.Fprintf(w, "  first request after the pause: prompt %d tokens, %d read from cache (system + tools + prefix = %d)\n",
			x.PromptTokens, x.CachedTokens, x.PrefixTokens)
	}
	var g idleGap
	if json.Unmarshal(p.Gap, &g) == nil && g.Cost != nil {
		expire, _ := g.option("let-expire")
		compact, _ := g.option("compact")
		fmt.Fprintf(w, "  the pause (%d s, context %d tokens): letting the cache expire would have cost %.4f (the context written again), compacting %.4f; it cost %.4f (summarisation %.4f, the request after it %.4f)\n",
			g.GapMs/1000, g.Context, expire, compact, g.Cost.Total, g.Cost.Actions, g.Cost.Return)
	}
}

// checkIdle applies the idle pause's rules (docs/demo.md, "The idle pause").
func checkIdle(r report, ok, fail func(format string, a ...any)) {
	p := r.Idle
	if p == nil {
		return
	}
	decided := false
	for _, d := range p.Decisions {
		decided = decided || d.Decision == llmsession.DecisionCompact
	}
	if !decided || !p.Compacted {
		fail("idle pause: the clock did not compact while warm (decisions %v, landed %v)", p.Decisions, p.Compacted)
	} else {
		ok("idle pause: the clock decided to compact while the cache was warm, and the compaction landed")
	}
	if p.FirstAfter >= len(r.Requests) {
		fail("idle pause: no request after the pause")
	} else if x := r.Requests[p.FirstAfter]; x.AfterCompaction != "idle" || x.PrefixTokens <= 0 || x.CachedTokens < x.PrefixTokens {
		fail("idle pause: the first request after it (after %q) read %d tokens from cache, system + tools + prefix is %d",
			x.AfterCompaction, x.CachedTokens, x.PrefixTokens)
	} else {
		ok("idle pause: the first request after it read %d tokens from cache >= the compacted context's prefix (system + tools + prefix, %d)",
			x.CachedTokens, x.PrefixTokens)
	}
	var g idleGap
	if len(p.Gap) == 0 || json.Unmarshal(p.Gap, &g) != nil {
		fail("idle pause: explain has no gap with the idle compaction")
		return
	}
	expire, okE := g.option("let-expire")
	compact, okC := g.option("compact")
	switch {
	case g.Compactions != 1 || len(g.Decisions) == 0:
		fail("idle pause: explain's gap has %d compactions and %d decisions", g.Compactions, len(g.Decisions))
	case !okE || !okC || g.Cost == nil:
		fail("idle pause: explain's gap is not priced: %s", p.Gap)
	case compact >= expire:
		fail("idle pause: explain prices compacting (%.4f) no lower than letting the cache expire (%.4f)", compact, expire)
	default:
		ok("idle pause: explain prices it: let-expire %.4f, compact %.4f (best %s)", expire, compact, g.Best)
	}
}
