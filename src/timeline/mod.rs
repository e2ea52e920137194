//! Session timelines: the requests of a session as the provider billed them, in time, read from
//! our own log or, read-only, from other harnesses' transcripts (docs/simulate.md).
//!
//! A [`Timeline`] is what the cache clock's questions need and nothing more: for every request
//! its time, provider and model, its prompt as the provider billed it (uncached input, cache
//! read, cache write split by tier where known), its output tokens, what it was (a conversation
//! request, a summarisation request, a keep-warm request), and where a compaction replaced the
//! context before it. Three readers make one:
//!
//! - [`log`]: our own log, through the request walk ([`crate::request::RequestWalk`]) and the
//!   usage recorded with each response;
//! - [`claude_code`]: Claude Code's JSONL transcripts (`--from claude-code`);
//! - [`codex`]: Codex rollouts (`--from codex`).
//!
//! The transcripts are read, never written: a timeline is not a log, and nothing here makes one.
//! A line a reader cannot use is an error naming the line ([`ErrorKind::MalformedJson`] for a
//! line that is not JSON, [`ErrorKind::InvalidInput`] for one of the wrong shape); what a reader
//! leaves out on purpose (a response without usage, an error placeholder) is counted in
//! [`Timeline::notes`].
//!
//! [`simulate`] replays a timeline under the cache clock's policies; [`gaps`] prices every idle
//! gap of a timeline.

pub mod claude_code;
pub mod codex;
pub mod gaps;
pub mod log;
pub mod simulate;

use crate::error::{Error, ErrorKind, Result};
use crate::types::Usage;
use serde::Serialize;
use serde_json::Value;

/// What a request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestKind {
    /// A conversation request (a step of the agent, a sub-agent's step in its own timeline).
    Conversation,
    /// A summarisation request (compaction).
    Compaction,
    /// A keep-warm request a cache clock sent during a pause (our log only).
    Keepalive,
}

/// One request of a timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimedRequest {
    /// When it was sent, Unix milliseconds (see each reader for what its source records).
    pub time: u64,
    /// The provider (`anthropic`, `openai`, ...).
    pub provider: String,
    /// The model, as the source names it.
    pub model: String,
    /// What it was.
    pub kind: RequestKind,
    /// Its usage as the provider reported it: `input_tokens` is the uncached input,
    /// `cache_read_tokens` the cache reads, `cache_write_tokens` the cache writes (with their
    /// 5-minute and 1-hour split where the source has it; `None` where the provider reports no
    /// writes), `output_tokens` the output.
    pub usage: Usage,
    /// A compaction replaced the context before this request (the harness's own, recorded).
    pub compacted_before: bool,
    /// Where it comes from in the source (`line 12`, `seq 40`).
    pub at: String,
}

impl TimedRequest {
    /// The prompt tokens as billed: uncached input, cache reads and cache writes.
    pub fn prompt_tokens(&self) -> u64 {
        self.usage.prompt_tokens()
    }
}

/// Where a timeline was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// An llmsession log.
    Llmsession,
    /// A Claude Code JSONL transcript.
    ClaudeCode,
    /// A Codex rollout.
    Codex,
}

impl Source {
    /// The name `--from` takes (`llmsession` for our own log).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Llmsession => "llmsession",
            Source::ClaudeCode => "claude-code",
            Source::Codex => "codex",
        }
    }

    /// Parses a `--from` name.
    pub fn parse(s: &str) -> Result<Source> {
        match s {
            "llmsession" => Ok(Source::Llmsession),
            "claude-code" => Ok(Source::ClaudeCode),
            "codex" => Ok(Source::Codex),
            _ => Err(Error::invalid("from", format!("unknown transcript format {s:?} (expected claude-code or codex)"))),
        }
    }
}

