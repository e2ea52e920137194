//! Validation of every append (docs/contract.md §2.2): shape, surface rules, tool pairing, and ownership of
//! the turn / step an event names.
//!
//! [`LogState::check`] validates an event against the current state without changing it and
//! returns an [`Effect`]; [`LogState::apply`] then applies the effect. A rejected append
//! therefore changes nothing.

use crate::error::{Error, ErrorKind, Result};
use crate::header::{delta_from_event_data, EpochHeader, HeaderFold, HeaderSnapshot, SnapshotReason};
use crate::log::event::{types, Event, SurfaceOp, TurnEndReason, UserSource};
use crate::log::history::{derive_message, Derived, History};
use crate::log::project::{Call, Projected};
use crate::types::{Fields, Usage};
use std::collections::HashSet;
use std::sync::Arc;

/// The open turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenTurn {
    /// The turn number (from 1).
    pub turn: u64,
    /// The number of the last step started in this turn (0 before the first).
    pub last_step: u64,
    /// Whether that step is still open.
    pub step_open: bool,
    /// Whether the open step has its assistant message.
    pub step_answered: bool,
    /// Tool calls of the open step's assistant message that still need a `tool/call` event.
    pub calls_to_log: Vec<(String, String, String)>,
}

/// A tool call waiting for its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCall {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The seq of its `tool/call` event.
    pub seq: u64,
}

/// An open compaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenCompaction {
    /// Seq of its `compaction/start`.
    pub start_seq: u64,
    /// Whether its summary was recorded.
    pub summarised: bool,
    /// Whether its checkpoint landed.
    pub landed: bool,
    /// The surface span it announced (`start..=end`).
    pub span: (usize, usize),
    /// The seqs of that span when it started.
    pub seqs: Vec<u64>,
    /// A provider's native compaction (`mechanism: "native"` on its `compaction/start`).
    pub native: Option<NativeOpen>,
}

/// What an open native compaction says about itself (docs/compaction.md, "Native compaction").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeOpen {
    /// `"threshold"` (the provider compacted inside a conversation request) or `"on-demand"`
    /// (a compaction request of its own, which conversation requests may pass while it runs).
    pub mode: String,
    /// The body format of the provider that makes the block (a renderer name).
    pub format: String,
    /// The items its `compaction/native` recorded, which the checkpoint must carry.
    pub items: Option<Vec<serde_json::Value>>,
}

/// The native compaction modes.
pub const NATIVE_MODES: &[&str] = &["threshold", "on-demand"];

/// The formats with a native compaction (renderer names).
pub const NATIVE_FORMATS: &[&str] = &["anthropic", "openai-responses"];

impl OpenCompaction {
    /// Whether this is a native compaction with a request of its own (conversation requests
    /// may go on while it runs: "background" compaction).
    pub fn in_background(&self) -> bool {
        self.native.as_ref().is_some_and(|n| n.mode == "on-demand")
    }
}

/// What a validated event does to the state.
#[derive(Debug)]
pub enum Effect {
    /// Nothing beyond being logged.
    None,
    /// Opens a turn.
    TurnStart(u64),
    /// Closes the open turn.
    TurnEnd,
    /// Opens a step.
    StepStart(u64),
    /// Closes the open step.
    StepEnd,
    /// Appends a user message or tool result to the surface.
    Append(Arc<Derived>),
    /// Replaces a surface span with a checkpoint.
    Replace(usize, usize, Arc<Derived>),
    /// An assistant message: appended, and its calls must be logged.
    Assistant(Arc<Derived>, Vec<(String, String, String)>, bool),
    /// A tool call joins the pending batch.
    ToolCall(String, String),
    /// A tool result answers the first pending call.
    ToolResult(Arc<Derived>),
    /// A header snapshot.
    Snapshot(HeaderSnapshot),
    /// A header delta, already applied.
    Delta(EpochHeader, u64),
    /// A compaction starts over a span (a native one says what it is).
    CompactionStart((usize, usize), Vec<u64>, Option<NativeOpen>),
    /// A compaction summary.
    CompactionSummary,
    /// A native compaction's block or items (the checkpoint must carry them).
    CompactionNative(Vec<serde_json::Value>),
    /// A compaction ends.
    CompactionEnd,
    /// A checkpoint (`session/checkpoint`) was written: whether it is a full one (it carries
    /// the surface and the header itself; see [`crate::log::checkpoint`]).
    Checkpoint(bool),
}

