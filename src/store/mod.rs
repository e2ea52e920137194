//! Storage for a session log (docs/contract.md §2.5, §2.6): in memory
//! ([`MemoryStore`]), a JSONL file ([`JsonlStore`], the embedded default), a PostgreSQL database
//! ([`postgres::PgStore`], with the `postgres` feature, on by default), or a store the host
//! keeps ([`host::HostStore`], a JSON request/reply protocol; the C ABI carries it over a host
//! callback).
//!
//! A store holds records: the session header first, then one event per record, each a line of
//! JSON without its newline. The rules every store follows are written down once, here and in
//! `docs/storage.md`:
//!
//! - **One writer.** A store opened for writing is the only writer of its session: a second
//!   writer is refused when it opens ([`ErrorKind::Locked`](crate::ErrorKind::Locked)). A store
//!   opened read-only takes no write lock and refuses appends
//!   ([`ErrorKind::ReadOnly`](crate::ErrorKind::ReadOnly)).
//! - **Conditional, atomic appends.** Every append is a [`Batch`] that names the seq its first
//!   event must have. A store whose next seq is not that one refuses the whole batch
//!   ([`ErrorKind::Conflict`](crate::ErrorKind::Conflict)) and writes nothing; a store that fails
//!   (an I/O error) leaves nothing of the batch behind, or at most a torn last record that
//!   loading cuts. A store never removes a record another writer wrote.
//! - **Durability.** [`Store::sync`] makes every appended record durable; the [`Durability`]
//!   policy decides when the session calls it.
//! - **Evidence is kept.** Records that loading cuts (a torn or damaged tail) are moved aside
//!   ([`Store::cut`]), not destroyed.

pub mod conformance;
pub mod file;
pub mod host;
mod jsonl;
pub mod options;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod url;

pub use jsonl::{child_path, children_beside, FileOptions, JsonlStore};

use crate::error::{Error, ErrorKind, Result};
use crate::log::Text;
use std::sync::Arc;

/// When appended events are made durable (fsync for a file, a synchronous commit for a
/// database).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// After every event.
    EveryEvent,
    /// After every `turn/end` (and after repairs and compactions).
    #[default]
    TurnEnd,
    /// Never explicitly (the OS or the database server decides).
    Never,
}

impl Durability {
    /// Parses "every-event" | "turn-end" | "never".
    pub fn parse(s: &str) -> Result<Durability> {
        match s {
            "every-event" => Ok(Durability::EveryEvent),
            "turn-end" => Ok(Durability::TurnEnd),
            "never" => Ok(Durability::Never),
            other => Err(Error::invalid("durability", format!("expected \"every-event\", \"turn-end\" or \"never\", got {other:?}"))),
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::EveryEvent => "every-event",
            Durability::TurnEnd => "turn-end",
            Durability::Never => "never",
        }
    }
}

/// What a store holds when a session is opened (or, for [`Store::load_from`], what it holds
/// from a record on).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreContents {
    /// The records in order (raw bytes: a damaged file may hold invalid UTF-8).
    pub records: Vec<Vec<u8>>,
    /// Whether the last record was completely written (a file's last line ended with '\n').
    pub last_complete: bool,
}

impl StoreContents {
    /// Splits the bytes of a JSONL log into records, one per line; a last line without its
    /// newline is a torn record (`last_complete` is false).
    pub fn from_jsonl(bytes: &[u8]) -> StoreContents {
        let (ranges, last_complete) = jsonl_ranges(bytes);
        StoreContents::of_ranges(bytes, &ranges, last_complete)
    }

    /// The records `ranges` of `bytes` (as [`jsonl_ranges`] finds them), each copied.
    pub(crate) fn of_ranges(bytes: &[u8], ranges: &[(usize, usize)], last_complete: bool) -> StoreContents {
        StoreContents { records: ranges.iter().map(|&(start, end)| bytes[start..end].to_vec()).collect(), last_complete }
    }
}

/// A stored log read whole into one text (a JSONL file): its records are ranges of the text,
/// so the lines of the session loaded from it share the one buffer instead of each being copied
/// ([`Store::load_text`]).
#[derive(Clone, Debug)]
pub struct StoreText {
    /// The stored bytes, valid UTF-8.
    pub text: Arc<String>,
    /// Each record's byte range in `text`, without its newline, in order.
    pub records: Vec<(usize, usize)>,
    /// Whether the last record was completely written (as [`StoreContents::last_complete`]).
    pub last_complete: bool,
}

impl StoreText {
    /// Record `i`'s bytes.
    pub fn record(&self, i: usize) -> &[u8] {
        let (start, end) = self.records[i];
        &self.text.as_bytes()[start..end]
    }
}

