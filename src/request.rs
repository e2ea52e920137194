//! Request envelopes, their digests, reconstruction from the log, and `verify` (docs/contract.md §4.2, §4.3).
//!
//! The envelope is canonical JSON with a fixed field order:
//! `provider, model, reasoningEffort?, temperature?, maxTokens?, stop?, <other config fields in
//! key order>, system?, tools?, messages, sessionId, turn?, step?, purpose`.
//! `messages` is the session prefix followed by the derived history (and, for a compaction
//! request, the instruction). Every field comes from the logged header, so the log alone
//! rebuilds every request byte for byte; `step/start` records the SHA-256 of those bytes.

use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::event::{types, Event};
use crate::log::history::{joined_len, runs, write_joined};
use crate::log::load::{CheckedLog, SessionHeader};
use crate::log::{Derived, Log, Text};
use crate::render::{BodyCache, BodySource, RenderOptions, Renderer};
use crate::store::{RecordStream, RecordsInMemory, StoreContents};
use crate::types::{CallConfig, Message, ToolSchema};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// What a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A conversation step.
    Conversation,
    /// A compaction summarisation request.
    Compaction,
    /// A provider's own compaction request (Anthropic's on-demand compaction, OpenAI's
    /// `POST /responses/compact`): the conversation as it stands, no instruction, answered with
    /// the provider's compaction block or item (docs/compaction.md, "Native compaction").
    NativeCompaction,
    /// A keep-warm request of the cache clock: the last conversation request again, its output
    /// limit at the provider's minimum, sent to refresh the cache's TTL (its answer never
    /// enters the history).
    Keepalive,
}

impl Purpose {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Conversation => "conversation",
            Purpose::Compaction => "compaction",
            Purpose::NativeCompaction => "native-compaction",
            Purpose::Keepalive => "keepalive",
        }
    }
}

/// Serialised messages of a session prefix, computed once per frozen prefix.
#[derive(Clone, Debug, Default)]
pub struct PrefixBytes {
    /// The prefix this was computed from.
    pub source: Option<Arc<Vec<Message>>>,
    /// One JSON text per message.
    pub messages: Vec<Box<str>>,
}

impl PrefixBytes {
    /// Serialises a prefix.
    pub fn of(prefix: Option<&Arc<Vec<Message>>>) -> PrefixBytes {
        match prefix {
            None => PrefixBytes::default(),
            Some(p) => PrefixBytes {
                source: Some(p.clone()),
                messages: p.iter().map(|m| serde_json::to_string(m).expect("serialises").into_boxed_str()).collect(),
            },
        }
    }

    /// Whether this was computed from `prefix` (pointer identity, or both empty).
    pub fn is_for(&self, prefix: Option<&Arc<Vec<Message>>>) -> bool {
        match (&self.source, prefix) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Everything an envelope is written from.
pub struct EnvelopeParts<'a> {
    /// Provider, model and sampling settings.
    pub config: &'a CallConfig,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The tools.
    pub tools: Option<&'a [ToolSchema]>,
    /// The serialised session prefix messages.
    pub prefix: &'a [Box<str>],
    /// The derived history.
    pub history: &'a [Arc<Derived>],
    /// Serialised messages after the history (the compaction instruction).
    pub trailing: &'a [Box<str>],
    /// The session id.
    pub session_id: &'a str,
    /// Turn and step numbers (conversation requests).
    pub turn_step: Option<(u64, u64)>,
    /// The purpose.
    pub purpose: Purpose,
}

impl<'a> EnvelopeParts<'a> {
    /// The parts of a conversation request: the header's config, system and tools, the
    /// header's prefix, `history`, at `turn_step` (`None` for a rendering that carries none).
    pub fn conversation(
        header: &'a EpochHeader,
        prefix: &'a PrefixBytes,
        history: &'a [Arc<Derived>],
        session_id: &'a str,
        turn_step: Option<(u64, u64)>,
    ) -> EnvelopeParts<'a> {
        EnvelopeParts {
            config: &header.config,
            system: header.system.as_deref(),
            tools: header.tools.as_deref(),
            prefix: &prefix.messages,
            history,
            trailing: &[],
            session_id,
            turn_step,
            purpose: Purpose::Conversation,
        }
    }

    /// Number of messages.
    pub fn message_count(&self) -> usize {
        self.prefix.len() + self.history.len() + self.trailing.len()
    }

    /// Writes the canonical envelope.
    pub fn write(&self) -> Vec<u8> {
        self.write_marked().0.into_bytes()
    }

    /// Writes the canonical envelope; also returns where the history starts (after the
    /// prefix messages) and where it ends (after its last message). Every piece is already
    /// text, so the envelope is built as a `String` and needs no UTF-8 check afterwards.
    fn write_marked(&self) -> (String, usize, usize) {
        self.write_after(&self.head())
    }

    /// The envelope's leading bytes, up to the first history message: the config, system and
    /// tools, then `"messages":[` and the prefix messages.
    fn head(&self) -> String {
        let cfg = serde_json::to_string(self.config).expect("a config serialises");
        let mut out = String::with_capacity(cfg.len() + self.prefix.iter().map(|m| m.len() + 1).sum::<usize>() + 32);
        out.push_str(&cfg[..cfg.len() - 1]); // the config object without its '}'
        if let Some(s) = self.system {
            out.push_str(",\"system\":");
            out.push_str(&serde_json::to_string(s).expect("a string serialises"));
        }
        if let Some(t) = self.tools {
            out.push_str(",\"tools\":");
            out.push_str(&serde_json::to_string(t).expect("tools serialise"));
        }
        out.push_str(",\"messages\":[");
        for (i, m) in self.prefix.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(m);
        }
        out
    }

    /// Writes the envelope given its [`head`](Self::head) (see [`write_marked`](Self::write_marked)).
    fn write_after(&self, head: &str) -> (String, usize, usize) {
        let session_id = serde_json::to_string(self.session_id).expect("a string serialises");
        // The exact size (bar the turn and step digits), so the buffer is never grown: growing
        // it would copy everything written so far once more.
        let hist_bytes = joined_len(self.history) + 1;
        let other: usize = self.trailing.iter().map(|m| m.len() + 1).sum();
        let mut out = String::with_capacity(size_class(head.len() + hist_bytes + other + session_id.len() + 128));
        let capacity = out.capacity();
        out.push_str(head);
        let head_end = out.len();
        let mut first = self.prefix.is_empty();
        if !self.history.is_empty() {
            write_joined(&mut out, self.history, first);
            first = false;
        }
        let hist_end = out.len();
        for m in self.trailing {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(m);
        }
        self.write_tail(&mut out, &session_id);
        debug_assert_eq!(out.capacity(), capacity, "the envelope's size is computed in advance");
        (out, head_end, hist_end)
    }

    /// The envelope's closing bytes, after its last message: `],"sessionId":...}`
    /// (`session_id` already serialised).
    fn write_tail(&self, out: &mut String, session_id: &str) {
        out.push_str("],\"sessionId\":");
        out.push_str(session_id);
        if let Some((turn, step)) = self.turn_step {
            use std::fmt::Write;
            write!(out, ",\"turn\":{turn},\"step\":{step}").expect("writing to a String");
        }
        out.push_str(",\"purpose\":\"");
        out.push_str(self.purpose.as_str());
        out.push_str("\"}");
    }
}

/// Hashes the JSON texts of `entries` as [`write_joined`] writes them (a comma first unless
/// `first`), run by run.
fn hash_joined(hasher: &mut Sha256, entries: &[Arc<Derived>], mut first: bool) {
    for run in runs(entries) {
        if !first {
            hasher.update(b",");
        }
        first = false;
        hasher.update(run.as_bytes());
    }
}

/// The capacity to allocate for an envelope of `n` bytes: `n` rounded up to a size class (a
/// sixteenth of its power of two, at least 4 KiB). The requests of a conversation grow by a
/// little at every step; with exact sizes each one is larger than the buffer the host just
/// freed, so the allocator cannot reuse it and serves fresh pages (for requests of megabytes,
/// page faults cost more than writing the bytes). With size classes, consecutive requests
/// usually ask for the same size and reuse the freed buffer. At most 1/16 is unused.
pub(crate) fn size_class(n: usize) -> usize {
    let step = (n.next_power_of_two() / 16).max(4096);
    n.div_ceil(step) * step
}

/// The `sha256:<hex>` digest of request bytes.
pub fn digest(bytes: &[u8]) -> String {
    hex_digest(&Sha256::digest(bytes))
}

