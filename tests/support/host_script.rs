//! A host script decoded from bytes: random operation sequences that drive a [`Session`] and an
//! [`Agent`] (with a summariser, a prefix listener and a pre-step listener), checking after
//! every operation that the log verifies and that the incremental history equals a replay.
//!
//! Shared by the `host_script` fuzz target (fuzz/fuzz_targets/host_script.rs) and the
//! regression tests in tests/reliability.rs. Errors returned by the API are expected (the
//! script misuses it on purpose); a panic or a failed check is a finding, reported as `Err`.

#![allow(dead_code)]

use llmsession::agent::ToolResultInput;
use llmsession::compaction::{CompactionPolicy, SummaryOutput, SummaryRequest};
use llmsession::log::load::parse_records;
use llmsession::log::{Log, TurnEndReason, UserSource};
use llmsession::prefix::{context_event, ListenerContext, PreStepInfo};
use llmsession::request::verify_events;
use llmsession::store::MemoryStore;
use llmsession::{
    Agent, AgentOptions, Block, CallConfig, CancelToken, Error, ErrorKind, Message, NewEvent, Role, Session, SessionOptions, ToolSchema,
    Usage,
};
use serde_json::json;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Reads bytes of the fuzz input; zeros once exhausted.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, at: 0 }
    }
    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }
    /// A coin flip.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// What the summariser does (changed by the script).
const SUMMARISER_KINDS: u8 = 6;

/// Behaviour switches shared with the callbacks.
struct Knobs {
    summariser: AtomicU8,
    pre_step: AtomicU8,
    prefix: AtomicU8,
    calls: AtomicUsize,
}

/// The world the script acts on.
pub struct World {
    session: Session,
    agent: Option<Agent>,
    options: AgentOptions,
    knobs: Arc<Knobs>,
    policy: Option<CompactionPolicy>,
    next_call: usize,
    /// Call ids the model made, in order (results are picked from here).
    calls: Vec<String>,
    ops: usize,
    /// A human-readable trace of the operations run (for reproducing a finding).
    pub trace: Vec<String>,
    /// The session and length of the last checked log.
    checked: Option<(Session, usize)>,
}

fn config(model: u8) -> CallConfig {
    let mut c = CallConfig::new("openai", if model % 2 == 0 { "model-a" } else { "model-b" });
    c.max_tokens = Some(256);
    c
}

fn tool(name: &str) -> ToolSchema {
    ToolSchema::from_value(&json!({"name": name, "description": format!("the {name} tool"), "parameters": {"type": "object"}}), "tool")
        .expect("a valid tool")
}

fn text(b: &mut Bytes<'_>, what: &str) -> String {
    let n = b.below(4);
    match n {
        0 => format!("{what}"),
        1 => format!("{what} {}", b.u8()),
        2 => format!("{what} line one\nline two {}", b.u8()),
        _ => format!("{what} {}", "words ".repeat(b.below(40) + 1)),
    }
}

