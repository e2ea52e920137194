//! The provider body of `Agent::next_body` is the rendering of its logged envelope, byte for
//! byte, for every renderer: on random sessions (tool calls and parallel results, reasoning
//! signed and not, thinking-only replies, provider-native blocks of other formats, empty
//! messages, injected context, host cache marks on tools), through compactions, resumes (new
//! instances with a session prefix) and header changes; and the hot path's error cases.

use llmsession::agent::ToolResultInput;
use llmsession::compaction::SummaryOutput;
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::render::{CacheKey, CacheMode, CacheTtl, PromptCacheOptions, RenderOptions, Renderer};
use llmsession::request::digest;
use llmsession::types::ToolSchema;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Role, Session};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

fn tool(name: &str, host_mark: bool) -> ToolSchema {
    let mut extra = serde_json::Map::new();
    if host_mark {
        extra.insert("cache_control".into(), json!({"type":"ephemeral"}));
    }
    let mut t =
        ToolSchema::function(name, Some(format!("The {name} tool.")), json!({"type":"object","properties":{"arg":{"type":"string"}}}));
    t.extra = extra;
    t
}

/// Agent options: `variant` picks the system prompt, the tools (with host marks on some) and
/// the sampling fields, so that a change of variant is a header change.
fn options(variant: u8) -> AgentOptions {
    let mut config = CallConfig::new("p", "m-test");
    config.max_tokens = Some(512);
    let mut o = AgentOptions::new(config);
    o.check_requests = true;
    match variant % 4 {
        0 => {
            o.system = Some("You are a careful agent.".into());
            o.tools = vec![tool("read", false), tool("bash", false)];
        }
        1 => {
            o.system = None;
            o.tools = vec![tool("read", false), tool("bash", true)];
            o.config.temperature = Some(0.25);
        }
        2 => {
            o.system = Some("Be brief. ".repeat(20));
            o.tools = vec![tool("read", true), tool("bash", true), tool("grep", true)];
            o.config.extra.insert("top_k".into(), json!(5));
        }
        _ => {
            o.system = Some("Another prompt.".into());
            o.tools = Vec::new();
            o.config.reasoning_effort = Some("low".into());
        }
    }
    o
}

/// A session prefix: none, a system-role message and a project note, an acknowledged note,
/// or system-role messages only.
fn prefix(kind: u8) -> Vec<Message> {
    let sys = |t: &str| Message::new(Role::System, vec![Block::text(t)]);
    match kind % 4 {
        0 => Vec::new(),
        1 => vec![sys("Only edit files under src/."), Message::user_text("<project>A Rust crate.</project>")],
        2 => vec![Message::user_text("<project>A Rust crate.</project>"), Message::new(Role::Assistant, vec![Block::text("Understood.")])],
        _ => vec![sys("Rule one."), sys("Rule two.")],
    }
}

fn block(v: Value) -> Block {
    Block::from_value(&v, "").unwrap()
}

/// What one step of the script does.
#[derive(Clone, Debug)]
enum Op {
    /// The model answers: `shape` picks the assistant message's blocks, `calls` tool calls
    /// (each answered, results in a shuffled order), `error_result` marks one failed.
    Reply { shape: u8, calls: u8, error_result: bool, reversed: bool },
    /// Host context (deferred while a tool batch is open).
    Inject,
    /// The turn ends and a new one starts.
    NewTurn,
    /// A compaction between steps.
    Compact,
    /// The instance is disposed and a new one resumes the session (prefix composed again).
    Resume,
    /// A header change (another options variant).
    Header(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8, 0u8..3, any::<bool>(), any::<bool>()).prop_map(|(shape, calls, error_result, reversed)| Op::Reply { shape, calls, error_result, reversed }),
        1 => Just(Op::Inject),
        1 => Just(Op::NewTurn),
        1 => Just(Op::Compact),
        1 => Just(Op::Resume),
        1 => (0u8..4).prop_map(Op::Header),
    ]
}

