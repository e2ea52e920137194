//! Answering a host callback (`lls_reply_set_json`, `lls_reply_complete`, `lls_reply_fail`)
//! and calling one the way the library does (`lls_callback_invoke`). The reply object and its
//! ownership rules are in [`crate::callbacks::reply`].

use crate::callbacks::host::{lls_callback_fn, lls_userdata_free_fn, HostCallback};
use crate::callbacks::reply::{json_answer, lls_reply, Answer, ReplyObject, Via};
use crate::cancel::{cancel_arg, lls_cancel};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers;
use crate::runtime::buffers::OutString;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle;
use crate::runtime::status::*;
use std::ffi::c_char;
use std::ffi::c_void;

/// Answers a reply synchronously, from inside the callback, with a copy of the JSON text
/// `(json, len)` (need not be NUL-terminated); then return `LLS_CB_OK`. May also answer a
/// pending reply (like `lls_reply_complete`).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_REPLY_STATE` (already
/// answered). `LLS_ERR_INVALID_UTF8` and `LLS_ERR_MALFORMED_JSON` report an unusable `json`;
/// the reply is then answered with that failure (the library call fails with
/// `LLS_ERR_LISTENER`), so do not answer it again.
///
/// # Safety
/// `json` must be NULL or point to `len` readable bytes; `err` NULL or valid for writing a
/// pointer.
///
/// Thread safety: once per reply, from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_reply_set_json(
    reply: *mut lls_reply,
    json: *const c_char,
    len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded from the caller.
    unsafe { answer_json(reply, json, len, Via::SetJson, err) }
}

/// Answers a pending reply (the callback returned `LLS_CB_PENDING`) with a copy of the JSON
/// text `(json, len)`, from any thread, and releases the host's reference: the handle is
/// invalid once this returns, whatever the status. Accepted (and discarded) when the library
/// stopped waiting because its cancel token tripped.
///
/// Errors: as `lls_reply_set_json`.
///
/// # Safety
/// `json` must be NULL or point to `len` readable bytes; `err` NULL or valid for writing a
/// pointer.
///
/// Thread safety: once per reply, from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_reply_complete(
    reply: *mut lls_reply,
    json: *const c_char,
    len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded from the caller.
    unsafe { answer_json(reply, json, len, Via::Complete, err) }
}

unsafe fn answer_json(reply: *mut lls_reply, json: *const c_char, len: usize, via: Via, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        boundary(err, || {
            let obj = handle::lookup::<ReplyObject>(reply, "reply")?;
            let (answer, report) = json_answer(json, len);
            ReplyObject::host_answer(&obj, answer, via)?;
            report
        })
    }
}

/// Fails a reply, synchronously (then return `LLS_CB_ERROR`) or after `LLS_CB_PENDING`, from
/// any thread, with an optional message `(message, len)` (NULL for none; invalid UTF-8 is
/// replaced). The library call fails with `LLS_ERR_LISTENER` (or the status of the operation
/// the callback served) and a message that includes this one. Releases the host's reference:
/// the handle is invalid once this returns, whatever the status.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`reply`), `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_REPLY_STATE`.
///
/// # Safety
/// `message` must be NULL or point to `len` readable bytes; `err` NULL or valid for writing a
/// pointer.
///
/// Thread safety: once per reply, from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_reply_fail(reply: *mut lls_reply, message: *const c_char, len: usize, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        boundary(err, || {
            let obj = handle::lookup::<ReplyObject>(reply, "reply")?;
            let (text, report) = if message.is_null() {
                (String::new(), Ok(()))
            } else {
                match buffers::input_bytes(message, len, "message") {
                    Ok(b) => (String::from_utf8_lossy(b).into_owned(), Ok(())),
                    Err(e) => (String::new(), Err(e)),
                }
            };
            ReplyObject::host_answer(&obj, Answer::Failed(text), Via::Fail)?;
            report
        })
    }
}
/// Calls a host callback exactly as llmsession calls its listeners, summariser and other
/// callbacks, and returns its answer: a self-test for bindings' callback trampolines (and a
/// way to exercise `lls_reply` from any host) that needs no session.
///
/// Takes ownership of `userdata` like a registration: `userdata_free(userdata)` (when not NULL)
/// is called exactly once before this returns, whatever the outcome, including when an
/// argument is invalid. `(in_json, in_len)` must be well-formed JSON; it is passed to
/// `callback` NUL-terminated. The callback may answer synchronously or return
/// `LLS_CB_PENDING` and complete the reply later from another thread; tripping `cancel` (may
/// be NULL) ends that wait with `LLS_ERR_CANCELLED`. On success `*out` receives a copy of the
/// answer (free it with `lls_string_free`) and `*out_len` (may be NULL) its length.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`callback`, `in_json`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON` (`in_json`), `LLS_ERR_INVALID_HANDLE` (`cancel`),
/// `LLS_ERR_CANCELLED`, `LLS_ERR_LISTENER` (the callback failed or answered with unusable
/// data; the detail's `callback` says which).
///
/// # Safety
/// `callback`/`userdata`/`userdata_free` as for any registration; `in_json` NULL or `in_len`
/// readable bytes; `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread; `callback` runs on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn lls_callback_invoke(
    callback: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    in_json: *const c_char,
    in_len: usize,
    cancel: *const lls_cancel,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        boundary(err, || {
            let cb = HostCallback::from_raw(callback, userdata, userdata_free, "callback")?;
            let out = OutString::new(out, out_len, "out")?;
            let input = buffers::input_json_text(in_json, in_len, "in_json")?;
            let cancel = cancel_arg(cancel, "cancel")?;
            let answer = cb.call(input, &cancel)?;
            drop(cb);
            out.write(&answer)
        })
    }
}
