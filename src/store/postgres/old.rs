//! The PostgreSQL store: sessions in a database, so a session outlives the machine that wrote
//! it and any worker that can reach the database can resume it (`docs/storage-postgres.md`).
//!
//! - **Records verbatim.** Each event record is stored exactly as the log writes it (chain field
//!   included) in `llmsession_records`, keyed by `(session_id, seq)`; the session header record,
//!   its creation time and parent, and the head (number of events and the chain value of the
//!   last one) are a row of `llmsession_sessions`.
//! - **Conditional appends.** A batch is one statement, so one transaction: it moves the head
//!   from the seq the batch names to its end, and inserts the records. A head that is not at
//!   that seq, or a `(session_id, seq)` that is taken (the primary key), refuses the whole batch
//!   as [`ErrorKind::Conflict`]; nothing is written.
//! - **A writer lease.** A writing open takes a session-level advisory lock on the session's
//!   key: the two-number form, the OID of the `llmsession_sessions` table (unique in the
//!   database, so sessions of tables in different schemas never meet) and the session's number
//!   from a sequence (one per session, so two sessions of a table never share one); a
//!   second writer, in this process or on another machine, is refused at open with
//!   [`ErrorKind::Locked`], naming the holder's server process and application name. The server
//!   releases the lock when the holder's connection ends: on `drop`, when the process dies, or,
//!   for a machine that vanished, when the server's TCP keepalives give up on it (about a minute:
//!   the store sets them on its connection). A read-only open takes no lease and writes nothing.
//! - **Durability.** Batches commit with `synchronous_commit = off` (the commit returns before
//!   the server flushes its WAL); [`Store::sync`] commits a small write with the server's own
//!   synchronous level, which flushes every earlier commit too. With [`Durability::EveryEvent`]
//!   every batch commits synchronously instead. A crash of the client loses nothing committed;
//!   a crash of the server loses at most the asynchronous commits since the last sync.
//! - **A lost connection.** An error that leaves the connection closed, or the server shutting
//!   down, may hide whether the last append committed: the store then refuses every write until
//!   the session is reopened, and the reopen reads what the database holds.
//! - **Quarantine.** [`Store::cut`] moves the cut records to `llmsession_quarantine` with the
//!   reason and the time, in the same transaction that moves the head back.
//! - **Tail truncation is damage.** Loading compares the stored records with the head: records
//!   missing at the end (which a chain alone cannot show) or a last chain value that differs is
//!   [`ErrorKind::CorruptLog`].
//! - **Schema.** The tables are created on first use by a writer, with the schema version in
//!   `llmsession_meta`; a database whose schema is newer than this library's is refused (see
//!   [`SCHEMA_VERSION`] for the migration rule).

use super::url::{percent_decode, ParentInfo, SessionInfo};
use super::{conflict_error, read_only_error, Batch, Durability, Store, StoreContents};
use crate::error::{Error, ErrorKind, Result};
use crate::log::chain;
use crate::log::load::SessionHeader;
use postgres::error::SqlState;
use postgres::{Client, NoTls, Statement};
use serde_json::Value;
use std::time::Duration;

/// The schema version this library creates and reads.
///
/// Migration rule: a schema change raises the version. A library that finds an older version
/// migrates it forward in one transaction under the schema lock (each step adds tables, columns
/// or indexes; nothing a step removes is still read by an older library of the same major
/// version) and records the new version; a library that finds a newer version than its own
/// refuses to open the database ([`ErrorKind::Storage`], naming both versions), so an old worker
/// never writes a schema it does not understand.
pub const SCHEMA_VERSION: u32 = 1;

/// The transaction-level advisory lock (one 64-bit key, `llsschem` in ASCII) that serialises
/// schema creation and migration in a database.
const SCHEMA_LOCK_KEY: i64 = 0x6c6c_7373_6368_656d;
/// The longest session id accepted.
pub const MAX_ID_BYTES: usize = 1024;

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

const APPEND_SQL: &str = "
WITH h AS (
    UPDATE llmsession_sessions
       SET events = $2 + cardinality($3::text[]), chain_head = COALESCE($4, chain_head), updated_at = now()
     WHERE id = $1 AND events = $2 AND header IS NOT NULL
 RETURNING id
), ins AS (
    INSERT INTO llmsession_records (session_id, seq, record)
    SELECT h.id, $2 + t.i - 1, t.r FROM h, unnest($3::text[]) WITH ORDINALITY AS t(r, i)
 RETURNING 1
)
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM ins)";

