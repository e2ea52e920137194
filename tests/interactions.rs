//! The Gemini Interactions API format (issue 29, item 6): the body of a whole conversation,
//! native state (thought steps, call signatures, the interaction id) carried back through the
//! log to this format only, and the refusals.

use llmsession::render::{parse_response, render_interactions, RenderOptions, Renderer};
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, ErrorKind, Message, Session};
use serde_json::{json, Value};

fn fixture() -> Value {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/stream/gemini-interactions-tools.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn a_conversation_renders_to_stateless_steps() {
    let env = json!({
        "provider":"gemini","model":"gemini-3-flash-preview","system":"Be brief.","temperature":0.2,"maxTokens":800,
        "reasoningEffort":"low","stop":["END"],
        "tools":[{"name":"read_file","description":"Read a file","parameters":{"type":"object"}}],
        "messages":[
            {"role":"system","content":[{"type":"text","text":"Project rules."}]},
            {"role":"user","content":[{"type":"text","text":"Read a.rs"},{"type":"image","mediaType":"image/png","data":"iVBO"}]},
            {"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool-call","id":"c1","name":"read_file","arguments":"{\"path\":\"a.rs\"}"}]},
            {"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":true,"content":[{"type":"text","text":"not found"}]},
                                      {"type":"text","text":"Try b.rs"}]}
        ],
        "sessionId":"s","purpose":"conversation"
    });
    let body = render_interactions(&env, &RenderOptions::with_prefix_len(1)).unwrap();
    assert_eq!(
        body,
        json!({
            "model":"gemini-3-flash-preview",
            "system_instruction":"Be brief.\n\nProject rules.",
            "tools":[{"type":"function","name":"read_file","description":"Read a file","parameters":{"type":"object"}}],
            "generation_config":{"temperature":0.2,"max_output_tokens":800,"stop_sequences":["END"],"thinking_level":"low"},
            "store":false,
            "input":[
                {"type":"user_input","content":[{"type":"text","text":"Read a.rs"},{"type":"image","data":"iVBO","mime_type":"image/png"}]},
                {"type":"model_output","content":[{"type":"text","text":"Reading."}]},
                {"type":"function_call","id":"c1","name":"read_file","arguments":{"path":"a.rs"}},
                {"type":"function_result","call_id":"c1","result":"not found","is_error":true},
                {"type":"user_input","content":[{"type":"text","text":"Try b.rs"}]}
            ]
        })
    );
    assert_eq!(Renderer::parse("gemini-interactions").unwrap(), Renderer::GeminiInteractions);
}

#[test]
fn native_state_goes_back_to_this_format_only() {
    let parsed = parse_response(Renderer::GeminiInteractions, &fixture()).unwrap();
    let answer = parsed.message;
    let mut messages = vec![json!({"role":"user","content":[{"type":"text","text":"Read café.txt"}]})];
    messages.push(serde_json::to_value(&answer).unwrap());
    let env = json!({"provider":"gemini","model":"gemini-3-flash-preview","messages":messages});
    let body = Renderer::GeminiInteractions.render(&env, &RenderOptions::default()).unwrap();
    let steps = fixture()["steps"].clone();
    // The thought step verbatim, the text, the call with its signature: the steps as they came.
    assert_eq!(body["input"].as_array().unwrap()[1..], steps.as_array().unwrap()[..]);
    // Another format drops the thought and the signature, keeps text and call.
    let chat = Renderer::OpenAi.render(&env, &RenderOptions::default()).unwrap();
    let text = serde_json::to_string(&chat).unwrap();
    assert!(!text.contains("EpYCCpMCAdHtim9sig==") && !text.contains("CiQBfc7sig=="), "{text}");
    assert!(text.contains("fc_7q2x"), "{text}");
}

#[test]
fn an_agent_records_an_interaction_and_verify_rebuilds_its_bodies() {
    let session = Session::in_memory();
    let config = CallConfig::from_value(&json!({"provider":"gemini","model":"gemini-3-flash-preview"}), "config").unwrap();
    let mut a = Agent::new(&session, AgentOptions::new(config)).unwrap();
    a.set_renderer(Renderer::GeminiInteractions, RenderOptions::default()).unwrap();
    a.start_turn(Message::user_text("Read café.txt")).unwrap();
    a.next_body(&CancelToken::new()).unwrap();
    let r = a.record_body(&fixture().to_string()).unwrap();
    assert_eq!((r.tool_calls, r.finish_reason.as_deref()), (1, Some("tool-calls")));
    a.record_tool_result(llmsession::agent::ToolResultInput {
        call_id: "fc_7q2x".into(),
        content: vec![llmsession::Block::text("hello")],
        is_error: false,
    })
    .unwrap();
    let body: Value = serde_json::from_str(&a.next_body(&CancelToken::new()).unwrap().json).unwrap();
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.last().unwrap(), &json!({"type":"function_result","call_id":"fc_7q2x","result":"hello"}));
    assert_eq!(input[1]["signature"], "EpYCCpMCAdHtim9sig==");
    let report = session.verify_bodies(Renderer::GeminiInteractions, &RenderOptions::default()).unwrap();
    assert_eq!(report.bodies, 2);
}

#[test]
fn bad_input_and_failed_interactions_are_clear_errors() {
    let env = json!({"provider":"gemini","model":"m","messages":[
        {"role":"user","content":[{"type":"text","text":"q"}]},
        {"role":"system","content":[{"type":"text","text":"late"}]}]});
    let e = render_interactions(&env, &RenderOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.message().starts_with("messages[1].role: a system-role message is only supported inside the session prefix"),
        "{}",
        e.message()
    );
    let env = json!({"provider":"gemini","model":"m","messages":[
        {"role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"[1]"}]}]});
    let e = render_interactions(&env, &RenderOptions::default()).unwrap_err();
    assert_eq!(
        e.message(),
        "messages[0].content[0].arguments: must be a JSON object for gemini-interactions function_call arguments, got an array"
    );
    let env = json!({"provider":"gemini","model":"m","messages":[],"store":true});
    let e = render_interactions(&env, &RenderOptions::default()).unwrap_err();
    assert!(e.message().starts_with("store: unknown config field collides"), "{}", e.message());
    let e = render_interactions(&env, &RenderOptions::default().with_cache_breakpoints(true)).unwrap_err();
    assert!(e.message().starts_with("promptCacheBreakpoints: is an OpenAI cache control"), "{}", e.message());

    let e = parse_response(Renderer::GeminiInteractions, &json!({"id":"i","status":"failed","error":{"message":"quota"}})).unwrap_err();
    assert_eq!(e.message(), "interaction.status: the interaction failed: quota");
    let e = parse_response(Renderer::GeminiInteractions, &json!({"status":"completed","steps":{}})).unwrap_err();
    assert_eq!(e.message(), "interaction.steps: expected an array, got an object");
    let e = parse_response(Renderer::GeminiInteractions, &json!({"status":"completed","steps":[{"type":"function_call","name":"n"}]}))
        .unwrap_err();
    assert_eq!(e.message(), "interaction.steps[0].id: expected a non-empty string");
    // The earlier `outputs` form reads as steps.
    let p = parse_response(Renderer::GeminiInteractions, &json!({"status":"completed","outputs":[{"type":"text","text":"hi"}]})).unwrap();
    assert_eq!((p.message.text(), p.finish_reason.as_deref()), ("hi".to_string(), Some("stop")));
}
