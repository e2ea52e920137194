//! Sessions through the C ABI: `lls_session` over the core [`Session`] (in memory, a JSONL
//! file, or a host store through one callback), its reads (events, history, header, stats,
//! verify) and writes (append, fork, sync).
//!
//! A session serialises its own state (the core session has an internal lock that every call
//! takes briefly), so session functions may be called from any thread, including from inside
//! an agent's callbacks. The exception is a host store: its callback runs while the session is
//! locked, so a store callback may not call into the session it stores; such a call is refused
//! with `LLS_ERR_OUT_OF_ORDER` instead of deadlocking.

use crate::callbacks::host::{lls_callback_fn, lls_userdata_free_fn, HostCallback};
use crate::callbacks::store::{check_not_in_store, StoreCallback};
use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::{self, encode, OptOut, Out, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, HandleKind, Object, PoisonFlag};
use crate::runtime::status::lls_status;
use llmsession::error::{Error, ErrorKind, Result};
use llmsession::log::load::LoadReport;
use llmsession::request::verify_store;
use llmsession::session::Session;
use llmsession::store::host::HostStore;
use llmsession::store::options::{file_options, new_session_store, remove_created, session_options};
use llmsession::store::{JsonlStore, MemoryStore, Store};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// A session: the append-only event log of one conversation, kept in memory, in a JSONL file
/// or in a host store. Create it with `lls_session_new_memory`, `lls_session_open_file`,
/// `lls_session_open_store` or `lls_session_fork`; free it with `lls_session_free`.
///
/// Thread safety: every session function may be called from any thread, concurrently; the
/// session serialises them internally (briefly). Agent callbacks may read and append to the
/// session; a host store callback may not call into the session it stores.
pub struct lls_session {
    _opaque: [u8; 0],
}

/// The payload of an `lls_session` handle.
pub struct SessionObject {
    pub(crate) session: Session,
    report: LoadReport,
    /// The key of the session's host store (0: not a host store).
    pub(crate) store_key: u64,
    pub(crate) poison: PoisonFlag,
}

impl std::fmt::Debug for SessionObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionObject").field("session", &self.session).finish()
    }
}

impl HandleKind for SessionObject {
    type C = lls_session;
    const NAME: &'static str = "lls_session";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSSES01");
}

impl SessionObject {
    pub(crate) fn new(session: Session, report: LoadReport, store_key: u64) -> SessionObject {
        SessionObject { session, report, store_key, poison: PoisonFlag::new() }
    }

    pub(crate) fn register(session: Session, report: LoadReport, store_key: u64) -> *mut lls_session {
        handle::register(SessionObject::new(session, report, store_key)).0
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Resolves a session argument, refusing a call from inside its own store callback.
pub(crate) fn session_arg(ptr: *const lls_session, argument: &str) -> std::result::Result<Arc<Object<SessionObject>>, FfiError> {
    let obj = handle::lookup::<SessionObject>(ptr, argument)?;
    check_not_in_store(obj.store_key)?;
    Ok(obj)
}

/// A file path argument: UTF-8, not empty, no NUL byte.
pub(crate) unsafe fn path_arg(ptr: *const c_char, len: usize, argument: &str) -> std::result::Result<String, FfiError> {
    // SAFETY: forwarded from the caller.
    let text = unsafe { buffers::input_str(ptr, len, argument) }?;
    if text.is_empty() {
        return Err(FfiError::invalid_argument(argument, "the path is empty"));
    }
    if text.contains('\0') {
        return Err(FfiError::invalid_argument(argument, "the path contains a NUL byte"));
    }
    Ok(text.to_string())
}

/// Reads a stored JSONL log read-only (no lock; a regular file within the size limit) and
/// returns its complete records (a torn last record is left out, as a reader leaves it).
pub(crate) fn file_records(path: &str) -> Result<Vec<Vec<u8>>> {
    let mut contents = JsonlStore::open_read_only(path)?.load()?;
    if !contents.last_complete {
        contents.records.pop();
    }
    if contents.records.is_empty() {
        return Err(Error::new(ErrorKind::CorruptLog, format!("{path}: the file is empty, not a session log")).with("path", path));
    }
    Ok(contents.records)
}

// ---------------------------------------------------------------------------------------------
// Creating and opening

/// Creates a new session kept in memory and stores it in `*out`.
///
/// `opts_json` (may be NULL for the defaults) is `{"id"?: string, "durability"?:
/// "every-event" | "turn-end" | "never", "checkpoints"?, "check"?}`; without an id a random one
/// is chosen.
///
/// Checkpoints, here and in every call that opens or creates a session (`docs/log.md`,
/// "Checkpoints"; since ABI 2 minor 6): `"checkpoints"` is `{"everyEvents"?: n, "everyBytes"?:
/// n, "atCompaction"?: bool}` (defaults 1000, 1048576, true; 0 turns a trigger off) or `false`
/// (none): when the session writes a checkpoint, the derived state an open needs. `"check"` is
/// `"bounded"` (the default: an open reads the log from its last checkpoint, checks the chain
/// over what it reads and the log rules after the checkpoint, and restores the rest from it) or
/// `"full"` (an open reads and checks the whole log).
///
/// A session id, here and in every call that takes one (`lls_session_open_file`,
/// `lls_session_open_url`, `lls_session_open_store`, `lls_session_fork`), is text of 1 to 1,024
/// bytes without C0 control characters (U+0000 to U+001F: NUL, tab and newline included) or DEL
/// (U+007F), whatever the store: ids end up in file names, URLs, SQL rows and logs. Any other id
/// is refused with `LLS_ERR_INVALID_INPUT` (detail `field` `opts.id`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`out`), `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`,
/// `LLS_ERR_INVALID_INPUT` (an unknown or mistyped option, an id the rule above refuses).
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out` and `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_session_new_memory(
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_session,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let (opts, _) = session_options(v.as_ref(), "opts", &[])?;
            let session = Session::create(Box::new(MemoryStore::new()), opts)?;
            out.write(SessionObject::register(session, LoadReport::default(), 0));
            Ok(())
        })
    }
}

