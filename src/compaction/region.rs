//! Region selection: which head of the surface to summarise.

use crate::log::Derived;
use std::collections::{HashMap, HashSet};
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
///
/// `counts` may be shorter than `entries` (entries appended after the measurement): the tail
/// is then measured over the counted entries, and the uncounted ones belong to it (they are
/// newer), tool pairing included.
pub fn select_region(entries: &[Arc<Derived>], counts: &[u64], retained: u64) -> Option<Region> {
    let n = entries.len().min(counts.len());
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
    // (From here on `cut` only moves head-ward, so every index below is under `n`.)
    // Move the cut head-ward while a result in the tail answers a call in the region: the
    // first such result (in surface order) moves the cut to the last region entry making its
    // call. One pass over the region finds, for every id answered in the tail, that entry.
    loop {
        let answered: HashSet<&str> = entries[cut..].iter().filter_map(|d| d.result_for.as_deref()).collect();
        if answered.is_empty() {
            break;
        }
        let mut last_call: HashMap<&str, usize> = HashMap::new();
        for (pos, d) in entries[..cut].iter().enumerate() {
            for c in d.calls.iter() {
                if let Some(id) = answered.get(&**c) {
                    last_call.insert(id, pos);
                }
            }
        }
        let first = entries[cut..].iter().find_map(|d| d.result_for.as_deref().and_then(|id| last_call.get(id)));
        match first {
            Some(&call_pos) => cut = call_pos,
            None => break,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Role;
    use proptest::prelude::*;

    /// The cut walk as first written (one scan of the region per tail result), kept to check
    /// that the one-pass version selects the same region.
    #[allow(clippy::mut_range_bound)] // the restart after a move is the point of the old walk
    fn reference(entries: &[Arc<Derived>], counts: &[u64], retained: u64) -> Option<Region> {
        let n = entries.len();
        if n == 0 {
            return None;
        }
        let mut cut = n - 1;
        let mut tail = counts[n - 1];
        while cut > 0 && tail < retained {
            cut -= 1;
            tail += counts[cut];
        }
        loop {
            let mut moved = false;
            for i in cut..n {
                if let Some(id) = &entries[i].result_for {
                    if let Some(call_pos) = entries[..cut].iter().rposition(|d| d.calls.iter().any(|c| c == id)) {
                        cut = call_pos;
                        moved = true;
                        break;
                    }
                }
            }
            if !moved {
                break;
            }
        }
        if cut == 0 || (cut == 1 && entries[0].checkpoint) {
            return None;
        }
        Some(Region { start: 0, end: cut - 1, seqs: entries[..cut].iter().map(|d| d.seq).collect() })
    }

    /// An entry: 0 = plain message, 1..=3 = a call (ids drawn from a small set, so they repeat),
    /// 4..=6 = a result.
    fn entry(seq: u64, kind: u8, id: u8) -> Arc<Derived> {
        let id: Box<str> = format!("c{id}").into();
        let (calls, result_for): (Box<[Box<str>]>, _) = match kind {
            1..=3 => (vec![id].into(), None),
            4..=6 => (Box::new([]), Some(id)),
            _ => (Box::new([]), None),
        };
        Arc::new(Derived { seq, role: Role::User, json: "{}".into(), calls, result_for, checkpoint: seq == 0 && kind == 0 })
    }

    #[test]
    fn entries_past_the_counts_join_the_tail() {
        // Four entries, three counted (the fourth was appended after the measurement): no
        // panic, and the region is the head of the counted ones.
        let entries: Vec<Arc<Derived>> = (1..5).map(|i| entry(i, 0, 0)).collect();
        let r = select_region(&entries, &[10, 10, 10], 10).expect("a region");
        assert_eq!(r.seqs, vec![1, 2]);
        // A result past the counts still pulls its call out of the region.
        let entries = vec![entry(1, 0, 0), entry(2, 1, 7), entry(3, 0, 0), entry(4, 4, 7)];
        let r = select_region(&entries, &[10, 10, 10], 10).expect("a region");
        assert_eq!(r.seqs, vec![1], "the call at position 1 stays with its result at position 3");
        assert_eq!(select_region(&entries, &[], 0), None);
    }

    proptest! {
        #[test]
        fn selects_the_same_region_as_the_reference(
            spec in proptest::collection::vec((0u8..7, 0u8..6, 0u64..50), 0..60),
            retained in 0u64..800,
        ) {
            let entries: Vec<Arc<Derived>> = spec.iter().enumerate().map(|(i, (k, id, _))| entry(i as u64, *k, *id)).collect();
            let counts: Vec<u64> = spec.iter().map(|(_, _, c)| *c).collect();
            prop_assert_eq!(select_region(&entries, &counts, retained), reference(&entries, &counts, retained));
        }
    }
}
