//! Provider-native compaction (docs/compaction.md, "Native compaction"), against fixtures
//! written from the providers' documentation (`tests/data/native/`): Anthropic's threshold
//! compaction (a `compaction` block in an answer, whole, paused and streamed; a failed one) and
//! on-demand compaction (foreground, in the background with turns in between, refused answers),
//! OpenAI's Responses `context_management` and `POST /responses/compact`, the route changes
//! that turn a native block into a portable checkpoint, and that no provider's item is ever sent
//! to another. Every session is verified (requests and bodies rebuilt from the log), replayed
//! and explained.

use llmsession::compaction::{CompactionPolicy, Mechanism, SummaryOutput, SummaryRequest};
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::render::{parse_response, RenderOptions, Renderer};
use llmsession::replay::Replay;
use llmsession::stream::StreamAccumulator;
use llmsession::tokens::Estimator;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Role, Session};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/native/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
}

fn native_policy(mechanism: Mechanism) -> CompactionPolicy {
    let mut p = CompactionPolicy::new(200_000);
    p.mechanism = mechanism;
    p
}

/// An agent on `format`'s route (the provider named after the format, a renderer set), with
/// request checking on and a session prefix of one user message (`prefix`).
fn agent(s: &Session, format: Renderer, model: &str, prefix: bool) -> Agent {
    let mut o = AgentOptions::new(CallConfig::new(format.name(), model));
    o.system = Some("You help build logsift, a Rust CLI.".into());
    o.tools = vec![llmsession::ToolSchema::function("read", Some("Read a file.".into()), json!({"type":"object"}))];
    o.check_requests = true;
    let mut a = Agent::new(s, o).unwrap();
    a.set_renderer(format, RenderOptions::default()).unwrap();
    if prefix {
        a.add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| {
            let mut out = vec![Message::user_text("<project>logsift: Rust, clap, serde_json.</project>")];
            out.extend_from_slice(rest);
            Ok(out)
        }))
        .unwrap();
    }
    a
}

