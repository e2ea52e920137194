//! Storage faults: write errors (disk full, I/O error), failing syncs and truncates, read-only
//! files and device files, injected through the store. Each must give a clear `storage`
//! error; the handle stays usable (or refuses cleanly), and the store reloads with everything
//! reported durable and verifies.

use llmsession::agent::ToolResultInput;
use llmsession::log::TurnEndReason;
use llmsession::store::{Batch, Durability, JsonlStore, Store, StoreContents};
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Error, ErrorKind, Message, Role, Session, SessionOptions};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

mod support {
    pub mod host_script;
}

/// Which operations fail next (counters: fail the n-th call from now, 0 = no fault).
#[derive(Default)]
struct Faults {
    append_in: AtomicU32,
    sync_in: AtomicU32,
    truncate_always: AtomicBool,
    /// A failing append leaves a torn record behind (as a short write would).
    torn: AtomicBool,
}

fn hit(c: &AtomicU32) -> bool {
    match c.load(Ordering::SeqCst) {
        0 => false,
        1 => {
            c.store(0, Ordering::SeqCst);
            true
        }
        n => {
            c.store(n - 1, Ordering::SeqCst);
            false
        }
    }
}

fn os_error(code: i32, what: &str) -> Error {
    let e = std::io::Error::from_raw_os_error(code);
    Error::new(ErrorKind::Storage, format!("fault store: cannot {what}: {e}")).with("os", code as i64)
}

/// A JSONL file store with injected faults.
struct FaultStore {
    inner: JsonlStore,
    faults: Arc<Faults>,
}

impl Store for FaultStore {
    fn load(&mut self) -> llmsession::Result<StoreContents> {
        self.inner.load()
    }
    fn append(&mut self, batch: &Batch<'_>) -> llmsession::Result<()> {
        if hit(&self.faults.append_in) {
            if self.faults.torn.load(Ordering::SeqCst) {
                // Half the first record reaches the file, then the disk is full.
                use std::io::Write;
                let first = batch.header.unwrap_or_else(|| &batch.events[0]);
                let mut f = std::fs::OpenOptions::new().append(true).open(self.inner.path()).unwrap();
                f.write_all(&first.as_bytes()[..first.len() / 2]).unwrap();
                // The store cuts what a failed write of its own left after its last record.
                self.inner.undo(self.inner.records()).unwrap();
            }
            return Err(os_error(libc::ENOSPC, "append"));
        }
        self.inner.append(batch)
    }
    fn sync(&mut self) -> llmsession::Result<()> {
        if hit(&self.faults.sync_in) {
            return Err(os_error(libc::EIO, "sync"));
        }
        self.inner.sync()
    }
    fn undo(&mut self, from: usize) -> llmsession::Result<()> {
        if self.faults.truncate_always.load(Ordering::SeqCst) {
            return Err(os_error(libc::EIO, "truncate"));
        }
        self.inner.undo(from)
    }
    fn cut(&mut self, keep: usize, reason: &str) -> llmsession::Result<Option<String>> {
        if self.faults.truncate_always.load(Ordering::SeqCst) {
            return Err(os_error(libc::EIO, "truncate"));
        }
        self.inner.cut(keep, reason)
    }
    fn describe(&self) -> String {
        format!("fault store over {}", self.inner.describe())
    }
}

fn agent_for(session: &Session) -> Agent {
    let mut o = AgentOptions::new(CallConfig::new("openai", "m"));
    o.system = Some("storage fault test".into());
    Agent::new(session, o).unwrap()
}

/// One turn with a tool call; returns the first error.
fn turn(agent: &mut Agent, i: u64) -> llmsession::Result<()> {
    let c = CancelToken::new();
    agent.start_turn(Message::user_text(format!("question {i}")))?;
    agent.next_request(&c)?;
    let content = vec![Block::text("let me look"), Block::tool_call(&format!("c{i}"), "read", "{}")];
    agent.record_response(Message::new(Role::Assistant, content), None)?;
    agent.record_tool_result(ToolResultInput { call_id: format!("c{i}"), content: vec![Block::text("ok")], is_error: false })?;
    agent.next_request(&c)?;
    agent.record_response(Message::new(Role::Assistant, vec![Block::text(format!("answer {i}"))]), None)?;
    agent.end_turn(TurnEndReason::Completed)
}

/// The file's contents, reloaded by a fresh handle: returns the session (repaired) and its lines.
fn reload(path: &std::path::Path) -> (Session, Vec<String>) {
    let (s, _) = Session::open_jsonl(path, SessionOptions::default()).expect("the file reloads after the fault");
    support::host_script::check_session(&s).expect("the reloaded log verifies");
    let lines = s.with_log(|l| l.lines().iter().map(|x| x.to_string()).collect());
    (s, lines)
}

fn lines_of(s: &Session) -> Vec<String> {
    s.with_log(|l| l.lines().iter().map(|x| x.to_string()).collect())
}

