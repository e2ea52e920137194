//! `lls_error`: the owned error object handed to the host through the `lls_error **err`
//! argument, and [`FfiError`], the error type every entry point body returns.
//!
//! There is no thread-local "last error": the error travels through the call's own `err`
//! argument, so it is correct under Go (goroutines move between threads) and koffi (async calls
//! on worker threads).

use super::handle::{self, HandleKind};
use super::status::*;
use crate::error::Error;
use serde_json::{Map, Value};
use std::ffi::{c_char, CString};

/// An error as the C boundary sees it: a status, a message and a JSON detail object.
///
/// Core errors convert into it with `?` (status from [`status_of`]); FFI-only conditions
/// (NULL pointer, invalid UTF-8, bad handle, panic, ...) are built with the constructors here.
#[derive(Clone, Debug, PartialEq)]
pub struct FfiError {
    status: lls_status,
    message: String,
    detail: Map<String, Value>,
}

impl FfiError {
    /// A new error with an empty detail. `status` must not be `LLS_OK`.
    pub fn new(status: lls_status, message: impl Into<String>) -> FfiError {
        debug_assert_ne!(status, LLS_OK);
        FfiError { status, message: message.into(), detail: Map::new() }
    }

    /// Adds a detail key (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> FfiError {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// A required pointer argument was NULL.
    pub fn null_pointer(argument: &str) -> FfiError {
        FfiError::new(LLS_ERR_NULL_POINTER, format!("argument `{argument}` is NULL")).with("argument", argument)
    }

    /// A non-pointer argument is out of range.
    pub fn invalid_argument(argument: &str, why: impl std::fmt::Display) -> FfiError {
        FfiError::new(LLS_ERR_INVALID_ARGUMENT, format!("argument `{argument}`: {why}")).with("argument", argument)
    }

    /// The status code.
    pub fn status(&self) -> lls_status {
        self.status
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The machine-readable detail (without `kind`/`message`).
    pub fn detail(&self) -> &Map<String, Value> {
        &self.detail
    }

    /// The detail as handed to the host: the detail keys plus `kind` (the status name, equal to
    /// the core [`crate::ErrorKind::name`] for core errors), `status` and `message`.
    pub fn detail_json(&self) -> Value {
        let mut m = self.detail.clone();
        m.insert("kind".into(), Value::from(status_name(self.status)));
        m.insert("status".into(), Value::from(self.status));
        m.insert("message".into(), Value::from(self.message.clone()));
        Value::Object(m)
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> FfiError {
        FfiError { status: status_of(&e), message: e.message().to_string(), detail: e.detail().clone() }
    }
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FfiError {}

/// An error returned through an `lls_error **err` argument: a status code, a message and a
/// JSON detail object (`kind`, `status`, `message`, and context such as `field`, `argument`,
/// `line`, `column`, `seq`). Create none yourself; free each with `lls_error_free`.
///
/// Thread safety: immutable; may be read from any thread concurrently; free it exactly once,
/// when no other thread uses it.
pub struct lls_error {
    _opaque: [u8; 0],
}

/// The payload of an `lls_error` handle.
#[derive(Debug)]
pub struct ErrorObject {
    code: lls_status,
    message: CString,
    detail: CString,
}

impl HandleKind for ErrorObject {
    type C = lls_error;
    const NAME: &'static str = "lls_error";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSERR01");
}

impl ErrorObject {
    /// Builds the C error object from an [`FfiError`].
    pub fn from_error(e: &FfiError) -> ErrorObject {
        ErrorObject { code: e.status, message: to_cstring(e.message.clone()), detail: to_cstring(e.detail_json().to_string()) }
    }

    /// The status code.
    pub fn code(&self) -> lls_status {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        self.message.to_str().unwrap_or("")
    }

    /// The detail JSON text.
    pub fn detail(&self) -> &str {
        self.detail.to_str().unwrap_or("{}")
    }
}

/// Makes a C string, replacing interior NUL bytes (which a C string cannot hold) with U+FFFD.
pub fn to_cstring(s: String) -> CString {
    match CString::new(s) {
        Ok(c) => c,
        Err(e) => {
            let s = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\u{FFFD}");
            CString::new(s).unwrap_or_default()
        }
    }
}

/// Creates an `lls_error` handle for `e` and stores it in `*err` (nothing happens when `err`
/// is NULL). Used by the boundary on failure only, so `*err` is written only on failure.
///
/// # Safety
/// `err` must be NULL or valid for writing one pointer.
pub unsafe fn store_error(err: *mut *mut lls_error, e: &FfiError) {
    if err.is_null() {
        return;
    }
    let (ptr, _) = handle::register(ErrorObject::from_error(e));
    // SAFETY: the caller guarantees `err` is valid for writes.
    unsafe { err.write(ptr) };
}

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
    super::boundary::boundary_value(LLS_ERR_PANIC, || {
        if err.is_null() {
            return LLS_ERR_NULL_POINTER;
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            Ok(obj) => obj.code,
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
    super::boundary::boundary_value(MSG_INVALID.as_ptr(), || {
        if err.is_null() {
            return MSG_NULL.as_ptr();
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            // The registry keeps the object (and so the string) alive until lls_error_free.
            Ok(obj) => obj.message.as_ptr(),
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
    super::boundary::boundary_value(DETAIL_INVALID.as_ptr(), || {
        if err.is_null() {
            return DETAIL_NULL.as_ptr();
        }
        match handle::lookup::<ErrorObject>(err, "err") {
            Ok(obj) => obj.detail.as_ptr(),
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
    super::boundary::boundary_value((), || handle::free::<ErrorObject>(err))
}
