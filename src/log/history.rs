//! The surface and the history derivation (SPEC §2).
//!
//! The surface is the ordered list of model-visible events. One pure per-event projection
//! ([`project`]) turns a surface event into a provider message; the derived history is that
//! projection folded over the surface. Each projection is serialised once and shared through an
//! `Arc`, so reading the history, or building a request from it, copies bytes, never messages.

use crate::error::{Error, Result};
use crate::log::event::{types, Event};
use crate::types::{blocks_from_value, Block, Fields, Message, Role};
use std::collections::HashSet;
use std::sync::Arc;

/// One derived history message: its projection, serialised once.
#[derive(Debug)]
pub struct Derived {
    /// The seq of the surface event it was projected from.
    pub seq: u64,
    /// The message's role.
    pub role: Role,
    /// The message as canonical JSON.
    pub json: Box<str>,
    /// Tool-call ids this (assistant) message opens, in order.
    pub calls: Box<[Box<str>]>,
    /// The tool-call id this (tool result) message answers.
    pub result_for: Option<Box<str>>,
    /// Whether this is a compaction checkpoint.
    pub checkpoint: bool,
}

impl Derived {
    /// The message, parsed back from its JSON (allocates; used off the hot path).
    pub fn message(&self) -> Message {
        let v: serde_json::Value = serde_json::from_str(&self.json).expect("derived JSON is valid");
        Message::from_value(&v, "").expect("derived messages are valid")
    }
}

/// The projection of one model-visible event into a message, or `None` for a log-only event.
///
/// - `user/message` → its `message` (user role);
/// - `assistant/message` → its `message` (assistant role);
/// - `tool/result` → a user message with one `tool-result` block.
///
/// A message event may not carry `tool-result` blocks, and a user message no `tool-call`
/// blocks: tool calls and results travel in their own events, where the pairing rules apply.
pub fn project(ev: &Event) -> Result<Option<Message>> {
    let f = Fields::of(&ev.data, "data").map_err(|e| e.context(&ev.ty))?;
    let msg = match ev.ty.as_str() {
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE => {
            let m = Message::from_value(f.value("message")?, "data.message")?;
            let want = if ev.ty == types::USER_MESSAGE { Role::User } else { Role::Assistant };
            if m.role != want {
                let an = |r: Role| if r == Role::Assistant { "an" } else { "a" };
                return Err(Error::invalid(
                    "data.message.role",
                    format!(
                        "{} {} event carries {} {} message, got {} {} message",
                        an(want),
                        ev.ty,
                        an(want),
                        want.as_str(),
                        an(m.role),
                        m.role.as_str()
                    ),
                ));
            }
            // Tool blocks travel in their own events, where the pairing rules see them.
            for (i, b) in m.content.iter().enumerate() {
                let why = match b.kind() {
                    "tool-result" => "a tool-result block belongs in a tool/result event",
                    "tool-call" if m.role != Role::Assistant => "only an assistant message calls tools",
                    _ => continue,
                };
                return Err(Error::invalid(format!("data.message.content[{i}]"), why));
            }
            m
        }
        types::TOOL_RESULT => {
            let id = f.str("callId")?;
            let content = blocks_from_value(f.value("content")?, "data.content")?;
            let is_error = f.bool("isError")?;
            Message::new(Role::User, vec![Block::tool_result(id, content, is_error)])
        }
        _ => return Ok(None),
    };
    Ok(Some(msg))
}

/// Projects and serialises one event (see [`project`]).
pub fn derive(ev: &Event) -> Result<Option<Derived>> {
    let Some(msg) = project(ev)? else { return Ok(None) };
    let calls: Box<[Box<str>]> = msg.tool_calls().map(|(id, _, _)| Box::<str>::from(id)).collect();
    let result_for = msg.content.iter().find_map(|b| b.tool_result_id()).map(Box::<str>::from);
    let json = serde_json::to_string(&msg).expect("a message always serialises").into_boxed_str();
    let checkpoint = ev.ty == types::USER_MESSAGE && ev.data.get("source").and_then(|s| s.as_str()) == Some("compaction");
    Ok(Some(Derived { seq: ev.seq, role: msg.role, json, calls, result_for, checkpoint }))
}

/// The surface with its derivation cache.
#[derive(Clone, Debug, Default)]
pub struct History {
    entries: Vec<Arc<Derived>>,
    generation: u64,
    bytes: usize,
}

