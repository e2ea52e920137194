//! A session: a [`Log`] tied to a [`Store`], shared by handle.
//!
//! `Session` is a cheap, cloneable, thread-safe handle. Every append is validated, written to
//! the store (made durable per the [`Durability`] policy), and only then applied in memory: a
//! failed write or a rejected event changes nothing.

use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::event::{types, Event, NewEvent, UserSource};
use crate::log::load::{load_records_releasing, repair_events, LoadReport, SessionHeader};
use crate::log::{Derived, Durability, JsonlStore, Log, MemoryStore, Store};
use crate::types::JsonMap;
use parking_lot::{Mutex, MutexGuard};
use std::path::Path;
use std::sync::Arc;

/// Options for opening or creating a session.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// When to make appended events durable.
    pub durability: Durability,
    /// The id of a new session (a random id when absent).
    pub id: Option<String>,
}

pub(crate) struct Inner {
    pub header: SessionHeader,
    pub log: Log,
    pub store: Box<dyn Store>,
    pub durability: Durability,
    /// The id of the live agent instance, if any (at most one).
    pub live_agent: Option<u64>,
    next_agent_token: u64,
    /// Set when a failed write could not be undone: the store is out of step with the log.
    broken: Option<String>,
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A random id (32 hex digits) from the standard library's randomly seeded hasher.
pub fn random_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    for i in 0..2u64 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(now_ms() ^ (i << 32));
        h.write_usize(&out as *const String as usize);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl Inner {
    /// Validates, stores and applies one event. Returns its seq.
    pub fn append(&mut self, ev: NewEvent) -> Result<u64> {
        self.check_store()?;
        let seq = self.log.next_seq();
        let event = ev.into_event(seq, now_ms());
        let effect = self.log.check(&event)?;
        let line: Arc<str> = event.to_json().into();
        if let Err(e) = self.store.append(&line) {
            // Cut whatever part of the record reached the store, or a later record would
            // follow a torn one.
            self.undo_tail(seq, &e);
            return Err(e);
        }
        let sync = match self.durability {
            Durability::EveryEvent => true,
            Durability::TurnEnd => matches!(event.ty.as_str(), types::TURN_END | types::COMPACTION_END),
            Durability::Never => false,
        };
        if sync {
            if let Err(e) = self.store.sync() {
                // The record was written but is not known durable; keep memory and store in step
                // by dropping it again, and report the failure.
                self.undo_tail(seq, &e);
                return Err(e);
            }
        }
        self.log.commit(&event, effect, line);
        Ok(seq)
    }

    /// Cuts the store back to the header and events before `seq` after a failed write. When
    /// that fails too, the store may hold a record this session does not: it is out of step,
    /// and every later write is refused (a new record would follow that one, or reuse its seq).
    fn undo_tail(&mut self, seq: u64, cause: &Error) {
        if let Err(u) = self.store.truncate(seq as usize + 1) {
            self.broken = Some(format!("{}; undoing it failed: {}", cause.message(), u.message()));
        }
    }

    /// Refuses writes once the store is out of step with the log (see `undo_tail`).
    fn check_store(&self) -> Result<()> {
        match &self.broken {
            None => Ok(()),
            Some(why) => Err(Error::new(
                ErrorKind::Storage,
                format!(
                    "{}: a failed write could not be undone ({why}); the store may hold an event this handle does not, so it refuses further writes: reopen the session",
                    self.store.describe()
                ),
            )),
        }
    }

    /// Makes everything appended so far durable.
    pub fn sync(&mut self) -> Result<()> {
        self.check_store()?;
        self.store.sync()
    }
}

/// Counters over a session's log.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStats {
    /// Events in the log.
    pub events: u64,
    /// Turns started.
    pub turns: u64,
    /// Conversation requests built.
    pub requests: u64,
    /// Compactions landed.
    pub compactions: u64,
    /// Messages on the surface (the derived history's length).
    pub surface: u64,
    /// Replace generation of the surface.
    pub generation: u64,
    /// Provider-reported input tokens read from cache, summed over the session.
    pub cached_tokens: u64,
    /// Provider-reported prompt tokens (uncached + cache reads + cache writes), summed.
    pub prompt_tokens: u64,
}

/// A session handle.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock();
        f.debug_struct("Session").field("id", &g.header.id).field("events", &g.log.len()).finish()
    }
}

impl Session {
    /// A new session kept in memory.
    pub fn in_memory() -> Session {
        Session::create(Box::new(MemoryStore::new()), SessionOptions::default()).expect("a memory store accepts writes")
    }

