//! Replay: a recorded log answers a host's requests, so that a host tests its own agent loop
//! offline and deterministically against a recorded session.
//!
//! [`Replay::from_records`] reads a stored log as every reader does (the checks an open makes:
//! a damaged log is `CorruptLog` naming the line, never replayed), and [`Replay::from_log`]
//! rebuilds every request the log records (conversation and
//! summarisation requests, in log order, exactly as `verify` does) and pairs each with what came
//! back: the assistant message and usage of the step, the provider error the host reported
//! (with its overflow flag), or the summary (its raw text and usage) of a compaction. The host
//! drives a fresh session with the same options (its id is [`Replay::session_id`]), and instead
//! of sending each request to a provider it hands the envelope to [`Replay::answer`]:
//!
//! - when the envelope's digest is the recorded request's, the recorded answer comes back and
//!   the replay moves on to the next request;
//! - the same request again right after it was answered (a summariser retry) gets the same
//!   answer;
//! - otherwise the call fails with [`ErrorKind::Reconstruction`](crate::ErrorKind) naming the
//!   first divergence as `explain` does (config field, system line, tool, prefix message, history
//!   index with its byte offset, or the bookkeeping field), and the replay does not move: the
//!   host's loop no longer does what the recorded one did.
//!
//! Answers are JSON, holding what the host passes on as it is: `{"purpose":"conversation", "id",
//! "turn", "step", "outcome":"response", "response": {"message", "usage"?, "finishReason"?}}`
//! (`response` is what `record_response` takes; `finishReason` is `"max-tokens"` when the
//! recorded turn ended at the output limit, the one finish reason the log keeps), `{..., "outcome":"error", "error", "overflow"}` (report it with
//! `report_provider_error`), `{..., "outcome":"cancelled"}`; for a summarisation request
//! `{"purpose":"compaction", "id", "outcome":"summary", "summary": {"text", "usage"?, "provider",
//! "model"}}` (`summary` is the summariser's reply) or `{..., "outcome":"failed", "error"}` (fail
//! the summariser with it); for a keep-warm request of the cache clock `{"purpose":"keepalive",
//! "id":"k1", "outcome":"response", "response": {"message", "usage"?}}` or `{..., "outcome":"error",
//! "error"}` (record it as the keep-warm request's answer, as the host recorded it).

use crate::error::{Error, ErrorKind, Result};
use crate::explain::{compare, Component, Parts};
use crate::log::event::{types, Event};
use crate::log::load::{read_checked_records, CheckedLog};
use crate::log::rules::as_corrupt;
use crate::request::{digest, RecordedKind, RequestWalk};
use serde_json::{json, Value};

/// One recorded request and its answer.
#[derive(Clone, Debug)]
struct Entry {
    /// `"1"`, `"2"`, ... or `"c1"`, ... (as `explain` numbers them).
    id: String,
    /// What it was: "conversation" or "compaction", with turn and step for the message.
    what: String,
    digest: String,
    envelope: String,
    prefix_len: usize,
    answer: Option<Value>,
}

/// A recorded session that answers requests (see the module docs).
#[derive(Clone, Debug)]
pub struct Replay {
    session_id: String,
    entries: Vec<Entry>,
    next: usize,
}

impl Replay {
    /// Reads a log's records (session header first) as every reader reads a log
    /// ([`read_checked_records`]: the checks an open makes). A log an open refuses, or whose
    /// unfinished last turn an open would cut as damaged, is [`ErrorKind::CorruptLog`] naming
    /// the line, as `verify` reports it.
    pub fn from_records(records: &[Vec<u8>]) -> Result<Replay> {
        Replay::from_log(&read_checked_records(records)?)
    }

