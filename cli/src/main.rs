//! `llmsession`: look inside a session log (docs/cli.md has every command, its options, its JSON
//! output and the exit codes).
//!
//! ```text
//! llmsession verify LOG [--render openai|openai-responses|anthropic|gemini|gemini-interactions] [--json]
//! llmsession stats LOG [--json]
//! llmsession explain LOG [--step ID] [--prices FILE] [--cache-rules FILE] [--json]
//! llmsession show LOG --step N [--render openai|openai-responses|anthropic|gemini|gemini-interactions] [--json]
//! llmsession headers LOG [--json]
//! llmsession sessions URL [--json]
//! ```
//!
//! LOG is a JSONL file path or a store URL: `file:PATH`, or
//! `postgres://user:password@host:port/dbname?session=ID` (or `postgresql://`) for a session in
//! PostgreSQL. Every command reads without a lock or lease and writes nothing. The command line
//! is parsed by clap: options go anywhere after the command, `--step=2` and `--step 2` are the
//! same, and anything it does not know is a usage error (exit 2).

use llmsession::cache_rules::CacheRules;
use llmsession::explain::{explain_log, explain_log_with, ExplainSettings, Explanation, Kind, RequestReport};
use llmsession::header::delta::diff;
use llmsession::log::load::{read_checked, CheckedLog};
use llmsession::log::Log;
use llmsession::prices::PriceTable;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{verify_store, RequestWalk, VerifyProgress};
use llmsession::store::url::{list_sessions, open_store, redact, UrlOptions};
use llmsession::store::{JsonlStore, Store, StoreContents};
use llmsession::tokens::Estimator;
use llmsession::{EpochHeader, ErrorKind, Session};
use serde_json::{json, Value};
use std::process::ExitCode;

mod args;
mod failure;
use args::{Cli, Command};
use clap::Parser as _;
use failure::{Exit, Failure};

/// `println!` that stops quietly when the reader went away (`llmsession stats LOG | head`):
/// a closed pipe ends the program with success instead of a panic; any other write failure is
/// an I/O failure (exit 4).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("llmsession: writing the output failed: {e}");
            std::process::exit($crate::failure::Exit::Store as i32);
        }
    }};
}

/// Reads a log the way a read-only session open does: no lock is taken and nothing is written,
/// so this works on a log that a live agent is writing (complete lines only).
/// A store that cannot be opened or read is exit 4, unless what it read is damaged (exit 3).
fn read_contents(path: &str) -> Result<StoreContents, Failure> {
    let mut store: Box<dyn Store> = if is_url(path) {
        let opts = UrlOptions { read_only: true, ..UrlOptions::default() };
        open_store(path, &opts).map_err(store_failure)?.0
    } else {
        Box::new(JsonlStore::open_read_only(path).map_err(store_failure)?)
    };
    let contents = store.load().map_err(store_failure)?;
    if contents.records.is_empty() {
        return Err(Failure::new(Exit::BadLog, ErrorKind::CorruptLog, format!("{}: empty file, not a session log", store.describe())));
    }
    Ok(contents)
}

/// Opens a store for reading, as [`read_contents`] does, without reading it.
fn open_reader(path: &str) -> Result<Box<dyn Store>, Failure> {
    Ok(if is_url(path) {
        let opts = UrlOptions { read_only: true, ..UrlOptions::default() };
        open_store(path, &opts).map_err(store_failure)?.0
    } else {
        Box::new(JsonlStore::open_read_only(path).map_err(store_failure)?)
    })
}

/// An error opening or reading a store: a bad log when what was read is damaged, otherwise the
/// store's (a missing file, a refused connection, a session the database does not hold).
fn store_failure(e: llmsession::Error) -> Failure {
    let exit = if Exit::of(e.kind()) == Exit::BadLog { Exit::BadLog } else { Exit::Store };
    Failure::with_exit(e, exit)
}

/// A store URL rather than a file path (`postgres://`, `postgresql://`, `file:`).
fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://") || s.starts_with("file:")
}

