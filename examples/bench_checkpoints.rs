//! Checkpoints and the bounded open (issue #38; docs/performance.md, "Resume from a
//! checkpoint"). Each command runs in a process of its own, so its resident memory is its own:
//!
//! ```text
//! cargo run --release --example bench_checkpoints -- write PATH EVENTS [COMPACT_EVERY [ID]]
//! cargo run --release --example bench_checkpoints -- open LOG bounded|full   (LOG: a path or a store URL)
//! cargo run --release --example bench_checkpoints -- verify LOG
//! cargo run --release --example bench_checkpoints -- copy PATH POSTGRES_URL
//! cargo run --release --example bench_checkpoints -- sessions DIR|POSTGRES_URL COUNT
//! ```
//!
//! - `write`: a log of about EVENTS events of the benchmark fixture (benches/fixture: a long turn
//!   of exchanges, each a request with its real digest, the assistant's tool call and its
//!   result), compacted every COMPACT_EVERY events (default 40,000: a summary replaces all but
//!   the last exchange), with the default checkpoint policy. The writer ends its turn and
//!   reopens its session every 100,000 events (from its last checkpoint), so its memory stays
//!   bounded too, and goes on in a new turn.
//! - `open`: opens the log (from its last checkpoint, or checking everything) and builds the
//!   next provider body (a new agent instance, the `openai` renderer, a new turn), after a
//!   warm-up on a small log of the same shape; prints `open_ms`, `body_ms`, the body's bytes
//!   and the resident growth (after `malloc_trim`) as `result ...`.
//! - `verify`: verifies the log as `llmsession verify` does (one record at a time) and prints
//!   its time and the peak resident growth (VmHWM) beside the largest request it rebuilt.
//! - `copy`: copies a JSONL log into PostgreSQL (the session of its header's id).
//! - `sessions`: makes COUNT small sessions in the store (unless it holds them already) and
//!   times listing them, whole and in pages of 100.

#[path = "../benches/fixture/mod.rs"]
mod fixture;

use llmsession::log::event::types;
use llmsession::log::load::OpenCheck;
use llmsession::log::TurnEndReason;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{conversation_digest, DigestCache, PrefixBytes};
use llmsession::store::url::{list_sessions, open_store, UrlOptions};
use llmsession::store::{Batch, Durability, JsonlStore, Store};
use llmsession::{Agent, Block, CancelToken, Message, NewEvent, Role, Session, SessionOptions};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

fn status_kib(field: &str) -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// CPU time of this process so far (user + system), in ms: steadier than the wall clock on a
/// shared machine.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 * 1e3 + v.tv_usec as f64 / 1e3;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Bytes the allocator has handed out and not had back (glibc's `mallinfo2`): in use in the
/// arenas plus mmapped blocks, in KiB.
fn heap_kib() -> i64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let m = unsafe { libc::mallinfo2() };
        ((m.uordblks + m.hblkhd) / 1024) as i64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory held by the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn opts(id: &str) -> SessionOptions {
    SessionOptions { durability: Durability::Never, id: Some(id.into()), ..SessionOptions::default() }
}