/// The folded state that validation needs.
#[derive(Clone, Debug, Default)]
pub struct LogState {
    /// The last turn number used.
    pub last_turn: u64,
    /// The open turn, if any.
    pub open_turn: Option<OpenTurn>,
    /// Tool calls waiting for results, in model order.
    pub pending: Vec<PendingCall>,
    /// The ids of the tool calls the surface holds (a new call's id must not be one of them; a
    /// call a compaction summarised away no longer counts).
    pub known_calls: HashSet<String>,
    /// The open compaction, if any.
    pub compaction: Option<OpenCompaction>,
    /// The surface with its derivation cache.
    pub history: History,
    /// The header fold.
    pub headers: HeaderFold,
    /// Seq of the latest assistant message that carried usage, with that usage.
    pub last_usage: Option<(u64, Usage)>,
    /// Seq of the latest replace (compaction checkpoint).
    pub last_replace_seq: Option<u64>,
    /// Conversation requests recorded (`step/start` events).
    pub requests: u64,
    /// Seq of the latest `step/start` (the last conversation request routed).
    pub last_request_seq: Option<u64>,
    /// Provider-reported cached input tokens, summed over assistant messages.
    pub cached_tokens: u64,
    /// Provider-reported prompt tokens, summed over assistant messages.
    pub prompt_tokens: u64,
    /// Compactions that landed.
    pub compactions: u64,
    /// Seq of the latest checkpoint (`session/checkpoint`).
    pub last_checkpoint: Option<u64>,
    /// Seq of the latest full checkpoint that still describes the surface before the last
    /// replace and the current header (none since a replace or a header event): a later
    /// checkpoint refers to it instead of carrying them again.
    pub checkpoint_base: Option<u64>,
}

/// What [`LogState::savepoint`] saved.
#[derive(Debug)]
pub(crate) struct StateSave {
    last_turn: u64,
    open_turn: Option<OpenTurn>,
    pending: Vec<PendingCall>,
    compaction: Option<OpenCompaction>,
    history: HistorySave,
    headers: Option<HeaderFold>,
    last_usage: Option<(u64, Usage)>,
    last_replace_seq: Option<u64>,
    requests: u64,
    last_request_seq: Option<u64>,
    cached_tokens: u64,
    prompt_tokens: u64,
    compactions: u64,
    last_checkpoint: Option<u64>,
    checkpoint_base: Option<u64>,
    /// The whole set of known tool-call ids, when the batch replaces a span (which removes ids).
    known_calls: Option<HashSet<String>>,
    /// Tool-call ids that effects applied since the savepoint made known.
    pub added_calls: Vec<String>,
}

#[derive(Debug)]
enum HistorySave {
    Whole(History),
    Mark(crate::log::history::Mark),
}

impl Effect {
    /// The tool-call ids this effect makes known (an assistant message's calls).
    pub(crate) fn new_call_ids(&self) -> impl Iterator<Item = &str> {
        let calls: &[(String, String, String)] = match self {
            Effect::Assistant(_, calls, _) => calls,
            _ => &[],
        };
        calls.iter().map(|(id, _, _)| id.as_str())
    }
}

fn field_err(ev: &Event, e: Error) -> Error {
    let field = e.detail().get("field").and_then(|f| f.as_str()).unwrap_or("").to_string();
    let name = if ev.ty.is_empty() { "event" } else { ev.ty.as_str() };
    Error::new(e.kind(), format!("{name} (seq {}): {}", ev.seq, e.message()))
        .with("eventType", ev.ty.clone())
        .with("seq", ev.seq)
        .with("field", field)
}

fn rule(ev: &Event, field: &str, why: impl std::fmt::Display) -> Error {
    let e = if field.is_empty() { Error::out_of_order(why.to_string()) } else { Error::out_of_order(format!("{field}: {why}")) };
    field_err(ev, e.with("field", field.to_string()))
}

impl LogState {
    /// Validates `ev` against the current state. `next_seq` is the seq the log expects.
    pub fn check(&self, ev: &Event, next_seq: u64) -> Result<Effect> {
        self.check_with(ev, next_seq, None)
    }

    /// [`check`](Self::check) of a visible event whose derived message was projected from its
    /// record's bytes (`crate::log::project`): the projection stands in for the derivation, which
    /// would check the same and give the same message. `ev.data` may then leave out the message
    /// (`data.message`, a tool result's `data.content`), which nothing else reads.
    pub(crate) fn check_projected(&self, ev: &Event, next_seq: u64, projected: Projected) -> Result<Effect> {
        self.check_with(ev, next_seq, Some(projected))
    }

    fn check_with(&self, ev: &Event, next_seq: u64, projected: Option<Projected>) -> Result<Effect> {
        if ev.seq != next_seq {
            return Err(field_err(ev, Error::invalid("seq", format!("expected {next_seq} (seqs are contiguous from 0), got {}", ev.seq))));
        }
        if ev.ty.is_empty() {
            return Err(field_err(ev, Error::invalid("type", "must not be empty")));
        }
        if exceeds_depth(&ev.data, MAX_DATA_DEPTH) {
            return Err(field_err(
                ev,
                Error::invalid(
                    "data",
                    format!("nests deeper than {MAX_DATA_DEPTH} levels; the logged line could not be read back (JSON readers stop at 128)"),
                ),
            ));
        }
        let visible = types::is_model_visible(&ev.ty);
        if !visible && (ev.surface_op.is_some() || ev.sources.is_some()) {
            return Err(field_err(
                ev,
                Error::invalid(
                    "surfaceOp",
                    "only model-visible events (user/message, assistant/message, tool/result) carry surfaceOp and sources",
                ),
            ));
        }
        if visible && ev.surface_op.is_none() {
            return Err(field_err(ev, Error::invalid("surfaceOp", "is required on a model-visible event (\"append\" or a replace)")));
        }
        if ev.surface_op == Some(SurfaceOp::Append) && ev.sources.is_some() {
            return Err(field_err(ev, Error::invalid("sources", "an append does not shadow anything; leave sources out")));
        }
        self.check_typed(ev, projected).map_err(|e| if e.detail().contains_key("eventType") { e } else { field_err(ev, e) })
    }

