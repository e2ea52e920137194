//! The JSONL store (issue #2): a saved log loads back equal; a torn tail is cut; damage before
//! the last complete turn is an error naming the line; a turn left open by a crash is closed
//! with synthetic events that are written durably.

mod common;

use common::*;
use llmsession::error::ErrorKind;
use llmsession::log::load::LoadReport;
use llmsession::{NewEvent, Session, SessionOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn open(path: &Path) -> (Session, LoadReport) {
    Session::open_jsonl(path, SessionOptions::default()).unwrap_or_else(|e| panic!("open failed: {e}"))
}

fn new_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    (dir, path)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

fn types_of(path: &Path) -> Vec<String> {
    lines(path).iter().map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].as_str().unwrap().to_string()).collect()
}

/// A file holding the initial header and `turns` complete turns, then `tail`.
/// The seq of the first surface event written by `saved` (header 0, turn/start 1, user 2).
const FIRST_SURFACE_SEQ: u64 = 2;

fn saved(path: &Path, turns: u64, tail: Vec<NewEvent>) -> Observed {
    let (s, report) = open(path);
    assert_eq!(report, LoadReport::default());
    append_all(&s, vec![header("initial", 1, "sys")]);
    for t in 1..=turns {
        append_all(&s, complete_turn(t));
    }
    append_all(&s, tail);
    observe(&s)
}

#[test]
fn a_saved_log_loads_back_equal() {
    let (_dir, path) = new_file();
    let (s, _) = open(&path);
    let id = s.id();
    append_all(&s, vec![header("initial", 1, "line a\nline b")]);
    append_all(&s, complete_turn(1));
    append_all(
        &s,
        vec![
            NewEvent::new(
                "request/header-delta",
                json!({"delta": {"system": {"keepLeading": 1, "keepTrailing": 0, "insert": ["line c"]}}, "instance": 1}),
            ),
            host("context between turns"),
            NewEvent::new("acme/audit", json!({"who": "ops"})),
        ],
    );
    append_all(&s, complete_turn(2));
    let seqs = s.with_log(|l| l.history().seqs());
    append_all(
        &s,
        vec![
            compaction_start_seqs(1, 4, seqs[1..=4].to_vec()),
            compaction_summary("two turns"),
            checkpoint("two turns happened", 1, 4, seqs[1..=4].to_vec()),
            compaction_end("landed"),
        ],
    );
    append_all(&s, vec![header("resume", 2, "line a\nline c")]);
    append_all(
        &s,
        vec![
            turn_start(3),
            user("third"),
            step_start_of(3, 1, 2),
            assistant(3, 1, "ok", &[]),
            step_end(3, 1, "response"),
            turn_end(3, "completed"),
        ],
    );
    let before = observe(&s);
    assert_eq!(before.generation, 1);
    drop(s);

    // The file is the session header and then exactly the event lines.
    let file = lines(&path);
    assert_eq!(file.len(), before.len + 1);
    let first: Value = serde_json::from_str(&file[0]).unwrap();
    assert_eq!(first["type"], "session");
    assert_eq!(first["format"], "llmsession");
    assert_eq!(first["version"], 2);
    assert_eq!(first["id"], id.as_str());
    assert!(first["createdAt"].as_u64().unwrap() > 0);
    assert_eq!(format!("[{}]", file[1..].join(",")), before.events);

    let (t, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert_eq!(t.id(), id);
    assert_eq!(observe(&t), before);
    assert_eq!(t.request_header().unwrap().system_str(), "line a\nline c");
    // And it goes on where it stopped.
    append_all(&t, vec![turn_start(4)]);
}

#[test]
fn a_torn_last_line_is_cut() {
    let (_dir, path) = new_file();
    let before = saved(&path, 1, vec![NewEvent::new("acme/note", json!({"text": "the last word"}))]);
    let whole = std::fs::read(&path).unwrap();
    let last_len = lines(&path).last().unwrap().len() + 1;
    let good = whole.len() - last_len;
    // Cut the last line in the middle.
    std::fs::write(&path, &whole[..good + last_len / 2]).unwrap();
    let (s, report) = open(&path);
    assert_eq!(report.cut_records, 1);
    assert_eq!(report.cut_at_line, Some(before.len + 1));
    assert!(report.cut_reason.is_some());
    assert_eq!(report.repaired_events, 0);
    assert_eq!(s.len(), before.len - 1);
    assert_eq!(std::fs::read(&path).unwrap(), &whole[..good], "the torn line is cut from the file");
    append_all(&s, vec![host("goes on")]);
    drop(s);
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert_eq!(s.len(), before.len);
}

#[test]
fn a_last_line_without_its_newline_is_torn() {
    // The write of the last record stopped just before its newline: the append never
    // returned, so the record is not part of the log, and later appends must not be glued to it.
    let (_dir, path) = new_file();
    let before = saved(&path, 1, vec![NewEvent::new("acme/note", json!({"text": "unfinished"}))]);
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
    let (s, report) = open(&path);
    assert_eq!(report.cut_records, 1);
    assert_eq!(report.cut_at_line, Some(before.len + 1));
    assert_eq!(s.len(), before.len - 1);
    append_all(&s, vec![host("next")]);
    drop(s);
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default(), "the file is whole after the cut");
    assert_eq!(s.len(), before.len);
    assert!(std::fs::read(&path).unwrap().ends_with(b"\n"));
}

