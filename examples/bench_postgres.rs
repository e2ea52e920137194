//! The PostgreSQL store against the JSONL file, side by side in one run (docs/performance.md,
//! "PostgreSQL store").
//!
//! ```text
//! LLMSESSION_PG_URL=postgres://... cargo run --release --example bench_postgres [PASSES] [EVENTS] [TURNS]
//! make bench-pg        # the same on a throwaway server (scripts/pg/server.sh)
//! ```
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

#[path = "../benches/fixture/mod.rs"]
mod fixture;

use llmsession::log::TurnEndReason;
use llmsession::store::postgres::{PgOptions, PgStore, PgUrl};
use llmsession::store::url::UrlOptions;
use llmsession::store::{Batch, JsonlStore, Store};
use llmsession::{Agent, Block, CancelToken, Durability, Message, Role, Session, SessionOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
                    Session::open_jsonl(&path, SessionOptions { durability, id: Some(id) }).expect("open (JSONL)").0
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
            Session::open_jsonl(&path, SessionOptions { durability: Durability::Never, id: Some(id.clone()) }).expect("fixture");
        let session = fixture::Fixture::build(session, 1 + 2 * (events / 5)).finish();
        session.sync().expect("sync");
    }
    let contents = JsonlStore::open_read_only(&path).expect("fixture").load().expect("fixture");
    let size = std::fs::metadata(&path).expect("fixture").len();
    {
        let pg = PgUrl::parse(&url).expect("URL");
        let mut store = PgStore::open(&pg, &id, PgOptions { durability: Durability::Never, ..PgOptions::default() }).expect("PostgreSQL");
        let header = String::from_utf8(contents.records[0].clone()).expect("UTF-8");
        let events: Vec<Arc<str>> = contents.records[1..].iter().map(|r| String::from_utf8(r.clone()).expect("UTF-8").into()).collect();
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
