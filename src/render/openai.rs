//! The OpenAI-compatible chat-completions renderer (OpenAI, DeepSeek, llama.cpp, vLLM).
//!
//! Mapping, per envelope message (a pure function of that message; see `docs/render.md`):
//! - system prompt → a first `{"role":"system","content":<string>}` message;
//! - system-role message → `{"role":"system","content":<text blocks joined by "\n">}`;
//! - user message → its blocks cut into runs: each `tool-result` block becomes a
//!   `{"role":"tool","tool_call_id","content"}` message, every run of other blocks becomes a
//!   `{"role":"user","content"}` message (a string, or content parts when it holds an image or
//!   a file);
//! - assistant message → one message with `content` (text blocks joined by "\n"; `null` when
//!   there is no text but there are tool calls or a refusal), `refusal` (text blocks marked
//!   `"refusal": true`, joined by "\n"), `reasoning_content` (reasoning blocks joined by
//!   "\n", present whenever the message has a reasoning block) and `tool_calls`.

use super::media::{self, Kind, Media, Source};
use super::{block_path, breakpoint, origin, unsupported, Envelope, RenderOptions};
use crate::error::{Error, Result};
use crate::types::{Block, JsonMap, Message, Role};
use serde_json::{json, Value};

const NAME: &str = "openai";

/// Renders an envelope into an OpenAI-compatible chat-completions body, with the default
/// [`RenderOptions`] (`Renderer::OpenAi.render` takes others).
///
/// The body has `model`, `messages`, and when set `tools`, `max_tokens`, `temperature`, `stop`
/// and `reasoning_effort`; unknown config fields are copied verbatim as top-level body fields
/// (an unknown field that names a body field set here is an error). `prompt_cache_key` is the
/// envelope's `sessionId` unless the options say otherwise or a `prompt_cache_key` config field
/// gives one; `prompt_cache_retention` comes from the options. `stream` and the like are the
/// host's to add.
pub fn render_openai(envelope: &Value) -> Result<Value> {
    render(&Envelope::parse(envelope)?, &RenderOptions::default())
}

pub(super) fn render(env: &Envelope, options: &RenderOptions) -> Result<Value> {
    env.refuse_native("openai")?;
    let mut messages = lead(env);
    let lead = messages.len();
    let (mut prefix_end, mut history_end) = (lead, lead);
    for (i, m) in env.messages.iter().enumerate() {
        render_message(m, i, &mut messages)?;
        if i < options.prefix_len {
            prefix_end = messages.len();
        }
        // A summarisation request's trailing instruction is left out of the history's mark.
        if !(env.compaction && i + 1 == env.messages.len()) {
            history_end = messages.len();
        }
    }
    breakpoint::place_openai(&mut messages, lead, prefix_end, history_end, options, markable, set_breakpoint);
    let mut body = frame(env, options)?;
    body.insert(MESSAGES.into(), Value::Array(messages));
    Ok(Value::Object(body))
}

/// The body field holding the wire messages.
pub(super) const MESSAGES: &str = "messages";

/// The wire messages before the envelope's own: the system prompt.
pub(super) fn lead(env: &Envelope) -> Vec<Value> {
    let mut messages = Vec::with_capacity(env.messages.len() + 1);
    if let Some(system) = &env.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages
}

/// Whether a wire message can carry a `prompt_cache_breakpoint`: a system, user or tool message
/// with text (its content becomes parts when marked); assistant output cannot.
pub(super) fn markable(item: &Value) -> bool {
    if !matches!(item.get("role").and_then(Value::as_str), Some("system" | "developer" | "user" | "tool")) {
        return false;
    }
    match item.get("content") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(parts)) => {
            parts.last().and_then(|p| p.get("type")).and_then(Value::as_str).is_some_and(|t| t == "text" || t == "image_url")
        }
        _ => false,
    }
}

