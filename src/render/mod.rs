//! Provider body renderers: turn a request envelope (docs/contract.md §4.2, §4.4) into the JSON body a provider
//! accepts.
//!
//! - [`render_openai`]: an OpenAI-compatible chat-completions body (OpenAI, DeepSeek,
//!   llama.cpp's `llama-server`, vLLM, ...).
//! - [`render_anthropic`]: an Anthropic Messages body with prompt-cache breakpoints at the end
//!   of the system prompt (or tools), of the session prefix and of the history.
//! - [`render_responses`]: an OpenAI Responses API body (stateless: `store: false`).
//! - [`render_gemini`]: a Gemini `generateContent` body.
//! - [`render_interactions`]: a Gemini Interactions API body (stateless: `store: false`).
//! - [`Renderer`]: the five, chosen by name.
//!
//! The envelope is the JSON object the library builds:
//! `{provider, model, reasoningEffort?, temperature?, maxTokens?, stop?, <unknown config
//! fields>, system?, tools?, messages, sessionId, purpose, turn?, step?}`. The renderers validate
//! it (errors are [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) and name the field,
//! e.g. `messages[4].content[1]: ...`) and never send `sessionId`, `purpose`, `turn`, `step` or
//! `instance`: those are library bookkeeping, not provider input. Two of them steer caching:
//! `sessionId` is the default OpenAI-compatible `prompt_cache_key`, and `purpose:
//! "compaction"` keeps the trailing instruction out of the history breakpoint (Anthropic's
//! `cache_control`, OpenAI's `prompt_cache_breakpoint`; the placement is `breakpoint.rs`).
//!
//! **The prefix property.** Each envelope message is rendered by a pure function of that
//! message alone (the Anthropic renderer additionally merges consecutive tool-result-only user
//! messages, and hoists system-role prefix messages into `system`). So when envelope B's
//! messages extend envelope A's (same system, tools and config) and A ends at a request
//! boundary, the rendered messages of A are a prefix of B's; for Anthropic they are equal apart
//! from the end-of-history cache marker, which moves to B's last message.
//! `docs/render.md` has every mapping and decision.

mod anthropic;
mod body;
mod breakpoint;
mod gemini;
mod interactions;
mod media;
mod openai;
pub mod origin;
pub mod response;
mod responses;

pub use anthropic::{render_anthropic, DEFAULT_ANTHROPIC_MAX_TOKENS, MAX_BREAKPOINTS};
pub use body::{BodyCache, BodySource};
pub use breakpoint::OPENAI_MAX_WRITES;
pub use gemini::{render_gemini, unique_synthetic_ids};
pub use interactions::render_interactions;
pub use openai::render_openai;
pub use response::{is_context_overflow, is_refusal, parse_response, usage_from_provider, ParsedResponse, FINISH_REASONS};
pub(crate) use response::{refusal_block, ONE_CANDIDATE, ONE_CHOICE};
pub(crate) use responses::parse_compacted;
pub use responses::render_responses;

use crate::error::{Error, Result};
use crate::types::{kind_of, Block, Fields, JsonMap, Message, Role, ToolSchema, ENVELOPE_KEYS};
use serde_json::Value;

/// Options that are not part of the envelope but that a renderer needs. Build them with
/// [`RenderOptions::with_prefix_len`] and the `with_*` methods, or parse their JSON form with
/// [`RenderOptions::from_value`]; `docs/render.md` and `docs/caching.md` give the provider rule
/// behind each one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenderOptions {
    /// How many leading envelope messages are the session prefix (docs/contract.md §3.3). The Anthropic
    /// renderer puts a cache breakpoint at the end of the prefix and hoists system-role prefix
    /// messages into `system`; the OpenAI renderer only checks it against the message count.
    pub prefix_len: usize,
    /// The OpenAI-compatible `prompt_cache_key` (JSON `promptCacheKey`): by default the
    /// envelope's `sessionId`.
    pub cache_key: CacheKey,
    /// The OpenAI-compatible `prompt_cache_retention` (JSON `promptCacheRetention`, e.g.
    /// `"in_memory"` or `"24h"`), sent verbatim; absent by default.
    pub cache_retention: Option<String>,
    /// The TTL of the Anthropic cache breakpoints (JSON `cacheTtl`); absent: the provider's
    /// default (5 minutes), and no `ttl` field is sent.
    pub cache_ttl: Option<CacheTtl>,
    /// OpenAI's `prompt_cache_options` (JSON `promptCacheOptions`: `{"mode"?, "ttl"?}`), sent
    /// by both OpenAI renderers; absent by default. Its `ttl` supersedes
    /// `prompt_cache_retention`: the two are never sent together.
    pub cache_options: Option<PromptCacheOptions>,
    /// Whether the OpenAI renderers place explicit `prompt_cache_breakpoint` marks (JSON
    /// `promptCacheBreakpoints`, default `false`): where the system prompt, the session prefix
    /// and the history end, as the Anthropic renderer places its `cache_control` marks.
    pub cache_breakpoints: bool,
    /// Anthropic cache diagnostics (JSON `cacheDiagnostics: true`): the body gets
    /// `"diagnostics": {"previous_message_id": ID}`, the `responseId` the last assistant message
    /// of the envelope has in its provenance (as `parse_response` keeps it), `null` without one.
    /// The id is the logged truth, so the body is rebuilt from the log like every other field.
    /// The host sends the beta header the provider asks for.
    pub cache_diagnostics: bool,
}