    /// Rebuilds every request of a log read by [`read_checked`](crate::log::load::read_checked)
    /// and pairs it with its recorded answer. The log must rebuild what was sent: a request
    /// whose digest it does not rebuild (a log rewritten with its chain recomputed, an edited
    /// version 1 log) is an error here (`llmsession verify` names it), because replaying it
    /// would answer a request nobody sent.
    pub fn from_log(log: &CheckedLog) -> Result<Replay> {
        let session = log.header();
        let (mut walk, events) = RequestWalk::of(log);
        let mut entries: Vec<Entry> = Vec::new();
        // The entry the next answer event belongs to (a native compaction request's answer may
        // come after later conversation requests: it is followed on its own).
        let mut open: Option<usize> = None;
        let mut open_native: Option<usize> = None;
        let (mut n_conv, mut n_comp, mut n_native, mut n_keep) = (0usize, 0usize, 0usize, 0usize);
        for ev in events {
            if let Some(r) = walk.rebuild(ev)? {
                let (turn, step) = walk.position();
                let native = matches!(r.kind, RecordedKind::NativeCompaction { .. });
                let (id, what) = match r.kind {
                    RecordedKind::Conversation { turn, step, .. } => {
                        n_conv += 1;
                        (n_conv.to_string(), format!("request {n_conv} (turn {turn} step {step})"))
                    }
                    RecordedKind::Compaction { .. } => {
                        n_comp += 1;
                        (format!("c{n_comp}"), format!("summarisation request c{n_comp} (after turn {turn} step {step})"))
                    }
                    RecordedKind::NativeCompaction { .. } => {
                        n_native += 1;
                        (format!("n{n_native}"), format!("native compaction request n{n_native} (after turn {turn} step {step})"))
                    }
                    RecordedKind::Keepalive { .. } => {
                        n_keep += 1;
                        (format!("k{n_keep}"), format!("keep-warm request k{n_keep} (after turn {turn} step {step})"))
                    }
                };
                if native {
                    open_native = Some(entries.len());
                } else {
                    open = Some(entries.len());
                }
                entries.push(entry(id, what, r.envelope, walk.prefix().messages.len(), &r.recorded_digest, ev)?);
            }
            // A native compaction: the answer of its request, or (threshold) the block of the
            // conversation answer it came in, put back where the provider had it.
            if ev.ty == types::COMPACTION_NATIVE {
                let d = &ev.data;
                if d.get("mode").and_then(Value::as_str) == Some("threshold") {
                    let last = entries.iter_mut().rev().find(|e| !e.id.starts_with(['c', 'n']));
                    if let Some(m) = last.and_then(|e| e.answer.as_mut()).and_then(|a| a.pointer_mut("/response/message")) {
                        let format = d.get("format").cloned().unwrap_or(Value::Null);
                        let mut content: Vec<Value> = d.get("before").and_then(Value::as_array).cloned().unwrap_or_default();
                        for it in d.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                            content.push(json!({"type": "opaque", "origin": format, "item": it}));
                        }
                        content.extend(m.get("content").and_then(Value::as_array).cloned().unwrap_or_default());
                        m["content"] = Value::Array(content);
                    }
                } else if let Some(i) = open_native.take() {
                    entries[i].answer = Some(json!({"purpose": "native-compaction", "id": entries[i].id, "outcome": "compaction",
                        "body": native_body(d)}));
                }
            }
            if ev.ty == types::COMPACTION_END {
                if let Some(i) = open_native.take() {
                    if entries[i].answer.is_none() {
                        let mut a = json!({"purpose": "native-compaction", "id": entries[i].id, "outcome": "failed",
                            "error": ev.data.get("error").cloned().unwrap_or(Value::from("failed"))});
                        if let Some(s) = ev.data.get("stopReason") {
                            a["stopReason"] = s.clone();
                        }
                        entries[i].answer = Some(a);
                    }
                }
            }
            let (turn, step) = walk.position();
            match ev.ty.as_str() {
                types::CLOCK_KEEPALIVE_END => {
                    if let Some(i) = open.filter(|&i| entries[i].id.starts_with('k')) {
                        let d = &ev.data;
                        let a = match d.get("outcome").and_then(Value::as_str) {
                            Some("response") => {
                                let mut response = json!({"message": d.get("message").cloned().unwrap_or(Value::Null)});
                                if let Some(u) = d.get("usage") {
                                    response["usage"] = u.clone();
                                }
                                json!({"purpose": "keepalive", "id": entries[i].id, "outcome": "response", "response": response})
                            }
                            Some("error") => json!({"purpose": "keepalive", "id": entries[i].id, "outcome": "error",
                                "error": d.get("error").cloned().unwrap_or(Value::from(""))}),
                            _ => json!({"purpose": "keepalive", "id": entries[i].id, "outcome": "cancelled"}),
                        };
                        entries[i].answer = Some(a);
                        open = None;
                    }
                }
                types::ASSISTANT_MESSAGE => {
                    if let Some(i) = open.filter(|&i| is_conversation(&entries[i].id)) {
                        let mut response = json!({"message": ev.data["message"]});
                        if let Some(u) = ev.data.get("usage") {
                            response["usage"] = u.clone();
                        }
                        entries[i].answer = Some(json!({"purpose": "conversation", "id": entries[i].id, "turn": turn, "step": step,
                                           "outcome": "response", "response": response}));
                        open = None;
                    }
                }
                types::STEP_END => {
                    if let Some(i) = open.filter(|&i| is_conversation(&entries[i].id)) {
                        let outcome = ev.data.get("outcome").and_then(Value::as_str).unwrap_or("");
                        let a = match outcome {
                            "error" => json!({"purpose": "conversation", "id": entries[i].id, "turn": turn, "step": step,
                                "outcome": "error", "error": ev.data.get("error").cloned().unwrap_or(Value::from("")),
                                "overflow": ev.data.get("overflow").and_then(Value::as_bool).unwrap_or(false)}),
                            _ => json!({"purpose": "conversation", "id": entries[i].id, "turn": turn, "step": step,
                                "outcome": "cancelled"}),
                        };
                        entries[i].answer = Some(a);
                    }
                    open = None;
                }
                // The log keeps no finish reason, but a turn that ended at the output limit says
                // so: its last answer carries `finishReason: "max-tokens"`, so that a host
                // deciding on it ends the turn as the recorded one did.
                types::TURN_END if ev.data.get("reason").and_then(Value::as_str) == Some("max-tokens") => {
                    let last = entries.iter_mut().rev().find(|e| is_conversation(&e.id));
                    if let Some(r) = last.and_then(|e| e.answer.as_mut()).and_then(|a| a.get_mut("response")) {
                        r["finishReason"] = "max-tokens".into();
                    }
                }
                types::COMPACTION_SUMMARY => {
                    if let Some(i) = open.filter(|&i| entries[i].id.starts_with('c')) {
                        let d = &ev.data;
                        let mut summary = json!({"text": d.get("raw").or_else(|| d.get("summary")).cloned().unwrap_or(Value::from("")),
                            "provider": d["provider"], "model": d["model"]});
                        if let Some(u) = d.get("usage") {
                            summary["usage"] = u.clone();
                        }
                        entries[i].answer =
                            Some(json!({"purpose": "compaction", "id": entries[i].id, "outcome": "summary", "summary": summary}));
                        open = None;
                    }
                }
                types::COMPACTION_END => {
                    if let Some(i) = open.filter(|&i| entries[i].id.starts_with('c')) {
                        let outcome = ev.data.get("outcome").and_then(Value::as_str).unwrap_or("");
                        let a = match outcome {
                            "cancelled" => json!({"purpose": "compaction", "id": entries[i].id, "outcome": "cancelled"}),
                            _ => json!({"purpose": "compaction", "id": entries[i].id, "outcome": "failed",
                                "error": ev.data.get("error").cloned().unwrap_or(Value::from(outcome))}),
                        };
                        entries[i].answer = Some(a);
                    }
                    open = None;
                }
                _ => {}
            }
            walk.apply(ev, ev.seq).map_err(|e| as_corrupt(e, ev.seq as usize + 2))?;
        }
        Ok(Replay { session_id: session.id.clone(), entries, next: 0 })
    }

    /// The recorded session's id: open the host's session with it, since every request carries
    /// it.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// How many requests the log records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log records no request.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many requests were answered so far.
    pub fn answered(&self) -> usize {
        self.next
    }

    /// `{"sessionId", "requests", "answered", "next"?}` (`next`: the id of the request expected next).
    pub fn info(&self) -> Value {
        let mut v = json!({"sessionId": self.session_id, "requests": self.entries.len(), "answered": self.next});
        if let Some(e) = self.entries.get(self.next) {
            v["next"] = e.id.clone().into();
        }
        v
    }

    /// Answers a request envelope (see the module docs).
    pub fn answer(&mut self, envelope: &[u8]) -> Result<Value> {
        let got = digest(envelope);
        if let Some(prev) = self.next.checked_sub(1).map(|i| &self.entries[i]) {
            if prev.digest == got && prev.id.starts_with('c') {
                return answer_of(prev);
            }
        }
        let Some(want) = self.entries.get(self.next) else {
            return Err(Error::new(
                ErrorKind::Reconstruction,
                format!("the recorded session has no request after its {} requests, but the host sent another one", self.entries.len()),
            )
            .with("replay", true)
            .with("answered", self.next as u64));
        };
        if want.digest != got {
            return Err(divergence(want, envelope));
        }
        let a = answer_of(want)?;
        self.next += 1;
        Ok(a)
    }
}

