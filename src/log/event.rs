//! The event envelope and the event catalogue (docs/contract.md §2.1).
//!
//! An event is `{"type","seq","time","data"}` plus, on model-visible events only,
//! `surfaceOp` and (for a replace) `sources`. The catalogue's `data` shapes are documented in
//! `docs/log.md`; this module parses them with field-naming errors.

use crate::error::{Error, Result};
use crate::types::{kind_of, Fields, JsonMap};
use serde::Serialize;
use serde_json::Value;

/// Event types of the catalogue.
pub mod types {
    /// A turn opens.
    pub const TURN_START: &str = "turn/start";
    /// A turn ends.
    pub const TURN_END: &str = "turn/end";
    /// A request was built (records its digest).
    pub const STEP_START: &str = "step/start";
    /// A step ends (response recorded or provider error).
    pub const STEP_END: &str = "step/end";
    /// A user-role message: the user's input, host/plugin context, or a compaction checkpoint.
    pub const USER_MESSAGE: &str = "user/message";
    /// The model's reply.
    pub const ASSISTANT_MESSAGE: &str = "assistant/message";
    /// A tool call the model made (log-only; opens the tool batch).
    pub const TOOL_CALL: &str = "tool/call";
    /// The result of a tool call.
    pub const TOOL_RESULT: &str = "tool/result";
    /// A full request header snapshot.
    pub const REQUEST_HEADER: &str = "request/header";
    /// A request header delta.
    pub const REQUEST_HEADER_DELTA: &str = "request/header-delta";
    /// A compaction begins.
    pub const COMPACTION_START: &str = "compaction/start";
    /// A compaction's summary.
    pub const COMPACTION_SUMMARY: &str = "compaction/summary";
    /// A compaction ends (landed, failed or discarded).
    pub const COMPACTION_END: &str = "compaction/end";
    /// A checkpoint: the derived state an open needs, written by the library
    /// (`crate::log::checkpoint`).
    pub const CHECKPOINT: &str = "session/checkpoint";
    /// A provider's native compaction: its block or item, verbatim (docs/compaction.md).
    pub const COMPACTION_NATIVE: &str = "compaction/native";
    /// A child agent was spawned from this session (log-only; docs/log.md, "Agent trees").
    pub const AGENT_SPAWN: &str = "agent/spawn";
    /// A decision of the cache clock, with the figures behind it (log-only).
    pub const CLOCK_DECISION: &str = "clock/decision";
    /// A keep-warm request was built (records its digest; log-only).
    pub const CLOCK_KEEPALIVE: &str = "clock/keepalive";
    /// A keep-warm request's answer (log-only: it never enters the history).
    pub const CLOCK_KEEPALIVE_END: &str = "clock/keepalive-end";

    /// Every catalogue type.
    pub const ALL: &[&str] = &[
        TURN_START,
        TURN_END,
        STEP_START,
        STEP_END,
        USER_MESSAGE,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        REQUEST_HEADER,
        REQUEST_HEADER_DELTA,
        COMPACTION_START,
        COMPACTION_SUMMARY,
        COMPACTION_END,
        CHECKPOINT,
        COMPACTION_NATIVE,
        AGENT_SPAWN,
        CLOCK_DECISION,
        CLOCK_KEEPALIVE,
        CLOCK_KEEPALIVE_END,
    ];

    /// Namespaces reserved for the catalogue: a host's own type may not start with these.
    pub const RESERVED_PREFIXES: &[&str] =
        &["turn/", "step/", "user/", "assistant/", "tool/", "request/", "compaction/", "agent/", "clock/", "session"];

    /// Whether events of this type are model-visible (enter the surface).
    pub fn is_model_visible(ty: &str) -> bool {
        matches!(ty, USER_MESSAGE | ASSISTANT_MESSAGE | TOOL_RESULT)
    }
}

/// How a model-visible event changes the surface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SurfaceOp {
    /// Append at the end of the surface.
    Append,
    /// Replace the positional span `start..=end` of the surface with this event.
    Replace {
        /// First surface position replaced.
        start: usize,
        /// Last surface position replaced (inclusive).
        end: usize,
    },
}

