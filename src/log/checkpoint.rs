//! Checkpoints: the derived state an open needs, written into the log (docs/log.md,
//! "Checkpoints").
//!
//! A checkpoint is a log-only event, `session/checkpoint`, chained like every record. Its `data`
//! is computed by one function, [`data`], from the folded state ([`LogState`]) of the events
//! before it; nothing else decides what it holds. Loading checks it as it checks any event: it
//! computes [`data`] again and refuses the record when the two differ ([`first_difference`]). A
//! bounded open ([`crate::log::load`]) does the opposite: it *restores* the state from the last
//! checkpoint ([`restore`]) and checks only what follows it.
//!
//! The surface is not copied into every checkpoint. After the last replace (the checkpoint
//! message of the last landed compaction, seq `R`), every model-visible event is appended, so
//! the surface is always `carried ++ [each visible event after R]`, where `carried` is the
//! surface as that replace left it. A checkpoint therefore holds:
//!
//! - the counters and the open turn, step and tool batch, the token anchor (the latest usage),
//!   the surface's length and replace generation: small, in every checkpoint;
//! - `carried` and the folded request header, in a **full** checkpoint: the first one after a
//!   replace or a header event. A later (**light**) checkpoint names that one instead
//!   (`"base": seq`).
//!
//! An open reads the records from the window start `R + 1` (the first event when there was no
//! replace) to the end: the base checkpoint and the last one are among them, and so is every
//! visible event the surface holds after `carried`.
//!
//! **Adding derived state.** A field added to [`LogState`] must be added to [`data`] (written),
//! to [`restore`] (read back) and to [`same_state`] (compared). All three take the state apart
//! field by field without `..`, so a new field is a compile error until it is handled, and
//! `verify` compares the state restored from every checkpoint with the state the log folds to
//! (`same_state`): a field that is written but not restored is a verify failure, not a silent
//! difference between a bounded open and a full one.

use crate::error::{Error, ErrorKind, Result};
use crate::header::{EpochHeader, HeaderFold};
use crate::log::event::{types, Event};
use crate::log::history::{Derived, History};
use crate::log::rules::{LogState, OpenTurn, PendingCall};
use crate::types::{Fields, JsonMap, Message, Role, Usage};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// When a session writes checkpoints (`SessionOptions::checkpoints`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Write one once this many events were appended since the last (0: never for this reason).
    pub every_events: u64,
    /// Write one once the records appended since the last hold this many bytes (0: never for
    /// this reason).
    pub every_bytes: u64,
    /// Write one at the end of each landed compaction.
    pub at_compaction: bool,
}

impl Default for CheckpointPolicy {
    fn default() -> CheckpointPolicy {
        CheckpointPolicy { every_events: 1000, every_bytes: 1 << 20, at_compaction: true }
    }
}

impl CheckpointPolicy {
    /// No checkpoints (a log an older library can still read).
    pub const OFF: CheckpointPolicy = CheckpointPolicy { every_events: 0, every_bytes: 0, at_compaction: false };