/// Opens the session stored in the JSONL file at `(path, path_len)` (UTF-8, need not be
/// NUL-terminated), or creates the file with a new session when it is missing or empty.
///
/// One writer: a writing open takes an exclusive lock on the file; while another handle (in
/// this process or another) holds it, the open fails with `LLS_ERR_LOCKED` (detail `path`, and
/// `holder` where the platform tells). The lock is released by `lls_session_free` (once no agent
/// uses the session) and by the OS when the process dies.
///
/// Loading checks every event (and the chained digest of every record of a version 2 log). A
/// writing open cuts a torn last line (a crash mid-write) or damage inside an unfinished last
/// turn, keeping the cut bytes in a sidecar file `<path>.cut-<unix ms>`, and closes a turn left
/// open by a crash with synthetic events (see `lls_session_load_report`). Damage before the last
/// complete turn is `LLS_ERR_CORRUPT_LOG` with the `line` in the detail. The last path component
/// must not be a symbolic link; devices and FIFOs are refused.
///
/// `opts_json` (may be NULL) is `{"id"?, "durability"?, "checkpoints"?, "check"?, "readOnly"?:
/// bool, "mode"?: "0600", "maxBytes"?: n}` (`checkpoints` and `check` as for
/// `lls_session_new_memory`): `id` applies only to a new session; `readOnly` opens without the lock,
/// creates and changes nothing (appends and agents get `LLS_ERR_READ_ONLY`; follow a writer with
/// `lls_session_refresh`); `mode` is the permission bits of a file this call creates (default
/// `"0600"`: logs hold users' prompts), as an octal string or a number; `maxBytes` the largest
/// log it reads (default 8 GiB).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`path`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty path), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`,
/// `LLS_ERR_LOCKED`, `LLS_ERR_STORAGE` (I/O, a symbolic link, not a regular file, too large;
/// detail `path`, `os`), `LLS_ERR_CORRUPT_LOG`.
///
/// # Safety
/// `path` NULL or `path_len` readable bytes; `opts_json` likewise; `out`, `err` NULL or valid
/// for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_session_open_file(
    path: *const c_char,
    path_len: usize,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_session,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let path = path_arg(path, path_len, "path")?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let (opts, f) = session_options(v.as_ref(), "opts", &["readOnly", "mode", "maxBytes"])?;
            let file = file_options(f.as_ref())?;
            let (session, report) = Session::open_jsonl_with(&path, file, opts)?;
            out.write(SessionObject::register(session, report, 0));
            Ok(())
        })
    }
}

