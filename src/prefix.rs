//! Session prefix composition (`agent/session-prefix`, docs/contract.md §3.3) and pre-step listeners
//! (§3.4).
//!
//! The prefix is a waterfall over the prefix listeners in registration order: each listener
//! receives what the listeners registered after it produced (the seed is an empty, immutable
//! list) and returns the extended list. A listener that prepends its contribution
//! (`[mine, ...rest]`) puts contributions on the wire in registration order; one that appends
//! yields reverse order. Because a listener needs the later listeners' result as its input,
//! listeners are *invoked* from the last registered to the first.
//!
//! The result is validated, deep-copied and frozen (an `Arc<Vec<Message>>` nobody can mutate)
//! once per agent instance.

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::log::event::{types, NewEvent, UserSource};
use crate::session::Session;
use crate::types::{JsonMap, Message, ToolSchema};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a listener can see and do while it runs.
pub struct ListenerContext<'a> {
    /// The session (listeners may read it and append context or their own events).
    pub session: &'a Session,
    /// Trips when the operation is cancelled or the agent disposed; long waits must honour it.
    pub cancel: &'a CancelToken,
    /// The agent instance id.
    pub instance: u64,
    /// The open turn.
    pub turn: u64,
    pub(crate) dispose: &'a AtomicBool,
    pub(crate) dispose_token: &'a CancelToken,
}

impl ListenerContext<'_> {
    /// What a host prefix listener receives (the C ABI's callback input): `{"rest": [messages
    /// the later listeners contributed], "instance", "turn"}`.
    pub fn host_input(&self, rest: &[Message]) -> Value {
        json!({"rest": rest, "instance": self.instance, "turn": self.turn})
    }

    /// Appends durable context (a `user/message` with source `plugin`) that joins the current
    /// request's history.
    pub fn append_context(&self, message: Message) -> Result<u64> {
        self.session.append(context_event(message, UserSource::Plugin)?)
    }

    /// Disposes the agent instance: the running operation ends with `disposed`.
    pub fn dispose_agent(&self) {
        self.dispose.store(true, Ordering::SeqCst);
        self.dispose_token.cancel();
    }

    /// Whether the operation was cancelled or the agent disposed.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A `user/message` event carrying context from `source`.
pub fn context_event(message: Message, source: UserSource) -> Result<NewEvent> {
    if message.role != crate::types::Role::User {
        return Err(Error::invalid("message.role", "context is a user-role message"));
    }
    let mut data = JsonMap::new();
    data.insert("message".into(), message.to_value());
    data.insert("source".into(), source.as_str().into());
    Ok(NewEvent::visible(types::USER_MESSAGE, Value::Object(data)))
}

/// A session prefix contributor.
pub trait PrefixListener: Send + Sync {
    /// Returns the prefix extended with this listener's contribution. `rest` is what the
    /// listeners registered after this one produced.
    fn compose(&self, ctx: &ListenerContext<'_>, rest: &[Message]) -> Result<Vec<Message>>;
}

impl<F> PrefixListener for F
where
    F: Fn(&ListenerContext<'_>, &[Message]) -> Result<Vec<Message>> + Send + Sync,
{
    fn compose(&self, ctx: &ListenerContext<'_>, rest: &[Message]) -> Result<Vec<Message>> {
        self(ctx, rest)
    }
}

/// What a pre-step listener receives.
pub struct PreStepInfo<'a> {
    /// The composed session prefix.
    pub prefix: &'a [Message],
    /// The system prompt the request will carry.
    pub system: Option<&'a str>,
    /// The tools the request will carry.
    pub tools: &'a [ToolSchema],
    /// The turn.
    pub turn: u64,
    /// The step about to be built.
    pub step: u64,
}

impl PreStepInfo<'_> {
    /// The JSON form handed to host callbacks.
    pub fn to_json(&self) -> Value {
        json!({"prefix": self.prefix, "system": self.system, "tools": self.tools, "turn": self.turn, "step": self.step})
    }
}

/// A listener that runs after composition and before the pressure gate of every step.
pub trait PreStepListener: Send + Sync {
    /// Called before each request; may append context through `ctx`.
    fn pre_step(&self, ctx: &ListenerContext<'_>, info: &PreStepInfo<'_>) -> Result<()>;
}

