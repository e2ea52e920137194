//! The Gemini Interactions API (`POST /v1beta/interactions`): the renderer and the response
//! parser (`docs/providers/gemini-interactions.md`).
//!
//! The request is stateless: `store: false` and the whole conversation as `input` steps, so it
//! is a pure function of the envelope (no `previous_interaction_id`: server-kept state would
//! make a request depend on more than the log). Mapping, per envelope message (a pure function
//! of that message):
//! - system prompt, then the text of every system-role **prefix** message → `system_instruction`
//!   (joined by a blank line; a system-role message after the prefix is an error);
//! - user message → its blocks cut into runs: each `tool-result` becomes a `function_result`
//!   step, each run of text, images and files a `user_input` step (`text`, `image`, `audio`,
//!   `video` and `document` content);
//! - assistant message → steps in block order: runs of text → a `model_output` step,
//!   `tool-call` → a `function_call` step (`arguments` an object; the `signature` the parser
//!   recorded goes back), reasoning parsed from this API → its `thought` step verbatim (with its
//!   `signature`), opaque steps of this API → verbatim.
//!
//! The parser maps the interaction's `steps` back (`outputs`, the earlier name, is read too):
//! `model_output` → text blocks, `thought` → a reasoning block holding the step, `function_call`
//! → a tool-call block, the request's own steps (`user_input`, `function_result`) are skipped,
//! anything else → an opaque block. The interaction's `id` is kept in the message's provenance
//! (`interactionId`).

use super::media::{self, Kind, Source};
use super::origin::{self, is_foreign, is_native, native_str, with_origin};
use super::{block_path, unsupported, Envelope, ParsedResponse, RenderOptions};
use crate::error::{Error, Result};
use crate::types::{as_object, kind_of, Block, JsonMap, Message, Provenance, Role, Usage};
use serde_json::{json, Value};

/// The renderer's name (and the `origin` of blocks its parser keeps native state on).
pub(crate) const NAME: &str = "gemini-interactions";

/// The body field holding the input steps.
pub(super) const INPUT: &str = "input";

/// Renders an envelope into a Gemini Interactions API body.
///
/// The body has `model`, `input`, `store: false`, and when set `system_instruction`, `tools`
/// (`{"type":"function","name","description","parameters"}`) and `generation_config`
/// (`temperature`, `max_output_tokens`, `stop_sequences`, and `thinking_level` from
/// `reasoningEffort`). Unknown config fields are copied verbatim as top-level body fields
/// (`response_format`, `service_tier`, ...); one that names a body field set here is an error.
pub fn render_interactions(envelope: &Value, options: &RenderOptions) -> Result<Value> {
    let env = Envelope::parse(envelope)?;
    env.refuse_native(NAME)?;
    let options = &options.effective(&env, super::Renderer::GeminiInteractions)?;
    env.check_prefix_len(options.prefix_len)?;
    let mut input = Vec::with_capacity(env.messages.len());
    for (i, m) in env.messages.iter().enumerate() {
        render_message(m, i, options.prefix_len, &mut input)?;
    }
    let mut body = frame(&env, options.prefix_len)?;
    body.insert(INPUT.into(), Value::Array(input));
    Ok(Value::Object(body))
}

/// The input steps of envelope message `i` (a pure function of that message; a system-role
/// message renders to none, its text is in the frame's `system_instruction`).
pub(super) fn piece(m: &Message, i: usize, prefix_len: usize) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    render_message(m, i, prefix_len, &mut out)?;
    Ok(out)
}