/// OpenAI's `prompt_cache_options` (gpt-5.6 and later).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptCacheOptions {
    /// `mode`: absent sends none (the provider's default, implicit).
    pub mode: Option<CacheMode>,
    /// `ttl` (e.g. `"30m"`), sent verbatim; absent sends none (the provider's default).
    pub ttl: Option<String>,
}

/// OpenAI's prompt-cache mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// `"implicit"`: OpenAI places one breakpoint of its own (and writes up to three explicit
    /// ones).
    Implicit,
    /// `"explicit"`: no implicit breakpoint; only the explicit ones are written (up to four).
    Explicit,
}

impl CacheMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Implicit => "implicit",
            CacheMode::Explicit => "explicit",
        }
    }
}

impl PromptCacheOptions {
    /// The wire object.
    fn to_value(&self) -> Value {
        let mut m = JsonMap::new();
        if let Some(mode) = self.mode {
            m.insert("mode".into(), mode.as_str().into());
        }
        if let Some(ttl) = &self.ttl {
            m.insert("ttl".into(), ttl.clone().into());
        }
        Value::Object(m)
    }
}

/// Where the OpenAI-compatible `prompt_cache_key` comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheKey {
    /// The envelope's `sessionId` (JSON `true`, the default): every request of a session, its
    /// summarisation requests included, is routed to the same cache. A `prompt_cache_key`
    /// config field, when there is one, is sent instead.
    #[default]
    SessionId,
    /// No key (JSON `false`): for servers that refuse unknown fields.
    Off,
    /// This key (a JSON string), e.g. one shared by the sessions of a tenant.
    Custom(String),
}

/// The lifetime of an Anthropic cache entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheTtl {
    /// `"5m"`: five minutes, refreshed at every hit (the provider's default).
    FiveMinutes,
    /// `"1h"`: one hour; writing costs more, for sessions with pauses longer than five minutes.
    OneHour,
}

impl CacheTtl {
    /// The TTL of a wire value (`"5m"`, `"1h"`), `None` for any other.
    pub fn parse(s: &str) -> Option<CacheTtl> {
        [CacheTtl::FiveMinutes, CacheTtl::OneHour].into_iter().find(|t| t.as_str() == s)
    }

    /// The wire value: `"5m"` or `"1h"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
        }
    }
}

impl RenderOptions {
    /// The OpenAI cache-routing fields an option sets explicitly (a custom `prompt_cache_key`,
    /// `prompt_cache_retention`): set before the config's pass-through fields, so a config field
    /// of the same name is a collision (shared by the chat-completions and Responses renderers).
    pub(crate) fn route_explicit(&self, body: &mut JsonMap) {
        if let CacheKey::Custom(key) = &self.cache_key {
            body.insert("prompt_cache_key".into(), key.clone().into());
        }
        if let Some(r) = &self.cache_retention {
            body.insert("prompt_cache_retention".into(), r.clone().into());
        }
        if let Some(o) = &self.cache_options {
            body.insert("prompt_cache_options".into(), o.to_value());
        }
    }

    /// Checks a finished OpenAI body: `prompt_cache_options.ttl` supersedes
    /// `prompt_cache_retention` and OpenAI rejects a request with both (from the options or
    /// from config fields).
    pub(crate) fn check_openai_ttl(body: &JsonMap) -> Result<()> {
        let ttl = body.get("prompt_cache_options").and_then(|o| o.get("ttl"));
        if ttl.is_some() && body.contains_key("prompt_cache_retention") {
            return Err(Error::invalid(
                "prompt_cache_retention",
                "cannot be sent with prompt_cache_options.ttl, which supersedes it (OpenAI rejects both): drop one",
            ));
        }
        Ok(())
    }

