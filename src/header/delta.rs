//! `request/header-delta`: placeholder, being written.
use crate::error::Result;
use crate::header::EpochHeader;
use serde_json::Value;

/// A header delta.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HeaderDelta {}

impl HeaderDelta {
    /// Parses a delta.
    pub fn from_value(_v: &Value, _path: &str) -> Result<HeaderDelta> { Ok(HeaderDelta {}) }
    /// Serialises a delta.
    pub fn to_value(&self) -> Value { Value::Null }
    /// Applies a delta.
    pub fn apply(&self, h: &EpochHeader) -> Result<EpochHeader> { Ok(h.clone()) }
}
