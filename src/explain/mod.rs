//! Explain: why each request of a session hit or missed the provider's prompt cache, and what
//! the prompt cost.
//!
//! For every request a log records (conversation requests and summarisation requests, in log
//! order) [`explain_log`] rebuilds the request from the log and compares it with the earlier
//! request the provider could have cached: the previous conversation request, or the
//! summarisation request sent after it, whichever shares more. Providers cache by exact prefix,
//! so the comparison walks the request in the order providers read it:
//!
//! 1. the **call config**, except the output limit (`maxTokens`, and the pass-through
//!    `max_tokens`, `max_completion_tokens`, `max_output_tokens`): a different model, cache key,
//!    cache salt, thinking setting, ... is another cache, so nothing is shared;
//! 2. the **system prompt**, then each **tool** schema, then each **message** (session prefix,
//!    derived history, a summarisation request's trailing instruction), each as the JSON text
//!    the envelope carries.
//!
//! The shared part is the bytes of the leading components both requests have in common, plus
//! the common leading bytes of the first component that differs; its tokens are counted with
//! the session's token counter (the built-in estimate by default), a partly shared component in
//! proportion to its shared bytes. Where the two differ, the report names the component (config
//! field, system line, tool, prefix message, history index with the first differing byte offset)
//! and the event that caused it: a header change, a resume (a new agent instance), a compaction
//! (checkpoint, or the summarisation request's own instruction and region), injected context, or
//! an edit (the log no longer rebuilds what was sent, or history changed without a compaction).
//!
//! With provider usage, each request gets the **expected cacheable tokens** beside the
//! provider's cached tokens: the previous request's reported prompt tokens when this one extends
//! it whole, otherwise the shared tokens scaled by the reported-to-counted ratio of the earlier
//! request nearest in size to the shared part. The prompt spend (the uncached prompt tokens:
//! reported, or estimated without usage) is split by cause so that the causes sum to it: growth
//! (new content), the divergence's cause (header change, resume, compaction, retry after
//! overflow, and inject or edit, which the library's own API never produces), and what the
//! provider lost otherwise: a context edit it applied, expiry (the gap since the earlier request
//! is longer than the TTL, [`crate::cache_rules`]), a prefix below its minimum cacheable size, or
//! unexplained (see `charge`). With a host price table ([`crate::prices`]) each request and
//! cause is priced; the provider's own cache diagnosis, when the usage has one, is put beside
//! the library's. `llmsession stats` and `llmsession explain` are two views of this one
//! computation; `docs/caching.md` shows how to read it.
//!
//! A stored log is read as every reader reads one ([`read_checked_records`]: the checks an open
//! makes): a damaged record, a seq gap, an event the log rules refuse or a record whose chained
//! digest does not match is [`ErrorKind::CorruptLog`] naming the line, never explained. What
//! `edit` explains is a log that still passes those checks but no longer rebuilds what was sent:
//! one rewritten with its chain recomputed, or a version 1 log (which has no chain).

mod compactions;

pub use compactions::{CompactionReport, MechanismTotals};
pub mod tree;

use crate::cache_rules::{CacheRule, CacheRules, CacheSettings};
use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::event::types;
use crate::log::load::{read_checked_records, CheckedLog};
use crate::log::rules::as_corrupt;
use crate::log::Derived;
use crate::prices::{Cost, PriceTable};
use crate::request::{keepalive_config, routed_history, summary_config, PrefixBytes, RecordedKind, RequestWalk};
use crate::tokens::{Countable, Estimator, TokenCounter, TokenizerCounter};
use crate::types::Fields;
use crate::types::{CallConfig, JsonMap, Message, Usage};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

pub mod gaps;

/// Config fields that do not change what a provider caches (the output limit).
pub const CACHE_NEUTRAL_FIELDS: &[&str] = &["maxTokens", "max_tokens", "max_completion_tokens", "max_output_tokens"];

// ---------------------------------------------------------------------------------------------
// The cacheable parts of a request, and how two of them compare.

/// One message of a request, as the JSON text the envelope carries.
#[derive(Clone, Debug)]
pub(crate) enum Msg {
    /// A derived history entry (with the seq of its event).
    Entry(Arc<Derived>),
    /// A session prefix message or a trailing instruction.
    Text(Arc<str>),
}

impl Msg {
    fn text(&self) -> &str {
        match self {
            Msg::Entry(d) => d.json.as_str(),
            Msg::Text(t) => t,
        }
    }

    fn same(&self, other: &Msg) -> bool {
        match (self, other) {
            (Msg::Entry(a), Msg::Entry(b)) if a.seq == b.seq => true,
            _ => self.text() == other.text(),
        }
    }
}

/// The parts of a request a provider caches, in the order it reads them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Parts {
    /// Cache-relevant config fields, `(name, JSON value)`, in envelope order.
    pub config: Vec<(String, String)>,
    /// The system prompt (raw text) and its JSON text.
    pub system: Option<(String, String)>,
    /// Tool schemas: `(name, JSON text)`.
    pub tools: Vec<(String, String)>,
    /// The messages: prefix, history, trailing.
    pub messages: Vec<Msg>,
    /// How many leading messages are the session prefix.
    pub prefix_len: usize,
    /// Whether the last message is a summarisation request's instruction.
    pub trailing: bool,
}

impl Parts {
    fn from_config(cfg: &CallConfig) -> Vec<(String, String)> {
        match serde_json::to_value(cfg).expect("a config serialises") {
            Value::Object(m) => {
                m.into_iter().filter(|(k, _)| !CACHE_NEUTRAL_FIELDS.contains(&k.as_str())).map(|(k, v)| (k, v.to_string())).collect()
            }
            _ => Vec::new(),
        }
    }

    fn head(header: &EpochHeader, config: &CallConfig, prefix: &PrefixBytes) -> Parts {
        let mut config = Parts::from_config(config);
        // In envelope order: the known fields first, then the others in key order.
        let order = ["provider", "model", "reasoningEffort", "temperature", "stop"];
        config.sort_by_key(|(k, _)| (order.iter().position(|o| o == k).unwrap_or(order.len()), k.clone()));
        Parts {
            config,
            system: header.system.as_ref().filter(|s| !s.is_empty()).map(|s| (s.clone(), serde_json::to_string(s).expect("a string"))),
            tools: header.tools_slice().iter().map(|t| (t.name.clone(), serde_json::to_string(t).expect("a tool serialises"))).collect(),
            messages: prefix.messages.iter().map(|m| Msg::Text(Arc::from(&**m))).collect(),
            prefix_len: prefix.messages.len(),
            trailing: false,
        }
    }

    /// Total bytes of the cacheable components.
    pub fn bytes(&self) -> u64 {
        let sys = self.system.as_ref().map_or(0, |(_, j)| j.len());
        let tools: usize = self.tools.iter().map(|(_, j)| j.len()).sum();
        let msgs: usize = self.messages.iter().map(|m| m.text().len()).sum();
        (sys + tools + msgs) as u64
    }

