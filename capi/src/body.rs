//! The one-way hot path of an agent through the C ABI: a renderer for the agent
//! (`lls_agent_set_renderer`), the next request as the provider body with a small fixed record
//! of it (`lls_agent_next_body`, `lls_request_info`), the envelope only when asked
//! (`lls_agent_last_envelope`), and the provider's reply recorded from its raw body or a stream
//! (`lls_agent_record_body`, `lls_agent_record_stream`; the `_info` forms also give the finish
//! reason, `lls_recorded_info`). The core is `llmsession::agent` (`body.rs`).

use crate::agent::{agent_arg, live, live_ref, lls_agent};
use crate::cancel::{cancel_arg, lls_cancel};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OptOut, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle;
use crate::runtime::status::lls_status;
use crate::stream::{lls_stream, StreamObject};
use llmsession::agent::Recorded;
use llmsession::error::Error;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{Purpose, RequestInfo};
use std::ffi::c_char;

/// `purpose` of an `lls_request_info`: a conversation step.
///
/// Thread safety: a constant.
pub const LLS_PURPOSE_CONVERSATION: u32 = 0;

/// `purpose` of an `lls_request_info`: a compaction's summarisation request.
///
/// Thread safety: a constant.
pub const LLS_PURPOSE_COMPACTION: u32 = 1;

/// `purpose` of an `lls_request_info`: a keep-warm request of the cache clock
/// (`lls_agent_keepalive_body`). Since ABI minor 6.
///
/// Thread safety: a constant.
pub const LLS_PURPOSE_KEEPALIVE: u32 = 2;

/// A small fixed record of a built request, filled through an out-pointer by
/// `lls_agent_next_body` (plain data: copy it freely, nothing to free).
///
/// Thread safety: plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lls_request_info {
    /// The agent instance (1, 2, ...).
    pub instance: u64,
    /// The turn number.
    pub turn: u64,
    /// The step number within the turn.
    pub step: u64,
    /// The seq of the request's `step/start`.
    pub step_seq: u64,
    /// `LLS_PURPOSE_CONVERSATION` (0), `LLS_PURPOSE_COMPACTION` (1) or `LLS_PURPOSE_KEEPALIVE` (2).
    pub purpose: u32,
    /// How many leading messages are the session prefix.
    pub prefix_len: u32,
    /// Number of messages.
    pub message_count: u32,
    /// How many leading messages the request shares with the previous one (a cache hit).
    pub shared_messages: u32,
    /// The length in bytes of the logged envelope.
    pub envelope_len: usize,
    /// The envelope's digest, `"sha256:"` and 64 lowercase hex digits, NUL-terminated.
    pub digest: [c_char; 72],
}

/// What a recorded provider response was, filled through an out-pointer by
/// `lls_agent_record_body_info` and `lls_agent_record_stream_info` (plain data: copy it freely,
/// nothing to free). Since ABI 2 minor 4.
///
/// Thread safety: plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lls_recorded_info {
    /// The seq of the `assistant/message`.
    pub seq: u64,
    /// How many tool calls the message makes (report each one's result with
    /// `lls_agent_record_tool_result`).
    pub tool_calls: u32,
    /// The response's finish reason, NUL-terminated, normalised as `lls_parse_response` gives
    /// it (`"stop"`, `"tool-calls"`, `"max-tokens"`, `"pause-turn"`, `"refusal"`,
    /// `"context-overflow"`, `"content-filter"`, `"incomplete"`; docs/render.md, "Finish
    /// reasons"), a reason the library does not know in the provider's own spelling (cut at a
    /// character boundary to 63 bytes), or empty when the response gives none. It is not logged.
    /// `"pause-turn"`: the turn is not over, build the next request of the same turn.
    pub finish_reason: [c_char; 64],
}

