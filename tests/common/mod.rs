//! Shared helpers for the session log tests: event builders, a snapshot of everything a user
//! can observe about a session, a store that counts and can be made to fail, and scripted
//! turns.
#![allow(dead_code)]

use llmsession::error::{Error, ErrorKind, Result};
use llmsession::store::StoreContents;
use llmsession::store::{Batch, MemoryStore, Store};
use llmsession::{EpochHeader, NewEvent, Session, SessionOptions};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// A well-formed request digest.
pub const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A request header snapshot.
pub fn header(reason: &str, instance: u64, system: &str) -> NewEvent {
    NewEvent::new(
        "request/header",
        json!({"header": {"config": {"provider": "p", "model": "m"}, "system": system},
               "reason": reason, "instance": instance}),
    )
}

/// `turn/start`.
pub fn turn_start(turn: u64) -> NewEvent {
    NewEvent::new("turn/start", json!({ "turn": turn }))
}

/// `turn/end` with a reason.
pub fn turn_end(turn: u64, reason: &str) -> NewEvent {
    NewEvent::new("turn/end", json!({"turn": turn, "reason": reason}))
}

/// A user message with the given source, appended.
pub fn user_from(source: &str, text: &str) -> NewEvent {
    NewEvent::visible("user/message", json!({"message": {"role": "user", "content": [{"type": "text", "text": text}]}, "source": source}))
}

/// The user's own message.
pub fn user(text: &str) -> NewEvent {
    user_from("user", text)
}

/// Host context.
pub fn host(text: &str) -> NewEvent {
    user_from("host", text)
}

/// `step/start` of instance 1.
pub fn step_start(turn: u64, step: u64) -> NewEvent {
    step_start_of(turn, step, 1)
}

/// `step/start` of a given instance.
pub fn step_start_of(turn: u64, step: u64, instance: u64) -> NewEvent {
    NewEvent::new("step/start", json!({"turn": turn, "step": step, "instance": instance, "digest": DIGEST, "bytes": 100}))
}

/// `step/end` with an outcome.
pub fn step_end(turn: u64, step: u64, outcome: &str) -> NewEvent {
    NewEvent::new("step/end", json!({"turn": turn, "step": step, "outcome": outcome}))
}

/// An assistant message with text and tool calls `(id, name, arguments)`.
pub fn assistant(turn: u64, step: u64, text: &str, calls: &[(&str, &str, &str)]) -> NewEvent {
    let mut content = vec![json!({"type": "text", "text": text})];
    for (id, name, args) in calls {
        content.push(json!({"type": "tool-call", "id": id, "name": name, "arguments": args}));
    }
    NewEvent::visible(
        "assistant/message",
        json!({"turn": turn, "step": step,
               "message": {"role": "assistant", "content": content, "provenance": {"provider": "p", "model": "m"}},
               "usage": {"inputTokens": 10, "outputTokens": 5}}),
    )
}

/// `tool/call`.
pub fn tool_call(turn: u64, step: u64, id: &str, name: &str, args: &str) -> NewEvent {
    NewEvent::new("tool/call", json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args}))
}

/// A successful `tool/result` with one text block.
pub fn tool_result(id: &str, text: &str) -> NewEvent {
    NewEvent::visible("tool/result", json!({"callId": id, "content": [{"type": "text", "text": text}], "isError": false}))
}

/// `compaction/start` announcing the surface span `start..=end` with its `seqs`.
pub fn compaction_start_seqs(start: usize, end: usize, seqs: Vec<u64>) -> NewEvent {
    NewEvent::new("compaction/start", json!({"trigger": "manual", "span": {"start": start, "end": end}, "seqs": seqs}))
}

/// `compaction/start` announcing the span `start..=end` of `s`'s current surface.
pub fn compaction_start_for(s: &Session, start: usize, end: usize) -> NewEvent {
    let seqs = s.with_log(|l| l.history().seqs()[start..=end].to_vec());
    compaction_start_seqs(start, end, seqs)
}

/// A `compaction/start` that needs no surface (for events rejected before their data is read).
pub fn compaction_start_any() -> NewEvent {
    compaction_start_seqs(0, 0, vec![0])
}

/// `compaction/summary`.
pub fn compaction_summary(text: &str) -> NewEvent {
    NewEvent::new("compaction/summary", json!({ "summary": text }))
}

/// A compaction checkpoint replacing `start..=end`, citing `sources`.
pub fn checkpoint(text: &str, start: usize, end: usize, sources: Vec<u64>) -> NewEvent {
    NewEvent::replacing(
        "user/message",
        json!({"message": {"role": "user", "content": [{"type": "text", "text": text}]}, "source": "compaction"}),
        start,
        end,
        sources,
    )
}

/// `compaction/end`.
pub fn compaction_end(outcome: &str) -> NewEvent {
    NewEvent::new("compaction/end", json!({ "outcome": outcome }))
}

/// Appends every event, panicking with the error on a rejection. Returns the last seq.
pub fn append_all(s: &Session, evs: Vec<NewEvent>) -> u64 {
    let mut last = 0;
    for ev in evs {
        let ty = ev.ty.clone();
        last = s.append(ev).unwrap_or_else(|e| panic!("{ty} rejected: {e}"));
    }
    last
}

