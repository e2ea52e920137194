//! Gemini `streamGenerateContent`: a sequence of `GenerateContentResponse` chunks, as
//! server-sent events (`?alt=sse`: `data: {chunk}`) or as one JSON array streamed element by
//! element.
//!
//! Each chunk holds the next parts of `candidates[0].content`: text arrives in fragments (a
//! fragment extends the previous text part of the same kind, thought or answer, until that part
//! has its `thoughtSignature`; a signature arriving with a fragment, often on an empty one,
//! belongs to the part it extends). A function call arrives whole, or, when the request asked
//! for streamed arguments (Gemini 3), in parts: the first names it with `willContinue: true`,
//! the next carry `partialArgs` (JSON paths with values; a string may come in fragments, each
//! but the last with `willContinue`) and no name, and the first part without `willContinue`
//! (an empty `functionCall: {}`) completes it; the parts make one call, as the non-streamed
//! response has it. `finishReason` marks the last
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
    /// The function call whose arguments are streaming (`willContinue`), if any.
    open: Option<OpenCall>,
}

/// A function call streamed in parts (`functionCall.willContinue`: its arguments come as
/// `partialArgs`, JSON paths with values).
#[derive(Debug)]
struct OpenCall {
    /// Its part in `parts`.
    part: usize,
    /// Whether its delta named it (the first delta of a call carries its id and name).
    named: bool,
    /// The JSON path of the last string fragment when that fragment said `willContinue`: the
    /// next fragment of the same path extends it.
    continuing: Option<String>,
}

/// Whether a part is plain text (or thought text), which later fragments may extend.
fn text_part(p: &JsonMap) -> bool {
    p.get("text").is_some_and(Value::is_string) && p.keys().all(|k| matches!(k.as_str(), "text" | "thought" | "thoughtSignature"))
}

fn is_thought(p: &JsonMap) -> bool {
    p.get("thought") == Some(&Value::Bool(true))
}

/// Whether a function call part is one part of a streamed call: it says more follows, or it
/// carries `partialArgs`.
fn streamed_call(call: &JsonMap) -> bool {
    call.get("willContinue") == Some(&Value::Bool(true)) || call.contains_key("partialArgs")
}

