//! A session: a [`Log`] tied to a [`Store`], shared by handle.
//!
//! `Session` is a cheap, cloneable, thread-safe handle. Every append is a batch of events that
//! is validated, written to the store in one conditional append (made durable per the
//! [`Durability`] policy), and only then visible in memory: a rejected event, a failed write or
//! a refused (conflicting) append changes nothing, in memory or in the store, and the same call
//! can be retried. A handle opened read-only refuses appends and can [`refresh`](Session::refresh)
//! to read what the writer appended since.

use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::checkpoint::{self, CheckpointPolicy};
use crate::log::event::{types, Event, NewEvent, SurfaceOp, UserSource};
use crate::log::load::{load_record, load_records_releasing, load_text, load_window, repair_events, LoadReport, OpenCheck, SessionHeader};
use crate::log::rules::Effect;
use crate::log::{chain, Derived, Log, Text};
use crate::observe::{self, Level, Observation};
use crate::request::VerifyReport;
use crate::session_id::new_id;
pub use crate::session_id::{check_session_id, check_session_id_field, random_id, MAX_SESSION_ID_BYTES};
use crate::store::url::UrlOptions;
use crate::store::{read_only_error, Batch, Durability, FileOptions, JsonlStore, MemoryStore, Store, StoreContents};
pub use crate::time::now_ms;
use parking_lot::{Mutex, MutexGuard};
use std::path::Path;
use std::sync::Arc;

pub use crate::store::options::SessionOptions;

pub(crate) struct Inner {
    pub header: SessionHeader,
    /// The session header record as stored: its bytes start the chain.
    header_line: Arc<str>,
    pub log: Log,
    pub store: Box<dyn Store>,
    pub durability: Durability,
    /// The id of the live agent instance, if any (at most one).
    pub live_agent: Option<u64>,
    next_agent_token: u64,
    /// Set when a failed write could not be undone: the store is out of step with the log.
    broken: Option<String>,
    /// Set when the store refused an append as a conflict (another writer appended): appends are
    /// refused until a refresh reads what the store holds.
    conflict: Option<String>,
    /// The child sessions spawned from this handle, in spawn order ([`Session::children`]).
    children: Vec<ChildRef>,
    /// When checkpoints are written.
    checkpoints: CheckpointPolicy,
}

/// A child session spawned from a handle: the session while something holds it, and where it is
/// kept (a JSONL file) to read it once nothing does.
#[derive(Clone)]
struct ChildRef {
    id: String,
    session: std::sync::Weak<Mutex<Inner>>,
    path: Option<std::path::PathBuf>,
}

/// A child spawned from a session handle in this process ([`Session::children`]).
#[derive(Clone, Debug)]
pub struct SpawnedChild {
    /// The child session's id.
    pub id: String,
    /// The child session, while a handle to it is alive.
    pub session: Option<Session>,
    /// The JSONL file it is kept in, when it is kept in one.
    pub path: Option<std::path::PathBuf>,
}

/// Whether a store error says that what the store did with the write is unknown (detail
/// `outcomeUnknown: true`). A store that says so refuses every later call until the session is
/// reopened (the PostgreSQL store does).
fn outcome_unknown(e: &Error) -> bool {
    e.detail().get("outcomeUnknown") == Some(&serde_json::Value::Bool(true))
}

impl Inner {
    fn new(header: SessionHeader, header_line: Arc<str>, log: Log, store: Box<dyn Store>, opts: &SessionOptions) -> Inner {
        Inner {
            header,
            header_line,
            log,
            store,
            durability: opts.durability,
            live_agent: None,
            next_agent_token: 1,
            broken: None,
            conflict: None,
            checkpoints: opts.checkpoints,
            children: Vec::new(),
        }
    }

    /// Validates, stores and applies one event. Returns its seq.
    pub fn append(&mut self, ev: NewEvent) -> Result<u64> {
        self.append_batch(vec![ev]).map(|r| r.start)
    }

    /// Validates, stores and applies events as one batch: all of them or none. Each event is
    /// validated against the state the ones before it leave; the batch is then written to the
    /// store in one conditional append and, as the durability policy says, made durable. A
    /// rejected event, a failed write or sync, or a conflict leaves the log, the memory state and
    /// the store as they were. Returns the seqs the events got.
    pub fn append_batch(&mut self, evs: Vec<NewEvent>) -> Result<std::ops::Range<u64>> {
        self.append_batch_with(evs, Checkpointing::AsDue)
    }

