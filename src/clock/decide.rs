//! The online decision: what to do now about a warm cache, under a return-time model, without
//! knowing when the host returns (see [`crate::clock`] for the model written down).

use super::cost::{cheapest, CacheFigures, Tier};
use super::returns::ReturnModel;
use serde::Serialize;

/// When the decision is asked for, and what the times of the last requests were (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// The last conversation request: the host's gap is measured from it.
    pub gap_start: u64,
    /// The last request that used the cache (the conversation request, a keep-warm request or a
    /// summarisation request after it): the TTL runs from it.
    pub touched_at: u64,
    /// Now.
    pub now: u64,
    /// The keep-warm requests sent since `gap_start` (what this pause has staked so far).
    #[serde(default, skip_serializing_if = "crate::types::is_zero")]
    pub pings: u64,
}

/// What the clock decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Nothing to do now (warm and not yet due, expired, or no TTL).
    None,
    /// Compact now, while the region's prefix is warm.
    Compact,
    /// Send a keep-warm request now.
    KeepWarm,
    /// Let the cache expire: do nothing more until the next request.
    LetExpire,
    /// Write the next request at another tier (`Decision::tier`).
    Tier,
}

impl Action {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Compact => "compact",
            Action::KeepWarm => "keep-warm",
            Action::LetExpire => "let-expire",
            Action::Tier => "tier",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Action> {
        [Action::None, Action::Compact, Action::KeepWarm, Action::LetExpire, Action::Tier].into_iter().find(|a| a.as_str() == s)
    }
}

/// One option's expected cost under the return-time model.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Expected {
    /// `let-expire`, `keep-warm`, `compact` or `tier`.
    pub option: String,
    /// With `tier`: its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The expected cost: the actions taken until the host returns and the context of its
    /// first request, conditional on the host being away until now.
    pub expected_cost: f64,
    /// With `keep-warm`: the expected number of keep-warm requests (this one and the later
    /// ones the clock would send).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_pings: Option<f64>,
}

/// The break-evens the reason names.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakEven {
    /// How many keep-warm requests cost as much as one rewrite after expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pings: Option<f64>,
    /// The longest absence that many keep-warm requests bridge (ms after the last use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_warm_ms: Option<u64>,
    /// The probability of a return after expiry above which compacting now pays.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact_probability: Option<f64>,
}

/// The clock's answer: one decision, why, the expected cost of each option, and when to ask
/// again.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// What to do now.
    pub decision: Action,
    /// With `tier`: the tier for the next write; with `let-expire`, the tier for the rewrite
    /// after expiry when it is not the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Why, in words: the break-even, the probability of the host's return that decides it,
    /// the expected cost of each option.
    pub reason: String,
    /// The time it was decided for.
    pub at: u64,
    /// Until when the cache is warm (absent without a TTL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_until: Option<u64>,
    /// When to ask again; absent: nothing to decide before the next request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_decision_at: Option<u64>,
    /// The probability that the host, away until now, returns while the cache is warm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_probability: Option<f64>,
    /// Every option the clock weighed, with its expected cost.
    pub options: Vec<Expected>,
    /// The break-evens.
    pub break_even: BreakEven,
    /// Where the return-time model comes from (`the default prior`, `4 gaps of this session +
    /// the default prior`, `the host's distribution`).
    pub returns: String,
}

/// The conditional distribution of the remaining absence, on a time axis that starts at the
/// first decision point `d0`: `pre` is the weight of returns before `d0` (warm, nothing done),
/// `points` those after it (offset in ms, weight), `never` the weight of never returning.
struct Remaining {
    pre: f64,
    points: Vec<(u64, f64)>,
    never: f64,
    /// suffix[i]: the weight of points[i..] plus never.
    suffix: Vec<f64>,
}

impl Remaining {
    fn new(model: &ReturnModel, away: u64, until_d0: u64) -> Remaining {
        let mut pre = 0.0;
        let mut points = Vec::new();
        for &(g, w) in &model.points {
            if g <= away {
                continue;
            }
            let r = g - away;
            if r <= until_d0 {
                pre += w;
            } else {
                points.push((r - until_d0, w));
            }
        }
        let mut suffix = vec![0.0; points.len() + 1];
        suffix[points.len()] = model.never_returns;
        for i in (0..points.len()).rev() {
            suffix[i] = suffix[i + 1] + points[i].1;
        }
        Remaining { pre, points, never: model.never_returns, suffix }
    }

    /// The first point index with offset > t.
    fn after(&self, t: u64) -> usize {
        self.points.partition_point(|p| p.0 <= t)
    }

    /// The weight of returns in (a, b] (offsets), and of those after b (never included).
    fn split(&self, a: u64, b: u64) -> (f64, f64) {
        let (i, j) = (self.after(a), self.after(b));
        (self.suffix[i] - self.suffix[j], self.suffix[j])
    }

    fn mass_after(&self, t: u64) -> f64 {
        self.suffix[self.after(t)]
    }

    /// The same returns on a time axis that starts at `origin` (offsets on this one): those in
    /// (`from`, `origin`] become its `pre`, the later ones its points.
    fn shifted(&self, from: u64, origin: u64) -> Remaining {
        let (pre, _) = self.split(from, origin);
        let points: Vec<(u64, f64)> = self.points[self.after(origin)..].iter().map(|&(r, w)| (r - origin, w)).collect();
        let mut suffix = vec![0.0; points.len() + 1];
        suffix[points.len()] = self.never;
        for i in (0..points.len()).rev() {
            suffix[i] = suffix[i + 1] + points[i].1;
        }
        Remaining { pre, points, never: self.never, suffix }
    }
}

