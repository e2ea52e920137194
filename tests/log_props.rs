//! Property test of the derivation cache (issue #2): after every operation of a random session
//! (turns with user messages, steps with or without tool calls, tool results, host context,
//! compactions of random spans), the incremental history equals a from-scratch fold: both
//! `Log::replay` of the parsed events and `history::project` folded over a surface order that
//! this test computes on its own. And a crash at any byte of a saved session loads a prefix
//! of its events, repaired to rest.

mod common;

use common::*;
use llmsession::error::ErrorKind;
use llmsession::log::history::project;
use llmsession::log::load::LoadReport;
use llmsession::log::{Event, Log};
use llmsession::{Durability, Session, SessionOptions};
use proptest::prelude::*;

/// One step of the random session. Each op does the valid thing it stands for when the state
/// allows it; otherwise it is skipped.
#[derive(Clone, Debug)]
enum Op {
    /// Open a turn with a user message, or end the open turn when it is at rest.
    Turn,
    /// A step: request, assistant message with `calls` tool calls, step end.
    Step { calls: u8 },
    /// A failed step (no assistant message).
    FailedStep,
    /// The result of the first pending tool call.
    Result,
    /// Host context (between turns or between steps).
    Context,
    /// A compaction of the span `a..=b` (positions taken modulo the surface length). An
    /// unbalanced span must be rejected, leaving the session unchanged.
    Compact { a: u16, b: u16 },
    /// A host log-only event.
    Note,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Turn),
        4 => (0u8..4).prop_map(|calls| Op::Step { calls }),
        1 => Just(Op::FailedStep),
        4 => Just(Op::Result),
        2 => Just(Op::Context),
        2 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Op::Compact { a, b }),
        1 => Just(Op::Note),
    ]
}

/// What this test knows about each surface position: its seq, the calls it opens and the call
/// it answers.
#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    calls: Vec<String>,
    answers: Option<String>,
}

struct Model {
    s: Session,
    surface: Vec<Entry>,
    turn: u64,
    open: bool,
    step: u64,
    pending: Vec<String>,
    next_call: u64,
}

impl Model {
    fn new(s: Session) -> Model {
        Model { s, surface: Vec::new(), turn: 0, open: false, step: 0, pending: Vec::new(), next_call: 0 }
    }

    fn push(&mut self, ev: llmsession::NewEvent, calls: Vec<String>, answers: Option<String>) {
        let visible = ev.surface_op.is_some();
        let seq = self.s.append(ev).unwrap();
        if visible {
            self.surface.push(Entry { seq, calls, answers });
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Turn if !self.open => {
                self.turn += 1;
                self.open = true;
                self.step = 0;
                self.push(turn_start(self.turn), vec![], None);
                self.push(user(&format!("question {}", self.turn)), vec![], None);
            }
            Op::Turn if self.pending.is_empty() => {
                self.open = false;
                self.push(turn_end(self.turn, "completed"), vec![], None);
            }
            Op::Step { calls } if self.open && self.pending.is_empty() => {
                self.step += 1;
                let (t, st) = (self.turn, self.step);
                let ids: Vec<String> = (0..calls)
                    .map(|_| {
                        self.next_call += 1;
                        format!("call-{}", self.next_call)
                    })
                    .collect();
                let triples: Vec<(&str, &str, &str)> = ids.iter().map(|i| (i.as_str(), "tool", "{}")).collect();
                self.push(step_start(t, st), vec![], None);
                self.push(assistant(t, st, &format!("reply {t}.{st}"), &triples), ids.clone(), None);
                for id in &ids {
                    self.push(tool_call(t, st, id, "tool", "{}"), vec![], None);
                }
                self.push(step_end(t, st, "response"), vec![], None);
                self.pending = ids;
            }
            Op::FailedStep if self.open && self.pending.is_empty() => {
                self.step += 1;
                self.push(step_start(self.turn, self.step), vec![], None);
                self.push(step_end(self.turn, self.step, "error"), vec![], None);
            }
            Op::Result if !self.pending.is_empty() => {
                let id = self.pending.remove(0);
                self.push(tool_result(&id, &format!("result of {id}")), vec![], Some(id));
            }
            Op::Context if self.pending.is_empty() => {
                self.push(host("the host says hello"), vec![], None);
            }
            Op::Note => self.push(llmsession::NewEvent::new("test/note", serde_json::json!({"n": 1})), vec![], None),
            Op::Compact { a, b } if self.pending.is_empty() && !self.surface.is_empty() => {
                let n = self.surface.len();
                let (mut start, mut end) = (a as usize % n, b as usize % n);
                if start > end {
                    std::mem::swap(&mut start, &mut end);
                }
                let span = &self.surface[start..=end];
                let balanced = span.iter().all(|e| {
                    e.calls.iter().all(|c| span.iter().any(|r| r.answers.as_ref() == Some(c)))
                        && e.answers.as_ref().map_or(true, |a| span.iter().any(|c| c.calls.contains(a)))
                });
                let sources: Vec<u64> = span.iter().map(|e| e.seq).collect();
                if balanced {
                    self.push(compaction_start_seqs(start, end, sources.clone()), vec![], None);
                    self.push(compaction_summary("summary"), vec![], None);
                    let cp = checkpoint(&format!("summary of {start}..={end}"), start, end, sources);
                    let seq = self.s.append(cp).unwrap();
                    self.surface.splice(start..=end, std::iter::once(Entry { seq, calls: vec![], answers: None }));
                    self.push(compaction_end("landed"), vec![], None);
                } else {
                    // An unbalanced span is refused when the compaction announces it.
                    rejected(&self.s, compaction_start_seqs(start, end, sources), ErrorKind::InvalidInput, &["separates"]);
                }
            }
            _ => {}
        }
    }

