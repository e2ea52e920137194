//! A tree of sessions: a session with the children its agents spawned and the sessions forked
//! from it, and theirs, read from where they are kept (docs/caching.md, "Agent trees").
//!
//! [`Tree::load`] reads a tree from a store: a JSONL log and the files beside it named after it
//! (`STEM.TAG.jsonl`, where children are created), or a session in a PostgreSQL database and the
//! sessions whose parent it is. [`Tree::of_session`] reads the children spawned from a session
//! handle in this process (a tree in memory). [`Tree::verify`] checks every node as `verify`
//! does (every request rebuilt from its own log) and every link: a node's seeded events are its
//! parent's, and a spawned child's parent records it (`agent/spawn`) where the child's seed ends.
//! The explain report over a tree is [`crate::explain::tree`].

use crate::error::{Error, ErrorKind, Result};
use crate::log::event::{types, Event};
use crate::log::load::{read_checked, CheckedLog, SessionHeader};
use crate::request::{verify_events, VerifyReport};
use crate::session::Session;
use crate::store::url::{parse, Location};
use crate::store::{JsonlStore, Store, StoreContents};
use serde::Serialize;
use serde_json::Value;

/// One session of a tree.
pub struct Node {
    /// Its log, read as every reader reads one (refused where an open would cut damage).
    pub log: CheckedLog,
    /// Where it was read from (a file path, a database URL without password, `memory`).
    pub source: String,
    /// The index of its parent in [`Tree::nodes`] (`None` for the root).
    pub parent: Option<usize>,
    /// Its depth (the root is 0).
    pub depth: usize,
}

impl Node {
    /// The session header.
    pub fn header(&self) -> &SessionHeader {
        self.log.header()
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.header().id
    }

    /// How many of its events are its parent's (0 for the root).
    pub fn seed_length(&self) -> u64 {
        self.header().parent.as_ref().map(|(_, n)| *n).unwrap_or(0)
    }

    /// `root`, `spawn` (a child an agent spawned) or `fork`.
    pub fn kind(&self) -> &'static str {
        match (self.parent, &self.header().spawn) {
            (None, _) => "root",
            (Some(_), Some(_)) => "spawn",
            (Some(_), None) => "fork",
        }
    }
}

/// A session and its descendants, the root first, each node followed by its subtree (children
/// in id order).
pub struct Tree {
    /// The nodes, depth first.
    pub nodes: Vec<Node>,
}

/// What [`Tree::verify`] checked: per node, in tree order.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeVerifyReport {
    /// Every node: its id and what verify checked in it.
    pub nodes: Vec<NodeVerify>,
}

/// One node of [`TreeVerifyReport`].
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeVerify {
    /// The session id.
    pub id: String,
    /// Its parent's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// What verify checked (events, requests, compactions).
    #[serde(flatten)]
    pub report: VerifyReport,
}

fn read(mut store: Box<dyn Store>, what: &str) -> Result<(CheckedLog, String)> {
    let describe = store.describe();
    let mut contents = store.load()?;
    if !contents.last_complete {
        contents.records.pop();
    }
    if contents.records.is_empty() {
        return Err(Error::new(ErrorKind::CorruptLog, format!("{describe}: holds no session ({what})")));
    }
    let log = read_checked(&contents).map_err(|e| e.context(describe.clone()))?;
    Ok((log, describe))
}

fn records_of(session: &Session) -> Result<StoreContents> {
    Ok(StoreContents { records: session.records()?.iter().map(|r| r.as_bytes().to_vec()).collect(), last_complete: true })
}