    /// [`append_batch`](Self::append_batch); the batch ends with a checkpoint when `when` says
    /// so and the log can hold one (a version 2 log, no compaction open). The range returned is
    /// that of `evs` alone.
    fn append_batch_with(&mut self, evs: Vec<NewEvent>, when: Checkpointing) -> Result<std::ops::Range<u64>> {
        let force = when == Checkpointing::Now;
        self.check_writable()?;
        let first = self.log.next_seq();
        if evs.is_empty() && !force {
            return Ok(first..first);
        }
        let compactions = self.log.state().compactions;
        let replaces = evs.iter().any(|e| matches!(e.surface_op, Some(SurfaceOp::Replace { .. })));
        let headers = evs.iter().any(|e| e.ty == types::REQUEST_HEADER || e.ty == types::REQUEST_HEADER_DELTA);
        let mut sp = self.log.savepoint(replaces, headers);
        let mut sync = self.durability == Durability::EveryEvent;
        let time = now_ms();
        let mut lines = Vec::with_capacity(evs.len());
        let mut buf = Vec::with_capacity(1024);
        for ev in evs {
            let event = ev.into_event(self.log.next_seq(), time);
            let effect = match self.log.check(&event) {
                Ok(effect) => effect,
                Err(e) => {
                    self.log.rollback(sp);
                    return Err(e);
                }
            };
            if self.durability == Durability::TurnEnd && matches!(event.ty.as_str(), types::TURN_END | types::COMPACTION_END) {
                sync = true;
            }
            let (line, link) = self.log.seal_event(&event, &mut buf);
            Log::note_effect(&mut sp, &effect);
            lines.push(line.clone());
            self.log.commit_sealed(&event, effect, line, link);
        }
        let end = self.log.next_seq();
        let (since, bytes) = self.log.since_checkpoint();
        let landed = self.log.state().compactions > compactions;
        if self.header.chained()
            && self.log.state().compaction.is_none()
            && (force || (when == Checkpointing::AsDue && since > 0 && self.checkpoints.due(since, bytes, landed)))
        {
            let event = NewEvent::new(types::CHECKPOINT, checkpoint::data(self.log.state())).into_event(end, time);
            let effect = Effect::Checkpoint(checkpoint::is_full(&event.data));
            let (line, link) = self.log.seal_event(&event, &mut buf);
            lines.push(line.clone());
            self.log.commit_sealed(&event, effect, line, link);
        } else if force {
            self.log.rollback(sp);
            return Err(Error::out_of_order(if self.header.chained() {
                "a checkpoint is not written while a compaction is open"
            } else {
                "a version 1 log has no checkpoints (fork it with every event to upgrade it)"
            }));
        }
        let batch = Batch { session_id: &self.header.id, header: None, seq: first, events: &lines };
        if let Err(e) = self.store.append(&batch) {
            self.log.rollback(sp);
            match e.kind() {
                // Refused as a whole: nothing of the batch is in the store.
                ErrorKind::Conflict => {
                    self.conflict = Some(e.message().to_string());
                    observe::emit(Level::Warn, || {
                        Observation::new(
                            "store-conflict",
                            Level::Warn,
                            format!(
                                "{}: the store refused an append at seq {first} (another writer appended first); this handle appends nothing until it is refreshed or reopened",
                                self.store.describe()
                            ),
                        )
                        .session(self.header.id.clone())
                        .with("store", self.store.describe())
                        .with("seq", first)
                        .with("events", lines.len() as u64)
                        .with("error", e.message())
                    });
                }
                ErrorKind::ReadOnly | ErrorKind::Locked => {}
                // The store says the write's outcome is unknown: it refuses every later call
                // itself, with the same reason and detail (`outcomeUnknown`), until the session
                // is reopened, which reads what it holds. Nothing to undo through this handle.
                _ if outcome_unknown(&e) => {}
                // A failed write may have left part of the batch behind, or (a host store whose
                // reply was lost) all of it: ask the store to remove what this handle appended.
                // When that fails too, the store may hold events this handle does not.
                _ => {
                    let undo = self.store.undo(first as usize + 1);
                    self.observe_undo("append", first, lines.len(), &e, undo.as_ref().err());
                    if let Err(u) = undo {
                        self.broken = Some(format!("{}; undoing it failed: {}", e.message(), u.message()));
                    }
                }
            }
            return Err(e);
        }
        if sync {
            if let Err(e) = self.store.sync() {
                if outcome_unknown(&e) {
                    // As for an append: the store refuses everything after it, and says why.
                    self.log.rollback(sp);
                    return Err(e);
                }
                // The batch was written but is not known durable: remove it again, so that memory
                // and store stay in step, and report the failure. When that fails too, the store
                // may hold events this handle does not: it refuses further writes.
                let undo = self.store.undo(first as usize + 1);
                self.observe_undo("sync", first, lines.len(), &e, undo.as_ref().err());
                if let Err(u) = undo {
                    self.broken = Some(format!("{}; undoing it failed: {}", e.message(), u.message()));
                }
                self.log.rollback(sp);
                return Err(e);
            }
        }
        Ok(first..end)
    }

    /// Reports the undo of a batch whose `failed` step (append or sync) failed with `e`; `undo`
    /// is the undo's own failure, if it failed too (the handle then refuses further writes).
    fn observe_undo(&self, failed: &str, first: u64, events: usize, e: &Error, undo: Option<&Error>) {
        observe::emit(Level::Error, || undo_observation(&self.store.describe(), &self.header.id, failed, first, events, e, undo));
    }