/// The assistant message of a reply.
fn reply_message(step: u64, shape: u8, calls: &[String]) -> Message {
    let mut blocks = match shape {
        0 => vec![Block::text(format!("Step {step}."))],
        1 => vec![block(json!({"type":"reasoning","text":"Think first.","signature":"c2ln"})), Block::text("Then act.")],
        2 => vec![block(json!({"type":"reasoning","text":"Unsigned thought."}))],
        // Thinking only: Anthropic's breakpoint passes back to an earlier block.
        3 => vec![
            block(json!({"type":"reasoning","text":"Deep.","signature":"c2ln"})),
            block(json!({"type":"redacted-thinking","data":"cmVk"})),
        ],
        // Other providers' native state: every renderer keeps its own and drops the others'.
        4 => vec![
            block(json!({"type":"reasoning","text":"Gemini thought.","origin":"gemini","thoughtSignature":"Z2Vt"})),
            block(
                json!({"type":"opaque","origin":"openai-responses","item":{"type":"compaction","id":"cmp_1","encrypted_content":"Y21w"}}),
            ),
            block(json!({"type":"text","text":"Native.","origin":"openai-responses","itemId":"msg_7"})),
        ],
        5 => vec![block(json!({"type":"text","text":""}))],
        6 => Vec::new(),
        _ => vec![Block::text("One."), Block::text("Two.")],
    };
    for (i, id) in calls.iter().enumerate() {
        let name = if i % 2 == 0 { "read" } else { "bash" };
        blocks.push(Block::tool_call(id, name, &format!("{{\"arg\":\"{step}-{i}\"}}")));
    }
    let mut m = Message::new(Role::Assistant, blocks);
    m.provenance = Some(llmsession::Provenance { provider: "p".into(), model: "m-test".into(), extra: Default::default() });
    m
}

fn result_for(id: &str, n: usize, is_error: bool) -> ToolResultInput {
    let content = match n % 3 {
        0 => vec![Block::text(format!("result of {id}"))],
        1 => vec![Block::text(format!("line 1 of {id}")), Block::text("line 2")],
        _ => vec![Block::text("")],
    };
    ToolResultInput { call_id: id.to_string(), content, is_error }
}

fn render_options(kind: u8, renderer: Renderer) -> RenderOptions {
    let openai = matches!(renderer, Renderer::OpenAi | Renderer::OpenAiResponses);
    match kind % 6 {
        // OpenAI's explicit breakpoints, in both modes (the other renderers refuse them).
        4 if openai => RenderOptions::default().with_cache_breakpoints(true),
        5 if openai => RenderOptions::default()
            .with_cache_breakpoints(true)
            .with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Explicit), ttl: Some("30m".into()) }),
        4 | 5 => RenderOptions::default(),
        0 => RenderOptions::default(),
        1 => RenderOptions::default().with_cache_key(CacheKey::Custom("tenant-7".into())).with_cache_retention("24h"),
        2 => RenderOptions::default().with_cache_key(CacheKey::Off).with_cache_ttl(CacheTtl::OneHour),
        _ => RenderOptions::default().with_cache_ttl(CacheTtl::FiveMinutes),
    }
}

struct Run {
    session: Session,
    agent: Option<Agent>,
    renderer: Renderer,
    options: RenderOptions,
    prefix: u8,
    variant: u8,
    bodies: usize,
    next_call: u64,
}

fn new_agent(session: &Session, renderer: Renderer, options: &RenderOptions, prefix_kind: u8, variant: u8) -> Agent {
    let mut a = Agent::new(session, self::options(variant)).unwrap();
    let p = prefix(prefix_kind);
    if !p.is_empty() {
        a.add_prefix_listener(Arc::new(move |_: &ListenerContext<'_>, rest: &[Message]| {
            let mut out = p.clone();
            out.extend_from_slice(rest);
            Ok(out)
        }))
        .unwrap();
    }
    a.set_summariser(Some(Arc::new(|_: &llmsession::compaction::SummaryRequest, _: &CancelToken| {
        Ok(SummaryOutput { text: "Summary: work so far.".into(), usage: None, provider: None, model: None, truncated: false })
    })));
    a.set_renderer(renderer, options.clone()).unwrap();
    a
}