/// Marks a [`markable`] wire message's last content part (a string content becomes one text
/// part) with `prompt_cache_breakpoint`.
pub(super) fn set_breakpoint(item: &mut Value) {
    let bp = breakpoint::openai_breakpoint();
    if let Some(content) = item.get_mut("content") {
        if let Value::String(s) = content {
            *content = json!([{"type": "text", "text": std::mem::take(s)}]);
        }
        if let Some(Value::Object(last)) = content.as_array_mut().and_then(|a| a.last_mut()) {
            last.insert("prompt_cache_breakpoint".into(), bp);
        }
    }
}

/// Every body field but the wire messages, whose place `messages` holds (`null`).
pub(super) fn frame(env: &Envelope, options: &RenderOptions) -> Result<JsonMap> {
    let mut body = JsonMap::new();
    body.insert("model".into(), env.model.clone().into());
    body.insert(MESSAGES.into(), Value::Null);
    // Unknown tool fields (e.g. `strict`) belong to the function object.
    let tools = super::tools_array(env, NAME, |t, t_i| {
        Ok(json!({"type": "function", "function": super::function_tool(t, t_i, "parameters", NAME)?}))
    })?;
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(n) = env.max_tokens {
        body.insert("max_tokens".into(), n.into());
    }
    if let Some(t) = &env.temperature {
        body.insert("temperature".into(), t.clone());
    }
    if let Some(stop) = &env.stop {
        body.insert("stop".into(), Value::Array(stop.clone()));
    }
    if let Some(effort) = &env.reasoning_effort {
        body.insert("reasoning_effort".into(), effort.clone().into());
    }
    // Cache routing (OpenAI routes a request to the machine that holds its prefix by a hash of
    // the prompt's start and this key). An explicit key or retention is set before the
    // pass-through, so a config field of the same name is a collision; the default key gives
    // way to a `prompt_cache_key` config field.
    options.route_explicit(&mut body);
    env.pass_through(&mut body, NAME)?;
    options.route_default(&mut body, env.session_id.as_ref())?;
    Ok(body)
}

/// The wire messages of envelope message `i` (a pure function of that message).
pub(super) fn piece(m: &Message, i: usize) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    render_message(m, i, &mut out)?;
    Ok(out)
}

