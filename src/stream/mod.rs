//! Streamed responses: from the raw bytes of a provider's event stream to the response that
//! parsing the non-streamed body gives.
//!
//! A [`StreamAccumulator`] is made for one format ([`Renderer`]): OpenAI-compatible chat
//! completion chunks, OpenAI Responses API events, Anthropic message events, or Gemini
//! `streamGenerateContent` (server-sent events with `alt=sse`, or the plain JSON array). The
//! host feeds the bytes as they arrive, in any chunking ([`StreamAccumulator::feed`]); it may
//! take the [`Delta`]s each complete event yields, for display ([`StreamAccumulator::next_delta`]);
//! at the end [`StreamAccumulator::finish`] gives the same [`ParsedResponse`] as
//! [`parse_response`] on the non-streamed body, ready for `record_response`.
//!
//! How: each format's assembler rebuilds the non-streamed body from the events (concatenating
//! text and argument fragments, placing items and blocks by their index, merging usage), and
//! `finish` parses that body with the format's own parser. [`StreamAccumulator::body`] hands
//! out the rebuilt body itself (provider extras such as llama.cpp's `timings` included).
//!
//! Errors: an event that is not JSON, or lacks what its type needs, is `malformed`; an error
//! event of the provider (or a failed response) is `provider-error`, with the provider's error
//! object and whether it reports a context overflow; a stream that ends before its terminal
//! event (a cut connection) is `incomplete` at `finish`. The error detail's `stream` field
//! names which. After an error every call fails with it again, and nothing is returned to
//! record unless the host asks for the partial message (`finish(true)`).

mod anthropic;
mod chat;
mod gemini;
mod interactions;
mod responses;
mod sse;

use crate::error::{Error, ErrorKind, Result};
use crate::render::{parse_response, ParsedResponse, Renderer};
use serde::Serialize;
use serde_json::Value;
use sse::{JsonArrayReader, RawEvent, SseReader};
use std::collections::VecDeque;

/// What a delta carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeltaKind {
    /// Answer text.
    Text,
    /// Reasoning (thinking) text.
    Reasoning,
    /// A tool call: its id and name (when first seen) and a fragment of its arguments.
    ToolCall,
}

/// A piece of the response as it streams, for display. `index` counts the blocks of the same
/// kind in the final message, from 0 (for chat completions, a tool call's own `index`). For
/// text, the `text` of the deltas of one index, concatenated, is that text block's text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delta {
    /// What the delta carries.
    #[serde(rename = "type")]
    pub kind: DeltaKind,
    /// Which block of its kind.
    pub index: usize,
    /// The tool call's id, on its first delta (when the provider gives one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool call's name, on its first delta.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A fragment of text or reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A fragment of a tool call's arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

impl Delta {
    pub(crate) fn text(kind: DeltaKind, index: usize, text: &str) -> Delta {
        Delta { kind, index, id: None, name: None, text: Some(text.to_string()), arguments: None }
    }

    pub(crate) fn call(index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) -> Delta {
        Delta {
            kind: DeltaKind::ToolCall,
            index,
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            text: None,
            arguments: Some(arguments.to_string()),
        }
    }

    /// The delta as JSON: `{"type","index","text"?,"id"?,"name"?,"arguments"?}`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a delta always serialises")
    }
}

/// The format-specific part: rebuilds the non-streamed body from the events.
trait Assembler: Send + Sync + std::fmt::Debug {
    /// Handles one event. An `Err` is a malformed event or the provider's error.
    fn event(&mut self, ev: &RawEvent, out: &mut VecDeque<Delta>) -> Result<()>;
    /// Whether the stream's terminal event arrived (the response is complete).
    fn complete(&self) -> bool;
    /// What a complete stream ends with, for the `incomplete` error.
    fn terminal(&self) -> &'static str;
    /// The rebuilt body: the whole response once complete; otherwise what arrived, without
    /// the tool calls whose arguments are still incomplete.
    fn body(&self) -> Value;
}

