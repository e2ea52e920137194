//! The session log (issue #2): the event catalogue round-trips, every validation rule rejects
//! with a message that names the event type, the field and why, and leaves the log unchanged;
//! the replace rules of the surface; fork boundaries; durability policies and store failures.

mod common;

use common::*;
use llmsession::error::ErrorKind;
use llmsession::log::{Event, Log, SurfaceOp};
use llmsession::store::MemoryStore;
use llmsession::{Durability, NewEvent, Session, SessionOptions};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// The catalogue

/// A session that uses every catalogue type once or more, plus a host's own log-only type.
/// Messages and blocks carry fields the library does not know.
fn catalogue_session() -> Session {
    let s = Session::in_memory();
    let odd_user = NewEvent::visible(
        "user/message",
        json!({
            "message": {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look at this", "cacheControl": {"type": "ephemeral"}},
                    {"type": "image", "mediaType": "image/png", "data": "iVBORw0KGgo=", "detail": {"w": 2}}
                ],
                "meta": {"clientMessageId": "m-1"}
            },
            "source": "user",
            "hostTag": 7
        }),
    );
    let odd_assistant = NewEvent::visible(
        "assistant/message",
        json!({
            "turn": 1, "step": 1,
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "text": "hmm", "signature": "sig=="},
                    {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{\"p\":1}", "index": 0}
                ],
                "provenance": {"provider": "p", "model": "m", "region": "eu"},
                "stopReason": "tool_use"
            },
            "usage": {"inputTokens": 100, "outputTokens": 20, "cacheReadTokens": 80,
                      "cacheWriteTokens": 3, "reasoningTokens": 5, "serviceTier": "std"}
        }),
    );
    let odd_result = NewEvent::visible(
        "tool/result",
        json!({"callId": "c1",
               "content": [{"type": "text", "text": "data"}, {"type": "resource", "uri": "file:///a"}],
               "isError": false}),
    );
    append_all(
        &s,
        vec![
            header("initial", 1, "line one\nline two"),
            NewEvent::new(
                "request/header-delta",
                json!({"delta": {"system": {"keepLeading": 1, "keepTrailing": 0, "insert": ["line 2"]}}, "instance": 1}),
            ),
            turn_start(1),
            odd_user,
            step_start(1, 1),
            odd_assistant,
            tool_call(1, 1, "c1", "read", "{\"p\":1}"),
            step_end(1, 1, "response"),
            odd_result,
            host("the clock says noon"),
            user_from("plugin", "a plugin remembers"),
            step_start(1, 2),
            assistant(1, 2, "done", &[]),
            step_end(1, 2, "response"),
            turn_end(1, "completed"),
            NewEvent::new("acme/audit", json!({"who": "ops", "tags": ["a", "b"], "n": null})),
            NewEvent::new("clock/decision", json!({"decision": "keep-warm", "at": 1, "reason": "the host is back soon"})),
            NewEvent::new(
                "clock/keepalive",
                json!({"replays": 11, "maxTokens": 1, "bytes": 10, "requestDigest": format!("sha256:{}", "0".repeat(64))}),
            ),
            NewEvent::new(
                "clock/keepalive-end",
                json!({"request": 17, "outcome": "response", "usage": {"inputTokens": 1, "outputTokens": 1}}),
            ),
            compaction_start_seqs(0, 2, vec![3, 5, 8]),
            compaction_summary("we read a file"),
            checkpoint("summary: we read a file", 0, 2, vec![3, 5, 8]),
            compaction_end("landed"),
            // A native compaction (docs/compaction.md): the provider's block, verbatim.
            native_start(vec![21]),
            native_block(),
            native_checkpoint(vec![21]),
            compaction_end("landed"),
            header("change", 1, "another prompt"),
            header("resume", 2, "another prompt"),
            turn_start(2),
            user("again"),
            step_start_of(2, 1, 2),
            step_end(2, 1, "error"),
            turn_end(2, "error"),
            // A child spawned at a turn boundary (agent trees).
            NewEvent::new("agent/spawn", json!({"child": "a-child"})),
        ],
    );
    s
}

fn native_item() -> Value {
    json!({"type": "compaction", "content": "we read a file", "signature": "c2ln"})
}

fn native_start(seqs: Vec<u64>) -> NewEvent {
    let end = seqs.len() - 1;
    NewEvent::new(
        "compaction/start",
        json!({"mechanism": "native", "mode": "on-demand", "format": "anthropic", "trigger": "manual",
               "span": {"start": 0, "end": end}, "seqs": seqs}),
    )
}

fn native_block() -> NewEvent {
    NewEvent::new("compaction/native", json!({"format": "anthropic", "mode": "on-demand", "items": [native_item()]}))
}

fn native_checkpoint(seqs: Vec<u64>) -> NewEvent {
    let end = seqs.len() - 1;
    NewEvent::replacing(
        "user/message",
        json!({"message": {"role": "user", "content": [{"type": "opaque", "origin": "anthropic", "item": native_item()}]}, "source": "compaction"}),
        0,
        end,
        seqs,
    )
}

/// The rules of a native compaction: what it announces, that its checkpoint carries exactly its
/// block, that a portable summary does not belong to it, and that conversation requests may
/// pass an on-demand one (background compaction) but not a portable one.
#[test]
fn native_compaction_rules() {
    let s = Session::in_memory();
    append_all(&s, vec![header("initial", 1, "sys"), turn_start(1), user("hello"), turn_end(1, "completed")]);
    let rejects = |ev: NewEvent, field: &str, contains: &str| {
        let before = s.len();
        let e = s.append(ev).unwrap_err();
        assert_eq!(e.detail()["field"], field, "{e}");
        assert!(e.message().contains(contains), "{e}");
        assert_eq!(s.len(), before);
    };
    let mut bad = native_start(vec![2]);
    bad.data["mode"] = json!("later");
    rejects(bad, "data.mode", "threshold");
    let mut bad = native_start(vec![2]);
    bad.data["format"] = json!("gemini");
    rejects(bad, "data.format", "formats with a native compaction");
    rejects(native_block(), "", "no compaction is open");
    append_all(&s, vec![native_start(vec![2])]);
    rejects(compaction_summary("text"), "", "compaction/native");
    let mut two = native_block();
    two.data["items"] = json!([native_item(), native_item()]);
    rejects(two, "data.items", "exactly one");
    let mut other = native_block();
    other.data["format"] = json!("openai-responses");
    rejects(other, "data.format", "announced");
    // Conversation requests go on while an on-demand compaction runs.
    append_all(&s, vec![turn_start(2), user("meanwhile"), step_start(2, 1), assistant(2, 1, "ok", &[]), step_end(2, 1, "response")]);
    append_all(&s, vec![native_block()]);
    rejects(checkpoint("a text instead", 0, 0, vec![2]), "data.message.content", "exactly the 1 item");
    append_all(&s, vec![native_checkpoint(vec![2]), compaction_end("landed"), turn_end(2, "completed")]);
    let h: Value = serde_json::from_str(&s.history_json()).unwrap();
    assert_eq!(h[0]["content"][0]["item"], native_item());
    assert_eq!(h[1]["content"][0]["text"], "meanwhile", "what came meanwhile stays after the block");
    // A portable compaction still holds requests back.
    append_all(&s, vec![compaction_start_for(&s, 0, 0), turn_start(3), user("now")]);
    rejects(step_start(3, 1), "", "a compaction is still open");
}

