//! Property tests for `request/header-delta`: every diff applies back exactly, round-trips
//! through its JSON wire form, and the writer form never carries `messagePrefix`.

use llmsession::header::delta::{diff, diff_for_writer, needs_snapshot, system_lines};
use llmsession::{CallConfig, EpochHeader, HeaderDelta, Message, ToolSchema};
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

/// Multi-line texts over a tiny alphabet, so lines repeat and "", "\n", "\n\n", trailing
/// newlines and shared leading/trailing lines all come up often.
fn system() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(String::new())),
        6 => "[ab\n]{0,10}".prop_map(Some),
        2 => prop::collection::vec(prop::sample::select(vec!["x", "y", "", "long line"]), 0..6)
            .prop_map(|l| Some(l.join("\n"))),
    ]
}

fn tool(name: &str, variant: u8) -> ToolSchema {
    // "e" is a provider tool (its key in the list is "anthropic:e"), "d" a function tool given in
    // OpenAI's shape without a description: deltas carry both in their canonical form.
    if name == "e" {
        let t = json!({"type":"provider","format":"anthropic","tool":{"type":"web_search_20250305","name":"e","max_uses":variant}});
        return ToolSchema::from_value(&t, "").unwrap();
    }
    if name == "d" && variant % 2 == 1 {
        return ToolSchema::from_value(&json!({"type":"function","function":{"name":"d","parameters":{"type":"object"}}}), "").unwrap();
    }
    let params = if variant % 2 == 0 { json!({"type":"object"}) } else { json!({"type":"object","properties":{"v":{"type":"integer"}}}) };
    let desc = if variant < 2 { "does things" } else { "does other things" };
    ToolSchema::from_value(&json!({"name":name,"description":desc,"parameters":params}), "").unwrap()
}

/// A shuffled subset of five names, each with one of four schema variants.
fn tools() -> impl Strategy<Value = Option<Vec<ToolSchema>>> {
    let names = vec!["a", "b", "c", "d", "e"];
    (prop::sample::subsequence(names, 0..=5).prop_shuffle(), prop::collection::vec(0u8..4, 5), any::<bool>()).prop_map(
        |(names, variants, absent_if_empty)| {
            let list: Vec<ToolSchema> = names.iter().zip(variants).map(|(n, v)| tool(n, v)).collect();
            if list.is_empty() && absent_if_empty {
                None
            } else {
                Some(list)
            }
        },
    )
}

fn config() -> impl Strategy<Value = CallConfig> {
    (
        prop::sample::select(vec!["openai", "anthropic"]),
        prop::sample::select(vec!["m1", "m2"]),
        prop::option::of(prop::sample::select(vec!["low", "high"])),
        prop::option::of(0u64..3),
        prop::option::of(prop::collection::vec(prop::sample::select(vec!["END", "STOP"]), 0..2)),
    )
        .prop_map(|(p, m, effort, max, stop)| {
            let mut c = CallConfig::new(p, m);
            c.reasoning_effort = effort.map(str::to_string);
            c.max_tokens = max;
            c.stop = stop.map(|s| s.into_iter().map(str::to_string).collect());
            c
        })
}

fn prefix() -> impl Strategy<Value = Option<Arc<Vec<Message>>>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Arc::new(Vec::new()))),
        3 => prop::collection::vec(prop::sample::select(vec!["hello", "rules", "context"]), 1..3)
            .prop_map(|t| Some(Arc::new(t.into_iter().map(Message::user_text).collect()))),
    ]
}

/// Headers built as given (possibly non-canonical: `Some("")`, `Some(vec![])`).
fn header() -> impl Strategy<Value = EpochHeader> {
    (config(), system(), tools(), prefix()).prop_map(|(config, system, tools, message_prefix)| EpochHeader {
        config,
        system,
        tools,
        message_prefix,
    })
}

/// A second header derived from the first by small edits, so diffs share lines and tools.
fn pair() -> impl Strategy<Value = (EpochHeader, EpochHeader)> {
    prop_oneof![
        (header(), header()),
        (header(), header(), any::<[bool; 4]>()).prop_map(|(a, mut b, keep)| {
            if keep[0] {
                b.config = a.config.clone();
            }
            if keep[1] {
                b.system = a.system.as_ref().map(|s| format!("{s}\nextra"));
            }
            if keep[2] {
                let mut t = a.tools.clone().unwrap_or_default();
                t.reverse();
                b.tools = Some(t);
            }
            if keep[3] {
                b.message_prefix = a.message_prefix.clone();
            }
            (a, b)
        }),
    ]
}

fn is_canonical(h: &EpochHeader) -> bool {
    h.system.as_deref() != Some("")
        && h.tools.as_ref().map_or(true, |t| !t.is_empty())
        && h.message_prefix.as_ref().map_or(true, |p| !p.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn lines_join_back_to_the_text(s in "[ab\n]{0,12}") {
        prop_assert_eq!(system_lines(&s).join("\n"), s);
    }

    #[test]
    fn diff_applies_back_and_round_trips((a, b) in pair()) {
        let d = diff(&a, &b);
        let got = d.apply(&a).unwrap();
        prop_assert_eq!(&got, &b);
        prop_assert!(is_canonical(&got));
        prop_assert_eq!(got.to_value(), b.to_value());
        prop_assert_eq!(d.is_empty(), a == b);
        if !d.is_empty() {
            let v = d.to_value();
            let text = serde_json::to_string(&v).unwrap();
            let back = HeaderDelta::from_value(&serde_json::from_str(&text).unwrap(), "delta").unwrap();
            prop_assert_eq!(&back, &d);
            prop_assert_eq!(back.to_value(), v);
        }
    }

    #[test]
    fn writer_form_never_carries_the_prefix((a, b) in pair()) {
        match diff_for_writer(&a, &b) {
            None => {
                prop_assert!(needs_snapshot(&a, &b));
                prop_assert_ne!(a.prefix(), b.prefix());
            }
            Some(d) => {
                prop_assert!(!needs_snapshot(&a, &b));
                let v = d.to_value();
                prop_assert!(v.get("messagePrefix").is_none(), "{}", v);
                prop_assert_eq!(d.apply(&a).unwrap(), b.clone());
                prop_assert_eq!(d.is_empty(), a == b);
                if !d.is_empty() {
                    prop_assert_eq!(HeaderDelta::from_value(&v, "delta").unwrap(), d);
                }
            }
        }
    }

    #[test]
    fn apply_of_a_parsed_random_edit_never_panics(a in header(), kl in 0usize..8, kt in 0usize..8,
                                                  insert in prop::collection::vec("[ab]{0,2}", 0..3)) {
        let v = json!({"system":{"keepLeading":kl,"keepTrailing":kt,"insert":insert}});
        let d = HeaderDelta::from_value(&v, "delta").unwrap();
        let n = system_lines(a.system_str()).len();
        match d.apply(&a) {
            Ok(h) => {
                prop_assert!(kl + kt <= n);
                prop_assert!(is_canonical(&h));
                let lines = system_lines(h.system_str()).len();
                // The empty text has no lines even when the edit produced one empty line.
                prop_assert!(lines == kl + kt + insert.len() || h.system.is_none());
            }
            Err(e) => {
                prop_assert!(kl + kt > n);
                prop_assert!(e.message().starts_with("delta.system.keep"), "{}", e.message());
            }
        }
    }
}
