//! The chained digest that makes a log tamper-evident (log format version 2).
//!
//! Every event record of a version 2 log ends with a `"chain"` field: the SHA-256 of the
//! previous record's chain (for the first event: the SHA-256 of the session header record) and
//! of the record's own bytes without that field, as 64 lowercase hex digits:
//!
//! ```text
//! chain(0) = sha256( sha256(header record) || event 0 without chain )
//! chain(n) = sha256( chain(n-1) || event n without chain )
//! ```
//!
//! "Without the field" is textual: the record is `BODY,"chain":"<hex>"}` and the hashed bytes
//! are `BODY}`. So checking a record hashes its stored bytes as they are, with no parsing or
//! re-serialisation, and any edit of a record, and any reordering, insertion or removal of
//! records before the last one, breaks the chain at the first record it touches. Removing
//! records from the end leaves a valid shorter chain: only a head kept elsewhere (the
//! database store keeps one; a host can keep [`ChainHead`]) tells that apart.

use sha2::{Digest, Sha256};

/// A chain value (32 bytes).
pub type Link = [u8; 32];

const FIELD: &str = ",\"chain\":\"";
/// Bytes the field adds to a record: `,"chain":"` + 64 hex digits + `"`.
pub const FIELD_LEN: usize = FIELD.len() + 64 + 1;

/// The chain value that precedes the first event: the digest of the session header record.
pub fn start(header_record: &[u8]) -> Link {
    Sha256::digest(header_record).into()
}

fn link(prev: &Link, body_without_brace: &[u8]) -> Link {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(body_without_brace);
    h.update(b"}");
    h.finalize().into()
}

/// Seals an event record: returns the record with its chain field and the new chain value.
/// `record` is one JSON object (as `Event::to_json` writes it).
pub fn seal(prev: &Link, record: &str) -> (String, Link) {
    let mut out = Vec::with_capacity(record.len() + FIELD_LEN);
    out.extend_from_slice(record.as_bytes());
    let next = seal_in_place(prev, &mut out);
    (String::from_utf8(out).expect("a sealed record is text"), next)
}

/// [`seal`] in place: `record` (one JSON object) gets its chain field where it ends, with no
/// second buffer. Returns the new chain value.
pub fn seal_in_place(prev: &Link, record: &mut Vec<u8>) -> Link {
    debug_assert!(record.ends_with(b"}"));
    record.pop();
    let next = link(prev, record);
    record.extend_from_slice(FIELD.as_bytes());
    push_hex_bytes(record, &next);
    record.extend_from_slice(b"\"}");
    next
}

/// Checks a stored event record against the chain value before it; returns the record's chain
/// value, or why it does not match.
pub fn check(prev: &Link, record: &[u8]) -> Result<Link, String> {
    if record.len() < FIELD_LEN + 2 || !record.ends_with(b"\"}") {
        return Err("the record has no chain field at its end (a version 2 log chains every event)".into());
    }
    let field_at = record.len() - FIELD_LEN - 1;
    if &record[field_at..field_at + FIELD.len()] != FIELD.as_bytes() {
        return Err("the record has no chain field at its end (a version 2 log chains every event)".into());
    }
    let hex = &record[field_at + FIELD.len()..record.len() - 2];
    let want = link(prev, &record[..field_at]);
    // Compared as hex digits (no parse of the stored ones on the usual path).
    let mut digits = [0u8; 64];
    for (i, b) in want.iter().enumerate() {
        digits[2 * i] = HEX_DIGITS[(b >> 4) as usize];
        digits[2 * i + 1] = HEX_DIGITS[(b & 15) as usize];
    }
    if hex != digits {
        parse_hex(hex).ok_or("the chain field is not 64 lowercase hex digits")?;
        return Err(
            "the chained digest does not match: this record was edited, or a record before it was edited, inserted, removed or reordered"
                .into(),
        );
    }
    Ok(want)
}

/// The chain value a stored record ends with (its 64 hex digits, unchecked), if the record has
/// a chain field: what a store keeps as the head of the log.
pub fn stored_link(record: &str) -> Option<&str> {
    let b = record.as_bytes();
    if b.len() < FIELD_LEN + 2 || !b.ends_with(b"\"}") {
        return None;
    }
    let at = record.len() - FIELD_LEN - 1;
    if !record.is_char_boundary(at) || !record[at..].starts_with(FIELD) {
        return None;
    }
    Some(&record[at + FIELD.len()..record.len() - 2])
}

/// A record without its chain field (the bytes the chain hashes, as text); a record without
/// one is returned as it is.
pub fn without_chain(record: &str) -> std::borrow::Cow<'_, str> {
    let b = record.as_bytes();
    if b.len() >= FIELD_LEN + 2 && b.ends_with(b"\"}") && record[..record.len() - 1].ends_with('"') {
        let at = record.len() - FIELD_LEN - 1;
        if record.is_char_boundary(at) && record[at..].starts_with(FIELD) {
            return format!("{}}}", &record[..at]).into();
        }
    }
    record.into()
}

/// The lowercase hex form of a chain value.
pub fn hex(l: &Link) -> String {
    let mut s = String::with_capacity(64);
    push_hex(&mut s, l);
    s
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn push_hex_bytes(out: &mut Vec<u8>, l: &Link) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in l {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

fn push_hex(out: &mut String, l: &Link) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in l {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

/// A chain value from its 64 lowercase hex digits (as [`stored_link`] gives them).
pub fn parse_link(hex: &str) -> Option<Link> {
    parse_hex(hex.as_bytes())
}

fn parse_hex(h: &[u8]) -> Option<Link> {
    if h.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in h.chunks(2).enumerate() {
        let d = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = d(pair[0])? << 4 | d(pair[1])?;
    }
    Some(out)
}

/// The end of a log's chain: the seq of its last event and that event's chain value. A host
/// that keeps it elsewhere can tell a log that lost its last records from an intact one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainHead {
    /// Events in the log (the seq the next event gets).
    pub events: u64,
    /// The chain value after the last event (the header's digest for an empty log), hex.
    pub chain: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_checks_and_any_edit_breaks_it() {
        let s = start(b"{\"type\":\"session\"}");
        let (rec, next) = seal(&s, "{\"type\":\"x\",\"seq\":0,\"time\":1,\"data\":{}}");
        assert!(rec.ends_with("\"}"));
        assert_eq!(check(&s, rec.as_bytes()), Ok(next));
        let edited = rec.replacen("\"time\":1", "\"time\":2", 1);
        assert!(check(&s, edited.as_bytes()).unwrap_err().contains("does not match"));
        let other = start(b"{\"type\":\"session\",\"id\":\"b\"}");
        assert!(check(&other, rec.as_bytes()).is_err());
        assert!(check(&s, b"{\"type\":\"x\"}").unwrap_err().contains("no chain field"));
    }
}