    /// Refuses the OpenAI-only cache controls for a renderer whose provider has no such fields,
    /// and the combinations OpenAI would refuse or that cache nothing.
    pub(crate) fn check_for(&self, renderer: Renderer) -> Result<()> {
        if !matches!(renderer, Renderer::OpenAi | Renderer::OpenAiResponses) {
            let what = if self.cache_options.is_some() {
                Some("promptCacheOptions")
            } else if self.cache_breakpoints {
                Some("promptCacheBreakpoints")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(Error::invalid(
                    what,
                    format!(
                        "is an OpenAI cache control (the openai and openai-responses renderers); the {} renderer has no such field",
                        renderer.name()
                    ),
                ));
            }
        }
        self.check_combination("")
    }

    /// These options with the cache controls the envelope's call config gives (config fields
    /// `promptCacheOptions` and `promptCacheBreakpoints`: logged with the config, so every
    /// request is rebuilt with them), checked for `renderer`. A control given both ways is an
    /// error (give it once).
    pub(crate) fn effective(&self, env: &Envelope, renderer: Renderer) -> Result<RenderOptions> {
        let mut out = self.clone();
        if let Some(o) = &env.cache_options {
            if self.cache_options.is_some() {
                return Err(Error::invalid("promptCacheOptions", "is both a config field and a render option; give it once"));
            }
            out.cache_options = Some(o.clone());
        }
        if let Some(b) = env.cache_breakpoints {
            if self.cache_breakpoints {
                return Err(Error::invalid("promptCacheBreakpoints", "is both a config field and a render option; give it once"));
            }
            out.cache_breakpoints = b;
        }
        out.check_for(renderer)?;
        Ok(out)
    }

    /// The option combinations that cannot be sent: an explicit cache mode without breakpoints
    /// (nothing would be cached), both TTL fields. `at` prefixes the option's name.
    fn check_combination(&self, at: &str) -> Result<()> {
        if self.cache_options.as_ref().and_then(|o| o.mode) == Some(CacheMode::Explicit) && !self.cache_breakpoints {
            return Err(Error::invalid(
                format!("{at}promptCacheOptions.mode"),
                "\"explicit\" turns off OpenAI's implicit breakpoint, so without promptCacheBreakpoints nothing is cached",
            ));
        }
        if self.cache_options.as_ref().is_some_and(|o| o.ttl.is_some()) && self.cache_retention.is_some() {
            return Err(Error::invalid(
                format!("{at}promptCacheRetention"),
                "cannot be sent with promptCacheOptions.ttl, which supersedes it (OpenAI rejects both): drop one",
            ));
        }
        Ok(())
    }

    /// The default `prompt_cache_key` (the session id), set after the pass-through fields: a
    /// `prompt_cache_key` config field wins. Then the finished routing is checked
    /// ([`RenderOptions::check_openai_ttl`]).
    pub(crate) fn route_default(&self, body: &mut JsonMap, session_id: Option<&String>) -> Result<()> {
        if let (CacheKey::SessionId, Some(id)) = (&self.cache_key, session_id) {
            body.entry("prompt_cache_key").or_insert_with(|| id.clone().into());
        }
        RenderOptions::check_openai_ttl(body)
    }

    /// Options for an envelope whose first `prefix_len` messages are the session prefix.
    pub fn with_prefix_len(prefix_len: usize) -> RenderOptions {
        RenderOptions { prefix_len, ..RenderOptions::default() }
    }

    /// These options with another OpenAI-compatible cache key.
    pub fn with_cache_key(mut self, key: CacheKey) -> RenderOptions {
        self.cache_key = key;
        self
    }

    /// These options with an OpenAI-compatible cache retention.
    pub fn with_cache_retention(mut self, retention: impl Into<String>) -> RenderOptions {
        self.cache_retention = Some(retention.into());
        self
    }

    /// These options with an Anthropic cache TTL.
    pub fn with_cache_ttl(mut self, ttl: CacheTtl) -> RenderOptions {
        self.cache_ttl = Some(ttl);
        self
    }

    /// These options with OpenAI's `prompt_cache_options`.
    pub fn with_cache_options(mut self, options: PromptCacheOptions) -> RenderOptions {
        self.cache_options = Some(options);
        self
    }

    /// These options with OpenAI's explicit breakpoints placed (or not).
    pub fn with_cache_breakpoints(mut self, on: bool) -> RenderOptions {
        self.cache_breakpoints = on;
        self
    }

