//! `lls_reply`: the object through which a host callback answers.
//!
//! A reply is shared by two parties: the library (the thread waiting for the answer) and the
//! host (the callback, or whatever thread it handed the reply to). It is an `Arc`; the
//! registry entry is the host's reference, the waiting call holds its own. The host's reference
//! is released:
//! - by `lls_reply_complete` / `lls_reply_fail` (always, whatever status they return), or
//! - when the callback returns anything but `LLS_CB_PENDING`, or returns `LLS_CB_PENDING`
//!   after it already answered, or
//! - by `lls_reply_set_json` once the callback has returned.
//!
//! The object is destroyed when both references are gone, so an answer that arrives after the
//! library stopped waiting (cancellation) is accepted and discarded safely. A pending reply
//! must be answered exactly once, even after cancellation, or it leaks.

use crate::runtime::buffers;
use crate::runtime::error::FfiError;
use crate::runtime::handle::{self, HandleKind, Object};
use crate::runtime::status::*;
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, ErrorKind};
use parking_lot::{Condvar, Mutex};
use std::ffi::c_char;
use std::sync::Arc;

/// The reply object handed to a host callback. Answer it exactly once: synchronously with
/// `lls_reply_set_json` (then return `LLS_CB_OK`) or `lls_reply_fail` (then return
/// `LLS_CB_ERROR`), or, after returning `LLS_CB_PENDING`, later and from any thread with
/// `lls_reply_complete` or `lls_reply_fail`. After `lls_reply_complete` / `lls_reply_fail`, or
/// once a callback that answered has returned, the handle is invalid.
///
/// Thread safety: the answering functions may be called from any thread, but only once per
/// reply; the library's waiting thread synchronises with them internally.
pub struct lls_reply {
    _opaque: [u8; 0],
}

/// What the host answered.
#[derive(Debug)]
pub enum Answer {
    /// A well-formed JSON reply.
    Json(String),
    /// The host failed the reply, with its message (possibly empty).
    Failed(String),
    /// The host answered with unusable data; the error says what was wrong.
    Invalid(Error),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The callback is running.
    InCallback,
    /// The callback returned `LLS_CB_PENDING`; the library is (or will be) waiting.
    Pending,
    /// The library stopped waiting (cancelled); a late answer is discarded.
    Abandoned,
    /// The library has taken the answer, or the callback returned synchronously.
    Finished,
}

#[derive(Debug)]
struct ReplyState {
    phase: Phase,
    answered: bool,
    answer: Option<Answer>,
    host_released: bool,
}

/// The payload of an `lls_reply` handle.
#[derive(Debug)]
pub struct ReplyObject {
    state: Mutex<ReplyState>,
    cv: Condvar,
}

impl HandleKind for ReplyObject {
    type C = lls_reply;
    const NAME: &'static str = "lls_reply";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSRPL01");
}

/// Which host function is answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    SetJson,
    Complete,
    Fail,
}

/// Builds a callback error of kind `Listener` with `callback: reason` in the detail.
pub fn callback_error(reason: &str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Listener, message).with("callback", reason)
}

impl ReplyObject {
    /// A fresh reply (the callback is about to run).
    pub fn new() -> ReplyObject {
        ReplyObject {
            state: Mutex::new(ReplyState { phase: Phase::InCallback, answered: false, answer: None, host_released: false }),
            cv: Condvar::new(),
        }
    }

    /// Records a host answer and releases the host's reference when the rules say so.
    pub fn host_answer(obj: &Arc<Object<ReplyObject>>, answer: Answer, via: Via) -> Result<(), FfiError> {
        // Decide under the lock, but publish the answer only after the host's reference is
        // released: a waiter that wakes up must find the reply already unregistered, so a leak
        // check right after the library call returns sees a settled handle count.
        let (report, release, answer) = {
            let mut st = obj.state.lock();
            let (report, answer) = if st.answered {
                (
                    Err(FfiError::new(
                        LLS_ERR_REPLY_STATE,
                        "argument `reply`: this reply was already answered (a reply is answered exactly once; the first answer stands)",
                    )
                    .with("argument", "reply")),
                    None,
                )
            } else {
                st.answered = true;
                (Ok(()), Some(answer))
            };
            let release = (via != Via::SetJson || st.phase != Phase::InCallback) && !st.host_released;
            if release {
                st.host_released = true;
            }
            (report, release, answer)
        };
        if release {
            handle::unregister(obj);
        }
        if let Some(answer) = answer {
            let mut st = obj.state.lock();
            if st.phase != Phase::Abandoned {
                st.answer = Some(answer);
            }
            obj.cv.notify_all();
        }
        report
    }

    /// Called by the library once the callback returned `code`.
    pub(crate) fn after_return(obj: &Arc<Object<ReplyObject>>, code: i32) {
        let release = {
            let mut st = obj.state.lock();
            st.phase = if code == LLS_CB_PENDING { Phase::Pending } else { Phase::Finished };
            let release = (code != LLS_CB_PENDING || st.answered) && !st.host_released;
            if release {
                st.host_released = true;
            }
            release
        };
        if release {
            handle::unregister(obj);
        }
    }

    /// Takes the answer given so far (synchronous callbacks).
    pub(crate) fn take_answer(&self) -> Option<Answer> {
        self.state.lock().answer.take()
    }

    /// Waits until the host answers or `cancel` trips (`None`: cancelled, the reply is
    /// abandoned and a late answer will be discarded).
    pub(crate) fn wait(obj: &Arc<Object<ReplyObject>>, cancel: &CancelToken) -> Option<Answer> {
        let waker = obj.clone();
        let _hook = cancel.on_cancel(move || {
            let _st = waker.state.lock();
            waker.cv.notify_all();
        });
        let mut st = obj.state.lock();
        loop {
            if let Some(a) = st.answer.take() {
                st.phase = Phase::Finished;
                return Some(a);
            }
            if cancel.is_cancelled() {
                st.phase = Phase::Abandoned;
                return None;
            }
            obj.cv.wait(&mut st);
        }
    }
}

impl Default for ReplyObject {
    fn default() -> Self {
        ReplyObject::new()
    }
}

/// Turns a JSON buffer from the host into an answer, plus the error to report to the host.
///
/// # Safety
/// As for [`buffers::input_bytes`].
pub unsafe fn json_answer(json: *const c_char, len: usize) -> (Answer, Result<(), FfiError>) {
    // SAFETY: forwarded.
    let bytes = match unsafe { buffers::input_bytes(json, len, "json") } {
        Ok(b) => b,
        Err(e) => {
            let reason = if json.is_null() { "null-reply" } else { "invalid-argument" };
            let inner = callback_error(reason, format!("host callback replied with an unusable buffer: {}", e.message()));
            return (Answer::Invalid(inner), Err(e));
        }
    };
    let text = match buffers::utf8(bytes, "json") {
        Ok(t) => t,
        Err(e) => {
            let at = e.detail()["validUpTo"].clone();
            let inner =
                callback_error("invalid-utf8", format!("host callback replied with invalid UTF-8 (first invalid byte at offset {at})"))
                    .with("validUpTo", at);
            return (Answer::Invalid(inner), Err(e));
        }
    };
    if let Err(pe) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        let inner = callback_error("malformed-json", format!("host callback replied with malformed JSON: {pe}"))
            .with("line", pe.line() as u64)
            .with("column", pe.column() as u64);
        let outer = FfiError::from(llmsession::Error::from(pe).context("argument `json`").with("argument", "json"));
        return (Answer::Invalid(inner), Err(outer));
    }
    (Answer::Json(text.to_string()), Ok(()))
}
