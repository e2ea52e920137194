//! `llmsession explain` on a real log: the divergence and the spend it prints, in text and
//! JSON, agree with `llmsession stats`.

#[path = "../../tests/support/explain_log.rs"]
mod explain_log;
use explain_log::{options, turn};
use llmsession::{Agent, Session};
use serde_json::Value;
use std::process::Command;

#[test]
fn the_cli_prints_the_divergence_and_the_spend() {
    let s_dir = tempfile::tempdir().unwrap();
    let path = s_dir.path().join("s.jsonl");
    let (s, _) = Session::open_jsonl(&path, Default::default()).unwrap();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.\nToday is Monday.")).unwrap();
    turn(&mut a, "first", 1000);
    a.set_options(options("gpt-5", "You are careful.\nToday is Tuesday.")).unwrap();
    turn(&mut a, "second", 1200);
    a.dispose().unwrap();
    drop(s);
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let (ok, out) = run(&["explain", p]);
    assert!(ok, "{out}");
    assert!(out.contains("system line 2"), "{out}");
    assert!(out.contains("header-change"), "{out}");
    assert!(out.contains("prompt spend (uncached tokens) by cause: growth "), "{out}");
    let (ok, out) = run(&["explain", p, "--step", "3"]);
    assert!(ok, "{out}");
    assert!(out.contains("diverges at: system line 2"), "{out}");
    assert!(out.contains("because of: header-change (the request header changed at seq "), "{out}");
    assert!(out.contains("provider: prompt 1200 tokens, cached 600"), "{out}");
    let (ok, out) = run(&["explain", p, "--json"]);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["requests"][2]["divergence"]["component"], "system");
    assert_eq!(v["requests"][2]["divergence"]["line"], 2);
    assert_eq!(v["requests"][2]["divergence"]["event"], "header-change");
    assert!(v["totals"]["spend"]["header-change"].as_u64().unwrap() > 0);
    // stats and explain agree: the same computation.
    let (_, st) = run(&["stats", p, "--json"]);
    let st: Value = serde_json::from_str(st.trim()).unwrap();
    for (i, r) in st["requests"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["cachedTokens"], v["requests"][i]["cachedTokens"]);
        assert_eq!(r["sharedWithPrevious"], v["requests"][i]["sharedMessages"]);
        assert_eq!(r["expectedCachedTokens"], v["requests"][i]["expectedCachedTokens"]);
    }
    let (ok, out) = run(&["explain", p, "--step", "9"]);
    assert!(!ok && out.contains("there is no request 9: the log has 4 requests (1..4) and no summarisation requests"), "{out}");
}