#[test]
fn every_catalogue_type_round_trips_through_json() {
    let s = catalogue_session();
    let events: Vec<Event> = (0..s.len() as u64).map(|q| s.event(q).unwrap()).collect();
    let mut seen: Vec<&str> = events.iter().map(|e| e.ty.as_str()).collect();
    seen.sort();
    seen.dedup();
    for ty in llmsession::log::event::types::ALL {
        assert!(seen.contains(ty), "the catalogue session lacks {ty}");
    }
    assert!(seen.contains(&"acme/audit"));

    for (i, line) in s.with_log(|l| l.lines().to_vec()).iter().enumerate() {
        let ev = Event::from_json(line).unwrap();
        assert_eq!(ev.seq, i as u64);
        assert_eq!(ev.to_json(), llmsession::log::chain::without_chain(line), "serialise(parse(line)) differs for seq {i}");
        let again = Event::from_json(&ev.to_json()).unwrap();
        assert_eq!(again, ev, "parse(serialise(event)) differs for seq {i}");
    }

    // A log rebuilt from the parsed events is the same log (without the chain, which replay
    // does not write).
    let rebuilt = Log::replay(&events).unwrap();
    let stored: Vec<String> = s.with_log(|l| l.lines().iter().map(|r| llmsession::log::chain::without_chain(r).into_owned()).collect());
    assert_eq!(rebuilt.lines().iter().map(|r| r.to_string()).collect::<Vec<_>>(), stored);
    assert_eq!(rebuilt.history().seqs(), s.with_log(|l| l.history().seqs()));
}

#[test]
fn unknown_fields_in_messages_and_blocks_are_carried_through() {
    let s = catalogue_session();
    let user = s.event(3).unwrap();
    assert_eq!(user.data["hostTag"], 7);
    assert_eq!(user.data["message"]["meta"]["clientMessageId"], "m-1");
    assert_eq!(user.data["message"]["content"][1]["detail"]["w"], 2);
    let asst = s.event(5).unwrap();
    assert_eq!(asst.data["usage"]["serviceTier"], "std");
    assert_eq!(asst.data["message"]["content"][0]["signature"], "sig==");

    // The derivation carries them into the history too. Before the compaction the history
    // held them; read it from a replay of the first 15 events.
    let head: Vec<Event> = (0..15).map(|q| s.event(q).unwrap()).collect();
    let log = Log::replay(&head).unwrap();
    let hist: Vec<Value> = log.history().entries().iter().map(|d| serde_json::from_str(&d.json).unwrap()).collect();
    assert_eq!(hist[0], user.data["message"], "a user message projects to exactly its message");
    assert_eq!(hist[1], asst.data["message"], "an assistant message projects to exactly its message");
    assert_eq!(
        hist[2],
        json!({"role": "user", "content": [{"type": "tool-result", "toolCallId": "c1",
               "content": [{"type": "text", "text": "data"}, {"type": "resource", "uri": "file:///a"}],
               "isError": false}]}),
        "a tool result projects to a user message with one tool-result block"
    );
}

#[test]
fn a_hosts_own_log_only_type_is_logged_and_stays_off_the_surface() {
    let s = session_with_header();
    let hist = s.history_json();
    let seq = s.append(NewEvent::new("acme/metrics", json!({"cpu": 0.5, "nested": {"x": [1, 2]}}))).unwrap();
    let ev = s.event(seq).unwrap();
    assert_eq!(ev.ty, "acme/metrics");
    assert_eq!(ev.data, json!({"cpu": 0.5, "nested": {"x": [1, 2]}}));
    assert_eq!(ev.surface_op, None);
    assert_eq!(s.history_json(), hist, "a log-only event does not reach the history");
    // Also through the JSON entry point a host uses.
    let seq = s.append_json(&json!({"type": "acme/ping", "data": {}})).unwrap();
    assert_eq!(s.event(seq).unwrap().ty, "acme/ping");
}

#[test]
fn reserved_namespaces_are_rejected() {
    let s = session_with_header();
    for ty in ["turn/foo", "step/x", "user/context", "assistant/thought", "tool/progress", "request/body", "compaction/note", "session"] {
        let e = rejected(&s, NewEvent::new(ty, json!({})), ErrorKind::InvalidInput, &[ty, "reserved"]);
        assert_eq!(field(&e), "type");
        assert_eq!(e.detail()["eventType"], ty);
    }
}

// ---------------------------------------------------------------------------------------------
// Validation rules: each rejects with a field-naming message and changes nothing.

#[test]
fn seqs_must_be_contiguous_from_zero() {
    let mut log = Log::new();
    let ev = |seq: u64| Event { ty: "acme/x".into(), seq, time: 1, data: json!({}), surface_op: None, sources: None };
    let e = log.append(&ev(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(e.message(), "acme/x (seq 1): seq: expected 0 (seqs are contiguous from 0), got 1");
    assert_eq!(field(&e), "seq");
    assert!(log.is_empty());
    log.append(&ev(0)).unwrap();
    let before = log.lines().to_vec();
    for bad in [0, 2, 7] {
        let e = log.append(&ev(bad)).unwrap_err();
        assert!(e.message().contains("seq: expected 1"), "{}", e.message());
    }
    assert_eq!(log.lines(), before.as_slice());
}

#[test]
fn turns_are_numbered_from_one_without_gaps() {
    let s = session_with_header();
    let e = rejected(&s, turn_start(2), ErrorKind::OutOfOrder, &["turn/start (seq 1)", "data.turn", "expected turn 1, got 2"]);
    assert_eq!(field(&e), "data.turn");
    assert_eq!(e.detail()["eventType"], "turn/start");
    assert_eq!(e.detail()["seq"], 1);
    rejected(&s, turn_start(0), ErrorKind::OutOfOrder, &["expected turn 1, got 0"]);
    append_all(&s, complete_turn(1));
    rejected(&s, turn_start(1), ErrorKind::OutOfOrder, &["data.turn", "expected turn 2, got 1"]);
    rejected(&s, turn_start(3), ErrorKind::OutOfOrder, &["data.turn", "expected turn 2, got 3"]);
}

#[test]
fn turns_do_not_nest() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi")]);
    rejected(&s, turn_start(2), ErrorKind::OutOfOrder, &["turn/start", "turn 1 is still open"]);
}

#[test]
fn turn_end_needs_its_open_turn_and_a_quiet_state() {
    let s = session_with_header();
    rejected(&s, turn_end(1, "completed"), ErrorKind::OutOfOrder, &["turn/end", "no turn is open"]);
    append_all(&s, vec![turn_start(1), user("hi")]);
    let e = rejected(&s, turn_end(2, "completed"), ErrorKind::OutOfOrder, &["data.turn", "turn 2 is not the open turn (1)"]);
    assert_eq!(field(&e), "data.turn");
    let e = rejected(&s, turn_end(1, "finished"), ErrorKind::InvalidInput, &["data.reason", "unknown turn end reason \"finished\""]);
    assert_eq!(field(&e), "data.reason");
    append_all(&s, vec![step_start(1, 1)]);
    rejected(&s, turn_end(1, "aborted"), ErrorKind::OutOfOrder, &["step 1 is still open"]);
    append_all(&s, vec![assistant(1, 1, "x", &[("k", "t", "{}")]), tool_call(1, 1, "k", "t", "{}"), step_end(1, 1, "response")]);
    rejected(&s, turn_end(1, "aborted"), ErrorKind::OutOfOrder, &["tool call \"k\" has no result yet"]);
    append_all(&s, vec![tool_result("k", "ok")]);
    for reason in ["completed", "aborted", "disposed", "error", "rejected", "max-tokens", "interrupted"] {
        // Every reason of the catalogue is accepted (checked without appending).
        let ev = turn_end(1, reason).into_event_for_test(s.len() as u64);
        s.with_log(|l| l.check(&ev)).unwrap();
    }
}

/// Builds the event an append would log, for `Log::check`.
trait ForTest {
    fn into_event_for_test(self, seq: u64) -> Event;
}
impl ForTest for NewEvent {
    fn into_event_for_test(self, seq: u64) -> Event {
        Event { ty: self.ty, seq, time: 0, data: self.data, surface_op: self.surface_op, sources: self.sources }
    }
}

#[test]
fn a_step_needs_an_open_turn_and_a_header() {
    let s = Session::in_memory();
    rejected(&s, step_start(1, 1), ErrorKind::OutOfOrder, &["step/start (seq 0)", "no turn is open"]);
    append_all(&s, vec![turn_start(1), user("hi")]);
    rejected(&s, step_start(1, 1), ErrorKind::OutOfOrder, &["no request header was recorded"]);
    append_all(&s, vec![header("initial", 1, "")]);
    let e = rejected(&s, step_start_of(1, 1, 2), ErrorKind::OutOfOrder, &["data.instance", "instance 2 has not recorded its header"]);
    assert_eq!(field(&e), "data.instance");
    let e = rejected(&s, step_start(2, 1), ErrorKind::OutOfOrder, &["data.turn", "turn 2 is not the open turn (1)"]);
    assert_eq!(field(&e), "data.turn");
    let mut bad = step_start(1, 1);
    bad.data["digest"] = json!("md5:abc");
    let e = rejected(&s, bad, ErrorKind::InvalidInput, &["data.digest", "sha256:"]);
    assert_eq!(field(&e), "data.digest");
}

#[test]
fn steps_are_numbered_from_one_within_a_turn_and_do_not_nest() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi")]);
    let e = rejected(&s, step_start(1, 2), ErrorKind::OutOfOrder, &["step/start", "data.step", "expected step 1, got 2"]);
    assert_eq!(field(&e), "data.step");
    append_all(&s, vec![step_start(1, 1)]);
    rejected(&s, step_start(1, 2), ErrorKind::OutOfOrder, &["step 1 is still open"]);
    append_all(&s, vec![step_end(1, 1, "error")]);
    rejected(&s, step_start(1, 1), ErrorKind::OutOfOrder, &["data.step", "expected step 2, got 1"]);
    append_all(&s, vec![step_start(1, 2), step_end(1, 2, "cancelled"), turn_end(1, "aborted"), turn_start(2)]);
    // A new turn counts steps from 1 again.
    append_all(&s, vec![step_start(2, 1)]);
}

