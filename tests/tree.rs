//! Agent trees (src/agent/spawn.rs): a child's first request extends its parent's last one in
//! every wire format, also rebuilt from the child's log alone after a reopen; its answer goes
//! back as the parent's result of the call, in call order; a child keeps its parent's model,
//! tools and system; every node verifies; maxTurns; the errors of spawn and finish.

use llmsession::agent::{SpawnOptions, ToolResultInput, DEFAULT_PLACEHOLDER};
use llmsession::compaction::SummaryOutput;
use llmsession::log::load::read_checked;
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::render::{CacheKey, CacheTtl, RenderOptions, Renderer};
use llmsession::request::{RecordedKind, RequestWalk};
use llmsession::store::{JsonlStore, Store};
use llmsession::types::ToolSchema;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Role, Session, SessionOptions};
use proptest::prelude::*;

#[path = "support/damaged_log.rs"]
mod damaged_log;
use serde_json::{json, Value};
use std::sync::Arc;

fn tool(name: &str) -> ToolSchema {
    ToolSchema::function(name, Some(format!("The {name} tool.")), json!({"type":"object","properties":{"arg":{"type":"string"}}}))
}

/// Options with a system prompt, three tools and a reasoning effort (the thinking config every
/// renderer sends in its own way); `variant` 1 adds a pass-through field.
fn options(variant: u8) -> AgentOptions {
    let mut config = CallConfig::new("p", "m-test");
    config.max_tokens = Some(512);
    config.reasoning_effort = Some("high".into());
    if variant % 2 == 1 {
        config.extra.insert("top_k".into(), json!(5));
    }
    let mut o = AgentOptions::new(config);
    o.check_requests = true;
    o.system = Some("You are the lead agent. Split work into subagents.".into());
    o.tools = vec![tool("read"), tool("bash"), tool("task")];
    o
}

fn block(v: Value) -> Block {
    Block::from_value(&v, "").unwrap()
}

/// The parent's agent: a session prefix (composed by a listener), a summariser, `renderer`.
fn parent_agent(session: &Session, renderer: Renderer, render: &RenderOptions, variant: u8) -> Agent {
    let mut a = Agent::new(session, options(variant)).unwrap();
    a.add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| {
        let mut out = vec![Message::user_text("<project>A Rust crate.</project>")];
        out.extend_from_slice(rest);
        Ok(out)
    }))
    .unwrap();
    a.set_summariser(Some(Arc::new(|_: &llmsession::compaction::SummaryRequest, _: &CancelToken| {
        Ok(SummaryOutput { text: "Summary: work so far.".into(), usage: None, provider: None, model: None, truncated: false })
    })));
    a.set_renderer(renderer, render.clone()).unwrap();
    a
}

/// An assistant reply: `shape` picks reasoning (signed, encrypted, native) and text; then the
/// tool calls `calls`.
fn reply(step: u64, shape: u8, calls: &[String]) -> Message {
    let mut blocks = match shape % 4 {
        0 => vec![Block::text(format!("Step {step}."))],
        1 => vec![block(json!({"type":"reasoning","text":"Think first.","signature":"c2ln"})), Block::text("Then act.")],
        2 => vec![
            block(json!({"type":"reasoning","text":"Deep.","signature":"c2ln"})),
            block(json!({"type":"redacted-thinking","data":"cmVk"})),
        ],
        _ => vec![
            block(json!({"type":"reasoning","text":"Gemini thought.","origin":"gemini","thoughtSignature":"Z2Vt"})),
            block(
                json!({"type":"opaque","origin":"openai-responses","item":{"type":"reasoning","id":"rs_1","encrypted_content":"ZW5j","summary":[]}}),
            ),
            Block::text("Native."),
        ],
    };
    for (i, id) in calls.iter().enumerate() {
        blocks.push(Block::tool_call(id, if i % 2 == 0 { "task" } else { "read" }, &format!("{{\"arg\":\"{step}-{i}\"}}")));
    }
    let mut m = Message::new(Role::Assistant, blocks);
    m.provenance = Some(llmsession::Provenance { provider: "p".into(), model: "m-test".into(), extra: Default::default() });
    m
}

fn text_result(id: &str, text: &str) -> ToolResultInput {
    ToolResultInput { call_id: id.into(), content: vec![Block::text(text)], is_error: false }
}

