//! Gemini Interactions API events (`"stream": true`): `data: {"event_type", ...}`.
//!
//! `interaction.created` (and `interaction.status_update`) carry the interaction so far; steps
//! are opened by `step.start` (`{"index", "step"}`), grow by `step.delta` (`{"index",
//! "delta"}`: `text`, `thought_summary` with its `content`, `thought_signature`,
//! `arguments_delta` with a fragment of a function call's JSON `arguments`) and are closed by
//! `step.stop` (a call's fragments are parsed then). A function call step takes no other delta:
//! one would be lost from the call, so it is refused (`malformed`). The stream ends with
//! `interaction.completed`, which carries the interaction (its `steps` may be left out; a step
//! not yet stopped is complete then); `error` is the provider's error. The earlier event names (`interaction.start`,
//! `content.start` / `content.delta` / `content.stop` with one content each,
//! `interaction.complete`) are read as their current equivalents. Other events are ignored.

use super::{append, check_format, index_of, json_data, malformed, provider_error, Assembler, Delta, DeltaKind, Ordinals};
use crate::error::Result;
use crate::render::Renderer;
use crate::stream::sse::RawEvent;
use crate::types::JsonMap;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Interactions {
    /// The latest interaction object (the terminal one at the end).
    interaction: Option<JsonMap>,
    terminal: bool,
    steps: BTreeMap<u64, Step>,
    ordinals: Ordinals,
}

#[derive(Debug)]
struct Step {
    value: JsonMap,
    /// A function call's arguments as they arrive (JSON text), when they come in fragments.
    arguments: Option<String>,
    done: bool,
    ordinal: Option<usize>,
}

fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| malformed(format!("`{key}` must be a string")))
}

impl Interactions {
    fn step(&mut self, index: u64) -> Result<&mut Step> {
        self.steps.get_mut(&index).ok_or_else(|| malformed(format!("step {index} was never started")))
    }

    fn start(&mut self, index: u64, step: JsonMap, out: &mut VecDeque<Delta>) {
        let ordinal = match step.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let n = self.ordinals.next(DeltaKind::ToolCall);
                let args = match step.get("arguments") {
                    Some(Value::Object(m)) if !m.is_empty() => Value::Object(m.clone()).to_string(),
                    _ => String::new(),
                };
                out.push_back(Delta::call(n, step.get("id").and_then(Value::as_str), step.get("name").and_then(Value::as_str), &args));
                Some(n)
            }
            Some("thought") => Some(self.ordinals.next(DeltaKind::Reasoning)),
            Some("model_output") => {
                let n = self.ordinals.next(DeltaKind::Text);
                let texts: Vec<String> = step
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_string))
                    .collect();
                for t in texts.iter().filter(|t| !t.is_empty()) {
                    out.push_back(Delta::text(DeltaKind::Text, n, t));
                }
                Some(n)
            }
            _ => None,
        };
        self.steps.insert(index, Step { value: step, arguments: None, done: false, ordinal });
    }

    fn delta(&mut self, index: u64, delta: &Value, out: &mut VecDeque<Delta>) -> Result<()> {
        let step = self.step(index)?;
        let is_call = step.value.get("type").and_then(Value::as_str) == Some("function_call");
        let kind = delta.get("type").and_then(Value::as_str);
        // A function call grows by its arguments and its signature only: anything else would be
        // lost from the call, so it is refused rather than dropped.
        if let (true, Some(other)) = (is_call, kind.filter(|k| !matches!(*k, "arguments_delta" | "thought_signature"))) {
            return Err(malformed(format!(
                "a `{other}` delta for function call step {index} (a function call grows by `arguments_delta` and `thought_signature`)"
            )));
        }
        match kind {
            Some("text") => {
                let t = str_field(delta, "text")?;
                let content = step.value.entry("content").or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(parts) = content else {
                    return Err(malformed(format!("the `content` of step {index} is not an array")));
                };
                match parts.last_mut().and_then(Value::as_object_mut).filter(|p| p.get("type").and_then(Value::as_str) == Some("text")) {
                    Some(p) => append(p, "text", t),
                    None => parts.push(json!({"type": "text", "text": t})),
                }
                if let (Some(n), false) = (step.ordinal, t.is_empty()) {
                    out.push_back(Delta::text(DeltaKind::Text, n, t));
                }
            }
            Some("thought_summary") => {
                let t = crate::types::pointer(delta, "/content/text").and_then(Value::as_str).unwrap_or_default();
                let summary = step.value.entry("summary").or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(parts) = summary else {
                    return Err(malformed(format!("the `summary` of step {index} is not an array")));
                };
                // The parser joins summary parts with a blank line.
                if let (Some(n), false) = (step.ordinal, parts.is_empty()) {
                    out.push_back(Delta::text(DeltaKind::Reasoning, n, "\n\n"));
                }
                parts.push(json!({"type": "text", "text": t}));
                if let (Some(n), false) = (step.ordinal, t.is_empty()) {
                    out.push_back(Delta::text(DeltaKind::Reasoning, n, t));
                }
            }
            Some("thought_signature") => {
                let sig = str_field(delta, "signature")?;
                step.value.insert("signature".into(), sig.into());
            }
            Some("arguments_delta") => {
                if !is_call {
                    return Err(malformed(format!("an `arguments_delta` for step {index}, which is not a function call")));
                }
                let fragment = match delta.get("arguments") {
                    None => "",
                    Some(Value::String(s)) => s.as_str(),
                    Some(_) => return Err(malformed("the `arguments` of an `arguments_delta` must be a string")),
                };
                step.arguments.get_or_insert_with(String::new).push_str(fragment);
                if let (Some(n), false) = (step.ordinal, fragment.is_empty()) {
                    out.push_back(Delta::call(n, None, None, fragment));
                }
            }
            // Other content types (images, tool results of built-in tools): kept whole.
            Some(_) => {
                let content = step.value.entry("content").or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(parts) = content {
                    parts.push(delta.clone());
                }
            }
            None => return Err(malformed("a `step.delta` needs a `delta` with a `type`")),
        }
        Ok(())
    }

    fn stop(&mut self, index: u64) -> Result<()> {
        let step = self.step(index)?;
        if let Some(args) = step.arguments.take() {
            let parsed: Value = serde_json::from_str(&args)
                .map_err(|e| malformed(format!("the arguments of function call step {index} are not JSON: {e}")))?;
            step.value.insert("arguments".into(), parsed);
        }
        step.done = true;
        Ok(())
    }
}