#[test]
fn step_end_names_the_open_step_and_a_known_outcome() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi"), step_start(1, 1)]);
    let e = rejected(&s, step_end(1, 2, "error"), ErrorKind::OutOfOrder, &["step/end", "data.step", "turn 1 step 2 is not the open step"]);
    assert_eq!(field(&e), "data.step");
    let e = rejected(&s, step_end(1, 1, "response"), ErrorKind::OutOfOrder, &["data.outcome", "needs its assistant/message first"]);
    assert_eq!(field(&e), "data.outcome");
    let e = rejected(
        &s,
        step_end(1, 1, "done"),
        ErrorKind::InvalidInput,
        &["data.outcome", "expected \"response\", \"error\" or \"cancelled\""],
    );
    assert_eq!(field(&e), "data.outcome");
}

#[test]
fn no_step_while_a_tool_batch_is_pending() {
    let s = session_with_header();
    append_all(
        &s,
        vec![
            turn_start(1),
            user("hi"),
            step_start(1, 1),
            assistant(1, 1, "calling", &[("a", "t", "{}"), ("b", "t", "{}")]),
            tool_call(1, 1, "a", "t", "{}"),
            tool_call(1, 1, "b", "t", "{}"),
            step_end(1, 1, "response"),
            tool_result("a", "1"),
        ],
    );
    rejected(&s, step_start(1, 2), ErrorKind::OutOfOrder, &["step/start", "tool call \"b\" has no result yet"]);
    append_all(&s, vec![tool_result("b", "2"), step_start(1, 2)]);
}

#[test]
fn an_assistant_message_belongs_to_an_open_step_once() {
    let s = session_with_header();
    rejected(&s, assistant(1, 1, "x", &[]), ErrorKind::OutOfOrder, &["assistant/message", "no turn is open"]);
    append_all(&s, vec![turn_start(1), user("hi")]);
    let e = rejected(
        &s,
        assistant(1, 1, "x", &[]),
        ErrorKind::OutOfOrder,
        &["assistant/message", "data.step", "turn 1 step 1 is not the open step"],
    );
    assert_eq!(field(&e), "data.step");
    append_all(&s, vec![step_start(1, 1)]);
    rejected(&s, assistant(1, 2, "x", &[]), ErrorKind::OutOfOrder, &["data.step", "turn 1 step 2 is not the open step"]);
    append_all(&s, vec![assistant(1, 1, "x", &[])]);
    rejected(&s, assistant(1, 1, "y", &[]), ErrorKind::OutOfOrder, &["assistant/message", "step 1 already has its assistant message"]);
    append_all(&s, vec![step_end(1, 1, "response")]);
    // After step/end the step is closed.
    rejected(&s, assistant(1, 1, "late", &[]), ErrorKind::OutOfOrder, &["not the open step"]);
    // The message must be an assistant message.
    append_all(&s, vec![step_start(1, 2)]);
    let mut wrong_role = assistant(1, 2, "x", &[]);
    wrong_role.data["message"]["role"] = json!("user");
    let e = rejected(
        &s,
        wrong_role,
        ErrorKind::InvalidInput,
        &["data.message.role", "an assistant/message event carries an assistant message, got a user message"],
    );
    assert_eq!(field(&e), "data.message.role");
}

#[test]
fn tool_call_ids_are_unique_in_a_session() {
    let s = session_with_header();
    append_all(&s, complete_turn(1)); // uses call id "c1"
    append_all(&s, vec![turn_start(2), user("q"), step_start(2, 1)]);
    let e = rejected(
        &s,
        assistant(2, 1, "x", &[("c1", "read", "{}")]),
        ErrorKind::InvalidInput,
        &["assistant/message", "data.message.content[1].id", "\"c1\" is already used"],
    );
    assert_eq!(field(&e), "data.message.content[1].id");
    let e = rejected(&s, assistant(2, 1, "x", &[("d", "t", "{}"), ("d", "t", "{}")]), ErrorKind::InvalidInput, &["\"d\" is already used"]);
    assert_eq!(field(&e), "data.message.content[2].id");
}

#[test]
fn tool_calls_follow_the_assistant_message_in_model_order() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi"), step_start(1, 1)]);
    let e = rejected(&s, tool_call(1, 1, "a", "t", "{}"), ErrorKind::OutOfOrder, &["tool/call", "data.callId", "\"a\" is unknown"]);
    assert_eq!(field(&e), "data.callId");
    append_all(&s, vec![assistant(1, 1, "two calls", &[("a", "ta", "{\"x\":1}"), ("b", "tb", "{}")])]);
    let e = rejected(
        &s,
        tool_call(1, 1, "b", "tb", "{}"),
        ErrorKind::OutOfOrder,
        &["tool/call", "expected tool call \"a\" next (model order), got \"b\""],
    );
    assert_eq!(field(&e), "data.callId");
    let e = rejected(&s, tool_call(1, 1, "a", "other", "{\"x\":1}"), ErrorKind::OutOfOrder, &["name/arguments of tool call \"a\" differ"]);
    assert_eq!(field(&e), "data");
    rejected(&s, tool_call(1, 1, "a", "ta", "{\"x\":2}"), ErrorKind::OutOfOrder, &["differ from the assistant message"]);
    rejected(&s, tool_call(1, 2, "a", "ta", "{\"x\":1}"), ErrorKind::OutOfOrder, &["data.step", "turn 1 step 2 is not the open step"]);
    // step/end waits for every tool/call.
    rejected(&s, step_end(1, 1, "response"), ErrorKind::OutOfOrder, &["tool call \"a\"", "has no tool/call event yet"]);
    append_all(&s, vec![tool_call(1, 1, "a", "ta", "{\"x\":1}")]);
    rejected(&s, step_end(1, 1, "response"), ErrorKind::OutOfOrder, &["tool call \"b\"", "has no tool/call event yet"]);
    append_all(&s, vec![tool_call(1, 1, "b", "tb", "{}")]);
    rejected(&s, tool_call(1, 1, "c", "tc", "{}"), ErrorKind::OutOfOrder, &["no (further) tool call", "\"c\" is unknown"]);
    append_all(&s, vec![step_end(1, 1, "response")]);
}