const CREATE_SQL: &str = "
WITH h AS (
    UPDATE llmsession_sessions
       SET header = $2, created_ms = $3, parent_id = $4, parent_seed = $5,
           events = cardinality($6::text[]), chain_head = $7, updated_at = now()
     WHERE id = $1 AND header IS NULL
 RETURNING id
), ins AS (
    INSERT INTO llmsession_records (session_id, seq, record)
    SELECT h.id, t.i - 1, t.r FROM h, unnest($6::text[]) WITH ORDINALITY AS t(r, i)
 RETURNING 1
)
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM ins)";

/// A parsed `postgres://` or `postgresql://` URL: where the database is, without the password
/// in anything printed.
#[derive(Clone)]
pub struct PgUrl {
    config: postgres::Config,
    /// The URL without its password and without llmsession's own parameters.
    shown: String,
    /// The `session` query parameter, if any.
    session: Option<String>,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgUrl").field("url", &self.shown).field("session", &self.session).finish()
    }
}

impl PgUrl {
    /// Parses a libpq-style URL: `postgres[ql]://[user[:password]@][host][:port][/dbname][?k=v&...]`.
    /// A host that starts with `/` (percent-encoded as `%2F`, or given as `?host=/dir`) is the
    /// directory of the server's unix socket. The query takes libpq's parameters that the client
    /// knows (`host`, `port`, `user`, `password`, `dbname`, `options`, `application_name`,
    /// `connect_timeout`, `keepalives*`, `tcp_user_timeout`, `sslmode=disable|prefer`,
    /// `target_session_attrs`, ...) plus llmsession's `session=ID` (the session to open).
    pub fn parse(url: &str) -> Result<PgUrl> {
        let bad = |why: String| Error::invalid("url", format!("{why} (expected postgres://user:password@host:port/dbname?session=ID)"));
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("not a postgres:// or postgresql:// URL".into()));
        }
        // llmsession's own parameters come out before the client parses the rest.
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut session = None;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k == "session" {
                let id = percent_decode(v).ok_or_else(|| bad("the session parameter is not valid percent-encoded UTF-8".into()))?;
                if id.is_empty() {
                    return Err(bad("the session parameter is empty".into()));
                }
                session = Some(id);
            } else {
                kept.push(pair);
            }
        }
        let client_url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        let config: postgres::Config =
            client_url.parse().map_err(|e: postgres::Error| bad(format!("cannot parse the URL: {}", error_text(&e))))?;
        if config.get_hosts().is_empty() {
            return Err(bad("the URL names no host (a host name, an address, or ?host=/path/to/socket/directory)".into()));
        }
        if config.get_user().is_none() {
            return Err(bad("the URL names no user".into()));
        }
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err(Error::invalid(
                "url",
                "sslmode=require: this build of llmsession connects without TLS; use a unix socket, a private network or a TLS-terminating proxy, with sslmode=disable or prefer",
            ));
        }
        let shown = shown_url(&config, &kept);
        Ok(PgUrl { config, shown, session })
    }

    /// The `session` query parameter.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The URL as it may be shown: no password, no `session` parameter.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn connect(&self) -> Result<Client> {
        let mut cfg = self.config.clone();
        if cfg.get_application_name().is_none() {
            cfg.application_name(&application_name());
        }
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(Duration::from_secs(10));
        }
        if cfg.get_tcp_user_timeout().is_none() {
            cfg.tcp_user_timeout(Duration::from_secs(30));
        }
        let mut client = cfg.connect(NoTls).map_err(|e| pg_error(&self.shown, "cannot connect", &e))?;
        // The server's side of the lease: give up on a vanished client within about a minute
        // (30 s idle, then 3 probes 10 s apart), so its lease does not outlive it by hours.
        // Ignored on unix sockets; left alone when the URL's options set them.
        if !self.config.get_options().is_some_and(|o| o.contains("tcp_keepalives")) {
            client
                .batch_execute("SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; SET tcp_keepalives_count = 3")
                .map_err(|e| pg_error(&self.shown, "cannot configure the connection", &e))?;
        }
        Ok(client)
    }
}