#[test]
fn damage_before_the_last_complete_turn_names_the_line() {
    let (_dir, path) = new_file();
    saved(&path, 2, vec![]);
    let mut file = lines(&path);
    file[4] = "{\"type\":\"step/start\",\"seq\":3,\"ti".into(); // line 5
    let text = file.join("\n") + "\n";
    std::fs::write(&path, &text).unwrap();
    let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains("line 5"), "{}", e.message());
    assert!(e.message().contains("damage before the last complete turn"), "{}", e.message());
    assert!(e.message().contains(path.to_str().unwrap()), "the message names the file: {}", e.message());
    assert_eq!(e.detail()["line"], 5);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "a rejected file is left untouched");
}

#[test]
fn a_rule_violation_before_the_last_complete_turn_names_the_line_and_field() {
    let (_dir, path) = new_file();
    saved(&path, 2, vec![]);
    let mut file = lines(&path);
    // Line 3 is turn/start of turn 1: renumber it.
    let mut ev: Value = serde_json::from_str(&file[2]).unwrap();
    assert_eq!(ev["type"], "turn/start");
    ev["data"]["turn"] = json!(5);
    file[2] = ev.to_string();
    rechain(&mut file);
    std::fs::write(&path, file.join("\n") + "\n").unwrap();
    let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains("line 3"), "{}", e.message());
    assert!(e.message().contains("data.turn"), "{}", e.message());
    assert_eq!(e.detail()["line"], 3);
    assert_eq!(e.detail()["field"], "data.turn");
    assert_eq!(e.detail()["eventType"], "turn/start");

    // A missing line is a seq gap.
    let (_dir2, path2) = new_file();
    saved(&path2, 2, vec![]);
    let mut file = lines(&path2);
    file.remove(6);
    rechain(&mut file);
    std::fs::write(&path2, file.join("\n") + "\n").unwrap();
    let e = Session::open_jsonl(&path2, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert_eq!(e.detail()["line"], 7);
    assert!(e.message().contains("seq: expected 5"), "{}", e.message());
}

#[test]
fn damage_inside_the_trailing_unfinished_turn_is_cut_and_repaired() {
    let (_dir, path) = new_file();
    let before = saved(
        &path,
        1,
        vec![turn_start(2), user("q"), step_start(2, 1), assistant(2, 1, "thinking", &[]), step_end(2, 1, "response"), host("x")],
    );
    let mut file = lines(&path);
    let n = file.len();
    // Garble the assistant message (three lines before the end).
    file[n - 3] = "{\"type\":\"assistant/mess###".into();
    std::fs::write(&path, file.join("\n") + "\n").unwrap();
    let (s, report) = open(&path);
    assert_eq!(report.cut_records, 3);
    assert_eq!(report.cut_at_line, Some(n - 2));
    assert!(report.cut_reason.as_deref().unwrap().contains("malformed JSON"), "{report:?}");
    // The step that was open is closed with an error, then the turn.
    assert_eq!(report.repaired_events, 2);
    assert_eq!(s.len(), before.len - 3 + 2);
    let types = types_of(&path);
    assert_eq!(&types[types.len() - 3..], ["step/start", "step/end", "turn/end"]);
    let end: Value = serde_json::from_str(lines(&path).last().unwrap()).unwrap();
    assert_eq!(end["data"], json!({"turn": 2, "reason": "interrupted"}));
    drop(s);
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    append_all(&s, vec![turn_start(3)]);
}

#[test]
fn a_rule_violation_in_the_trailing_unfinished_turn_is_cut() {
    let (_dir, path) = new_file();
    saved(&path, 1, vec![turn_start(2), user("q")]);
    let mut file = lines(&path);
    let mut ev: Value = serde_json::from_str(file.last().unwrap()).unwrap();
    ev["data"]["source"] = json!("robot");
    *file.last_mut().unwrap() = ev.to_string();
    file.push(serde_json::to_string(&json!({"type": "acme/x", "seq": 14, "time": 1, "data": {}})).unwrap());
    rechain(&mut file);
    std::fs::write(&path, file.join("\n") + "\n").unwrap();
    let (_s, report) = open(&path);
    assert_eq!(report.cut_records, 2);
    assert!(report.cut_reason.as_deref().unwrap().contains("data.source"), "{report:?}");
    assert_eq!(report.repaired_events, 1, "turn 2 (now without its message) is closed");
}

fn crash_and_reopen(tail: Vec<NewEvent>) -> (Session, LoadReport, Vec<Value>, tempfile::TempDir, PathBuf) {
    let (dir, path) = new_file();
    let before = saved(&path, 1, tail);
    let (s, report) = open(&path);
    // The repair is in the file, after the original events.
    let file = lines(&path);
    assert_eq!(file.len(), before.len + 1 + report.repaired_events);
    let repaired: Vec<Value> = file[before.len + 1..].iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(s.events_json(before.len as u64, None).unwrap(), format!("[{}]", file[before.len + 1..].join(",")));
    assert_eq!(s.events_json(0, Some(before.len as u64)).unwrap(), before.events, "nothing before the repair changed");
    assert!(s.with_log(|l| l.state().at_rest()), "the repaired log is at rest");
    (s, report, repaired, dir, path)
}

