//! The provider body of an agent's requests, from the rendered form of each message.
//!
//! A [`BodyCache`] belongs to one agent and one renderer with its options. It renders a
//! request's provider body exactly as [`Renderer::render`] of the request's envelope
//! serialises it, byte for byte: the envelope stays the logged truth, and the body is a pure
//! function of it. What makes it cheap:
//!
//! - **Each message is rendered once.** The renderers render every envelope message by a
//!   function of that message alone ([`Renderer`]'s prefix property), so the cache keeps each
//!   message's rendered text (its wire messages, or for Anthropic and Gemini its blocks and
//!   parts) and renders only the messages that are new since the last body.
//! - **The rendered history is one buffer.** The texts sit one after the other, already joined
//!   as the body's message array writes them (for Anthropic and Gemini: grouped into wire
//!   messages, consecutive tool results merged, the last group left open), so a body is the
//!   frame's leading bytes, one copy of the joined text, and the frame's trailing bytes.
//! - **The body is the cache.** The joined text is not kept in a buffer of its own beside the
//!   body: the cache keeps the last body it built (shared with whoever was handed it, and never
//!   written to again) and reads the joined text from it, its patches undone, plus what was
//!   rendered since. So the live context is held twice while a body is out, not three times:
//!   the history and the body (`docs/performance.md`, "Resume from a checkpoint").
//! - **The frame is rendered once per header.** Everything but the messages (model, system,
//!   tools, sampling fields, cache routing, pass-through fields) comes from the header and the
//!   session prefix, rendered by the renderer's own code and split around the message array.
//! - **The moving breakpoint is a patch.** The end-of-history mark (Anthropic's `cache_control`,
//!   OpenAI's `prompt_cache_breakpoint` when asked for) goes on the last block or item of the
//!   history that can carry one, which changes at every request: the copy of the rendered
//!   history replaces that one block's text with its marked form (and the same for the prefix
//!   breakpoint). Which system and tool breakpoints the frame carries follows the renderer's
//!   rule (`render::breakpoint`: at most four for Anthropic, the host's own tool marks counted).
//!
//! The history is followed as the digest cache follows it (`request::DigestCache`): while it
//! only grew (same replace generation, the same entries at the covered ends), new entries are
//! appended; after a compaction or a new header the string is rebuilt from the texts already
//! rendered (found by seq), rendering only what is new. Gemini's tool results name the function
//! of the earlier call; the cache notes the calls each message makes and re-renders a result
//! whose call changed.
//!
//! A message the renderer refuses fails the body with the error `Renderer::render` gives for the
//! whole envelope (the envelope is rendered afresh to get it). Debug builds compare every body
//! with the fresh rendering of its envelope.

use super::breakpoint::{self, Mark};
use super::{anthropic, gemini, interactions, openai, responses, CacheTtl, Envelope, RenderOptions, Renderer};
use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::{Derived, History, Text};
use crate::request::{EnvelopeParts, PrefixBytes};
use crate::types::{JsonMap, Message, Role};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// What a conversation request's body is rendered from: the same as its envelope.
pub struct BodySource<'a> {
    /// The header the request carries.
    pub header: &'a EpochHeader,
    /// The serialised session prefix (of `header.message_prefix`).
    pub prefix: &'a PrefixBytes,
    /// The derived history.
    pub history: &'a History,
    /// The session id.
    pub session_id: &'a str,
}

impl BodySource<'_> {
    /// The envelope of this source over `history` (bytes).
    fn envelope(&self, history: &[Arc<Derived>], turn_step: Option<(u64, u64)>) -> Vec<u8> {
        EnvelopeParts::conversation(self.header, self.prefix, history, self.session_id, turn_step).write()
    }
}

/// The rendered form of an agent's requests for one renderer (see the module docs).
#[derive(Debug)]
pub struct BodyCache {
    renderer: Renderer,
    options: RenderOptions,
    /// Anthropic's `cache_control` object for these options.
    cc: Value,
    state: Option<State>,
}

impl Clone for BodyCache {
    /// A clone starts empty (it renders everything again at its first body).
    fn clone(&self) -> BodyCache {
        BodyCache::new(self.renderer, self.options.clone())
    }
}

/// How messages lie in the body's array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Every message renders to whole items of the array (chat completions, Responses).
    Flat,
    /// Messages render to blocks of a wire message `{"<key>":[blocks],"role":"<role>"}`;
    /// consecutive tool results share one (Anthropic, Gemini).
    Grouped(&'static str),
}

fn layout(r: Renderer) -> Layout {
    match r {
        Renderer::OpenAi | Renderer::OpenAiResponses | Renderer::GeminiInteractions => Layout::Flat,
        Renderer::Anthropic => Layout::Grouped("content"),
        Renderer::Gemini => Layout::Grouped("parts"),
    }
}

