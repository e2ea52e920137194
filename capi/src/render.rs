//! Provider body renderers through the C ABI.

use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::error::{Error, ErrorKind};
use llmsession::render::{RenderOptions, Renderer};
use std::ffi::c_char;

/// Renders a request envelope (from `lls_agent_next_request`, or the `request` a summariser
/// receives) into a provider's JSON body, stored in `*out` (free it with `lls_string_free`),
/// with the default render options (`lls_render_with_options` takes others): the OpenAI body's
/// `prompt_cache_key` is the envelope's `sessionId`, the Anthropic breakpoints have no `ttl`.
///
/// `(renderer, renderer_len)` names the format: `"openai"` (OpenAI-compatible chat completions:
/// OpenAI, DeepSeek, llama.cpp, vLLM, ...), `"openai-responses"` (the OpenAI Responses API,
/// stateless with `store: false`), `"anthropic"` (Anthropic Messages, with cache breakpoints at
/// the end of the system prompt, of the session prefix and of the history), `"gemini"` (Gemini
/// `generateContent`; the model goes in the URL, not the body) or `"gemini-interactions"` (the
/// Gemini Interactions API, stateless with `store: false`). Blocks carrying another
/// provider's native state (`origin`) are dropped, never sent to the wrong provider. `prefix_len`
/// is how many leading envelope messages are the session prefix (`prefixLen` of
/// `lls_agent_request_info`, or of the summariser's input); it must not exceed the number of
/// messages. The rendering
/// preserves the prefix property: a request that extends the previous one renders to a body
/// whose messages (`input`, `contents`) extend the previous body's.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`renderer`, `envelope_json`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown renderer, an invalid envelope;
/// detail `field`), `LLS_ERR_INVALID_ARGUMENT` (`prefix_len` too large).
///
/// # Safety
/// `renderer` and `envelope_json` NULL or readable for their lengths; `out`, `out_len`, `err`
/// NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
pub unsafe extern "C" fn lls_render(
    renderer: *const c_char,
    renderer_len: usize,
    envelope_json: *const c_char,
    envelope_len: usize,
    prefix_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let name = buffers::input_str(renderer, renderer_len, "renderer")?;
            let renderer = Renderer::parse(name)?;
            let envelope = buffers::input_json(envelope_json, envelope_len, "envelope_json")?;
            let messages = envelope.get("messages").and_then(|m| m.as_array()).map(Vec::len);
            if let Some(n) = messages {
                if prefix_len > n {
                    return Err(super::FfiError::invalid_argument(
                        "prefix_len",
                        format!("{prefix_len} is more than the envelope's {n} messages"),
                    ));
                }
            }
            let body = renderer.render(&envelope, &RenderOptions::with_prefix_len(prefix_len))?;
            let text = serde_json::to_string(&body).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            out.write(&text)
        })
    }
}

/// Renders a request envelope into a provider's JSON body as `lls_render` does, with render
/// options given as JSON, stored in `*out` (free it with `lls_string_free`).
///
/// `(options_json, options_len)` (may be NULL for the defaults) is `{"prefixLen"?: n,
/// "promptCacheKey"?: true | false | "key", "promptCacheRetention"?: "...", "cacheTtl"?: "5m" |
/// "1h", "promptCacheOptions"?: {"mode"?: "implicit" | "explicit", "ttl"?: "..."},
/// "promptCacheBreakpoints"?: true | false}`:
/// - `prefixLen` (default 0): how many leading envelope messages are the session prefix, as
///   `prefix_len` of `lls_render`;
/// - `promptCacheKey` (OpenAI-compatible bodies; default `true`): `true` sends the envelope's
///   `sessionId` as `prompt_cache_key` (a `prompt_cache_key` config field takes its place),
///   `false` sends none, a string sends that key;
/// - `promptCacheRetention` (OpenAI-compatible): sent verbatim as `prompt_cache_retention`
///   (OpenAI: `"in_memory"` or `"24h"`);
/// - `cacheTtl` (Anthropic): the `ttl` of every cache breakpoint the renderer places;
/// - `promptCacheOptions` (OpenAI, both formats): sent as `prompt_cache_options`; its `ttl`
///   with `promptCacheRetention` is an error (OpenAI rejects both);
/// - `promptCacheBreakpoints` (OpenAI, both formats; default `false`): `prompt_cache_breakpoint`
///   marks where the system prompt, the session prefix and the history end (mode `"explicit"`
///   needs them). The other renderers refuse both.
///
/// An unknown key is an error (a misspelt option is never ignored). An explicit key or
/// retention and a config field of the same name collide (`LLS_ERR_INVALID_INPUT`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`renderer`, `envelope_json`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown renderer, an invalid envelope,
/// an unknown or mistyped option; detail `field`), `LLS_ERR_INVALID_ARGUMENT` (`prefixLen`
/// larger than the envelope's message count).
///
/// # Safety
/// `renderer`, `envelope_json` and `options_json` NULL or readable for their lengths; `out`,
/// `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it holds no state).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lls_render_with_options(
    renderer: *const c_char,
    renderer_len: usize,
    envelope_json: *const c_char,
    envelope_len: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let name = buffers::input_str(renderer, renderer_len, "renderer")?;
            let renderer = Renderer::parse(name)?;
            let envelope = buffers::input_json(envelope_json, envelope_len, "envelope_json")?;
            let options = match buffers::input_json_opt(options_json, options_len, "options_json")? {
                None => RenderOptions::default(),
                Some(v) => RenderOptions::from_value(&v)?,
            };
            let messages = envelope.get("messages").and_then(|m| m.as_array()).map(Vec::len);
            if let Some(n) = messages {
                if options.prefix_len > n {
                    return Err(super::FfiError::invalid_argument(
                        "options_json",
                        format!("prefixLen {} is more than the envelope's {n} messages", options.prefix_len),
                    ));
                }
            }
            let body = renderer.render(&envelope, &options)?;
            let text = serde_json::to_string(&body).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            out.write(&text)
        })
    }
}
