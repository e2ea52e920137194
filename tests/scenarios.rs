//! Runs every scenario file in tests/scenarios/ (and in $LLMSESSION_SCENARIOS), or only
//! $LLMSESSION_SCENARIO_FILE. The format is documented in docs/scenarios.md.
//!
//! Each run also writes the scenario's golden transcript (every op's outcome, request info,
//! compaction outcome and callback inputs, then the final log with times masked:
//! docs/scenarios.md, "Golden transcripts"; tests/support/golden.rs) and compares it with
//! tests/scenarios/golden/<stem>.json, or writes that file when LLMSESSION_SCENARIO_BLESS=1
//! (scripts/scenario-golden.sh).
//!
//! `scenarios` keeps the sessions in memory; `scenarios_on_postgres` runs every file again with
//! its sessions in PostgreSQL (a schema of its own per file; `make test-pg` sets
//! `LLMSESSION_PG_URL`), reloading from the database on `resume` and forking into it, and checks
//! that the stored log reloads to the same records and verifies.

use llmsession::agent::wire::{policy_table, CompactInput, ProviderErrorInput, ResponseInput};
use llmsession::agent::ToolResultInput;
use llmsession::compaction::{PolicyTable, SummaryOutput, SummaryRequest};
use llmsession::log::load::parse_records;
use llmsession::log::TurnEndReason;
use llmsession::prefix::{parse_listener_output, ListenerContext, PreStepInfo};
use llmsession::request::verify_events;
use llmsession::store::url::UrlOptions;
use llmsession::store::{MemoryStore, Store};
use llmsession::{Agent, AgentOptions, Block, CancelToken, Error, ErrorKind, Message, Session, SessionOptions, Usage};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Res<T> = std::result::Result<T, String>;

#[cfg(feature = "postgres")]
#[path = "support/pg.rs"]
mod pg_support;

#[path = "support/golden.rs"]
mod golden;
use golden::Journal;

/// Where the runner keeps a scenario's sessions.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Clone)]
enum Stores {
    Memory,
    /// A PostgreSQL URL (with the scenario's own schema in its search path).
    Postgres(String),
}

impl Stores {
    /// An empty store for a new session `id`.
    fn empty(&self, id: &str) -> Res<Box<dyn Store>> {
        match self {
            Stores::Memory => Ok(Box::new(MemoryStore::new())),
            Stores::Postgres(url) => llmsession::store::url::open_store(url, &UrlOptions { id: Some(id.into()), ..UrlOptions::default() })
                .map(|(s, _)| s)
                .map_err(|e| err_str(&e)),
        }
    }

    /// The session reopened from its store: a copy of its records in memory, or the database
    /// (the handle is given up first: it holds the writer lease).
    fn reopen(&self, session: Session) -> Res<Session> {
        let store: Box<dyn Store> = match self {
            Stores::Memory => Box::new(MemoryStore::with_records(session.records().unwrap().iter().map(|r| r.to_string()).collect())),
            Stores::Postgres(_) => {
                let id = session.id();
                drop(session);
                self.empty(&id)?
            }
        };
        Session::open(store, SessionOptions::default()).map(|(s, _)| s).map_err(|e| err_str(&e))
    }

    /// For a database: the stored log reopens (read-only) to the same records and verifies.
    fn check_stored(&self, session: &Session) -> Res<()> {
        let Stores::Postgres(url) = self else { return Ok(()) };
        let opts = UrlOptions { id: Some(session.id()), read_only: true, ..UrlOptions::default() };
        let (stored, _) = Session::open_url(url, opts).map_err(|e| format!("reopening from PostgreSQL: {}", err_str(&e)))?;
        if stored.records().map_err(|e| err_str(&e))? != session.records().unwrap() {
            return Err("the records reloaded from PostgreSQL differ from the session's".into());
        }
        stored.verify().map_err(|e| format!("verify of the stored log: {}", err_str(&e)))?;
        Ok(())
    }
}

/// A declarative listener's shared state (invocation count, held messages).
struct ListenerState {
    /// Its position among the listeners (or pre-step listeners), as the transcript names it.
    index: usize,
    spec: Value,
    calls: AtomicUsize,
    held: Mutex<Vec<Message>>,
}

struct World {
    stores: Stores,
    session: Session,
    agent: Option<Agent>,
    options: AgentOptions,
    listeners: Vec<Arc<ListenerState>>,
    pre_steps: Vec<Arc<ListenerState>>,
    pre_step_seen: Arc<Mutex<Vec<Value>>>,
    summaries: Arc<Mutex<Vec<SummaryRequest>>>,
    summariser: Option<Value>,
    policy: Option<Value>,
    requests: Vec<Value>,
    /// For each routed request, how many summarisation requests had been sent when it was returned.
    request_marks: Vec<usize>,
    last_request: Option<Value>,
    /// The session was opened from a log file by a `load` op (always a file: the op checks
    /// file-specific things such as sidecars), so it is not in the world's store.
    loaded_from_file: bool,
    cancel: CancelToken,
    /// The host token counter's spec (`counter`, `setCounter`), if any.
    counter: Option<Value>,
    /// Disposes the live instance from inside a callback (pre-step, summariser, counter).
    dispose: Arc<Mutex<Option<llmsession::agent::DisposeHandle>>>,
    /// Where `load` writes the log it opens.
    dir: tempfile::TempDir,
    /// How many `load` ops ran (the n-th writes `load-<n>.jsonl`).
    loads: usize,
    /// What the fakes received during the running op (for the transcript).
    journal: Arc<Mutex<Journal>>,
    /// What the running op produced, for its transcript entry (`outcome`, `error`, `request`, ...).
    out: serde_json::Map<String, Value>,
    /// Every request envelope a `request` or `nativeBegin` op returned, with how many
    /// summarisation requests had been sent by then (for `replay`: the order they were sent).
    sent: Vec<(usize, String)>,
}

fn kind_name(k: ErrorKind) -> &'static str {
    k.name()
}

fn err_str(e: &Error) -> String {
    format!("[{}] {}", kind_name(e.kind()), e.message())
}

fn times_ok(spec: &Value, calls: usize) -> bool {
    match spec.get("times").and_then(Value::as_u64) {
        None => true,
        Some(t) => (calls as u64) < t,
    }
}

fn msgs(v: &Value) -> Vec<Message> {
    Message::list_from_value(v, "messages").expect("scenario messages are valid")
}

