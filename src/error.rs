//! The library's one error type.
//!
//! Every error has a [`ErrorKind`] (which maps one-to-one onto a stable C status code in
//! `capi/src/`), a human-readable message that says what was wrong, and a JSON detail object
//! with machine-readable context (`field`, `seq`, `line`, `eventType`, ...).

use serde_json::{Map, Value};
use std::fmt;

/// What went wrong, coarsely. The C ABI maps each kind to a distinct, stable status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Input JSON could not be parsed at all.
    MalformedJson,
    /// Input parsed but does not have the required shape (a field is missing, mistyped, ...).
    InvalidInput,
    /// A call that is not allowed in the current state (a second request while one is open,
    /// a tool result for an unknown call id, a turn that was never opened, ...).
    OutOfOrder,
    /// A second live agent instance over the same session.
    Busy,
    /// A stored log is damaged or violates the log rules.
    CorruptLog,
    /// A storage operation failed (I/O error, disk full, read-only file, host store failure).
    Storage,
    /// The operation was cancelled through a cancel token.
    Cancelled,
    /// The agent instance was disposed.
    Disposed,
    /// A host listener failed or returned invalid data.
    Listener,
    /// The summariser failed, or its output was rejected.
    Summariser,
    /// Reconstruction of a request from the log did not give the same bytes.
    Reconstruction,
    /// A compaction policy is invalid.
    InvalidPolicy,
    /// The provider reported a context overflow and the retry budget is spent.
    OverflowBudget,
    /// Nothing to compact.
    NothingToCompact,
    /// The tokenizer could not be loaded or used.
    Tokenizer,
    /// The object was poisoned by an earlier panic and refuses further mutation.
    Poisoned,
    /// An internal invariant failed (a bug in llmsession).
    Internal,
    /// The session is in use: another writer holds its lock or lease.
    Locked,
    /// The store refused an append because another writer appended first (the seq it names is
    /// taken), or the handle refuses appends since such a refusal until it is refreshed.
    Conflict,
    /// The session was opened read-only and cannot be changed.
    ReadOnly,
    /// A store failed the conformance kit (`store::conformance`): the report says which cases.
    Nonconforming,
}

impl ErrorKind {
    /// A short stable name, used in messages and in the C detail JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::MalformedJson => "malformed-json",
            ErrorKind::InvalidInput => "invalid-input",
            ErrorKind::OutOfOrder => "out-of-order",
            ErrorKind::Busy => "busy",
            ErrorKind::CorruptLog => "corrupt-log",
            ErrorKind::Storage => "storage",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Disposed => "disposed",
            ErrorKind::Listener => "listener",
            ErrorKind::Summariser => "summariser",
            ErrorKind::Reconstruction => "reconstruction",
            ErrorKind::InvalidPolicy => "invalid-policy",
            ErrorKind::OverflowBudget => "overflow-budget",
            ErrorKind::NothingToCompact => "nothing-to-compact",
            ErrorKind::Tokenizer => "tokenizer",
            ErrorKind::Poisoned => "poisoned",
            ErrorKind::Internal => "internal",
            ErrorKind::Locked => "locked",
            ErrorKind::Conflict => "conflict",
            ErrorKind::ReadOnly => "read-only",
            ErrorKind::Nonconforming => "nonconforming",
        }
    }
}

/// An llmsession error: kind, message and JSON detail.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    detail: Map<String, Value>,
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error with an empty detail.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), detail: Map::new() }
    }

    /// Shorthand for an [`ErrorKind::InvalidInput`] error about `field`.
    pub fn invalid(field: impl Into<String>, why: impl fmt::Display) -> Self {
        let field = field.into();
        let msg = if field.is_empty() { why.to_string() } else { format!("{field}: {why}") };
        Error::new(ErrorKind::InvalidInput, msg).with("field", field)
    }

    /// Shorthand for an [`ErrorKind::OutOfOrder`] error.
    pub fn out_of_order(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::OutOfOrder, message)
    }

    /// Adds a detail key (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// Prefixes the message with context, keeping kind and detail.
    pub fn context(mut self, prefix: impl fmt::Display) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }

    /// Changes the kind, keeping message and detail.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The machine-readable detail object.
    pub fn detail(&self) -> &Map<String, Value> {
        &self.detail
    }

    /// The detail as a JSON object that also carries `kind` and `message`.
    pub fn detail_json(&self) -> Value {
        let mut m = self.detail.clone();
        m.insert("kind".into(), Value::from(self.kind.name()));
        m.insert("message".into(), Value::from(self.message.clone()));
        Value::Object(m)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::new(ErrorKind::MalformedJson, format!("malformed JSON: {e}")).with("line", e.line() as u64).with("column", e.column() as u64)
    }
}

/// Parses a JSON text into a value with a clear error (used for every JSON input).
pub fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(Error::from)
}
