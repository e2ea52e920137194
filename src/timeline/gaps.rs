//! The idle gaps of a timeline, priced (`llmsession explain --from claude-code|codex FILE`):
//! for every gap long enough for the cache clock to act (longer than the recorded TTL less the
//! clock's margin), how long it was, what the request after it cost as recorded, what each
//! option would have cost over it ([`GapCosts::of`]: let it expire, keep it warm, compact
//! before expiry, the longer tier for the write before it), and what the online clock decided
//! during it ([`decide`], asked right after the request before the gap and then at each
//! `nextDecisionAt`, never told when the host returns).
//!
//! The figures are those of the recorded cache: the warm prefix is the recorded request's
//! prompt, the TTL the recorded tier's (see [`super::simulate`] for the accounting).

use super::simulate::{prepare, Settings};
use super::Timeline;
use crate::clock::{decide, Action, GapCosts, Timing};
use crate::error::Result;
use serde::Serialize;

/// One of the clock's decisions during a gap.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapDecision {
    /// When, in ms after the request before the gap.
    pub after_ms: u64,
    /// What it decided (`none`, `keep-warm`, `compact`, `let-expire`, `tier`).
    pub decision: String,
    /// With `tier`: the tier for the next write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Its reason, in words.
    pub reason: String,
}

/// One idle gap, priced.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapReport {
    /// The request after the gap (1-based, in the timeline).
    pub request: usize,
    /// Where the request after the gap comes from in the source.
    pub at: String,
    /// The gap, ms.
    pub gap_ms: u64,
    /// The TTL in force (the recorded tier's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The tier in force.
    pub tier: String,
    /// The warm prefix before the gap (the request's prompt tokens).
    pub warm_tokens: u64,
    /// Whether the request after the gap found its prefix expired, as recorded.
    pub expired: bool,
    /// What the request after the gap cost, as recorded.
    pub paid: f64,
    /// What each option would have cost over the gap (the actions during it and the context
    /// of the request after it), the clairvoyant view.
    pub options: GapCosts,
    /// What the online clock decided during the gap, in order.
    pub clock: Vec<GapDecision>,
}

/// The idle gaps of a timeline (see the module docs).
pub fn gap_report(t: &Timeline, settings: &Settings) -> Result<Vec<GapReport>> {
    let sim = prepare(t, settings)?;
    let states = sim.recorded_states();
    let mut out = Vec::new();
    let mut learned = Vec::new();
    for j in 0..sim.steps.len().saturating_sub(1) {
        let (start, back) = (sim.steps[j].req.time, sim.steps[j + 1].req.time);
        let gap = back - start;
        let f = sim.figures(j, &states[j], true);
        let model = settings.options.return_model.model(&learned);
        learned.push(gap);
        let Some(ttl) = f.ttl_ms else { continue };
        if gap <= ttl - f.margin() {
            continue;
        }
        let mut timing = Timing { gap_start: start, touched_at: start, now: start };
        let mut clock = Vec::new();
        loop {
            let d = decide(&f, &timing, &model);
            if d.decision == Action::KeepWarm {
                timing.touched_at = timing.now;
            }
            let done = matches!(d.decision, Action::Compact | Action::LetExpire);
            clock.push(GapDecision {
                after_ms: timing.now - start,
                decision: d.decision.as_str().into(),
                tier: d.tier.clone(),
                reason: d.reason,
            });
            match d.next_decision_at {
                Some(n) if !done && n > timing.now && n < back => timing.now = n,
                _ => break,
            }
        }
        let next = &sim.steps[j + 1];
        out.push(GapReport {
            request: j + 2,
            at: next.req.at.clone(),
            gap_ms: gap,
            ttl_ms: f.ttl_ms,
            tier: f.tier.clone(),
            warm_tokens: f.warm_tokens,
            expired: !next.rec_warm,
            paid: next.price.cost(&next.req.usage).total,
            options: GapCosts::of(&f, gap),
            clock,
        });
    }
    Ok(out)
}
