//! What each option costs over one idle gap, from the figures of the cache at the last request
//! (see the module docs of [`crate::clock`] for the model and its assumptions).
//!
//! Everything here is a pure function of small plain structs: the agent's clock fills them from
//! its log, `explain` from a recorded log, `simulate` from any timeline.

use crate::prices::{Price, WritePrice};
use serde::{Deserialize, Serialize};

const M: f64 = 1_000_000.0;

/// Prices per million tokens, as the clock uses them: the host's price table for one model,
/// with the cache-write price of the tier in force ([`Rates::of`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rates {
    /// Uncached input.
    pub input: f64,
    /// Input read from the cache.
    pub read: f64,
    /// Input written to the cache at the tier in force.
    pub write: f64,
    /// Output.
    pub output: f64,
}

impl Rates {
    /// The rates of `price` with writes at `tier` (`"5m"`, `"1h"`, `"default"`:
    /// [`Price::write_rate`]).
    pub fn of(price: &Price, tier: &str) -> Rates {
        Rates { input: price.input, read: price.cached_input, write: price.write_rate(tier), output: price.output }
    }
}

/// A cache tier a provider offers for a write: its name (the price table's `cacheWrite` key),
/// how long a prefix written at it stays warm, and its write price per million tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tier {
    /// `"5m"`, `"1h"`, ...
    pub name: String,
    /// Its TTL in milliseconds.
    pub ttl_ms: u64,
    /// Its write price per million tokens.
    pub write: f64,
}

/// The tiers a provider offers for the next write, as every part of the clock prices them
/// (the agent's clock, `explain`, `simulate`): Anthropic's `5m` and `1h` (the TTL of each from
/// `ttl`, given whether the write is at the 1-hour tier), each only where the price table
/// names its write price (`cacheWrite: {"5m": ..., "1h": ...}`). The clock never guesses a
/// tier's price: a flat `cacheWrite`, or none, offers no choice, and neither does a table that
/// prices one tier only. Other providers offer none (their retention is a request option the
/// host sets, not a price the clock weighs).
pub fn offered_tiers(provider: &str, price: &Price, ttl: impl Fn(bool) -> Option<u64>) -> Vec<Tier> {
    let Some(WritePrice::ByTtl(by)) = &price.cache_write else { return Vec::new() };
    if provider != "anthropic" {
        return Vec::new();
    }
    let tiers: Vec<Tier> = [("5m", false), ("1h", true)]
        .iter()
        .filter_map(|(name, hour)| Some(Tier { name: (*name).into(), ttl_ms: ttl(*hour)?, write: *by.get(*name)? }))
        .collect();
    if tiers.len() < 2 {
        return Vec::new();
    }
    tiers
}

/// How a write at a longer tier is billed when the request read the rest of its prefix from
/// the cache (a pricing assumption the host can change: `tierBilling`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierBilling {
    /// The tokens the request reads stay at the read price, only the tokens it writes pay the
    /// longer tier's write price, and the whole prefix up to its last mark then lives for the
    /// longer TTL (Anthropic's billing of mixed TTLs, as its documentation describes it).
    #[default]
    Written,
    /// Pessimistic: moving to a longer tier writes the whole warm prefix again at that tier's
    /// price.
    Prefix,
}

/// What a compaction now would do, in tokens (see [`crate::clock`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionFigures {
    /// What the summarisation request reads from the cache: system, tools, session prefix and
    /// the region it summarises (the head of the history).
    pub read_tokens: u64,
    /// What it adds uncached: the instruction.
    pub instruction_tokens: u64,
    /// The summary it is expected to produce (output).
    pub summary_tokens: u64,
    /// What the compacted context shares with the summarisation request (system, tools,
    /// session prefix): read from the cache if the host returns while that is warm.
    pub head_tokens: u64,
    /// The context after the compaction: head, checkpoint, retained tail.
    pub compacted_tokens: u64,
    /// Whether the context is over the policy's threshold: a necessary compaction never waits.
    pub necessary: bool,
}

