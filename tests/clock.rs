//! The cache clock of an agent (issue #35, items 1 to 4): what it reads from the log, what it
//! decides, and the actions it takes, each logged so that `verify` rebuilds or recomputes it,
//! `replay` answers it and `explain` prices it.

use llmsession::clock::{Action, ClockOptions};
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::explain::{explain_records_with, ExplainSettings};
use llmsession::log::TurnEndReason;
use llmsession::prices::PriceTable;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::replay::Replay;
use llmsession::tokens::Estimator;
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, ErrorKind, Message, Session, ToolSchema};
use serde_json::{json, Value};

mod support {
    pub mod damaged_log;
}
use support::damaged_log::{bytes, index_of, reseal};

const MODEL: &str = "claude-sonnet-4-5";

fn prices() -> Value {
    json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}})
}

/// An Anthropic agent rendering bodies, with a summariser and, optionally, a policy.
fn agent(session: &Session, policy: Option<CompactionPolicy>) -> Agent {
    let mut o = AgentOptions::new(CallConfig::new("anthropic", MODEL));
    o.system = Some("You are a coding agent. ".repeat(40));
    o.tools =
        ToolSchema::list_from_value(&json!([{"name":"read","description":"Read a file","parameters":{"type":"object"}}]), "tools").unwrap();
    o.check_requests = true;
    let mut a = Agent::new(session, o).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.set_summariser(Some(std::sync::Arc::new(|_: &SummaryRequest, _: &CancelToken| {
        Ok(SummaryOutput { text: "CHECKPOINT: the user asked about the weather module.".into(), ..Default::default() })
    })));
    a.set_policy(policy).unwrap();
    a
}

/// An Anthropic response body with this usage.
fn reply(text: &str, input: u64, read: u64, write: u64) -> String {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "end_turn",
           "content": [{"type": "text", "text": text}],
           "usage": {"input_tokens": input, "output_tokens": 20, "cache_read_input_tokens": read,
                     "cache_creation_input_tokens": write, "cache_creation": {"ephemeral_5m_input_tokens": write}}})
    .to_string()
}

/// One turn of one request; the provider reports `read` tokens read and `write` written.
fn turn(a: &mut Agent, user: &str, read: u64, write: u64) {
    a.start_turn(Message::user_text(format!("{user} {}", "Tell me more about the module. ".repeat(20)))).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    a.record_body(&reply(&format!("Answer to {user}: {}", "the module reads the forecast. ".repeat(20)), 40, read, write)).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
}

/// The time of the latest event of type `ty`.
fn time_of(s: &Session, ty: &str) -> u64 {
    s.with_log(|l| (0..l.len() as u64).rev().map(|i| l.event(i).unwrap()).find(|e| e.ty == ty).unwrap().time)
}

fn count(s: &Session, ty: &str) -> usize {
    s.with_log(|l| (0..l.len() as u64).filter(|i| l.event(*i).unwrap().ty == ty).count())
}

fn options(v: Value) -> ClockOptions {
    ClockOptions::from_value(Some(&v)).unwrap()
}

fn records(s: &Session) -> Vec<String> {
    s.export_jsonl().unwrap().lines().map(str::to_string).collect()
}

#[test]
fn the_clock_reads_the_cache_from_the_log() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    // Before any request nothing is cached.
    let r = a.cache_clock(&options(json!({"prices": prices()}))).unwrap();
    assert_eq!(r.decision.decision, Action::None);
    assert!(r.decision.reason.contains("no request has been sent yet"), "{}", r.decision.reason);
    turn(&mut a, "one", 0, 30_000);
    let sent = time_of(&s, "step/start");
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": sent + 60_000}))).unwrap();
    assert_eq!(r.state.provider, "anthropic");
    assert_eq!((r.state.tier.as_str(), r.state.ttl_ms), ("5m", Some(300_000)));
    assert_eq!(r.state.last_request_at, Some(sent));
    let f = r.state.figures.as_ref().unwrap();
    assert_eq!(f.warm_tokens, 30_040, "the last request's prompt: input + read + written");
    assert!(f.context_tokens > f.warm_tokens, "the reply is in the context: {f:?}");
    assert_eq!(f.written_tokens, 30_000);
    assert!(f.keepalive);
    assert_eq!(r.decision.decision, Action::None, "{}", r.decision.reason);
    assert_eq!(r.decision.warm_until, Some(sent + 300_000));
    assert_eq!(r.decision.next_decision_at, Some(sent + 290_000));
    assert_eq!(r.recorded, None);
    // Without a price for the model nothing is decided, and it says why.
    let r = a.cache_clock(&options(json!({"prices": {"openai": {"input": 1, "cachedInput": 0.1, "output": 2}}}))).unwrap();
    assert!(r.decision.reason.contains("no price for anthropic/claude-sonnet-4-5"), "{}", r.decision.reason);
    // The host's cache rule overrides the provider's: no TTL, nothing to do ever.
    let r =
        a.cache_clock(&options(json!({"prices": prices(), "cacheRules": {"anthropic": {"ttlSeconds": null}}, "now": sent + 1}))).unwrap();
    assert_eq!(r.decision.decision, Action::None);
    assert_eq!(r.decision.warm_until, None);
    // Decisions are deterministic.
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "record": false}));
    let one = serde_json::to_string(&a.cache_clock(&o).unwrap()).unwrap();
    assert_eq!(serde_json::to_string(&a.cache_clock(&o).unwrap()).unwrap(), one);
}

