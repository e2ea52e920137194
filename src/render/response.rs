//! The way back: provider responses and usage into the library's vocabulary.
//!
//! [`parse_response`] turns an OpenAI-compatible chat completion (OpenAI, DeepSeek,
//! llama.cpp, vLLM), an OpenAI Responses API response, an Anthropic Messages response or a
//! Gemini `generateContent` response into an assistant [`Message`], its [`Usage`] (disjoint
//! buckets: `inputTokens` is the uncached part) and the finish reason. Blocks that keep
//! provider-native state name their `origin` (see [`super::origin`]).
//! [`usage_from_provider`] maps a usage object alone. [`is_context_overflow`] recognises the
//! providers' "prompt too long" errors, for `report_provider_error(.., overflow = true)`.

use super::{origin, Renderer};
use crate::error::{Error, Result};
use crate::types::{as_object, Block, JsonMap, Message, Provenance, Role, Usage};
use serde::Serialize;
use serde_json::Value;

/// A parsed provider response.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParsedResponse {
    /// The assistant message (with provenance when the response names its model).
    pub message: Message,
    /// The usage, mapped into disjoint buckets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The finish reason normalised (see [`FINISH_REASONS`]), or the provider's own word for a
    /// reason the library does not know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// The normalised finish reasons and what a host does after recording a response with each:
///
/// - `"stop"`: the model finished its answer; end the turn (or go on with the user).
/// - `"tool-calls"`: run the tools, record their results, build the next request.
/// - `"max-tokens"`: the answer was cut by the output budget; raise `maxTokens` or continue.
/// - `"pause-turn"` (Anthropic `pause_turn`): a server-side tool loop paused the answer; the
///   turn is not over: build the next request in the same turn (no new user message), which
///   sends the paused assistant message back for the model to continue.
/// - `"refusal"` (Anthropic `refusal`; an OpenAI chat or Responses answer holding a refusal):
///   the model declined; the refusal text is in the message (a text block with
///   `"refusal": true` for OpenAI). Retrying unchanged gets the same answer.
/// - `"context-overflow"` (Anthropic `model_context_window_exceeded`): the answer filled the
///   context window and is cut there; record it, then compact before the next request
///   (`compact`, or a compaction gate whose threshold is below the window). It is not a
///   refused request, so it is not reported with `report_provider_error(.., overflow = true)`.
/// - `"content-filter"`: the provider's filter stopped the answer.
/// - `"incomplete"`: the partial message of a cut stream (`StreamAccumulator::finish`).
/// - `"compaction"` (Anthropic `compaction`): the provider compacted the conversation and paused
///   (`pause_after_compaction`): the library recorded the compaction; the turn is not over:
///   build the next request in the same turn (docs/compaction.md, "Native compaction").
///
/// `docs/render.md` ("Finish reasons") has which provider reason gives which.
pub const FINISH_REASONS: &[&str] =
    &["stop", "tool-calls", "max-tokens", "pause-turn", "refusal", "context-overflow", "content-filter", "incomplete", "compaction"];

/// Why a chat completion with more than one choice is refused.
pub(crate) const ONE_CHOICE: &str = "a response with more than one choice (`n` > 1) cannot be recorded: the log keeps one \
     answer per request; leave `n` out or send 1";

/// Why a Gemini response with more than one candidate is refused.
pub(crate) const ONE_CANDIDATE: &str = "a response with more than one candidate (`candidateCount` > 1) cannot be recorded: the \
     log keeps one answer per request; leave `candidateCount` out or send 1";

fn u(v: &Value, ptr: &str) -> Option<u64> {
    crate::types::pointer(v, ptr).and_then(Value::as_u64)
}

