//! The inspector CLI on a real JSONL log and on a hand-damaged copy.

use llmsession::agent::ToolResultInput;
use llmsession::log::{NewEvent, TurnEndReason};
use llmsession::prefix::ListenerContext;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, Session, SessionOptions, Usage};
use std::process::Command;
use std::sync::Arc;

#[path = "../../tests/support/damaged_log.rs"]
mod damaged_log;
use damaged_log::{broken_chain, index_of, jsonl, reseal, without};

fn write_log(path: &std::path::Path) {
    write_turns(path, false)
}

/// Two turns of two steps each; with `note`, a host event between them.
fn write_turns(path: &std::path::Path, note: bool) {
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
        if note && i == 1 {
            session.append(NewEvent::new("host/note", serde_json::json!({"text": "the host was here"}))).unwrap();
        }
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
    for r in ["openai", "openai-responses", "anthropic", "gemini", "gemini-interactions"] {
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

/// The exit status, stdout and stderr of one run.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("the CLI exits, no signal"), text(&out.stdout), text(&out.stderr))
}

const COMMANDS: [&str; 7] = ["verify", "stats", "explain", "show", "headers", "sessions", "store-check"];

#[test]
fn help_and_version_print_on_stdout_and_exit_0() {
    let version = env!("CARGO_PKG_VERSION");
    for flag in ["--help", "-h"] {
        let (code, out, err) = run(&[flag]);
        assert_eq!((code, err.as_str()), (0, ""), "{flag}: {out}");
        assert!(out.contains("Usage: llmsession [OPTIONS] <COMMAND>"), "{out}");
        for c in COMMANDS {
            assert!(out.contains(&format!("\n  {c} ")), "{flag} does not list {c}: {out}");
        }
        // The exit codes are stated.
        for line in ["0  success", "2  usage error", "3  the log is bad", "4  the store could not be read", "1  any other failure"] {
            assert!(out.contains(line), "{flag} does not state {line:?}: {out}");
        }
    }
    for flag in ["--version", "-V"] {
        let (code, out, err) = run(&[flag]);
        assert_eq!((code, out.trim(), err.as_str()), (0, format!("llmsession {version}").as_str(), ""));
    }
    for c in COMMANDS {
        for flag in ["--help", "-h"] {
            let (code, out, err) = run(&[c, flag]);
            assert_eq!((code, err.as_str()), (0, ""), "{c} {flag}: {out}");
            assert!(out.contains(&format!("Usage: llmsession {c} ")) && out.contains("--json"), "{c} {flag}: {out}");
        }
        for flag in ["--version", "-V"] {
            let (code, out, err) = run(&[c, flag]);
            assert_eq!((code, err.as_str()), (0, ""), "{c} {flag}: {out}");
            assert!(out.trim().ends_with(version), "{c} {flag}: {out}");
        }
    }
    let (code, out, _) = run(&["help", "explain"]);
    assert!(code == 0 && out.contains("Usage: llmsession explain [OPTIONS] <LOG>") && out.contains("--step <ID>"), "{out}");
}

#[test]
fn usage_errors_exit_2_and_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["stats", p, "--frob"], "unexpected argument '--frob' found"),
        (&["verify", "--frob", p], "unexpected argument '--frob' found"),
        (&["stats"], "the following required arguments were not provided:\n  <LOG>"),
        (&["stats", p, "extra"], "unexpected argument 'extra' found"),
        (&["show", p], "the following required arguments were not provided:\n  --step <N>"),
        (&["show", p, "--step", "two"], "invalid value 'two' for '--step <N>'"),
        (&["explain", p, "--step", "two"], "invalid value 'two' for '--step <ID>': expected N (a conversation request, 1-based), cN (a summarisation request), nN (a native compaction request) or kN"),
        (&["explain", p, "--step=c"], "invalid value 'c' for '--step <ID>'"),
        (&["explain", p, "--step", "-1", "--json"], "unexpected argument '-1' found"),
        (&["explain", p, "--step"], "a value is required for '--step <ID>'"),
        (&["show", p, "--step"], "a value is required for '--step <N>'"),
        (&["show", p, "--step", "1", "--render", "cohere"], "invalid value 'cohere' for '--render <NAME>'"),
        (&["frobnicate", p], "unrecognized subcommand 'frobnicate'"),
        (&[], "Usage: llmsession [OPTIONS] <COMMAND>"),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} wrote on stdout: {out}");
    }
}

