//! The one boundary every `extern "C"` body runs inside.
//!
//! [`boundary`] runs the body under `catch_unwind`, turns its `Err` or a panic into a status,
//! and writes `*err` only on failure. A panic never crosses into C: it becomes
//! `LLS_ERR_PANIC` with the panic message. The object being changed when the panic happened
//! is poisoned by its [`crate::runtime::handle::WriteGuard`] as the panic unwinds through it, so later
//! mutations of that object fail with `LLS_ERR_POISONED`.
//!
//! Entry points that return a value instead of a status (getters, `_free` functions) use
//! [`boundary_value`], which maps a panic to a fixed fallback value.

use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::error_object::store_error;
use crate::runtime::status::{lls_status, LLS_ERR_PANIC, LLS_OK};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message carried by a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// The error reported for a caught panic.
pub fn panic_error(payload: &(dyn Any + Send)) -> FfiError {
    let msg = panic_message(payload);
    FfiError::new(LLS_ERR_PANIC, format!("llmsession panicked (this is a bug): {msg}")).with("panic", msg)
}

/// Runs an entry point body: returns `LLS_OK` when it succeeds; otherwise stores an
/// `lls_error` in `*err` (when `err` is not NULL) and returns its status. Panics are caught
/// and reported as `LLS_ERR_PANIC`.
///
/// The body must write its out-parameters only once everything that can fail has succeeded.
///
/// # Safety
/// `err` must be NULL or valid for writing one pointer.
pub unsafe fn boundary<F>(err: *mut *mut lls_error, body: F) -> lls_status
where
    F: FnOnce() -> Result<(), FfiError>,
{
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return LLS_OK,
        Ok(Err(e)) => e,
        Err(payload) => panic_error(payload.as_ref()),
    };
    let status = failure.status();
    // Building the error object allocates; should even that panic, report the status alone.
    // SAFETY: forwarded from the caller's contract on `err`.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { store_error(err, &failure) }));
    status
}

/// Runs a body that returns a plain value (no `err` argument); a panic gives `fallback`.
pub fn boundary_value<R, F>(fallback: R, body: F) -> R
where
    F: FnOnce() -> R,
{
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{lls_error_code, lls_error_detail, lls_error_free, lls_error_message};
    use crate::runtime::handle::Guarded;
    use crate::runtime::status::*;
    use std::ffi::CStr;

    fn text(p: *const std::ffi::c_char) -> String {
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
    }

    #[test]
    fn ok_leaves_err_untouched_and_errors_fill_it() {
        let mut err: *mut lls_error = std::ptr::null_mut();
        assert_eq!(unsafe { boundary(&mut err, || Ok(())) }, LLS_OK);
        assert!(err.is_null());
        let st = unsafe { boundary(&mut err, || Err(llmsession::Error::invalid("messages[0].role", "unknown role").into())) };
        assert_eq!(st, LLS_ERR_INVALID_INPUT);
        assert_eq!(lls_error_code(err), LLS_ERR_INVALID_INPUT);
        assert_eq!(text(lls_error_message(err)), "messages[0].role: unknown role");
        let d: serde_json::Value = serde_json::from_str(&text(lls_error_detail(err))).unwrap();
        assert_eq!(d["field"], "messages[0].role");
        assert_eq!(d["kind"], "invalid-input");
        lls_error_free(err);
        assert_eq!(lls_error_code(err), LLS_ERR_INVALID_HANDLE);
        // A NULL err is allowed: the status alone comes back.
        assert_eq!(unsafe { boundary(std::ptr::null_mut(), || Err(FfiError::null_pointer("x"))) }, LLS_ERR_NULL_POINTER);
    }

    #[test]
    fn panics_become_statuses_and_poison_the_object() {
        let obj = Guarded::new(vec![1]);
        let mut err: *mut lls_error = std::ptr::null_mut();
        let st = unsafe {
            boundary(&mut err, || {
                let mut w = obj.write()?;
                w.push(2);
                panic!("deliberate test panic");
            })
        };
        assert_eq!(st, LLS_ERR_PANIC);
        assert!(text(lls_error_message(err)).contains("deliberate test panic"));
        lls_error_free(err);
        err = std::ptr::null_mut();
        let st = unsafe { boundary(&mut err, || obj.write().map(|_| ())) };
        assert_eq!(st, LLS_ERR_POISONED);
        assert!(text(lls_error_message(err)).contains("poisoned"));
        lls_error_free(err);
        assert_eq!(boundary_value(5, || -> i32 { panic!("x") }), 5);
    }
}
