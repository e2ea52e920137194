//! The writer lease (`docs/storage-postgres.md`, "The writer lease"): data in the session's row
//! (`lease_holder`, `lease_epoch`, `lease_expires`, `lease_live`), not a connection.
//!
//! - **Taken** with a conditional write that raises the epoch (the fencing token) when the lease
//!   is free: never held, given back, expired (the server's clock), or held by a process whose
//!   liveness lock is gone (`fast_takeover`: the process died, so its sessions are taken over at
//!   once instead of after `lease_time`).
//! - **Renewed** by the pool's renewer, every third of `lease_time`, for all the pool's leases in
//!   one statement per thousand; an append renews its own lease in the same statement.
//! - **Fencing.** Every write names the epoch in the same statement as the head seq, so a writer
//!   whose lease was taken over (it was paused, partitioned or stopped past `lease_time`) writes
//!   nothing after the new holder took it: its write matches no row and it gets
//!   [`ErrorKind::Locked`].
//! - **Given back** when the handle is dropped: the holder is cleared, the epoch kept.

use super::error::CallError;
use super::pool::{Bound, Pool};
use crate::error::{Error, ErrorKind, Result};
use crate::observe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_postgres::types::Type;

/// A lease this process holds.
#[derive(Debug)]
pub(super) struct Lease {
    pub id: String,
    /// The fencing token.
    pub epoch: i64,
    /// Set when a renewal found the lease taken over.
    pub lost: AtomicBool,
}

