//! Shared text: ranges of immutable buffers (derived messages, stored lines).

use std::sync::Arc;

/// A range of a shared, immutable text buffer. Dereferences to `str`.
///
/// A derived message's JSON is one (its own buffer, or the run of messages it was sealed into:
/// [`crate::log::history`]); so is an event's stored line (its own buffer for an event this
/// process appended, or the whole log file an open read it from: every line of a loaded log
/// shares that one buffer, so the log costs its file's size and one allocation, not one copy
/// and one allocation per record).
#[derive(Clone)]
pub struct Text {
    /// The buffer (a `String` behind the `Arc`, so a buffer read or written whole is shared
    /// without being copied into an `Arc<str>` first).
    buf: Arc<String>,
    start: usize,
    end: usize,
}

impl Text {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.buf[self.start..self.end]
    }

    /// The text `buf[start..end]`, sharing `buf` (the range must lie on character boundaries).
    pub(crate) fn shared(buf: &Arc<String>, start: usize, end: usize) -> Text {
        debug_assert!(buf.is_char_boundary(start) && buf.is_char_boundary(end) && start <= end);
        Text { buf: buf.clone(), start, end }
    }

    /// The buffer this text is a range of, and the range (for sealing several texts into one).
    pub(crate) fn parts(&self) -> (&Arc<String>, usize, usize) {
        (&self.buf, self.start, self.end)
    }

    /// Whether `next` follows this text in the same buffer, after one separating byte (two
    /// consecutive messages of a sealed run).
    pub(crate) fn followed_by(&self, next: &Text) -> bool {
        Arc::ptr_eq(&self.buf, &next.buf) && next.start == self.end + 1
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        let end = s.len();
        Text { buf: Arc::new(s), start: 0, end }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text { buf: Arc::new(s.to_string()), start: 0, end: s.len() }
    }
}