impl Run {
    fn new(renderer: Renderer, options: RenderOptions, prefix: u8, variant: u8) -> Run {
        let session = Session::in_memory();
        let agent = new_agent(&session, renderer, &options, prefix, variant);
        Run { session, agent: Some(agent), renderer, options, prefix, variant, bodies: 0, next_call: 0 }
    }

    /// Builds the next body and checks it against the rendering of its logged envelope.
    fn body(&mut self) {
        let body = self.a().next_body(&CancelToken::new()).unwrap();
        let envelope = self.a().last_envelope().unwrap();
        assert_eq!(digest(envelope.as_bytes()), body.info.digest);
        assert_eq!(envelope.len(), body.info.envelope_len);
        let v: Value = serde_json::from_str(&envelope).unwrap();
        let mut opts = self.options.clone();
        opts.prefix_len = body.info.prefix_len;
        let fresh = serde_json::to_string(&self.renderer.render(&v, &opts).unwrap()).unwrap();
        assert_eq!(body.json, fresh, "{} body {} differs from the rendering of its envelope", self.renderer.name(), self.bodies);
        assert_eq!(self.a().last_request_info(), Some(&body.info));
        self.bodies += 1;
    }

    fn a(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("a live agent")
    }

    fn at_rest(&self) -> bool {
        self.session.with_log(|l| l.state().open_turn.as_ref().is_none_or(|t| !t.step_open) && l.state().pending.is_empty())
    }

    fn turn_open(&self) -> bool {
        self.session.with_log(|l| l.state().open_turn.is_some())
    }

