//! The inspector CLI on a real PostgreSQL server (`make test-pg` runs it with
//! LLMSESSION_PG_URL set; without it every test here returns at once): it reads straight from
//! the database, takes no lease, and names what is wrong.

#[path = "../../tests/support/pg.rs"]
mod pg;
use llmsession::Session;
use pg::{agent, sql, turn, unique_id, writer};
use std::process::Command;

macro_rules! pg_url {
    ($name:expr) => {
        match pg::url($name) {
            Some(u) => u,
            None => return,
        }
    };
}

fn cli(args: &[&str]) -> (bool, String) {
    let (code, out, err) = run(args);
    (code == 0, format!("{out}{err}"))
}

/// The exit status, stdout and stderr of one run.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("the CLI exits, no signal"), text(&out.stdout), text(&out.stderr))
}

/// One JSON document from a run that must succeed.
fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(args);
    assert_eq!((code, err.as_str()), (0, ""), "{args:?}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn the_cli_reads_sessions_from_postgres() {
    let url = pg_url!("the_cli_reads_sessions_from_postgres");
    let id = unique_id("cli");
    let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&s);
    turn(&mut a, "one", 2).unwrap();
    turn(&mut a, "two", 1).unwrap();
    drop(a);
    let at = format!("{url}?session={id}");
    // While the writer holds the lease: the CLI takes none.
    let (ok, text) = cli(&["verify", &at]);
    assert!(ok, "{text}");
    assert!(text.contains(&format!("ok: {} events, 3 requests", s.len())), "{text}");
    let (ok, text) = cli(&["stats", &at, "--json"]);
    assert!(ok, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["session"], id.as_str());
    assert_eq!(v["requests"].as_array().unwrap().len(), 3);
    let (ok, text) = cli(&["sessions", &url]);
    assert!(ok, "{text}");
    let line = text.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("{id} not listed: {text}"));
    assert!(line.contains(" yes "), "{line}");
    let (ok, text) = cli(&["sessions", &url, "--json"]);
    assert!(ok && text.contains(&format!("\"id\":\"{id}\"")), "{text}");
    drop(s);
    // Errors: no session named, a session that does not exist, damage.
    let (ok, text) = cli(&["verify", &url]);
    assert!(!ok && text.contains("name the session"), "{text}");
    let (ok, text) = cli(&["verify", &format!("{url}?session=nope-{id}")]);
    assert!(!ok && text.contains("holds no session"), "{text}");
    let password = url.split('@').next().unwrap().rsplit(':').next().unwrap();
    assert!(!text.contains(password), "the CLI printed the password: {text}");
    sql(&url)
        .execute("UPDATE llmsession_records SET record = replace(record, '\"one\"', '\"ONE\"') WHERE session_id = $1", &[&id])
        .unwrap();
    let (ok, text) = cli(&["verify", &at]);
    assert!(!ok && text.contains("chained digest"), "{text}");
}