/// Opens (or, when the store is empty, creates) a session kept in a host store, reached through
/// one callback. The callback receives one JSON request per storage operation and answers
/// through its reply (synchronously, or pending and completed later from any thread):
///
/// - `{"op":"load"}` → `{"records": [string, ...], "lastComplete"?: bool}`: every stored
///   record in order (the session header first, then one event per record), and whether the
///   last one was completely written (default true); or `{"locked": why}` when another writer
///   holds the session (the open fails with `LLS_ERR_LOCKED`);
/// - `{"op":"append","sessionId": id,"seq": n,"records": [string, ...],"header"?: string}` →
///   any JSON (e.g. `true`): store the records as the events with seqs `n, n+1, ...`, all of
///   them or none (one transaction); `header` is the session header record, present when the
///   append creates the session (then `n` is 0). When `n` is not the number of events stored
///   (another writer appended first), store nothing and answer `{"conflict": why}`: the call
///   fails with `LLS_ERR_CONFLICT` and the session appends nothing until refreshed. A database
///   gets this from a unique key on `(sessionId, seq)`;
/// - `{"op":"sync"}` → any JSON: make every appended record durable;
/// - `{"op":"undo","sessionId": id,"from": n}` → any JSON: remove the records from record `n`
///   on (the header is record 0), which this handle appended in its last append and could not
///   make durable;
/// - `{"op":"cut","sessionId": id,"keep": n,"reason": string}` → any JSON, optionally
///   `{"savedTo": where}`: a damaged tail found on open: move the records from record `n` on out
///   of the log, keeping them (a quarantine), not destroying them.
///
/// A failed reply (`lls_reply_fail`, `LLS_CB_ERROR`, garbage) fails the operation with
/// `LLS_ERR_STORAGE` (detail `op`, and `callback` for the failure's reason) and the session is
/// left as it was: an append that the store refused is not in the log. `docs/storage.md` says
/// what a host store must guarantee.
///
/// The callback runs on the thread of the session call that needs the store, **while the
/// session is locked**: it must not call into this session or its agent (refused with
/// `LLS_ERR_OUT_OF_ORDER`), and a pending reply must be completed by a thread that does not wait
/// for this session. Store waits are not cancellable.
///
/// Ownership: the library owns `userdata` from this call on and calls `userdata_free` (may be
/// NULL) exactly once: when this call fails (any error, including a NULL `store`), or when the
/// session is freed and no agent uses it any more.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`store`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (options), `LLS_ERR_LOCKED`,
/// `LLS_ERR_CONFLICT`, `LLS_ERR_STORAGE`, `LLS_ERR_CORRUPT_LOG`.
///
/// # Safety
/// `store`/`userdata`/`userdata_free` as for any callback registration; `opts_json` NULL or
/// `opts_len` readable bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread; the callback runs on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn lls_session_open_store(
    store: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_session,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let callback = HostCallback::from_raw(store, userdata, userdata_free, "store")?;
            let out = Out::new(out, "out")?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let (opts, _) = session_options(v.as_ref(), "opts", &[])?;
            let transport = StoreCallback::new(callback);
            let key = transport.key;
            let store = HostStore::new(transport);
            let (session, report) = Session::open(Box::new(store), opts)?;
            out.write(SessionObject::register(session, report, key));
            Ok(())
        })
    }
}

/// Forks `session` into a new session (`*out`) seeded with its first events, recording the
/// parent's id and the seed length.
///
/// `opts_json` (may be NULL) is `{"seedLength"?: n, "path"?: string, "url"?: string, "id"?:
/// string, "durability"?: ..., "checkpoints"?}`: the seed ends at a turn boundary (default: every event up to
/// the last one), the new session is kept in the JSONL file at `path` (which must be missing or
/// empty), in the store `url` names (as for `lls_session_open_url`: a `postgres://` URL forks
/// into that database, under `id` or a random id, which must not be taken), or in memory.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (`seedLength` past
/// the end or not at a turn boundary, a store that already holds the session, both `path` and
/// `url`, a URL that does not parse), `LLS_ERR_LOCKED`, `LLS_ERR_STORAGE`.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently with other calls on `session`.
#[no_mangle]
pub unsafe extern "C" fn lls_session_fork(
    session: *const lls_session,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_session,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let s = session_arg(session, "session")?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let (mut opts, f) = session_options(v.as_ref(), "opts", &["seedLength", "path", "url"])?;
            let (seed, path, url) = match &f {
                None => (None, None, None),
                Some(f) => (f.opt_u64("seedLength")?, f.opt_str("path")?, f.opt_str("url")?),
            };
            let (store, created): (Box<dyn Store>, Option<String>) = match new_session_store(path, url, &mut opts)? {
                Some(s) => s,
                None => (Box::new(MemoryStore::new()), None),
            };
            // A failed fork leaves no file behind that it created.
            let forked = s.session.fork(seed, store, opts).inspect_err(|_| remove_created(created.as_deref()))?;
            out.write(SessionObject::register(forked, LoadReport::default(), 0));
            Ok(())
        })
    }
}

