//! The inspector CLI on a real JSONL log and on a hand-damaged copy.

use llmsession::agent::ToolResultInput;
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, Session, SessionOptions, Usage};
use std::process::Command;
use std::sync::Arc;

fn write_log(path: &std::path::Path) {
    let (session, _) = Session::open_jsonl(path, SessionOptions::default()).unwrap();
    let mut opts = AgentOptions::new(CallConfig::new("test", "m1"));
    opts.system = Some("be brief".into());
    let mut agent = Agent::new(&session, opts).unwrap();
    agent
        .add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| {
            let mut v = vec![Message::user_text("<skills>one</skills>")];
            v.extend_from_slice(rest);
            Ok(v)
        }))
        .unwrap();
    let c = CancelToken::new();
    for (i, text) in ["first", "second"].iter().enumerate() {
        agent.start_turn(Message::user_text(*text)).unwrap();
        agent.next_request(&c).unwrap();
        let usage = Usage { input_tokens: 10, output_tokens: 3, cache_read_tokens: Some(20 * i as u64), ..Default::default() };
        agent.record_response(Message::new(Role::Assistant, vec![Block::tool_call(&format!("c{i}"), "read", "{}")]), Some(usage)).unwrap();
        agent.record_tool_result(ToolResultInput { call_id: format!("c{i}"), content: vec![Block::text("ok")], is_error: false }).unwrap();
        agent.next_request(&c).unwrap();
        agent.record_response(Message::new(Role::Assistant, vec![Block::text("done")]), None).unwrap();
        agent.end_turn(TurnEndReason::Completed).unwrap();
    }
    agent.dispose().unwrap();
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn cli_inspects_a_log_and_names_the_damaged_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();

    let (ok, out) = cli(&["verify", p]);
    assert!(ok, "{out}");
    assert!(out.contains("4 requests"), "{out}");
    // With a renderer, every provider body too.
    for r in ["openai", "openai-responses", "anthropic", "gemini"] {
        let (ok, out) = cli(&["verify", p, "--render", r]);
        assert!(ok, "{out}");
        assert!(out.contains(&format!("ok: 4 {r} bodies built from the rendered messages")), "{out}");
    }
    // An unknown renderer is a usage error that lists the ones there are.
    let (ok, out) = cli(&["verify", p, "--render", "cohere"]);
    assert!(!ok && out.contains("invalid value 'cohere' for '--render <NAME>'") && out.contains("openai-responses"), "{out}");

    let (ok, out) = cli(&["stats", p, "--json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["requests"].as_array().unwrap().len(), 4);
    assert_eq!(v["requests"][1]["sharedWithPrevious"], 2, "{out}");
    assert_eq!(v["requests"][3]["sharedWithPrevious"], 6, "{out}");
    assert_eq!(v["requests"][0]["header"], "initial");
    assert_eq!(v["cachedTokens"], 20);

    let (ok, out) = cli(&["show", p, "--step", "2"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["messages"][0]["content"][0]["text"], "<skills>one</skills>");
    assert_eq!(v["step"], 2);
    let (ok, out) = cli(&["show", p, "--step", "1", "--render", "openai"]);
    assert!(ok, "{out}");
    assert!(out.contains("\"role\": \"system\""), "{out}");
    let (ok, out) = cli(&["show", p, "--step", "9"]);
    assert!(!ok && out.contains("there is no request 9"), "{out}");

    let (ok, out) = cli(&["headers", p]);
    assert!(ok && out.contains("initial"), "{out}");

    // Hand-damaged copies: the prefix removed from the header. Edited by hand, the record no
    // longer matches its chained digest: verify names the line.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let edit = |l: &str| -> String {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["type"] == "request/header" {
            v["data"]["header"].as_object_mut().unwrap().remove("messagePrefix");
        }
        v.as_object_mut().unwrap().remove("chain");
        v.to_string()
    };
    let header_line = lines.iter().position(|l| l.contains("\"request/header\"")).unwrap() + 1;
    let mut damaged: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    damaged[header_line - 1] = edit(lines[header_line - 1]);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, damaged.join("\n") + "\n").unwrap();
    let (ok, out) = cli(&["verify", bad.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("line {header_line}")) && out.contains("chain"), "{out}");
    // The same edit with every digest recomputed (a deliberate rewrite): the chain holds, and
    // the rebuilt requests name the step that differs.
    let mut link = llmsession::log::chain::start(lines[0].as_bytes());
    let mut forged = vec![lines[0].to_string()];
    for l in &lines[1..] {
        let (rec, next) = llmsession::log::chain::seal(&link, &edit(l));
        link = next;
        forged.push(rec);
    }
    std::fs::write(&bad, forged.join("\n") + "\n").unwrap();
    let (ok, out) = cli(&["verify", bad.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(out.contains("turn 1 step 1"), "{out}");

    // Not a log at all.
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "hello\n").unwrap();
    let (ok, out) = cli(&["verify", junk.to_str().unwrap()]);
    assert!(!ok && out.contains("line 1"), "{out}");
    let (ok, out) = cli(&["verify", "/nonexistent/x.jsonl"]);
    assert!(!ok && out.contains("No such file"), "{out}");
}

/// `llmsession show LOG --step N | head -c 1`: the reader goes away after one byte; the CLI
/// stops quietly with success instead of panicking on the closed pipe.
#[test]
fn cli_stops_quietly_when_its_reader_goes_away() {
    use std::io::Read;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();
    for args in [vec!["show", p, "--step", "4"], vec!["headers", p], vec!["stats", p]] {
        let mut child =
            Command::new(env!("CARGO_BIN_EXE_llmsession")).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take()); // closed before the CLI writes anything
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{args:?}: {status:?} {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
