//! The projection of a stored visible event straight from its record's bytes, for the window a
//! bounded open reads before its checkpoint (`crate::log::load::load_window`): the derived
//! message is assembled from the record's own text instead of parsing the event into values and
//! serialising the message again.
//!
//! It relies on the record being what this library writes: one JSON object per record, keys in
//! order, compact, strings escaped as `serde_json` escapes them (a record's bytes are covered by
//! the chain, so a record of this library's log is exactly that). Then the derived message of
//! [`crate::log::history::derive`] is, byte for byte, the record's pieces in another order:
//!
//! - `tool/result` → `{"role":"user","content":[{"content":C,"isError":E,"toolCallId":I,"type":"tool-result"}]}`
//!   with `C`, `E`, `I` the texts of `data.content`, `data.isError` and `data.callId`;
//! - `user/message`, `assistant/message` → `{"role":R,"content":C` then `,"provenance":P` (the
//!   provenance written again: its fields are written in their own order) and every other key of
//!   `data.message` in order, `}`.
//!
//! Anything else (a record whose shape is not the expected one) gives `None`, and the caller
//! takes the long way ([`crate::log::history::derive`]). Debug builds check every message it
//! builds against the long way.

use crate::log::event::types;
use crate::log::history::Derived;
use crate::types::{Provenance, Role};

/// Skips whitespace (none in a record this library writes, but harmless).
fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON string starting at `i` (at its opening quote).
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[k] == b'"' {
            return Some(k + 1);
        }
        j = k + 2;
    }
}

/// The end (exclusive) of the JSON value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let n = b[i..].iter().position(|&c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))?;
            (n > 0).then_some(i + n)
        }
    }
}

/// The members of the JSON object at `obj` (its text): each key's text (without its quotes; a
/// key holding an escape is refused) and its value's text, in order.
fn members(obj: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    members_at(obj, 0).map(|(m, _)| m)
}

/// [`members`] of the object that starts at `at` in `obj`, and where it ends.
fn members_at(obj: &[u8], at: usize) -> Option<(Vec<(&[u8], &[u8])>, usize)> {
    let mut out = Vec::with_capacity(8);
    let mut i = ws(obj, at);
    if obj.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(obj, i + 1);
    if obj.get(i) == Some(&b'}') {
        return Some((out, i + 1));
    }
    loop {
        let kend = string_end(obj, i)?;
        let key = &obj[i + 1..kend - 1];
        if key.contains(&b'\\') {
            return None;
        }
        i = ws(obj, kend);
        if obj.get(i) != Some(&b':') {
            return None;
        }
        i = ws(obj, i + 1);
        let vend = value_end(obj, i)?;
        out.push((key, &obj[i..vend]));
        i = ws(obj, vend);
        match obj.get(i)? {
            b',' => i = ws(obj, i + 1),
            b'}' => return Some((out, i + 1)),
            _ => return None,
        }
    }
}

fn get<'a>(m: &[(&[u8], &'a [u8])], key: &str) -> Option<&'a [u8]> {
    m.iter().find(|(k, _)| *k == key.as_bytes()).map(|(_, v)| *v)
}

