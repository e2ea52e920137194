//! The OpenAI Responses API (`POST /v1/responses`): the renderer and the response parser.
//!
//! The request is stateless: `store: false` and the whole conversation as `input` items, so it
//! is a pure function of the envelope (no `previous_response_id`, nothing kept on the server).
//! Mapping, per envelope message (a pure function of that message; `docs/providers/openai-responses.md`):
//! - system prompt → `instructions`;
//! - system-role message → a `message` item with role `system` (`input_text` parts);
//! - user message → its blocks cut into runs: each `tool-result` becomes a
//!   `function_call_output` item, each run of text, images and files a user `message` item;
//! - assistant message → items in block order: runs of text → an assistant `message` item
//!   (`output_text` parts; `refusal` parts for text blocks marked `"refusal": true`), `tool-call` → `function_call`, reasoning parsed from this API (with
//!   its `encrypted_content`) → the `reasoning` item verbatim, opaque items of this API (e.g.
//!   `compaction`) → verbatim; item ids recorded by the parser are sent back.
//!
//! The parser maps `output` items back: `message` → text blocks (a `refusal` part → a text
//! block marked `"refusal": true`, and finish reason `"refusal"`), `function_call` → tool-call
//! blocks, `reasoning` → a reasoning block holding the item, anything else → an opaque block.

use super::media::{self, Kind, Source};
use super::origin::{self, is_foreign, is_native, native_str, with_origin};
use super::{block_path, breakpoint, unsupported, Envelope, ParsedResponse, RenderOptions};
use crate::error::{Error, Result};
use crate::types::{as_object, Block, JsonMap, Message, Provenance, Role};
use serde_json::{json, Value};

/// The renderer's name (and the `origin` of blocks its parser keeps native state on).
pub(crate) const NAME: &str = "openai-responses";

/// What the renderer adds to `include` when reasoning is requested: without it a stateless
/// request gets reasoning items it cannot send back.
const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// Renders an envelope into an OpenAI Responses API body.
///
/// The body has `model`, `input`, `store: false`, and when set `instructions` (the system
/// prompt), `tools`, `max_output_tokens`, `temperature` and `reasoning: {"effort"}` (then also
/// `include: ["reasoning.encrypted_content"]`, so that reasoning can be carried back). `stop`
/// has no Responses API field and is an error. Unknown config fields are copied verbatim as
/// top-level body fields (`prompt_cache_key`, `parallel_tool_calls`, `text`, `truncation`,
/// `context_management`, ...); one that names a body field set here is an error, except
/// `include`, whose entries are kept (the encrypted-reasoning entry is added when missing).
/// `options.prefix_len` is only checked against the message count; the cache options set
/// `prompt_cache_key` (by default the session id) and `prompt_cache_retention` as for chat
/// completions.
pub fn render_responses(envelope: &Value, options: &RenderOptions) -> Result<Value> {
    let env = Envelope::parse(envelope)?;
    let options = &options.effective(&env, super::Renderer::OpenAiResponses)?;
    env.check_prefix_len(options.prefix_len)?;
    render(&env, options)
}

fn render(env: &Envelope, options: &RenderOptions) -> Result<Value> {
    if env.native_compaction {
        return render_compact(env, options);
    }
    check_stop(env)?;
    let mut input = Vec::with_capacity(env.messages.len());
    let (mut prefix_end, mut history_end) = (0, 0);
    for (i, m) in env.messages.iter().enumerate() {
        render_message(m, i, &mut input)?;
        if i < options.prefix_len {
            prefix_end = input.len();
        }
        // A summarisation request's trailing instruction is left out of the history's mark.
        if !(env.compaction && i + 1 == env.messages.len()) {
            history_end = input.len();
        }
    }
    // `instructions` is a string and cannot carry a mark: no head mark (lead 0).
    breakpoint::place_openai(&mut input, 0, prefix_end, history_end, options, markable, set_breakpoint);
    let mut body = frame(env, options)?;
    body.insert(INPUT.into(), Value::Array(input));
    Ok(Value::Object(body))
}

/// The body field holding the input items.
pub(super) const INPUT: &str = "input";

