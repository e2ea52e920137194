//! Concurrency: 8 threads each drive agents on their own session for 1000 turns (set
//! `LLMSESSION_CONCURRENCY_TURNS` to change). Summariser and pre-step listener calls are
//! handed to service threads over channels and answered there, while the caller waits
//! honouring its cancel token; a chaos thread cancels requests and now and then disposes an
//! agent from outside. A watchdog fails the run if it does not finish within a generous
//! limit (a deadlock). Every log must verify at the end.

use llmsession::agent::ToolResultInput;
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::log::TurnEndReason;
use llmsession::prefix::{ListenerContext, PreStepInfo};
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Error, ErrorKind, Message, Role, Session, Usage};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support {
    pub mod host_script;
}

/// Work handed to a service thread: it answers on `reply` (a summary text or an error).
struct Job {
    summary: bool,
    reply: Sender<llmsession::Result<String>>,
}

/// Sends a job and waits for its answer or for `cancel`, whichever comes first.
fn ask(jobs: &Mutex<Sender<Job>>, summary: bool, cancel: &CancelToken) -> llmsession::Result<String> {
    let (tx, rx) = channel();
    let on_cancel = tx.clone();
    // Trips the wait when the token is cancelled (also if it already was).
    let _guard = cancel.on_cancel(move || {
        let _ = on_cancel.send(Err(Error::new(ErrorKind::Cancelled, "cancelled while waiting for the service")));
    });
    if cancel.is_cancelled() {
        return Err(Error::new(ErrorKind::Cancelled, "cancelled before asking"));
    }
    jobs.lock().unwrap().send(Job { summary, reply: tx }).map_err(|_| Error::new(ErrorKind::Internal, "service gone"))?;
    rx.recv().map_err(|_| Error::new(ErrorKind::Internal, "service dropped the reply"))?
}

fn service(jobs: Arc<Mutex<Receiver<Job>>>, stop: Arc<AtomicBool>) {
    let mut n: u64 = 0;
    loop {
        let job = match jobs.lock().unwrap().recv_timeout(Duration::from_millis(50)) {
            Ok(j) => j,
            Err(_) if stop.load(Ordering::SeqCst) => return,
            Err(_) => continue,
        };
        n += 1;
        if n % 3 == 0 {
            std::thread::yield_now();
        }
        let answer = if job.summary && n % 17 == 0 {
            Err(Error::new(ErrorKind::Summariser, "summariser unavailable"))
        } else {
            Ok(format!("summary {n}"))
        };
        let _ = job.reply.send(answer);
    }
}

/// What the chaos thread can reach of a worker.
#[derive(Default)]
struct Slot {
    cancel: Mutex<Option<CancelToken>>,
    dispose: Mutex<Option<llmsession::agent::DisposeHandle>>,
}

fn new_agent(session: &Session, jobs: &Arc<Mutex<Sender<Job>>>, slot: &Slot) -> Agent {
    let mut opts = AgentOptions::new(CallConfig::new("openai", "m"));
    opts.system = Some("concurrency test".into());
    let mut agent = Agent::new(session, opts).expect("the previous instance was released");
    let mut policy = CompactionPolicy::new(9000);
    policy.threshold = 0.05;
    policy.summary_max_tokens = 1024;
    policy.retained = Retained::Tokens(40);
    agent.set_policy(Some(policy)).unwrap();
    let j = jobs.clone();
    agent.set_summariser(Some(Arc::new(move |_r: &SummaryRequest, cancel: &CancelToken| -> llmsession::Result<SummaryOutput> {
        let text = ask(&j, true, cancel)?;
        Ok(SummaryOutput { text, ..Default::default() })
    })));
    let j = jobs.clone();
    agent
        .add_pre_step_listener(Arc::new(move |ctx: &ListenerContext<'_>, _i: &PreStepInfo<'_>| -> llmsession::Result<()> {
            ask(&j, false, ctx.cancel).map(|_| ())
        }))
        .unwrap();
    *slot.dispose.lock().unwrap() = Some(agent.dispose_handle());
    agent
}

/// Whether an error is one that cancellation or disposal from another thread explains.
fn expected(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Disposed | ErrorKind::OutOfOrder)
}

