//! A long session loads and derives in linear work (issue #2).
//!
//! No clock is read. The countable proxy for work is the allocator: every event appended,
//! parsed, validated, projected or serialised allocates, so work that grows faster than the
//! log (re-deriving the history per event, copying the log per append, re-scanning it per
//! record) shows up as allocations growing faster than the event count. The test runs the same
//! workload at 10k and 100k events (see the test's doc for the phases a debug build runs
//! smaller) and requires the counts to grow by less than 1.5 times the
//! factor of 10 (quadratic behaviour would give about 100).
//!
//! This file is its own test binary with a single test, because the counting allocator is
//! global: tests running in parallel in the same process would add to the counts.

mod common;

use common::*;
use llmsession::log::load::SessionHeader;
use llmsession::log::Event;
use llmsession::store::MemoryStore;
use llmsession::{Durability, Session, SessionOptions};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;
use std::path::Path;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocation counts of one phase.
#[derive(Debug, Clone, Copy)]
struct Work {
    allocations: usize,
    bytes: usize,
}

fn measure(f: impl FnOnce()) -> Work {
    let region = Region::new(GLOBAL);
    f();
    let c = region.change();
    Work { allocations: c.allocations + c.reallocations, bytes: c.bytes_allocated + c.bytes_reallocated.max(0) as usize }
}

/// Work of each phase for a session of about `events` events (`None`: phase not run).
#[derive(Debug)]
struct Phases {
    events: usize,
    append: Option<Work>,
    load: Work,
    derive: Work,
    fork: Option<Work>,
    compact: Work,
}

fn opts() -> SessionOptions {
    // No checkpoints: the phases measure loading and deriving the whole log.
    SessionOptions {
        durability: Durability::Never,
        id: Some("long".into()),
        checkpoints: llmsession::log::checkpoint::CheckpointPolicy::OFF,
        ..SessionOptions::default()
    }
}

/// Writes a session file of the initial header and `turns` complete turns directly, without
/// validation (the load that follows validates every line).
fn write_file(path: &Path, turns: usize) {
    let head = SessionHeader::new("long".into(), 1).to_value().to_string();
    let mut link = llmsession::log::chain::start(head.as_bytes());
    let mut out = head;
    out.push('\n');
    let mut seq = 0;
    let evs = std::iter::once(header("initial", 1, "sys")).chain((1..=turns as u64).flat_map(complete_turn));
    for ev in evs {
        let ev = Event { ty: ev.ty, seq, time: 1, data: ev.data, surface_op: ev.surface_op, sources: ev.sources };
        let (record, next) = llmsession::log::chain::seal(&link, &ev.to_json());
        link = next;
        out.push_str(&record);
        out.push('\n');
        seq += 1;
    }
    std::fs::write(path, out).unwrap();
}

/// Runs the phases on a session of about `events` events. `all`: also appends the session
/// event by event and forks it (slow in a debug build).
fn run(events: usize, all: bool) -> Phases {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    let turns = (events - 1) / 11;

    let mut append = None;
    if all {
        let (s, _) = Session::open_jsonl(&path, opts()).unwrap();
        append = Some(measure(|| {
            append_all(&s, vec![header("initial", 1, "sys")]);
            for t in 1..=turns as u64 {
                append_all(&s, complete_turn(t));
            }
        }));
    } else {
        write_file(&path, turns);
    }

    let mut loaded = None;
    let load = measure(|| loaded = Some(Session::open_jsonl(&path, opts()).unwrap()));
    let (s, report) = loaded.unwrap();
    assert_eq!(report, Default::default());
    let n = s.len();
    assert_eq!(n, 1 + 11 * turns);

    let mut history = String::new();
    let derive = measure(|| history = s.history_json());
    assert!(history.len() > n * 10);

    let fork = all.then(|| {
        measure(|| {
            let f = s.fork(None, Box::new(MemoryStore::new()), opts()).unwrap();
            assert_eq!(f.len(), n);
        })
    });

    // A compaction over nearly the whole surface: one replace citing every shadowed event.
    let seqs = s.with_log(|l| l.history().seqs());
    let end = seqs.len() - 2;
    let compact = measure(|| {
        append_all(
            &s,
            vec![
                compaction_start_seqs(0, end, seqs[..=end].to_vec()),
                compaction_summary("everything"),
                checkpoint("everything so far", 0, end, seqs[..=end].to_vec()),
                compaction_end("landed"),
            ],
        );
    });
    assert_eq!(s.with_log(|l| l.history().len()), 2);
    Phases { events: n, append, load, derive, fork, compact }
}

fn assert_linear(small: &Phases, large: &Phases) {
    eprintln!("{small:#?}\n{large:#?}");
    let factor = large.events as f64 / small.events as f64;
    assert!((9.9..10.1).contains(&factor), "{factor}");
    let phases = [
        ("append", small.append, large.append),
        ("load", Some(small.load), Some(large.load)),
        ("derive", Some(small.derive), Some(large.derive)),
        ("fork", small.fork, large.fork),
        ("compact", Some(small.compact), Some(large.compact)),
    ];
    for (name, a, b) in phases {
        let (Some(a), Some(b)) = (a, b) else { continue };
        let count_ratio = b.allocations as f64 / a.allocations.max(1) as f64;
        // Bytes include amortised vector growth, whose power-of-two rounding can add up to a
        // factor of 2 between the two sizes; still far below quadratic growth.
        let byte_ratio = b.bytes as f64 / a.bytes.max(1) as f64;
        assert!(count_ratio < 1.5 * factor, "{name}: allocations grew {count_ratio:.1}x for {factor:.1}x events ({a:?} -> {b:?})");
        assert!(byte_ratio < 2.5 * factor, "{name}: bytes grew {byte_ratio:.1}x for {factor:.1}x events ({a:?} -> {b:?})");
    }
}

/// Loading, deriving and compacting 100k events against 10k events, in every build. Appending
/// event by event and forking are checked at 100k against 10k in a release build
/// (`cargo test --release --test log_scale`) and at 20k against 2k in a debug build, where
/// 100k validated appends plus a 100k-event fork would take too long for the suite.
#[test]
fn a_long_session_loads_and_derives_in_linear_work() {
    let full = !cfg!(debug_assertions);
    assert_linear(&run(10_000, full), &run(100_000, full));
    if !full {
        assert_linear(&run(2_000, true), &run(20_000, true));
    }
}