fn anthropic_answer(text: &str) -> String {
    json!({"id":"msg_plain","type":"message","role":"assistant","model":"claude-opus-4-8",
           "content":[{"type":"text","text":text}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":7}})
    .to_string()
}

fn responses_answer(text: &str) -> String {
    json!({"id":"resp_plain","object":"response","status":"completed","model":"gpt-5.3-codex",
           "output":[{"id":"msg_plain","type":"message","status":"completed","role":"assistant",
                      "content":[{"type":"output_text","text":text,"annotations":[]}]}],
           "usage":{"input_tokens":12,"output_tokens":7}})
    .to_string()
}

/// One turn as `turn` plays it, remembering the request's envelope in `sent` (for replay).
fn step(a: &mut Agent, user: &str, answer: &str, sent: &mut Vec<String>) -> Value {
    a.start_turn(Message::user_text(user)).unwrap();
    let b = a.next_body(&CancelToken::new()).unwrap();
    sent.push(a.last_envelope().unwrap());
    a.record_body(answer).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    serde_json::from_str(&b.json).unwrap()
}

/// One turn: the user's text, one request, the answer, the end.
fn turn(a: &mut Agent, user: &str, answer: &str) -> (Value, Vec<String>) {
    a.start_turn(Message::user_text(user)).unwrap();
    let b = a.next_body(&CancelToken::new()).unwrap();
    a.record_body(answer).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    (serde_json::from_str(&b.json).unwrap(), b.info.betas)
}

fn events(s: &Session) -> Vec<Value> {
    s.records().unwrap().iter().skip(1).map(|r| serde_json::from_str(r).unwrap()).collect()
}

fn types_of(s: &Session) -> Vec<String> {
    events(s).iter().map(|e| e["type"].as_str().unwrap().to_string()).collect()
}

fn history(s: &Session) -> Vec<Value> {
    serde_json::from_str(&s.history_json()).unwrap()
}

fn records(s: &Session) -> Vec<Vec<u8>> {
    s.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

/// The session verifies, requests and bodies for `format`.
fn verified(s: &Session, format: Renderer) {
    s.verify().unwrap();
    s.verify_bodies(format, &RenderOptions::default()).unwrap();
}

fn count(s: &Session, ty: &str) -> usize {
    types_of(s).iter().filter(|t| *t == ty).count()
}

#[test]
fn anthropic_threshold_compaction_is_recorded_and_its_block_sent_first() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", true);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    let (body, betas) = turn(&mut a, "Start logsift.", &anthropic_answer("Started: clap and two parsers."));
    // The threshold edit, with the policy's threshold (0.8 of 200k), and its beta flag.
    assert_eq!(body["context_management"], json!({"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":160000}}]}));
    assert_eq!(betas, vec!["compact-2026-01-12"]);
    a.start_turn(Message::user_text("Add --since.")).unwrap();
    let carried: Vec<u64> = events(&s).iter().filter(|e| e["surfaceOp"].is_string()).map(|e| e["seq"].as_u64().unwrap()).collect();
    a.next_body(&CancelToken::new()).unwrap();
    let rec = a.record_body(&fixture("anthropic-threshold.json")).unwrap();
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    a.end_turn(TurnEndReason::Completed).unwrap();
    // The compaction: what it replaced (every message the request carried), its block verbatim.
    let evs = events(&s);
    let start = evs.iter().find(|e| e["type"] == "compaction/start").unwrap();
    assert_eq!(start["data"]["mechanism"], "native");
    assert_eq!(start["data"]["mode"], "threshold");
    assert_eq!(start["data"]["provider"], "anthropic");
    assert_eq!(start["data"]["seqs"], json!(carried));
    let native = evs.iter().find(|e| e["type"] == "compaction/native").unwrap();
    let answer: Value = serde_json::from_str(&fixture("anthropic-threshold.json")).unwrap();
    assert_eq!(native["data"]["items"], json!([answer["content"][0]]));
    assert_eq!(native["data"]["usage"], json!({"inputTokens": 61240, "outputTokens": 512}));
    assert_eq!(s.stats().compactions, 1);
    // The history: the checkpoint, then the answer without its block.
    let h = history(&s);
    assert_eq!(h.len(), 2);
    assert_eq!(h[0]["content"], json!([{"type":"opaque","origin":"anthropic","item": answer["content"][0]}]));
    assert_eq!(h[1]["content"][0]["text"], answer["content"][1]["text"]);
    // The next request sends the block first, as an assistant message of its own, ahead of the
    // session prefix's message, byte for byte as it came.
    let (body, betas) = turn(&mut a, "And JSON output?", &anthropic_answer("Done."));
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0], json!({"role":"assistant","content":[answer["content"][0]]}));
    assert_eq!(msgs[1]["content"][0]["text"], "<project>logsift: Rust, clap, serde_json.</project>");
    assert_eq!(msgs[2]["role"], "assistant");
    assert!(body["context_management"].is_object(), "an unsigned block keeps the threshold edit");
    assert_eq!(betas, vec!["compact-2026-01-12"]);
    verified(&s, Renderer::Anthropic);
}

#[test]
fn a_paused_threshold_compaction_continues_the_turn() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    a.set_policy(Some(native_policy(Mechanism::Auto))).unwrap();
    a.start_turn(Message::user_text("Start logsift.")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let rec = a.record_body(&fixture("anthropic-threshold-paused.json")).unwrap();
    assert_eq!(rec.finish_reason.as_deref(), Some("compaction"), "the turn is not over");
    // Same turn, next step: the block is the last message (the provider continues from it).
    let b = a.next_body(&CancelToken::new()).unwrap();
    let body: Value = serde_json::from_str(&b.json).unwrap();
    let answer: Value = serde_json::from_str(&fixture("anthropic-threshold-paused.json")).unwrap();
    let mut block = answer["content"][0].clone();
    block["cache_control"] = json!({"type":"ephemeral"}); // the end of the history
    assert_eq!(body["messages"], json!([{"role":"assistant","content":[block]}]));
    assert_eq!(b.info.step, 2);
    a.record_body(&anthropic_answer("Continuing with --since.")).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    verified(&s, Renderer::Anthropic);
}