#[test]
fn tool_results_answer_pending_calls_in_model_order_after_step_end() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi")]);
    let e = rejected(&s, tool_result("a", "r"), ErrorKind::OutOfOrder, &["tool/result", "data.callId", "no tool call is waiting"]);
    assert_eq!(field(&e), "data.callId");
    append_all(
        &s,
        vec![
            step_start(1, 1),
            assistant(1, 1, "two", &[("a", "t", "{}"), ("b", "t", "{}")]),
            tool_call(1, 1, "a", "t", "{}"),
            tool_call(1, 1, "b", "t", "{}"),
        ],
    );
    rejected(&s, tool_result("a", "r"), ErrorKind::OutOfOrder, &["tool/result", "step 1 is still open; tool results follow its step/end"]);
    append_all(&s, vec![step_end(1, 1, "response")]);
    let e =
        rejected(&s, tool_result("zz", "r"), ErrorKind::OutOfOrder, &["tool/result", "data.callId", "\"zz\" is not a pending tool call"]);
    assert_eq!(field(&e), "data.callId");
    rejected(
        &s,
        tool_result("b", "r"),
        ErrorKind::OutOfOrder,
        &["data.callId", "results are logged in model order: \"a\" comes before \"b\""],
    );
    let mut bad = tool_result("a", "r");
    bad.data["isError"] = json!("no");
    let e = rejected(&s, bad, ErrorKind::InvalidInput, &["tool/result", "data.isError", "expected a boolean"]);
    assert_eq!(field(&e), "data.isError");
    append_all(&s, vec![tool_result("a", "r"), tool_result("b", "r")]);
    rejected(&s, tool_result("a", "again"), ErrorKind::OutOfOrder, &["no tool call is waiting"]);
}

#[test]
fn no_user_message_while_a_tool_batch_or_a_step_is_open() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi"), step_start(1, 1)]);
    rejected(&s, host("context"), ErrorKind::OutOfOrder, &["user/message", "step 1 is open"]);
    append_all(&s, vec![assistant(1, 1, "x", &[("a", "t", "{}")]), tool_call(1, 1, "a", "t", "{}"), step_end(1, 1, "response")]);
    rejected(&s, host("context"), ErrorKind::OutOfOrder, &["user/message", "the tool batch is open: tool call \"a\" has no result yet"]);
    rejected(&s, user("me too"), ErrorKind::OutOfOrder, &["the tool batch is open"]);
    append_all(&s, vec![tool_result("a", "r"), host("context")]);
}

#[test]
fn user_messages_name_a_known_source_and_the_users_own_need_a_turn() {
    let s = session_with_header();
    let e = rejected(&s, user("hi"), ErrorKind::OutOfOrder, &["user/message", "data.source", "must be inside a turn"]);
    assert_eq!(field(&e), "data.source");
    let e = rejected(&s, user_from("robot", "x"), ErrorKind::InvalidInput, &["data.source", "unknown source \"robot\""]);
    assert_eq!(field(&e), "data.source");
    // Host and plugin context may arrive between turns.
    append_all(&s, vec![host("h"), user_from("plugin", "p")]);
    let mut wrong_role = host("x");
    wrong_role.data["message"]["role"] = json!("assistant");
    rejected(
        &s,
        wrong_role,
        ErrorKind::InvalidInput,
        &["data.message.role", "a user/message event carries a user message, got an assistant message"],
    );
}

#[test]
fn header_reasons_follow_the_instances() {
    let s = Session::in_memory();
    let e = rejected(&s, header("change", 1, ""), ErrorKind::OutOfOrder, &["request/header", "data.reason", "has reason \"initial\""]);
    assert_eq!(field(&e), "data.reason");
    rejected(&s, header("resume", 1, ""), ErrorKind::OutOfOrder, &["data.reason"]);
    append_all(&s, vec![header("initial", 1, "a")]);
    let e = rejected(
        &s,
        header("initial", 1, "b"),
        ErrorKind::OutOfOrder,
        &["request/header", "data.reason", "\"initial\" is only for the first header"],
    );
    assert_eq!(field(&e), "data.reason");
    let e = rejected(
        &s,
        header("change", 2, "b"),
        ErrorKind::OutOfOrder,
        &["request/header", "data.instance", "a change belongs to the current instance 1"],
    );
    assert_eq!(field(&e), "data.instance");
    append_all(&s, vec![header("change", 1, "b"), header("resume", 3, "b")]);
    // A resume with an instance id that was used before.
    for old in [1, 2, 3] {
        let e = rejected(
            &s,
            header("resume", old, "b"),
            ErrorKind::OutOfOrder,
            &["data.instance", "a resume starts a new instance: expected more than 3"],
        );
        assert_eq!(field(&e), "data.instance");
    }
    rejected(&s, header("change", 1, "c"), ErrorKind::OutOfOrder, &["current instance 3"]);
    let mut bad = header("change", 3, "c");
    bad.data["reason"] = json!("whim");
    let e = rejected(&s, bad, ErrorKind::InvalidInput, &["data.reason", "expected \"initial\", \"resume\" or \"change\""]);
    assert_eq!(field(&e), "data.reason");
    let mut bad = header("change", 3, "c");
    bad.data["header"]["config"]["model"] = json!("");
    let e = rejected(&s, bad, ErrorKind::InvalidInput, &["data.header.config.model", "must not be empty"]);
    assert_eq!(field(&e), "data.header.config.model");
    // No header while a step is open: it belongs before its step.
    append_all(&s, vec![turn_start(1), user("q"), step_start_of(1, 1, 3)]);
    rejected(&s, header("change", 3, "c"), ErrorKind::OutOfOrder, &["before the step it belongs to"]);
}

#[test]
fn a_header_delta_before_any_snapshot_is_a_corrupt_log() {
    let s = Session::in_memory();
    let delta = NewEvent::new("request/header-delta", json!({"delta": {"config": {"provider": "p", "model": "n"}}, "instance": 1}));
    let e = rejected(&s, delta.clone(), ErrorKind::CorruptLog, &["request/header-delta (seq 0)", "before any request/header snapshot"]);
    assert_eq!(field(&e), "data");
    // After a snapshot it folds; and it must belong to the latest instance.
    append_all(&s, vec![header("initial", 1, "sys")]);
    let mut other = delta.clone();
    other.data["instance"] = json!(2);
    rejected(&s, other, ErrorKind::OutOfOrder, &["data.instance", "a delta belongs to the instance of the latest header"]);
    append_all(&s, vec![delta]);
    let h = s.request_header().unwrap();
    assert_eq!(h.config.model, "n");
    assert_eq!(h.system_str(), "sys");
}