    fn run(&mut self, ops: &[Op]) {
        self.a().start_turn(Message::user_text("Start.")).unwrap();
        self.body();
        for (n, op) in ops.iter().enumerate() {
            match op {
                Op::Reply { shape, calls, error_result, reversed } => {
                    let ids: Vec<String> = (0..*calls)
                        .map(|_| {
                            self.next_call += 1;
                            format!("call_{}", self.next_call)
                        })
                        .collect();
                    let m = reply_message(n as u64, *shape, &ids);
                    self.a().record_response(m, None).unwrap();
                    let mut results: Vec<ToolResultInput> =
                        ids.iter().enumerate().map(|(i, id)| result_for(id, i + n, *error_result && i == 0)).collect();
                    if *reversed {
                        results.reverse();
                    }
                    for r in results {
                        self.a().record_tool_result(r).unwrap();
                    }
                }
                Op::Inject => {
                    self.a().inject(Message::user_text(format!("<context>note {n}</context>"))).unwrap();
                }
                Op::NewTurn => {
                    if self.at_rest() {
                        self.a().end_turn(TurnEndReason::Completed).unwrap();
                        self.a().start_turn(Message::user_text(format!("Turn at {n}."))).unwrap();
                    }
                }
                Op::Compact => {
                    if self.at_rest() && self.session.with_log(|l| l.history().len()) > 2 {
                        // A span may be refused (nothing to compact, a summary not smaller):
                        // either way the next body must still be right.
                        let _ = self.a().compact(None, &CancelToken::new());
                    }
                }
                Op::Resume => {
                    self.agent.take().unwrap().dispose().unwrap();
                    self.prefix = self.prefix.wrapping_add(1);
                    self.agent = Some(new_agent(&self.session, self.renderer, &self.options, self.prefix, self.variant));
                    self.a().start_turn(Message::user_text(format!("Resumed at {n}."))).unwrap();
                }
                Op::Header(v) => {
                    self.variant = *v;
                    self.a().set_options(options(*v)).unwrap();
                }
            }
            if !self.turn_open() {
                self.a().start_turn(Message::user_text(format!("Again at {n}."))).unwrap();
            }
            if self.at_rest() {
                self.body();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_body_is_the_rendering_of_its_envelope(
        renderer in 0usize..Renderer::ALL.len(),
        opts in 0u8..6,
        prefix_kind in 0u8..4,
        variant in 0u8..4,
        ops in prop::collection::vec(op(), 1..28),
    ) {
        let renderer = Renderer::ALL[renderer];
        let mut run = Run::new(renderer, render_options(opts, renderer), prefix_kind, variant);
        run.run(&ops);
        prop_assert!(run.bodies >= 1);
        // The whole log still verifies (every envelope rebuilt from the log alone).
        let report = run.session.verify().unwrap();
        prop_assert!(report.requests as usize >= run.bodies);
        // And so does every body, rebuilt by a cache followed across the whole log.
        let bodies = run.session.verify_bodies(renderer, &run.options).unwrap();
        prop_assert_eq!(bodies.bodies, report.requests);
    }
}

/// Long sessions: the sealed runs of the history and the body's one copy of it, across a
/// compaction and a header change, for every renderer.
#[test]
fn long_sessions_with_compaction_and_header_change() {
    for renderer in Renderer::ALL {
        let mut run = Run::new(renderer, RenderOptions::default(), 1, 0);
        let mut ops = Vec::new();
        for i in 0..120u8 {
            ops.push(Op::Reply { shape: i % 8, calls: 1 + i % 2, error_result: i % 7 == 0, reversed: i % 3 == 0 });
            if i == 50 {
                ops.push(Op::Compact);
            }
            if i == 80 {
                ops.push(Op::Header(2));
            }
        }
        run.run(&ops);
        assert!(run.bodies > 100, "{}", run.bodies);
    }
}

/// The body a host is handed is the renderer's cache, not a copy of it: the agent keeps the same
/// buffer and renders the next body from it. A body the host still holds stays as it was while
/// later bodies are built (their breakpoints move, a compaction and a header change rebuild the
/// rendered history), and it outlives the agent.
#[test]
fn a_held_body_is_the_cache_and_stays_as_it_was() {
    for renderer in Renderer::ALL {
        let mut run = Run::new(renderer, render_options(1, renderer), 1, 0);
        let mut held: Vec<(llmsession::log::Text, String)> = Vec::new();
        run.a().start_turn(Message::user_text("Start.")).unwrap();
        for i in 0..40u8 {
            match i {
                // A compaction and a header change: the rendered history is rebuilt from the
                // body the cache holds.
                12 => {
                    run.a().compact(None, &CancelToken::new()).unwrap();
                }
                25 => run.a().set_options(options(2)).unwrap(),
                _ => {}
            }
            let body = run.a().next_body(&CancelToken::new()).unwrap().json;
            let (buf, _) = body.c_buffer().expect("a NUL follows the body in its buffer");
            assert_eq!(
                std::sync::Arc::strong_count(buf),
                2,
                "{}: the host's body and the renderer's cache are one buffer",
                renderer.name()
            );
            if let Some((previous, _)) = held.last() {
                let (buf, _) = previous.c_buffer().unwrap();
                assert_eq!(std::sync::Arc::strong_count(buf), 1, "{}: the cache moved on to the new body", renderer.name());
            }
            held.push((body.clone(), body.to_string()));
            // The step's reply, so that the next body has something new.
            let ids = vec![format!("held_{i}")];
            run.a().record_response(reply_message(u64::from(i), i % 8, &ids), None).unwrap();
            run.a().record_tool_result(result_for(&ids[0], 1, false)).unwrap();
        }
        run.agent.take().unwrap().dispose().unwrap();
        for (k, (body, copy)) in held.iter().enumerate() {
            assert_eq!(body.as_str(), copy, "{} body {k} changed after it was handed out", renderer.name());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The hot path's errors: each is clear and changes nothing.

fn events(s: &Session) -> Vec<String> {
    s.with_log(|l| l.lines().iter().map(|l| l.to_string()).collect())
}

#[test]
fn next_body_needs_a_renderer_and_a_renderable_history() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(0)).unwrap();
    a.start_turn(Message::user_text("hi")).unwrap();
    let before = events(&s);
    let e = a.next_body(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("no renderer"), "{}", e.message());
    let e = a.record_body("{}").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert_eq!(a.last_envelope().unwrap_err().kind(), ErrorKind::OutOfOrder);
    let e = a.set_renderer(Renderer::Anthropic, RenderOptions::with_prefix_len(1)).unwrap_err();
    assert_eq!(e.message(), "prefixLen: is the agent's own (the length of its session prefix); leave it out");
    assert!(a.renderer().is_none());
    assert_eq!(events(&s), before);

    // A message the renderer has no form for: the error of rendering the envelope, nothing
    // written; another renderer takes the same history.
    a.inject(Message::new(Role::User, vec![block(json!({"type":"audio","data":"AAAA"}))])).unwrap();
    let before = events(&s);
    a.set_renderer(Renderer::OpenAi, RenderOptions::default()).unwrap();
    let e = a.next_body(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(e.message(), "messages[1].content[0]: block type \"audio\" is not supported in a user message by the openai renderer");
    assert_eq!(events(&s), before);
    let e = a.next_body(&CancelToken::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "the same again: nothing was kept half-done");
    a.next_request(&CancelToken::new()).unwrap();
}

#[test]
fn record_body_parses_once_and_refuses_what_is_not_a_reply() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(0)).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("hi")).unwrap();
    let reply = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[
        {"type":"thinking","thinking":"Look.","signature":"c2ln"},{"type":"text","text":"Reading."},
        {"type":"tool_use","id":"toolu_1","name":"read","input":{"arg":"a"}}],
        "stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":90}}"#;
    // No step open yet.
    assert_eq!(a.record_body(reply).unwrap_err().kind(), ErrorKind::OutOfOrder);
    a.next_body(&CancelToken::new()).unwrap();
    let before = events(&s);
    for (bad, kind, msg) in [
        ("{\"content\":", ErrorKind::MalformedJson, "malformed JSON"),
        (
            r#"{"choices":[{"message":{"role":"assistant","content":"x"}}]}"#,
            ErrorKind::InvalidInput,
            "a anthropic response body: response.content: expected an array",
        ),
        (r#"{"content":[{"type":"text"}]}"#, ErrorKind::InvalidInput, "response.content[0].text: expected a string"),
    ] {
        let e = a.record_body(bad).unwrap_err();
        assert_eq!(e.kind(), kind, "{bad}");
        assert!(e.message().contains(msg), "{}", e.message());
        assert_eq!(events(&s), before);
    }
    let r = a.record_body(reply).unwrap();
    assert_eq!(r.tool_calls, 1);
    let ev = s.with_log(|l| l.event(r.seq).unwrap());
    assert_eq!(ev.ty, "assistant/message");
    assert_eq!(ev.data["usage"], json!({"inputTokens":10,"outputTokens":5,"cacheReadTokens":90}));
    assert_eq!(ev.data["message"]["content"][0]["signature"], "c2ln");
    // The recorded message is what the parser made of the body, as record_response records it.
    let v: Value = serde_json::from_str(reply).unwrap();
    let parsed = llmsession::render::parse_response(Renderer::Anthropic, &v).unwrap();
    assert_eq!(ev.data["message"], parsed.message.to_value());
    a.record_tool_result(result_for("toolu_1", 0, false)).unwrap();
    let body = a.next_body(&CancelToken::new()).unwrap();
    assert!(body.json.contains("\"signature\":\"c2ln\""), "the thinking goes back: {}", body.json);
}

#[test]
fn last_envelope_after_a_compaction_comes_from_the_log() {
    let mut run = Run::new(Renderer::Anthropic, RenderOptions::default(), 1, 0);
    let ops: Vec<Op> = (0..6).map(|i| Op::Reply { shape: i, calls: 1, error_result: false, reversed: false }).collect();
    run.run(&ops);
    let info = run.a().last_request_info().cloned().unwrap();
    let before = run.a().last_envelope().unwrap();
    // The history is rewritten after the request: the envelope is still the logged one.
    run.a().record_response(reply_message(99, 0, &[]), None).unwrap();
    let out = run.a().compact(None, &CancelToken::new()).unwrap();
    assert_eq!(out.outcome, "landed");
    let after = run.a().last_envelope().unwrap();
    assert_eq!(after, before);
    assert_eq!(digest(after.as_bytes()), info.digest);
    run.body();
}

#[test]
fn verify_bodies_names_the_request_a_renderer_cannot_render() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(0)).unwrap();
    a.start_turn(Message::user_text("hi")).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(reply_message(1, 0, &["call_1".to_string()]), None).unwrap();
    // A tool result with an image: Anthropic renders it, chat completions cannot.
    let image = block(json!({"type":"image","mediaType":"image/png","data":"iVBORw0KGgo="}));
    a.record_tool_result(ToolResultInput { call_id: "call_1".into(), content: vec![image], is_error: false }).unwrap();
    a.next_request(&CancelToken::new()).unwrap();
    let ok = s.verify_bodies(Renderer::Anthropic, &RenderOptions::default()).unwrap();
    assert_eq!((ok.requests, ok.bodies), (2, 2));
    let e = s.verify_bodies(Renderer::OpenAi, &RenderOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().starts_with("turn 1 step 2 (seq "), "{}", e.message());
    assert!(
        e.message().contains("the openai body: messages[2].content[0].content[0]: block type \"image\" inside a tool result"),
        "{}",
        e.message()
    );
    assert_eq!(e.detail()["step"], 2);
}