/// The body of `POST /responses/compact` (a native compaction request): `model`, `input` (the
/// envelope's messages, as a conversation request renders them), `instructions` (the system
/// prompt), the cache routing of the options and config (`prompt_cache_key`, by default the
/// session id; `prompt_cache_retention`; `prompt_cache_options`), and of the other
/// pass-through fields only those the endpoint takes (`compaction::native::COMPACT_ENDPOINT_FIELDS`).
/// The endpoint takes no tools, output limit or sampling settings, and keeps nothing (it is
/// stateless): there is no `store`.
fn render_compact(env: &Envelope, options: &RenderOptions) -> Result<Value> {
    let mut input = Vec::with_capacity(env.messages.len());
    for (i, m) in env.messages.iter().enumerate() {
        render_message(m, i, &mut input)?;
    }
    let mut body = JsonMap::new();
    body.insert("model".into(), env.model.clone().into());
    if let Some(system) = &env.system {
        body.insert("instructions".into(), system.clone().into());
    }
    body.insert(INPUT.into(), Value::Array(input));
    options.route_explicit(&mut body);
    env.pass_through_where(&mut body, NAME, |k| crate::compaction::native::COMPACT_ENDPOINT_FIELDS.contains(&k))?;
    options.route_default(&mut body, env.session_id.as_ref())?;
    Ok(Value::Object(body))
}

fn check_stop(env: &Envelope) -> Result<()> {
    if env.stop.is_some() {
        return Err(Error::invalid("stop", format!("the Responses API has no stop sequences, so the {NAME} renderer cannot send them")));
    }
    Ok(())
}

/// The input items of envelope message `i` (a pure function of that message).
pub(super) fn piece(m: &Message, i: usize) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    render_message(m, i, &mut out)?;
    Ok(out)
}

/// Whether an input item can carry a `prompt_cache_breakpoint`: a user or system `message`
/// whose last part is `input_text` or `input_image`, or a `function_call_output` (a string
/// output becomes one `input_text` part when marked); output items cannot.
pub(super) fn markable(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some("message") if matches!(item.get("role").and_then(Value::as_str), Some("user" | "system" | "developer")) => {
            item.get("content").and_then(Value::as_array).and_then(|a| a.last()).is_some_and(input_part)
        }
        Some("function_call_output") => match item.get("output") {
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => a.last().is_some_and(input_part),
            _ => false,
        },
        _ => false,
    }
}

fn input_part(p: &Value) -> bool {
    matches!(p.get("type").and_then(Value::as_str), Some("input_text" | "input_image"))
}

/// Marks a [`markable`] input item's last part with `prompt_cache_breakpoint`.
pub(super) fn set_breakpoint(item: &mut Value) {
    let bp = super::breakpoint::openai_breakpoint();
    let key = if item.get("type").and_then(Value::as_str) == Some("function_call_output") { "output" } else { "content" };
    if let Some(parts) = item.get_mut(key) {
        if let Value::String(s) = parts {
            *parts = json!([{"type": "input_text", "text": std::mem::take(s)}]);
        }
        if let Some(Value::Object(last)) = parts.as_array_mut().and_then(|a| a.last_mut()) {
            last.insert("prompt_cache_breakpoint".into(), bp);
        }
    }
}

