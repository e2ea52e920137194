//! The Anthropic Messages renderer, with prompt-cache breakpoints.
//!
//! Mapping (see `docs/render.md` for the reasons):
//! - system prompt, then the text of every system-role **prefix** message → `system` text
//!   blocks (a system-role message after the prefix is an error);
//! - user message → a `user` message: `text`, `image`, `document` (file blocks) and
//!   `tool_result` blocks;
//! - assistant message → an `assistant` message: `text` (with the `citations` an Anthropic
//!   response gave it), `thinking` (reasoning blocks that carry
//!   a `signature`; unsigned reasoning is dropped), `redacted_thinking` and `tool_use` blocks;
//! - consecutive user messages that hold only tool results are merged into one user message;
//! - empty text blocks are dropped, and so is a message left with no block at all;
//! - `cache_control: {"type":"ephemeral", "ttl"?}` on the last block of the system prompt (or
//!   the last tool, without one), on the last cacheable block of the session prefix (or the last
//!   hoisted system block), and on the last cacheable block of the history (for a summarisation
//!   request, the block before its trailing instruction), never more than [`MAX_BREAKPOINTS`]
//!   with the host's own tool marks. Thinking blocks cannot carry a breakpoint, so a trailing
//!   thinking-only message passes the mark back to the one before.

use super::media::{self, Kind, Source};
use super::{block_path, breakpoint, origin, unsupported, Envelope, RenderOptions};
use crate::error::{Error, Result};
use crate::types::{Block, JsonMap, Message, Role};
use serde_json::{json, Value};

const NAME: &str = "anthropic";

/// The `max_tokens` sent when the envelope has no `maxTokens` (Anthropic requires the field).
/// 4096 is an output budget every Anthropic model accepts; set `maxTokens` to go higher.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u64 = 4096;

/// Renders an envelope into an Anthropic Messages body.
///
/// `options.prefix_len` says how many leading envelope messages are the session prefix; it
/// places the prefix cache breakpoint and decides which system-role messages may be hoisted
/// into `system`; `options.cache_ttl` sets the breakpoints' `ttl`. The body has `model`, `max_tokens` (from `maxTokens`, else
/// [`DEFAULT_ANTHROPIC_MAX_TOKENS`]), `messages`, and when set `system`, `tools`,
/// `temperature` and `stop_sequences`. `reasoningEffort` has no Anthropic field and is not
/// rendered. Unknown config fields are copied verbatim as top-level body fields (`thinking`,
/// `top_k`, `metadata`, ...); one that names a body field set here is an error.
pub fn render_anthropic(envelope: &Value, options: &RenderOptions) -> Result<Value> {
    let env = Envelope::parse(envelope)?;
    let options = &options.effective(&env, super::Renderer::Anthropic)?;
    let prefix_len = options.prefix_len;
    env.check_prefix_len(prefix_len)?;

    let mut system = system_prompt(&env);
    // The system prompt's own blocks; hoisted system-role prefix messages follow them.
    let system_prompt_blocks = system.len();
    let mut out: Vec<Rendered> = Vec::with_capacity(env.messages.len());
    // (message index in `out`, block index) of the prefix breakpoint.
    let mut prefix_mark: Option<(usize, usize)> = None;
    // Rendered messages before a summarisation request's trailing instruction.
    let mut history_end = None;
    for i in message_order(&env.messages, prefix_len) {
        let m = &env.messages[i];
        if env.compaction && i + 1 == env.messages.len() {
            history_end = Some(out.len());
        }
        if let Some(r) = piece(m, i, prefix_len, &mut system)? {
            push_merged(&mut out, r);
        }
        if i + 1 == prefix_len {
            prefix_mark = last_cacheable(&out);
        }
    }

    let tools = tools(&env)?;
    let end_mark = last_cacheable(&out[..history_end.unwrap_or(out.len())]);
    let prefix_at = match prefix_mark {
        Some(p) => Some(Mark::Message(p)),
        None => hoisted_mark(&system, system_prompt_blocks),
    };
    let marks = choose_marks(&tools, end_mark.map(Mark::Message), prefix_at, head_mark(system_prompt_blocks, &tools));
    let cc = cache_control(options);
    for m in &marks {
        if let Mark::Message((k, j)) = *m {
            set_mark(&mut out[k].content[j], &cc);
        }
    }
    let messages: Vec<Value> = out.into_iter().map(|r| json!({"role": r.role, "content": r.content})).collect();
    let mut body = frame(&env, system, tools, &marks, &cc)?;
    if env.native_compaction {
        // On-demand compaction (beta `compact-2026-09-04`): the provider summarises every
        // message and answers with one `compaction` block.
        if body.contains_key("compaction") {
            return Err(Error::invalid("compaction", "is set by a native compaction request itself; leave the config field out"));
        }
        body.insert("compaction".into(), json!({"type": "summarize"}));
    }
    if options.cache_diagnostics {
        set_diagnostics(&mut body, previous_response_id(env.messages.iter().rev()))?;
    }
    body.insert(MESSAGES.into(), Value::Array(messages));
    Ok(Value::Object(body))
}

