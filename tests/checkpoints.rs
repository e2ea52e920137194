//! Checkpoints and the bounded open (issue #38): a session opened from its last checkpoint is
//! the session a whole load gives, reads only the checkpoint's window, and goes on the same; a
//! tampered checkpoint is refused by the open (its chain) or by `verify` (its content); logs
//! without checkpoints open as before and gain them.

mod common;

use common::*;
use llmsession::error::ErrorKind;
use llmsession::log::checkpoint::CheckpointPolicy;
use llmsession::log::load::OpenCheck;
use llmsession::store::{Batch, MemoryStore, Store, StoreContents, StoreWindow};
use llmsession::{NewEvent, Session, SessionOptions};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};

fn opts(every: u64) -> SessionOptions {
    SessionOptions {
        id: Some("cp".into()),
        durability: llmsession::Durability::Never,
        checkpoints: CheckpointPolicy { every_events: every, every_bytes: 0, at_compaction: true },
        ..SessionOptions::default()
    }
}

fn full() -> SessionOptions {
    SessionOptions { check: OpenCheck::Full, ..opts(25) }
}

/// Compacts the surface of `s` from position 1 to the end of the turn before the last one
/// (keeping the first message and the last turn: the surface then holds messages older than
/// the replace on both sides of it).
fn compact(s: &Session, tag: u64) {
    let len = s.with_log(|l| l.history().len());
    if len < 7 {
        return;
    }
    let end = len - 5;
    append_all(
        s,
        vec![
            compaction_start_for(s, 1, end),
            compaction_summary(&format!("summary {tag}")),
            checkpoint(&format!("the story so far ({tag})"), 1, end, s.with_log(|l| l.history().seqs()[1..=end].to_vec())),
            compaction_end("landed"),
        ],
    );
}

/// A session of `turns` complete turns (a tool call each), compacted every `every` turns, with a
/// header change now and then and an open turn at the end (a step answered, its tool result
/// pending).
fn busy(s: &Session, turns: u64, every: u64) {
    append_all(s, vec![header("initial", 1, "be brief")]);
    for t in 1..=turns {
        append_all(s, complete_turn(t));
        if t % every == 0 {
            compact(s, t);
        }
        if t % 11 == 0 {
            append_all(s, vec![header("change", 1, &format!("be brief ({t})"))]);
        }
    }
    let t = turns + 1;
    let id = format!("c{t}");
    append_all(
        s,
        vec![
            turn_start(t),
            user("one more"),
            step_start(t, 1),
            assistant(t, 1, "looking", &[(&id, "read", "{}")]),
            tool_call(t, 1, &id, "read", "{}"),
            step_end(t, 1, "response"),
        ],
    );
}

/// What a user sees of a session's state (not its events: a read of old events goes to the
/// store; not its chain head: the two sessions compared repaired their open turn at different
/// times).
fn state(s: &Session) -> Value {
    let mut st = s.stats();
    st.chain_head = None;
    json!({
        "len": s.len(),
        "history": s.history_json(),
        "header": s.request_header().map(|h| h.to_value()),
        "stats": serde_json::to_value(&st).unwrap(),
        "openTurn": s.with_log(|l| format!("{:?}", l.state().open_turn)),
        "pending": s.with_log(|l| format!("{:?}", l.state().pending)),
        "generation": s.with_log(|l| l.history().generation()),
    })
}

/// The events of a session without their times and chain values (two sessions that append the
/// same events at different times).
fn timeless(s: &Session) -> Vec<Value> {
    let all: Vec<Value> = serde_json::from_str(&s.events_json(0, None).unwrap()).unwrap();
    all.into_iter()
        .map(|mut e| {
            e.as_object_mut().unwrap().remove("time");
            e.as_object_mut().unwrap().remove("chain");
            e
        })
        .collect()
}

fn write_busy(path: &Path, turns: u64, every: u64) {
    let (s, _) = Session::open_jsonl(path, opts(25)).unwrap();
    busy(&s, turns, every);
}

