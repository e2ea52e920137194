//! A stored record read straight from its bytes, when it is in the form this library writes.
//!
//! This library writes a record as `serde_json`'s compact output of the event: the envelope
//! `{"type":T,"seq":N,"time":N,"data":{…}`, then `,"surfaceOp":"append"` on a model-visible
//! event appended to the surface and `,"chain":"…"` in a version 2 log, then `}`. Inside `data`
//! every object's keys are in increasing order (the library's maps are sorted), there is no
//! whitespace, strings are escaped as `serde_json` escapes them (`\"`, `\\`, `\b`, `\f`, `\n`,
//! `\r`, `\t`, and `\u00xx` for the other control characters; nothing else), and numbers are
//! integers written plainly.
//!
//! [`read`] checks, in one pass over the bytes, that a record is exactly that: valid JSON, and
//! the bytes `serde_json` writes for the value it parses to (the **canonical form**). For such a
//! record every part is, byte for byte, what serialising the parsed value of that part writes,
//! so what the log keeps of it (the record as its line, a visible event's derived message) can be
//! taken from its bytes, without parsing it into values and writing them again
//! ([`crate::log::project`]). Anything else (another writer's key order, whitespace or escapes,
//! a float, a duplicate key, a replace, a record nested deeper than [`MAX_DEPTH`]) gives `None`,
//! and the caller reads the record the long way, which accepts what it accepted before and
//! reports what it reported before.

use std::borrow::Cow;

/// The deepest nesting [`read`] follows (the envelope is level 1). Deeper records are read the
/// long way, which refuses data nested deeper than `crate::log::rules::MAX_DATA_DEPTH`.
pub(crate) const MAX_DEPTH: usize = 64;

/// The members of a JSON object, in order: each key (which holds no escape) and its value's text.
pub(crate) type Members<'a> = Vec<(&'a str, &'a str)>;

/// An event record in canonical form (see the module docs), as [`read`] found it.
#[derive(Debug)]
pub(crate) struct RawEvent<'a> {
    /// The event type (non-empty, without escapes).
    pub ty: &'a str,
    /// The seq.
    pub seq: u64,
    /// The time.
    pub time: u64,
    /// The data object's members.
    pub data: Members<'a>,
    /// Whether the record carries `"surfaceOp":"append"`.
    pub append: bool,
    /// Whether the record ends with a `chain` member.
    pub chained: bool,
}

/// The record `rec` when it is an event record in canonical form, with the envelope's fields
/// and the data object's members; `None` for anything else.
pub(crate) fn read(rec: &str) -> Option<RawEvent<'_>> {
    let b = rec.as_bytes();
    let mut i = expect(b, 0, b"{\"type\":")?;
    let (end, escaped) = string(b, i)?;
    if escaped || end == i + 2 {
        return None;
    }
    let ty = &rec[i + 1..end - 1];
    i = expect(b, end, b",\"seq\":")?;
    let (seq, at) = unsigned(rec, i)?;
    i = expect(b, at, b",\"time\":")?;
    let (time, at) = unsigned(rec, i)?;
    i = expect(b, at, b",\"data\":")?;
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut data = Vec::with_capacity(6);
    let data_end = object(b, i, 2, Some((rec, &mut data)))?;
    i = data_end;
    const APPEND: &[u8] = b",\"surfaceOp\":\"append\"";
    let append = b[i..].starts_with(APPEND);
    if append {
        i += APPEND.len();
    }
    let chained = b[i..].starts_with(b",\"chain\":\"");
    if chained {
        i = string(b, i + 9)?.0;
    }
    (b.get(i) == Some(&b'}') && i + 1 == b.len()).then_some(RawEvent { ty, seq, time, data, append, chained })
}

fn expect(b: &[u8], i: usize, what: &[u8]) -> Option<usize> {
    b.get(i..)?.starts_with(what).then_some(i + what.len())
}

/// A non-negative integer in canonical form at `i`, and where it ends.
fn unsigned(s: &str, i: usize) -> Option<(u64, usize)> {
    let end = number(s.as_bytes(), i)?;
    let n = s.get(i..end)?.parse().ok()?;
    Some((n, end))
}

