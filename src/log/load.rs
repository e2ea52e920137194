//! Loading a stored log (docs/contract.md §2.7).
//!
//! The first record is the session header; it must name format `llmsession`, version 1 or 2.
//! In a version 2 log every event record carries a chained digest ([`crate::log::chain`]); it is
//! checked first, so an edited, inserted, removed or reordered record is damage at its line.
//! Every event is then checked exactly as an append would be. A record whose chain does not
//! match is an error wherever it is. A damaged record (unparseable, or
//! rejected by validation) is tolerated only when no complete turn follows it: a torn last line
//! from a crash mid-write, or damage inside the trailing unfinished turn. Everything from that
//! record on is cut. A last record without its newline counts as torn even when it parses.
//! Damage before the end of the last complete turn is an error naming the line. A turn left open by a crash is closed by [`repair_events`].
//!
//! Every reader of a stored log (verify, explain, replay, the CLI's commands) reads it through
//! [`read_checked`]: the same checks, and a refusal (naming the line) where an open would cut
//! damage from an unfinished last turn.

use crate::error::{Error, ErrorKind, Result};
use crate::log::checkpoint;
use crate::log::event::{types, Event, NewEvent, TurnEndReason};
use crate::log::history::Derived;
use crate::log::rules::as_corrupt;
use crate::log::{chain, Effect, Log, Text};
use crate::store::{StoreContents, StoreText, StoreWindow};
use crate::types::{Fields, JsonMap};
use serde_json::{json, Value};
use std::sync::Arc;

/// The format name in the session header.
pub const FORMAT: &str = "llmsession";
/// The log format version this library writes: version 2 chains every event record.
pub const VERSION: u64 = 2;
/// The oldest log format version this library reads. A version 1 log (no chain) is read as it
/// is, and the events appended to it are written as version 1 records, so a file never mixes
/// the two; `docs/log.md` says how to upgrade one.
pub const OLDEST_VERSION: u64 = 1;

/// The first record of a stored log.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionHeader {
    /// The session id.
    pub id: String,
    /// Creation time, Unix ms.
    pub created_at: u64,
    /// For a fork or a child: the parent session id and how many events were seeded from it
    /// (for a child, the seq of the parent's `agent/spawn` event that started it).
    pub parent: Option<(String, u64)>,
    /// For a fork or a child: every ancestor, oldest first, with the seq where its events end in
    /// this log (the last entry is the parent). Requests rebuilt from seeded events carry the
    /// session id (the cache key) of the session that sent them.
    pub lineage: Vec<Ancestor>,
    /// For a child spawned by an agent ([`crate::agent::SpawnOptions`]): the call it answers,
    /// the cache key its requests carry, its turn budget.
    pub spawn: Option<SpawnLink>,
    /// The log format version: 2 (chained) for new sessions, 1 for older logs.
    pub version: u64,
    /// Other fields, carried through.
    pub extra: JsonMap,
}

impl SessionHeader {
    /// Parses a session header record (line 1).
    pub fn from_value(v: &Value) -> Result<SessionHeader> {
        let f = Fields::of(v, "")?;
        let ty = f.str("type")?;
        if ty != "session" {
            return Err(Error::invalid("type", format!("the first record must be the session header (type \"session\"), got {ty:?}")));
        }
        let format = f.str("format")?;
        if format != FORMAT {
            return Err(Error::invalid("format", format!("expected {FORMAT:?}, got {format:?}")));
        }
        let version = f.u64("version")?;
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(Error::invalid(
                "version",
                format!("unsupported log version {version} (this library reads versions {OLDEST_VERSION} to {VERSION})"),
            ));
        }
        let id = f.str("id")?;
        if id.is_empty() {
            return Err(Error::invalid("id", "must not be empty"));
        }
        let parent = match f.opt_value("parent")? {
            None => None,
            Some(p) => {
                let pf = Fields::of(p, "parent")?;
                Some((pf.str("id")?.to_string(), pf.u64("seedLength")?))
            }
        };
        let mut lineage = Vec::new();
        if let Some(a) = f.opt_array("lineage")? {
            for (i, e) in a.iter().enumerate() {
                let path = format!("lineage[{i}]");
                let ef = Fields::of(e, &path)?;
                let cache_key = ef.opt_str("cacheKey")?.map(str::to_string);
                lineage.push(Ancestor { id: ef.str("id")?.to_string(), seed_length: ef.u64("seedLength")?, cache_key });
            }
        } else if let Some((id, n)) = &parent {
            lineage.push(Ancestor { id: id.clone(), seed_length: *n, cache_key: None });
        }
        if lineage.last().map(|a| (&a.id, a.seed_length)) != parent.as_ref().map(|(id, n)| (id, *n)) {
            return Err(Error::invalid("lineage", "the last ancestor must be the parent"));
        }
        let spawn = match f.opt_value("spawn")? {
            None => None,
            Some(v) => {
                if parent.is_none() {
                    return Err(Error::invalid("spawn", "a child names its parent (the `parent` field)"));
                }
                Some(SpawnLink::from_value(v, "spawn")?)
            }
        };
        Ok(SessionHeader {
            id: id.to_string(),
            created_at: f.u64("createdAt")?,
            parent,
            lineage,
            spawn,
            version,
            extra: f.extra(&["type", "format", "version", "id", "createdAt", "parent", "lineage", "spawn"]),
        })
    }

    /// The header record.
    pub fn to_value(&self) -> Value {
        let mut m = JsonMap::new();
        m.insert("type".into(), "session".into());
        m.insert("format".into(), FORMAT.into());
        m.insert("version".into(), self.version.into());
        m.insert("id".into(), self.id.clone().into());
        m.insert("createdAt".into(), self.created_at.into());
        if let Some((id, n)) = &self.parent {
            m.insert("parent".into(), json!({"id": id, "seedLength": n}));
            let lineage: Vec<Value> = self.lineage.iter().map(Ancestor::to_value).collect();
            m.insert("lineage".into(), Value::Array(lineage));
        }
        if let Some(s) = &self.spawn {
            m.insert("spawn".into(), s.to_value());
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

impl SessionHeader {
    /// A new session's header (the current format version, no parent).
    pub fn new(id: String, created_at: u64) -> SessionHeader {
        SessionHeader { id, created_at, parent: None, lineage: Vec::new(), spawn: None, version: VERSION, extra: JsonMap::new() }
    }

    /// Whether the log's event records carry the chained digest (version 2 and later).
    pub fn chained(&self) -> bool {
        self.version >= 2
    }

    /// The empty log this header starts: chained from `record` (the header's stored bytes)
    /// for a version 2 log.
    pub fn start_log(&self, record: &[u8]) -> Log {
        if self.chained() {
            Log::chained(chain::start(record))
        } else {
            Log::new()
        }
    }

    /// The session id this session's requests carry (the envelope's `sessionId`, the default
    /// cache key): its own id, or for a child its parent's ([`SpawnLink::cache_key`]).
    pub fn request_id(&self) -> &str {
        self.spawn.as_ref().map(|s| s.cache_key.as_str()).unwrap_or(&self.id)
    }

    /// The session id the request of event `seq` carries: the request id of the session that
    /// appended the event (an ancestor's for seeded events, see [`request_id`](Self::request_id)).
    pub fn session_id_at(&self, seq: u64) -> &str {
        match self.lineage.iter().find(|a| seq < a.seed_length) {
            Some(a) => a.cache_key.as_deref().unwrap_or(&a.id),
            None => self.request_id(),
        }
    }

    /// The lineage of a fork (or a child) of this session seeded with `n` events.
    pub fn fork_lineage(&self, n: u64) -> Vec<Ancestor> {
        let mut out: Vec<Ancestor> = Vec::new();
        let mut start = 0;
        for a in &self.lineage {
            if start >= n {
                break;
            }
            out.push(Ancestor { seed_length: a.seed_length.min(n), ..a.clone() });
            start = a.seed_length;
        }
        // The parent always ends the lineage (loading requires it), even when every seeded
        // event came from an earlier ancestor or the seed is empty.
        out.push(Ancestor { id: self.id.clone(), seed_length: n, cache_key: self.spawn.as_ref().map(|s| s.cache_key.clone()) });
        out
    }
}

/// An ancestor of a fork or a child, in its session header's `lineage`: `{"id", "seedLength",
/// "cacheKey"?}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ancestor {
    /// The ancestor's session id.
    pub id: String,
    /// The seq where its events end in this log.
    pub seed_length: u64,
    /// The session id its requests carried, when not `id` (the ancestor was itself a child).
    pub cache_key: Option<String>,
}

impl Ancestor {
    /// The header's JSON form.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"id": self.id, "seedLength": self.seed_length});
        if let Some(k) = &self.cache_key {
            v["cacheKey"] = k.clone().into();
        }
        v
    }
}