/// Maps a provider usage object. `provider` is a renderer name ("openai", "openai-responses",
/// "anthropic", "gemini") or a provider whose usage shape is known ("deepseek", "llama.cpp").
///
/// - OpenAI / llama.cpp: `prompt_tokens` includes `prompt_tokens_details.cached_tokens`;
///   `completion_tokens_details.reasoning_tokens` is a part of `completion_tokens`.
/// - DeepSeek: `prompt_cache_hit_tokens` + `prompt_cache_miss_tokens` = `prompt_tokens`.
/// - OpenAI Responses: `input_tokens` includes `input_tokens_details.cached_tokens`;
///   `output_tokens_details.reasoning_tokens` is a part of `output_tokens`.
/// - OpenAI and OpenAI Responses, models that bill cache writes: `cache_write_tokens` beside
///   `cached_tokens` in the same details object is a part of the prompt (the field name is the
///   issue's; docs/caching.md says what could not be checked against OpenAI's documentation).
/// - Anthropic: `input_tokens` is already uncached; `cache_read_input_tokens` and
///   `cache_creation_input_tokens` are separate buckets; `cache_creation` splits the writes by
///   TTL (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`).
/// - Gemini: `promptTokenCount` includes `cachedContentTokenCount`; `toolUsePromptTokenCount`
///   is more input; `thoughtsTokenCount` is output beside `candidatesTokenCount` (so output =
///   candidates + thoughts, and reasoning = thoughts).
pub fn usage_from_provider(provider: &str, usage: &Value) -> Result<Usage> {
    as_object(usage, "usage")?;
    let need = |ptr: &str| {
        u(usage, ptr).ok_or_else(|| Error::invalid(format!("usage{}", ptr.replace('/', ".")), "expected a non-negative integer"))
    };
    let mut out = Usage::default();
    match provider {
        "anthropic" => {
            out.input_tokens = need("/input_tokens")?;
            out.output_tokens = need("/output_tokens")?;
            out.cache_read_tokens = u(usage, "/cache_read_input_tokens");
            out.cache_write_tokens = u(usage, "/cache_creation_input_tokens");
            // The split of the writes by TTL (`cache_creation`), when the response has it.
            out.cache_write_5m_tokens = u(usage, "/cache_creation/ephemeral_5m_input_tokens");
            out.cache_write_1h_tokens = u(usage, "/cache_creation/ephemeral_1h_input_tokens");
            // Native compaction reports its own sampling step beside the answer's (the top-level
            // counts leave it out): kept verbatim, for the compaction's record.
            if let Some(its) = usage.get("iterations").filter(|v| v.is_array()) {
                out.extra.insert("iterations".into(), its.clone());
            }
        }
        "deepseek" if usage.get("prompt_cache_hit_tokens").is_some() => {
            let hit = need("/prompt_cache_hit_tokens")?;
            let prompt = need("/prompt_tokens")?;
            out.input_tokens = u(usage, "/prompt_cache_miss_tokens").unwrap_or(prompt.saturating_sub(hit));
            out.cache_read_tokens = Some(hit);
            out.output_tokens = need("/completion_tokens")?;
            out.reasoning_tokens = u(usage, "/completion_tokens_details/reasoning_tokens");
        }
        "openai-responses" => {
            let input = need("/input_tokens")?;
            let cached = u(usage, "/input_tokens_details/cached_tokens");
            let written = u(usage, "/input_tokens_details/cache_write_tokens");
            out.input_tokens = input.saturating_sub(cached.unwrap_or(0)).saturating_sub(written.unwrap_or(0));
            out.cache_read_tokens = cached;
            out.cache_write_tokens = written;
            out.output_tokens = need("/output_tokens")?;
            out.reasoning_tokens = u(usage, "/output_tokens_details/reasoning_tokens");
        }
        "gemini" => {
            let prompt = need("/promptTokenCount")?;
            let cached = u(usage, "/cachedContentTokenCount");
            out.input_tokens = prompt.saturating_sub(cached.unwrap_or(0)) + u(usage, "/toolUsePromptTokenCount").unwrap_or(0);
            out.cache_read_tokens = cached;
            let thoughts = u(usage, "/thoughtsTokenCount");
            out.output_tokens = u(usage, "/candidatesTokenCount").unwrap_or(0) + thoughts.unwrap_or(0);
            out.reasoning_tokens = thoughts;
        }
        "openai" | "deepseek" | "llama.cpp" | "vllm" => {
            let prompt = need("/prompt_tokens")?;
            let cached = u(usage, "/prompt_tokens_details/cached_tokens");
            let written = u(usage, "/prompt_tokens_details/cache_write_tokens");
            out.input_tokens = prompt.saturating_sub(cached.unwrap_or(0)).saturating_sub(written.unwrap_or(0));
            out.cache_read_tokens = cached;
            out.cache_write_tokens = written;
            out.output_tokens = need("/completion_tokens")?;
            out.reasoning_tokens = u(usage, "/completion_tokens_details/reasoning_tokens");
        }
        other => {
            return Err(Error::invalid(
                "provider",
                format!("unknown usage shape {other:?} (expected openai, openai-responses, anthropic, gemini, deepseek or llama.cpp)"),
            ))
        }
    }
    Ok(out)
}

/// Parses a provider response body (see the module docs). An error answer of the provider
/// (`{"error": {...}}` in every format, Anthropic's `{"type":"error","error":{...}}`) is refused
/// with [`provider_error_of`]'s error: it is not a message, and nothing is recorded from it.
pub fn parse_response(renderer: Renderer, body: &Value) -> Result<ParsedResponse> {
    // A response object with a `status` (Responses, Interactions) says itself whether it
    // failed: its parser reports that (`failed_status`).
    if let (Some(error), false) = (error_in_body(body), body.get("status").is_some_and(Value::is_string)) {
        return Err(provider_error_of(error, "the provider answered with an error, not a message").with("field", "response.error"));
    }
    match renderer {
        Renderer::OpenAi => parse_openai(body),
        Renderer::Anthropic => parse_anthropic(body),
        Renderer::OpenAiResponses => super::responses::parse(body),
        Renderer::Gemini => super::gemini::parse(body),
        Renderer::GeminiInteractions => super::interactions::parse(body),
    }
}

/// The provider's error in words, when `body` is an error answer (as [`parse_response`] refuses
/// it): for a native compaction answer, which is then a failed attempt.
pub(crate) fn error_answer(body: &Value) -> Option<String> {
    if body.get("status").is_some_and(|s| s == "failed") {
        return Some(body.get("error").map_or_else(|| "the response failed".to_string(), describe_provider_error));
    }
    error_in_body(body).map(describe_provider_error)
}

