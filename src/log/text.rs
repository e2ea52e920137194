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

    /// `s` as a text followed in its buffer by a NUL byte that the text does not include, so
    /// that a C host can be handed the buffer itself ([`Text::c_buffer`]).
    pub fn terminated(mut s: String) -> Text {
        let end = s.len();
        s.push('\0');
        Text { buf: Arc::new(s), start: 0, end }
    }

    /// When a NUL byte follows the text in its buffer ([`Text::terminated`]): the buffer, to be
    /// kept alive for as long as a C host holds the text, and where the text starts in it. The
    /// buffer is immutable: whoever is handed it reads it and never writes into it.
    pub fn c_buffer(&self) -> Option<(&Arc<String>, usize)> {
        (self.buf.as_bytes().get(self.end) == Some(&0)).then_some((&self.buf, self.start))
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

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl AsRef<[u8]> for Text {
    fn as_ref(&self) -> &[u8] {
        self.as_str().as_bytes()
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
