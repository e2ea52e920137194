//! The PostgreSQL store: sessions in a database, so a session outlives the machine that wrote
//! it and any worker that can reach the database can resume it (`docs/storage-postgres.md`).
//!
//! - **Records verbatim.** Each event record is stored exactly as the log writes it (chain field
//!   included) in `llmsession_records`, keyed by `(session_id, seq)`; the session header record,
//!   its creation time and parent, the head (number of events and the chain value of the last
//!   one) and the writer lease are a row of `llmsession_sessions` ([`schema`]).
//! - **A fenced lease, no pinned connection** ([`lease`]): a writing open takes the session's
//!   lease with a conditional write that raises its epoch (the fencing token); the pool renews
//!   it; every write is conditional on the head seq *and* the epoch in the same statement, so a
//!   writer that lost its lease never writes after the new holder. A second writer is refused
//!   with [`ErrorKind::Locked`] naming the holder.
//! - **Pooled connections, every call bounded** ([`pool`]): sessions opened on one database
//!   share a bounded pool (a session holds a connection only while a call runs; a
//!   transaction-mode pooler works: every statement is one unnamed, typed round trip), and every
//!   call has a bound (`connect_timeout`, `query_timeout`, `lease_timeout`, `pool_timeout`);
//!   past one, the error names it and says whether the write's outcome is unknown ([`error`]).
//! - **TLS** with libpq's `sslmode` meanings ([`tls`], [`config`]).
//! - **Durability.** With [`Durability::EveryEvent`] every batch commits with the server's own
//!   synchronous level: nothing acknowledged is lost by a server crash (nor, with synchronous
//!   replication, by a failover). With `TurnEnd` and `Never` batches commit with
//!   `synchronous_commit = off`, and [`Store::sync`] (at turn ends, repairs and compactions, with
//!   `TurnEnd`) commits a small write synchronously, which makes every earlier commit durable: a
//!   server crash loses at most what was appended after the last sync point (with `Never`: at
//!   most the server's last few hundred milliseconds of commits). A client crash loses nothing
//!   committed.
//! - **An unknown outcome.** A write whose outcome is unknown (the connection broke or the bound
//!   ran out after it was sent) makes the handle refuse every further write until the session is
//!   reopened; the reopen reads what the database holds.
//! - **Quarantine.** [`Store::cut`] moves the cut records to `llmsession_quarantine` with the
//!   reason and the time, in the same transaction that moves the head back.
//! - **Tail truncation is damage.** Loading compares the stored records with the head: records
//!   missing at the end (which a chain alone cannot show) or a last chain value that differs is
//!   [`ErrorKind::CorruptLog`].

mod config;
mod error;
mod lease;
mod pool;
mod schema;
mod tls;

pub use config::{PgUrl, Settings, SslMode, TlsSettings};
pub use schema::SCHEMA_VERSION;

use super::url::{ParentInfo, SessionInfo};
use super::{conflict_error, read_only_error, Batch, Durability, RecordStream, Store, StoreContents, StoreWindow};
use crate::error::{Error, ErrorKind, Result};
use crate::log::chain;
use crate::log::load::SessionHeader;
use error::CallError;
use lease::Lease;
use pool::{block_on, Bound, Pool};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_postgres::types::Type;

/// The longest session id accepted (the rule every store shares).
pub const MAX_ID_BYTES: usize = crate::session_id::MAX_SESSION_ID_BYTES;

const APPEND_SQL: &str = "
WITH h AS (
    UPDATE llmsession_sessions
       SET events = $2 + cardinality($3::text[]), chain_head = COALESCE($4, chain_head), updated_at = now(),
           lease_expires = now() + make_interval(secs => $6)
     WHERE id = $1 AND events = $2 AND header IS NOT NULL AND lease_epoch = $5 AND lease_holder IS NOT NULL
 RETURNING id
), ins AS (
    INSERT INTO llmsession_records (session_id, seq, record)
    SELECT h.id, $2 + t.i - 1, t.r FROM h, unnest($3::text[]) WITH ORDINALITY AS t(r, i)
 RETURNING 1
)
SELECT set_config('synchronous_commit', $7, true), (SELECT count(*) FROM h), (SELECT count(*) FROM ins)";

const CREATE_SQL: &str = "
WITH h AS (
    UPDATE llmsession_sessions
       SET header = $2, created_ms = $3, parent_id = $4, parent_seed = $5, parent_call = $10, spawned = $11,
           events = cardinality($6::text[]), chain_head = $7, updated_at = now()
     WHERE id = $1 AND header IS NULL AND lease_epoch = $8 AND lease_holder IS NOT NULL
 RETURNING id
), ins AS (
    INSERT INTO llmsession_records (session_id, seq, record)
    SELECT h.id, t.i - 1, t.r FROM h, unnest($6::text[]) WITH ORDINALITY AS t(r, i)
 RETURNING 1
)
SELECT set_config('synchronous_commit', $9, true), (SELECT count(*) FROM h), (SELECT count(*) FROM ins)";

const SYNC_SQL: &str = "
WITH u AS (
    UPDATE llmsession_sessions SET synced_events = events WHERE id = $1 AND lease_epoch = $2 AND lease_holder IS NOT NULL
 RETURNING 1
)
SELECT set_config('synchronous_commit', $3, true), (SELECT count(*) FROM u)";

/// The head and the records from a seq on, in one statement (so one snapshot): the head row
/// is seq -1 (the header record, the number of events, the last chain value). [`READ_SQL`] and
/// [`WINDOW_SQL`] are this statement, in seq order and in the order rows come.
macro_rules! head_and_records {
    () => {
        "
SELECT -1::bigint AS seq, header AS record, events, chain_head FROM llmsession_sessions WHERE id = $1 AND header IS NOT NULL
UNION ALL
SELECT seq, record, NULL, NULL FROM llmsession_records WHERE session_id = $1 AND seq >= $2"
    };
}