fn make_prefix_listener(st: Arc<ListenerState>, journal: Arc<Mutex<Journal>>) -> Arc<dyn llmsession::prefix::PrefixListener> {
    Arc::new(move |ctx: &ListenerContext<'_>, rest: &[Message]| -> llmsession::Result<Vec<Message>> {
        journal.lock().calls.push(json!({"callback": "prefix", "listener": st.index, "input": ctx.host_input(rest)}));
        let n = st.calls.fetch_add(1, Ordering::SeqCst);
        let active = times_ok(&st.spec, n);
        let kind = st.spec["kind"].as_str().unwrap_or("delegate");
        let held = st.held.lock().clone();
        match kind {
            "prepend" => Ok(held.into_iter().chain(rest.iter().cloned()).collect()),
            "append" => Ok(rest.iter().cloned().chain(held).collect()),
            "delegate" => Ok(rest.to_vec()),
            "fail" if active => Err(Error::new(ErrorKind::Listener, st.spec["message"].as_str().unwrap_or("listener failed"))),
            "invalid" if active => parse_listener_output(&st.spec["output"]),
            "cancel" if active => {
                ctx.cancel.cancel();
                Ok(held.into_iter().chain(rest.iter().cloned()).collect())
            }
            "dispose" if active => {
                ctx.dispose_agent();
                Ok(rest.to_vec())
            }
            "append-event" => {
                if active {
                    for m in msgs(&st.spec["events"]) {
                        ctx.append_context(m)?;
                    }
                }
                Ok(held.into_iter().chain(rest.iter().cloned()).collect())
            }
            _ => Ok(held.into_iter().chain(rest.iter().cloned()).collect()),
        }
    })
}

fn make_pre_step(
    st: Arc<ListenerState>,
    seen: Arc<Mutex<Vec<Value>>>,
    journal: Arc<Mutex<Journal>>,
) -> Arc<dyn llmsession::prefix::PreStepListener> {
    Arc::new(move |ctx: &ListenerContext<'_>, info: &PreStepInfo<'_>| -> llmsession::Result<()> {
        let n = st.calls.fetch_add(1, Ordering::SeqCst);
        let active = times_ok(&st.spec, n);
        seen.lock().push(info.to_json());
        journal.lock().calls.push(json!({"callback": "preStep", "listener": st.index, "input": info.to_json()}));
        match st.spec["kind"].as_str().unwrap_or("record") {
            "inject" if active => {
                for m in msgs(&st.spec["messages"]) {
                    ctx.append_context(m)?;
                }
                Ok(())
            }
            "fail" if active => Err(Error::new(ErrorKind::Listener, "pre-step failed")),
            "cancel" if active => {
                ctx.cancel.cancel();
                Ok(())
            }
            "dispose" if active => {
                ctx.dispose_agent();
                Ok(())
            }
            _ => Ok(()),
        }
    })
}

fn make_summariser(
    spec: Value,
    seen: Arc<Mutex<Vec<SummaryRequest>>>,
    session: Session,
    dispose: Arc<Mutex<Option<llmsession::agent::DisposeHandle>>>,
    journal: Arc<Mutex<Journal>>,
) -> Arc<dyn llmsession::compaction::Summariser> {
    let calls = Arc::new(AtomicUsize::new(0));
    Arc::new(move |req: &SummaryRequest, cancel: &CancelToken| -> llmsession::Result<SummaryOutput> {
        seen.lock().push(req.clone());
        journal.lock().calls.push(json!({"callback": "summariser", "input": summary_input(req)}));
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let active = times_ok(&spec, n);
        let text = spec["text"].as_str().unwrap_or("Summary of the work so far.").to_string();
        let usage = spec.get("usage").map(|u| Usage::from_value(u, "usage").unwrap());
        let ok = SummaryOutput { text: text.clone(), usage, provider: None, model: None, truncated: false };
        match spec["kind"].as_str().unwrap_or("fixed") {
            "fail" if active => Err(Error::new(ErrorKind::Summariser, "summariser unavailable")),
            "empty" if active => Ok(SummaryOutput { text: "   ".into(), ..ok }),
            "truncated" if active => Ok(SummaryOutput { truncated: true, ..ok }),
            "long" if active => Ok(SummaryOutput { text: "very long summary ".repeat(20000), ..ok }),
            "cancel" if active => {
                cancel.cancel();
                Err(Error::new(ErrorKind::Cancelled, "cancelled"))
            }
            "append-during" if active => {
                for m in msgs(&spec["messages"]) {
                    session.append(llmsession::prefix::context_event(m, llmsession::log::UserSource::Host)?)?;
                }
                Ok(ok)
            }
            "dispose" if active => {
                if let Some(d) = dispose.lock().as_ref() {
                    d.dispose();
                }
                Ok(ok)
            }
            _ => Ok(ok),
        }
    })
}

/// What the transcript records of a summariser call: what a host summariser receives
/// (`SummaryRequest::host_input`) with the envelope replaced by its length and message count.
fn summary_input(req: &SummaryRequest) -> Value {
    let messages = serde_json::from_str::<Value>(&req.json).ok().and_then(|v| v["messages"].as_array().map(Vec::len));
    json!({
        "digest": req.digest, "provider": req.provider, "model": req.model, "maxTokens": req.max_tokens,
        "sharedMessages": req.shared_messages, "prefixLen": req.prefix_len,
        "bytes": req.json.len(), "messageCount": messages,
    })
}

/// The characters of every string in `v` (object keys left out).
fn string_chars(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.chars().count() as u64,
        Value::Array(a) => a.iter().map(string_chars).sum(),
        Value::Object(m) => m.values().map(string_chars).sum(),
        _ => 0,
    }
}

/// A host token counter (see docs/scenarios.md, "Token counters").
fn make_counter(
    spec: Value,
    session: Session,
    dispose: Arc<Mutex<Option<llmsession::agent::DisposeHandle>>>,
    journal: Arc<Mutex<Journal>>,
) -> Arc<dyn llmsession::tokens::TokenCounter> {
    let calls = AtomicUsize::new(0);
    Arc::new(llmsession::tokens::HostCounter::new(move |item: &Value| -> llmsession::Result<u64> {
        journal.lock().counter_calls += 1;
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let active = times_ok(&spec, n);
        let per = spec.get("perToken").and_then(Value::as_u64).unwrap_or(4).max(1);
        let count = string_chars(item).div_ceil(per);
        match spec["kind"].as_str().unwrap_or("chars") {
            "fail" if active => Err(Error::new(ErrorKind::Listener, "token counter failed")),
            "append-during" if active => {
                for m in msgs(&spec["messages"]) {
                    session.append(llmsession::prefix::context_event(m, llmsession::log::UserSource::Host)?)?;
                }
                Ok(count)
            }
            "dispose" if active => {
                if let Some(d) = dispose.lock().as_ref() {
                    d.dispose();
                }
                Ok(count)
            }
            _ => Ok(count),
        }
    }))
}

