//! `lls_replay`: a recorded log that answers a host's requests (see `llmsession::replay`).

use crate::explain::session_records;
use crate::runtime::boundary::{boundary, boundary_value};
use crate::runtime::buffers::{self, Out, OutString};
use crate::runtime::error_object::lls_error;
use crate::runtime::handle::{self, Guarded, HandleKind};
use crate::runtime::status::lls_status;
use crate::session::{file_records, lls_session, path_arg, session_arg};
use llmsession::replay::Replay;
use std::ffi::c_char;

/// A recorded session that answers requests: for each request envelope a host hands it, the
/// recorded answer when the envelope is the recorded request, byte for byte, and an error naming
/// the first divergence otherwise. Lets a host test its own agent loop offline and
/// deterministically.
///
/// Thread safety: calls on one replay are serialised internally; it may be used from any
/// thread. Free it once.
pub struct lls_replay {
    _opaque: [u8; 0],
}

/// The payload of an `lls_replay` handle.
#[derive(Debug)]
pub struct ReplayObject {
    replay: Guarded<Replay>,
}

impl HandleKind for ReplayObject {
    type C = lls_replay;
    const NAME: &'static str = "lls_replay";
    const MAGIC: u64 = u64::from_be_bytes(*b"LLSRPY01");
}

fn register(replay: Replay) -> *mut lls_replay {
    handle::register(ReplayObject { replay: Guarded::new(replay) }).0
}

/// Reads the stored JSONL log at `(path, path_len)` (without opening it as a session: nothing
/// is written, no lock is taken) and stores in `*out` a replay of it: every conversation and
/// summarisation request it records, rebuilt from the log, each with its recorded answer. Free
/// it with `lls_replay_free`. The log is checked as opening it checks it (the chained digest of
/// every record, the log rules, contiguous seqs); a log that fails is refused as
/// `lls_verify_file` refuses it, naming the same line. Only a torn last line (a write cut
/// short) is left out.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`path`, `out`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_INVALID_ARGUMENT` (empty path), `LLS_ERR_STORAGE` (cannot read; detail `path`),
/// `LLS_ERR_CORRUPT_LOG` (not a session log, a record that does not match its chained digest,
/// a seq gap or another event the log rules refuse, or damage in an unfinished last turn that
/// opening the log for writing would cut; detail `line`), `LLS_ERR_RECONSTRUCTION` (the log
/// passes those checks but does not rebuild a request it records, so it cannot answer it;
/// detail `seq`, `request`).
///
/// # Safety
/// `path` NULL or `path_len` readable bytes; `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn lls_replay_open_file(
    path: *const c_char,
    path_len: usize,
    out: *mut *mut lls_replay,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let path = path_arg(path, path_len, "path")?;
            let records = file_records(&path)?;
            let replay = Replay::from_records(&records).map_err(|e| e.context(&path))?;
            out.write(register(replay));
            Ok(())
        })
    }
}

/// Stores in `*out` a replay of the session's log as it is now (see `lls_replay_open_file`).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`session`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_RECONSTRUCTION`.
///
/// # Safety
/// `out`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently (it reads a copy of the log).
#[no_mangle]
pub unsafe extern "C" fn lls_replay_new(session: *const lls_session, out: *mut *mut lls_replay, err: *mut *mut lls_error) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = Out::new(out, "out")?;
            let s = session_arg(session, "session")?;
            let replay = Replay::from_records(&session_records(&s.session)?)?;
            out.write(register(replay));
            Ok(())
        })
    }
}