/// The provider's answer to a native compaction request, rebuilt from its `compaction/native`
/// record (what `Agent::finish_native_compaction` takes): Anthropic's message with the block and
/// `stop_reason: "compaction"`, or OpenAI's compacted window.
fn native_body(d: &Value) -> Value {
    let items = d.get("items").cloned().unwrap_or(Value::Array(Vec::new()));
    let mut body = if d.get("format").and_then(Value::as_str) == Some("anthropic") {
        json!({"type": "message", "role": "assistant", "model": d["model"], "content": items,
               "stop_reason": d.get("stopReason").cloned().unwrap_or(Value::from("compaction"))})
    } else {
        json!({"object": "response.compaction", "output": items})
    };
    if let Some(id) = d.get("responseId") {
        body["id"] = id.clone();
    }
    if let Some(u) = d.get("providerUsage") {
        body["usage"] = u.clone();
    }
    body
}

/// Whether an entry id is a conversation request's (`"1"`, `"2"`, ...; `"c1"` is a
/// summarisation request's, `"k1"` a keep-warm request's).
fn is_conversation(id: &str) -> bool {
    id.starts_with(|c: char| c.is_ascii_digit())
}

fn entry(id: String, what: String, body: Vec<u8>, prefix_len: usize, recorded: &str, ev: &Event) -> Result<Entry> {
    let d = digest(&body);
    if d != recorded {
        return Err(Error::new(
            ErrorKind::Reconstruction,
            format!(
                "{what} (seq {}): the log does not rebuild the request that was sent, so it cannot be replayed (run llmsession verify)",
                ev.seq
            ),
        )
        .with("seq", ev.seq)
        .with("request", id));
    }
    Ok(Entry { id, what, digest: d, envelope: String::from_utf8(body).expect("JSON is UTF-8"), prefix_len, answer: None })
}

