//! The turn/step lifecycle and request building.

use super::body::{Built, LastRequest, Want};
use super::{Agent, Frozen, PrevRequest};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::header::{HeaderSnapshot, SnapshotReason};
use crate::log::event::{types, NewEvent, TurnEndReason, UserSource};
use crate::log::Log;
use crate::observe::{self, Level, Observation};
use crate::prefix::{compose, context_event, ListenerContext, PreStepInfo};
use crate::render::BodySource;
use crate::request::{
    conversation_digest, conversation_envelope, conversation_envelope_digest, Body, PrefixBytes, Purpose, Request, RequestInfo,
};
use crate::types::{Block, Message, Provenance, Role, Usage};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A tool result reported by the host.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResultInput {
    /// The tool call it answers.
    pub call_id: String,
    /// The result content.
    pub content: Vec<Block>,
    /// Whether the tool failed.
    pub is_error: bool,
}

/// What the host should do after a provider error.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderErrorOutcome {
    /// The error was recorded; the turn is still open (retry with `next_request` or end it).
    Recorded,
    /// A context overflow was recovered by compaction: call `next_request` again.
    Retry,
}

impl Agent {
    /// Opens a turn with the user's message (`turn/start` + `user/message{source: user}`).
    pub fn start_turn(&mut self, message: Message) -> Result<u64> {
        self.ensure_live()?;
        if message.role != Role::User {
            return Err(Error::invalid("message.role", format!("a turn opens with a user message, got {}", message.role.as_str())));
        }
        let mut g = self.session.lock();
        if let Some(t) = &g.log.state().open_turn {
            return Err(Error::out_of_order(format!("turn {} is still open; end it before starting another", t.turn)));
        }
        if let Some(p) = g.log.state().pending.first() {
            return Err(Error::out_of_order(format!("tool call {:?} has no result yet", p.id)));
        }
        let turn = g.log.state().last_turn + 1;
        let mut data = serde_json::Map::new();
        data.insert("message".into(), message.to_value());
        data.insert("source".into(), UserSource::User.as_str().into());
        // Validate the user message before anything is written, so a bad message changes nothing
        // (and the error names the field).
        let probe = NewEvent::visible(types::USER_MESSAGE, Value::Object(data));
        crate::log::history::project(&probe.clone().into_event(0, 0))?;
        // One batch: a refused write leaves no turn open.
        g.append_batch(vec![NewEvent::new(types::TURN_START, json!({"turn": turn})), probe])?;
        Ok(turn)
    }

    /// Builds the next request of the open turn (see the module docs for the steps).
    pub fn next_request(&mut self, cancel: &CancelToken) -> Result<Request> {
        match self.next_step(cancel, Want::Envelope)? {
            Built::Envelope(r) => Ok(r),
            Built::Body(_) => unreachable!("asked for the envelope"),
        }
    }

