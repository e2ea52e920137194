//! The PostgreSQL store against the JSONL file, side by side in one run, and the store at fleet
//! scale (docs/performance.md, "PostgreSQL store" and "PostgreSQL at fleet scale").
//!
//! ```text
//! LLMSESSION_PG_URL=postgres://... cargo run --release --example bench_postgres [PASSES] [EVENTS] [TURNS]
//! LLMSESSION_PG_URL=... [LLMSESSION_PGBOUNCER_URL=...] bench_postgres fleet [--sessions 10000] [--threads 32]
//!     [--turns 1] [--workers 8] [--worker-sessions 500] [--pinned BIN] [--pair-sessions 40]
//!     [--pair-turns 5] [--passes 5]
//! make bench-pg        # both on a throwaway server (scripts/pg/server.sh, max_connections=50)
//! ```
//!
//! The comparison (no subcommand):
//!
//! - **Append**: TURNS whole turns (default 30; each 11 events with one tool exchange and two
//!   requests, as the `append` criterion bench) on a new session, per durability policy, on a
//!   JSONL file and on PostgreSQL; per pass the two run back to back (their order alternating),
//!   and the ratio of their times is taken within the pass.
//! - **Load**: a writing open (lock or lease, read, validate, derive) of an EVENTS-event session
//!   (default 100,000, the fixture of the `load` bench) from the file and from the database.
//!
//! Prints, per row, the median over PASSES (default 5) of each store's time and of the paired
//! ratios, with the ratios' range.
//!
//! `fleet`: every measurement runs in a worker process (this binary re-executed as
//! `bench_postgres worker ...`, which the parent drives over its stdin and stdout), so each
//! starts from a fresh process (its resident size, its pool):
//!
//! 1. **One process, SESSIONS sessions open at once** (`pool_size=19`: 19 pooled connections and
//!    the liveness connection), a third per durability policy; the time to open them all, the
//!    server's count of client connections while they are open (`pg_stat_activity`), then per
//!    policy one phase in which each of that policy's sessions runs TURNS turns, THREADS at a
//!    time: append calls/s and the p50/p99 latency of one call; resident size per open session.
//!    The same on JSONL files in a temporary directory.
//! 2. **WORKERS processes × WORKER-SESSIONS sessions through PgBouncer** (transaction mode,
//!    `pooler=transaction`), every phase started in all workers at once; the parent aggregates.
//! 3. **Beside the pinned design** (`--pinned BIN`: this file built at the commit before the
//!    lease, where each open session holds a connection of its own): how far it gets towards
//!    SESSIONS sessions before the server refuses it, then PASSES rounds at PAIR-SESSIONS
//!    sessions of each policy, pinned, pooled and JSONL in rotating order, each in a fresh
//!    process; medians of the paired ratios with their range.
//!
//! This file builds against both designs (it uses only the `Session` and `Agent` API that both
//! have), which is what lets the pinned build run the same workload.

#[path = "../benches/fixture/mod.rs"]
mod fixture;

