//! Agent instances through the C ABI: `lls_agent` over the core [`Agent`], the host callbacks
//! it calls (prefix listeners, pre-step listeners, the summariser, the token counter), and the
//! turn/step lifecycle.
//!
//! # Locking and reentrancy
//!
//! An agent call holds the agent exclusively (a [`Guarded`] write lock) for its whole duration,
//! callbacks included; no *session* lock is held while a callback runs, so callbacks may read
//! the session and append context to it. A call into the same agent from inside one of its
//! callbacks (same thread) is refused with `LLS_ERR_OUT_OF_ORDER` instead of deadlocking; a call
//! from another thread waits for the running one to end.
//!
//! `lls_agent_dispose` never waits on a call running on its own thread: from inside a callback
//! it trips the core's dispose handle (a flag and a cancel token, no lock), so the running
//! operation ends with `LLS_ERR_DISPOSED` and its turn with `disposed`; the running call then
//! finishes the disposal before it returns. From another thread it trips the same handle (which
//! also ends a wait on a pending reply) and then waits for the running call to end.

use crate::callbacks::store::check_not_in_store;
use crate::runtime::error::FfiError;
use crate::runtime::handle::{self, Guarded, HandleKind, Object};
use crate::session::SessionObject;
use llmsession::agent::{Agent, DisposeHandle};
use llmsession::cancel::CancelToken;
use llmsession::error::{Error, ErrorKind, Result};
use llmsession::request::RequestInfo;
use parking_lot::{Mutex, ReentrantMutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

mod context;
mod lifecycle;
mod native_compaction;
mod setup;
mod tree;
mod turn;

pub use context::*;
pub use lifecycle::*;
pub use native_compaction::*;
pub use setup::*;
pub use tree::*;
pub use turn::*;

/// An agent instance: drives the turns and steps of one session (at most one live instance
/// per session), builds every request, and runs compaction. Create it with `lls_agent_new`,
/// free it with `lls_agent_free`.
///
/// Thread safety: agent functions may be called from any thread; calls on one agent are
/// serialised (a second thread waits). Inside the agent's own callbacks, calling the agent is
/// refused with `LLS_ERR_OUT_OF_ORDER`, except `lls_agent_dispose`; reading and appending to the
/// session is allowed.
pub struct lls_agent {
    _opaque: [u8; 0],
}

/// The agent and what the C side remembers about it.
pub(super) struct AgentSlot {
    /// `None` once disposed.
    pub(super) agent: Option<Agent>,
    /// The last request built, for `lls_agent_request_info`.
    pub(super) last_request: Option<RequestInfo>,
}

/// The payload of an `lls_agent` handle.
pub struct AgentObject {
    state: Guarded<AgentSlot>,
    /// The thread running a call on this agent, if any.
    owner: Mutex<Option<ThreadId>>,
    dispose_handle: DisposeHandle,
    pub(super) dispose_requested: AtomicBool,
    /// Held by the thread tearing the instance down, for the whole teardown: a second
    /// `lls_agent_dispose` from another thread returns only once the session is released, so
    /// an `lls_agent_new` right after it never meets `LLS_ERR_BUSY`. Reentrant: a
    /// `userdata_free` run by the teardown may dispose or free the same agent again.
    disposal: ReentrantMutex<()>,
    /// Tripped on dispose: ends a host token counter's pending wait.
    disposed_token: CancelToken,
    /// The token the host token counter waits with during the current call.
    counter_cancel: Arc<Mutex<CancelToken>>,
    session: Arc<Object<SessionObject>>,
    pub(super) instance: u64,
}

impl std::fmt::Debug for AgentObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentObject").field("instance", &self.instance).finish()
    }
}

impl HandleKind for AgentObject {
    type C = lls_agent;
    const NAME: &'static str = "lls_agent";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSAGT01");
}

/// Clears the owner when a call ends (also when it unwinds).
struct OwnerGuard<'a>(&'a Mutex<Option<ThreadId>>);