/// The key of a body's conversation array.
fn conversation_key(r: Renderer) -> &'static str {
    match r {
        Renderer::OpenAi | Renderer::Anthropic => "messages",
        Renderer::OpenAiResponses | Renderer::GeminiInteractions => "input",
        Renderer::Gemini => "contents",
    }
}

/// Removes the cache marks a renderer moves from request to request (Anthropic's
/// `cache_control`, OpenAI's `prompt_cache_breakpoint`): the providers' caches key on the
/// content, not on where a mark stands. A message content of one text part is written as its
/// string (the OpenAI renderers turn a string into a part to mark it: the same tokens).
fn strip_marks(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cache_control");
            m.remove("prompt_cache_breakpoint");
            m.values_mut().for_each(strip_marks);
            for key in ["content", "output"] {
                if let Some(Value::Array(parts)) = m.get(key) {
                    if let [Value::Object(p)] = parts.as_slice() {
                        let text_type = matches!(p.get("type").and_then(Value::as_str), Some("text" | "input_text"));
                        if p.len() == 2 && text_type {
                            let text = p["text"].clone();
                            m.insert(key.into(), text);
                        }
                    }
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_marks),
        _ => {}
    }
}

/// The child's body cut back to the parent's conversation, marks aside, is the parent's body
/// byte for byte (so the config, cache key, thinking, system and tools are the same, and the
/// conversation starts with the parent's); the child's conversation is longer.
fn assert_extends(r: Renderer, parent: &str, child: &str) {
    let key = conversation_key(r);
    let mut p: Value = serde_json::from_str(parent).unwrap();
    let mut c: Value = serde_json::from_str(child).unwrap();
    strip_marks(&mut p);
    strip_marks(&mut c);
    let n = p[key].as_array().unwrap().len();
    let cn = c[key].as_array().unwrap().len();
    assert!(cn > n, "{}: the child's conversation ({cn}) is longer than the parent's ({n})", r.name());
    c[key].as_array_mut().unwrap().truncate(n);
    let (ps, cs) = (serde_json::to_string(&p).unwrap(), serde_json::to_string(&c).unwrap());
    if ps != cs {
        let at = ps.bytes().zip(cs.bytes()).take_while(|(a, b)| a == b).count();
        panic!(
            "{}: the child's body differs from its parent's at byte {at}:\n parent …{}\n child  …{}",
            r.name(),
            &ps[at.saturating_sub(80)..(at + 80).min(ps.len())],
            &cs[at.saturating_sub(80)..(at + 80).min(cs.len())]
        );
    }
}

/// The provider body of the child's first own request, rebuilt from its log's records alone
/// (as another process reading the file would) and rendered for `r` with `render`.
fn first_own_body(records: &[Vec<u8>], r: Renderer, render: &RenderOptions) -> String {
    let contents = llmsession::store::StoreContents { records: records.to_vec(), last_complete: true };
    let log = read_checked(&contents).unwrap();
    let seed = log.header().parent.as_ref().unwrap().1;
    let (mut walk, events) = RequestWalk::of(&log);
    for ev in events {
        if let Some(req) = walk.rebuild(ev).unwrap() {
            if ev.seq >= seed {
                assert!(matches!(req.kind, RecordedKind::Conversation { .. }));
                assert!(req.matches(), "the child's first request is rebuilt from its log");
                let v: Value = serde_json::from_slice(&req.envelope).unwrap();
                let prefix_len = req.header.prefix().len();
                let mut o = render.clone();
                o.prefix_len = prefix_len;
                return serde_json::to_string(&r.render(&v, &o).unwrap()).unwrap();
            }
        }
        walk.apply(ev, ev.seq).unwrap();
    }
    panic!("the child's log records no request of its own")
}

fn render_options(kind: u8, r: Renderer) -> RenderOptions {
    match kind % 4 {
        0 => RenderOptions::default(),
        1 => RenderOptions::default().with_cache_ttl(CacheTtl::OneHour),
        2 => RenderOptions::default().with_cache_key(CacheKey::Custom("tenant-7".into())),
        _ if matches!(r, Renderer::OpenAi | Renderer::OpenAiResponses) => RenderOptions::default().with_cache_breakpoints(true),
        _ => RenderOptions::default().with_cache_ttl(CacheTtl::FiveMinutes),
    }
}