use llmsession::log::TurnEndReason;
use llmsession::store::postgres::{PgOptions, PgStore, PgUrl};
use llmsession::store::url::UrlOptions;
use llmsession::store::{Batch, JsonlStore, Store};
use llmsession::{Agent, Block, CancelToken, Durability, Message, Role, Session, SessionOptions};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Runs `turns` turns on a session and returns the time they took (the open is not timed).
fn run_turns(session: Session, turns: u64) -> Duration {
    let mut agent = Agent::new(&session, fixture::options()).expect("agent");
    let cancel = CancelToken::new();
    let t = Instant::now();
    for i in 0..turns {
        turn(&mut agent, i, &cancel);
    }
    let d = t.elapsed();
    agent.dispose().expect("dispose");
    d
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// One row: the times of each pass for the file and the database.
fn row(name: &str, unit: f64, unit_name: &str, file: &[f64], db: &[f64]) {
    let mut ratios: Vec<f64> = db.iter().zip(file).map(|(d, f)| d / f).collect();
    let (lo, hi) = ratios.iter().fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let mf = median(&mut file.to_vec());
    let md = median(&mut db.to_vec());
    let mr = median(&mut ratios);
    let rate = |t: f64| if unit > 0.0 { format!(" ({:.0} {unit_name}/s)", unit / t) } else { String::new() };
    println!("| {name} | {}{} | {}{} | **{mr:.2}×** | {lo:.2}× to {hi:.2}× |", fmt_time(mf), rate(mf), fmt_time(md), rate(md));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => return worker(&flags(&args[2..])),
        Some("fleet") => return fleet(&flags(&args[2..])),
        _ => {}
    }
    let passes: usize = args.get(1).map(|s| s.parse().expect("PASSES")).unwrap_or(5);
    let events: usize = args.get(2).map(|s| s.parse().expect("EVENTS")).unwrap_or(100_000);
    let turns: u64 = args.get(3).map(|s| s.parse().expect("TURNS")).unwrap_or(30);
    let url = std::env::var("LLMSESSION_PG_URL").expect("set LLMSESSION_PG_URL (make bench-pg starts a server and sets it)");
    let run = format!("bench-{}-{}", std::process::id(), llmsession::session::now_ms());
    // The files go on the file system of the server's data directory where it is known (make
    // bench-pg), so both stores sync to the same disk.
    let dir = match std::env::var("LLMSESSION_PG_DIR") {
        Ok(d) => tempfile::tempdir_in(d).expect("tempdir"),
        Err(_) => tempfile::tempdir().expect("tempdir"),
    };
    println!("PostgreSQL vs JSONL: {passes} paired passes; append: {turns} turns of {TURN_EVENTS} events per run; load: {events} events");
    println!();
    println!("| | JSONL file | PostgreSQL | PostgreSQL / JSONL (median) | range of the paired ratios |");
    println!("|---|---|---|---|---|");

    let mut n = 0u64;
    for (name, durability) in [("every-event", Durability::EveryEvent), ("turn-end", Durability::TurnEnd), ("never", Durability::Never)] {
        let (mut file, mut db) = (Vec::new(), Vec::new());
        for pass in 0..passes {
            let mut once = |pg: bool| {
                n += 1;
                let id = format!("{run}-{n}");
                let session = if pg {
                    Session::open_url(&url, UrlOptions { id: Some(id), durability, ..UrlOptions::default() }).expect("open (PostgreSQL)").0
                } else {
                    let path = dir.path().join(format!("{id}.jsonl"));
                    Session::open_jsonl(&path, SessionOptions { durability, id: Some(id), ..SessionOptions::default() })
                        .expect("open (JSONL)")
                        .0
                };
                run_turns(session, turns).as_secs_f64() / turns as f64
            };
            // The order alternates, so neither store always runs on a warmer machine.
            if pass % 2 == 0 {
                file.push(once(false));
                db.push(once(true));
            } else {
                db.push(once(true));
                file.push(once(false));
            }
        }
        row(&format!("append, `{name}`, per turn (11 events)"), TURN_EVENTS as f64, "events", &file, &db);
    }

    // The load fixture, once in each store.
    // The fixture of the `load` bench (fixture::write_jsonl), under an id of this run.
    let path = dir.path().join("load.jsonl");
    let id = format!("{run}-load");
    {
        let (session, _) =
            Session::open_jsonl(&path, SessionOptions { durability: Durability::Never, id: Some(id.clone()), ..SessionOptions::default() })
                .expect("fixture");
        let session = fixture::Fixture::build(session, 1 + 2 * (events / 5)).finish();
        session.sync().expect("sync");
    }
    let contents = JsonlStore::open_read_only(&path).expect("fixture").load().expect("fixture");
    let size = std::fs::metadata(&path).expect("fixture").len();
    {
        let pg = PgUrl::parse(&url).expect("URL");
        let mut store = PgStore::open(&pg, &id, PgOptions { durability: Durability::Never, ..PgOptions::default() }).expect("PostgreSQL");
        let header = String::from_utf8(contents.records[0].clone()).expect("UTF-8");
        let events: Vec<llmsession::log::Text> =
            contents.records[1..].iter().map(|r| String::from_utf8(r.clone()).expect("UTF-8").into()).collect();
        for (i, chunk) in events.chunks(2000).enumerate() {
            let seq = (i * 2000) as u64;
            let h = if i == 0 { Some(header.as_str()) } else { None };
            store.append(&Batch { session_id: &id, header: h, seq, events: chunk }).expect("copy into PostgreSQL");
        }
        store.sync().expect("sync");
    }
    let (mut file, mut db) = (Vec::new(), Vec::new());
    let mut loaded = 0;
    for pass in 0..passes {
        let mut once = |pg: bool| {
            let t = Instant::now();
            let s = if pg {
                Session::open_url(&url, UrlOptions { id: Some(id.clone()), create: false, ..UrlOptions::default() })
                    .expect("load (PostgreSQL)")
                    .0
            } else {
                Session::open_jsonl(&path, SessionOptions::default()).expect("load (JSONL)").0
            };
            let d = t.elapsed().as_secs_f64();
            loaded = s.len();
            d
        };
        if pass % 2 == 0 {
            file.push(once(false));
            db.push(once(true));
        } else {
            db.push(once(true));
            file.push(once(false));
        }
    }
    row(&format!("load (writing open) of {loaded} events, {:.1} MB", size as f64 / 1e6), size as f64 / 1e6, "MB", &file, &db);
    // The sessions of this run stay in the database (a throwaway one under make bench-pg).
}

// ---------------------------------------------------------------------------------------------
// Fleet scale: the worker (one process holding many open sessions) and the parent that drives
// workers and prints the tables.

const POLICIES: [(&str, Durability); 3] =
    [("every-event", Durability::EveryEvent), ("turn-end", Durability::TurnEnd), ("never", Durability::Never)];