impl World {
    /// A fresh world over an in-memory session, configured from the first bytes.
    pub fn new(b: &mut Bytes<'_>) -> Result<World, String> {
        let session =
            Session::create(Box::new(MemoryStore::new()), SessionOptions { id: Some("fuzz-session".into()), ..Default::default() })
                .map_err(|e| e.to_string())?;
        let mut options = AgentOptions::new(config(0));
        options.system = Some("You are a test agent.\nBe brief.".into());
        options.tools = vec![tool("read"), tool("write")];
        options.check_requests = b.bool();
        let knobs = Arc::new(Knobs {
            summariser: AtomicU8::new(0),
            pre_step: AtomicU8::new(b.u8() % 4),
            prefix: AtomicU8::new(b.u8() % 4),
            calls: AtomicUsize::new(0),
        });
        let mut w = World {
            session,
            agent: None,
            options,
            knobs,
            policy: None,
            next_call: 0,
            calls: Vec::new(),
            ops: 0,
            trace: Vec::new(),
            checked: None,
        };
        w.new_agent();
        Ok(w)
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    fn new_agent(&mut self) {
        let agent = match Agent::new(&self.session, self.options.clone()) {
            Ok(a) => a,
            Err(_) => return,
        };
        let mut agent = agent;
        let k = self.knobs.clone();
        agent
            .add_prefix_listener(Arc::new(move |_ctx: &ListenerContext<'_>, rest: &[Message]| -> llmsession::Result<Vec<Message>> {
                match k.prefix.load(Ordering::SeqCst) {
                    0 => Ok(rest.to_vec()),
                    1 => {
                        Ok(std::iter::once(Message::user_text("Project notes: keep answers short.")).chain(rest.iter().cloned()).collect())
                    }
                    2 => Err(Error::new(ErrorKind::Listener, "prefix listener failed")),
                    _ => Ok(vec![Message::user_text("Memory A"), Message::user_text("Memory B")]),
                }
            }))
            .expect("a live agent");
        let k = self.knobs.clone();
        agent
            .add_pre_step_listener(Arc::new(move |ctx: &ListenerContext<'_>, info: &PreStepInfo<'_>| -> llmsession::Result<()> {
                let n = k.calls.fetch_add(1, Ordering::SeqCst);
                match k.pre_step.load(Ordering::SeqCst) {
                    1 if info.step == 1 => ctx.append_context(Message::user_text(format!("plugin context {n}"))).map(|_| ()),
                    2 if n % 5 == 4 => Err(Error::new(ErrorKind::Listener, "pre-step failed")),
                    3 if n % 7 == 6 => {
                        ctx.cancel.cancel();
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }))
            .expect("a live agent");
        let k = self.knobs.clone();
        let session = self.session.clone();
        agent.set_summariser(Some(Arc::new(move |_req: &SummaryRequest, cancel: &CancelToken| -> llmsession::Result<SummaryOutput> {
            let ok = SummaryOutput { text: "Summary of the work so far.".into(), ..Default::default() };
            match k.summariser.load(Ordering::SeqCst) {
                1 => Err(Error::new(ErrorKind::Summariser, "summariser unavailable")),
                2 => Ok(SummaryOutput { text: "  ".into(), ..ok }),
                3 => {
                    cancel.cancel();
                    Err(Error::new(ErrorKind::Cancelled, "cancelled"))
                }
                4 => {
                    session.append(context_event(Message::user_text("appended during compaction"), UserSource::Host)?)?;
                    Ok(ok)
                }
                5 => Ok(SummaryOutput { truncated: true, ..ok }),
                _ => Ok(ok),
            }
        })));
        if self.policy.is_some() {
            agent.set_policy(self.policy.clone()).expect("a validated policy");
        }
        self.agent = Some(agent);
    }

    /// Runs one operation decoded from `b`, then checks the log. `Err` is a finding.
    pub fn step(&mut self, b: &mut Bytes<'_>) -> Result<(), String> {
        self.ops += 1;
        let op = b.below(20);
        let r = self.run(op, b);
        if let Err(e) = &r {
            self.trace.push(format!("  -> error: [{}] {}", e.kind().name(), e.message()));
        }
        self.check().map_err(|e| format!("after op {} ({}): {e}", self.ops, self.trace.last().cloned().unwrap_or_default()))
    }

    fn agent(&mut self) -> llmsession::Result<&mut Agent> {
        self.agent.as_mut().ok_or_else(|| Error::new(ErrorKind::Disposed, "no live agent in the script"))
    }

    fn run(&mut self, op: usize, b: &mut Bytes<'_>) -> llmsession::Result<()> {
        match op {
            0 | 1 => {
                let t = text(b, "user asks");
                self.trace.push(format!("turn {t:?}"));
                self.agent()?.start_turn(Message::user_text(t)).map(|_| ())
            }
            2 | 3 => {
                let pre = b.below(8) == 0;
                self.trace.push(format!("request cancelled={pre}"));
                let c = CancelToken::new();
                if pre {
                    c.cancel();
                }
                let r = self.agent()?.next_request(&c);
                if matches!(&r, Err(e) if e.kind() == ErrorKind::Disposed) {
                    self.agent = None;
                }
                r.map(|_| ())
            }
            4 | 5 => {
                let mut content = vec![Block::text(text(b, "assistant says"))];
                let n = if op == 5 { b.below(4) } else { 0 };
                for _ in 0..n {
                    let id = if b.below(10) == 0 && !self.calls.is_empty() {
                        self.calls[b.below(self.calls.len())].clone()
                    } else {
                        self.next_call += 1;
                        format!("call_{}", self.next_call)
                    };
                    self.calls.push(id.clone());
                    let name = if b.bool() { "read" } else { "write" };
                    content.push(Block::tool_call(&id, name, "{\"path\":\"a.txt\"}"));
                }
                let usage = if b.bool() {
                    Some(Usage {
                        input_tokens: b.u8() as u64 * 40,
                        output_tokens: b.u8() as u64,
                        cache_read_tokens: Some(b.u8() as u64 * 10),
                        ..Default::default()
                    })
                } else {
                    None
                };
                self.trace.push(format!("respond calls={n} usage={}", usage.is_some()));
                self.agent()?.record_response(Message::new(Role::Assistant, content), usage).map(|_| ())
            }
            6 | 7 => {
                // A result for a recent call, picked at random (so results arrive out of order).
                let pending: Vec<String> = self.session.with_log(|l| l.state().pending.iter().map(|p| p.id.clone()).collect());
                let id = if !pending.is_empty() && b.below(8) != 0 {
                    pending[b.below(pending.len())].clone()
                } else if !self.calls.is_empty() {
                    self.calls[b.below(self.calls.len())].clone()
                } else {
                    "call_none".into()
                };
                let is_error = b.below(4) == 0;
                self.trace.push(format!("toolResult {id} error={is_error}"));
                self.agent()?
                    .record_tool_result(ToolResultInput { call_id: id, content: vec![Block::text("file contents")], is_error })
                    .map(|_| ())
            }
            8 => {
                let t = text(b, "host note");
                self.trace.push(format!("inject {t:?}"));
                self.agent()?.inject(Message::user_text(t)).map(|_| ())
            }
            9 => {
                let overflow = b.bool();
                self.trace.push(format!("providerError overflow={overflow}"));
                let c = CancelToken::new();
                let r = self.agent()?.report_provider_error("provider said no", overflow, &c);
                if matches!(&r, Err(e) if e.kind() == ErrorKind::Disposed) {
                    self.agent = None;
                }
                r.map(|_| ())
            }
            10 | 11 => {
                let reason = [
                    TurnEndReason::Completed,
                    TurnEndReason::Completed,
                    TurnEndReason::Aborted,
                    TurnEndReason::Error,
                    TurnEndReason::Rejected,
                    TurnEndReason::MaxTokens,
                    TurnEndReason::Disposed,
                    TurnEndReason::Interrupted,
                ][b.below(8)];
                self.trace.push(format!("endTurn {}", reason.as_str()));
                self.agent()?.end_turn(reason)
            }
            12 => {
                let span = if b.below(3) == 0 {
                    let len = self.session.with_log(|l| l.history().len());
                    let s = b.below(len.max(1) + 1);
                    let e = s + b.below(4);
                    Some((s, e))
                } else {
                    None
                };
                self.trace.push(format!("compact span={span:?}"));
                let c = CancelToken::new();
                self.agent()?.compact(span, &c).map(|_| ())
            }
            13 => {
                let reload = b.bool();
                self.trace.push(format!("resume reload={reload}"));
                if let Some(a) = self.agent.take() {
                    a.dispose()?;
                }
                if reload {
                    let store = MemoryStore::with_records(self.session.records().unwrap().iter().map(|r| r.to_string()).collect());
                    let (s, _) = Session::open(Box::new(store), SessionOptions::default())?;
                    self.session = s;
                }
                self.new_agent();
                Ok(())
            }
            14 => {
                let seed = if b.bool() { None } else { Some(b.below(self.session.len() + 2) as u64) };
                self.trace.push(format!("fork seed={seed:?}"));
                if let Some(a) = self.agent.take() {
                    a.dispose()?;
                }
                let r = self.session.fork(seed, Box::new(MemoryStore::new()), SessionOptions::default());
                if let Ok(s) = &r {
                    self.session = s.clone();
                }
                self.new_agent();
                r.map(|_| ())
            }
            15 => {
                self.trace.push("dispose".into());
                match self.agent.take() {
                    Some(a) => {
                        if b.bool() {
                            a.dispose()
                        } else {
                            a.dispose_handle().dispose();
                            drop(a);
                            Ok(())
                        }
                    }
                    None => {
                        self.new_agent();
                        Ok(())
                    }
                }
            }
            16 => {
                let what = b.below(4);
                self.trace.push(format!("setOptions {what}"));
                let mut o = self.options.clone();
                match what {
                    0 => o.system = Some(format!("You are a test agent.\nBe brief.\nRule {}", b.u8())),
                    1 => o.tools = vec![tool("write"), tool("read"), tool(&format!("t{}", b.u8() % 3))],
                    2 => o.config = config(b.u8()),
                    _ => o.system = None,
                }
                // Tool names must be unique; a duplicate is a host error the API must reject.
                self.options = o.clone();
                self.agent()?.set_options(o)
            }
            17 => {
                let k = b.u8();
                self.trace.push(format!("knobs summariser={} pre={} prefix={}", k % SUMMARISER_KINDS, (k >> 3) % 4, (k >> 5) % 4));
                self.knobs.summariser.store(k % SUMMARISER_KINDS, Ordering::SeqCst);
                self.knobs.pre_step.store((k >> 3) % 4, Ordering::SeqCst);
                self.knobs.prefix.store((k >> 5) % 4, Ordering::SeqCst);
                Ok(())
            }
            18 => {
                let window = [0u64, 9000, 12000, 20000][b.below(4)];
                let policy = if window == 0 {
                    None
                } else {
                    let mut p = CompactionPolicy::new(window);
                    p.summary_max_tokens = 1024;
                    p.threshold = [0.01, 0.05, 0.5][b.below(3)];
                    p.retained = llmsession::compaction::Retained::Tokens([0, 40, 400][b.below(3)]);
                    Some(p)
                };
                self.trace.push(format!("setPolicy {window}"));
                let r = match self.agent.as_mut() {
                    Some(a) => a.set_policy(policy.clone()),
                    None => policy.as_ref().map_or(Ok(()), |p| p.validate()),
                };
                if r.is_ok() {
                    self.policy = policy;
                }
                r
            }
            _ => {
                let what = b.below(3);
                self.trace.push(format!("hostAppend {what}"));
                let ev = match what {
                    0 => NewEvent::new("host/note", json!({"n": b.u8()})),
                    1 => context_event(Message::user_text("host context"), UserSource::Host)?,
                    _ => NewEvent::new("turn/start", json!({"turn": b.u8()})),
                };
                self.session.append(ev).map(|_| ())
            }
        }
    }

    /// Checks the current log: it verifies, and the incremental history equals a replay.
    /// (A log is append-only: when the session and its length are those of the last check,
    /// the log is the one already checked.)
    pub fn check(&mut self) -> Result<(), String> {
        let now = (self.session.clone(), self.session.len());
        // Requests rebuild from the log before them, which never changes: when the events added
        // since the last check hold no request, verify would only re-check what the replay checks.
        let mut full = true;
        if let Some((s, n)) = &self.checked {
            if s.same_as(&now.0) {
                if *n == now.1 {
                    return Ok(());
                }
                // The log holds the lines from its base on (a session opened from a checkpoint
                // holds none before it); lines it does not hold are checked in full.
                full = self.session.with_log(|l| match (*n as u64).checked_sub(l.base()) {
                    Some(from) => l.lines()[from as usize..]
                        .iter()
                        .any(|line| line.contains("\"step/start\"") || line.contains("\"compaction/start\"")),
                    None => true,
                });
            }
        }
        check_session_with(&self.session, full)?;
        self.checked = Some(now);
        Ok(())
    }

    /// Disposes the agent and checks the final log.
    pub fn finish(mut self) -> Result<(), String> {
        if let Some(a) = self.agent.take() {
            let _ = a.dispose();
        }
        check_session(&self.session)
    }
}

/// The stored records of a session (header first), as a reload would see them.
pub fn records_of(session: &Session) -> Vec<Vec<u8>> {
    session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

/// Verifies a session's log and compares its history with a from-scratch replay.
pub fn check_session(session: &Session) -> Result<(), String> {
    check_session_with(session, true)
}

/// [`check_session`], with `verify` false skipping the request rebuild (the replay still runs).
pub fn check_session_with(session: &Session, verify: bool) -> Result<(), String> {
    let records = records_of(session);
    let (header, events) = parse_records(&records).map_err(|e| format!("the log does not parse: {e}"))?;
    if verify {
        verify_events(&header, &events).map_err(|e| format!("verify failed: [{}] {}", e.kind().name(), e.message()))?;
    }
    let replay = Log::replay(&events).map_err(|e| format!("the log does not replay: {e}"))?;
    let mut fresh = Vec::new();
    replay.history().write_json(&mut fresh, true);
    let mut live = Vec::new();
    session.with_log(|l| l.history().write_json(&mut live, true));
    if fresh != live {
        return Err(format!(
            "incremental history differs from a replay:\n live:   {}\n replay: {}",
            String::from_utf8_lossy(&live),
            String::from_utf8_lossy(&fresh)
        ));
    }
    let (a, b) = (session.with_log(|l| l.history().generation()), replay.history().generation());
    if a != b {
        return Err(format!("surface generation {a} live, {b} replayed"));
    }
    Ok(())
}

/// Operations per script (longer inputs are cut).
pub const MAX_OPS: usize = 120;

/// Runs a whole script; `Err` is a finding (with the trace).
pub fn run_script(data: &[u8]) -> Result<(), String> {
    let mut b = Bytes::new(data);
    let mut w = World::new(&mut b)?;
    let mut n = 0;
    while !b.done() && n < MAX_OPS {
        n += 1;
        if let Err(e) = w.step(&mut b) {
            return Err(format!("{e}\ntrace:\n{}", w.trace.join("\n")));
        }
    }
    let trace = w.trace.clone();
    w.finish().map_err(|e| format!("at the end: {e}\ntrace:\n{}", trace.join("\n")))
}