/// One step of the parent's script.
#[derive(Clone, Debug)]
enum Op {
    /// The model answers with `calls` tool calls (answered); `shape` picks its blocks.
    Reply { shape: u8, calls: u8 },
    /// The turn ends and another starts.
    NewTurn,
    /// Host context.
    Inject,
    /// A compaction between steps.
    Compact,
    /// The instance is disposed and a new one resumes (the same prefix).
    Resume,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 0u8..3).prop_map(|(shape, calls)| Op::Reply { shape, calls }),
        1 => Just(Op::NewTurn),
        1 => Just(Op::Inject),
        1 => Just(Op::Compact),
        1 => Just(Op::Resume),
    ]
}

/// Runs the parent's script, then a last reply with `last_calls` calls (none: the turn ends),
/// so the parent's last body is its last routed request. Returns the agent and that body.
fn run_parent(
    session: &Session,
    r: Renderer,
    render: &RenderOptions,
    variant: u8,
    ops: &[Op],
    last: (u8, u8),
) -> (Agent, String, Vec<String>) {
    let c = CancelToken::new();
    let mut a = parent_agent(session, r, render, variant);
    let mut next = 0u64;
    let mut ids = |n: u8| -> Vec<String> {
        (0..n)
            .map(|_| {
                next += 1;
                format!("call_{next}")
            })
            .collect()
    };
    a.start_turn(Message::user_text("Start.")).unwrap();
    let mut body = a.next_body(&c).unwrap().json;
    for (n, op) in ops.iter().enumerate() {
        match op {
            Op::Reply { shape, calls } => {
                let calls = ids(*calls);
                a.record_response(reply(n as u64, *shape, &calls), None).unwrap();
                for (i, id) in calls.iter().enumerate() {
                    a.record_tool_result(text_result(id, &format!("result {i}"))).unwrap();
                }
                if calls.is_empty() {
                    a.end_turn(TurnEndReason::Completed).unwrap();
                    a.start_turn(Message::user_text(format!("Next {n}."))).unwrap();
                }
            }
            Op::NewTurn => {
                a.end_turn(TurnEndReason::Completed).unwrap_or_else(|_| {
                    // A step with no response yet: answer it first.
                    a.record_response(reply(n as u64, 0, &[]), None).unwrap();
                    a.end_turn(TurnEndReason::Completed).unwrap();
                });
                a.start_turn(Message::user_text(format!("Turn at {n}."))).unwrap();
            }
            Op::Inject => {
                a.inject(Message::user_text(format!("<context>note {n}</context>"))).unwrap();
            }
            Op::Compact => {
                let _ = a.compact(None, &c);
            }
            Op::Resume => {
                a.dispose().unwrap();
                a = parent_agent(session, r, render, variant);
                a.start_turn(Message::user_text(format!("Resumed at {n}."))).unwrap();
            }
        }
        let open_step = session.with_log(|l| l.state().open_turn.as_ref().is_some_and(|t| t.step_open));
        if !open_step {
            body = a.next_body(&c).unwrap().json;
        }
    }
    let calls = ids(last.1);
    a.record_response(reply(99, last.0, &calls), None).unwrap();
    if calls.is_empty() {
        a.end_turn(TurnEndReason::Completed).unwrap();
    }
    (a, body.to_string(), calls)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// For any parent log and every wire format: the child's first body starts with the
    /// parent's last body's conversation bytes and differs only after them (config, cache key,
    /// thinking, system and tools identical), and the child's log rebuilds that body after a
    /// reopen from its file.
    #[test]
    fn a_childs_first_body_extends_its_parents_last(
        renderer in 0usize..Renderer::ALL.len(),
        render in 0u8..4,
        variant in 0u8..2,
        ops in prop::collection::vec(op(), 0..14),
        last in (0u8..4, 0u8..4),
        pick in 0usize..4,
    ) {
        let r = Renderer::ALL[renderer];
        let render = render_options(render, r);
        let dir = tempfile::tempdir().unwrap();
        let (parent, _) = Session::open_jsonl(dir.path().join("lead.jsonl"), SessionOptions::default()).unwrap();
        let (mut a, parent_body, calls) = run_parent(&parent, r, &render, variant, &ops, last);
        let call = (!calls.is_empty()).then(|| calls[pick % calls.len()].clone());
        let mut child = a.spawn(SpawnOptions::new(call.as_deref(), Message::user_text("Find the bug in src/lib.rs.")), None).unwrap();
        prop_assert!(child.is_child());
        let body = child.next_body(&CancelToken::new()).unwrap().json;
        assert_extends(r, &parent_body, &body);
        // The placeholder stands for every open call, the child's own included.
        if !calls.is_empty() {
            prop_assert_eq!(body.matches(DEFAULT_PLACEHOLDER).count(), calls.len());
        }
        // The child lives beside its parent, named after it.
        let tag = call.clone().unwrap_or_else(|| format!("at{}", parent.len() - 1));
        let file = dir.path().join(format!("lead.{tag}.jsonl"));
        prop_assert!(file.exists(), "{}", file.display());
        // Reopened from its file (the parent gone): the same first body, and every request of
        // the child and every body rebuilt.
        let records: Vec<Vec<u8>> = JsonlStore::open_read_only(&file).unwrap().load().unwrap().records;
        prop_assert_eq!(first_own_body(&records, r, &render), body);
        child.record_response(reply(1, 1, &[]), None).unwrap();
        child.conclude(None).unwrap();
        drop(child);
        drop(a);
        let (reopened, _) = Session::open_jsonl(&file, SessionOptions::default()).unwrap();
        reopened.verify().unwrap();
        reopened.verify_bodies(r, &render).unwrap();
        parent.verify().unwrap();
    }
}

