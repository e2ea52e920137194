//! Cache economics (issue #29): fixture sessions with known causes, whose responses are
//! Anthropic Messages bodies written from Anthropic's documentation (usage with
//! `cache_read_input_tokens`, `cache_creation_input_tokens` and its `cache_creation` TTL split;
//! `diagnostics.cache_miss_reason`; `context_management.applied_edits`), parsed by the library
//! and recorded. Each fixture's provider reports exactly the tokens explain counts (so the
//! expected figures are exact): every uncached token is charged to the fixture's cause, and the
//! causes sum to the uncached tokens the provider reported.

use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::explain::{explain_records, explain_records_with, Cause, ExplainSettings, Explanation, RequestReport};
use llmsession::log::TurnEndReason;
use llmsession::prices::PriceTable;
use llmsession::render::{parse_response, Renderer};
use llmsession::tokens::Estimator;
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, Message, Session, ToolSchema, Usage};
use serde_json::{json, Value};
use std::sync::Arc;

mod support {
    pub mod damaged_log;
}
use support::damaged_log::{bytes, index_of, reseal};

const MODEL: &str = "claude-sonnet-4-5";

/// A system prompt well above Anthropic's 1024-token minimum for the model.
fn long_system(first_line: &str) -> String {
    let mut s = format!("{first_line}\n");
    for i in 0..150 {
        s.push_str(&format!("Rule {i}: keep every change small, tested and explained in the commit message.\n"));
    }
    s
}

fn tools(read_description: &str) -> Vec<ToolSchema> {
    ToolSchema::list_from_value(
        &json!([{"name":"read","description":read_description,"parameters":{"type":"object"}},
                {"name":"bash","description":"Run a command","parameters":{"type":"object"}}]),
        "tools",
    )
    .unwrap()
}

fn options(system: &str, read_description: &str) -> AgentOptions {
    let mut o = AgentOptions::new(CallConfig::new("anthropic", MODEL));
    o.system = Some(system.into());
    o.tools = tools(read_description);
    o.check_requests = true;
    o
}

fn records(s: &Session) -> Vec<Vec<u8>> {
    s.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

fn strings(s: &Session) -> Vec<String> {
    s.records().unwrap().iter().map(|r| r.to_string()).collect()
}

/// One turn: the request, then an Anthropic response whose usage reads `cached(report)` tokens
/// from the cache (the report is explain's view of the request in flight) and writes the
/// rest at the new breakpoint, 5-minute TTL (1-hour with `one_hour`). `extra` is merged into
/// the response body.
fn exchange(a: &mut Agent, s: &Session, user: &str, cached: impl Fn(&RequestReport) -> u64, one_hour: bool, extra: Value) {
    let c = CancelToken::new();
    a.start_turn(Message::user_text(user)).unwrap();
    a.next_request(&c).unwrap();
    let ex = explain_records(&records(s), &Estimator).unwrap();
    let r = ex.requests.last().unwrap();
    let (prompt, read) = (r.tokens, cached(r));
    let input = (prompt - read).min(10);
    let written = prompt - read - input;
    let (w5, w1) = if one_hour { (0, written) } else { (written, 0) };
    let mut body = json!({
        "id": format!("msg_{}", user.len()), "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": input, "cache_read_input_tokens": read, "cache_creation_input_tokens": written,
                  "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1}, "output_tokens": 20}
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let parsed = parse_response(Renderer::Anthropic, &body).unwrap();
    a.record_response(parsed.message, parsed.usage).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
}

fn none(_: &RequestReport) -> u64 {
    0
}

fn charges(r: &RequestReport) -> Vec<(Cause, u64)> {
    let v: Vec<(Cause, u64)> = r.causes.iter().map(|c| (c.cause, c.tokens)).collect();
    assert_eq!(v.iter().map(|c| c.1).sum::<u64>(), r.uncached_tokens, "the causes sum to the uncached tokens: {r:?}");
    v
}

fn sums_to_reported(ex: &Explanation) {
    for r in &ex.requests {
        assert_eq!(r.spend_source, "provider", "{}", r.id);
        charges(r);
    }
    let spent: u64 = ex.totals.spend.iter().map(|(_, n)| n).sum();
    assert_eq!(spent, ex.totals.prompt_tokens - ex.totals.cached_tokens);
}

/// Moves every record from `from` on `by` milliseconds later (the user was away), with the
/// chain recomputed.
fn later(recs: &[String], from: usize, by: u64) -> Vec<Vec<u8>> {
    let moved: Vec<String> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i < from {
                return r.clone();
            }
            let mut v: Value = serde_json::from_str(r).unwrap();
            v["time"] = json!(v["time"].as_u64().unwrap() + by);
            v.to_string()
        })
        .collect();
    bytes(&reseal(&moved))
}

fn two_turns(one_hour: bool) -> Vec<String> {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, one_hour, json!({}));
    // The prefix expired: the provider read nothing.
    exchange(&mut a, &s, "second", none, one_hour, json!({}));
    strings(&s)
}

