//! OpenAI's explicit cache controls (issue 29, item 3): `prompt_cache_options` and the
//! `prompt_cache_breakpoint` marks both OpenAI renderers place where the system prompt, the
//! session prefix and the history end; the summarisation request's mark sits where the
//! conversation request with the same messages has it; the refusals.

use llmsession::render::{CacheMode, PromptCacheOptions, RenderOptions, Renderer};
use llmsession::ErrorKind;
use serde_json::{json, Value};

fn envelope(purpose: &str, extra_user: bool) -> Value {
    let mut messages = vec![
        json!({"role":"user","content":[{"type":"text","text":"<skills>review</skills>"}]}),
        json!({"role":"user","content":[{"type":"text","text":"<agents-md>Run tests.</agents-md>"}]}),
        json!({"role":"user","content":[{"type":"text","text":"Fix the bug."}]}),
        json!({"role":"assistant","content":[{"type":"text","text":"Reading."},
            {"type":"tool-call","id":"c1","name":"read","arguments":"{\"path\":\"a.rs\"}"}]}),
        json!({"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"text","text":"fn a() {}"}]}]}),
        json!({"role":"assistant","content":[{"type":"text","text":"Done."}]}),
    ];
    if extra_user {
        messages.push(json!({"role":"user","content":[{"type":"text","text":"Summarise the conversation."}]}));
    }
    json!({"provider":"openai","model":"gpt-5.6","system":"You are a coding agent.",
        "tools":[{"name":"read","description":"Read a file","parameters":{"type":"object"}}],
        "messages":messages,"sessionId":"s1","purpose":purpose})
}

fn marks() -> RenderOptions {
    RenderOptions::with_prefix_len(2).with_cache_breakpoints(true)
}

/// The paths of every `prompt_cache_breakpoint` in `items`: (item, part).
fn marked(items: &Value, parts_key: fn(&Value) -> &'static str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, item) in items.as_array().unwrap().iter().enumerate() {
        if let Some(parts) = item.get(parts_key(item)).and_then(Value::as_array) {
            for (j, p) in parts.iter().enumerate() {
                if let Some(bp) = p.get("prompt_cache_breakpoint") {
                    assert_eq!(bp, &json!({"mode":"explicit"}));
                    out.push((k, j));
                }
            }
        }
    }
    out
}

fn chat_parts(_: &Value) -> &'static str {
    "content"
}

fn responses_parts(item: &Value) -> &'static str {
    if item["type"] == "function_call_output" {
        "output"
    } else {
        "content"
    }
}

#[test]
fn chat_completions_marks_system_prefix_end_and_last_user_side_message() {
    let conv = envelope("conversation", true);
    let body = Renderer::OpenAi.render(&conv, &marks()).unwrap();
    let msgs = &body["messages"];
    // 0 system, 1-2 prefix, 3 user, 4 assistant, 5 tool, 6 assistant, 7 user.
    assert_eq!(marked(msgs, chat_parts), vec![(0, 0), (2, 0), (7, 0)]);
    assert_eq!(msgs[0]["content"], json!([{"type":"text","text":"You are a coding agent.","prompt_cache_breakpoint":{"mode":"explicit"}}]));
    // Unmarked messages keep their plain form.
    assert_eq!(msgs[1]["content"], json!("<skills>review</skills>"));
    assert!(body.get("prompt_cache_options").is_none());

    // Assistant output cannot carry a mark: the history's mark goes back to the tool message.
    let body = Renderer::OpenAi.render(&envelope("conversation", false), &marks()).unwrap();
    assert_eq!(marked(&body["messages"], chat_parts), vec![(0, 0), (2, 0), (5, 0)]);
    assert_eq!(body["messages"][5]["role"], "tool");

    // Off by default: the body is what it always was.
    let plain = Renderer::OpenAi.render(&conv, &RenderOptions::with_prefix_len(2)).unwrap();
    assert!(!serde_json::to_string(&plain).unwrap().contains("prompt_cache_breakpoint"));
}

#[test]
fn responses_marks_prefix_end_and_history_end_and_sends_the_options() {
    let o = marks().with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Implicit), ttl: Some("30m".into()) });
    let body = Renderer::OpenAiResponses.render(&envelope("conversation", false), &o).unwrap();
    assert_eq!(body["prompt_cache_options"], json!({"mode":"implicit","ttl":"30m"}));
    // `instructions` is a string (no mark); input: 0-1 prefix, 2 user, 3 message, 4 call, 5 output, 6 message.
    assert_eq!(body["instructions"], "You are a coding agent.");
    let input = &body["input"];
    assert_eq!(marked(input, responses_parts), vec![(1, 0), (5, 0)]);
    assert_eq!(
        input[5],
        json!({"type":"function_call_output","call_id":"c1",
               "output":[{"type":"input_text","text":"fn a() {}","prompt_cache_breakpoint":{"mode":"explicit"}}]})
    );
}

