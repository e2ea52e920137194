//! Anthropic message events (`"stream": true`): `event: <type>` / `data: {"type", ...}`.
//!
//! `message_start` carries the message with empty `content` and the input usage;
//! `content_block_start` opens block `index`; `content_block_delta` grows it (`text_delta`,
//! `input_json_delta` (tool input as JSON text fragments), `thinking_delta`,
//! `signature_delta`, `citations_delta`, `compaction_delta`: a native compaction block's whole
//! summary at once); `content_block_stop` closes it (a tool input is
//! parsed then); `message_delta` sets `stop_reason` / `stop_sequence` and updates the usage
//! (its counts are totals, not increments); `message_stop` ends the stream. `ping` and unknown
//! event types are ignored; `error` is the provider's error.

use super::{append, check_format, index_of, json_data, malformed, provider_error, Assembler, Delta, DeltaKind, Ordinals};
use crate::error::Result;
use crate::render::Renderer;
use crate::stream::sse::RawEvent;
use crate::types::JsonMap;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Anthropic {
    message: Option<JsonMap>,
    blocks: BTreeMap<u64, Block>,
    stopped: bool,
    ordinals: Ordinals,
}

#[derive(Debug)]
struct Block {
    value: JsonMap,
    /// Tool input JSON fragments, parsed at `content_block_stop`.
    json: String,
    closed: bool,
    /// Delta kind and index, for blocks that have deltas.
    shown: Option<(DeltaKind, usize)>,
}

/// Block types whose input streams as `input_json_delta` fragments.
fn has_input(ty: &str) -> bool {
    matches!(ty, "tool_use" | "server_tool_use" | "mcp_tool_use")
}

impl Assembler for Anthropic {
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        let data = json_data(ev)?;
        check_format(Renderer::Anthropic, ev, &data)?;
        if !data.is_object() {
            return Err(malformed("an event must be a JSON object"));
        }
        let kind = data.get("type").and_then(Value::as_str).or(ev.name.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                let Some(Value::Object(m)) = data.get("message") else {
                    return Err(malformed("`message_start` needs the `message` object"));
                };
                self.message = Some(m.clone());
            }
            "content_block_start" => {
                let i = index_of(&data, "index")?;
                let Some(Value::Object(b)) = data.get("content_block") else {
                    return Err(malformed("`content_block_start` needs the `content_block` object"));
                };
                let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
                let shown = match ty {
                    "text" => Some((DeltaKind::Text, self.ordinals.next(DeltaKind::Text))),
                    "thinking" => Some((DeltaKind::Reasoning, self.ordinals.next(DeltaKind::Reasoning))),
                    "tool_use" => {
                        let n = self.ordinals.next(DeltaKind::ToolCall);
                        out.push_back(Delta::call(n, b.get("id").and_then(Value::as_str), b.get("name").and_then(Value::as_str), ""));
                        Some((DeltaKind::ToolCall, n))
                    }
                    _ => None,
                };
                // Text and thinking may start with content of their own.
                if let Some((k @ (DeltaKind::Text | DeltaKind::Reasoning), n)) = shown {
                    let key = if k == DeltaKind::Text { "text" } else { "thinking" };
                    if let Some(t) = b.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                        out.push_back(Delta::text(k, n, t));
                    }
                }
                self.blocks.insert(i, Block { value: b.clone(), json: String::new(), closed: false, shown });
            }
            "content_block_delta" => {
                let i = index_of(&data, "index")?;
                let block = self.blocks.get_mut(&i).ok_or_else(|| malformed(format!("content block {i} was never started")))?;
                let Some(delta) = data.get("delta").filter(|d| d.is_object()) else {
                    return Err(malformed("`content_block_delta` needs the `delta` object"));
                };
                let fragment = |key: &str| -> Result<&str> {
                    delta.get(key).and_then(Value::as_str).ok_or_else(|| malformed(format!("the delta's `{key}` must be a string")))
                };
                match delta.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        let t = fragment("text")?;
                        append(&mut block.value, "text", t);
                        if let (Some((k, n)), false) = (block.shown, t.is_empty()) {
                            out.push_back(Delta::text(k, n, t));
                        }
                    }
                    "thinking_delta" => {
                        let t = fragment("thinking")?;
                        append(&mut block.value, "thinking", t);
                        if let (Some((k, n)), false) = (block.shown, t.is_empty()) {
                            out.push_back(Delta::text(k, n, t));
                        }
                    }
                    "signature_delta" => append(&mut block.value, "signature", fragment("signature")?),
                    // A threshold compaction block's summary arrives whole, in one delta, with
                    // the opaque metadata to send back (`encrypted_content`); its `content` is
                    // null when the provider's summarisation failed.
                    "compaction_delta" => {
                        if let Some(c) = delta.get("content") {
                            block.value.insert("content".into(), c.clone());
                        }
                        if let Some(e) = delta.get("encrypted_content").filter(|e| !e.is_null()) {
                            block.value.insert("encrypted_content".into(), e.clone());
                        }
                    }
                    "input_json_delta" => {
                        let t = fragment("partial_json")?;
                        block.json.push_str(t);
                        if let (Some((DeltaKind::ToolCall, n)), false) = (block.shown, t.is_empty()) {
                            out.push_back(Delta::call(n, None, None, t));
                        }
                    }
                    "citations_delta" => {
                        if let Some(c) = delta.get("citation") {
                            let list = block.value.entry("citations").or_insert_with(|| Value::Array(Vec::new()));
                            if let Value::Array(a) = list {
                                a.push(c.clone());
                            } else {
                                *list = Value::Array(vec![c.clone()]);
                            }
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = index_of(&data, "index")?;
                let block = self.blocks.get_mut(&i).ok_or_else(|| malformed(format!("content block {i} was never started")))?;
                let ty = block.value.get("type").and_then(Value::as_str).unwrap_or("").to_string();
                if has_input(&ty) && !block.json.trim().is_empty() {
                    let input: Value = serde_json::from_str(&block.json)
                        .map_err(|e| malformed(format!("the input of content block {i} is not valid JSON: {e}")))?;
                    block.value.insert("input".into(), input);
                }
                block.closed = true;
            }
            "message_delta" => {
                let message = self.message.get_or_insert_with(JsonMap::new);
                if let Some(Value::Object(d)) = data.get("delta") {
                    for (k, v) in d {
                        message.insert(k.clone(), v.clone());
                    }
                }
                // Context editing reports what it cleared beside the delta.
                if let Some(cm) = data.get("context_management").filter(|v| !v.is_null()) {
                    message.insert("context_management".into(), cm.clone());
                }
                if let Some(Value::Object(u)) = data.get("usage") {
                    let usage = message.entry("usage").or_insert_with(|| Value::Object(JsonMap::new()));
                    if let Value::Object(usage) = usage {
                        for (k, v) in u {
                            if !v.is_null() {
                                usage.insert(k.clone(), v.clone());
                            }
                        }
                    }
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = data.get("error").cloned().unwrap_or(data.clone());
                return Err(provider_error(&error));
            }
            _ => {}
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.stopped
    }

    fn terminal(&self) -> &'static str {
        "`message_stop`"
    }

    fn body(&self) -> Value {
        let mut body = self.message.clone().unwrap_or_default();
        let content: Vec<Value> = self
            .blocks
            .values()
            .filter(|b| {
                // A tool input is complete only once its block closed.
                let ty = b.value.get("type").and_then(Value::as_str).unwrap_or("");
                b.closed || !has_input(ty)
            })
            .map(|b| Value::Object(b.value.clone()))
            .collect();
        body.insert("content".into(), Value::Array(content));
        Value::Object(body)
    }
}
