//! The request header (docs/contract.md §3.1, §3.2): the non-history part of a request.
//!
//! An [`EpochHeader`] is `{config, system?, tools?, messagePrefix?}`. Its canonical form
//! drops an empty system, empty tools and an empty prefix, so "absent" and "empty" compare
//! equal and serialise identically. Snapshots (`request/header`) and deltas
//! (`request/header-delta`, see [`delta`]) are folded by [`HeaderFold`].

pub mod delta;

use crate::error::{Error, ErrorKind, Result};
use crate::types::{CallConfig, Fields, JsonMap, Message, ToolSchema};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

pub use delta::HeaderDelta;

/// The non-history part of a request: call config, system prompt, tools, session prefix.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochHeader {
    /// Provider, model and sampling settings.
    pub config: CallConfig,
    /// The system prompt (absent when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The tool schemas in order (absent when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSchema>>,
    /// The frozen session prefix (absent when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_prefix: Option<Arc<Vec<Message>>>,
}

impl PartialEq for EpochHeader {
    /// Equal when config, system, tools (in order) and prefix are equal, absent equal to empty.
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
            && self.system_str() == other.system_str()
            && self.tools_slice() == other.tools_slice()
            && self.prefix() == other.prefix()
    }
}

impl EpochHeader {
    /// A header with only a config.
    pub fn new(config: CallConfig) -> EpochHeader {
        EpochHeader { config, system: None, tools: None, message_prefix: None }
    }

    /// Builds a canonical header (empty parts become absent).
    pub fn canonical(
        config: CallConfig,
        system: Option<String>,
        tools: Option<Vec<ToolSchema>>,
        prefix: Option<Arc<Vec<Message>>>,
    ) -> EpochHeader {
        EpochHeader {
            config,
            system: system.filter(|s| !s.is_empty()),
            tools: tools.filter(|t| !t.is_empty()),
            message_prefix: prefix.filter(|p| !p.is_empty()),
        }
    }

    /// This header in canonical form.
    pub fn into_canonical(self) -> EpochHeader {
        EpochHeader::canonical(self.config, self.system, self.tools, self.message_prefix)
    }

    /// The system prompt, "" when absent.
    pub fn system_str(&self) -> &str {
        self.system.as_deref().unwrap_or("")
    }

    /// The tools, empty when absent.
    pub fn tools_slice(&self) -> &[ToolSchema] {
        self.tools.as_deref().unwrap_or(&[])
    }

    /// The session prefix, empty when absent.
    pub fn prefix(&self) -> &[Message] {
        self.message_prefix.as_deref().map(Vec::as_slice).unwrap_or(&[])
    }

    /// Validates a header at `path` and returns it in canonical form.
    pub fn from_value(v: &Value, path: &str) -> Result<EpochHeader> {
        let f = Fields::of(v, path)?;
        let config = CallConfig::from_value(f.value("config")?, &f.p("config"))?;
        let system = f.opt_str("system")?.map(str::to_string);
        let tools = match f.opt_value("tools")? {
            None => None,
            Some(t) => Some(ToolSchema::list_from_value(t, &f.p("tools"))?),
        };
        let prefix = match f.opt_value("messagePrefix")? {
            None => None,
            Some(p) => Some(Arc::new(Message::list_from_value(p, &f.p("messagePrefix"))?)),
        };
        if let Some(k) = f.map.keys().find(|k| !["config", "system", "tools", "messagePrefix"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a request header field"));
        }
        Ok(EpochHeader::canonical(config, system, tools, prefix))
    }

    /// The canonical JSON value of this header.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self.clone().into_canonical()).expect("a header always serialises")
    }
}

/// Why a header snapshot was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotReason {
    /// The first request of the first instance.
    Initial,
    /// The first request of every later instance.
    Resume,
    /// The header changed within an instance.
    Change,
}

impl SnapshotReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotReason::Initial => "initial",
            SnapshotReason::Resume => "resume",
            SnapshotReason::Change => "change",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str, path: &str) -> Result<SnapshotReason> {
        match s {
            "initial" => Ok(SnapshotReason::Initial),
            "resume" => Ok(SnapshotReason::Resume),
            "change" => Ok(SnapshotReason::Change),
            other => Err(Error::invalid(path, format!("expected \"initial\", \"resume\" or \"change\", got {other:?}"))),
        }
    }
}

/// The `data` of a `request/header` event.
#[derive(Clone, Debug, PartialEq)]
pub struct HeaderSnapshot {
    /// The full header.
    pub header: EpochHeader,
    /// Why it was written.
    pub reason: SnapshotReason,
    /// The agent instance that wrote it.
    pub instance: u64,
}

