//! Header-delta apply: the input is a base header (first line, JSON) and a delta (the rest).
//! Parsing must never panic; when the delta applies, the result must be canonical, re-serialise
//! and parse back equal, the delta must round-trip through its wire form, and `diff(base,
//! result)` must apply to `base` giving `result` again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsession::header::delta::{diff, diff_for_writer};
use llmsession::{EpochHeader, HeaderDelta};
use serde_json::Value;

fn canonical(h: &EpochHeader) -> bool {
    h.system.as_ref().is_none_or(|s| !s.is_empty())
        && h.tools.as_ref().is_none_or(|t| !t.is_empty())
        && h.message_prefix.as_ref().is_none_or(|p| !p.is_empty())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (a, b) = text.split_once('\n').unwrap_or((text, "{}"));
    let (Ok(av), Ok(bv)) = (serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)) else { return };
    let Ok(base) = EpochHeader::from_value(&av, "base") else { return };
    assert!(canonical(&base), "from_value returned a non-canonical header");
    let Ok(delta) = HeaderDelta::from_value(&bv, "delta") else { return };
    let wire = delta.to_value();
    let back = HeaderDelta::from_value(&wire, "delta").expect("a parsed delta re-parses from its wire form");
    assert_eq!(back.to_value(), wire, "the delta's wire form is not stable");
    let Ok(next) = delta.apply(&base) else { return };
    assert!(canonical(&next), "apply returned a non-canonical header");
    let v = next.to_value();
    let parsed = EpochHeader::from_value(&v, "result").expect("an applied header re-parses");
    assert!(parsed == next, "the applied header does not round-trip");
    assert_eq!(parsed.to_value(), v, "the applied header's serialisation is not stable");
    let d = diff(&base, &next);
    assert!(d.apply(&base).expect("a diff applies to its base") == next, "diff(base, next) does not lead to next");
    if let Some(w) = diff_for_writer(&base, &next) {
        if !w.is_empty() {
            let wv = w.to_value();
            let w2 = HeaderDelta::from_value(&wv, "delta").expect("a writer's delta parses");
            let mut via = w2.apply(&base).expect("a writer's delta applies");
            via.message_prefix = next.message_prefix.clone();
            assert!(via == next, "the writer's delta does not lead to next");
        }
    }
});
