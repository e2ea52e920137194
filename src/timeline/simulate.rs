//! Replaying a timeline under the cache clock's policies (`llmsession simulate`,
//! docs/simulate.md).
//!
//! Every policy replays the same requests at the same times; what differs is what it does
//! during the gaps between them and the tier it writes each request at, and so which requests
//! find their prefix warm:
//!
//! - `threshold`: what was recorded, as it was billed (the harness's own behaviour: it lets the
//!   cache expire);
//! - `clock`: online, the decision model of [`crate::clock`] asked as an idle timer would ask
//!   it: right after each request, then at each `nextDecisionAt` before the next request
//!   arrives. It never sees a gap's length in advance. It may keep the cache warm, let it
//!   expire, and change the tier of the next write (the tier it advises stays in force until
//!   it advises another; a `let-expire` may name the tier of the rewrite). After the last
//!   request it is asked as after any other, for a host that never comes back: what it spends
//!   there (keep-warm requests, a summarisation request) is paid for nothing
//!   (`abandonedCost`, part of its cost);
//! - `optimal`: clairvoyant over the same actions (it knows every gap's length), computed
//!   exactly by dynamic programming over the timeline;
//! - `clock+compact`, `optimal+compact`: the same, with compaction before expiry allowed.
//!
//! # The accounting
//!
//! A request's cost is the host's price table applied to its usage ([`Price::cost`]); a
//! keep-warm request costs [`CacheFigures::ping_cost`] and a summarisation request
//! [`CacheFigures::compaction_cost`] (the clock's own formulas). A request's usage under a
//! policy is derived from its recorded usage and the state of the cache when it is sent:
//!
//! - its cacheable prompt `A` (cache reads and writes; for a provider that reports no writes,
//!   all its input) and its uncached input and output are as recorded;
//! - **warm**: it reads what it read as recorded, or, if the recorded request found its prefix
//!   expired (the gap was longer than the TTL and it read less than 99 % of what the request
//!   before it cached, as `explain` charges expiry), what the request before it cached; the
//!   rest of `A` is written;
//! - **cold** (the prefix expired): it reads nothing (what it read as recorded, if the recorded
//!   request was the one that found it expired), and writes the rest of `A`;
//! - a provider's cache that held a prefix longer than its rule says (the recorded request read
//!   it after a longer gap) holds it under every policy that kept the recorded tier;
//! - **writes are priced at the request's tier**: the recorded split where the policy keeps
//!   the recorded tier, else all at the tier it chose (`5m` or `1h`, the price table's
//!   `cacheWrite` keys); with `tierBilling: "prefix"` a request written at another tier than
//!   its warm prefix reads nothing and writes it all again;
//! - **a compaction before expiry** replaces the context the next request carries by the
//!   session's head (the first request's cache read: what another session cached, the system
//!   prompt and tools; else the first request's whole prompt) and the summary
//!   (`summaryRatio` of the rest, at most `summaryMaxTokens`); every later request carries that
//!   many tokens less (never less than the head), until the harness's own next compaction.
//!   The first request after it reads the head if it comes within a TTL of the summarisation
//!   request and writes the rest. What a summary loses is not priced.
//!
//! # Exactness of `optimal`
//!
//! Between two requests the clairvoyant choice is among: let the cache expire; keep it warm
//! until the return (the clock's keep-warm schedule, [`CacheFigures::pings_for`]); compact at
//! the first decision point; or keep it warm until the last decision point from which the
//! compacted head is still warm at the return, and compact there. Any other sequence the clock
//! can take (keep warm a while and then let it expire, compact at another point) costs at
//! least one of these. With the tier of every write, these are the only choices; the programme
//! keeps, per tier, the states not dominated in (reduction of the context, cost so far) — a
//! larger reduction never makes a later request dearer — so it is exact, and it is checked
//! against brute force on small timelines.

use super::{RequestKind, TimedRequest, Timeline};
use crate::cache_rules::{CacheRules, CacheSettings};
use crate::clock::{
    decide, keepalive_max_tokens, offered_tiers, Action, CacheFigures, CompactionFigures, Decision, Rates, ReturnModelSpec, Tier,
    TierBilling, Timing, DEFAULT_KEEPALIVE_BUDGET, DEFAULT_MARGIN_MS, DEFAULT_SUMMARY_RATIO,
};
use crate::error::{Error, ErrorKind, Result};
use crate::prices::{Price, PriceTable};
use crate::types::CallConfig;
use crate::types::{Fields, Usage};
use serde::Serialize;
use serde_json::{json, Value};

/// The simulation's assumptions the host may change (`llmsession simulate --options FILE`):
/// `{"tierBilling"?, "marginMs"?, "pingOutputTokens"?, "keepalive"?, "summaryRatio"?,
/// "summaryMaxTokens"?, "retainedShare"?, "instructionTokens"?, "returnModel"?,
/// "keepWarmBudget"?, "keepWarmTiers"?}`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulateOptions {
    /// How a longer-tier write after a hit is billed ([`TierBilling`], default `written`).
    pub tier_billing: TierBilling,
    /// How long before expiry the clock acts (default the clock's, 30 s).
    pub margin_ms: u64,
    /// The output limit of a keep-warm request (default: the smallest the provider allows, as
    /// the agent's keep-warm request sets it).
    pub ping_output_tokens: Option<u64>,
    /// Whether keep-warm requests may be sent (default true).
    pub keepalive: bool,
    /// The summary's size as a share of the region it replaces (default the clock's, 0.1).
    pub summary_ratio: f64,
    /// The summary's largest size (default 8192, the compaction policy's `summaryMaxTokens`).
    pub summary_max_tokens: u64,
    /// The tail a compaction keeps verbatim, as a share of the context (default 0.16, as
    /// `explain` prices a counterfactual compaction).
    pub retained_share: f64,
    /// The summarisation instruction's tokens (default: the library's instruction, estimated).
    pub instruction_tokens: u64,
    /// The clock's return-time model (default: the documented prior, learning the session's
    /// own gaps).
    pub return_model: ReturnModelSpec,
    /// The clock's keep-warm budget (default [`DEFAULT_KEEPALIVE_BUDGET`]; `docs/caching.md`).
    pub keepalive_budget: f64,
    /// Whether a keep-warm request may be sent at a longer tier than the one in force, by the
    /// clock and the optimum alike (default true; `docs/caching.md`).
    pub keep_warm_tiers: bool,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            tier_billing: TierBilling::Written,
            margin_ms: DEFAULT_MARGIN_MS,
            ping_output_tokens: None,
            keepalive: true,
            summary_ratio: DEFAULT_SUMMARY_RATIO,
            summary_max_tokens: 8192,
            retained_share: 0.16,
            instruction_tokens: crate::compaction::instruction_tokens(),
            return_model: ReturnModelSpec::default(),
            keepalive_budget: DEFAULT_KEEPALIVE_BUDGET,
            keep_warm_tiers: true,
        }
    }
}

