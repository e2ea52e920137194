//! `lls_stream`: streamed provider responses through the C ABI (the core is
//! `llmsession::stream::StreamAccumulator`).

use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::{self, Out, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, Guarded, HandleKind};
use crate::runtime::status::lls_status;
use llmsession::error::{Error, ErrorKind};
use llmsession::render::Renderer;
use llmsession::stream::StreamAccumulator;
use std::ffi::c_char;

/// One streamed provider response being accumulated: feed it the raw bytes of the event
/// stream as they arrive (`lls_stream_feed`), take the deltas for display
/// (`lls_stream_next_delta`), and end it with `lls_stream_finish`, which gives the same
/// `{"message","usage"?,"finishReason"?}` as `lls_parse_response` on the non-streamed body.
///
/// Thread safety: calls on one stream are serialised internally (a stream is one response:
/// feed it from one place); different streams are independent.
pub struct lls_stream {
    _opaque: [u8; 0],
}

/// The payload of an `lls_stream` handle.
#[derive(Debug)]
pub struct StreamObject {
    pub(super) state: Guarded<StreamAccumulator>,
}

impl HandleKind for StreamObject {
    type C = lls_stream;
    const NAME: &'static str = "lls_stream";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSSTM01");
}

fn internal(e: serde_json::Error) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

/// Creates a stream accumulator in `*out` for one response in `(format, format_len)`:
/// `"openai"` (chat completion chunks, `data: [DONE]` at the end; ask for usage with
/// `"stream_options":{"include_usage":true}`), `"openai-responses"` (Responses API events),
/// `"anthropic"` (Messages events), `"gemini"` (`streamGenerateContent`, with `alt=sse` or as
/// the plain JSON array) or `"gemini-interactions"` (Interactions API events). Free it with `lls_stream_free`.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`format`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_INPUT` (an unknown format; detail `field` = `renderer`).
///
/// # Safety
/// `format` NULL or readable for `format_len` bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_stream_new(
    format: *const c_char,
    format_len: usize,
    out: *mut *mut lls_stream,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let format = Renderer::parse(buffers::input_str(format, format_len, "format")?)?;
            let (ptr, _) = handle::register(StreamObject { state: Guarded::new(StreamAccumulator::new(format)) });
            out.write(ptr);
            Ok(())
        })
    }
}

/// Feeds the next `len` bytes of the event stream, exactly as received: any chunking, a chunk
/// may end inside a line or inside a UTF-8 character. Deltas completed by these bytes become
/// available to `lls_stream_next_delta`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_MALFORMED_JSON` (an event
/// that is not JSON; detail `stream` = `malformed`, `event`, `line`, `column`),
/// `LLS_ERR_INVALID_INPUT` (detail `stream`: `malformed` for an event without what its type
/// needs, an event of another format (detail `looksLike`: the format it looks like), a second
/// chat choice (detail `choice`) or Gemini candidate (detail `candidate`) or text that is not
/// UTF-8, `provider-error` for the provider's error event, with
/// `providerError` (its error object) and `overflow` (whether it reports a context overflow:
/// pass that to `lls_agent_provider_error`)), `LLS_ERR_OUT_OF_ORDER` (after
/// `lls_stream_finish`). Once a feed failed, every later feed fails with the same error.
///
/// # Safety
/// `bytes` NULL or readable for `len` bytes; `err` NULL or valid for writes.
///
/// Thread safety: exclusive per stream (serialised internally).
#[no_mangle]
pub unsafe extern "C" fn lls_stream_feed(
    stream: *mut lls_stream,
    bytes: *const c_char,
    len: usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let s = handle::lookup::<StreamObject>(stream, "stream")?;
            let bytes = buffers::input_bytes(bytes, len, "bytes")?;
            s.state.write()?.feed(bytes)?;
            Ok(())
        })
    }
}

/// Takes the next delta, in stream order, into `*out` (free it with `lls_string_free`), or
/// stores NULL (and 0 in `*out_len`) when every delta so far was taken. A delta is
/// `{"type":"text"|"reasoning"|"tool-call","index","text"?,"id"?,"name"?,"arguments"?}`:
/// `index` counts the blocks of its type in the final message; a tool call's first delta has
/// its `id` and `name`, and `arguments` fragments follow. For display only: record what
/// `lls_stream_finish` returns.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`stream`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per stream (serialised internally).
#[no_mangle]
pub unsafe extern "C" fn lls_stream_next_delta(
    stream: *mut lls_stream,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let s = handle::lookup::<StreamObject>(stream, "stream")?;
            let delta = s.state.write()?.next_delta();
            match delta {
                Some(d) => out.write(&serde_json::to_string(&d).map_err(internal)?),
                None => {
                    out.write_none();
                    Ok(())
                }
            }
        })
    }
}

/// Ends the stream and stores the response in `*out` (free it with `lls_string_free`):
/// `{"message","usage"?,"finishReason"?}`, the same as `lls_parse_response` gives for the
/// non-streamed body, ready for `lls_agent_record_response`. A stream that failed, or ended
/// before its terminal event (a cut connection), is an error, unless `partial` is true: then
/// the message assembled so far (text and reasoning as received, tool calls only with
/// complete arguments) comes with `"finishReason":"incomplete"`; record it only if that is
/// what the host wants. With no content assembled there is no partial message: the stream's
/// error, detail `partial` = `empty`. May be called again; later feeds fail.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`, the stream's own error (see
/// `lls_stream_feed`), `LLS_ERR_INVALID_INPUT` with detail `stream` = `incomplete` (the
/// stream ended early) or a `field` (the assembled response lacks what the format needs).
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per stream (serialised internally).
#[no_mangle]
pub unsafe extern "C" fn lls_stream_finish(
    stream: *mut lls_stream,
    partial: bool,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let s = handle::lookup::<StreamObject>(stream, "stream")?;
            let parsed = s.state.write()?.finish(partial)?;
            out.write(&serde_json::to_string(&parsed).map_err(internal)?)
        })
    }
}