/// The cache at the last request, and what the clock may do about it: the inputs of every cost
/// formula ([`GapCosts::of`]) and of the online decision ([`crate::clock::decide`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheFigures {
    /// The prefix the provider holds after the last request, in its tokens (that request's
    /// prompt): what a warm return reads and an expired one writes again.
    pub warm_tokens: u64,
    /// The context the next request carries before the host's new input (the warm prefix, the
    /// reply and what was added since).
    pub context_tokens: u64,
    /// What the last request wrote to the cache.
    pub written_tokens: u64,
    /// What the session's requests wrote to the cache on average, the first one left out (it
    /// writes the session's head once): what a write at a longer tier pays its premium on, on
    /// every request the tier stays in force for. Absent before the second request (the last
    /// request's writes stand in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_written_tokens: Option<u64>,
    /// How long the cache stays warm after its last use: the TTL of the tier in force, or of the
    /// longer tier a keep-warm request was sent at since the last request
    /// ([`CacheFigures::kept_at`]); `None`: the provider documents none (nothing expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The tier in force (its name prices writes).
    pub tier: String,
    /// The tiers the provider offers for the next write, the one in force included (one or
    /// none: no tier choice).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<Tier>,
    /// How a longer-tier write after a hit is billed.
    #[serde(default)]
    pub tier_billing: TierBilling,
    /// Prices, writes at the tier in force.
    pub rates: Rates,
    /// Whether a keep-warm request can be sent (it replays the last conversation request).
    pub keepalive: bool,
    /// The output limit of a keep-warm request (the smallest the provider allows).
    pub ping_output_tokens: u64,
    /// How long before expiry the clock acts (and a keep-warm request is sent).
    pub margin_ms: u64,
    /// A compaction the clock may start, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionFigures>,
    /// What the session's conversation requests have cost so far at these prices: the base of
    /// the keep-warm budget. `None`: not known (no budget applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_cost: Option<f64>,
    /// The most the clock stakes on keeping one pause warm, as a share of `session_cost`
    /// (`keepWarmBudget`, default [`DEFAULT_KEEPALIVE_BUDGET`]); `None`: no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_budget: Option<f64>,
    /// Whether a keep-warm request may be sent at a longer tier of `tiers` than the one in
    /// force (its cache marks at that tier's TTL: [`CacheFigures::ping_cost_at`]). Figures
    /// recorded before the clock offered it lack it, and are decided again without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_warm_tiers: bool,
    /// Whether the next write may move to a cheaper tier before the session has paused
    /// ([`crate::clock::tier_costs`]: priced with the whole return model, within the keep-warm
    /// budget). Figures recorded before the clock did so lack it, and are decided again
    /// without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tier_before_pause: bool,
}

/// The default keep-warm budget: 5 % of what the session has cost so far, per pause. A keep-warm
/// request is a bet that the host comes back; the budget bounds what one pause can lose when it
/// does not (a session's end looks like any pause), at half the 10 % a policy may cost over
/// what a session paid (`docs/caching.md`, "The keep-warm budget").
pub const DEFAULT_KEEPALIVE_BUDGET: f64 = 0.05;

/// A keep-warm budget (`keepWarmBudget`) read at `path`: a non-negative share.
pub fn keepalive_budget(b: f64, path: &str) -> crate::error::Result<f64> {
    if b.is_finite() && b >= 0.0 {
        Ok(b)
    } else {
        Err(crate::error::Error::invalid(path, format!("must be a non-negative share of what the session has cost so far, got {b}")))
    }
}

fn cost(tokens: u64, per_million: f64) -> f64 {
    tokens as f64 * per_million / M
}

impl CacheFigures {
    /// The margin in force: `margin_ms`, at most half the TTL.
    pub fn margin(&self) -> u64 {
        match self.ttl_ms {
            Some(t) => self.margin_ms.min(t / 2),
            None => self.margin_ms,
        }
    }

    /// The time between two keep-warm requests: each is sent `margin` before the cache it
    /// refreshes expires, so `ttl - margin`.
    pub fn ping_period(&self) -> Option<u64> {
        self.ttl_ms.map(|t| t - self.margin())
    }

    /// The context beyond the warm prefix (the reply and what came after it), written at the
    /// return whatever the clock did (unless a compaction replaced it).
    fn delta_tokens(&self) -> u64 {
        self.context_tokens.saturating_sub(self.warm_tokens)
    }

    /// A keep-warm request: the warm prefix read, and its output limit.
    pub fn ping_cost(&self) -> f64 {
        cost(self.warm_tokens, self.rates.read) + cost(self.ping_output_tokens, self.rates.output)
    }

    /// A keep-warm request at tier `t`: what it reads and its output, as any keep-warm request
    /// (`written` billing: it writes nothing new, so a longer tier costs no premium), or the warm
    /// prefix written again at `t`'s price (`prefix` billing) when `t` is not the tier in force.
    pub fn ping_cost_at(&self, t: &Tier) -> f64 {
        match self.tier_billing {
            TierBilling::Prefix if t.name != self.tier => {
                cost(self.warm_tokens, t.write) + cost(self.ping_output_tokens, self.rates.output)
            }
            _ => self.ping_cost(),
        }
    }