/// Two children from two calls of one message, finishing in reverse order: the parent's
/// results are logged in call order with the children's ids, each is the child's answer, and
/// the parent's next request carries them.
#[test]
fn parallel_children_answer_in_call_order() {
    for r in Renderer::ALL {
        let render = RenderOptions::default();
        let parent = Session::in_memory();
        let (mut a, parent_body, calls) = run_parent(&parent, r, &render, 0, &[], (1, 2));
        let mut kids: Vec<Agent> =
            calls.iter().map(|c| a.spawn(SpawnOptions::new(Some(c), Message::user_text(format!("Do {c}."))), None).unwrap()).collect();
        let mut bodies = Vec::new();
        for k in kids.iter_mut() {
            let b = k.next_body(&CancelToken::new()).unwrap().json;
            assert_extends(r, &parent_body, &b);
            bodies.push(b);
        }
        // Siblings share everything up to their directives.
        let common = bodies[0].bytes().zip(bodies[1].bytes()).take_while(|(x, y)| x == y).count();
        assert!(bodies[0][..common].contains(DEFAULT_PLACEHOLDER), "{}", r.name());
        // The second child finishes first: its result waits for the first's.
        kids[1].record_response(Message::new(Role::Assistant, vec![Block::text("Second: done.")]), None).unwrap();
        kids[1].conclude(None).unwrap();
        let o = a.finish_child(kids[1].session()).unwrap();
        assert_eq!((o.answer.as_str(), o.is_error, o.recorded), ("Second: done.", false, 0));
        kids[0].record_response(Message::new(Role::Assistant, vec![Block::text("First: done.")]), None).unwrap();
        kids[0].conclude(None).unwrap();
        let o = a.finish_child(kids[0].session()).unwrap();
        assert_eq!((o.answer.as_str(), o.recorded), ("First: done.", 2));
        let results: Vec<Value> = parent
            .with_log(|l| (0..l.len() as u64).map(|s| l.event(s).unwrap()).filter(|e| e.ty == "tool/result").map(|e| e.data).collect());
        let n = results.len();
        assert_eq!(results[n - 2]["callId"], calls[0].as_str());
        assert_eq!(results[n - 2]["child"], kids[0].session().id());
        assert_eq!(results[n - 2]["content"][0]["text"], "First: done.");
        assert_eq!(results[n - 1]["child"], kids[1].session().id());
        let next = a.next_body(&CancelToken::new()).unwrap().json;
        assert!(next.contains("First: done.") && next.contains("Second: done."));
        for s in [&parent, kids[0].session(), kids[1].session()] {
            s.verify().unwrap();
            s.verify_bodies(r, &render).unwrap();
        }
    }
}

