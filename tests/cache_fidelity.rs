//! Cache fidelity of the summarisation request on each provider's body (issue #17, item 1):
//! rendered with the provider's renderer, the summarisation request is a strict byte extension
//! of the conversation body it replays, up to the trailing instruction, and every body field
//! that a provider keys its cache on is equal.
//!
//! Per provider (OpenAI, Anthropic, DeepSeek-style, vLLM with `cache_salt`, llama.cpp) a session
//! with a system prompt, tools, a two-message session prefix, a tool round and a call config full
//! of that provider's pass-through fields runs through the public Rust API. Then:
//!
//! 1. **Manual compaction after the turn** (no policy: the region is everything but the newest
//!    message, which is exactly the last routed request's history). Both bodies are serialised
//!    to bytes: the conversation body's `messages` without its closing `]` is a strict prefix of
//!    the summary body's `messages`, the rest is one more message (the instruction); `system` and
//!    `tools` (Anthropic: with their cache marks) are byte-identical; every other body field is
//!    equal but `max_tokens`, which is the summary budget.
//! 2. **The gate's compaction** (a region that reaches past the routed request): the routed
//!    body's messages (cache marks removed on Anthropic, whose end-of-history mark moves) are the
//!    first messages of the summary body, the fixed marks (system, prefix end) are where the
//!    routed request had them, and the other fields are equal as above.

use llmsession::agent::ToolResultInput;
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::render::{CacheMode, PromptCacheOptions, RenderOptions, Renderer};
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, Message, Session};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

struct Provider {
    name: &'static str,
    renderer: Renderer,
    config: Value,
    /// Body fields (as rendered) that this provider keys its cache or behaviour on.
    keyed: &'static [&'static str],
    /// The render options (the session prefix's length is each request's).
    options: RenderOptions,
}

fn providers() -> Vec<Provider> {
    vec![
        Provider {
            name: "openai",
            renderer: Renderer::OpenAi,
            config: json!({"provider":"openai","model":"gpt-5","reasoningEffort":"low","maxTokens":1200,
                "prompt_cache_retention":"24h","tool_choice":"auto","parallel_tool_calls":false}),
            keyed: &[
                "model",
                "reasoning_effort",
                "prompt_cache_key",
                "prompt_cache_retention",
                "tool_choice",
                "parallel_tool_calls",
                "tools",
            ],
            options: RenderOptions::default(),
        },
        Provider {
            // gpt-5.6 and later: explicit breakpoints, the implicit one turned off.
            name: "openai-breakpoints",
            renderer: Renderer::OpenAi,
            config: json!({"provider":"openai","model":"gpt-5.6","reasoningEffort":"low","maxTokens":1200,"tool_choice":"auto"}),
            keyed: &["model", "reasoning_effort", "prompt_cache_key", "prompt_cache_options", "tool_choice", "tools"],
            options: RenderOptions::default()
                .with_cache_breakpoints(true)
                .with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Explicit), ttl: Some("30m".into()) }),
        },
        Provider {
            name: "anthropic",
            renderer: Renderer::Anthropic,
            config: json!({"provider":"anthropic","model":"claude-sonnet-4-5","maxTokens":4096,
                "thinking":{"type":"enabled","budget_tokens":2048},"tool_choice":{"type":"auto"}}),
            keyed: &["model", "system", "tools", "thinking", "tool_choice"],
            options: RenderOptions::default(),
        },
        Provider {
            name: "deepseek",
            renderer: Renderer::OpenAi,
            config: json!({"provider":"deepseek","model":"deepseek-chat","temperature":0.1,"maxTokens":2000,"thinking":{"type":"enabled"}}),
            keyed: &["model", "thinking", "temperature", "prompt_cache_key", "tools"],
            options: RenderOptions::default(),
        },
        Provider {
            name: "vllm",
            renderer: Renderer::OpenAi,
            config: json!({"provider":"vllm","model":"Qwen/Qwen3-8B","temperature":0.6,"maxTokens":1024,
                "cache_salt":"tenant-a","chat_template_kwargs":{"enable_thinking":true}}),
            keyed: &["model", "cache_salt", "chat_template_kwargs", "prompt_cache_key", "tools"],
            options: RenderOptions::default(),
        },
        Provider {
            name: "llama.cpp",
            renderer: Renderer::OpenAi,
            config: json!({"provider":"llama.cpp","model":"SmolLM2-135M-Instruct","temperature":0.0,"maxTokens":48,
                "seed":42,"cache_prompt":true,"id_slot":0}),
            keyed: &["model", "seed", "cache_prompt", "id_slot", "temperature", "tools"],
            options: RenderOptions::default(),
        },
    ]
}