/// What a bounded open reads ([`Store::load_window`]): the session header record and the
/// records from just before a checkpoint's window to the end of the log (docs/log.md,
/// "Checkpoints").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreWindow {
    /// The session header record.
    pub header: Vec<u8>,
    /// The seq of the checkpoint the window belongs to (its record is among `records`).
    pub checkpoint: u64,
    /// The seq of the event record 0 holds: the one before the checkpoint's window start
    /// (its chain value starts the window's chain), or 0 when the window starts at the first
    /// event.
    pub from: u64,
    /// The event records from `from` to the end of the log, one after the other in one buffer
    /// (a JSONL store hands over what it read, with no copy per record)...
    pub text: Vec<u8>,
    /// ...at these byte ranges, in the records' order (their places in `text` may be in
    /// another: a database's rows come in the order of its scan).
    pub records: Vec<(usize, usize)>,
    /// Whether the last record was completely written (as [`StoreContents::last_complete`]).
    pub last_complete: bool,
}

impl StoreWindow {
    /// A window of records held one by one (joined into one buffer).
    pub fn of_records<R: AsRef<[u8]>>(header: Vec<u8>, checkpoint: u64, from: u64, records: &[R], last_complete: bool) -> StoreWindow {
        let mut text = Vec::with_capacity(records.iter().map(|r| r.as_ref().len()).sum());
        let mut ranges = Vec::with_capacity(records.len());
        for r in records {
            ranges.push((text.len(), text.len() + r.as_ref().len()));
            text.extend_from_slice(r.as_ref());
        }
        StoreWindow { header, checkpoint, from, text, records: ranges, last_complete }
    }

    /// Record `i`'s bytes (record 0 is event `from`).
    pub fn record(&self, i: usize) -> &[u8] {
        let (a, b) = self.records[i];
        &self.text[a..b]
    }

    /// How many records the window holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the window holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// Where the window of the checkpoint record `rec` starts (see
/// [`crate::log::checkpoint`]): the seq of the first record a bounded open reads after
/// `from`, or `None` when `rec` is not a checkpoint. The first record a store hands over is
/// the one before it (for its chain value), or event 0.
pub fn window_from(rec: &[u8]) -> Option<u64> {
    crate::log::load::checkpoint_window(rec).map(|w| w.saturating_sub(1))
}

/// Whether a record is a checkpoint, by the way it starts (every record this library writes
/// starts with its type): `{"type":"session/checkpoint",`.
pub fn is_checkpoint_record(rec: &[u8]) -> bool {
    rec.starts_with(CHECKPOINT_PREFIX.as_bytes())
}

/// How a checkpoint record starts (what a store can index to find the last one).
pub const CHECKPOINT_PREFIX: &str = "{\"type\":\"session/checkpoint\",";

/// A stored log's records one at a time, for a reader whose memory must not follow the log's
/// length (`verify`): each record is handed over and dropped before the next is read. It owns
/// what it reads from (a file descriptor of its own, a database pool), so it is used without the
/// store (or the session holding it) being locked.
pub trait RecordStream: Send {
    /// The next record (the session header first) and whether it was completely written (a
    /// JSONL line that ends with its newline); `None` after the last.
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>>;
    /// How many bytes the records hold in all, when the store knows (for progress).
    fn total_bytes(&self) -> Option<u64> {
        None
    }
    /// How many records there are in all, when the store knows (for progress).
    fn total_records(&self) -> Option<u64> {
        None
    }
}

/// Records held in memory, as a [`RecordStream`].
pub struct RecordsInMemory {
    records: std::vec::IntoIter<Vec<u8>>,
    last_complete: bool,
    total: u64,
    bytes: u64,
}

impl RecordsInMemory {
    /// The stream of `contents`' records.
    pub fn new(contents: StoreContents) -> RecordsInMemory {
        let total = contents.records.len() as u64;
        let bytes = contents.records.iter().map(|r| r.len() as u64 + 1).sum();
        RecordsInMemory { records: contents.records.into_iter(), last_complete: contents.last_complete, total, bytes }
    }
}

impl RecordStream for RecordsInMemory {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>> {
        Ok(self.records.next().map(|r| {
            let complete = self.records.len() > 0 || self.last_complete;
            (r, complete)
        }))
    }
    fn total_bytes(&self) -> Option<u64> {
        Some(self.bytes)
    }
    fn total_records(&self) -> Option<u64> {
        Some(self.total)
    }
}

/// The first `n` records of a stream.
pub struct FirstRecords<S> {
    inner: S,
    left: u64,
    limit: u64,
}

impl<S: RecordStream> FirstRecords<S> {
    /// At most `n` records of `inner`.
    pub fn new(inner: S, n: u64) -> FirstRecords<S> {
        FirstRecords { inner, left: n, limit: n }
    }
}

impl<S: RecordStream> RecordStream for FirstRecords<S> {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.inner.next_record()
    }
    fn total_bytes(&self) -> Option<u64> {
        self.inner.total_bytes()
    }
    fn total_records(&self) -> Option<u64> {
        Some(self.inner.total_records().map_or(self.limit, |t| t.min(self.limit)))
    }
}