#[test]
fn surface_op_belongs_exactly_to_model_visible_events() {
    let s = session_with_header();
    let mut ev = turn_start(1);
    ev.surface_op = Some(SurfaceOp::Append);
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["turn/start", "surfaceOp", "only model-visible events"]);
    assert_eq!(field(&e), "surfaceOp");
    let mut ev = NewEvent::new("acme/x", json!({}));
    ev.sources = Some(vec![0]);
    rejected(&s, ev, ErrorKind::InvalidInput, &["acme/x", "surfaceOp", "only model-visible events"]);
    append_all(&s, vec![turn_start(1)]);
    let mut ev = user("hi");
    ev.surface_op = None;
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["user/message", "surfaceOp", "is required on a model-visible event"]);
    assert_eq!(field(&e), "surfaceOp");
    let mut ev = user("hi");
    ev.sources = Some(vec![1]);
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["user/message", "sources", "an append does not shadow anything"]);
    assert_eq!(field(&e), "sources");
}

#[test]
fn null_optional_fields_are_rejected() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("hi"), step_start(1, 1)]);
    let mut ev = step_end(1, 1, "error");
    ev.data["error"] = Value::Null;
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["step/end", "data.error", "is null; optional fields must be absent, not null"]);
    assert_eq!(field(&e), "data.error");
    let mut ev = assistant(1, 1, "x", &[]);
    ev.data["usage"] = Value::Null;
    rejected(&s, ev, ErrorKind::InvalidInput, &["assistant/message", "data.usage", "is null"]);
    let mut ev = assistant(1, 1, "x", &[]);
    ev.data["message"]["provenance"] = Value::Null;
    rejected(&s, ev, ErrorKind::InvalidInput, &["data.message.provenance", "is null"]);
    let mut ev = assistant(1, 1, "x", &[]);
    ev.data["usage"]["cacheReadTokens"] = Value::Null;
    rejected(&s, ev, ErrorKind::InvalidInput, &["data.usage.cacheReadTokens", "is null"]);
    // In the envelope, through the host's JSON entry point.
    let before = observe(&s);
    let e = s.append_json(&json!({"type": "acme/x", "data": {}, "surfaceOp": null})).unwrap_err();
    assert!(e.message().contains("event.surfaceOp: is null"), "{}", e.message());
    assert_eq!(observe(&s), before);
}

#[test]
fn wrong_types_are_rejected_naming_the_field() {
    let s = session_with_header();
    let e = rejected(
        &s,
        NewEvent::new("turn/start", json!({"turn": "1"})),
        ErrorKind::InvalidInput,
        &["turn/start", "data.turn", "expected a non-negative integer, got \"1\""],
    );
    assert_eq!(field(&e), "data.turn");
    rejected(&s, NewEvent::new("turn/start", json!({"turn": -1})), ErrorKind::InvalidInput, &["data.turn", "non-negative"]);
    rejected(&s, NewEvent::new("turn/start", json!({})), ErrorKind::InvalidInput, &["data.turn", "is required"]);
    let e = rejected(
        &s,
        NewEvent::new("turn/start", json!([1])),
        ErrorKind::InvalidInput,
        &["turn/start", "data: expected an object, got an array"],
    );
    assert_eq!(field(&e), "data");
    rejected(&s, NewEvent::new("acme/x", json!("text")), ErrorKind::InvalidInput, &["acme/x", "data: expected an object"]);
    append_all(&s, vec![turn_start(1)]);
    let mut ev = user("x");
    ev.data["message"]["content"][0]["text"] = json!(5);
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["user/message", "data.message.content[0].text", "expected a string"]);
    assert_eq!(field(&e), "data.message.content[0].text");
    let mut ev = user("x");
    ev.data["message"]["content"] = json!({"type": "text"});
    rejected(&s, ev, ErrorKind::InvalidInput, &["data.message.content", "expected an array"]);
    // Envelope fields through the JSON entry point.
    for (bad, needle) in [
        (json!({"type": 3, "data": {}}), "event.type: expected a string"),
        (json!({"type": "acme/x"}), "event.data: is required"),
        (json!({"type": "acme/x", "data": {}, "seq": 3}), "seq, time and chain are assigned by the log"),
        (json!({"type": "acme/x", "data": {}, "extra": 1}), "event.extra: is not an event envelope field"),
        (json!({"type": "user/message", "data": {}, "surfaceOp": "prepend"}), "event.surfaceOp: expected \"append\" or a replace object"),
        (json!({"type": "user/message", "data": {}, "surfaceOp": "append", "sources": ["a"]}), "event.sources[0]: expected a seq"),
    ] {
        let before = observe(&s);
        let e = s.append_json(&bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
        assert!(e.message().contains(needle), "{} lacks {needle:?}", e.message());
        assert_eq!(observe(&s), before);
    }
}

#[test]
fn compaction_events_pair_up() {
    let s = session_with_header();
    append_all(&s, vec![host("something to compact")]);
    rejected(&s, compaction_summary("x"), ErrorKind::OutOfOrder, &["compaction/summary", "no compaction is open"]);
    rejected(&s, compaction_end("failed"), ErrorKind::OutOfOrder, &["compaction/end", "no compaction is open"]);
    append_all(&s, vec![compaction_start_for(&s, 0, 0)]);
    rejected(&s, compaction_start_for(&s, 0, 0), ErrorKind::OutOfOrder, &["compaction/start", "a compaction is already open"]);
    let e = rejected(&s, compaction_end("landed"), ErrorKind::OutOfOrder, &["data.outcome", "\"landed\" needs the checkpoint"]);
    assert_eq!(field(&e), "data.outcome");
    let e = rejected(
        &s,
        compaction_end("exploded"),
        ErrorKind::InvalidInput,
        &["data.outcome", "expected landed, failed, discarded or cancelled"],
    );
    assert_eq!(field(&e), "data.outcome");
    rejected(&s, NewEvent::new("compaction/summary", json!({})), ErrorKind::InvalidInput, &["data.summary", "is required"]);
    let e = rejected(
        &s,
        NewEvent::new("compaction/end", json!({"outcome": "failed", "error": null})),
        ErrorKind::InvalidInput,
        &["compaction/end", "data.error", "is null"],
    );
    assert_eq!(field(&e), "data.error");
    rejected(
        &s,
        NewEvent::new("compaction/end", json!({"outcome": "failed", "error": 5})),
        ErrorKind::InvalidInput,
        &["data.error", "expected a string"],
    );
    append_all(&s, vec![compaction_summary("s")]);
    rejected(&s, compaction_summary("again"), ErrorKind::OutOfOrder, &["already has its summary"]);
    // No request while a compaction is open.
    append_all(&s, vec![turn_start(1), user("q")]);
    rejected(&s, step_start(1, 1), ErrorKind::OutOfOrder, &["a compaction is still open"]);
    append_all(&s, vec![compaction_end("discarded"), step_start(1, 1)]);
}

// ---------------------------------------------------------------------------------------------
// Replace rules

/// A session with one complete turn; its surface is
/// `[user q1, assistant (calls c1), tool result c1, assistant answer]`.
fn surface_of_four() -> (Session, Vec<u64>) {
    let s = session_with_header();
    append_all(&s, complete_turn(1));
    let seqs = s.with_log(|l| l.history().seqs());
    assert_eq!(seqs.len(), 4);
    (s, seqs)
}

fn open_compaction(s: &Session, start: usize, end: usize) {
    append_all(s, vec![compaction_start_for(s, start, end), compaction_summary("the summary")]);
}

fn generation(s: &Session) -> u64 {
    s.with_log(|l| l.history().generation())
}