/// The value of each option at decision point k of the dynamic programme (all conditional on
/// the host being away at that point).
#[derive(Clone, Copy, Debug)]
struct Values {
    expire: f64,
    ping: Option<f64>,
    /// A keep-warm request at a longer tier: its value, the tier's index in `tiers`, and the
    /// expected number of keep-warm requests from this one on.
    ping_at: Option<(f64, usize, f64)>,
    compact: Option<f64>,
    /// The expected number of pings from this point on, following the best choice (at point
    /// 0, as [`solve`] returns it: the keep-warm option's).
    pings: f64,
    /// The same following the best choice, at point 0 too.
    best_pings: f64,
    best: f64,
}

/// Solves the optimal-stopping programme from decision point 0 (at `d0`; the cache expires
/// `x0` after it): at each point, let it expire, compact, or ping (then decide again one ping
/// period later, where the cache expires `margin` after the point), or ping at a longer tier
/// (`CacheFigures::longer_tiers`: then decide again one of that tier's periods later, by the
/// same programme at that tier). Point `k` is reached by pinging at every point before it, so
/// with a `stake` (what the keep-warm budget leaves this pause, in money) an action is offered
/// at point `k` only while the `k` pings before it and the action itself fit in it: a ping
/// costs `ping`, a compaction its summarisation request. Returns the values at point 0, where
/// `pings` is the keep-warm option's.
fn solve(f: &CacheFigures, rem: &Remaining, x0: u64, stake: Option<f64>) -> Values {
    let ttl = f.ttl_ms.expect("solve needs a TTL");
    let period = f.ping_period().expect("a TTL");
    let margin = f.margin();
    let (warm, cold, ping) = (f.warm_return(), f.cold_return(), f.ping_cost());
    let summary = f.compaction_cost();
    let fits = |spent: f64| stake.is_none_or(|s| spent <= s * (1.0 + 1e-12));
    // The last point with a finite return after it: beyond, only `never` remains and letting it
    // expire costs nothing.
    let last = rem.points.last().map_or(0, |p| p.0);
    let k_max = (last / period + 1).min(1_000_000);
    let mut next: Option<(Values, f64)> = None; // values at k+1 and its mass
    let mut at0 = None;
    for k in (0..=k_max).rev() {
        let t = k * period;
        let x = if k == 0 { x0 } else { margin };
        let mass = rem.mass_after(t);
        let (in_warm, after) = rem.split(t, t + x);
        let expire = if mass > 0.0 { (in_warm * warm + (after - rem.never) * cold) / mass } else { 0.0 };
        let compact = summary.filter(|s| fits(k as f64 * ping + s)).map(|s| {
            let (head_warm, head_cold) = rem.split(t, t + ttl);
            let w = f.compacted_return(true).expect("figures");
            let c = f.compacted_return(false).expect("figures");
            s + if mass > 0.0 { (head_warm * w + (head_cold - rem.never) * c) / mass } else { 0.0 }
        });
        let ping_value = (f.keepalive && fits((k + 1) as f64 * ping)).then(|| {
            let (within, _) = rem.split(t, t + period);
            let (cont, cont_mass) = next.map_or((0.0, 0.0), |(v, m)| (v.best, m));
            ping + if mass > 0.0 { (within * warm + cont_mass * cont) / mass } else { 0.0 }
        });
        // At a longer tier: warm until that tier's first decision point, then its programme.
        let mut ping_at: Option<(f64, usize, f64)> = None;
        for (i, tier) in f.longer_tiers() {
            let up = f.ping_cost_at(tier);
            let spent = k as f64 * ping + up;
            if !fits(spent) {
                continue;
            }
            let g = f.kept_at(tier);
            let origin = t + g.ping_period().expect("a TTL");
            let later = rem.shifted(t, origin);
            let v = solve(&g, &later, g.margin(), stake.map(|s| s - spent));
            let cont_mass = later.suffix[0];
            let value = up + if mass > 0.0 { (later.pre * warm + cont_mass * v.best) / mass } else { 0.0 };
            let pings = 1.0 + if mass > 0.0 { v.best_pings * cont_mass / mass } else { 0.0 };
            if ping_at.is_none_or(|(b, _, _)| value < b) {
                ping_at = Some((value, i, pings));
            }
        }
        let costs = [Some(expire), ping_value, compact, ping_at.map(|p| p.0)];
        let i = cheapest(costs.iter().map(|c| c.unwrap_or(f64::INFINITY)));
        let best = costs[i].expect("the cheapest is priced");
        let next_pings = next.map_or(0.0, |(v, m)| if mass > 0.0 { v.pings * m / mass } else { 0.0 });
        let pings = match i {
            1 => 1.0 + next_pings,
            3 => ping_at.map_or(0.0, |p| p.2),
            _ => 0.0,
        };
        let v = Values { expire, ping: ping_value, ping_at, compact, pings, best_pings: pings, best };
        if k == 0 {
            at0 = Some((v, next_pings));
        }
        next = Some((v, mass));
    }
    let (mut v, next_pings) = at0.expect("k = 0 is solved");
    // The expected pings of the keep-warm option itself (this ping and what follows).
    v.pings = 1.0 + next_pings;
    v
}