/// Frees a session handle. `lls_session_free(NULL)` does nothing; so does a handle that is not
/// a live `lls_session`. An agent created over the session keeps the session's state alive
/// until the agent is freed; the host store's `userdata_free` runs when the last user is gone.
///
/// Thread safety: call once, when no other thread uses the handle; never from inside a
/// callback that serves this session.
#[no_mangle]
pub extern "C" fn lls_session_free(session: *mut lls_session) {
    boundary_value((), || handle::free::<SessionObject>(session))
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Runs a read of the session and writes its text to `(out, out_len)`.
unsafe fn read_out(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
    read: impl FnOnce(&SessionObject) -> std::result::Result<String, FfiError>,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let s = session_arg(session, "session")?;
            let text = read(&s)?;
            out.write(&text)
        })
    }
}

/// What loading found and did when the session was opened, as JSON: `{"cutRecords": n,
/// "cutAtLine"?: n, "cutReason"?: string, "repairedEvents": n}` (all zero for a new session).
/// Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_load_report(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(encode(&s.report).to_string())) }
}

/// The session id, as a NUL-terminated string (not JSON) in `*out`; free it with
/// `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_id(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(s.session.id())) }
}

/// The session's header record (the first line of its log), exactly as stored: `{"type":
/// "session","format":"llmsession","version":2,"id","createdAt","parent"?:{"id","seedLength"},
/// "lineage"?:[...]}` (version 1 for an older log). Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_info(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(s.session.header_line().to_string())) }
}

/// The whole log as a JSONL file holds it, in `*out`: the session header record, then every
/// event record, each exactly as stored (chained digest included) and followed by a newline.
/// Written to a file, it opens (with `lls_session_open_file`) to this session: a way to copy a
/// session from one store to another, or to keep a backup. Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (also from an agent callback).
#[no_mangle]
pub unsafe extern "C" fn lls_session_export(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(s.session.export_jsonl()?)) }
}

/// The events with seq `from` up to, not including, `to` (`UINT64_MAX`: to the end), as a
/// JSON array of event objects `{"type","seq","time","data","surfaceOp"?,"sources"?}` exactly
/// as logged. A range past the end is clamped (an empty array). Free `*out` with
/// `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_ARGUMENT` (`from` greater than `to`).
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (also from an agent callback).
#[no_mangle]
pub unsafe extern "C" fn lls_session_events(
    session: *const lls_session,
    from: u64,
    to: u64,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe {
        read_out(session, out, out_len, err, |s| {
            if from > to {
                return Err(FfiError::invalid_argument("from", format!("{from} is greater than `to` ({to})")));
            }
            Ok(s.session.events_json(from, if to == u64::MAX { None } else { Some(to) })?)
        })
    }
}

/// The derived history (the messages every request carries after the session prefix), as a
/// JSON array of messages. Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (also from an agent callback).
#[no_mangle]
pub unsafe extern "C" fn lls_session_history(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(s.session.history_json())) }
}

/// The folded request header (the latest `request/header` snapshot with later deltas
/// applied) as JSON `{"config","system"?,"tools"?,"messagePrefix"?}`, or `null` before the
/// first request. Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_header(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe {
        read_out(session, out, out_len, err, |s| {
            Ok(s.session.request_header().map(|h| h.to_value().to_string()).unwrap_or_else(|| "null".into()))
        })
    }
}

/// Counters over the session's log, as JSON `{"events","turns","requests","compactions",
/// "surface","generation","cachedTokens","promptTokens","readOnly","chainHead"?}` (`chainHead`:
/// the chained digest after the last event, for a version 2 log; a host that keeps it elsewhere
/// can tell a log that lost its last records from an intact one). Free `*out` with
/// `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_stats(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe {
        read_out(session, out, out_len, err, |s| {
            serde_json::to_string(&s.session.stats()).map_err(|e| FfiError::from(Error::new(ErrorKind::Internal, e.to_string())))
        })
    }
}

