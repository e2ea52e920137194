//! The token counter over a host callback.

use crate::callbacks::host::HostCallback;
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, ErrorKind, Result};
use llmsession::tokens::HostCounter;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;

/// A [`HostCounter`] over a host callback. `cancel` is the slot an agent call fills with its
/// cancel token while it runs, so a pending count can be cancelled with the call.
pub fn host_counter(cb: HostCallback, cancel: Arc<Mutex<CancelToken>>) -> HostCounter {
    HostCounter::new(move |item: &Value| {
        let token = cancel.lock().clone();
        parse_count(&cb.call_json(item, &token)?)
    })
}

/// Parses a token counter's reply: a non-negative integer, or `{"tokens": n}`.
pub fn parse_count(v: &Value) -> Result<u64> {
    let n = match v {
        Value::Object(m) if m.len() == 1 => m.get("tokens").and_then(Value::as_u64),
        other => other.as_u64(),
    };
    n.ok_or_else(|| {
        Error::new(ErrorKind::Listener, format!("replied with {v}; expected a non-negative integer or {{\"tokens\": n}}"))
            .with("callback", "bad-reply")
    })
}