/// The child link of a spawned session's header: `"spawn": {"callId"?, "cacheKey", "maxTurns"?}`
/// (docs/log.md, "Agent trees"). The parent and the parent's seq are the header's `parent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnLink {
    /// The parent's tool call the child answers (`None`: spawned at a turn boundary).
    pub call_id: Option<String>,
    /// The session id every request of the child carries: the parent's request id, so that
    /// the default cache key routes the child with its parent.
    pub cache_key: String,
    /// How many requests the child may send (`None`: no limit).
    pub max_turns: Option<u64>,
}

impl SpawnLink {
    /// Parses the header's `spawn` object at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<SpawnLink> {
        let f = Fields::of(v, path)?;
        if let Some(k) = f.map.keys().find(|k| !["callId", "cacheKey", "maxTurns"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a field of the child link (expected callId, cacheKey, maxTurns)"));
        }
        let cache_key = f.str("cacheKey")?;
        if cache_key.is_empty() {
            return Err(Error::invalid(f.p("cacheKey"), "must not be empty"));
        }
        Ok(SpawnLink {
            call_id: f.opt_str("callId")?.map(str::to_string),
            cache_key: cache_key.to_string(),
            max_turns: f.opt_u64("maxTurns")?,
        })
    }

    /// The header's JSON form.
    pub fn to_value(&self) -> Value {
        let mut m = JsonMap::new();
        if let Some(c) = &self.call_id {
            m.insert("callId".into(), c.clone().into());
        }
        m.insert("cacheKey".into(), self.cache_key.clone().into());
        if let Some(n) = self.max_turns {
            m.insert("maxTurns".into(), n.into());
        }
        Value::Object(m)
    }
}

/// What loading found and did. Its JSON (`Serialize`) is what `lls_session_load_report`
/// returns: `{"cutRecords", "repairedEvents"}`, plus `cutAtLine`, `cutReason`, `cutDamaged`
/// and `cutSavedTo` when something was cut.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Records cut from the end (a torn line, damage in the unfinished last turn).
    pub cut_records: usize,
    /// The 1-based line of the first record that was cut, if any.
    pub cut_at_line: Option<usize>,
    /// Why it was cut.
    pub cut_reason: Option<String>,
    /// Whether the cut starts at a damaged record (false: only a torn last line was cut).
    pub cut_damaged: bool,
    /// Where the cut records were kept (a sidecar file, a quarantine table), if anywhere.
    pub cut_saved_to: Option<String>,
    /// Synthetic events appended to close a turn left open.
    pub repaired_events: usize,
}

impl serde::Serialize for LoadReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("cutRecords", &self.cut_records)?;
        m.serialize_entry("repairedEvents", &self.repaired_events)?;
        if let Some(l) = self.cut_at_line {
            m.serialize_entry("cutAtLine", &l)?;
        }
        if let Some(why) = &self.cut_reason {
            m.serialize_entry("cutReason", why)?;
        }
        if self.cut_records > 0 {
            m.serialize_entry("cutDamaged", &self.cut_damaged)?;
        }
        if let Some(p) = &self.cut_saved_to {
            m.serialize_entry("cutSavedTo", p)?;
        }
        m.end()
    }
}

/// The result of reading a store: header, valid events, and what to cut.
pub struct Loaded {
    /// The session header.
    pub header: SessionHeader,
    /// The replayed log.
    pub log: Log,
    /// What was found.
    pub report: LoadReport,
    /// How many records are valid (header included); the store must be cut to this.
    pub keep_records: usize,
}