fn hex_digest(d: &[u8]) -> String {
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in d {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// A request built for the host.
#[derive(Clone, Debug)]
pub struct Request {
    /// The envelope's canonical JSON.
    pub json: String,
    /// Its digest, as recorded in `step/start`.
    pub digest: String,
    /// The turn number.
    pub turn: u64,
    /// The step number within the turn.
    pub step: u64,
    /// The agent instance.
    pub instance: u64,
    /// How many leading messages are the session prefix.
    pub prefix_len: usize,
    /// Number of messages.
    pub message_count: usize,
    /// How many leading messages it shares with the previous request of this session.
    pub shared_messages: usize,
    /// The seq of its `step/start`.
    pub step_seq: u64,
    /// The Anthropic beta flags the request needs (`anthropic-beta`): native compaction's
    /// (`compaction::native`); empty otherwise. The library builds no HTTP headers.
    pub betas: Vec<String>,
}

impl Request {
    /// What this request is, without its bytes.
    pub fn info(&self) -> RequestInfo {
        RequestInfo {
            instance: self.instance,
            turn: self.turn,
            step: self.step,
            step_seq: self.step_seq,
            purpose: Purpose::Conversation,
            prefix_len: self.prefix_len,
            message_count: self.message_count,
            shared_messages: self.shared_messages,
            envelope_len: self.json.len(),
            digest: self.digest.clone(),
            betas: self.betas.clone(),
        }
    }
}

/// What a built request is: everything [`Request`] says but its envelope's bytes. Its JSON
/// (`Serialize`) is what `lls_agent_request_info` returns: `{"instance", "turn", "step",
/// "stepSeq", "prefixLen", "messageCount", "sharedMessages", "bytes", "digest"}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestInfo {
    /// The agent instance.
    pub instance: u64,
    /// The turn number.
    pub turn: u64,
    /// The step number within the turn.
    pub step: u64,
    /// The seq of its `step/start`.
    pub step_seq: u64,
    /// What it is for (a conversation step, for every request the host builds).
    #[serde(skip)]
    pub purpose: Purpose,
    /// How many leading messages are the session prefix.
    pub prefix_len: usize,
    /// Number of messages.
    pub message_count: usize,
    /// How many leading messages it shares with the previous request of this session.
    pub shared_messages: usize,
    /// The length of its envelope in bytes (as `step/start` records it).
    #[serde(rename = "bytes")]
    pub envelope_len: usize,
    /// The envelope's digest, as recorded in `step/start`.
    pub digest: String,
    /// The Anthropic beta flags the request needs (`"betas"`, present when not empty):
    /// `compact-2026-01-12` when it carries the threshold compaction edit or a threshold block,
    /// `compact-2026-09-04` when it carries an on-demand (signed) block. The library builds no
    /// HTTP headers: the host sends them as `anthropic-beta`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub betas: Vec<String>,
}

/// A request built as the provider's body ([`crate::Agent::next_body`]): the bytes to POST,
/// rendered from the logged envelope for the agent's renderer, and what the request is.
#[derive(Clone, Debug)]
pub struct Body {
    /// The provider body's JSON, as `Renderer::render` of the envelope serialises. It is
    /// shared with the agent's renderer, which renders the next body from it: a NUL byte follows
    /// it in its buffer, so that a C host is handed that buffer as it is ([`Text::c_buffer`]).
    pub json: Text,
    /// The request it renders.
    pub info: RequestInfo,
}

/// Writes the conversation envelope of the log's current state (header fold, its prefix, the
/// derived history) for `turn`/`step`. `prefix` must be the bytes of the header's prefix.
pub fn conversation_envelope(log: &Log, header: &EpochHeader, prefix: &PrefixBytes, session_id: &str, turn: u64, step: u64) -> Vec<u8> {
    EnvelopeParts::conversation(header, prefix, log.history().entries(), session_id, Some((turn, step))).write()
}

/// The SHA-256 state of a conversation envelope's leading bytes (everything up to the end of
/// its last history message), kept by an agent instance so that the digest of its next
/// envelope hashes only what is new instead of the whole history again. It is reused only when
/// the next envelope provably starts with the same bytes: the same bytes before the history
/// (config, system, tools, prefix: compared exactly), and a history that only grew since (the
/// same replace generation, the same events at the first and last covered positions).
#[derive(Clone, Default)]
pub struct DigestCache {
    state: Option<CachedDigest>,
}

impl CachedDigest {
    /// Whether the head was written from this header and this prefix (the same prefix
    /// composition, by identity).
    fn same_head(&self, header: &EpochHeader, prefix: &PrefixBytes) -> bool {
        self.header == *header
            && match (&self.prefix, &prefix.source) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl std::fmt::Debug for DigestCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestCache").field("covered", &self.state.as_ref().map(|s| s.covered)).finish()
    }
}

#[derive(Clone)]
struct CachedDigest {
    /// The header and prefix the head was written from.
    header: EpochHeader,
    prefix: Option<Arc<Vec<Message>>>,
    /// The envelope's bytes before its first history message.
    head: String,
    generation: u64,
    entries: usize,
    /// Seqs of the first and last history entries covered.
    first: Option<u64>,
    last: Option<u64>,
    /// Bytes hashed into `hasher`: through the last history message.
    covered: usize,
    hasher: Sha256,
}

/// Whether history entry `b` is the entry projected from event `a` (seqs are unique in a log;
/// the entries themselves are rebuilt when their bytes are sealed into a shared run).
fn same_entry(a: Option<u64>, b: Option<&Arc<Derived>>) -> bool {
    a == b.map(|d| d.seq)
}

/// Writes the conversation envelope exactly as [`conversation_envelope`] does (as text) and
/// returns it with its digest (equal to [`digest`] of the bytes), hashing through `cache` only the bytes
/// that follow the previous envelope's last history message when the two share them.
pub fn conversation_envelope_digest(
    log: &Log,
    header: &EpochHeader,
    prefix: &PrefixBytes,
    session_id: &str,
    turn: u64,
    step: u64,
    cache: &mut DigestCache,
) -> (String, String) {
    let history = log.history();
    let entries = history.entries();
    let parts = EnvelopeParts::conversation(header, prefix, entries, session_id, Some((turn, step)));
    // The head is written again only when the header or the prefix changed (comparing them
    // costs far less than serialising the system prompt and the tools).
    let cached = cache.state.take().filter(|c| c.same_head(header, prefix));
    let (body, head_end, hist_end) = match &cached {
        Some(c) => parts.write_after(&c.head),
        None => parts.write_marked(),
    };
    debug_assert_eq!(body, parts.write_marked().0, "the cached head is the head");
    let (cached_header, cached_prefix, head, prior) = match cached {
        Some(c) => {
            // The bytes hashed so far are still the start of this envelope when the history
            // only grew since.
            let grown = c.generation == history.generation()
                && c.entries <= entries.len()
                && same_entry(c.first, if c.entries > 0 { entries.first() } else { None })
                && same_entry(c.last, c.entries.checked_sub(1).map(|i| &entries[i]))
                && c.covered <= hist_end;
            (c.header, c.prefix, c.head, grown.then_some((c.hasher, c.covered)))
        }
        None => (header.clone(), prefix.source.clone(), body[..head_end].to_string(), None),
    };
    let (mut hasher, from) = prior.unwrap_or_else(|| (Sha256::new(), 0));
    hasher.update(&body.as_bytes()[from..hist_end]);
    let mid = hasher.clone();
    hasher.update(&body.as_bytes()[hist_end..]);
    let d = hex_digest(&hasher.finalize());
    debug_assert_eq!(d, digest(body.as_bytes()), "the incremental digest is the digest of the bytes");
    cache.state = Some(CachedDigest {
        header: cached_header,
        prefix: cached_prefix,
        head,
        generation: history.generation(),
        entries: entries.len(),
        first: entries.first().map(|d| d.seq),
        last: entries.last().map(|d| d.seq),
        covered: hist_end,
        hasher: mid,
    });
    (body, d)
}

/// The length and digest of the conversation envelope [`conversation_envelope_digest`] would
/// write, without writing it: the bytes are hashed where they lie (the cached head, the
/// history's sealed runs, the closing fields), and through `cache` only those after the
/// previous envelope's last history message when the two share them. For a request whose
/// envelope is not wanted (`Agent::next_body`); debug builds check both against the bytes.
pub fn conversation_digest(
    log: &Log,
    header: &EpochHeader,
    prefix: &PrefixBytes,
    session_id: &str,
    turn: u64,
    step: u64,
    cache: &mut DigestCache,
) -> (usize, String) {
    let history = log.history();
    let entries = history.entries();
    let parts = EnvelopeParts::conversation(header, prefix, entries, session_id, Some((turn, step)));
    let cached = cache.state.take().filter(|c| c.same_head(header, prefix));
    // The history starts with a comma when prefix messages precede it.
    let first = prefix.messages.is_empty();
    let all_history = || if entries.is_empty() { 0 } else { usize::from(!first) + joined_len(entries) };
    let (cached_header, cached_prefix, head, prior, hist_bytes) = match cached {
        Some(c) => {
            // The bytes hashed so far are still the start of this envelope when the history
            // only grew since.
            let grown = c.generation == history.generation()
                && c.entries <= entries.len()
                && same_entry(c.first, if c.entries > 0 { entries.first() } else { None })
                && same_entry(c.last, c.entries.checked_sub(1).map(|i| &entries[i]));
            if grown {
                // The history's length is that of the covered entries (the bytes hashed after
                // the head) plus the new ones: only those are walked.
                let new = &entries[c.entries..];
                let hist_bytes = match (c.entries, new.is_empty()) {
                    (_, true) => c.covered - c.head.len(),
                    (0, false) => all_history(),
                    (_, false) => c.covered - c.head.len() + 1 + joined_len(new),
                };
                (c.header, c.prefix, c.head, Some((c.hasher, c.entries)), hist_bytes)
            } else {
                (c.header, c.prefix, c.head, None, all_history())
            }
        }
        None => (header.clone(), prefix.source.clone(), parts.head(), None, all_history()),
    };
    let hist_end = head.len() + hist_bytes;
    let mut hasher = match prior {
        Some((mut h, covered)) => {
            hash_joined(&mut h, &entries[covered..], first && covered == 0);
            h
        }
        None => {
            let mut h = Sha256::new();
            h.update(head.as_bytes());
            hash_joined(&mut h, entries, first);
            h
        }
    };
    let mid = hasher.clone();
    let mut tail = String::with_capacity(session_id.len() + 96);
    parts.write_tail(&mut tail, &serde_json::to_string(session_id).expect("a string serialises"));
    hasher.update(tail.as_bytes());
    let d = hex_digest(&hasher.finalize());
    let len = hist_end + tail.len();
    #[cfg(debug_assertions)]
    {
        let bytes = parts.write();
        debug_assert_eq!(len, bytes.len(), "the envelope's length without writing it");
        debug_assert_eq!(d, digest(&bytes), "the envelope's digest without writing it");
    }
    cache.state = Some(CachedDigest {
        header: cached_header,
        prefix: cached_prefix,
        head,
        generation: history.generation(),
        entries: entries.len(),
        first: entries.first().map(|d| d.seq),
        last: entries.last().map(|d| d.seq),
        covered: hist_end,
        hasher: mid,
    });
    (len, d)
}

/// The call config of a summarisation request, from the routed request's config `routed` and
/// the summarisation target (`provider`, `model`) with its output budget `max_tokens`:
///
/// - the target is the routed provider (the conversation's own model, or another model of the
///   same provider): the routed config, every field kept (`reasoningEffort`, `temperature`,
///   `stop` and every pass-through field: `thinking`, `tool_choice`, `prompt_cache_key`,
///   `cache_salt`, ...), with `model` set to the target's and `maxTokens` replaced by the
///   summary budget. Providers key their caches on some of these fields (Anthropic's thinking
///   and tool choice, OpenAI's cache key, vLLM's cache salt), so dropping one would lose the
///   cache the summarisation request is built to reuse.
/// - the target is another provider: provider and model of the target, the vocabulary's
///   sampling fields (`reasoningEffort`, `temperature`, `stop`) kept, `maxTokens` the summary
///   budget, and **no** pass-through field: those are written in the routed provider's own
///   spelling, and another provider may refuse them. Such a request cannot reuse the routed
///   request's cache anyway.
pub fn summary_config(routed: &CallConfig, provider: &str, model: &str, max_tokens: u64) -> CallConfig {
    let mut cfg = routed.clone();
    if cfg.provider != provider {
        cfg.provider = provider.to_string();
        cfg.extra = Default::default();
    }
    cfg.model = model.to_string();
    cfg.max_tokens = Some(max_tokens);
    cfg
}

/// Builds the compaction request envelope: the routed header's config (see [`summary_config`]
/// for what the target `provider`/`model` and the budget `max_tokens` change), system, tools and
/// prefix, the region's derived messages, then the instruction.
#[allow(clippy::too_many_arguments)]
pub fn compaction_envelope(
    header: &EpochHeader,
    prefix: &PrefixBytes,
    region: &[Arc<Derived>],
    instruction: &str,
    provider: &str,
    model: &str,
    max_tokens: u64,
    session_id: &str,
) -> Vec<u8> {
    let cfg = summary_config(&header.config, provider, model, max_tokens);
    let instr = serde_json::to_string(&Message::user_text(instruction)).expect("serialises").into_boxed_str();
    EnvelopeParts {
        config: &cfg,
        system: header.system.as_deref(),
        tools: header.tools.as_deref(),
        prefix: &prefix.messages,
        history: region,
        trailing: std::slice::from_ref(&instr),
        session_id,
        turn_step: None,
        purpose: Purpose::Compaction,
    }
    .write()
}

/// The call config of a native compaction request to a route of `format`: the routed config
/// (the same provider and model: the block must come from the route that will read it), with
/// `max_tokens` the output budget, less what the provider refuses on such a request:
///
/// - Anthropic (on-demand compaction, `compact-2026-09-04`): no `stop` (`stop_sequences`), no
///   `context_management` (it cannot be combined with `compaction`), no `tool_choice` of type
///   `any` or `tool`, no structured-output `output_config.format`; every other field kept, so
///   the summariser reads the conversation with its own thinking settings and tools.
/// - OpenAI Responses (`POST /responses/compact`): provider and model, and of the pass-through
///   fields only those the endpoint takes (`prompt_cache_key`, `prompt_cache_retention`,
///   `service_tier`) with the `promptCacheOptions` control; no output limit or sampling field
///   (the endpoint has none).
pub fn native_compaction_config(routed: &CallConfig, format: Renderer, max_tokens: u64) -> CallConfig {
    let mut cfg = routed.clone();
    match format {
        Renderer::OpenAiResponses => {
            cfg.reasoning_effort = None;
            cfg.temperature = None;
            cfg.max_tokens = None;
            cfg.stop = None;
            cfg.extra.retain(|k, _| crate::compaction::native::COMPACT_ENDPOINT_FIELDS.contains(&k.as_str()));
        }
        _ => {
            cfg.stop = None;
            cfg.max_tokens = Some(max_tokens);
            cfg.extra.remove("context_management");
            if cfg.extra.get("tool_choice").and_then(|t| t.get("type")).and_then(Value::as_str).is_some_and(|t| t == "any" || t == "tool") {
                cfg.extra.remove("tool_choice");
            }
            if let Some(Value::Object(o)) = cfg.extra.get_mut("output_config") {
                o.remove("format");
                if o.is_empty() {
                    cfg.extra.remove("output_config");
                }
            }
        }
    }
    cfg
}

/// Builds a native compaction request envelope (`purpose: "native-compaction"`): `config` (see
/// [`native_compaction_config`]), the routed header's system and (for Anthropic, which reads
/// them) tools, the session prefix and the region's derived messages, with no instruction: the
/// provider summarises with its own prompt.
pub fn native_compaction_envelope(
    header: &EpochHeader,
    config: &CallConfig,
    format: Renderer,
    prefix: &PrefixBytes,
    region: &[Arc<Derived>],
    session_id: &str,
) -> Vec<u8> {
    EnvelopeParts {
        config,
        system: header.system.as_deref(),
        tools: if format == Renderer::Anthropic { header.tools.as_deref() } else { None },
        prefix: &prefix.messages,
        history: region,
        trailing: &[],
        session_id,
        turn_step: None,
        purpose: Purpose::NativeCompaction,
    }
    .write()
}

/// The pass-through config fields that set an output limit (cache-neutral: see
/// `explain::CACHE_NEUTRAL_FIELDS`).
const OUTPUT_LIMIT_FIELDS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The call config of a keep-warm request: the routed config `routed`, every field kept (the
/// provider caches on some of them), with its output limit `maxTokens` set to `max_tokens` and
/// the pass-through output limits left out (`max_tokens`, `max_completion_tokens`,
/// `max_output_tokens`, and `maxOutputTokens` inside a Gemini `generationConfig`), which would
/// otherwise stand in for it or collide with it.
pub fn keepalive_config(routed: &CallConfig, max_tokens: u64) -> CallConfig {
    let mut cfg = routed.clone();
    for k in OUTPUT_LIMIT_FIELDS {
        cfg.extra.remove(k);
    }
    if let Some(Value::Object(g)) = cfg.extra.get_mut("generationConfig") {
        g.remove("maxOutputTokens");
    }
    cfg.max_tokens = Some(max_tokens);
    cfg
}

/// Builds the envelope of a keep-warm request: the conversation request whose history was
/// `history` (the entries it carried) under `header`, with the keep-warm config
/// ([`keepalive_config`]), no turn and step, and `purpose: "keepalive"`. Its cacheable part
/// (config but the output limit, system, tools, messages) is byte for byte that request's, so
/// the provider reads it whole from its cache and refreshes it.
pub fn keepalive_envelope(
    header: &EpochHeader,
    prefix: &PrefixBytes,
    history: &[Arc<Derived>],
    max_tokens: u64,
    session_id: &str,
) -> Vec<u8> {
    let cfg = keepalive_config(&header.config, max_tokens);
    EnvelopeParts {
        config: &cfg,
        system: header.system.as_deref(),
        tools: header.tools.as_deref(),
        prefix: &prefix.messages,
        history,
        trailing: &[],
        session_id,
        turn_step: None,
        purpose: Purpose::Keepalive,
    }
    .write()
}

/// The history entries the conversation request of `step/start` seq `routed` carried, if the
/// surface still begins with them: every entry logged before it, in a history no compaction
/// replaced since (`last_replace` is the seq of the latest replace). `None` when a compaction
/// rewrote the history after that request (its prefix is gone from the surface).
pub fn routed_history(log: &Log, routed: u64) -> Option<&[Arc<Derived>]> {
    if log.state().last_replace_seq.is_some_and(|r| r > routed) {
        return None;
    }
    let entries = log.history().entries();
    let n = entries.iter().take_while(|d| d.seq < routed).count();
    Some(&entries[..n])
}

/// What `verify` checked. Its JSON (`Serialize`) is what `lls_verify_*` return: `{"events",
/// "requests", "compactions"}` (`bodies` only after a verify that rendered them,
/// `nativeCompactions` only when there were native compaction requests).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// Number of events checked.
    pub events: u64,
    /// Conversation requests rebuilt and matched.
    pub requests: u64,
    /// Compaction requests rebuilt and matched.
    pub compactions: u64,
    /// Native compaction requests (`purpose: "native-compaction"`) rebuilt and matched
    /// (`nativeCompactions`, present when there were any).
    #[serde(rename = "nativeCompactions", skip_serializing_if = "crate::types::is_zero")]
    pub native_compactions: u64,
    /// Keep-warm requests rebuilt and matched (absent when 0).
    #[serde(skip_serializing_if = "crate::types::is_zero")]
    pub keepalives: u64,
    /// Cache-clock decisions recomputed from the log and matched (absent when 0).
    #[serde(skip_serializing_if = "crate::types::is_zero")]
    pub decisions: u64,
    /// Provider bodies rendered from the cached messages and matched with the rendering of
    /// their rebuilt envelope ([`verify_bodies`]; 0 for a plain verify).
    #[serde(skip_serializing_if = "crate::types::is_zero")]
    pub bodies: u64,
}

/// What a request a log records is: a conversation request (`step/start`) or a summarisation
/// request (`compaction/start` with a `requestDigest`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedKind {
    /// A conversation request.
    Conversation {
        /// Its turn.
        turn: u64,
        /// Its step.
        step: u64,
        /// Its size as recorded.
        bytes: u64,
    },
    /// A summarisation request.
    Compaction {
        /// The first history entry it summarises.
        start: usize,
        /// The last history entry it summarises.
        end: usize,
        /// The instruction appended as its last user message.
        instruction: String,
        /// The provider it was routed to.
        provider: String,
        /// The model it was routed to.
        model: String,
        /// Its output limit.
        max_tokens: u64,
    },
    /// A native compaction request (`compaction/start` with `mechanism: "native"` and a
    /// `requestDigest`: Anthropic's on-demand compaction, OpenAI's `/responses/compact`).
    NativeCompaction {
        /// The first history entry it carries.
        start: usize,
        /// The last history entry it carries.
        end: usize,
        /// The body format it was rendered for.
        format: String,
        /// Its output limit (`compaction::native`: Anthropic's `max_tokens`).
        max_tokens: u64,
    },
    /// A keep-warm request.
    Keepalive {
        /// The seq of the `step/start` of the conversation request it replays.
        replays: u64,
        /// Its output limit.
        max_tokens: u64,
        /// Its size as recorded.
        bytes: u64,
    },
}