#[test]
fn streamed_compaction_answers_equal_the_whole_ones() {
    for (sse, whole, format) in [
        ("anthropic-threshold.sse", "anthropic-threshold.json", Renderer::Anthropic),
        ("anthropic-threshold-paused.sse", "anthropic-threshold-paused.json", Renderer::Anthropic),
        ("anthropic-on-demand.sse", "anthropic-on-demand.json", Renderer::Anthropic),
        ("openai-threshold.sse", "openai-threshold.json", Renderer::OpenAiResponses),
    ] {
        let want = parse_response(format, &serde_json::from_str(&fixture(whole)).unwrap()).unwrap();
        let bytes = fixture(sse);
        for cut in [1usize, 7, 64, bytes.len()] {
            let mut acc = StreamAccumulator::new(format);
            for chunk in bytes.as_bytes().chunks(cut) {
                acc.feed(chunk).unwrap();
            }
            let got = acc.finish(false).unwrap();
            assert_eq!(got.message, want.message, "{sse} in chunks of {cut}");
            assert_eq!(got.finish_reason, want.finish_reason, "{sse}");
            assert_eq!(got.usage.as_ref().map(|u| &u.extra), want.usage.as_ref().map(|u| &u.extra), "{sse}: the iterations");
        }
    }
    // Recorded from the stream, the compaction lands as from the whole answer.
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    a.start_turn(Message::user_text("Start logsift.")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let mut acc = StreamAccumulator::new(Renderer::Anthropic);
    acc.feed(fixture("anthropic-threshold.sse").as_bytes()).unwrap();
    a.record_stream(&mut acc, false).unwrap();
    assert_eq!(count(&s, "compaction/native"), 1);
    verified(&s, Renderer::Anthropic);
}

#[test]
fn a_failed_threshold_block_stays_in_the_answer_and_the_history_stays_whole() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    let (_, _) = turn(&mut a, "Next?", &fixture("anthropic-threshold-failed.json"));
    let evs = events(&s);
    let end = evs.iter().find(|e| e["type"] == "compaction/end").unwrap();
    assert_eq!(end["data"]["outcome"], "failed");
    assert!(end["data"]["error"].as_str().unwrap().contains("no content"), "{end}");
    assert_eq!(count(&s, "compaction/native"), 0);
    let h = history(&s);
    assert_eq!(h.len(), 4, "nothing replaced");
    assert_eq!(h[3]["content"][0], json!({"type":"opaque","origin":"anthropic","item":{"type":"compaction","content":null}}));
    // It goes back with the answer, verbatim (a no-op for the provider).
    let (body, _) = turn(&mut a, "Go on.", &anthropic_answer("Going on."));
    assert_eq!(body["messages"][3]["content"][0], json!({"type":"compaction","content":null}));
    verified(&s, Renderer::Anthropic);
}

/// An on-demand compaction on Anthropic: the request, its answer, the block first afterwards.
#[test]
fn anthropic_on_demand_compaction() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", true);
    let mut o = a.options().clone();
    o.config.stop = Some(vec!["END".into()]);
    o.config.extra.insert("context_management".into(), json!({"edits":[{"type":"clear_tool_uses_20250919"}]}));
    a.set_options(o).unwrap();
    let e = a.native_compaction_request().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder, "{e}");
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    turn(&mut a, "Add --since.", &anthropic_answer("Added."));
    let n = history(&s).len();
    let req = a.native_compaction_request().unwrap();
    assert_eq!((req.format.as_str(), req.endpoint.as_str()), ("anthropic", "/v1/messages"));
    assert_eq!(req.betas, vec!["compact-2026-09-04"]);
    assert_eq!(req.span, [0, n - 1]);
    let body: Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(body["compaction"], json!({"type":"summarize"}));
    assert!(body.get("context_management").is_none(), "cannot be combined with compaction");
    assert!(body.get("stop_sequences").is_none(), "refused on a compaction request");
    assert_eq!(body["tools"][0]["name"], "read", "the summariser reads the tools");
    assert_eq!(body["messages"].as_array().unwrap().len(), 1 + n);
    let envelope: Value = serde_json::from_str(&req.envelope).unwrap();
    assert_eq!(envelope["purpose"], "native-compaction");
    assert_eq!(llmsession::request::digest(req.envelope.as_bytes()), req.digest);
    // A second one while it runs is refused; so are a portable compaction and a threshold edit.
    assert_eq!(a.native_compaction_request().unwrap_err().kind(), ErrorKind::OutOfOrder);
    assert_eq!(a.compact(None, &CancelToken::new()).unwrap_err().kind(), ErrorKind::OutOfOrder);
    let out = a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap();
    assert_eq!(out.outcome, llmsession::compaction::Outcome::Landed);
    assert_eq!(out.stop_reason.as_deref(), Some("compaction"));
    let answer: Value = serde_json::from_str(&fixture("anthropic-on-demand.json")).unwrap();
    let native = events(&s).into_iter().find(|e| e["type"] == "compaction/native").unwrap();
    assert_eq!(native["data"]["usage"], json!({"inputTokens": 188, "outputTokens": 301}));
    assert_eq!(native["data"]["providerUsage"], answer["usage"]);
    // Later requests: the signed block first, byte for byte, the on-demand beta flag.
    let (body, betas) = turn(&mut a, "Now JSON output.", &anthropic_answer("Done."));
    assert_eq!(body["messages"][0], json!({"role":"assistant","content":[answer["content"][0]]}));
    assert_eq!(body["messages"][1]["content"][0]["text"], "<project>logsift: Rust, clap, serde_json.</project>");
    assert_eq!(betas, vec!["compact-2026-09-04"]);
    verified(&s, Renderer::Anthropic);
}