impl SurfaceOp {
    /// Parses a surface op at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<SurfaceOp> {
        match v {
            Value::String(s) if s == "append" => Ok(SurfaceOp::Append),
            Value::String(s) => Err(Error::invalid(path, format!("expected \"append\" or a replace object, got {s:?}"))),
            Value::Object(_) => {
                let f = Fields::of(v, path)?;
                let op = f.str("op")?;
                if op != "replace" {
                    return Err(Error::invalid(f.p("op"), format!("expected \"replace\", got {op:?}")));
                }
                let start = f.u64("start")? as usize;
                let end = f.u64("end")? as usize;
                if start > end {
                    return Err(Error::invalid(path, format!("start ({start}) is after end ({end})")));
                }
                Ok(SurfaceOp::Replace { start, end })
            }
            other => Err(Error::invalid(path, format!("expected \"append\" or a replace object, got {}", kind_of(other)))),
        }
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        match self {
            SurfaceOp::Append => Value::from("append"),
            SurfaceOp::Replace { start, end } => serde_json::json!({"op":"replace","start":start,"end":end}),
        }
    }
}

impl Serialize for SurfaceOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// One event of the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// The event type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Position in the log, contiguous from 0.
    pub seq: u64,
    /// Unix time in milliseconds.
    pub time: u64,
    /// Type-specific payload.
    pub data: Value,
    /// On model-visible events: how the event changes the surface.
    #[serde(rename = "surfaceOp", skip_serializing_if = "Option::is_none")]
    pub surface_op: Option<SurfaceOp>,
    /// On a replace: the seqs of the shadowed events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<u64>>,
}

impl Event {
    /// Parses an event envelope (shape only; the log validates the rest).
    pub fn from_value(v: &Value, path: &str) -> Result<Event> {
        let f = Fields::of(v, path)?;
        let ty = f.str("type")?;
        if ty.is_empty() {
            return Err(Error::invalid(f.p("type"), "must not be empty"));
        }
        let data = f.value("data")?.clone();
        let surface_op = match f.opt_value("surfaceOp")? {
            None => None,
            Some(op) => Some(SurfaceOp::from_value(op, &f.p("surfaceOp"))?),
        };
        let sources = match f.opt_array("sources")? {
            None => None,
            Some(a) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        s.as_u64()
                            .ok_or_else(|| Error::invalid(format!("{}[{i}]", f.p("sources")), "expected a seq (a non-negative integer)"))
                    })
                    .collect::<Result<Vec<u64>>>()?,
            ),
        };
        // `chain` is the stored record's chained digest (log format 2), checked by the loader
        // against the record's bytes; it is not part of the event.
        if let Some(k) = f.map.keys().find(|k| !["type", "seq", "time", "data", "surfaceOp", "sources", "chain"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not an event envelope field"));
        }
        Ok(Event { ty: ty.to_string(), seq: f.u64("seq")?, time: f.u64("time")?, data, surface_op, sources })
    }

    /// Parses an event from one JSON line.
    pub fn from_json(text: &str) -> Result<Event> {
        let v: Value = serde_json::from_str(text)?;
        Event::from_owned_value(v, "")
    }

    /// [`from_value`](Self::from_value), moving `data` out of `v` instead of copying it.
    pub fn from_owned_value(mut v: Value, path: &str) -> Result<Event> {
        // An object `data` is set aside (an empty object stands in for it, which the envelope
        // checks treat alike), so only the envelope's few fields are looked at and nothing is
        // copied; any other `data` is left where it is for the checks to report.
        let data = match v.get_mut("data") {
            Some(d @ Value::Object(_)) => Some(std::mem::replace(d, Value::Object(Default::default()))),
            _ => None,
        };
        let mut ev = Event::from_value(&v, path)?;
        if let Some(data) = data {
            ev.data = data;
        }
        Ok(ev)
    }

    /// The event as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        self.to_json_sized(128)
    }

    /// [`to_json`](Self::to_json) into a buffer of `capacity` bytes to start with (the length
    /// of the stored line, when loading: the buffer is then not grown and copied again).
    pub(crate) fn to_json_sized(&self, capacity: usize) -> String {
        let mut out = Vec::with_capacity(capacity);
        serde_json::to_writer(&mut out, self).expect("an event always serialises");
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// A data field as an object reader.
    pub(crate) fn fields(&self) -> Result<Fields<'_>> {
        Fields::of(&self.data, "data")
    }
}