/// The head and the records from a seq on, head row first ([`head_and_records`]).
const READ_SQL: &str = concat!(head_and_records!(), "\nORDER BY 1");

/// A checkpoint's window (`PgStore::read_window`): the head (the row of seq -1), and the
/// records from a seq on, a row each, in one statement (one snapshot). Rows, not one value of
/// the whole window: a pooled connection's receive buffer grows to the largest message it reads
/// and keeps that size, so a window read as one value left a buffer of its size in every
/// connection that read one. No `ORDER BY`: the reader puts the records in seq order itself (they
/// come in the order of the plan's scan, usually already in order), so no plan sorts the window
/// through a temporary file; it checks that the seqs run without a gap and the chain, so a record
/// missing or out of place is an error, never a different log.
const WINDOW_SQL: &str = head_and_records!();

/// Puts a window's records (their `ranges`, in the order the rows came) in the order of their
/// `seqs`, and says whether the seqs run from `start` without a gap. Seqs are unique (the
/// primary key), so they do when the last is `start + count - 1`.
fn in_seq_order(ranges: &mut Vec<(usize, usize)>, seqs: &mut Vec<i64>, start: i64) -> bool {
    if !seqs.windows(2).all(|w| w[0] < w[1]) {
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_unstable_by_key(|&i| seqs[i]);
        *ranges = order.iter().map(|&i| ranges[i]).collect();
        *seqs = order.iter().map(|&i| seqs[i]).collect();
    }
    seqs.first() == Some(&start) && seqs.last().is_some_and(|&l| l - start + 1 == seqs.len() as i64)
}

/// How a PostgreSQL session is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// Open without the lease; appends are refused and nothing is written.
    pub read_only: bool,
    /// A writing open may create the session when the database holds none with this id
    /// (otherwise the open fails with [`ErrorKind::InvalidInput`]).
    pub create: bool,
    /// The session's durability policy (the module docs say what each loses in a server crash).
    pub durability: Durability,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions { read_only: false, create: true, durability: Durability::default() }
    }
}

/// One session in a PostgreSQL database.
pub struct PgStore {
    pool: Arc<Pool>,
    /// The database's URL, where a child session is created by default ([`Store::child_store`]).
    url: PgUrl,
    /// `postgres://user@host:port/db?session=ID`, for messages.
    describe: String,
    id: String,
    read_only: bool,
    /// The writer's lease (`None` read-only).
    lease: Option<Arc<Lease>>,
    /// `synchronous_commit` of a sync point.
    sync_level: String,
    /// Batches commit synchronously (every-event durability).
    sync_each: bool,
    /// Asynchronous commits made since the last sync.
    pending: bool,
    /// The head as this handle knows it: events stored and the last one's chain value.
    events: u64,
    chain_head: Option<String>,
    /// This handle's last append: its first record index and the head before it.
    last_append: Option<(usize, u64, Option<String>)>,
    /// Why this handle writes nothing more (an unknown outcome, a lost lease): the kind, the
    /// reason, and the detail every later refusal repeats.
    dead: Option<(ErrorKind, String, Vec<(String, Value)>)>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("store", &self.describe).field("read_only", &self.read_only).finish()
    }
}

/// Checks a session id for the database: the rule every store shares
/// ([`crate::session_id::check_session_id`]: 1 to 1,024 bytes, no control characters).
pub fn check_id(id: &str) -> Result<()> {
    crate::session_id::check_session_id(id)
}

/// The chain value a stored record ends with, if it has one.
fn chain_of(record: &str) -> Option<String> {
    chain::stored_link(record).map(str::to_string)
}

fn corrupt(store: &str, why: String) -> Error {
    Error::new(ErrorKind::CorruptLog, format!("{store}: {why}")).with("store", store.to_string())
}

impl PgStore {
    /// Opens session `id` in the database at `url`: for writing (taking the lease, creating the
    /// tables on first use) or read-only.
    pub fn open(url: &PgUrl, id: &str, opts: PgOptions) -> Result<PgStore> {
        check_id(id)?;
        if let Some(s) = url.session() {
            if s != id {
                return Err(Error::invalid("id", format!("the URL names session {s:?} but the options name {id:?}")));
            }
        }
        let describe = format!("{}{}session={}", url.shown(), if url.shown().contains('?') { "&" } else { "?" }, id);
        let pool = Pool::for_url(url)?;
        block_on(async {
            let sync_level = sync_level(&pool, &describe).await?;
            let mut store = PgStore {
                pool: pool.clone(),
                url: url.clone(),
                describe,
                id: id.to_string(),
                read_only: opts.read_only,
                lease: None,
                sync_level,
                sync_each: opts.durability == Durability::EveryEvent,
                pending: false,
                events: 0,
                chain_head: None,
                last_append: None,
                dead: None,
            };
            if opts.read_only {
                match schema::version(&pool, &store.describe).await? {
                    None => return Err(store.missing("the database has no llmsession tables yet")),
                    Some(v) => schema::check(&store.describe, v)?,
                }
                if !store.exists().await? {
                    return Err(store.missing("no such session"));
                }
                return Ok(store);
            }
            schema::ensure(&pool, &store.describe).await?;
            if !opts.create && !store.exists().await? {
                return Err(store.missing("no such session (the open may not create one)"));
            }
            pool.query(Bound::Lease, "INSERT INTO llmsession_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", &[(&id, Type::TEXT)])
                .await
                .map_err(|e| e.into_error(&store.describe, "cannot register the session"))?;
            store.lease = Some(lease::take(&pool, id, &store.describe).await?);
            Ok(store)
        })
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.id
    }