impl Assembler for Interactions {
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()> {
        if self.terminal {
            return Ok(());
        }
        let data = json_data(ev)?;
        check_format(Renderer::GeminiInteractions, ev, &data)?;
        if !data.is_object() {
            return Err(malformed("an event must be a JSON object"));
        }
        let kind = data.get("event_type").and_then(Value::as_str).or(ev.name.as_deref()).unwrap_or("");
        match kind {
            "interaction.created" | "interaction.start" | "interaction.status_update" => {
                if let Some(Value::Object(i)) = data.get("interaction") {
                    self.interaction = Some(i.clone());
                }
            }
            "interaction.completed" | "interaction.complete" => {
                let Some(Value::Object(i)) = data.get("interaction") else {
                    return Err(malformed(format!("`{kind}` needs the `interaction` object")));
                };
                self.interaction = Some(i.clone());
                // A step the stream did not stop is complete with the interaction (a function
                // call's arguments are parsed as at `step.stop`, never left out).
                let open: Vec<u64> = self.steps.iter().filter(|(_, s)| !s.done).map(|(i, _)| *i).collect();
                for index in open {
                    self.stop(index)?;
                }
                self.terminal = true;
            }
            "error" => {
                let error = data.get("error").filter(|e| e.is_object()).cloned().unwrap_or(data.clone());
                return Err(provider_error(&error));
            }
            "step.start" => {
                let index = index_of(&data, "index")?;
                let Some(Value::Object(step)) = data.get("step") else {
                    return Err(malformed("`step.start` needs the `step` object"));
                };
                self.start(index, step.clone(), out);
            }
            "content.start" => {
                // The earlier form: one content of the model's output per index.
                let index = index_of(&data, "index")?;
                let content = data.get("content").cloned().unwrap_or(json!({}));
                let step = match content.get("type").and_then(Value::as_str) {
                    Some("thought" | "function_call") => content.as_object().cloned().unwrap_or_default(),
                    _ => {
                        let parts = if content.get("text").is_some_and(|t| t != "") { vec![content] } else { Vec::new() };
                        json!({"type": "model_output", "content": parts}).as_object().cloned().unwrap_or_default()
                    }
                };
                self.start(index, step, out);
            }
            "step.delta" | "content.delta" => {
                let index = index_of(&data, "index")?;
                let Some(delta) = data.get("delta").filter(|d| d.is_object()) else {
                    return Err(malformed(format!("`{kind}` needs the `delta` object")));
                };
                self.delta(index, delta, out)?;
            }
            "step.stop" | "content.stop" => self.stop(index_of(&data, "index")?)?,
            _ => {}
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.terminal
    }

    fn terminal(&self) -> &'static str {
        "`interaction.completed`"
    }

    fn body(&self) -> Value {
        let mut body = self.interaction.clone().unwrap_or_default();
        let has_steps = matches!(body.get("steps"), Some(Value::Array(a)) if !a.is_empty());
        if !(self.terminal && has_steps) {
            // The steps as they arrived; an unfinished function call is left out (its
            // arguments are cut).
            let steps: Vec<Value> = self
                .steps
                .values()
                .filter(|s| s.done || s.value.get("type").and_then(Value::as_str) != Some("function_call"))
                .map(|s| Value::Object(s.value.clone()))
                .collect();
            body.remove("outputs");
            body.insert("steps".into(), Value::Array(steps));
        }
        Value::Object(body)
    }
}
