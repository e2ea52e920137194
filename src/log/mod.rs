//! The append-only session log (docs/contract.md §2): events, validation, the surface and its derivation,
//! storage, loading with repair.
//!
//! [`Log`] is the in-memory fold: every event's JSON line plus the [`LogState`] that
//! validation needs (open turn and step, pending tool calls, the surface with its derivation
//! cache, the header fold). It knows nothing about storage; [`crate::session::Session`] ties a
//! log to a [`Store`].

pub mod chain;
pub mod checkpoint;
pub mod event;
pub mod history;
pub mod load;
pub(crate) mod project;
pub(crate) mod raw;
pub mod rules;
pub mod text;

pub use event::{Event, NewEvent, SurfaceOp, TurnEndReason, UserSource};
pub use history::{Derived, History};
pub use rules::{Effect, LogState};
pub use text::Text;

use crate::error::Result;

/// The events of one session and everything folded over them.
///
/// A log holds the stored lines of its events from seq [`base`](Self::base) on: every line for
/// a log loaded whole or created here, the lines from its last checkpoint on for a log opened
/// bounded (`docs/log.md`, "Checkpoints"), none for a log a streaming reader folds
/// ([`discarding`](Self::discarding)). The folded state always covers every event.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// The seq of `lines[0]`: the lines of the events before it are not held.
    base: u64,
    /// The stored lines of the events from `base` on (see [`Text`]).
    lines: Vec<Text>,
    /// Lines are not kept at all (a streaming reader): `base` counts the events.
    discard: bool,
    state: LogState,
    /// The chain value after the last event, for a chained (version 2) log.
    chain: Option<chain::Link>,
    /// Events appended since the last checkpoint, and their lines' bytes (newlines included).
    since_checkpoint: (u64, u64),
}

/// What [`Log::savepoint`] saved.
#[derive(Debug)]
pub(crate) struct Savepoint {
    len: u64,
    chain: Option<chain::Link>,
    since_checkpoint: (u64, u64),
    state: rules::StateSave,
}

impl Log {
    /// An empty log whose records are not chained (a version 1 log, or events replayed for a
    /// check).
    pub fn new() -> Log {
        Log::default()
    }

    /// An empty chained log (version 2): `start` is the digest of its session header record.
    pub fn chained(start: chain::Link) -> Log {
        Log { chain: Some(start), ..Log::default() }
    }

    /// A log that folds events without keeping their lines (a streaming reader: memory follows
    /// the state, not the history).
    pub fn discarding() -> Log {
        Log { discard: true, ..Log::default() }
    }

    /// A log restored at event `base` (the events before it are not held): `state` folds them,
    /// `chain` is the chain value after the last of them (for a chained log).
    pub(crate) fn restored(base: u64, state: LogState, chain: Option<chain::Link>) -> Log {
        Log { base, state, chain, ..Log::default() }
    }

    /// The seq of the first event whose line this log holds (0 for a log held whole).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Adds the line of the event the log was restored at (its checkpoint), which the restored
    /// state already folds.
    pub(crate) fn push_restored_line(&mut self, line: Text) {
        debug_assert_eq!(self.state.last_checkpoint, Some(self.base));
        self.lines.push(line);
    }

    /// Drops the lines this log holds and keeps none from now on (a reader that walks events
    /// from a restored state: [`discarding`](Self::discarding)).
    pub(crate) fn forget_lines(&mut self) {
        self.base = self.next_seq();
        self.lines = Vec::new();
        self.discard = true;
    }

    /// Events appended since the last checkpoint and their lines' bytes.
    pub(crate) fn since_checkpoint(&self) -> (u64, u64) {
        self.since_checkpoint
    }