/// Writes the fixture log (see the module docs).
fn write(path: &Path, events: u64, compact_every: u64, id: &str) {
    let _ = std::fs::remove_file(path);
    let (mut session, _) = Session::open_jsonl(path, opts(id)).expect("open");
    let cancel = CancelToken::new();
    // Turn 1, by an agent: it records the request header.
    let instance = {
        let mut a = Agent::new(&session, fixture::options()).expect("agent");
        a.start_turn(Message::user_text("Find out how requests are built.")).expect("start_turn");
        a.next_request(&cancel).expect("request");
        a.record_response(Message::new(Role::Assistant, vec![Block::text("I will look at the sources.")]), None).expect("response");
        a.end_turn(TurnEndReason::Completed).expect("end_turn");
        let i = a.instance();
        a.dispose().expect("dispose");
        i
    };
    let ev = |s: &Session, ty: &str, data: serde_json::Value| {
        s.append(NewEvent::new(ty, data)).expect(ty);
    };
    let msg = |s: &Session, ty: &str, data: serde_json::Value| {
        s.append(NewEvent::visible(ty, data)).expect(ty);
    };
    let mut turn = 2u64;
    ev(&session, types::TURN_START, json!({"turn": turn}));
    msg(&session, types::USER_MESSAGE, json!({"message": Message::user_text("Now go through every file.").to_value(), "source": "user"}));
    let provenance = json!({"provider": "openai", "model": "deepseek-chat"});
    let mut cache = DigestCache::default();
    let step_start = |s: &Session, turn: u64, step: u64, cache: &mut DigestCache| {
        let (bytes, digest) = s.with_log(|l| {
            let h = l.state().headers.current().expect("a header").clone();
            conversation_digest(l, &h, &PrefixBytes::of(h.message_prefix.as_ref()), id, turn, step, cache)
        });
        ev(s, types::STEP_START, json!({"turn": turn, "step": step, "instance": instance, "digest": digest, "bytes": bytes}));
    };
    let mut step = 0u64;
    let mut since_compaction = 0u64;
    let mut since_reopen = 0u64;
    let started = Instant::now();
    let mut i = 0u64;
    while (session.len() as u64) < events {
        step += 1;
        step_start(&session, turn, step, &mut cache);
        let mut m = fixture::assistant(i).to_value();
        m["provenance"] = provenance.clone();
        msg(&session, types::ASSISTANT_MESSAGE, json!({"turn": turn, "step": step, "message": m}));
        let a = fixture::assistant(i);
        let (id, name, args) = a.tool_calls().next().expect("a call");
        ev(&session, types::TOOL_CALL, json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": args}));
        ev(&session, types::STEP_END, json!({"turn": turn, "step": step, "outcome": "response"}));
        let r = fixture::result(i);
        let content: Vec<serde_json::Value> = r.content.iter().map(|b| b.clone().into_value()).collect();
        msg(&session, types::TOOL_RESULT, json!({"callId": r.call_id, "content": content, "isError": false}));
        i += 1;
        since_compaction += 5;
        since_reopen += 5;
        if since_compaction >= compact_every {
            since_compaction = 0;
            // Everything but the last exchange becomes one summary.
            let seqs = session.with_log(|l| l.history().seqs());
            let end = seqs.len() - 3;
            let span = seqs[..=end].to_vec();
            ev(&session, types::COMPACTION_START, json!({"trigger": "manual", "span": {"start": 0, "end": end}, "seqs": span}));
            ev(&session, types::COMPACTION_SUMMARY, json!({"summary": format!("Summary of the first {i} exchanges.")}));
            session
                .append(NewEvent::replacing(
                    types::USER_MESSAGE,
                    json!({"message": Message::user_text(format!("The story so far: {i} files were read.")).to_value(), "source": "compaction"}),
                    0,
                    end,
                    span,
                ))
                .expect("the checkpoint message");
            ev(&session, types::COMPACTION_END, json!({"outcome": "landed"}));
        }
        if since_reopen >= 100_000 {
            since_reopen = 0;
            ev(&session, types::TURN_END, json!({"turn": turn, "reason": "completed"}));
            drop(session);
            session = Session::open_jsonl(path, opts(id)).expect("reopen").0;
            cache = DigestCache::default();
            turn += 1;
            step = 0;
            ev(&session, types::TURN_START, json!({"turn": turn}));
            msg(&session, types::USER_MESSAGE, json!({"message": Message::user_text("Go on.").to_value(), "source": "user"}));
            eprintln!("write: {} events in {:.1} s", session.len(), started.elapsed().as_secs_f64());
        }
    }
    step += 1;
    step_start(&session, turn, step, &mut cache);
    let mut done = Message::new(Role::Assistant, vec![Block::text("Every file is read.")]).to_value();
    done["provenance"] = provenance;
    msg(&session, types::ASSISTANT_MESSAGE, json!({"turn": turn, "step": step, "message": done}));
    ev(&session, types::STEP_END, json!({"turn": turn, "step": step, "outcome": "response"}));
    ev(&session, types::TURN_END, json!({"turn": turn, "reason": "completed"}));
    session.sync().expect("sync");
    let size = std::fs::metadata(path).expect("log").len();
    println!("wrote {} events, {size} bytes, in {:.1} s", session.len(), started.elapsed().as_secs_f64());
}

fn open_session(log: &str, check: OpenCheck) -> Session {
    let url = if log.contains("://") || log.starts_with("file:") { log.to_string() } else { format!("file:{log}") };
    let o = UrlOptions { check, create: false, ..UrlOptions::default() };
    Session::open_url(&url, o).expect("open").0
}

/// Builds the next body: a new agent instance opens a turn and asks for its first request.
/// The agent is returned, to end the turn once the measurement is taken (so the log is left at
/// rest for the next run). The body is held as a host holds it (it shares its buffer with the
/// agent's renderer cache).
fn next_body(session: &Session) -> (llmsession::log::Text, Agent) {
    let mut a = Agent::new(session, fixture::options()).expect("agent");
    a.set_renderer(Renderer::OpenAi, RenderOptions::default()).expect("renderer");
    a.start_turn(Message::user_text("Summarise how a request is built.")).expect("start_turn");
    let body = a.next_body(&CancelToken::new()).expect("next_body");
    (body.json, a)
}

fn finish(mut a: Agent) {
    a.record_response(Message::new(Role::Assistant, vec![Block::text("Done.")]), None).expect("response");
    a.end_turn(TurnEndReason::Completed).expect("end_turn");
    a.dispose().expect("dispose");
}

/// Opens the log and builds the next body (see the module docs).
fn open(log: &str, check: OpenCheck) {
    // Warm-up: the library's one-off costs (code paged in, tables, the allocator's arenas) on
    // a small log of the same shape, dropped before the first reading.
    let dir = tempfile::tempdir().expect("tempdir");
    let warm = dir.path().join("warm.jsonl");
    if std::env::var("BENCH_NO_WARM").is_err() {
        write(&warm, 2000, 1000, "bench");
        let s = open_session(warm.to_str().expect("UTF-8"), check);
        finish(next_body(&s).1);
        // A database: its connection pool is made (a worker keeps one), the session read once.
        if log.contains("://") {
            let o = UrlOptions { check, read_only: true, ..UrlOptions::default() };
            drop(Session::open_url(log, o).expect("a warm-up read"));
        }
    }
    trim();
    let before = status_kib("VmRSS:");
    let heap_before = heap_kib();
    let (anon_before, file_before) = (status_kib("RssAnon:"), status_kib("RssFile:"));
    let cpu = cpu_ms();
    let t = Instant::now();
    let session = open_session(log, check);
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let open_cpu = cpu_ms() - cpu;
    if std::env::var("BENCH_STAGES").is_ok() {
        trim();
        eprintln!(
            "stage: after the open, growth {} KiB, heap {} KiB, anon {} file {}",
            status_kib("VmRSS:") - before,
            heap_kib() - heap_before,
            status_kib("RssAnon:") - anon_before,
            status_kib("RssFile:") - file_before
        );
    }
    let t = Instant::now();
    let cpu = cpu_ms();
    let (body, agent) = next_body(&session);
    let body_ms = t.elapsed().as_secs_f64() * 1e3;
    let body_cpu = cpu_ms() - cpu;
    let total_ms = open_ms + body_ms;
    trim();
    let after = status_kib("VmRSS:");
    let (events, history, held) = session.with_log(|l| (l.len(), l.history().bytes(), l.lines().len()));
    if std::env::var("BENCH_STAGES").is_ok() {
        eprintln!("stage: after the body, growth {} KiB, heap {} KiB", after - before, heap_kib() - heap_before);
        let copy = body.to_string();
        drop(copy);
        trim();
        eprintln!("stage: after a copy of the body dropped, growth {} KiB", status_kib("VmRSS:") - before);
    }
    println!(
        "result open={:?} events={events} held_lines={held} history_bytes={history} body_bytes={} open_ms={open_ms:.1} body_ms={body_ms:.1} total_ms={total_ms:.1} open_cpu_ms={open_cpu:.1} body_cpu_ms={body_cpu:.1} growth_kib={} growth_per_body={:.2} growth_per_history={:.2}",
        check,
        body.len(),
        after - before,
        (after - before) as f64 * 1024.0 / body.len() as f64,
        (after - before) as f64 * 1024.0 / history as f64
    );
    finish(agent);
}

/// Where a bounded open's time goes: the store's window read, then the restore and the tail.
fn profile(log: &str) {
    let mut store = JsonlStore::open_read_only(log).expect("log");
    let (c0, t0) = (cpu_ms(), Instant::now());
    let mut win = store.load_window(None).expect("window").expect("a checkpoint");
    let (c1, t1) = (cpu_ms(), Instant::now());
    let n = win.len();
    let bytes: usize = (0..n).map(|i| win.record(i).len() + 1).sum();
    let loaded = llmsession::log::load::load_window(&mut win).expect("load");
    let (c2, t2) = (cpu_ms(), Instant::now());
    drop(win);
    println!(
        "profile window_records={n} window_bytes={bytes} store_ms={:.1} (cpu {:.1}) restore_ms={:.1} (cpu {:.1}) history={}",
        (t1 - t0).as_secs_f64() * 1e3,
        c1 - c0,
        (t2 - t1).as_secs_f64() * 1e3,
        c2 - c1,
        loaded.log.history().len()
    );
}

/// Verifies the log (see the module docs).
fn verify(log: &str) {
    let url = if log.contains("://") || log.starts_with("file:") { log.to_string() } else { format!("file:{log}") };
    let (mut store, _) = open_store(&url, &UrlOptions { read_only: true, ..UrlOptions::default() }).expect("open");
    trim();
    let before = status_kib("VmRSS:");
    // The largest request: the `bytes` of the largest step/start.
    let mut largest = 0u64;
    let mut visit = |ev: &llmsession::Event| {
        if ev.ty == types::STEP_START {
            largest = largest.max(ev.data["bytes"].as_u64().unwrap_or(0));
        }
    };
    let t = Instant::now();
    let r = llmsession::request::verify_store(store.as_mut(), None, &mut |_| {}, Some(&mut visit)).expect("verify");
    let secs = t.elapsed().as_secs_f64();
    let peak = status_kib("VmHWM:");
    println!(
        "result verify events={} requests={} secs={secs:.2} peak_growth_kib={} largest_request={largest} beyond_largest_mib={:.1}",
        r.events,
        r.requests,
        peak - before,
        ((peak - before) as f64 * 1024.0 - largest as f64) / (1 << 20) as f64
    );
}

/// Copies a JSONL log into PostgreSQL.
fn copy(path: &str, url: &str) {
    let mut src = JsonlStore::open_read_only(path).expect("log");
    let mut stream = src.record_stream().expect("records");
    let (header, _) = stream.next_record().expect("read").expect("a header");
    let header = String::from_utf8(header).expect("UTF-8");
    let id = serde_json::from_str::<serde_json::Value>(&header).expect("header")["id"].as_str().expect("id").to_string();
    let (mut dst, _) =
        open_store(url, &UrlOptions { id: Some(id.clone()), durability: Durability::Never, ..UrlOptions::default() }).expect("PostgreSQL");
    let t = Instant::now();
    let (mut seq, mut chunk): (u64, Vec<llmsession::log::Text>) = (0, Vec::new());
    let mut first = true;
    loop {
        let next = stream.next_record().expect("read");
        if let Some((r, _)) = &next {
            chunk.push(String::from_utf8(r.clone()).expect("UTF-8").into());
        }
        if chunk.len() == 4000 || (next.is_none() && !chunk.is_empty()) {
            let h = if first { Some(header.as_str()) } else { None };
            dst.append(&Batch { session_id: &id, header: h, seq, events: &chunk }).expect("copy into PostgreSQL");
            first = false;
            seq += chunk.len() as u64;
            chunk.clear();
        }
        if next.is_none() {
            break;
        }
    }
    dst.sync().expect("sync");
    println!("copied {seq} events into PostgreSQL in {:.1} s", t.elapsed().as_secs_f64());
}

/// Makes COUNT sessions in the store and times listing them.
fn sessions(store: &str, count: usize) {
    let url = if store.contains("://") || store.starts_with("file:") { store.to_string() } else { format!("file:{store}") };
    let dir = url.strip_prefix("file:").map(std::path::PathBuf::from);
    let have = list_sessions(&url, None, None, None).map(|l| l.len()).unwrap_or(0);
    if have < count {
        let t = Instant::now();
        for i in have..count {
            let id = format!("listed-{i:05}");
            let s = match &dir {
                Some(d) => Session::open_jsonl(d.join(format!("{id}.jsonl")), opts(&id)).expect("create").0,
                None => {
                    Session::open_url(&url, UrlOptions { id: Some(id.clone()), durability: Durability::Never, ..UrlOptions::default() })
                        .expect("create")
                        .0
                }
            };
            s.append(NewEvent::new("host/note", json!({"n": i}))).expect("append");
            s.append(NewEvent::new("host/note", json!({"n": i + 1}))).expect("append");
        }
        eprintln!("made {} sessions in {:.1} s", count - have, t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    let all = list_sessions(&url, None, None, None).expect("list");
    let whole_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let (mut after, mut pages, mut seen) = (None::<String>, 0, 0);
    loop {
        let page = list_sessions(&url, after.as_deref(), Some(100), None).expect("page");
        if page.is_empty() {
            break;
        }
        seen += page.len();
        pages += 1;
        after = page.last().map(|r| r.id.clone());
    }
    let paged_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("result sessions listed={} whole_ms={whole_ms:.1} pages={pages} paged_ms={paged_ms:.1} seen={seen}", all.len());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).map(String::as_str).unwrap_or_else(|| panic!("argument {i} missing: see the module docs"));
    match a(0) {
        "write" => write(
            Path::new(a(1)),
            a(2).parse().expect("EVENTS"),
            args.get(3).map_or(40_000, |c| c.parse().expect("COMPACT_EVERY")),
            args.get(4).map_or("bench", String::as_str),
        ),
        "open" => open(a(1), if a(2) == "full" { OpenCheck::Full } else { OpenCheck::Bounded }),
        "verify" => verify(a(1)),
        "profile" => profile(a(1)),
        "copy" => copy(a(1), a(2)),
        "sessions" => sessions(a(1), a(2).parse().expect("COUNT")),
        other => panic!("unknown command {other}: see the module docs"),
    }
}
