//! Random sequences of C ABI calls, made through the real `extern "C"` entry points
//! (`lls_session_*`, `lls_agent_*` with the provider-body hot path, `lls_reply_*`,
//! `lls_cancel_*`, `lls_render`, ...).
//!
//! The input is a list of lines. Each line is `[op][param][payload]`: `op` picks the call,
//! `param` picks handles, modes and small numbers, and `payload` (the rest of the line) is the
//! JSON argument, passed as it is; an empty payload means a canned, valid argument, so a
//! sequence can make progress without valid JSON in the input. Host callbacks (prefix and
//! pre-step listeners, summariser, token counter, a host store, `lls_callback_invoke`) answer
//! in a mode the script sets: synchronously, failing, garbage, unknown codes, pending and
//! completed by a worker thread, pending and held (the wait is cancelled and the reply answered
//! by a later line), or calling back into the library (reentry, dispose, free, append).
//!
//! After every call:
//! - a failed call has an error whose code is the status, with a message and a JSON detail
//!   that names the status and kind; a successful one leaves `*err` alone;
//! - the status is never `LLS_ERR_PANIC`, `LLS_ERR_INTERNAL`, `LLS_ERR_POISONED` or
//!   `LLS_ERR_RECONSTRUCTION` (those are bugs);
//! - a freed, foreign or made-up handle is refused with `LLS_ERR_INVALID_HANDLE`;
//! - every session the script holds still verifies (`lls_session_verify`, when its log
//!   changed), every agent
//!   handle still answers (`lls_agent_stats`: ok or disposed), and `lls_live_handle_count`
//!   equals what the script holds;
//! - a provider body from `lls_agent_next_body` is, byte for byte, `lls_render_with_options` of
//!   the envelope `lls_agent_last_envelope` gives, with the renderer and options the agent was
//!   given and the info's `prefix_len`.
//!
//! At the end every host store is reloaded (its records must open and start with the live
//! session's events), everything is freed, the handle count is back to zero and every
//! callback's userdata was freed exactly once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsession_capi::agent::*;
use llmsession_capi::callbacks::host::{lls_callback_fn, lls_userdata_free_fn};
use llmsession_capi::callbacks::reply::lls_reply;
use llmsession_capi::cancel::*;
use llmsession_capi::error::*;
use llmsession_capi::library::{lls_live_handle_count, lls_string_free};
use llmsession_capi::runtime::error_object::lls_error;
use llmsession_capi::body::*;
use llmsession_capi::render::{lls_render, lls_render_with_options};
use llmsession_capi::reply::*;
use llmsession_capi::response::*;
use llmsession_capi::session::*;
use llmsession_capi::runtime::status::*;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

const MAX_LINES: usize = 48;
const OPS: u8 = 36;

// ---------------------------------------------------------------------------------------------
// Status and error checks

/// Checks the status/error contract of one call and frees the error. Returns the status.
fn check(what: &str, st: lls_status, err: *mut lls_error) -> lls_status {
    if st == LLS_OK {
        assert!(err.is_null(), "{what}: LLS_OK but *err was set");
        return st;
    }
    assert!(!err.is_null(), "{what}: status {st} without an error");
    assert_eq!(lls_error_code(err), st, "{what}: lls_error_code differs from the status");
    let msg = unsafe { CStr::from_ptr(lls_error_message(err)) }.to_string_lossy().into_owned();
    let detail = unsafe { CStr::from_ptr(lls_error_detail(err)) }.to_string_lossy().into_owned();
    assert!(!msg.is_empty(), "{what}: status {st} with an empty message");
    let d: Value = serde_json::from_str(&detail).unwrap_or_else(|e| panic!("{what}: the detail is not JSON ({e}): {detail}"));
    assert_eq!(d["status"], json!(st), "{what}: detail status: {detail}");
    assert!(d["kind"].is_string() && d["message"].is_string(), "{what}: detail without kind/message: {detail}");
    assert!(
        ![LLS_ERR_PANIC, LLS_ERR_INTERNAL, LLS_ERR_POISONED, LLS_ERR_RECONSTRUCTION].contains(&st),
        "{what}: a bug status {st}: {msg} {detail}"
    );
    lls_error_free(err);
    st
}

/// Runs `f(&mut err)` and checks it.
fn call(what: &str, f: impl FnOnce(*mut *mut lls_error) -> lls_status) -> lls_status {
    let mut err: *mut lls_error = null_mut();
    let st = f(&mut err);
    check(what, st, err)
}

/// Takes an output string (freeing it) after a successful call.
fn take(out: *mut c_char, len: usize) -> String {
    assert!(!out.is_null(), "LLS_OK without *out");
    let s = unsafe { CStr::from_ptr(out) }.to_str().expect("outputs are UTF-8").to_owned();
    assert_eq!(s.len(), len, "*out_len differs from the string");
    unsafe { lls_string_free(out) };
    s
}

/// A call that writes a string: returns it on success.
fn call_out(what: &str, f: impl FnOnce(*mut *mut c_char, *mut usize, *mut *mut lls_error) -> lls_status) -> Option<String> {
    let mut out: *mut c_char = null_mut();
    let mut len = usize::MAX;
    let st = call(what, |e| f(&mut out, &mut len, e));
    if st == LLS_OK {
        Some(take(out, len))
    } else {
        assert!(out.is_null(), "{what}: *out written on failure");
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Host callbacks

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Prefix,
    PreStep,
    Summariser,
    Counter,
    Store,
    Invoke,
}
const KINDS: [Kind; 6] = [Kind::Prefix, Kind::PreStep, Kind::Summariser, Kind::Counter, Kind::Store, Kind::Invoke];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Answer,
    Fail,
    ErrorNoReply,
    OkNoReply,
    UnknownCode,
    PendingWorker,
    AnsweredThenPending,
    Hold,
    DisposeSelf,
    FreeSelf,
    Reenter,
    AppendSession,
}
const MODES: [Mode; 12] = [
    Mode::Answer,
    Mode::Fail,
    Mode::ErrorNoReply,
    Mode::OkNoReply,
    Mode::UnknownCode,
    Mode::PendingWorker,
    Mode::AnsweredThenPending,
    Mode::Hold,
    Mode::DisposeSelf,
    Mode::FreeSelf,
    Mode::Reenter,
    Mode::AppendSession,
];

/// A callback's userdata.
struct Ud {
    kind: Kind,
    agent: usize,
    session: usize,
    /// For a host store: its records.
    records: Option<Arc<Mutex<Vec<String>>>>,
    /// For a host store opened from fuzzed bytes: the first `load` answer.
    load_answer: Mutex<Option<Vec<u8>>>,
}

static REGISTERED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);