/// Stores in `*out` (free it with `lls_string_free`) the provider body rebuilt from the events
/// so far, in the shape of the non-streamed response (after a complete stream: that response,
/// provider extras such as llama.cpp's `timings` included).
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: serialised with the stream's other calls; may run from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_stream_body(
    stream: *const lls_stream,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let s = handle::lookup::<StreamObject>(stream, "stream")?;
            let body = s.state.read().body();
            out.write(&serde_json::to_string(&body).map_err(internal)?)
        })
    }
}

/// Frees a stream. `lls_stream_free(NULL)` does nothing; so does a handle that is not a live
/// `lls_stream`.
///
/// Thread safety: call once, from any thread; the handle must not be used afterwards.
#[no_mangle]
pub extern "C" fn lls_stream_free(stream: *mut lls_stream) {
    boundary_value((), || handle::free::<StreamObject>(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{lls_error_code, lls_error_detail, lls_error_free};
    use crate::runtime::status::*;
    use std::ffi::CStr;

    fn take(p: *mut c_char) -> String {
        let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
        unsafe { crate::library::lls_string_free(p) };
        s
    }

    #[test]
    fn feed_deltas_finish_and_errors() {
        let mut s: *mut lls_stream = std::ptr::null_mut();
        let mut err: *mut lls_error = std::ptr::null_mut();
        assert_eq!(unsafe { lls_stream_new(c"openai".as_ptr(), 6, &mut s, &mut err) }, LLS_OK);
        let text = "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\u{e9}\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let bytes = text.as_bytes();
        // Cut inside the two-byte character.
        let cut = text.find('\u{e9}').unwrap() + 1;
        for part in [&bytes[..cut], &bytes[cut..]] {
            assert_eq!(unsafe { lls_stream_feed(s, part.as_ptr().cast(), part.len(), &mut err) }, LLS_OK);
        }
        let mut out: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        assert_eq!(unsafe { lls_stream_next_delta(s, &mut out, &mut len, &mut err) }, LLS_OK);
        assert_eq!(take(out), r#"{"type":"text","index":0,"text":"hé"}"#);
        assert_eq!(unsafe { lls_stream_next_delta(s, &mut out, &mut len, &mut err) }, LLS_OK);
        assert!(out.is_null() && len == 0);
        assert_eq!(unsafe { lls_stream_finish(s, false, &mut out, &mut len, &mut err) }, LLS_OK);
        let v: serde_json::Value = serde_json::from_str(&take(out)).unwrap();
        assert_eq!(v["message"]["content"][0]["text"], "hé");
        assert_eq!(v["finishReason"], "stop");
        assert_eq!(unsafe { lls_stream_body(s, &mut out, &mut len, &mut err) }, LLS_OK);
        assert!(take(out).contains("\"object\":\"chat.completion\""));
        assert_eq!(unsafe { lls_stream_feed(s, c"x".as_ptr(), 1, &mut err) }, LLS_ERR_OUT_OF_ORDER);
        lls_error_free(err);
        err = std::ptr::null_mut();
        lls_stream_free(s);
        assert_eq!(unsafe { lls_stream_feed(s, c"x".as_ptr(), 1, &mut err) }, LLS_ERR_INVALID_HANDLE);
        lls_error_free(err);
        err = std::ptr::null_mut();
        assert_eq!(unsafe { lls_stream_new(c"palm".as_ptr(), 4, &mut s, &mut err) }, LLS_ERR_INVALID_INPUT);
        assert_eq!(lls_error_code(err), LLS_ERR_INVALID_INPUT);
        lls_error_free(err);
        err = std::ptr::null_mut();

        // A provider error: the detail says so, and finish fails, even with partial: nothing
        // arrived before it.
        assert_eq!(unsafe { lls_stream_new(c"anthropic".as_ptr(), 9, &mut s, &mut err) }, LLS_OK);
        let bad = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(unsafe { lls_stream_feed(s, bad.as_ptr().cast(), bad.len(), &mut err) }, LLS_ERR_INVALID_INPUT);
        let d: serde_json::Value = serde_json::from_str(unsafe { CStr::from_ptr(lls_error_detail(err)) }.to_str().unwrap()).unwrap();
        assert_eq!(d["stream"], "provider-error");
        assert_eq!(d["providerError"]["type"], "overloaded_error");
        lls_error_free(err);
        err = std::ptr::null_mut();
        assert_eq!(unsafe { lls_stream_finish(s, false, &mut out, &mut len, &mut err) }, LLS_ERR_INVALID_INPUT);
        lls_error_free(err);
        err = std::ptr::null_mut();
        assert_eq!(unsafe { lls_stream_finish(s, true, &mut out, &mut len, &mut err) }, LLS_ERR_INVALID_INPUT);
        let d: serde_json::Value = serde_json::from_str(unsafe { CStr::from_ptr(lls_error_detail(err)) }.to_str().unwrap()).unwrap();
        assert_eq!((d["stream"].as_str(), d["partial"].as_str()), (Some("provider-error"), Some("empty")));
        lls_error_free(err);
        lls_stream_free(s);
        lls_stream_free(std::ptr::null_mut());
    }
}
