//! Provider responses and usage through the C ABI: the mapping helpers hosts use to report
//! what a provider returned.

use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::error::{Error, ErrorKind};
use llmsession::render::{is_context_overflow, parse_response, usage_from_provider, Renderer};
use std::ffi::c_char;

/// Parses a provider response body into `{"message", "usage"?, "finishReason"?}`, stored in
/// `*out` (free it with `lls_string_free`). `message` is the assistant message to pass to
/// `lls_agent_record_response` (with provenance when the response names its model); `usage` is
/// mapped into disjoint buckets (`inputTokens` is the uncached part; `cacheReadTokens` from
/// `prompt_tokens_details.cached_tokens`, DeepSeek's `prompt_cache_hit_tokens`, the Responses
/// API's `input_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens` or Gemini's
/// `cachedContentTokenCount`); `finishReason` is normalised: `"stop"`, `"tool-calls"`,
/// `"max-tokens"`, `"pause-turn"` (the turn is not over: build the next request of the same
/// turn), `"refusal"`, `"context-overflow"`, `"content-filter"` (docs/render.md, "Finish
/// reasons", says what a host does for each), or the provider's own word for a reason the
/// library does not know. It is not logged; `lls_agent_record_body_info` gives it to a host
/// that records raw bodies. An OpenAI refusal is a text block marked `"refusal": true`;
/// Anthropic citations stay on their text block. Blocks that keep provider-native state
/// (signatures, encrypted reasoning, item ids, opaque items, citations) carry `"origin"`: the
/// renderer of that format sends them back verbatim, the others drop them. For a streamed
/// response use `lls_stream_new`.
///
/// `(renderer, renderer_len)`: `"openai"` (OpenAI-compatible chat completions: OpenAI,
/// DeepSeek, llama.cpp, vLLM), `"openai-responses"`, `"anthropic"`, `"gemini"` or
/// `"gemini-interactions"`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`,
/// `LLS_ERR_INVALID_INPUT` (an unknown renderer, or a response without the expected fields;
/// detail `field`; a chat completion with more than one choice, detail `choices`, or a Gemini
/// response with more than one candidate, detail `candidates`: the log keeps one answer per
/// request).
///
/// # Safety
/// `renderer` and `body_json` NULL or readable for their lengths; `out`, `out_len`, `err` NULL or
/// valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
pub unsafe extern "C" fn lls_parse_response(
    renderer: *const c_char,
    renderer_len: usize,
    body_json: *const c_char,
    body_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let renderer = Renderer::parse(buffers::input_str(renderer, renderer_len, "renderer")?)?;
            let body = buffers::input_json(body_json, body_len, "body_json")?;
            let parsed = parse_response(renderer, &body)?;
            let text = serde_json::to_string(&parsed).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            out.write(&text)
        })
    }
}

/// Maps a provider usage object into the library's `Usage` JSON (disjoint buckets), stored in
/// `*out` (free it with `lls_string_free`). `(provider, provider_len)`: `"openai"`,
/// `"llama.cpp"`, `"deepseek"`, `"openai-responses"`, `"anthropic"` or `"gemini"`.
///
/// Errors: `LLS_ERR_NULL_POINTER`, `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`,
/// `LLS_ERR_INVALID_INPUT` (an unknown provider, a missing or mistyped count; detail `field`).
///
/// # Safety
/// `provider` and `usage_json` NULL or readable for their lengths; `out`, `out_len`, `err` NULL
/// or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
pub unsafe extern "C" fn lls_usage_from_provider(
    provider: *const c_char,
    provider_len: usize,
    usage_json: *const c_char,
    usage_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let provider = buffers::input_str(provider, provider_len, "provider")?;
            let usage = buffers::input_json(usage_json, usage_len, "usage_json")?;
            let mapped = usage_from_provider(provider, &usage)?;
            let text = serde_json::to_string(&mapped).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            out.write(&text)
        })
    }
}

/// Whether a provider error (HTTP `status` and the response body) reports that the prompt does
/// not fit in the context window; pass the answer as `overflow` to `lls_agent_provider_error`.
/// Returns false for a NULL or non-UTF-8 body.
///
/// # Safety
/// `body` NULL or readable for `body_len` bytes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
pub unsafe extern "C" fn lls_is_context_overflow(status: u16, body: *const c_char, body_len: usize) -> bool {
    boundary_value(false, || {
        // SAFETY: pointer validity is the caller's contract, forwarded.
        match unsafe { buffers::input_str(body, body_len, "body") } {
            Ok(text) => is_context_overflow(status, text),
            Err(_) => false,
        }
    })
}
