//! Running a compaction: the gate, overflow recovery, manual compaction, and landing.

use super::{checkpoint_text, select_region, CompactionPolicy, Region, SummaryOutput, SummaryRequest, INSTRUCTION};
use crate::agent::Agent;
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::header::{EpochHeader, HeaderSnapshot, SnapshotReason};
use crate::log::event::{types, NewEvent, UserSource};
use crate::log::Derived;
use crate::observe::{self, Level, Observation};
use crate::prefix::context_event;
use crate::request::{compaction_envelope, digest, PrefixBytes};
use crate::tokens::meter::Measure;
use crate::tokens::{Countable, Estimator, TokenCounter};
use crate::types::Message;
use serde_json::json;
use std::sync::Arc;

/// What started a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The pressure gate before a request.
    Auto,
    /// A provider's context-overflow error.
    Overflow,
    /// The host asked for it.
    Manual,
    /// The route changed and the history starts with a native compaction block the new route
    /// cannot read (docs/compaction.md, "Route changes").
    RouteChange,
    /// The cache clock decided it during an idle pause (`crate::clock`).
    Idle,
}

impl Trigger {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Auto => "auto",
            Trigger::Overflow => "overflow",
            Trigger::Manual => "manual",
            Trigger::RouteChange => "route-change",
            Trigger::Idle => "idle",
        }
    }
}

/// How a compaction ended: its `compaction/end` event's `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The summary replaced the span.
    Landed,
    /// The summariser failed (or none is set), or storing the summary failed.
    Failed,
    /// The span changed while the summariser ran; the summary was dropped.
    Discarded,
    /// The compaction was cancelled (or the agent disposed) while it ran.
    Cancelled,
}

impl Outcome {
    /// The wire name (`"landed"`, `"failed"`, `"discarded"`, `"cancelled"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Landed => "landed",
            Outcome::Failed => "failed",
            Outcome::Discarded => "discarded",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Outcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// How a compaction ended. Its JSON (`Serialize`) is what `lls_agent_compact` returns:
/// `{"outcome", "span": [start, end], "seqs", "request": {"digest", "sharedMessages",
/// "messageCount"}, "error"?}`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionOutcome {
    /// How it ended.
    pub outcome: Outcome,
    /// The compacted span.
    pub region: Region,
    /// The summarisation request that was sent.
    pub request: SummaryRequestInfo,
    /// The error, when it did not land.
    pub error: Option<String>,
}

impl serde::Serialize for CompactionOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("outcome", &self.outcome)?;
        m.serialize_entry("span", &[self.region.start, self.region.end])?;
        m.serialize_entry("seqs", &self.region.seqs)?;
        m.serialize_entry("request", &self.request)?;
        if let Some(e) = &self.error {
            m.serialize_entry("error", e)?;
        }
        m.end()
    }
}

/// What a caller may want to know of the summarisation request (JSON: `{"digest",
/// "sharedMessages", "messageCount"}`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryRequestInfo {
    /// Digest of the request bytes.
    pub digest: String,
    /// Leading messages shared with the last routed request.
    pub shared_messages: usize,
    /// Messages in the request.
    pub message_count: usize,
}

impl Agent {
    pub(crate) fn counter_or_default(&self) -> Arc<dyn TokenCounter> {
        self.counter.clone().unwrap_or_else(|| Arc::new(Estimator))
    }

    /// The policy for the current model.
    pub(crate) fn current_policy(&self) -> Option<CompactionPolicy> {
        self.policies.for_model(&self.options.config.model).cloned()
    }

    /// Measures the prompt the next request would carry (live prefix included).
    pub fn measure(&mut self) -> Result<Measure> {
        let wanted = self.wanted_header();
        let counter = self.counter_or_default();
        let logged = self.anchored && self.session.with_log(|l| l.state().headers.current() == Some(&wanted));
        self.meter.measure(&counter, &self.session, &wanted, logged).map_err(|e| self.interrupted(e))
    }

