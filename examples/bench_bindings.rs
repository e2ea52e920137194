//! Binding overhead (docs/performance.md): the Rust side of `benches/bindings.sh`.
//!
//! ```text
//! cargo run --release --example bench_bindings -- write DIR [MESSAGES]
//! cargo run --release --example bench_bindings -- run DIR ITERATIONS OUT [request|body]
//! cargo run --release --example bench_bindings -- write-log DIR EVENTS [checkpoints]
//! cargo run --release --example bench_bindings -- resume DIR ITERATIONS
//! ```
//!
//! `resume` is the Rust host's resume of `write-log`'s fixture, what the binding harnesses time
//! (open a fresh copy of `DIR/session.jsonl` for writing, a new agent with the `openai`
//! renderer, a new turn and its first body), for profiling the library without a binding:
//! it prints the median and the range of ITERATIONS timed runs after one warm-up.
//!
//! `write-log` writes the resume fixture of `benches/bindings.sh` (docs/performance.md, "Resume
//! and memory against a naive host"): `DIR/session.jsonl`, a finished log of about EVENTS events
//! (`benches/fixture`'s `write_jsonl_with`: without checkpoints, so an open reads and checks it
//! whole, the log `bench_memory` loads; with `checkpoints`, with the default policy, a checkpoint
//! every 1,000 events, so an open restores the state from the last one), and `DIR/inputs.jsonl`
//! with the agent options, the fork options and the user message that opens the next turn (the
//! first three lines of `write`'s).
//!
//! `write` writes the shared fixture every harness (Rust, C, Go, Node, C++) reads:
//! - `DIR/session.jsonl`: a finished session whose history holds about MESSAGES (default 1,000)
//!   agent exchanges' messages (`benches/fixture`);
//! - `DIR/inputs.jsonl`: one JSON document per line: the agent options, the fork options, the
//!   user message that opens the measured turn, then a round of exchanges (MESSAGES / 20, at
//!   least one: a round grows the history by a tenth, so every point is measured on MESSAGES to
//!   1.1·MESSAGES messages) as pairs of lines (the
//!   response `{"message"}`, the tool result `{"callId","content"}`), the next exchanges of the
//!   fixture.
//!
//! `run` is the Rust harness; every harness does the same thing. It opens `session.jsonl`,
//! and for each round forks it into memory (fork options from the inputs: a fixed id, so every
//! harness builds byte-identical requests), creates an agent, opens a turn and builds its first
//! request (untimed), then for each of the round's exchanges records the response and the tool
//! result and builds the next request, timing both the whole step and the request alone. A
//! round grows the history by a tenth at most, as in `benches/request.rs`. One untimed round
//! warms up first. Each timed iteration appends `next_ns step_ns` to OUT; the last line of
//! stdout is `bytes=<request bytes> digest=<envelope digest>` of the last request of the first
//! timed round.
//!
//! The mode says which path a step takes:
//! - `request` (the default): the envelope path. [`Agent::record_response`] of the parsed
//!   message, [`Agent::record_tool_result`], [`Agent::next_request`] (the envelope).
//! - `body`: the hot path. The agent gets the `openai` renderer (default options); per exchange
//!   [`Agent::record_body`] of the provider's raw reply (`DIR/replies.jsonl`, one OpenAI chat
//!   completions body per exchange, written by `benches/bindings.sh`),
//!   [`Agent::record_tool_result`] and [`Agent::next_body`]; `next` times `next_body` alone.
//!   The last body of the first timed round is also written to `OUT.body`, so the driver can
//!   compare the bodies of every harness byte for byte, and `bytes` is a body's length.

#[path = "../benches/fixture/mod.rs"]
mod fixture;

use llmsession::agent::ToolResultInput;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::store::MemoryStore;
use llmsession::{Agent, CancelToken, Durability, Message, Session, SessionOptions};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Exchanges per round for a fixture of `messages` history messages: two history messages
/// each, so a round grows the history by a tenth (50 at 1,000 messages, 5 at 100).
fn round_len(messages: usize) -> usize {
    (messages / 20).max(1)
}

/// The fork's id: fixed, so the requests of every harness are the same bytes.
const FORK_ID: &str = "bench-bindings";

fn write(dir: &Path, messages: usize) {
    std::fs::create_dir_all(dir).expect("create the fixture directory");
    let path = dir.join("session.jsonl");
    let _ = std::fs::remove_file(&path);
    let (session, _) =
        Session::open_jsonl(&path, SessionOptions { durability: Durability::Never, id: Some("bench".into()), ..SessionOptions::default() })
            .expect("open_jsonl");
    let f = fixture::Fixture::build(session, messages);
    let next = f.next;
    let session = f.finish();
    session.sync().expect("sync");
    let history = session.history().len();

    let mut lines = head_lines();
    let round = round_len(messages);
    for i in next..next + round as u64 {
        lines.push(json!({ "message": fixture::assistant(i).to_value() }));
        let r = fixture::result(i);
        let content: Vec<Value> = r.content.into_iter().map(|b| b.into_value()).collect();
        lines.push(json!({ "callId": r.call_id, "content": content }));
    }
    let mut out = std::fs::File::create(dir.join("inputs.jsonl")).expect("inputs.jsonl");
    for l in &lines {
        writeln!(out, "{l}").expect("write inputs.jsonl");
    }
    println!("fixture: {} ({history} history messages), {} exchanges per round", path.display(), round);
}

