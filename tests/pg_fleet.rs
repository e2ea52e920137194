//! Durability and failover trials on real servers (`make test-pg`: scripts/pg/tests.sh runs this
//! file under scripts/pg/server.sh, which sets `LLMSESSION_PG_URL`, `LLMSESSION_PG_CTL` and
//! `LLMSESSION_PG_DIR`, and scripts/pg/pair.sh, which sets `LLMSESSION_PAIR_URL`,
//! `LLMSESSION_PAIR_CTL` and `LLMSESSION_PAIR_DIR`; a test whose variables are missing is
//! skipped with a notice).
//!
//! - `durability_across_server_crashes`: writers with each durability policy append while the
//!   whole server is SIGKILLed (every process of the cluster, `server.sh kill9`), `LLMSESSION_PG_CRASHES`
//!   times (default 10). After the restart, each session must hold a prefix of what its writer
//!   was told (the chain values agree), and: `every-event` loses nothing acknowledged, `turn-end`
//!   loses no acknowledged completed turn, `never` at least loads. The losses are printed.
//! - `failover_loses_nothing_acknowledged`: on a primary with a synchronous standby, writers
//!   (`every-event`, `turn-end`) append while the primary is SIGKILLed and the standby promoted,
//!   `LLMSESSION_PG_FAILOVERS` times (default 5). Each writer's handle fails, the writer reopens
//!   the session with the same multi-host URL (`target_session_attrs=read-write`), finds on the
//!   new primary everything it was told (every event for `every-event`, every completed turn for
//!   `turn-end`), and goes on. The reopen must come within the lease time of the promotion.
//!
//! The writers are this test binary run again with `LLMSESSION_FLEET_CHILD` set (the
//! `fleet_child` test does their work then). A writer prints one line per acknowledged call:
//! `ACK seq chain` (the last event's seq and the chain value after it), `TURN n seq chain` after
//! a completed turn, `ERR kind outcomeUnknown message` when a call fails, and in failover mode
//! `REOPENED ...` with what it found.

use llmsession::log::chain::stored_link;
use llmsession::store::url::UrlOptions;
use llmsession::{Durability, ErrorKind, Session};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support {
    pub mod pg;
}
use support::pg::{agent, reader, unique_id, writer};

const CHILD_ENV: &str = "LLMSESSION_FLEET_CHILD";

/// One trial program at a time: both kill servers, and the machine has few cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The values of `names`, or `None` after a loud notice that `test` is skipped.
fn needs(test: &str, names: &[&str]) -> Option<Vec<String>> {
    if env(CHILD_ENV).is_some() {
        return None;
    }
    let got: Vec<Option<String>> = names.iter().map(|n| env(n)).collect();
    if got.iter().all(Option::is_some) {
        return Some(got.into_iter().map(Option::unwrap).collect());
    }
    let missing: Vec<&str> = names.iter().zip(&got).filter(|(_, v)| v.is_none()).map(|(n, _)| *n).collect();
    eprintln!(
        "\n*** SKIPPED {test}: {} not set; `make test-pg` starts the servers (scripts/pg/server.sh, scripts/pg/pair.sh) and runs it ***\n",
        missing.join(", ")
    );
    None
}