    /// The fencing token of this handle's lease (`None` read-only).
    pub fn lease_epoch(&self) -> Option<i64> {
        self.lease.as_ref().map(|l| l.epoch)
    }

    fn missing(&self, why: &str) -> Error {
        Error::invalid("id", format!("{}: holds no session {:?}: {why}", self.pool.shown, self.id))
            .with("store", self.pool.shown.clone())
            .with("id", self.id.clone())
    }

    async fn exists(&self) -> Result<bool> {
        let rows = self
            .pool
            .query(Bound::Query, "SELECT header IS NOT NULL FROM llmsession_sessions WHERE id = $1", &[(&self.id, Type::TEXT)])
            .await
            .map_err(|e| e.into_error(&self.describe, "cannot look the session up"))?;
        Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0)))
    }

    /// Refuses a write when the handle is read-only, marked dead, or its lease was found taken
    /// over; returns the lease's epoch.
    fn writable(&mut self, what: &str) -> Result<i64> {
        if self.read_only {
            return Err(read_only_error(&self.describe, what));
        }
        let lease = self.lease.clone().expect("a writer has its lease");
        if self.dead.is_none() && lease.lost.load(Ordering::Relaxed) {
            // The renewer found the lease taken over before a write did: say who holds it now,
            // as a refused write does.
            let now = block_on(async { Ok(self.lease_now().await) })?;
            self.mark_lost(lease.epoch, now);
        }
        if let Some(e) = self.dead_refusal(what) {
            return Err(e.with("epoch", lease.epoch));
        }
        Ok(lease.epoch)
    }

    /// The refusal of a handle marked dead (an unknown outcome, a lost lease): every call says
    /// the same reason with the same detail (`outcomeUnknown`, or `currentEpoch` and `holder`).
    fn dead_refusal(&self, what: &str) -> Option<Error> {
        let (kind, why, detail) = self.dead.as_ref()?;
        let mut e = Error::new(*kind, format!("{}: cannot {what}: {why}", self.describe)).with("store", self.describe.clone());
        for (k, v) in detail {
            e = e.with(k, v.clone());
        }
        Some(e)
    }

    fn lost_lease_text(&self, epoch: i64, now: Option<(i64, Option<String>)>) -> String {
        let by = match now {
            Some((e, Some(h))) => format!(" (the lease is now at fencing token {e}, held by {h})"),
            Some((e, None)) => format!(" (the lease is now at fencing token {e})"),
            None => String::new(),
        };
        format!(
            "this handle lost the session's writer lease (fencing token {epoch}){by}: another writer took the session over after the lease went {} s without renewal (was this process paused or cut off?); nothing more is written through this handle: reopen the session",
            self.pool.settings.lease_time.as_secs_f64()
        )
    }

    /// The session's lease as the database holds it now: its epoch and holder (`None` when the
    /// database does not answer).
    async fn lease_now(&self) -> Option<(i64, Option<String>)> {
        let rows = self
            .pool
            .query(Bound::Query, "SELECT lease_epoch, lease_holder FROM llmsession_sessions WHERE id = $1", &[(&self.id, Type::TEXT)])
            .await
            .ok()?;
        rows.first().map(|r| (r.get::<_, i64>(0), r.get::<_, Option<String>>(1)))
    }

    /// Marks the handle dead for a lost lease (`epoch` its own, `now` the lease as the database
    /// holds it, where known) and returns the refusal every write gets from now on:
    /// [`ErrorKind::Locked`] with `epoch`, and `currentEpoch` and `holder` where known.
    fn mark_lost(&mut self, epoch: i64, now: Option<(i64, Option<String>)>) -> Error {
        let text = self.lost_lease_text(epoch, now.clone());
        let mut detail = Vec::new();
        if let Some((e, holder)) = now {
            detail.push(("currentEpoch".to_string(), Value::from(e)));
            if let Some(h) = holder {
                detail.push(("holder".to_string(), Value::from(h)));
            }
        }
        let mut err =
            Error::new(ErrorKind::Locked, format!("{}: {text}", self.describe)).with("store", self.describe.clone()).with("epoch", epoch);
        for (k, v) in &detail {
            err = err.with(k, v.clone());
        }
        self.dead = Some((ErrorKind::Locked, text, detail));
        if let Some(l) = &self.lease {
            l.lost.store(true, Ordering::Relaxed);
        }
        err
    }

    /// Turns a failed write into the library's error, marking the handle dead when the outcome
    /// is unknown.
    fn write_error(&mut self, what: &str, e: CallError) -> Error {
        let unknown = e.outcome_unknown();
        let err = e.into_error(&self.describe, what);
        if !unknown {
            return err;
        }
        // Every later call repeats what this one said, the same way: the reason, and the
        // detail with `outcomeUnknown`.
        let mut detail: Vec<(String, Value)> = err.detail().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        detail.retain(|(k, _)| k != "outcomeUnknown");
        detail.push(("outcomeUnknown".to_string(), Value::Bool(true)));
        self.dead = Some((
            ErrorKind::Storage,
            format!(
                "the outcome of an earlier write is unknown ({}); reopen the session (the reopen reads what the database holds)",
                err.message()
            ),
            detail,
        ));
        let mut out = Error::new(
            ErrorKind::Storage,
            format!(
                "{}: whether this write reached the database is unknown, so this handle writes nothing more: reopen the session (the reopen reads what the database holds)",
                err.message()
            ),
        )
        .with("outcomeUnknown", true);
        for (k, v) in err.detail() {
            out = out.with(k, v.clone());
        }
        out
    }

    /// Why a conditional write matched no row: the lease was taken over ([`ErrorKind::Locked`]) or
    /// the head moved ([`ErrorKind::Conflict`]).
    async fn refusal(&mut self, epoch: i64, seq: u64, creating: bool) -> Error {
        let rows = self
            .pool
            .query(
                Bound::Query,
                "SELECT events, lease_epoch, lease_holder FROM llmsession_sessions WHERE id = $1",
                &[(&self.id, Type::TEXT)],
            )
            .await
            .ok();
        let row = rows.as_ref().and_then(|r| r.first());
        let now = row.map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1), r.get::<_, Option<String>>(2)));
        match now {
            Some((_, e, holder)) if e != epoch || holder.is_none() => self.mark_lost(epoch, Some((e, holder))),
            _ if creating => {
                Error::new(ErrorKind::Conflict, format!("{}: the session was created by another writer first; reopen it", self.describe))
                    .with("store", self.describe.clone())
            }
            Some((events, _, _)) if events < seq => {
                // Behind this handle, not ahead: what it appended is gone (a server crash or a
                // failover lost asynchronous commits, as turn-end and never allow).
                Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{}: the append names seq {seq}, but the database holds {events} events: events this handle appended were lost (a server crash or a failover lost commits its durability policy had not made durable); reopen the session",
                        self.describe
                    ),
                )
                .with("store", self.describe.clone())
                .with("seq", seq)
                .with("storeSeq", events)
                .with("lost", seq - events)
            }
            Some((events, _, _)) => conflict_error(&self.describe, seq, events),
            None => conflict_error(&self.describe, seq, 0),
        }
    }

    /// The seq and record of the session's last checkpoint before event `before` (one probe of
    /// the checkpoint index).
    fn last_checkpoint(&mut self, before: Option<u64>) -> Result<Option<(u64, String)>> {
        let d = self.describe.clone();
        let before = before.map(|b| b.min(i64::MAX as u64) as i64);
        let sql = format!(
            "SELECT seq, record FROM llmsession_records WHERE session_id = $1 AND ($2::bigint IS NULL OR seq < $2) AND {} ORDER BY seq DESC LIMIT 1",
            schema::CHECKPOINT_PREDICATE
        );
        let rows = block_on(async {
            self.pool
                .query(Bound::Query, &sql, &[(&self.id, Type::TEXT), (&before, Type::INT8)])
                .await
                .map_err(|e| e.into_error(&d, "cannot find the last checkpoint"))
        })?;
        Ok(rows.first().map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, String>(1))))
    }

    /// The window of checkpoint `checkpoint`: the header and the records of events `from..`, in
    /// one statement (one snapshot) with the head, the records joined by newlines into one text
    /// (a record never holds a raw newline), so the client handles one value rather than a row
    /// per record; checked against the head as [`read`](Self::read) checks.
    fn read_window(&mut self, checkpoint: u64, from: u64) -> Result<Option<StoreWindow>> {
        if let Some(e) = self.dead_refusal("read the session") {
            return Err(e);
        }
        let d = self.describe.clone();
        let start = from as i64;
        // The records' bytes one after the other, each record's range and seq.
        let mut head: Option<(String, u64, Option<String>)> = None;
        let mut text: Vec<u8> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut seqs: Vec<i64> = Vec::new();
        block_on(async {
            self.pool
                .query_each(Bound::Query, WINDOW_SQL, &[(&self.id, Type::TEXT), (&start, Type::INT8)], |row| {
                    let record: &str = row.get(1);
                    match row.get::<_, i64>(0) {
                        -1 => head = Some((record.to_string(), row.get::<_, i64>(2) as u64, row.get(3))),
                        seq => {
                            ranges.push((text.len(), text.len() + record.len()));
                            text.extend_from_slice(record.as_bytes());
                            seqs.push(seq);
                        }
                    }
                    Ok(())
                })
                .await
                .map_err(|e| e.into_error(&d, "cannot read the session"))
        })?;
        let Some((header, events, chain_head)) = head else { return Ok(None) };
        if ranges.is_empty() {
            return Ok(None);
        }
        let count = seqs.len() as u64;
        if !in_seq_order(&mut ranges, &mut seqs, start) {
            return Err(corrupt(
                &d,
                format!("events are missing from llmsession_records between seq {from} and the head ({events} events)"),
            )
            .with("seq", from));
        }
        if start as u64 + count != events {
            let stored = start as u64 + count;
            let why = if stored < events {
                format!(
                    "the session's head says {events} events but only {stored} are stored: records were removed from the end of the log"
                )
            } else {
                format!("{stored} events are stored but the session's head says {events}: records were added without moving the head (not by llmsession)")
            };
            return Err(corrupt(&d, why).with("events", events).with("stored", stored));
        }
        if ranges.iter().any(|&(a, b)| memchr::memchr(b'\n', &text[a..b]).is_some()) {
            return Err(corrupt(&d, format!("a record from seq {from} on holds a newline: it is not one this library wrote")));
        }
        let (a, b) = ranges[ranges.len() - 1];
        if chain_head.is_some() && chain::stored_link(std::str::from_utf8(&text[a..b]).unwrap_or("")) != chain_head.as_deref() {
            return Err(corrupt(
                &d,
                "the last stored event does not end with the chain value the session's head records: the end of the log was replaced"
                    .into(),
            ));
        }
        self.events = events;
        self.chain_head = chain_head;
        Ok(Some(StoreWindow { header: header.into_bytes(), checkpoint, from, text, records: ranges, last_complete: true }))
    }

    /// Reads the session's records from event `from_seq` on, in one snapshot with the head, and
    /// checks them against it.
    fn read(&mut self, from_seq: Option<u64>) -> Result<StoreContents> {
        self.read_with_header(from_seq).map(|(c, _)| c)
    }

    /// [`read`](Self::read), also returning the session header record.
    fn read_with_header(&mut self, from_seq: Option<u64>) -> Result<(StoreContents, Vec<u8>)> {
        if let Some(e) = self.dead_refusal("read the session") {
            return Err(e);
        }
        let d = self.describe.clone();
        let start = from_seq.unwrap_or(0);
        let rows = block_on(async {
            self.pool
                .query(Bound::Query, READ_SQL, &[(&self.id, Type::TEXT), (&(start as i64), Type::INT8)])
                .await
                .map_err(|e| e.into_error(&d, "cannot read the session"))
        })?;
        let Some(head) = rows.first().filter(|r| r.get::<_, i64>(0) == -1) else {
            return Ok((StoreContents { records: Vec::new(), last_complete: true }, Vec::new()));
        };
        let header: &str = head.get(1);
        let events = head.get::<_, Option<i64>>(2).unwrap_or(0) as u64;
        let chain_head: Option<String> = head.get(3);
        let rows = &rows[1..];
        let mut records = Vec::with_capacity(rows.len() + usize::from(from_seq.is_none()));
        if from_seq.is_none() {
            let id = serde_json::from_str::<Value>(header).ok().and_then(|v| v["id"].as_str().map(str::to_string));
            if id.as_deref() != Some(self.id.as_str()) {
                return Err(corrupt(&d, format!("the stored session header does not name session {:?}", self.id)));
            }
            records.push(header.as_bytes().to_vec());
        }
        for (i, row) in rows.iter().enumerate() {
            let seq: i64 = row.get(0);
            let want = start + i as u64;
            if seq as u64 != want {
                return Err(corrupt(&d, format!("event {want} is missing from llmsession_records (the next stored one is {seq})"))
                    .with("seq", want));
            }
            let rec: &str = row.get(1);
            records.push(rec.as_bytes().to_vec());
        }
        // The head was read in the same snapshot: the records must reach it exactly.
        if start < events || !rows.is_empty() {
            let stored = start + rows.len() as u64;
            if stored != events {
                let why = if stored < events {
                    format!("the session's head says {events} events but only {stored} are stored: records were removed from the end of the log")
                } else {
                    format!("{stored} events are stored but the session's head says {events}: records were added without moving the head (not by llmsession)")
                };
                return Err(corrupt(&d, why).with("events", events).with("stored", stored));
            }
            let got = rows.last().map(|r| r.get::<_, &str>(1)).and_then(chain::stored_link);
            if chain_head.is_some() && got != chain_head.as_deref() {
                return Err(corrupt(
                    &d,
                    "the last stored event does not end with the chain value the session's head records: the end of the log was replaced"
                        .into(),
                ));
            }
        }
        self.events = events;
        self.chain_head = chain_head;
        Ok((StoreContents { records, last_complete: true }, header.as_bytes().to_vec()))
    }
}