fn policy(name: &str) -> Durability {
    POLICIES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("unknown policy {name}")).1
}

/// `--key value` pairs (a flag without a value is "1").
fn flags(args: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut i = 0;
    while i < args.len() {
        let k = args[i].strip_prefix("--").unwrap_or_else(|| panic!("expected --name, got {}", args[i])).to_string();
        if i + 1 < args.len() && !args[i + 1].starts_with("--") {
            out.insert(k, args[i + 1].clone());
            i += 2;
        } else {
            out.insert(k, "1".into());
            i += 1;
        }
    }
    out
}

fn num(f: &HashMap<String, String>, k: &str, default: usize) -> usize {
    f.get(k).map(|v| v.parse().unwrap_or_else(|_| panic!("--{k} {v}: not a number"))).unwrap_or(default)
}

/// A line of /proc/self/status in kB (VmRSS) or as a count (Threads).
fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn unix_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// One turn (as `turn` above), each of its seven appending calls timed (µs) into `lat`.
fn timed_turn(agent: &mut Agent, i: u64, cancel: &CancelToken, lat: &mut Vec<u32>) -> llmsession::Result<()> {
    let mut t = Instant::now();
    let mut lap = |lat: &mut Vec<u32>| {
        lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        t = Instant::now();
    };
    agent.start_turn(Message::user_text(format!("Task {i}: read the file.")))?;
    lap(lat);
    agent.next_request(cancel)?;
    lap(lat);
    agent.record_response(fixture::assistant(i), None)?;
    lap(lat);
    agent.record_tool_result(fixture::result(i))?;
    lap(lat);
    agent.next_request(cancel)?;
    lap(lat);
    agent.record_response(Message::new(Role::Assistant, vec![Block::text("Read it.")]), None)?;
    lap(lat);
    agent.end_turn(TurnEndReason::Completed)?;
    lap(lat);
    Ok(())
}

