//! The surface and the history derivation (docs/contract.md §2.3).
//!
//! The surface is the ordered list of model-visible events. One pure per-event projection
//! ([`project`]) turns a surface event into a provider message; the derived history is that
//! projection folded over the surface. Each projection is serialised once and shared through an
//! `Arc`, so reading the history, or building a request from it, copies bytes, never messages.
//!
//! The history's bytes are kept contiguous: a new message's JSON first lives in a buffer of its
//! own; once the messages not yet sealed reach [`SEAL_BYTES`], they are copied into one shared
//! buffer, separated by commas (`m1,m2,m3`), and their entries are rebuilt as ranges of it. A
//! request then copies runs of many messages at once ([`write_joined`]) instead of gathering
//! one allocation per message, and the history costs one allocation per run.

use crate::error::{Error, Result};
use crate::log::event::{types, Event};
pub use crate::log::text::Text;
use crate::types::{blocks_from_value, Block, Fields, Message, Role};
use std::collections::HashSet;
use std::sync::Arc;

/// The JSON texts of `entries` as runs: each run is the text of consecutive messages sealed
/// into one buffer, already separated by commas, so it is copied at once.
pub fn runs(entries: &[Arc<Derived>]) -> impl Iterator<Item = &str> {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = &entries.get(i)?.json;
        let mut end = start;
        i += 1;
        while let Some(next) = entries.get(i).map(|d| &d.json).filter(|n| end.followed_by(n)) {
            end = next;
            i += 1;
        }
        let (buf, from, _) = start.parts();
        Some(&buf[from..end.parts().2])
    })
}

/// Writes the JSON texts of `entries` separated by commas (a comma first unless `first`),
/// copying each run (see [`runs`]) at once.
pub fn write_joined(out: &mut String, entries: &[Arc<Derived>], mut first: bool) {
    for run in runs(entries) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(run);
    }
}

/// Total bytes of `entries` joined by commas, as [`write_joined`] writes them.
pub fn joined_len(entries: &[Arc<Derived>]) -> usize {
    entries.iter().map(|d| d.json.len()).sum::<usize>() + entries.len().saturating_sub(1)
}

/// Unsealed history bytes at which they are sealed into one buffer (see the module docs).
pub const SEAL_BYTES: usize = 8 * 1024;

/// A [`Derived`] entry but its JSON.
#[derive(Debug)]
pub(crate) struct Parts {
    pub seq: u64,
    pub role: Role,
    pub calls: Box<[Box<str>]>,
    pub result_for: Option<Box<str>>,
    pub checkpoint: bool,
}

impl Parts {
    /// The entry with its JSON.
    pub(crate) fn with_json(self, json: Text) -> Derived {
        Derived { seq: self.seq, role: self.role, json, calls: self.calls, result_for: self.result_for, checkpoint: self.checkpoint }
    }
}

/// Bytes a [`RunWriter`] writes into one run before it starts the next.
const RUN_BYTES: usize = 64 * 1024;

/// Derived messages written straight into shared runs, as [`History`] seals them, for a load
/// that derives many messages at once (the window of a bounded open): each message's JSON is
/// written into the current run as it is derived, so building the history leaves no buffer per
/// message behind (freed between the runs' allocations, such buffers stayed resident as free
/// space the allocator could not give back) and copies no message a second time.
#[derive(Default)]
pub(crate) struct RunWriter {
    run: String,
    /// The entries of the current run, and their ranges.
    pending: Vec<(Parts, usize, usize)>,
    done: Vec<Arc<Derived>>,
}

impl RunWriter {
    /// The current run, to write the next message's JSON at its end (after the separating
    /// comma [`RunWriter::separate`] wrote).
    pub(crate) fn run(&mut self) -> &mut String {
        &mut self.run
    }

    /// Writes the comma that separates the next message from the one before it in the run, and
    /// gives where the next message starts.
    pub(crate) fn separate(&mut self) -> usize {
        if self.run.capacity() == 0 {
            self.run.reserve(RUN_BYTES + RUN_BYTES / 4);
        }
        if !self.pending.is_empty() {
            self.run.push(',');
        }
        self.run.len()
    }