fn count(name: &str, default: usize) -> usize {
    env(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `bash CTL WHAT DIR`; returns how long it took.
fn ctl(script: &str, what: &str, dir: &str) -> Duration {
    let t = Instant::now();
    let out = Command::new("bash").args([script, what, dir]).stdin(Stdio::null()).output().expect("bash runs");
    assert!(out.status.success(), "{script} {what}: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed()
}

fn rnd() -> impl FnMut(u64) -> u64 {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ llmsession::session::now_ms();
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

// ---------------------------------------------------------------------------------------------
// The writers.

/// What a writer was told: the chain value after each acknowledged event (index = seq), and
/// its completed turns with the seq of their `turn/end`.
#[derive(Default)]
struct Acked {
    chains: Vec<String>,
    turns: Vec<(u64, u64)>,
}

/// A writer's parsed output.
#[derive(Default)]
struct Report {
    acked: Acked,
    opened: bool,
    errors: Vec<String>,
    reopens: Vec<Reopen>,
    done: Option<(u64, String)>,
    other: Vec<String>,
}

#[derive(Clone, Debug)]
struct Reopen {
    at_ms: u64,
    took_ms: u64,
    attempts: u64,
    locked: u64,
    events: u64,
    lost: u64,
    replaced: u64,
    lost_turns: u64,
}

fn field(parts: &[&str], key: &str) -> u64 {
    parts.iter().find_map(|p| p.strip_prefix(key).and_then(|v| v.strip_prefix('='))).and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Report {
    fn parse(lines: &[String]) -> Report {
        let mut r = Report::default();
        for line in lines {
            let p: Vec<&str> = line.split(' ').collect();
            match p.as_slice() {
                ["OPENED", ..] => r.opened = true,
                ["ACK", seq, chain] => {
                    let seq: usize = seq.parse().unwrap();
                    r.acked.chains.truncate(seq);
                    r.acked.chains.resize(seq + 1, String::new());
                    r.acked.chains[seq] = chain.to_string();
                }
                ["TURN", n, seq, _] => r.acked.turns.push((n.parse().unwrap(), seq.parse().unwrap())),
                ["ERR", ..] => r.errors.push(line["ERR ".len()..].to_string()),
                ["REOPENED", rest @ ..] => {
                    r.reopens.push(Reopen {
                        at_ms: field(rest, "at"),
                        took_ms: field(rest, "ms"),
                        attempts: field(rest, "attempts"),
                        locked: field(rest, "locked"),
                        events: field(rest, "events"),
                        lost: field(rest, "lost"),
                        replaced: field(rest, "replaced"),
                        lost_turns: field(rest, "lost_turns"),
                    });
                    // From here on the reopened log is what the writer goes on from.
                    let events = field(rest, "events") as usize;
                    r.acked.chains.truncate(events);
                    r.acked.turns.retain(|(_, s)| (*s as usize) < events);
                }
                ["DONE", events, chain] => r.done = Some((events.parse().unwrap(), chain.to_string())),
                _ => r.other.push(line.clone()),
            }
        }
        r
    }
}

/// Compares a reloaded log with what its writer was told: (acknowledged events missing, events
/// whose chain value differs, acknowledged completed turns missing); `repaired`: how many
/// events the open appended (the load report's `repaired_events`). Gaps in `chains` (seqs
/// a batch wrote before its last event) count with the batch.
fn compare(s: &Session, acked: &Acked, repaired: usize) -> (u64, u64, u64) {
    let records = s.records().unwrap();
    // What the database held: the events a writing open appended to close an open turn are not.
    let stored = records.len() - 1 - repaired;
    let (mut lost, mut replaced) = (0, 0);
    for (seq, chain) in acked.chains.iter().enumerate() {
        if seq >= stored {
            lost += 1;
        } else if !chain.is_empty() && stored_link(&records[seq + 1]) != Some(chain.as_str()) {
            replaced += 1;
        }
    }
    let lost_turns = acked.turns.iter().filter(|(_, seq)| *seq as usize >= stored).count() as u64;
    (lost, replaced, lost_turns)
}

fn say(line: String) {
    let out = std::io::stdout();
    let mut o = out.lock();
    writeln!(o, "{line}").unwrap();
    o.flush().unwrap();
}

fn err_line(e: &llmsession::Error) -> String {
    let unknown = e.detail().get("outcomeUnknown").and_then(|v| v.as_bool()).unwrap_or(false);
    format!("ERR {} outcomeUnknown={unknown} {}", e.kind().name(), e.message().replace('\n', " "))
}

/// Runs turns on `s` until a call fails (returns its error) or `stop` is set (returns `None`),
/// printing what each call acknowledged and recording it in `acked`.
fn write_turns(s: &Session, acked: &mut Acked, stop: &AtomicBool, tag: &str) -> Option<llmsession::Error> {
    let mut a = agent(s);
    // Tool call ids are unique in a session: this agent's are tagged with where it started.
    let at = s.len();
    let c = llmsession::CancelToken::new();
    let ack = |acked: &mut Acked| {
        let head = s.chain_head().expect("a version 2 log");
        let seq = head.events - 1;
        acked.chains.resize(head.events as usize, String::new());
        acked.chains[seq as usize] = head.chain.clone();
        say(format!("ACK {seq} {}", head.chain));
        (seq, head.chain)
    };
    for i in 0u64.. {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let t = match a.start_turn(llmsession::Message::user_text(format!("{tag} question {i}"))) {
            Ok(t) => t,
            Err(e) => return Some(e),
        };
        ack(acked);
        let steps = 1 + i % 3;
        for st in 0..steps {
            if let Err(e) = a.next_request(&c) {
                return Some(e);
            }
            let last = st + 1 == steps;
            let mut content = vec![llmsession::Block::text(format!("answer {i}.{st}"))];
            if !last {
                content.push(llmsession::Block::tool_call(&format!("c{at}_{i}_{st}"), "read", "{}"));
            }
            if let Err(e) = a.record_response(llmsession::Message::new(llmsession::Role::Assistant, content), None) {
                return Some(e);
            }
            ack(acked);
            if !last {
                let r = a.record_tool_result(llmsession::agent::ToolResultInput {
                    call_id: format!("c{at}_{i}_{st}"),
                    content: vec![llmsession::Block::text("ok")],
                    is_error: false,
                });
                if let Err(e) = r {
                    return Some(e);
                }
                ack(acked);
            }
        }
        if let Err(e) = a.end_turn(llmsession::log::TurnEndReason::Completed) {
            return Some(e);
        }
        let (seq, chain) = ack(acked);
        acked.turns.push((t, seq));
        say(format!("TURN {t} {seq} {chain}"));
    }
    None
}

/// The writers' work (see the module docs): `crash|URL|ID|DURABILITY` writes until a call fails
/// and exits; `failover|URL|ID|DURABILITY` reopens after each failure and goes on until its
/// standard input closes.
#[test]
fn fleet_child() {
    let Some(spec) = env(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.splitn(4, '|').collect();
    let (mode, url, id) = (parts[0], parts[1], parts[2]);
    let durability = Durability::parse(parts[3]).unwrap();
    let opts = UrlOptions { durability, ..writer(id) };
    let stop = Arc::new(AtomicBool::new(false));
    let (s, _) = Session::open_url(url, opts.clone()).unwrap_or_else(|e| panic!("the writer cannot open: {}", e.message()));
    say("OPENED".into());
    let mut acked = Acked::default();
    match mode {
        "crash" => {
            if let Some(e) = write_turns(&s, &mut acked, &stop, "crash") {
                say(err_line(&e));
            }
        }
        "failover" => {
            {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut sink = String::new();
                    let _ = std::io::stdin().read_line(&mut sink);
                    stop.store(true, Ordering::SeqCst);
                });
            }
            let mut s = s;
            loop {
                let Some(e) = write_turns(&s, &mut acked, &stop, "failover") else { break };
                say(err_line(&e));
                drop(s);
                // Reopen with the same URL until the new primary takes the session.
                let started = Instant::now();
                let (mut attempts, mut locked, mut last) = (0u64, 0u64, String::new());
                let (reopened, repaired) = loop {
                    attempts += 1;
                    match Session::open_url(url, UrlOptions { create: false, ..opts.clone() }) {
                        Ok((s, report)) => break (s, report.repaired_events),
                        Err(e) => {
                            if e.kind() == ErrorKind::Locked {
                                locked += 1;
                            }
                            last = format!("[{}] {}", e.kind().name(), e.message());
                        }
                    }
                    if started.elapsed() > Duration::from_secs(120) {
                        say(format!("GAVEUP after {attempts} attempts: {last}"));
                        std::process::exit(3);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                let took = started.elapsed().as_millis();
                let (lost, replaced, lost_turns) = compare(&reopened, &acked, repaired);
                let events = reopened.len();
                say(format!(
                    "REOPENED at={} ms={took} attempts={attempts} locked={locked} events={events} repaired={repaired} lost={lost} replaced={replaced} lost_turns={lost_turns} last_error={}",
                    llmsession::session::now_ms(),
                    last.replace(' ', "_")
                ));
                // What the reopened log holds is what this writer goes on from.
                let records = reopened.records().unwrap();
                acked.chains = records[1..].iter().map(|r| stored_link(r).unwrap_or("").to_string()).collect();
                acked.turns.retain(|(_, seq)| (*seq as usize) < events);
                s = reopened;
            }
            let head = s.chain_head().unwrap();
            say(format!("DONE {} {}", head.events, head.chain));
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A writer process and the lines it has printed so far.
struct Writer {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    id: String,
    durability: &'static str,
}

impl Writer {
    fn spawn(mode: &str, url: &str, durability: &'static str) -> Writer {
        let id = unique_id(&format!("fleet-{mode}-{durability}"));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["fleet_child", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(CHILD_ENV, format!("{mode}|{url}|{id}|{durability}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the writer starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Writer { child, lines, id, durability }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn count(&self, prefix: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).count()
    }

    /// Waits until `ok` holds for the lines, or panics with what the writer said.
    fn wait_for(&mut self, what: &str, timeout: Duration, ok: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if ok(&self.lines.lock().unwrap()) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                if ok(&self.lines.lock().unwrap()) {
                    return;
                }
                panic!("the {} writer exited ({status}) before {what}: {}", self.durability, self.tail());
            }
            assert!(Instant::now() < deadline, "the {} writer: no {what} within {timeout:?}: {}", self.durability, self.tail());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to end (kills it after `timeout`); returns its lines.
    fn finish(mut self, timeout: Duration) -> (Vec<String>, String) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + timeout;
        let mut status = None;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let ok = status.is_some_and(|s| s.success());
        let lines = self.lines();
        if !ok {
            panic!("the {} writer failed ({status:?}): {}\nstderr: {err}", self.durability, lines.join("\n"));
        }
        (lines, err)
    }

    fn tail(&self) -> String {
        let l = self.lines();
        l[l.len().saturating_sub(5)..].join(" | ")
    }
}

// ---------------------------------------------------------------------------------------------
// The server crashes.

#[derive(Default)]
struct Tally {
    trials: u64,
    acked: u64,
    lost: u64,
    lossy_trials: u64,
    max_lost: u64,
    turns: u64,
    lost_turns: u64,
    beyond: u64,
    unknown: u64,
}

#[test]
fn durability_across_server_crashes() {
    let Some(v) = needs("durability_across_server_crashes", &["LLMSESSION_PG_URL", "LLMSESSION_PG_CTL", "LLMSESSION_PG_DIR"]) else {
        return;
    };
    let (mut url, ctl_script, dir) = (v[0].clone(), v[1].clone(), v[2].clone());
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let trials = count("LLMSESSION_PG_CRASHES", 10);
    let policies = ["every-event", "turn-end", "never"];
    let mut tally: Vec<Tally> = policies.iter().map(|_| Tally::default()).collect();
    let mut rnd = rnd();
    let started = Instant::now();
    let mut restart = Duration::ZERO;
    for trial in 0..trials {
        let mut writers: Vec<Writer> = policies.iter().map(|p| Writer::spawn("crash", &url, p)).collect();
        // Each writer is well under way, then the whole server dies at once.
        for w in &mut writers {
            w.wait_for("20 acknowledged calls", Duration::from_secs(60), |l| l.iter().filter(|l| l.starts_with("ACK")).count() >= 20);
        }
        std::thread::sleep(Duration::from_millis(rnd(400)));
        ctl(&ctl_script, "kill9", &dir);
        let outs: Vec<(String, &'static str, Vec<String>)> = writers
            .into_iter()
            .map(|w| {
                let (id, d) = (w.id.clone(), w.durability);
                (id, d, w.finish(Duration::from_secs(60)).0)
            })
            .collect();
        restart += ctl(&ctl_script, "start", &dir);
        url = std::fs::read_to_string(format!("{dir}/url")).unwrap().trim().to_string();
        for (i, (id, durability, lines)) in outs.iter().enumerate() {
            let r = Report::parse(lines);
            assert!(r.opened, "trial {trial} ({durability}): the writer never opened: {lines:?}");
            let err =
                r.errors.first().unwrap_or_else(|| panic!("trial {trial} ({durability}): no call failed when the server died: {lines:?}"));
            assert!(err.starts_with("storage "), "trial {trial} ({durability}): the failing call: {err}");
            let (s, _) = Session::open_url(&url, reader(id))
                .unwrap_or_else(|e| panic!("trial {trial} ({durability}): the session does not load: {}", e.message()));
            let (lost, replaced, lost_turns) = compare(&s, &r.acked, 0);
            // Whatever survived is a prefix of what the writer was told (one more batch may be
            // there: the one whose call failed with its outcome unknown).
            assert_eq!(replaced, 0, "trial {trial} ({durability}): the stored log is not a prefix of what was acknowledged");
            let t = &mut tally[i];
            t.trials += 1;
            t.acked += r.acked.chains.len() as u64;
            t.lost += lost;
            t.lossy_trials += u64::from(lost > 0);
            t.max_lost = t.max_lost.max(lost);
            t.turns += r.acked.turns.len() as u64;
            t.lost_turns += lost_turns;
            t.beyond += (s.len() as u64).saturating_sub(r.acked.chains.len() as u64);
            t.unknown += u64::from(err.contains("outcomeUnknown=true"));
            match *durability {
                "every-event" => assert_eq!(lost, 0, "trial {trial}: every-event lost {lost} acknowledged events"),
                "turn-end" => assert_eq!(lost_turns, 0, "trial {trial}: turn-end lost {lost_turns} acknowledged completed turns"),
                _ => {}
            }
            drop(s);
            // The next writer repairs the open turn, and the session verifies.
            let (s, _) =
                Session::open_url(&url, writer(id)).unwrap_or_else(|e| panic!("trial {trial} ({durability}): reopen: {}", e.message()));
            s.verify().unwrap_or_else(|e| panic!("trial {trial} ({durability}): verify: {}", e.message()));
        }
    }
    eprintln!(
        "\ndurability across server crashes: {trials} SIGKILLs of every server process in {:.1} s (the restarts, with crash recovery, {:.1} s)",
        started.elapsed().as_secs_f64(),
        restart.as_secs_f64()
    );
    for (p, t) in policies.iter().zip(&tally) {
        eprintln!(
            "  {p:<11}: {} events acknowledged, {} lost (in {} of {} crashes, at most {} at once); {} completed turns acknowledged, {} lost; {} events beyond the acknowledged survived; {} failing calls said outcomeUnknown",
            t.acked, t.lost, t.lossy_trials, t.trials, t.max_lost, t.turns, t.lost_turns, t.beyond, t.unknown
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Failover to a synchronous standby.

#[test]
fn failover_loses_nothing_acknowledged() {
    let Some(v) = needs("failover_loses_nothing_acknowledged", &["LLMSESSION_PAIR_URL", "LLMSESSION_PAIR_CTL", "LLMSESSION_PAIR_DIR"])
    else {
        return;
    };
    let (url, ctl_script, dir) = (v[0].clone(), v[1].clone(), v[2].clone());
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The client takes the host list as libpq writes it.
    let cfg: postgres::Config = url.parse().expect("the pair's URL parses");
    assert_eq!(cfg.get_hosts().len(), 2, "{cfg:?}");
    assert_eq!(cfg.get_ports().len(), 2, "{cfg:?}");
    assert_eq!(cfg.get_target_session_attrs(), postgres::config::TargetSessionAttrs::ReadWrite);
    let trials = count("LLMSESSION_PG_FAILOVERS", 5);
    // The lease a dead writer leaves behind: the new store's defaults (lease_time 15 s,
    // lease_timeout 5 s).
    let lease = Duration::from_secs(20);
    let policies: [&'static str; 2] = ["every-event", "turn-end"];
    let mut writers: Vec<Writer> = policies.iter().map(|p| Writer::spawn("failover", &url, p)).collect();
    for w in &mut writers {
        w.wait_for("10 acknowledged calls", Duration::from_secs(60), |l| l.iter().filter(|l| l.starts_with("ACK")).count() >= 10);
    }
    let mut rnd = rnd();
    let started = Instant::now();
    let (mut promote_t, mut reset_t) = (Duration::ZERO, Duration::ZERO);
    let mut takeovers: Vec<Vec<u64>> = vec![Vec::new(); policies.len()];
    let mut passed_through = vec![0u64; policies.len()];
    for trial in 0..trials {
        let reopened: Vec<usize> = writers.iter().map(|w| w.count("REOPENED")).collect();
        std::thread::sleep(Duration::from_millis(100 + rnd(400)));
        ctl(&ctl_script, "crash-primary", &dir);
        promote_t += ctl(&ctl_script, "promote", &dir);
        let promoted_at = llmsession::session::now_ms();
        // The promoted standby has no standby of its own: its synchronous commits wait until the
        // old primary's node is a standby again.
        let reset = ctl(&ctl_script, "reset", &dir);
        reset_t += reset;
        // Every acknowledgement from here on comes from the new primary. A writer with no call in
        // flight when the primary died goes on without a failure (its pooled connections are
        // made again, to the new primary, and its lease is the same row there); one whose call
        // failed reopens.
        let acks: Vec<usize> = writers.iter().map(|w| w.count("ACK")).collect();
        for (i, w) in writers.iter_mut().enumerate() {
            let (n, a) = (reopened[i], acks[i]);
            w.wait_for(&format!("acknowledged calls on the new primary after failover {trial}"), Duration::from_secs(150), |l| {
                l.iter().filter(|l| l.starts_with("ACK")).count() > a + 5
            });
            let r = Report::parse(&w.lines());
            if r.reopens.len() == n {
                passed_through[i] += 1;
                continue;
            }
            let last = r.reopens.last().unwrap().clone();
            takeovers[i].push(last.at_ms.saturating_sub(promoted_at));
            assert!(
                Duration::from_millis(last.at_ms.saturating_sub(promoted_at)) <= lease + reset + Duration::from_secs(5),
                "failover {trial} ({}): the reopen came {} ms after the promotion: {last:?}",
                w.durability,
                last.at_ms.saturating_sub(promoted_at)
            );
        }
    }
    let elapsed = started.elapsed();
    let mut results = Vec::new();
    for w in writers {
        let (id, durability) = (w.id.clone(), w.durability);
        let (lines, _) = w.finish(Duration::from_secs(60));
        let r = Report::parse(&lines);
        let (done_events, done_chain) = r.done.clone().unwrap_or_else(|| panic!("{durability}: the writer did not finish: {lines:?}"));
        // The session as the last primary holds it is what the writer last had.
        let (s, _) = Session::open_url(&url, reader(&id)).unwrap();
        assert_eq!((s.len() as u64, s.chain_head().unwrap().chain), (done_events, done_chain), "{durability}");
        s.verify().unwrap_or_else(|e| panic!("{durability}: verify: {}", e.message()));
        results.push((durability, r));
    }
    eprintln!(
        "\nfailover: {trials} SIGKILLed primaries, each standby promoted and a new standby made, in {:.1} s (promote {:.1} s, reset {:.1} s in all)",
        elapsed.as_secs_f64(),
        promote_t.as_secs_f64(),
        reset_t.as_secs_f64()
    );
    let mut failures = Vec::new();
    for (i, (durability, r)) in results.iter().enumerate() {
        let lost: u64 = r.reopens.iter().map(|x| x.lost).sum();
        let replaced: u64 = r.reopens.iter().map(|x| x.replaced).sum();
        let lost_turns: u64 = r.reopens.iter().map(|x| x.lost_turns).sum();
        let locked: u64 = r.reopens.iter().map(|x| x.locked).sum();
        let attempts: u64 = r.reopens.iter().map(|x| x.attempts).sum();
        let unknown = r.errors.iter().filter(|e| e.contains("outcomeUnknown=true")).count();
        let kinds: Vec<&str> = r.errors.iter().map(|e| e.split(' ').next().unwrap_or("")).collect();
        let took: Vec<u64> = r.reopens.iter().map(|x| x.took_ms).collect();
        let events: Vec<u64> = r.reopens.iter().map(|x| x.events).collect();
        eprintln!(
            "  {durability:<11}: {} failovers passed through without a failure; {} failures ({} said outcomeUnknown; kinds {kinds:?}), {} reopens ({attempts} attempts, {locked} refused LOCKED); acknowledged events lost {lost}, replaced {replaced}; completed turns lost {lost_turns}; events at each reopen {events:?}; reopen ms after the failure {took:?}, after the promotion {:?}",
            passed_through[i],
            r.errors.len(),
            unknown,
            r.reopens.len(),
            takeovers[i]
        );
        // A storage error, or (when the failover lost asynchronous commits this handle had made,
        // which turn-end and never allow) a conflict that says so: the handle is ahead of the
        // new primary and must reopen.
        let allowed = |e: &String| {
            e.starts_with("storage ") || (*durability != "every-event" && e.starts_with("conflict ") && e.contains("were lost"))
        };
        if !r.errors.iter().all(allowed) {
            failures.push(format!("{durability}: a failing call was not a storage error: {:?}", r.errors));
        }
        if replaced > 0 {
            failures.push(format!("{durability}: {replaced} acknowledged events were replaced by others"));
        }
        match *durability {
            "every-event" if lost > 0 => failures.push(format!("every-event: {lost} acknowledged events lost")),
            "turn-end" if lost_turns > 0 => failures.push(format!("turn-end: {lost_turns} acknowledged completed turns lost")),
            _ => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