#[test]
fn with_a_signed_block_in_the_history_no_threshold_edit_is_sent() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    let (body, _) = turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    assert!(body["context_management"].is_object());
    a.native_compaction_request().unwrap();
    a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap();
    let (body, betas) = turn(&mut a, "Next.", &anthropic_answer("Ok."));
    assert!(body.get("context_management").is_none(), "threshold compaction cannot run on a request with a signed block");
    assert_eq!(betas, vec!["compact-2026-09-04"]);
    // The header change is logged.
    assert_eq!(events(&s).iter().filter(|e| e["type"] == "request/header").last().unwrap()["data"]["reason"], "change");
    verified(&s, Renderer::Anthropic);
}

/// Background compaction: three turns between the request and the block; the swap drops
/// exactly the messages the request held, and the turns taken meanwhile stay after the block.
#[test]
fn background_compaction_swaps_exactly_the_counted_messages() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", true);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    let mut sent: Vec<String> = Vec::new();
    step(&mut a, "Start logsift.", &anthropic_answer("Started."), &mut sent);
    step(&mut a, "Add --since.", &anthropic_answer("Added."), &mut sent);
    let counted = history(&s);
    let req = a.native_compaction_request().unwrap();
    sent.push(req.envelope.clone());
    assert_eq!(req.seqs.len(), counted.len());
    let mut bodies = Vec::new();
    for (u, t) in [("Turn A.", "Answer A."), ("Turn B.", "Answer B."), ("Turn C.", "Answer C.")] {
        let body = step(&mut a, u, &anthropic_answer(t), &mut sent);
        assert!(body.get("context_management").is_none(), "no threshold edit while the block is on its way");
        bodies.push(body);
    }
    // The requests meanwhile carried the full history.
    assert_eq!(bodies[2]["messages"].as_array().unwrap().len(), 1 + counted.len() + 5);
    let before = history(&s);
    a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap();
    let after = history(&s);
    assert_eq!(after.len(), before.len() - counted.len() + 1);
    assert_eq!(&after[1..], &before[counted.len()..], "the three turns stay after the block, unchanged");
    let body = step(&mut a, "Turn D.", &anthropic_answer("Answer D."), &mut sent);
    let msgs = body["messages"].as_array().unwrap();
    // The block, the prefix's message, the 6 messages of turns A to C, turn D's user message.
    assert_eq!(msgs.len(), 1 + 1 + 6 + 1);
    assert_eq!(msgs[0]["content"][0]["type"], "compaction");
    assert_eq!(msgs[2]["content"][0]["text"], "Turn A.");
    verified(&s, Renderer::Anthropic);
    // Replay: every request the host sent, in order, gets its recorded answer; the native
    // request's answer is the provider's message with the block.
    let mut r = Replay::from_records(&records(&s)).unwrap();
    assert_eq!(r.len(), sent.len());
    for env in &sent {
        let ans = r.answer(env.as_bytes()).unwrap();
        if ans["purpose"] == "native-compaction" {
            assert_eq!(ans["outcome"], "compaction");
            let want: Value = serde_json::from_str(&fixture("anthropic-on-demand.json")).unwrap();
            assert_eq!(ans["body"]["content"], want["content"]);
            assert_eq!(ans["body"]["stop_reason"], "compaction");
        }
    }
    // Explain: the native compaction's cost and what it saved, beside the (absent) portable one.
    let x = llmsession::explain::explain_records(&records(&s), &Estimator).unwrap();
    let c = &x.compactions[0];
    assert_eq!((c.mechanism.as_str(), c.mode.as_deref(), c.request.as_deref()), ("native", Some("on-demand"), Some("n1")));
    assert_eq!(c.usage.as_ref().map(|u| (u.input_tokens, u.output_tokens)), Some((188, 301)));
    assert_eq!(c.requests_after, 1);
    assert!(c.replaced_tokens > 0 && c.saved_tokens == c.replaced_tokens.saturating_sub(c.checkpoint_tokens));
    assert_eq!(x.compaction_totals[1].landed, 1);
}