/// Starts a transaction that commits at `level` and locks the session's row if the handle still
/// holds lease `epoch`; `false` (the transaction is left open for [`schema::finish`]) when it
/// does not.
async fn begin_fenced(c: &tokio_postgres::Client, id: &str, epoch: i64, level: &str) -> std::result::Result<bool, tokio_postgres::Error> {
    c.batch_execute("BEGIN").await?;
    c.query_typed("SELECT set_config('synchronous_commit', $1, true)", &[(&level, Type::TEXT)]).await?;
    let held = c
        .query_typed(
            "SELECT 1 FROM llmsession_sessions WHERE id = $1 AND lease_epoch = $2 AND lease_holder IS NOT NULL FOR UPDATE",
            &[(&id, Type::TEXT), (&epoch, Type::INT8)],
        )
        .await?;
    Ok(!held.is_empty())
}

/// The server's synchronous level (once per pool): `on` where the server's default is `off`.
async fn sync_level(pool: &Pool, store: &str) -> Result<String> {
    if let Some(l) = pool.sync_level.lock().clone() {
        return Ok(l);
    }
    let rows = pool
        .query(Bound::Query, "SELECT current_setting('synchronous_commit')", &[])
        .await
        .map_err(|e| e.into_error(store, "cannot read synchronous_commit"))?;
    let level: String = rows.first().map(|r| r.get(0)).unwrap_or_else(|| "on".to_string());
    let level = if level == "off" { "on".to_string() } else { level };
    *pool.sync_level.lock() = Some(level.clone());
    Ok(level)
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else { return };
        let pool = self.pool.clone();
        if !lease.lost.load(Ordering::Relaxed) {
            let _ = block_on(async {
                lease::release(&pool, &lease).await;
                Ok(())
            });
        }
        pool.leases.lock().remove(&lease.id);
    }
}

