//! The cache clock of an agent: "what now?" for a given time, from the log alone (plus the
//! host's prices, cache rules and return-time model), and the actions it decides, each logged
//! so that `verify` rebuilds or recomputes it and `explain` prices it:
//!
//! - [`Agent::cache_clock`]: the clock's state and decision; an action decision (`compact`,
//!   `keep-warm`, `let-expire`, `tier`) is recorded as a `clock/decision` event with its
//!   figures, once per use of the cache.
//! - [`Agent::keepalive_body`] / [`Agent::keepalive_request`]: the keep-warm request (the last
//!   conversation request again, its output limit at the provider's minimum), logged as
//!   `clock/keepalive`; its answer goes through the ordinary record calls
//!   ([`Agent::record_body`], [`Agent::record_stream`], [`Agent::record_response`],
//!   [`Agent::report_provider_error`]) into `clock/keepalive-end`, never into the history.
//! - [`Agent::compact_idle`]: the cache-reusing compaction, started by the clock's `compact`
//!   decision (`compaction/start` with `trigger: "idle"` and the decision's seq).

use super::cost::{keepalive_budget, offered_tiers, CacheFigures, Rates, TierBilling, DEFAULT_KEEPALIVE_BUDGET};
use super::decide::{decide, Action, Decision};
use super::returns::ReturnModelSpec;
use super::track::{log_figures, CompactionParams};
use crate::agent::Agent;
use crate::cache_rules::{CacheRules, CacheSettings};
use crate::cancel::CancelToken;
use crate::compaction::{select_region, CompactionOutcome, Trigger};
use crate::error::{Error, ErrorKind, Result};
use crate::log::event::{types, NewEvent};
use crate::prices::PriceTable;
use crate::render::{CacheTtl, Renderer};
use crate::request::{digest, keepalive_envelope, routed_history, Body, PrefixBytes, Purpose, Request, RequestInfo};
use crate::types::{CallConfig, Fields, Message, Usage};
use serde::Serialize;
use serde_json::{json, Value};

/// How long before expiry the clock acts by default (`marginMs`): the time the request it sends
/// (a keep-warm request, a summarisation request) needs to reach the provider's cache, which it
/// reads when it starts. A keep-warm request reads a cached prefix and produces one token, and
/// is answered in seconds; 10 s leaves room for a slow network, a busy provider and a late
/// timer. The agent's clock raises it to the longest keep-warm round trip the session has
/// seen ([`super::ClockTrack::lead_ms`]); a host that knows its latency gives `marginMs`.
/// Acting earlier than needed is not free: a keep-warm request sent before a host that was
/// about to come back anyway is wasted (see docs/caching.md, "The cache clock").
pub const DEFAULT_MARGIN_MS: u64 = 10_000;

/// The default expected summary, as a share of the region it replaces.
pub const DEFAULT_SUMMARY_RATIO: f64 = 0.1;

/// The default smallest context for an advisable idle compaction, as a share of the policy's
/// context window.
pub const DEFAULT_MIN_CONTEXT_SHARE: f64 = 0.2;

/// The clock's compaction options (`compaction` in [`ClockOptions`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ClockCompaction {
    /// Whether the clock may decide to compact (default true; it also needs a compaction
    /// policy and a summariser).
    pub enabled: bool,
    /// Below this context (tokens) an advisable compaction is not offered (default 20 % of
    /// the policy's context window); a necessary one always is.
    pub min_context_tokens: Option<u64>,
    /// The expected summary, as a share of the region (default 0.1).
    pub summary_ratio: f64,
}

impl Default for ClockCompaction {
    fn default() -> Self {
        ClockCompaction { enabled: true, min_context_tokens: None, summary_ratio: DEFAULT_SUMMARY_RATIO }
    }
}

/// What a host asks the clock with (`lls_agent_cache_clock`'s options).
#[derive(Clone, Debug, Default)]
pub struct ClockOptions {
    /// The time to decide for (Unix ms); default now (tests give their own).
    pub now: Option<u64>,
    /// The host's prices (`crate::prices`); without a price for the model nothing is decided.
    pub prices: Option<PriceTable>,
    /// Overrides of the providers' cache rules (`crate::cache_rules`).
    pub cache_rules: CacheRules,
    /// The return-time model.
    pub return_model: ReturnModelSpec,
    /// How long before expiry the clock acts (default: [`super::ClockTrack::lead_ms`], from
    /// [`DEFAULT_MARGIN_MS`] and the session's keep-warm round trips).
    pub margin_ms: Option<u64>,
    /// How a longer-tier write after a hit is billed.
    pub tier_billing: TierBilling,
    /// Idle compaction.
    pub compaction: ClockCompaction,
    /// Whether an action decision is recorded in the log (default true).
    pub record: bool,
    /// The keep-warm budget: the most one pause may stake in keep-warm requests, as a share of
    /// what the session's requests have cost so far (default [`DEFAULT_KEEPALIVE_BUDGET`]).
    pub keepalive_budget: f64,
    /// Whether a keep-warm request may be sent at a longer tier than the one in force (default
    /// true; `docs/caching.md`, "Keeping warm at a longer tier").
    pub keep_warm_tiers: bool,
}

