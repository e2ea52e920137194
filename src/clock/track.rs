//! The cache clock of a session, from its log alone: the fold of the events the clock reads
//! ([`ClockTrack`]), the figures of the cache at the last request ([`log_figures`]), and the
//! checks `verify` makes of the clock's own records ([`LogCheck`]).
//!
//! Tokens are counted with the built-in estimate over the JSON texts a request carries,
//! calibrated by the provider's usage of the last request (its reported prompt over the
//! estimate of the same request), so the figures depend on the log only: `verify` recomputes
//! every decision the clock recorded.

use super::cost::{CacheFigures, CompactionFigures};
use super::decide::{decide, Timing};
use super::returns::ReturnModelSpec;
use crate::compaction::{checkpoint_text, select_region, INSTRUCTION};
use crate::error::{Error, ErrorKind, Result};
use crate::log::event::{types, Event};
use crate::log::{Derived, Log};
use crate::request::{routed_history, PrefixBytes, RequestWalk};
use crate::tokens::estimate_text;
use crate::types::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// What the clock keeps of a session's events (see the module docs). Fed every event in log
/// order ([`observe`](Self::observe)).
#[derive(Clone, Debug, Default)]
pub struct ClockTrack {
    /// The time of every conversation request.
    pub step_times: Vec<u64>,
    /// The latest conversation request: its `step/start` seq and time.
    pub last_step: Option<(u64, u64)>,
    /// When a request last used the cache: the conversation request, a keep-warm request that
    /// was answered, or a summarisation request of a compaction that landed after it.
    pub touched: Option<u64>,
    /// Whether a compaction landed since the latest conversation request (an idle compaction).
    pub compacted: bool,
    /// The clock's decisions since the last use of the cache: seq, decision, tier.
    pub decisions: Vec<(u64, String, Option<String>)>,
    /// The keep-warm request waiting for its answer: its seq, its time, and the tier it was
    /// sent at when the clock sent it at a longer one.
    pub open_keepalive: Option<(u64, u64, Option<String>)>,
    /// The tier of the latest answered keep-warm request since the latest conversation
    /// request, when it was sent at a longer tier: the cache is warm for that tier's TTL.
    pub kept_tier: Option<String>,
    /// The summarisation request of the open compaction: its time.
    compaction_at: Option<u64>,
    /// What the conversation requests after the first wrote to the cache (their answers'
    /// usage), and how many of them reported it.
    pub written_sum: u64,
    /// See `written_sum`.
    pub writes: u64,
    /// Whether the latest conversation request's answer was counted in `written_sum`.
    answered: bool,
    /// The longest time a keep-warm request of this session took to be answered (ms).
    pub keepalive_round_trip: Option<u64>,
    /// The keep-warm requests sent since the latest conversation request.
    pub keepalives_since_step: u64,
    /// What the conversation requests' answers were billed for, summed (the base of the
    /// keep-warm budget: [`CacheFigures::session_cost`] at the host's prices).
    pub billed: Usage,
    /// The seq of the next event to observe.
    pub folded: u64,
}

