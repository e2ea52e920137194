//! The observer hook (`lls_set_observer`): what the library did on its own, reported to one
//! process-wide host function (docs/observe.md). The core's [`llmsession::observe`] does the
//! work; this file adapts a C function pointer to its `Observer`.

use crate::callbacks::host::lls_userdata_free_fn;
use crate::runtime::boundary::boundary;
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::observe::{self, Level, Observation, Observer};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// Observation level `debug`: detail of the library's decisions.
///
/// Thread safety: a constant.
pub const LLS_LEVEL_DEBUG: i32 = 0;
/// Observation level `info`: something the library did on its own, as designed.
///
/// Thread safety: a constant.
pub const LLS_LEVEL_INFO: i32 = 1;
/// Observation level `warn`: something went wrong and was handled (a torn tail cut, a request
/// sent over the compaction threshold).
///
/// Thread safety: a constant.
pub const LLS_LEVEL_WARN: i32 = 2;
/// Observation level `error`: something failed and was not made good (an automatic compaction
/// failed, a batch had to be undone).
///
/// Thread safety: a constant.
pub const LLS_LEVEL_ERROR: i32 = 3;

/// An observer: receives one observation, as the JSON object `{"kind", "level", "message",
/// "sessionId"?, ...fields}` (docs/observe.md lists every kind and its fields), with its level
/// as a number (`LLS_LEVEL_*`). `json` is NUL-terminated (`json_len` excludes the NUL) and
/// borrowed for the call only: copy what you keep.
///
/// It must not call any `lls_` function (not even `lls_set_observer`), must return quickly
/// (queue the observation if it has work to do), and must not unwind (no C++ exception or
/// foreign panic may cross it).
///
/// Thread safety: called synchronously on the thread where the event happens, inside the
/// library call that caused it (so from any thread that calls into the library, possibly from
/// several at once), with no session lock held but possibly with an agent reserved for that
/// call.
pub type lls_observer_fn = Option<unsafe extern "C" fn(userdata: *mut c_void, level: i32, json: *const c_char, json_len: usize)>;

type ObserverFnPtr = unsafe extern "C" fn(*mut c_void, i32, *const c_char, usize);

/// A host observer: the function and the userdata it owns (freed exactly once, on drop).
struct HostObserver {
    func: ObserverFnPtr,
    userdata: *mut c_void,
    free: lls_userdata_free_fn,
}

// SAFETY: the ABI requires an observer's userdata to be usable (by its own function and free
// function) from any thread that calls into the library; the library only passes it along.
unsafe impl Send for HostObserver {}
// SAFETY: as above.
unsafe impl Sync for HostObserver {}

impl Observer for HostObserver {
    fn observe(&self, o: &Observation) {
        let mut text = o.to_json();
        let len = text.len();
        text.push('\0');
        // SAFETY: the host registered `func` for this userdata; the text outlives the call.
        unsafe { (self.func)(self.userdata, o.level as i32, text.as_ptr().cast(), len) }
    }
}

impl Drop for HostObserver {
    fn drop(&mut self) {
        if let Some(free) = self.free.take() {
            // SAFETY: the host gave `free` for this pointer; `take` makes it run once.
            unsafe { free(self.userdata) }
        }
    }
}

/// Frees a userdata the library owns when it is not kept.
struct Owned(*mut c_void, lls_userdata_free_fn);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(free) = self.1.take() {
            // SAFETY: as for `HostObserver`.
            unsafe { free(self.0) }
        }
    }
}

/// Sets the process-wide observer: from now on, what the library does on its own (a torn
/// log tail cut, an open turn repaired, a writer refused, an automatic compaction started,
/// failed or impossible, a request sent over the threshold, ...) at `min_level` or above is
/// passed to `observer` (see `lls_observer_fn` for what it may do). Without an observer (the
/// default) the library reports nothing and the check costs one atomic load.
///
/// One observer at a time: setting one replaces the one before it. A NULL `observer` clears
/// it. Either way the previous observer's `userdata_free` runs exactly once, as soon as no
/// call to it is running (on this thread, or on the thread whose call to it ends last).
///
/// The library owns `userdata` from this call on: it calls `userdata_free(userdata)` (when not
/// NULL) exactly once: when the observer is replaced or cleared, at once when `observer` is
/// NULL, or at once when the call fails.
///
/// Errors: `LLS_ERR_INVALID_ARGUMENT` when `min_level` is not one of `LLS_LEVEL_DEBUG` (0) to
/// `LLS_LEVEL_ERROR` (3) (the previous observer stays). Since ABI 2 minor 3.
///
/// # Safety
/// `observer` and `userdata_free` must be NULL or valid functions, safe to call with
/// `userdata` from any thread that calls into the library, until `userdata_free` runs. `err`
/// must be NULL or valid for writing one pointer.
///
/// Thread safety: may be called from any thread, but never from inside an observer.
#[no_mangle]
pub unsafe extern "C" fn lls_set_observer(
    observer: lls_observer_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    min_level: i32,
    err: *mut *mut lls_error,
) -> lls_status {
    unsafe {
        boundary(err, || {
            let owned = Owned(userdata, userdata_free);
            let Some(func) = observer else {
                drop(owned);
                observe::set_observer(None, Level::Error);
                return Ok(());
            };
            let level = Level::from_number(min_level.into()).ok_or_else(|| {
                FfiError::invalid_argument(
                    "min_level",
                    format!("{min_level} is not a level (LLS_LEVEL_DEBUG 0, INFO 1, WARN 2 or ERROR 3)"),
                )
            })?;
            let mut owned = owned;
            let free = owned.1.take();
            observe::set_observer(Some(Arc::new(HostObserver { func, userdata, free })), level);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::{LLS_ERR_INVALID_ARGUMENT, LLS_OK};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static FREED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count_free(_ud: *mut c_void) {
        FREED.fetch_add(1, Ordering::SeqCst);
    }

    unsafe extern "C" fn ignore(_ud: *mut c_void, _level: i32, _json: *const c_char, _len: usize) {}

    #[test]
    fn levels_match_the_core_and_a_bad_level_frees_the_userdata() {
        for (n, l) in [LLS_LEVEL_DEBUG, LLS_LEVEL_INFO, LLS_LEVEL_WARN, LLS_LEVEL_ERROR].iter().zip(Level::ALL) {
            assert_eq!(Level::from_number((*n).into()), Some(l));
        }
        let before = FREED.load(Ordering::SeqCst);
        let st = unsafe { lls_set_observer(Some(ignore), std::ptr::null_mut(), Some(count_free), 9, std::ptr::null_mut()) };
        assert_eq!(st, LLS_ERR_INVALID_ARGUMENT);
        assert_eq!(FREED.load(Ordering::SeqCst), before + 1);
        let st = unsafe { lls_set_observer(None, std::ptr::null_mut(), Some(count_free), 0, std::ptr::null_mut()) };
        assert_eq!(st, LLS_OK);
        assert_eq!(FREED.load(Ordering::SeqCst), before + 2);
    }
}
