//! Connections to a database, shared by every session a process opens on it: one small
//! process-wide runtime, one bounded pool per database (per URL without its `session`), every
//! call within its bound, and the two background tasks a pool of writers needs (the lease
//! renewer, and the liveness lock of `fast_takeover`).

use super::config::{application_name, single_host, PgUrl, Settings};
use super::error::{error_text, CallError};
use super::lease::{renew_all, Lease};
use super::tls;
use crate::error::{Error, ErrorKind, Result};
use deadpool::managed::{self, Metrics, PoolError, RecycleError, RecycleResult, TimeoutType};
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The runtime that drives the pooled connections (two worker threads, `llmsession-pg`); the
/// store's calls block on it from the caller's thread.
static RUNTIME: Lazy<std::result::Result<tokio::runtime::Runtime, String>> = Lazy::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("llmsession-pg")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
});

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    RUNTIME.as_ref().map_err(|e| Error::new(ErrorKind::Storage, format!("cannot start the PostgreSQL store's runtime thread: {e}")))
}

/// Runs `f` to completion on the store's runtime, from a thread that is not a runtime's.
pub(super) fn block_on<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::new(
            ErrorKind::Storage,
            "the PostgreSQL store blocks until the database answers, so it cannot be called from inside an asynchronous runtime's thread: call it from a blocking thread (for tokio: tokio::task::spawn_blocking)",
        ));
    }
    runtime()?.block_on(f)
}

/// A pooled connection.
pub(super) struct Conn {
    pub client: Client,
    /// Set when a statement on it ran past its bound or the connection broke: the pool drops it
    /// instead of handing it out again.
    broken: AtomicBool,
    /// The statements prepared on this connection (not with `pooler=transaction`).
    statements: Mutex<HashMap<String, tokio_postgres::Statement>>,
}

