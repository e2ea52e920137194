//! The projection of a visible event straight from its record's bytes: the derived message is
//! assembled from the record's own text instead of parsing the event into values and
//! serialising the message again. Every open uses it: a whole load for every visible event it
//! checks (`crate::log::load`, with the log rules given the projection:
//! `crate::log::rules::LogState::check_projected`), a bounded open for the window before its
//! checkpoint (`crate::log::load::load_window`).
//!
//! It takes a record that [`crate::log::raw::read`] found in canonical form, the bytes
//! `serde_json` writes for the value it parses to. Then the derived message of
//! [`crate::log::history::derive_message`] is, byte for byte, the record's pieces in another
//! order:
//!
//! - `tool/result` → `{"role":"user","content":[{"content":C,"isError":E,"toolCallId":I,"type":"tool-result"}]}`
//!   with `C`, `E`, `I` the texts of `data.content`, `data.isError` and `data.callId`;
//! - `user/message`, `assistant/message` → `{"role":R,"content":C` then `,"provenance":P` (the
//!   provenance written again: its fields are written in their own order) and every other key of
//!   `data.message` in order, `}`.
//!
//! It checks what the derivation checks (the message's role and blocks, a tool result's fields),
//! as a yes or no: anything the derivation would refuse, or that is not the expected shape,
//! gives `None`, and the caller takes the long way, which reports why. Debug builds check every
//! projection against the long way.

use crate::log::event::types;
use crate::log::history::{Derived, Parts};
use crate::log::raw::{blocks, get, members, str_value, RawEvent};
use crate::types::{Block, Provenance, Role};

/// A tool call of a derived assistant message: the index of its block in `content`, its id,
/// name and arguments.
pub(crate) type Call = (usize, String, String, String);

/// A visible event's derived message and, for an assistant message, its tool calls (what
/// `derive_message` gives).
#[derive(Debug)]
pub(crate) struct Projected {
    /// The derived message.
    pub derived: Derived,
    /// The tool calls of an assistant message, in order.
    pub calls: Vec<Call>,
}

/// What a projection gives besides the message's JSON: the rest of its [`Derived`] entry and,
/// for an assistant message, its tool calls.
#[derive(Debug)]
pub(crate) struct Meta {
    pub parts: Parts,
    pub calls: Vec<Call>,
}

/// The projection of the visible event `ev` appended to the surface (see the module docs), or
/// `None` when the long way must decide.
pub(crate) fn project(ev: &RawEvent<'_>) -> Option<Projected> {
    let mut json = String::new();
    let Meta { parts, calls } = project_into(ev, &mut json)?;
    Some(Projected { derived: parts.with_json(json.into()), calls })
}

/// [`project`], writing the message's JSON at the end of `out` (a load that derives many
/// messages writes them into one run: `crate::log::history::RunWriter`). On `None`, `out` is
/// left as it was.
pub(crate) fn project_into(ev: &RawEvent<'_>, out: &mut String) -> Option<Meta> {
    let at = out.len();
    let m = write_projection(ev, out);
    if m.is_none() {
        out.truncate(at);
    }
    m
}

fn write_projection(ev: &RawEvent<'_>, json: &mut String) -> Option<Meta> {
    if !ev.append {
        return None;
    }
    let data = &ev.data;
    match ev.ty {
        types::TOOL_RESULT => {
            let id = get(data, "callId")?;
            let content = get(data, "content")?;
            let is_error = get(data, "isError")?;
            let result_for = str_value(id)?;
            if !(is_error == "true" || is_error == "false") || !blocks_ok(content)? {
                return None;
            }
            json.reserve(content.len() + id.len() + 96);
            json.push_str("{\"role\":\"user\",\"content\":[{\"content\":");
            json.push_str(content);
            json.push_str(",\"isError\":");
            json.push_str(is_error);
            json.push_str(",\"toolCallId\":");
            json.push_str(id);
            json.push_str(",\"type\":\"tool-result\"}]}");
            let parts =
                Parts { seq: ev.seq, role: Role::User, calls: Box::new([]), result_for: Some(result_for.into()), checkpoint: false };
            Some(Meta { parts, calls: Vec::new() })
        }
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE => {
            let msg = get(data, "message")?;
            let m = members(msg)?;
            let role_text = get(&m, "role")?;
            let role = match (ev.ty, role_text) {
                (types::USER_MESSAGE, "\"user\"") => Role::User,
                (types::ASSISTANT_MESSAGE, "\"assistant\"") => Role::Assistant,
                _ => return None,
            };
            let content = get(&m, "content")?;
            let mut calls = Vec::new();
            for (i, (_, bm)) in blocks(content)?.into_iter().enumerate() {
                if !Block::check_canonical(&bm) {
                    return None;
                }
                match &*str_value(get(&bm, "type")?)? {
                    "tool-result" => return None,
                    "tool-call" if role != Role::Assistant => return None,
                    "tool-call" => {
                        let s = |k: &str| str_value(get(&bm, k)?).map(|v| v.into_owned());
                        calls.push((i, s("id")?, s("name")?, s("arguments")?));
                    }
                    _ => {}
                }
            }
            let provenance = match get(&m, "provenance") {
                None => None,
                Some(p) => {
                    let v: serde_json::Value = serde_json::from_str(p).ok()?;
                    Some(serde_json::to_string(&Provenance::from_value(&v, "").ok()?).ok()?)
                }
            };
            json.reserve(msg.len() + 16);
            json.push_str("{\"role\":");
            json.push_str(role_text);
            json.push_str(",\"content\":");
            json.push_str(content);
            if let Some(p) = provenance {
                json.push_str(",\"provenance\":");
                json.push_str(&p);
            }
            for (k, v) in &m {
                if !matches!(*k, "role" | "content" | "provenance") {
                    json.push_str(",\"");
                    json.push_str(k);
                    json.push_str("\":");
                    json.push_str(v);
                }
            }
            json.push('}');
            let checkpoint = ev.ty == types::USER_MESSAGE && get(data, "source") == Some("\"compaction\"");
            let ids = calls.iter().map(|(_, id, _, _)| Box::<str>::from(id.as_str())).collect();
            Some(Meta { parts: Parts { seq: ev.seq, role, calls: ids, result_for: None, checkpoint }, calls })
        }
        _ => None,
    }
}

