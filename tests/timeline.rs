//! Timelines and `simulate` on real, public Claude Code transcripts (docs/simulate.md, "Real
//! transcripts"): three sessions Claude Code 1.0.17 wrote, shipped as test data in the PyPI
//! package sniffly 0.1.5.
//!
//! The transcripts are read from `${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/transcripts/
//! sniffly-0.1.5/` (or `LLMSESSION_TRANSCRIPTS`); these tests fail when they are absent: run
//! `scripts/fetch-transcripts.sh` first (`make transcripts`; `make test` and `make check` do).

#[path = "support/explain_log.rs"]
mod explain_log;

use explain_log::{options, turn};
use llmsession::clock::{Action, ClockOptions};
use llmsession::log::TurnEndReason;
use llmsession::prices::PriceTable;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::timeline::simulate::{simulate, Settings};
use llmsession::timeline::RequestKind;
use llmsession::timeline::{self, gaps::gap_report, Source, Timeline};
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, Message, Role, Session};
use serde_json::json;
use std::path::PathBuf;

fn transcripts_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("LLMSESSION_TRANSCRIPTS") {
        return PathBuf::from(p);
    }
    let cache = match std::env::var_os("LLMSESSION_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/llmsession"),
    };
    cache.join("transcripts/sniffly-0.1.5")
}

/// The three sessions, by the prefix of their file names.
const SESSIONS: [(&str, usize); 3] = [("ba79134d", 24), ("d3ad4cdc", 62), ("fed8ce56", 4)];

fn read(prefix: &str) -> Timeline {
    let dir = transcripts_dir();
    let file = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the public transcripts are missing at {}: run scripts/fetch-transcripts.sh ({e})", dir.display()))
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}*.jsonl in {}: run scripts/fetch-transcripts.sh", dir.display()));
    let mut t = timeline::read(Source::ClaudeCode, &std::fs::read(file).unwrap()).unwrap();
    assert_eq!(t.len(), 1, "these sessions ran no sub-agent");
    t.remove(0)
}

/// Anthropic's published prices for Claude Sonnet 4 (per million tokens), the model of these
/// sessions.
fn settings() -> Settings {
    Settings { prices: PriceTable::from_value(&settings_json()).unwrap(), ..Default::default() }
}

#[test]
fn each_response_is_one_request_with_its_billed_usage() {
    for (prefix, n) in SESSIONS {
        let t = read(prefix);
        assert_eq!(t.requests.len(), n, "{prefix}");
        assert!(t.session.starts_with(prefix), "{}", t.session);
        assert!(t.requests.windows(2).all(|w| w[0].time <= w[1].time));
        for r in &t.requests {
            assert_eq!((r.provider.as_str(), r.model.as_str()), ("anthropic", "claude-sonnet-4-20250514"));
            assert!(r.usage.cache_read_tokens.is_some() && r.usage.cache_write_tokens.is_some());
        }
    }
    // The first request of the longest session, as its lines record it: 4 uncached tokens, 3,968
    // written, 10,215 read (the system prompt another session had cached), timed at its first
    // line.
    let t = read("d3ad4cdc");
    let r = &t.requests[0];
    assert_eq!((r.usage.input_tokens, r.usage.cache_write_tokens, r.usage.cache_read_tokens), (4, Some(3_968), Some(10_215)));
    assert_eq!(r.time, timeline::parse_rfc3339("2025-06-08T11:00:13.842Z").unwrap());
}

#[test]
fn the_recorded_policy_is_what_was_billed_and_the_optimum_bounds_every_policy() {
    let s = settings();
    for (prefix, _) in SESSIONS {
        let t = read(prefix);
        let billed: f64 = t.requests.iter().map(|r| s.prices.price(&r.provider, &r.model).unwrap().cost(&r.usage).total).sum();
        let p = simulate(&t, &s).unwrap().policies;
        assert!((p.threshold.cost - billed).abs() < 1e-9, "{prefix}: {} != {billed}", p.threshold.cost);
        assert!(p.optimal.cost <= p.clock.cost + 1e-12, "{prefix}: {p:?}");
        assert!(p.optimal.cost <= p.threshold.cost + 1e-12, "{prefix}: {p:?}");
        assert!(p.optimal_compact.cost <= p.optimal.cost + 1e-12, "{prefix}: {p:?}");
        assert!(p.optimal_compact.cost <= p.clock_compact.cost + 1e-12, "{prefix}: {p:?}");
    }
}

