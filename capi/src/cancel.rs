//! `lls_cancel`: cancel tokens for the C ABI (docs/contract.md §9.3).

use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::Out;
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, HandleKind};
use crate::runtime::status::lls_status;
use llmsession::cancel::CancelToken;

/// A cancel token. Pass it to operations that may wait (prefix composition, pre-step listeners,
/// summarisation, a pending callback reply); tripping it ends such a wait with
/// `LLS_ERR_CANCELLED`. A token stays tripped; use a new one for the next operation.
///
/// Thread safety: `lls_cancel_trip` and `lls_cancel_is_tripped` may be called from any thread
/// at any time, concurrently with each other and with operations using the token; free it
/// once, after the operations using it have returned.
pub struct lls_cancel {
    _opaque: [u8; 0],
}

/// The payload of an `lls_cancel` handle.
#[derive(Debug)]
pub struct CancelObject {
    token: CancelToken,
}

impl HandleKind for CancelObject {
    type C = lls_cancel;
    const NAME: &'static str = "lls_cancel";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSCAN01");
}

/// Resolves an optional cancel argument: NULL gives a fresh token that never trips; otherwise
/// the handle must be a live `lls_cancel`.
pub fn cancel_arg(ptr: *const lls_cancel, argument: &str) -> Result<CancelToken, FfiError> {
    if ptr.is_null() {
        return Ok(CancelToken::new());
    }
    Ok(handle::lookup::<CancelObject>(ptr, argument)?.token.clone())
}

/// Creates an untripped cancel token in `*out`.
///
/// Errors: `LLS_ERR_NULL_POINTER` when `out` is NULL.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer; `err` likewise.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_cancel_new(out: *mut *mut lls_cancel, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let (ptr, _) = handle::register(CancelObject { token: CancelToken::new() });
            out.write(ptr);
            Ok(())
        })
    }
}

/// Trips the token: every operation waiting on it ends with `LLS_ERR_CANCELLED`, and later
/// operations given it stop at their first check. Idempotent.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE` (freed, or not an `lls_cancel`).
///
/// # Safety
/// `err` must be NULL or valid for writing a pointer.
///
/// Thread safety: may be called from any thread at any time, including while another thread is
/// blocked in an operation using the token.
#[no_mangle]
pub unsafe extern "C" fn lls_cancel_trip(cancel: *const lls_cancel, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            handle::lookup::<CancelObject>(cancel, "cancel")?.token.cancel();
            Ok(())
        })
    }
}

/// Stores in `*out` whether the token has been tripped.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`cancel` or `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out` must be NULL or valid for writing a `bool`; `err` NULL or valid for writing a pointer.
///
/// Thread safety: may be called from any thread at any time.
#[no_mangle]
pub unsafe extern "C" fn lls_cancel_is_tripped(cancel: *const lls_cancel, out: *mut bool, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let tripped = handle::lookup::<CancelObject>(cancel, "cancel")?.token.is_cancelled();
            out.write(tripped);
            Ok(())
        })
    }
}

/// Frees a cancel token. `lls_cancel_free(NULL)` does nothing; so does a handle that is not a
/// live `lls_cancel`. An operation still running with the token keeps it alive until it
/// returns.
///
/// Thread safety: call once, from any thread; the handle must not be used afterwards.
#[no_mangle]
pub extern "C" fn lls_cancel_free(cancel: *mut lls_cancel) {
    boundary_value((), || handle::free::<CancelObject>(cancel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::*;

    #[test]
    fn trip_from_another_thread() {
        let mut c: *mut lls_cancel = std::ptr::null_mut();
        assert_eq!(unsafe { lls_cancel_new(&mut c, std::ptr::null_mut()) }, LLS_OK);
        let token = cancel_arg(c, "cancel").unwrap();
        let addr = c as usize;
        std::thread::spawn(move || unsafe { lls_cancel_trip(addr as *const lls_cancel, std::ptr::null_mut()) }).join().unwrap();
        assert!(token.is_cancelled());
        let mut b = false;
        assert_eq!(unsafe { lls_cancel_is_tripped(c, &mut b, std::ptr::null_mut()) }, LLS_OK);
        assert!(b);
        lls_cancel_free(c);
        assert_eq!(unsafe { lls_cancel_trip(c, std::ptr::null_mut()) }, LLS_ERR_INVALID_HANDLE);
        assert!(!cancel_arg(std::ptr::null(), "cancel").unwrap().is_cancelled());
    }
}