    /// Parts of an envelope given as JSON (for replay, where only the bytes are known).
    pub fn of_envelope(v: &Value, prefix_len: usize) -> Parts {
        let mut config = Vec::new();
        let mut system = None;
        let mut tools = Vec::new();
        let mut messages = Vec::new();
        let mut trailing = false;
        if let Some(m) = v.as_object() {
            for (k, val) in m {
                match k.as_str() {
                    "system" => {
                        if let Some(s) = val.as_str().filter(|s| !s.is_empty()) {
                            system = Some((s.to_string(), val.to_string()));
                        }
                    }
                    "tools" => {
                        for t in val.as_array().into_iter().flatten() {
                            tools.push((t.get("name").and_then(Value::as_str).unwrap_or("").to_string(), t.to_string()));
                        }
                    }
                    "messages" => {
                        for msg in val.as_array().into_iter().flatten() {
                            messages.push(Msg::Text(Arc::from(msg.to_string())));
                        }
                    }
                    "sessionId" | "turn" | "step" | "instance" => {}
                    "purpose" => trailing = val == "compaction",
                    _ if CACHE_NEUTRAL_FIELDS.contains(&k.as_str()) => {}
                    _ => config.push((k.clone(), val.to_string())),
                }
            }
        }
        Parts { config, system, tools, messages, prefix_len, trailing }
    }
}

/// Where two requests first differ.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "component", rename_all = "camelCase")]
pub enum Component {
    /// A call config field differs (present in one, absent in the other, or another value).
    #[serde(rename = "config")]
    Config {
        /// The field's name.
        field: String,
    },
    /// The system prompt differs.
    #[serde(rename = "system")]
    System {
        /// The first differing line (1-based).
        line: usize,
        /// The first differing byte of the system prompt's text.
        offset: usize,
    },
    /// A tool schema differs, was added, removed or moved.
    #[serde(rename = "tool")]
    Tool {
        /// Its position.
        index: usize,
        /// Its name (this request's tool at that position; the earlier one's when removed).
        name: String,
        /// "changed", "added", "removed".
        change: String,
    },
    /// A session prefix message differs.
    #[serde(rename = "prefix")]
    Prefix {
        /// Its position in the prefix.
        index: usize,
        /// The first differing byte of its JSON text.
        offset: usize,
    },
    /// A history message differs (or is missing on one side).
    #[serde(rename = "history")]
    History {
        /// Its position in the history (0 = the first message after the prefix).
        index: usize,
        /// The first differing byte of its JSON text.
        offset: usize,
    },
    /// Where one request has its trailing summarisation instruction.
    #[serde(rename = "instruction")]
    Instruction {
        /// Its position in the history.
        index: usize,
    },
}

impl Component {
    /// A short readable name: `config field model`, `system line 3`, `tool read_file (changed)`,
    /// `prefix message 2, byte 40`, `history index 5, byte 120`, `instruction at history index 9`.
    pub fn describe(&self) -> String {
        match self {
            Component::Config { field } => format!("config field {field}"),
            Component::System { line, offset } => format!("system line {line} (byte {offset})"),
            Component::Tool { name, change, index } => format!("tool {name} ({change}, position {index})"),
            Component::Prefix { index, offset } => format!("prefix message {index}, byte {offset}"),
            Component::History { index, offset } => format!("history index {index}, byte {offset}"),
            Component::Instruction { index } => format!("summarisation instruction at history index {index}"),
        }
    }
}

/// The outcome of comparing two requests' parts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Share {
    /// Shared bytes.
    pub bytes: u64,
    /// Leading messages shared whole.
    pub messages: usize,
    /// Components shared whole: 0 = none; then system, tools, messages in order (see `weights`).
    pub whole: usize,
    /// Common leading bytes of the first differing component, and its size in the later request.
    pub partial: Option<(usize, usize)>,
    /// Where they differ; `None` when the later request extends the earlier one (or equals it).
    pub diverge: Option<Component>,
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Compares `cur` with the earlier request `prev`.
pub(crate) fn compare(prev: &Parts, cur: &Parts) -> Share {
    let mut share = Share::default();
    // 1. Config: any difference shares nothing.
    fn fields(p: &Parts) -> HashMap<&str, &str> {
        p.config.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
    let (pf, cf) = (fields(prev), fields(cur));
    let differs =
        cur.config.iter().map(|(k, _)| k).chain(prev.config.iter().map(|(k, _)| k)).find(|k| pf.get(k.as_str()) != cf.get(k.as_str()));
    if let Some(k) = differs {
        share.diverge = Some(Component::Config { field: k.clone() });
        return share;
    }
    // 2. System.
    match (&prev.system, &cur.system) {
        (None, None) => {}
        (Some((_, pj)), Some((_, cj))) if pj == cj => {
            share.bytes += cj.len() as u64;
            share.whole += 1;
        }
        (p, c) => {
            let (pt, ct) = (p.as_ref().map_or("", |s| s.0.as_str()), c.as_ref().map_or("", |s| s.0.as_str()));
            let off = common_prefix(pt, ct);
            let line = ct[..off.min(ct.len())].matches('\n').count() + 1;
            let (pj, cj) = (p.as_ref().map_or("", |s| s.1.as_str()), c.as_ref().map_or("", |s| s.1.as_str()));
            let jb = common_prefix(pj, cj);
            share.bytes += jb as u64;
            share.partial = Some((jb, cj.len()));
            share.diverge = Some(Component::System { line, offset: off });
            return share;
        }
    }
    // 3. Tools.
    let n = prev.tools.len().max(cur.tools.len());
    for i in 0..n {
        match (prev.tools.get(i), cur.tools.get(i)) {
            (Some(p), Some(c)) if p.1 == c.1 => {
                share.bytes += c.1.len() as u64;
                share.whole += 1;
            }
            (p, c) => {
                let change = match (p, c) {
                    (Some(_), Some(c)) if prev.tools.iter().any(|t| t.1 == c.1) => "moved",
                    (Some(_), Some(_)) => "changed",
                    (None, Some(_)) => "added",
                    _ => "removed",
                };
                let name = c.or(p).map(|t| t.0.clone()).unwrap_or_default();
                let jb = common_prefix(p.map_or("", |t| t.1.as_str()), c.map_or("", |t| t.1.as_str()));
                share.bytes += jb as u64;
                share.partial = c.map(|c| (jb, c.1.len()));
                share.diverge = Some(Component::Tool { index: i, name, change: change.into() });
                return share;
            }
        }
    }
    // 4. Messages.
    for (i, c) in cur.messages.iter().enumerate() {
        let Some(p) = prev.messages.get(i) else {
            return share; // cur extends prev
        };
        if p.same(c) {
            share.bytes += c.text().len() as u64;
            share.whole += 1;
            share.messages += 1;
            continue;
        }
        let off = common_prefix(p.text(), c.text());
        share.bytes += off as u64;
        share.partial = Some((off, c.text().len()));
        share.diverge = Some(position(prev, cur, i, off));
        return share;
    }
    share
}

/// The component at message position `i` of `cur` (or of `prev`, where it has the instruction).
fn position(prev: &Parts, cur: &Parts, i: usize, offset: usize) -> Component {
    let last = |p: &Parts| p.trailing && i + 1 == p.messages.len();
    if i < cur.prefix_len && i < prev.prefix_len {
        Component::Prefix { index: i, offset }
    } else if last(cur) || last(prev) {
        Component::Instruction { index: i.saturating_sub(cur.prefix_len) }
    } else {
        Component::History { index: i.saturating_sub(cur.prefix_len), offset }
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

/// What a request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// A conversation step.
    Conversation,
    /// A summarisation request.
    Compaction,
    /// A keep-warm request of the cache clock (`crate::clock`).
    Keepalive,
}

/// What caused uncached prompt tokens (the log event behind a divergence, or what the provider
/// lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// New content: the tokens the earlier request did not have (the physical minimum; all of
    /// a first request).
    Growth,
    /// The request header (config, system prompt, tools) changed within an agent instance.
    HeaderChange,
    /// A new agent instance: its header or recomposed session prefix differs.
    Resume,
    /// A compaction: its checkpoint rewrote the history, or this is a summarisation request.
    Compaction,
    /// The retry of a request the provider refused with a context overflow.
    RetryAfterOverflow,
    /// Injected context sits where the earlier request had other content.
    Inject,
    /// The log does not rebuild what was sent, or the history changed without a compaction.
    Edit,
    /// The provider edited the request before the model saw it (Anthropic context editing:
    /// `applied_edits` in its response), so the prefix it had cached no longer matched.
    ContextEdit,
    /// The gap since the request that wrote the prefix is longer than the provider's TTL for
    /// the cache settings in force ([`crate::cache_rules`]).
    Expiry,
    /// The shared prefix is shorter than the provider's minimum cacheable size.
    BelowMinimum,
    /// The provider lost a prefix it should have had: none of the above explains it.
    Unexplained,
}

impl Cause {
    /// Every cause, in report order.
    pub const ALL: [Cause; 11] = [
        Cause::Growth,
        Cause::HeaderChange,
        Cause::Resume,
        Cause::Compaction,
        Cause::RetryAfterOverflow,
        Cause::Inject,
        Cause::Edit,
        Cause::ContextEdit,
        Cause::Expiry,
        Cause::BelowMinimum,
        Cause::Unexplained,
    ];

    /// The wire name (`growth`, `header-change`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Growth => "growth",
            Cause::HeaderChange => "header-change",
            Cause::Resume => "resume",
            Cause::Compaction => "compaction",
            Cause::RetryAfterOverflow => "retry-after-overflow",
            Cause::Inject => "inject",
            Cause::Edit => "edit",
            Cause::ContextEdit => "context-edit",
            Cause::Expiry => "expiry",
            Cause::BelowMinimum => "below-minimum",
            Cause::Unexplained => "unexplained",
        }
    }
}

