//! Provider-native compaction (docs/compaction.md, "Native compaction"; docs/contract.md §10).
//!
//! Anthropic and OpenAI compact on their side and hand back a block (Anthropic's `compaction`
//! content block: readable `content`, and for on-demand compaction a `signature`) or an opaque
//! item (OpenAI's `compaction` item with `encrypted_content`). The library records it as a
//! compaction of its own kind, so the log stays the truth:
//!
//! ```text
//! compaction/start  {mechanism:"native", mode, format, provider, model, span, seqs, ...}
//! compaction/native {items: [the block or items, verbatim], format, mode, ..., usage?}
//! user/message      {source:"compaction", message: {role:"user", content: [opaque blocks]}}
//!                   (replaces exactly the span: the messages the provider summarised)
//! compaction/end    {outcome:"landed"}
//! ```
//!
//! Later requests derive the checkpoint in place of what it replaced, so they carry the block
//! first (the Anthropic renderer sends it as an assistant message of its own, ahead of the
//! session prefix's messages), byte for byte as it came.
//!
//! Two modes:
//! - **threshold**: the conversation requests carry the provider's threshold setting (Anthropic
//!   `context_management` edit `compact_20260112`, OpenAI Responses `context_management`
//!   compaction), added to the call config by [`threshold_field`] when the policy's mechanism
//!   resolves to native; an answer whose content holds a compaction block is recorded as the
//!   answer without the block, then the compaction, whose checkpoint replaces every message the
//!   request carried.
//! - **on-demand**: a request of its own ([`crate::Agent::native_compaction_request`]: Anthropic's
//!   `compaction` parameter, OpenAI's `POST /responses/compact`), answered later
//!   ([`crate::Agent::finish_native_compaction`]). The span is the history at the request;
//!   conversation requests go on meanwhile (background compaction) and the block replaces exactly
//!   that span when it lands.
//!
//! A block goes back only to the route that made it ([`route_format`]); on another route the
//! library first replaces it with a portable checkpoint ([`crate::Agent`]'s route fallback, run
//! before the gate): Anthropic's readable `content` becomes the checkpoint text, an opaque item
//! is summarised anew by the host's summariser from the messages it replaced (which the log
//! still holds).

use crate::error::{Error, ErrorKind, Result};
use crate::log::event::{types, Event};
use crate::log::history::derive;
use crate::log::Derived;
use crate::render::Renderer;
use crate::types::{Block, CallConfig, JsonMap, Message, Role};
use serde_json::{json, Value};
use std::sync::Arc;

/// The Anthropic beta flag of threshold compaction (`context_management` edit
/// `compact_20260112`), needed on every request that carries the edit or a threshold block.
pub const ANTHROPIC_THRESHOLD_BETA: &str = "compact-2026-01-12";

/// The Anthropic beta flag of on-demand compaction (the `compaction` parameter), needed on the
/// compaction request and on every later request that carries its signed block.
pub const ANTHROPIC_ON_DEMAND_BETA: &str = "compact-2026-09-04";

/// Anthropic's smallest threshold (`trigger.value`, input tokens): a policy's lower threshold is
/// sent as this.
pub const ANTHROPIC_MIN_TRIGGER: u64 = 50_000;

/// The Anthropic edit type of threshold compaction.
pub const ANTHROPIC_EDIT: &str = "compact_20260112";

/// The pass-through fields `POST /responses/compact` takes (besides `model`, `input` and
/// `instructions`); the config control `promptCacheOptions` is rendered as
/// `prompt_cache_options`.
pub const COMPACT_ENDPOINT_FIELDS: &[&str] = &["prompt_cache_key", "prompt_cache_retention", "service_tier", "promptCacheOptions"];

/// The item type every native compaction block or item has.
const COMPACTION: &str = "compaction";

/// Whether a body format has a native compaction.
pub fn has_native(format: Renderer) -> bool {
    matches!(format, Renderer::Anthropic | Renderer::OpenAiResponses)
}

/// The body format of a route: the agent's renderer when it has one, else the call config's
/// provider when it names a format (`"anthropic"`, `"openai-responses"`, ...). `None`: the
/// library cannot tell (a provider name such as `"openai"` alone does not say whether chat
/// completions or the Responses API is used; set a renderer).
pub fn route_format(renderer: Option<Renderer>, provider: &str) -> Option<Renderer> {
    renderer.or_else(|| Renderer::parse(provider).ok())
}

/// The provider item of a native compaction block: an opaque block of a format with native
/// compaction whose item has type `compaction`; with the format's name.
pub fn compaction_item(b: &Block) -> Option<(&str, &Value)> {
    if b.kind() != crate::render::origin::OPAQUE {
        return None;
    }
    let origin = crate::render::origin::origin_of(b)?;
    if !crate::log::rules::NATIVE_FORMATS.contains(&origin) {
        return None;
    }
    let item = b.get("item")?;
    (item.get("type").and_then(Value::as_str) == Some(COMPACTION)).then_some((origin, item))
}

/// What a native checkpoint message carries: the format of its items, and the items.
#[derive(Clone, Debug, PartialEq)]
pub struct NativeCheckpoint<'a> {
    /// The format (renderer name) of the provider that made it.
    pub format: &'a str,
    /// Its items, verbatim (exactly one of type `compaction`).
    pub items: Vec<&'a Value>,
}

impl NativeCheckpoint<'_> {
    /// The compaction item.
    pub fn compaction(&self) -> &Value {
        self.items.iter().find(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)).expect("a native checkpoint has one")
    }

    /// The summary a reader can use: Anthropic's `content` (a non-empty string); `None` for an
    /// opaque item.
    pub fn readable(&self) -> Option<&str> {
        readable_summary(self.format, self.compaction())
    }
}

/// The native checkpoint a message is: a user message whose blocks are all opaque blocks of one
/// format with native compaction, exactly one of them a compaction item. `None` for any other
/// message (a portable checkpoint among them).
pub fn native_checkpoint(m: &Message) -> Option<NativeCheckpoint<'_>> {
    if m.role != Role::User || m.content.is_empty() {
        return None;
    }
    let format = crate::render::origin::origin_of(&m.content[0])?;
    if !crate::log::rules::NATIVE_FORMATS.contains(&format) {
        return None;
    }
    let mut items = Vec::with_capacity(m.content.len());
    for b in &m.content {
        if b.kind() != crate::render::origin::OPAQUE || crate::render::origin::origin_of(b) != Some(format) {
            return None;
        }
        items.push(b.get("item")?);
    }
    let n = items.iter().filter(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)).count();
    (n == 1).then_some(NativeCheckpoint { format, items })
}

