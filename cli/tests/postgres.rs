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
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
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