/// The provider's error in a response body, when the body is an error answer: its `error`, an
/// object or a non-empty string. (A successful Responses API response has `"error": null`.)
fn error_in_body(body: &Value) -> Option<&Value> {
    match body.get("error") {
        Some(e @ Value::Object(_)) => Some(e),
        Some(e @ Value::String(s)) if !s.is_empty() => Some(e),
        _ => None,
    }
}

/// The provider's error object in words: its kind (`type`, else `status`; with the `code`
/// beside it when that differs) and its `message`, e.g. `invalid_request_error
/// (context_length_exceeded): Your input exceeds the context window of this model.`,
/// `INVALID_ARGUMENT (400): ...`, `overloaded_error: Overloaded`. Every format's error object
/// has these fields (OpenAI: `type`, `code`, `message`; Anthropic: `type`, `message`; Gemini:
/// `code`, `status`, `message`; a Responses `error` event carries them at its top level, its
/// `type` being the event's).
pub(crate) fn describe_provider_error(error: &Value) -> String {
    let text = |k: &str| match error.get(k) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    if let Value::String(s) = error {
        return s.clone();
    }
    let message = text("message").or_else(|| crate::types::pointer(error, "/error/message").and_then(Value::as_str).map(str::to_string));
    let kind = text("type").filter(|t| t != "error").or_else(|| text("status"));
    let what = match (kind, text("code")) {
        (Some(k), Some(c)) if k != c => Some(format!("{k} ({c})")),
        (Some(k), _) => Some(k),
        (None, c) => c,
    };
    match (what, message) {
        (Some(w), Some(m)) => format!("{w}: {m}"),
        (None, Some(m)) => m,
        (Some(w), None) => w,
        (None, None) => error.to_string(),
    }
}

/// The error for a provider's error answer (whole or streamed): `InvalidInput`, the message
/// `<what>: <describe_provider_error>`, detail `providerError` (the provider's error, verbatim)
/// and `overflow` (whether it reports that the prompt does not fit the context window).
pub(crate) fn provider_error_of(error: &Value, what: &str) -> Error {
    let text = error.to_string();
    Error::new(crate::error::ErrorKind::InvalidInput, format!("{what}: {}", describe_provider_error(error)))
        .with("providerError", error.clone())
        .with("overflow", is_context_overflow(400, &text))
}

/// The error for a response object whose `status` says it failed (`field`: where the status
/// is, `what`: what happened), quoting the provider's `error` when it has one.
pub(crate) fn failed_status(error: Option<&Value>, field: &str, what: &str) -> Error {
    match error.filter(|e| !e.is_null()) {
        Some(e) => provider_error_of(e, &format!("{field}: {what}")).with("field", field),
        None => Error::invalid(field, format!("{what}: no message")).with("providerError", Value::Null),
    }
}

fn provenance(body: &Value, provider: &str) -> Option<Provenance> {
    body.get("model").and_then(Value::as_str).map(|m| Provenance {
        provider: provider.to_string(),
        model: m.to_string(),
        extra: JsonMap::new(),
    })
}

/// An optional string field: absent or null is `None`, anything but a string an error.
fn opt_str<'a>(v: &'a Value, key: &str, path: &str) -> Result<Option<&'a str>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::invalid(path, "expected a string or null")),
    }
}

/// An optional object field: absent or null is `None`, anything but an object an error.
fn opt_object<'a>(v: &'a Value, key: &str, path: &str) -> Result<Option<&'a Value>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(o @ Value::Object(_)) => Ok(Some(o)),
        Some(_) => Err(Error::invalid(path, "expected an object or null")),
    }
}