    fn check_typed(&self, ev: &Event, projected: Option<Projected>) -> Result<Effect> {
        // A visible event's derived message: the projection from its record, or the derivation.
        let derived = |projected: Option<Projected>| -> Result<(Derived, Vec<Call>)> {
            match projected {
                Some(p) => Ok((p.derived, p.calls)),
                None => {
                    let (d, calls) = derive_message(ev)?.expect("a visible event");
                    Ok((d, calls.into_iter().map(|(i, id, name, args)| (i, id.to_string(), name.to_string(), args.to_string())).collect()))
                }
            }
        };
        let f = Fields::of(&ev.data, "data")?;
        let turn_ref = |f: &Fields| -> Result<(u64, u64)> { Ok((f.u64("turn")?, f.u64("step")?)) };
        match ev.ty.as_str() {
            types::TURN_START => {
                let turn = f.u64("turn")?;
                if let Some(t) = &self.open_turn {
                    return Err(rule(ev, "", format!("turn {} is still open; end it before starting another", t.turn)));
                }
                if turn != self.last_turn + 1 {
                    return Err(rule(ev, "data.turn", format!("expected turn {}, got {turn}", self.last_turn + 1)));
                }
                Ok(Effect::TurnStart(turn))
            }
            types::TURN_END => {
                let turn = f.u64("turn")?;
                TurnEndReason::parse(f.str("reason")?, "data.reason")?;
                f.opt_str("error")?;
                let t = self.open_turn.as_ref().ok_or_else(|| rule(ev, "", "no turn is open"))?;
                if t.turn != turn {
                    return Err(rule(ev, "data.turn", format!("turn {turn} is not the open turn ({})", t.turn)));
                }
                if t.step_open {
                    return Err(rule(ev, "", format!("step {} is still open; end it first", t.last_step)));
                }
                if let Some(p) = self.pending.first() {
                    return Err(rule(ev, "", format!("tool call {:?} has no result yet", p.id)));
                }
                Ok(Effect::TurnEnd)
            }
            types::STEP_START => {
                let (turn, step) = turn_ref(&f)?;
                let instance = f.u64("instance")?;
                let digest = f.str("digest")?;
                if !is_digest(digest) {
                    return Err(Error::invalid("data.digest", "expected \"sha256:\" followed by 64 lowercase hex digits"));
                }
                f.u64("bytes")?;
                let t = self.open_turn.as_ref().ok_or_else(|| rule(ev, "", "no turn is open"))?;
                if t.turn != turn {
                    return Err(rule(ev, "data.turn", format!("turn {turn} is not the open turn ({})", t.turn)));
                }
                if t.step_open {
                    return Err(rule(ev, "", format!("step {} is still open", t.last_step)));
                }
                if step != t.last_step + 1 {
                    return Err(rule(ev, "data.step", format!("expected step {}, got {step}", t.last_step + 1)));
                }
                if let Some(p) = self.pending.first() {
                    return Err(rule(ev, "", format!("tool call {:?} has no result yet", p.id)));
                }
                match self.headers.instance() {
                    None => return Err(rule(ev, "", "no request header was recorded before the first request")),
                    Some(i) if i != instance => {
                        return Err(rule(
                            ev,
                            "data.instance",
                            format!("instance {instance} has not recorded its header (the latest header is instance {i}'s)"),
                        ))
                    }
                    _ => {}
                }
                if self.compaction.as_ref().is_some_and(|c| !c.in_background()) {
                    return Err(rule(ev, "", "a compaction is still open"));
                }
                Ok(Effect::StepStart(step))
            }
            types::STEP_END => {
                let (turn, step) = turn_ref(&f)?;
                let outcome = f.str("outcome")?;
                f.opt_str("error")?;
                let t = self.open_turn.as_ref().ok_or_else(|| rule(ev, "", "no turn is open"))?;
                if !t.step_open || t.turn != turn || t.last_step != step {
                    return Err(rule(ev, "data.step", format!("turn {turn} step {step} is not the open step")));
                }
                match outcome {
                    "response" if !t.step_answered => {
                        return Err(rule(ev, "data.outcome", "a response step needs its assistant/message first"))
                    }
                    "response" | "error" | "cancelled" => {}
                    other => {
                        return Err(Error::invalid(
                            "data.outcome",
                            format!("expected \"response\", \"error\" or \"cancelled\", got {other:?}"),
                        ))
                    }
                }
                if let Some((id, _, _)) = t.calls_to_log.first() {
                    return Err(rule(ev, "", format!("tool call {id:?} of this step's assistant message has no tool/call event yet")));
                }
                Ok(Effect::StepEnd)
            }
            types::USER_MESSAGE => {
                let source = UserSource::parse(f.str("source")?, "data.source")?;
                let d = Arc::new(derived(projected)?.0);
                // A checkpoint may land while tool calls wait: its span is tool-balanced, so it
                // holds none of them (a native compaction's block arrives when it arrives).
                if let Some(p) = self.pending.first().filter(|_| source != UserSource::Compaction) {
                    return Err(rule(ev, "", format!("the tool batch is open: tool call {:?} has no result yet", p.id)));
                }
                if let Some(t) = &self.open_turn {
                    if t.step_open {
                        return Err(rule(ev, "", format!("step {} is open; context joins after the response", t.last_step)));
                    }
                }
                match (source, ev.surface_op.unwrap()) {
                    (UserSource::User, SurfaceOp::Append) => {
                        if self.open_turn.is_none() {
                            return Err(rule(ev, "data.source", "a user message must be inside a turn (turn/start first)"));
                        }
                        Ok(Effect::Append(d))
                    }
                    (UserSource::Compaction, SurfaceOp::Replace { start, end }) => {
                        let c = match &self.compaction {
                            Some(c) if c.summarised && !c.landed => c,
                            _ => return Err(rule(ev, "", "a checkpoint lands only inside a compaction, after its compaction/summary")),
                        };
                        self.history.check_replace(start, end, ev.sources.as_deref())?;
                        let mut cited: Vec<u64> = ev.sources.clone().unwrap_or_default();
                        cited.sort_unstable();
                        let mut announced = c.seqs.clone();
                        announced.sort_unstable();
                        if c.span != (start, end) || cited != announced {
                            return Err(rule(
                                ev,
                                "surfaceOp",
                                format!(
                                    "the checkpoint must replace the span its compaction/start announced ({}..={}, seqs {:?})",
                                    c.span.0, c.span.1, c.seqs
                                ),
                            ));
                        }
                        if let Some(n) = &c.native {
                            check_native_checkpoint(ev, n)?;
                        }
                        Ok(Effect::Replace(start, end, d))
                    }
                    (UserSource::Compaction, SurfaceOp::Append) => {
                        Err(Error::invalid("surfaceOp", "a compaction checkpoint replaces the span it summarises"))
                    }
                    (_, SurfaceOp::Replace { .. }) => {
                        Err(Error::invalid("surfaceOp", "only a compaction checkpoint may replace surface events"))
                    }
                    (_, SurfaceOp::Append) => Ok(Effect::Append(d)),
                }
            }
            types::ASSISTANT_MESSAGE => {
                let (turn, step) = turn_ref(&f)?;
                if let Some(u) = f.opt_value("usage")? {
                    Usage::from_value(u, "data.usage")?;
                }
                if ev.surface_op != Some(SurfaceOp::Append) {
                    return Err(Error::invalid("surfaceOp", "an assistant message is appended"));
                }
                let (d, msg_calls) = derived(projected)?;
                let d = Arc::new(d);
                let t = self.open_turn.as_ref().ok_or_else(|| rule(ev, "", "no turn is open"))?;
                if !t.step_open || t.turn != turn || t.last_step != step {
                    return Err(rule(ev, "data.step", format!("turn {turn} step {step} is not the open step")));
                }
                if t.step_answered {
                    return Err(rule(ev, "", format!("step {step} already has its assistant message")));
                }
                let mut calls = Vec::new();
                for (i, id, name, args) in msg_calls {
                    if self.known_calls.contains(&id) || calls.iter().any(|(c, _, _): &(String, String, String)| *c == id) {
                        return Err(Error::invalid(
                            format!("data.message.content[{i}].id"),
                            format!("tool call id {id:?} is already used by a tool call of the session's history"),
                        ));
                    }
                    calls.push((id, name, args));
                }
                let has_usage = f.opt_value("usage")?.is_some();
                Ok(Effect::Assistant(d, calls, has_usage))
            }
            types::TOOL_CALL => {
                let (turn, step) = turn_ref(&f)?;
                let id = f.str("callId")?;
                let name = f.str("name")?;
                let args = f.str("arguments")?;
                let t = self.open_turn.as_ref().ok_or_else(|| rule(ev, "", "no turn is open"))?;
                if !t.step_open || t.turn != turn || t.last_step != step {
                    return Err(rule(ev, "data.step", format!("turn {turn} step {step} is not the open step")));
                }
                match t.calls_to_log.first() {
                    None => {
                        Err(rule(ev, "data.callId", format!("the step's assistant message has no (further) tool call; {id:?} is unknown")))
                    }
                    Some((want, wname, wargs)) if want != id => {
                        Err(rule(ev, "data.callId", format!("expected tool call {want:?} next (model order), got {id:?}")))
                    }
                    Some((_, wname, wargs)) if wname != name || wargs != args => {
                        Err(rule(ev, "data", format!("name/arguments of tool call {id:?} differ from the assistant message")))
                    }
                    Some(_) => Ok(Effect::ToolCall(id.to_string(), name.to_string())),
                }
            }
            types::TOOL_RESULT => {
                // The projection checks callId, content and isError, in that order.
                let d = derived(projected)?.0;
                let id = f.str("callId")?;
                if f.opt_str("child")?.is_some_and(str::is_empty) {
                    return Err(Error::invalid("data.child", "must not be empty (the id of the child agent's session)"));
                }
                if ev.surface_op != Some(SurfaceOp::Append) {
                    return Err(Error::invalid("surfaceOp", "a tool result is appended"));
                }
                if let Some(t) = &self.open_turn {
                    if t.step_open {
                        return Err(rule(ev, "", format!("step {} is still open; tool results follow its step/end", t.last_step)));
                    }
                }
                match self.pending.first() {
                    None => Err(rule(ev, "data.callId", format!("no tool call is waiting for a result; {id:?} is unknown"))),
                    Some(p) if p.id != id => {
                        if self.pending.iter().any(|p| p.id == id) {
                            Err(rule(ev, "data.callId", format!("results are logged in model order: {:?} comes before {id:?}", p.id)))
                        } else {
                            Err(rule(ev, "data.callId", format!("{id:?} is not a pending tool call")))
                        }
                    }
                    Some(_) => Ok(Effect::ToolResult(Arc::new(d))),
                }
            }
            types::REQUEST_HEADER => {
                let snap = HeaderSnapshot::from_value(&ev.data, "data")?;
                let prev = self.headers.instance();
                match (snap.reason, prev) {
                    (SnapshotReason::Initial, None) => {}
                    (SnapshotReason::Initial, Some(_)) => {
                        return Err(rule(ev, "data.reason", "\"initial\" is only for the first header of the session"))
                    }
                    (_, None) => return Err(rule(ev, "data.reason", "the first header of a session has reason \"initial\"")),
                    (SnapshotReason::Resume, Some(_)) => {
                        if snap.instance <= self.headers.max_instance() {
                            return Err(rule(
                                ev,
                                "data.instance",
                                format!("a resume starts a new instance: expected more than {}", self.headers.max_instance()),
                            ));
                        }
                    }
                    (SnapshotReason::Change, Some(p)) => {
                        if snap.instance != p {
                            return Err(rule(ev, "data.instance", format!("a change belongs to the current instance {p}")));
                        }
                    }
                }
                if let Some(t) = &self.open_turn {
                    if t.step_open {
                        return Err(rule(ev, "", "a header is recorded before the step it belongs to"));
                    }
                }
                Ok(Effect::Snapshot(snap))
            }
            types::REQUEST_HEADER_DELTA => {
                let (delta, instance) = delta_from_event_data(&ev.data, "data")?;
                let next = self.headers.check_delta(&delta)?;
                if Some(instance) != self.headers.instance() {
                    return Err(rule(ev, "data.instance", "a delta belongs to the instance of the latest header"));
                }
                Ok(Effect::Delta(next, instance))
            }
            types::COMPACTION_START => {
                if self.compaction.is_some() {
                    return Err(rule(ev, "", "a compaction is already open"));
                }
                let span = Fields::of(f.value("span")?, "data.span")?;
                let (start, end) = (span.u64("start")? as usize, span.u64("end")? as usize);
                let seqs: Vec<u64> = f
                    .array("seqs")?
                    .iter()
                    .enumerate()
                    .map(|(i, s)| s.as_u64().ok_or_else(|| Error::invalid(format!("data.seqs[{i}]"), "expected a seq")))
                    .collect::<Result<_>>()?;
                let native = match f.opt_str("mechanism")? {
                    None | Some("portable") => None,
                    Some("native") => {
                        let mode = f.str("mode")?;
                        if !NATIVE_MODES.contains(&mode) {
                            return Err(Error::invalid("data.mode", format!("expected \"threshold\" or \"on-demand\", got {mode:?}")));
                        }
                        let format = f.str("format")?;
                        if !NATIVE_FORMATS.contains(&format) {
                            return Err(Error::invalid(
                                "data.format",
                                format!(
                                    "expected \"anthropic\" or \"openai-responses\" (the formats with a native compaction), got {format:?}"
                                ),
                            ));
                        }
                        if start != 0 {
                            return Err(rule(
                                ev,
                                "data.span",
                                "a native compaction replaces the head of the surface (its span starts at 0)",
                            ));
                        }
                        Some(NativeOpen { mode: mode.to_string(), format: format.to_string(), items: None })
                    }
                    Some(other) => {
                        return Err(Error::invalid("data.mechanism", format!("expected \"portable\" or \"native\", got {other:?}")))
                    }
                };
                if let Some(x) = f.opt_array("expanded")? {
                    for (i, s) in x.iter().enumerate() {
                        if s.as_u64().is_none_or(|s| s >= ev.seq) {
                            return Err(Error::invalid(format!("data.expanded[{i}]"), "expected the seq of an earlier event"));
                        }
                    }
                }
                // The span must exist, be tool-balanced, and the seqs must be exactly its events.
                self.history.check_replace(start, end, Some(&seqs)).map_err(|e| {
                    let field = e
                        .detail()
                        .get("field")
                        .and_then(|f| f.as_str())
                        .unwrap_or("")
                        .replace("surfaceOp", "data.span")
                        .replace("sources", "data.seqs");
                    Error::new(e.kind(), e.message().replace("surfaceOp", "data.span").replace("sources", "data.seqs")).with("field", field)
                })?;
                Ok(Effect::CompactionStart((start, end), seqs, native))
            }
            types::COMPACTION_SUMMARY => {
                f.str("summary")?;
                match &self.compaction {
                    Some(c) if c.native.is_some() => {
                        Err(rule(ev, "", "a native compaction records its block in compaction/native, not a summary"))
                    }
                    Some(c) if !c.summarised => Ok(Effect::CompactionSummary),
                    Some(_) => Err(rule(ev, "", "this compaction already has its summary")),
                    None => Err(rule(ev, "", "no compaction is open")),
                }
            }
            types::COMPACTION_NATIVE => {
                let items = f.array("items")?;
                if items.is_empty() {
                    return Err(Error::invalid("data.items", "must hold the provider's compaction block or item"));
                }
                for (i, it) in items.iter().enumerate() {
                    if !it.is_object() {
                        return Err(Error::invalid(format!("data.items[{i}]"), "expected an object (a provider item, verbatim)"));
                    }
                }
                let compactions = items.iter().filter(|it| it.get("type").and_then(|t| t.as_str()) == Some("compaction")).count();
                if compactions != 1 {
                    return Err(Error::invalid(
                        "data.items",
                        format!("must hold exactly one item of type \"compaction\", got {compactions}"),
                    ));
                }
                let c = self.compaction.as_ref().ok_or_else(|| rule(ev, "", "no compaction is open"))?;
                let n = c
                    .native
                    .as_ref()
                    .ok_or_else(|| rule(ev, "", "the open compaction is portable; compaction/native belongs to a native one"))?;
                if c.summarised {
                    return Err(rule(ev, "", "this compaction already has its block"));
                }
                let format = f.str("format")?;
                if format != n.format {
                    return Err(rule(ev, "data.format", format!("the compaction/start announced {:?}, got {format:?}", n.format)));
                }
                Ok(Effect::CompactionNative(items.clone()))
            }
            types::COMPACTION_END => {
                let outcome = f.str("outcome")?;
                f.opt_str("error")?;
                if !["landed", "failed", "discarded", "cancelled"].contains(&outcome) {
                    return Err(Error::invalid(
                        "data.outcome",
                        format!("expected landed, failed, discarded or cancelled, got {outcome:?}"),
                    ));
                }
                let c = self.compaction.as_ref().ok_or_else(|| rule(ev, "", "no compaction is open"))?;
                if (outcome == "landed") != c.landed {
                    return Err(rule(
                        ev,
                        "data.outcome",
                        if c.landed {
                            "the checkpoint landed, so the outcome is \"landed\""
                        } else {
                            "\"landed\" needs the checkpoint user/message first"
                        },
                    ));
                }
                Ok(Effect::CompactionEnd)
            }
            types::AGENT_SPAWN => {
                let child = f.str("child")?;
                if child.is_empty() {
                    return Err(Error::invalid("data.child", "must not be empty (the id of the child agent's session)"));
                }
                if let Some(t) = &self.open_turn {
                    if t.step_open {
                        return Err(rule(ev, "", format!("step {} is open: a child is spawned after its response", t.last_step)));
                    }
                }
                if self.compaction.is_some() {
                    return Err(rule(ev, "", "a compaction is open"));
                }
                if let Some(id) = f.opt_str("callId")? {
                    if !self.pending.iter().any(|p| p.id == id) {
                        return Err(rule(ev, "data.callId", format!("{id:?} is not a tool call waiting for its result")));
                    }
                }
                Ok(Effect::None)
            }
            types::CLOCK_DECISION => {
                let decision = f.str("decision")?;
                if crate::clock::Action::parse(decision).is_none() {
                    return Err(Error::invalid(
                        "data.decision",
                        format!("expected none, compact, keep-warm, let-expire or tier, got {decision:?}"),
                    ));
                }
                f.u64("at")?;
                f.str("reason")?;
                if decision == "tier" {
                    f.str("tier")?;
                }
                if self.open_turn.as_ref().is_some_and(|t| t.step_open) {
                    return Err(rule(ev, "", "a request is open: the cache clock decides between requests"));
                }
                Ok(Effect::None)
            }
            types::CLOCK_KEEPALIVE => {
                f.u64("replays")?;
                f.u64("maxTokens")?;
                f.u64("bytes")?;
                if !is_digest(f.str("requestDigest")?) {
                    return Err(Error::invalid("data.requestDigest", "expected \"sha256:\" followed by 64 lowercase hex digits"));
                }
                if f.opt_str("tier")?.is_some_and(str::is_empty) {
                    return Err(Error::invalid("data.tier", "is empty (the tier the keep-warm request was sent at, or absent)"));
                }
                if self.open_turn.as_ref().is_some_and(|t| t.step_open) {
                    return Err(rule(ev, "", "a request is open: a keep-warm request is sent between requests"));
                }
                if self.compaction.is_some() {
                    return Err(rule(ev, "", "a compaction is open"));
                }
                Ok(Effect::None)
            }
            types::CLOCK_KEEPALIVE_END => {
                let request = f.u64("request")?;
                if request >= ev.seq {
                    return Err(Error::invalid("data.request", format!("names seq {request}, not an earlier clock/keepalive")));
                }
                let outcome = f.str("outcome")?;
                if !["response", "error", "cancelled"].contains(&outcome) {
                    return Err(Error::invalid("data.outcome", format!("expected response, error or cancelled, got {outcome:?}")));
                }
                if let Some(u) = f.opt_value("usage")? {
                    Usage::from_value(u, "data.usage")?;
                }
                if let Some(m) = f.opt_value("message")? {
                    crate::types::Message::from_value(m, "data.message")?;
                }
                f.opt_str("error")?;
                if self.open_turn.as_ref().is_some_and(|t| t.step_open) {
                    return Err(rule(ev, "", "a request is open: a keep-warm answer is recorded before the next request"));
                }
                Ok(Effect::None)
            }
            types::CHECKPOINT => {
                if self.compaction.is_some() {
                    return Err(rule(ev, "", "a checkpoint is not written while a compaction is open"));
                }
                let want = crate::log::checkpoint::data(self);
                if let Some(field) = crate::log::checkpoint::first_difference(&ev.data, &want, "data") {
                    return Err(Error::new(
                        ErrorKind::CorruptLog,
                        format!(
                            "{field}: the checkpoint does not match the log before it (a checkpoint is derived data: the log gives {})",
                            crate::log::checkpoint::describe_at(&want, &field)
                        ),
                    )
                    .with("field", field)
                    .with("checkpoint", true));
                }
                Ok(Effect::Checkpoint(crate::log::checkpoint::is_full(&want)))
            }
            other => {
                if let Some(p) = types::RESERVED_PREFIXES.iter().find(|p| other.starts_with(*p)) {
                    return Err(Error::invalid(
                        "type",
                        format!("{other:?} is not in the catalogue, and the {p:?} namespace is reserved for it"),
                    ));
                }
                Ok(Effect::None)
            }
        }
    }

