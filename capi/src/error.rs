//! Reading an `lls_error` (code, message, detail), freeing it, and naming a status.

use crate::runtime::boundary::boundary_value;
use crate::runtime::error_object::{lls_error, ErrorObject};
use crate::runtime::handle;
use crate::runtime::status::*;
use std::ffi::c_char;

const MSG_NULL: &std::ffi::CStr = c"lls_error: the error handle is NULL";
const MSG_INVALID: &std::ffi::CStr = c"lls_error: not a live lls_error handle (freed, or not an lls_error)";
const DETAIL_NULL: &std::ffi::CStr =
    c"{\"kind\":\"null-pointer\",\"status\":100,\"argument\":\"err\",\"message\":\"lls_error: the error handle is NULL\"}";
const DETAIL_INVALID: &std::ffi::CStr = c"{\"kind\":\"invalid-handle\",\"status\":102,\"argument\":\"err\",\"message\":\"lls_error: not a live lls_error handle (freed, or not an lls_error)\"}";

/// The status code of an error.
///
/// Returns `LLS_ERR_NULL_POINTER` when `err` is NULL and `LLS_ERR_INVALID_HANDLE` when it is
/// not a live `lls_error` (freed, or a handle of another type).
///
/// Thread safety: may be called from any thread, concurrently with other readers.
#[no_mangle]
pub extern "C" fn lls_error_code(err: *const lls_error) -> lls_status {
    boundary_value(LLS_ERR_PANIC, || {
        if err.is_null() {
            return LLS_ERR_NULL_POINTER;
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            Ok(obj) => obj.code(),
            Err(e) => e.status(),
        }
    })
}

/// The error's message: a NUL-terminated UTF-8 string owned by the error, valid until
/// `lls_error_free(err)`. Never NULL: for a NULL or invalid handle it returns a static string
/// that says so.
///
/// Thread safety: may be called from any thread, concurrently with other readers.
#[no_mangle]
pub extern "C" fn lls_error_message(err: *const lls_error) -> *const c_char {
    boundary_value(MSG_INVALID.as_ptr(), || {
        if err.is_null() {
            return MSG_NULL.as_ptr();
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            // The registry keeps the object (and so the string) alive until lls_error_free.
            Ok(obj) => obj.message_c().as_ptr(),
            Err(_) => MSG_INVALID.as_ptr(),
        }
    })
}

/// The error's detail: a NUL-terminated JSON object owned by the error, valid until
/// `lls_error_free(err)`. It always has `kind` (a short stable name such as `"malformed-json"`
/// or `"invalid-handle"`), `status` and `message`, plus context keys (`field`, `argument`,
/// `line`, `column`, `seq`, `callback`, ...). Never NULL: for a NULL or invalid handle it
/// returns a static JSON object that says so.
///
/// Thread safety: may be called from any thread, concurrently with other readers.
#[no_mangle]
pub extern "C" fn lls_error_detail(err: *const lls_error) -> *const c_char {
    boundary_value(DETAIL_INVALID.as_ptr(), || {
        if err.is_null() {
            return DETAIL_NULL.as_ptr();
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            Ok(obj) => obj.detail_c().as_ptr(),
            Err(_) => DETAIL_INVALID.as_ptr(),
        }
    })
}

/// Frees an error. `lls_error_free(NULL)` does nothing; so does a handle that is not a live
/// `lls_error` (already freed, or of another type). Strings borrowed from the error become
/// invalid.
///
/// Thread safety: call once, when no other thread uses the error.
#[no_mangle]
pub extern "C" fn lls_error_free(err: *mut lls_error) {
    boundary_value((), || handle::free::<ErrorObject>(err))
}