impl lls_recorded_info {
    fn of(r: &Recorded) -> lls_recorded_info {
        let mut finish_reason = [0 as c_char; 64];
        if let Some(f) = &r.finish_reason {
            // 63 bytes at most, and the NUL.
            let mut end = f.len().min(63);
            while !f.is_char_boundary(end) {
                end -= 1;
            }
            for (d, b) in finish_reason.iter_mut().zip(f[..end].bytes()) {
                *d = b as c_char;
            }
        }
        lls_recorded_info { seq: r.seq, tool_calls: count(r.tool_calls), finish_reason }
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl lls_request_info {
    pub(crate) fn of(r: &RequestInfo) -> lls_request_info {
        let mut digest = [0 as c_char; 72];
        for (d, b) in digest.iter_mut().zip(r.digest.bytes().take(71)) {
            *d = b as c_char;
        }
        lls_request_info {
            instance: r.instance,
            turn: r.turn,
            step: r.step,
            step_seq: r.step_seq,
            purpose: match r.purpose {
                Purpose::Conversation => LLS_PURPOSE_CONVERSATION,
                // (A native compaction request is never a conversation step's: it is a compaction.)
                Purpose::Compaction | Purpose::NativeCompaction => LLS_PURPOSE_COMPACTION,
                Purpose::Keepalive => LLS_PURPOSE_KEEPALIVE,
            },
            prefix_len: count(r.prefix_len),
            message_count: count(r.message_count),
            shared_messages: count(r.shared_messages),
            envelope_len: r.envelope_len,
            digest,
        }
    }
}

/// Gives the agent a provider body format for `lls_agent_next_body` and
/// `lls_agent_record_body`: `(renderer, renderer_len)` is `"openai"`, `"openai-responses"`,
/// `"anthropic"`, `"gemini"` or `"gemini-interactions"` (as for `lls_render`), and `(options_json, options_len)` (NULL:
/// the defaults) the render options as for `lls_render_with_options`, except `prefixLen`, which
/// is the agent's own (its session prefix) and may not be given. From then on the rendered form
/// of each history message is computed once and reused by every body. Setting a renderer again
/// replaces the previous one.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `renderer`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown renderer,
/// an unknown or mistyped option, `prefixLen`; detail `field`), `LLS_ERR_DISPOSED`,
/// `LLS_ERR_OUT_OF_ORDER` (from the agent's own callback), `LLS_ERR_POISONED`. A failed call
/// leaves the agent's renderer as it was.
///
/// # Safety
/// `renderer` and `options_json` NULL or readable for their lengths; `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_set_renderer(
    agent: *mut lls_agent,
    renderer: *const c_char,
    renderer_len: usize,
    options_json: *const c_char,
    options_len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let a = agent_arg(agent)?;
            let renderer = Renderer::parse(buffers::input_str(renderer, renderer_len, "renderer")?)?;
            let options = match buffers::input_json_opt(options_json, options_len, "options_json")? {
                None => RenderOptions::default(),
                Some(v) => {
                    if v.get("prefixLen").is_some() {
                        return Err(Error::invalid(
                            "options.prefixLen",
                            "is the agent's own (the length of its session prefix); leave it out",
                        )
                        .into());
                    }
                    RenderOptions::from_value(&v)?
                }
            };
            a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.set_renderer(renderer, options)?))
        })
    }
}