/// The uncached prompt tokens of a request charged to one cause.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    /// The cause.
    pub cause: Cause,
    /// Its tokens.
    pub tokens: u64,
    /// What they cost (the request's uncached cost in proportion), with a price table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// The provider's own cache diagnosis of a request beside the library's finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsCheck {
    /// The provider's reason (`system_changed`, `none`, `pending`, ...).
    pub provider: String,
    /// The library's finding in the provider's words: `model_changed`, `tools_changed`,
    /// `system_changed`, `messages_changed` (the first difference in the order Anthropic reads
    /// a request: tools, system, messages), `none` (it extends the earlier request), or
    /// `config_changed` (another call config field, which the provider has no reason for).
    pub ours: String,
    /// Whether they agree; `None` where they cannot be compared (the provider's comparison
    /// was pending, unavailable or found no previous message, or the finding is
    /// `config_changed`).
    pub agrees: Option<bool>,
}

/// Where a request diverges from the one it is compared with, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// The first differing component.
    #[serde(flatten)]
    pub component: Component,
    /// The byte offset in the cacheable bytes where the two requests part.
    pub at_byte: u64,
    /// The event that caused it.
    pub event: Cause,
    /// The seq of that event, where one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<u64>,
    /// The event in words (`the request header changed at seq 9`).
    pub because: String,
    /// A sentence saying it all.
    pub summary: String,
}

/// One request of the log, explained.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestReport {
    /// `"1"`, `"2"`, ... for conversation requests (as `llmsession show --step N` numbers them),
    /// `"c1"`, `"c2"`, ... for summarisation requests.
    pub id: String,
    /// Conversation or compaction.
    pub kind: Kind,
    /// The seq of its `step/start` or `compaction/start`.
    pub seq: u64,
    /// Turn and step (a summarisation request: those of the last conversation request before it).
    pub turn: u64,
    /// See `turn`.
    pub step: u64,
    /// The agent instance whose header it used.
    pub instance: u64,
    /// The header event recorded just before it, if any: `initial`, `resume`, `change`, `delta`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Compactions that landed since the previous conversation request.
    pub compactions_before: u64,
    /// Messages (session prefix included).
    pub messages: usize,
    /// Session prefix messages.
    pub prefix_len: usize,
    /// Bytes of its cacheable components (system, tools, messages).
    pub bytes: u64,
    /// Its tokens, by the report's counter.
    pub tokens: u64,
    /// Whether the log rebuilds the request that was sent (its digest matches).
    pub rebuilt: bool,
    /// The request it is compared with (`id`), when there is an earlier one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared_with: Option<String>,
    /// Cacheable bytes shared with that request.
    pub shared_bytes: u64,
    /// Their tokens.
    pub shared_tokens: u64,
    /// Leading messages shared whole.
    pub shared_messages: usize,
    /// Whether it extends the earlier request whole (everything that one sent is reused).
    pub extends: bool,
    /// Where and why it differs, when it does not extend the earlier one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// Provider-reported usage, when the log has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Provider-reported prompt tokens (0 without usage).
    pub prompt_tokens: u64,
    /// Provider-reported tokens read from cache (0 without usage).
    pub cached_tokens: u64,
    /// The tokens the provider could have read from its cache (see the module docs).
    pub expected_cached_tokens: u64,
    /// The uncached prompt tokens: reported, or `tokens - shared_tokens` without usage.
    pub uncached_tokens: u64,
    /// Whether `uncached_tokens` comes from the provider (`"provider"`) or the counter.
    pub spend_source: &'static str,
    /// What the uncached prompt tokens are charged to: the divergence's cause, else the first
    /// cause other than growth that `causes` charges tokens to, else growth.
    pub cause: Cause,
    /// The uncached prompt tokens by cause (only causes with tokens, in report order); they
    /// sum to `uncached_tokens`.
    pub causes: Vec<Charge>,
    /// When the request was built (its `step/start` or `compaction/start` time, Unix ms).
    pub time: u64,
    /// Milliseconds since the request it is compared with was built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap_ms: Option<u64>,
    /// The cache rule in force: the provider's TTL and minimum cacheable size.
    pub cache_rule: CacheRule,
    /// Provider-reported tokens written to the cache (0 without usage).
    pub cache_write_tokens: u64,
    /// Cache-write tokens ÷ prompt tokens (with usage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_factor: Option<f64>,
    /// What the request cost, with a price table that prices its model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// The provider's cache diagnosis beside the library's, when the usage has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<DiagnosticsCheck>,
}