#[test]
fn a_refused_or_failed_on_demand_compaction_is_logged_and_changes_nothing() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    let h = history(&s);
    a.native_compaction_request().unwrap();
    // Input that is not an answer is an error, and the request stays in flight.
    assert_eq!(a.finish_native_compaction("not json").unwrap_err().kind(), ErrorKind::MalformedJson);
    let out = a.finish_native_compaction(&fixture("anthropic-on-demand-max-tokens.json")).unwrap();
    assert_eq!(out.outcome, llmsession::compaction::Outcome::Failed);
    assert_eq!(out.stop_reason.as_deref(), Some("max_tokens"));
    assert!(out.error.as_deref().unwrap().contains("output limit"), "{out:?}");
    let end = events(&s).into_iter().rfind(|e| e["type"] == "compaction/end").unwrap();
    assert_eq!(end["data"]["stopReason"], "max_tokens");
    assert_eq!(history(&s), h);
    assert_eq!(a.finish_native_compaction("{}").unwrap_err().kind(), ErrorKind::OutOfOrder, "nothing in flight");
    // A transport failure, reported by the host.
    a.native_compaction_request().unwrap();
    let out = a.fail_native_compaction("timed out after 120 s").unwrap();
    assert_eq!(out.error.as_deref(), Some("timed out after 120 s"));
    // An error answer of the provider.
    a.native_compaction_request().unwrap();
    let out = a.finish_native_compaction(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap();
    assert!(out.error.as_deref().unwrap().contains("overloaded_error"), "{out:?}");
    assert_eq!(history(&s), h);
    assert_eq!(count(&s, "compaction/start"), 3);
    turn(&mut a, "Go on.", &anthropic_answer("Ok."));
    verified(&s, Renderer::Anthropic);
    // Replay answers the failed requests with their failures.
    let mut r = Replay::from_records(&records(&s)).unwrap();
    assert_eq!(r.len(), 5);
    let _ = r.answer(b"{}").unwrap_err();
}

#[test]
fn openai_threshold_and_standalone_compaction() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::OpenAiResponses, "gpt-5.3-codex", true);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    let (body, betas) = turn(&mut a, "Start logsift.", &responses_answer("Started."));
    assert_eq!(body["context_management"], json!([{"type":"compaction","compact_threshold":160000}]));
    assert!(betas.is_empty());
    turn(&mut a, "Add --since.", &fixture("openai-threshold.json"));
    let answer: Value = serde_json::from_str(&fixture("openai-threshold.json")).unwrap();
    let h = history(&s);
    assert_eq!(h[0]["content"], json!([{"type":"opaque","origin":"openai-responses","item": answer["output"][0]}]));
    // Later requests (stateless, store: false) carry the item and drop what it replaced.
    let (body, _) = turn(&mut a, "JSON output.", &responses_answer("Done."));
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[0]["content"][0]["text"], "<project>logsift: Rust, clap, serde_json.</project>");
    assert_eq!(input[1], answer["output"][0]);
    assert_eq!(input[2]["id"], "msg_0c11b8");
    assert_eq!(body["store"], false);
    // The standalone endpoint: its body, then its window replaces the history.
    let req = a.native_compaction_request().unwrap();
    assert_eq!(req.endpoint, "/v1/responses/compact");
    assert!(req.betas.is_empty());
    let body: Value = serde_json::from_str(&req.body).unwrap();
    let mut keys: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["input", "instructions", "model", "prompt_cache_key"], "what the endpoint takes");
    assert_eq!(body["input"][1], answer["output"][0], "the earlier item goes to the endpoint too");
    a.finish_native_compaction(&fixture("openai-compact.json")).unwrap();
    let window: Value = serde_json::from_str(&fixture("openai-compact.json")).unwrap();
    let (body, _) = turn(&mut a, "Tests next.", &responses_answer("Ok."));
    let input = body["input"].as_array().unwrap();
    assert_eq!(&input[1..3], window["output"].as_array().unwrap().as_slice(), "the window as it came");
    assert_eq!(input.len(), 1 + 2 + 1);
    verified(&s, Renderer::OpenAiResponses);
}