    /// Parses `{"everyEvents"?, "everyBytes"?, "atCompaction"?}` (defaults for the keys left out),
    /// or `false` for [`OFF`](Self::OFF).
    pub fn from_value(v: &Value, path: &str) -> Result<CheckpointPolicy> {
        if v == &Value::Bool(false) {
            return Ok(CheckpointPolicy::OFF);
        }
        let f = Fields::of(v, path)?;
        if let Some(k) = f.map.keys().find(|k| !["everyEvents", "everyBytes", "atCompaction"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a checkpoint option (expected everyEvents, everyBytes, atCompaction)"));
        }
        let d = CheckpointPolicy::default();
        Ok(CheckpointPolicy {
            every_events: f.opt_u64("everyEvents")?.unwrap_or(d.every_events),
            every_bytes: f.opt_u64("everyBytes")?.unwrap_or(d.every_bytes),
            at_compaction: f.opt_bool("atCompaction")?.unwrap_or(d.at_compaction),
        })
    }

    /// Whether a checkpoint is due after `events` events of `bytes` bytes since the last one
    /// (`compaction`: the batch landed a compaction).
    pub fn due(&self, events: u64, bytes: u64, compaction: bool) -> bool {
        (compaction && self.at_compaction)
            || (self.every_events > 0 && events >= self.every_events)
            || (self.every_bytes > 0 && bytes >= self.every_bytes)
    }
}

/// The number of leading surface entries that are `carried` (the surface as the last replace
/// left it): everything before the run of entries appended after it.
fn carried_len(state: &LogState) -> usize {
    let entries = state.history.entries();
    match state.last_replace_seq {
        None => 0,
        Some(r) => entries.len() - entries.iter().rev().take_while(|d| d.seq > r).count(),
    }
}

/// The window start of a state: the first seq a bounded open reads (the seq after the last
/// replace, or 0).
pub fn window_start(last_replace_seq: Option<u64>) -> u64 {
    last_replace_seq.map_or(0, |r| r + 1)
}

/// The `data` of a checkpoint written after the events `state` folds: the one function that
/// decides what a checkpoint holds (see the module docs). The state must have no compaction
/// open.
pub fn data(state: &LogState) -> Value {
    let LogState {
        last_turn,
        open_turn,
        pending,
        known_calls: _, // rebuilt from the surface: the ids of its tool calls
        compaction: _,  // none: a checkpoint is not written inside a compaction
        history,
        headers,
        last_usage,
        last_replace_seq,
        requests,
        last_request_seq,
        cached_tokens,
        prompt_tokens,
        compactions,
        last_checkpoint: _, // the checkpoint itself, once written
        checkpoint_base,
    } = state;
    let mut m = JsonMap::new();
    m.insert("turns".into(), (*last_turn).into());
    m.insert("requests".into(), (*requests).into());
    if let Some(s) = last_request_seq {
        m.insert("lastRequest".into(), (*s).into());
    }
    m.insert("compactions".into(), (*compactions).into());
    m.insert("cachedTokens".into(), (*cached_tokens).into());
    m.insert("promptTokens".into(), (*prompt_tokens).into());
    if let Some(t) = open_turn {
        let OpenTurn { turn, last_step, step_open, step_answered, calls_to_log } = t;
        m.insert(
            "openTurn".into(),
            json!({"turn": turn, "lastStep": last_step, "stepOpen": step_open, "stepAnswered": step_answered,
                   "callsToLog": calls_to_log.iter().map(|(id, name, args)| json!([id, name, args])).collect::<Vec<_>>()}),
        );
    }
    m.insert(
        "pending".into(),
        Value::Array(
            pending
                .iter()
                .map(|p| {
                    let PendingCall { id, name, seq } = p;
                    json!({"id": id, "name": name, "seq": seq})
                })
                .collect(),
        ),
    );
    if let Some((seq, usage)) = last_usage {
        m.insert("usage".into(), json!({"seq": seq, "usage": serde_json::to_value(usage).expect("usage serialises")}));
    }
    if let Some(r) = last_replace_seq {
        m.insert("lastReplace".into(), (*r).into());
    }
    m.insert("surface".into(), json!({"length": history.len(), "generation": history.generation()}));
    match checkpoint_base {
        Some(base) => {
            m.insert("base".into(), (*base).into());
        }
        None => {
            if let Some(h) = headers.current() {
                m.insert(
                    "header".into(),
                    json!({"header": h.to_value(), "instance": headers.instance(), "maxInstance": headers.max_instance(),
                           "seq": headers.last_seq()}),
                );
            } else if headers.max_instance() > 0 {
                m.insert("header".into(), json!({"maxInstance": headers.max_instance()}));
            }
            let carried: Vec<Value> = history.entries()[..carried_len(state)]
                .iter()
                .map(|d| {
                    let mut e = json!({"seq": d.seq, "message": d.json.as_str()});
                    if d.checkpoint {
                        e["summary"] = true.into();
                    }
                    e
                })
                .collect();
            m.insert("carried".into(), Value::Array(carried));
        }
    }
    Value::Object(m)
}

/// Whether checkpoint data is a full checkpoint (it carries the surface and the header).
pub fn is_full(data: &Value) -> bool {
    data.get("base").is_none()
}

/// The seq of the full checkpoint a light one refers to.
pub fn base_of(data: &Value) -> Option<u64> {
    data.get("base").and_then(Value::as_u64)
}

/// The window start a checkpoint's data names (see [`window_start`]).
pub fn window_of(data: &Value) -> Result<u64> {
    let f = Fields::of(data, "data")?;
    Ok(window_start(f.opt_u64("lastReplace")?))
}

/// The path of the first place where `got` differs from `want` (`None` when equal).
pub fn first_difference(got: &Value, want: &Value, path: &str) -> Option<String> {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get(k) {
                    None => return Some(format!("{path}.{k}")),
                    Some(g) => {
                        if let Some(p) = first_difference(g, v, &format!("{path}.{k}")) {
                            return Some(p);
                        }
                    }
                }
            }
            a.keys().find(|k| !b.contains_key(*k)).map(|k| format!("{path}.{k}"))
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (g, w)) in a.iter().zip(b).enumerate() {
                if let Some(p) = first_difference(g, w, &format!("{path}[{i}]")) {
                    return Some(p);
                }
            }
            (a.len() != b.len()).then(|| format!("{path}[{}]", a.len().min(b.len())))
        }
        _ => (got != want).then(|| path.to_string()),
    }
}

