//! Token counters for the token meter (docs/contract.md §6.1).
//!
//! A [`TokenCounter`] counts one [`Countable`] at a time: the system prompt, the tool schemas,
//! or one message. Three counters exist, best first:
//!
//! 1. [`HostCounter`]: the host's own token-count callback, handed the item as JSON
//!    ([`Countable::to_json`]). It decides everything, framing included.
//! 2. [`TokenizerCounter`]: exact counts from a HuggingFace `tokenizer.json`.
//! 3. [`Estimator`]: the built-in estimate ([`estimate_text`]), zero configuration.
//!
//! The tokenizer and the estimate share one set of **framing rules**, so they differ only in
//! how a piece of text is measured:
//!
//! - **system**: the text plus [`SYSTEM_OVERHEAD`]; an empty system prompt is 0.
//! - **tools**: for each schema, the JSON text of the schema (`{"name","description",
//!   "parameters",...}`, compact) plus [`TOOL_OVERHEAD`]; no tools is 0.
//! - **message**: [`MESSAGE_OVERHEAD`] plus its blocks:
//!   - `text` and `reasoning`: the text;
//!   - `tool-call`: the tool name plus the raw arguments plus [`TOOL_CALL_OVERHEAD`] (the call
//!     id is not counted: it is part of the overhead);
//!   - `tool-result`: its content blocks, counted by these same rules (recursively), plus
//!     [`TOOL_RESULT_OVERHEAD`];
//!   - `image`: a fixed [`IMAGE_TOKENS`];
//!   - any other (opaque) block: the compact JSON text of the whole block.
//!
//!   Message metadata (`provenance`, unknown message fields, unknown fields of known blocks)
//!   is not sent to the model as text and is not counted.
//!
//! `docs/tokens.md` documents these rules, the estimate's calibration and how the meter
//! anchors on provider usage.

mod estimate;
pub mod meter;
mod tokenizer;

pub use estimate::estimate_text;
pub use tokenizer::TokenizerCounter;

use crate::error::{Error, ErrorKind, Result};
use crate::types::{Block, Message, ToolSchema};
use serde_json::{json, Value};

/// Framing tokens added to every message (role markers and separators a chat template adds).
pub const MESSAGE_OVERHEAD: u64 = 4;
/// Framing tokens added to a non-empty system prompt.
pub const SYSTEM_OVERHEAD: u64 = 4;
/// Framing tokens added per tool schema (the wrapper a request or template puts around it).
pub const TOOL_OVERHEAD: u64 = 8;
/// Framing tokens added per tool call (call markers, type, call id).
pub const TOOL_CALL_OVERHEAD: u64 = 8;
/// Framing tokens added per tool result (result markers, call id).
pub const TOOL_RESULT_OVERHEAD: u64 = 4;
/// The fixed cost of an `image` block, whatever its size (providers charge roughly 250–1,600
/// tokens per image depending on resolution; this errs on the high side so that the meter
/// does not under-count). A host that needs better uses a [`HostCounter`].
pub const IMAGE_TOKENS: u64 = 1600;

/// One thing to count.
#[derive(Clone, Copy, Debug)]
pub enum Countable<'a> {
    /// The system prompt.
    System(&'a str),
    /// The tool schemas of a request.
    Tools(&'a [ToolSchema]),
    /// One message (history or session prefix).
    Message(&'a Message),
}

impl Countable<'_> {
    /// The item's kind: `"system"`, `"tools"` or `"message"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Countable::System(_) => "system",
            Countable::Tools(_) => "tools",
            Countable::Message(_) => "message",
        }
    }

    /// The item as the JSON a host counter receives:
    /// `{"kind":"system","text":..}`, `{"kind":"tools","tools":[..]}` or
    /// `{"kind":"message","message":{..}}` (tools and messages in their wire form).
    pub fn to_json(&self) -> Value {
        match self {
            Countable::System(text) => json!({"kind": "system", "text": text}),
            Countable::Tools(tools) => {
                let tools: Vec<Value> = tools.iter().map(|t| serde_json::to_value(t).expect("a tool schema always serialises")).collect();
                json!({"kind": "tools", "tools": tools})
            }
            Countable::Message(m) => json!({"kind": "message", "message": m.to_value()}),
        }
    }
}