#[test]
fn a_repeated_gemini_call_without_ids_records_in_every_turn() {
    // Gemini (or a Gemini-compatible server) without `responseId` and without
    // `functionCall.id`: the made-up id is a digest of the content, the same in both turns.
    let call = r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read","args":{"arg":"a.txt"}}}]},
        "finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":5},"modelVersion":"gemini-x"}"#;
    let answer = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Done."}]},"finishReason":"STOP"}]}"#;
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(0)).unwrap();
    a.set_renderer(Renderer::Gemini, RenderOptions::default()).unwrap();
    let mut ids = Vec::new();
    for turn in 1..=2u64 {
        a.start_turn(Message::user_text("read a.txt")).unwrap();
        a.next_body(&CancelToken::new()).unwrap();
        let r = a.record_body(call).unwrap();
        assert_eq!(r.tool_calls, 1, "turn {turn}");
        let ev = s.with_log(|l| l.event(r.seq).unwrap());
        let id = ev.data["message"]["content"][0]["id"].as_str().unwrap().to_string();
        assert_eq!(ev.data["message"]["content"][0]["syntheticId"], true);
        a.record_tool_result(result_for(&id, 0, false)).unwrap();
        let body = a.next_body(&CancelToken::new()).unwrap();
        // Made-up ids are never sent; the response names the function.
        assert!(!body.json.contains(&format!("\"id\":\"{id}\"")), "{}", body.json);
        assert!(body.json.contains(r#""functionResponse":{"name":"read""#), "{}", body.json);
        a.record_body(answer).unwrap();
        a.end_turn(TurnEndReason::Completed).unwrap();
        ids.push(id);
    }
    assert!(ids[0].starts_with("gemini-") && ids[0].ends_with("-0"), "{}", ids[0]);
    assert_eq!(ids[1], format!("{}-t2s1", ids[0]), "the second is made unique by its turn and step");
    let report = s.verify().unwrap();
    assert_eq!(report.requests, 4);
    assert_eq!(s.verify_bodies(Renderer::Gemini, &RenderOptions::default()).unwrap().bodies, 4);
}

#[test]
fn a_paused_anthropic_turn_is_continued_by_the_next_request_of_the_same_turn() {
    // pause_turn: a server tool loop paused the answer; the host builds the next request in the
    // same turn, which sends the paused assistant content back.
    let paused = r#"{"id":"msg_p","type":"message","role":"assistant","model":"claude-x","content":[
        {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"herbe"}},
        {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://example.org/h","title":"H","encrypted_content":"E1"}]}],
        "stop_reason":"pause_turn","usage":{"input_tokens":10,"output_tokens":5}}"#;
    let v: Value = serde_json::from_str(paused).unwrap();
    let parsed = llmsession::render::parse_response(Renderer::Anthropic, &v).unwrap();
    assert_eq!(parsed.finish_reason.as_deref(), Some("pause-turn"));
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(3)).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("cherche")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let r = a.record_body(paused).unwrap();
    assert_eq!((r.tool_calls, r.finish_reason.as_deref()), (0, Some("pause-turn")), "the host learns the turn is not over");
    let body: Value = serde_json::from_str(&a.next_body(&CancelToken::new()).unwrap().json).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["type"], "server_tool_use");
    assert_eq!(last["content"][1]["type"], "web_search_tool_result");
    a.record_body(r#"{"content":[{"type":"text","text":"Verte."}],"stop_reason":"end_turn"}"#).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    assert_eq!(s.verify().unwrap().requests, 2);
}