#[test]
fn bad_options_name_the_field() {
    for (v, msg) in [
        (json!({"nowMs": 1}), "options.nowMs: is not a cache clock option (expected now, prices, cacheRules, returnModel, marginMs, tierBilling, compaction, record, keepWarmBudget, keepWarmTiers)"),
        (json!({"now": "soon"}), "options.now: expected a non-negative integer, got \"soon\""),
        (json!({"prices": {"anthropic": {"input": 1}}}), "prices.anthropic.cachedInput: is required"),
        (json!({"returnModel": {"gapsMs": [0]}}), "options.returnModel.gapsMs[0]: expected a positive number of milliseconds"),
        (json!({"tierBilling": "all"}), "options.tierBilling: expected \"written\" or \"prefix\", got \"all\""),
        (json!({"compaction": {"summaryRatio": 2}}), "options.compaction.summaryRatio: must be in (0, 1), got 2"),
    ] {
        let e = ClockOptions::from_value(Some(&v)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), msg);
    }
}

#[test]
fn a_keep_warm_request_is_the_cached_prefix_and_its_answer_stays_out_of_the_history() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    let last_body = {
        // The last request's body, as the renderer wrote it.
        let env = a.last_envelope().unwrap();
        let v: Value = serde_json::from_str(&env).unwrap();
        Renderer::Anthropic.render(&v, &RenderOptions::default()).unwrap()
    };
    let sent = time_of(&s, "step/start");
    // The host returns after 20 minutes: keeping warm (4 requests) beats a rewrite. (Keep-warm
    // requests at the hour tier are left out here: the next test has them.)
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "keepWarmTiers": false,
                           "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}}));
    let r = a.cache_clock(&o).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    assert!(r.decision.reason.contains("a keep-warm request costs"), "{}", r.decision.reason);
    let seq = r.recorded.expect("the decision is recorded");
    // Asking again records nothing new.
    assert_eq!(a.cache_clock(&o).unwrap().recorded, Some(seq));
    assert_eq!(count(&s, "clock/decision"), 1);
    let history = s.history_json();
    let body = a.keepalive_body().unwrap();
    assert_eq!(body.info.purpose, llmsession::request::Purpose::Keepalive);
    let mut ping: Value = serde_json::from_str(&body.json).unwrap();
    assert_eq!(ping["max_tokens"], 1, "the smallest output limit");
    let mut last = last_body.clone();
    ping.as_object_mut().unwrap().remove("max_tokens");
    last.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(ping, last, "every cacheable byte is the last request's, its cache marks included");
    // Its answer goes through the ordinary record call, into clock/keepalive-end only.
    let rec = a.record_body(&reply("ok", 0, 30_040, 0)).unwrap();
    assert_eq!(rec.tool_calls, 0);
    assert_eq!(s.event(rec.seq).unwrap().ty, "clock/keepalive-end");
    assert_eq!(s.history_json(), history, "the answer never enters the history");
    assert!(!a.keepalive_open());
    // The cache was used: the clock counts from the keep-warm request.
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": sent + 292_000, "keepWarmTiers": false}))).unwrap();
    assert_eq!(r.state.touched_at, Some(time_of(&s, "clock/keepalive")));
    // A provider error is the keep-warm request's too.
    a.keepalive_body().unwrap();
    let out = a.report_provider_error("overloaded", false, &CancelToken::new()).unwrap();
    assert_eq!(out, llmsession::agent::ProviderErrorOutcome::Recorded);
    assert_eq!(count(&s, "clock/keepalive-end"), 2);
    // The next turn goes on as usual; verify rebuilds both keep-warm requests byte for byte
    // and recomputes the decision.
    turn(&mut a, "two", 30_040, 400);
    let v = s.verify().unwrap();
    // Two decisions: keep warm, then one after the keep-warm request refreshed the cache.
    assert_eq!((v.requests, v.keepalives, v.decisions), (2, 2, 2));
    // Replay answers them.
    let mut replay = Replay::from_records(&bytes(&records(&s))).unwrap();
    assert_eq!(replay.len(), 4);
    let s2 = Session::create(
        Box::new(llmsession::store::MemoryStore::new()),
        llmsession::SessionOptions { id: Some(s.id()), ..Default::default() },
    )
    .unwrap();
    let mut b = agent(&s2, None);
    let mut envelope_of = |b: &mut Agent, keep: bool| -> Value {
        let env = if keep { b.keepalive_request().unwrap().json } else { b.last_envelope().unwrap() };
        replay.answer(env.as_bytes()).unwrap()
    };
    b.start_turn(Message::user_text(format!("one {}", "Tell me more about the module. ".repeat(20)))).unwrap();
    b.next_body(&CancelToken::new()).unwrap();
    let a1 = envelope_of(&mut b, false);
    b.record_body(&reply(a1["response"]["message"]["content"][0]["text"].as_str().unwrap(), 40, 0, 30_000)).unwrap();
    b.end_turn(TurnEndReason::Completed).unwrap();
    b.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    let k1 = envelope_of(&mut b, true);
    assert_eq!((k1["purpose"].as_str(), k1["id"].as_str(), k1["outcome"].as_str()), (Some("keepalive"), Some("k1"), Some("response")));
}

