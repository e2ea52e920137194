//! The C ABI's conventions where an entry point used to disagree with docs/abi.md (issue #26,
//! finding 6), through the entry points a host calls:
//!
//! - `lls_replay_answer` decodes its envelope as every JSON input buffer is decoded ("Buffers"):
//!   an empty buffer or text that is not JSON gives `LLS_ERR_MALFORMED_JSON`, bytes that are not
//!   UTF-8 `LLS_ERR_INVALID_UTF8`, and the replay does not move;
//! - every handle type has its own magic ("Handles"), and an `lls_reply` passed where an
//!   `lls_replay` is expected, or the other way round, gives `LLS_ERR_INVALID_HANDLE`;
//! - session ids follow one rule in every store: not empty, at most 1,024 bytes, no C0 control
//!   character or DEL;
//! - a lone surrogate escape (`"\ud800"`) in an appended event is `LLS_ERR_MALFORMED_JSON`, and
//!   nothing is appended.

use llmsession_capi::agent::*;
use llmsession_capi::callbacks::reply::{lls_reply, ReplyObject};
use llmsession_capi::cancel::CancelObject;
use llmsession_capi::replay::*;
use llmsession_capi::reply::{lls_callback_invoke, lls_reply_set_json};
use llmsession_capi::runtime::error_object::ErrorObject;
use llmsession_capi::runtime::handle::HandleKind;
use llmsession_capi::runtime::status::*;
use llmsession_capi::session::*;
use llmsession_capi::stream::StreamObject;
use llmsession_capi::tools::ToolCallsObject;
use serde_json::{json, Value};
use std::ffi::{c_char, c_void};
use std::ptr::{null, null_mut};

mod support {
    pub mod abi;
}
use support::abi::{call, call_out, Failure};

fn memory_session(opts: &str) -> Result<*mut lls_session, Failure> {
    let mut s: *mut lls_session = null_mut();
    call(|e| unsafe { lls_session_new_memory(opts.as_ptr().cast(), opts.len(), &mut s, e) })?;
    Ok(s)
}

