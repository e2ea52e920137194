//! Agent instances and the host-driven turn/step lifecycle (docs/contract.md §8.1, §4.1).
//!
//! An [`Agent`] drives one session; at most one live instance per session. The host opens a
//! turn with a user message, asks for the next request, reports what the provider returned
//! (assistant message with usage, or an error), reports tool results, and ends the turn.
//!
//! Building a request: compose the session prefix (once per instance) → pre-step listeners →
//! pressure gate (compaction) → record the header if owed → `step/start` → envelope.

mod body;
mod lifecycle;
pub mod spawn;
pub mod tool_calls;
pub mod wire;

pub(crate) use body::no_renderer;
pub use body::Recorded;
pub(crate) use lifecycle::{is_store_refusal, stale_compaction_end};
pub use lifecycle::{ProviderErrorOutcome, ToolResultInput};
pub use spawn::{ChildOutcome, SpawnOptions, DEFAULT_PLACEHOLDER};

use crate::cancel::{CancelGuard, CancelToken};
use crate::compaction::{CompactionPolicy, PolicyTable, Summariser};
use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::prefix::{PreStepListener, PrefixListener};
use crate::request::{DigestCache, PrefixBytes};
use crate::session::Session;
use crate::tokens::meter::Meter;
use crate::tokens::TokenCounter;
use crate::types::{CallConfig, Message, ToolSchema};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What an agent instance sends: call config, system prompt, tools. Settable between requests;
/// a change takes effect at the next request (and is logged as a `change` snapshot).
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Provider, model and sampling settings.
    pub config: CallConfig,
    /// The system prompt.
    pub system: Option<String>,
    /// Tool schemas, in order.
    pub tools: Vec<ToolSchema>,
    /// Rebuild every request from the log and compare bytes (on in tests; O(log) per request).
    pub check_requests: bool,
}

impl AgentOptions {
    /// The keys [`AgentOptions::from_value`] reads.
    pub const KEYS: [&'static str; 4] = ["config", "system", "tools", "checkRequests"];

    /// Options with just a config.
    pub fn new(config: CallConfig) -> AgentOptions {
        AgentOptions { config, system: None, tools: Vec::new(), check_requests: false }
    }

    /// Parses `{"config", "system"?, "tools"?, "checkRequests"?}`.
    pub fn from_value(v: &serde_json::Value, path: &str) -> Result<AgentOptions> {
        let f = crate::types::Fields::of(v, path)?;
        let config = CallConfig::from_value(f.value("config")?, &f.p("config"))?;
        let tools = match f.opt_value("tools")? {
            None => Vec::new(),
            Some(t) => ToolSchema::list_from_value(t, &f.p("tools"))?,
        };
        if let Some(k) = f.map.keys().find(|k| !AgentOptions::KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not an agent option (expected config, system, tools, checkRequests)"));
        }
        Ok(AgentOptions {
            config,
            system: f.opt_str("system")?.map(str::to_string),
            tools,
            check_requests: f.opt_bool("checkRequests")?.unwrap_or(false),
        })
    }
}

/// The frozen session prefix of an instance, with its serialised form.
#[derive(Clone, Debug)]
pub(crate) struct Frozen {
    pub messages: Arc<Vec<Message>>,
    pub bytes: PrefixBytes,
}

/// What the previous request carried: its prefix, the seqs of its history messages, and the
/// replace generation of that history (`None`: not known, an earlier instance's request).
#[derive(Clone, Debug)]
pub(crate) struct PrevRequest {
    pub prefix: Option<Arc<Vec<Message>>>,
    pub seqs: Vec<u64>,
    pub generation: Option<u64>,
}

/// Per-instance statistics.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStats {
    /// Conversation requests built.
    pub requests: u64,
    /// Prefix compositions that ran to completion or were interrupted.
    pub compositions: u64,
    /// Compactions landed.
    pub compactions: u64,
    /// Provider-reported cached input tokens, summed over this instance's responses.
    pub cached_tokens: u64,
    /// Provider-reported prompt tokens (uncached + cached + cache writes), summed.
    pub prompt_tokens: u64,
}

