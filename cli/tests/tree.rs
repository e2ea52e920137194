//! `llmsession tree` and `explain --tree` on a tree of JSONL logs: a lead with two children
//! spawned from two calls of one message, one child with a child of its own.

use llmsession::agent::SpawnOptions;
use llmsession::explain::tree::explain_tree;
use llmsession::explain::ExplainSettings;
use llmsession::log::TurnEndReason;
use llmsession::prices::PriceTable;
use llmsession::tokens::Estimator;
use llmsession::tree::Tree;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, Message, Role, Session, SessionOptions, Usage};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

#[path = "../../tests/support/damaged_log.rs"]
mod damaged_log;

fn usage(input: u64, cached: u64) -> Option<Usage> {
    Some(Usage { input_tokens: input, output_tokens: 5, cache_read_tokens: Some(cached), ..Default::default() })
}

fn answer(a: &mut Agent, text: &str, u: Option<Usage>) {
    a.next_request(&CancelToken::new()).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![Block::text(text)]), u).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
}

/// lead.jsonl, lead.c1.jsonl, lead.c2.jsonl, lead.c1.g1.jsonl; the provider's usage made up:
/// each child reads its parent's prompt from the cache.
fn write_tree(dir: &Path) -> String {
    let path = dir.join("lead.jsonl");
    let (lead, _) = Session::open_jsonl(&path, SessionOptions { id: Some("lead".into()), ..Default::default() }).unwrap();
    let mut o = AgentOptions::new(CallConfig::new("anthropic", "claude-x"));
    o.system = Some("You lead.".into());
    let mut a = Agent::new(&lead, o).unwrap();
    let c = CancelToken::new();
    a.start_turn(Message::user_text("Fix the two bugs.")).unwrap();
    a.next_request(&c).unwrap();
    let calls = vec![Block::tool_call("c1", "task", "{\"what\":\"bug one\"}"), Block::tool_call("c2", "task", "{\"what\":\"bug two\"}")];
    a.record_response(Message::new(Role::Assistant, calls), usage(2000, 0)).unwrap();
    let mut k1 = a.spawn(SpawnOptions::new(Some("c1"), Message::user_text("Fix bug one.")), None).unwrap();
    let mut k2 = a.spawn(SpawnOptions::new(Some("c2"), Message::user_text("Fix bug two.")), None).unwrap();
    // The first child reads its parent's 2,000 tokens; it spawns a child of its own.
    k1.next_request(&c).unwrap();
    k1.record_response(Message::new(Role::Assistant, vec![Block::tool_call("g1", "task", "{}")]), usage(100, 2000)).unwrap();
    let mut g = k1.spawn(SpawnOptions::new(Some("g1"), Message::user_text("Look deeper.")), None).unwrap();
    answer(&mut g, "Deep answer.", usage(50, 2100));
    k1.finish_child(g.session()).unwrap();
    answer(&mut k1, "Bug one fixed.", usage(60, 2150));
    answer(&mut k2, "Bug two fixed.", usage(120, 1900));
    a.finish_child(k2.session()).unwrap();
    a.finish_child(k1.session()).unwrap();
    a.next_request(&c).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![Block::text("Both fixed.")]), usage(300, 2000)).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    path.display().to_string()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llmsession")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn tree_prints_and_verifies_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let lead = write_tree(dir.path());
    let (code, out, err) = run(&["tree", &lead]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("lead  ("), "{out}");
    assert!(lines[1].starts_with("├─ lead.c1  spawned for c1 at seq "), "{out}");
    assert!(lines[1].contains("answered at parent seq"), "{out}");
    assert!(lines[2].starts_with("│  └─ lead.c1.g1  spawned for g1 at seq "), "{out}");
    assert!(lines[3].starts_with("└─ lead.c2  spawned for c2 at seq "), "{out}");
    assert!(lines[4].starts_with("ok: 4 sessions verified"), "{out}");
    let (code, out, _) = run(&["tree", &lead, "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["root"], "lead");
    let ids: Vec<&str> = v["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["lead", "lead.c1", "lead.c1.g1", "lead.c2"]);
    assert_eq!(v["nodes"][2]["parent"], "lead.c1");
    assert_eq!(v["nodes"][2]["callId"], "g1");
    assert_eq!(v["nodes"][1]["kind"], "spawn");
    assert!(v["nodes"][3]["verify"]["requests"].as_u64().unwrap() >= 2);

    // A child whose seed no longer matches its parent (rewritten, its chain recomputed): exit 3
    // naming the node.
    let child = dir.path().join("lead.c2.jsonl");
    let records: Vec<String> = std::fs::read_to_string(&child).unwrap().lines().map(str::to_string).collect();
    let i = damaged_log::index_of(&records, "user/message", 0);
    let mut forged = records.clone();
    forged[i] = forged[i].replace("Fix the two bugs.", "Fix three bugs.");
    std::fs::write(&child, damaged_log::jsonl(&damaged_log::reseal(&forged))).unwrap();
    let (code, _, err) = run(&["tree", &lead]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("node lead.c2"), "{err}");
}

#[test]
fn explain_tree_counts_the_inherited_prefix_once() {
    let dir = tempfile::tempdir().unwrap();
    let lead = write_tree(dir.path());
    let prices = PriceTable::from_value(&json!({"anthropic": {"input": 3, "cachedInput": 0.3, "output": 15}})).unwrap();
    let settings = ExplainSettings { prices: Some(prices), ..Default::default() };
    let tree = Tree::load(&lead).unwrap();
    let ex = explain_tree(&tree, &Estimator, &settings).unwrap();
    let node = |id: &str| ex.nodes.iter().find(|n| n.id == id).unwrap();
    // The lead's own requests: 2 (its calls, then its answer); each child's first request is
    // its spawn floor, read from the cache its parent wrote.
    assert_eq!(node("lead").own.requests, 2);
    assert_eq!(node("lead").own.prompt_tokens, 2000 + 2300);
    let f = node("lead.c1").spawn_floor.clone().unwrap();
    assert_eq!((f.prompt_tokens, f.cached_tokens, f.uncached_tokens), (2100, 2000, 100));
    assert_eq!(node("lead.c1").work.as_ref().unwrap().requests, 1);
    assert_eq!(node("lead.c1.g1").spawn_floor.as_ref().unwrap().cached_tokens, 2100);
    assert!(node("lead.c1").inherited_tokens > 0);
    // The subtree of c1 holds its own requests and g1's, each once.
    assert_eq!(node("lead.c1").subtree.requests, node("lead.c1").own.requests + node("lead.c1.g1").own.requests);
    // The tree: every request once (2 + 2 + 1 + 1).
    let t = &ex.totals;
    assert_eq!(t.all.requests, 6);
    assert_eq!(t.subagents.requests, 4);
    assert_eq!(t.spawn_floors.requests, 3);
    assert_eq!(t.spawn_floors.cached_tokens, 2000 + 2100 + 1900);
    // Cold children: their first requests' cached tokens billed as input.
    assert_eq!(t.cold_children.extra_uncached_tokens, 6000);
    let extra = t.cold_children.extra_cost.unwrap();
    assert!((extra - 6000.0 * (3.0 - 0.3) / 1e6).abs() < 1e-9, "{extra}");
    assert!(t.subagents.cost.unwrap() > 0.0 && t.subagents.miss_cost.is_some());

    let (code, out, err) = run(&["explain", &lead, "--tree"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("tree lead  (4 sessions; tokens: estimate)"), "{out}");
    assert!(out.contains("  lead.c1.g1 [spawn]"), "{out}");
    assert!(out.contains("with cold children: "), "{out}");
    let (code, out, _) = run(&["explain", &lead, "--tree", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["totals"]["all"]["requests"], 6);
    assert_eq!(v["nodes"][1]["spawnFloor"]["cachedTokens"], 2000);
    // --tree and --step do not go together.
    let (code, _, _) = run(&["explain", &lead, "--tree", "--step", "1"]);
    assert_eq!(code, 2);
}

#[test]
fn sessions_beside_a_file_list_by_parent() {
    let dir = tempfile::tempdir().unwrap();
    let lead = write_tree(dir.path());
    let kids = llmsession::store::url::list_sessions(&format!("file:{lead}"), None, None, Some("lead")).unwrap();
    let ids: Vec<&str> = kids.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(ids, ["lead.c1", "lead.c2"]);
    let p = kids[0].parent.as_ref().unwrap();
    assert!(p.spawned);
    assert_eq!(p.call_id.as_deref(), Some("c1"));
    let v = serde_json::to_value(&kids[0]).unwrap();
    assert_eq!(v["parent"]["callId"], "c1");
    assert_eq!(v["parent"]["spawned"], true);
    let grand = llmsession::store::url::list_sessions(&format!("file:{lead}"), None, None, Some("lead.c1")).unwrap();
    assert_eq!(grand.len(), 1);
    assert_eq!(grand[0].id, "lead.c1.g1");
}