/// The end of the canonical integer at `i`: `0` or `-?[1-9][0-9]*` within what `serde_json`
/// keeps an integer (`u64`, or `i64` when negative), not followed by a fraction or an exponent
/// (a float is read the long way: its canonical text is `ryu`'s).
fn number(b: &[u8], i: usize) -> Option<usize> {
    let neg = b.get(i) == Some(&b'-');
    let start = i + neg as usize;
    let digits = b.get(start..)?.iter().take_while(|c| c.is_ascii_digit()).count();
    let end = start + digits;
    let text = &b[start..end];
    // The largest magnitude of each sign, compared as text of the same length.
    let limit: &[u8] = if neg { b"9223372036854775808" } else { b"18446744073709551615" };
    let ok = match (digits, text.first()) {
        (0, _) => false,
        (1, Some(b'0')) => !neg,
        (_, Some(b'0')) => false,
        (n, _) => n < limit.len() || (n == limit.len() && text <= limit),
    };
    (ok && !matches!(b.get(end), Some(b'.' | b'e' | b'E'))).then_some(end)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `w` that end a run of plain string text: a quote, a backslash or a control
/// character (the lowest flagged byte is always a true one).
fn specials(w: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    zero(w ^ (ONES * b'"' as u64)) | zero(w ^ (ONES * b'\\' as u64)) | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
}

/// The end (exclusive) of the canonical string at `i` (its opening quote), and whether it holds
/// an escape; `None` when there is no string at `i` (a record whose `type` is not a string, for
/// one: the long way then says what is wrong).
fn string(b: &[u8], i: usize) -> Option<(usize, bool)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        while let Some(chunk) = b.get(j..j + 8) {
            let m = specials(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
            if m != 0 {
                j += (m.trailing_zeros() / 8) as usize;
                break;
            }
            j += 8;
        }
        match *b.get(j)? {
            b'"' => return Some((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                j = escape(b, j)?;
            }
            0..=0x1f => return None,
            _ => j += 1,
        }
    }
}

/// The end of the escape at `i` (its backslash) when it is one `serde_json` writes: `\"`, `\\`,
/// `\b`, `\f`, `\n`, `\r`, `\t`, or `\u00xx` (lowercase) for another control character.
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => {
            let h = b.get(i + 2..i + 6)?;
            let low = match h[3] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            let c = match (h[0], h[1], h[2]) {
                (b'0', b'0', b'0') => low,
                (b'0', b'0', b'1') => 16 + low,
                _ => return None,
            };
            (!matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)).then_some(i + 6)
        }
        _ => None,
    }
}

/// The end of the canonical value at `i`, `depth` being the level of the value that holds it.
fn value(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string(b, i).map(|(end, _)| end),
        b'{' => object(b, i, depth + 1, None),
        b'[' => array(b, i, depth + 1),
        b't' => expect(b, i, b"true"),
        b'f' => expect(b, i, b"false"),
        b'n' => expect(b, i, b"null"),
        b'-' | b'0'..=b'9' => number(b, i),
        _ => None,
    }
}

/// The end of the canonical object at `i` (at level `depth`): keys without escapes, in strictly
/// increasing order. With `members`, its members are pushed there.
fn object<'a>(b: &[u8], i: usize, depth: usize, mut members: Option<(&'a str, &mut Members<'a>)>) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut j = i + 1;
    if b.get(j) == Some(&b'}') {
        return Some(j + 1);
    }
    let mut prev: Option<&[u8]> = None;
    loop {
        if b.get(j) != Some(&b'"') {
            return None;
        }
        let (kend, escaped) = string(b, j)?;
        let key = &b[j + 1..kend - 1];
        if escaped || prev.is_some_and(|p| p >= key) || b.get(kend) != Some(&b':') {
            return None;
        }
        prev = Some(key);
        let vend = value(b, kend + 1, depth)?;
        if let Some((text, out)) = members.as_mut() {
            out.push((&text[j + 1..kend - 1], &text[kend + 1..vend]));
        }
        match *b.get(vend)? {
            b',' => j = vend + 1,
            b'}' => return Some(vend + 1),
            _ => return None,
        }
    }
}

/// The end of the canonical array at `i` (at level `depth`).
fn array(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut j = i + 1;
    if b.get(j) == Some(&b']') {
        return Some(j + 1);
    }
    loop {
        let end = value(b, j, depth)?;
        match *b.get(end)? {
            b',' => j = end + 1,
            b']' => return Some(end + 1),
            _ => return None,
        }
    }
}

// The readers below take parts of a record that `read` found canonical: they only split it.

/// The end of the value at `i` of a canonical text.
fn skip(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => {
            // The next quote that an even number of backslashes precedes (a text's escapes are
            // many, its escaped quotes few).
            let mut j = i + 1;
            loop {
                let k = j + memchr::memchr(b'"', b.get(j..)?)?;
                if b[j..k].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0 {
                    return Some(k + 1);
                }
                j = k + 1;
            }
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = skip(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let n = b[i..].iter().position(|&c| matches!(c, b',' | b'}' | b']'))?;
            (n > 0).then_some(i + n)
        }
    }
}

/// The members of the object `v` (a part of a canonical record); `None` when `v` is not an
/// object.
pub(crate) fn members(v: &str) -> Option<Members<'_>> {
    members_at(v, 0).map(|(m, _)| m)
}

