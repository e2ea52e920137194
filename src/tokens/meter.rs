//! The token meter: system + tools + live session prefix + history (SPEC §6).
//!
//! Per-message counts are computed once per surface event and cached by seq, so measuring
//! before every request costs one addition per history message. When the last assistant
//! message carries provider usage and nothing before it changed since (no header change, no
//! replace), that usage anchors the count and only the events after it are counted.

use crate::error::Result;
use crate::header::EpochHeader;
use crate::log::Log;
use crate::tokens::{Countable, TokenCounter};
use crate::types::Message;
use std::sync::Arc;

/// A measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measure {
    /// Tokens of the system prompt.
    pub system: u64,
    /// Tokens of the tool schemas.
    pub tools: u64,
    /// Tokens of the session prefix.
    pub prefix: u64,
    /// Tokens of the history, counted message by message.
    pub history: u64,
    /// The total the gate compares with the threshold (anchored when possible).
    pub total: u64,
    /// Per surface entry, in surface order.
    pub per_entry: Vec<u64>,
    /// Whether provider usage anchored the total.
    pub anchored: bool,
}

/// Caches per-message counts for one counter.
#[derive(Default)]
pub struct Meter {
    counter_id: usize,
    by_seq: Vec<u64>,
    fixed: Option<(usize, String, usize, u64, u64, u64)>,
}

const UNKNOWN: u64 = u64::MAX;

impl Meter {
    /// A new meter.
    pub fn new() -> Meter {
        Meter::default()
    }

    /// Counts one message with the meter's rules (uncached).
    pub fn count_message(counter: &dyn TokenCounter, m: &Message) -> Result<u64> {
        counter.count(Countable::Message(m))
    }

    /// Measures `header` (the header the next request will carry, with the live prefix) plus
    /// the log's history. `anchor_allowed`: whether `header` equals the logged one.
    pub fn measure(&mut self, counter: &Arc<dyn TokenCounter>, log: &Log, header: &EpochHeader, anchor_allowed: bool) -> Result<Measure> {
        let id = Arc::as_ptr(counter) as *const () as usize;
        if id != self.counter_id {
            self.counter_id = id;
            self.by_seq.clear();
            self.fixed = None;
        }
        let prefix_ptr = header.message_prefix.as_ref().map(|p| Arc::as_ptr(p) as usize).unwrap_or(0);
        let tools_json = header.tools.as_ref().map(|t| serde_json::to_string(t).expect("serialises")).unwrap_or_default();
        let tools_key = tools_json.len() ^ tools_json.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        let (system, tools, prefix) = match &self.fixed {
            Some((p, s, t, a, b, c)) if *p == prefix_ptr && s == header.system_str() && *t == tools_key => (*a, *b, *c),
            _ => {
                let system = if header.system_str().is_empty() { 0 } else { counter.count(Countable::System(header.system_str()))? };
                let tools = if header.tools_slice().is_empty() { 0 } else { counter.count(Countable::Tools(header.tools_slice()))? };
                let mut prefix = 0;
                for m in header.prefix() {
                    prefix += counter.count(Countable::Message(m))?;
                }
                self.fixed = Some((prefix_ptr, header.system_str().to_string(), tools_key, system, tools, prefix));
                (system, tools, prefix)
            }
        };
        let entries = log.history().entries();
        let mut per_entry = Vec::with_capacity(entries.len());
        let mut history = 0u64;
        for d in entries {
            let i = d.seq as usize;
            if self.by_seq.len() <= i {
                self.by_seq.resize(i + 1, UNKNOWN);
            }
            if self.by_seq[i] == UNKNOWN {
                self.by_seq[i] = counter.count(Countable::Message(&d.message()))?;
            }
            per_entry.push(self.by_seq[i]);
            history += self.by_seq[i];
        }
        let mut total = system + tools + prefix + history;
        let mut anchored = false;
        let st = log.state();
        if let (true, Some((seq, usage))) = (anchor_allowed, &st.last_usage) {
            let header_before = st.headers.last_seq().is_some_and(|h| h < *seq);
            let no_replace_after = st.last_replace_seq.is_none_or(|r| r < *seq);
            if header_before && no_replace_after {
                if let Some(pos) = entries.iter().position(|d| d.seq == *seq) {
                    let after: u64 = per_entry[pos + 1..].iter().sum();
                    total = usage.prompt_tokens() + usage.output_tokens + after;
                    anchored = true;
                }
            }
        }
        Ok(Measure { system, tools, prefix, history, total, per_entry, anchored })
    }
}