fn money(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        let digits = (-x.abs().log10()).ceil() as usize + 2;
        format!("{x:.digits$}")
    }
}

fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=119 => format!("{s} s"),
        120..=599 if !s.is_multiple_of(60) => format!("{:.1} min", s as f64 / 60.0),
        120..=7199 => format!("{} min", (s + 30) / 60),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

fn percent(p: f64) -> String {
    format!("{:.0} %", p * 100.0)
}

/// What writing the next request at one tier is expected to cost ([`tier_costs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TierCost {
    /// The tier.
    pub tier: Tier,
    /// The expected cost of the next write at it and of the gap after it: its write, then a
    /// short gap (probability `1 - pause`: a warm return) or a pause handled as [`decide`]
    /// would handle it at this tier's TTL.
    pub cost: f64,
    /// What the next write costs at this tier (its premium is the difference between tiers).
    pub write: f64,
    /// The expected cost of a pause after the write at this tier (the actions during it and
    /// the return).
    pub pause_cost: f64,
    /// The probability that the gap after the next write is a pause ([`ReturnModel::pause_probability`]).
    pub pause: f64,
    /// Where the figures come from ([`ReturnModel::tier_model`]'s source).
    pub returns: String,
}

/// The expected cost of each tier of `f.tiers` for the next write (see the module docs of
/// [`crate::clock`]): the write at that tier's price, then the gap after it. A tier's premium
/// buys nothing unless that gap is a pause (longer than the shortest tier's first decision
/// point), so the gap is a pause with the probability the session has shown
/// ([`ReturnModel::pause_probability`]: how many of its own gaps were pauses), and a pause
/// lasts as the model says given that the host has been away that long. The premium of one
/// write is thereby weighed against `1 / pause` writes per pause: a session that pauses once
/// in twenty requests pays twenty premiums for one pause the longer tier bridges. The warm
/// prefix is taken as now. The clock advises the cheapest (`tier`).
pub fn tier_costs(f: &CacheFigures, model: &ReturnModel) -> Vec<TierCost> {
    let for_tier = |t: &Tier| {
        let mut g = f.clone();
        g.ttl_ms = Some(t.ttl_ms);
        g.tier = t.name.clone();
        g.rates.write = t.write;
        g
    };
    let Some(pause_ms) = f.tiers.iter().map(|t| t.ttl_ms - for_tier(t).margin()).min() else { return Vec::new() };
    // Before the session has paused, its own gaps say nothing of its pauses: the tiers are
    // priced with the whole model (the prior), only a tier whose write costs no more than the
    // one in force is offered (a premium is never paid on the prior alone), and a pause after
    // the write is priced as the clock would handle it under the keep-warm budget (a session
    // too small to keep a pause warm at a shorter tier keeps the tier it has).
    let (model, lower_only) = match model.tier_model(pause_ms) {
        Some(m) => (m, false),
        None if f.tier_before_pause => (model.clone(), true),
        None => return Vec::new(),
    };
    let model = &model;
    let pause = model.pause_probability(pause_ms);
    // Before a pause: what a pause may stake (the keep-warm budget, as `decide` applies it in
    // the pause).
    let budget = match (f.session_cost, f.keepalive_budget) {
        (Some(spent), Some(share)) if lower_only && model.never_returns > 0.0 => Some(share * spent),
        _ => None,
    };
    let mut out = Vec::new();
    for t in &f.tiers {
        if lower_only && t.name != f.tier && t.write > f.rates.write {
            continue;
        }
        let g = for_tier(t);
        // What the next request writes at that tier: what it adds (about what the requests
        // after the first wrote on average, at least what came after the last one: the first
        // request's write is the whole context, no measure of the next), or the whole prefix
        // under `prefix` billing.
        let first = if f.tier_before_pause { 0 } else { f.written_tokens };
        let new = f.mean_written_tokens.unwrap_or(first).max(f.context_tokens.saturating_sub(f.warm_tokens));
        let moves = t.name != f.tier && f.tier_billing == super::cost::TierBilling::Prefix;
        let write = (if moves { new.max(f.warm_tokens) } else { new }) as f64 * t.write / 1e6;
        let margin = g.margin();
        let d0 = t.ttl_ms - margin;
        let rem = Remaining::new(model, pause_ms, d0 - pause_ms);
        let v = solve(&g, &rem, margin, budget);
        let total = rem.pre + rem.suffix[0];
        let warm = g.warm_return();
        let pause_cost = if total > 0.0 { (rem.pre * warm + rem.suffix[0] * v.best) / total } else { warm };
        let cost = write + (1.0 - pause) * warm + pause * pause_cost;
        out.push(TierCost { tier: t.clone(), cost, write, pause_cost, pause, returns: model.source.clone() });
    }
    // On the prior alone, a cheaper tier is a bet that no pause comes: what a pause would cost
    // more at it must fit what a pause may stake. Nothing to weigh when no other tier is left.
    if lower_only {
        if let (Some(b), Some(now)) = (budget, out.iter().find(|x| x.tier.name == f.tier).map(|x| x.pause_cost)) {
            out.retain(|x| x.tier.name == f.tier || x.pause_cost - now <= b);
        }
        if out.iter().all(|x| x.tier.name == f.tier) {
            out.clear();
        }
    }
    out
}

