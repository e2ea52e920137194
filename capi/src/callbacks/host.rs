//! Host callbacks: the shape every listener, summariser, token counter and store callback
//! has, and [`HostCallback`], which owns one and calls it.

use crate::callbacks::reply::{callback_error, lls_reply, Answer, ReplyObject};
use crate::runtime::error::FfiError;
use crate::runtime::handle;
use crate::runtime::status::*;
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, ErrorKind, Result};
use serde_json::Value;
use std::ffi::{c_char, c_void};

/// A host callback. It receives the `userdata` given at registration and a NUL-terminated JSON
/// input `(in_json, in_len)` (`in_len` excludes the NUL; the text is valid only during the
/// call), and answers through `reply`: `lls_reply_set_json` then return `LLS_CB_OK`;
/// `lls_reply_fail` then return `LLS_CB_ERROR`; or return `LLS_CB_PENDING` and answer later,
/// from any thread, with `lls_reply_complete` / `lls_reply_fail`. It must not unwind (no C++
/// exception or foreign panic may cross it).
///
/// Thread safety: called only on the thread that made the library call, with no library lock
/// held; it may read the object it serves but must not free it.
pub type lls_callback_fn =
    Option<unsafe extern "C" fn(userdata: *mut c_void, in_json: *const c_char, in_len: usize, reply: *mut lls_reply) -> i32>;

/// The non-NULL function inside an [`lls_callback_fn`].
type CallbackFnPtr = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *mut lls_reply) -> i32;

/// Frees a callback's userdata. Called exactly once per registration: when the callback is
/// removed, when its owner is freed, or when the registration fails.
///
/// Thread safety: called on whichever thread removes the callback or frees its owner.
pub type lls_userdata_free_fn = Option<unsafe extern "C" fn(userdata: *mut c_void)>;

/// Owned userdata: `free` runs exactly once, on drop.
struct UserData {
    ptr: *mut c_void,
    free: lls_userdata_free_fn,
}

// SAFETY: the ABI requires hosts to give userdata that may be used (by their own callback and
// free function) from any thread that calls into the library; we never touch it ourselves.
unsafe impl Send for UserData {}
// SAFETY: as above; the library only passes the pointer along.
unsafe impl Sync for UserData {}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(free) = self.free.take() {
            // SAFETY: the host gave `free` for this pointer; `take` makes it run only once.
            unsafe { free(self.ptr) }
        }
    }
}

/// A registered host callback: the function, and the userdata it owns (freed exactly once,
/// when the `HostCallback` is dropped).
pub struct HostCallback {
    func: CallbackFnPtr,
    userdata: UserData,
}

impl std::fmt::Debug for HostCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCallback").field("userdata", &self.userdata.ptr).finish()
    }
}

impl HostCallback {
    /// Takes ownership of a registration's `(fn, userdata, userdata_free)`. When `func` is
    /// NULL the registration fails with `LLS_ERR_NULL_POINTER` (naming `argument`) and
    /// `userdata_free(userdata)` has already been called. Create the `HostCallback` first in an
    /// entry point, so that any later failure drops it and frees the userdata.
    ///
    /// # Safety
    /// `func` and `userdata_free` must be valid functions, safe to call with `userdata` (and,
    /// for `func`, the documented arguments) from any thread that calls into the library,
    /// until `userdata_free` runs.
    pub unsafe fn from_raw(
        func: lls_callback_fn,
        userdata: *mut c_void,
        userdata_free: lls_userdata_free_fn,
        argument: &str,
    ) -> std::result::Result<HostCallback, FfiError> {
        let userdata = UserData { ptr: userdata, free: userdata_free };
        match func {
            Some(func) => Ok(HostCallback { func, userdata }),
            None => {
                drop(userdata);
                Err(FfiError::null_pointer(argument))
            }
        }
    }

    /// Calls the host with `input` (JSON text) on this thread, with no lock held, and returns
    /// its JSON answer (checked to be well-formed). A pending answer is awaited; tripping
    /// `cancel` ends the wait with an [`ErrorKind::Cancelled`] error. Every failure of the
    /// callback is an [`ErrorKind::Listener`] error whose detail has `callback` set to
    /// `failed`, `no-reply`, `unknown-code`, `null-reply`, `invalid-utf8` or
    /// `malformed-json` (re-kind it with `Error::with_kind` when the callback serves, say, the
    /// summariser).
    pub fn call(&self, input: &str, cancel: &CancelToken) -> Result<String> {
        let (reply_ptr, reply) = handle::register(ReplyObject::new());
        let mut buf = Vec::with_capacity(input.len() + 1);
        buf.extend_from_slice(input.as_bytes());
        buf.push(0);
        // SAFETY: `from_raw`'s contract; `buf` outlives the call and holds `input.len()` bytes
        // plus a NUL; `reply_ptr` is a live handle registered for the host.
        let code = unsafe { (self.func)(self.userdata.ptr, buf.as_ptr().cast(), input.len(), reply_ptr) };
        drop(buf);
        ReplyObject::after_return(&reply, code);
        let answer = match code {
            LLS_CB_OK | LLS_CB_ERROR => reply.take_answer(),
            // An answer that arrives after the token was tripped is discarded like a late one:
            // the wait reports the cancellation whichever the waiting thread saw first.
            LLS_CB_PENDING => match ReplyObject::wait(&reply, cancel) {
                Some(a) if !cancel.is_cancelled() => Some(a),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Cancelled,
                        "cancelled while waiting for a host callback's pending reply",
                    )
                    .with("callback", "cancelled"))
                }
            },
            other => {
                return Err(callback_error(
                    "unknown-code",
                    format!(
                        "host callback returned {other}, which is not LLS_CB_OK ({LLS_CB_OK}), LLS_CB_PENDING ({LLS_CB_PENDING}) or LLS_CB_ERROR ({LLS_CB_ERROR})"
                    ),
                )
                .with("code", other))
            }
        };
        match (code, answer) {
            (LLS_CB_OK | LLS_CB_PENDING, Some(Answer::Json(text))) => Ok(text),
            (_, Some(Answer::Failed(msg))) => Err(failed(&msg)),
            (_, Some(Answer::Invalid(e))) => Err(e),
            (LLS_CB_ERROR, _) => Err(failed("")),
            _ => Err(callback_error(
                "no-reply",
                "host callback returned LLS_CB_OK without answering its reply (call lls_reply_set_json before returning)",
            )),
        }
    }

    /// [`HostCallback::call`] with JSON values.
    pub fn call_json(&self, input: &Value, cancel: &CancelToken) -> Result<Value> {
        let text = self.call(&input.to_string(), cancel)?;
        llmsession::error::parse_json(&text)
    }
}

