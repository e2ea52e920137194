//! `llmsession`: look inside a session log.
//!
//! ```text
//! llmsession verify LOG                       rebuild every request, name the first divergence
//! llmsession stats LOG [--json]               per request: messages, shared prefix, header changes,
//!                                             compactions, provider-reported cached tokens
//! llmsession show LOG --step N [--render openai|anthropic]
//!                                             the reconstructed request N (1-based, in log order)
//! llmsession headers LOG                      header history with readable diffs; drift at resume
//! llmsession sessions URL [--json]            the sessions a store holds (a database: many)
//! ```
//!
//! LOG is a JSONL file path or a store URL: `file:PATH`, or
//! `postgres://user:password@host:port/dbname?session=ID` for a session in PostgreSQL. Every
//! command reads without a lock or lease and writes nothing.

use llmsession::header::delta::diff;
use llmsession::log::load::{parse_records, SessionHeader};
use llmsession::log::{Event, Log};
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{conversation_envelope, verify_contents, PrefixBytes};
use llmsession::store::url::{list_sessions, open_store, UrlOptions};
use llmsession::store::{JsonlStore, Store, StoreContents};
use llmsession::{EpochHeader, Usage};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::Arc;

/// `println!` that stops quietly when the reader went away (`llmsession stats LOG | head`):
/// a closed pipe ends the program with success instead of a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("llmsession: writing the output failed: {e}");
            std::process::exit(1);
        }
    }};
}

const USAGE: &str = "usage:
  llmsession verify LOG
  llmsession stats LOG [--json]
  llmsession show LOG --step N [--render openai|anthropic]
  llmsession headers LOG
  llmsession sessions URL [--json]
LOG: a JSONL file, file:PATH, or postgres://user:password@host:port/dbname?session=ID";

/// Reads a log the way a read-only session open does: no lock is taken and nothing is written,
/// so this works on a log that a live agent is writing (complete lines only).
fn read_contents(path: &str) -> Result<StoreContents, String> {
    let mut store: Box<dyn Store> = if is_url(path) {
        let opts = UrlOptions { read_only: true, ..UrlOptions::default() };
        open_store(path, &opts).map_err(|e| e.message().to_string())?.0
    } else {
        Box::new(JsonlStore::open_read_only(path).map_err(|e| e.message().to_string())?)
    };
    let contents = store.load().map_err(|e| e.message().to_string())?;
    if contents.records.is_empty() {
        return Err(format!("{}: empty file, not a session log", store.describe()));
    }
    Ok(contents)
}

/// A store URL rather than a file path (`postgres://`, `postgresql://`, `file:`).
fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://") || s.starts_with("file:")
}

fn cmd_sessions(url: &str, as_json: bool) -> Result<(), String> {
    let url = if is_url(url) { url.to_string() } else { format!("file:{url}") };
    let list = list_sessions(&url, None, None).map_err(|e| e.message().to_string())?;
    if as_json {
        out!("{}", serde_json::to_string(&list).unwrap());
        return Ok(());
    }
    out!("{:<40} {:>8} {:>6} {:<24} parent", "session", "events", "in use", "updated (unix ms)");
    for s in &list {
        let parent = s.parent.as_ref().map(|p| format!("{} @{}", p.id, p.seed_length)).unwrap_or_else(|| "-".into());
        out!("{:<40} {:>8} {:>6} {:<24} {parent}", s.id, s.events, if s.in_use { "yes" } else { "no" }, s.updated_at);
    }
    out!("{} session(s)", list.len());
    Ok(())
}

fn read_log(path: &str) -> Result<(SessionHeader, Vec<Event>), String> {
    let contents = read_contents(path)?;
    parse_records(&contents.records).map_err(|e| format!("{path}: {}", e.message()))
}

/// One request found while replaying.
struct Seen {
    seq: u64,
    turn: u64,
    step: u64,
    body: Vec<u8>,
    prefix_len: usize,
    history: Vec<u64>,
    prefix: Option<Arc<Vec<llmsession::Message>>>,
    header_reason: Option<String>,
    compactions_before: u64,
    usage: Option<Usage>,
}