fn cmd_sessions(url: &str, as_json: bool) -> Result<(), Failure> {
    let url = if is_url(url) { url.to_string() } else { format!("file:{url}") };
    let list = list_sessions(&url, None, None).map_err(store_failure)?;
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

/// Runs the store conformance kit against the store `url` names; a failed case is exit 1, with
/// the report in the failure's detail (`--json`: one document, the error's `report`).
fn cmd_store_check(url: &str, cases: &[String], as_json: bool) -> Result<(), Failure> {
    use llmsession::store::conformance::{run, UrlFactory};
    let mut factory = UrlFactory::new(url).map_err(store_failure)?;
    let only = if cases.is_empty() { None } else { Some(cases) };
    let report = run(&mut factory, only).map_err(Failure::of)?;
    if !as_json || report.passed {
        if as_json {
            out!("{}", report.to_json());
        } else {
            for c in &report.cases {
                out!("{} {:<24} {}", if c.passed { "PASS" } else { "FAIL" }, c.case, c.detail);
            }
            let failed = report.failed().len();
            out!("{}: {} case(s), {} failed", report.store, report.cases.len(), failed);
        }
    }
    match report.error() {
        None => Ok(()),
        Some(e) => Err(Failure::of(e).with_detail("report", report.to_json())),
    }
}

/// Reads a log for a command as every reader of a log reads it (`read_checked`: every check an
/// open makes, the one loading path `verify` uses too). A log an open refuses, or whose
/// unfinished last turn an open would cut as damaged, is a bad log (exit 3) naming the line.
fn read_log(path: &str) -> Result<CheckedLog, Failure> {
    let contents = read_contents(path)?;
    read_checked(&contents).map_err(|e| Failure::of(e).context(redact(path)))
}

/// One conversation request found while replaying the log (for `show`), with the context edits
/// its provider reported applying to it.
struct Seen {
    body: Vec<u8>,
    prefix_len: usize,
    edits: Vec<llmsession::ContextEdit>,
}

/// Walks `events` from `walk`'s state, numbering conversation requests from `before + 1`, and
/// keeps request `want`. Returns it (if the events hold it) and how many requests there are.
fn find_request(
    walk: &mut RequestWalk<'_>,
    events: &[llmsession::Event],
    before: usize,
    want: usize,
) -> Result<(Option<Seen>, usize), Failure> {
    let mut n = before;
    let mut seen: Option<Seen> = None;
    for ev in events {
        let line = |e: llmsession::Error| Failure::of(e).context(format!("line {}", ev.seq + 2));
        if ev.ty == "step/start" && n + 1 == want {
            if let Some(r) = walk.rebuild(ev).map_err(line)? {
                seen = Some(Seen { body: r.envelope, prefix_len: walk.prefix().messages.len(), edits: Vec::new() });
            }
        }
        if ev.ty == "step/start" {
            n += 1;
        }
        if ev.ty == "assistant/message" && n == want {
            let edits = ev.data.get("usage").and_then(|u| llmsession::Usage::from_value(u, "").ok()).and_then(|u| u.context_edits);
            if let (Some(s), Some(e)) = (seen.as_mut(), edits) {
                s.edits = e;
            }
        }
        walk.apply(ev, ev.seq).map_err(line)?;
    }
    Ok((seen, n))
}

/// Request `want` of the log at `path`: from the last checkpoint before it (found from the end
/// of the log back, one checkpoint at a time), so a recent request is found without reading
/// the log from its start; a log without such a checkpoint is read whole.
fn request_at(path: &str, want: usize) -> Result<(Option<Seen>, usize), Failure> {
    use llmsession::log::load::window_events;
    let mut store = open_reader(path)?;
    let mut before = None;
    loop {
        let Some(mut win) = store.load_window(before).map_err(store_failure)? else { break };
        let w = window_events(&mut win).map_err(|e| Failure::of(e).context(redact(path)))?;
        let requests = w.log.state().requests as usize;
        if requests < want || want == 0 {
            let mut walk = RequestWalk::at(&w.header, w.log);
            return find_request(&mut walk, &w.events, requests, want);
        }
        before = Some(win.checkpoint);
    }
    let log = read_log(path)?;
    let (mut walk, events) = RequestWalk::of(&log);
    find_request(&mut walk, events, 0, want)
}

/// The explanation of a log file (the one computation behind `stats` and `explain`).
fn explanation(path: &str) -> Result<Explanation, Failure> {
    explain_log(&read_log(path)?, &Estimator).map_err(|e| Failure::of(e).context(redact(path)))
}

/// A `--render` name (clap has already checked it is one of [`args::RENDERERS`]).
fn renderer(name: &str) -> Result<Renderer, Failure> {
    Renderer::parse(name).map_err(Failure::of)
}

/// A progress bar on stderr, drawn at most ten times a second once a verify has run for half a
/// second (a short log shows none), and cleared at the end.
struct ProgressBar {
    started: std::time::Instant,
    drawn: Option<std::time::Instant>,
}

impl ProgressBar {
    fn new() -> ProgressBar {
        ProgressBar { started: std::time::Instant::now(), drawn: None }
    }

    fn update(&mut self, p: &VerifyProgress) {
        use std::io::Write as _;
        let now = std::time::Instant::now();
        if p.done {
            if self.drawn.is_some() {
                let _ = write!(std::io::stderr(), "\r{:79}\r", "");
            }
            return;
        }
        if now.duration_since(self.started).as_millis() < 500 || self.drawn.is_some_and(|d| now.duration_since(d).as_millis() < 100) {
            return;
        }
        self.drawn = Some(now);
        let (done, total, unit) = match (p.total_bytes, p.total_records) {
            (Some(t), _) if t > 0 => (p.bytes as f64 / 1e6, t as f64 / 1e6, "MB"),
            (_, Some(t)) if t > 0 => (p.records as f64, t as f64, "records"),
            _ => (p.records as f64, 0.0, "records"),
        };
        let secs = now.duration_since(self.started).as_secs_f64();
        let line = if total > 0.0 {
            let frac = (done / total).clamp(0.0, 1.0);
            let filled = (frac * 30.0) as usize;
            format!(
                "verify [{}{}] {:3.0} % {done:.0}/{total:.0} {unit} {secs:.1} s",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                frac * 100.0
            )
        } else {
            format!("verify {done:.0} {unit} {secs:.1} s")
        };
        let _ = write!(std::io::stderr(), "\r{line:79}");
        let _ = std::io::stderr().flush();
    }
}

fn cmd_verify(path: &str, render: Option<&str>, as_json: bool, progress: Option<bool>) -> Result<(), Failure> {
    use std::io::IsTerminal as _;
    let mut store = open_reader(path)?;
    let renderer = render.map(renderer).transpose()?;
    let show = progress.unwrap_or(!as_json && std::io::stderr().is_terminal());
    let default_options = RenderOptions::default();
    let mut bar = ProgressBar::new();
    // The requests whose provider edited them before the model saw them (Anthropic context
    // editing, recorded with the response's usage), by explain's request id: found in the same
    // pass.
    let (mut conversation, mut summaries) = (0u64, 0u64);
    let mut edited: Vec<(String, Vec<llmsession::ContextEdit>)> = Vec::new();
    let mut visit = |ev: &llmsession::Event| match ev.ty.as_str() {
        "step/start" => conversation += 1,
        "compaction/start" if ev.data.get("requestDigest").is_some() => summaries += 1,
        "assistant/message" => {
            let edits = ev.data.get("usage").and_then(|u| llmsession::Usage::from_value(u, "").ok()).and_then(|u| u.context_edits);
            if let Some(e) = edits.filter(|e| !e.is_empty()) {
                edited.push((conversation.to_string(), e));
            }
        }
        _ => {}
    };
    let _ = summaries;
    let verified = verify_store(
        store.as_mut(),
        renderer.map(|r| (r, &default_options)),
        &mut |p| {
            if show {
                bar.update(p)
            }
        },
        Some(&mut visit),
    );
    match verified {
        Ok(r) => {
            if as_json {
                let mut v = json!({"ok": true, "events": r.events, "requests": r.requests, "compactions": r.compactions});
                if let Some(renderer) = renderer {
                    v["renderer"] = json!(renderer.name());
                    v["bodies"] = json!(r.bodies);
                }
                if !edited.is_empty() {
                    let list: Vec<Value> = edited.iter().map(|(id, e)| json!({"request": id, "edits": e})).collect();
                    v["contextEdits"] = Value::Array(list);
                }
                out!("{v}");
                return Ok(());
            }
            out!("ok: {} events, {} requests and {} compaction requests rebuilt byte for byte", r.events, r.requests, r.compactions);
            if let Some(renderer) = renderer {
                out!("ok: {} {} bodies built from the rendered messages equal the rendering of their envelopes", r.bodies, renderer.name());
            }
            for (id, edits) in &edited {
                out!("note: request {id} was sent as rebuilt, but the model saw it with {}", describe_edits(edits));
            }
            Ok(())
        }
        // Whatever verify finds is the log's fault (exit 3), unless the store failed under it.
        // A damaged log names the file and the line; a request that does not rebuild, its step.
        Err(e) => {
            if e.message().contains("holds nothing: not a session log") {
                return Err(Failure::new(Exit::BadLog, ErrorKind::CorruptLog, format!("{}: empty file, not a session log", redact(path))));
            }
            let exit = if Exit::of(e.kind()) == Exit::Store { Exit::Store } else { Exit::BadLog };
            let damaged = e.kind() == ErrorKind::CorruptLog;
            let f = Failure::with_exit(e, exit);
            Err(if damaged { f.context(redact(path)) } else { f }.context("verify failed"))
        }
    }
}

/// `checkpoint LOG`: opens the log for writing (checking all of it), writes a checkpoint.
fn cmd_checkpoint(path: &str, as_json: bool) -> Result<(), Failure> {
    use llmsession::log::load::OpenCheck;
    let url = if is_url(path) { path.to_string() } else { format!("file:{}", path.replace('%', "%25")) };
    let opts = UrlOptions { create: false, check: OpenCheck::Full, ..UrlOptions::default() };
    let (s, report) = Session::open_url(&url, opts).map_err(|e| store_failure(e).context(redact(path)))?;
    let seq = s.checkpoint().map_err(|e| Failure::of(e).context(redact(path)))?;
    let cp = s.event(seq).map(|e| e.data).unwrap_or_default();
    let full = cp.get("base").is_none();
    if as_json {
        out!(
            "{}",
            json!({"ok": true, "seq": seq, "events": s.len(), "full": full, "repairedEvents": report.repaired_events, "cutRecords": report.cut_records})
        );
    } else {
        if report.cut_records > 0 || report.repaired_events > 0 {
            out!(
                "repaired: {} record(s) cut, {} event(s) added to close what a crash left open",
                report.cut_records,
                report.repaired_events
            );
        }
        out!("ok: checkpoint at seq {seq} ({} events); the log now opens from there", s.len());
    }
    Ok(())
}

/// `2 tool use(s) cleared (900 input tokens, clear_tool_uses_20250919)`, joined.
fn describe_edits(edits: &[llmsession::ContextEdit]) -> String {
    let one = |e: &llmsession::ContextEdit| {
        let what = match (e.cleared_tool_uses, e.cleared_thinking_turns) {
            (Some(n), _) => format!("the {n} oldest tool use(s) cleared"),
            (None, Some(n)) => format!("the {n} oldest thinking turn(s) cleared"),
            _ => "context cleared".into(),
        };
        format!("{what} ({} input tokens, {})", e.cleared_input_tokens, e.kind)
    };
    edits.iter().map(one).collect::<Vec<_>>().join(" and ")
}

fn cmd_stats(path: &str, as_json: bool) -> Result<(), Failure> {
    let ex = explanation(path)?;
    let mut rows = Vec::new();
    let (mut cached_total, mut prompt_total) = (0u64, 0u64);
    for r in ex.requests.iter().filter(|r| r.kind == Kind::Conversation) {
        let (cached, prompt) = (r.cached_tokens, r.prompt_tokens);
        cached_total += cached;
        prompt_total += prompt;
        rows.push(json!({
            "request": rows.len() + 1, "turn": r.turn, "step": r.step, "seq": r.seq, "messages": r.messages,
            "sharedWithPrevious": r.shared_messages, "header": r.header, "compactionsBefore": r.compactions_before,
            "promptTokens": prompt, "cachedTokens": cached, "expectedCachedTokens": r.expected_cached_tokens,
            "hitRatio": if prompt > 0 { cached as f64 / prompt as f64 } else { 0.0 }, "cause": r.cause.as_str(),
        }));
    }
    if as_json {
        out!("{}", json!({"session": ex.session, "requests": rows, "cachedTokens": cached_total, "promptTokens": prompt_total}));
        return Ok(());
    }
    out!("session {}  ({} requests)", ex.session, rows.len());
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

/// A JSON option file (`--prices`, `--cache-rules`), parsed by `parse`.
fn option_file<T>(path: &str, flag: &str, parse: fn(&Value) -> llmsession::Result<T>) -> Result<T, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("{flag} {path}: cannot read it: {e}")))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("{flag} {path}: not JSON: {e}")))?;
    parse(&v).map_err(|e| Failure::of(e).context(format!("{flag} {path}")))
}

