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

use crate::callbacks::counter::host_counter;
use crate::callbacks::host::{lls_callback_fn, lls_userdata_free_fn, HostCallback};
use crate::callbacks::listeners::{HostPreStep, HostPrefixListener};
use crate::callbacks::store::check_not_in_store;
use crate::callbacks::summariser::HostSummariser;
use crate::cancel::{cancel_arg, lls_cancel};
use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::encode;
use crate::runtime::buffers::{self, OptOut, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, Guarded, HandleKind, Object};
use crate::runtime::status::lls_status;
use crate::session::{lls_session, session_arg, SessionObject};
use llmsession::agent::wire::{policy_table, AgentSetup, CompactInput, ProviderErrorInput, ResponseInput};
use llmsession::agent::{Agent, AgentOptions, DisposeHandle, ProviderErrorOutcome, ToolResultInput};
use llmsession::cancel::CancelToken;
use llmsession::compaction::Outcome;
use llmsession::error::{Error, ErrorKind, Result};
use llmsession::log::TurnEndReason;
use llmsession::request::RequestInfo;
use llmsession::tokens::{TokenCounter, TokenizerCounter};
use llmsession::types::Message;
use parking_lot::{Mutex, ReentrantMutex};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

/// `*out_seq` of `lls_agent_inject` when the message was deferred (not written yet).
///
/// Thread safety: a constant.
pub const LLS_SEQ_NONE: u64 = u64::MAX;

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

// ---------------------------------------------------------------------------------------------
// Creating, options, callbacks

/// Creates an agent instance over `session` and stores it in `*out`. If the session already
/// holds request headers (a stored log, a fork), this is a resumed instance: it recomposes the
/// session prefix and its first request records a `resume` snapshot.
///
/// `opts_json` is `{"config": {"provider","model",...}, "system"?: string, "tools"?: [schemas],
/// "checkRequests"?: bool, "policy"?: policy | {"default"?, "models"?}, "tokenizer"?: path}`:
/// the call config, system prompt and tools every request carries; `checkRequests` rebuilds
/// every request from the log and compares bytes (for tests); `policy` enables automatic
/// compaction (`{"contextWindow", "threshold"?, "retainedRatio"? | "retainedTokens"?,
/// "summaryMaxTokens"?, "retries"?, "overflowRetries"?, "summaryProvider"?, "summaryModel"?}`);
/// `tokenizer` is a HuggingFace `tokenizer.json` used to count tokens (the built-in estimate
/// otherwise): a regular file of at most 512 MiB (a symbolic link is followed; a device or a
/// FIFO is refused without reading it). `summaryProvider` and `summaryModel` go together and
/// must not be empty.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `opts_json`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (detail `field`),
/// `LLS_ERR_INVALID_POLICY`, `LLS_ERR_TOKENIZER`, `LLS_ERR_BUSY` (the session already has a live
/// agent instance).
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_new(
    session: *const lls_session,
    opts_json: *const c_char,
    opts_len: usize,
    out: *mut *mut lls_agent,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = buffers::Out::new(out, "out")?;
            let s = session_arg(session, "session")?;
            let v = buffers::input_json(opts_json, opts_len, "opts_json")?;
            let setup = AgentSetup::from_value(&v)?;
            let counter: Option<Arc<dyn TokenCounter>> = match &setup.tokenizer {
                None => None,
                Some(path) => Some(Arc::new(TokenizerCounter::from_file(path)?)),
            };
            let policy = setup.policy;
            let options = setup.options;
            let mut agent = Agent::new(&s.session, options)?;
            if let Some(p) = policy {
                agent.set_policies(p)?;
            }
            agent.set_token_counter(counter);
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
                session: s,
            };
            out.write(handle::register(obj).0);
            Ok(())
        })
    }
}

/// Replaces the agent's options `{"config", "system"?, "tools"?, "checkRequests"?}`; they take
/// effect at the next request (a changed header is logged as a `change` snapshot).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`, `LLS_ERR_DISPOSED`, `LLS_ERR_OUT_OF_ORDER`
/// (from the agent's own callback), `LLS_ERR_POISONED`.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_options(
    agent: *mut lls_agent,
    opts_json: *const c_char,
    opts_len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let v = buffers::input_json(opts_json, opts_len, "opts_json")?;
            let options = AgentOptions::from_value(&v, "")?;
            a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.set_options(options)?))
        })
    }
}