impl Conn {
    /// `sql` prepared on this connection with the types of `params`: once, then kept (the
    /// server plans each statement once per connection).
    async fn prepared(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> std::result::Result<tokio_postgres::Statement, tokio_postgres::Error> {
        let cached = self.statements.lock().get(sql).cloned();
        if let Some(st) = cached {
            return Ok(st);
        }
        let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
        let st = self.client.prepare_typed(sql, &types).await?;
        self.statements.lock().insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

/// Makes the pool's connections: host by host, each within `connect_timeout`, with TLS as the
/// URL says.
pub(super) struct Manager {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    connect_timeout: Duration,
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = CallError;

    async fn create(&self) -> std::result::Result<Conn, CallError> {
        let client = connect(&self.config, &self.tls, self.connect_timeout).await?;
        Ok(Conn { client, broken: AtomicBool::new(false), statements: Mutex::new(HashMap::new()) })
    }

    async fn recycle(&self, conn: &mut Conn, _: &Metrics) -> RecycleResult<CallError> {
        if conn.client.is_closed() || conn.broken.load(Ordering::Relaxed) {
            return Err(RecycleError::Message("the connection is closed or was abandoned mid-statement".into()));
        }
        Ok(())
    }
}

/// Connects to the first host of `config` that accepts (and, with
/// `target_session_attrs=read-write`, is a primary), each within `bound`.
pub(super) async fn connect(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    bound: Duration,
) -> std::result::Result<Client, CallError> {
    let hosts = config.get_hosts().len();
    let mut why = Vec::new();
    for i in 0..hosts {
        let one = single_host(config, i);
        let name = host_name(config, i);
        match tokio::time::timeout(bound, one.connect(tls.clone())).await {
            Ok(Ok((client, connection))) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                return Ok(client);
            }
            Ok(Err(e)) if hosts == 1 => return Err(CallError::ConnectPg(e)),
            Ok(Err(e)) => why.push(format!("{name}: {}", error_text(&e))),
            Err(_) if hosts == 1 => return Err(CallError::Timeout { bound: "connect_timeout", after: bound, sent: false }),
            Err(_) => why.push(format!("{name}: no answer within connect_timeout={} s", bound.as_secs_f64())),
        }
    }
    Err(CallError::Connect(format!("no host took the connection ({})", why.join("; "))))
}

fn host_name(config: &tokio_postgres::Config, i: usize) -> String {
    use tokio_postgres::config::Host;
    let port = config.get_ports().get(i).or(config.get_ports().first()).copied().unwrap_or(5432);
    match &config.get_hosts()[i] {
        Host::Tcp(h) => format!("{h}:{port}"),
        Host::Unix(p) => format!("{}:{port}", p.display()),
    }
}

/// Which bound a call runs under.
#[derive(Clone, Copy, Debug)]
pub(super) enum Bound {
    /// `query_timeout`: a statement or a short transaction.
    Query,
    /// `lease_timeout`: taking or giving back a lease.
    Lease,
}

/// The connections of one database for this process, and the leases its writers hold.
pub(super) struct Pool {
    inner: managed::Pool<Manager>,
    pub settings: Settings,
    /// The database as shown (no password).
    pub shown: String,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    /// Who this process is, as a lease names its holder.
    pub holder: String,
    /// The advisory lock this pool's liveness connection holds (`fast_takeover`).
    pub live_key: i64,
    /// Whether the liveness connection holds its lock right now.
    live: AtomicBool,
    /// The sessions this pool's writers hold (`None`: a lease being taken).
    pub leases: Mutex<HashMap<String, Option<Arc<Lease>>>>,
    /// The database's schema was checked (and created or migrated) by this pool.
    pub schema_ready: AtomicBool,
    /// `synchronous_commit` for a sync point: the server's own setting, or `on` where it is `off`.
    pub sync_level: Mutex<Option<String>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    liveness_started: AtomicBool,
}

/// The pools of this process, by URL (without `session`).
static POOLS: Lazy<Mutex<HashMap<String, Weak<Pool>>>> = Lazy::new(|| Mutex::new(HashMap::new()));

impl Pool {
    /// The pool for `url`'s database: the one this process already has, or a new one (which
    /// connects on first use).
    pub fn for_url(url: &PgUrl) -> Result<Arc<Pool>> {
        let rt = runtime()?;
        let mut pools = POOLS.lock();
        pools.retain(|_, p| p.strong_count() > 0);
        if let Some(p) = pools.get(&url.pool_key).and_then(Weak::upgrade) {
            return Ok(p);
        }
        let tls = tls::connector(&url.tls)?;
        let s = url.settings;
        let hosts = url.config.get_hosts().len() as u32;
        let manager = Manager { config: url.config.clone(), tls: tls.clone(), connect_timeout: s.connect_timeout };
        let inner = managed::Pool::builder(manager)
            .max_size(s.pool_size)
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(s.pool_timeout))
            .create_timeout(Some(s.connect_timeout * hosts + Duration::from_millis(100)))
            .recycle_timeout(Some(s.connect_timeout))
            .build()
            .map_err(|e| Error::new(ErrorKind::Storage, format!("{}: cannot make the connection pool: {e}", url.shown)))?;
        let live_key = random_key();
        let pool = Arc::new(Pool {
            inner,
            settings: s,
            shown: url.shown.clone(),
            config: url.config.clone(),
            tls,
            holder: application_name(),
            live_key,
            live: AtomicBool::new(false),
            leases: Mutex::new(HashMap::new()),
            schema_ready: AtomicBool::new(false),
            sync_level: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            liveness_started: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&pool);
        let every = s.lease_time / 3;
        pool.tasks.lock().push(rt.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(p) = weak.upgrade() else { return };
                renew_all(&p).await;
            }
        }));
        pools.insert(url.pool_key.clone(), Arc::downgrade(&pool));
        Ok(pool)
    }

    /// A connection of the pool, within `pool_timeout` (waiting for a free one) and
    /// `connect_timeout` (making a new one).
    pub async fn get(&self) -> std::result::Result<managed::Object<Manager>, CallError> {
        self.inner.get().await.map_err(|e| match e {
            PoolError::Timeout(TimeoutType::Wait) => {
                CallError::Timeout { bound: "pool_timeout", after: self.settings.pool_timeout, sent: false }
            }
            PoolError::Timeout(_) => CallError::Timeout { bound: "connect_timeout", after: self.settings.connect_timeout, sent: false },
            PoolError::Backend(e) => e,
            PoolError::PostCreateHook(_) | PoolError::Closed | PoolError::NoRuntimeSpecified => {
                CallError::Other(Error::new(ErrorKind::Storage, format!("{}: the connection pool is closed", self.shown)))
            }
        })
    }

    /// Runs `f` (statements on `conn`) within `bound`. Past it, or when the connection breaks,
    /// the connection is abandoned (the server is asked to cancel what it runs) and the error
    /// says the outcome is unknown.
    pub async fn bounded<T>(
        &self,
        conn: &Conn,
        bound: Bound,
        f: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> std::result::Result<T, CallError> {
        let (name, after) = match bound {
            Bound::Query => ("query_timeout", self.settings.query_timeout),
            Bound::Lease => ("lease_timeout", self.settings.lease_timeout),
        };
        match tokio::time::timeout(after, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_closed() || conn.client.is_closed() || e.as_db_error().is_none() {
                    conn.broken.store(true, Ordering::Relaxed);
                }
                Err(CallError::Pg(e))
            }
            Err(_) => {
                conn.broken.store(true, Ordering::Relaxed);
                let token = conn.client.cancel_token();
                let tls = self.tls.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(5), token.cancel_query(tls)).await;
                });
                Err(CallError::Timeout { bound: name, after, sent: true })
            }
        }
    }

    /// One statement on a connection of the pool, within `bound`: prepared once per connection
    /// (named, planned once), or with `pooler=transaction` unnamed and typed in one round trip
    /// (a transaction-mode pooler may run each round trip on another server connection).
    pub async fn query(&self, bound: Bound, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> std::result::Result<Vec<Row>, CallError> {
        let conn = self.get().await?;
        if !self.settings.prepared {
            return self.bounded(&conn, bound, conn.client.query_typed(sql, params)).await;
        }
        self.bounded(&conn, bound, async {
            let statement = conn.prepared(sql, params).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            conn.client.query(&statement, &values).await
        })
        .await
    }

    /// One statement as [`Pool::query`] runs it, each row handed to `each` as it arrives and
    /// dropped (a long result is never held whole, and comes in messages of one row: a
    /// connection's receive buffer grows to the largest message it reads, and keeps that size).
    /// The first error `each` gives stops the read and is returned.
    pub async fn query_each(
        &self,
        bound: Bound,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        mut each: impl FnMut(Row) -> Result<()>,
    ) -> std::result::Result<(), CallError> {
        use futures_core::Stream;
        let conn = self.get().await?;
        let c = &conn.client;
        let mut refused = None;
        self.bounded(&conn, bound, async {
            let rows = if self.settings.prepared {
                let statement = conn.prepared(sql, params).await?;
                c.query_raw(&statement, params.iter().map(|(v, _)| *v)).await?
            } else {
                c.query_typed_raw(sql, params.iter().map(|(v, t)| (*v, t.clone()))).await?
            };
            let mut rows = std::pin::pin!(rows);
            while let Some(row) = std::future::poll_fn(|cx| rows.as_mut().poll_next(cx)).await {
                if let Err(e) = each(row?) {
                    refused = Some(e);
                    break;
                }
            }
            Ok(())
        })
        .await?;
        match refused {
            Some(e) => Err(CallError::Other(e)),
            None => Ok(()),
        }
    }

    /// Starts the liveness connection (once per pool, with `fast_takeover`) and waits, within
    /// `connect_timeout`, until it holds its lock. Returns whether it does: a lease records the
    /// key only then.
    pub async fn liveness(self: &Arc<Self>) -> bool {
        if !self.settings.fast_takeover {
            return false;
        }
        if !self.liveness_started.swap(true, Ordering::SeqCst) {
            let weak = Arc::downgrade(self);
            let (config, tls, key, bound) = (self.config.clone(), self.tls.clone(), self.live_key, self.settings.connect_timeout);
            let every = self.settings.lease_time / 3;
            let task = tokio::spawn(liveness_loop(weak, config, tls, key, bound, every));
            self.tasks.lock().push(task);
        }
        let deadline = tokio::time::Instant::now() + self.settings.connect_timeout;
        while !self.live.load(Ordering::SeqCst) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }
}