/// The order the envelope's messages are rendered in: as they come, except that a native
/// compaction checkpoint of this format heading the history (the first message after the
/// session prefix) goes first when the prefix has messages that render as messages (not
/// system-role ones, which go into `system`): Anthropic reads a compaction block only at the
/// front of `messages` (on-demand blocks: a 400 otherwise; threshold blocks: what precedes them
/// is dropped), so the session prefix's messages follow it rather than precede it.
pub(super) fn message_order(messages: &[Message], prefix_len: usize) -> Vec<usize> {
    let n = messages.len();
    let prefix_renders = messages[..prefix_len.min(n)].iter().any(|m| m.role != Role::System);
    if prefix_renders && prefix_len < n && is_native_checkpoint(&messages[prefix_len]) {
        std::iter::once(prefix_len).chain(0..prefix_len).chain(prefix_len + 1..n).collect()
    } else {
        (0..n).collect()
    }
}

/// Whether a message is a native compaction checkpoint of this format (rendered as an
/// assistant message of its own, as the provider returned the block).
pub(super) fn is_native_checkpoint(m: &Message) -> bool {
    crate::compaction::native::native_checkpoint(m).is_some_and(|c| c.format == NAME)
}

/// The response id of the last assistant message among `latest_first` (newest first): its
/// provenance's `responseId`, `None` when the last assistant message has none or there is none.
pub(super) fn previous_response_id<'a>(mut latest_first: impl Iterator<Item = &'a Message>) -> Option<String> {
    let last = latest_first.find(|m| m.role == Role::Assistant)?;
    last.provenance.as_ref()?.extra.get(super::response::RESPONSE_ID)?.as_str().map(str::to_string)
}

/// Cache diagnostics (`RenderOptions::cache_diagnostics`): `"diagnostics":
/// {"previous_message_id": id | null}`. A `diagnostics` config field as well is an error.
pub(super) fn set_diagnostics(body: &mut JsonMap, previous: Option<String>) -> Result<()> {
    if body.contains_key("diagnostics") {
        return Err(Error::invalid(
            "diagnostics",
            "is set by the cacheDiagnostics render option; leave the config field out (or the option)",
        ));
    }
    body.insert("diagnostics".into(), json!({ "previous_message_id": previous }));
    Ok(())
}

/// The body field holding the wire messages.
pub(super) const MESSAGES: &str = "messages";

/// The system prompt's blocks (hoisted system-role prefix messages follow them).
pub(super) fn system_prompt(env: &Envelope) -> Vec<Value> {
    let mut system: Vec<Value> = Vec::new();
    if let Some(s) = &env.system {
        system.push(json!({"type": "text", "text": s}));
    }
    system
}

/// Envelope message `i` rendered: a system-role prefix message goes into `system` (and renders
/// to no message), any other is one wire message, or none when no block survives.
pub(super) fn piece(m: &Message, i: usize, prefix_len: usize, system: &mut Vec<Value>) -> Result<Option<Rendered>> {
    if m.role == Role::System {
        if i >= prefix_len {
            return Err(Error::invalid(
                format!("messages[{i}].role"),
                format!(
                    "a system-role message is only supported inside the session prefix (the \
                     first {prefix_len} messages) by the {NAME} renderer"
                ),
            ));
        }
        hoist_system(m, i, system)?;
        return Ok(None);
    }
    render_message(m, i)
}

/// The tools: function tools with the host's own fields, provider tools verbatim.
pub(super) fn tools(env: &Envelope) -> Result<Vec<Value>> {
    super::tools_array(env, NAME, |t, t_i| Ok(Value::Object(super::function_tool(t, t_i, "input_schema", NAME)?)))
}

/// The prefix breakpoint when the prefix has no cacheable message block: the last hoisted
/// system block, if any.
pub(super) fn hoisted_mark<P>(system: &[Value], system_prompt_blocks: usize) -> Option<Mark<P>> {
    (system.len() > system_prompt_blocks).then(|| Mark::System(system.len() - 1))
}

/// The head breakpoint: the end of the system prompt, or of the tools without one (unless the
/// host marked the last tool itself).
pub(super) fn head_mark<P>(system_prompt_blocks: usize, tools: &[Value]) -> Option<Mark<P>> {
    if system_prompt_blocks > 0 {
        Some(Mark::System(system_prompt_blocks - 1))
    } else {
        tools.len().checked_sub(1).filter(|&t| tools[t].get("cache_control").is_none()).map(Mark::Tool)
    }
}

/// The breakpoints (`breakpoint::choose_marks`: the end of the history, of the session prefix,
/// of the system prompt or tools). Marks the host put on tools (a `cache_control` tool field)
/// count against the provider's limit.
pub(super) fn choose_marks<P: PartialEq>(
    tools: &[Value],
    end: Option<Mark<P>>,
    prefix: Option<Mark<P>>,
    head: Option<Mark<P>>,
) -> Vec<Mark<P>> {
    let host_marks = tools.iter().filter(|t| t.get("cache_control").is_some()).count();
    breakpoint::choose_marks(host_marks, MAX_BREAKPOINTS, end, prefix, head)
}

