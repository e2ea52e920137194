//! Replay (issue #17, item 4): a recorded log answers a host's requests; the host's own loop
//! runs offline against it, and the first request that differs fails, named as `explain`
//! names a divergence. A log an open refuses is not replayed: it is refused as `verify` refuses
//! it, naming the same line.

use llmsession::agent::{ProviderErrorOutcome, ToolResultInput};
use llmsession::compaction::{CompactionPolicy, Retained, SummaryOutput, SummaryRequest};
use llmsession::log::TurnEndReason;
use llmsession::prefix::ListenerContext;
use llmsession::replay::Replay;
use llmsession::store::MemoryStore;
use llmsession::{Agent, AgentOptions, Block, CallConfig, CancelToken, ErrorKind, Message, Session, SessionOptions, ToolSchema, Usage};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

mod support {
    pub mod damaged_log;
}
use support::damaged_log::{broken_chain, bytes, index_of, reseal, without};

/// A provider's answer: the reply and its usage, or an error (its message, whether an overflow).
type Answer = Result<(Message, Option<Usage>), (String, bool)>;

/// What answers the host's requests: a scripted provider (recording) or a replay.
enum Provider {
    Scripted,
    Replay(Arc<Mutex<Replay>>),
}

impl Provider {
    /// The answer to a conversation request: `(message, usage)` or a provider error.
    fn conversation(&self, envelope: &str, turn: u64, step: u64) -> Result<Answer, llmsession::Error> {
        match self {
            Provider::Scripted => {
                let n = serde_json::from_str::<Value>(envelope).unwrap()["messages"].as_array().unwrap().len() as u64;
                if turn == 2 && step == 1 {
                    return Ok(Err(("rate limited".into(), false)));
                }
                let usage = Some(Usage { input_tokens: 10, output_tokens: 4, cache_read_tokens: Some(100 * n), ..Default::default() });
                let m = if step == 1 || (turn == 2 && step == 2) {
                    json!({"role":"assistant","content":[{"type":"text","text":format!("Reading (turn {turn}).")},
                           {"type":"tool-call","id":format!("call-{turn}-{step}"),"name":"read","arguments":"{\"path\":\"a.txt\"}"}]})
                } else {
                    json!({"role":"assistant","content":[{"type":"text","text":format!("Done with turn {turn}.")}]})
                };
                Ok(Ok((Message::from_value(&m, "m").unwrap(), usage)))
            }
            Provider::Replay(r) => {
                let a = r.lock().unwrap().answer(envelope.as_bytes())?;
                assert_eq!(a["purpose"], "conversation");
                match a["outcome"].as_str().unwrap() {
                    "response" => {
                        let r = &a["response"];
                        let usage = r.get("usage").map(|u| Usage::from_value(u, "usage").unwrap());
                        Ok(Ok((Message::from_value(&r["message"], "message").unwrap(), usage)))
                    }
                    "error" => Ok(Err((a["error"].as_str().unwrap().to_string(), a["overflow"] == true))),
                    other => panic!("unexpected outcome {other}"),
                }
            }
        }
    }
}

fn summariser(p: Arc<Provider>) -> impl Fn(&SummaryRequest, &CancelToken) -> llmsession::Result<SummaryOutput> {
    move |req: &SummaryRequest, _: &CancelToken| match &*p {
        Provider::Scripted => Ok(SummaryOutput { text: "CHECKPOINT: a.txt was read twice.".into(), ..Default::default() }),
        Provider::Replay(r) => {
            let a = r.lock().unwrap().answer(req.json.as_bytes())?;
            assert_eq!(a["purpose"], "compaction");
            match a["outcome"].as_str().unwrap() {
                "summary" => SummaryOutput::from_value(&a["summary"], "summary"),
                _ => Err(llmsession::Error::new(ErrorKind::Summariser, a["error"].as_str().unwrap_or("failed"))),
            }
        }
    }
}

/// The host: its options, a prefix listener, a tool that reads "files", three turns, one
/// retry after a provider error and a manual compaction.
struct Host {
    system: &'static str,
    file: &'static str,
}