#[test]
fn a_ten_minute_gap_on_a_five_minute_ttl_is_expiry() {
    let recs = two_turns(false);
    let from = index_of(&recs, "turn/start", 1);
    let ex = explain_records(&later(&recs, from, 10 * 60_000), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert_eq!(charges(r1), vec![(Cause::Growth, r1.prompt_tokens)]);
    assert!(r2.gap_ms.unwrap() >= 10 * 60_000, "{r2:?}");
    assert_eq!(r2.cache_rule.ttl_ms, Some(5 * 60_000));
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::Expiry, r1.prompt_tokens)]);
    assert_eq!(r2.cause, Cause::Expiry);
    // Cache writes: everything uncached but the last few tokens was written again.
    assert_eq!(r2.cache_write_tokens, r2.prompt_tokens - 10);
    assert_eq!(ex.totals.cache_write_tokens, r1.cache_write_tokens + r2.cache_write_tokens);
    let factor = ex.totals.rewrite_factor;
    assert!((factor - ex.totals.cache_write_tokens as f64 / r2.prompt_tokens as f64).abs() < 1e-12 && factor > 1.9, "{factor}");

    // Without the gap the same loss is unexplained: the provider should have had the prefix.
    let ex = explain_records(&bytes(&recs), &Estimator).unwrap();
    assert_eq!(ex.requests[1].causes.last().unwrap().cause, Cause::Unexplained);

    // Written with the 1-hour TTL (the usage says so), ten minutes is not expiry either.
    let recs = two_turns(true);
    let ex = explain_records(&later(&recs, index_of(&recs, "turn/start", 1), 10 * 60_000), &Estimator).unwrap();
    assert_eq!(ex.requests[1].cache_rule.ttl_ms, Some(60 * 60_000));
    assert_eq!(ex.requests[1].causes.last().unwrap().cause, Cause::Unexplained);
    // A host whose contract has another TTL overrides it.
    let rules = llmsession::cache_rules::CacheRules::from_value(&json!({"anthropic": {"ttlSeconds": 300}})).unwrap();
    let settings = ExplainSettings { cache_rules: rules, prices: None };
    let ex = explain_records_with(&later(&recs, index_of(&recs, "turn/start", 1), 10 * 60_000), &Estimator, &settings).unwrap();
    assert_eq!(ex.requests[1].causes.last().unwrap().cause, Cause::Expiry);
}