/// Whether a history entry is a native checkpoint (of any format); its message and the format.
pub fn entry_checkpoint(d: &Derived) -> Option<(Message, String)> {
    if !d.checkpoint || !d.json.contains("\"opaque\"") {
        return None;
    }
    let m = d.message();
    let format = native_checkpoint(&m)?.format.to_string();
    Some((m, format))
}

/// The readable summary of a compaction item: Anthropic's `content` when it is a non-empty
/// string. OpenAI's items are encrypted: `None`.
pub fn readable_summary<'a>(format: &str, item: &'a Value) -> Option<&'a str> {
    if format != Renderer::Anthropic.name() {
        return None;
    }
    item.get("content").and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

/// Why a compaction item carries no summary, when it does not: Anthropic's `content: null` (the
/// provider's summarisation failed; such a block round-trips as a no-op), OpenAI's missing
/// `encrypted_content`.
pub fn failed_item(format: &str, item: &Value) -> Option<&'static str> {
    if format == Renderer::Anthropic.name() {
        match item.get("content") {
            Some(Value::String(s)) if !s.trim().is_empty() => None,
            _ => Some("the provider's compaction block has no content (its summarisation failed; the block round-trips as a no-op)"),
        }
    } else {
        match item.get("encrypted_content") {
            Some(Value::String(s)) if !s.is_empty() => None,
            _ => Some("the provider's compaction item has no encrypted_content"),
        }
    }
}

/// The config field that asks a route of `format` to compact at `threshold` input tokens, in
/// the provider's spelling: Anthropic's `context_management: {"edits": [{"type":
/// "compact_20260112", "trigger": {"type": "input_tokens", "value": max(threshold, 50000)}}]}`,
/// OpenAI's `context_management: [{"type": "compaction", "compact_threshold": threshold}]`.
pub fn threshold_field(format: Renderer, threshold: u64) -> Option<(&'static str, Value)> {
    match format {
        Renderer::Anthropic => Some((
            "context_management",
            json!({"edits": [{"type": ANTHROPIC_EDIT, "trigger": {"type": "input_tokens", "value": threshold.max(ANTHROPIC_MIN_TRIGGER)}}]}),
        )),
        Renderer::OpenAiResponses => Some(("context_management", json!([{"type": COMPACTION, "compact_threshold": threshold}]))),
        _ => None,
    }
}

/// Whether an Anthropic item is an on-demand (signed) block: threshold compaction cannot run on
/// a request that carries one.
pub fn is_signed(item: &Value) -> bool {
    item.get("signature").is_some()
}

/// The Anthropic beta flags a request needs, from its config's extra fields and its first
/// history message: the threshold flag for the `compact_20260112` edit or an unsigned block,
/// the on-demand flag for a signed block. Empty for other formats. The library builds no HTTP
/// headers: the host sends these as `anthropic-beta` (docs/providers/anthropic.md).
pub fn anthropic_betas(format: Option<Renderer>, extra: &JsonMap, head: Option<&Message>) -> Vec<String> {
    if format != Some(Renderer::Anthropic) {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    let edits = extra.get("context_management").and_then(|c| c.get("edits")).and_then(Value::as_array);
    if edits.is_some_and(|e| e.iter().any(|e| e.get("type").and_then(Value::as_str) == Some(ANTHROPIC_EDIT))) {
        out.push(ANTHROPIC_THRESHOLD_BETA.into());
    }
    if let Some(cp) = head.and_then(native_checkpoint).filter(|c| c.format == Renderer::Anthropic.name()) {
        let flag = if is_signed(cp.compaction()) { ANTHROPIC_ON_DEMAND_BETA } else { ANTHROPIC_THRESHOLD_BETA };
        if !out.iter().any(|f| f == flag) {
            out.push(flag.into());
        }
    }
    out
}

/// An answer whose content holds a native compaction block, split (threshold mode): the blocks
/// before the (last) compaction block, which the provider drops; the block; the blocks after it,
/// which continue the turn.
#[derive(Clone, Debug)]
pub struct ThresholdSplit {
    /// The format of the block.
    pub format: String,
    /// The block's item, verbatim.
    pub item: Value,
    /// The answer's blocks before it.
    pub before: Vec<Block>,
    /// The answer's blocks after it.
    pub after: Vec<Block>,
}

/// Splits an answer at its last native compaction block; `None` when it has none.
pub fn split_threshold(message: &Message) -> Option<ThresholdSplit> {
    let at = message.content.iter().rposition(|b| compaction_item(b).is_some())?;
    let (format, item) = compaction_item(&message.content[at]).expect("found");
    Some(ThresholdSplit {
        format: format.to_string(),
        item: item.clone(),
        before: message.content[..at].to_vec(),
        after: message.content[at + 1..].to_vec(),
    })
}

/// The checkpoint message of a native compaction: one opaque block of `format` per item.
pub fn checkpoint_message(format: &str, items: &[Value]) -> Message {
    let content = items.iter().map(|it| crate::render::origin::opaque(format, it.clone())).collect();
    Message::new(Role::User, content)
}

/// The messages a native checkpoint stands for, for a portable summary of the same span: the
/// events `seqs` name (looked up with `event`), each projected as the history derives it, and a
/// native checkpoint among them replaced, recursively, by what it replaced. Portable
/// checkpoints stay (they are text any provider reads).
pub fn expand(seqs: &[u64], event: &dyn Fn(u64) -> Option<Event>) -> Result<Vec<Arc<Derived>>> {
    let mut out = Vec::new();
    expand_into(seqs, event, &mut out, 0)?;
    Ok(out)
}

fn expand_into(seqs: &[u64], event: &dyn Fn(u64) -> Option<Event>, out: &mut Vec<Arc<Derived>>, depth: usize) -> Result<()> {
    if depth > 64 {
        return Err(Error::new(ErrorKind::Internal, "native checkpoints nest more than 64 deep"));
    }
    for &seq in seqs {
        let ev = event(seq).ok_or_else(|| {
            Error::new(ErrorKind::Reconstruction, format!("seq {seq}: the event a native checkpoint replaced is not in the log"))
        })?;
        let d = derive(&ev)?.ok_or_else(|| Error::new(ErrorKind::Reconstruction, format!("seq {seq} is not a model-visible event")))?;
        let nested = (ev.ty == types::USER_MESSAGE).then(|| entry_checkpoint(&d)).flatten().and_then(|_| ev.sources.clone());
        match nested {
            Some(sources) => expand_into(&sources, event, out, depth + 1)?,
            None => out.push(Arc::new(d)),
        }
    }
    Ok(())
}

/// The usage of a compaction from Anthropic's `usage.iterations` (the entries of type
/// `compaction`, summed), when the provider reported them.
pub fn iteration_usage(usage: &Value) -> Option<crate::types::Usage> {
    let its = usage.get("iterations")?.as_array()?;
    let mut found = false;
    let mut u = crate::types::Usage::default();
    for it in its.iter().filter(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)) {
        found = true;
        u.input_tokens += it.get("input_tokens").and_then(Value::as_u64).unwrap_or(0);
        u.output_tokens += it.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
        if let Some(c) = it.get("cache_read_input_tokens").and_then(Value::as_u64) {
            *u.cache_read_tokens.get_or_insert(0) += c;
        }
        if let Some(c) = it.get("cache_creation_input_tokens").and_then(Value::as_u64) {
            *u.cache_write_tokens.get_or_insert(0) += c;
        }
    }
    found.then_some(u)
}

