//! Faults leave memory and log in step (Rust API).
//!
//! A fault store (a JSONL file store that fails the n-th append or sync from now) drives every
//! appending entry point into a storage error at each of its appends, then frees the fault and
//! carries on: the same call is retried. After every refused call the handle's memory equals
//! the file, and a call that writes one batch changed nothing a host can see. At the end the
//! log verifies, reloads to the same records, and holds what a fault-free run of the same
//! script holds (the same history, the same turn, step and tool events; only a compaction whose
//! outcome the store refused may add a `compaction/start` ... `compaction/end{failed}` pair).
//!
//! Regression tests for the findings of issue #15 follow: a refused tool result, a refused
//! `start_turn`, a refused step, and the counter of consecutive overflows.

use llmsession::agent::{ProviderErrorOutcome, ToolResultInput};
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::log::{TurnEndReason, UserSource};
use llmsession::prefix::{context_event, ListenerContext};
use llmsession::store::{Batch, Durability, JsonlStore, Store, StoreContents};
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Error, ErrorKind, Message, NewEvent, Role, Session, SessionOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

mod support {
    pub mod host_script;
}

// ---------------------------------------------------------------------------------------------
// The fault store

/// Which write fails next: the `append_at`-th append (or `sync_at`-th sync) from now; 0 = none.
#[derive(Default)]
struct Faults {
    append_at: AtomicU32,
    sync_at: AtomicU32,
    fired: AtomicBool,
    /// Every append fails while set (a full disk).
    always: AtomicBool,
}

