//! # llmsession
//!
//! Session state for LLM agents: an append-only log that every request is rebuilt from byte for
//! byte, a frozen per-instance session prefix, and compaction whose summarisation request
//! replays the cached prefix of the last routed request.
//!
//! This crate is the core: plain safe Rust with a Rust API. The C ABI is the `llmsession-capi`
//! crate (`capi/` in the repository), which decodes C arguments, calls this API and encodes the
//! results; the `llmsession` inspector is `llmsession-cli` (`cli/`).
//!
//! Where to find each concept:
//! - [`types`]: the JSON vocabulary (messages, blocks, usage, tools, call config).
//! - [`log`]: events, validation, the surface, history derivation, the chained digest, loading.
//! - [`store`]: where a log is kept (memory, JSONL file): one writer, conditional appends.
//! - [`header`]: request headers, snapshots, deltas and their fold.
//! - [`prefix`]: session prefix composition.
//! - [`request`]: request envelopes, digests, reconstruction and `verify`.
//! - [`clock`]: the cache clock: what an idle gap costs, and what to do about it.
//! - [`explain`]: why each request hit or missed the provider's cache, and what it cost.
//! - [`timeline`]: a session's requests in time (our log, Claude Code and Codex transcripts),
//!   and `simulate`: the cache clock's policies replayed over them.
//! - [`replay`]: answering a host's requests from a recorded log.
//! - [`agent`]: agent instances and the host-driven turn/step lifecycle; child agents
//!   (`agent::spawn`).
//! - [`tree`]: a session with its children and forks, read from their stores, verified whole.
//! - [`tokens`]: the token meter and its counters.
//! - [`compaction`]: policies, region selection, summarisation requests, landing.
//! - [`render`]: provider body renderers and response parsers (OpenAI-compatible chat
//!   completions, OpenAI Responses API, Anthropic, Gemini).
//! - [`stream`]: streamed responses, from event-stream bytes to the parsed response.
//! - [`cancel`]: cancel tokens.
//! - [`observe`]: the observer hook (what the library did on its own, with levels).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod cache_rules;
pub mod cancel;
pub mod clock;
pub mod compaction;
pub mod error;
pub mod explain;
pub mod header;
pub mod log;
pub mod observe;
pub mod prefix;
pub mod prices;
pub mod render;
pub mod replay;
pub mod request;
pub mod session;
pub mod session_id;
pub mod store;
pub mod stream;
pub mod time;
pub mod timeline;
pub mod tokens;
pub mod tree;
pub mod types;

pub use agent::{Agent, AgentOptions};
pub use cancel::CancelToken;
pub use error::{Error, ErrorKind, Result};
pub use header::{EpochHeader, HeaderDelta, HeaderSnapshot, SnapshotReason};
pub use log::{Event, NewEvent};
pub use request::Request;
pub use session::{Session, SessionOptions};
pub use store::Durability;
pub use types::{Block, CacheDiagnostics, CallConfig, ContextEdit, JsonMap, Message, Provenance, Role, ToolSchema, Usage};
