//! The idle gaps of a session, priced (docs/caching.md, "The cache clock"): for every pause
//! between two conversation requests long enough for the cache clock to act (longer than the
//! TTL less the margin), or in which it acted, how long it was, what it cost (the keep-warm and
//! summarisation requests sent during it, and the first request after it), what each action
//! would have cost over the same gap ([`GapCosts::of`]: let it expire, keep warm, compact
//! before expiry, the longer tier), and what the clock decided during it.
//!
//! The figures of each gap are the clock's own ([`log_figures`]), taken from the log as it was
//! when the pause began (before the next turn's user message, a keep-warm request or a
//! compaction); the counterfactual compaction is priced with the compaction policy the clock
//! recorded with its decisions, else with a retained tail of 16 % of the context and a summary
//! of a tenth of the region (at most 8192 tokens).

use super::{Cause, ExplainSettings, Kind, RequestReport};
use crate::cache_rules::CacheSettings;
use crate::clock::{
    keepalive_max_tokens, log_figures, offered_tiers, CacheFigures, ClockTrack, CompactionParams, GapCosts, LogFigures, OptionCost, Rates,
    TierBilling, DEFAULT_MARGIN_MS, DEFAULT_SUMMARY_RATIO,
};
use crate::log::event::{types, Event};
use crate::log::Log;
use crate::types::{CallConfig, Usage};
use serde::Serialize;
use serde_json::Value;

/// A decision of the clock recorded during a gap.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapDecision {
    /// Its `clock/decision` seq.
    pub seq: u64,
    /// The time it was decided for.
    pub at: u64,
    /// `compact`, `keep-warm`, `let-expire` or `tier`.
    pub decision: String,
    /// With `tier`: the tier; with `keep-warm`, the longer tier its keep-warm request was sent
    /// at; with `let-expire`, the tier of the rewrite when it changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// What a gap cost, priced from the usage the log has.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapCost {
    /// The keep-warm and summarisation requests sent during the gap.
    pub actions: f64,
    /// The prompt of the first request after it (output left out; its new input included).
    #[serde(rename = "return")]
    pub return_: f64,
    /// Both.
    pub total: f64,
}

/// One idle gap (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapReport {
    /// The conversation request before it (`id`).
    pub after: String,
    /// The conversation request after it; absent when the session ends in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// When it began: the request before it was sent (Unix ms).
    pub start_at: u64,
    /// When it ended: the request after it was sent (or the last event in it).
    pub end_at: u64,
    /// Its length.
    pub gap_ms: u64,
    /// The cache rule's TTL in force after the request before it (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The tier that request wrote at.
    pub tier: String,
    /// The warm prefix after that request, in the provider's tokens.
    pub warm_tokens: u64,
    /// The context the next request carried before its new input.
    pub context_tokens: u64,
    /// Whether the request after it lost its prefix to expiry (explain's `expiry` cause).
    pub expired: bool,
    /// Keep-warm requests sent during it.
    pub keepalives: u64,
    /// Summarisation requests sent during it.
    pub compactions: u64,
    /// What the clock decided during it.
    pub decisions: Vec<GapDecision>,
    /// What it cost (with a price table that prices the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<GapCost>,
    /// What each action would have cost over the same gap (with prices): the context of the
    /// request after it, and what the action spent (its new input left out: it costs the same
    /// in every option).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<OptionCost>,
    /// The cheapest of `options`, named by [`OptionCost::label`] (`let-expire`, `keep-warm`,
    /// `keep-warm 1h` for one whose first request is at the longer tier, `compact`, `tier 1h`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<String>,
}

/// A gap being walked.
struct Open {
    after: usize,
    start_at: u64,
    last_at: u64,
    figures: Option<(LogFigures, CallConfig)>,
    actions: Vec<usize>,
    decisions: Vec<GapDecision>,
    margin_ms: Option<u64>,
    ping_output: Option<u64>,
}

