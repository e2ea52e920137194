//! The agent set-up and the turn shape the `explain` tests log (tests/explain.rs, and the CLI's
//! own explain test in cli/tests/explain.rs, which includes this file).
#![allow(dead_code)]

use llmsession::agent::ToolResultInput;
use llmsession::log::TurnEndReason;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, ToolSchema, Usage};
use serde_json::json;

pub fn tools() -> Vec<ToolSchema> {
    ToolSchema::list_from_value(
        &json!([{"name":"read","description":"Read a file","parameters":{"type":"object"}},
                {"name":"bash","description":"Run a command","parameters":{"type":"object"}}]),
        "tools",
    )
    .unwrap()
}

pub fn options(model: &str, system: &str) -> AgentOptions {
    let mut o = AgentOptions::new(CallConfig::new("openai", model));
    o.system = Some(system.into());
    o.tools = tools();
    o.check_requests = true;
    o
}

pub fn usage(prompt: u64, cached: u64) -> Option<Usage> {
    Some(Usage { input_tokens: prompt - cached, output_tokens: 5, cache_read_tokens: Some(cached), ..Default::default() })
}

/// One turn: user message, a tool round, a final answer. Usage: the provider read `cached`.
pub fn turn(a: &mut Agent, user: &str, prompt: u64) {
    let c = CancelToken::new();
    a.start_turn(Message::user_text(user)).unwrap();
    a.next_request(&c).unwrap();
    let id = format!("call-{user}");
    a.record_response(Message::new(Role::Assistant, vec![Block::tool_call(&id, "read", "{}")]), usage(prompt, prompt / 2)).unwrap();
    a.record_tool_result(ToolResultInput { call_id: id, content: vec![Block::text("file contents ".repeat(30))], is_error: false })
        .unwrap();
    a.next_request(&c).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![Block::text("done")]), usage(prompt + 100, prompt)).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
}