#[test]
fn an_edited_system_prompt_is_a_header_change_and_the_diagnosis_agrees() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("Today is Monday."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({"diagnostics": null}));
    a.set_options(options(&long_system("Today is Tuesday."), "Read a file")).unwrap();
    // Anthropic reads tools, then system: the system prompt's breakpoint misses, nothing is read.
    exchange(
        &mut a,
        &s,
        "second",
        none,
        false,
        json!({"diagnostics": {"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 1500}}}),
    );
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::HeaderChange, r1.prompt_tokens)]);
    let d = r2.diagnostics.as_ref().unwrap();
    assert_eq!((d.provider.as_str(), d.ours.as_str(), d.agrees), ("system_changed", "system_changed", Some(true)));
    // The first request's diagnostics: no previous message, nothing to compare.
    let d = r1.diagnostics.as_ref().unwrap();
    assert_eq!((d.provider.as_str(), d.agrees), ("none", Some(true)));
    assert_eq!((ex.totals.diagnostics_compared, ex.totals.diagnostics_disagreements), (2, 0));
    assert_eq!(r2.usage.as_ref().unwrap().cache_diagnostics.as_ref().unwrap().missed_tokens, Some(1500));
}

#[test]
fn a_tool_change_is_a_header_change_and_a_disagreeing_diagnosis_is_flagged() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({}));
    a.set_options(options(&long_system("You are careful."), "Read a file, whole")).unwrap();
    // A diagnosis naming the wrong component (as a provider bug, or a log that is not what
    // was sent, would give).
    exchange(&mut a, &s, "second", none, false, json!({"diagnostics": {"cache_miss_reason": {"type": "system_changed"}}}));
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::HeaderChange, r1.prompt_tokens)]);
    let d = r2.diagnostics.as_ref().unwrap();
    assert_eq!((d.provider.as_str(), d.ours.as_str(), d.agrees), ("system_changed", "tools_changed", Some(false)));
    assert_eq!((ex.totals.diagnostics_compared, ex.totals.diagnostics_disagreements), (1, 1));
}

#[test]
fn a_pending_diagnosis_is_not_compared() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({}));
    exchange(&mut a, &s, "second", |r| r.expected_cached_tokens, false, json!({"diagnostics": {"cache_miss_reason": null}}));
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    let d = ex.requests[1].diagnostics.as_ref().unwrap();
    assert_eq!((d.provider.as_str(), d.ours.as_str(), d.agrees), ("pending", "none", None));
    assert_eq!(ex.totals.diagnostics_compared, 0);
    // Everything it should have read was read: only growth.
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens)]);
}

#[test]
fn a_compaction_is_charged_to_the_compaction() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    a.set_summariser(Some(Arc::new(|_: &SummaryRequest, _: &CancelToken| {
        Ok(SummaryOutput {
            text: "CHECKPOINT".into(),
            usage: Some(Usage { input_tokens: 300, output_tokens: 5, cache_read_tokens: Some(1500), ..Default::default() }),
            ..Default::default()
        })
    })));
    for t in ["first", "second", "third"] {
        let long = format!("{t}: {}", "the build log says the test failed again; ".repeat(40));
        exchange(&mut a, &s, &long, |r| r.expected_cached_tokens, false, json!({}));
    }
    let mut p = CompactionPolicy::new(100_000);
    p.retained = Retained::Tokens(1);
    a.set_policy(Some(p)).unwrap();
    a.compact(None, &CancelToken::new()).unwrap();
    // The provider reads the system prompt and tools (whole components before the checkpoint).
    exchange(&mut a, &s, "fourth", |r| r.shared_tokens, false, json!({}));
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    sums_to_reported(&ex);
    let c1 = ex.request("c1").unwrap();
    assert_eq!(charges(c1), vec![(Cause::Compaction, 300)]);
    let r = ex.request("4").unwrap();
    assert_eq!(charges(r), vec![(Cause::Compaction, r.prompt_tokens - r.cached_tokens)]);
    assert!(r.cached_tokens > 1024, "{r:?}");
    for id in ["2", "3"] {
        assert_eq!(ex.request(id).unwrap().causes.iter().map(|c| c.cause).collect::<Vec<_>>(), vec![Cause::Growth]);
    }
}