/// Every body field but the wire messages, whose place `messages` holds (`null`), with the
/// system and tool breakpoints of `marks` placed.
pub(super) fn frame<P>(env: &Envelope, mut system: Vec<Value>, mut tools: Vec<Value>, marks: &[Mark<P>], cc: &Value) -> Result<JsonMap> {
    for m in marks {
        match *m {
            Mark::System(j) => set_mark(&mut system[j], cc),
            Mark::Tool(t) => set_mark(&mut tools[t], cc),
            Mark::Message(_) => {}
        }
    }
    let mut body = JsonMap::new();
    body.insert("model".into(), env.model.clone().into());
    if let Some(n) = env.max_tokens {
        body.insert("max_tokens".into(), n.into());
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert(MESSAGES.into(), Value::Null);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = &env.temperature {
        body.insert("temperature".into(), t.clone());
    }
    if let Some(stop) = &env.stop {
        body.insert("stop_sequences".into(), Value::Array(stop.clone()));
    }
    env.pass_through(&mut body, NAME)?;
    // After the pass-through, so that a `max_tokens` config field can stand in for `maxTokens`.
    body.entry("max_tokens").or_insert(DEFAULT_ANTHROPIC_MAX_TOKENS.into());
    Ok(body)
}

/// Anthropic accepts at most this many blocks with `cache_control` in one request.
pub const MAX_BREAKPOINTS: usize = 4;

pub(super) use super::breakpoint::Mark;

/// The `cache_control` object: ephemeral, with the TTL the options ask for.
pub(super) fn cache_control(options: &RenderOptions) -> Value {
    match options.cache_ttl {
        None => json!({"type": "ephemeral"}),
        Some(ttl) => json!({"type": "ephemeral", "ttl": ttl.as_str()}),
    }
}

/// One rendered wire message.
pub(super) struct Rendered {
    pub role: &'static str,
    pub content: Vec<Value>,
    /// Every block is a `tool_result`: such messages merge with their neighbours.
    pub tool_results_only: bool,
}

impl Rendered {
    /// The index of the last block that may carry `cache_control` (thinking blocks may not).
    pub(super) fn last_cacheable(&self) -> Option<usize> {
        self.content.iter().rposition(|b| !matches!(b.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking")))
    }
}

/// The (message, block) position of the last block that may carry `cache_control`, searching
/// back from the last message (a message holding only thinking blocks is passed over).
fn last_cacheable(out: &[Rendered]) -> Option<(usize, usize)> {
    out.iter().enumerate().rev().find_map(|(k, r)| r.last_cacheable().map(|j| (k, j)))
}

/// Appends `r`, merging it into the previous message when both hold only tool results: all
/// results of one assistant turn must arrive in the next user message.
fn push_merged(out: &mut Vec<Rendered>, r: Rendered) {
    if let Some(last) = out.last_mut() {
        if r.tool_results_only && last.tool_results_only {
            last.content.extend(r.content);
            return;
        }
    }
    out.push(r);
}

pub(super) fn set_mark(block: &mut Value, cc: &Value) {
    if let Value::Object(m) = block {
        m.insert("cache_control".into(), cc.clone());
    }
}

/// Appends the text of system-role prefix message `i` to the `system` blocks.
fn hoist_system(m: &Message, i: usize, system: &mut Vec<Value>) -> Result<()> {
    for (j, b) in m.content.iter().enumerate() {
        match b.kind() {
            "text" => {
                let text = b.get_str("text").unwrap_or_default();
                if !text.is_empty() {
                    system.push(json!({"type": "text", "text": text}));
                }
            }
            _ => return Err(unsupported(&block_path(i, j), b, Role::System, NAME)),
        }
    }
    Ok(())
}

/// Renders user or assistant message `i`; `None` when no block survives.
fn render_message(m: &Message, i: usize) -> Result<Option<Rendered>> {
    let mut content = Vec::with_capacity(m.content.len());
    for (j, b) in m.content.iter().enumerate() {
        let path = block_path(i, j);
        let rendered = match (m.role, b.kind()) {
            // Another provider's native state (docs/render.md, "Provider-native blocks").
            _ if origin::is_foreign(b, NAME) => None,
            (_, "text") => match b.get_str("text").unwrap_or_default() {
                "" => None, // Anthropic rejects empty text blocks.
                text => Some(text_block(b, text, &path)?),
            },
            (Role::User, "image" | "file") => Some(media_block(b, &path)?),
            (Role::User, "tool-result") => Some(tool_result_block(b, &path)?),
            (Role::Assistant, "reasoning") => thinking_block(b, &path)?,
            (Role::Assistant, "redacted-thinking") => Some(json!({"type": "redacted_thinking", "data": required_str(b, &path, "data")?})),
            (Role::Assistant, "tool-call") => Some(tool_use_block(b, &path)?),
            (_, origin::OPAQUE) => Some(origin::opaque_item(b, &path)?.clone()),
            _ => return Err(unsupported(&path, b, m.role, NAME)),
        };
        content.extend(rendered);
    }
    if content.is_empty() {
        return Ok(None);
    }
    let role = if m.role == Role::Assistant || is_native_checkpoint(m) { "assistant" } else { "user" };
    let tool_results_only = role == "user" && content.iter().all(|b| b["type"] == "tool_result");
    Ok(Some(Rendered { role, content, tool_results_only }))
}

/// A text block; one parsed from an Anthropic response keeps its `citations`, sent back as
/// they came (other formats have no place for them and ignore them).
fn text_block(b: &Block, text: &str, path: &str) -> Result<Value> {
    let mut block = json!({"type": "text", "text": text});
    if origin::is_native(b, NAME) {
        match b.get("citations") {
            None | Some(Value::Null) => {}
            Some(c @ Value::Array(_)) => {
                block["citations"] = c.clone();
            }
            Some(v) => {
                return Err(Error::invalid(format!("{path}.citations"), format!("expected an array, got {}", crate::types::kind_of(v))))
            }
        }
    }
    Ok(block)
}

fn required_str<'a>(b: &'a Block, path: &str, key: &str) -> Result<&'a str> {
    match b.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(Error::invalid(format!("{path}.{key}"), "must not be empty")),
        None => Err(Error::invalid(format!("{path}.{key}"), "is required")),
        Some(v) => Err(Error::invalid(format!("{path}.{key}"), format!("expected a string, got {}", crate::types::kind_of(v)))),
    }
}