fn reopen_needs_no_repair(path: &Path, s: Session) {
    let after = observe(&s);
    drop(s);
    let (s, report) = open(path);
    assert_eq!(report, LoadReport::default());
    assert_eq!(observe(&s), after);
}

fn ty(v: &Value) -> &str {
    v["type"].as_str().unwrap()
}

#[test]
fn a_crash_inside_an_open_step_is_repaired() {
    let (s, report, repaired, _dir, path) = crash_and_reopen(vec![turn_start(2), user("q"), step_start(2, 1)]);
    assert_eq!(report.repaired_events, 2);
    assert_eq!(report.cut_records, 0);
    assert_eq!(repaired.iter().map(ty).collect::<Vec<_>>(), ["step/end", "turn/end"]);
    assert_eq!(repaired[0]["data"]["outcome"], "error");
    assert_eq!(repaired[0]["data"]["step"], 1);
    assert!(repaired[0]["data"]["error"].as_str().unwrap().contains("interrupted"));
    assert_eq!(repaired[1]["data"], json!({"turn": 2, "reason": "interrupted"}));
    reopen_needs_no_repair(&path, s);
}

#[test]
fn a_crash_after_an_answer_with_pending_tool_calls_is_repaired() {
    let calls = [("x1", "read", "{\"a\":1}"), ("x2", "write", "{}"), ("x3", "list", "{}")];
    let (s, report, repaired, _dir, path) = crash_and_reopen(vec![
        turn_start(2),
        user("q"),
        step_start(2, 1),
        assistant(2, 1, "three tools", &calls),
        tool_call(2, 1, "x1", "read", "{\"a\":1}"),
    ]);
    assert_eq!(
        repaired.iter().map(ty).collect::<Vec<_>>(),
        ["tool/call", "tool/call", "step/end", "tool/result", "tool/result", "tool/result", "turn/end"]
    );
    assert_eq!(report.repaired_events, 7);
    assert_eq!(repaired[0]["data"], json!({"turn": 2, "step": 1, "callId": "x2", "name": "write", "arguments": "{}"}));
    assert_eq!(repaired[1]["data"]["callId"], "x3");
    assert_eq!(repaired[2]["data"]["outcome"], "response");
    for (r, id) in repaired[3..6].iter().zip(["x1", "x2", "x3"]) {
        assert_eq!(r["data"]["callId"], id);
        assert_eq!(r["data"]["isError"], true);
        assert_eq!(r["surfaceOp"], "append");
    }
    assert_eq!(repaired[6]["data"]["reason"], "interrupted");
    // Every call of the history now has its result.
    let hist: Vec<Value> = serde_json::from_str(&s.history_json()).unwrap();
    let results: Vec<&str> = hist.iter().flat_map(|m| m["content"].as_array().unwrap()).filter_map(|b| b["toolCallId"].as_str()).collect();
    assert!(["x1", "x2", "x3"].iter().all(|id| results.contains(id)), "{results:?}");
    reopen_needs_no_repair(&path, s);
}

#[test]
fn a_crash_during_a_tool_batch_is_repaired() {
    let (s, report, repaired, _dir, path) = crash_and_reopen(vec![
        turn_start(2),
        user("q"),
        step_start(2, 1),
        assistant(2, 1, "two tools", &[("y1", "t", "{}"), ("y2", "t", "{}")]),
        tool_call(2, 1, "y1", "t", "{}"),
        tool_call(2, 1, "y2", "t", "{}"),
        step_end(2, 1, "response"),
        tool_result("y1", "done"),
    ]);
    assert_eq!(report.repaired_events, 2);
    assert_eq!(repaired.iter().map(ty).collect::<Vec<_>>(), ["tool/result", "turn/end"]);
    assert_eq!(repaired[0]["data"]["callId"], "y2");
    assert_eq!(repaired[0]["data"]["isError"], true);
    reopen_needs_no_repair(&path, s);
}

#[test]
fn a_crash_between_steps_closes_just_the_turn() {
    let (s, report, repaired, _dir, path) = crash_and_reopen(vec![turn_start(2), user("q")]);
    assert_eq!(report.repaired_events, 1);
    assert_eq!(repaired[0]["data"], json!({"turn": 2, "reason": "interrupted"}));
    reopen_needs_no_repair(&path, s);
}

#[test]
fn a_crash_during_a_compaction_is_repaired() {
    // Summarised, not landed: the compaction failed.
    let (s, report, repaired, _dir, path) =
        crash_and_reopen(vec![compaction_start_seqs(0, 0, vec![FIRST_SURFACE_SEQ]), compaction_summary("s")]);
    assert_eq!(report.repaired_events, 1);
    assert_eq!(ty(&repaired[0]), "compaction/end");
    assert_eq!(repaired[0]["data"]["outcome"], "failed");
    assert!(repaired[0]["data"]["error"].as_str().unwrap().contains("interrupted"));
    assert_eq!(s.with_log(|l| l.history().generation()), 0);
    reopen_needs_no_repair(&path, s);
}