/// A request a log records, rebuilt from the events before it ([`RequestWalk::rebuild`]).
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// What request it is.
    pub kind: RecordedKind,
    /// The request header it was built with.
    pub header: EpochHeader,
    /// The envelope rebuilt from the log.
    pub envelope: Vec<u8>,
    /// The digest the log recorded for it.
    pub recorded_digest: String,
    /// The history messages a compaction request (either mechanism) carries, after the session
    /// prefix: the span's entries, or (a route change) the messages a native checkpoint
    /// replaced. Empty for a conversation request, which carries the whole history.
    pub region: Vec<Arc<Derived>>,
}

impl RecordedRequest {
    /// Whether the rebuilt envelope has the recorded digest (and, for a conversation request,
    /// the recorded size).
    pub fn matches(&self) -> bool {
        let size_ok = match self.kind {
            RecordedKind::Conversation { bytes, .. } | RecordedKind::Keepalive { bytes, .. } => self.envelope.len() as u64 == bytes,
            RecordedKind::Compaction { .. } | RecordedKind::NativeCompaction { .. } => true,
        };
        size_ok && digest(&self.envelope) == self.recorded_digest
    }
}

/// Walks a log event by event and rebuilds every request it records from the events before
/// it: the one walk behind `verify`, `explain`, `replay` and the CLI's `show`. For each event,
/// call [`rebuild`](RequestWalk::rebuild) (the request it records, if it records one), then
/// [`apply`](RequestWalk::apply). Those readers walk the events of a
/// [`CheckedLog`](crate::log::load::CheckedLog) ([`RequestWalk::of`]): a stored log is read
/// through the loading path an open uses before any request is rebuilt from it.
pub struct RequestWalk<'a> {
    session: &'a SessionHeader,
    /// How to find an earlier event of the log by seq, when the walk can (to find what a
    /// native checkpoint replaced).
    events: Events<'a>,
    log: Log,
    prefix: PrefixBytes,
    turn: u64,
    step: u64,
    /// The seq of the latest `step/start` applied.
    last_step: Option<u64>,
}