    /// The figures after a keep-warm request at tier `t`: the prefix is warm for `t`'s TTL; the
    /// conversation's own writes stay at the tier in force (`tier`, their price unchanged).
    pub fn kept_at(&self, t: &Tier) -> CacheFigures {
        let mut g = self.clone();
        g.ttl_ms = Some(t.ttl_ms);
        g
    }

    /// The offered tier named `name`.
    pub fn tier_named(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    /// The tiers a keep-warm request may be sent at instead of the one in force: those of
    /// `tiers` with a longer TTL, when `keep_warm_tiers` allows it.
    pub fn longer_tiers(&self) -> impl Iterator<Item = (usize, &Tier)> {
        let ttl = self.ttl_ms.unwrap_or(u64::MAX);
        self.tiers.iter().enumerate().filter(move |(_, t)| self.keepalive && self.keep_warm_tiers && t.ttl_ms > ttl)
    }

    /// The context of the first request after a warm return: the prefix read, the rest written.
    pub fn warm_return(&self) -> f64 {
        cost(self.warm_tokens, self.rates.read) + cost(self.delta_tokens(), self.rates.write)
    }

    /// The same after expiry: the whole context written again.
    pub fn cold_return(&self) -> f64 {
        cost(self.warm_tokens, self.rates.write) + cost(self.delta_tokens(), self.rates.write)
    }

    /// The summarisation request of a compaction now: the region read from the cache, the
    /// instruction uncached, the summary as output.
    pub fn compaction_cost(&self) -> Option<f64> {
        let c = self.compaction.as_ref()?;
        Some(
            cost(c.read_tokens, self.rates.read) + cost(c.instruction_tokens, self.rates.input) + cost(c.summary_tokens, self.rates.output),
        )
    }

    /// The compacted context at the return: the head read if the summarisation request's cache
    /// is still warm, the rest written (`warm`), or all of it written (`!warm`).
    pub fn compacted_return(&self, warm: bool) -> Option<f64> {
        let c = self.compaction.as_ref()?;
        let head = if warm { c.head_tokens.min(c.compacted_tokens) } else { 0 };
        Some(cost(head, self.rates.read) + cost(c.compacted_tokens - head, self.rates.write))
    }

    /// What writing the last request at tier `t` would have cost more than it did (the premium
    /// of a longer tier), per `tier_billing`.
    pub fn tier_premium(&self, t: &Tier) -> f64 {
        let paid = cost(self.written_tokens, self.rates.write);
        match self.tier_billing {
            TierBilling::Written => cost(self.written_tokens, t.write) - paid,
            TierBilling::Prefix if t.name == self.tier => 0.0,
            TierBilling::Prefix => cost(self.warm_tokens.max(self.written_tokens), t.write) - paid,
        }
    }

    /// The return after expiry of a prefix written at tier `t`: written again at its price.
    pub fn cold_return_at(&self, t: &Tier) -> f64 {
        cost(self.warm_tokens, t.write) + cost(self.delta_tokens(), self.rates.write)
    }

    /// The number of keep-warm requests that bridge a gap of `gap_ms` (0 when the cache outlives
    /// it): the first is sent `margin` before expiry, each one refreshes the TTL.
    pub fn pings_for(&self, gap_ms: u64) -> u64 {
        match (self.ttl_ms, self.ping_period()) {
            (Some(t), Some(p)) if gap_ms > t => (gap_ms - t).div_ceil(p),
            _ => 0,
        }
    }

    /// The same when the first keep-warm request is sent at tier `t` (and the later ones, at
    /// `t` then in force, one of its periods apart).
    pub fn pings_for_at(&self, t: &Tier, gap_ms: u64) -> u64 {
        let (Some(ttl), Some(p)) = (self.ttl_ms, self.ping_period()) else { return 0 };
        if gap_ms <= ttl {
            return 0;
        }
        let kept = self.kept_at(t);
        let warm_until = p + t.ttl_ms;
        match kept.ping_period() {
            Some(q) if gap_ms > warm_until && q > 0 => 1 + (gap_ms - warm_until).div_ceil(q),
            _ => 1,
        }
    }

    /// What the keep-warm requests over a gap of `gap_ms` cost when the first is sent at tier
    /// `t` ([`CacheFigures::pings_for_at`]).
    pub fn keep_warm_cost_at(&self, t: &Tier, gap_ms: u64) -> f64 {
        match self.pings_for_at(t, gap_ms) {
            0 => 0.0,
            n => self.ping_cost_at(t) + (n - 1) as f64 * self.ping_cost(),
        }
    }
}

/// One option's cost over a gap whose length is known (clairvoyant).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionCost {
    /// `let-expire`, `keep-warm`, `compact` or `tier`.
    pub option: String,
    /// With `tier`: its name; with `keep-warm`, the tier of its first keep-warm request when
    /// that is not the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The cost: the actions taken during the gap and the context of the request after it.
    pub cost: f64,
    /// With `keep-warm`: the keep-warm requests it takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pings: Option<u64>,
}

