//! Faults and races through the C ABI (the entry points a host calls, called here from Rust).
//!
//! - A host store (`lls_session_open_store`) that refuses the n-th append drives every
//!   appending entry point into `LLS_ERR_STORAGE` at each of its appends; the same call is
//!   retried once the store accepts again. The store holds exactly what the session holds
//!   after every call, and at the end what a fault-free run of the same script holds.
//! - No index into the surface survives a callback: a host token counter that appends context
//!   while the pressure gate measures, and another thread appending while it measures, leave
//!   `lls_agent_next_request` working (they used to panic in the gate and poison the agent).
//! - Smaller findings: a dispose during a pending token-counter reply gives `LLS_ERR_DISPOSED`;
//!   a summariser reply with an unknown field is refused; `lls_parse_response` refuses wrongly
//!   typed fields; `lls_agent_set_tokenizer` and the `tokenizer` option refuse devices and
//!   FIFOs without reading or waiting.

use llmsession_capi::agent::*;
use llmsession_capi::callbacks::reply::lls_reply;
use llmsession_capi::reply::{lls_reply_complete, lls_reply_fail, lls_reply_set_json};
use llmsession_capi::response::lls_parse_response;
use llmsession_capi::runtime::status::*;
use llmsession_capi::session::*;
use serde_json::{json, Value};
use std::ffi::{c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------------------------
// Calling the ABI

mod support {
    pub mod abi;
}
use support::abi::{call, call_out, Failure};

fn j(v: &Value) -> String {
    v.to_string()
}

fn user(text: &str) -> String {
    j(&json!({"role": "user", "content": [{"type": "text", "text": text}]}))
}

fn response(text: &str, calls: &[&str]) -> String {
    let mut content = vec![json!({"type": "text", "text": text})];
    for c in calls {
        content.push(json!({"type": "tool-call", "id": c, "name": "read", "arguments": "{}"}));
    }
    j(&json!({"message": {"role": "assistant", "content": content}}))
}

fn events(s: *mut lls_session) -> Vec<Value> {
    let text = call_out(|o, l, e| unsafe { lls_session_events(s, 0, u64::MAX, o, l, e) }).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn history(s: *mut lls_session) -> String {
    call_out(|o, l, e| unsafe { lls_session_history(s, o, l, e) }).unwrap()
}

fn new_agent(s: *mut lls_session, opts: &Value) -> Result<*mut lls_agent, Failure> {
    let o = j(opts);
    let mut a: *mut lls_agent = null_mut();
    call(|e| unsafe { lls_agent_new(s, o.as_ptr().cast(), o.len(), &mut a, e) })?;
    Ok(a)
}

fn start_turn(a: *mut lls_agent, text: &str) -> Result<(), Failure> {
    let m = user(text);
    call(|e| unsafe { lls_agent_start_turn(a, m.as_ptr().cast(), m.len(), null_mut(), e) })
}

fn next_request(a: *mut lls_agent) -> Result<String, Failure> {
    call_out(|o, l, e| unsafe { lls_agent_next_request(a, null(), o, l, e) })
}

fn record_response(a: *mut lls_agent, text: &str, calls: &[&str]) -> Result<(), Failure> {
    let r = response(text, calls);
    call(|e| unsafe { lls_agent_record_response(a, r.as_ptr().cast(), r.len(), null_mut(), e) })
}

fn tool_result(a: *mut lls_agent, id: &str, text: &str) -> Result<(), Failure> {
    let r = j(&json!({"callId": id, "text": text}));
    call(|e| unsafe { lls_agent_record_tool_result(a, r.as_ptr().cast(), r.len(), null_mut(), e) })
}

fn inject(a: *mut lls_agent, text: &str) -> Result<(), Failure> {
    let m = user(text);
    call(|e| unsafe { lls_agent_inject(a, m.as_ptr().cast(), m.len(), null_mut(), e) })
}

fn provider_error(a: *mut lls_agent, overflow: bool) -> Result<i32, Failure> {
    let r = j(&json!({"message": "provider failed", "overflow": overflow}));
    let mut retry = -1;
    call(|e| unsafe { lls_agent_provider_error(a, r.as_ptr().cast(), r.len(), null(), &mut retry, e) })?;
    Ok(retry)
}

fn end_turn(a: *mut lls_agent, reason: &str) -> Result<(), Failure> {
    call(|e| unsafe { lls_agent_end_turn(a, reason.as_ptr().cast(), reason.len(), e) })
}

fn compact(a: *mut lls_agent) -> Result<String, Failure> {
    call_out(|o, l, e| unsafe { lls_agent_compact(a, null(), 0, null(), o, l, e) })
}

// ---------------------------------------------------------------------------------------------
// Callbacks

unsafe fn input<'a>(p: *const c_char, len: usize) -> &'a str {
    std::str::from_utf8(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }).unwrap()
}

fn answer(reply: *mut lls_reply, v: &str) -> i32 {
    assert_eq!(unsafe { lls_reply_set_json(reply, v.as_ptr().cast(), v.len(), null_mut()) }, LLS_OK);
    LLS_CB_OK
}

fn fail(reply: *mut lls_reply, why: &str) -> i32 {
    assert_eq!(unsafe { lls_reply_fail(reply, why.as_ptr().cast(), why.len(), null_mut()) }, LLS_OK);
    LLS_CB_ERROR
}

/// A summariser answering `text` (its userdata: a leaked `String`).
unsafe extern "C" fn summariser(ud: *mut c_void, _: *const c_char, _: usize, reply: *mut lls_reply) -> i32 {
    let text = unsafe { &*(ud as *const String) };
    answer(reply, &j(&json!({"text": text})))
}

fn set_summariser(a: *mut lls_agent, text: &str) {
    let ud = Box::into_raw(Box::new(text.to_string())) as *mut c_void;
    unsafe extern "C" fn free_string(p: *mut c_void) {
        drop(unsafe { Box::from_raw(p as *mut String) });
    }
    call(|e| unsafe { lls_agent_set_summariser(a, Some(summariser), ud, Some(free_string), e) }).unwrap();
}

/// A host store kept in memory that refuses the `fail_at`-th append from now.
#[derive(Default)]
struct MemStore {
    records: Mutex<Vec<String>>,
    fail_at: AtomicU32,
    fired: AtomicBool,
}

unsafe extern "C" fn mem_store(ud: *mut c_void, input_ptr: *const c_char, len: usize, reply: *mut lls_reply) -> i32 {
    let st = unsafe { &*(ud as *const MemStore) };
    let req: Value = serde_json::from_str(unsafe { input(input_ptr, len) }).unwrap();
    let mut records = st.records.lock().unwrap();
    match req["op"].as_str().unwrap() {
        "load" => answer(reply, &j(&json!({ "records": *records }))),
        "append" => {
            let n = st.fail_at.load(Ordering::SeqCst);
            if n == 1 {
                st.fail_at.store(0, Ordering::SeqCst);
                st.fired.store(true, Ordering::SeqCst);
                return fail(reply, "no space left on the host's disk (injected)");
            } else if n > 1 {
                st.fail_at.store(n - 1, Ordering::SeqCst);
            }
            if let Some(h) = req["header"].as_str() {
                assert!(records.is_empty());
                records.push(h.to_string());
            }
            if req["seq"].as_u64().unwrap() as usize + 1 != records.len() {
                return answer(reply, &j(&json!({"conflict": "seq"})));
            }
            records.extend(req["records"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()));
            answer(reply, "true")
        }
        "undo" => {
            let from = req["from"].as_u64().unwrap() as usize;
            records.truncate(from);
            answer(reply, "true")
        }
        "cut" => {
            let keep = req["keep"].as_u64().unwrap() as usize;
            records.truncate(keep);
            answer(reply, "true")
        }
        _ => answer(reply, "true"),
    }
}

fn open_store(store: &Arc<MemStore>) -> Result<*mut lls_session, Failure> {
    let mut s: *mut lls_session = null_mut();
    let o = r#"{"id":"ffi-faults","durability":"turn-end"}"#;
    call(|e| unsafe {
        lls_session_open_store(Some(mem_store), Arc::as_ptr(store) as *mut c_void, None, o.as_ptr().cast(), o.len(), &mut s, e)
    })?;
    Ok(s)
}

// ---------------------------------------------------------------------------------------------
// The sweep

fn agent_opts() -> Value {
    json!({
        "config": {"provider": "openai", "model": "m"},
        "system": "You answer questions about files.",
        "policy": {"contextWindow": 3000, "threshold": 0.2, "retainedTokens": 50, "summaryMaxTokens": 1000},
    })
}

fn big(word: &str) -> String {
    format!("{word} ").repeat(800)
}

struct CHost {
    store: Arc<MemStore>,
    s: *mut lls_session,
    a: *mut lls_agent,
}

impl CHost {
    fn agent(&mut self) -> Result<(), Failure> {
        self.a = new_agent(self.s, &agent_opts())?;
        set_summariser(self.a, "SUMMARY: the files were read.");
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Retry {
    Same,
    /// A refused dispose: the instance is gone; a new one ends the turn `disposed`.
    EndWithNewInstance,
}

type Step = (&'static str, Retry, fn(&mut CHost) -> Result<(), Failure>);

fn script() -> Vec<Step> {
    vec![
        ("lls_session_open_store (creates)", Retry::Same, |h| {
            h.s = open_store(&h.store)?;
            Ok(())
        }),
        ("lls_session_append", Retry::Same, |h| {
            let ev = r#"{"type":"host/note","data":{"n":1}}"#;
            call(|e| unsafe { lls_session_append(h.s, ev.as_ptr().cast(), ev.len(), null_mut(), e) })
        }),
        ("lls_agent_new", Retry::Same, |h| h.agent()),
        ("start_turn 1", Retry::Same, |h| start_turn(h.a, "Read a and b.")),
        ("next_request 1.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 1.1", Retry::Same, |h| record_response(h.a, "reading", &["a", "b"])),
        ("inject (deferred)", Retry::Same, |h| inject(h.a, "Note: b is large.")),
        ("tool_result b", Retry::Same, |h| tool_result(h.a, "b", &big("beta"))),
        ("tool_result a", Retry::Same, |h| tool_result(h.a, "a", "alpha")),
        ("next_request 1.2", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 1.2", Retry::Same, |h| record_response(h.a, "both read", &[])),
        ("end_turn 1", Retry::Same, |h| end_turn(h.a, "completed")),
        ("start_turn 2", Retry::Same, |h| start_turn(h.a, "Summarise b.")),
        ("next_request 2.1 (gate compacts)", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 2.1", Retry::Same, |h| record_response(h.a, &big("gamma"), &[])),
        ("end_turn 2", Retry::Same, |h| end_turn(h.a, "completed")),
        ("start_turn 3", Retry::Same, |h| start_turn(h.a, "And c.")),
        ("next_request 3.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("provider_error overflow", Retry::Same, |h| {
            assert_eq!(provider_error(h.a, true)?, 1, "retry");
            Ok(())
        }),
        ("next_request 3.2", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 3.2", Retry::Same, |h| record_response(h.a, "c is done", &[])),
        ("end_turn 3", Retry::Same, |h| end_turn(h.a, "completed")),
        ("inject (idle)", Retry::Same, |h| inject(h.a, &big("delta"))),
        ("lls_agent_compact", Retry::Same, |h| compact(h.a).map(|_| ())),
        ("start_turn 4", Retry::Same, |h| start_turn(h.a, "Try d.")),
        ("next_request 4.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("provider_error", Retry::Same, |h| provider_error(h.a, false).map(|_| ())),
        ("end_turn 4 aborted", Retry::Same, |h| end_turn(h.a, "aborted")),
        ("start_turn 5", Retry::Same, |h| start_turn(h.a, "Read e and f.")),
        ("next_request 5.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 5.1", Retry::Same, |h| record_response(h.a, "reading", &["e", "f"])),
        ("tool_result f (waits)", Retry::Same, |h| tool_result(h.a, "f", "phi")),
        ("end_turn 5 error", Retry::Same, |h| end_turn(h.a, "error")),
        ("start_turn 6", Retry::Same, |h| start_turn(h.a, "Wait.")),
        ("next_request 6.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("lls_agent_dispose", Retry::EndWithNewInstance, |h| {
            let r = call(|e| unsafe { lls_agent_dispose(h.a, e) });
            lls_agent_free(h.a);
            h.a = null_mut();
            r
        }),
        ("lls_agent_new (resumed)", Retry::Same, |h| h.agent()),
        ("start_turn 7", Retry::Same, |h| start_turn(h.a, "Done?")),
        ("next_request 7.1", Retry::Same, |h| next_request(h.a).map(|_| ())),
        ("record_response 7.1", Retry::Same, |h| record_response(h.a, "Done.", &[])),
        ("end_turn 7", Retry::Same, |h| end_turn(h.a, "completed")),
        ("lls_session_sync", Retry::Same, |h| call(|e| unsafe { lls_session_sync(h.s, e) })),
    ]
}

/// The store's records equal the session's (header, then every event record, byte for byte).
fn assert_in_step(h: &CHost, what: &str) {
    if h.s.is_null() {
        assert!(h.store.records.lock().unwrap().is_empty(), "{what}: a refused open left records in the store");
        return;
    }
    let stored = h.store.records.lock().unwrap().clone();
    let text = call_out(|o, l, e| unsafe { lls_session_events(h.s, 0, u64::MAX, o, l, e) }).unwrap();
    let mem: Vec<String> = serde_json::from_str::<Vec<Value>>(&text).unwrap().iter().map(|v| v.to_string()).collect();
    let stored_events: Vec<String> = stored[1..].iter().map(|r| serde_json::from_str::<Value>(r).unwrap().to_string()).collect();
    assert_eq!(stored_events, mem, "{what}: the store and the session disagree");
}

/// What the host saw succeed: the history, and the events without compactions that did not
/// land (seq-dependent fields left out).
fn outcome(s: *mut lls_session) -> (String, Vec<String>) {
    let mut keep = Vec::new();
    let mut open = Vec::new();
    for e in events(s) {
        let ty = e["type"].as_str().unwrap().to_string();
        if ty.starts_with("compaction/") {
            if ty == "compaction/start" {
                open.clear();
            }
            open.push(ty.clone());
            if ty == "compaction/end" {
                if e["data"]["outcome"] == "landed" {
                    keep.append(&mut open);
                }
                open.clear();
            }
            continue;
        }
        keep.push(match ty.as_str() {
            "step/start" => format!("{ty} {} {}", e["data"]["turn"], e["data"]["step"]),
            // The seqs a checkpoint names depend on what was logged before.
            "session/checkpoint" => ty.clone(),
            _ => format!("{ty} {}", e["data"]),
        });
    }
    (history(s), keep)
}

fn finish(h: CHost) {
    if !h.a.is_null() {
        lls_agent_free(h.a);
    }
    lls_session_free(h.s);
}

fn run(target: Option<(usize, u32)>, reference: Option<&(String, Vec<String>)>) -> (bool, Vec<u32>, (String, Vec<String>)) {
    let mut h = CHost { store: Arc::new(MemStore::default()), s: null_mut(), a: null_mut() };
    let mut fired = false;
    let mut counts = Vec::new();
    for (i, (name, retry, f)) in script().into_iter().enumerate() {
        let before = h.store.records.lock().unwrap().len() as u32;
        if target.map(|t| t.0) != Some(i) {
            f(&mut h).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            counts.push(h.store.records.lock().unwrap().len() as u32 - before);
            continue;
        }
        let at = target.unwrap().1;
        let what = format!("a refused append {at} in {name}");
        h.store.fired.store(false, Ordering::SeqCst);
        h.store.fail_at.store(at, Ordering::SeqCst);
        let r = f(&mut h);
        fired = h.store.fired.load(Ordering::SeqCst);
        h.store.fail_at.store(0, Ordering::SeqCst);
        counts.push(0);
        match r {
            Ok(()) => assert!(!fired, "{what}: the call reported success"),
            Err(e) => {
                assert!(fired, "{what}: failed without the fault: {e:?}");
                assert_eq!(e.status, LLS_ERR_STORAGE, "{what}: {e:?}");
                assert!(e.message.contains("injected"), "{what}: the error carries the store's message: {}", e.message);
                assert_in_step(&h, &what);
                match retry {
                    Retry::Same => f(&mut h).unwrap_or_else(|e| panic!("{what}: the retry failed: {e:?}")),
                    Retry::EndWithNewInstance => {
                        h.agent().unwrap();
                        end_turn(h.a, "disposed").unwrap_or_else(|e| panic!("{what}: closing the turn: {e:?}"));
                        call(|e| unsafe { lls_agent_dispose(h.a, e) }).unwrap();
                        lls_agent_free(h.a);
                        h.a = null_mut();
                    }
                }
            }
        }
        assert_in_step(&h, &what);
    }
    let what = format!("{target:?}");
    assert_in_step(&h, &what);
    let verified = call_out(|o, l, e| unsafe { lls_session_verify(h.s, o, l, e) });
    assert!(verified.is_ok(), "{what}: verify: {verified:?}");
    let got = outcome(h.s);
    if let Some(want) = reference {
        assert_eq!(got.0, want.0, "{what}: the history differs from a run without faults");
        assert_eq!(got.1, want.1, "{what}: the events differ from a run without faults");
    }
    finish(h);
    (fired, counts, got)
}

#[test]
fn every_append_refused_through_the_c_abi_leaves_store_and_session_in_step() {
    let (_, counts, reference) = run(None, None);
    assert!(reference.1.iter().any(|e| e == "compaction/summary"), "the script compacts");
    let mut faults = 0;
    for (i, (name, _, _)) in script().iter().enumerate() {
        if counts[i] == 0 {
            continue;
        }
        let mut at = 1;
        while run(Some((i, at)), Some(&reference)).0 {
            faults += 1;
            at += 1;
            assert!(at < 20, "{name}");
        }
    }
    eprintln!("{faults} refused appends injected");
    assert!(faults > 30, "{faults}");
}

// ---------------------------------------------------------------------------------------------
// No index into the surface survives a callback

/// What a host token counter does besides counting (its userdata).
struct Counter {
    session: *mut lls_session,
    /// Appends of context left to make from inside the counter.
    appends: AtomicUsize,
    /// Counts handed to the helper thread for a concurrent append, answered when it is done.
    to_thread: Mutex<Option<std::sync::mpsc::Sender<std::sync::mpsc::Sender<()>>>>,
    /// A pending reply parked for a disposing thread.
    parked: Mutex<Option<std::sync::mpsc::Sender<usize>>>,
}

// SAFETY: the session handle is usable from any thread (the ABI's rule).
unsafe impl Send for Counter {}
// SAFETY: as above.
unsafe impl Sync for Counter {}

/// Counts with one token per 4 bytes of the item, and, while armed, appends host context to the
/// session (from this thread or from the helper thread) before answering.
unsafe extern "C" fn counter(ud: *mut c_void, input_ptr: *const c_char, len: usize, reply: *mut lls_reply) -> i32 {
    let c = unsafe { &*(ud as *const Counter) };
    let text = unsafe { input(input_ptr, len) };
    let n = text.len() / 4 + 1;
    if let Some(tx) = c.parked.lock().unwrap().take() {
        tx.send(reply as usize).unwrap();
        return LLS_CB_PENDING;
    }
    if c.appends.load(Ordering::SeqCst) > 0 {
        c.appends.fetch_sub(1, Ordering::SeqCst);
        let helper = c.to_thread.lock().unwrap().clone();
        match helper {
            // Another thread appends while this count is outstanding.
            Some(tx) => {
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                tx.send(done_tx).unwrap();
                done_rx.recv().unwrap();
            }
            None => {
                let ev = j(&json!({"type": "user/message", "surfaceOp": "append",
                    "data": {"message": {"role": "user", "content": [{"type": "text", "text": "context from the counter"}]}, "source": "host"}}));
                let st = unsafe { lls_session_append(c.session, ev.as_ptr().cast(), ev.len(), null_mut(), null_mut()) };
                assert_eq!(st, LLS_OK, "a host counter may append context");
            }
        }
    }
    answer(reply, &n.to_string())
}

fn set_counter(a: *mut lls_agent, c: &Arc<Counter>) {
    call(|e| unsafe { lls_agent_set_token_counter(a, Some(counter), Arc::as_ptr(c) as *mut c_void, None, e) }).unwrap();
}

fn memory_session() -> *mut lls_session {
    let mut s: *mut lls_session = null_mut();
    let o = r#"{"id":"races"}"#;
    call(|e| unsafe { lls_session_new_memory(o.as_ptr().cast(), o.len(), &mut s, e) }).unwrap();
    s
}

/// A session whose next request is over the gate's threshold, with a host counter.
fn over_threshold(c: &Arc<Counter>) -> (*mut lls_session, *mut lls_agent) {
    let s = c.session;
    let a = new_agent(s, &agent_opts()).unwrap();
    set_summariser(a, "SUMMARY");
    set_counter(a, c);
    start_turn(a, &big("one")).unwrap();
    next_request(a).unwrap();
    record_response(a, &big("two"), &[]).unwrap();
    end_turn(a, "completed").unwrap();
    start_turn(a, "three").unwrap();
    (s, a)
}

fn counter_for(s: *mut lls_session) -> Arc<Counter> {
    Arc::new(Counter { session: s, appends: AtomicUsize::new(0), to_thread: Mutex::new(None), parked: Mutex::new(None) })
}

/// The gate measures, the host counter appends context while counting (which the ABI allows),
/// and the gate then selects a region: on the surface it measured, not on one that grew since.
#[test]
fn a_host_counter_appending_context_while_the_gate_measures() {
    let s = memory_session();
    let c = counter_for(s);
    let (_, a) = over_threshold(&c);
    c.appends.store(1, Ordering::SeqCst);
    let req = next_request(a).unwrap_or_else(|e| panic!("next_request with a host counter that appends: {e:?}"));
    assert_eq!(c.appends.load(Ordering::SeqCst), 0, "the counter appended");
    assert!(req.contains("SUMMARY"), "the gate compacted");
    assert!(req.contains("context from the counter"), "the appended context joins the request");
    // The agent is not poisoned: the turn goes on.
    record_response(a, "ok", &[]).unwrap();
    end_turn(a, "completed").unwrap();
    call_out(|o, l, e| unsafe { lls_session_verify(s, o, l, e) }).unwrap();
    lls_agent_free(a);
    lls_session_free(s);
}

/// Another thread appends to the session while the gate's count is outstanding.
#[test]
fn a_concurrent_host_append_while_the_gate_measures() {
    let s = memory_session();
    let c = counter_for(s);
    let (tx, rx) = std::sync::mpsc::channel::<std::sync::mpsc::Sender<()>>();
    *c.to_thread.lock().unwrap() = Some(tx);
    let s_addr = s as usize;
    let helper = std::thread::spawn(move || {
        let s = s_addr as *mut lls_session;
        let mut n = 0;
        while let Ok(done) = rx.recv() {
            let ev = j(&json!({"type": "user/message", "surfaceOp": "append",
                "data": {"message": {"role": "user", "content": [{"type": "text", "text": "context from another thread"}]}, "source": "host"}}));
            assert_eq!(unsafe { lls_session_append(s, ev.as_ptr().cast(), ev.len(), null_mut(), null_mut()) }, LLS_OK);
            n += 1;
            done.send(()).unwrap();
        }
        n
    });
    let (_, a) = over_threshold(&c);
    c.appends.store(1, Ordering::SeqCst);
    let req = next_request(a).unwrap_or_else(|e| panic!("next_request while another thread appends: {e:?}"));
    assert!(req.contains("SUMMARY"), "the gate compacted");
    assert!(req.contains("context from another thread"));
    record_response(a, "ok", &[]).unwrap();
    end_turn(a, "completed").unwrap();
    // And free-running: a thread appending all the time while turns compact.
    *c.to_thread.lock().unwrap() = None;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let racer = std::thread::spawn(move || {
        let s = s_addr as *mut lls_session;
        let mut n = 0u32;
        while !stop2.load(Ordering::SeqCst) {
            let ev = j(&json!({"type": "user/message", "surfaceOp": "append",
                "data": {"message": {"role": "user", "content": [{"type": "text", "text": format!("racing context {n} {}", "x ".repeat(200))}]}, "source": "host"}}));
            let st = unsafe { lls_session_append(s, ev.as_ptr().cast(), ev.len(), null_mut(), null_mut()) };
            // Context is refused while a step or a tool batch is open: that is fine here.
            assert!(st == LLS_OK || st == LLS_ERR_OUT_OF_ORDER, "{st}");
            n += 1;
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        n
    });
    for i in 0..30 {
        start_turn(a, &format!("turn {i}")).unwrap();
        next_request(a).unwrap_or_else(|e| panic!("turn {i}: {e:?}"));
        record_response(a, &big("reply"), &[]).unwrap();
        end_turn(a, "completed").unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    assert!(racer.join().unwrap() > 0);
    drop(c.to_thread.lock().unwrap().take());
    assert_eq!(helper.join().unwrap(), 1);
    call_out(|o, l, e| unsafe { lls_session_verify(s, o, l, e) }).unwrap();
    lls_agent_free(a);
    lls_session_free(s);
}

// ---------------------------------------------------------------------------------------------
// Smaller findings

/// A dispose from another thread while the host counter's reply is pending ends the measuring
/// call with `LLS_ERR_DISPOSED` (not `LLS_ERR_CANCELLED`).
#[test]
fn dispose_during_a_pending_counter_reply_is_disposed() {
    let s = memory_session();
    let c = counter_for(s);
    // A system prompt: the measurement has something to count.
    let a = new_agent(s, &json!({"config": {"provider": "p", "model": "m"}, "system": "count me"})).unwrap();
    set_counter(a, &c);
    for entry in ["measure", "next_request"] {
        let a = if entry == "measure" {
            a
        } else {
            new_agent(s, &json!({"config": {"provider": "p", "model": "m"}, "policy": {"contextWindow": 100000}})).unwrap()
        };
        if entry != "measure" {
            set_counter(a, &c);
            start_turn(a, "hello").unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel::<usize>();
        *c.parked.lock().unwrap() = Some(tx);
        let a_addr = a as usize;
        let disposer = std::thread::spawn(move || {
            let reply = rx.recv().unwrap();
            // The counter's reply is pending: dispose the agent meanwhile.
            assert_eq!(unsafe { lls_agent_dispose(a_addr as *mut lls_agent, null_mut()) }, LLS_OK);
            // Completing the abandoned reply afterwards is harmless.
            let _ = unsafe { lls_reply_complete(reply as *mut lls_reply, "1".as_ptr().cast(), 1, null_mut()) };
        });
        let r = if entry == "measure" { call_out(|o, l, e| unsafe { lls_agent_measure(a, o, l, e) }) } else { next_request(a) };
        disposer.join().unwrap();
        let e = r.expect_err(entry);
        assert_eq!(e.status, LLS_ERR_DISPOSED, "{entry}: {e:?}");
        lls_agent_free(a);
    }
    let evs = events(s);
    assert_eq!(evs.last().unwrap()["type"], "turn/end");
    assert_eq!(evs.last().unwrap()["data"]["reason"], "disposed");
    lls_session_free(s);
}

unsafe extern "C" fn chatty_summariser(_: *mut c_void, _: *const c_char, _: usize, reply: *mut lls_reply) -> i32 {
    answer(reply, r#"{"text":"SUMMARY","finish":"stop"}"#)
}

/// A summariser reply with a field the protocol does not have is refused (inputs are strict):
/// the compaction fails naming the field.
#[test]
fn a_summariser_reply_with_an_unknown_field_is_refused() {
    let s = memory_session();
    let a = new_agent(s, &agent_opts()).unwrap();
    call(|e| unsafe { lls_agent_set_summariser(a, Some(chatty_summariser), null_mut(), None, e) }).unwrap();
    start_turn(a, &big("one")).unwrap();
    next_request(a).unwrap();
    record_response(a, &big("two"), &[]).unwrap();
    end_turn(a, "completed").unwrap();
    let history_before = history(s);
    let e = compact(a).unwrap_err();
    assert_eq!(e.status, LLS_ERR_SUMMARISER, "{e:?}");
    assert!(e.message.contains("reply.finish"), "the error names the field: {}", e.message);
    assert_eq!(e.detail["outcome"]["outcome"], "failed");
    assert_eq!(history(s), history_before, "the surface is untouched");
    lls_agent_free(a);
    lls_session_free(s);
}

/// `lls_parse_response` refuses wrongly typed fields with `LLS_ERR_INVALID_INPUT` naming them
/// (it used to return an empty message with `LLS_OK`).
#[test]
fn parse_response_refuses_wrongly_typed_fields() {
    for (body, field) in [
        (r#"{"choices":[{"message":5}]}"#, "response.choices[0].message"),
        (r#"{"choices":[{"message":{"role":"assistant","content":5}}]}"#, "response.choices[0].message.content"),
        (r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":5}"#, "response.usage"),
    ] {
        let r = call_out(|o, l, e| unsafe { lls_parse_response("openai".as_ptr().cast(), 6, body.as_ptr().cast(), body.len(), o, l, e) });
        let e = r.expect_err(body);
        assert_eq!(e.status, LLS_ERR_INVALID_INPUT, "{body}");
        assert_eq!(e.detail["field"], field, "{body}: {}", e.message);
        assert!(e.message.contains(field), "{}", e.message);
    }
}

/// A tokenizer path naming a device or a FIFO is refused at once with `LLS_ERR_TOKENIZER`
/// (it used to read /dev/zero until memory ran out, and to block on a FIFO forever).
#[test]
fn tokenizer_paths_to_devices_and_fifos_are_refused_without_reading() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("tokenizer.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let s = memory_session();
    let a = new_agent(s, &json!({"config": {"provider": "p", "model": "m"}})).unwrap();
    for (path, why) in [("/dev/zero", "a character device"), (fifo.to_str().unwrap(), "a FIFO"), ("/tmp", "a directory")] {
        let e = call(|e| unsafe { lls_agent_set_tokenizer(a, path.as_ptr().cast(), path.len(), e) }).expect_err(path);
        assert_eq!(e.status, LLS_ERR_TOKENIZER, "{path}: {e:?}");
        assert!(e.message.contains(why) && e.message.contains(path), "{path}: {}", e.message);
        assert_eq!(e.detail["path"], path);
        let e = new_agent(s, &json!({"config": {"provider": "p", "model": "m"}, "tokenizer": path})).expect_err(path);
        assert_eq!(e.status, LLS_ERR_TOKENIZER, "the tokenizer option, {path}: {e:?}");
        assert!(e.message.contains(why), "{}", e.message);
    }
    lls_agent_free(a);
    lls_session_free(s);
}
