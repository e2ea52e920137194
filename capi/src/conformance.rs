//! The store conformance kit through the C ABI: `lls_store_conformance` (a host store, over one
//! callback) and `lls_store_conformance_url` (a store named by URL), over
//! [`llmsession::store::conformance`].

use crate::callbacks::host::{lls_callback_fn, lls_userdata_free_fn, HostCallback};
use crate::callbacks::store::StoreCallback;
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::error::{Error, ErrorKind};
use llmsession::store::conformance::{self, HostFactory, Report, StoreFactory, UrlFactory};
use std::ffi::{c_char, c_void};

/// Runs the kit with `factory` and hands the report out: `Ok` when every case passed, the
/// report's `Nonconforming` error (after writing `out`) otherwise.
fn check(factory: &mut dyn StoreFactory, opts_json: *const c_char, opts_len: usize, out: OutString) -> Result<(), FfiError> {
    // SAFETY: `opts_json`/`opts_len` are the caller's, forwarded from the entry point.
    let v = unsafe { buffers::input_json_opt(opts_json, opts_len, "opts_json") }?;
    let only = conformance::options(v.as_ref())?;
    let report: Report = conformance::run(factory, only.as_deref())?;
    let text = serde_json::to_string(&report).map_err(|e| FfiError::from(Error::new(ErrorKind::Internal, e.to_string())))?;
    out.write(&text)?;
    match report.error() {
        None => Ok(()),
        Some(e) => Err(e.into()),
    }
}

/// Runs the store conformance kit (`docs/storage.md`, "Conformance kit for your own store")
/// against a host store: the store contract (batch atomicity, conditional appends and their
/// conflicts, two writers, a stale writer, undo, cut, sync, load and load-from, a session
/// round trip) as named cases, each on a session of its own.
///
/// The callback speaks the protocol of `lls_session_open_store`, for many handles at once:
/// every request carries `"handle": n`, the handle the kit opened, and two more requests open
/// and close handles:
///
/// - `{"op":"open","handle": n,"sessionId": id}` → any JSON (or `{"locked": why}`): a new
///   handle on session `id`; the same id means the same records (a second writer, a stale
///   writer), a new id an empty session;
/// - `{"op":"close","handle": n}` → any JSON: the handle is gone, as when a session is freed
///   (`userdata_free` of `lls_session_open_store`): its lock or lease goes;
/// - `load`, `append`, `sync`, `undo`, `cut` as for `lls_session_open_store`, for handle `n`.
///
/// `opts_json` (may be NULL) is `{"cases"?: [name, ...]}`: only these cases (default: all).
///
/// `*out` receives the report (free it with `lls_string_free`) when the kit ran, whether the
/// store passed or not: `{"store","passed","cases":[{"case","passed","detail"}]}`, `detail`
/// saying what was checked or, for a failure, what was wrong.
///
/// Returns `LLS_OK` when every case passed, `LLS_ERR_NONCONFORMING` (with the report in
/// `*out`, and the error's detail `failed` listing the failed cases) when any failed.
///
/// Ownership: the library owns `userdata` from this call on and calls `userdata_free` (may be
/// NULL) exactly once, before this call returns.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`store`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown option or case name; detail
/// `field`), `LLS_ERR_NONCONFORMING`. A failing store is never an error of its own: its
/// failures are failed cases.
///
/// # Safety
/// `store`/`userdata`/`userdata_free` as for any callback registration; `opts_json` NULL or
/// `opts_len` readable bytes; `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread; the callback runs on the calling thread (a
/// pending reply may be completed from any thread).
#[no_mangle]
pub unsafe extern "C" fn lls_store_conformance(
    store: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let callback = HostCallback::from_raw(store, userdata, userdata_free, "store")?;
            let out = OutString::new(out, out_len, "out")?;
            let mut factory = HostFactory::new(StoreCallback::new(callback));
            check(&mut factory, opts_json, opts_len, out)
        })
    }
}

/// Runs the store conformance kit (see `lls_store_conformance`) against a store named by URL
/// `(url, url_len)`: `file:DIR` (a directory: the kit creates one JSONL log per case in it) or
/// `postgres://...` without `session=` (the kit creates one session per case, with ids
/// `conformance-...`, and leaves them in the database).
///
/// `opts_json`, `*out` and the statuses are those of `lls_store_conformance`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`url`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty URL), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a
/// URL that does not parse, a `file:` URL that is not a directory, a URL naming a session, an
/// unknown option or case name), `LLS_ERR_NONCONFORMING`.
///
/// # Safety
/// `url` NULL or `url_len` readable bytes; `opts_json` likewise; `out`, `out_len`, `err` NULL
/// or valid for writes.
///
/// Thread safety: may be called from any thread; it blocks while it works the store.
#[no_mangle]
pub unsafe extern "C" fn lls_store_conformance_url(
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
            let url = crate::url::url_arg(url, url_len)?;
            let mut factory = UrlFactory::new(&url)?;
            check(&mut factory, opts_json, opts_len, out)
        })
    }
}