/// A session's requests in time (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// Its source format.
    pub source: Source,
    /// The session id (the source's; a sub-agent's timeline adds its agent id).
    pub session: String,
    /// The requests, in time order.
    pub requests: Vec<TimedRequest>,
    /// What the reader left out on purpose, in words (one entry per kind, with its count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Timeline {
    /// The gaps between consecutive requests other than keep-warm requests, in milliseconds.
    pub fn gaps(&self) -> Vec<u64> {
        let times: Vec<u64> = self.requests.iter().filter(|r| r.kind != RequestKind::Keepalive).map(|r| r.time).collect();
        times.windows(2).map(|w| w[1].saturating_sub(w[0])).collect()
    }
}

/// Reads the timelines of one transcript or log given as bytes: our own log (`Llmsession`, one
/// timeline), a Claude Code transcript (its main conversation, then one timeline per
/// sub-agent), a Codex rollout (one).
pub fn read(source: Source, bytes: &[u8]) -> Result<Vec<Timeline>> {
    match source {
        Source::Llmsession => Ok(vec![log::read_records(&split_lines(bytes))?]),
        Source::ClaudeCode => claude_code::read(bytes),
        Source::Codex => Ok(vec![codex::read(bytes)?]),
    }
}

/// The non-empty lines of a JSONL text, as records.
fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)).map(<[u8]>::to_vec).collect()
}

/// The lines of a JSONL transcript, each parsed, with its 1-based line number; blank lines are
/// skipped. A line that is not JSON, or not a JSON object, is [`ErrorKind::MalformedJson`]
/// naming it.
pub(crate) fn jsonl_lines(bytes: &[u8]) -> Result<Vec<(usize, Value)>> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: Value = serde_json::from_slice(line)
            .map_err(|e| Error::new(ErrorKind::MalformedJson, format!("line {n}: not JSON: {e}")).with("line", n as u64))?;
        if !v.is_object() {
            return Err(Error::new(ErrorKind::MalformedJson, format!("line {n}: expected a JSON object")).with("line", n as u64));
        }
        out.push((n, v));
    }
    Ok(out)
}

/// An error about line `n`'s field `field`.
pub(crate) fn bad_line(n: usize, field: &str, why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("line {n}: {field}: {why}")).with("line", n as u64)
}

/// A token count at `v[key]`, if present: a non-negative integer, else an error naming the line
/// and field.
pub(crate) fn tokens(n: usize, v: &Value, path: &str, key: &str) -> Result<Option<u64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => {
            x.as_u64().map(Some).ok_or_else(|| bad_line(n, &format!("{path}.{key}"), "expected a non-negative integer (a token count)"))
        }
    }
}

/// Parses an RFC 3339 timestamp (`2025-06-08T10:47:08.446Z`, `2025-06-08T12:47:08+02:00`) into
/// Unix milliseconds. `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 3)];
        ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let m = num(i + 1, 2)? * 60 + num(i + 4, 2)?;
            if *sign == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), Howard Hinnant's algorithm.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_to_unix_milliseconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2025-06-08T10:47:08.446Z"), Some(1_749_379_628_446));
        assert_eq!(parse_rfc3339("2025-06-08T12:47:08.446+02:00"), Some(1_749_379_628_446));
        assert_eq!(parse_rfc3339("2025-06-08T10:47:08.4Z"), Some(1_749_379_628_400));
        assert_eq!(parse_rfc3339("2025-06-08T10:47:08.446123Z"), Some(1_749_379_628_446));
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(1_709_164_800_000));
        for bad in ["", "yesterday", "2025-06-08", "2025-13-08T10:47:08Z", "2025-06-08T10:47:08", "2025-06-08T10:47:08.Z"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_line_that_is_not_json_is_named() {
        let e = jsonl_lines(b"{\"a\":1}\n\n{oops\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedJson);
        assert!(e.message().starts_with("line 3: not JSON:"), "{}", e.message());
        let e = jsonl_lines(b"[1,2]\n").unwrap_err();
        assert_eq!(e.message(), "line 1: expected a JSON object");
    }
}