/// Holds the advisory lock `key` on a connection of its own while the pool lives, reconnecting
/// when the connection breaks. The lock is released by the server the moment this process's
/// connection ends, which is what lets another worker take a dead process's sessions at once.
async fn liveness_loop(
    pool: Weak<Pool>,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    key: i64,
    bound: Duration,
    every: Duration,
) {
    loop {
        if pool.strong_count() == 0 {
            return;
        }
        if let Ok(client) = connect(&config, &tls, bound).await {
            let locked = tokio::time::timeout(bound, client.query_typed("SELECT pg_try_advisory_lock($1)", &[(&key, Type::INT8)])).await;
            if let Ok(Ok(rows)) = locked {
                if rows.first().is_some_and(|r| r.get::<_, bool>(0)) {
                    set_live(&pool, true);
                    loop {
                        tokio::time::sleep(every).await;
                        if pool.strong_count() == 0 {
                            return;
                        }
                        let probe = tokio::time::timeout(bound, client.simple_query("SELECT 1")).await;
                        if client.is_closed() || !matches!(probe, Ok(Ok(_))) {
                            break;
                        }
                    }
                    set_live(&pool, false);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn set_live(pool: &Weak<Pool>, v: bool) {
    if let Some(p) = pool.upgrade() {
        p.live.store(v, Ordering::SeqCst);
    }
}

/// A random 63-bit key (the liveness lock), from the OS.
fn random_key() -> i64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        b = ((t as u64) ^ ((std::process::id() as u64) << 32)).to_le_bytes();
    }
    (u64::from_le_bytes(b) >> 1) as i64
}