fn replay(header: &SessionHeader, events: &[Event]) -> Result<Vec<Seen>, String> {
    let mut log = Log::new();
    let mut out: Vec<Seen> = Vec::new();
    let mut prefix = PrefixBytes::default();
    let mut pending_reason: Option<String> = None;
    let mut compactions = 0u64;
    for ev in events {
        match ev.ty.as_str() {
            "request/header" => pending_reason = ev.data["reason"].as_str().map(str::to_string),
            "request/header-delta" => pending_reason = Some("delta".into()),
            "compaction/end" if ev.data["outcome"] == "landed" => compactions += 1,
            "assistant/message" => {
                if let (Some(last), Some(u)) = (out.last_mut(), ev.data.get("usage")) {
                    last.usage = Usage::from_value(u, "usage").ok();
                }
            }
            "step/start" => {
                let h: EpochHeader =
                    log.state().headers.current().cloned().ok_or(format!("seq {}: a request before any header", ev.seq))?;
                if !prefix.is_for(h.message_prefix.as_ref()) {
                    prefix = PrefixBytes::of(h.message_prefix.as_ref());
                }
                let (t, s) = (ev.data["turn"].as_u64().unwrap_or(0), ev.data["step"].as_u64().unwrap_or(0));
                let body = conversation_envelope(&log, &h, &prefix, header.session_id_at(ev.seq), t, s);
                out.push(Seen {
                    seq: ev.seq,
                    turn: t,
                    step: s,
                    body,
                    prefix_len: prefix.messages.len(),
                    history: log.history().seqs(),
                    prefix: h.message_prefix.clone(),
                    header_reason: pending_reason.take(),
                    compactions_before: compactions,
                    usage: None,
                });
                compactions = 0;
            }
            _ => {}
        }
        log.append(ev).map_err(|e| format!("line {}: {}", ev.seq + 2, e.message()))?;
    }
    Ok(out)
}

fn shared(prev: Option<&Seen>, cur: &Seen) -> usize {
    let Some(p) = prev else { return 0 };
    let same_prefix = match (&p.prefix, &cur.prefix) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    if !same_prefix {
        return 0;
    }
    cur.prefix_len + p.history.iter().zip(&cur.history).take_while(|(a, b)| a == b).count()
}

fn cmd_verify(path: &str) -> Result<(), String> {
    let contents = read_contents(path)?;
    match verify_contents(&contents) {
        Ok(r) => {
            out!("ok: {} events, {} requests and {} compaction requests rebuilt byte for byte", r.events, r.requests, r.compactions);
            Ok(())
        }
        Err(e) => Err(format!("verify failed: {}", e.message())),
    }
}