/// A child keeps its parent's provider, model, system prompt, tools and session prefix; other
/// config may change. Each refusal names the field and changes nothing.
#[test]
fn a_child_may_not_change_model_tools_or_system() {
    let parent = Session::in_memory();
    let (mut a, _, calls) = run_parent(&parent, Renderer::OpenAi, &RenderOptions::default(), 0, &[], (0, 1));
    let mut child = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("Go.")), None).unwrap();
    let base = options(0);
    let mut other_model = base.clone();
    other_model.config.model = "m-small".into();
    let mut fewer_tools = base.clone();
    fewer_tools.tools.truncate(1);
    let mut other_system = base.clone();
    other_system.system = Some("You are a subagent.".into());
    for (o, field, needle) in [
        (other_model, "config.model", "change the model to \"m-small\" (the parent's: \"m-test\")"),
        (fewer_tools, "tools", "change the tools to [read] (the parent's: [read, bash, task])"),
        (other_system, "system", "change the system prompt"),
    ] {
        let e = child.set_options(o.clone()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.detail()["field"], field);
        assert!(e.message().contains(needle), "{}", e.message());
        assert!(e.message().contains("is a child agent"), "{}", e.message());
    }
    let e = child.add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, r: &[Message]| Ok(r.to_vec()))).unwrap_err();
    assert!(e.message().contains("its session prefix is its parent's"), "{}", e.message());
    let mut hotter = base.clone();
    hotter.config.temperature = Some(0.5);
    child.set_options(hotter).unwrap();
    // A new agent over the child's session is held to the same rule; the same options pass.
    let s = child.session().clone();
    child.dispose().unwrap();
    let mut other_model = base.clone();
    other_model.config.model = "m-small".into();
    assert_eq!(Agent::new(&s, other_model).unwrap_err().detail()["field"], "config.model");
    Agent::new(&s, base).unwrap();
}

/// The spawn errors: each is clear and writes nothing, in the parent or elsewhere.
#[test]
fn spawn_refuses_what_it_cannot_extend() {
    let c = CancelToken::new();
    let s = Session::in_memory();
    let mut a = parent_agent(&s, Renderer::Anthropic, &RenderOptions::default(), 0);
    let go = || SpawnOptions::new(None, Message::user_text("Go."));
    let e = a.spawn(go(), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("has sent no request yet"), "{}", e.message());
    a.start_turn(Message::user_text("Hi.")).unwrap();
    a.next_body(&c).unwrap();
    let e = a.spawn(go(), None).unwrap_err();
    assert!(e.message().contains("step 1 is open"), "{}", e.message());
    a.record_response(reply(1, 0, &["c1".into(), "c2".into()]), None).unwrap();
    let before = s.len();
    let e = a.spawn(go(), None).unwrap_err();
    assert!(e.message().contains("tool calls [c1, c2] wait for their results: give the call"), "{}", e.message());
    let e = a.spawn(SpawnOptions::new(Some("c9"), Message::user_text("Go.")), None).unwrap_err();
    assert!(e.message().contains("\"c9\" is not a tool call waiting for its result (waiting: [c1, c2])"), "{}", e.message());
    let e = a.spawn(SpawnOptions::new(Some("c1"), Message::new(Role::Assistant, vec![Block::text("x")])), None).unwrap_err();
    assert_eq!(e.detail()["field"], "directive.role");
    assert_eq!(s.len(), before, "nothing written");
    let mut child = a.spawn(SpawnOptions::new(Some("c1"), Message::user_text("Go.")), None).unwrap();
    assert_eq!(child.session().id(), format!("{}.c1", s.id()));
    // The call is answered by the child; finishing before the child's turn ended is refused.
    let e = a.finish_child(child.session()).unwrap_err();
    assert!(e.message().contains("is still open"), "{}", e.message());
    child.next_body(&c).unwrap();
    child.record_response(Message::new(Role::Assistant, vec![Block::text("Done.")]), None).unwrap();
    child.conclude(None).unwrap();
    // A session that is not its child is refused.
    let stranger = Session::in_memory();
    let e = a.finish_child(&stranger).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("is not a child"), "{}", e.message());
    a.finish_child(child.session()).unwrap();
    // Finished once: the call no longer waits.
    let e = a.finish_child(child.session()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("no longer waits"), "{}", e.message());
}

