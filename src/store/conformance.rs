//! The store conformance kit: the store contract (docs/contract.md §2.4 to §2.7,
//! `docs/storage.md`) as a runnable suite, for people who write their own store.
//!
//! Each case opens handles through a [`StoreFactory`] the caller supplies: opening the same
//! session id twice gives two handles on the same backing data (so two writers and a stale
//! writer can be tried), a new id an empty session. A handle is closed by dropping it. Every
//! case uses a session id of its own, so the cases do not see each other's records. The cases
//! drive the [`Store`] trait exactly as the session layer does (load first, then conditional
//! appends, sync, undo, cut), and two of them go through [`Session`] itself.
//!
//! [`run`] returns a [`Report`]: one [`CaseReport`] per case, passed or not, with a detail
//! that says what was found ("append with seq 2 succeeded although the store holds 3
//! events"). Factories: [`UrlFactory`] (a `file:` directory or a `postgres://` database),
//! [`HostFactory`] (the host-store protocol with a handle number on every request: how the C
//! ABI's `lls_store_conformance` reaches a host's store), or any closure
//! `FnMut(&str) -> Result<Box<dyn Store>>`.

use crate::error::{Error, ErrorKind, Result};
use crate::log::NewEvent;
use crate::log::Text;
use crate::session::{Session, SessionOptions};
use crate::store::host::{HostStore, HostStoreCall};
use crate::store::url::{open_store, parse, Location, UrlOptions};
use crate::store::{Batch, Durability, MemoryStore, Store, StoreContents};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Opens handles on the store under test.
pub trait StoreFactory {
    /// Opens a writing handle on session `session_id`: the same id gives another handle on the
    /// same backing data, a new id an empty session. A store that refuses a second writer may
    /// refuse here ([`ErrorKind::Locked`]) or at the handle's first `load`.
    fn open(&mut self, session_id: &str) -> Result<Box<dyn Store>>;

    /// What is under test, for the report ("memory", a URL without its password, ...).
    fn describe(&self) -> String;
}

