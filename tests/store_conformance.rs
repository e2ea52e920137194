//! The store conformance kit (`llmsession::store::conformance`) against the stores of the
//! library (JSONL by URL, memory) and against host stores kept by a Rust host: a correct one
//! passes every case, deliberately broken ones fail the cases that catch their fault, with a
//! detail that says what was wrong. (PostgreSQL: tests/postgres.rs; C: tests/c/
//! test_conformance.c; Go: bindings/go/conformance_test.go.)

use llmsession::error::{Error, ErrorKind, Result};
use llmsession::store::conformance::{run, HostFactory, Report, UrlFactory, CASES};
use llmsession::store::{Batch, MemoryStore, Store, StoreContents};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

fn all_pass(r: &Report) {
    assert_eq!(r.cases.len(), CASES.len());
    for c in &r.cases {
        assert!(c.passed, "{}: {}", c.case, c.detail);
    }
    assert!(r.passed && r.error().is_none());
}

fn case<'a>(r: &'a Report, name: &str) -> &'a llmsession::store::conformance::CaseReport {
    r.cases.iter().find(|c| c.case == name).unwrap_or_else(|| panic!("no case {name}"))
}

#[test]
fn the_jsonl_store_passes_by_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file:{}", dir.path().display());
    let r = run(&mut UrlFactory::new(&url).unwrap(), None).unwrap();
    all_pass(&r);
    assert!(case(&r, "two-writers").detail.contains("refused with locked"), "{}", case(&r, "two-writers").detail);
    assert!(case(&r, "cut").detail.contains(".cut-"), "the sidecar file is named: {}", case(&r, "cut").detail);
    // A file: URL must name a directory.
    let e = UrlFactory::new(&format!("file:{}/log.jsonl", dir.path().display())).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("naming a directory"), "{}", e.message());
}

/// A memory store shared between handles (MemoryStore itself has no second handle).
struct Shared(Arc<Mutex<MemoryStore>>);

impl Store for Shared {
    fn load(&mut self) -> Result<StoreContents> {
        self.0.lock().load()
    }
    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        self.0.lock().append(batch)
    }
    fn sync(&mut self) -> Result<()> {
        self.0.lock().sync()
    }
    fn undo(&mut self, from: usize) -> Result<()> {
        self.0.lock().undo(from)
    }
    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        self.0.lock().cut(keep, reason)
    }
    fn describe(&self) -> String {
        "shared memory".into()
    }
}

#[test]
fn the_memory_store_passes() {
    let sessions: Mutex<HashMap<String, Arc<Mutex<MemoryStore>>>> = Mutex::new(HashMap::new());
    let mut factory = |id: &str| -> Result<Box<dyn Store>> {
        let m = sessions.lock().entry(id.to_string()).or_default().clone();
        Ok(Box::new(Shared(m)))
    };
    let r = run(&mut factory, None).unwrap();
    all_pass(&r);
    // It has no lock: the conditional append fences the second writer.
    assert!(case(&r, "two-writers").detail.contains("does not refuse a second writer"), "{}", case(&r, "two-writers").detail);
}

/// How a host store breaks the contract.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Appends at whatever seq the request names.
    IgnoresHead,
    /// Writes the first half of a batch, then finds the seq wrong.
    HalfBatch,
    /// Keeps the lease after a close.
    KeepsLease,
    /// `undo` does nothing.
    NoUndo,
    /// Not a fault: takes the lease when a handle opens (refusing a second writer with
    /// `{"locked"}` there) rather than at its first load.
    LeaseAtOpen,
    /// Hands over a checkpoint's window one record short.
    ShortWindow,
}

#[derive(Default)]
struct Host {
    /// Session id -> records.
    sessions: HashMap<String, Vec<String>>,
    /// Handle -> session id.
    handles: HashMap<u64, String>,
    /// Session id -> the handle holding its lease.
    leases: HashMap<String, u64>,
    opens: usize,
    closes: usize,
}