#[derive(Debug)]
enum Reader {
    Sse(SseReader),
    /// Before the first non-blank byte, which decides: Gemini without `alt=sse` streams a JSON
    /// array, every other stream is server-sent events (a `[` or a `{` there is refused).
    Undecided,
    Array(JsonArrayReader),
}

/// Accumulates one streamed response (see the module docs).
#[derive(Debug)]
pub struct StreamAccumulator {
    format: Renderer,
    reader: Reader,
    assembler: Box<dyn Assembler>,
    deltas: VecDeque<Delta>,
    events: u64,
    failed: Option<Error>,
    ended: bool,
}

impl StreamAccumulator {
    /// An accumulator for a stream of `format`.
    pub fn new(format: Renderer) -> StreamAccumulator {
        let assembler: Box<dyn Assembler> = match format {
            Renderer::OpenAi => Box::new(chat::Chat::default()),
            Renderer::OpenAiResponses => Box::new(responses::Responses::default()),
            Renderer::Anthropic => Box::new(anthropic::Anthropic::default()),
            Renderer::Gemini => Box::new(gemini::Gemini::default()),
            Renderer::GeminiInteractions => Box::new(interactions::Interactions::default()),
        };
        StreamAccumulator { format, reader: Reader::Undecided, assembler, deltas: VecDeque::new(), events: 0, failed: None, ended: false }
    }

    /// The stream's format.
    pub fn format(&self) -> Renderer {
        self.format
    }

