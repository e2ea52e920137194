//! Calling the C ABI from the Rust tests: a failed call as its status, message and detail, and
//! string out-parameters freed the way a host frees them (shared by the tests of capi/tests/).
#![allow(dead_code)]

use llmsession_capi::error::{lls_error_code, lls_error_detail, lls_error_free, lls_error_message};
use llmsession_capi::library::lls_string_free;
use llmsession_capi::runtime::error_object::lls_error;
use llmsession_capi::runtime::status::*;
use serde_json::Value;
use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

/// A failed call: its status, message and detail.
#[derive(Debug)]
pub struct Failure {
    pub status: lls_status,
    pub message: String,
    pub detail: Value,
}

/// A library string as Rust text (`""` for NULL).
pub fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Runs one call with an error out-parameter.
pub fn call(f: impl FnOnce(*mut *mut lls_error) -> lls_status) -> Result<(), Failure> {
    let mut err: *mut lls_error = null_mut();
    let st = f(&mut err);
    if st == LLS_OK {
        assert!(err.is_null());
        return Ok(());
    }
    assert_eq!(lls_error_code(err), st);
    let failure = Failure {
        status: st,
        message: cstr(lls_error_message(err)),
        detail: serde_json::from_str(&cstr(lls_error_detail(err))).unwrap_or(Value::Null),
    };
    lls_error_free(err);
    Err(failure)
}

/// Runs one call with a string out-parameter.
pub fn call_out(f: impl FnOnce(*mut *mut c_char, *mut usize, *mut *mut lls_error) -> lls_status) -> Result<String, Failure> {
    let mut out: *mut c_char = null_mut();
    let mut len = 0usize;
    call(|e| f(&mut out, &mut len, e))?;
    let s = cstr(out);
    unsafe { lls_string_free(out) };
    Ok(s)
}