/// Every command that reads a log reads it from PostgreSQL too (both URL schemes, TCP and the
/// unix socket), with the same --json output and exit codes as for a file.
#[test]
fn every_command_reads_a_postgres_session() {
    let url = pg_url!("every_command_reads_a_postgres_session");
    let id = unique_id("cli-all");
    let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&s);
    turn(&mut a, "one", 2).unwrap();
    turn(&mut a, "two", 1).unwrap();
    a.dispose().unwrap();
    let events = s.len();
    drop(s);
    let at = format!("{url}?session={id}");
    // The same database under the other scheme name (the library accepts both).
    let alt = format!("postgresql://{}", at.strip_prefix("postgres://").expect("the test URL is postgres://"));
    // Over the unix socket, where the server runs one.
    let socket = std::env::var("LLMSESSION_PG_SOCKET_URL").ok().filter(|u| !u.is_empty()).map(|u| format!("{u}?session={id}"));
    for log in [Some(&at), Some(&alt), socket.as_ref()].into_iter().flatten() {
        let v = json(&["verify", log, "--json"]);
        assert_eq!((v["ok"].as_bool(), v["events"].as_u64(), v["requests"].as_u64()), (Some(true), Some(events as u64), Some(3)), "{v}");
        let v = json(&["verify", "--render=anthropic", log, "--json"]);
        assert_eq!(v["bodies"], 3, "{v}");
        let v = json(&["stats", "--json", log]);
        assert_eq!((v["session"].as_str(), v["requests"].as_array().map(Vec::len)), (Some(id.as_str()), Some(3)), "{v}");
        assert_eq!(v["promptTokens"], 300);
        let v = json(&["explain", log, "--json"]);
        assert_eq!((v["session"].as_str(), v["totals"]["conversationRequests"].as_u64()), (Some(id.as_str()), Some(3)), "{v}");
        let v = json(&["explain", log, "--step=2", "--json"]);
        assert_eq!(v["id"], "2");
        let v = json(&["show", log, "--step=3", "--json"]);
        assert_eq!(v["turn"], 2, "{v}");
        let v = json(&["show", log, "--step", "1", "--render", "openai", "--json"]);
        assert_eq!(v["messages"][0]["role"], "system", "{v}");
        let v = json(&["headers", log, "--json"]);
        assert_eq!((v["session"].as_str(), v["headers"][0]["reason"].as_str()), (Some(id.as_str()), Some("initial")), "{v}");
        // The human forms too.
        for args in [&["stats", log.as_str()][..], &["explain", log], &["headers", log], &["show", log, "--step", "2"]] {
            let (code, out, err) = run(args);
            assert!(code == 0 && !out.is_empty() && err.is_empty(), "{args:?}: {code} {out}{err}");
        }
    }
    let list = json(&["sessions", alt.split('?').next().unwrap(), "--json"]);
    assert!(list.as_array().unwrap().iter().any(|s| s["id"] == id.as_str() && s["inUse"] == false), "{list}");

    // Exit codes. No session named, and a session the database does not hold: the store (4).
    let password = url.split('@').next().unwrap().rsplit(':').next().unwrap().to_string();
    for (log, want) in [(url.clone(), "name the session"), (format!("{url}?session=nope-{id}"), "holds no session")] {
        for c in ["verify", "stats", "explain", "headers"] {
            let (code, out, err) = run(&[c, &log, "--json"]);
            assert_eq!(code, 4, "{c} {log}: {out}{err}");
            assert!(err.contains(want) && !err.contains(&password) && !out.contains(&password), "{c}: {err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["error"]["exitCode"], 4, "{v}");
        }
    }
    // A server that is not there: the store (4), and the message says which.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused = format!("postgres://llmsession:{password}@127.0.0.1:{closed}/llmsession?session={id}");
    let (code, _, err) = run(&["stats", &refused]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{closed}")) && !err.contains(&password), "{err}");
    let (code, _, err) = run(&["sessions", refused.split('?').next().unwrap()]);
    assert_eq!(code, 4, "{err}");
    // A record changed in the database: the log is bad (3), for verify and for every reader
    // (each checks the log as opening it does), naming the same line; and no message shows the
    // password, in the user part or in ?password=.
    sql(&url)
        .execute("UPDATE llmsession_records SET record = replace(record, '\"two\"', '\"TWO\"') WHERE session_id = $1", &[&id])
        .unwrap();
    let (code, out, err) = run(&["verify", &at, "--json"]);
    assert_eq!(code, 3, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["error"]["exitCode"].as_u64(), v["error"]["kind"].as_str()), (Some(3), Some("corrupt-log")), "{v}");
    assert!(err.contains("chained digest"), "{err}");
    let line = v["error"]["line"].as_u64().expect("verify names the line");
    let with_param = format!("{at}&password={password}");
    for log in [&at, &alt, &with_param] {
        let commands: [&[&str]; 6] = [
            &["verify", log],
            &["stats", log],
            &["explain", log],
            &["explain", log, "--step", "1"],
            &["headers", log],
            &["show", log, "--step", "1"],
        ];
        for args in commands {
            for json in [false, true] {
                let mut args = args.to_vec();
                if json {
                    args.push("--json");
                }
                let (code, out, err) = run(&args);
                assert_eq!(code, 3, "{args:?}: {out}{err}");
                assert!(!err.contains(&password) && !out.contains(&password), "{args:?} printed the password: {out}{err}");
                assert!(err.contains(&format!("line {line}: ")) && err.contains("chained digest"), "{args:?}: {err}");
                if json {
                    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                    assert_eq!((v["error"]["exitCode"].as_u64(), v["error"]["line"].as_u64()), (Some(3), Some(line)), "{args:?}: {v}");
                }
            }
        }
    }
}
