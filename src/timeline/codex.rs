//! Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) as timelines, read-only.
//!
//! A rollout line is `{"timestamp", "type", "payload"}`. Their token counts allow a timeline:
//! after each model response Codex writes an `event_msg` whose payload is
//! `{"type": "token_count", "info": {"total_token_usage", "last_token_usage", ...}}`, and
//! `last_token_usage` is that response's usage as OpenAI reports it (`input_tokens`, of which
//! `cached_input_tokens` were read from the cache, `output_tokens`, of which
//! `reasoning_output_tokens` were reasoning). So:
//!
//! - **One request per new token count.** A `token_count` whose `total_token_usage` equals the
//!   previous one's repeats it (Codex writes one again, e.g. with rate-limit news) and is
//!   skipped; one with `info: null` carries nothing. Without `last_token_usage` the request's
//!   usage is the difference of the totals.
//! - **Its time** is the event's `timestamp`: the end of the response (a rollout records no
//!   send time), so gaps are measured between response ends.
//! - **Usage**: uncached input `input_tokens − cached_input_tokens`, cache reads
//!   `cached_input_tokens`, no cache writes (OpenAI reports and bills none: `cache_write_tokens`
//!   is left out, and a simulated rewrite is billed as uncached input), output `output_tokens`
//!   (reasoning included, as OpenAI bills it).
//! - **Provider** `session_meta.payload.model_provider` (default `openai`), **model** the last
//!   `turn_context.payload.model` before the request.
//! - **Compactions**: a `compacted` line (or an `event_msg` of type `context_compacted`) marks
//!   the next request as `compacted_before`.
//!
//! A line that is not a JSON object, a `timestamp` that is not RFC 3339 on a token count, or a
//! token count that is not a non-negative integer is an error naming the line; a file none of
//! whose lines has a `payload` is not a rollout (older rollouts had another shape and no token
//! counts).

use super::{bad_line, jsonl_lines, parse_rfc3339, tokens, RequestKind, Source, TimedRequest, Timeline};
use crate::error::{Error, ErrorKind, Result};
use crate::types::Usage;
use serde_json::Value;

/// `(input, cached, output, reasoning)` of a token-usage object.
fn counts(n: usize, v: &Value, path: &str) -> Result<(u64, u64, u64, u64)> {
    if !v.is_object() {
        return Err(bad_line(n, path, "expected an object"));
    }
    Ok((
        tokens(n, v, path, "input_tokens")?.unwrap_or(0),
        tokens(n, v, path, "cached_input_tokens")?.unwrap_or(0),
        tokens(n, v, path, "output_tokens")?.unwrap_or(0),
        tokens(n, v, path, "reasoning_output_tokens")?.unwrap_or(0),
    ))
}

