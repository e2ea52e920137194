//! Token counting (temporary stand-in; replaced by the counters module on merge).
use crate::error::Result;
use crate::types::{Message, ToolSchema};
use serde_json::Value;
pub mod meter;
/// One thing to count.
pub enum Countable<'a> {
    /// A system prompt.
    System(&'a str),
    /// Tool schemas.
    Tools(&'a [ToolSchema]),
    /// A message.
    Message(&'a Message),
}
impl Countable<'_> {
    /// JSON form.
    pub fn to_json(&self) -> Value { Value::Null }
}
/// A counter.
pub trait TokenCounter: Send + Sync {
    /// Counts.
    fn count(&self, item: Countable<'_>) -> Result<u64>;
    /// Name.
    fn name(&self) -> &'static str;
}
/// Estimate.
pub struct Estimator;
impl TokenCounter for Estimator {
    fn count(&self, item: Countable<'_>) -> Result<u64> {
        Ok(match item {
            Countable::System(s) => estimate_text(s) + 4,
            Countable::Tools(t) => estimate_text(&serde_json::to_string(t).unwrap()),
            Countable::Message(m) => estimate_text(&serde_json::to_string(m).unwrap()),
        })
    }
    fn name(&self) -> &'static str { "estimate" }
}
/// Estimate text.
pub fn estimate_text(text: &str) -> u64 { (text.len() as u64).div_ceil(4) }
