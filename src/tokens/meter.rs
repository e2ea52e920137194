//! The token meter: system + tools + live session prefix + history (docs/contract.md §6.1).
//!
//! The meter follows the surface incrementally: between two measurements only the surface
//! entries appended since are counted (per-message counts are cached by seq), so measuring
//! before every request costs work proportional to what is new, not to the history. A replace
//! (a compaction) makes it re-read the surface once. No session lock is held while the counter
//! runs (a host counter may read the session).
//!
//! When the last assistant message carries provider usage and nothing before it changed since
//! (the header equals the logged one, no replace after it), that usage anchors the total and
//! only the messages after it are counted.

use crate::error::Result;
use crate::header::EpochHeader;
use crate::log::Derived;
use crate::session::Session;
use crate::tokens::{Countable, TokenCounter};
use crate::types::Usage;
use std::collections::HashMap;
use std::sync::Arc;

/// A measurement.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
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
    /// Whether provider usage anchored the total.
    pub anchored: bool,
}

/// Follows one session's surface for one counter.
#[derive(Default)]
pub struct Meter {
    counter_id: usize,
    generation: u64,
    seqs: Vec<u64>,
    counts: Vec<u64>,
    sum: u64,
    by_seq: HashMap<u64, u64>,
    fixed: Option<(usize, String, u64, [u64; 3])>,
}

struct Snapshot {
    generation: u64,
    /// Entries from position `from` on (all of them after a replace).
    fresh: Vec<Arc<Derived>>,
    from: usize,
    anchor: Option<(u64, Usage)>,
    anchor_ok: bool,
}

fn tools_key(header: &EpochHeader) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(header.tools_slice()).expect("serialises").hash(&mut h);
    h.finish()
}

impl Meter {
    /// A new meter.
    pub fn new() -> Meter {
        Meter::default()
    }

    /// Token count of each surface entry as of the last measurement, in surface order.
    pub fn per_entry(&self) -> &[u64] {
        &self.counts
    }

    /// The surface seqs as of the last measurement.
    pub fn seqs(&self) -> &[u64] {
        &self.seqs
    }

    /// Measures `header` (what the next request will carry, with the live prefix) plus the
    /// session's history. `header_logged`: whether `header` equals the latest logged header
    /// (otherwise provider usage cannot anchor the count).
    pub fn measure(
        &mut self,
        counter: &Arc<dyn TokenCounter>,
        session: &Session,
        header: &EpochHeader,
        header_logged: bool,
    ) -> Result<Measure> {
        let id = Arc::as_ptr(counter) as *const () as usize;
        if id != self.counter_id {
            *self = Meter { counter_id: id, ..Meter::default() };
        }
        // Take what is new under the lock; count it after.
        let snap = {
            let g = session.lock();
            let st = g.log.state();
            let h = st.history.entries();
            let incremental = st.history.generation() == self.generation && h.len() >= self.seqs.len();
            let from = if incremental { self.seqs.len() } else { 0 };
            let anchor = st.last_usage.clone();
            let anchor_ok = anchor
                .as_ref()
                .is_some_and(|(seq, _)| st.headers.last_seq().is_some_and(|hs| hs < *seq) && st.last_replace_seq.is_none_or(|r| r < *seq));
            Snapshot { generation: st.history.generation(), fresh: h[from..].to_vec(), from, anchor, anchor_ok }
        };
        if snap.from == 0 {
            self.seqs.clear();
            self.counts.clear();
            self.sum = 0;
        }
        for d in &snap.fresh {
            let n = match self.by_seq.get(&d.seq) {
                Some(n) => *n,
                None => {
                    let n = counter.count(Countable::Message(&d.message()))?;
                    self.by_seq.insert(d.seq, n);
                    n
                }
            };
            self.seqs.push(d.seq);
            self.counts.push(n);
            self.sum += n;
        }
        self.generation = snap.generation;

        let prefix_ptr = header.message_prefix.as_ref().map(|p| Arc::as_ptr(p) as usize).unwrap_or(0);
        let tk = tools_key(header);
        let [system, tools, prefix] = match &self.fixed {
            Some((p, s, t, v)) if *p == prefix_ptr && s == header.system_str() && *t == tk => *v,
            _ => {
                let system = if header.system_str().is_empty() { 0 } else { counter.count(Countable::System(header.system_str()))? };
                let tools = if header.tools_slice().is_empty() { 0 } else { counter.count(Countable::Tools(header.tools_slice()))? };
                let mut prefix = 0;
                for m in header.prefix() {
                    prefix += counter.count(Countable::Message(m))?;
                }
                self.fixed = Some((prefix_ptr, header.system_str().to_string(), tk, [system, tools, prefix]));
                [system, tools, prefix]
            }
        };
        let mut total = system + tools + prefix + self.sum;
        let mut anchored = false;
        if let (true, true, Some((seq, usage))) = (header_logged, snap.anchor_ok, &snap.anchor) {
            if let Some(pos) = self.seqs.iter().rposition(|s| s == seq) {
                let after: u64 = self.counts[pos + 1..].iter().sum();
                total = usage.prompt_tokens() + usage.output_tokens + after;
                anchored = true;
            }
        }
        Ok(Measure { system, tools, prefix, history: self.sum, total, anchored })
    }
}