#[test]
fn a_keep_warm_request_at_the_hour_tier_is_decided_rendered_logged_and_verified() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    let sent = time_of(&s, "step/start");
    // The host returns after 20 minutes: one keep-warm request with its cache marks at the hour
    // tier bridges the pause for the price of one at the 5-minute tier (four would be needed).
    let model = json!({"gapsMs": [1_200_000], "neverReturns": 0});
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "returnModel": model}));
    let r = a.cache_clock(&o).unwrap();
    assert_eq!((r.decision.decision, r.decision.tier.as_deref()), (Action::KeepWarm, Some("1h")), "{}", r.decision.reason);
    assert!(r.decision.reason.starts_with("keep warm now, the keep-warm request at the 1h tier"), "{}", r.decision.reason);
    assert_eq!(r.decision.next_decision_at, Some(sent + 292_000 + 3_600_000 - 10_000));
    let body = a.keepalive_body().unwrap();
    let ping: Value = serde_json::from_str(&body.json).unwrap();
    assert_eq!(ping["max_tokens"], 1);
    assert_eq!(ping["system"][0]["cache_control"], json!({"type": "ephemeral", "ttl": "1h"}));
    let marks = body.json.matches("\"cache_control\"").count();
    assert!(marks >= 2 && body.json.matches("\"ttl\":\"1h\"").count() == marks, "every mark at the hour: {}", body.json);
    // Apart from the marks' TTL and the output limit, the bytes are the last request's.
    let last = {
        let env = a.last_envelope().unwrap();
        let v: Value = serde_json::from_str(&env).unwrap();
        Renderer::Anthropic.render(&v, &RenderOptions::default().with_cache_ttl(llmsession::render::CacheTtl::OneHour)).unwrap()
    };
    let (mut x, mut y) = (ping.clone(), last);
    x.as_object_mut().unwrap().remove("max_tokens");
    y.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(x, y);
    let recs = records(&s);
    assert!(recs[index_of(&recs, "clock/keepalive", 0)].contains("\"tier\":\"1h\""), "{}", recs[index_of(&recs, "clock/keepalive", 0)]);
    a.record_body(&reply("ok", 0, 30_040, 0)).unwrap();
    // From its answer on, the cache is warm for the hour; the conversation's tier is unchanged.
    let at = time_of(&s, "clock/keepalive");
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": at + 600_000, "returnModel": model, "record": false}))).unwrap();
    assert_eq!((r.state.tier.as_str(), r.state.ttl_ms, r.decision.warm_until), ("5m", Some(3_600_000), Some(at + 3_600_000)));
    assert_ne!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    // The next request goes out as usual, with the 5-minute marks; verify rebuilds the
    // keep-warm request and decides the decision again.
    turn(&mut a, "two", 30_040, 400);
    assert!(!a.last_envelope().unwrap().contains("\"ttl\""));
    let v = s.verify().unwrap();
    assert_eq!((v.requests, v.keepalives, v.decisions), (2, 1, 1));
    // After the next request the clock counts from the 5-minute tier again.
    let last = time_of(&s, "step/start");
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": last + 1_000, "record": false}))).unwrap();
    assert_eq!(r.state.ttl_ms, Some(300_000));
    // A keep-warm request sent at a tier the clock did not decide is refused by verify.
    let recs = records(&s);
    let k = index_of(&recs, "clock/keepalive", 0);
    let mut bad = recs.clone();
    bad[k] = bad[k].replace("\"tier\":\"1h\"", "\"tier\":\"5m\"");
    let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
    assert!(
        e.message().contains(
            "it was sent at the 5m tier, but the clock's last decision since the cache was used is not to keep warm at that tier"
        ),
        "{}",
        e.message()
    );
    // And an empty tier is refused by the log rules.
    let mut bad = recs.clone();
    bad[k] = bad[k].replace("\"tier\":\"1h\"", "\"tier\":\"\"");
    let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
    assert!(e.message().contains("data.tier: is empty"), "{}", e.message());
}