fn userdata(ud: Ud) -> *mut c_void {
    REGISTERED.fetch_add(1, Ordering::SeqCst);
    Box::into_raw(Box::new(ud)).cast()
}

unsafe extern "C" fn free_ud(p: *mut c_void) {
    drop(unsafe { Box::from_raw(p.cast::<Ud>()) });
    FREED.fetch_add(1, Ordering::SeqCst);
}

#[derive(Default)]
struct Host {
    modes: Vec<(Kind, Mode, Option<Vec<u8>>)>,
    /// The cancel token of the library call being made, for `Mode::Hold`.
    cur_cancel: usize,
    /// Replies held by `Mode::Hold`, answered by a later line.
    held: Vec<usize>,
    /// Agents freed from inside their own callback.
    freed_in_callback: Vec<usize>,
}

thread_local! {
    static HOST: RefCell<Host> = RefCell::new(Host::default());
}

fn mode_of(kind: Kind) -> (Mode, Option<Vec<u8>>) {
    HOST.with(|h| h.borrow().modes.iter().rev().find(|(k, _, _)| *k == kind).map(|(_, m, t)| (*m, t.clone())))
        .unwrap_or((Mode::Answer, None))
}

/// The worker thread that completes pending replies.
enum Job {
    Complete(usize, Vec<u8>),
    Fail(usize, Vec<u8>),
}
static INFLIGHT: AtomicUsize = AtomicUsize::new(0);

fn worker() -> &'static Mutex<Sender<Job>> {
    static W: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    W.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::spawn(move || {
            for job in rx {
                match job {
                    Job::Complete(r, text) => {
                        call("worker lls_reply_complete", |e| unsafe {
                            lls_reply_complete(r as *mut lls_reply, text.as_ptr().cast(), text.len(), e)
                        });
                    }
                    Job::Fail(r, text) => {
                        let st = call("worker lls_reply_fail", |e| unsafe {
                            lls_reply_fail(r as *mut lls_reply, text.as_ptr().cast(), text.len(), e)
                        });
                        assert_eq!(st, LLS_OK, "failing a pending reply");
                    }
                }
                INFLIGHT.fetch_sub(1, Ordering::SeqCst);
            }
        });
        Mutex::new(tx)
    })
}

fn to_worker(job: Job) {
    INFLIGHT.fetch_add(1, Ordering::SeqCst);
    worker().lock().unwrap().send(job).unwrap();
}