    /// Refuses writes on a read-only handle, after a conflict, and once the store is out of step
    /// with the log (see `append_batch`).
    fn check_writable(&self) -> Result<()> {
        if self.store.read_only() {
            return Err(read_only_error(&self.store.describe(), "append events"));
        }
        if let Some(why) = &self.conflict {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{}: the store refused an earlier append ({why}); this handle appends nothing until it is refreshed or reopened",
                    self.store.describe()
                ),
            ));
        }
        match &self.broken {
            None => Ok(()),
            // What the store holds is unknown: the same detail as a store's unknown outcome.
            Some(why) => Err(Error::new(
                ErrorKind::Storage,
                format!(
                    "{}: a failed write could not be undone ({why}); the store may hold an event this handle does not, so it refuses further writes: reopen the session",
                    self.store.describe()
                ),
            )
            .with("outcomeUnknown", true)),
        }
    }

    /// Makes everything appended so far durable (nothing to do for a read-only handle).
    pub fn sync(&mut self) -> Result<()> {
        if self.store.read_only() {
            return Ok(());
        }
        self.check_writable()?;
        self.store.sync()
    }

    /// Event `seq`, from memory where the log holds its line, else read from the store; `None`
    /// past the end of the log.
    pub(crate) fn event_at(&mut self, seq: u64) -> Result<Option<Event>> {
        if let Some(l) = self.log.line(seq) {
            return Event::from_json(l).map(Some);
        }
        match self.event_records(seq, seq + 1)?.pop() {
            Some(l) => Event::from_json(&l).map(Some),
            None => Ok(None),
        }
    }

    /// A lookup of events by seq (for [`crate::compaction::native::expand`]): from memory where
    /// the log holds their lines, else read from the store a block of records at a time (the
    /// last block kept). A record the store cannot give is `None`.
    pub(crate) fn event_lookup(&mut self) -> EventLookup<'_> {
        EventLookup { inner: std::cell::RefCell::new((self, 0, Vec::new())) }
    }

    /// Catches the cache clock's reading of the log up ([`crate::clock::ClockTrack`]): the
    /// events older than the log holds (a session opened from a checkpoint) are read from the
    /// store in one pass, the first time a track is caught up; the rest from memory.
    pub(crate) fn catch_up_clock(&mut self, track: &mut crate::clock::ClockTrack) -> Result<()> {
        let base = self.log.base();
        if track.folded < base {
            let mut stream = self.store.record_stream()?;
            let mut index = 0u64;
            while let Some((r, _)) = stream.next_record()? {
                if index > base {
                    break;
                }
                if index > track.folded {
                    let line = std::str::from_utf8(&r).map_err(|e| Error::new(ErrorKind::CorruptLog, format!("invalid UTF-8: {e}")))?;
                    track.fold_line(index - 1, line);
                }
                index += 1;
            }
            if track.folded < base {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("{}: the store no longer holds the events this handle opened from a checkpoint", self.store.describe()),
                ));
            }
        }
        track.catch_up(&self.log);
        Ok(())
    }

    /// The stored records of events `from..to` (clamped to the log): from memory where the log
    /// holds their lines, from the store for older ones (a log opened from a checkpoint holds the
    /// lines from that checkpoint on).
    pub(crate) fn event_records(&mut self, from: u64, to: u64) -> Result<Vec<Text>> {
        let to = to.min(self.log.next_seq());
        let from = from.min(to);
        let base = self.log.base();
        let mut out = Vec::with_capacity((to - from) as usize);
        if from < base {
            let older = self.store.read_records(from as usize + 1, base.min(to) as usize + 1)?;
            if older.len() as u64 != base.min(to) - from {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!(
                        "{}: reading events {from}..{} found {} records: the store no longer holds what this handle opened",
                        self.store.describe(),
                        base.min(to),
                        older.len()
                    ),
                ));
            }
            for r in older {
                out.push(Text::from(String::from_utf8(r).map_err(|e| Error::new(ErrorKind::CorruptLog, format!("invalid UTF-8: {e}")))?));
            }
        }
        let held = from.max(base)..to.max(base);
        out.extend(self.log.lines()[(held.start - base) as usize..(held.end - base) as usize].iter().cloned());
        Ok(out)
    }

    /// The log folded over its first `seq` events (their lines are not kept), for rebuilding an
    /// earlier request: from the last checkpoint before `seq` when the store finds one (the
    /// events from it on checked as an open checks them), otherwise replayed from the start.
    pub(crate) fn log_at(&mut self, seq: u64) -> Result<Log> {
        let seq = seq.min(self.log.next_seq());
        if let Some(mut win) = self.store.load_window(Some(seq))? {
            if win.from <= win.checkpoint && win.checkpoint < seq {
                win.records.truncate((seq - win.from) as usize);
                win.last_complete = true;
                let loaded = load_window(&mut win).map_err(|e| e.context(self.store.describe()))?;
                if loaded.report.cut_records == 0 && loaded.log.next_seq() == seq {
                    return Ok(loaded.log);
                }
            }
        }
        let records = self.event_records(0, seq)?;
        let mut log = Log::discarding();
        for r in &records {
            log.append(&Event::from_json(r)?)?;
        }
        Ok(log)
    }
}

/// Events looked up by seq ([`Inner::event_lookup`]).
pub(crate) struct EventLookup<'a> {
    inner: std::cell::RefCell<(&'a mut Inner, u64, Vec<Text>)>,
}