fn parse_openai(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    let choice =
        crate::types::pointer(body, "/choices/0").ok_or_else(|| Error::invalid("response.choices", "expected at least one choice"))?;
    if let Some(n) = body.get("choices").and_then(Value::as_array).map(Vec::len).filter(|n| *n > 1) {
        return Err(Error::invalid("response.choices", format!("has {n} choices; {ONE_CHOICE}")).with("choices", n as u64));
    }
    as_object(choice, "response.choices[0]")?;
    let msg = choice.get("message").ok_or_else(|| Error::invalid("response.choices[0].message", "is required"))?;
    as_object(msg, "response.choices[0].message")?;
    let mut content = Vec::new();
    // DeepSeek and llama.cpp return reasoning in `reasoning_content`; recent vLLM (and
    // OpenRouter, following OpenAI's guidance for gpt-oss) in `reasoning`. A server sending both
    // during a transition sends the same text twice: one block, from `reasoning_content`.
    let mut reasoning = None;
    for key in ["reasoning_content", "reasoning"] {
        match msg.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(r)) => {
                reasoning.get_or_insert_with(|| r.clone());
            }
            Some(_) => return Err(Error::invalid(format!("response.choices[0].message.{key}"), "expected a string or null")),
        }
    }
    if let Some(r) = reasoning {
        let mut b = JsonMap::new();
        b.insert("type".into(), "reasoning".into());
        b.insert("text".into(), r.into());
        content.push(Block::from_value(&Value::Object(b), "reasoning")?);
    }
    match msg.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) => {
            if !t.is_empty() {
                content.push(Block::text(t.clone()))
            }
        }
        Some(Value::Array(parts)) => {
            for (i, p) in parts.iter().enumerate() {
                let path = format!("response.choices[0].message.content[{i}]");
                as_object(p, &path)?;
                match p.get("text") {
                    None => {}
                    Some(Value::String(t)) => content.push(Block::text(t.clone())),
                    Some(_) => return Err(Error::invalid(format!("{path}.text"), "expected a string")),
                }
            }
        }
        Some(_) => return Err(Error::invalid("response.choices[0].message.content", "expected a string, an array of parts or null")),
    }
    // OpenAI puts a refusal beside `content` (null then): a text block marked as a refusal.
    let refused = match opt_str(msg, "refusal", "response.choices[0].message.refusal")? {
        Some(r) if !r.is_empty() => {
            content.push(refusal_block(r));
            true
        }
        _ => false,
    };
    let calls = match msg.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(calls)) => &calls[..],
        Some(_) => return Err(Error::invalid("response.choices[0].message.tool_calls", "expected an array or null")),
    };
    {
        for (i, c) in calls.iter().enumerate() {
            let path = format!("response.choices[0].message.tool_calls[{i}]");
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::invalid(format!("{path}.id"), "expected a non-empty string"))?;
            let name = crate::types::pointer(c, "/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::invalid(format!("{path}.function.name"), "expected a string"))?;
            let args = match crate::types::pointer(c, "/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            content.push(Block::tool_call(id, name, &args));
        }
    }
    let finish = opt_str(choice, "finish_reason", "response.choices[0].finish_reason")?.map(|f| match f {
        "tool_calls" => "tool-calls".to_string(),
        "length" => "max-tokens".to_string(),
        "content_filter" => "content-filter".to_string(),
        "stop" if refused => "refusal".to_string(),
        other => other.to_string(),
    });
    let usage = match opt_object(body, "usage", "response.usage")? {
        Some(u) => {
            let shape = if u.get("prompt_cache_hit_tokens").is_some() { "deepseek" } else { "openai" };
            Some(usage_from_provider(shape, u)?)
        }
        None => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = provenance(body, "openai-compatible");
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// The block field that marks a text block as the model's refusal (OpenAI's `refusal`).
pub const REFUSAL: &str = "refusal";

/// A text block holding a refusal: `{"type":"text","text":<refusal>,"refusal":true}`.
pub(crate) fn refusal_block(text: &str) -> Block {
    let mut m = JsonMap::new();
    m.insert("type".into(), "text".into());
    m.insert("text".into(), text.into());
    m.insert(REFUSAL.into(), true.into());
    Block::from_value(&Value::Object(m), "").expect("a text block is valid")
}

/// Whether a block is a text block marked as a refusal.
pub fn is_refusal(b: &Block) -> bool {
    b.kind() == "text" && b.get(REFUSAL) == Some(&Value::Bool(true))
}

/// The `origin` of Anthropic-native blocks (the Anthropic renderer's name).
const ANTHROPIC: &str = "anthropic";

fn parse_anthropic(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    let blocks = body.get("content").and_then(Value::as_array).ok_or_else(|| Error::invalid("response.content", "expected an array"))?;
    let mut content = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let path = format!("response.content[{i}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match (b.get("text"), b.get("citations")) {
                // Citations stay on their text block, for the Anthropic renderer to send back.
                (Some(Value::String(t)), Some(Value::Array(c))) if !c.is_empty() => {
                    let mut m = JsonMap::new();
                    m.insert("type".into(), "text".into());
                    m.insert("text".into(), t.clone().into());
                    m.insert("citations".into(), Value::Array(c.clone()));
                    content.push(origin::with_origin(m, ANTHROPIC));
                }
                (Some(Value::String(t)), None | Some(Value::Null | Value::Array(_))) => content.push(Block::text(t.clone())),
                (Some(Value::String(_)), Some(_)) => return Err(Error::invalid(format!("{path}.citations"), "expected an array or null")),
                _ => return Err(Error::invalid(format!("{path}.text"), "expected a string")),
            },
            Some("thinking") => {
                let mut m = JsonMap::new();
                m.insert("type".into(), "reasoning".into());
                m.insert("text".into(), b.get("thinking").cloned().unwrap_or(Value::from("")));
                if let Some(sig) = b.get("signature") {
                    m.insert("signature".into(), sig.clone());
                }
                m.insert(origin::ORIGIN.into(), ANTHROPIC.into());
                content.push(Block::from_value(&Value::Object(m), &path)?);
            }
            Some("tool_use") => {
                let id = b.get("id").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.id"), "expected a string"))?;
                let name =
                    b.get("name").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.name"), "expected a string"))?;
                let args = b.get("input").map(|v| v.to_string()).unwrap_or_else(|| "{}".into());
                content.push(Block::tool_call(id, name, &args));
            }
            Some("redacted_thinking") => {
                let mut m = JsonMap::new();
                m.insert("type".into(), "redacted-thinking".into());
                m.insert("data".into(), b.get("data").cloned().unwrap_or(Value::from("")));
                m.insert(origin::ORIGIN.into(), ANTHROPIC.into());
                content.push(Block::from_value(&Value::Object(m), &path)?);
            }
            // Blocks without a library type (server tool use and results, compaction, ...)
            // are kept whole, for the Anthropic renderer to send back.
            Some(_) => content.push(origin::opaque(ANTHROPIC, b.clone())),
            None => return Err(Error::invalid(format!("{path}.type"), "expected a string")),
        }
    }
    let finish = opt_str(body, "stop_reason", "response.stop_reason")?.map(|f| match f {
        "end_turn" | "stop_sequence" => "stop".to_string(),
        "tool_use" => "tool-calls".to_string(),
        "max_tokens" => "max-tokens".to_string(),
        "pause_turn" => "pause-turn".to_string(),
        "refusal" => "refusal".to_string(),
        "model_context_window_exceeded" => "context-overflow".to_string(),
        // A native compaction paused the answer (`pause_after_compaction`), or an on-demand
        // compaction request was answered with its block.
        "compaction" => "compaction".to_string(),
        other => other.to_string(),
    });
    let mut usage = match opt_object(body, "usage", "response.usage")? {
        Some(u) => Some(usage_from_provider("anthropic", u)?),
        None => None,
    };
    if let Some(u) = usage.as_mut() {
        u.cache_diagnostics = anthropic_diagnostics(body)?;
        u.context_edits = anthropic_applied_edits(body)?;
    }
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = provenance(body, "anthropic");
    // The response id, for the next request's `diagnostics.previous_message_id`
    // (`RenderOptions::cache_diagnostics`).
    if let (Some(p), Some(id)) = (message.provenance.as_mut(), opt_str(body, "id", "response.id")?) {
        p.extra.insert(RESPONSE_ID.into(), id.into());
    }
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// The provenance field that keeps the provider's response id (Anthropic `id`, `msg_...`).
pub const RESPONSE_ID: &str = "responseId";

/// Anthropic's cache diagnostics (`diagnostics`, present when the request sent
/// `diagnostics.previous_message_id`): `null` is no divergence found (`none`); an object whose
/// `cache_miss_reason` is null is a comparison still running (`pending`); else the reason's
/// `type` and its `cache_missed_input_tokens` estimate.
fn anthropic_diagnostics(body: &Value) -> Result<Option<crate::types::CacheDiagnostics>> {
    use crate::types::CacheDiagnostics;
    let d = match body.get("diagnostics") {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(CacheDiagnostics { reason: "none".into(), missed_tokens: None })),
        Some(d @ Value::Object(_)) => d,
        Some(_) => return Err(Error::invalid("response.diagnostics", "expected an object or null")),
    };
    match d.get("cache_miss_reason") {
        None | Some(Value::Null) => Ok(Some(CacheDiagnostics { reason: "pending".into(), missed_tokens: None })),
        Some(r @ Value::Object(_)) => {
            let reason = r
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| Error::invalid("response.diagnostics.cache_miss_reason.type", "expected a non-empty string"))?;
            Ok(Some(CacheDiagnostics { reason: reason.to_string(), missed_tokens: u(r, "/cache_missed_input_tokens") }))
        }
        Some(_) => Err(Error::invalid("response.diagnostics.cache_miss_reason", "expected an object or null")),
    }
}