/// The block of an image or file block: `image` for an image, `document` for anything else
/// but audio and video (which Anthropic does not take), with a `base64`, `url` or `file`
/// source; a file's `filename` is the document's `title`.
fn media_block(b: &Block, path: &str) -> Result<Value> {
    let m = media::read(b, path)?;
    let source = match m.source {
        Source::Data(data) => json!({"type": "base64", "media_type": m.media_type, "data": data}),
        Source::Url(url) => json!({"type": "url", "url": url}),
        Source::FileId(id) => json!({"type": "file", "file_id": id}),
    };
    match m.kind {
        Kind::Image => Ok(json!({"type": "image", "source": source})),
        Kind::Document => {
            let mut d = JsonMap::new();
            d.insert("type".into(), "document".into());
            d.insert("source".into(), source);
            if let Some(title) = m.filename {
                d.insert("title".into(), title.into());
            }
            Ok(Value::Object(d))
        }
        Kind::Audio | Kind::Video => {
            Err(media::cannot_carry(path, &m, NAME, "Anthropic takes images and documents (PDF, plain text), no audio or video"))
        }
    }
}

/// A reasoning block becomes `thinking` when it carries the provider's `signature`; without
/// one Anthropic would reject it, so it is dropped.
fn thinking_block(b: &Block, path: &str) -> Result<Option<Value>> {
    if b.get("signature").is_none() {
        return Ok(None);
    }
    let signature = required_str(b, path, "signature")?;
    Ok(Some(json!({
        "type": "thinking",
        "thinking": b.get_str("text").unwrap_or_default(),
        "signature": signature,
    })))
}