fn big_policy() -> CompactionPolicy {
    let mut p = CompactionPolicy::new(1_000_000);
    p.retained = Retained::Tokens(50);
    p
}

#[test]
fn the_clock_compacts_while_warm_and_verify_rebuilds_it() {
    let s = Session::in_memory();
    let mut a = agent(&s, Some(big_policy()));
    turn(&mut a, "one", 0, 150_000);
    turn(&mut a, "two", 150_000, 600);
    let sent = time_of(&s, "step/start");
    // Without a decision to compact, an idle compaction is refused.
    let e = a.compact_idle(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("has not decided to compact"), "{}", e.message());
    let base = json!({"prices": prices(), "returnModel": {"gapsMs": [10_800_000], "neverReturns": 0},
                      "compaction": {"minContextTokens": 0}, "keepWarmTiers": false});
    // Warm for four more minutes: an advisable compaction waits.
    let mut o = base.clone();
    o["now"] = json!(sent + 60_000);
    let r = a.cache_clock(&options(o)).unwrap();
    assert_ne!(r.decision.decision, Action::Compact, "{}", r.decision.reason);
    assert_eq!(r.decision.next_decision_at, Some(sent + 290_000));
    assert!(r.state.figures.as_ref().unwrap().compaction.is_some());
    // (It advises the hour tier for the next write: with it, two keep-warm requests bridge three
    // hours, cheaper than a compaction.)
    assert_eq!(
        (r.decision.decision, r.decision.tier.as_deref()),
        (Action::Tier, Some("1h")),
        "{} {:?}",
        r.decision.reason,
        r.decision.options
    );
    // Eight seconds before expiry (within the 10-second margin), with the host back in three
    // hours: compact now.
    let mut o = base.clone();
    o["now"] = json!(sent + 292_000);
    let r = a.cache_clock(&options(o)).unwrap();
    assert_eq!(r.decision.decision, Action::Compact, "{}", r.decision.reason);
    assert!(r.decision.reason.contains("compacting pays if the host returns after expiry with a probability above"));
    let decision = r.recorded.unwrap();
    assert_eq!(s.event(decision).unwrap().data["mechanism"], "portable");
    let out = a.compact_idle(&CancelToken::new()).unwrap();
    assert_eq!(out.outcome, llmsession::compaction::Outcome::Landed);
    let start = s.with_log(|l| (0..l.len() as u64).map(|i| l.event(i).unwrap()).find(|e| e.ty == "compaction/start").unwrap());
    assert_eq!((start.data["trigger"].as_str(), start.data["decision"].as_u64()), (Some("idle"), Some(decision)));
    // Compacted: nothing more to keep warm.
    let e = a.keepalive_body().unwrap_err();
    assert!(e.message().contains("a compaction rewrote the history"), "{}", e.message());
    let mut o = base.clone();
    o["now"] = json!(sent + 295_000);
    let r = a.cache_clock(&options(o)).unwrap();
    assert!(r.state.compacted);
    assert!(!r.state.figures.as_ref().unwrap().keepalive);
    turn(&mut a, "three", 1_000, 2_000);
    let v = s.verify().unwrap();
    assert_eq!((v.requests, v.compactions, v.decisions), (3, 1, 3));
    // Replay answers the summarisation request.
    let replay = Replay::from_records(&bytes(&records(&s))).unwrap();
    assert_eq!(replay.info()["requests"], 4);
}

#[test]
fn a_necessary_compaction_never_waits() {
    let s = Session::in_memory();
    let mut p = CompactionPolicy::new(200_000);
    p.retained = Retained::Tokens(50);
    let mut a = agent(&s, Some(p));
    turn(&mut a, "one", 0, 100_000);
    turn(&mut a, "two", 100_000, 70_000);
    let sent = time_of(&s, "step/start");
    // One second after the request, the cache warm for five minutes: the context is over the
    // threshold (160000 tokens), so it compacts now.
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": sent + 1_000}))).unwrap();
    assert_eq!(r.decision.decision, Action::Compact, "{}", r.decision.reason);
    assert!(r.decision.reason.contains("a necessary compaction never waits"), "{}", r.decision.reason);
    assert!(r.state.figures.unwrap().compaction.unwrap().necessary);
}