    /// Parses the JSON form `{"prefixLen"?: n, "promptCacheKey"?: true | false | "key",
    /// "promptCacheRetention"?: "...", "cacheTtl"?: "5m" | "1h", "promptCacheOptions"?:
    /// {"mode"?: "implicit" | "explicit", "ttl"?: "..."}, "promptCacheBreakpoints"?: bool,
    /// "cacheDiagnostics"?: bool}`
    /// (every key optional; an unknown key is an error, so a misspelt option is never silently
    /// ignored). `promptCacheOptions.ttl` with `promptCacheRetention` is an error (OpenAI
    /// rejects both), and so is mode `"explicit"` without breakpoints.
    pub fn from_value(v: &Value) -> Result<RenderOptions> {
        const KEYS: &[&str] = &[
            "prefixLen",
            "promptCacheKey",
            "promptCacheRetention",
            "cacheTtl",
            "promptCacheOptions",
            "promptCacheBreakpoints",
            "cacheDiagnostics",
        ];
        let f = Fields::of(v, "options")?;
        if let Some(k) = f.map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(
                f.p(k),
                "is not a render option (expected prefixLen, promptCacheKey, promptCacheRetention, cacheTtl, \
                 promptCacheOptions, promptCacheBreakpoints or cacheDiagnostics)",
            ));
        }
        let cache_diagnostics = f.opt_bool("cacheDiagnostics")?.unwrap_or(false);
        let mut out = RenderOptions::with_prefix_len(f.opt_u64("prefixLen")?.unwrap_or(0) as usize);
        match f.opt_value("promptCacheKey")? {
            None | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => out.cache_key = CacheKey::Off,
            Some(Value::String(k)) if !k.is_empty() => out.cache_key = CacheKey::Custom(k.clone()),
            Some(Value::String(_)) => return Err(Error::invalid(f.p("promptCacheKey"), "must not be empty (false turns the key off)")),
            Some(other) => {
                return Err(Error::invalid(f.p("promptCacheKey"), format!("expected true, false or a string, got {}", kind_of(other))))
            }
        }
        if let Some(r) = f.opt_str("promptCacheRetention")? {
            if r.is_empty() {
                return Err(Error::invalid(f.p("promptCacheRetention"), "must not be empty"));
            }
            out.cache_retention = Some(r.to_string());
        }
        out.cache_ttl = match f.opt_str("cacheTtl")? {
            None => None,
            Some(s) => {
                Some(CacheTtl::parse(s).ok_or_else(|| Error::invalid(f.p("cacheTtl"), format!("expected \"5m\" or \"1h\", got {s:?}")))?)
            }
        };
        let (cache_options, breakpoints) = cache_controls(&f)?;
        out.cache_options = cache_options;
        out.cache_breakpoints = breakpoints.unwrap_or(false);
        out.check_combination("options.")?;
        out.cache_diagnostics = cache_diagnostics;
        Ok(out)
    }
}

/// Reads OpenAI's cache controls, `promptCacheOptions` and `promptCacheBreakpoints`, from render
/// options or from a request envelope's call config (the same names and checks).
fn cache_controls(f: &Fields<'_>) -> Result<(Option<PromptCacheOptions>, Option<bool>)> {
    let options = match f.opt_value("promptCacheOptions")? {
        None => None,
        Some(o) => {
            let at = f.p("promptCacheOptions");
            let g = Fields::of(o, &at)?;
            if let Some(k) = g.map.keys().find(|k| !["mode", "ttl"].contains(&k.as_str())) {
                return Err(Error::invalid(g.p(k), "is not a prompt cache option (expected mode or ttl)"));
            }
            let mode = match g.opt_str("mode")? {
                None => None,
                Some("implicit") => Some(CacheMode::Implicit),
                Some("explicit") => Some(CacheMode::Explicit),
                Some(other) => return Err(Error::invalid(g.p("mode"), format!("expected \"implicit\" or \"explicit\", got {other:?}"))),
            };
            let ttl = match g.opt_str("ttl")? {
                Some("") => return Err(Error::invalid(g.p("ttl"), "must not be empty")),
                t => t.map(str::to_string),
            };
            Some(PromptCacheOptions { mode, ttl })
        }
    };
    let breakpoints = match f.opt_value("promptCacheBreakpoints")? {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(Error::invalid(f.p("promptCacheBreakpoints"), format!("expected true or false, got {}", kind_of(other))))
        }
    };
    Ok((options, breakpoints))
}

/// A provider body format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Renderer {
    /// OpenAI-compatible chat completions (OpenAI, DeepSeek, llama.cpp, vLLM, ...).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API, stateless (`store: false`).
    OpenAiResponses,
    /// Gemini `generateContent`.
    Gemini,
    /// The Gemini Interactions API, stateless (`store: false`).
    GeminiInteractions,
}

impl Renderer {
    /// Every renderer, in the order their names are listed in messages.
    pub const ALL: [Renderer; 5] =
        [Renderer::OpenAi, Renderer::OpenAiResponses, Renderer::Anthropic, Renderer::Gemini, Renderer::GeminiInteractions];