/// Checks one stored event record (that it parses, then its chain link in a chained log, then
/// the log rules) and appends it. The record's buffer is released once it is read; a chained
/// record is kept verbatim as the event's line, an unchained one is re-serialised.
pub(crate) fn load_record(log: &mut Log, rec: &mut Vec<u8>) -> Result<()> {
    load_one(log, rec, None, None, |rec| Text::from(String::from_utf8(std::mem::take(rec)).expect("parse_record checked UTF-8")))?;
    // An unchained record's line was re-serialised: its buffer is not needed either.
    *rec = Vec::new();
    Ok(())
}

/// [`load_record`] for a record whose stored line `line` makes (a range of the file it was read
/// from, or its own buffer moved into the line), once the record is accepted.
///
/// A record in the form this library writes is checked from its bytes ([`read_canonical`]);
/// any other record, and any record that fails a check, is read the long way: parsed into an
/// [`Event`], its chain checked, the log rules applied, each failure reported as it always was.
///
/// `text` is the record as text when the caller holds it so (already checked as UTF-8);
/// `link` is the record's chain check when it was done beside the load ([`ChainFeed`]).
fn load_one<R: AsRef<[u8]>>(
    log: &mut Log,
    rec: &mut R,
    text: Option<&str>,
    link: Option<&ChainCheck>,
    line: impl FnOnce(&mut R) -> Text,
) -> Result<()> {
    if let Some((ev, effect, link)) = read_canonical(log, rec.as_ref(), text, link) {
        log.commit_sealed(&ev, effect, line(rec), link);
        return Ok(());
    }
    let ev = parse_record(rec.as_ref())?;
    let link = match log.chain_head() {
        Some(prev) => {
            Some(chain_check(prev, rec.as_ref(), link).map_err(|why| Error::new(ErrorKind::CorruptLog, why).with("chain", true))?)
        }
        None => None,
    };
    match link {
        None => {
            log.append_sized(&ev, rec.as_ref().len() + 1)?;
        }
        Some(link) => {
            let effect = log.check(&ev)?;
            log.commit_sealed(&ev, effect, line(rec), Some(link));
        }
    }
    Ok(())
}

/// The fast way of [`load_one`]: a record in canonical form (`crate::log::raw`: the bytes
/// `serde_json` writes, which is what this library writes) read from its bytes once. Its chain
/// is checked as the long way checks it; a visible event's derived message is projected from
/// the record (`crate::log::project`) and given to the log rules, which then read the event's
/// other fields from an [`Event`] whose data leaves the message out (the data of any other event
/// is parsed whole: those records are small). A chained record's line is the record; so is an
/// unchained one's, since serialising a canonical record's event writes the record again.
///
/// `None` wherever the long way must decide: a record of another form, and one that any check
/// refuses (the long way then says why, as before). So the fast way accepts exactly what the
/// long way accepts, with the same state; debug builds run the long way beside it and compare.
fn read_canonical<'a>(
    log: &Log,
    rec: &'a [u8],
    text: Option<&'a str>,
    link: Option<&ChainCheck>,
) -> Option<(Event, Effect, Option<chain::Link>)> {
    let text = match text {
        Some(t) => t,
        None => std::str::from_utf8(rec).ok()?,
    };
    let raw = crate::log::raw::read(text)?;
    if raw.chained != log.chain_head().is_some() {
        return None;
    }
    let visible = types::is_model_visible(raw.ty);
    let projected = if visible { Some(crate::log::project::project(&raw)?) } else { None };
    // The data's members from their text (a visible event's message is the projection's).
    let message = match (visible, raw.ty == types::TOOL_RESULT) {
        (false, _) => None,
        (true, true) => Some("content"),
        (true, false) => Some("message"),
    };
    let mut m = JsonMap::new();
    for (k, v) in raw.data.iter().filter(|(k, _)| Some(*k) != message) {
        m.insert(k.to_string(), crate::log::raw::value_of(v)?);
    }
    let data = Value::Object(m);
    let surface_op = raw.append.then_some(crate::log::SurfaceOp::Append);
    let ev = Event { ty: raw.ty.to_string(), seq: raw.seq, time: raw.time, data, surface_op, sources: None };
    let link = match log.chain_head() {
        Some(prev) => Some(chain_check(prev, rec, link).ok()?),
        None => None,
    };
    let effect = match projected {
        Some(p) => log.check_projected(&ev, p),
        None => log.check(&ev),
    }
    .ok()?;
    #[cfg(debug_assertions)]
    {
        let long = parse_record(rec).expect("a canonical record parses");
        assert_eq!((&long.ty, long.seq, long.time, long.surface_op, &long.sources), (&ev.ty, ev.seq, ev.time, ev.surface_op, &ev.sources));
        let mut data = long.data.clone();
        if let (Some(key), Some(o)) = (message, data.as_object_mut()) {
            o.remove(key);
        }
        assert_eq!(data, ev.data, "the fast way's data is the long way's");
        let long_effect = log.check(&long).expect("the long way accepts what the fast way accepts");
        assert_eq!(format!("{effect:?}"), format!("{long_effect:?}"), "the fast way's effect is the long way's");
        if link.is_none() {
            assert_eq!(long.to_json(), text, "an unchained canonical record is its event serialised");
        }
    }
    Some((ev, effect, link))
}

/// What [`chain::check`] says of a record.
type ChainCheck = std::result::Result<chain::Link, String>;

/// [`chain::check`] of `rec` after `prev`, or its result when it was checked beside the load.
fn chain_check(prev: &chain::Link, rec: &[u8], done: Option<&ChainCheck>) -> ChainCheck {
    match done {
        Some(r) => {
            debug_assert_eq!(r, &chain::check(prev, rec), "the chain checked beside the load is the chain");
            r.clone()
        }
        None => chain::check(prev, rec),
    }
}