impl RecordStream for Box<dyn RecordStream> {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>> {
        (**self).next_record()
    }
    fn total_bytes(&self) -> Option<u64> {
        (**self).total_bytes()
    }
    fn total_records(&self) -> Option<u64> {
        (**self).total_records()
    }
}

/// The byte range of every line of a JSONL log (without its newline), and whether the last one
/// ended with its newline (a last line without one is a torn record, still listed).
pub(crate) fn jsonl_ranges(bytes: &[u8]) -> (Vec<(usize, usize)>, bool) {
    let mut ranges = Vec::new();
    let mut start = 0;
    for i in memchr::memchr_iter(b'\n', bytes) {
        ranges.push((start, i));
        start = i + 1;
    }
    let last_complete = start == bytes.len();
    if !last_complete {
        ranges.push((start, bytes.len()));
    }
    (ranges, last_complete)
}

/// One atomic, conditional append: the records of `events` become the events with seqs
/// `seq, seq + 1, ...` of session `session_id`, all of them or none.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// The session the records belong to.
    pub session_id: &'a str,
    /// The session header record, when this batch creates the session (then `seq` is 0).
    pub header: Option<&'a str>,
    /// The seq the first event record must have: the number of events the store holds.
    pub seq: u64,
    /// The event records (JSON lines without their newline).
    pub events: &'a [Text],
}

impl Batch<'_> {
    /// The number of records the batch writes (header included).
    pub fn len(&self) -> usize {
        self.events.len() + usize::from(self.header.is_some())
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A new, empty store for a session made from another (a fork, a child), with the file it
/// created, if it created one (a failed fork or spawn removes it again).
pub type NewStore = (Box<dyn Store>, Option<String>);

/// A place to keep a session log. See the module docs for the rules every store follows.
pub trait Store: Send {
    /// Every stored record, in order (the session header first).
    fn load(&mut self) -> Result<StoreContents>;

    /// Every stored record as [`load`](Self::load) gives them, held as one text whose ranges
    /// are the records, for a store that reads its log whole (a JSONL file): a session opened
    /// from it keeps that one buffer as its lines instead of a copy per record. `None` (the
    /// default): the store has no such form, and [`load`](Self::load) is used.
    fn load_text(&mut self) -> Result<Option<StoreText>> {
        Ok(None)
    }

    /// The records from record `from` on (`from` counts the header: the first event is record
    /// 1), for a refresh. A torn last record is reported through `last_complete`, not as an
    /// error. The default loads everything and drops the first `from` records.
    fn load_from(&mut self, from: usize) -> Result<StoreContents> {
        let mut c = self.load()?;
        if from >= c.records.len() {
            c.records.clear();
            c.last_complete = true;
        } else {
            c.records.drain(..from);
        }
        Ok(c)
    }

    /// The records a bounded open reads: the session header and the records from the window of
    /// the last checkpoint (the last one before event `before`, when given) to the end of the
    /// log, found without reading the log from its start ([`StoreWindow`]). `None` (the
    /// default): the store holds no checkpoint there, or cannot find one cheaply; the open then
    /// reads the whole log ([`load`](Self::load)).
    fn load_window(&mut self, before: Option<u64>) -> Result<Option<StoreWindow>> {
        let _ = before;
        Ok(None)
    }

    /// Every record, one at a time, for a streaming reader ([`RecordStream`]); the stream owns
    /// what it reads from. The default loads everything first.
    fn record_stream(&mut self) -> Result<Box<dyn RecordStream>> {
        Ok(Box::new(RecordsInMemory::new(self.load()?)))
    }

    /// The records `from..to` (record indexes: the header is 0), for a reader of older events
    /// than a bounded open holds. The default loads everything.
    fn read_records(&mut self, from: usize, to: usize) -> Result<Vec<Vec<u8>>> {
        let mut c = self.load()?;
        c.records.truncate(to);
        c.records.drain(..from.min(c.records.len()));
        Ok(c.records)
    }

    /// Appends a batch, all or nothing, if the store's next seq is `batch.seq` (and, with a
    /// header, the store holds no session yet); otherwise [`ErrorKind::Conflict`] and nothing is
    /// written.
    fn append(&mut self, batch: &Batch<'_>) -> Result<()>;

    /// Makes every appended record durable.
    fn sync(&mut self) -> Result<()>;

    /// Removes the records of this handle's last append, which start at record `from` (the
    /// header is record 0): after the append failed (whatever part of it reached the store) or
    /// could not be made durable. Only ever removes what this handle wrote; nothing to remove is
    /// no error.
    fn undo(&mut self, from: usize) -> Result<()>;

    /// Moves the records from record `keep` on out of the log (a torn or damaged tail found on
    /// open), keeping them as evidence; returns where they went (a file, a table), if anywhere.
    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>>;

    /// A short description for messages ("memory", a file path, ...).
    fn describe(&self) -> String;

    /// Whether this store was opened read-only (appends are refused).
    fn read_only(&self) -> bool {
        false
    }

    /// The file the log is kept in, for a store that keeps it in one (a JSONL file).
    fn file_path(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// A new, empty store for the child session `id` of the session this store holds, where a
    /// child lives by default (`lls_agent_spawn` without `path` or `url`): a JSONL file beside
    /// this one named after it with `tag` (a file-name-safe form of the call id), the same
    /// database, or memory for a session in memory. `None` (the default, a host store): there is
    /// no such place, and the host names one. With the store, the file it created (if it created
    /// one), for a failed spawn to remove again.
    fn child_store(&self, _tag: &str, _id: &str, _durability: Durability) -> Result<Option<NewStore>> {
        Ok(None)
    }
}

/// The error a read-only store gives for a write.
pub fn read_only_error(store: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::ReadOnly,
        format!("{store}: opened read-only, so it cannot {what}; open it for writing (one writer at a time) to change it"),
    )
    .with("store", store.to_string())
}

/// The error for a batch whose seq is not the store's next one.
pub fn conflict_error(store: &str, want: u64, have: u64) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "{store}: the append names seq {want}, but the store holds {have} events: another writer appended to this session; refresh or reopen it"
        ),
    )
    .with("store", store.to_string())
    .with("seq", want)
    .with("storeSeq", have)
}

