//! `explain` on hand-made logs, one per cause: each names the component where the request
//! parts from the one before and the event that caused it (issue #17, item 3). The logs are
//! made through the public API (so that every digest is real), then written as JSONL and read
//! back, as `llmsession explain LOG` reads them; the `edit` log is a written log changed by hand
//! with its chain recomputed. A log changed without that, or one that breaks the log rules, is
//! not explained: explain refuses it as `verify` does, naming the same line.

use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::explain::{explain_records, Cause, Component, Explanation, Kind, RequestReport};
use llmsession::log::NewEvent;
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::request::verify_records;
use llmsession::tokens::Estimator;
use llmsession::{Agent, Block, CancelToken, ErrorKind, Message, Role, Session, ToolSchema, Usage};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

mod support {
    pub mod damaged_log;
    pub mod explain_log;
}
use support::damaged_log::{broken_chain, bytes, index_of, reseal, without};
use support::explain_log::{options, turn, usage};

/// A prefix listener whose text can be changed between instances.
fn listener(a: &mut Agent, text: Arc<Mutex<String>>) {
    a.add_prefix_listener(Arc::new(move |_: &ListenerContext<'_>, rest: &[Message]| {
        let mut v = vec![Message::user_text(&*text.lock().unwrap())];
        v.extend_from_slice(rest);
        Ok(v)
    }))
    .unwrap();
}

fn summariser(a: &mut Agent) {
    a.set_summariser(Some(Arc::new(|_: &SummaryRequest, _: &CancelToken| {
        Ok(SummaryOutput {
            text: "CHECKPOINT".into(),
            usage: Some(Usage { input_tokens: 40, output_tokens: 5, cache_read_tokens: Some(900), ..Default::default() }),
            ..Default::default()
        })
    })));
}

fn records(session: &Session) -> Vec<Vec<u8>> {
    session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

fn explain(session: &Session) -> Explanation {
    explain_records(&records(session), &Estimator).unwrap()
}

fn req<'a>(ex: &'a Explanation, id: &str) -> &'a RequestReport {
    ex.request(id).unwrap_or_else(|| panic!("no request {id}"))
}

fn div(r: &RequestReport) -> (&Component, Cause, Option<u64>) {
    let d = r.divergence.as_ref().unwrap_or_else(|| panic!("request {} does not diverge: {r:?}", r.id));
    (&d.component, d.event, d.event_seq)
}

fn seq_of(session: &Session, ty: &str, nth: usize) -> u64 {
    let recs = records(session);
    let seqs: Vec<u64> = recs[1..]
        .iter()
        .map(|r| serde_json::from_slice::<Value>(r).unwrap())
        .filter(|v| v["type"] == ty)
        .map(|v| v["seq"].as_u64().unwrap())
        .collect();
    seqs[nth]
}

#[test]
fn growth_extends_and_expects_the_previous_prompt() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.\nWork in small steps.")).unwrap();
    listener(&mut a, Arc::new(Mutex::new("<skills>review</skills>".into())));
    turn(&mut a, "first", 1000);
    turn(&mut a, "second", 1300);
    let ex = explain(&s);
    assert_eq!(ex.requests.len(), 4);
    let first = req(&ex, "1");
    assert!(first.compared_with.is_none() && first.divergence.is_none());
    assert_eq!((first.expected_cached_tokens, first.cause), (0, Cause::Growth));
    for (id, prev_prompt) in [("2", 1000), ("3", 1100), ("4", 1300)] {
        let r = req(&ex, id);
        assert!(r.extends && r.divergence.is_none(), "{r:?}");
        // It extends the previous request whole: the previous reported prompt is cacheable.
        assert_eq!(r.expected_cached_tokens, prev_prompt, "{id}");
        assert!(r.shared_bytes > 0 && r.shared_bytes < r.bytes && r.shared_tokens < r.tokens);
    }
    assert_eq!((req(&ex, "1").cached_tokens, req(&ex, "2").cached_tokens), (500, 1000));
    // Requests 2 and 4 read all the earlier request sent: only new content is uncached.
    assert_eq!(charges(req(&ex, "2")), vec![(Cause::Growth, 100)]);
    assert_eq!(charges(req(&ex, "4")), vec![(Cause::Growth, 100)]);
    // Request 3 (1300 prompt tokens) extends request 2 (1100) but the provider read only 650,
    // seconds later and far above the minimum: 200 new, 450 the provider lost.
    let r = req(&ex, "3");
    assert_eq!(charges(r), vec![(Cause::Growth, 200), (Cause::Unexplained, 450)]);
    assert_eq!(r.cause, Cause::Unexplained);
    // The first request is all new content.
    assert_eq!(charges(req(&ex, "1")), vec![(Cause::Growth, 500)]);
    let total: u64 = ex.totals.spend.iter().map(|(_, n)| n).sum();
    assert_eq!(total, ex.totals.prompt_tokens - ex.totals.cached_tokens);
    assert_eq!(ex.totals.spend[0], ("growth".into(), 500 + 100 + 200 + 100));
}