/// Every body field but the input steps, whose place `input` holds (`null`). The first
/// `prefix_len` envelope messages are the session prefix (their system-role text joins the
/// system instruction).
pub(super) fn frame(env: &Envelope, prefix_len: usize) -> Result<JsonMap> {
    let mut body = JsonMap::new();
    body.insert("model".into(), env.model.clone().into());
    let mut system: Vec<&str> = env.system.iter().map(String::as_str).collect();
    for m in env.messages.iter().take(prefix_len).filter(|m| m.role == Role::System) {
        system.extend(
            m.content.iter().filter(|b| b.kind() == "text").map(|b| b.get_str("text").unwrap_or_default()).filter(|t| !t.is_empty()),
        );
    }
    if !system.is_empty() {
        body.insert("system_instruction".into(), system.join("\n\n").into());
    }
    body.insert(INPUT.into(), Value::Null);
    let tools = super::tools_array(env, NAME, |t, t_i| super::flat_function_tool(t, t_i, NAME))?;
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut config = JsonMap::new();
    if let Some(t) = &env.temperature {
        config.insert("temperature".into(), t.clone());
    }
    if let Some(n) = env.max_tokens {
        config.insert("max_output_tokens".into(), n.into());
    }
    if let Some(stop) = &env.stop {
        config.insert("stop_sequences".into(), Value::Array(stop.clone()));
    }
    if let Some(effort) = &env.reasoning_effort {
        config.insert("thinking_level".into(), effort.clone().into());
    }
    if !config.is_empty() {
        body.insert("generation_config".into(), Value::Object(config));
    }
    body.insert("store".into(), false.into());
    env.pass_through(&mut body, NAME)?;
    Ok(body)
}

/// Renders envelope message `i`, appending its input steps to `out`.
fn render_message(m: &Message, i: usize, prefix_len: usize, out: &mut Vec<Value>) -> Result<()> {
    match m.role {
        Role::System => {
            if i >= prefix_len {
                return Err(Error::invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "a system-role message is only supported inside the session prefix (the first {prefix_len} messages) by the {NAME} renderer"
                    ),
                ));
            }
            for (j, b) in m.content.iter().enumerate() {
                if b.kind() != "text" && !is_foreign(b, NAME) {
                    return Err(unsupported(&block_path(i, j), b, Role::System, NAME));
                }
            }
        }
        Role::User => {
            let mut run: Vec<Value> = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                let path = block_path(i, j);
                match b.kind() {
                    _ if is_foreign(b, NAME) => {}
                    "tool-result" => {
                        flush(&mut run, "user_input", out);
                        out.push(function_result(b, &path)?);
                    }
                    "text" => {
                        let text = b.get_str("text").unwrap_or_default();
                        if !text.is_empty() {
                            run.push(json!({"type": "text", "text": text}));
                        }
                    }
                    "image" | "file" => run.push(media_content(b, &path)?),
                    _ => return Err(unsupported(&path, b, Role::User, NAME)),
                }
            }
            // A user message is never left out: one whose text is all empty is sent as an
            // empty text.
            if run.is_empty() && m.content.iter().all(|b| b.kind() == "text") {
                run.push(json!({"type": "text", "text": ""}));
            }
            flush(&mut run, "user_input", out);
        }
        Role::Assistant => {
            let mut run: Vec<Value> = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                let path = block_path(i, j);
                if is_foreign(b, NAME) {
                    continue;
                }
                match b.kind() {
                    "text" => {
                        let text = b.get_str("text").unwrap_or_default();
                        if !text.is_empty() {
                            run.push(json!({"type": "text", "text": text}));
                        }
                        continue;
                    }
                    "tool-call" => {
                        flush(&mut run, "model_output", out);
                        out.push(function_call(b, &path)?);
                    }
                    "reasoning" => {
                        // Only a thought step of this API goes back (with its signature);
                        // reasoning text of another origin has no form here.
                        if is_native(b, NAME) {
                            if let Some(step) = b.get("step") {
                                flush(&mut run, "model_output", out);
                                out.push(Value::Object(as_object(step, &format!("{path}.step"))?.clone()));
                            }
                        }
                    }
                    origin::OPAQUE => {
                        flush(&mut run, "model_output", out);
                        out.push(origin::opaque_item(b, &path)?.clone());
                    }
                    "redacted-thinking" => {}
                    _ => return Err(unsupported(&path, b, Role::Assistant, NAME)),
                }
            }
            flush(&mut run, "model_output", out);
        }
    }
    Ok(())
}