#[test]
fn a_replace_of_one_position_is_allowed_and_bumps_the_generation() {
    let (s, seqs) = surface_of_four();
    open_compaction(&s, 0, 0);
    assert_eq!(generation(&s), 0);
    let seq = s.append(checkpoint("just the question", 0, 0, vec![seqs[0]])).unwrap();
    assert_eq!(generation(&s), 1);
    assert_eq!(s.with_log(|l| l.history().seqs()), vec![seq, seqs[1], seqs[2], seqs[3]]);
    append_all(&s, vec![compaction_end("landed")]);
}

#[test]
fn a_replace_of_a_span_in_the_middle_is_allowed() {
    let (s, seqs) = surface_of_four();
    let before: Vec<Value> = serde_json::from_str(&s.history_json()).unwrap();
    open_compaction(&s, 1, 2);
    let seq = s.append(checkpoint("the tool round", 1, 2, vec![seqs[2], seqs[1]])).unwrap();
    append_all(&s, vec![compaction_end("landed")]);
    assert_eq!(generation(&s), 1);
    assert_eq!(s.with_log(|l| l.history().seqs()), vec![seqs[0], seq, seqs[3]]);
    let after: Vec<Value> = serde_json::from_str(&s.history_json()).unwrap();
    assert_eq!(after.len(), 3);
    assert_eq!(after[0], before[0]);
    assert_eq!(after[1], json!({"role": "user", "content": [{"type": "text", "text": "the tool round"}]}));
    assert_eq!(after[2], before[3]);
    // A second compaction replaces a span that holds the first checkpoint.
    open_compaction(&s, 0, 2);
    let seq2 = s.append(checkpoint("all of it", 0, 2, vec![seqs[0], seq, seqs[3]])).unwrap();
    append_all(&s, vec![compaction_end("landed")]);
    assert_eq!(generation(&s), 2);
    assert_eq!(s.with_log(|l| l.history().seqs()), vec![seq2]);
}

#[test]
fn replace_bounds_are_checked() {
    let (s, seqs) = surface_of_four();
    open_compaction(&s, 0, 0);
    let e = rejected(
        &s,
        checkpoint("x", 2, 1, vec![seqs[1], seqs[2]]),
        ErrorKind::InvalidInput,
        &["user/message", "surfaceOp", "start (2) is after end (1)"],
    );
    assert_eq!(field(&e), "surfaceOp");
    let e = rejected(
        &s,
        checkpoint("x", 3, 4, vec![seqs[3]]),
        ErrorKind::InvalidInput,
        &["user/message", "surfaceOp.end", "position 4 is past the end of the surface (4 events)"],
    );
    assert_eq!(field(&e), "surfaceOp.end");
    rejected(&s, checkpoint("x", 9, 9, vec![]), ErrorKind::InvalidInput, &["surfaceOp.end", "past the end"]);
    // Through the JSON entry point: missing and reversed bounds.
    let data = json!({"message": {"role": "user", "content": [{"type": "text", "text": "x"}]}, "source": "compaction"});
    for (op, needle) in [
        (json!({"op": "replace", "start": 0}), "event.surfaceOp.end: is required"),
        (json!({"op": "replace", "end": 0}), "event.surfaceOp.start: is required"),
        (json!({"op": "replace", "start": 1, "end": 0}), "event.surfaceOp: start (1) is after end (0)"),
        (json!({"op": "swap", "start": 0, "end": 0}), "event.surfaceOp.op: expected \"replace\""),
        (json!({"op": "replace", "start": -1, "end": 0}), "event.surfaceOp.start: expected a non-negative integer"),
    ] {
        let before = observe(&s);
        let e = s.append_json(&json!({"type": "user/message", "data": data, "surfaceOp": op, "sources": [seqs[0]]})).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(needle), "{} lacks {needle:?}", e.message());
        assert_eq!(observe(&s), before);
    }
    assert_eq!(generation(&s), 0);
}

#[test]
fn a_replace_cites_exactly_the_shadowed_events() {
    let (s, seqs) = surface_of_four();
    open_compaction(&s, 0, 0);
    let e = rejected(
        &s,
        checkpoint("x", 0, 2, vec![seqs[0], seqs[2]]),
        ErrorKind::InvalidInput,
        &["user/message", "sources", &format!("does not cite shadowed event seq {}", seqs[1])],
    );
    assert_eq!(field(&e), "sources");
    let e = rejected(
        &s,
        checkpoint("x", 0, 2, vec![seqs[0], seqs[1], seqs[2], seqs[3]]),
        ErrorKind::InvalidInput,
        &["sources", &format!("cites seq {}, which the span 0..=2 does not shadow", seqs[3])],
    );
    assert_eq!(field(&e), "sources");
    rejected(&s, checkpoint("x", 0, 0, vec![seqs[0], 1]), ErrorKind::InvalidInput, &["cites seq 1"]);
    let e = rejected(
        &s,
        checkpoint("x", 0, 0, vec![seqs[0], seqs[0]]),
        ErrorKind::InvalidInput,
        &["sources", &format!("cites seq {} more than once", seqs[0])],
    );
    assert_eq!(field(&e), "sources");
    let mut no_sources = checkpoint("x", 0, 0, vec![]);
    no_sources.sources = None;
    rejected(&s, no_sources, ErrorKind::InvalidInput, &["sources", "a replace must cite every shadowed event"]);
    assert_eq!(generation(&s), 0);
}

#[test]
fn a_replace_may_not_separate_a_tool_call_from_its_result() {
    let (s, seqs) = surface_of_four();
    open_compaction(&s, 0, 0);
    let e = rejected(
        &s,
        checkpoint("x", 1, 1, vec![seqs[1]]),
        ErrorKind::InvalidInput,
        &["user/message", "surfaceOp", "separates tool call \"c1\""],
    );
    assert_eq!(field(&e), "surfaceOp");
    rejected(&s, checkpoint("x", 0, 1, vec![seqs[0], seqs[1]]), ErrorKind::InvalidInput, &["separates tool call \"c1\""]);
    rejected(&s, checkpoint("x", 2, 3, vec![seqs[2], seqs[3]]), ErrorKind::InvalidInput, &["separates the result of tool call \"c1\""]);
    rejected(&s, checkpoint("x", 2, 2, vec![seqs[2]]), ErrorKind::InvalidInput, &["separates the result of tool call \"c1\""]);
    assert_eq!(generation(&s), 0);
}

#[test]
fn only_a_checkpoint_inside_a_compaction_replaces() {
    let (s, seqs) = surface_of_four();
    // Outside a compaction.
    rejected(
        &s,
        checkpoint("x", 0, 0, vec![seqs[0]]),
        ErrorKind::OutOfOrder,
        &["user/message", "a checkpoint lands only inside a compaction, after its compaction/summary"],
    );
    // Inside one, but before its summary.
    append_all(&s, vec![compaction_start_for(&s, 0, 0)]);
    rejected(&s, checkpoint("x", 0, 0, vec![seqs[0]]), ErrorKind::OutOfOrder, &["after its compaction/summary"]);
    append_all(&s, vec![compaction_summary("s")]);
    // Replaces by anything that is not a checkpoint.
    let mut ev = host("x");
    ev.surface_op = Some(SurfaceOp::Replace { start: 0, end: 0 });
    ev.sources = Some(vec![seqs[0]]);
    let e = rejected(&s, ev, ErrorKind::InvalidInput, &["user/message", "surfaceOp", "only a compaction checkpoint may replace"]);
    assert_eq!(field(&e), "surfaceOp");
    let mut ev = tool_result("c1", "x");
    ev.surface_op = Some(SurfaceOp::Replace { start: 0, end: 0 });
    ev.sources = Some(vec![seqs[0]]);
    rejected(&s, ev, ErrorKind::InvalidInput, &["tool/result", "surfaceOp", "a tool result is appended"]);
    let mut ev = checkpoint("x", 0, 0, vec![]);
    ev.surface_op = Some(SurfaceOp::Append);
    ev.sources = None;
    rejected(&s, ev, ErrorKind::InvalidInput, &["surfaceOp", "a compaction checkpoint replaces the span it summarises"]);
    // One checkpoint per compaction.
    append_all(&s, vec![checkpoint("x", 0, 0, vec![seqs[0]])]);
    let cp = s.with_log(|l| l.history().seqs()[0]);
    rejected(&s, checkpoint("y", 0, 0, vec![cp]), ErrorKind::OutOfOrder, &["a checkpoint lands only inside a compaction"]);
    let e = rejected(&s, compaction_end("failed"), ErrorKind::OutOfOrder, &["data.outcome", "the checkpoint landed"]);
    assert_eq!(field(&e), "data.outcome");
    append_all(&s, vec![compaction_end("landed")]);
    assert_eq!(generation(&s), 1);
}