/// A host store as a host would write one over its database, with a writer lease per session.
fn host(fault: Fault) -> impl Fn(&str, &Value) -> Result<Value> + Send + Sync {
    host_counting(fault, Arc::new(Mutex::new(Host::default())))
}

fn host_counting(fault: Fault, host: Arc<Mutex<Host>>) -> impl Fn(&str, &Value) -> Result<Value> + Send + Sync {
    move |op: &str, req: &Value| -> Result<Value> {
        let mut h = host.lock();
        let handle = req["handle"].as_u64().ok_or_else(|| Error::invalid("handle", "missing"))?;
        if op == "open" {
            h.opens += 1;
            let id = req["sessionId"].as_str().unwrap().to_string();
            h.handles.insert(handle, id.clone());
            if fault == Fault::LeaseAtOpen {
                match h.leases.get(&id) {
                    Some(&holder) => return Ok(json!({"locked": format!("handle {holder} holds the lease")})),
                    None => {
                        h.leases.insert(id, handle);
                    }
                }
            }
            return Ok(json!(true));
        }
        let id = h.handles.get(&handle).cloned().ok_or_else(|| Error::invalid("handle", "not open"))?;
        if op == "close" {
            h.closes += 1;
            h.handles.remove(&handle);
            if fault != Fault::KeepsLease && h.leases.get(&id) == Some(&handle) {
                h.leases.remove(&id);
            }
            return Ok(json!(true));
        }
        if op == "load" || op == "lastCheckpoint" {
            match h.leases.get(&id) {
                Some(&holder) if holder != handle => return Ok(json!({"locked": format!("handle {holder} holds the lease")})),
                _ => {
                    h.leases.insert(id.clone(), handle);
                }
            }
        }
        let records = h.sessions.entry(id).or_default();
        Ok(match op {
            "load" => json!({"records": records}),
            // The optional bounded-open requests: the last checkpoint record (before a seq), and
            // the records from a seq on.
            "lastCheckpoint" => {
                let before = req["before"].as_u64().map_or(records.len(), |b| (b as usize + 1).min(records.len()));
                match (1..before).rev().find(|&i| records[i].starts_with("{\"type\":\"session/checkpoint\",")) {
                    Some(i) => json!({"seq": i - 1, "record": records[i]}),
                    None => json!({"seq": null}),
                }
            }
            "loadFrom" => {
                let from = req["from"].as_u64().unwrap() as usize + 1;
                let skip = usize::from(fault == Fault::ShortWindow);
                json!({"header": records[0], "records": records[(from + skip).min(records.len())..]})
            }
            "append" => {
                let seq = req["seq"].as_u64().unwrap() as usize;
                let new: Vec<String> = req["header"]
                    .as_str()
                    .map(str::to_string)
                    .into_iter()
                    .chain(req["records"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()))
                    .collect();
                let fits = req["header"].is_string() == records.is_empty() && (records.is_empty() || seq + 1 == records.len());
                match fault {
                    Fault::IgnoresHead => records.extend(new),
                    Fault::HalfBatch if !fits => {
                        records.extend(new.iter().take(new.len().div_ceil(2)).cloned());
                        return Ok(json!({"conflict": "seq is not the next one"}));
                    }
                    _ if !fits => return Ok(json!({"conflict": format!("seq {seq} is not the next one")})),
                    _ => records.extend(new),
                }
                json!(true)
            }
            "undo" => {
                if fault != Fault::NoUndo {
                    records.truncate(req["from"].as_u64().unwrap() as usize);
                }
                json!(true)
            }
            "cut" => {
                records.truncate(req["keep"].as_u64().unwrap() as usize);
                json!({"savedTo": "the quarantine"})
            }
            _ => json!(true),
        })
    }
}