impl ClockTrack {
    /// Folds one event (the next one of the log).
    pub fn observe(&mut self, ev: &Event) {
        self.folded = ev.seq + 1;
        match ev.ty.as_str() {
            types::STEP_START => {
                self.step_times.push(ev.time);
                self.last_step = Some((ev.seq, ev.time));
                self.touched = Some(ev.time);
                self.compacted = false;
                self.decisions.clear();
                self.open_keepalive = None;
                self.kept_tier = None;
                self.answered = false;
                self.keepalives_since_step = 0;
            }
            types::ASSISTANT_MESSAGE => {
                let usage = ev.data.get("usage").and_then(|u| Usage::from_value(u, "").ok());
                if let Some(u) = usage.filter(|_| !self.answered && self.last_step.is_some()) {
                    self.answered = true;
                    add_usage(&mut self.billed, &u);
                    if self.step_times.len() > 1 {
                        self.written_sum += written_of(&u);
                        self.writes += 1;
                    }
                }
            }
            types::CLOCK_KEEPALIVE => {
                self.open_keepalive = Some((ev.seq, ev.time, ev.data.get("tier").and_then(Value::as_str).map(str::to_string)));
                self.keepalives_since_step += 1;
            }
            types::CLOCK_KEEPALIVE_END => {
                if let Some((_, at, tier)) = self.open_keepalive.take() {
                    if ev.data.get("outcome").and_then(Value::as_str) == Some("response") {
                        let trip = ev.time.saturating_sub(at);
                        self.keepalive_round_trip = Some(self.keepalive_round_trip.map_or(trip, |t| t.max(trip)));
                        self.touched = Some(at);
                        self.decisions.clear();
                        if tier.is_some() {
                            self.kept_tier = tier;
                        }
                    }
                }
            }
            types::COMPACTION_START => {
                self.open_keepalive = None;
                self.compaction_at = ev.data.get("requestDigest").map(|_| ev.time);
            }
            types::COMPACTION_END => {
                if let Some(at) = self.compaction_at.take() {
                    if ev.data.get("outcome").and_then(Value::as_str) == Some("landed") && self.last_step.is_some() {
                        self.touched = Some(at);
                        self.compacted = true;
                        self.decisions.clear();
                        self.kept_tier = None;
                    }
                }
            }
            types::CLOCK_DECISION => {
                let s = |k: &str| ev.data.get(k).and_then(Value::as_str).map(str::to_string);
                self.decisions.push((ev.seq, s("decision").unwrap_or_default(), s("tier")));
            }
            _ => {}
        }
    }

    /// Folds the events of `log` not observed yet. Only lines that may matter are parsed (the
    /// usage of the last answer is the log state's). A log opened from a checkpoint holds the
    /// lines from it on: the older ones are folded first ([`fold_line`](Self::fold_line), what
    /// the session's `catch_up_clock` does).
    pub fn catch_up(&mut self, log: &Log) {
        for seq in self.folded.max(log.base())..log.next_seq() {
            if let Some(line) = log.line(seq) {
                self.fold_line(seq, line);
            }
        }
    }

    /// Folds event `seq` given as its stored line (the next one to observe), parsing it only
    /// when its type may matter.
    pub fn fold_line(&mut self, seq: u64, line: &str) {
        const TYPES: [&str; 7] = [
            "\"type\":\"step/start\"",
            "\"type\":\"assistant/message\"",
            "\"type\":\"clock/keepalive\"",
            "\"type\":\"clock/keepalive-end\"",
            "\"type\":\"compaction/start\"",
            "\"type\":\"compaction/end\"",
            "\"type\":\"clock/decision\"",
        ];
        if TYPES.iter().any(|t| line.contains(t)) {
            if let Ok(ev) = Event::from_json(line) {
                self.observe(&ev);
            }
        }
        self.folded = seq + 1;
    }

    /// What the requests after the first wrote on average ([`CacheFigures::mean_written_tokens`]).
    pub fn mean_written(&self) -> Option<u64> {
        (self.writes > 0).then(|| self.written_sum / self.writes)
    }

    /// How long before expiry the clock acts when the host gives no `marginMs`: the time a
    /// keep-warm or summarisation request needs to reach the provider's cache (it reads the
    /// prefix when it starts), at least [`super::DEFAULT_MARGIN_MS`] and at least the longest
    /// round trip of this session's keep-warm requests (an answer comes after the read).
    pub fn lead_ms(&self) -> u64 {
        self.keepalive_round_trip.map_or(super::DEFAULT_MARGIN_MS, |t| t.max(super::DEFAULT_MARGIN_MS))
    }

    /// When the clock is asked at `now`: the gap from the latest conversation request, the
    /// cache's last use, and what this pause has staked in keep-warm requests.
    pub fn timing(&self, now: u64) -> Timing {
        Timing {
            gap_start: self.last_step.map_or(0, |s| s.1),
            touched_at: self.touched.unwrap_or(0),
            now,
            pings: self.keepalives_since_step,
        }
    }

