//! Token pressure and cache-reusing compaction (docs/contract.md §6, §7).
//!
//! When the measured prompt crosses the policy's threshold, the head of the surface (everything
//! but a retained tail, never separating a tool call from its result) is summarised. The
//! summarisation request replays the latest routed request's exact prefix — system, tools,
//! session prefix and the region's derived messages, byte-identical — and appends the
//! instruction as the last user message, so the provider reads that prefix from its cache. The
//! summary lands as a checkpoint `user/message` that replaces the region on the surface.

pub mod native;
mod policy;
mod region;
mod run;

pub use native::{NativeOutcome, NativeRequest};
pub use policy::{CompactionPolicy, Mechanism, PolicyTable, Retained};
pub use region::{select_region, Region};
pub(crate) use run::last_step_seq;
pub use run::{CompactionOutcome, Outcome, SummaryRequestInfo, Trigger};

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::types::{Fields, Usage};
use serde_json::Value;

/// The estimated tokens of the instruction ([`INSTRUCTION`]) as a summarisation request
/// carries it: its text and its message framing.
pub fn instruction_tokens() -> u64 {
    crate::tokens::estimate_text(INSTRUCTION) + 8
}

/// The instruction appended as the last user message of a summarisation request.
pub const INSTRUCTION: &str = "\
You are now acting as a compaction engine for the conversation above. Do not continue the \
conversation and do not answer any request in it. Write a checkpoint that lets the work go on \
from here without the earlier messages. Use exactly these Markdown sections, in this order:

## Primary request and intent
What the user asked for, in their own terms, including every explicit requirement.

## Key technical concepts
Technologies, frameworks, conventions and decisions that matter for the work.

## Files and code
Every file, function, type, command or URL that was read, changed or created, with exact names \
and paths, and the important snippets verbatim.

## Errors and fixes
Each error met, with its exact message where it matters, and how it was fixed.

## Pending tasks
What was asked for and is not done yet.

## Current work
Precisely what was being worked on right before this checkpoint.

## Next step
The next action, consistent with the user's latest request. Quote the latest request if helpful.

## Critical context
Anything else that would be costly to lose: constraints, preferences, identifiers, numbers.

Rules: keep identifiers, paths, names and numbers exactly as written. If the conversation \
already contains an earlier checkpoint, merge its content into this one instead of repeating \
or dropping it. Do not mention this request or that a summary is being written. Do not call \
any tool. Reply with the checkpoint text only.";

/// The framing around a summary in the checkpoint message that replaces the region.
pub fn checkpoint_text(summary: &str) -> String {
    format!(
        "<conversation-checkpoint>\nThe earlier part of this conversation was condensed into the checkpoint below. \
Treat it as established background: it is accurate, and the conversation continues from it.\n\n{}\n</conversation-checkpoint>",
        summary.trim()
    )
}

/// The request handed to the summariser.
#[derive(Clone, Debug)]
pub struct SummaryRequest {
    /// The request envelope (`purpose: "compaction"`), canonical JSON.
    pub json: String,
    /// Its digest.
    pub digest: String,
    /// The target provider.
    pub provider: String,
    /// The target model.
    pub model: String,
    /// Output budget.
    pub max_tokens: u64,
    /// How many leading messages are the session prefix.
    pub prefix_len: usize,
    /// How many leading messages it shares with the last routed request.
    pub shared_messages: usize,
}

impl SummaryRequest {
    /// What a host summariser receives (the C ABI's callback input): `{"request": envelope,
    /// "provider", "model", "maxTokens", "digest", "sharedMessages", "prefixLen"}`. The envelope
    /// is spliced in as its exact bytes, so the digest is over what the host reads.
    pub fn host_input(&self) -> String {
        let text = |s: &str| Value::from(s).to_string();
        format!(
            "{{\"request\":{},\"provider\":{},\"model\":{},\"maxTokens\":{},\"digest\":{},\"sharedMessages\":{},\"prefixLen\":{}}}",
            self.json,
            text(&self.provider),
            text(&self.model),
            self.max_tokens,
            text(&self.digest),
            self.shared_messages,
            self.prefix_len
        )
    }
}

/// What the summariser returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SummaryOutput {
    /// The summary text.
    pub text: String,
    /// Provider usage of the summarisation call.
    pub usage: Option<Usage>,
    /// The provider that answered (defaults to the target).
    pub provider: Option<String>,
    /// The model that answered (defaults to the target).
    pub model: Option<String>,
    /// Whether the output was cut by the output limit (finish reason "length").
    pub truncated: bool,
}

impl SummaryOutput {
    /// Parses `{"text", "usage"?, "provider"?, "model"?, "truncated"?}` (the host's reply); any
    /// other field is an error naming it.
    pub fn from_value(v: &Value, path: &str) -> Result<SummaryOutput> {
        let f = Fields::of(v, path)?;
        const KNOWN: [&str; 5] = ["text", "usage", "provider", "model", "truncated"];
        if let Some(k) = f.map.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a summary field (expected text, usage, provider, model, truncated)"));
        }
        Ok(SummaryOutput {
            text: f.str("text")?.to_string(),
            usage: match f.opt_value("usage")? {
                None => None,
                Some(u) => Some(Usage::from_value(u, &f.p("usage"))?),
            },
            provider: f.opt_str("provider")?.map(str::to_string),
            model: f.opt_str("model")?.map(str::to_string),
            truncated: f.opt_bool("truncated")?.unwrap_or(false),
        })
    }
}

/// Sends a summarisation request and returns the summary. The host implements it (it owns
/// the I/O); it must honour `cancel` while it waits.
pub trait Summariser: Send + Sync {
    /// Summarises.
    fn summarise(&self, request: &SummaryRequest, cancel: &CancelToken) -> Result<SummaryOutput>;
}

impl<F> Summariser for F
where
    F: Fn(&SummaryRequest, &CancelToken) -> Result<SummaryOutput> + Send + Sync,
{
    fn summarise(&self, request: &SummaryRequest, cancel: &CancelToken) -> Result<SummaryOutput> {
        self(request, cancel)
    }
}
