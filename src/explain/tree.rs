//! Explain across a tree of sessions (`llmsession explain --tree`, `lls_explain_tree`,
//! docs/caching.md "Explain across a tree"): each node's own requests explained as
//! [`explain_log_with`] explains a log, then summed per node, per subtree and for the tree.
//!
//! - A node's **own** requests are those after its seed: a child's log holds its parent's
//!   requests too (it is seeded with the parent's events), and those are counted once, in the
//!   parent. So the inherited prefix is counted once in every roll-up.
//! - A spawned child's **spawn floor** is its first own request: what it read to start (its
//!   parent's conversation, mostly from the cache, plus the placeholders and its directive);
//!   its **work** is the rest of its requests.
//! - **Spend** is what the requests cost (prompt, cached, uncached and output tokens; with a
//!   price table, money); **miss** is the part of the uncached tokens charged to a cause other
//!   than growth (expiry, header change, resume, compaction, ...): the cache-miss cost, apart.
//! - The **counterfactual** is the same tree with cold children: every spawned child's first
//!   request reads nothing from the cache (its cached tokens billed as uncached input), and
//!   nothing else changes. That is a lower bound: a cold child would also write its prefix.

use super::{explain_log_with, Cause, ExplainSettings, RequestReport};
use crate::error::Result;
use crate::tokens::TokenCounter;
use crate::tree::Tree;
use serde::Serialize;
use serde_json::Value;

/// Token (and, with prices, money) sums over some requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spend {
    /// Requests summed (conversation and summarisation).
    pub requests: u64,
    /// Prompt tokens (the provider's, else counted).
    pub prompt_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cached_tokens: u64,
    /// Prompt tokens not read from the cache.
    pub uncached_tokens: u64,
    /// Of those, the tokens charged to a cause other than growth: what cache misses cost.
    pub miss_tokens: u64,
    /// Output tokens (provider usage).
    pub output_tokens: u64,
    /// What the requests cost, with a price table (the priced ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Of that, the uncached cost charged to causes other than growth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_cost: Option<f64>,
}

impl Spend {
    fn add_request(&mut self, r: &RequestReport) {
        self.requests += 1;
        self.prompt_tokens += r.prompt_tokens;
        self.cached_tokens += r.cached_tokens;
        self.uncached_tokens += r.uncached_tokens;
        self.miss_tokens += r.causes.iter().filter(|c| c.cause != Cause::Growth).map(|c| c.tokens).sum::<u64>();
        self.output_tokens += r.usage.as_ref().map_or(0, |u| u.output_tokens);
        if let Some(c) = &r.cost {
            *self.cost.get_or_insert(0.0) += c.total;
            let miss: f64 = r.causes.iter().filter(|c| c.cause != Cause::Growth).filter_map(|c| c.cost).sum();
            *self.miss_cost.get_or_insert(0.0) += miss;
        }
    }

    fn add(&mut self, o: &Spend) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.uncached_tokens += o.uncached_tokens;
        self.miss_tokens += o.miss_tokens;
        self.output_tokens += o.output_tokens;
        if let Some(c) = o.cost {
            *self.cost.get_or_insert(0.0) += c;
        }
        if let Some(c) = o.miss_cost {
            *self.miss_cost.get_or_insert(0.0) += c;
        }
    }

    /// The share of the prompt read from the cache (0 without prompt tokens).
    pub fn read_ratio(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.prompt_tokens as f64
        }
    }
}

/// One node of [`TreeExplanation`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The session id.
    pub id: String,
    /// Its parent's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// `root`, `spawn` or `fork`.
    pub kind: &'static str,
    /// The parent's call a spawned child answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Its depth (the root is 0).
    pub depth: usize,
    /// How many of its events are its parent's.
    pub seed_length: u64,
    /// Where it was read from.
    pub source: String,
    /// Its own requests (those after its seed).
    pub own: Spend,
    /// A spawned child's first request: what it read to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn_floor: Option<Spend>,
    /// A spawned child's other requests: its work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<Spend>,
    /// Of its first request, the tokens it shares with its parent's conversation (the expected
    /// cacheable tokens explain computes: the inherited prefix).
    pub inherited_tokens: u64,
    /// Its own requests and its descendants', each once.
    pub subtree: Spend,
    /// The seq of the parent's `tool/result` holding its answer, once recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<u64>,
}

/// The tree with cold children (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counterfactual {
    /// The tree's uncached prompt tokens with cold children.
    pub uncached_tokens: u64,
    /// How many more than it had: the spawned children's first requests' cached tokens.
    pub extra_uncached_tokens: u64,
    /// The tree's cost with cold children (with a price table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// How much more than it cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_cost: Option<f64>,
}