    /// Takes back a [`RunWriter::separate`] whose message was not written.
    pub(crate) fn unseparate(&mut self, start: usize) {
        self.run.truncate(if self.pending.is_empty() { start } else { start - 1 });
    }

    /// Notes the message written from `start` to the end of the run.
    pub(crate) fn commit(&mut self, parts: Parts, start: usize) {
        let end = self.run.len();
        self.pending.push((parts, start, end));
        if end >= RUN_BYTES {
            self.flush();
        }
    }

    /// Copies a message derived elsewhere (the long way) into the run.
    pub(crate) fn push(&mut self, d: Derived) {
        let start = self.separate();
        self.run.push_str(&d.json);
        let Derived { seq, role, calls, result_for, checkpoint, .. } = d;
        self.commit(Parts { seq, role, calls, result_for, checkpoint }, start);
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut run = std::mem::take(&mut self.run);
        run.shrink_to_fit();
        let buf = Arc::new(run);
        for (p, start, end) in self.pending.drain(..) {
            self.done.push(Arc::new(p.with_json(Text::shared(&buf, start, end))));
        }
    }

    /// The entries written, in order.
    pub(crate) fn finish(mut self) -> Vec<Arc<Derived>> {
        self.flush();
        self.done
    }
}

/// One derived history message: its projection, serialised once.
#[derive(Debug)]
pub struct Derived {
    /// The seq of the surface event it was projected from.
    pub seq: u64,
    /// The message's role.
    pub role: Role,
    /// The message as canonical JSON.
    pub json: Text,
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
        Message::from_owned_value(v, "").expect("derived messages are valid")
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
    Ok(derive_message(ev)?.map(|(d, _)| d))
}

/// A tool call of a derived assistant message, borrowed from its event: the index of its block
/// in `content`, its id, name and arguments.
pub(crate) type CallRef<'a> = (usize, &'a str, &'a str, &'a str);

/// [`derive`], also returning the message's tool calls.
///
/// It checks what [`project`] checks, in the same order and with the same errors, on the
/// event's data where it lies, and writes the message's JSON (as `serde_json::to_string` of the
/// projected [`Message`] writes it) from the data's values: no block is copied into a `Message`
/// first.
pub(crate) fn derive_message(ev: &Event) -> Result<Option<(Derived, Vec<CallRef<'_>>)>> {
    let f = Fields::of(&ev.data, "data").map_err(|e| e.context(&ev.ty))?;
    let checkpoint = ev.ty == types::USER_MESSAGE && ev.data.get("source").and_then(|s| s.as_str()) == Some("compaction");
    let (role, json, calls, result_for) = match ev.ty.as_str() {
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE => {
            let m = MessageRef::check(f.value("message")?, "data.message")?;
            let want = if ev.ty == types::USER_MESSAGE { Role::User } else { Role::Assistant };
            if m.role != want {
                // The same error as `project`'s.
                return project(ev).map(|_| unreachable!("project refuses a message of the wrong role"));
            }
            let mut calls = Vec::new();
            for (i, b) in m.content.iter().enumerate() {
                let kind = b.get("type").and_then(|t| t.as_str()).unwrap_or("");
                let why = match kind {
                    "tool-result" => "a tool-result block belongs in a tool/result event",
                    "tool-call" if m.role != Role::Assistant => "only an assistant message calls tools",
                    "tool-call" => {
                        let s = |k: &str| b.get(k).and_then(|v| v.as_str()).unwrap_or("");
                        calls.push((i, s("id"), s("name"), s("arguments")));
                        continue;
                    }
                    _ => continue,
                };
                return Err(Error::invalid(format!("data.message.content[{i}]"), why));
            }
            let json = serde_json::to_string(&m).expect("a message always serialises");
            (m.role, json, calls, None)
        }
        types::TOOL_RESULT => {
            let id = f.str("callId")?;
            let content = f.value("content")?;
            let arr = content
                .as_array()
                .ok_or_else(|| Error::invalid("data.content", format!("expected an array, got {}", crate::types::kind_of(content))))?;
            for (i, b) in arr.iter().enumerate() {
                Block::check(b, &format!("data.content[{i}]"))?;
            }
            let is_error = f.bool("isError")?;
            let json = serde_json::to_string(&ToolResultRef { id, content: arr, is_error }).expect("a message always serialises");
            (Role::User, json, Vec::new(), Some(Box::<str>::from(id)))
        }
        _ => return Ok(None),
    };
    let ids: Box<[Box<str>]> = calls.iter().map(|&(_, id, _, _)| Box::<str>::from(id)).collect();
    let d = Derived { seq: ev.seq, role, json: json.into(), calls: ids, result_for, checkpoint };
    Ok(Some((d, calls)))
}

