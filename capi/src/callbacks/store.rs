//! A host store's transport: the core's host-store protocol over one host callback
//! (`lls_session_open_store`), and the guard that refuses a store callback calling back into the
//! session it stores.

use crate::callbacks::host::HostCallback;
use crate::runtime::error::FfiError;
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, Result};
use llmsession::store::host::HostStoreCall;
use serde_json::Value;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The key of the next host store (0 means "no host store").
static NEXT_STORE_KEY: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The keys of the host stores whose callback is running on this thread (their sessions are
    /// locked).
    static RUNNING_STORES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Marks a store callback as running on this thread until dropped.
struct RunningStore(u64);

impl RunningStore {
    fn enter(key: u64) -> RunningStore {
        RUNNING_STORES.with(|s| s.borrow_mut().push(key));
        RunningStore(key)
    }
}

impl Drop for RunningStore {
    fn drop(&mut self) {
        RUNNING_STORES.with(|s| {
            let mut s = s.borrow_mut();
            if let Some(i) = s.iter().rposition(|k| *k == self.0) {
                s.remove(i);
            }
        });
    }
}

/// Refuses a call into a session (or its agent) from inside that session's own store callback,
/// where the session is locked and the call would deadlock.
pub(crate) fn check_not_in_store(key: u64) -> std::result::Result<(), FfiError> {
    if key != 0 && RUNNING_STORES.with(|s| s.borrow().contains(&key)) {
        return Err(Error::out_of_order(
            "the session's host store callback is running on this thread with the session locked: a store callback may not call into the session it stores, nor into its agent",
        )
        .with("callback", "store")
        .into());
    }
    Ok(())
}

/// The transport of a host store (`lls_session_open_store`): sends each request of the core's
/// host-store protocol ([`llmsession::store::host`]) through the host's callback, marked as
/// running so the callback cannot call back into the session it stores.
pub struct StoreCallback {
    /// The host's store callback.
    pub callback: HostCallback,
    /// The session's reentrancy key (`check_not_in_store`).
    pub key: u64,
}

impl StoreCallback {
    /// A transport over `callback`, with a fresh reentrancy key.
    pub fn new(callback: HostCallback) -> StoreCallback {
        StoreCallback { callback, key: NEXT_STORE_KEY.fetch_add(1, Ordering::Relaxed) }
    }
}

impl HostStoreCall for StoreCallback {
    fn call(&self, _op: &str, request: &Value) -> Result<Value> {
        let _running = RunningStore::enter(self.key);
        // Store operations are not cancellable: a pending reply is awaited until it comes.
        self.callback.call_json(request, &CancelToken::new())
    }
}
