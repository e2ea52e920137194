//! The context window: compacting it, measuring it, the agent's statistics and its session
//! prefix.

use super::{agent_arg, live, live_ref, lls_agent};
use crate::cancel::{cancel_arg, lls_cancel};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::encode;
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::agent::wire::CompactInput;
use llmsession::compaction::Outcome;
use llmsession::error::{Error, ErrorKind};
use std::ffi::c_char;

/// Compacts now, between requests. `opts_json` (may be NULL) is `{"span"?: [start, end],
/// "trigger"?: "manual" | "idle"}`: a surface span (positions in `lls_session_history`,
/// inclusive, not separating a tool call from its result); without it the head region is chosen
/// as the pressure gate would (keeping the policy's retained tail, or the newest message without
/// a policy). A middle span stays correct but forgoes cache reuse. `"trigger": "idle"` (since
/// ABI minor 6, no span) is the compaction the cache clock decided (`lls_agent_cache_clock`
/// answered `compact`): it needs a policy, and fails with `LLS_ERR_OUT_OF_ORDER` unless the
/// clock's last decision since the cache was used is to compact; its `compaction/start` names
/// that decision. The summariser (`lls_agent_set_summariser`) is called on
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
            let input = CompactInput::from_value(v.as_ref())?;
            let cancel = cancel_arg(cancel, "cancel")?;
            let outcome = a.run(Some(&cancel), |slot, op| {
                let agent = live(&mut slot.agent, a.instance)?;
                Ok(if input.idle { agent.compact_idle(op)? } else { agent.compact(input.span, op)? })
            })?;
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