fn worker(id: usize, turns: u64, jobs: Arc<Mutex<Sender<Job>>>, slot: Arc<Slot>, progress: Arc<AtomicU64>) -> Result<Session, String> {
    let session = Session::in_memory();
    let mut agent = new_agent(&session, &jobs, &slot);
    let fail = |what: &str, e: Error| format!("worker {id}: {what}: [{}] {}", e.kind().name(), e.message());
    for i in 0..turns {
        progress.fetch_add(1, Ordering::Relaxed);
        if agent.start_turn(Message::user_text(format!("question {i} {}", "words ".repeat((i % 9) as usize)))).is_err() {
            // Disposed from outside: the instance is gone; take a new one.
            let _ = agent.dispose();
            agent = new_agent(&session, &jobs, &slot);
            continue;
        }
        let cancel = CancelToken::new();
        *slot.cancel.lock().unwrap() = Some(cancel.clone());
        let steps = 1 + i % 3;
        let mut ok = true;
        for s in 0..steps {
            if let Err(e) = agent.next_request(&cancel) {
                if !expected(&e) {
                    return Err(fail("next_request", e));
                }
                ok = false;
                break;
            }
            let mut content = vec![Block::text(format!("answer {i}.{s}"))];
            let calls = if s + 1 < steps { 2 } else { 0 };
            for k in 0..calls {
                content.push(Block::tool_call(&format!("c{i}_{s}_{k}"), "read", "{}"));
            }
            let usage = Usage { input_tokens: 50 + i % 500, output_tokens: 5, ..Default::default() };
            if let Err(e) = agent.record_response(Message::new(Role::Assistant, content), Some(usage)) {
                if !expected(&e) {
                    return Err(fail("record_response", e));
                }
                ok = false;
                break;
            }
            for k in (0..calls).rev() {
                let r = ToolResultInput { call_id: format!("c{i}_{s}_{k}"), content: vec![Block::text("ok")], is_error: false };
                if let Err(e) = agent.record_tool_result(r) {
                    if !expected(&e) {
                        return Err(fail("record_tool_result", e));
                    }
                    ok = false;
                    break;
                }
            }
            if !ok {
                break;
            }
        }
        let reason = if ok { TurnEndReason::Completed } else { TurnEndReason::Aborted };
        match agent.end_turn(reason) {
            Ok(()) => {}
            Err(e) if expected(&e) => {
                if e.kind() == ErrorKind::Disposed {
                    let _ = agent.dispose();
                    agent = new_agent(&session, &jobs, &slot);
                }
            }
            Err(e) => return Err(fail("end_turn", e)),
        }
        if session.with_log(|l| l.state().open_turn.is_some()) && agent.end_turn(TurnEndReason::Aborted).is_err() {
            let _ = agent.dispose();
            agent = new_agent(&session, &jobs, &slot);
        }
    }
    agent.dispose().or_else(|e| if e.kind() == ErrorKind::Disposed { Ok(()) } else { Err(fail("dispose", e)) })?;
    Ok(session)
}

#[test]
fn eight_threads_with_cancels_and_replies_from_other_threads() {
    let turns: u64 = std::env::var("LLMSESSION_CONCURRENCY_TURNS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    const THREADS: usize = 8;
    // Watchdog: a deadlock shows up as no end within a generous limit.
    let (done_tx, done_rx) = channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(900)).is_err() {
            eprintln!("watchdog: the concurrency test did not finish within 900 s (deadlock?)");
            std::process::exit(101);
        }
    });
    let (job_tx, job_rx) = channel::<Job>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let jobs = Arc::new(Mutex::new(job_tx));
    let stop = Arc::new(AtomicBool::new(false));
    let services: Vec<_> = (0..2)
        .map(|_| {
            let (r, s) = (job_rx.clone(), stop.clone());
            std::thread::spawn(move || service(r, s))
        })
        .collect();
    let slots: Vec<Arc<Slot>> = (0..THREADS).map(|_| Arc::new(Slot::default())).collect();
    let progress = Arc::new(AtomicU64::new(0));
    let chaos = {
        let (slots, stop) = (slots.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let (mut cancels, mut disposes) = (0u64, 0u64);
            while !stop.load(Ordering::SeqCst) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let slot = &slots[(x % THREADS as u64) as usize];
                if x % 97 == 0 {
                    if let Some(d) = slot.dispose.lock().unwrap().as_ref() {
                        d.dispose();
                        disposes += 1;
                    }
                } else if let Some(c) = slot.cancel.lock().unwrap().as_ref() {
                    c.cancel();
                    cancels += 1;
                }
                // Pace the chaos so most turns still complete (no timing is asserted).
                std::thread::sleep(Duration::from_micros(5000 + x % 15000));
            }
            (cancels, disposes)
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let (jobs, slot, progress) = (jobs.clone(), slots[id].clone(), progress.clone());
            std::thread::spawn(move || worker(id, turns, jobs, slot, progress))
        })
        .collect();
    let results: Vec<Result<Session, String>> = workers.into_iter().map(|w| w.join().expect("a worker panicked")).collect();
    stop.store(true, Ordering::SeqCst);
    let (cancels, disposes) = chaos.join().unwrap();
    for s in services {
        s.join().unwrap();
    }
    let _ = done_tx.send(());
    watchdog.join().unwrap();
    let mut completed = 0u64;
    let mut aborted = 0u64;
    for r in results {
        let session = r.unwrap_or_else(|e| panic!("{e}"));
        support::host_script::check_session(&session).unwrap_or_else(|e| panic!("session {}: {e}", session.id()));
        session.with_log(|l| {
            for line in l.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                if v["type"] == "turn/end" {
                    if v["data"]["reason"] == "completed" {
                        completed += 1;
                    } else {
                        aborted += 1;
                    }
                }
            }
        });
    }
    eprintln!("concurrency: {THREADS} threads x {turns} turns: {completed} completed, {aborted} ended otherwise; {cancels} cancels, {disposes} disposes from the chaos thread");
    assert!(completed > 0);
}
