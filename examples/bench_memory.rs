//! Resident memory after loading a long JSONL log (docs/performance.md).
//!
//! ```text
//! cargo run --release --example bench_memory [EVENTS] [PATH]
//! ```
//!
//! Writes a log of about EVENTS events (default 100,000) without checkpoints (so the open reads
//! and checks it whole: `benches/fixture`'s `write_jsonl_with`) to PATH (default a temporary
//! file) in a child process, so this process's memory holds nothing of the writing, then loads it with
//! `Session::open_jsonl` and reads `VmRSS` from `/proc/self/status` before and after. Prints the
//! file size, both resident sizes and the ratio of the growth to the file size, then the same
//! after `malloc_trim(0)` (what is live, without the allocator's retained free pages). Then it
//! builds the next provider body (an agent with the fixture's options and the `openai` renderer,
//! a new turn), holds it and reads `VmRSS` once more; the last line, `memory file=BYTES
//! open_kib=GROWTH body_kib=GROWTH`, is what `benches/bindings.sh` reads (the growths over the
//! reading before the load; on glibc the body's is read after the trim).

#[path = "../benches/fixture/mod.rs"]
mod fixture;

use llmsession::render::{RenderOptions, Renderer};
use llmsession::{Agent, CancelToken, Message, Session, SessionOptions};
use std::path::PathBuf;

fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmRSS")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--write") {
        let events: usize = args[2].parse().expect("EVENTS");
        fixture::write_jsonl_with(std::path::Path::new(&args[3]), events, llmsession::log::checkpoint::CheckpointPolicy::OFF);
        return;
    }
    let events: usize = args.get(1).map(|s| s.parse().expect("EVENTS is a number")).unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = args.get(2).map(PathBuf::from).unwrap_or_else(|| dir.path().join("memory.jsonl"));
    let status = std::process::Command::new(&args[0])
        .args(["--write", &events.to_string(), path.to_str().expect("UTF-8 path")])
        .status()
        .expect("writer");
    assert!(status.success(), "the writer failed");
    let size = std::fs::metadata(&path).expect("log").len();

    // The library's one-off costs are not the session's: its code paged in, lazily built
    // tables, the allocator's first arenas. A small log of the same shape is opened, a body
    // built from it and everything dropped before the first reading, so the growth measured is
    // what holding this log costs.
    let warm = dir.path().join("warm-up.jsonl");
    fixture::write_jsonl_with(&warm, 200, llmsession::log::checkpoint::CheckpointPolicy::OFF);
    {
        let (s, _) = Session::open_jsonl(&warm, SessionOptions::default()).expect("open the warm-up log");
        let mut a = Agent::new(&s, fixture::options()).expect("agent");
        a.set_renderer(Renderer::OpenAi, RenderOptions::default()).expect("set_renderer");
        a.start_turn(Message::user_text("Summarise how a request is built.")).expect("start_turn");
        drop(a.next_body(&CancelToken::new()).expect("next_body"));
        a.dispose().expect("dispose");
    }

    let before = rss_kib();
    let (session, _) = Session::open_jsonl(&path, SessionOptions::default()).expect("open");
    let after = rss_kib();
    let n = session.len();
    let surface = session.with_log(|l| l.history().len());
    let file_kib = size as f64 / 1024.0;
    println!("events: {n} (history {surface} messages)");
    println!("file: {size} bytes ({:.1} MiB)", file_kib / 1024.0);
    println!("VmRSS before load: {before} KiB, after load: {after} KiB");
    println!("growth: {} KiB = {:.2}x the file", after - before, (after - before) as f64 / file_kib);
    println!("resident after load: {:.2}x the file", after as f64 / file_kib);
    // What of that is live: ask glibc to give back the free pages it keeps (the load's
    // temporaries: one buffer per record, parsed values), then read VmRSS again.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only releases free memory held by the allocator.
        unsafe { libc::malloc_trim(0) };
        let trimmed = rss_kib();
        println!("VmRSS after malloc_trim: {trimmed} KiB: growth {:.2}x the file (live data)", (trimmed - before) as f64 / file_kib);
    }
    let mut agent = Agent::new(&session, fixture::options()).expect("agent");
    agent.set_renderer(Renderer::OpenAi, RenderOptions::default()).expect("set_renderer");
    agent.start_turn(Message::user_text("Summarise how a request is built.")).expect("start_turn");
    let body = agent.next_body(&CancelToken::new()).expect("next_body");
    let built = rss_kib();
    println!(
        "VmRSS with one body built ({} bytes): {built} KiB: growth {:.2}x the file",
        body.json.len(),
        (built - before) as f64 / file_kib
    );
    println!("memory file={size} open_kib={} body_kib={}", after - before, built - before);
    drop(body);
    agent.dispose().expect("dispose");
    drop(session);
}