/// The members of the object at `at` in `v`, and where it ends.
fn members_at(v: &str, at: usize) -> Option<(Members<'_>, usize)> {
    let b = v.as_bytes();
    if b.get(at) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::with_capacity(4);
    let mut j = at + 1;
    if b.get(j) == Some(&b'}') {
        return Some((out, j + 1));
    }
    loop {
        let kend = skip(b, j)?;
        let vend = skip(b, kend + 1)?;
        out.push((&v[j + 1..kend - 1], &v[kend + 1..vend]));
        match *b.get(vend)? {
            b',' => j = vend + 1,
            _ => return Some((out, vend + 1)),
        }
    }
}

/// The members of each element of the array `v` (a part of a canonical record), read in one
/// pass: the blocks of a message's content, each with its text. `None` when `v` is not an array
/// or an element is not an object.
pub(crate) fn blocks(v: &str) -> Option<Vec<(&str, Members<'_>)>> {
    let b = v.as_bytes();
    if b.first() != Some(&b'[') {
        return None;
    }
    let mut out = Vec::with_capacity(2);
    let mut j = 1;
    if b.get(j) == Some(&b']') {
        return Some(out);
    }
    loop {
        let (m, end) = members_at(v, j)?;
        out.push((&v[j..end], m));
        match *b.get(end)? {
            b',' => j = end + 1,
            _ => return Some(out),
        }
    }
}

/// The elements of the array `v` (a part of a canonical record); `None` when `v` is not an
/// array.
pub(crate) fn elements(v: &str) -> Option<Vec<&str>> {
    let b = v.as_bytes();
    if b.first() != Some(&b'[') {
        return None;
    }
    let mut out = Vec::with_capacity(4);
    let mut j = 1;
    if b.get(j) == Some(&b']') {
        return Some(out);
    }
    loop {
        let end = skip(b, j)?;
        out.push(&v[j..end]);
        match *b.get(end)? {
            b',' => j = end + 1,
            _ => return Some(out),
        }
    }
}

/// The member `key` of `m`.
pub(crate) fn get<'a>(m: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    m.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The value `v` (a part of a canonical record) stands for. Strings without escapes, integers,
/// `true`, `false` and `null` are taken from their text at once (in canonical form the text is
/// exactly the value); the rest is parsed.
pub(crate) fn value_of(v: &str) -> Option<serde_json::Value> {
    use serde_json::Value;
    match v.as_bytes().first()? {
        b'"' => match v[1..].strip_suffix('"') {
            Some(inner) if !inner.contains('\\') => Some(Value::String(inner.to_string())),
            _ => serde_json::from_str(v).ok(),
        },
        b'0'..=b'9' => v.parse::<u64>().ok().map(Value::from),
        b'-' => v.parse::<i64>().ok().map(Value::from),
        b't' if v == "true" => Some(Value::Bool(true)),
        b'f' if v == "false" => Some(Value::Bool(false)),
        b'n' if v == "null" => Some(Value::Null),
        _ => serde_json::from_str(v).ok(),
    }
}