#[test]
fn options_go_anywhere_and_take_their_value_either_way() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();
    let (code, after, _) = run(&["stats", p, "--json"]);
    assert_eq!(code, 0);
    for args in [&["stats", "--json", p][..], &["--json", "stats", p][..]] {
        let (code, out, err) = run(args);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
        assert_eq!(out, after, "{args:?}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
    }
    let (code, spaced, _) = run(&["show", p, "--step", "2"]);
    assert_eq!(code, 0);
    for args in [&["show", p, "--step=2"][..], &["show", "--step=2", p][..], &["show", "--step", "2", p][..]] {
        let (code, out, err) = run(args);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
        assert_eq!(out, spaced, "{args:?}");
    }
    let (_, one, _) = run(&["show", p, "--step", "1"]);
    assert_ne!(one, spaced, "--step=2 must show request 2, not request 1");
    let (code, out, _) = run(&["explain", p, "--step=c1"]);
    assert!(code == 1 && out.is_empty(), "{out}");
    let (code, out, _) = run(&["explain", "--step=3", p, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], "3");
}

/// The keys `--json` documents (docs/cli.md) for each command.
#[test]
fn every_command_has_json_output_with_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();
    let json = |args: &[&str]| -> serde_json::Value {
        let (code, out, err) = run(args);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}: {out}");
        assert_eq!(out.lines().count(), 1, "{args:?}: one JSON document on one line: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let has = |v: &serde_json::Value, keys: &[&str], what: &str| {
        for k in keys {
            assert!(v.get(k).is_some(), "{what}: no {k:?} in {v}");
        }
    };

    let v = json(&["verify", p, "--json"]);
    has(&v, &["ok", "events", "requests", "compactions"], "verify");
    assert_eq!((v["ok"].as_bool(), v["requests"].as_u64(), v.get("renderer")), (Some(true), Some(4), None));
    let v = json(&["verify", p, "--render", "gemini", "--json"]);
    assert_eq!((v["renderer"].as_str(), v["bodies"].as_u64()), (Some("gemini"), Some(4)), "{v}");

    let v = json(&["stats", p, "--json"]);
    has(&v, &["session", "requests", "cachedTokens", "promptTokens"], "stats");
    let row_keys = [
        "request",
        "turn",
        "step",
        "seq",
        "messages",
        "sharedWithPrevious",
        "header",
        "compactionsBefore",
        "promptTokens",
        "cachedTokens",
        "expectedCachedTokens",
        "hitRatio",
        "cause",
    ];
    has(&v["requests"][0], &row_keys, "stats row");
    let session = v["session"].as_str().unwrap().to_string();

    let v = json(&["explain", p, "--json"]);
    has(&v, &["session", "counter", "requests", "totals"], "explain");
    has(
        &v["totals"],
        &["conversationRequests", "compactionRequests", "notRebuilt", "promptTokens", "cachedTokens", "expectedCachedTokens", "spend"],
        "explain totals",
    );
    let request_keys = [
        "id",
        "kind",
        "seq",
        "turn",
        "step",
        "messages",
        "bytes",
        "tokens",
        "rebuilt",
        "sharedTokens",
        "expectedCachedTokens",
        "uncachedTokens",
        "cause",
    ];
    has(&v["requests"][1], &request_keys, "explain request");
    let v = json(&["explain", p, "--step", "2", "--json"]);
    has(&v, &request_keys, "explain --step");
    assert_eq!(v["id"], "2");

    let v = json(&["show", p, "--step", "2", "--json"]);
    has(&v, &["model", "messages"], "show");
    assert_eq!(v["step"], 2);
    let v = json(&["show", p, "--step", "2", "--render", "anthropic", "--json"]);
    has(&v, &["model", "messages", "system"], "show --render anthropic");

    let v = json(&["headers", p, "--json"]);
    has(&v, &["session", "headers"], "headers");
    assert_eq!(v["session"], session.as_str());
    let h = &v["headers"][0];
    has(
        h,
        &["seq", "reason", "instance", "provider", "model", "systemLines", "tools", "prefixMessages", "changes", "drift"],
        "headers row",
    );
    assert_eq!((h["reason"].as_str(), h["model"].as_str(), h["systemLines"].as_u64()), (Some("initial"), Some("m1"), Some(1)), "{h}");
    assert_eq!(h["changes"], serde_json::json!([]));

    let v = json(&["sessions", p, "--json"]);
    let list = v.as_array().expect("sessions --json is an array");
    assert_eq!(list.len(), 1);
    has(&list[0], &["id", "createdAt", "events", "updatedAt", "inUse"], "sessions row");
    assert_eq!(list[0]["id"], session.as_str());
}

