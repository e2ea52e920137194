//! Explain through the C ABI: why each request of a session hit or missed the provider's cache.

use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use crate::session::{file_records, lls_session, path_arg, session_arg};
use llmsession::explain::explain_options;
use llmsession::explain::explain_records_with;
use llmsession::explain::tree::{explain_tree, take_tree_option};
use llmsession::session::Session;
use llmsession::tree::Tree;
use std::ffi::c_char;

/// The records of a live session as stored: its header record, then every event record.
pub(crate) fn session_records(session: &Session) -> llmsession::Result<Vec<Vec<u8>>> {
    Ok(session.records()?.iter().map(|r| r.as_bytes().to_vec()).collect())
}

/// Explains every request of the session's log, as JSON in `*out` (free it with
/// `lls_string_free`): `{"session", "counter", "requests": [...], "totals": {...}}`.
///
/// Each request (conversation requests `"1"`, `"2"`, ... and summarisation requests `"c1"`, ...,
/// in log order) has its size (`messages`, `prefixLen`, `bytes`, `tokens`), whether the log
/// `rebuilt` it, the request it is `comparedWith` (the previous conversation request, or the
/// summarisation request sent after it, whichever shares more), `sharedBytes`, `sharedTokens`,
/// `sharedMessages`, `extends`, and where they part: `divergence` `{"component": "config" |
/// "system" | "tool" | "prefix" | "history" | "instruction", "field"? | "line"? | "name"? |
/// "index"?, "offset"?, "atByte", "event": "header-change" | "resume" | "compaction" | "inject" |
/// "edit", "eventSeq"?, "summary"}`. With provider usage: `usage`, `promptTokens`,
/// `cachedTokens` beside `expectedCachedTokens`; and `uncachedTokens` (`spendSource`
/// `"provider"` or `"estimate"`) charged to `cause`, and split by cause in `causes`
/// (`[{"cause", "tokens", "cost"?}]`, summing to `uncachedTokens`); `time`, `gapMs`,
/// `cacheRule` (`{"ttlMs", "minTokens"}`), `cacheWriteTokens`, `rewriteFactor`, `cost` (with
/// prices) and `diagnostics` (`{"provider", "ours", "agrees"}`, when the usage has the
/// provider's cache diagnosis). `totals.spend` sums the uncached tokens by cause (`growth`,
/// `header-change`, `resume`, `compaction`, `retry-after-overflow`, `inject`, `edit`,
/// `context-edit`, `expiry`, `below-minimum`, `unexplained`); `totals` also has
/// `cacheWriteTokens`, `rewriteFactor`, `cost` (with prices), `diagnosticsCompared` and
/// `diagnosticsDisagreements`. `docs/caching.md` explains the figures.
///
/// `(options_json, options_len)` (may be NULL): `{"tokenizer"?: "path/to/tokenizer.json",
/// "prices"?: {...}, "cacheRules"?: {...}}`: a tokenizer to count tokens exactly (the default
/// is the built-in estimate), a price table (per `provider` or `provider/model`, per million
/// tokens: `input`, `cachedInput`, `cacheWrite`, `output`) and overrides of the providers'
/// cache TTLs and minimum sizes (`ttlSeconds`, `minTokens`); since ABI 2 minor 5. With
/// `"tree": true` (since ABI 2 minor 6) the report is the tree's: the session and the children
/// spawned from it in this process (`lls_agent_spawn`), and theirs, explained per node and
/// rolled up: `{"root", "counter", "nodes": [{"id", "parent"?, "kind": "root" | "spawn" |
/// "fork", "callId"?, "depth", "seedLength", "source", "own", "spawnFloor"?, "work"?,
/// "inheritedTokens", "subtree", "answeredAt"?}], "totals": {"nodes", "all", "root",
/// "subagents", "spawnFloors", "work", "inheritedTokens", "coldChildren": {"uncachedTokens",
/// "extraUncachedTokens", "cost"?, "extraCost"?}}}`, each sum `{"requests", "promptTokens",
/// "cachedTokens", "uncachedTokens", "missTokens", "outputTokens", "cost"?, "missCost"?}`
/// (`docs/caching.md`, "Explain across a tree").
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown option,
/// a bad price table or cache rule, naming the field),
/// `LLS_ERR_TOKENIZER` (the tokenizer cannot be loaded).
///
/// # Safety
/// `options_json` NULL or `options_len` readable bytes; `out`, `out_len`, `err` NULL or valid
/// for writes.
///
/// Thread safety: may be called from any thread, concurrently (it reads a copy of the log).
#[no_mangle]
pub unsafe extern "C" fn lls_session_explain(
    session: *const lls_session,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let s = session_arg(session, "session")?;
            let options = buffers::input_json_opt(options_json, options_len, "options_json")?;
            let (tree, options) = take_tree_option(options.as_ref())?;
            let (counter, settings) = explain_options(options.as_ref())?;
            if tree {
                let report = explain_tree(&Tree::of_session(&s.session)?, &*counter, &settings)?;
                return out.write(&serde_json::to_string(&report).expect("a report serialises"));
            }
            let records = session_records(&s.session)?;
            let report = explain_records_with(&records, &*counter, &settings)?;
            out.write(&report.to_value().to_string())
        })
    }
}

/// Explains a stored JSONL log at `(path, path_len)` without opening it as a session (nothing
/// is written, no lock is taken), as `lls_session_explain` does. The log is checked as opening
/// it checks it (the chained digest of every record, the log rules, contiguous seqs); a log
/// that fails is refused as `lls_verify_file` refuses it, naming the same line. Only a torn
/// last line (a write cut short) is left out. With `"tree": true` (see `lls_session_explain`)
/// `path` may also be a store URL (`file:`, `postgres://...?session=ID`), and the tree is read
/// from the store: the files beside a JSONL log named after it (`STEM.TAG.jsonl`), or the
/// database's sessions whose parent it is.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`path`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty path), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`,
/// `LLS_ERR_TOKENIZER`, `LLS_ERR_STORAGE` (cannot read; detail `path`), `LLS_ERR_CORRUPT_LOG`
/// (not a session log, a record that does not match its chained digest, a seq gap or another
/// event the log rules refuse, or damage in an unfinished last turn that opening the log for
/// writing would cut; detail `line`).
///
/// # Safety
/// `path` NULL or `path_len` readable bytes; `options_json` likewise; `out`, `out_len`, `err`
/// NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_explain_file(
    path: *const c_char,
    path_len: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let path = path_arg(path, path_len, "path")?;
            let options = buffers::input_json_opt(options_json, options_len, "options_json")?;
            let (tree, options) = take_tree_option(options.as_ref())?;
            let (counter, settings) = explain_options(options.as_ref())?;
            if tree {
                let report = explain_tree(&Tree::load(&path)?, &*counter, &settings).map_err(|e| FfiError::from(e.context(&path)))?;
                return out.write(&serde_json::to_string(&report).expect("a report serialises"));
            }
            let records = file_records(&path)?;
            let report = explain_records_with(&records, &*counter, &settings).map_err(|e| FfiError::from(e.context(&path)))?;
            out.write(&report.to_value().to_string())
        })
    }
}