    /// Builds the next request: checks the turn, prepares, runs the gate, then writes the step
    /// (see [`build_step`](Self::build_step)) and returns what `want` asks for.
    pub(crate) fn next_step(&mut self, cancel: &CancelToken, want: Want) -> Result<Built> {
        self.ensure_live()?;
        // A keep-warm request still waiting for its answer is abandoned: the next request
        // refreshes the cache anyway.
        self.keepalive = None;
        let (turn, step) = {
            let g = self.session.lock();
            let st = g.log.state();
            let t = st.open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open: start_turn first"))?;
            if t.step_open {
                return Err(Error::out_of_order(format!(
                    "step {} is still open: record its response or a provider error before asking for the next request",
                    t.last_step
                )));
            }
            if let Some(p) = st.pending.first() {
                return Err(Error::out_of_order(format!("tool call {:?} has no result yet", p.id)).with("callId", p.id.clone()));
            }
            if let Some((limit, max)) = self.pinned.as_ref().and_then(|p| p.request_limit) {
                if st.requests >= limit {
                    return Err(Error::out_of_order(format!(
                        "this child has sent its {max} request(s) (maxTurns): finish it (its answer is its last message)"
                    ))
                    .with("maxTurns", max));
                }
            }
            (t.turn, t.last_step + 1)
        };
        let (op, _guards) = self.op_token(cancel);
        if let Err(e) = self.prepare(&op, turn, step) {
            return Err(self.fail_turn(e));
        }
        // A native compaction block the route cannot read is replaced first (docs/compaction.md,
        // "Route changes"). When that cannot be done the request is not built; the turn stays
        // open (a cancel or a dispose ends it, as in the gate).
        if let Err(e) = self.native_fallback(&op) {
            return Err(match e.kind() {
                ErrorKind::Cancelled | ErrorKind::Disposed => self.fail_turn(e),
                _ => e,
            });
        }
        if let Err(e) = self.gate(&op, turn) {
            match e.kind() {
                ErrorKind::Cancelled | ErrorKind::Disposed => return Err(self.fail_turn(e)),
                // The store refused a write: nothing more is written, the turn stays open, and
                // the same call can be retried.
                k if is_store_refusal(k) => return Err(e),
                // A failed compaction is logged (compaction/end{failed}); the request goes ahead.
                _ => {}
            }
        }
        self.build_step(turn, step, want)
    }

    /// Composition (once) and the pre-step listeners.
    fn prepare(&mut self, op: &CancelToken, turn: u64, step: u64) -> Result<()> {
        let ctx = ListenerContext {
            session: &self.session,
            cancel: op,
            instance: self.instance,
            turn,
            dispose: &self.disposed,
            dispose_token: &self.dispose_token,
        };
        if self.frozen.is_none() {
            self.stats.compositions += 1;
            let messages = compose(&self.prefix_listeners, &ctx)?;
            let canonical = if messages.is_empty() { None } else { Some(&messages) };
            let bytes = PrefixBytes::of(canonical);
            self.frozen = Some(Frozen { messages, bytes });
        }
        let frozen = self.frozen.as_ref().expect("composed");
        let info = PreStepInfo { prefix: &frozen.messages, system: self.options.system.as_deref(), tools: &self.options.tools, turn, step };
        for (i, l) in self.pre_step.iter().enumerate() {
            check_op(&ctx)?;
            l.pre_step(&ctx, &info).map_err(|e| match e.kind() {
                ErrorKind::Cancelled | ErrorKind::Disposed => e,
                _ => e.with_kind(ErrorKind::Listener).context(format!("pre-step listener #{i} failed")).with("listener", i as u64),
            })?;
        }
        check_op(&ctx)
    }

