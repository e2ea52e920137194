//! OpenAI-compatible chat completion chunks (`"stream": true`): `data: {chunk}` events, then
//! `data: [DONE]`.
//!
//! A chunk is `{"id","object":"chat.completion.chunk","created","model","choices":[{"index",
//! "delta":{"role"?,"content"?,"reasoning_content"?,"tool_calls"?:[{"index","id"?,"type"?,
//! "function":{"name"?,"arguments"?}}]},"finish_reason"}],"usage"?}`; with
//! `stream_options.include_usage` a last chunk has no choices and the usage. String fields of a
//! delta are concatenated (`content`, `reasoning_content`, `reasoning`, `refusal`, ...; the
//! refusal's deltas are text deltas, as the parser makes it a text block), tool
//! calls are put together by their `index` (id, type and name from their first chunk,
//! arguments concatenated), and the last non-null value of every other top-level field wins
//! (`usage`, llama.cpp's `timings`, ...). A chunk `{"error": ...}` is the provider's error; a
//! choice with an `index` above 0 (`n` > 1) is refused at its first chunk, as the parser
//! refuses such a response.

use super::{append, check_format, json_data, malformed, provider_error, Assembler, Delta, DeltaKind};
use crate::error::Result;
use crate::render::Renderer;
use crate::stream::sse::RawEvent;
use crate::types::JsonMap;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Chat {
    done: bool,
    top: JsonMap,
    choices: BTreeMap<u64, Choice>,
}

#[derive(Debug, Default)]
struct Choice {
    message: JsonMap,
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<Value>,
}

#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Reasoning fields servers use: the first one present in a delta is shown.
const REASONING_KEYS: [&str; 2] = ["reasoning_content", "reasoning"];

impl Assembler for Chat {
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk = json_data(ev)?;
        check_format(Renderer::OpenAi, ev, &chunk)?;
        let Value::Object(chunk) = chunk else {
            return Err(malformed("a chunk must be a JSON object"));
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            if !chunk.contains_key("choices") {
                return Err(provider_error(error));
            }
        }
        for (k, v) in &chunk {
            if k != "choices" && k != "object" && !v.is_null() {
                self.top.insert(k.clone(), v.clone());
            }
        }
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(malformed("`choices` must be an array")),
        };
        for c in choices {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            if index > 0 {
                return Err(malformed(format!("choice {index} arrived: {}", crate::render::ONE_CHOICE)).with("choice", index));
            }
            let choice = self.choices.entry(index).or_default();
            let shown = index == 0;
            if let Some(delta) = c.get("delta").filter(|d| !d.is_null()) {
                let Value::Object(delta) = delta else {
                    return Err(malformed("`delta` must be an object"));
                };
                let mut reasoning_shown = false;
                for (k, v) in delta {
                    match (k.as_str(), v) {
                        (_, Value::Null) => {}
                        ("tool_calls", Value::Array(calls)) => {
                            for call in calls {
                                merge_call(choice, call, shown, out)?;
                            }
                        }
                        ("tool_calls", _) => return Err(malformed("`tool_calls` must be an array")),
                        ("role", _) => {
                            choice.message.insert(k.clone(), v.clone());
                        }
                        (_, Value::String(s)) => {
                            append(&mut choice.message, k, s);
                            if shown && !s.is_empty() {
                                if k == "content" {
                                    out.push_back(Delta::text(DeltaKind::Text, 0, s));
                                } else if k == "refusal" {
                                    // The parser gives the refusal a text block after the
                                    // content's (when there is content).
                                    let after = choice.message.get("content").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
                                    out.push_back(Delta::text(DeltaKind::Text, usize::from(after), s));
                                } else if REASONING_KEYS.contains(&k.as_str()) && !reasoning_shown {
                                    reasoning_shown = true;
                                    out.push_back(Delta::text(DeltaKind::Reasoning, 0, s));
                                }
                            }
                        }
                        _ => {
                            choice.message.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            if let Some(f) = c.get("finish_reason").filter(|f| !f.is_null()) {
                choice.finish_reason = Some(f.clone());
            }
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn terminal(&self) -> &'static str {
        "`data: [DONE]`"
    }

    fn body(&self) -> Value {
        let mut body = self.top.clone();
        body.insert("object".into(), "chat.completion".into());
        let mut choices: Vec<Value> = Vec::with_capacity(self.choices.len().max(1));
        for (index, c) in &self.choices {
            choices.push(choice_body(*index, c, self.done));
        }
        if choices.is_empty() {
            choices.push(choice_body(0, &Choice::default(), self.done));
        }
        body.insert("choices".into(), Value::Array(choices));
        Value::Object(body)
    }
}

fn merge_call(choice: &mut Choice, call: &Value, shown: bool, out: &mut VecDeque<Delta>) -> Result<()> {
    let index = call.get("index").and_then(Value::as_u64).unwrap_or(choice.calls.len() as u64);
    let acc = choice.calls.entry(index).or_default();
    let text = |v: &Value, ptr: &str| crate::types::pointer(v, ptr).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let first = acc.id.is_none() && acc.name.is_none();
    // id, type and name come whole in a call's first chunk; servers that repeat them later
    // repeat the same value.
    if acc.id.is_none() {
        acc.id = text(call, "/id");
    }
    if acc.kind.is_none() {
        acc.kind = text(call, "/type");
    }
    if acc.name.is_none() {
        acc.name = text(call, "/function/name");
    }
    let args = match crate::types::pointer(call, "/function/arguments") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(malformed("`function.arguments` must be a string")),
    };
    acc.arguments.push_str(args);
    if shown {
        let named = first && (acc.id.is_some() || acc.name.is_some());
        if named || !args.is_empty() {
            let (id, name) = if named { (acc.id.as_deref(), acc.name.as_deref()) } else { (None, None) };
            out.push_back(Delta::call(index as usize, id, name, args));
        }
    }
    Ok(())
}

fn choice_body(index: u64, c: &Choice, done: bool) -> Value {
    let mut message = c.message.clone();
    message.entry("role").or_insert_with(|| "assistant".into());
    message.entry("content").or_insert(Value::Null);
    // A call is complete once a later call started, or the choice finished.
    let last = c.calls.keys().next_back().copied();
    let calls: Vec<Value> = c
        .calls
        .iter()
        .filter(|(k, _)| done || c.finish_reason.is_some() || Some(**k) != last)
        .map(|(_, call)| {
            json!({
                "id": call.id.clone().unwrap_or_default(),
                "type": call.kind.clone().unwrap_or_else(|| "function".into()),
                "function": {"name": call.name.clone().unwrap_or_default(), "arguments": call.arguments},
            })
        })
        .collect();
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({"index": index, "message": message, "finish_reason": c.finish_reason.clone().unwrap_or(Value::Null)})
}