#[test]
fn a_bounded_open_is_the_session_a_whole_load_gives_and_goes_on_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_busy(&path, 60, 9);
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&path, &copy).unwrap();

    let (bounded, report) = Session::open_jsonl(&path, opts(25)).unwrap();
    let (whole, whole_report) = Session::open_jsonl(&copy, full()).unwrap();
    assert_eq!(report, whole_report, "the open turn is repaired the same way");
    assert!(bounded.with_log(|l| l.base()) > 0, "the bounded open holds the lines from its checkpoint on");
    assert_eq!(whole.with_log(|l| l.base()), 0);
    assert_eq!(state(&bounded), state(&whole));

    // Both go on the same way (the open turn was closed by the repair): more turns, compactions,
    // checkpoints.
    for s in [&bounded, &whole] {
        for t in 62..=80 {
            append_all(s, complete_turn(t));
            if t % 9 == 0 {
                compact(s, t);
            }
        }
    }
    assert_eq!(state(&bounded), state(&whole));
    assert_eq!(timeless(&bounded), timeless(&whole));
    drop((bounded, whole));
    let (again, _) = Session::open_jsonl(&path, opts(25)).unwrap();
    let (again_whole, _) = Session::open_jsonl(&copy, full()).unwrap();
    assert_eq!(state(&again), state(&again_whole));
    // Every checkpoint either wrote is what the log gives (a full open recomputes each).
    drop(again);
    Session::open_jsonl(&path, full()).unwrap();
}

/// A memory store that records what a bounded open reads.
struct Watched {
    inner: MemoryStore,
    window: Arc<Mutex<Option<(u64, usize)>>>,
    loads: Arc<Mutex<usize>>,
}

impl Store for Watched {
    fn load(&mut self) -> llmsession::Result<StoreContents> {
        *self.loads.lock().unwrap() += 1;
        self.inner.load()
    }
    fn load_window(&mut self, before: Option<u64>) -> llmsession::Result<Option<StoreWindow>> {
        let w = self.inner.load_window(before)?;
        if let Some(w) = &w {
            *self.window.lock().unwrap() = Some((w.from, w.len()));
        }
        Ok(w)
    }
    fn append(&mut self, batch: &Batch<'_>) -> llmsession::Result<()> {
        self.inner.append(batch)
    }
    fn sync(&mut self) -> llmsession::Result<()> {
        Ok(())
    }
    fn undo(&mut self, from: usize) -> llmsession::Result<()> {
        self.inner.undo(from)
    }
    fn cut(&mut self, keep: usize, reason: &str) -> llmsession::Result<Option<String>> {
        self.inner.cut(keep, reason)
    }
    fn describe(&self) -> String {
        "watched".into()
    }
}

#[test]
fn a_bounded_open_reads_the_window_of_the_last_checkpoint_only() {
    let s = Session::create(Box::new(MemoryStore::new()), opts(40)).unwrap();
    busy(&s, 200, 10);
    let records: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    let total = records.len();
    let window = Arc::new(Mutex::new(None));
    let loads = Arc::new(Mutex::new(0));
    let store = Watched { inner: MemoryStore::with_records(records.clone()), window: window.clone(), loads: loads.clone() };
    let (b, _) = Session::open(Box::new(store), opts(40)).unwrap();
    let (from, read) = window.lock().unwrap().expect("the open read a window");
    assert_eq!(*loads.lock().unwrap(), 0, "nothing was read whole");
    // The window starts after the last compaction's replace: at most a compaction cycle (10
    // turns of 11 events, the compaction and the checkpoints) plus the open turn.
    assert!(read < 10 * 11 + 40, "read {read} of {total} records");
    assert!(from > 0);
    let (w, _) = Session::open(Box::new(MemoryStore::with_records(records)), full()).unwrap();
    assert_eq!(state(&b), state(&w));
    // Events older than the window are read from the store when asked for.
    assert_eq!(b.event(3), w.event(3));
    assert_eq!(timeless(&b), timeless(&w));
}

#[test]
fn checkpoints_are_written_as_the_policy_says() {
    let s = Session::create(Box::new(MemoryStore::new()), opts(30)).unwrap();
    busy(&s, 20, 7);
    let events: Vec<Value> = serde_json::from_str(&s.events_json(0, None).unwrap()).unwrap();
    let at: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e["type"] == "session/checkpoint").map(|(i, _)| i).collect();
    assert!(!at.is_empty());
    for (k, &i) in at.iter().enumerate() {
        let before = &events[i - 1];
        let since = i - at.get(k.wrapping_sub(1)).map_or(0, |p| p + 1);
        assert!(
            before["type"] == "compaction/end" || since >= 30,
            "checkpoint at {i}: {since} events after the previous one, after {}",
            before["type"]
        );
        assert!(since <= 30 + 11, "a checkpoint is written at the end of the batch that reaches the count");
    }
    // Every landed compaction is followed by a full checkpoint (it carries the surface).
    for (i, e) in events.iter().enumerate() {
        if e["type"] == "compaction/end" && e["data"]["outcome"] == "landed" {
            assert_eq!(events[i + 1]["type"], "session/checkpoint");
            assert!(events[i + 1]["data"]["carried"].is_array());
        }
    }
    // A host cannot append one, and off means off.
    let e = s.append(NewEvent::new("session/checkpoint", json!({}))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let off = Session::create(Box::new(MemoryStore::new()), SessionOptions { checkpoints: CheckpointPolicy::OFF, ..opts(1) }).unwrap();
    busy(&off, 20, 7);
    assert!(!off.events_json(0, None).unwrap().contains("session/checkpoint"));
}