impl HeaderSnapshot {
    /// Validates snapshot data at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<HeaderSnapshot> {
        let f = Fields::of(v, path)?;
        Ok(HeaderSnapshot {
            header: EpochHeader::from_value(f.value("header")?, &f.p("header"))?,
            reason: SnapshotReason::parse(f.str("reason")?, &f.p("reason"))?,
            instance: f.u64("instance")?,
        })
    }

    /// The event data.
    pub fn to_value(&self) -> Value {
        let mut m = JsonMap::new();
        m.insert("header".into(), self.header.to_value());
        m.insert("reason".into(), self.reason.as_str().into());
        m.insert("instance".into(), self.instance.into());
        Value::Object(m)
    }
}

/// The running fold of the header log: the latest snapshot with every later delta applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderFold {
    current: Option<EpochHeader>,
    /// The instance of the latest snapshot or delta.
    instance: Option<u64>,
    /// The highest instance id seen.
    max_instance: u64,
    /// Seq of the latest header event.
    last_seq: Option<u64>,
}

impl HeaderFold {
    /// The folded header, if any snapshot was seen.
    pub fn current(&self) -> Option<&EpochHeader> {
        self.current.as_ref()
    }

    /// The instance that wrote the latest header event.
    pub fn instance(&self) -> Option<u64> {
        self.instance
    }

    /// The highest instance id that wrote a header.
    pub fn max_instance(&self) -> u64 {
        self.max_instance
    }

    /// Seq of the latest header event.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// A fold as a checkpoint describes it (`crate::log::checkpoint`): the folded header, the
    /// instance of the latest header event, the highest instance seen and that event's seq.
    pub fn restored(current: Option<EpochHeader>, instance: Option<u64>, max_instance: u64, last_seq: Option<u64>) -> HeaderFold {
        HeaderFold { current, instance, max_instance, last_seq }
    }

    /// Folds a snapshot.
    pub fn apply_snapshot(&mut self, seq: u64, snap: &HeaderSnapshot) {
        self.current = Some(snap.header.clone());
        self.instance = Some(snap.instance);
        self.max_instance = self.max_instance.max(snap.instance);
        self.last_seq = Some(seq);
    }

    /// Checks that a delta can be folded (a snapshot exists and the delta applies).
    pub fn check_delta(&self, delta: &HeaderDelta) -> Result<EpochHeader> {
        let cur = self.current.as_ref().ok_or_else(|| {
            Error::new(ErrorKind::CorruptLog, "request/header-delta before any request/header snapshot").with("field", "data")
        })?;
        delta.apply(cur)
    }

    /// Folds a delta that [`check_delta`](Self::check_delta) accepted.
    pub fn apply_delta(&mut self, seq: u64, instance: u64, next: EpochHeader) {
        self.current = Some(next);
        self.instance = Some(instance);
        self.max_instance = self.max_instance.max(instance);
        self.last_seq = Some(seq);
    }
}

/// The `data` of a `request/header-delta` event: `{delta, instance}`.
pub fn delta_event_data(delta: &HeaderDelta, instance: u64) -> Value {
    let mut m = JsonMap::new();
    m.insert("delta".into(), delta.to_value());
    m.insert("instance".into(), instance.into());
    Value::Object(m)
}

/// Parses the `data` of a `request/header-delta` event.
pub fn delta_from_event_data(v: &Value, path: &str) -> Result<(HeaderDelta, u64)> {
    let f = Fields::of(v, path)?;
    Ok((HeaderDelta::from_value(f.value("delta")?, &f.p("delta"))?, f.u64("instance")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_drops_empty_parts() {
        let h =
            EpochHeader::from_value(&json!({"config":{"provider":"p","model":"m"},"system":"","tools":[],"messagePrefix":[]}), "header")
                .unwrap();
        assert_eq!(h.to_value(), json!({"config":{"provider":"p","model":"m"}}));
        assert_eq!(h, EpochHeader::new(CallConfig::new("p", "m")));
    }

    #[test]
    fn tool_reordering_is_a_change() {
        let t = |n: &str| json!({"name":n,"description":"d","parameters":{"type":"object"}});
        let a = EpochHeader::from_value(&json!({"config":{"provider":"p","model":"m"},"tools":[t("a"),t("b")]}), "").unwrap();
        let b = EpochHeader::from_value(&json!({"config":{"provider":"p","model":"m"},"tools":[t("b"),t("a")]}), "").unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn unknown_header_field_is_rejected() {
        let e = EpochHeader::from_value(&json!({"config":{"provider":"p","model":"m"},"x":1}), "header").unwrap_err();
        assert_eq!(e.message(), "header.x: is not a request header field");
    }
}