    /// Makes room for `n` more events' lines (a load knows how many records it reads, so the
    /// list of lines is allocated once, at its size, rather than grown by doubling).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.lines.reserve_exact(n);
    }

    /// The chain value after the last event, for a chained log.
    pub fn chain_head(&self) -> Option<&chain::Link> {
        self.chain.as_ref()
    }

    /// The stored form of an event, with its chain field when the log is chained,
    /// written through `buf` (a scratch buffer the caller keeps across events, so a batch or a
    /// replay serialises every event into the same allocation): the event is serialised once
    /// and its chain field appended in place; the record is then copied once, into its `Arc`.
    pub(crate) fn seal_event(&self, ev: &Event, buf: &mut Vec<u8>) -> (Text, Option<chain::Link>) {
        buf.clear();
        serde_json::to_writer(&mut *buf, ev).expect("an event always serialises");
        let link = self.chain.as_ref().map(|prev| chain::seal_in_place(prev, buf));
        (Text::from(std::str::from_utf8(buf).expect("serde_json writes UTF-8")), link)
    }

    /// Applies a checked event with its stored record and the chain value the record ends with
    /// (see [`seal_event`](Self::seal_event)).
    pub(crate) fn commit_sealed(&mut self, ev: &Event, effect: Effect, line: Text, link: Option<chain::Link>) {
        if link.is_some() {
            self.chain = link;
        }
        self.commit(ev, effect, line);
    }

    /// Saves the log before a batch of appends (see [`LogState::savepoint`]).
    pub(crate) fn savepoint(&self, replaces: bool, headers: bool) -> Savepoint {
        Savepoint {
            len: self.next_seq(),
            chain: self.chain,
            since_checkpoint: self.since_checkpoint,
            state: self.state.savepoint(replaces, headers),
        }
    }

    /// Notes the tool-call ids an effect about to be committed makes known.
    pub(crate) fn note_effect(sp: &mut Savepoint, effect: &Effect) {
        sp.state.added_calls.extend(effect.new_call_ids().map(str::to_string));
    }

    /// Undoes every append since `sp`.
    pub(crate) fn rollback(&mut self, sp: Savepoint) {
        if self.discard {
            self.base = sp.len;
        } else {
            self.lines.truncate((sp.len - self.base) as usize);
        }
        self.chain = sp.chain;
        self.since_checkpoint = sp.since_checkpoint;
        self.state.rollback(sp.state);
    }

    /// Number of events (all of them, held or not).
    pub fn len(&self) -> usize {
        self.next_seq() as usize
    }

    /// Whether the log has no events.
    pub fn is_empty(&self) -> bool {
        self.next_seq() == 0
    }

    /// The seq the next event gets.
    pub fn next_seq(&self) -> u64 {
        self.base + self.lines.len() as u64
    }

    /// The folded state.
    pub fn state(&self) -> &LogState {
        &self.state
    }

    /// The surface with its derivation cache.
    pub fn history(&self) -> &History {
        &self.state.history
    }

    /// Validates an event without changing anything.
    pub fn check(&self, ev: &Event) -> Result<Effect> {
        self.state.check(ev, self.next_seq())
    }

    /// [`check`](Self::check) of a visible event with its message projected from its record
    /// (see [`LogState::check_projected`]).
    pub(crate) fn check_projected(&self, ev: &Event, projected: project::Projected) -> Result<Effect> {
        self.state.check_projected(ev, self.next_seq(), projected)
    }

    /// Applies an event that [`check`](Self::check) accepted, with its serialised line.
    pub fn commit(&mut self, ev: &Event, effect: Effect, line: Text) {
        if matches!(effect, Effect::Checkpoint(_)) {
            self.since_checkpoint = (0, 0);
        } else {
            self.since_checkpoint.0 += 1;
            self.since_checkpoint.1 += line.len() as u64 + 1;
        }
        self.state.apply(ev, effect);
        if self.discard {
            self.base += 1;
        } else {
            self.lines.push(line);
        }
    }

    /// Validates and applies an event.
    pub fn append(&mut self, ev: &Event) -> Result<Text> {
        self.append_sized(ev, 128)
    }

    /// [`append`](Self::append), serialising the line into a buffer of `capacity` bytes.
    pub(crate) fn append_sized(&mut self, ev: &Event, capacity: usize) -> Result<Text> {
        let effect = self.check(ev)?;
        let line = Text::from(ev.to_json_sized(capacity));
        self.commit(ev, effect, line.clone());
        Ok(line)
    }

    /// The JSON line of event `seq`, if this log holds it (seq at or after [`base`](Self::base)).
    pub fn line(&self, seq: u64) -> Option<&Text> {
        seq.checked_sub(self.base).and_then(|i| self.lines.get(i as usize))
    }

    /// The JSON lines this log holds: those of events `base..` (see [`base`](Self::base)).
    pub fn lines(&self) -> &[Text] {
        &self.lines
    }

    /// Event `seq`, parsed (if this log holds its line).
    pub fn event(&self, seq: u64) -> Option<Event> {
        self.line(seq).map(|l| Event::from_json(l).expect("logged events parse"))
    }

    /// Rebuilds a log from events, validating each.
    pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<Log> {
        let mut log = Log::new();
        for ev in events {
            log.append(ev)?;
        }
        Ok(log)
    }
}