/// The first three lines of `inputs.jsonl`: the agent options, the fork options, the user
/// message that opens the measured turn.
fn head_lines() -> Vec<Value> {
    let opts = fixture::options();
    vec![
        json!({
            "config": opts.config.to_value(),
            "system": opts.system,
            "tools": opts.tools,
            "checkRequests": opts.check_requests,
        }),
        json!({ "id": FORK_ID }),
        Message::user_text(user_text()).to_value(),
    ]
}

/// The resume fixture (see the module documentation).
fn write_log(dir: &Path, events: usize, checkpoints: bool) {
    std::fs::create_dir_all(dir).expect("create the fixture directory");
    let path = dir.join("session.jsonl");
    let policy = if checkpoints {
        llmsession::log::checkpoint::CheckpointPolicy::default()
    } else {
        llmsession::log::checkpoint::CheckpointPolicy::OFF
    };
    fixture::write_jsonl_with(&path, events, policy);
    let mut out = std::fs::File::create(dir.join("inputs.jsonl")).expect("inputs.jsonl");
    for l in head_lines() {
        writeln!(out, "{l}").expect("write inputs.jsonl");
    }
    println!("resume fixture: {} ({} bytes)", path.display(), std::fs::metadata(&path).expect("log").len());
}

fn user_text() -> &'static str {
    "Summarise how a request is built."
}

/// The inputs, parsed back into the Rust API's types (outside every timed region).
struct Inputs {
    fork_id: String,
    user: Message,
    exchanges: Vec<(Message, ToolResultInput)>,
}

fn read_inputs(dir: &Path) -> Inputs {
    let text = std::fs::read_to_string(dir.join("inputs.jsonl")).expect("inputs.jsonl (run `write` first)");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let fork_id = lines[1]["id"].as_str().expect("fork id").to_string();
    let user = Message::from_value(&lines[2], "user").expect("user message");
    let exchanges = lines[3..]
        .chunks(2)
        .map(|p| {
            let m = Message::from_value(&p[0]["message"], "message").expect("response");
            let content = p[1]["content"]
                .as_array()
                .expect("content")
                .iter()
                .map(|b| llmsession::Block::from_value(b, "content").expect("block"))
                .collect();
            let r = ToolResultInput { call_id: p[1]["callId"].as_str().expect("callId").to_string(), content, is_error: false };
            (m, r)
        })
        .collect();
    Inputs { fork_id, user, exchanges }
}

/// The provider's raw replies, one per exchange (`DIR/replies.jsonl`, for `body` mode).
fn read_replies(dir: &Path, exchanges: usize) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("replies.jsonl")).expect("replies.jsonl (benches/bindings.sh writes it)");
    let replies: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    assert_eq!(replies.len(), exchanges, "replies.jsonl has {} replies for {exchanges} exchanges", replies.len());
    replies
}

/// Which path a step takes (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Request,
    Body,
}

