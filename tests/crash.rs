//! Crash consistency: a writer process runs turns against a JSONL session and prints every
//! turn (and, with durability `every-event`, every event) it knows is durable; the parent
//! SIGKILLs it at a random point, reloads the file and checks that it loads, that everything
//! reported durable is there, and that `verify` passes. The next writer continues the same
//! file, so repaired logs are written on too.
//!
//! The writer is this test binary re-run with `LLMSESSION_CRASH_CHILD` set (the `crash_child`
//! test does the work then). `LLMSESSION_CRASH_TRIALS` sets the number of kills (default 50;
//! docs/reliability.md reports a 1000-trial run).
//!
//! The writer writes a checkpoint every 9 events and at the end of each compaction, so kills
//! land while a batch ending in a checkpoint is written and while the batches after one are:
//! after each kill the log opens from its last checkpoint to the same state a whole load gives,
//! and a copy of it cut inside its last checkpoint record (a write torn there) does too.

use llmsession::agent::ToolResultInput;
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::log::checkpoint::CheckpointPolicy;
use llmsession::log::load::{load_records, OpenCheck};
use llmsession::request::verify_records;
use llmsession::store::{Durability, JsonlStore, Store};
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, Session, SessionOptions, Usage};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "LLMSESSION_CRASH_CHILD";

/// The writer's checkpoints: every 9 events and at the end of each compaction.
const CHECKPOINTS: CheckpointPolicy = CheckpointPolicy { every_events: 9, every_bytes: 0, at_compaction: true };

fn durability_of(s: &str) -> Durability {
    Durability::parse(s).expect("a durability name")
}

/// The writer: runs turns until killed.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (path, dur) = spec.split_once('|').expect("path|durability");
    let durability = durability_of(dur);
    let every = durability == Durability::EveryEvent;
    let (session, _) =
        Session::open_jsonl(path, SessionOptions { durability, id: None, checkpoints: CHECKPOINTS, ..SessionOptions::default() })
            .expect("the writer opens the log");
    let mut opts = AgentOptions::new(CallConfig::new("openai", "m"));
    opts.system = Some("crash test".into());
    let mut agent = Agent::new(&session, opts).expect("an agent");
    let mut policy = CompactionPolicy::new(9000);
    policy.threshold = 0.05;
    policy.summary_max_tokens = 1024;
    policy.retained = Retained::Tokens(40);
    agent.set_policy(Some(policy)).unwrap();
    agent.set_summariser(Some(Arc::new(|_r: &SummaryRequest, _c: &CancelToken| -> llmsession::Result<SummaryOutput> {
        Ok(SummaryOutput { text: "summary".into(), ..Default::default() })
    })));
    let out = std::io::stdout();
    let report = |what: &str, n: u64| {
        let mut o = out.lock();
        writeln!(o, "DURABLE {what} {n}").unwrap();
        o.flush().unwrap();
    };
    let seq = |s: &Session| s.len() as u64 - 1;
    let c = CancelToken::new();
    for i in 0..100_000u64 {
        let turn = agent.start_turn(Message::user_text(format!("question {i} {}", "words ".repeat((i % 7) as usize)))).unwrap();
        if every {
            report("seq", seq(&session));
        }
        let steps = 1 + i % 3;
        for s in 0..steps {
            agent.next_request(&c).unwrap();
            if every {
                report("seq", seq(&session));
            }
            let mut content = vec![Block::text(format!("answer {i}.{s}"))];
            let calls = if s + 1 < steps { 1 + (i + s) % 3 } else { 0 };
            for k in 0..calls {
                content.push(Block::tool_call(&format!("c{i}_{s}_{k}"), "read", "{}"));
            }
            agent
                .record_response(
                    Message::new(Role::Assistant, content),
                    Some(Usage { input_tokens: 100 + i, output_tokens: 5, ..Default::default() }),
                )
                .unwrap();
            if every {
                report("seq", seq(&session));
            }
            for k in (0..calls).rev() {
                agent
                    .record_tool_result(ToolResultInput {
                        call_id: format!("c{i}_{s}_{k}"),
                        content: vec![Block::text("ok")],
                        is_error: false,
                    })
                    .unwrap();
                if every {
                    report("seq", seq(&session));
                }
            }
        }
        agent.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
        report("turn", turn);
    }
}

/// What a killed writer reported.
#[derive(Default)]
struct Reported {
    turns: Vec<u64>,
    max_seq: Option<u64>,
}