/// Every body field but the input items, whose place `input` holds (`null`).
pub(super) fn frame(env: &Envelope, options: &RenderOptions) -> Result<JsonMap> {
    check_stop(env)?;
    let mut body = JsonMap::new();
    body.insert("model".into(), env.model.clone().into());
    if let Some(system) = &env.system {
        body.insert("instructions".into(), system.clone().into());
    }
    body.insert(INPUT.into(), Value::Null);
    let tools = super::tools_array(env, NAME, |t, t_i| super::flat_function_tool(t, t_i, NAME))?;
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(n) = env.max_tokens {
        body.insert("max_output_tokens".into(), n.into());
    }
    if let Some(t) = &env.temperature {
        body.insert("temperature".into(), t.clone());
    }
    if let Some(effort) = &env.reasoning_effort {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    body.insert("store".into(), false.into());

    // `include` is merged rather than refused: a host asking for other extra output keeps
    // its entries, and the encrypted reasoning is added when reasoning is requested.
    let mut extra = env.extra.clone();
    let mut include: Vec<Value> = match extra.remove("include") {
        None => Vec::new(),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(Error::invalid("include", format!("expected an array, got {}", crate::types::kind_of(&v)))),
    };
    if env.reasoning_effort.is_some() && !include.iter().any(|v| v == ENCRYPTED_REASONING) {
        include.push(ENCRYPTED_REASONING.into());
    }
    if !include.is_empty() {
        body.insert("include".into(), Value::Array(include));
    }
    // Cache routing as for chat completions: the Responses API takes the same
    // `prompt_cache_key` and `prompt_cache_retention`.
    options.route_explicit(&mut body);
    for (k, v) in extra {
        if body.contains_key(&k) {
            return Err(Error::invalid(
                k.as_str(),
                format!("unknown config field collides with the body field {k:?} that the {NAME} renderer sets itself"),
            ));
        }
        body.insert(k, v);
    }
    options.route_default(&mut body, env.session_id.as_ref())?;
    Ok(body)
}

/// Renders envelope message `i`, appending its input items to `out`.
fn render_message(m: &Message, i: usize, out: &mut Vec<Value>) -> Result<()> {
    match m.role {
        Role::System => {
            let mut parts = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                match b.kind() {
                    _ if is_foreign(b, NAME) => {}
                    "text" => parts.push(json!({"type": "input_text", "text": b.get_str("text").unwrap_or_default()})),
                    _ => return Err(unsupported(&block_path(i, j), b, Role::System, NAME)),
                }
            }
            if !parts.is_empty() {
                out.push(json!({"type": "message", "role": "system", "content": parts}));
            }
        }
        Role::User => {
            let mut run: Vec<Value> = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                let path = block_path(i, j);
                match b.kind() {
                    _ if is_foreign(b, NAME) => {}
                    "tool-result" => {
                        flush_user(&mut run, out);
                        out.push(function_call_output(b, &path)?);
                    }
                    "text" => {
                        let text = b.get_str("text").unwrap_or_default();
                        if !text.is_empty() {
                            run.push(json!({"type": "input_text", "text": text}));
                        }
                    }
                    "image" | "file" => run.push(input_media(b, &path)?),
                    // An item of this API kept whole (a native compaction checkpoint's items:
                    // the compaction item, the retained messages of a compacted window).
                    origin::OPAQUE if is_native(b, NAME) => {
                        flush_user(&mut run, out);
                        out.push(origin::opaque_item(b, &path)?.clone());
                    }
                    _ => return Err(unsupported(&path, b, Role::User, NAME)),
                }
            }
            // A user message is never left out: one whose text is all empty is sent as an
            // empty text (the turn is the user's, whatever it says).
            if run.is_empty() && m.content.iter().all(|b| b.kind() == "text") {
                run.push(json!({"type": "input_text", "text": ""}));
            }
            flush_user(&mut run, out);
        }
        Role::Assistant => {
            // A run of text blocks of one output message: (item id, output_text parts).
            let mut text: Option<(Option<String>, Vec<Value>)> = None;
            for (j, b) in m.content.iter().enumerate() {
                let path = block_path(i, j);
                if is_foreign(b, NAME) {
                    continue;
                }
                if b.kind() == "text" {
                    let id = if is_native(b, NAME) { native_str(b, "itemId", &path)?.map(str::to_string) } else { None };
                    let t = b.get_str("text").unwrap_or_default();
                    if matches!(&text, Some((run_id, _)) if *run_id != id) {
                        flush_assistant(&mut text, out);
                    }
                    if t.is_empty() {
                        continue;
                    }
                    let (_, parts) = text.get_or_insert_with(|| (id, Vec::new()));
                    parts.push(if super::is_refusal(b) {
                        json!({"type": "refusal", "refusal": t})
                    } else {
                        json!({"type": "output_text", "text": t, "annotations": []})
                    });
                    continue;
                }
                flush_assistant(&mut text, out);
                match b.kind() {
                    "tool-call" => {
                        let (id, name, arguments) = b.as_tool_call().expect("validated tool-call");
                        let mut item = JsonMap::new();
                        item.insert("type".into(), "function_call".into());
                        if is_native(b, NAME) {
                            if let Some(item_id) = native_str(b, "itemId", &path)? {
                                item.insert("id".into(), item_id.into());
                            }
                        }
                        item.insert("call_id".into(), id.into());
                        item.insert("name".into(), name.into());
                        item.insert("arguments".into(), arguments.into());
                        out.push(Value::Object(item));
                    }
                    "reasoning" => {
                        // Only a reasoning item of this API with its encrypted content can go
                        // back: a stateless request cannot refer to one by id.
                        if is_native(b, NAME) {
                            if let Some(item) = b.get("item") {
                                let item = as_object(item, &format!("{path}.item"))?;
                                if item.get("encrypted_content").and_then(Value::as_str).is_some() {
                                    out.push(Value::Object(item.clone()));
                                }
                            }
                        }
                    }
                    origin::OPAQUE => out.push(origin::opaque_item(b, &path)?.clone()),
                    // Anthropic's redacted thinking has no Responses form.
                    "redacted-thinking" => {}
                    _ => return Err(unsupported(&path, b, Role::Assistant, NAME)),
                }
            }
            flush_assistant(&mut text, out);
        }
    }
    Ok(())
}