impl SimulateOptions {
    /// Parses the options object (see the type's docs); an unknown or mistyped field is an
    /// error naming it.
    pub fn from_value(v: &Value) -> Result<SimulateOptions> {
        let f = Fields::of(v, "options")?;
        const KEYS: [&str; 10] = [
            "tierBilling",
            "marginMs",
            "pingOutputTokens",
            "keepalive",
            "summaryRatio",
            "summaryMaxTokens",
            "instructionTokens",
            "returnModel",
            "keepWarmBudget",
            "keepWarmTiers",
        ];
        if let Some(k) = f.map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), format!("is not a simulate option (expected {})", KEYS.join(", "))));
        }
        let mut o = SimulateOptions::default();
        if let Some(b) = f.opt_str("tierBilling")? {
            o.tier_billing = match b {
                "written" => TierBilling::Written,
                "prefix" => TierBilling::Prefix,
                _ => return Err(Error::invalid(f.p("tierBilling"), format!("expected \"written\" or \"prefix\", got {b:?}"))),
            };
        }
        if let Some(m) = f.opt_u64("marginMs")? {
            o.margin_ms = m;
        }
        if let Some(b) = f.opt_f64("keepWarmBudget")? {
            o.keepalive_budget = crate::clock::keepalive_budget(b, &f.p("keepWarmBudget"))?;
        }
        if let Some(n) = f.opt_u64("pingOutputTokens")? {
            o.ping_output_tokens = Some(n);
        }
        if let Some(k) = f.opt_bool("keepalive")? {
            o.keepalive = k;
        }
        if let Some(k) = f.opt_bool("keepWarmTiers")? {
            o.keep_warm_tiers = k;
        }
        if let Some(r) = f.opt_f64("summaryRatio")? {
            if !(0.0..=1.0).contains(&r) {
                return Err(Error::invalid(f.p("summaryRatio"), format!("must be in [0, 1], got {r}")));
            }
            o.summary_ratio = r;
        }
        if let Some(n) = f.opt_u64("summaryMaxTokens")? {
            o.summary_max_tokens = n;
        }
        if let Some(r) = f.opt_f64("retainedShare")? {
            if !(0.0..1.0).contains(&r) {
                return Err(Error::invalid(f.p("retainedShare"), format!("must be in [0, 1), got {r}")));
            }
            o.retained_share = r;
        }
        if let Some(n) = f.opt_u64("instructionTokens")? {
            o.instruction_tokens = n;
        }
        if let Some(m) = f.opt_value("returnModel")? {
            o.return_model = ReturnModelSpec::from_value(m, &f.p("returnModel"))?;
        }
        Ok(o)
    }

    /// The options as JSON (the report's `assumptions`).
    pub fn to_value(&self) -> Value {
        json!({
            "tierBilling": self.tier_billing,
            "marginMs": self.margin_ms,
            "pingOutputTokens": self.ping_output_tokens,
            "keepalive": self.keepalive,
            "summaryRatio": self.summary_ratio,
            "summaryMaxTokens": self.summary_max_tokens,
            "retainedShare": self.retained_share,
            "instructionTokens": self.instruction_tokens,
            "returnModel": self.return_model,
            "keepWarmBudget": self.keepalive_budget,
            "keepWarmTiers": self.keep_warm_tiers,
        })
    }
}

/// What a simulation prices with: the host's price table and cache-rule overrides, and the
/// options.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Prices per provider or model ([`PriceTable`]); every request needs one.
    pub prices: PriceTable,
    /// Overrides of the providers' cache rules.
    pub cache_rules: CacheRules,
    /// The simulation's assumptions.
    pub options: SimulateOptions,
}

/// What one policy cost on a timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyResult {
    /// Everything: the requests, the keep-warm requests, the summarisation requests.
    pub cost: f64,
    /// The keep-warm requests sent.
    pub pings: u64,
    /// What they cost.
    pub ping_cost: f64,
    /// The compactions before expiry.
    pub compactions: u64,
    /// What their summarisation requests cost.
    pub compaction_cost: f64,
    /// The requests that found their prefix expired.
    pub cold_returns: u64,
    /// The requests written at another tier than recorded.
    pub tier_writes: u64,
    /// What the policy spent after the last request, on a host that never came back (the
    /// online clock's keep-warm and summarisation requests before it let the cache expire;
    /// included in `cost`).
    pub abandoned_cost: f64,
}

impl PolicyResult {
    fn add(&mut self, o: &PolicyResult) {
        self.cost += o.cost;
        self.pings += o.pings;
        self.ping_cost += o.ping_cost;
        self.compactions += o.compactions;
        self.compaction_cost += o.compaction_cost;
        self.cold_returns += o.cold_returns;
        self.tier_writes += o.tier_writes;
        self.abandoned_cost += o.abandoned_cost;
    }
}

/// The five policies' results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// What was recorded.
    pub threshold: PolicyResult,
    /// The online clock.
    pub clock: PolicyResult,
    /// The clairvoyant optimum over the same actions.
    pub optimal: PolicyResult,
    /// The online clock, compaction before expiry allowed.
    pub clock_compact: PolicyResult,
    /// The clairvoyant optimum, compaction before expiry allowed.
    pub optimal_compact: PolicyResult,
}

fn ratio(a: f64, b: f64) -> Value {
    if b > 0.0 {
        json!(a / b)
    } else {
        Value::Null
    }
}

impl Policies {
    fn add(&mut self, o: &Policies) {
        self.threshold.add(&o.threshold);
        self.clock.add(&o.clock);
        self.optimal.add(&o.optimal);
        self.clock_compact.add(&o.clock_compact);
        self.optimal_compact.add(&o.optimal_compact);
    }

    /// `{"threshold": {...}, "clock": {...}, ...}`, each with its `ratio` to its optimum
    /// (`optimal`, or `optimal+compact` for the compacting ones) and `vsThreshold` (its cost ÷
    /// the recorded one).
    pub fn to_value(&self) -> Value {
        let one = |p: &PolicyResult, optimum: f64| {
            let mut v = serde_json::to_value(p).expect("a result serialises");
            v["ratio"] = ratio(p.cost, optimum);
            v["vsThreshold"] = ratio(p.cost, self.threshold.cost);
            v
        };
        json!({
            "threshold": one(&self.threshold, self.optimal.cost),
            "clock": one(&self.clock, self.optimal.cost),
            "optimal": one(&self.optimal, self.optimal.cost),
            "clock+compact": one(&self.clock_compact, self.optimal_compact.cost),
            "optimal+compact": one(&self.optimal_compact, self.optimal_compact.cost),
        })
    }
}

/// One timeline's simulation.
#[derive(Clone, Debug)]
pub struct TimelineReport {
    /// The session (see [`Timeline::session`]).
    pub session: String,
    /// The source format's name.
    pub source: &'static str,
    /// The requests replayed (keep-warm requests of the recording excluded).
    pub requests: usize,
    /// The gaps long enough for the clock to act (within its margin of the recorded TTL).
    pub pauses: usize,
    /// From the first request to the last, ms.
    pub span_ms: u64,
    /// Each policy's cost.
    pub policies: Policies,
    /// What the reader left out.
    pub notes: Vec<String>,
}