impl Host {
    fn run(&self, session: &Session, provider: Arc<Provider>) -> llmsession::Result<()> {
        let mut opts = AgentOptions::new(CallConfig::new("openai", "gpt-5"));
        opts.system = Some(self.system.into());
        opts.tools =
            ToolSchema::list_from_value(&json!([{"name":"read","description":"Read a file","parameters":{"type":"object"}}]), "t")?;
        let mut a = Agent::new(session, opts)?;
        a.add_prefix_listener(Arc::new(|_: &ListenerContext<'_>, rest: &[Message]| {
            let mut v = vec![Message::user_text("<agents-md>Run the tests.</agents-md>")];
            v.extend_from_slice(rest);
            Ok(v)
        }))?;
        a.set_summariser(Some(Arc::new(summariser(provider.clone()))));
        let c = CancelToken::new();
        for (i, user) in ["Read a.txt.", "Read it again.", "Summarise."].iter().enumerate() {
            if i == 2 {
                let mut p = CompactionPolicy::new(1_000_000);
                p.retained = Retained::Tokens(1);
                a.set_policy(Some(p))?;
                a.compact(None, &c)?;
            }
            a.start_turn(Message::user_text(*user))?;
            loop {
                let r = a.next_request(&c)?;
                match provider.conversation(&r.json, r.turn, r.step)? {
                    Err((msg, overflow)) => match a.report_provider_error(&msg, overflow, &c)? {
                        ProviderErrorOutcome::Recorded | ProviderErrorOutcome::Retry => continue,
                    },
                    Ok((m, usage)) => {
                        let calls: Vec<String> = m.tool_calls().map(|(id, _, _)| id.to_string()).collect();
                        a.record_response(m, usage)?;
                        if calls.is_empty() {
                            break;
                        }
                        for id in calls {
                            a.record_tool_result(ToolResultInput { call_id: id, content: vec![Block::text(self.file)], is_error: false })?;
                        }
                    }
                }
            }
            a.end_turn(TurnEndReason::Completed)?;
        }
        a.dispose()
    }
}

fn records(session: &Session) -> Vec<Vec<u8>> {
    session.records().unwrap().iter().map(|r| r.as_bytes().to_vec()).collect()
}

fn session_with_id(id: &str) -> Session {
    Session::create(Box::new(MemoryStore::new()), SessionOptions { id: Some(id.into()), ..Default::default() }).unwrap()
}

fn recorded() -> (Session, Vec<Vec<u8>>) {
    let s = session_with_id("recorded-session");
    Host { system: "You are careful.", file: "hello from a.txt" }.run(&s, Arc::new(Provider::Scripted)).unwrap();
    let r = records(&s);
    (s, r)
}

#[test]
fn the_host_loop_runs_offline_against_its_recorded_log() {
    let (_, recs) = recorded();
    let replay = Replay::from_records(&recs).unwrap();
    assert_eq!(replay.session_id(), "recorded-session");
    let n = replay.len();
    assert!(n >= 7, "{n} requests");
    let replay = Arc::new(Mutex::new(replay));
    let s = session_with_id("recorded-session");
    Host { system: "You are careful.", file: "hello from a.txt" }.run(&s, Arc::new(Provider::Replay(replay.clone()))).unwrap();
    let r = replay.lock().unwrap();
    assert_eq!(r.answered(), n, "every recorded request was asked for and answered");
    assert_eq!(r.info()["next"], Value::Null);
    // The offline run wrote the same log, event for event (times, and so the chained digests,
    // aside).
    let strip = |recs: &[Vec<u8>]| -> Vec<Value> {
        recs[1..]
            .iter()
            .map(|l| {
                let mut v: Value = serde_json::from_slice(l).unwrap();
                v.as_object_mut().unwrap().remove("time");
                v.as_object_mut().unwrap().remove("chain");
                v
            })
            .collect()
    };
    assert_eq!(strip(&records(&s)), strip(&recs));
    llmsession::request::verify_records(&records(&s)).unwrap();
}