/// An event before the log assigns `seq` and `time`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// The event type.
    pub ty: String,
    /// Type-specific payload.
    pub data: Value,
    /// How it changes the surface (model-visible events only).
    pub surface_op: Option<SurfaceOp>,
    /// Shadowed seqs (replace only).
    pub sources: Option<Vec<u64>>,
}

impl NewEvent {
    /// A log-only event.
    pub fn new(ty: &str, data: Value) -> NewEvent {
        NewEvent { ty: ty.to_string(), data, surface_op: None, sources: None }
    }

    /// A model-visible event appended to the surface.
    pub fn visible(ty: &str, data: Value) -> NewEvent {
        NewEvent { ty: ty.to_string(), data, surface_op: Some(SurfaceOp::Append), sources: None }
    }

    /// A model-visible event replacing `start..=end` of the surface, citing `sources`.
    pub fn replacing(ty: &str, data: Value, start: usize, end: usize, sources: Vec<u64>) -> NewEvent {
        NewEvent { ty: ty.to_string(), data, surface_op: Some(SurfaceOp::Replace { start, end }), sources: Some(sources) }
    }

    /// Parses `{"type","data","surfaceOp"?,"sources"?}` (what a host passes to append).
    pub fn from_value(v: &Value, path: &str) -> Result<NewEvent> {
        let f = Fields::of(v, path)?;
        let mut m: JsonMap = f.map.clone();
        if m.contains_key("seq") || m.contains_key("time") || m.contains_key("chain") {
            return Err(Error::invalid(path, "seq, time and chain are assigned by the log; leave them out"));
        }
        m.insert("seq".into(), 0.into());
        m.insert("time".into(), 0.into());
        let e = Event::from_value(&Value::Object(m), path)?;
        Ok(NewEvent { ty: e.ty, data: e.data, surface_op: e.surface_op, sources: e.sources })
    }

    pub(crate) fn into_event(self, seq: u64, time: u64) -> Event {
        Event { ty: self.ty, seq, time, data: self.data, surface_op: self.surface_op, sources: self.sources }
    }
}

/// Why a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnEndReason {
    /// The model finished.
    Completed,
    /// Cancelled by the host.
    Aborted,
    /// The agent instance was disposed.
    Disposed,
    /// A failure (listener, provider, ...).
    Error,
    /// The input was rejected.
    Rejected,
    /// The model hit its output limit.
    MaxTokens,
    /// Closed by crash repair on load.
    Interrupted,
}

impl TurnEndReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnEndReason::Completed => "completed",
            TurnEndReason::Aborted => "aborted",
            TurnEndReason::Disposed => "disposed",
            TurnEndReason::Error => "error",
            TurnEndReason::Rejected => "rejected",
            TurnEndReason::MaxTokens => "max-tokens",
            TurnEndReason::Interrupted => "interrupted",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str, path: &str) -> Result<TurnEndReason> {
        Ok(match s {
            "completed" => TurnEndReason::Completed,
            "aborted" => TurnEndReason::Aborted,
            "disposed" => TurnEndReason::Disposed,
            "error" => TurnEndReason::Error,
            "rejected" => TurnEndReason::Rejected,
            "max-tokens" => TurnEndReason::MaxTokens,
            "interrupted" => TurnEndReason::Interrupted,
            other => {
                const EXPECTED: &str = "completed, aborted, disposed, error, rejected, max-tokens or interrupted";
                return Err(Error::invalid(path, format!("unknown turn end reason {other:?} (expected {EXPECTED})")));
            }
        })
    }
}

/// Where a `user/message` came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserSource {
    /// The user's own input (opens a turn).
    User,
    /// Context injected by the host.
    Host,
    /// Context contributed by a plugin / listener.
    Plugin,
    /// A compaction checkpoint.
    Compaction,
}

impl UserSource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            UserSource::User => "user",
            UserSource::Host => "host",
            UserSource::Plugin => "plugin",
            UserSource::Compaction => "compaction",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str, path: &str) -> Result<UserSource> {
        Ok(match s {
            "user" => UserSource::User,
            "host" => UserSource::Host,
            "plugin" => UserSource::Plugin,
            "compaction" => UserSource::Compaction,
            other => return Err(Error::invalid(path, format!("unknown source {other:?} (expected user, host, plugin or compaction)"))),
        })
    }
}
