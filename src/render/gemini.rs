//! Gemini `generateContent` (`POST .../models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse`): the renderer and the response parser.
//!
//! Mapping (`docs/providers/gemini.md` has the reasons):
//! - system prompt, then the text of every system-role **prefix** message → `systemInstruction`
//!   parts (a system-role message after the prefix is an error, as for Anthropic);
//! - user message → a `user` content: `text`, `inlineData` / `fileData` (images and files) and
//!   `functionResponse` parts (the function's name is the earlier call's);
//! - assistant message → a `model` content: `text`, `thought` text (reasoning parsed from
//!   Gemini), `functionCall` parts, and opaque Gemini parts verbatim, each with the
//!   `thoughtSignature` it came with;
//! - consecutive user messages that hold only tool results are merged into one content (all
//!   responses of a step answer it together); empty contents are left out;
//! - tools → one `functionDeclarations` tool; `temperature`, `maxTokens`, `stop` and
//!   `reasoningEffort` → `generationConfig`.
//!
//! The model is not a body field: it names the URL.

use super::media::{self, Source};
use super::origin::{self, is_foreign, is_native, native_str, with_origin};
use super::{block_path, unsupported, Envelope, ParsedResponse, RenderOptions, ToolOut};
use crate::error::{Error, Result};
use crate::types::{as_object, kind_of, Block, JsonMap, Message, Provenance, Role};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The renderer's name (and the `origin` of blocks its parser keeps native state on).
pub(crate) const NAME: &str = "gemini";

/// Renders an envelope into a Gemini `generateContent` body.
///
/// The body has `contents`, and when set `systemInstruction`, `tools` (one
/// `functionDeclarations` entry; each declaration's schema is sent as `parametersJsonSchema`,
/// which takes standard JSON Schema) and `generationConfig` (`temperature`, `maxOutputTokens`,
/// `stopSequences`, `thinkingConfig.thinkingLevel` from `reasoningEffort`). `model` is not in
/// the body: POST to `models/{model}:generateContent`. Unknown config fields are copied
/// verbatim as top-level body fields (`safetySettings`, `toolConfig`, `cachedContent`, ...),
/// except `generationConfig`, whose keys are merged into the renderer's (a key the renderer
/// sets is an error, as is any other collision). `options.prefix_len` decides which
/// system-role messages may be hoisted into `systemInstruction`.
pub fn render_gemini(envelope: &Value, options: &RenderOptions) -> Result<Value> {
    let env = Envelope::parse(envelope)?;
    env.refuse_native(NAME)?;
    let options = &options.effective(&env, super::Renderer::Gemini)?;
    let prefix_len = options.prefix_len;
    env.check_prefix_len(prefix_len)?;

    let mut system = system_prompt(&env);
    let mut contents: Vec<Content> = Vec::with_capacity(env.messages.len());
    // Tool-call id -> (function name, whether Gemini knows the id), from earlier messages.
    let mut calls: Calls = HashMap::new();
    for (i, m) in env.messages.iter().enumerate() {
        if let Some(c) = piece(m, i, prefix_len, &mut system, &mut calls)? {
            push_merged(&mut contents, c);
        }
    }
    let mut body = frame(&env, system)?;
    body.insert(CONTENTS.into(), Value::Array(contents.into_iter().map(|c| json!({"role": c.role, "parts": c.parts})).collect()));
    Ok(Value::Object(body))
}

/// The body field holding the contents.
pub(super) const CONTENTS: &str = "contents";

/// Tool-call id -> (function name, whether Gemini knows the id).
pub(super) type Calls = HashMap<String, (String, bool)>;

/// The system prompt's part (hoisted system-role prefix messages follow it).
pub(super) fn system_prompt(env: &Envelope) -> Vec<Value> {
    let mut system: Vec<Value> = Vec::new();
    if let Some(s) = &env.system {
        system.push(json!({"text": s}));
    }
    system
}