/// `llmsession pid N on HOST`: what the server shows as the connection's application, so a
/// refused writer learns which process holds the lease.
fn application_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let host = if host.is_empty() { "?".to_string() } else { host };
    let mut name = format!("llmsession pid {} on {host}", std::process::id());
    // The server truncates application names to 63 bytes.
    while name.len() > 63 {
        name.pop();
    }
    name
}

fn shown_url(config: &postgres::Config, kept: &[&str]) -> String {
    use postgres::config::Host;
    let user = config.get_user().unwrap_or_default();
    let mut hosts = Vec::new();
    for (i, h) in config.get_hosts().iter().enumerate() {
        let port = config.get_ports().get(i).or(config.get_ports().first()).copied().unwrap_or(5432);
        hosts.push(match h {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{port}"),
            Host::Tcp(name) => format!("{name}:{port}"),
            Host::Unix(dir) => format!("{}:{port}", dir.display().to_string().replace('/', "%2F")),
        });
    }
    let db = config.get_dbname().unwrap_or(user);
    let params: Vec<&str> = kept.iter().filter(|p| !p.starts_with("password=")).copied().collect();
    let query = if params.is_empty() { String::new() } else { format!("?{}", params.join("&")) };
    format!("postgres://{user}@{}/{db}{query}", hosts.join(","))
}

/// The text of a client error with its causes (the client's `Display` stops at the top).
fn error_text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            s.push_str(&format!(" ({d})"));
        }
        if let Some(h) = db.hint() {
            s.push_str(&format!("; hint: {h}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(&format!(": {text}"));
        }
        src = c.source();
    }
    s
}

/// A storage error from the client, with the SQLSTATE in the detail and a plain reason for the
/// common causes of a failed connection.
fn pg_error(store: &str, what: &str, e: &postgres::Error) -> Error {
    let code = e.code().map(|c| c.code().to_string());
    let why = match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "authentication failed (check the user and password in the URL): "
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => "the database does not exist (create it, or name another in the URL): ",
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            "permission denied (the role needs to create and write the llmsession tables): "
        }
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => "the server accepts no more connections: ",
        _ => "",
    };
    let mut err = Error::new(ErrorKind::Storage, format!("{store}: {what}: {why}{}", error_text(e))).with("store", store.to_string());
    if let Some(c) = code {
        err = err.with("sqlstate", c);
    }
    err
}

/// Whether an error leaves it unknown what the server did with the statement: the connection
/// is gone, or the server is shutting down or crashing.
fn outcome_unknown(client: &Client, e: &postgres::Error) -> bool {
    if client.is_closed() || e.is_closed() {
        return true;
    }
    match e.code() {
        None => e.as_db_error().is_none(),
        Some(c) => c.code().starts_with("08") || c.code().starts_with("57P"),
    }
}

/// How a PostgreSQL session is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// Open without the lease; appends are refused and nothing is written.
    pub read_only: bool,
    /// A writing open may create the session when the database holds none with this id
    /// (otherwise the open fails with [`ErrorKind::InvalidInput`]).
    pub create: bool,
    /// The session's durability policy: with [`Durability::EveryEvent`] every batch commits
    /// synchronously (and [`Store::sync`] has nothing left to do).
    pub durability: Durability,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions { read_only: false, create: true, durability: Durability::default() }
    }
}

/// One session in a PostgreSQL database.
pub struct PgStore {
    client: Client,
    /// `postgres://user@host:port/db?session=ID`, for messages.
    describe: String,
    shown: String,
    id: String,
    read_only: bool,
    /// The statements a writer runs (prepared once).
    stmts: Option<Statements>,
    /// `synchronous_commit` for a sync point: the server's own setting, or `on` where that is
    /// `off`.
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
    /// Set when the connection broke: every write is refused until the session is reopened.
    dead: Option<String>,
}

struct Statements {
    append: Statement,
    create: Statement,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("store", &self.describe).field("read_only", &self.read_only).finish()
    }
}

/// Checks a session id for the database: not empty, at most [`MAX_ID_BYTES`], no NUL.
pub fn check_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid("id", "the session id must not be empty"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(Error::invalid("id", format!("the session id is {} bytes, more than {MAX_ID_BYTES}", id.len())));
    }
    if id.contains('\0') {
        return Err(Error::invalid("id", "the session id contains a NUL character"));
    }
    Ok(())
}