/// The body's field holding the messages.
fn messages_key(r: Renderer) -> &'static str {
    match r {
        Renderer::OpenAi => openai::MESSAGES,
        Renderer::OpenAiResponses => responses::INPUT,
        Renderer::Anthropic => anthropic::MESSAGES,
        Renderer::Gemini => gemini::CONTENTS,
        Renderer::GeminiInteractions => interactions::INPUT,
    }
}

/// A Gemini call as the renderer's map of calls holds it: id, then (function name, whether
/// the id is sent), or `None` when the map has no such call.
type Note = (String, Option<(String, bool)>);

/// One message of the sequence (prefix messages, then the history), rendered. A window holds
/// thousands, so a piece is kept small (48 bytes): offsets within one message are `u32`, and
/// the notes, which only Gemini's messages with calls have, sit behind one pointer.
#[derive(Clone, Debug)]
struct Piece {
    /// The history entry's seq ([`NO_SEQ`] for a prefix message).
    seq: u64,
    /// Where its text starts in the joined string.
    start: usize,
    /// Its text's length.
    len: u32,
    /// Anthropic and OpenAI: the last block or item that may carry a breakpoint, relative to
    /// `start` (`[NO_MARK; 2]` when none may).
    mark: [u32; 2],
    kind: Kind,
    /// Gemini: the calls this assistant message notes, or the calls this user message's tool
    /// results used.
    notes: Option<Box<[Note]>>,
}

// The size the docs above give.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Piece>() == 48);

/// A prefix message's seq.
const NO_SEQ: u64 = u64::MAX;
/// No mark.
const NO_MARK: u32 = u32::MAX;

impl Piece {
    /// The history entry's seq (`None` for a prefix message).
    fn seq(&self) -> Option<u64> {
        (self.seq != NO_SEQ).then_some(self.seq)
    }

    fn end(&self) -> usize {
        self.start + self.len as usize
    }

    /// The markable block or item, relative to `start`.
    fn mark(&self) -> Option<(usize, usize)> {
        (self.mark[0] != NO_MARK).then_some((self.mark[0] as usize, self.mark[1] as usize))
    }

    fn notes(&self) -> &[Note] {
        self.notes.as_deref().unwrap_or(&[])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Renders to nothing.
    Empty,
    /// Whole items (flat layouts).
    Items,
    /// The blocks of one wire message of `role`; `merges`: tool results only.
    Blocks { role: WireRole, merges: bool },
}

/// The role of a grouped layout's wire message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WireRole {
    User,
    Assistant,
    /// Gemini's assistant.
    Model,
}

impl WireRole {
    /// The renderers' spelling of `role`.
    fn of(role: &str) -> WireRole {
        match role {
            "user" => WireRole::User,
            "model" => WireRole::Model,
            _ => {
                debug_assert_eq!(role, "assistant", "the grouped renderers' roles");
                WireRole::Assistant
            }
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            WireRole::User => "user",
            WireRole::Assistant => "assistant",
            WireRole::Model => "model",
        }
    }
}

/// A length or offset within one message's rendered text, as a piece keeps it.
fn small(n: usize) -> Result<u32> {
    u32::try_from(n).ok().filter(|&n| n != NO_MARK).ok_or_else(|| {
        Error::new(ErrorKind::InvalidInput, format!("a message renders to {n} bytes; the body cache holds messages under 4 GiB"))
    })
}

/// A message rendered to values, before it is written as text.
enum Rendered {
    Items(Vec<Value>),
    Blocks { role: &'static str, blocks: Vec<Value>, merges: bool, cacheable: Option<usize> },
    Nothing,
}

/// The rendered message sequence, joined: every piece's text one after the other, as the body's
/// message array writes them. The body is the cache: the joined text that the last body
/// carries is read from that body ([`Written`], its breakpoints undone), not kept in a copy
/// beside it; what was pushed since is in `tail`.
#[derive(Debug, Default)]
struct Sequence {
    /// The last body built from this sequence.
    written: Option<Written>,
    /// How much of the joined text the last body holds (the joined text's first bytes).
    written_len: usize,
    /// The joined text from `written_len` on.
    tail: String,
    pieces: Vec<Piece>,
    /// The group left open at the end of the joined text (grouped layouts): role, merges.
    open: Option<(WireRole, bool)>,
    /// Anthropic: the last piece with a cacheable block.
    last_cacheable: Option<usize>,
    /// Gemini: the calls of the messages so far.
    calls: gemini::Calls,
}

/// The body last built from a sequence: it holds the sequence's joined text from byte `at` on,
/// with `patches` written over it.
#[derive(Debug)]
struct Written {
    body: Text,
    at: usize,
    patches: Vec<Patch>,
}

/// A breakpoint written over a block: the joined text's `start..end` is `len` bytes in the body,
/// and `orig` is the block as the joined text has it.
#[derive(Debug)]
struct Patch {
    start: usize,
    end: usize,
    len: usize,
    orig: Box<str>,
}

impl Patch {
    /// How much longer the block is in the body.
    fn grows(&self) -> isize {
        self.len as isize - (self.end - self.start) as isize
    }
}

impl Sequence {
    /// The joined text's length.
    fn len(&self) -> usize {
        self.written_len + self.tail.len()
    }