/// The string value `v` (a part of a canonical record) stands for; `None` when it is not a
/// string.
pub(crate) fn str_value(v: &str) -> Option<Cow<'_, str>> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(v).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// What `read` accepts is exactly what serde_json writes for the value it parses to.
    #[test]
    fn the_canonical_form_is_what_serde_json_writes() {
        let datas = [
            json!({}),
            json!({"a": 1, "b": [true, false, null, -5, 0, 18446744073709551615u64], "c": {"z": "", "é": "x"}}),
            json!({"text": "quote \" backslash \\ newline \n tab \t cr \r bs \u{8} ff \u{c} nul \u{0} us \u{1f} del \u{7f} é ✓ 𝄞 /"}),
            json!({"deep": [[[[{"a": [{}]}]]]], "min": i64::MIN, "max": u64::MAX}),
            json!({"a": true, "b": false, "c": null, "d": "", "e": -1, "f": 0, "g": "\\", "h": {}, "i": []}),
        ];
        for d in &datas {
            let rec = format!("{{\"type\":\"x\",\"seq\":3,\"time\":4,\"data\":{},\"chain\":\"ab\"}}", serde_json::to_string(d).unwrap());
            let r = read(&rec).unwrap_or_else(|| panic!("{rec}"));
            assert_eq!((r.ty, r.seq, r.time, r.append, r.chained), ("x", 3, 4, false, true));
            let m = d.as_object().unwrap();
            assert_eq!(r.data.len(), m.len());
            for ((k, v), (wk, wv)) in r.data.iter().zip(m) {
                assert_eq!((*k, *v), (wk.as_str(), serde_json::to_string(wv).unwrap().as_str()));
                assert_eq!(value_of(v).as_ref(), Some(wv), "the value of {v}");
            }
        }
        let appended = "{\"type\":\"tool/result\",\"seq\":0,\"time\":0,\"data\":{},\"surfaceOp\":\"append\"}";
        assert!(read(appended).is_some_and(|r| r.append && !r.chained));
    }

    /// Everything that is not the canonical form is refused (and read the long way), whether
    /// it is valid JSON or not.
    #[test]
    fn anything_else_is_refused() {
        let data = [
            r#"{"b":1,"a":2}"#,              // key order
            r#"{"a":1,"a":2}"#,              // a duplicate key
            r#"{"a": 1}"#,                   // whitespace
            r#"{"a":"\/"}"#,                 // an escape serde_json does not write
            r#"{"a":"\u0041"}"#,             // a needless \u escape
            r#"{"a":"\u000a"}"#,             // \n written as \u
            r#"{"a":"\u001F"}"#,             // uppercase hex
            "{\"a\":\"\u{1}\"}",             // a raw control character
            r#"{"a":-0}"#,                   // negative zero
            r#"{"a":01}"#,                   // a leading zero
            r#"{"a":18446744073709551616}"#, // past u64
            r#"{"a":-9223372036854775809}"#, // past i64
            r#"{"a":tru}"#,                  // not JSON
            r#"{"a":"x}"#,                   // an unterminated string
            r#"{"a\u0062":1}"#,              // an escaped key
            r#"{"a":[1,]}"#,                 // a trailing comma
        ];
        for d in data {
            let rec = format!("{{\"type\":\"x\",\"seq\":3,\"time\":4,\"data\":{d}}}");
            assert!(read(&rec).is_none(), "{rec}");
            if let Ok(v) = serde_json::from_str::<Value>(d) {
                assert_ne!(serde_json::to_string(&v).unwrap(), d, "{d} is canonical after all");
            }
        }
        // Floats, and data that is not an object, are read the long way, canonical or not.
        for d in [r#"{"a":1.0}"#, r#"{"a":1e3}"#, r#"{"a":-2.5}"#, "[]", "7"] {
            assert!(read(&format!("{{\"type\":\"x\",\"seq\":3,\"time\":4,\"data\":{d}}}")).is_none(), "{d}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(read(&format!("{{\"type\":\"x\",\"seq\":3,\"time\":4,\"data\":{{\"a\":{deep}}}}}")).is_none());
        for rec in [
            r#"{"seq":3,"type":"x","time":4,"data":{}}"#,                              // envelope order
            r#"{"type":"","seq":3,"time":4,"data":{}}"#,                               // an empty type
            r#"{"type":"x","seq":-3,"time":4,"data":{}}"#,                             // a negative seq
            r#"{"type":"x","seq":3,"time":4,"data":{},"sources":[1]}"#,                // sources
            r#"{"type":"x","seq":3,"time":4,"data":{},"surfaceOp":{"op":"replace"}}"#, // a replace
            r#"{"type":"x","seq":3,"time":4,"data":{}} "#,                             // trailing bytes
            r#"{"type":"x","seq":3,"time":4,"data":{},"other":1}"#,                    // another member
            r#"{"type":"x","seq":3,"time":4}"#,                                        // no data
            r#"{"type":5,"seq":0,"time":4,"data":{}}"#,                                // a type that is not a string (fuzz-smoke)
            r#"{"type":"x","seq":3,"time":4,"data":{},"chain":5}"#,                    // a chain that is not a string
        ] {
            assert!(read(rec).is_none(), "{rec}");
        }
    }

    #[test]
    fn parts_split_and_strings_unescape() {
        let m = members(r#"{"a":"x,}\"","b":[1,{"c":"]"}],"d":{}}"#).unwrap();
        assert_eq!(m, vec![("a", r#""x,}\"""#), ("b", r#"[1,{"c":"]"}]"#), ("d", "{}")]);
        assert_eq!(elements(r#"[1,"a]",{"b":[2]},[]]"#).unwrap(), vec!["1", r#""a]""#, r#"{"b":[2]}"#, "[]"]);
        assert_eq!(elements("[]").unwrap(), Vec::<&str>::new());
        assert!(members("[]").is_none() && elements("{}").is_none());
        let b = blocks(r#"[{"a":"}],{"},{},{"b":[{"c":1}]}]"#).unwrap();
        assert_eq!(b.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![r#"{"a":"}],{"}"#, "{}", r#"{"b":[{"c":1}]}"#]);
        assert_eq!(b[0].1, vec![("a", r#""}],{""#)]);
        assert_eq!(blocks("[]").unwrap().len(), 0);
        assert!(blocks("[1]").is_none() && blocks("{}").is_none());
        assert_eq!(str_value(r#""plain""#).as_deref(), Some("plain"));
        assert_eq!(str_value(r#""a\"b\n""#).as_deref(), Some("a\"b\n"));
        assert_eq!(str_value("1"), None);
    }
}
