//! The turn/step lifecycle and request building.

use super::{Agent, Frozen};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::header::{HeaderSnapshot, SnapshotReason};
use crate::log::event::{types, NewEvent, TurnEndReason, UserSource};
use crate::log::load::parse_records;
use crate::log::Log;
use crate::prefix::{compose, context_event, ListenerContext, PreStepInfo};
use crate::request::{conversation_envelope, conversation_envelope_digest, PrefixBytes, Request};
use crate::types::{Block, Message, Provenance, Role, Usage};
use serde_json::{json, Value};
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
        // Validate the user message before anything is written, so a bad message changes nothing.
        let probe = NewEvent::visible(types::USER_MESSAGE, Value::Object(data.clone()));
        crate::log::history::project(&probe.clone().into_event(0, 0))?;
        g.append(NewEvent::new(types::TURN_START, json!({"turn": turn})))?;
        g.append(probe)?;
        Ok(turn)
    }

    /// Builds the next request of the open turn (see the module docs for the steps).
    pub fn next_request(&mut self, cancel: &CancelToken) -> Result<Request> {
        self.ensure_live()?;
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
            (t.turn, t.last_step + 1)
        };
        let (op, _guards) = self.op_token(cancel);
        if let Err(e) = self.prepare(&op, turn, step) {
            return Err(self.fail_turn(e));
        }
        if let Err(e) = self.gate(&op, turn) {
            if matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Disposed) {
                return Err(self.fail_turn(e));
            }
            // A failed compaction is logged (compaction/end{failed}); the request goes ahead.
        }
        self.build_step(turn, step)
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

    /// Records the header if owed, writes `step/start` and returns the envelope.
    fn build_step(&mut self, turn: u64, step: u64) -> Result<Request> {
        let wanted = self.wanted_header();
        let session_id;
        let (body, body_digest, seq, prefix_len, message_count, shared) = {
            let mut g = self.session.lock();
            session_id = g.header.id.clone();
            let folded = g.log.state().headers.current();
            if self.prev_request.is_none() {
                // This instance's first request: the previous request of the session is the last
                // one an earlier instance routed, with the header folded now; it carried the
                // leading history entries logged before its step/start (an entry replaced or
                // appended since has a later seq).
                if let (Some(routed), Some(h)) = (crate::compaction::last_step_seq(&g.log), folded) {
                    let seqs = g.log.history().entries().iter().map(|d| d.seq).take_while(|s| *s < routed).collect();
                    self.prev_request = Some((h.message_prefix.clone(), seqs));
                }
            }
            let reason = if !self.anchored {
                Some(if folded.is_none() { SnapshotReason::Initial } else { SnapshotReason::Resume })
            } else if folded != Some(&wanted) {
                Some(SnapshotReason::Change)
            } else {
                None
            };
            if let Some(reason) = reason {
                let snap = HeaderSnapshot { header: wanted, reason, instance: self.instance };
                g.append(NewEvent::new(types::REQUEST_HEADER, snap.to_value()))?;
                self.anchored = true;
            }
            let header = g.log.state().headers.current().cloned().expect("a header was recorded");
            let frozen = self.frozen.as_mut().expect("composed");
            if !frozen.bytes.is_for(header.message_prefix.as_ref()) {
                // Only reachable if the logged prefix is not this instance's frozen one.
                frozen.bytes = PrefixBytes::of(header.message_prefix.as_ref());
            }
            let (body, d) = conversation_envelope_digest(&g.log, &header, &frozen.bytes, &session_id, turn, step, &mut self.digest_cache);
            let seq = g.append(NewEvent::new(
                types::STEP_START,
                json!({"turn": turn, "step": step, "instance": self.instance, "digest": d.as_str(), "bytes": body.len()}),
            ))?;
            let hist = g.log.history().entries();
            let prefix = header.message_prefix.clone();
            let shared = match &self.prev_request {
                None => 0,
                Some((prev_prefix, prev_seqs)) => {
                    let same_prefix = match (prev_prefix, &prefix) {
                        (None, None) => true,
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                        _ => false,
                    };
                    if !same_prefix {
                        0
                    } else {
                        let p = prefix.as_ref().map(|p| p.len()).unwrap_or(0);
                        p + prev_seqs.iter().zip(hist.iter()).take_while(|(a, b)| **a == b.seq).count()
                    }
                }
            };
            let plen = prefix.as_ref().map(|p| p.len()).unwrap_or(0);
            let count = plen + hist.len();
            self.prev_request = Some((prefix, hist.iter().map(|d| d.seq).collect()));
            (body, d, seq, plen, count, shared)
        };
        self.stats.requests += 1;
        if self.options.check_requests {
            self.check_request(body.as_bytes(), seq, turn, step)?;
        }
        Ok(Request {
            digest: body_digest,
            json: body,
            turn,
            step,
            instance: self.instance,
            prefix_len,
            message_count,
            shared_messages: shared,
            step_seq: seq,
        })
    }

    /// Check mode: rebuild the request of `step_seq` from the serialised log alone and compare.
    fn check_request(&self, body: &[u8], step_seq: u64, turn: u64, step: u64) -> Result<()> {
        let (records, session_id) = {
            let g = self.session.lock();
            let mut records: Vec<Vec<u8>> = vec![g.header.to_value().to_string().into_bytes()];
            records.extend(g.log.lines()[..step_seq as usize].iter().map(|l| l.as_bytes().to_vec()));
            (records, g.header.id.clone())
        };
        let (_, events) = parse_records(&records)?;
        let log = Log::replay(&events)?;
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
    /// filled from the request's config when absent), one `tool/call` per tool call, `step/end`.
    /// Returns the seq of the `assistant/message`.
    pub fn record_response(&mut self, mut message: Message, usage: Option<Usage>) -> Result<u64> {
        self.ensure_live()?;
        if message.role != Role::Assistant {
            return Err(Error::invalid("message.role", format!("a response is an assistant message, got {}", message.role.as_str())));
        }
        let mut g = self.session.lock();
        let st = g.log.state();
        let t = st.open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open"))?;
        if !t.step_open {
            return Err(Error::out_of_order("no request is open: call next_request first"));
        }
        let (turn, step) = (t.turn, t.last_step);
        if message.provenance.is_none() {
            let cfg = &st.headers.current().expect("a step has a header").config;
            message.provenance = Some(Provenance { provider: cfg.provider.clone(), model: cfg.model.clone(), extra: Default::default() });
        }
        let mut data = json!({"turn": turn, "step": step, "message": message.to_value()});
        if let Some(u) = &usage {
            data["usage"] = serde_json::to_value(u).expect("usage serialises");
        }
        let seq = g.append(NewEvent::visible(types::ASSISTANT_MESSAGE, data))?;
        for (id, name, args) in message.tool_calls() {
            g.append(NewEvent::new(types::TOOL_CALL, json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args})))?;
        }
        g.append(NewEvent::new(types::STEP_END, json!({"turn": turn, "step": step, "outcome": "response"})))?;
        drop(g);
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
            Block::from_value(&b.clone().into_value(), &format!("content[{i}]"))?;
        }
        self.buffered_results.push(result);
        self.flush_results()
    }

    fn flush_results(&mut self) -> Result<usize> {
        let mut written = 0;
        loop {
            let first = self.session.with_log(|l| l.state().pending.first().map(|p| p.id.clone()));
            let Some(id) = first else { break };
            let Some(pos) = self.buffered_results.iter().position(|r| r.call_id == id) else { break };
            let r = self.buffered_results[pos].clone();
            let content: Vec<Value> = r.content.iter().map(|b| b.clone().into_value()).collect();
            self.session
                .lock()
                .append(NewEvent::visible(types::TOOL_RESULT, json!({"callId": r.call_id, "content": content, "isError": r.is_error})))?;
            self.buffered_results.remove(pos);
            written += 1;
        }
        self.flush_context()?;
        Ok(written)
    }

    fn flush_context(&mut self) -> Result<()> {
        while !self.deferred_context.is_empty() {
            let busy =
                self.session.with_log(|l| !l.state().pending.is_empty() || l.state().open_turn.as_ref().is_some_and(|t| t.step_open));
            if busy {
                break;
            }
            let m = self.deferred_context[0].clone();
            self.session.lock().append(context_event(m, UserSource::Host)?)?;
            self.deferred_context.remove(0);
        }
        Ok(())
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
    pub fn report_provider_error(&mut self, message: &str, overflow: bool, cancel: &CancelToken) -> Result<ProviderErrorOutcome> {
        self.ensure_live()?;
        let mut g = self.session.lock();
        let t = g.log.state().open_turn.as_ref().ok_or_else(|| Error::out_of_order("no turn is open"))?;
        if !t.step_open {
            return Err(Error::out_of_order("no request is open: a provider error belongs to a step"));
        }
        let (turn, step) = (t.turn, t.last_step);
        let mut data = json!({"turn": turn, "step": step, "outcome": "error", "error": message});
        if overflow {
            data["overflow"] = true.into();
        }
        g.append(NewEvent::new(types::STEP_END, data))?;
        drop(g);
        if !overflow {
            return Ok(ProviderErrorOutcome::Recorded);
        }
        self.recover_overflow(cancel, turn)
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
        let (turn, step_open, step) = self.session.with_log(|l| {
            let t = l.state().open_turn.as_ref().expect("checked");
            (t.turn, t.step_open, t.last_step)
        });
        if step_open {
            // Close the step: if the response was recorded, its calls must be logged first.
            let mut g = self.session.lock();
            let calls = g.log.state().open_turn.as_ref().map(|t| t.calls_to_log.clone()).unwrap_or_default();
            for (id, name, args) in calls {
                g.append(NewEvent::new(
                    types::TOOL_CALL,
                    json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args}),
                ))?;
            }
            let answered = g.log.state().open_turn.as_ref().is_some_and(|t| t.step_answered);
            let data = if answered {
                json!({"turn": turn, "step": step, "outcome": "response"})
            } else {
                json!({"turn": turn, "step": step, "outcome": "cancelled", "error": format!("turn ended: {}", reason.as_str())})
            };
            g.append(NewEvent::new(types::STEP_END, data))?;
        }
        // Answer pending calls: reported results in model order, an error result for the rest.
        loop {
            let first = self.session.with_log(|l| l.state().pending.first().map(|p| p.id.clone()));
            let Some(id) = first else { break };
            if self.buffered_results.iter().any(|r| r.call_id == id) {
                self.flush_results()?;
                continue;
            }
            let text = format!("no result: the turn ended ({})", reason.as_str());
            self.session.lock().append(NewEvent::visible(
                types::TOOL_RESULT,
                json!({"callId": id, "content": [{"type":"text","text": text}], "isError": true}),
            ))?;
        }
        self.buffered_results.clear();
        let mut data = json!({"turn": turn, "reason": reason.as_str()});
        if let Some(e) = error {
            data["error"] = e.into();
        }
        self.session.lock().append(NewEvent::new(types::TURN_END, data))?;
        self.flush_context()
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
        let open = self.session.with_log(|l| l.state().open_turn.is_some());
        if open {
            self.end_turn_inner(TurnEndReason::Disposed, None)?;
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