#[test]
fn the_summarisation_request_is_marked_as_the_conversation_request_it_replays() {
    for r in [Renderer::OpenAi, Renderer::OpenAiResponses] {
        let key = if r == Renderer::OpenAi { "messages" } else { "input" };
        let conv = r.render(&envelope("conversation", false), &marks()).unwrap();
        let sum = r.render(&envelope("compaction", true), &marks()).unwrap();
        let (c, s) = (conv[key].as_array().unwrap(), sum[key].as_array().unwrap());
        // The same items, marks included, then the instruction, unmarked.
        assert_eq!(&s[..c.len()], &c[..], "{}", r.name());
        assert_eq!(s.len(), c.len() + 1);
        assert!(!serde_json::to_string(&s[c.len()]).unwrap().contains("prompt_cache_breakpoint"), "{}", r.name());
    }
}

#[test]
fn never_more_marks_than_openai_writes() {
    for mode in [None, Some(CacheMode::Implicit), Some(CacheMode::Explicit)] {
        let o = marks().with_cache_options(PromptCacheOptions { mode, ttl: None });
        for r in [Renderer::OpenAi, Renderer::OpenAiResponses] {
            let body = serde_json::to_string(&r.render(&envelope("conversation", true), &o).unwrap()).unwrap();
            let n = body.matches("prompt_cache_breakpoint").count();
            let limit = if mode == Some(CacheMode::Explicit) { 4 } else { 3 };
            assert!(n >= 1 && n <= limit, "{} {mode:?}: {n}", r.name());
            assert!(n <= llmsession::render::OPENAI_MAX_WRITES);
        }
    }
}

#[test]
fn both_ttl_fields_are_never_sent() {
    let with_ttl = PromptCacheOptions { mode: None, ttl: Some("30m".into()) };
    // From the options.
    let o = RenderOptions::default().with_cache_retention("24h").with_cache_options(with_ttl.clone());
    for r in [Renderer::OpenAi, Renderer::OpenAiResponses] {
        let e = r.render(&envelope("conversation", false), &o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            e.message(),
            "promptCacheRetention: cannot be sent with promptCacheOptions.ttl, which supersedes it (OpenAI rejects both): drop one"
        );
    }
    // A retention config field with the option's ttl, and the option's retention with a config field's ttl.
    let mut env = envelope("conversation", false);
    env["prompt_cache_retention"] = json!("24h");
    let e = Renderer::OpenAi.render(&env, &RenderOptions::default().with_cache_options(with_ttl)).unwrap_err();
    assert!(e.message().starts_with("prompt_cache_retention: cannot be sent with prompt_cache_options.ttl"), "{}", e.message());
    let mut env = envelope("conversation", false);
    env["prompt_cache_options"] = json!({"ttl":"30m"});
    let e = Renderer::OpenAiResponses.render(&env, &RenderOptions::default().with_cache_retention("24h")).unwrap_err();
    assert!(e.message().starts_with("prompt_cache_retention: cannot be sent with"), "{}", e.message());
    // The option and a config field of the same name collide, as every explicit option does.
    let e = Renderer::OpenAi
        .render(&env, &RenderOptions::default().with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Implicit), ttl: None }))
        .unwrap_err();
    assert!(e.message().starts_with("prompt_cache_options: unknown config field collides"), "{}", e.message());
    // Without the retention, the config field goes through.
    let body = Renderer::OpenAi.render(&env, &RenderOptions::default()).unwrap();
    assert_eq!(body["prompt_cache_options"], json!({"ttl":"30m"}));
}

#[test]
fn other_formats_and_bad_combinations_are_refused() {
    let env = envelope("conversation", false);
    for r in [Renderer::Anthropic, Renderer::Gemini] {
        let e = r.render(&env, &RenderOptions::default().with_cache_breakpoints(true)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            e.message(),
            format!(
                "promptCacheBreakpoints: is an OpenAI cache control (the openai and openai-responses renderers); the {} renderer has no such field",
                r.name()
            )
        );
        let o = RenderOptions::default().with_cache_options(PromptCacheOptions::default());
        assert!(r.render(&env, &o).unwrap_err().message().starts_with("promptCacheOptions: is an OpenAI cache control"));
    }
    let o = RenderOptions::default().with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Explicit), ttl: None });
    let e = Renderer::OpenAi.render(&env, &o).unwrap_err();
    assert_eq!(
        e.message(),
        "promptCacheOptions.mode: \"explicit\" turns off OpenAI's implicit breakpoint, so without promptCacheBreakpoints nothing is cached"
    );
}