impl TimelineReport {
    /// The JSON form (docs/simulate.md).
    pub fn to_value(&self) -> Value {
        json!({
            "session": self.session, "source": self.source, "requests": self.requests, "pauses": self.pauses,
            "spanMs": self.span_ms, "policies": self.policies.to_value(), "notes": self.notes,
        })
    }
}

/// The aggregate of several timelines' simulations.
pub fn aggregate(reports: &[TimelineReport]) -> Value {
    let mut p = Policies::default();
    for r in reports {
        p.add(&r.policies);
    }
    json!({
        "timelines": reports.len(),
        "requests": reports.iter().map(|r| r.requests).sum::<usize>(),
        "pauses": reports.iter().map(|r| r.pauses).sum::<usize>(),
        "policies": p.to_value(),
    })
}

/// The tier a request is written at: as recorded, or one the policy chose (an index into the
/// request's tiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TierChoice {
    Recorded,
    Named(usize),
}

/// The state of the cache when a request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Return {
    /// The first request: as recorded.
    First,
    /// The previous request's prefix is warm.
    Warm,
    /// It expired.
    Cold,
    /// A compaction replaced the context; its head is warm.
    CompactedWarm,
    /// A compaction replaced the context; its head expired too.
    CompactedCold,
}

/// One request, prepared.
pub(super) struct Step<'a> {
    pub(super) req: &'a TimedRequest,
    pub(super) price: &'a Price,
    /// Cacheable prompt: reads and writes (all the prompt when writes are not reported).
    a: u64,
    writes_reported: bool,
    /// The recorded tier's name (`5m`, `1h`, `default`) and the TTL it leaves the prefix with.
    rec_tier: &'static str,
    rec_ttl: Option<u64>,
    /// The recorded request found its prefix warm (not expired).
    pub(super) rec_warm: bool,
    /// It read its prefix after a gap longer than the recorded TTL (the cache held).
    held: bool,
    /// What it reads when warm.
    warm_read: u64,
    /// The tiers a policy may write it at.
    tiers: Vec<Tier>,
    /// The output limit of a keep-warm request replaying it.
    ping_output: u64,
}

/// A policy's state after a request.
#[derive(Clone, Debug)]
pub(super) struct State {
    tier: TierChoice,
    /// Tokens every later request carries less (compactions before expiry).
    r: u64,
    /// The last request's prompt and writes.
    pub(super) w: u64,
    written: u64,
    /// What the requests after the first wrote, and how many they were.
    written_sum: u64,
    writes: u64,
    stats: PolicyResult,
}

/// What the online clock did during one gap.
pub(super) struct ClockRun {
    /// Its decisions, in order.
    pub(super) decisions: Vec<Decision>,
    /// The keep-warm requests it sent.
    pub(super) pings: u64,
    /// When it compacted, if it did.
    pub(super) compacted_at: Option<u64>,
    /// When the cache was last used (the request, or the last keep-warm request).
    pub(super) touched_at: u64,
    /// What its keep-warm requests cost (the first at a longer tier may cost more).
    pub(super) ping_cost: f64,
    /// The TTL in force at the end of the gap (a keep-warm request at a longer tier set it).
    pub(super) ttl_ms: Option<u64>,
    /// The figures it decided with first (the request after the gap is priced with them).
    pub(super) figures: CacheFigures,
}

/// What a policy does in one gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GapAction {
    Expire,
    KeepWarm,
    /// Keep warm, the first keep-warm request at this tier (an index into the figures' tiers).
    KeepWarmAt(usize),
    /// Compact after this many keep-warm requests.
    Compact(u64),
}

pub(super) struct Sim<'a> {
    pub(super) steps: Vec<Step<'a>>,
    head: u64,
    o: &'a SimulateOptions,
}

pub(super) fn prepare<'a>(t: &'a Timeline, settings: &'a Settings) -> Result<Sim<'a>> {
    let mut steps: Vec<Step<'a>> = Vec::new();
    let mut prev_ttl: Option<Option<u64>> = None;
    for req in t.requests.iter().filter(|r| r.kind != RequestKind::Keepalive) {
        let price = settings.prices.price(&req.provider, &req.model).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "no price for {}/{} (request at {}): add the model, or its provider, to the price table",
                    req.provider, req.model, req.at
                ),
            )
        })?;
        let u = &req.usage;
        let writes_reported = u.cache_write_tokens.is_some();
        let read = u.cache_read_tokens.unwrap_or(0);
        let a = read + if writes_reported { u.cache_write_tokens.unwrap_or(0) } else { u.input_tokens };
        // The tier as `explain` and the agent's clock name it: Anthropic's 5-minute or 1-hour
        // tier (1-hour when the request wrote at it), one tier (`default`) elsewhere.
        let anthropic = req.provider == "anthropic";
        let one_hour = u.cache_write_1h_tokens.unwrap_or(0) > 0;
        let rec_tier = match (anthropic, one_hour) {
            (false, _) => "default",
            (true, true) => "1h",
            (true, false) => "5m",
        };
        let rule = |one_hour: bool| {
            settings.cache_rules.rule(&CacheSettings { provider: &req.provider, model: &req.model, config: None, wrote_one_hour: one_hour })
        };
        let written = u.cache_write_tokens.unwrap_or(0);
        // A request that wrote nothing leaves its prefix at the tier it read it from.
        let rec_ttl = match prev_ttl {
            Some(p) if writes_reported && written == 0 => p,
            _ => rule(one_hour).ttl_ms,
        };
        // The tiers a policy may choose: the clock's ([`offered_tiers`]), for a source that
        // reports the writes they split.
        let tiers = if writes_reported { offered_tiers(&req.provider, price, |h| rule(h).ttl_ms) } else { Vec::new() };
        let ping_output =
            settings.options.ping_output_tokens.unwrap_or_else(|| keepalive_max_tokens(None, &CallConfig::new(&req.provider, &req.model)));
        let (rec_warm, held, warm_read) = match steps.last() {
            None => (true, false, read),
            Some(p) => {
                let gap = req.time.saturating_sub(p.req.time);
                let expected = p.a.min(a);
                let over = p.rec_ttl.is_some_and(|t| gap > t);
                let expired = over && (read as u128) * 100 < (expected as u128) * 99;
                if expired {
                    (false, false, expected.max(read))
                } else {
                    (true, over, read)
                }
            }
        };
        prev_ttl = Some(rec_ttl);
        steps.push(Step { req, price, a, writes_reported, rec_tier, rec_ttl, rec_warm, held, warm_read, tiers, ping_output });
    }
    let head = steps.first().map_or(0, |s| {
        if s.req.usage.cache_read_tokens.unwrap_or(0) > 0 {
            s.req.usage.cache_read_tokens.unwrap_or(0)
        } else {
            s.a
        }
    });
    Ok(Sim { steps, head, o: &settings.options })
}