/// A request's charges, `(cause, tokens)`, checking they sum to its uncached tokens.
fn charges(r: &RequestReport) -> Vec<(Cause, u64)> {
    let v: Vec<(Cause, u64)> = r.causes.iter().map(|c| (c.cause, c.tokens)).collect();
    assert_eq!(v.iter().map(|c| c.1).sum::<u64>(), r.uncached_tokens, "{r:?}");
    v
}

fn charged(ex: &Explanation, cause: Cause) -> u64 {
    ex.requests.iter().flat_map(|r| r.causes.iter()).filter(|c| c.cause == cause).map(|c| c.tokens).sum()
}

#[test]
fn header_changes_name_the_config_field_the_system_line_and_the_tool() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.\nWork in small steps.\nToday is Monday.")).unwrap();
    turn(&mut a, "first", 1000);
    // A timestamp-like line changes: system line 3.
    a.set_options(options("gpt-5", "You are careful.\nWork in small steps.\nToday is Tuesday.")).unwrap();
    turn(&mut a, "second", 1200);
    // A tool's schema changes.
    let mut o = options("gpt-5", "You are careful.\nWork in small steps.\nToday is Tuesday.");
    o.tools[1] =
        ToolSchema::list_from_value(&json!([{"name":"bash","description":"Run a shell command","parameters":{"type":"object"}}]), "t")
            .unwrap()
            .remove(0);
    a.set_options(o.clone()).unwrap();
    turn(&mut a, "third", 1400);
    // The model changes.
    let mut o2 = o.clone();
    o2.config.model = "gpt-5-mini".into();
    a.set_options(o2).unwrap();
    turn(&mut a, "fourth", 1600);
    let ex = explain(&s);

    let r = req(&ex, "3");
    let (c, cause, seq) = div(r);
    assert_eq!(c, &Component::System { line: 3, offset: "You are careful.\nWork in small steps.\nToday is ".len() });
    assert_eq!(cause, Cause::HeaderChange);
    assert_eq!(seq, Some(seq_of(&s, "request/header", 1)));
    assert_eq!(r.cause, Cause::HeaderChange);
    assert_eq!(r.header.as_deref(), Some("change"));
    assert_eq!(r.shared_messages, 0);
    assert!(r.shared_bytes > 0, "the system prompt's first lines are shared");

    let (c, cause, seq) = div(req(&ex, "5"));
    assert_eq!(c, &Component::Tool { index: 1, name: "bash".into(), change: "changed".into() });
    assert_eq!((cause, seq), (Cause::HeaderChange, Some(seq_of(&s, "request/header", 2))));

    let r = req(&ex, "7");
    let (c, cause, _) = div(r);
    assert_eq!(c, &Component::Config { field: "model".into() });
    assert_eq!(cause, Cause::HeaderChange);
    assert_eq!((r.shared_bytes, r.shared_tokens, r.expected_cached_tokens), (0, 0, 0));
    // The spend of those three requests is charged to header changes.
    let hc = charged(&ex, Cause::HeaderChange);
    let of = |id: &str| charges(req(&ex, id)).iter().filter(|c| c.0 == Cause::HeaderChange).map(|c| c.1).sum::<u64>();
    assert!(of("3") > 0 && of("5") > 0 && of("7") > 0);
    assert_eq!(hc, of("3") + of("5") + of("7"));
    assert_eq!(ex.totals.spend.iter().find(|(k, _)| k == "header-change").unwrap().1, hc);
    // The model change shares nothing: all of request 7's earlier content is charged to it,
    // and only what it adds is growth.
    let r7 = req(&ex, "7");
    assert_eq!(charges(r7), vec![(Cause::Growth, r7.prompt_tokens - req(&ex, "6").prompt_tokens), (Cause::HeaderChange, of("7"))]);
}