/// Waits until the worker has answered every reply it was given.
fn drain_worker() {
    while INFLIGHT.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

fn default_answer(kind: Kind, input: &Value) -> Vec<u8> {
    match kind {
        Kind::Prefix => {
            let mut rest = input["rest"].as_array().cloned().unwrap_or_default();
            rest.push(json!({"role": "user", "content": [{"type": "text", "text": "workspace: /src"}]}));
            Value::from(rest).to_string().into_bytes()
        }
        Kind::PreStep => b"{}".to_vec(),
        Kind::Summariser => br#"{"text":"SUMMARY: earlier work","usage":{"inputTokens":10,"outputTokens":5}}"#.to_vec(),
        Kind::Counter => (input.to_string().len() / 4).to_string().into_bytes(),
        Kind::Store | Kind::Invoke => input.to_string().into_bytes(),
    }
}

fn set_json(reply: *mut lls_reply, text: &[u8]) {
    call("lls_reply_set_json", |e| unsafe { lls_reply_set_json(reply, text.as_ptr().cast(), text.len(), e) });
}

unsafe extern "C" fn host_cb(ud: *mut c_void, input: *const c_char, len: usize, reply: *mut lls_reply) -> i32 {
    let ud = unsafe { &*(ud as *const Ud) };
    assert!(!input.is_null() && !reply.is_null());
    let bytes = unsafe { std::slice::from_raw_parts(input.cast::<u8>(), len + 1) };
    assert_eq!(bytes[len], 0, "callback input is NUL-terminated");
    let text = std::str::from_utf8(&bytes[..len]).expect("callback input is UTF-8");
    let v: Value = serde_json::from_str(text).expect("callback input is JSON");
    if ud.kind == Kind::Store {
        return store_cb(ud, &v, reply);
    }
    let (mode, custom) = mode_of(ud.kind);
    let answer = custom.unwrap_or_else(|| default_answer(ud.kind, &v));
    let agent = ud.agent as *mut lls_agent;
    match mode {
        Mode::Answer => {
            set_json(reply, &answer);
            LLS_CB_OK
        }
        Mode::Fail => {
            call("lls_reply_fail", |e| unsafe { lls_reply_fail(reply, answer.as_ptr().cast(), answer.len(), e) });
            LLS_CB_ERROR
        }
        Mode::ErrorNoReply => LLS_CB_ERROR,
        Mode::OkNoReply => LLS_CB_OK,
        Mode::UnknownCode => 3 + answer.len() as i32,
        Mode::PendingWorker => {
            // A reply text starting with `!` is failed instead.
            to_worker(if answer.first() == Some(&b'!') {
                Job::Fail(reply as usize, answer)
            } else {
                Job::Complete(reply as usize, answer)
            });
            LLS_CB_PENDING
        }
        Mode::AnsweredThenPending => {
            set_json(reply, &answer);
            LLS_CB_PENDING
        }
        Mode::Hold => {
            let cancel = HOST.with(|h| h.borrow().cur_cancel) as *const lls_cancel;
            if !cancel.is_null() {
                call("lls_cancel_trip in a callback", |e| unsafe { lls_cancel_trip(cancel, e) });
            } else if !agent.is_null() {
                call("lls_agent_dispose in a callback (hold)", |e| unsafe { lls_agent_dispose(agent, e) });
            } else {
                set_json(reply, &answer);
                return LLS_CB_OK;
            }
            HOST.with(|h| h.borrow_mut().held.push(reply as usize));
            LLS_CB_PENDING
        }
        Mode::DisposeSelf | Mode::FreeSelf if !agent.is_null() => {
            if mode == Mode::DisposeSelf {
                call("lls_agent_dispose in a callback", |e| unsafe { lls_agent_dispose(agent, e) });
            } else {
                lls_agent_free(agent);
                HOST.with(|h| h.borrow_mut().freed_in_callback.push(agent as usize));
            }
            set_json(reply, &answer);
            LLS_CB_OK
        }
        Mode::Reenter if !agent.is_null() => {
            let st = call_out_status("lls_agent_stats in a callback", |o, l, e| unsafe { lls_agent_stats(agent, o, l, e) });
            assert!(st == LLS_ERR_OUT_OF_ORDER || st == LLS_ERR_INVALID_HANDLE, "reentry gave {st}");
            let m = br#"{"role":"user","content":[{"type":"text","text":"again"}]}"#;
            let st = call("lls_agent_start_turn in a callback", |e| unsafe {
                lls_agent_start_turn(agent, m.as_ptr().cast(), m.len(), null_mut(), e)
            });
            assert!(st == LLS_ERR_OUT_OF_ORDER || st == LLS_ERR_INVALID_HANDLE, "reentry gave {st}");
            set_json(reply, &answer);
            LLS_CB_OK
        }
        Mode::AppendSession if ud.session != 0 => {
            let ev = br#"{"type":"host/context","data":{"from":"callback"}}"#;
            let s = ud.session as *mut lls_session;
            call("lls_session_append in a callback", |e| unsafe { lls_session_append(s, ev.as_ptr().cast(), ev.len(), null_mut(), e) });
            call_out("lls_session_history in a callback", |o, l, e| unsafe { lls_session_history(s, o, l, e) });
            set_json(reply, &answer);
            LLS_CB_OK
        }
        _ => {
            set_json(reply, &answer);
            LLS_CB_OK
        }
    }
}

fn call_out_status(what: &str, f: impl FnOnce(*mut *mut c_char, *mut usize, *mut *mut lls_error) -> lls_status) -> lls_status {
    let mut out: *mut c_char = null_mut();
    let mut len = 0;
    let st = call(what, |e| f(&mut out, &mut len, e));
    if st == LLS_OK {
        take(out, len);
    }
    st
}

/// A host store backed by a vector of records.
fn store_cb(ud: &Ud, v: &Value, reply: *mut lls_reply) -> i32 {
    let records = ud.records.as_ref().expect("a store has records");
    let (mode, custom) = mode_of(Kind::Store);
    let op = v["op"].as_str().unwrap_or_default();
    let answer: Vec<u8> = match op {
        "load" => match ud.load_answer.lock().unwrap().take() {
            Some(a) => a,
            None => json!({"records": *records.lock().unwrap(), "lastComplete": true}).to_string().into_bytes(),
        },
        "append" => {
            if mode == Mode::Fail {
                call("store lls_reply_fail", |e| unsafe { lls_reply_fail(reply, b"disk full".as_ptr().cast(), 9, e) });
                return LLS_CB_ERROR;
            }
            let mut r = records.lock().unwrap();
            if let Some(h) = v["header"].as_str() {
                r.push(h.to_owned());
            }
            for rec in v["records"].as_array().expect("append has records") {
                r.push(rec.as_str().expect("a record is a string").to_owned());
            }
            b"{}".to_vec()
        }
        "sync" => {
            if mode == Mode::ErrorNoReply {
                return LLS_CB_ERROR;
            }
            b"{}".to_vec()
        }
        "undo" | "cut" => {
            if mode == Mode::UnknownCode {
                return 77;
            }
            let key = if op == "undo" { "from" } else { "keep" };
            let n = v[key].as_u64().expect("undo and cut have a record index") as usize;
            records.lock().unwrap().truncate(n);
            b"{}".to_vec()
        }
        // The optional requests of opening from a checkpoint (docs/storage.md): this store
        // answers them as a host written before them does, `true`, which means "not
        // supported" (the open reads the whole log with `load`).
        "lastCheckpoint" | "loadFrom" => b"true".to_vec(),
        other => panic!("unknown store op {other}"),
    };
    match mode {
        Mode::PendingWorker => {
            to_worker(Job::Complete(reply as usize, answer));
            LLS_CB_PENDING
        }
        Mode::OkNoReply if op == "append" => {
            // Garbage after the write: the session must cut the record again.
            let g = custom.unwrap_or_else(|| b"{not json".to_vec());
            set_json(reply, &g);
            LLS_CB_OK
        }
        _ => {
            set_json(reply, &answer);
            LLS_CB_OK
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The script

struct Sess {
    ptr: usize,
    records: Option<Arc<Mutex<Vec<String>>>>,
    /// The event count at the last verify (`u64::MAX`: never verified).
    verified: u64,
}

struct Ag {
    ptr: usize,
    session: usize,
    calls: Vec<String>,
    /// The renderer and options `lls_agent_set_renderer` accepted last.
    renderer: Option<(&'static str, Option<Vec<u8>>)>,
}

#[derive(Default)]
struct State {
    sessions: Vec<Sess>,
    agents: Vec<Ag>,
    cancels: Vec<usize>,
    /// Handles this script freed (for stale-handle calls).
    stale: Vec<(usize, u8)>,
    last_envelope: Option<String>,
    next_response: Option<String>,
    call_seq: u32,
}

fn pick<T>(v: &[T], p: u8) -> Option<&T> {
    if v.is_empty() {
        None
    } else {
        Some(&v[p as usize % v.len()])
    }
}

/// Replaces `key` in a JSON object payload (file paths must not come from the input).
fn sanitize(payload: &[u8], key: &str, value: Value) -> Vec<u8> {
    match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Object(mut m)) if m.contains_key(key) => {
            m.insert(key.to_string(), value);
            Value::Object(m).to_string().into_bytes()
        }
        _ => payload.to_vec(),
    }
}

fn user(text: &str) -> Vec<u8> {
    json!({"role": "user", "content": [{"type": "text", "text": text}]}).to_string().into_bytes()
}

const AGENT_OPTS: &str = r#"{"config":{"provider":"p","model":"m","maxTokens":256},"system":"You are careful.","tools":[{"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}],"policy":{"contextWindow":4000,"threshold":0.5,"retainedTokens":100,"summaryMaxTokens":300}}"#;
/// Renderer names for `lls_agent_set_renderer`, one of them unknown.
const HOT_RENDERERS: [&str; 6] = ["openai", "openai-responses", "anthropic", "gemini", "gemini-interactions", "cobol"];

/// A raw, non-streamed reply body in `format` whose message says a little and calls `read`
/// once per id.
fn raw_reply(format: &str, ids: &[String]) -> String {
    let args = json!({"path": "a.txt"});
    match format {
        "openai-responses" => {
            let mut output = vec![json!({"type": "message", "id": "msg_1", "role": "assistant",
                "content": [{"type": "output_text", "text": "working", "annotations": []}]})];
            for id in ids {
                output.push(json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": "read", "arguments": args.to_string()}));
            }
            json!({"id": "resp_1", "object": "response", "status": "completed", "model": "m", "output": output,
                "usage": {"input_tokens": 100, "output_tokens": 10}})
        }
        "anthropic" => {
            let mut content = vec![json!({"type": "text", "text": "working"})];
            for id in ids {
                content.push(json!({"type": "tool_use", "id": id, "name": "read", "input": args}));
            }
            let stop = if ids.is_empty() { "end_turn" } else { "tool_use" };
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
                "stop_reason": stop, "usage": {"input_tokens": 100, "output_tokens": 10}})
        }
        "gemini-interactions" => {
            let mut steps = vec![json!({"type": "model_output", "content": [{"type": "text", "text": "working"}]})];
            for id in ids {
                steps.push(json!({"type": "function_call", "id": id, "name": "read", "arguments": args}));
            }
            json!({"id": "int_1", "status": "completed", "model": "m", "steps": steps,
                "usage": {"total_input_tokens": 100, "total_output_tokens": 10}})
        }
        "gemini" => {
            let mut parts = vec![json!({"text": "working"})];
            for id in ids {
                parts.push(json!({"functionCall": {"id": id, "name": "read", "args": args}}));
            }
            json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10}, "modelVersion": "m"})
        }
        _ => {
            let calls: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "type": "function", "function": {"name": "read", "arguments": args.to_string()}}))
                .collect();
            let mut message = json!({"role": "assistant", "content": "working"});
            if !calls.is_empty() {
                message["tool_calls"] = calls.into();
            }
            let finish = if ids.is_empty() { "stop" } else { "tool_calls" };
            json!({"id": "c1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10}})
        }
    }
    .to_string()
}