/// Whether `content` is an array of blocks that pass the block checks (`None`: not an array
/// of objects).
fn blocks_ok(content: &str) -> Option<bool> {
    Some(blocks(content)?.iter().all(|(_, m)| Block::check_canonical(m)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::event::Event;

    fn record(ty: &str, data: &serde_json::Value) -> (Event, String) {
        let ev = Event {
            ty: ty.to_string(),
            seq: 4,
            time: 5,
            data: data.clone(),
            surface_op: Some(crate::log::SurfaceOp::Append),
            sources: None,
        };
        let (line, _) = crate::log::chain::seal(&[7; 32], &ev.to_json());
        (ev, line)
    }

    /// The record's projection equals the long way's, byte for byte, for messages of every kind,
    /// and a message the long way refuses is not projected.
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
                json!({"source":"compaction","zeta":1,"message":{"role":"user","zeta":1,"alpha":[null],"content":[{"type":"image","url":"u","b":{"z":1,"a":25}}]}}),
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
                json!({"callId":"c1","content":[{"type":"text","text":"out"},{"type":"image","data":"d"},
                    {"type":"tool-result","toolCallId":"n","isError":false,"content":[{"type":"text","text":"nested"}]}],"isError":false,"more":1}),
            ),
            (types::TOOL_RESULT, json!({"callId":"c\\2","content":[],"isError":true})),
        ];
        for (ty, data) in &events {
            let (ev, line) = record(ty, data);
            let fast = project(&crate::log::raw::read(&line).expect("canonical")).expect("projected");
            let (long, calls) = crate::log::history::derive_message(&ev).unwrap().unwrap();
            assert_eq!(fast.derived.json.as_str(), long.json.as_str(), "{ty}");
            assert_eq!(
                (fast.derived.seq, fast.derived.role, &fast.derived.calls, &fast.derived.result_for, fast.derived.checkpoint),
                (long.seq, long.role, &long.calls, &long.result_for, long.checkpoint)
            );
            let calls: Vec<Call> = calls.iter().map(|&(i, a, b, c)| (i, a.into(), b.into(), c.into())).collect();
            assert_eq!(fast.calls, calls);
        }
        let refused = [
            (types::USER_MESSAGE, json!({"source":"user","message":{"role":"assistant","content":[]}})),
            (types::USER_MESSAGE, json!({"source":"user","message":{"role":"user","content":{}}})),
            (
                types::USER_MESSAGE,
                json!({"source":"user","message":{"role":"user","content":[{"type":"tool-call","id":"a","name":"n","arguments":""}]}}),
            ),
            (
                types::ASSISTANT_MESSAGE,
                json!({"message":{"role":"assistant","content":[{"type":"tool-result","toolCallId":"a","content":[],"isError":false}]}}),
            ),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[{"type":"text"}]}})),
            (
                types::ASSISTANT_MESSAGE,
                json!({"message":{"role":"assistant","content":[{"type":"tool-call","id":"","name":"n","arguments":""}]}}),
            ),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[{"type":"text","text":null}]}})),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[{"type":""}]}})),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[7]}})),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[],"provenance":{"model":"m"}}})),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"assistant","content":[],"provenance":null}})),
            (types::ASSISTANT_MESSAGE, json!({"message":{"role":"bot","content":[]}})),
            (types::ASSISTANT_MESSAGE, json!({"message":null})),
            (types::TOOL_RESULT, json!({"callId":"c","content":[{"type":""}],"isError":false})),
            (
                types::TOOL_RESULT,
                json!({"callId":"c","content":[{"type":"tool-result","toolCallId":"","content":[],"isError":false}],"isError":false}),
            ),
            (
                types::TOOL_RESULT,
                json!({"callId":"c","content":[{"type":"tool-result","toolCallId":"x","content":[{"type":1}],"isError":false}],"isError":false}),
            ),
            (types::TOOL_RESULT, json!({"callId":"c","content":"x","isError":false})),
            (types::TOOL_RESULT, json!({"callId":"c","content":[]})),
            (types::TOOL_RESULT, json!({"callId":7,"content":[],"isError":false})),
            (types::TOOL_RESULT, json!({"content":[],"isError":false})),
        ];
        for (ty, data) in &refused {
            let (ev, line) = record(ty, data);
            assert!(crate::log::history::derive_message(&ev).is_err(), "{data}: the long way refuses it");
            assert!(project(&crate::log::raw::read(&line).expect("canonical")).is_none(), "{data}");
        }
        // Not appended (a replace is not canonical at all): the long way.
        let (_, line) = record(types::TOOL_RESULT, &json!({"callId":"c","content":[],"isError":true}));
        let mut raw = crate::log::raw::read(&line).unwrap();
        raw.append = false;
        assert!(project(&raw).is_none());
    }
}