#[test]
fn a_prompt_below_the_minimum_is_charged_to_it() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("Be brief.", "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({}));
    exchange(&mut a, &s, "second", none, false, json!({}));
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert!(r2.prompt_tokens < 1024 && r2.cache_rule.min_tokens == 1024, "{r2:?}");
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::BelowMinimum, r1.prompt_tokens)]);
    // With a host rule lowering the minimum, the same loss is unexplained.
    let rules = llmsession::cache_rules::CacheRules::from_value(&json!({"anthropic/claude-sonnet-4-5": {"minTokens": 1}})).unwrap();
    let ex = explain_records_with(&records(&s), &Estimator, &ExplainSettings { cache_rules: rules, prices: None }).unwrap();
    assert_eq!(ex.requests[1].causes.last().unwrap().cause, Cause::Unexplained);
}

#[test]
fn applied_context_edits_are_recorded_and_charged() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({}));
    let edits = json!({"context_management": {"applied_edits": [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 900},
        {"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": 40}]}});
    exchange(&mut a, &s, "second", none, false, edits);
    let ex = explain_records(&records(&s), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert_eq!(charges(r2), vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::ContextEdit, r1.prompt_tokens)]);
    // The edits are in the log, with the response's usage.
    let logged: Vec<Value> = records(&s)[1..].iter().map(|r| serde_json::from_slice::<Value>(r).unwrap()).collect();
    let msg = logged.iter().filter(|v| v["type"] == "assistant/message").nth(1).unwrap();
    assert_eq!(
        msg["data"]["usage"]["contextEdits"],
        json!([{"type": "clear_tool_uses_20250919", "clearedInputTokens": 900, "clearedToolUses": 2},
               {"type": "clear_thinking_20251015", "clearedInputTokens": 40, "clearedThinkingTurns": 1}])
    );
    llmsession::request::verify_records(&records(&s)).unwrap();
}