impl<'a> Sim<'a> {
    fn tier_of(&self, i: usize, t: TierChoice) -> (&str, Option<u64>) {
        let s = &self.steps[i];
        match t {
            TierChoice::Recorded => (s.rec_tier, s.rec_ttl),
            TierChoice::Named(k) => (&s.tiers[k].name, Some(s.tiers[k].ttl_ms)),
        }
    }

    fn choices(&self, i: usize) -> Vec<TierChoice> {
        std::iter::once(TierChoice::Recorded).chain((0..self.steps[i].tiers.len()).map(TierChoice::Named)).collect()
    }

    /// Request `i`'s usage in cache state `ret`, `r` tokens shorter, written at `tier`
    /// (`rewrite`: its warm prefix is written again, [`TierBilling::Prefix`]).
    fn usage(&self, i: usize, ret: Return, r: u64, tier: TierChoice, rewrite: bool) -> Usage {
        let s = &self.steps[i];
        let rec = &s.req.usage;
        let rec_read = rec.cache_read_tokens.unwrap_or(0);
        let a = if r == 0 { s.a } else { s.a.saturating_sub(r).max(self.head.min(s.a)) };
        let read = match ret {
            _ if rewrite => 0,
            Return::First => rec_read.min(a),
            Return::Warm => s.warm_read.saturating_sub(r).min(a),
            Return::Cold if s.rec_warm => 0,
            Return::Cold => rec_read.min(a),
            Return::CompactedWarm => self.head.min(a),
            Return::CompactedCold => 0,
        };
        if r == 0 && tier == TierChoice::Recorded && read == rec_read {
            return rec.clone();
        }
        let write = a - read;
        let mut u = rec.clone();
        u.cache_read_tokens = Some(read);
        if s.writes_reported {
            u.cache_write_tokens = Some(write);
            let (w5, w1) = match self.tier_of(i, tier).0 {
                "5m" => (Some(write), Some(0)),
                "1h" => (Some(0), Some(write)),
                _ => (None, None),
            };
            u.cache_write_5m_tokens = w5;
            u.cache_write_1h_tokens = w1;
        } else {
            u.input_tokens = write;
        }
        u
    }

    /// The clock's figures for the gap after request `j` in state `st`.
    pub(super) fn figures(&self, j: usize, st: &State, compact: bool) -> CacheFigures {
        let s = &self.steps[j];
        let (tier, ttl) = self.tier_of(j, st.tier);
        let compaction = (compact && ttl.is_some()).then(|| {
            // The context: the warm prefix and the reply. The compaction keeps the head and a
            // tail (at least the reply, which is not cached yet) and summarises the rest.
            let context = st.w + s.req.usage.output_tokens;
            let head = self.head.min(st.w);
            let tail = ((context as f64 * self.o.retained_share).round() as u64).max(context - st.w).min(context - head);
            let region = context - head - tail;
            let summary = ((region as f64 * self.o.summary_ratio).ceil() as u64).min(self.o.summary_max_tokens);
            CompactionFigures {
                read_tokens: head + region,
                instruction_tokens: self.o.instruction_tokens,
                summary_tokens: summary,
                head_tokens: head,
                compacted_tokens: head + summary + tail,
                necessary: false,
            }
        });
        CacheFigures {
            warm_tokens: st.w,
            context_tokens: st.w + s.req.usage.output_tokens,
            written_tokens: st.written,
            mean_written_tokens: (st.writes > 0).then(|| st.written_sum / st.writes),
            ttl_ms: ttl,
            tier: tier.to_string(),
            tiers: s.tiers.clone(),
            tier_billing: self.o.tier_billing,
            rates: Rates::of(s.price, tier),
            keepalive: self.o.keepalive,
            ping_output_tokens: s.ping_output,
            margin_ms: self.o.margin_ms,
            compaction,
            // What the requests have cost so far (keep-warm and summarisation requests left
            // out, as the agent's clock counts it).
            session_cost: Some(st.stats.cost - st.stats.ping_cost - st.stats.compaction_cost),
            keepalive_budget: Some(self.o.keepalive_budget),
            keep_warm_tiers: self.o.keep_warm_tiers,
            tier_before_pause: true,
        }
    }

    /// The first request, written at `tier`.
    pub(super) fn first(&self, tier: TierChoice) -> State {
        let u = self.usage(0, Return::First, 0, tier, false);
        let stats = PolicyResult {
            cost: self.steps[0].price.cost(&u).total,
            tier_writes: u64::from(tier != TierChoice::Recorded),
            ..Default::default()
        };
        State { tier, r: 0, w: u.prompt_tokens(), written: u.cache_write_tokens.unwrap_or(0), written_sum: 0, writes: 0, stats }
    }

    /// Request `j + 1` arriving in state `ret`, `r` tokens shorter, written at `tier`; `from` is
    /// the state after request `j`, what the gap's actions cost already in its `stats`.
    pub(super) fn arrive(&self, j: usize, f: &CacheFigures, from: State, ret: Return, r: u64, tier: TierChoice) -> State {
        let mut stats = from.stats;
        let i = j + 1;
        let s = &self.steps[i];
        let r = if s.req.compacted_before { 0 } else { r };
        let rewrite = self.o.tier_billing == TierBilling::Prefix
            && matches!(ret, Return::Warm | Return::CompactedWarm)
            && self.tier_of(i, tier).0 != f.tier;
        let u = self.usage(i, ret, r, tier, rewrite);
        stats.cost += s.price.cost(&u).total;
        stats.cold_returns += u64::from(matches!(ret, Return::Cold | Return::CompactedCold));
        stats.tier_writes += u64::from(tier != TierChoice::Recorded);
        let written = u.cache_write_tokens.unwrap_or(0);
        State { tier, r, w: u.prompt_tokens(), written, written_sum: from.written_sum + written, writes: from.writes + 1, stats }
    }

    /// Whether the prefix written after request `j` in state `st` is warm `gap` later with
    /// nothing done (or the provider held it longer than its rule, as recorded).
    fn warm_after(&self, j: usize, st: &State, ttl: Option<u64>, since_touch: u64) -> bool {
        ttl.is_none_or(|t| since_touch <= t) || (self.steps[j + 1].held && st.tier == TierChoice::Recorded)
    }

    /// The compaction's reduction: what the context loses.
    fn reduced(&self, st: &State, f: &CacheFigures) -> u64 {
        let c = f.compaction.as_ref().expect("compaction figures");
        st.r + f.context_tokens.saturating_sub(c.compacted_tokens)
    }

