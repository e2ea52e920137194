//! Status codes returned by every fallible entry point, and the callback return codes.
//!
//! Values are explicit and stable: a value, once published, keeps its meaning and is never
//! reused. Core error kinds occupy 1..=99 (one per [`ErrorKind`]); conditions that only exist
//! at the C boundary (NULL pointers, bad handles, panics, ...) occupy 100 and up.

use llmsession::error::{Error, ErrorKind};

/// The result of a fallible llmsession function: `LLS_OK` (0) or one of the `LLS_ERR_*` values.
///
/// When a function returns anything but `LLS_OK` and its `err` argument is not NULL, `*err`
/// receives an `lls_error` with the same code, a message and a JSON detail.
///
/// Thread safety: a plain value.
pub type lls_status = i32;

/// Success.
///
/// Thread safety: a constant.
pub const LLS_OK: lls_status = 0;

/// Input JSON could not be parsed at all (the error detail carries `line` and `column`).
///
/// Thread safety: a constant.
pub const LLS_ERR_MALFORMED_JSON: lls_status = 1;
/// Input JSON parsed but does not have the required shape (the detail names the `field`).
///
/// Thread safety: a constant.
pub const LLS_ERR_INVALID_INPUT: lls_status = 2;
/// A call that is not allowed in the current state (a second request while one is open, a
/// tool result for an unknown call id, ...).
///
/// Thread safety: a constant.
pub const LLS_ERR_OUT_OF_ORDER: lls_status = 3;
/// A second live agent instance over the same session.
///
/// Thread safety: a constant.
pub const LLS_ERR_BUSY: lls_status = 4;
/// A stored log is damaged or violates the log rules.
///
/// Thread safety: a constant.
pub const LLS_ERR_CORRUPT_LOG: lls_status = 5;
/// A storage operation failed (I/O error, disk full, host store failure).
///
/// Thread safety: a constant.
pub const LLS_ERR_STORAGE: lls_status = 6;
/// The operation was cancelled through an `lls_cancel` token.
///
/// Thread safety: a constant.
pub const LLS_ERR_CANCELLED: lls_status = 7;
/// The agent instance was disposed.
///
/// Thread safety: a constant.
pub const LLS_ERR_DISPOSED: lls_status = 8;
/// A host callback (listener) failed, or answered with an unusable reply. The error detail's
/// `callback` field says which: `failed`, `no-reply`, `unknown-code`, `null-reply`,
/// `invalid-utf8` or `malformed-json`.
///
/// Thread safety: a constant.
pub const LLS_ERR_LISTENER: lls_status = 9;
/// The summariser failed, or its output was rejected.
///
/// Thread safety: a constant.
pub const LLS_ERR_SUMMARISER: lls_status = 10;
/// Rebuilding a request from the log did not give the same bytes.
///
/// Thread safety: a constant.
pub const LLS_ERR_RECONSTRUCTION: lls_status = 11;
/// A compaction policy is invalid.
///
/// Thread safety: a constant.
pub const LLS_ERR_INVALID_POLICY: lls_status = 12;
/// The provider reported a context overflow and the retry budget is spent.
///
/// Thread safety: a constant.
pub const LLS_ERR_OVERFLOW_BUDGET: lls_status = 13;
/// Nothing to compact.
///
/// Thread safety: a constant.
pub const LLS_ERR_NOTHING_TO_COMPACT: lls_status = 14;
/// The tokenizer could not be loaded or used.
///
/// Thread safety: a constant.
pub const LLS_ERR_TOKENIZER: lls_status = 15;
/// The object was poisoned by an earlier panic and refuses further mutation.
///
/// Thread safety: a constant.
pub const LLS_ERR_POISONED: lls_status = 16;
/// An internal invariant failed (a bug in llmsession; please report it).
///
/// Thread safety: a constant.
pub const LLS_ERR_INTERNAL: lls_status = 17;
/// The session is in use: another writer (another handle in this process, another process, or
/// another machine for a database store) holds its write lock or lease. The detail carries
/// `path` or `sessionId` and, where the store can tell, the `holder`. Open it read-only to
/// inspect it.
///
/// Thread safety: a constant.
pub const LLS_ERR_LOCKED: lls_status = 18;
/// The store refused an append because the seq it names is taken: another writer appended to
/// the session. Nothing of the refused operation was applied; the session handle refuses
/// further appends until it is refreshed (`lls_session_refresh`) or reopened. The detail
/// carries `seq`.
///
/// Thread safety: a constant.
pub const LLS_ERR_CONFLICT: lls_status = 19;
/// The session was opened read-only: appends, agents and repairs are refused.
///
/// Thread safety: a constant.
pub const LLS_ERR_READ_ONLY: lls_status = 20;
/// The store under test failed the store conformance kit (`lls_store_conformance`,
/// `lls_store_conformance_url`): the report (in `*out`) says which cases failed and why; the
/// error's detail lists them (`failed`). Since ABI 2 minor 5.
///
/// Thread safety: a constant.
pub const LLS_ERR_NONCONFORMING: lls_status = 21;