/// A message checked where it lies (as [`Message::from_value`] checks it), serialised as the
/// [`Message`] it describes: `role`, `content`, `provenance`, then its other fields.
struct MessageRef<'a> {
    role: Role,
    content: &'a [serde_json::Value],
    provenance: Option<crate::types::Provenance>,
    map: &'a crate::types::JsonMap,
}

impl<'a> MessageRef<'a> {
    fn check(v: &'a serde_json::Value, path: &'a str) -> Result<MessageRef<'a>> {
        let f = Fields::of(v, path)?;
        let role = Role::parse(f.str("role")?, &f.p("role"))?;
        let content = f.value("content")?;
        let at = f.p("content");
        let content =
            content.as_array().ok_or_else(|| Error::invalid(&at, format!("expected an array, got {}", crate::types::kind_of(content))))?;
        for (i, b) in content.iter().enumerate() {
            Block::check(b, &format!("{at}[{i}]"))?;
        }
        let provenance = match f.opt_value("provenance")? {
            None => None,
            Some(p) => Some(crate::types::Provenance::from_value(p, &f.p("provenance"))?),
        };
        Ok(MessageRef { role, content, provenance, map: v.as_object().expect("checked: an object") })
    }
}

impl serde::Serialize for MessageRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", &self.role)?;
        m.serialize_entry("content", self.content)?;
        if let Some(p) = &self.provenance {
            m.serialize_entry("provenance", p)?;
        }
        for (k, v) in self.map {
            if !matches!(k.as_str(), "role" | "content" | "provenance") {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// The message a `tool/result` event projects to, serialised as the [`Message`] with its one
/// `tool-result` block (whose fields a block writes in key order) that [`project`] builds.
struct ToolResultRef<'a> {
    id: &'a str,
    content: &'a [serde_json::Value],
    is_error: bool,
}

impl serde::Serialize for ToolResultRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Block<'a>(&'a ToolResultRef<'a>);
        impl serde::Serialize for Block<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("content", self.0.content)?;
                m.serialize_entry("isError", &self.0.is_error)?;
                m.serialize_entry("toolCallId", self.0.id)?;
                m.serialize_entry("type", "tool-result")?;
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("role", &Role::User)?;
        m.serialize_entry("content", &[Block(self)])?;
        m.end()
    }
}

/// A saved position of a [`History`] (see [`History::mark`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    len: usize,
    generation: u64,
    bytes: usize,
    sealed: usize,
}

/// The surface with its derivation cache.
#[derive(Clone, Debug, Default)]
pub struct History {
    entries: Vec<Arc<Derived>>,
    generation: u64,
    bytes: usize,
    /// Entries before this position are sealed into shared runs.
    sealed: usize,
    /// Bytes of the entries from `sealed` on.
    unsealed_bytes: usize,
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

    /// Sets the replace generation (a history restored from a checkpoint, which does not replay
    /// the replaces that counted it).
    pub(crate) fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    /// The surface seqs in order.
    pub fn seqs(&self) -> Vec<u64> {
        self.entries.iter().map(|d| d.seq).collect()
    }

    /// Where the history stands, for [`rollback`](Self::rollback) after pushes.
    pub(crate) fn mark(&self) -> Mark {
        Mark { len: self.entries.len(), generation: self.generation, bytes: self.bytes, sealed: self.sealed }
    }