/// How a [`RequestWalk`] finds an earlier event by seq.
#[derive(Clone, Copy)]
enum Events<'a> {
    /// It cannot.
    None,
    /// In the whole log's events.
    Slice(&'a [Event]),
    /// By asking (a store read, for a walk over a log read one event at a time).
    Lookup(&'a dyn Fn(u64) -> Option<Event>),
}

impl<'a> RequestWalk<'a> {
    /// A walk over a log whose session header is `session`, before its first event.
    pub fn new(session: &'a SessionHeader) -> RequestWalk<'a> {
        RequestWalk {
            session,
            events: Events::None,
            log: Log::discarding(),
            prefix: PrefixBytes::default(),
            turn: 0,
            step: 0,
            last_step: None,
        }
    }

    /// A walk that starts from a log restored at a checkpoint (its state folds the events before
    /// it; see [`crate::log::load::load_window`]). `events`, when given, looks up older events by
    /// seq (a route change's summarisation request carries the messages a native checkpoint
    /// replaced).
    pub fn at(session: &'a SessionHeader, log: Log, events: Option<&'a dyn Fn(u64) -> Option<Event>>) -> RequestWalk<'a> {
        let (turn, step) = log.state().open_turn.as_ref().map_or((0, 0), |t| (t.turn, t.last_step));
        let last_step = log.state().last_request_seq;
        let events = events.map_or(Events::None, Events::Lookup);
        RequestWalk { session, events, log, prefix: PrefixBytes::default(), turn, step, last_step }
    }

    /// A walk over `events` (the whole log, from seq 0), which it can look up by seq: a
    /// route change's summarisation request carries the messages a native checkpoint replaced.
    pub fn over(session: &'a SessionHeader, events: &'a [Event]) -> RequestWalk<'a> {
        RequestWalk { events: Events::Slice(events), ..RequestWalk::new(session) }
    }

    /// A walk over a log read one event at a time, which looks older events up with `events`.
    pub fn looking_up(session: &'a SessionHeader, events: &'a dyn Fn(u64) -> Option<Event>) -> RequestWalk<'a> {
        RequestWalk { events: Events::Lookup(events), ..RequestWalk::new(session) }
    }

    /// A walk over a log read by [`read_checked`](crate::log::load::read_checked), with its
    /// events.
    pub fn of(log: &'a CheckedLog) -> (RequestWalk<'a>, &'a [Event]) {
        (RequestWalk::over(log.header(), log.events()), log.events())
    }

    /// Event `seq` of the walked log, when the walk was given the events or a way to look
    /// them up.
    pub fn event(&self, seq: u64) -> Option<Event> {
        match self.events {
            Events::None => None,
            Events::Slice(events) => events.get(seq as usize).filter(|e| e.seq == seq).cloned(),
            Events::Lookup(f) => f(seq).filter(|e| e.seq == seq),
        }
    }

    /// The log of the events applied so far.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The session prefix of the current request header, as the requests carry it.
    pub fn prefix(&self) -> &PrefixBytes {
        &self.prefix
    }

    /// The turn and step of the last conversation request (or open step) so far.
    pub fn position(&self) -> (u64, u64) {
        (self.turn, self.step)
    }

    /// The seq of the latest conversation request (`step/start`) applied so far.
    pub fn last_step_seq(&self) -> Option<u64> {
        self.last_step
    }

    /// The session id the request of `ev` carries.
    pub fn session_id_at(&self, ev: &Event) -> &str {
        self.session.session_id_at(ev.seq)
    }

    fn header_for(&mut self, ev: &Event, what: &str) -> Result<EpochHeader> {
        let header = self.log.state().headers.current().cloned().ok_or_else(|| {
            Error::new(ErrorKind::Reconstruction, format!("seq {}: {what} before any request header", ev.seq)).with("seq", ev.seq)
        })?;
        if !self.prefix.is_for(header.message_prefix.as_ref()) {
            self.prefix = PrefixBytes::of(header.message_prefix.as_ref());
        }
        Ok(header)
    }

    /// The request `ev` records, rebuilt from the events applied so far; `None` when `ev` is
    /// not a request. A request the log cannot rebuild at all (no request header before it, a
    /// compaction span outside the history) is a [`ErrorKind::Reconstruction`] error naming
    /// its seq; one it rebuilds differently is returned (see [`RecordedRequest::matches`]).
    pub fn rebuild(&mut self, ev: &Event) -> Result<Option<RecordedRequest>> {
        if ev.ty == types::STEP_START {
            let f = ev.fields()?;
            let (turn, step, bytes) = (f.u64("turn")?, f.u64("step")?, f.u64("bytes")?);
            let recorded_digest = f.str("digest")?.to_string();
            (self.turn, self.step) = (turn, step);
            let header = self.header_for(ev, "a request")?;
            let envelope = conversation_envelope(&self.log, &header, &self.prefix, self.session.session_id_at(ev.seq), turn, step);
            let kind = RecordedKind::Conversation { turn, step, bytes };
            return Ok(Some(RecordedRequest { kind, header, envelope, recorded_digest, region: Vec::new() }));
        }
        if ev.ty == types::CLOCK_KEEPALIVE {
            return self.rebuild_keepalive(ev).map(Some);
        }
        if ev.ty != types::COMPACTION_START || ev.data.get("requestDigest").is_none() {
            return Ok(None);
        }
        let f = ev.fields()?;
        let recorded_digest = f.str("requestDigest")?.to_string();
        let span = f.value("span")?;
        let start = span.get("start").and_then(Value::as_u64).unwrap_or(0) as usize;
        let end = span.get("end").and_then(Value::as_u64).unwrap_or(0) as usize;
        let header = self.header_for(ev, "a compaction")?;
        let entries = self.log.history().entries();
        if start > end || end >= entries.len() {
            return Err(Error::new(
                ErrorKind::Reconstruction,
                format!("compaction at seq {}: span {start}..={end} is outside the surface", ev.seq),
            )
            .with("seq", ev.seq));
        }
        if f.opt_str("mechanism")? == Some("native") {
            let format = Renderer::parse(f.str("format")?)?;
            let max_tokens = f.opt_u64("maxTokens")?.unwrap_or(8192);
            let config = native_compaction_config(&header.config, format, max_tokens);
            let region = entries[start..=end].to_vec();
            let envelope = native_compaction_envelope(&header, &config, format, &self.prefix, &region, self.session.session_id_at(ev.seq));
            let kind = RecordedKind::NativeCompaction { start, end, format: format.name().to_string(), max_tokens };
            return Ok(Some(RecordedRequest { kind, header, envelope, recorded_digest, region }));
        }
        let (instruction, provider, model) =
            (f.str("instruction")?.to_string(), f.str("provider")?.to_string(), f.str("model")?.to_string());
        let max_tokens = f.u64("maxTokens")?;
        // A route change's request carries what the native checkpoint replaced (`expanded`).
        let region = match f.opt_array("expanded")? {
            None => entries[start..=end].to_vec(),
            Some(seqs) => {
                let seqs: Vec<u64> = seqs.iter().filter_map(Value::as_u64).collect();
                crate::compaction::native::expand(&seqs, &|s| self.event(s)).map_err(|e| {
                    Error::new(ErrorKind::Reconstruction, format!("compaction at seq {}: {}", ev.seq, e.message())).with("seq", ev.seq)
                })?
            }
        };
        let envelope = compaction_envelope(
            &header,
            &self.prefix,
            &region,
            &instruction,
            &provider,
            &model,
            max_tokens,
            self.session.session_id_at(ev.seq),
        );
        let kind = RecordedKind::Compaction { start, end, instruction, provider, model, max_tokens };
        Ok(Some(RecordedRequest { kind, header, envelope, recorded_digest, region }))
    }

    /// A keep-warm request: the conversation request it replays (the latest one), rebuilt with
    /// the keep-warm config ([`keepalive_envelope`]).
    fn rebuild_keepalive(&mut self, ev: &Event) -> Result<RecordedRequest> {
        let f = ev.fields()?;
        let (replays, max_tokens, bytes) = (f.u64("replays")?, f.u64("maxTokens")?, f.u64("bytes")?);
        let recorded_digest = f.str("requestDigest")?.to_string();
        let fail = |why: String| {
            Err(Error::new(ErrorKind::Reconstruction, format!("keep-warm request at seq {}: {why}", ev.seq)).with("seq", ev.seq))
        };
        if self.last_step != Some(replays) {
            return fail(match self.last_step {
                None => format!("it replays seq {replays}, but no conversation request was sent before it"),
                Some(s) => format!("it replays seq {replays}, but the latest conversation request is seq {s}"),
            });
        }
        let header = self.header_for(ev, "a keep-warm request")?;
        let Some(history) = routed_history(&self.log, replays) else {
            return fail(format!("a compaction replaced the history after the request it replays (seq {replays})"));
        };
        let envelope = keepalive_envelope(&header, &self.prefix, history, max_tokens, self.session.session_id_at(ev.seq));
        Ok(RecordedRequest {
            kind: RecordedKind::Keepalive { replays, max_tokens, bytes },
            header,
            envelope,
            recorded_digest,
            region: Vec::new(),
        })
    }

    /// Applies `ev`, checked by the log rules as on load (`expected_seq` is the seq it must
    /// have). A refused event is the rules' error; nothing is applied.
    pub fn apply(&mut self, ev: &Event, expected_seq: u64) -> Result<()> {
        let effect = self.log.state().check(ev, expected_seq)?;
        self.commit(ev, effect);
        Ok(())
    }

    /// Applies an event [`LogState::check`](crate::log::LogState::check) accepted.
    fn commit(&mut self, ev: &Event, effect: crate::log::Effect) {
        self.log.commit(ev, effect, crate::log::Text::from(""));
        if ev.ty == types::STEP_START {
            self.last_step = Some(ev.seq);
        }
        if let Some(t) = &self.log.state().open_turn {
            (self.turn, self.step) = (t.turn, t.last_step);
        }
    }

    /// The length and digest of the conversation request `ev` (a `step/start`) records,
    /// rebuilt from the events applied so far without writing its envelope: hashed through
    /// `cache`, only what is new since the previous request when the history only grew (see
    /// [`conversation_digest`]). `None` when `ev` is not a conversation request.
    fn conversation_digest(&mut self, ev: &Event, cache: &mut DigestCache) -> Result<Option<(u64, u64, u64, String, usize, String)>> {
        if ev.ty != types::STEP_START {
            return Ok(None);
        }
        let f = ev.fields()?;
        let (turn, step, bytes) = (f.u64("turn")?, f.u64("step")?, f.u64("bytes")?);
        let recorded = f.str("digest")?.to_string();
        (self.turn, self.step) = (turn, step);
        let header = self.header_for(ev, "a request")?;
        let (len, d) = conversation_digest(&self.log, &header, &self.prefix, self.session.session_id_at(ev.seq), turn, step, cache);
        Ok(Some((turn, step, bytes, recorded, len, d)))
    }
}