/// Runs turns with a fault injected at every possible write in turn, for both durability
/// policies, and checks: the error is `storage` and names the cause; the turn can be closed
/// and the next turn completes once the fault is gone; the reloaded file holds every event
/// of every completed turn (with every-event: every event the handle holds).
fn faults_at_every_point(kind: &str) {
    for durability in [Durability::EveryEvent, Durability::TurnEnd] {
        for at in 1..=14u32 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            let faults = Arc::new(Faults::default());
            let store = FaultStore { inner: JsonlStore::open(&path).unwrap(), faults: faults.clone() };
            let session =
                Session::create(Box::new(store), SessionOptions { durability, id: Some("faults".into()), ..SessionOptions::default() })
                    .unwrap();
            let mut agent = agent_for(&session);
            turn(&mut agent, 0).unwrap();
            match kind {
                "append" | "torn" => {
                    faults.torn.store(kind == "torn", Ordering::SeqCst);
                    faults.append_in.store(at, Ordering::SeqCst);
                }
                "sync" => faults.sync_in.store(at, Ordering::SeqCst),
                _ => unreachable!(),
            }
            let before = session.len();
            let r = turn(&mut agent, 1);
            let fired = faults.append_in.load(Ordering::SeqCst) == 0 && faults.sync_in.load(Ordering::SeqCst) == 0;
            if let Err(e) = &r {
                assert_eq!(e.kind(), ErrorKind::Storage, "{kind}@{at} {durability:?}: {e:?}");
                assert!(e.message().contains("fault store"), "the error names the store: {}", e.message());
            } else {
                assert!(!fired || kind == "sync", "{kind}@{at}: a fault fired but the turn reported success");
            }
            if !fired {
                // Past the last write of the turn: nothing left to inject at.
                faults.append_in.store(0, Ordering::SeqCst);
                faults.sync_in.store(0, Ordering::SeqCst);
                assert!(at > 1, "{kind} {durability:?}: the fault never fired");
                break;
            }
            // The handle stays usable: close whatever is open, then a clean turn.
            if session.with_log(|l| l.state().open_turn.is_some()) {
                agent.end_turn(TurnEndReason::Error).unwrap_or_else(|e| panic!("{kind}@{at}: closing the turn after the fault: {e:?}"));
            }
            turn(&mut agent, 2).unwrap_or_else(|e| panic!("{kind}@{at} {durability:?}: a turn after the fault: {e:?}"));
            assert!(session.len() > before);
            support::host_script::check_session(&session).unwrap();
            let mem = lines_of(&session);
            drop(agent);
            drop(session);
            let (_, disk) = reload(&path);
            assert_eq!(disk, mem, "{kind}@{at} {durability:?}: the file differs from what the handle reported");
        }
    }
}

#[test]
fn append_fails_with_disk_full() {
    faults_at_every_point("append");
}

#[test]
fn append_fails_after_a_torn_write() {
    faults_at_every_point("torn");
}

#[test]
fn sync_fails_with_io_error() {
    faults_at_every_point("sync");
}

/// A sync failure whose undo (truncate) fails as well: the store holds a record the handle
/// does not. The handle must not write on past it (that would store two events with one seq
/// and make the file unloadable); it refuses with a storage error, and the file reloads.
#[test]
fn sync_and_undo_both_fail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let faults = Arc::new(Faults::default());
    let store = FaultStore { inner: JsonlStore::open(&path).unwrap(), faults: faults.clone() };
    let session = Session::create(
        Box::new(store),
        SessionOptions { durability: Durability::EveryEvent, id: Some("faults".into()), ..SessionOptions::default() },
    )
    .unwrap();
    let mut agent = agent_for(&session);
    turn(&mut agent, 0).unwrap();
    let durable = lines_of(&session);
    faults.sync_in.store(1, Ordering::SeqCst);
    faults.truncate_always.store(true, Ordering::SeqCst);
    let e = turn(&mut agent, 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
    faults.truncate_always.store(false, Ordering::SeqCst);
    // Later writes either keep the store in step or are refused; never a duplicate seq.
    let later = turn(&mut agent, 2);
    if let Err(e) = &later {
        assert_eq!(e.kind(), ErrorKind::Storage, "refused cleanly: {e:?}");
    }
    let mem = lines_of(&session);
    drop(agent);
    drop(session);
    let (_, disk) = reload(&path);
    assert_eq!(&disk[..durable.len()], &durable[..], "events reported durable before the fault are on disk");
    if later.is_ok() {
        assert_eq!(&disk[..mem.len()], &mem[..], "the events the handle reported are on disk");
    }
}

/// A read-only file cannot be opened for writing: a clear storage error naming the path.
#[test]
fn read_only_file_is_refused_clearly() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.jsonl");
    {
        let (s, _) = Session::open_jsonl(&path, SessionOptions::default()).unwrap();
        let mut a = agent_for(&s);
        turn(&mut a, 0).unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    if std::fs::OpenOptions::new().append(true).open(&path).is_ok() {
        eprintln!("running as a user that can write read-only files (root?): skipping");
        return;
    }
    let e = Session::open_jsonl(&path, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Storage);
    assert!(e.message().contains("ro.jsonl"), "{}", e.message());
    assert!(e.message().contains("cannot open"), "{}", e.message());
    // The file is untouched and still loads once writable again.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    reload(&path);
}

/// /dev/full: every write fails with ENOSPC (and reading it never ends). Opening it must fail
/// with a clear storage error, not hang or exhaust memory.
#[test]
fn device_file_is_refused_clearly() {
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let e = Session::open_jsonl("/dev/full", SessionOptions::default()).unwrap_err();
    eprintln!("/dev/full: {e:?}");
    assert_eq!(e.kind(), ErrorKind::Storage, "{e:?}");
    assert!(e.message().contains("/dev/full"), "{}", e.message());
    assert!(e.message().contains("not a regular file"), "{}", e.message());
}