fn flush_user(run: &mut Vec<Value>, out: &mut Vec<Value>) {
    if !run.is_empty() {
        out.push(json!({"type": "message", "role": "user", "content": std::mem::take(run)}));
    }
}

fn flush_assistant(text: &mut Option<(Option<String>, Vec<Value>)>, out: &mut Vec<Value>) {
    if let Some((id, parts)) = text.take() {
        let mut item = JsonMap::new();
        item.insert("type".into(), "message".into());
        item.insert("role".into(), "assistant".into());
        item.insert("content".into(), Value::Array(parts));
        if let Some(id) = id {
            // An output message sent back with its id is an output item, which has a status.
            item.insert("id".into(), id.into());
            item.insert("status".into(), "completed".into());
        }
        out.push(Value::Object(item));
    }
}

/// The input part of an image or file block: `input_image` for an image (by URL, inline or by
/// file id; `detail` from the block when it has one, else `auto`), `input_file` for a document
/// (inline, by URL or by file id, with its `filename`). Audio and video are refused.
fn input_media(b: &Block, path: &str) -> Result<Value> {
    let m = media::read(b, path)?;
    let mut part = JsonMap::new();
    match m.kind {
        Kind::Image => {
            part.insert("type".into(), "input_image".into());
            match m.source {
                Source::FileId(id) => part.insert("file_id".into(), id.into()),
                _ => part.insert("image_url".into(), m.url().into()),
            };
            part.insert("detail".into(), native_str(b, "detail", path)?.unwrap_or("auto").into());
        }
        Kind::Document => {
            part.insert("type".into(), "input_file".into());
            match m.source {
                Source::FileId(id) => part.insert("file_id".into(), id.into()),
                Source::Url(u) => part.insert("file_url".into(), u.into()),
                Source::Data(_) => part.insert("file_data".into(), m.url().into()),
            };
            if let Some(name) = m.filename {
                part.insert("filename".into(), name.into());
            }
        }
        Kind::Audio | Kind::Video => {
            return Err(media::cannot_carry(
                path,
                &m,
                NAME,
                "the Responses API takes images and files (input_image, input_file), no audio or video",
            ))
        }
    }
    Ok(Value::Object(part))
}

/// A `function_call_output` item: `output` is the text (blocks joined by "\n"), or parts when
/// the result holds an image or a file. `isError` has no field (the result text should say so).
fn function_call_output(b: &Block, path: &str) -> Result<Value> {
    let output = super::tool_result_output(b, path, NAME, "input_text", input_media)?;
    Ok(json!({
        "type": "function_call_output",
        "call_id": b.tool_result_id().expect("validated tool-result"),
        "output": output,
    }))
}

// ---------------------------------------------------------------------------------------------
// The response parser.

