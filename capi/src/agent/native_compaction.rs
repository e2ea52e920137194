//! Provider-native compaction (docs/compaction.md, "Native compaction"): the request of
//! Anthropic's on-demand compaction or OpenAI's `POST /responses/compact`, built for the host to
//! send (now or in the background), and its answer or failure recorded. Since ABI 2 minor 6.

use super::{agent_arg, live, lls_agent};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use std::ffi::c_char;

/// Builds a native compaction request for the agent's route (its renderer, else the config's
/// provider naming a format: `anthropic`, `openai-responses`) over the whole history, and
/// writes its `compaction/start`. `*out` (free it with `lls_string_free`) is `{"format",
/// "endpoint", "betas", "envelope", "body", "digest", "span": [start, end], "seqs",
/// "messageCount", "sharedMessages"}`: POST `body` (a JSON text) to `endpoint`
/// (`/v1/messages` with the `anthropic-beta` flags in `betas`, or `/v1/responses/compact`);
/// `envelope` is the logged request (a JSON text; its SHA-256 is `digest`). The host may send it
/// in the background: conversation requests go on meanwhile, and when the answer is recorded
/// (`lls_agent_native_compaction_record`) its block replaces exactly the `seqs` this request
/// carried. Since ABI 2 minor 6.
///
/// Errors (each changes nothing): `LLS_ERR_NULL_POINTER` (`agent`, `out`),
/// `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_INPUT` (detail `field` = `route`: the route has no
/// native compaction; `config.previous_response_id`), `LLS_ERR_OUT_OF_ORDER` (a request or tool
/// call open, a compaction open, no request routed yet), `LLS_ERR_NOTHING_TO_COMPACT` (an empty
/// history), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_native_compaction_begin(
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
            let req = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.native_compaction_request()?))?;
            out.write_json(&req)
        })
    }
}

/// Records the provider's raw answer `(body, body_len)` to the native compaction request in
/// flight. An answer with the compaction block (Anthropic: `stop_reason: "compaction"` and one
/// `compaction` block with content; OpenAI: a compacted window with one `compaction` item)
/// lands: the block is logged verbatim (`compaction/native`) and a checkpoint carrying it
/// replaces exactly the messages the request held. Any other answer (another stop reason, an
/// error answer, no block) is a failed attempt, logged with why; the history stays whole.
/// `*out` (free it with `lls_string_free`) is `{"outcome": "landed" | "failed", "format",
/// "span": [start, end], "seqs", "error"?, "stopReason"?}`. Since ABI 2 minor 6.
///
/// Errors (each changes nothing; the request stays in flight): `LLS_ERR_NULL_POINTER`
/// (`agent`, `body`, `out`), `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a body of another shape; detail `field`),
/// `LLS_ERR_OUT_OF_ORDER` (none in flight), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE`,
/// `LLS_ERR_POISONED`.
///
/// # Safety
/// `body` NULL or `body_len` readable bytes; `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_native_compaction_record(
    agent: *mut lls_agent,
    body: *const c_char,
    body_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let text = buffers::input_str(body, body_len, "body")?;
            let outcome = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.finish_native_compaction(text)?))?;
            out.write_json(&outcome)
        })
    }
}

/// Reports that the native compaction request in flight failed (a transport error, a timeout,
/// an error status): `(error, error_len)` says why (may be empty). Logged as
/// `compaction/end{failed}`; the history stays whole. `*out` as for
/// `lls_agent_native_compaction_record`. Since ABI 2 minor 6.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `out`; `error` with a non-zero length),
/// `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`, `LLS_ERR_OUT_OF_ORDER` (none in flight),
/// `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `error` NULL or `error_len` readable bytes; `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_native_compaction_fail(
    agent: *mut lls_agent,
    error: *const c_char,
    error_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let a = agent_arg(agent)?;
            let why = buffers::input_str_opt(error, error_len, "error")?.unwrap_or("");
            let outcome = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.fail_native_compaction(why)?))?;
            out.write_json(&outcome)
        })
    }
}
