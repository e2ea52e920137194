//! Creating an agent instance, its options, and the host callbacks it calls (prefix listeners,
//! pre-step listeners, the summariser, the token counter).

use super::{agent_arg, live, lls_agent, AgentObject};
use crate::callbacks::counter::host_counter;
use crate::callbacks::host::{lls_callback_fn, lls_userdata_free_fn, HostCallback};
use crate::callbacks::listeners::{HostPreStep, HostPrefixListener};
use crate::callbacks::summariser::HostSummariser;
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use crate::session::{lls_session, session_arg};
use llmsession::agent::wire::{policy_table, AgentSetup};
use llmsession::agent::{Agent, AgentOptions};
use llmsession::error::Result;
use llmsession::tokens::{TokenCounter, TokenizerCounter};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// Creates an agent instance over `session` and stores it in `*out`. If the session already
/// holds request headers (a stored log, a fork), this is a resumed instance: it recomposes the
/// session prefix and its first request records a `resume` snapshot.
///
/// Without `config` (and without `system` and `tools`) the agent wakes the session: it sends
/// what the session's last request carried (its latest request header; since ABI 2 minor 6).
/// That is how a child agent (`lls_agent_spawn`) is woken in another process: a child keeps its
/// parent's provider, model, system prompt, tools and session prefix, and options that change
/// one are refused (`LLS_ERR_INVALID_INPUT` naming the field).
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
/// agent instance); no `config` for a session that has sent no request is
/// `LLS_ERR_INVALID_INPUT` (`config: is required`).
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
            let mut agent = match setup.options {
                Some(options) => Agent::new(&s.session, options)?,
                None => {
                    let mut a = Agent::wake(&s.session)?;
                    let mut o = a.options().clone();
                    o.check_requests = setup.check_requests;
                    a.set_options(o)?;
                    a
                }
            };
            if let Some(p) = policy {
                agent.set_policies(p)?;
            }
            agent.set_token_counter(counter);
            out.write(AgentObject::register(agent, s));
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

/// Adds a session prefix listener (docs/contract.md §3.3). Listeners run once per agent instance, lazily,
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