    /// Feeds the next bytes of the stream (any chunking; a chunk may end inside a line or a
    /// UTF-8 character). Fails on a malformed event or an error event of the provider; after
    /// a failure every later call fails with the same error. After [`finish`](Self::finish)
    /// it is an `OutOfOrder` error.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<()> {
        if self.ended {
            return Err(Error::out_of_order("the stream was finished; feed a new stream accumulator").with("stream", "finished"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut events = Vec::new();
        let read = self.read(bytes, &mut events);
        // Events completed before a reading error still count.
        let applied = self.apply(events);
        read.and(applied).map_err(|e| self.fail(e))
    }

    fn read(&mut self, bytes: &[u8], events: &mut Vec<RawEvent>) -> Result<()> {
        if let Reader::Undecided = self.reader {
            match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
                None => return Ok(()),
                Some(b'[') if self.format == Renderer::Gemini => self.reader = Reader::Array(JsonArrayReader::default()),
                // Server-sent events start with a field name or a comment, never with JSON.
                Some(b'[') => {
                    return Err(malformed(format!(
                        "this looks like {} (a JSON array); the accumulator was created for {}",
                        stream_name(Renderer::Gemini),
                        self.format.name()
                    ))
                    .with("looksLike", Renderer::Gemini.name()))
                }
                Some(b'{') => {
                    return Err(malformed(format!(
                        "this looks like a JSON body, not an event stream (was the request sent without \"stream\": true, \
                         or to a URL that does not stream?); the accumulator was created for {}",
                        self.format.name()
                    )))
                }
                Some(_) => self.reader = Reader::Sse(SseReader::default()),
            }
        }
        match &mut self.reader {
            Reader::Sse(r) => r.feed(bytes, events),
            Reader::Array(r) => r.feed(bytes, events),
            Reader::Undecided => Ok(()),
        }
    }

    fn apply(&mut self, events: Vec<RawEvent>) -> Result<()> {
        for ev in events {
            self.events += 1;
            let n = self.events;
            self.assembler.event(&ev, &mut self.deltas).map_err(|e| {
                let mut e = e.with("event", n);
                if let Some(name) = &ev.name {
                    e = e.with("eventType", name.as_str());
                }
                e
            })?;
        }
        Ok(())
    }

    fn fail(&mut self, e: Error) -> Error {
        self.failed = Some(e.clone());
        e
    }

    /// The next delta, in stream order, or `None` when every delta so far was taken.
    pub fn next_delta(&mut self) -> Option<Delta> {
        self.deltas.pop_front()
    }

    /// Ends the stream and gives the response: exactly what [`parse_response`] gives for the
    /// non-streamed body. A stream that broke (a malformed event, a provider error) or ended
    /// before its terminal event fails, unless `partial` is true: then the message assembled
    /// so far is returned (text and reasoning as received, tool calls only when their
    /// arguments are complete) with `finishReason` `"incomplete"`. A stream that completed
    /// gives the whole response either way. May be called again; later `feed`s fail.
    pub fn finish(&mut self, partial: bool) -> Result<ParsedResponse> {
        if !self.ended && self.failed.is_none() {
            let mut events = Vec::new();
            let read = match &mut self.reader {
                Reader::Sse(r) => r.finish(&mut events),
                Reader::Array(r) if r.inside_element() => {
                    Err(incomplete("the stream ended inside a JSON element (the connection was probably cut)"))
                }
                _ => Ok(()),
            };
            let applied = self.apply(events);
            if let Err(e) = read.and(applied) {
                // A last event cut in the middle is a cut connection rather than bad data.
                let e = if e.detail().get("stream") == Some(&Value::from("malformed")) && !self.assembler.complete() {
                    incomplete(format!("the stream ended inside an event: {}", e.message()))
                } else {
                    e
                };
                self.fail(e);
            } else if !self.assembler.complete() {
                let e = incomplete(format!(
                    "the stream ended before {} (the connection was probably cut); {} events arrived",
                    self.assembler.terminal(),
                    self.events
                ));
                self.fail(e);
            }
        }
        self.ended = true;
        match &self.failed {
            Some(e) if !partial => Err(e.clone()),
            Some(e) => {
                let mut p = parse_response(self.format, &self.assembler.body())?;
                if p.message.content.is_empty() {
                    // An empty assistant message would be logged as if the model had answered
                    // nothing (a foreign stream, or a cut before the first block).
                    return Err(e
                        .clone()
                        .context("no content arrived before the stream failed, so there is no partial message to record")
                        .with("partial", "empty"));
                }
                p.finish_reason = Some("incomplete".to_string());
                Ok(p)
            }
            None => parse_response(self.format, &self.assembler.body()),
        }
    }

    /// The body rebuilt so far, in the shape of the non-streamed response (the whole response
    /// once the stream completed).
    pub fn body(&self) -> Value {
        self.assembler.body()
    }

    /// The error the stream failed with, if it did.
    pub fn error(&self) -> Option<&Error> {
        self.failed.as_ref()
    }
}

// ---------------------------------------------------------------------------------------------
// Shared by the assemblers.

/// Parses an event's data as JSON (`malformed` when it is not).
pub(crate) fn json_data(ev: &RawEvent) -> Result<Value> {
    serde_json::from_str(&ev.data).map_err(|e| {
        Error::new(ErrorKind::MalformedJson, format!("a stream event is not valid JSON: {e}"))
            .with("stream", "malformed")
            .with("line", e.line() as u64)
            .with("column", e.column() as u64)
    })
}

/// The format an event's data (and SSE event name) belongs to, when it is unmistakably one:
/// an Anthropic message event (`type` `message_start`, `content_block_*`, `message_delta`,
/// `message_stop`), a Responses API event (`type` `response.*`), a chat completion chunk
/// (`object` `chat.completion.chunk`, or `choices` without a `type`) or a Gemini chunk
/// (`candidates`, `usageMetadata` or `promptFeedback`, without `type` or `choices`). `None`
/// when the event could be any (an error event, a ping, an empty object).
pub(crate) fn looks_like(ev: &RawEvent, data: &Value) -> Option<Renderer> {
    let ty = data.get("type").and_then(Value::as_str).or(ev.name.as_deref());
    match ty {
        Some("message_start" | "content_block_start" | "content_block_delta" | "content_block_stop" | "message_delta" | "message_stop") => {
            return Some(Renderer::Anthropic)
        }
        Some(t) if t.starts_with("response.") => return Some(Renderer::OpenAiResponses),
        _ => {}
    }
    if let Some(t) = data.get("event_type").and_then(Value::as_str) {
        if t.starts_with("interaction.") || t.starts_with("step.") || t.starts_with("content.") {
            return Some(Renderer::GeminiInteractions);
        }
    }
    if data.get("object").and_then(Value::as_str) == Some("chat.completion.chunk") {
        return Some(Renderer::OpenAi);
    }
    if data.get("type").is_some() {
        return None;
    }
    if data.get("choices").is_some_and(Value::is_array) {
        return Some(Renderer::OpenAi);
    }
    if ["candidates", "usageMetadata", "promptFeedback"].iter().any(|k| data.get(*k).is_some()) {
        return Some(Renderer::Gemini);
    }
    None
}

/// How a format's stream is called in errors.
fn stream_name(format: Renderer) -> &'static str {
    match format {
        Renderer::OpenAi => "an OpenAI chat completions stream",
        Renderer::OpenAiResponses => "an OpenAI Responses API stream",
        Renderer::Anthropic => "an Anthropic Messages stream",
        Renderer::Gemini => "a Gemini streamGenerateContent stream",
        Renderer::GeminiInteractions => "a Gemini Interactions API stream",
    }
}

