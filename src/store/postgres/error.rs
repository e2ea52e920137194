//! How the PostgreSQL store's failures become the library's errors: one place that says which
//! bound was hit, whether a write's outcome is unknown, and a plain reason for the common causes.

use crate::error::{Error, ErrorKind};
use std::time::Duration;
use tokio_postgres::error::SqlState;

/// A failure of one call to the database, before it becomes an [`Error`].
#[derive(Debug)]
pub(super) enum CallError {
    /// The client or the server reported an error.
    Pg(tokio_postgres::Error),
    /// A bound ran out: `bound` is the URL parameter that sets it.
    Timeout { bound: &'static str, after: Duration, sent: bool },
    /// No connection could be made (every host tried); the text says why for each.
    Connect(String),
    /// A connection could not be made to the one host (the client's error).
    ConnectPg(tokio_postgres::Error),
    /// Anything else (a TLS file that cannot be read, ...), already an error.
    Other(Error),
}

impl From<tokio_postgres::Error> for CallError {
    fn from(e: tokio_postgres::Error) -> CallError {
        CallError::Pg(e)
    }
}

impl CallError {
    /// Whether what the server did with a write is unknown: the statement was sent and then the
    /// connection broke, the server went away, or the bound ran out.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            CallError::Pg(e) => pg_outcome_unknown(e),
            CallError::Timeout { sent, .. } => *sent,
            CallError::Connect(_) | CallError::ConnectPg(_) | CallError::Other(_) => false,
        }
    }

    /// The error for `store` (the URL as shown) and `what` the call was doing.
    pub fn into_error(self, store: &str, what: &str) -> Error {
        match self {
            CallError::Pg(e) => {
                let lost = pg_outcome_unknown(&e);
                let err = pg_error(store, what, &e);
                if lost {
                    err.with("connectionLost", true)
                } else {
                    err
                }
            }
            // The call never started: what it was for does not matter to the reader.
            CallError::ConnectPg(e) => pg_error(store, "cannot connect", &e),
            CallError::Timeout { bound, after, sent } => {
                let waited = match bound {
                    "pool_timeout" => "no connection of the pool came free",
                    "connect_timeout" => "the server did not complete the connection (TCP, TLS and authentication)",
                    "lease_timeout" => "taking or giving back the writer lease did not finish",
                    _ => "the server did not answer the statement",
                };
                let mut e = Error::new(
                    ErrorKind::Storage,
                    format!(
                        "{store}: {what}: {waited} within {bound}={} s{}",
                        secs(after),
                        if sent { "" } else { "; nothing was sent, so nothing was written" }
                    ),
                )
                .with("store", store.to_string())
                .with("bound", bound)
                .with("timeoutMs", after.as_millis() as u64);
                if sent {
                    e = e.with("outcomeUnknown", true);
                }
                e
            }
            CallError::Connect(why) => {
                Error::new(ErrorKind::Storage, format!("{store}: cannot connect: {why}")).with("store", store.to_string())
            }
            CallError::Other(e) => e,
        }
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// The text of a client error with its causes (the client's `Display` stops at the top), and a
/// plain hint for the TLS failures people meet.
pub(super) fn error_text(e: &tokio_postgres::Error) -> String {
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
    if s.contains("UnknownIssuer") {
        s.push_str(" (the server's certificate is not signed by a CA in sslrootcert)");
    } else if s.contains("NotValidForName") || s.contains("not valid for name") {
        s.push_str(" (the server's certificate does not name the host the URL connects to: sslmode=verify-full checks the name, verify-ca does not)");
    } else if s.contains("server does not support TLS") || s.contains("TLS was required") {
        s.push_str(" (the server has ssl=off: use sslmode=prefer or disable, or turn TLS on at the server)");
    }
    s
}

/// A storage error from the client, with the SQLSTATE in the detail and a plain reason for the
/// common causes of a failed connection.
pub(super) fn pg_error(store: &str, what: &str, e: &tokio_postgres::Error) -> Error {
    let code = e.code().map(|c| c.code().to_string());
    let why = match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "authentication failed (check the user and password in the URL, or the client certificate): "
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => "the database does not exist (create it, or name another in the URL): ",
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            "permission denied (the role needs to create and write the llmsession tables): "
        }
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => "the server accepts no more connections (lower pool_size, or use a pooler): ",
        Some(c) if *c == SqlState::INVALID_SQL_STATEMENT_NAME || *c == SqlState::DUPLICATE_PSTATEMENT => {
            "a prepared statement is missing or taken on the server connection: the URL goes through a transaction-mode pooler (PgBouncer, RDS Proxy, Supavisor...), so add pooler=transaction to it: "
        }
        Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            "the server is a read-only standby (name the primary, or every host with target_session_attrs=read-write): "
        }
        _ => "",
    };
    let mut err = Error::new(ErrorKind::Storage, format!("{store}: {what}: {why}{}", error_text(e))).with("store", store.to_string());
    if let Some(c) = code {
        err = err.with("sqlstate", c);
    }
    err
}

/// Whether a client error leaves it unknown what the server did: the connection is gone, or
/// the server is shutting down or crashing.
fn pg_outcome_unknown(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => e.as_db_error().is_none(),
        Some(c) => c.code().starts_with("08") || c.code().starts_with("57P"),
    }
}