type Seen = Arc<Mutex<Vec<SummaryRequest>>>;

fn agent(session: &Session, p: &Provider) -> (Agent, Seen) {
    let mut opts = AgentOptions::new(CallConfig::from_value(&p.config, "config").unwrap());
    opts.system = Some("You are a careful coding agent.\nWork in small steps.".into());
    opts.tools = llmsession::ToolSchema::list_from_value(
        &json!([{"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}},
                {"name":"bash","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]),
        "tools",
    )
    .unwrap();
    opts.check_requests = true;
    let mut a = Agent::new(session, opts).unwrap();
    a.add_prefix_listener(Arc::new(|_: &llmsession::prefix::ListenerContext<'_>, rest: &[Message]| {
        let mut v =
            vec![Message::user_text("<skills>\nreview, test\n</skills>"), Message::user_text("<agents-md>\nRun cargo test.\n</agents-md>")];
        v.extend_from_slice(rest);
        Ok(v)
    }))
    .unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    a.set_summariser(Some(Arc::new(move |req: &SummaryRequest, _: &CancelToken| {
        s2.lock().unwrap().push(req.clone());
        Ok(SummaryOutput { text: "CHECKPOINT: the test was read.".into(), ..Default::default() })
    })));
    (a, seen)
}

fn assistant(v: Value) -> Message {
    Message::from_value(&v, "message").unwrap()
}

/// One turn with a tool round; returns the envelope of each request.
fn tool_turn(a: &mut Agent, user: &str, reply_text: &str) -> Vec<(String, usize)> {
    let c = CancelToken::new();
    let mut out = Vec::new();
    a.start_turn(Message::user_text(user)).unwrap();
    let r = a.next_request(&c).unwrap();
    out.push((r.json.clone(), r.prefix_len));
    let id = format!("call-{}", r.turn);
    a.record_response(
        assistant(json!({"role":"assistant","content":[
            {"type":"reasoning","text":"Read it first.","signature":"c2lnbmVk"},
            {"type":"text","text":"Reading."},
            {"type":"tool-call","id":id,"name":"read","arguments":"{\"path\":\"tests/a.rs\"}"}]})),
        None,
    )
    .unwrap();
    a.record_tool_result(ToolResultInput {
        call_id: id,
        content: vec![llmsession::Block::text("fn a() { assert!(1 + 1 == 3) }\n".repeat(20))],
        is_error: false,
    })
    .unwrap();
    let r = a.next_request(&c).unwrap();
    out.push((r.json.clone(), r.prefix_len));
    a.record_response(assistant(json!({"role":"assistant","content":[{"type":"text","text":reply_text}]})), None).unwrap();
    a.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
    out
}

fn render(p: &Provider, envelope: &str, prefix_len: usize) -> Value {
    let v: Value = serde_json::from_str(envelope).unwrap();
    let mut options = p.options.clone();
    options.prefix_len = prefix_len;
    p.renderer.render(&v, &options).unwrap()
}

fn bytes(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

/// Every body field but `messages` (and `max_tokens`, the summary budget) is equal, and the
/// provider's cache-keyed fields are present in both.
fn check_other_fields(p: &Provider, conv: &Value, summary: &Value, budget: u64, what: &str) {
    let (c, s) = (conv.as_object().unwrap(), summary.as_object().unwrap());
    let mut keys: Vec<&String> = c.keys().chain(s.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        match k.as_str() {
            "messages" => {}
            "max_tokens" => assert_eq!(s.get(k), Some(&json!(budget)), "{}: {what}: max_tokens is the summary budget", p.name),
            _ => assert_eq!(
                c.get(k).map(bytes),
                s.get(k).map(bytes),
                "{}: {what}: body field {k} differs between the conversation and the summary request",
                p.name
            ),
        }
    }
    for k in p.keyed {
        assert!(s.contains_key(*k), "{}: {what}: the summary body lacks {k}", p.name);
    }
}

/// The messages without cache marks (Anthropic's `cache_control`, OpenAI's
/// `prompt_cache_breakpoint`, whose one text part is a string content unmarked).
fn unmarked(messages: &Value) -> Vec<Value> {
    let mut out = messages.as_array().unwrap().clone();
    for m in &mut out {
        let mut openai_mark = false;
        if let Some(blocks) = m["content"].as_array_mut() {
            for b in blocks {
                if let Some(o) = b.as_object_mut() {
                    o.remove("cache_control");
                    openai_mark |= o.remove("prompt_cache_breakpoint").is_some();
                }
            }
        }
        let one_text = m["content"].as_array().filter(|a| a.len() == 1 && a[0]["type"] == "text").map(|a| a[0]["text"].clone());
        if let (true, Some(text)) = (openai_mark, one_text) {
            m["content"] = text;
        }
    }
    out
}

#[test]
fn summary_body_is_a_byte_extension_of_the_conversation_body_on_every_provider() {
    for p in providers() {
        let session = Session::in_memory();
        let (mut a, seen) = agent(&session, &p);
        let reqs = tool_turn(&mut a, "Why does the test fail?", "The assertion is wrong.");
        let (last_env, prefix_len) = reqs.last().unwrap().clone();
        // No policy: the region is the whole history but the newest message, i.e. the history of
        // the last routed request.
        let out = a.compact(None, &CancelToken::new()).unwrap();
        assert_eq!(out.outcome, "landed", "{}", p.name);
        let summary = seen.lock().unwrap()[0].clone();
        assert_eq!(summary.prefix_len, prefix_len);
        let (conv, sum) = (render(&p, &last_env, prefix_len), render(&p, &summary.json, summary.prefix_len));

        // Messages: a strict byte extension, by exactly one message (the instruction).
        let (cm, sm) = (bytes(&conv["messages"]), bytes(&sum["messages"]));
        let open = &cm[..cm.len() - 1];
        assert!(
            sm.starts_with(open) && sm.len() > cm.len(),
            "{}: the summary body's messages do not extend the conversation's\n{cm}\n{sm}",
            p.name
        );
        let rest = &sm[open.len()..];
        assert!(rest.starts_with(",{") && rest.ends_with("}]"), "{}: {rest}", p.name);
        let tail: Value = serde_json::from_str(&rest[1..rest.len() - 1]).unwrap();
        assert_eq!(tail["role"], "user", "{}", p.name);
        assert!(bytes(&tail).contains("compaction engine"), "{}: {tail}", p.name);
        assert!(!bytes(&tail).contains("cache_control"), "{}: the instruction must not carry a cache mark", p.name);
        assert!(!bytes(&tail).contains("prompt_cache_breakpoint"), "{}: the instruction must not carry a cache mark", p.name);
        assert_eq!(sum["messages"].as_array().unwrap().len(), conv["messages"].as_array().unwrap().len() + 1, "{}", p.name);
        // Without a policy the summary budget is the default, 8192.
        check_other_fields(&p, &conv, &sum, 8192, "manual compaction");
        if p.renderer == Renderer::Anthropic {
            // The marks: system prompt end, prefix end, history end, at the same places.
            assert_eq!(bytes(&conv["system"]), bytes(&sum["system"]));
            assert!(bytes(&conv["system"]).contains("cache_control"));
            assert_eq!(cm.matches("cache_control").count(), 2, "{cm}");
            assert_eq!(sm.matches("cache_control").count(), 2, "{sm}");
            // Thinking and its signature came back unchanged.
            assert!(cm.contains(r#"{"signature":"c2lnbmVk","thinking":"Read it first.","type":"thinking"}"#), "{cm}");
        } else {
            assert_eq!(conv["prompt_cache_key"], json!(session.id()), "{}", p.name);
        }
        if p.options.cache_breakpoints {
            // System prompt, prefix end and history end, at the same places in both.
            assert_eq!(cm.matches("prompt_cache_breakpoint").count(), 3, "{cm}");
            assert_eq!(sm.matches("prompt_cache_breakpoint").count(), 3, "{sm}");
            assert_eq!(sum["prompt_cache_options"], json!({"mode":"explicit","ttl":"30m"}));
        }

        let report = llmsession::request::verify_records(&records(&session)).unwrap();
        assert_eq!(report.compactions, 1, "{}", p.name);

        // 2. The gate's compaction: a region that reaches past the routed request.
        let session = Session::in_memory();
        let (mut a, seen) = agent(&session, &p);
        tool_turn(&mut a, "Why does the test fail?", "The assertion is wrong.");
        let mut policy = CompactionPolicy::new(4000);
        policy.threshold = 0.5;
        policy.retained = Retained::Tokens(1);
        policy.summary_max_tokens = 500;
        a.set_policy(Some(policy)).unwrap();
        let c = CancelToken::new();
        a.start_turn(Message::user_text("Please also read the log. ".repeat(400))).unwrap();
        a.next_request(&c).unwrap();
        assert_eq!(seen.lock().unwrap().len(), 1, "{}: the gate compacted", p.name);
        let gate = seen.lock().unwrap()[0].clone();
        // The routed request the gate's summary extends: the last one before its compaction
        // (the first turn's second request), rebuilt from the log.
        let routed = last_routed_before_compaction(&session);
        let (rb, gb) = (render(&p, &routed.0, routed.1), render(&p, &gate.json, gate.prefix_len));
        let (ru, gu) = (unmarked(&rb["messages"]), unmarked(&gb["messages"]));
        assert!(ru.len() < gu.len() && ru[..] == gu[..ru.len()], "{}: the gate's summary does not extend the routed body", p.name);
        check_other_fields(&p, &rb, &gb, 500, "gate compaction");
        if p.renderer == Renderer::Anthropic {
            assert_eq!(bytes(&rb["system"]), bytes(&gb["system"]));
            // The prefix mark sits on the same block in both.
            let mark = |b: &Value| bytes(&b["messages"][1]);
            assert_eq!(mark(&rb), mark(&gb));
            assert!(mark(&gb).contains("cache_control"));
        }
        if p.options.cache_breakpoints {
            // The system and prefix marks sit where the routed request had them.
            for k in [0, 2] {
                assert_eq!(bytes(&rb["messages"][k]), bytes(&gb["messages"][k]), "{}", p.name);
                assert!(bytes(&gb["messages"][k]).contains("prompt_cache_breakpoint"), "{}", p.name);
            }
        }
        a.record_response(assistant(json!({"role":"assistant","content":[{"type":"text","text":"ok"}]})), None).unwrap();
        a.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
        let report = llmsession::request::verify_records(&records(&session)).unwrap();
        assert_eq!(report.compactions, 1, "{}", p.name);
    }
}

fn records(session: &Session) -> Vec<Vec<u8>> {
    session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

/// The envelope (and prefix length) of the last conversation request routed before the latest
/// compaction, rebuilt from the log.
fn last_routed_before_compaction(session: &Session) -> (String, usize) {
    let recs = records(session);
    let (header, events) = llmsession::log::load::parse_records(&recs).unwrap();
    let start = events.iter().rposition(|e| e.ty == "compaction/start").unwrap();
    let mut log = llmsession::log::Log::new();
    let mut last = None;
    for ev in &events[..start] {
        if ev.ty == "step/start" {
            let h = log.state().headers.current().cloned().unwrap();
            let prefix = llmsession::request::PrefixBytes::of(h.message_prefix.as_ref());
            let body = llmsession::request::conversation_envelope(
                &log,
                &h,
                &prefix,
                header.session_id_at(ev.seq),
                ev.data["turn"].as_u64().unwrap(),
                ev.data["step"].as_u64().unwrap(),
            );
            last = Some((String::from_utf8(body).unwrap(), prefix.messages.len()));
        }
        log.append(ev).unwrap();
    }
    last.unwrap()
}
