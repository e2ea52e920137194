//! The observer hook: what the library did on its own, reported to the host (docs/observe.md).
//!
//! Some things happen without the host asking: loading cuts a torn tail and repairs a turn left
//! open, a store refuses a second writer, the pressure gate compacts (or cannot), an undo takes
//! back a half-written batch. Each is reported as an [`Observation`] to the one process-wide
//! [`Observer`] the host set with [`set_observer`], when its [`Level`] is at least the minimum
//! given there. With no observer set the library is silent, and an emit site costs one atomic
//! load: nothing is built.
//!
//! An observation is delivered synchronously, on the thread where it happened, during the
//! library call that caused it, but never while a session lock is held: one raised under the
//! lock (inside an append) is queued on its thread and delivered when that thread releases the
//! lock. A panicking observer is contained (the panic is caught and the observation dropped).

use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// How much an observation matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Detail for debugging the library's decisions.
    Debug = 0,
    /// Something the library did on its own, as designed (a compaction started, a retry).
    Info = 1,
    /// Something went wrong but was handled (a torn tail cut, a summary rejected, a request sent
    /// over the threshold).
    Warn = 2,
    /// Something failed and was not made good (an automatic compaction failed, an undo).
    Error = 3,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 4] = [Level::Debug, Level::Info, Level::Warn, Level::Error];

    /// The wire name: `"debug"`, `"info"`, `"warn"`, `"error"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// The level numbered `n` (0 debug … 3 error), as the C ABI numbers them.
    pub fn from_number(n: i64) -> Option<Level> {
        Level::ALL.get(usize::try_from(n).ok()?).copied()
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing the library reports: a stable kebab-case `kind` (docs/observe.md lists them), a
/// level, one human sentence, the session it concerns when known, and fields of its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// What happened (`"log-cut"`, `"compaction-failed"`, ...).
    pub kind: &'static str,
    /// How much it matters.
    pub level: Level,
    /// One sentence for a human.
    pub message: String,
    /// The session it concerns, when known.
    pub session_id: Option<String>,
    /// Kind-specific fields (camelCase keys; never `kind`, `level`, `message` or `sessionId`).
    pub fields: Map<String, Value>,
}

/// The keys an observation's JSON gives to its common parts.
const RESERVED: [&str; 4] = ["kind", "level", "message", "sessionId"];

impl Observation {
    /// A new observation with no session and no fields.
    pub fn new(kind: &'static str, level: Level, message: impl Into<String>) -> Observation {
        Observation { kind, level, message: message.into(), session_id: None, fields: Map::new() }
    }

    /// Names the session it concerns (builder style).
    pub fn session(mut self, id: impl Into<String>) -> Observation {
        self.session_id = Some(id.into());
        self
    }

    /// Adds a field (builder style). A reserved key is a bug at the emit site.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Observation {
        debug_assert!(!RESERVED.contains(&key), "observation field {key:?} is reserved");
        self.fields.insert(key.to_string(), value.into());
        self
    }

    /// A field, when set.
    pub fn field(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// The observation as one JSON object: `{"kind","level","message","sessionId"?, ...fields}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), self.kind.into());
        m.insert("level".into(), self.level.as_str().into());
        m.insert("message".into(), self.message.clone().into());
        if let Some(id) = &self.session_id {
            m.insert("sessionId".into(), id.clone().into());
        }
        for (k, v) in &self.fields {
            if !RESERVED.contains(&k.as_str()) {
                m.insert(k.clone(), v.clone());
            }
        }
        Value::Object(m)
    }

    /// [`to_value`](Self::to_value) as JSON text, in a fixed order: `kind`, `level`, `message`,
    /// `sessionId` when known, then the fields in key order. (So a host without a JSON parser
    /// finds the kind and the level at the start.)
    pub fn to_json(&self) -> String {
        let text = |s: &str| Value::from(s).to_string();
        let mut out = format!("{{\"kind\":{},\"level\":\"{}\",\"message\":{}", text(self.kind), self.level, text(&self.message));
        if let Some(id) = &self.session_id {
            out.push_str(",\"sessionId\":");
            out.push_str(&text(id));
        }
        for (k, v) in &self.fields {
            if !RESERVED.contains(&k.as_str()) {
                out.push(',');
                out.push_str(&text(k));
                out.push(':');
                out.push_str(&v.to_string());
            }
        }
        out.push('}');
        out
    }
}