    /// The clairvoyant transition: `action` in the gap after request `j`, then request `j + 1`
    /// written at `tier`. `None` when the action does not apply (nothing to keep warm, no
    /// decision point before the return).
    fn transition(&self, j: usize, st: &State, f: &CacheFigures, action: GapAction, tier: TierChoice) -> Option<State> {
        let g = self.steps[j + 1].req.time.saturating_sub(self.steps[j].req.time);
        let mut from = st.clone();
        let stats = &mut from.stats;
        match action {
            GapAction::Expire => {
                let ret = if self.warm_after(j, st, f.ttl_ms, g) { Return::Warm } else { Return::Cold };
                Some(self.arrive(j, f, from, ret, st.r, tier))
            }
            GapAction::KeepWarm => {
                let n = f.pings_for(g);
                if !f.keepalive || n == 0 || self.warm_after(j, st, f.ttl_ms, g) {
                    return None;
                }
                stats.pings += n;
                stats.ping_cost += n as f64 * f.ping_cost();
                stats.cost += n as f64 * f.ping_cost();
                Some(self.arrive(j, f, from, Return::Warm, st.r, tier))
            }
            GapAction::KeepWarmAt(i) => {
                let t = &f.tiers[i];
                if self.warm_after(j, st, f.ttl_ms, g) {
                    return None;
                }
                let n = f.pings_for_at(t, g);
                let c = f.keep_warm_cost_at(t, g);
                stats.pings += n;
                stats.ping_cost += c;
                stats.cost += c;
                Some(self.arrive(j, f, from, Return::Warm, st.r, tier))
            }
            GapAction::Compact(k) => {
                let ttl = f.ttl_ms?;
                let summary = f.compaction_cost()?;
                let at = ttl - f.margin() + k * f.ping_period()?;
                if at >= g || (k > 0 && !f.keepalive) {
                    return None;
                }
                stats.pings += k;
                stats.ping_cost += k as f64 * f.ping_cost();
                stats.compactions += 1;
                stats.compaction_cost += summary;
                stats.cost += k as f64 * f.ping_cost() + summary;
                let ret = if g - at <= ttl { Return::CompactedWarm } else { Return::CompactedCold };
                Some(self.arrive(j, f, from, ret, self.reduced(st, f), tier))
            }
        }
    }

    /// The gap actions the optimum weighs after request `j` (see the module docs).
    fn actions(&self, j: usize, f: &CacheFigures) -> Vec<GapAction> {
        let mut out = vec![GapAction::Expire, GapAction::KeepWarm];
        out.extend(f.longer_tiers().map(|(i, _)| GapAction::KeepWarmAt(i)));
        if let (Some(ttl), Some(_), Some(period)) = (f.ttl_ms, f.compaction.as_ref(), f.ping_period()) {
            out.push(GapAction::Compact(0));
            let g = self.steps[j + 1].req.time.saturating_sub(self.steps[j].req.time);
            let first = ttl - f.margin();
            // The last decision point from which the compacted head is warm at the return.
            if f.keepalive && period > 0 && g > ttl + first {
                out.push(GapAction::Compact((g - ttl - first).div_ceil(period)));
            }
        }
        out
    }

    /// The clairvoyant optimum (see the module docs).
    fn optimal(&self, compact: bool) -> PolicyResult {
        if self.steps.is_empty() {
            return PolicyResult::default();
        }
        let mut states: Vec<State> = self.choices(0).into_iter().map(|t| self.first(t)).collect();
        for j in 0..self.steps.len() - 1 {
            let mut next = Vec::new();
            for st in &states {
                let f = self.figures(j, st, compact);
                for action in self.actions(j, &f) {
                    for tier in self.choices(j + 1) {
                        next.extend(self.transition(j, st, &f, action, tier));
                    }
                }
            }
            states = prune(next);
        }
        states.into_iter().min_by(|a, b| a.stats.cost.total_cmp(&b.stats.cost)).map(|s| s.stats).unwrap_or_default()
    }

    /// The online clock during the gap after request `j` in state `st` (see the module docs):
    /// asked right after the request, then at each `nextDecisionAt` before the next request.
    /// `learned`: the gaps so far; `chosen`: the tier it advised last (updated).
    pub(super) fn clock_gap(&self, j: usize, st: &State, compact: bool, learned: &[u64], chosen: &mut Option<String>) -> ClockRun {
        let start = self.steps[j].req.time;
        // After the last request: a host that never comes back.
        let back = self.steps.get(j + 1).map_or(u64::MAX, |s| s.req.time);
        let first = self.figures(j, st, compact);
        let mut f = first.clone();
        let model = self.o.return_model.model(learned);
        let mut timing = Timing { gap_start: start, touched_at: start, now: start, pings: 0 };
        let mut run = ClockRun {
            decisions: Vec::new(),
            pings: 0,
            compacted_at: None,
            touched_at: start,
            ping_cost: 0.0,
            ttl_ms: f.ttl_ms,
            figures: first,
        };
        loop {
            let d = decide(&f, &timing, &model);
            let next = d.next_decision_at;
            let action = d.decision;
            match action {
                Action::Tier => chosen.clone_from(&d.tier),
                // A let-expire names the tier of the rewrite when it changes it.
                Action::LetExpire if d.tier.is_some() => chosen.clone_from(&d.tier),
                Action::KeepWarm => {
                    run.pings += 1;
                    timing.pings = run.pings;
                    timing.touched_at = timing.now;
                    // At a longer tier: the cache is warm for that tier's TTL from now on.
                    match d.tier.as_deref().and_then(|n| f.tier_named(n)).cloned() {
                        Some(t) => {
                            run.ping_cost += f.ping_cost_at(&t);
                            f = f.kept_at(&t);
                        }
                        None => run.ping_cost += f.ping_cost(),
                    }
                }
                Action::Compact => run.compacted_at = Some(timing.now),
                Action::LetExpire | Action::None => {}
            }
            run.decisions.push(d);
            if matches!(action, Action::Compact | Action::LetExpire) {
                break;
            }
            match next {
                Some(t) if t > timing.now && t < back => timing.now = t,
                _ => break,
            }
        }
        run.touched_at = timing.touched_at;
        run.ttl_ms = f.ttl_ms;
        run
    }