/// A required pointer argument was NULL (the detail names the `argument`).
///
/// Thread safety: a constant.
pub const LLS_ERR_NULL_POINTER: lls_status = 100;
/// A text argument is not valid UTF-8 (the detail carries `argument` and `validUpTo`, the
/// byte offset of the first invalid sequence).
///
/// Thread safety: a constant.
pub const LLS_ERR_INVALID_UTF8: lls_status = 101;
/// A handle argument is not a live handle of the expected type: it was freed, never created
/// by llmsession, or is a handle of another type (the detail carries `argument`, `expected`
/// and, for a handle of another type, `actual`).
///
/// Thread safety: a constant.
pub const LLS_ERR_INVALID_HANDLE: lls_status = 102;
/// llmsession panicked (a bug). The message carries the panic message; the object that was
/// being mutated, if any, is poisoned.
///
/// Thread safety: a constant.
pub const LLS_ERR_PANIC: lls_status = 103;
/// A non-pointer argument is out of range (a buffer length too large, an unknown option
/// value, ...; the detail names the `argument`).
///
/// Thread safety: a constant.
pub const LLS_ERR_INVALID_ARGUMENT: lls_status = 104;
/// An `lls_reply` was answered a second time (the first answer stands).
///
/// Thread safety: a constant.
pub const LLS_ERR_REPLY_STATE: lls_status = 105;
/// The library could not allocate memory for an output buffer.
///
/// Thread safety: a constant.
pub const LLS_ERR_OUT_OF_MEMORY: lls_status = 106;

/// Callback return value: the reply was answered synchronously with `lls_reply_set_json`
/// (or `lls_reply_complete`) before returning.
///
/// Thread safety: a constant.
pub const LLS_CB_OK: i32 = 0;
/// Callback return value: the reply will be answered later, from any thread, with
/// `lls_reply_complete` or `lls_reply_fail`; the library waits on the calling thread.
///
/// Thread safety: a constant.
pub const LLS_CB_PENDING: i32 = 1;
/// Callback return value: the callback failed (give the reason with `lls_reply_fail` first).
///
/// Thread safety: a constant.
pub const LLS_CB_ERROR: i32 = 2;

/// The status that stands for an error kind (one distinct value per kind).
pub fn status_for_kind(kind: ErrorKind) -> lls_status {
    match kind {
        ErrorKind::MalformedJson => LLS_ERR_MALFORMED_JSON,
        ErrorKind::InvalidInput => LLS_ERR_INVALID_INPUT,
        ErrorKind::OutOfOrder => LLS_ERR_OUT_OF_ORDER,
        ErrorKind::Busy => LLS_ERR_BUSY,
        ErrorKind::CorruptLog => LLS_ERR_CORRUPT_LOG,
        ErrorKind::Storage => LLS_ERR_STORAGE,
        ErrorKind::Cancelled => LLS_ERR_CANCELLED,
        ErrorKind::Disposed => LLS_ERR_DISPOSED,
        ErrorKind::Listener => LLS_ERR_LISTENER,
        ErrorKind::Summariser => LLS_ERR_SUMMARISER,
        ErrorKind::Reconstruction => LLS_ERR_RECONSTRUCTION,
        ErrorKind::InvalidPolicy => LLS_ERR_INVALID_POLICY,
        ErrorKind::OverflowBudget => LLS_ERR_OVERFLOW_BUDGET,
        ErrorKind::NothingToCompact => LLS_ERR_NOTHING_TO_COMPACT,
        ErrorKind::Tokenizer => LLS_ERR_TOKENIZER,
        ErrorKind::Poisoned => LLS_ERR_POISONED,
        ErrorKind::Internal => LLS_ERR_INTERNAL,
        ErrorKind::Locked => LLS_ERR_LOCKED,
        ErrorKind::Conflict => LLS_ERR_CONFLICT,
        ErrorKind::ReadOnly => LLS_ERR_READ_ONLY,
        ErrorKind::Nonconforming => LLS_ERR_NONCONFORMING,
    }
}