impl serde::Serialize for Observation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// Receives observations. It runs on the thread where the event happened, inside a library
/// call: it must return quickly and must not call into the library.
pub trait Observer: Send + Sync {
    /// Called once per observation at or above the minimum level.
    fn observe(&self, o: &Observation);
}

impl<F> Observer for F
where
    F: Fn(&Observation) + Send + Sync,
{
    fn observe(&self, o: &Observation) {
        self(o)
    }
}

/// The minimum level, as a number; [`OFF`] when no observer is set.
static MIN_LEVEL: AtomicU8 = AtomicU8::new(OFF);
const OFF: u8 = u8::MAX;
static OBSERVER: parking_lot::RwLock<Option<Arc<dyn Observer>>> = parking_lot::RwLock::new(None);

/// Sets the process-wide observer (replacing the one before it, which is dropped once no
/// delivery to it is running), or clears it with `None`. Observations below `min_level` are
/// neither built nor delivered.
pub fn set_observer(observer: Option<Arc<dyn Observer>>, min_level: Level) {
    let previous = {
        let mut slot = OBSERVER.write();
        MIN_LEVEL.store(OFF, Ordering::SeqCst);
        let previous = std::mem::replace(&mut *slot, observer);
        if slot.is_some() {
            MIN_LEVEL.store(min_level as u8, Ordering::SeqCst);
        }
        previous
    };
    // Dropped outside the lock: its destructor may be the host's (freeing its userdata).
    drop(previous);
}

/// Whether an observation of `level` would be delivered now (one atomic load).
#[inline]
pub fn enabled(level: Level) -> bool {
    (level as u8) >= MIN_LEVEL.load(Ordering::Relaxed)
}

/// Reports an observation of `level`: `build` runs only when an observer wants that level.
#[inline]
pub fn emit(level: Level, build: impl FnOnce() -> Observation) {
    if enabled(level) {
        let o = build();
        debug_assert_eq!(o.level, level, "an observation's level is the level it is emitted at");
        deliver(o);
    }
}

thread_local! {
    /// How many session locks this thread holds: observations raised under one wait.
    static HELD: Cell<u32> = const { Cell::new(0) };
    /// Observations raised under a lock, in order, delivered when the last lock is released.
    static QUEUED: RefCell<Vec<Observation>> = const { RefCell::new(Vec::new()) };
}

fn deliver(o: Observation) {
    if HELD.with(Cell::get) > 0 {
        QUEUED.with(|q| q.borrow_mut().push(o));
        return;
    }
    deliver_now(&o);
}

fn deliver_now(o: &Observation) {
    if !enabled(o.level) {
        return;
    }
    let Some(observer) = OBSERVER.read().clone() else { return };
    // A panicking observer must not unwind through the library (it may be half-way through an
    // operation): the panic is caught and the observation dropped.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| observer.observe(o)));
}

/// Held alongside a session lock (drop it after the lock): observations raised while it lives
/// are delivered when the thread's last one is dropped, with no lock held.
pub(crate) struct Deferring(());

impl Deferring {
    pub(crate) fn new() -> Deferring {
        HELD.with(|h| h.set(h.get() + 1));
        Deferring(())
    }
}