/// What the transcript keeps of an explain report (`explain` op): the compactions, their totals
/// per mechanism, and the request counts.
fn explain_summary(v: &Value) -> Value {
    json!({
        "compactions": v["compactions"],
        "compactionTotals": v["compactionTotals"],
        "requests": {"conversation": v["totals"]["conversationRequests"], "compaction": v["totals"]["compactionRequests"],
                     "notRebuilt": v["totals"]["notRebuilt"]},
    })
}

impl World {
    fn new(sc: &Value, stores: &Stores) -> Res<World> {
        let id = "scenario-session";
        let session =
            Session::create(stores.empty(id)?, SessionOptions { id: Some(id.into()), ..Default::default() }).map_err(|e| err_str(&e))?;
        let mut options = AgentOptions::from_value(&sc["agent"], "agent").map_err(|e| err_str(&e))?;
        options.check_requests = true;
        let mut w = World {
            stores: stores.clone(),
            session,
            agent: None,
            options,
            listeners: Vec::new(),
            pre_steps: Vec::new(),
            pre_step_seen: Arc::new(Mutex::new(Vec::new())),
            summaries: Arc::new(Mutex::new(Vec::new())),
            summariser: sc.get("summariser").cloned(),
            policy: sc.get("policy").cloned(),
            requests: Vec::new(),
            request_marks: Vec::new(),
            last_request: None,
            loaded_from_file: false,
            cancel: CancelToken::new(),
            counter: sc.get("counter").cloned(),
            dispose: Arc::new(Mutex::new(None)),
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
            loads: 0,
            journal: Arc::new(Mutex::new(Journal::default())),
            out: serde_json::Map::new(),
            sent: Vec::new(),
        };
        w.set_listeners(sc.get("listeners"), sc.get("preStep"));
        w.new_agent()?;
        Ok(w)
    }

    fn set_listeners(&mut self, listeners: Option<&Value>, pre: Option<&Value>) {
        let mk = |(index, v): (usize, &Value)| {
            Arc::new(ListenerState {
                index,
                held: Mutex::new(v.get("messages").map(msgs).unwrap_or_default()),
                spec: v.clone(),
                calls: AtomicUsize::new(0),
            })
        };
        if let Some(Value::Array(a)) = listeners {
            self.listeners = a.iter().enumerate().map(mk).collect();
        }
        if let Some(Value::Array(a)) = pre {
            self.pre_steps = a.iter().enumerate().map(mk).collect();
        }
    }

    fn new_agent(&mut self) -> Res<()> {
        self.try_new_agent().map_err(|e| err_str(&e))
    }

    /// A new instance over the session, with the current listeners, policy, summariser and counter.
    fn try_new_agent(&mut self) -> Result<(), Error> {
        let mut agent = Agent::new(&self.session, self.options.clone())?;
        for l in &self.listeners {
            agent.add_prefix_listener(make_prefix_listener(l.clone(), self.journal.clone())).unwrap();
        }
        for l in &self.pre_steps {
            agent.add_pre_step_listener(make_pre_step(l.clone(), self.pre_step_seen.clone(), self.journal.clone())).unwrap();
        }
        if let Some(p) = &self.policy {
            agent.set_policies(PolicyTable::from_value(p, "policy")?)?;
        }
        let spec = self.summariser.clone().unwrap_or(json!({"kind":"fixed"}));
        agent.set_summariser(Some(self.summariser_for(spec)));
        if let Some(c) = self.counter.clone().filter(|c| !c.is_null()) {
            agent.set_token_counter(Some(make_counter(c, self.session.clone(), self.dispose.clone(), self.journal.clone())));
        }
        *self.dispose.lock() = Some(agent.dispose_handle());
        self.agent = Some(agent);
        Ok(())
    }

    fn summariser_for(&self, spec: Value) -> Arc<dyn llmsession::compaction::Summariser> {
        make_summariser(spec, self.summaries.clone(), self.session.clone(), self.dispose.clone(), self.journal.clone())
    }

    fn agent(&mut self) -> Res<&mut Agent> {
        self.agent.as_mut().ok_or_else(|| "no live agent (disposed?)".to_string())
    }

    fn events(&self) -> Vec<Value> {
        serde_json::from_str::<Value>(&self.session.events_json(0, None).unwrap()).unwrap().as_array().unwrap().clone()
    }
}

/// A string is a user text message; anything else is parsed as a message (its errors are the
/// op's errors, for `expectError`).
fn user_message(v: &Value) -> Result<Message, Error> {
    match v {
        Value::String(s) => Ok(Message::user_text(s.clone())),
        other => Message::from_value(other, "message"),
    }
}

/// Whether `got` (the value at a pointer, if any) matches `want`: equality, or a matcher object
/// `{"$contains": "text"}`, `{"$absent": true}`, `{"$gt": n}`, `{"$lt": n}` (see docs/scenarios.md).
fn matches(got: Option<&Value>, want: &Value) -> bool {
    if let Some(m) = want.as_object().filter(|m| !m.is_empty() && m.keys().all(|k| k.starts_with('$'))) {
        return m.iter().all(|(k, arg)| match k.as_str() {
            "$contains" => got.and_then(Value::as_str).zip(arg.as_str()).is_some_and(|(g, a)| g.contains(a)),
            "$absent" => got.is_none() == arg.as_bool().unwrap_or(true),
            "$gt" => got.and_then(Value::as_f64).zip(arg.as_f64()).is_some_and(|(g, a)| g > a),
            "$lt" => got.and_then(Value::as_f64).zip(arg.as_f64()).is_some_and(|(g, a)| g < a),
            _ => false,
        });
    }
    got == Some(want)
}

fn check_pointers(what: &str, doc: &Value, ptrs: &Value) -> Res<()> {
    if let Some(m) = ptrs.as_object() {
        for (p, want) in m {
            let got = doc.pointer(p);
            if !matches(got, want) {
                return Err(format!(
                    "{what}: at {p}: expected {want}, got {}",
                    got.map(|g| clip(&g.to_string())).unwrap_or("(absent)".into())
                ));
            }
        }
    }
    Ok(())
}

/// A value shortened for an error message.
fn clip(s: &str) -> String {
    match s.char_indices().nth(300) {
        None => s.to_string(),
        Some((i, _)) => format!("{}… ({} characters)", &s[..i], s.chars().count()),
    }
}

/// Expands `{"$repeat": "text", "times": n}` anywhere in a scenario into the repeated string;
/// `seen` collects each expansion with the object it came from (the transcript folds them back).
fn expand(v: &mut Value, seen: &mut golden::Repeats) {
    match v {
        Value::Object(m) if m.contains_key("$repeat") => {
            let text = m["$repeat"].as_str().expect("$repeat takes a string").to_string();
            let times = m.get("times").and_then(Value::as_u64).expect("$repeat needs \"times\"") as usize;
            let expanded = text.repeat(times);
            seen.entry(expanded.clone()).or_insert_with(|| json!({"$repeat": text, "times": times}));
            *v = Value::String(expanded);
        }
        Value::Object(m) => m.values_mut().for_each(|x| expand(x, seen)),
        Value::Array(a) => a.iter_mut().for_each(|x| expand(x, seen)),
        _ => {}
    }
}

