//! The one-way hot path: the provider body out, the provider body back in.
//!
//! Once an agent has a renderer ([`Agent::set_renderer`]), [`Agent::next_body`] builds the next
//! request exactly as [`Agent::next_request`] does (the envelope is logged and its digest
//! recorded the same way) and returns the provider's body ready to POST, rendered from the
//! rendered form of each message that the agent keeps (`render::BodyCache`), with the request's
//! [`RequestInfo`]. The envelope itself is built only when asked ([`Agent::last_envelope`]).
//!
//! On the way back, [`Agent::record_body`] takes the provider's raw response body (and
//! [`Agent::record_stream`] a stream accumulator at its end): parsed once with the renderer's
//! format and recorded as [`Agent::record_response`] records a message.

use super::Agent;
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::header::EpochHeader;
use crate::log::History;
use crate::render::{parse_response, BodyCache, ParsedResponse, RenderOptions, Renderer};
use crate::request::{digest, Body, EnvelopeParts, PrefixBytes, Request, RequestInfo};
use crate::stream::StreamAccumulator;

/// What a request build returns.
pub(crate) enum Want {
    /// The envelope ([`Agent::next_request`]).
    Envelope,
    /// The provider body ([`Agent::next_body`]).
    Body,
}

/// A built request, as asked.
pub(crate) enum Built {
    Envelope(Request),
    Body(Body),
}

/// What a recorded response was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The seq of its `assistant/message`.
    pub seq: u64,
    /// How many tool calls the message makes (each is now waiting for its result).
    pub tool_calls: usize,
    /// The response's finish reason, normalised as [`ParsedResponse::finish_reason`] is
    /// (`render::FINISH_REASONS`; a reason the library does not know in the provider's own
    /// spelling; `None` when the response gives none). It is not logged, so this is where a
    /// host that records raw bodies learns it: `"pause-turn"` means the turn is not over (build
    /// the next request of the same turn), `"incomplete"` that a cut stream was recorded with
    /// `partial`.
    pub finish_reason: Option<String>,
}

/// Enough to write the envelope of the last request again: its header, and where the history
/// stood (the envelope carried the first `count` entries of that replace generation).
#[derive(Clone, Debug)]
pub(crate) struct LastRequest {
    header: EpochHeader,
    session_id: String,
    info: RequestInfo,
    generation: u64,
    count: usize,
    last_seq: Option<u64>,
}

impl LastRequest {
    pub(crate) fn new(header: EpochHeader, session_id: String, history: &History, info: RequestInfo) -> LastRequest {
        let entries = history.entries();
        LastRequest {
            header,
            session_id,
            info,
            generation: history.generation(),
            count: entries.len(),
            last_seq: entries.last().map(|d| d.seq),
        }
    }
}

pub(crate) fn no_renderer() -> Error {
    Error::out_of_order("the agent has no renderer: call set_renderer first (or build the envelope with next_request)")
}

/// Check mode: the body is the fresh rendering of the envelope, byte for byte.
pub(crate) fn check_body(cache: &BodyCache, envelope: &str, prefix_len: usize, body: &str, turn: u64, step: u64) -> Result<()> {
    let fresh = cache.render_envelope_fresh(envelope, prefix_len, None)?;
    if fresh != body {
        let at = fresh.bytes().zip(body.bytes()).take_while(|(a, b)| a == b).count();
        return Err(Error::new(
            ErrorKind::Reconstruction,
            format!(
                "turn {turn} step {step}: the {} body differs from the rendering of its envelope (first difference at byte {at})",
                cache.renderer().name()
            ),
        )
        .with("turn", turn)
        .with("step", step));
    }
    Ok(())
}

impl Agent {
    /// Gives this agent a provider body format, for [`next_body`](Self::next_body) and
    /// [`record_body`](Self::record_body), with its render options. `options.prefix_len` must be
    /// 0: the agent knows its own session prefix. The rendered form of each history message is
    /// computed once and reused by every later body. Setting a renderer again replaces it.
    pub fn set_renderer(&mut self, renderer: Renderer, options: RenderOptions) -> Result<()> {
        self.ensure_live()?;
        if options.prefix_len != 0 {
            return Err(Error::invalid("prefixLen", "is the agent's own (the length of its session prefix); leave it out"));
        }
        options.check_for(renderer)?;
        self.body = Some(BodyCache::new(renderer, options));
        Ok(())
    }

    /// The renderer [`set_renderer`](Self::set_renderer) gave, with its options.
    pub fn renderer(&self) -> Option<(Renderer, &RenderOptions)> {
        self.body.as_ref().map(|b| (b.renderer(), b.options()))
    }

    /// Builds the next request exactly as [`next_request`](Self::next_request) does (the same
    /// checks, listeners, gate, header and `step/start`) and returns the provider body rendered
    /// from its envelope with the agent's renderer: byte for byte what
    /// `Renderer::render(envelope, options)` serialises, with the session prefix's length as
    /// `prefix_len`. Fails with `OutOfOrder` when no renderer is set; a body the renderer
    /// cannot produce (a block the provider has no form for) fails before anything is written.
    pub fn next_body(&mut self, cancel: &CancelToken) -> Result<Body> {
        self.ensure_live()?;
        if self.body.is_none() {
            return Err(no_renderer());
        }
        match self.next_step(cancel, Want::Body)? {
            Built::Body(b) => Ok(b),
            Built::Envelope(_) => unreachable!("asked for the body"),
        }
    }