    /// Applies a checked effect.
    pub fn apply(&mut self, ev: &Event, effect: Effect) {
        match effect {
            Effect::None => {}
            Effect::TurnStart(turn) => {
                self.last_turn = turn;
                self.open_turn = Some(OpenTurn { turn, last_step: 0, step_open: false, step_answered: false, calls_to_log: Vec::new() });
            }
            Effect::TurnEnd => self.open_turn = None,
            Effect::StepStart(step) => {
                let t = self.open_turn.as_mut().expect("checked");
                t.last_step = step;
                t.step_open = true;
                t.step_answered = false;
                self.requests += 1;
                self.last_request_seq = Some(ev.seq);
            }
            Effect::StepEnd => {
                let t = self.open_turn.as_mut().expect("checked");
                t.step_open = false;
            }
            Effect::Append(d) => self.history.push(d),
            Effect::Replace(start, end, d) => {
                for e in &self.history.entries()[start..=end] {
                    for id in e.calls.iter() {
                        self.known_calls.remove(&**id);
                    }
                }
                self.history.replace(start, end, d);
                self.last_replace_seq = Some(ev.seq);
                self.checkpoint_base = None;
                if let Some(c) = self.compaction.as_mut() {
                    c.landed = true;
                }
            }
            Effect::Assistant(d, calls, has_usage) => {
                let t = self.open_turn.as_mut().expect("checked");
                t.step_answered = true;
                for (id, _, _) in &calls {
                    self.known_calls.insert(id.clone());
                }
                t.calls_to_log = calls;
                if has_usage {
                    let usage = ev.data.get("usage").and_then(|u| Usage::from_value(u, "").ok()).unwrap_or_default();
                    self.cached_tokens += usage.cache_read_tokens.unwrap_or(0);
                    self.prompt_tokens += usage.prompt_tokens();
                    self.last_usage = Some((ev.seq, usage));
                }
                self.history.push(d);
            }
            Effect::ToolCall(id, name) => {
                let t = self.open_turn.as_mut().expect("checked");
                t.calls_to_log.remove(0);
                self.pending.push(PendingCall { id, name, seq: ev.seq });
            }
            Effect::ToolResult(d) => {
                self.pending.remove(0);
                self.history.push(d);
            }
            Effect::Snapshot(snap) => {
                self.headers.apply_snapshot(ev.seq, &snap);
                self.checkpoint_base = None;
            }
            Effect::Delta(h, instance) => {
                self.headers.apply_delta(ev.seq, instance, h);
                self.checkpoint_base = None;
            }
            Effect::CompactionStart(span, seqs, native) => {
                self.compaction = Some(OpenCompaction { start_seq: ev.seq, summarised: false, landed: false, span, seqs, native })
            }
            Effect::CompactionSummary => self.compaction.as_mut().expect("checked").summarised = true,
            Effect::CompactionNative(items) => {
                let c = self.compaction.as_mut().expect("checked");
                c.summarised = true;
                if let Some(n) = c.native.as_mut() {
                    n.items = Some(items);
                }
            }
            Effect::CompactionEnd => {
                if self.compaction.take().is_some_and(|c| c.landed) {
                    self.compactions += 1;
                }
            }
            Effect::Checkpoint(full) => {
                self.last_checkpoint = Some(ev.seq);
                if full {
                    self.checkpoint_base = Some(ev.seq);
                }
            }
        }
    }