/// Envelope message `i` rendered: a system-role prefix message goes into `system` (and renders
/// to no content), a user or assistant message to one content, or none when no part survives.
/// The tool calls of an assistant message are noted in `calls` (a tool result needs its
/// function's name).
pub(super) fn piece(m: &Message, i: usize, prefix_len: usize, system: &mut Vec<Value>, calls: &mut Calls) -> Result<Option<Content>> {
    match m.role {
        Role::System => {
            if i >= prefix_len {
                return Err(Error::invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "a system-role message is only supported inside the session prefix (the \
                         first {prefix_len} messages) by the {NAME} renderer"
                    ),
                ));
            }
            for (j, b) in m.content.iter().enumerate() {
                match b.kind() {
                    _ if is_foreign(b, NAME) => {}
                    "text" => {
                        let text = b.get_str("text").unwrap_or_default();
                        if !text.is_empty() {
                            system.push(json!({"text": text}));
                        }
                    }
                    _ => return Err(unsupported(&block_path(i, j), b, Role::System, NAME)),
                }
            }
            Ok(None)
        }
        Role::User => user_content(m, i, calls),
        Role::Assistant => model_content(m, i, calls),
    }
}

/// Every body field but the contents, whose place `contents` holds (`null`).
pub(super) fn frame(env: &Envelope, system: Vec<Value>) -> Result<JsonMap> {
    let mut body = JsonMap::new();
    body.insert(CONTENTS.into(), Value::Null);
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    let tools = super::tools_for(env, NAME)?;
    if !tools.is_empty() {
        // One tool holds every function declaration; each provider tool is a tool of its own,
        // after it, in list order.
        let mut decls = Vec::new();
        let mut provider = Vec::new();
        for (t_i, t) in tools {
            match t {
                ToolOut::Function(t) => decls.push(Value::Object(super::function_tool(t, t_i, "parametersJsonSchema", NAME)?)),
                ToolOut::Provider(tool) => provider.push(Value::Object(tool.clone())),
            }
        }
        let mut out = Vec::with_capacity(provider.len() + 1);
        if !decls.is_empty() {
            out.push(json!({"functionDeclarations": decls}));
        }
        out.extend(provider);
        body.insert("tools".into(), Value::Array(out));
    }

    let mut config = JsonMap::new();
    if let Some(t) = &env.temperature {
        config.insert("temperature".into(), t.clone());
    }
    if let Some(n) = env.max_tokens {
        config.insert("maxOutputTokens".into(), n.into());
    }
    if let Some(stop) = &env.stop {
        config.insert("stopSequences".into(), Value::Array(stop.clone()));
    }
    if let Some(effort) = &env.reasoning_effort {
        config.insert("thinkingConfig".into(), json!({"thinkingLevel": effort}));
    }
    for (k, v) in &env.extra {
        if k == "generationConfig" {
            let extra = as_object(v, "generationConfig")?;
            for (ck, cv) in extra {
                if config.contains_key(ck) {
                    return Err(Error::invalid(
                        format!("generationConfig.{ck}"),
                        format!("collides with the generationConfig field {ck:?} that the {NAME} renderer sets itself"),
                    ));
                }
                config.insert(ck.clone(), cv.clone());
            }
            continue;
        }
        if body.contains_key(k) {
            return Err(Error::invalid(
                k.as_str(),
                format!("unknown config field collides with the body field {k:?} that the {NAME} renderer sets itself"),
            ));
        }
        body.insert(k.clone(), v.clone());
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(body)
}

/// One rendered content.
pub(super) struct Content {
    pub role: &'static str,
    pub parts: Vec<Value>,
    /// Every part is a `functionResponse`: such contents merge with their neighbours.
    pub responses_only: bool,
}

fn push_merged(out: &mut Vec<Content>, c: Content) {
    if let Some(last) = out.last_mut() {
        if c.responses_only && last.responses_only {
            last.parts.extend(c.parts);
            return;
        }
    }
    out.push(c);
}

fn user_content(m: &Message, i: usize, calls: &Calls) -> Result<Option<Content>> {
    let mut parts = Vec::with_capacity(m.content.len());
    for (j, b) in m.content.iter().enumerate() {
        let path = block_path(i, j);
        match b.kind() {
            _ if is_foreign(b, NAME) => {}
            "text" => {
                let text = b.get_str("text").unwrap_or_default();
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
            }
            "image" | "file" => parts.push(media_part(b, &path)?),
            "tool-result" => parts.push(function_response(b, &path, calls)?),
            _ => return Err(unsupported(&path, b, Role::User, NAME)),
        }
    }
    if parts.is_empty() {
        // A user message whose text is all empty is kept as an empty text part: left out, the
        // model's turn after it would open the contents, and Gemini wants a function call turn
        // right after a user turn.
        if !m.content.iter().all(|b| b.kind() == "text") {
            return Ok(None);
        }
        parts.push(json!({"text": ""}));
    }
    let responses_only = parts.iter().all(|p| p.get("functionResponse").is_some());
    Ok(Some(Content { role: "user", parts, responses_only }))
}

fn model_content(m: &Message, i: usize, calls: &mut Calls) -> Result<Option<Content>> {
    let mut parts = Vec::with_capacity(m.content.len());
    for (j, b) in m.content.iter().enumerate() {
        let path = block_path(i, j);
        if is_foreign(b, NAME) {
            continue;
        }
        let native = is_native(b, NAME);
        let signature = if native { native_str(b, "thoughtSignature", &path)? } else { None };
        let mut part = match b.kind() {
            "text" => {
                let text = b.get_str("text").unwrap_or_default();
                if text.is_empty() && signature.is_none() {
                    continue;
                }
                json!({"text": text})
            }
            // Only Gemini's own thoughts go back (other providers' reasoning is not Gemini's).
            "reasoning" if native => json!({"text": b.get_str("text").unwrap_or_default(), "thought": true}),
            "reasoning" | "redacted-thinking" => continue,
            "tool-call" => {
                let (id, name, arguments) = b.as_tool_call().expect("validated tool-call");
                let send_id = native && b.get("syntheticId") != Some(&Value::Bool(true));
                calls.insert(id.to_string(), (name.to_string(), send_id));
                let mut call = JsonMap::new();
                call.insert("name".into(), name.into());
                call.insert("args".into(), args_object(arguments, &path)?);
                if send_id {
                    call.insert("id".into(), id.into());
                }
                json!({"functionCall": call})
            }
            origin::OPAQUE => origin::opaque_item(b, &path)?.clone(),
            _ => return Err(unsupported(&path, b, Role::Assistant, NAME)),
        };
        if let (Some(sig), Value::Object(p)) = (signature, &mut part) {
            p.insert("thoughtSignature".into(), sig.into());
        }
        parts.push(part);
    }
    if parts.is_empty() {
        return Ok(None);
    }
    Ok(Some(Content { role: "model", parts, responses_only: false }))
}

/// A tool call's arguments as the `args` object (empty or blank means `{}`).
fn args_object(arguments: &str, path: &str) -> Result<Value> {
    let field = format!("{path}.arguments");
    if arguments.trim().is_empty() {
        return Ok(Value::Object(JsonMap::new()));
    }
    let parsed: Value = serde_json::from_str(arguments)
        .map_err(|e| Error::invalid(field.as_str(), format!("is not valid JSON, which {NAME} functionCall args need: {e}")))?;
    if !parsed.is_object() {
        return Err(Error::invalid(field, format!("must be a JSON object for {NAME} functionCall args, got {}", kind_of(&parsed))));
    }
    Ok(parsed)
}

/// The part of an image or file block: `inlineData` for inline base64 data (also from a
/// `data:` URL), else `fileData` with the URL or the Files API URI (`fileId`), with the media
/// type when the block names one. Gemini takes images, documents, audio and video alike.
fn media_part(b: &Block, path: &str) -> Result<Value> {
    let m = media::read(b, path)?;
    if let Some((media_type, data)) = m.inline() {
        return Ok(json!({"inlineData": {"mimeType": media_type, "data": data}}));
    }
    let uri = match m.source {
        Source::Url(u) | Source::FileId(u) => u,
        Source::Data(_) => unreachable!("inline data is handled above"),
    };
    let mut file = JsonMap::new();
    if let Some(t) = m.media_type {
        file.insert("mimeType".into(), t.into());
    }
    file.insert("fileUri".into(), uri.into());
    Ok(json!({"fileData": file}))
}

/// A `functionResponse` part: `{"name", "response": {"output": text}}`, or `{"error": text}`
/// for a failed call; `id` when Gemini gave the call one.
fn function_response(b: &Block, path: &str, calls: &Calls) -> Result<Value> {
    let call_id = b.tool_result_id().expect("validated tool-result");
    let Some((name, send_id)) = calls.get(call_id) else {
        return Err(Error::invalid(
            format!("{path}.toolCallId"),
            format!("no earlier tool call {call_id:?} in the envelope (the {NAME} renderer needs the function's name)"),
        ));
    };
    let mut texts = Vec::new();
    for (k, inner) in b.tool_result_content().iter().enumerate() {
        match inner.kind() {
            "text" => texts.push(inner.get_str("text").unwrap_or_default().to_string()),
            other => {
                return Err(Error::invalid(
                    format!("{path}.content[{k}]"),
                    format!(
                        "block type {other:?} inside a tool result is not supported by the {NAME} renderer (function responses carry text)"
                    ),
                )
                .with("blockType", other))
            }
        }
    }
    let key = if b.tool_result_is_error() { "error" } else { "output" };
    let mut response = JsonMap::new();
    response.insert("name".into(), name.clone().into());
    response.insert("response".into(), json!({key: texts.join("\n")}));
    if *send_id {
        response.insert("id".into(), call_id.into());
    }
    Ok(json!({"functionResponse": response}))
}

// ---------------------------------------------------------------------------------------------
// The response parser.

/// Parses a `generateContent` response (`{"candidates":[{"content":{"role":"model","parts"},
/// "finishReason"}],"usageMetadata","modelVersion","responseId"}`). A response with more than
/// one candidate (`candidateCount` > 1) is refused: the log keeps one answer per request.
pub(crate) fn parse(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    if let Some(n) = body.get("candidates").and_then(Value::as_array).map(Vec::len).filter(|n| *n > 1) {
        return Err(
            Error::invalid("response.candidates", format!("has {n} candidates; {}", super::ONE_CANDIDATE)).with("candidates", n as u64)
        );
    }
    let candidate = match crate::types::pointer(body, "/candidates/0") {
        Some(c) => c,
        None => {
            if let Some(reason) = crate::types::pointer(body, "/promptFeedback/blockReason").and_then(Value::as_str) {
                return Err(Error::invalid("response.promptFeedback.blockReason", format!("the prompt was blocked ({reason})"))
                    .with("blockReason", reason));
            }
            return Err(Error::invalid("response.candidates", "expected at least one candidate"));
        }
    };
    let parts = match crate::types::pointer(candidate, "/content/parts") {
        None => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(v) => return Err(Error::invalid("response.candidates[0].content.parts", format!("expected an array, got {}", kind_of(v)))),
    };
    let mut content = Vec::with_capacity(parts.len());
    let mut n_calls = 0usize;
    for (i, part) in parts.iter().enumerate() {
        let path = format!("response.candidates[0].content.parts[{i}]");
        as_object(part, &path)?;
        let signature = match part.get("thoughtSignature") {
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(v) => return Err(Error::invalid(format!("{path}.thoughtSignature"), format!("expected a string, got {}", kind_of(v)))),
        };
        let mut m = JsonMap::new();
        if let Some(call) = part.get("functionCall") {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::invalid(format!("{path}.functionCall.name"), "expected a string"))?;
            let args = call.get("args").cloned().unwrap_or_else(|| Value::Object(JsonMap::new()));
            m.insert("type".into(), "tool-call".into());
            match call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                Some(id) => {
                    m.insert("id".into(), id.into());
                }
                None => {
                    m.insert("id".into(), synthetic_id(body, n_calls).into());
                    m.insert("syntheticId".into(), true.into());
                }
            }
            n_calls += 1;
            m.insert("name".into(), name.into());
            m.insert("arguments".into(), args.to_string().into());
        } else if let Some(text) = part.get("text").and_then(Value::as_str) {
            let thought = part.get("thought") == Some(&Value::Bool(true));
            m.insert("type".into(), if thought { "reasoning" } else { "text" }.into());
            m.insert("text".into(), text.into());
            if !thought && signature.is_none() {
                content.push(Block::text(text));
                continue;
            }
        } else {
            content.push(origin::opaque(NAME, part.clone()));
            continue;
        }
        if let Some(sig) = signature {
            m.insert("thoughtSignature".into(), sig.into());
        }
        content.push(with_origin(m, NAME));
    }
    let finish = candidate.get("finishReason").and_then(Value::as_str).map(|f| match f {
        "STOP" if n_calls > 0 => "tool-calls".to_string(),
        "STOP" => "stop".to_string(),
        "MAX_TOKENS" => "max-tokens".to_string(),
        other => other.to_string(),
    });
    let usage = match body.get("usageMetadata") {
        Some(u) if u.is_object() => Some(super::usage_from_provider(NAME, u)?),
        _ => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = body.get("modelVersion").and_then(Value::as_str).map(|m| Provenance {
        provider: NAME.to_string(),
        model: m.to_string(),
        extra: JsonMap::new(),
    });
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// An id for call `n` of a response whose calls carry none: from the response's id, else from
/// a digest of the candidate's content. The digest repeats when a model makes the same call
/// again in a later turn; [`unique_synthetic_ids`] makes such an id unique when it is recorded.
fn synthetic_id(body: &Value, n: usize) -> String {
    let base = match body.get("responseId").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(id) => id.to_string(),
        None => {
            let content = crate::types::pointer(body, "/candidates/0/content").map(Value::to_string).unwrap_or_default();
            let digest = Sha256::digest(content.as_bytes());
            digest[..8].iter().map(|b| format!("{b:02x}")).collect()
        }
    };
    format!("gemini-{base}-{n}")
}