    /// Drops the entries pushed since `m` was taken (only pushes: a replace needs a whole copy).
    /// Entries that a seal since then rebuilt as ranges of a new run stay correct; they count as
    /// unsealed again and are sealed anew later.
    pub(crate) fn rollback(&mut self, m: Mark) {
        debug_assert_eq!(m.generation, self.generation, "a replace cannot be rolled back by mark");
        self.entries.truncate(m.len);
        self.generation = m.generation;
        self.bytes = m.bytes;
        self.sealed = m.sealed.min(self.entries.len());
        self.unsealed_bytes = self.entries[self.sealed..].iter().map(|d| d.json.len()).sum();
    }

    pub(crate) fn push(&mut self, d: Arc<Derived>) {
        self.bytes += d.json.len();
        self.unsealed_bytes += d.json.len();
        self.entries.push(d);
        if self.unsealed_bytes >= SEAL_BYTES {
            self.seal();
        }
    }

    /// Appends entries whose texts are sealed already (a [`RunWriter`]'s): they are not copied
    /// again. The entries pushed before them are sealed first, so the runs stay in order.
    pub(crate) fn extend_sealed(&mut self, entries: Vec<Arc<Derived>>) {
        if self.sealed < self.entries.len() {
            self.seal();
        }
        for d in entries {
            self.bytes += d.json.len();
            self.entries.push(d);
        }
        self.sealed = self.entries.len();
    }

    /// Copies the unsealed entries into one buffer and rebuilds them as ranges of it.
    fn seal(&mut self) {
        let tail = &self.entries[self.sealed..];
        let mut buf = String::with_capacity(joined_len(tail));
        write_joined(&mut buf, tail, true);
        let buf = Arc::new(buf);
        let mut at = 0;
        for e in &mut self.entries[self.sealed..] {
            let len = e.json.len();
            let json = Text::shared(&buf, at, at + len);
            debug_assert_eq!(json.as_str(), e.json.as_str());
            at += len + 1;
            *e = Arc::new(Derived {
                seq: e.seq,
                role: e.role,
                json,
                calls: e.calls.clone(),
                result_for: e.result_for.clone(),
                checkpoint: e.checkpoint,
            });
        }
        self.sealed = self.entries.len();
        self.unsealed_bytes = 0;
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
        // The checkpoint has a buffer of its own: what follows it is sealed again with it (the
        // entries after it stay ranges of their runs until then).
        if start < self.sealed {
            self.sealed = start;
        } else {
            self.sealed = self.sealed.min(self.entries.len());
        }
        self.unsealed_bytes = self.entries[self.sealed..].iter().map(|d| d.json.len()).sum();
    }