impl<F: FnMut(&str) -> Result<Box<dyn Store>>> StoreFactory for F {
    fn open(&mut self, session_id: &str) -> Result<Box<dyn Store>> {
        self(session_id)
    }
    fn describe(&self) -> String {
        "the caller's store".into()
    }
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CaseReport {
    /// The case's name (one of [`CASES`]).
    pub case: String,
    /// Whether the store did what the contract requires.
    pub passed: bool,
    /// What was checked and found; for a failure, what was wrong.
    pub detail: String,
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// What was tested ([`StoreFactory::describe`]).
    pub store: String,
    /// Whether every case passed.
    pub passed: bool,
    /// One entry per case run, in [`CASES`] order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// The cases that failed.
    pub fn failed(&self) -> Vec<&CaseReport> {
        self.cases.iter().filter(|c| !c.passed).collect()
    }

    /// The report as JSON: `{"store", "passed", "cases": [{"case", "passed", "detail"}]}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The error for a report with failures ([`ErrorKind::Nonconforming`]): names the failed
    /// cases (detail `failed`) and the first failure's detail; `None` when every case passed.
    pub fn error(&self) -> Option<Error> {
        let failed = self.failed();
        let first = failed.first()?;
        let names: Vec<&str> = failed.iter().map(|c| c.case.as_str()).collect();
        Some(
            Error::new(
                ErrorKind::Nonconforming,
                format!(
                    "{}: {} of {} conformance case(s) failed ({}); first: {}: {}",
                    self.store,
                    failed.len(),
                    self.cases.len(),
                    names.join(", "),
                    first.case,
                    first.detail
                ),
            )
            .with("failed", names)
            .with("store", self.store.clone()),
        )
    }
}

/// What a case returns: the detail of a pass (`Ok`) or of a failure (`Err`).
type Outcome = std::result::Result<String, String>;

/// One case of the kit.
pub struct Case {
    /// Its name, as reports give it.
    pub name: &'static str,
    /// What the contract requires, in one line (`docs/storage.md` lists them).
    pub requires: &'static str,
    run: fn(&mut Kit<'_>) -> Outcome,
}

/// The cases, in the order they run.
pub const CASES: &[Case] = &[
    Case {
        name: "create-and-reload",
        requires: "an empty session loads no records; the creating append (header + events) is stored verbatim and in order, and a new handle loads exactly it",
        run: create_and_reload,
    },
    Case {
        name: "sequence-and-load-from",
        requires: "batches land at the seqs they name, in order; load_from(n) gives the records from record n on (nothing past the end)",
        run: sequence_and_load_from,
    },
    Case {
        name: "batch-atomicity",
        requires: "a batch is stored whole or not at all: an accepted batch is all there, a refused one leaves none of its records",
        run: batch_atomicity,
    },
    Case {
        name: "conditional-append",
        requires: "an append whose seq is not the number of events stored (or that brings a header for an existing session) is refused with conflict and stores nothing",
        run: conditional_append,
    },
    Case {
        name: "two-writers",
        requires: "a second writer is refused with locked while the first holds the session (or, a host store that cannot tell, fenced by conditional appends); closing the first lets a new writer open",
        run: two_writers,
    },
    Case {
        name: "stale-writer",
        requires: "a writer whose head is behind (another writer appended, or it lost its lease) is refused with conflict or locked, and nothing it sent is stored",
        run: stale_writer,
    },
    Case {
        name: "undo",
        requires: "undo removes this handle's last append (the head moves back, the seq can be appended again); undo of an append that stored nothing removes nothing",
        run: undo,
    },
    Case {
        name: "cut",
        requires: "cut(keep) leaves the first keep records and moves the head back; the log left opens as a session and takes appends",
        run: cut,
    },
    Case {
        name: "sync-durability",
        requires: "sync succeeds after appends and with nothing new, and what was synced is there for a new handle",
        run: sync_durability,
    },
    Case {
        name: "session-round-trip",
        requires: "a session written through the store reopens with every event, the same chain head and nothing cut or repaired",
        run: session_round_trip,
    },
    Case {
        name: "checkpoint-window",
        requires: "a store that hands over the window of the last checkpoint (load_window; lastCheckpoint and loadFrom) hands over the header and exactly the records from the one before the window to the end; one that does not is read whole",
        run: checkpoint_window,
    },
];

/// Runs the cases named in `only` (every case when `None`) against the store `factory` opens.
/// A case name the kit does not know is an [`ErrorKind::InvalidInput`] error (detail `field`
/// `cases`) before anything runs. A store's failures are in the report, never an error.
pub fn run(factory: &mut dyn StoreFactory, only: Option<&[String]>) -> Result<Report> {
    if let Some(names) = only {
        if let Some(bad) = names.iter().find(|n| !CASES.iter().any(|c| c.name == n.as_str())) {
            let known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
            return Err(Error::invalid("cases", format!("no conformance case is called {bad:?} (the cases: {})", known.join(", "))));
        }
    }
    let run_id = crate::session_id::random_id();
    let mut cases = Vec::new();
    for case in CASES {
        if only.is_some_and(|names| !names.iter().any(|n| n == case.name)) {
            continue;
        }
        let mut kit = Kit { factory: &mut *factory, id: format!("conformance-{}-{}", &run_id[..12], case.name) };
        let outcome = catch_unwind(AssertUnwindSafe(|| (case.run)(&mut kit))).unwrap_or_else(|p| {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Err(format!("the case panicked: {}", what.unwrap_or_else(|| "(no message)".into())))
        });
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        cases.push(CaseReport { case: case.name.to_string(), passed, detail });
    }
    Ok(Report { store: factory.describe(), passed: cases.iter().all(|c| c.passed), cases })
}

/// Parses the kit's options (`lls_store_conformance`): `{"cases"?: [name, ...]}`, the cases
/// to run (every case when absent; [`run`] checks the names).
pub fn options(v: Option<&Value>) -> Result<Option<Vec<String>>> {
    let Some(v) = v else { return Ok(None) };
    let f = crate::types::Fields::of(v, "opts")?;
    if let Some(k) = f.map.keys().find(|k| k.as_str() != "cases") {
        return Err(Error::invalid(f.p(k), "is not an option here (expected cases)"));
    }
    let Some(names) = f.opt_array("cases")? else { return Ok(None) };
    let mut out = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        out.push(n.as_str().ok_or_else(|| Error::invalid(format!("opts.cases[{i}]"), "expected a case name (a string)"))?.to_string());
    }
    Ok(Some(out))
}

/// What a case works with: the factory and the case's session id.
struct Kit<'a> {
    factory: &'a mut dyn StoreFactory,
    id: String,
}

/// A session's records made by the library itself (a header and `events` events, chained), so
/// that what the cases store is what the library would store.
struct Records {
    header: Text,
    events: Vec<Text>,
}

impl Records {
    /// Every record from `from` (counting the header as record 0) to `to` (exclusive).
    fn lines(&self, from: usize, to: usize) -> Vec<String> {
        std::iter::once(&self.header).chain(self.events.iter()).skip(from).take(to - from).map(|r| r.to_string()).collect()
    }
}

fn err_text(e: &Error) -> String {
    format!("{}: {}", e.kind().name(), e.message())
}

/// The records in `c` as text (lossy for bytes that are not UTF-8).
fn texts(c: &StoreContents) -> Vec<String> {
    c.records.iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect()
}

