//! Agent trees through the C ABI: spawning a child agent from an open tool call of the parent's
//! last assistant message (or at a turn boundary), and giving its answer back as the parent's
//! tool result.

use super::{agent_arg, live, lls_agent, AgentObject};
use crate::runtime::boundary::boundary;
use crate::runtime::buffers::{self, Out, OutString};
use crate::runtime::error::FfiError;
use crate::runtime::error_object::lls_error;
use crate::runtime::handle;
use crate::runtime::status::lls_status;
use crate::session::{lls_session, SessionObject};
use llmsession::agent::wire::{finish_input, SpawnInput};
use llmsession::error::{Error, ErrorKind};
use llmsession::log::load::LoadReport;
use llmsession::store::options::{new_session_store, remove_created};
use std::ffi::c_char;

/// Spawns a child agent from `agent` (the parent) and stores the child's session in
/// `*child_session` and its agent in `*child_agent` (free both: `lls_agent_free`, then
/// `lls_session_free`). Since ABI 2 minor 6.
///
/// The child is a session of its own, seeded with every event of the parent, whose header
/// records the parent, the parent's seq (`parent.seedLength`: the parent's `agent/spawn` event
/// naming the child) and the call it answers. Its first request (`lls_agent_next_body`) is the
/// parent's last routed request (config with thinking and effort, cache key, system, tools,
/// session prefix, history, byte for byte in every wire format) extended by the parent's
/// assistant message, one placeholder result for each of the parent's open calls and the
/// directive. The child agent has the parent's renderer, compaction policies, summariser and
/// token counter, and may not change provider, model, system prompt, tools or session prefix.
///
/// `opts_json` is `{"callId"?: string, "directive": message | string, "placeholder"?: string,
/// "id"?: string, "durability"?: ..., "path"?: string, "url"?: string, "cacheTtl"?: "5m" | "1h",
/// "maxTurns"?: n}`: `callId` is an open tool call of the parent's last assistant message (leave
/// it out at a turn boundary, when no call waits); `directive` is the child's task, the last
/// user message of its first request; `placeholder` is the result text of every open call in
/// the child's history (default: a constant, `docs/caching.md`); the child lives in the JSONL
/// file `path`, in the store `url` names (a database: under `id`, default the parent's id, a
/// dot and the call id), or where the parent's store keeps children: beside a JSONL parent
/// (`STEM.CALLID.jsonl`), in the parent's database, in memory for a parent in memory (a host
/// store has no such place: give `path` or `url`); `cacheTtl` is the TTL of the child's
/// Anthropic cache breakpoints (default: the parent's render options); `maxTurns` bounds the
/// child's requests.
///
/// Errors (each changes nothing): `LLS_ERR_NULL_POINTER` (`agent`, `opts_json`,
/// `child_session`, `child_agent`), `LLS_ERR_INVALID_HANDLE`, `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (an unknown option, a directive that is not
/// a user message, a store that already holds a session, both `path` and `url`, no place for
/// the child; detail `field`), `LLS_ERR_OUT_OF_ORDER` (the parent has sent no request, a step
/// or a compaction is open, `callId` is not waiting for its result, or calls wait and no
/// `callId` is given), `LLS_ERR_DISPOSED`, `LLS_ERR_LOCKED`, `LLS_ERR_STORAGE`.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `child_session`, `child_agent`, `err` NULL or
/// valid for writes.
///
/// Thread safety: exclusive per agent (serialised internally); not from the agent's callbacks.
/// The child is independent of the parent: drive it from any thread, in parallel with its
/// siblings.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_spawn(
    agent: *mut lls_agent,
    opts_json: *const c_char,
    opts_len: usize,
    child_session: *mut *mut lls_session,
    child_agent: *mut *mut lls_agent,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out_session = Out::new(child_session, "child_session")?;
            let out_agent = Out::new(child_agent, "child_agent")?;
            let a = agent_arg(agent)?;
            let v = buffers::input_json(opts_json, opts_len, "opts_json")?;
            let SpawnInput { mut options, path, url } = SpawnInput::from_value(&v)?;
            let child = a.run(None, |slot, _| {
                let parent = live(&mut slot.agent, a.instance)?;
                if url.is_some() && options.session.id.is_none() {
                    // A database holds many sessions: the child's default id names its store.
                    options.session.id = Some(parent.default_child_id(options.call_id.as_deref()));
                }
                let store = new_session_store(path.as_deref(), url.as_deref(), &mut options.session)?;
                let created = store.as_ref().and_then(|(_, c)| c.clone());
                Ok(parent.spawn(options, store).inspect_err(|_| remove_created(created.as_deref()))?)
            })?;
            let session = child.session().clone();
            let (sptr, sobj) = handle::register(SessionObject::new(session, LoadReport::default(), 0));
            out_session.write(sptr);
            out_agent.write(AgentObject::register(child, sobj));
            Ok(())
        })
    }
}

/// Finishes the child agent `child`, spawned from `agent`: ends the child's open turn
/// (`completed`; with `"error"`, `error`), then records its answer as the parent's result of the
/// call the child answers, with the child's id (`tool/result` field `child`): the text of the
/// child's last assistant message, or, when its turn did not complete, an error result saying
/// how it ended. Results are logged in call order: a child that finishes before an earlier
/// sibling waits for it (`recorded` 0), and the sibling's finish logs both. A child spawned at a
/// turn boundary answers no call: its answer is returned and nothing is written to the parent.
/// `*out` is `{"child", "callId"?, "answer", "isError", "recorded"}` (free it with
/// `lls_string_free`). The child agent stays usable (to be woken for more) until freed. Since
/// ABI 2 minor 6.
///
/// `opts_json` (may be NULL) is `{"error"?: string}`: the child failed, for this reason.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`agent`, `child`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_UTF8`, `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (`child` is not a
/// child of `agent`'s session), `LLS_ERR_OUT_OF_ORDER` (the child's step is open or a call of it
/// waits, without `error`; the parent's call no longer waits: its turn ended, or the result was
/// recorded), `LLS_ERR_DISPOSED` (the parent), `LLS_ERR_STORAGE`.
///
/// # Safety
/// `opts_json` NULL or `opts_len` readable bytes; `out`, `out_len`, `err` NULL or valid for
/// writes.
///
/// Thread safety: exclusive per agent, for the parent and the child in turn (never both held);
/// children may be finished from their own threads, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_agent_finish_child(
    agent: *mut lls_agent,
    child: *mut lls_agent,
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
            let c = handle::lookup::<AgentObject>(child, "child")?;
            if std::ptr::eq(agent, child) {
                return Err(Error::invalid("child", "is the parent agent itself").into());
            }
            let v = buffers::input_json_opt(opts_json, opts_len, "opts_json")?;
            let failure = finish_input(v.as_ref())?;
            // The child first (its turn ends), then the parent: never both locked at once.
            c.run(None, |slot, _| {
                if let Some(k) = slot.agent.as_mut() {
                    k.conclude(failure.as_deref())?;
                }
                Ok(())
            })?;
            let session = c.session.session.clone();
            let outcome = a.run(None, |slot, _| Ok(live(&mut slot.agent, a.instance)?.finish_child(&session)?))?;
            let text = serde_json::to_string(&outcome).map_err(|e| FfiError::from(Error::new(ErrorKind::Internal, e.to_string())))?;
            out.write(&text)
        })
    }
}