    /// The session's gaps so far: between consecutive conversation requests, in ms.
    pub fn gaps(&self) -> Vec<u64> {
        self.step_times.windows(2).map(|w| w[1].saturating_sub(w[0])).collect()
    }

    /// The tier of the clock's last decision since the cache was last used, when it was to keep
    /// warm at a longer tier: the tier a keep-warm request is sent at.
    pub fn keep_warm_tier(&self) -> Option<&str> {
        match self.decisions.last() {
            Some((_, d, Some(t))) if d == "keep-warm" => Some(t),
            _ => None,
        }
    }

    /// The decision the clock recorded since the cache was last used, if it was `decision`
    /// (with `tier`): its seq.
    pub fn recorded(&self, decision: &str, tier: Option<&str>) -> Option<u64> {
        self.decisions.iter().rev().find(|(_, d, t)| d == decision && t.as_deref() == tier).map(|(s, _, _)| *s)
    }
}

/// The compaction settings the clock prices an idle compaction with (recorded with every
/// decision, so `verify` prices it again). Token figures are in the built-in estimate's tokens,
/// as the pressure gate counts with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionParams {
    /// The policy's retained tail, in tokens.
    pub retained_tokens: u64,
    /// The policy's summary budget.
    pub summary_max_tokens: u64,
    /// The policy's threshold, in tokens: above it a compaction is necessary.
    pub threshold_tokens: u64,
    /// Below this context an advisable compaction is not offered.
    pub min_context_tokens: u64,
    /// The expected summary, as a share of the region it replaces.
    pub summary_ratio: f64,
}

/// The figures of the cache that the log alone gives (the rest come from the host: prices,
/// the cache rule, the margin).
#[derive(Clone, Debug, PartialEq)]
pub struct LogFigures {
    /// The warm prefix (see [`CacheFigures::warm_tokens`]).
    pub warm_tokens: u64,
    /// The context (see [`CacheFigures::context_tokens`]).
    pub context_tokens: u64,
    /// What the last request wrote.
    pub written_tokens: u64,
    /// What the requests after the first wrote on average (see [`CacheFigures::mean_written_tokens`]).
    pub mean_written_tokens: Option<u64>,
    /// Whether the last conversation request can be sent again as a keep-warm request (no
    /// compaction rewrote its history since).
    pub keepalive: bool,
    /// An idle compaction's figures, with `params`.
    pub compaction: Option<CompactionFigures>,
    /// The latest conversation request's `step/start` seq.
    pub routed: u64,
    /// The provider's tokens per estimated token (the calibration of every figure).
    pub scale: f64,
}

/// What a request wrote to the cache: its reported writes, else (a provider that reports none)
/// its prompt less what it read.
fn written_of(u: &Usage) -> u64 {
    u.cache_write_tokens.unwrap_or_else(|| u.prompt_tokens().saturating_sub(u.cache_read_tokens.unwrap_or(0)))
}

fn estimate_all<'a>(texts: impl Iterator<Item = &'a str>) -> u64 {
    texts.map(estimate_text).sum()
}

fn scaled(k: f64, tokens: u64) -> u64 {
    (k * tokens as f64).round() as u64
}