/// Sets the compaction policy: a policy object (one policy for every model), `{"default"?:
/// policy, "models"?: {"model name": policy}}`, or `null` (no automatic compaction). See
/// `lls_agent_new` for the policy fields. An invalid policy changes nothing.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`, `LLS_ERR_INVALID_POLICY` (detail `field`),
/// `LLS_ERR_DISPOSED`, `LLS_ERR_OUT_OF_ORDER`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `policy_json` NULL or `policy_len` readable bytes; `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_policy(
    agent: *mut lls_agent,
    policy_json: *const c_char,
    policy_len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let v = buffers::input_json(policy_json, policy_len, "policy_json")?;
            let table = policy_table(&v)?;
            a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.set_policies(table)?))
        })
    }
}

/// Counts tokens with the HuggingFace `tokenizer.json` at `(path, path_len)` from now on
/// (replacing a host token counter). The file must be a regular file of at most 512 MiB; a
/// symbolic link is followed; a device, a FIFO or a directory is refused without reading or
/// waiting on it.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty path), `LLS_ERR_TOKENIZER` (unreadable, not a regular file,
/// too large or invalid; detail `path`), `LLS_ERR_DISPOSED`, `LLS_ERR_OUT_OF_ORDER`,
/// `LLS_ERR_POISONED`.
///
/// # Safety
/// `path` NULL or `path_len` readable bytes; `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_tokenizer(
    agent: *mut lls_agent,
    path: *const c_char,
    path_len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let path = buffers::input_str(path, path_len, "path")?;
            if path.is_empty() {
                return Err(FfiError::invalid_argument("path", "the path is empty"));
            }
            let counter = TokenizerCounter::from_file(path)?;
            a.run(None, |slot, _| {
                live(&mut slot.agent, a.instance)?.set_token_counter(Some(Arc::new(counter)));
                Ok(())
            })
        })
    }
}

/// Goes back to the built-in token estimate (drops a tokenizer or a host token counter, whose
/// `userdata_free` then runs).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_OUT_OF_ORDER`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_clear_token_counter(agent: *mut lls_agent, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let old = a.run(None, |slot, _| {
                let ag = live(&mut slot.agent, a.instance)?;
                let old = ag.set_counter(None);
                Ok(old)
            })?;
            drop(old); // outside the lock: may run userdata_free
            Ok(())
        })
    }
}

/// Registers a callback with the agent (`register` installs it); the userdata is owned from
/// the start and freed exactly once on every path.
unsafe fn register_callback(
    agent: *mut lls_agent,
    func: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    err: *mut *mut lls_error,
    register: impl FnOnce(&mut Agent, HostCallback) -> Result<()>,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let cb = HostCallback::from_raw(func, userdata, userdata_free, "callback")?;
            let a = agent_arg(agent)?;
            a.run(None, |slot, _| Ok(register(live(&mut slot.agent, a.instance)?, cb)?))
        })
    }
}

/// Adds a session prefix listener (SPEC §4). Listeners run once per agent instance, lazily,
/// before the instance's first request, as a waterfall in registration order: each receives
/// `{"rest": [messages], "instance": n, "turn": n}`, where `rest` is what the listeners
/// registered after it produced, and answers with the extended JSON array of messages —
/// prepend its own (`[mine, ...rest]`) to put contributions in registration order. The result
/// is validated and frozen; it goes after the system prompt and before the history in every
/// request of the instance. A failing listener or invalid output fails the request
/// (`LLS_ERR_LISTENER`) and ends the turn with `error`; nothing is cached. Listeners registered
/// after the prefix was composed take effect in the next instance.
///
/// The callback may read the session and append context to it (`lls_session_append`, a
/// `user/message` with source `plugin`), which joins the current request; it may call
/// `lls_agent_dispose`, but no other function of this agent.
///
/// Ownership: the library owns `userdata` from this call on and calls `userdata_free` (may be
/// NULL) exactly once: when this call fails (any error, including a NULL `callback`), or when
/// the agent is disposed or freed.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`callback`, `agent`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_DISPOSED`, `LLS_ERR_OUT_OF_ORDER`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `callback`/`userdata`/`userdata_free` as for any callback registration; `err` NULL or valid
/// for writes.
///
/// Thread safety: exclusive per agent (serialised internally); the callback runs on the thread
/// of the call that builds a request, with no session lock held.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_add_prefix_listener(
    agent: *mut lls_agent,
    callback: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe {
        register_callback(agent, callback, userdata, userdata_free, err, |a, cb| a.add_prefix_listener(Arc::new(HostPrefixListener(cb))))
    }
}