impl ClockOptions {
    /// The keys [`ClockOptions::from_value`] reads.
    pub const KEYS: [&'static str; 10] = [
        "now",
        "prices",
        "cacheRules",
        "returnModel",
        "marginMs",
        "tierBilling",
        "compaction",
        "record",
        "keepWarmBudget",
        "keepWarmTiers",
    ];

    /// Parses `{"now"?, "prices"?, "cacheRules"?, "returnModel"?, "marginMs"?, "tierBilling"?,
    /// "compaction"?: {"enabled"?, "minContextTokens"?, "summaryRatio"?}, "record"?,
    /// "keepWarmBudget"?, "keepWarmTiers"?}` (no options: `None`); errors name the field (`options.marginMs`,
    /// `prices.openai.input`, ...).
    pub fn from_value(v: Option<&Value>) -> Result<ClockOptions> {
        let mut o =
            ClockOptions { record: true, keepalive_budget: DEFAULT_KEEPALIVE_BUDGET, keep_warm_tiers: true, ..ClockOptions::default() };
        let Some(v) = v else { return Ok(o) };
        let f = Fields::of(v, "options")?;
        if let Some(k) = f.map.keys().find(|k| !Self::KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), format!("is not a cache clock option (expected {})", Self::KEYS.join(", "))));
        }
        o.now = f.opt_u64("now")?;
        o.prices = f.opt_value("prices")?.map(PriceTable::from_value).transpose()?;
        o.cache_rules = f.opt_value("cacheRules")?.map(CacheRules::from_value).transpose()?.unwrap_or_default();
        if let Some(m) = f.opt_value("returnModel")? {
            o.return_model = ReturnModelSpec::from_value(m, &f.p("returnModel"))?;
        }
        o.margin_ms = f.opt_u64("marginMs")?;
        if let Some(b) = f.opt_f64("keepWarmBudget")? {
            o.keepalive_budget = keepalive_budget(b, &f.p("keepWarmBudget"))?;
        }
        if let Some(k) = f.opt_bool("keepWarmTiers")? {
            o.keep_warm_tiers = k;
        }
        o.tier_billing = match f.opt_str("tierBilling")? {
            None | Some("written") => TierBilling::Written,
            Some("prefix") => TierBilling::Prefix,
            Some(other) => return Err(Error::invalid(f.p("tierBilling"), format!("expected \"written\" or \"prefix\", got {other:?}"))),
        };
        if let Some(c) = f.opt_value("compaction")? {
            let p = f.p("compaction");
            let c = Fields::of(c, &p)?;
            if let Some(k) = c.map.keys().find(|k| !["enabled", "minContextTokens", "summaryRatio"].contains(&k.as_str())) {
                return Err(Error::invalid(c.p(k), "is not a clock compaction option (expected enabled, minContextTokens, summaryRatio)"));
            }
            o.compaction.enabled = c.opt_bool("enabled")?.unwrap_or(true);
            o.compaction.min_context_tokens = c.opt_u64("minContextTokens")?;
            if let Some(r) = c.opt_f64("summaryRatio")? {
                if !(r > 0.0 && r < 1.0) {
                    return Err(Error::invalid(c.p("summaryRatio"), format!("must be in (0, 1), got {r}")));
                }
                o.compaction.summary_ratio = r;
            }
        }
        o.record = f.opt_bool("record")?.unwrap_or(true);
        Ok(o)
    }
}

