//! Stores named by URL, so a host picks where a session lives with one string:
//!
//! - `file:PATH`, `file:/abs/path`, `file:///abs/path` (or `file://localhost/...`): a JSONL log
//!   ([`JsonlStore`]); `%XX` escapes in the path are decoded.
//! - `postgres://...` or `postgresql://...`: a session in a PostgreSQL database
//!   ([`PgStore`](super::postgres::PgStore), with the `postgres` feature), the session named by
//!   the options' id or the URL's `session=ID` parameter.
//!
//! The options ([`UrlOptions`]) are the same for every engine: the session id, read-only,
//! whether a writing open may create the session, the durability policy; engine-specific ones
//! (a created file's mode, the largest log read) are ignored by the engines they do not concern.

use super::{Durability, FileOptions, JsonlStore, Store};
use crate::error::{Error, ErrorKind, Result};
use std::path::PathBuf;

/// Where a URL points.
#[derive(Debug)]
pub enum Location {
    /// A JSONL file.
    File(PathBuf),
    /// A PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(Box<super::postgres::PgUrl>),
}

/// How a store named by URL is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlOptions {
    /// The session: which one of the store to open (a database holds many), or the id a new
    /// session gets. A database open without one creates a session with a random id.
    pub id: Option<String>,
    /// Open without the write lock or lease; appends are refused and nothing is written.
    pub read_only: bool,
    /// A writing open may create the session when the store holds none (default true).
    pub create: bool,
    /// When appended events are made durable.
    pub durability: Durability,
    /// How an open checks the stored log.
    pub check: crate::log::load::OpenCheck,
    /// When the session writes checkpoints.
    pub checkpoints: crate::log::checkpoint::CheckpointPolicy,
    /// File-only: the mode of a created file and the largest log read (`read_only` above wins).
    pub file: FileOptions,
}

impl Default for UrlOptions {
    fn default() -> UrlOptions {
        UrlOptions {
            id: None,
            read_only: false,
            create: true,
            durability: Durability::default(),
            check: Default::default(),
            checkpoints: Default::default(),
            file: FileOptions::default(),
        }
    }
}

/// One session of a store, as [`list_sessions`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// Creation time, Unix ms.
    pub created_at: u64,
    /// For a fork: the parent's id and the seed length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentInfo>,
    /// Events stored.
    pub events: u64,
    /// The chain value after the last event (version 2 logs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_head: Option<String>,
    /// Time of the last change, Unix ms.
    pub updated_at: u64,
    /// Whether a writer holds the session (its lock or lease) now.
    pub in_use: bool,
}

/// The parent of a forked or spawned session.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentInfo {
    /// The parent's id.
    pub id: String,
    /// How many of its events seeded the fork (for a child: the seq of the parent's
    /// `agent/spawn`).
    pub seed_length: u64,
    /// Whether the session is a child an agent spawned (else a fork).
    pub spawned: bool,
    /// For a child: the parent's tool call it answers (none at a turn boundary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl ParentInfo {
    /// The parent link of a session header (`None` for a session that has no parent).
    pub fn of(h: &crate::log::load::SessionHeader) -> Option<ParentInfo> {
        h.parent.as_ref().map(|(id, seed_length)| ParentInfo {
            id: id.clone(),
            seed_length: *seed_length,
            spawned: h.spawn.is_some(),
            call_id: h.spawn.as_ref().and_then(|s| s.call_id.clone()),
        })
    }
}

/// Parses a store URL.
pub fn parse(url: &str) -> Result<Location> {
    if let Some(rest) = url.strip_prefix("file:") {
        return file_path(rest).map(Location::File);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return super::postgres::PgUrl::parse(url).map(|u| Location::Postgres(Box::new(u)));
        #[cfg(not(feature = "postgres"))]
        return Err(Error::invalid("url", "this build of llmsession has no PostgreSQL store (the `postgres` feature is off)"));
    }
    let scheme = url.split_once(':').map(|(s, _)| s).filter(|s| !s.is_empty() && !s.contains('/'));
    Err(Error::invalid(
        "url",
        match scheme {
            Some(s) => format!("unknown store scheme {s:?} (expected file:, postgres:// or postgresql://)"),
            None => "not a store URL (expected file:PATH, postgres://... or postgresql://...)".to_string(),
        },
    ))
}