#[test]
fn an_assistant_message_cannot_replace() {
    let s = session_with_header();
    append_all(&s, vec![turn_start(1), user("q"), step_start(1, 1)]);
    let mut ev = assistant(1, 1, "x", &[]);
    ev.surface_op = Some(SurfaceOp::Replace { start: 0, end: 0 });
    ev.sources = Some(vec![2]);
    rejected(&s, ev, ErrorKind::InvalidInput, &["assistant/message", "surfaceOp", "an assistant message is appended"]);
}

// ---------------------------------------------------------------------------------------------
// Fork

#[test]
fn a_fork_at_a_turn_boundary_records_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_header();
    append_all(&s, complete_turn(1));
    let boundary = s.len() as u64;
    append_all(&s, complete_turn(2));
    let fork_path = dir.path().join("fork.jsonl");
    let store = llmsession::store::JsonlStore::open(&fork_path).unwrap();
    let f = s.fork(Some(boundary), Box::new(store), SessionOptions::default()).unwrap();
    assert_ne!(f.id(), s.id());
    assert_eq!(f.header_record().parent, Some((s.id(), boundary)));
    assert_eq!(f.len() as u64, boundary);
    // The same events; each record is chained anew under the fork's own header.
    let unchained = |s: &Session| -> Vec<String> {
        s.with_log(|l| l.lines().iter().map(|r| llmsession::log::chain::without_chain(r).into_owned()).collect())
    };
    assert_eq!(unchained(&f), unchained(&s)[..boundary as usize]);
    assert_ne!(f.records().unwrap()[1], s.records().unwrap()[1]);
    // The header record on disk names the parent and the seed length.
    let text = std::fs::read_to_string(&fork_path).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "session");
    assert_eq!(first["parent"], json!({"id": s.id(), "seedLength": boundary}));
    assert_eq!(text.lines().count() as u64, boundary + 1);
    // The fork goes its own way: its next turn is turn 2.
    append_all(&f, complete_turn(2));
    assert_eq!(f.len(), s.len());
    // And it reopens with its parent.
    drop(f);
    let (g, report) = Session::open_jsonl(&fork_path, SessionOptions::default()).unwrap();
    assert_eq!(report, Default::default());
    assert_eq!(g.header_record().parent, Some((s.id(), boundary)));
}

