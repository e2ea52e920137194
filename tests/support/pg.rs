//! Helpers for the tests that run against a real PostgreSQL server (`make test-pg` starts a
//! throwaway one with scripts/pg/server.sh and sets `LLMSESSION_PG_URL`).
#![allow(dead_code)]

use llmsession::agent::ToolResultInput;
use llmsession::log::TurnEndReason;
use llmsession::store::url::UrlOptions;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, Session, Usage};
use std::sync::atomic::{AtomicU64, Ordering};

/// The server's URL, or `None` after a loud notice that the test is skipped.
pub fn url(test: &str) -> Option<String> {
    match std::env::var("LLMSESSION_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!(
                "\n*** SKIPPED {test}: LLMSESSION_PG_URL is not set; `make test-pg` starts a throwaway PostgreSQL server and runs it ***\n"
            );
            None
        }
    }
}

/// A session id no other test (or earlier run on the same database) uses.
pub fn unique_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}-{}", std::process::id(), llmsession::session::now_ms(), N.fetch_add(1, Ordering::Relaxed))
}

/// Writer options for session `id`.
pub fn writer(id: &str) -> UrlOptions {
    UrlOptions { id: Some(id.to_string()), ..UrlOptions::default() }
}

/// Read-only options for session `id`.
pub fn reader(id: &str) -> UrlOptions {
    UrlOptions { id: Some(id.to_string()), read_only: true, ..UrlOptions::default() }
}

/// A direct connection for looking at (and tampering with) the tables.
pub fn sql(url: &str) -> postgres::Client {
    url.parse::<postgres::Config>().expect("the test URL parses").connect(postgres::NoTls).expect("the test server accepts a connection")
}

/// An agent for test turns.
pub fn agent(session: &Session) -> Agent {
    let mut opts = AgentOptions::new(CallConfig::new("openai", "m"));
    opts.system = Some("postgres test".into());
    Agent::new(session, opts).expect("an agent")
}

/// Runs one complete turn with `steps` steps (tool calls between them); returns its number.
pub fn turn(agent: &mut Agent, text: &str, steps: u64) -> llmsession::Result<u64> {
    let c = CancelToken::new();
    let t = agent.start_turn(Message::user_text(text.to_string()))?;
    for s in 0..steps {
        agent.next_request(&c)?;
        let mut content = vec![Block::text(format!("answer {t}.{s}"))];
        let last = s + 1 == steps;
        if !last {
            content.push(Block::tool_call(&format!("c{t}_{s}"), "read", "{}"));
        }
        agent.record_response(
            Message::new(Role::Assistant, content),
            Some(Usage { input_tokens: 100, output_tokens: 5, ..Default::default() }),
        )?;
        if !last {
            agent.record_tool_result(ToolResultInput {
                call_id: format!("c{t}_{s}"),
                content: vec![Block::text("ok")],
                is_error: false,
            })?;
        }
    }
    agent.end_turn(TurnEndReason::Completed)?;
    Ok(t)
}

/// The numbers of the turns the session's log holds as completed, in order.
pub fn completed_turns(session: &Session) -> Vec<u64> {
    session.with_log(|l| {
        l.lines()
            .iter()
            .filter_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                (v["type"] == "turn/end" && v["data"]["reason"] == "completed").then(|| v["data"]["turn"].as_u64()).flatten()
            })
            .collect()
    })
}

/// The user texts of the session's turns, in order.
pub fn turn_texts(session: &Session) -> Vec<String> {
    session.with_log(|l| {
        l.lines()
            .iter()
            .filter_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                (v["type"] == "user/message" && v["data"]["source"] == "user")
                    .then(|| v["data"]["message"]["content"][0]["text"].as_str().map(str::to_string))
                    .flatten()
            })
            .collect()
    })
}

/// Opens a writer, waiting while the lease is still held (a killed writer's server process
/// needs a moment to notice its client is gone). Returns the open and how many times it was
/// refused first.
pub fn open_writer_waiting(url: &str, opts: UrlOptions) -> (llmsession::Result<(Session, llmsession::log::load::LoadReport)>, u32) {
    let mut refused = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match Session::open_url(url, opts.clone()) {
            Err(e) if e.kind() == llmsession::ErrorKind::Locked && std::time::Instant::now() < deadline => {
                refused += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return (r, refused),
        }
    }
}