#[test]
fn a_crash_after_a_checkpoint_landed_ends_the_compaction_as_landed() {
    let (dir, path) = new_file();
    saved(&path, 1, vec![]);
    let (s, _) = open(&path);
    let seqs = s.with_log(|l| l.history().seqs());
    append_all(&s, vec![compaction_start_seqs(0, 3, seqs.clone()), compaction_summary("s"), checkpoint("c", 0, 3, seqs)]);
    let hist = s.history_json();
    drop(s);
    let (s, report) = open(&path);
    assert_eq!(report.repaired_events, 1);
    let last: Value = serde_json::from_str(lines(&path).last().unwrap()).unwrap();
    assert_eq!(last["type"], "compaction/end");
    assert_eq!(last["data"], json!({"outcome": "landed"}));
    assert_eq!(s.history_json(), hist, "the landed checkpoint stays");
    reopen_needs_no_repair(&path, s);
    drop(dir);
}

#[test]
fn a_crash_with_a_compaction_inside_an_open_turn_closes_both() {
    let (s, report, repaired, _dir, path) =
        crash_and_reopen(vec![turn_start(2), user("q"), compaction_start_seqs(0, 0, vec![FIRST_SURFACE_SEQ])]);
    assert_eq!(report.repaired_events, 2);
    assert_eq!(repaired.iter().map(ty).collect::<Vec<_>>(), ["compaction/end", "turn/end"]);
    reopen_needs_no_repair(&path, s);
}

#[test]
fn the_session_header_is_checked() {
    let (_dir, path) = new_file();
    saved(&path, 1, vec![]);
    let file = lines(&path);
    let mut head: Value = serde_json::from_str(&file[0]).unwrap();
    for (key, value, needle) in [
        ("version", json!(3), "unsupported log version 3"),
        ("format", json!("other"), "format: expected \"llmsession\""),
        ("type", json!("turn/start"), "the first record must be the session header"),
        ("id", json!(""), "id: must not be empty"),
    ] {
        let saved_value = head[key].clone();
        head[key] = value;
        let mut f = file.clone();
        f[0] = head.to_string();
        std::fs::write(&path, f.join("\n") + "\n").unwrap();
        let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
        assert!(e.message().contains("line 1"), "{}", e.message());
        assert!(e.message().contains(needle), "{} lacks {needle:?}", e.message());
        assert_eq!(e.detail()["line"], 1);
        head[key] = saved_value;
    }
    // Unknown header fields are kept.
    head["hostName"] = json!("box-1");
    let mut f = file.clone();
    f[0] = head.to_string();
    // The header starts the chain: edited by hand, the first event no longer matches it.
    std::fs::write(&path, f.join("\n") + "\n").unwrap();
    let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
    assert_eq!(e.detail()["line"], 2, "{}", e.message());
    assert!(e.message().contains("chained digest does not match"), "{}", e.message());
    rechain(&mut f);
    std::fs::write(&path, f.join("\n") + "\n").unwrap();
    let (s, _) = open(&path);
    assert_eq!(s.header_record().extra["hostName"], "box-1");
}

#[test]
fn an_empty_file_becomes_a_new_session() {
    let (_dir, path) = new_file();
    std::fs::write(&path, b"").unwrap();
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert!(s.is_empty());
    assert_eq!(lines(&path).len(), 1);
    // A second writer is refused while the first holds the file.
    let e = llmsession::store::JsonlStore::open(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
    drop(s);
    // Creating over a used store is refused.
    let store = llmsession::store::JsonlStore::open(&path).unwrap();
    let e = Session::create(Box::new(store), SessionOptions::default()).unwrap_err();
    assert!(e.message().contains("already holds a session"), "{}", e.message());
}

/// `data` nested `levels` deep: `{"x": [[...[1]...]]}`.
fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 1..levels {
        v = Value::Array(vec![v]);
    }
    json!({ "x": v })
}

#[test]
fn an_event_too_deep_to_load_back_is_rejected() {
    // JSON readers (serde_json included) stop at 128 levels: an event nested deeper would be
    // written but make the file unloadable, so the append is refused.
    let (_dir, path) = new_file();
    let (s, _) = open(&path);
    let e = rejected(
        &s,
        NewEvent::new("acme/deep", nested(101)),
        ErrorKind::InvalidInput,
        &["acme/deep", "data", "nests deeper than 100 levels"],
    );
    assert_eq!(field(&e), "data");
    // A message nested deep inside a user message is refused the same way.
    append_all(&s, vec![turn_start(1)]);
    let mut deep = user("x");
    deep.data["message"]["content"][0]["meta"] = nested(98);
    rejected(&s, deep, ErrorKind::InvalidInput, &["user/message", "nests deeper than 100 levels"]);
    append_all(&s, vec![NewEvent::new("acme/deep", nested(100)), turn_end(1, "completed")]);
    let before = observe(&s);
    drop(s);
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert_eq!(observe(&s), before);
}

