//! Session ids: the rule every store shares, and random ids for new sessions.
//!
//! Both the session ([`crate::session`]) and the stores ([`crate::store`]) use these, so they
//! live below both: a store checks the id it is opened for and a database open without one
//! makes a random id, without reaching back into the session module.

use crate::error::{Error, Result};
use crate::time::now_ms;

/// The longest session id, in bytes (UTF-8).
pub const MAX_SESSION_ID_BYTES: usize = 1024;

/// Checks a session id a host gives (for a new session, a fork, or the session a store is
/// opened for) against the rule every store shares: not empty, at most
/// [`MAX_SESSION_ID_BYTES`] bytes, no C0 control character (U+0000 to U+001F, NUL, tab and
/// newline included) and no DEL (U+007F), since ids end up in file names, URLs, SQL rows and
/// logs. Any other Unicode text is an id. An [`ErrorKind::InvalidInput`](crate::ErrorKind)
/// error about `id` otherwise (see [`check_session_id_field`] to name another field).
pub fn check_session_id(id: &str) -> Result<()> {
    check_session_id_field("id", id)
}

/// [`check_session_id`], with the error naming `field` (`opts.id`).
pub fn check_session_id_field(field: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if id.len() > MAX_SESSION_ID_BYTES {
        return Err(Error::invalid(field, format!("the session id is {} bytes, more than {MAX_SESSION_ID_BYTES}", id.len())));
    }
    if let Some((at, c)) = id.char_indices().find(|(_, c)| c.is_ascii_control()) {
        return Err(Error::invalid(
            field,
            format!(
                "the session id holds the control character U+{:04X} at byte {at} (ids may not hold C0 control characters or DEL)",
                c as u32
            ),
        ));
    }
    Ok(())
}

/// A random id (32 hex digits) from the standard library's randomly seeded hasher.
pub fn random_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    for i in 0..2u64 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(now_ms() ^ (i << 32));
        h.write_usize(&out as *const String as usize);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// The id of a new session: the caller's (checked by [`check_session_id`]) or a random one.
pub fn new_id(id: Option<String>) -> Result<String> {
    match id {
        Some(id) => check_session_id(&id).map(|()| id),
        None => Ok(random_id()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn the_session_id_rule() {
        for ok in ["a", "scenario-session", "ünï/côdé id with spaces", &"x".repeat(MAX_SESSION_ID_BYTES)] {
            assert!(check_session_id(ok).is_ok(), "{ok:?}");
        }
        let bad = [
            (String::new(), "id: must not be empty"),
            ("x".repeat(MAX_SESSION_ID_BYTES + 1), "1025 bytes, more than 1024"),
            ("a\0b".to_string(), "U+0000 at byte 1"),
            ("a\tb".to_string(), "U+0009 at byte 1"),
            ("line\n".to_string(), "U+000A at byte 4"),
            ("\u{1b}[31m".to_string(), "U+001B at byte 0"),
            ("del\u{7f}".to_string(), "U+007F at byte 3"),
        ];
        for (id, needle) in &bad {
            let e = check_session_id(id).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.detail()["field"], "id");
            assert!(e.message().contains(needle), "{} lacks {needle:?}", e.message());
            assert_eq!(check_session_id_field("opts.id", id).unwrap_err().detail()["field"], "opts.id");
            assert_eq!(new_id(Some(id.clone())).unwrap_err().kind(), ErrorKind::InvalidInput);
        }
        let (a, b) = (random_id(), random_id());
        assert_ne!(a, b);
        assert!(a.len() == 32 && a.bytes().all(|c| c.is_ascii_hexdigit()) && check_session_id(&a).is_ok());
    }
}