#[test]
fn let_expire_is_recorded_once_with_its_figures() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    let sent = time_of(&s, "step/start");
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "returnModel": {"gapsMs": [36_000_000], "neverReturns": 0.5}}));
    let r = a.cache_clock(&o).unwrap();
    assert_eq!(r.decision.decision, Action::LetExpire, "{}", r.decision.reason);
    assert_eq!(r.decision.next_decision_at, None);
    let seq = r.recorded.unwrap();
    let ev = s.event(seq).unwrap();
    assert_eq!(ev.data["figures"]["warmTokens"], 30_040);
    assert_eq!(ev.data["timing"]["gapStart"], sent);
    assert_eq!(a.cache_clock(&o).unwrap().recorded, Some(seq));
    assert_eq!(count(&s, "clock/decision"), 1);
    // Expired: nothing to do, nothing recorded.
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": sent + 400_000}))).unwrap();
    assert_eq!(r.decision.decision, Action::None);
    assert_eq!(r.recorded, None);
    assert_eq!(s.verify().unwrap().decisions, 1);
}

#[test]
fn verify_recomputes_a_decision_and_refuses_one_that_differs() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    let sent = time_of(&s, "step/start");
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}}));
    assert_eq!(a.cache_clock(&o).unwrap().decision.decision, Action::KeepWarm);
    let recs = records(&s);
    let i = index_of(&recs, "clock/decision", 0);
    // A decision rewritten (its chain recomputed): verify decides again from the log and the
    // recorded inputs, and names the difference.
    let mut bad = recs.clone();
    bad[i] = bad[i].replace("\"decision\":\"keep-warm\"", "\"decision\":\"let-expire\"");
    let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reconstruction);
    assert!(e.message().contains(&format!("clock/decision at seq {}", i - 1)), "{}", e.message());
    assert!(e.message().contains("its decision is \"keep-warm\", recorded \"let-expire\""), "{}", e.message());
    // Its figures changed: the log gives others.
    let mut bad = recs.clone();
    bad[i] = bad[i].replace("\"warmTokens\":30040", "\"warmTokens\":3040");
    let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
    assert!(e.message().contains("warmTokens is 30040 by the log, 3040 recorded"), "{}", e.message());
    // A host cannot write the clock's types while an agent is live, nor invent one.
    let e = s.append_json(&json!({"type": "clock/decision", "data": {"decision": "none", "at": 1, "reason": "x"}})).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    drop(a);
    let e = s.append_json(&json!({"type": "clock/ping", "data": {}})).unwrap_err();
    assert!(e.message().contains("the \"clock/\" namespace is reserved"), "{}", e.message());
}