    /// Saves what a batch of appends may change, so that [`rollback`](Self::rollback) can undo
    /// them when the store refuses the batch. Cheap for the usual batch: the history is saved
    /// by length unless the batch replaces a span (`replaces`), the header fold only when the
    /// batch records a header (`headers`).
    pub(crate) fn savepoint(&self, replaces: bool, headers: bool) -> StateSave {
        StateSave {
            last_turn: self.last_turn,
            open_turn: self.open_turn.clone(),
            pending: self.pending.clone(),
            compaction: self.compaction.clone(),
            history: if replaces { HistorySave::Whole(self.history.clone()) } else { HistorySave::Mark(self.history.mark()) },
            headers: headers.then(|| self.headers.clone()),
            last_usage: self.last_usage.clone(),
            last_replace_seq: self.last_replace_seq,
            requests: self.requests,
            last_request_seq: self.last_request_seq,
            cached_tokens: self.cached_tokens,
            prompt_tokens: self.prompt_tokens,
            compactions: self.compactions,
            last_checkpoint: self.last_checkpoint,
            checkpoint_base: self.checkpoint_base,
            known_calls: replaces.then(|| self.known_calls.clone()),
            added_calls: Vec::new(),
        }
    }

    /// Undoes every effect applied since `save` was taken (see [`savepoint`](Self::savepoint)).
    pub(crate) fn rollback(&mut self, save: StateSave) {
        self.last_turn = save.last_turn;
        self.open_turn = save.open_turn;
        self.pending = save.pending;
        self.compaction = save.compaction;
        match save.history {
            HistorySave::Whole(h) => self.history = h,
            HistorySave::Mark(m) => self.history.rollback(m),
        }
        if let Some(h) = save.headers {
            self.headers = h;
        }
        self.last_usage = save.last_usage;
        self.last_replace_seq = save.last_replace_seq;
        self.requests = save.requests;
        self.last_request_seq = save.last_request_seq;
        self.cached_tokens = save.cached_tokens;
        self.prompt_tokens = save.prompt_tokens;
        self.compactions = save.compactions;
        self.last_checkpoint = save.last_checkpoint;
        self.checkpoint_base = save.checkpoint_base;
        match save.known_calls {
            Some(all) => self.known_calls = all,
            None => {
                for id in save.added_calls {
                    self.known_calls.remove(&id);
                }
            }
        }
    }