/// The status that stands for a core error.
pub fn status_of(error: &Error) -> lls_status {
    status_for_kind(error.kind())
}

/// Every core error kind, in status order (used by tests and `status_name`).
pub const ALL_KINDS: [ErrorKind; 21] = [
    ErrorKind::MalformedJson,
    ErrorKind::InvalidInput,
    ErrorKind::OutOfOrder,
    ErrorKind::Busy,
    ErrorKind::CorruptLog,
    ErrorKind::Storage,
    ErrorKind::Cancelled,
    ErrorKind::Disposed,
    ErrorKind::Listener,
    ErrorKind::Summariser,
    ErrorKind::Reconstruction,
    ErrorKind::InvalidPolicy,
    ErrorKind::OverflowBudget,
    ErrorKind::NothingToCompact,
    ErrorKind::Tokenizer,
    ErrorKind::Poisoned,
    ErrorKind::Internal,
    ErrorKind::Locked,
    ErrorKind::Conflict,
    ErrorKind::ReadOnly,
    ErrorKind::Nonconforming,
];

/// A short stable name for a status (`"ok"`, the error kind's name, or the FFI condition's
/// name), used as `kind` in error details. Unknown values give `"unknown"`.
pub fn status_name(status: lls_status) -> &'static str {
    match status {
        LLS_OK => "ok",
        LLS_ERR_NULL_POINTER => "null-pointer",
        LLS_ERR_INVALID_UTF8 => "invalid-utf8",
        LLS_ERR_INVALID_HANDLE => "invalid-handle",
        LLS_ERR_PANIC => "panic",
        LLS_ERR_INVALID_ARGUMENT => "invalid-argument",
        LLS_ERR_REPLY_STATE => "reply-state",
        LLS_ERR_OUT_OF_MEMORY => "out-of-memory",
        other => ALL_KINDS.iter().find(|k| status_for_kind(**k) == other).map(|k| k.name()).unwrap_or("unknown"),
    }
}

/// The statuses that exist only at the C boundary (100 and up).
pub const FFI_STATUSES: [lls_status; 7] = [
    LLS_ERR_NULL_POINTER,
    LLS_ERR_INVALID_UTF8,
    LLS_ERR_INVALID_HANDLE,
    LLS_ERR_PANIC,
    LLS_ERR_INVALID_ARGUMENT,
    LLS_ERR_REPLY_STATE,
    LLS_ERR_OUT_OF_MEMORY,
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_status_is_distinct_and_named() {
        let mut seen = HashSet::new();
        assert!(seen.insert(LLS_OK));
        for k in ALL_KINDS {
            let s = status_for_kind(k);
            assert!(seen.insert(s), "{k:?} reuses status {s}");
            assert!((1..100).contains(&s), "core kinds live in 1..=99");
            assert_eq!(status_name(s), k.name());
        }
        let mut names = HashSet::new();
        for s in FFI_STATUSES {
            assert!(seen.insert(s), "FFI status {s} reused");
            assert!(s >= 100);
            assert!(names.insert(status_name(s)));
            assert_ne!(status_name(s), "unknown");
        }
        assert_eq!(status_name(9999), "unknown");
    }

    #[test]
    fn published_values_are_stable() {
        // These numbers are part of the ABI: changing one is an incompatible change.
        assert_eq!(LLS_ERR_MALFORMED_JSON, 1);
        assert_eq!(LLS_ERR_LISTENER, 9);
        assert_eq!(LLS_ERR_INTERNAL, 17);
        assert_eq!((LLS_ERR_LOCKED, LLS_ERR_CONFLICT, LLS_ERR_READ_ONLY), (18, 19, 20));
        assert_eq!(LLS_ERR_NULL_POINTER, 100);
        assert_eq!(LLS_ERR_OUT_OF_MEMORY, 106);
        assert_eq!((LLS_CB_OK, LLS_CB_PENDING, LLS_CB_ERROR), (0, 1, 2));
        assert_eq!(status_of(&Error::new(ErrorKind::Cancelled, "x")), LLS_ERR_CANCELLED);
    }
}