/// A failed child gives an error result naming how it ended; maxTurns stops a child.
#[test]
fn failure_and_max_turns() {
    let c = CancelToken::new();
    let parent = Session::in_memory();
    let (mut a, _, calls) = run_parent(&parent, Renderer::OpenAi, &RenderOptions::default(), 0, &[], (0, 2));
    let mut opts = SpawnOptions::new(Some(&calls[0]), Message::user_text("Search."));
    opts.max_turns = Some(2);
    let mut k = a.spawn(opts, None).unwrap();
    k.next_body(&c).unwrap();
    k.record_response(reply(1, 0, &["k1".into()]), None).unwrap();
    k.record_tool_result(text_result("k1", "found")).unwrap();
    k.next_body(&c).unwrap();
    k.record_response(reply(2, 0, &["k2".into()]), None).unwrap();
    k.record_tool_result(text_result("k2", "more")).unwrap();
    let e = k.next_body(&c).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("has sent its 2 request(s) (maxTurns)"), "{}", e.message());
    k.conclude(Some("ran out of turns")).unwrap();
    let o = a.finish_child(k.session()).unwrap();
    assert!(o.is_error);
    assert_eq!(o.answer, format!("the subagent {} did not finish: its turn ended error: ran out of turns", k.session().id()));
    // The second child, at the same message: its seed has the first child's record.
    let mut k2 = a.spawn(SpawnOptions::new(Some(&calls[1]), Message::user_text("Other.")), None).unwrap();
    let h = k2.session().header_record();
    assert_eq!(h.parent.as_ref().unwrap().1, parent.len() as u64 - 1);
    let spawn_ev = parent.event(parent.len() as u64 - 1).unwrap();
    assert_eq!(spawn_ev.ty, "agent/spawn");
    assert_eq!(spawn_ev.data, json!({"child": k2.session().id(), "callId": calls[1]}));
    k2.next_body(&c).unwrap();
    k2.record_response(Message::new(Role::Assistant, vec![Block::text("ok")]), None).unwrap();
    a.finish_child(k2.session()).unwrap_err();
    k2.conclude(None).unwrap();
    assert_eq!(a.finish_child(k2.session()).unwrap().recorded, 1);
    parent.verify().unwrap();
    k2.session().verify().unwrap();
}

/// A child's child: the grandchild's first request still carries the root's cache key and
/// extends its parent's; each node's log rebuilds its requests.
#[test]
fn grandchildren_keep_the_roots_cache_key() {
    let c = CancelToken::new();
    let r = Renderer::OpenAi;
    let root = Session::in_memory();
    let (mut a, _, calls) = run_parent(&root, r, &RenderOptions::default(), 0, &[], (0, 1));
    let mut k = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("Plan.")), None).unwrap();
    let kb = k.next_body(&c).unwrap().json;
    assert!(kb.contains(&format!("\"prompt_cache_key\":\"{}\"", root.id())), "{kb}");
    k.record_response(reply(1, 1, &["g1".into()]), None).unwrap();
    let mut g = k.spawn(SpawnOptions::new(Some("g1"), Message::user_text("Dig.")), None).unwrap();
    let gb = g.next_body(&c).unwrap().json;
    assert_extends(r, &kb, &gb);
    assert!(gb.contains(&format!("\"prompt_cache_key\":\"{}\"", root.id())), "{gb}");
    let h = g.session().header_record();
    assert_eq!(h.lineage.len(), 2);
    assert_eq!(h.lineage[1].cache_key.as_deref(), Some(root.id().as_str()));
    for s in [&root, k.session(), g.session()] {
        s.verify_bodies(r, &RenderOptions::default()).unwrap();
    }
    // A fork of the child rebuilds the requests it was seeded with, sent under the root's key.
    g.record_response(Message::new(Role::Assistant, vec![Block::text("deep")]), None).unwrap();
    g.conclude(None).unwrap();
    let f = g.session().fork(None, Box::new(llmsession::store::MemoryStore::new()), SessionOptions::default()).unwrap();
    f.verify_bodies(r, &RenderOptions::default()).unwrap();
}