fn run_child(path: &std::path::Path, dur: &str, kill_after: Duration) -> Reported {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD_ENV, format!("{}|{dur}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the writer starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut r = Reported::default();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            if parts.next() != Some("DURABLE") {
                continue;
            }
            match (parts.next(), parts.next().and_then(|n| n.parse::<u64>().ok())) {
                (Some("turn"), Some(n)) => r.turns.push(n),
                (Some("seq"), Some(n)) => r.max_seq = Some(r.max_seq.map_or(n, |m| m.max(n))),
                _ => {}
            }
        }
        r
    });
    std::thread::sleep(kill_after);
    // SIGKILL (Child::kill sends SIGKILL on Unix).
    let _ = child.kill();
    let status = child.wait().unwrap();
    let r = reader.join().unwrap();
    assert!(!status.success() || r.turns.len() as u64 >= 100_000, "the writer ended by itself: {status:?}");
    r
}

/// What a user sees of a session's state after an open (not the chain head: two opens that
/// repair an open turn do it at different times).
fn state_of(s: &Session) -> String {
    let mut stats = s.stats();
    stats.chain_head = None;
    format!(
        "{} {} {:?} {:?} {:?} {:?}",
        s.history_json(),
        serde_json::to_string(&stats).unwrap(),
        s.request_header(),
        s.with_log(|l| l.state().open_turn.clone()),
        s.with_log(|l| l.state().pending.clone()),
        s.with_log(|l| l.state().last_usage.clone()),
    )
}

/// A bounded open (from the last checkpoint) of `path` and a whole load of a copy agree, the
/// log verifies, and the bounded open opened from a checkpoint (when the log has one).
fn bounded_equals_whole(original: &std::path::Path, dur: &str) -> Result<(), String> {
    // Two copies: the original is left for the checks that follow.
    let path = &original.with_extension("bounded");
    let copy = original.with_extension("whole");
    std::fs::copy(original, path).map_err(|e| e.to_string())?;
    std::fs::copy(original, &copy).map_err(|e| e.to_string())?;
    let opts = |check| SessionOptions { durability: durability_of(dur), checkpoints: CHECKPOINTS, check, ..SessionOptions::default() };
    // A complete checkpoint record (a torn last line does not count).
    let has_checkpoint = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())?
        .split_inclusive('\n')
        .any(|l| l.ends_with('\n') && l.starts_with("{\"type\":\"session/checkpoint\""));
    let (b, rb) = Session::open_jsonl(path, opts(OpenCheck::Bounded)).map_err(|e| format!("bounded open: {e}"))?;
    let (w, rw) = Session::open_jsonl(&copy, opts(OpenCheck::Full)).map_err(|e| format!("whole load: {e}"))?;
    if has_checkpoint && b.with_log(|l| l.base()) == 0 {
        return Err("the log has a checkpoint but the open read it whole".into());
    }
    if (rb.cut_records, rb.repaired_events) != (rw.cut_records, rw.repaired_events) {
        return Err(format!("the bounded open repaired {rb:?}, the whole load {rw:?}"));
    }
    if state_of(&b) != state_of(&w) {
        return Err(format!("the bounded open's state differs from the whole load's:\n{}\n{}", state_of(&b), state_of(&w)));
    }
    b.verify().map_err(|e| format!("verify after the bounded open: {e}"))?;
    drop((b, w));
    let _ = std::fs::remove_file(copy);
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// Checks the file after a kill; returns a description of a loss, if any.
fn check_file(path: &std::path::Path, dur: &str, rep: &Reported, stats: &mut [u64; 5]) -> Result<(), String> {
    // The raw file loads (torn tail cut, open turn repaired in memory).
    let mut store = JsonlStore::open(path).map_err(|e| e.to_string())?;
    let contents = store.load().map_err(|e| e.to_string())?;
    if contents.records.is_empty() {
        return if rep.turns.is_empty() && rep.max_seq.is_none() { Ok(()) } else { Err("the file is empty".into()) };
    }
    load_records(&contents).map_err(|e| format!("the killed log does not load: {e}"))?;
    drop(store);
    // Where the kill landed: in the batch that wrote a checkpoint (the last complete record is
    // one), or in the batches after one.
    let last_complete: Vec<&Vec<u8>> =
        contents.records.iter().take(contents.records.len() - usize::from(!contents.last_complete)).collect();
    match last_complete.iter().rposition(|r| r.starts_with(b"{\"type\":\"session/checkpoint\"")) {
        Some(i) if i + 1 == last_complete.len() => stats[3] += 1,
        Some(_) => stats[4] += 1,
        None => {}
    }
    // A write torn inside the last checkpoint record (a copy of the file cut there): it opens
    // from the checkpoint before, as a whole load does, and verifies.
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let needle = b"\n{\"type\":\"session/checkpoint\"";
    if let Some(at) = text.windows(needle.len()).rposition(|w| w == needle) {
        let torn = path.with_extension("torn");
        let cut = at + 1 + (text[at + 1..].iter().position(|&b| b == b'\n').unwrap_or(text.len() - at - 1)) / 2;
        std::fs::write(&torn, &text[..cut]).map_err(|e| e.to_string())?;
        bounded_equals_whole(&torn, dur).map_err(|e| format!("a write torn inside the last checkpoint: {e}"))?;
        let _ = std::fs::remove_file(&torn);
    }
    // Open from the last checkpoint and whole (on a copy): the same state.
    bounded_equals_whole(path, dur)?;
    // Open as a host would (this writes the repair), then verify the stored bytes.
    let (session, report) = Session::open_jsonl(
        path,
        SessionOptions { durability: durability_of(dur), id: None, checkpoints: CHECKPOINTS, ..SessionOptions::default() },
    )
    .map_err(|e| format!("open: {e}"))?;
    // Kills that left a torn record, kills inside a turn (repaired), kills at rest.
    if report.cut_records > 0 {
        stats[0] += 1;
    }
    if report.repaired_events > 0 {
        stats[1] += 1;
    } else {
        stats[2] += 1;
    }
    let events = session.len() as u64;
    let completed: Vec<u64> = session
        .records()
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v["type"] == "turn/end" && v["data"]["reason"] == "completed").then(|| v["data"]["turn"].as_u64()).flatten()
        })
        .collect();
    drop(session);
    for t in &rep.turns {
        if !completed.contains(t) {
            return Err(format!("turn {t} was reported durable but its completed turn/end is missing"));
        }
    }
    if let Some(s) = rep.max_seq {
        if events <= s {
            return Err(format!("event {s} was reported durable but the log has {events} events"));
        }
    }
    let bytes = std::fs::read(path).unwrap();
    let records: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').filter(|r| !r.is_empty()).map(<[u8]>::to_vec).collect();
    verify_records(&records).map_err(|e| format!("verify failed after reload: {e}"))?;
    Ok(())
}