#[test]
fn previous_response_id_is_refused_with_native_compaction() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::OpenAiResponses, "gpt-5.3-codex", false);
    a.set_policy(Some(native_policy(Mechanism::Auto))).unwrap();
    let mut o = a.options().clone();
    o.config.extra.insert("previous_response_id".into(), json!("resp_1"));
    a.set_options(o).unwrap();
    a.start_turn(Message::user_text("Start.")).unwrap();
    let e = a.next_body(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("previous_response_id"), "{e}");
    assert_eq!(count(&s, "step/start"), 0, "nothing was built");
}

type Calls = Arc<Mutex<Vec<SummaryRequest>>>;

fn summariser(a: &mut Agent) -> Calls {
    let calls: Calls = Arc::default();
    let c = calls.clone();
    a.set_summariser(Some(Arc::new(move |r: &SummaryRequest, _: &CancelToken| {
        c.lock().push(r.clone());
        Ok(SummaryOutput { text: "logsift: a Rust CLI; --since was added.".into(), ..SummaryOutput::default() })
    })));
    calls
}

/// The acceptance session: native on Anthropic, then on OpenAI Responses, then back to
/// Anthropic; each route change falls back to a portable checkpoint; verify, replay, explain.
#[test]
fn route_changes_fall_back_to_portable_checkpoints() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", true);
    let calls = summariser(&mut a);
    a.set_policy(Some(native_policy(Mechanism::Auto))).unwrap();
    let mut sent: Vec<String> = Vec::new();
    step(&mut a, "Start logsift.", &anthropic_answer("Started."), &mut sent);
    step(&mut a, "Add --since.", &fixture("anthropic-threshold.json"), &mut sent);
    // To OpenAI Responses: the Anthropic block has readable content, which becomes the
    // checkpoint; no summariser call.
    let mut o = a.options().clone();
    o.config = CallConfig::new("openai-responses", "gpt-5.3-codex");
    a.set_options(o).unwrap();
    a.set_renderer(Renderer::OpenAiResponses, RenderOptions::default()).unwrap();
    let body = step(&mut a, "JSON output.", &responses_answer("Done."), &mut sent);
    assert!(calls.lock().is_empty());
    let text = body.to_string();
    assert!(!body["input"].as_array().unwrap().iter().any(|i| i["type"] == "compaction"), "no Anthropic block goes to OpenAI: {text}");
    assert!(
        text.contains("<conversation-checkpoint>") && text.contains("The user is writing a log-parsing CLI"),
        "its summary does, as text"
    );
    let evs = events(&s);
    let rc = evs.iter().find(|e| e["data"]["trigger"] == "route-change").unwrap();
    assert_eq!(rc["data"]["from"], "anthropic");
    assert_eq!(rc["data"]["to"], "openai-responses");
    let summary = evs.iter().rfind(|e| e["type"] == "compaction/summary").unwrap();
    assert_eq!(summary["data"]["source"], "native-content");
    // Native on OpenAI: threshold, then the standalone endpoint.
    step(&mut a, "Tests.", &fixture("openai-threshold.json"), &mut sent);
    let req = a.native_compaction_request().unwrap();
    sent.push(req.envelope.clone());
    a.finish_native_compaction(&fixture("openai-compact.json")).unwrap();
    step(&mut a, "Docs.", &responses_answer("Written."), &mut sent);
    // Back to Anthropic: the OpenAI item is opaque; the summariser summarises what it replaced
    // (the log holds it), before the first request on the new route.
    let mut o = a.options().clone();
    o.config = CallConfig::new("anthropic", "claude-opus-4-8");
    a.set_options(o).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("Release.")).unwrap();
    let b = a.next_body(&CancelToken::new()).unwrap();
    let calls = calls.lock().clone();
    assert_eq!(calls.len(), 1);
    sent.push(calls[0].json.clone());
    sent.push(a.last_envelope().unwrap());
    let asked: Value = serde_json::from_str(&calls[0].json).unwrap();
    assert_eq!(asked["purpose"], "compaction");
    assert_eq!(asked["provider"], "anthropic");
    let asked = asked["messages"].to_string();
    assert!(asked.contains("Tests."), "the summary covers what the item replaced: {asked}");
    assert!(!asked.contains("encrypted_content"), "and not the item itself");
    assert!(!b.json.contains("encrypted_content"), "no OpenAI item goes to Anthropic");
    a.record_body(&anthropic_answer("Released.")).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    verified(&s, Renderer::Anthropic);
    let mut r = Replay::from_records(&records(&s)).unwrap();
    assert_eq!(r.len(), sent.len());
    for env in &sent {
        r.answer(env.as_bytes()).unwrap();
    }
    let x = llmsession::explain::explain_records(&records(&s), &Estimator).unwrap();
    let mechanisms: Vec<(&str, &str)> = x.compactions.iter().map(|c| (c.mechanism.as_str(), c.trigger.as_str())).collect();
    assert_eq!(
        mechanisms,
        [("native", "provider"), ("portable", "route-change"), ("native", "provider"), ("native", "manual"), ("portable", "route-change")]
    );
    assert_eq!(x.compaction_totals[0].landed, 2);
    assert_eq!(x.compaction_totals[1].landed, 3);
}