fn flush(run: &mut Vec<Value>, kind: &str, out: &mut Vec<Value>) {
    if !run.is_empty() {
        out.push(json!({"type": kind, "content": std::mem::take(run)}));
    }
}

/// The content of an image or file block: `image`, `audio`, `video` or `document` by the
/// media type, with inline base64 `data` or a `uri` (the URL, or the Files API URI given as
/// `fileId`), and the `mime_type` when the block names one.
fn media_content(b: &Block, path: &str) -> Result<Value> {
    let m = media::read(b, path)?;
    let kind = match m.kind {
        Kind::Image => "image",
        Kind::Audio => "audio",
        Kind::Video => "video",
        Kind::Document => "document",
    };
    let mut c = JsonMap::new();
    c.insert("type".into(), kind.into());
    match m.source {
        Source::Data(d) => c.insert("data".into(), d.into()),
        Source::Url(u) | Source::FileId(u) => c.insert("uri".into(), u.into()),
    };
    if let Some(t) = m.media_type {
        c.insert("mime_type".into(), t.into());
    }
    Ok(Value::Object(c))
}

/// A `function_call` step: `arguments` must be a JSON object (empty or blank means `{}`).
fn function_call(b: &Block, path: &str) -> Result<Value> {
    let (id, name, arguments) = b.as_tool_call().expect("validated tool-call");
    let args = if arguments.trim().is_empty() {
        Value::Object(JsonMap::new())
    } else {
        let parsed: Value = serde_json::from_str(arguments).map_err(|e| {
            Error::invalid(format!("{path}.arguments"), format!("is not valid JSON, which {NAME} function_call arguments need: {e}"))
        })?;
        if !parsed.is_object() {
            return Err(Error::invalid(
                format!("{path}.arguments"),
                format!("must be a JSON object for {NAME} function_call arguments, got {}", kind_of(&parsed)),
            ));
        }
        parsed
    };
    let mut step = JsonMap::new();
    step.insert("type".into(), "function_call".into());
    step.insert("id".into(), id.into());
    step.insert("name".into(), name.into());
    step.insert("arguments".into(), args);
    if is_native(b, NAME) {
        if let Some(sig) = native_str(b, "signature", path)? {
            step.insert("signature".into(), sig.into());
        }
    }
    Ok(Value::Object(step))
}

/// A `function_result` step: `result` is the text (blocks joined by "\n"), or content when the
/// result holds an image; `is_error` only when true.
fn function_result(b: &Block, path: &str) -> Result<Value> {
    let result = super::tool_result_output(b, path, NAME, "text", media_content)?;
    let mut step = JsonMap::new();
    step.insert("type".into(), "function_result".into());
    step.insert("call_id".into(), b.tool_result_id().expect("validated tool-result").into());
    step.insert("result".into(), result);
    if b.get("isError") == Some(&Value::Bool(true)) {
        step.insert("is_error".into(), true.into());
    }
    Ok(Value::Object(step))
}

// ---------------------------------------------------------------------------------------------
// The response parser.