/// Something that counts tokens.
pub trait TokenCounter: Send + Sync {
    /// The number of tokens `item` takes in a request.
    fn count(&self, item: Countable<'_>) -> Result<u64>;

    /// The counter's source: `"estimate"`, `"tokenizer"` or `"host"`.
    fn name(&self) -> &'static str;
}

/// Applies the framing rules, measuring each piece of text with `text`.
pub(crate) fn count_with(item: Countable<'_>, text: &mut dyn FnMut(&str) -> Result<u64>) -> Result<u64> {
    match item {
        Countable::System(s) => {
            if s.is_empty() {
                Ok(0)
            } else {
                Ok(text(s)? + SYSTEM_OVERHEAD)
            }
        }
        Countable::Tools(tools) => {
            let mut total = 0;
            for t in tools {
                let json = serde_json::to_string(t).expect("a tool schema always serialises");
                total += text(&json)? + TOOL_OVERHEAD;
            }
            Ok(total)
        }
        Countable::Message(m) => {
            let mut total = MESSAGE_OVERHEAD;
            for b in &m.content {
                total += count_block(b, text)?;
            }
            Ok(total)
        }
    }
}

fn count_block(b: &Block, text: &mut dyn FnMut(&str) -> Result<u64>) -> Result<u64> {
    if let Some(t) = b.text_content() {
        return text(t);
    }
    if let Some((_id, name, arguments)) = b.as_tool_call() {
        return Ok(TOOL_CALL_OVERHEAD + text(name)? + text(arguments)?);
    }
    if b.kind() == "tool-result" {
        let mut total = TOOL_RESULT_OVERHEAD;
        for inner in b.tool_result_content() {
            total += count_block(&inner, text)?;
        }
        return Ok(total);
    }
    if b.kind() == "image" {
        return Ok(IMAGE_TOKENS);
    }
    let json = serde_json::to_string(b).expect("a block always serialises");
    text(&json)
}

/// The built-in estimate: no configuration, no files, deterministic. Text is measured with
/// [`estimate_text`]; items follow the framing rules of this module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimator;

impl TokenCounter for Estimator {
    fn count(&self, item: Countable<'_>) -> Result<u64> {
        count_with(item, &mut |t| Ok(estimate_text(t)))
    }

    fn name(&self) -> &'static str {
        "estimate"
    }
}

/// The host's token-count callback: receives [`Countable::to_json`], returns a count.
pub type HostCountFn = Box<dyn Fn(&Value) -> Result<u64> + Send + Sync>;

/// A counter that asks the host. The callback receives [`Countable::to_json`] and returns the
/// item's token count; it applies its own framing.
///
/// A failing callback gives an [`ErrorKind::Listener`] error whose message says the host
/// token counter failed, on which kind of item, and why (the callback's message); the detail
/// carries `counter: "host"` and `item`. A [`ErrorKind::Cancelled`] error keeps its kind.
pub struct HostCounter {
    callback: HostCountFn,
}

impl std::fmt::Debug for HostCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCounter").finish_non_exhaustive()
    }
}

impl HostCounter {
    /// Wraps a host callback.
    pub fn new(callback: impl Fn(&Value) -> Result<u64> + Send + Sync + 'static) -> Self {
        HostCounter { callback: Box::new(callback) }
    }

    /// Wraps an already boxed host callback.
    pub fn from_boxed(callback: HostCountFn) -> Self {
        HostCounter { callback }
    }
}

impl TokenCounter for HostCounter {
    fn count(&self, item: Countable<'_>) -> Result<u64> {
        let kind = item.kind();
        (self.callback)(&item.to_json()).map_err(|e| {
            let new_kind = if e.kind() == ErrorKind::Cancelled { ErrorKind::Cancelled } else { ErrorKind::Listener };
            let mut out = Error::new(new_kind, format!("host token counter failed on a {kind} item: {}", e.message()));
            for (k, v) in e.detail() {
                out = out.with(k, v.clone());
            }
            out.with("counter", "host").with("item", kind)
        })
    }

    fn name(&self) -> &'static str {
        "host"
    }
}