fn cmd_explain(path: &str, step: Option<&str>, prices: Option<&str>, rules: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let settings = ExplainSettings {
        prices: prices.map(|p| option_file(p, "--prices", PriceTable::from_value)).transpose()?,
        cache_rules: rules.map(|p| option_file(p, "--cache-rules", CacheRules::from_value)).transpose()?.unwrap_or_default(),
    };
    let ex = explain_log_with(&read_log(path)?, &Estimator, &settings).map_err(|e| Failure::of(e).context(redact(path)))?;
    if let Some(id) = step {
        let r = ex.request(id).ok_or_else(|| {
            let (conv, comp) = (ex.totals.conversation_requests, ex.totals.compaction_requests);
            let conv = count(conv, "request", "");
            let comp = count(comp, "summarisation request", "c");
            Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("there is no request {id}: the log has {conv} and {comp}"))
        })?;
        if as_json {
            out!("{}", serde_json::to_value(r).expect("a report serialises"));
        } else {
            explain_one(&ex, r);
        }
        return Ok(());
    }
    if as_json {
        out!("{}", ex.to_value());
        return Ok(());
    }
    out!(
        "session {}  ({} requests, {} summarisation requests; tokens: {})",
        ex.session,
        ex.totals.conversation_requests,
        ex.totals.compaction_requests,
        ex.counter
    );
    out!(
        "{:>4} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8}  {:<20} diverges at",
        "req",
        "turn/step",
        "bytes",
        "tokens",
        "shared",
        "expected",
        "cached",
        "prompt",
        "uncached",
        "cause"
    );
    for r in &ex.requests {
        let at = match &r.divergence {
            Some(d) => d.component.describe(),
            None if r.compared_with.is_some() => "- (extends the previous request)".into(),
            None => "- (first request)".into(),
        };
        let usage = |n: u64| if r.usage.is_some() { n.to_string() } else { "-".into() };
        out!(
            "{:>4} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8}  {:<20} {at}",
            r.id,
            format!("{}/{}", r.turn, r.step),
            r.bytes,
            r.tokens,
            r.shared_tokens,
            r.expected_cached_tokens,
            usage(r.cached_tokens),
            usage(r.prompt_tokens),
            r.uncached_tokens,
            r.cause.as_str()
        );
    }
    let t = &ex.totals;
    out!(
        "total: {} prompt tokens reported, {} read from cache, {} expected cacheable",
        t.prompt_tokens,
        t.cached_tokens,
        t.expected_cached_tokens
    );
    let spend: Vec<String> = t
        .spend
        .iter()
        .filter(|(k, n)| *n > 0 || ["growth", "header-change", "resume", "compaction", "retry-after-overflow"].contains(&k.as_str()))
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    out!("prompt spend (uncached tokens) by cause: {}", spend.join(", "));
    if t.cache_write_tokens > 0 {
        out!(
            "cache writes: {} tokens, re-write factor {:.2} (tokens written / the largest prompt)",
            t.cache_write_tokens,
            t.rewrite_factor
        );
    }
    if let Some(c) = &t.cost {
        let by: Vec<String> = c.by_cause.iter().filter(|(_, v)| *v > 0.0).map(|(k, v)| format!("{k} {v:.4}")).collect();
        out!("cost: {:.4} (with no cache: {:.4}); uncached cost by cause: {}", c.total, c.no_cache, by.join(", "));
        if c.unpriced > 0 {
            out!("note: {} request(s) have no price in the table", c.unpriced);
        }
    }
    if t.diagnostics_disagreements > 0 {
        let ids: Vec<&str> =
            ex.requests.iter().filter(|r| r.diagnostics.as_ref().is_some_and(|d| d.agrees == Some(false))).map(|r| r.id.as_str()).collect();
        out!(
            "warning: the provider's cache diagnosis disagrees with the log's on {} of {} request(s): {}",
            t.diagnostics_disagreements,
            t.diagnostics_compared,
            ids.join(", ")
        );
    }
    if t.not_rebuilt > 0 {
        out!("note: {} request(s) are not rebuilt by the log (edited after they were sent): run `llmsession verify`", t.not_rebuilt);
    }
    Ok(())
}