/// Parses an interaction (`{"id","status","model","steps":[...],"usage",...}`), as returned by
/// `POST /v1beta/interactions` or carried by the `interaction.completed` event of a stream.
pub(crate) fn parse(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "interaction")?;
    let status = body.get("status").and_then(Value::as_str);
    if let Some(s @ ("failed" | "cancelled")) = status {
        return Err(super::response::failed_status(body.get("error"), "interaction.status", &format!("the interaction {s}")));
    }
    let (key, steps) = match (body.get("steps"), body.get("outputs")) {
        (Some(Value::Array(a)), _) => ("steps", a.as_slice()),
        (None, Some(Value::Array(a))) => ("outputs", a.as_slice()),
        (None, None) => ("steps", &[][..]),
        (Some(v), _) | (None, Some(v)) => {
            let k = if body.get("steps").is_some() { "steps" } else { "outputs" };
            return Err(Error::invalid(format!("interaction.{k}"), format!("expected an array, got {}", kind_of(v))));
        }
    };
    let mut content = Vec::new();
    let mut calls = false;
    for (i, step) in steps.iter().enumerate() {
        let path = format!("interaction.{key}[{i}]");
        as_object(step, &path)?;
        match step.get("type").and_then(Value::as_str) {
            Some("model_output") => {
                for c in step.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                    match c.get("type").and_then(Value::as_str) {
                        Some("text") => content.push(Block::text(c.get("text").and_then(Value::as_str).unwrap_or_default())),
                        _ => content.push(origin::opaque(NAME, json!({"type": "model_output", "content": [c]}))),
                    }
                }
            }
            // The earlier `outputs` list held content directly.
            Some("text") if key == "outputs" => content.push(Block::text(step.get("text").and_then(Value::as_str).unwrap_or_default())),
            Some("thought") => {
                let texts: Vec<&str> = step
                    .get("summary")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                let mut m = JsonMap::new();
                m.insert("type".into(), "reasoning".into());
                m.insert("text".into(), texts.join("\n\n").into());
                m.insert("step".into(), step.clone());
                content.push(with_origin(m, NAME));
            }
            Some("function_call") => {
                let id = step
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| Error::invalid(format!("{path}.id"), "expected a non-empty string"))?;
                let name =
                    step.get("name").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.name"), "expected a string"))?;
                let arguments = match step.get("arguments") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                };
                let mut m = JsonMap::new();
                m.insert("type".into(), "tool-call".into());
                m.insert("id".into(), id.into());
                m.insert("name".into(), name.into());
                m.insert("arguments".into(), arguments.into());
                content.push(match step.get("signature").and_then(Value::as_str) {
                    Some(sig) => {
                        m.insert("signature".into(), sig.into());
                        with_origin(m, NAME)
                    }
                    None => Block::from_value(&Value::Object(m), &path)?,
                });
                calls = true;
            }
            // The request's own steps, when the interaction lists them.
            Some("user_input" | "function_result") => {}
            Some(_) => content.push(origin::opaque(NAME, step.clone())),
            None => return Err(Error::invalid(format!("{path}.type"), "expected a string")),
        }
    }
    let finish = match status {
        Some("completed") | Some("requires_action") => Some(if calls { "tool-calls" } else { "stop" }.to_string()),
        Some("incomplete") => Some("max-tokens".to_string()),
        Some("in_progress") => Some("incomplete".to_string()),
        Some(other) => Some(other.to_string()),
        None => None,
    };
    let usage = match body.get("usage") {
        Some(u) if u.is_object() => Some(usage(u)?),
        _ => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = body.get("model").and_then(Value::as_str).map(|m| {
        let mut extra = JsonMap::new();
        if let Some(id) = body.get("id").and_then(Value::as_str) {
            extra.insert("interactionId".into(), id.into());
        }
        Provenance { provider: NAME.to_string(), model: m.to_string(), extra }
    });
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// The interaction's usage: `total_input_tokens` includes `total_cached_tokens`;
/// `total_tool_use_tokens` is more input; `total_thought_tokens` is output beside
/// `total_output_tokens` (so output = output + thoughts, and reasoning = thoughts), as for
/// `generateContent`.
fn usage(u: &Value) -> Result<Usage> {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = get("total_input_tokens").ok_or_else(|| Error::invalid("usage.total_input_tokens", "expected a non-negative integer"))?;
    let cached = get("total_cached_tokens");
    let thoughts = get("total_thought_tokens");
    Ok(Usage {
        input_tokens: input.saturating_sub(cached.unwrap_or(0)) + get("total_tool_use_tokens").unwrap_or(0),
        output_tokens: get("total_output_tokens").unwrap_or(0) + thoughts.unwrap_or(0),
        cache_read_tokens: cached,
        reasoning_tokens: thoughts,
        ..Usage::default()
    })
}