/// An agent instance over a session.
pub struct Agent {
    pub(crate) session: Session,
    claim: u64,
    pub(crate) instance: u64,
    pub(crate) options: AgentOptions,
    pub(crate) prefix_listeners: Vec<Arc<dyn PrefixListener>>,
    pub(crate) pre_step: Vec<Arc<dyn PreStepListener>>,
    pub(crate) frozen: Option<Frozen>,
    /// Whether this instance has written its anchoring snapshot.
    pub(crate) anchored: bool,
    pub(crate) disposed: Arc<AtomicBool>,
    pub(crate) dispose_token: CancelToken,
    pub(crate) buffered_results: Vec<ToolResultInput>,
    pub(crate) deferred_context: Vec<Message>,
    pub(crate) summariser: Option<Arc<dyn Summariser>>,
    pub(crate) counter: Option<Arc<dyn TokenCounter>>,
    pub(crate) policies: PolicyTable,
    pub(crate) meter: Meter,
    pub(crate) consecutive_overflows: u32,
    /// The step (turn, step) whose context overflow is recorded but whose recovery the store
    /// refused: reporting the overflow again retries the recovery.
    pub(crate) unrecovered_overflow: Option<(u64, u64)>,
    pub(crate) prev_request: Option<PrevRequest>,
    /// The digest state of the last request's leading bytes (see `request::DigestCache`).
    pub(crate) digest_cache: DigestCache,
    /// The renderer of `next_body`, with the rendered form of the messages.
    pub(crate) body: Option<crate::render::BodyCache>,
    /// The last request built, to write its envelope again on demand.
    pub(crate) last_request: Option<body::LastRequest>,
    pub(crate) stats: AgentStats,
    /// For a spawned child: the parent's header it keeps, and its request budget.
    pub(crate) pinned: Option<spawn::Pinned>,
    /// The child session whose answer each reported tool result is (call id → child id).
    pub(crate) child_results: std::collections::HashMap<String, String>,
    /// What the cache clock read of the log so far (`crate::clock`).
    pub(crate) clock: crate::clock::ClockTrack,
    /// The keep-warm request waiting for its answer.
    pub(crate) keepalive: Option<crate::clock::OpenKeepalive>,
    released: bool,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("instance", &self.instance).field("options", &self.options).finish()
    }
}

impl Agent {
    /// Creates an agent instance over `session`. If the session already has request headers
    /// (a stored log, a fork), this is a resumed instance: it recomposes the prefix and its first
    /// request writes a `resume` snapshot. Fails with `Busy` if another instance is live.
    ///
    /// Over a spawned child's session the options must keep the parent's provider, model, system
    /// prompt and tools (`InvalidInput` naming the field otherwise), and the session prefix is
    /// the parent's, never composed (see [`spawn`]).
    pub fn new(session: &Session, options: AgentOptions) -> Result<Agent> {
        let pinned = spawn::pinned_of(session)?;
        if let Some(p) = &pinned {
            p.check(&options)?;
        }
        let claim = session.claim()?;
        let instance = session.with_log(|l| l.state().headers.max_instance()) + 1;
        let frozen = pinned.as_ref().map(spawn::Pinned::frozen);
        Ok(Agent {
            session: session.clone(),
            claim,
            instance,
            options,
            prefix_listeners: Vec::new(),
            pre_step: Vec::new(),
            frozen,
            anchored: false,
            disposed: Arc::new(AtomicBool::new(false)),
            dispose_token: CancelToken::new(),
            buffered_results: Vec::new(),
            deferred_context: Vec::new(),
            summariser: None,
            counter: None,
            policies: PolicyTable::default(),
            meter: Meter::new(),
            consecutive_overflows: 0,
            unrecovered_overflow: None,
            prev_request: None,
            digest_cache: DigestCache::default(),
            body: None,
            last_request: None,
            stats: AgentStats::default(),
            pinned,
            child_results: std::collections::HashMap::new(),
            clock: crate::clock::ClockTrack::default(),
            keepalive: None,
            released: false,
        })
    }

    /// An agent instance over `session` that sends what the session's last request carried:
    /// the options of its latest request header (a child's: its parent's). For waking a session
    /// (a child above all) in another process. `InvalidInput` (field `config`) when the session
    /// has sent no request: there are no logged options, so they must be given.
    pub fn wake(session: &Session) -> Result<Agent> {
        let header = session.request_header().ok_or_else(|| {
            Error::invalid("config", "is required: the session has sent no request, so it has no logged options to wake it with")
        })?;
        Agent::new(session, spawn::options_of(&header))
    }

    /// The session this instance drives.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// This instance's id (1 for the first instance of a session, then 2, ...).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The current options.
    pub fn options(&self) -> &AgentOptions {
        &self.options
    }

    /// Replaces the options; effective at the next request.
    pub fn set_options(&mut self, options: AgentOptions) -> Result<()> {
        self.ensure_live()?;
        if let Some(p) = &self.pinned {
            p.check(&options)?;
        }
        self.options = options;
        Ok(())
    }

    /// Registers a session prefix listener (order matters: see [`crate::prefix`]). Listeners
    /// registered after the prefix was composed take effect in the next instance.
    pub fn add_prefix_listener(&mut self, l: Arc<dyn PrefixListener>) -> Result<()> {
        self.ensure_live()?;
        if let Some(p) = &self.pinned {
            return Err(Error::invalid(
                "listener",
                format!("session {} is a child agent: its session prefix is its parent's (a prefix listener would change it)", p.session),
            ));
        }
        self.prefix_listeners.push(l);
        Ok(())
    }

    /// Registers a pre-step listener.
    pub fn add_pre_step_listener(&mut self, l: Arc<dyn PreStepListener>) -> Result<()> {
        self.ensure_live()?;
        self.pre_step.push(l);
        Ok(())
    }