#[test]
fn a_tampered_log_exits_3_and_a_missing_file_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    // One tool result changed by hand: its record no longer matches its chained digest.
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().position(|l| l.contains("\"tool/result\"")).unwrap() + 1;
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, text.replacen("\"text\":\"ok\"", "\"text\":\"OK\"", 1)).unwrap();
    let b = bad.to_str().unwrap();
    let (code, out, err) = run(&["verify", b]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.is_empty()
            && err.starts_with(&format!("llmsession: verify failed: {b}: "))
            && err.contains(&format!("line {line}: the chained digest does not match")),
        "{err}"
    );
    let (code, out, err) = run(&["verify", b, "--json"]);
    assert_eq!(code, 3, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["error"]["exitCode"].as_u64(), v["error"]["kind"].as_str()),
        (Some(false), Some(3), Some("corrupt-log")),
        "{v}"
    );
    assert_eq!(v["error"]["line"], line);
    assert!(err.contains("verify failed"), "the message goes to stderr as well: {err}");

    // Not a session log, and an empty file: the log is bad too.
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "hello\n").unwrap();
    for c in ["verify", "stats", "explain", "headers"] {
        let (code, _, err) = run(&[c, junk.to_str().unwrap()]);
        assert!(code == 3 && err.contains("junk.jsonl: line 1: malformed JSON"), "{c}: {code} {err}");
    }
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let (code, _, err) = run(&["stats", empty.to_str().unwrap()]);
    assert!(code == 3 && err.contains("empty file, not a session log"), "{code} {err}");

    // A file that is not there: the store could not be read, and the message names the path.
    let missing = dir.path().join("nope").join("missing.jsonl");
    let m = missing.to_str().unwrap();
    for c in ["verify", "stats", "explain", "headers", "sessions"] {
        let (code, out, err) = run(&[c, m]);
        assert_eq!(code, 4, "{c}: {out}{err}");
        assert!(err.contains(m) && err.contains("No such file"), "{c}: {err}");
    }
    let (code, _, err) = run(&["show", m, "--step", "1"]);
    assert!(code == 4 && err.contains(m), "{err}");
    let (code, out, _) = run(&["stats", m, "--json"]);
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["error"]["exitCode"].as_u64(), v["error"]["kind"].as_str(), v["error"]["path"].as_str()),
        (Some(4), Some("storage"), Some(m)),
        "{v}"
    );
    // A directory where the log should be.
    let (code, _, err) = run(&["verify", dir.path().to_str().unwrap()]);
    assert!(code == 4 && err.contains("not a regular file"), "{code} {err}");

    // A request the log does not have: another failure (1), not a usage error.
    let (code, out, err) = run(&["show", path.to_str().unwrap(), "--step", "9", "--json"]);
    assert!(code == 1 && err.contains("there is no request 9"), "{code} {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["error"]["exitCode"].as_u64(), v["error"]["kind"].as_str()), (Some(1), Some("invalid-input")));
}

