//! `llmsession`: look inside a session log (docs/cli.md has every command, its options, its JSON
//! output and the exit codes).
//!
//! ```text
//! llmsession verify LOG [--render openai|openai-responses|anthropic|gemini|gemini-interactions] [--json]
//! llmsession stats LOG [--json]
//! llmsession explain LOG [--step ID | --tree] [--prices FILE] [--cache-rules FILE] [--json]
//! llmsession explain --from claude-code|codex FILE --prices FILE [--cache-rules FILE] [--json]
//! llmsession simulate LOG... --prices FILE [--cache-rules FILE] [--options FILE] [--from claude-code|codex] [--json]
//! llmsession show LOG --step N [--render openai|openai-responses|anthropic|gemini|gemini-interactions] [--json]
//! llmsession headers LOG [--json]
//! llmsession sessions URL [--json]
//! llmsession tree LOG [--json]
//! ```
//!
//! LOG is a JSONL file path or a store URL: `file:PATH`, or
//! `postgres://user:password@host:port/dbname?session=ID` (or `postgresql://`) for a session in
//! PostgreSQL. Every command reads without a lock or lease and writes nothing. The command line
//! is parsed by clap: options go anywhere after the command, `--step=2` and `--step 2` are the
//! same, and anything it does not know is a usage error (exit 2).

use llmsession::cache_rules::CacheRules;
use llmsession::explain::tree::explain_tree;
use llmsession::explain::{explain_log, explain_log_with, ExplainSettings, Explanation, Kind, RequestReport};
use llmsession::header::delta::diff;
use llmsession::log::load::{read_checked, CheckedLog};
use llmsession::log::Log;
use llmsession::prices::PriceTable;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{verify_store, RequestWalk, VerifyProgress};
use llmsession::store::url::{list_sessions, open_store, redact, UrlOptions};
use llmsession::store::{JsonlStore, Store, StoreContents};
use llmsession::timeline::gaps::{gap_report, TimelineGap};
use llmsession::timeline::simulate::{aggregate, simulate, Settings, SimulateOptions, TimelineReport};
use llmsession::timeline::{self, Source, Timeline};
use llmsession::tokens::Estimator;
use llmsession::tree::Tree;
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
    let list = list_sessions(&url, None, None, None).map_err(store_failure)?;
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
            let lookup = llmsession::request::StoreLookup::new(&mut *store);
            let events = |seq| lookup.event(seq);
            let mut walk = RequestWalk::at(&w.header, w.log, Some(&events));
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
            if r.keepalives + r.decisions > 0 {
                out!(
                    "ok: {} keep-warm requests rebuilt byte for byte, {} cache clock decisions decided again from the log",
                    r.keepalives,
                    r.decisions
                );
            }
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
    let mut with_usage = Vec::new();
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
        with_usage.push(r.usage.is_some());
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
    let mut without_usage = 0;
    for (r, &usage) in rows.iter().zip(&with_usage) {
        // serde_json's Display ignores width and alignment: format the numbers as strings
        let n = |key: &str| r[key].to_string();
        // Prompt, cached and hit are the provider's: "-" where the log has no usage.
        without_usage += usize::from(!usage);
        let p = |key: &str| if usage { n(key) } else { "-".into() };
        let hit = if usage { format!("{:.0}%", r["hitRatio"].as_f64().unwrap_or(0.0) * 100.0) } else { "-".into() };
        out!(
            "{:>4} {:>5} {:>4} {:>8} {:>7} {:>8} {:>5} {:>8} {:>8} {:>6}",
            n("request"),
            n("turn"),
            n("step"),
            n("messages"),
            n("sharedWithPrevious"),
            r["header"].as_str().unwrap_or("-"),
            n("compactionsBefore"),
            p("promptTokens"),
            p("cachedTokens"),
            hit
        );
    }
    let ratio = if prompt_total > 0 { cached_total as f64 * 100.0 / prompt_total as f64 } else { 0.0 };
    out!("total: {prompt_total} prompt tokens reported, {cached_total} read from cache ({ratio:.0}%)");
    if without_usage > 0 {
        out!("note: {without_usage} request(s) have no usage in the log (-): the provider reported none; `llmsession explain` counts their tokens");
    }
    Ok(())
}