/// Adds a pre-step listener: it runs before every request (after prefix composition, before the
/// pressure gate) and receives `{"prefix": [messages], "system": string|null, "tools": [...],
/// "turn": n, "step": n}`; its reply is ignored (answer `null`). It may append context to the
/// session, which joins the current request. A failure fails the request (`LLS_ERR_LISTENER`)
/// and ends the turn with `error`.
///
/// Ownership, errors and callback rules as for `lls_agent_add_prefix_listener`.
///
/// # Safety
/// As for `lls_agent_add_prefix_listener`.
///
/// Thread safety: exclusive per agent (serialised internally); the callback runs on the thread
/// of the call that builds a request, with no session lock held.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_add_pre_step_listener(
    agent: *mut lls_agent,
    callback: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe { register_callback(agent, callback, userdata, userdata_free, err, |a, cb| a.add_pre_step_listener(Arc::new(HostPreStep(cb)))) }
}

/// Sets the summariser compaction calls (replacing an earlier one, whose `userdata_free` runs).
/// It receives `{"request": <envelope>, "provider", "model", "maxTokens", "digest",
/// "sharedMessages", "prefixLen"}`, where `request` is the summarisation request envelope
/// exactly as built (`purpose: "compaction"`; its messages replay the last routed request's
/// prefix and end with the instruction) — send it to the provider (render it with
/// `lls_render`) — and answers `{"text": summary, "usage"?: usage, "provider"?, "model"?,
/// "truncated"?: bool}` (any other field makes the reply unusable). A failure or an unusable
/// reply is retried per the policy, then the
/// compaction fails (`compaction/end{failed}`; `LLS_ERR_SUMMARISER` from `lls_agent_compact`).
/// A pending reply's wait ends when the operation's cancel token trips or the agent is
/// disposed.
///
/// Ownership, errors and callback rules as for `lls_agent_add_prefix_listener`.
///
/// # Safety
/// As for `lls_agent_add_prefix_listener`.
///
/// Thread safety: exclusive per agent (serialised internally); the callback runs on the thread
/// of the call that compacts, with no session lock held.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_summariser(
    agent: *mut lls_agent,
    callback: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: forwarded.
    unsafe {
        register_callback(agent, callback, userdata, userdata_free, err, |a, cb| {
            a.set_summariser(Some(Arc::new(HostSummariser(cb))));
            Ok(())
        })
    }
}

/// Sets a host token counter (replacing a tokenizer or an earlier counter). It receives one
/// item at a time — `{"kind":"system","text"}`, `{"kind":"tools","tools":[...]}` or
/// `{"kind":"message","message":{...}}` — and answers its token count, framing included: a
/// non-negative integer or `{"tokens": n}`. Counts are cached per message. A failure or
/// another reply fails the measurement (`LLS_ERR_LISTENER`, detail `counter: "host"`). A
/// pending reply's wait ends when the operation's cancel token trips (`LLS_ERR_CANCELLED`) or
/// the agent is disposed (`LLS_ERR_DISPOSED`). The counter may append context to the session
/// (it joins the current request); the pressure gate selects its region from what it measured.
///
/// Ownership, errors and callback rules as for `lls_agent_add_prefix_listener`.
///
/// # Safety
/// As for `lls_agent_add_prefix_listener`.
///
/// Thread safety: exclusive per agent (serialised internally); the callback runs on the thread
/// of the call that measures, with no session lock held.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_token_counter(
    agent: *mut lls_agent,
    callback: lls_callback_fn,
    userdata: *mut c_void,
    userdata_free: lls_userdata_free_fn,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let cb = HostCallback::from_raw(callback, userdata, userdata_free, "callback")?;
            let a = agent_arg(agent)?;
            let counter = host_counter(cb, a.counter_cancel.clone());
            let old = a.run(None, |s, _| {
                let ag = live(&mut s.agent, a.instance)?;
                Ok(ag.set_counter(Some(Arc::new(counter))))
            })?;
            drop(old); // outside the lock: may run userdata_free
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The turn/step lifecycle