/// The costs of a report (with a price table).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostTotals {
    /// What the priced requests cost.
    pub total: f64,
    /// What they would have cost with no cache.
    pub no_cache: f64,
    /// Their uncached cost by cause (every cause present).
    pub by_cause: Vec<(String, f64)>,
    /// Requests with usage whose model the table has no price for.
    pub unpriced: u64,
}

/// The totals of a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Conversation requests.
    pub conversation_requests: u64,
    /// Summarisation requests.
    pub compaction_requests: u64,
    /// Keep-warm requests (absent when 0).
    #[serde(skip_serializing_if = "crate::types::is_zero")]
    pub keepalive_requests: u64,
    /// Requests whose digest the log does not rebuild.
    pub not_rebuilt: u64,
    /// Provider-reported prompt tokens, summed.
    pub prompt_tokens: u64,
    /// Provider-reported cached tokens, summed.
    pub cached_tokens: u64,
    /// Expected cacheable tokens, summed over the requests with provider usage.
    pub expected_cached_tokens: u64,
    /// Uncached prompt tokens by cause (every cause present, 0 when none).
    pub spend: Vec<(String, u64)>,
    /// Provider-reported cache-write tokens, summed.
    pub cache_write_tokens: u64,
    /// The session's re-write factor: cache-write tokens ÷ its context (the largest reported
    /// prompt): how many times the context was written to the cache.
    pub rewrite_factor: f64,
    /// Costs, with a price table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostTotals>,
    /// Requests with a provider cache diagnosis that could be compared with the library's.
    pub diagnostics_compared: u64,
    /// Of those, the ones where the two disagree.
    pub diagnostics_disagreements: u64,
}

/// The explanation of a whole log.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The session id.
    pub session: String,
    /// The token counter used: `estimate`, `tokenizer` or `host`.
    pub counter: &'static str,
    /// Every request, in log order.
    pub requests: Vec<RequestReport>,
    /// Every idle gap, with what it cost and what each action of the cache clock would have
    /// cost (`gaps.rs`; absent when the log has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<gaps::GapReport>,
    /// Totals.
    pub totals: Totals,
    /// Every compaction, in log order: what it cost and what it saved (`compactions.rs`).
    pub compactions: Vec<CompactionReport>,
    /// The compactions per mechanism (portable, native), summed.
    pub compaction_totals: Vec<MechanismTotals>,
}

impl Explanation {
    /// The report as JSON (`spend` as an object keyed by cause).
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::to_value(self).expect("a report serialises");
        let spend: serde_json::Map<String, Value> = self.totals.spend.iter().map(|(k, n)| (k.clone(), json!(n))).collect();
        v["totals"]["spend"] = Value::Object(spend);
        if let Some(c) = &self.totals.cost {
            let by: serde_json::Map<String, Value> = c.by_cause.iter().map(|(k, n)| (k.clone(), json!(n))).collect();
            v["totals"]["cost"]["byCause"] = Value::Object(by);
        }
        v
    }

    /// The request with this id (`"3"`, `"c1"`).
    pub fn request(&self, id: &str) -> Option<&RequestReport> {
        self.requests.iter().find(|r| r.id == id)
    }
}

// ---------------------------------------------------------------------------------------------
// The walk over the log.

/// A request seen so far, kept as a candidate for the next ones.
struct Seen {
    index: usize,
    seq: u64,
    instance: u64,
    parts: Parts,
    prompt: Option<u64>,
}

/// What the final pass needs of a request beside its report.
struct Side {
    /// The report index of the request it is compared with.
    cand: Option<usize>,
    /// Provider, model and pass-through config fields of its call config.
    provider: String,
    model: String,
    config: JsonMap,
    /// The library's finding in the provider's diagnostic words (see [`DiagnosticsCheck`]).
    ours: &'static str,
}

/// The library's finding in Anthropic's diagnostic words: the first difference in the order
/// Anthropic reads a request (tools, system, messages).
fn our_reason(prev: &Parts, cur: &Parts, share: &Share, rebuilt: bool) -> &'static str {
    let field = |p: &Parts, k: &str| p.config.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    let config_differs = matches!(share.diverge, Some(Component::Config { .. }));
    if config_differs && field(prev, "model") != field(cur, "model") {
        "model_changed"
    } else if config_differs {
        "config_changed"
    } else if prev.tools != cur.tools {
        "tools_changed"
    } else if prev.system.as_ref().map(|s| &s.1) != cur.system.as_ref().map(|s| &s.1) {
        "system_changed"
    } else if share.diverge.is_some() || !rebuilt {
        "messages_changed"
    } else {
        "none"
    }
}

/// What `explain` is given besides the log: the cache rules' overrides and a price table.
#[derive(Clone, Debug, Default)]
pub struct ExplainSettings {
    /// Overrides of the providers' TTLs and minimum cacheable sizes.
    pub cache_rules: CacheRules,
    /// Prices, for the cost report.
    pub prices: Option<PriceTable>,
}

/// Counts tokens per component, caching history messages by seq and prefix messages by text.
struct Counter<'a> {
    counter: &'a dyn TokenCounter,
    by_seq: HashMap<u64, u64>,
    by_text: HashMap<Arc<str>, u64>,
    head: Option<(String, Vec<u64>)>,
}

impl Counter<'_> {
    fn message(&mut self, m: &Msg) -> Result<u64> {
        let count = |c: &dyn TokenCounter, text: &str| -> Result<u64> {
            let v: Value = serde_json::from_str(text).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            c.count(Countable::Message(&Message::from_value(&v, "message")?))
        };
        match m {
            Msg::Entry(d) => {
                if let Some(n) = self.by_seq.get(&d.seq) {
                    return Ok(*n);
                }
                let n = count(self.counter, d.json.as_str())?;
                self.by_seq.insert(d.seq, n);
                Ok(n)
            }
            Msg::Text(t) => {
                if let Some(n) = self.by_text.get(t) {
                    return Ok(*n);
                }
                let n = count(self.counter, t)?;
                self.by_text.insert(t.clone(), n);
                Ok(n)
            }
        }
    }

    /// Weights of the system prompt and each tool (recounted only when they change).
    fn head(&mut self, header: &EpochHeader) -> Result<Vec<u64>> {
        let key = format!("{}\u{0}{}", header.system_str(), serde_json::to_string(header.tools_slice()).expect("tools serialise"));
        if let Some((k, w)) = &self.head {
            if *k == key {
                return Ok(w.clone());
            }
        }
        let mut w = Vec::new();
        if !header.system_str().is_empty() {
            w.push(self.counter.count(Countable::System(header.system_str()))?);
        }
        for t in header.tools_slice() {
            w.push(self.counter.count(Countable::Tools(std::slice::from_ref(t)))?);
        }
        self.head = Some((key, w.clone()));
        Ok(w)
    }

    fn weights(&mut self, header: &EpochHeader, parts: &Parts) -> Result<Vec<u64>> {
        let mut w = self.head(header)?;
        for m in &parts.messages {
            w.push(self.message(m)?);
        }
        Ok(w)
    }
}

