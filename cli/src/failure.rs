//! Why a command failed, and the exit status that says so (documented in `llmsession --help`
//! and docs/cli.md). Exit 2 (a usage error) is clap's and never reaches this module.

use llmsession::{Error, ErrorKind};
use serde_json::{json, Map, Value};

/// The exit status of a failed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 1: any other failure (a request the log does not have, a library error).
    Other = 1,
    /// 3: the log is bad (damaged, not a session log, a request that does not rebuild).
    BadLog = 3,
    /// 4: the store could not be read (a missing file, a refused connection, no such session),
    /// or the output could not be written.
    Store = 4,
}

/// A failed command: its exit status, the message for stderr, and the library error's kind and
/// detail when the library gave one.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    kind: &'static str,
    detail: Map<String, Value>,
}

impl Failure {
    /// A failure the CLI itself found; `kind` names it in the library's vocabulary.
    pub fn new(exit: Exit, kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure { exit, message: message.into(), kind: kind.name(), detail: Map::new() }
    }

    /// A library error, with the exit status its kind implies ([`Exit::of`]).
    pub fn of(e: Error) -> Failure {
        let exit = Exit::of(e.kind());
        Failure::with_exit(e, exit)
    }

    /// The failure with `key` added to its detail.
    pub fn with_detail(mut self, key: &str, value: Value) -> Failure {
        self.detail.insert(key.into(), value);
        self
    }

    /// A library error with an exit status the caller chose (opening a store, verify).
    pub fn with_exit(e: Error, exit: Exit) -> Failure {
        Failure { exit, message: e.message().to_string(), kind: e.kind().name(), detail: e.detail().clone() }
    }

    /// The message with `prefix: ` in front (the path of the log, `verify failed`).
    pub fn context(mut self, prefix: impl std::fmt::Display) -> Failure {
        self.message = format!("{prefix}: {}", self.message);
        self
    }

    /// Shows `given` (the LOG as typed) as `shown` wherever the message or a detail string
    /// still holds it, so that no output carries the password a URL holds.
    pub fn redacting(mut self, given: &str, shown: &str) -> Failure {
        if given.is_empty() || given == shown {
            return self;
        }
        self.message = self.message.replace(given, shown);
        for v in self.detail.values_mut() {
            if let Value::String(s) = v {
                *s = s.replace(given, shown);
            }
        }
        self
    }

    /// What `--json` writes on stdout: `{"ok": false, "error": {"exitCode", "kind", "message",
    /// and the library's detail keys (line, seq, turn, step, field, path, ...)}}`.
    pub fn to_json(&self) -> Value {
        let mut e = self.detail.clone();
        e.insert("exitCode".into(), json!(self.exit as u8));
        e.insert("kind".into(), json!(self.kind));
        e.insert("message".into(), json!(self.message));
        json!({"ok": false, "error": e})
    }
}

impl Exit {
    /// The exit status a library error's kind implies: a damaged log or a request that does not
    /// rebuild is a bad log; storage failures and a session in use, the store; anything else,
    /// other.
    pub fn of(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::CorruptLog | ErrorKind::MalformedJson | ErrorKind::Reconstruction => Exit::BadLog,
            ErrorKind::Storage | ErrorKind::Locked | ErrorKind::Busy | ErrorKind::Conflict | ErrorKind::ReadOnly => Exit::Store,
            _ => Exit::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_exit_codes_and_the_json_carries_the_detail() {
        assert_eq!(Exit::of(ErrorKind::CorruptLog), Exit::BadLog);
        assert_eq!(Exit::of(ErrorKind::Reconstruction), Exit::BadLog);
        assert_eq!(Exit::of(ErrorKind::Storage), Exit::Store);
        assert_eq!(Exit::of(ErrorKind::InvalidInput), Exit::Other);
        let f = Failure::of(Error::new(ErrorKind::CorruptLog, "line 3: bad").with("line", 3u64)).context("x.jsonl");
        let v = f.to_json();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["exitCode"], 3);
        assert_eq!(v["error"]["kind"], "corrupt-log");
        assert_eq!(v["error"]["line"], 3);
        assert_eq!(v["error"]["message"], "x.jsonl: line 3: bad");
    }
}