/// The clock's view of the cache, as the log gives it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClockState {
    /// The provider and model of the last request.
    pub provider: String,
    /// See `provider`.
    pub model: String,
    /// When the last conversation request was sent (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_request_at: Option<u64>,
    /// When a request last used the cache (that one, a keep-warm request, a summarisation
    /// request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub touched_at: Option<u64>,
    /// The tier in force (`"5m"`, `"1h"`, `"default"`).
    pub tier: String,
    /// How long the cache stays warm after its last use: the tier's TTL, or the longer one a
    /// keep-warm request was sent at since the last request (absent: none documented).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The figures the decision priced (absent before the first request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figures: Option<CacheFigures>,
    /// Whether an idle compaction landed since the last request.
    pub compacted: bool,
}

/// What [`Agent::cache_clock`] answers (its JSON is `lls_agent_cache_clock`'s output): the
/// decision's fields ([`Decision`]), the `state`, and `recorded`, the seq of the
/// `clock/decision` event that holds this decision (written now or earlier for the same use of
/// the cache), when one does.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClockReport {
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// The clock's state.
    pub state: ClockState,
    /// The seq of the `clock/decision` that records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<u64>,
}

/// The output limit of a keep-warm request: the smallest the provider allows. The OpenAI
/// Responses API takes no `max_output_tokens` below 16; Anthropic needs `max_tokens` above a
/// thinking budget (`thinking.budget_tokens`); the others take 1.
pub fn keepalive_max_tokens(renderer: Option<Renderer>, config: &CallConfig) -> u64 {
    let budget = config.extra.get("thinking").and_then(|t| t.get("budget_tokens")).and_then(Value::as_u64);
    match renderer {
        Some(Renderer::OpenAiResponses) => 16,
        Some(Renderer::Anthropic) => budget.map_or(1, |b| b + 1),
        None if config.provider == "anthropic" => budget.map_or(1, |b| b + 1),
        None if config.provider == "openai-responses" => 16,
        _ => 1,
    }
}

/// A keep-warm request this instance built, waiting for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenKeepalive {
    /// The seq of its `clock/keepalive`.
    pub seq: u64,
}

fn none(at: u64, reason: impl Into<String>) -> Decision {
    Decision {
        decision: Action::None,
        tier: None,
        reason: reason.into(),
        at,
        warm_until: None,
        next_decision_at: None,
        return_probability: None,
        options: Vec::new(),
        break_even: Default::default(),
        returns: String::new(),
    }
}

