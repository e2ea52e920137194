//! `lls_error`: the owned error object handed to the host through the `lls_error **err`
//! argument, and [`store_error`], which the boundary uses to hand one out.
//!
//! There is no thread-local "last error": the error travels through the call's own `err`
//! argument, so it is correct under Go (goroutines move between threads) and koffi (async calls
//! on worker threads).

use crate::runtime::error::FfiError;
use crate::runtime::handle::{self, HandleKind};
use crate::runtime::status::lls_status;
use std::ffi::CString;

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
        ErrorObject { code: e.status(), message: to_cstring(e.message().to_string()), detail: to_cstring(e.detail_json().to_string()) }
    }

    /// The status code.
    pub fn code(&self) -> lls_status {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        self.message.to_str().unwrap_or("")
    }

    /// The message as a C string (lives as long as the object).
    pub fn message_c(&self) -> &std::ffi::CStr {
        &self.message
    }

    /// The detail JSON as a C string (lives as long as the object).
    pub fn detail_c(&self) -> &std::ffi::CStr {
        &self.detail
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