#[test]
fn an_opaque_item_without_a_summariser_stops_the_request_on_a_new_route() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::OpenAiResponses, "gpt-5.3-codex", false);
    turn(&mut a, "Start.", &fixture("openai-threshold.json"));
    let mut o = a.options().clone();
    o.config = CallConfig::new("anthropic", "claude-opus-4-8");
    a.set_options(o).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("Next.")).unwrap();
    let e = a.next_body(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Summariser);
    assert!(e.message().contains("cannot read the openai-responses compaction block"), "{e}");
    assert_eq!(count(&s, "step/start"), 1, "the request was not built");
    let end = events(&s).into_iter().rfind(|e| e["type"] == "compaction/end").unwrap();
    assert_eq!(end["data"]["outcome"], "failed");
    // With a summariser the same turn goes on.
    summariser(&mut a);
    a.next_body(&CancelToken::new()).unwrap();
    a.record_body(&anthropic_answer("Ok.")).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    verified(&s, Renderer::Anthropic);
}

/// Whatever the route, no renderer sends another provider's compaction item: the opaque block
/// of a checkpoint is dropped by every other format.
#[test]
fn no_provider_item_reaches_another_provider() {
    let openai =
        json!({"type":"opaque","origin":"openai-responses","item":{"type":"compaction","id":"cmp_1","encrypted_content":"gAAAA-secret"}});
    let anthropic = json!({"type":"opaque","origin":"anthropic","item":{"type":"compaction","content":"summary","signature":"sig-secret"}});
    for (item, own) in [(openai, Renderer::OpenAiResponses), (anthropic, Renderer::Anthropic)] {
        let env = json!({"provider":"p","model":"m","messages":[
            {"role":"user","content":[item]},
            {"role":"user","content":[{"type":"text","text":"next"}]}
        ],"sessionId":"s","purpose":"conversation"});
        for r in Renderer::ALL {
            let body = r.render(&env, &RenderOptions::default()).unwrap().to_string();
            let leaked = body.contains("secret");
            assert_eq!(leaked, r == own, "{} renders the {} item: {body}", r.name(), own.name());
        }
    }
}