/// The chain checks of a whole load's records, done on a thread of their own beside the load
/// (on one core the two take turns): record after record from the header's digest, as the load
/// would check them, until the first that fails. A record the load accepts follows the records
/// it accepted before, so its chain value is the one the thread started its check from.
struct ChainFeed {
    rx: std::sync::mpsc::Receiver<Vec<ChainCheck>>,
    batch: std::vec::IntoIter<ChainCheck>,
    /// The record whose check comes next.
    next: usize,
    /// The check of the record asked for last.
    last: Option<ChainCheck>,
}

/// Records checked per message from the chain thread.
const CHAIN_BATCH: usize = 1024;

impl ChainFeed {
    /// Starts the thread that checks the chain of `text`'s event records (from record 1) after
    /// `start` (the header's digest).
    fn start<'scope>(scope: &'scope std::thread::Scope<'scope, '_>, text: &'scope StoreText, start: chain::Link) -> ChainFeed {
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        scope.spawn(move || {
            let mut prev = start;
            let mut batch = Vec::with_capacity(CHAIN_BATCH);
            for i in 1..text.records.len() {
                let r = chain::check(&prev, text.record(i));
                let failed = match &r {
                    Ok(link) => {
                        prev = *link;
                        false
                    }
                    Err(_) => true,
                };
                batch.push(r);
                if failed || batch.len() == CHAIN_BATCH {
                    // The load stopped (its receiver is gone): so does this.
                    if tx.send(std::mem::replace(&mut batch, Vec::with_capacity(CHAIN_BATCH))).is_err() || failed {
                        return;
                    }
                }
            }
            let _ = tx.send(batch);
        });
        ChainFeed { rx, batch: Vec::new().into_iter(), next: 1, last: None }
    }

    /// The check of record `i` (records are asked for in order, each once), or `None` when the
    /// thread stopped before it (after a record that failed).
    fn get(&mut self, i: usize) -> Option<&ChainCheck> {
        debug_assert_eq!(i, self.next, "records are loaded in order");
        self.next = i + 1;
        self.last = match self.batch.next() {
            Some(r) => Some(r),
            None => {
                self.batch = self.rx.recv().ok()?.into_iter();
                self.batch.next()
            }
        };
        self.last.as_ref()
    }
}

/// Parses an event record (its envelope; the rules are checked apart).
pub(crate) fn parse_event(rec: &[u8]) -> Result<Event> {
    parse_record(rec)
}

fn parse_record(rec: &[u8]) -> Result<Event> {
    let text = std::str::from_utf8(rec).map_err(|e| Error::new(ErrorKind::MalformedJson, format!("invalid UTF-8: {e}")))?;
    Event::from_json(text)
}

/// Reads store contents into a log (see the module docs for the damage rules).
pub fn load_records(contents: &StoreContents) -> Result<Loaded> {
    load_records_releasing(&mut contents.clone())
}

/// [`load_records`], releasing each record's buffer once it is read (the records before the
/// last one read are left empty; how many there are does not change). Loading a long log then
/// does not hold the file's records until the end: the memory they free is reused by the log
/// being built, instead of remaining as free space between its allocations.
pub fn load_records_releasing(contents: &mut StoreContents) -> Result<Loaded> {
    let last_complete = contents.last_complete;
    load_from_source(&mut OwnedRecords(&mut contents.records), last_complete)
}

/// Reads a log held as one text (a JSONL file read whole, [`StoreText`]) into a log whose
/// lines are ranges of that text: the same checks as [`load_records`], without a copy of any
/// record. The chain of a long chained log is checked on a thread beside the rest
/// ([`ChainFeed`]).
pub fn load_text(contents: &StoreText) -> Result<Loaded> {
    let chained = contents.records.len() > 4096 && parse_header(contents.record(0)).is_ok_and(|h| h.chained());
    if !chained {
        return load_from_source(&mut SharedRecords(contents, None), contents.last_complete);
    }
    std::thread::scope(|scope| {
        let feed = ChainFeed::start(scope, contents, chain::start(contents.record(0)));
        // The source (and the feed's receiver) is dropped before the scope ends, which stops
        // the thread if the load stopped early.
        load_from_source(&mut SharedRecords(contents, Some(feed)), contents.last_complete)
    })
}

/// The records a log is loaded from.
trait RecordSource {
    /// How many records there are (the header included).
    fn len(&self) -> usize;
    /// Record `i`'s bytes (empty once [`load`](Self::load) has taken it).
    fn bytes(&self, i: usize) -> &[u8];
    /// Checks record `i` and appends it to `log` (see [`load_record`]).
    fn load(&mut self, log: &mut Log, i: usize) -> Result<()>;
}

/// Records in buffers of their own ([`StoreContents`]): each is moved into its line.
struct OwnedRecords<'a>(&'a mut Vec<Vec<u8>>);

impl RecordSource for OwnedRecords<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn bytes(&self, i: usize) -> &[u8] {
        &self.0[i]
    }
    fn load(&mut self, log: &mut Log, i: usize) -> Result<()> {
        load_record(log, &mut self.0[i])
    }
}

/// The records of a store's window: each line is copied out of the window's buffer.
struct CopiedRecords<'a>(&'a StoreWindow);

impl RecordSource for CopiedRecords<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn bytes(&self, i: usize) -> &[u8] {
        self.0.record(i)
    }
    fn load(&mut self, log: &mut Log, i: usize) -> Result<()> {
        let mut rec = self.0.record(i);
        load_one(log, &mut rec, None, None, |r| Text::from(std::str::from_utf8(r).expect("parse_record checked UTF-8")))
    }
}

/// Records as ranges of one text ([`StoreText`]): each line shares the text; the chain may be
/// checked beside the load.
struct SharedRecords<'a>(&'a StoreText, Option<ChainFeed>);

impl RecordSource for SharedRecords<'_> {
    fn len(&self) -> usize {
        self.0.records.len()
    }
    fn bytes(&self, i: usize) -> &[u8] {
        self.0.record(i)
    }
    fn load(&mut self, log: &mut Log, i: usize) -> Result<()> {
        let (start, end) = self.0.records[i];
        let text = &self.0.text[start..end];
        let mut rec = text.as_bytes();
        let link = self.1.as_mut().and_then(|f| f.get(i));
        load_one(log, &mut rec, Some(text), link, |_| Text::shared(&self.0.text, start, end))
    }
}

