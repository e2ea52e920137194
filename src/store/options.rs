//! The JSON options of opening a session and listing a store, as the C ABI takes them
//! (`lls_session_new_memory`, `lls_session_open_file`, `lls_session_open_store`,
//! `lls_session_fork`, `lls_session_open_url`, `lls_store_list_sessions`): decoded here once,
//! with errors that name the option.

use super::url::UrlOptions;
use super::{Durability, FileOptions, JsonlStore};
use crate::error::{Error, Result};
use crate::log::checkpoint::CheckpointPolicy;
use crate::log::load::OpenCheck;
use crate::types::Fields;
use serde_json::Value;

/// Options for opening or creating a session (in any store).
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// When to make appended events durable.
    pub durability: Durability,
    /// The id of a new session (a random id when absent).
    pub id: Option<String>,
    /// How an open checks the stored log: from its last checkpoint (the default) or everything.
    pub check: OpenCheck,
    /// When the session writes checkpoints.
    pub checkpoints: CheckpointPolicy,
}

/// The keys every session's options take.
const SESSION_KEYS: [&str; 4] = ["id", "durability", "check", "checkpoints"];

/// Parses session options `{"id"?, "durability"?, "check"?, "checkpoints"?}` plus the keys in
/// `more` (returned for the caller to read).
pub fn session_options<'a>(v: Option<&'a Value>, path: &'a str, more: &[&str]) -> Result<(SessionOptions, Option<Fields<'a>>)> {
    let Some(v) = v else { return Ok((SessionOptions::default(), None)) };
    let f = Fields::of(v, path)?;
    if let Some(k) = f.map.keys().find(|k| !SESSION_KEYS.contains(&k.as_str()) && !more.contains(&k.as_str())) {
        let mut expected = SESSION_KEYS.to_vec();
        expected.extend_from_slice(more);
        return Err(Error::invalid(f.p(k), format!("is not an option here (expected {})", expected.join(", "))));
    }
    let id = f.opt_str("id")?.map(str::to_string);
    if let Some(id) = &id {
        crate::session_id::check_session_id_field(&f.p("id"), id)?;
    }
    let durability = match f.opt_str("durability")? {
        None => Durability::default(),
        Some(d) => Durability::parse(d).map_err(|e| Error::invalid(f.p("durability"), e.message().trim_start_matches("durability: ")))?,
    };
    let check = match f.opt_str("check")? {
        None => OpenCheck::default(),
        Some(c) => OpenCheck::parse(c, &f.p("check"))?,
    };
    let checkpoints = match f.opt_value("checkpoints")? {
        None => CheckpointPolicy::default(),
        Some(c) => CheckpointPolicy::from_value(c, &f.p("checkpoints"))?,
    };
    Ok((SessionOptions { durability, id, check, checkpoints }, Some(f)))
}

/// Parses the file options `readOnly`, `mode` and `maxBytes` of `lls_session_open_file`.
pub fn file_options(f: Option<&Fields<'_>>) -> Result<FileOptions> {
    let mut o = FileOptions::default();
    let Some(f) = f else { return Ok(o) };
    o.read_only = f.opt_bool("readOnly")?.unwrap_or(false);
    if let Some(m) = f.opt_value("mode")? {
        let bits = match m {
            Value::String(t) => u32::from_str_radix(t.trim_start_matches("0o"), 8).ok(),
            Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            _ => None,
        };
        o.mode = match bits {
            Some(b) if b <= 0o7777 => b,
            _ => {
                return Err(Error::invalid(
                    f.p("mode"),
                    "expected permission bits: an octal string such as \"0600\" or \"640\", or a number up to 4095",
                ))
            }
        };
    }
    if let Some(n) = f.opt_u64("maxBytes")? {
        o.max_bytes = n;
    }
    Ok(o)
}

/// Parses the options of `lls_session_open_url`: `{"id"?, "durability"?, "readOnly"?, "create"?,
/// "mode"?, "maxBytes"?}`.
pub fn url_options(v: Option<&Value>) -> Result<UrlOptions> {
    let (opts, f) = session_options(v, "opts", &["readOnly", "create", "mode", "maxBytes"])?;
    let file = file_options(f.as_ref())?;
    let create = match &f {
        Some(f) => f.opt_bool("create")?.unwrap_or(true),
        None => true,
    };
    Ok(UrlOptions {
        id: opts.id,
        read_only: file.read_only,
        create,
        durability: opts.durability,
        check: opts.check,
        checkpoints: opts.checkpoints,
        file,
    })
}

/// Parses the options of `lls_store_list_sessions`: `{"after"?: id, "limit"?: n, "parent"?:
/// id}` (`parent`: only that session's children and forks).
pub fn list_options(v: Option<&Value>) -> Result<(Option<String>, Option<u64>, Option<String>)> {
    let Some(v) = v else { return Ok((None, None, None)) };
    let f = Fields::of(v, "opts")?;
    if let Some(k) = f.map.keys().find(|k| !["after", "limit", "parent"].contains(&k.as_str())) {
        return Err(Error::invalid(f.p(k), "is not an option here (expected after, limit, parent)"));
    }
    Ok((f.opt_str("after")?.map(str::to_string), f.opt_u64("limit")?, f.opt_str("parent")?.map(str::to_string)))
}

/// A new, empty store for a session made from another (a fork, a child), from the options
/// `path` (a JSONL file, which must be missing or empty) and `url` (as for
/// `lls_session_open_url`: a `postgres://` URL names the database, and the session gets
/// `opts.id` or a random id, written back into `opts`); `None` when neither is given. Also
/// returns the file it creates, if it creates one, so that a failed fork or spawn can remove it
/// again ([`remove_created`]).
pub fn new_session_store(
    path: Option<&str>,
    url: Option<&str>,
    opts: &mut crate::session::SessionOptions,
) -> Result<Option<super::NewStore>> {
    match (path, url) {
        (Some(_), Some(_)) => Err(Error::invalid("opts.url", "give `path` or `url`, not both")),
        (None, None) => Ok(None),
        (Some(""), None) => Err(Error::invalid("opts.path", "must not be empty")),
        (Some(p), None) => {
            let created = (!std::path::Path::new(p).exists()).then(|| p.to_string());
            Ok(Some((Box::new(JsonlStore::open(p)?), created)))
        }
        (None, Some(url)) => {
            // A database holds many sessions: the new session's id names its store.
            let id = opts.id.clone().unwrap_or_else(crate::session::random_id);
            opts.id = Some(id.clone());
            let created = super::url::file_of(url).filter(|p| !p.exists()).map(|p| p.display().to_string());
            let how = UrlOptions { id: Some(id), durability: opts.durability, ..Default::default() };
            Ok(Some((super::url::open_store(url, &how)?.0, created)))
        }
    }
}

/// Removes the file a failed fork or spawn created ([`new_session_store`]), best effort.
pub fn remove_created(created: Option<&str>) {
    if let Some(p) = created {
        let _ = std::fs::remove_file(p);
    }
}