/// The schema version the database holds, or `None` when it has no llmsession tables.
fn schema_version(client: &mut Client, store: &str) -> Result<Option<u32>> {
    match client.query_opt("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]) {
        Ok(row) => {
            let Some(row) = row else { return Ok(None) };
            let v: &str = row.get(0);
            v.parse().map(Some).map_err(|_| {
                Error::new(ErrorKind::Storage, format!("{store}: llmsession_meta holds schema_version {v:?}, not a number"))
                    .with("store", store.to_string())
            })
        }
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(pg_error(store, "cannot read the schema version", &e)),
    }
}

fn check_version(store: &str, v: u32) -> Result<()> {
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

/// Creates the tables (or migrates older ones) under the schema lock, once per database.
fn ensure_schema(client: &mut Client, store: &str) -> Result<()> {
    if let Some(v) = schema_version(client, store)? {
        if v == SCHEMA_VERSION {
            return Ok(());
        }
        check_version(store, v)?;
    }
    let mut tx = client.transaction().map_err(|e| pg_error(store, "cannot start a transaction", &e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY]).map_err(|e| pg_error(store, "cannot take the schema lock", &e))?;
    tx.batch_execute(SCHEMA_V1).map_err(|e| pg_error(store, "cannot create the llmsession tables", &e))?;
    tx.execute(
        "INSERT INTO llmsession_meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO NOTHING",
        &[&SCHEMA_VERSION.to_string()],
    )
    .map_err(|e| pg_error(store, "cannot record the schema version", &e))?;
    // Version 1 is the first: there is nothing older to migrate yet. A later version adds its
    // steps here, each guarded by the version it starts from.
    let v: String = tx
        .query_one("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[])
        .map_err(|e| pg_error(store, "cannot read the schema version", &e))?
        .get(0);
    check_version(store, v.parse().unwrap_or(u32::MAX))?;
    tx.commit().map_err(|e| pg_error(store, "cannot create the llmsession tables", &e))
}

/// The advisory lock of a session's lease, in its two-number form: the sessions table's OID and
/// the session's lock key modulo 2^32 (keys repeat only after 4 billion sessions in one table).
fn lease_key(table: u32, lock_key: i64) -> (u32, u32) {
    (table, lock_key as u64 as u32)
}

/// The chain value a stored record ends with, if it has one.
fn chain_of(record: &str) -> Option<String> {
    chain::stored_link(record).map(str::to_string)
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
        let describe = format!("{}{}session={}", url.shown, if url.shown.contains('?') { "&" } else { "?" }, id);
        let mut client = url.connect()?;
        let default_level: String =
            client.query_one("SHOW synchronous_commit", &[]).map_err(|e| pg_error(&describe, "cannot read synchronous_commit", &e))?.get(0);
        let sync_level = if default_level == "off" { "on".to_string() } else { default_level };
        let mut store = PgStore {
            client,
            describe,
            shown: url.shown.clone(),
            id: id.to_string(),
            read_only: opts.read_only,
            stmts: None,
            sync_level,
            sync_each: opts.durability == Durability::EveryEvent,
            pending: false,
            events: 0,
            chain_head: None,
            last_append: None,
            dead: None,
        };
        if opts.read_only {
            match schema_version(&mut store.client, &store.describe)? {
                None => return Err(store.missing("the database has no llmsession tables yet")),
                Some(v) => check_version(&store.describe, v)?,
            }
            if !store.exists()? {
                return Err(store.missing("no such session"));
            }
            return Ok(store);
        }
        ensure_schema(&mut store.client, &store.describe)?;
        if !opts.create && !store.exists()? {
            return Err(store.missing("no such session (the open may not create one)"));
        }
        store.take_lease()?;
        let level = if store.sync_each { store.sync_level.clone() } else { "off".to_string() };
        store
            .client
            .batch_execute(&format!("SET synchronous_commit = {}", quote_setting(&level)))
            .map_err(|e| pg_error(&store.describe, "cannot set synchronous_commit", &e))?;
        let append = store.client.prepare(APPEND_SQL).map_err(|e| pg_error(&store.describe, "cannot prepare the append", &e))?;
        let create = store.client.prepare(CREATE_SQL).map_err(|e| pg_error(&store.describe, "cannot prepare the append", &e))?;
        store.stmts = Some(Statements { append, create });
        Ok(store)
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.id
    }

    fn missing(&self, why: &str) -> Error {
        Error::invalid("id", format!("{}: holds no session {:?}: {why}", self.shown, self.id))
            .with("store", self.shown.clone())
            .with("id", self.id.clone())
    }

    fn exists(&mut self) -> Result<bool> {
        let row = self
            .client
            .query_opt("SELECT header IS NOT NULL FROM llmsession_sessions WHERE id = $1", &[&self.id])
            .map_err(|e| pg_error(&self.describe, "cannot look the session up", &e))?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    }

    /// Takes the writer lease: the session-level advisory lock on the session's lock key (the
    /// session's row is created, with a fresh key, when the database has none yet).
    fn take_lease(&mut self) -> Result<()> {
        let d = self.describe.clone();
        self.client
            .execute("INSERT INTO llmsession_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", &[&self.id])
            .map_err(|e| pg_error(&d, "cannot register the session", &e))?;
        let key: i64 = self
            .client
            .query_one("SELECT lock_key FROM llmsession_sessions WHERE id = $1", &[&self.id])
            .map_err(|e| pg_error(&d, "cannot read the session's lock key", &e))?
            .get(0);
        let table: u32 = self
            .client
            .query_one("SELECT 'llmsession_sessions'::regclass::oid", &[])
            .map_err(|e| pg_error(&d, "cannot find the llmsession_sessions table", &e))?
            .get(0);
        let (classid, objid) = lease_key(table, key);
        let got: bool = self
            .client
            .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&(classid as i32), &(objid as i32)])
            .map_err(|e| pg_error(&d, "cannot take the writer lease", &e))?
            .get(0);
        if got {
            return Ok(());
        }
        let holder = self.lease_holder(classid, objid);
        let by = holder.as_deref().map(|h| format!(" ({h})")).unwrap_or_default();
        let mut e = Error::new(
            ErrorKind::Locked,
            format!(
                "{d}: the session is in use: another writer holds its lease{by}; open it read-only to inspect it, or wait until the writer closes it (the lease goes with the writer's connection)"
            ),
        )
        .with("store", d.clone())
        .with("id", self.id.clone());
        crate::observe::emit(crate::observe::Level::Warn, || {
            let mut o = crate::observe::Observation::new(
                "store-locked",
                crate::observe::Level::Warn,
                format!("{d}: refused to open for writing: another writer holds the session's lease{by}"),
            )
            .session(self.id.clone())
            .with("store", d.clone());
            if let Some(h) = &holder {
                o = o.with("holder", h.clone());
            }
            o
        });
        if let Some(h) = holder {
            e = e.with("holder", h);
        }
        Err(e)
    }

    /// Who holds the advisory lock `(classid, objid)`: the server process, and the application
    /// name and client address where the server shows them to this role.
    fn lease_holder(&mut self, classid: u32, objid: u32) -> Option<String> {
        let row = self
            .client
            .query_opt(
                "SELECT l.pid, a.application_name, host(a.client_addr)
                   FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                    AND l.classid = $1 AND l.objid = $2
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  LIMIT 1",
                &[&classid, &objid],
            )
            .ok()??;
        let pid: i32 = row.get(0);
        let app: Option<String> = row.get(1);
        let addr: Option<String> = row.get(2);
        let mut s = format!("server process {pid}");
        if let Some(a) = app.filter(|a| !a.is_empty()) {
            s.push_str(&format!(", application \"{a}\""));
        }
        if let Some(a) = addr {
            s.push_str(&format!(", from {a}"));
        }
        Some(s)
    }

    fn writable(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(read_only_error(&self.describe, what));
        }
        if let Some(why) = &self.dead {
            return Err(Error::new(
                ErrorKind::Storage,
                format!(
                    "{}: the connection to the server was lost ({why}); the lease went with it and the last write's outcome may be unknown, so this handle writes nothing more: reopen the session (the reopen reads what the database holds)",
                    self.describe
                ),
            )
            .with("store", self.describe.clone()));
        }
        Ok(())
    }

    /// Turns a client error of a write into the library's, marking the handle dead when the
    /// outcome is unknown.
    fn write_error(&mut self, what: &str, e: &postgres::Error) -> Error {
        let err = pg_error(&self.describe, what, e);
        if outcome_unknown(&self.client, e) {
            self.dead = Some(error_text(e));
            let message = format!(
                "{}: the connection is gone, so whether this write reached the database is unknown: reopen the session (the reopen reads what the database holds)",
                err.message()
            );
            let mut out = Error::new(ErrorKind::Storage, message).with("outcomeUnknown", true);
            for (k, v) in err.detail() {
                out = out.with(k, v.clone());
            }
            return out;
        }
        err
    }

    fn read_error(&mut self, what: &str, e: &postgres::Error) -> Error {
        let err = pg_error(&self.describe, what, e);
        if self.client.is_closed() {
            self.dead = Some(error_text(e));
        }
        err
    }

    /// Reads the session's records from event `from_seq` on, in one snapshot with the head, and
    /// checks them against it.
    fn read(&mut self, from_seq: Option<u64>) -> Result<StoreContents> {
        if let Some(why) = &self.dead {
            return Err(Error::new(
                ErrorKind::Storage,
                format!("{}: the connection to the server was lost ({why}): reopen the session", self.describe),
            )
            .with("store", self.describe.clone()));
        }
        let d = self.describe.clone();
        let start = from_seq.unwrap_or(0);
        let id = self.id.clone();
        let snapshot = (|| {
            let mut tx =
                self.client.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).read_only(true).start()?;
            let head = tx.query_opt("SELECT header, events, chain_head FROM llmsession_sessions WHERE id = $1", &[&id])?.and_then(|r| {
                let header: Option<String> = r.get(0);
                header.map(|hd| (hd, r.get::<_, i64>(1) as u64, r.get::<_, Option<String>>(2)))
            });
            let rows = match &head {
                Some((_, events, _)) if start < *events => tx.query(
                    "SELECT seq, record FROM llmsession_records WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
                    &[&id, &(start as i64)],
                )?,
                _ => Vec::new(),
            };
            tx.commit()?;
            Ok((head, rows))
        })();
        let (head, rows) = snapshot.map_err(|e: postgres::Error| self.read_error("cannot read the session", &e))?;
        let Some((header, events, chain_head)) = head else {
            return Ok(StoreContents { records: Vec::new(), last_complete: true });
        };
        let mut records = Vec::with_capacity(rows.len() + usize::from(from_seq.is_none()));
        if from_seq.is_none() {
            let id = serde_json::from_str::<Value>(&header).ok().and_then(|v| v["id"].as_str().map(str::to_string));
            if id.as_deref() != Some(self.id.as_str()) {
                return Err(corrupt(&d, format!("the stored session header does not name session {:?}", self.id)));
            }
            records.push(header.into_bytes());
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
        if start < events {
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
        Ok(StoreContents { records, last_complete: true })
    }

    /// Runs `f` in a transaction that commits at the sync level.
    fn synchronous<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut postgres::Transaction<'_>) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let level = quote_setting(&self.sync_level);
        let r = (|| {
            let mut tx = self.client.transaction()?;
            tx.batch_execute(&format!("SET LOCAL synchronous_commit = {level}"))?;
            let v = f(&mut tx)?;
            tx.commit()?;
            Ok(v)
        })();
        r.map_err(|e| self.write_error(what, &e))
    }
}