impl Store for PgStore {
    fn load(&mut self) -> Result<StoreContents> {
        self.read(None)
    }

    fn load_from(&mut self, from: usize) -> Result<StoreContents> {
        if from == 0 {
            return self.read(None);
        }
        self.read(Some(from as u64 - 1))
    }

    fn load_window(&mut self, before: Option<u64>) -> Result<Option<StoreWindow>> {
        let Some((checkpoint, record)) = self.last_checkpoint(before)? else { return Ok(None) };
        let Some(from) = super::window_from(record.as_bytes()) else { return Ok(None) };
        let from = from.min(checkpoint);
        self.read_window(checkpoint, from)
    }

    fn record_stream(&mut self) -> Result<Box<dyn RecordStream>> {
        let d = self.describe.clone();
        let rows = block_on(async {
            self.pool
                .query(
                    Bound::Query,
                    "SELECT header, events FROM llmsession_sessions WHERE id = $1 AND header IS NOT NULL",
                    &[(&self.id, Type::TEXT)],
                )
                .await
                .map_err(|e| e.into_error(&d, "cannot read the session"))
        })?;
        let (header, events) = match rows.first() {
            Some(r) => (Some(r.get::<_, String>(0).into_bytes()), r.get::<_, i64>(1) as u64),
            None => (None, 0),
        };
        Ok(Box::new(PgRecords {
            pool: self.pool.clone(),
            id: self.id.clone(),
            describe: d,
            header,
            events,
            next: 0,
            page: Vec::new().into_iter(),
        }))
    }