    /// Appends the joined text's bytes `a..b` to `out`: from the last body around its patches
    /// (with the blocks they replaced), then from the tail.
    fn copy(&self, a: usize, b: usize, out: &mut String) {
        debug_assert!(a <= b && b <= self.len(), "{a}..{b} of {}", self.len());
        if a < self.written_len {
            let w = self.written.as_ref().expect("the written text is in the last body");
            let body = w.body.as_str();
            let end = b.min(self.written_len);
            let (mut p, mut shift) = (a, 0isize);
            // The body's byte for the joined text's byte `p` (not inside a patch).
            let at = |p: usize, shift: isize| (w.at + p).wrapping_add_signed(shift);
            for patch in &w.patches {
                if p >= end || patch.start >= end {
                    break;
                }
                if patch.end <= p {
                    shift += patch.grows();
                    continue;
                }
                if p < patch.start {
                    out.push_str(&body[at(p, shift)..at(patch.start, shift)]);
                    p = patch.start;
                }
                let e = end.min(patch.end);
                out.push_str(&patch.orig[p - patch.start..e - patch.start]);
                p = e;
                if p == patch.end {
                    shift += patch.grows();
                }
            }
            if p < end {
                out.push_str(&body[at(p, shift)..at(end, shift)]);
            }
        }
        if b > self.written_len {
            out.push_str(&self.tail[a.max(self.written_len) - self.written_len..b - self.written_len]);
        }
    }

    /// The joined text's bytes `a..b`: borrowed where they lie in one piece of memory as they
    /// are, copied where a patch covers some of them.
    fn slice(&self, a: usize, b: usize) -> Cow<'_, str> {
        let wl = self.written_len;
        if a >= wl {
            return Cow::Borrowed(&self.tail[a - wl..b - wl]);
        }
        if b <= wl {
            let w = self.written.as_ref().expect("the written text is in the last body");
            if !w.patches.iter().any(|p| p.start < b && p.end > a) {
                let shift: isize = w.patches.iter().filter(|p| p.end <= a).map(Patch::grows).sum();
                let from = (w.at + a).wrapping_add_signed(shift);
                return Cow::Borrowed(&w.body.as_str()[from..from + (b - a)]);
            }
        }
        let mut out = String::with_capacity(b - a);
        self.copy(a, b, &mut out);
        Cow::Owned(out)
    }

    /// Appends a piece's text (see the module docs for the layout). Fails, changing nothing,
    /// for a text of 4 GiB or more.
    fn push(
        &mut self,
        layout: Layout,
        seq: Option<u64>,
        text: &str,
        kind: Kind,
        mark: Option<(usize, usize)>,
        notes: Option<Box<[Note]>>,
    ) -> Result<()> {
        let len = small(text.len())?;
        let mark = match mark {
            Some((a, b)) => [small(a)?, small(b)?],
            None => [NO_MARK; 2],
        };
        let start = match (layout, kind) {
            (_, Kind::Empty) => self.len(),
            (Layout::Flat, _) => {
                if self.len() > 0 {
                    self.tail.push(',');
                }
                self.len()
            }
            (Layout::Grouped(key), Kind::Blocks { role, merges }) => {
                match self.open {
                    Some((_, true)) if merges => self.tail.push(','),
                    Some((open_role, _)) => {
                        close_group(&mut self.tail, open_role.as_str());
                        self.tail.push(',');
                        open_group(&mut self.tail, key);
                    }
                    None => open_group(&mut self.tail, key),
                }
                self.open = Some((role, merges));
                self.len()
            }
            (Layout::Grouped(_), Kind::Items) => unreachable!("grouped layouts render blocks"),
        };
        self.tail.push_str(text);
        if mark[0] != NO_MARK {
            self.last_cacheable = Some(self.pieces.len());
        }
        self.pieces.push(Piece { seq: seq.unwrap_or(NO_SEQ), start, len, kind, mark, notes });
        Ok(())
    }

    /// The text of piece `k`.
    fn text(&self, k: usize) -> Cow<'_, str> {
        let p = &self.pieces[k];
        self.slice(p.start, p.end())
    }
}

/// Whether the Anthropic renderer puts the history's first entry ahead of the session prefix
/// (`anthropic::message_order`) and that changes the body: a native checkpoint heads the
/// history and a prefix message renders outside `system`.
fn reorders(src: &BodySource<'_>) -> bool {
    let prefix = src.prefix.source.as_ref().map_or(&[][..], |p| p.as_slice());
    prefix.iter().any(|m| m.role != Role::System)
        && src.history.entries().first().is_some_and(|d| d.checkpoint && anthropic::is_native_checkpoint(&d.message()))
}