impl Agent {
    /// The tier in force (`5m` or `1h` for Anthropic, `default` elsewhere), from the renderer's
    /// `cacheTtl` or, without one, from the last usage.
    fn clock_tier(&self, provider: &str, usage: Option<&Usage>) -> &'static str {
        if provider != "anthropic" {
            return "default";
        }
        let one_hour = match self.body.as_ref().and_then(|b| b.options().cache_ttl) {
            Some(t) => t == CacheTtl::OneHour,
            None => usage.and_then(|u| u.cache_write_1h_tokens).unwrap_or(0) > 0,
        };
        if one_hour {
            "1h"
        } else {
            "5m"
        }
    }

    /// "What now?" for the cache of this session (see the module docs and docs/caching.md, "The
    /// cache clock"): the state the log gives (when the last request was sent, the cache rule in
    /// force, the warm prefix, until when it is warm) and the decision for `options.now`. An
    /// action decision is recorded as `clock/decision` (unless `options.record` is false), once
    /// for each use of the cache: asking again returns it with the same `recorded` seq.
    /// Calls no host callback. Errors: `Disposed`; a store that refuses the record
    /// (`Storage`, `Conflict`, `ReadOnly`), which changes nothing.
    pub fn cache_clock(&mut self, options: &ClockOptions) -> Result<ClockReport> {
        self.ensure_live()?;
        let now = options.now.unwrap_or_else(crate::session::now_ms);
        let mut g = self.session.lock();
        g.catch_up_clock(&mut self.clock)?;
        let track = &self.clock;
        let st = g.log.state();
        let Some(header) = st.headers.current().cloned() else {
            let report = ClockReport {
                decision: none(now, "nothing to do: no request has been sent yet, so nothing is cached"),
                state: ClockState::default(),
                recorded: None,
            };
            return Ok(report);
        };
        let (provider, model) = (header.config.provider.clone(), header.config.model.clone());
        let last_usage = st.last_usage.as_ref().filter(|(seq, _)| track.last_step.is_some_and(|s| *seq > s.0)).map(|(_, u)| u);
        let tier = self.clock_tier(&provider, last_usage).to_string();
        let rules = &options.cache_rules;
        let ttl_of = |one_hour: bool| {
            rules
                .rule(&CacheSettings { provider: &provider, model: &model, config: Some(&header.config.extra), wrote_one_hour: one_hour })
                .ttl_ms
        };
        // A keep-warm request sent at a longer tier keeps the cache warm for that tier's TTL
        // until the next request (the conversation's own writes stay at the tier in force).
        let ttl_ms = ttl_of(track.kept_tier.as_deref().unwrap_or(&tier) == "1h");
        let mut state = ClockState {
            provider: provider.clone(),
            model: model.clone(),
            last_request_at: track.last_step.map(|s| s.1),
            touched_at: track.touched,
            tier: tier.clone(),
            ttl_ms,
            figures: None,
            compacted: track.compacted,
        };
        if st.open_turn.as_ref().is_some_and(|t| t.step_open) {
            return Ok(ClockReport { decision: none(now, "nothing to do: a request is in flight"), state, recorded: None });
        }
        let params = self.clock_params(&options.compaction);
        let Some(lf) = log_figures(&g.log, track, params.as_ref()) else {
            return Ok(ClockReport {
                decision: none(now, "nothing to do: no request has been sent yet, so nothing is cached"),
                state,
                recorded: None,
            });
        };
        let Some(price) = options.prices.as_ref().and_then(|p| p.price(&provider, &model)) else {
            let why = format!("nothing decided: the price table has no price for {provider}/{model} (give `prices`: the clock weighs costs, and the library has no prices of its own)");
            let mut d = none(now, why);
            d.warm_until = ttl_ms.zip(track.touched).map(|(t, at)| at + t);
            return Ok(ClockReport { decision: d, state, recorded: None });
        };
        let renderer = self.body.as_ref().map(|b| b.renderer());
        let figures = CacheFigures {
            warm_tokens: lf.warm_tokens,
            context_tokens: lf.context_tokens,
            written_tokens: lf.written_tokens,
            mean_written_tokens: lf.mean_written_tokens,
            ttl_ms,
            tier: tier.clone(),
            tiers: offered_tiers(&provider, price, ttl_of),
            tier_billing: options.tier_billing,
            rates: Rates::of(price, &tier),
            keepalive: lf.keepalive,
            ping_output_tokens: keepalive_max_tokens(renderer, &header.config),
            margin_ms: options.margin_ms.unwrap_or_else(|| track.lead_ms()),
            compaction: lf.compaction.clone(),
            session_cost: Some(price.cost(&track.billed).total),
            keepalive_budget: Some(options.keepalive_budget),
            keep_warm_tiers: options.keep_warm_tiers,
            tier_before_pause: true,
        };
        let timing = track.timing(now);
        let gaps = track.gaps();
        let decision = decide(&figures, &timing, &options.return_model.model(&gaps));
        state.figures = Some(figures.clone());
        let action = !matches!(decision.decision, Action::None);
        let mut recorded = if action { track.recorded(decision.decision.as_str(), decision.tier.as_deref()) } else { None };
        if action && recorded.is_none() && options.record {
            let mut data = serde_json::to_value(&decision).expect("a decision serialises");
            data["figures"] = serde_json::to_value(&figures).expect("figures serialise");
            data["timing"] = serde_json::to_value(timing).expect("timing serialises");
            data["returnModel"] = serde_json::to_value(&options.return_model).expect("a model serialises");
            data["learnedGaps"] = json!(if options.return_model.learn { gaps.len() } else { 0 });
            data["marginFrom"] = json!(if options.margin_ms.is_some() { "host" } else { "log" });
            data["provider"] = json!(provider);
            data["model"] = json!(model);
            if let Some(p) = &params {
                data["compactionPolicy"] = serde_json::to_value(p).expect("params serialise");
            }
            if decision.decision == Action::Compact {
                data["mechanism"] = json!("portable");
            }
            let seq = g.append(NewEvent::new(types::CLOCK_DECISION, data))?;
            recorded = Some(seq);
            g.catch_up_clock(&mut self.clock)?;
        }
        drop(g);
        Ok(ClockReport { decision, state, recorded })
    }

    /// The compaction the clock may price: with the option on, a policy for the model, and a
    /// summariser.
    fn clock_params(&self, c: &ClockCompaction) -> Option<CompactionParams> {
        if !c.enabled || self.summariser.is_none() {
            return None;
        }
        let p = self.current_policy()?;
        Some(CompactionParams {
            retained_tokens: p.retained_tokens(),
            summary_max_tokens: p.summary_max_tokens,
            threshold_tokens: p.threshold_tokens(),
            min_context_tokens: c.min_context_tokens.unwrap_or((p.context_window as f64 * DEFAULT_MIN_CONTEXT_SHARE) as u64),
            summary_ratio: c.summary_ratio,
        })
    }

    /// Builds the keep-warm request as the provider body (the agent's renderer; see the module
    /// docs): the last conversation request again, every cacheable byte the same, its output
    /// limit at the provider's minimum ([`keepalive_max_tokens`]), `purpose: "keepalive"`.
    /// Logged as `clock/keepalive` (its digest, size and output limit, and the seq of the
    /// request it replays); record its answer with the ordinary record calls. Errors (each
    /// changes nothing): `OutOfOrder` without a renderer, before the first request, while a
    /// request or a compaction is open, or when a compaction rewrote the history since the last
    /// request (its prefix is no longer the next request's); a store refusal.
    pub fn keepalive_body(&mut self) -> Result<Body> {
        self.ensure_live()?;
        if self.body.is_none() {
            return Err(crate::agent::no_renderer());
        }
        let (info, json) = self.build_keepalive(true)?;
        Ok(Body { json: crate::log::Text::terminated(json), info })
    }

    /// [`keepalive_body`](Self::keepalive_body) for a host that renders bodies itself: the
    /// keep-warm request's envelope (`purpose: "keepalive"`, no turn or step).
    pub fn keepalive_request(&mut self) -> Result<Request> {
        self.ensure_live()?;
        let (info, json) = self.build_keepalive(false)?;
        Ok(Request {
            digest: info.digest,
            json,
            turn: info.turn,
            step: info.step,
            instance: info.instance,
            prefix_len: info.prefix_len,
            message_count: info.message_count,
            shared_messages: info.shared_messages,
            step_seq: info.step_seq,
            betas: info.betas,
        })
    }

    fn build_keepalive(&mut self, body: bool) -> Result<(RequestInfo, String)> {
        let mut g = self.session.lock();
        g.catch_up_clock(&mut self.clock)?;
        let st = g.log.state();
        if st.open_turn.as_ref().is_some_and(|t| t.step_open) {
            return Err(Error::out_of_order("a request is open: a keep-warm request is sent between requests"));
        }
        if st.compaction.is_some() {
            return Err(Error::out_of_order("a compaction is open"));
        }
        let Some((routed, _)) = self.clock.last_step else {
            return Err(Error::out_of_order("no conversation request was sent yet: nothing is cached to keep warm"));
        };
        let header = st.headers.current().cloned().ok_or_else(|| Error::out_of_order("no request header is logged"))?;
        let Some(history) = routed_history(&g.log, routed) else {
            return Err(Error::out_of_order(
                "a compaction rewrote the history since the last request: its cached prefix is not the next request's, so there is nothing worth keeping warm",
            ));
        };
        let renderer = self.body.as_ref().map(|b| b.renderer());
        let max_tokens = keepalive_max_tokens(renderer, &header.config);
        let prefix = PrefixBytes::of(header.message_prefix.as_ref());
        let session_id = g.header.request_id().to_string();
        let betas = crate::compaction::native::anthropic_betas(
            self.route_format(),
            &header.config.extra,
            history.first().and_then(|d| crate::compaction::native::entry_checkpoint(d)).map(|(m, _)| m).as_ref(),
        );
        let envelope =
            String::from_utf8(keepalive_envelope(&header, &prefix, history, max_tokens, &session_id)).expect("an envelope is text");
        let message_count = prefix.messages.len() + history.len();
        let d = digest(envelope.as_bytes());
        // The tier the clock decided to keep warm at, if it recorded a keep-warm decision at a
        // longer tier since the cache was last used (docs/caching.md, "Keeping warm at a longer
        // tier"): the body's cache marks at that TTL.
        let tier = self.clock.keep_warm_tier().map(str::to_string);
        let ttl = tier.as_deref().and_then(CacheTtl::parse);
        // Rendered before anything is written: a body the renderer refuses changes nothing.
        let out = if body {
            self.body.as_ref().expect("checked").render_envelope_fresh(&envelope, prefix.messages.len(), ttl)?
        } else {
            envelope.clone()
        };
        let (turn, step) = g.event_at(routed)?.map_or((0, 0), |e| {
            (e.data.get("turn").and_then(Value::as_u64).unwrap_or(0), e.data.get("step").and_then(Value::as_u64).unwrap_or(0))
        });
        let mut data =
            json!({"replays": routed, "maxTokens": max_tokens, "requestDigest": d, "bytes": envelope.len(), "instance": self.instance});
        if let Some(t) = &tier {
            data["tier"] = json!(t);
        }
        let seq = g.append(NewEvent::new(types::CLOCK_KEEPALIVE, data))?;
        drop(g);
        self.keepalive = Some(OpenKeepalive { seq });
        let info = RequestInfo {
            instance: self.instance,
            turn,
            step,
            step_seq: seq,
            purpose: Purpose::Keepalive,
            prefix_len: prefix.messages.len(),
            message_count,
            shared_messages: message_count,
            envelope_len: envelope.len(),
            digest: d,
            betas,
        };
        Ok((info, out))
    }

    /// Records the answer of the open keep-warm request (`clock/keepalive-end`): the message
    /// and usage of a response, or a provider error. Returns its seq.
    pub(crate) fn record_keepalive(&mut self, message: Option<Message>, usage: Option<Usage>, error: Option<&str>) -> Result<u64> {
        let k = self.keepalive.ok_or_else(|| Error::out_of_order("no keep-warm request is waiting for its answer"))?;
        let mut data = json!({"request": k.seq, "outcome": if error.is_some() { "error" } else { "response" }});
        if let Some(m) = message {
            data["message"] = m.into_value();
        }
        if let Some(u) = &usage {
            data["usage"] = serde_json::to_value(u).expect("usage serialises");
        }
        if let Some(e) = error {
            data["error"] = e.into();
        }
        let seq = self.session.lock().append(NewEvent::new(types::CLOCK_KEEPALIVE_END, data))?;
        self.keepalive = None;
        Ok(seq)
    }

    /// Whether a keep-warm request of this instance waits for its answer.
    pub fn keepalive_open(&self) -> bool {
        self.keepalive.is_some()
    }

    /// Compacts because the cache clock decided so: the cache-reusing compaction
    /// ([`Agent::compact`]'s head region, as the gate selects it), with `trigger: "idle"` and the
    /// seq of the `clock/decision` it follows. `OutOfOrder` unless the clock's last decision
    /// since the cache was last used is `compact` (ask [`cache_clock`](Self::cache_clock)
    /// first); otherwise as [`Agent::compact`].
    pub fn compact_idle(&mut self, cancel: &CancelToken) -> Result<CompactionOutcome> {
        self.ensure_live()?;
        let decision = {
            let mut g = self.session.lock();
            g.catch_up_clock(&mut self.clock)?;
            self.clock.decisions.last().filter(|d| d.1 == "compact").map(|d| d.0)
        };
        let Some(decision) = decision else {
            return Err(Error::out_of_order(
                "the cache clock has not decided to compact since the cache was last used: ask it first (cache_clock)",
            ));
        };
        let policy = self
            .current_policy()
            .ok_or_else(|| Error::new(ErrorKind::InvalidPolicy, "an idle compaction needs a compaction policy for the model"))?;
        let (m, entries) = self.measure_surface()?;
        let region = select_region(&entries, self.meter.per_entry(), policy.retained_tokens())
            .ok_or_else(|| Error::new(ErrorKind::NothingToCompact, "nothing to compact"))?;
        let (op, _g) = self.op_token(cancel);
        self.keepalive = None;
        self.run_compaction(Trigger::Idle, region, &m, &policy, &op, None, Some(decision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_keepalive_output_limit_is_the_providers_smallest() {
        let plain = CallConfig::new("anthropic", "claude-sonnet-4-5");
        assert_eq!(keepalive_max_tokens(Some(Renderer::Anthropic), &plain), 1);
        let mut thinking = plain.clone();
        thinking.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 2048}));
        assert_eq!(keepalive_max_tokens(Some(Renderer::Anthropic), &thinking), 2049);
        assert_eq!(keepalive_max_tokens(None, &thinking), 2049);
        assert_eq!(keepalive_max_tokens(Some(Renderer::OpenAiResponses), &CallConfig::new("openai", "gpt-5")), 16);
        assert_eq!(keepalive_max_tokens(Some(Renderer::OpenAi), &CallConfig::new("llama.cpp", "m")), 1);
        assert_eq!(keepalive_max_tokens(Some(Renderer::Gemini), &CallConfig::new("gemini", "g")), 1);
    }

    #[test]
    fn no_options_is_every_default() {
        let o = ClockOptions::from_value(None).unwrap();
        assert!(o.record && o.compaction.enabled && o.prices.is_none() && o.now.is_none());
        assert_eq!(o.return_model, ReturnModelSpec::default());
    }
}