/// Anthropic's `context_management.applied_edits`: what the provider cleared from the request
/// before the model saw it.
fn anthropic_applied_edits(body: &Value) -> Result<Option<Vec<crate::types::ContextEdit>>> {
    let Some(cm) = opt_object(body, "context_management", "response.context_management")? else { return Ok(None) };
    let edits = match cm.get("applied_edits") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(Error::invalid("response.context_management.applied_edits", "expected an array")),
    };
    let mut out = Vec::new();
    for (i, e) in edits.iter().enumerate() {
        let path = format!("response.context_management.applied_edits[{i}]");
        let kind = e
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::invalid(format!("{path}.type"), "expected a non-empty string"))?;
        let cleared = u(e, "/cleared_input_tokens")
            .ok_or_else(|| Error::invalid(format!("{path}.cleared_input_tokens"), "expected a non-negative integer"))?;
        out.push(crate::types::ContextEdit {
            kind: kind.to_string(),
            cleared_input_tokens: cleared,
            cleared_tool_uses: u(e, "/cleared_tool_uses"),
            cleared_thinking_turns: u(e, "/cleared_thinking_turns"),
        });
    }
    Ok(Some(out))
}

/// Whether a provider error (HTTP status and body text) reports that the prompt does not fit
/// in the context window.
pub fn is_context_overflow(status: u16, body: &str) -> bool {
    if !(status == 400 || status == 413 || status == 422 || status == 500 || status == 0) {
        return false;
    }
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "prompt is too long",
        "exceeds the available context size",
        "exceed_context_size_error",
        "too many tokens",
        "input is too long",
        "context window",
        // Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
        "input token count",
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|p| b.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_response_with_cache_and_tool_calls() {
        let body = json!({"model":"gpt-x","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}}]}}],
            "usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":96}}});
        let r = parse_response(Renderer::OpenAi, &body).unwrap();
        assert_eq!(r.message.tool_calls().collect::<Vec<_>>(), vec![("call_1", "read", "{\"p\":1}")]);
        let u = r.usage.unwrap();
        assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens, u.prompt_tokens()), (4, Some(96), 7, 100));
        assert_eq!(r.finish_reason.as_deref(), Some("tool-calls"));
        assert_eq!(r.message.provenance.unwrap().model, "gpt-x");
    }

    #[test]
    fn cache_writes_diagnostics_and_context_edits_are_parsed() {
        let body = |extra: Value| {
            let mut b = json!({"id":"msg_1","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn",
                "usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":900,"cache_creation_input_tokens":30,
                         "cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20}}});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            b
        };
        let u = parse_response(Renderer::Anthropic, &body(json!({}))).unwrap().usage.unwrap();
        assert_eq!((u.cache_write_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens), (Some(30), Some(10), Some(20)));
        assert_eq!((u.cache_diagnostics, u.context_edits), (None, None));
        let reason = |d: Value| {
            parse_response(Renderer::Anthropic, &body(json!({"diagnostics": d}))).unwrap().usage.unwrap().cache_diagnostics.unwrap()
        };
        assert_eq!(reason(Value::Null).reason, "none");
        assert_eq!(reason(json!({"cache_miss_reason": null})).reason, "pending");
        let d = reason(json!({"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 77}}));
        assert_eq!((d.reason.as_str(), d.missed_tokens), ("tools_changed", Some(77)));
        let edits = json!({"context_management": {"applied_edits": [{"type":"clear_tool_uses_20250919","cleared_tool_uses":3,"cleared_input_tokens":500}]}});
        let e = parse_response(Renderer::Anthropic, &body(edits)).unwrap().usage.unwrap().context_edits.unwrap();
        assert_eq!((e[0].kind.as_str(), e[0].cleared_input_tokens, e[0].cleared_tool_uses), ("clear_tool_uses_20250919", 500, Some(3)));
        // The logged form reads back.
        let logged = serde_json::to_value(parse_response(Renderer::Anthropic, &body(edits_and_diag())).unwrap().usage.unwrap()).unwrap();
        assert_eq!(logged["contextEdits"][0]["clearedToolUses"], 1);
        assert_eq!(
            Usage::from_value(&logged, "usage").unwrap(),
            parse_response(Renderer::Anthropic, &body(edits_and_diag())).unwrap().usage.unwrap()
        );
        for (bad, msg) in [
            (json!({"diagnostics": 3}), "response.diagnostics: expected an object or null"),
            (json!({"diagnostics": {"cache_miss_reason": {}}}), "response.diagnostics.cache_miss_reason.type: expected a non-empty string"),
            (
                json!({"context_management": {"applied_edits": [{"type":"clear_tool_uses_20250919"}]}}),
                "response.context_management.applied_edits[0].cleared_input_tokens: expected a non-negative integer",
            ),
        ] {
            assert_eq!(parse_response(Renderer::Anthropic, &body(bad)).unwrap_err().message(), msg);
        }
        // OpenAI's write tokens are a part of the prompt, as its cached tokens are.
        let o = usage_from_provider(
            "openai",
            &json!({"prompt_tokens":1000,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":600,"cache_write_tokens":300}}),
        )
        .unwrap();
        assert_eq!((o.input_tokens, o.cache_read_tokens, o.cache_write_tokens, o.prompt_tokens()), (100, Some(600), Some(300), 1000));
        let r = usage_from_provider(
            "openai-responses",
            &json!({"input_tokens":1000,"output_tokens":3,"input_tokens_details":{"cached_tokens":600,"cache_write_tokens":300}}),
        )
        .unwrap();
        assert_eq!((r.input_tokens, r.cache_write_tokens, r.prompt_tokens()), (100, Some(300), 1000));
    }

    fn edits_and_diag() -> Value {
        json!({"diagnostics": {"cache_miss_reason": {"type": "messages_changed"}},
               "context_management": {"applied_edits": [{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":50}]}})
    }

    #[test]
    fn reasoning_and_reasoning_content_are_both_parsed() {
        let reply = |msg: Value| json!({"choices":[{"finish_reason":"stop","message":msg}]});
        for key in ["reasoning_content", "reasoning"] {
            let r = parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4", key: "2+2=4"}))).unwrap();
            assert_eq!(r.message.content.len(), 2, "{key}");
            assert_eq!(r.message.content[0].kind(), "reasoning");
            assert_eq!(r.message.content[0].get_str("text"), Some("2+2=4"));
            assert_eq!(r.message.content[1].get_str("text"), Some("4"));
        }
        let both =
            parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4","reasoning_content":"a","reasoning":"a"})))
                .unwrap();
        assert_eq!(both.message.content.iter().filter(|b| b.kind() == "reasoning").count(), 1);
        let none = parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4"}))).unwrap();
        assert_eq!(none.message.content.len(), 1);
    }

    #[test]
    fn deepseek_and_anthropic_usage_are_disjoint_buckets() {
        let d = usage_from_provider(
            "deepseek",
            &json!({"prompt_tokens":50,"completion_tokens":3,"prompt_cache_hit_tokens":40,"prompt_cache_miss_tokens":10}),
        )
        .unwrap();
        assert_eq!((d.input_tokens, d.cache_read_tokens), (10, Some(40)));
        let a = usage_from_provider(
            "anthropic",
            &json!({"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":900,"cache_creation_input_tokens":30}),
        )
        .unwrap();
        assert_eq!((a.input_tokens, a.cache_read_tokens, a.cache_write_tokens, a.prompt_tokens()), (5, Some(900), Some(30), 935));
        let e = usage_from_provider("openai", &json!({"completion_tokens":1})).unwrap_err();
        assert_eq!(e.message(), "usage.prompt_tokens: expected a non-negative integer");
        assert!(usage_from_provider("mystery", &json!({})).is_err());
    }

    #[test]
    fn anthropic_response_blocks() {
        let body = json!({"model":"claude-x","stop_reason":"tool_use","content":[{"type":"thinking","thinking":"hmm","signature":"s"},
            {"type":"text","text":"let me look"},{"type":"tool_use","id":"tu_1","name":"read","input":{"p":1}}],
            "usage":{"input_tokens":3,"output_tokens":9,"cache_read_input_tokens":500}});
        let r = parse_response(Renderer::Anthropic, &body).unwrap();
        assert_eq!(r.message.content.len(), 3);
        assert_eq!(r.message.content[0].get_str("signature"), Some("s"));
        assert_eq!(r.message.content[0].get_str("origin"), Some("anthropic"));
        assert_eq!(r.message.tool_calls().next(), Some(("tu_1", "read", "{\"p\":1}")));
        assert_eq!(r.finish_reason.as_deref(), Some("tool-calls"));
    }

    #[test]
    fn stop_reasons_are_normalised() {
        for (stop, want) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("tool_use", "tool-calls"),
            ("max_tokens", "max-tokens"),
            ("pause_turn", "pause-turn"),
            ("refusal", "refusal"),
            ("model_context_window_exceeded", "context-overflow"),
            ("something_new", "something_new"),
        ] {
            let r = parse_response(Renderer::Anthropic, &json!({"content":[],"stop_reason":stop})).unwrap();
            assert_eq!(r.finish_reason.as_deref(), Some(want), "{stop}");
        }
        let chat = |msg: Value, f: &str| {
            parse_response(Renderer::OpenAi, &json!({"choices":[{"message":msg,"finish_reason":f}]})).unwrap().finish_reason.unwrap()
        };
        assert_eq!(chat(json!({"role":"assistant","content":"x"}), "content_filter"), "content-filter");
        assert_eq!(chat(json!({"role":"assistant","content":null,"refusal":"no"}), "stop"), "refusal");
        assert_eq!(chat(json!({"role":"assistant","content":"x","refusal":null}), "stop"), "stop");
        for f in ["stop", "tool-calls", "max-tokens", "pause-turn", "refusal", "context-overflow", "content-filter", "incomplete"] {
            assert!(FINISH_REASONS.contains(&f), "{f}");
        }
        let e = parse_response(Renderer::OpenAi, &json!({"choices":[{"message":{"role":"assistant","refusal":5}}]})).unwrap_err();
        assert_eq!(e.detail()["field"], "response.choices[0].message.refusal");
        let e = parse_response(Renderer::Anthropic, &json!({"content":[{"type":"text","text":"t","citations":"x"}]})).unwrap_err();
        assert_eq!(e.detail()["field"], "response.content[0].citations");
    }

    #[test]
    fn anthropic_blocks_without_a_library_type_are_opaque_and_render_back() {
        let compaction = json!({"type":"compaction","content":"summary of earlier turns"});
        let body = json!({"model":"claude-x","stop_reason":"end_turn","content":[compaction,
            {"type":"redacted_thinking","data":"R"},{"type":"text","text":"ok"}]});
        let r = parse_response(Renderer::Anthropic, &body).unwrap();
        assert_eq!(r.message.content[0].clone().into_value(), json!({"type":"opaque","origin":"anthropic","item":compaction}));
        assert_eq!(r.message.content[1].get_str("origin"), Some("anthropic"));
        let env = json!({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}, r.message.to_value()]});
        let rendered = Renderer::Anthropic.render(&env, &Default::default()).unwrap();
        assert_eq!(rendered["messages"][1]["content"][0], compaction);
        assert_eq!(rendered["messages"][1]["content"][1], json!({"type":"redacted_thinking","data":"R"}));
        // Another format drops Anthropic's native blocks and keeps the text.
        for other in [Renderer::OpenAi, Renderer::OpenAiResponses, Renderer::Gemini] {
            let b = other.render(&env, &Default::default()).unwrap();
            let text = b.to_string();
            assert!(!text.contains("summary of earlier turns") && !text.contains("\"R\""), "{}: {text}", other.name());
            assert!(text.contains("\"ok\""), "{}: {text}", other.name());
        }
    }

    #[test]
    fn usage_of_the_responses_api_and_gemini() {
        let r = usage_from_provider(
            "openai-responses",
            &json!({"input_tokens":500,"input_tokens_details":{"cached_tokens":448},"output_tokens":20,
                    "output_tokens_details":{"reasoning_tokens":12}}),
        )
        .unwrap();
        assert_eq!(
            (r.input_tokens, r.cache_read_tokens, r.output_tokens, r.reasoning_tokens, r.prompt_tokens()),
            (52, Some(448), 20, Some(12), 500)
        );
        let g = usage_from_provider(
            "gemini",
            &json!({"promptTokenCount":300,"cachedContentTokenCount":256,"toolUsePromptTokenCount":10,
                    "candidatesTokenCount":7,"thoughtsTokenCount":5}),
        )
        .unwrap();
        assert_eq!((g.input_tokens, g.cache_read_tokens, g.output_tokens, g.reasoning_tokens), (54, Some(256), 12, Some(5)));
        let g = usage_from_provider("gemini", &json!({"promptTokenCount":9})).unwrap();
        assert_eq!((g.input_tokens, g.cache_read_tokens, g.output_tokens, g.reasoning_tokens), (9, None, 0, None));
        let e = usage_from_provider("gemini", &json!({"candidatesTokenCount":1})).unwrap_err();
        assert_eq!(e.message(), "usage.promptTokenCount: expected a non-negative integer");
        let e = usage_from_provider("openai-responses", &json!({"input_tokens":1})).unwrap_err();
        assert_eq!(e.message(), "usage.output_tokens: expected a non-negative integer");
    }

    #[test]
    fn bad_responses_name_the_field() {
        let e = parse_response(Renderer::OpenAi, &json!({"choices":[]})).unwrap_err();
        assert_eq!(e.message(), "response.choices: expected at least one choice");
        let e = parse_response(Renderer::Anthropic, &json!({"content":"x"})).unwrap_err();
        assert_eq!(e.message(), "response.content: expected an array");
    }

    #[test]
    fn fields_of_the_wrong_type_are_errors_naming_them() {
        let ok = |m: Value| json!({"choices":[{"message": m, "finish_reason": "stop"}]});
        for (body, field) in [
            (ok(json!(5)), "response.choices[0].message"),
            (ok(json!({"role":"assistant","content":5})), "response.choices[0].message.content"),
            (ok(json!({"role":"assistant","content":[5]})), "response.choices[0].message.content[0]"),
            (ok(json!({"role":"assistant","content":[{"type":"text","text":5}]})), "response.choices[0].message.content[0].text"),
            (ok(json!({"role":"assistant","content":"hi","tool_calls":5})), "response.choices[0].message.tool_calls"),
            (ok(json!({"role":"assistant","reasoning_content":5})), "response.choices[0].message.reasoning_content"),
            (json!({"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":5}), "response.usage"),
            (json!({"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":5}]}), "response.choices[0].finish_reason"),
            (json!({"choices":[5]}), "response.choices[0]"),
        ] {
            let e = parse_response(Renderer::OpenAi, &body).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{body}");
            assert_eq!(e.detail()["field"], field, "{body}: {}", e.message());
        }
        for (body, field) in [
            (json!({"content":[{"type":"text","text":"hi"}],"usage":5}), "response.usage"),
            (json!({"content":[{"type":"text","text":5}]}), "response.content[0].text"),
            (json!({"content":[],"stop_reason":5}), "response.stop_reason"),
        ] {
            let e = parse_response(Renderer::Anthropic, &body).unwrap_err();
            assert_eq!(e.detail()["field"], field, "{body}: {}", e.message());
        }
        // Nulls are absence.
        let r = parse_response(
            Renderer::OpenAi,
            &json!({"choices":[{"message":{"role":"assistant","content":"hi","tool_calls":null,"reasoning_content":null},"finish_reason":null}],"usage":null}),
        )
        .unwrap();
        assert_eq!(r.message.text(), "hi");
        assert!(r.usage.is_none() && r.finish_reason.is_none());
    }

    #[test]
    fn overflow_errors_are_recognised() {
        assert!(is_context_overflow(400, r#"{"error":{"code":"context_length_exceeded"}}"#));
        assert!(is_context_overflow(400, r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#));
        assert!(is_context_overflow(
            400,
            r#"{"error":{"type":"exceed_context_size_error","message":"the request exceeds the available context size"}}"#
        ));
        // OpenAI Responses API and Gemini.
        assert!(is_context_overflow(
            400,
            r#"{"error":{"message":"Your input exceeds the context window of this model.","code":"context_length_exceeded"}}"#
        ));
        assert!(is_context_overflow(
            400,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#
        ));
        assert!(!is_context_overflow(429, "rate limited: too many tokens per minute"));
        assert!(!is_context_overflow(
            400,
            r#"{"error":{"message":"Invalid value at 'contents[0].parts[0]'","status":"INVALID_ARGUMENT"}}"#
        ));
        assert!(!is_context_overflow(400, "invalid tool schema"));
    }
}