/// Builds the next request of the open turn exactly as `lls_agent_next_request` does (prefix
/// composition, pre-step listeners, the pressure gate, the header, `step/start` with the
/// envelope's digest: the same log, verified the same way) and hands over the provider body
/// ready to POST in `(*body, *body_len)`: byte for byte what `lls_render_with_options` gives for
/// the request's envelope with the agent's renderer and options (and `prefixLen` the session
/// prefix's length). Free it with `lls_string_free`. A body of 4 KiB or more is not a copy: it
/// is the buffer the agent's renderer keeps and renders the next body from, shared with the
/// host until `lls_string_free` (it stays valid after the agent is freed). Read it; never write
/// into it. `*info` (may be NULL) receives what the request is, with no JSON to parse; the
/// envelope itself is built only when asked (`lls_agent_last_envelope`).
///
/// `cancel` (may be NULL), listeners, disposal, storage errors: as for
/// `lls_agent_next_request`. A body the renderer cannot produce (a block the provider has no
/// form for) fails with `LLS_ERR_INVALID_INPUT` before anything is written.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `body`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_OUT_OF_ORDER` (no renderer set, no open turn, a request already open, a tool result
/// missing), `LLS_ERR_INVALID_INPUT`, `LLS_ERR_CANCELLED`, `LLS_ERR_DISPOSED`,
/// `LLS_ERR_LISTENER`, `LLS_ERR_RECONSTRUCTION` (check mode), `LLS_ERR_STORAGE`,
/// `LLS_ERR_POISONED`.
///
/// # Safety
/// `body`, `body_len`, `info`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); callbacks run on this thread;
/// `cancel` may be tripped from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_next_body(
    agent: *mut lls_agent,
    cancel: *const lls_cancel,
    body: *mut *mut c_char,
    body_len: *mut usize,
    info: *mut lls_request_info,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(body, body_len, "body")?;
            let info_out = OptOut::new(info);
            let a = agent_arg(agent)?;
            let cancel = cancel_arg(cancel, "cancel")?;
            let built = a.run(Some(&cancel), |slot, op| {
                let built = live(&mut slot.agent, a.instance)?.next_body(op)?;
                slot.last_request = Some(built.info.clone());
                Ok(built)
            })?;
            a.refuse_if_disposed_while_building()?;
            info_out.write(lls_request_info::of(&built.info));
            out.write_shared(&built.json)
        })
    }
}

/// Stores in `*out` (free it with `lls_string_free`) the envelope of the last request this
/// agent built (`lls_agent_next_body` or `lls_agent_next_request`): the logged truth its body
/// was rendered from, whose SHA-256 `step/start` records. It is written on demand (from the
/// history, or from the log when a compaction rewrote the history since).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_OUT_OF_ORDER` (no request built yet, or from the agent's own callback),
/// `LLS_ERR_DISPOSED`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread (waits for a running call); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_last_envelope(
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
            let json = a.read(|slot| Ok(live_ref(&slot.agent, a.instance)?.last_envelope()?))?;
            out.write_owned(json)
        })
    }
}

fn write_recorded(r: Recorded, out_seq: OptOut<u64>, out_tool_calls: OptOut<u32>) {
    out_seq.write(r.seq);
    out_tool_calls.write(count(r.tool_calls));
}

/// The body of `lls_agent_record_body` and `lls_agent_record_body_info`.
///
/// # Safety
/// As for `lls_agent_record_body`.
unsafe fn record_body(agent: *mut lls_agent, body: *const c_char, body_len: usize) -> Result<Recorded, FfiError> {
    let a = agent_arg(agent)?;
    // SAFETY: pointer validity is the caller's contract, forwarded.
    let text = unsafe { buffers::input_str(body, body_len, "body") }?;
    a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.record_body(text)?))
}

/// The body of `lls_agent_record_stream` and `lls_agent_record_stream_info`.
///
/// # Safety
/// As for `lls_agent_record_stream`.
unsafe fn record_stream(agent: *mut lls_agent, stream: *mut lls_stream, partial: bool) -> Result<Recorded, FfiError> {
    let a = agent_arg(agent)?;
    let s = handle::lookup::<StreamObject>(stream, "stream")?;
    a.run(None, |slot, _| {
        let mut acc = s.state.write()?;
        Ok::<_, FfiError>(live(&mut slot.agent, a.instance)?.record_stream(&mut acc, partial)?)
    })
}