/// The wire message of a derived history message of the usual shapes, written from the
/// message's text (`crate::log::history::Derived::json`, canonical: what `serde_json` writes)
/// without parsing it into values: a tool result whose content is text blocks, an assistant
/// message of text and tool-call blocks, a user message of text blocks. It writes what
/// [`piece`] writes for them (a wire message's keys in order, the texts joined by `"\n"`: the
/// escaped texts joined by an escaped newline are the escaped joined text), and whether the
/// message can carry a breakpoint ([`markable`]). `None` for any other shape (a block with
/// other fields, an image, reasoning, a refusal, another provider's block, ...): [`piece`]
/// renders it. Debug builds compare the two (`render/body.rs`).
pub(super) fn piece_from_text(json: &str) -> Option<(String, bool)> {
    use crate::log::raw::{blocks, get, members, Members};
    let m = members(json)?;
    let content = blocks(get(&m, "content")?)?;
    // The texts of blocks that are exactly `{"text":…,"type":"text"}`, joined (inside quotes).
    let join = |blocks: &[(&str, Members<'_>)], out: &mut String| -> Option<()> {
        out.push('"');
        for (k, (_, bm)) in blocks.iter().enumerate() {
            if bm.len() != 2 || get(bm, "type")? != "\"text\"" {
                return None;
            }
            let t = get(bm, "text")?;
            if k > 0 {
                out.push_str("\\n");
            }
            out.push_str(t.strip_prefix('"')?.strip_suffix('"')?);
        }
        out.push('"');
        Some(())
    };
    let mut out = String::with_capacity(json.len() + 64);
    match get(&m, "role")? {
        "\"user\"" => {
            let tool_result = content.first().map(|(_, bm)| bm).filter(|bm| get(bm, "type") == Some("\"tool-result\""));
            match tool_result {
                Some(bm) => {
                    if content.len() != 1 {
                        return None;
                    }
                    let inner = blocks(get(bm, "content")?)?;
                    out.push_str("{\"content\":");
                    join(&inner, &mut out)?;
                    out.push_str(",\"role\":\"tool\",\"tool_call_id\":");
                    out.push_str(get(bm, "toolCallId")?);
                }
                None => {
                    out.push_str("{\"content\":");
                    join(&content, &mut out)?;
                    out.push_str(",\"role\":\"user\"");
                }
            }
            out.push('}');
            let markable = !out.starts_with("{\"content\":\"\"");
            Some((out, markable))
        }
        "\"assistant\"" => {
            let (mut texts, mut calls) = (Vec::new(), Vec::new());
            for b in content {
                match (get(&b.1, "type")?, b.1.len()) {
                    ("\"text\"", 2) => texts.push(b),
                    ("\"tool-call\"", 4) => calls.push(b.1),
                    _ => return None,
                }
            }
            out.push_str("{\"content\":");
            if texts.is_empty() && !calls.is_empty() {
                out.push_str("null");
            } else {
                join(&texts, &mut out)?;
            }
            out.push_str(",\"role\":\"assistant\"");
            if !calls.is_empty() {
                out.push_str(",\"tool_calls\":[");
                for (k, c) in calls.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    out.push_str("{\"function\":{\"arguments\":");
                    out.push_str(get(c, "arguments")?);
                    out.push_str(",\"name\":");
                    out.push_str(get(c, "name")?);
                    out.push_str("},\"id\":");
                    out.push_str(get(c, "id")?);
                    out.push_str(",\"type\":\"function\"}");
                }
                out.push(']');
            }
            out.push('}');
            Some((out, false))
        }
        _ => None,
    }
}

/// Renders envelope message `i`, appending one or more wire messages to `out`.
fn render_message(m: &Message, i: usize, out: &mut Vec<Value>) -> Result<()> {
    match m.role {
        Role::System => {
            let mut texts = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                match b.kind() {
                    "text" => texts.push(b.get_str("text").unwrap_or_default()),
                    _ => return Err(unsupported(&block_path(i, j), b, Role::System, NAME)),
                }
            }
            out.push(json!({"role": "system", "content": texts.join("\n")}));
        }
        Role::User => {
            let mut run: Vec<(usize, &Block)> = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                match b.kind() {
                    // Another provider's native state (docs/render.md, "Provider-native blocks").
                    _ if origin::is_foreign(b, NAME) => {}
                    "tool-result" => {
                        if !run.is_empty() {
                            out.push(user_message(&run, i)?);
                            run.clear();
                        }
                        out.push(tool_message(b, i, j)?);
                    }
                    "text" | "image" | "file" => run.push((j, b)),
                    _ => return Err(unsupported(&block_path(i, j), b, Role::User, NAME)),
                }
            }
            // A message with no blocks still becomes a (blank) user message: dropping it would
            // make the wire depend on more than this one message's shape.
            if !run.is_empty() || m.content.is_empty() {
                out.push(user_message(&run, i)?);
            }
        }
        Role::Assistant => {
            let mut texts = Vec::new();
            let mut refusals = Vec::new();
            let mut reasoning: Option<Vec<&str>> = None;
            let mut calls = Vec::new();
            for (j, b) in m.content.iter().enumerate() {
                match b.kind() {
                    _ if origin::is_foreign(b, NAME) => {}
                    // A refusal goes back where OpenAI put it, beside `content`.
                    "text" if super::is_refusal(b) => refusals.push(b.get_str("text").unwrap_or_default()),
                    "text" => texts.push(b.get_str("text").unwrap_or_default()),
                    "reasoning" => reasoning.get_or_insert_with(Vec::new).push(b.get_str("text").unwrap_or_default()),
                    "tool-call" => {
                        let (id, name, arguments) = b.as_tool_call().expect("validated tool-call");
                        calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }));
                    }
                    // Anthropic's redacted thinking has no OpenAI-compatible form.
                    "redacted-thinking" => {}
                    _ => return Err(unsupported(&block_path(i, j), b, Role::Assistant, NAME)),
                }
            }
            let mut msg = JsonMap::new();
            msg.insert("role".into(), "assistant".into());
            let content =
                if texts.is_empty() && (!calls.is_empty() || !refusals.is_empty()) { Value::Null } else { texts.join("\n").into() };
            msg.insert("content".into(), content);
            if !refusals.is_empty() {
                msg.insert("refusal".into(), refusals.join("\n").into());
            }
            if let Some(r) = reasoning {
                msg.insert("reasoning_content".into(), r.join("\n").into());
            }
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
        }
    }
    Ok(())
}