#[test]
fn the_first_request_that_differs_is_named() {
    let (_, recs) = recorded();
    // A changed system prompt: the very first request differs, at system line 1.
    let replay = Arc::new(Mutex::new(Replay::from_records(&recs).unwrap()));
    let s = session_with_id("recorded-session");
    let e = Host { system: "You are careful. Today is Tuesday.", file: "hello from a.txt" }
        .run(&s, Arc::new(Provider::Replay(replay.clone())))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reconstruction);
    assert!(
        e.message().starts_with("request 1 (turn 1 step 1) differs from the recorded one at system line 1 (byte 16)"),
        "{}",
        e.message()
    );
    assert_eq!(e.detail()["component"], "system");
    assert_eq!(e.detail()["line"], 1);
    assert_eq!(e.detail()["request"], "1");
    assert_eq!(replay.lock().unwrap().answered(), 0, "a refused request does not move the replay");

    // A tool that reads another file: the request after the first tool result differs there.
    let replay = Arc::new(Mutex::new(Replay::from_records(&recs).unwrap()));
    let s = session_with_id("recorded-session");
    let e = Host { system: "You are careful.", file: "hello from a.txt, edited" }
        .run(&s, Arc::new(Provider::Replay(replay.clone())))
        .unwrap_err();
    assert!(
        e.message().starts_with("request 2 (turn 1 step 2) differs from the recorded one at history index 2, byte "),
        "{}",
        e.message()
    );
    assert_eq!(e.detail()["component"], "history");
    assert_eq!(e.detail()["index"], 2);
    assert_eq!(replay.lock().unwrap().answered(), 1);

    // Another session id: the cacheable parts are equal, the bookkeeping is not.
    let replay = Arc::new(Mutex::new(Replay::from_records(&recs).unwrap()));
    let s = session_with_id("another-session");
    let e = Host { system: "You are careful.", file: "hello from a.txt" }.run(&s, Arc::new(Provider::Replay(replay))).unwrap_err();
    assert!(e.message().contains("at sessionId (recorded \"recorded-session\", the host's \"another-session\"; open the host's session with the recorded session id)"), "{}", e.message());
    assert_eq!(e.detail()["field"], "sessionId");
}

#[test]
fn more_requests_than_recorded_and_an_unrebuildable_log_are_errors() {
    let (_, recs) = recorded();
    let mut replay = Replay::from_records(&recs).unwrap();
    let s = session_with_id("recorded-session");
    let replay2 = Arc::new(Mutex::new(replay.clone()));
    Host { system: "You are careful.", file: "hello from a.txt" }.run(&s, Arc::new(Provider::Replay(replay2.clone()))).unwrap();
    let e = replay2.lock().unwrap().answer(b"{}").unwrap_err();
    assert!(e.message().contains("has no request after its"), "{}", e.message());
    // Not JSON at all.
    let e = replay.answer(b"not json").unwrap_err();
    assert!(e.message().contains("the host's request is not JSON"), "{}", e.message());
    // A log edited after it was sent cannot be replayed. Edited by hand, it no longer matches its
    // chained digest: the log is refused as verify refuses it.
    let strings: Vec<String> = recs.iter().map(|r| String::from_utf8(r.clone()).unwrap()).collect();
    let k = index_of(&strings, "tool/result", 0);
    let mut edited = strings.clone();
    edited[k] = edited[k].replace("hello", "HELLO");
    let e = Replay::from_records(&bytes(&edited)).unwrap_err();
    assert_eq!((e.kind(), &e.detail()["line"], &e.detail()["chain"]), (ErrorKind::CorruptLog, &json!(k + 1), &json!(true)), "{e}");
    // With the chain recomputed (a deliberate rewrite) it opens, but does not rebuild the
    // request that was sent.
    let e = Replay::from_records(&bytes(&reseal(&edited))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reconstruction);
    assert!(e.message().contains("request 2 (turn 1 step 2)") && e.message().contains("cannot be replayed"), "{}", e.message());
}

/// A replay refuses `damaged` exactly as verify does: `CorruptLog` with the same message and
/// detail, naming `line`. Returns the error.
fn refused_as_verify_refuses(damaged: &[String], line: usize) -> llmsession::Error {
    let recs = bytes(damaged);
    let v = llmsession::request::verify_records(&recs).unwrap_err();
    let e = Replay::from_records(&recs).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptLog, "{e}");
    assert_eq!((v.kind(), v.message(), v.detail()), (e.kind(), e.message(), e.detail()), "replay and verify differ");
    assert_eq!(e.detail()["line"], json!(line), "{e}");
    assert!(e.message().contains(&format!("line {line}: ")), "{e}");
    e
}