/// The events of one complete turn `turn` (instance 1): a user message, a step whose
/// assistant message calls one tool (id `c{turn}`), its result, and a final answering step.
pub fn complete_turn(turn: u64) -> Vec<NewEvent> {
    let id = format!("c{turn}");
    vec![
        turn_start(turn),
        user(&format!("question {turn}")),
        step_start(turn, 1),
        assistant(turn, 1, "let me look", &[(&id, "read", "{\"path\":\"a\"}")]),
        tool_call(turn, 1, &id, "read", "{\"path\":\"a\"}"),
        step_end(turn, 1, "response"),
        tool_result(&id, "contents"),
        step_start(turn, 2),
        assistant(turn, 2, &format!("answer {turn}"), &[]),
        step_end(turn, 2, "response"),
        turn_end(turn, "completed"),
    ]
}

/// A session in memory with the initial header already recorded.
pub fn session_with_header() -> Session {
    let s = Session::in_memory();
    s.append(header("initial", 1, "be brief")).unwrap();
    s
}

/// Everything a user can observe about a session's log.
#[derive(Debug, PartialEq)]
pub struct Observed {
    pub len: usize,
    pub events: String,
    pub history: String,
    pub header: Option<EpochHeader>,
    pub generation: u64,
}

/// Observes a session.
pub fn observe(s: &Session) -> Observed {
    Observed {
        len: s.len(),
        events: s.events_json(0, None).unwrap(),
        history: s.history_json(),
        header: s.request_header(),
        generation: s.with_log(|l| l.history().generation()),
    }
}

/// Appends `ev`, expects a rejection of `kind` whose message contains every one of `needles`,
/// and checks that the session is unchanged. Returns the error.
pub fn rejected(s: &Session, ev: NewEvent, kind: ErrorKind, needles: &[&str]) -> Error {
    let before = observe(s);
    let ty = ev.ty.clone();
    let e = match s.append(ev) {
        Ok(seq) => panic!("{ty} was accepted at seq {seq}; expected a {kind:?} rejection"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), kind, "kind of: {}", e.message());
    for n in needles {
        assert!(e.message().contains(n), "message {:?} does not contain {n:?}", e.message());
    }
    assert_eq!(observe(s), before, "a rejected {ty} changed the session");
    e
}

/// The `field` detail of an error.
pub fn field(e: &Error) -> &str {
    e.detail().get("field").and_then(Value::as_str).unwrap_or("<none>")
}

/// What a [`CountingStore`] saw, shared with the test.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Append calls (batches).
    pub appends: usize,
    pub syncs: usize,
    /// Undo calls (a failed sync's batch removed again).
    pub undos: usize,
    /// Cut calls (a damaged tail moved aside on open).
    pub cuts: usize,
    /// Records appended so far (stored in the inner memory store).
    pub records: usize,
    /// Fail every append once this many records are stored.
    pub fail_append_after: Option<usize>,
    /// Fail every sync.
    pub fail_sync: bool,
}

/// A memory store that counts calls and can be told to fail.
pub struct CountingStore {
    inner: MemoryStore,
    pub stats: Arc<Mutex<StoreStats>>,
}

impl CountingStore {
    /// A new store and the handle to its counters.
    pub fn new() -> (CountingStore, Arc<Mutex<StoreStats>>) {
        let stats = Arc::new(Mutex::new(StoreStats::default()));
        (CountingStore { inner: MemoryStore::new(), stats: stats.clone() }, stats)
    }
}

impl Store for CountingStore {
    fn load(&mut self) -> Result<StoreContents> {
        self.inner.load()
    }
    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        let mut st = self.stats.lock().unwrap();
        st.appends += 1;
        if st.fail_append_after.is_some_and(|n| st.records >= n) {
            return Err(Error::new(ErrorKind::Storage, "test store: disk full"));
        }
        self.inner.append(batch)?;
        st.records = self.inner.records().len();
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        let mut st = self.stats.lock().unwrap();
        st.syncs += 1;
        if st.fail_sync {
            return Err(Error::new(ErrorKind::Storage, "test store: sync failed"));
        }
        Ok(())
    }
    fn undo(&mut self, from: usize) -> Result<()> {
        let mut st = self.stats.lock().unwrap();
        st.undos += 1;
        self.inner.undo(from)?;
        st.records = self.inner.records().len();
        Ok(())
    }
    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        let mut st = self.stats.lock().unwrap();
        st.cuts += 1;
        self.inner.cut(keep, reason)?;
        st.records = self.inner.records().len();
        Ok(None)
    }
    fn describe(&self) -> String {
        "counting test store".into()
    }
}

/// Opens a session over a fresh [`CountingStore`].
pub fn counting_session(opts: SessionOptions) -> (Session, Arc<Mutex<StoreStats>>) {
    let (store, stats) = CountingStore::new();
    let s = Session::create(Box::new(store), opts).unwrap();
    (s, stats)
}

/// Recomputes the chained digest of every event record after a test edited records by hand
/// (what a deliberate rewrite would do), so that the test reaches the checks behind the chain.
/// A record that is not JSON is left as it is.
pub fn rechain(lines: &mut [String]) {
    let mut link = llmsession::log::chain::start(lines[0].as_bytes());
    for l in lines[1..].iter_mut() {
        let Ok(mut v) = serde_json::from_str::<Value>(l) else { continue };
        let body = match v.as_object_mut().and_then(|m| m.remove("chain")) {
            Some(_) if llmsession::log::chain::without_chain(l).len() < l.len() => llmsession::log::chain::without_chain(l).into_owned(),
            _ => v.to_string(),
        };
        let (rec, next) = llmsession::log::chain::seal(&link, &body);
        link = next;
        *l = rec;
    }
}
