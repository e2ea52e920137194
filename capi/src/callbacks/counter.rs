//! The token counter over a host callback.

use crate::callbacks::host::HostCallback;
use llmsession::agent::wire::token_count_reply;
use llmsession::cancel::CancelToken;
use llmsession::tokens::HostCounter;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;

/// A [`HostCounter`] over a host callback. `cancel` is the slot an agent call fills with its
/// cancel token while it runs, so a pending count can be cancelled with the call.
pub fn host_counter(cb: HostCallback, cancel: Arc<Mutex<CancelToken>>) -> HostCounter {
    HostCounter::new(move |item: &Value| {
        let token = cancel.lock().clone();
        token_count_reply(&cb.call_json(item, &token)?)
    })
}
