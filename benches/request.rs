//! Request build in steady state, and compaction bookkeeping (docs/performance.md).
//!
//! `request_build/<N>` at N history messages, side by side in one run:
//! - `step`: record a response and its tool result (two messages), then `next_request`;
//! - `next_request`: the same, timing only `next_request`;
//! - `envelope`: `request::conversation_envelope` on a fixed log (the bytes alone: no digest,
//!   no `step/start`);
//! - `memcpy`: copying the same number of bytes into a fresh buffer;
//! - `serde_rebuild`: re-serialising the whole history (`Vec<Message>`) with serde_json.
//!
//! The history grows by two messages per step; a fixture is rebuilt (untimed) once it has
//! grown by a tenth (at least 10 messages), so every sample measures a history of N..1.1N.
//!
//! `compaction/<N>`: one `next_request` against the bookkeeping a compaction gate does after
//! one more exchange (incremental meter, region selection, summarisation request build and its
//! digest), and a cold meter (every message counted).
//!
//! Run by `cargo test` (criterion's test mode: each benchmark once, small sizes only).

#[path = "fixture/mod.rs"]
mod fixture;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fixture::Fixture;
use llmsession::compaction::{select_region, CompactionPolicy, INSTRUCTION};
use llmsession::request::{compaction_envelope, conversation_envelope, digest, PrefixBytes};
use llmsession::tokens::meter::Meter;
use llmsession::tokens::{Estimator, TokenCounter};
use llmsession::types::ToolSchema;
use llmsession::{CallConfig, Message};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether criterion runs for real (`cargo bench`) rather than as a smoke test.
fn full_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

fn sizes() -> Vec<usize> {
    if full_run() {
        vec![100, 1_000, 10_000, 100_000]
    } else {
        vec![100]
    }
}

/// How many history messages a fixture of `n` may grow by before it is rebuilt.
fn growth_limit(n: usize) -> usize {
    (n / 10).max(10)
}

/// Runs `iters` steady-state iterations on fixtures of `n` messages, rebuilding them (untimed)
/// when they have grown too much; `timed` returns the time of what it measures.
fn steady(slot: &mut Option<Fixture>, n: usize, iters: u64, mut timed: impl FnMut(&mut Fixture) -> Duration) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        if slot.as_ref().is_none_or(|f| f.grown() + 2 > growth_limit(n)) {
            *slot = None; // drop the old one first
            *slot = Some(Fixture::in_memory(n));
        }
        total += timed(slot.as_mut().expect("built"));
    }
    total
}

#[derive(serde::Serialize)]
struct Naive<'a> {
    config: &'a CallConfig,
    system: &'a str,
    tools: &'a [ToolSchema],
    messages: &'a [Message],
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    turn: u64,
    step: u64,
    purpose: &'a str,
}

fn request_build(c: &mut Criterion) {
    for n in sizes() {
        let mut group = c.benchmark_group(format!("request_build/{n}"));
        if n >= 10_000 {
            group.sample_size(20).measurement_time(Duration::from_secs(if n >= 100_000 { 30 } else { 10 }));
        }
        let f = Fixture::in_memory(n);
        let bytes = f.last.json.len() as u64;
        let messages = f.base;
        eprintln!("request_build/{n}: {messages} history messages, request {bytes} bytes");
        group.throughput(Throughput::Bytes(bytes));

        let body = f.last.json.clone().into_bytes();
        group.bench_function("memcpy", |b| b.iter(|| black_box(black_box(&body[..]).to_vec())));
        drop(body);

        // The envelope alone, on the fixture's log as it stands (nothing is appended).
        let (header, id) = f.session.with_log(|l| l.state().headers.current().cloned()).map(|h| (h, f.session.id())).expect("header");
        let prefix = PrefixBytes::of(header.message_prefix.as_ref());
        group.bench_function("envelope", |b| {
            b.iter(|| f.session.with_log(|log| black_box(conversation_envelope(log, &header, &prefix, &id, 1, 99))))
        });

        // The naive design: the whole history re-serialised with serde_json at every step.
        let opts = fixture::options();
        let mut history: Vec<Message> = f.session.history().iter().map(|d| d.message()).collect();
        let base_len = history.len();
        let mut next = f.next;
        group.bench_function("serde_rebuild", |b| {
            b.iter(|| {
                if history.len() + 2 > base_len + growth_limit(n) {
                    history.truncate(base_len);
                }
                history.push(fixture::assistant(next));
                history.push(fixture::result_message(next));
                next += 1;
                let env = Naive {
                    config: &opts.config,
                    system: opts.system.as_deref().unwrap_or(""),
                    tools: &opts.tools,
                    messages: &history,
                    session_id: &id,
                    turn: 1,
                    step: next,
                    purpose: "conversation",
                };
                black_box(serde_json::to_vec(&env).expect("serialises"))
            })
        });
        drop(history);

        let mut slot = Some(f);
        group.bench_function("step", |b| {
            b.iter_custom(|iters| {
                steady(&mut slot, n, iters, |f| {
                    let t = Instant::now();
                    black_box(f.step());
                    t.elapsed()
                })
            })
        });
        group.bench_function("next_request", |b| {
            b.iter_custom(|iters| {
                steady(&mut slot, n, iters, |f| {
                    f.exchange();
                    let t = Instant::now();
                    black_box(f.request());
                    t.elapsed()
                })
            })
        });
        group.finish();
    }
}