    /// Creates a new session in an empty store.
    pub fn create(mut store: Box<dyn Store>, opts: SessionOptions) -> Result<Session> {
        let contents = store.load()?;
        if !contents.records.is_empty() {
            return Err(Error::invalid("store", format!("{} already holds a session; open it instead", store.describe())));
        }
        let header = SessionHeader { id: new_id(opts.id)?, created_at: now_ms(), parent: None, lineage: Vec::new(), extra: JsonMap::new() };
        Session::start(store, header, Log::new(), opts.durability)
    }

    fn start(mut store: Box<dyn Store>, header: SessionHeader, log: Log, durability: Durability) -> Result<Session> {
        store.append(&header.to_value().to_string())?;
        for line in log.lines() {
            store.append(line)?;
        }
        store.sync()?;
        Ok(Session::wrap(Inner { header, log, store, durability, live_agent: None, next_agent_token: 1, broken: None }))
    }

    fn wrap(inner: Inner) -> Session {
        Session { inner: Arc::new(Mutex::new(inner)) }
    }

    /// Opens the session in `store`: loads it (validating every event, cutting a torn tail,
    /// closing a turn left open by a crash) or, when the store is empty, creates one.
    pub fn open(mut store: Box<dyn Store>, opts: SessionOptions) -> Result<(Session, LoadReport)> {
        let mut contents = store.load()?;
        if contents.records.is_empty() {
            return Ok((Session::create(store, opts)?, LoadReport::default()));
        }
        let loaded = load_records_releasing(&mut contents).map_err(|e| e.context(store.describe()))?;
        if loaded.keep_records < contents.records.len() {
            store.truncate(loaded.keep_records)?;
        }
        let mut inner = Inner {
            header: loaded.header,
            log: loaded.log,
            store,
            durability: opts.durability,
            live_agent: None,
            next_agent_token: 1,
            broken: None,
        };
        let mut report = loaded.report;
        let repairs = repair_events(&inner.log);
        report.repaired_events = repairs.len();
        for ev in repairs {
            inner.append(ev).map_err(|e| e.context("closing the turn left open by a crash"))?;
        }
        if report.repaired_events > 0 {
            inner.sync()?;
        }
        Ok((Session::wrap(inner), report))
    }

