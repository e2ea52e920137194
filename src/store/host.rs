//! A store the host keeps (a database table, a key-value service, ...), reached through a
//! JSON request/reply protocol: [`HostStore`] turns every [`Store`] operation into one request
//! and reads the host's reply. The transport is a [`HostStoreCall`]; the C ABI's
//! `lls_session_open_store` supplies one over a host callback, and a Rust host can supply a
//! closure.
//!
//! The protocol (also in `docs/storage.md`, "A store the host keeps"):
//!
//! - `{"op":"load"}` → `{"records": [string, ...], "lastComplete"?: bool}`, or
//!   `{"locked": why}` when another writer holds the session ([`ErrorKind::Locked`]);
//! - `{"op":"append","sessionId","seq","records","header"?}` → any JSON, or
//!   `{"conflict": why}` when `seq` is not the next one ([`ErrorKind::Conflict`]);
//! - `{"op":"sync"}`, `{"op":"undo","sessionId","from"}` → any JSON;
//! - `{"op":"cut","sessionId","keep","reason"}` → any JSON, optionally `{"savedTo": where}`;
//! - optional, for a bounded open (docs/log.md, "Checkpoints"): `{"op":"lastCheckpoint",
//!   "before"?}` → `{"seq": n, "record": text}` (the last checkpoint record, before event
//!   `before` when given) or `{"seq": null}`; then `{"op":"loadFrom","from": n}` → `{"header":
//!   text, "records": [the records of events n, n+1, ...], "lastComplete"?}`. A host that does
//!   not answer these (any other reply, or a failed call) is read whole with `load`. An append
//!   names the checkpoint records it carries (`"checkpoints": [seq, ...]`), so a host can keep
//!   the last one's seq instead of searching for it (a checkpoint record also starts with
//!   `{"type":"session/checkpoint",`). A host that refuses a second writer answers
//!   `{"locked": why}` to `lastCheckpoint` as it does to `load`.
//!
//! A failed call or a reply that does not fit is an [`ErrorKind::Storage`] error with detail
//! `op` (and `field` for the part of the reply that was wrong).

use crate::error::{Error, ErrorKind, Result};
use crate::store::{is_checkpoint_record, window_from, Batch, Store, StoreContents, StoreWindow};
use crate::types::Fields;
use serde_json::{json, Value};

/// The transport of a [`HostStore`]: sends one request and returns the host's reply.
pub trait HostStoreCall: Send {
    /// Sends `request` (its `"op"` is `op`) and waits for the reply. An error here (the host
    /// failed the call) becomes an [`ErrorKind::Storage`] error naming the operation.
    fn call(&self, op: &str, request: &Value) -> Result<Value>;
}

impl<F: Fn(&str, &Value) -> Result<Value> + Send> HostStoreCall for F {
    fn call(&self, op: &str, request: &Value) -> Result<Value> {
        self(op, request)
    }
}

/// A [`Store`] over the host-store protocol (see the module documentation).
pub struct HostStore<C: HostStoreCall> {
    call: C,
    /// The session id (from the header record once loaded, or from the first append).
    session_id: String,
}

impl<C: HostStoreCall> HostStore<C> {
    /// A store that sends its requests through `call`.
    pub fn new(call: C) -> HostStore<C> {
        HostStore { call, session_id: String::new() }
    }

    /// The transport.
    pub fn transport(&self) -> &C {
        &self.call
    }

    fn request(&self, op: &str, request: Value) -> Result<Value> {
        self.call.call(op, &request).map_err(|e| e.with_kind(ErrorKind::Storage).context(format!("host store `{op}`")).with("op", op))
    }
}

/// A refusal the host signalled in its reply (`{"locked": why}`, `{"conflict": why}`).
fn refusal(reply: &Value, key: &str, kind: ErrorKind, op: &str) -> Option<Error> {
    let why = reply.as_object()?.get(key)?;
    let why = why.as_str().map(str::to_string).unwrap_or_else(|| why.to_string());
    Some(Error::new(kind, format!("host store `{op}`: {why}")).with("op", op))
}

/// A reply that does not fit the protocol.
fn unusable(op: &str, e: Error) -> Error {
    Error::new(ErrorKind::Storage, format!("host store `{op}` replied with unusable data: {}", e.message()))
        .with("op", op)
        .with("field", e.detail().get("field").cloned().unwrap_or(Value::Null))
}