/// The path a `file:` URL names (`None` for a URL of another store, or one that does not parse).
pub fn file_of(url: &str) -> Option<PathBuf> {
    url.strip_prefix("file:").and_then(|rest| file_path(rest).ok())
}

fn file_path(rest: &str) -> Result<PathBuf> {
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !host.is_empty() && host != "localhost" {
                return Err(Error::invalid("url", format!("file://{host}/...: a file URL names a local path (file:///path or file:path)")));
            }
            path
        }
        None => rest,
    };
    let decoded = percent_decode(path).ok_or_else(|| Error::invalid("url", "the file path has an invalid %XX escape or is not UTF-8"))?;
    if decoded.is_empty() {
        return Err(Error::invalid("url", "the file URL names no path"));
    }
    if decoded.contains('\0') {
        return Err(Error::invalid("url", "the file path contains a NUL byte"));
    }
    Ok(PathBuf::from(decoded))
}

/// Decodes `%XX` escapes (two hex digits each); `None` for a malformed escape or a result that
/// is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A store URL (or a file path) as it may be shown in a message: the URL as given without its
/// password, the way the library shows a database (`postgres://USER@HOST:PORT/DB?...`). The
/// password after `USER:` in the userinfo and every `password=` query parameter are left out;
/// everything else is kept as given (the `session` parameter included), so that the reader
/// recognises the URL. It works on text that does not parse as a URL too: a `scheme://` URL
/// (but `file://`) loses whatever lies between the first `:` of its userinfo and its last `@`
/// before the query. A file path or a `file:` URL is returned as it is.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let is_scheme = !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !is_scheme || scheme.eq_ignore_ascii_case("file") {
        return url.to_string();
    }
    let (before, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = format!("{scheme}://");
    match before.rfind('@') {
        Some(at) => {
            let user = &before[..at];
            out.push_str(user.split_once(':').map_or(user, |(u, _)| u));
            out.push_str(&before[at..]);
        }
        None => out.push_str(before),
    }
    if let Some(q) = query {
        let is_password = |pair: &str| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            percent_decode(key).unwrap_or_else(|| key.to_string()).trim().eq_ignore_ascii_case("password")
        };
        let kept: Vec<&str> = q.split('&').filter(|p| !is_password(p)).collect();
        if !kept.iter().all(|p| p.is_empty()) {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

/// Opens the store `url` names. Returns it with the id a session created in it must get (for
/// a database: the session the store is for).
pub fn open_store(url: &str, opts: &UrlOptions) -> Result<(Box<dyn Store>, Option<String>)> {
    match parse(url)? {
        Location::File(path) => {
            if !opts.read_only && !opts.create && std::fs::metadata(&path).map(|m| m.len() == 0).unwrap_or(true) {
                return Err(Error::invalid("url", format!("{}: holds no session (the open may not create one)", path.display())));
            }
            let file = FileOptions { read_only: opts.read_only, ..opts.file };
            Ok((Box::new(JsonlStore::open_with(&path, file)?), opts.id.clone()))
        }
        #[cfg(feature = "postgres")]
        Location::Postgres(pg) => {
            use super::postgres::{PgOptions, PgStore};
            let id = match (opts.id.as_deref(), pg.session()) {
                (Some(a), Some(b)) if a != b => {
                    return Err(Error::invalid("id", format!("the URL names session {b:?} but the options name {a:?}")));
                }
                (Some(a), _) => a.to_string(),
                (None, Some(b)) => b.to_string(),
                (None, None) if opts.read_only || !opts.create => {
                    return Err(Error::invalid(
                        "id",
                        "name the session to open: an id in the options or ?session=ID in the URL (a database holds many sessions)",
                    ))
                }
                (None, None) => crate::session_id::random_id(),
            };
            let store = PgStore::open(&pg, &id, PgOptions { read_only: opts.read_only, create: opts.create, durability: opts.durability })?;
            Ok((Box::new(store), Some(id)))
        }
    }
}

/// The sessions of the store `url` names, ordered by id: at most `limit` of them, after id
/// `after`; with `parent`, only the sessions whose parent that is (its children and forks). A
/// file holds one session (or none), and its children lie beside it (`STEM.TAG.jsonl` for
/// `STEM.jsonl`, see [`super::child_path`]): a file URL with `parent` lists those. A directory
/// holds one session per JSONL file in it (`*.jsonl`; a file that is not a session log is
/// passed over), a database many. No log is read whole: a file's row comes from its first line
/// (the session header) and its last complete line (the last event's seq and chain value), a
/// database's from its sessions table.
pub fn list_sessions(url: &str, after: Option<&str>, limit: Option<u64>, parent: Option<&str>) -> Result<Vec<SessionInfo>> {
    match parse(url)? {
        Location::File(path) => {
            if std::fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
                return super::jsonl::list_directory(&path, after, limit, parent);
            }
            if let Some(parent) = parent {
                let mut out: Vec<SessionInfo> = Vec::new();
                for p in super::children_beside(&path)? {
                    out.extend(list_sessions(&format!("file:{}", p.display()), after, None, None)?);
                }
                out.retain(|s| s.parent.as_ref().is_some_and(|p| p.id == parent));
                out.sort_by(|a, b| a.id.cmp(&b.id));
                out.truncate(limit.unwrap_or(u64::MAX).min(usize::MAX as u64) as usize);
                return Ok(out);
            }
            let mut rows = {
                let locks = super::file::flock_holders();
                match super::jsonl::session_row(&path, &locks) {
                    Ok(Some(row)) => vec![row],
                    Ok(None) => Vec::new(),
                    Err(e) => return Err(e.context(path.display())),
                }
            };
            rows.sort_by(|a, b| a.id.cmp(&b.id));
            if let Some(a) = after {
                rows.retain(|r| r.id.as_str() > a);
            }
            if let Some(l) = limit {
                rows.truncate(l.min(usize::MAX as u64) as usize);
            }
            Ok(rows)
        }
        #[cfg(feature = "postgres")]
        Location::Postgres(pg) => super::postgres::list_sessions(&pg, after, limit, parent),
    }
}

/// The error for a store that holds another session than the one asked for.
pub(crate) fn other_session(store: &str, want: &str, have: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("{store}: holds session {have:?}, not {want:?}"))
        .with("field", "id")
        .with("id", have.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(url: &str) -> PathBuf {
        match parse(url).unwrap() {
            Location::File(p) => p,
            #[cfg(feature = "postgres")]
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn file_urls() {
        assert_eq!(path_of("file:log.jsonl"), PathBuf::from("log.jsonl"));
        assert_eq!(path_of("file:/tmp/a%20b.jsonl"), PathBuf::from("/tmp/a b.jsonl"));
        assert_eq!(path_of("file:///tmp/x.jsonl"), PathBuf::from("/tmp/x.jsonl"));
        assert_eq!(path_of("file://localhost/tmp/x.jsonl"), PathBuf::from("/tmp/x.jsonl"));
        for bad in ["file:", "file://elsewhere/x", "file:a%2", "file:a%+f", "file:a%00b", "file:%ff", "http://x/y", "log.jsonl", "s3://b/k"]
        {
            assert_eq!(parse(bad).unwrap_err().kind(), ErrorKind::InvalidInput, "{bad}");
        }
        assert!(parse("s3://b/k").unwrap_err().message().contains("unknown store scheme \"s3\""));
    }

    #[test]
    fn redact_leaves_out_every_password() {
        let cases = [
            ("postgres://u:SECRET@127.0.0.1:1/db?session=x&password=SECRET2", "postgres://u@127.0.0.1:1/db?session=x"),
            ("postgresql://u:p@ss/w@rd@h:5432/db", "postgresql://u@h:5432/db"),
            ("postgres://u@h/db?password=s", "postgres://u@h/db"),
            ("postgres://u@h/db?sslmode=disable&Password=s&%70assword=t&session=a", "postgres://u@h/db?sslmode=disable&session=a"),
            ("postgres://h/db", "postgres://h/db"),
            ("postgres://u:secret@", "postgres://u@"),
            ("postgres://:secret@h", "postgres://@h"),
            ("postgres://app@%2Fvar%2Frun/app?host=/tmp&session=s", "postgres://app@%2Fvar%2Frun/app?host=/tmp&session=s"),
            ("not a url", "not a url"),
            ("/tmp/u:p@x.jsonl", "/tmp/u:p@x.jsonl"),
            ("file:///tmp/u:p@x.jsonl", "file:///tmp/u:p@x.jsonl"),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
        }
    }
}