impl Kit<'_> {
    fn records(&self, events: usize) -> Records {
        let s = Session::create(
            Box::new(MemoryStore::new()),
            SessionOptions { id: Some(self.id.clone()), durability: Durability::Never, ..SessionOptions::default() },
        )
        .expect("a memory store takes a new session");
        for i in 0..events {
            s.append(NewEvent::new("host/note", json!({"note": format!("conformance event {i}"), "n": i})))
                .expect("a memory session takes a host note");
        }
        let all = s.records().expect("a memory session holds its records");
        Records { header: all[0].clone(), events: all[1..].to_vec() }
    }

    /// Opens a handle and loads it (as a session open does).
    fn open(&mut self) -> std::result::Result<(Box<dyn Store>, StoreContents), Error> {
        let mut store = self.factory.open(&self.id)?;
        let contents = store.load()?;
        Ok((store, contents))
    }

    /// [`Kit::open`], any refusal being the case's failure.
    fn open_ok(&mut self, what: &str) -> std::result::Result<(Box<dyn Store>, StoreContents), String> {
        self.open().map_err(|e| format!("opening {what} failed: {}", err_text(&e)))
    }

    /// Opens a handle on an empty session and creates it with `records` (header + events).
    fn create(&mut self, r: &Records, events: usize) -> std::result::Result<Box<dyn Store>, String> {
        let (mut store, c) = self.open_ok("a writer on a new session")?;
        if !c.records.is_empty() {
            return Err(format!("a new session's store loaded {} record(s), expected none", c.records.len()));
        }
        let evs = &r.events[..events];
        store
            .append(&Batch { session_id: &self.id, header: Some(&r.header), seq: 0, events: evs })
            .map_err(|e| format!("the creating append (header and {events} events at seq 0) failed: {}", err_text(&e)))?;
        Ok(store)
    }
}

fn append(store: &mut dyn Store, id: &str, seq: u64, events: &[Text]) -> Result<()> {
    store.append(&Batch { session_id: id, header: None, seq, events })
}

/// Loads through `store` and compares with `want`; `after` says when, for the detail.
fn expect_records(store: &mut dyn Store, want: &[String], after: &str) -> std::result::Result<(), String> {
    let c = store.load().map_err(|e| format!("loading {after} failed: {}", err_text(&e)))?;
    compare(&c, want, after)
}

fn compare(c: &StoreContents, want: &[String], after: &str) -> std::result::Result<(), String> {
    let have = texts(c);
    if !c.last_complete {
        return Err(format!("{after} the store reports its last record as torn (lastComplete false), but every record was written whole"));
    }
    if have.len() != want.len() {
        let events = |n: usize| n.saturating_sub(1);
        return Err(format!(
            "{after} the store holds {} record(s) ({} events), expected {} ({} events)",
            have.len(),
            events(have.len()),
            want.len(),
            events(want.len())
        ));
    }
    if let Some(i) = (0..have.len()).find(|&i| have[i] != want[i]) {
        return Err(format!(
            "{after} record {i} is not the record appended there (records must be kept verbatim and in order): stored {:?}, appended {:?}",
            short(&have[i]),
            short(&want[i])
        ));
    }
    Ok(())
}

