//! A real full disk: a session log on a small tmpfs fills it up mid-turn.
//!
//! The call that hits ENOSPC fails with a clear storage error naming the OS error; the handle
//! and the file stay in step (the file holds exactly the records the handle holds); once space
//! is freed the same call succeeds, the turn completes, the file reloads to the same records
//! and verifies.
//!
//! The tmpfs is mounted with `mount -t tmpfs -o size=...` (root), unmounted when the test ends.
//! Where mounting is not possible (not root, no mount command) the test falls back to a file
//! size limit (`RLIMIT_FSIZE`, with SIGXFSZ ignored, so a write past it fails with EFBIG
//! instead of killing the process), and says so on stderr (`LLMSESSION_ENOSPC_RLIMIT=1` takes
//! the fallback anyway). This test is alone in its binary: the limit is per process.

use llmsession::agent::ToolResultInput;
use llmsession::log::TurnEndReason;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Role, Session, SessionOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

mod support {
    pub mod host_script;
}

/// A mounted tmpfs, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// How space runs out and comes back.
enum Limit {
    /// A filler file on the tmpfs: deleting it frees the space.
    Tmpfs { _fs: Tmpfs, filler: PathBuf },
    /// The process's file size limit: raising it "frees" space.
    Rlimit,
}

impl Limit {
    fn exhaust(&self, log: &Path) {
        match self {
            Limit::Tmpfs { filler, .. } => {
                // Fill what is left, leaving a little room: the log fills it within a few turns.
                let free = free_bytes(filler.parent().unwrap());
                let keep = 6000;
                std::fs::write(filler, vec![b'x'; free.saturating_sub(keep) as usize]).unwrap();
            }
            Limit::Rlimit => {
                let len = std::fs::metadata(log).unwrap().len();
                set_fsize(len + 6000);
            }
        }
    }
    fn free(&self) {
        match self {
            Limit::Tmpfs { filler, .. } => std::fs::remove_file(filler).unwrap(),
            Limit::Rlimit => set_fsize(libc::RLIM_INFINITY),
        }
    }
    /// The OS errors a full disk gives here.
    fn errnos(&self) -> &'static [i64] {
        match self {
            Limit::Tmpfs { .. } => &[libc::ENOSPC as i64],
            Limit::Rlimit => &[libc::EFBIG as i64],
        }
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail as u64 * st.f_frsize as u64
}

fn set_fsize(limit: libc::rlim_t) {
    let r = libc::rlimit { rlim_cur: limit, rlim_max: libc::RLIM_INFINITY };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &r) }, 0);
}

fn limit() -> (Limit, PathBuf, Option<tempfile::TempDir>) {
    // LLMSESSION_ENOSPC_RLIMIT=1 takes the fallback even where mounting works.
    let forced = std::env::var_os("LLMSESSION_ENOSPC_RLIMIT").is_some();
    if let Some(fs) = Tmpfs::mount("512k").filter(|_| !forced) {
        eprintln!("enospc: a 512 KiB tmpfs at {}", fs.path().display());
        let log = fs.path().join("s.jsonl");
        let filler = fs.path().join("filler");
        return (Limit::Tmpfs { _fs: fs, filler }, log, None);
    }
    eprintln!("enospc: no tmpfs (LLMSESSION_ENOSPC_RLIMIT is set, or mounting failed: not root?): falling back to RLIMIT_FSIZE with SIGXFSZ ignored");
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("s.jsonl");
    (Limit::Rlimit, log, Some(dir))
}

/// One call of a turn.
type Step = Box<dyn Fn(&mut Agent) -> llmsession::Result<()>>;

/// The calls of turn `i`; each is retried once space is back if it hits the full disk.
fn steps(i: u64) -> Vec<Step> {
    let text = format!("{i} ").repeat(600);
    let t2 = text.clone();
    vec![
        Box::new(move |a: &mut Agent| a.start_turn(Message::user_text(format!("question {i}: {text}"))).map(|_| ())),
        Box::new(|a: &mut Agent| a.next_request(&CancelToken::new()).map(|_| ())),
        Box::new(move |a: &mut Agent| {
            let m = Message::new(Role::Assistant, vec![Block::text("looking"), Block::tool_call(&format!("c{i}"), "read", "{}")]);
            a.record_response(m, None).map(|_| ())
        }),
        Box::new(move |a: &mut Agent| {
            a.record_tool_result(ToolResultInput { call_id: format!("c{i}"), content: vec![Block::text(t2.clone())], is_error: false })
                .map(|_| ())
        }),
        Box::new(|a: &mut Agent| a.next_request(&CancelToken::new()).map(|_| ())),
        Box::new(move |a: &mut Agent| {
            a.record_response(Message::new(Role::Assistant, vec![Block::text(format!("answer {i}"))]), None).map(|_| ())
        }),
        Box::new(|a: &mut Agent| a.end_turn(TurnEndReason::Completed)),
    ]
}

fn file_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn a_full_disk_mid_turn_is_a_clear_error_and_the_turn_completes_once_space_is_back() {
    let (limit, log, _keep) = limit();
    let (session, _) = Session::open_jsonl(&log, SessionOptions { id: Some("enospc".into()), ..Default::default() }).unwrap();
    let mut o = AgentOptions::new(CallConfig::new("openai", "m"));
    o.check_requests = true;
    let mut agent = Agent::new(&session, o).unwrap();
    limit.exhaust(&log);
    let mut hit = 0;
    for i in 0..40 {
        for (k, step) in steps(i).iter().enumerate() {
            let Err(e) = step(&mut agent) else { continue };
            hit += 1;
            assert_eq!(e.kind(), ErrorKind::Storage, "turn {i} step {k}: {e:?}");
            let os = e.detail().get("os").and_then(|v| v.as_i64());
            assert!(os.is_some_and(|c| limit.errnos().contains(&c)), "turn {i} step {k}: the OS error is in the detail: {e:?}");
            assert!(e.message().contains(log.to_str().unwrap()), "the error names the file: {}", e.message());
            let mem: Vec<String> = session.records().unwrap().iter().map(|r| r.to_string()).collect();
            assert_eq!(file_lines(&log), mem, "turn {i} step {k}: the file holds exactly what the handle holds");
            limit.free();
            step(&mut agent).unwrap_or_else(|e| panic!("turn {i} step {k}: the retry once space is back: {e:?}"));
            if hit < 3 {
                limit.exhaust(&log);
            }
        }
        if hit >= 3 {
            break;
        }
    }
    assert!(hit >= 3, "the disk filled up ({hit} refused writes)");
    support::host_script::check_session(&session).unwrap();
    let mem: Vec<String> = session.records().unwrap().iter().map(|r| r.to_string()).collect();
    drop(agent);
    drop(session);
    let (back, _) = Session::open_jsonl(&log, SessionOptions::default()).unwrap();
    assert_eq!(back.records().unwrap().iter().map(|r| r.to_string()).collect::<Vec<_>>(), mem);
    back.verify().unwrap();
}
