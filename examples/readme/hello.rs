// The README's Rust example: one turn through llmsession's Rust API, with a canned provider reply.
use llmsession::log::TurnEndReason;
use llmsession::render::{RenderOptions, Renderer};
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, Message, Session, SessionOptions};

fn main() -> Result<(), llmsession::Error> {
    let (session, _report) = Session::open_jsonl("hello.jsonl", SessionOptions::default())?;
    let mut opts = AgentOptions::new(CallConfig::new("llama.cpp", "smollm2"));
    opts.system = Some("Be brief.".into());
    let mut agent = Agent::new(&session, opts)?;
    agent.set_renderer(Renderer::OpenAi, RenderOptions::default())?; // bodies for /chat/completions
    agent.start_turn(Message::user_text("Hi!"))?;
    let body = agent.next_body(&CancelToken::new())?; // body.json: POST it; logged, verify() rebuilds it
    let reply = r#"{"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],
                    "usage":{"prompt_tokens":14,"completion_tokens":3}}"#;
    agent.record_body(reply)?; // the provider's raw answer
    agent.end_turn(TurnEndReason::Completed)?;
    let report = serde_json::to_string(&session.verify()?).expect("a report serialises");
    println!("sent {} bytes; verify: {report}", body.json.len());
    Ok(())
}
