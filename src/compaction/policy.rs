//! Compaction policies: per model, with the defaults of docs/contract.md §6.2, validated.

use crate::error::{Error, ErrorKind, Result};
use crate::types::{Fields, JsonMap};
use serde_json::Value;

/// How much of the newest history compaction keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Retained {
    /// A ratio of the context window.
    Ratio(f64),
    /// A fixed number of tokens.
    Tokens(u64),
}

/// Which compaction a policy asks for (docs/compaction.md, "Native compaction").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// The library's own: a cache-reusing summarisation request handed to the host's
    /// summariser, whose text lands as a checkpoint (the default).
    #[default]
    Portable,
    /// The provider's own server-side compaction, where the route has one (Anthropic Messages,
    /// the OpenAI Responses API): the conversation requests carry the provider's threshold
    /// setting, and the gate leaves the compacting to the provider. On another route nothing is
    /// compacted automatically (the gate says why).
    Native,
    /// Native where the route has it, portable elsewhere.
    Auto,
}

impl Mechanism {
    /// The wire name: `"portable"`, `"native"` or `"auto"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Portable => "portable",
            Mechanism::Native => "native",
            Mechanism::Auto => "auto",
        }
    }

    /// Parses a wire name at `path`.
    pub fn parse(s: &str, path: &str) -> Result<Mechanism> {
        match s {
            "portable" => Ok(Mechanism::Portable),
            "native" => Ok(Mechanism::Native),
            "auto" => Ok(Mechanism::Auto),
            other => {
                Err(Error::new(ErrorKind::InvalidPolicy, format!("{path}: expected \"portable\", \"native\" or \"auto\", got {other:?}"))
                    .with("field", "mechanism"))
            }
        }
    }
}

impl serde::Serialize for Mechanism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// When and how to compact.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionPolicy {
    /// The model's context window, in tokens (required).
    pub context_window: u64,
    /// Compact when the prompt exceeds this ratio of the window (default 0.8).
    pub threshold: f64,
    /// The retained tail (default 16 % of the window).
    pub retained: Retained,
    /// Output budget of the summarisation request (default 8192).
    pub summary_max_tokens: u64,
    /// Extra summariser attempts after a failure or a rejected summary (default 1).
    pub retries: u32,
    /// Consecutive context overflows recovered before giving up (default 1).
    pub overflow_retries: u32,
    /// Summarise with this provider instead of the conversation's (forgoes cache reuse).
    pub summary_provider: Option<String>,
    /// Summarise with this model instead of the conversation's (forgoes cache reuse).
    pub summary_model: Option<String>,
    /// Which compaction: the library's portable one (default), the provider's native one, or
    /// native where the route has it.
    pub mechanism: Mechanism,
}

impl CompactionPolicy {
    /// A policy with the defaults for a context window.
    pub fn new(context_window: u64) -> CompactionPolicy {
        CompactionPolicy {
            context_window,
            threshold: 0.8,
            retained: Retained::Ratio(0.16),
            summary_max_tokens: 8192,
            retries: 1,
            overflow_retries: 1,
            summary_provider: None,
            summary_model: None,
            mechanism: Mechanism::Portable,
        }
    }

    /// What a compaction the host asks for runs under when no policy is set: no window to
    /// speak of, no retained tail (the defaults otherwise).
    pub(crate) fn unbounded() -> CompactionPolicy {
        CompactionPolicy { retained: Retained::Tokens(0), ..CompactionPolicy::new(u64::MAX / 4) }
    }

    /// The threshold in tokens.
    pub fn threshold_tokens(&self) -> u64 {
        (self.context_window as f64 * self.threshold).floor() as u64
    }

    /// The retained tail in tokens.
    pub fn retained_tokens(&self) -> u64 {
        match self.retained {
            Retained::Ratio(r) => (self.context_window as f64 * r).floor() as u64,
            Retained::Tokens(t) => t,
        }
    }

