//! The turn/step lifecycle: starting a turn, building requests, recording responses, tool
//! results, injected messages and provider errors, ending the turn.

use super::{agent_arg, live, lls_agent};
use crate::cancel::{cancel_arg, lls_cancel};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OptOut, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::agent::wire::{ProviderErrorInput, ResponseInput};
use llmsession::agent::{ProviderErrorOutcome, ToolResultInput};
use llmsession::error::Error;
use llmsession::log::TurnEndReason;
use llmsession::types::Message;
use std::ffi::c_char;

/// `*out_seq` of `lls_agent_inject` when the message was deferred (not written yet).
///
/// Thread safety: a constant.
pub const LLS_SEQ_NONE: u64 = u64::MAX;

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