/// A JSON string's text without its quotes, when it holds no escape.
fn plain_str(v: &[u8]) -> Option<&str> {
    let inner = v.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// The derived message of the visible event record `rec` of type `ty` at `seq` (see the module
/// docs), or `None` when the record does not have the expected shape.
pub(crate) fn project_record(rec: &[u8], ty: &str, seq: u64) -> Option<Derived> {
    // The envelope is `{"type":…,"seq":…,"time":…,"data":{…},"surfaceOp":"append",…}`: the first
    // `,"data":` is the data's key (type, seq and time come before it, and a quote inside a string
    // is escaped), and the data object is read once, for its members and its end.
    const DATA: &[u8] = b",\"data\":";
    let at = memchr::memmem::find(rec, DATA)? + DATA.len();
    let (data, end) = members_at(rec, at)?;
    if !rec[end..].starts_with(b",\"surfaceOp\":\"append\"") {
        return None;
    }
    let d = match ty {
        types::TOOL_RESULT => {
            let id = get(&data, "callId")?;
            let content = get(&data, "content")?;
            let is_error = get(&data, "isError")?;
            if !content.starts_with(b"[") || !(is_error == b"true" || is_error == b"false") {
                return None;
            }
            let result_for = plain_str(id)?;
            let mut json = Vec::with_capacity(content.len() + id.len() + 96);
            json.extend_from_slice(b"{\"role\":\"user\",\"content\":[{\"content\":");
            json.extend_from_slice(content);
            json.extend_from_slice(b",\"isError\":");
            json.extend_from_slice(is_error);
            json.extend_from_slice(b",\"toolCallId\":");
            json.extend_from_slice(id);
            json.extend_from_slice(b",\"type\":\"tool-result\"}]}");
            Derived {
                seq,
                role: Role::User,
                json: String::from_utf8(json).ok()?.into(),
                calls: Box::new([]),
                result_for: Some(result_for.into()),
                checkpoint: false,
            }
        }
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE => {
            let msg = get(&data, "message")?;
            let m = members(msg)?;
            let role_text = get(&m, "role")?;
            let role = match (ty, role_text) {
                (types::USER_MESSAGE, b"\"user\"") => Role::User,
                (types::ASSISTANT_MESSAGE, b"\"assistant\"") => Role::Assistant,
                _ => return None,
            };
            let content = get(&m, "content")?;
            if !content.starts_with(b"[") {
                return None;
            }
            let mut json = Vec::with_capacity(msg.len() + 16);
            json.extend_from_slice(b"{\"role\":");
            json.extend_from_slice(role_text);
            json.extend_from_slice(b",\"content\":");
            json.extend_from_slice(content);
            if let Some(p) = get(&m, "provenance") {
                let v: serde_json::Value = serde_json::from_slice(p).ok()?;
                let p = Provenance::from_value(&v, "").ok()?;
                json.extend_from_slice(b",\"provenance\":");
                serde_json::to_writer(&mut json, &p).ok()?;
            }
            for (k, v) in &m {
                if !matches!(*k, b"role" | b"content" | b"provenance") {
                    json.push(b',');
                    json.push(b'"');
                    json.extend_from_slice(k);
                    json.extend_from_slice(b"\":");
                    json.extend_from_slice(v);
                }
            }
            json.push(b'}');
            // An assistant message's tool calls: its content's tool-call blocks (parsed only when
            // it has one).
            const TOOL_CALL: &[u8] = b"\"type\":\"tool-call\"";
            let calls: Box<[Box<str>]> = if role == Role::Assistant && content.windows(TOOL_CALL.len()).any(|w| w == TOOL_CALL) {
                let blocks: Vec<serde_json::Value> = serde_json::from_slice(content).ok()?;
                blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool-call"))
                    .map(|b| b.get("id").and_then(|i| i.as_str()).map(Box::<str>::from))
                    .collect::<Option<_>>()?
            } else {
                Box::new([])
            };
            let checkpoint = ty == types::USER_MESSAGE && get(&data, "source") == Some(b"\"compaction\"");
            Derived { seq, role, json: String::from_utf8(json).ok()?.into(), calls, result_for: None, checkpoint }
        }
        _ => return None,
    };
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::event::Event;

    /// The record's projection equals the long way's, byte for byte, for messages of every kind.
    #[test]
    fn the_projection_from_bytes_is_the_derived_message() {
        use serde_json::json;
        let events = [
            (
                types::USER_MESSAGE,
                json!({"source":"user","message":{"role":"user","content":[{"type":"text","text":"hi \"there\"\n\u{1}é"}]}}),
            ),
            (
                types::USER_MESSAGE,
                json!({"source":"compaction","zeta":1,"message":{"role":"user","zeta":1,"alpha":[null],"content":[{"type":"image","url":"u","b":{"z":1,"a":2.5}}]}}),
            ),
            (
                types::ASSISTANT_MESSAGE,
                json!({"turn":1,"step":1,"usage":{"inputTokens":3},"message":{"role":"assistant","content":[{"type":"reasoning","text":"r"},{"type":"text","text":"t"},
                    {"type":"tool-call","id":"c1","name":"read","arguments":"{\"a\":1}"},{"type":"tool-call","id":"c\"2","name":"ls","arguments":""}],
                    "provenance":{"provider":"p","model":"m","x":true},"extra":"e"}}),
            ),
            (types::ASSISTANT_MESSAGE, json!({"turn":1,"step":2,"message":{"role":"assistant","content":[]}})),
            (
                types::TOOL_RESULT,
                json!({"callId":"c1","content":[{"type":"text","text":"out"},{"type":"image","data":"d"}],"isError":false,"more":1}),
            ),
            (types::TOOL_RESULT, json!({"callId":"c2","content":[],"isError":true})),
        ];
        for (i, (ty, data)) in events.iter().enumerate() {
            let ev = Event {
                ty: ty.to_string(),
                seq: i as u64,
                time: 5,
                data: data.clone(),
                surface_op: Some(crate::log::SurfaceOp::Append),
                sources: None,
            };
            let (line, _) = crate::log::chain::seal(&[7; 32], &ev.to_json());
            let fast = project_record(line.as_bytes(), ty, ev.seq).expect("projected");
            let long = crate::log::history::derive(&ev).unwrap().unwrap();
            assert_eq!(fast.json.as_str(), long.json.as_str(), "{ty}");
            assert_eq!(
                (fast.seq, fast.role, &fast.calls, &fast.result_for, fast.checkpoint),
                (long.seq, long.role, &long.calls, &long.result_for, long.checkpoint)
            );
        }
        // Not the expected shape: the long way.
        assert!(project_record(b"{\"type\":\"tool/result\",\"seq\":1}", types::TOOL_RESULT, 1).is_none());
        assert!(project_record(b"not json", types::TOOL_RESULT, 1).is_none());
    }
}