/// Rebuilds every request recorded in the session's log from the log alone and compares it with
/// the recorded digest. On success `*out` is `{"events","requests","compactions"}` (what was
/// checked). A divergence is `LLS_ERR_RECONSTRUCTION` naming the first request that differs
/// (detail `seq`, `turn`, `step`, `line`). The log is read from the session's store one record
/// at a time, without the session being locked meanwhile; progress goes to the observer as
/// `verify-progress` observations (level debug).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_RECONSTRUCTION`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_verify(
    session: *const lls_session,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { read_out(session, out, out_len, err, |s| Ok(encode(&s.session.verify()?).to_string())) }
}

/// Verifies a stored JSONL log at `(path, path_len)` without opening it as a session (nothing is
/// written): rebuilds every recorded request and compares digests. `*out` as for
/// `lls_session_verify`. The file is read one record at a time (memory follows the largest
/// request, not the file's size); progress is reported to the observer as `verify-progress`
/// observations (level debug, `lls_set_observer`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`path`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty path), `LLS_ERR_STORAGE` (cannot read; detail `path`),
/// `LLS_ERR_CORRUPT_LOG` (not a session log; detail `line`), `LLS_ERR_RECONSTRUCTION`.
///
/// # Safety
/// `path` NULL or `path_len` readable bytes; `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_verify_file(
    path: *const c_char,
    path_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let path = path_arg(path, path_len, "path")?;
            let mut store = JsonlStore::open_read_only(&path)?;
            if store.is_empty()? {
                return Err(Error::new(ErrorKind::CorruptLog, format!("{path}: the file is empty, not a session log"))
                    .with("path", path)
                    .into());
            }
            let report = verify_store(&mut store, None, &mut |_| {}, None).map_err(|e| e.context(&path))?;
            out.write_json(&report)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Appends one event given as JSON `{"type", "data", "surfaceOp"?, "sources"?}` (no `seq` or
/// `time`: the log assigns them) and stores its seq in `*out_seq` (may be NULL). The event is
/// validated first; a rejected event changes nothing. Hosts append their own log-only event
/// types and context (`user/message` with `data.source` `"host"` or `"plugin"` and
/// `"surfaceOp":"append"`); while an agent is live, the turn, step, tool, header and compaction
/// events belong to it and are refused with `LLS_ERR_OUT_OF_ORDER`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `event_json`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (detail `field`),
/// `LLS_ERR_OUT_OF_ORDER`, `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `event_json` NULL or `event_len` readable bytes; `out_seq`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (serialised internally), also
/// from an agent callback.
#[no_mangle]
pub unsafe extern "C" fn lls_session_append(
    session: *mut lls_session,
    event_json: *const c_char,
    event_len: usize,
    out_seq: *mut u64,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_seq = OptOut::new(out_seq);
            let s = session_arg(session, "session")?;
            let v = buffers::input_json(event_json, event_len, "event_json")?;
            let _mutating = s.poison.enter()?;
            let seq = s.session.append_json(&v)?;
            out_seq.write(seq);
            Ok(())
        })
    }
}

/// Reads what the session's store holds beyond this handle's last event, and stores the number
/// of new events in `*out_new_events` (may be NULL).
///
/// For a read-only handle this follows a live writer: the events it appended since the open or
/// the last refresh (complete records only; a record the writer is still writing is read by a
/// later refresh). After `LLS_ERR_CONFLICT` on a writing handle it reads what the other writer
/// appended, after which the handle may append again. New events are checked as loading checks
/// them; on damage nothing is applied (`LLS_ERR_CORRUPT_LOG`, detail `line`). A writing handle
/// refreshes only while no agent instance is live over it (`LLS_ERR_OUT_OF_ORDER`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`), `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_OUT_OF_ORDER`,
/// `LLS_ERR_STORAGE`, `LLS_ERR_CORRUPT_LOG`, `LLS_ERR_LOCKED` (a database store whose lease
/// another writer took).
///
/// # Safety
/// `out_new_events`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently with reads (serialised
/// internally).
#[no_mangle]
pub unsafe extern "C" fn lls_session_refresh(session: *mut lls_session, out_new_events: *mut u64, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OptOut::new(out_new_events);
            let s = session_arg(session, "session")?;
            let report = s.session.refresh()?;
            out.write(report.new_events);
            Ok(())
        })
    }
}

/// Makes every event appended so far durable now (fsync for a file, `{"op":"sync"}` for a host
/// store), whatever the durability option.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_STORAGE`.
///
/// # Safety
/// `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_session_sync(session: *mut lls_session, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let s = session_arg(session, "session")?;
            s.session.sync()?;
            Ok(())
        })
    }
}