/// Every command that reads a log checks it as opening it does (the one loading path verify
/// uses): a log with a record removed, with a seq gap under a recomputed chain, or with a chain
/// value changed exits 3 from stats, explain, headers and show as from verify, naming the line.
#[test]
fn every_reader_refuses_a_damaged_log_with_exit_3_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_turns(&path, true);
    let recs: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
    let assistant = index_of(&recs, "assistant/message", 0);
    let note = index_of(&recs, "host/note", 0);
    let chain = index_of(&recs, "tool/result", 1);
    let cases: Vec<(&str, Vec<String>, usize, String)> = vec![
        ("an assistant/message removed", without(&recs, assistant), assistant + 1, "the chained digest does not match".into()),
        (
            "a host event removed, the chain recomputed",
            reseal(&without(&recs, note)),
            note + 1,
            format!("seq: expected {} (seqs are contiguous from 0), got {}", note - 1, note),
        ),
        ("a chain value changed", broken_chain(&recs, chain), chain + 1, "the chained digest does not match".into()),
    ];
    for (what, damaged, line, why) in cases {
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, jsonl(&damaged)).unwrap();
        let b = bad.to_str().unwrap();
        for args in [
            &["verify", b][..],
            &["stats", b],
            &["explain", b],
            &["explain", b, "--step", "1"],
            &["headers", b],
            &["show", b, "--step", "1"],
        ] {
            let (code, out, err) = run(args);
            assert_eq!(code, 3, "{what}: {args:?}: {out}{err}");
            let prefix = if args[0] == "verify" { "llmsession: verify failed: " } else { "llmsession: " };
            assert!(
                err.starts_with(&format!("{prefix}{b}: ")) && err.contains(&format!("line {line}: ")) && err.contains(&why),
                "{what}: {args:?}: {err}"
            );
            assert!(out.is_empty(), "{what}: {args:?} printed {out}");
            let mut with_json = args.to_vec();
            with_json.push("--json");
            let (code, out, _) = run(&with_json);
            assert_eq!(code, 3, "{what}: {with_json:?}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                (v["ok"].as_bool(), v["error"]["exitCode"].as_u64(), v["error"]["kind"].as_str(), v["error"]["line"].as_u64()),
                (Some(false), Some(3), Some("corrupt-log"), Some(line as u64)),
                "{what}: {with_json:?}: {v}"
            );
        }
    }
    // The undamaged log reads.
    for args in [&["stats", path.to_str().unwrap()][..], &["explain", path.to_str().unwrap()], &["headers", path.to_str().unwrap()]] {
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
}

/// No output carries a password: every command shows LOG without the one in the user part or
/// in `?password=`, on stderr and in --json (a database that is not there: the store, exit 4).
#[test]
fn no_message_prints_the_database_password() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://u:SECRET@127.0.0.1:{closed}/db?session=x&password=SECRET2");
    let shown = format!("postgres://u@127.0.0.1:{closed}/db");
    let unparsed = "postgres://u:SECRET@[::1/db?password=SECRET2&session=x".to_string();
    for log in [&url, &unparsed] {
        let commands: [&[&str]; 6] =
            [&["verify", log], &["stats", log], &["explain", log], &["show", log, "--step", "1"], &["headers", log], &["sessions", log]];
        for args in commands {
            for json in [false, true] {
                let mut args = args.to_vec();
                if json {
                    args.push("--json");
                }
                let (code, out, err) = run(&args);
                assert!(!out.contains("SECRET") && !err.contains("SECRET"), "{args:?} printed the password: {out}{err}");
                assert!(!err.is_empty(), "{args:?}: no message");
                if log == &url {
                    assert_eq!(code, 4, "{args:?}: {out}{err}");
                    // The message names the database as the library shows it (a build without
                    // the PostgreSQL store says it has none).
                    assert!(err.contains(&shown) || !cfg!(feature = "postgres"), "{args:?}: {err}");
                    if json {
                        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                        assert_eq!(v["error"]["exitCode"], 4, "{v}");
                    }
                }
            }
        }
    }
}

/// explain --step names what the log has in words (no `c1..c0` for a log without
/// summarisation requests); a well-formed ID the log does not have exits 1.
#[test]
fn explain_step_names_the_requests_the_log_has() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_log(&path);
    let p = path.to_str().unwrap();
    for id in ["c1", "5", "0"] {
        let (code, out, err) = run(&["explain", p, "--step", id]);
        assert_eq!((code, out.as_str()), (1, ""), "{id}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("llmsession: there is no request {id}: the log has 4 requests (1..4) and no summarisation requests")
        );
    }
    // N as show takes it: 02 is request 2.
    let (code, out, err) = run(&["explain", p, "--step", "02", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"], "2");
}

#[test]
fn store_check_runs_the_conformance_kit() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file:{}", dir.path().display());
    let (code, out, err) = run(&["store-check", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS conditional-append") && out.contains("11 case(s), 0 failed"), "{out}");
    let (code, out, _) = run(&["store-check", &url, "--case", "undo", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["passed"].as_bool(), v["cases"].as_array().map(Vec::len)), (Some(true), Some(1)), "{out}");
    assert_eq!(v["cases"][0]["case"], "undo");
    // An unknown case is a failure naming it; a file: URL that is not a directory cannot be used.
    let (code, _, err) = run(&["store-check", &url, "--case", "nope"]);
    assert!(code == 1 && err.contains("no conformance case is called \"nope\""), "{code} {err}");
    let (code, _, err) = run(&["store-check", "file:/dev/null"]);
    assert!(code == 4 && err.contains("naming a directory"), "{code} {err}");
}