/// Reads a rollout (one timeline).
pub fn read(bytes: &[u8]) -> Result<Timeline> {
    let lines = jsonl_lines(bytes)?;
    if !lines.is_empty() && !lines.iter().any(|(_, v)| v.get("payload").is_some_and(Value::is_object)) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a Codex rollout: no line has a payload (expected {\"timestamp\", \"type\", \"payload\"} lines; older rollouts had another shape and recorded no token counts)",
        ));
    }
    let (mut session, mut provider, mut model) = (String::new(), "openai".to_string(), String::new());
    let mut requests = Vec::new();
    let mut last_total: Option<(u64, u64, u64, u64)> = None;
    let (mut repeated, mut empty) = (0u64, 0u64);
    let mut compacted = false;
    for (n, v) in &lines {
        let n = *n;
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        let payload = v.get("payload").unwrap_or(&Value::Null);
        let pty = payload.get("type").and_then(Value::as_str).unwrap_or("");
        match (ty, pty) {
            ("session_meta", _) => {
                if let Some(id) = payload.get("id").and_then(Value::as_str) {
                    session = id.to_string();
                }
                if let Some(p) = payload.get("model_provider").and_then(Value::as_str).filter(|p| !p.is_empty()) {
                    provider = p.to_string();
                }
            }
            ("turn_context", _) => {
                if let Some(m) = payload.get("model").and_then(Value::as_str) {
                    model = m.to_string();
                }
            }
            ("compacted", _) | ("event_msg", "context_compacted") => compacted = true,
            ("event_msg", "token_count") => {
                let info = match payload.get("info") {
                    None | Some(Value::Null) => {
                        empty += 1;
                        continue;
                    }
                    Some(i) if i.is_object() => i,
                    Some(_) => return Err(bad_line(n, "payload.info", "expected an object or null")),
                };
                let total = match info.get("total_token_usage") {
                    None | Some(Value::Null) => None,
                    Some(t) => Some(counts(n, t, "payload.info.total_token_usage")?),
                };
                if total.is_some() && total == last_total {
                    repeated += 1;
                    continue;
                }
                let last = match info.get("last_token_usage") {
                    None | Some(Value::Null) => match (total, last_total) {
                        (Some(t), Some(p)) => {
                            (t.0.saturating_sub(p.0), t.1.saturating_sub(p.1), t.2.saturating_sub(p.2), t.3.saturating_sub(p.3))
                        }
                        (Some(t), None) => t,
                        _ => return Err(bad_line(n, "payload.info", "a token count needs last_token_usage or total_token_usage")),
                    },
                    Some(l) => counts(n, l, "payload.info.last_token_usage")?,
                };
                if total.is_some() {
                    last_total = total;
                }
                let time = match v.get("timestamp") {
                    Some(Value::String(s)) => {
                        parse_rfc3339(s).ok_or_else(|| bad_line(n, "timestamp", format!("{s:?} is not an RFC 3339 time")))?
                    }
                    _ => return Err(bad_line(n, "timestamp", "is required on a token count (an RFC 3339 time)")),
                };
                let (input, cached, output, reasoning) = last;
                let cached = cached.min(input);
                requests.push(TimedRequest {
                    time,
                    provider: provider.clone(),
                    model: model.clone(),
                    kind: RequestKind::Conversation,
                    usage: Usage {
                        input_tokens: input - cached,
                        output_tokens: output,
                        cache_read_tokens: Some(cached),
                        reasoning_tokens: (reasoning > 0).then_some(reasoning),
                        ..Default::default()
                    },
                    compacted_before: std::mem::take(&mut compacted),
                    at: format!("line {n}"),
                });
            }
            _ => {}
        }
    }
    let mut notes = Vec::new();
    if repeated > 0 {
        notes.push(format!("{repeated} repeated token count(s) left out (the same totals as the one before)"));
    }
    if empty > 0 {
        notes.push(format!("{empty} token count(s) without info left out"));
    }
    if requests.is_empty() {
        notes.push("no token counts: nothing to simulate".into());
    }
    requests.sort_by_key(|r| r.time);
    Ok(Timeline { source: Source::Codex, session, requests, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tc(ts: &str, total: (u64, u64, u64), last: (u64, u64, u64)) -> String {
        format!(
            r#"{{"timestamp":"{ts}","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{},"cached_input_tokens":{},"output_tokens":{},"reasoning_output_tokens":0,"total_tokens":{}}},"last_token_usage":{{"input_tokens":{},"cached_input_tokens":{},"output_tokens":{},"reasoning_output_tokens":{},"total_tokens":{}}},"model_context_window":272000}}}}}}"#,
            total.0,
            total.1,
            total.2,
            total.0 + total.2,
            last.0,
            last.1,
            last.2,
            last.2 / 2,
            last.0 + last.2
        )
    }

    fn rollout() -> String {
        [
            r#"{"timestamp":"2025-10-01T09:00:00.000Z","type":"session_meta","payload":{"id":"0199-abc","cwd":"/p","originator":"codex_cli_rs","cli_version":"0.46.0","model_provider":"openai"}}"#.to_string(),
            r#"{"timestamp":"2025-10-01T09:00:01.000Z","type":"turn_context","payload":{"cwd":"/p","model":"gpt-5-codex"}}"#.to_string(),
            r#"{"timestamp":"2025-10-01T09:00:01.500Z","type":"event_msg","payload":{"type":"token_count","info":null}}"#.to_string(),
            tc("2025-10-01T09:00:05.000Z", (9000, 0, 100), (9000, 0, 100)),
            tc("2025-10-01T09:00:05.100Z", (9000, 0, 100), (9000, 0, 100)),
            r#"{"timestamp":"2025-10-01T09:10:00.000Z","type":"compacted","payload":{"message":"summary"}}"#.to_string(),
            tc("2025-10-01T09:10:09.000Z", (19500, 8960, 160), (10500, 8960, 60)),
        ]
        .join("\n")
    }

    #[test]
    fn token_counts_are_requests() {
        let t = read(rollout().as_bytes()).unwrap();
        assert_eq!((t.source, t.session.as_str()), (Source::Codex, "0199-abc"));
        assert_eq!(t.requests.len(), 2);
        let r = &t.requests[1];
        assert_eq!((r.provider.as_str(), r.model.as_str()), ("openai", "gpt-5-codex"));
        assert_eq!((r.usage.input_tokens, r.usage.cache_read_tokens, r.usage.cache_write_tokens), (1540, Some(8960), None));
        assert_eq!((r.usage.output_tokens, r.usage.reasoning_tokens), (60, Some(30)));
        assert_eq!(r.prompt_tokens(), 10_500);
        assert!(r.compacted_before && !t.requests[0].compacted_before);
        assert_eq!(t.gaps(), vec![604_000]);
        assert_eq!(
            t.notes,
            vec![
                "1 repeated token count(s) left out (the same totals as the one before)".to_string(),
                "1 token count(s) without info left out".to_string()
            ]
        );
    }

    #[test]
    fn a_bad_rollout_is_named() {
        let e = read(b"{\"id\":\"x\",\"instructions\":null}\n{\"record_type\":\"state\"}\n").unwrap_err();
        assert!(e.message().starts_with("not a Codex rollout: no line has a payload"), "{}", e.message());
        let bad =
            rollout().replace(r#""cached_input_tokens":8960,"output_tokens":60"#, r#""cached_input_tokens":"many","output_tokens":60"#);
        let e = read(bad.as_bytes()).unwrap_err();
        assert_eq!(
            e.message(),
            "line 7: payload.info.last_token_usage.cached_input_tokens: expected a non-negative integer (a token count)"
        );
    }
}
