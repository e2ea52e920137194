//! Agent trees (docs/caching.md, "Agent trees"; docs/log.md, "Agent trees"): a child agent
//! spawned from one of its parent's open tool calls, or at a turn boundary, whose first request
//! reads its parent's cache; its answer going back as the parent's tool result.
//!
//! A child is a session of its own, seeded with every event of its parent (as a fork is), so
//! that its log alone rebuilds each of its requests. Its header records the parent, the seq of
//! the parent's `agent/spawn` event (the seed length), the call it answers and the cache key
//! (the parent's request id: the child's requests carry it as their `sessionId`, the default
//! cache key). After the seed the child's log holds one placeholder `tool/result` for each of the
//! parent's open calls (the same constant text for each, so siblings share them), then the
//! directive as a `user/message` of the open turn (of a new turn at a boundary). Its agent keeps
//! the parent's last request header (config, system, tools, session prefix): its first request is
//! the parent's last routed request extended by the parent's assistant message, the
//! placeholders and the directive, byte for byte up to there in every wire format.
//!
//! The child may not change model, provider, tools, system prompt or session prefix: those are
//! what its cache hit rests on ([`Agent::new`] and [`Agent::set_options`] refuse them, naming the
//! field). Finishing it ([`Agent::conclude`] on the child, [`Agent::finish_child`] on the parent)
//! records its final answer, or its failure, as the parent's result of that call, with the
//! child's id; results of parallel children are logged in call order whatever order they finish
//! in.

use super::{Agent, Frozen, ToolResultInput};
use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::event::{types, Event, NewEvent, TurnEndReason, UserSource};
use crate::log::load::{SessionHeader, SpawnLink};
use crate::render::{BodyCache, CacheTtl};
use crate::request::PrefixBytes;
use crate::session::{now_ms, Session, SessionOptions};
use crate::store::NewStore;
use crate::types::{Block, Message, Role};
use serde_json::{json, Value};

/// The result text a child sees for each of its parent's open tool calls (its own included):
/// one constant, so that sibling children share everything before their directives.
pub const DEFAULT_PLACEHOLDER: &str = "This tool call is being worked on by another agent; its result is not shown here.";

/// How a child is spawned ([`Agent::spawn`]; the C ABI's `lls_agent_spawn` options).
#[derive(Clone, Debug)]
pub struct SpawnOptions {
    /// The parent's open tool call the child answers (`None`: at a turn boundary, when no call
    /// of the parent waits for its result).
    pub call_id: Option<String>,
    /// The child's task: the last user message of its first request.
    pub directive: Message,
    /// The result text of every open call of the parent in the child's history
    /// ([`DEFAULT_PLACEHOLDER`] when `None`).
    pub placeholder: Option<String>,
    /// The child session's id (default: the parent's id, a dot and the call id, or `at` and the
    /// seed length at a boundary) and durability.
    pub session: SessionOptions,
    /// The TTL of the child's Anthropic cache breakpoints (default: the parent's render
    /// options). A child that lives minutes should not pay for one-hour writes.
    pub cache_ttl: Option<CacheTtl>,
    /// How many requests the child may send (`None`: no limit).
    pub max_turns: Option<u64>,
}

impl SpawnOptions {
    /// Options for a child answering `call_id` with `directive`.
    pub fn new(call_id: Option<&str>, directive: Message) -> SpawnOptions {
        SpawnOptions {
            call_id: call_id.map(str::to_string),
            directive,
            placeholder: None,
            session: SessionOptions::default(),
            cache_ttl: None,
            max_turns: None,
        }
    }
}

/// What finishing a child gave its parent ([`Agent::finish_child`]). Its JSON (`Serialize`) is
/// what `lls_agent_finish_child` returns: `{"child", "callId"?, "answer", "isError",
/// "recorded"}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildOutcome {
    /// The child session's id.
    pub child: String,
    /// The parent's call it answered (`None`: a child spawned at a turn boundary, whose answer
    /// is the host's to use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The text of the child's last assistant message, or why it failed.
    pub answer: String,
    /// Whether the child failed (its turn did not complete).
    pub is_error: bool,
    /// Tool results written to the parent's log by this call: the child's, and those of
    /// earlier-finished siblings it was waiting behind; 0 when an earlier call of the batch
    /// still waits for its result (the child's result is logged with it, in call order).
    pub recorded: usize,
}