    /// Records the header if owed and writes `step/start` (one batch, with the end of a
    /// compaction whose outcome could not be stored before), then returns the envelope, or the
    /// provider body rendered from it (`want`). Agent state changes only once the batch is
    /// stored; a body that cannot be rendered fails the call before anything is written.
    fn build_step(&mut self, turn: u64, step: u64, want: Want) -> Result<Built> {
        // The header this request carries: the one this instance wants, which is the folded one
        // when no snapshot is owed.
        let header = self.wanted_header();
        let frozen = self.frozen.as_ref().expect("composed");
        // Only when the header's prefix is not this instance's frozen one (not reachable: the
        // wanted header carries the frozen prefix) are its bytes written again.
        let recomputed =
            if frozen.bytes.is_for(header.message_prefix.as_ref()) { None } else { Some(PrefixBytes::of(header.message_prefix.as_ref())) };
        let prefix_bytes = recomputed.as_ref().unwrap_or(&frozen.bytes);
        // The cache is taken out and put back only when the request is recorded (a refused
        // write leaves it empty, which only costs a full hash next time).
        let mut cache = std::mem::take(&mut self.digest_cache);
        let mut g = self.session.lock();
        let session_id = g.header.request_id().to_string();
        let folded = g.log.state().headers.current();
        // This instance's first request: the previous request of the session is the last one an
        // earlier instance routed, with the header folded now; it carried the leading history
        // entries logged before its step/start (an entry replaced or appended since has a later
        // seq).
        // (The newest step/start is looked up only then: finding it parses a log line.)
        let inherited = match (&self.prev_request, folded) {
            (None, Some(h)) => crate::compaction::last_step_seq(&g.log).map(|routed| {
                let seqs = g.log.history().entries().iter().map(|d| d.seq).take_while(|s| *s < routed).collect();
                PrevRequest { prefix: h.message_prefix.clone(), seqs, generation: None }
            }),
            _ => None,
        };
        let reason = self.snapshot_owed(folded, &header);
        let mut batch = stale_compaction_end(&g.log).into_iter().collect::<Vec<_>>();
        if let Some(reason) = reason {
            let snap = HeaderSnapshot { header: header.clone(), reason, instance: self.instance };
            batch.push(NewEvent::new(types::REQUEST_HEADER, snap.to_value()));
        }
        let prefix_len = header.message_prefix.as_ref().map(|p| p.len()).unwrap_or(0);
        let betas = crate::compaction::native::anthropic_betas(
            self.route_format(),
            &header.config.extra,
            g.log.history().entries().first().and_then(|d| crate::compaction::native::entry_checkpoint(d)).map(|(m, _)| m).as_ref(),
        );
        // The envelope (its digest hashed from its pieces where only the body is wanted), then
        // the provider body, before anything is written: a body that cannot be rendered (a
        // block the provider has no form for) changes nothing.
        let (envelope, envelope_len, body_digest, provider_body) = match want {
            Want::Envelope => {
                let (e, d) = conversation_envelope_digest(&g.log, &header, prefix_bytes, &session_id, turn, step, &mut cache);
                (Some(e), 0, d, None)
            }
            Want::Body => {
                let (len, d) = conversation_digest(&g.log, &header, prefix_bytes, &session_id, turn, step, &mut cache);
                let renderer = self.body.as_mut().ok_or_else(super::body::no_renderer)?;
                let src = BodySource { header: &header, prefix: prefix_bytes, history: g.log.history(), session_id: &session_id };
                let body = renderer.body(&src, turn, step)?;
                // Check mode compares the envelope with the log's, so it is written here.
                let e = self.options.check_requests.then(|| {
                    String::from_utf8(conversation_envelope(&g.log, &header, prefix_bytes, &session_id, turn, step)).expect("text")
                });
                (e, len, d, Some(body))
            }
        };
        let envelope_len = envelope.as_ref().map_or(envelope_len, String::len);
        batch.push(NewEvent::new(
            types::STEP_START,
            json!({"turn": turn, "step": step, "instance": self.instance, "digest": body_digest.as_str(), "bytes": envelope_len}),
        ));
        let seq = g.append_batch(batch)?.end - 1;
        // Stored: now the agent's state follows.
        self.digest_cache = cache;
        self.anchored = true;
        if let (Some(bytes), Some(f)) = (recomputed, self.frozen.as_mut()) {
            f.bytes = bytes;
        }
        let history = g.log.history();
        let hist = history.entries();
        let prefix = header.message_prefix.clone();
        let same_prefix = |prev: &PrevRequest| match (&prev.prefix, &prefix) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        // While the history only grew since this instance's previous request (same replace
        // generation, the same entries at its ends), that request's history is all shared and
        // its seqs are extended; otherwise they are compared one by one.
        let mut prev = self.prev_request.take();
        let grown = prev.as_ref().is_some_and(|p| {
            p.generation == Some(history.generation())
                && p.seqs.len() <= hist.len()
                && p.seqs.first() == hist.first().map(|d| &d.seq).filter(|_| !p.seqs.is_empty())
                && p.seqs.last() == p.seqs.len().checked_sub(1).map(|i| &hist[i].seq)
        });
        let shared = match prev.as_ref().or(inherited.as_ref()) {
            None => 0,
            Some(p) if !same_prefix(p) => 0,
            Some(p) if grown => prefix_len + p.seqs.len(),
            Some(p) => prefix_len + p.seqs.iter().zip(hist.iter()).take_while(|(a, b)| **a == b.seq).count(),
        };
        let message_count = prefix_len + hist.len();
        let seqs = match prev.take() {
            Some(mut p) if grown => {
                let n = p.seqs.len();
                p.seqs.extend(hist[n..].iter().map(|d| d.seq));
                p.seqs
            }
            _ => hist.iter().map(|d| d.seq).collect(),
        };
        self.prev_request = Some(PrevRequest { prefix, seqs, generation: Some(history.generation()) });
        let info = RequestInfo {
            instance: self.instance,
            turn,
            step,
            step_seq: seq,
            purpose: Purpose::Conversation,
            prefix_len,
            message_count,
            shared_messages: shared,
            envelope_len,
            digest: body_digest,
            betas,
        };
        self.last_request = Some(LastRequest::new(header, session_id, history, info.clone()));
        drop(g);
        self.stats.requests += 1;
        if let Some(e) = envelope.as_ref().filter(|_| self.options.check_requests) {
            self.check_request(e.as_bytes(), seq, turn, step)?;
        }
        Ok(match provider_body {
            None => Built::Envelope(Request {
                digest: info.digest,
                json: envelope.expect("the envelope was asked for"),
                turn,
                step,
                instance: self.instance,
                prefix_len,
                message_count,
                shared_messages: shared,
                step_seq: seq,
                betas: info.betas,
            }),
            Some(json) => {
                if let Some(e) = envelope.as_ref().filter(|_| self.options.check_requests) {
                    super::body::check_body(self.body.as_ref().expect("rendered"), e, prefix_len, &json, turn, step)?;
                }
                Built::Body(Body { json, info })
            }
        })
    }