/// A JSON option file (`--prices`, `--cache-rules`, `--options`), as JSON.
fn json_file(path: &str, flag: &str) -> Result<Value, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("{flag} {path}: cannot read it: {e}")))?;
    serde_json::from_str(&text).map_err(|e| Failure::new(Exit::Other, ErrorKind::InvalidInput, format!("{flag} {path}: not JSON: {e}")))
}

/// A JSON option file, parsed by `parse`.
fn option_file<T>(path: &str, flag: &str, parse: fn(&Value) -> llmsession::Result<T>) -> Result<T, Failure> {
    parse(&json_file(path, flag)?).map_err(|e| Failure::of(e).context(format!("{flag} {path}")))
}

/// The timelines of LOG: our own log, read as every reader reads one, or with `--from` another
/// harness's transcript (read-only; a line its format does not write is a bad log, exit 3).
fn timelines(path: &str, from: Option<&str>) -> Result<Vec<Timeline>, Failure> {
    let Some(format) = from else {
        return Ok(vec![timeline::log::read_log(&read_log(path)?).map_err(|e| Failure::of(e).context(redact(path)))?]);
    };
    let source = Source::parse(format).map_err(Failure::of)?;
    let bytes = std::fs::read(path).map_err(|e| Failure::new(Exit::Store, ErrorKind::Storage, format!("{path}: cannot read it: {e}")))?;
    timeline::read(source, &bytes).map_err(|e| Failure::with_exit(e, Exit::BadLog).context(format!("{path} ({format} transcript)")))
}

/// `12 s`, `4.5 min`, `2.0 h`.
fn duration(ms: u64) -> String {
    match ms / 1000 {
        s @ 0..=119 => format!("{s} s"),
        s @ 120..=7199 => format!("{:.1} min", s as f64 / 60.0),
        s => format!("{:.1} h", s as f64 / 3600.0),
    }
}