/// A tool call: `arguments` must be a JSON object (empty or blank means `{}`).
fn tool_use_block(b: &Block, path: &str) -> Result<Value> {
    let (id, name, arguments) = b.as_tool_call().expect("validated tool-call");
    let field = format!("{path}.arguments");
    let input = if arguments.trim().is_empty() {
        Value::Object(JsonMap::new())
    } else {
        let parsed = serde_json::from_str::<Value>(arguments).map_err(|e| {
            let why = format!("is not valid JSON, which {NAME} tool_use input needs: {e}");
            Error::invalid(field.as_str(), why)
        })?;
        if !parsed.is_object() {
            let got = crate::types::kind_of(&parsed);
            let why = format!("must be a JSON object for {NAME} tool_use input, got {got}");
            return Err(Error::invalid(field, why));
        }
        parsed
    };
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

/// A tool result: text and image blocks; `is_error` only when true; no `content` when empty.
fn tool_result_block(b: &Block, path: &str) -> Result<Value> {
    let mut content = Vec::new();
    for (k, inner) in b.tool_result_content().iter().enumerate() {
        let inner_path = format!("{path}.content[{k}]");
        match inner.kind() {
            "text" => {
                let text = inner.get_str("text").unwrap_or_default();
                if !text.is_empty() {
                    content.push(json!({"type": "text", "text": text}));
                }
            }
            "image" | "file" => content.push(media_block(inner, &inner_path)?),
            other => {
                return Err(Error::invalid(
                    inner_path,
                    format!("block type {other:?} inside a tool result is not supported by the {NAME} renderer"),
                )
                .with("blockType", other))
            }
        }
    }
    let mut m = JsonMap::new();
    m.insert("type".into(), "tool_result".into());
    m.insert("tool_use_id".into(), b.tool_result_id().expect("validated tool-result").into());
    if !content.is_empty() {
        m.insert("content".into(), Value::Array(content));
    }
    if b.tool_result_is_error() {
        m.insert("is_error".into(), true.into());
    }
    Ok(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::CacheTtl;
    use crate::ErrorKind;

    #[allow(non_snake_case)]
    fn CC() -> Value {
        json!({"type":"ephemeral"})
    }

    fn env(messages: Value) -> Value {
        json!({"provider":"anthropic","model":"claude-x","messages":messages,"sessionId":"s","purpose":"conversation"})
    }

    fn render(e: &Value, prefix_len: usize) -> Result<Value> {
        render_anthropic(e, &RenderOptions::with_prefix_len(prefix_len))
    }

    #[test]
    fn header_fields_are_mapped() {
        let e = json!({
            "provider":"anthropic","model":"claude-x","reasoningEffort":"high","temperature":1,
            "maxTokens":2048,"stop":["END"],"system":"Be brief.",
            "tools":[{"name":"read","description":"Read a file","parameters":{"type":"object"}}],
            "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "sessionId":"s","purpose":"conversation","turn":0,"step":0
        });
        let body = render(&e, 0).unwrap();
        assert_eq!(
            body,
            json!({
                "model":"claude-x","max_tokens":2048,
                "system":[{"type":"text","text":"Be brief.","cache_control":CC()}],
                "messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":CC()}]}],
                "tools":[{"name":"read","description":"Read a file","input_schema":{"type":"object"}}],
                "temperature":1,"stop_sequences":["END"]
            })
        );
    }

    #[test]
    fn max_tokens_default_and_pass_through() {
        let body = render(&json!({"model":"m","messages":[]}), 0).unwrap();
        assert_eq!(body, json!({"model":"m","max_tokens":DEFAULT_ANTHROPIC_MAX_TOKENS,"messages":[]}));
        let body = render(
            &json!({"model":"m","messages":[],"max_tokens":9000,
                                  "thinking":{"type":"enabled","budget_tokens":4000}}),
            0,
        )
        .unwrap();
        assert_eq!(body["max_tokens"], json!(9000));
        assert_eq!(body["thinking"], json!({"type":"enabled","budget_tokens":4000}));
        let e = render(&json!({"model":"m","messages":[],"maxTokens":1,"max_tokens":9000}), 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().starts_with("max_tokens: unknown config field collides"), "{}", e.message());
        let e = render(&json!({"model":"m","messages":[],"stop":["x"],"stop_sequences":["y"]}), 0).unwrap_err();
        assert!(e.message().starts_with("stop_sequences: "), "{}", e.message());
    }

    #[test]
    fn tool_extra_fields_pass_through() {
        let e = json!({"model":"m","messages":[],"tools":[
            {"name":"a","description":"d","parameters":{},"cache_control":{"type":"ephemeral"}},
            {"type":"provider","format":"anthropic","tool":{"type":"custom","name":"b","input_schema":{}}}]});
        let body = render(&e, 0).unwrap();
        assert_eq!(body["tools"][0]["cache_control"], json!({"type":"ephemeral"}));
        // Verbatim (the head breakpoint marks the last tool, there being no system prompt).
        assert_eq!(body["tools"][1], json!({"type":"custom","name":"b","input_schema":{},"cache_control":{"type":"ephemeral"}}));
        // A tool type of the provider's own goes in a provider tool; as a function tool's field it
        // is refused, with the shape to use.
        let e = json!({"model":"m","messages":[],"tools":[{"name":"b","description":"d","parameters":{},"type":"custom"}]});
        let err = render(&e, 0).unwrap_err();
        assert!(err.message().contains("{\"type\":\"provider\",\"format\":\"anthropic\",\"tool\":"), "{}", err.message());
        let e = json!({"model":"m","messages":[],"tools":[{"name":"a","description":"d","parameters":{},"input_schema":{}}]});
        let err = render(&e, 0).unwrap_err();
        assert!(err.message().starts_with("tools[0].input_schema: unknown tool field collides"), "{}", err.message());
    }

    #[test]
    fn assistant_blocks() {
        let body = render(
            &env(json!([
                {"role":"user","content":[{"type":"text","text":"go"}]},
                {"role":"assistant","content":[
                    {"type":"reasoning","text":"secret","signature":"sig=="},
                    {"type":"reasoning","text":"unsigned"},
                    {"type":"redacted-thinking","data":"opaque"},
                    {"type":"text","text":""},
                    {"type":"text","text":"Reading."},
                    {"type":"tool-call","id":"c1","name":"read","arguments":"{\"path\":\"a\",\"n\":2}"},
                    {"type":"tool-call","id":"c2","name":"ls","arguments":""}
                ]},
                {"role":"user","content":[{"type":"text","text":"next"}]}
            ])),
            0,
        )
        .unwrap();
        assert_eq!(
            body["messages"][1],
            json!({"role":"assistant","content":[
                {"type":"thinking","thinking":"secret","signature":"sig=="},
                {"type":"redacted_thinking","data":"opaque"},
                {"type":"text","text":"Reading."},
                {"type":"tool_use","id":"c1","name":"read","input":{"path":"a","n":2}},
                {"type":"tool_use","id":"c2","name":"ls","input":{}}
            ]})
        );
    }

    #[test]
    fn tool_results_merge_and_map() {
        let body = render(
            &env(json!([
                {"role":"assistant","content":[
                    {"type":"tool-call","id":"a","name":"t","arguments":"{}"},
                    {"type":"tool-call","id":"b","name":"t","arguments":"{}"}]},
                {"role":"user","content":[{"type":"tool-result","toolCallId":"a","isError":false,
                  "content":[{"type":"text","text":"ok"},{"type":"image","mediaType":"image/png","data":"AAAA"}]}]},
                {"role":"user","content":[{"type":"tool-result","toolCallId":"b","isError":true,"content":[]}]},
                {"role":"user","content":[{"type":"text","text":"injected"}]}
            ])),
            0,
        )
        .unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role":"assistant","content":[
                    {"type":"tool_use","id":"a","name":"t","input":{}},
                    {"type":"tool_use","id":"b","name":"t","input":{}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"a","content":[
                        {"type":"text","text":"ok"},
                        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
                    {"type":"tool_result","tool_use_id":"b","is_error":true}]},
                {"role":"user","content":[{"type":"text","text":"injected","cache_control":CC()}]}
            ])
        );
    }

    #[test]
    fn user_images() {
        let body = render(
            &env(json!([{"role":"user","content":[
            {"type":"image","url":"https://example.com/a.png"},{"type":"text","text":"what?"}]}])),
            0,
        )
        .unwrap();
        assert_eq!(body["messages"][0]["content"][0], json!({"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}));
    }

    #[test]
    fn empty_messages_are_dropped() {
        let body = render(
            &env(json!([
                {"role":"user","content":[{"type":"text","text":"q"}]},
                {"role":"assistant","content":[{"type":"reasoning","text":"unsigned"}]},
                {"role":"assistant","content":[]},
                {"role":"user","content":[{"type":"text","text":""}]}
            ])),
            0,
        )
        .unwrap();
        assert_eq!(body["messages"], json!([{"role":"user","content":[{"type":"text","text":"q","cache_control":CC()}]}]));
    }

    #[test]
    fn system_prefix_messages_are_hoisted() {
        let e = json!({"model":"m","system":"S","messages":[
            {"role":"system","content":[{"type":"text","text":"policy"},{"type":"text","text":""}]},
            {"role":"user","content":[{"type":"text","text":"ctx"}]},
            {"role":"system","content":[{"type":"text","text":"late policy"}]},
            {"role":"user","content":[{"type":"text","text":"q"}]}
        ]});
        let body = render(&e, 3).unwrap();
        assert_eq!(
            body["system"],
            json!([{"type":"text","text":"S","cache_control":CC()},{"type":"text","text":"policy"},{"type":"text","text":"late policy"}])
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role":"user","content":[{"type":"text","text":"ctx","cache_control":CC()}]},
                {"role":"user","content":[{"type":"text","text":"q","cache_control":CC()}]}
            ])
        );
        // Only system-role messages in the prefix: the prefix mark goes on the last system block.
        let e = json!({"model":"m","system":"S","messages":[
            {"role":"system","content":[{"type":"text","text":"policy"}]},
            {"role":"user","content":[{"type":"text","text":"q"}]}
        ]});
        let body = render(&e, 1).unwrap();
        assert_eq!(
            body["system"],
            json!([{"type":"text","text":"S","cache_control":CC()},{"type":"text","text":"policy","cache_control":CC()}])
        );
        // Outside the prefix, a system-role message is an error.
        let err = render(&e, 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            err.message(),
            "messages[0].role: a system-role message is only supported inside the session prefix \
             (the first 0 messages) by the anthropic renderer"
        );
    }

    /// Where `cache_control` is in a body: "system/i", "tools/i", "messages/k/j".
    fn marks(body: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for key in ["tools", "system"] {
            for (i, b) in body[key].as_array().into_iter().flatten().enumerate() {
                if b.get("cache_control").is_some() {
                    out.push(format!("{key}/{i}"));
                }
            }
        }
        for (k, m) in body["messages"].as_array().unwrap().iter().enumerate() {
            for (j, b) in m["content"].as_array().unwrap().iter().enumerate() {
                if b.get("cache_control").is_some() {
                    out.push(format!("messages/{k}/{j}"));
                }
            }
        }
        out
    }

    #[test]
    fn breakpoints() {
        let user = |t: &str| json!({"role":"user","content":[{"type":"text","text":t}]});
        let tools = json!([{"name":"t","description":"d","parameters":{}},{"name":"u","description":"d","parameters":{}}]);
        // Prefix of 1, history of 2: the end of the prefix and the end of the history.
        let body = render(&env(json!([user("p"), user("h1"), user("h2")])), 1).unwrap();
        assert_eq!(marks(&body), ["messages/0/0", "messages/2/0"]);
        // The whole envelope is the prefix: one mark.
        let body = render(&env(json!([user("p")])), 1).unwrap();
        assert_eq!(marks(&body), ["messages/0/0"]);
        // No prefix, no system: the last tool carries the head mark.
        let mut e = env(json!([user("h")]));
        e["tools"] = tools.clone();
        assert_eq!(marks(&render(&e, 0).unwrap()), ["tools/1", "messages/0/0"]);
        // With a system prompt, the system prompt carries it (it covers the tools before it).
        e["system"] = json!("S");
        assert_eq!(marks(&render(&e, 0).unwrap()), ["system/0", "messages/0/0"]);
        // System prompt, tools, prefix and history: three marks, one at the end of each part.
        let mut e = env(json!([user("p"), user("h")]));
        e["system"] = json!("S");
        e["tools"] = tools.clone();
        let body = render(&e, 1).unwrap();
        assert_eq!(marks(&body), ["system/0", "messages/0/0", "messages/1/0"]);
        assert_eq!(body["system"][0]["cache_control"], CC());
        // Thinking blocks are skipped when placing a mark.
        let body = render(
            &env(json!([user("q"), {"role":"assistant","content":[
            {"type":"text","text":"a"},{"type":"reasoning","text":"r","signature":"s"}]}])),
            0,
        )
        .unwrap();
        assert_eq!(marks(&body), ["messages/1/0"]);
        // A trailing thinking-only message passes the end mark back to the message before.
        let body = render(
            &env(json!([user("q"), {"role":"assistant","content":[
            {"type":"reasoning","text":"r","signature":"s"}]}])),
            0,
        )
        .unwrap();
        assert_eq!(marks(&body), ["messages/0/0"]);
    }

    #[test]
    fn breakpoint_ttl_is_in_every_mark() {
        let user = |t: &str| json!({"role":"user","content":[{"type":"text","text":t}]});
        let mut e = env(json!([user("p"), user("h")]));
        e["system"] = json!("S");
        for (ttl, want) in [
            (CacheTtl::OneHour, r#""cache_control":{"ttl":"1h","type":"ephemeral"}"#),
            (CacheTtl::FiveMinutes, r#""cache_control":{"ttl":"5m","type":"ephemeral"}"#),
        ] {
            let body = render_anthropic(&e, &RenderOptions::with_prefix_len(1).with_cache_ttl(ttl)).unwrap();
            let text = serde_json::to_string(&body).unwrap();
            assert_eq!(text.matches(want).count(), 3, "{text}");
            assert_eq!(text.matches("cache_control").count(), 3, "{text}");
        }
        // Without the option, no ttl field (the provider's default, 5 minutes).
        let text = serde_json::to_string(&render(&e, 1).unwrap()).unwrap();
        assert!(!text.contains("ttl") && text.matches(r#""cache_control":{"type":"ephemeral"}"#).count() == 3, "{text}");
    }

    #[test]
    fn breakpoints_never_exceed_the_limit_with_host_marks() {
        let user = |t: &str| json!({"role":"user","content":[{"type":"text","text":t}]});
        let tool = |n: &str, marked: bool| {
            let mut t = json!({"name":n,"description":"d","parameters":{}});
            if marked {
                t["cache_control"] = CC();
            }
            t
        };
        let mut e = env(json!([user("p"), user("h")]));
        e["system"] = json!("S");
        // One host mark on a tool: ours still fit (1 + 3 = 4).
        e["tools"] = json!([tool("a", true), tool("b", false)]);
        let body = render(&e, 1).unwrap();
        assert_eq!(marks(&body), ["tools/0", "system/0", "messages/0/0", "messages/1/0"]);
        // Two host marks: the system mark gives way (the history and prefix marks matter more).
        e["tools"] = json!([tool("a", true), tool("b", true)]);
        assert_eq!(marks(&render(&e, 1).unwrap()), ["tools/0", "tools/1", "messages/0/0", "messages/1/0"]);
        // Three: only the end of history.
        e["tools"] = json!([tool("a", true), tool("b", true), tool("c", true)]);
        assert_eq!(marks(&render(&e, 1).unwrap()), ["tools/0", "tools/1", "tools/2", "messages/1/0"]);
        // Four: none of ours.
        e["tools"] = json!([tool("a", true), tool("b", true), tool("c", true), tool("d", true)]);
        assert_eq!(marks(&render(&e, 1).unwrap()).len(), MAX_BREAKPOINTS);
        // A host mark on the last tool stands for the head mark when there is no system prompt.
        let mut e = env(json!([user("h")]));
        e["tools"] = json!([tool("a", false), tool("b", true)]);
        assert_eq!(marks(&render(&e, 0).unwrap()), ["tools/1", "messages/0/0"]);
    }

    #[test]
    fn summarisation_request_marks_the_history_not_the_instruction() {
        let user = |t: &str| json!({"role":"user","content":[{"type":"text","text":t}]});
        let conv = json!({"provider":"anthropic","model":"m","system":"S","messages":[user("p"), user("h1"), user("h2")],
                          "sessionId":"s","turn":1,"step":1,"purpose":"conversation"});
        let mut summary = conv.clone();
        summary["messages"].as_array_mut().unwrap().push(user("You are now acting as a compaction engine"));
        summary["purpose"] = json!("compaction");
        summary["maxTokens"] = json!(2000);
        let (c, s) = (render(&conv, 1).unwrap(), render(&summary, 1).unwrap());
        assert_eq!(marks(&c), ["system/0", "messages/0/0", "messages/2/0"]);
        assert_eq!(marks(&s), marks(&c));
        // Byte for byte: the summary's messages are the conversation's and the instruction.
        let cm = serde_json::to_string(&c["messages"]).unwrap();
        let sm = serde_json::to_string(&s["messages"]).unwrap();
        assert!(sm.starts_with(&cm[..cm.len() - 1]), "{sm}\n{cm}");
        assert_eq!(c["system"], s["system"]);
        // A conversation request with the same messages marks the instruction as its history end.
        summary["purpose"] = json!("conversation");
        assert_eq!(marks(&render(&summary, 1).unwrap()), ["system/0", "messages/0/0", "messages/3/0"]);
    }

    #[test]
    fn thinking_blocks_and_signatures_are_rendered_back_unchanged() {
        let thinking = "Let me think.\n\n  Indented, with trailing spaces  \n\u{00e9}\u{4e2d}\u{1f600} \"quoted\" \\ back";
        let signature = "EqQBCkgIARABGAIiQL1wQ+/Zz0b3Bw==";
        let e = env(json!([
            {"role":"user","content":[{"type":"text","text":"go"}]},
            {"role":"assistant","content":[
                {"type":"reasoning","text":thinking,"signature":signature},
                {"type":"redacted-thinking","data":"opaque+/=="},
                {"type":"tool-call","id":"c1","name":"read","arguments":"{}"}]},
            {"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"text","text":"ok"}]}]}
        ]));
        let body = render(&e, 0).unwrap();
        let text = serde_json::to_string(&body["messages"][1]["content"][0]).unwrap();
        let want = format!(r#"{{"signature":{},"thinking":{},"type":"thinking"}}"#, json!(signature), json!(thinking));
        assert_eq!(text, want);
        assert_eq!(body["messages"][1]["content"][1], json!({"type":"redacted_thinking","data":"opaque+/=="}));
        // And back again: the parsed response keeps them as they came.
        let resp = json!({"model":"m","content":[{"type":"thinking","thinking":thinking,"signature":signature},
            {"type":"redacted_thinking","data":"opaque+/=="}]});
        let parsed = crate::render::parse_response(crate::render::Renderer::Anthropic, &resp).unwrap();
        let again = env(json!([{"role":"user","content":[{"type":"text","text":"go"}]}, parsed.message.to_value()]));
        let body2 = render(&again, 0).unwrap();
        assert_eq!(body2["messages"][1]["content"][0], body["messages"][1]["content"][0]);
        assert_eq!(body2["messages"][1]["content"][1], body["messages"][1]["content"][1]);
    }

    #[test]
    fn errors_name_the_block() {
        let cases = [
            (json!([{"role":"user","content":[{"type":"reasoning","text":"r"}]}]),
             "messages[0].content[0]: block type \"reasoning\" is not supported in a user message by the anthropic renderer"),
            (json!([{"role":"user","content":[{"type":"text","text":"x"},{"type":"video","url":"u"}]}]),
             "messages[0].content[1]: block type \"video\" is not supported in a user message by the anthropic renderer"),
            (json!([{"role":"assistant","content":[{"type":"image","url":"u"}]}]),
             "messages[0].content[0]: block type \"image\" is not supported in an assistant message by the anthropic renderer"),
            (json!([{"role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"[1]"}]}]),
             "messages[0].content[0].arguments: must be a JSON object for anthropic tool_use input, got an array"),
            (json!([{"role":"assistant","content":[{"type":"reasoning","text":"r","signature":5}]}]),
             "messages[0].content[0].signature: expected a string, got a number"),
            (json!([{"role":"assistant","content":[{"type":"redacted-thinking"}]}]),
             "messages[0].content[0].data: is required"),
            (json!([{"role":"user","content":[{"type":"tool-result","toolCallId":"c","isError":false,
                     "content":[{"type":"reasoning","text":"r"}]}]}]),
             "messages[0].content[0].content[0]: block type \"reasoning\" inside a tool result is not supported by the anthropic renderer"),
            (json!([{"role":"system","content":[{"type":"image","url":"u"}]}]),
             "messages[0].content[0]: block type \"image\" is not supported in a system message by the anthropic renderer"),
        ];
        for (messages, want) in cases {
            let e = render(&env(messages), 1).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
        let e = render(
            &env(json!([{"role":"assistant","content":[
            {"type":"tool-call","id":"c","name":"n","arguments":"{oops"}]}])),
            0,
        )
        .unwrap_err();
        assert!(e.message().starts_with("messages[0].content[0].arguments: is not valid JSON"), "{}", e.message());
        assert!(e.detail().get("blockType").is_none());
        let e = render(&env(json!([{"role":"user","content":[{"type":"video"}]}])), 0).unwrap_err();
        assert_eq!(e.detail().get("blockType"), Some(&json!("video")));
        assert_eq!(e.detail().get("field"), Some(&json!("messages[0].content[0]")));
    }
}