/// Opens a turn with the user's message (JSON `{"role":"user","content":[blocks]}`), writing
/// `turn/start` and `user/message`, and stores the turn number in `*out_turn` (may be NULL).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (not a user message; detail `field`),
/// `LLS_ERR_OUT_OF_ORDER` (a turn is open), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE` (nothing was
/// written and no turn is open: the same call can be retried), `LLS_ERR_POISONED`.
///
/// # Safety
/// `message_json` NULL or `message_len` readable bytes; `out_turn`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_start_turn(
    agent: *mut lls_agent,
    message_json: *const c_char,
    message_len: usize,
    out_turn: *mut u64,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_turn = OptOut::new(out_turn);
            let a = agent_arg(agent)?;
            let v = buffers::input_json(message_json, message_len, "message_json")?;
            let message = Message::from_value(&v, "message")?;
            let turn = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.start_turn(message)?))?;
            out_turn.write(turn);
            Ok(())
        })
    }
}

/// Builds the next request of the open turn: composes the session prefix (once per instance),
/// runs the pre-step listeners, the pressure gate (which may compact), records the header if
/// it changed, writes `step/start`, and stores the request envelope in `*out` — the exact bytes
/// whose SHA-256 is logged, `{"provider","model",...,"system"?,"tools"?,"messages":[...],
/// "sessionId","turn","step","purpose":"conversation"}`. Render it with `lls_render`. Free
/// `*out` with `lls_string_free`. `lls_agent_request_info` describes it.
///
/// `cancel` (may be NULL) interrupts composition, pre-step listeners and summarisation (also
/// a pending reply): the call fails with `LLS_ERR_CANCELLED` and the turn ends `aborted`. A
/// failing listener gives `LLS_ERR_LISTENER` and the turn ends `error`; a dispose gives
/// `LLS_ERR_DISPOSED` and the turn ends `disposed`. A failed automatic compaction is logged and
/// the request goes ahead. `LLS_ERR_STORAGE`: the store refused a write; no step is open and
/// the turn stays open (a compaction that landed before stays landed): call again.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_OUT_OF_ORDER` (no open turn, a request already open, a tool result missing),
/// `LLS_ERR_CANCELLED`, `LLS_ERR_DISPOSED`, `LLS_ERR_LISTENER`, `LLS_ERR_RECONSTRUCTION` (check
/// mode), `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); callbacks run on this thread;
/// `cancel` may be tripped from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_next_request(
    agent: *mut lls_agent,
    cancel: *const lls_cancel,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let cancel = cancel_arg(cancel, "cancel")?;
            let req = a.run(Some(&cancel), |slot, op| {
                let req = live(&mut slot.agent, a.instance)?.next_request(op)?;
                slot.last_request = Some(req.info());
                Ok(req)
            })?;
            a.refuse_if_disposed_while_building()?;
            out.write_owned(req.json)
        })
    }
}

/// Describes the last request `lls_agent_next_request` built, as JSON `{"turn","step","digest",
/// "bytes","prefixLen","messageCount","sharedMessages","instance","stepSeq"}`: `prefixLen`
/// leading messages are the session prefix (pass it to `lls_render`), `sharedMessages` leading
/// messages are shared with the previous request (a cache hit). Free `*out` with
/// `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_OUT_OF_ORDER` (no request
/// built yet, or called from the agent's callback).
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread (waits for a running call); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_request_info(
    agent: *const lls_agent,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let info = a.read(|slot| {
                slot.last_request.clone().ok_or_else(|| Error::out_of_order("this agent has not built a request yet").into())
            })?;
            out.write_json(&info)
        })
    }
}

