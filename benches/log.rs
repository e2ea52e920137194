//! Log load and append throughput (docs/performance.md).
//!
//! `load/<events>`: `Session::open_jsonl` (read, parse, validate, derive the history) of a
//! JSONL log, against reading the same file and parsing every line to a `serde_json::Value`.
//!
//! `append/<policy>`: one whole turn with a tool exchange (11 events, two requests on a short
//! history) on a JSONL session with each durability policy; throughput in events.
//!
//! Run by `cargo test` (criterion's test mode: each benchmark once, small sizes only).

#[path = "fixture/mod.rs"]
mod fixture;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use llmsession::log::TurnEndReason;
use llmsession::{Agent, Block, CancelToken, Durability, Message, Role, Session, SessionOptions};
use std::time::{Duration, Instant};

fn full_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

fn load(c: &mut Criterion) {
    let events = if full_run() { 100_000 } else { 1_000 };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("load.jsonl");
    fixture::write_jsonl(&path, events);
    let size = std::fs::metadata(&path).expect("log").len();
    let lines = std::fs::read_to_string(&path).expect("log").lines().count();
    eprintln!("load/{events}: {lines} records, {size} bytes");

    let mut group = c.benchmark_group(format!("load/{events}"));
    group.throughput(Throughput::Bytes(size));
    if events >= 10_000 {
        group.sample_size(20).measurement_time(Duration::from_secs(20));
    }
    group.bench_function("open_jsonl", |b| {
        b.iter(|| {
            let (s, report) = Session::open_jsonl(&path, SessionOptions::default()).expect("open");
            black_box((s.len(), report));
        })
    });
    group.bench_function("serde_value_lines", |b| {
        b.iter(|| {
            let text = std::fs::read_to_string(&path).expect("read");
            let values: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
            black_box(values.len());
        })
    });
    group.finish();
}

/// One whole turn with one tool exchange: turn/start, user/message, step/start,
/// assistant/message, tool/call, step/end, tool/result, step/start, assistant/message, step/end,
/// turn/end (11 events, two requests on a short history).
const TURN_EVENTS: u64 = 11;

fn turn(agent: &mut Agent, i: u64, cancel: &CancelToken) {
    agent.start_turn(Message::user_text(format!("Task {i}: read the file."))).expect("start_turn");
    agent.next_request(cancel).expect("next_request");
    agent.record_response(fixture::assistant(i), None).expect("record_response");
    agent.record_tool_result(fixture::result(i)).expect("record_tool_result");
    agent.next_request(cancel).expect("next_request");
    agent.record_response(Message::new(Role::Assistant, vec![Block::text("Read it.")]), None).expect("record_response");
    agent.end_turn(TurnEndReason::Completed).expect("end_turn");
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(TURN_EVENTS));
    let cancel = CancelToken::new();
    for (name, durability) in [("every-event", Durability::EveryEvent), ("turn-end", Durability::TurnEnd), ("never", Durability::Never)] {
        if full_run() && durability == Durability::EveryEvent {
            group.sample_size(20).measurement_time(Duration::from_secs(10));
        }
        // A fresh session file every 10 turns (untimed), so the history stays short and the
        // requests stay cheap: what is measured is the appending.
        let mut slot: Option<(Agent, u64)> = None;
        let mut files = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if slot.as_ref().is_none_or(|(_, n)| *n >= 10) {
                        if let Some((agent, _)) = slot.take() {
                            agent.dispose().expect("dispose");
                        }
                        files += 1;
                        let path = dir.path().join(format!("{name}-{files}.jsonl"));
                        let _ = std::fs::remove_file(&path);
                        let (session, _) =
                            Session::open_jsonl(&path, SessionOptions { durability, id: Some(name.into()), ..SessionOptions::default() })
                                .expect("open");
                        slot = Some((Agent::new(&session, fixture::options()).expect("agent"), 0));
                    }
                    let (agent, n) = slot.as_mut().expect("agent");
                    let t = Instant::now();
                    turn(agent, *n, &cancel);
                    total += t.elapsed();
                    *n += 1;
                }
                total
            })
        });
        if let Some((agent, _)) = slot.take() {
            agent.dispose().expect("dispose");
        }
    }
    group.finish();
}

criterion_group!(benches, load, append);

criterion_main!(benches);