/// Parses a session header record (line 1 of a log).
pub(crate) fn parse_header(first: &[u8]) -> Result<SessionHeader> {
    let header_value: Value = std::str::from_utf8(first)
        .map_err(|e| Error::new(ErrorKind::MalformedJson, format!("invalid UTF-8: {e}")))
        .and_then(|t| serde_json::from_str(t).map_err(Error::from))
        .map_err(|e| as_corrupt(e, 1))?;
    SessionHeader::from_value(&header_value).map_err(|e| as_corrupt(e, 1))
}

fn load_from_source(records: &mut dyn RecordSource, last_complete: bool) -> Result<Loaded> {
    let count = records.len();
    if count == 0 {
        return Err(Error::new(ErrorKind::CorruptLog, "the store is empty: no session header"));
    }
    let first = records.bytes(0);
    if count == 1 && !last_complete {
        return Err(Error::new(ErrorKind::CorruptLog, "line 1: the session header is incomplete").with("line", 1u64));
    }
    let header = parse_header(first)?;
    let mut log = header.start_log(first);
    // A last record without its newline was cut short by a crash, even when it happens to
    // parse: its append never returned, and keeping it would glue the next record onto it.
    log.reserve(count.saturating_sub(1));
    load_tail(header, log, records, 1, 0, last_complete)
}

/// Checks and appends `records` from index `start` on to `log` (record `i` is line
/// `i + 1 + line_offset`), with the damage rules of the module docs: the common part of a
/// whole load and of a bounded open's tail.
fn load_tail(
    header: SessionHeader,
    mut log: Log,
    records: &mut dyn RecordSource,
    start: usize,
    line_offset: usize,
    last_complete: bool,
) -> Result<Loaded> {
    let count = records.len();
    let whole = if last_complete { count } else { count - 1 };
    let mut report = LoadReport::default();
    let mut keep = whole;
    for i in start..whole {
        let line = i + 1 + line_offset;
        let outcome = records.load(&mut log, i);
        if let Err(e) = outcome {
            // A complete record that parses but does not match its chained digest was edited
            // (or records around it were moved): a crash cuts records short, it never rewrites
            // one. That is an error wherever it is, the last turn included.
            if e.detail().contains_key("chain") {
                return Err(as_corrupt(e, line).context("the log was changed after it was written"));
            }
            let is_last = i == count - 1;
            let later_complete_turn =
                (i + 1..whole).any(|k| parse_record(records.bytes(k)).map(|ev| ev.ty == types::TURN_END).unwrap_or(false));
            if !is_last && later_complete_turn {
                return Err(as_corrupt(e, line).context("damage before the last complete turn"));
            }
            report.cut_reason = Some(format!("line {line}: {}", e.message()));
            report.cut_damaged = true;
            keep = i;
            break;
        }
    }
    if keep < count {
        report.cut_records = count - keep;
        report.cut_at_line = Some(keep + 1 + line_offset);
        if report.cut_reason.is_none() {
            report.cut_reason =
                Some(format!("line {}: the last line is incomplete (no newline): a write stopped mid-record", keep + 1 + line_offset));
        }
    }
    Ok(Loaded { header, log, report, keep_records: keep + line_offset })
}

/// The type and seq an event record starts with (`{"type":"…","seq":N`), read without parsing
/// the record: every record this library writes starts so. `None` for anything else.
pub fn record_head(rec: &[u8]) -> Option<(&str, u64)> {
    let rest = rec.strip_prefix(b"{\"type\":\"")?;
    let mut i = 0;
    while i < rest.len() {
        match rest[i] {
            b'\\' => i += 2,
            b'"' => break,
            _ => i += 1,
        }
    }
    let ty = std::str::from_utf8(rest.get(..i)?).ok()?;
    let rest = rest.get(i..)?.strip_prefix(b"\",\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let seq = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    Some((ty, seq))
}

/// The window start of a checkpoint record (the first seq a bounded open reads: see
/// [`checkpoint`]), or `None` when the record is not a checkpoint that parses.
pub fn checkpoint_window(rec: &[u8]) -> Option<u64> {
    let (ty, _) = record_head(rec)?;
    if ty != types::CHECKPOINT {
        return None;
    }
    let ev = parse_record(rec).ok()?;
    checkpoint::window_of(&ev.data).ok()
}

/// How an open checks a stored log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpenCheck {
    /// From the last checkpoint (the default): the chain over the records it reads, the log
    /// rules over the events after the checkpoint; the state is restored from the checkpoint
    /// (`docs/log.md`, "What an open checks"). A log without a checkpoint is read whole.
    #[default]
    Bounded,
    /// Everything, as `verify` reads the log (every record's chain, every event's rules, every
    /// checkpoint recomputed), without rebuilding the requests.
    Full,
}

impl OpenCheck {
    /// Parses `"bounded"` or `"full"`.
    pub fn parse(s: &str, path: &str) -> Result<OpenCheck> {
        match s {
            "bounded" => Ok(OpenCheck::Bounded),
            "full" => Ok(OpenCheck::Full),
            other => Err(Error::invalid(path, format!("expected \"bounded\" or \"full\", got {other:?}"))),
        }
    }
}

/// A bounded open: the state restored from the checkpoint a store's window was found from,
/// the chain checked over every record of the window, the log rules over the events after the
/// checkpoint (with the damage rules of a whole load). The log holds the lines from the
/// checkpoint on. `docs/log.md` ("What an open checks") says what this leaves to `verify`.
pub fn load_window(win: &mut StoreWindow) -> Result<Loaded> {
    let (header, log, ci) = restore_window(win)?;
    // The tail: checked as a whole load checks it, each line copied out of the window's buffer
    // (which is dropped once the open is done).
    let mut tail = CopiedRecords(win);
    load_tail(header, log, &mut tail, ci + 1, win.from as usize + 1, win.last_complete)
}