    /// Why `header` must be recorded before this instance's next request, given the folded
    /// header of the log: `initial` / `resume` for the instance's anchoring snapshot, `change`
    /// when it differs from the folded one, `None` when nothing is owed.
    pub(crate) fn snapshot_owed(
        &self,
        folded: Option<&crate::header::EpochHeader>,
        header: &crate::header::EpochHeader,
    ) -> Option<SnapshotReason> {
        if !self.anchored {
            Some(if folded.is_none() { SnapshotReason::Initial } else { SnapshotReason::Resume })
        } else if folded != Some(header) {
            Some(SnapshotReason::Change)
        } else {
            None
        }
    }

    /// Check mode: rebuild the request of `step_seq` from the serialised log alone and compare.
    fn check_request(&self, body: &[u8], step_seq: u64, turn: u64, step: u64) -> Result<()> {
        let (log, session_id) = {
            let mut g = self.session.lock();
            (g.log_at(step_seq)?, g.header.request_id().to_string())
        };
        let header = log.state().headers.current().cloned().ok_or_else(|| Error::new(ErrorKind::Reconstruction, "no header"))?;
        let prefix = PrefixBytes::of(header.message_prefix.as_ref());
        let rebuilt = conversation_envelope(&log, &header, &prefix, &session_id, turn, step);
        if rebuilt != body {
            let at = rebuilt.iter().zip(body).take_while(|(a, b)| a == b).count();
            return Err(Error::new(
                ErrorKind::Reconstruction,
                format!(
                    "turn {turn} step {step}: the request rebuilt from the log differs from the one built (first difference at byte {at})"
                ),
            )
            .with("turn", turn)
            .with("step", step));
        }
        Ok(())
    }