/// Answers a request envelope `(envelope_json, envelope_len)` (the bytes `lls_agent_next_request`
/// returned, or a summariser's `request`) with the recorded answer, stored in `*out` (free it
/// with `lls_string_free`), and moves on to the next recorded request.
///
/// The answer is JSON: for a conversation request `{"purpose":"conversation", "id", "turn",
/// "step", "outcome":"response", "response": {"message", "usage"?, "finishReason"?}}` (pass
/// `response` to `lls_agent_record_response` as it is; `finishReason` is `"max-tokens"` when
/// the recorded turn ended at the output limit), `{..., "outcome":"error", "error", "overflow"}` (pass
/// to `lls_agent_provider_error`) or `{..., "outcome":"cancelled"}`; for a summarisation request
/// `{"purpose":"compaction", "id", "outcome":"summary", "summary": {"text", "usage"?,
/// "provider", "model"}}` (`summary` is the summariser's reply as it is) or `{...,
/// "outcome":"failed", "error"}` (fail the summariser with it). The same summarisation request again right after it was answered (a retry) gets the
/// same answer.
///
/// The envelope is decoded as every JSON input buffer is: text that is not UTF-8 gives
/// `LLS_ERR_INVALID_UTF8` (detail `validUpTo`), text that is not JSON (an empty buffer
/// included) `LLS_ERR_MALFORMED_JSON` (detail `line`, `column`); the replay does not move.
///
/// Errors: `LLS_ERR_NULL_POINTER` (`replay`, `envelope_json`, `out`), `LLS_ERR_INVALID_HANDLE`,
/// `LLS_ERR_INVALID_ARGUMENT` (`envelope_len` beyond `PTRDIFF_MAX`), `LLS_ERR_INVALID_UTF8`,
/// `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_RECONSTRUCTION` when the envelope is not the recorded request: the message names
/// the first divergence as `lls_session_explain` does (detail `replay: true`, `request`, the
/// component: `component` with `field`, `line`, `name`, `index` or `offset`, and
/// `sharedBytes`), or when the recording has no more requests; the replay does not move.
/// `LLS_ERR_POISONED` after a panic.
///
/// # Safety
/// `envelope_json` NULL or `envelope_len` readable bytes; `out`, `out_len`, `err` NULL or
/// valid for writes.
///
/// Thread safety: serialised internally per replay; may be called from any thread (also from
/// a summariser callback).
#[no_mangle]
pub unsafe extern "C" fn lls_replay_answer(
    replay: *const lls_replay,
    envelope_json: *const c_char,
    envelope_len: usize,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let r = handle::lookup::<ReplayObject>(replay, "replay")?;
            let envelope = buffers::input_json_text(envelope_json, envelope_len, "envelope_json")?;
            let answer = r.replay.write()?.answer(envelope.as_bytes())?;
            out.write(&answer.to_string())
        })
    }
}

/// Where the replay stands, as JSON in `*out` (free it with `lls_string_free`):
/// `{"sessionId", "requests", "answered", "next"?}` (`sessionId`: open the host's session with
/// it, since every request carries it; `next`: the id of the request expected next, absent
/// once every request was answered).
///
/// Errors: `LLS_ERR_NULL_POINTER` (`replay`, `out`), `LLS_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `out`, `out_len`, `err` NULL or valid for writes.
///
/// Thread safety: may be called from any thread, concurrently.
#[no_mangle]
pub unsafe extern "C" fn lls_replay_info(
    replay: *const lls_replay,
    out: *mut *mut c_char,
    out_len: *mut usize,
    err: *mut *mut lls_error,
) -> lls_status {
    // SAFETY: pointer validity is the caller's contract, forwarded.
    unsafe {
        boundary(err, || {
            let out = OutString::new(out, out_len, "out")?;
            let r = handle::lookup::<ReplayObject>(replay, "replay")?;
            let info = r.replay.read().info();
            out.write(&info.to_string())
        })
    }
}

/// Frees a replay. `lls_replay_free(NULL)` does nothing; so does a handle that is not a live
/// `lls_replay`.
///
/// Thread safety: call once, from any thread; the handle must not be used afterwards.
#[no_mangle]
pub extern "C" fn lls_replay_free(replay: *mut lls_replay) {
    boundary_value((), || handle::free::<ReplayObject>(replay))
}