#[test]
fn on_the_sessions_without_pauses_the_clock_changes_nothing() {
    let s = settings();
    for prefix in ["ba79134d", "fed8ce56"] {
        let r = simulate(&read(prefix), &s).unwrap();
        assert_eq!(r.pauses, 0, "{prefix}");
        let p = &r.policies;
        // The clock: the same requests at the same cost. After the last request it is asked as
        // after any other, for a host it cannot know is gone: what it spends there (keep-warm
        // requests: the default prior expects most hosts back within minutes) is accounted
        // apart, and is all it spends.
        let c = &p.clock;
        assert!((c.cost - c.abandoned_cost - p.threshold.cost).abs() < 1e-12, "{prefix}: same requests, same cost: {c:?}");
        assert!((c.ping_cost - c.abandoned_cost).abs() < 1e-12, "{prefix}: no keep-warm request during the session: {c:?}");
        assert_eq!((c.compactions, c.tier_writes, c.cold_returns), (0, 0, 0), "{prefix}");
        // Allowed to compact, it changes nothing during the session either; what it spends after
        // the last request, for a host it cannot know is gone, is accounted.
        let c = &p.clock_compact;
        assert!((c.cost - c.abandoned_cost - p.threshold.cost).abs() < 1e-12, "{prefix}: {c:?}");
        assert_eq!((c.tier_writes, c.cold_returns), (0, 0), "{prefix}: {c:?}");
    }
}

#[test]
fn the_session_with_pauses_shows_its_expiries_and_what_each_action_would_have_cost() {
    let s = settings();
    let t = read("d3ad4cdc");
    let r = simulate(&t, &s).unwrap();
    // Two requests found their prefix expired (after 5.5 and 5.6 minutes): the only gaps long
    // enough for the clock to act (longer than the TTL less its 10-second margin; three more
    // ended 20 seconds or more before expiry).
    assert_eq!((r.pauses, r.policies.threshold.cold_returns), (2, 2));
    let gaps = gap_report(&t, &s).unwrap();
    assert_eq!(gaps.len(), 2);
    let expired: Vec<&str> = gaps.iter().filter(|g| g.gap.expired).map(|g| g.source_at.as_str()).collect();
    assert_eq!(expired, ["line 20", "line 35"]);
    let g = &gaps[1].gap;
    assert_eq!((g.after.as_str(), g.before.as_deref(), g.tier.as_str(), g.ttl_ms), ("14", Some("15"), "5m", Some(300_000)));
    // Keeping the prefix warm through that gap (one keep-warm request) is far cheaper than the
    // rewrite it paid.
    let kw = g.options.iter().find(|o| o.option == "keep-warm").unwrap();
    let expire = g.options.iter().find(|o| o.option == "let-expire").unwrap();
    assert_eq!(kw.pings, Some(1));
    assert!(kw.cost * 4.0 < expire.cost, "{:?}", g.options);
    assert!(!gaps[1].clock.is_empty());
}