/// `worker --store pg|jsonl [--url URL] [--dir DIR] --sessions N --threads T --turns R
/// --policies a,b,c --prefix P [--probe]`: opens N sessions (policy i % 3 for session i) with T
/// threads, prints `READY {...}`, then per policy waits for `GO` on stdin, runs R turns on each
/// session of that policy (T threads) and prints `PHASE {...}`; then `END {...}`, and after
/// `STOP` closes them (`DONE {...}`). `--probe`: opens one by one until the first refusal,
/// reports, and closes after `STOP`.
fn worker(f: &HashMap<String, String>) {
    let rss_start = status("VmRSS:");
    let store = f.get("store").cloned().unwrap_or_else(|| "pg".into());
    let url = f.get("url").cloned().unwrap_or_default();
    let dir = f.get("dir").map(std::path::PathBuf::from);
    let n = num(f, "sessions", 1000);
    let threads = num(f, "threads", 32).max(1);
    let turns = num(f, "turns", 1) as u64;
    let prefix = f.get("prefix").cloned().unwrap_or_else(|| format!("fleet-{}", std::process::id()));
    let names: Vec<String> = f
        .get("policies")
        .map(|p| p.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| POLICIES.iter().map(|(n, _)| n.to_string()).collect());
    let probe = f.contains_key("probe");
    // Every JSONL session holds its file open.
    unsafe {
        let want = (n as u64 + 256) as libc::rlim_t;
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    let open = |i: usize| -> llmsession::Result<Session> {
        let id = format!("{prefix}-{i}");
        let durability = policy(&names[i % names.len()]);
        if store == "jsonl" {
            let path = dir.as_ref().expect("--dir").join(format!("{id}.jsonl"));
            Session::open_jsonl(&path, SessionOptions { durability, id: Some(id), ..SessionOptions::default() }).map(|s| s.0)
        } else {
            Session::open_url(&url, UrlOptions { id: Some(id), durability, ..UrlOptions::default() }).map(|s| s.0)
        }
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock().lines();
    let mut next = || input.next().and_then(|l| l.ok()).unwrap_or_default();
    let say = |tag: &str, v: Value| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{tag} {v}").and_then(|_| out.flush()).expect("stdout");
    };

    // The first session alone: what it costs to have any (the runtime, the pool, a connection).
    let t = Instant::now();
    let first = match open(0) {
        Ok(s) => s,
        Err(e) => {
            say("READY", json!({"opened": 0, "wanted": n, "open_s": t.elapsed().as_secs_f64(), "error": e.to_string()}));
            next();
            say("DONE", json!({}));
            return;
        }
    };
    let rss_first = status("VmRSS:");
    let slots: Vec<Mutex<Option<Session>>> = (0..n).map(|_| Mutex::new(None)).collect();
    *slots[0].lock().unwrap() = Some(first);
    let error: Mutex<Option<String>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let opened = AtomicUsize::new(1);
    if probe {
        for (i, slot) in slots.iter().enumerate().skip(1) {
            match open(i) {
                Ok(s) => {
                    *slot.lock().unwrap() = Some(s);
                    opened.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    *error.lock().unwrap() = Some(e.to_string());
                    break;
                }
            }
        }
    } else {
        let cursor = AtomicUsize::new(1);
        std::thread::scope(|sc| {
            for _ in 0..threads.min(n) {
                sc.spawn(|| loop {
                    let i = cursor.fetch_add(1, Ordering::Relaxed);
                    if i >= n || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    match open(i) {
                        Ok(s) => {
                            *slots[i].lock().unwrap() = Some(s);
                            opened.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            error.lock().unwrap().get_or_insert(e.to_string());
                        }
                    }
                });
            }
        });
    }
    let open_s = t.elapsed().as_secs_f64();
    let opened = opened.into_inner();
    let rss_open = status("VmRSS:");
    say(
        "READY",
        json!({
            "opened": opened, "wanted": n, "open_s": open_s, "error": error.lock().unwrap().clone(),
            "rss_start_kb": rss_start, "rss_first_kb": rss_first, "rss_open_kb": rss_open,
            "threads_os": status("Threads:"),
        }),
    );
    let sessions: Vec<Option<Session>> = slots.into_iter().map(|m| m.into_inner().unwrap()).collect();
    if !probe && opened == n {
        for (k, name) in names.iter().enumerate() {
            if next() != "GO" {
                break;
            }
            let mine: Vec<&Session> =
                sessions.iter().enumerate().filter(|(i, _)| i % names.len() == k).filter_map(|(_, s)| s.as_ref()).collect();
            let cursor = AtomicUsize::new(0);
            let lat = Mutex::new(Vec::new());
            let (events, errors) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let first_error: Mutex<Option<String>> = Mutex::new(None);
            let start = unix_s();
            std::thread::scope(|sc| {
                for _ in 0..threads.min(mine.len().max(1)) {
                    sc.spawn(|| {
                        let cancel = CancelToken::new();
                        let mut mine_lat = Vec::new();
                        loop {
                            let i = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(s) = mine.get(i) else { break };
                            let before = s.len();
                            let r = Agent::new(s, fixture::options()).and_then(|mut agent| {
                                for t in 0..turns {
                                    timed_turn(&mut agent, t, &cancel, &mut mine_lat)?;
                                }
                                agent.dispose()
                            });
                            events.fetch_add(s.len() - before, Ordering::Relaxed);
                            if let Err(e) = r {
                                errors.fetch_add(1, Ordering::Relaxed);
                                first_error.lock().unwrap().get_or_insert(e.to_string());
                            }
                        }
                        lat.lock().unwrap().extend(mine_lat);
                    });
                }
            });
            let end = unix_s();
            say(
                "PHASE",
                json!({
                    "policy": name, "sessions": mine.len(), "start": start, "end": end,
                    "events": events.into_inner(), "errors": errors.into_inner(), "error": first_error.into_inner().unwrap(),
                    "lat_us": lat.into_inner().unwrap(),
                }),
            );
        }
        say("END", json!({"rss_after_kb": status("VmRSS:")}));
    }
    // Closing gives every lease back (one statement each): in parallel, timed.
    next();
    let t = Instant::now();
    let cursor = AtomicUsize::new(0);
    let sessions: Vec<Mutex<Option<Session>>> = sessions.into_iter().map(Mutex::new).collect();
    std::thread::scope(|sc| {
        for _ in 0..threads.min(sessions.len().max(1)) {
            sc.spawn(|| loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                let Some(s) = sessions.get(i) else { return };
                drop(s.lock().unwrap().take());
            });
        }
    });
    say("DONE", json!({"close_s": t.elapsed().as_secs_f64()}));
}

/// A worker process and its protocol lines.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    out: std::io::Lines<BufReader<ChildStdout>>,
    name: String,
}

impl Worker {
    fn spawn(bin: &str, name: &str, args: &[String]) -> Worker {
        let mut child = Command::new(bin)
            .arg("worker")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Worker { child, stdin, out, name: name.to_string() }
    }

    /// The next line tagged `tag`, parsed.
    fn expect(&mut self, tag: &str) -> Value {
        loop {
            let line = match self.out.next() {
                Some(Ok(l)) => l,
                _ => panic!("worker {} ended before {tag} (its stderr is above)", self.name),
            };
            if let Some(rest) = line.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')) {
                return serde_json::from_str(rest).expect("worker JSON");
            }
            eprintln!("[{}] {line}", self.name);
        }
    }

    fn send(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").and_then(|_| self.stdin.flush()).expect("worker stdin");
    }

    fn finish(mut self) -> Value {
        self.send("STOP");
        let done = self.expect("DONE");
        let _ = self.child.wait();
        done
    }
}

