//! `llmsession simulate` and `llmsession explain --from`: the policies' costs for a log and for
//! other harnesses' transcripts, in text and JSON, and their errors.

#[path = "../../tests/support/damaged_log.rs"]
mod damaged_log;
#[path = "../../tests/support/explain_log.rs"]
mod explain_log;
use explain_log::{options, turn};
use llmsession::{Agent, Session};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    f.to_str().unwrap().to_string()
}

const OPENAI: &str = r#"{"openai/gpt-5": {"input": 1.25, "cachedInput": 0.125, "output": 10}}"#;
const ANTHROPIC: &str = r#"{"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}"#;

/// A log of three turns (two requests each) whose second turn starts 20 minutes after the
/// first: the log's times are real, so every event from the second turn on is moved (the chain
/// sealed again).
fn paused_log(dir: &Path) -> String {
    let path = dir.join("s.jsonl");
    let (s, _) = Session::open_jsonl(&path, Default::default()).unwrap();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 20_000);
    turn(&mut a, "second", 20_400);
    turn(&mut a, "third", 20_800);
    a.dispose().unwrap();
    drop(s);
    let text = std::fs::read_to_string(&path).unwrap();
    let recs: Vec<String> = text.lines().map(str::to_string).collect();
    let second = recs.iter().enumerate().filter(|(_, r)| r.contains("\"type\":\"turn/start\"")).nth(1).unwrap().0;
    let moved: Vec<String> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i < second {
                return r.clone();
            }
            let v: Value = serde_json::from_str(r).unwrap();
            let t = v["time"].as_u64().unwrap();
            r.replace(&format!("\"time\":{t}"), &format!("\"time\":{}", t + 20 * 60_000))
        })
        .collect();
    let sealed = damaged_log::reseal(&moved);
    std::fs::write(&path, sealed.join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn simulate_prices_a_log_under_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    let log = paused_log(dir.path());
    let prices = write(dir.path(), "prices.json", OPENAI);
    let (code, out, err) = run(&["simulate", &log, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let t = &v["timelines"][0];
    assert_eq!((t["source"].as_str(), t["requests"].as_u64(), t["pauses"].as_u64()), (Some("llmsession"), Some(6), Some(1)));
    let p = &t["policies"];
    let cost = |k: &str| p[k]["cost"].as_f64().unwrap_or_else(|| panic!("{k}: {p}"));
    // What was recorded is what explain prices.
    let (_, ex, _) = run(&["explain", &log, "--prices", &prices, "--json"]);
    let ex: Value = serde_json::from_str(ex.trim()).unwrap();
    assert!((cost("threshold") - ex["totals"]["cost"]["total"].as_f64().unwrap()).abs() < 1e-9, "{p}");
    // The optimum bounds the online clock and the recording.
    assert!(cost("optimal") <= cost("clock") + 1e-12 && cost("optimal") <= cost("threshold") + 1e-12, "{p}");
    assert!(cost("optimal+compact") <= cost("clock+compact") + 1e-12, "{p}");
    assert_eq!(p["optimal"]["ratio"], 1.0);
    assert!((p["clock"]["ratio"].as_f64().unwrap() - cost("clock") / cost("optimal")).abs() < 1e-12);
    assert_eq!(v["assumptions"]["marginMs"], 10_000);
    assert_eq!(v["assumptions"]["prices"]["openai/gpt-5"]["input"], 1.25);
    assert_eq!(v["aggregate"]["timelines"], 1);
    // Twice the same log: the aggregate sums them; the text shows an aggregate row.
    let (code, out, _) = run(&["simulate", &log, &log, "--prices", &prices]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.lines().next().unwrap().starts_with("session"), "{out}");
    let agg = out.lines().find(|l| l.starts_with("aggregate")).unwrap_or_else(|| panic!("{out}"));
    assert!(agg.split_whitespace().nth(1) == Some("12"), "{agg}");
    assert!(out.contains("assumptions: tier billing written, margin 10 s"), "{out}");
}

/// A Claude Code transcript written from the format's shape: three responses (the first split
/// over two lines), the third after a 20-minute pause that expired the cache, and a sub-agent.
fn transcript() -> String {
    let line = |uuid: &str, ts: &str, id: &str, read: u64, write: u64, out: u64, side: bool| {
        format!(
            r#"{{"parentUuid":null,"isSidechain":{side},"userType":"external","sessionId":"cc-1","version":"1.0.90","type":"assistant","uuid":"{uuid}","timestamp":"{ts}","requestId":"req_{id}","message":{{"id":"msg_{id}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{{"input_tokens":4,"cache_creation_input_tokens":{write},"cache_read_input_tokens":{read},"cache_creation":{{"ephemeral_5m_input_tokens":{write},"ephemeral_1h_input_tokens":0}},"output_tokens":{out}}}}}}}"#
        )
    };
    [
        r#"{"type":"summary","summary":"Fixture","leafUuid":"a3"}"#.to_string(),
        r#"{"parentUuid":null,"isSidechain":false,"type":"user","sessionId":"cc-1","uuid":"u1","timestamp":"2025-09-01T10:00:00.000Z","message":{"role":"user","content":"go"}}"#.to_string(),
        line("a1", "2025-09-01T10:00:03.000Z", "A", 10_000, 30_000, 2, false),
        line("a2", "2025-09-01T10:00:04.000Z", "A", 10_000, 30_000, 90, false),
        line("a3", "2025-09-01T10:00:20.000Z", "B", 40_000, 1_000, 50, false),
        line("s1", "2025-09-01T10:00:30.000Z", "S", 0, 5_000, 20, true),
        line("a4", "2025-09-01T10:20:20.000Z", "C", 0, 42_000, 60, false),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn simulate_and_explain_read_a_claude_code_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "cc.jsonl", &transcript());
    let prices = write(dir.path(), "prices.json", ANTHROPIC);
    let (code, out, err) = run(&["simulate", "--from", "claude-code", &file, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let tl = v["timelines"].as_array().unwrap();
    // The main conversation, then the sub-agent as a timeline of its own.
    assert_eq!(tl.len(), 2, "{v}");
    assert_eq!((tl[0]["session"].as_str(), tl[0]["requests"].as_u64(), tl[0]["pauses"].as_u64()), (Some("cc-1"), Some(3), Some(1)));
    assert_eq!((tl[1]["session"].as_str(), tl[1]["requests"].as_u64()), (Some("cc-1/agent-s1"), Some(1)));
    let p = &tl[0]["policies"];
    // Recorded: 4 + 30,000 written + 10,000 read + 92 out; 4 + 1,000 + 40,000 + 50; 4 + 42,000 + 60.
    let m = 1e6;
    let billed = (4.0 * 3.0 + 30_000.0 * 3.75 + 10_000.0 * 0.3 + 90.0 * 15.0) / m
        + (4.0 * 3.0 + 1_000.0 * 3.75 + 40_000.0 * 0.3 + 50.0 * 15.0) / m
        + (4.0 * 3.0 + 42_000.0 * 3.75 + 60.0 * 15.0) / m;
    assert!((p["threshold"]["cost"].as_f64().unwrap() - billed).abs() < 1e-9, "{p}");
    assert_eq!(p["threshold"]["coldReturns"], 1);
    for k in ["threshold", "clock", "optimal", "clock+compact", "optimal+compact"] {
        assert!(p[k]["cost"].as_f64().is_some(), "{k}: {p}");
    }
    // The pause cost a rewrite of 41,000 tokens; the optimum keeps warm or writes the hour tier.
    assert!(p["optimal"]["cost"].as_f64().unwrap() < billed * 0.8, "{p}");
    assert_eq!(p["optimal"]["coldReturns"], 0, "{p}");

    let (code, out, err) = run(&["explain", "--from", "claude-code", &file, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let g = &v["timelines"][0]["gaps"][0];
    assert_eq!((g["after"].as_str(), g["before"].as_str(), g["gapMs"].as_u64()), (Some("2"), Some("3"), Some(1_200_000)));
    assert_eq!((g["expired"].as_bool(), g["tier"].as_str(), g["sourceAt"].as_str()), (Some(true), Some("5m"), Some("line 7")));
    let names: Vec<String> = g["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| match o["tier"].as_str() {
            Some(t) => format!("{} {t}", o["option"].as_str().unwrap()),
            None => o["option"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(names, ["let-expire", "keep-warm", "keep-warm 1h", "compact", "tier 1h"]);
    // One keep-warm request at the hour tier bridges the 20 minutes (four at the 5-minute tier).
    assert_eq!((g["options"][1]["pings"].as_u64(), g["options"][2]["pings"].as_u64()), (Some(4), Some(1)), "{g}");
    assert!(g["clock"].as_array().is_some_and(|c| !c.is_empty()), "{g}");
    let (code, out, _) = run(&["explain", "--from", "claude-code", &file, "--prices", &prices]);
    assert_eq!(code, Some(0));
    assert!(out.contains("session cc-1  (claude-code, 3 requests, 1 idle gap(s))"), "{out}");
    assert!(
        out.contains("request 3 (line 7): gap 20.0 min, TTL 5.0 min (5m tier), warm prefix 41004 tokens, expired as recorded"),
        "{out}"
    );
}

fn cache_dir() -> PathBuf {
    match std::env::var_os("LLMSESSION_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/llmsession"),
    }
}

#[test]
fn simulate_reads_the_public_transcripts() {
    let dir = std::env::var_os("LLMSESSION_TRANSCRIPTS").map_or_else(|| cache_dir().join("transcripts/sniffly-0.1.5"), PathBuf::from);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the public transcripts are missing at {}: run scripts/fetch-transcripts.sh ({e})", dir.display()))
        .map(|e| e.unwrap().path().to_str().unwrap().to_string())
        .filter(|p| p.ends_with(".jsonl"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    let tmp = tempfile::tempdir().unwrap();
    let prices = write(tmp.path(), "prices.json", ANTHROPIC);
    let mut args = vec!["simulate", "--from", "claude-code", "--prices", &prices, "--json"];
    args.extend(files.iter().map(String::as_str));
    let (code, out, err) = run(&args);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["aggregate"]["timelines"].as_u64(), v["aggregate"]["requests"].as_u64()), (Some(3), Some(90)));
    for t in v["timelines"].as_array().unwrap() {
        let p = &t["policies"];
        if t["pauses"] == 0 {
            // The same requests at the same cost; what it spends after the last request is
            // accounted apart (`abandonedCost`).
            let c = &p["clock"];
            let during = c["cost"].as_f64().unwrap() - c["abandonedCost"].as_f64().unwrap();
            assert!((during - p["threshold"]["cost"].as_f64().unwrap()).abs() < 1e-12, "{t}");
        }
        assert!(p["optimal"]["cost"].as_f64().unwrap() <= p["clock"]["cost"].as_f64().unwrap() + 1e-12, "{t}");
    }
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let prices = write(dir.path(), "prices.json", ANTHROPIC);
    let good = transcript();
    // A line that is not JSON: a bad log (exit 3), naming the file and the line.
    let bad = write(dir.path(), "bad.jsonl", &good.replacen("{\"parentUuid\":null,\"isSidechain\":false,\"type\":\"user\"", "{oops", 1));
    let (code, out, err) = run(&["simulate", "--from", "claude-code", &bad, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains(&format!("{bad} (claude-code transcript): line 2: not JSON")), "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["ok"].as_bool(), v["error"]["line"].as_u64()), (Some(false), Some(2)));
    // A usage field that is not a token count.
    let bad = write(dir.path(), "bad2.jsonl", &good.replace("\"output_tokens\":60", "\"output_tokens\":\"sixty\""));
    let (code, _, err) = run(&["explain", "--from", "claude-code", &bad, "--prices", &prices]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("line 7: message.usage.output_tokens: expected a non-negative integer (a token count)"), "{err}");
    // A Claude Code transcript read as a Codex rollout.
    let file = write(dir.path(), "cc.jsonl", &good);
    let (code, _, err) = run(&["simulate", "--from", "codex", &file, "--prices", &prices]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("not a Codex rollout"), "{err}");
    // No price for the model: exit 1, naming it.
    let openai = write(dir.path(), "openai.json", OPENAI);
    let (code, _, err) = run(&["simulate", "--from", "claude-code", &file, "--prices", &openai]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no price for anthropic/claude-sonnet-4-5-20250929 (request at line 3)"), "{err}");
    // A missing file: the store could not be read (exit 4).
    let (code, _, err) = run(&["simulate", "--from", "claude-code", "/nonexistent/x.jsonl", "--prices", &prices]);
    assert_eq!(code, Some(4), "{err}");
    // Usage errors (exit 2): no --prices, an unknown format; explain --from without prices is
    // exit 1; a bad option names its field.
    assert_eq!(run(&["simulate", &file]).0, Some(2));
    assert_eq!(run(&["simulate", "--from", "gemini-cli", &file, "--prices", &prices]).0, Some(2));
    let (code, _, err) = run(&["explain", "--from", "claude-code", &file]);
    assert_eq!(code, Some(1));
    assert!(err.contains("explain --from needs --prices FILE"), "{err}");
    let opts = write(dir.path(), "o.json", r#"{"marginMs": "soon"}"#);
    let (code, _, err) = run(&["simulate", "--from", "claude-code", &file, "--prices", &prices, "--options", &opts]);
    assert_eq!(code, Some(1));
    assert!(err.contains("options.marginMs"), "{err}");
}

/// A Codex rollout written from the format's shape: five responses, the fourth after a
/// 15-minute pause that expired OpenAI's in-memory cache.
fn rollout() -> String {
    let mut lines = vec![
        r#"{"timestamp":"2025-10-01T09:00:00.000Z","type":"session_meta","payload":{"id":"cx-1","model_provider":"openai","cli_version":"0.46.0"}}"#.to_string(),
        r#"{"timestamp":"2025-10-01T09:00:01.000Z","type":"turn_context","payload":{"cwd":"/p","model":"gpt-5-codex"}}"#.to_string(),
    ];
    let (mut t, mut total, mut ctx) = (5u64, (0u64, 0u64, 0u64), 9_000u64);
    for (i, (gap, cached)) in [(0u64, 0u64), (20, 9_000), (30, 10_000), (900, 0), (10, 12_500)].into_iter().enumerate() {
        t += gap;
        total = (total.0 + ctx, total.1 + cached, total.2 + 100);
        lines.push(format!(
            r#"{{"timestamp":"2025-10-01T09:{:02}:{:02}.000Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{},"cached_input_tokens":{},"output_tokens":{}}},"last_token_usage":{{"input_tokens":{ctx},"cached_input_tokens":{cached},"output_tokens":100}}}}}}}}"#,
            t / 60,
            t % 60,
            total.0,
            total.1,
            total.2
        ));
        ctx += if i == 2 { 2_500 } else { 1_000 };
    }
    lines.join("\n") + "\n"
}

#[test]
fn simulate_and_explain_read_a_codex_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "rollout.jsonl", &rollout());
    let prices = write(dir.path(), "prices.json", r#"{"openai": {"input": 1.25, "cachedInput": 0.125, "output": 10}}"#);
    let (code, out, err) = run(&["simulate", "--from", "codex", &file, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let t = &v["timelines"][0];
    assert_eq!(
        (t["session"].as_str(), t["source"].as_str(), t["requests"].as_u64(), t["pauses"].as_u64()),
        (Some("cx-1"), Some("codex"), Some(5), Some(1))
    );
    let p = &t["policies"];
    // OpenAI bills no writes: the expired prefix was paid as uncached input, and keeping it warm
    // (three keep-warm requests reading 11,000 tokens) is the optimum.
    assert_eq!(p["threshold"]["coldReturns"], 1);
    assert_eq!((p["optimal"]["pings"].as_u64(), p["optimal"]["coldReturns"].as_u64()), (Some(3), Some(0)), "{p}");
    assert!(p["optimal"]["cost"].as_f64().unwrap() < p["threshold"]["cost"].as_f64().unwrap(), "{p}");
    let (code, out, _) = run(&["explain", "--from", "codex", &file, "--prices", &prices]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("request 4 (line 6): gap 15.0 min, TTL 5.0 min (default tier), warm prefix 11000 tokens, expired as recorded"),
        "{out}"
    );
    assert!(out.contains("keep-warm 0.0057 (3 keep-warm)"), "{out}");
}
