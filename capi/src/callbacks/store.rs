//! A host store: the [`Store`] trait over one host callback (`lls_session_open_store`), and
//! the guard that refuses a store callback calling back into the session it stores.

use crate::callbacks::host::HostCallback;
use crate::runtime::error::FfiError;
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, ErrorKind, Result};
use llmsession::store::{Batch, Store, StoreContents};
use llmsession::types::Fields;
use serde_json::{json, Value};
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

/// A [`Store`] over one host callback. Every operation is a JSON request (see
/// `lls_session_open_store` for the protocol); a failed or unusable reply is an
/// [`ErrorKind::Storage`] error, `{"locked": why}` from `load` is [`ErrorKind::Locked`] and
/// `{"conflict": why}` from `append` is [`ErrorKind::Conflict`].
pub struct HostStore {
    /// The host's store callback.
    pub callback: HostCallback,
    /// The session's reentrancy key (`check_not_in_store`).
    pub key: u64,
    /// The session id (from the header record once loaded or created).
    pub session_id: String,
}

impl HostStore {
    /// A store over `callback`, with a fresh reentrancy key.
    pub fn new(callback: HostCallback) -> HostStore {
        HostStore { callback, key: NEXT_STORE_KEY.fetch_add(1, Ordering::Relaxed), session_id: String::new() }
    }

    fn call(&self, op: &str, input: Value) -> Result<Value> {
        let _running = RunningStore::enter(self.key);
        // Store operations are not cancellable: a pending reply is awaited until it comes.
        self.callback
            .call_json(&input, &CancelToken::new())
            .map_err(|e| e.with_kind(ErrorKind::Storage).context(format!("host store `{op}`")).with("op", op))
    }

    /// A refusal the host signalled in its reply (`{"locked": why}`, `{"conflict": why}`).
    fn refusal(reply: &Value, key: &str, kind: ErrorKind, op: &str) -> Option<Error> {
        let why = reply.as_object()?.get(key)?;
        let why = why.as_str().map(str::to_string).unwrap_or_else(|| why.to_string());
        Some(Error::new(kind, format!("host store `{op}`: {why}")).with("op", op))
    }
}

fn store_reply_error(op: &str, e: Error) -> Error {
    Error::new(ErrorKind::Storage, format!("host store `{op}` replied with unusable data: {}", e.message()))
        .with("op", op)
        .with("field", e.detail().get("field").cloned().unwrap_or(Value::Null))
}

impl Store for HostStore {
    fn load(&mut self) -> Result<StoreContents> {
        let reply = self.call("load", json!({"op": "load"}))?;
        if let Some(e) = HostStore::refusal(&reply, "locked", ErrorKind::Locked, "load") {
            return Err(e);
        }
        let parse = || -> Result<StoreContents> {
            let f = Fields::of(&reply, "reply")?;
            let mut records = Vec::new();
            for (i, r) in f.array("records")?.iter().enumerate() {
                let text = r.as_str().ok_or_else(|| Error::invalid(format!("reply.records[{i}]"), "expected a string (one record)"))?;
                records.push(text.as_bytes().to_vec());
            }
            if let Some(k) = f.map.keys().find(|k| !["records", "lastComplete"].contains(&k.as_str())) {
                return Err(Error::invalid(f.p(k), "is not a load reply field (expected records, lastComplete, or locked)"));
            }
            Ok(StoreContents { records, last_complete: f.opt_bool("lastComplete")?.unwrap_or(true) })
        };
        let contents = parse().map_err(|e| store_reply_error("load", e))?;
        if let Some(id) = contents
            .records
            .first()
            .and_then(|r| serde_json::from_slice::<Value>(r).ok())
            .and_then(|v| v["id"].as_str().map(str::to_string))
        {
            self.session_id = id;
        }
        Ok(contents)
    }

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        let mut req = json!({"op": "append", "sessionId": batch.session_id, "seq": batch.seq, "records": batch.events.iter().map(|r| &**r).collect::<Vec<&str>>()});
        if let Some(h) = batch.header {
            req["header"] = h.into();
        }
        let reply = self.call("append", req)?;
        if let Some(e) = HostStore::refusal(&reply, "conflict", ErrorKind::Conflict, "append") {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{} (the append named seq {}): another writer appended to this session; refresh or reopen it",
                    e.message(),
                    batch.seq
                ),
            )
            .with("op", "append")
            .with("seq", batch.seq)
            .with("sessionId", batch.session_id));
        }
        self.session_id = batch.session_id.to_string();
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.call("sync", json!({"op": "sync"})).map(|_| ())
    }

    fn undo(&mut self, from: usize) -> Result<()> {
        self.call("undo", json!({"op": "undo", "sessionId": self.session_id, "from": from})).map(|_| ())
    }

    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        let reply = self.call("cut", json!({"op": "cut", "sessionId": self.session_id, "keep": keep, "reason": reason}))?;
        Ok(reply.get("savedTo").and_then(Value::as_str).map(str::to_string))
    }

    fn describe(&self) -> String {
        "host store".into()
    }
}