    /// A cancel that came from disposing the instance is a dispose.
    pub(crate) fn interrupted(&self, e: Error) -> Error {
        if e.kind() == ErrorKind::Cancelled && self.is_disposed() {
            return Error::new(ErrorKind::Disposed, format!("the agent instance was disposed ({})", e.message()));
        }
        e
    }

    /// Measures, then reads the surface the measurement counted. The counter may call out to
    /// the host, which may append to the session meanwhile (a host token counter appending
    /// context, another thread), so the surface is read after the counter returned, never
    /// before, and only the part that was measured (the meter's counts are for exactly those
    /// entries) is returned: entries appended since join the retained tail.
    pub(crate) fn measure_surface(&mut self) -> Result<(Measure, Vec<Arc<Derived>>)> {
        for _ in 0..3 {
            let m = self.measure()?;
            let seqs = self.meter.seqs();
            let entries = self.session.with_log(|l| {
                let h = l.history().entries();
                let measured = h.len() >= seqs.len() && h.iter().zip(seqs).all(|(d, s)| d.seq == *s);
                measured.then(|| h[..seqs.len()].to_vec())
            });
            if let Some(entries) = entries {
                return Ok((m, entries));
            }
            // The surface was replaced after the measurement: measure again.
        }
        Err(Error::new(ErrorKind::Internal, "the surface kept changing while it was measured; try again"))
    }