impl Gemini {
    fn add_part(&mut self, part: &JsonMap, out: &mut VecDeque<Delta>) -> Result<()> {
        if let Some(call) = part.get("functionCall") {
            let Value::Object(call) = call else {
                return Err(malformed("`functionCall` must be an object"));
            };
            if self.open.is_some() || streamed_call(call) {
                return self.stream_call(part, call, out);
            }
        }
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
                    return Ok(());
                }
            }
            let kind = if is_thought(part) { DeltaKind::Reasoning } else { DeltaKind::Text };
            let n = self.ordinals.next(kind);
            if !text.is_empty() {
                out.push_back(Delta::text(kind, n, text));
            }
            self.parts.push(Value::Object(part.clone()));
            self.shown.push(Some((kind, n)));
            return Ok(());
        }
        let shown = part.get("functionCall").map(|call| {
            let n = self.ordinals.next(DeltaKind::ToolCall);
            let args = call.get("args").map(Value::to_string).unwrap_or_else(|| "{}".into());
            out.push_back(Delta::call(n, call.get("id").and_then(Value::as_str), call.get("name").and_then(Value::as_str), &args));
            (DeltaKind::ToolCall, n)
        });
        self.parts.push(Value::Object(part.clone()));
        self.shown.push(shown);
        Ok(())
    }

    /// One part of a streamed function call: the first opens it (with its name, usually), each
    /// sets the values of its `partialArgs` in the call's `args`, and the first without
    /// `willContinue: true` (often an empty `functionCall: {}`) completes it. The call is then
    /// the part the non-streamed response would hold: `{"functionCall":{"name","args","id"?}}`
    /// with the part's other fields (`thoughtSignature`).
    fn stream_call(&mut self, part: &JsonMap, call: &JsonMap, out: &mut VecDeque<Delta>) -> Result<()> {
        let open = match self.open.take() {
            Some(o) => o,
            None => {
                let n = self.ordinals.next(DeltaKind::ToolCall);
                self.parts.push(json!({"functionCall": {"args": {}}}));
                self.shown.push(Some((DeltaKind::ToolCall, n)));
                OpenCall { part: self.parts.len() - 1, named: false, continuing: None }
            }
        };
        let Some((_, n)) = self.shown[open.part] else { unreachable!("a call part is shown") };
        let Value::Object(assembled) = &mut self.parts[open.part] else { unreachable!("a call part is an object") };
        for (k, v) in part {
            if k != "functionCall" {
                assembled.insert(k.clone(), v.clone());
            }
        }
        let Some(Value::Object(target)) = assembled.get_mut("functionCall") else { unreachable!("a call part has its call") };
        for key in ["name", "id"] {
            match (call.get(key), target.get(key)) {
                (None, _) => {}
                (Some(Value::String(new)), Some(Value::String(had))) if new != had => {
                    return Err(malformed(format!("function call {n} was streamed as {had:?} and then as {new:?} (its `{key}` changed)")))
                }
                (Some(v @ Value::String(_)), _) => {
                    target.insert(key.into(), v.clone());
                }
                (Some(_), _) => return Err(malformed(format!("`functionCall.{key}` must be a string"))),
            }
        }
        let mut continuing = open.continuing;
        {
            let args = target.get_mut("args").expect("an assembled call has args");
            if let Some(whole) = call.get("args") {
                let Value::Object(whole) = whole else { return Err(malformed("`functionCall.args` must be an object")) };
                for (k, v) in whole {
                    set_arg(args, &[PathStep::Key(k.clone())], v.clone(), false, &format!("$.{k}"))?;
                }
            }
            match call.get("partialArgs") {
                None => {}
                Some(Value::Array(partial)) => {
                    for (i, p) in partial.iter().enumerate() {
                        continuing = apply_partial_arg(args, p, continuing.as_deref(), i)?;
                    }
                }
                Some(_) => return Err(malformed("`functionCall.partialArgs` must be an array")),
            }
        }
        let id = target.get("id").and_then(Value::as_str).map(str::to_string);
        let name = target.get("name").and_then(Value::as_str).map(str::to_string);
        let mut named = open.named;
        if !named && name.is_some() {
            out.push_back(Delta::call(n, id.as_deref(), name.as_deref(), ""));
            named = true;
        }
        if call.get("willContinue") == Some(&Value::Bool(true)) {
            self.open = Some(OpenCall { part: open.part, named, continuing });
            return Ok(());
        }
        // Complete: its arguments in one delta (they stream as JSON paths, not as text).
        let Some(name) = name else {
            return Err(malformed(format!("streamed function call {n} ended without its `name`")));
        };
        let args = target.get("args").map(Value::to_string).unwrap_or_else(|| "{}".into());
        let (id, name) = if named { (None, None) } else { (id.as_deref(), Some(name.as_str())) };
        out.push_back(Delta::call(n, id, name, &args));
        Ok(())
    }
}

/// One step of a `partialArgs` JSON path (RFC 9535: `$`, `.name`, `['name']`, `[0]`).
#[derive(Clone, Debug, PartialEq)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// Parses a JSON path of the form the streamed arguments use: `$` then `.name`, `['name']` /
/// `["name"]` or `[N]` steps.
fn parse_path(path: &str) -> Option<Vec<PathStep>> {
    let mut rest = path.strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            steps.push(PathStep::Key(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            if let Some(q) = r.chars().next().filter(|c| *c == '\'' || *c == '"') {
                let body = &r[1..];
                let close = body.find(q)?;
                steps.push(PathStep::Key(body[..close].to_string()));
                rest = body[close + 1..].strip_prefix(']')?;
            } else {
                let close = r.find(']')?;
                steps.push(PathStep::Index(r[..close].parse().ok()?));
                rest = &r[close + 1..];
            }
        } else {
            return None;
        }
    }
    Some(steps)
}