/// The events after the checkpoint of a store's window, for a reader that walks them from the
/// state the checkpoint restores (`show` and `explain` of a recent request): the session
/// header, the log restored at the checkpoint (its lines not held), and the events after it,
/// each checked against the chain (a torn last record is left out) but not yet against the log
/// rules (the reader's walk applies them).
pub struct WindowEvents {
    /// The session header.
    pub header: SessionHeader,
    /// The log restored at the checkpoint (see [`load_window`]).
    pub log: Log,
    /// The events after the checkpoint, in order.
    pub events: Vec<Event>,
}

/// Reads a store's window as [`WindowEvents`].
pub fn window_events(win: &mut StoreWindow) -> Result<WindowEvents> {
    let (header, log, ci) = restore_window(win)?;
    let mut prev = *log.chain_head().expect("a restored log is chained");
    let n = win.len();
    let mut events = Vec::with_capacity(n - ci - 1);
    for i in ci + 1..n {
        if i == n - 1 && !win.last_complete {
            break;
        }
        let seq = win.from + i as u64;
        let rec = win.record(i);
        prev = chain::check(&prev, rec).map_err(|why| {
            as_corrupt(Error::new(ErrorKind::CorruptLog, why).with("chain", true), seq as usize + 2)
                .context("the log was changed after it was written")
        })?;
        events.push(parse_record(rec).map_err(|e| as_corrupt(e, seq as usize + 2))?);
    }
    let mut log = log;
    log.forget_lines();
    Ok(WindowEvents { header, log, events })
}

/// The part of a bounded open up to the checkpoint: the header, the chain over the window up to
/// the checkpoint, the state restored from it, and the index of the checkpoint's record.
fn restore_window(win: &mut StoreWindow) -> Result<(SessionHeader, Log, usize)> {
    let header = parse_header(&win.header)?;
    if !header.chained() {
        return Err(Error::new(ErrorKind::CorruptLog, "line 1: a version 1 log has no checkpoints").with("line", 1u64));
    }
    let line_of = |seq: u64| seq as usize + 2;
    let corrupt = |seq: u64, e: Error| as_corrupt(e, line_of(seq));
    let n = win.len();
    let whole = if win.last_complete { n } else { n.saturating_sub(1) };
    // The checkpoint and where its window starts.
    let c = win.checkpoint;
    let ci = c.checked_sub(win.from).map(|i| i as usize).filter(|&i| i < whole).ok_or_else(|| {
        Error::new(ErrorKind::Internal, format!("the store's window (from seq {}) does not hold checkpoint {c}", win.from))
    })?;
    let cp = parse_record(win.record(ci)).map_err(|e| corrupt(c, e))?;
    if cp.ty != types::CHECKPOINT || cp.seq != c {
        return Err(corrupt(c, Error::invalid("type", "the record the store named as the last checkpoint is not one")));
    }
    let w = checkpoint::window_of(&cp.data).map_err(|e| corrupt(c, e))?;
    let (prev, first) = if w == 0 {
        if win.from != 0 {
            return Err(Error::new(ErrorKind::Internal, "the store's window does not start at the first event"));
        }
        (chain::start(&win.header), 0usize)
    } else {
        if win.from + 1 != w {
            return Err(Error::new(ErrorKind::Internal, format!("the store's window starts at seq {}, not {}", win.from, w - 1)));
        }
        let link = chain::stored_link(std::str::from_utf8(win.record(0)).unwrap_or(""))
            .and_then(|h| chain::parse_link(h))
            .ok_or_else(|| corrupt(win.from, Error::invalid("chain", "the record before the checkpoint's window has no chain value")))?;
        (link, 1usize)
    };
    let base_seq = checkpoint::base_of(&cp.data);
    // The chain over the window through the checkpoint, checked on a thread of its own while
    // this one derives the window's visible events (on one core the two take their turns).
    let chained = |prev: chain::Link| -> std::result::Result<chain::Link, (usize, String)> {
        let mut prev = prev;
        for i in first..=ci {
            prev = chain::check(&prev, win.record(i)).map_err(|why| (i, why))?;
        }
        Ok(prev)
    };
    let (chain_result, derived) = std::thread::scope(|scope| {
        let checker = (ci - first > 4096).then(|| scope.spawn(|| chained(prev)));
        let derived = derive_window(win, first, ci, base_seq);
        let chain_result = match checker {
            Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            None => chained(prev),
        };
        (chain_result, derived)
    });
    // The first problem in log order: a broken chain at or before a record that does not
    // derive is reported as the chain's.
    let chain_error = chain_result.as_ref().err().map(|(i, _)| *i);
    let derive_error = derived.as_ref().err().map(|(i, _)| *i);
    match (chain_result, derived) {
        (Err((i, why)), _) if derive_error.is_none_or(|d| i <= d) => {
            let seq = win.from + i as u64;
            return Err(corrupt(seq, Error::new(ErrorKind::CorruptLog, why).with("chain", true))
                .context("the log was changed after it was written"));
        }
        (_, Err((i, e))) if chain_error.is_none_or(|c| i < c) => return Err(corrupt(win.from + i as u64, e)),
        (Ok(link), Ok((base, appended))) => finish_restore(win, header, cp, c, ci, base_seq, base, appended, link),
        _ => unreachable!("every error is one of the two above"),
    }
}