/// A child's pinned request header and request budget (see [`Agent::new`]).
#[derive(Clone, Debug)]
pub(crate) struct Pinned {
    /// The header of the child's log when the agent was created: its parent's last one.
    pub header: EpochHeader,
    /// The session id, for messages.
    pub session: String,
    /// The number of requests after which the child may send no more (`maxTurns`).
    pub request_limit: Option<(u64, u64)>,
}

/// The pinned header of `session` when it is a spawned child (`None` otherwise), with its
/// request budget.
pub(crate) fn pinned_of(session: &Session) -> Result<Option<Pinned>> {
    let h = session.header_record();
    let Some(spawn) = &h.spawn else { return Ok(None) };
    let seed = h.parent.as_ref().map(|(_, n)| *n).unwrap_or(0);
    let mut g = session.lock();
    let header = g.log.state().headers.current().cloned().ok_or_else(|| {
        Error::new(ErrorKind::CorruptLog, format!("session {} is a child but holds no request header of its parent", h.id))
    })?;
    let request_limit = match spawn.max_turns {
        None => None,
        Some(m) => {
            // The seed's requests (its lines are read from the store when the session was
            // opened from a checkpoint after the seed).
            let seeded = g.event_records(0, seed)?.iter().filter(|l| l.starts_with("{\"type\":\"step/start\"")).count() as u64;
            Some((seeded + m, m))
        }
    };
    Ok(Some(Pinned { header, session: h.id.clone(), request_limit }))
}

impl Pinned {
    /// Refuses options that change what a child keeps of its parent, naming the field.
    pub(crate) fn check(&self, options: &super::AgentOptions) -> Result<()> {
        let h = &self.header;
        let refuse = |field: &str, what: String| {
            Err(Error::invalid(
                field,
                format!(
                    "session {} is a child agent: it keeps its parent's model, tools and system prompt, which its cache hits rest on, and {what}; create an agent on a new session to use another (its first request starts cold)",
                    self.session
                ),
            ))
        };
        if options.config.provider != h.config.provider {
            return refuse(
                "config.provider",
                format!("these options change the provider to {:?} (the parent's: {:?})", options.config.provider, h.config.provider),
            );
        }
        if options.config.model != h.config.model {
            return refuse(
                "config.model",
                format!("these options change the model to {:?} (the parent's: {:?})", options.config.model, h.config.model),
            );
        }
        if options.system.as_deref().unwrap_or("") != h.system_str() {
            return refuse("system", "these options change the system prompt".to_string());
        }
        if options.tools.as_slice() != h.tools_slice() {
            let names = |t: &[crate::types::ToolSchema]| t.iter().map(|t| t.name.clone()).collect::<Vec<_>>().join(", ");
            return refuse(
                "tools",
                format!("these options change the tools to [{}] (the parent's: [{}])", names(&options.tools), names(h.tools_slice())),
            );
        }
        Ok(())
    }

    /// The frozen session prefix: the parent's, never composed again.
    pub(crate) fn frozen(&self) -> Frozen {
        let messages = self.header.message_prefix.clone().unwrap_or_default();
        let bytes = PrefixBytes::of(self.header.message_prefix.as_ref());
        Frozen { messages, bytes }
    }
}

/// Agent options that send what `header` records.
pub(crate) fn options_of(header: &EpochHeader) -> super::AgentOptions {
    let mut o = super::AgentOptions::new(header.config.clone());
    o.system = header.system.clone();
    o.tools = header.tools.clone().unwrap_or_default();
    o
}

