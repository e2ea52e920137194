//! The tables and their versions (`docs/storage-postgres.md`, "Schema and migration").
//!
//! Migration rule: a schema change raises [`SCHEMA_VERSION`]. A library that finds an older
//! version migrates it forward in one transaction under the schema lock (each step adds tables,
//! columns or indexes; nothing a step removes is still read by an older library of the same major
//! version) and records the new version; a library that finds a newer version than its own
//! refuses to open the database ([`ErrorKind::Storage`], naming both versions), so an old worker
//! never writes a schema it does not understand.

use super::error::CallError;
use super::pool::{Bound, Pool};
use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::Ordering;
use tokio_postgres::types::Type;

/// The schema version this library creates and reads: 4 (2: the lease as data; 3: the child
/// link of agent trees; 4: an index of the checkpoint records, so a bounded open finds the last
/// one at once).
pub const SCHEMA_VERSION: u32 = 4;

/// The transaction-level advisory lock (one 64-bit key, `llsschem` in ASCII) that serialises
/// schema creation and migration in a database.
const SCHEMA_LOCK_KEY: i64 = 0x6c6c_7373_6368_656d;

/// Version 1: sessions, records, quarantine (the lease was an advisory lock on `lock_key`).
const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS llmsession_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS llmsession_lock_keys;
CREATE TABLE IF NOT EXISTS llmsession_sessions (
    id text PRIMARY KEY,
    lock_key bigint NOT NULL UNIQUE DEFAULT nextval('llmsession_lock_keys'),
    header text,
    created_ms bigint,
    parent_id text,
    parent_seed bigint,
    events bigint NOT NULL DEFAULT 0,
    chain_head text,
    synced_events bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS llmsession_records (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS llmsession_quarantine (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    seq bigint NOT NULL,
    record text NOT NULL,
    reason text NOT NULL,
    cut_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS llmsession_quarantine_session ON llmsession_quarantine (session_id, seq);
";

/// Version 1 to 2: the lease columns (existing sessions start with no holder, epoch 0).
const V1_TO_V2: &str = "
ALTER TABLE llmsession_sessions
    ADD COLUMN IF NOT EXISTS lease_holder text,
    ADD COLUMN IF NOT EXISTS lease_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lease_expires timestamptz,
    ADD COLUMN IF NOT EXISTS lease_live bigint;
";

/// Version 2 to 3: the child link of a spawned session (`parent_call`, `spawned`; a fork has
/// `spawned` false) and an index to list the children of a session.
const V2_TO_V3: &str = "
ALTER TABLE llmsession_sessions
    ADD COLUMN IF NOT EXISTS parent_call text,
    ADD COLUMN IF NOT EXISTS spawned boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS llmsession_sessions_parent ON llmsession_sessions (parent_id);
";

/// Version 3 to 4: a partial index of the checkpoint records (`docs/log.md`, "Checkpoints"):
/// the last checkpoint of a session is one index probe, however long its log.
const V3_TO_V4: &str = "
CREATE INDEX IF NOT EXISTS llmsession_records_checkpoints ON llmsession_records (session_id, seq)
    WHERE record LIKE '{\"type\":\"session/checkpoint\",%';
";

/// The predicate of that index, as a query must state it for the planner to use the index.
pub(super) const CHECKPOINT_PREDICATE: &str = "record LIKE '{\"type\":\"session/checkpoint\",%'";

/// The schema version the database holds, or `None` when it has no llmsession tables.
pub(super) async fn version(pool: &Pool, store: &str) -> Result<Option<u32>> {
    match pool.query(Bound::Query, "SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]).await {
        Ok(rows) => {
            let Some(row) = rows.first() else { return Ok(None) };
            let v: &str = row.get(0);
            v.parse().map(Some).map_err(|_| {
                Error::new(ErrorKind::Storage, format!("{store}: llmsession_meta holds schema_version {v:?}, not a number"))
                    .with("store", store.to_string())
            })
        }
        Err(CallError::Pg(e)) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(e.into_error(store, "cannot read the schema version")),
    }
}

/// Refuses a database whose schema is newer than this library's.
pub(super) fn check(store: &str, v: u32) -> Result<()> {
    if v > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::Storage,
            format!(
                "{store}: the database holds llmsession schema version {v}, newer than this library's version {SCHEMA_VERSION}: upgrade llmsession to use it"
            ),
        )
        .with("store", store.to_string())
        .with("schemaVersion", v)
        .with("supported", SCHEMA_VERSION));
    }
    Ok(())
}

/// Creates the tables, or migrates older ones, under the schema lock (once per pool).
pub(super) async fn ensure(pool: &Pool, store: &str) -> Result<()> {
    if pool.schema_ready.load(Ordering::Relaxed) {
        return Ok(());
    }
    if let Some(v) = version(pool, store).await? {
        check(store, v)?;
        if v == SCHEMA_VERSION {
            pool.schema_ready.store(true, Ordering::Relaxed);
            return Ok(());
        }
    }
    let conn = pool.get().await.map_err(|e| e.into_error(store, "cannot create the llmsession tables"))?;
    let c = &conn.client;
    let found = pool
        .bounded(&conn, Bound::Query, async {
            c.batch_execute("BEGIN").await?;
            let r = async {
                c.query_typed("SELECT pg_advisory_xact_lock($1)", &[(&SCHEMA_LOCK_KEY, Type::INT8)]).await?;
                c.batch_execute(SCHEMA_V1).await?;
                c.query_typed("INSERT INTO llmsession_meta (key, value) VALUES ('schema_version', '1') ON CONFLICT (key) DO NOTHING", &[])
                    .await?;
                let rows = c.query_typed("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]).await?;
                let mut v: u32 = rows.first().and_then(|r| r.get::<_, &str>(0).parse().ok()).unwrap_or(u32::MAX);
                if v == 1 {
                    c.batch_execute(V1_TO_V2).await?;
                    v = 2;
                }
                if v == 2 {
                    c.batch_execute(V2_TO_V3).await?;
                    v = 3;
                }
                if v == 3 {
                    c.batch_execute(V3_TO_V4).await?;
                    v = 4;
                }
                c.query_typed("UPDATE llmsession_meta SET value = $1 WHERE key = 'schema_version'", &[(&v.to_string(), Type::TEXT)])
                    .await?;
                Ok(v)
            }
            .await;
            finish(c, r).await
        })
        .await
        .map_err(|e| e.into_error(store, "cannot create the llmsession tables"))?;
    check(store, found)?;
    pool.schema_ready.store(true, Ordering::Relaxed);
    Ok(())
}

/// Commits after `r` succeeded, rolls back after it failed.
pub(super) async fn finish<T>(
    c: &tokio_postgres::Client,
    r: std::result::Result<T, tokio_postgres::Error>,
) -> std::result::Result<T, tokio_postgres::Error> {
    match r {
        Ok(v) => {
            c.batch_execute("COMMIT").await?;
            Ok(v)
        }
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}