#[test]
fn resume_names_the_drifted_prefix_message() {
    let s = Session::in_memory();
    let text = Arc::new(Mutex::new("<workspace>\ngit status: clean\n</workspace>".to_string()));
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    listener(&mut a, text.clone());
    turn(&mut a, "first", 1000);
    a.dispose().unwrap();
    // Same prefix on resume: the new instance extends the old one's last request.
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    listener(&mut a, text.clone());
    turn(&mut a, "second", 1200);
    a.dispose().unwrap();
    // The workspace baseline drifted: the next instance's prefix differs.
    *text.lock().unwrap() = "<workspace>\ngit status: 2 files changed\n</workspace>".into();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    listener(&mut a, text);
    turn(&mut a, "third", 1400);
    let ex = explain(&s);
    let r = req(&ex, "3");
    assert!(r.extends && r.divergence.is_none() && r.cause != Cause::Resume, "{r:?}");
    assert_eq!(r.header.as_deref(), Some("resume"));
    let r = req(&ex, "5");
    let (c, cause, seq) = div(r);
    assert_eq!(c, &Component::Prefix { index: 0, offset: r#"{"role":"user","content":[{"text":"<workspace>\ngit status: "#.len() });
    assert_eq!((cause, seq), (Cause::Resume, Some(seq_of(&s, "request/header", 2))));
    assert_eq!(r.cause, Cause::Resume);
    assert_eq!(r.instance, 3);
    assert_eq!(r.shared_messages, 0);
}

fn compaction_session() -> (Session, Agent) {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    listener(&mut a, Arc::new(Mutex::new("<skills>review</skills>".into())));
    summariser(&mut a);
    (s, a)
}

#[test]
fn compaction_names_the_checkpoint_and_the_summarisation_request() {
    let (s, mut a) = compaction_session();
    turn(&mut a, "first", 1000);
    let mut p = CompactionPolicy::new(100_000);
    p.retained = Retained::Tokens(1);
    a.set_policy(Some(p)).unwrap();
    a.compact(None, &CancelToken::new()).unwrap();
    turn(&mut a, "second", 700);
    let ex = explain(&s);
    // The summarisation request replays the last routed request: it shares all of it but its
    // last message, and parts where the routed request had that message and it has the
    // instruction.
    let c1 = req(&ex, "c1");
    assert_eq!(c1.kind, Kind::Compaction);
    assert_eq!(c1.compared_with.as_deref(), Some("2"));
    assert_eq!(c1.cause, Cause::Compaction);
    assert_eq!(c1.prompt_tokens, 940, "the summariser's usage");
    let routed = req(&ex, "2");
    assert!(c1.shared_bytes > 0 && c1.shared_messages == routed.messages, "{c1:?}");
    // The next conversation request: the checkpoint at history index 0.
    let r = req(&ex, "3");
    let (c, cause, seq) = div(r);
    assert!(matches!(c, Component::History { index: 0, .. }), "{c:?}");
    assert_eq!((cause, seq), (Cause::Compaction, Some(seq_of(&s, "compaction/start", 0))));
    assert_eq!(r.cause, Cause::Compaction);
    assert_eq!(r.compactions_before, 1);
    // What stays cached is the system prompt, the tools and the session prefix.
    assert_eq!(r.shared_messages, 1);
    // Only a part is shared: the expected figure is the shared tokens in the provider's tokens
    // (scaled by an earlier request's reported-to-counted ratio), not a whole earlier prompt.
    assert!(r.expected_cached_tokens > r.shared_tokens, "{r:?}");
    assert!(!r.extends);
    // The summarisation request's tokens are all compaction; the next request's are split.
    assert_eq!(charges(c1), vec![(Cause::Compaction, c1.uncached_tokens)]);
    charges(r);
    let spent: u64 = ex.totals.spend.iter().find(|(k, _)| k == "compaction").unwrap().1;
    assert_eq!(spent, charged(&ex, Cause::Compaction));
    assert!(spent >= c1.uncached_tokens);
}

#[test]
fn summarisation_with_another_target_names_the_model() {
    let (s, mut a) = compaction_session();
    turn(&mut a, "first", 1000);
    let mut p = CompactionPolicy::new(100_000);
    p.retained = Retained::Tokens(1);
    p.summary_provider = Some("openai".into());
    p.summary_model = Some("gpt-5-nano".into());
    a.set_policy(Some(p)).unwrap();
    a.compact(None, &CancelToken::new()).unwrap();
    let ex = explain(&s);
    let c1 = req(&ex, "c1");
    let (c, cause, _) = div(c1);
    assert_eq!((c, cause), (&Component::Config { field: "model".into() }, Cause::Compaction));
    assert_eq!(c1.shared_bytes, 0);
}

#[test]
fn overflow_retry_is_charged_to_its_own_cause() {
    let (s, mut a) = compaction_session();
    let mut p = CompactionPolicy::new(100_000);
    p.retained = Retained::Tokens(1);
    a.set_policy(Some(p)).unwrap();
    turn(&mut a, "first", 1000);
    let c = CancelToken::new();
    a.start_turn(Message::user_text("second")).unwrap();
    a.next_request(&c).unwrap();
    let out = a.report_provider_error("prompt is too long", true, &c).unwrap();
    assert_eq!(out, llmsession::agent::ProviderErrorOutcome::Retry);
    a.next_request(&c).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![Block::text("ok")]), usage(600, 300)).unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    let ex = explain(&s);
    let retry = req(&ex, "4");
    assert_eq!(retry.cause, Cause::RetryAfterOverflow);
    let (c, cause, _) = div(retry);
    assert!(matches!(c, Component::History { index: 0, .. }), "{c:?}");
    assert_eq!(cause, Cause::Compaction);
    let spent = ex.totals.spend.iter().find(|(k, _)| k == "retry-after-overflow").unwrap().1;
    assert_eq!(spent, 300);
    assert_eq!(req(&ex, "c1").cause, Cause::Compaction);
}