impl Tree {
    /// Reads the tree rooted at the session `location` names: a JSONL file (a path or a `file:`
    /// URL), whose descendants lie beside it, or a `postgres://` URL naming the session
    /// (`?session=ID`), whose descendants are the database's sessions listed by parent. Nothing is
    /// written; a node that cannot be read is an error naming it.
    pub fn load(location: &str) -> Result<Tree> {
        let is_url = location.starts_with("file:") || location.starts_with("postgres://") || location.starts_with("postgresql://");
        let loc = if is_url { parse(location)? } else { Location::File(location.into()) };
        let mut tree = Tree { nodes: Vec::new() };
        match loc {
            Location::File(path) => {
                let (log, source) = read(Box::new(JsonlStore::open_read_only(&path)?), "the root of the tree")?;
                tree.nodes.push(Node { log, source, parent: None, depth: 0 });
                // Every file beside it named after it, read once; linked by their parent ids.
                let mut found = Vec::new();
                for p in crate::store::children_beside(&path)? {
                    let (log, source) = read(Box::new(JsonlStore::open_read_only(&p)?), "a child of the tree")?;
                    found.push(Node { log, source, parent: None, depth: 0 });
                }
                tree.adopt(0, &mut found);
            }
            #[cfg(feature = "postgres")]
            Location::Postgres(pg) => {
                use crate::store::postgres::{PgOptions, PgStore};
                let id = pg.session().ok_or_else(|| Error::invalid("url", "name the root session: ?session=ID"))?.to_string();
                let base = pg.without_session();
                let open = |id: &str| -> Result<Node> {
                    let store = PgStore::open(&base, id, PgOptions { read_only: true, create: false, durability: Default::default() })?;
                    let (log, source) = read(Box::new(store), "a node of the tree")?;
                    Ok(Node { log, source, parent: None, depth: 0 })
                };
                tree.nodes.push(open(&id)?);
                let mut at = 0;
                while at < tree.nodes.len() {
                    let parent_id = tree.nodes[at].id().to_string();
                    let depth = tree.nodes[at].depth + 1;
                    for k in crate::store::postgres::list_sessions(&base, None, None, Some(&parent_id))? {
                        tree.nodes.push(Node { parent: Some(at), depth, ..open(&k.id)? });
                    }
                    at += 1;
                }
                tree.order();
            }
        }
        Ok(tree)
    }

    /// The tree of `root` and the children spawned from its handle in this process, and theirs
    /// ([`Session::children`]): a child still held is read from its session, one dropped since
    /// from its file; a child in memory that nothing holds any more is left out.
    pub fn of_session(root: &Session) -> Result<Tree> {
        let mut tree = Tree { nodes: Vec::new() };
        let log = read_checked(&records_of(root)?)?;
        tree.nodes.push(Node {
            log,
            source: root.file_path().map_or("memory".into(), |p| p.display().to_string()),
            parent: None,
            depth: 0,
        });
        let mut stack: Vec<(usize, Session)> = vec![(0, root.clone())];
        while let Some((at, s)) = stack.pop() {
            for c in s.children() {
                let (log, source, session) = match (c.session, c.path) {
                    (Some(cs), path) => {
                        (read_checked(&records_of(&cs)?)?, path.map_or("memory".into(), |p| p.display().to_string()), Some(cs))
                    }
                    (None, Some(path)) => {
                        let (log, source) = read(Box::new(JsonlStore::open_read_only(&path)?), "a child of the tree")?;
                        (log, source, None)
                    }
                    (None, None) => continue,
                };
                let depth = tree.nodes[at].depth + 1;
                tree.nodes.push(Node { log, source, parent: Some(at), depth });
                if let Some(cs) = session {
                    stack.push((tree.nodes.len() - 1, cs));
                }
            }
        }
        tree.order();
        Ok(tree)
    }

    /// Moves the nodes of `found` whose parent is in the tree (under node `from` or below) into
    /// it, repeatedly, then puts the tree in order.
    fn adopt(&mut self, from: usize, found: &mut Vec<Node>) {
        let mut changed = true;
        while changed {
            changed = false;
            let mut i = 0;
            while i < found.len() {
                let parent = found[i].header().parent.as_ref().map(|(p, _)| p.clone());
                let at = parent.and_then(|p| (from..self.nodes.len()).find(|&k| self.nodes[k].id() == p));
                match at {
                    Some(at) => {
                        let mut n = found.swap_remove(i);
                        n.parent = Some(at);
                        n.depth = self.nodes[at].depth + 1;
                        self.nodes.push(n);
                        changed = true;
                    }
                    None => i += 1,
                }
            }
        }
        self.order();
    }