    /// Parses a renderer name: `"openai"`, `"openai-responses"`, `"anthropic"`, `"gemini"` or
    /// `"gemini-interactions"`.
    pub fn parse(name: &str) -> Result<Renderer> {
        match name {
            "openai" => Ok(Renderer::OpenAi),
            "anthropic" => Ok(Renderer::Anthropic),
            "openai-responses" => Ok(Renderer::OpenAiResponses),
            "gemini" => Ok(Renderer::Gemini),
            "gemini-interactions" => Ok(Renderer::GeminiInteractions),
            other => Err(Error::invalid(
                "renderer",
                format!("expected \"openai\", \"openai-responses\", \"anthropic\", \"gemini\" or \"gemini-interactions\", got {other:?}"),
            )),
        }
    }

    /// The renderer's name, as [`Renderer::parse`] accepts it.
    pub fn name(self) -> &'static str {
        match self {
            Renderer::OpenAi => "openai",
            Renderer::Anthropic => "anthropic",
            Renderer::OpenAiResponses => responses::NAME,
            Renderer::Gemini => gemini::NAME,
            Renderer::GeminiInteractions => interactions::NAME,
        }
    }

    /// Renders an envelope into this provider's body. `options.prefix_len` must not exceed
    /// the number of envelope messages.
    pub fn render(self, envelope: &Value, options: &RenderOptions) -> Result<Value> {
        match self {
            Renderer::OpenAi => {
                let env = Envelope::parse(envelope)?;
                let options = options.effective(&env, self)?;
                env.check_prefix_len(options.prefix_len)?;
                openai::render(&env, &options)
            }
            Renderer::Anthropic => render_anthropic(envelope, options),
            Renderer::OpenAiResponses => render_responses(envelope, options),
            Renderer::Gemini => render_gemini(envelope, options),
            Renderer::GeminiInteractions => render_interactions(envelope, options),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parsed envelope, shared by both renderers.

/// Config keys the renderers map themselves.
const CONFIG_KEYS: &[&str] =
    &["provider", "model", "reasoningEffort", "temperature", "maxTokens", "stop", "promptCacheOptions", "promptCacheBreakpoints"];

/// A validated request envelope.
#[derive(Debug)]
pub(crate) struct Envelope {
    pub model: String,
    pub reasoning_effort: Option<String>,
    pub temperature: Option<Value>,
    pub max_tokens: Option<u64>,
    /// Stop sequences; absent when empty.
    pub stop: Option<Vec<Value>>,
    /// The system prompt; absent when empty.
    pub system: Option<String>,
    pub tools: Vec<ToolSchema>,
    pub messages: Vec<Message>,
    /// Unknown config fields, passed through into the body.
    pub extra: JsonMap,
    /// The envelope's `sessionId` (bookkeeping, never sent as such; the default cache key).
    pub session_id: Option<String>,
    /// Whether the envelope is a summarisation request (`purpose: "compaction"`): its last
    /// message is the instruction, which the Anthropic renderer keeps out of the history's
    /// cache breakpoint.
    pub compaction: bool,
    /// Whether the envelope is a provider's own compaction request (`purpose:
    /// "native-compaction"`): the Anthropic renderer adds `"compaction": {"type":
    /// "summarize"}`, the Responses renderer renders the `POST /responses/compact` body, the
    /// others refuse it.
    pub native_compaction: bool,
    /// OpenAI's cache controls given as config fields (`promptCacheOptions`,
    /// `promptCacheBreakpoints`); [`RenderOptions::effective`] merges them.
    pub cache_options: Option<PromptCacheOptions>,
    pub cache_breakpoints: Option<bool>,
}

impl Envelope {
    pub fn parse(v: &Value) -> Result<Envelope> {
        let f = Fields::of(v, "")?;
        if let Some(p) = f.opt_str("provider")? {
            if p.is_empty() {
                return Err(Error::invalid("provider", "must not be empty"));
            }
        }
        let model = f.str("model")?;
        if model.is_empty() {
            return Err(Error::invalid("model", "must not be empty"));
        }
        let temperature = match f.opt_value("temperature")? {
            Some(t) if !t.is_number() => return Err(Error::invalid("temperature", format!("expected a number, got {}", kind_of(t)))),
            t => t.cloned(),
        };
        let stop = match f.opt_array("stop")? {
            None => None,
            Some(a) => {
                for (i, s) in a.iter().enumerate() {
                    if !s.is_string() {
                        return Err(Error::invalid(format!("stop[{i}]"), format!("expected a string, got {}", kind_of(s))));
                    }
                }
                Some(a.clone()).filter(|a| !a.is_empty())
            }
        };
        let tools = match f.opt_value("tools")? {
            None => Vec::new(),
            Some(t) => ToolSchema::list_from_value(t, "tools")?,
        };
        let messages = Message::list_from_value(f.value("messages")?, "messages")?;
        let (cache_options, cache_breakpoints) = cache_controls(&f)?;
        let mut known: Vec<&str> = CONFIG_KEYS.to_vec();
        known.extend_from_slice(ENVELOPE_KEYS);
        Ok(Envelope {
            model: model.to_string(),
            reasoning_effort: f.opt_str("reasoningEffort")?.map(str::to_string),
            temperature,
            max_tokens: f.opt_u64("maxTokens")?,
            stop,
            system: f.opt_str("system")?.filter(|s| !s.is_empty()).map(str::to_string),
            tools,
            messages,
            extra: f.extra(&known),
            session_id: f.opt_str("sessionId")?.filter(|s| !s.is_empty()).map(str::to_string),
            compaction: f.opt_str("purpose")? == Some("compaction"),
            native_compaction: f.opt_str("purpose")? == Some("native-compaction"),
            cache_options,
            cache_breakpoints,
        })
    }

    /// Refuses a native compaction request for a renderer whose provider has none.
    pub fn refuse_native(&self, renderer: &str) -> Result<()> {
        if self.native_compaction {
            return Err(Error::invalid(
                "purpose",
                format!("a native compaction request goes to a provider with one (anthropic, openai-responses); the {renderer} renderer has none"),
            ));
        }
        Ok(())
    }

    /// Checks that the prefix fits in the messages.
    pub fn check_prefix_len(&self, prefix_len: usize) -> Result<()> {
        if prefix_len > self.messages.len() {
            return Err(Error::invalid("prefixLen", format!("is {prefix_len} but the envelope has only {} messages", self.messages.len())));
        }
        Ok(())
    }

    /// Adds the unknown config fields to `body`. A field the renderer already set is an error:
    /// a pass-through field may add to the body, never silently replace a mapped one.
    pub fn pass_through(&self, body: &mut JsonMap, renderer: &str) -> Result<()> {
        self.pass_through_where(body, renderer, |_| true)
    }

    /// [`pass_through`](Self::pass_through) of the unknown config fields `keep` accepts (the
    /// others are left out: a body whose endpoint takes only some).
    pub fn pass_through_where(&self, body: &mut JsonMap, renderer: &str, keep: impl Fn(&str) -> bool) -> Result<()> {
        for (k, v) in self.extra.iter().filter(|(k, _)| keep(k)) {
            if body.contains_key(k) {
                return Err(Error::invalid(
                    k.as_str(),
                    format!(
                        "unknown config field collides with the body field {k:?} that the \
                         {renderer} renderer sets itself"
                    ),
                ));
            }
            body.insert(k.clone(), v.clone());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Shared block helpers.

/// Adds a tool's unknown fields (`ToolSchema::extra`, carried verbatim) to the tool object a
/// renderer built; one that names a field the renderer set is an error naming it
/// (`tools[i].KEY`), never a silent overwrite.
pub(crate) fn add_tool_extra(tool: &mut JsonMap, extra: &JsonMap, t_i: usize, renderer: &str) -> Result<()> {
    for (k, v) in extra {
        if tool.contains_key(k) {
            return Err(Error::invalid(
                format!("tools[{t_i}].{k}"),
                format!("unknown tool field collides with the {k:?} field the {renderer} renderer sets"),
            ));
        }
        tool.insert(k.clone(), v.clone());
    }
    Ok(())
}

/// A tool result's content as a renderer sends it where the provider takes either a string or
/// parts: the text blocks joined by "\n" when every block is text, else one part per block
/// (`text_type` names the renderer's text part, `media` writes its part for an image or file
/// block, or refuses it). Any other block is an error naming it (`PATH.content[k]`).
pub(crate) fn tool_result_output(
    b: &Block,
    path: &str,
    renderer: &str,
    text_type: &str,
    media: fn(&Block, &str) -> Result<Value>,
) -> Result<Value> {
    let content = b.tool_result_content();
    if content.iter().all(|c| c.kind() == "text") {
        let texts: Vec<&str> = content.iter().map(|c| c.get_str("text").unwrap_or_default()).collect();
        return Ok(Value::String(texts.join("\n")));
    }
    let mut parts = Vec::with_capacity(content.len());
    for (k, c) in content.iter().enumerate() {
        let inner = format!("{path}.content[{k}]");
        parts.push(match c.kind() {
            "text" => serde_json::json!({"type": text_type, "text": c.get_str("text").unwrap_or_default()}),
            "image" | "file" => media(c, &inner)?,
            other => {
                return Err(Error::invalid(
                    inner,
                    format!("block type {other:?} inside a tool result is not supported by the {renderer} renderer"),
                )
                .with("blockType", other))
            }
        });
    }
    Ok(Value::Array(parts))
}

/// One tool as a renderer sends it ([`tools_for`]).
pub(crate) enum ToolOut<'a> {
    /// A function tool, for the renderer to map.
    Function(&'a ToolSchema),
    /// A provider tool of the renderer's own format: its object, sent verbatim.
    Provider(&'a JsonMap),
}

/// The envelope's tools as `renderer` sends them, each with its index in the envelope's list.
/// A provider tool of another format is an error naming it and both formats; in a
/// summarisation request (`purpose: "compaction"`, which calls no tool) it is left out instead,
/// so that a summariser of another provider can render the request.
pub(crate) fn tools_for<'a>(env: &'a Envelope, renderer: &str) -> Result<Vec<(usize, ToolOut<'a>)>> {
    let mut out = Vec::with_capacity(env.tools.len());
    for (i, t) in env.tools.iter().enumerate() {
        match &t.provider {
            None => out.push((i, ToolOut::Function(t))),
            Some(p) if p.format == renderer => out.push((i, ToolOut::Provider(&p.tool))),
            Some(_) if env.compaction => {}
            Some(p) => {
                return Err(Error::invalid(
                    format!("tools[{i}]"),
                    format!(
                        "the {} provider tool {:?} cannot be sent by the {renderer} renderer: a provider tool goes only to its own \
                         format (leave it out of the tools when calling another provider)",
                        p.format, t.name
                    ),
                )
                .with("toolFormat", p.format.clone()))
            }
        }
    }
    Ok(out)
}

/// The envelope's tools as a `tools` array ([`tools_for`]): each function tool as `function`
/// writes it (from the tool and its index), each provider tool of this format verbatim.
pub(crate) fn tools_array(env: &Envelope, renderer: &str, function: impl Fn(&ToolSchema, usize) -> Result<Value>) -> Result<Vec<Value>> {
    tools_for(env, renderer)?
        .into_iter()
        .map(|(t_i, t)| match t {
            ToolOut::Function(t) => function(t, t_i),
            ToolOut::Provider(tool) => Ok(Value::Object(tool.clone())),
        })
        .collect()
}

/// A function tool as the Responses and Interactions APIs take it:
/// `{"type":"function","name","description"?,"parameters",...}`.
pub(crate) fn flat_function_tool(t: &ToolSchema, t_i: usize, renderer: &str) -> Result<Value> {
    let mut tool = JsonMap::new();
    tool.insert("type".into(), "function".into());
    tool.extend(function_tool(t, t_i, "parameters", renderer)?);
    Ok(Value::Object(tool))
}

/// A function tool's fields in a renderer's spelling: `name`, `description` (when it has one)
/// and the parameters under `parameters_key`, then its unknown fields (one that names a field
/// set here is an error naming it: `tools[i].KEY`).
pub(crate) fn function_tool(t: &ToolSchema, t_i: usize, parameters_key: &str, renderer: &str) -> Result<JsonMap> {
    let mut tool = JsonMap::new();
    tool.insert("name".into(), t.name.clone().into());
    if let Some(d) = &t.description {
        tool.insert("description".into(), d.clone().into());
    }
    tool.insert(parameters_key.into(), t.parameters.clone());
    add_tool_extra(&mut tool, &t.extra, t_i, renderer)?;
    Ok(tool)
}

/// The path of block `j` of message `i`.
pub(crate) fn block_path(i: usize, j: usize) -> String {
    format!("messages[{i}].content[{j}]")
}

/// The error for a block a renderer cannot place.
pub(crate) fn unsupported(path: &str, block: &Block, role: Role, renderer: &str) -> Error {
    let role = match role {
        Role::System => "a system",
        Role::User => "a user",
        Role::Assistant => "an assistant",
    };
    Error::invalid(path, format!("block type {:?} is not supported in {role} message by the {renderer} renderer", block.kind()))
        .with("blockType", block.kind())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use serde_json::json;

    #[test]
    fn renderer_parse_and_name() {
        assert_eq!(Renderer::parse("openai").unwrap(), Renderer::OpenAi);
        assert_eq!(Renderer::parse("anthropic").unwrap(), Renderer::Anthropic);
        assert_eq!(Renderer::OpenAi.name(), "openai");
        assert_eq!(Renderer::Anthropic.name(), "anthropic");
        for r in Renderer::ALL {
            assert_eq!(Renderer::parse(r.name()).unwrap(), r);
        }
        let e = Renderer::parse("cohere").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            e.message(),
            "renderer: expected \"openai\", \"openai-responses\", \"anthropic\", \"gemini\" or \"gemini-interactions\", got \"cohere\""
        );
    }

    #[test]
    fn prefix_len_beyond_messages_is_rejected_by_both() {
        let env = json!({"provider":"p","model":"m","messages":[{"role":"user","content":[]}]});
        for r in Renderer::ALL {
            let e = r.render(&env, &RenderOptions::with_prefix_len(2)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), "prefixLen: is 2 but the envelope has only 1 messages");
            assert!(r.render(&env, &RenderOptions::with_prefix_len(1)).is_ok());
        }
    }

    #[test]
    fn envelope_errors_name_the_field() {
        let cases = [
            (json!({"messages":[]}), "model: is required"),
            (json!({"model":"","messages":[]}), "model: must not be empty"),
            (json!({"model":"m"}), "messages: is required"),
            (json!({"model":"m","messages":{}}), "messages: expected an array of messages, got an object"),
            (json!({"model":"m","messages":[],"temperature":"hot"}), "temperature: expected a number, got a string"),
            (json!({"model":"m","messages":[],"maxTokens":-1}), "maxTokens: expected a non-negative integer, got -1"),
            (json!({"model":"m","messages":[],"stop":["a",1]}), "stop[1]: expected a string, got a number"),
            (json!({"model":"m","messages":[],"system":null}), "system: is null; optional fields must be absent, not null"),
            (
                json!({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}]}),
                "messages[0].content[1].text: is required",
            ),
            (json!({"model":"m","messages":[],"tools":[{"name":"t","description":"d"}]}), "tools[0].parameters: is required"),
        ];
        for (env, want) in cases {
            for r in Renderer::ALL {
                let e = r.render(&env, &RenderOptions::default()).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{want}");
                assert_eq!(e.message(), want);
            }
        }
    }

    #[test]
    fn bookkeeping_fields_never_reach_the_body() {
        let env = json!({"provider":"p","model":"m","messages":[],"sessionId":"s","purpose":"conversation",
                         "turn":1,"step":2,"instance":3});
        for r in Renderer::ALL {
            let body = r.render(&env, &RenderOptions::default()).unwrap();
            for k in ["provider", "sessionId", "purpose", "turn", "step", "instance"] {
                assert!(body.get(k).is_none(), "{} leaked {k}", r.name());
            }
        }
    }

    #[test]
    fn options_from_json() {
        assert_eq!(RenderOptions::from_value(&json!({})).unwrap(), RenderOptions::default());
        let o =
            RenderOptions::from_value(&json!({"prefixLen":3,"promptCacheKey":"k","promptCacheRetention":"24h","cacheTtl":"1h"})).unwrap();
        assert_eq!(
            o,
            RenderOptions::with_prefix_len(3)
                .with_cache_key(CacheKey::Custom("k".into()))
                .with_cache_retention("24h")
                .with_cache_ttl(CacheTtl::OneHour)
        );
        assert_eq!(RenderOptions::from_value(&json!({"promptCacheKey":false})).unwrap().cache_key, CacheKey::Off);
        assert_eq!(RenderOptions::from_value(&json!({"promptCacheKey":true})).unwrap().cache_key, CacheKey::SessionId);
        assert_eq!(RenderOptions::from_value(&json!({"cacheTtl":"5m"})).unwrap().cache_ttl, Some(CacheTtl::FiveMinutes));
        let bad = [
            (json!([]), "options: expected an object, got an array"),
            (json!({"prefixLen":-1}), "options.prefixLen: expected a non-negative integer, got -1"),
            (json!({"promptCacheKey":""}), "options.promptCacheKey: must not be empty (false turns the key off)"),
            (json!({"promptCacheKey":3}), "options.promptCacheKey: expected true, false or a string, got a number"),
            (json!({"promptCacheRetention":""}), "options.promptCacheRetention: must not be empty"),
            (json!({"promptCacheRetention":24}), "options.promptCacheRetention: expected a string, got a number"),
            (json!({"cacheTtl":"2h"}), "options.cacheTtl: expected \"5m\" or \"1h\", got \"2h\""),
            (
                json!({"cacheTTL":"1h"}),
                "options.cacheTTL: is not a render option (expected prefixLen, promptCacheKey, promptCacheRetention, cacheTtl, \
                 promptCacheOptions, promptCacheBreakpoints or cacheDiagnostics)",
            ),
        ];
        for (v, want) in bad {
            let e = RenderOptions::from_value(&v).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
    }
}
