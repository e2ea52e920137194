//! Our own log as a timeline: every request the log records, found by the request walk
//! ([`RequestWalk`], the one walk behind `verify`, `explain` and `replay`), with the usage
//! recorded with its response.
//!
//! - A conversation request (`step/start`) is timed at its `step/start`, routed to the request
//!   header's provider and model, and gets the usage of the `assistant/message` that answers it.
//! - A summarisation request (`compaction/start` with a request digest) is timed at its
//!   `compaction/start`, routed to the compaction's provider and model, and gets the usage of
//!   its `compaction/summary`.
//! - A keep-warm request of the cache clock (`clock/keepalive`) is timed at its
//!   `clock/keepalive`, routed as the conversation request it replays, and gets the usage of
//!   its `clock/keepalive-end`: what the recorded policy paid to keep the cache warm (the
//!   simulation's other policies replace it with their own).
//! - A request whose response recorded no usage is left out (counted in the notes): the
//!   simulation needs what the provider billed.
//! - A landed compaction (`compaction/end` with outcome `landed`) marks the next conversation
//!   request `compacted_before`.
//!
//! The log is read as every reader reads one ([`read_checked_records`]): a damaged record is
//! [`crate::error::ErrorKind::CorruptLog`] naming the line.

use super::{RequestKind, Source, TimedRequest, Timeline};
use crate::error::Result;
use crate::log::event::types;
use crate::log::load::{read_checked_records, CheckedLog};
use crate::request::{RecordedKind, RequestWalk};
use crate::types::Usage;
use serde_json::Value;

/// The timeline of a log given as its records (session header first).
pub fn read_records(records: &[Vec<u8>]) -> Result<Timeline> {
    read_log(&read_checked_records(records)?)
}

/// The timeline of a checked log.
pub fn read_log(log: &CheckedLog) -> Result<Timeline> {
    let (mut walk, events) = RequestWalk::of(log);
    let mut requests: Vec<TimedRequest> = Vec::new();
    // The request waiting for its usage, and whether it has it.
    let mut pending: Option<(TimedRequest, bool)> = None;
    let (mut without_usage, mut landed) = (0u64, false);
    let finish = |p: Option<(TimedRequest, bool)>, requests: &mut Vec<TimedRequest>, without: &mut u64| match p {
        Some((r, true)) => requests.push(r),
        Some((_, false)) => *without += 1,
        None => {}
    };
    for ev in events {
        if let Some(r) = walk.rebuild(ev)? {
            finish(pending.take(), &mut requests, &mut without_usage);
            let (kind, provider, model) = match &r.kind {
                RecordedKind::Conversation { .. } => {
                    (RequestKind::Conversation, r.header.config.provider.clone(), r.header.config.model.clone())
                }
                RecordedKind::Compaction { provider, model, .. } => (RequestKind::Compaction, provider.clone(), model.clone()),
                RecordedKind::Keepalive { .. } => (RequestKind::Keepalive, r.header.config.provider.clone(), r.header.config.model.clone()),
                // A provider's own compaction request (on demand): a summarisation request.
                RecordedKind::NativeCompaction { .. } => {
                    (RequestKind::Compaction, r.header.config.provider.clone(), r.header.config.model.clone())
                }
            };
            let compacted_before = kind == RequestKind::Conversation && std::mem::take(&mut landed);
            let at = format!("seq {}", ev.seq);
            pending = Some((TimedRequest { time: ev.time, provider, model, kind, usage: Usage::default(), compacted_before, at }, false));
        }
        match ev.ty.as_str() {
            types::ASSISTANT_MESSAGE | types::COMPACTION_SUMMARY | types::COMPACTION_NATIVE | types::CLOCK_KEEPALIVE_END => {
                let want = match ev.ty.as_str() {
                    types::ASSISTANT_MESSAGE => RequestKind::Conversation,
                    types::COMPACTION_SUMMARY | types::COMPACTION_NATIVE => RequestKind::Compaction,
                    _ => RequestKind::Keepalive,
                };
                if let Some((r, has)) = pending.as_mut().filter(|(r, has)| r.kind == want && !has) {
                    if let Some(u) = ev.data.get("usage").and_then(|u| Usage::from_value(u, "usage").ok()) {
                        r.usage = u;
                        *has = true;
                    }
                }
            }
            types::COMPACTION_END if ev.data.get("outcome").and_then(Value::as_str) == Some("landed") => landed = true,
            _ => {}
        }
        walk.apply(ev, ev.seq)?;
    }
    finish(pending.take(), &mut requests, &mut without_usage);
    let mut notes = Vec::new();
    if without_usage > 0 {
        notes.push(format!("{without_usage} request(s) without recorded usage left out"));
    }
    Ok(Timeline { source: Source::Llmsession, session: log.header().id.clone(), requests, notes })
}