    /// Puts the nodes depth first, children by id, and renumbers the parent links.
    fn order(&mut self) {
        let n = self.nodes.len();
        let mut kids: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(p) = node.parent {
                kids[p].push(i);
            }
        }
        for k in &mut kids {
            k.sort_by(|a, b| self.nodes[*a].id().cmp(self.nodes[*b].id()));
        }
        let mut order = Vec::with_capacity(n);
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            order.push(i);
            stack.extend(kids[i].iter().rev());
        }
        let mut new_index = vec![0usize; n];
        for (new, old) in order.iter().enumerate() {
            new_index[*old] = new;
        }
        let mut slots: Vec<Option<Node>> = std::mem::take(&mut self.nodes).into_iter().map(Some).collect();
        for old in order {
            let mut node = slots[old].take().expect("each node once");
            node.parent = node.parent.map(|p| new_index[p]);
            self.nodes.push(node);
        }
    }

    /// The root.
    pub fn root(&self) -> &Node {
        &self.nodes[0]
    }

    /// The indexes of the children of node `i`, in id order.
    pub fn children_of(&self, i: usize) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&k| self.nodes[k].parent == Some(i)).collect()
    }

    /// The seq of the `tool/result` in node `parent`'s log that records the answer of child
    /// `child` (by its `child` field), if it records one.
    pub fn result_seq(&self, parent: usize, child: &str) -> Option<u64> {
        self.nodes[parent]
            .log
            .events()
            .iter()
            .find(|e| e.ty == types::TOOL_RESULT && e.data.get("child").and_then(Value::as_str) == Some(child))
            .map(|e| e.seq)
    }

    /// Verifies every node (its log read as every reader reads it, every request it records
    /// rebuilt from it alone) and every link: a node's first `seedLength` events are its
    /// parent's, and the event of a spawned child's parent at that seq is the `agent/spawn` that
    /// names the child. The first failure is the error, its message naming the node.
    pub fn verify(&self) -> Result<TreeVerifyReport> {
        let mut out = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let at = |e: Error| e.context(format!("node {} ({})", node.id(), node.source)).with("session", node.id().to_string());
            let report = verify_events(node.header(), node.log.events()).map_err(at)?;
            let parent = node.parent.map(|p| &self.nodes[p]);
            if let Some(p) = parent {
                check_link(p, node).map_err(at)?;
            }
            out.push(NodeVerify { id: node.id().to_string(), parent: parent.map(|p| p.id().to_string()), report });
        }
        Ok(TreeVerifyReport { nodes: out })
    }
}

/// The events of a seed equal the parent's (type, seq, time, data, surface op); a spawned
/// child's parent records it where the seed ends.
fn check_link(parent: &Node, child: &Node) -> Result<()> {
    let n = child.seed_length() as usize;
    let (pe, ce) = (parent.log.events(), child.log.events());
    let link = |why: String| Error::new(ErrorKind::Reconstruction, why);
    if pe.len() < n {
        return Err(link(format!(
            "it was seeded with {n} events of its parent {}, which holds {} (a parent read before it went on?)",
            parent.id(),
            pe.len()
        )));
    }
    if let Some(k) = (0..n).find(|&k| !same_event(&pe[k], &ce[k])) {
        return Err(link(format!("its seeded event at seq {k} differs from its parent {}'s", parent.id())).with("seq", k as u64));
    }
    if child.header().spawn.is_some() {
        let ok = pe.get(n).is_some_and(|e| e.ty == types::AGENT_SPAWN && e.data.get("child").and_then(Value::as_str) == Some(child.id()));
        if !ok {
            return Err(link(format!(
                "its parent {} does not record it at seq {n} (agent/spawn naming it): it is not the child its header says",
                parent.id()
            ))
            .with("seq", n as u64));
        }
    }
    Ok(())
}

fn same_event(a: &Event, b: &Event) -> bool {
    a.ty == b.ty && a.seq == b.seq && a.time == b.time && a.data == b.data && a.surface_op == b.surface_op && a.sources == b.sources
}