/// The visible events of a window up to its checkpoint (records `first..ci`) derived, and the
/// data of its base checkpoint (`base_seq`); an error names the record index where it is.
#[allow(clippy::type_complexity)]
fn derive_window(
    win: &StoreWindow,
    first: usize,
    ci: usize,
    base_seq: Option<u64>,
) -> std::result::Result<(Option<Value>, Vec<Arc<Derived>>), (usize, Error)> {
    let mut base: Option<Value> = None;
    // Written straight into runs: a bounded open's history is one allocation per run.
    let mut appended = crate::log::history::RunWriter::default();
    for i in first..ci {
        let seq = win.from + i as u64;
        let rec = win.record(i);
        let (ty, at) = record_head(rec).ok_or_else(|| (i, Error::invalid("type", "the record does not start with its type and seq")))?;
        if at != seq {
            return Err((i, Error::invalid("seq", format!("expected {seq} (seqs are contiguous from 0), got {at}"))));
        }
        if Some(seq) == base_seq {
            base = Some(parse_record(rec).map_err(|e| (i, e))?.data);
        } else if types::is_model_visible(ty) {
            // From the record's bytes when it is in the form this library writes; the long way
            // (parse the event, derive its message) otherwise.
            let start = appended.separate();
            let projected = std::str::from_utf8(rec)
                .ok()
                .and_then(crate::log::raw::read)
                .and_then(|r| crate::log::project::project_into(&r, appended.run()));
            match projected {
                Some(p) => {
                    #[cfg(debug_assertions)]
                    {
                        let ev = parse_record(rec).expect("a projected record parses");
                        let long = crate::log::history::derive(&ev).expect("a projected record derives").expect("visible");
                        debug_assert_eq!(&appended.run()[start..], long.json.as_str(), "the projection from bytes is the derived message");
                    }
                    appended.commit(p.parts, start);
                }
                None => {
                    appended.unseparate(start);
                    let ev = parse_record(rec).map_err(|e| (i, e))?;
                    if ev.surface_op != Some(crate::log::SurfaceOp::Append) {
                        return Err((i, Error::invalid("surfaceOp", "a replace after the checkpoint's last replace")));
                    }
                    appended.push(crate::log::history::derive(&ev).map_err(|e| (i, e))?.expect("a visible event"));
                }
            }
        }
    }
    Ok((base, appended.finish()))
}

/// The end of [`restore_window`]: the state restored from the checkpoint.
#[allow(clippy::too_many_arguments)]
fn finish_restore(
    win: &StoreWindow,
    header: SessionHeader,
    cp: Event,
    c: u64,
    ci: usize,
    base_seq: Option<u64>,
    base: Option<Value>,
    appended: Vec<Arc<Derived>>,
    prev: chain::Link,
) -> Result<(SessionHeader, Log, usize)> {
    let corrupt = |seq: u64, e: Error| as_corrupt(e, seq as usize + 2);
    if base_seq.is_some() && base.is_none() {
        return Err(corrupt(c, Error::invalid("data.base", "names no checkpoint in its window")));
    }
    let state = checkpoint::restore(&cp, base.as_ref(), checkpoint::Surface::Derived(appended)).map_err(|e| corrupt(c, e))?;
    let mut log = Log::restored(c, state, Some(prev));
    // The checkpoint's own line starts the lines the log holds.
    let cp_line = std::str::from_utf8(win.record(ci)).expect("checked as UTF-8 when parsed");
    log.push_restored_line(Text::from(cp_line));
    Ok((header, log, ci))
}

/// A stored log as every reader of a log reads it ([`read_checked`]): its session header and its
/// events, each checked as an open checks it. There is no other way to make one, so a reader
/// that takes a `CheckedLog` (explain, replay, the CLI's commands) cannot skip the checks.
#[derive(Clone, Debug)]
pub struct CheckedLog {
    header: SessionHeader,
    events: Vec<Event>,
    report: LoadReport,
}

impl CheckedLog {
    /// The session header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The events, in seq order (seq 0 first, no gap).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// What loading found: at most a torn last record left out (`cut_damaged` is never set).
    pub fn report(&self) -> &LoadReport {
        &self.report
    }
}

/// Reads a stored log for a reader (verify, explain, replay, the CLI's commands) through the one
/// loading path an open uses ([`load_records`]): the session header, the chained digest of every
/// record in a version 2 log, the log rules for every event (contiguous seqs included). Where
/// an open would cut damage from an unfinished last turn, a reader refuses instead: the log is
/// [`ErrorKind::CorruptLog`] naming the line (detail `line`), as `verify` reports it. Only a torn
/// last record (no newline: a write cut short) is left out, as an open leaves it out.
pub fn read_checked(contents: &StoreContents) -> Result<CheckedLog> {
    checked(load_records(contents)?)
}

/// [`read_checked`] for a log given as its records (session header first), the last one
/// complete.
pub fn read_checked_records(records: &[Vec<u8>]) -> Result<CheckedLog> {
    checked(load_records_releasing(&mut StoreContents { records: records.to_vec(), last_complete: true })?)
}

/// What a reader makes of a loaded log: a refusal where an open would cut damage.
fn checked(loaded: Loaded) -> Result<CheckedLog> {
    if loaded.report.cut_damaged {
        let line = loaded.report.cut_at_line.unwrap_or(0);
        let why = loaded.report.cut_reason.clone().unwrap_or_default();
        return Err(Error::new(
            ErrorKind::CorruptLog,
            format!("{why} (opening the log for writing would cut {} records from line {line})", loaded.report.cut_records),
        )
        .with("line", line as u64));
    }
    let events = (0..loaded.log.len() as u64).map(|seq| loaded.log.event(seq).expect("in range")).collect();
    Ok(CheckedLog { header: loaded.header, events, report: loaded.report })
}

/// The synthetic events that close a turn left open by a crash, in the order they must be
/// appended: missing `tool/call`s of an answered step, `step/end`, an error result for every
/// pending tool call, `turn/end{interrupted}`; an open compaction is closed first.
pub fn repair_events(log: &Log) -> Vec<NewEvent> {
    let st = log.state();
    let mut out = Vec::new();
    if let Some(c) = &st.compaction {
        let outcome = if c.landed { "landed" } else { "failed" };
        let mut data = json!({"outcome": outcome});
        if !c.landed {
            data["error"] = "interrupted: the session stopped before the compaction finished".into();
        }
        out.push(NewEvent::new(types::COMPACTION_END, data));
    }
    let mut pending: Vec<String> = st.pending.iter().map(|p| p.id.clone()).collect();
    if let Some(t) = &st.open_turn {
        if t.step_open {
            for (id, name, args) in &t.calls_to_log {
                out.push(NewEvent::new(
                    types::TOOL_CALL,
                    json!({"turn": t.turn, "step": t.last_step, "callId": id, "name": name, "arguments": args}),
                ));
                pending.push(id.clone());
            }
            let outcome = if t.step_answered {
                json!({"turn": t.turn, "step": t.last_step, "outcome": "response"})
            } else {
                json!({"turn": t.turn, "step": t.last_step, "outcome": "error", "error": "interrupted: the session stopped before the response arrived"})
            };
            out.push(NewEvent::new(types::STEP_END, outcome));
        }
    }
    for id in pending {
        out.push(NewEvent::visible(
            types::TOOL_RESULT,
            json!({"callId": id, "content": [{"type":"text","text":"interrupted: the session stopped before this tool call returned a result"}], "isError": true}),
        ));
    }
    if let Some(t) = &st.open_turn {
        out.push(NewEvent::new(types::TURN_END, json!({"turn": t.turn, "reason": TurnEndReason::Interrupted.as_str()})));
    }
    out
}