fn divergence(msg: String, ev: &Event, turn: u64, step: u64) -> Error {
    Error::new(ErrorKind::Reconstruction, msg).with("seq", ev.seq).with("turn", turn).with("step", step).with("line", ev.seq + 2)
}

/// Rebuilds every request recorded in `events` from the log alone and compares it with the
/// recorded digest and size, naming the first step that differs. Seqs are not required to be
/// contiguous here, so that a log with a dropped event is reported at the request it breaks.
pub fn verify_events(session: &SessionHeader, events: &[Event]) -> Result<VerifyReport> {
    verify_events_with(session, events, None)
}

/// [`verify_events`], and with `bodies` also the provider body of every conversation request
/// (see [`verify_bodies`]).
fn verify_events_with(session: &SessionHeader, events: &[Event], mut bodies: Option<&mut BodyCache>) -> Result<VerifyReport> {
    let mut walk = RequestWalk::over(session, events);
    let mut report = VerifyReport::default();
    let mut children = ChildLinks::default();
    let mut clock = crate::clock::LogCheck::default();
    for ev in events {
        check_native_content(&walk, ev)?;
        children.check(ev).map_err(|msg| {
            let (t, s) = walk.position();
            divergence(msg, ev, t, s)
        })?;
        let (turn, step) = walk.position();
        let rebuilt = walk.rebuild(ev).map_err(|e| {
            let (t, s) = walk.position();
            divergence(e.message().to_string(), ev, t, s)
        })?;
        if let Some(r) = rebuilt {
            check_rebuilt(&walk, ev, &r, (turn, step), bodies.as_deref_mut(), &mut report)?;
        }
        clock.check(ev, &walk).map_err(|e| {
            let (t, s) = walk.position();
            divergence(e.message().to_string(), ev, t, s)
        })?;
        if ev.ty == types::CLOCK_DECISION {
            report.decisions += 1;
        }
        let (turn, step) = walk.position();
        walk.apply(ev, ev.seq).map_err(|e| {
            divergence(format!("turn {turn} step {step}: {}", e.message()), ev, turn, step).with_kind(ErrorKind::Reconstruction)
        })?;
        report.events += 1;
    }
    Ok(report)
}