    /// The history as this test folds it: `project` over its own surface order.
    fn folded(&self) -> String {
        let parts: Vec<String> = self
            .surface
            .iter()
            .map(|e| {
                let ev = self.s.event(e.seq).unwrap();
                serde_json::to_string(&project(&ev).unwrap().expect("surface events are visible")).unwrap()
            })
            .collect();
        format!("[{}]", parts.join(","))
    }

    fn check(&self) {
        let cached = self.s.history_json();
        assert_eq!(cached, self.folded(), "the cache differs from project folded over the surface");
        let events: Vec<Event> = (0..self.s.len() as u64).map(|q| self.s.event(q).unwrap()).collect();
        let replayed = Log::replay(&events).unwrap();
        let mut out = Vec::new();
        out.push(b'[');
        replayed.history().write_json(&mut out, true);
        out.push(b']');
        assert_eq!(cached.as_bytes(), out.as_slice(), "the cache differs from a replay of the log");
        assert_eq!(self.s.with_log(|l| l.history().seqs()), self.surface.iter().map(|e| e.seq).collect::<Vec<_>>());
        assert_eq!(self.s.with_log(|l| l.history().generation()), replayed.history().generation());
        assert_eq!(self.s.with_log(|l| l.history().bytes()), replayed.history().bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_derivation_cache_equals_a_fold_from_scratch(ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Model::new(session_with_header());
        m.check();
        for op in &ops {
            m.apply(op);
            m.check();
        }
    }

    /// A crash at any byte of a JSONL file: the session opens with a prefix of its events,
    /// closed to rest by repair, and opens again with nothing left to cut or repair.
    #[test]
    fn a_crash_at_any_byte_loads_a_prefix_of_the_log(ops in prop::collection::vec(op(), 1..60), at in any::<prop::sample::Index>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let opts = || SessionOptions { durability: Durability::Never, id: Some("prop".into()), ..SessionOptions::default() };
        let (s, _) = Session::open_jsonl(&path, opts()).unwrap();
        s.append(header("initial", 1, "")).unwrap();
        let mut m = Model::new(s);
        for op in &ops {
            m.apply(op);
        }
        let original = m.s.events_json(0, None).unwrap();
        let n = m.s.len();
        drop(m);
        let bytes = std::fs::read(&path).unwrap();
        let cut = at.index(bytes.len() + 1);
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let header_end = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let opened = Session::open_jsonl(&path, opts());
        if cut == 0 {
            // Nothing was written yet: a new session.
            prop_assert!(opened.unwrap().0.is_empty());
            return Ok(());
        }
        if cut < header_end {
            let e = opened.unwrap_err();
            prop_assert_eq!(e.kind(), ErrorKind::CorruptLog);
            prop_assert!(e.message().contains("line 1"), "{}", e.message());
            return Ok(());
        }
        let (s, report) = opened.unwrap();
        let whole_lines = bytes[..cut].iter().filter(|b| **b == b'\n').count();
        let kept = whole_lines - 1;
        prop_assert_eq!(report.cut_records, usize::from(cut < bytes.len() && bytes[cut - 1] != b'\n'));
        prop_assert_eq!(s.len(), kept + report.repaired_events);
        prop_assert!(kept <= n);
        let prefix: Vec<Event> = serde_json::from_str::<Vec<serde_json::Value>>(&original).unwrap()[..kept]
            .iter()
            .map(|v| Event::from_value(v, "").unwrap())
            .collect();
        let loaded: Vec<Event> = (0..kept as u64).map(|q| s.event(q).unwrap()).collect();
        prop_assert_eq!(loaded, prefix);
        prop_assert!(s.with_log(|l| l.state().at_rest()));
        let after = observe(&s);
        drop(s);
        let (s, report) = Session::open_jsonl(&path, opts()).unwrap();
        prop_assert_eq!(report, LoadReport::default());
        prop_assert_eq!(observe(&s), after);
    }
}