/// A version 2 log edited anywhere, with records swapped, inserted or removed, fails to open and
/// to verify, naming the line: every line of a finished session is tried, the last assistant
/// message and the last `turn/end` included (content no request has carried yet).
#[test]
fn an_edit_anywhere_fails_open_and_verify_naming_the_line() {
    let (_dir, path) = new_file();
    saved(&path, 3, vec![]);
    let file = lines(&path);
    let n = file.len();
    let check = |bad: &[String], line: usize, what: &str| {
        std::fs::write(&path, bad.join("\n") + "\n").unwrap();
        let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CorruptLog, "{what}: {}", e.message());
        assert_eq!(e.detail()["line"], line as u64, "{what}: {}", e.message());
        assert!(e.message().contains(&format!("line {line}")), "{what}: {}", e.message());
        let contents = llmsession::store::StoreContents::from_jsonl(&std::fs::read(&path).unwrap());
        let v = llmsession::request::verify_contents(&contents).unwrap_err();
        assert_eq!(v.detail()["line"], line as u64, "verify, {what}: {}", v.message());
        // The file is left as it was found.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), bad.join("\n") + "\n", "{what}");
    };
    for i in 1..n {
        // One changed byte inside the data (a digit or letter of the record).
        let mut bad = file.clone();
        let at = bad[i].find("\"data\":").unwrap() + 9;
        let mut bytes = bad[i].clone().into_bytes();
        let j = (at..bytes.len()).find(|&k| bytes[k].is_ascii_alphanumeric()).unwrap();
        bytes[j] = if bytes[j] == b'1' { b'2' } else { b'1' };
        bad[i] = String::from_utf8(bytes).unwrap();
        check(&bad, i + 1, &format!("edit of line {}", i + 1));
    }
    // Two records swapped: the first of them is out of its place in the chain.
    let mut bad = file.clone();
    bad.swap(4, 5);
    check(&bad, 5, "swap");
    // A record inserted (a copy of an earlier one).
    let mut bad = file.clone();
    bad.insert(6, file[3].clone());
    check(&bad, 7, "insertion");
    // A record removed from the middle: the one after it no longer follows.
    let mut bad = file.clone();
    bad.remove(6);
    check(&bad, 7, "removal");
    // The header edited: the first event no longer matches it.
    let mut bad = file.clone();
    bad[0] = bad[0].replacen("\"createdAt\":", "\"createdAt\":1", 1);
    check(&bad, 2, "header edit");
    // Whole records removed from the end leave a shorter valid chain: only a head kept elsewhere
    // tells (the chain head of the intact log differs from the short one's).
    std::fs::write(&path, file.join("\n") + "\n").unwrap();
    let head = open(&path).0.chain_head().unwrap();
    let last_but_one_end = file
        .iter()
        .rposition(|l| l.contains("\"turn/end\""))
        .map(|i| file[..i].iter().rposition(|l| l.contains("\"turn/end\"")).unwrap())
        .unwrap();
    let short = &file[..=last_but_one_end];
    std::fs::write(&path, short.join("\n") + "\n").unwrap();
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert_ne!(s.chain_head().unwrap(), head);
    assert_eq!(head.events, (n - 1) as u64);
}

/// A torn tail cut on open is kept, byte for byte, in a sidecar file next to the log.
#[test]
fn cut_records_are_kept_in_a_sidecar_file() {
    let (dir, path) = new_file();
    saved(&path, 1, vec![turn_start(2), user("the prompt that must not be lost"), host("context")]);
    let whole = std::fs::read(&path).unwrap();
    // Garble the user message of the unfinished turn: it and what follows are cut.
    let text = String::from_utf8(whole.clone()).unwrap();
    let at = text.find("the prompt").unwrap();
    let line_start = text[..at].rfind('\n').unwrap() + 1;
    let mut bad = whole.clone();
    bad[line_start] = b'#'; // no longer JSON: damage a crash could leave
    std::fs::write(&path, &bad).unwrap();
    let (_s, report) = open(&path);
    assert_eq!(report.cut_records, 2);
    assert!(report.cut_damaged);
    let side = report.cut_saved_to.expect("the report names the sidecar file");
    assert!(side.starts_with(&format!("{}.cut-", path.display())), "{side}");
    assert_eq!(std::fs::read(&side).unwrap(), &bad[line_start..], "the sidecar holds exactly the cut bytes");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&side).unwrap().permissions().mode() & 0o777, 0o600);
    drop(dir);
}

#[test]
fn a_file_read_whole_loads_what_its_records_load_one_by_one() {
    // An open reads a JSONL file whole and keeps its lines as ranges of that one text; the
    // loader given the same records one by one must build the same log: the same lines, byte
    // for byte, the same history and the same chain head.
    let (_dir, path) = new_file();
    let tail = vec![
        turn_start(4),
        user("é ünïcode ✓ \u{1F600}"),
        step_start(4, 1),
        assistant(4, 1, "ça va ✓", &[]),
        step_end(4, 1, "response"),
        turn_end(4, "completed"),
    ];
    let before = saved(&path, 3, tail);
    let file = lines(&path);
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    assert_eq!(observe(&s), before);
    let stored: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    assert_eq!(stored, file, "every loaded line is its stored record");

    let contents = llmsession::store::StoreContents::from_jsonl(std::fs::read(&path).unwrap().as_slice());
    let one_by_one = llmsession::log::load::load_records(&contents).unwrap();
    let lines_of = |l: &llmsession::log::Log| l.lines().iter().map(|t| t.to_string()).collect::<Vec<_>>();
    let history_of = |l: &llmsession::log::Log| l.history().entries().iter().map(|d| d.json.to_string()).collect::<Vec<_>>();
    assert_eq!(lines_of(&one_by_one.log), file[1..].to_vec());
    assert_eq!(s.with_log(history_of), history_of(&one_by_one.log));
    assert_eq!(s.chain_head().unwrap().chain, llmsession::log::chain::hex(one_by_one.log.chain_head().unwrap()));
}