const STATE_SQL: &str = "
SELECT s.lease_epoch, s.lease_holder, s.lease_live,
       COALESCE(s.lease_expires > now(), false),
       GREATEST(0, COALESCE(extract(epoch FROM s.lease_expires - now()), 0))::float8,
       s.lease_live IS NOT NULL AND EXISTS (
           SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND ((l.classid::bigint << 32) | l.objid::bigint) = s.lease_live),
       EXISTS (
           SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.classid = 'llmsession_sessions'::regclass::oid
              AND l.objid::bigint = s.lock_key % 4294967296
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
  FROM llmsession_sessions s WHERE s.id = $1";

const TAKE_SQL: &str = "
UPDATE llmsession_sessions
   SET lease_holder = $2, lease_live = $3, lease_epoch = lease_epoch + 1,
       lease_expires = now() + make_interval(secs => $4)
 WHERE id = $1 AND lease_epoch = $5
RETURNING lease_epoch";

const RELEASE_SQL: &str = "
UPDATE llmsession_sessions SET lease_holder = NULL, lease_expires = NULL, lease_live = NULL
 WHERE id = $1 AND lease_epoch = $2
RETURNING 1";

const RENEW_SQL: &str = "
UPDATE llmsession_sessions s SET lease_expires = now() + make_interval(secs => $3)
  FROM unnest($1::text[], $2::int8[]) AS t(id, epoch)
 WHERE s.id = t.id AND s.lease_epoch = t.epoch AND s.lease_holder IS NOT NULL
RETURNING s.id";

/// Takes the lease of session `id` (whose row exists) for this pool, or refuses with
/// [`ErrorKind::Locked`] naming the holder.
pub(super) async fn take(pool: &Arc<Pool>, id: &str, describe: &str) -> Result<Arc<Lease>> {
    {
        let mut leases = pool.leases.lock();
        if leases.contains_key(id) {
            let why = format!("another writer in this process ({}) holds its lease; open it read-only to inspect it", pool.holder);
            return Err(locked(describe, id, &why, Some(pool.holder.clone()), None));
        }
        leases.insert(id.to_string(), None);
    }
    let r = take_in_db(pool, id, describe).await;
    let mut leases = pool.leases.lock();
    match r {
        Ok(lease) => {
            leases.insert(id.to_string(), Some(lease.clone()));
            Ok(lease)
        }
        Err(e) => {
            leases.remove(id);
            Err(e)
        }
    }
}

async fn take_in_db(pool: &Arc<Pool>, id: &str, describe: &str) -> Result<Arc<Lease>> {
    let live = pool.liveness().await;
    let live_key: Option<i64> = live.then_some(pool.live_key);
    let secs = pool.settings.lease_time.as_secs_f64();
    let err = |e: CallError| e.into_error(describe, "cannot take the writer lease");
    for _ in 0..3 {
        let rows = pool.query(Bound::Lease, STATE_SQL, &[(&id, Type::TEXT)]).await.map_err(err)?;
        let Some(r) = rows.first() else {
            return Err(Error::new(ErrorKind::Storage, format!("{describe}: the session's row vanished while its lease was taken")));
        };
        let epoch: i64 = r.get(0);
        let holder: Option<String> = r.get(1);
        let their_key: Option<i64> = r.get(2);
        let valid: bool = r.get(3);
        let left: f64 = r.get(4);
        let their_live: bool = r.get(5);
        let v1_held: bool = r.get(6);
        if v1_held {
            return Err(locked(
                describe,
                id,
                "a writer of an older llmsession (schema version 1, whose lease is an advisory lock on its connection) holds it; stop the older workers before the newer ones write",
                None,
                None,
            ));
        }
        let free = match &holder {
            None => true,
            Some(_) if !valid => true,
            // Our own process: a handle of ours that is gone without giving the lease back
            // (this pool holds no lease of the session, checked above).
            Some(_) if their_key.is_some() && their_key == Some(pool.live_key) => true,
            // The holder's process is gone: its liveness lock is free.
            Some(_) => pool.settings.fast_takeover && their_key.is_some() && !their_live,
        };
        if !free {
            let h = holder.unwrap_or_default();
            let why = format!(
                "another writer holds its lease ({h}, fencing token {epoch}, {left:.1} s left of it); open it read-only to inspect it, or retry when the lease ends (a writer that closes gives it back at once{})",
                if pool.settings.fast_takeover { ", one that dies is taken over at once" } else { ", one that dies is taken over when its lease expires" }
            );
            return Err(locked(describe, id, &why, Some(h), Some((left * 1000.0) as u64)));
        }
        let took = pool
            .query(
                Bound::Lease,
                TAKE_SQL,
                &[(&id, Type::TEXT), (&pool.holder, Type::TEXT), (&live_key, Type::INT8), (&secs, Type::FLOAT8), (&epoch, Type::INT8)],
            )
            .await
            .map_err(err)?;
        if let Some(row) = took.first() {
            let epoch: i64 = row.get(0);
            return Ok(Arc::new(Lease { id: id.to_string(), epoch, lost: AtomicBool::new(false) }));
        }
        // Another writer took or gave back the lease between the two statements: look again.
    }
    Err(locked(describe, id, "other writers are taking its lease at the same time", None, None))
}

/// Gives the lease back (when the handle is dropped); a failure leaves it to expire.
pub(super) async fn release(pool: &Pool, lease: &Lease) {
    let _ = pool.query(Bound::Lease, RELEASE_SQL, &[(&lease.id, Type::TEXT), (&lease.epoch, Type::INT8)]).await;
}

/// Renews every lease of the pool; marks those found taken over as lost.
pub(super) async fn renew_all(pool: &Pool) {
    let held: Vec<Arc<Lease>> = pool.leases.lock().values().flatten().filter(|l| !l.lost.load(Ordering::Relaxed)).cloned().collect();
    let secs = pool.settings.lease_time.as_secs_f64();
    for chunk in held.chunks(1000) {
        let ids: Vec<&str> = chunk.iter().map(|l| l.id.as_str()).collect();
        let epochs: Vec<i64> = chunk.iter().map(|l| l.epoch).collect();
        let Ok(rows) =
            pool.query(Bound::Lease, RENEW_SQL, &[(&ids, Type::TEXT_ARRAY), (&epochs, Type::INT8_ARRAY), (&secs, Type::FLOAT8)]).await
        else {
            // The database did not answer: the appends' own checks keep the fencing.
            continue;
        };
        let renewed: std::collections::HashSet<&str> = rows.iter().map(|r| r.get::<_, &str>(0)).collect();
        for l in chunk {
            if !renewed.contains(l.id.as_str()) && !l.lost.swap(true, Ordering::Relaxed) {
                observe::emit(observe::Level::Warn, || {
                    observe::Observation::new(
                        "store-lease-lost",
                        observe::Level::Warn,
                        format!("{}: the writer lease of session {:?} (fencing token {}) was taken over by another writer; the handle writes nothing more", pool.shown, l.id, l.epoch),
                    )
                    .session(l.id.clone())
                    .with("store", pool.shown.clone())
                    .with("epoch", l.epoch)
                });
            }
        }
    }
}

/// The refusal of a writer: [`ErrorKind::Locked`], with the holder and when to retry where known.
pub(super) fn locked(describe: &str, id: &str, why: &str, holder: Option<String>, retry_ms: Option<u64>) -> Error {
    observe::emit(observe::Level::Warn, || {
        let mut o =
            observe::Observation::new("store-locked", observe::Level::Warn, format!("{describe}: refused to open for writing: {why}"))
                .session(id.to_string())
                .with("store", describe.to_string());
        if let Some(h) = &holder {
            o = o.with("holder", h.clone());
        }
        o
    });
    let mut e = Error::new(ErrorKind::Locked, format!("{describe}: the session is in use: {why}"))
        .with("store", describe.to_string())
        .with("id", id.to_string());
    if let Some(h) = holder {
        e = e.with("holder", h);
    }
    if let Some(ms) = retry_ms {
        e = e.with("retryAfterMs", ms);
    }
    e
}