    /// Ends the open turn after a failed preparation, and maps the error.
    pub(crate) fn fail_turn(&mut self, e: Error) -> Error {
        let reason = match e.kind() {
            ErrorKind::Cancelled => TurnEndReason::Aborted,
            ErrorKind::Disposed => TurnEndReason::Disposed,
            _ => TurnEndReason::Error,
        };
        let disposed = reason == TurnEndReason::Disposed || self.is_disposed();
        let e = if disposed && e.kind() != ErrorKind::Disposed {
            Error::new(ErrorKind::Disposed, format!("the agent instance was disposed ({})", e.message()))
        } else {
            e
        };
        let reason = if disposed { TurnEndReason::Disposed } else { reason };
        if let Err(store_err) = self.end_turn_inner(reason, Some(e.message().to_string())) {
            return store_err.context(format!("ending the turn after: {}", e.message()));
        }
        if disposed {
            self.disposed.store(true, std::sync::atomic::Ordering::SeqCst);
            self.release_claim();
        }
        e
    }

    /// Records the provider's response to the open step: the assistant message (provenance is
    /// filled from the request's config when absent; a made-up tool-call id that the session
    /// already used is made unique, `render::unique_synthetic_ids`), one `tool/call` per tool
    /// call, `step/end`.
    /// Returns the seq of the `assistant/message`.
    ///
    /// While a keep-warm request of the cache clock waits for its answer
    /// ([`keepalive_body`](Self::keepalive_body)), this records that answer instead, as
    /// `clock/keepalive-end` (the message and usage; never in the history), and returns its seq.
    pub fn record_response(&mut self, mut message: Message, usage: Option<Usage>) -> Result<u64> {
        self.ensure_live()?;
        if message.role != Role::Assistant {
            return Err(Error::invalid("message.role", format!("a response is an assistant message, got {}", message.role.as_str())));
        }
        if self.keepalive.is_some() {
            return self.record_keepalive(Some(message), usage, None);
        }
        let mut g = self.session.lock();
        let st = g.log.state();
        let t = st.open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open"))?;
        if !t.step_open {
            return Err(Error::out_of_order("no request is open: call next_request first"));
        }
        let (turn, step) = (t.turn, t.last_step);
        // Made-up tool-call ids (Gemini without ids) repeat when the model repeats a call.
        crate::render::unique_synthetic_ids(&mut message, |id| st.known_calls.contains(id), turn, step);
        let cfg = &st.headers.current().expect("a step has a header").config;
        if message.provenance.is_none() {
            message.provenance = Some(Provenance { provider: cfg.provider.clone(), model: cfg.model.clone(), extra: Default::default() });
        }
        // A native compaction block in the answer (threshold mode): recorded as the compaction,
        // after the step; the answer keeps what follows the block (docs/compaction.md).
        let model = message.provenance.as_ref().map_or(cfg.model.as_str(), |p| p.model.as_str()).to_string();
        let provider = cfg.provider.clone();
        let native = crate::compaction::native::threshold_events(st, &mut message, usage.as_ref(), &provider, &model, turn, step)?;
        let landed = native.as_ref().is_some_and(|n| n.iter().any(|e| e.ty == types::COMPACTION_NATIVE));
        let calls: Vec<NewEvent> = message
            .tool_calls()
            .map(|(id, name, args)| {
                NewEvent::new(types::TOOL_CALL, json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args}))
            })
            .collect();
        let mut data = json!({"turn": turn, "step": step, "message": message.into_value()});
        if let Some(u) = &usage {
            data["usage"] = serde_json::to_value(u).expect("usage serialises");
        }
        let mut batch = vec![NewEvent::visible(types::ASSISTANT_MESSAGE, data)];
        batch.extend(calls);
        batch.push(NewEvent::new(types::STEP_END, json!({"turn": turn, "step": step, "outcome": "response"})));
        batch.extend(native.into_iter().flatten());
        let seq = g.append_batch(batch)?.start;
        drop(g);
        if landed {
            self.stats.compactions += 1;
        }
        if let Some(u) = &usage {
            self.stats.cached_tokens += u.cache_read_tokens.unwrap_or(0);
            self.stats.prompt_tokens += u.prompt_tokens();
        }
        self.consecutive_overflows = 0;
        Ok(seq)
    }

    /// Records a tool result. Results may arrive in any order; they are logged in the order the
    /// model made the calls (a result waits until the results before it are in). Returns how
    /// many results were written to the log by this call.
    pub fn record_tool_result(&mut self, result: ToolResultInput) -> Result<usize> {
        self.ensure_live()?;
        {
            let g = self.session.lock();
            let st = g.log.state();
            if let Some(t) = &st.open_turn {
                if t.step_open {
                    return Err(Error::out_of_order("the step is still open: record its response first"));
                }
            }
            if !st.pending.iter().any(|p| p.id == result.call_id) {
                return Err(Error::out_of_order(format!("{:?} is not a tool call waiting for a result", result.call_id))
                    .with("callId", result.call_id.clone()));
            }
            if self.buffered_results.iter().any(|r| r.call_id == result.call_id) {
                return Err(Error::out_of_order(format!("the result of tool call {:?} was already reported", result.call_id))
                    .with("callId", result.call_id.clone()));
            }
        }
        for (i, b) in result.content.iter().enumerate() {
            b.validate(&format!("content[{i}]"))?;
        }
        // The results this one lets the agent log now (in model order), and, when they answer
        // the batch, the context that waited for it: one batch, and only once it is stored does
        // the agent remember what it wrote and what still waits.
        let mut g = self.session.lock();
        let st = g.log.state();
        let (mut batch, answered) = result_events(&st.pending, &self.buffered_results, Some(&result), &self.child_results);
        let closes_batch = answered.len() == st.pending.len();
        if closes_batch {
            for m in &self.deferred_context {
                batch.push(context_event(m.clone(), UserSource::Host)?);
            }
        }
        if !batch.is_empty() {
            g.append_batch(batch)?;
        }
        drop(g);
        self.buffered_results.push(result);
        self.buffered_results.retain(|r| !answered.contains(&r.call_id));
        self.child_results.retain(|call, _| !answered.contains(call));
        if closes_batch {
            self.deferred_context.clear();
        }
        Ok(answered.len())
    }

    /// Adds durable context (`user/message{source: host}`) that the next request carries. While
    /// a step or a tool batch is open it is deferred until the batch closes. Returns the seq when
    /// written now, `None` when deferred.
    pub fn inject(&mut self, message: Message) -> Result<Option<u64>> {
        self.ensure_live()?;
        let ev = context_event(message.clone(), UserSource::Host)?;
        crate::log::history::project(&ev.clone().into_event(0, 0))?;
        let mut g = self.session.lock();
        let st = g.log.state();
        let busy = !st.pending.is_empty() || st.open_turn.as_ref().is_some_and(|t| t.step_open) || !self.deferred_context.is_empty();
        if busy {
            drop(g);
            self.deferred_context.push(message);
            return Ok(None);
        }
        Ok(Some(g.append(ev)?))
    }

    /// Records a provider error for the open step (`step/end{outcome: error}`). A context
    /// overflow (`overflow = true`) triggers compaction and asks the host to retry, within the
    /// policy's budget of consecutive overflows.
    ///
    /// While a keep-warm request waits for its answer, the error is that request's
    /// (`clock/keepalive-end{outcome: "error"}`), and the outcome is `Recorded`.
    pub fn report_provider_error(&mut self, message: &str, overflow: bool, cancel: &CancelToken) -> Result<ProviderErrorOutcome> {
        self.ensure_live()?;
        if self.keepalive.is_some() {
            self.record_keepalive(None, None, Some(message))?;
            return Ok(ProviderErrorOutcome::Recorded);
        }
        let mut g = self.session.lock();
        let t = g.log.state().open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open"))?;
        let (turn, step) = (t.turn, t.last_step);
        if !t.step_open {
            // The overflow of this step is recorded, but the store refused its recovery: the
            // same report retries the recovery.
            if overflow && self.unrecovered_overflow == Some((turn, step)) {
                drop(g);
                return self.recover_overflow_for(cancel, turn, step);
            }
            return Err(Error::out_of_order("no request is open: a provider error belongs to a step"));
        }
        let mut data = json!({"turn": turn, "step": step, "outcome": "error", "error": message});
        if overflow {
            data["overflow"] = true.into();
        }
        g.append(NewEvent::new(types::STEP_END, data))?;
        drop(g);
        if !overflow {
            return Ok(ProviderErrorOutcome::Recorded);
        }
        self.recover_overflow_for(cancel, turn, step)
    }

    fn recover_overflow_for(&mut self, cancel: &CancelToken, turn: u64, step: u64) -> Result<ProviderErrorOutcome> {
        let r = self.recover_overflow(cancel, turn);
        self.unrecovered_overflow = match &r {
            Err(e) if is_store_refusal(e.kind()) => Some((turn, step)),
            _ => None,
        };
        match r {
            // A cancel (or a dispose) during the recovery ends the turn as one in the gate does.
            Err(e) if matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Disposed) => Err(self.fail_turn(e)),
            r => r,
        }
    }

    /// Ends the open turn. With `completed` (or `max-tokens`) the turn must be at rest; any other
    /// reason closes an open step and answers pending tool calls with error results first.
    pub fn end_turn(&mut self, reason: TurnEndReason) -> Result<()> {
        self.ensure_live()?;
        self.end_turn_inner(reason, None)
    }

    pub(crate) fn end_turn_inner(&mut self, reason: TurnEndReason, error: Option<String>) -> Result<()> {
        let clean = matches!(reason, TurnEndReason::Completed | TurnEndReason::MaxTokens);
        {
            let g = self.session.lock();
            let st = g.log.state();
            let t = st.open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open"))?;
            if clean && t.step_open {
                return Err(Error::out_of_order(format!("step {} is still open: record its response first", t.last_step)));
            }
            if clean {
                if let Some(p) = st.pending.first() {
                    return Err(Error::out_of_order(format!("tool call {:?} has no result yet", p.id)).with("callId", p.id.clone()));
                }
            }
        }
        // Everything the end writes, as one batch: the open step closed (its calls logged first
        // when the response was recorded), the pending calls answered (reported results in model
        // order, an error result for the rest), `turn/end`, then the deferred context. Only once
        // it is stored does the agent forget the buffered results and the deferred context.
        let mut g = self.session.lock();
        let st = g.log.state();
        let t = st.open_turn.as_ref().expect("checked");
        let turn = t.turn;
        let mut batch = Vec::new();
        let mut pending: Vec<String> = st.pending.iter().map(|p| p.id.clone()).collect();
        if t.step_open {
            let step = t.last_step;
            for (id, name, args) in &t.calls_to_log {
                batch.push(NewEvent::new(
                    types::TOOL_CALL,
                    json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args}),
                ));
                pending.push(id.clone());
            }
            let data = if t.step_answered {
                json!({"turn": turn, "step": step, "outcome": "response"})
            } else {
                json!({"turn": turn, "step": step, "outcome": "cancelled", "error": format!("turn ended: {}", reason.as_str())})
            };
            batch.push(NewEvent::new(types::STEP_END, data));
        }
        for id in pending {
            let ev = match self.buffered_results.iter().find(|r| r.call_id == id) {
                Some(r) => tool_result_event(r, &self.child_results),
                None => {
                    let text = format!("no result: the turn ended ({})", reason.as_str());
                    NewEvent::visible(types::TOOL_RESULT, json!({"callId": id, "content": [{"type":"text","text": text}], "isError": true}))
                }
            };
            batch.push(ev);
        }
        let mut data = json!({"turn": turn, "reason": reason.as_str()});
        if let Some(e) = error {
            data["error"] = e.into();
        }
        batch.push(NewEvent::new(types::TURN_END, data));
        for m in &self.deferred_context {
            batch.push(context_event(m.clone(), UserSource::Host)?);
        }
        g.append_batch(batch)?;
        drop(g);
        self.buffered_results.clear();
        self.child_results.clear();
        self.deferred_context.clear();
        // A spent overflow budget fails its own turn, never a later one.
        self.consecutive_overflows = 0;
        Ok(())
    }

    /// Disposes the instance: an open turn ends with `disposed`, and the session is free for a
    /// new instance.
    pub fn dispose(mut self) -> Result<()> {
        let r = self.close_turn_disposed();
        self.disposed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.release_claim();
        r
    }

    pub(crate) fn close_turn_disposed(&mut self) -> Result<()> {
        let open = self.session.with_log(|l| l.state().open_turn.as_ref().map(|t| t.turn));
        if let Some(turn) = open {
            self.end_turn_inner(TurnEndReason::Disposed, None)?;
            observe::emit(Level::Info, || {
                Observation::new(
                    "turn-disposed",
                    Level::Info,
                    format!("agent instance {} was disposed with turn {turn} open; ended the turn `disposed`", self.instance),
                )
                .session(self.session.id())
                .with("turn", turn)
                .with("instance", self.instance)
            });
        }
        Ok(())
    }
}