/// An option or a decision of the clock as the reports name it: the name, and its tier when it
/// has one (`keep-warm`, `keep-warm 1h` for a keep-warm whose first request is sent at the longer
/// tier, `tier 1h`, `let-expire 1h` for the rewrite at the hour tier).
pub fn label(name: &str, tier: Option<&str>) -> String {
    match tier {
        Some(t) => format!("{name} {t}"),
        None => name.to_string(),
    }
}

impl OptionCost {
    /// Its name in a report ([`label`]).
    pub fn label(&self) -> String {
        label(&self.option, self.tier.as_deref())
    }
}

/// What each option costs over one gap of known length (clairvoyant): the counterfactuals
/// `explain` prices for every idle gap and `simulate`'s `optimal` policy chooses among.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapCosts {
    /// The gap, from the request that last used the cache to the next conversation request.
    pub gap_ms: u64,
    /// Every option, `let-expire` first.
    pub options: Vec<OptionCost>,
    /// The cheapest (the first of equals, in the order of `options`).
    pub best: usize,
}

impl GapCosts {
    /// The cost of each option over a gap of `gap_ms` after the request the figures describe:
    ///
    /// - `let-expire`: nothing is done; the return reads the warm prefix if the gap is within
    ///   the TTL, else writes it again ([`CacheFigures::warm_return`], [`CacheFigures::cold_return`]);
    /// - `keep-warm`: a keep-warm request `margin` before each expiry until the return
    ///   ([`CacheFigures::pings_for`]), then a warm return; with a `tier`, for each longer tier a
    ///   keep-warm request may be sent at ([`CacheFigures::longer_tiers`]), the same with the
    ///   first one sent at that tier ([`CacheFigures::pings_for_at`]);
    /// - `compact`: if the host is still away `margin` before expiry, the summarisation request
    ///   then, and the compacted context at the return (its head read if the return is within a
    ///   TTL of the compaction); if the host is back by then, nothing happens (a warm return);
    /// - `tier`, for each tier other than the one in force: the premium of the last write at
    ///   that tier, then a warm return if the gap is within that tier's TTL, else a rewrite at
    ///   its price.
    ///
    /// Without a TTL, only `let-expire` (always warm) is priced.
    pub fn of(f: &CacheFigures, gap_ms: u64) -> GapCosts {
        let mut options = Vec::new();
        let warm = f.ttl_ms.is_none_or(|t| gap_ms <= t);
        options.push(OptionCost {
            option: "let-expire".into(),
            tier: None,
            cost: if warm { f.warm_return() } else { f.cold_return() },
            pings: None,
        });
        if let Some(t) = f.ttl_ms {
            if f.keepalive {
                let n = f.pings_for(gap_ms);
                options.push(OptionCost {
                    option: "keep-warm".into(),
                    tier: None,
                    cost: n as f64 * f.ping_cost() + f.warm_return(),
                    pings: Some(n),
                });
                for (_, tier) in f.longer_tiers() {
                    let n = f.pings_for_at(tier, gap_ms);
                    options.push(OptionCost {
                        option: "keep-warm".into(),
                        tier: Some(tier.name.clone()),
                        cost: f.keep_warm_cost_at(tier, gap_ms) + f.warm_return(),
                        pings: Some(n),
                    });
                }
            }
            if let (Some(summary), Some(_)) = (f.compaction_cost(), f.compaction.as_ref()) {
                let at = t - f.margin();
                let cost = if gap_ms <= at {
                    f.warm_return()
                } else {
                    summary + f.compacted_return(gap_ms - at <= t).expect("compaction figures")
                };
                options.push(OptionCost { option: "compact".into(), tier: None, cost, pings: None });
            }
            for tier in f.tiers.iter().filter(|x| x.name != f.tier) {
                let back = if gap_ms <= tier.ttl_ms { f.warm_return() } else { f.cold_return_at(tier) };
                options.push(OptionCost {
                    option: "tier".into(),
                    tier: Some(tier.name.clone()),
                    cost: f.tier_premium(tier) + back,
                    pings: None,
                });
            }
        }
        let best = cheapest(options.iter().map(|o| o.cost));
        GapCosts { gap_ms, options, best }
    }