impl Drop for OwnerGuard<'_> {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}

fn disposed(instance: u64) -> FfiError {
    Error::new(ErrorKind::Disposed, format!("agent instance {instance} was disposed")).into()
}

pub(super) fn live(agent: &mut Option<Agent>, instance: u64) -> std::result::Result<&mut Agent, FfiError> {
    agent.as_mut().ok_or_else(|| disposed(instance))
}

pub(super) fn live_ref(agent: &Option<Agent>, instance: u64) -> std::result::Result<&Agent, FfiError> {
    agent.as_ref().ok_or_else(|| disposed(instance))
}

impl AgentObject {
    /// Registers a handle for `agent`, which drives the session of `session`.
    pub(crate) fn register(agent: Agent, session: Arc<Object<SessionObject>>) -> *mut lls_agent {
        let disposed_token = CancelToken::new();
        let obj = AgentObject {
            dispose_handle: agent.dispose_handle(),
            instance: agent.instance(),
            state: Guarded::new(AgentSlot { agent: Some(agent), last_request: None }),
            owner: Mutex::new(None),
            dispose_requested: AtomicBool::new(false),
            disposal: ReentrantMutex::new(()),
            counter_cancel: Arc::new(Mutex::new(disposed_token.clone())),
            disposed_token,
            session,
        };
        handle::register(obj).0
    }

    /// After a request was built: a callback that ran after the core's last check (a token
    /// counter) may have disposed the agent, and the disposal closed the request's step, so
    /// the request must not be handed out.
    pub(super) fn refuse_if_disposed_while_building(&self) -> std::result::Result<(), FfiError> {
        if self.dispose_requested.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::Disposed,
                "the agent instance was disposed while the request was being built; its step is closed",
            )
            .into());
        }
        Ok(())
    }

    fn on_this_thread(&self) -> bool {
        *self.owner.lock() == Some(std::thread::current().id())
    }

    /// Refuses a call from inside this agent's own callback, or from its session's store
    /// callback.
    fn check_entry(&self) -> std::result::Result<(), FfiError> {
        if self.on_this_thread() {
            return Err(Error::out_of_order(
                "the agent is running a call on this thread: a callback may not drive or read the agent that called it (read the session instead, or dispose the agent)",
            )
            .with("callback", "reentrant")
            .into());
        }
        check_not_in_store(self.session.store_key)
    }

    /// Runs `f` with exclusive access. `host` is the caller's cancel token; `f` receives a
    /// token that trips when it trips or when the agent is disposed. A disposal requested
    /// during the call (from a callback) is completed before returning.
    pub(super) fn run<R>(
        &self,
        host: Option<&CancelToken>,
        f: impl FnOnce(&mut AgentSlot, &CancelToken) -> std::result::Result<R, FfiError>,
    ) -> std::result::Result<R, FfiError> {
        self.check_entry()?;
        let mut slot = self.state.write()?;
        let owner = OwnerGuard(&self.owner);
        *self.owner.lock() = Some(std::thread::current().id());
        let op = CancelToken::new();
        let (a, b) = (op.clone(), op.clone());
        let _hooks = [host.map(|h| h.on_cancel(move || a.cancel())), Some(self.disposed_token.on_cancel(move || b.cancel()))];
        *self.counter_cancel.lock() = op.clone();
        let result = f(&mut slot, &op);
        *self.counter_cancel.lock() = self.disposed_token.clone();
        let finish = if self.dispose_requested.load(Ordering::SeqCst) { slot.agent.take() } else { None };
        drop(owner);
        drop(slot);
        // Dispose outside the lock: dropping the agent frees its callbacks' userdata.
        if let Some(agent) = finish {
            let disposed = agent.dispose();
            if result.is_ok() {
                disposed?;
            }
        }
        result
    }

    /// Shared access for reads.
    pub(super) fn read<R>(&self, f: impl FnOnce(&AgentSlot) -> std::result::Result<R, FfiError>) -> std::result::Result<R, FfiError> {
        self.check_entry()?;
        let slot = self.state.read();
        f(&slot)
    }

    fn request_dispose(&self) {
        self.dispose_requested.store(true, Ordering::SeqCst);
        self.dispose_handle.dispose();
        self.disposed_token.cancel();
    }

    /// Disposes now (waiting for a call running on another thread), unless a call runs on this
    /// thread, which then finishes the disposal itself.
    fn dispose_now(&self) -> Result<()> {
        self.request_dispose();
        if self.on_this_thread() {
            return Ok(());
        }
        let _teardown = self.disposal.lock();
        let agent = self.state.write_for_teardown().agent.take();
        match agent {
            Some(a) => a.dispose(),
            None => Ok(()),
        }
    }
}