/// The records of a busy session in memory, and the index of its last checkpoint record.
fn busy_records() -> (Vec<String>, usize) {
    let s = Session::create(Box::new(MemoryStore::new()), opts(25)).unwrap();
    busy(&s, 40, 9);
    let records: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    let last = records.iter().rposition(|r| r.starts_with("{\"type\":\"session/checkpoint\"")).unwrap();
    (records, last)
}

fn open(records: &[String]) -> llmsession::Result<Session> {
    Session::open(Box::new(MemoryStore::with_records(records.to_vec())), opts(25)).map(|(s, _)| s)
}

#[test]
fn an_edited_checkpoint_is_refused_by_the_open() {
    let (records, last) = busy_records();
    // An edit that leaves the chain alone, and a chain value that is not the record's.
    let mut edited = records.clone();
    edited[last] = edited[last].replacen("\"turns\":", "\"turns\":1", 1);
    let e = open(&edited).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains(&format!("line {}", last + 1)) && e.message().contains("chained digest"), "{}", e.message());
    let mut relinked = records.clone();
    let other = llmsession::log::chain::stored_link(&records[last - 1]).unwrap().to_string();
    let mine = llmsession::log::chain::stored_link(&records[last]).unwrap().to_string();
    relinked[last] = relinked[last].replace(&mine, &other);
    let e = open(&relinked).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains(&format!("line {}", last + 1)), "{}", e.message());
}

/// Every field of a checkpoint changed, with the chain recomputed (a deliberate rewrite): the
/// open refuses it or `verify` does.
#[test]
fn a_rewritten_checkpoint_is_refused_by_the_open_or_by_verify() {
    let (records, last) = busy_records();
    let base: Value = serde_json::from_str(&records[last]).unwrap();
    let full_at = records.iter().rposition(|r| r.starts_with("{\"type\":\"session/checkpoint\"") && r.contains("\"carried\"")).unwrap();
    let mut cases: Vec<(usize, String)> = Vec::new();
    for at in [last, full_at] {
        let cp: Value = serde_json::from_str(&records[at]).unwrap();
        for (k, v) in cp["data"].as_object().unwrap() {
            let changed = match v {
                Value::Number(n) => json!(n.as_u64().unwrap() + 1),
                Value::String(s) => json!(format!("{s}x")),
                Value::Array(a) if a.is_empty() => json!([{"id": "x", "name": "y", "seq": 1}]),
                Value::Array(a) => Value::Array(a[..a.len() - 1].to_vec()),
                Value::Object(_) => {
                    let mut o = v.clone();
                    let first = o.as_object().unwrap().keys().next().unwrap().clone();
                    o[&first] = match &o[&first] {
                        Value::Number(n) => json!(n.as_u64().unwrap_or(0) + 1),
                        Value::Bool(b) => json!(!b),
                        other => json!(format!("{other}x")),
                    };
                    o
                }
                Value::Bool(b) => json!(!b),
                Value::Null => json!(1),
            };
            cases.push((at, format!("{k}={changed}")));
            let mut ev = cp.clone();
            ev["data"][k] = changed;
            ev.as_object_mut().unwrap().remove("chain");
            let mut edited = records.clone();
            edited[at] = ev.to_string();
            rechain(&mut edited);
            let opened = open(&edited);
            let refused_by_open = opened.is_err();
            let verified = match &opened {
                Ok(s) => s.verify(),
                Err(_) => Err(opened.as_ref().unwrap_err().clone()),
            };
            let refused_by_verify = llmsession::request::verify_records(&edited.iter().map(|r| r.as_bytes().to_vec()).collect::<Vec<_>>())
                .is_err_and(|e| e.kind() == ErrorKind::CorruptLog && e.message().contains("checkpoint"));
            assert!(refused_by_verify, "verify accepts the checkpoint at line {} with {k} changed", at + 1);
            assert!(refused_by_open || verified.is_err(), "{k}");
        }
        // A field added.
        let mut ev = cp.clone();
        ev["data"]["extra"] = json!(1);
        ev.as_object_mut().unwrap().remove("chain");
        let mut edited = records.clone();
        edited[at] = ev.to_string();
        rechain(&mut edited);
        assert!(llmsession::request::verify_records(&edited.iter().map(|r| r.as_bytes().to_vec()).collect::<Vec<_>>()).is_err());
    }
    assert!(cases.len() > 10, "{cases:?}");
    let _ = base;
}