fn cmd_simulate(
    logs: &[String],
    prices: &str,
    rules: Option<&str>,
    from: Option<&str>,
    options: Option<&str>,
    as_json: bool,
) -> Result<(), Failure> {
    let prices_json = json_file(prices, "--prices")?;
    let rules_json = rules.map(|r| json_file(r, "--cache-rules")).transpose()?;
    let settings = Settings {
        prices: PriceTable::from_value(&prices_json).map_err(|e| Failure::of(e).context(format!("--prices {prices}")))?,
        cache_rules: rules_json
            .as_ref()
            .map(CacheRules::from_value)
            .transpose()
            .map_err(|e| Failure::of(e).context(format!("--cache-rules {}", rules.unwrap_or(""))))?
            .unwrap_or_default(),
        options: options.map(|o| option_file(o, "--options", SimulateOptions::from_value)).transpose()?.unwrap_or_default(),
    };
    let mut reports: Vec<(String, TimelineReport)> = Vec::new();
    for path in logs {
        for t in timelines(path, from)? {
            let r = simulate(&t, &settings).map_err(|e| Failure::of(e).context(redact(path)))?;
            reports.push((redact(path), r));
        }
    }
    let all: Vec<TimelineReport> = reports.iter().map(|(_, r)| r.clone()).collect();
    let total = aggregate(&all);
    if as_json {
        let mut assumptions = settings.options.to_value();
        assumptions["prices"] = prices_json;
        assumptions["cacheRules"] = rules_json.unwrap_or(Value::Null);
        let list: Vec<Value> = reports
            .iter()
            .map(|(file, r)| {
                let mut v = r.to_value();
                v["file"] = json!(file);
                v
            })
            .collect();
        out!("{}", json!({"assumptions": assumptions, "timelines": list, "aggregate": total}));
        return Ok(());
    }
    out!(
        "{:<44} {:>5} {:>6} {:>10} {:>10} {:>10} {:>6} {:>10} {:>10} {:>6} {:>9}",
        "session",
        "reqs",
        "pauses",
        "threshold",
        "clock",
        "optimal",
        "ratio",
        "clock+c",
        "optimal+c",
        "ratio",
        "clock/thr"
    );
    let row = |name: &str, requests: u64, pauses: u64, p: &Value| {
        let cost = |k: &str| p[k]["cost"].as_f64().unwrap_or(0.0);
        let ratio = |k: &str| p[k]["ratio"].as_f64().map_or("-".into(), |r| format!("{r:.3}"));
        let vs = p["clock"]["vsThreshold"].as_f64().map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0));
        out!(
            "{:<44} {:>5} {:>6} {:>10.4} {:>10.4} {:>10.4} {:>6} {:>10.4} {:>10.4} {:>6} {:>9}",
            name,
            requests,
            pauses,
            cost("threshold"),
            cost("clock"),
            cost("optimal"),
            ratio("clock"),
            cost("clock+compact"),
            cost("optimal+compact"),
            ratio("clock+compact"),
            vs
        );
    };
    for (_, r) in &reports {
        let v = r.to_value();
        let name: String = if r.session.chars().count() > 44 {
            r.session.chars().take(43).chain(std::iter::once('…')).collect()
        } else {
            r.session.clone()
        };
        row(&name, r.requests as u64, r.pauses as u64, &v["policies"]);
    }
    if reports.len() > 1 {
        row("aggregate", total["requests"].as_u64().unwrap_or(0), total["pauses"].as_u64().unwrap_or(0), &total["policies"]);
    }
    let o = &settings.options;
    out!("ratio: clock ÷ optimal, clock+compact ÷ optimal+compact; clock/thr: clock against what was recorded (threshold)");
    let abandoned = |f: fn(&llmsession::timeline::simulate::Policies) -> f64| reports.iter().map(|(_, r)| f(&r.policies)).sum::<f64>();
    out!(
        "after the last request (a host that never came back): clock spent {:.4}, clock+compact {:.4} (in their costs)",
        abandoned(|p| p.clock.abandoned_cost),
        abandoned(|p| p.clock_compact.abandoned_cost)
    );
    out!(
        "assumptions: tier billing {}, margin {}, keep-warm output {}, summary {:.0} % of the region (at most {} tokens), retained tail {:.0} %, instruction {} tokens, return model {} (docs/simulate.md)",
        serde_json::to_value(o.tier_billing).unwrap().as_str().unwrap_or(""),
        duration(o.margin_ms),
        o.ping_output_tokens.map_or("the provider's smallest".into(), |n| format!("{n} token(s)")),
        o.summary_ratio * 100.0,
        o.summary_max_tokens,
        o.retained_share * 100.0,
        o.instruction_tokens,
        describe_model(&o.return_model)
    );
    for (file, r) in &reports {
        for n in &r.notes {
            out!("note: {file} ({}): {n}", r.session);
        }
    }
    Ok(())
}

/// `the default prior (counting as 100 gaps) learning the session's gaps, never returns 1.6 %`.
fn describe_model(m: &llmsession::clock::ReturnModelSpec) -> String {
    let base = match &m.gaps_ms {
        Some(g) => format!("the host's {} gap(s)", g.len()),
        None => "the default prior".into(),
    };
    let learn = if m.learn { format!(" (counting as {} gaps) learning the session's gaps", m.prior_weight) } else { String::new() };
    format!("{base}{learn}, never returns {:.1} %", m.never_returns * 100.0)
}