fn quote_setting(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

fn corrupt(store: &str, why: String) -> Error {
    Error::new(ErrorKind::CorruptLog, format!("{store}: {why}")).with("store", store.to_string())
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

    fn append(&mut self, batch: &Batch<'_>) -> Result<()> {
        self.writable("append")?;
        if batch.session_id != self.id {
            return Err(Error::invalid(
                "sessionId",
                format!("{}: the batch is for session {:?}, but this store holds session {:?}", self.describe, batch.session_id, self.id),
            ));
        }
        let records: Vec<&str> = batch.events.iter().map(|r| &**r).collect();
        let chain_head = batch.events.last().and_then(|r| chain_of(r));
        let stmts = self.stmts.as_ref().expect("a writer has its statements");
        let result = match batch.header {
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
                let created = header.created_at as i64;
                let (pid, pseed) = match &header.parent {
                    Some((p, n)) => (Some(p.clone()), Some(*n as i64)),
                    None => (None, None),
                };
                self.client.query_one(&stmts.create, &[&self.id, &h, &created, &pid, &pseed, &records, &chain_head])
            }
            None => {
                let seq = batch.seq as i64;
                self.client.query_one(&stmts.append, &[&self.id, &seq, &records, &chain_head])
            }
        };
        let row = match result {
            Ok(row) => row,
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
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
            Err(e) => return Err(self.write_error("cannot append", &e)),
        };
        let matched: i64 = row.get(0);
        if matched == 0 {
            let have = self
                .client
                .query_opt("SELECT events, header IS NOT NULL FROM llmsession_sessions WHERE id = $1", &[&self.id])
                .ok()
                .flatten();
            return Err(match (batch.header, have) {
                (Some(_), _) => Error::new(
                    ErrorKind::Conflict,
                    format!("{}: the session was created by another writer first; reopen it", self.describe),
                )
                .with("store", self.describe.clone()),
                (None, Some(r)) => conflict_error(&self.describe, batch.seq, r.get::<_, i64>(0) as u64),
                (None, None) => conflict_error(&self.describe, batch.seq, 0),
            });
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
        self.writable("sync")?;
        if !self.pending {
            return Ok(());
        }
        let id = self.id.clone();
        self.synchronous("cannot sync", |tx| tx.execute("UPDATE llmsession_sessions SET synced_events = events WHERE id = $1", &[&id]))?;
        self.pending = false;
        Ok(())
    }

    fn undo(&mut self, from: usize) -> Result<()> {
        self.writable("undo an append")?;
        let Some((start, events, chain_head)) = self.last_append.clone() else {
            return Err(Error::new(ErrorKind::Storage, format!("{}: undo: this handle has no append to undo", self.describe)));
        };
        if start != from {
            return Err(Error::new(
                ErrorKind::Storage,
                format!("{}: undo from record {from}: this handle's last append starts at record {start}; nothing removed", self.describe),
            ));
        }
        let id = self.id.clone();
        let (now, seq) = (self.events as i64, events as i64);
        let head = chain_head.clone();
        let removed = self.synchronous("cannot undo the append", |tx| {
            let n = tx.execute(
                "UPDATE llmsession_sessions SET events = $2, chain_head = $3, updated_at = now() WHERE id = $1 AND events = $4",
                &[&id, &seq, &head, &now],
            )?;
            if n == 1 {
                tx.execute("DELETE FROM llmsession_records WHERE session_id = $1 AND seq >= $2", &[&id, &seq])?;
                if start == 0 {
                    tx.execute("UPDATE llmsession_sessions SET header = NULL, created_ms = NULL, parent_id = NULL, parent_seed = NULL WHERE id = $1", &[&id])?;
                }
            }
            Ok(n)
        })?;
        if removed == 0 {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{}: undo: the session's head moved since this handle's append; nothing removed", self.describe),
            ));
        }
        self.events = events;
        self.chain_head = chain_head;
        self.last_append = None;
        Ok(())
    }

    fn cut(&mut self, keep: usize, reason: &str) -> Result<Option<String>> {
        self.writable("cut a damaged tail")?;
        if keep == 0 {
            return Err(Error::new(
                ErrorKind::CorruptLog,
                format!("{}: the session header record is damaged; nothing was cut", self.describe),
            ));
        }
        let seq = keep as i64 - 1;
        let id = self.id.clone();
        let reason = reason.to_string();
        let (moved, chain_head) = self.synchronous("cannot cut the damaged tail", |tx| {
            let moved = tx.execute(
                "INSERT INTO llmsession_quarantine (session_id, seq, record, reason)
                 SELECT session_id, seq, record, $3 FROM llmsession_records WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
                &[&id, &seq, &reason],
            )?;
            tx.execute("DELETE FROM llmsession_records WHERE session_id = $1 AND seq >= $2", &[&id, &seq])?;
            let last: Option<String> = tx
                .query_opt("SELECT record FROM llmsession_records WHERE session_id = $1 AND seq = $2", &[&id, &(seq - 1)])?
                .map(|r| r.get(0));
            let head = last.as_deref().and_then(chain_of);
            tx.execute(
                "UPDATE llmsession_sessions SET events = $2, chain_head = $3, updated_at = now() WHERE id = $1",
                &[&id, &seq, &head],
            )?;
            Ok((moved, head))
        })?;
        self.events = seq as u64;
        self.chain_head = chain_head;
        self.last_append = None;
        if moved == 0 {
            return Ok(None);
        }
        Ok(Some(format!("table llmsession_quarantine of {} (session {:?}, {moved} records from seq {seq})", self.shown, self.id)))
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// The sessions in the database at `url` (those with a header record), ordered by id: at most
/// `limit`, starting after id `after`. Reads only: a database without llmsession tables has no
/// sessions.
pub fn list_sessions(url: &PgUrl, after: Option<&str>, limit: Option<u64>) -> Result<Vec<SessionInfo>> {
    let shown = url.shown.clone();
    let mut client = url.connect()?;
    match schema_version(&mut client, &shown)? {
        None => return Ok(Vec::new()),
        Some(v) => check_version(&shown, v)?,
    }
    let limit = limit.map(|l| l.min(i64::MAX as u64) as i64);
    let rows = client
        .query(
            "WITH held AS (
                 SELECT l.objid::bigint AS key FROM pg_locks l
                  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                    AND l.classid = 'llmsession_sessions'::regclass::oid
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
             SELECT s.id, s.created_ms, s.parent_id, s.parent_seed, s.events, s.chain_head,
                    (extract(epoch FROM s.updated_at) * 1000)::bigint,
                    EXISTS (SELECT 1 FROM held WHERE held.key = s.lock_key % 4294967296)
               FROM llmsession_sessions s
              WHERE s.header IS NOT NULL AND ($1::text IS NULL OR s.id > $1)
              ORDER BY s.id
              LIMIT $2",
            &[&after, &limit],
        )
        .map_err(|e| pg_error(&shown, "cannot list the sessions", &e))?;
    Ok(rows
        .iter()
        .map(|r| {
            let parent_id: Option<String> = r.get(2);
            let parent_seed: Option<i64> = r.get(3);
            SessionInfo {
                id: r.get(0),
                created_at: r.get::<_, Option<i64>>(1).unwrap_or(0) as u64,
                parent: parent_id.map(|id| ParentInfo { id, seed_length: parent_seed.unwrap_or(0) as u64 }),
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

    #[test]
    fn urls_parse_without_showing_the_password() {
        let u = PgUrl::parse("postgres://me:secret@db.example:6543/logs?session=abc%20d&connect_timeout=3").unwrap();
        assert_eq!(u.session(), Some("abc d"));
        assert_eq!(u.shown(), "postgres://me@db.example:6543/logs?connect_timeout=3");
        assert!(!format!("{u:?}").contains("secret"));
        let u = PgUrl::parse("postgresql://me@%2Ftmp%2Fpg/logs").unwrap();
        assert_eq!(u.shown(), "postgres://me@%2Ftmp%2Fpg:5432/logs");
        let u = PgUrl::parse("postgresql://me@/logs?host=/run/pg&port=7000&password=x").unwrap();
        assert_eq!(u.shown(), "postgres://me@%2Frun%2Fpg:7000/logs?host=/run/pg&port=7000");
    }

    #[test]
    fn bad_urls_are_invalid_input() {
        for (url, why) in [
            ("mysql://x@h/db", "not a postgres"),
            ("postgres://h/db", "names no user"),
            ("postgres://u@/db", "names no host"),
            ("postgres://u@h/db?bogus=1", "cannot parse"),
            ("postgres://u@h/db?session=", "session parameter is empty"),
            ("postgres://u@h/db?session=%zz", "percent-encoded"),
            ("postgres://u@h/db?sslmode=require", "without TLS"),
            ("postgres://u@h:notaport/db", "cannot parse"),
        ] {
            let e = PgUrl::parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
            assert!(e.message().contains(why), "{url}: {}", e.message());
        }
    }

    #[test]
    fn ids_are_checked() {
        assert!(check_id("a").is_ok());
        assert_eq!(check_id("").unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(check_id("a\0b").unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(check_id(&"x".repeat(MAX_ID_BYTES + 1)).unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn lease_keys_wrap_at_32_bits() {
        assert_eq!(lease_key(16384, 7), (16384, 7));
        assert_eq!(lease_key(16384, (1 << 32) + 7), (16384, 7));
    }
}