impl EventLookup<'_> {
    const BLOCK: u64 = 1024;

    /// Event `seq`, if the log has it and it can be read.
    pub(crate) fn event(&self, seq: u64) -> Option<Event> {
        let mut g = self.inner.borrow_mut();
        let (inner, from, block) = &mut *g;
        if let Some(l) = inner.log.line(seq) {
            return Event::from_json(l).ok();
        }
        if seq < *from || seq >= *from + block.len() as u64 {
            *block = inner.event_records(seq, seq + Self::BLOCK).ok()?;
            *from = seq;
        }
        block.get((seq - *from) as usize).and_then(|l| Event::from_json(l).ok())
    }
}

/// Whether a batch ends with a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checkpointing {
    /// When the session's policy says one is due.
    AsDue,
    /// Now (`Session::checkpoint`).
    Now,
    /// Not (a crash repair: it adds only the events that close what was left open).
    Never,
}

/// What a refresh read.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefreshReport {
    /// Events read since the last load or refresh.
    pub new_events: u64,
    /// Events in the log now.
    pub events: u64,
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
    /// Whether this handle was opened read-only.
    pub read_only: bool,
    /// The chain value after the last event (version 2 logs), hex: keep it elsewhere to tell a
    /// log that lost its last records from an intact one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_head: Option<String>,
}

/// The `store-undo` observation: the `failed` step (append or sync) of `events` events from
/// seq `first` failed with `e` and the batch was taken back out of the store, or `undo` says
/// why that failed too.
fn undo_observation(
    store: &str,
    session_id: &str,
    failed: &str,
    first: u64,
    events: usize,
    e: &Error,
    undo: Option<&Error>,
) -> Observation {
    let mut message = format!("{store}: the {failed} of {events} event(s) at seq {first} failed ({}); ", e.message());
    match undo {
        None => message.push_str("took the batch back out of the store, and the call fails"),
        Some(u) => message.push_str(&format!(
            "taking it back failed too ({}): the handle refuses further writes until the session is reopened",
            u.message()
        )),
    }
    let mut o = Observation::new("store-undo", Level::Error, message)
        .session(session_id.to_string())
        .with("store", store)
        .with("failed", failed)
        .with("seq", first)
        .with("events", events as u64)
        .with("error", e.message())
        .with("undone", undo.is_none());
    if let Some(u) = undo {
        o = o.with("undoError", u.message());
    }
    o
}