fn cmd_stats(path: &str, as_json: bool) -> Result<(), String> {
    let (header, events) = read_log(path)?;
    let seen = replay(&header, &events)?;
    let mut rows = Vec::new();
    let (mut cached_total, mut prompt_total) = (0u64, 0u64);
    for (i, s) in seen.iter().enumerate() {
        let sh = shared(if i == 0 { None } else { seen.get(i - 1) }, s);
        let count = s.prefix_len + s.history.len();
        let (cached, prompt) = s.usage.as_ref().map(|u| (u.cache_read_tokens.unwrap_or(0), u.prompt_tokens())).unwrap_or((0, 0));
        cached_total += cached;
        prompt_total += prompt;
        rows.push(json!({
            "request": i + 1, "turn": s.turn, "step": s.step, "seq": s.seq, "messages": count, "sharedWithPrevious": sh,
            "header": s.header_reason, "compactionsBefore": s.compactions_before,
            "promptTokens": prompt, "cachedTokens": cached,
            "hitRatio": if prompt > 0 { cached as f64 / prompt as f64 } else { 0.0 },
        }));
    }
    if as_json {
        out!("{}", json!({"session": header.id, "requests": rows, "cachedTokens": cached_total, "promptTokens": prompt_total}));
        return Ok(());
    }
    out!("session {}  ({} requests)", header.id, rows.len());
    out!(
        "{:>4} {:>5} {:>4} {:>8} {:>7} {:>8} {:>5} {:>8} {:>8} {:>6}",
        "req",
        "turn",
        "step",
        "messages",
        "shared",
        "header",
        "comp",
        "prompt",
        "cached",
        "hit"
    );
    for r in &rows {
        // serde_json's Display ignores width and alignment: format the numbers as strings
        let n = |key: &str| r[key].to_string();
        out!(
            "{:>4} {:>5} {:>4} {:>8} {:>7} {:>8} {:>5} {:>8} {:>8} {:>5.0}%",
            n("request"),
            n("turn"),
            n("step"),
            n("messages"),
            n("sharedWithPrevious"),
            r["header"].as_str().unwrap_or("-"),
            n("compactionsBefore"),
            n("promptTokens"),
            n("cachedTokens"),
            r["hitRatio"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    let ratio = if prompt_total > 0 { cached_total as f64 * 100.0 / prompt_total as f64 } else { 0.0 };
    out!("total: {prompt_total} prompt tokens reported, {cached_total} read from cache ({ratio:.0}%)");
    Ok(())
}

fn cmd_show(path: &str, step: usize, render: Option<&str>) -> Result<(), String> {
    let (header, events) = read_log(path)?;
    let seen = replay(&header, &events)?;
    let s = seen.get(step.wrapping_sub(1)).ok_or(format!("there is no request {step} (the log has {} requests)", seen.len()))?;
    let v: Value = serde_json::from_slice(&s.body).map_err(|e| e.to_string())?;
    let out = match render {
        None => v,
        Some(r) => {
            let r = Renderer::parse(r).map_err(|e| e.message().to_string())?;
            r.render(&v, &RenderOptions::with_prefix_len(s.prefix_len)).map_err(|e| e.message().to_string())?
        }
    };
    out!("{}", serde_json::to_string_pretty(&out).unwrap());
    Ok(())
}

fn describe_change(prev: &EpochHeader, cur: &EpochHeader) -> Vec<String> {
    let d = diff(prev, cur);
    let mut out = Vec::new();
    if let Some(s) = &d.system {
        out.push(format!(
            "system: kept {} leading and {} trailing lines, {} line(s) inserted",
            s.keep_leading,
            s.keep_trailing,
            s.insert.len()
        ));
    }
    if let Some(t) = &d.tools {
        if !t.removed.is_empty() {
            out.push(format!("tools removed: {}", t.removed.join(", ")));
        }
        if !t.changed.is_empty() {
            out.push(format!("tools changed: {}", t.changed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")));
        }
        if !t.added.is_empty() {
            out.push(format!("tools added: {}", t.added.iter().map(|a| a.tool.name.as_str()).collect::<Vec<_>>().join(", ")));
        }
        if t.order.is_some() {
            out.push("tools reordered".into());
        }
    }
    if d.config.is_some() {
        out.push(format!("config: {} -> {}", prev.config.to_value(), cur.config.to_value()));
    }
    if d.message_prefix.is_some() {
        out.push(format!("session prefix: {} -> {} message(s), content changed", prev.prefix().len(), cur.prefix().len()));
    }
    out
}

fn cmd_headers(path: &str) -> Result<(), String> {
    let (_, events) = read_log(path)?;
    let mut log = Log::new();
    let mut prev: Option<EpochHeader> = None;
    for ev in &events {
        log.append(ev).map_err(|e| format!("line {}: {}", ev.seq + 2, e.message()))?;
        if ev.ty != "request/header" && ev.ty != "request/header-delta" {
            continue;
        }
        let cur = log.state().headers.current().cloned().expect("folded");
        let reason = ev.data["reason"].as_str().unwrap_or("delta");
        let instance = ev.data["instance"].as_u64().unwrap_or(0);
        out!(
            "seq {:>6}  {:<8} instance {:<3} {}/{}  system {} line(s), {} tool(s), prefix {} message(s)",
            ev.seq,
            reason,
            instance,
            cur.config.provider,
            cur.config.model,
            if cur.system_str().is_empty() { 0 } else { cur.system_str().split('\n').count() },
            cur.tools_slice().len(),
            cur.prefix().len()
        );
        if let Some(p) = &prev {
            let changes = describe_change(p, &cur);
            if changes.is_empty() {
                out!("            (no change)");
            }
            for c in changes {
                let mark = if reason == "resume" { "DRIFT " } else { "" };
                out!("            {mark}{c}");
            }
        }
        prev = Some(cur);
    }
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    let cmd = args.first().ok_or(USAGE)?;
    let path = args.get(1).ok_or(USAGE)?;
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str);
    match cmd.as_str() {
        "verify" => cmd_verify(path),
        "stats" => cmd_stats(path, args.iter().any(|a| a == "--json")),
        "show" => {
            let step = flag("--step")
                .ok_or("show needs --step N")?
                .parse::<usize>()
                .map_err(|_| "--step takes a number (1 = the first request)")?;
            cmd_show(path, step, flag("--render"))
        }
        "headers" => cmd_headers(path),
        "sessions" => cmd_sessions(path, args.iter().any(|a| a == "--json")),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llmsession: {e}");
            ExitCode::FAILURE
        }
    }
}