/// Sets the value at `steps` in `args`, creating the objects and arrays on the way; with
/// `append`, adds a string fragment to the string there. A value given twice for one path, or a
/// path through a value of another shape, is `malformed` (an argument would be lost otherwise).
fn set_arg(args: &mut Value, steps: &[PathStep], value: Value, append: bool, path: &str) -> Result<()> {
    let mut at = args;
    for step in steps {
        at = match step {
            PathStep::Key(k) => {
                if at.is_null() {
                    *at = Value::Object(JsonMap::new());
                }
                let Value::Object(m) = at else {
                    return Err(malformed(format!("the streamed argument {path} goes through a value that is not an object")));
                };
                m.entry(k.clone()).or_insert(Value::Null)
            }
            PathStep::Index(i) => {
                if at.is_null() {
                    *at = Value::Array(Vec::new());
                }
                let Value::Array(a) = at else {
                    return Err(malformed(format!("the streamed argument {path} goes through a value that is not an array")));
                };
                while a.len() <= *i {
                    a.push(Value::Null);
                }
                &mut a[*i]
            }
        };
    }
    match (at, value) {
        (Value::String(had), Value::String(more)) if append => had.push_str(&more),
        (slot @ Value::Null, v) => *slot = v,
        _ => return Err(malformed(format!("the streamed argument {path} was given twice"))),
    }
    Ok(())
}

/// Applies `partialArgs[i]`: `{"jsonPath", one of "stringValue" | "numberValue" | "boolValue" |
/// "nullValue", "willContinue"?}`. A string fragment extends the previous one of the same path
/// when that one said `willContinue`. Returns the path a next fragment extends, if any.
fn apply_partial_arg(args: &mut Value, p: &Value, continuing: Option<&str>, i: usize) -> Result<Option<String>> {
    let at = format!("`partialArgs[{i}]`");
    let Some(path) = p.get("jsonPath").and_then(Value::as_str) else {
        return Err(malformed(format!("{at} needs its `jsonPath` (a string)")));
    };
    let steps = parse_path(path).filter(|s| !s.is_empty()).ok_or_else(|| {
        malformed(format!("{at}: cannot read the JSON path {path:?} (expected $ followed by .name, ['name'] or [N] steps)"))
    })?;
    let value = if let Some(v) = p.get("stringValue") {
        v.as_str().map(|s| Value::String(s.to_string())).ok_or_else(|| malformed(format!("{at}.stringValue must be a string")))?
    } else if let Some(v) = p.get("numberValue") {
        v.is_number().then(|| v.clone()).ok_or_else(|| malformed(format!("{at}.numberValue must be a number")))?
    } else if let Some(v) = p.get("boolValue") {
        v.is_boolean().then(|| v.clone()).ok_or_else(|| malformed(format!("{at}.boolValue must be a boolean")))?
    } else if p.get("nullValue").is_some() {
        Value::Null
    } else {
        return Err(malformed(format!("{at} ({path}) has no value (stringValue, numberValue, boolValue or nullValue)")));
    };
    let append = continuing == Some(path) && value.is_string();
    set_arg(args, &steps, value.clone(), append, path)?;
    Ok((p.get("willContinue") == Some(&Value::Bool(true)) && value.is_string()).then(|| path.to_string()))
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
                self.add_part(p, out)?;
            }
        }
        if candidate.get("finishReason").is_some_and(|f| !f.is_null()) {
            if let Some(open) = &self.open {
                let n = self.shown[open.part].map(|(_, n)| n).unwrap_or_default();
                return Err(malformed(format!(
                    "the answer finished while function call {n} was still streaming (its last part said `willContinue`)"
                )));
            }
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
        // A call still streaming is left out: its arguments are cut.
        let open = self.open.as_ref().map(|o| o.part);
        let parts: Vec<&Value> = self.parts.iter().enumerate().filter(|(i, _)| Some(*i) != open).map(|(_, p)| p).collect();
        candidate.insert("content".into(), json!({"role": "model", "parts": parts}));
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