/// Runs `trials` kills over files reused for 5 writers each; returns (trials, losses, turns seen).
fn crash_trials(trials: usize) -> (usize, Vec<String>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ trials as u64;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut losses = Vec::new();
    let mut turns = 0u64;
    let mut stats = [0u64; 5];
    let mut path = dir.path().join("s0.jsonl");
    for i in 0..trials {
        if i % 5 == 0 {
            path = dir.path().join(format!("s{i}.jsonl"));
        }
        let dur = if (i / 5) % 2 == 0 { "every-event" } else { "turn-end" };
        let wait = Duration::from_millis(5 + rnd(150));
        let rep = run_child(&path, dur, wait);
        turns += rep.turns.len() as u64;
        if let Err(e) = check_file(&path, dur, &rep, &mut stats) {
            let keep = dir.path().join(format!("loss{i}.jsonl"));
            let _ = std::fs::copy(&path, &keep);
            losses.push(format!("trial {i} ({dur}, killed after {wait:?}): {e}"));
            path = dir.path().join(format!("fresh{i}.jsonl"));
        }
    }
    if !losses.is_empty() {
        // Keep the evidence.
        let keep = dir.keep();
        eprintln!("crash trials: damaged logs kept in {}", keep.display());
    }
    eprintln!(
        "crash trials: {} torn tails cut, {} kills inside a turn (repaired), {} at rest; {} in the batch that wrote a checkpoint, {} in the appends after one",
        stats[0], stats[1], stats[2], stats[3], stats[4]
    );
    (trials, losses, turns)
}

#[test]
fn sigkill_writers_lose_nothing_reported_durable() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let trials = std::env::var("LLMSESSION_CRASH_TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    let (n, losses, turns) = crash_trials(trials);
    eprintln!("crash trials: {n} kills, {} losses, {turns} turns reported durable", losses.len());
    assert!(losses.is_empty(), "losses:\n{}", losses.join("\n"));
}
