//! Claude Code's JSONL transcripts (`~/.claude/projects/<project>/<session>.jsonl`) as
//! timelines, read-only.
//!
//! What the reader takes from each line (`type`, `timestamp`, `isSidechain`, `agentId`, `uuid`,
//! `parentUuid`, and for `assistant` lines `message.id`, `message.model`, `message.usage`,
//! `requestId`):
//!
//! - **One request per API response.** Claude Code writes one line per content block of a
//!   response, each with the response's `message.id`, `requestId` and usage: the lines of one
//!   response are one request (keyed by `message.id`, else `requestId`, else the line's
//!   `uuid`). Its time is the first of its lines' `timestamp`s (Claude Code stamps a line when it
//!   writes it, as the response streams: the gaps between requests are measured between those
//!   first lines). Its usage is the last line's, with the largest `output_tokens` of its lines
//!   (early lines may carry a partial output count).
//! - **Usage as Anthropic bills it**: `input_tokens` (uncached), `cache_read_input_tokens`,
//!   `cache_creation_input_tokens` with its split `cache_creation.ephemeral_5m_input_tokens` /
//!   `ephemeral_1h_input_tokens` where the transcript has it (older versions write no split: the
//!   writes are then the cache rule's default tier, 5 minutes), `output_tokens`. The provider is
//!   `anthropic`, the model `message.model`.
//! - **Sub-agents are timelines of their own.** A sub-agent (the Task tool) runs its own
//!   conversation with its own system prompt: its requests never read the main conversation's
//!   cache, nor the main conversation theirs, so mixing them into one timeline would make every
//!   switch look like a miss. Lines with `isSidechain: true` are grouped by `agentId` (newer
//!   versions, and sub-agent files `agent-*.jsonl`), else by the first line of their
//!   `parentUuid` chain (each sub-agent conversation starts a chain of its own); each group is
//!   a timeline named `<session>/agent-<id>`, after the main one.
//! - **Compactions**: a `system` line with `subtype: "compact_boundary"`, or a `user` line with
//!   `isCompactSummary: true`, marks the next request of its timeline as `compacted_before`.
//! - **Left out**, counted in the notes: responses whose model is `<synthetic>` (placeholders
//!   Claude Code writes for an error or an interruption, not billed), and `assistant` lines
//!   without usage. Every other line type (user messages, tool results, summaries, file
//!   snapshots, ...) carries no request and is skipped silently.
//!
//! A line that is not a JSON object, a `timestamp` that is not RFC 3339, an `assistant` line
//! without `message`, or a usage field that is not a token count is an error naming the line.

use super::{bad_line, jsonl_lines, parse_rfc3339, tokens, RequestKind, Source, TimedRequest, Timeline};
use crate::error::Result;
use crate::types::Usage;
use serde_json::Value;
use std::collections::HashMap;

/// One lineage (the main conversation or one sub-agent) being read.
#[derive(Default)]
struct Lineage {
    name: String,
    requests: Vec<TimedRequest>,
    by_id: HashMap<String, usize>,
    compacted: bool,
}

fn usage_of(n: usize, u: &Value) -> Result<Usage> {
    let p = "message.usage";
    if !u.is_object() {
        return Err(bad_line(n, p, "expected an object"));
    }
    let input = tokens(n, u, p, "input_tokens")?.unwrap_or(0);
    let output = tokens(n, u, p, "output_tokens")?.unwrap_or(0);
    let read = tokens(n, u, p, "cache_read_input_tokens")?;
    let write = tokens(n, u, p, "cache_creation_input_tokens")?;
    let (w5, w1) = match u.get("cache_creation") {
        None | Some(Value::Null) => (None, None),
        Some(c) => {
            let cp = format!("{p}.cache_creation");
            if !c.is_object() {
                return Err(bad_line(n, &cp, "expected an object"));
            }
            (tokens(n, c, &cp, "ephemeral_5m_input_tokens")?, tokens(n, c, &cp, "ephemeral_1h_input_tokens")?)
        }
    };
    Ok(Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: Some(read.unwrap_or(0)),
        cache_write_tokens: Some(write.unwrap_or(0)),
        cache_write_5m_tokens: w5,
        cache_write_1h_tokens: w1,
        ..Default::default()
    })
}