impl History {
    /// The derived messages, in surface order (cheap: `Arc` clones are not taken).
    pub fn entries(&self) -> &[Arc<Derived>] {
        &self.entries
    }

    /// Number of surface events.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the surface is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The replace generation: bumped by every replace.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Total bytes of the serialised history messages (without separators).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The surface seqs in order.
    pub fn seqs(&self) -> Vec<u64> {
        self.entries.iter().map(|d| d.seq).collect()
    }

    pub(crate) fn push(&mut self, d: Arc<Derived>) {
        self.bytes += d.json.len();
        self.entries.push(d);
    }

    /// Checks a replace of `start..=end` citing `sources` (nothing is changed).
    ///
    /// Linear in the span and the sources (a compaction may shadow most of a long session).
    pub(crate) fn check_replace(&self, start: usize, end: usize, sources: Option<&[u64]>) -> Result<()> {
        if start > end {
            return Err(Error::invalid("surfaceOp", format!("start ({start}) is after end ({end})")));
        }
        if end >= self.entries.len() {
            return Err(Error::invalid(
                "surfaceOp.end",
                format!("position {end} is past the end of the surface ({} events)", self.entries.len()),
            ));
        }
        let span = &self.entries[start..=end];
        let sources = sources.ok_or_else(|| Error::invalid("sources", "a replace must cite every shadowed event in sources"))?;
        let shadowed: HashSet<u64> = span.iter().map(|d| d.seq).collect();
        let mut cited = HashSet::with_capacity(sources.len());
        let mut twice = None;
        for s in sources {
            if !cited.insert(*s) && twice.is_none() {
                twice = Some(*s);
            }
        }
        if let Some(missing) = span.iter().map(|d| d.seq).find(|s| !cited.contains(s)) {
            return Err(Error::invalid(
                "sources",
                format!("does not cite shadowed event seq {missing} (the span {start}..={end} shadows {})", describe_seqs(span)),
            ));
        }
        if let Some(extra) = sources.iter().find(|s| !shadowed.contains(s)) {
            return Err(Error::invalid(
                "sources",
                format!("cites seq {extra}, which the span {start}..={end} does not shadow (it shadows {})", describe_seqs(span)),
            ));
        }
        if let Some(seq) = twice {
            return Err(Error::invalid("sources", format!("cites seq {seq} more than once")));
        }
        // Tool pairing: the span must hold each of its tool calls together with its result.
        let calls: HashSet<&str> = span.iter().flat_map(|d| d.calls.iter().map(|c| &**c)).collect();
        let results: HashSet<&str> = span.iter().filter_map(|d| d.result_for.as_deref()).collect();
        for d in span {
            if let Some(id) = d.calls.iter().find(|id| !results.contains(&***id)) {
                return Err(Error::invalid(
                    "surfaceOp",
                    format!("the span {start}..={end} separates tool call {id:?} (seq {}) from its result", d.seq),
                ));
            }
            if let Some(id) = d.result_for.as_deref().filter(|id| !calls.contains(id)) {
                return Err(Error::invalid(
                    "surfaceOp",
                    format!("the span {start}..={end} separates the result of tool call {id:?} (seq {}) from its call", d.seq),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn replace(&mut self, start: usize, end: usize, d: Arc<Derived>) {
        let removed: usize = self.entries[start..=end].iter().map(|d| d.json.len()).sum();
        self.bytes = self.bytes - removed + d.json.len();
        self.entries.splice(start..=end, std::iter::once(d));
        self.generation += 1;
    }

    /// Writes the history as comma-separated JSON messages into `out` (no brackets).
    pub fn write_json(&self, out: &mut Vec<u8>, mut first: bool) {
        for d in &self.entries {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(d.json.as_bytes());
        }
    }
}

/// The seqs of a span for a message: all of them when few, else the first few and a count.
fn describe_seqs(span: &[Arc<Derived>]) -> String {
    const SHOWN: usize = 8;
    let seqs: Vec<String> = span.iter().take(SHOWN).map(|d| d.seq.to_string()).collect();
    if span.len() <= SHOWN {
        format!("seqs [{}]", seqs.join(", "))
    } else {
        format!("seqs [{}, ...] ({} events)", seqs.join(", "), span.len())
    }
}