#[test]
fn a_fork_inside_an_open_turn_is_rejected() {
    let s = session_with_header();
    append_all(&s, complete_turn(1));
    let boundary = s.len() as u64;
    append_all(&s, vec![turn_start(2), user("q"), step_start(2, 1)]);
    for n in [boundary + 1, boundary + 2, boundary + 3, 2, 5] {
        let (store, stats) = CountingStore::new();
        let e = s.fork(Some(n), Box::new(store), SessionOptions::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(field(&e), "seedLength");
        assert!(e.message().contains(&format!("{n} events do not end at a turn boundary")), "{}", e.message());
        assert_eq!(stats.lock().unwrap().appends, 0, "a rejected fork writes nothing");
    }
    // Inside an open compaction too.
    let t = session_with_header();
    append_all(&t, vec![host("to compact")]);
    append_all(&t, vec![compaction_start_for(&t, 0, 0)]);
    let e = t.fork(Some(3), Box::new(MemoryStore::new()), SessionOptions::default()).unwrap_err();
    assert!(e.message().contains("do not end at a turn boundary"), "{}", e.message());
}

#[test]
fn the_default_fork_point_is_the_last_boundary() {
    let s = session_with_header();
    append_all(&s, complete_turn(1));
    let boundary = s.len() as u64;
    append_all(&s, vec![turn_start(2), user("q"), step_start(2, 1), assistant(2, 1, "x", &[("z", "t", "{}")])]);
    let f = s.fork(None, Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    assert_eq!(f.len() as u64, boundary);
    assert_eq!(f.header_record().parent, Some((s.id(), boundary)));
    // At rest, the default is the whole log.
    let t = session_with_header();
    append_all(&t, complete_turn(1));
    append_all(&t, vec![host("after the turn")]);
    let g = t.fork(None, Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    assert_eq!(g.len(), t.len());
    assert_eq!(g.history_json(), t.history_json());
    assert_eq!(g.request_header(), t.request_header());
    // Forking an empty session gives an empty session.
    let e = Session::in_memory();
    let h = e.fork(None, Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    assert!(h.is_empty());
    assert_eq!(h.header_record().parent, Some((e.id(), 0)));
}

#[test]
fn a_fork_past_the_end_or_into_a_used_store_is_rejected() {
    let s = session_with_header();
    append_all(&s, complete_turn(1));
    let n = s.len() as u64;
    let e = s.fork(Some(n + 1), Box::new(MemoryStore::new()), SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(&e), "seedLength");
    assert!(e.message().contains(&format!("{} is past the end of the log ({n} events)", n + 1)), "{}", e.message());
    let used = MemoryStore::with_records(vec!["{}".into()]);
    let e = s.fork(Some(n), Box::new(used), SessionOptions::default()).unwrap_err();
    assert_eq!(field(&e), "store");
    assert!(e.message().contains("already holds a session"), "{}", e.message());
}

// ---------------------------------------------------------------------------------------------
// Durability and store failures

fn syncs_for(durability: Durability) -> (usize, usize, usize) {
    let (s, stats) = counting_session(SessionOptions { durability, id: None, ..SessionOptions::default() });
    let base = stats.lock().unwrap().syncs;
    append_all(&s, vec![header("initial", 1, "")]);
    append_all(&s, complete_turn(1));
    let after_turn = stats.lock().unwrap().syncs - base;
    let seqs = s.with_log(|l| l.history().seqs());
    append_all(
        &s,
        vec![compaction_start_seqs(0, 3, seqs.clone()), compaction_summary("s"), checkpoint("c", 0, 3, seqs), compaction_end("landed")],
    );
    let after_compaction = stats.lock().unwrap().syncs - base;
    s.sync().unwrap();
    let after_explicit = stats.lock().unwrap().syncs - base;
    assert_eq!(stats.lock().unwrap().records, s.len() + 1, "every event is stored, after the session header");
    (after_turn, after_compaction, after_explicit)
}

#[test]
fn every_event_durability_syncs_after_each_event() {
    // 1 header + 11 turn events; then 4 compaction events; then one explicit sync.
    assert_eq!(syncs_for(Durability::EveryEvent), (12, 16, 17));
}

#[test]
fn turn_end_durability_syncs_at_turn_and_compaction_ends() {
    assert_eq!(syncs_for(Durability::TurnEnd), (1, 2, 3));
}

#[test]
fn never_durability_leaves_syncing_to_the_os() {
    assert_eq!(syncs_for(Durability::Never), (0, 0, 1));
}

#[test]
fn durability_names_parse() {
    assert_eq!(Durability::parse("every-event").unwrap(), Durability::EveryEvent);
    assert_eq!(Durability::parse("turn-end").unwrap(), Durability::TurnEnd);
    assert_eq!(Durability::parse("never").unwrap(), Durability::Never);
    let e = Durability::parse("sometimes").unwrap_err();
    assert_eq!(field(&e), "durability");
    assert!(e.message().contains("\"sometimes\""));
}

#[test]
fn a_failing_store_append_leaves_the_log_unchanged_and_usable() {
    let (s, stats) = counting_session(SessionOptions::default());
    append_all(&s, vec![header("initial", 1, "")]);
    append_all(&s, vec![turn_start(1), user("q")]);
    let records = stats.lock().unwrap().records;
    stats.lock().unwrap().fail_append_after = Some(records);
    let before = observe(&s);
    let e = s.append(step_start(1, 1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
    assert!(e.message().contains("disk full"), "{}", e.message());
    assert_eq!(observe(&s), before);
    // A visible event too: the history is unchanged.
    let e = s.append(host("ctx")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
    assert_eq!(observe(&s), before);
    assert_eq!(stats.lock().unwrap().records, records);
    // The store recovers; the same events now go in at the same seqs.
    stats.lock().unwrap().fail_append_after = None;
    assert_eq!(s.append(host("ctx")).unwrap(), before.len as u64);
    assert_eq!(s.append(step_start(1, 1)).unwrap(), before.len as u64 + 1);
    assert_eq!(stats.lock().unwrap().records, s.len() + 1);
}

#[test]
fn a_failing_sync_drops_the_record_and_leaves_the_log_unchanged() {
    let (s, stats) = counting_session(SessionOptions { durability: Durability::EveryEvent, id: None, ..SessionOptions::default() });
    append_all(&s, vec![header("initial", 1, ""), turn_start(1)]);
    let records = stats.lock().unwrap().records;
    stats.lock().unwrap().fail_sync = true;
    let before = observe(&s);
    let e = s.append(user("q")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
    assert_eq!(observe(&s), before);
    assert_eq!(stats.lock().unwrap().records, records, "the unsynced record was taken back");
    stats.lock().unwrap().fail_sync = false;
    append_all(&s, vec![user("q")]);
    assert_eq!(stats.lock().unwrap().records, s.len() + 1);
}

#[test]
fn a_session_header_write_failure_creates_nothing() {
    let (store, stats) = CountingStore::new();
    stats.lock().unwrap().fail_append_after = Some(0);
    let e = Session::create(Box::new(store), SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
}

#[test]
fn a_new_session_id_must_not_be_empty() {
    // The loader rejects an empty id, so creating one would make a session that cannot be
    // opened again.
    let opts = || SessionOptions { id: Some(String::new()), ..Default::default() };
    let (store, stats) = CountingStore::new();
    let e = Session::create(Box::new(store), opts()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(&e), "id");
    assert_eq!(stats.lock().unwrap().appends, 0);
    let s = session_with_header();
    let e = s.fork(None, Box::new(MemoryStore::new()), opts()).unwrap_err();
    assert_eq!(field(&e), "id");
    let named = Session::create(Box::new(MemoryStore::new()), SessionOptions { id: Some("mine".into()), ..Default::default() }).unwrap();
    assert_eq!(named.id(), "mine");
    assert_eq!(Session::in_memory().id().len(), 32);
}

#[test]
fn an_empty_event_type_is_rejected() {
    // The loader refuses an empty type, so the append must too.
    let s = session_with_header();
    let e = rejected(&s, NewEvent::new("", json!({})), ErrorKind::InvalidInput, &["event (seq 1): type: must not be empty"]);
    assert_eq!(field(&e), "type");
}

#[test]
fn tool_blocks_only_travel_in_their_own_events() {
    // A tool-result block inside a message would answer a call outside the pairing rules, and a
    // tool call in a user message is no call at all.
    let s = session_with_header();
    append_all(&s, vec![turn_start(1)]);
    let mut ev = host("x");
    ev.data["message"]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "tool-result", "toolCallId": "c9", "content": [], "isError": false}));
    let e = rejected(
        &s,
        ev,
        ErrorKind::InvalidInput,
        &["user/message", "data.message.content[1]", "a tool-result block belongs in a tool/result event"],
    );
    assert_eq!(field(&e), "data.message.content[1]");
    let mut ev = user("x");
    ev.data["message"]["content"][0] = json!({"type": "tool-call", "id": "c9", "name": "t", "arguments": "{}"});
    let e =
        rejected(&s, ev, ErrorKind::InvalidInput, &["user/message", "data.message.content[0]", "only an assistant message calls tools"]);
    assert_eq!(field(&e), "data.message.content[0]");
    append_all(&s, vec![step_start(1, 1)]);
    let mut ev = assistant(1, 1, "x", &[]);
    ev.data["message"]["content"][0] = json!({"type": "tool-result", "toolCallId": "c9", "content": [], "isError": false});
    rejected(
        &s,
        ev,
        ErrorKind::InvalidInput,
        &["assistant/message", "data.message.content[0]", "a tool-result block belongs in a tool/result event"],
    );
}

#[test]
fn a_live_agent_owns_the_turn_events() {
    let s = session_with_header();
    let agent = llmsession::Agent::new(&s, llmsession::AgentOptions::new(llmsession::CallConfig::new("p", "m"))).unwrap();
    for ev in
        [turn_start(1), step_start(1, 1), header("change", 1, "x"), compaction_start_any(), user("mine"), checkpoint("c", 0, 0, vec![0])]
    {
        let ty = ev.ty.clone();
        let e = rejected(&s, ev, ErrorKind::OutOfOrder, &[&ty, "the live agent instance owns this event type"]);
        assert_eq!(e.detail()["eventType"], ty.as_str());
    }
    // Host context and the host's own types still go in.
    append_all(&s, vec![host("ctx"), user_from("plugin", "p"), NewEvent::new("acme/x", json!({}))]);
    drop(agent);
    append_all(&s, vec![turn_start(1)]);
}

#[test]
fn a_compaction_announces_its_span_and_the_checkpoint_must_replace_exactly_it() {
    let (s, seqs) = surface_of_four();
    // The announced seqs must be the span's events, and the span must exist.
    let e = rejected(&s, compaction_start_seqs(0, 0, vec![seqs[1]]), ErrorKind::InvalidInput, &["compaction/start", "data.seqs"]);
    assert_eq!(e.detail()["field"], "data.seqs");
    rejected(&s, compaction_start_seqs(0, 9, vec![]), ErrorKind::InvalidInput, &["compaction/start", "data.span.end"]);
    rejected(
        &s,
        NewEvent::new("compaction/start", json!({"trigger": "manual"})),
        ErrorKind::InvalidInput,
        &["compaction/start", "data.span: is required"],
    );
    open_compaction(&s, 0, 0);
    // A checkpoint over another (valid) span than the announced one is refused.
    let before = observe(&s);
    rejected(
        &s,
        checkpoint("x", 1, 2, vec![seqs[1], seqs[2]]),
        ErrorKind::OutOfOrder,
        &["user/message", "the span its compaction/start announced (0..=0"],
    );
    assert_eq!(observe(&s), before);
    s.append(checkpoint("x", 0, 0, vec![seqs[0]])).unwrap();
}