/// The totals of [`TreeExplanation`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeTotals {
    /// Nodes in the tree.
    pub nodes: u64,
    /// Every request of the tree, each once.
    pub all: Spend,
    /// The root's own requests.
    pub root: Spend,
    /// Every other node's own requests: subagent (and fork) spend, its cache-miss part in
    /// `missTokens` / `missCost`.
    pub subagents: Spend,
    /// The spawned children's first requests, summed.
    pub spawn_floors: Spend,
    /// The spawned children's other requests, summed.
    pub work: Spend,
    /// The spawned children's inherited prefixes, summed (read from the cache their parents
    /// wrote, counted in `spawnFloors`, never again in the parents).
    pub inherited_tokens: u64,
    /// The same tree with cold children.
    pub cold_children: Counterfactual,
}

/// The explanation of a tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeExplanation {
    /// The root session's id.
    pub root: String,
    /// The token counter used.
    pub counter: &'static str,
    /// Every node, depth first (as [`Tree::nodes`]).
    pub nodes: Vec<NodeExplanation>,
    /// Totals.
    pub totals: TreeTotals,
}

/// Explains every node of `tree` with `counter` and `settings` and sums them (module docs).
pub fn explain_tree(tree: &Tree, counter: &dyn TokenCounter, settings: &ExplainSettings) -> Result<TreeExplanation> {
    let mut nodes: Vec<NodeExplanation> = Vec::with_capacity(tree.nodes.len());
    let mut extra_cost: Option<f64> = None;
    let mut extra_tokens = 0u64;
    for node in &tree.nodes {
        let e = explain_log_with(&node.log, counter, settings).map_err(|e| e.context(format!("node {}", node.id())))?;
        let seed = node.seed_length();
        let own: Vec<&RequestReport> = e.requests.iter().filter(|r| node.parent.is_none() || r.seq >= seed).collect();
        let mut spend = Spend::default();
        own.iter().for_each(|r| spend.add_request(r));
        let spawned = node.kind() == "spawn";
        let (mut floor, mut work, mut inherited) = (None, None, 0);
        if spawned {
            let mut f = Spend::default();
            let mut w = Spend::default();
            for (k, r) in own.iter().enumerate() {
                if k == 0 {
                    f.add_request(r);
                    inherited = r.expected_cached_tokens.max(r.shared_tokens.min(r.prompt_tokens));
                    extra_tokens += r.cached_tokens;
                    if let Some(c) = &r.cost {
                        // `noCache` is every prompt token at the input price, plus the output.
                        let input_price = if r.prompt_tokens == 0 { 0.0 } else { (c.no_cache - c.output) / r.prompt_tokens as f64 };
                        *extra_cost.get_or_insert(0.0) += r.cached_tokens as f64 * input_price - c.cached;
                    }
                } else {
                    w.add_request(r);
                }
            }
            floor = Some(f);
            work = Some(w);
        }
        let parent = node.parent.map(|p| tree.nodes[p].id().to_string());
        let answered_at = node.parent.and_then(|p| tree.result_seq(p, node.id()));
        nodes.push(NodeExplanation {
            id: node.id().to_string(),
            parent,
            kind: node.kind(),
            call_id: node.header().spawn.as_ref().and_then(|s| s.call_id.clone()),
            depth: node.depth,
            seed_length: seed,
            source: node.source.clone(),
            subtree: spend.clone(),
            own: spend,
            spawn_floor: floor,
            work,
            inherited_tokens: inherited,
            answered_at,
        });
    }
    // Subtrees: children come after their parents, so summing from the last node up adds each
    // node's subtree into its parent's once.
    for i in (1..tree.nodes.len()).rev() {
        if let Some(p) = tree.nodes[i].parent {
            let sub = nodes[i].subtree.clone();
            nodes[p].subtree.add(&sub);
        }
    }
    let mut totals = TreeTotals { nodes: nodes.len() as u64, ..TreeTotals::default() };
    for n in &nodes {
        totals.all.add(&n.own);
        if n.parent.is_none() {
            totals.root.add(&n.own);
        } else {
            totals.subagents.add(&n.own);
        }
        if let Some(f) = &n.spawn_floor {
            totals.spawn_floors.add(f);
        }
        if let Some(w) = &n.work {
            totals.work.add(w);
        }
        totals.inherited_tokens += n.inherited_tokens;
    }
    totals.cold_children = Counterfactual {
        uncached_tokens: totals.all.uncached_tokens + extra_tokens,
        extra_uncached_tokens: extra_tokens,
        cost: totals.all.cost.map(|c| c + extra_cost.unwrap_or(0.0)),
        extra_cost: totals.all.cost.map(|_| extra_cost.unwrap_or(0.0)),
    };
    Ok(TreeExplanation { root: tree.root().id().to_string(), counter: counter.name(), nodes, totals })
}

/// Takes the `tree` option out of the options of `lls_session_explain` and `lls_explain_file`
/// (`{"tree": true, ...}`: explain the tree rooted at the session); returns it and the other
/// options, for [`super::explain_options`].
pub fn take_tree_option(options: Option<&Value>) -> Result<(bool, Option<Value>)> {
    let Some(Value::Object(m)) = options else { return Ok((false, options.cloned())) };
    let mut rest = m.clone();
    let tree = match rest.remove("tree") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(crate::error::Error::invalid("options.tree", "expected true or false")),
    };
    Ok((tree, Some(Value::Object(rest))))
}