/// Reads a load reply: `{"records": [string, ...], "lastComplete"?: bool}`.
pub fn load_reply(reply: &Value) -> Result<StoreContents> {
    let f = Fields::of(reply, "reply")?;
    let mut records = Vec::new();
    for (i, r) in f.array("records")?.iter().enumerate() {
        let text = r.as_str().ok_or_else(|| Error::invalid(format!("reply.records[{i}]"), "expected a string (one record)"))?;
        records.push(text.as_bytes().to_vec());
    }
    if let Some(k) = f.map.keys().find(|k| !["records", "lastComplete"].contains(&k.as_str())) {
        return Err(Error::invalid(f.p(k), "is not a load reply field (expected records, lastComplete, or locked)"));
    }
    Ok(StoreContents { records, last_complete: f.opt_bool("lastComplete")?.unwrap_or(true) })
}

/// The request of an append.
pub fn append_request(batch: &Batch<'_>) -> Value {
    let mut req = json!({
        "op": "append",
        "sessionId": batch.session_id,
        "seq": batch.seq,
        "records": batch.events.iter().map(|r| &**r).collect::<Vec<&str>>(),
    });
    if let Some(h) = batch.header {
        req["header"] = h.into();
    }
    let checkpoints: Vec<u64> =
        batch.events.iter().enumerate().filter(|(_, r)| is_checkpoint_record(r.as_bytes())).map(|(i, _)| batch.seq + i as u64).collect();
    if !checkpoints.is_empty() {
        req["checkpoints"] = checkpoints.into();
    }
    req
}

/// Reads a `lastCheckpoint` reply: `Some(Some((seq, record)))`, `Some(None)` (the host holds no
/// checkpoint), or `None` (not an answer to this request: a host that does not support it).
fn last_checkpoint_reply(reply: &Value) -> Option<Option<(u64, String)>> {
    let m = reply.as_object()?;
    match m.get("seq")? {
        Value::Null => Some(None),
        v => Some(Some((v.as_u64()?, m.get("record")?.as_str()?.to_string()))),
    }
}

/// Reads a `loadFrom` reply: the header record and the records (`None`: not an answer).
fn load_from_reply(reply: &Value) -> Option<(Vec<u8>, StoreContents)> {
    let m = reply.as_object()?;
    let header = m.get("header")?.as_str()?.as_bytes().to_vec();
    let records = m.get("records")?.as_array()?.iter().map(|r| r.as_str().map(|t| t.as_bytes().to_vec())).collect::<Option<Vec<_>>>()?;
    let last_complete = match m.get("lastComplete") {
        None => true,
        Some(v) => v.as_bool()?,
    };
    Some((header, StoreContents { records, last_complete }))
}

impl<C: HostStoreCall> Store for HostStore<C> {
    fn load(&mut self) -> Result<StoreContents> {
        let reply = self.request("load", json!({"op": "load"}))?;
        if let Some(e) = refusal(&reply, "locked", ErrorKind::Locked, "load") {
            crate::observe::emit(crate::observe::Level::Warn, || {
                crate::observe::Observation::new(
                    "store-locked",
                    crate::observe::Level::Warn,
                    format!("the host store refused to load the session: {}", e.message()),
                )
                .with("store", "host store")
                .with("why", reply["locked"].as_str().map(str::to_string).unwrap_or_else(|| reply["locked"].to_string()))
            });
            return Err(e);
        }
        let contents = load_reply(&reply).map_err(|e| unusable("load", e))?;
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

    fn load_window(&mut self, before: Option<u64>) -> Result<Option<StoreWindow>> {
        let mut req = json!({"op": "lastCheckpoint"});
        if let Some(b) = before {
            req["before"] = b.into();
        }
        let Ok(reply) = self.request("lastCheckpoint", req) else { return Ok(None) };
        if let Some(e) = refusal(&reply, "locked", ErrorKind::Locked, "lastCheckpoint") {
            return Err(e);
        }
        let Some(Some((checkpoint, record))) = last_checkpoint_reply(&reply) else { return Ok(None) };
        let Some(from) = window_from(record.as_bytes()) else { return Ok(None) };
        let from = from.min(checkpoint);
        let Ok(reply) = self.request("loadFrom", json!({"op": "loadFrom", "from": from})) else { return Ok(None) };
        if let Some(e) = refusal(&reply, "locked", ErrorKind::Locked, "loadFrom") {
            return Err(e);
        }
        let Some((header, contents)) = load_from_reply(&reply) else { return Ok(None) };
        if contents.records.is_empty() {
            return Ok(None);
        }
        if let Some(id) = serde_json::from_slice::<Value>(&header).ok().and_then(|v| v["id"].as_str().map(str::to_string)) {
            self.session_id = id;
        }
        Ok(Some(StoreWindow::of_records(header, checkpoint, from, &contents.records, contents.last_complete)))
    }

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        let reply = self.request("append", append_request(batch))?;
        if let Some(e) = refusal(&reply, "conflict", ErrorKind::Conflict, "append") {
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
        self.request("sync", json!({"op": "sync"})).map(|_| ())
    }

    fn undo(&mut self, from: usize) -> Result<()> {
        self.request("undo", json!({"op": "undo", "sessionId": self.session_id, "from": from})).map(|_| ())
    }

    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        let reply = self.request("cut", json!({"op": "cut", "sessionId": self.session_id, "keep": keep, "reason": reason}))?;
        Ok(reply.get("savedTo").and_then(Value::as_str).map(str::to_string))
    }