fn open_group(out: &mut String, key: &str) {
    out.push_str("{\"");
    out.push_str(key);
    out.push_str("\":[");
}

fn close_group(out: &mut String, role: &str) {
    out.push_str("],\"role\":\"");
    out.push_str(role);
    out.push_str("\"}");
}

/// What the body carries before and after the message array.
#[derive(Debug)]
struct Frame {
    /// Up to and including `"<key>":[` and the items the renderer puts before the envelope's
    /// messages (chat completions: the system prompt).
    pre: String,
    /// Whether `pre` ends with such an item (so a comma follows it).
    lead: bool,
    /// From the array's `]` to the end.
    post: String,
}

/// Which system and tool breakpoints a frame carries (Anthropic; chat completions: the system
/// prompt's message).
type FrameKey = Vec<Mark<()>>;

/// What depends on the header, the prefix and the session id.
#[derive(Debug)]
struct Head {
    header: EpochHeader,
    prefix: Option<Arc<Vec<Message>>>,
    session_id: String,
    /// The head envelope (prefix messages, no history), parsed.
    env: Envelope,
    /// Anthropic and Gemini: the system blocks (the prompt's, then hoisted prefix messages).
    system: Vec<Value>,
    system_prompt_blocks: usize,
    /// Anthropic: the tools.
    tools: Vec<Value>,
    /// Pieces that are the prefix; Anthropic: the last of them with a cacheable block.
    prefix_pieces: usize,
    prefix_cacheable: Option<usize>,
    /// The frame, with the breakpoints and the cache diagnostics' previous id it was built for.
    frame: Option<(FrameKey, Option<Option<String>>, Frame)>,
    /// The render options with the header's cache controls (`RenderOptions::effective`).
    options: RenderOptions,
}

#[derive(Debug)]
struct State {
    head: Head,
    seq: Sequence,
    /// The history the sequence covers: its replace generation, how many entries, the seqs of
    /// the first and last.
    generation: u64,
    covered: usize,
    first: Option<u64>,
    last: Option<u64>,
}

impl State {
    fn cover(&mut self, seq: u64) {
        if self.covered == 0 {
            self.first = Some(seq);
        }
        self.covered += 1;
        self.last = Some(seq);
    }
}

fn internal(e: serde_json::Error) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

impl BodyCache {
    /// A cache for `renderer` with `options` (their `prefix_len` is taken from each request).
    pub fn new(renderer: Renderer, options: RenderOptions) -> BodyCache {
        let cc = anthropic::cache_control(&options);
        BodyCache { renderer, options, cc, state: None }
    }

    /// The renderer.
    pub fn renderer(&self) -> Renderer {
        self.renderer
    }

    /// The render options (their `prefix_len` unused).
    pub fn options(&self) -> &RenderOptions {
        &self.options
    }

    /// The options for an envelope whose first `prefix_len` messages are the prefix.
    fn options_for(&self, prefix_len: usize) -> RenderOptions {
        RenderOptions { prefix_len, ..self.options.clone() }
    }

    /// The body of the conversation request `src` describes (`turn`, `step` only name it in
    /// the envelope, which no renderer sends): `Renderer::render` of its envelope, serialised.
    /// A message or header the renderer refuses gives the error rendering the envelope gives.
    ///
    /// The body is shared, not copied: the cache keeps it (it renders the next body from it)
    /// and a NUL byte follows it in its buffer ([`Text::c_buffer`]), so that a C host is handed
    /// that buffer as it is.
    pub fn body(&mut self, src: &BodySource<'_>, turn: u64, step: u64) -> Result<Text> {
        let prefix_len = src.prefix.messages.len();
        // Anthropic cache diagnostics: the previous response's id is the last assistant
        // message's (history, then prefix), as the renderer finds it in the envelope.
        let diagnostics = (self.renderer == Renderer::Anthropic && self.options.cache_diagnostics).then(|| {
            match src.history.entries().iter().rev().find(|d| d.role == Role::Assistant) {
                Some(d) => anthropic::previous_response_id(std::iter::once(&d.message())),
                None => src.prefix.source.as_ref().and_then(|p| anthropic::previous_response_id(p.iter().rev())),
            }
        });
        let envelope = || String::from_utf8(src.envelope(src.history.entries(), Some((turn, step)))).expect("an envelope is text");
        // Anthropic with a native compaction block heading the history and session prefix
        // messages that render: the block goes first (`anthropic::message_order`), which the
        // sequence of rendered messages does not follow, so the body is rendered afresh.
        if self.renderer == Renderer::Anthropic && reorders(src) {
            self.state = None;
            return self.render_envelope_fresh(&envelope(), prefix_len, None).map(Text::terminated);
        }
        let built = self.update(src).and_then(|()| self.write(diagnostics));
        match built {
            Ok(body) => {
                debug_assert_eq!(
                    body.as_str(),
                    self.render_envelope_fresh(&envelope(), prefix_len, None).expect("the cached body rendered, so the envelope renders"),
                    "the cached {} body is the rendering of its envelope",
                    self.renderer.name()
                );
                Ok(body)
            }
            Err(e) => {
                // Start again next time; the fresh rendering names the field as for the whole
                // envelope (and would give the body if the cache were wrong).
                self.state = None;
                match self.render_envelope_fresh(&envelope(), prefix_len, None) {
                    Err(fresh) => Err(fresh),
                    Ok(body) => {
                        debug_assert!(false, "the cache failed where the envelope renders: {e}");
                        Ok(Text::terminated(body))
                    }
                }
            }
        }
    }