fn answer_of(e: &Entry) -> Result<Value> {
    e.answer.clone().ok_or_else(|| {
        Error::new(ErrorKind::Reconstruction, format!("{} matches, but the recorded log ends before it was answered", e.what))
            .with("replay", true)
            .with("request", e.id.clone())
    })
}

/// The error for a host request that differs from the recorded one, naming where.
fn divergence(want: &Entry, envelope: &[u8]) -> Error {
    let replay_error =
        |message: String| Error::new(ErrorKind::Reconstruction, message).with("replay", true).with("request", want.id.clone());
    let host: Value = match serde_json::from_slice(envelope) {
        Ok(v) => v,
        Err(e) => return replay_error(format!("{} expected, but the host's request is not JSON: {e}", want.what)),
    };
    let recorded: Value = serde_json::from_str(&want.envelope).expect("a rebuilt envelope is JSON");
    let (r, h) = (Parts::of_envelope(&recorded, want.prefix_len), Parts::of_envelope(&host, want.prefix_len));
    let share = compare(&r, &h);
    let (component, detail) = match share.diverge {
        Some(c) => (c.describe(), serde_json::to_value(&c).unwrap_or(Value::Null)),
        None if h.messages.len() != r.messages.len() => {
            let (more, n) = if h.messages.len() > r.messages.len() { ("more", r.messages.len()) } else { ("fewer", h.messages.len()) };
            let c = Component::History { index: n.saturating_sub(r.prefix_len), offset: 0 };
            let text =
                format!("{} (the host's request has {more} messages: {} against {})", c.describe(), h.messages.len(), r.messages.len());
            (text, serde_json::to_value(&c).unwrap_or(Value::Null))
        }
        None => {
            // The cacheable parts are equal: a bookkeeping field or the output limit differs.
            let field = ["sessionId", "turn", "step", "purpose", "maxTokens", "max_tokens", "max_completion_tokens", "max_output_tokens"]
                .into_iter()
                .find(|k| recorded.get(k) != host.get(k))
                .unwrap_or("the bytes");
            let show = |v: &Value| v.get(field).map_or("absent".into(), Value::to_string);
            let hint = if field == "sessionId" { "; open the host's session with the recorded session id" } else { "" };
            (
                format!("{field} (recorded {}, the host's {}{hint})", show(&recorded), show(&host)),
                json!({"component": "envelope", "field": field}),
            )
        }
    };
    let mut e =
        replay_error(format!("{} differs from the recorded one at {component} (after {} equal cacheable bytes)", want.what, share.bytes));
    if let Value::Object(m) = detail {
        for (k, v) in m {
            e = e.with(&k, v);
        }
    }
    e.with("sharedBytes", share.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_log_has_nothing_to_answer() {
        let header = json!({"type":"session","format":"llmsession","version":1,"id":"s","createdAt":1}).to_string();
        let mut r = Replay::from_records(&[header.into_bytes()]).unwrap();
        assert!(r.is_empty());
        let e = r.answer(b"{}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Reconstruction);
        assert!(e.message().contains("no request after its 0 requests"), "{}", e.message());
        assert_eq!(r.info(), json!({"sessionId":"s","requests":0,"answered":0}));
    }
}