    /// The online clock (see the module docs).
    fn clock(&self, compact: bool) -> PolicyResult {
        if self.steps.is_empty() {
            return PolicyResult::default();
        }
        let mut chosen: Option<String> = None;
        let choice = |i: usize, chosen: &Option<String>| match chosen {
            Some(name) => self.steps[i].tiers.iter().position(|t| &t.name == name).map_or(TierChoice::Recorded, TierChoice::Named),
            None => TierChoice::Recorded,
        };
        let mut st = self.first(TierChoice::Recorded);
        let mut learned: Vec<u64> = Vec::new();
        for j in 0..self.steps.len() - 1 {
            let (start, back) = (self.steps[j].req.time, self.steps[j + 1].req.time);
            let run = self.clock_gap(j, &st, compact, &learned, &mut chosen);
            learned.push(back - start);
            let f = &run.figures;
            let mut from = st.clone();
            let stats = &mut from.stats;
            stats.pings += run.pings;
            stats.ping_cost += run.ping_cost;
            stats.cost += run.ping_cost;
            let tier = choice(j + 1, &chosen);
            st = match (run.compacted_at, f.compaction_cost()) {
                (Some(at), Some(summary)) => {
                    stats.compactions += 1;
                    stats.compaction_cost += summary;
                    stats.cost += summary;
                    let ret = if f.ttl_ms.is_none_or(|t| back - at <= t) { Return::CompactedWarm } else { Return::CompactedCold };
                    let r = self.reduced(&st, f);
                    self.arrive(j, f, from, ret, r, tier)
                }
                _ => {
                    let ret = if self.warm_after(j, &st, run.ttl_ms, back - run.touched_at) { Return::Warm } else { Return::Cold };
                    self.arrive(j, f, from, ret, st.r, tier)
                }
            };
        }
        // After the last request the host never comes back: what the clock spends before it
        // lets the cache expire is paid for nothing.
        let last = self.steps.len() - 1;
        let run = self.clock_gap(last, &st, compact, &learned, &mut chosen);
        let f = &run.figures;
        let mut stats = st.stats;
        let spent = run.ping_cost + run.compacted_at.and_then(|_| f.compaction_cost()).unwrap_or(0.0);
        stats.pings += run.pings;
        stats.ping_cost += run.ping_cost;
        if let (Some(_), Some(summary)) = (run.compacted_at, f.compaction_cost()) {
            stats.compactions += 1;
            stats.compaction_cost += summary;
        }
        stats.cost += spent;
        stats.abandoned_cost += spent;
        stats
    }

    /// What was recorded, through the same accounting (equal to the recorded bill: a test
    /// checks it).
    fn recorded(&self) -> PolicyResult {
        self.recorded_states().pop().map(|s| s.stats).unwrap_or_default()
    }

    /// The state after each request, as recorded.
    pub(super) fn recorded_states(&self) -> Vec<State> {
        let mut out: Vec<State> = Vec::with_capacity(self.steps.len());
        if self.steps.is_empty() {
            return out;
        }
        out.push(self.first(TierChoice::Recorded));
        for j in 0..self.steps.len() - 1 {
            let st = &out[j];
            let f = self.figures(j, st, false);
            let ret = if self.steps[j + 1].rec_warm { Return::Warm } else { Return::Cold };
            let next = self.arrive(j, &f, st.clone(), ret, 0, TierChoice::Recorded);
            out.push(next);
        }
        out
    }
}

/// Keeps, per tier, the states no other state dominates: one with at least its reduction and
/// at most its cost.
fn prune(mut states: Vec<State>) -> Vec<State> {
    let key = |t: TierChoice| match t {
        TierChoice::Recorded => 0,
        TierChoice::Named(k) => k + 1,
    };
    states.sort_by(|a, b| key(a.tier).cmp(&key(b.tier)).then(b.r.cmp(&a.r)).then(a.stats.cost.total_cmp(&b.stats.cost)));
    let mut out: Vec<State> = Vec::new();
    let mut best: Option<(usize, f64)> = None;
    for s in states {
        match best {
            Some((k, c)) if k == key(s.tier) && s.stats.cost >= c => {}
            _ => {
                best = Some((key(s.tier), s.stats.cost));
                out.push(s);
            }
        }
    }
    out
}