/// The first line of `uuid`'s `parentUuid` chain (memoised).
fn root<'a>(uuid: &'a str, parents: &HashMap<&'a str, &'a str>, memo: &mut HashMap<&'a str, &'a str>) -> &'a str {
    let mut chain = vec![uuid];
    let mut cur = uuid;
    let found = loop {
        if let Some(r) = memo.get(cur) {
            break *r;
        }
        match parents.get(cur) {
            Some(p) if !chain.contains(p) => {
                cur = p;
                chain.push(cur);
            }
            _ => break cur,
        }
    };
    for c in chain {
        memo.insert(c, found);
    }
    found
}

/// Reads a transcript: the main conversation's timeline first (possibly empty), then one per
/// sub-agent that made a request.
pub fn read(bytes: &[u8]) -> Result<Vec<Timeline>> {
    let lines = jsonl_lines(bytes)?;
    let mut session = String::new();
    let mut parents: HashMap<&str, &str> = HashMap::new();
    for (_, v) in &lines {
        if session.is_empty() {
            if let Some(s) = v.get("sessionId").and_then(Value::as_str) {
                session = s.to_string();
            }
        }
        if let (Some(u), Some(p)) = (v.get("uuid").and_then(Value::as_str), v.get("parentUuid").and_then(Value::as_str)) {
            parents.insert(u, p);
        }
    }
    let mut memo = HashMap::new();
    let mut lineages: Vec<Lineage> = vec![Lineage { name: session.clone(), ..Default::default() }];
    let mut index: HashMap<String, usize> = HashMap::new();
    let (mut synthetic, mut no_usage) = (0u64, 0u64);
    for (n, v) in &lines {
        let n = *n;
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        let sidechain = v.get("isSidechain").and_then(Value::as_bool).unwrap_or(false);
        let lineage = if sidechain {
            let key = match v.get("agentId").and_then(Value::as_str) {
                Some(a) => a.to_string(),
                None => {
                    let uuid = v.get("uuid").and_then(Value::as_str).unwrap_or("");
                    let r = root(uuid, &parents, &mut memo);
                    r.chars().take(8).collect()
                }
            };
            *index.entry(key.clone()).or_insert_with(|| {
                lineages.push(Lineage { name: format!("{session}/agent-{key}"), ..Default::default() });
                lineages.len() - 1
            })
        } else {
            0
        };
        let compact_line = (ty == "system" && v.get("subtype").and_then(Value::as_str) == Some("compact_boundary"))
            || (ty == "user" && v.get("isCompactSummary").and_then(Value::as_bool) == Some(true));
        if compact_line {
            lineages[lineage].compacted = true;
            continue;
        }
        if ty != "assistant" {
            continue;
        }
        let time = match v.get("timestamp") {
            Some(Value::String(s)) => parse_rfc3339(s).ok_or_else(|| bad_line(n, "timestamp", format!("{s:?} is not an RFC 3339 time")))?,
            _ => return Err(bad_line(n, "timestamp", "is required on an assistant line (an RFC 3339 time)")),
        };
        let Some(message) = v.get("message").filter(|m| m.is_object()) else {
            return Err(bad_line(n, "message", "an assistant line needs its message (an object)"));
        };
        let model = message.get("model").and_then(Value::as_str).unwrap_or("");
        if model == "<synthetic>" {
            synthetic += 1;
            continue;
        }
        let Some(u) = message.get("usage").filter(|u| !u.is_null()) else {
            no_usage += 1;
            continue;
        };
        let usage = usage_of(n, u)?;
        let id = message
            .get("id")
            .and_then(Value::as_str)
            .or_else(|| v.get("requestId").and_then(Value::as_str))
            .or_else(|| v.get("uuid").and_then(Value::as_str))
            .map(str::to_string)
            .unwrap_or_else(|| format!("line {n}"));
        let l = &mut lineages[lineage];
        match l.by_id.get(&id) {
            Some(&i) => {
                let r = &mut l.requests[i];
                let output = r.usage.output_tokens.max(usage.output_tokens);
                r.usage = Usage { output_tokens: output, ..usage };
            }
            None => {
                l.by_id.insert(id, l.requests.len());
                let compacted_before = std::mem::take(&mut l.compacted);
                l.requests.push(TimedRequest {
                    time,
                    provider: "anthropic".into(),
                    model: model.to_string(),
                    kind: RequestKind::Conversation,
                    usage,
                    compacted_before,
                    at: format!("line {n}"),
                });
            }
        }
    }
    let mut notes = Vec::new();
    if synthetic > 0 {
        notes.push(format!("{synthetic} <synthetic> assistant line(s) left out (error or interruption placeholders, not billed)"));
    }
    if no_usage > 0 {
        notes.push(format!("{no_usage} assistant line(s) without usage left out"));
    }
    let subagents = lineages.len() - 1;
    let mut out = Vec::new();
    for (i, mut l) in lineages.into_iter().enumerate() {
        if i > 0 && l.requests.is_empty() {
            continue;
        }
        l.requests.sort_by_key(|r| r.time);
        let mut notes = if i == 0 { notes.clone() } else { Vec::new() };
        if i == 0 && subagents > 0 {
            notes.push(format!("{subagents} sub-agent conversation(s) read as timelines of their own"));
        }
        out.push(Timeline { source: Source::ClaudeCode, session: l.name, requests: l.requests, notes });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// An assistant line in Claude Code's shape (written from the format: one line per content
    /// block, each with the response's id and usage).
    fn asst(uuid: &str, parent: &str, ts: &str, id: &str, usage: &str, side: bool) -> String {
        format!(
            r#"{{"parentUuid":"{parent}","isSidechain":{side},"userType":"external","cwd":"/p","sessionId":"s-1","version":"1.0.90","type":"assistant","uuid":"{uuid}","timestamp":"{ts}","requestId":"req_{id}","message":{{"id":"msg_{id}","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{{"type":"text","text":"ok"}}],"usage":{usage}}}}}"#
        )
    }

    fn user(uuid: &str, parent: Option<&str>, ts: &str, side: bool) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
        format!(
            r#"{{"parentUuid":{parent},"isSidechain":{side},"type":"user","sessionId":"s-1","uuid":"{uuid}","timestamp":"{ts}","message":{{"role":"user","content":"go"}}}}"#
        )
    }

    const U1: &str = r#"{"input_tokens":3,"cache_creation_input_tokens":4000,"cache_read_input_tokens":10000,"cache_creation":{"ephemeral_5m_input_tokens":4000,"ephemeral_1h_input_tokens":0},"output_tokens":2}"#;
    const U1_END: &str = r#"{"input_tokens":3,"cache_creation_input_tokens":4000,"cache_read_input_tokens":10000,"cache_creation":{"ephemeral_5m_input_tokens":4000,"ephemeral_1h_input_tokens":0},"output_tokens":180}"#;
    const U2: &str = r#"{"input_tokens":5,"cache_creation_input_tokens":300,"cache_read_input_tokens":14000,"output_tokens":40}"#;

    #[test]
    fn the_lines_of_one_response_are_one_request() {
        let text = [
            r#"{"type":"summary","summary":"A title","leafUuid":"x"}"#.to_string(),
            user("u1", None, "2025-09-01T10:00:00.000Z", false),
            asst("a1", "u1", "2025-09-01T10:00:02.000Z", "A", U1, false),
            asst("a2", "a1", "2025-09-01T10:00:03.500Z", "A", U1_END, false),
            user("u2", Some("a2"), "2025-09-01T10:06:00.000Z", false),
            asst("a3", "u2", "2025-09-01T10:06:04.000Z", "B", U2, false),
        ]
        .join("\n");
        let t = read(text.as_bytes()).unwrap();
        assert_eq!(t.len(), 1);
        let t = &t[0];
        assert_eq!(t.source, Source::ClaudeCode);
        assert_eq!(t.session, "s-1");
        assert_eq!(t.requests.len(), 2);
        let r = &t.requests[0];
        assert_eq!(r.time, parse_rfc3339("2025-09-01T10:00:02.000Z").unwrap());
        assert_eq!((r.usage.input_tokens, r.usage.cache_read_tokens, r.usage.cache_write_tokens), (3, Some(10_000), Some(4_000)));
        assert_eq!((r.usage.cache_write_5m_tokens, r.usage.cache_write_1h_tokens), (Some(4_000), Some(0)));
        assert_eq!(r.usage.output_tokens, 180, "the largest output count of the response's lines");
        assert_eq!((r.provider.as_str(), r.model.as_str(), r.at.as_str()), ("anthropic", "claude-sonnet-4-5-20250929", "line 3"));
        // No split in older versions: the writes are left unsplit.
        assert_eq!(t.requests[1].usage.cache_write_5m_tokens, None);
        assert_eq!(t.gaps(), vec![362_000]);
    }

    #[test]
    fn sub_agents_are_timelines_of_their_own() {
        let text = [
            user("u1", None, "2025-09-01T10:00:00.000Z", false),
            asst("a1", "u1", "2025-09-01T10:00:02.000Z", "A", U1, false),
            // A sub-agent without agentId (older versions): its chain starts at s1.
            user("s1", None, "2025-09-01T10:00:05.000Z", true),
            asst("s2", "s1", "2025-09-01T10:00:07.000Z", "S1", U2, true),
            asst("s3", "s2", "2025-09-01T10:00:09.000Z", "S2", U2, true),
            // A sub-agent with agentId.
            r#"{"isSidechain":true,"agentId":"a77","type":"assistant","uuid":"x1","timestamp":"2025-09-01T10:00:10.000Z","message":{"id":"msg_X","model":"claude-haiku-4-5","usage":{"input_tokens":9,"output_tokens":1}}}"#.to_string(),
            asst("a3", "a1", "2025-09-01T10:01:00.000Z", "B", U2, false),
        ]
        .join("\n");
        let t = read(text.as_bytes()).unwrap();
        let names: Vec<(&str, usize)> = t.iter().map(|t| (t.session.as_str(), t.requests.len())).collect();
        assert_eq!(names, vec![("s-1", 2), ("s-1/agent-s1", 2), ("s-1/agent-a77", 1)]);
        assert!(t[0].notes.iter().any(|n| n == "2 sub-agent conversation(s) read as timelines of their own"), "{:?}", t[0].notes);
        assert_eq!(t[2].requests[0].model, "claude-haiku-4-5");
    }

    #[test]
    fn compactions_and_placeholders_are_marked_and_counted() {
        let text = [
            asst("a1", "u0", "2025-09-01T10:00:02.000Z", "A", U1, false),
            r#"{"type":"system","subtype":"compact_boundary","content":"Conversation compacted","timestamp":"2025-09-01T10:30:00.000Z","isSidechain":false}"#.to_string(),
            r#"{"type":"assistant","timestamp":"2025-09-01T10:30:01.000Z","isSidechain":false,"message":{"id":"msg_E","model":"<synthetic>","usage":{"input_tokens":0,"output_tokens":0}}}"#.to_string(),
            r#"{"type":"assistant","timestamp":"2025-09-01T10:30:01.000Z","isSidechain":false,"message":{"id":"msg_F","model":"claude-sonnet-4-5"}}"#.to_string(),
            asst("a3", "a2", "2025-09-01T10:30:05.000Z", "B", U2, false),
        ]
        .join("\n");
        let t = read(text.as_bytes()).unwrap();
        let t = &t[0];
        assert_eq!(t.requests.len(), 2);
        assert!(!t.requests[0].compacted_before);
        assert!(t.requests[1].compacted_before);
        assert_eq!(
            t.notes,
            vec![
                "1 <synthetic> assistant line(s) left out (error or interruption placeholders, not billed)".to_string(),
                "1 assistant line(s) without usage left out".to_string()
            ]
        );
    }

    #[test]
    fn malformed_lines_are_named() {
        let ok = asst("a1", "u0", "2025-09-01T10:00:02.000Z", "A", U1, false);
        for (line, kind, msg) in [
            ("{not json".to_string(), ErrorKind::MalformedJson, "line 2: not JSON"),
            (
                ok.replace("2025-09-01T10:00:02.000Z", "yesterday"),
                ErrorKind::InvalidInput,
                "line 2: timestamp: \"yesterday\" is not an RFC 3339 time",
            ),
            (
                ok.replace(r#""output_tokens":2"#, r#""output_tokens":-2"#),
                ErrorKind::InvalidInput,
                "line 2: message.usage.output_tokens: expected a non-negative integer (a token count)",
            ),
            (
                r#"{"type":"assistant","timestamp":"2025-09-01T10:00:02Z"}"#.to_string(),
                ErrorKind::InvalidInput,
                "line 2: message: an assistant line needs its message (an object)",
            ),
            (
                r#"{"type":"assistant","message":{"model":"m","usage":{}}}"#.to_string(),
                ErrorKind::InvalidInput,
                "line 2: timestamp: is required on an assistant line (an RFC 3339 time)",
            ),
        ] {
            let text = format!("{ok}\n{line}\n");
            let e = read(text.as_bytes()).unwrap_err();
            assert_eq!(e.kind(), kind, "{}", e.message());
            assert!(e.message().starts_with(msg), "{}", e.message());
        }
    }
}