#[test]
fn the_mean_write_and_the_margin_come_from_the_log_and_verify_checks_them() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    turn(&mut a, "two", 30_040, 1_000);
    turn(&mut a, "three", 31_080, 3_000);
    let sent = time_of(&s, "step/start");
    let o = options(json!({"prices": prices(), "now": sent + 292_000, "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}}));
    let r = a.cache_clock(&o).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    let f = r.state.figures.as_ref().unwrap();
    // The requests after the first wrote 1000 and 3000 tokens: a longer tier's premium is paid on
    // 2000 a write. The margin is the default (no keep-warm round trip yet).
    assert_eq!((f.written_tokens, f.mean_written_tokens, f.margin_ms), (3_000, Some(2_000), 10_000));
    let recs = records(&s);
    let i = index_of(&recs, "clock/decision", 0);
    assert!(recs[i].contains("\"marginFrom\":\"log\""), "{}", recs[i]);
    assert!(llmsession::request::verify_records(&bytes(&recs)).is_ok());
    for (from, to, says) in [
        ("\"meanWrittenTokens\":2000", "\"meanWrittenTokens\":200", "meanWrittenTokens is 2000 by the log, 200 recorded"),
        ("\"marginMs\":10000", "\"marginMs\":30000", "marginMs is 10000 by the log, 30000 recorded"),
    ] {
        let mut bad = recs.clone();
        assert!(bad[i].contains(from), "{}", bad[i]);
        bad[i] = bad[i].replace(from, to);
        let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
        assert!(e.message().contains(says), "{}", e.message());
    }
    // A margin the host gave is its own: recorded as such, and not derived again.
    let s2 = Session::in_memory();
    let mut b = agent(&s2, None);
    turn(&mut b, "one", 0, 30_000);
    let sent = time_of(&s2, "step/start");
    let o = options(json!({"prices": prices(), "now": sent + 275_000, "marginMs": 30_000,
                           "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}}));
    assert_eq!(b.cache_clock(&o).unwrap().decision.decision, Action::KeepWarm);
    let recs = records(&s2);
    assert!(recs[index_of(&recs, "clock/decision", 0)].contains("\"marginFrom\":\"host\""));
    assert!(llmsession::request::verify_records(&bytes(&recs)).is_ok());
}

#[test]
fn the_clock_offers_a_tier_only_where_the_price_table_names_it() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    turn(&mut a, "two", 30_040, 500);
    let sent = time_of(&s, "step/start");
    // The host's distribution: 20-minute pauses, which the hour tier would bridge.
    let ask = |a: &mut Agent, prices: Value| {
        let o = options(json!({"prices": prices, "now": sent + 60_000, "record": false, "keepWarmTiers": false,
                               "returnModel": {"gapsMs": [1_200_000], "neverReturns": 0}}));
        a.cache_clock(&o).unwrap()
    };
    let r = ask(&mut a, prices());
    assert_eq!((r.decision.decision, r.decision.tier.as_deref()), (Action::Tier, Some("1h")), "{}", r.decision.reason);
    assert_eq!(r.state.figures.as_ref().unwrap().tiers.len(), 2);
    // Without a 1-hour price (or with one flat write price) the clock guesses none, as explain
    // and simulate do not.
    for p in [
        json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75}, "output": 15}}),
        json!({"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15}}),
    ] {
        let r = ask(&mut a, p);
        assert_eq!(r.decision.decision, Action::None, "{}", r.decision.reason);
        assert!(r.state.figures.as_ref().unwrap().tiers.is_empty());
    }
}

#[test]
fn explain_prices_every_idle_gap_against_each_action() {
    let s = Session::in_memory();
    let mut a = agent(&s, Some(big_policy()));
    turn(&mut a, "one", 0, 150_000);
    let sent = time_of(&s, "step/start");
    // The host is away 20 minutes; the clock keeps warm four times.
    let pause = 1_200_000u64;
    let o = |now: u64| options(json!({"prices": prices(), "now": now, "returnModel": {"gapsMs": [pause], "neverReturns": 0}}));
    let r = a.cache_clock(&o(sent + 292_000)).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    a.keepalive_body().unwrap();
    a.record_body(&reply("ok", 0, 150_040, 0)).unwrap();
    turn(&mut a, "two", 150_040, 700);
    // The log's times are real; the pause is made 20 minutes long by moving every event from
    // the keep-warm request on (and the decision's time with them), chain recomputed.
    let recs = records(&s);
    let from = index_of(&recs, "clock/keepalive", 0);
    let moved: Vec<String> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i < from {
                return r.clone();
            }
            let v: Value = serde_json::from_str(r).unwrap();
            let t = v["time"].as_u64().unwrap();
            let shift = if i == from { 292_000 } else { pause };
            r.replace(&format!("\"time\":{t}"), &format!("\"time\":{}", sent + shift + (t - sent).min(1_000)))
        })
        .collect();
    let moved = reseal(&moved);
    let settings = ExplainSettings { prices: Some(PriceTable::from_value(&prices()).unwrap()), ..Default::default() };
    let ex = explain_records_with(&bytes(&moved), &Estimator, &settings).unwrap();
    assert_eq!(ex.totals.keepalive_requests, 1);
    assert_eq!(ex.gaps.len(), 1, "{:#?}", ex.gaps);
    let g = &ex.gaps[0];
    assert_eq!((g.after.as_str(), g.before.as_deref()), ("1", Some("2")));
    assert!(g.gap_ms >= pause, "{}", g.gap_ms);
    assert_eq!((g.keepalives, g.compactions), (1, 0));
    assert_eq!(g.decisions.len(), 1);
    assert_eq!(g.decisions[0].decision, "keep-warm");
    let names: Vec<String> = g.options.iter().map(|o| o.tier.as_ref().map_or(o.option.clone(), |t| format!("{} {t}", o.option))).collect();
    assert_eq!(names, ["let-expire", "keep-warm", "keep-warm 1h", "compact", "tier 1h"]);
    // Four keep-warm requests at the 5-minute tier bridge the 20 minutes, or one at the hour
    // tier (what the clock sent: its decision names the tier).
    let kw = g.options.iter().find(|o| o.option == "keep-warm").unwrap();
    assert_eq!(kw.pings, Some(4));
    let up = g.options.iter().find(|o| o.option == "keep-warm" && o.tier.is_some()).unwrap();
    assert_eq!(up.pings, Some(1));
    assert!(up.cost < kw.cost, "{up:?} {kw:?}");
    assert_eq!(g.decisions[0].tier.as_deref(), Some("1h"));
    assert!(g.cost.as_ref().unwrap().actions > 0.0);
    let json = ex.to_value();
    assert_eq!(json["gaps"][0]["options"][0]["option"], "let-expire");
    assert!(json["gaps"][0]["cost"]["return"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_log_rules_check_the_clock_records() {
    let s = Session::in_memory();
    let append = |v: Value| s.append_json(&v);
    let bad = |v: Value, msg: &str| {
        let e = s.append_json(&v).unwrap_err();
        assert!(e.message().contains(msg), "{} lacks {msg}", e.message());
        e
    };
    let e = bad(
        json!({"type": "clock/decision", "data": {"decision": "maybe", "at": 1, "reason": "r"}}),
        "data.decision: expected none, compact, keep-warm, let-expire or tier, got \"maybe\"",
    );
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    bad(json!({"type": "clock/decision", "data": {"decision": "tier", "at": 1, "reason": "r"}}), "data.tier");
    bad(
        json!({"type": "clock/keepalive", "data": {"replays": 1, "maxTokens": 1, "bytes": 2, "requestDigest": "sha256:x"}}),
        "data.requestDigest",
    );
    bad(
        json!({"type": "clock/keepalive-end", "data": {"request": 5, "outcome": "response"}}),
        "data.request: names seq 5, not an earlier clock/keepalive",
    );
    append(json!({"type": "clock/decision", "data": {"decision": "let-expire", "at": 1, "reason": "r"}})).unwrap();
    bad(
        json!({"type": "clock/keepalive-end", "data": {"request": 0, "outcome": "maybe"}}),
        "data.outcome: expected response, error or cancelled",
    );
    bad(json!({"type": "clock/keepalive-end", "data": {"request": 0, "outcome": "response", "usage": {"inputTokens": -1}}}), "data.usage");
    // While a request is open the clock has nothing to record.
    let mut a = agent(&s, None);
    a.start_turn(Message::user_text("hi")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let r = a.cache_clock(&options(json!({"prices": prices()}))).unwrap();
    assert!(r.decision.reason.contains("a request is in flight"), "{}", r.decision.reason);
    let e = a.keepalive_body().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("a request is open"), "{}", e.message());
    // Verify checks a keep-warm answer against the request waiting for it: one that names
    // another seq (its chain recomputed) is refused.
    a.record_body(&reply("ok", 40, 0, 300)).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    a.keepalive_body().unwrap();
    a.record_body(&reply("ok", 0, 340, 0)).unwrap();
    let recs = records(&s);
    let i = index_of(&recs, "clock/keepalive-end", 0);
    let k = index_of(&recs, "clock/keepalive", 0);
    let mut forged = recs.clone();
    forged[i] = forged[i].replace(&format!("\"request\":{}", k - 1), "\"request\":1");
    let e = llmsession::request::verify_records(&bytes(&reseal(&forged))).unwrap_err();
    assert!(e.message().contains("which is not a keep-warm request waiting for its answer"), "{}", e.message());
    assert_eq!(llmsession::request::verify_records(&bytes(&recs)).unwrap().keepalives, 1);
}

#[test]
fn the_keep_warm_budget_bounds_what_a_pause_stakes_and_verify_decides_it_again() {
    // One request has cost about 0.11 (30,000 tokens written); a keep-warm request reads them
    // for about 0.009. A host that comes back after 20 minutes, or never (one time in ten).
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    turn(&mut a, "one", 0, 30_000);
    let sent = time_of(&s, "step/start");
    let model = json!({"gapsMs": [1_200_000], "neverReturns": 0.1});
    let at = |budget: Option<f64>| {
        // (At the 5-minute tier only: with keep-warm requests at the hour tier, one would bridge
        // the pause, and the budget's arithmetic below is about several.)
        let mut o = json!({"prices": prices(), "now": sent + 292_000, "returnModel": model, "record": false, "keepWarmTiers": false});
        if let Some(b) = budget {
            o["keepWarmBudget"] = json!(b);
        }
        options(o)
    };
    // Unbounded, keeping warm is the better bet.
    let r = a.cache_clock(&at(Some(1e9))).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    // The default budget (5 % of 0.11) does not cover one keep-warm request: it lets the cache
    // expire, and says why.
    let r = a.cache_clock(&at(None)).unwrap();
    assert_eq!(r.decision.decision, Action::LetExpire, "{}", r.decision.reason);
    assert!(r.decision.reason.contains("the keep-warm budget (5 % of the 0.11"), "{}", r.decision.reason);
    assert!(r.decision.reason.contains(": 0 more keep-warm requests"), "{}", r.decision.reason);
    let f = r.state.figures.as_ref().unwrap();
    assert_eq!(f.keepalive_budget, Some(0.05));
    assert!((f.session_cost.unwrap() - (40.0 * 3.0 + 30_000.0 * 3.75 + 20.0 * 15.0) / 1e6).abs() < 1e-12, "{f:?}");
    // A budget of 50 % covers six, enough to bridge the 20 minutes (four): the pause keeps
    // warm, recorded; after one keep-warm request the next decision counts it, and verify
    // decides both again from the log. With 20 % (two) it would stake them for nothing.
    assert_eq!(a.cache_clock(&at(Some(0.2))).unwrap().decision.decision, Action::LetExpire);
    let mut o = at(Some(0.5));
    o.record = true;
    assert_eq!(a.cache_clock(&o).unwrap().decision.decision, Action::KeepWarm);
    a.keepalive_body().unwrap();
    a.record_body(&reply("ok", 0, 30_040, 0)).unwrap();
    let ping = time_of(&s, "clock/keepalive");
    o.now = Some(ping + 290_000);
    let r = a.cache_clock(&o).unwrap();
    assert_eq!(r.decision.decision, Action::KeepWarm, "{}", r.decision.reason);
    assert!(r.decision.reason.contains(": 5 more keep-warm requests"), "{}", r.decision.reason);
    let v = s.verify().unwrap();
    assert_eq!((v.keepalives, v.decisions), (1, 2));
    // The count of keep-warm requests in the pause is the log's: a decision claiming none is
    // refused.
    let recs = records(&s);
    let i = index_of(&recs, "clock/decision", 1);
    assert!(recs[i].contains("\"pings\":1,\"touchedAt"), "{}", recs[i]);
    let mut bad = recs.clone();
    bad[i] = bad[i].replace("\"pings\":1,\"touchedAt", "\"pings\":0,\"touchedAt");
    let e = llmsession::request::verify_records(&bytes(&reseal(&bad))).unwrap_err();
    assert!(e.message().contains("its timing differs from the log's"), "{}", e.message());
    // A budget must be a non-negative share.
    let e = ClockOptions::from_value(Some(&json!({"keepWarmBudget": -0.1}))).unwrap_err();
    assert!(e.message().contains("options.keepWarmBudget: must be a non-negative share"), "{}", e.message());
}

/// A session written at the hour tier (Claude Code writes its conversation so) that has not
/// paused: the clock drops the hour's premium for the next write, on the default prior, because a
/// pause at the 5-minute tier would cost one keep-warm request at the hour tier, which the
/// keep-warm budget covers. `verify` decides it again from the log; the same decision with its
/// figures marked as recorded before the clock did this (no `tierBeforePause`) is decided again
/// without it, and differs.
#[test]
fn before_a_pause_a_session_at_the_hour_tier_drops_its_premium() {
    let s = Session::in_memory();
    let mut a = agent(&s, None);
    a.set_renderer(Renderer::Anthropic, RenderOptions::default().with_cache_ttl(llmsession::render::CacheTtl::OneHour)).unwrap();
    let hour = |text: &str, read: u64, write: u64| {
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "end_turn",
               "content": [{"type": "text", "text": text}],
               "usage": {"input_tokens": 40, "output_tokens": 20, "cache_read_input_tokens": read,
                         "cache_creation_input_tokens": write, "cache_creation": {"ephemeral_1h_input_tokens": write}}})
        .to_string()
    };
    for (k, (read, write)) in [(0, 30_000), (30_040, 500), (30_540, 500)].into_iter().enumerate() {
        a.start_turn(Message::user_text(format!("question {k}"))).unwrap();
        a.next_body(&CancelToken::new()).unwrap();
        a.record_body(&hour(&format!("answer {k}"), read, write)).unwrap();
        a.end_turn(TurnEndReason::Completed).unwrap();
    }
    let sent = time_of(&s, "step/start");
    let r = a.cache_clock(&options(json!({"prices": prices(), "now": sent + 60_000}))).unwrap();
    let f = r.state.figures.as_ref().unwrap();
    assert_eq!((f.tier.as_str(), f.tier_before_pause), ("1h", true));
    assert_eq!((r.decision.decision, r.decision.tier.as_deref()), (Action::Tier, Some("5m")), "{}", r.decision.reason);
    assert!(r.decision.reason.contains("the default prior"), "{}", r.decision.reason);
    let recs = records(&s);
    llmsession::request::verify_records(&bytes(&recs)).unwrap();
    let i = index_of(&recs, "clock/decision", 0);
    assert!(recs[i].contains(",\"tierBeforePause\":true"), "{}", recs[i]);
    let mut old = recs.clone();
    old[i] = old[i].replace(",\"tierBeforePause\":true", "");
    let e = llmsession::request::verify_records(&bytes(&reseal(&old))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reconstruction);
    assert!(e.message().contains("its decision is \"none\", recorded \"tier\""), "{}", e.message());
}