impl<F> PreStepListener for F
where
    F: Fn(&ListenerContext<'_>, &PreStepInfo<'_>) -> Result<()> + Send + Sync,
{
    fn pre_step(&self, ctx: &ListenerContext<'_>, info: &PreStepInfo<'_>) -> Result<()> {
        self(ctx, info)
    }
}

/// Validates what a listener returned as JSON (the form host callbacks use).
pub fn parse_listener_output(v: &Value) -> Result<Vec<Message>> {
    Message::list_from_value(v, "prefix").map_err(|e| {
        Error::new(ErrorKind::Listener, format!("a prefix listener returned invalid data: {}", e.message()))
            .with("field", e.detail().get("field").cloned().unwrap_or(Value::Null))
    })
}

/// Runs the waterfall. Cancellation is checked before and after every listener, so a result
/// produced while the operation was being cancelled is discarded.
pub fn compose(listeners: &[Arc<dyn PrefixListener>], ctx: &ListenerContext<'_>) -> Result<Arc<Vec<Message>>> {
    let check = || -> Result<()> {
        if ctx.dispose.load(Ordering::SeqCst) {
            return Err(Error::new(ErrorKind::Disposed, "the agent instance was disposed during session prefix composition"));
        }
        if ctx.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Cancelled, "session prefix composition was cancelled"));
        }
        Ok(())
    };
    let mut acc: Vec<Message> = Vec::new();
    for (i, l) in listeners.iter().enumerate().rev() {
        check()?;
        let out = l.compose(ctx, &acc).map_err(|e| match e.kind() {
            ErrorKind::Cancelled | ErrorKind::Disposed => e,
            // Keep the detail (e.g. `callback`, `field`): it says what went wrong.
            ErrorKind::Listener => e.with("listener", i as u64),
            _ => e.with_kind(ErrorKind::Listener).context(format!("prefix listener #{i} failed")).with("listener", i as u64),
        })?;
        check()?;
        acc = out;
    }
    // Validate the final composition once more through its JSON form (a deep copy that no
    // listener holds a reference to), then its tool pairing.
    let v = serde_json::to_value(&acc).expect("messages serialise");
    let messages = parse_listener_output(&v)?;
    check_pairing(&messages).map_err(|e| {
        Error::new(ErrorKind::Listener, format!("the composed session prefix breaks tool pairing: {}", e.message()))
            .with("field", e.detail().get("field").cloned().unwrap_or(Value::Null))
    })?;
    Ok(Arc::new(messages))
}

/// Checks a composed prefix with the pairing rules of the history: only an assistant message
/// calls tools (each call id once); a tool result is a `tool-result` block in a user message
/// that holds nothing else, and answers the first call still waiting (results come in the
/// order of the calls, right after the message that made them); no call is left unanswered.
pub fn check_pairing(messages: &[Message]) -> Result<()> {
    let mut waiting: std::collections::VecDeque<&str> = std::collections::VecDeque::new();
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let results = m.content.iter().filter(|b| b.tool_result_id().is_some()).count();
        if let Some(id) = waiting.front() {
            if results == 0 {
                return Err(Error::invalid(
                    format!("prefix[{i}]"),
                    format!("tool call {id:?} has no result: the results of a message's calls follow it, before any other message"),
                ));
            }
        }
        for (j, b) in m.content.iter().enumerate() {
            let at = format!("prefix[{i}].content[{j}]");
            if let Some((id, _, _)) = b.as_tool_call() {
                if m.role != crate::types::Role::Assistant {
                    return Err(Error::invalid(at, "only an assistant message calls tools"));
                }
                if !seen.insert(id) {
                    return Err(Error::invalid(at, format!("tool call id {id:?} is used twice")));
                }
                waiting.push_back(id);
            } else if let Some(id) = b.tool_result_id() {
                if m.role != crate::types::Role::User || results != m.content.len() {
                    return Err(Error::invalid(at, "a tool result travels in a user message that holds only tool results"));
                }
                match waiting.front() {
                    Some(first) if *first == id => {
                        waiting.pop_front();
                    }
                    Some(first) if waiting.contains(&id) => {
                        return Err(Error::invalid(at, format!("results come in the order of the calls: {first:?} comes before {id:?}")));
                    }
                    _ => return Err(Error::invalid(at, format!("the tool result for {id:?} answers no tool call before it"))),
                }
            }
        }
    }
    match waiting.front() {
        Some(id) => Err(Error::invalid(format!("prefix[{}]", messages.len() - 1), format!("tool call {id:?} has no result in the prefix"))),
        None => Ok(()),
    }
}
