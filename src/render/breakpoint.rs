//! Where cache breakpoints go: the placement rule shared by the renderers that place them
//! (Anthropic's `cache_control`, OpenAI's `prompt_cache_breakpoint`).
//!
//! A request is cut where a part of it that changes at its own pace ends, and marked there, in
//! the order of the marks' value: the end of the history (the next request extends this one;
//! for a summarisation request, the last message before its instruction), the end of the
//! session prefix (the same in every request of an instance and in its summarisation
//! requests), the end of the system prompt (or of the tools, where those can carry a mark).
//! Positions that coincide get one mark; marks beyond the provider's limit are dropped from
//! the least valuable end. Each renderer says which of its blocks can carry a mark and how a
//! mark is written; `docs/render.md` ("Cache breakpoints", "OpenAI's explicit cache
//! breakpoints") has both rules.

use super::{CacheMode, RenderOptions};
use serde_json::Value;

/// Where a cache breakpoint goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark<P> {
    /// A `system` block (Anthropic), or the system prompt's message (OpenAI chat completions).
    System(usize),
    /// A tool (Anthropic).
    Tool(usize),
    /// A block or item of the messages, at position `P`.
    Message(P),
}

/// The breakpoints, most valuable first: `end`, `prefix`, `head`, without duplicates, at most
/// `limit` together with the host's own `host_marks`.
pub(crate) fn choose_marks<P: PartialEq>(
    host_marks: usize,
    limit: usize,
    end: Option<Mark<P>>,
    prefix: Option<Mark<P>>,
    head: Option<Mark<P>>,
) -> Vec<Mark<P>> {
    let mut marks: Vec<Mark<P>> = Vec::with_capacity(3);
    for m in [end, prefix, head].into_iter().flatten() {
        if !marks.contains(&m) && host_marks + marks.len() < limit {
            marks.push(m);
        }
    }
    marks
}

/// OpenAI writes at most this many breakpoints per request (the implicit one included).
pub const OPENAI_MAX_WRITES: usize = 4;

/// How many explicit breakpoints an OpenAI request may carry and have written: four, less the
/// one OpenAI's implicit breakpoint takes unless the mode is `explicit`.
pub(crate) fn openai_limit(options: &RenderOptions) -> usize {
    match options.cache_options.as_ref().and_then(|o| o.mode) {
        Some(CacheMode::Explicit) => OPENAI_MAX_WRITES,
        _ => OPENAI_MAX_WRITES - 1,
    }
}

/// The `prompt_cache_breakpoint` object: explicit, inheriting the request's TTL.
pub(crate) fn openai_breakpoint() -> Value {
    serde_json::json!({"mode": "explicit"})
}

/// Places OpenAI breakpoints on a flat list of wire items (chat messages or Responses input
/// items): `lead` items come before the envelope's messages (chat completions: the system
/// prompt), `prefix_end` and `history_end` are the item counts at the end of the session
/// prefix and of the history. `markable` says whether an item can carry a mark, `set` writes
/// one. Nothing is placed unless the options ask for breakpoints.
pub(crate) fn place_openai(
    items: &mut [Value],
    lead: usize,
    prefix_end: usize,
    history_end: usize,
    options: &RenderOptions,
    markable: fn(&Value) -> bool,
    set: fn(&mut Value),
) {
    if !options.cache_breakpoints {
        return;
    }
    let last = |n: usize| items[lead..n].iter().rposition(markable).map(|k| Mark::Message(lead + k));
    let head = (lead > 0 && markable(&items[lead - 1])).then(|| Mark::System(lead - 1));
    let marks = choose_marks(0, openai_limit(options), last(history_end), last(prefix_end), head);
    for m in marks {
        match m {
            Mark::Message(k) | Mark::System(k) => set(&mut items[k]),
            Mark::Tool(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_deduplicated_and_capped_least_valuable_first() {
        let m = |k| Some(Mark::Message(k));
        assert_eq!(choose_marks(0, 4, m(3), m(1), Some(Mark::System(0))), vec![Mark::Message(3), Mark::Message(1), Mark::System(0)]);
        assert_eq!(choose_marks(0, 4, m(1), m(1), None), vec![Mark::Message(1)]);
        assert_eq!(choose_marks(2, 4, m(3), m(1), Some(Mark::System(0))), vec![Mark::Message(3), Mark::Message(1)]);
        assert_eq!(choose_marks(0, 1, m(3), m(1), Some(Mark::System(0))), vec![Mark::Message(3)]);
        assert!(choose_marks::<usize>(4, 4, m(3), None, None).is_empty());
    }
}