    /// Writes the history as comma-separated JSON messages into `out` (no brackets).
    pub fn write_json(&self, out: &mut Vec<u8>, mut first: bool) {
        for run in runs(&self.entries) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(run.as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, text: &str) -> Arc<Derived> {
        let json = serde_json::to_string(&Message::user_text(text)).unwrap();
        Arc::new(Derived { seq, role: Role::User, json: json.into(), calls: Box::new([]), result_for: None, checkpoint: false })
    }

    /// The history's JSON, entry by entry (what it must always equal).
    fn one_by_one(h: &History) -> String {
        h.entries().iter().map(|d| d.json.to_string()).collect::<Vec<_>>().join(",")
    }

    /// Messages written into runs (some directly, some copied, one taken back) are the messages,
    /// in order, in a few shared runs; a history extended with them copies none of them and goes
    /// on as any history does.
    #[test]
    fn a_run_writer_writes_the_messages_into_shared_runs() {
        let mut w = RunWriter::default();
        let mut want = Vec::new();
        for seq in 0..2000u64 {
            let text = format!("message {seq} {}", "x".repeat((seq % 97) as usize));
            let json = serde_json::to_string(&Message::user_text(&text)).unwrap();
            match seq % 3 {
                0 => w.push(Derived {
                    seq,
                    role: Role::User,
                    json: json.as_str().into(),
                    calls: Box::new([]),
                    result_for: None,
                    checkpoint: false,
                }),
                _ => {
                    if seq % 7 == 0 {
                        // A message not written after all: its separator is taken back.
                        let start = w.separate();
                        w.run().push_str("{\"half");
                        w.run().truncate(start);
                        w.unseparate(start);
                    }
                    let start = w.separate();
                    w.run().push_str(&json);
                    w.commit(
                        Parts { seq, role: Role::User, calls: Box::new([]), result_for: Some("c".into()), checkpoint: seq == 5 },
                        start,
                    );
                }
            }
            want.push(json);
        }
        let entries = w.finish();
        assert_eq!(entries.len(), 2000);
        for (i, d) in entries.iter().enumerate() {
            assert_eq!((d.seq, d.json.as_str()), (i as u64, want[i].as_str()));
            assert_eq!(d.result_for.is_some(), i % 3 != 0);
            assert_eq!(d.checkpoint, i == 5);
        }
        let total: usize = want.iter().map(|j| j.len() + 1).sum();
        let n = runs(&entries).count();
        assert!(n > 1 && n <= total / RUN_BYTES + 1, "{n} runs of about {RUN_BYTES} bytes for {total} bytes");

        let mut h = History::default();
        h.push(entry(9000, "before"));
        h.extend_sealed(entries);
        assert_eq!(h.len(), 2001);
        assert_eq!(h.bytes(), h.entries().iter().map(|d| d.json.len()).sum::<usize>());
        let mut joined = String::new();
        write_joined(&mut joined, h.entries(), true);
        assert_eq!(joined, one_by_one(&h));
        h.push(entry(9001, "after"));
        let mut joined = String::new();
        write_joined(&mut joined, h.entries(), true);
        assert_eq!(joined, one_by_one(&h));
    }

    fn joined(h: &History) -> String {
        let mut out = Vec::new();
        h.write_json(&mut out, true);
        String::from_utf8(out).unwrap()
    }

    /// The derivation writes, from the event's data, the bytes `serde_json` writes for the
    /// projected message, and refuses what the projection refuses with the same error.
    #[test]
    fn derivation_writes_the_projected_message() {
        use serde_json::json;
        let ev = |ty: &str, data: serde_json::Value| Event {
            ty: ty.into(),
            seq: 7,
            time: 0,
            data,
            surface_op: Some(crate::log::SurfaceOp::Append),
            sources: None,
        };
        let events = [
            ev(types::USER_MESSAGE, json!({"source":"user","message":{"role":"user","content":[{"type":"text","text":"hi \"there\"\n"}]}})),
            ev(
                types::USER_MESSAGE,
                json!({"source":"host","message":{"role":"user","zeta":1,"alpha":[null],"content":[{"type":"image","url":"u","b":{"z":1,"a":2}}]}}),
            ),
            ev(
                types::ASSISTANT_MESSAGE,
                json!({"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"reasoning","text":"r"},{"type":"text","text":"t"},
                    {"type":"tool-call","id":"c1","name":"read","arguments":"{}"},{"type":"tool-call","id":"c2","name":"ls","arguments":""}],
                    "provenance":{"provider":"p","model":"m","x":true},"extra":"e"}}),
            ),
            ev(
                types::TOOL_RESULT,
                json!({"callId":"c1","content":[{"type":"text","text":"out"},{"type":"image","data":"d"}],"isError":false}),
            ),
            ev(types::TOOL_RESULT, json!({"callId":"c2","content":[],"isError":true})),
        ];
        for e in &events {
            let msg = project(e).unwrap().unwrap();
            let (d, calls) = derive_message(e).unwrap().unwrap();
            assert_eq!(&*d.json, serde_json::to_string(&msg).unwrap());
            assert_eq!(d.role, msg.role);
            let want: Vec<(&str, &str, &str)> = msg.tool_calls().collect();
            assert_eq!(calls.iter().map(|&(_, a, b, c)| (a, b, c)).collect::<Vec<_>>(), want);
            assert_eq!(d.calls.iter().map(|c| &**c).collect::<Vec<_>>(), want.iter().map(|c| c.0).collect::<Vec<_>>());
            assert_eq!(d.result_for.as_deref(), msg.content.iter().find_map(|b| b.tool_result_id()));
        }
        let bad = [
            ev(types::USER_MESSAGE, json!({"source":"user","message":{"role":"assistant","content":[]}})),
            ev(types::USER_MESSAGE, json!({"source":"user","message":{"role":"user","content":{}}})),
            ev(
                types::USER_MESSAGE,
                json!({"source":"user","message":{"role":"user","content":[{"type":"tool-call","id":"a","name":"n","arguments":""}]}}),
            ),
            ev(
                types::ASSISTANT_MESSAGE,
                json!({"message":{"role":"assistant","content":[{"type":"tool-result","toolCallId":"a","content":[],"isError":false}]}}),
            ),
            ev(types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[{"type":"text"}]}})),
            ev(types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[],"provenance":{"model":"m"}}})),
            ev(types::ASSISTANT_MESSAGE, json!({"message":{"role":"bot","content":[]}})),
            ev(types::ASSISTANT_MESSAGE, json!({"message":null})),
            ev(types::ASSISTANT_MESSAGE, json!([])),
            ev(types::TOOL_RESULT, json!({"callId":"c","content":[{"type":""}],"isError":false})),
            ev(types::TOOL_RESULT, json!({"callId":"c","content":"x","isError":false})),
            ev(types::TOOL_RESULT, json!({"callId":"c","content":[]})),
            ev(types::TOOL_RESULT, json!({"content":[],"isError":false})),
        ];
        for e in &bad {
            let want = project(e).unwrap_err();
            let Err(got) = derive_message(e) else { panic!("{e:?} is refused") };
            assert_eq!((got.kind(), got.message(), got.to_string()), (want.kind(), want.message(), want.to_string()), "{e:?}");
        }
    }

    #[test]
    fn sealed_runs_keep_every_message_and_its_order() {
        let mut h = History::default();
        let text = "x".repeat(300);
        for seq in 0..100 {
            h.push(entry(seq, &format!("{seq} {text}")));
            assert_eq!(joined(&h), one_by_one(&h));
        }
        // 100 messages of ~330 bytes: sealed into a few runs, copied as such.
        assert!(runs(h.entries()).count() < 10, "{} runs", runs(h.entries()).count());
        assert_eq!(h.bytes(), h.entries().iter().map(|d| d.json.len()).sum::<usize>());
        for (i, d) in h.entries().iter().enumerate() {
            assert_eq!(d.seq, i as u64);
            assert_eq!(d.message(), Message::user_text(format!("{i} {text}")));
        }
        let mut s = String::new();
        write_joined(&mut s, &h.entries()[5..60], false);
        assert_eq!(s, format!(",{}", h.entries()[5..60].iter().map(|d| d.json.to_string()).collect::<Vec<_>>().join(",")));
        assert_eq!(joined_len(&h.entries()[5..60]) + 1, s.len());
    }

    #[test]
    fn a_replace_across_sealed_runs_keeps_the_bytes() {
        let mut h = History::default();
        let text = "y".repeat(500);
        for seq in 0..60 {
            h.push(entry(seq, &text));
        }
        let sealed = h.sealed;
        assert!(sealed > 20);
        h.replace(3, 20, entry(100, "summary"));
        assert_eq!(h.len(), 60 - 18 + 1);
        assert_eq!(joined(&h), one_by_one(&h));
        assert_eq!(h.bytes(), h.entries().iter().map(|d| d.json.len()).sum::<usize>());
        assert_eq!(h.generation(), 1);
        for seq in 200..240 {
            h.push(entry(seq, &text));
            assert_eq!(joined(&h), one_by_one(&h));
        }
        let seqs = h.seqs();
        assert_eq!(&seqs[..4], &[0, 1, 2, 100]);
        assert_eq!(seqs.last(), Some(&239));
    }
}