impl Drop for Deferring {
    fn drop(&mut self) {
        let depth = HELD.with(|h| {
            let d = h.get().saturating_sub(1);
            h.set(d);
            d
        });
        if depth > 0 {
            return;
        }
        let queued = QUEUED.with(|q| {
            let mut q = q.borrow_mut();
            if q.is_empty() {
                Vec::new()
            } else {
                std::mem::take(&mut *q)
            }
        });
        if std::thread::panicking() {
            // Unwinding from a library bug: do not run host code now.
            return;
        }
        for o in &queued {
            deliver_now(o);
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A collecting observer for tests. The observer is process-wide and the tests of one binary
    //! run in parallel threads, so a test that sets one holds a serial lock while it does (every
    //! [`collect`] takes it; [`Collector::clear`] keeps it while the test checks that nothing is
    //! delivered), and reads only the observations of its own session ids: other tests' threads
    //! keep emitting to whatever observer is set.
    use super::*;
    use parking_lot::{Mutex, MutexGuard};

    static SERIAL: Mutex<()> = Mutex::new(());

    /// Collects every observation it receives; restores the silent default when dropped.
    pub(crate) struct Collector {
        pub seen: Arc<Mutex<Vec<Observation>>>,
        serial: Option<MutexGuard<'static, ()>>,
    }

    /// Sets a collecting observer at `min` for the life of the returned value.
    pub(crate) fn collect(min: Level) -> Collector {
        let serial = SERIAL.lock();
        let seen: Arc<Mutex<Vec<Observation>>> = Arc::default();
        let sink = seen.clone();
        set_observer(Some(Arc::new(move |o: &Observation| sink.lock().push(o.clone()))), min);
        Collector { seen, serial: Some(serial) }
    }

    impl Collector {
        /// The observations about session `id`, in order.
        pub(crate) fn of(&self, id: &str) -> Vec<Observation> {
            self.seen.lock().iter().filter(|o| o.session_id.as_deref() == Some(id)).cloned().collect()
        }

        /// The kinds of the observations about session `id`, in order.
        pub(crate) fn kinds_of(&self, id: &str) -> Vec<&'static str> {
            self.of(id).iter().map(|o| o.kind).collect()
        }

        /// Clears the observer and hands back the serial lock: while the caller holds it, no
        /// observer is set (no other test can set one), so a test can check that nothing is
        /// built or delivered.
        pub(crate) fn clear(mut self) -> MutexGuard<'static, ()> {
            set_observer(None, Level::Debug);
            self.serial.take().expect("a collector holds the serial lock")
        }
    }