impl Faults {
    fn arm(&self, kind: Fault, at: u32) {
        self.fired.store(false, Ordering::SeqCst);
        match kind {
            Fault::Append => self.append_at.store(at, Ordering::SeqCst),
            Fault::Sync => self.sync_at.store(at, Ordering::SeqCst),
        }
    }
    fn disarm(&self) {
        self.append_at.store(0, Ordering::SeqCst);
        self.sync_at.store(0, Ordering::SeqCst);
    }
    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
    fn hit(&self, c: &AtomicU32) -> bool {
        match c.load(Ordering::SeqCst) {
            0 => false,
            1 => {
                c.store(0, Ordering::SeqCst);
                self.fired.store(true, Ordering::SeqCst);
                true
            }
            n => {
                c.store(n - 1, Ordering::SeqCst);
                false
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Append,
    Sync,
}

fn os_error(code: i32, what: &str) -> Error {
    let e = std::io::Error::from_raw_os_error(code);
    Error::new(ErrorKind::Storage, format!("fault store: cannot {what}: {e}")).with("os", code as i64)
}

struct FaultStore {
    inner: JsonlStore,
    faults: Arc<Faults>,
}

impl FaultStore {
    fn open(path: &Path, faults: &Arc<Faults>) -> Box<FaultStore> {
        Box::new(FaultStore { inner: JsonlStore::open(path).unwrap(), faults: faults.clone() })
    }
}

impl Store for FaultStore {
    fn load(&mut self) -> llmsession::Result<StoreContents> {
        self.inner.load()
    }
    fn append(&mut self, batch: &Batch<'_>) -> llmsession::Result<()> {
        if self.faults.hit(&self.faults.append_at) || self.faults.always.load(Ordering::SeqCst) {
            return Err(os_error(libc::ENOSPC, "append"));
        }
        self.inner.append(batch)
    }
    fn sync(&mut self) -> llmsession::Result<()> {
        if self.faults.hit(&self.faults.sync_at) {
            return Err(os_error(libc::EIO, "sync"));
        }
        self.inner.sync()
    }
    fn undo(&mut self, from: usize) -> llmsession::Result<()> {
        self.inner.undo(from)
    }
    fn cut(&mut self, keep: usize, reason: &str) -> llmsession::Result<Option<String>> {
        self.inner.cut(keep, reason)
    }
    fn describe(&self) -> String {
        format!("fault store over {}", self.inner.describe())
    }
}

// ---------------------------------------------------------------------------------------------
// The host and its script

fn options() -> AgentOptions {
    let mut o = AgentOptions::new(CallConfig::new("openai", "m"));
    o.system = Some("You answer questions about files.".into());
    o
}

fn policy() -> CompactionPolicy {
    let mut p = CompactionPolicy::new(3000);
    p.threshold = 0.2;
    p.retained = Retained::Tokens(50);
    p.summary_max_tokens = 1000;
    p
}

fn summariser() -> Arc<dyn llmsession::compaction::Summariser> {
    Arc::new(|_: &SummaryRequest, _: &CancelToken| -> llmsession::Result<SummaryOutput> {
        Ok(SummaryOutput { text: "SUMMARY: the files were read.".into(), ..Default::default() })
    })
}

fn prefix_listener() -> Arc<dyn llmsession::prefix::PrefixListener> {
    Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| -> llmsession::Result<Vec<Message>> {
        let mut out = vec![Message::user_text("Project notes: be brief.")];
        out.extend_from_slice(rest);
        Ok(out)
    })
}

/// A session over a fault store in a temporary directory, with its agent.
struct Host {
    dir: tempfile::TempDir,
    path: PathBuf,
    faults: Arc<Faults>,
    durability: Durability,
    session: Option<Session>,
    agent: Option<Agent>,
    /// The number of the reopened copy of the log (a new file per crash).
    copies: u32,
}

impl Host {
    fn new(durability: Durability) -> Host {
        let dir = temp_dir();
        let path = dir.path().join("s.jsonl");
        Host { dir, path, faults: Arc::new(Faults::default()), durability, session: None, agent: None, copies: 0 }
    }
    fn session(&self) -> &Session {
        self.session.as_ref().expect("a session")
    }
    fn agent(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("an agent")
    }
    fn opts(&self) -> SessionOptions {
        SessionOptions { durability: self.durability, id: Some("faults".into()), ..SessionOptions::default() }
    }
    fn new_agent(&mut self) -> llmsession::Result<()> {
        let mut a = Agent::new(self.session(), options())?;
        a.add_prefix_listener(prefix_listener())?;
        a.set_summariser(Some(summariser()));
        a.set_policy(Some(policy()))?;
        self.agent = Some(a);
        Ok(())
    }
}

fn assistant(text: &str, calls: &[&str]) -> Message {
    let mut content = vec![Block::text(text)];
    for c in calls {
        content.push(Block::tool_call(c, "read", &format!("{{\"path\":\"{c}\"}}")));
    }
    Message::new(Role::Assistant, content)
}

fn result(id: &str, text: &str) -> ToolResultInput {
    ToolResultInput { call_id: id.into(), content: vec![Block::text(text)], is_error: false }
}

/// How a call that the store refused is retried.
#[derive(Clone, Copy, PartialEq)]
enum Retry {
    /// The same call again.
    Same,
    /// The instance is gone (a refused dispose): a new instance ends the turn `disposed`.
    EndWithNewInstance,
}

/// Whether a refused call must leave what a host sees (history, open turn, pending calls)
/// exactly as it was: true for the calls that write one batch.
type Step = (&'static str, Retry, bool, fn(&mut Host) -> llmsession::Result<()>);

/// A text over the threshold (600 tokens) on its own.
fn big(word: &str) -> String {
    format!("{word} ").repeat(800)
}

/// A temporary directory, in memory where the system has one (syncs cost nothing there).
fn temp_dir() -> tempfile::TempDir {
    match std::path::Path::new("/dev/shm") {
        p if p.is_dir() => tempfile::tempdir_in(p).unwrap_or_else(|_| tempfile::tempdir().unwrap()),
        _ => tempfile::tempdir().unwrap(),
    }
}

/// The script: every appending entry point of the Rust API, in an order that exercises the
/// gate's compaction, overflow recovery, a manual compaction, deferred context, tool results
/// out of order, provider errors, aborted and disposed turns, a fork and a repair on open.
fn script() -> Vec<Step> {
    vec![
        ("create", Retry::Same, true, |h| {
            h.session = Some(Session::create(FaultStore::open(&h.path, &h.faults), h.opts())?);
            Ok(())
        }),
        ("session.append host event", Retry::Same, true, |h| {
            h.session().append(NewEvent::new("host/note", json!({"note": "started"}))).map(|_| ())
        }),
        ("session.append context", Retry::Same, true, |h| {
            h.session().append(context_event(Message::user_text("The repository is at /src."), UserSource::Host)?).map(|_| ())
        }),
        ("new agent", Retry::Same, true, |h| h.new_agent()),
        // Turn 1: two tool calls, results out of order, deferred context.
        ("start_turn 1", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Read a and b.")).map(|_| ())),
        ("next_request 1.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 1.1", Retry::Same, true, |h| h.agent().record_response(assistant("reading", &["a", "b"]), None).map(|_| ())),
        ("inject deferred", Retry::Same, true, |h| h.agent().inject(Message::user_text("Note: b is large.")).map(|_| ())),
        ("record_tool_result b", Retry::Same, true, |h| h.agent().record_tool_result(result("b", &big("beta"))).map(|_| ())),
        ("record_tool_result a", Retry::Same, true, |h| h.agent().record_tool_result(result("a", "alpha")).map(|_| ())),
        ("next_request 1.2", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 1.2", Retry::Same, true, |h| {
            h.agent()
                .record_response(
                    assistant("a and b are read", &[]),
                    Some(llmsession::Usage { input_tokens: 9000, output_tokens: 5, ..Default::default() }),
                )
                .map(|_| ())
        }),
        ("end_turn 1", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Completed)),
        // Turn 2: the gate compacts (the history is far over the threshold).
        ("start_turn 2", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Summarise b.")).map(|_| ())),
        ("next_request 2.1 (gate compacts)", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 2.1", Retry::Same, true, |h| h.agent().record_response(assistant(&big("gamma"), &[]), None).map(|_| ())),
        ("end_turn 2", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Completed)),
        // Turn 3: a context overflow is recovered by compaction.
        ("start_turn 3", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("And now c.")).map(|_| ())),
        ("next_request 3.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("provider_error overflow", Retry::Same, false, |h| {
            match h.agent().report_provider_error("prompt is too long", true, &CancelToken::new())? {
                ProviderErrorOutcome::Retry => Ok(()),
                other => panic!("expected a retry, got {other:?}"),
            }
        }),
        ("next_request 3.2", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 3.2", Retry::Same, true, |h| h.agent().record_response(assistant("c is done", &[]), None).map(|_| ())),
        ("end_turn 3", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Completed)),
        // Context while idle, then a manual compaction.
        ("inject idle", Retry::Same, true, |h| h.agent().inject(Message::user_text(big("delta"))).map(|_| ())),
        ("compact", Retry::Same, false, |h| {
            let out = h.agent().compact(None, &CancelToken::new())?;
            assert_eq!(out.outcome, "landed");
            Ok(())
        }),
        // Turn 4: a provider error, then the turn is aborted.
        ("start_turn 4", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Try d.")).map(|_| ())),
        ("next_request 4.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("provider_error", Retry::Same, true, |h| h.agent().report_provider_error("server error", false, &CancelToken::new()).map(|_| ())),
        ("end_turn 4 aborted", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Aborted)),
        // Turn 5: a call without its result, aborted with the step closed and a result missing.
        ("start_turn 5", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Read e and f.")).map(|_| ())),
        ("next_request 5.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 5.1", Retry::Same, true, |h| h.agent().record_response(assistant("reading", &["e", "f"]), None).map(|_| ())),
        ("record_tool_result f (buffered)", Retry::Same, true, |h| h.agent().record_tool_result(result("f", "phi")).map(|_| ())),
        ("end_turn 5 aborted", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Aborted)),
        // Turn 6: disposed with an open step.
        ("start_turn 6", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Wait.")).map(|_| ())),
        ("next_request 6.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("dispose", Retry::EndWithNewInstance, false, |h| h.agent.take().unwrap().dispose()),
        ("new agent (resumed)", Retry::Same, true, |h| h.new_agent()),
        // A fork of the whole session into a store of its own.
        ("fork", Retry::Same, true, |h| {
            let path = h.dir.path().join("fork.jsonl");
            let fork = h.session().fork(None, FaultStore::open(&path, &h.faults), h.opts())?;
            support::host_script::check_session(&fork).unwrap();
            Ok(())
        }),
        // Turn 7: the process dies in the middle; the log is reopened from a copy and repaired.
        ("start_turn 7", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Read g.")).map(|_| ())),
        ("next_request 7.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 7.1", Retry::Same, true, |h| h.agent().record_response(assistant("reading", &["g"]), None).map(|_| ())),
        ("crash", Retry::Same, true, |h| {
            h.copies += 1;
            let copy = h.dir.path().join(format!("copy{}.jsonl", h.copies));
            std::fs::copy(&h.path, &copy).unwrap();
            // Nothing more reaches the old file: the agent and the session are lost as in a
            // crash (leaked, so no drop writes a turn end).
            std::mem::forget(h.agent.take());
            std::mem::forget(h.session.take());
            h.path = copy;
            Ok(())
        }),
        ("open (repairs the open turn)", Retry::Same, true, |h| {
            let (s, report) = Session::open(FaultStore::open(&h.path, &h.faults), h.opts())?;
            assert!(report.repaired_events > 0, "the open turn was closed: {report:?}");
            h.session = Some(s);
            Ok(())
        }),
        ("new agent (after the crash)", Retry::Same, true, |h| h.new_agent()),
        ("start_turn 8", Retry::Same, true, |h| h.agent().start_turn(Message::user_text("Done?")).map(|_| ())),
        ("next_request 8.1", Retry::Same, false, |h| h.agent().next_request(&CancelToken::new()).map(|_| ())),
        ("record_response 8.1", Retry::Same, true, |h| h.agent().record_response(assistant("Done.", &[]), None).map(|_| ())),
        ("end_turn 8", Retry::Same, true, |h| h.agent().end_turn(TurnEndReason::Completed)),
        ("sync", Retry::Same, true, |h| h.session().sync()),
    ]
}

/// What a host can see of the session: the history, the open turn and the pending calls.
fn visible(s: &Session) -> String {
    let (turn, pending) =
        s.with_log(|l| (format!("{:?}", l.state().open_turn), l.state().pending.iter().map(|p| p.id.clone()).collect::<Vec<_>>()));
    format!("{}\n{turn}\n{pending:?}", s.history_json())
}

/// The file's records (as stored) match the handle's.
fn assert_in_step(h: &Host, what: &str) {
    let Some(s) = &h.session else { return };
    let file = std::fs::read_to_string(&h.path).unwrap_or_default();
    let disk: Vec<&str> = file.lines().collect();
    let mem: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    assert_eq!(disk, mem, "{what}: the file and the handle disagree");
}

/// The events of a log without the compactions that did not land, as (type, data) with the
/// fields that depend on seqs or time left out: what the host saw succeed.
fn outcome(s: &Session) -> (String, Vec<String>) {
    let events: Vec<Value> = serde_json::from_str(&s.events_json(0, None).unwrap()).unwrap();
    let mut keep = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for e in &events {
        let ty = e["type"].as_str().unwrap().to_string();
        let line = match ty.as_str() {
            // Seqs and digests of compaction events depend on what was logged before, and so do
            // the seqs a checkpoint names.
            t if t.starts_with("compaction/") || t == "session/checkpoint" => ty.clone(),
            "step/start" => format!("{ty} {} {}", e["data"]["turn"], e["data"]["step"]),
            _ => format!("{ty} {}", e["data"]),
        };
        if ty == "compaction/start" {
            open.clear();
        }
        if ty.starts_with("compaction/") {
            open.push(line);
            if ty == "compaction/end" {
                if e["data"]["outcome"] == "landed" {
                    keep.append(&mut open);
                }
                open.clear();
            }
            continue;
        }
        keep.push(line);
    }
    (s.history_json(), keep)
}

fn run_clean(durability: Durability) -> (Host, Vec<u32>) {
    // Counts the appends (or syncs) each step makes, with no fault.
    let mut h = Host::new(durability);
    let mut counts = Vec::new();
    for (name, _, _, f) in script() {
        let before = count_writes(&h);
        f(&mut h).unwrap_or_else(|e| panic!("{name}: the script fails without faults: {e:?}"));
        counts.push(count_writes(&h).saturating_sub(before));
    }
    (h, counts)
}

/// Lines in the current file (a rough count of the writes so far; only used to know whether a
/// step writes at all).
fn count_writes(h: &Host) -> u32 {
    std::fs::read_to_string(&h.path).map(|s| s.lines().count() as u32).unwrap_or(0)
}

/// Runs the script with `kind` fault at the `at`-th write of step `target`, retrying it once
/// freed. Returns whether the fault fired.
fn run_with_fault(durability: Durability, kind: Fault, target: usize, at: u32, reference: &(String, Vec<String>)) -> bool {
    let mut h = Host::new(durability);
    let steps = script();
    let mut fired = false;
    for (i, (name, retry, one_batch, f)) in steps.iter().enumerate() {
        if i != target {
            f(&mut h).unwrap_or_else(|e| panic!("{name} (after a fault in step {target}): {e:?}"));
            continue;
        }
        let before = h.session.as_ref().map(visible);
        eprintln!("fault {kind:?} at write {at} of {name:?}");
        h.faults.arm(kind, at);
        let r = f(&mut h);
        fired = h.faults.fired();
        h.faults.disarm();
        let what = format!("{kind:?} fault at write {at} of {name:?}");
        match r {
            Ok(()) => {
                // A fault that fired inside a call that succeeded is one the call survived (a
                // drop writing nothing, a write it did not need).
                assert!(!fired || kind == Fault::Sync, "{what}: the fault fired and the call reported success");
            }
            Err(e) => {
                assert!(fired, "{what}: failed without the fault: {e:?}");
                assert_eq!(e.kind(), ErrorKind::Storage, "{what}: {e:?}");
                assert!(e.message().contains("fault store"), "{what}: the error names the store: {}", e.message());
                assert_in_step(&h, &what);
                if *one_batch {
                    assert_eq!(h.session.as_ref().map(visible), before, "{what}: a refused call changed what the host sees");
                }
                match retry {
                    Retry::Same => f(&mut h).unwrap_or_else(|e| panic!("{what}: the retry failed: {e:?}")),
                    Retry::EndWithNewInstance => {
                        h.new_agent().unwrap();
                        h.agent().end_turn(TurnEndReason::Disposed).unwrap_or_else(|e| panic!("{what}: closing the turn: {e:?}"));
                        h.agent.take().unwrap().dispose().unwrap();
                    }
                }
            }
        }
        assert_in_step(&h, &what);
    }
    let what = format!("{kind:?} fault at write {at} of step {target}");
    let s = h.session.as_ref().unwrap();
    support::host_script::check_session(s).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_in_step(&h, &what);
    let got = outcome(s);
    assert_eq!(got.0, reference.0, "{what}: the history differs from a run without faults");
    assert_eq!(got.1, reference.1, "{what}: the events differ from a run without faults");
    // The file reloads to the same records.
    let records: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    drop(h.agent.take());
    drop(h.session.take());
    let (reloaded, _) = Session::open_jsonl(&h.path, SessionOptions::default()).unwrap();
    assert_eq!(reloaded.records().unwrap().iter().map(|r| r.to_string()).collect::<Vec<_>>(), records, "{what}: the reload differs");
    fired
}

fn sweep(durability: Durability, kind: Fault) {
    let (clean, counts) = run_clean(durability);
    let reference = outcome(clean.session());
    support::host_script::check_session(clean.session()).unwrap();
    let triggers: Vec<String> = serde_json::from_str::<Vec<Value>>(&clean.session().events_json(0, None).unwrap())
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "compaction/start")
        .map(|e| e["data"]["trigger"].as_str().unwrap().to_string())
        .collect();
    for t in ["auto", "overflow", "manual"] {
        assert!(triggers.iter().any(|x| x == t), "the script compacts in the gate, after an overflow and on request: {triggers:?}");
    }
    let mut faults = 0;
    for (target, (name, _, _, _)) in script().iter().enumerate() {
        if counts[target] == 0 && !name.starts_with("open") && !name.starts_with("fork") {
            continue;
        }
        let mut at = 1;
        while run_with_fault(durability, kind, target, at, &reference) {
            faults += 1;
            at += 1;
            assert!(at < 50, "{name}: more writes than expected");
        }
    }
    eprintln!("{kind:?} faults, {durability:?}: {faults} injected");
    assert!(faults > 40, "every appending step was faulted ({faults})");
}

#[test]
fn every_append_refused_in_turn_leaves_memory_and_log_in_step() {
    sweep(Durability::TurnEnd, Fault::Append);
}

#[test]
fn every_sync_failure_in_turn_leaves_memory_and_log_in_step() {
    sweep(Durability::EveryEvent, Fault::Sync);
}

// ---------------------------------------------------------------------------------------------
// Regression tests for the findings

fn faulty(durability: Durability) -> (tempfile::TempDir, PathBuf, Arc<Faults>, Session) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let faults = Arc::new(Faults::default());
    let s =
        Session::create(FaultStore::open(&path, &faults), SessionOptions { durability, id: Some("r".into()), ..SessionOptions::default() })
            .unwrap();
    (dir, path, faults, s)
}

fn agent_on(s: &Session) -> Agent {
    Agent::new(s, options()).unwrap()
}

/// Opens turn 1 with a step whose response calls `calls`.
fn with_calls(a: &mut Agent, calls: &[&str]) {
    a.start_turn(Message::user_text("go")).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(assistant("calling", calls), None).unwrap();
}

fn tool_results(s: &Session) -> Vec<Value> {
    let events: Vec<Value> = serde_json::from_str(&s.events_json(0, None).unwrap()).unwrap();
    events.into_iter().filter(|e| e["type"] == "tool/result").map(|e| e["data"].clone()).collect()
}

/// A tool result refused by a full disk is not reported: retrying it succeeds (no "already
/// reported"), and it is what the log holds.
#[test]
fn a_refused_tool_result_can_be_reported_again() {
    let (_d, _p, faults, s) = faulty(Durability::EveryEvent);
    let mut a = agent_on(&s);
    with_calls(&mut a, &["c1"]);
    faults.arm(Fault::Append, 1);
    let e = a.record_tool_result(result("c1", "payload")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage, "{e:?}");
    // The call still waits for its result: the next request says so.
    let e = a.next_request(&CancelToken::new()).unwrap_err();
    assert!(e.message().contains("\"c1\" has no result yet"), "{}", e.message());
    assert_eq!(a.record_tool_result(result("c1", "payload")).unwrap(), 1, "the retry is accepted and written");
    assert_eq!(tool_results(&s), vec![json!({"callId": "c1", "content": [{"type": "text", "text": "payload"}], "isError": false})]);
    a.next_request(&CancelToken::new()).unwrap();
}

/// After a refused tool result, aborting the turn (once space is back) answers the call with an
/// error result, never with the refused payload as a success; while the disk is still full the
/// abort is refused and can be retried.
#[test]
fn aborting_after_a_refused_tool_result_does_not_log_the_refused_payload() {
    let (_d, path, faults, s) = faulty(Durability::EveryEvent);
    let mut a = agent_on(&s);
    with_calls(&mut a, &["c1", "c2"]);
    // c2 is reported (waits for c1), then c1 is refused.
    assert_eq!(a.record_tool_result(result("c2", "second")).unwrap(), 0);
    faults.arm(Fault::Append, 1);
    assert_eq!(a.record_tool_result(result("c1", "refused payload")).unwrap_err().kind(), ErrorKind::Storage);
    faults.arm(Fault::Append, 1);
    assert_eq!(a.end_turn(TurnEndReason::Aborted).unwrap_err().kind(), ErrorKind::Storage, "the disk is still full");
    assert!(s.with_log(|l| l.state().open_turn.is_some()), "the refused end left the turn open");
    a.end_turn(TurnEndReason::Aborted).unwrap();
    let results = tool_results(&s);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["callId"], "c1");
    assert_eq!(results[0]["isError"], true, "the refused result is not logged as a success: {}", results[0]);
    assert!(!results[0].to_string().contains("refused payload"));
    assert_eq!(results[1], json!({"callId": "c2", "content": [{"type": "text", "text": "second"}], "isError": false}));
    support::host_script::check_session(&s).unwrap();
    drop(a);
    drop(s);
    let (back, _) = Session::open_jsonl(&path, SessionOptions::default()).unwrap();
    assert_eq!(tool_results(&back), results);
}

/// A refused `start_turn` opens no turn and writes nothing, whichever of its writes the store
/// refuses (it used to write `turn/start` before `user/message`, leaving the turn open when the
/// second was refused); the retry opens the same turn.
#[test]
fn a_refused_start_turn_opens_no_turn() {
    let mut refused = 0;
    for kind in [Fault::Append, Fault::Sync] {
        for at in 1..=2 {
            let (_d, path, faults, s) = faulty(Durability::EveryEvent);
            let mut a = agent_on(&s);
            let before = s.len();
            faults.arm(kind, at);
            match a.start_turn(Message::user_text("hello")) {
                Err(e) => {
                    refused += 1;
                    assert_eq!(e.kind(), ErrorKind::Storage, "{kind:?}@{at}: {e:?}");
                    assert_eq!(s.len(), before, "{kind:?}@{at}: nothing in memory");
                    assert!(s.with_log(|l| l.state().open_turn.is_none()), "{kind:?}@{at}: no turn is open");
                    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1, "{kind:?}@{at}: only the header is on disk");
                    faults.disarm();
                    assert_eq!(a.start_turn(Message::user_text("hello")).unwrap(), 1, "{kind:?}@{at}: the retry opens turn 1");
                }
                Ok(turn) => {
                    assert!(!faults.fired(), "{kind:?}@{at}: a refused write was reported as success");
                    assert_eq!(turn, 1);
                }
            }
            faults.disarm();
            a.end_turn(TurnEndReason::Aborted).unwrap();
        }
    }
    assert_eq!(refused, 2, "one refusal per kind: start_turn writes one batch");
}

/// A refused step (header + `step/start`, one batch) leaves no step open and records no header,
/// whichever write the store refuses; the retry records both.
#[test]
fn a_refused_first_request_records_its_header_on_the_retry() {
    for at in 1..=2 {
        let (_d, _p, faults, s) = faulty(Durability::EveryEvent);
        let mut a = agent_on(&s);
        a.start_turn(Message::user_text("hello")).unwrap();
        faults.arm(Fault::Append, at);
        match a.next_request(&CancelToken::new()) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Storage);
                assert!(s.with_log(|l| l.state().open_turn.as_ref().is_some_and(|t| !t.step_open)), "@{at}: no step is open");
                assert_eq!(s.request_header(), None, "@{at}: no header was recorded");
                assert_eq!(a.stats().requests, 0, "@{at}: the refused request is not counted");
                faults.disarm();
                let r = a.next_request(&CancelToken::new()).unwrap();
                assert_eq!(r.step, 1);
            }
            Ok(r) => assert!(!faults.fired() && r.step == 1, "@{at}"),
        }
        assert!(s.request_header().is_some());
        assert_eq!(a.stats().requests, 1);
        let headers = serde_json::from_str::<Vec<Value>>(&s.events_json(0, None).unwrap())
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "request/header")
            .count();
        assert_eq!(headers, 1, "@{at}: one header");
    }
}