#[test]
fn a_log_without_checkpoints_opens_whole_and_gains_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.jsonl");
    {
        let (s, _) = Session::open_jsonl(&path, SessionOptions { checkpoints: CheckpointPolicy::OFF, ..opts(25) }).unwrap();
        busy(&s, 30, 8);
    }
    let before = std::fs::read_to_string(&path).unwrap();
    assert!(!before.contains("session/checkpoint"));
    let (s, _) = Session::open_jsonl(&path, opts(25)).unwrap();
    assert_eq!(s.with_log(|l| l.base()), 0, "no checkpoint: read whole");
    let whole = state(&s);
    // The first append writes a checkpoint: more than 25 events came before it.
    append_all(&s, vec![NewEvent::new("host/note", json!({"n": 1}))]);
    assert!(s.event(s.len() as u64 - 1).unwrap().ty == "session/checkpoint");
    drop(s);
    let (s, _) = Session::open_jsonl(&path, opts(25)).unwrap();
    assert!(s.with_log(|l| l.base()) > 0, "opened from the checkpoint");
    let mut now = state(&s);
    let mut was = whole;
    for v in [&mut now, &mut was] {
        v["len"] = json!(0);
        v["stats"]["events"] = json!(0);
    }
    assert_eq!(now, was);

    // `checkpoint()` writes one now; not inside a compaction, not on a read-only handle.
    let at = s.checkpoint().unwrap();
    assert_eq!(s.event(at).unwrap().ty, "session/checkpoint");
    append_all(&s, vec![compaction_start_for(&s, 0, 0)]);
    assert_eq!(s.checkpoint().unwrap_err().kind(), ErrorKind::OutOfOrder);
    drop(s);
    let (r, _) =
        Session::open_jsonl_with(&path, llmsession::store::FileOptions { read_only: true, ..Default::default() }, opts(25)).unwrap();
    assert_eq!(r.checkpoint().unwrap_err().kind(), ErrorKind::ReadOnly);
}

#[test]
fn a_torn_tail_and_an_open_turn_after_the_checkpoint_are_repaired_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_busy(&path, 30, 8);
    let text = std::fs::read_to_string(&path).unwrap();
    // Cut the last record in half.
    let keep = text.len() - text.lines().last().unwrap().len() / 2 - 1;
    std::fs::write(&path, &text[..keep]).unwrap();
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&path, &copy).unwrap();
    let (b, rb) = Session::open_jsonl(&path, opts(25)).unwrap();
    let (w, rw) = Session::open_jsonl(&copy, full()).unwrap();
    assert!(b.with_log(|l| l.base()) > 0);
    assert_eq!(rb.cut_records, 1);
    assert_eq!(
        (rb.cut_records, rb.cut_at_line, rb.repaired_events, rb.cut_damaged),
        (rw.cut_records, rw.cut_at_line, rw.repaired_events, rw.cut_damaged)
    );
    assert!(rb.repaired_events > 0);
    assert_eq!(state(&b), state(&w));
}

#[test]
fn a_directory_lists_its_sessions_from_their_first_and_last_lines() {
    use llmsession::store::url::list_sessions;
    let dir = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for i in 0..12u64 {
        let id = format!("s{:02}", (i * 7) % 12);
        let path = dir.path().join(format!("{id}.jsonl"));
        let (s, _) = Session::open_jsonl(&path, SessionOptions { id: Some(id.clone()), ..opts(25) }).unwrap();
        busy(&s, i, 5);
        ids.push((id, s.len() as u64, s.chain_head().unwrap().chain));
    }
    // Not sessions: a cut sidecar, a text file, an empty log (no session yet), a directory.
    std::fs::write(dir.path().join("s00.jsonl.cut-1"), "junk\n").unwrap();
    std::fs::write(dir.path().join("notes.jsonl"), "not a log\n").unwrap();
    std::fs::write(dir.path().join("empty.jsonl"), "").unwrap();
    std::fs::create_dir(dir.path().join("sub.jsonl")).unwrap();
    // A torn last line: the row counts the complete records.
    let torn = dir.path().join("s03.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&torn).unwrap();
    std::io::Write::write_all(&mut f, b"{\"type\":\"host/note\",\"se").unwrap();
    drop(f);
    let url = format!("file:{}", dir.path().display());
    let all = list_sessions(&url, None, None, None).unwrap();
    ids.sort();
    assert_eq!(all.iter().map(|r| (r.id.clone(), r.events, r.chain_head.clone().unwrap())).collect::<Vec<_>>(), ids);
    assert!(all.iter().all(|r| !r.in_use && r.created_at > 0 && r.updated_at > 0));
    // Paging as for a database.
    let page = list_sessions(&url, Some("s04"), Some(3), None).unwrap();
    assert_eq!(page.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["s05", "s06", "s07"]);
    assert!(list_sessions(&url, None, Some(0), None).unwrap().is_empty());
    // A writer holding a log shows as in use.
    let (held, _) = Session::open_jsonl(dir.path().join("s05.jsonl"), opts(25)).unwrap();
    let rows = list_sessions(&url, None, None, None).unwrap();
    assert_eq!(rows.iter().filter(|r| r.in_use).map(|r| r.id.as_str()).collect::<Vec<_>>(), ["s05"]);
    drop(held);
    // One file is one session (or none); a file that is not a log is an error.
    let one = list_sessions(&format!("file:{}", dir.path().join("s07.jsonl").display()), None, None, None).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].id, "s07");
    assert!(list_sessions(&format!("file:{}", dir.path().join("empty.jsonl").display()), None, None, None).unwrap().is_empty());
    let e = list_sessions(&format!("file:{}", dir.path().join("notes.jsonl").display()), None, None, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
}