/// What `want` holds at a path [`first_difference`] returned, for a message (cut short).
pub fn describe_at(want: &Value, path: &str) -> String {
    let mut v = Some(want);
    let rest = path.strip_prefix("data").unwrap_or(path);
    for part in rest.split('.').filter(|p| !p.is_empty()) {
        let (key, idx) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        v = v.and_then(|x| x.get(key));
        if let Some(i) = idx {
            v = v.and_then(|x| x.get(i));
        }
    }
    match v {
        None => "nothing there".into(),
        Some(x) => {
            let s = x.to_string();
            if s.len() > 120 {
                format!("{}...", &s[..s.char_indices().take_while(|(i, _)| *i < 120).last().map_or(0, |(i, c)| i + c.len_utf8())])
            } else {
                s
            }
        }
    }
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::CorruptLog, format!("the checkpoint cannot be read: {what}")).with("checkpoint", true)
}

/// A derived history entry carried in a full checkpoint: its message JSON, exactly as the
/// history held it, parsed for its role and tool calls.
fn carried_entry(v: &Value, path: &str) -> Result<Arc<Derived>> {
    let f = Fields::of(v, path)?;
    let seq = f.u64("seq")?;
    let json = f.str("message")?;
    let summary = f.opt_bool("summary")?.unwrap_or(false);
    let parsed: Value = serde_json::from_str(json).map_err(|e| Error::invalid(f.p("message"), e.to_string()))?;
    let msg = Message::from_owned_value(parsed, &f.p("message"))?;
    let calls: Box<[Box<str>]> = msg.tool_calls().map(|(id, _, _)| Box::<str>::from(id)).collect();
    let result_for = msg.content.iter().find_map(|b| b.tool_result_id()).map(Box::<str>::from);
    if msg.role != Role::User && msg.role != Role::Assistant {
        return Err(Error::invalid(f.p("message"), "a history message is a user or assistant message"));
    }
    Ok(Arc::new(Derived { seq, role: msg.role, json: json.to_string().into(), calls, result_for, checkpoint: summary }))
}

/// The header fold a full checkpoint carries.
fn header_fold(data: &Value) -> Result<HeaderFold> {
    let Some(h) = data.get("header") else { return Ok(HeaderFold::default()) };
    let f = Fields::of(h, "data.header")?;
    let current = match f.opt_value("header")? {
        None => None,
        Some(v) => Some(EpochHeader::from_value(v, "data.header.header")?),
    };
    Ok(HeaderFold::restored(current, f.opt_u64("instance")?, f.opt_u64("maxInstance")?.unwrap_or(0), f.opt_u64("seq")?))
}

/// Where a restored state's surface comes from.
pub enum Surface<'a> {
    /// The entries derived from the visible events between the window start and the checkpoint,
    /// in order (all of them appends): the surface is built from the carried entries and these
    /// (a bounded open).
    Derived(Vec<Arc<Derived>>),
    /// The surface the log folds to at the checkpoint (`verify`): the carried entries of a full
    /// checkpoint are compared with its leading entries, the surface's length and generation
    /// with the checkpoint's, and the restored state's surface and known tool calls are left
    /// empty (compare it with `same_state(.., false)`).
    Folded(&'a History),
}