    /// The pressure gate: compacts when the prompt exceeds the policy's threshold.
    pub(crate) fn gate(&mut self, op: &CancelToken, turn: u64) -> Result<()> {
        let Some(policy) = self.current_policy() else { return Ok(()) };
        // The provider compacts (native mechanism), or a native compaction is in flight.
        if self.native_gate(&policy, turn) {
            return Ok(());
        }
        let (m, entries) = match self.measure_surface() {
            Ok(measured) => measured,
            Err(e) => {
                // The request still goes out (unless this is a cancel or a dispose), unmeasured.
                if !matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Disposed) {
                    observe::emit(Level::Warn, || {
                        Observation::new(
                            "compaction-skipped",
                            Level::Warn,
                            format!("the gate could not measure the prompt, so it did not check the threshold: {}", e.message()),
                        )
                        .session(self.session.id())
                        .with("why", "the prompt could not be measured")
                        .with("error", e.message())
                        .with("contextWindow", policy.context_window)
                        .with("turn", turn)
                    });
                }
                return Err(e);
            }
        };
        let threshold = policy.threshold_tokens();
        if m.total <= threshold {
            return Ok(());
        }
        // What every gate observation says about the pressure.
        let pressure = |o: Observation| {
            o.with("tokens", m.total).with("threshold", threshold).with("contextWindow", policy.context_window).with("turn", turn)
        };
        let Some(region) = select_region(&entries, self.meter.per_entry(), policy.retained_tokens()) else {
            let why = "nothing is compactable: only the retained tail (or a lone earlier checkpoint) is on the surface";
            observe::emit(Level::Warn, || {
                pressure(Observation::new(
                    "compaction-skipped",
                    Level::Warn,
                    format!("the prompt is {} tokens, over the threshold of {threshold}, but {why}", m.total),
                ))
                .session(self.session.id())
                .with("why", why)
            });
            self.observe_over_threshold(&m, threshold, &policy, turn, why);
            return Ok(());
        };
        observe::emit(Level::Info, || {
            pressure(Observation::new(
                "compaction-triggered",
                Level::Info,
                format!(
                    "the prompt is {} tokens, over the threshold of {threshold} ({} x {}): compacting surface messages {} to {}",
                    m.total, policy.threshold, policy.context_window, region.start, region.end
                ),
            ))
            .session(self.session.id())
            .with("span", json!([region.start, region.end]))
        });
        let out = match self.run_compaction(Trigger::Auto, region, &m, &policy, op, None, None) {
            Ok(out) => out,
            // Cancelled, disposed, or the store refused a write: the call fails (no request).
            Err(e) if matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Disposed) || crate::agent::is_store_refusal(e.kind()) => {
                return Err(e)
            }
            Err(e) => {
                observe::emit(Level::Error, || {
                    Observation::new("compaction-failed", Level::Error, format!("the automatic compaction failed: {}", e.message()))
                        .session(self.session.id())
                        .with("trigger", Trigger::Auto.as_str())
                        .with("error", e.message())
                        .with("attempts", 0u64)
                });
                self.observe_over_threshold(&m, threshold, &policy, turn, e.message());
                return Err(e);
            }
        };
        match out.outcome {
            Outcome::Landed => Ok(()),
            Outcome::Discarded => {
                self.observe_over_threshold(&m, threshold, &policy, turn, "the compacted span changed while the summariser ran");
                Ok(())
            }
            _ => {
                let why = out.error.unwrap_or_default();
                self.observe_over_threshold(&m, threshold, &policy, turn, &why);
                Err(Error::new(ErrorKind::Summariser, why))
            }
        }
    }

    /// Reports a request built over the threshold because the gate could not compact (`why`).
    fn observe_over_threshold(&self, m: &Measure, threshold: u64, policy: &CompactionPolicy, turn: u64, why: &str) {
        observe::emit(Level::Warn, || {
            Observation::new(
                "over-threshold",
                Level::Warn,
                format!(
                    "the next request goes out at {} tokens, over the threshold of {threshold} of a {}-token window, because the gate could not compact ({why})",
                    m.total, policy.context_window
                ),
            )
            .session(self.session.id())
            .with("tokens", m.total)
            .with("threshold", threshold)
            .with("contextWindow", policy.context_window)
            .with("turn", turn)
            .with("why", why)
        });
    }

    /// After a context overflow: compact down to the newest message, within the budget. The
    /// count of consecutive overflows goes up only when a recovery is attempted, and not when
    /// the store refused the recovery's writes (the host may retry once the cause is gone).
    pub(crate) fn recover_overflow(&mut self, cancel: &CancelToken, _turn: u64) -> Result<crate::agent::ProviderErrorOutcome> {
        let policy = self
            .current_policy()
            .ok_or_else(|| Error::new(ErrorKind::OverflowBudget, "context overflow, and no compaction policy is set for this model"))?;
        let attempt = self.consecutive_overflows + 1;
        if attempt > policy.overflow_retries {
            return Err(Error::new(
                ErrorKind::OverflowBudget,
                format!("context overflow {attempt} times in a row; the budget is {} recovery(ies)", policy.overflow_retries),
            ));
        }
        self.consecutive_overflows = attempt;
        let r = self.recover_overflow_now(cancel, &policy);
        if matches!(&r, Err(e) if crate::agent::is_store_refusal(e.kind())) {
            self.consecutive_overflows = attempt - 1;
        }
        r
    }

    fn recover_overflow_now(&mut self, cancel: &CancelToken, policy: &CompactionPolicy) -> Result<crate::agent::ProviderErrorOutcome> {
        self.check_no_native_in_flight("recover from a context overflow")?;
        let (m, entries) = self.measure_surface()?;
        let region = select_region(&entries, self.meter.per_entry(), 0)
            .ok_or_else(|| Error::new(ErrorKind::NothingToCompact, "context overflow, but nothing is left to compact"))?;
        let (op, _g) = self.op_token(cancel);
        let out = self.run_compaction(Trigger::Overflow, region, &m, policy, &op, None, None)?;
        match out.outcome {
            Outcome::Landed => {
                observe::emit(Level::Info, || {
                    Observation::new(
                        "overflow-retry",
                        Level::Info,
                        format!(
                            "the provider reported a context overflow; compacted down to the newest message, so the request can be sent again (recovery {} of {})",
                            self.consecutive_overflows, policy.overflow_retries
                        ),
                    )
                    .session(self.session.id())
                    .with("attempt", self.consecutive_overflows)
                    .with("overflowRetries", policy.overflow_retries)
                    .with("tokens", m.total)
                });
                Ok(crate::agent::ProviderErrorOutcome::Retry)
            }
            _ => Err(Error::new(
                ErrorKind::Summariser,
                format!("overflow recovery failed: {}", out.error.unwrap_or_else(|| out.outcome.to_string())),
            )),
        }
    }

    /// Compacts now. `span` is a surface span (`start..=end`, tool-balanced); `None` selects the
    /// head region as the gate would (with the policy's retained tail, or keeping the newest
    /// message when no policy is set). A middle span stays correct but forgoes cache reuse.
    pub fn compact(&mut self, span: Option<(usize, usize)>, cancel: &CancelToken) -> Result<CompactionOutcome> {
        self.ensure_live()?;
        {
            let g = self.session.lock();
            let st = g.log.state();
            if st.open_turn.as_ref().is_some_and(|t| t.step_open) {
                return Err(Error::out_of_order("a request is open: compact between steps"));
            }
            if let Some(p) = st.pending.first() {
                return Err(Error::out_of_order(format!("tool call {:?} has no result yet", p.id)));
            }
        }
        self.check_no_native_in_flight("compact")?;
        let policy = self.current_policy().unwrap_or_else(CompactionPolicy::unbounded);
        let (m, entries) = self.measure_surface()?;
        let region = match span {
            None => select_region(&entries, self.meter.per_entry(), policy.retained_tokens())
                .ok_or_else(|| Error::new(ErrorKind::NothingToCompact, "nothing to compact"))?,
            Some((start, end)) => {
                // The span is checked against the surface as it is now; its token count comes
                // from the measured part (which holds it unless it reaches past what was
                // measured: then it is refused as the surface's own check would).
                let seqs: Vec<u64> = entries.get(start..=end).map(|s| s.iter().map(|d| d.seq).collect()).unwrap_or_default();
                self.session.with_log(|l| l.history().check_replace(start, end, Some(&seqs)))?;
                Region { start, end, seqs }
            }
        };
        let (op, _g) = self.op_token(cancel);
        self.run_compaction(Trigger::Manual, region, &m, &policy, &op, None, None)
    }

    /// Writes `compaction/start`, asks the summariser, and lands or records the failure. The
    /// start is one batch (with the instance's anchoring header when none is logged yet, and the
    /// end of a compaction whose outcome the store refused before); the landing (summary,
    /// checkpoint, end) is another. Agent state changes only once a batch is stored.
    ///
    /// With an `expansion` (a route change: the region is a native checkpoint the new route
    /// cannot read), the summarisation request carries the messages the checkpoint replaced
    /// instead of the region, with the new route's header (recorded with the start when owed).
    ///
    /// An idle compaction names the seq of the cache clock's `clock/decision` it follows (`decision`),
    /// recorded in its `compaction/start` with the mechanism (`portable`).
    pub(crate) fn run_compaction(
        &mut self,
        trigger: Trigger,
        region: Region,
        m: &Measure,
        policy: &CompactionPolicy,
        op: &CancelToken,
        expansion: Option<super::native::Expansion>,
        decision: Option<u64>,
    ) -> Result<CompactionOutcome> {
        let _ = m;
        self.keepalive = None;
        let counter = self.counter_or_default();
        let mut g = self.session.lock();
        let mut start_batch: Vec<NewEvent> = crate::agent::stale_compaction_end(&g.log).into_iter().collect();
        let mut expansion = expansion;
        let snapshot = expansion.as_mut().and_then(|x| x.snapshot.take());
        let anchor_snapshot = snapshot.is_some();
        if let Some(snap) = snapshot {
            start_batch.push(NewEvent::new(types::REQUEST_HEADER, snap.to_value()));
        }
        // Before the session's first request no header is logged: the request is built from this
        // instance's header (and targets its options). Record that header with the start, as the
        // instance's anchoring snapshot, so that the log alone rebuilds the summarisation request
        // (verify) and the first conversation request carries the same header.
        let anchor = anchor_snapshot || (!self.anchored && g.log.state().headers.current().is_none());
        if anchor && !anchor_snapshot {
            if self.frozen.is_none() {
                return Err(Error::out_of_order(
                    "no request was built yet, so the session prefix is not composed: ask for a request before compacting",
                ));
            }
            let snap = HeaderSnapshot { header: self.wanted_header_in(&g.log), reason: SnapshotReason::Initial, instance: self.instance };
            start_batch.push(NewEvent::new(types::REQUEST_HEADER, snap.to_value()));
        }
        let st = g.log.state();
        // The latest routed header; before any request, the header this instance would send;
        // on a route change, the new route's.
        let header: EpochHeader = match &expansion {
            Some(x) => x.header.clone(),
            None => st.headers.current().cloned().unwrap_or_else(|| self.wanted_header_in(&g.log)),
        };
        let (provider, model) = match (&policy.summary_provider, &policy.summary_model) {
            (Some(p), Some(m)) => (p.clone(), m.clone()),
            _ => (header.config.provider.clone(), header.config.model.clone()),
        };
        if provider.is_empty() || model.is_empty() {
            return Err(Error::new(ErrorKind::Summariser, "no summarisation target: set a summary model, or route a request first"));
        }
        let prefix = match &self.frozen {
            Some(f) if f.bytes.is_for(header.message_prefix.as_ref()) => f.bytes.clone(),
            _ => PrefixBytes::of(header.message_prefix.as_ref()),
        };
        // The region was selected on a surface read before this lock was taken: check that it
        // is still there, position for position.
        let span = st
            .history
            .entries()
            .get(region.start..=region.end)
            .filter(|s| s.iter().map(|d| d.seq).eq(region.seqs.iter().copied()))
            .ok_or_else(|| {
                Error::new(ErrorKind::OutOfOrder, "the surface changed before the summarisation request was built; try again")
            })?;
        let messages = expansion.as_ref().map_or(span, |x| x.entries.as_slice());
        let body = compaction_envelope(
            &header,
            &prefix,
            messages,
            INSTRUCTION,
            &provider,
            &model,
            policy.summary_max_tokens,
            g.header.request_id(),
        );
        // Leading messages shared with the last routed request: its session prefix, then, for a
        // head region, the history entries it carried: the region's leading entries logged
        // before its step/start (an entry replaced or appended since has a later seq). A middle
        // span shares only the prefix; nothing is shared before the first request, nor with a
        // request of another route.
        let shared = match last_step_seq(&g.log) {
            _ if expansion.is_some() => 0,
            None => 0,
            Some(routed) => {
                let history = if region.start == 0 { span.iter().take_while(|d| d.seq < routed).count() } else { 0 };
                prefix.messages.len() + history
            }
        };
        let generation = st.history.generation();
        let req = SummaryRequest {
            digest: digest(&body),
            json: String::from_utf8(body).expect("JSON is UTF-8"),
            provider,
            model,
            max_tokens: policy.summary_max_tokens,
            prefix_len: prefix.messages.len(),
            shared_messages: shared,
        };
        let shadowed: u64 = match &expansion {
            Some(x) => x.tokens,
            None => self.meter.per_entry().get(region.start..=region.end).map(|s| s.iter().sum()).unwrap_or(0),
        };
        let message_count = serde_json::from_str::<serde_json::Value>(&req.json)
            .ok()
            .and_then(|v| v.get("messages").and_then(|m| m.as_array().map(|a| a.len())))
            .unwrap_or(0);
        let info = SummaryRequestInfo { digest: req.digest.clone(), shared_messages: req.shared_messages, message_count };
        let mut start = json!({
            "trigger": trigger.as_str(),
            "span": {"start": region.start, "end": region.end},
            "seqs": region.seqs,
            "provider": req.provider,
            "model": req.model,
            "maxTokens": req.max_tokens,
            "instruction": INSTRUCTION,
            "requestDigest": req.digest,
            "shadowedTokens": shadowed,
            "sharedMessages": req.shared_messages,
        });
        if let Some(x) = &expansion {
            start["expanded"] = json!(x.seqs);
            for (k, v) in &x.note {
                start[k.as_str()] = v.clone();
            }
        }
        if let Some(d) = decision {
            start["decision"] = d.into();
            start["mechanism"] = "portable".into();
        }
        start_batch.push(NewEvent::new(types::COMPACTION_START, start));
        g.append_batch(start_batch)?;
        drop(g);
        if anchor {
            self.anchored = true;
        }
        // Writes the end of a compaction that did not land (the landing writes its own).
        let finish = |agent: &mut Agent, outcome: Outcome, error: Option<String>| -> Result<CompactionOutcome> {
            let mut data = json!({"outcome": outcome.as_str()});
            if let Some(e) = &error {
                data["error"] = e.clone().into();
            }
            agent.session.lock().append(NewEvent::new(types::COMPACTION_END, data))?;
            Ok(CompactionOutcome { outcome, region: region.clone(), request: info.clone(), error })
        };
        let session_id = self.session.id();
        // A compaction that ends failed, after `attempts` calls of the summariser.
        let observe_failed = |why: &str, attempts: u64| {
            observe::emit(Level::Error, || {
                Observation::new("compaction-failed", Level::Error, format!("the {} compaction failed: {why}", trigger.as_str()))
                    .session(session_id.clone())
                    .with("trigger", trigger.as_str())
                    .with("error", why)
                    .with("attempts", attempts)
                    .with("span", json!([region.start, region.end]))
            });
        };
        let Some(summariser) = self.summariser.clone() else {
            observe_failed("no summariser is set", 0);
            return finish(self, Outcome::Failed, Some("no summariser is set".into()));
        };
        let attempts = 1 + policy.retries;
        let mut last_error = String::new();
        let mut accepted: Option<SummaryOutput> = None;
        let mut made = 0u64;
        for attempt in 1..=attempts {
            if op.is_cancelled() {
                break;
            }
            made += 1;
            let retry = attempt < attempts;
            let then = if retry { "asking again" } else { "no attempts left" };
            match summariser.summarise(&req, op) {
                Err(e) => {
                    last_error = format!("the summariser failed: {}", e.message());
                    if op.is_cancelled() {
                        break;
                    }
                    observe::emit(Level::Warn, || {
                        Observation::new(
                            "summariser-failed",
                            Level::Warn,
                            format!("{last_error} (attempt {attempt} of {attempts}; {then})"),
                        )
                        .session(session_id.clone())
                        .with("trigger", trigger.as_str())
                        .with("error", e.message())
                        .with("attempt", attempt)
                        .with("attempts", attempts)
                        .with("retry", retry)
                    });
                }
                // A route change's summary stands in for a block the new route cannot read at
                // all: it need not be smaller than the messages it summarises.
                Ok(out) => match check_summary(&out, if expansion.is_some() { u64::MAX } else { shadowed }, &*counter) {
                    Ok(()) => {
                        accepted = Some(out);
                        break;
                    }
                    Err(why) => {
                        observe::emit(Level::Warn, || {
                            Observation::new(
                                "summary-rejected",
                                Level::Warn,
                                format!("rejected the summary: {why} (attempt {attempt} of {attempts}; {then})"),
                            )
                            .session(session_id.clone())
                            .with("trigger", trigger.as_str())
                            .with("why", why.clone())
                            .with("attempt", attempt)
                            .with("attempts", attempts)
                            .with("retry", retry)
                        });
                        last_error = why;
                    }
                },
            }
        }
        if op.is_cancelled() {
            let disposed = self.is_disposed();
            finish(self, Outcome::Cancelled, Some(if disposed { "the agent instance was disposed" } else { "cancelled" }.into()))?;
            return Err(if disposed {
                Error::new(ErrorKind::Disposed, "the agent instance was disposed during summarisation")
            } else {
                Error::new(ErrorKind::Cancelled, "summarisation was cancelled")
            });
        }
        let Some(out) = accepted else {
            observe_failed(&last_error, made);
            return finish(self, Outcome::Failed, Some(last_error));
        };
        // The summariser ran with no lock held: the session may have changed meanwhile. The
        // landing is checked against the surface as it is now, under the lock it is written with.
        let mut g = self.session.lock();
        let st = g.log.state();
        let unchanged = st.history.generation() == generation
            && st.history.entries().get(region.start..=region.end).is_some_and(|s| s.iter().map(|d| d.seq).eq(region.seqs.iter().copied()));
        if !unchanged {
            drop(g);
            return finish(self, Outcome::Discarded, Some("the compacted span changed while the summariser ran".into()));
        }
        let provider = out.provider.clone().unwrap_or_else(|| req.provider.clone());
        let model = out.model.clone().unwrap_or_else(|| req.model.clone());
        let mut data = json!({
            "summary": out.text.trim(),
            "span": {"start": region.start, "end": region.end},
            "seqs": region.seqs,
            "shadowedTokens": shadowed,
            "provider": provider,
            "model": model,
            "maxTokens": req.max_tokens,
            "raw": out.text,
            "source": "summariser-callback",
            "sharedMessages": req.shared_messages,
            "requestDigest": req.digest,
        });
        if let Some(u) = &out.usage {
            data["usage"] = serde_json::to_value(u).expect("usage serialises");
        }
        let checkpoint = context_event(Message::user_text(checkpoint_text(&out.text)), UserSource::Compaction)?;
        let checkpoint = NewEvent {
            surface_op: Some(crate::log::SurfaceOp::Replace { start: region.start, end: region.end }),
            sources: Some(region.seqs.clone()),
            ..checkpoint
        };
        let landing = vec![
            NewEvent::new(types::COMPACTION_SUMMARY, data),
            checkpoint,
            NewEvent::new(types::COMPACTION_END, json!({"outcome": "landed"})),
        ];
        if let Err(e) = g.append_batch(landing) {
            // The store refused the landing: the surface is untouched. Say so in the log if the
            // store takes that much; otherwise the next request or compaction closes it.
            let _ = g.append(NewEvent::new(
                types::COMPACTION_END,
                json!({"outcome": "failed", "error": format!("storing the summary failed: {}", e.message())}),
            ));
            return Err(e);
        }
        drop(g);
        self.stats.compactions += 1;
        Ok(CompactionOutcome { outcome: Outcome::Landed, region, request: info, error: None })
    }
}

/// The seq of the newest `step/start` (the last routed conversation request), if any.
pub(crate) fn last_step_seq(log: &crate::log::Log) -> Option<u64> {
    log.state().last_request_seq
}

fn check_summary(out: &SummaryOutput, shadowed: u64, counter: &dyn TokenCounter) -> std::result::Result<(), String> {
    if out.text.trim().is_empty() {
        return Err("the summary is empty".into());
    }
    if out.truncated {
        return Err("the summary was truncated by the output limit".into());
    }
    let tokens = counter
        .count(Countable::Message(&Message::user_text(checkpoint_text(&out.text))))
        .map_err(|e| format!("cannot count the summary: {}", e.message()))?;
    if tokens >= shadowed {
        return Err(format!("the summary ({tokens} tokens) is not smaller than what it replaces ({shadowed} tokens)"));
    }
    Ok(())
}