/// The JSONL store reads backwards in growing chunks: records (and checkpoints carrying a large
/// surface) longer than a chunk, and a file whose only checkpoint is torn, open as a whole load
/// does.
#[test]
fn long_records_and_a_torn_only_checkpoint_open_as_a_whole_load_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    {
        let (s, _) = Session::open_jsonl(&path, opts(4)).unwrap();
        append_all(&s, vec![header("initial", 1, "be brief"), turn_start(1)]);
        for i in 0..6 {
            // Host context of 700 KB each: the surface a full checkpoint carries grows past 1 MiB.
            append_all(&s, vec![host(&format!("{i} {}", "x".repeat(700_000)))]);
        }
        append_all(&s, vec![turn_end(1, "completed")]);
        assert!(s.with_log(|l| l.state().last_checkpoint.is_some()));
    }
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&path, &copy).unwrap();
    let (b, _) = Session::open_jsonl(&path, opts(4)).unwrap();
    let (w, _) = Session::open_jsonl(&copy, full()).unwrap();
    assert!(b.with_log(|l| l.base()) > 0);
    assert_eq!(state(&b), state(&w));
    drop((b, w));
    // Only one checkpoint, torn: the file is read whole.
    let one = dir.path().join("one.jsonl");
    {
        let (s, _) = Session::open_jsonl(&one, opts(0)).unwrap();
        append_all(&s, vec![header("initial", 1, "be brief"), turn_start(1), host("a"), host("b")]);
        s.checkpoint().unwrap();
    }
    let text = std::fs::read(&one).unwrap();
    std::fs::write(&one, &text[..text.len() - 20]).unwrap();
    let (s, report) = Session::open_jsonl(&one, opts(0)).unwrap();
    assert_eq!(s.with_log(|l| l.base()), 0, "no complete checkpoint: read whole");
    assert_eq!(report.cut_records, 1);
    assert_eq!(s.len(), 4 + report.repaired_events);
}

/// A long window (its chain is checked beside the derivation): an edit anywhere in it is refused
/// naming its line, as is a record of it that does not parse.
#[test]
fn an_edit_inside_a_long_window_is_refused_at_its_line() {
    let s = Session::create(Box::new(MemoryStore::new()), opts(6000)).unwrap();
    append_all(&s, vec![header("initial", 1, "be brief"), turn_start(1)]);
    for i in 0..6200 {
        append_all(&s, vec![host(&format!("context {i}"))]);
    }
    let records: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    let cp = records.iter().rposition(|r| r.starts_with("{\"type\":\"session/checkpoint\"")).unwrap();
    assert!(cp > 5000, "one checkpoint, after 6000 events");
    open(&records).unwrap();
    for at in [3, 2500, cp - 1] {
        let mut edited = records.clone();
        edited[at] = edited[at].replacen("context", "contekst", 1);
        let e = open(&edited).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CorruptLog);
        assert!(e.message().contains(&format!("line {}", at + 1)) && e.message().contains("chained digest"), "{}", e.message());
        let mut broken = records.clone();
        broken[at] = "{\"type\":\"user/message\",\"seq\":1}".into();
        let e = open(&broken).unwrap_err();
        assert!(e.message().contains(&format!("line {}", at + 1)), "{}", e.message());
    }
}