    /// The body of `envelope` rendered from scratch: `Renderer::render`, serialised; with
    /// `cache_ttl`, its cache marks at that TTL rather than the options' (a keep-warm request
    /// the cache clock sends at a longer tier).
    pub fn render_envelope_fresh(&self, envelope: &str, prefix_len: usize, cache_ttl: Option<CacheTtl>) -> Result<String> {
        let v: Value = serde_json::from_str(envelope)?;
        let mut options = self.options_for(prefix_len);
        if cache_ttl.is_some() {
            options.cache_ttl = cache_ttl;
        }
        let body = self.renderer.render(&v, &options)?;
        serde_json::to_string(&body).map_err(internal)
    }

    /// Brings the state up to `src`: the head, then the history.
    fn update(&mut self, src: &BodySource<'_>) -> Result<()> {
        let history = src.history;
        let entries = history.entries();
        let same_head = self.state.as_ref().is_some_and(|s| {
            s.head.header == *src.header
                && s.head.session_id == src.session_id
                && match (&s.head.prefix, &src.prefix.source) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        });
        let grown = same_head
            && self.state.as_ref().is_some_and(|s| {
                s.generation == history.generation()
                    && s.covered <= entries.len()
                    && s.first == if s.covered > 0 { entries.first().map(|d| d.seq) } else { None }
                    && s.last == s.covered.checked_sub(1).map(|i| entries[i].seq)
            });
        if grown {
            let mut state = self.state.take().expect("checked");
            let from = state.covered;
            let r = self.append(&mut state, &entries[from..]);
            self.state = Some(state);
            return r;
        }
        // A new head, or a history that did not only grow: rebuild the sequence, reusing the
        // texts already rendered.
        let old = self.state.take();
        let mut head = self.head(src)?;
        let mut seq = Sequence::default();
        self.push_prefix(&mut head, &mut seq)?;
        let mut state = State { head, seq, generation: history.generation(), covered: 0, first: None, last: None };
        match old {
            None => self.append(&mut state, entries)?,
            Some(old) => self.rebuild(&mut state, &old.seq, entries)?,
        }
        self.state = Some(state);
        Ok(())
    }

    /// The head of `src`: its envelope without history, parsed, and what the frame needs.
    fn head(&self, src: &BodySource<'_>) -> Result<Head> {
        let bytes = src.envelope(&[], Some((0, 0)));
        let v: Value = serde_json::from_slice(&bytes)?;
        let env = Envelope::parse(&v)?;
        let options = self.options.effective(&env, self.renderer)?;
        let (system, tools) = match self.renderer {
            Renderer::Anthropic => (anthropic::system_prompt(&env), anthropic::tools(&env)?),
            Renderer::Gemini => (gemini::system_prompt(&env), Vec::new()),
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Head {
            header: src.header.clone(),
            prefix: src.prefix.source.clone(),
            session_id: src.session_id.to_string(),
            system_prompt_blocks: system.len(),
            system,
            tools,
            env,
            prefix_pieces: 0,
            prefix_cacheable: None,
            frame: None,
            options,
        })
    }

    /// Renders the prefix messages into the sequence (and hoists system-role ones).
    fn push_prefix(&self, head: &mut Head, seq: &mut Sequence) -> Result<()> {
        let n = head.env.messages.len();
        for i in 0..n {
            let m = &head.env.messages[i];
            let uses = self.uses(m, &seq.calls);
            let rendered = self.render(m, i, n, &mut head.system, &mut seq.calls)?;
            let notes = if uses.is_empty() { self.notes(m, &seq.calls) } else { uses };
            self.push_rendered(seq, None, rendered, notes, head.options.cache_breakpoints)?;
        }
        head.prefix_pieces = seq.pieces.len();
        head.prefix_cacheable = seq.last_cacheable;
        Ok(())
    }