/// A refused landing leaves the surface untouched; the compaction is closed as failed and the
/// retry compacts.
#[test]
fn a_refused_landing_leaves_the_surface_and_the_retry_lands() {
    let (_d, _p, faults, s) = faulty(Durability::TurnEnd);
    let mut a = agent_on(&s);
    a.set_summariser(Some(summariser()));
    a.start_turn(Message::user_text(big("one"))).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(assistant(&big("two"), &[]), None).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    let history = s.history_json();
    // The first append is compaction/start; the second the landing.
    faults.arm(Fault::Append, 2);
    let e = a.compact(None, &CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage, "{e:?}");
    assert_eq!(s.history_json(), history, "the surface is untouched");
    assert_eq!(a.stats().compactions, 0);
    let out = a.compact(None, &CancelToken::new()).unwrap();
    assert_eq!(out.outcome, "landed");
    assert_eq!(a.stats().compactions, 1);
    support::host_script::check_session(&s).unwrap();
}

/// The store refuses both the landing and the failed end: the compaction stays open in the
/// log, and the next request closes it (as failed) in the batch of its step.
#[test]
fn a_compaction_left_open_by_the_store_is_closed_by_the_next_request() {
    let (_d, _p, faults, s) = faulty(Durability::TurnEnd);
    let mut a = agent_on(&s);
    a.start_turn(Message::user_text(big("one"))).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(assistant(&big("two"), &[]), None).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    let history = s.history_json();
    // The summariser runs after compaction/start is stored: from then on the disk is full.
    let full = faults.clone();
    a.set_summariser(Some(Arc::new(move |_: &SummaryRequest, _: &CancelToken| -> llmsession::Result<SummaryOutput> {
        full.always.store(true, Ordering::SeqCst);
        Ok(SummaryOutput { text: "SUMMARY".into(), ..Default::default() })
    })));
    let e = a.compact(None, &CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage, "{e:?}");
    assert!(s.with_log(|l| l.state().compaction.is_some()), "the compaction is still open in the log");
    faults.always.store(false, Ordering::SeqCst);
    assert_eq!(s.history_json(), history, "the surface is untouched");
    a.start_turn(Message::user_text("three")).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    let events: Vec<Value> = serde_json::from_str(&s.events_json(0, None).unwrap()).unwrap();
    let n = events.len();
    assert_eq!(events[n - 2]["type"], "compaction/end");
    assert_eq!(events[n - 2]["data"]["outcome"], "failed");
    assert_eq!(events[n - 1]["type"], "step/start");
    support::host_script::check_session(&s).unwrap();
}

/// The consecutive-overflow count resets at the end of a turn: a spent budget fails that turn,
/// not the next one.
#[test]
fn a_spent_overflow_budget_does_not_reach_the_next_turn() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options()).unwrap();
    a.set_summariser(Some(summariser()));
    a.set_policy(Some(policy())).unwrap();
    let c = CancelToken::new();
    a.start_turn(Message::user_text(big("one"))).unwrap();
    a.next_request(&c).unwrap();
    a.record_response(assistant("ok", &[]), None).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    a.start_turn(Message::user_text("two")).unwrap();
    a.next_request(&c).unwrap();
    assert_eq!(a.report_provider_error("too long", true, &c).unwrap(), ProviderErrorOutcome::Retry);
    a.next_request(&c).unwrap();
    assert_eq!(a.report_provider_error("too long", true, &c).unwrap_err().kind(), ErrorKind::OverflowBudget);
    a.end_turn(TurnEndReason::Error).unwrap();
    a.inject(Message::user_text(big("three"))).unwrap();
    a.start_turn(Message::user_text("four")).unwrap();
    a.next_request(&c).unwrap();
    assert_eq!(a.report_provider_error("too long", true, &c).unwrap(), ProviderErrorOutcome::Retry, "a new turn has the whole budget");
}