/// Refuses `previous_response_id` on a Responses route that compacts natively: the library drops
/// what a compaction item replaced, which the provider's documentation forbids with
/// `previous_response_id` chaining (the library's Responses requests are stateless anyway).
pub fn check_config(format: Option<Renderer>, config: &CallConfig) -> Result<()> {
    if format == Some(Renderer::OpenAiResponses) && config.extra.contains_key("previous_response_id") {
        return Err(Error::invalid(
            "config.previous_response_id",
            "cannot be combined with native compaction: the library drops what a compaction item replaced, which the Responses API forbids with previous_response_id chaining (its requests are stateless: leave the field out)",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The agent's side: the threshold field, threshold answers, on-demand requests, route changes.

/// A native compaction request built for the host to send (`Agent::native_compaction_request`).
/// Its JSON (`Serialize`) is what `lls_agent_native_compaction_begin` returns: `{"format",
/// "endpoint", "betas", "envelope", "body", "digest", "span": [start, end], "seqs",
/// "messageCount", "sharedMessages"}`; `envelope` and `body` are JSON texts (the envelope's
/// bytes are what its digest covers; `body` is what to POST to `endpoint`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeRequest {
    /// The body format (`"anthropic"` or `"openai-responses"`).
    pub format: String,
    /// Where to POST the body: `/v1/messages` or `/v1/responses/compact`.
    pub endpoint: String,
    /// The Anthropic beta flags the request needs (`anthropic-beta`); empty for OpenAI.
    pub betas: Vec<String>,
    /// The request envelope (`purpose: "native-compaction"`), canonical JSON.
    pub envelope: String,
    /// The provider body rendered from it.
    pub body: String,
    /// The envelope's digest, as `compaction/start` records it.
    pub digest: String,
    /// The surface span the block will replace (the whole history at the request).
    pub span: [usize; 2],
    /// The seqs of that span.
    pub seqs: Vec<u64>,
    /// Messages in the request (session prefix and history).
    pub message_count: usize,
    /// Leading messages shared with the last routed request.
    pub shared_messages: usize,
}

/// How a native compaction ended (`Agent::finish_native_compaction`, `Agent::fail_native_compaction`):
/// JSON `{"outcome": "landed" | "failed", "format", "span": [start, end], "seqs", "error"?,
/// "stopReason"?}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeOutcome {
    /// `landed` (the block replaced the span) or `failed` (the history is as it was).
    pub outcome: super::Outcome,
    /// The body format.
    pub format: String,
    /// The span it replaced (or would have).
    pub span: [usize; 2],
    /// The seqs of that span.
    pub seqs: Vec<u64>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The provider's stop reason, when the answer had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// What a route change's portable summary is built from (see `Agent::run_compaction`).
pub(crate) struct Expansion {
    /// The seqs the native checkpoint replaced (recorded as `expanded`).
    pub seqs: Vec<u64>,
    /// Their messages, native checkpoints among them expanded.
    pub entries: Vec<Arc<Derived>>,
    /// The new route's header.
    pub header: crate::header::EpochHeader,
    /// Its snapshot, when one is owed before the summarisation request.
    pub snapshot: Option<crate::header::HeaderSnapshot>,
    /// Tokens of the expanded messages.
    pub tokens: u64,
    /// `compaction/start` fields saying what was replaced and why.
    pub note: JsonMap,
}

/// What the answer to an on-demand request was.
enum Answer {
    Block(Box<Landing>),
    Rejected { why: String, stop_reason: Option<String> },
}

/// An answer with the block: what `compaction/native` keeps of it.
struct Landing {
    items: Vec<Value>,
    usage: Option<Usage>,
    provider_usage: Option<Value>,
    stop_reason: Option<String>,
    response_id: Option<String>,
}

/// The native compaction request in flight: its `compaction/start` data, its span and seqs, its
/// format.
struct InFlight {
    start: Value,
    span: (usize, usize),
    seqs: Vec<u64>,
    format: String,
}

use super::{CompactionPolicy, Mechanism, Outcome, Trigger};
use crate::agent::Agent;
use crate::cancel::CancelToken;
use crate::header::HeaderSnapshot;
use crate::log::event::{NewEvent, UserSource};
use crate::log::rules::LogState;
use crate::log::Log;
use crate::observe::{self, Level, Observation};
use crate::prefix::context_event;
use crate::render::{parse_response, RenderOptions};
use crate::request::{digest, native_compaction_config, native_compaction_envelope, PrefixBytes};
use crate::tokens::Countable;
use crate::types::Usage;

/// The events of a native checkpoint replacing `0..=end` (`seqs`).
fn checkpoint_event(format: &str, items: &[Value], end: usize, seqs: &[u64]) -> Result<NewEvent> {
    let ev = context_event(checkpoint_message(format, items), UserSource::Compaction)?;
    Ok(NewEvent { surface_op: Some(crate::log::SurfaceOp::Replace { start: 0, end }), sources: Some(seqs.to_vec()), ..ev })
}

/// The threshold compaction an answer carries, as the events that record it after the step's
/// `step/end` (`message` loses the block and what came before it when it lands): `None` when the
/// answer holds no native compaction block, or when it cannot be recorded as one (the request
/// carried no history: the answer is then kept whole, and the block goes back with it). A
/// native compaction request in flight is superseded (its block would summarise less than this
/// one) and failed first.
pub(crate) fn threshold_events(
    st: &LogState,
    message: &mut Message,
    usage: Option<&Usage>,
    provider: &str,
    model: &str,
    turn: u64,
    step: u64,
) -> Result<Option<Vec<NewEvent>>> {
    let Some(split) = split_threshold(message) else { return Ok(None) };
    let entries = st.history.entries();
    let in_flight = st.compaction.as_ref().is_some_and(|c| c.in_background() && !c.landed);
    if (st.compaction.is_some() && !in_flight) || entries.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    if in_flight {
        out.push(NewEvent::new(
            types::COMPACTION_END,
            json!({"outcome": "failed", "error": "superseded by the provider's threshold compaction in a conversation answer",
                   "next": "the threshold compaction replaced the history instead"}),
        ));
    }
    let end = entries.len() - 1;
    let seqs: Vec<u64> = entries.iter().map(|d| d.seq).collect();
    let mut start = json!({
        "mechanism": "native", "mode": "threshold", "trigger": "provider", "format": split.format,
        "span": {"start": 0, "end": end}, "seqs": seqs, "provider": provider, "model": model, "turn": turn, "step": step,
    });
    if let Some(why) = failed_item(&split.format, &split.item) {
        // Kept in the answer, verbatim (it round-trips as a no-op); the history stays whole.
        start["note"] = "the block stays in the answer".into();
        let end_ev = json!({"outcome": "failed", "error": why, "next": "kept the whole history and the block in the answer"});
        out.extend([NewEvent::new(types::COMPACTION_START, start), NewEvent::new(types::COMPACTION_END, end_ev)]);
        return Ok(Some(out));
    }
    let mut native = json!({
        "format": split.format, "mode": "threshold", "provider": provider, "model": model,
        "items": [split.item], "span": {"start": 0, "end": end}, "seqs": seqs,
    });
    if let Some(t) = readable_summary(&split.format, &split.item) {
        native["summary"] = t.into();
    }
    if !split.before.is_empty() {
        native["before"] = Value::Array(split.before.iter().map(|b| b.clone().into_value()).collect());
    }
    if let Some(u) = usage.and_then(|u| u.extra.get("iterations").map(|i| json!({"iterations": i}))).and_then(|u| iteration_usage(&u)) {
        native["usage"] = serde_json::to_value(u).expect("usage serialises");
    }
    let cp = checkpoint_event(&split.format, std::slice::from_ref(&split.item), end, &seqs)?;
    message.content = split.after;
    out.extend([
        NewEvent::new(types::COMPACTION_START, start),
        NewEvent::new(types::COMPACTION_NATIVE, native),
        cp,
        NewEvent::new(types::COMPACTION_END, json!({"outcome": "landed"})),
    ]);
    Ok(Some(out))
}

/// Classifies an on-demand answer of `format` (the body as JSON).
fn classify(format: &str, body: &Value) -> Result<Answer> {
    if let Some(why) = crate::render::response::error_answer(body) {
        return Ok(Answer::Rejected { why: format!("the provider answered with an error: {why}"), stop_reason: None });
    }
    if format == Renderer::Anthropic.name() {
        let raw_stop = body.get("stop_reason").and_then(Value::as_str).map(str::to_string);
        let parsed = parse_response(Renderer::Anthropic, body).map_err(|e| e.context("a native compaction answer"))?;
        let blocks: Vec<&Value> = parsed.message.content.iter().filter_map(|b| compaction_item(b).map(|(_, i)| i)).collect();
        if raw_stop.as_deref() != Some("compaction") {
            let why = match raw_stop.as_deref() {
                Some("max_tokens") => "no summary: it was cut by the output limit (ask again with a larger maxTokens)",
                Some("model_context_window_exceeded") => "no summary: there was no room for the summarisation prompt",
                Some("tool_use") => "no summary: the model called a tool instead of writing it",
                Some("refusal") => "no summary: the request was declined",
                Some("end_turn") => "no summary: the call returned no text",
                _ => "no summary: the answer's stop_reason is not \"compaction\"",
            };
            return Ok(Answer::Rejected { why: why.into(), stop_reason: raw_stop });
        }
        let item = match blocks.as_slice() {
            [one] => (*one).clone(),
            other => {
                return Ok(Answer::Rejected {
                    why: format!("the answer holds {} compaction blocks, expected exactly one", other.len()),
                    stop_reason: raw_stop,
                })
            }
        };
        if let Some(why) = failed_item(format, &item) {
            return Ok(Answer::Rejected { why: why.into(), stop_reason: raw_stop });
        }
        let provider_usage = body.get("usage").cloned();
        let usage = provider_usage.as_ref().and_then(iteration_usage).or(parsed.usage);
        let response_id = body.get("id").and_then(Value::as_str).map(str::to_string);
        return Ok(Answer::Block(Box::new(Landing { items: vec![item], usage, provider_usage, stop_reason: raw_stop, response_id })));
    }
    let (items, usage, response_id) = crate::render::parse_compacted(body)?;
    let n = items.iter().filter(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)).count();
    if n != 1 {
        return Ok(Answer::Rejected {
            why: format!("the compacted window holds {n} compaction items, expected exactly one"),
            stop_reason: None,
        });
    }
    let item = items.iter().find(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)).expect("one");
    if let Some(why) = failed_item(format, item) {
        return Ok(Answer::Rejected { why: why.into(), stop_reason: None });
    }
    Ok(Answer::Block(Box::new(Landing { items, usage, provider_usage: body.get("usage").cloned(), stop_reason: None, response_id })))
}

impl Agent {
    /// The body format of this agent's route: its renderer when it has one, else the config's
    /// provider when it names a format (see [`route_format`]).
    pub fn route_format(&self) -> Option<Renderer> {
        route_format(self.body.as_ref().map(|b| b.renderer()), &self.options.config.provider)
    }

    /// The native format `policy`'s mechanism resolves to on this route, if any.
    pub(crate) fn native_format(&self, policy: &CompactionPolicy) -> Option<Renderer> {
        match policy.mechanism {
            Mechanism::Portable => None,
            Mechanism::Native | Mechanism::Auto => self.route_format().filter(|r| has_native(*r)),
        }
    }

    /// Adds the provider's threshold setting to `config` when the policy's mechanism resolves to
    /// native on this route: unless the host set `context_management` itself, a native
    /// compaction request is in flight (its block will replace the history), or (Anthropic) the
    /// history starts with a signed on-demand block (threshold compaction cannot run on a
    /// request that carries one).
    pub(crate) fn add_threshold_field(&self, config: &mut CallConfig, log: &Log) {
        let Some(policy) = self.current_policy() else { return };
        let Some(format) = self.native_format(&policy) else { return };
        if config.extra.contains_key("context_management") {
            return;
        }
        let st = log.state();
        if st.compaction.as_ref().is_some_and(|c| c.in_background()) {
            return;
        }
        if format == Renderer::Anthropic {
            let signed = st
                .history
                .entries()
                .first()
                .and_then(|d| entry_checkpoint(d))
                .is_some_and(|(m, f)| f == format.name() && native_checkpoint(&m).is_some_and(|c| is_signed(c.compaction())));
            if signed {
                return;
            }
        }
        if let Some((k, v)) = threshold_field(format, policy.threshold_tokens()) {
            config.extra.insert(k.into(), v);
        }
    }

    /// The gate's native part: `true` when the portable compaction must not run now, because the
    /// provider compacts (the mechanism resolves to native), the mechanism is native on a route
    /// without it (nothing is compacted; said to the observer), or a native compaction request
    /// is in flight (its block will replace the history; said to the observer).
    pub(crate) fn native_gate(&self, policy: &CompactionPolicy, turn: u64) -> bool {
        let in_flight = self.session.with_log(|l| l.state().compaction.as_ref().is_some_and(|c| c.in_background()));
        let skip = |why: String| {
            observe::emit(Level::Info, || {
                Observation::new("compaction-skipped", Level::Info, format!("the gate does not compact: {why}"))
                    .session(self.session.id())
                    .with("why", why.clone())
                    .with("mechanism", policy.mechanism.as_str())
                    .with("turn", turn)
            });
        };
        if in_flight {
            skip("a native compaction request is in flight; its block will replace the history".into());
            return true;
        }
        if self.native_format(policy).is_some() {
            return true;
        }
        if policy.mechanism == Mechanism::Native {
            let route = self.route_format().map_or("unknown (set a renderer)", |r| r.name());
            skip(format!("the policy's mechanism is native, and the route's format ({route}) has no native compaction"));
            return true;
        }
        false
    }

    /// `OutOfOrder` while a native compaction request is in flight (`what` is being refused).
    pub(crate) fn check_no_native_in_flight(&self, what: &str) -> Result<()> {
        if self.session.with_log(|l| l.state().compaction.as_ref().is_some_and(|c| c.in_background())) {
            return Err(Error::out_of_order(format!(
                "cannot {what} while a native compaction request is in flight: finish it (record its answer) or fail it first"
            )));
        }
        Ok(())
    }

    /// Builds a native compaction request for this route (Anthropic's on-demand compaction,
    /// OpenAI's `POST /responses/compact`) over the whole history, and writes its
    /// `compaction/start`. The host sends it (now or in the background: conversation requests
    /// may go on meanwhile) and hands the answer to
    /// [`finish_native_compaction`](Self::finish_native_compaction), or reports a failure with
    /// [`fail_native_compaction`](Self::fail_native_compaction). The block then replaces exactly
    /// the messages this request carried; turns taken meanwhile stay after it.
    ///
    /// Errors (each changes nothing): `InvalidInput` (field `route`: the route's format has no
    /// native compaction; `config.previous_response_id`), `OutOfOrder` (a request or a tool call
    /// is open, a compaction is open, the history is empty, no request was built yet),
    /// `Storage`/`Conflict` (the store refused the start).
    pub fn native_compaction_request(&mut self) -> Result<NativeRequest> {
        self.ensure_live()?;
        let format = self.route_format().filter(|r| has_native(*r)).ok_or_else(|| {
            let route = self.route_format().map_or("unknown (set a renderer, or name the format as the provider)", |r| r.name());
            Error::invalid("route", format!("the route's format, {route}, has no native compaction (anthropic and openai-responses have)"))
        })?;
        let frozen = self.frozen.as_ref().ok_or_else(|| {
            Error::out_of_order("no request was built yet, so the session prefix is not composed: ask for a request first")
        })?;
        let budget = self.current_policy().map_or(8192, |p| p.summary_max_tokens);
        let mut g = self.session.lock();
        let st = g.log.state();
        if st.open_turn.as_ref().is_some_and(|t| t.step_open) {
            return Err(Error::out_of_order("a request is open: ask for a native compaction between steps"));
        }
        if let Some(p) = st.pending.first() {
            return Err(Error::out_of_order(format!("tool call {:?} has no result yet (the provider refuses to compact before it)", p.id)));
        }
        if st.compaction.is_some() {
            return Err(Error::out_of_order("a compaction is already open: finish or fail it first"));
        }
        let entries = st.history.entries();
        if entries.is_empty() {
            return Err(Error::new(ErrorKind::NothingToCompact, "the history is empty: nothing to compact"));
        }
        let header = match st.headers.current() {
            Some(h) => h.clone(),
            None => return Err(Error::out_of_order("no request was routed yet: ask for a request first")),
        };
        check_config(Some(format), &header.config)?;
        let prefix = if frozen.bytes.is_for(header.message_prefix.as_ref()) {
            frozen.bytes.clone()
        } else {
            PrefixBytes::of(header.message_prefix.as_ref())
        };
        let config = native_compaction_config(&header.config, format, budget);
        let envelope = native_compaction_envelope(&header, &config, format, &prefix, entries, g.header.request_id());
        let d = digest(&envelope);
        let envelope = String::from_utf8(envelope).expect("an envelope is text");
        let options = match &self.body {
            Some(b) if b.renderer() == format => b.options().clone(),
            _ => RenderOptions::default(),
        };
        let v: Value = serde_json::from_str(&envelope).expect("an envelope is JSON");
        let body = format.render(&v, &RenderOptions { prefix_len: prefix.messages.len(), ..options })?;
        let body = serde_json::to_string(&body).expect("a body serialises");
        let mut betas = anthropic_betas(Some(format), &config.extra, entries.first().map(|d| d.message()).as_ref());
        if format == Renderer::Anthropic && !betas.iter().any(|b| b == ANTHROPIC_ON_DEMAND_BETA) {
            betas.push(ANTHROPIC_ON_DEMAND_BETA.into());
        }
        let end = entries.len() - 1;
        let seqs: Vec<u64> = entries.iter().map(|d| d.seq).collect();
        let shared = match super::last_step_seq(&g.log) {
            None => 0,
            Some(routed) => prefix.messages.len() + entries.iter().take_while(|d| d.seq < routed).count(),
        };
        let message_count = prefix.messages.len() + entries.len();
        let mut start = json!({
            "mechanism": "native", "mode": "on-demand", "trigger": "manual", "format": format.name(),
            "span": {"start": 0, "end": end}, "seqs": seqs, "provider": config.provider, "model": config.model,
            "requestDigest": d, "sharedMessages": shared, "messageCount": message_count,
        });
        if let Some(m) = config.max_tokens {
            start["maxTokens"] = m.into();
        }
        g.append(NewEvent::new(types::COMPACTION_START, start))?;
        drop(g);
        let endpoint = if format == Renderer::Anthropic { "/v1/messages" } else { "/v1/responses/compact" };
        Ok(NativeRequest {
            format: format.name().into(),
            endpoint: endpoint.into(),
            betas,
            envelope,
            body,
            digest: d,
            span: [0, end],
            seqs,
            message_count,
            shared_messages: shared,
        })
    }

    /// The open native compaction request: its `compaction/start` data and span.
    fn open_native(&self, log: &Log) -> Result<InFlight> {
        let c = log
            .state()
            .compaction
            .as_ref()
            .filter(|c| c.in_background())
            .ok_or_else(|| Error::out_of_order("no native compaction request is in flight (native_compaction_request starts one)"))?;
        let start = log.event(c.start_seq).map(|e| e.data).unwrap_or(Value::Null);
        let format = c.native.as_ref().expect("native").format.clone();
        Ok(InFlight { start, span: c.span, seqs: c.seqs.clone(), format })
    }

    /// Records the provider's answer to the native compaction request in flight (the raw body of
    /// `/v1/messages` or `/v1/responses/compact`). An answer with the compaction block (Anthropic:
    /// `stop_reason: "compaction"` and one `compaction` block with content; OpenAI: a compacted
    /// window with one `compaction` item) lands: `compaction/native` keeps it verbatim, and a
    /// checkpoint carrying it replaces exactly the span the request held. Any other answer (an
    /// error answer, another stop reason, no block, a block without content) is a failed
    /// attempt, logged with why (`compaction/end{failed}`); the history stays whole.
    ///
    /// Errors (each changes nothing; the request stays in flight): `OutOfOrder` (none is in
    /// flight; a conversation request is open: record the answer after its response),
    /// `MalformedJson`, `InvalidInput` (a body of another shape, naming the field),
    /// `Storage`/`Conflict`.
    pub fn finish_native_compaction(&mut self, body: &str) -> Result<NativeOutcome> {
        self.ensure_live()?;
        let v: Value = serde_json::from_str(body)?;
        let mut g = self.session.lock();
        let InFlight { start, span, seqs, format } = self.open_native(&g.log)?;
        if g.log.state().open_turn.as_ref().is_some_and(|t| t.step_open) {
            return Err(Error::out_of_order(
                "a request is open: record the native compaction's answer after the response (the swap goes into the next request)",
            ));
        }
        let answer = classify(&format, &v)?;
        let out = |outcome, error, stop_reason| NativeOutcome {
            outcome,
            format: format.clone(),
            span: [span.0, span.1],
            seqs: seqs.clone(),
            error,
            stop_reason,
        };
        match answer {
            Answer::Rejected { why, stop_reason } => {
                let mut data = json!({"outcome": "failed", "error": why, "next": "kept the whole history; ask again later"});
                if let Some(s) = &stop_reason {
                    data["stopReason"] = s.clone().into();
                }
                g.append(NewEvent::new(types::COMPACTION_END, data))?;
                Ok(out(Outcome::Failed, Some(why), stop_reason))
            }
            Answer::Block(landing) => {
                let Landing { items, usage, provider_usage, stop_reason, response_id } = *landing;
                let mut native = json!({
                    "format": format, "mode": "on-demand", "provider": start["provider"], "model": start["model"],
                    "items": items, "span": {"start": span.0, "end": span.1}, "seqs": seqs,
                });
                let compaction = items.iter().find(|i| i.get("type").and_then(Value::as_str) == Some(COMPACTION)).expect("classified");
                if let Some(t) = readable_summary(&format, compaction) {
                    native["summary"] = t.into();
                }
                if let Some(u) = &usage {
                    native["usage"] = serde_json::to_value(u).expect("usage serialises");
                }
                if let Some(u) = provider_usage {
                    native["providerUsage"] = u;
                }
                if let Some(s) = &stop_reason {
                    native["stopReason"] = s.clone().into();
                }
                if let Some(id) = response_id {
                    native["responseId"] = id.into();
                }
                let batch = vec![
                    NewEvent::new(types::COMPACTION_NATIVE, native),
                    checkpoint_event(&format, &items, span.1, &seqs)?,
                    NewEvent::new(types::COMPACTION_END, json!({"outcome": "landed"})),
                ];
                g.append_batch(batch)?;
                drop(g);
                self.stats.compactions += 1;
                Ok(out(Outcome::Landed, None, stop_reason))
            }
        }
    }

    /// Reports that the native compaction request in flight failed (a transport error, a
    /// timeout, a provider error status): `compaction/end{failed, error}`; the history stays
    /// whole. Errors: `OutOfOrder` (none is in flight), `Storage`/`Conflict`.
    pub fn fail_native_compaction(&mut self, error: &str) -> Result<NativeOutcome> {
        self.ensure_live()?;
        let mut g = self.session.lock();
        let InFlight { span, seqs, format, .. } = self.open_native(&g.log)?;
        let why = if error.trim().is_empty() { "the native compaction request failed".to_string() } else { error.to_string() };
        g.append(NewEvent::new(
            types::COMPACTION_END,
            json!({"outcome": "failed", "error": why, "next": "kept the whole history; ask again later"}),
        ))?;
        Ok(NativeOutcome { outcome: Outcome::Failed, format, span: [span.0, span.1], seqs, error: Some(why), stop_reason: None })
    }

    /// Before a request on a route that cannot read the native block the history starts with:
    /// replaces it with a portable checkpoint (its readable text, or a portable summary of what
    /// it replaced, asked of the summariser), logging what was done and why. A native compaction
    /// request still in flight from the old route is failed first (its block could not be read
    /// here either). Also refuses `previous_response_id` with native compaction on a Responses
    /// route. A summary that cannot be had fails the call (`Summariser`): the request is not
    /// built, since it would go out without the summarised context.
    pub(crate) fn native_fallback(&mut self, op: &CancelToken) -> Result<()> {
        let route = self.route_format();
        let (checkpoint, in_flight) = self.session.with_log(|l| {
            let st = l.state();
            let cp = st.history.entries().first().and_then(|d| entry_checkpoint(d).map(|(m, f)| (d.seq, m, f)));
            (cp, st.compaction.as_ref().filter(|c| c.in_background()).and_then(|c| c.native.as_ref().map(|n| n.format.clone())))
        });
        let native_here = checkpoint.is_some() || self.current_policy().is_some_and(|p| self.native_format(&p).is_some());
        if native_here {
            check_config(route, &self.options.config)?;
        }
        let recorded_provider = checkpoint.as_ref().and_then(|(cp_seq, _, _)| {
            self.session.with_log(|l| {
                l.event(cp_seq.saturating_sub(1))
                    .filter(|e| e.ty == types::COMPACTION_NATIVE)
                    .and_then(|e| e.data.get("provider").and_then(Value::as_str).map(str::to_string))
            })
        });
        // Whether the route reads blocks of `format`: the same format, or (a route whose format
        // the library cannot tell) the provider that made the block.
        let reads = |format: &str, provider: Option<&str>| match route {
            Some(r) => r.name() == format,
            None => provider.is_none_or(|p| p == self.options.config.provider),
        };
        let fallback = checkpoint.as_ref().is_some_and(|(_, _, f)| !reads(f, recorded_provider.as_deref()));
        // A request in flight whose block this route could not read, or that a fallback would
        // race with, is failed.
        if let Some(f) = in_flight.filter(|f| fallback || !reads(f, None)) {
            let to = route.map_or_else(|| self.options.config.provider.clone(), |r| r.name().to_string());
            self.fail_native_compaction(&format!("the route changed from {f} to {to}, which cannot read its block"))?;
        }
        let Some((cp_seq, message, format)) = checkpoint.filter(|_| fallback) else { return Ok(()) };
        let readable = native_checkpoint(&message).and_then(|c| c.readable().map(str::to_string));
        let to = route.map_or_else(|| self.options.config.provider.clone(), |r| r.name().to_string());
        let reason =
            format!("the route changed from {format} to {to}, which cannot read the {format} compaction block the history starts with");
        let (from_provider, from_model) = self.session.with_log(|l| {
            let e = l.event(cp_seq.saturating_sub(1)).filter(|e| e.ty == types::COMPACTION_NATIVE);
            let s = |k: &str| e.as_ref().and_then(|e| e.data.get(k).and_then(Value::as_str).map(str::to_string)).unwrap_or_default();
            (s("provider"), s("model"))
        });
        let mut note = JsonMap::new();
        note.insert("reason".into(), reason.clone().into());
        note.insert("from".into(), format.clone().into());
        note.insert("to".into(), to.clone().into());
        observe::emit(Level::Info, || {
            Observation::new("native-fallback", Level::Info, format!("{reason}: replacing it with a portable checkpoint"))
                .session(self.session.id())
                .with("from", format.clone())
                .with("to", to.clone())
                .with("readable", readable.is_some())
        });
        match readable {
            Some(text) => self.land_readable(cp_seq, &text, note, &from_provider, &from_model),
            None => {
                let policy = self.current_policy().unwrap_or_else(CompactionPolicy::unbounded);
                let (sources, entries, header, snapshot) = {
                    let mut g = self.session.lock();
                    let sources = g.event_at(cp_seq)?.and_then(|e| e.sources).unwrap_or_default();
                    let entries = {
                        let lookup = g.event_lookup();
                        expand(&sources, &|s| lookup.event(s))?
                    };
                    let header = self.wanted_header_in(&g.log);
                    let reason = self.snapshot_owed(g.log.state().headers.current(), &header);
                    let snapshot = reason.map(|reason| HeaderSnapshot { header: header.clone(), reason, instance: self.instance });
                    (sources, entries, header, snapshot)
                };
                let counter = self.counter_or_default();
                let mut tokens = 0u64;
                for d in &entries {
                    tokens += counter.count(Countable::Message(&d.message())).map_err(|e| self.interrupted(e))?;
                }
                let x = Expansion { seqs: sources, entries, header, snapshot, tokens, note };
                let region = super::Region { start: 0, end: 0, seqs: vec![cp_seq] };
                let out = self.run_compaction(
                    Trigger::RouteChange,
                    region,
                    &crate::tokens::meter::Measure::default(),
                    &policy,
                    op,
                    Some(x),
                    None,
                )?;
                match out.outcome {
                    Outcome::Landed => Ok(()),
                    _ => Err(Error::new(
                        ErrorKind::Summariser,
                        format!(
                            "{reason}, and a portable summary of what it replaced could not be had: {} (the request was not built; set a summariser, or go back to the {format} route)",
                            out.error.unwrap_or_else(|| out.outcome.to_string())
                        ),
                    )),
                }
            }
        }
    }

    /// Replaces the native checkpoint at `cp_seq` (surface position 0) with a portable one made
    /// of its readable summary.
    fn land_readable(&mut self, cp_seq: u64, text: &str, note: JsonMap, provider: &str, model: &str) -> Result<()> {
        let mut start = json!({
            "trigger": Trigger::RouteChange.as_str(), "span": {"start": 0, "end": 0}, "seqs": [cp_seq],
            "provider": provider, "model": model,
        });
        for (k, v) in note {
            start[k.as_str()] = v;
        }
        let summary = json!({
            "summary": text.trim(), "span": {"start": 0, "end": 0}, "seqs": [cp_seq], "provider": provider, "model": model,
            "raw": text, "source": "native-content",
        });
        let cp = context_event(Message::user_text(super::checkpoint_text(text)), UserSource::Compaction)?;
        let cp = NewEvent { surface_op: Some(crate::log::SurfaceOp::Replace { start: 0, end: 0 }), sources: Some(vec![cp_seq]), ..cp };
        let mut g = self.session.lock();
        let mut batch: Vec<NewEvent> = crate::agent::stale_compaction_end(&g.log).into_iter().collect();
        batch.extend([
            NewEvent::new(types::COMPACTION_START, start),
            NewEvent::new(types::COMPACTION_SUMMARY, summary),
            cp,
            NewEvent::new(types::COMPACTION_END, json!({"outcome": "landed"})),
        ]);
        g.append_batch(batch)?;
        drop(g);
        self.stats.compactions += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(v: Value) -> Block {
        Block::from_value(&v, "").unwrap()
    }

    #[test]
    fn compaction_items_are_opaque_blocks_of_a_native_format() {
        let a = block(json!({"type":"opaque","origin":"anthropic","item":{"type":"compaction","content":"s"}}));
        assert_eq!(compaction_item(&a).map(|(f, _)| f), Some("anthropic"));
        let o = block(json!({"type":"opaque","origin":"openai-responses","item":{"type":"compaction","encrypted_content":"e"}}));
        assert_eq!(compaction_item(&o).map(|(f, _)| f), Some("openai-responses"));
        let other = block(json!({"type":"opaque","origin":"anthropic","item":{"type":"server_tool_use"}}));
        assert!(compaction_item(&other).is_none());
        let gemini = block(json!({"type":"opaque","origin":"gemini","item":{"type":"compaction"}}));
        assert!(compaction_item(&gemini).is_none());
    }

    #[test]
    fn a_native_checkpoint_has_one_compaction_item_of_one_format() {
        let cp = checkpoint_message(
            "openai-responses",
            &[json!({"type":"message","role":"user","content":[]}), json!({"type":"compaction","encrypted_content":"e"})],
        );
        let n = native_checkpoint(&cp).unwrap();
        assert_eq!(n.format, "openai-responses");
        assert_eq!(n.items.len(), 2);
        assert_eq!(n.readable(), None);
        let a = checkpoint_message("anthropic", &[json!({"type":"compaction","content":"the summary","signature":"sig"})]);
        assert_eq!(native_checkpoint(&a).unwrap().readable(), Some("the summary"));
        assert!(native_checkpoint(&Message::user_text("x")).is_none());
        let two =
            checkpoint_message("anthropic", &[json!({"type":"compaction","content":"a"}), json!({"type":"compaction","content":"b"})]);
        assert!(native_checkpoint(&two).is_none());
    }

    #[test]
    fn threshold_fields_per_format() {
        let (k, v) = threshold_field(Renderer::Anthropic, 12_000).unwrap();
        assert_eq!(k, "context_management");
        assert_eq!(v["edits"][0]["trigger"]["value"], 50_000, "Anthropic's minimum");
        assert_eq!(threshold_field(Renderer::Anthropic, 150_000).unwrap().1["edits"][0]["trigger"]["value"], 150_000);
        assert_eq!(
            threshold_field(Renderer::OpenAiResponses, 200_000).unwrap().1,
            json!([{"type":"compaction","compact_threshold":200_000}])
        );
        assert!(threshold_field(Renderer::OpenAi, 1).is_none());
    }

    #[test]
    fn betas_follow_the_edit_and_the_block() {
        let mut extra = JsonMap::new();
        assert!(anthropic_betas(Some(Renderer::Anthropic), &extra, None).is_empty());
        extra.insert("context_management".into(), threshold_field(Renderer::Anthropic, 1).unwrap().1);
        assert_eq!(anthropic_betas(Some(Renderer::Anthropic), &extra, None), vec![ANTHROPIC_THRESHOLD_BETA]);
        let signed = checkpoint_message("anthropic", &[json!({"type":"compaction","content":"s","signature":"x"})]);
        assert_eq!(anthropic_betas(Some(Renderer::Anthropic), &JsonMap::new(), Some(&signed)), vec![ANTHROPIC_ON_DEMAND_BETA]);
        assert!(anthropic_betas(Some(Renderer::OpenAiResponses), &extra, Some(&signed)).is_empty());
    }

    #[test]
    fn an_answer_is_split_at_its_last_compaction_block() {
        let m = Message::new(
            Role::Assistant,
            vec![
                block(json!({"type":"opaque","origin":"anthropic","item":{"type":"server_tool_use","id":"s"}})),
                block(json!({"type":"opaque","origin":"anthropic","item":{"type":"compaction","content":"sum"}})),
                Block::text("go on"),
            ],
        );
        let s = split_threshold(&m).unwrap();
        assert_eq!(s.format, "anthropic");
        assert_eq!(s.before.len(), 1);
        assert_eq!(s.after, vec![Block::text("go on")]);
        assert!(split_threshold(&Message::new(Role::Assistant, vec![Block::text("x")])).is_none());
    }

    #[test]
    fn failed_items() {
        assert!(failed_item("anthropic", &json!({"type":"compaction","content":null})).is_some());
        assert!(failed_item("anthropic", &json!({"type":"compaction","content":"s"})).is_none());
        assert!(failed_item("openai-responses", &json!({"type":"compaction"})).is_some());
        assert!(failed_item("openai-responses", &json!({"type":"compaction","encrypted_content":"e"})).is_none());
    }

    #[test]
    fn iteration_usage_sums_the_compaction_entries() {
        let u = iteration_usage(
            &json!({"input_tokens":0,"output_tokens":0,"iterations":[{"type":"compaction","input_tokens":144,"output_tokens":276}]}),
        )
        .unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (144, 276));
        assert!(iteration_usage(&json!({"input_tokens":1,"output_tokens":2})).is_none());
    }
}