/// `no requests`, `1 request (1)`, `4 requests (1..4)`; with `prefix` `c`: `(c1..c4)`.
fn count(n: u64, noun: &str, prefix: &str) -> String {
    match n {
        0 => format!("no {noun}s"),
        1 => format!("1 {noun} ({prefix}1)"),
        n => format!("{n} {noun}s ({prefix}1..{prefix}{n})"),
    }
}

fn explain_one(ex: &Explanation, r: &RequestReport) {
    let what = match r.kind {
        Kind::Conversation => format!("request {} (turn {} step {})", r.id, r.turn, r.step),
        Kind::Compaction => format!("summarisation request {} (after turn {} step {})", r.id, r.turn, r.step),
    };
    out!("{what}, seq {}, instance {}{}", r.seq, r.instance, r.header.as_ref().map(|h| format!(", header {h}")).unwrap_or_default());
    out!(
        "  size: {} messages ({} of the session prefix), {} cacheable bytes, {} tokens ({})",
        r.messages,
        r.prefix_len,
        r.bytes,
        r.tokens,
        ex.counter
    );
    if !r.rebuilt {
        out!("  the log does not rebuild this request (its digest differs from the recorded one)");
    }
    match &r.compared_with {
        None => out!("  first request: nothing before it could be cached"),
        Some(c) => {
            out!(
                "  compared with request {c}: {} bytes shared, {} tokens, {} leading messages",
                r.shared_bytes,
                r.shared_tokens,
                r.shared_messages
            );
            match &r.divergence {
                None => out!("  extends it: everything it sent can be read from the cache"),
                Some(d) => {
                    out!("  diverges at: {}, after {} shared bytes", d.component.describe(), d.at_byte);
                    out!("  because of: {} ({})", d.event.as_str(), d.because);
                }
            }
        }
    }
    match &r.usage {
        Some(_) => out!(
            "  provider: prompt {} tokens, cached {}; expected cacheable {}",
            r.prompt_tokens,
            r.cached_tokens,
            r.expected_cached_tokens
        ),
        None => out!("  provider: no usage recorded; expected cacheable {} (counted)", r.expected_cached_tokens),
    }
    out!("  prompt spend: {} uncached tokens ({}), charged to {}", r.uncached_tokens, r.spend_source, r.cause.as_str());
    let by: Vec<String> = r
        .causes
        .iter()
        .map(|c| match c.cost {
            Some(cost) => format!("{} {} ({cost:.4})", c.cause.as_str(), c.tokens),
            None => format!("{} {}", c.cause.as_str(), c.tokens),
        })
        .collect();
    out!("  by cause: {}", if by.is_empty() { "none".into() } else { by.join(", ") });
    let ttl = r.cache_rule.ttl_ms.map(|t| format!("{} s", t / 1000)).unwrap_or_else(|| "none".into());
    let gap = r.gap_ms.map(|g| format!("{} s after the request compared with; ", g / 1000)).unwrap_or_default();
    out!("  cache rule: {gap}TTL {ttl}, minimum {} tokens", r.cache_rule.min_tokens);
    if r.cache_write_tokens > 0 {
        out!("  cache writes: {} tokens, re-write factor {:.2}", r.cache_write_tokens, r.rewrite_factor.unwrap_or(0.0));
    }
    if let Some(edits) = r.usage.as_ref().and_then(|u| u.context_edits.as_ref()) {
        for e in edits {
            let what = match (e.cleared_tool_uses, e.cleared_thinking_turns) {
                (Some(n), _) => format!("{n} tool use(s)"),
                (None, Some(n)) => format!("{n} thinking turn(s)"),
                _ => "context".into(),
            };
            out!("  the provider cleared {what}, {} input tokens, before the model saw it ({})", e.cleared_input_tokens, e.kind);
        }
    }
    if let Some(d) = &r.diagnostics {
        let verdict = match d.agrees {
            Some(true) => "agrees",
            Some(false) => "DISAGREES",
            None => "not comparable",
        };
        out!("  provider diagnosis: {} (the log says {}): {verdict}", d.provider, d.ours);
    }
    if let Some(c) = &r.cost {
        out!(
            "  cost: {:.4} (uncached {:.4}, cache reads {:.4}, output {:.4}); with no cache {:.4}",
            c.total,
            c.uncached,
            c.cached,
            c.output,
            c.no_cache
        );
    }
}

