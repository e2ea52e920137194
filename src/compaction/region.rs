//! Region selection: which head of the surface to summarise.

use crate::log::Derived;
use std::sync::Arc;

/// A span of the surface, by position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// First position (0 for automatic compaction: always anchored at the head).
    pub start: usize,
    /// Last position, inclusive.
    pub end: usize,
    /// The seqs of the events in the span.
    pub seqs: Vec<u64>,
}

/// Selects the head region to compact: everything before a retained tail of at least
/// `retained` tokens (`counts[i]` is the token count of surface entry `i`), with the cut moved
/// head-ward until no tool call is separated from its result. `None` when nothing is
/// compactable (the region would be empty, or only an earlier checkpoint on its own).
pub fn select_region(entries: &[Arc<Derived>], counts: &[u64], retained: u64) -> Option<Region> {
    let n = entries.len();
    if n == 0 {
        return None;
    }
    // The tail: walk back from the newest entry until it holds `retained` tokens; always keep
    // at least the newest entry.
    let mut cut = n - 1;
    let mut tail = counts[n - 1];
    while cut > 0 && tail < retained {
        cut -= 1;
        tail += counts[cut];
    }
    // Move the cut head-ward while a result in the tail answers a call in the region.
    let mut i = cut;
    while i < n {
        let call_pos = entries[i].result_for.as_ref().and_then(|id| entries[..cut].iter().rposition(|d| d.calls.iter().any(|c| c == id)));
        match call_pos {
            Some(p) => {
                cut = p;
                i = cut;
            }
            None => i += 1,
        }
    }
    if cut == 0 {
        return None;
    }
    if cut == 1 && entries[0].checkpoint {
        return None;
    }
    Some(Region { start: 0, end: cut - 1, seqs: entries[..cut].iter().map(|d| d.seq).collect() })
}
