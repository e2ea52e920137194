//! The idle gaps of a timeline, priced (`llmsession explain --from claude-code|codex FILE`), in
//! the shape of `explain`'s own gap report ([`crate::explain::gaps::GapReport`]): for every gap
//! long enough for the cache clock to act (longer than the recorded TTL less the clock's
//! margin), how long it was, what the request after it cost as recorded (`cost.return`: its
//! prompt), what each option would have cost over it ([`crate::clock::GapCosts::of`]: let it
//! expire, keep it warm, compact before expiry, the other tier for the write before it), and,
//! beside what a transcript cannot have (`decisions`: the clock's recorded decisions, none),
//! what the online clock would have decided during it (`clock`: asked as `simulate` asks it,
//! right after the request before the gap and then at each `nextDecisionAt`, never told when
//! the host returns).
//!
//! The figures are those of the recorded cache: the warm prefix is the recorded request's
//! prompt, the TTL the recorded tier's (see [`super::simulate`] for the accounting).

use super::simulate::{prepare, Settings};
use super::Timeline;
use crate::clock::GapCosts;
use crate::error::Result;
use crate::explain::gaps::{GapCost, GapReport};
use serde::Serialize;

/// One decision the online clock would have taken during a gap.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulatedDecision {
    /// The time it is taken at (Unix ms).
    pub at: u64,
    /// `none`, `keep-warm`, `compact`, `let-expire` or `tier`.
    pub decision: String,
    /// With `tier`: the tier for the next write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The clock's reason, in words.
    pub reason: String,
}

/// One idle gap of a timeline (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineGap {
    /// The gap, as `explain` reports one (`after` and `before` are the timeline's 1-based
    /// request numbers).
    #[serde(flatten)]
    pub gap: GapReport,
    /// Where the request after the gap is in the source (`line 137`).
    pub source_at: String,
    /// What the online clock would have decided during it.
    pub clock: Vec<SimulatedDecision>,
}

/// The idle gaps of a timeline (see the module docs).
pub fn gap_report(t: &Timeline, settings: &Settings) -> Result<Vec<TimelineGap>> {
    let sim = prepare(t, settings)?;
    let states = sim.recorded_states();
    let mut out = Vec::new();
    let mut learned = Vec::new();
    let mut chosen = None;
    for (j, st) in states.iter().enumerate().take(sim.steps.len().saturating_sub(1)) {
        let (start, back) = (sim.steps[j].req.time, sim.steps[j + 1].req.time);
        let gap = back - start;
        let run = sim.clock_gap(j, st, true, &learned, &mut chosen);
        learned.push(gap);
        // Every option the provider offers, whatever the clock was offered then.
        let f = &sim.figures(j, st, true);
        let Some(ttl) = f.ttl_ms else { continue };
        if gap <= ttl - f.margin() {
            continue;
        }
        let next = &sim.steps[j + 1];
        let paid = next.price.cost(&next.req.usage);
        let costs = GapCosts::of(f, gap);
        let best = costs.best().label();
        out.push(TimelineGap {
            gap: GapReport {
                after: (j + 1).to_string(),
                before: Some((j + 2).to_string()),
                start_at: start,
                end_at: back,
                gap_ms: gap,
                ttl_ms: f.ttl_ms,
                tier: f.tier.clone(),
                warm_tokens: f.warm_tokens,
                context_tokens: f.context_tokens,
                expired: !next.rec_warm,
                keepalives: 0,
                compactions: 0,
                decisions: Vec::new(),
                cost: Some(GapCost { actions: 0.0, return_: paid.total - paid.output, total: paid.total - paid.output }),
                options: costs.options.clone(),
                best: Some(best),
            },
            source_at: next.req.at.clone(),
            clock: run
                .decisions
                .iter()
                .map(|d| SimulatedDecision {
                    at: d.at,
                    decision: d.decision.as_str().into(),
                    tier: d.tier.clone(),
                    reason: d.reason.clone(),
                })
                .collect(),
        });
    }
    Ok(out)
}