    fn read_records(&mut self, from: usize, to: usize) -> Result<Vec<Vec<u8>>> {
        let (mut c, header) = self.read_with_header(Some(from.saturating_sub(1) as u64))?;
        if from == 0 {
            c.records.insert(0, header);
        }
        c.records.truncate(to - from.min(to));
        Ok(c.records)
    }

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        let epoch = self.writable("append")?;
        if batch.session_id != self.id {
            return Err(Error::invalid(
                "sessionId",
                format!("{}: the batch is for session {:?}, but this store holds session {:?}", self.describe, batch.session_id, self.id),
            ));
        }
        let records: Vec<&str> = batch.events.iter().map(|r| &**r).collect();
        let chain_head = batch.events.last().and_then(|r| chain_of(r));
        let level = if self.sync_each { self.sync_level.clone() } else { "off".to_string() };
        let secs = self.pool.settings.lease_time.as_secs_f64();
        let header = match batch.header {
            Some(h) => {
                let header =
                    SessionHeader::from_value(&serde_json::from_str::<Value>(h).map_err(|e| Error::invalid("header", e.to_string()))?)?;
                if header.id != self.id {
                    return Err(Error::invalid(
                        "header",
                        format!(
                            "{}: the header record is for session {:?}, but this store holds session {:?}",
                            self.describe, header.id, self.id
                        ),
                    ));
                }
                Some(header)
            }
            None => None,
        };
        let pool = self.pool.clone();
        let id = self.id.clone();
        let result = block_on(async {
            let r = match (&header, batch.header) {
                (Some(header), Some(h)) => {
                    let created = header.created_at as i64;
                    let (pid, pseed) = match &header.parent {
                        Some((p, n)) => (Some(p.clone()), Some(*n as i64)),
                        None => (None, None),
                    };
                    let pcall = header.spawn.as_ref().and_then(|s| s.call_id.clone());
                    let spawned = header.spawn.is_some();
                    pool.query(
                        Bound::Query,
                        CREATE_SQL,
                        &[
                            (&id, Type::TEXT),
                            (&h, Type::TEXT),
                            (&created, Type::INT8),
                            (&pid, Type::TEXT),
                            (&pseed, Type::INT8),
                            (&records, Type::TEXT_ARRAY),
                            (&chain_head, Type::TEXT),
                            (&epoch, Type::INT8),
                            (&level, Type::TEXT),
                            (&pcall, Type::TEXT),
                            (&spawned, Type::BOOL),
                        ],
                    )
                    .await
                }
                _ => {
                    let seq = batch.seq as i64;
                    pool.query(
                        Bound::Query,
                        APPEND_SQL,
                        &[
                            (&id, Type::TEXT),
                            (&seq, Type::INT8),
                            (&records, Type::TEXT_ARRAY),
                            (&chain_head, Type::TEXT),
                            (&epoch, Type::INT8),
                            (&secs, Type::FLOAT8),
                            (&level, Type::TEXT),
                        ],
                    )
                    .await
                }
            };
            Ok(r)
        })?;
        let rows = match result {
            Ok(rows) => rows,
            Err(CallError::Pg(e)) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{}: the append names seq {}, but a record with that seq is already stored: another writer appended to this session; refresh or reopen it",
                        self.describe, batch.seq
                    ),
                )
                .with("store", self.describe.clone())
                .with("seq", batch.seq));
            }
            Err(e) => return Err(self.write_error("cannot append", e)),
        };
        let matched: i64 = rows.first().map(|r| r.get(1)).unwrap_or(0);
        if matched == 0 {
            let seq = batch.seq;
            let creating = batch.header.is_some();
            return Err(block_on(async { Ok(self.refusal(epoch, seq, creating).await) })?);
        }
        let before = (if batch.header.is_some() { 0 } else { batch.seq as usize + 1 }, self.events, self.chain_head.clone());
        self.last_append = Some(before);
        self.events = batch.seq + batch.events.len() as u64;
        if chain_head.is_some() {
            self.chain_head = chain_head;
        }
        self.pending = !self.sync_each;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let epoch = self.writable("sync")?;
        if !self.pending {
            return Ok(());
        }
        let pool = self.pool.clone();
        let (id, level) = (self.id.clone(), self.sync_level.clone());
        let r = block_on(async {
            Ok(pool.query(Bound::Query, SYNC_SQL, &[(&id, Type::TEXT), (&epoch, Type::INT8), (&level, Type::TEXT)]).await)
        })?;
        match r {
            Ok(rows) if rows.first().is_some_and(|r| r.get::<_, i64>(1) == 1) => {
                self.pending = false;
                Ok(())
            }
            Ok(_) => Err(block_on(async { Ok(self.refusal(epoch, self.events, false).await) })?),
            Err(e) => Err(self.write_error("cannot sync", e)),
        }
    }

    fn undo(&mut self, from: usize) -> Result<()> {
        let epoch = self.writable("undo an append")?;
        if from as u64 > self.events {
            // The failed append stored nothing (a batch commits whole or not at all, and this
            // handle's head moves only when it did): nothing to remove.
            return Ok(());
        }
        let Some((start, events, chain_head)) = self.last_append.clone() else {
            return Err(Error::new(ErrorKind::Storage, format!("{}: undo: this handle has no append to undo", self.describe)));
        };
        if start != from {
            return Err(Error::new(
                ErrorKind::Storage,
                format!("{}: undo from record {from}: this handle's last append starts at record {start}; nothing removed", self.describe),
            ));
        }
        let (now, seq) = (self.events as i64, events as i64);
        let head = chain_head.clone();
        let pool = self.pool.clone();
        let (id, level) = (self.id.clone(), self.sync_level.clone());
        let r = block_on(async {
            Ok(async {
                let conn = pool.get().await?;
                let c = &conn.client;
                pool.bounded(&conn, Bound::Query, async {
                    if !begin_fenced(c, &id, epoch, &level).await? {
                        return schema::finish(c, Ok(None)).await;
                    }
                    let r = async {
                        let n = c
                            .query_typed(
                                "UPDATE llmsession_sessions SET events = $2, chain_head = $3, updated_at = now() WHERE id = $1 AND events = $4 RETURNING 1",
                                &[(&id, Type::TEXT), (&seq, Type::INT8), (&head, Type::TEXT), (&now, Type::INT8)],
                            )
                            .await?
                            .len();
                        if n == 1 {
                            c.query_typed("DELETE FROM llmsession_records WHERE session_id = $1 AND seq >= $2", &[(&id, Type::TEXT), (&seq, Type::INT8)])
                                .await?;
                            if start == 0 {
                                c.query_typed(
                                    "UPDATE llmsession_sessions SET header = NULL, created_ms = NULL, parent_id = NULL, parent_seed = NULL, parent_call = NULL, spawned = false WHERE id = $1",
                                    &[(&id, Type::TEXT)],
                                )
                                .await?;
                            }
                        }
                        Ok(Some(n))
                    }
                    .await;
                    schema::finish(c, r).await
                })
                .await
            }
            .await)
        })?;
        let removed = r.map_err(|e| self.write_error("cannot undo the append", e))?;
        match removed {
            None => return Err(block_on(async { Ok(self.refusal(epoch, self.events, false).await) })?),
            Some(0) => {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!("{}: undo: the session's head moved since this handle's append; nothing removed", self.describe),
                ))
            }
            Some(_) => {}
        }
        self.events = events;
        self.chain_head = chain_head;
        self.last_append = None;
        Ok(())
    }

    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        let epoch = self.writable("cut a damaged tail")?;
        if keep == 0 {
            return Err(Error::new(
                ErrorKind::CorruptLog,
                format!("{}: the session header record is damaged; nothing was cut", self.describe),
            ));
        }
        let seq = keep as i64 - 1;
        let reason = reason.to_string();
        let pool = self.pool.clone();
        let (id, level) = (self.id.clone(), self.sync_level.clone());
        let r = block_on(async {
            Ok(async {
                let conn = pool.get().await?;
                let c = &conn.client;
                pool.bounded(&conn, Bound::Query, async {
                    if !begin_fenced(c, &id, epoch, &level).await? {
                        return schema::finish(c, Ok(None)).await;
                    }
                    let r = async {
                        let moved = c
                            .query_typed(
                                "INSERT INTO llmsession_quarantine (session_id, seq, record, reason)
                                 SELECT session_id, seq, record, $3 FROM llmsession_records WHERE session_id = $1 AND seq >= $2 ORDER BY seq
                                 RETURNING 1",
                                &[(&id, Type::TEXT), (&seq, Type::INT8), (&reason, Type::TEXT)],
                            )
                            .await?
                            .len();
                        c.query_typed(
                            "DELETE FROM llmsession_records WHERE session_id = $1 AND seq >= $2",
                            &[(&id, Type::TEXT), (&seq, Type::INT8)],
                        )
                        .await?;
                        let last: Option<String> = c
                            .query_typed(
                                "SELECT record FROM llmsession_records WHERE session_id = $1 AND seq = $2",
                                &[(&id, Type::TEXT), (&(seq - 1), Type::INT8)],
                            )
                            .await?
                            .first()
                            .map(|r| r.get(0));
                        let head = last.as_deref().and_then(chain_of);
                        c.query_typed(
                            "UPDATE llmsession_sessions SET events = $2, chain_head = $3, updated_at = now() WHERE id = $1",
                            &[(&id, Type::TEXT), (&seq, Type::INT8), (&head, Type::TEXT)],
                        )
                        .await?;
                        Ok(Some((moved, head)))
                    }
                    .await;
                    schema::finish(c, r).await
                })
                .await
            }
            .await)
        })?;
        let out = r.map_err(|e| self.write_error("cannot cut the damaged tail", e))?;
        let Some((moved, chain_head)) = out else {
            return Err(block_on(async { Ok(self.refusal(epoch, self.events, false).await) })?);
        };
        self.events = seq as u64;
        self.chain_head = chain_head;
        self.last_append = None;
        if moved == 0 {
            return Ok(None);
        }
        Ok(Some(format!("table llmsession_quarantine of {} (session {:?}, {moved} records from seq {seq})", self.pool.shown, self.id)))
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    /// Session `id` in the same database (a child's id is its parent's with the tag).
    fn child_store(&self, _tag: &str, id: &str, durability: Durability) -> Result<Option<crate::store::NewStore>> {
        let url = self.url.without_session();
        Ok(Some((Box::new(PgStore::open(&url, id, PgOptions { read_only: false, create: true, durability })?), None)))
    }
}

