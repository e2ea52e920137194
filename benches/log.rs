//! Log load and append throughput (docs/performance.md).
//!
//! `load/<events>`: `Session::open_jsonl` (read, parse, validate, derive the history) of a
//! JSONL log, against reading the same file and parsing every line to a `serde_json::Value`.
//!
//! `append/<policy>`: appending the events of one exchange (assistant message, tool call,
//! step end, tool result, step start: five events) to a JSONL session with each durability
//! policy; throughput in events.
//!
//! Run by `cargo test` (criterion's test mode: each benchmark once, small sizes only).

#[path = "fixture/mod.rs"]
mod fixture;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use fixture::Fixture;
use llmsession::{Durability, Session, SessionOptions};
use std::time::Duration;

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

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(5));
    for (name, durability) in [("every-event", Durability::EveryEvent), ("turn-end", Durability::TurnEnd), ("never", Durability::Never)] {
        if full_run() && durability == Durability::EveryEvent {
            group.sample_size(20).measurement_time(Duration::from_secs(10));
        }
        let path = dir.path().join(format!("{name}.jsonl"));
        let (session, _) = Session::open_jsonl(&path, SessionOptions { durability, id: Some(name.into()) }).expect("open");
        let mut f = Fixture::build(session, 1);
        group.bench_function(name, |b| {
            b.iter(|| {
                // record_response + tool result + step/start (next_request on a 3-message
                // history: the request build is small next to the appends).
                black_box(f.step());
            })
        });
        drop(f);
    }
    group.finish();
}

criterion_group!(benches, load, append);

criterion_main!(benches);
