//! The tool calls an assistant message makes, read out of the JSON a host already holds, so
//! that a host without a JSON parser (C) can run the tool loop: `lls_tool_calls_parse` and its
//! accessors are built on [`ToolCalls::from_value`].
//!
//! Accepted shapes, each validated as the library validates it on input (a message's blocks
//! are checked, so a malformed tool-call block is refused naming its path):
//!
//! - a message `{"role", "content", ...}`: its `tool-call` blocks, in order;
//! - an object with a `message` field: a parsed response (`lls_parse_response`, the input of
//!   `lls_agent_record_response`, `lls_stream_finish`), or the `data` of an event;
//! - an event `{"type", "seq", "data", ...}` (`lls_session_events`): the calls of
//!   `data.message` when it has one (an `assistant/message`), none for any other event;
//! - an array of any of these: the calls of each, in order (`lls_session_events(s, seq, seq +
//!   1, ...)` for the `seq` that `lls_agent_record_body` gives).

use crate::error::{Error, Result};
use crate::types::{kind_of, Fields, Message};
use serde_json::Value;

/// One tool call: the id its result must name, the tool's name and the arguments as the model
/// wrote them (JSON text, not parsed: the model may have written invalid JSON, which the host's
/// tool reports as an error result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The call id (`callId` of the tool result).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, JSON text.
    pub arguments: String,
}

/// The tool calls read from one JSON value, in the order the model made them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCalls(pub Vec<ToolCall>);

impl ToolCalls {
    /// Reads the tool calls of `v` (the shapes in the module documentation).
    pub fn from_value(v: &Value) -> Result<ToolCalls> {
        let mut calls = Vec::new();
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    collect(item, &format!("[{i}]"), &mut calls)?;
                }
            }
            _ => collect(v, "", &mut calls)?,
        }
        Ok(ToolCalls(calls))
    }
}

/// `path` joined with `key`, as the library's error paths are written.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn collect(v: &Value, path: &str, calls: &mut Vec<ToolCall>) -> Result<()> {
    let Value::Object(map) = v else {
        return Err(Error::invalid(
            if path.is_empty() { "json" } else { path },
            format!("expected a message, a response, an event or an array of them, got {}", kind_of(v)),
        ));
    };
    let message_at = |key: &str| (map.get(key), join(path, key));
    if map.contains_key("role") || map.contains_key("content") {
        return push_message(v, path, calls);
    }
    if let (Some(m), at) = message_at("message") {
        return push_message(m, &at, calls);
    }
    if let (Some(data), at) = message_at("data") {
        // An event: only one that carries a message has calls.
        let f = Fields::of(data, &at)?;
        if let Some(m) = f.opt_value("message")? {
            return push_message(m, &join(&at, "message"), calls);
        }
        return Ok(());
    }
    Err(Error::invalid(
        if path.is_empty() { "json" } else { path },
        "expected a message {\"role\",\"content\"}, a response {\"message\"}, an event {\"data\"} or an array of them",
    ))
}

fn push_message(v: &Value, path: &str, calls: &mut Vec<ToolCall>) -> Result<()> {
    let message = Message::from_value(v, path)?;
    for block in &message.content {
        if let Some((id, name, arguments)) = block.as_tool_call() {
            calls.push(ToolCall { id: id.to_string(), name: name.to_string(), arguments: arguments.to_string() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use serde_json::json;

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }
    }

    fn assistant() -> Value {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool-call", "id": "c1", "name": "read_file", "arguments": "{\"path\":\"a\"}"},
            {"type": "tool-call", "id": "c2", "name": "list_dir", "arguments": ""}]})
    }

    #[test]
    fn every_shape_gives_the_calls_in_order() {
        let want = ToolCalls(vec![call("c1", "read_file", "{\"path\":\"a\"}"), call("c2", "list_dir", "")]);
        assert_eq!(ToolCalls::from_value(&assistant()).unwrap(), want);
        let response = json!({"message": assistant(), "usage": {"inputTokens": 1, "outputTokens": 2}, "finishReason": "tool-calls"});
        assert_eq!(ToolCalls::from_value(&response).unwrap(), want);
        let event = json!({"type": "assistant/message", "seq": 4, "time": 1, "data": {"message": assistant(), "turn": 1}});
        assert_eq!(ToolCalls::from_value(&event).unwrap(), want);
        let other = json!({"type": "tool/call", "seq": 5, "time": 1, "data": {"callId": "c1", "name": "read_file", "arguments": ""}});
        let both = ToolCalls::from_value(&json!([event, other, response])).unwrap();
        assert_eq!(both.0.len(), 4);
        assert_eq!(both.0[2], want.0[0]);
    }

    #[test]
    fn a_message_without_calls_gives_none() {
        let text = json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]});
        assert_eq!(ToolCalls::from_value(&text).unwrap(), ToolCalls::default());
        assert_eq!(ToolCalls::from_value(&json!([])).unwrap(), ToolCalls::default());
    }

    #[test]
    fn bad_input_is_refused_naming_where() {
        let e = ToolCalls::from_value(&json!("text")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("got a string"), "{}", e.message());
        let e = ToolCalls::from_value(&json!({"usage": {}})).unwrap_err();
        assert!(e.message().contains("expected a message"), "{}", e.message());
        let bad = json!({"message": {"role": "assistant", "content": [{"type": "tool-call", "id": "", "name": "x", "arguments": ""}]}});
        let e = ToolCalls::from_value(&bad).unwrap_err();
        assert!(e.message().contains("message.content[0].id"), "{}", e.message());
        let e = ToolCalls::from_value(&json!([assistant(), 3])).unwrap_err();
        assert!(e.message().contains("[1]"), "{}", e.message());
    }
}