    /// Whether the turn/step/tool state is at rest (no open turn, step, batch or compaction).
    pub fn at_rest(&self) -> bool {
        self.open_turn.is_none() && self.pending.is_empty() && self.compaction.is_none()
    }
}

/// How deeply an event's `data` may nest (arrays and objects, `data` itself being level 1), so
/// that its line, one level deeper, stays within what JSON readers accept (serde_json: 128).
pub const MAX_DATA_DEPTH: usize = 100;

/// Whether `v` nests more than `levels` arrays/objects deep (stops descending at the limit).
fn exceeds_depth(v: &serde_json::Value, levels: usize) -> bool {
    use serde_json::Value;
    match v {
        Value::Array(a) => levels == 0 || a.iter().any(|x| exceeds_depth(x, levels - 1)),
        Value::Object(m) => levels == 0 || m.values().any(|x| exceeds_depth(x, levels - 1)),
        _ => false,
    }
}

/// A native compaction's checkpoint carries exactly the items its `compaction/native` recorded,
/// each as an opaque block of the compaction's format, and nothing else.
fn check_native_checkpoint(ev: &Event, n: &NativeOpen) -> Result<()> {
    let items = n.items.as_deref().unwrap_or_default();
    let want: Vec<serde_json::Value> =
        items.iter().map(|it| serde_json::json!({"type": "opaque", "origin": n.format, "item": it})).collect();
    let got = ev.data.get("message").and_then(|m| m.get("content")).and_then(|c| c.as_array());
    if got.map(Vec::as_slice) != Some(want.as_slice()) {
        return Err(rule(
            ev,
            "data.message.content",
            format!(
                "a native checkpoint carries exactly the {} item(s) of its compaction/native, as opaque blocks of origin {:?}",
                items.len(),
                n.format
            ),
        ));
    }
    Ok(())
}

fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Errors of this kind come from a stored log rather than from a caller.
pub(crate) fn as_corrupt(e: Error, line: usize) -> Error {
    let msg = format!("line {line}: {}", e.message());
    let mut out = Error::new(ErrorKind::CorruptLog, msg);
    for (k, v) in e.detail() {
        out = out.with(k, v.clone());
    }
    out.with("line", line as u64)
}