/// A held session lock (see [`Session::lock`]). The fields drop in order: the lock is released
/// first, then the observations raised under it are delivered.
pub(crate) struct Locked<'a> {
    guard: MutexGuard<'a, Inner>,
    _defer: crate::observe::Deferring,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
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
        if store.read_only() {
            return Err(read_only_error(&store.describe(), "create a session"));
        }
        let contents = store.load()?;
        if !contents.records.is_empty() {
            return Err(Error::invalid("store", format!("{} already holds a session; open it instead", store.describe())));
        }
        let header = SessionHeader::new(new_id(opts.id.clone())?, now_ms());
        Session::start(store, header, Vec::new(), &opts)
    }

    /// Creates a session from `header` and `events` in the empty `store`, in one append: a child
    /// agent's session (`agent::spawn`), whose events are its parent's first events and its own
    /// opening ones. Every event is checked as a loaded one is.
    pub(crate) fn create_seeded(
        mut store: Box<dyn Store>,
        header: SessionHeader,
        events: Vec<Event>,
        opts: &SessionOptions,
    ) -> Result<Session> {
        if store.read_only() {
            return Err(read_only_error(&store.describe(), "create a session"));
        }
        if !store.load()?.records.is_empty() {
            return Err(Error::invalid("store", format!("{} already holds a session", store.describe())));
        }
        Session::start(store, header, events, opts)
    }

    /// Writes a new session (header and seed events, chained anew under the new header) to an
    /// empty store in one append.
    fn start(mut store: Box<dyn Store>, header: SessionHeader, events: Vec<Event>, opts: &SessionOptions) -> Result<Session> {
        let header_line: Arc<str> = header.to_value().to_string().into();
        let mut log = header.start_log(header_line.as_bytes());
        let mut buf = Vec::with_capacity(1024);
        for ev in &events {
            let effect = log.check(ev)?;
            let (line, link) = log.seal_event(ev, &mut buf);
            log.commit_sealed(ev, effect, line, link);
        }
        store.append(&Batch { session_id: &header.id, header: Some(&header_line), seq: 0, events: log.lines() })?;
        if let Err(e) = store.sync() {
            // Not known durable: take the session out of the store again, so that the store is
            // as empty as it was and the same call can be retried.
            let undo = store.undo(0);
            observe::emit(Level::Error, || {
                undo_observation(&store.describe(), &header.id, "sync", 0, events.len(), &e, undo.as_ref().err())
            });
            if let Err(u) = undo {
                return Err(e.context(format!("removing the new session again failed too ({})", u.message())));
            }
            return Err(e);
        }
        Ok(Session::wrap(Inner::new(header, header_line, log, store, opts)))
    }

    fn wrap(inner: Inner) -> Session {
        Session { inner: Arc::new(Mutex::new(inner)) }
    }

    /// Opens the session in `store`: loads it, validating every event (and, in a version 2 log,
    /// its chained digest), or, when the store is empty and writable, creates one. A writer cuts
    /// a torn or damaged unfinished tail (the store keeps the cut records: see
    /// [`LoadReport::cut_saved_to`]) and closes a turn left open by a crash. A read-only open
    /// changes nothing: it reads the valid records and leaves the rest unread.
    pub fn open(mut store: Box<dyn Store>, opts: SessionOptions) -> Result<(Session, LoadReport)> {
        let read_only = store.read_only();
        // A bounded open reads the log from its last checkpoint (the store finds it without
        // reading from the start); a log without one, or a full check, is read whole.
        let window = match opts.check {
            OpenCheck::Bounded => store.load_window(None)?,
            OpenCheck::Full => None,
        };
        let (loaded, header_line, count) = match window {
            Some(mut win) => {
                let count = win.from as usize + 1 + win.len();
                let header_line: Arc<str> = String::from_utf8_lossy(&win.header).into_owned().into();
                let loaded = load_window(&mut win).map_err(|e| e.context(store.describe()))?;
                (loaded, header_line, count)
            }
            None => {
                // A store that reads its log whole hands it over as one text, which the loaded
                // lines then share; any other gives its records one by one.
                let (text, mut contents) = match store.load_text()? {
                    Some(t) => (Some(t), StoreContents { records: Vec::new(), last_complete: true }),
                    None => (None, store.load()?),
                };
                let count = text.as_ref().map_or(contents.records.len(), |t| t.records.len());
                if count == 0 {
                    if read_only {
                        return Err(Error::new(
                            ErrorKind::CorruptLog,
                            format!("{}: holds no session (a read-only open creates none)", store.describe()),
                        ));
                    }
                    return Ok((Session::create(store, opts)?, LoadReport::default()));
                }
                let loaded = match &text {
                    Some(t) => load_text(t),
                    None => load_records_releasing(&mut contents),
                }
                .map_err(|e| e.context(store.describe()))?;
                let header = match &text {
                    Some(t) => t.record(0),
                    None => &contents.records[0][..],
                };
                let header_line: Arc<str> = String::from_utf8_lossy(header).into_owned().into();
                (loaded, header_line, count)
            }
        };
        let mut report = loaded.report;
        if loaded.header.version < crate::log::load::VERSION {
            observe::emit(Level::Info, || {
                Observation::new(
                    "log-legacy-format",
                    Level::Info,
                    format!(
                        "{}: a version {} log (no chained digests); events appended to it are written in the same format",
                        store.describe(),
                        loaded.header.version
                    ),
                )
                .session(loaded.header.id.clone())
                .with("store", store.describe())
                .with("version", loaded.header.version)
            });
        }
        if loaded.keep_records < count && !read_only {
            let reason = report.cut_reason.clone().unwrap_or_default();
            report.cut_saved_to = store.cut(loaded.keep_records, &reason)?;
            observe::emit(Level::Warn, || {
                let saved = report.cut_saved_to.as_deref().map(|p| format!(", kept in {p}")).unwrap_or_default();
                let mut o = Observation::new(
                    "log-cut",
                    Level::Warn,
                    format!("{}: cut {} record(s) from the end of the log ({reason}){saved}", store.describe(), report.cut_records),
                )
                .session(loaded.header.id.clone())
                .with("store", store.describe())
                .with("records", report.cut_records as u64)
                .with("line", report.cut_at_line.unwrap_or(0) as u64)
                .with("reason", reason.clone())
                .with("damaged", report.cut_damaged);
                if let Some(p) = &report.cut_saved_to {
                    o = o.with("savedTo", p.clone());
                }
                o
            });
        }
        let mut inner = Inner::new(loaded.header, header_line, loaded.log, store, &opts);
        if !read_only {
            let repairs = repair_events(&inner.log);
            report.repaired_events = repairs.len();
            if !repairs.is_empty() {
                let open_turn = inner.log.state().open_turn.as_ref().map(|t| t.turn);
                let open_compaction = inner.log.state().compaction.is_some();
                // Durable before the open returns, whatever the policy: a failed sync takes the
                // repair out again (as any batch's), so a failed open leaves the store as it was.
                let durability = std::mem::replace(&mut inner.durability, Durability::EveryEvent);
                let r = inner.append_batch_with(repairs, Checkpointing::Never);
                inner.durability = durability;
                let seqs = r.map_err(|e| e.context("closing the turn left open by a crash"))?;
                observe::emit(Level::Warn, || {
                    let what = match open_turn {
                        Some(t) => format!("turn {t}"),
                        None => "a compaction".to_string(),
                    };
                    let mut o = Observation::new(
                        "turn-repaired",
                        Level::Warn,
                        format!(
                            "{}: {what} was left open by a crash; closed it with {} synthetic event(s)",
                            inner.store.describe(),
                            report.repaired_events
                        ),
                    )
                    .session(inner.header.id.clone())
                    .with("store", inner.store.describe())
                    .with("events", report.repaired_events as u64)
                    .with("fromSeq", seqs.start)
                    .with("compaction", open_compaction);
                    if let Some(t) = open_turn {
                        o = o.with("turn", t);
                    }
                    o
                });
            }
        }
        Ok((Session::wrap(inner), report))
    }

    /// Opens (or creates) a session in a JSONL file, with the file's write lock.
    pub fn open_jsonl(path: impl AsRef<Path>, opts: SessionOptions) -> Result<(Session, LoadReport)> {
        Session::open(Box::new(JsonlStore::open(path)?), opts)
    }

    /// Opens a session in a JSONL file as `file` says (read-only, the mode of a created file).
    pub fn open_jsonl_with(path: impl AsRef<Path>, file: FileOptions, opts: SessionOptions) -> Result<(Session, LoadReport)> {
        Session::open(Box::new(JsonlStore::open_with(path, file)?), opts)
    }

    /// Opens (or creates) a session in the store a URL names: `file:PATH` or
    /// `postgres://...` (see [`crate::store::url`]). With an id in the options, the store must
    /// hold that session or none (then it is created with that id, unless `create` is off).
    pub fn open_url(url: &str, opts: UrlOptions) -> Result<(Session, LoadReport)> {
        let (store, id) = crate::store::url::open_store(url, &opts)?;
        let describe = store.describe();
        let (session, report) =
            Session::open(store, SessionOptions { durability: opts.durability, id, check: opts.check, checkpoints: opts.checkpoints })?;
        if let Some(want) = &opts.id {
            let have = session.id();
            if &have != want {
                return Err(crate::store::url::other_session(&describe, want, &have));
            }
        }
        Ok((session, report))
    }

    /// Reads what the store holds beyond this handle's last event: the events another writer
    /// appended since (a read-only handle's way to follow a live session), or, after a
    /// [`Conflict`](ErrorKind::Conflict), what the other writer appended, after which this handle
    /// may append again. Complete records only: a torn last record is left for the next refresh.
    /// The new events are checked as loading checks them; on damage nothing is applied and the
    /// error names the line. A writer refreshes only with no live agent instance.
    pub fn refresh(&self) -> Result<RefreshReport> {
        let mut g = self.lock();
        if !g.store.read_only() && g.live_agent.is_some() {
            return Err(Error::out_of_order(
                "the session has a live agent instance; dispose it before refreshing (its state would not follow what another writer appended)",
            ));
        }
        let have = g.log.len() + 1;
        let StoreContents { mut records, last_complete } = g.store.load_from(have)?;
        if !last_complete {
            records.pop();
        }
        if records.is_empty() {
            g.conflict = None;
            return Ok(RefreshReport { new_events: 0, events: g.log.len() as u64 });
        }
        let sp = g.log.savepoint(true, true);
        let mut sp = Some(sp);
        for (i, rec) in records.iter_mut().enumerate() {
            let line = have + i + 1;
            if let Err(e) = load_record(&mut g.log, rec) {
                g.log.rollback(sp.take().expect("once"));
                return Err(crate::log::rules::as_corrupt(e, line).context(g.store.describe()));
            }
        }
        g.conflict = None;
        Ok(RefreshReport { new_events: records.len() as u64, events: g.log.len() as u64 })
    }

    /// Whether the session was opened read-only.
    pub fn read_only(&self) -> bool {
        self.lock().store.read_only()
    }

    /// Where the log's chain ends (`None` for a version 1 log, which has no chain).
    pub fn chain_head(&self) -> Option<chain::ChainHead> {
        let g = self.lock();
        g.log.chain_head().map(|l| chain::ChainHead { events: g.log.len() as u64, chain: chain::hex(l) })
    }

    /// Checks the whole log as it is stored: every check loading makes (chain, rules, every
    /// checkpoint), then the reconstruction of every recorded request (see
    /// [`crate::request::verify_stream`]). The log is read from the store one record at a time,
    /// without the session being locked while it runs: memory follows the live context, not
    /// the log's length. Progress is reported as `verify-progress` observations.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(None, &mut |_| {})
    }

    /// [`verify`](Self::verify), and also every conversation request's provider body for
    /// `renderer` with `options`, built from the rendered messages as an agent with that
    /// renderer builds it and compared with the rendering of the rebuilt envelope
    /// ([`crate::request::verify_bodies`]).
    pub fn verify_bodies(&self, renderer: crate::render::Renderer, options: &crate::render::RenderOptions) -> Result<VerifyReport> {
        self.verify_with(Some((renderer, options)), &mut |_| {})
    }

    /// [`verify`](Self::verify) (with `bodies`: [`verify_bodies`](Self::verify_bodies)),
    /// reporting progress to `progress` as well. It checks the records this handle holds: those
    /// a writer appends meanwhile are not read.
    pub fn verify_with(
        &self,
        bodies: Option<(crate::render::Renderer, &crate::render::RenderOptions)>,
        progress: &mut dyn FnMut(&crate::request::VerifyProgress),
    ) -> Result<VerifyReport> {
        let (stream, records, store, id) = {
            let mut g = self.lock();
            (g.store.record_stream()?, g.log.len() as u64 + 1, g.store.describe(), g.header.id.clone())
        };
        let mut stream = crate::store::FirstRecords::new(stream, records);
        crate::request::verify_observed(&mut stream, &store, Some(&id), bodies, progress, None, Some(&|seq| self.event(seq)))
    }

    /// The session lock. Observations raised while it is held are delivered once it is
    /// released ([`crate::observe`]): the observer never runs under a session lock.
    pub(crate) fn lock(&self) -> Locked<'_> {
        let defer = crate::observe::Deferring::new();
        Locked { guard: self.inner.lock(), _defer: defer }
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

    /// The log as a JSONL file holds it: every stored record (see [`records`](Self::records)),
    /// each followed by a newline. Written to a file, it opens to this session.
    pub fn export_jsonl(&self) -> Result<String> {
        let records = self.records()?;
        let mut out = String::with_capacity(records.iter().map(|l| l.len() + 1).sum::<usize>());
        for l in &records {
            out.push_str(l);
            out.push('\n');
        }
        Ok(out)
    }

    /// The session header record exactly as stored (its bytes start the chain).
    pub fn header_line(&self) -> Arc<str> {
        self.lock().header_line.clone()
    }

    /// The stored records of the log: the session header record exactly as stored (its bytes
    /// start the chain), then every event's record. Writing them to an empty store, one per
    /// record, gives a store that opens to this session. A session opened from a checkpoint
    /// holds the records from that checkpoint on: the older ones are read from the store (a
    /// store that fails is the error).
    pub fn records(&self) -> Result<Vec<Text>> {
        let mut g = self.lock();
        let mut out = Vec::with_capacity(g.log.len() + 1);
        out.push(Text::from(&*g.header_line));
        let len = g.log.next_seq();
        out.extend(g.event_records(0, len)?);
        Ok(out)
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.lock().log.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` with the log, and returns the session id with its result (one lock).
    pub(crate) fn with_log_and_id<R>(&self, f: impl FnOnce(&Log) -> R) -> (String, R) {
        let g = self.lock();
        (g.header.id.clone(), f(&g.log))
    }

    /// Runs `f` with the log (under the session lock: keep it short, call nothing that may block).
    pub fn with_log<R>(&self, f: impl FnOnce(&Log) -> R) -> R {
        f(&self.lock().log)
    }

    /// Event `seq`: `None` past the end of the log (or, for an event older than the session
    /// holds in memory, when the store cannot be read: [`events_json`](Self::events_json) says
    /// why).
    pub fn event(&self, seq: u64) -> Option<Event> {
        let mut g = self.lock();
        if let Some(ev) = g.log.event(seq) {
            return Some(ev);
        }
        let rec = g.event_records(seq, seq + 1).ok()?.pop()?;
        Event::from_json(&rec).ok()
    }

    /// Events `from..to` (clamped) as a JSON array (older events than the session holds in
    /// memory are read from the store).
    pub fn events_json(&self, from: u64, to: Option<u64>) -> Result<String> {
        let mut g = self.lock();
        let len = g.log.next_seq();
        let records = g.event_records(from, to.unwrap_or(len))?;
        let mut out = String::with_capacity(2 + records.iter().map(|l| l.len() + 1).sum::<usize>());
        out.push('[');
        for (i, l) in records.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(l);
        }
        out.push(']');
        Ok(out)
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
            read_only: g.store.read_only(),
            chain_head: g.log.chain_head().map(chain::hex),
        }
    }

    /// Appends an event. Hosts may append their own log-only types at any time and
    /// `user/message` context (source `host` or `plugin`); while an agent instance is live, the
    /// turn, step, tool, header and compaction events belong to it and are rejected here.
    pub fn append(&self, ev: NewEvent) -> Result<u64> {
        let mut g = self.lock();
        if ev.ty == types::CHECKPOINT {
            return Err(Error::invalid(
                "type",
                "checkpoints are written by the library (Session::checkpoint, or as the session's checkpoint policy says)",
            )
            .with("eventType", ev.ty.clone()));
        }
        if g.live_agent.is_some() && is_agent_owned(&ev) {
            return Err(Error::out_of_order(format!("{}: the live agent instance owns this event type; use the agent's API", ev.ty))
                .with("eventType", ev.ty.clone()));
        }
        g.append(ev)
    }

    /// Writes a checkpoint now (`docs/log.md`, "Checkpoints"): the derived state an open needs,
    /// so that the next open reads the log from here. Returns its seq. Refused on a version 1
    /// log and while a compaction is open (`OutOfOrder`), on a read-only handle (`ReadOnly`).
    /// A session writes checkpoints by itself as its [`CheckpointPolicy`] says; this is for a
    /// log written before checkpoints existed (`llmsession checkpoint LOG`) and for hosts that
    /// choose the moment.
    pub fn checkpoint(&self) -> Result<u64> {
        let mut g = self.lock();
        let r = g.append_batch_with(Vec::new(), Checkpointing::Now)?;
        Ok(r.end)
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
            let mut g = self.lock();
            let len = g.log.next_seq();
            if let Some(n) = seed_len {
                if n > len {
                    return Err(Error::invalid("seedLength", format!("{n} is past the end of the log ({len} events)")));
                }
            }
            let records = g.event_records(0, seed_len.unwrap_or(len))?;
            let events: Vec<Event> = records.iter().map(|r| Event::from_json(r)).collect::<Result<_>>()?;
            (g.header.clone(), events)
        };
        let id = new_id(opts.id.clone())?;
        // The seed replayed (it must end at rest); without a seed length, up to the last point
        // where the log was at rest.
        let mut log = Log::discarding();
        let mut boundary = 0usize;
        for (i, ev) in events.iter().enumerate() {
            log.append(ev)?;
            if log.state().at_rest() {
                boundary = i + 1;
            }
        }
        let mut events = events;
        match seed_len {
            None => events.truncate(boundary),
            Some(_) if !log.state().at_rest() => {
                return Err(Error::invalid(
                    "seedLength",
                    format!("{} events do not end at a turn boundary (a turn, step, tool batch or compaction is open)", events.len()),
                ));
            }
            Some(_) => {}
        }
        let mut store = store;
        if !store.load()?.records.is_empty() {
            return Err(Error::invalid("store", format!("{} already holds a session", store.describe())));
        }
        let n = events.len() as u64;
        let lineage = parent.fork_lineage(n);
        let header = SessionHeader { parent: Some((parent.id.clone(), n)), lineage, ..SessionHeader::new(id, now_ms()) };
        Session::start(store, header, events, &opts)
    }

    /// Claims the session for an agent instance (at most one live instance, never on a
    /// read-only handle).
    pub(crate) fn claim(&self) -> Result<u64> {
        let mut g = self.lock();
        if g.store.read_only() {
            return Err(read_only_error(&g.store.describe(), "run an agent instance"));
        }
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

    /// Notes a child spawned from this handle.
    pub(crate) fn note_child(&self, child: &Session) {
        let (id, path) = {
            let g = child.lock();
            (g.header.id.clone(), g.store.file_path())
        };
        self.lock().children.push(ChildRef { id, session: Arc::downgrade(&child.inner), path });
    }

    /// The file the log is kept in, when its store keeps it in one (a JSONL file).
    pub fn file_path(&self) -> Option<std::path::PathBuf> {
        self.lock().store.file_path()
    }

    /// The children spawned from this handle in this process, in spawn order: each with its
    /// session while a handle to it is alive, and its file when it is kept in one (their own
    /// children are theirs to list). A store lists the children of a session whoever spawned
    /// them (`store::url::list_sessions` with a parent).
    pub fn children(&self) -> Vec<SpawnedChild> {
        self.lock()
            .children
            .iter()
            .map(|c| SpawnedChild { id: c.id.clone(), session: c.session.upgrade().map(Session::wrap_shared), path: c.path.clone() })
            .collect()
    }

    fn wrap_shared(inner: Arc<Mutex<Inner>>) -> Session {
        Session { inner }
    }

    /// Releases the claim of agent `token`.
    pub(crate) fn release(&self, token: u64) {
        let mut g = self.lock();
        if g.live_agent == Some(token) {
            g.live_agent = None;
        }
    }
}

fn is_agent_owned(ev: &NewEvent) -> bool {
    if ev.ty == types::USER_MESSAGE {
        let source = ev.data.get("source").and_then(|s| s.as_str());
        return source == Some(UserSource::User.as_str()) || source == Some(UserSource::Compaction.as_str());
    }
    types::ALL.contains(&ev.ty.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(id: &str) -> SessionOptions {
        SessionOptions { id: Some(id.to_string()), ..SessionOptions::default() }
    }

    #[test]
    fn every_way_of_naming_a_new_session_checks_the_id() {
        let mut bad: Vec<String> = ["", "a\0b", "line\n", "del\u{7f}"].map(str::to_string).to_vec();
        bad.push("x".repeat(MAX_SESSION_ID_BYTES + 1));
        // Every way of giving a new session its id applies the rule: a memory store, a file, a
        // fork (the host store and the URL options go through the same `new_id` and
        // `session_options`).
        let dir = tempfile::tempdir().unwrap();
        for id in &bad {
            let e = Session::create(Box::new(MemoryStore::new()), with_id(id)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", e.message());
            let path = dir.path().join("s.jsonl");
            let e = Session::open_jsonl(&path, with_id(id)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", e.message());
            let parent = Session::in_memory();
            let e = parent.fork(None, Box::new(MemoryStore::new()), with_id(id)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", e.message());
        }
        let s = Session::create(Box::new(MemoryStore::new()), with_id("ünï/côdé id with spaces")).unwrap();
        assert_eq!(s.id(), "ünï/côdé id with spaces");
    }

    #[test]
    fn session_options_check_the_id() {
        for (v, needle) in [
            (serde_json::json!({"id": ""}), "opts.id: must not be empty"),
            (serde_json::json!({"id": "a\nb"}), "opts.id: the session id holds the control character U+000A"),
        ] {
            let e = crate::store::options::session_options(Some(&v), "opts", &[]).err().expect("refused");
            assert!(e.message().contains(needle), "{} lacks {needle:?}", e.message());
            assert_eq!(e.detail()["field"], "opts.id");
        }
    }
}
