//! Gemini `streamGenerateContent`: a sequence of `GenerateContentResponse` chunks, as
//! server-sent events (`?alt=sse`: `data: {chunk}`) or as one JSON array streamed element by
//! element.
//!
//! Each chunk holds the next parts of `candidates[0].content`: text arrives in fragments (a
//! fragment extends the previous text part of the same kind, thought or answer, until that part
//! has its `thoughtSignature`; a signature arriving with a fragment, often on an empty one,
//! belongs to the part it extends), function calls arrive whole. `finishReason` marks the last
//! chunk of the answer; `usageMetadata`, `modelVersion`, `responseId` and the other fields are
//! taken from the latest chunk that has them. A chunk `{"error": ...}` is the provider's error.

use super::{check_format, json_data, malformed, provider_error, Assembler, Delta, DeltaKind, Ordinals};
use crate::error::Result;
use crate::render::Renderer;
use crate::stream::sse::RawEvent;
use crate::types::JsonMap;
use serde_json::{json, Value};
use std::collections::VecDeque;

#[derive(Debug, Default)]
pub(crate) struct Gemini {
    top: JsonMap,
    candidate: JsonMap,
    parts: Vec<Value>,
    /// Delta kind and index of each part (text and thought parts, function calls).
    shown: Vec<Option<(DeltaKind, usize)>>,
    ordinals: Ordinals,
    finished: bool,
}

/// Whether a part is plain text (or thought text), which later fragments may extend.
fn text_part(p: &JsonMap) -> bool {
    p.get("text").is_some_and(Value::is_string) && p.keys().all(|k| matches!(k.as_str(), "text" | "thought" | "thoughtSignature"))
}

fn is_thought(p: &JsonMap) -> bool {
    p.get("thought") == Some(&Value::Bool(true))
}

impl Gemini {
    fn add_part(&mut self, part: &JsonMap, out: &mut VecDeque<Delta>) {
        let text = part.get("text").and_then(Value::as_str).unwrap_or("");
        if text_part(part) {
            if let (Some(Value::Object(last)), Some(shown)) = (self.parts.last_mut(), self.shown.last()) {
                if text_part(last) && is_thought(last) == is_thought(part) && !last.contains_key("thoughtSignature") {
                    if let Some(Value::String(t)) = last.get_mut("text") {
                        t.push_str(text);
                    }
                    if let Some(sig) = part.get("thoughtSignature") {
                        last.insert("thoughtSignature".into(), sig.clone());
                    }
                    if let (Some((k, n)), false) = (shown, text.is_empty()) {
                        out.push_back(Delta::text(*k, *n, text));
                    }
                    return;
                }
            }
            let kind = if is_thought(part) { DeltaKind::Reasoning } else { DeltaKind::Text };
            let n = self.ordinals.next(kind);
            if !text.is_empty() {
                out.push_back(Delta::text(kind, n, text));
            }
            self.parts.push(Value::Object(part.clone()));
            self.shown.push(Some((kind, n)));
            return;
        }
        let shown = part.get("functionCall").map(|call| {
            let n = self.ordinals.next(DeltaKind::ToolCall);
            let args = call.get("args").map(Value::to_string).unwrap_or_else(|| "{}".into());
            out.push_back(Delta::call(n, call.get("id").and_then(Value::as_str), call.get("name").and_then(Value::as_str), &args));
            (DeltaKind::ToolCall, n)
        });
        self.parts.push(Value::Object(part.clone()));
        self.shown.push(shown);
    }
}

impl Assembler for Gemini {
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()> {
        let chunk = json_data(ev)?;
        check_format(Renderer::Gemini, ev, &chunk)?;
        let Value::Object(chunk) = chunk else {
            return Err(malformed("a chunk must be a JSON object"));
        };
        if let Some(error) = chunk.get("error") {
            return Err(provider_error(error));
        }
        for (k, v) in &chunk {
            if k != "candidates" {
                self.top.insert(k.clone(), v.clone());
            }
        }
        // Several candidates (`candidateCount` > 1) come as several entries, each with its
        // `index`: refused at the first one of a second candidate, as the parser refuses them.
        if let Some(Value::Array(cs)) = chunk.get("candidates") {
            for (i, c) in cs.iter().enumerate() {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(i as u64);
                if index > 0 || i > 0 {
                    let index = index.max(i as u64);
                    return Err(malformed(format!("candidate {index} arrived: {}", crate::render::ONE_CANDIDATE)).with("candidate", index));
                }
            }
        }
        let Some(candidate) = chunk.get("candidates").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        let Value::Object(candidate) = candidate else {
            return Err(malformed("a candidate must be an object"));
        };
        for (k, v) in candidate {
            if k != "content" {
                self.candidate.insert(k.clone(), v.clone());
            }
        }
        if let Some(parts) = candidate.get("content").and_then(|c| c.get("parts")) {
            let Value::Array(parts) = parts else {
                return Err(malformed("`content.parts` must be an array"));
            };
            for p in parts {
                let Value::Object(p) = p else {
                    return Err(malformed("a part must be an object"));
                };
                self.add_part(p, out);
            }
        }
        if candidate.get("finishReason").is_some_and(|f| !f.is_null()) {
            self.finished = true;
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        // A blocked prompt gets no candidate at all, only its feedback.
        self.finished || self.top.get("promptFeedback").and_then(|f| f.get("blockReason")).is_some()
    }

    fn terminal(&self) -> &'static str {
        "a chunk with `finishReason`"
    }

    fn body(&self) -> Value {
        let mut body = self.top.clone();
        if self.candidate.is_empty() && self.parts.is_empty() && self.complete() {
            return Value::Object(body);
        }
        let mut candidate = self.candidate.clone();
        candidate.insert("content".into(), json!({"role": "model", "parts": self.parts}));
        body.insert("candidates".into(), json!([candidate]));
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use crate::render::Renderer;
    use crate::stream::StreamAccumulator;
    use serde_json::json;

    fn parts_of(chunks: &[serde_json::Value]) -> serde_json::Value {
        let mut s = StreamAccumulator::new(Renderer::Gemini);
        for c in chunks {
            s.feed(format!("data: {c}\n\n").as_bytes()).unwrap();
        }
        s.body()["candidates"][0]["content"]["parts"].clone()
    }

    fn chunk(parts: serde_json::Value) -> serde_json::Value {
        json!({"candidates":[{"content":{"role":"model","parts":parts}}]})
    }

    #[test]
    fn fragments_extend_their_part_until_it_is_signed() {
        let parts = parts_of(&[
            chunk(json!([{"text":"a","thought":true}])),
            chunk(json!([{"text":"b","thought":true,"thoughtSignature":"S1"}])),
            chunk(json!([{"text":"c","thought":true}])),
            chunk(json!([{"text":"d"}])),
            chunk(json!([{"text":"","thoughtSignature":"S2"}])),
            chunk(json!([{"functionCall":{"name":"f","args":{}}}])),
            chunk(json!([{"text":"e"}])),
        ]);
        assert_eq!(
            parts,
            json!([
                {"text":"ab","thought":true,"thoughtSignature":"S1"},
                {"text":"c","thought":true},
                {"text":"d","thoughtSignature":"S2"},
                {"functionCall":{"name":"f","args":{}}},
                {"text":"e"}
            ])
        );
    }
}