/// Simulates one timeline under every policy.
pub fn simulate(t: &Timeline, settings: &Settings) -> Result<TimelineReport> {
    let sim = prepare(t, settings)?;
    let mut threshold = sim.recorded();
    // What was paid for the recording's own keep-warm requests, if any.
    for r in t.requests.iter().filter(|r| r.kind == RequestKind::Keepalive) {
        if let Some(p) = settings.prices.price(&r.provider, &r.model) {
            let c = p.cost(&r.usage).total;
            threshold.cost += c;
            threshold.ping_cost += c;
            threshold.pings += 1;
        }
    }
    let pauses = sim
        .steps
        .windows(2)
        .filter(|w| {
            w[0].rec_ttl
                .is_some_and(|t| w[1].req.time.saturating_sub(w[0].req.time) > t.saturating_sub(settings.options.margin_ms.min(t / 2)))
        })
        .count();
    let policies = Policies {
        threshold,
        clock: sim.clock(false),
        optimal: sim.optimal(false),
        clock_compact: sim.clock(true),
        optimal_compact: sim.optimal(true),
    };
    let span_ms = match (sim.steps.first(), sim.steps.last()) {
        (Some(a), Some(b)) => b.req.time - a.req.time,
        _ => 0,
    };
    Ok(TimelineReport {
        session: t.session.clone(),
        source: t.source.as_str(),
        requests: sim.steps.len(),
        pauses,
        span_ms,
        policies,
        notes: t.notes.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Source;
    use super::*;
    use serde_json::json;

    const MIN: u64 = 60_000;

    fn table() -> PriceTable {
        PriceTable::from_value(&json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}))
            .unwrap()
    }

    fn settings() -> Settings {
        Settings { prices: table(), ..Default::default() }
    }

    /// `s` without a keep-warm budget.
    fn no_budget(mut s: Settings) -> Settings {
        s.options.keepalive_budget = 1e9;
        s
    }

    #[test]
    fn the_keep_warm_budget_bounds_what_a_pause_stakes() {
        // Eight-minute pauses in a small session: unbounded, the clock keeps warm through them
        // and after the last request; with the default budget (5 % of what the requests have
        // cost so far) no pause stakes more than that, the last one included.
        let t = grown(&[5_000, 8 * MIN, 4_000, 8 * MIN, 3_000, 8 * MIN, 6_000]);
        let free = prepare(&t, &no_budget(five_minutes_only())).unwrap().clock(false);
        let s = five_minutes_only();
        let sim = prepare(&t, &s).unwrap();
        let c = sim.clock(false);
        assert!(c.pings < free.pings && c.abandoned_cost < free.abandoned_cost, "{c:?} {free:?}");
        let requests = c.cost - c.ping_cost - c.compaction_cost;
        assert!(c.abandoned_cost <= 0.05 * requests + 1e-12, "{c:?}");
        // Allowed to compact, it does not stake a compaction beyond the budget instead.
        let cc = sim.clock(true);
        let requests = cc.cost - cc.ping_cost - cc.compaction_cost;
        assert!(cc.abandoned_cost <= 0.05 * requests + 1e-12, "{cc:?}");
        // The decision says why: the budget and what it still allows.
        let last = sim.steps.len() - 1;
        let run = sim.clock_gap(last, &sim.recorded_states()[last], false, &[], &mut None);
        let d = run.decisions.last().unwrap();
        assert!(d.reason.contains("the keep-warm budget (5 % of the"), "{}", d.reason);
        // A host whose own model says it always returns is not bounded.
        let mut sure = five_minutes_only();
        sure.options.return_model =
            ReturnModelSpec { gaps_ms: Some(vec![8 * MIN]), never_returns: 0.0, learn: false, ..ReturnModelSpec::default() };
        let c = prepare(&t, &sure).unwrap().clock(false);
        assert_eq!(c.cold_returns, 0, "{c:?}");
    }

    /// Without the 1-hour tier: keeping warm and compacting are the only actions.
    fn five_minutes_only() -> Settings {
        let prices =
            PriceTable::from_value(&json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75}, "output": 15}}))
                .unwrap();
        Settings { prices, ..Default::default() }
    }

    /// A request at `min` minutes reading `read` and writing `write` (5-minute tier).
    fn req(ms: u64, read: u64, write: u64) -> TimedRequest {
        TimedRequest {
            time: 1_700_000_000_000 + ms,
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            kind: RequestKind::Conversation,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 200,
                cache_read_tokens: Some(read),
                cache_write_tokens: Some(write),
                cache_write_5m_tokens: Some(write),
                cache_write_1h_tokens: Some(0),
                ..Default::default()
            },
            compacted_before: false,
            at: format!("t{ms}"),
        }
    }

    fn timeline(requests: Vec<TimedRequest>) -> Timeline {
        Timeline { source: Source::ClaudeCode, session: "s".into(), requests, notes: Vec::new() }
    }

    /// A session that grows by 2,000 tokens a request; `gaps` in ms; a request after a gap
    /// longer than 5 minutes finds its prefix expired (as recorded).
    fn grown(gaps: &[u64]) -> Timeline {
        let mut out = vec![req(0, 10_000, 4_000)];
        let (mut t, mut ctx) = (0, 14_000u64);
        for &g in gaps {
            t += g;
            out.push(if g > 5 * MIN { req(t, 0, ctx + 2_000) } else { req(t, ctx, 2_000) });
            ctx += 2_000;
        }
        timeline(out)
    }

    fn recorded_cost(t: &Timeline, s: &Settings) -> f64 {
        t.requests.iter().map(|r| s.prices.price(&r.provider, &r.model).unwrap().cost(&r.usage).total).sum()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn the_recorded_policy_costs_what_was_billed() {
        let s = settings();
        let t = grown(&[5_000, 7 * MIN, 3_000, 40 * MIN, 2_000]);
        let r = simulate(&t, &s).unwrap();
        close(r.policies.threshold.cost, recorded_cost(&t, &s));
        assert_eq!(r.policies.threshold.cold_returns, 2);
        assert_eq!(r.pauses, 2);
    }

    #[test]
    fn without_pauses_the_clock_changes_nothing() {
        let s = settings();
        let t = grown(&[5_000, 12_000, 3_000, 90_000, 2_000, 4 * MIN, 20_000]);
        let r = simulate(&t, &s).unwrap();
        let p = &r.policies;
        assert_eq!(r.pauses, 0);
        for (name, c) in [("clock", &p.clock), ("clock+compact", &p.clock_compact)] {
            // The same requests at the same cost; what it spends after the last one (the host
            // never came back) is its only difference, and it is accounted.
            close(c.cost - c.abandoned_cost, p.threshold.cost);
            assert_eq!((c.tier_writes, c.cold_returns), (0, 0), "{name}: {c:?}");
            if c.abandoned_cost == 0.0 {
                assert_eq!((c.pings, c.compactions), (0, 0), "{name}: {c:?}");
            }
        }
    }

    #[test]
    fn what_the_clock_spends_on_a_host_that_never_returns_is_paid() {
        // The keep-warm mechanics without the budget (a session this small has spent little, so
        // the default budget allows few keep-warm requests: `the_keep_warm_budget_...` below).
        let s = no_budget(five_minutes_only());
        // Pauses of eight minutes: the clock learns to keep warm through them, and keeps warm
        // after the last request too, for a host that never comes back.
        let t = grown(&[5_000, 8 * MIN, 4_000, 8 * MIN, 3_000, 8 * MIN, 6_000]);
        let sim = prepare(&t, &s).unwrap();
        let c = sim.clock(false);
        let o = sim.optimal(false);
        assert!(c.abandoned_cost > 0.0, "{c:?}");
        assert_eq!(o.abandoned_cost, 0.0);
        // Every keep-warm request it sent is in its cost: those of the pauses (the default prior,
        // real sessions' gaps, expects most hosts back within minutes, so it keeps warm through
        // every pause) and those after the last request.
        let f = sim.figures(sim.steps.len() - 1, &sim.recorded_states()[sim.steps.len() - 1], false);
        let trailing = (c.abandoned_cost / f.ping_cost()).round() as u64;
        close(trailing as f64 * f.ping_cost(), c.abandoned_cost);
        assert!(trailing >= 1 && c.pings > trailing && c.cold_returns == 0, "{c:?}");
        assert!(c.cost > c.abandoned_cost && o.cost <= c.cost - c.abandoned_cost + 1e-12, "{c:?} {o:?}");
    }

    #[test]
    fn keeping_warm_through_a_short_pause_pays_and_the_optimum_bounds_everything() {
        let s = no_budget(five_minutes_only());
        // Ten-minute pauses: one keep-warm request saves a rewrite of the whole context.
        let t = grown(&[5_000, 10 * MIN, 4_000, 10 * MIN, 3_000, 10 * MIN, 6_000]);
        let r = simulate(&t, &s).unwrap();
        let p = &r.policies;
        assert!(p.optimal.cost < p.threshold.cost, "{p:?}");
        // Two keep-warm requests bridge each ten-minute pause (at 4.5 and 9 minutes).
        assert_eq!((p.optimal.pings, p.optimal.cold_returns), (6, 0), "{:?}", p.optimal);
        // With the hour tier, writing before each pause at it beats the keep-warm requests.
        let r = simulate(&t, &no_budget(settings())).unwrap();
        assert_eq!((r.policies.optimal.pings, r.policies.optimal.cold_returns), (0, 0), "{:?}", r.policies.optimal);
        assert!(r.policies.optimal.tier_writes > 0 && r.policies.optimal.cost < p.optimal.cost, "{:?}", r.policies.optimal);
        assert!(p.optimal.cost <= p.clock.cost + 1e-12, "{p:?}");
        assert!(p.optimal_compact.cost <= p.optimal.cost + 1e-12, "{p:?}");
        assert!(p.optimal_compact.cost <= p.clock_compact.cost + 1e-12, "{p:?}");
        assert!(p.clock.cost < p.threshold.cost, "{p:?}");
    }

    /// Every sequence of gap actions and tiers, evaluated with the same transitions.
    fn brute_force(sim: &Sim, compact: bool) -> f64 {
        fn go(sim: &Sim, j: usize, st: State, compact: bool, best: &mut f64) {
            if j + 1 == sim.steps.len() {
                *best = best.min(st.stats.cost);
                return;
            }
            let f = sim.figures(j, &st, compact);
            // Every number of keep-warm requests before a compaction, not only the two the
            // optimum weighs.
            let mut actions = vec![GapAction::Expire, GapAction::KeepWarm];
            actions.extend(f.longer_tiers().map(|(i, _)| GapAction::KeepWarmAt(i)));
            if compact {
                actions.extend((0..40).map(GapAction::Compact));
            }
            for a in actions {
                for tier in sim.choices(j + 1) {
                    if let Some(next) = sim.transition(j, &st, &f, a, tier) {
                        go(sim, j + 1, next, compact, best);
                    }
                }
            }
        }
        let mut best = f64::INFINITY;
        for t in sim.choices(0) {
            go(sim, 0, sim.first(t), compact, &mut best);
        }
        best
    }

    #[test]
    fn the_optimum_is_exact_against_brute_force() {
        let cases: [&[u64]; 6] = [
            &[7 * MIN, 2_000, 50 * MIN],
            &[20 * MIN, 70 * MIN, 5_000],
            &[4 * MIN + 40_000, 30 * MIN, 3 * 3_600_000],
            &[6 * MIN, 6 * MIN, 6 * MIN],
            &[2 * 3_600_000, 10_000, 9 * MIN],
            &[62 * MIN, 4 * MIN, 13 * MIN],
        ];
        for billing in [TierBilling::Written, TierBilling::Prefix] {
            let mut s = settings();
            s.options.tier_billing = billing;
            for gaps in cases {
                let t = grown(gaps);
                let sim = prepare(&t, &s).unwrap();
                for compact in [false, true] {
                    let dp = sim.optimal(compact).cost;
                    let bf = brute_force(&sim, compact);
                    close(dp, bf);
                    assert!(dp <= sim.clock(compact).cost + 1e-12);
                    assert!(dp <= sim.recorded().cost + 1e-12);
                }
            }
        }
    }

    #[test]
    fn compaction_before_expiry_shrinks_every_later_request() {
        let mut s = five_minutes_only();
        s.options.keepalive = false;
        // A large context and one long pause: compacting before expiry beats a full rewrite.
        let mut reqs = vec![req(0, 10_000, 90_000)];
        reqs.push(req(5_000, 100_000, 2_000));
        reqs.push(req(5_000 + 60 * MIN, 0, 104_000));
        reqs.push(req(10_000 + 60 * MIN, 104_000, 2_000));
        let t = timeline(reqs);
        let r = simulate(&t, &s).unwrap();
        let p = &r.policies;
        assert_eq!((p.optimal_compact.compactions, p.optimal_compact.cold_returns), (1, 1), "{:?}", p.optimal_compact);
        assert!(p.optimal_compact.cost < p.optimal.cost, "{p:?}");
        let sim = prepare(&t, &s).unwrap();
        // After the compaction the last request reads the compacted context, not 104k.
        let st = sim.first(TierChoice::Recorded);
        let f = sim.figures(0, &st, true);
        let st = sim.transition(0, &st, &f, GapAction::Expire, TierChoice::Recorded).unwrap();
        let f = sim.figures(1, &st, true);
        let st = sim.transition(1, &st, &f, GapAction::Compact(0), TierChoice::Recorded).unwrap();
        let c = f.compaction.as_ref().unwrap();
        // The context the compaction replaced was the last prompt (102,003) and its reply (200);
        // the request carries what came after them on top of the compacted context.
        assert_eq!(st.r, 102_203 - c.compacted_tokens);
        assert_eq!(st.w, c.compacted_tokens + (104_000 - 102_203) + 3, "{st:?} {c:?}");
    }

    #[test]
    fn a_session_that_pauses_long_and_often_takes_the_longer_tier_after_its_first_pause() {
        // Twenty-minute pauses after every third request.
        let gaps: Vec<u64> = (0..18).map(|k| if k % 3 == 2 { 20 * MIN } else { 5_000 + k * 1_000 }).collect();
        let t = grown(&gaps);
        let mut s = no_budget(settings());
        s.options.keep_warm_tiers = false;
        let r = simulate(&t, &s).unwrap();
        let p = &r.policies;
        // It lets the first pause expire (nothing to bet on yet), then writes at the hour tier.
        assert!(p.clock.tier_writes >= 5 && p.clock.cold_returns >= 1, "{:?}", p.clock);
        assert!(p.clock.cost < p.threshold.cost && p.optimal.cost <= p.clock.cost, "{p:?}");
        // Without the hour tier it keeps warm instead, and pays more.
        let mut five = no_budget(five_minutes_only());
        five.options.keep_warm_tiers = false;
        let five = simulate(&t, &five).unwrap();
        assert!(five.policies.clock.cost > p.clock.cost, "{:?} {:?}", five.policies.clock, p.clock);
        // When a keep-warm request may be sent at the hour tier, one bridges each pause from
        // its first (nothing written at the hour tier, no cold return): cheaper still, and no
        // better for the optimum than for the clock by as much.
        let up = simulate(&t, &no_budget(settings())).unwrap();
        let q = &up.policies;
        assert_eq!((q.clock.tier_writes, q.clock.cold_returns), (0, 0), "{:?}", q.clock);
        assert!(q.clock.pings >= 6, "{:?}", q.clock);
        assert!(q.clock.cost < p.clock.cost && q.optimal.cost <= q.clock.cost, "{:?} {:?}", q.clock, p.clock);
        assert!(q.clock.cost / q.optimal.cost < p.clock.cost / p.optimal.cost, "{q:?} {p:?}");
    }

    #[test]
    fn a_missing_price_names_the_request() {
        let t = timeline(vec![req(0, 10, 10)]);
        let s = Settings {
            prices: PriceTable::from_value(&json!({"openai": {"input": 1, "cachedInput": 0.1, "output": 2}})).unwrap(),
            ..Default::default()
        };
        let e = simulate(&t, &s).unwrap_err();
        assert_eq!(
            e.message(),
            "no price for anthropic/claude-sonnet-4-5 (request at t0): add the model, or its provider, to the price table"
        );
    }

    #[test]
    fn options_name_their_fields() {
        let o = SimulateOptions::from_value(&json!({"tierBilling": "prefix", "marginMs": 10000, "returnModel": {"neverReturns": 0.3}}))
            .unwrap();
        assert_eq!((o.tier_billing, o.margin_ms, o.return_model.never_returns), (TierBilling::Prefix, 10_000, 0.3));
        for (bad, msg) in [
            (json!({"tier": 1}), "options.tier: is not a simulate option"),
            (json!({"tierBilling": "all"}), "options.tierBilling: expected \"written\" or \"prefix\", got \"all\""),
            (json!({"summaryRatio": 2}), "options.summaryRatio: must be in [0, 1], got 2"),
            (json!({"returnModel": {"neverReturns": 1.5}}), "options.returnModel.neverReturns: must be in [0, 1), got 1.5"),
        ] {
            let e = SimulateOptions::from_value(&bad).unwrap_err();
            assert!(e.message().starts_with(msg), "{}", e.message());
        }
    }
}