/// The server's client connections right now, by application name (this query's own excluded),
/// through psql.
fn server_connections(url: &str) -> (u64, Vec<(String, u64)>) {
    let psql = std::env::var("LLMSESSION_PSQL").unwrap_or_else(|_| "psql".into());
    let out = Command::new(&psql)
        .args([url, "-X", "-Atc"])
        .arg("SELECT coalesce(nullif(application_name, ''), '(none)'), count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 2 DESC")
        .env("PGCONNECT_TIMEOUT", "10")
        .output();
    let out = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).to_string(),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr).trim().replace('\n', " ");
            return (0, vec![(format!("psql could not connect to count them: {why}"), 0)]);
        }
        Err(e) => {
            eprintln!("cannot run {psql}: {e}");
            return (0, Vec::new());
        }
    };
    let groups: Vec<(String, u64)> =
        out.lines().filter_map(|l| l.rsplit_once('|')).map(|(a, n)| (a.to_string(), n.trim().parse().unwrap_or(0))).collect();
    (groups.iter().map(|g| g.1).sum(), groups)
}

fn psql_value(url: &str, sql: &str) -> String {
    let psql = std::env::var("LLMSESSION_PSQL").unwrap_or_else(|_| "psql".into());
    Command::new(&psql)
        .args([url, "-X", "-Atc", sql])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn with_params(url: &str, params: &str) -> String {
    if params.is_empty() {
        return url.to_string();
    }
    format!("{url}{}{params}", if url.contains('?') { "&" } else { "?" })
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[k.clamp(1, sorted.len()) - 1] as f64
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One policy phase over every worker of a run.
#[derive(Clone, Debug)]
struct Phase {
    policy: String,
    sessions: u64,
    calls: usize,
    events: u64,
    wall: f64,
    p50: f64,
    p99: f64,
    errors: u64,
    error: Option<String>,
}

impl Phase {
    fn calls_per_s(&self) -> f64 {
        self.calls as f64 / self.wall
    }
}

/// What a run of workers measured.
struct Run {
    ready: Vec<Value>,
    phases: Vec<Phase>,
    end: Vec<Value>,
    done: Vec<Value>,
    connections: (u64, Vec<(String, u64)>),
}

impl Run {
    fn opened(&self) -> u64 {
        self.ready.iter().map(|r| r["opened"].as_u64().unwrap_or(0)).sum()
    }
    /// The open time: the slowest worker's.
    fn open_s(&self) -> f64 {
        self.ready.iter().map(|r| r["open_s"].as_f64().unwrap_or(0.0)).fold(0.0, f64::max)
    }
    fn error(&self) -> Option<String> {
        self.ready.iter().find_map(|r| r["error"].as_str().map(str::to_string))
    }
}

/// Starts `workers` (already spawned), waits until all have opened their sessions, counts the
/// server's connections (`count_url`), then runs every policy phase in all of them at once.
fn drive(mut workers: Vec<Worker>, policies: &[String], count_url: Option<&str>) -> Run {
    let ready: Vec<Value> = workers.iter_mut().map(|w| w.expect("READY")).collect();
    let connections = count_url.map(server_connections).unwrap_or_default();
    let complete = ready.iter().all(|r| r["opened"] == r["wanted"] && r["error"].is_null());
    let mut phases = Vec::new();
    let mut end = Vec::new();
    if complete {
        for p in policies {
            workers.iter_mut().for_each(|w| w.send("GO"));
            let got: Vec<Value> = workers.iter_mut().map(|w| w.expect("PHASE")).collect();
            let start = got.iter().map(|g| g["start"].as_f64().unwrap()).fold(f64::MAX, f64::min);
            let stop = got.iter().map(|g| g["end"].as_f64().unwrap()).fold(0.0, f64::max);
            let mut lat: Vec<u32> =
                got.iter().flat_map(|g| g["lat_us"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32)).collect();
            lat.sort_unstable();
            phases.push(Phase {
                policy: p.clone(),
                sessions: got.iter().map(|g| g["sessions"].as_u64().unwrap()).sum(),
                calls: lat.len(),
                events: got.iter().map(|g| g["events"].as_u64().unwrap()).sum(),
                wall: stop - start,
                p50: pct(&lat, 50.0),
                p99: pct(&lat, 99.0),
                errors: got.iter().map(|g| g["errors"].as_u64().unwrap()).sum(),
                error: got.iter().find_map(|g| g["error"].as_str().map(str::to_string)),
            });
        }
        end = workers.iter_mut().map(|w| w.expect("END")).collect();
    }
    let done = workers.into_iter().map(Worker::finish).collect();
    Run { ready, phases, end, done, connections }
}

fn worker_args(
    store: &str,
    url: &str,
    dir: &std::path::Path,
    sessions: usize,
    threads: usize,
    turns: usize,
    policies: &[String],
    prefix: &str,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--store".into(),
        store.into(),
        "--sessions".into(),
        sessions.to_string(),
        "--threads".into(),
        threads.to_string(),
        "--turns".into(),
        turns.to_string(),
        "--policies".into(),
        policies.join(","),
        "--prefix".into(),
        prefix.into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    if !url.is_empty() {
        a.push("--url".into());
        a.push(url.into());
    }
    a
}

fn print_phases(title: &str, run: &Run) {
    println!("| {title} | sessions | append calls | events | wall | calls/s | p50 | p99 | errors |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in &run.phases {
        println!(
            "| `{}` | {} | {} | {} | {:.2} s | **{}** | {} | {} | {} |",
            p.policy,
            thousands(p.sessions as f64),
            thousands(p.calls as f64),
            thousands(p.events as f64),
            p.wall,
            thousands(p.calls_per_s()),
            fmt_us(p.p50),
            fmt_us(p.p99),
            p.errors
        );
        if let Some(e) = &p.error {
            println!("  first error: {e}");
        }
    }
}

/// RSS per open session in one worker: (after all opens − after the first) / (opened − 1).
fn per_session_kib(r: &Value) -> f64 {
    let opened = r["opened"].as_f64().unwrap_or(0.0);
    let first = r["rss_first_kb"].as_f64().unwrap_or(0.0);
    let all = r["rss_open_kb"].as_f64().unwrap_or(0.0);
    if opened > 1.0 {
        (all - first) / (opened - 1.0)
    } else {
        f64::NAN
    }
}

fn print_memory(name: &str, run: &Run) {
    let r = &run.ready[0];
    let after = run.end.first().and_then(|e| e["rss_after_kb"].as_f64()).unwrap_or(f64::NAN);
    let opened = r["opened"].as_f64().unwrap_or(0.0);
    println!(
        "| {name} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | **{:.2} KiB** | {:.2} KiB | {} |",
        r["rss_start_kb"].as_f64().unwrap_or(0.0) / 1024.0,
        r["rss_first_kb"].as_f64().unwrap_or(0.0) / 1024.0,
        r["rss_open_kb"].as_f64().unwrap_or(0.0) / 1024.0,
        after / 1024.0,
        per_session_kib(r),
        (after - r["rss_first_kb"].as_f64().unwrap_or(0.0)) / (opened - 1.0),
        r["threads_os"]
    );
}

fn print_connections(run: &Run) {
    let (total, groups) = &run.connections;
    let shown: Vec<String> = groups.iter().map(|(a, n)| format!("{n} × {a:?}")).collect();
    println!("server-side client connections while open (pg_stat_activity): **{total}** ({})", shown.join(", "));
}

/// The median and the range of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    let m = median(&mut s);
    (m, s.first().copied().unwrap_or(f64::NAN), s.last().copied().unwrap_or(f64::NAN))
}

fn fleet(f: &HashMap<String, String>) {
    let me = std::env::current_exe().expect("current_exe").display().to_string();
    let base = std::env::var("LLMSESSION_PG_URL").expect("set LLMSESSION_PG_URL (make bench-pg starts a server and sets it)");
    let bouncer = std::env::var("LLMSESSION_PGBOUNCER_URL").ok();
    let sessions = num(f, "sessions", 10_000);
    let threads = num(f, "threads", 32);
    let turns = num(f, "turns", 1);
    let workers = num(f, "workers", 8);
    let worker_sessions = num(f, "worker-sessions", 500);
    let pool = num(f, "pool-size", 19);
    let pair_sessions = num(f, "pair-sessions", 40);
    let pair_turns = num(f, "pair-turns", 5);
    let passes = num(f, "passes", 5);
    let pinned = f.get("pinned").filter(|p| !p.is_empty()).cloned();
    let only: Vec<String> = f.get("only").map(|o| o.split(',').map(str::to_string).collect()).unwrap_or_default();
    let want = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    // TLS is off on these loopback connections, for both designs (the pinned one has no TLS).
    let plain = with_params(&base, "sslmode=disable");
    let pooled = with_params(&plain, &format!("pool_size={pool}"));
    let policies: Vec<String> = POLICIES.iter().map(|(n, _)| n.to_string()).collect();
    let run_id = format!("fleet-{}-{}", std::process::id(), llmsession::session::now_ms());
    let tmp = match std::env::var("LLMSESSION_PG_DIR") {
        Ok(d) => tempfile::tempdir_in(d).expect("tempdir"),
        Err(_) => tempfile::tempdir().expect("tempdir"),
    };
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    println!("## PostgreSQL at fleet scale");
    println!();
    println!(
        "server: max_connections {}, superuser_reserved_connections {}, role superuser: {}; {nproc} CPUs; {threads} caller threads per process; {turns} turn(s) of 7 append calls per session per phase",
        psql_value(&plain, "SHOW max_connections"),
        psql_value(&plain, "SHOW superuser_reserved_connections"),
        psql_value(&plain, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"),
    );
    println!();

    // 1. Beside the pinned design (first: nothing else holds connections yet; PgBouncer keeps
    // its server connections once it has made them).
    if want("pinned") {
        if let Some(pin) = &pinned {
            println!("### Beside the pinned design (one connection per open session)");
            println!();
            // Each design in a schema of its own: the pinned build refuses the schema version the
            // pooled store writes.
            psql_value(&plain, "CREATE SCHEMA IF NOT EXISTS bench_pinned; CREATE SCHEMA IF NOT EXISTS bench_pooled; SELECT 1");
            let pinned_url = with_params(&plain, "options=-csearch_path%3Dbench_pinned");
            let pooled_pair = with_params(&pooled, "options=-csearch_path%3Dbench_pooled");
            let probe_args = {
                let mut a = worker_args("pg", &pinned_url, tmp.path(), sessions, 1, 1, &policies, &format!("{run_id}-probe"));
                a.push("--probe".into());
                a
            };
            let mut w = Worker::spawn(pin, "pinned-probe", &probe_args);
            let ready = w.expect("READY");
            let conns = server_connections(&plain);
            let done = w.finish();
            println!(
                "pinned, opening {} sessions one by one: **stopped after {} sessions** ({:.2} s): {}",
                thousands(sessions as f64),
                ready["opened"],
                ready["open_s"].as_f64().unwrap_or(0.0),
                ready["error"].as_str().unwrap_or("no error")
            );
            let shown: Vec<String> = conns.1.iter().map(|(a, n)| format!("{n} × {a:?}")).collect();
            println!(
                "server-side client connections at that point: {} ({}); closed in {:.2} s",
                conns.0,
                shown.join(", "),
                done["close_s"].as_f64().unwrap_or(f64::NAN)
            );
            println!();

            // The pairs run once per caller-thread count of --pair-threads (default 1 and THREADS):
            // one caller shows the cost of a call alone, many show the pool under contention.
            let pair_threads: Vec<usize> = f
                .get("pair-threads")
                .map(|v| v.split(',').map(|t| t.parse().expect("--pair-threads")).collect())
                .unwrap_or_else(|| vec![1, threads]);
            for pthreads in pair_threads {
                // Rounds at PAIR_SESSIONS sessions of each policy: pinned, pooled and JSONL, each in a
                // fresh process, in an order that rotates every pass.
                let stores = ["pinned", "pooled", "jsonl"];
                let mut results: HashMap<(&str, String), Vec<(f64, Phase)>> = HashMap::new();
                let pthreads = pthreads.min(pair_sessions);
                for pass in 0..passes {
                    for p in &policies {
                        for k in 0..stores.len() {
                            let store = stores[(pass + k) % stores.len()];
                            let prefix = format!("{run_id}-pair-{pass}-{p}-{store}");
                            let one = vec![p.clone()];
                            let jdir = tmp.path().join(&prefix);
                            let w = match store {
                                "pinned" => Worker::spawn(
                                    pin,
                                    &prefix,
                                    &worker_args("pg", &pinned_url, tmp.path(), pair_sessions, pthreads, pair_turns, &one, &prefix),
                                ),
                                "pooled" => Worker::spawn(
                                    &me,
                                    &prefix,
                                    &worker_args("pg", &pooled_pair, tmp.path(), pair_sessions, pthreads, pair_turns, &one, &prefix),
                                ),
                                _ => {
                                    std::fs::create_dir_all(&jdir).expect("dir");
                                    Worker::spawn(
                                        &me,
                                        &prefix,
                                        &worker_args("jsonl", "", &jdir, pair_sessions, pthreads, pair_turns, &one, &prefix),
                                    )
                                }
                            };
                            let run = drive(vec![w], &one, None);
                            let _ = std::fs::remove_dir_all(&jdir);
                            match run.phases.first() {
                                Some(ph) => results.entry((store, p.clone())).or_default().push((run.open_s(), ph.clone())),
                                None => println!("{store} {p} pass {pass}: {}", run.error().unwrap_or_default()),
                            }
                        }
                    }
                }
                println!(
                "{pair_sessions} sessions per run, {pair_turns} turns each ({} append calls per run), {pthreads} caller threads, {passes} passes; pinned, pooled (pool_size={pool}) and JSONL each in a fresh process, in an order that rotates every pass. Medians over the passes; ratios are pooled / pinned within a pass (median, then range).",
                pair_sessions * pair_turns * 7
            );
                println!();
                println!("| policy | measure | pinned | pooled | JSONL | pooled / pinned (median) | range of the paired ratios |");
                println!("|---|---|---|---|---|---|---|");
                for p in &policies {
                    let get = |s: &str| results.get(&(s, p.clone())).cloned().unwrap_or_default();
                    let (pin_r, pool_r, json_r) = (get("pinned"), get("pooled"), get("jsonl"));
                    type Pick = fn(&(f64, Phase)) -> f64;
                    let rows: [(&str, Pick, fn(f64) -> String); 4] = [
                        ("open (all sessions)", |r| r.0, |v| format!("{:.1} ms", v * 1e3)),
                        ("append calls/s", |r| r.1.calls_per_s(), thousands),
                        ("p50 of a call", |r| r.1.p50, fmt_us),
                        ("p99 of a call", |r| r.1.p99, fmt_us),
                    ];
                    for (name, pick, show) in rows {
                        let a: Vec<f64> = pin_r.iter().map(pick).collect();
                        let b: Vec<f64> = pool_r.iter().map(pick).collect();
                        let c: Vec<f64> = json_r.iter().map(pick).collect();
                        let ratios: Vec<f64> = b.iter().zip(&a).map(|(b, a)| b / a).collect();
                        let (rm, rlo, rhi) = spread(&ratios);
                        println!(
                            "| `{p}` | {name} | {} | {} | {} | **{rm:.2}×** | {rlo:.2}× to {rhi:.2}× |",
                            show(spread(&a).0),
                            show(spread(&b).0),
                            show(spread(&c).0)
                        );
                    }
                }
                println!();
            }
        } else {
            println!("(no --pinned BIN: the comparison with the pinned design is left out)\n");
        }
    }

    // 2. One process, SESSIONS open at once, beside JSONL files.
    if want("one") {
        println!("### {} sessions open at once in one process (pool_size={pool}, fast_takeover on)", thousands(sessions as f64));
        println!();
        let run = drive(
            vec![Worker::spawn(
                &me,
                "pooled",
                &worker_args("pg", &pooled, tmp.path(), sessions, threads, turns, &policies, &format!("{run_id}-one")),
            )],
            &policies,
            Some(&plain),
        );
        println!(
            "opened {} of {} sessions in {:.2} s ({} opens/s){}",
            run.opened(),
            sessions,
            run.open_s(),
            thousands(run.opened() as f64 / run.open_s()),
            run.error().map(|e| format!("; error: {e}")).unwrap_or_default()
        );
        print_connections(&run);
        println!("closed them in {:.2} s", run.done[0]["close_s"].as_f64().unwrap_or(f64::NAN));
        println!();
        print_phases("PostgreSQL, policy", &run);
        println!();
        let jdir = tmp.path().join("jsonl-one");
        std::fs::create_dir_all(&jdir).expect("dir");
        let jrun = drive(
            vec![Worker::spawn(
                &me,
                "jsonl",
                &worker_args("jsonl", "", &jdir, sessions, threads, turns, &policies, &format!("{run_id}-jone")),
            )],
            &policies,
            None,
        );
        println!(
            "JSONL: opened {} of {} sessions in {:.2} s ({} opens/s), closed in {:.2} s{}",
            jrun.opened(),
            sessions,
            jrun.open_s(),
            thousands(jrun.opened() as f64 / jrun.open_s()),
            jrun.done[0]["close_s"].as_f64().unwrap_or(f64::NAN),
            jrun.error().map(|e| format!("; error: {e}")).unwrap_or_default()
        );
        println!();
        print_phases("JSONL, policy", &jrun);
        println!();
        println!("| resident size | at start | after the first open | after all opens | after the appends | per open session (opens 2..N) | per session after its turn(s) | OS threads |");
        println!("|---|---|---|---|---|---|---|---|");
        print_memory("PostgreSQL", &run);
        print_memory("JSONL", &jrun);
        println!();
        let _ = std::fs::remove_dir_all(&jdir);
    }

    // 3. WORKERS processes through PgBouncer.
    if want("bouncer") {
        match &bouncer {
            None => println!("(no LLMSESSION_PGBOUNCER_URL: the PgBouncer run is left out; make bench-pg sets LLMSESSION_PG_BOUNCER=1)\n"),
            Some(b) => {
                let wpool = num(f, "worker-pool-size", 10);
                let url = with_params(b, &format!("sslmode=disable&pooler=transaction&pool_size={wpool}"));
                println!(
                    "### {workers} processes × {worker_sessions} sessions through PgBouncer (transaction mode, default_pool_size 20; pool_size={wpool}, pooler=transaction)"
                );
                println!();
                let wthreads = num(f, "worker-threads", (threads / workers).max(4));
                let ws: Vec<Worker> = (0..workers)
                    .map(|w| {
                        Worker::spawn(
                            &me,
                            &format!("w{w}"),
                            &worker_args("pg", &url, tmp.path(), worker_sessions, wthreads, turns, &policies, &format!("{run_id}-w{w}")),
                        )
                    })
                    .collect();
                let run = drive(ws, &policies, Some(&plain));
                let per: Vec<f64> = run.ready.iter().map(per_session_kib).collect();
                let (m, lo, hi) = spread(&per);
                println!(
                    "opened {} of {} sessions (slowest worker {:.2} s); {wthreads} caller threads per worker; resident size per open session {m:.2} KiB (workers {lo:.2} to {hi:.2}){}",
                    run.opened(),
                    workers * worker_sessions,
                    run.open_s(),
                    run.error().map(|e| format!("; error: {e}")).unwrap_or_default()
                );
                print_connections(&run);
                println!();
                print_phases("through PgBouncer, policy", &run);
                println!();
            }
        }
    }
}