fn run(dir: &Path, iterations: usize, out: &Path, mode: Mode) {
    let inputs = read_inputs(dir);
    let replies = if mode == Mode::Body { read_replies(dir, inputs.exchanges.len()) } else { Vec::new() };
    let (parent, _) = Session::open_jsonl(
        dir.join("session.jsonl"),
        SessionOptions { durability: Durability::Never, id: None, ..SessionOptions::default() },
    )
    .expect("open fixture");
    let cancel = CancelToken::new();
    let mut samples: Vec<(u128, u128)> = Vec::with_capacity(iterations);
    let mut bytes = 0;
    let mut digest = String::new();
    let mut last_body = String::new();
    let mut round = 0;
    // Round 0 warms up and is not recorded.
    while samples.len() < iterations {
        let child = parent
            .fork(
                None,
                Box::new(MemoryStore::new()),
                SessionOptions { durability: Durability::Never, id: Some(inputs.fork_id.clone()), ..SessionOptions::default() },
            )
            .expect("fork");
        let mut agent = Agent::new(&child, fixture::options()).expect("agent");
        if mode == Mode::Body {
            agent.set_renderer(Renderer::OpenAi, RenderOptions::default()).expect("set_renderer");
        }
        agent.start_turn(inputs.user.clone()).expect("start_turn");
        match mode {
            Mode::Request => drop(agent.next_request(&cancel).expect("first request")),
            Mode::Body => drop(agent.next_body(&cancel).expect("first body")),
        }
        for (k, (m, r)) in inputs.exchanges.iter().enumerate() {
            if round > 0 && samples.len() == iterations {
                break;
            }
            let (t0, t1, t2);
            let mut excluded = std::time::Duration::ZERO;
            match mode {
                Mode::Request => {
                    let (m, r) = (m.clone(), r.clone());
                    t0 = Instant::now();
                    agent.record_response(m, None).expect("record_response");
                    agent.record_tool_result(r).expect("record_tool_result");
                    t1 = Instant::now();
                    let req = std::hint::black_box(agent.next_request(&cancel).expect("next_request"));
                    t2 = Instant::now();
                    if round == 1 {
                        bytes = req.json.len();
                        digest = req.digest.clone();
                    }
                }
                Mode::Body => {
                    let r = r.clone();
                    t0 = Instant::now();
                    agent.record_body(&replies[k]).expect("record_body");
                    agent.record_tool_result(r).expect("record_tool_result");
                    t1 = Instant::now();
                    let body = std::hint::black_box(agent.next_body(&cancel).expect("next_body"));
                    // The copy for OUT.body is not part of the step: its time is taken out.
                    // Freeing the body is (as a host frees it once sent, and as the other
                    // harnesses time their release).
                    let c0 = Instant::now();
                    if round == 1 {
                        bytes = body.json.len();
                        digest.clone_from(&body.info.digest);
                        last_body = body.json.to_string();
                    }
                    excluded = c0.elapsed();
                    drop(body);
                    t2 = Instant::now();
                }
            }
            if round > 0 {
                samples.push(((t2 - t1 - excluded).as_nanos(), (t2 - t0 - excluded).as_nanos()));
            }
        }
        agent.dispose().expect("dispose");
        round += 1;
    }
    let mut f = std::fs::File::create(out).expect("OUT");
    for (n, s) in &samples {
        writeln!(f, "{n} {s}").expect("write OUT");
    }
    if mode == Mode::Body {
        let mut path = out.as_os_str().to_owned();
        path.push(".body");
        std::fs::write(path, &last_body).expect("write OUT.body");
    }
    println!("bytes={bytes} digest={digest}");
}

fn resume(dir: &Path, iterations: usize) {
    let user = read_inputs(dir).user;
    let tmp = std::env::temp_dir().join(format!("lls-resume-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temporary directory");
    let cancel = CancelToken::new();
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..=iterations {
        let copy = tmp.join(format!("resume-{i}.jsonl"));
        std::fs::copy(dir.join("session.jsonl"), &copy).expect("copy the log");
        let t0 = Instant::now();
        let (session, _) =
            Session::open_jsonl(&copy, SessionOptions { durability: Durability::Never, ..SessionOptions::default() }).expect("open");
        let t1 = Instant::now();
        let mut agent = Agent::new(&session, fixture::options()).expect("agent");
        agent.set_renderer(Renderer::OpenAi, RenderOptions::default()).expect("set_renderer");
        agent.start_turn(user.clone()).expect("start_turn");
        let body = std::hint::black_box(agent.next_body(&cancel).expect("next_body"));
        drop(body);
        agent.dispose().expect("dispose");
        drop(session);
        let t2 = Instant::now();
        std::fs::remove_file(&copy).ok();
        if i > 0 {
            samples.push(((t1 - t0).as_secs_f64() * 1e3, (t2 - t0).as_secs_f64() * 1e3));
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
    let median = |f: fn(&(f64, f64)) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (o, omin, omax) = median(|s| s.0);
    let (w, wmin, wmax) = median(|s| s.1);
    println!("open {o:.2} ms ({omin:.2} to {omax:.2}); open and body {w:.2} ms ({wmin:.2} to {wmax:.2})");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("write") => write(Path::new(&args[2]), args.get(3).map_or(1_000, |n| n.parse().expect("MESSAGES"))),
        Some("write-log") if args.len() >= 4 => {
            let checkpoints = match args.get(4).map(String::as_str) {
                None => false,
                Some("checkpoints") => true,
                Some(other) => {
                    eprintln!("bench_bindings: write-log takes `checkpoints` or nothing after EVENTS, not {other:?}");
                    std::process::exit(2);
                }
            };
            write_log(Path::new(&args[2]), args[3].parse().expect("EVENTS"), checkpoints)
        }
        Some("resume") if args.len() >= 4 => resume(Path::new(&args[2]), args[3].parse().expect("ITERATIONS")),
        Some("run") if args.len() >= 5 => {
            let mode = match args.get(5).map(String::as_str) {
                None | Some("request") => Mode::Request,
                Some("body") => Mode::Body,
                Some(other) => {
                    eprintln!("bench_bindings: MODE is request or body, not {other:?}");
                    std::process::exit(2);
                }
            };
            run(Path::new(&args[2]), args[3].parse().expect("ITERATIONS"), Path::new(&args[4]), mode)
        }
        _ => {
            eprintln!(
                "usage: bench_bindings write DIR [MESSAGES] | run DIR ITERATIONS OUT [request|body] | write-log DIR EVENTS [checkpoints]"
            );
            std::process::exit(2);
        }
    }
}