/// `explain --from`: the idle gaps of a transcript, priced.
fn cmd_explain_from(path: &str, format: &str, prices: Option<&str>, rules: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let prices = prices.ok_or_else(|| {
        Failure::new(Exit::Other, ErrorKind::InvalidInput, "explain --from needs --prices FILE: the idle gaps of a transcript are priced")
    })?;
    let settings = Settings {
        prices: option_file(prices, "--prices", PriceTable::from_value)?,
        cache_rules: rules.map(|p| option_file(p, "--cache-rules", CacheRules::from_value)).transpose()?.unwrap_or_default(),
        options: SimulateOptions::default(),
    };
    let mut out_json = Vec::new();
    for t in timelines(path, Some(format))? {
        let gaps: Vec<TimelineGap> = gap_report(&t, &settings).map_err(|e| Failure::of(e).context(path.to_string()))?;
        if as_json {
            out_json.push(json!({"session": t.session, "source": t.source, "requests": t.requests.len(), "notes": t.notes, "gaps": gaps}));
            continue;
        }
        out!("session {}  ({}, {} requests, {} idle gap(s))", t.session, t.source.as_str(), t.requests.len(), gaps.len());
        for n in &t.notes {
            out!("  note: {n}");
        }
        for t in &gaps {
            let g = &t.gap;
            let ttl = g.ttl_ms.map_or("none".into(), duration);
            let expired = if g.expired { "expired as recorded" } else { "read warm as recorded" };
            let paid = g.cost.as_ref().map_or(0.0, |c| c.total);
            out!(
                "request {} ({}): gap {}, TTL {ttl} ({} tier), warm prefix {} tokens, {expired}; its prompt cost {:.4}",
                g.before.as_deref().unwrap_or("-"),
                t.source_at,
                duration(g.gap_ms),
                g.tier,
                g.warm_tokens,
                paid
            );
            let options: Vec<String> = g
                .options
                .iter()
                .map(|o| {
                    let name = o.label();
                    match o.pings {
                        Some(n) if n > 0 => format!("{name} {:.4} ({n} keep-warm)", o.cost),
                        _ => format!("{name} {:.4}", o.cost),
                    }
                })
                .collect();
            out!("  each option over the gap: {}; best {}", options.join(", "), g.best.as_deref().unwrap_or("-"));
            let clock: Vec<String> = t
                .clock
                .iter()
                .filter(|d| d.decision != "none")
                .map(|d| {
                    format!("{} at {}", llmsession::clock::label(&d.decision, d.tier.as_deref()), duration(d.at.saturating_sub(g.start_at)))
                })
                .collect();
            out!("  the clock would have: {}", if clock.is_empty() { "done nothing".into() } else { clock.join(", ") });
        }
    }
    if as_json {
        out!("{}", json!({"file": path, "timelines": out_json}));
    }
    Ok(())
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
        "session {}  ({} requests, {} summarisation requests)",
        ex.session,
        ex.totals.conversation_requests,
        ex.totals.compaction_requests
    );
    out!(
        "{:>4} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8}  {:<20} diverges at",
        "req",
        "turn/step",
        "bytes",
        "tokens*",
        "shared*",
        "expected",
        "cached",
        "prompt",
        "uncached",
        "cause"
    );
    let mut counted_rows = false;
    for r in &ex.requests {
        let at = match &r.divergence {
            Some(d) => d.component.describe(),
            None if r.compared_with.is_some() => "- (extends the previous request)".into(),
            None => "- (first request)".into(),
        };
        let usage = |n: u64| if r.usage.is_some() { n.to_string() } else { "-".into() };
        // Without usage, expected and uncached are counted too: starred like the counted columns.
        let derived = |n: u64| if r.usage.is_some() { n.to_string() } else { format!("{n}*") };
        counted_rows |= r.usage.is_none();
        out!(
            "{:>4} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8}  {:<20} {at}",
            r.id,
            format!("{}/{}", r.turn, r.step),
            r.bytes,
            r.tokens,
            r.shared_tokens,
            derived(r.expected_cached_tokens),
            usage(r.cached_tokens),
            usage(r.prompt_tokens),
            derived(r.uncached_tokens),
            r.cause.as_str()
        );
    }
    out!(
        "* counted by llmsession ({}), not reported by the provider{}; prompt, cached, uncached: the provider's usage; expected: what the provider could have read from its cache, in its tokens",
        counted_by(ex.counter),
        if counted_rows { " (so are expected and uncached of a request without usage: -)" } else { "" }
    );
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
    explain_gaps(&ex);
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

