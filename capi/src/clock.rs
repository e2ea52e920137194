//! The cache clock of an agent through the C ABI (docs/caching.md, "The cache clock"): "what
//! now?" for a given time (`lls_agent_cache_clock`) and the keep-warm request it may decide
//! (`lls_agent_keepalive_body`, answered through `lls_agent_record_body`,
//! `lls_agent_record_stream` or `lls_agent_provider_error`). An idle compaction is
//! `lls_agent_compact` with `{"trigger": "idle"}`. The core is `llmsession::clock`.

use crate::agent::{agent_arg, live, lls_agent};
use crate::body::lls_request_info;
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, OptOut, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::status::lls_status;
use llmsession::clock::ClockOptions;
use std::ffi::c_char;

/// Asks the agent's cache clock what to do now, from the session's log alone, the host's
/// prices and its return-time model. `(opts_json, opts_len)` (NULL: every default) is
/// `{"now"?: ms since the epoch (default: the clock's time; tests give their own), "prices"?:
/// {...} (as for `lls_session_explain`; without a price for the model nothing is decided),
/// "cacheRules"?: {...} (TTL overrides, as for `lls_session_explain`), "returnModel"?:
/// {"gapsMs"?, "weights"?, "neverReturns"?, "learn"?, "priorWeight"?}, "marginMs"?: ms before
/// expiry at which the clock acts (default 10000, raised to the session's longest keep-warm round
/// trip), "tierBilling"?: "written" | "prefix",
/// "compaction"?: {"enabled"?, "minContextTokens"?, "summaryRatio"?}, "record"?: bool (default
/// true), "keepWarmBudget"?: the most one pause may stake in keep-warm requests, as a share of
/// what the session's requests have cost so far (default 0.05), "keepWarmTiers"?: bool (default
/// true: a keep-warm request may be sent at a longer tier than the one in force; the decision
/// `keep-warm` then names it in `tier`, and `lls_agent_keepalive_body` renders it so)}`.
///
/// On success `*out` (free it with `lls_string_free`) is `{"decision": "none" | "compact" |
/// "keep-warm" | "let-expire" | "tier", "tier"?, "reason", "at", "warmUntil"?,
/// "nextDecisionAt"?, "returnProbability"?, "options": [{"option", "tier"?, "expectedCost",
/// "expectedPings"?}], "breakEven": {...}, "returns", "state": {"provider", "model",
/// "lastRequestAt"?, "touchedAt"?, "tier", "ttlMs"?, "figures"?, "compacted"}, "recorded"?}`:
/// `keep-warm` → send `lls_agent_keepalive_body`; `compact` → `lls_agent_compact` with
/// `{"trigger": "idle"}`; `tier` → write the next request at that tier (the Anthropic render
/// option `cacheTtl`); ask again at `nextDecisionAt`. An action decision is recorded in the log
/// as `clock/decision` once per use of the cache (`recorded`: its seq). No callback is called.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a bad option; the
/// message and the detail's `field` name it, e.g. `options.marginMs`, `prices.anthropic.input`),
/// `LLS_ERR_DISPOSED`, `LLS_ERR_OUT_OF_ORDER` (from the agent's own callback),
/// `LLS_ERR_STORAGE`, `LLS_ERR_CONFLICT`, `LLS_ERR_READ_ONLY` (recording the decision; nothing
/// changed), `LLS_ERR_POISONED`. Since ABI minor 6.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out`, `out_len`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_cache_clock(
    agent: *mut lls_agent,
    opts_json: *const c_char,
    opts_len: usize,
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
            let options = ClockOptions::from_value(v.as_ref())?;
            let report = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.cache_clock(&options)?))?;
            out.write_json(&report)
        })
    }
}

/// Builds the keep-warm request of the cache clock as the provider body ready to POST, in
/// `(*body, *body_len)` (free it with `lls_string_free`; read it, never write into it, as a body
/// from `lls_agent_next_body`): the last conversation request again,
/// every cacheable byte the same (cache marks included), its output limit at the smallest the
/// provider allows (1; 16 for `openai-responses`; an Anthropic thinking budget + 1), with
/// `purpose: "keepalive"` in its logged envelope; when the clock's last recorded decision was
/// `keep-warm` at a longer `tier`, its cache marks carry that tier's TTL (Anthropic `"ttl":
/// "1h"`). It is logged as `clock/keepalive` (its digest, and the tier when it names one:
/// `verify` rebuilds it). Send it, then record its answer as for a conversation
/// request: `lls_agent_record_body`, `lls_agent_record_stream` or `lls_agent_provider_error`
/// (it goes to `clock/keepalive-end`, never into the history; the record's `tool_calls` is 0).
/// `*info` (may be NULL) receives what the request is (`purpose` `LLS_PURPOSE_KEEPALIVE`,
/// `step_seq` the seq of its `clock/keepalive`).
///
/// Errors (each changes nothing): `LLS_ERR_NULL_POINTER` (`agent`, `body`),
/// `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_OUT_OF_ORDER` (no renderer set, no request sent yet, a
/// request or a compaction open, or a compaction rewrote the history since the last request:
/// nothing worth keeping warm), `LLS_ERR_INVALID_INPUT` (the renderer cannot render it),
/// `LLS_ERR_DISPOSED`, `LLS_ERR_STORAGE`, `LLS_ERR_CONFLICT`, `LLS_ERR_READ_ONLY`,
/// `LLS_ERR_POISONED`. Since ABI minor 6.
///
/// # Safety
/// `body`, `body_len`, `info`, `err` NULL or valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_keepalive_body(
    agent: *mut lls_agent,
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
            let built = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.keepalive_body()?))?;
            info_out.write(lls_request_info::of(&built.info));
            out.write_shared(&built.json)
        })
    }
}