/// Parses a Responses API response object (`{"id","object":"response","status","model",
/// "output":[items],"usage",...}`), as returned by `POST /v1/responses` or carried by the
/// `response.completed` event of a stream.
pub(crate) fn parse(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    let status = body.get("status").and_then(Value::as_str);
    if status == Some("failed") {
        return Err(super::response::failed_status(body.get("error"), "response.status", "the response failed"));
    }
    let items = match body.get("output") {
        Some(Value::Array(a)) => a.as_slice(),
        None => &[],
        Some(v) => return Err(Error::invalid("response.output", format!("expected an array, got {}", crate::types::kind_of(v)))),
    };
    let mut content = Vec::new();
    let mut calls = false;
    let mut refused = false;
    for (i, item) in items.iter().enumerate() {
        let path = format!("response.output[{i}]");
        as_object(item, &path)?;
        let id = item.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let parts = item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                for p in parts {
                    let (text, refusal) = match p.get("type").and_then(Value::as_str) {
                        Some("output_text") => (p.get("text").and_then(Value::as_str), false),
                        Some("refusal") => (p.get("refusal").and_then(Value::as_str), true),
                        _ => (None, false),
                    };
                    if let Some(t) = text {
                        refused |= refusal;
                        content.push(native_text(t, id, refusal));
                    }
                }
            }
            Some("function_call") => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| Error::invalid(format!("{path}.call_id"), "expected a non-empty string"))?;
                let name =
                    item.get("name").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.name"), "expected a string"))?;
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let mut m = JsonMap::new();
                m.insert("type".into(), "tool-call".into());
                m.insert("id".into(), call_id.into());
                m.insert("name".into(), name.into());
                m.insert("arguments".into(), arguments.into());
                content.push(match id {
                    Some(id) => {
                        m.insert("itemId".into(), id.into());
                        with_origin(m, NAME)
                    }
                    None => Block::from_value(&Value::Object(m), &path)?,
                });
                calls = true;
            }
            Some("reasoning") => {
                let mut texts: Vec<&str> = Vec::new();
                for key in ["summary", "content"] {
                    for part in item.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            texts.push(t);
                        }
                    }
                }
                let mut m = JsonMap::new();
                m.insert("type".into(), "reasoning".into());
                m.insert("text".into(), texts.join("\n\n").into());
                m.insert("item".into(), item.clone());
                content.push(with_origin(m, NAME));
            }
            Some(_) => content.push(origin::opaque(NAME, item.clone())),
            None => return Err(Error::invalid(format!("{path}.type"), "expected a string")),
        }
    }
    let finish = match status {
        Some("completed") => Some(
            if calls {
                "tool-calls"
            } else if refused {
                "refusal"
            } else {
                "stop"
            }
            .to_string(),
        ),
        Some("incomplete") => Some(match crate::types::pointer(body, "/incomplete_details/reason").and_then(Value::as_str) {
            Some("max_output_tokens") => "max-tokens".to_string(),
            Some("content_filter") => "content-filter".to_string(),
            Some(other) => other.to_string(),
            None => "incomplete".to_string(),
        }),
        _ => None,
    };
    let usage = match body.get("usage") {
        Some(u) if u.is_object() => Some(super::usage_from_provider(NAME, u)?),
        _ => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = body.get("model").and_then(Value::as_str).map(|m| Provenance {
        provider: NAME.to_string(),
        model: m.to_string(),
        extra: JsonMap::new(),
    });
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// Parses the answer of `POST /responses/compact` (`{"id", "object": "response.compaction",
/// "output": [items], "usage"}`): the compacted window's items verbatim (the retained user
/// messages, then the compaction item), its usage, and its id. A body of another shape is an
/// error naming the field.
pub(crate) fn parse_compacted(body: &Value) -> Result<(Vec<Value>, Option<crate::types::Usage>, Option<String>)> {
    as_object(body, "response")?;
    match body.get("object").and_then(Value::as_str) {
        None | Some("response.compaction") => {}
        Some(other) => {
            return Err(Error::invalid(
                "response.object",
                format!("is {other:?}: a POST /responses/compact answer is a \"response.compaction\" object"),
            ))
        }
    }
    let items = match body.get("output") {
        Some(Value::Array(a)) => a.clone(),
        None => return Err(Error::invalid("response.output", "is required (the compacted window's items)")),
        Some(v) => return Err(Error::invalid("response.output", format!("expected an array, got {}", crate::types::kind_of(v)))),
    };
    for (i, item) in items.iter().enumerate() {
        as_object(item, &format!("response.output[{i}]"))?;
    }
    let usage = match body.get("usage") {
        Some(u) if u.is_object() => Some(super::usage_from_provider(NAME, u)?),
        _ => None,
    };
    Ok((items, usage, body.get("id").and_then(Value::as_str).map(str::to_string)))
}

/// A text block; with the output message's id (native state) when it has one.
/// A text block of an output message part (`refusal`: a refusal part, marked as such).
fn native_text(text: &str, item_id: Option<&str>, refusal: bool) -> Block {
    match item_id {
        None if refusal => super::refusal_block(text),
        None => Block::text(text),
        Some(id) => {
            let mut m = JsonMap::new();
            m.insert("type".into(), "text".into());
            m.insert("text".into(), text.into());
            if refusal {
                m.insert(super::response::REFUSAL.into(), true.into());
            }
            m.insert("itemId".into(), id.into());
            with_origin(m, NAME)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{parse_response, Renderer};
    use crate::ErrorKind;

    fn env(messages: Value) -> Value {
        json!({"provider":"openai","model":"gpt-x","messages":messages,"sessionId":"s","purpose":"conversation"})
    }

    fn input(body: &Value) -> &Vec<Value> {
        body["input"].as_array().unwrap()
    }

    fn r(e: &Value) -> Result<Value> {
        render_responses(e, &RenderOptions::default())
    }

    #[test]
    fn the_cache_key_is_the_session_id_by_default_and_can_be_changed() {
        use crate::render::CacheKey;
        let e = env(json!([{"role":"user","content":[{"type":"text","text":"hi"}]}]));
        assert_eq!(r(&e).unwrap()["prompt_cache_key"], "s");
        let off = render_responses(&e, &RenderOptions::default().with_cache_key(CacheKey::Off)).unwrap();
        assert!(off.get("prompt_cache_key").is_none());
        let o = RenderOptions::default().with_cache_key(CacheKey::Custom("tenant-7".into())).with_cache_retention("24h");
        let custom = render_responses(&e, &o).unwrap();
        assert_eq!((&custom["prompt_cache_key"], &custom["prompt_cache_retention"]), (&json!("tenant-7"), &json!("24h")));
        // A key in the call config wins over the default, and collides with an explicit one.
        let mut cfg = e.clone();
        cfg["prompt_cache_key"] = "from-config".into();
        assert_eq!(r(&cfg).unwrap()["prompt_cache_key"], "from-config");
        let err = render_responses(&cfg, &RenderOptions::default().with_cache_key(CacheKey::Custom("k".into()))).unwrap_err();
        assert!(err.message().contains("prompt_cache_key"), "{}", err.message());
    }

    #[test]
    fn header_fields_are_mapped() {
        let e = json!({
            "provider":"openai","model":"gpt-5","reasoningEffort":"low","temperature":0.5,"maxTokens":900,
            "system":"Be brief.","prompt_cache_key":"k1",
            "tools":[{"name":"read","description":"Read a file","parameters":{"type":"object"},"strict":false}],
            "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "sessionId":"s","purpose":"conversation","turn":0,"step":0
        });
        assert_eq!(
            r(&e).unwrap(),
            json!({
                "model":"gpt-5","instructions":"Be brief.",
                "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],
                "tools":[{"type":"function","name":"read","description":"Read a file","parameters":{"type":"object"},"strict":false}],
                "max_output_tokens":900,"temperature":0.5,"reasoning":{"effort":"low"},
                "include":["reasoning.encrypted_content"],"store":false,"prompt_cache_key":"k1"
            })
        );
    }

    #[test]
    fn stop_store_and_include() {
        let err = r(&json!({"model":"m","messages":[],"stop":["x"]})).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.message(), "stop: the Responses API has no stop sequences, so the openai-responses renderer cannot send them");
        let err = r(&json!({"model":"m","messages":[],"store":true})).unwrap_err();
        assert!(err.message().starts_with("store: unknown config field collides"), "{}", err.message());
        let body = r(&json!({"model":"m","messages":[],"include":["web_search_call.action.sources"],"reasoningEffort":"high"})).unwrap();
        assert_eq!(body["include"], json!(["web_search_call.action.sources", "reasoning.encrypted_content"]));
        let body = r(&json!({"model":"m","messages":[],"include":["reasoning.encrypted_content"]})).unwrap();
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(r(&json!({"model":"m","messages":[]})).unwrap(), json!({"model":"m","input":[],"store":false}));
        let err = r(&json!({"model":"m","messages":[],"include":"x"})).unwrap_err();
        assert_eq!(err.message(), "include: expected an array, got a string");
        let err =
            r(&json!({"model":"m","messages":[],"tools":[{"name":"a","description":"d","parameters":{},"type":"custom"}]})).unwrap_err();
        assert!(err.message().starts_with("tools[0].type: expected \"function\" or \"provider\", got \"custom\""), "{}", err.message());
    }

    #[test]
    fn user_messages_cut_into_runs() {
        let body = r(&env(json!([
            {"role":"system","content":[{"type":"text","text":"policy"}]},
            {"role":"user","content":[
                {"type":"text","text":"look"},{"type":"image","mediaType":"image/png","data":"AAAA"},
                {"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                {"type":"text","text":""},
                {"type":"tool-result","toolCallId":"c2","isError":true,"content":[{"type":"image","url":"https://x/y.png","detail":"low"}]}
            ]},
            {"role":"user","content":[]}
        ])))
        .unwrap();
        assert_eq!(
            input(&body),
            &vec![
                json!({"type":"message","role":"system","content":[{"type":"input_text","text":"policy"}]}),
                json!({"type":"message","role":"user","content":[{"type":"input_text","text":"look"},
                    {"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"auto"}]}),
                json!({"type":"function_call_output","call_id":"c1","output":"a\nb"}),
                json!({"type":"function_call_output","call_id":"c2","output":[
                    {"type":"input_image","image_url":"https://x/y.png","detail":"low"}]}),
                // A user message whose text is all empty stays (as an empty text).
                json!({"type":"message","role":"user","content":[{"type":"input_text","text":""}]}),
            ]
        );
    }

    #[test]
    fn assistant_items_carry_native_state_back() {
        let reasoning_item =
            json!({"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"plan"}],"encrypted_content":"ENC"});
        let body = r(&env(json!([
            {"role":"assistant","content":[
                {"type":"reasoning","text":"plan","origin":"openai-responses","item":reasoning_item},
                {"type":"reasoning","text":"no encrypted content","origin":"openai-responses","item":{"type":"reasoning","id":"rs_2","summary":[]}},
                {"type":"reasoning","text":"from elsewhere","signature":"sig"},
                {"type":"reasoning","text":"gemini thought","origin":"gemini","thoughtSignature":"ts"},
                {"type":"redacted-thinking","data":"x"},
                {"type":"text","text":"a","origin":"openai-responses","itemId":"msg_1"},
                {"type":"text","text":"b","origin":"openai-responses","itemId":"msg_1"},
                {"type":"text","text":"c"},
                {"type":"tool-call","id":"call_1","name":"read","arguments":"{\"p\":1}","origin":"openai-responses","itemId":"fc_1"},
                {"type":"tool-call","id":"call_2","name":"ls","arguments":"{}","origin":"gemini","thoughtSignature":"ts"},
                {"type":"opaque","origin":"openai-responses","item":{"type":"compaction","id":"cmp_1","encrypted_content":"CMP"}},
                {"type":"opaque","origin":"anthropic","item":{"type":"compaction","content":"x"}}
            ]}
        ])))
        .unwrap();
        assert_eq!(
            input(&body),
            &vec![
                reasoning_item,
                json!({"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[
                    {"type":"output_text","text":"a","annotations":[]},{"type":"output_text","text":"b","annotations":[]}]}),
                json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]}]}),
                json!({"type":"function_call","id":"fc_1","call_id":"call_1","name":"read","arguments":"{\"p\":1}"}),
                json!({"type":"function_call","call_id":"call_2","name":"ls","arguments":"{}"}),
                json!({"type":"compaction","id":"cmp_1","encrypted_content":"CMP"}),
            ]
        );
    }

    #[test]
    fn errors_name_the_block() {
        let cases = [
            (
                json!([{"role":"user","content":[{"type":"reasoning","text":"r"}]}]),
                "messages[0].content[0]: block type \"reasoning\" is not supported in a user message by the openai-responses renderer",
            ),
            (
                json!([{"role":"assistant","content":[{"type":"image","url":"u"}]}]),
                "messages[0].content[0]: block type \"image\" is not supported in an assistant message by the openai-responses renderer",
            ),
            (
                json!([{"role":"assistant","content":[{"type":"opaque","item":{}}]}]),
                "messages[0].content[0].origin: is required (an opaque block names the format of its item)",
            ),
            (
                json!([{"role":"assistant","content":[{"type":"opaque","origin":"openai-responses","item":[]}]}]),
                "messages[0].content[0].item: expected an object, got an array",
            ),
            (
                json!([{"role":"assistant","content":[{"type":"text","text":"t","origin":"openai-responses","itemId":1}]}]),
                "messages[0].content[0].itemId: expected a string, got a number",
            ),
            (
                json!([{"role":"system","content":[{"type":"image","url":"u"}]}]),
                "messages[0].content[0]: block type \"image\" is not supported in a system message by the openai-responses renderer",
            ),
        ];
        for (messages, want) in cases {
            let e = r(&env(messages)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
    }

    fn response_body() -> Value {
        json!({
            "id":"resp_1","object":"response","status":"completed","model":"gpt-5-2025",
            "output":[
                {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"first"},{"type":"summary_text","text":"second"}],"encrypted_content":"ENC"},
                {"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Reading.","annotations":[]}]},
                {"type":"function_call","id":"fc_1","call_id":"call_1","name":"read","arguments":"{\"path\":\"a\"}","status":"completed"},
                {"type":"compaction","id":"cmp_1","encrypted_content":"CMP"}
            ],
            "usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":900},"output_tokens":50,
                     "output_tokens_details":{"reasoning_tokens":30},"total_tokens":1050}
        })
    }

    #[test]
    fn response_items_become_blocks() {
        let p = parse_response(Renderer::OpenAiResponses, &response_body()).unwrap();
        let c: Vec<Value> = p.message.content.iter().map(|b| b.clone().into_value()).collect();
        assert_eq!(c[0]["type"], "reasoning");
        assert_eq!(c[0]["text"], "first\n\nsecond");
        assert_eq!(c[0]["item"]["encrypted_content"], "ENC");
        assert_eq!(c[1], json!({"type":"text","text":"Reading.","origin":"openai-responses","itemId":"msg_1"}));
        assert_eq!(
            c[2],
            json!({"type":"tool-call","id":"call_1","name":"read","arguments":"{\"path\":\"a\"}","origin":"openai-responses","itemId":"fc_1"})
        );
        assert_eq!(
            c[3],
            json!({"type":"opaque","origin":"openai-responses","item":{"type":"compaction","id":"cmp_1","encrypted_content":"CMP"}})
        );
        assert_eq!(p.finish_reason.as_deref(), Some("tool-calls"));
        let u = p.usage.unwrap();
        assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens), (100, Some(900), 50, Some(30)));
        assert_eq!(p.message.provenance.unwrap().provider, "openai-responses");
    }

    #[test]
    fn parsed_output_renders_back_to_the_same_items() {
        let body = response_body();
        let p = parse_response(Renderer::OpenAiResponses, &body).unwrap();
        let e = env(json!([{"role":"user","content":[{"type":"text","text":"go"}]}, p.message.to_value()]));
        let rendered = r(&e).unwrap();
        let mut want: Vec<Value> = body["output"].as_array().unwrap().clone();
        // Sent back as they came, less the statuses the renderer does not repeat.
        want[2].as_object_mut().unwrap().remove("status");
        assert_eq!(input(&rendered)[1..], want[..]);
    }

    #[test]
    fn finish_reasons_and_failures() {
        let mut b = json!({"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"cut"}]}]});
        let p = parse_response(Renderer::OpenAiResponses, &b).unwrap();
        assert_eq!(p.finish_reason.as_deref(), Some("max-tokens"));
        assert_eq!(p.message.content[0], Block::text("cut"));
        b["status"] = json!("completed");
        assert_eq!(parse_response(Renderer::OpenAiResponses, &b).unwrap().finish_reason.as_deref(), Some("stop"));
        let e = parse_response(
            Renderer::OpenAiResponses,
            &json!({"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}),
        )
        .unwrap_err();
        assert_eq!(e.message(), "response.status: the response failed: server_error: boom");
        assert_eq!(e.detail()["providerError"]["code"], "server_error");
        let e = parse_response(Renderer::OpenAiResponses, &json!({"output":[{"type":"function_call","name":"x"}]})).unwrap_err();
        assert_eq!(e.message(), "response.output[0].call_id: expected a non-empty string");
        let e = parse_response(Renderer::OpenAiResponses, &json!({"output":{}})).unwrap_err();
        assert_eq!(e.message(), "response.output: expected an array, got an object");
    }
}