    /// Appends history entries, rendering each.
    fn append(&self, state: &mut State, entries: &[Arc<Derived>]) -> Result<()> {
        let prefix_len = state.head.prefix_pieces;
        let layout = layout(self.renderer);
        for d in entries {
            // OpenAI's wire message of a message of the usual shapes, from its text.
            if self.renderer == Renderer::OpenAi {
                if let Some((text, markable)) = openai::piece_from_text(&d.json) {
                    let mark = (state.head.options.cache_breakpoints && markable).then_some((0, text.len()));
                    #[cfg(debug_assertions)]
                    {
                        let mut seq = Sequence::default();
                        let m = message_of(d).expect("a derived message parses");
                        let rendered =
                            self.render(&m, prefix_len + state.covered, prefix_len, &mut Vec::new(), &mut seq.calls).expect("renders");
                        self.push_rendered(&mut seq, Some(d.seq), rendered, Vec::new(), state.head.options.cache_breakpoints)
                            .expect("pushed");
                        assert_eq!(
                            (seq.tail.as_str(), seq.pieces[0].mark()),
                            (text.as_str(), mark),
                            "the wire message from the derived text is the rendered one"
                        );
                    }
                    state.seq.push(layout, Some(d.seq), &text, Kind::Items, mark, None)?;
                    state.cover(d.seq);
                    continue;
                }
            }
            let m = message_of(d)?;
            let i = prefix_len + state.covered;
            // History messages are never system-role (the renderers refuse one after the prefix).
            let mut system = Vec::new();
            let uses = self.uses(&m, &state.seq.calls);
            let rendered = self.render(&m, i, prefix_len, &mut system, &mut state.seq.calls)?;
            let notes = if uses.is_empty() { self.notes(&m, &state.seq.calls) } else { uses };
            self.push_rendered(&mut state.seq, Some(d.seq), rendered, notes, state.head.options.cache_breakpoints)?;
            state.cover(d.seq);
        }
        Ok(())
    }

    /// Fills `state` (its prefix pushed) with `entries`, copying the text of every entry `old`
    /// rendered and rendering the others.
    fn rebuild(&self, state: &mut State, old: &Sequence, entries: &[Arc<Derived>]) -> Result<()> {
        let by_seq: HashMap<u64, usize> = old.pieces.iter().enumerate().filter_map(|(k, p)| Some((p.seq()?, k))).collect();
        let layout = layout(self.renderer);
        for d in entries {
            let reuse = by_seq.get(&d.seq).copied().filter(|&k| {
                // A Gemini tool result is reused only when its calls are what they were.
                let p = &old.pieces[k];
                !matches!(p.kind, Kind::Blocks { role: WireRole::User, .. })
                    || p.notes().iter().all(|(id, used)| state.seq.calls.get(id).cloned() == *used)
            });
            match reuse {
                Some(k) => {
                    let p = &old.pieces[k];
                    if matches!(p.kind, Kind::Blocks { role: WireRole::Model, .. }) {
                        for (id, call) in p.notes() {
                            if let Some(c) = call {
                                state.seq.calls.insert(id.clone(), c.clone());
                            }
                        }
                    }
                    state.seq.push(layout, p.seq(), &old.text(k), p.kind, p.mark(), p.notes.clone())?;
                    state.cover(d.seq);
                }
                None => self.append(state, std::slice::from_ref(d))?,
            }
        }
        Ok(())
    }

    /// Gemini: the calls a user message's tool results use, as `calls` holds them.
    fn uses(&self, m: &Message, calls: &gemini::Calls) -> Vec<Note> {
        if self.renderer != Renderer::Gemini || m.role != Role::User {
            return Vec::new();
        }
        m.content.iter().filter_map(|b| b.tool_result_id()).map(|id| (id.to_string(), calls.get(id).cloned())).collect()
    }

    /// Gemini: the calls an assistant message noted in `calls` (rendered just before).
    fn notes(&self, m: &Message, calls: &gemini::Calls) -> Vec<Note> {
        if self.renderer != Renderer::Gemini || m.role != Role::Assistant {
            return Vec::new();
        }
        m.tool_calls().map(|(id, _, _)| (id.to_string(), calls.get(id).cloned())).collect()
    }

    /// Renders envelope message `i` with the renderer's own per-message code.
    fn render(&self, m: &Message, i: usize, prefix_len: usize, system: &mut Vec<Value>, calls: &mut gemini::Calls) -> Result<Rendered> {
        Ok(match self.renderer {
            Renderer::OpenAi => Rendered::Items(openai::piece(m, i)?),
            Renderer::OpenAiResponses => Rendered::Items(responses::piece(m, i)?),
            Renderer::GeminiInteractions => Rendered::Items(interactions::piece(m, i, prefix_len)?),
            Renderer::Anthropic => match anthropic::piece(m, i, prefix_len, system)? {
                None => Rendered::Nothing,
                Some(r) => {
                    let cacheable = r.last_cacheable();
                    Rendered::Blocks { role: r.role, blocks: r.content, merges: r.tool_results_only, cacheable }
                }
            },
            Renderer::Gemini => match gemini::piece(m, i, prefix_len, system, calls)? {
                None => Rendered::Nothing,
                Some(c) => Rendered::Blocks { role: c.role, blocks: c.parts, merges: c.responses_only, cacheable: None },
            },
        })
    }

