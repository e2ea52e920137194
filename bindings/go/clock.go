package llmsession

/*
#include <llmsession.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"time"
)

// The cache clock (docs/go.md, "The cache clock"; docs/caching.md): during a pause, ask the
// agent what to do about the provider's cache (CacheClock), act on its decision (KeepaliveBody
// then RecordBody for "keep-warm", CompactIdle for "compact", the render option CacheTTL for
// "tier"), and ask again at NextDecisionAt.

// The decisions of the cache clock (ClockDecision.Decision).
const (
	DecisionNone      = "none"
	DecisionCompact   = "compact"
	DecisionKeepWarm  = "keep-warm"
	DecisionLetExpire = "let-expire"
	DecisionTier      = "tier"
)

// ReturnModel is the host's model of when it returns after a request (all optional): its own
// gaps in milliseconds (GapsMs, with Weights), the probability it never returns (NeverReturns:
// with GapsMs default 0.1, without them the default prior's own 1.6 %), whether the session's own
// gaps are blended in (Learn: by default only without GapsMs) and how many gaps the prior counts
// as (PriorWeight, default 100). docs/caching.md, "The default prior".
type ReturnModel struct {
	GapsMs       []int64   `json:"gapsMs,omitempty"`
	Weights      []float64 `json:"weights,omitempty"`
	NeverReturns *float64  `json:"neverReturns,omitempty"`
	Learn        *bool     `json:"learn,omitempty"`
	PriorWeight  float64   `json:"priorWeight,omitempty"`
}

// ClockCompaction are the clock's idle-compaction options (all optional): whether it may
// decide to compact (Enabled, default true; it also needs a policy and a summariser), the
// smallest context for an advisable compaction (MinContextTokens, default 20 % of the policy's
// window), the expected summary as a share of the region (SummaryRatio, default 0.1).
type ClockCompaction struct {
	Enabled          *bool   `json:"enabled,omitempty"`
	MinContextTokens *int64  `json:"minContextTokens,omitempty"`
	SummaryRatio     float64 `json:"summaryRatio,omitempty"`
}

// ClockOptions are the options of CacheClock (all optional; a zero value is every default).
type ClockOptions struct {
	// Now is the time to decide for, in ms since the epoch (default: now; tests give their own).
	Now int64 `json:"now,omitempty"`
	// Prices is the host's price table (as ExplainOptions.Prices): without a price for the
	// model nothing is decided.
	Prices json.RawMessage `json:"prices,omitempty"`
	// CacheRules overrides the providers' TTLs (as ExplainOptions.CacheRules).
	CacheRules json.RawMessage `json:"cacheRules,omitempty"`
	// ReturnModel is the host's return-time model (nil: the session's gaps and the default prior).
	ReturnModel *ReturnModel `json:"returnModel,omitempty"`
	// MarginMs is how long before expiry the clock acts (default 10000, raised to the
	// session's longest keep-warm round trip).
	MarginMs int64 `json:"marginMs,omitempty"`
	// TierBilling is "written" (default) or "prefix": how a longer-tier write after a cache
	// hit is billed (docs/caching.md, "Pricing assumptions").
	TierBilling string `json:"tierBilling,omitempty"`
	// Compaction are the idle-compaction options.
	Compaction *ClockCompaction `json:"compaction,omitempty"`
	// Record false keeps the decision out of the log (default: an action decision is recorded).
	Record *bool `json:"record,omitempty"`
	// KeepWarmBudget is the most one pause may stake in keep-warm requests, as a share of what
	// the session's requests have cost so far (nil: 0.05; docs/caching.md, "The keep-warm
	// budget"). It applies while the return model allows a host that never comes back.
	KeepWarmBudget *float64 `json:"keepWarmBudget,omitempty"`
	// KeepWarmTiers false keeps every keep-warm request at the tier in force (nil: true, a
	// keep-warm request may be sent at a longer tier; docs/caching.md, "Keeping warm at a
	// longer tier").
	KeepWarmTiers *bool `json:"keepWarmTiers,omitempty"`
}

// ClockOption is one option the clock weighed, with its expected cost.
type ClockOption struct {
	Option        string   `json:"option"`
	Tier          string   `json:"tier,omitempty"`
	ExpectedCost  float64  `json:"expectedCost"`
	ExpectedPings *float64 `json:"expectedPings,omitempty"`
}

// ClockState is what the clock read from the log: the last request, the tier and TTL in
// force, and the figures it priced (JSON: warmTokens, contextTokens, ...).
type ClockState struct {
	Provider      string          `json:"provider"`
	Model         string          `json:"model"`
	LastRequestAt int64           `json:"lastRequestAt,omitempty"`
	TouchedAt     int64           `json:"touchedAt,omitempty"`
	Tier          string          `json:"tier"`
	TTLMs         int64           `json:"ttlMs,omitempty"`
	Figures       json.RawMessage `json:"figures,omitempty"`
	Compacted     bool            `json:"compacted"`
}

// ClockDecision is the cache clock's answer (lls_agent_cache_clock): one decision, its reason
// in words (the break-even, the probability of a warm return, the expected cost of each
// option), until when the cache is warm and when to ask again.
type ClockDecision struct {
	Decision          string          `json:"decision"`
	Tier              string          `json:"tier,omitempty"`
	Reason            string          `json:"reason"`
	At                int64           `json:"at"`
	WarmUntil         int64           `json:"warmUntil,omitempty"`
	NextDecisionAtMs  int64           `json:"nextDecisionAt,omitempty"`
	ReturnProbability *float64        `json:"returnProbability,omitempty"`
	Options           []ClockOption   `json:"options"`
	BreakEven         json.RawMessage `json:"breakEven,omitempty"`
	Returns           string          `json:"returns"`
	State             ClockState      `json:"state"`
	// Recorded is the seq of the clock/decision event that records it (0: none).
	Recorded uint64          `json:"recorded,omitempty"`
	Raw      json.RawMessage `json:"-"`
}

// NextDecisionAt is when to ask again, and false when nothing is left to decide before the
// next request (wait for the user instead).
func (d *ClockDecision) NextDecisionAt() (time.Time, bool) {
	if d.NextDecisionAtMs == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(d.NextDecisionAtMs), true
}

// CacheClock asks the agent's cache clock what to do now about the provider's cache, from the
// session's log, the host's prices and its return-time model (opts may be nil). An action
// decision is recorded in the log once per use of the cache.
func (a *Agent) CacheClock(opts *ClockOptions) (*ClockDecision, error) {
	var o []byte
	if opts != nil {
		var err error
		if o, err = toJSON(opts); err != nil {
			return nil, err
		}
	}
	op, on := cbufOpt(o)
	raw, err := a.str(func(p *C.lls_agent, out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_agent_cache_clock(p, op, on, out, n, e)
	})
	d, err := decodeAs[ClockDecision](raw, err)
	if d != nil {
		d.Raw = raw
	}
	return d, err
}

// KeepaliveBody builds the keep-warm request the clock decided ("keep-warm") as the provider
// body: the last conversation request again, every cacheable byte the same, its output limit
// at the provider's minimum (Info.Purpose is PurposeKeepalive); when the decision named a
// longer Tier, its cache marks carry that tier's TTL. Send it, then record the answer
// with RecordBody (or RecordStream, or ProviderError): it is logged and never enters the
// history.
func (a *Agent) KeepaliveBody() (*Body, error) {
	var out *C.char
	var n C.size_t
	var info C.lls_request_info
	err := a.with(nil, func(p *C.lls_agent, e **C.lls_error) C.lls_status {
		return C.lls_agent_keepalive_body(p, &out, &n, &info, e)
	})
	b := takeString(out, n)
	if err != nil {
		return nil, err
	}
	return &Body{Bytes: b, Info: requestInfoOf(&info)}, nil
}

// CompactIdle runs the compaction the clock decided ("compact"): the cache-reusing compaction
// of the head region, logged with trigger "idle" and the decision it follows.
func (a *Agent) CompactIdle(ctx context.Context) (*CompactionOutcome, error) {
	return a.CompactOf(ctx, map[string]any{"trigger": "idle"})
}