#[test]
fn a_file_that_is_not_utf8_in_its_unfinished_turn_is_cut_as_before() {
    // A file that is not valid UTF-8 cannot be kept as one text: its records are read one by
    // one, and the damage is cut from the unfinished last turn as any other damage is.
    let (_dir, path) = new_file();
    let before = saved(&path, 1, vec![turn_start(2), user("q"), step_start(2, 1)]);
    let mut bytes = std::fs::read(&path).unwrap();
    let n = lines(&path).len();
    bytes.extend_from_slice(b"{\"type\":\"acme/note\",\"data\":\"\xff\xfe\"}\n");
    std::fs::write(&path, &bytes).unwrap();
    let (s, report) = open(&path);
    assert_eq!(report.cut_records, 1);
    assert_eq!(report.cut_at_line, Some(n + 1));
    assert!(report.cut_damaged);
    assert!(report.cut_reason.as_deref().unwrap().contains("invalid UTF-8"), "{report:?}");
    assert_eq!(s.len(), before.len + report.repaired_events);
    drop(s);
    let (_s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
}

// ---------------------------------------------------------------------------------------------
// The two ways of reading a record

/// `v` written as another writer might: every object's keys in reverse order, a space after
/// each colon and comma, every `e` in a string escaped as `\u0065`.
fn write_odd(v: &Value, out: &mut String) {
    let string = |s: &str, out: &mut String| {
        out.push('"');
        for c in s.chars() {
            match c {
                'e' => out.push_str("\\u0065"),
                c => {
                    let one = serde_json::to_string(&c.to_string()).unwrap();
                    out.push_str(&one[1..one.len() - 1]);
                }
            }
        }
        out.push('"');
    };
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, v)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                string(k, out);
                out.push_str(": ");
                write_odd(v, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_odd(v, out);
            }
            out.push(']');
        }
        Value::String(s) => string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// An event record as this library writes it: the envelope's members in their order, then any
/// other member, each value as serde_json writes it (no chain).
fn ours(v: &Value) -> String {
    let m = v.as_object().unwrap();
    let order = ["type", "seq", "time", "data", "surfaceOp", "sources"];
    let mut keys: Vec<&String> = order.iter().filter_map(|k| m.get_key_value(*k).map(|(k, _)| k)).collect();
    keys.extend(m.keys().filter(|k| !order.contains(&k.as_str()) && *k != "chain"));
    let members: Vec<String> = keys.iter().map(|k| format!("{}:{}", Value::from(k.as_str()), m[k.as_str()])).collect();
    format!("{{{}}}", members.join(","))
}

/// Seals every event record of `lines` (header first) again, in order.
fn seal_all(lines: &mut [String]) {
    let mut link = llmsession::log::chain::start(lines[0].as_bytes());
    for l in lines[1..].iter_mut() {
        let (rec, next) = llmsession::log::chain::seal(&link, &llmsession::log::chain::without_chain(l));
        link = next;
        *l = rec;
    }
}

/// The event records of `lines` (header first) written as another writer might
/// ([`write_odd`]), chained again when `chained`.
fn another_form(lines: &[String], chained: bool) -> Vec<String> {
    let mut out = vec![lines[0].clone()];
    let mut link = llmsession::log::chain::start(lines[0].as_bytes());
    for l in &lines[1..] {
        let mut v: Value = serde_json::from_str(l).unwrap();
        v.as_object_mut().unwrap().remove("chain");
        let mut body = String::new();
        write_odd(&v, &mut body);
        assert!(llmsession::log::load::record_head(body.as_bytes()).is_none(), "{body}: not this library's form");
        if chained {
            let (rec, next) = llmsession::log::chain::seal(&link, &body);
            link = next;
            body = rec;
        }
        out.push(body);
    }
    out
}

/// Everything a user can observe of an open session but its stored lines and chain (which differ
/// between two forms of the same events): the events as values (the time of the `repaired`
/// events the open appended left out), the history, the state and counters.
fn observed_state(s: &Session, repaired: usize) -> (Vec<Value>, Observed, String, Value, Vec<String>) {
    let repairs_from = s.len() - repaired;
    let events: Vec<Value> = serde_json::from_str::<Vec<Value>>(&s.events_json(0, None).unwrap())
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            let m = e.as_object_mut().unwrap();
            m.remove("chain");
            if i >= repairs_from {
                m.remove("time");
            }
            e
        })
        .collect();
    let mut o = observe(s);
    o.events = String::new();
    let (checkpoint, mut calls) =
        s.with_log(|l| (llmsession::log::checkpoint::data(l.state()), l.state().known_calls.iter().cloned().collect::<Vec<_>>()));
    calls.sort();
    let mut stats = s.stats();
    stats.chain_head = None;
    (events, o, format!("{stats:?}"), checkpoint, calls)
}