/// A child woken by a new agent (another process would open its file) sends exactly what it
/// would have sent: its options come from its log, and its next request extends its last.
#[test]
fn a_woken_child_continues_byte_for_byte() {
    let c = CancelToken::new();
    let r = Renderer::Anthropic;
    let render = RenderOptions::default();
    let dir = tempfile::tempdir().unwrap();
    let (parent, _) = Session::open_jsonl(dir.path().join("p.jsonl"), SessionOptions::default()).unwrap();
    let (mut a, _, calls) = run_parent(&parent, r, &render, 1, &[], (2, 1));
    let mut k = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("Read it.")), None).unwrap();
    k.next_body(&c).unwrap();
    k.record_response(reply(1, 1, &["k1".into()]), None).unwrap();
    k.record_tool_result(text_result("k1", "contents")).unwrap();
    let want = k.next_body(&c).unwrap().json;
    let path = dir.path().join(format!("p.{}.jsonl", calls[0]));
    // One writer per node: the child's file is its writer's while it runs.
    assert_eq!(Session::open_jsonl(&path, SessionOptions::default()).unwrap_err().kind(), ErrorKind::Locked);
    // The same request again from a woken agent: the step is closed as an error first.
    k.report_provider_error("connection reset", false, &c).unwrap();
    drop(k);
    drop(a);
    let (s, _) = Session::open_jsonl(&path, SessionOptions::default()).unwrap();
    let mut woken = Agent::wake(&s).unwrap();
    assert!(woken.is_child());
    woken.set_renderer(r, render.clone()).unwrap();
    woken.start_turn(Message::user_text("Continue.")).unwrap();
    let body = woken.next_body(&c).unwrap().json;
    let mut w: Value = serde_json::from_str(&want).unwrap();
    let mut b: Value = serde_json::from_str(&body).unwrap();
    strip_marks(&mut w);
    strip_marks(&mut b);
    let n = w["messages"].as_array().unwrap().len();
    assert_eq!(b["messages"].as_array().unwrap()[..n], w["messages"].as_array().unwrap()[..]);
    b["messages"] = w["messages"].clone();
    assert_eq!(b, w, "config, system, tools: as before");
    s.verify_bodies(r, &render).unwrap();
    // An agent with other options is refused over the child's session.
    woken.dispose().unwrap();
    let mut o = options(1);
    o.tools.pop();
    let e = Agent::new(&s, o).unwrap_err();
    assert_eq!(e.detail()["field"], "tools");
}

/// verify checks the child links of a log: a result that names a child the log never spawned
/// for that call is refused, naming the seq (the log rewritten with its chain recomputed).
#[test]
fn verify_checks_the_child_links() {
    let parent = Session::in_memory();
    let (mut a, _, calls) = run_parent(&parent, Renderer::OpenAi, &RenderOptions::default(), 0, &[], (0, 1));
    let mut k = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("Go.")), None).unwrap();
    k.next_body(&CancelToken::new()).unwrap();
    k.record_response(Message::new(Role::Assistant, vec![Block::text("ok")]), None).unwrap();
    k.conclude(None).unwrap();
    a.finish_child(k.session()).unwrap();
    let records: Vec<String> = parent.records().unwrap().iter().map(|r| r.to_string()).collect();
    llmsession::request::verify_records(&damaged_log::bytes(&records)).unwrap();
    let i = damaged_log::index_of(&records, "tool/result", 0);
    let mut forged = records.clone();
    forged[i] = forged[i].replace(&format!("\"child\":\"{}\"", k.session().id()), "\"child\":\"someone-else\"");
    assert_ne!(forged[i], records[i]);
    let e = llmsession::request::verify_records(&damaged_log::bytes(&damaged_log::reseal(&forged))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reconstruction);
    assert!(e.message().contains("is the answer of child \"someone-else\""), "{}", e.message());
    assert_eq!(e.detail()["seq"], (i - 1) as u64);
}