/// A session's records read in pages of [`PAGE`](PgRecords::PAGE) (the header, then events
/// `0..events` as the head said when the stream began), each page checked for gaps.
struct PgRecords {
    pool: Arc<Pool>,
    id: String,
    describe: String,
    header: Option<Vec<u8>>,
    /// Events the head held when the stream began.
    events: u64,
    /// The seq of the next event to read.
    next: u64,
    page: std::vec::IntoIter<Vec<u8>>,
}

impl PgRecords {
    const PAGE: i64 = 4096;
}

impl RecordStream for PgRecords {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, bool)>> {
        if let Some(h) = self.header.take() {
            return Ok(Some((h, true)));
        }
        if let Some(r) = self.page.next() {
            return Ok(Some((r, true)));
        }
        if self.next >= self.events {
            return Ok(None);
        }
        let from = self.next as i64;
        let to = (self.events as i64).min(from + Self::PAGE);
        let d = self.describe.clone();
        let rows = block_on(async {
            self.pool
                .query(
                    Bound::Query,
                    "SELECT seq, record FROM llmsession_records WHERE session_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq",
                    &[(&self.id, Type::TEXT), (&from, Type::INT8), (&to, Type::INT8)],
                )
                .await
                .map_err(|e| e.into_error(&d, "cannot read the session"))
        })?;
        let mut page = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let seq: i64 = row.get(0);
            if seq != from + i as i64 {
                return Err(corrupt(
                    &d,
                    format!("event {} is missing from llmsession_records (the next stored one is {seq})", from + i as i64),
                )
                .with("seq", (from + i as i64) as u64));
            }
            page.push(row.get::<_, String>(1).into_bytes());
        }
        if (page.len() as i64) < to - from {
            let stored = from as u64 + page.len() as u64;
            return Err(corrupt(
                &d,
                format!(
                    "the session's head says {} events but only {stored} are stored: records were removed from the end of the log",
                    self.events
                ),
            )
            .with("events", self.events)
            .with("stored", stored));
        }
        self.next = to as u64;
        self.page = page.into_iter();
        Ok(self.page.next().map(|r| (r, true)))
    }
    fn total_records(&self) -> Option<u64> {
        Some(self.events + 1)
    }
}