/// Tokens of the shared part: the components shared whole, plus the partly shared one in
/// proportion to its shared bytes.
fn shared_tokens(weights: &[u64], share: &Share) -> u64 {
    let whole: u64 = weights.iter().take(share.whole).sum();
    let partial = match (share.partial, weights.get(share.whole)) {
        (Some((common, len)), Some(w)) if len > 0 => (*w as u128 * common as u128 / len as u128) as u64,
        _ => 0,
    };
    whole + partial
}

/// Explains every request of a log read by
/// [`read_checked`](crate::log::load::read_checked) (see the module docs): the log
/// passed every check an open makes, so a log that is damaged, breaks the log rules or was
/// changed without its chain recomputed never gets this far. `counter` counts tokens (pass
/// [`Estimator`](crate::tokens::Estimator) for the built-in estimate). A request that the log
/// does not rebuild (a rewrite that recomputed the chain, or an edited version 1 log, which has
/// none) is reported (`rebuilt: false`, cause `edit`), not an error.
pub fn explain_log(log: &CheckedLog, counter: &dyn TokenCounter) -> Result<Explanation> {
    explain_log_with(log, counter, &ExplainSettings::default())
}

/// [`explain_log`] with cache-rule overrides and a price table.
pub fn explain_log_with(log: &CheckedLog, counter: &dyn TokenCounter, settings: &ExplainSettings) -> Result<Explanation> {
    let session = log.header();
    let mut sides: Vec<Side> = Vec::new();
    let (mut walk, events) = RequestWalk::of(log);
    let mut counts = Counter { counter, by_seq: HashMap::new(), by_text: HashMap::new(), head: None };
    let mut compactions = compactions::Compactions::default();
    let mut out: Vec<RequestReport> = Vec::new();
    let mut last_conv: Option<Seen> = None;
    let mut last_comp: Option<Seen> = None;
    let mut last_keep: Option<Seen> = None;
    let mut idle = gaps::GapWalker::new(settings);
    let mut pending_header: Option<String> = None;
    let mut headers: Vec<(u64, String, u64)> = Vec::new(); // (seq, reason, instance)
    let mut landed = 0u64;
    let mut overflow_retry = false;
    let (mut n_conv, mut n_comp, mut n_native, mut n_keep) = (0usize, 0usize, 0usize, 0usize);
    let (mut turn, mut step) = (0u64, 0u64);
    // The report index of the request the next usage belongs to.
    let mut awaiting_usage: Option<usize> = None;
    let mut side = SideTables::default();
    // (counted tokens, reported prompt tokens) of every request with usage so far.
    let mut calibration: Vec<(u64, u64)> = Vec::new();
    for ev in events {
        let built = match walk.rebuild(ev)? {
            None => None,
            Some(r) => {
                let rebuilt = r.matches();
                let (entries, prefix) = (walk.log().history().entries(), walk.prefix());
                match r.kind {
                    RecordedKind::Conversation { turn: t, step: s, .. } => {
                        let mut parts = Parts::head(&r.header, &r.header.config, prefix);
                        parts.messages.extend(entries.iter().cloned().map(Msg::Entry));
                        n_conv += 1;
                        (turn, step) = (t, s);
                        let cfg = r.header.config.clone();
                        Some((Kind::Conversation, n_conv.to_string(), r.header, parts, rebuilt, t, s, cfg))
                    }
                    RecordedKind::NativeCompaction { format, max_tokens, .. } => {
                        let format = crate::render::Renderer::parse(&format)?;
                        let cfg = crate::request::native_compaction_config(&r.header.config, format, max_tokens);
                        let mut parts = Parts::head(&r.header, &cfg, prefix);
                        if format != crate::render::Renderer::Anthropic {
                            parts.tools.clear();
                        }
                        parts.messages.extend(r.region.iter().cloned().map(Msg::Entry));
                        n_native += 1;
                        Some((Kind::Compaction, format!("n{n_native}"), r.header, parts, rebuilt, turn, step, cfg))
                    }
                    RecordedKind::Compaction { instruction, provider, model, max_tokens, .. } => {
                        let cfg = summary_config(&r.header.config, &provider, &model, max_tokens);
                        let mut parts = Parts::head(&r.header, &cfg, prefix);
                        parts.messages.extend(r.region.iter().cloned().map(Msg::Entry));
                        let instr = serde_json::to_string(&Message::user_text(&instruction)).expect("serialises");
                        parts.messages.push(Msg::Text(Arc::from(instr)));
                        parts.trailing = true;
                        n_comp += 1;
                        Some((Kind::Compaction, format!("c{n_comp}"), r.header, parts, rebuilt, turn, step, cfg))
                    }
                    RecordedKind::Keepalive { replays, max_tokens, .. } => {
                        let cfg = keepalive_config(&r.header.config, max_tokens);
                        let mut parts = Parts::head(&r.header, &cfg, prefix);
                        let history = routed_history(walk.log(), replays).unwrap_or(&[]);
                        parts.messages.extend(history.iter().cloned().map(Msg::Entry));
                        n_keep += 1;
                        Some((Kind::Keepalive, format!("k{n_keep}"), r.header, parts, rebuilt, turn, step, cfg))
                    }
                }
            }
        };
        if let Some((kind, id, header, parts, rebuilt, t, s, cfg)) = built {
            let instance = walk.log().state().headers.instance().unwrap_or(0);
            let weights = counts.weights(&header, &parts)?;
            let tokens: u64 = weights.iter().sum();
            // The candidates: the last conversation request, and a summarisation request sent
            // after it.
            // A keep-warm request sent after it shares what it shares, and used the cache
            // later: on a tie it is the one compared with.
            let mut best: Option<(&Seen, Share)> = None;
            for (cand, later) in [(last_conv.as_ref(), false), (last_comp.as_ref(), false), (last_keep.as_ref(), true)] {
                let Some(cand) = cand else { continue };
                let share = compare(&cand.parts, &parts);
                if best.as_ref().is_none_or(|(_, b)| share.bytes > b.bytes || (later && share.bytes == b.bytes)) {
                    best = Some((cand, share));
                }
            }
            let index = out.len();
            let mut report = RequestReport {
                id,
                kind,
                seq: ev.seq,
                turn: t,
                step: s,
                instance,
                header: if kind == Kind::Conversation { pending_header.take() } else { None },
                compactions_before: if kind == Kind::Conversation { std::mem::take(&mut landed) } else { 0 },
                messages: parts.messages.len(),
                prefix_len: parts.prefix_len,
                bytes: parts.bytes(),
                tokens,
                rebuilt,
                compared_with: None,
                shared_bytes: 0,
                shared_tokens: 0,
                shared_messages: 0,
                extends: false,
                divergence: None,
                usage: None,
                prompt_tokens: 0,
                cached_tokens: 0,
                expected_cached_tokens: 0,
                uncached_tokens: tokens,
                spend_source: "estimate",
                cause: Cause::Growth,
                causes: Vec::new(),
                time: ev.time,
                gap_ms: None,
                cache_rule: CacheRule { ttl_ms: None, min_tokens: 0 },
                cache_write_tokens: 0,
                rewrite_factor: None,
                cost: None,
                diagnostics: None,
            };
            let mut this =
                Side { cand: None, provider: cfg.provider.clone(), model: cfg.model.clone(), config: cfg.extra.clone(), ours: "none" };
            let mut candidate: Option<(Option<u64>, bool)> = None; // (its reported prompt, extends)
            if let Some((cand, share)) = best {
                this.cand = Some(cand.index);
                this.ours = our_reason(&cand.parts, &parts, &share, rebuilt);
                report.gap_ms = Some(ev.time.saturating_sub(out[cand.index].time));
                report.compared_with = Some(out[cand.index].id.clone());
                report.shared_bytes = share.bytes;
                report.shared_tokens = shared_tokens(&weights, &share);
                report.shared_messages = share.messages;
                report.extends = share.diverge.is_none() && share.bytes == cand.parts.bytes();
                if let Some(c) = share.diverge.clone() {
                    let (event, event_seq) = attribute(&c, cand, &parts, instance, &headers, &side, kind);
                    let because = why(event, event_seq);
                    let summary = format!(
                        "{} differs from request {} (after {} shared bytes): {because}",
                        c.describe(),
                        out[cand.index].id,
                        share.bytes
                    );
                    report.divergence = Some(Divergence { component: c, at_byte: share.bytes, event, event_seq, because, summary });
                }
                candidate = Some((cand.prompt, report.extends));
            }
            report.cause = match (kind, &report.divergence) {
                (Kind::Compaction, _) => Cause::Compaction,
                _ if overflow_retry => Cause::RetryAfterOverflow,
                _ if !rebuilt => Cause::Edit,
                (_, Some(d)) => d.event,
                _ => Cause::Growth,
            };
            if !rebuilt && report.divergence.is_none() {
                let since = out.iter().rev().find(|r| r.rebuilt).map(|r| r.seq);
                let because = format!(
                    "an event {}before seq {} was changed after the request was sent",
                    since.map(|s| format!("after seq {s} and ")).unwrap_or_default(),
                    ev.seq
                );
                let summary = format!(
                    "the log no longer rebuilds request {} (its digest differs from the one recorded when it was sent): {because}",
                    report.id
                );
                report.divergence = Some(Divergence {
                    component: first_changed_entry(&parts, since),
                    at_byte: report.shared_bytes,
                    event: Cause::Edit,
                    event_seq: None,
                    because,
                    summary,
                });
            }
            report.expected_cached_tokens = match candidate {
                None => 0,
                Some((Some(prompt), true)) => prompt,
                Some(_) => calibrated(report.shared_tokens, &calibration),
            };
            report.uncached_tokens = tokens.saturating_sub(report.shared_tokens);
            let seen = Seen { index, seq: ev.seq, instance, parts, prompt: None };
            match kind {
                Kind::Conversation => {
                    last_conv = Some(seen);
                    last_comp = None;
                    last_keep = None;
                    overflow_retry = false;
                }
                Kind::Compaction => last_comp = Some(seen),
                Kind::Keepalive => last_keep = Some(seen),
            }
            idle.request(index, kind, ev);
            awaiting_usage = Some(index);
            out.push(report);
            sides.push(this);
        }
        // Usage, header events, overflow retries, landed compactions.
        match ev.ty.as_str() {
            types::ASSISTANT_MESSAGE | types::COMPACTION_SUMMARY | types::CLOCK_KEEPALIVE_END => {
                let want = match ev.ty.as_str() {
                    types::ASSISTANT_MESSAGE => Kind::Conversation,
                    types::COMPACTION_SUMMARY => Kind::Compaction,
                    _ => Kind::Keepalive,
                };
                if let (Some(i), Some(u)) = (awaiting_usage, ev.data.get("usage")) {
                    if out[i].kind == want {
                        if let Ok(u) = Usage::from_value(u, "usage") {
                            set_usage(&mut out[i], u);
                            let prompt = out[i].prompt_tokens;
                            let seen = match want {
                                Kind::Conversation => last_conv.as_mut(),
                                Kind::Compaction => last_comp.as_mut(),
                                Kind::Keepalive => last_keep.as_mut(),
                            };
                            if let Some(s) = seen.filter(|s| s.index == i) {
                                s.prompt = Some(prompt);
                            }
                            if out[i].tokens > 0 {
                                calibration.push((out[i].tokens, prompt));
                            }
                            awaiting_usage = None;
                        }
                    }
                }
            }
            types::REQUEST_HEADER | types::REQUEST_HEADER_DELTA => {
                let reason = ev.data.get("reason").and_then(Value::as_str).unwrap_or("delta").to_string();
                let inst = ev.data.get("instance").and_then(Value::as_u64).unwrap_or(0);
                headers.push((ev.seq, reason.clone(), inst));
                pending_header = Some(reason);
            }
            types::STEP_END if ev.data.get("overflow").and_then(Value::as_bool) == Some(true) => overflow_retry = true,
            types::COMPACTION_END if ev.data.get("outcome").and_then(Value::as_str) == Some("landed") => landed += 1,
            types::COMPACTION_START => side.compaction_starts.push(ev.seq),
            types::USER_MESSAGE => {
                if let Some(src) = ev.data.get("source").and_then(Value::as_str) {
                    side.sources.insert(ev.seq, src.to_string());
                }
            }
            _ => {}
        }
        let request = out.last().filter(|r| r.seq == ev.seq).map(|r| r.id.clone());
        if request.is_some() && out.last().is_some_and(|r| r.kind == Kind::Conversation) {
            compactions.conversation_request();
        }
        compactions.before(ev, walk.log().history().entries(), &mut counts, request.as_deref())?;
        idle.observe(ev, walk.log());
        // Folded without keeping the lines (as `verify` does): only the state is needed.
        walk.apply(ev, ev.seq).map_err(|e| as_corrupt(e, ev.seq as usize + 2))?;
        compactions.after(ev, walk.log().history().entries(), &mut counts)?;
    }
    charge(&mut out, &sides, settings);
    let mut totals = Totals::default();
    let mut spend: HashMap<Cause, u64> = HashMap::new();
    let mut cost_by: HashMap<Cause, f64> = HashMap::new();
    let mut cost = settings.prices.as_ref().map(|_| CostTotals::default());
    let mut context = 0u64;
    for r in &out {
        match r.kind {
            Kind::Conversation => totals.conversation_requests += 1,
            Kind::Compaction => totals.compaction_requests += 1,
            Kind::Keepalive => totals.keepalive_requests += 1,
        }
        totals.not_rebuilt += u64::from(!r.rebuilt);
        totals.prompt_tokens += r.prompt_tokens;
        totals.cached_tokens += r.cached_tokens;
        if r.usage.is_some() {
            totals.expected_cached_tokens += r.expected_cached_tokens;
        }
        for c in &r.causes {
            *spend.entry(c.cause).or_default() += c.tokens;
            *cost_by.entry(c.cause).or_default() += c.cost.unwrap_or(0.0);
        }
        totals.cache_write_tokens += r.cache_write_tokens;
        context = context.max(r.prompt_tokens);
        if let Some(t) = cost.as_mut() {
            match &r.cost {
                Some(c) => {
                    t.total += c.total;
                    t.no_cache += c.no_cache;
                }
                None if r.usage.is_some() => t.unpriced += 1,
                None => {}
            }
        }
        if let Some(d) = &r.diagnostics {
            if let Some(agrees) = d.agrees {
                totals.diagnostics_compared += 1;
                totals.diagnostics_disagreements += u64::from(!agrees);
            }
        }
    }
    totals.spend = Cause::ALL.iter().map(|c| (c.as_str().to_string(), spend.get(c).copied().unwrap_or(0))).collect();
    totals.rewrite_factor = if context > 0 { totals.cache_write_tokens as f64 / context as f64 } else { 0.0 };
    if let Some(t) = cost.as_mut() {
        t.by_cause = Cause::ALL.iter().map(|c| (c.as_str().to_string(), cost_by.get(c).copied().unwrap_or(0.0))).collect();
    }
    totals.cost = cost;
    let (compactions, compaction_totals) = compactions.finish(settings.prices.as_ref());
    let gaps = idle.finish(&out);
    Ok(Explanation { session: session.id.clone(), counter: counter.name(), requests: out, gaps, totals, compactions, compaction_totals })
}