#[test]
fn a_correct_host_store_passes() {
    let r = run(&mut HostFactory::new(host(Fault::None)), None).unwrap();
    all_pass(&r);
    assert_eq!(r.store, "host store");
    let d = &case(&r, "checkpoint-window").detail;
    assert!(d.contains("handed over the window of the last checkpoint"), "{d}");
    assert!(case(&r, "cut").detail.contains("kept in the quarantine"), "{}", case(&r, "cut").detail);
    let v = r.to_json();
    assert_eq!(v["passed"], true);
    assert_eq!(v["cases"][0]["case"], "create-and-reload");
}

#[test]
fn a_host_store_that_refuses_at_open_passes_and_every_handle_is_closed() {
    let state = Arc::new(Mutex::new(Host::default()));
    let r = run(&mut HostFactory::new(host_counting(Fault::LeaseAtOpen, state.clone())), None).unwrap();
    all_pass(&r);
    let d = &case(&r, "two-writers").detail;
    assert!(d.contains("refused with locked") && d.contains("host store `open`: handle"), "{d}");
    let h = state.lock();
    assert!(h.opens > 10 && h.opens == h.closes, "{} opens, {} closes", h.opens, h.closes);
    assert!(h.handles.is_empty() && h.leases.is_empty());
}

#[test]
fn broken_host_stores_fail_the_cases_that_catch_them() {
    let r = run(&mut HostFactory::new(host(Fault::IgnoresHead)), None).unwrap();
    assert!(!r.passed);
    let c = case(&r, "conditional-append");
    assert!(!c.passed);
    assert_eq!(c.detail, "append with expected head 2 succeeded although the store holds 3 events");
    assert!(!case(&r, "batch-atomicity").passed);
    assert!(!case(&r, "stale-writer").passed, "{}", case(&r, "stale-writer").detail);
    assert!(case(&r, "create-and-reload").passed);
    let e = r.error().unwrap();
    assert_eq!(e.kind(), ErrorKind::Nonconforming);
    assert!(e.message().contains("conditional-append"), "{}", e.message());

    let r = run(&mut HostFactory::new(host(Fault::HalfBatch)), None).unwrap();
    let c = case(&r, "batch-atomicity");
    assert!(!c.passed);
    assert!(c.detail.starts_with("the refused append (seq 5, 3 events) left 2 of its records behind"), "{}", c.detail);

    let r = run(&mut HostFactory::new(host(Fault::KeepsLease)), None).unwrap();
    let c = case(&r, "two-writers");
    assert!(!c.passed);
    assert!(c.detail.contains("after the first writer closed") && c.detail.contains("locked"), "{}", c.detail);

    let r = run(&mut HostFactory::new(host(Fault::ShortWindow)), Some(&["checkpoint-window".to_string()])).unwrap();
    assert!(!r.cases[0].passed);
    assert!(r.cases[0].detail.contains("record(s), not the 13 from seq 0 to the end"), "{}", r.cases[0].detail);

    let r = run(&mut HostFactory::new(host(Fault::NoUndo)), Some(&["undo".to_string()])).unwrap();
    assert_eq!(r.cases.len(), 1);
    assert!(
        r.cases[0].detail.starts_with("after undoing the last append (2 events at seq 2), the store holds 5 record(s)"),
        "{}",
        r.cases[0].detail
    );
}

#[test]
fn a_failing_host_call_is_a_failed_case_not_a_crash() {
    let fails = |op: &str, _: &Value| -> Result<Value> {
        if op == "open" || op == "close" {
            return Ok(json!(true));
        }
        Err(Error::new(ErrorKind::Internal, "connection refused"))
    };
    let r = run(&mut HostFactory::new(fails), Some(&["sync-durability".to_string()])).unwrap();
    assert!(!r.passed);
    assert!(
        r.cases[0].detail.contains("storage: host store `load`") && r.cases[0].detail.contains("connection refused"),
        "{}",
        r.cases[0].detail
    );
}