#[test]
fn an_edited_log_names_the_request_it_no_longer_rebuilds() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1000);
    turn(&mut a, "second", 1200);
    let mut recs = records(&s);
    // Change the second tool result's text, as a hand edit of the file would.
    let (k, _) =
        recs.iter().enumerate().filter(|(_, r)| serde_json::from_slice::<Value>(r).unwrap()["type"] == "tool/result").nth(1).unwrap();
    let text = String::from_utf8(recs[k].clone()).unwrap().replace("file contents", "file content!");
    recs[k] = text.into_bytes();
    // Changed by hand, the record no longer matches its chained digest: explain refuses the log
    // as verify does.
    let e = explain_records(&recs, &Estimator).unwrap_err();
    assert_eq!((e.kind(), &e.detail()["line"], &e.detail()["chain"]), (ErrorKind::CorruptLog, &json!(k + 1), &json!(true)), "{e}");
    // With the chain recomputed (a deliberate rewrite) the log opens, and explain names the
    // request it no longer rebuilds.
    let strings: Vec<String> = recs.iter().map(|r| String::from_utf8(r.clone()).unwrap()).collect();
    let recs = bytes(&reseal(&strings));
    let edited_seq = serde_json::from_slice::<Value>(&recs[k]).unwrap()["seq"].as_u64().unwrap();
    let ex = explain_records(&recs, &Estimator).unwrap();
    assert!(req(&ex, "3").rebuilt);
    let r = req(&ex, "4");
    assert!(!r.rebuilt);
    assert_eq!(r.cause, Cause::Edit);
    let (c, cause, _) = div(r);
    assert_eq!(cause, Cause::Edit);
    // The first history entry logged after the last request that still rebuilds: the edited
    // result is at or after it.
    let Component::History { index, .. } = c else { panic!("{c:?}") };
    let entry_seqs: Vec<u64> = {
        let (_, events) = llmsession::log::load::parse_records(&recs).unwrap();
        let log = llmsession::log::Log::replay(events.iter().take_while(|e| e.seq < r.seq)).unwrap();
        log.history().seqs()
    };
    assert!(entry_seqs[*index] <= edited_seq && entry_seqs[*index] > req(&ex, "3").seq, "{index} {entry_seqs:?}");
    assert_eq!(ex.totals.not_rebuilt, 1);
}

