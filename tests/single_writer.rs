//! One writer per session on files, across processes: two processes race to open one JSONL
//! session for writing. Exactly one gets the lock; the other is refused with `Locked` (naming
//! the winner's process) until the winner closes, then takes its turn. Nothing interleaves:
//! the log verifies and holds every turn both writers completed.
//!
//! The writers are this test binary re-run with `LLMSESSION_RACE_CHILD` set (the
//! `race_child` test does the work then). `LLMSESSION_RACE_ROUNDS` sets the number of rounds
//! (default 12; half of them race to create a missing file).

use llmsession::log::TurnEndReason;
use llmsession::request::verify_records;
use llmsession::store::{JsonlStore, Store};
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Role, Session, SessionOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "LLMSESSION_RACE_CHILD";

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {}", path.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn turns(session: &Session, n: u64, who: &str) {
    let mut opts = AgentOptions::new(CallConfig::new("openai", "m"));
    opts.system = Some("race test".into());
    let mut agent = Agent::new(session, opts).expect("an agent");
    let c = CancelToken::new();
    for i in 0..n {
        agent.start_turn(Message::user_text(format!("{who} asks {i}"))).unwrap();
        agent.next_request(&c).unwrap();
        agent.record_response(Message::new(Role::Assistant, vec![Block::text(format!("{who} answer {i}"))]), None).unwrap();
        agent.end_turn(TurnEndReason::Completed).unwrap();
    }
    agent.dispose().unwrap();
}

/// A writer: waits at the start line, opens the log for writing; on `Locked` says so, waits
/// for the release and tries again until it gets the lock; then runs its turns, says so, and
/// (the first writer) holds the lock until the release.
#[test]
fn race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.split('|').collect();
    let (path, n, start, release, who) = (parts[0], parts[1].parse::<u64>().unwrap(), parts[2], parts[3], parts[4]);
    wait_for(Path::new(start));
    let mut refused = false;
    let session = loop {
        match Session::open_jsonl(path, SessionOptions::default()) {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::Locked => {
                let holder = e.detail().get("holder").and_then(|h| h.as_str()).unwrap_or("").to_string();
                if !refused {
                    println!("LOCKED {holder}");
                    refused = true;
                }
                wait_for(Path::new(release));
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("{who}: open failed: {e}"),
        }
    };
    if !refused {
        println!("OPENED {}", std::process::id());
    }
    turns(&session, n, who);
    println!("DONE");
    if !refused {
        wait_for(Path::new(release));
    }
}

fn spawn(spec: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "race_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads the child's protocol lines (the test harness prints its own lines too).
fn next_line(r: &mut impl BufRead) -> String {
    loop {
        let mut l = String::new();
        assert!(r.read_line(&mut l).unwrap() > 0, "the writer exited early");
        // The harness may print "test race_child ... " before the first line.
        for marker in ["LOCKED", "OPENED", "DONE"] {
            if let Some(at) = l.find(marker) {
                return l[at..].trim_end().to_string();
            }
        }
    }
}

fn completed_turns(path: &Path) -> usize {
    let contents = JsonlStore::open_read_only(path).unwrap().load().unwrap();
    contents.records.iter().filter(|r| std::str::from_utf8(r).unwrap().contains("\"reason\":\"completed\"")).count()
}

#[test]
fn two_processes_race_to_write_one_file() {
    let rounds: usize = std::env::var("LLMSESSION_RACE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let per_writer = 3;
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.jsonl");
        let before = if round % 2 == 0 {
            0 // both race to create the file
        } else {
            let (s, _) = Session::open_jsonl(&path, SessionOptions::default()).unwrap();
            turns(&s, 1, "setup");
            1
        };
        let start = dir.path().join("start");
        let release = dir.path().join("release");
        let spec = |who: &str| format!("{}|{per_writer}|{}|{}|{who}", path.display(), start.display(), release.display());
        let mut a = spawn(&spec("a"));
        let mut b = spawn(&spec("b"));
        std::fs::write(&start, b"go").unwrap();
        let mut ra = BufReader::new(a.stdout.take().unwrap());
        let mut rb = BufReader::new(b.stdout.take().unwrap());
        let (la, lb) = (next_line(&mut ra), next_line(&mut rb));
        // Exactly one writer got the lock; the other was refused, naming the winner.
        let (winner_line, loser_line, mut winner, mut loser) = match (la.starts_with("OPENED"), lb.starts_with("OPENED")) {
            (true, false) => (la, lb, ra, rb),
            (false, true) => (lb, la, rb, ra),
            _ => panic!("round {round}: exactly one writer must hold the lock: a said {la:?}, b said {lb:?}"),
        };
        assert!(loser_line.starts_with("LOCKED"), "round {round}: {loser_line}");
        let winner_pid = winner_line.trim_start_matches("OPENED ").to_string();
        assert!(loser_line.contains(&format!("process {winner_pid}")), "round {round}: the refusal names the holder: {loser_line}");
        assert_eq!(next_line(&mut winner), "DONE", "round {round}");
        // While the winner holds the lock, the file holds only its turns.
        assert_eq!(completed_turns(&path), before + per_writer as usize, "round {round}");
        std::fs::write(&release, b"go").unwrap();
        assert!(a.wait().unwrap().success() && b.wait().unwrap().success(), "round {round}: a writer failed");
        assert_eq!(next_line(&mut loser), "DONE", "round {round}: the second writer wrote after the first");
        // No completed turn lost, nothing interleaved: the log verifies.
        assert_eq!(completed_turns(&path), before + 2 * per_writer as usize, "round {round}");
        let contents = JsonlStore::open_read_only(&path).unwrap().load().unwrap();
        verify_records(&contents.records).unwrap_or_else(|e| panic!("round {round}: the log does not verify: {e}"));
    }
}