/// Checks an op's result against its `expectError`, and records it as the op's outcome.
fn check_error(w: &mut World, op: &Value, r: Result<(), Error>) -> Res<()> {
    record_outcome(w, r.as_ref().err());
    match (op.get("expectError"), r) {
        (None, Ok(())) => Ok(()),
        (None, Err(e)) => Err(format!("unexpected error: {}", err_str(&e))),
        (Some(want), Ok(())) => Err(format!("expected an error {want}, got success")),
        (Some(want), Err(e)) => {
            if let Some(k) = want.get("kind").and_then(Value::as_str) {
                if k != e.kind().name() {
                    return Err(format!("expected error kind {k}, got {}", err_str(&e)));
                }
            }
            if let Some(c) = want.get("contains").and_then(Value::as_str) {
                if !e.message().contains(c) {
                    return Err(format!("expected the error message to contain {c:?}, got {}", err_str(&e)));
                }
            }
            Ok(())
        }
    }
}

/// The op's outcome for the transcript: `"ok"`, or `"error"` with the error.
fn record_outcome(w: &mut World, e: Option<&Error>) {
    match e {
        None => {
            w.out.insert("outcome".into(), "ok".into());
        }
        Some(e) => {
            w.out.insert("outcome".into(), "error".into());
            w.out.insert("error".into(), golden::error_value(e));
        }
    }
}

fn messages_of(req: &Value) -> Vec<Value> {
    req["messages"].as_array().cloned().unwrap_or_default()
}

fn check_request(w: &World, req: &Value, prev: Option<&Value>, exp: &Value) -> Res<()> {
    check_pointers("request", req, exp.get("pointers").unwrap_or(&Value::Null))?;
    if let Some(eq) = exp.get("equals") {
        if eq != req {
            return Err(format!("request differs:\n  expected {eq}\n  got      {req}"));
        }
    }
    if let Some(n) = exp.get("messageCount").and_then(Value::as_u64) {
        let got = messages_of(req).len() as u64;
        if got != n {
            return Err(format!("expected {n} messages, got {got}: {}", req["messages"]));
        }
    }
    if let Some(Value::Array(a)) = exp.get("absent") {
        for p in a {
            let p = p.as_str().unwrap();
            if req.pointer(p).is_some() {
                return Err(format!("expected {p} to be absent, got {}", req.pointer(p).unwrap()));
            }
        }
    }
    if let Some(Value::Array(texts)) = exp.get("historyExcludes") {
        let plen = exp.get("prefixLen").and_then(Value::as_u64).unwrap_or(0) as usize;
        let hist: String = messages_of(req)[plen..].iter().map(|m| m.to_string()).collect();
        for t in texts {
            if hist.contains(t.as_str().unwrap()) {
                return Err(format!("history contains {t}"));
            }
        }
    }
    if exp.get("extendsPrevious").and_then(Value::as_bool) == Some(true) {
        let prev = prev.ok_or("extendsPrevious: there is no previous request")?;
        for k in ["provider", "model", "system", "tools", "temperature", "maxTokens", "reasoningEffort", "stop"] {
            if prev.get(k) != req.get(k) {
                return Err(format!("extendsPrevious: field {k} differs: {:?} vs {:?}", prev.get(k), req.get(k)));
            }
        }
        let (a, b) = (messages_of(prev), messages_of(req));
        if b.len() < a.len() || a[..] != b[..a.len()] {
            return Err(format!("extendsPrevious: the previous request's {} messages are not a prefix of this one's {}", a.len(), b.len()));
        }
    }
    let _ = w;
    Ok(())
}

/// Runs one op. An instance disposed during it (from a callback) is dropped afterwards, as a
/// host drops a disposed instance.
fn run_op(w: &mut World, op: &Value) -> Res<()> {
    let r = run_op_inner(w, op);
    if w.agent.as_ref().is_some_and(|a| a.is_disposed()) {
        w.agent = None;
    }
    r
}