/// The folded state a checkpoint describes. `cp` is the checkpoint event; `base` is the data of
/// the full checkpoint it names (`None` when it is full itself); `surface` says where the
/// surface comes from.
pub fn restore(cp: &Event, base: Option<&Value>, surface: Surface<'_>) -> Result<LogState> {
    restore_inner(cp, base, surface).map_err(|e| {
        let msg = e.message().to_string();
        let field = e.detail().get("field").cloned();
        let mut out = if e.kind() == ErrorKind::CorruptLog { e } else { bad(msg) };
        if let Some(f) = field {
            out = out.with("field", f);
        }
        out.with("seq", cp.seq).with("eventType", types::CHECKPOINT)
    })
}

fn restore_inner(cp: &Event, base: Option<&Value>, surface: Surface<'_>) -> Result<LogState> {
    let f = Fields::of(&cp.data, "data")?;
    let full = match (base_of(&cp.data), base) {
        (None, _) => &cp.data,
        (Some(_), Some(b)) if is_full(b) => b,
        (Some(k), _) => return Err(bad(format!("its base checkpoint (seq {k}) is not a full checkpoint"))),
    };
    let open_turn = match f.opt_value("openTurn")? {
        None => None,
        Some(t) => {
            let tf = Fields::of(t, "data.openTurn")?;
            let mut calls_to_log = Vec::new();
            for (i, c) in tf.array("callsToLog")?.iter().enumerate() {
                let parts: Vec<&str> = c.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                if parts.len() != 3 {
                    return Err(Error::invalid(format!("data.openTurn.callsToLog[{i}]"), "expected [id, name, arguments]"));
                }
                calls_to_log.push((parts[0].to_string(), parts[1].to_string(), parts[2].to_string()));
            }
            Some(OpenTurn {
                turn: tf.u64("turn")?,
                last_step: tf.u64("lastStep")?,
                step_open: tf.bool("stepOpen")?,
                step_answered: tf.bool("stepAnswered")?,
                calls_to_log,
            })
        }
    };
    let mut pending = Vec::new();
    for (i, p) in f.array("pending")?.iter().enumerate() {
        let path = format!("data.pending[{i}]");
        let pf = Fields::of(p, &path)?;
        pending.push(PendingCall { id: pf.str("id")?.to_string(), name: pf.str("name")?.to_string(), seq: pf.u64("seq")? });
    }
    let last_usage = match f.opt_value("usage")? {
        None => None,
        Some(u) => {
            let uf = Fields::of(u, "data.usage")?;
            Some((uf.u64("seq")?, Usage::from_value(uf.value("usage")?, "data.usage.usage")?))
        }
    };
    let last_replace_seq = f.opt_u64("lastReplace")?;
    let sf = Fields::of(f.value("surface")?, "data.surface")?;
    let (length, generation) = (sf.u64("length")? as usize, sf.u64("generation")?);

    let ff = Fields::of(full, "data")?;
    let (history, known_calls) = match surface {
        Surface::Derived(appended) => {
            let mut history = History::default();
            for (i, e) in ff.array("carried")?.iter().enumerate() {
                let path = format!("data.carried[{i}]");
                history.push(carried_entry(e, &path)?);
            }
            let carried = history.len();
            history.extend_sealed(appended);
            if history.len() != length {
                return Err(bad(format!(
                    "it gives the surface {length} messages, but its base carries {carried} and the window appends {} more",
                    history.len() - carried
                )));
            }
            history.set_generation(generation);
            let known_calls = calls_of(&history);
            (history, known_calls)
        }
        Surface::Folded(folded) => {
            if folded.len() != length || folded.generation() != generation {
                return Err(bad(format!(
                    "it gives the surface {length} messages of generation {generation}; the log gives {} of generation {}",
                    folded.len(),
                    folded.generation()
                )));
            }
            // The carried entries, once (a light checkpoint's are its base's, compared there).
            if std::ptr::eq(full, &cp.data) {
                let carried = ff.array("carried")?;
                for (i, e) in carried.iter().enumerate() {
                    let path = format!("data.carried[{i}]");
                    let a = carried_entry(e, &path)?;
                    let same = folded.entries().get(i).is_some_and(|b| {
                        a.seq == b.seq
                            && a.role == b.role
                            && a.json.as_str() == b.json.as_str()
                            && a.calls == b.calls
                            && a.result_for == b.result_for
                            && a.checkpoint == b.checkpoint
                    });
                    if !same {
                        return Err(bad(format!("its carried message {i} is not the surface's")));
                    }
                }
            }
            (History::default(), HashSet::new())
        }
    };
    Ok(LogState {
        last_turn: f.u64("turns")?,
        open_turn,
        pending,
        known_calls,
        compaction: None,
        history,
        headers: header_fold(full)?,
        last_usage,
        last_replace_seq,
        requests: f.u64("requests")?,
        last_request_seq: f.opt_u64("lastRequest")?,
        cached_tokens: f.u64("cachedTokens")?,
        prompt_tokens: f.u64("promptTokens")?,
        compactions: f.u64("compactions")?,
        last_checkpoint: Some(cp.seq),
        checkpoint_base: Some(if std::ptr::eq(full, &cp.data) { cp.seq } else { base_of(&cp.data).expect("a light checkpoint") }),
    })
}