/// The counted `shared` tokens in the provider's tokens: scaled by the reported-to-counted ratio
/// of the earlier request (with usage) nearest in size to the shared part. How many tokens a text
/// takes depends on what it is (prose, code, JSON), and in a session whose requests extend each
/// other the request nearest in size to the shared part is mostly that same content. Without any
/// usage, the counted tokens.
fn calibrated(shared: u64, calibration: &[(u64, u64)]) -> u64 {
    match calibration.iter().min_by_key(|(t, _)| t.abs_diff(shared)) {
        Some(&(tokens, prompt)) => (shared as u128 * prompt as u128 / tokens as u128) as u64,
        None => shared,
    }
}

/// The final pass: the cache rule, the uncached tokens by cause, the cost and the provider's
/// diagnosis of every request (the usage of each is known now).
///
/// The uncached tokens `U` (reported: prompt - cached; estimated: counted - shared) are split
/// in two, never more than `U` in all: **growth**, the prompt beyond what the earlier request
/// had (`prompt - old`, `old = min(prompt, earlier prompt)`), and what the provider did not read
/// of that earlier content (`old - cached`), charged to the first that applies:
/// **context-edit** (the provider edited this request), **expiry** (the gap since the earlier
/// request is longer than the TTL in force and the provider read less than 99 % of the expected
/// tokens), the **divergence's cause** (the request differs
/// from the earlier one: a provider caches at block granularity, so what it loses at a
/// divergence is charged to it whole), **below-minimum** (the expected prefix is shorter than
/// the provider caches), else **unexplained**. A summarisation request's tokens are all
/// compaction, an overflow retry's all retry-after-overflow.
fn charge(out: &mut [RequestReport], sides: &[Side], settings: &ExplainSettings) {
    for i in 0..out.len() {
        let side = &sides[i];
        let cand = side.cand.map(|c| &out[c]);
        let wrote_one_hour = cand.and_then(|c| c.usage.as_ref()).and_then(|u| u.cache_write_1h_tokens).unwrap_or(0) > 0;
        let rule = settings.cache_rules.rule(&CacheSettings {
            provider: &side.provider,
            model: &side.model,
            config: Some(&side.config),
            wrote_one_hour,
        });
        let r = &out[i];
        let provider = r.usage.is_some();
        let u = r.uncached_tokens;
        let (prompt, cached, expected) = if provider {
            (r.prompt_tokens, r.cached_tokens, r.expected_cached_tokens)
        } else {
            (r.tokens, r.shared_tokens, r.shared_tokens)
        };
        let earlier = cand.map_or(0, |c| if c.usage.is_some() { c.prompt_tokens } else { c.tokens });
        let old = prompt.min(earlier);
        let expected = expected.min(old);
        let diverged = r.divergence.is_some() || !r.rebuilt;
        let edited = r.usage.as_ref().and_then(|u| u.context_edits.as_ref()).is_some_and(|e| !e.is_empty());
        // Expired: the gap is longer than the TTL and the provider did not read what it should
        // have (a cache that gave at least 99 % of the expected tokens held, whatever the clock
        // says: a slow summarisation between two requests is not an expiry if the prefix was read).
        let expired = matches!((r.gap_ms, rule.ttl_ms), (Some(g), Some(t)) if g > t) && (cached as u128) * 100 < (expected as u128) * 99;
        // What the provider did not read of the earlier content.
        let missed = old - cached.min(old);
        let missed_cause = if edited {
            Cause::ContextEdit
        } else if expired {
            Cause::Expiry
        } else if diverged {
            r.cause
        } else if expected < rule.min_tokens {
            Cause::BelowMinimum
        } else {
            Cause::Unexplained
        };
        let mut parts: Vec<(Cause, u64)> = match (r.kind, r.cause) {
            (Kind::Compaction, _) => vec![(Cause::Compaction, u)],
            (_, Cause::RetryAfterOverflow) => vec![(Cause::RetryAfterOverflow, u)],
            _ => vec![(Cause::Growth, prompt - old), (missed_cause, missed)],
        };
        // Never more than the uncached tokens, and all of them.
        let mut left = u;
        for p in parts.iter_mut() {
            p.1 = p.1.min(left);
            left -= p.1;
        }
        if left > 0 {
            parts.push((Cause::Unexplained, left));
        }
        let mut causes: Vec<Charge> = Vec::new();
        for c in Cause::ALL {
            let tokens: u64 = parts.iter().filter(|p| p.0 == c).map(|p| p.1).sum();
            if tokens > 0 {
                causes.push(Charge { cause: c, tokens, cost: None });
            }
        }
        let cost = match (&settings.prices, &r.usage) {
            (Some(t), Some(usage)) => t.price(&side.provider, &side.model).map(|p| p.cost(usage)),
            _ => None,
        };
        if let Some(c) = &cost {
            for ch in causes.iter_mut() {
                ch.cost = Some(if u > 0 { c.uncached * ch.tokens as f64 / u as f64 } else { 0.0 });
            }
        }
        let diagnostics = r.usage.as_ref().and_then(|u| u.cache_diagnostics.as_ref()).map(|d| {
            const COMPARABLE: &[&str] = &["model_changed", "system_changed", "tools_changed", "messages_changed", "none"];
            let comparable = COMPARABLE.contains(&d.reason.as_str()) && side.ours != "config_changed";
            DiagnosticsCheck { provider: d.reason.clone(), ours: side.ours.into(), agrees: comparable.then(|| d.reason == side.ours) }
        });
        let r = &mut out[i];
        if !diverged && r.kind == Kind::Conversation && r.cause == Cause::Growth {
            r.cause = causes.iter().map(|c| c.cause).find(|c| *c != Cause::Growth).unwrap_or(Cause::Growth);
        }
        r.cache_rule = rule;
        r.causes = causes;
        r.cost = cost;
        r.diagnostics = diagnostics;
        if let Some(usage) = &r.usage {
            r.cache_write_tokens = usage.cache_write_tokens.unwrap_or(0);
            r.rewrite_factor = (r.prompt_tokens > 0).then(|| r.cache_write_tokens as f64 / r.prompt_tokens as f64);
        }
    }
}