fn check_op(ctx: &ListenerContext<'_>) -> Result<()> {
    if ctx.dispose.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Error::new(ErrorKind::Disposed, "the agent instance was disposed"));
    }
    if ctx.cancel.is_cancelled() {
        return Err(Error::new(ErrorKind::Cancelled, "the request was cancelled"));
    }
    Ok(())
}

/// Whether an error is the store refusing a write (nothing was written; the call can be retried
/// once the cause is gone).
pub(crate) fn is_store_refusal(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Storage | ErrorKind::Conflict | ErrorKind::ReadOnly)
}

/// The `tool/result` event of a reported result: with the id of the child agent whose answer it
/// is, when it is one (`children`: call id → child id).
fn tool_result_event(r: &ToolResultInput, children: &HashMap<String, String>) -> NewEvent {
    let content: Vec<Value> = r.content.iter().map(|b| b.clone().into_value()).collect();
    let mut data = json!({"callId": r.call_id, "content": content, "isError": r.is_error});
    if let Some(child) = children.get(&r.call_id) {
        data["child"] = child.clone().into();
    }
    NewEvent::visible(types::TOOL_RESULT, data)
}

/// The `tool/result` events the reported results (`buffered`, and `extra`) let the agent log
/// now: in model order (`pending`), up to the first call still without a result. Returns them
/// with the call ids they answer.
fn result_events(
    pending: &[crate::log::rules::PendingCall],
    buffered: &[ToolResultInput],
    extra: Option<&ToolResultInput>,
    children: &HashMap<String, String>,
) -> (Vec<NewEvent>, Vec<String>) {
    let mut events = Vec::new();
    let mut ids = Vec::new();
    for p in pending {
        let Some(r) = buffered.iter().chain(extra).find(|r| r.call_id == p.id) else { break };
        events.push(tool_result_event(r, children));
        ids.push(p.id.clone());
    }
    (events, ids)
}

/// A `compaction/end{failed}` for a compaction this instance left open because the store
/// refused its outcome (a request or a new compaction cannot start while one is open).
pub(crate) fn stale_compaction_end(log: &Log) -> Option<NewEvent> {
    // A native compaction request in flight is not stale: its answer comes when it comes.
    let c = log.state().compaction.as_ref().filter(|c| c.landed || !c.in_background())?;
    let outcome = if c.landed { "landed" } else { "failed" };
    let mut data = json!({"outcome": outcome});
    if !c.landed {
        data["error"] = "the store refused the compaction's outcome".into();
    }
    Some(NewEvent::new(types::COMPACTION_END, data))
}