/// A user message from a run of text, image and file blocks: a string when it is all text,
/// else content parts.
fn user_message(run: &[(usize, &Block)], i: usize) -> Result<Value> {
    if run.iter().all(|(_, b)| b.kind() == "text") {
        let texts: Vec<&str> = run.iter().map(|(_, b)| b.get_str("text").unwrap_or_default()).collect();
        return Ok(json!({"role": "user", "content": texts.join("\n")}));
    }
    let mut parts = Vec::with_capacity(run.len());
    for (j, b) in run {
        parts.push(match b.kind() {
            "text" => json!({"type": "text", "text": b.get_str("text").unwrap_or_default()}),
            _ => media_part(b, &block_path(i, *j))?,
        });
    }
    Ok(json!({"role": "user", "content": parts}))
}

/// The content part of an image or file block: `image_url` for an image (by URL or inline),
/// `input_audio` for WAV or MP3 audio given inline, `file` for a document given inline or by
/// file id. Anything else is refused, naming the block and the format.
fn media_part(b: &Block, path: &str) -> Result<Value> {
    let m = media::read(b, path)?;
    match (m.kind, m.source) {
        (Kind::Image, Source::Url(_) | Source::Data(_)) => Ok(json!({"type": "image_url", "image_url": {"url": m.url()}})),
        (Kind::Image, Source::FileId(_)) => {
            Err(media::cannot_carry(path, &m, NAME, "chat completions take an image by URL or inline data, not by file id"))
        }
        (Kind::Audio, Source::Data(data)) => match audio_format(&m) {
            Some(format) => Ok(json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})),
            None => Err(media::cannot_carry(path, &m, NAME, "input_audio takes WAV (audio/wav) or MP3 (audio/mpeg) only")),
        },
        (Kind::Audio, _) => Err(media::cannot_carry(path, &m, NAME, "input_audio takes inline data (base64) only, not a URL or a file id")),
        (Kind::Video, _) => Err(media::cannot_carry(path, &m, NAME, "chat completions take no video")),
        (Kind::Document, Source::Url(_)) => {
            Err(media::cannot_carry(path, &m, NAME, "the file part takes inline data or a file id, not a URL"))
        }
        (Kind::Document, source) => {
            let mut file = JsonMap::new();
            match source {
                Source::FileId(id) => file.insert("file_id".into(), id.into()),
                _ => file.insert("file_data".into(), m.url().into()),
            };
            if let Some(name) = m.filename {
                file.insert("filename".into(), name.into());
            }
            Ok(json!({"type": "file", "file": file}))
        }
    }
}