    impl Drop for Collector {
        fn drop(&mut self) {
            set_observer(None, Level::Debug);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::collect;
    use super::*;

    fn note(level: Level, id: &str) -> Observation {
        Observation::new("test-note", level, "a test note").session(id).with("n", 1)
    }

    #[test]
    fn levels_are_ordered_lowercase_and_numbered() {
        assert!(Level::Debug < Level::Info && Level::Info < Level::Warn && Level::Warn < Level::Error);
        assert_eq!(serde_json::to_value(Level::Warn).unwrap(), "warn");
        assert_eq!(Level::from_number(3), Some(Level::Error));
        assert_eq!(Level::from_number(4), None);
        assert_eq!(Level::from_number(-1), None);
    }

    #[test]
    fn json_puts_the_common_parts_first_and_the_fields_beside_them() {
        let o = Observation::new("log-cut", Level::Warn, "cut").session("s1").with("records", 2);
        let v = o.to_value();
        assert_eq!(v, serde_json::json!({"kind":"log-cut","level":"warn","message":"cut","sessionId":"s1","records":2}));
        let no_session = Observation::new("x", Level::Info, "m").to_value();
        assert!(no_session.get("sessionId").is_none());
        // The text keeps a fixed order and is the same object.
        let o = o.with("a", "first \"quoted\"");
        let text = o.to_json();
        assert!(text.starts_with(r#"{"kind":"log-cut","level":"warn","message":"cut","sessionId":"s1","a":"#), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), o.to_value());
    }

    #[test]
    fn silent_when_unset_and_the_level_filters() {
        let c = collect(Level::Warn);
        emit(Level::Info, || note(Level::Info, "filter-1"));
        emit(Level::Warn, || note(Level::Warn, "filter-1"));
        emit(Level::Error, || note(Level::Error, "filter-1"));
        let levels: Vec<Level> = c.of("filter-1").iter().map(|o| o.level).collect();
        assert_eq!(levels, vec![Level::Warn, Level::Error]);
        let seen = c.seen.clone();
        // Cleared, and kept clear while this test looks (it holds the serial lock): nothing is
        // built, nothing delivered.
        let _clear = c.clear();
        assert!(!enabled(Level::Error));
        let mut built = false;
        emit(Level::Error, || {
            built = true;
            note(Level::Error, "filter-1")
        });
        assert!(!built);
        assert_eq!(seen.lock().iter().filter(|o| o.session_id.as_deref() == Some("filter-1")).count(), 2);
    }

    #[test]
    fn observations_raised_under_a_lock_wait_for_its_release() {
        let c = collect(Level::Debug);
        {
            let _held = Deferring::new();
            emit(Level::Info, || note(Level::Info, "defer-1"));
            {
                let _inner = Deferring::new();
                emit(Level::Warn, || note(Level::Warn, "defer-1"));
            }
            assert!(c.of("defer-1").is_empty(), "delivered while a lock is held");
        }
        let levels: Vec<Level> = c.of("defer-1").iter().map(|o| o.level).collect();
        assert_eq!(levels, vec![Level::Info, Level::Warn]);
    }

    #[test]
    fn a_panicking_observer_is_contained_and_a_replaced_one_is_dropped() {
        let c = collect(Level::Debug);
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Panics(Arc<std::sync::atomic::AtomicBool>);
        impl Observer for Panics {
            fn observe(&self, o: &Observation) {
                // Other tests' threads deliver to it too: it panics on this test's note only, so
                // they hold it for no longer than a call (a panic with RUST_BACKTRACE set takes
                // a backtrace, which can take a second on a loaded machine).
                if o.session_id.as_deref() == Some("panic-1") {
                    panic!("observer bug");
                }
            }
        }
        impl Drop for Panics {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        set_observer(Some(Arc::new(Panics(dropped.clone()))), Level::Debug);
        emit(Level::Error, || note(Level::Error, "panic-1"));
        assert!(!dropped.load(Ordering::SeqCst));
        set_observer(None, Level::Debug);
        // Dropped once no delivery to it runs (another test's thread may be in one right now):
        // waited for, with a bound far beyond any scheduling delay (the check is that it is
        // dropped at all, not how soon).
        let start = std::time::Instant::now();
        while !dropped.load(Ordering::SeqCst) && start.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(dropped.load(Ordering::SeqCst), "the replaced observer is dropped");
        drop(c);
    }
}

#[cfg(test)]
mod sites {
    //! Each emit site, driven through the public API as a host would.
    use super::testing::collect;
    use super::*;
    use crate::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
    use crate::error::{Error, ErrorKind, Result};
    use crate::log::NewEvent;
    use crate::store::host::HostStore;
    use crate::store::MemoryStore;
    use crate::{Agent, AgentOptions, CallConfig, CancelToken, Message, Role, Session, SessionOptions};
    use parking_lot::Mutex;
    use serde_json::json;
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    fn opts(id: &str) -> SessionOptions {
        SessionOptions { id: Some(id.into()), ..SessionOptions::default() }
    }

    fn note() -> NewEvent {
        NewEvent::new("host/note", json!({"n": 1}))
    }

    #[test]
    fn a_torn_tail_is_reported_as_log_cut_and_an_open_turn_as_turn_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.jsonl");
        {
            let (s, _) = Session::open_jsonl(&path, opts("obs-cut")).unwrap();
            s.append(note()).unwrap();
            s.append(NewEvent::new(crate::log::event::types::TURN_START, json!({"turn": 1}))).unwrap();
        }
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"type\":\"host/no").unwrap();
        let c = collect(Level::Debug);
        let (_s, report) = Session::open_jsonl(&path, opts("obs-cut")).unwrap();
        assert_eq!(c.kinds_of("obs-cut"), vec!["log-cut", "turn-repaired"]);
        let seen = c.of("obs-cut");
        let cut = &seen[0];
        assert_eq!(cut.level, Level::Warn);
        assert_eq!(cut.field("records"), Some(&json!(1)));
        assert_eq!(cut.field("line"), Some(&json!(4)));
        assert_eq!(cut.field("damaged"), Some(&json!(false)));
        let saved = cut.field("savedTo").and_then(Value::as_str).unwrap();
        assert_eq!(Some(saved), report.cut_saved_to.as_deref());
        assert_eq!(std::fs::read(saved).unwrap(), b"{\"type\":\"host/no");
        assert!(cut.message.contains("cut 1 record(s)"), "{}", cut.message);
        let repaired = &seen[1];
        assert_eq!(repaired.level, Level::Warn);
        assert_eq!(repaired.field("turn"), Some(&json!(1)));
        assert_eq!(repaired.field("events"), Some(&json!(report.repaired_events)));
        // Opening again finds nothing to cut or repair, and says nothing.
        drop(_s);
        let before = c.of("obs-cut").len();
        Session::open_jsonl(&path, opts("obs-cut")).unwrap();
        assert_eq!(c.of("obs-cut").len(), before);
    }

    #[test]
    fn the_minimum_level_filters_at_the_site() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quiet.jsonl");
        drop(Session::open_jsonl(&path, opts("obs-quiet")).unwrap());
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{").unwrap();
        let c = collect(Level::Error);
        let (_s, report) = Session::open_jsonl(&path, opts("obs-quiet")).unwrap();
        assert_eq!(report.cut_records, 1);
        assert!(c.of("obs-quiet").is_empty(), "a warn observation passed an error minimum");
    }

    #[test]
    fn a_second_writer_is_reported_as_store_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locked.jsonl");
        let (_a, _) = Session::open_jsonl(&path, opts("obs-locked")).unwrap();
        let c = collect(Level::Debug);
        let e = Session::open_jsonl(&path, opts("obs-locked")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Locked);
        let shown = path.display().to_string();
        let seen: Vec<Observation> = c.seen.lock().iter().filter(|o| o.field("store") == Some(&json!(shown))).cloned().collect();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].kind, "store-locked");
        assert_eq!(seen[0].level, Level::Warn);
        assert!(seen[0].field("holder").and_then(Value::as_str).is_some_and(|h| h.contains("this process")));
    }