const REASONS: [&str; 8] = ["completed", "max-tokens", "aborted", "error", "rejected", "disposed", "interrupted", "bogus"];

impl State {
    fn cancel_arg(&self, p: u8) -> *const lls_cancel {
        if p & 1 == 0 {
            null()
        } else {
            pick(&self.cancels, p >> 1).map_or(null(), |c| *c as *const lls_cancel)
        }
    }

    fn agent(&self, p: u8) -> Option<&Ag> {
        pick(&self.agents, p)
    }

    fn with_cancel<R>(&self, cancel: *const lls_cancel, f: impl FnOnce() -> R) -> R {
        HOST.with(|h| h.borrow_mut().cur_cancel = cancel as usize);
        let r = f();
        HOST.with(|h| h.borrow_mut().cur_cancel = 0);
        r
    }

    fn register_callbacks(&mut self, a: usize, s: usize, bits: u8) {
        let reg: [(
            Kind,
            unsafe extern "C" fn(*mut lls_agent, lls_callback_fn, *mut c_void, lls_userdata_free_fn, *mut *mut lls_error) -> lls_status,
        ); 4] = [
            (Kind::Prefix, lls_agent_add_prefix_listener),
            (Kind::PreStep, lls_agent_add_pre_step_listener),
            (Kind::Summariser, lls_agent_set_summariser),
            (Kind::Counter, lls_agent_set_token_counter),
        ];
        for (i, (kind, f)) in reg.iter().enumerate() {
            if bits & (1 << i) != 0 {
                let ud = userdata(Ud { kind: *kind, agent: a, session: s, records: None, load_answer: Mutex::new(None) });
                let cb: lls_callback_fn = if bits & 0x80 != 0 && i == 0 { None } else { Some(host_cb) };
                call("register a callback", |e| unsafe { f(a as *mut lls_agent, cb, ud, Some(free_ud), e) });
            }
        }
    }

    fn open_store(&mut self, records: Vec<String>, load_answer: Option<Vec<u8>>, opts: &[u8]) {
        let records = Arc::new(Mutex::new(records));
        let ud =
            userdata(Ud { kind: Kind::Store, agent: 0, session: 0, records: Some(records.clone()), load_answer: Mutex::new(load_answer) });
        let mut s: *mut lls_session = null_mut();
        let (o, ol) = if opts.is_empty() { (null(), 0) } else { (opts.as_ptr(), opts.len()) };
        if call("lls_session_open_store", |e| unsafe { lls_session_open_store(Some(host_cb), ud, Some(free_ud), o.cast(), ol, &mut s, e) })
            == LLS_OK
        {
            self.sessions.push(Sess { ptr: s as usize, records: Some(records), verified: u64::MAX });
        }
    }