/// `input_audio`'s `format` for an audio media type: `wav` or `mp3`.
fn audio_format(m: &Media<'_>) -> Option<&'static str> {
    match m.media_type? {
        "audio/wav" | "audio/x-wav" | "audio/wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" => Some("mp3"),
        _ => None,
    }
}

/// A `tool` message from a tool-result block. OpenAI-compatible tool messages carry text only,
/// and have no error flag: `isError` is not rendered (the result text should say so).
fn tool_message(b: &Block, i: usize, j: usize) -> Result<Value> {
    let path = block_path(i, j);
    let mut texts = Vec::new();
    for (k, inner) in b.tool_result_content().iter().enumerate() {
        match inner.kind() {
            "text" => texts.push(inner.get_str("text").unwrap_or_default().to_string()),
            other => {
                return Err(Error::invalid(
                    format!("{path}.content[{k}]"),
                    format!(
                        "block type {other:?} inside a tool result is not supported by the \
                         {NAME} renderer (OpenAI-compatible tool messages carry text only)"
                    ),
                )
                .with("blockType", other))
            }
        }
    }
    Ok(json!({
        "role": "tool",
        "tool_call_id": b.tool_result_id().expect("validated tool-result"),
        "content": texts.join("\n"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::CacheKey;
    use crate::ErrorKind;

    fn env(messages: Value) -> Value {
        json!({"provider":"openai","model":"gpt-x","messages":messages,"sessionId":"s","purpose":"conversation"})
    }

    fn msgs(body: &Value) -> &Vec<Value> {
        body["messages"].as_array().unwrap()
    }

    #[test]
    fn header_fields_are_mapped() {
        let e = json!({
            "provider":"deepseek","model":"deepseek-chat","reasoningEffort":"high","temperature":0.25,
            "maxTokens":512,"stop":["END"],"system":"Be brief.",
            "tools":[{"name":"read","description":"Read a file","parameters":{"type":"object"},"strict":true}],
            "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "sessionId":"s","purpose":"conversation","turn":0,"step":0
        });
        let body = render_openai(&e).unwrap();
        assert_eq!(
            body,
            json!({
                "model":"deepseek-chat",
                "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],
                "tools":[{"type":"function","function":{"name":"read","description":"Read a file",
                          "parameters":{"type":"object"},"strict":true}}],
                "max_tokens":512,"temperature":0.25,"stop":["END"],"reasoning_effort":"high",
                "prompt_cache_key":"s"
            })
        );
    }

    fn with(options: RenderOptions, e: &Value) -> Result<Value> {
        render(&Envelope::parse(e)?, &options)
    }

    #[test]
    fn prompt_cache_key_is_the_session_id_unless_told_otherwise() {
        let e = env(json!([{"role":"user","content":[{"type":"text","text":"q"}]}]));
        let bytes = |b: Value| serde_json::to_string(&b).unwrap();
        // Default: the envelope's sessionId, in the rendered bytes.
        let body = bytes(render_openai(&e).unwrap());
        assert!(body.contains(r#""prompt_cache_key":"s""#), "{body}");
        assert!(!body.contains("prompt_cache_retention"), "{body}");
        // Off.
        let body = bytes(with(RenderOptions::default().with_cache_key(CacheKey::Off), &e).unwrap());
        assert!(!body.contains("prompt_cache_key"), "{body}");
        // Overridden, and a retention.
        let o = RenderOptions::default().with_cache_key(CacheKey::Custom("tenant-7".into())).with_cache_retention("24h");
        let body = bytes(with(o, &e).unwrap());
        assert!(body.contains(r#""prompt_cache_key":"tenant-7""#) && body.contains(r#""prompt_cache_retention":"24h""#), "{body}");
        // No session id, no default key.
        let mut bare = e.clone();
        bare.as_object_mut().unwrap().remove("sessionId");
        assert!(render_openai(&bare).unwrap().get("prompt_cache_key").is_none());
        // A config field gives the key when the options leave the default...
        let mut cfg = e.clone();
        cfg["prompt_cache_key"] = json!("from-config");
        assert_eq!(render_openai(&cfg).unwrap()["prompt_cache_key"], json!("from-config"));
        // ...and collides with an explicit one, as with a retention set twice.
        let err = with(RenderOptions::default().with_cache_key(CacheKey::Custom("k".into())), &cfg).unwrap_err();
        assert!(err.message().starts_with("prompt_cache_key: unknown config field collides"), "{}", err.message());
        let mut ret = e.clone();
        ret["prompt_cache_retention"] = json!("in_memory");
        assert_eq!(render_openai(&ret).unwrap()["prompt_cache_retention"], json!("in_memory"));
        let err = with(RenderOptions::default().with_cache_retention("24h"), &ret).unwrap_err();
        assert!(err.message().starts_with("prompt_cache_retention: unknown config field collides"), "{}", err.message());
        // The summarisation request of a session gets the same key as its conversation.
        let mut summary = e.clone();
        summary["purpose"] = json!("compaction");
        assert_eq!(render_openai(&summary).unwrap()["prompt_cache_key"], render_openai(&e).unwrap()["prompt_cache_key"]);
    }

    #[test]
    fn empty_system_tools_and_stop_are_left_out() {
        let e = json!({"model":"m","system":"","tools":[],"stop":[],"messages":[]});
        assert_eq!(render_openai(&e).unwrap(), json!({"model":"m","messages":[]}));
    }

    #[test]
    fn unknown_config_fields_pass_through_verbatim() {
        let e = json!({"model":"m","messages":[],"top_p":0.9,"thinking":{"type":"enabled"},"maxTokens":5});
        let body = render_openai(&e).unwrap();
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["thinking"], json!({"type":"enabled"}));
        // A pass-through field may supply a body field the renderer did not set...
        let e = json!({"model":"m","messages":[],"max_completion_tokens":100});
        assert_eq!(render_openai(&e).unwrap()["max_completion_tokens"], json!(100));
        let e = json!({"model":"m","messages":[],"max_tokens":100});
        assert_eq!(render_openai(&e).unwrap()["max_tokens"], json!(100));
        // ...but never replace one it did set.
        let e = json!({"model":"m","messages":[],"maxTokens":5,"max_tokens":100});
        let err = render_openai(&e).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().starts_with("max_tokens: unknown config field collides"), "{}", err.message());
    }

    #[test]
    fn system_role_messages_stay_in_place() {
        let body = render_openai(&env(json!([
            {"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"user","content":[{"type":"text","text":"q"}]}
        ])))
        .unwrap();
        assert_eq!(msgs(&body)[0], json!({"role":"system","content":"a\nb"}));
        assert_eq!(msgs(&body)[1], json!({"role":"user","content":"q"}));
    }

    #[test]
    fn assistant_tool_calls_reasoning_and_text() {
        let body = render_openai(&env(json!([
            {"role":"assistant","content":[
                {"type":"reasoning","text":"think"},
                {"type":"text","text":"Let me look."},
                {"type":"tool-call","id":"c1","name":"read","arguments":"{\"path\":\"a\"}"},
                {"type":"tool-call","id":"c2","name":"read","arguments":"not json"}
            ],"provenance":{"provider":"deepseek","model":"r"}}
        ])))
        .unwrap();
        assert_eq!(
            msgs(&body)[0],
            json!({"role":"assistant","content":"Let me look.","reasoning_content":"think","tool_calls":[
                {"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}},
                {"id":"c2","type":"function","function":{"name":"read","arguments":"not json"}}
            ]})
        );
    }

    #[test]
    fn assistant_content_is_null_only_for_pure_tool_calls() {
        let body = render_openai(&env(json!([
            {"role":"assistant","content":[{"type":"tool-call","id":"c","name":"t","arguments":"{}"}]},
            {"role":"assistant","content":[{"type":"reasoning","text":""}]},
            {"role":"assistant","content":[]}
        ])))
        .unwrap();
        assert_eq!(msgs(&body)[0]["content"], Value::Null);
        // An empty reasoning block still yields reasoning_content (DeepSeek wants it back).
        assert_eq!(msgs(&body)[1], json!({"role":"assistant","content":"","reasoning_content":""}));
        assert_eq!(msgs(&body)[2], json!({"role":"assistant","content":""}));
    }

    #[test]
    fn tool_results_become_tool_messages() {
        let body = render_openai(&env(json!([
            {"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":true,
              "content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]}]},
            {"role":"user","content":[{"type":"tool-result","toolCallId":"c2","isError":false,"content":[]}]},
            {"role":"user","content":[
                {"type":"text","text":"before"},
                {"type":"tool-result","toolCallId":"c3","isError":false,"content":[{"type":"text","text":"r"}]},
                {"type":"text","text":"after"}
            ]}
        ])))
        .unwrap();
        assert_eq!(
            msgs(&body),
            &vec![
                json!({"role":"tool","tool_call_id":"c1","content":"line 1\nline 2"}),
                json!({"role":"tool","tool_call_id":"c2","content":""}),
                json!({"role":"user","content":"before"}),
                json!({"role":"tool","tool_call_id":"c3","content":"r"}),
                json!({"role":"user","content":"after"}),
            ]
        );
    }

    #[test]
    fn user_text_and_images() {
        let body = render_openai(&env(json!([
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"user","content":[]},
            {"role":"user","content":[
                {"type":"text","text":"see"},
                {"type":"image","mediaType":"image/png","data":"AAAA"},
                {"type":"image","url":"https://example.com/cat.jpg","detail":"low"}
            ]}
        ])))
        .unwrap();
        assert_eq!(msgs(&body)[0], json!({"role":"user","content":"a\nb"}));
        assert_eq!(msgs(&body)[1], json!({"role":"user","content":""}));
        assert_eq!(
            msgs(&body)[2],
            json!({"role":"user","content":[
                {"type":"text","text":"see"},
                {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
                {"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}}
            ]})
        );
    }

    #[test]
    fn unsupported_blocks_are_errors_naming_the_block() {
        let cases = [
            (json!([{"role":"user","content":[{"type":"text","text":"x"},{"type":"audio","data":"z"}]}]),
             "messages[0].content[1]: block type \"audio\" is not supported in a user message by the openai renderer"),
            (json!([{"role":"user","content":[]},{"role":"user","content":[{"type":"reasoning","text":"r"}]}]),
             "messages[1].content[0]: block type \"reasoning\" is not supported in a user message by the openai renderer"),
            (json!([{"role":"user","content":[{"type":"tool-call","id":"c","name":"n","arguments":""}]}]),
             "messages[0].content[0]: block type \"tool-call\" is not supported in a user message by the openai renderer"),
            (json!([{"role":"assistant","content":[{"type":"image","url":"u"}]}]),
             "messages[0].content[0]: block type \"image\" is not supported in an assistant message by the openai renderer"),
            (json!([{"role":"assistant","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}]}]),
             "messages[0].content[0]: block type \"tool-result\" is not supported in an assistant message by the openai renderer"),
            (json!([{"role":"system","content":[{"type":"image","url":"u"}]}]),
             "messages[0].content[0]: block type \"image\" is not supported in a system message by the openai renderer"),
            (json!([{"role":"user","content":[{"type":"tool-result","toolCallId":"c","isError":false,
                     "content":[{"type":"image","url":"u"}]}]}]),
             "messages[0].content[0].content[0]: block type \"image\" inside a tool result is not supported by the openai renderer (OpenAI-compatible tool messages carry text only)"),
            (json!([{"role":"user","content":[{"type":"image","mediaType":"image/png"}]}]),
             "messages[0].content[0]: an image block needs \"url\", or \"data\" (base64) with its \"mediaType\""),
            (json!([{"role":"user","content":[{"type":"image","url":"https://x/y.png","data":"AAAA"}]}]),
             "messages[0].content[0]: an image block has both \"url\" and \"data\"; give one"),
        ];
        for (messages, want) in cases {
            let e = render_openai(&env(messages)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
    }
}