/// The window of a store that holds its records as a list (header first): the last checkpoint
/// before `before`, searched from the end.
pub(crate) fn window_of_records<R: AsRef<[u8]>>(records: &[R], before: Option<u64>) -> Option<StoreWindow> {
    let end = match before {
        Some(b) => (b as usize + 1).min(records.len()),
        None => records.len(),
    };
    let (at, from) = (1..end).rev().find_map(|i| {
        let rec = records[i].as_ref();
        if !is_checkpoint_record(rec) {
            return None;
        }
        window_from(rec).map(|f| (i, f))
    })?;
    let from = from.min(at as u64 - 1);
    Some(StoreWindow::of_records(records[0].as_ref().to_vec(), at as u64 - 1, from, &records[from as usize + 1..], true))
}

/// Records in memory.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    records: Vec<String>,
    cut: Vec<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store holding these records (for tests and tools).
    pub fn with_records(records: Vec<String>) -> MemoryStore {
        MemoryStore { records, cut: Vec::new() }
    }

    /// The stored records.
    pub fn records(&self) -> &[String] {
        &self.records
    }

    /// The records that [`Store::cut`] moved aside, in order.
    pub fn cut_records(&self) -> &[String] {
        &self.cut
    }
}

impl Store for MemoryStore {
    fn load(&mut self) -> Result<StoreContents> {
        Ok(StoreContents { records: self.records.iter().map(|r| r.as_bytes().to_vec()).collect(), last_complete: true })
    }
    fn load_window(&mut self, before: Option<u64>) -> Result<Option<StoreWindow>> {
        Ok(window_of_records(&self.records, before))
    }
    fn read_records(&mut self, from: usize, to: usize) -> Result<Vec<Vec<u8>>> {
        Ok(self.records[from.min(self.records.len())..to.min(self.records.len())].iter().map(|r| r.as_bytes().to_vec()).collect())
    }
    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        let have = self.records.len().saturating_sub(1) as u64;
        if batch.header.is_some() != self.records.is_empty() || (!self.records.is_empty() && have != batch.seq) {
            return Err(conflict_error("memory", batch.seq, have));
        }
        if let Some(h) = batch.header {
            self.records.push(h.to_string());
        }
        self.records.extend(batch.events.iter().map(|r| r.to_string()));
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn undo(&mut self, from: usize) -> Result<()> {
        self.records.truncate(from);
        Ok(())
    }
    fn cut(&mut self, keep: usize, _reason: &str) -> Result<Option<String>> {
        if keep < self.records.len() {
            let tail = self.records.split_off(keep);
            self.cut.extend(tail);
        }
        Ok(None)
    }
    fn describe(&self) -> String {
        "memory".into()
    }
    fn child_store(&self, _tag: &str, _id: &str, _durability: Durability) -> Result<Option<NewStore>> {
        Ok(Some((Box::new(MemoryStore::new()), None)))
    }
}