#[test]
fn options_json_form() {
    let o =
        RenderOptions::from_value(&json!({"promptCacheOptions":{"mode":"explicit","ttl":"30m"},"promptCacheBreakpoints":true})).unwrap();
    assert_eq!(
        o,
        RenderOptions::default()
            .with_cache_breakpoints(true)
            .with_cache_options(PromptCacheOptions { mode: Some(CacheMode::Explicit), ttl: Some("30m".into()) })
    );
    let bad = [
        (json!({"promptCacheOptions":[]}), "options.promptCacheOptions: expected an object, got an array"),
        (json!({"promptCacheOptions":{"mode":"auto"}}), "options.promptCacheOptions.mode: expected \"implicit\" or \"explicit\", got \"auto\""),
        (json!({"promptCacheOptions":{"ttl":""}}), "options.promptCacheOptions.ttl: must not be empty"),
        (json!({"promptCacheOptions":{"retention":"24h"}}), "options.promptCacheOptions.retention: is not a prompt cache option (expected mode or ttl)"),
        (json!({"promptCacheBreakpoints":"yes"}), "options.promptCacheBreakpoints: expected true or false, got a string"),
        (
            json!({"promptCacheOptions":{"mode":"explicit"}}),
            "options.promptCacheOptions.mode: \"explicit\" turns off OpenAI's implicit breakpoint, so without promptCacheBreakpoints nothing is cached",
        ),
        (
            json!({"promptCacheOptions":{"ttl":"30m"},"promptCacheRetention":"24h"}),
            "options.promptCacheRetention: cannot be sent with promptCacheOptions.ttl, which supersedes it (OpenAI rejects both): drop one",
        ),
    ];
    for (v, want) in bad {
        let e = RenderOptions::from_value(&v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), want);
    }
}

#[test]
fn the_controls_as_config_fields_are_logged_and_rebuilt() {
    // In the envelope (from the call config): the same marks, and the names are not sent.
    let mut env = envelope("conversation", true);
    env["promptCacheBreakpoints"] = json!(true);
    env["promptCacheOptions"] = json!({"mode":"explicit"});
    let body = Renderer::OpenAi.render(&env, &RenderOptions::with_prefix_len(2)).unwrap();
    assert_eq!(marked(&body["messages"], chat_parts), vec![(0, 0), (2, 0), (7, 0)]);
    assert_eq!(body["prompt_cache_options"], json!({"mode":"explicit"}));
    assert!(body.get("promptCacheBreakpoints").is_none() && body.get("promptCacheOptions").is_none());
    // Given both ways, or to another format, or malformed: refused.
    let e = Renderer::OpenAi.render(&env, &marks()).unwrap_err();
    assert_eq!(e.message(), "promptCacheBreakpoints: is both a config field and a render option; give it once");
    let e = Renderer::Anthropic.render(&env, &RenderOptions::with_prefix_len(2)).unwrap_err();
    assert!(e.message().starts_with("promptCacheOptions: is an OpenAI cache control"), "{}", e.message());
    env["promptCacheBreakpoints"] = json!("yes");
    let e = Renderer::OpenAiResponses.render(&env, &RenderOptions::default()).unwrap_err();
    assert_eq!(e.message(), "promptCacheBreakpoints: expected true or false, got a string");

    // Through an agent: the config is logged, so verify rebuilds every marked body from the log.
    use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, Message, Session};
    let session = Session::in_memory();
    let config = CallConfig::from_value(
        &json!({"provider":"openai","model":"gpt-5.6","promptCacheBreakpoints":true,"promptCacheOptions":{"mode":"explicit","ttl":"30m"}}),
        "config",
    )
    .unwrap();
    let mut opts = AgentOptions::new(config);
    opts.system = Some("You are a coding agent.".into());
    let mut a = Agent::new(&session, opts).unwrap();
    a.set_renderer(Renderer::OpenAi, RenderOptions::default()).unwrap();
    let c = CancelToken::new();
    a.start_turn(Message::user_text("Fix the bug.")).unwrap();
    let first = a.next_body(&c).unwrap().json;
    assert_eq!(first.matches("prompt_cache_breakpoint").count(), 2, "{first}");
    a.record_response(Message::from_value(&json!({"role":"assistant","content":[{"type":"text","text":"Done."}]}), "m").unwrap(), None)
        .unwrap();
    a.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
    a.start_turn(Message::user_text("Now the test.")).unwrap();
    let second: Value = serde_json::from_str(&a.next_body(&c).unwrap().json).unwrap();
    assert_eq!(marked(&second["messages"], chat_parts), vec![(0, 0), (3, 0)]);
    assert_eq!(second["prompt_cache_options"], json!({"mode":"explicit","ttl":"30m"}));
    let report = session.verify_bodies(Renderer::OpenAi, &RenderOptions::default()).unwrap();
    assert_eq!(report.bodies, 2);
    // The same options a second time at verify collide with the logged ones, naming the field.
    let e = session.verify_bodies(Renderer::OpenAi, &RenderOptions::default().with_cache_breakpoints(true)).unwrap_err();
    assert!(e.message().contains("promptCacheBreakpoints: is both a config field and a render option"), "{}", e.message());
}