/// The ids of the tool calls a surface holds.
pub fn calls_of(history: &History) -> HashSet<String> {
    history.entries().iter().flat_map(|d| d.calls.iter().map(|c| c.to_string())).collect()
}

/// Compares a state restored from a checkpoint with the state the log folds to at the same
/// point, field by field; the first field that differs, or `None`. `verify` runs it at every
/// checkpoint, so a field [`data`] or [`restore`] leaves out is found. With `surface` false the
/// surface and the known tool calls are not compared (a state restored with
/// [`Surface::Folded`], whose surface was checked against the log's as it was restored): the
/// known tool calls must then be as many as the calls the surface holds.
pub fn same_state(restored: &LogState, folded: &LogState, surface: bool) -> Option<&'static str> {
    let LogState {
        last_turn,
        open_turn,
        pending,
        known_calls,
        compaction,
        history,
        headers,
        last_usage,
        last_replace_seq,
        requests,
        last_request_seq,
        cached_tokens,
        prompt_tokens,
        compactions,
        last_checkpoint,
        checkpoint_base,
    } = restored;
    let same_history = !surface
        || history.len() == folded.history.len()
            && history.generation() == folded.history.generation()
            && history.entries().iter().zip(folded.history.entries()).all(|(a, b)| {
                a.seq == b.seq
                    && a.role == b.role
                    && a.json.as_str() == b.json.as_str()
                    && a.calls == b.calls
                    && a.result_for == b.result_for
                    && a.checkpoint == b.checkpoint
            });
    let checks: [(&'static str, bool); 16] = [
        ("turns", *last_turn == folded.last_turn),
        ("openTurn", *open_turn == folded.open_turn),
        ("pending", *pending == folded.pending),
        (
            "known tool calls",
            if surface {
                *known_calls == folded.known_calls
            } else {
                folded.known_calls.len() == folded.history.entries().iter().map(|d| d.calls.len()).sum::<usize>()
            },
        ),
        ("compaction", *compaction == folded.compaction),
        ("surface", same_history),
        ("header", *headers == folded.headers),
        ("usage", *last_usage == folded.last_usage),
        ("lastReplace", *last_replace_seq == folded.last_replace_seq),
        ("requests", *requests == folded.requests),
        ("lastRequest", *last_request_seq == folded.last_request_seq),
        ("cachedTokens", *cached_tokens == folded.cached_tokens),
        ("promptTokens", *prompt_tokens == folded.prompt_tokens),
        ("compactions", *compactions == folded.compactions),
        ("last checkpoint", *last_checkpoint == folded.last_checkpoint),
        ("base checkpoint", *checkpoint_base == folded.checkpoint_base),
    ];
    checks.iter().find(|(_, same)| !same).map(|(name, _)| *name)
}