/// Finds the gaps while explain walks the log: [`request`](Self::request) for each request it
/// reports, then [`observe`](Self::observe) for every event, before the walk applies it.
pub(crate) struct GapWalker<'a> {
    settings: &'a ExplainSettings,
    track: ClockTrack,
    open: Option<Open>,
    closed: Vec<(Open, Option<usize>, u64)>,
    pending: Option<(usize, Kind)>,
    /// The compaction policy the clock recorded last.
    params: Option<CompactionParams>,
}

const SNAPSHOT_AT: [&str; 5] =
    [types::TURN_START, types::STEP_START, types::CLOCK_DECISION, types::CLOCK_KEEPALIVE, types::COMPACTION_START];

impl<'a> GapWalker<'a> {
    pub(crate) fn new(settings: &'a ExplainSettings) -> GapWalker<'a> {
        GapWalker { settings, track: ClockTrack::default(), open: None, closed: Vec::new(), pending: None, params: None }
    }

    /// The request `index` of the report was built from `ev`.
    pub(crate) fn request(&mut self, index: usize, kind: Kind, _ev: &Event) {
        self.pending = Some((index, kind));
    }

    fn snapshot(&self, log: &Log) -> Option<(LogFigures, CallConfig)> {
        let config = log.state().headers.current()?.config.clone();
        let plain = log_figures(log, &self.track, None)?;
        let params = self.params.clone().unwrap_or(CompactionParams {
            retained_tokens: (plain.context_tokens as f64 / plain.scale.max(f64::MIN_POSITIVE) * 0.16) as u64,
            summary_max_tokens: 8192,
            threshold_tokens: u64::MAX,
            min_context_tokens: 0,
            summary_ratio: DEFAULT_SUMMARY_RATIO,
        });
        Some((log_figures(log, &self.track, Some(&params))?, config))
    }

    pub(crate) fn observe(&mut self, ev: &Event, log: &Log) {
        if ev.ty == types::CLOCK_DECISION {
            if let Some(p) = ev.data.get("compactionPolicy").and_then(|p| serde_json::from_value(p.clone()).ok()) {
                self.params = Some(p);
            }
        }
        if self.open.as_ref().is_some_and(|o| o.figures.is_none()) && SNAPSHOT_AT.contains(&ev.ty.as_str()) {
            let snap = self.snapshot(log);
            self.open.as_mut().expect("checked").figures = snap;
        }
        if let Some((index, kind)) = self.pending.take() {
            match kind {
                Kind::Conversation => {
                    if let Some(o) = self.open.take() {
                        self.closed.push((o, Some(index), ev.time));
                    }
                    self.open = Some(Open {
                        after: index,
                        start_at: ev.time,
                        last_at: ev.time,
                        figures: None,
                        actions: Vec::new(),
                        decisions: Vec::new(),
                        margin_ms: None,
                        ping_output: None,
                    });
                }
                _ => {
                    if let Some(o) = self.open.as_mut() {
                        o.actions.push(index);
                    }
                }
            }
        }
        if let Some(o) = self.open.as_mut() {
            o.last_at = ev.time;
            let d = &ev.data;
            match ev.ty.as_str() {
                types::CLOCK_DECISION => {
                    let s = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
                    o.decisions.push(GapDecision {
                        seq: ev.seq,
                        at: d.get("at").and_then(Value::as_u64).unwrap_or(ev.time),
                        decision: s("decision").unwrap_or_default(),
                        tier: s("tier"),
                    });
                    if let Some(m) = d.get("figures").and_then(|f| f.get("marginMs")).and_then(Value::as_u64) {
                        o.margin_ms.get_or_insert(m);
                    }
                }
                types::CLOCK_KEEPALIVE => {
                    if let Some(m) = d.get("maxTokens").and_then(Value::as_u64) {
                        o.ping_output.get_or_insert(m);
                    }
                }
                _ => {}
            }
        }
        self.track.observe(ev);
    }

    /// The gaps, priced with the reports' usage and costs.
    pub(crate) fn finish(mut self, reports: &[RequestReport]) -> Vec<GapReport> {
        if let Some(o) = self.open.take() {
            if !o.actions.is_empty() || !o.decisions.is_empty() {
                let end = o.last_at;
                self.closed.push((o, None, end));
            }
        }
        let mut out = Vec::new();
        for (o, before, end_at) in &self.closed {
            if let Some(g) = self.gap_report(o, *before, *end_at, reports) {
                out.push(g);
            }
        }
        out
    }

    fn gap_report(&self, o: &Open, before: Option<usize>, end_at: u64, reports: &[RequestReport]) -> Option<GapReport> {
        let (lf, config) = o.figures.clone()?;
        let r0 = &reports[o.after];
        let usage: Option<&Usage> = r0.usage.as_ref();
        let one_hour = usage.and_then(|u| u.cache_write_1h_tokens).unwrap_or(0) > 0;
        let rules = &self.settings.cache_rules;
        let settings = |one_hour: bool| CacheSettings {
            provider: &config.provider,
            model: &config.model,
            config: Some(&config.extra),
            wrote_one_hour: one_hour,
        };
        let ttl_ms = rules.rule(&settings(one_hour)).ttl_ms;
        let anthropic = config.provider == "anthropic";
        let tier = if !anthropic {
            "default"
        } else if one_hour {
            "1h"
        } else {
            "5m"
        };
        let gap_ms = end_at.saturating_sub(o.start_at);
        let margin = o.margin_ms.unwrap_or(DEFAULT_MARGIN_MS);
        let acted = !o.actions.is_empty() || !o.decisions.is_empty();
        let idle = ttl_ms.is_some_and(|t| gap_ms > t.saturating_sub(margin.min(t / 2)));
        if !idle && !acted {
            return None;
        }
        let after_req = before.map(|i| &reports[i]);
        let expired = after_req.is_some_and(|r| r.causes.iter().any(|c| c.cause == Cause::Expiry));
        let count = |k: Kind| o.actions.iter().filter(|&&i| reports[i].kind == k).count() as u64;
        let price = self.settings.prices.as_ref().and_then(|t| t.price(&config.provider, &config.model));
        let cost = price.map(|_| {
            let actions: f64 = o.actions.iter().filter_map(|&i| reports[i].cost.as_ref()).map(|c| c.total).sum();
            let back = after_req.and_then(|r| r.cost.as_ref()).map_or(0.0, |c| c.total - c.output);
            GapCost { actions, return_: back, total: actions + back }
        });
        let (options, best) = match price {
            Some(p) => {
                let tiers = offered_tiers(&config.provider, p, |h| rules.rule(&settings(h)).ttl_ms);
                let figures = CacheFigures {
                    warm_tokens: lf.warm_tokens,
                    context_tokens: lf.context_tokens,
                    written_tokens: lf.written_tokens,
                    mean_written_tokens: lf.mean_written_tokens,
                    ttl_ms,
                    tier: tier.into(),
                    tiers,
                    tier_billing: TierBilling::Written,
                    rates: Rates::of(p, tier),
                    keepalive: lf.keepalive,
                    ping_output_tokens: o.ping_output.unwrap_or_else(|| keepalive_max_tokens(None, &config)),
                    margin_ms: margin,
                    compaction: lf.compaction.clone(),
                    // The per-gap counterfactuals price each action over the whole gap.
                    session_cost: None,
                    keepalive_budget: None,
                    keep_warm_tiers: true,
                    tier_before_pause: true,
                };
                let g = GapCosts::of(&figures, gap_ms);
                let best = g.best();
                (g.options.clone(), Some(best.label()))
            }
            None => (Vec::new(), None),
        };
        Some(GapReport {
            after: r0.id.clone(),
            before: after_req.map(|r| r.id.clone()),
            start_at: o.start_at,
            end_at,
            gap_ms,
            ttl_ms,
            tier: tier.into(),
            warm_tokens: lf.warm_tokens,
            context_tokens: lf.context_tokens,
            expired,
            keepalives: count(Kind::Keepalive),
            compactions: count(Kind::Compaction),
            decisions: o.decisions.clone(),
            cost,
            options,
            best,
        })
    }
}