    /// What the last request this instance built is (from [`next_request`](Self::next_request)
    /// or [`next_body`](Self::next_body)).
    pub fn last_request_info(&self) -> Option<&RequestInfo> {
        self.last_request.as_ref().map(|l| &l.info)
    }

    /// The envelope of the last request this instance built: the logged truth the body was
    /// rendered from, whose digest `step/start` records. Written again on demand (from the
    /// history when it only grew since, else from the log); `OutOfOrder` before any request.
    pub fn last_envelope(&self) -> Result<String> {
        self.ensure_live()?;
        let last = self.last_request.as_ref().ok_or_else(|| Error::out_of_order("this agent has not built a request yet"))?;
        let prefix = match &self.frozen {
            Some(f) if f.bytes.is_for(last.header.message_prefix.as_ref()) => None,
            _ => Some(PrefixBytes::of(last.header.message_prefix.as_ref())),
        };
        let prefix = prefix.as_ref().unwrap_or_else(|| &self.frozen.as_ref().expect("checked").bytes);
        let g = self.session.lock();
        let history = g.log.history();
        let entries = history.entries();
        let unchanged = history.generation() == last.generation
            && entries.len() >= last.count
            && last.count.checked_sub(1).map(|i| entries[i].seq) == last.last_seq;
        let json = if unchanged {
            write_envelope(last, prefix, &entries[..last.count])
        } else {
            // The history was rewritten since (a compaction): the log up to the request's
            // step/start holds it.
            let mut g = g;
            let log = g.log_at(last.info.step_seq)?;
            drop(g);
            write_envelope(last, prefix, log.history().entries())
        };
        debug_assert_eq!(digest(json.as_bytes()), last.info.digest, "the envelope written again is the one logged");
        Ok(json)
    }

    /// Records the provider's raw, non-streamed response body to the open step: parsed with the
    /// renderer's format ([`parse_response`]) and recorded as
    /// [`record_response`](Self::record_response) records the message and its usage. Returns
    /// the `assistant/message`'s seq, the number of tool calls and the finish reason
    /// ([`Recorded`]: the host's next move, `render::FINISH_REASONS`). Errors
    /// (each changes nothing): `OutOfOrder` without a renderer or an open step,
    /// `MalformedJson`, `InvalidInput` (a body of another format or without a message, naming
    /// the field).
    pub fn record_body(&mut self, body: &str) -> Result<Recorded> {
        self.ensure_live()?;
        let renderer = self.body.as_ref().ok_or_else(no_renderer)?.renderer();
        self.check_step_open()?;
        let v: serde_json::Value = serde_json::from_str(body)?;
        let parsed = parse_response(renderer, &v).map_err(|e| e.context(format!("a {} response body", renderer.name())))?;
        self.record_parsed(parsed)
    }

    /// Records the response a stream accumulated, at its end (`partial` as
    /// [`StreamAccumulator::finish`]), as [`record_body`](Self::record_body) records a body.
    /// The stream's format must be the agent's renderer when one is set. The finish reason is
    /// the stream's (`"incomplete"` for a cut stream recorded with `partial`).
    pub fn record_stream(&mut self, stream: &mut StreamAccumulator, partial: bool) -> Result<Recorded> {
        self.ensure_live()?;
        if let Some(b) = &self.body {
            if b.renderer() != stream.format() {
                return Err(Error::invalid(
                    "stream",
                    format!("is a {} stream, but the agent renders {} bodies", stream.format().name(), b.renderer().name()),
                ));
            }
        }
        self.check_step_open()?;
        let parsed = stream.finish(partial)?;
        self.record_parsed(parsed)
    }

    fn record_parsed(&mut self, parsed: ParsedResponse) -> Result<Recorded> {
        // A keep-warm request's answer opens no tool call (it never enters the history).
        let tool_calls = if self.keepalive.is_some() { 0 } else { parsed.message.tool_calls().count() };
        let seq = self.record_response(parsed.message, parsed.usage)?;
        Ok(Recorded { seq, tool_calls, finish_reason: parsed.finish_reason })
    }

    /// `OutOfOrder` unless a step is open or a keep-warm request waits (a response is awaited).
    fn check_step_open(&self) -> Result<()> {
        if self.keepalive.is_some() {
            return Ok(());
        }
        self.session.with_log(|l| match &l.state().open_turn {
            None => Err(Error::out_of_order("no turn is open")),
            Some(t) if !t.step_open => Err(Error::out_of_order("no request is open: build one with next_body first")),
            Some(_) => Ok(()),
        })
    }
}

/// The conversation envelope of `last` over `history`.
fn write_envelope(last: &LastRequest, prefix: &PrefixBytes, history: &[std::sync::Arc<crate::log::Derived>]) -> String {
    let turn_step = Some((last.info.turn, last.info.step));
    let bytes = EnvelopeParts::conversation(&last.header, prefix, history, &last.session_id, turn_step).write();
    String::from_utf8(bytes).expect("an envelope is text")
}