    #[test]
    fn a_file_that_grew_behind_the_handle_is_reported_as_store_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conflict.jsonl");
        let (s, _) = Session::open_jsonl(&path, opts("obs-conflict")).unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"stray\":1}\n").unwrap();
        let c = collect(Level::Debug);
        assert_eq!(s.append(note()).unwrap_err().kind(), ErrorKind::Conflict);
        let seen = c.of("obs-conflict");
        assert_eq!(c.kinds_of("obs-conflict"), vec!["store-conflict"]);
        assert_eq!(seen[0].field("seq"), Some(&json!(0)));
    }

    #[test]
    fn an_undo_after_a_failed_sync_is_reported_as_store_undo() {
        let records: Arc<Mutex<Vec<String>>> = Arc::default();
        let fail_sync = Arc::new(AtomicBool::new(false));
        let (r, f) = (records.clone(), fail_sync.clone());
        let store = HostStore::new(move |op: &str, req: &Value| -> Result<Value> {
            let mut r = r.lock();
            match op {
                "load" => Ok(json!({"records": *r})),
                "append" => {
                    if let Some(h) = req["header"].as_str() {
                        r.push(h.to_string());
                    }
                    r.extend(req["records"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()));
                    Ok(json!(true))
                }
                "sync" if f.load(Ordering::SeqCst) => Err(Error::new(ErrorKind::Storage, "the disk is full")),
                "undo" => {
                    r.truncate(req["from"].as_u64().unwrap() as usize);
                    Ok(json!(true))
                }
                _ => Ok(json!(true)),
            }
        });
        let s = Session::create(
            Box::new(store),
            SessionOptions { id: Some("obs-undo".into()), durability: crate::store::Durability::EveryEvent, ..SessionOptions::default() },
        )
        .unwrap();
        fail_sync.store(true, Ordering::SeqCst);
        let c = collect(Level::Debug);
        assert_eq!(s.append(note()).unwrap_err().kind(), ErrorKind::Storage);
        let seen = c.of("obs-undo");
        assert_eq!(c.kinds_of("obs-undo"), vec!["store-undo"]);
        assert_eq!(seen[0].level, Level::Error);
        assert_eq!(seen[0].field("failed"), Some(&json!("sync")));
        assert_eq!(seen[0].field("undone"), Some(&json!(true)));
        assert_eq!(records.lock().len(), 1, "the batch was taken back out");
    }

    /// An agent whose gate is over the threshold from the first request (a 450-token threshold
    /// against a long opening message), with `summarise` as its summariser.
    fn pressured(
        id: &str,
        summarise: impl Fn(&SummaryRequest, &CancelToken) -> Result<SummaryOutput> + Send + Sync + 'static,
    ) -> (Session, Agent) {
        let s = Session::create(Box::new(MemoryStore::new()), opts(id)).unwrap();
        let mut a = Agent::new(&s, AgentOptions::new(CallConfig::new("openai", "m"))).unwrap();
        let mut policy = CompactionPolicy::new(9000);
        policy.threshold = 0.05;
        policy.summary_max_tokens = 1024;
        policy.retained = Retained::Tokens(40);
        a.set_policy(Some(policy)).unwrap();
        a.set_summariser(Some(Arc::new(summarise)));
        (s, a)
    }

    fn one_turn(a: &mut Agent, words: usize) {
        let c = CancelToken::new();
        a.start_turn(Message::user_text("word ".repeat(words))).unwrap();
        a.next_request(&c).unwrap();
        a.record_response(Message::new(Role::Assistant, vec![crate::Block::text("ok ".repeat(words))]), None).unwrap();
        a.end_turn(crate::log::TurnEndReason::Completed).unwrap();
    }

    #[test]
    fn a_gate_that_cannot_compact_reports_why_and_sends_the_request_over_the_threshold() {
        let calls = Arc::new(AtomicUsize::new(0));
        let n = calls.clone();
        let (_s, mut a) = pressured("obs-gate", move |_r, _c| {
            // First a summary the library rejects, then a failure.
            if n.fetch_add(1, Ordering::SeqCst) == 0 {
                Ok(SummaryOutput { text: "   ".into(), ..Default::default() })
            } else {
                Err(Error::new(ErrorKind::Listener, "the provider is down"))
            }
        });
        let c = collect(Level::Debug);
        // Turn 1: one message on the surface, so nothing is compactable.
        one_turn(&mut a, 2000);
        assert_eq!(c.kinds_of("obs-gate"), vec!["compaction-skipped", "over-threshold"]);
        // Turn 2: the head is compactable, the summariser fails twice (retries 1).
        one_turn(&mut a, 50);
        let kinds = c.kinds_of("obs-gate");
        assert_eq!(
            kinds[2..],
            ["compaction-triggered", "summary-rejected", "summariser-failed", "compaction-failed", "over-threshold"],
            "{kinds:?}"
        );
        let seen = c.of("obs-gate");
        let triggered = &seen[2];
        assert_eq!(triggered.level, Level::Info);
        assert_eq!(triggered.field("threshold"), Some(&json!(450)));
        assert_eq!(triggered.field("contextWindow"), Some(&json!(9000)));
        assert!(triggered.field("tokens").and_then(Value::as_u64).unwrap() > 450);
        assert_eq!(seen[3].field("retry"), Some(&json!(true)));
        assert_eq!(seen[4].field("retry"), Some(&json!(false)));
        let failed = &seen[5];
        assert_eq!(failed.level, Level::Error);
        assert_eq!(failed.field("attempts"), Some(&json!(2)));
        assert_eq!(failed.field("trigger"), Some(&json!("auto")));
        assert!(failed.field("error").and_then(Value::as_str).unwrap().contains("the provider is down"));
        let over = &seen[6];
        assert_eq!(over.level, Level::Warn);
        assert_eq!(over.field("turn"), Some(&json!(2)));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Each observation is one JSON object with the common parts.
        let v = over.to_value();
        assert_eq!(v["kind"], "over-threshold");
        assert_eq!(v["sessionId"], "obs-gate");
    }

    #[test]
    fn a_gate_that_cannot_measure_reports_compaction_skipped_and_builds_the_request() {
        struct Broken;
        impl crate::tokens::TokenCounter for Broken {
            fn count(&self, _: crate::tokens::Countable<'_>) -> Result<u64> {
                Err(Error::new(ErrorKind::Listener, "the counting service is down"))
            }
            fn name(&self) -> &'static str {
                "host"
            }
        }
        let (_s, mut a) = pressured("obs-unmeasured", |_r, _c| Ok(SummaryOutput::default()));
        a.set_token_counter(Some(Arc::new(Broken)));
        let c = collect(Level::Warn);
        a.start_turn(Message::user_text("hello")).unwrap();
        a.next_request(&CancelToken::new()).unwrap();
        assert_eq!(c.kinds_of("obs-unmeasured"), vec!["compaction-skipped"]);
        let o = &c.of("obs-unmeasured")[0];
        assert!(o.field("error").and_then(Value::as_str).unwrap().contains("the counting service is down"));
        assert!(o.field("tokens").is_none());
    }

    #[test]
    fn an_overflow_recovery_that_lands_is_reported_as_overflow_retry() {
        let (_s, mut a) = pressured("obs-overflow", |_r, _c| Ok(SummaryOutput { text: "short".into(), ..Default::default() }));
        let cancel = CancelToken::new();
        a.start_turn(Message::user_text("hello ".repeat(80))).unwrap();
        a.next_request(&cancel).unwrap();
        a.record_response(Message::new(Role::Assistant, vec![crate::Block::text("ok")]), None).unwrap();
        a.end_turn(crate::log::TurnEndReason::Completed).unwrap();
        a.start_turn(Message::user_text("again ".repeat(80))).unwrap();
        a.next_request(&cancel).unwrap();
        let c = collect(Level::Info);
        let out = a.report_provider_error("context too long", true, &cancel).unwrap();
        assert_eq!(out, crate::agent::ProviderErrorOutcome::Retry);
        assert_eq!(c.kinds_of("obs-overflow"), vec!["overflow-retry"]);
        assert_eq!(c.of("obs-overflow")[0].field("attempt"), Some(&json!(1)));
    }

    #[test]
    fn disposing_an_agent_with_an_open_turn_is_reported_as_turn_disposed() {
        let s = Session::create(Box::new(MemoryStore::new()), opts("obs-dispose")).unwrap();
        let mut a = Agent::new(&s, AgentOptions::new(CallConfig::new("openai", "m"))).unwrap();
        a.start_turn(Message::user_text("hi")).unwrap();
        let c = collect(Level::Debug);
        a.dispose().unwrap();
        assert_eq!(c.kinds_of("obs-dispose"), vec!["turn-disposed"]);
        assert_eq!(c.of("obs-dispose")[0].field("turn"), Some(&json!(1)));
    }
}