#[test]
fn our_log_is_read_through_the_request_walk_with_its_usage() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1_000);
    turn(&mut a, "second", 1_400);
    // A third turn whose reply recorded no usage: left out, counted.
    a.start_turn(Message::user_text("third")).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![llmsession::Block::text("ok")]), None).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    let records: Vec<Vec<u8>> = s.export_jsonl().unwrap().lines().map(|l| l.as_bytes().to_vec()).collect();
    let t = timeline::read(Source::Llmsession, &records.join(&b'\n')).unwrap();
    assert_eq!(t.len(), 1);
    let t = &t[0];
    assert_eq!((t.source, t.session.as_str()), (Source::Llmsession, s.id().as_str()));
    assert_eq!(t.requests.len(), 4);
    assert!(t.requests.iter().all(|r| r.kind == RequestKind::Conversation && r.provider == "openai" && r.model == "gpt-5"));
    let prompts: Vec<u64> = t.requests.iter().map(|r| r.prompt_tokens()).collect();
    assert_eq!(prompts, [1_000, 1_100, 1_400, 1_500]);
    assert_eq!(t.requests[1].usage.cache_read_tokens, Some(1_000));
    assert_eq!(t.notes, ["1 request(s) without recorded usage left out"]);
    assert!(t.requests[0].at.starts_with("seq "), "{}", t.requests[0].at);
    // A damaged log is refused, naming the line, as every reader refuses it.
    let mut bad = records.clone();
    bad[3] = b"{not json".to_vec();
    let e = timeline::read(Source::Llmsession, &bad.join(&b'\n')).unwrap_err();
    assert!(e.message().contains("line 4"), "{}", e.message());
}

/// An Anthropic response body with this usage (5-minute writes).
fn anthropic_reply(read: u64, write: u64) -> String {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
           "content": [{"type": "text", "text": "ok"}],
           "usage": {"input_tokens": 40, "output_tokens": 20, "cache_read_input_tokens": read,
                     "cache_creation_input_tokens": write, "cache_creation": {"ephemeral_5m_input_tokens": write}}})
    .to_string()
}

#[test]
fn a_keep_warm_request_of_the_log_is_what_the_recording_paid_and_no_other_policy_replays() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, AgentOptions::new(CallConfig::new("anthropic", "claude-sonnet-4-5"))).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    let turn = |a: &mut Agent, read: u64, write: u64| {
        a.start_turn(Message::user_text("go on")).unwrap();
        a.next_body(&CancelToken::new()).unwrap();
        a.record_body(&anthropic_reply(read, write)).unwrap();
        a.end_turn(TurnEndReason::Completed).unwrap();
    };
    turn(&mut a, 0, 20_000);
    // The clock, asked 8 seconds before expiry for a host that comes back after 20 minutes,
    // keeps warm.
    let sent = s.with_log(|l| (0..l.len() as u64).rev().map(|i| l.event(i).unwrap()).find(|e| e.ty == "step/start").unwrap().time);
    let o = json!({"prices": settings_json(), "now": sent + 292_000, "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}});
    let r = a.cache_clock(&ClockOptions::from_value(Some(&o)).unwrap()).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    a.keepalive_body().unwrap();
    a.record_body(&anthropic_reply(20_040, 0)).unwrap();
    turn(&mut a, 20_040, 100);
    let records: Vec<Vec<u8>> = s.export_jsonl().unwrap().lines().map(|l| l.as_bytes().to_vec()).collect();
    let t = timeline::read(Source::Llmsession, &records.join(&b'\n')).unwrap().remove(0);
    let kinds: Vec<RequestKind> = t.requests.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RequestKind::Conversation, RequestKind::Keepalive, RequestKind::Conversation]);
    assert_eq!(t.requests[1].usage.cache_read_tokens, Some(20_040));
    let set = settings();
    let ping = set.prices.price("anthropic", "claude-sonnet-4-5").unwrap().cost(&t.requests[1].usage).total;
    let r = simulate(&t, &set).unwrap();
    // Two requests replayed; the recording paid its keep-warm request, the others send their own.
    assert_eq!(r.requests, 2);
    let p = &r.policies;
    assert_eq!(p.threshold.pings, 1);
    assert!((p.threshold.ping_cost - ping).abs() < 1e-12, "{p:?}");
    let billed: f64 = t.requests.iter().map(|r| set.prices.price(&r.provider, &r.model).unwrap().cost(&r.usage).total).sum();
    assert!((p.threshold.cost - billed).abs() < 1e-9, "{} != {billed}", p.threshold.cost);
    assert_eq!(p.optimal.pings, 0, "a gap of seconds in the log's own times needs none: {p:?}");
}

/// The price table of [`settings`], as JSON.
fn settings_json() -> serde_json::Value {
    json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}})
}