    /// The cheapest option.
    pub fn best(&self) -> &OptionCost {
        &self.options[self.best]
    }

    /// The option named `option` (and `tier`, for a tier).
    pub fn get(&self, option: &str) -> Option<&OptionCost> {
        self.options.iter().find(|o| o.option == option)
    }
}

/// Two costs closer than this (relative) are equal: the earlier option wins.
pub(crate) const EPSILON: f64 = 1e-9;

/// The index of the cheapest cost, the first of equals.
pub(crate) fn cheapest(costs: impl Iterator<Item = f64>) -> usize {
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in costs.enumerate() {
        match best {
            Some((_, b)) if c >= b - EPSILON * b.abs().max(1e-12) => {}
            _ => best = Some((i, c)),
        }
    }
    best.map_or(0, |b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Sonnet 4.5's published prices: input 3, read 0.3, 5-minute write 3.75, 1-hour 6,
    /// output 15 (per million).
    pub(crate) fn sonnet(warm: u64, context: u64) -> CacheFigures {
        CacheFigures {
            warm_tokens: warm,
            context_tokens: context,
            written_tokens: context - warm + 500,
            mean_written_tokens: None,
            ttl_ms: Some(300_000),
            tier: "5m".into(),
            tiers: vec![
                Tier { name: "5m".into(), ttl_ms: 300_000, write: 3.75 },
                Tier { name: "1h".into(), ttl_ms: 3_600_000, write: 6.0 },
            ],
            tier_billing: TierBilling::Written,
            rates: Rates { input: 3.0, read: 0.3, write: 3.75, output: 15.0 },
            keepalive: true,
            ping_output_tokens: 1,
            margin_ms: 30_000,
            compaction: None,
            session_cost: None,
            keepalive_budget: None,
            keep_warm_tiers: false,
            tier_before_pause: false,
        }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn each_option_is_priced_by_its_formula() {
        let f = sonnet(100_000, 102_000);
        close(f.ping_cost(), 100_000.0 * 0.3 / 1e6 + 15.0 / 1e6);
        close(f.warm_return(), 0.03 + 2_000.0 * 3.75 / 1e6);
        close(f.cold_return(), 102_000.0 * 3.75 / 1e6);
        // Within the TTL every option is a warm return (a tier still pays its premium).
        let g = GapCosts::of(&f, 200_000);
        close(g.get("let-expire").unwrap().cost, f.warm_return());
        close(g.get("keep-warm").unwrap().cost, f.warm_return());
        assert_eq!(g.best().option, "let-expire");
        // 20 minutes: pings at 4.5, 9, 13.5 and 18 minutes keep it warm (the last one until 23).
        let g = GapCosts::of(&f, 20 * 60_000);
        let kw = g.get("keep-warm").unwrap();
        assert_eq!(kw.pings, Some(4));
        close(kw.cost, 4.0 * f.ping_cost() + f.warm_return());
        close(g.get("let-expire").unwrap().cost, f.cold_return());
        let tier = g.get("tier").unwrap();
        assert_eq!(tier.tier.as_deref(), Some("1h"));
        close(tier.cost, f.written_tokens as f64 * (6.0 - 3.75) / 1e6 + f.warm_return());
        assert_eq!(g.best().option, "tier");
        // Two hours: beyond the hour tier, which then rewrites at its own price.
        let g = GapCosts::of(&f, 2 * 3_600_000);
        close(g.get("tier").unwrap().cost, f.written_tokens as f64 * 2.25 / 1e6 + 100_000.0 * 6.0 / 1e6 + 2_000.0 * 3.75 / 1e6);
        assert_eq!(g.best().option, "let-expire");
    }

    #[test]
    fn the_break_even_of_pings_is_the_rewrite_premium_over_a_ping() {
        // A rewrite costs (3.75 - 0.3) per million tokens more than a read; a ping 0.3 (and one
        // output token): about 11.5 pings pay for one rewrite.
        let f = sonnet(100_000, 100_000);
        let per_ping = f.ping_cost();
        let saved = f.cold_return() - f.warm_return();
        let n = (saved / per_ping).floor() as u64;
        assert_eq!(n, 11);
        let period = f.ping_period().unwrap();
        let last_paying = 300_000 + n * period; // 11 pings cover this gap
        let g = GapCosts::of(&f, last_paying);
        assert_eq!(g.get("keep-warm").unwrap().pings, Some(11));
        assert!(g.get("keep-warm").unwrap().cost < g.get("let-expire").unwrap().cost);
        let g = GapCosts::of(&f, last_paying + period);
        assert!(g.get("keep-warm").unwrap().cost > g.get("let-expire").unwrap().cost);
    }

    #[test]
    fn compaction_pays_at_a_long_gap_and_not_at_a_short_one() {
        let mut f = sonnet(200_000, 204_000);
        f.keepalive = false;
        f.tiers.clear();
        f.compaction = Some(CompactionFigures {
            read_tokens: 190_000,
            instruction_tokens: 400,
            summary_tokens: 6_000,
            head_tokens: 8_000,
            compacted_tokens: 40_000,
            necessary: false,
        });
        // Back within the margin point: no compaction ran.
        let g = GapCosts::of(&f, 250_000);
        close(g.get("compact").unwrap().cost, f.warm_return());
        // Back after 7 minutes: the summary was made at 4.5; its head is still warm.
        let g = GapCosts::of(&f, 7 * 60_000);
        let summary = 190_000.0 * 0.3 / 1e6 + 400.0 * 3.0 / 1e6 + 6_000.0 * 15.0 / 1e6;
        close(g.get("compact").unwrap().cost, summary + 8_000.0 * 0.3 / 1e6 + 32_000.0 * 3.75 / 1e6);
        assert_eq!(g.best().option, "compact");
        // An hour: everything written again, still cheaper than 204k.
        let g = GapCosts::of(&f, 3_600_000);
        close(g.get("compact").unwrap().cost, summary + 40_000.0 * 3.75 / 1e6);
        assert_eq!(g.best().option, "compact");
    }

    #[test]
    fn without_a_ttl_only_letting_it_be_is_priced() {
        let mut f = sonnet(10_000, 10_000);
        f.ttl_ms = None;
        let g = GapCosts::of(&f, 10 * 3_600_000);
        assert_eq!(g.options.len(), 1);
        close(g.best().cost, f.warm_return());
    }

    #[test]
    fn tiers_are_offered_only_where_the_price_table_names_them() {
        use crate::prices::PriceTable;
        let ttl = |hour: bool| Some(if hour { 3_600_000 } else { 300_000 });
        let table = |v: serde_json::Value| PriceTable::from_value(&v).unwrap();
        let both =
            table(serde_json::json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}));
        let tiers = offered_tiers("anthropic", both.price("anthropic", "m").unwrap(), ttl);
        assert_eq!(
            tiers.iter().map(|t| (t.name.as_str(), t.ttl_ms, t.write)).collect::<Vec<_>>(),
            [("5m", 300_000, 3.75), ("1h", 3_600_000, 6.0)]
        );
        // Another provider, a table without the hour's price, a flat price: no choice.
        assert!(offered_tiers("openai", both.price("anthropic", "m").unwrap(), ttl).is_empty());
        for v in [
            serde_json::json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75}, "output": 15}}),
            serde_json::json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15}}),
            serde_json::json!({"anthropic": {"input": 3, "cachedInput": 0.3, "output": 15}}),
        ] {
            let t = table(v);
            assert!(offered_tiers("anthropic", t.price("anthropic", "m").unwrap(), ttl).is_empty());
        }
        // A cache rule without a TTL for the hour tier offers none either.
        assert!(offered_tiers("anthropic", both.price("anthropic", "m").unwrap(), |h| (!h).then_some(300_000)).is_empty());
    }

    #[test]
    fn prefix_billing_charges_the_whole_prefix_for_a_longer_tier() {
        let mut f = sonnet(100_000, 100_000);
        f.written_tokens = 2_000;
        let hour = f.tiers[1].clone();
        close(f.tier_premium(&hour), 2_000.0 * 2.25 / 1e6);
        f.tier_billing = TierBilling::Prefix;
        close(f.tier_premium(&hour), 100_000.0 * 6.0 / 1e6 - 2_000.0 * 3.75 / 1e6);
        close(f.tier_premium(&f.tiers[0].clone()), 0.0);
    }
}