/// A route change's checkpoint made of a native block's readable text (`compaction/summary`
/// with `source: "native-content"`) holds exactly that text: the block's `content`.
fn check_native_content(walk: &RequestWalk<'_>, ev: &Event) -> Result<()> {
    if ev.ty != types::COMPACTION_SUMMARY || ev.data.get("source").and_then(Value::as_str) != Some("native-content") {
        return Ok(());
    }
    let (turn, step) = walk.position();
    let fail = |why: String| Err(divergence(format!("compaction summary at seq {}: {why}", ev.seq), ev, turn, step));
    let Some(cp) = walk.log().state().compaction.as_ref().and_then(|c| c.seqs.first()).and_then(|s| walk.event(*s)) else {
        return fail("the native checkpoint it replaces is not in the log".into());
    };
    let text = cp
        .data
        .get("message")
        .and_then(|m| Message::from_value(m, "").ok())
        .and_then(|m| crate::compaction::native::native_checkpoint(&m).and_then(|c| c.readable().map(str::to_string)));
    match text {
        Some(t) if ev.data.get("raw").and_then(Value::as_str) == Some(t.as_str()) => Ok(()),
        Some(_) => fail(format!("its text is not the content of the native block at seq {}", cp.seq)),
        None => fail(format!("seq {} is not a native checkpoint with readable content", cp.seq)),
    }
}

/// The children a log's `agent/spawn` events started, by the call each answers: a `tool/result`
/// that names a child (`data.child`) must answer the call that child was spawned for.
#[derive(Default)]
struct ChildLinks {
    spawned: std::collections::HashMap<String, Vec<String>>,
}