    /// Sets the token counter the meter uses (`None`: the built-in estimate) and returns the
    /// one it replaces.
    pub fn set_counter(&mut self, c: Option<Arc<dyn TokenCounter>>) -> Option<Arc<dyn TokenCounter>> {
        std::mem::replace(&mut self.counter, c)
    }

    /// The name of the token counter in use (`"estimate"` when none is set).
    pub fn counter_name(&self) -> &str {
        self.counter.as_ref().map(|c| c.name()).unwrap_or("estimate")
    }

    /// Sets the summariser used by compaction.
    pub fn set_summariser(&mut self, s: Option<Arc<dyn Summariser>>) {
        self.summariser = s;
    }

    /// Sets the token counter (host hook or tokenizer); the built-in estimate otherwise.
    pub fn set_token_counter(&mut self, c: Option<Arc<dyn TokenCounter>>) {
        self.counter = c;
    }

    /// Sets one compaction policy for every model (validated). `None` disables automatic
    /// compaction.
    pub fn set_policy(&mut self, p: Option<CompactionPolicy>) -> Result<()> {
        if let Some(p) = &p {
            p.validate()?;
        }
        self.policies = PolicyTable { default: p, models: Vec::new() };
        Ok(())
    }

    /// Sets compaction policies per model.
    pub fn set_policies(&mut self, t: PolicyTable) -> Result<()> {
        for p in t.default.iter().chain(t.models.iter().map(|(_, p)| p)) {
            p.validate()?;
        }
        self.policies = t;
        Ok(())
    }

    /// The compaction policy for the current model.
    pub fn policy(&self) -> Option<CompactionPolicy> {
        self.current_policy()
    }

    /// The frozen session prefix, once composed.
    pub fn prefix(&self) -> Option<Arc<Vec<Message>>> {
        self.frozen.as_ref().map(|f| f.messages.clone())
    }

    /// Statistics of this instance.
    pub fn stats(&self) -> AgentStats {
        self.stats.clone()
    }

    /// A token that disposes this instance when tripped from any thread: the running operation
    /// ends with `disposed`.
    pub fn dispose_handle(&self) -> DisposeHandle {
        DisposeHandle { flag: self.disposed.clone(), token: self.dispose_token.clone() }
    }

    /// Whether this instance was disposed (by [`DisposeHandle::dispose`], from a listener, or
    /// because a disposal ended an operation): every later call fails with `Disposed`.
    pub fn is_disposed(&self) -> bool {
        self.disposed.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn ensure_live(&self) -> Result<()> {
        if self.is_disposed() {
            return Err(Error::new(ErrorKind::Disposed, format!("agent instance {} was disposed", self.instance)));
        }
        Ok(())
    }

    /// The header this instance's next request carries (prefix as composed, if composed). Takes
    /// the session lock: a caller that holds it uses [`wanted_header_in`](Self::wanted_header_in).
    pub(crate) fn wanted_header(&self) -> EpochHeader {
        self.session.with_log(|l| self.wanted_header_in(l))
    }

    /// [`wanted_header`](Self::wanted_header) over `log`: the options' config, with the
    /// provider's threshold setting when the policy's mechanism resolves to native compaction on
    /// this route (`compaction::native`).
    pub(crate) fn wanted_header_in(&self, log: &crate::log::Log) -> EpochHeader {
        let mut config = self.options.config.clone();
        self.add_threshold_field(&mut config, log);
        EpochHeader::canonical(
            config,
            self.options.system.clone(),
            Some(self.options.tools.clone()),
            self.frozen.as_ref().map(|f| f.messages.clone()),
        )
    }

    /// A cancel token that trips when `host` trips or the agent is disposed.
    pub(crate) fn op_token(&self, host: &CancelToken) -> (CancelToken, [CancelGuard; 2]) {
        let op = CancelToken::new();
        let a = op.clone();
        let b = op.clone();
        let g1 = host.on_cancel(move || a.cancel());
        let g2 = self.dispose_token.on_cancel(move || b.cancel());
        (op, [g1, g2])
    }

    pub(crate) fn release_claim(&mut self) {
        if !self.released {
            self.released = true;
            self.session.release(self.claim);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if !self.released {
            // Close an open turn as disposed, best effort: a storage error cannot be returned
            // from here, so it is reported to the observer.
            if let Err(e) = self.close_turn_disposed() {
                crate::observe::emit(crate::observe::Level::Error, || {
                    crate::observe::Observation::new(
                        "turn-dispose-failed",
                        crate::observe::Level::Error,
                        format!(
                            "agent instance {} was dropped with a turn open, and ending it `disposed` failed: {}",
                            self.instance,
                            e.message()
                        ),
                    )
                    .session(self.session.id())
                    .with("instance", self.instance)
                    .with("error", e.message())
                });
            }
            self.release_claim();
        }
    }
}

/// Disposes an agent from any thread.
#[derive(Clone)]
pub struct DisposeHandle {
    flag: Arc<AtomicBool>,
    token: CancelToken,
}

impl DisposeHandle {
    /// Marks the instance disposed and interrupts what it is running.
    pub fn dispose(&self) {
        self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
        self.token.cancel();
    }
}