    /// Writes a rendered message into the sequence.
    fn push_rendered(&self, seq: &mut Sequence, at: Option<u64>, r: Rendered, notes: Vec<Note>, breakpoints: bool) -> Result<()> {
        let layout = layout(self.renderer);
        let (values, kind, cacheable) = match r {
            Rendered::Nothing => (Vec::new(), Kind::Empty, None),
            Rendered::Items(v) if v.is_empty() => (v, Kind::Empty, None),
            Rendered::Items(v) => {
                // OpenAI with breakpoints: the last item that can carry one.
                let cacheable = match (self.renderer, breakpoints) {
                    (Renderer::OpenAi, true) => v.iter().rposition(openai::markable),
                    (Renderer::OpenAiResponses, true) => v.iter().rposition(responses::markable),
                    _ => None,
                };
                (v, Kind::Items, cacheable)
            }
            Rendered::Blocks { role, blocks, merges, cacheable } => (blocks, Kind::Blocks { role: WireRole::of(role), merges }, cacheable),
        };
        let mut text = Vec::with_capacity(256);
        let mut mark = None;
        for (j, v) in values.iter().enumerate() {
            if j > 0 {
                text.push(b',');
            }
            let start = text.len();
            serde_json::to_writer(&mut text, v).map_err(internal)?;
            if cacheable == Some(j) {
                mark = Some((start, text.len()));
            }
        }
        let text = String::from_utf8(text).expect("serde_json writes UTF-8");
        seq.push(layout, at, &text, kind, mark, (!notes.is_empty()).then(|| notes.into_boxed_slice()))
    }

    /// Writes the body of the current state.
    fn write(&mut self, diagnostics: Option<Option<String>>) -> Result<Text> {
        let renderer = self.renderer;
        let state = self.state.as_mut().expect("updated");
        // The breakpoints (Anthropic's, or OpenAI's when asked for); message blocks are named
        // by piece.
        let openai_marks = state.head.options.cache_breakpoints && matches!(renderer, Renderer::OpenAi | Renderer::OpenAiResponses);
        let (key, patches) = if renderer == Renderer::Anthropic || openai_marks {
            let head = &state.head;
            let marks = if renderer == Renderer::Anthropic {
                let prefix_at = match head.prefix_cacheable {
                    Some(k) => Some(anthropic::Mark::Message(k)),
                    None => anthropic::hoisted_mark(&head.system, head.system_prompt_blocks),
                };
                anthropic::choose_marks(
                    &head.tools,
                    state.seq.last_cacheable.map(anthropic::Mark::Message),
                    prefix_at,
                    anthropic::head_mark(head.system_prompt_blocks, &head.tools),
                )
            } else {
                // Chat completions: the system prompt's message leads the array (the frame's).
                let lead = openai::lead(&head.env);
                let head_at = (renderer == Renderer::OpenAi && lead.first().is_some_and(openai::markable)).then_some(Mark::System(0));
                breakpoint::choose_marks(
                    0,
                    breakpoint::openai_limit(&head.options),
                    state.seq.last_cacheable.map(Mark::Message),
                    head.prefix_cacheable.map(Mark::Message),
                    head_at,
                )
            };
            let mut patches: Vec<(usize, usize, String)> = Vec::new();
            let mut key: FrameKey = Vec::new();
            for m in &marks {
                match *m {
                    Mark::Message(k) => {
                        let p = &state.seq.pieces[k];
                        let (s, e) = p.mark().expect("a cacheable piece");
                        let mut block: Value = serde_json::from_str(&state.seq.text(k)[s..e])?;
                        match renderer {
                            Renderer::OpenAi => openai::set_breakpoint(&mut block),
                            Renderer::OpenAiResponses => responses::set_breakpoint(&mut block),
                            _ => anthropic::set_mark(&mut block, &self.cc),
                        }
                        patches.push((p.start + s, p.start + e, serde_json::to_string(&block).map_err(internal)?));
                    }
                    Mark::System(j) => key.push(Mark::System(j)),
                    Mark::Tool(t) => key.push(Mark::Tool(t)),
                }
            }
            patches.sort_by_key(|p| p.0);
            (key, patches)
        } else {
            (Vec::new(), Vec::new())
        };
        if state.head.frame.as_ref().is_none_or(|(k, d, _)| *k != key || *d != diagnostics) {
            let frame = frame_of(renderer, &state.head.options, &self.cc, &state.head, &key, diagnostics.as_ref())?;
            state.head.frame = Some((key, diagnostics, frame));
        }
        let frame = &state.head.frame.as_ref().expect("set").2;
        let seq = &state.seq;
        let joined = seq.len();
        let close = seq.open.map(|(role, _)| role.as_str().len() + 12).unwrap_or(0);
        let patched: usize = patches.iter().map(|(s, e, t)| t.len() - (e - s)).sum();
        let len = frame.pre.len() + 1 + joined + patched + close + frame.post.len();
        // One more byte for the NUL a C host gets (the buffer is handed over as it is), in
        // size classes so that consecutive bodies reuse the buffers freed.
        let mut out = String::with_capacity(crate::request::size_class(len + 1));
        out.push_str(&frame.pre);
        if frame.lead && joined > 0 {
            out.push(',');
        }
        let body_at = out.len();
        let mut at = 0;
        let mut written = Vec::with_capacity(patches.len());
        for (s, e, t) in &patches {
            seq.copy(at, *s, &mut out);
            out.push_str(t);
            written.push(Patch { start: *s, end: *e, len: t.len(), orig: seq.slice(*s, *e).into() });
            at = *e;
        }
        seq.copy(at, joined, &mut out);
        if let Some((role, _)) = seq.open {
            close_group(&mut out, role.as_str());
        }
        out.push_str(&frame.post);
        debug_assert!(out.len() <= len, "the body's size is computed in advance");
        // The body is the cache from now on: the sequence's text is read from it.
        let body = Text::terminated(out);
        let seq = &mut state.seq;
        seq.written = Some(Written { body: body.clone(), at: body_at, patches: written });
        seq.written_len = joined;
        // The tail's room is kept for the next messages, unless it held a whole rebuilt history.
        if seq.tail.capacity() > 64 * 1024 {
            seq.tail = String::new();
        } else {
            seq.tail.clear();
        }
        Ok(body)
    }
}

