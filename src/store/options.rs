//! The JSON options of opening a session and listing a store, as the C ABI takes them
//! (`lls_session_new_memory`, `lls_session_open_file`, `lls_session_open_store`,
//! `lls_session_fork`, `lls_session_open_url`, `lls_store_list_sessions`): decoded here once,
//! with errors that name the option.

use super::url::UrlOptions;
use super::{Durability, FileOptions};
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

/// Parses the options of `lls_store_list_sessions`: `{"after"?: id, "limit"?: n}`.
pub fn list_options(v: Option<&Value>) -> Result<(Option<String>, Option<u64>)> {
    let Some(v) = v else { return Ok((None, None)) };
    let f = Fields::of(v, "opts")?;
    if let Some(k) = f.map.keys().find(|k| !["after", "limit"].contains(&k.as_str())) {
        return Err(Error::invalid(f.p(k), "is not an option here (expected after, limit)"));
    }
    Ok((f.opt_str("after")?.map(str::to_string), f.opt_u64("limit")?))
}
