//! Damaged copies of a stored log, for the tests that every reader of a log (verify, explain,
//! replay, the CLI's commands) refuses what an open refuses, naming the same line
//! (tests/explain.rs, tests/replay.rs, cli/tests/cli.rs). Records are the stored lines: the
//! session header first, then one event record each.
#![allow(dead_code)]

use serde_json::Value;

/// The record's event type (`""` for the session header).
pub fn record_type(rec: &str) -> String {
    let v: Value = serde_json::from_str(rec).expect("a record is JSON");
    v["type"].as_str().unwrap_or("").to_string()
}

/// The index of the `nth` record of type `ty` (its line is the index + 1).
pub fn index_of(records: &[String], ty: &str, nth: usize) -> usize {
    records.iter().enumerate().filter(|(_, r)| record_type(r) == ty).nth(nth).unwrap_or_else(|| panic!("no {ty} #{nth}")).0
}

/// The record without its chain field (a version 2 record ends with `,"chain":"..."}`).
pub fn unchained(rec: &str) -> String {
    match rec.rfind(",\"chain\":\"") {
        Some(i) => format!("{}}}", &rec[..i]),
        None => rec.to_string(),
    }
}

/// Every event record chained anew under the session header: a deliberate rewrite, whose chain
/// holds whatever the records say.
pub fn reseal(records: &[String]) -> Vec<String> {
    let mut link = llmsession::log::chain::start(records[0].as_bytes());
    let mut out = vec![records[0].clone()];
    for r in &records[1..] {
        let (rec, next) = llmsession::log::chain::seal(&link, &unchained(r));
        link = next;
        out.push(rec);
    }
    out
}

/// The records without the one at `index`.
pub fn without(records: &[String], index: usize) -> Vec<String> {
    let mut out = records.to_vec();
    out.remove(index);
    out
}

/// The records with the chain value of the one at `index` changed (its first hex digit).
pub fn broken_chain(records: &[String], index: usize) -> Vec<String> {
    let mut out = records.to_vec();
    let r = &out[index];
    let at = r.rfind(",\"chain\":\"").expect("a chained record") + ",\"chain\":\"".len();
    let digit = if r.as_bytes()[at] == b'0' { "1" } else { "0" };
    out[index] = format!("{}{digit}{}", &r[..at], &r[at + 1..]);
    out
}

/// The records as a JSONL file holds them.
pub fn jsonl(records: &[String]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

/// The records as bytes (what `explain_records`, `Replay::from_records` and `verify_records`
/// take).
pub fn bytes(records: &[String]) -> Vec<Vec<u8>> {
    records.iter().map(|r| r.as_bytes().to_vec()).collect()
}