/// The figures of the cache after the latest conversation request, from the log and its
/// clock track; `None` before the first request. `params`: the compaction the clock may price.
pub fn log_figures(log: &Log, track: &ClockTrack, params: Option<&CompactionParams>) -> Option<LogFigures> {
    let (routed, _) = track.last_step?;
    let header = log.state().headers.current()?;
    let prefix = PrefixBytes::of(header.message_prefix.as_ref());
    let tools = serde_json::to_string(header.tools_slice()).expect("tools serialise");
    let head_est = estimate_text(header.system_str()) + if header.tools_slice().is_empty() { 0 } else { estimate_text(&tools) };
    let head_est = head_est + estimate_all(prefix.messages.iter().map(|m| &**m));
    let entries: &[Arc<Derived>] = log.history().entries();
    let routed_entries = routed_history(log, routed);
    let routed_est = head_est + routed_entries.map_or(0, |r| estimate_all(r.iter().map(|d| d.json.as_str())));
    // The usage of the answer to that request (the latest assistant message with usage, when it
    // came after it).
    let usage = log.state().last_usage.as_ref().filter(|(seq, _)| *seq > routed).map(|(_, u)| u);
    // Calibration: the provider's tokens per estimated token of the last request.
    let (warm, k) = match usage {
        Some(u) if u.prompt_tokens() > 0 && routed_est > 0 && routed_entries.is_some() => {
            (u.prompt_tokens(), u.prompt_tokens() as f64 / routed_est as f64)
        }
        Some(u) if u.prompt_tokens() > 0 => (u.prompt_tokens(), 1.0),
        _ => (routed_est, 1.0),
    };
    let per_entry: Vec<u64> = entries.iter().map(|d| estimate_text(d.json.as_str())).collect();
    let context = scaled(k, head_est + per_entry.iter().sum::<u64>());
    if track.compacted {
        // After an idle compaction the next request reads only the head the summarisation
        // request shared with it.
        return Some(LogFigures {
            warm_tokens: scaled(k, head_est),
            context_tokens: context,
            written_tokens: 0,
            mean_written_tokens: track.mean_written(),
            keepalive: false,
            compaction: None,
            routed,
            scale: k,
        });
    }
    let context = context.max(warm);
    let written = usage.map_or(warm, written_of);
    let compaction = params.and_then(|p| {
        let necessary = context > p.threshold_tokens;
        if !necessary && context < p.min_context_tokens {
            return None;
        }
        let region = select_region(entries, &per_entry, p.retained_tokens)?;
        let (mut cached, mut fresh) = (0u64, 0u64);
        for i in region.start..=region.end {
            if entries[i].seq < routed {
                cached += per_entry[i];
            } else {
                fresh += per_entry[i];
            }
        }
        let region_tokens = scaled(k, cached + fresh);
        let summary = ((p.summary_ratio * region_tokens as f64).ceil() as u64).min(p.summary_max_tokens);
        let tail: u64 = per_entry[region.end + 1..].iter().sum();
        Some(CompactionFigures {
            read_tokens: scaled(k, head_est + cached),
            instruction_tokens: estimate_text(INSTRUCTION) + 8 + scaled(k, fresh),
            summary_tokens: summary,
            head_tokens: scaled(k, head_est),
            compacted_tokens: scaled(k, head_est) + summary + estimate_text(&checkpoint_text("")) + scaled(k, tail),
            necessary,
        })
    });
    Some(LogFigures {
        warm_tokens: warm,
        context_tokens: context,
        written_tokens: written,
        mean_written_tokens: track.mean_written(),
        keepalive: routed_entries.is_some(),
        compaction,
        routed,
        scale: k,
    })
}

/// What `verify` checks of the clock's records, walking the log (see [`crate::request`]'s
/// `verify`): a keep-warm answer names the keep-warm request waiting for it, and every decision
/// is computed again from the log and the host's inputs it recorded, and must come out the
/// same.
#[derive(Debug, Default)]
pub struct LogCheck {
    track: ClockTrack,
}

fn differs(ev: &Event, what: String) -> Error {
    Error::new(ErrorKind::Reconstruction, format!("clock/decision at seq {}: {what}", ev.seq)).with("seq", ev.seq)
}