/// Records the provider's response to the open request: `{"message": assistant message,
/// "usage"?: usage, "finishReason"?: string}` (provenance defaults to the request's provider
/// and model), so the output of `lls_parse_response` can be passed as it is; `finishReason` is
/// checked to be a string and not logged (the message says whether tools were called). Writes
/// `assistant/message`, one `tool/call` per tool-call block and `step/end`; stores the seq of
/// the `assistant/message` in `*out_seq` (may be NULL). Then report each tool call's result
/// with `lls_agent_record_tool_result` and ask for the next request, or end the turn.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (detail `field`), `LLS_ERR_OUT_OF_ORDER`
/// (no open request), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE` (nothing was written: the same
/// call can be retried), `LLS_ERR_POISONED`.
///
/// # Safety
/// `response_json` NULL or `response_len` readable bytes; `out_seq`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_response(
    agent: *mut lls_agent,
    response_json: *const c_char,
    response_len: usize,
    out_seq: *mut u64,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_seq = OptOut::new(out_seq);
            let a = agent_arg(agent)?;
            let v = buffers::input_json(response_json, response_len, "response_json")?;
            let ResponseInput { message, usage } = ResponseInput::from_value(&v)?;
            let seq = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.record_response(message, usage)?))?;
            out_seq.write(seq);
            Ok(())
        })
    }
}

/// Records a tool result: `{"callId": id, "content": [blocks]}` or `{"callId": id, "text":
/// string}`, with `"isError"?: bool`. Results may come in any order; they are logged in the
/// order the model made the calls. `*out_written` (may be NULL) receives how many results this
/// call wrote to the log (0 while an earlier call's result is missing).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`, `LLS_ERR_OUT_OF_ORDER` (an unknown call
/// id, a result reported twice, a request still open; detail `callId`), `LLS_ERR_DISPOSED`,
/// `LLS_ERR_STORAGE` (nothing was written and the result is not reported: the same call can be
/// retried), `LLS_ERR_POISONED`.
///
/// # Safety
/// `result_json` NULL or `result_len` readable bytes; `out_written`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_tool_result(
    agent: *mut lls_agent,
    result_json: *const c_char,
    result_len: usize,
    out_written: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_written = OptOut::new(out_written);
            let a = agent_arg(agent)?;
            let v = buffers::input_json(result_json, result_len, "result_json")?;
            let result = ToolResultInput::from_value(&v)?;
            let n = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.record_tool_result(result)?))?;
            out_written.write(n);
            Ok(())
        })
    }
}

/// Adds durable context — a user message (`{"role":"user","content":[...]}`) logged as
/// `user/message{source: host}` — that the next request carries. While a request or a tool
/// batch is open it is deferred until the batch closes: `*out_seq` (may be NULL) receives the
/// seq when written now, `LLS_SEQ_NONE` when deferred.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (not a user message), `LLS_ERR_DISPOSED`,
/// `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `message_json` NULL or `message_len` readable bytes; `out_seq`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks
/// (a callback appends context with `lls_session_append`).
#[no_mangle]
pub unsafe extern "C" fn lls_agent_inject(
    agent: *mut lls_agent,
    message_json: *const c_char,
    message_len: usize,
    out_seq: *mut u64,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_seq = OptOut::new(out_seq);
            let a = agent_arg(agent)?;
            let v = buffers::input_json(message_json, message_len, "message_json")?;
            let message = Message::from_value(&v, "message")?;
            let seq = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.inject(message)?))?;
            out_seq.write(seq.unwrap_or(LLS_SEQ_NONE));
            Ok(())
        })
    }
}