/// A file-name-safe form of a call id: ASCII letters, digits, `-` and `_` kept, anything else
/// `_`, at most 64 characters.
fn tag_of(call: &str) -> String {
    call.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The tag a child is named with: its call id made file-name safe, or `at` and the seed length
/// at a turn boundary.
fn child_tag(call_id: Option<&str>, seed: u64) -> String {
    match call_id {
        Some(c) => tag_of(c),
        None => format!("at{seed}"),
    }
}

impl Agent {
    /// The id a child spawned now for `call_id` gets by default: this session's id, a dot and the
    /// tag (the call id made file-name safe, or `at` and the seed length at a boundary).
    pub fn default_child_id(&self, call_id: Option<&str>) -> String {
        let (id, n) = self.session.with_log_and_id(|l| l.len() as u64);
        format!("{id}.{}", child_tag(call_id, n))
    }

    /// Whether this agent drives a spawned child (its model, tools, system prompt and session
    /// prefix are its parent's).
    pub fn is_child(&self) -> bool {
        self.pinned.is_some()
    }

    /// Spawns a child agent from this agent's session (module docs): from the open tool call
    /// `opts.call_id` of the last assistant message, or at a turn boundary. The child session is
    /// created in `store` (a new, empty store, with the file it created, if any), or where this
    /// session's store places children ([`crate::store::Store::child_store`]: beside a JSONL file,
    /// in the same database, in memory). This session records `agent/spawn` naming the child.
    /// The child agent has this agent's renderer (with `opts.cache_ttl`), compaction policies,
    /// summariser and token counter; its next request is its first.
    ///
    /// Errors (each changes nothing): `OutOfOrder` before this session has sent a request, while
    /// a step or a compaction is open, for a call that is not waiting for its result, and at a
    /// boundary with calls still waiting; `InvalidInput` for a directive that is not a user
    /// message, a store that already holds a session, no place for the child (a host store:
    /// give `path` or `url`); the store's errors.
    pub fn spawn(&mut self, opts: SpawnOptions, store: Option<NewStore>) -> Result<Agent> {
        self.ensure_live()?;
        if opts.directive.role != Role::User {
            return Err(Error::invalid(
                "directive.role",
                format!("a child's directive is a user message, got {}", opts.directive.role.as_str()),
            ));
        }
        let directive_event = {
            let mut data = serde_json::Map::new();
            data.insert("message".into(), opts.directive.to_value());
            data.insert("source".into(), UserSource::User.as_str().into());
            NewEvent::visible(types::USER_MESSAGE, Value::Object(data))
        };
        crate::log::history::project(&directive_event.clone().into_event(0, 0)).map_err(|e| e.context("directive"))?;
        let placeholder = opts.placeholder.clone().unwrap_or_else(|| DEFAULT_PLACEHOLDER.to_string());
        let mut g = self.session.lock();
        let st = g.log.state();
        if st.headers.current().is_none() {
            return Err(Error::out_of_order(
                "this session has sent no request yet: a child extends its parent's last request, so spawn it after the first one",
            ));
        }
        if let Some(t) = st.open_turn.as_ref().filter(|t| t.step_open) {
            return Err(Error::out_of_order(format!(
                "step {} is open (a request is in flight): record its response before spawning a child",
                t.last_step
            )));
        }
        if st.compaction.is_some() {
            return Err(Error::out_of_order("a compaction is open: spawn the child once it has ended"));
        }
        match &opts.call_id {
            Some(id) if !st.pending.iter().any(|p| &p.id == id) => {
                let waiting: Vec<&str> = st.pending.iter().map(|p| p.id.as_str()).collect();
                return Err(Error::out_of_order(format!(
                    "{id:?} is not a tool call waiting for its result (waiting: [{}]): a child answers an open call of the last assistant message",
                    waiting.join(", ")
                ))
                .with("callId", id.clone()));
            }
            None if !st.pending.is_empty() => {
                let waiting: Vec<&str> = st.pending.iter().map(|p| p.id.as_str()).collect();
                return Err(Error::out_of_order(format!(
                    "tool calls [{}] wait for their results: give the call the child answers (callId), or spawn once they are answered",
                    waiting.join(", ")
                )));
            }
            _ => {}
        }
        let parent = g.header.clone();
        let n = g.log.len() as u64;
        let tag = child_tag(opts.call_id.as_deref(), n);
        let id = match &opts.session.id {
            Some(id) => {
                crate::session::check_session_id(id)?;
                id.clone()
            }
            None => format!("{}.{tag}", parent.id),
        };
        // The child's opening events, after the seed: a placeholder result for every open call
        // (in model order), then the directive (in a new turn at a boundary).
        let time = now_ms();
        let mut tail: Vec<NewEvent> = st
            .pending
            .iter()
            .map(|p| {
                NewEvent::visible(
                    types::TOOL_RESULT,
                    json!({"callId": p.id, "content": [{"type": "text", "text": placeholder}], "isError": false, "placeholder": true}),
                )
            })
            .collect();
        if st.open_turn.is_none() {
            tail.push(NewEvent::new(types::TURN_START, json!({"turn": st.last_turn + 1})));
        }
        tail.push(directive_event);
        // The seed: the parent's events (those older than a session opened from a checkpoint
        // holds are read from its store).
        let mut events: Vec<Event> = g.event_records(0, n)?.iter().map(|l| Event::from_json(l)).collect::<Result<_>>()?;
        for (i, ev) in tail.into_iter().enumerate() {
            events.push(ev.into_event(n + i as u64, time));
        }
        let (store, created) = match store {
            Some(s) => s,
            None => g.store.child_store(&tag, &id, opts.session.durability)?.ok_or_else(|| {
                Error::invalid(
                    "opts.path",
                    format!("{} cannot place a child beside its session: give the child's `path` or `url`", g.store.describe()),
                )
            })?,
        };
        let header = SessionHeader {
            parent: Some((parent.id.clone(), n)),
            lineage: parent.fork_lineage(n),
            spawn: Some(SpawnLink { call_id: opts.call_id.clone(), cache_key: parent.request_id().to_string(), max_turns: opts.max_turns }),
            ..SessionHeader::new(id.clone(), time)
        };
        let remove = |created: &Option<String>| crate::store::options::remove_created(created.as_deref());
        let child = match Session::create_seeded(store, header, events, &opts.session) {
            Ok(c) => c,
            Err(e) => {
                remove(&created);
                return Err(e);
            }
        };
        // The parent records the child at the seq the child's seed ends at.
        let mut data = json!({"child": id});
        if let Some(c) = &opts.call_id {
            data["callId"] = c.clone().into();
        }
        if let Err(e) = g.append(NewEvent::new(types::AGENT_SPAWN, data)) {
            drop(child);
            remove(&created);
            return Err(e.context("recording the child in its parent's log"));
        }
        drop(g);
        self.session.note_child(&child);
        let mut agent = Agent::new(&child, options_of(&child.request_header().expect("seeded with the parent's header")))?;
        agent.options.check_requests = self.options.check_requests;
        agent.summariser = self.summariser.clone();
        agent.counter = self.counter.clone();
        agent.policies = self.policies.clone();
        if let Some(b) = &self.body {
            let mut o = b.options().clone();
            if opts.cache_ttl.is_some() {
                o.cache_ttl = opts.cache_ttl;
            }
            agent.body = Some(BodyCache::new(b.renderer(), o));
        }
        Ok(agent)
    }

    /// Ends this child's open turn so that its parent can take its answer
    /// ([`finish_child`](Self::finish_child)): `completed` when `failure` is `None` (the last
    /// step must have its response and no tool call may wait), else `error` with `failure` as
    /// its error (an open step is closed and waiting calls are answered with errors). Nothing to
    /// do when no turn is open.
    pub fn conclude(&mut self, failure: Option<&str>) -> Result<()> {
        self.ensure_live()?;
        if self.session.with_log(|l| l.state().open_turn.is_none()) {
            return Ok(());
        }
        match failure {
            None => self.end_turn_inner(TurnEndReason::Completed, None),
            Some(why) => self.end_turn_inner(TurnEndReason::Error, Some(why.to_string())),
        }
    }

    /// Gives the answer of `child`, a child spawned from this agent's session whose turn has
    /// ended ([`conclude`](Self::conclude)), to this agent: the text of the child's last
    /// assistant message when its turn completed, else an error naming how it ended, recorded as
    /// the result of the call the child answers, with the child's id (`tool/result` field
    /// `child`). Results are logged in call order: a result whose earlier siblings still run
    /// waits for them (as [`record_tool_result`](Self::record_tool_result)). A child spawned at a
    /// boundary answers no call: its outcome is returned and nothing is written.
    ///
    /// Errors (each changes nothing): `InvalidInput` for a session that is not a child of this
    /// one; `OutOfOrder` while the child's turn is open, or when the call no longer waits (the
    /// parent's turn ended, the result was recorded).
    pub fn finish_child(&mut self, child: &Session) -> Result<ChildOutcome> {
        self.ensure_live()?;
        let h = child.header_record();
        let me = self.session.id();
        let spawn = match (&h.parent, &h.spawn) {
            (Some((p, _)), Some(s)) if *p == me => s.clone(),
            (Some((p, _)), Some(_)) => {
                return Err(Error::invalid("child", format!("session {} is a child of {p}, not of this agent's session {me}", h.id)))
            }
            (Some(_), None) => return Err(Error::invalid("child", format!("session {} is a fork, not a spawned child", h.id))),
            (None, _) => return Err(Error::invalid("child", format!("session {} is not a child (its header names no parent)", h.id))),
        };
        let seed = h.parent.as_ref().map(|(_, n)| *n).unwrap_or(0);
        let (answer, is_error) = child_answer(&mut child.lock(), seed, &h.id)?;
        let mut outcome = ChildOutcome { child: h.id.clone(), call_id: spawn.call_id.clone(), answer, is_error, recorded: 0 };
        let Some(call) = spawn.call_id else { return Ok(outcome) };
        let waiting = self.session.with_log(|l| l.state().pending.iter().any(|p| p.id == call));
        if !waiting {
            return Err(Error::out_of_order(format!(
                "the parent's tool call {call:?} no longer waits for a result (its turn ended, or its result was recorded): the answer of child {} is not recorded",
                h.id
            ))
            .with("callId", call));
        }
        self.child_results.insert(call.clone(), h.id.clone());
        let result = ToolResultInput { call_id: call.clone(), content: vec![Block::text(&outcome.answer)], is_error: outcome.is_error };
        match self.record_tool_result(result) {
            Ok(n) => outcome.recorded = n,
            Err(e) => {
                self.child_results.remove(&call);
                return Err(e);
            }
        }
        Ok(outcome)
    }
}

/// The answer of a child whose log is `log` (its own events from seq `seed` on): the text of its
/// last assistant message when its last turn completed, else an error saying how it ended.
fn child_answer(g: &mut crate::session::Inner, seed: u64, id: &str) -> Result<(String, bool)> {
    if let Some(t) = &g.log.state().open_turn {
        return Err(Error::out_of_order(format!(
            "the turn of child {id} is still open (turn {}): end it first (conclude, or lls_agent_finish_child, which ends it)",
            t.turn
        )));
    }
    let mut end: Option<(String, Option<String>)> = None;
    let mut message: Option<Message> = None;
    // Read back from the end, a block at a time (older events than a session opened from a
    // checkpoint holds come from the store).
    let mut to = g.log.len() as u64;
    'read: while to > seed {
        let from = to.saturating_sub(256).max(seed);
        let lines = g.event_records(from, to)?;
        to = from;
        for l in lines.iter().rev() {
            let ev = Event::from_json(l)?;
            match ev.ty.as_str() {
                types::TURN_END if end.is_none() => {
                    let reason = ev.data.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
                    let error = ev.data.get("error").and_then(Value::as_str).map(str::to_string);
                    end = Some((reason, error));
                }
                types::ASSISTANT_MESSAGE => {
                    message = ev.data.get("message").and_then(|m| Message::from_value(m, "message").ok());
                    break 'read;
                }
                _ => {}
            }
        }
    }
    match end {
        Some((reason, _)) if reason == TurnEndReason::Completed.as_str() || reason == TurnEndReason::MaxTokens.as_str() => {
            Ok((message.map(|m| m.text()).unwrap_or_default(), false))
        }
        Some((reason, error)) => {
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            Ok((format!("the subagent {id} did not finish: its turn ended {reason}{why}"), true))
        }
        None => Ok((format!("the subagent {id} did not finish: it has not run"), true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_file_name_safe() {
        assert_eq!(tag_of("call_1"), "call_1");
        assert_eq!(tag_of("toolu_01A/b c"), "toolu_01A_b_c");
        assert_eq!(tag_of(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn the_placeholder_is_one_constant() {
        let o = SpawnOptions::new(Some("c"), Message::user_text("go"));
        assert!(o.placeholder.is_none());
        assert!(!DEFAULT_PLACEHOLDER.is_empty());
    }
}