#[test]
fn the_cost_report_prices_every_request_and_cause() {
    let recs = two_turns(false);
    let recs = later(&recs, index_of(&recs, "turn/start", 1), 10 * 60_000);
    let prices = PriceTable::from_value(&json!({
        "anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}))
    .unwrap();
    let ex = explain_records_with(&recs, &Estimator, &ExplainSettings { prices: Some(prices), ..Default::default() }).unwrap();
    let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} != {b}");
    let r2 = &ex.requests[1];
    let u = r2.usage.as_ref().unwrap();
    let c = r2.cost.as_ref().unwrap();
    close(c.uncached, (u.input_tokens as f64 * 3.0 + u.cache_write_tokens.unwrap() as f64 * 3.75) / 1e6);
    close(c.output, 20.0 * 15.0 / 1e6);
    close(c.no_cache, r2.prompt_tokens as f64 * 3.0 / 1e6 + c.output);
    // Per cause: the uncached cost in proportion to the tokens.
    let by: f64 = r2.causes.iter().map(|ch| ch.cost.unwrap()).sum();
    close(by, c.uncached);
    let expiry = r2.causes.iter().find(|ch| ch.cause == Cause::Expiry).unwrap();
    close(expiry.cost.unwrap(), c.uncached * expiry.tokens as f64 / r2.uncached_tokens as f64);
    let t = ex.totals.cost.as_ref().unwrap();
    close(t.total, ex.requests.iter().map(|r| r.cost.as_ref().unwrap().total).sum());
    close(t.no_cache, ex.requests.iter().map(|r| r.cost.as_ref().unwrap().no_cache).sum());
    assert_eq!(t.unpriced, 0);
    // Writing every token again at 1.25x costs more than not caching at all.
    assert!(t.total > t.no_cache);
    let v = ex.to_value();
    close(v["totals"]["cost"]["byCause"]["expiry"].as_f64().unwrap(), expiry.cost.unwrap());
    // A table without the model's price leaves it unpriced.
    let other = PriceTable::from_value(&json!({"openai": {"input": 1, "cachedInput": 0.1, "output": 2}})).unwrap();
    let ex = explain_records_with(&recs, &Estimator, &ExplainSettings { prices: Some(other), ..Default::default() }).unwrap();
    assert!(ex.requests.iter().all(|r| r.cost.is_none()));
    assert_eq!(ex.totals.cost.as_ref().unwrap().unpriced, 2);
}

#[test]
fn the_cache_diagnostics_render_option_names_the_previous_response_and_verifies() {
    use llmsession::render::RenderOptions;
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    let opts = RenderOptions::from_value(&json!({"cacheDiagnostics": true})).unwrap();
    a.set_renderer(Renderer::Anthropic, opts.clone()).unwrap();
    let c = CancelToken::new();
    let mut sent = Vec::new();
    for (i, user) in ["first", "second", "third"].iter().enumerate() {
        a.start_turn(Message::user_text(*user)).unwrap();
        let body: Value = serde_json::from_str(&a.next_body(&c).unwrap().json).unwrap();
        sent.push(body["diagnostics"].clone());
        let reply = json!({"id": format!("msg_{i}"), "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2}});
        a.record_body(&reply.to_string()).unwrap();
        a.end_turn(TurnEndReason::Completed).unwrap();
    }
    // The first request opts in with null; each later one names the previous response.
    assert_eq!(
        sent,
        vec![json!({"previous_message_id": null}), json!({"previous_message_id": "msg_0"}), json!({"previous_message_id": "msg_1"})]
    );
    // The id is logged with the message, so every body is rebuilt from the log.
    let v = s.verify_bodies(Renderer::Anthropic, &opts).unwrap();
    assert_eq!(v.bodies, 3);
    // Without the option, no field; with a diagnostics config field as well, a clear error.
    let env = json!({"provider": "anthropic", "model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
                     "diagnostics": {"previous_message_id": null}});
    let e = Renderer::Anthropic.render(&env, &opts).unwrap_err();
    assert_eq!(e.message(), "diagnostics: is set by the cacheDiagnostics render option; leave the config field out (or the option)");
    let plain = Renderer::Anthropic.render(&env, &RenderOptions::default()).unwrap();
    assert_eq!(plain["diagnostics"], json!({"previous_message_id": null}), "a pass-through field stays the host's");
    let e = RenderOptions::from_value(&json!({"cacheDiagnostics": "yes"})).unwrap_err();
    assert_eq!(e.message(), "options.cacheDiagnostics: expected a boolean, got a string");
}

#[test]
fn a_long_gap_whose_prefix_was_read_is_not_expiry() {
    // Ten minutes later, a tool added at the end: the provider read the shared part (system and
    // the first tools), so its cache held; what it did not read is the tool change's.
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(&long_system("You are careful."), "Read a file")).unwrap();
    exchange(&mut a, &s, "first", none, false, json!({}));
    let mut o = options(&long_system("You are careful."), "Read a file");
    o.tools
        .extend(ToolSchema::list_from_value(&json!([{"name":"grep","description":"Search","parameters":{"type":"object"}}]), "t").unwrap());
    a.set_options(o).unwrap();
    exchange(&mut a, &s, "second", |r| r.expected_cached_tokens, false, json!({}));
    let recs = strings(&s);
    let ex = explain_records(&later(&recs, index_of(&recs, "turn/start", 1), 10 * 60_000), &Estimator).unwrap();
    sums_to_reported(&ex);
    let (r1, r2) = (&ex.requests[0], &ex.requests[1]);
    assert!(r2.gap_ms.unwrap() > r2.cache_rule.ttl_ms.unwrap() && r2.cached_tokens > 1024, "{r2:?}");
    assert_eq!(
        charges(r2),
        vec![(Cause::Growth, r2.prompt_tokens - r1.prompt_tokens), (Cause::HeaderChange, r1.prompt_tokens - r2.cached_tokens)]
    );
}