/// Records the provider's raw, non-streamed response body `(body, body_len)` for the open
/// step: parsed once with the format of the agent's renderer (as `lls_parse_response` parses
/// it), validated once, and logged as `lls_agent_record_response` logs a message
/// (`assistant/message` with the usage, one `tool/call` per tool call, `step/end`).
/// `*out_seq` (may be NULL) receives the seq of the `assistant/message`, `*out_tool_calls` (may
/// be NULL) how many tool calls it made (report each one's result with
/// `lls_agent_record_tool_result`). The response's finish reason is not logged:
/// `lls_agent_record_body_info` gives it too (since minor 4). Every error changes nothing.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `body`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a body of another
/// format, or without a message; detail `field`), `LLS_ERR_OUT_OF_ORDER` (no renderer set, no
/// open step), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE` (nothing was written: the same call can be
/// retried), `LLS_ERR_POISONED`.
///
/// # Safety
/// `body` NULL or `body_len` readable bytes; `out_seq`, `out_tool_calls`, `err` NULL or valid
/// for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_body(
    agent: *mut lls_agent,
    body: *const c_char,
    body_len: usize,
    out_seq: *mut u64,
    out_tool_calls: *mut u32,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let (out_seq, out_tool_calls) = (OptOut::new(out_seq), OptOut::new(out_tool_calls));
            let r = record_body(agent, body, body_len)?;
            write_recorded(r, out_seq, out_tool_calls);
            Ok(())
        })
    }
}

/// `lls_agent_record_body`, with what was recorded in `*out` (may be NULL): the seq of the
/// `assistant/message`, how many tool calls it made and the response's finish reason (see
/// `lls_recorded_info`), which the log does not keep: a host that records raw bodies learns
/// from it what to do next (`"pause-turn"`: build the next request of the same turn). The
/// same log, errors and rules as `lls_agent_record_body`. Since ABI 2 minor 4.
///
/// # Safety
/// `body` NULL or `body_len` readable bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_body_info(
    agent: *mut lls_agent,
    body: *const c_char,
    body_len: usize,
    out: *mut lls_recorded_info,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OptOut::new(out);
            let r = record_body(agent, body, body_len)?;
            out.write(lls_recorded_info::of(&r));
            Ok(())
        })
    }
}

/// Records the response a stream accumulated (`lls_stream`), at its end, for the open step:
/// the stream is finished as `lls_stream_finish(stream, partial, ...)` finishes it, and the
/// response is logged as `lls_agent_record_body` logs a body. The stream's format must be the
/// agent's renderer when one is set. `*out_seq` and `*out_tool_calls` (may be NULL) as for
/// `lls_agent_record_body`; `lls_agent_record_stream_info` gives the finish reason too (since
/// minor 4). Every error changes nothing in the session.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `stream`), `LLS_ERR_INVALID_HANDLE`, the stream's
/// own errors (as `lls_stream_finish`: detail `stream`), `LLS_ERR_INVALID_INPUT` (a stream of
/// another format than the renderer; detail `field` = `stream`), `LLS_ERR_OUT_OF_ORDER` (no
/// open step), `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE`, `LLS_ERR_POISONED`.
///
/// # Safety
/// `out_seq`, `out_tool_calls`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent and per stream (both serialised internally); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_stream(
    agent: *mut lls_agent,
    stream: *mut lls_stream,
    partial: bool,
    out_seq: *mut u64,
    out_tool_calls: *mut u32,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let (out_seq, out_tool_calls) = (OptOut::new(out_seq), OptOut::new(out_tool_calls));
            let r = record_stream(agent, stream, partial)?;
            write_recorded(r, out_seq, out_tool_calls);
            Ok(())
        })
    }
}

/// `lls_agent_record_stream`, with what was recorded in `*out` (may be NULL), as
/// `lls_agent_record_body_info` gives it: the finish reason is the stream's (`"incomplete"`
/// for a cut stream recorded with `partial`). The same log, errors and rules as
/// `lls_agent_record_stream`. Since ABI 2 minor 4.
///
/// # Safety
/// `out`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent and per stream (both serialised internally); not from the
/// agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_record_stream_info(
    agent: *mut lls_agent,
    stream: *mut lls_stream,
    partial: bool,
    out: *mut lls_recorded_info,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OptOut::new(out);
            let r = record_stream(agent, stream, partial)?;
            out.write(lls_recorded_info::of(&r));
            Ok(())
        })
    }
}