/// What counted the tokens that are not the provider's: `estimate` (the built-in estimate),
/// `tokenizer`, `host`.
fn counted_by(counter: &str) -> String {
    match counter {
        "estimate" => "the built-in estimate, no tokenizer".into(),
        "tokenizer" => "the session's tokenizer".into(),
        "host" => "the host's token counter".into(),
        other => other.into(),
    }
}

/// The idle gaps (`explain::gaps`): one line each, what it cost, what each action of the cache
/// clock would have cost, and what the clock decided.
fn explain_gaps(ex: &Explanation) {
    if ex.gaps.is_empty() {
        return;
    }
    out!("idle gaps ({}):", ex.gaps.len());
    for g in &ex.gaps {
        let ttl = g.ttl_ms.map_or("no TTL".into(), |t| format!("TTL {} s", t / 1000));
        let before = g.before.as_deref().map_or("(the session ends)".to_string(), |b| format!("before {b}"));
        let mut line = format!(
            "  after {} {before}: {} s idle, {ttl} ({}), warm {} tokens, context {}{}",
            g.after,
            g.gap_ms / 1000,
            g.tier,
            g.warm_tokens,
            g.context_tokens,
            if g.expired { ", expired" } else { "" }
        );
        if g.keepalives + g.compactions > 0 {
            line.push_str(&format!("; sent {} keep-warm, {} summarisation request(s)", g.keepalives, g.compactions));
        }
        out!("{line}");
        if let Some(c) = &g.cost {
            let options: Vec<String> = g.options.iter().map(|o| format!("{} {:.4}", o.label(), o.cost)).collect();
            out!(
                "    cost {:.4} (actions {:.4}, request after it {:.4}); each action over this gap: {}; best {}",
                c.total,
                c.actions,
                c.return_,
                options.join(", "),
                g.best.as_deref().unwrap_or("-")
            );
        }
        if !g.decisions.is_empty() {
            let d: Vec<String> = g
                .decisions
                .iter()
                .map(|d| format!("{} (seq {})", llmsession::clock::label(&d.decision, d.tier.as_deref()), d.seq))
                .collect();
            out!("    the clock decided: {}", d.join(", "));
        }
    }
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
        Kind::Keepalive => format!("keep-warm request {} (after turn {} step {})", r.id, r.turn, r.step),
    };
    out!("{what}, seq {}, instance {}{}", r.seq, r.instance, r.header.as_ref().map(|h| format!(", header {h}")).unwrap_or_default());
    out!(
        "  size: {} messages ({} of the session prefix), {} cacheable bytes, {} tokens (counted by llmsession, {})",
        r.messages,
        r.prefix_len,
        r.bytes,
        r.tokens,
        counted_by(ex.counter)
    );
    if !r.rebuilt {
        out!("  the log does not rebuild this request (its digest differs from the recorded one)");
    }
    match &r.compared_with {
        None => out!("  first request: nothing before it could be cached"),
        Some(c) => {
            out!(
                "  compared with request {c}: {} bytes shared, {} tokens (counted), {} leading messages",
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
            "  provider: prompt {} tokens, cached {}; expected cacheable {} (in the provider's tokens)",
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

/// Reads the tree rooted at LOG (see `llmsession tree`).
fn read_tree(log: &str) -> Result<Tree, Failure> {
    Tree::load(log).map_err(|e| {
        let f = if matches!(e.kind(), ErrorKind::CorruptLog | ErrorKind::Reconstruction) { Failure::of(e) } else { store_failure(e) };
        f.context(redact(log))
    })
}

/// The tree line of node `i`: its branch drawing, id, kind, link and size.
fn tree_line(tree: &Tree, i: usize, lead: &str, last: bool) -> String {
    let n = &tree.nodes[i];
    let branch = if n.parent.is_none() { String::new() } else { format!("{lead}{}", if last { "└─ " } else { "├─ " }) };
    let link = match (n.kind(), n.header().spawn.as_ref().and_then(|s| s.call_id.as_deref())) {
        ("root", _) => String::new(),
        ("spawn", Some(call)) => format!("  spawned for {call} at seq {}", n.seed_length()),
        ("spawn", None) => format!("  spawned at seq {} (turn boundary)", n.seed_length()),
        _ => format!("  forked at seq {}", n.seed_length()),
    };
    let status = match n.parent {
        Some(p) if n.kind() == "spawn" && n.header().spawn.as_ref().is_some_and(|s| s.call_id.is_some()) => {
            match tree.result_seq(p, n.id()) {
                Some(seq) => format!(", answered at parent seq {seq}"),
                None => ", not answered yet".to_string(),
            }
        }
        _ => String::new(),
    };
    let requests = n.log.events().iter().filter(|e| e.ty == "step/start" && e.seq >= n.seed_length()).count();
    format!("{branch}{}{link}  ({} events, {requests} own requests{status})", n.id(), n.log.events().len())
}

fn cmd_tree(log: &str, as_json: bool) -> Result<(), Failure> {
    let tree = read_tree(log)?;
    let report = tree.verify().map_err(|e| Failure::of(e).context(redact(log)))?;
    if as_json {
        let nodes: Vec<serde_json::Value> = tree
            .nodes
            .iter()
            .zip(&report.nodes)
            .map(|(n, v)| {
                let mut o = json!({"id": n.id(), "kind": n.kind(), "depth": n.depth, "source": n.source,
                                   "seedLength": n.seed_length(), "events": n.log.events().len(), "verify": v.report});
                if let Some(p) = n.parent {
                    o["parent"] = json!(tree.nodes[p].id());
                    if let Some(seq) = tree.result_seq(p, n.id()) {
                        o["answeredAt"] = json!(seq);
                    }
                }
                if let Some(c) = n.header().spawn.as_ref().and_then(|s| s.call_id.as_deref()) {
                    o["callId"] = json!(c);
                }
                o
            })
            .collect();
        out!("{}", json!({"root": tree.root().id(), "nodes": nodes}));
        return Ok(());
    }
    // Depth first: each node's lead is its parent's plus a bar while the parent has more
    // children after it.
    let mut leads: Vec<String> = vec![String::new(); tree.nodes.len()];
    for i in 0..tree.nodes.len() {
        let kids = tree.children_of(i);
        for (k, c) in kids.iter().enumerate() {
            let last = k + 1 == kids.len();
            let lead = if tree.nodes[i].parent.is_none() { String::new() } else { leads[i].clone() };
            leads[*c] = format!("{lead}{}", if last { "   " } else { "│  " });
        }
    }
    for i in 0..tree.nodes.len() {
        let n = &tree.nodes[i];
        let (lead, last) = match n.parent {
            None => (String::new(), true),
            Some(p) => {
                let sibs = tree.children_of(p);
                let lead = if tree.nodes[p].parent.is_none() { String::new() } else { leads[p].clone() };
                (lead, sibs.last() == Some(&i))
            }
        };
        out!("{}", tree_line(&tree, i, &lead, last));
    }
    let requests: u64 = report.nodes.iter().map(|n| n.report.requests).sum();
    out!(
        "ok: {} sessions verified, every link checked ({requests} requests rebuilt, inherited ones in every node that holds them)",
        tree.nodes.len()
    );
    Ok(())
}

fn cmd_explain_tree(log: &str, prices: Option<&str>, rules: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let settings = ExplainSettings {
        prices: prices.map(|p| option_file(p, "--prices", PriceTable::from_value)).transpose()?,
        cache_rules: rules.map(|p| option_file(p, "--cache-rules", CacheRules::from_value)).transpose()?.unwrap_or_default(),
    };
    let tree = read_tree(log)?;
    let ex = explain_tree(&tree, &Estimator, &settings).map_err(|e| Failure::of(e).context(redact(log)))?;
    if as_json {
        out!("{}", serde_json::to_value(&ex).expect("a report serialises"));
        return Ok(());
    }
    print_tree_explanation(&ex);
    Ok(())
}

/// The text form of a tree explanation (also what the e2e report prints).
fn print_tree_explanation(ex: &llmsession::explain::tree::TreeExplanation) {
    let pct = |s: &llmsession::explain::tree::Spend| format!("{:.1}%", 100.0 * s.read_ratio());
    out!("tree {}  ({} sessions; tokens: {})", ex.root, ex.totals.nodes, ex.counter);
    out!(
        "{:<44} {:>5} {:>9} {:>9} {:>9} {:>8} {:>7}  {:>9} {:>7}",
        "node (own requests)",
        "reqs",
        "prompt",
        "cached",
        "uncached",
        "miss",
        "read",
        "floor",
        "floor%"
    );
    for n in &ex.nodes {
        let name = format!("{}{} {}", "  ".repeat(n.depth), n.id, if n.kind == "root" { String::new() } else { format!("[{}]", n.kind) });
        let (floor, floor_pct) = match &n.spawn_floor {
            Some(f) => (f.prompt_tokens.to_string(), pct(f)),
            None => ("-".into(), "-".into()),
        };
        out!(
            "{:<44} {:>5} {:>9} {:>9} {:>9} {:>8} {:>7}  {:>9} {:>7}",
            name,
            n.own.requests,
            n.own.prompt_tokens,
            n.own.cached_tokens,
            n.own.uncached_tokens,
            n.own.miss_tokens,
            pct(&n.own),
            floor,
            floor_pct
        );
    }
    let t = &ex.totals;
    out!(
        "tree: {} requests, {} prompt tokens, {} read from cache ({}), {} uncached ({} of them cache misses)",
        t.all.requests,
        t.all.prompt_tokens,
        t.all.cached_tokens,
        pct(&t.all),
        t.all.uncached_tokens,
        t.all.miss_tokens
    );
    out!(
        "subagents: {} requests, {} prompt tokens, {} uncached, {} of them cache misses; spawn floors {} tokens ({} read), work {} tokens; inherited prefixes {} tokens, counted once",
        t.subagents.requests,
        t.subagents.prompt_tokens,
        t.subagents.uncached_tokens,
        t.subagents.miss_tokens,
        t.spawn_floors.prompt_tokens,
        pct(&t.spawn_floors),
        t.work.prompt_tokens,
        t.inherited_tokens
    );
    if let (Some(c), Some(m)) = (t.subagents.cost, t.subagents.miss_cost) {
        out!("subagent spend: {c:.4}, of which cache-miss cost {m:.4}");
    }
    let cold = &t.cold_children;
    match (t.all.cost, cold.cost, cold.extra_cost) {
        (Some(c), Some(cc), Some(x)) => {
            out!(
                "with cold children: {} uncached tokens (+{}), cost {cc:.4} (+{x:.4} over {c:.4})",
                cold.uncached_tokens,
                cold.extra_uncached_tokens
            )
        }
        _ => out!("with cold children: {} uncached tokens (+{})", cold.uncached_tokens, cold.extra_uncached_tokens),
    }
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
        Command::Explain { log, step: _, prices, cache_rules, from: Some(from), .. } => {
            cmd_explain_from(log, from, prices.as_deref(), cache_rules.as_deref(), json)
        }
        Command::Explain { log, step, prices, cache_rules, tree, from: None } => {
            if *tree {
                cmd_explain_tree(log, prices.as_deref(), cache_rules.as_deref(), json)
            } else {
                cmd_explain(log, step.as_deref(), prices.as_deref(), cache_rules.as_deref(), json)
            }
        }
        Command::Tree { log } => cmd_tree(log, json),
        Command::Simulate { logs, prices, cache_rules, from, options } => {
            cmd_simulate(logs, prices, cache_rules.as_deref(), from.as_deref(), options.as_deref(), json)
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