#[test]
fn a_log_the_log_rules_refuse_is_not_replayed() {
    let (s, _) = recorded();
    s.append(llmsession::log::NewEvent::new("host/note", json!({"text": "the host was here"}))).unwrap();
    let mut a = Agent::new(&s, AgentOptions::new(CallConfig::new("openai", "gpt-5"))).unwrap();
    let c = CancelToken::new();
    a.start_turn(Message::user_text("one more")).unwrap();
    a.next_request(&c).unwrap();
    a.record_response(Message::from_value(&json!({"role":"assistant","content":[{"type":"text","text":"ok"}]}), "m").unwrap(), None)
        .unwrap();
    a.end_turn(TurnEndReason::Completed).unwrap();
    a.dispose().unwrap();
    let recs: Vec<String> = s.records().unwrap().iter().map(|r| r.to_string()).collect();
    Replay::from_records(&bytes(&recs)).unwrap();

    // One assistant/message line removed: the next record does not follow the chain.
    let k = index_of(&recs, "assistant/message", 0);
    let e = refused_as_verify_refuses(&without(&recs, k), k + 1);
    assert_eq!(e.detail()["chain"], true, "{e}");
    // The same with the chain recomputed: the seq gap, at the same line.
    let e = refused_as_verify_refuses(&reseal(&without(&recs, k)), k + 1);
    assert!(e.message().contains(&format!("expected {} (seqs are contiguous from 0), got {}", k - 1, k)), "{e}");
    // One host event removed, the chain recomputed: the missing seq.
    let k = index_of(&recs, "host/note", 0);
    let e = refused_as_verify_refuses(&reseal(&without(&recs, k)), k + 1);
    assert!(e.message().contains(&format!("seq: expected {} (seqs are contiguous from 0), got {}", k - 1, k)), "{e}");
    // A chain value changed.
    let k = index_of(&recs, "step/end", 1);
    let e = refused_as_verify_refuses(&broken_chain(&recs, k), k + 1);
    assert!(e.message().contains("the chained digest does not match"), "{e}");
}

#[test]
fn a_turn_that_ended_at_the_output_limit_says_so_in_its_answer() {
    let s = session_with_id("limit");
    let mut a = Agent::new(&s, AgentOptions::new(CallConfig::new("openai", "gpt-5"))).unwrap();
    let c = CancelToken::new();
    for (user, reason) in [("one", TurnEndReason::MaxTokens), ("two", TurnEndReason::Completed)] {
        a.start_turn(Message::user_text(user)).unwrap();
        a.next_request(&c).unwrap();
        a.record_response(Message::from_value(&json!({"role":"assistant","content":[{"type":"text","text":"cut"}]}), "m").unwrap(), None)
            .unwrap();
        a.end_turn(reason).unwrap();
    }
    let replay = Replay::from_records(&records(&s)).unwrap();
    let mut r = replay.clone();
    // Rebuild the host's requests from the log itself: the recorded envelopes.
    let (header, events) = llmsession::log::load::parse_records(&records(&s)).unwrap();
    let mut log = llmsession::log::Log::new();
    let mut answers = Vec::new();
    for ev in &events {
        if ev.ty == "step/start" {
            let h = log.state().headers.current().cloned().unwrap();
            let p = llmsession::request::PrefixBytes::of(h.message_prefix.as_ref());
            let body = llmsession::request::conversation_envelope(
                &log,
                &h,
                &p,
                header.session_id_at(ev.seq),
                ev.data["turn"].as_u64().unwrap(),
                ev.data["step"].as_u64().unwrap(),
            );
            answers.push(r.answer(&body).unwrap());
        }
        log.append(ev).unwrap();
    }
    assert_eq!(answers[0]["response"]["finishReason"], "max-tokens");
    assert!(answers[1]["response"].get("finishReason").is_none());
    assert_eq!(r.info(), json!({"sessionId":"limit","requests":2,"answered":2}));
    assert_eq!(replay.info()["next"], "1");
}
