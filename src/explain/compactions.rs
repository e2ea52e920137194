//! What each compaction of a log cost and what it saved, portable and native side by side
//! (the explain report's `compactions` and `compactionTotals`; docs/compaction.md, "What a
//! compaction cost and saved").
//!
//! A compaction costs its summarisation call: the usage its `compaction/summary` (portable) or
//! `compaction/native` (native: Anthropic's `usage.iterations` entry, OpenAI's compact usage)
//! recorded, priced with the host's price table when it has the model. It saves, on every
//! conversation request built while its checkpoint stands (until the next compaction lands),
//! the tokens of what it replaced less the checkpoint's own: the prompt tokens those requests
//! did not send. Tokens are counted with the explain counter, as the rest of the report is.

use super::{Counter, Msg};
use crate::error::Result;
use crate::log::event::{types, Event};
use crate::log::Derived;
use crate::prices::{Cost, PriceTable};
use crate::types::Usage;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// One compaction of the log.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionReport {
    /// The seq of its `compaction/start`.
    pub seq: u64,
    /// `"portable"` or `"native"`.
    pub mechanism: String,
    /// A native compaction's mode: `"threshold"` or `"on-demand"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What started it (`auto`, `overflow`, `manual`, `provider`, `route-change`).
    pub trigger: String,
    /// The provider and model that summarised.
    pub provider: String,
    /// The model.
    pub model: String,
    /// How it ended (`landed`, `failed`, ...); absent while it is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The id of its request in this report (`c1`, `n1`), when it sent one of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The usage of its summarisation call, as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the call cost, with a price table that prices its model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Counted tokens of the messages it replaced.
    pub replaced_tokens: u64,
    /// Counted tokens of its checkpoint (0 when it did not land).
    pub checkpoint_tokens: u64,
    /// Conversation requests built while its checkpoint stood.
    pub requests_after: u64,
    /// Prompt tokens those requests did not send: `(replaced - checkpoint) × requestsAfter`.
    pub saved_tokens: u64,
}

/// The compactions of one mechanism, summed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MechanismTotals {
    /// `"portable"` or `"native"`.
    pub mechanism: String,
    /// Compactions that landed.
    pub landed: u64,
    /// Compactions that did not (failed, discarded, cancelled).
    pub not_landed: u64,
    /// Input tokens their calls reported (cached included).
    pub input_tokens: u64,
    /// Output tokens their calls reported.
    pub output_tokens: u64,
    /// What their calls cost, with a price table (the priced ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Prompt tokens the conversation requests did not send thanks to them.
    pub saved_tokens: u64,
}

/// Follows the compactions while the explain walk goes over the log.
#[derive(Default)]
pub(crate) struct Compactions {
    reports: Vec<CompactionReport>,
    open: Option<usize>,
    standing: Option<usize>,
}

impl Compactions {
    /// Before `ev` is applied: a compaction starts (`history` holds what it replaces), its
    /// summary or native block gives its usage, or it ends. `request` is the id of the request
    /// `ev` recorded, if any.
    pub(crate) fn before(&mut self, ev: &Event, history: &[Arc<Derived>], counts: &mut Counter<'_>, request: Option<&str>) -> Result<()> {
        let d = &ev.data;
        let s = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
        match ev.ty.as_str() {
            types::COMPACTION_START => {
                let start = d.pointer("/span/start").and_then(Value::as_u64).unwrap_or(0) as usize;
                let end = d.pointer("/span/end").and_then(Value::as_u64).unwrap_or(0) as usize;
                let mut replaced = 0;
                for e in history.get(start..=end).unwrap_or_default() {
                    replaced += counts.message(&Msg::Entry(e.clone()))?;
                }
                self.open = Some(self.reports.len());
                self.reports.push(CompactionReport {
                    seq: ev.seq,
                    mechanism: s("mechanism").unwrap_or_else(|| "portable".into()),
                    mode: s("mode"),
                    trigger: s("trigger").unwrap_or_default(),
                    provider: s("provider").unwrap_or_default(),
                    model: s("model").unwrap_or_default(),
                    request: request.map(str::to_string),
                    replaced_tokens: replaced,
                    ..CompactionReport::default()
                });
            }
            types::COMPACTION_SUMMARY | types::COMPACTION_NATIVE => {
                if let (Some(i), Some(u)) = (self.open, d.get("usage")) {
                    self.reports[i].usage = Usage::from_value(u, "usage").ok();
                }
            }
            types::COMPACTION_END => {
                if let Some(i) = self.open.take() {
                    let outcome = s("outcome").unwrap_or_default();
                    if outcome == "landed" {
                        self.standing = Some(i);
                    }
                    self.reports[i].outcome = Some(outcome);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// After `ev` was applied: a checkpoint that landed is counted (`history` holds it).
    pub(crate) fn after(&mut self, ev: &Event, history: &[Arc<Derived>], counts: &mut Counter<'_>) -> Result<()> {
        if ev.ty != types::USER_MESSAGE || ev.sources.is_none() {
            return Ok(());
        }
        if let (Some(i), Some(d)) = (self.open, history.iter().find(|d| d.seq == ev.seq)) {
            self.reports[i].checkpoint_tokens = counts.message(&Msg::Entry(d.clone()))?;
        }
        Ok(())
    }

    /// A conversation request was built: it carried the standing checkpoint.
    pub(crate) fn conversation_request(&mut self) {
        if let Some(i) = self.standing {
            self.reports[i].requests_after += 1;
        }
    }

    /// The reports, priced, and their totals per mechanism (portable first).
    pub(crate) fn finish(mut self, prices: Option<&PriceTable>) -> (Vec<CompactionReport>, Vec<MechanismTotals>) {
        let mut totals: Vec<MechanismTotals> = ["portable", "native"]
            .iter()
            .map(|m| MechanismTotals { mechanism: m.to_string(), cost: prices.map(|_| 0.0), ..MechanismTotals::default() })
            .collect();
        for r in &mut self.reports {
            if r.outcome.as_deref() == Some("landed") {
                r.saved_tokens = r.replaced_tokens.saturating_sub(r.checkpoint_tokens) * r.requests_after;
            }
            r.cost = match (prices, &r.usage) {
                (Some(p), Some(u)) => p.price(&r.provider, &r.model).map(|price| price.cost(u)),
                _ => None,
            };
            let t = &mut totals[usize::from(r.mechanism == "native")];
            if r.outcome.as_deref() == Some("landed") {
                t.landed += 1;
            } else {
                t.not_landed += 1;
            }
            if let Some(u) = &r.usage {
                t.input_tokens += u.prompt_tokens();
                t.output_tokens += u.output_tokens;
            }
            if let (Some(c), Some(total)) = (&r.cost, t.cost.as_mut()) {
                *total += c.total;
            }
            t.saved_tokens += r.saved_tokens;
        }
        (self.reports, totals)
    }
}