impl LogCheck {
    /// Checks `ev` against the log walked so far (before `ev` is applied to the walk), then
    /// observes it.
    pub fn check(&mut self, ev: &Event, walk: &RequestWalk<'_>) -> Result<()> {
        match ev.ty.as_str() {
            types::CLOCK_KEEPALIVE_END => {
                let request = ev.data.get("request").and_then(Value::as_u64).unwrap_or(u64::MAX);
                if self.track.open_keepalive.as_ref().map(|k| k.0) != Some(request) {
                    return Err(Error::new(
                        ErrorKind::Reconstruction,
                        format!("clock/keepalive-end at seq {}: it answers seq {request}, which is not a keep-warm request waiting for its answer", ev.seq),
                    )
                    .with("seq", ev.seq));
                }
            }
            types::CLOCK_DECISION => self.check_decision(ev, walk.log())?,
            types::CLOCK_KEEPALIVE => {
                // A keep-warm request at a longer tier is sent on the clock's decision to keep
                // warm at that tier (the last one recorded since the cache was used).
                if let Some(tier) = ev.data.get("tier").and_then(Value::as_str) {
                    if self.track.keep_warm_tier() != Some(tier) {
                        return Err(Error::new(
                            ErrorKind::Reconstruction,
                            format!(
                                "clock/keepalive at seq {}: it was sent at the {tier} tier, but the clock's last decision since the cache was used is not to keep warm at that tier",
                                ev.seq
                            ),
                        )
                        .with("seq", ev.seq));
                    }
                }
            }
            types::COMPACTION_START if ev.data.get("trigger").and_then(Value::as_str) == Some("idle") => {
                let named = ev.data.get("decision").and_then(Value::as_u64);
                let last = self.track.decisions.last().filter(|d| d.1 == "compact").map(|d| d.0);
                if named.is_none() || named != last {
                    return Err(Error::new(
                        ErrorKind::Reconstruction,
                        format!(
                            "compaction at seq {}: an idle compaction follows the clock's decision to compact, but {}",
                            ev.seq,
                            match (named, last) {
                                (None, _) => "it names none".to_string(),
                                (Some(n), None) =>
                                    format!("it names seq {n} and the clock's last decision since the cache was used is not to compact"),
                                (Some(n), Some(l)) => format!("it names seq {n}, not the decision at seq {l}"),
                            }
                        ),
                    )
                    .with("seq", ev.seq));
                }
            }
            _ => {}
        }
        self.track.observe(ev);
        Ok(())
    }