/// `malformed` when the event belongs to another format than `expected` ([`looks_like`]): the
/// host created the accumulator for the wrong provider, and every event would otherwise be
/// ignored until `finish` reported a cut connection.
pub(crate) fn check_format(expected: Renderer, ev: &RawEvent, data: &Value) -> Result<()> {
    match looks_like(ev, data) {
        Some(other) if other != expected => Err(malformed(format!(
            "this looks like {}; the accumulator was created for {} (create it with the format of the provider you called)",
            stream_name(other),
            expected.name()
        ))
        .with("looksLike", other.name())),
        _ => Ok(()),
    }
}

/// An event that lacks what its type needs.
pub(crate) fn malformed(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("malformed stream event: {why}")).with("stream", "malformed")
}

/// The provider's error, reported inside the stream. `error` is the provider's error object;
/// the message quotes its kind and message as for a whole error body
/// (`render::response::provider_error_of`).
pub(crate) fn provider_error(error: &Value) -> Error {
    crate::render::response::provider_error_of(error, "the provider reported an error in the stream").with("stream", "provider-error")
}

fn incomplete(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, message).with("stream", "incomplete")
}

/// Per-kind ordinals for delta indexes.
#[derive(Debug, Default)]
pub(crate) struct Ordinals {
    text: usize,
    reasoning: usize,
    call: usize,
}

impl Ordinals {
    /// The next index for a block of `kind`.
    pub fn next(&mut self, kind: DeltaKind) -> usize {
        let c = match kind {
            DeltaKind::Text => &mut self.text,
            DeltaKind::Reasoning => &mut self.reasoning,
            DeltaKind::ToolCall => &mut self.call,
        };
        *c += 1;
        *c - 1
    }
}

/// Appends `s` to the string at `key` of an object (creating it).
pub(crate) fn append(obj: &mut serde_json::Map<String, Value>, key: &str, s: &str) {
    match obj.get_mut(key) {
        Some(Value::String(t)) => t.push_str(s),
        _ => {
            obj.insert(key.to_string(), Value::String(s.to_string()));
        }
    }
}

/// A non-negative integer field of an event (`malformed` when missing).
pub(crate) fn index_of(v: &Value, key: &str) -> Result<u64> {
    v.get(key).and_then(Value::as_u64).ok_or_else(|| malformed(format!("`{key}` must be a non-negative integer")))
}