/// Decides what to do now (see the module docs of [`crate::clock`]). Deterministic: the same
/// figures, timing and model give the same decision, reason and figures.
pub fn decide(f: &CacheFigures, t: &Timing, model: &ReturnModel) -> Decision {
    let mut d = Decision {
        decision: Action::None,
        tier: None,
        reason: String::new(),
        at: t.now,
        warm_until: None,
        next_decision_at: None,
        return_probability: None,
        options: Vec::new(),
        break_even: BreakEven::default(),
        returns: model.source.clone(),
    };
    let Some(ttl) = f.ttl_ms else {
        d.reason =
            "nothing to do: the provider documents no TTL for this cache (it stays until evicted), so nothing expires to act on".into();
        return d;
    };
    let expiry = t.touched_at.saturating_add(ttl);
    d.warm_until = Some(expiry);
    if f.warm_tokens == 0 {
        d.reason = "nothing to do: no prefix is cached yet".into();
        return d;
    }
    if let Some(c) = f.compaction.as_ref().filter(|c| c.necessary) {
        d.decision = Action::Compact;
        d.reason = format!(
            "compact now: the context is over the compaction threshold, and a necessary compaction never waits (the summarisation request reads {} tokens {})",
            c.read_tokens,
            if t.now < expiry { "while they are warm" } else { "again: the cache expired" }
        );
        return d;
    }
    if t.now >= expiry {
        d.reason = format!("nothing to do: the cache expired {} ago; the next request writes the context again", duration(t.now - expiry));
        return d;
    }
    let margin = f.margin();
    let d0 = t.now.max(expiry - margin);
    let away = t.now.saturating_sub(t.gap_start);
    let rem = Remaining::new(model, away, d0 - t.now);
    // The keep-warm budget: what this pause may still stake (keep-warm requests, a compaction
    // for a host who may not come back). It bounds the bet on a host that may never come back,
    // so it applies while the model allows that (a host whose own model says it always returns
    // has said what the budget guards against).
    let budget = match (f.session_cost, f.keepalive_budget) {
        (Some(spent), Some(share)) if model.never_returns > 0.0 => {
            let left = (share * spent - t.pings as f64 * f.ping_cost()).max(0.0);
            Some((left, share, spent))
        }
        _ => None,
    };
    let v = solve(f, &rem, expiry - d0, budget.map(|b| b.0));
    let total = rem.pre + rem.suffix[0];
    // Seen from now: returns before d0 are warm whatever the option.
    let seen = |x: f64| if total > 0.0 { (rem.pre * f.warm_return() + rem.suffix[0] * x) / total } else { 0.0 };
    d.options.push(Expected { option: "let-expire".into(), tier: None, expected_cost: seen(v.expire), expected_pings: None });
    if let Some(p) = v.ping {
        d.options.push(Expected { option: "keep-warm".into(), tier: None, expected_cost: seen(p), expected_pings: Some(v.pings) });
    }
    if let Some(c) = v.compact {
        d.options.push(Expected { option: "compact".into(), tier: None, expected_cost: seen(c), expected_pings: None });
    }
    if let Some((c, i, n)) = v.ping_at {
        d.options.push(Expected {
            option: "keep-warm".into(),
            tier: Some(f.tiers[i].name.clone()),
            expected_cost: seen(c),
            expected_pings: Some(n),
        });
    }
    d.return_probability = Some(model.returns_within(away, expiry - t.now));
    // Break-evens.
    let (ping, saved) = (f.ping_cost(), f.cold_return() - f.warm_return());
    if f.keepalive && ping > 0.0 {
        let n = saved / ping;
        d.break_even.pings = Some(n);
        d.break_even.keep_warm_ms = Some(ttl + (n.max(0.0).floor() as u64).saturating_mul(f.ping_period().unwrap_or(0)));
    }
    if let (Some(s), Some(w), Some(c)) = (f.compaction_cost(), f.compacted_return(true), f.compacted_return(false)) {
        // Compacting pays when the host returns after expiry with a probability above
        // A / (A - B): A what it costs more on a warm return, -B what it saves on a cold one.
        let (a, b) = (s + w - f.warm_return(), s + c - f.cold_return());
        d.break_even.compact_probability = Some(if b < 0.0 { (a / (a - b)).clamp(0.0, 1.0) } else { 1.0 });
    }
    let costs: Vec<String> = d
        .options
        .iter()
        .map(|o| match &o.tier {
            Some(t) => format!("{} at the {t} tier {}", o.option, money(o.expected_cost)),
            None => format!("{} {}", o.option, money(o.expected_cost)),
        })
        .collect();
    let costs = costs.join(", ");
    let why_pings = || {
        match (d.break_even.pings, d.break_even.keep_warm_ms) {
        (Some(n), Some(ms)) => format!(
            "a keep-warm request costs {} and a rewrite after expiry {} more than a warm read, so keeping warm pays if the host returns within {:.1} requests ({} after the last use); ",
            money(ping),
            money(saved),
            n,
            duration(ms)
        ),
        _ => String::new(),
    }
    };
    let why_compact = || match d.break_even.compact_probability {
        Some(p) if p < 1.0 => format!("compacting pays if the host returns after expiry with a probability above {}; ", percent(p)),
        Some(_) => "compacting would not pay even after expiry; ".into(),
        None => String::new(),
    };
    let odds = format!(
        "away {}, the host returns within {} (while warm) with probability {} ({})",
        duration(away),
        duration(expiry - t.now),
        percent(d.return_probability.unwrap_or(0.0)),
        model.source
    );
    if t.now < d0 {
        // Not due yet: an advisable action waits while the cache is warm. Meanwhile, a tier for
        // the next write.
        d.next_decision_at = Some(d0);
        let tiers = tier_costs(f, model);
        for t in &tiers {
            d.options.push(Expected {
                option: "tier".into(),
                tier: Some(t.tier.name.clone()),
                expected_cost: t.cost,
                expected_pings: None,
            });
        }
        let best = cheapest(tiers.iter().map(|x| x.cost));
        if let Some(b) = tiers.get(best).filter(|x| x.tier.name != f.tier) {
            let now = tiers.iter().find(|x| x.tier.name == f.tier);
            d.decision = Action::Tier;
            d.tier = Some(b.tier.name.clone());
            let per_pause = |premium: f64| if b.pause > 0.0 { premium / b.pause } else { f64::INFINITY };
            d.reason = match now {
                Some(n) => format!(
                    "write the next request at the {} tier: {} (a pause after {} of its requests, never coming back included), and a pause costs {} on average at the {} tier against {} at the {} tier; the {} tier's write costs {} more, {} over the requests until the next pause; expected costs per request: {} {}, {} {}; nothing else is due before {} ({} before expiry)",
                    b.tier.name,
                    b.returns,
                    percent(b.pause),
                    money(n.pause_cost),
                    f.tier,
                    money(b.pause_cost),
                    b.tier.name,
                    b.tier.name,
                    money(b.write - n.write),
                    money(per_pause(b.write - n.write)),
                    f.tier,
                    money(n.cost),
                    b.tier.name,
                    money(b.cost),
                    duration(d0 - t.now),
                    duration(margin)
                ),
                None => format!(
                    "write the next request at the {} tier: expected cost per request {}; nothing else is due before {} ({} before expiry)",
                    b.tier.name,
                    money(b.cost),
                    duration(d0 - t.now),
                    duration(margin)
                ),
            };
        } else {
            d.reason = format!(
                "nothing to do yet: the cache is warm for {} more; ask again {} before expiry, in {} (expected costs then: {costs})",
                duration(expiry - t.now),
                duration(margin),
                duration(d0 - t.now)
            );
        }
        return d;
    }
    let i = cheapest(d.options.iter().map(|o| o.expected_cost));
    let chosen = d.options[i].option.clone();
    let kept_at = d.options[i].tier.as_deref().and_then(|n| f.tier_named(n)).cloned();
    d.decision = match chosen.as_str() {
        "keep-warm" => Action::KeepWarm,
        "compact" => Action::Compact,
        _ => Action::LetExpire,
    };
    d.reason = match d.decision {
        Action::KeepWarm => match &kept_at {
            Some(k) => {
                let g = f.kept_at(k);
                d.tier = Some(k.name.clone());
                d.next_decision_at = Some(t.now + g.ping_period().unwrap_or(k.ttl_ms));
                format!(
                    "keep warm now, the keep-warm request at the {} tier: it costs {} ({} at the {} tier) and keeps the prefix warm for {} rather than {}; {}{odds}; expected costs: {costs}",
                    k.name,
                    money(f.ping_cost_at(k)),
                    money(f.ping_cost()),
                    f.tier,
                    duration(k.ttl_ms),
                    duration(ttl),
                    why_pings()
                )
            }
            None => {
                d.next_decision_at = Some(t.now + f.ping_period().unwrap_or(ttl));
                format!("keep warm now: {}{odds}; expected costs: {costs}", why_pings())
            }
        },
        Action::Compact => format!("compact now, while the prefix is warm: {}{odds}; expected costs: {costs}", why_compact()),
        _ => format!("let it expire: {}{}{odds}; expected costs: {costs}", why_pings(), why_compact()),
    };
    if let Some((left, share, spent)) = budget {
        let n = if f.ping_cost() > 0.0 { (left / f.ping_cost() * (1.0 + 1e-12)).floor().min(1e9) as u64 } else { 0 };
        let pings = if f.keepalive { format!(": {n} more keep-warm request{}", if n == 1 { "" } else { "s" }) } else { String::new() };
        let compaction = match f.compaction_cost() {
            Some(c) if c > left * (1.0 + 1e-12) => ", too little for a compaction",
            _ => "",
        };
        d.reason.push_str(&format!(
            "; the keep-warm budget ({} of the {} the session's requests have cost so far) leaves this pause {}{pings}{compaction}",
            percent(share),
            money(spent),
            money(left),
        ));
    }
    if d.decision == Action::LetExpire {
        // The next write rewrites the whole context: a tier's premium is paid on all of it, so
        // the tier for it is weighed again (see `tier_costs`).
        let mut rewrite = f.clone();
        rewrite.warm_tokens = f.context_tokens;
        rewrite.written_tokens = f.context_tokens;
        rewrite.mean_written_tokens = Some(f.context_tokens);
        let tiers = tier_costs(&rewrite, model);
        if let Some(b) = tiers.get(cheapest(tiers.iter().map(|x| x.cost))).filter(|x| x.tier.name != f.tier) {
            let now = tiers.iter().find(|x| x.tier.name == f.tier).map_or(f64::NAN, |x| x.cost);
            d.tier = Some(b.tier.name.clone());
            d.reason.push_str(&format!(
                "; write the rewrite at the {} tier: it writes the whole context again, {} at the {} tier against {} at the {} tier (the gap after it included)",
                b.tier.name,
                money(b.cost),
                b.tier.name,
                money(now),
                f.tier
            ));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::super::cost::{CompactionFigures, Rates, TierBilling};
    use super::super::returns::ReturnModelSpec;
    use super::*;

    fn figures(warm: u64) -> CacheFigures {
        CacheFigures {
            warm_tokens: warm,
            context_tokens: warm + 1_000,
            written_tokens: 1_500,
            mean_written_tokens: None,
            ttl_ms: Some(300_000),
            tier: "5m".into(),
            tiers: Vec::new(),
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

    fn at(now: u64) -> Timing {
        Timing { gap_start: 0, touched_at: 0, now, pings: 0 }
    }

    fn model(gaps_min: &[u64], never: f64) -> ReturnModel {
        ReturnModel::new(gaps_min.iter().map(|m| (m * 60_000, 1.0)).collect(), never, "test")
    }

    #[test]
    fn before_the_margin_nothing_is_due_and_the_time_to_ask_again_is_given() {
        let d = decide(&figures(50_000), &at(60_000), &ReturnModel::default_prior());
        assert_eq!(d.decision, Action::None);
        assert_eq!(d.warm_until, Some(300_000));
        assert_eq!(d.next_decision_at, Some(270_000));
        assert!(d.reason.starts_with("nothing to do yet: the cache is warm for 4 min more; ask again 30 s before expiry"), "{}", d.reason);
        assert_eq!(d.options.len(), 2);
    }

    #[test]
    fn keep_warm_when_the_host_is_likely_back_within_the_break_even() {
        // The host always comes back after 20 minutes: four pings beat one rewrite.
        let d = decide(&figures(100_000), &at(270_000), &model(&[20], 0.0));
        assert_eq!(d.decision, Action::KeepWarm, "{}", d.reason);
        assert_eq!(d.next_decision_at, Some(270_000 + 270_000));
        let kw = &d.options[1];
        assert!((kw.expected_pings.unwrap() - 4.0).abs() < 1e-9, "{kw:?}");
        assert!(d.reason.contains("within 11.5 requests (55 min after the last use)"), "{}", d.reason);
        assert!(d.reason.contains("expected costs: let-expire"), "{}", d.reason);
    }

    #[test]
    fn let_expire_when_the_host_is_back_late_or_never() {
        for m in [model(&[180], 0.0), model(&[20], 0.95)] {
            let d = decide(&figures(100_000), &at(270_000), &m);
            assert_eq!(d.decision, Action::LetExpire, "{}", d.reason);
            assert_eq!(d.next_decision_at, None);
            assert!(d.reason.starts_with("let it expire: a keep-warm request costs"), "{}", d.reason);
        }
    }

    #[test]
    fn compact_when_the_context_is_large_and_the_return_late() {
        let mut f = figures(200_000);
        f.compaction = Some(CompactionFigures {
            read_tokens: 190_000,
            instruction_tokens: 400,
            summary_tokens: 6_000,
            head_tokens: 8_000,
            compacted_tokens: 40_000,
            necessary: false,
        });
        let d = decide(&f, &at(270_000), &model(&[180], 0.0));
        assert_eq!(d.decision, Action::Compact, "{}", d.reason);
        assert!(d.reason.contains("compacting pays if the host returns after expiry with a probability above"), "{}", d.reason);
        // Warm for another 4 minutes: an advisable compaction waits.
        let d = decide(&f, &at(30_000), &model(&[180], 0.0));
        assert_eq!(d.decision, Action::None);
        // Over the threshold it does not.
        f.compaction.as_mut().unwrap().necessary = true;
        let d = decide(&f, &at(30_000), &model(&[180], 0.0));
        assert_eq!(d.decision, Action::Compact);
        assert!(d.reason.contains("a necessary compaction never waits"), "{}", d.reason);
    }

    #[test]
    fn a_longer_tier_for_the_next_write_when_pauses_fall_between_the_ttls() {
        let mut f = figures(100_000);
        f.tiers = vec![Tier { name: "5m".into(), ttl_ms: 300_000, write: 3.75 }, Tier { name: "1h".into(), ttl_ms: 3_600_000, write: 6.0 }];
        f.keepalive = false;
        let d = decide(&f, &at(10_000), &model(&[30, 40], 0.0));
        assert_eq!(d.decision, Action::Tier, "{}", d.reason);
        assert_eq!(d.tier.as_deref(), Some("1h"));
        assert_eq!(d.next_decision_at, Some(270_000));
        // Pauses of seconds: the short tier stays.
        let d = decide(&f, &at(10_000), &model(&[1], 0.0));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
    }

    fn two_tiers(mut f: CacheFigures) -> CacheFigures {
        f.tiers = vec![Tier { name: "5m".into(), ttl_ms: 300_000, write: 3.75 }, Tier { name: "1h".into(), ttl_ms: 3_600_000, write: 6.0 }];
        f.margin_ms = 10_000;
        f
    }

    #[test]
    fn a_tier_is_bet_on_the_pauses_the_session_has_shown() {
        let f = two_tiers(figures(100_000));
        let spec = ReturnModelSpec::default();
        // Forty gaps of seconds: the default prior holds pauses (real hosts take them), but the
        // session has shown none, so no write pays a premium for them.
        let quick: Vec<u64> = (0..40).map(|k| 3_000 + k * 500).collect();
        let d = decide(&f, &at(1_000), &spec.model(&quick));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
        assert!(!d.options.iter().any(|o| o.option == "tier"), "{:?}", d.options);
        // A pause of 20 minutes after every fourth request: the hour tier bridges them for a
        // premium on four writes per pause.
        let mut often = Vec::new();
        for k in 0..40 {
            often.push(if k % 4 == 3 { 20 * 60_000 } else { 5_000 });
        }
        let d = decide(&f, &at(1_000), &spec.model(&often));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::Tier, Some("1h")), "{}", d.reason);
        assert!(d.reason.contains("10 of this session's 40 gaps were pauses (a pause after 26 % of its requests"), "{}", d.reason);
        // The same pauses after every fortieth request, the writes as large: forty premiums per
        // pause cost more than the keep-warm requests the hour tier would save.
        let mut rare = vec![5_000; 79];
        rare[39] = 20 * 60_000;
        rare[78] = 20 * 60_000;
        let mut big = f.clone();
        big.mean_written_tokens = Some(8_000);
        let d = decide(&big, &at(1_000), &spec.model(&rare));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
        let t = d.options.iter().filter(|o| o.option == "tier").map(|o| o.expected_cost).collect::<Vec<_>>();
        assert!(t.len() == 2 && t[0] < t[1], "{:?}", d.options);
    }

    /// A session written at the hour tier that has not paused: its writes move to the
    /// 5-minute tier (a premium is not kept up on the prior alone) when a pause there could be
    /// kept warm within the keep-warm budget, and stay where they are when the session is too
    /// small to stake a keep-warm request on a pause; the 5-minute tier never moves up.
    #[test]
    fn before_a_pause_the_writes_move_to_a_cheaper_tier_that_the_budget_covers() {
        let mut f = two_tiers(figures(100_000));
        f.keep_warm_tiers = true;
        f.tier_before_pause = true;
        f.tier = "1h".into();
        f.ttl_ms = Some(3_600_000);
        f.rates.write = 6.0;
        f.mean_written_tokens = Some(2_000);
        f.keepalive_budget = Some(0.05);
        let spec = ReturnModelSpec::default();
        let quick: Vec<u64> = (0..10).map(|k| 3_000 + k * 500).collect();
        f.session_cost = Some(5.0);
        let d = decide(&f, &at(1_000), &spec.model(&quick));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::Tier, Some("5m")), "{}", d.reason);
        assert!(d.options.iter().any(|o| o.option == "tier" && o.tier.as_deref() == Some("1h")), "{:?}", d.options);
        // Two cents spent: a keep-warm request (a read of 100k tokens, 0.03) does not fit 5 % of
        // it, so a pause at the 5-minute tier would be a rewrite; the hour tier stays.
        f.session_cost = Some(0.02);
        let d = decide(&f, &at(1_000), &spec.model(&quick));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
        assert!(!d.options.iter().any(|o| o.option == "tier"), "{:?}", d.options);
        // At the 5-minute tier, nothing moves before a pause.
        let mut g = two_tiers(figures(100_000));
        g.tier_before_pause = true;
        g.session_cost = Some(5.0);
        g.keepalive_budget = Some(0.05);
        let d = decide(&g, &at(1_000), &spec.model(&quick));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
        // Figures recorded before the clock moved tiers before a pause are decided as then.
        f.session_cost = Some(5.0);
        f.tier_before_pause = false;
        let d = decide(&f, &at(1_000), &spec.model(&quick));
        assert_eq!(d.decision, Action::None, "{}", d.reason);
        assert!(!d.options.iter().any(|o| o.option == "tier"), "{:?}", d.options);
    }

    #[test]
    fn a_rewrite_after_expiry_is_written_at_the_tier_that_pays_for_it() {
        // At the hour tier, and the host back after three hours: the cache expires whatever the
        // clock does, and the rewrite is the whole context, whose premium the hour tier does not
        // repay.
        let mut f = two_tiers(figures(100_000));
        f.keepalive = false;
        f.ttl_ms = Some(3_600_000);
        f.tier = "1h".into();
        f.rates.write = 6.0;
        let d = decide(&f, &at(3_600_000 - 10_000), &model(&[180], 0.0));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::LetExpire, Some("5m")), "{}", d.reason);
        assert!(d.reason.contains("; write the rewrite at the 5m tier"), "{}", d.reason);
        // A host whose pauses last 30 minutes nine times in ten: the hour tier bridges them, and
        // repays its premium on the rewrite, which stays at it (a host back in 30 minutes half
        // the time would not repay it: the rewrite moves to the 5m tier).
        let d = decide(&f, &at(3_600_000 - 10_000), &model(&[30, 30, 30, 30, 30, 30, 30, 30, 30, 180], 0.0));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::LetExpire, None), "{}", d.reason);
        let d = decide(&f, &at(3_600_000 - 10_000), &model(&[30, 180], 0.0));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::LetExpire, Some("5m")), "{}", d.reason);
    }

    #[test]
    fn expired_or_without_ttl_there_is_nothing_to_do() {
        let d = decide(&figures(1_000), &at(400_000), &ReturnModel::default_prior());
        assert_eq!(d.decision, Action::None);
        assert!(d.reason.starts_with("nothing to do: the cache expired 100 s ago"), "{}", d.reason);
        let mut f = figures(1_000);
        f.ttl_ms = None;
        let d = decide(&f, &at(400_000), &ReturnModel::default_prior());
        assert_eq!(d.decision, Action::None);
        assert_eq!(d.warm_until, None);
    }

    #[test]
    fn the_same_inputs_give_the_same_answer() {
        let m = ReturnModel::default_prior();
        let a = serde_json::to_string(&decide(&figures(80_000), &at(275_000), &m)).unwrap();
        for _ in 0..3 {
            assert_eq!(serde_json::to_string(&decide(&figures(80_000), &at(275_000), &m)).unwrap(), a);
        }
    }

    #[test]
    fn the_programme_matches_the_clairvoyant_cost_for_a_certain_return() {
        // With one certain return time, the online expected cost equals the best clairvoyant
        // option's cost for that gap.
        use super::super::cost::GapCosts;
        for minutes in [6u64, 20, 50, 70, 200] {
            let f = figures(100_000);
            let d = decide(&f, &at(270_000), &model(&[minutes], 0.0));
            let best = d.options.iter().map(|o| o.expected_cost).fold(f64::INFINITY, f64::min);
            let g = GapCosts::of(&f, minutes * 60_000);
            assert!((best - g.best().cost).abs() < 1e-9, "{minutes} min: {best} vs {:?}", g);
        }
        // The same with keep-warm requests at the hour tier, against the clairvoyant options
        // that can still be taken at the first decision point (not the last write's tier).
        for billing in [TierBilling::Written, TierBilling::Prefix] {
            for minutes in [6u64, 20, 50, 70, 130, 200] {
                let mut f = two_tiers(figures(100_000));
                f.keep_warm_tiers = true;
                f.tier_billing = billing;
                let d = decide(&f, &at(290_000), &model(&[minutes], 0.0));
                let best = d.options.iter().map(|o| o.expected_cost).fold(f64::INFINITY, f64::min);
                let g = GapCosts::of(&f, minutes * 60_000);
                let clairvoyant = g.options.iter().filter(|o| o.option != "tier").map(|o| o.cost).fold(f64::INFINITY, f64::min);
                assert!((best - clairvoyant).abs() < 1e-9, "{billing:?} {minutes} min: {best} vs {g:?}");
            }
        }
    }

    #[test]
    fn a_keep_warm_request_at_the_longer_tier_bridges_a_pause_for_the_price_of_one() {
        // The host comes back after 20 minutes: four keep-warm requests at the 5-minute tier, or
        // one at the hour tier, which under `written` billing writes nothing and costs as much
        // as one.
        let mut f = two_tiers(figures(100_000));
        f.keep_warm_tiers = true;
        let d = decide(&f, &at(290_000), &model(&[20], 0.0));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::KeepWarm, Some("1h")), "{}", d.reason);
        assert_eq!(d.next_decision_at, Some(290_000 + 3_600_000 - 10_000));
        let up = d.options.iter().find(|o| o.option == "keep-warm" && o.tier.is_some()).unwrap();
        let plain = d.options.iter().find(|o| o.option == "keep-warm" && o.tier.is_none()).unwrap();
        // A keep-warm request at the 5-minute tier now is one more before the same request at
        // the hour tier at the next decision point.
        assert!((up.expected_pings.unwrap() - 1.0).abs() < 1e-9 && (plain.expected_pings.unwrap() - 2.0).abs() < 1e-9, "{d:?}");
        assert!((plain.expected_cost - up.expected_cost - f.ping_cost()).abs() < 1e-9, "{d:?}");
        assert!(d.reason.starts_with("keep warm now, the keep-warm request at the 1h tier: it costs 0.0300 (0.0300 at the 5m tier) and keeps the prefix warm for 60 min rather than 5 min"), "{}", d.reason);
        // After it, the cache is warm for the hour: nothing is due for it until its margin (the
        // tier advised for the next write aside: every gap of this host is a pause).
        let kept = f.kept_at(&f.tiers[1]);
        let later = decide(&kept, &Timing { gap_start: 0, touched_at: 290_000, now: 600_000, pings: 1 }, &model(&[20], 0.0));
        assert_eq!(
            (later.decision, later.warm_until, later.next_decision_at),
            (Action::Tier, Some(290_000 + 3_600_000), Some(290_000 + 3_600_000 - 10_000)),
            "{}",
            later.reason
        );
        // Under `prefix` billing it writes the whole prefix again at the hour tier's price (0.6
        // against 0.03 a keep-warm request): four keep-warm requests at the 5-minute tier win.
        f.tier_billing = TierBilling::Prefix;
        let d = decide(&f, &at(290_000), &model(&[20], 0.0));
        assert_eq!((d.decision, d.tier.as_deref()), (Action::KeepWarm, None), "{}", d.reason);
        // And a host that turns it off gets the decision it had.
        f.tier_billing = TierBilling::Written;
        f.keep_warm_tiers = false;
        let d = decide(&f, &at(290_000), &model(&[20], 0.0));
        assert_eq!((d.decision, d.tier.as_deref(), d.options.len()), (Action::KeepWarm, None, 2), "{}", d.reason);
    }
}
