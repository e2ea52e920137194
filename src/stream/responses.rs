//! OpenAI Responses API events (`"stream": true`): `event: <type>` / `data: {"type", ...}`.
//!
//! `response.created` / `response.in_progress` carry the response so far; output items are
//! opened by `response.output_item.added`, grow by their deltas (`response.output_text.delta`,
//! `response.refusal.delta`, `response.function_call_arguments.delta`,
//! `response.reasoning_summary_text.delta`, `response.reasoning_text.delta`, with the parts
//! opened by `response.content_part.added` / `response.reasoning_summary_part.added`) and are
//! closed by `response.output_item.done`, which carries the whole item. The stream ends with
//! `response.completed` or `response.incomplete`, which carry the whole response (its `output`
//! included); `response.failed` and `error` are the provider's error. Other events (tool
//! progress, `*.done` of parts) are ignored.

use super::{append, check_format, index_of, json_data, malformed, provider_error, Assembler, Delta, DeltaKind, Ordinals};
use crate::error::Result;
use crate::render::Renderer;
use crate::stream::sse::RawEvent;
use crate::types::JsonMap;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Responses {
    /// The latest response object (from `created` / `in_progress`; the terminal one at the end).
    response: Option<JsonMap>,
    terminal: bool,
    items: BTreeMap<u64, Item>,
    ordinals: Ordinals,
    /// Delta index of each text part: (output index, content index) -> ordinal.
    texts: HashMap<(u64, u64), usize>,
}

#[derive(Debug)]
struct Item {
    value: JsonMap,
    done: bool,
    /// Delta index for tool calls and reasoning.
    ordinal: Option<usize>,
}

impl Responses {
    fn item(&mut self, ev: &Value) -> Result<&mut Item> {
        let oi = index_of(ev, "output_index")?;
        self.items.get_mut(&oi).ok_or_else(|| malformed(format!("output item {oi} was never added")))
    }
}

/// The array at `key` of an item, grown to hold index `i`; its entry there as an object.
fn part_at<'a>(item: &'a mut JsonMap, key: &str, i: u64, fresh: impl Fn() -> Value) -> Result<&'a mut JsonMap> {
    let arr = item.entry(key).or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(arr) = arr else {
        return Err(malformed(format!("the item's `{key}` is not an array")));
    };
    while arr.len() as u64 <= i {
        arr.push(fresh());
    }
    match &mut arr[i as usize] {
        Value::Object(m) => Ok(m),
        _ => Err(malformed(format!("`{key}[{i}]` of the item is not an object"))),
    }
}

fn text_part(kind: &str) -> impl Fn() -> Value + '_ {
    move || serde_json::json!({"type": kind, "text": ""})
}

fn str_field<'a>(ev: &'a Value, key: &str) -> Result<&'a str> {
    ev.get(key).and_then(Value::as_str).ok_or_else(|| malformed(format!("`{key}` must be a string")))
}