/// Records that the provider failed the open request: `{"message": string, "overflow"?:
/// bool}` (writes `step/end{outcome: error}`). The turn stays open: retry with
/// `lls_agent_next_request` or end it. With `overflow` (the provider said the context is too
/// long) the agent compacts down to the newest message and `*out_retry` (may be NULL) is 1:
/// ask for the request again; otherwise it is 0. `cancel` (may be NULL) interrupts that
/// compaction: the call fails with `LLS_ERR_CANCELLED` and the turn ends `aborted`, as for a
/// cancel in `lls_agent_next_request`. The count of consecutive overflows resets when a response
/// is recorded and at the end of every turn. When the store refuses a write of the recovery
/// (`LLS_ERR_STORAGE`), the overflow stays recorded: reporting it again retries the recovery.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT`, `LLS_ERR_OUT_OF_ORDER` (no open request),
/// `LLS_ERR_OVERFLOW_BUDGET` (overflow with no policy, or too many in a row),
/// `LLS_ERR_NOTHING_TO_COMPACT`, `LLS_ERR_SUMMARISER`, `LLS_ERR_CANCELLED`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `error_json` NULL or `error_len` readable bytes; `out_retry`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); callbacks run on this thread;
/// `cancel` may be tripped from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_provider_error(
    agent: *mut lls_agent,
    error_json: *const c_char,
    error_len: usize,
    cancel: *const lls_cancel,
    out_retry: *mut i32,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_retry = OptOut::new(out_retry);
            let a = agent_arg(agent)?;
            let v = buffers::input_json(error_json, error_len, "error_json")?;
            let ProviderErrorInput { message, overflow } = ProviderErrorInput::from_value(&v)?;
            let cancel = cancel_arg(cancel, "cancel")?;
            let outcome =
                a.run(Some(&cancel), |slot, op| Ok(live(&mut slot.agent, a.instance)?.report_provider_error(&message, overflow, op)?))?;
            out_retry.write(i32::from(outcome == ProviderErrorOutcome::Retry));
            Ok(())
        })
    }
}

/// Ends the open turn with `(reason, reason_len)`: `completed` or `max-tokens` (the turn must
/// be at rest: no open request, every tool result in), or `aborted`, `error`, `rejected`,
/// `disposed`, `interrupted` (an open request is closed and missing tool results are answered
/// with error results first).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_INPUT` (an unknown reason), `LLS_ERR_OUT_OF_ORDER` (no open turn, or not at
/// rest for `completed`), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE` (nothing was written, the turn
/// stays open: the same call can be retried), `LLS_ERR_POISONED`.
///
/// # Safety
/// `reason` NULL or `reason_len` readable bytes; `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_end_turn(
    agent: *mut lls_agent,
    reason: *const c_char,
    reason_len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let text = buffers::input_str(reason, reason_len, "reason")?;
            let reason = TurnEndReason::parse(text, "reason")?;
            a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.end_turn(reason)?))
        })
    }
}

/// Compacts now, between requests. `opts_json` (may be NULL) is `{"span"?: [start, end]}`: a
/// surface span (positions in `lls_session_history`, inclusive, not separating a tool call from
/// its result); without it the head region is chosen as the pressure gate would (keeping the
/// policy's retained tail, or the newest message without a policy). A middle span stays
/// correct but forgoes cache reuse. The summariser (`lls_agent_set_summariser`) is called on
/// this thread; `cancel` (may be NULL) interrupts it.
///
/// On success `*out` is `{"outcome": "landed" | "discarded", "span": [start, end], "seqs":
/// [...], "request": {"digest", "sharedMessages", "messageCount"}, "error"?}` (`discarded`: the
/// span changed while the summariser ran). A summariser that fails, is missing, or returns a
/// rejected summary (empty, truncated, not smaller) gives `LLS_ERR_SUMMARISER` with the same
/// object under `outcome` in the error detail; the surface is untouched.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a bad span),
/// `LLS_ERR_OUT_OF_ORDER` (a request or tool batch open; a compactable history before the
/// instance's first request, when its prefix is not composed yet), `LLS_ERR_NOTHING_TO_COMPACT`
/// (the surface holds nothing compactable, e.g. before any turn), `LLS_ERR_SUMMARISER`, `LLS_ERR_CANCELLED`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out`, `out_len`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); callbacks run on this thread;
/// `cancel` may be tripped from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_compact(
    agent: *mut lls_agent,
    opts_json: *const c_char,
    opts_len: usize,
    cancel: *const lls_cancel,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let span = CompactInput::from_value(v.as_ref())?.span;
            let cancel = cancel_arg(cancel, "cancel")?;
            let outcome = a.run(Some(&cancel), |slot, op| Ok(live(&mut slot.agent, a.instance)?.compact(span, op)?))?;
            if outcome.outcome == Outcome::Failed {
                let why = outcome.error.clone().unwrap_or_else(|| "the compaction failed".into());
                return Err(Error::new(ErrorKind::Summariser, format!("compaction failed: {why}"))
                    .with("outcome", encode(&outcome))
                    .into());
            }
            out.write_json(&outcome)
        })
    }
}