#[test]
fn record_body_and_record_stream_give_the_normalised_finish_reason() {
    let stream_data = |name: &str| std::fs::read(format!("{}/tests/data/stream/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options(0)).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("cherche")).unwrap();
    // Bodies: each stop reason as render::FINISH_REASONS spells it; none without one.
    for (stop, want) in [
        (Some("pause_turn"), Some("pause-turn")),
        (Some("refusal"), Some("refusal")),
        (Some("model_context_window_exceeded"), Some("context-overflow")),
        (Some("max_tokens"), Some("max-tokens")),
        (Some("a_new_reason"), Some("a_new_reason")),
        (None, None),
        (Some("end_turn"), Some("stop")),
    ] {
        a.next_body(&CancelToken::new()).unwrap();
        let mut body = json!({"content":[{"type":"text","text":"…"}],"usage":{"input_tokens":3,"output_tokens":1}});
        if let Some(stop) = stop {
            body["stop_reason"] = stop.into();
        }
        let r = a.record_body(&body.to_string()).unwrap();
        assert_eq!(r.finish_reason.as_deref(), want, "{stop:?}");
        assert_eq!(r.tool_calls, 0);
        let ev = s.with_log(|l| l.event(r.seq).unwrap());
        assert!(ev.data.get("finishReason").is_none(), "the finish reason is not logged");
    }
    a.end_turn(TurnEndReason::Completed).unwrap();
    // Streams: the stream's reason; "incomplete" for a cut stream recorded with partial.
    a.start_turn(Message::user_text("lis")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let mut st = llmsession::stream::StreamAccumulator::new(Renderer::Anthropic);
    st.feed(&stream_data("anthropic-tools.sse")).unwrap();
    let r = a.record_stream(&mut st, false).unwrap();
    assert_eq!((r.tool_calls, r.finish_reason.as_deref()), (1, Some("tool-calls")));
    let id = s.with_log(|l| l.event(r.seq).unwrap()).data["message"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool-call")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    a.record_tool_result(result_for(&id, 0, false)).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let bytes = stream_data("anthropic-citations.sse");
    let mut st = llmsession::stream::StreamAccumulator::new(Renderer::Anthropic);
    st.feed(&bytes[..bytes.len() * 2 / 3]).unwrap();
    let r = a.record_stream(&mut st, true).unwrap();
    assert_eq!((r.tool_calls, r.finish_reason.as_deref()), (0, Some("incomplete")));
    a.end_turn(TurnEndReason::Completed).unwrap();
    assert_eq!(s.verify().unwrap().requests, 9);
}

#[test]
fn provider_tools_and_file_blocks_are_logged_canonically_and_rebuilt() {
    // A function tool in OpenAI's shape (no description) and Anthropic server tools: the header
    // holds the canonical form, the body the provider's objects verbatim, and a changed provider
    // tool is a header change that verify rebuilds.
    let tools = |max_uses: u64| {
        ToolSchema::list_from_value(
            &json!([
                {"type":"function","function":{"name":"read","parameters":{"type":"object"}}},
                {"type":"provider","format":"anthropic","tool":{"type":"web_search_20250305","name":"web_search","max_uses":max_uses}},
                {"type":"provider","format":"anthropic","tool":{"type":"web_fetch_20250910","name":"web_fetch"}}
            ]),
            "tools",
        )
        .unwrap()
    };
    let headers = |s: &Session| {
        s.with_log(|l| (0..l.len() as u64).filter_map(|q| l.event(q)).filter(|e| e.ty == "request/header").collect::<Vec<_>>())
    };
    let s = Session::in_memory();
    let mut opts = AgentOptions::new(CallConfig::new("anthropic", "claude-x"));
    opts.check_requests = true;
    opts.tools = tools(5);
    let mut a = Agent::new(&s, opts.clone()).unwrap();
    a.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    let pdf = block(json!({"type":"file","mediaType":"application/pdf","data":"JVBERi0xLjQK","filename":"q3.pdf"}));
    a.start_turn(Message::new(Role::User, vec![Block::text("Summarise this, then check the news."), pdf])).unwrap();
    let body: Value = serde_json::from_str(&a.next_body(&CancelToken::new()).unwrap().json).unwrap();
    assert_eq!(body["tools"][0], json!({"name":"read","input_schema":{"type":"object"}}));
    assert_eq!(body["tools"][1], json!({"type":"web_search_20250305","name":"web_search","max_uses":5}));
    assert_eq!(body["messages"][0]["content"][1]["type"], "document");
    let first = headers(&s).remove(0);
    assert_eq!(first.data["header"]["tools"][0], json!({"name":"read","parameters":{"type":"object"}}));
    assert_eq!(
        first.data["header"]["tools"][1],
        json!({"type":"provider","format":"anthropic","tool":{"type":"web_search_20250305","name":"web_search","max_uses":5}})
    );
    // A server tool's result blocks come back in the answer and go back as they came.
    let answer = r#"{"id":"msg_1","model":"claude-x","stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5},"content":[
        {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"news"}},
        {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://example.com","title":"News","encrypted_content":"EqgfCioIARgBIiQ3","page_age":null}]},
        {"type":"text","text":"Done."}]}"#;
    a.record_body(answer).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    // The search budget changes: the header changes with it.
    let mut changed = opts.clone();
    changed.tools = tools(2);
    a.set_options(changed).unwrap();
    a.start_turn(Message::user_text("And today?")).unwrap();
    let body: Value = serde_json::from_str(&a.next_body(&CancelToken::new()).unwrap().json).unwrap();
    assert_eq!(body["tools"][1]["max_uses"], 2);
    assert_eq!(body["messages"][1]["content"][1]["type"], "web_search_tool_result");
    let changed = headers(&s).pop().unwrap();
    assert_eq!(changed.data["reason"], "change");
    assert_eq!(changed.data["header"]["tools"][1]["tool"]["max_uses"], 2, "{}", changed.data);
    assert_eq!(s.verify().unwrap().requests, 2);
    assert_eq!(s.verify_bodies(Renderer::Anthropic, &RenderOptions::default()).unwrap().bodies, 2);
    // Another format cannot render these requests, and says which tool.
    let e = s.verify_bodies(Renderer::OpenAiResponses, &RenderOptions::default()).unwrap_err();
    assert!(e.message().contains("tools[1]: the anthropic provider tool \"anthropic:web_search\" cannot be sent"), "{}", e.message());
    // A resumed instance logs the same tools, and every request still verifies.
    drop(a);
    let mut b = Agent::new(&s, AgentOptions { tools: tools(2), ..opts }).unwrap();
    b.set_renderer(Renderer::Anthropic, RenderOptions::default()).unwrap();
    b.start_turn(Message::user_text("Once more.")).unwrap();
    b.next_body(&CancelToken::new()).unwrap();
    let resumed = headers(&s).pop().unwrap();
    assert_eq!(resumed.data["reason"], "resume");
    assert_eq!(resumed.data["header"]["tools"], changed.data["header"]["tools"]);
    assert_eq!(s.verify_bodies(Renderer::Anthropic, &RenderOptions::default()).unwrap().bodies, 3);
}