    fn step(&mut self, op: u8, p: u8, payload: &[u8]) {
        let pl = |canned: &[u8]| -> Vec<u8> {
            if payload.is_empty() {
                canned.to_vec()
            } else {
                payload.to_vec()
            }
        };
        match op % OPS {
            0 => {
                let mut s: *mut lls_session = null_mut();
                let (o, ol) = if payload.is_empty() { (null(), 0) } else { (payload.as_ptr(), payload.len()) };
                if call("lls_session_new_memory", |e| unsafe { lls_session_new_memory(o.cast(), ol, &mut s, e) }) == LLS_OK {
                    self.sessions.push(Sess { ptr: s as usize, records: None, verified: u64::MAX });
                }
            }
            1 => match p % 3 {
                0 => self.open_store(Vec::new(), None, payload),
                1 => {
                    // Reload: a copy of another store's records.
                    let recs = self.sessions.iter().filter_map(|s| s.records.as_ref()).nth((p / 3) as usize % self.sessions.len().max(1));
                    let recs = recs.map(|r| r.lock().unwrap().clone()).unwrap_or_default();
                    self.open_store(recs, None, b"")
                }
                _ => {
                    let recs: Vec<String> = serde_json::from_slice::<Value>(payload)
                        .ok()
                        .and_then(|v| v["records"].as_array().map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect()))
                        .unwrap_or_default();
                    self.open_store(recs, Some(payload.to_vec()), b"")
                }
            },
            2 => {
                let Some(s) = pick(&self.sessions, p).map(|s| s.ptr) else { return };
                let opts = sanitize(payload, "path", Value::Null);
                let (o, ol) = if opts.is_empty() { (null(), 0) } else { (opts.as_ptr(), opts.len()) };
                let mut f: *mut lls_session = null_mut();
                if call("lls_session_fork", |e| unsafe { lls_session_fork(s as *const lls_session, o.cast(), ol, &mut f, e) }) == LLS_OK {
                    self.sessions.push(Sess { ptr: f as usize, records: None, verified: u64::MAX });
                }
            }
            3 => {
                if self.sessions.is_empty() {
                    return;
                }
                let i = p as usize % self.sessions.len();
                let s = self.sessions.remove(i);
                lls_session_free(s.ptr as *mut lls_session);
                self.stale.push((s.ptr, 0));
            }
            4 => {
                let Some(s) = pick(&self.sessions, p).map(|s| s.ptr) else { return };
                let ev = pl(br#"{"type":"host/note","data":{"n":1}}"#);
                let mut seq = 0u64;
                call("lls_session_append", |e| unsafe {
                    lls_session_append(s as *mut lls_session, ev.as_ptr().cast(), ev.len(), &mut seq, e)
                });
            }
            5 => {
                let Some(s) = pick(&self.sessions, p).map(|s| s.ptr as *const lls_session) else { return };
                let (from, to) = ((p >> 3) as u64 % 5, if p & 0x80 != 0 { u64::MAX } else { (p >> 4) as u64 % 9 });
                unsafe {
                    call_out("events", |o, l, e| lls_session_events(s, from, to, o, l, e));
                    call_out("history", |o, l, e| lls_session_history(s, o, l, e));
                    call_out("header", |o, l, e| lls_session_header(s, o, l, e));
                    call_out("stats", |o, l, e| lls_session_stats(s, o, l, e));
                    call_out("info", |o, l, e| lls_session_info(s, o, l, e));
                    call_out("id", |o, l, e| lls_session_id(s, o, l, e));
                    call_out("load_report", |o, l, e| lls_session_load_report(s, o, l, e));
                }
            }
            6 => {
                let Some(s) = pick(&self.sessions, p).map(|s| s.ptr) else { return };
                call("lls_session_sync", |e| unsafe { lls_session_sync(s as *mut lls_session, e) });
            }
            7 => {
                let Some(s) = pick(&self.sessions, p & 7).map(|s| s.ptr) else { return };
                let opts = sanitize(&pl(AGENT_OPTS.as_bytes()), "tokenizer", json!("/nonexistent/tokenizer.json"));
                let mut a: *mut lls_agent = null_mut();
                if call("lls_agent_new", |e| unsafe { lls_agent_new(s as *const lls_session, opts.as_ptr().cast(), opts.len(), &mut a, e) })
                    == LLS_OK
                {
                    self.agents.push(Ag { ptr: a as usize, session: s, calls: Vec::new(), renderer: None });
                    self.register_callbacks(a as usize, s, (p >> 3) | (p & 0x80));
                }
            }
            8 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                let o = pl(br#"{"config":{"provider":"p","model":"m2"},"system":"You are brief."}"#);
                call("lls_agent_set_options", |e| unsafe { lls_agent_set_options(a, o.as_ptr().cast(), o.len(), e) });
            }
            9 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                let o = pl(if p & 0x80 != 0 { b"null" } else { br#"{"contextWindow":3000,"threshold":0.4,"retainedTokens":50}"# });
                call("lls_agent_set_policy", |e| unsafe { lls_agent_set_policy(a, o.as_ptr().cast(), o.len(), e) });
            }
            10 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                let m = pl(&user(&"hello ".repeat(1 + (p >> 2) as usize * 8)));
                let mut turn = 0;
                call("lls_agent_start_turn", |e| unsafe { lls_agent_start_turn(a, m.as_ptr().cast(), m.len(), &mut turn, e) });
            }
            11 => {
                let Some(a) = self.agent(p & 7).map(|a| a.ptr as *mut lls_agent) else { return };
                let c = self.cancel_arg(p >> 3);
                let env =
                    self.with_cancel(c, || call_out("lls_agent_next_request", |o, l, e| unsafe { lls_agent_next_request(a, c, o, l, e) }));
                if let Some(env) = env {
                    serde_json::from_str::<Value>(&env).expect("an envelope is JSON");
                    self.last_envelope = Some(env);
                    call_out("lls_agent_request_info", |o, l, e| unsafe { lls_agent_request_info(a, o, l, e) });
                }
            }
            12 => {
                let Some(i) = (!self.agents.is_empty()).then(|| p as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let body = if !payload.is_empty() {
                    payload.to_vec()
                } else if let Some(r) = self.next_response.take() {
                    r.into_bytes()
                } else {
                    let n = (p >> 4) % 4;
                    let mut content = vec![json!({"type": "text", "text": "working"})];
                    for _ in 0..n {
                        self.call_seq += 1;
                        content.push(json!({"type": "tool-call", "id": format!("c{}", self.call_seq), "name": "read", "arguments": "{\"path\":\"a\"}"}));
                    }
                    json!({"message": {"role": "assistant", "content": content}, "usage": {"inputTokens": 100, "outputTokens": 10, "cacheReadTokens": 50}}).to_string().into_bytes()
                };
                let mut seq = 0;
                if call("lls_agent_record_response", |e| unsafe {
                    lls_agent_record_response(a, body.as_ptr().cast(), body.len(), &mut seq, e)
                }) == LLS_OK
                {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let ids = v["message"]["content"].as_array().into_iter().flatten().filter_map(|b| b["id"].as_str().map(str::to_owned));
                    self.agents[i].calls.extend(ids);
                }
            }
            13 => {
                let Some(i) = (!self.agents.is_empty()).then(|| p as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let id = pick(&self.agents[i].calls, p >> 3).cloned().unwrap_or_else(|| "nope".into());
                let body = pl(json!({"callId": id, "text": "result ".repeat(1 + (p >> 4) as usize * 40), "isError": p & 4 != 0})
                    .to_string()
                    .as_bytes());
                let mut n = 0;
                if call("lls_agent_record_tool_result", |e| unsafe {
                    lls_agent_record_tool_result(a, body.as_ptr().cast(), body.len(), &mut n, e)
                }) == LLS_OK
                {
                    self.agents[i].calls.retain(|c| *c != id);
                }
            }
            14 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                let m = pl(&user("note: the build is green"));
                let mut seq = 0;
                call("lls_agent_inject", |e| unsafe { lls_agent_inject(a, m.as_ptr().cast(), m.len(), &mut seq, e) });
            }
            15 => {
                let Some(a) = self.agent(p & 7).map(|a| a.ptr as *mut lls_agent) else { return };
                let c = self.cancel_arg(p >> 4);
                let body = pl(if p & 8 != 0 { br#"{"message":"context too long","overflow":true}"# } else { br#"{"message":"HTTP 503"}"# });
                let mut retry = 0;
                self.with_cancel(c, || {
                    call("lls_agent_provider_error", |e| unsafe {
                        lls_agent_provider_error(a, body.as_ptr().cast(), body.len(), c, &mut retry, e)
                    })
                });
            }
            16 => {
                let Some(i) = (!self.agents.is_empty()).then(|| p as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let r = pl(REASONS[(p >> 4) as usize % REASONS.len()].as_bytes());
                if call("lls_agent_end_turn", |e| unsafe { lls_agent_end_turn(a, r.as_ptr().cast(), r.len(), e) }) == LLS_OK {
                    self.agents[i].calls.clear();
                }
            }
            17 => {
                let Some(a) = self.agent(p & 3).map(|a| a.ptr as *mut lls_agent) else { return };
                let c = self.cancel_arg(p >> 5);
                let span = if payload.is_empty() && p & 4 != 0 {
                    format!("{{\"span\":[{},{}]}}", (p >> 3) % 3, (p >> 3) % 3 + (p >> 5)).into_bytes()
                } else {
                    payload.to_vec()
                };
                let (o, ol) = if span.is_empty() { (null(), 0) } else { (span.as_ptr(), span.len()) };
                self.with_cancel(c, || {
                    call_out("lls_agent_compact", |out, l, e| unsafe { lls_agent_compact(a, o.cast(), ol, c, out, l, e) })
                });
            }
            18 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                unsafe {
                    call_out("measure", |o, l, e| lls_agent_measure(a, o, l, e));
                    call_out("stats", |o, l, e| lls_agent_stats(a, o, l, e));
                    call_out("prefix", |o, l, e| lls_agent_prefix(a, o, l, e));
                    call_out("request_info", |o, l, e| lls_agent_request_info(a, o, l, e));
                }
            }
            19 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *mut lls_agent) else { return };
                call("lls_agent_dispose", |e| unsafe { lls_agent_dispose(a, e) });
            }
            20 => {
                if self.agents.is_empty() {
                    return;
                }
                let a = self.agents.remove(p as usize % self.agents.len());
                lls_agent_free(a.ptr as *mut lls_agent);
                self.stale.push((a.ptr, 1));
            }
            21 => {
                let Some((a, s)) = self.agent(p & 7).map(|a| (a.ptr, a.session)) else { return };
                match (p >> 3) % 4 {
                    0 => self.register_callbacks(a, s, p >> 5 | (p & 0x80)),
                    1 => {
                        call("lls_agent_clear_token_counter", |e| unsafe { lls_agent_clear_token_counter(a as *mut lls_agent, e) });
                    }
                    2 => {
                        let path = b"/nonexistent/tokenizer.json";
                        call("lls_agent_set_tokenizer", |e| unsafe {
                            lls_agent_set_tokenizer(a as *mut lls_agent, path.as_ptr().cast(), path.len(), e)
                        });
                    }
                    _ => self.register_callbacks(a, s, 1 << ((p >> 5) % 4)),
                }
            }
            22 => {
                let kind = KINDS[p as usize % KINDS.len()];
                let mode = MODES[(p / 6) as usize % MODES.len()];
                let text = (!payload.is_empty()).then(|| payload.to_vec());
                HOST.with(|h| h.borrow_mut().modes.push((kind, mode, text)));
            }
            23 => match p % 4 {
                0 => {
                    let mut c: *mut lls_cancel = null_mut();
                    assert_eq!(call("lls_cancel_new", |e| unsafe { lls_cancel_new(&mut c, e) }), LLS_OK);
                    self.cancels.push(c as usize);
                }
                1 => {
                    if let Some(c) = pick(&self.cancels, p >> 2) {
                        assert_eq!(call("lls_cancel_trip", |e| unsafe { lls_cancel_trip(*c as *const lls_cancel, e) }), LLS_OK);
                        let mut t = false;
                        assert_eq!(
                            call("lls_cancel_is_tripped", |e| unsafe { lls_cancel_is_tripped(*c as *const lls_cancel, &mut t, e) }),
                            LLS_OK
                        );
                        assert!(t, "a tripped token reads as tripped");
                    }
                }
                _ => {
                    if !self.cancels.is_empty() {
                        let c = self.cancels.remove((p >> 2) as usize % self.cancels.len());
                        lls_cancel_free(c as *mut lls_cancel);
                        self.stale.push((c, 2));
                    }
                }
            },
            24 => {
                let held = HOST.with(|h| {
                    let mut h = h.borrow_mut();
                    (!h.held.is_empty()).then(|| {
                        let i = p as usize % h.held.len();
                        h.held.remove(i)
                    })
                });
                let Some(r) = held else { return };
                let text = pl(b"{\"late\":true}");
                if p & 0x80 != 0 {
                    let st = call("lls_reply_fail (held)", |e| unsafe {
                        lls_reply_fail(r as *mut lls_reply, text.as_ptr().cast(), text.len(), e)
                    });
                    assert_eq!(st, LLS_OK, "an abandoned reply accepts a failure");
                } else {
                    call("lls_reply_complete (held)", |e| unsafe {
                        lls_reply_complete(r as *mut lls_reply, text.as_ptr().cast(), text.len(), e)
                    });
                }
                // Answered: the handle is gone.
                let st =
                    call("lls_reply_complete (twice)", |e| unsafe { lls_reply_complete(r as *mut lls_reply, b"1".as_ptr().cast(), 1, e) });
                assert_eq!(st, LLS_ERR_INVALID_HANDLE, "a reply answered once is released");
            }
            25 => {
                let renderer: &[u8] = [b"openai".as_slice(), b"anthropic", b"gemini"][p as usize % 3];
                let env = if payload.is_empty() { self.last_envelope.clone().unwrap_or_default().into_bytes() } else { payload.to_vec() };
                let prefix_len = (p >> 2) as usize % 5;
                call_out("lls_render", |o, l, e| unsafe {
                    lls_render(renderer.as_ptr().cast(), renderer.len(), env.as_ptr().cast(), env.len(), prefix_len, o, l, e)
                });
            }
            26 => {
                let renderer: &[u8] = [b"openai".as_slice(), b"anthropic", b"x"][p as usize % 3];
                let body = pl(br#"{"model":"m","choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":120,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":100}}}"#);
                let r = call_out("lls_parse_response", |o, l, e| unsafe {
                    lls_parse_response(renderer.as_ptr().cast(), renderer.len(), body.as_ptr().cast(), body.len(), o, l, e)
                });
                if let Some(r) = r {
                    // Feed it to the next record_response as {"message","usage"?}.
                    let v: Value = serde_json::from_str(&r).expect("parse_response gives JSON");
                    let mut resp = json!({"message": v["message"]});
                    if !v["usage"].is_null() {
                        resp["usage"] = v["usage"].clone();
                    }
                    self.next_response = Some(resp.to_string());
                }
            }
            27 => {
                let provider: &[u8] = [b"openai".as_slice(), b"llama.cpp", b"deepseek", b"anthropic", b"other"][p as usize % 5];
                let body = pl(br#"{"prompt_tokens":10,"completion_tokens":2}"#);
                call_out("lls_usage_from_provider", |o, l, e| unsafe {
                    lls_usage_from_provider(provider.as_ptr().cast(), provider.len(), body.as_ptr().cast(), body.len(), o, l, e)
                });
            }
            28 => {
                let status = [400u16, 413, 500, 200, 0][p as usize % 5];
                let (b, bl) = if p & 0x80 != 0 { (null(), 3) } else { (payload.as_ptr(), payload.len()) };
                unsafe { lls_is_context_overflow(status, b.cast(), bl) };
            }
            29 => {
                let input = pl(br#"{"ping":1}"#);
                let c = self.cancel_arg(p);
                let ud = userdata(Ud { kind: Kind::Invoke, agent: 0, session: 0, records: None, load_answer: Mutex::new(None) });
                let f: lls_callback_fn = if p & 0x80 != 0 { None } else { Some(host_cb) };
                self.with_cancel(c, || {
                    call_out("lls_callback_invoke", |o, l, e| unsafe {
                        lls_callback_invoke(f, ud, Some(free_ud), input.as_ptr().cast(), input.len(), c, o, l, e)
                    })
                });
            }
            30 => self.bad_handle(p),
            32 => {
                // The hot path: a renderer for the agent (sometimes a bad one, or bad options).
                let Some(i) = (!self.agents.is_empty()).then(|| p as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let r = HOT_RENDERERS[(p >> 3) as usize % HOT_RENDERERS.len()];
                let opts = if payload.is_empty() { None } else { Some(payload.to_vec()) };
                let (o, ol) = opts.as_ref().map_or((null(), 0), |o| (o.as_ptr(), o.len()));
                if call("lls_agent_set_renderer", |e| unsafe { lls_agent_set_renderer(a, r.as_ptr().cast(), r.len(), o.cast(), ol, e) })
                    == LLS_OK
                {
                    self.agents[i].renderer = Some((r, opts));
                }
            }
            33 => {
                // The provider body is the rendering of the logged envelope, byte for byte.
                let Some(i) = (!self.agents.is_empty()).then(|| (p & 7) as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let c = self.cancel_arg(p >> 3);
                let mut info = std::mem::MaybeUninit::<lls_request_info>::zeroed();
                let body = self.with_cancel(c, || {
                    call_out("lls_agent_next_body", |o, l, e| unsafe { lls_agent_next_body(a, c, o, l, info.as_mut_ptr(), e) })
                });
                let Some(body) = body else { return };
                let info = unsafe { info.assume_init() };
                let env = call_out("lls_agent_last_envelope", |o, l, e| unsafe { lls_agent_last_envelope(a, o, l, e) })
                    .expect("the envelope of a request just built");
                assert_eq!(env.len(), info.envelope_len, "lls_request_info.envelope_len");
                let (r, opts) = self.agents[i].renderer.clone().expect("next_body succeeded, so a renderer was set");
                let mut o = match opts.map(|o| serde_json::from_slice::<Value>(&o).expect("accepted options are JSON")) {
                    Some(Value::Object(m)) => m,
                    _ => serde_json::Map::new(), // `null`: the defaults
                };
                o.insert("prefixLen".into(), info.prefix_len.into());
                let o = Value::Object(o).to_string();
                let fresh = call_out("lls_render_with_options", |out, l, e| unsafe {
                    lls_render_with_options(r.as_ptr().cast(), r.len(), env.as_ptr().cast(), env.len(), o.as_ptr().cast(), o.len(), out, l, e)
                })
                .expect("the logged envelope renders");
                assert!(fresh == body, "the body differs from the rendering of its envelope ({r})");
                self.last_envelope = Some(env);
            }
            34 => {
                // A raw provider reply in the agent's format (or the payload as it is).
                let Some(i) = (!self.agents.is_empty()).then(|| p as usize % self.agents.len()) else { return };
                let a = self.agents[i].ptr as *mut lls_agent;
                let n = (p >> 4) % 3;
                let mut ids = Vec::new();
                for _ in 0..n {
                    self.call_seq += 1;
                    ids.push(format!("c{}", self.call_seq));
                }
                let fmt = self.agents[i].renderer.as_ref().map_or("openai", |(r, _)| *r);
                let body = if payload.is_empty() { raw_reply(fmt, &ids).into_bytes() } else { payload.to_vec() };
                let (mut seq, mut calls) = (0u64, u32::MAX);
                if call("lls_agent_record_body", |e| unsafe {
                    lls_agent_record_body(a, body.as_ptr().cast(), body.len(), &mut seq, &mut calls, e)
                }) == LLS_OK
                {
                    if payload.is_empty() {
                        assert_eq!(calls as usize, ids.len(), "tool calls counted");
                        self.agents[i].calls.extend(ids);
                    } else {
                        // Which ids a fuzzed body made is not known here: they stay unanswered.
                        self.agents[i].calls.extend((0..calls).map(|k| format!("unknown-{seq}-{k}")));
                    }
                }
            }
            35 => {
                let Some(a) = self.agent(p).map(|a| a.ptr as *const lls_agent) else { return };
                call_out("lls_agent_last_envelope", |o, l, e| unsafe { lls_agent_last_envelope(a, o, l, e) });
            }
            _ => {
                // Error accessors on NULL and on foreign handles.
                assert_eq!(lls_error_code(null()), LLS_ERR_NULL_POINTER);
                assert!(!lls_error_message(null()).is_null() && !lls_error_detail(null()).is_null());
                if let Some(s) = pick(&self.sessions, p) {
                    assert_eq!(lls_error_code(s.ptr as *const lls_error), LLS_ERR_INVALID_HANDLE);
                    assert!(!lls_error_message(s.ptr as *const lls_error).is_null());
                    lls_error_free(s.ptr as *mut lls_error); // ignored: not an error handle
                }
            }
        }
    }

    /// A call with a freed, foreign, made-up or NULL handle: refused cleanly, nothing changes.
    fn bad_handle(&mut self, p: u8) {
        let live: Vec<usize> =
            self.sessions.iter().map(|s| s.ptr).chain(self.agents.iter().map(|a| a.ptr)).chain(self.cancels.iter().copied()).collect();
        let mut local = 0u64;
        let (ptr, want) = match p % 4 {
            // A freed handle, unless its address is live again (ABA is outside the checks).
            0 => match pick(&self.stale, p >> 2) {
                Some((a, _)) if !live.contains(a) => (*a, LLS_ERR_INVALID_HANDLE),
                _ => return,
            },
            // A handle of another type.
            1 => match pick(&self.cancels, p >> 2) {
                Some(c) => (*c, LLS_ERR_INVALID_HANDLE),
                None => return,
            },
            2 => (&mut local as *mut u64 as usize, LLS_ERR_INVALID_HANDLE),
            _ => (0, LLS_ERR_NULL_POINTER),
        };
        // Cancels given as sessions/agents are foreign; for the cancel functions use a session.
        let m = user("x");
        let st = match (p >> 2) % 6 {
            0 => call_out_status("stale lls_agent_stats", |o, l, e| unsafe { lls_agent_stats(ptr as *const lls_agent, o, l, e) }),
            1 => call("stale lls_agent_start_turn", |e| unsafe {
                lls_agent_start_turn(ptr as *mut lls_agent, m.as_ptr().cast(), m.len(), null_mut(), e)
            }),
            2 => call_out_status("stale lls_session_events", |o, l, e| unsafe {
                lls_session_events(ptr as *const lls_session, 0, u64::MAX, o, l, e)
            }),
            3 => {
                let mut a: *mut lls_agent = null_mut();
                let st = call("stale lls_agent_new", |e| unsafe {
                    lls_agent_new(ptr as *const lls_session, AGENT_OPTS.as_ptr().cast(), AGENT_OPTS.len(), &mut a, e)
                });
                assert!(a.is_null());
                st
            }
            4 => call("stale lls_agent_dispose", |e| unsafe { lls_agent_dispose(ptr as *mut lls_agent, e) }),
            _ => {
                // A session/agent/made-up pointer as a cancel token.
                let p2 = if p % 4 == 1 { self.sessions.first().map_or(0, |s| s.ptr) } else { ptr };
                let want2 = if p2 == 0 { LLS_ERR_NULL_POINTER } else { LLS_ERR_INVALID_HANDLE };
                let st = call("stale lls_cancel_trip", |e| unsafe { lls_cancel_trip(p2 as *const lls_cancel, e) });
                assert_eq!(st, want2, "a bad cancel handle");
                lls_cancel_free(p2 as *mut lls_cancel);
                return;
            }
        };
        assert_eq!(st, want, "a bad handle is refused with {want}");
        // Frees of bad handles are ignored.
        lls_session_free(ptr as *mut lls_session);
        lls_agent_free(ptr as *mut lls_agent);
    }

    /// The checks after every line.
    fn after(&mut self) {
        drain_worker();
        let freed = HOST.with(|h| std::mem::take(&mut h.borrow_mut().freed_in_callback));
        for a in freed {
            if let Some(i) = self.agents.iter().position(|x| x.ptr == a) {
                self.agents.remove(i);
                self.stale.push((a, 1));
            }
        }
        for s in &mut self.sessions {
            // Verify when the log changed (a full rebuild of every request is the costly part).
            let stats = call_out("lls_session_stats", |o, l, e| unsafe { lls_session_stats(s.ptr as *const lls_session, o, l, e) })
                .expect("a held session answers");
            let events = serde_json::from_str::<Value>(&stats).unwrap()["events"].as_u64().expect("stats has events");
            if events != s.verified {
                let v = call_out("lls_session_verify", |o, l, e| unsafe { lls_session_verify(s.ptr as *const lls_session, o, l, e) });
                assert!(v.is_some(), "a session stopped verifying");
                s.verified = events;
            }
        }
        for a in &self.agents {
            let st = call_out_status("lls_agent_stats", |o, l, e| unsafe { lls_agent_stats(a.ptr as *const lls_agent, o, l, e) });
            assert!(st == LLS_OK || st == LLS_ERR_DISPOSED, "an agent handle stopped answering: {st}");
        }
        let held = HOST.with(|h| h.borrow().held.len());
        let want = self.sessions.len() + self.agents.len() + self.cancels.len() + held;
        assert_eq!(lls_live_handle_count(), want, "live handles differ from what the script holds");
    }

    /// Reload every host store and compare; then free everything.
    fn finish(mut self, order: u8) {
        for s in &self.sessions {
            let Some(records) = &s.records else { continue };
            let before: Value = serde_json::from_str(
                &call_out("events", |o, l, e| unsafe { lls_session_events(s.ptr as *const lls_session, 0, u64::MAX, o, l, e) }).unwrap(),
            )
            .unwrap();
            let copy = Arc::new(Mutex::new(records.lock().unwrap().clone()));
            let ud = userdata(Ud { kind: Kind::Store, agent: 0, session: 0, records: Some(copy), load_answer: Mutex::new(None) });
            HOST.with(|h| h.borrow_mut().modes.push((Kind::Store, Mode::Answer, None)));
            let mut r: *mut lls_session = null_mut();
            let st =
                call("reload a host store", |e| unsafe { lls_session_open_store(Some(host_cb), ud, Some(free_ud), null(), 0, &mut r, e) });
            assert_eq!(st, LLS_OK, "a host store the session wrote must reopen");
            let after: Value = serde_json::from_str(
                &call_out("events", |o, l, e| unsafe { lls_session_events(r as *const lls_session, 0, u64::MAX, o, l, e) }).unwrap(),
            )
            .unwrap();
            let (b, a) = (before.as_array().unwrap(), after.as_array().unwrap());
            assert!(a.len() >= b.len() && a[..b.len()] == b[..], "the reloaded store lost or changed events:\n{before}\n{after}");
            assert!(call_out("verify reloaded", |o, l, e| unsafe { lls_session_verify(r, o, l, e) }).is_some());
            lls_session_free(r);
        }
        // Answer held replies, then free in an order the input picks.
        for r in HOST.with(|h| std::mem::take(&mut h.borrow_mut().held)) {
            assert_eq!(call("complete held", |e| unsafe { lls_reply_complete(r as *mut lls_reply, b"0".as_ptr().cast(), 1, e) }), LLS_OK);
        }
        if order & 1 != 0 {
            for s in self.sessions.drain(..) {
                lls_session_free(s.ptr as *mut lls_session);
            }
        }
        if order & 2 != 0 {
            self.agents.reverse();
        }
        for a in self.agents.drain(..) {
            lls_agent_free(a.ptr as *mut lls_agent);
        }
        for s in self.sessions.drain(..) {
            lls_session_free(s.ptr as *mut lls_session);
        }
        for c in self.cancels.drain(..) {
            lls_cancel_free(c as *mut lls_cancel);
        }
        drain_worker();
        assert_eq!(lls_live_handle_count(), 0, "handles leaked");
        assert_eq!(REGISTERED.load(Ordering::SeqCst), FREED.load(Ordering::SeqCst), "a callback's userdata was not freed exactly once");
    }
}

fuzz_target!(|data: &[u8]| {
    HOST.with(|h| *h.borrow_mut() = Host::default());
    assert_eq!(lls_live_handle_count(), 0);
    let mut st = State::default();
    let mut last = 0u8;
    for line in data.split(|b| *b == b'\n').take(MAX_LINES) {
        let (op, p, payload) = match line {
            [] => continue,
            [op] => (*op, 0, &[][..]),
            [op, p, rest @ ..] => (*op, *p, rest),
        };
        last = p;
        st.step(op, p, payload);
        st.after();
    }
    st.finish(last);
});