/// A parent dropped while its children run: its turn ends (`disposed`, error results for the
/// open calls); the children go on and finish; a late finish is refused clearly; every log and
/// every link of the tree verifies.
#[test]
fn a_parent_freed_while_children_run_leaves_every_log_valid() {
    let c = CancelToken::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lead.jsonl");
    let (parent, _) = Session::open_jsonl(&path, SessionOptions::default()).unwrap();
    let (mut a, _, calls) = run_parent(&parent, Renderer::Anthropic, &RenderOptions::default(), 0, &[], (1, 2));
    let mut k1 = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("One.")), None).unwrap();
    let mut k2 = a.spawn(SpawnOptions::new(Some(&calls[1]), Message::user_text("Two.")), None).unwrap();
    k1.next_body(&c).unwrap();
    drop(a);
    k2.next_body(&c).unwrap();
    for k in [&mut k1, &mut k2] {
        k.record_response(Message::new(Role::Assistant, vec![Block::text("done")]), None).unwrap();
        k.conclude(None).unwrap();
    }
    let mut again = parent_agent(&parent, Renderer::Anthropic, &RenderOptions::default(), 0);
    let e = again.finish_child(k1.session()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrder);
    assert!(e.message().contains("no longer waits for a result"), "{}", e.message());
    let ended: Vec<String> = parent.with_log(|l| {
        (0..l.len() as u64).map(|s| l.event(s).unwrap()).filter(|e| e.ty == "turn/end").map(|e| e.data["reason"].to_string()).collect()
    });
    assert_eq!(ended.last().map(String::as_str), Some("\"disposed\""));
    drop(again);
    drop(k1);
    drop(k2);
    let tree = llmsession::tree::Tree::load(path.to_str().unwrap()).unwrap();
    assert_eq!(tree.nodes.len(), 3);
    let report = tree.verify().unwrap();
    assert!(report.nodes.iter().all(|n| n.report.requests >= 1));
}

const CRASH_ENV: &str = "LLMSESSION_TREE_CRASH";

/// The writer of `a_sigkilled_child_is_resumed_from_its_log`: a lead and a child in a JSONL
/// tree, the child's first request sent and no answer yet, then it waits to be killed.
#[test]
fn tree_crash_writer() {
    let Ok(dir) = std::env::var(CRASH_ENV) else { return };
    let dir = std::path::PathBuf::from(dir);
    let (parent, _) = Session::open_jsonl(dir.join("lead.jsonl"), SessionOptions::default()).unwrap();
    let (mut a, _, calls) = run_parent(&parent, Renderer::OpenAi, &RenderOptions::default(), 0, &[], (1, 2));
    let mut k = a.spawn(SpawnOptions::new(Some(&calls[0]), Message::user_text("Dig.")), None).unwrap();
    let first = k.next_body(&CancelToken::new()).unwrap();
    std::fs::write(dir.join("first-body.json"), &first.json).unwrap();
    println!("READY");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// A child SIGKILLed with its first request in flight: its log loads (the open step and turn
/// closed by repair), verifies with its parent absent, and a woken agent goes on, its next
/// request extending the one the killed process sent; the lead's log is repaired too, and the
/// tree's links hold.
#[test]
fn a_sigkilled_child_is_resumed_from_its_log() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut proc = std::process::Command::new(exe)
        .args(["--exact", "tree_crash_writer", "--nocapture", "--test-threads", "1"])
        .env(CRASH_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = proc.stdout.take().unwrap();
    let ready = std::io::BufReader::new(out).lines().map_while(|l| l.ok()).any(|l| l.contains("READY"));
    assert!(ready, "the writer got ready");
    proc.kill().unwrap(); // SIGKILL
    proc.wait().unwrap();
    let child_path = dir.path().join("lead.call_1.jsonl");
    let (child, report) = Session::open_jsonl(&child_path, SessionOptions::default()).unwrap();
    assert!(report.repaired_events > 0, "the open step and turn are closed");
    child.verify().unwrap();
    let mut w = Agent::wake(&child).unwrap();
    assert!(w.is_child());
    w.set_renderer(Renderer::OpenAi, RenderOptions::default()).unwrap();
    w.start_turn(Message::user_text("Go on.")).unwrap();
    let next = w.next_body(&CancelToken::new()).unwrap().json;
    let first = std::fs::read_to_string(dir.path().join("first-body.json")).unwrap();
    assert_extends(Renderer::OpenAi, &first, &next);
    child.verify_bodies(Renderer::OpenAi, &RenderOptions::default()).unwrap();
    drop(w);
    drop(child);
    let (lead, report) = Session::open_jsonl(dir.path().join("lead.jsonl"), SessionOptions::default()).unwrap();
    assert!(report.repaired_events > 0, "the lead's open turn is closed");
    lead.verify().unwrap();
    drop(lead);
    llmsession::tree::Tree::load(dir.path().join("lead.jsonl").to_str().unwrap()).unwrap().verify().unwrap();
}