fn compaction(c: &mut Criterion) {
    let n = if full_run() { 100_000 } else { 1_000 };
    let mut group = c.benchmark_group(format!("compaction/{n}"));
    if n >= 10_000 {
        group.sample_size(20).measurement_time(Duration::from_secs(20));
    }
    let counter: Arc<dyn TokenCounter> = Arc::new(Estimator);
    let policy = CompactionPolicy::new(128_000);

    let mut slot: Option<Fixture> = None;
    group.bench_function(BenchmarkId::new("next_request", n), |b| {
        b.iter_custom(|iters| {
            steady(&mut slot, n, iters, |f| {
                f.exchange();
                let t = Instant::now();
                black_box(f.request());
                t.elapsed()
            })
        })
    });

    // The gate's bookkeeping after one more exchange: the meter counts the two new messages,
    // the region is selected, the summarisation request is built and digested.
    let mut meter: Option<(Meter, llmsession::Session)> = None;
    group.bench_function(BenchmarkId::new("bookkeeping", n), |b| {
        b.iter_custom(|iters| {
            steady(&mut slot, n, iters, |f| {
                let session = f.session.clone();
                let header = session.with_log(|l| l.state().headers.current().cloned()).expect("header");
                // A new fixture gets a new meter, primed (untimed).
                let fresh = meter.as_ref().is_none_or(|(_, s)| !s.same_as(&session));
                if fresh {
                    let mut m = Meter::new();
                    m.measure(&counter, &session, &header, true).expect("measure");
                    meter = Some((m, session.clone()));
                }
                let (m, _) = meter.as_mut().expect("primed");
                f.exchange();
                let prefix = PrefixBytes::of(header.message_prefix.as_ref());
                let t = Instant::now();
                let measure = m.measure(&counter, &session, &header, true).expect("measure");
                let entries = session.with_log(|l| l.history().entries().to_vec());
                let region = select_region(&entries, m.per_entry(), policy.retained_tokens()).expect("a region");
                let body = compaction_envelope(
                    &header,
                    &prefix,
                    &entries[region.start..=region.end],
                    INSTRUCTION,
                    &header.config.provider,
                    &header.config.model,
                    policy.summary_max_tokens,
                    &session.id(),
                );
                black_box((measure, digest(&body), body));
                let took = t.elapsed();
                black_box(f.request());
                took
            })
        })
    });
    drop(slot);

    // A cold meter: every message of the history counted (an instance's first measurement).
    let f = Fixture::in_memory(n);
    let header = f.session.with_log(|l| l.state().headers.current().cloned()).expect("header");
    group.sample_size(10);
    group.bench_function(BenchmarkId::new("meter_cold", n), |b| {
        b.iter(|| black_box(Meter::new().measure(&counter, &f.session, &header, true).expect("measure")))
    });
    group.finish();
}

criterion_group!(benches, request_build, compaction);

criterion_main!(benches);
