//! The cache clock: what an idle gap costs, and what to do about it (docs/caching.md, "The cache
//! clock").
//!
//! A provider's prompt cache is a clock: a prefix used at time `t` stays warm until `t + TTL`
//! (the TTL of the tier it was written at, [`crate::cache_rules`]). While the host is away (a
//! human thinking, a tool waiting for approval) the clock runs out, and the first request after
//! the pause writes the whole context again. This module prices that and decides, online, what
//! to do about it. It is pure: small plain structs in, serialisable answers out, no log and no
//! agent, so the agent's clock (the log's figures), `explain` (a recorded log's gaps) and
//! `simulate` (any timeline) all call the same functions.
//!
//! # The figures ([`CacheFigures`])
//!
//! At the last request: `W` the warm prefix (that request's prompt tokens: what the provider
//! holds), `C` the context the next request carries before the host's new input (`W` plus the
//! reply and what was added after it), what the last request wrote, the TTL and tier in force,
//! the prices per million tokens (`input`, `read`, `write` at the tier, `output`), whether a
//! keep-warm request can be sent and its output limit, the margin before expiry at which the
//! clock acts, and, when the clock may compact, what a compaction now would do.
//!
//! # The options over one gap ([`GapCosts::of`], every formula in [`CacheFigures`])
//!
//! The cost of an option is what it spends during the gap plus the context of the first request
//! after it (the host's new input costs the same in every option and is left out). With
//! `warm = W·read + (C−W)·write` and `cold = C·write`:
//!
//! - **let-expire**: `warm` if the host returns within the TTL, else `cold`.
//! - **keep-warm**: a keep-warm request (the last request again, its output limit at the
//!   provider's minimum: `W·read + limit·output`) `margin` before each expiry, until the host
//!   returns; then `warm`. `n` requests bridge a gap `g > TTL` with
//!   `n = ceil((g − TTL) / (TTL − margin))`.
//! - **compact** (before expiry, at `TTL − margin`): the summarisation request reads the head and
//!   the region from the cache (`read·readTokens`), adds the instruction (`input`) and produces
//!   the summary (`output`); at the return the smaller context is written
//!   (`compacted·write`), its head (system, tools, session prefix) read instead if the return
//!   comes within a TTL of the compaction. A host back before `TTL − margin` never saw it run.
//! - **tier** (a longer tier for the write before the gap, e.g. Anthropic's 1 h): the premium of
//!   that write at the longer tier's price, then `warm` within the longer TTL, else a rewrite at
//!   its price. Pricing assumption (`tierBilling`): `written` (default) — a request that reads
//!   part of its prefix from the cache pays the read price for it and the longer tier's write
//!   price only for what it writes, and the whole prefix up to its last mark then lives for the
//!   longer TTL (Anthropic's documented billing of mixed TTLs); `prefix` — pessimistic, moving
//!   to a longer tier writes the whole warm prefix again at its price.
//!
//! The break-evens follow: keeping warm pays while fewer than `(cold − warm) / ping` keep-warm
//! requests are needed (about 11.5 for Anthropic's 5-minute tier: 57 minutes of absence);
//! compacting pays when the host returns after expiry with a probability above `A / (A − B)`,
//! `A` what compacting costs more on a warm return and `−B` what it saves on a cold one.
//!
//! # The decision ([`decide`])
//!
//! The host's return time is a distribution ([`ReturnModel`]): the host's own, or the
//! documented default prior (never returning included) blended with the gaps the session
//! showed so far. Conditioned on the host having been away until now:
//!
//! - no TTL, nothing cached, or already expired: `none` (nothing to do before the next
//!   request).
//! - over the compaction threshold: `compact` at once (a necessary compaction never waits).
//! - warm and more than `margin` before expiry: an advisable action waits (the host may still
//!   come back); `nextDecisionAt` is `expiry − margin`. If the provider offers tiers
//!   ([`offered_tiers`]) and another tier has the lower expected cost per request for the next
//!   write ([`tier_costs`]: the average write's premium against the share of the session's own
//!   gaps that were pauses times what a pause costs more at the shorter tier), the decision is
//!   `tier` (write the next request at that tier). A session that has not paused yet moves to no
//!   dearer tier: that bet is placed on what it has shown, or on the host's own distribution;
//!   before its first pause it may only drop a premium in force, priced with the whole model
//!   and within the keep-warm budget (`tierBeforePause` in the figures).
//! - within `margin` of expiry: the option with the least expected cost, by an optimal-stopping
//!   programme over the decision points one keep-warm period apart (at each: let it expire,
//!   compact, or keep warm and decide again), so keeping warm stops once a return has become
//!   too unlikely: a session that never comes back costs a few keep-warm requests, not an
//!   endless stream of them. Ties go to the smaller action (let-expire, then keep-warm, then
//!   compact). A `let-expire` names the tier of the rewrite when another one pays for it.
//!
//! `margin` is what the action needs: the request it sends reads the cached prefix when it
//! starts, so the clock acts one request latency before expiry ([`DEFAULT_MARGIN_MS`], raised
//! to the session's longest keep-warm round trip, [`ClockTrack::lead_ms`]).
//!
//! The answer ([`Decision`]) names the decision, the reason in words (the break-even, the
//! probability of a warm return, the expected cost of each option), and when to ask again.
//! Deterministic: the same figures, timing and model give the same bytes.

mod agent;
mod cost;
mod decide;
mod returns;
mod track;

pub(crate) use agent::OpenKeepalive;
pub use agent::{
    keepalive_max_tokens, ClockCompaction, ClockOptions, ClockReport, ClockState, DEFAULT_MARGIN_MS, DEFAULT_MIN_CONTEXT_SHARE,
    DEFAULT_SUMMARY_RATIO,
};
pub use cost::{
    keepalive_budget, label, offered_tiers, CacheFigures, CompactionFigures, GapCosts, OptionCost, Rates, Tier, TierBilling,
    DEFAULT_KEEPALIVE_BUDGET,
};
pub use decide::{decide, tier_costs, Action, BreakEven, Decision, Expected, TierCost, Timing};
pub use returns::{
    default_prior_never_returns, ReturnModel, ReturnModelSpec, DEFAULT_NEVER_RETURNS, DEFAULT_PRIOR, DEFAULT_PRIOR_ENDS,
    DEFAULT_PRIOR_WEIGHT,
};
pub use track::{log_figures, ClockTrack, CompactionParams, LogCheck, LogFigures};