/// The frame of `head` (Anthropic: with the system and tool breakpoints `key`): the body the
/// renderer's own code writes around its message array, split there.
fn frame_of(
    renderer: Renderer,
    options: &RenderOptions,
    cc: &Value,
    head: &Head,
    key: &FrameKey,
    diagnostics: Option<&Option<String>>,
) -> Result<Frame> {
    let env = &head.env;
    let (body, lead): (JsonMap, Vec<Value>) = match renderer {
        Renderer::OpenAi => {
            let mut lead = openai::lead(env);
            if key.contains(&Mark::System(0)) {
                openai::set_breakpoint(&mut lead[0]);
            }
            (openai::frame(env, options)?, lead)
        }
        Renderer::OpenAiResponses => (responses::frame(env, options)?, Vec::new()),
        Renderer::Anthropic => {
            let mut body = anthropic::frame(env, head.system.clone(), head.tools.clone(), key, cc)?;
            if let Some(previous) = diagnostics {
                anthropic::set_diagnostics(&mut body, previous.clone())?;
            }
            (body, Vec::new())
        }
        Renderer::Gemini => (gemini::frame(env, head.system.clone())?, Vec::new()),
        // The head envelope holds the prefix messages only.
        Renderer::GeminiInteractions => (interactions::frame(env, env.messages.len())?, Vec::new()),
    };
    let key = messages_key(renderer);
    let mut pre = String::with_capacity(4096);
    let mut post = String::with_capacity(256);
    pre.push('{');
    let mut after = false;
    // As serde_json writes a map: `"key":value`, comma-separated, in key order.
    for (i, (k, v)) in body.iter().enumerate() {
        let out = if after { &mut post } else { &mut pre };
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(k).map_err(internal)?);
        out.push(':');
        if k == key {
            out.push('[');
            for (j, item) in lead.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(item).map_err(internal)?);
            }
            post.push(']');
            after = true;
        } else {
            out.push_str(&serde_json::to_string(v).map_err(internal)?);
        }
    }
    post.push('}');
    debug_assert!(after, "the frame holds the messages' place");
    Ok(Frame { pre, lead: !lead.is_empty(), post })
}

/// A history entry's message, parsed back from its JSON (which the derivation wrote from a
/// checked event, so its blocks are not checked again).
fn message_of(d: &Derived) -> Result<Message> {
    let v: Value = serde_json::from_str(&d.json)?;
    Message::from_derived_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_keeps_offsets_under_4_gib_and_refuses_more() {
        assert_eq!(small(0).unwrap(), 0);
        assert_eq!(small(u32::MAX as usize - 1).unwrap(), u32::MAX - 1);
        for n in [u32::MAX as usize, u32::MAX as usize + 1] {
            let e = small(n).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.message().contains("the body cache holds messages under 4 GiB"), "{}", e.message());
        }
        // A refused piece leaves the sequence as it was.
        let mut seq = Sequence::default();
        seq.push(Layout::Flat, Some(3), "{\"a\":1}", Kind::Items, Some((0, 7)), None).unwrap();
        let p = &seq.pieces[0];
        assert_eq!((p.seq(), p.end(), p.mark(), p.notes().len()), (Some(3), 7, Some((0, 7)), 0));
        assert_eq!(seq.text(0), "{\"a\":1}");
        let e = seq.push(Layout::Flat, None, "{}", Kind::Items, Some((0, u32::MAX as usize)), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!((seq.tail.as_str(), seq.pieces.len(), seq.last_cacheable), ("{\"a\":1}", 1, Some(0)));
    }
}