fn set_usage(r: &mut RequestReport, u: Usage) {
    r.prompt_tokens = u.prompt_tokens();
    r.cached_tokens = u.cache_read_tokens.unwrap_or(0);
    r.uncached_tokens = r.prompt_tokens.saturating_sub(r.cached_tokens);
    r.spend_source = "provider";
    r.usage = Some(u);
}

/// For a request the log does not rebuild: the first history entry logged after the last
/// request that it did rebuild (the edited event is at or after it).
fn first_changed_entry(parts: &Parts, after: Option<u64>) -> Component {
    let index = parts
        .messages
        .iter()
        .skip(parts.prefix_len)
        .position(|m| matches!(m, Msg::Entry(d) if after.is_none_or(|a| d.seq > a)))
        .unwrap_or(0);
    Component::History { index, offset: 0 }
}

/// What the walk keeps of events it has applied (the log is folded without its lines).
#[derive(Default)]
struct SideTables {
    /// The `source` of every `user/message`, by seq.
    sources: HashMap<u64, String>,
    /// The seqs of every `compaction/start`.
    compaction_starts: Vec<u64>,
}

/// The event behind a divergence.
fn attribute(
    c: &Component,
    cand: &Seen,
    cur: &Parts,
    instance: u64,
    headers: &[(u64, String, u64)],
    side: &SideTables,
    kind: Kind,
) -> (Cause, Option<u64>) {
    let header_between = headers.iter().rev().find(|(seq, _, _)| *seq > cand.seq);
    let new_instance = instance != cand.instance;
    let resume_seq = headers.iter().rev().find(|(seq, r, _)| *seq > cand.seq && r == "resume").map(|h| h.0);
    match c {
        Component::Config { field } if kind == Kind::Compaction && (field == "provider" || field == "model") => {
            (Cause::Compaction, None) // a summarisation target of its own
        }
        Component::Config { .. } | Component::System { .. } | Component::Tool { .. } => {
            if new_instance {
                (Cause::Resume, resume_seq.or(header_between.map(|h| h.0)))
            } else if let Some(h) = header_between {
                (Cause::HeaderChange, Some(h.0))
            } else if kind == Kind::Compaction || cand.parts.trailing {
                (Cause::Compaction, None)
            } else {
                (Cause::Edit, None)
            }
        }
        Component::Prefix { .. } => {
            if new_instance {
                (Cause::Resume, resume_seq)
            } else {
                (Cause::Edit, None)
            }
        }
        Component::Instruction { .. } => (Cause::Compaction, cand.parts.trailing.then_some(cand.seq)),
        Component::History { index, .. } => {
            let i = cur.prefix_len + index;
            match cur.messages.get(i) {
                Some(Msg::Entry(d)) if d.checkpoint => {
                    // The compaction/start of the compaction that landed this checkpoint.
                    let start = side.compaction_starts.iter().rev().find(|&&s| s < d.seq).copied();
                    (Cause::Compaction, start.or(Some(d.seq)))
                }
                Some(Msg::Entry(d)) if d.seq > cand.seq || kind == Kind::Compaction => match side.sources.get(&d.seq).map(String::as_str) {
                    Some("host") | Some("plugin") => (Cause::Inject, Some(d.seq)),
                    _ if kind == Kind::Compaction => (Cause::Compaction, None),
                    _ => (Cause::Edit, Some(d.seq)),
                },
                _ if new_instance => (Cause::Resume, resume_seq),
                _ => (Cause::Edit, None),
            }
        }
    }
}