#[test]
fn prices_and_cache_rules_come_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (s, _) = Session::open_jsonl(&path, Default::default()).unwrap();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1000);
    turn(&mut a, "second", 1200);
    a.dispose().unwrap();
    drop(s);
    let p = path.to_str().unwrap();
    let write = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        f.to_str().unwrap().to_string()
    };
    let prices = write("prices.json", r#"{"openai/gpt-5": {"input": 1.25, "cachedInput": 0.125, "output": 10}}"#);
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let (code, out) = run(&["explain", p, "--prices", &prices, "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let total = v["totals"]["cost"]["total"].as_f64().unwrap();
    let no_cache = v["totals"]["cost"]["noCache"].as_f64().unwrap();
    assert!(total > 0.0 && total < no_cache, "{v}");
    // Request 3 lost half of request 2's prompt seconds later: unexplained, and priced.
    assert!(v["totals"]["cost"]["byCause"]["unexplained"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["requests"][2]["causes"][1]["cause"], "unexplained");
    let (code, out) = run(&["explain", p, "--prices", &prices, "--step", "3"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("by cause: growth 100 (") && out.contains("unexplained 500 ("), "{out}");
    assert!(out.contains("cache rule: 0 s after the request compared with; TTL 300 s, minimum 1024 tokens"), "{out}");
    // A host rule with a minimum above the prompt charges the loss to it.
    let rules = write("rules.json", r#"{"openai": {"minTokens": 100000}}"#);
    let (_, out) = run(&["explain", p, "--cache-rules", &rules, "--json"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["requests"][2]["causes"][1]["cause"], "below-minimum", "{v}");
    // Bad files are refused, naming the file and the field.
    let bad = write("bad.json", r#"{"openai": {"input": 1, "output": 2}}"#);
    let (code, out) = run(&["explain", p, "--prices", &bad]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("--prices ") && out.contains("prices.openai.cachedInput: is required"), "{out}");
    let (code, out) = run(&["explain", p, "--cache-rules", &write("x.json", "[")]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("not JSON"), "{out}");
}

#[test]
fn verify_show_and_explain_state_what_the_model_saw_after_context_editing() {
    use llmsession::log::TurnEndReason;
    use llmsession::render::{parse_response, Renderer};
    use llmsession::{CancelToken, Message};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (s, _) = Session::open_jsonl(&path, Default::default()).unwrap();
    let mut a = Agent::new(&s, options("claude-sonnet-4-5", "You are careful.")).unwrap();
    for (user, edits) in [
        ("first", serde_json::json!(null)),
        (
            "second",
            serde_json::json!({"applied_edits": [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 900}]}),
        ),
    ] {
        a.start_turn(Message::user_text(user)).unwrap();
        a.next_request(&CancelToken::new()).unwrap();
        let body = serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "context_management": edits,
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 5}});
        let p = parse_response(Renderer::Anthropic, &body).unwrap();
        a.record_response(p.message, p.usage).unwrap();
        a.end_turn(TurnEndReason::Completed).unwrap();
    }
    a.dispose().unwrap();
    drop(s);
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, out, _) = run(&["verify", p]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("note: request 2 was sent as rebuilt, but the model saw it with the 2 oldest tool use(s) cleared (900 input tokens, clear_tool_uses_20250919)"),
        "{out}"
    );
    assert!(!out.contains("request 1 was sent"), "{out}");
    let (_, out, _) = run(&["verify", p, "--json"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["contextEdits"][0]["request"], "2");
    assert_eq!(v["contextEdits"][0]["edits"][0]["clearedInputTokens"], 900);
    let (code, out, err) = run(&["show", p, "--step", "2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("note: the provider edited this request before the model saw it: the 2 oldest tool use(s) cleared"), "{err}");
    serde_json::from_str::<Value>(&out).expect("stdout stays the body");
    let (_, _, err) = run(&["show", p, "--step", "1"]);
    assert!(!err.contains("edited"), "{err}");
    let (_, out, _) = run(&["explain", p, "--step", "2"]);
    assert!(out.contains("the provider cleared 2 tool use(s), 900 input tokens, before the model saw it"), "{out}");
    assert!(out.contains("context-edit"), "{out}");
}

/// The text outputs say which figures llmsession counted and which the provider reported: the
/// counted columns of explain are starred, with the counter named under the table; a request
/// without usage shows `-` for the provider's figures in stats and explain, and its expected and
/// uncached tokens (counted then) are starred.
#[test]
fn counted_figures_are_labelled_beside_the_providers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (s, _) = Session::open_jsonl(&path, Default::default()).unwrap();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1000);
    let c = llmsession::CancelToken::new();
    a.start_turn(llmsession::Message::user_text("no usage this time")).unwrap();
    a.next_request(&c).unwrap();
    a.record_response(llmsession::Message::new(llmsession::Role::Assistant, vec![llmsession::Block::text("ok")]), None).unwrap();
    a.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
    a.dispose().unwrap();
    drop(s);
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&["explain", p]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].contains(" tokens* ") && lines[1].contains(" shared* ") && lines[1].contains(" cached "), "{out}");
    assert!(
        out.contains("* counted by llmsession (the built-in estimate, no tokenizer), not reported by the provider (so are expected and uncached of a request without usage: -)"),
        "{out}"
    );
    let row3: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(row3[0], "3", "{out}");
    assert!(row3[5].ends_with('*') && row3[6] == "-" && row3[7] == "-" && row3[8].ends_with('*'), "{out}");
    let row1: Vec<&str> = lines[2].split_whitespace().collect();
    assert!(!row1[5].ends_with('*') && row1[7] == "1000" && !row1[8].ends_with('*'), "{out}");
    let out = run(&["explain", p, "--step", "1"]);
    assert!(out.contains(" tokens (counted by llmsession, the built-in estimate, no tokenizer)"), "{out}");
    assert!(out.contains("expected cacheable 0 (in the provider's tokens)"), "{out}");
    let out = run(&["stats", p]);
    let row3: Vec<&str> = out.lines().nth(4).unwrap().split_whitespace().collect();
    assert_eq!(&row3[row3.len() - 3..], ["-", "-", "-"], "{out}");
    assert!(out.contains("note: 1 request(s) have no usage in the log (-)"), "{out}");
    let first: Vec<&str> = out.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(&first[first.len() - 3..], ["1000", "500", "50%"], "{out}");
}