    fn check_decision(&self, ev: &Event, log: &Log) -> Result<()> {
        let d = &ev.data;
        let Some(recorded) = d.get("figures") else { return Ok(()) };
        let figures: CacheFigures =
            serde_json::from_value(recorded.clone()).map_err(|e| differs(ev, format!("its figures do not read: {e}")))?;
        let params: Option<CompactionParams> = match d.get("compactionPolicy") {
            None => None,
            Some(p) => {
                Some(serde_json::from_value(p.clone()).map_err(|e| differs(ev, format!("its compactionPolicy does not read: {e}")))?)
            }
        };
        let spec = match d.get("returnModel") {
            None => ReturnModelSpec::default(),
            Some(m) => ReturnModelSpec::from_value(m, "data.returnModel").map_err(|e| differs(ev, e.message().to_string()))?,
        };
        let at = d.get("at").and_then(Value::as_u64).unwrap_or(0);
        let log_fig =
            log_figures(log, &self.track, params.as_ref()).ok_or_else(|| differs(ev, "it was recorded before any request".into()))?;
        let check = |name: &str, got: u64, want: u64| -> Result<()> {
            if got != want {
                return Err(differs(ev, format!("{name} is {want} by the log, {got} recorded")));
            }
            Ok(())
        };
        check("warmTokens", figures.warm_tokens, log_fig.warm_tokens)?;
        check("contextTokens", figures.context_tokens, log_fig.context_tokens)?;
        check("writtenTokens", figures.written_tokens, log_fig.written_tokens)?;
        if let Some(m) = figures.mean_written_tokens {
            check("meanWrittenTokens", m, log_fig.mean_written_tokens.unwrap_or(0))?;
        }
        if d.get("marginFrom").and_then(Value::as_str) == Some("log") {
            check("marginMs", figures.margin_ms, self.track.lead_ms())?;
        }
        if figures.keepalive && !log_fig.keepalive {
            return Err(differs(ev, "it offers a keep-warm request, but a compaction rewrote the history since the last request".into()));
        }
        if figures.compaction.is_some() && figures.compaction != log_fig.compaction {
            return Err(differs(ev, "its compaction figures differ from the log's".into()));
        }
        let timing = self.track.timing(at);
        let mut want = serde_json::to_value(timing).expect("timing serialises");
        if let (Some(w), Some(t)) = (want.as_object_mut(), d.get("timing")) {
            // A decision recorded before the keep-warm budget has no `pings` (nor a budget in
            // its figures, so the count does not enter its decision).
            if t.get("pings").is_none() && figures.keepalive_budget.is_none() {
                w.remove("pings");
            }
        }
        if d.get("timing").is_some_and(|t| *t != want) {
            return Err(differs(ev, "its timing differs from the log's (the times of the requests before it)".into()));
        }
        let decision = decide(&figures, &timing, &spec.model(&self.track.gaps()));
        let again = serde_json::to_value(&decision).expect("a decision serialises");
        for key in ["decision", "tier", "nextDecisionAt", "warmUntil", "options"] {
            if again.get(key) != d.get(key) {
                return Err(differs(
                    ev,
                    format!(
                        "decided again from the log, its {key} is {}, recorded {}",
                        again.get(key).map_or("absent".into(), Value::to_string),
                        d.get(key).map_or("absent".into(), Value::to_string)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Adds `u`'s billed tokens to `sum` (input, output, cache reads and writes, writes by tier).
fn add_usage(sum: &mut Usage, u: &Usage) {
    let add = |a: &mut Option<u64>, b: Option<u64>| {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0) + b);
        }
    };
    sum.input_tokens += u.input_tokens;
    sum.output_tokens += u.output_tokens;
    add(&mut sum.cache_read_tokens, u.cache_read_tokens);
    add(&mut sum.cache_write_tokens, u.cache_write_tokens);
    add(&mut sum.cache_write_5m_tokens, u.cache_write_5m_tokens);
    add(&mut sum.cache_write_1h_tokens, u.cache_write_1h_tokens);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, time: u64, ty: &str, data: Value) -> Event {
        Event { ty: ty.into(), seq, time, data, surface_op: None, sources: None }
    }

    fn usage(read: u64, write: u64) -> Value {
        json!({"usage": {"inputTokens": 4, "outputTokens": 10, "cacheReadTokens": read, "cacheWriteTokens": write}})
    }

    #[test]
    fn the_track_learns_the_mean_write_and_the_keep_warm_round_trip() {
        let mut t = ClockTrack::default();
        assert_eq!((t.mean_written(), t.lead_ms()), (None, crate::clock::DEFAULT_MARGIN_MS));
        // The first request writes the head; only the requests after it count.
        t.observe(&ev(0, 1_000, types::STEP_START, json!({})));
        t.observe(&ev(1, 2_000, types::ASSISTANT_MESSAGE, usage(0, 20_000)));
        assert_eq!(t.mean_written(), None);
        t.observe(&ev(2, 3_000, types::STEP_START, json!({})));
        t.observe(&ev(3, 4_000, types::ASSISTANT_MESSAGE, usage(20_000, 1_000)));
        t.observe(&ev(4, 5_000, types::STEP_START, json!({})));
        t.observe(&ev(5, 6_000, types::ASSISTANT_MESSAGE, usage(21_000, 3_000)));
        // A second answer to the same request (a continuation) is not a second write.
        t.observe(&ev(6, 6_500, types::ASSISTANT_MESSAGE, usage(24_000, 9_000)));
        assert_eq!(t.mean_written(), Some(2_000));
        // A keep-warm request answered in 14 seconds: the clock acts 14 seconds before expiry.
        t.observe(&ev(7, 300_000, types::CLOCK_KEEPALIVE, json!({})));
        t.observe(&ev(8, 314_000, types::CLOCK_KEEPALIVE_END, json!({"request": 7, "outcome": "response"})));
        assert_eq!(t.lead_ms(), 14_000);
        // A faster one does not lower it; an error does not count.
        t.observe(&ev(9, 600_000, types::CLOCK_KEEPALIVE, json!({})));
        t.observe(&ev(10, 601_000, types::CLOCK_KEEPALIVE_END, json!({"request": 9, "outcome": "response"})));
        t.observe(&ev(11, 900_000, types::CLOCK_KEEPALIVE, json!({})));
        t.observe(&ev(12, 990_000, types::CLOCK_KEEPALIVE_END, json!({"request": 11, "outcome": "error"})));
        assert_eq!(t.lead_ms(), 14_000);
    }
}