fn why(event: Cause, seq: Option<u64>) -> String {
    let at = seq.map(|s| format!(" at seq {s}")).unwrap_or_default();
    match event {
        Cause::HeaderChange => format!("the request header changed{at}"),
        Cause::Resume => format!("a new agent instance resumed the session{at}"),
        Cause::Compaction => format!("compaction{at}"),
        Cause::Inject => format!("context was injected{at} where the earlier request had other content"),
        Cause::Edit => format!("the log was changed{at} after the earlier request was sent"),
        Cause::Growth => "growth".into(),
        Cause::RetryAfterOverflow => format!("retry after a context overflow{at}"),
        Cause::ContextEdit => format!("the provider edited the request's context{at}"),
        Cause::Expiry => "the cached prefix expired".into(),
        Cause::BelowMinimum => "the prefix is below the provider's minimum cacheable size".into(),
        Cause::Unexplained => "unexplained".into(),
    }
}

/// Explains a whole stored log given as its records (session header first), read as every
/// reader reads a log ([`read_checked_records`]): a log an open refuses, or whose unfinished
/// last turn an open would cut as damaged, is [`ErrorKind::CorruptLog`] naming the line, as
/// `verify` reports it.
pub fn explain_records(records: &[Vec<u8>], counter: &dyn TokenCounter) -> Result<Explanation> {
    explain_log(&read_checked_records(records)?, counter)
}

/// [`explain_records`] with cache-rule overrides and a price table.
pub fn explain_records_with(records: &[Vec<u8>], counter: &dyn TokenCounter, settings: &ExplainSettings) -> Result<Explanation> {
    explain_log_with(&read_checked_records(records)?, counter, settings)
}

/// The token counter `lls_session_explain` and `lls_explain_file` count with, from their options
/// `{"tokenizer"?: path}` (default: the built-in estimate).
pub fn explain_counter(options: Option<&Value>) -> Result<Box<dyn TokenCounter>> {
    Ok(explain_options(options)?.0)
}

/// The token counter and the settings `lls_session_explain` and `lls_explain_file` explain
/// with, from their options `{"tokenizer"?: path, "prices"?: {...}, "cacheRules"?: {...}}`
/// ([`PriceTable::from_value`], [`CacheRules::from_value`]).
pub fn explain_options(options: Option<&Value>) -> Result<(Box<dyn TokenCounter>, ExplainSettings)> {
    let Some(v) = options else { return Ok((Box::new(Estimator), ExplainSettings::default())) };
    let f = Fields::of(v, "options")?;
    if let Some(k) = f.map.keys().find(|k| !["tokenizer", "prices", "cacheRules"].contains(&k.as_str())) {
        return Err(Error::invalid(f.p(k), "is not an explain option (expected tokenizer, prices or cacheRules)"));
    }
    let settings = ExplainSettings {
        prices: f.opt_value("prices")?.map(PriceTable::from_value).transpose()?,
        cache_rules: f.opt_value("cacheRules")?.map(CacheRules::from_value).transpose()?.unwrap_or_default(),
    };
    let counter: Box<dyn TokenCounter> = match f.opt_str("tokenizer")? {
        None => Box::new(Estimator),
        Some("") => return Err(Error::invalid("options.tokenizer", "the path is empty")),
        Some(path) => Box::new(TokenizerCounter::from_file(path)?),
    };
    Ok((counter, settings))
}