fn cmd_show(path: &str, step: usize, render: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let (seen, total) = request_at(path, step)?;
    let s = seen.filter(|_| step > 0).ok_or_else(|| {
        Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("there is no request {step} (the log has {total} requests)"))
    })?;
    let v: Value = serde_json::from_slice(&s.body).map_err(|e| Failure::of(e.into()))?;
    let out = match render {
        None => v,
        Some(r) => renderer(r)?.render(&v, &RenderOptions::with_prefix_len(s.prefix_len)).map_err(Failure::of)?,
    };
    // The body is JSON either way: pretty for a reader, one line for a program.
    if as_json {
        out!("{out}");
    } else {
        out!("{}", serde_json::to_string_pretty(&out).unwrap());
        // What the model saw differs when the provider edited the request (stderr: stdout is
        // the body).
        if !s.edits.is_empty() {
            eprintln!("note: the provider edited this request before the model saw it: {}", describe_edits(&s.edits));
        }
    }
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

fn cmd_headers(path: &str, as_json: bool) -> Result<(), Failure> {
    let checked = read_log(path)?;
    let mut log = Log::new();
    let mut prev: Option<EpochHeader> = None;
    let mut rows = Vec::new();
    for ev in checked.events() {
        log.append(ev).map_err(|e| Failure::of(e).context(format!("line {}", ev.seq + 2)))?;
        if ev.ty != "request/header" && ev.ty != "request/header-delta" {
            continue;
        }
        let cur = log.state().headers.current().cloned().expect("folded");
        let reason = ev.data["reason"].as_str().unwrap_or("delta");
        let instance = ev.data["instance"].as_u64().unwrap_or(0);
        let system_lines = if cur.system_str().is_empty() { 0 } else { cur.system_str().split('\n').count() };
        let changes = prev.as_ref().map(|p| describe_change(p, &cur));
        // A change seen at a resume snapshot is drift: the host came back with another header.
        let drift = reason == "resume" && changes.as_ref().is_some_and(|c| !c.is_empty());
        if as_json {
            rows.push(json!({
                "seq": ev.seq, "reason": reason, "instance": instance, "provider": cur.config.provider,
                "model": cur.config.model, "systemLines": system_lines, "tools": cur.tools_slice().len(),
                "prefixMessages": cur.prefix().len(), "changes": changes.clone().unwrap_or_default(), "drift": drift,
            }));
            prev = Some(cur);
            continue;
        }
        out!(
            "seq {:>6}  {:<8} instance {:<3} {}/{}  system {} line(s), {} tool(s), prefix {} message(s)",
            ev.seq,
            reason,
            instance,
            cur.config.provider,
            cur.config.model,
            system_lines,
            cur.tools_slice().len(),
            cur.prefix().len()
        );
        if let Some(changes) = changes {
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
    if as_json {
        out!("{}", json!({"session": checked.header().id, "headers": rows}));
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), Failure> {
    let json = cli.json;
    match &cli.command {
        Command::Verify { log, render, progress, no_progress } => {
            let bar = if *progress {
                Some(true)
            } else if *no_progress {
                Some(false)
            } else {
                None
            };
            cmd_verify(log, render.as_deref(), json, bar)
        }
        Command::Checkpoint { log } => cmd_checkpoint(log, json),
        Command::Stats { log } => cmd_stats(log, json),
        Command::Explain { log, step, prices, cache_rules } => {
            cmd_explain(log, step.as_deref(), prices.as_deref(), cache_rules.as_deref(), json)
        }
        Command::Show { log, step, render } => cmd_show(log, *step, render.as_deref(), json),
        Command::Headers { log } => cmd_headers(log, json),
        Command::Sessions { url } => cmd_sessions(url, json),
        Command::StoreCheck { url, cases } => cmd_store_check(url, cases, json),
    }
}

fn main() -> ExitCode {
    // --help and --version print on stdout and exit 0; a usage error prints on stderr and
    // exits 2 (clap's own handling).
    let cli = Cli::parse();
    let json = cli.json;
    let given = cli.command.log().to_string();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            // Every message names LOG as `redact` shows it; should a message still hold the URL
            // as given, it is shown that way too.
            let f = f.redacting(&given, &redact(&given));
            if json {
                out!("{}", f.to_json());
            }
            eprintln!("llmsession: {}", f.message);
            ExitCode::from(f.exit as u8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_read_as_words() {
        assert_eq!(count(0, "summarisation request", "c"), "no summarisation requests");
        assert_eq!(count(1, "summarisation request", "c"), "1 summarisation request (c1)");
        assert_eq!(count(3, "summarisation request", "c"), "3 summarisation requests (c1..c3)");
        assert_eq!(count(1, "request", ""), "1 request (1)");
        assert_eq!(count(4, "request", ""), "4 requests (1..4)");
    }
}
