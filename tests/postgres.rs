//! The PostgreSQL store against a real server (`make test-pg`: scripts/pg/server.sh starts a
//! throwaway cluster and sets `LLMSESSION_PG_URL`; without it every test here is skipped with a
//! notice). What a user can see: records stored verbatim and reloaded, the writer lease
//! (LOCKED, read-only followers), conditional appends (CONFLICT from a writer that bypassed the
//! lease), tail truncation and damage found on open (the quarantine), fork and listing, the
//! errors for bad URLs, credentials, databases and schemas, two processes racing for one
//! session, SIGKILLed writers, and the server going away mid-session.
//!
//! Child processes are this test binary run again with `LLMSESSION_PG_CHILD` set (the
//! `pg_child` test does their work then).

use llmsession::store::url::{list_sessions, UrlOptions};
use llmsession::{ErrorKind, NewEvent, Session};
use parking_lot::RwLock;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support {
    pub mod pg;
}
use support::pg::{self, agent, completed_turns, open_writer_waiting, reader, sql, turn, unique_id, writer};

const CHILD_ENV: &str = "LLMSESSION_PG_CHILD";

/// The server-restart test stops the server: it takes this for writing, every other test for
/// reading.
static SERVER: RwLock<()> = RwLock::new(());

macro_rules! pg_url {
    ($name:expr) => {
        match pg::url($name) {
            Some(u) => u,
            None => return,
        }
    };
}

fn host(text: &str) -> NewEvent {
    NewEvent::visible("user/message", json!({"message": {"role": "user", "content": [{"type": "text", "text": text}]}, "source": "host"}))
}

/// Leaves turn `n` open, as a writer that died inside it does (an agent that is dropped closes
/// its turn; a killed process does not).
fn open_turn(s: &Session, n: u64, text: &str) {
    s.append(NewEvent::new("turn/start", json!({ "turn": n }))).unwrap();
    s.append(NewEvent::visible(
        "user/message",
        json!({"message": {"role": "user", "content": [{"type": "text", "text": text}]}, "source": "user"}),
    ))
    .unwrap();
}

