//! Stores named by URL through the C ABI: `lls_session_open_url` and
//! `lls_store_list_sessions` over [`llmsession::store::url`] (a `file:` path or a `postgres://`
//! database).

use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, Out, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use crate::session::{lls_session, SessionObject};
use llmsession::error::{Error, ErrorKind};
use llmsession::session::Session;
use llmsession::store::options::{list_options, url_options};
use llmsession::store::url::list_sessions;
use std::ffi::c_char;

/// A store URL argument: UTF-8, not empty, no NUL byte.
pub(crate) unsafe fn url_arg(ptr: *const c_char, len: usize) -> std::result::Result<String, FfiError> {
    // SAFETY: forwarded from the caller.
    let text = unsafe { buffers::input_str(ptr, len, "url") }?;
    if text.is_empty() {
        return Err(FfiError::invalid_argument("url", "the URL is empty"));
    }
    if text.contains('\0') {
        return Err(FfiError::invalid_argument("url", "the URL contains a NUL byte"));
    }
    Ok(text.to_string())
}

/// Opens (or, for a writer, creates) a session in the store the URL `(url, url_len)` names
/// (UTF-8, need not be NUL-terminated), and stores it in `*out`:
///
/// - `file:PATH`, `file:/abs/path` or `file:///abs/path`: a JSONL log, as
///   `lls_session_open_file` opens it (`%XX` escapes in the path are decoded);
/// - `postgres://user:password@host:port/dbname?k=v&...` (or `postgresql://`): a session in a
///   PostgreSQL database. A host that starts with `/` (written `%2F...`, or `?host=/dir`) is the
///   directory of the server's unix socket. The query takes the client's libpq parameters
///   (`connect_timeout`, `application_name`, `options`, `sslmode=disable|prefer`, ...) and
///   `session=ID`. The tables are created on first use (see `docs/storage-postgres.md`).
///
/// `opts_json` (may be NULL) is `{"id"?: string, "readOnly"?: bool, "create"?: bool,
/// "durability"?: "every-event" | "turn-end" | "never", "checkpoints"?, "check"?, "mode"?,
/// "maxBytes"?}` (`checkpoints` and `check` as for `lls_session_new_memory`):
/// `id` names the session (a database holds many: the URL's `session` may name it instead; a
/// writing open without either creates a session with a random id, which `lls_session_id`
/// tells; for a file it is the id of a session this call creates); `readOnly` opens without the
/// lock or lease, writes nothing and refuses appends (`LLS_ERR_READ_ONLY`; follow the writer
/// with `lls_session_refresh`); `create` (default true) lets a writing open create a missing
/// session (false: `LLS_ERR_INVALID_INPUT` when the store holds none); `durability` as for
/// every session (a database commits each batch asynchronously and makes it durable at the
/// sync points the policy names); `mode` and `maxBytes` concern files only (see
/// `lls_session_open_file`).
///
/// One writer: a writing open takes the file's lock or the database session's lease; while
/// another handle holds it (in this process or elsewhere) the open fails with `LLS_ERR_LOCKED`
/// (detail `holder` where known). The lease goes when the session is freed, when the process
/// dies, or when its connection breaks. After a database connection breaks mid-append the
/// handle refuses writes (`LLS_ERR_STORAGE`, detail `outcomeUnknown`): free it and open the
/// session again, which reads what the database holds.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`url`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty URL), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a
/// URL that does not parse or names an unknown scheme, no session id where one is needed, a
/// session the store does not hold; detail `field`), `LLS_ERR_LOCKED`, `LLS_ERR_STORAGE` (the
/// server cannot be reached, authentication failed, the database does not exist, a schema newer
/// than this library; detail `store`, `sqlstate`), `LLS_ERR_CORRUPT_LOG` (damage before the last
/// complete turn, records missing at the end of a database log).
///
/// # Safety
/// `url` NULL or `url_len` readable bytes; `opts_json` likewise; `out`, `err` NULL or valid for
/// writes.
///
/// Thread safety: may be called from any thread; it blocks while it connects and loads.
#[no_mangle]
pub unsafe extern "C" fn lls_session_open_url(
    url: *const c_char,
    url_len: usize,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_session,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let url = url_arg(url, url_len)?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let opts = url_options(v.as_ref())?;
            let (session, report) = Session::open_url(&url, opts)?;
            out.write(SessionObject::register(session, report, 0));
            Ok(())
        })
    }
}

/// The sessions of the store the URL `(url, url_len)` names (as for `lls_session_open_url`), as
/// a JSON array ordered by id: `[{"id","createdAt","parent"?:{"id","seedLength","spawned",
/// "callId"?},"events","chainHead"?,"updatedAt","inUse"}]` (`inUse`: a writer holds the session
/// now; `parent.spawned`: a child an agent spawned, else a fork; `callId`: the parent's call
/// the child answers). A file holds one session or none, a directory (`file:DIR`) one per
/// `*.jsonl` log in it (a file that is not a session log is passed over); a database without
/// llmsession tables holds none. No log is read whole (a file's row comes from its first and
/// last lines). Nothing is written. Free `*out` with `lls_string_free`.
///
/// `opts_json` (may be NULL) is `{"after"?: string, "limit"?: n, "parent"?: string}`: only
/// sessions whose id sorts after `after`, at most `limit` of them (pages: pass the last id of
/// one page as the next page's `after`); with `parent`, only the sessions whose parent that
/// session is (its children and forks: for a `file:` URL, those in the files beside it named
/// after it, `STEM.TAG.jsonl`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`url`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty URL), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`,
/// `LLS_ERR_STORAGE`, `LLS_ERR_CORRUPT_LOG` (a file that is not a session log).
///
/// # Safety
/// `url` NULL or `url_len` readable bytes; `opts_json` likewise; `out`, `out_len`, `err` NULL
/// or valid for writes.
///
/// Thread safety: may be called from any thread; it blocks while it connects and reads.
#[no_mangle]
pub unsafe extern "C" fn lls_store_list_sessions(
    url: *const c_char,
    url_len: usize,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let url = url_arg(url, url_len)?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let (after, limit, parent) = list_options(v.as_ref())?;
            let sessions = list_sessions(&url, after.as_deref(), limit, parent.as_deref())?;
            let text = serde_json::to_string(&sessions).map_err(|e| FfiError::from(Error::new(ErrorKind::Internal, e.to_string())))?;
            out.write(&text)
        })
    }
}