impl ChildLinks {
    fn check(&mut self, ev: &Event) -> std::result::Result<(), String> {
        let call = ev.data.get("callId").and_then(Value::as_str);
        let child = ev.data.get("child").and_then(Value::as_str);
        match (ev.ty.as_str(), call, child) {
            (types::AGENT_SPAWN, Some(call), Some(child)) => self.spawned.entry(call.to_string()).or_default().push(child.to_string()),
            (types::TOOL_RESULT, Some(call), Some(child)) => {
                if !self.spawned.get(call).is_some_and(|c| c.iter().any(|c| c == child)) {
                    return Err(format!(
                        "tool/result (seq {}) is the answer of child {child:?} to call {call:?}, but no agent/spawn before it started that child for that call",
                        ev.seq
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The body the cache renders for the request of `ev` equals the rendering of its rebuilt
/// `envelope`.
#[allow(clippy::too_many_arguments)]
fn check_body(
    cache: &mut BodyCache,
    log: &Log,
    header: &EpochHeader,
    prefix: &PrefixBytes,
    session_id: &str,
    envelope: &[u8],
    ev: &Event,
    turn: u64,
    step: u64,
) -> Result<()> {
    let name = cache.renderer().name();
    let at = |e: Error| {
        let msg = format!("turn {turn} step {step} (seq {}): the {name} body: {}", ev.seq, e.message());
        Error::new(e.kind(), msg).with("seq", ev.seq).with("turn", turn).with("step", step)
    };
    let src = BodySource { header, prefix, history: log.history(), session_id };
    let cached = cache.body(&src, turn, step).map_err(at)?;
    let text = std::str::from_utf8(envelope).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    let fresh = cache.render_envelope_fresh(text, prefix.messages.len(), None).map_err(at)?;
    if cached.as_str() != fresh {
        let byte = cached.bytes().zip(fresh.bytes()).take_while(|(a, b)| a == b).count();
        return Err(divergence(
            format!(
                "turn {turn} step {step} (seq {}): the {name} body built from the rendered messages differs from the rendering of the envelope (first difference at byte {byte})",
                ev.seq
            ),
            ev,
            turn,
            step,
        ));
    }
    Ok(())
}

/// Verifies a whole stored log given as its records (session header first): see
/// [`verify_contents`]; the last record counts as complete.
pub fn verify_records(records: &[Vec<u8>]) -> Result<VerifyReport> {
    verify_contents(&StoreContents { records: records.to_vec(), last_complete: true })
}

/// Verifies a stored log ([`verify_stream`] over its records).
pub fn verify_contents(contents: &StoreContents) -> Result<VerifyReport> {
    let events = contents_lookup(contents);
    verify_stream(&mut RecordsInMemory::new(contents.clone()), None, &mut |_| {}, None, Some(&events))
}

/// Event `seq` of a log given as its records, for a walk that looks events up.
fn contents_lookup(contents: &StoreContents) -> impl Fn(u64) -> Option<Event> + '_ {
    |seq| contents.records.get(seq as usize + 1).and_then(|r| crate::log::load::parse_event(r).ok())
}

/// Looks earlier events of a stored log up by seq for a streaming verify (a route change's
/// summarisation request carries what a native checkpoint replaced): read from the store a
/// block of records at a time, the last block kept.
pub struct StoreLookup<'s> {
    store: std::cell::RefCell<(&'s mut dyn crate::store::Store, u64, Vec<Vec<u8>>)>,
}

impl<'s> StoreLookup<'s> {
    const BLOCK: u64 = 1024;

    /// A lookup reading `store`.
    pub fn new(store: &'s mut dyn crate::store::Store) -> StoreLookup<'s> {
        StoreLookup { store: std::cell::RefCell::new((store, 0, Vec::new())) }
    }

    /// Event `seq`, if the store holds it.
    pub fn event(&self, seq: u64) -> Option<Event> {
        let mut g = self.store.borrow_mut();
        let (store, from, block) = &mut *g;
        if seq < *from || seq >= *from + block.len() as u64 {
            *block = store.read_records(seq as usize + 1, (seq + Self::BLOCK) as usize + 1).ok()?;
            *from = seq;
        }
        block.get((seq - *from) as usize).and_then(|r| crate::log::load::parse_event(r).ok())
    }
}

/// [`verify_contents`], and also the provider body of every conversation request for
/// `renderer` with `options` (their `prefix_len` is each request's own): the body an agent with
/// that renderer builds from its rendered messages (`Agent::next_body`, through a
/// [`BodyCache`] followed across the whole log: header changes, compactions, instances) is
/// compared with `Renderer::render` of the request's rebuilt envelope, byte for byte. A
/// difference is `Reconstruction` naming the step; a request the renderer cannot render is its
/// error, naming the step.
pub fn verify_bodies(contents: &StoreContents, renderer: Renderer, options: &RenderOptions) -> Result<VerifyReport> {
    let events = contents_lookup(contents);
    verify_stream(&mut RecordsInMemory::new(contents.clone()), Some((renderer, options)), &mut |_| {}, None, Some(&events))
}

/// How far a streaming [`verify_stream`] got: records and bytes read, and the totals when the
/// store knows them. Its JSON is what the `verify-progress` observation carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyProgress {
    /// Records read (the session header included).
    pub records: u64,
    /// Bytes read (newlines included).
    pub bytes: u64,
    /// Records in all, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_records: Option<u64>,
    /// Bytes in all, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Whether this is the last report (the whole log was read).
    pub done: bool,
}

/// How often [`verify_stream`] reports its progress: after this many bytes, or this many
/// records, whichever comes first.
const PROGRESS_BYTES: u64 = 1 << 20;
const PROGRESS_RECORDS: u64 = 4096;

/// Verifies a stored log read one record at a time: memory follows the folded state (the live
/// surface and the requests it rebuilds), not the log's length. It makes every check an open of
/// the whole log makes (the header, the chained digest of every record in a version 2 log, the
/// log rules for every event, every checkpoint recomputed), so that what `verify` accepts also
/// opens, and damage that opening would cut from an unfinished last turn fails here instead,
/// naming its line (only a torn last record, a write cut short, is tolerated, as an open
/// leaves it out). It also checks that every checkpoint restores the state the log folds to at
/// that point ([`crate::log::checkpoint::same_state`]), and rebuilds every recorded request
/// from the events before it: a conversation request's digest is hashed through a
/// [`DigestCache`] (what is new since the previous request), a summarisation request's envelope
/// is written whole. With `bodies` it also checks every conversation request's provider body
/// as [`verify_bodies`] says. `progress` is called as records are read and once at the end;
/// `visit`, when given, with every event that passed the checks an open makes (for a reader
/// that wants something more of the log in the same pass).
pub fn verify_stream(
    records: &mut dyn RecordStream,
    bodies: Option<(Renderer, &RenderOptions)>,
    progress: &mut dyn FnMut(&VerifyProgress),
    mut visit: Option<&mut dyn FnMut(&Event)>,
    events: Option<&dyn Fn(u64) -> Option<Event>>,
) -> Result<VerifyReport> {
    use crate::log::load::{parse_header, record_head};
    use crate::log::rules::as_corrupt;
    let mut p = VerifyProgress { total_records: records.total_records(), total_bytes: records.total_bytes(), ..Default::default() };
    let Some((first, first_complete)) = records.next_record()? else {
        return Err(Error::new(ErrorKind::CorruptLog, "the store is empty: no session header"));
    };
    let mut next = records.next_record()?;
    if next.is_none() && !first_complete {
        return Err(Error::new(ErrorKind::CorruptLog, "line 1: the session header is incomplete").with("line", 1u64));
    }
    p.records = 1;
    p.bytes = first.len() as u64 + 1;
    let session = parse_header(&first)?;
    let mut link = session.chained().then(|| crate::log::chain::start(&first));
    drop(first);
    let mut cache = bodies.map(|(r, o)| BodyCache::new(r, RenderOptions { prefix_len: 0, ..o.clone() }));
    let mut walk = match events {
        Some(f) => RequestWalk::looking_up(&session, f),
        None => RequestWalk::new(&session),
    };
    let mut children = ChildLinks::default();
    let mut clock = crate::clock::LogCheck::default();
    let mut digests = DigestCache::default();
    let mut report = VerifyReport::default();
    let mut base: Option<Value> = None;
    let (mut reported_bytes, mut reported_records) = (0u64, 0u64);
    // The first request that does not rebuild: reported once the whole log has passed the
    // checks an open makes (damage, which those find, is reported first, as a reader that
    // checked the log before rebuilding anything would report it).
    let mut unrebuilt: Option<Error> = None;
    let mut index = 1usize;
    while let Some((rec, complete)) = next.take() {
        next = records.next_record()?;
        let line = index + 1;
        if next.is_none() && !complete {
            // A torn last record: left out, as an open leaves it out.
            break;
        }
        p.records += 1;
        p.bytes += rec.len() as u64 + 1;
        let seq = index as u64 - 1;
        let step = (|| -> std::result::Result<(), (Error, bool)> {
            let ev = crate::log::load::parse_event(&rec).map_err(|e| (e, true))?;
            if let Some(prev) = &link {
                let l = crate::log::chain::check(prev, &rec).map_err(|why| {
                    (
                        as_corrupt(Error::new(ErrorKind::CorruptLog, why).with("chain", true), line)
                            .context("the log was changed after it was written"),
                        false,
                    )
                })?;
                link = Some(l);
            }
            let effect = walk.log.state().check(&ev, seq).map_err(|e| (e, true))?;
            if unrebuilt.is_none() {
                let checks = Checks { children: &mut children, clock: &mut clock, digests: &mut digests, bodies: cache.as_mut() };
                if let Err(e) = checks.run(&mut walk, &ev, &mut report) {
                    unrebuilt = Some(e);
                }
            }
            let checkpoint = matches!(effect, crate::log::Effect::Checkpoint(_));
            walk.commit(&ev, effect);
            if checkpoint {
                check_restores(&ev, &mut base, walk.log.state(), line).map_err(|e| (e, false))?;
            }
            if let Some(v) = visit.as_mut() {
                v(&ev);
            }
            report.events += 1;
            Ok(())
        })();
        if let Err((e, damage)) = step {
            if !damage {
                return Err(e);
            }
            // Damage: an error before the last complete turn, else what an open would cut.
            let mut cut = 1u64;
            let mut later_turn = false;
            while let Some((r, c)) = next.take() {
                next = records.next_record()?;
                cut += 1;
                if (c || next.is_some()) && record_head(&r).is_some_and(|(ty, _)| ty == types::TURN_END) {
                    later_turn = true;
                }
            }
            if later_turn {
                return Err(as_corrupt(e, line).context("damage before the last complete turn"));
            }
            return Err(Error::new(
                ErrorKind::CorruptLog,
                format!("line {line}: {} (opening the log for writing would cut {cut} records from line {line})", e.message()),
            )
            .with("line", line as u64));
        }
        index += 1;
        if p.bytes - reported_bytes >= PROGRESS_BYTES || p.records - reported_records >= PROGRESS_RECORDS {
            (reported_bytes, reported_records) = (p.bytes, p.records);
            progress(&p);
        }
    }
    p.done = true;
    progress(&p);
    match unrebuilt {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Verifies the log a store holds ([`verify_stream`] over [`Store::record_stream`]: one record
/// at a time), reporting its progress as `verify-progress` observations (level debug;
/// `docs/observe.md`) and to `progress`. An empty store is `CorruptLog` ("not a session log").
pub fn verify_store(
    store: &mut dyn crate::store::Store,
    bodies: Option<(Renderer, &RenderOptions)>,
    progress: &mut dyn FnMut(&VerifyProgress),
    visit: Option<&mut dyn FnMut(&Event)>,
) -> Result<VerifyReport> {
    let describe = store.describe();
    let mut stream = store.record_stream()?;
    let lookup = StoreLookup::new(store);
    verify_observed(&mut stream, &describe, None, bodies, progress, visit, Some(&|seq| lookup.event(seq))).map_err(|e| {
        if e.message().starts_with("the store is empty") {
            Error::new(ErrorKind::CorruptLog, format!("{describe}: the store holds nothing: not a session log"))
        } else {
            e
        }
    })
}

/// [`verify_stream`], with each progress report also emitted as a `verify-progress`
/// observation about `store` (and `session`, when known).
pub(crate) fn verify_observed(
    records: &mut dyn RecordStream,
    store: &str,
    session: Option<&str>,
    bodies: Option<(Renderer, &RenderOptions)>,
    progress: &mut dyn FnMut(&VerifyProgress),
    visit: Option<&mut dyn FnMut(&Event)>,
    events: Option<&dyn Fn(u64) -> Option<Event>>,
) -> Result<VerifyReport> {
    use crate::observe::{emit, Level, Observation};
    verify_stream(
        records,
        bodies,
        &mut |p| {
            emit(Level::Debug, || {
                let of = match (p.total_bytes, p.total_records) {
                    (Some(t), _) if t > 0 => format!(" of {t} bytes ({:.0} %)", p.bytes as f64 * 100.0 / t as f64),
                    (_, Some(t)) if t > 0 => format!(" of {t} records ({:.0} %)", p.records as f64 * 100.0 / t as f64),
                    _ => String::new(),
                };
                let mut o = Observation::new(
                    "verify-progress",
                    Level::Debug,
                    format!("{store}: verify read {} records, {} bytes{of}{}", p.records, p.bytes, if p.done { ": done" } else { "" }),
                )
                .with("store", store)
                .with("records", p.records)
                .with("bytes", p.bytes)
                .with("done", p.done);
                if let Some(t) = p.total_records {
                    o = o.with("totalRecords", t);
                }
                if let Some(t) = p.total_bytes {
                    o = o.with("totalBytes", t);
                }
                if let Some(s) = session {
                    o = o.session(s.to_string());
                }
                o
            });
            progress(p);
        },
        visit,
        events,
    )
}

/// What [`verify_stream`] checks of an event beyond what an open checks, and the state those
/// checks keep across the log.
struct Checks<'c> {
    children: &'c mut ChildLinks,
    clock: &'c mut crate::clock::LogCheck,
    digests: &'c mut DigestCache,
    bodies: Option<&'c mut BodyCache>,
}

impl Checks<'_> {
    /// Checks `ev` (before the walk applies it): a native summary's text, a child's answer,
    /// the request it records, the clock's decision.
    fn run(self, walk: &mut RequestWalk<'_>, ev: &Event, report: &mut VerifyReport) -> Result<()> {
        let at = |walk: &RequestWalk<'_>, msg: String| {
            let (t, s) = walk.position();
            divergence(msg, ev, t, s)
        };
        check_native_content(walk, ev)?;
        self.children.check(ev).map_err(|msg| at(walk, msg))?;
        verify_request(walk, ev, self.digests, self.bodies, report)?;
        self.clock.check(ev, walk).map_err(|e| at(walk, e.message().to_string()))?;
        if ev.ty == types::CLOCK_DECISION {
            report.decisions += 1;
        }
        Ok(())
    }
}

/// Rebuilds the request `ev` records, if it records one, from the walk's state before it, and
/// compares it with what the log recorded.
fn verify_request(
    walk: &mut RequestWalk<'_>,
    ev: &Event,
    digests: &mut DigestCache,
    bodies: Option<&mut BodyCache>,
    report: &mut VerifyReport,
) -> Result<()> {
    let (turn, step) = walk.position();
    let at = |walk: &RequestWalk<'_>, e: Error| {
        let (t, s) = walk.position();
        divergence(e.message().to_string(), ev, t, s)
    };
    if bodies.is_none() {
        // A conversation request: its digest, hashed incrementally.
        if let Some((t, s, bytes, recorded, len, got)) = walk.conversation_digest(ev, digests).map_err(|e| at(walk, e))? {
            if got != recorded || len as u64 != bytes {
                return Err(divergence(
                    format!(
                        "turn {t} step {s} (seq {}): the request rebuilt from the log differs from the one sent (digest {got}, {len} bytes; recorded {recorded}, {bytes} bytes)",
                        ev.seq
                    ),
                    ev,
                    t,
                    s,
                )
                .with("recordedDigest", recorded)
                .with("rebuiltDigest", got));
            }
            report.requests += 1;
            return Ok(());
        }
    }
    let Some(r) = walk.rebuild(ev).map_err(|e| at(walk, e))? else { return Ok(()) };
    check_rebuilt(walk, ev, &r, (turn, step), bodies, report)
}

/// Compares a request rebuilt from the log ([`RequestWalk::rebuild`], at `ev`, the walk at
/// `turn`/`step` before it) with what the log recorded, checks its provider body against
/// `bodies` when given, and counts it in `report`.
fn check_rebuilt(
    walk: &RequestWalk<'_>,
    ev: &Event,
    r: &RecordedRequest,
    (turn, step): (u64, u64),
    bodies: Option<&mut BodyCache>,
    report: &mut VerifyReport,
) -> Result<()> {
    let got = digest(&r.envelope);
    match &r.kind {
        RecordedKind::Conversation { turn: t, step: s, bytes } => {
            let (t, s, bytes) = (*t, *s, *bytes);
            if !r.matches() {
                return Err(divergence(
                    format!(
                        "turn {t} step {s} (seq {}): the request rebuilt from the log differs from the one sent (digest {got}, {} bytes; recorded {}, {bytes} bytes)",
                        ev.seq,
                        r.envelope.len(),
                        r.recorded_digest
                    ),
                    ev,
                    t,
                    s,
                )
                .with("recordedDigest", r.recorded_digest.clone())
                .with("rebuiltDigest", got));
            }
            report.requests += 1;
            if let Some(cache) = bodies {
                check_body(cache, walk.log(), &r.header, walk.prefix(), walk.session_id_at(ev), &r.envelope, ev, t, s)?;
                report.bodies += 1;
            }
        }
        RecordedKind::NativeCompaction { .. } => {
            if !r.matches() {
                return Err(divergence(
                    format!(
                        "native compaction at seq {} (after turn {turn} step {step}): the request rebuilt from the log differs from the one sent (digest {got}; recorded {})",
                        ev.seq, r.recorded_digest
                    ),
                    ev,
                    turn,
                    step,
                ));
            }
            report.native_compactions += 1;
        }
        RecordedKind::Compaction { .. } | RecordedKind::Keepalive { .. } => {
            let compaction = matches!(r.kind, RecordedKind::Compaction { .. });
            if !r.matches() {
                let (what, request) =
                    if compaction { ("compaction", "the summarisation request") } else { ("keep-warm request", "the request") };
                return Err(divergence(
                    format!(
                        "{what} at seq {} (after turn {turn} step {step}): {request} rebuilt from the log differs from the one sent (digest {got}; recorded {})",
                        ev.seq, r.recorded_digest
                    ),
                    ev,
                    turn,
                    step,
                ));
            }
            if compaction {
                report.compactions += 1;
            } else {
                report.keepalives += 1;
            }
        }
    }
    Ok(())
}

/// Checks that the checkpoint `ev` (just applied) restores the state the log folds to:
/// [`crate::log::checkpoint::same_state`] between `state` and the state restored from the
/// checkpoint (with `base`, the data of the last full checkpoint, which this updates). The
/// surface after the carried part is the folded one's own entries (an open derives them from
/// the same events), so only the carried entries are compared by content.
fn check_restores(ev: &Event, base: &mut Option<Value>, state: &crate::log::LogState, line: usize) -> Result<()> {
    use crate::log::checkpoint;
    if checkpoint::is_full(&ev.data) {
        *base = Some(ev.data.clone());
    }
    let full = if checkpoint::is_full(&ev.data) { None } else { base.as_ref() };
    let restored = checkpoint::restore(ev, full, checkpoint::Surface::Folded(&state.history)).and_then(|r| {
        match checkpoint::same_state(&r, state, false) {
            None => Ok(()),
            Some(field) => Err(Error::new(
                ErrorKind::CorruptLog,
                format!("the checkpoint (seq {}) does not restore the state the log folds to: its {field} differs", ev.seq),
            )),
        }
    });
    restored.map_err(|e| crate::log::rules::as_corrupt(e, line))
}

#[cfg(test)]
mod keepalive_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_keepalive_config_keeps_every_cached_field_and_sets_only_the_output_limit() {
        let mut cfg = CallConfig::new("openai", "gpt-5");
        cfg.max_tokens = Some(4096);
        cfg.extra.insert("max_completion_tokens".into(), json!(9000));
        cfg.extra.insert("prompt_cache_key".into(), json!("k"));
        cfg.extra.insert("generationConfig".into(), json!({"maxOutputTokens": 5, "topK": 3}));
        let k = keepalive_config(&cfg, 1);
        assert_eq!(k.max_tokens, Some(1));
        assert!(!k.extra.contains_key("max_completion_tokens"));
        assert_eq!(k.extra["prompt_cache_key"], "k");
        assert_eq!(k.extra["generationConfig"], json!({"topK": 3}));
        assert_eq!((k.provider.as_str(), k.model.as_str()), ("openai", "gpt-5"));
    }
}