/// What opening `lines` as a file gives: the observed state and the report, or the error.
fn opened(
    lines: &[String],
    torn_tail: Option<&str>,
) -> std::result::Result<((Vec<Value>, Observed, String, Value, Vec<String>), LoadReport), String> {
    let (_dir, path) = new_file();
    let mut text = lines.join("\n") + "\n";
    if let Some(t) = torn_tail {
        text.push_str(t);
    }
    std::fs::write(&path, text).unwrap();
    match Session::open_jsonl(
        &path,
        SessionOptions { checkpoints: llmsession::log::checkpoint::CheckpointPolicy::OFF, ..SessionOptions::default() },
    ) {
        Ok((s, mut report)) => {
            report.cut_saved_to = None;
            Ok((observed_state(&s, report.repaired_events), report))
        }
        Err(e) => Err(format!("{:?} {} {:?}", e.kind(), e.message(), e.detail()).replace(&path.display().to_string(), "PATH")),
    }
}

/// A session whose records hold what the fast way must get exactly right: escapes and control
/// characters, unknown fields in data, messages and blocks, tool call ids with quotes, blocks of
/// unknown types, floats, a host's own event type, and a second (unfinished) turn.
fn odd_session_lines(path: &Path) -> Vec<String> {
    let (s, _) = open(path);
    let odd_result = NewEvent::visible(
        "tool/result",
        json!({"callId": "c\"1", "content": [{"type": "text", "text": "tab\there \"quoted\" \\ back\u{1}\u{1f}\u{7f} é ✓ 𝄞"},
            {"type": "resource", "uri": "file:///a", "meta": {"z": 1, "a": [true, null, -3]}}], "isError": false, "zeta": {"b": 1, "a": 2}}),
    );
    let odd_assistant = NewEvent::visible(
        "assistant/message",
        json!({"turn": 1, "step": 1, "usage": {"inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 4},
            "message": {"role": "assistant", "stopReason": "tool_use", "provenance": {"provider": "p", "model": "m", "region": "eu"},
                "content": [{"type": "text", "text": "line\nline"}, {"type": "reasoning", "text": "r", "signature": "s=="},
                    {"type": "tool-call", "id": "c\"1", "name": "read", "arguments": "{\"path\":\"a\\\\b\"}"}]}}),
    );
    append_all(
        &s,
        vec![
            header("initial", 1, "sys\n\"quoted\""),
            turn_start(1),
            NewEvent::visible(
                "user/message",
                json!({"source": "user", "hostTag": 1.5, "message": {"role": "user", "meta": {"k": "v"},
                    "content": [{"type": "text", "text": "hi", "cacheControl": {"type": "ephemeral"}}, {"type": "image", "url": "u"}]}}),
            ),
            step_start(1, 1),
            odd_assistant,
            tool_call(1, 1, "c\"1", "read", "{\"path\":\"a\\\\b\"}"),
            step_end(1, 1, "response"),
            odd_result,
            NewEvent::new("acme/audit", json!({"who": "ops", "ratio": 0.25, "n": null, "deep": [[[{"x": "\u{0}"}]]]})),
            step_start(1, 2),
            assistant(1, 2, "done", &[]),
            step_end(1, 2, "response"),
            turn_end(1, "completed"),
            turn_start(2),
            user("again \u{2028} and again"),
            step_start(2, 1),
        ],
    );
    s.records().unwrap().iter().map(|r| r.to_string()).collect()
}

#[test]
fn records_of_another_form_load_as_this_librarys_do() {
    // This library's own records are read from their bytes (the fast way); records of any other
    // form (another writer's key order, whitespace and escapes) are parsed into values (the long
    // way). The same events in either form must open to the same session: the same events,
    // history, header, counters and state, and the same repairs; version 2 (chained) and 1.
    let (_dir, path) = new_file();
    let lines = odd_session_lines(&path);
    let mut v1 = lines.clone();
    v1[0] = v1[0].replace("\"version\":2", "\"version\":1");
    for l in &mut v1[1..] {
        *l = ours(&serde_json::from_str(l).unwrap());
    }
    for (ours, chained) in [(&lines, true), (&v1, false)] {
        let odd = another_form(ours, chained);
        let fast = opened(ours, None).unwrap();
        let long = opened(&odd, None).unwrap();
        assert_eq!(fast, long, "chained: {chained}");
        // The open turn was closed the same way: a step/end, turn/end{interrupted}.
        assert_eq!(fast.1.repaired_events, 2);
        // A torn tail is cut from either.
        let fast = opened(ours, Some("{\"type\":\"turn/end\",\"seq\":")).unwrap();
        let long = opened(&odd, Some("{\"type\":\"turn/end\",\"seq\":")).unwrap();
        assert_eq!(fast, long, "chained: {chained}");
        assert_eq!((fast.1.cut_records, fast.1.cut_damaged), (1, false));
    }
}

#[test]
fn a_record_refused_either_way_is_refused_with_the_same_error() {
    // A record the checks refuse is reported by the long way whichever form it is in, so the
    // error (or the cut, in the unfinished last turn) is the same.
    let (_dir, path) = new_file();
    let lines = odd_session_lines(&path);
    let at = |ty: &str| lines.iter().position(|l| l.contains(&format!("\"type\":\"{ty}\""))).unwrap();
    let edits: Vec<(usize, Box<dyn Fn(&mut Value)>)> = vec![
        // Before the last complete turn: errors naming the line.
        (at("tool/result"), Box::new(|v| v["data"]["callId"] = json!("nobody"))),
        (at("tool/result"), Box::new(|v| v["data"]["content"][0]["text"] = json!(7))),
        (at("assistant/message"), Box::new(|v| v["data"]["message"]["content"][2]["id"] = json!(""))),
        (at("assistant/message"), Box::new(|v| v["data"]["message"]["role"] = json!("user"))),
        (at("user/message"), Box::new(|v| v["data"]["message"]["content"][0]["type"] = json!("tool-call"))),
        (at("user/message"), Box::new(|v| v["surfaceOp"] = json!({"op": "replace", "start": 0, "end": 0}))),
        (at("step/end"), Box::new(|v| v["data"]["outcome"] = json!("maybe"))),
        (at("acme/audit"), Box::new(|v| v["seq"] = json!(99))),
        (at("acme/audit"), Box::new(|v| v["extra"] = json!(1))),
        // In the unfinished last turn: cut.
        (lines.len() - 1, Box::new(|v| v["data"]["step"] = json!(5))),
        (lines.len() - 2, Box::new(|v| v["data"]["message"]["content"] = json!({}))),
    ];
    for (i, edit) in &edits {
        let mut edited = lines.clone();
        let mut v: Value = serde_json::from_str(&edited[*i]).unwrap();
        edit(&mut v);
        edited[*i] = ours(&v);
        seal_all(&mut edited);
        let fast = opened(&edited, None);
        let long = opened(&another_form(&edited, true), None);
        assert_eq!(fast, long, "line {}: {}", i + 1, edited[*i]);
        match &fast {
            Err(e) => assert!(e.contains(&format!("line {}", i + 1)), "{e}"),
            Ok((_, report)) => assert_eq!(report.cut_at_line, Some(i + 1), "{report:?}"),
        }
    }
    // A broken chain is the chain's error either way.
    let mut edited = lines.clone();
    let i = at("step/end");
    edited[i] = edited[i].replace("\"response\"", "\"error\"");
    let e = opened(&edited, None).unwrap_err();
    assert!(e.contains("chained digest does not match") && e.contains(&format!("line {}", i + 1)), "{e}");
}

#[test]
fn a_long_logs_chain_checked_beside_the_load_finds_what_the_load_would() {
    // A long chained log has its chain checked on a thread beside the rest of the load (from
    // 4,096 records). The load is the same as reading its records one by one, an edited record
    // is refused naming its line, and a torn tail is cut.
    let (_dir, path) = new_file();
    let (s, _) =
        Session::open_jsonl(&path, SessionOptions { durability: llmsession::Durability::Never, ..SessionOptions::default() }).unwrap();
    append_all(&s, vec![header("initial", 1, "sys"), turn_start(1), user("go")]);
    for step in 1..=1000u64 {
        let id = format!("call \"{step}\"");
        append_all(
            &s,
            vec![
                step_start(1, step),
                assistant(1, step, &format!("step\n{step}"), &[(&id, "read", "{\"p\":1}")]),
                tool_call(1, step, &id, "read", "{\"p\":1}"),
                step_end(1, step, "response"),
                tool_result(&id, &format!("result \"{step}\" \u{1}")),
            ],
        );
    }
    append_all(&s, vec![turn_end(1, "completed")]);
    let records = s.records().unwrap().iter().map(|r| r.to_string()).collect::<Vec<_>>();
    drop(s);
    assert!(records.len() > 4096);
    let text = records.join("\n") + "\n";

    std::fs::write(&path, &text).unwrap();
    let (s, report) = open(&path);
    assert_eq!(report, LoadReport::default());
    let one_by_one = llmsession::log::load::load_records(&llmsession::store::StoreContents::from_jsonl(text.as_bytes())).unwrap();
    let history_of = |l: &llmsession::log::Log| l.history().entries().iter().map(|d| d.json.to_string()).collect::<Vec<_>>();
    assert_eq!(s.with_log(history_of), history_of(&one_by_one.log));
    assert_eq!(s.chain_head().unwrap().chain, llmsession::log::chain::hex(one_by_one.log.chain_head().unwrap()));
    drop(s);

    // An edit in the middle, not chained again.
    let mut edited = records.clone();
    let i = 2500;
    let before = edited[i].clone();
    edited[i] = edited[i].replacen(",\"data\":", ", \"data\": ", 1);
    assert_ne!(edited[i], before);
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains(&format!("line {}", i + 1)) && e.message().contains("chained digest does not match"), "{e}");

    // A torn tail.
    std::fs::write(&path, text.clone() + "{\"type\":\"turn/start\",\"seq\":").unwrap();
    let (s, report) = open(&path);
    assert_eq!((report.cut_records, report.cut_at_line, report.cut_damaged), (1, Some(records.len() + 1), false));
    assert_eq!(s.len(), records.len() - 1);
}