fn run_op_inner(w: &mut World, op: &Value) -> Res<()> {
    let name = op["op"].as_str().ok_or("op without \"op\"")?;
    match name {
        "turn" => {
            let r = match user_message(&op["user"]) {
                Ok(m) => w.agent()?.start_turn(m).map(|_| ()),
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "request" => {
            let cancel = if op.get("cancelled").and_then(Value::as_bool) == Some(true) {
                let c = CancelToken::new();
                c.cancel();
                c
            } else {
                w.cancel = CancelToken::new();
                w.cancel.clone()
            };
            let r = w.agent()?.next_request(&cancel);
            let disposed = matches!(&r, Err(e) if e.kind() == ErrorKind::Disposed);
            let res = match r {
                Ok(req) => {
                    let v: Value = serde_json::from_str(&req.json).map_err(|e| e.to_string())?;
                    w.out.insert("request".into(), serde_json::to_value(req.info()).map_err(|e| e.to_string())?);
                    let exp = op.get("expect").cloned().unwrap_or(Value::Null);
                    if let Some(n) = exp.get("prefixLen").and_then(Value::as_u64) {
                        if req.prefix_len as u64 != n {
                            return Err(format!("expected prefixLen {n}, got {}", req.prefix_len));
                        }
                    }
                    if let Some(n) = exp.get("sharedMessages").and_then(Value::as_u64) {
                        if req.shared_messages as u64 != n {
                            return Err(format!("expected sharedMessages {n}, got {}", req.shared_messages));
                        }
                    }
                    let prev = w.last_request.clone();
                    check_request(w, &v, prev.as_ref(), &exp)?;
                    w.requests.push(v.clone());
                    w.request_marks.push(w.summaries.lock().len());
                    w.sent.push((w.summaries.lock().len(), req.json.clone()));
                    w.last_request = Some(v);
                    Ok(())
                }
                Err(e) => Err(e),
            };
            if disposed {
                w.agent = None;
            }
            check_error(w, op, res)
        }
        "respond" => {
            let mut content: Vec<Block> = Vec::new();
            if let Some(t) = op.get("text").and_then(Value::as_str) {
                content.push(Block::text(t));
            }
            if let Some(Value::Array(calls)) = op.get("toolCalls") {
                for c in calls {
                    content.push(Block::tool_call(
                        c["id"].as_str().unwrap(),
                        c["name"].as_str().unwrap(),
                        c["arguments"].as_str().unwrap_or("{}"),
                    ));
                }
            }
            // The response is decoded by the core's wire decoder, as `lls_agent_record_response`
            // decodes it: its errors are the op's errors (for `expectError`).
            let mut response =
                json!({"message": op.get("message").cloned().unwrap_or_else(|| json!(Message::new(llmsession::Role::Assistant, content)))});
            if let Some(u) = op.get("usage") {
                response["usage"] = u.clone();
            }
            let r = match ResponseInput::from_value(&response) {
                Ok(ResponseInput { message, usage }) => w.agent()?.record_response(message, usage).map(|_| ()),
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "toolResult" => {
            // The payload a binding sends to `lls_agent_record_tool_result`, decoded by the core.
            let mut result = json!({"callId": op.get("callId").cloned().unwrap_or_else(|| json!(""))});
            match op.get("content") {
                Some(c) => result["content"] = c.clone(),
                None => result["text"] = json!(op.get("text").and_then(Value::as_str).unwrap_or("ok")),
            }
            if let Some(e) = op.get("isError") {
                result["isError"] = e.clone();
            }
            let r = match ToolResultInput::from_value(&result) {
                Ok(input) => w.agent()?.record_tool_result(input).map(|_| ()),
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "inject" => {
            let r = match user_message(&op["user"]) {
                Ok(m) => w.agent()?.inject(m).map(|_| ()),
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "providerError" => {
            let input = json!({"message": op.get("message").and_then(Value::as_str).unwrap_or("provider error"), "overflow": op.get("overflow") == Some(&json!(true))});
            let c = CancelToken::new();
            let agent = w.agent()?;
            let r = ProviderErrorInput::from_value(&input)
                .and_then(|ProviderErrorInput { message, overflow }| agent.report_provider_error(&message, overflow, &c));
            let r = match r {
                Ok(out) => {
                    let got = match out {
                        llmsession::agent::ProviderErrorOutcome::Retry => "retry",
                        llmsession::agent::ProviderErrorOutcome::Recorded => "recorded",
                    };
                    w.out.insert("providerError".into(), got.into());
                    if let Some(want) = op.get("expectOutcome").and_then(Value::as_str) {
                        if got != want {
                            return Err(format!("expected outcome {want}, got {got}"));
                        }
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "endTurn" => {
            // A reason the library refuses is the op's error, as a binding meets it.
            let r = match TurnEndReason::parse(op["reason"].as_str().unwrap_or("completed"), "reason") {
                Ok(reason) => w.agent()?.end_turn(reason),
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "setOptions" => {
            // The options are parsed as the library parses them (their errors are the op's): the
            // current ones as JSON, with the op's fields replacing theirs.
            let mut v = json!({"config": serde_json::to_value(&w.options.config).map_err(|e| e.to_string())?,
                               "tools": serde_json::to_value(&w.options.tools).map_err(|e| e.to_string())?});
            if let Some(s) = &w.options.system {
                v["system"] = s.clone().into();
            }
            for k in ["config", "tools", "system"] {
                match op.get(k) {
                    Some(Value::Null) if k == "system" => {
                        v.as_object_mut().unwrap().remove(k);
                    }
                    Some(x) => v[k] = x.clone(),
                    None => {}
                }
            }
            // Decoded as `lls_agent_set_options` decodes its argument (field paths from the top).
            let r = AgentOptions::from_value(&v, "").and_then(|mut o| {
                o.check_requests = true;
                w.options = o.clone();
                match w.agent.as_mut() {
                    Some(a) => a.set_options(o),
                    None => Err(Error::new(ErrorKind::Disposed, "no live agent (disposed?)")),
                }
            });
            check_error(w, op, r)
        }
        "mutateListener" => {
            let i = op["index"].as_u64().unwrap_or(0) as usize;
            let l = w.listeners.get(i).ok_or("no such listener")?;
            for m in l.held.lock().iter_mut() {
                m.content = vec![Block::text(op["text"].as_str().unwrap_or("mutated"))];
            }
            Ok(())
        }
        "resume" => {
            // A new instance over the same log: optionally after a reload from storage.
            if let Some(a) = w.agent.take() {
                a.dispose().map_err(|e| err_str(&e))?;
            }
            if op.get("reload").and_then(Value::as_bool).unwrap_or(true) {
                let old = std::mem::replace(&mut w.session, Session::in_memory());
                w.session = w.stores.reopen(old)?;
            }
            w.set_listeners(op.get("listeners"), op.get("preStep"));
            if let Some(s) = op.get("system") {
                w.options.system = s.as_str().map(str::to_string);
            }
            w.last_request = None;
            let r = w.try_new_agent();
            record_outcome(w, r.as_ref().err());
            match (op.get("expectError"), r) {
                (None, r) => r.map_err(|e| err_str(&e)),
                (Some(_), Ok(())) => Err("expected resume to fail".into()),
                (Some(_), Err(_)) => Ok(()),
            }
        }
        "secondAgent" => {
            let r = Agent::new(&w.session, w.options.clone()).map(|_| ());
            check_error(w, op, r)
        }
        "fork" => {
            if let Some(a) = w.agent.take() {
                a.dispose().map_err(|e| err_str(&e))?;
            }
            let seed = op.get("seedLength").and_then(Value::as_u64);
            let id = "forked-session";
            let r = w.session.fork(seed, w.stores.empty(id)?, SessionOptions { id: Some(id.into()), ..Default::default() });
            match r {
                Ok(s) => {
                    w.session = s;
                    w.last_request = None;
                    w.new_agent()?;
                    check_error(w, op, Ok(()))
                }
                Err(e) => {
                    let r = check_error(w, op, Err(e));
                    w.new_agent()?;
                    r
                }
            }
        }
        "compact" => {
            let options = op.get("span").map(|span| json!({ "span": span }));
            let c = CancelToken::new();
            let agent = w.agent()?;
            let r = CompactInput::from_value(options.as_ref()).and_then(|o| agent.compact(o.span, &c));
            let r = match r {
                Ok(out) => {
                    w.out.insert("compaction".into(), serde_json::to_value(&out).map_err(|e| e.to_string())?);
                    if let Some(want) = op.get("expectOutcome").and_then(Value::as_str) {
                        if out.outcome != want {
                            return Err(format!("expected compaction outcome {want}, got {} ({:?})", out.outcome, out.error));
                        }
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "setPolicy" => {
            let r = policy_table(&op["policy"]).and_then(|t| {
                w.policy = Some(op["policy"].clone());
                w.agent.as_mut().unwrap().set_policies(t)
            });
            check_error(w, op, r)
        }
        "setSummariser" => {
            w.summariser = Some(op["summariser"].clone());
            let s = w.summariser_for(op["summariser"].clone());
            w.agent()?.set_summariser(Some(s));
            Ok(())
        }
        "dispose" => {
            if let Some(a) = w.agent.take() {
                a.dispose().map_err(|e| err_str(&e))?;
            }
            Ok(())
        }
        "setCounter" => {
            w.counter = op.get("counter").cloned().filter(|c| !c.is_null());
            let c = w.counter.clone().map(|c| make_counter(c, w.session.clone(), w.dispose.clone(), w.journal.clone()));
            w.agent()?.set_token_counter(c);
            Ok(())
        }
        "nativeBegin" => {
            let r = w.agent()?.native_compaction_request().map(|req| {
                let mut v = serde_json::to_value(&req).expect("serialises");
                v["envelope"] = req.envelope.len().into();
                v["body"] = req.body.len().into();
                (v, req.envelope)
            });
            let r = r.map(|(v, envelope)| {
                w.out.insert("native".into(), v);
                w.sent.push((w.summaries.lock().len(), envelope));
            });
            check_error(w, op, r)
        }
        "nativeRecord" | "nativeFail" => {
            let agent = w.agent()?;
            let r = if name == "nativeRecord" {
                agent.finish_native_compaction(&serde_json::to_string(&op["body"]).expect("serialises"))
            } else {
                agent.fail_native_compaction(op.get("error").and_then(Value::as_str).unwrap_or(""))
            };
            let r = match r {
                Ok(out) => {
                    let v = serde_json::to_value(&out).expect("serialises");
                    if let Some(want) = op.get("expectOutcome").and_then(Value::as_str) {
                        if v["outcome"] != want {
                            return Err(format!("expected native compaction outcome {want}, got {v}"));
                        }
                    }
                    w.out.insert("native".into(), v);
                    Ok(())
                }
                Err(e) => Err(e),
            };
            check_error(w, op, r)
        }
        "replay" => {
            // The session's log replayed against every envelope this run sent, in the order
            // it sent them (summarisation requests interleaved where they happened).
            let records: Vec<Vec<u8>> = w.session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect();
            let summaries: Vec<String> = w.summaries.lock().iter().map(|s| s.json.clone()).collect();
            let r = llmsession::replay::Replay::from_records(&records).and_then(|mut replay| {
                let mut order: Vec<&str> = Vec::new();
                let mut done = 0;
                for (mark, env) in &w.sent {
                    order.extend(summaries[done..*mark].iter().map(String::as_str));
                    done = *mark;
                    order.push(env);
                }
                order.extend(summaries[done..].iter().map(String::as_str));
                let mut answers = Vec::new();
                for env in order {
                    let a = replay.answer(env.as_bytes())?;
                    answers.push(json!({"purpose": a["purpose"], "id": a["id"], "outcome": a["outcome"]}));
                }
                Ok(json!({"requests": replay.len(), "answers": answers}))
            });
            let r = r.map(|v| {
                w.out.insert("replay".into(), v);
            });
            check_error(w, op, r)
        }
        "explain" => {
            let records: Vec<Vec<u8>> = w.session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect();
            let r = llmsession::explain::explain_records(&records, &llmsession::tokens::Estimator).map(|x| {
                let v = x.to_value();
                w.out.insert("explain".into(), explain_summary(&v));
            });
            check_error(w, op, r)
        }
        "load" => load(w, op),
        "expectLog" => expect_log(w, op),
        "expectSummaryRequest" => expect_summary(w, op),
        "expectPreStep" => {
            let seen = w.pre_step_seen.lock().clone();
            let i = op["index"].as_u64().unwrap_or(0) as usize;
            let got = seen.get(i).ok_or_else(|| format!("pre-step call {i} did not happen ({} calls)", seen.len()))?;
            check_pointers("pre-step", got, &op["pointers"])
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

/// `load`: reopens the session from a log file written from the op's records (or the current
/// log's), changed as the op says (see docs/scenarios.md).
fn load(w: &mut World, op: &Value) -> Res<()> {
    let mut records: Vec<String> = match op.get("records") {
        Some(Value::Array(a)) => a.iter().map(|r| r.as_str().map(str::to_string).unwrap_or_else(|| r.to_string())).collect(),
        Some(_) => return Err("load: records must be an array".into()),
        None => w.session.records().unwrap().iter().map(|r| r.to_string()).collect(),
    };
    if let Some(n) = op.get("dropLast").and_then(Value::as_u64) {
        records.truncate(records.len().saturating_sub(n as usize));
    }
    if let Some(Value::Array(edits)) = op.get("edit") {
        for e in edits {
            let (from, to) = (e["replace"].as_str().unwrap_or(""), e["with"].as_str().unwrap_or(""));
            // The record at `record` (negative: from the end), or else the last holding the text.
            let i = match e["record"].as_i64() {
                Some(i) if i < 0 => records.len() as i64 + i,
                Some(i) => i,
                None => records.iter().rposition(|r| r.contains(from)).map(|i| i as i64).unwrap_or(-1),
            };
            let r = usize::try_from(i).ok().and_then(|i| records.get_mut(i)).ok_or(format!("load: there is no record {i} to edit"))?;
            if !r.contains(from) {
                return Err(format!("load: record {i} does not contain {from:?}"));
            }
            *r = r.replacen(from, to, 1);
        }
    }
    let mut text: String = records.iter().map(|r| format!("{r}\n")).collect();
    if let Some(t) = op.get("tail").and_then(Value::as_str) {
        text.push_str(t);
    }
    if let Some(a) = w.agent.take() {
        a.dispose().map_err(|e| err_str(&e))?;
    }
    w.loads += 1;
    let path = w.dir.path().join(format!("load-{}.jsonl", w.loads));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    match Session::open_jsonl(&path, SessionOptions::default()) {
        Ok((s, report)) => {
            // The load report as `lls_session_load_report` gives it.
            let report = serde_json::to_value(&report).map_err(|e| e.to_string())?;
            w.out.insert("loadReport".into(), report.clone());
            check_pointers("load report", &report, op.get("expectReport").unwrap_or(&Value::Null))?;
            w.session = s;
            w.loaded_from_file = true;
            w.last_request = None;
            w.new_agent()?;
            check_error(w, op, Ok(()))
        }
        Err(e) => {
            // The session stays the one before; a new instance drives it.
            let r = check_error(w, op, Err(e));
            w.new_agent()?;
            r
        }
    }
}

fn expect_log(w: &World, op: &Value) -> Res<()> {
    let events = w.events();
    if let Some(Value::Array(want)) = op.get("headers") {
        let got: Vec<&Value> = events.iter().filter(|e| e["type"] == "request/header").collect();
        if got.len() != want.len() {
            return Err(format!(
                "expected {} header snapshots, got {}: {:?}",
                want.len(),
                got.len(),
                got.iter().map(|e| &e["data"]["reason"]).collect::<Vec<_>>()
            ));
        }
        for (g, wnt) in got.iter().zip(want) {
            check_pointers("header", &g["data"], wnt)?;
        }
    }
    if let Some(Value::Object(counts)) = op.get("count") {
        for (ty, n) in counts {
            let got = events.iter().filter(|e| e["type"] == ty.as_str()).count() as u64;
            if Some(got) != n.as_u64() {
                return Err(format!("expected {n} {ty} events, got {got}"));
            }
        }
    }
    if let Some(Value::Array(want)) = op.get("last") {
        // The last N events, in order, each matched by pointers (with "type").
        if events.len() < want.len() {
            return Err("fewer events than expected".into());
        }
        let tail = &events[events.len() - want.len()..];
        for (g, wnt) in tail.iter().zip(want) {
            check_pointers("event", g, wnt)?;
        }
    }
    if let Some(n) = op.get("compositions").and_then(Value::as_u64) {
        let got = w.listeners.first().map(|l| l.calls.load(Ordering::SeqCst) as u64).unwrap_or(0);
        if got != n {
            return Err(format!("expected {n} compositions (calls of the first listener), got {got}"));
        }
    }
    if let Some(Value::Array(texts)) = op.get("historyExcludes") {
        let h = w.session.history_json();
        for t in texts {
            if h.contains(t.as_str().unwrap()) {
                return Err(format!("history contains {t}"));
            }
        }
    }
    if let Some(Value::Array(texts)) = op.get("historyIncludes") {
        let h = w.session.history_json();
        for t in texts {
            if !h.contains(t.as_str().unwrap()) {
                return Err(format!("history does not contain {t}: {h}"));
            }
        }
    }
    if let Some(ptrs) = op.get("historyPointers") {
        let h: Value = serde_json::from_str(&w.session.history_json()).map_err(|e| e.to_string())?;
        check_pointers("history", &h, ptrs)?;
    }
    if let Some(n) = op.get("historyLength").and_then(Value::as_u64) {
        let got = w.session.history().len() as u64;
        if got != n {
            return Err(format!("expected {n} history messages, got {got}"));
        }
    }
    Ok(())
}

fn expect_summary(w: &World, op: &Value) -> Res<()> {
    let seen = w.summaries.lock().clone();
    if let Some(n) = op.get("count").and_then(Value::as_u64) {
        if seen.len() as u64 != n {
            return Err(format!("expected {n} summarisation requests so far, got {}", seen.len()));
        }
        if op.as_object().is_some_and(|m| m.keys().all(|k| k == "op" || k == "count")) {
            return Ok(());
        }
    }
    let i = match op.get("index").and_then(Value::as_i64).unwrap_or(0) {
        i if i < 0 => seen.len() as i64 + i,
        i => i,
    };
    let req = usize::try_from(i)
        .ok()
        .and_then(|i| seen.get(i))
        .ok_or_else(|| format!("summarisation request {i} was not sent ({} sent)", seen.len()))?;
    let i = i as usize;
    let v: Value = serde_json::from_str(&req.json).unwrap();
    check_pointers("summary request", &v, op.get("pointers").unwrap_or(&Value::Null))?;
    for (key, want) in [("includes", true), ("excludes", false)] {
        if let Some(Value::Array(texts)) = op.get(key) {
            for t in texts {
                let t = t.as_str().unwrap();
                if req.json.contains(t) != want {
                    return Err(format!("summary request {i} {} {t:?}", if want { "does not contain" } else { "contains" }));
                }
            }
        }
    }
    let replays = op.get("replaysLastRequest").and_then(Value::as_bool) == Some(true);
    let extends = op.get("extendsLastRequest").and_then(Value::as_bool) == Some(true);
    if replays || extends {
        // The last request routed before this summarisation request was sent.
        let last = w
            .request_marks
            .iter()
            .rposition(|&mark| mark <= i)
            .map(|k| &w.requests[k])
            .ok_or("no routed request precedes this summarisation request")?;
        check_summary_envelope(&v, last)?;
        let (m, l) = (messages_of(&v), messages_of(last));
        let body = &m[..m.len() - 1];
        // replaysLastRequest: the body is the first messages of the last routed request.
        // extendsLastRequest: the last routed request's messages are the first messages of the body.
        let (short, long, shared) = if replays { (body, &l[..], body.len()) } else { (&l[..], body, l.len()) };
        if short.len() > long.len() || short[..] != long[..short.len()] {
            return Err(format!(
                "the summary request without its last message ({} messages) and the last routed request ({} messages) do not share the {} leading messages\n  summary: {}\n  routed:  {}",
                body.len(),
                l.len(),
                if replays { "summary's" } else { "routed request's" },
                Value::Array(body.to_vec()),
                Value::Array(l.clone())
            ));
        }
        // Byte for byte, too.
        let sb: Vec<String> = short.iter().map(|x| x.to_string()).collect();
        let lb: Vec<String> = long[..short.len()].iter().map(|x| x.to_string()).collect();
        if sb != lb {
            return Err("the replayed messages differ in bytes".into());
        }
        if req.shared_messages != shared {
            return Err(format!("sharedMessages is {}, expected {shared}", req.shared_messages));
        }
        let lastm = m.last().unwrap();
        if lastm["role"] != "user" || !lastm.to_string().contains("compaction engine") {
            return Err(format!("the last message is not the instruction: {lastm}"));
        }
    }
    Ok(())
}

/// Every envelope field of a summarisation request but its messages, compared with the routed
/// request it replays: the routed call config with `maxTokens` replaced by the summary budget and
/// the model by the target's; a target of another provider keeps only the vocabulary's fields
/// (no pass-through field). System, tools and the session id are the routed request's.
fn check_summary_envelope(summary: &Value, routed: &Value) -> Res<()> {
    let (s, r) = (summary.as_object().unwrap(), routed.as_object().unwrap());
    let mut want = r.clone();
    for k in ["messages", "turn", "step"] {
        want.remove(k);
    }
    let budget = s.get("maxTokens").filter(|v| v.is_u64()).ok_or("summary request: maxTokens (the summary budget) is missing")?;
    want.insert("maxTokens".into(), budget.clone());
    want.insert("purpose".into(), "compaction".into());
    let target_provider = s.get("provider").cloned().unwrap_or(Value::Null);
    if target_provider != r["provider"] {
        let kept = ["provider", "model", "reasoningEffort", "temperature", "maxTokens", "stop", "system", "tools", "sessionId", "purpose"];
        want.retain(|k, _| kept.contains(&k.as_str()));
        want.insert("provider".into(), target_provider);
    }
    want.insert("model".into(), s.get("model").cloned().unwrap_or(Value::Null));
    let mut keys: Vec<&String> = want.keys().chain(s.keys()).filter(|k| k.as_str() != "messages").collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if want.get(k) != s.get(k) {
            return Err(format!(
                "summary request field {k} is {} but the routed request gives {}",
                s.get(k).map_or("absent".into(), Value::to_string),
                want.get(k).map_or("absent".into(), Value::to_string)
            ));
        }
    }
    Ok(())
}

fn verify_and_damage(w: &World, name: &str) -> Res<()> {
    let records: Vec<Vec<u8>> = w.session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect();
    let (header, events) = parse_records(&records).map_err(|e| err_str(&e))?;
    let report = verify_events(&header, &events).map_err(|e| format!("{name}: verify failed on the final log: {}", err_str(&e)))?;
    if report.requests == 0 {
        return Ok(());
    }
    // Damage 1: remove the prefix from the first header that has one.
    if let Some(i) = events.iter().position(|e| e.ty == "request/header" && e.data["header"].get("messagePrefix").is_some()) {
        let mut bad = events.clone();
        bad[i].data["header"].as_object_mut().unwrap().remove("messagePrefix");
        match verify_events(&header, &bad) {
            Ok(_) => return Err(format!("{name}: verify passed on a copy whose prefix was removed from the header")),
            Err(e) => {
                if e.detail().get("step").is_none() {
                    return Err(format!("{name}: verify failure does not name the step: {}", err_str(&e)));
                }
            }
        }
    }
    // Damage 2: drop a model-visible event that precedes a request.
    let last_step = events.iter().rposition(|e| e.ty == "step/start").unwrap();
    if let Some(i) = events[..last_step].iter().position(|e| e.ty == "user/message") {
        let mut bad = events.clone();
        bad.remove(i);
        match verify_events(&header, &bad) {
            Ok(_) => return Err(format!("{name}: verify passed on a copy with event {i} dropped")),
            Err(e) => {
                if e.detail().get("step").is_none() {
                    return Err(format!("{name}: verify failure does not name the step: {}", err_str(&e)));
                }
            }
        }
    }
    Ok(())
}

/// Runs one scenario file with every check, and returns its golden transcript
/// (docs/scenarios.md, "Golden transcripts").
fn run_file(path: &Path, stores: &Stores) -> Res<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut sc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut repeats = golden::Repeats::new();
    expand(&mut sc, &mut repeats);
    let name = sc["name"].as_str().unwrap_or("(unnamed)").to_string();
    let mut w = World::new(&sc, stores)?;
    let mut ops = Vec::new();
    for (i, op) in sc["ops"].as_array().ok_or("scenario without ops")?.iter().enumerate() {
        w.out = serde_json::Map::new();
        run_op(&mut w, op).map_err(|e| format!("op {i} ({}): {e}", op["op"]))?;
        let mut entry = std::mem::take(&mut w.out);
        entry.insert("i".into(), i.into());
        entry.insert("op".into(), op["op"].clone());
        entry.entry("outcome").or_insert_with(|| "ok".into());
        entry.insert("events".into(), w.session.len().into());
        w.journal.lock().drain_into(&mut entry);
        ops.push(Value::Object(entry));
    }
    let mut transcript = json!({
        "transcript": golden::FORMAT,
        "scenario": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "name": name,
        "ops": ops,
        "final": golden::final_state(&w.session.records().unwrap(), &w.session.history_json()),
    });
    golden::mask_strings(&mut transcript, &w.dir.path().to_string_lossy());
    golden::fold_repeats(&mut transcript, &repeats);
    verify_and_damage(&w, &name)?;
    if let Some(a) = w.agent.take() {
        a.dispose().map_err(|e| err_str(&e))?;
    }
    if !w.loaded_from_file {
        stores.check_stored(&w.session)?;
    }
    Ok(transcript)
}

fn scenario_files() -> Vec<PathBuf> {
    if let Ok(f) = std::env::var("LLMSESSION_SCENARIO_FILE") {
        return vec![PathBuf::from(f)];
    }
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")];
    if let Ok(extra) = std::env::var("LLMSESSION_SCENARIOS") {
        dirs.push(PathBuf::from(extra));
    }
    let mut files = Vec::new();
    for d in dirs {
        let mut in_dir: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    files
}

#[test]
fn scenarios() {
    run_all("memory", |_| Stores::Memory);
}

/// Every scenario file with its sessions in PostgreSQL, each file in a schema of its own.
#[cfg(feature = "postgres")]
#[test]
fn scenarios_on_postgres() {
    let Some(url) = pg_support::url("scenarios_on_postgres") else { return };
    if golden::blessing() {
        // The golden files are written from the in-memory run only; this variant compares.
        eprintln!("scenarios_on_postgres: skipped while LLMSESSION_SCENARIO_BLESS is set (it only compares)");
        return;
    }
    let mut c = pg_support::sql(&url);
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut schemas = Vec::new();
    run_all("postgres", |i| {
        let schema = format!("llmsession_scenario_{}_{i}", std::process::id());
        c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).unwrap();
        schemas.push(schema.clone());
        Stores::Postgres(format!("{url}{sep}options=-csearch_path%3D{schema}"))
    });
    for schema in schemas {
        c.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
    }
}

/// Runs every scenario file with the stores `stores` gives (by file index) and settles each
/// transcript against its golden file: the one comparison path of every variant (`variant` only
/// names where this run's transcripts are written).
fn run_all(variant: &str, mut stores: impl FnMut(usize) -> Stores) {
    let files = scenario_files();
    assert!(!files.is_empty(), "no scenario files found");
    let mut failures = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match run_file(f, &stores(i)).and_then(|t| golden::settle(f, &t, variant)) {
            Ok(()) => println!("ok    {}", f.display()),
            Err(e) => {
                println!("FAIL  {}\n      {e}", f.display());
                failures.push(format!("{}: {e}", f.display()));
            }
        }
    }
    println!("{} passed, {} failed", files.len() - failures.len(), failures.len());
    // A golden file whose scenario file is gone (only known when every file ran).
    if std::env::var_os("LLMSESSION_SCENARIO_FILE").is_none() {
        for stale in golden::stale(&files) {
            if golden::blessing() {
                std::fs::remove_file(&stale).unwrap_or_else(|e| panic!("{}: {e}", stale.display()));
                println!("removed  {} (no scenario file)", stale.display());
            } else {
                println!("FAIL  {}\n      a golden transcript without a scenario file", stale.display());
                failures.push(format!(
                    "{}: a golden transcript without a scenario file (remove it, or run scripts/scenario-golden.sh)",
                    stale.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}