    /// Opens (or creates) a session in a JSONL file.
    pub fn open_jsonl(path: impl AsRef<Path>, opts: SessionOptions) -> Result<(Session, LoadReport)> {
        Session::open(Box::new(JsonlStore::open(path)?), opts)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Whether two handles are the same session.
    pub fn same_as(&self, other: &Session) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The session id.
    pub fn id(&self) -> String {
        self.lock().header.id.clone()
    }

    /// The session header record.
    pub fn header_record(&self) -> SessionHeader {
        self.lock().header.clone()
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.lock().log.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` with the log (under the session lock: keep it short, call nothing that may block).
    pub fn with_log<R>(&self, f: impl FnOnce(&Log) -> R) -> R {
        f(&self.lock().log)
    }

    /// Event `seq`.
    pub fn event(&self, seq: u64) -> Option<Event> {
        self.lock().log.event(seq)
    }

    /// Events `from..to` (clamped) as a JSON array.
    pub fn events_json(&self, from: u64, to: Option<u64>) -> String {
        let g = self.lock();
        let lines = g.log.lines();
        let end = to.map(|t| t.min(lines.len() as u64)).unwrap_or(lines.len() as u64) as usize;
        let start = (from as usize).min(end);
        let mut out = String::from("[");
        for (i, l) in lines[start..end].iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(l);
        }
        out.push(']');
        out
    }

    /// The derived history (shared, never deep-copied).
    pub fn history(&self) -> Vec<Arc<Derived>> {
        self.lock().log.history().entries().to_vec()
    }

    /// The derived history as a JSON array of messages.
    pub fn history_json(&self) -> String {
        let g = self.lock();
        let h = g.log.history();
        let mut out = Vec::with_capacity(h.bytes() + h.len() + 2);
        out.push(b'[');
        h.write_json(&mut out, true);
        out.push(b']');
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// The folded request header (the latest snapshot with later deltas applied).
    pub fn request_header(&self) -> Option<EpochHeader> {
        self.lock().log.state().headers.current().cloned()
    }

    /// Counters over the whole log.
    pub fn stats(&self) -> SessionStats {
        let g = self.lock();
        let st = g.log.state();
        SessionStats {
            events: g.log.len() as u64,
            turns: st.last_turn,
            requests: st.requests,
            compactions: st.compactions,
            surface: st.history.len() as u64,
            generation: st.history.generation(),
            cached_tokens: st.cached_tokens,
            prompt_tokens: st.prompt_tokens,
        }
    }

    /// Appends an event. Hosts may append their own log-only types at any time and
    /// `user/message` context (source `host` or `plugin`); while an agent instance is live, the
    /// turn, step, tool, header and compaction events belong to it and are rejected here.
    pub fn append(&self, ev: NewEvent) -> Result<u64> {
        let mut g = self.lock();
        if g.live_agent.is_some() && is_agent_owned(&ev) {
            return Err(Error::out_of_order(format!("{}: the live agent instance owns this event type; use the agent's API", ev.ty))
                .with("eventType", ev.ty.clone()));
        }
        g.append(ev)
    }

    /// Appends an event given as JSON `{"type","data","surfaceOp"?,"sources"?}`.
    pub fn append_json(&self, v: &serde_json::Value) -> Result<u64> {
        self.append(NewEvent::from_value(v, "event")?)
    }

    /// Makes every appended event durable now.
    pub fn sync(&self) -> Result<()> {
        self.lock().sync()
    }

    /// Forks this session into `store`: a new session seeded with the first `seed_len` events
    /// (default: all events up to the last turn boundary). The seed must end at a turn boundary
    /// (no turn, step, tool batch or compaction open). The new session records its parent id and
    /// seed length.
    pub fn fork(&self, seed_len: Option<u64>, store: Box<dyn Store>, opts: SessionOptions) -> Result<Session> {
        let (parent, events) = {
            let g = self.lock();
            let n = match seed_len {
                Some(n) => {
                    if n > g.log.len() as u64 {
                        return Err(Error::invalid("seedLength", format!("{n} is past the end of the log ({} events)", g.log.len())));
                    }
                    n
                }
                None => last_boundary(&g.log),
            };
            let events: Vec<Event> = (0..n).map(|s| g.log.event(s).expect("in range")).collect();
            (g.header.clone(), events)
        };
        let id = new_id(opts.id)?;
        let log = Log::replay(&events)?;
        if !log.state().at_rest() {
            return Err(Error::invalid(
                "seedLength",
                format!("{} events do not end at a turn boundary (a turn, step, tool batch or compaction is open)", events.len()),
            ));
        }
        let mut store = store;
        if !store.load()?.records.is_empty() {
            return Err(Error::invalid("store", format!("{} already holds a session", store.describe())));
        }
        let n = events.len() as u64;
        let lineage = parent.fork_lineage(n);
        let header = SessionHeader { id, created_at: now_ms(), parent: Some((parent.id.clone(), n)), lineage, extra: JsonMap::new() };
        Session::start(store, header, log, opts.durability)
    }

    /// Claims the session for an agent instance (at most one live instance).
    pub(crate) fn claim(&self) -> Result<u64> {
        let mut g = self.lock();
        if let Some(t) = g.live_agent {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("session {} already has a live agent instance (#{t}); dispose it first", g.header.id),
            ));
        }
        let t = g.next_agent_token;
        g.next_agent_token += 1;
        g.live_agent = Some(t);
        Ok(t)
    }

    /// Releases the claim of agent `token`.
    pub(crate) fn release(&self, token: u64) {
        let mut g = self.lock();
        if g.live_agent == Some(token) {
            g.live_agent = None;
        }
    }
}

/// The id of a new session: the caller's (which the loader must accept) or a random one.
fn new_id(id: Option<String>) -> Result<String> {
    match id {
        Some(id) if id.is_empty() => Err(Error::invalid("id", "must not be empty")),
        Some(id) => Ok(id),
        None => Ok(random_id()),
    }
}

fn is_agent_owned(ev: &NewEvent) -> bool {
    if ev.ty == types::USER_MESSAGE {
        let source = ev.data.get("source").and_then(|s| s.as_str());
        return source == Some(UserSource::User.as_str()) || source == Some(UserSource::Compaction.as_str());
    }
    types::ALL.contains(&ev.ty.as_str())
}

/// The number of events up to the last point where the log was at rest.
fn last_boundary(log: &Log) -> u64 {
    if log.state().at_rest() {
        return log.len() as u64;
    }
    // Walk back to the last turn/end, or to the start of the first turn.
    let mut replay = Log::new();
    let mut last = 0u64;
    for seq in 0..log.len() as u64 {
        let ev = log.event(seq).expect("in range");
        replay.append(&ev).expect("a logged event replays");
        if replay.state().at_rest() {
            last = seq + 1;
        }
    }
    last
}