/// A memory session holding one finished turn (one conversation request and its answer).
fn one_turn() -> (*mut lls_session, String) {
    let s = memory_session(r#"{"id":"abi-rules"}"#).unwrap();
    let opts = json!({"config": {"provider": "p", "model": "m"}, "system": "Be brief."}).to_string();
    let mut a: *mut lls_agent = null_mut();
    call(|e| unsafe { lls_agent_new(s, opts.as_ptr().cast(), opts.len(), &mut a, e) }).unwrap();
    let m = json!({"role": "user", "content": [{"type": "text", "text": "hello"}]}).to_string();
    call(|e| unsafe { lls_agent_start_turn(a, m.as_ptr().cast(), m.len(), null_mut(), e) }).unwrap();
    let envelope = call_out(|o, l, e| unsafe { lls_agent_next_request(a, null(), o, l, e) }).unwrap();
    let r = json!({"message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}).to_string();
    call(|e| unsafe { lls_agent_record_response(a, r.as_ptr().cast(), r.len(), null_mut(), e) }).unwrap();
    call(|e| unsafe { lls_agent_end_turn(a, "completed".as_ptr().cast(), 9, e) }).unwrap();
    lls_agent_free(a);
    (s, envelope)
}

fn answer(r: *const lls_replay, envelope: &[u8]) -> Result<Value, Failure> {
    call_out(|o, l, e| unsafe { lls_replay_answer(r, envelope.as_ptr().cast(), envelope.len(), o, l, e) })
        .map(|t| serde_json::from_str(&t).unwrap())
}

fn answered(r: *const lls_replay) -> u64 {
    let info: Value = serde_json::from_str(&call_out(|o, l, e| unsafe { lls_replay_info(r, o, l, e) }).unwrap()).unwrap();
    info["answered"].as_u64().unwrap()
}

#[test]
fn replay_answer_decodes_its_envelope_as_every_json_buffer() {
    let (s, envelope) = one_turn();
    let mut r: *mut lls_replay = null_mut();
    call(|e| unsafe { lls_replay_new(s, &mut r, e) }).unwrap();

    // Empty, not JSON, truncated JSON: MALFORMED_JSON with line and column, naming the argument.
    for bad in [&b""[..], b"not json", b"{\"purpose\":", b"   "] {
        let f = answer(r, bad).unwrap_err();
        assert_eq!(f.status, LLS_ERR_MALFORMED_JSON, "{bad:?}: {}", f.message);
        assert_eq!(f.detail["kind"], "malformed-json");
        assert_eq!(f.detail["argument"], "envelope_json", "{}", f.detail);
        assert!(f.detail["line"].is_u64() && f.detail["column"].is_u64(), "{}", f.detail);
        assert!(f.message.contains("envelope_json"), "{}", f.message);
    }
    // Not UTF-8: INVALID_UTF8 with validUpTo.
    for (bad, valid_up_to) in [(&b"\xff"[..], 0u64), (b"{\"a\":\"\xc3\x28\"}", 6)] {
        let f = answer(r, bad).unwrap_err();
        assert_eq!(f.status, LLS_ERR_INVALID_UTF8, "{bad:?}: {}", f.message);
        assert_eq!(f.detail["argument"], "envelope_json");
        assert_eq!(f.detail["validUpTo"], valid_up_to);
    }
    // NULL: NULL_POINTER, even with a length of 0.
    let f = call_out(|o, l, e| unsafe { lls_replay_answer(r, null(), 0, o, l, e) }).unwrap_err();
    assert_eq!(f.status, LLS_ERR_NULL_POINTER);
    assert_eq!(f.detail["argument"], "envelope_json");
    // JSON that is not the recorded request is still the replay's own refusal.
    let f = answer(r, b"{}").unwrap_err();
    assert_eq!(f.status, LLS_ERR_RECONSTRUCTION, "{}", f.message);
    assert_eq!(f.detail["replay"], true);
    // None of them moved the replay: the recorded request is answered next.
    assert_eq!(answered(r), 0);
    let a = answer(r, envelope.as_bytes()).unwrap();
    assert_eq!(a["outcome"], "response", "{a}");
    assert_eq!(answered(r), 1);

    lls_replay_free(r);
    lls_session_free(s);
}

/// A callback that passes its reply where an `lls_replay` is expected, then answers it.
unsafe extern "C" fn misuse_reply(userdata: *mut c_void, _in: *const c_char, _len: usize, reply: *mut lls_reply) -> i32 {
    let seen = unsafe { &mut *userdata.cast::<Vec<(lls_status, Value)>>() };
    let e = b"{}";
    let r = call_out(|o, l, err| unsafe { lls_replay_answer(reply.cast(), e.as_ptr().cast(), e.len(), o, l, err) }).unwrap_err();
    seen.push((r.status, r.detail));
    let r = call_out(|o, l, err| unsafe { lls_replay_info(reply.cast(), o, l, err) }).unwrap_err();
    seen.push((r.status, r.detail));
    lls_replay_free(reply.cast()); // not a live lls_replay: does nothing
    call(|err| unsafe { lls_reply_set_json(reply, b"{\"ok\":true}".as_ptr().cast(), 11, err) }).unwrap();
    LLS_CB_OK
}

#[test]
fn reply_and_replay_handles_are_not_interchangeable() {
    // Each handle type has its own magic.
    let magics = [
        (ErrorObject::NAME, ErrorObject::MAGIC),
        (CancelObject::NAME, CancelObject::MAGIC),
        (ReplyObject::NAME, ReplyObject::MAGIC),
        (ReplayObject::NAME, ReplayObject::MAGIC),
        (SessionObject::NAME, SessionObject::MAGIC),
        (AgentObject::NAME, AgentObject::MAGIC),
        (StreamObject::NAME, StreamObject::MAGIC),
        (ToolCallsObject::NAME, ToolCallsObject::MAGIC),
    ];
    for (i, (a, ma)) in magics.iter().enumerate() {
        assert!(ma.to_be_bytes().starts_with(b"LLS"), "{a}");
        for (b, mb) in &magics[i + 1..] {
            assert_ne!(ma, mb, "{a} and {b} share a magic");
        }
    }
    assert_eq!(&ReplyObject::MAGIC.to_be_bytes(), b"LLSRPL01");
    assert_eq!(&ReplayObject::MAGIC.to_be_bytes(), b"LLSRPY01");

    // An lls_reply where an lls_replay is expected.
    let mut seen: Vec<(lls_status, Value)> = Vec::new();
    let input = b"{}";
    let out = call_out(|o, l, e| unsafe {
        lls_callback_invoke(
            Some(misuse_reply),
            (&mut seen as *mut Vec<(lls_status, Value)>).cast(),
            None,
            input.as_ptr().cast(),
            input.len(),
            null(),
            o,
            l,
            e,
        )
    })
    .unwrap();
    assert_eq!(out, "{\"ok\":true}");
    assert_eq!(seen.len(), 2);
    for (status, detail) in &seen {
        assert_eq!(*status, LLS_ERR_INVALID_HANDLE, "{detail}");
        assert_eq!(detail["argument"], "replay");
        assert_eq!(detail["expected"], "lls_replay");
        assert_eq!(detail["actual"], "lls_reply");
    }

    // An lls_replay where an lls_reply is expected.
    let (s, _) = one_turn();
    let mut r: *mut lls_replay = null_mut();
    call(|e| unsafe { lls_replay_new(s, &mut r, e) }).unwrap();
    let f = call(|e| unsafe { lls_reply_set_json(r.cast(), b"{}".as_ptr().cast(), 2, e) }).unwrap_err();
    assert_eq!(f.status, LLS_ERR_INVALID_HANDLE, "{}", f.message);
    assert_eq!(f.detail["expected"], "lls_reply");
    assert_eq!(f.detail["actual"], "lls_replay");
    assert!(f.message.contains("is an lls_replay handle, but an lls_reply handle is expected"), "{}", f.message);
    // The replay is untouched by the misuse.
    assert_eq!(answered(r), 0);
    lls_replay_free(r);
    lls_session_free(s);
}

#[test]
fn session_ids_follow_one_rule_in_every_store() {
    let long = "x".repeat(1025);
    let bad = ["", "a\u{0}b", "tab\there", "line\n", "\u{1b}[31m", "del\u{7f}", long.as_str()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.jsonl").display().to_string();
    let (parent, _) = one_turn();
    for id in bad {
        let opts = json!({ "id": id }).to_string();
        let f = memory_session(&opts).unwrap_err();
        assert_eq!(f.status, LLS_ERR_INVALID_INPUT, "{id:?}: {}", f.message);
        assert_eq!(f.detail["field"], "opts.id", "{}", f.detail);

        let mut s: *mut lls_session = null_mut();
        let f = call(|e| unsafe { lls_session_open_file(path.as_ptr().cast(), path.len(), opts.as_ptr().cast(), opts.len(), &mut s, e) })
            .unwrap_err();
        assert_eq!(f.status, LLS_ERR_INVALID_INPUT, "{id:?}: {}", f.message);
        assert_eq!(f.detail["field"], "opts.id");

        let mut child: *mut lls_session = null_mut();
        let f = call(|e| unsafe { lls_session_fork(parent, opts.as_ptr().cast(), opts.len(), &mut child, e) }).unwrap_err();
        assert_eq!(f.status, LLS_ERR_INVALID_INPUT, "{id:?}: {}", f.message);
    }
    let f = memory_session(r#"{"id":"a\u0007b"}"#).unwrap_err();
    assert!(f.message.contains("opts.id: the session id holds the control character U+0007 at byte 1"), "{}", f.message);
    assert!(!std::path::Path::new(&path).exists() || std::fs::metadata(&path).unwrap().len() == 0);
    // Any other text is an id, up to 1,024 bytes.
    for id in ["ünï/côdé id with spaces", "a\u{80}b", &"y".repeat(1024)] {
        let s = memory_session(&json!({ "id": id }).to_string()).unwrap();
        assert_eq!(call_out(|o, l, e| unsafe { lls_session_id(s, o, l, e) }).unwrap(), id);
        lls_session_free(s);
    }
    lls_session_free(parent);
}

#[test]
fn a_lone_surrogate_escape_is_malformed_json() {
    let s = memory_session("{}").unwrap();
    let event = |text: &str| {
        format!(
            r#"{{"type":"user/message","data":{{"message":{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}},"source":"host"}},"surfaceOp":"append"}}"#
        )
    };
    for lone in [r"\ud800", r"\udc00", r"a\ud83d", r"\ud83d\u0041"] {
        let e = event(lone);
        let f = call(|err| unsafe { lls_session_append(s, e.as_ptr().cast(), e.len(), null_mut(), err) }).unwrap_err();
        assert_eq!(f.status, LLS_ERR_MALFORMED_JSON, "{lone}: {}", f.message);
        assert_eq!(f.detail["argument"], "event_json");
        assert!(f.detail["line"].is_u64() && f.detail["column"].is_u64(), "{}", f.detail);
    }
    let events = || call_out(|o, l, e| unsafe { lls_session_events(s, 0, u64::MAX, o, l, e) }).unwrap();
    assert_eq!(events(), "[]");
    // A surrogate pair is one character, and is logged as UTF-8.
    let e = event(r"\ud83d\ude00");
    call(|err| unsafe { lls_session_append(s, e.as_ptr().cast(), e.len(), null_mut(), err) }).unwrap();
    assert!(events().contains('\u{1F600}'));
    lls_session_free(s);
}