/// The stored records of a session with two turns and a host event between them.
fn two_turns_and_a_host_event() -> Vec<String> {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1000);
    s.append(NewEvent::new("host/note", json!({"text": "the host was here"}))).unwrap();
    turn(&mut a, "second", 1200);
    s.records().unwrap().iter().map(|r| r.to_string()).collect()
}

/// explain refuses `damaged` exactly as verify does: `CorruptLog` with the same message and
/// detail, naming `line`. Returns the error.
fn refused_as_verify_refuses(damaged: &[String], line: usize) -> llmsession::Error {
    let recs = bytes(damaged);
    let v = verify_records(&recs).unwrap_err();
    let e = explain_records(&recs, &Estimator).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{e}");
    assert_eq!((v.kind(), v.message(), v.detail()), (e.kind(), e.message(), e.detail()), "explain and verify differ");
    assert_eq!(e.detail()["line"], json!(line), "{e}");
    assert!(e.message().contains(&format!("line {line}: ")), "{e}");
    e
}

#[test]
fn a_log_without_one_assistant_message_is_refused_at_its_line() {
    let recs = two_turns_and_a_host_event();
    let k = index_of(&recs, "assistant/message", 0);
    // The record after the removed one no longer follows its chain: line k + 1 now holds it.
    let e = refused_as_verify_refuses(&without(&recs, k), k + 1);
    assert_eq!(e.detail()["chain"], true, "{e}");
    // With the chain recomputed, the log rules refuse it at the same line: a seq gap.
    let e = refused_as_verify_refuses(&reseal(&without(&recs, k)), k + 1);
    assert!(e.message().contains(&format!("expected {} (seqs are contiguous from 0), got {}", k - 1, k)), "{e}");
}

#[test]
fn a_log_without_one_host_event_is_refused_at_the_missing_seq() {
    let recs = two_turns_and_a_host_event();
    let k = index_of(&recs, "host/note", 0);
    let missing = k as u64 - 1;
    let e = refused_as_verify_refuses(&reseal(&without(&recs, k)), k + 1);
    assert!(e.message().contains(&format!("seq: expected {missing} (seqs are contiguous from 0), got {}", missing + 1)), "{e}");
    assert_eq!(e.detail()["seq"], json!(missing + 1), "{e}");
}

#[test]
fn a_broken_chain_value_is_refused_at_its_line() {
    let recs = two_turns_and_a_host_event();
    let k = index_of(&recs, "tool/result", 1);
    let e = refused_as_verify_refuses(&broken_chain(&recs, k), k + 1);
    assert!(e.message().contains("the chained digest does not match"), "{e}");
}

#[test]
fn damage_an_open_would_cut_from_the_last_turn_is_refused() {
    let s = Session::in_memory();
    let mut a = Agent::new(&s, options("gpt-5", "You are careful.")).unwrap();
    turn(&mut a, "first", 1000);
    let c = CancelToken::new();
    a.start_turn(Message::user_text("second")).unwrap();
    a.next_request(&c).unwrap();
    a.record_response(Message::new(Role::Assistant, vec![Block::text("cut short")]), None).unwrap();
    let recs: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    // The unfinished turn loses its step/start: an open would cut the turn from there (a crash
    // leaves such a tail); a reader refuses it instead.
    let k = index_of(&recs, "step/start", 2);
    let e = refused_as_verify_refuses(&reseal(&without(&recs, k)), k + 1);
    assert!(
        e.message().contains(&format!("opening the log for writing would cut {} records from line {}", recs.len() - 1 - k, k + 1)),
        "{e}"
    );
    // The log up to the damage explains.
    let ex = explain_records(&bytes(&recs[..k]), &Estimator).unwrap();
    assert_eq!(ex.requests.len(), 2);
}