pub(super) fn agent_arg(ptr: *const lls_agent) -> std::result::Result<Arc<Object<AgentObject>>, FfiError> {
    handle::lookup::<AgentObject>(ptr, "agent")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{lls_error_code, lls_error_free, lls_error_message};
    use crate::runtime::boundary::boundary;
    use crate::runtime::error_object::lls_error;
    use crate::runtime::status::*;
    use crate::session::lls_session;
    use crate::session::{lls_session_append, lls_session_events, lls_session_free, lls_session_new_memory};
    use std::ffi::{c_char, c_void};
    use std::ptr::null_mut;

    fn text(json: &[u8]) -> (*const c_char, usize) {
        (json.as_ptr().cast(), json.len())
    }

    #[test]
    fn a_panic_poisons_the_agent_and_dispose_still_releases_the_session() {
        let mut s: *mut lls_session = null_mut();
        assert_eq!(unsafe { lls_session_new_memory(std::ptr::null(), 0, &mut s, null_mut()) }, LLS_OK);
        let (o, ol) = text(br#"{"config":{"provider":"p","model":"m"}}"#);
        let mut a: *mut lls_agent = null_mut();
        assert_eq!(unsafe { lls_agent_new(s, o, ol, &mut a, null_mut()) }, LLS_OK);
        let obj = agent_arg(a).unwrap();
        let mut err: *mut lls_error = null_mut();
        let st = unsafe {
            boundary(&mut err, || obj.run(None, |_, _| -> std::result::Result<(), FfiError> { panic!("deliberate test panic") }))
        };
        assert_eq!(st, LLS_ERR_PANIC);
        lls_error_free(err);
        assert!(!obj.on_this_thread(), "the owner is cleared when a call unwinds");
        // Further changes are refused; reads still work.
        let (m, ml) = text(br#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#);
        err = null_mut();
        assert_eq!(unsafe { lls_agent_start_turn(a, m, ml, null_mut(), &mut err) }, LLS_ERR_POISONED);
        assert_eq!(lls_error_code(err), LLS_ERR_POISONED);
        let msg = unsafe { std::ffi::CStr::from_ptr(lls_error_message(err)) }.to_string_lossy().into_owned();
        assert!(msg.contains("poisoned"), "{msg}");
        lls_error_free(err);
        let mut out: *mut c_char = null_mut();
        assert_eq!(unsafe { lls_agent_stats(a, &mut out, null_mut(), null_mut()) }, LLS_OK);
        unsafe { crate::library::lls_string_free(out) };
        // Disposing a poisoned agent still frees the session for a new instance.
        assert_eq!(unsafe { lls_agent_dispose(a, null_mut()) }, LLS_OK);
        let mut b: *mut lls_agent = null_mut();
        assert_eq!(unsafe { lls_agent_new(s, o, ol, &mut b, null_mut()) }, LLS_OK);
        drop(obj);
        lls_agent_free(a);
        lls_agent_free(b);
        lls_session_free(s);
    }

    #[test]
    fn a_panic_poisons_the_session_for_writes_only() {
        let mut s: *mut lls_session = null_mut();
        assert_eq!(unsafe { lls_session_new_memory(std::ptr::null(), 0, &mut s, null_mut()) }, LLS_OK);
        let obj = handle::lookup::<SessionObject>(s, "session").unwrap();
        let st = unsafe {
            boundary(null_mut(), || {
                let _g = obj.poison.enter()?;
                panic!("deliberate test panic")
            })
        };
        assert_eq!(st, LLS_ERR_PANIC);
        let (e, el) = text(br#"{"type":"host/note","data":{}}"#);
        assert_eq!(unsafe { lls_session_append(s, e, el, null_mut(), null_mut()) }, LLS_ERR_POISONED);
        let mut out: *mut c_char = null_mut();
        assert_eq!(unsafe { lls_session_events(s, 0, u64::MAX, &mut out, null_mut(), null_mut()) }, LLS_OK);
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(out) }.to_str().unwrap(), "[]");
        unsafe { crate::library::lls_string_free(out) };
        drop(obj);
        lls_session_free(s);
    }

    /// A second `lls_agent_dispose` (another thread) while the first is still tearing the
    /// instance down (here: writing the open turn's `turn/end` to a slow host store) returns only
    /// once the session is free, so an `lls_agent_new` right after it works.
    #[test]
    fn a_concurrent_dispose_returns_after_the_teardown() {
        use crate::callbacks::reply::lls_reply;
        use crate::reply::lls_reply_set_json;
        use crate::session::lls_session_open_store;
        use std::sync::mpsc;
        static ARMED: AtomicBool = AtomicBool::new(false);
        static IN_TEARDOWN: AtomicBool = AtomicBool::new(false);
        unsafe extern "C" fn store(_: *mut c_void, input: *const c_char, len: usize, reply: *mut lls_reply) -> i32 {
            let input = unsafe { std::slice::from_raw_parts(input.cast::<u8>(), len) };
            let input = std::str::from_utf8(input).unwrap();
            let answer: &[u8] = if input.contains(r#""op":"load""#) { br#"{"records":[]}"# } else { b"true" };
            if ARMED.load(Ordering::SeqCst) && input.contains("turn/end") {
                IN_TEARDOWN.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            unsafe { lls_reply_set_json(reply, answer.as_ptr().cast(), answer.len(), null_mut()) };
            0
        }
        let mut s: *mut lls_session = null_mut();
        assert_eq!(unsafe { lls_session_open_store(Some(store), null_mut(), None, std::ptr::null(), 0, &mut s, null_mut()) }, LLS_OK);
        let (o, ol) = text(br#"{"config":{"provider":"p","model":"m"}}"#);
        let mut a: *mut lls_agent = null_mut();
        assert_eq!(unsafe { lls_agent_new(s, o, ol, &mut a, null_mut()) }, LLS_OK);
        let (m, ml) = text(br#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#);
        assert_eq!(unsafe { lls_agent_start_turn(a, m, ml, null_mut(), null_mut()) }, LLS_OK);
        ARMED.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        let a_addr = a as usize;
        let first = std::thread::spawn(move || {
            let st = unsafe { lls_agent_dispose(a_addr as *mut lls_agent, null_mut()) };
            tx.send(st).unwrap();
        });
        while !IN_TEARDOWN.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert_eq!(unsafe { lls_agent_dispose(a, null_mut()) }, LLS_OK);
        let mut b: *mut lls_agent = null_mut();
        let mut err: *mut lls_error = null_mut();
        let st = unsafe { lls_agent_new(s, o, ol, &mut b, &mut err) };
        if st != LLS_OK {
            let msg = unsafe { std::ffi::CStr::from_ptr(lls_error_message(err)) }.to_string_lossy().into_owned();
            panic!("lls_agent_new right after the second dispose: status {st}: {msg}");
        }
        assert_eq!(rx.recv().unwrap(), LLS_OK);
        first.join().unwrap();
        lls_agent_free(a);
        lls_agent_free(b);
        lls_session_free(s);
    }
}