    /// Checks the policy; the error names the field and why.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, why: String| Err(Error::new(ErrorKind::InvalidPolicy, format!("{field}: {why}")).with("field", field));
        if self.context_window == 0 {
            return bad("contextWindow", "must be a positive number of tokens".into());
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return bad("threshold", format!("must be in (0, 1], got {}", self.threshold));
        }
        match self.retained {
            Retained::Ratio(r) if !(0.0..1.0).contains(&r) => return bad("retainedRatio", format!("must be in [0, 1), got {r}")),
            Retained::Tokens(t) if t >= self.context_window => {
                return bad("retainedTokens", format!("{t} does not leave room in a {}-token window", self.context_window))
            }
            _ => {}
        }
        if self.summary_max_tokens == 0 {
            return bad("summaryMaxTokens", "must be positive".into());
        }
        if self.retained_tokens() >= self.threshold_tokens() {
            return bad(
                "retained",
                format!("the retained tail ({} tokens) must be smaller than the threshold ({} tokens), or compaction cannot bring the prompt under it", self.retained_tokens(), self.threshold_tokens()),
            );
        }
        let instruction = super::instruction_tokens();
        let need = self.threshold_tokens() + self.summary_max_tokens + instruction;
        if need > self.context_window {
            return bad(
                "summaryMaxTokens",
                format!(
                    "threshold ({} tokens) + summary budget ({}) + instruction (~{instruction}) = {need} tokens do not fit in the {}-token context window",
                    self.threshold_tokens(),
                    self.summary_max_tokens,
                    self.context_window
                ),
            );
        }
        for (field, v) in [("summaryProvider", &self.summary_provider), ("summaryModel", &self.summary_model)] {
            if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return bad(field, "must not be empty (leave it out to summarise with the conversation's provider and model)".into());
            }
        }
        if self.summary_provider.is_some() != self.summary_model.is_some() {
            return bad("summaryModel", "summaryProvider and summaryModel go together".into());
        }
        Ok(())
    }

    /// Parses `{"contextWindow", "threshold"?, "retainedRatio"? | "retainedTokens"?,
    /// "summaryMaxTokens"?, "retries"?, "overflowRetries"?, "summaryProvider"?, "summaryModel"?,
    /// "mechanism"?}` and validates it.
    pub fn from_value(v: &Value, path: &str) -> Result<CompactionPolicy> {
        let f = Fields::of(v, path)?;
        let known = [
            "contextWindow",
            "threshold",
            "retainedRatio",
            "retainedTokens",
            "summaryMaxTokens",
            "retries",
            "overflowRetries",
            "summaryProvider",
            "summaryModel",
            "mechanism",
        ];
        if let Some(k) = f.map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a policy field"));
        }
        let mut p = CompactionPolicy::new(f.u64("contextWindow")?);
        if let Some(t) = f.opt_f64("threshold")? {
            p.threshold = t;
        }
        match (f.opt_f64("retainedRatio")?, f.opt_u64("retainedTokens")?) {
            (Some(_), Some(_)) => return Err(Error::invalid(f.p("retainedTokens"), "give retainedRatio or retainedTokens, not both")),
            (Some(r), None) => p.retained = Retained::Ratio(r),
            (None, Some(t)) => p.retained = Retained::Tokens(t),
            (None, None) => {}
        }
        if let Some(m) = f.opt_u64("summaryMaxTokens")? {
            p.summary_max_tokens = m;
        }
        if let Some(r) = f.opt_u64("retries")? {
            p.retries = r.min(u32::MAX as u64) as u32;
        }
        if let Some(r) = f.opt_u64("overflowRetries")? {
            p.overflow_retries = r.min(u32::MAX as u64) as u32;
        }
        p.summary_provider = f.opt_str("summaryProvider")?.map(str::to_string);
        p.summary_model = f.opt_str("summaryModel")?.map(str::to_string);
        if let Some(m) = f.opt_str("mechanism")? {
            p.mechanism = Mechanism::parse(m, &f.p("mechanism"))?;
        }
        p.validate()?;
        Ok(p)
    }
}

/// Policies per model, with a default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyTable {
    /// The policy for models without their own.
    pub default: Option<CompactionPolicy>,
    /// Policies by model name.
    pub models: Vec<(String, CompactionPolicy)>,
}

impl PolicyTable {
    /// The policy for `model`.
    pub fn for_model(&self, model: &str) -> Option<&CompactionPolicy> {
        self.models.iter().find(|(m, _)| m == model).map(|(_, p)| p).or(self.default.as_ref())
    }

    /// Parses `{"default"?: policy, "models"?: {"name": policy}}` or a single policy.
    pub fn from_value(v: &Value, path: &str) -> Result<PolicyTable> {
        let f = Fields::of(v, path)?;
        if f.map.contains_key("contextWindow") {
            return Ok(PolicyTable { default: Some(CompactionPolicy::from_value(v, path)?), models: Vec::new() });
        }
        if let Some(k) = f.map.keys().find(|k| !["default", "models"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "expected a policy, or {\"default\", \"models\"}"));
        }
        let default = match f.opt_value("default")? {
            None => None,
            Some(d) => Some(CompactionPolicy::from_value(d, &f.p("default"))?),
        };
        let mut models = Vec::new();
        if let Some(m) = f.opt_value("models")? {
            let mp: &JsonMap = crate::types::as_object(m, &f.p("models"))?;
            for (name, p) in mp {
                models.push((name.clone(), CompactionPolicy::from_value(p, &format!("{}.{name}", f.p("models")))?));
            }
        }
        Ok(PolicyTable { default, models })
    }
}