fn failed(host_message: &str) -> Error {
    if host_message.is_empty() {
        callback_error("failed", "host callback failed (it gave no message)")
    } else {
        callback_error("failed", format!("host callback failed: {host_message}")).with("hostMessage", host_message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{lls_reply_complete, lls_reply_fail, lls_reply_set_json};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    static FREED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count_free(_: *mut c_void) {
        FREED.fetch_add(1, Ordering::SeqCst);
    }

    unsafe extern "C" fn echo(_: *mut c_void, json: *const c_char, len: usize, reply: *mut lls_reply) -> i32 {
        unsafe { lls_reply_set_json(reply, json, len, std::ptr::null_mut()) };
        LLS_CB_OK
    }

    unsafe extern "C" fn garbage(ud: *mut c_void, _: *const c_char, _: usize, reply: *mut lls_reply) -> i32 {
        let s: &[u8] = match ud as usize {
            1 => b"{nope",
            2 => b"\"\xc3\x28\"",
            _ => b"",
        };
        unsafe { lls_reply_set_json(reply, s.as_ptr().cast(), s.len(), std::ptr::null_mut()) };
        LLS_CB_OK
    }

    unsafe extern "C" fn fail(_: *mut c_void, _: *const c_char, _: usize, reply: *mut lls_reply) -> i32 {
        let m = b"disk on fire";
        unsafe { lls_reply_fail(reply, m.as_ptr().cast(), m.len(), std::ptr::null_mut()) };
        LLS_CB_ERROR
    }

    /// Hands the reply to another thread through the channel in userdata.
    unsafe extern "C" fn pending(ud: *mut c_void, _: *const c_char, _: usize, reply: *mut lls_reply) -> i32 {
        let tx = unsafe { &*(ud as *const mpsc::Sender<usize>) };
        tx.send(reply as usize).unwrap();
        LLS_CB_PENDING
    }

    #[test]
    fn sync_fail_and_garbage() {
        let before = FREED.load(Ordering::SeqCst);
        let cb = unsafe { HostCallback::from_raw(Some(echo), std::ptr::null_mut(), Some(count_free), "cb") }.unwrap();
        let t = CancelToken::new();
        assert_eq!(cb.call("{\"a\":1}", &t).unwrap(), "{\"a\":1}");
        assert_eq!(cb.call_json(&serde_json::json!([1]), &t).unwrap(), serde_json::json!([1]));
        drop(cb);
        let cb = unsafe { HostCallback::from_raw(Some(fail), std::ptr::null_mut(), Some(count_free), "cb") }.unwrap();
        let e = cb.call("{}", &t).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Listener);
        assert_eq!(e.message(), "host callback failed: disk on fire");
        drop(cb);
        for (ud, reason) in [(1usize, "malformed-json"), (2, "invalid-utf8"), (3, "malformed-json")] {
            let cb = unsafe { HostCallback::from_raw(Some(garbage), ud as *mut c_void, Some(count_free), "cb") }.unwrap();
            let e = cb.call("{}", &t).unwrap_err();
            assert_eq!(e.detail()["callback"], reason, "{}", e.message());
        }
        assert!(unsafe { HostCallback::from_raw(None, std::ptr::null_mut(), Some(count_free), "cb") }.is_err());
        assert!(FREED.load(Ordering::SeqCst) - before >= 6);
    }

    #[test]
    fn pending_completed_elsewhere_and_abandoned() {
        let (tx, rx) = mpsc::channel::<usize>();
        let tx = Box::new(tx);
        let cb = unsafe { HostCallback::from_raw(Some(pending), &*tx as *const _ as *mut c_void, None, "cb") }.unwrap();
        let worker = std::thread::spawn(move || {
            let r = rx.recv().unwrap();
            let j = b"{\"late\":true}";
            assert_eq!(unsafe { lls_reply_complete(r as *mut lls_reply, j.as_ptr().cast(), j.len(), std::ptr::null_mut(),) }, LLS_OK);
            // The handle is now invalid.
            assert_eq!(
                unsafe { lls_reply_complete(r as *mut lls_reply, j.as_ptr().cast(), j.len(), std::ptr::null_mut(),) },
                LLS_ERR_INVALID_HANDLE
            );
            rx
        });
        let t = CancelToken::new();
        assert_eq!(cb.call("{}", &t).unwrap(), "{\"late\":true}");
        let rx = worker.join().unwrap();
        // Abandoned: cancel first, complete afterwards.
        t.cancel();
        let e = cb.call("{}", &t).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cancelled);
        let r = rx.recv().unwrap();
        let j = b"1";
        assert_eq!(unsafe { lls_reply_complete(r as *mut lls_reply, j.as_ptr().cast(), j.len(), std::ptr::null_mut(),) }, LLS_OK);
        drop(cb);
    }
}