#[test]
fn records_are_stored_verbatim_and_reload() {
    let url = pg_url!("records_are_stored_verbatim_and_reload");
    let _g = SERVER.read();
    let id = unique_id("verbatim");
    let records = {
        let (s, report) = Session::open_url(&url, writer(&id)).unwrap();
        assert_eq!(report.cut_records + report.repaired_events, 0);
        let mut a = agent(&s);
        for i in 0..3 {
            turn(&mut a, &format!("question {i}"), 1 + i % 3).unwrap();
        }
        drop(a);
        s.records().unwrap()
    };
    // The rows are the records, byte for byte, chain field included.
    let mut c = sql(&url);
    let header: String = c.query_one("SELECT header FROM llmsession_sessions WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(header, &*records[0]);
    let rows = c.query("SELECT seq, record FROM llmsession_records WHERE session_id = $1 ORDER BY seq", &[&id]).unwrap();
    assert_eq!(rows.len(), records.len() - 1);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.get::<_, i64>(0), i as i64);
        assert_eq!(r.get::<_, &str>(1), &*records[i + 1]);
        assert!(r.get::<_, &str>(1).contains("\"chain\":\""));
    }
    let (events, head): (i64, Option<String>) =
        c.query_one("SELECT events, chain_head FROM llmsession_sessions WHERE id = $1", &[&id]).map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!(events as usize, records.len() - 1);
    // The schema records its version.
    let v: String = c.query_one("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]).unwrap().get(0);
    assert_eq!(v, llmsession::store::postgres::SCHEMA_VERSION.to_string());
    // Reopened: the same records, the same chain head, and verify passes.
    let (s, report) = Session::open_url(&url, writer(&id)).unwrap();
    assert_eq!(report.cut_records + report.repaired_events, 0);
    assert_eq!(s.records().unwrap(), records);
    assert_eq!(s.stats().chain_head, head);
    assert_eq!(s.stats().turns, 3);
    s.verify().unwrap();
    // The session continues on the reopened handle.
    let mut a = agent(&s);
    turn(&mut a, "after reopen", 2).unwrap();
    drop(a);
    drop(s);
    let (s, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(completed_turns(&s), vec![1, 2, 3, 4]);
    s.verify().unwrap();
}

#[test]
fn a_second_writer_is_locked_and_readers_follow() {
    let url = pg_url!("a_second_writer_is_locked_and_readers_follow");
    let _g = SERVER.read();
    let id = unique_id("lease");
    let (w, _) = Session::open_url(&url, writer(&id)).unwrap();
    w.append(host("first")).unwrap();
    // A second writer, in this process: LOCKED at open, naming the holder.
    let e = Session::open_url(&url, writer(&id)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
    assert!(e.message().contains("in use"), "{}", e.message());
    let holder = e.detail()["holder"].as_str().unwrap().to_string();
    assert!(holder.contains(&format!("llmsession pid {}", std::process::id())), "{holder}");
    assert!(!e.message().contains(url.split('@').next().unwrap().rsplit(':').next().unwrap()), "the message shows the password");
    // A reader takes no lease, refuses writes, and follows the writer.
    let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert!(r.read_only());
    assert_eq!(r.len(), 1);
    assert_eq!(r.append(host("no")).unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(
        llmsession::Agent::new(&r, llmsession::AgentOptions::new(llmsession::CallConfig::new("openai", "m"))).unwrap_err().kind(),
        ErrorKind::ReadOnly
    );
    w.append(host("second")).unwrap();
    w.append(host("third")).unwrap();
    let rep = r.refresh().unwrap();
    assert_eq!((rep.new_events, rep.events), (2, 3));
    assert_eq!(r.records().unwrap(), w.records().unwrap());
    assert_eq!(r.refresh().unwrap().new_events, 0);
    // The session is listed as in use while the writer holds it.
    let listed = list_sessions(&url, None, None, None).unwrap();
    let me = listed.iter().find(|s| s.id == id).expect("listed");
    assert!(me.in_use);
    assert_eq!(me.events, 3);
    // Once the writer is gone, the next writer gets the lease.
    drop(w);
    let (w2, _) = Session::open_url(&url, writer(&id)).unwrap();
    w2.append(host("fourth")).unwrap();
    assert_eq!(r.refresh().unwrap().new_events, 1);
    r.verify().unwrap();
    // A read-only open of a session that does not exist, and a writer that may not create.
    let e = Session::open_url(&url, reader(&unique_id("missing"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("holds no session"), "{}", e.message());
    let e = Session::open_url(&url, UrlOptions { create: false, ..writer(&unique_id("missing")) }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", e.message());
    // The session id can come with the URL instead.
    let (r2, _) = Session::open_url(&format!("{url}?session={}", id), UrlOptions { read_only: true, ..UrlOptions::default() }).unwrap();
    assert_eq!(r2.len(), 4);
    let e = Session::open_url(&format!("{url}?session=other"), reader(&id)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn a_writer_that_bypassed_the_lease_makes_appends_conflict() {
    let url = pg_url!("a_writer_that_bypassed_the_lease_makes_appends_conflict");
    let _g = SERVER.read();
    let id = unique_id("conflict");
    let (w, _) = Session::open_url(&url, writer(&id)).unwrap();
    w.append(host("one")).unwrap();
    let mut c = sql(&url);
    // Another writer's next event, built on a copy of the log, written straight into the tables.
    let foreign = {
        let copy = llmsession::store::MemoryStore::with_records(w.records().unwrap().iter().map(|r| r.to_string()).collect());
        let (s, _) = Session::open(Box::new(copy), Default::default()).unwrap();
        s.append(host("from elsewhere")).unwrap();
        s.records().unwrap().last().unwrap().to_string()
    };
    // (a) The head moved: the append is refused, nothing is written.
    let mut tx = c.transaction().unwrap();
    tx.execute("INSERT INTO llmsession_records (session_id, seq, record) VALUES ($1, 1, $2)", &[&id, &foreign]).unwrap();
    tx.execute(
        "UPDATE llmsession_sessions SET events = 2, chain_head = $2 WHERE id = $1",
        &[&id, &llmsession::log::chain::stored_link(&foreign)],
    )
    .unwrap();
    tx.commit().unwrap();
    let e = w.append(host("two")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{}", e.message());
    assert_eq!(w.len(), 1, "the refused event is not in memory");
    let n: i64 = c.query_one("SELECT count(*) FROM llmsession_records WHERE session_id = $1", &[&id]).unwrap().get(0);
    assert_eq!(n, 2, "the refused event is not stored");
    // The handle refuses until refreshed; the refresh reads the other writer's event.
    assert_eq!(w.append(host("two")).unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(w.refresh().unwrap().new_events, 1);
    w.append(host("two")).unwrap();
    assert_eq!(w.len(), 3);
    // (b) A record at the next seq without the head moving: the primary key refuses the batch.
    let stray = {
        let copy = llmsession::store::MemoryStore::with_records(w.records().unwrap().iter().map(|r| r.to_string()).collect());
        let (s, _) = Session::open(Box::new(copy), Default::default()).unwrap();
        s.append(host("stray")).unwrap();
        s.records().unwrap().last().unwrap().to_string()
    };
    c.execute("INSERT INTO llmsession_records (session_id, seq, record) VALUES ($1, 3, $2)", &[&id, &stray]).unwrap();
    let e = w.append(host("three")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{}", e.message());
    assert!(e.message().contains("already stored"), "{}", e.message());
    let (events, rec): (i64, String) = c
        .query_one("SELECT s.events, r.record FROM llmsession_sessions s JOIN llmsession_records r ON r.session_id = s.id AND r.seq = 3 WHERE s.id = $1", &[&id])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((events, rec.as_str()), (3, stray.as_str()), "nothing of the refused batch was written");
    // Such a row (beyond the head) is damage on the next open.
    drop(w);
    let e = Session::open_url(&url, writer(&id)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
    assert!(e.message().contains("without moving the head"), "{}", e.message());
}

#[test]
fn records_missing_at_the_end_are_damage() {
    let url = pg_url!("records_missing_at_the_end_are_damage");
    let _g = SERVER.read();
    let id = unique_id("truncated");
    {
        let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
        let mut a = agent(&s);
        turn(&mut a, "one", 1).unwrap();
        turn(&mut a, "two", 1).unwrap();
    }
    let mut c = sql(&url);
    // The chain alone cannot tell a shorter log; the head can.
    c.execute(
        "DELETE FROM llmsession_records WHERE session_id = $1 AND seq = (SELECT max(seq) FROM llmsession_records WHERE session_id = $1)",
        &[&id],
    )
    .unwrap();
    for opts in [writer(&id), reader(&id)] {
        let e = Session::open_url(&url, opts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
        assert!(e.message().contains("removed from the end"), "{}", e.message());
    }
    // A gap in the middle.
    let id2 = unique_id("gap");
    {
        let (s, _) = Session::open_url(&url, writer(&id2)).unwrap();
        turn(&mut agent(&s), "one", 2).unwrap();
    }
    c.execute("DELETE FROM llmsession_records WHERE session_id = $1 AND seq = 2", &[&id2]).unwrap();
    let e = Session::open_url(&url, reader(&id2)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog);
    assert!(e.message().contains("event 2 is missing"), "{}", e.message());
}

#[test]
fn damage_in_the_open_turn_goes_to_the_quarantine() {
    let url = pg_url!("damage_in_the_open_turn_goes_to_the_quarantine");
    let _g = SERVER.read();
    let id = unique_id("quarantine");
    let kept = {
        let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
        let mut a = agent(&s);
        turn(&mut a, "complete", 1).unwrap();
        drop(a);
        let kept = s.len();
        open_turn(&s, 2, "left open");
        s.append(NewEvent::new("host/note", json!({"note": "after the prompt"}))).unwrap();
        kept
    };
    // Someone edits the record of the open turn's user message in place.
    let mut c = sql(&url);
    let n = c
        .execute(
            "UPDATE llmsession_records SET record = replace(record, 'left open', 'LEFT OPEN') WHERE session_id = $1 AND record LIKE '%left open%'",
            &[&id],
        )
        .unwrap();
    assert_eq!(n, 1);
    // An edit that keeps the record well-formed breaks the chain: that is tampering, not crash
    // damage, and the open refuses the session naming the record, wherever it lies.
    let e = Session::open_url(&url, writer(&id)).map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{e:?}");
    assert!(e.message().contains("chained digest does not match"), "{}", e.message());
    assert_eq!(e.detail()["line"], kept as u64 + 3, "the user message: {e:?}");
    // A record that is no longer a record (cut short, overwritten) is damage: it is cut, with
    // everything after it in the unfinished turn. (The session's head still vouches for the
    // last record, so this is not mistaken for a replaced end of the log.)
    let n = c
        .execute("UPDATE llmsession_records SET record = left(record, 40) WHERE session_id = $1 AND record LIKE '%LEFT OPEN%'", &[&id])
        .unwrap();
    assert_eq!(n, 1);
    let (s, report) = Session::open_url(&url, writer(&id)).unwrap();
    // The damaged record and the note after it are cut; the turn/start before them stays and
    // the repair closes the turn.
    assert_eq!(report.cut_records, 2, "{report:?}");
    assert!(report.cut_damaged);
    assert!(report.repaired_events > 0);
    let saved = report.cut_saved_to.clone().unwrap();
    assert!(saved.contains("llmsession_quarantine"), "{saved}");
    assert!(!saved.contains(url.split('@').next().unwrap().rsplit(':').next().unwrap()), "no password in {saved}");
    assert_eq!(s.len(), kept + 1 + report.repaired_events, "the cut leaves the complete turn and the turn's start");
    let q: Vec<(i64, String, String)> = c
        .query("SELECT seq, record, reason FROM llmsession_quarantine WHERE session_id = $1 ORDER BY seq", &[&id])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(q.len(), report.cut_records);
    assert_eq!(q[0].0, kept as i64 + 1);
    assert!(q.iter().any(|(_, r, _)| r.len() == 40), "the damaged record is kept as evidence: {q:?}");
    assert!(!q[0].2.is_empty());
    s.verify().unwrap();
    // The head moved back with the cut: the session continues and reloads.
    turn(&mut agent(&s), "after the cut", 1).unwrap();
    drop(s);
    let (s, report) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(report.cut_records, 0);
    assert_eq!(completed_turns(&s), vec![1, 3], "turn 2 was closed by the repair, turn 3 completed");
    s.verify().unwrap();
}

#[test]
fn a_crashed_writer_leaves_an_open_turn_the_next_writer_closes() {
    let url = pg_url!("a_crashed_writer_leaves_an_open_turn_the_next_writer_closes");
    let _g = SERVER.read();
    let id = unique_id("repair");
    {
        let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
        let mut a = agent(&s);
        turn(&mut a, "complete", 1).unwrap();
        drop(a);
        open_turn(&s, 2, "open");
    }
    let (s, report) = Session::open_url(&url, writer(&id)).unwrap();
    assert!(report.repaired_events > 0);
    assert_eq!(report.cut_records, 0);
    s.verify().unwrap();
    drop(s);
    let (s, report) = Session::open_url(&url, writer(&id)).unwrap();
    assert_eq!(report.repaired_events, 0, "the repair was stored");
    drop(s);
}

#[test]
fn fork_within_the_store_and_list_its_sessions() {
    let url = pg_url!("fork_within_the_store_and_list_its_sessions");
    let _g = SERVER.read();
    let id = unique_id("parent");
    let (p, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&p);
    turn(&mut a, "one", 1).unwrap();
    turn(&mut a, "two", 2).unwrap();
    drop(a);
    let child_id = format!("{id}-child");
    let store = llmsession::store::url::open_store(&url, &writer(&child_id)).unwrap().0;
    let f = p.fork(None, store, llmsession::SessionOptions { id: Some(child_id.clone()), ..Default::default() }).unwrap();
    assert_eq!(f.header_record().parent, Some((id.clone(), p.len() as u64)));
    turn(&mut agent(&f), "three, in the fork", 1).unwrap();
    f.verify().unwrap();
    drop(f);
    // A fork into a session that exists is refused.
    let store = llmsession::store::url::open_store(&url, &writer(&id)).map(|_| ());
    assert_eq!(store.unwrap_err().kind(), ErrorKind::Locked, "the parent is still open");
    let listed = list_sessions(&url, None, None, None).unwrap();
    let parent = listed.iter().find(|s| s.id == id).unwrap();
    let child = listed.iter().find(|s| s.id == child_id).unwrap();
    assert!(parent.in_use && !child.in_use);
    assert_eq!(child.parent.as_ref().map(|p| (p.id.as_str(), p.seed_length)), Some((id.as_str(), p.len() as u64)));
    assert!(child.events > parent.events);
    assert!(child.created_at >= parent.created_at && child.updated_at > 0);
    assert_eq!(child.chain_head.as_deref().map(str::len), Some(64));
    let json = serde_json::to_value(child).unwrap();
    assert_eq!(json["parent"]["seedLength"], p.len() as u64);
    assert_eq!(json["inUse"], false);
    // Ordered by id, with paging.
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    let page = list_sessions(&url, Some(&id), Some(1), None).unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, child_id);
    assert!(list_sessions(&url, None, Some(0), None).unwrap().is_empty());
    // Reopened from the store, the fork verifies (its seeded requests name the parent).
    let (f, _) = Session::open_url(&url, reader(&child_id)).unwrap();
    f.verify().unwrap();
    assert_eq!(completed_turns(&f), vec![1, 2, 3]);
}

#[test]
fn bad_urls_credentials_databases_and_schemas_are_clear_errors() {
    let url = pg_url!("bad_urls_credentials_databases_and_schemas_are_clear_errors");
    let _g = SERVER.read();
    let cfg: postgres::Config = url.parse().unwrap();
    let password = String::from_utf8(cfg.get_password().unwrap().to_vec()).unwrap();
    let (user, port) = (cfg.get_user().unwrap().to_string(), cfg.get_ports()[0]);
    let id = unique_id("errors");
    let check = |u: &str, kind: ErrorKind, says: &str| {
        let e = Session::open_url(u, writer(&id)).unwrap_err();
        assert_eq!(e.kind(), kind, "{u}: {}", e.message());
        assert!(e.message().contains(says), "{u}: {}", e.message());
        assert!(
            !e.message().contains(&password) && !e.detail_json().to_string().contains(&password),
            "the password leaked: {}",
            e.message()
        );
        e
    };
    check("postgres://", ErrorKind::InvalidInput, "names no host");
    check(&format!("postgres://{user}@127.0.0.1:{port}/llmsession?nonsense=1"), ErrorKind::InvalidInput, "unknown option");
    check("redis://localhost/0", ErrorKind::InvalidInput, "unknown store scheme");
    let e = check(&format!("postgres://{user}:wrong-{password}@127.0.0.1:{port}/llmsession"), ErrorKind::Storage, "authentication failed");
    assert_eq!(e.detail()["sqlstate"], "28P01");
    let e = check(&format!("postgres://{user}:{password}@127.0.0.1:{port}/no_such_database"), ErrorKind::Storage, "does not exist");
    assert_eq!(e.detail()["sqlstate"], "3D000");
    // Nothing listens on port 1.
    check(&format!("postgres://{user}:{password}@127.0.0.1:1/llmsession?connect_timeout=5"), ErrorKind::Storage, "cannot connect");
    // A database whose llmsession schema is newer than this library's.
    let mut c = sql(&url);
    let db = format!("llmsession_newer_{}", std::process::id());
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let newer = format!("postgres://{user}:{password}@127.0.0.1:{port}/{db}");
    // First use creates the tables; a newer library then takes the database over.
    drop(Session::open_url(&newer, writer("s")).unwrap());
    // A database of schema version 3 (before the checkpoint index) is migrated by a writer.
    sql(&newer)
        .batch_execute("DROP INDEX llmsession_records_checkpoints; UPDATE llmsession_meta SET value = '3' WHERE key = 'schema_version'")
        .unwrap();
    drop(Session::open_url(&newer, writer("s")).unwrap());
    let v: String = sql(&newer).query_one("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]).unwrap().get(0);
    assert_eq!(v, "4");
    let index: i64 =
        sql(&newer).query_one("SELECT count(*) FROM pg_indexes WHERE indexname = 'llmsession_records_checkpoints'", &[]).unwrap().get(0);
    assert_eq!(index, 1);
    sql(&newer).execute("UPDATE llmsession_meta SET value = '99' WHERE key = 'schema_version'", &[]).unwrap();
    for opts in [writer("s"), reader("s")] {
        let e = Session::open_url(&newer, opts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage);
        let want = format!("schema version 99, newer than this library's version {}", llmsession::store::postgres::SCHEMA_VERSION);
        assert!(e.message().contains(&want), "{}", e.message());
    }
    assert_eq!(list_sessions(&newer, None, None, None).unwrap_err().kind(), ErrorKind::Storage);
    // A read-only open does not create the tables.
    c.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)")).unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let e = Session::open_url(&newer, reader("s")).unwrap_err();
    assert!(e.message().contains("no llmsession tables"), "{}", e.message());
    assert!(list_sessions(&newer, None, None, None).unwrap().is_empty());
    let n: i64 = sql(&newer).query_one("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'llmsession%'", &[]).unwrap().get(0);
    assert_eq!(n, 0);
    c.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)")).unwrap();
}

#[test]
fn a_unix_socket_url_reaches_the_same_sessions() {
    let url = pg_url!("a_unix_socket_url_reaches_the_same_sessions");
    let Ok(socket) = std::env::var("LLMSESSION_PG_SOCKET_URL") else {
        eprintln!("*** SKIPPED a_unix_socket_url_reaches_the_same_sessions: LLMSESSION_PG_SOCKET_URL is not set ***");
        return;
    };
    let _g = SERVER.read();
    let id = unique_id("socket");
    let (s, _) = Session::open_url(&socket, writer(&id)).unwrap();
    s.append(host("over the socket")).unwrap();
    assert!(s.stats().events == 1);
    // The same session over TCP: the lease holds across both.
    assert_eq!(Session::open_url(&url, writer(&id)).unwrap_err().kind(), ErrorKind::Locked);
    drop(s);
    let (t, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(t.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Processes: a race for one session, and SIGKILLed writers.

/// The child processes' work (see the module docs).
#[test]
fn pg_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.splitn(5, '|').collect();
    let (mode, url, id) = (parts[0], parts[1], parts[2]);
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    match mode {
        // race|url|id|start unix ms|tag: open at the start time; on LOCKED say so and retry
        // until the other writer is done; then run 3 turns and hold the session a moment.
        "race" => {
            let start: u64 = parts[3].parse().unwrap();
            let tag = parts[4];
            let now = llmsession::session::now_ms();
            if start > now {
                std::thread::sleep(Duration::from_millis(start - now));
            }
            let mut first = true;
            let s = loop {
                match Session::open_url(url, writer(id)) {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == ErrorKind::Locked => {
                        if first {
                            say(format!("LOCKED {}", e.message()));
                            first = false;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("open: {}", e.message()),
                }
            };
            say(format!("OPENED first={first}"));
            let mut a = agent(&s);
            for i in 0..3 {
                let t = turn(&mut a, &format!("{tag} turn {i}"), 2).unwrap();
                say(format!("TURN {t}"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // kill|url|id|durability: run turns until killed, saying what is durable.
        "kill" => {
            let durability = llmsession::Durability::parse(parts[3]).unwrap();
            let every = durability == llmsession::Durability::EveryEvent;
            let (s, _) = open_writer_waiting(url, UrlOptions { durability, ..writer(id) }).0.expect("the writer opens the session");
            say("OPENED".into());
            let mut a = agent(&s);
            let c = llmsession::CancelToken::new();
            for i in 0..100_000u64 {
                let t = a.start_turn(llmsession::Message::user_text(format!("question {i}"))).unwrap();
                if every {
                    say(format!("DURABLE seq {}", s.len() - 1));
                }
                let steps = 1 + i % 3;
                for st in 0..steps {
                    a.next_request(&c).unwrap();
                    let last = st + 1 == steps;
                    let mut content = vec![llmsession::Block::text(format!("answer {i}.{st}"))];
                    if !last {
                        content.push(llmsession::Block::tool_call(&format!("c{i}_{st}"), "read", "{}"));
                    }
                    a.record_response(llmsession::Message::new(llmsession::Role::Assistant, content), None).unwrap();
                    if every {
                        say(format!("DURABLE seq {}", s.len() - 1));
                    }
                    if !last {
                        a.record_tool_result(llmsession::agent::ToolResultInput {
                            call_id: format!("c{i}_{st}"),
                            content: vec![llmsession::Block::text("ok")],
                            is_error: false,
                        })
                        .unwrap();
                    }
                }
                a.end_turn(llmsession::log::TurnEndReason::Completed).unwrap();
                say(format!("DURABLE turn {t}"));
            }
        }
        // stop|url|id: append host events until refused, saying each acknowledged seq; a refusal
        // ends the child, saying its kind.
        "stop" => {
            let (s, _) = Session::open_url(url, writer(id)).expect("the writer opens the session");
            say("OPENED".into());
            for i in 0..u64::MAX {
                match s.append(host(&format!("A {i}"))) {
                    Ok(seq) => say(format!("ACK {seq}")),
                    Err(e) => {
                        say(format!("REFUSED {} {}", e.kind().name(), e.message()));
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn child(spec: String) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["pg_child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child starts")
}

fn lines_of(c: &mut std::process::Child) -> std::thread::JoinHandle<Vec<String>> {
    let out = c.stdout.take().unwrap();
    std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect())
}

#[test]
fn two_processes_race_for_one_session() {
    let url = pg_url!("two_processes_race_for_one_session");
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = SERVER.read();
    let rounds: usize = std::env::var("LLMSESSION_PG_RACE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let id = unique_id("race");
    let mut expected_turns = 0;
    let mut locked_first = 0;
    for round in 0..rounds {
        let start = llmsession::session::now_ms() + 1000;
        let mut kids: Vec<_> = ["A", "B"].iter().map(|t| child(format!("race|{url}|{id}|{start}|r{round}{t}"))).collect();
        let readers: Vec<_> = kids.iter_mut().map(lines_of).collect();
        for k in &mut kids {
            let status = k.wait().unwrap();
            if !status.success() {
                let mut err = String::new();
                std::io::Read::read_to_string(k.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("a racer failed: {err}");
            }
        }
        let outs: Vec<Vec<String>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        // Exactly one opened at once; the other was LOCKED, then wrote after the first was done.
        let locked: Vec<bool> = outs.iter().map(|o| o.iter().any(|l| l.starts_with("LOCKED"))).collect();
        assert_eq!(locked.iter().filter(|l| **l).count(), 1, "round {round}: {outs:?}");
        assert!(outs.iter().flatten().any(|l| l.starts_with("LOCKED") && l.contains("in use")));
        locked_first += 1;
        let turns: usize = outs.iter().map(|o| o.iter().filter(|l| l.starts_with("TURN")).count()).sum();
        assert_eq!(turns, 6, "round {round}: {outs:?}");
        expected_turns += turns;
        // The log: every reported turn, each writer's turns in one block (never interleaved).
        let (s, _) = Session::open_url(&url, reader(&id)).unwrap();
        assert_eq!(completed_turns(&s).len(), expected_turns);
        let texts = pg::turn_texts(&s);
        let last: Vec<&String> = texts.iter().rev().take(6).collect();
        let tags: Vec<&str> = last.iter().rev().map(|t| t.split(' ').next().unwrap()).collect();
        assert!(
            tags[..3].iter().all(|t| *t == tags[0]) && tags[3..].iter().all(|t| *t == tags[3]) && tags[0] != tags[3],
            "interleaved: {tags:?}"
        );
        s.verify().unwrap();
    }
    eprintln!("race: {rounds} rounds, two processes each: {locked_first} refusals with LOCKED (one per round), {expected_turns} turns, none lost, never interleaved");
}

#[test]
fn sigkilled_writers_lose_nothing_completed() {
    let url = pg_url!("sigkilled_writers_lose_nothing_completed");
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = SERVER.read();
    let trials: usize = std::env::var("LLMSESSION_PG_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut id = String::new();
    let (mut repaired, mut at_rest, mut durable_turns, mut refusals, mut opened) = (0, 0, 0, 0u32, 0);
    let started = Instant::now();
    for i in 0..trials {
        if i % 5 == 0 {
            id = unique_id("kill");
        }
        let dur = if (i / 5) % 2 == 0 { "turn-end" } else { "every-event" };
        let mut c = child(format!("kill|{url}|{id}|{dur}"));
        let out = c.stdout.take().unwrap();
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let (mut turns, mut max_seq, mut opened) = (Vec::new(), None::<u64>, false);
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let p: Vec<&str> = line.split_whitespace().collect();
                match p.as_slice() {
                    ["OPENED"] => {
                        opened = true;
                        let _ = opened_tx.send(());
                    }
                    ["DURABLE", "turn", n] => turns.push(n.parse::<u64>().unwrap()),
                    ["DURABLE", "seq", n] => max_seq = Some(max_seq.unwrap_or(0).max(n.parse().unwrap())),
                    _ => {}
                }
            }
            (turns, max_seq, opened)
        });
        // Most kills land while the writer runs turns; one in eight anywhere from its start on
        // (while it connects, loads or repairs the last writer's open turn).
        if i % 8 != 7 {
            let _ = opened_rx.recv_timeout(Duration::from_secs(30));
        }
        std::thread::sleep(Duration::from_millis(rnd(if i % 8 == 7 { 300 } else { 120 })));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        let (turns, max_seq, was_open) = reader.join().unwrap();
        opened += usize::from(was_open);
        durable_turns += turns.len();
        let (r, refused) = open_writer_waiting(&url, writer(&id));
        refusals += refused;
        let (s, report) = r.unwrap_or_else(|e| panic!("trial {i}: the next writer cannot open: {}", e.message()));
        if report.repaired_events > 0 {
            repaired += 1;
        } else {
            at_rest += 1;
        }
        let done = completed_turns(&s);
        for t in &turns {
            assert!(done.contains(t), "trial {i} ({dur}): turn {t} was durable but is missing");
        }
        if let Some(m) = max_seq {
            assert!(s.len() as u64 > m, "trial {i}: event {m} was durable but the log has {} events", s.len());
        }
        assert_eq!(report.cut_records, 0, "trial {i}: nothing is torn in a database");
        s.verify().unwrap_or_else(|e| panic!("trial {i}: verify: {}", e.message()));
        assert!(s.with_log(|l| l.state().at_rest()), "trial {i}: the open turn was not closed");
    }
    eprintln!(
        "sigkill: {trials} kills in {:.1} s ({opened} after the writer had opened), {repaired} open turns repaired, {at_rest} at rest, {durable_turns} turns reported durable, none lost; the next writer was refused with LOCKED {refusals} times while the server noticed the kill",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// The server goes away.

fn server_ctl(what: &str) {
    let ctl = std::env::var("LLMSESSION_PG_CTL").unwrap();
    let dir = std::env::var("LLMSESSION_PG_DIR").unwrap();
    let out = Command::new("bash").args([ctl.as_str(), what, dir.as_str()]).output().unwrap();
    assert!(out.status.success(), "server {what}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_server_stopped_mid_session_then_restarted() {
    let url = pg_url!("the_server_stopped_mid_session_then_restarted");
    if std::env::var("LLMSESSION_PG_CTL").is_err() || std::env::var("LLMSESSION_PG_DIR").is_err() {
        eprintln!("*** SKIPPED the_server_stopped_mid_session_then_restarted: LLMSESSION_PG_CTL / LLMSESSION_PG_DIR are not set (make test-pg sets them) ***");
        return;
    }
    let _g = SERVER.write();
    for (mode, durability) in [("stop", "turn-end"), ("crash", "every-event")] {
        let id = unique_id("restart");
        let durability = llmsession::Durability::parse(durability).unwrap();
        let (s, _) = Session::open_url(&url, UrlOptions { durability, ..writer(&id) }).unwrap();
        let mut a = agent(&s);
        turn(&mut a, "before", 2).unwrap();
        // A thread appends as fast as it can; the server goes away under it.
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer_thread = {
            let (s, acked) = (s.clone(), acked.clone());
            std::thread::spawn(move || loop {
                match s.append(host("while the server goes away")) {
                    Ok(seq) => acked.store(seq + 1, std::sync::atomic::Ordering::SeqCst),
                    Err(e) => return e,
                }
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        server_ctl(mode);
        // Whatever happens below, the server comes back for the other tests.
        let restart = scopeguard(|| {
            if std::thread::panicking() {
                server_ctl("start");
            }
        });
        let e = writer_thread.join().unwrap();
        eprintln!("server {mode} mid-append: the append failed with: [{}] {}", e.kind().name(), e.message());
        assert_eq!(e.kind(), ErrorKind::Storage, "{mode}: {}", e.message());
        let acked = acked.load(std::sync::atomic::Ordering::SeqCst);
        assert!(acked > 0);
        // Either the append was sent and its outcome is unknown (the handle then writes nothing
        // more), or it never reached a server (no connection could be made: the handle stays
        // usable and goes on once the server is back).
        let unknown = e.detail().get("outcomeUnknown").is_some();
        if unknown {
            assert!(e.message().contains("reopen"), "{mode}: {}", e.message());
            let e = s.append(host("refused")).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Storage);
            assert!(e.message().contains("reopen the session"), "{mode}: {}", e.message());
        } else {
            assert!(e.message().contains("cannot connect") || e.detail().get("bound").is_some(), "{mode}: {}", e.message());
        }
        let e = Session::open_url(&url, writer(&format!("{id}-other"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
        assert!(e.message().contains("cannot connect"), "{}", e.message());
        server_ctl("start");
        drop(restart);
        if unknown {
            assert!(a.start_turn(llmsession::Message::user_text("refused")).is_err());
            assert!(s.append(host("still refused")).unwrap_err().message().contains("reopen the session"));
        } else {
            let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
            assert_eq!(r.len(), s.len(), "{mode}: the usable handle agrees with the database");
            s.append(host("the same handle, after the restart")).unwrap();
        }
        drop(a);
        drop(s);
        // Reopened: everything acknowledged is there (with every-event, it survived a crash of the
        // server too), and the session continues.
        let (s, _) = open_writer_waiting(&url, writer(&id)).0.unwrap();
        assert!(s.len() as u64 >= acked, "{mode}: {} events after the restart, {acked} were acknowledged", s.len());
        // The completed turn is read from the whole log: past 1,000 appended events the writer
        // opens from a checkpoint, whose window no longer holds turn 1.
        let whole = UrlOptions { check: llmsession::log::load::OpenCheck::Full, ..reader(&id) };
        assert_eq!(completed_turns(&Session::open_url(&url, whole).unwrap().0), vec![1], "{mode}");
        let mut a = agent(&s);
        turn(&mut a, "after", 1).unwrap();
        s.verify().unwrap();
        eprintln!(
            "server {mode} mid-append ({}): {acked} events acknowledged, {} stored after the restart and one more turn",
            durability.as_str(),
            s.len()
        );
    }
}

/// A write that could not reach any server (the server was down when the call asked for a
/// connection) sent nothing: the handle stays usable and goes on once the server is back.
#[test]
fn a_write_that_found_no_server_leaves_the_handle_usable() {
    let url = pg_url!("a_write_that_found_no_server_leaves_the_handle_usable");
    if std::env::var("LLMSESSION_PG_CTL").is_err() || std::env::var("LLMSESSION_PG_DIR").is_err() {
        eprintln!(
            "*** SKIPPED a_write_that_found_no_server_leaves_the_handle_usable: LLMSESSION_PG_CTL / LLMSESSION_PG_DIR are not set ***"
        );
        return;
    }
    let _g = SERVER.write();
    let url = with_params(&url, "connect_timeout=2");
    let id = unique_id("noserver");
    let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&s);
    turn(&mut a, "before", 1).unwrap();
    server_ctl("stop");
    let restart = scopeguard(|| {
        if std::thread::panicking() {
            server_ctl("start");
        }
    });
    // The pooled connection was closed by the shutdown; let the client see it.
    std::thread::sleep(Duration::from_millis(300));
    let before = s.records().unwrap();
    let e = s.append(host("no server")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
    assert!(e.message().contains("cannot connect"), "{}", e.message());
    assert!(e.detail().get("outcomeUnknown").is_none(), "nothing was sent: {}", e.message());
    assert_eq!(s.records().unwrap(), before, "nothing changed in memory");
    server_ctl("start");
    drop(restart);
    s.append(host("after the restart")).unwrap();
    turn(&mut a, "after", 1).unwrap();
    s.verify().unwrap();
    let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(r.records().unwrap(), s.records().unwrap());
}

// ---------------------------------------------------------------------------------------------
// A sync that fails: the batch is taken back (undo), nothing half-applied stays.

#[test]
fn a_failed_sync_takes_the_batch_back() {
    let url = pg_url!("a_failed_sync_takes_the_batch_back");
    let _g = SERVER.read();
    // A role that may append but not record a sync point (a column privilege it lacks).
    let mut c = sql(&url);
    drop(Session::open_url(&url, writer(&unique_id("schema"))).unwrap()); // the tables exist
    let role = format!("llmsession_limited_{}", std::process::id());
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role};
         CREATE ROLE {role} LOGIN PASSWORD 'limited';
         GRANT SELECT, INSERT, DELETE ON llmsession_records TO {role};
         GRANT SELECT, INSERT ON llmsession_quarantine, llmsession_sessions TO {role};
         GRANT UPDATE (header, created_ms, parent_id, parent_seed, events, chain_head, updated_at,
                       lease_holder, lease_epoch, lease_expires, lease_live) ON llmsession_sessions TO {role};
         GRANT SELECT ON llmsession_meta TO {role};
         GRANT USAGE ON SEQUENCE llmsession_lock_keys TO {role};"
    ))
    .unwrap();
    let cfg: postgres::Config = url.parse().unwrap();
    let limited = format!("postgres://{role}:limited@127.0.0.1:{}/{}", cfg.get_ports()[0], cfg.get_dbname().unwrap());
    let id = unique_id("undo");
    // Created by the full role (the creation syncs), then written by the limited one.
    drop(Session::open_url(&url, writer(&id)).unwrap());
    let (s, _) = Session::open_url(&limited, writer(&id)).unwrap();
    s.append(NewEvent::new("turn/start", json!({ "turn": 1 }))).unwrap();
    let before = s.records().unwrap();
    // turn/end is a sync point under turn-end durability: the sync fails, the batch is undone.
    let e = s.append(NewEvent::new("turn/end", json!({"turn": 1, "reason": "completed"}))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
    assert!(e.message().contains("permission denied"), "{}", e.message());
    assert_eq!(e.detail()["sqlstate"], "42501");
    assert_eq!(s.records().unwrap(), before, "the refused batch is not in memory");
    let (events, stored): (i64, i64) = c
        .query_one("SELECT s.events, (SELECT count(*) FROM llmsession_records r WHERE r.session_id = s.id) FROM llmsession_sessions s WHERE s.id = $1", &[&id])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((events as usize, stored as usize), (before.len() - 1, before.len() - 1), "the batch was taken back from the database");
    // The handle still works for appends that need no sync point.
    s.append(host("after the failed sync")).unwrap();
    drop(s);
    let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(r.len(), before.len());
    r.verify().unwrap();
    drop(r);
    c.batch_execute(&format!(
        "REVOKE ALL ON llmsession_records, llmsession_quarantine, llmsession_sessions, llmsession_meta FROM {role};
         REVOKE ALL ON SEQUENCE llmsession_lock_keys FROM {role}; DROP ROLE {role};"
    ))
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// The fleet rules: a fenced lease, every call bounded, TLS, a transaction-mode pooler, the pool.

/// The seq and text of every event [`host`] appended.
fn host_texts(s: &Session) -> Vec<(u64, String)> {
    let n = s.len() as u64;
    s.with_log(|l| {
        (0..n)
            .filter_map(|seq| l.event(seq))
            .filter_map(|e| e.data["message"]["content"][0]["text"].as_str().map(|t| (e.seq, t.to_string())))
            .collect()
    })
}

fn with_params(url: &str, params: &str) -> String {
    format!("{url}{}{params}", if url.contains('?') { "&" } else { "?" })
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A writer SIGSTOPped past its lease: another writer takes the session over, and when the
/// stopped one wakes up its next append is refused; none of its appends lands after the new
/// holder's first. Many trials, zero interleavings.
#[test]
fn a_stopped_writer_past_its_lease_never_appends_after_the_new_holder() {
    let url = pg_url!("a_stopped_writer_past_its_lease_never_appends_after_the_new_holder");
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = SERVER.read();
    let trials: usize = std::env::var("LLMSESSION_PG_STOP_TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    // A one-second lease, renewed every third of it; the stopped process keeps its liveness
    // connection (and lock), so only the lease's expiry frees the session.
    let url = with_params(&url, "lease_time=1");
    let (mut refused_locked, mut refused_other, mut a_acks) = (0, 0, 0usize);
    for trial in 0..trials {
        let id = unique_id("stopped");
        let mut a = child(format!("stop|{url}|{id}"));
        let out = a.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pipe = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // Let A write a little, then stop it at a random point.
        let mut acked = 0;
        while acked < 3 + trial % 7 {
            let line = rx.recv_timeout(Duration::from_secs(30)).expect("the writer appends");
            if line.starts_with("ACK") {
                acked += 1;
            }
        }
        signal(a.id(), "STOP");
        // B waits out the lease and takes the session over.
        let (r, _) = open_writer_waiting(&url, writer(&id));
        let (b, _) = r.unwrap_or_else(|e| panic!("trial {trial}: the new writer cannot take the session over: {}", e.message()));
        let first_b = b.append(host("B first")).unwrap();
        b.append(host("B second")).unwrap();
        signal(a.id(), "CONT");
        let status = a.wait().unwrap();
        assert!(status.success(), "trial {trial}: the stopped writer failed");
        pipe.join().unwrap();
        let lines: Vec<String> = rx.try_iter().collect();
        let refusal = lines.iter().find(|l| l.starts_with("REFUSED")).unwrap_or_else(|| panic!("trial {trial}: {lines:?}"));
        if refusal.starts_with("REFUSED locked") {
            refused_locked += 1;
        } else {
            refused_other += 1;
        }
        assert!(
            refusal.starts_with("REFUSED locked") || refusal.starts_with("REFUSED conflict"),
            "trial {trial}: the old writer was refused with {refusal}"
        );
        // The log: every event A wrote comes before B's first.
        b.append(host("B third")).unwrap();
        let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
        r.verify().unwrap();
        let texts = host_texts(&r);
        let last_a = texts.iter().filter(|(_, t)| t.starts_with("A ")).map(|(s, _)| *s).max();
        a_acks += texts.iter().filter(|(_, t)| t.starts_with("A ")).count();
        if let Some(last_a) = last_a {
            assert!(last_a < first_b, "trial {trial}: the stopped writer's event {last_a} landed after the new holder's first ({first_b})");
        }
    }
    eprintln!(
        "sigstop: {trials} trials, the stopped writer refused with LOCKED {refused_locked} times and CONFLICT {refused_other} times after waking, {a_acks} of its events kept, zero appends after the new holder's first"
    );
}

/// The lease taken over while the writer runs: its next append is LOCKED (naming the new fencing
/// token), and so is every later write; nothing it tried is in the log; dropping it does not give
/// the new holder's lease away.
#[test]
fn a_lost_lease_is_locked_and_the_handle_writes_nothing_more() {
    let url = pg_url!("a_lost_lease_is_locked_and_the_handle_writes_nothing_more");
    let _g = SERVER.read();
    let id = unique_id("lost");
    let (a, _) = Session::open_url(&url, writer(&id)).unwrap();
    a.append(host("A first")).unwrap();
    // Another process's view: the lease looks expired (as after a pause past lease_time).
    sql(&url)
        .execute("UPDATE llmsession_sessions SET lease_expires = now() - interval '1 second', lease_live = NULL WHERE id = $1", &[&id])
        .unwrap();
    // A writer of another pool (another URL) takes it over.
    let other = with_params(&url, "pool_size=3");
    let (b, _) = Session::open_url(&other, writer(&id)).unwrap();
    b.append(host("B first")).unwrap();
    let e = a.append(host("A refused")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
    assert!(e.message().contains("lost the session's writer lease"), "{}", e.message());
    let (mine, now) = (e.detail()["epoch"].as_i64().unwrap(), e.detail()["currentEpoch"].as_i64().unwrap());
    assert!(now > mine, "the new holder's fencing token {now} is above the old {mine}");
    let e = a.append(host("A refused again")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
    drop(a);
    // B still holds the session, and the log has nothing of what A tried.
    b.append(host("B second")).unwrap();
    assert!(list_sessions(&url, None, None, None).unwrap().iter().any(|s| s.id == id && s.in_use));
    drop(b);
    let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
    let texts: Vec<String> = host_texts(&r).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["A first", "B first", "B second"]);
    r.verify().unwrap();
    // Closed cleanly, the lease is free at once.
    assert!(!list_sessions(&url, None, None, None).unwrap().iter().any(|s| s.id == id && s.in_use));
    let (c, _) = Session::open_url(&other, writer(&id)).unwrap();
    c.append(host("C first")).unwrap();
}

/// The renewer finds the lease taken over before any write does: the next write is LOCKED as a
/// refused write is, naming the new fencing token and holder (`currentEpoch`, `holder`), and so
/// is every later one.
#[test]
fn a_lease_the_renewer_found_lost_is_locked_naming_the_new_holder() {
    let url = pg_url!("a_lease_the_renewer_found_lost_is_locked_naming_the_new_holder");
    let _g = SERVER.read();
    let id = unique_id("renewer-lost");
    // A short lease: the renewer runs every third of a second.
    let base = url;
    let url = with_params(&base, "lease_time=1");
    let (a, _) = Session::open_url(&url, writer(&id)).unwrap();
    a.append(host("A first")).unwrap();
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(false));
    {
        let (seen, id) = (seen.clone(), id.clone());
        llmsession::observe::set_observer(
            Some(std::sync::Arc::new(move |o: &llmsession::observe::Observation| {
                if o.kind == "store-lease-lost" && o.session_id.as_deref() == Some(id.as_str()) {
                    *seen.lock() = true;
                }
            })),
            llmsession::observe::Level::Warn,
        );
    }
    let _clear = Guard(|| llmsession::observe::set_observer(None, llmsession::observe::Level::Warn));
    // Another writer takes the session over, as one whose take came after a pause of this one
    // (the lease's data changes hands: a new fencing token, a new holder).
    let intruder = "llmsession pid 4242 on elsewhere";
    sql(&base)
        .execute(
            "UPDATE llmsession_sessions SET lease_epoch = lease_epoch + 1, lease_holder = $2, lease_live = NULL, \
             lease_expires = now() + interval '1 hour' WHERE id = $1",
            &[&id, &intruder],
        )
        .unwrap();
    let t = Instant::now();
    while !*seen.lock() {
        assert!(t.elapsed() < Duration::from_secs(20), "the renewer never reported the lost lease");
        std::thread::sleep(Duration::from_millis(50));
    }
    for text in ["A refused", "A refused again"] {
        let e = a.append(host(text)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
        assert!(e.message().contains("lost the session's writer lease"), "{}", e.message());
        let (mine, now) = (e.detail()["epoch"].as_i64().unwrap(), e.detail()["currentEpoch"].as_i64().unwrap());
        assert_eq!(now, mine + 1, "the new holder's fencing token: {}", e.message());
        assert_eq!(e.detail()["holder"], intruder, "{}", e.message());
        assert!(e.message().contains(&format!("held by {intruder}")), "{}", e.message());
    }
    assert_eq!(a.len(), 1, "nothing of what was refused is in memory");
}

/// A write whose outcome is unknown (it waited on a row lock past `query_timeout`): every later
/// call on the handle says the same thing the same way, `LLS_ERR_STORAGE` with
/// `outcomeUnknown` and the bound that ran out; the reopen reads what the database holds.
#[test]
fn after_an_unknown_outcome_every_call_says_so_the_same_way() {
    let url = pg_url!("after_an_unknown_outcome_every_call_says_so_the_same_way");
    let _g = SERVER.read();
    let id = unique_id("unknown");
    let base = url;
    let url = with_params(&base, "query_timeout=1");
    let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
    s.append(host("before")).unwrap();
    // Another connection holds the session's row: the append waits on it past its bound.
    let mut other = sql(&base);
    let mut tx = other.transaction().unwrap();
    tx.execute("SELECT 1 FROM llmsession_sessions WHERE id = $1 FOR UPDATE", &[&id]).unwrap();
    let first = s.append(host("blocked")).unwrap_err();
    assert_eq!(first.kind(), ErrorKind::Storage, "{}", first.message());
    assert_eq!(first.detail()["outcomeUnknown"], true, "{}", first.message());
    assert_eq!(first.detail()["bound"], "query_timeout", "{}", first.message());
    // The store asked the server to cancel the statement; give that a moment before the row
    // is free again.
    std::thread::sleep(Duration::from_millis(500));
    tx.rollback().unwrap();
    let mut said = Vec::new();
    for text in ["later", "later again"] {
        let e = s.append(host(text)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
        assert_eq!(e.detail()["outcomeUnknown"], true, "{}", e.message());
        assert_eq!(e.detail()["bound"], "query_timeout", "{}", e.message());
        assert!(e.message().contains("cannot append: the outcome of an earlier write is unknown"), "{}", e.message());
        // It names the first failure ("... the server did not answer the statement within
        // query_timeout=1 s").
        let cause = first.message().split(": whether this write").next().unwrap();
        assert!(cause.contains("query_timeout=1 s"), "{cause}");
        assert!(e.message().contains(&format!("({cause})")), "it repeats the first failure: {}", e.message());
        assert!(!e.message().contains("could not be undone"), "{}", e.message());
        said.push(e.message().to_string());
    }
    assert_eq!(said[0], said[1]);
    let e = s.sync().unwrap_err();
    assert_eq!(e.detail()["outcomeUnknown"], true, "{}", e.message());
    assert_eq!(s.len(), 1, "memory holds what was acknowledged");
    drop(s);
    let (r, _) = open_writer_waiting(&url, writer(&id));
    let (s, _) = r.unwrap();
    // Whatever the database holds (the blocked append cancelled, or committed after all) is
    // what the reopen reads, and the handle writes again.
    assert!(matches!(s.len(), 1 | 2), "{} events", s.len());
    s.append(host("after")).unwrap();
    s.verify().unwrap();
}

/// A dead writer's session is taken over at once with fast_takeover, and after the lease time
/// without it (through a pooler, for instance).
#[test]
fn a_dead_writers_session_is_taken_over_within_the_lease() {
    let url = pg_url!("a_dead_writers_session_is_taken_over_within_the_lease");
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = SERVER.read();
    for (params, at_most) in [("lease_time=30", Duration::from_secs(10)), ("lease_time=2&pooler=transaction", Duration::from_secs(12))] {
        let url = with_params(&url, params);
        let id = unique_id("dead");
        let mut a = child(format!("stop|{url}|{id}"));
        let out = a.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        while !lines.next().unwrap().unwrap().starts_with("ACK") {}
        a.kill().unwrap();
        a.wait().unwrap();
        let t = Instant::now();
        let (r, refused) = open_writer_waiting(&url, writer(&id));
        let (b, _) = r.unwrap_or_else(|e| panic!("{params}: {}", e.message()));
        b.append(host("B")).unwrap();
        let took = t.elapsed();
        eprintln!("takeover of a SIGKILLed writer's session ({params}): {:.2} s, {refused} refusals", took.as_secs_f64());
        assert!(took < at_most, "{params}: the takeover took {took:?}");
        if params.contains("pooler=transaction") {
            assert!(refused > 0, "without fast_takeover the lease is waited out");
        }
    }
}

/// A server that accepts the connection and never answers: the open fails within the connect
/// bound, naming it; nothing is left behind.
#[test]
fn a_mute_server_fails_an_open_within_the_connect_bound() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for c in listener.incoming().map_while(Result::ok) {
                held.lock().push(c); // accepted, never answered
            }
        });
    }
    for (url, bound) in [
        (format!("postgres://u:pw@127.0.0.1:{port}/db?connect_timeout=1&sslmode=disable"), "connect_timeout"),
        (format!("postgres://u:pw@127.0.0.1:{port}/db?connect_timeout=1&sslmode=require"), "connect_timeout"),
    ] {
        for opts in [writer("mute"), reader("mute")] {
            let t = Instant::now();
            let e = Session::open_url(&url, opts).unwrap_err();
            let took = t.elapsed();
            assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
            assert_eq!(e.detail()["bound"], bound, "{}", e.message());
            assert!(e.message().contains("connect_timeout=1 s"), "{}", e.message());
            assert!(!e.message().contains("pw@"), "{}", e.message());
            // A bound, not a benchmark: generous against a loaded machine, far below "forever".
            assert!(took < Duration::from_secs(15), "the open took {took:?}");
        }
    }
    // Two hosts, the first mute: the second is tried after the first's bound, as libpq does.
    if let Some(good) = std::env::var("LLMSESSION_PG_URL").ok().filter(|u| !u.is_empty()) {
        let cfg: postgres::Config = good.parse().unwrap();
        let pw = String::from_utf8(cfg.get_password().unwrap().to_vec()).unwrap();
        let two = format!(
            "postgres://{}:{pw}@127.0.0.1:{port},127.0.0.1:{}/{}?connect_timeout=1",
            cfg.get_user().unwrap(),
            cfg.get_ports()[0],
            cfg.get_dbname().unwrap()
        );
        let (s, _) = Session::open_url(&two, writer(&unique_id("second-host"))).unwrap();
        s.append(host("through the second host")).unwrap();
    }
}

/// A frozen server (every process SIGSTOPped): a write fails within the statement bound with its
/// outcome unknown, the handle then writes nothing more, a new open fails within the connect
/// bound; thawed, a reopen reads what the database holds.
#[test]
fn a_frozen_server_fails_each_call_within_its_bound() {
    let url = pg_url!("a_frozen_server_fails_each_call_within_its_bound");
    if std::env::var("LLMSESSION_PG_CTL").is_err() || std::env::var("LLMSESSION_PG_DIR").is_err() {
        eprintln!("*** SKIPPED a_frozen_server_fails_each_call_within_its_bound: LLMSESSION_PG_CTL / LLMSESSION_PG_DIR are not set ***");
        return;
    }
    let _g = SERVER.write();
    let url = with_params(&url, "query_timeout=1&connect_timeout=1&pool_timeout=1&lease_timeout=1");
    let id = unique_id("frozen");
    let (s, _) = Session::open_url(&url, writer(&id)).unwrap();
    s.append(host("before")).unwrap();
    server_ctl("freeze");
    let thaw = scopeguard(|| server_ctl("thaw"));
    let t = Instant::now();
    let e = s.append(host("while frozen")).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(15), "the append took {:?}", t.elapsed());
    assert_eq!(e.kind(), ErrorKind::Storage, "{}", e.message());
    assert_eq!(e.detail()["bound"], "query_timeout", "{}", e.message());
    assert_eq!(e.detail()["outcomeUnknown"], true, "{}", e.message());
    let e = s.append(host("refused")).unwrap_err();
    assert!(e.message().contains("reopen the session"), "{}", e.message());
    let t = Instant::now();
    let e = Session::open_url(&with_params(&url, "pool_size=2"), reader(&id)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(15), "the open took {:?}", t.elapsed());
    assert_eq!(e.detail()["bound"], "connect_timeout", "{}", e.message());
    drop(thaw);
    drop(s);
    let (r, _) = open_writer_waiting(&url, writer(&id));
    let (s, _) = r.unwrap();
    assert!(s.len() == 1 || s.len() == 2, "{} events", s.len());
    s.append(host("after")).unwrap();
    s.verify().unwrap();
}

struct Guard<F: FnMut()>(F);
impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}
fn scopeguard<F: FnMut()>(f: F) -> Guard<F> {
    Guard(f)
}

/// Many sessions open at once over a small pool: the server sees at most the pool (plus the
/// liveness connection), and every session writes.
#[test]
fn many_open_sessions_share_a_small_pool() {
    let url = pg_url!("many_open_sessions_share_a_small_pool");
    let _g = SERVER.read();
    let app = format!("llmsession pool test {}", std::process::id());
    let url = with_params(&url, &format!("pool_size=3&application_name={}", app.replace(' ', "%20")));
    let sessions: Vec<Session> = (0..60).map(|_| Session::open_url(&url, writer(&unique_id("pooled"))).unwrap().0).collect();
    std::thread::scope(|sc| {
        for chunk in sessions.chunks(10) {
            sc.spawn(move || {
                for s in chunk {
                    for i in 0..3 {
                        s.append(host(&format!("event {i}"))).unwrap();
                    }
                }
            });
        }
    });
    let n: i64 = sql(&pg::url("pool").unwrap())
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&app])
        .unwrap()
        .get(0);
    assert!(n <= 4, "{n} server connections for 60 open sessions over pool_size=3");
    for s in &sessions {
        assert_eq!(s.len(), 3);
    }
    eprintln!("pool: 60 sessions open, {n} server connections (pool_size=3 and the liveness connection)");
}

/// TLS with libpq's sslmode meanings, against the test server's throwaway CA.
#[test]
fn tls_follows_sslmode() {
    let url = pg_url!("tls_follows_sslmode");
    let (Ok(ca), Ok(other_ca)) = (std::env::var("LLMSESSION_PG_CA"), std::env::var("LLMSESSION_PG_OTHER_CA")) else {
        eprintln!("*** SKIPPED tls_follows_sslmode: LLMSESSION_PG_CA / LLMSESSION_PG_OTHER_CA are not set (make test-pg sets them) ***");
        return;
    };
    let _g = SERVER.read();
    let ok = |u: &str| {
        let (s, _) = Session::open_url(u, writer(&unique_id("tls"))).unwrap_or_else(|e| panic!("{u}: {}", e.message()));
        s.append(host("over TLS")).unwrap();
    };
    let fails = |u: &str, says: &str| {
        let e = Session::open_url(u, writer(&unique_id("tls"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Storage, "{u}: {}", e.message());
        assert!(e.message().contains(says), "{u}: {}", e.message());
    };
    ok(&with_params(&url, &format!("sslmode=verify-full&sslrootcert={ca}")));
    ok(&with_params(&url, &format!("sslmode=verify-ca&sslrootcert={ca}")));
    ok(&with_params(&url, "sslmode=require"));
    ok(&with_params(&url, "sslmode=disable"));
    fails(&with_params(&url, &format!("sslmode=verify-full&sslrootcert={other_ca}")), "not signed by a CA in sslrootcert");
    fails(&with_params(&url, &format!("sslmode=verify-ca&sslrootcert={other_ca}")), "not signed by a CA in sslrootcert");
    // The certificate names localhost and 127.0.0.1; connect to the address under another name.
    let cfg: postgres::Config = url.parse().unwrap();
    let pw = String::from_utf8(cfg.get_password().unwrap().to_vec()).unwrap();
    let renamed = format!(
        "postgres://{}:{pw}@not-the-server.invalid:{}/{}?hostaddr=127.0.0.1",
        cfg.get_user().unwrap(),
        cfg.get_ports()[0],
        cfg.get_dbname().unwrap()
    );
    fails(&with_params(&renamed, &format!("sslmode=verify-full&sslrootcert={ca}")), "does not name the host");
    ok(&with_params(&renamed, &format!("sslmode=verify-ca&sslrootcert={ca}")));
    let e = Session::open_url(&with_params(&url, &format!("sslmode=verify-full&sslrootcert={ca}.missing")), writer("x")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", e.message());
    // A client certificate instead of a password.
    if let (Ok(cert), Ok(key)) = (std::env::var("LLMSESSION_PG_CLIENT_CERT"), std::env::var("LLMSESSION_PG_CLIENT_KEY")) {
        let by_cert = format!(
            "postgres://llmsession_cert@127.0.0.1:{}/{}?sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}",
            cfg.get_ports()[0],
            cfg.get_dbname().unwrap()
        );
        ok(&by_cert);
    }
}

/// Through PgBouncer in transaction mode: writers, the lease, conflicts and readers work as on a
/// direct connection.
#[test]
fn through_a_transaction_mode_pooler() {
    let Some(url) = std::env::var("LLMSESSION_PGBOUNCER_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("*** SKIPPED through_a_transaction_mode_pooler: LLMSESSION_PGBOUNCER_URL is not set (make test-pg sets it) ***");
        return;
    };
    let _g = SERVER.read();
    let url = with_params(&url, "pooler=transaction&pool_size=4");
    let id = unique_id("bouncer");
    let (w, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&w);
    for i in 0..3 {
        turn(&mut a, &format!("through the pooler {i}"), 2).unwrap();
    }
    let e = Session::open_url(&with_params(&url, "pool_size=2"), writer(&id)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{}", e.message());
    let (r, _) = Session::open_url(&url, reader(&id)).unwrap();
    assert_eq!(r.records().unwrap(), w.records().unwrap());
    r.verify().unwrap();
    // Many sessions at once over the pooler.
    let many: Vec<Session> = (0..30).map(|_| Session::open_url(&url, writer(&unique_id("bouncer-many"))).unwrap().0).collect();
    std::thread::scope(|sc| {
        for chunk in many.chunks(5) {
            sc.spawn(move || {
                for s in chunk {
                    s.append(host("pooled")).unwrap();
                }
            });
        }
    });
    drop(a);
    drop(w);
    let (w2, _) = Session::open_url(&url, writer(&id)).unwrap();
    w2.append(host("after a clean close")).unwrap();
    w2.verify().unwrap();
    drop(w2);
    // A session with checkpoints opens from its last one through the pooler (the window read
    // unnamed and typed in one round trip), to the state a whole load gives.
    use llmsession::log::checkpoint::CheckpointPolicy;
    use llmsession::log::load::OpenCheck;
    let cp = unique_id("bouncer-checkpoints");
    let opts = |check| UrlOptions {
        check,
        checkpoints: CheckpointPolicy { every_events: 10, every_bytes: 0, at_compaction: true },
        ..writer(&cp)
    };
    {
        let (s, _) = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
        let mut a = agent(&s);
        for i in 0..8 {
            turn(&mut a, &format!("checkpointed {i}"), 2).unwrap();
        }
    }
    let (b, _) = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
    assert!(b.with_log(|l| l.base()) > 0, "opened from a checkpoint");
    let bounded = (b.history_json(), b.len(), b.request_header());
    drop(b);
    let (f, _) = Session::open_url(&url, opts(OpenCheck::Full)).unwrap();
    assert_eq!((f.history_json(), f.len(), f.request_header()), bounded);
}

/// The store conformance kit (`llmsession::store::conformance`, docs/storage.md) passes on the
/// PostgreSQL store by URL: every case, each on a session of its own.
#[test]
fn the_store_conformance_kit_passes() {
    let url = pg_url!("the_store_conformance_kit_passes");
    let _g = SERVER.read();
    use llmsession::store::conformance::{run, UrlFactory, CASES};
    let report = run(&mut UrlFactory::new(&url).unwrap(), None).unwrap();
    assert_eq!(report.cases.len(), CASES.len());
    for c in &report.cases {
        assert!(c.passed, "{}: {}", c.case, c.detail);
    }
    // The lease refuses the second writer at open; the quarantine table keeps a cut.
    let two = report.cases.iter().find(|c| c.case == "two-writers").unwrap();
    assert!(two.detail.contains("refused with locked"), "{}", two.detail);
    let cut = report.cases.iter().find(|c| c.case == "cut").unwrap();
    assert!(cut.detail.contains("llmsession_quarantine"), "{}", cut.detail);
    // A URL that names a session is refused: the kit makes one per case.
    let sep = if url.contains('?') { '&' } else { '?' };
    let e = UrlFactory::new(&format!("{url}{sep}session=x")).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

/// An agent that compacts often (a small window), with a summariser that always answers.
fn compacting_agent(s: &Session) -> llmsession::Agent {
    use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
    let mut a = agent(s);
    let mut policy = CompactionPolicy::new(9000);
    policy.threshold = 0.05;
    policy.summary_max_tokens = 1024;
    policy.retained = Retained::Tokens(40);
    a.set_policy(Some(policy)).unwrap();
    a.set_summariser(Some(std::sync::Arc::new(|_r: &SummaryRequest, _c: &llmsession::CancelToken| -> llmsession::Result<SummaryOutput> {
        Ok(SummaryOutput { text: "summary".into(), ..Default::default() })
    })));
    a
}

/// Checkpoints in the database (issue #38): a writing open reads from the last checkpoint (one
/// probe of the checkpoint index) to the state a whole load gives; verify reads the log in
/// pages; an edited checkpoint row is refused by the open.
#[test]
fn checkpoints_open_from_the_last_one_and_verify_streams() {
    use llmsession::log::checkpoint::CheckpointPolicy;
    use llmsession::log::load::OpenCheck;
    let url = pg_url!("checkpoints_open_from_the_last_one_and_verify_streams");
    let _g = SERVER.read();
    let id = unique_id("checkpoints");
    let opts = |check| UrlOptions {
        check,
        checkpoints: CheckpointPolicy { every_events: 20, every_bytes: 0, at_compaction: true },
        ..writer(&id)
    };
    {
        let (s, _) = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
        let mut a = compacting_agent(&s);
        for i in 0..40 {
            turn(&mut a, &format!("question {i} {}", "words ".repeat(i % 7)), 1 + (i as u64) % 3).unwrap();
        }
    }
    let mut c = sql(&url);
    let index: i64 = c.query_one("SELECT count(*) FROM pg_indexes WHERE indexname = 'llmsession_records_checkpoints'", &[]).unwrap().get(0);
    assert_eq!(index, 1, "the checkpoint index exists (schema 4)");
    let state = |s: &Session| {
        let mut st = s.stats();
        st.read_only = false;
        (s.history_json(), serde_json::to_string(&st).unwrap(), s.request_header())
    };
    let (b, _) = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
    assert!(b.with_log(|l| l.base()) > 0, "opened from a checkpoint");
    let bounded = state(&b);
    b.verify().unwrap();
    let records = b.records().unwrap();
    drop(b);
    let (w, _) = Session::open_url(&url, opts(OpenCheck::Full)).unwrap();
    assert_eq!(w.with_log(|l| l.base()), 0);
    assert_eq!(state(&w), bounded);
    assert_eq!(w.records().unwrap(), records);
    drop(w);
    // A read-only verify of the stored session, in pages.
    let (mut store, _) = llmsession::store::url::open_store(&url, &reader(&id)).unwrap();
    let mut reports = 0;
    let r = llmsession::request::verify_store(store.as_mut(), None, &mut |_| reports += 1, None).unwrap();
    assert_eq!(r.events as usize, records.len() - 1);
    assert!(reports >= 1);
    drop(store);
    // The last checkpoint's row edited (its chain not recomputed): the open refuses it.
    let (seq, rec): (i64, String) = c
        .query_one(
            "SELECT seq, record FROM llmsession_records WHERE session_id = $1 AND record LIKE '{\"type\":\"session/checkpoint\",%' ORDER BY seq DESC LIMIT 1",
            &[&id],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    let edited = rec.replacen("\"requests\":", "\"requests\":1", 1);
    c.execute("UPDATE llmsession_records SET record = $3 WHERE session_id = $1 AND seq = $2", &[&id, &seq, &edited]).unwrap();
    let e = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
    assert!(e.message().contains(&format!("line {}", seq + 2)), "{}", e.message());
    c.execute("UPDATE llmsession_records SET record = $3 WHERE session_id = $1 AND seq = $2", &[&id, &seq, &rec]).unwrap();
    Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
    let (events,): (i64,) = c.query_one("SELECT events FROM llmsession_sessions WHERE id = $1", &[&id]).map(|r| (r.get(0),)).unwrap();
    // Rows of the window rewritten in place (their tuples move to the end of the table, so a
    // scan in the table's order meets them after the later ones): the same session.
    c.execute(
        "UPDATE llmsession_records SET record = record WHERE session_id = $1 AND seq BETWEEN $2 AND $3",
        &[&id, &(events - 8), &(events - 5)],
    )
    .unwrap();
    c.batch_execute("ANALYZE llmsession_records").unwrap();
    let (again, _) = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap();
    assert!(again.with_log(|l| l.base()) > 0, "opened from a checkpoint");
    assert_eq!(state(&again), bounded);
    drop(again);
    // A record missing inside the window, and the last one missing: damage, as for a whole load.
    let gone = events - 2;
    let kept: String =
        c.query_one("SELECT record FROM llmsession_records WHERE session_id = $1 AND seq = $2", &[&id, &gone]).unwrap().get(0);
    c.execute("DELETE FROM llmsession_records WHERE session_id = $1 AND seq = $2", &[&id, &gone]).unwrap();
    let e = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
    assert!(e.message().contains("missing"), "{}", e.message());
    c.execute("INSERT INTO llmsession_records (session_id, seq, record) VALUES ($1, $2, $3)", &[&id, &gone, &kept]).unwrap();
    c.execute("DELETE FROM llmsession_records WHERE session_id = $1 AND seq = $2", &[&id, &(events - 1)]).unwrap();
    let e = Session::open_url(&url, opts(OpenCheck::Bounded)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{}", e.message());
    assert!(e.message().contains("removed from the end"), "{}", e.message());
}

/// Agent trees in a database: two children spawned from a session in PostgreSQL are created in
/// the same database (`PARENT.CALLID`, their rows' child link set), listed by parent, finished
/// into the parent's log, read back as a tree from the URL and verified node by node; the
/// children's writers and the parent's run at once (one lease each).
#[test]
fn children_live_in_the_parents_database_and_list_by_parent() {
    use llmsession::agent::SpawnOptions;
    use llmsession::{Block, Message, Role};
    let url = pg_url!("children_live_in_the_parents_database_and_list_by_parent");
    let _g = SERVER.read();
    let id = unique_id("lead");
    let (p, _) = Session::open_url(&url, writer(&id)).unwrap();
    let mut a = agent(&p);
    let c = llmsession::CancelToken::new();
    a.start_turn(Message::user_text("two tasks")).unwrap();
    a.next_request(&c).unwrap();
    let calls = vec![Block::tool_call("t1", "task", "{}"), Block::tool_call("t2", "task", "{}")];
    a.record_response(Message::new(Role::Assistant, calls), None).unwrap();
    let mut kids: Vec<_> =
        ["t1", "t2"].iter().map(|t| a.spawn(SpawnOptions::new(Some(t), Message::user_text(format!("do {t}"))), None).unwrap()).collect();
    for (i, k) in kids.iter_mut().enumerate().rev() {
        assert_eq!(k.session().id(), format!("{id}.t{}", i + 1));
        k.next_request(&c).unwrap();
        k.record_response(Message::new(Role::Assistant, vec![Block::text(format!("done {i}"))]), None).unwrap();
        k.conclude(None).unwrap();
        a.finish_child(k.session()).unwrap();
    }
    a.next_request(&c).unwrap();
    let listed = list_sessions(&url, None, None, Some(&id)).unwrap();
    let got: Vec<(String, bool, Option<String>)> =
        listed.iter().map(|s| (s.id.clone(), s.parent.as_ref().unwrap().spawned, s.parent.as_ref().unwrap().call_id.clone())).collect();
    assert_eq!(got, vec![(format!("{id}.t1"), true, Some("t1".into())), (format!("{id}.t2"), true, Some("t2".into()))]);
    let mut db = sql(&url);
    let row =
        db.query_one("SELECT parent_id, parent_call, spawned FROM llmsession_sessions WHERE id = $1", &[&format!("{id}.t1")]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, String>(1), row.get::<_, bool>(2)), (id.clone(), "t1".to_string(), true));
    drop(kids);
    drop(a);
    let sep = if url.contains('?') { '&' } else { '?' };
    let tree = llmsession::tree::Tree::load(&format!("{url}{sep}session={id}")).unwrap();
    assert_eq!(tree.nodes.len(), 3);
    tree.verify().unwrap();
}

/// A version-2 database (the tables of the previous release, without the child link) is
/// migrated to the current version by the first writing open: its sessions stay as they were
/// (a fork stays a fork), and children can be listed by parent.
#[test]
fn a_version_2_database_is_migrated_to_version_3() {
    let url = pg_url!("a_version_2_database_is_migrated_to_version_3");
    let _g = SERVER.read();
    let cfg: postgres::Config = url.parse().unwrap();
    let password = String::from_utf8(cfg.get_password().unwrap().to_vec()).unwrap();
    let (user, port) = (cfg.get_user().unwrap().to_string(), cfg.get_ports()[0]);
    let mut c = sql(&url);
    let db = format!("llmsession_v2_{}", std::process::id());
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let old = format!("postgres://{user}:{password}@127.0.0.1:{port}/{db}");
    // A database as the previous release left it: made by this library, then taken back to
    // version 2 (the child link's columns and index dropped).
    {
        let (s, _) = Session::open_url(&old, writer("root")).unwrap();
        turn(&mut agent(&s), "one", 1).unwrap();
        let store = llmsession::store::url::open_store(&old, &writer("root-fork")).unwrap().0;
        s.fork(None, store, llmsession::SessionOptions { id: Some("root-fork".into()), ..Default::default() }).unwrap();
    }
    let mut o = sql(&old);
    o.batch_execute(
        "DROP INDEX llmsession_sessions_parent;
         DROP INDEX llmsession_records_checkpoints;
         ALTER TABLE llmsession_sessions DROP COLUMN parent_call, DROP COLUMN spawned;
         UPDATE llmsession_meta SET value = '2' WHERE key = 'schema_version'",
    )
    .unwrap();
    drop(Session::open_url(&old, writer("root")).unwrap());
    let v: String = o.query_one("SELECT value FROM llmsession_meta WHERE key = 'schema_version'", &[]).unwrap().get(0);
    assert_eq!(v, llmsession::store::postgres::SCHEMA_VERSION.to_string());
    let kids = list_sessions(&old, None, None, Some("root")).unwrap();
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].id, "root-fork");
    assert!(!kids[0].parent.as_ref().unwrap().spawned, "a fork stays a fork");
    let (f, _) = Session::open_url(&old, reader("root-fork")).unwrap();
    f.verify().unwrap();
    drop(f);
    drop(o);
    c.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)")).unwrap();
}