/// Makes the made-up ids (`"syntheticId": true`) of a message's tool calls unique in the
/// session, as the message is recorded to step `step` of turn `turn`: an id that `is_used`
/// (an earlier call of the session) or that an earlier call of the same message has gets
/// `-t<turn>s<step>` appended (and `-2`, `-3`, ... should that be taken too). Ids the provider
/// gave are left alone (a repeated one is the log's error to report). The id is logged, so
/// `verify` and the renderers see the recorded one; Gemini never receives made-up ids. Returns
/// how many ids changed.
pub fn unique_synthetic_ids(message: &mut Message, is_used: impl Fn(&str) -> bool, turn: u64, step: u64) -> usize {
    let mut taken: Vec<String> = Vec::new();
    let mut changed = 0;
    for b in message.content.iter_mut() {
        let Some((id, _, _)) = b.as_tool_call() else { continue };
        let id = id.to_string();
        let clash = |c: &str, taken: &[String]| is_used(c) || taken.iter().any(|t| t == c);
        if b.get("syntheticId") != Some(&Value::Bool(true)) || !clash(&id, &taken) {
            taken.push(id);
            continue;
        }
        let base = format!("{id}-t{turn}s{step}");
        let mut fresh = base.clone();
        let mut k = 2;
        while clash(&fresh, &taken) {
            fresh = format!("{base}-{k}");
            k += 1;
        }
        let mut v = b.clone().into_value();
        v["id"] = fresh.clone().into();
        *b = Block::from_owned_value(v, "").expect("a tool-call block with a new id is valid");
        taken.push(fresh);
        changed += 1;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{parse_response, Renderer};
    use crate::ErrorKind;

    fn env(messages: Value) -> Value {
        json!({"provider":"gemini","model":"gemini-x","messages":messages,"sessionId":"s","purpose":"conversation"})
    }

    fn r(e: &Value, prefix_len: usize) -> Result<Value> {
        render_gemini(e, &RenderOptions::with_prefix_len(prefix_len))
    }

    #[test]
    fn header_fields_are_mapped() {
        let e = json!({
            "provider":"gemini","model":"gemini-3","reasoningEffort":"low","temperature":0.2,"maxTokens":800,
            "stop":["END"],"system":"Be brief.","generationConfig":{"topP":0.9},"safetySettings":[],
            "tools":[{"name":"read","description":"Read a file","parameters":{"type":"object","additionalProperties":false}}],
            "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "sessionId":"s","purpose":"conversation"
        });
        assert_eq!(
            r(&e, 0).unwrap(),
            json!({
                "contents":[{"role":"user","parts":[{"text":"hi"}]}],
                "systemInstruction":{"parts":[{"text":"Be brief."}]},
                "tools":[{"functionDeclarations":[{"name":"read","description":"Read a file",
                    "parametersJsonSchema":{"type":"object","additionalProperties":false}}]}],
                "generationConfig":{"temperature":0.2,"maxOutputTokens":800,"stopSequences":["END"],
                    "thinkingConfig":{"thinkingLevel":"low"},"topP":0.9},
                "safetySettings":[]
            })
        );
        let err = r(&json!({"model":"m","messages":[],"maxTokens":5,"generationConfig":{"maxOutputTokens":9}}), 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().starts_with("generationConfig.maxOutputTokens: collides"), "{}", err.message());
        let err = r(&json!({"model":"m","messages":[],"contents":[]}), 0).unwrap_err();
        assert!(err.message().starts_with("contents: unknown config field collides"), "{}", err.message());
        let err = r(&json!({"model":"m","messages":[],"generationConfig":3}), 0).unwrap_err();
        assert_eq!(err.message(), "generationConfig: expected an object, got a number");
        assert_eq!(r(&json!({"model":"m","messages":[]}), 0).unwrap(), json!({"contents":[]}));
    }

    #[test]
    fn conversation_with_calls_results_and_signatures() {
        let body = r(
            &env(json!([
                {"role":"system","content":[{"type":"text","text":"policy"}]},
                {"role":"user","content":[{"type":"text","text":"go"},{"type":"image","mediaType":"image/png","data":"AAAA"},
                    {"type":"image","url":"data:image/jpeg;base64,BBBB"},{"type":"image","url":"https://x/y.png"}]},
                {"role":"assistant","content":[
                    {"type":"reasoning","text":"plan","origin":"gemini","thoughtSignature":"T1"},
                    {"type":"reasoning","text":"anthropic thought","signature":"sig"},
                    {"type":"reasoning","text":"responses thought","origin":"openai-responses","item":{"type":"reasoning"}},
                    {"type":"text","text":"Reading."},
                    {"type":"tool-call","id":"fc-9","name":"read","arguments":"{\"p\":1}","origin":"gemini","thoughtSignature":"T2"},
                    {"type":"tool-call","id":"gemini-r-1","name":"ls","arguments":"","origin":"gemini","syntheticId":true},
                    {"type":"tool-call","id":"call_x","name":"ls","arguments":"{}","thoughtSignature":"not gemini's"},
                    {"type":"opaque","origin":"gemini","item":{"executableCode":{"language":"PYTHON","code":"1"}}},
                    {"type":"text","text":"","origin":"gemini","thoughtSignature":"T3"}
                ]},
                {"role":"user","content":[{"type":"tool-result","toolCallId":"fc-9","isError":false,"content":[{"type":"text","text":"a"}]}]},
                {"role":"user","content":[{"type":"tool-result","toolCallId":"gemini-r-1","isError":true,"content":[{"type":"text","text":"denied"}]}]},
                {"role":"user","content":[{"type":"tool-result","toolCallId":"call_x","isError":false,"content":[]}]},
                {"role":"user","content":[{"type":"text","text":"injected"}]},
                {"role":"assistant","content":[{"type":"reasoning","text":"unsigned, not gemini's"}]},
                {"role":"user","content":[]}
            ])),
            1,
        )
        .unwrap();
        assert_eq!(body["systemInstruction"], json!({"parts":[{"text":"policy"}]}));
        assert_eq!(
            body["contents"],
            json!([
                {"role":"user","parts":[{"text":"go"},{"inlineData":{"mimeType":"image/png","data":"AAAA"}},
                    {"inlineData":{"mimeType":"image/jpeg","data":"BBBB"}},{"fileData":{"fileUri":"https://x/y.png"}}]},
                {"role":"model","parts":[
                    {"text":"plan","thought":true,"thoughtSignature":"T1"},
                    {"text":"Reading."},
                    {"functionCall":{"name":"read","args":{"p":1},"id":"fc-9"},"thoughtSignature":"T2"},
                    {"functionCall":{"name":"ls","args":{}}},
                    {"functionCall":{"name":"ls","args":{}}},
                    {"executableCode":{"language":"PYTHON","code":"1"}},
                    {"text":"","thoughtSignature":"T3"}
                ]},
                {"role":"user","parts":[
                    {"functionResponse":{"name":"read","response":{"output":"a"},"id":"fc-9"}},
                    {"functionResponse":{"name":"ls","response":{"error":"denied"}}},
                    {"functionResponse":{"name":"ls","response":{"output":""}}}
                ]},
                {"role":"user","parts":[{"text":"injected"}]},
                // A user message whose text is all empty stays (as an empty text part).
                {"role":"user","parts":[{"text":""}]}
            ])
        );
    }

    #[test]
    fn errors_name_the_block() {
        let cases = [
            (json!([{"role":"user","content":[{"type":"tool-result","toolCallId":"nope","isError":false,"content":[]}]}]), 0,
             "messages[0].content[0].toolCallId: no earlier tool call \"nope\" in the envelope (the gemini renderer needs the function's name)"),
            (json!([{"role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"[1]"}]}]), 0,
             "messages[0].content[0].arguments: must be a JSON object for gemini functionCall args, got an array"),
            (json!([{"role":"user","content":[{"type":"reasoning","text":"r"}]}]), 0,
             "messages[0].content[0]: block type \"reasoning\" is not supported in a user message by the gemini renderer"),
            (json!([{"role":"system","content":[{"type":"text","text":"late"}]}]), 0,
             "messages[0].role: a system-role message is only supported inside the session prefix (the first 0 messages) by the gemini renderer"),
            (json!([{"role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"{}"}]},
                    {"role":"user","content":[{"type":"tool-result","toolCallId":"c","isError":false,"content":[{"type":"image","url":"u"}]}]}]), 0,
             "messages[1].content[0].content[0]: block type \"image\" inside a tool result is not supported by the gemini renderer (function responses carry text)"),
            (json!([{"role":"assistant","content":[{"type":"text","text":"x","origin":"gemini","thoughtSignature":5}]}]), 0,
             "messages[0].content[0].thoughtSignature: expected a string, got a number"),
        ];
        for (messages, prefix, want) in cases {
            let e = r(&env(messages), prefix).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
        let e =
            r(&env(json!([{"role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"{x"}]}])), 0).unwrap_err();
        assert!(e.message().starts_with("messages[0].content[0].arguments: is not valid JSON"), "{}", e.message());
    }

    #[test]
    fn response_parts_become_blocks_and_render_back() {
        let body = json!({
            "candidates":[{"content":{"role":"model","parts":[
                {"text":"thinking about it","thought":true,"thoughtSignature":"SIG1"},
                {"text":"Let me read it."},
                {"functionCall":{"name":"read","args":{"path":"a.go"}},"thoughtSignature":"SIG2"},
                {"functionCall":{"name":"ls","args":{},"id":"given"}},
                {"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"2"}}
            ]},"finishReason":"STOP","index":0}],
            "usageMetadata":{"promptTokenCount":1200,"cachedContentTokenCount":1000,"candidatesTokenCount":40,
                "thoughtsTokenCount":25,"totalTokenCount":1265},
            "modelVersion":"gemini-3-flash","responseId":"R1"
        });
        let p = parse_response(Renderer::Gemini, &body).unwrap();
        let c: Vec<Value> = p.message.content.iter().map(|b| b.clone().into_value()).collect();
        assert_eq!(
            c,
            vec![
                json!({"type":"reasoning","text":"thinking about it","origin":"gemini","thoughtSignature":"SIG1"}),
                json!({"type":"text","text":"Let me read it."}),
                json!({"type":"tool-call","id":"gemini-R1-0","name":"read","arguments":"{\"path\":\"a.go\"}","origin":"gemini",
                       "syntheticId":true,"thoughtSignature":"SIG2"}),
                json!({"type":"tool-call","id":"given","name":"ls","arguments":"{}","origin":"gemini"}),
                json!({"type":"opaque","origin":"gemini","item":{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"2"}}}),
            ]
        );
        assert_eq!(p.finish_reason.as_deref(), Some("tool-calls"));
        let u = p.usage.clone().unwrap();
        assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens), (200, Some(1000), 65, Some(25)));
        assert_eq!(p.message.provenance.as_ref().unwrap().model, "gemini-3-flash");
        // Back to Gemini: the parts as they came (the made-up id is not sent).
        let e = env(json!([{"role":"user","content":[{"type":"text","text":"go"}]}, p.message.to_value()]));
        let rendered = r(&e, 0).unwrap();
        assert_eq!(rendered["contents"][1]["parts"], body["candidates"][0]["content"]["parts"]);
        // Without a responseId the made-up ids come from the content.
        let mut b2 = body.clone();
        b2.as_object_mut().unwrap().remove("responseId");
        let id = parse_response(Renderer::Gemini, &b2).unwrap().message.content[2].get_str("id").unwrap().to_string();
        assert!(id.starts_with("gemini-") && id.ends_with("-0") && id.len() == "gemini-".len() + 16 + 2, "{id}");
    }

    #[test]
    fn bad_and_blocked_responses() {
        let e = parse_response(Renderer::Gemini, &json!({"promptFeedback":{"blockReason":"SAFETY"}})).unwrap_err();
        assert_eq!(e.message(), "response.promptFeedback.blockReason: the prompt was blocked (SAFETY)");
        let e = parse_response(Renderer::Gemini, &json!({"candidates":[]})).unwrap_err();
        assert_eq!(e.message(), "response.candidates: expected at least one candidate");
        let e = parse_response(Renderer::Gemini, &json!({"candidates":[{"content":{"parts":[{"functionCall":{}}]}}]})).unwrap_err();
        assert_eq!(e.message(), "response.candidates[0].content.parts[0].functionCall.name: expected a string");
        let p = parse_response(Renderer::Gemini, &json!({"candidates":[{"finishReason":"MAX_TOKENS"}]})).unwrap();
        assert!(p.message.content.is_empty());
        assert_eq!(p.finish_reason.as_deref(), Some("max-tokens"));
        let p = parse_response(Renderer::Gemini, &json!({"candidates":[{"finishReason":"SAFETY"}]})).unwrap();
        assert_eq!(p.finish_reason.as_deref(), Some("SAFETY"));
    }
}