    fn describe(&self) -> String {
        "host store".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::NewEvent;
    use crate::session::{Session, SessionOptions};
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// A host store over a list of records, as a database-backed host would keep them.
    fn memory_host(records: Arc<Mutex<Vec<String>>>) -> impl HostStoreCall {
        move |op: &str, req: &Value| -> Result<Value> {
            let mut r = records.lock();
            Ok(match op {
                "load" => json!({"records": *r}),
                "append" => {
                    let seq = req["seq"].as_u64().unwrap() as usize;
                    if !r.is_empty() && seq + 1 != r.len() {
                        return Ok(json!({"conflict": format!("seq {seq} is not the next one")}));
                    }
                    if let Some(h) = req["header"].as_str() {
                        r.push(h.to_string());
                    }
                    r.extend(req["records"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()));
                    json!(true)
                }
                "undo" => {
                    let from = req["from"].as_u64().unwrap() as usize;
                    r.truncate(from);
                    json!(true)
                }
                _ => json!(true),
            })
        }
    }

    #[test]
    fn a_session_round_trips_through_the_protocol() {
        let records = Arc::new(Mutex::new(Vec::new()));
        let (s, _) = Session::open(Box::new(HostStore::new(memory_host(records.clone()))), SessionOptions::default()).unwrap();
        s.append(NewEvent::new("host/note", json!({"note": "started"}))).unwrap();
        let n = records.lock().len();
        assert_eq!(n, 2, "the header and one event");
        drop(s);
        let (s, report) = Session::open(Box::new(HostStore::new(memory_host(records))), SessionOptions::default()).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(report.cut_records, 0);
    }

    #[test]
    fn locked_conflict_and_unusable_replies_are_errors_naming_the_op() {
        let locked = |_: &str, _: &Value| -> Result<Value> { Ok(json!({"locked": "held by worker 7"})) };
        let e = HostStore::new(locked).load().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Locked);
        assert!(e.message().contains("held by worker 7"), "{}", e.message());

        let bad = |_: &str, _: &Value| -> Result<Value> { Ok(json!({"records": [1]})) };
        let e = HostStore::new(bad).load().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage);
        assert_eq!(e.detail()["op"], "load");
        assert_eq!(e.detail()["field"], "reply.records[0]");

        let extra = |_: &str, _: &Value| -> Result<Value> { Ok(json!({"records": [], "rows": 3})) };
        let e = HostStore::new(extra).load().unwrap_err();
        assert_eq!(e.detail()["field"], "reply.rows");

        let failing = |_: &str, _: &Value| -> Result<Value> { Err(Error::new(ErrorKind::Internal, "connection reset")) };
        let e = HostStore::new(failing).sync().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage);
        assert!(e.message().contains("host store `sync`") && e.message().contains("connection reset"), "{}", e.message());

        let conflict = |_: &str, _: &Value| -> Result<Value> { Ok(json!({"conflict": "seq taken"})) };
        let batch = Batch { session_id: "s", seq: 4, header: None, events: &[] };
        let e = HostStore::new(conflict).append(&batch).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert_eq!(e.detail()["seq"], 4);
    }
}