fn short(s: &str) -> String {
    if s.len() <= 120 {
        return s.to_string();
    }
    let mut end = 120;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// An append that must be refused: `Ok` with the error, or the failure's detail.
fn expect_refused(r: Result<()>, kinds: &[ErrorKind], what: &str, stored: usize) -> std::result::Result<Error, String> {
    match r {
        Ok(()) => Err(format!("{what} succeeded although the store holds {stored} events")),
        Err(e) if kinds.contains(&e.kind()) => Ok(e),
        Err(e) => {
            let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
            Err(format!("{what} was refused, but as {} rather than {}: {}", e.kind().name(), names.join(" or "), e.message()))
        }
    }
}

/// §2.6.1, §2.4.1: records kept verbatim and in order, the session header first.
fn create_and_reload(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(3);
    let mut a = kit.create(&r, 2)?;
    expect_records(&mut *a, &r.lines(0, 3), "after the creating append,")?;
    append(&mut *a, &kit.id, 2, &r.events[2..3])
        .map_err(|e| format!("an append at seq 2 after the creating append failed: {}", err_text(&e)))?;
    drop(a);
    let (_b, c) = kit.open_ok("a new handle after the writer closed")?;
    compare(&c, &r.lines(0, 4), "loaded by a new handle,")?;
    Ok("a new session loaded empty; the header and 3 events were stored verbatim and in order and a new handle loaded them".into())
}

/// §2.4.1, §2.5.2, §2.6.1: seqs, order, and load_from (a refresh reads from a record on).
fn sequence_and_load_from(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(7);
    let mut a = kit.create(&r, 1)?;
    let mut seq = 1;
    for n in [3usize, 2, 1] {
        append(&mut *a, &kit.id, seq as u64, &r.events[seq..seq + n])
            .map_err(|e| format!("an append of {n} event(s) at seq {seq} (the store's next seq) failed: {}", err_text(&e)))?;
        seq += n;
    }
    let all = r.lines(0, 8);
    expect_records(&mut *a, &all, "after four batches (1, 3, 2 and 1 events),")?;
    for from in 0..=all.len() + 1 {
        let c = a.load_from(from).map_err(|e| format!("load_from({from}) failed: {}", err_text(&e)))?;
        let want: Vec<String> = all.iter().skip(from).cloned().collect();
        compare(&c, &want, &format!("load_from({from}) of 8 records:"))?;
    }
    drop(a);
    let (mut b, _) = kit.open_ok("a new handle")?;
    let c = b.load_from(5).map_err(|e| format!("load_from(5) on a new handle failed: {}", err_text(&e)))?;
    compare(&c, &all[5..], "load_from(5) on a new handle:")?;
    Ok("4 batches landed at their seqs in order; load_from(n) gave records n.. for every n, and nothing past the end".into())
}

/// §2.4.1–2: a batch is all or nothing, including a refused conditional append.
fn batch_atomicity(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(10);
    let mut a = kit.create(&r, 3)?;
    append(&mut *a, &kit.id, 3, &r.events[3..7]).map_err(|e| format!("an append of 4 events at seq 3 failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 8), "after an accepted batch of 4 events,")?;
    // A refused batch (its seq is behind) must leave none of its records.
    let behind =
        expect_refused(append(&mut *a, &kit.id, 5, &r.events[7..10]), &[ErrorKind::Conflict], "an append of 3 events with seq 5", 7)?;
    let c = a.load().map_err(|e| format!("loading after the refused batch failed: {}", err_text(&e)))?;
    if c.records.len() != 8 {
        let left = c.records.len() as i64 - 8;
        return Err(format!(
            "the refused append (seq 5, 3 events) left {left} of its records behind: the store holds {} events, expected 7 (a batch is all or nothing)",
            c.records.len().saturating_sub(1)
        ));
    }
    compare(&c, &r.lines(0, 8), "after the refused batch,")?;
    // A refused creating batch for an existing session stores nothing either.
    expect_refused(
        a.append(&Batch { session_id: &kit.id, header: Some(&r.header), seq: 0, events: &r.events[..2] }),
        &[ErrorKind::Conflict],
        "a creating append (header and 2 events at seq 0) for a session that exists",
        7,
    )?;
    expect_records(&mut *a, &r.lines(0, 8), "after the refused creating batch,")?;
    append(&mut *a, &kit.id, 7, &r.events[7..10])
        .map_err(|e| format!("after the refusals, an append of 3 events at seq 7 (the next seq) failed: {}", err_text(&e)))?;
    drop(a);
    let (_b, c) = kit.open_ok("a new handle")?;
    compare(&c, &r.lines(0, 11), "loaded by a new handle after the batches,")?;
    Ok(format!("accepted batches were stored whole; a refused batch left nothing ({})", short(behind.message())))
}

/// §2.5.2: every append names the seq of its first event; a store holding another number of
/// events refuses the whole batch with conflict.
fn conditional_append(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(5);
    let mut a = kit.create(&r, 3)?;
    let want = r.lines(0, 4);
    for seq in [2u64, 0, 4, 100] {
        expect_refused(
            append(&mut *a, &kit.id, seq, &r.events[3..4]),
            &[ErrorKind::Conflict],
            &format!("append with expected head {seq}"),
            3,
        )?;
        expect_records(&mut *a, &want, &format!("after the refused append at seq {seq},"))?;
    }
    expect_refused(
        a.append(&Batch { session_id: &kit.id, header: Some(&r.header), seq: 0, events: &[] }),
        &[ErrorKind::Conflict],
        "a creating append (a header) for a session that exists",
        3,
    )?;
    expect_records(&mut *a, &want, "after the refused creating append,")?;
    append(&mut *a, &kit.id, 3, &r.events[3..5])
        .map_err(|e| format!("after the refusals, an append at seq 3 (the next seq) failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 6), "after the append at the next seq,")?;
    Ok("appends naming seqs 2, 0, 4 and 100 and a second header were refused with conflict and stored nothing; seq 3 was accepted".into())
}

/// §2.5.1 (and storage.md, "One writer per session", host store rule 3).
fn two_writers(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(4);
    let mut a = kit.create(&r, 2)?;
    let how = match kit.open() {
        Err(e) if e.kind() == ErrorKind::Locked => {
            append(&mut *a, &kit.id, 2, &r.events[2..3])
                .map_err(|e| format!("the first writer's append failed after a second writer was refused: {}", err_text(&e)))?;
            format!("a second writer was refused with locked while the first held the session ({})", short(e.message()))
        }
        Err(e) => return Err(format!("a second writer's open failed, but as {} rather than locked: {}", e.kind().name(), e.message())),
        Ok((mut b, c)) => {
            compare(&c, &r.lines(0, 3), "loaded by a second writer while the first held the session,")?;
            // The store cannot tell a second writer: its conditional appends must fence it.
            let first = append(&mut *a, &kit.id, 2, &r.events[2..3]);
            let second = append(&mut *b, &kit.id, 2, &r.events[3..4]);
            match (first, second) {
                (Ok(()), Err(e)) if [ErrorKind::Conflict, ErrorKind::Locked].contains(&e.kind()) => {}
                (Ok(()), Ok(())) => {
                    return Err("two writers were open on the session at once and both appended at seq 2: the second writer was neither refused at open (locked) nor fenced by the conditional append (conflict)".into())
                }
                (Ok(()), Err(e)) => {
                    return Err(format!("the second writer's stale append was refused, but as {} rather than conflict or locked: {}", e.kind().name(), e.message()))
                }
                (Err(e), _) => return Err(format!("the first writer's append at seq 2 failed with a second writer open: {}", err_text(&e))),
            }
            drop(b);
            "the store does not refuse a second writer at open (a host store that cannot tell); the conditional append refused its stale append".to_string()
        }
    };
    drop(a);
    let (_c, contents) = kit.open_ok("a new writer after the first writer closed (the lock or lease must go with the handle)")?;
    compare(&contents, &r.lines(0, 4), "loaded by a new writer after the first closed,")?;
    Ok(format!("{how}; once the first writer closed, a new writer opened and loaded what it wrote"))
}

/// §2.5.2–3, §2.6.2: a writer that is behind is refused and nothing it sent is stored.
fn stale_writer(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(6);
    let other = kit.records(6);
    let mut a = kit.create(&r, 2)?;
    match kit.open() {
        Err(e) if e.kind() == ErrorKind::Locked => {
            // The store fences at open: the stale writer left is a handle whose head is behind.
            append(&mut *a, &kit.id, 2, &r.events[2..4]).map_err(|e| format!("an append at seq 2 failed: {}", err_text(&e)))?;
            expect_refused(
                append(&mut *a, &kit.id, 2, &other.events[2..4]),
                &[ErrorKind::Conflict, ErrorKind::Locked],
                "an append with a stale head (seq 2)",
                4,
            )?;
            expect_records(&mut *a, &r.lines(0, 5), "after the stale append,")?;
            Ok("a second writer is refused at open, so a stale writer can only be a handle whose head is behind: its append was refused and nothing of it stored".into())
        }
        Err(e) => Err(format!("a second writer's open failed, but as {} rather than locked: {}", e.kind().name(), e.message())),
        Ok((mut b, _)) => {
            append(&mut *b, &kit.id, 2, &r.events[2..4])
                .map_err(|e| format!("the newer writer's append at seq 2 failed: {}", err_text(&e)))?;
            let e = expect_refused(
                append(&mut *a, &kit.id, 2, &other.events[2..5]),
                &[ErrorKind::Conflict, ErrorKind::Locked],
                "the stale writer's append at seq 2 (after the newer writer appended 2 events)",
                4,
            )?;
            expect_records(&mut *b, &r.lines(0, 5), "after the stale writer's refused append,")?;
            Ok(format!("the stale writer's append was refused ({}) and nothing of it stored", e.kind().name()))
        }
    }
}

/// §2.4.2, §9.4 (and host store rule 5): undo takes back this handle's last append.
fn undo(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(5);
    let mut a = kit.create(&r, 2)?;
    append(&mut *a, &kit.id, 2, &r.events[2..4]).map_err(|e| format!("an append of 2 events at seq 2 failed: {}", err_text(&e)))?;
    a.undo(3).map_err(|e| format!("undo from record 3 (the last append's first record) failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 3), "after undoing the last append (2 events at seq 2),")?;
    append(&mut *a, &kit.id, 2, &r.events[2..3])
        .map_err(|e| format!("after the undo, an append at seq 2 (the head moved back) failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 4), "after appending seq 2 again,")?;
    // An append that stored nothing (it failed before reaching the store): the session asks
    // for an undo from the end of the log, which must remove nothing.
    a.undo(4).map_err(|e| format!("undo of an append that stored nothing (from record 4, the end of the log) failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 4), "after undoing an append that stored nothing,")?;
    append(&mut *a, &kit.id, 3, &r.events[3..5]).map_err(|e| format!("an append at seq 3 after the undos failed: {}", err_text(&e)))?;
    drop(a);
    let (_b, c) = kit.open_ok("a new handle")?;
    compare(&c, &r.lines(0, 6), "loaded by a new handle after the undos,")?;
    Ok("undo removed the last append and its seq could be appended again; undo of an append that stored nothing removed nothing".into())
}

/// §2.7.3 (and host store rule 6): a cut removes a tail and moves the head back; the log that
/// is left opens as a session.
fn cut(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(4);
    let mut a = kit.create(&r, 4)?;
    let saved = a.cut(3, "conformance kit: cut test").map_err(|e| format!("cut(3) of 5 records failed: {}", err_text(&e)))?;
    expect_records(&mut *a, &r.lines(0, 3), "after cut(3),")?;
    append(&mut *a, &kit.id, 2, &r.events[2..3])
        .map_err(|e| format!("after cut(3), an append at seq 2 (the head moved back) failed: {}", err_text(&e)))?;
    drop(a);
    let (_b, c) = kit.open_ok("a new handle after the cut")?;
    compare(&c, &r.lines(0, 4), "loaded by a new handle after the cut,")?;
    drop(_b);
    // What is left is a session the library opens (nothing more to cut) and appends to.
    let store = kit.factory.open(&kit.id).map_err(|e| format!("opening a session over the cut log failed: {}", err_text(&e)))?;
    let (s, report) = Session::open(store, SessionOptions { id: None, durability: Durability::EveryEvent, ..SessionOptions::default() })
        .map_err(|e| format!("a session open over the cut log failed: {}", err_text(&e)))?;
    if report.cut_records != 0 || s.len() != 3 {
        return Err(format!(
            "a session open over the cut log cut {} record(s) and holds {} events, expected 0 and 3",
            report.cut_records,
            s.len()
        ));
    }
    s.append(NewEvent::new("host/note", json!({"note": "after the cut"})))
        .map_err(|e| format!("a session append after the cut failed: {}", err_text(&e)))?;
    drop(s);
    let (_b, c) = kit.open_ok("a new handle after the session's append")?;
    if c.records.len() != 5 || texts(&c)[..4] != r.lines(0, 4)[..] {
        return Err(format!(
            "after the session's append the store holds {} record(s), expected the 4 kept by the cut and 1 more",
            c.records.len()
        ));
    }
    let saved = match saved {
        Some(w) => format!("the store reports the cut records kept in {w}"),
        None => "the store does not say where it kept the cut records".into(),
    };
    Ok(format!("cut(3) left 3 records and moved the head back; the log left opened as a session and took an append; {saved}"))
}

/// §2.4.3 (and host store rule 4): sync makes appended records durable.
fn sync_durability(kit: &mut Kit<'_>) -> Outcome {
    let r = kit.records(3);
    let mut a = kit.create(&r, 1)?;
    a.sync().map_err(|e| format!("sync after the creating append failed: {}", err_text(&e)))?;
    append(&mut *a, &kit.id, 1, &r.events[1..3]).map_err(|e| format!("an append at seq 1 failed: {}", err_text(&e)))?;
    a.sync().map_err(|e| format!("sync after an append failed: {}", err_text(&e)))?;
    a.sync().map_err(|e| format!("a sync with nothing new to make durable failed: {}", err_text(&e)))?;
    drop(a);
    let (_b, c) = kit.open_ok("a new handle after the synced writer closed")?;
    compare(&c, &r.lines(0, 4), "loaded by a new handle after sync,")?;
    Ok("sync succeeded after appends and with nothing new; a new handle loaded every synced record".into())
}

/// §2.4, §2.6.1, §2.7.2: a session written through the store reopens as it was.
fn session_round_trip(kit: &mut Kit<'_>) -> Outcome {
    let store = kit.factory.open(&kit.id).map_err(|e| format!("opening a handle for a new session failed: {}", err_text(&e)))?;
    let opts = || SessionOptions { id: Some(kit.id.clone()), durability: Durability::EveryEvent, ..SessionOptions::default() };
    let (s, _) = Session::open(store, opts()).map_err(|e| format!("creating a session through the store failed: {}", err_text(&e)))?;
    for i in 0..5 {
        s.append(NewEvent::new("host/note", json!({"note": format!("round trip {i}"), "text": "ünïcode \"quoted\" \\ / \t"})))
            .map_err(|e| format!("appending event {i} through the session failed: {}", err_text(&e)))?;
    }
    let head = s.chain_head();
    let (n, id) = (s.len(), s.id());
    drop(s);
    let store = kit.factory.open(&kit.id).map_err(|e| format!("opening a handle to reopen the session failed: {}", err_text(&e)))?;
    let (s, report) = Session::open(store, opts()).map_err(|e| format!("reopening the session failed: {}", err_text(&e)))?;
    if s.id() != id || s.len() != n {
        return Err(format!("the reopened session is {:?} with {} events, expected {id:?} with {n}", s.id(), s.len()));
    }
    if s.chain_head() != head {
        return Err("the reopened session's chain head differs from the one written: records were not kept verbatim".into());
    }
    if report.cut_records != 0 || report.repaired_events != 0 {
        return Err(format!(
            "reopening an intact session cut {} record(s) and repaired {} event(s), expected none",
            report.cut_records, report.repaired_events
        ));
    }
    s.verify().map_err(|e| format!("verifying the reopened session failed: {}", err_text(&e)))?;
    Ok(format!("a session of {n} events written through the store reopened with the same chain head and verified"))
}

/// Checkpoints (`docs/log.md`): a bounded open asks the store for the window of the last
/// checkpoint. Optional: a store that answers `None` is read whole. One that answers must hand
/// over the session header and the records from the one before the window's start to the end.
fn checkpoint_window(kit: &mut Kit<'_>) -> Outcome {
    use crate::log::checkpoint::CheckpointPolicy;
    let store = kit.factory.open(&kit.id).map_err(|e| format!("opening a handle for a new session failed: {}", err_text(&e)))?;
    let opts = || SessionOptions {
        id: Some(kit.id.clone()),
        durability: Durability::EveryEvent,
        checkpoints: CheckpointPolicy { every_events: 4, every_bytes: 0, at_compaction: true },
        ..SessionOptions::default()
    };
    let (s, _) = Session::open(store, opts()).map_err(|e| format!("creating a session through the store failed: {}", err_text(&e)))?;
    for i in 0..11 {
        s.append(NewEvent::new("host/note", json!({"note": format!("checkpointed {i}")})))
            .map_err(|e| format!("appending event {i} through the session failed: {}", err_text(&e)))?;
    }
    let records: Vec<String> = s.records().map_err(|e| err_text(&e))?.iter().map(|r| r.to_string()).collect();
    let head = s.chain_head();
    drop(s);
    let checkpoints: Vec<usize> =
        records.iter().enumerate().filter(|(_, r)| crate::store::is_checkpoint_record(r.as_bytes())).map(|(i, _)| i).collect();
    let expect = |at: usize| -> (u64, u64) {
        let from = crate::store::window_from(records[at].as_bytes()).expect("a checkpoint of the library's");
        (at as u64 - 1, from.min(at as u64 - 1))
    };
    let mut a = kit.factory.open(&kit.id).map_err(|e| format!("opening a handle failed: {}", err_text(&e)))?;
    let check = |w: Option<crate::store::StoreWindow>, at: usize, what: &str| -> std::result::Result<bool, String> {
        let Some(w) = w else { return Ok(false) };
        let (cp, from) = expect(at);
        if w.header != records[0].as_bytes() {
            return Err(format!("{what}: the window's header is not the session header record"));
        }
        if (w.checkpoint, w.from) != (cp, from) {
            return Err(format!(
                "{what}: the window names checkpoint {} from seq {}, expected checkpoint {cp} from seq {from}",
                w.checkpoint, w.from
            ));
        }
        let want: Vec<&[u8]> = records[from as usize + 1..].iter().map(|r| r.as_bytes()).collect();
        let got: Vec<&[u8]> = (0..w.len()).map(|i| w.record(i)).collect();
        if got != want {
            return Err(format!(
                "{what}: the window holds {} record(s), not the {} from seq {from} to the end verbatim",
                got.len(),
                want.len()
            ));
        }
        Ok(true)
    };
    let last = *checkpoints.last().ok_or("the session wrote no checkpoint")?;
    let supported = check(a.load_window(None).map_err(|e| format!("load_window failed: {}", err_text(&e)))?, last, "the last checkpoint")?;
    if !supported {
        drop(a);
        return Ok("the store does not hand over a checkpoint's window (optional): opens read the whole log".into());
    }
    let before = checkpoints[checkpoints.len() - 2];
    let earlier =
        a.load_window(Some(last as u64 - 1)).map_err(|e| format!("load_window before the last checkpoint failed: {}", err_text(&e)))?;
    if !check(earlier, before, "the checkpoint before the last")? {
        return Err("the store hands over the last checkpoint's window but not the one before a given seq".into());
    }
    drop(a);
    let store = kit.factory.open(&kit.id).map_err(|e| format!("opening a handle to reopen the session failed: {}", err_text(&e)))?;
    let (s, report) =
        Session::open(store, opts()).map_err(|e| format!("reopening the session from its checkpoint failed: {}", err_text(&e)))?;
    if s.chain_head() != head || report.cut_records + report.repaired_events != 0 || s.with_log(|l| l.base()) == 0 {
        return Err("the session reopened from its checkpoint is not the one written".into());
    }
    Ok(format!(
        "the store handed over the window of the last checkpoint (seq {}) and of the one before it, verbatim; the session reopened from it",
        last - 1
    ))
}

/// Stores named by URL: a `file:` URL names a directory (one log per case is created in it),
/// a `postgres://` URL a database (one session per case, ids `conformance-...`; the URL must
/// not name a session).
pub struct UrlFactory {
    url: String,
    dir: Option<std::path::PathBuf>,
}

impl UrlFactory {
    /// Checks the URL; opens nothing yet.
    pub fn new(url: &str) -> Result<UrlFactory> {
        match parse(url)? {
            Location::File(path) => {
                if !path.is_dir() {
                    return Err(Error::invalid(
                        "url",
                        format!("{}: the conformance kit takes a file: URL naming a directory (it creates one log per case in it), and this is not one", path.display()),
                    ));
                }
                Ok(UrlFactory { url: url.to_string(), dir: Some(path) })
            }
            #[cfg(feature = "postgres")]
            Location::Postgres(pg) => {
                if pg.session().is_some() {
                    return Err(Error::invalid("url", "the conformance kit creates a session per case: leave session= out of the URL"));
                }
                Ok(UrlFactory { url: url.to_string(), dir: None })
            }
        }
    }
}

impl StoreFactory for UrlFactory {
    fn open(&mut self, session_id: &str) -> Result<Box<dyn Store>> {
        match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{session_id}.jsonl"));
                Ok(Box::new(crate::store::JsonlStore::open(path)?))
            }
            None => Ok(open_store(&self.url, &UrlOptions { id: Some(session_id.to_string()), ..UrlOptions::default() })?.0),
        }
    }

    fn describe(&self) -> String {
        crate::store::url::redact(&self.url)
    }
}

/// The host-store protocol ([`crate::store::host`]) for the kit: one transport serves every
/// handle, so each request carries `"handle": n` (the handle the kit opened), and two more
/// requests open and close handles:
///
/// - `{"op":"open","handle": n,"sessionId": id}` → any JSON: a new handle on session `id`
///   (the same id: the same records; a new one: an empty session);
/// - `{"op":"close","handle": n}` → any JSON: the handle is gone (what freeing a session
///   does to a host store: its lock or lease goes).
///
/// Every other request is the protocol's (`load`, `append`, `sync`, `undo`, `cut`), plus
/// `handle`.
pub struct HostFactory<C: HostStoreCall + Sync + 'static> {
    call: Arc<C>,
    next: u64,
}

impl<C: HostStoreCall + Sync + 'static> HostFactory<C> {
    /// A factory over `call`.
    pub fn new(call: C) -> HostFactory<C> {
        HostFactory { call: Arc::new(call), next: 1 }
    }
}

/// One handle's transport: the shared one, with the handle's number added to every request.
struct HandleCall<C: HostStoreCall + Sync> {
    call: Arc<C>,
    handle: u64,
}

impl<C: HostStoreCall + Sync> HostStoreCall for HandleCall<C> {
    fn call(&self, op: &str, request: &Value) -> Result<Value> {
        let mut req = request.clone();
        if let Some(m) = req.as_object_mut() {
            m.insert("handle".into(), self.handle.into());
        }
        self.call.call(op, &req)
    }
}

impl<C: HostStoreCall + Sync> Drop for HandleCall<C> {
    fn drop(&mut self) {
        // A failed close cannot be reported (the handle is gone); the next open shows it.
        let _ = self.call.call("close", &json!({"op": "close", "handle": self.handle}));
    }
}

impl<C: HostStoreCall + Sync + 'static> StoreFactory for HostFactory<C> {
    fn open(&mut self, session_id: &str) -> Result<Box<dyn Store>> {
        let handle = self.next;
        self.next += 1;
        let reply = self
            .call
            .call("open", &json!({"op": "open", "handle": handle, "sessionId": session_id}))
            .map_err(|e| e.with_kind(ErrorKind::Storage).context("host store `open`").with("op", "open"))?;
        // From here the handle exists for the host: dropping it sends `close`.
        let call = HandleCall { call: self.call.clone(), handle };
        if let Some(why) = reply.get("locked") {
            let why = why.as_str().map(str::to_string).unwrap_or_else(|| why.to_string());
            return Err(Error::new(ErrorKind::Locked, format!("host store `open`: {why}")).with("op", "open"));
        }
        Ok(Box::new(HostStore::new(call)))
    }

    fn describe(&self) -> String {
        "host store".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_store_factory_and_unknown_cases() {
        // MemoryStore has no shared backing data: each open is a new session. The cases that
        // reopen fail, which shows the kit can fail; the JSONL and host stores pass in tests/.
        let mut f = |_: &str| -> Result<Box<dyn Store>> { Ok(Box::new(MemoryStore::new())) };
        let r = run(&mut f, Some(&["conditional-append".to_string(), "create-and-reload".to_string()])).unwrap();
        assert_eq!(r.cases.len(), 2);
        assert_eq!(r.cases[0].case, "create-and-reload", "the cases run in CASES order");
        assert!(!r.cases[0].passed);
        assert!(r.cases[0].detail.contains("loaded by a new handle, the store holds 0 record(s)"), "{}", r.cases[0].detail);
        assert!(r.cases[1].passed, "{:?}", r.cases[1]);
        let e = r.error().unwrap();
        assert_eq!(e.kind(), ErrorKind::Nonconforming);
        assert_eq!(e.detail()["failed"], json!(["create-and-reload"]));
        let e = run(&mut f, Some(&["nope".to_string()])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("\"nope\""), "{}", e.message());
    }
}