impl Assembler for Responses {
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()> {
        if self.terminal {
            return Ok(());
        }
        let data = json_data(ev)?;
        check_format(Renderer::OpenAiResponses, ev, &data)?;
        if !data.is_object() {
            return Err(malformed("an event must be a JSON object"));
        }
        let kind = data.get("type").and_then(Value::as_str).or(ev.name.as_deref()).unwrap_or("");
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(Value::Object(r)) = data.get("response") {
                    self.response = Some(r.clone());
                }
            }
            "response.completed" | "response.incomplete" => {
                let Some(Value::Object(r)) = data.get("response") else {
                    return Err(malformed(format!("`{kind}` needs the `response` object")));
                };
                self.response = Some(r.clone());
                self.terminal = true;
            }
            "response.failed" => {
                let error = crate::types::pointer(&data, "/response/error").filter(|e| !e.is_null()).cloned().unwrap_or(data.clone());
                return Err(provider_error(&error));
            }
            "error" => {
                let error = data.get("error").filter(|e| e.is_object()).cloned().unwrap_or(data.clone());
                return Err(provider_error(&error));
            }
            "response.output_item.added" => {
                let oi = index_of(&data, "output_index")?;
                let Some(Value::Object(item)) = data.get("item") else {
                    return Err(malformed("`response.output_item.added` needs the `item` object"));
                };
                let ordinal = match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        let n = self.ordinals.next(DeltaKind::ToolCall);
                        let id = item.get("call_id").and_then(Value::as_str);
                        let name = item.get("name").and_then(Value::as_str);
                        let args = item.get("arguments").and_then(Value::as_str).unwrap_or("");
                        out.push_back(Delta::call(n, id, name, args));
                        Some(n)
                    }
                    Some("reasoning") => Some(self.ordinals.next(DeltaKind::Reasoning)),
                    _ => None,
                };
                self.items.insert(oi, Item { value: item.clone(), done: false, ordinal });
            }
            "response.output_item.done" => {
                let oi = index_of(&data, "output_index")?;
                let Some(Value::Object(item)) = data.get("item") else {
                    return Err(malformed("`response.output_item.done` needs the `item` object"));
                };
                let ordinal = self.items.get(&oi).and_then(|i| i.ordinal);
                self.items.insert(oi, Item { value: item.clone(), done: true, ordinal });
            }
            "response.content_part.added" => {
                let ci = index_of(&data, "content_index")?;
                let Some(part) = data.get("part").filter(|p| p.is_object()).cloned() else {
                    return Err(malformed("`response.content_part.added` needs the `part` object"));
                };
                let oi = index_of(&data, "output_index")?;
                let is_text = matches!(part.get("type").and_then(Value::as_str), Some("output_text" | "refusal"));
                let item = self.item(&data)?;
                *part_at(&mut item.value, "content", ci, || Value::Object(JsonMap::new()))? = part.as_object().cloned().unwrap_or_default();
                if is_text && !self.texts.contains_key(&(oi, ci)) {
                    let n = self.ordinals.next(DeltaKind::Text);
                    self.texts.insert((oi, ci), n);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let (key, part_kind) = if kind == "response.output_text.delta" { ("text", "output_text") } else { ("refusal", "refusal") };
                let oi = index_of(&data, "output_index")?;
                let ci = index_of(&data, "content_index")?;
                let delta = str_field(&data, "delta")?;
                let item = self.item(&data)?;
                let part = part_at(&mut item.value, "content", ci, || serde_json::json!({"type": part_kind, key: ""}))?;
                append(part, key, delta);
                let n = match self.texts.get(&(oi, ci)) {
                    Some(n) => *n,
                    None => {
                        let n = self.ordinals.next(DeltaKind::Text);
                        self.texts.insert((oi, ci), n);
                        n
                    }
                };
                if !delta.is_empty() {
                    out.push_back(Delta::text(DeltaKind::Text, n, delta));
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = str_field(&data, "delta")?;
                let item = self.item(&data)?;
                append(&mut item.value, "arguments", delta);
                if let (Some(n), false) = (item.ordinal, delta.is_empty()) {
                    out.push_back(Delta::call(n, None, None, delta));
                }
            }
            "response.function_call_arguments.done" => {
                let arguments = str_field(&data, "arguments")?.to_string();
                self.item(&data)?.value.insert("arguments".into(), arguments.into());
            }
            "response.reasoning_summary_part.added" => {
                let si = index_of(&data, "summary_index")?;
                let part = data.get("part").and_then(Value::as_object).cloned().unwrap_or_default();
                let item = self.item(&data)?;
                *part_at(&mut item.value, "summary", si, text_part("summary_text"))? = part;
                // The parser joins summary parts with a blank line.
                if let (Some(n), true) = (item.ordinal, si > 0) {
                    out.push_back(Delta::text(DeltaKind::Reasoning, n, "\n\n"));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let (key, part_kind, index_key) = if kind == "response.reasoning_summary_text.delta" {
                    ("summary", "summary_text", "summary_index")
                } else {
                    ("content", "reasoning_text", "content_index")
                };
                let i = index_of(&data, index_key)?;
                let delta = str_field(&data, "delta")?;
                let item = self.item(&data)?;
                append(part_at(&mut item.value, key, i, text_part(part_kind))?, "text", delta);
                if let (Some(n), false) = (item.ordinal, delta.is_empty()) {
                    out.push_back(Delta::text(DeltaKind::Reasoning, n, delta));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.terminal
    }

    fn terminal(&self) -> &'static str {
        "`response.completed` or `response.incomplete`"
    }

    fn body(&self) -> Value {
        let mut body = self.response.clone().unwrap_or_default();
        body.entry("object").or_insert_with(|| "response".into());
        let has_output = matches!(body.get("output"), Some(Value::Array(a)) if !a.is_empty());
        if !(self.terminal && has_output) {
            // The items as they arrived; an unfinished function call is left out (its
            // arguments are cut).
            let items: Vec<Value> = self
                .items
                .values()
                .filter(|i| i.done || i.value.get("type").and_then(Value::as_str) != Some("function_call"))
                .map(|i| Value::Object(i.value.clone()))
                .collect();
            body.insert("output".into(), Value::Array(items));
        }
        Value::Object(body)
    }
}