#[test]
fn native_compaction_needs_a_route_that_has_it() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::OpenAi, "gpt-4.1", false);
    a.set_policy(Some(native_policy(Mechanism::Native))).unwrap();
    let (body, _) = turn(
        &mut a,
        "Start.",
        &json!({"id":"c","object":"chat.completion","model":"gpt-4.1",
        "choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":5,"completion_tokens":1}})
        .to_string(),
    );
    assert!(body.get("context_management").is_none());
    let e = a.native_compaction_request().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("openai"), "{e}");
    // A native-compaction envelope is refused by a renderer without one.
    let env = json!({"provider":"p","model":"m","messages":[],"purpose":"native-compaction"});
    for r in [Renderer::OpenAi, Renderer::Gemini, Renderer::GeminiInteractions] {
        assert_eq!(r.render(&env, &RenderOptions::default()).unwrap_err().kind(), ErrorKind::InvalidInput);
    }
}

/// The answer of a background compaction is recorded between steps: while a conversation
/// request is open it is refused (nothing changes), and recorded after the response.
#[test]
fn a_native_answer_waits_for_the_open_request() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    a.native_compaction_request().unwrap();
    a.start_turn(Message::user_text("Meanwhile.")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let before = s.records().unwrap().len();
    let e = a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder, "{e}");
    assert_eq!(s.records().unwrap().len(), before);
    a.record_body(&anthropic_answer("Ok.")).unwrap();
    a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    let h = history(&s);
    assert_eq!(h.len(), 3, "the block, then the turn taken meanwhile");
    assert_eq!(h[1]["content"][0]["text"], "Meanwhile.");
    verified(&s, Renderer::Anthropic);
}

/// A threshold compaction in an answer while an on-demand request is in flight supersedes it:
/// the request is failed, logged, and the threshold block replaces the history.
#[test]
fn a_threshold_compaction_supersedes_a_request_in_flight() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    a.native_compaction_request().unwrap();
    turn(&mut a, "Add --since.", &fixture("anthropic-threshold.json"));
    let ends: Vec<Value> = events(&s).into_iter().filter(|e| e["type"] == "compaction/end").collect();
    assert_eq!(ends[0]["data"]["outcome"], "failed");
    assert!(ends[0]["data"]["error"].as_str().unwrap().contains("superseded"), "{ends:?}");
    assert_eq!(ends[1]["data"]["outcome"], "landed");
    assert_eq!(a.finish_native_compaction(&fixture("anthropic-on-demand.json")).unwrap_err().kind(), ErrorKind::OutOfOrder);
    assert_eq!(history(&s).len(), 2);
    verified(&s, Renderer::Anthropic);
}

#[test]
fn the_policy_names_its_mechanism() {
    let p = CompactionPolicy::from_value(&json!({"contextWindow": 200000, "mechanism": "auto"}), "policy").unwrap();
    assert_eq!(p.mechanism, Mechanism::Auto);
    assert_eq!(CompactionPolicy::from_value(&json!({"contextWindow": 200000}), "policy").unwrap().mechanism, Mechanism::Portable);
    let e = CompactionPolicy::from_value(&json!({"contextWindow": 200000, "mechanism": "server"}), "policy").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidPolicy);
    assert_eq!(e.detail()["field"], "mechanism");
    assert!(e.message().contains("\"portable\", \"native\" or \"auto\""), "{e}");
    let e = CompactionPolicy::from_value(&json!({"contextWindow": 200000, "mechanism": 1}), "policy").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
}

/// A session prefix of system-role messages only (hoisted into `system`): the block is first in
/// `messages` anyway, and the agent's body cache renders the same bodies as the envelopes.
#[test]
fn a_system_prefix_stays_in_system_with_a_native_block() {
    let s = Session::in_memory();
    let mut a = agent(&s, Renderer::Anthropic, "claude-opus-4-8", false);
    a.add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| {
        let mut out = vec![Message::new(Role::System, vec![Block::text("Only edit files under src/.")])];
        out.extend_from_slice(rest);
        Ok(out)
    }))
    .unwrap();
    turn(&mut a, "Start logsift.", &anthropic_answer("Started."));
    turn(&mut a, "Add --since.", &fixture("anthropic-threshold.json"));
    let (body, _) = turn(&mut a, "JSON output.", &anthropic_answer("Done."));
    assert_eq!(body["messages"][0]["content"][0]["type"], "compaction");
    assert_eq!(body["system"][1]["text"], "Only edit files under src/.");
    verified(&s, Renderer::Anthropic);
}