/// The sessions in the database at `url` (those with a header record), ordered by id: at most
/// `limit`, starting after id `after`, only the children of `parent` when given. Reads only: a
/// database without llmsession tables has no sessions. `inUse` says whether a writer holds an
/// unexpired lease.
pub fn list_sessions(url: &PgUrl, after: Option<&str>, limit: Option<u64>, parent: Option<&str>) -> Result<Vec<SessionInfo>> {
    let shown = url.shown().to_string();
    let pool = Pool::for_url(url)?;
    let limit = limit.map(|l| l.min(i64::MAX as u64) as i64);
    let rows = block_on(async {
        match schema::version(&pool, &shown).await? {
            None => return Ok(Vec::new()),
            Some(v) => schema::check(&shown, v)?,
        }
        pool.query(
            Bound::Query,
            "SELECT s.id, s.created_ms, s.parent_id, s.parent_seed, s.events, s.chain_head,
                    (extract(epoch FROM s.updated_at) * 1000)::bigint,
                    s.lease_holder IS NOT NULL AND COALESCE(s.lease_expires > now(), false),
                    s.parent_call, s.spawned
               FROM llmsession_sessions s
              WHERE s.header IS NOT NULL AND ($1::text IS NULL OR s.id > $1) AND ($3::text IS NULL OR s.parent_id = $3)
              ORDER BY s.id
              LIMIT $2",
            &[(&after, Type::TEXT), (&limit, Type::INT8), (&parent, Type::TEXT)],
        )
        .await
        .map_err(|e| e.into_error(&shown, "cannot list the sessions"))
    })?;
    Ok(rows
        .iter()
        .map(|r| {
            let parent_id: Option<String> = r.get(2);
            let parent_seed: Option<i64> = r.get(3);
            SessionInfo {
                id: r.get(0),
                created_at: r.get::<_, Option<i64>>(1).unwrap_or(0) as u64,
                parent: parent_id.map(|id| ParentInfo {
                    id,
                    seed_length: parent_seed.unwrap_or(0) as u64,
                    spawned: r.get(9),
                    call_id: r.get(8),
                }),
                events: r.get::<_, i64>(4) as u64,
                chain_head: r.get(5),
                updated_at: r.get::<_, i64>(6) as u64,
                in_use: r.get(7),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Window rows that came out of seq order are put in order (their bytes stay where they
    /// are); a gap, a window that does not start at its seq, or no rows at all is not in order.
    #[test]
    fn window_rows_are_put_in_seq_order() {
        let mut ranges = vec![(0, 1), (1, 3), (3, 6), (6, 10)];
        let mut seqs = vec![7, 5, 8, 6];
        assert!(in_seq_order(&mut ranges, &mut seqs, 5));
        assert_eq!((ranges, seqs), (vec![(1, 3), (6, 10), (0, 1), (3, 6)], vec![5, 6, 7, 8]));
        let mut ranges = vec![(0, 1), (1, 2), (2, 3)];
        assert!(!in_seq_order(&mut ranges.clone(), &mut vec![5, 7, 8], 5), "a gap");
        assert!(!in_seq_order(&mut ranges.clone(), &mut vec![6, 7, 8], 5), "the first is missing");
        assert!(in_seq_order(&mut ranges, &mut vec![5, 6, 7], 5));
        assert!(!in_seq_order(&mut Vec::new(), &mut Vec::new(), 5));
    }

    #[test]
    fn ids_are_checked() {
        assert!(check_id("a").is_ok());
        assert_eq!(check_id("").unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(check_id("a\0b").unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(check_id("a\nb").unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(check_id(&"x".repeat(MAX_ID_BYTES + 1)).unwrap_err().kind(), ErrorKind::InvalidInput);
    }
}