/// Measures the prompt the next request would carry (system, tools, session prefix, history)
/// with the agent's token counter, as JSON `{"system","tools","prefix","history","total",
/// "anchored","counter","threshold"?,"contextWindow"?}`: `total` is what the pressure gate
/// compares with `threshold` (anchored on the last provider-reported usage when possible);
/// `counter` is `"estimate"`, `"tokenizer"` or `"host"`. Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_LISTENER` (a host counter
/// failed), `LLS_ERR_TOKENIZER`, `LLS_ERR_DISPOSED` (also when the agent is disposed while a
/// host counter's reply is pending), `LLS_ERR_OUT_OF_ORDER`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); a host counter runs on this
/// thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_measure(
    agent: *mut lls_agent,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let report = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.measure_report()?))?;
            out.write_json(&report)
        })
    }
}

/// Statistics of this agent instance as JSON `{"instance","requests","compositions",
/// "compactions","cachedTokens","promptTokens"}`. Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_OUT_OF_ORDER` (from the agent's callback).
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread (waits for a running call); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_stats(
    agent: *const lls_agent,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let report = a.read(|slot| Ok(live_ref(&slot.agent, a.instance)?.stats_report()))?;
            out.write_json(&report)
        })
    }
}

/// The instance's frozen session prefix as a JSON array of messages, or `null` before it was
/// composed (the first request composes it). Free `*out` with `lls_string_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_OUT_OF_ORDER` (from the agent's callback).
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread (waits for a running call); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_prefix(
    agent: *const lls_agent,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let text = a.read(|slot| {
                let ag = live_ref(&slot.agent, a.instance)?;
                Ok(match ag.prefix() {
                    None => "null".to_string(),
                    Some(p) => serde_json::to_string(&*p).map_err(|e| FfiError::from(Error::new(ErrorKind::Internal, e.to_string())))?,
                })
            })?;
            out.write(&text)
        })
    }
}

/// Disposes the agent instance: an open turn ends with `disposed`, its callbacks are released
/// (their `userdata_free` runs), and the session is free for a new instance. Later calls on the
/// agent give `LLS_ERR_DISPOSED`; disposing again is a no-op. The handle stays valid until
/// `lls_agent_free`.
///
/// From inside one of the agent's own callbacks (e.g. a prefix listener) this only marks the
/// agent disposed and interrupts the running operation, which then fails with
/// `LLS_ERR_DISPOSED`, ends its turn `disposed` and completes the disposal before returning.
/// From another thread while a call runs, it interrupts that call (a pending reply's wait ends)
/// and waits for it to return.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_STORAGE` (writing
/// `turn/end` failed; the agent is disposed anyway), `LLS_ERR_OUT_OF_ORDER` (from the session's
/// store callback).
///
/// # Safety
/// `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread at any time, including from the agent's own
/// callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_dispose(agent: *mut lls_agent, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            if !a.on_this_thread() {
                check_not_in_store(a.session.store_key)?;
            }
            a.dispose_now()?;
            Ok(())
        })
    }
}

/// Frees an agent handle, disposing the instance if it is still live (as `lls_agent_dispose`;
/// a storage error there cannot be reported). `lls_agent_free(NULL)` does nothing; so does a
/// handle that is not a live `lls_agent`.
///
/// Thread safety: call once, when no other thread is about to use the handle; from inside one
/// of the agent's own callbacks it disposes as `lls_agent_dispose` does and the handle becomes
/// invalid; never from the session's store callback (ignored there).
#[no_mangle]
pub extern "C" fn lls_agent_free(agent: *mut lls_agent) {
    boundary_value((), || {
        let Ok(a) = handle::lookup::<AgentObject>(agent, "agent") else { return };
        if !a.on_this_thread() && check_not_in_store(a.session.store_key).is_err() {
            return;
        }
        handle::unregister(&a);
        let _ = a.dispose_now();
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{lls_error_code, lls_error_free, lls_error_message};
    use crate::runtime::status::*;
    use crate::session::{lls_session_append, lls_session_events, lls_session_free, lls_session_new_memory};
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