/// Parses records into the session header and events without any other check: no chained
/// digest, no log rule, no seq order. Not for reading a stored log (a reader reads it with
/// [`read_checked`]); for code that holds records it has already checked (an agent rebuilding
/// its own request) and for tests that hand [`crate::request::verify_events`] broken events.
/// Every record must parse; a torn last line is skipped.
pub fn parse_records(records: &[Vec<u8>]) -> Result<(SessionHeader, Vec<Event>)> {
    let first = records.first().ok_or_else(|| Error::new(ErrorKind::CorruptLog, "the log is empty: no session header"))?;
    let header_value: Value = std::str::from_utf8(first)
        .map_err(|e| Error::new(ErrorKind::MalformedJson, format!("invalid UTF-8: {e}")))
        .and_then(|t| serde_json::from_str(t).map_err(Error::from))
        .map_err(|e| as_corrupt(e, 1))?;
    let header = SessionHeader::from_value(&header_value).map_err(|e| as_corrupt(e, 1))?;
    let mut events = Vec::with_capacity(records.len());
    for (i, rec) in records.iter().enumerate().skip(1) {
        match parse_record(rec) {
            Ok(ev) => events.push(ev),
            Err(_) if i == records.len() - 1 => break,
            Err(e) => return Err(as_corrupt(e, i + 1)),
        }
    }
    Ok((header, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::NewEvent;

    /// Every record this library writes, odd contents included (escapes and control characters,
    /// unknown fields, quotes in ids, blocks of unknown types, a host's own type), is read the
    /// fast way (debug builds compare it with the long way as it goes); the same records in
    /// another form are not (the long way reads them), and both load to the same state.
    #[test]
    fn this_librarys_records_are_read_the_fast_way() {
        let s = crate::Session::in_memory();
        let digest = format!("sha256:{}", "0".repeat(64));
        let events = [
            NewEvent::new(
                types::REQUEST_HEADER,
                json!({"header": {"config": {"provider": "p", "model": "m"}, "system": "s\n\"q\""}, "reason": "initial", "instance": 1}),
            ),
            NewEvent::new(types::TURN_START, json!({"turn": 1})),
            NewEvent::visible(
                types::USER_MESSAGE,
                json!({"source": "user", "tag": {"b": [1, -2], "a": null},
                "message": {"role": "user", "meta": "m", "content": [{"type": "text", "text": "a\u{0}\u{1f}\u{7f}\"\\/é𝄞\u{2028}"}, {"type": "image", "url": "u"}]}}),
            ),
            NewEvent::new(types::STEP_START, json!({"turn": 1, "step": 1, "instance": 1, "digest": digest, "bytes": 3})),
            NewEvent::visible(
                types::ASSISTANT_MESSAGE,
                json!({"turn": 1, "step": 1, "usage": {"inputTokens": 3, "outputTokens": 1},
                "message": {"role": "assistant", "provenance": {"provider": "p", "model": "m", "x": [1]}, "z": 1,
                    "content": [{"type": "reasoning", "text": "r", "signature": "s"}, {"type": "tool-call", "id": "c\"1", "name": "n", "arguments": "{\"a\":\"\\\\\"}"}]}}),
            ),
            NewEvent::new(types::TOOL_CALL, json!({"turn": 1, "step": 1, "callId": "c\"1", "name": "n", "arguments": "{\"a\":\"\\\\\"}"})),
            NewEvent::new(types::STEP_END, json!({"turn": 1, "step": 1, "outcome": "response"})),
            NewEvent::visible(
                types::TOOL_RESULT,
                json!({"callId": "c\"1", "isError": true, "more": {"k": 18446744073709551615u64},
                "content": [{"type": "text", "text": "\t"}, {"type": "tool-result", "toolCallId": "x", "isError": false, "content": []}]}),
            ),
            NewEvent::new("acme/note", json!({"n": -9223372036854775808i64, "deep": [[[[{}]]]]})),
            NewEvent::new(types::TURN_END, json!({"turn": 1, "reason": "completed"})),
        ];
        for ev in events {
            s.append(ev).unwrap();
        }
        let records: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
        let header = parse_header(records[0].as_bytes()).unwrap();
        let mut fast = header.start_log(records[0].as_bytes());
        let mut long = header.start_log(records[0].as_bytes());
        for rec in &records[1..] {
            assert!(read_canonical(&fast, rec.as_bytes(), None, None).is_some(), "{rec}");
            load_record(&mut fast, &mut rec.as_bytes().to_vec()).unwrap();
            // The same event in another form (a space after the envelope's first member),
            // chained again: the long way.
            let odd = chain::without_chain(rec).replacen(',', ", ", 1);
            assert!(crate::log::raw::read(&odd).is_none(), "{odd}");
            let (odd, _) = chain::seal(long.chain_head().unwrap(), &odd);
            assert!(read_canonical(&long, odd.as_bytes(), None, None).is_none(), "{odd}");
            load_record(&mut long, &mut odd.into_bytes()).unwrap();
        }
        assert_eq!(fast.len(), records.len() - 1);
        let history = |l: &Log| {
            l.history().entries().iter().map(|d| (d.seq, d.json.to_string(), d.calls.clone(), d.result_for.clone())).collect::<Vec<_>>()
        };
        assert_eq!(history(&fast), history(&long));
        assert_eq!(checkpoint::data(fast.state()), checkpoint::data(long.state()));
        assert_eq!(fast.state().known_calls, long.state().known_calls);
    }
}
