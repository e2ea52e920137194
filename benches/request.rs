//! Request build in steady state, and compaction bookkeeping (docs/performance.md).
//!
//! `request_build/<N>` at N history messages, side by side in one run:
//! - `step`: record a response and its tool result (two messages), then `next_request`;
//! - `next_request`: the same, timing only `next_request`;
//! - `envelope`: `request::conversation_envelope` on a fixed log (the bytes alone: no digest,
//!   no `step/start`);
//! - `memcpy`: copying the same number of bytes into a fresh buffer;
//! - `serde_rebuild`: re-serialising the whole history (`Vec<Message>`) with serde_json.
//!
//! The history grows by two messages per step; a fixture is rebuilt (untimed) once it has
//! grown by a tenth (at least 10 messages), so every sample measures a history of N..1.1N.
//!
//! `compaction/<N>`: one `next_request` against the bookkeeping a compaction gate does after
//! one more exchange (incremental meter, region selection, summarisation request build and its
//! digest), and a cold meter (every message counted).
//!
//! `body/<renderer>/<N>`: the provider body of the one-way hot path (`Agent::set_renderer`),
//! side by side with what a host would write without the library:
//! - `next_body`: `Agent::next_body` in the same steady state as `next_request` above (the
//!   exchange recorded untimed with `record_response`);
//! - `body_step`: a full step: `record_body` of the provider's raw reply, `record_tool_result`,
//!   then `next_body`;
//! - `naive_body` (openai only): the host keeps the chat-completions body as typed serde
//!   structs, pushes the two new messages and serialises the whole body with
//!   `serde_json::to_vec`;
//! - `naive_step` (openai only): the same, the reply parsed with serde_json into the typed
//!   message first;
//! - `body_memcpy`: copying as many bytes as the body into a fresh buffer.
//!
//! The naive body must be byte-identical to `next_body`'s for the same history: checked once
//! per size, outside the timing, in every mode (a difference fails the bench and `cargo test`).
//! openai at 100, 1k and 10k messages; the other renderers at 1k.
//!
//! Run by `cargo test` (criterion's test mode: each benchmark once, small sizes only).

#[path = "fixture/mod.rs"]
mod fixture;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fixture::Fixture;
use llmsession::compaction::{select_region, CompactionPolicy, INSTRUCTION};
use llmsession::render::{RenderOptions, Renderer};
use llmsession::request::{compaction_envelope, conversation_envelope, digest, PrefixBytes};
use llmsession::tokens::meter::Meter;
use llmsession::tokens::{Estimator, TokenCounter};
use llmsession::types::ToolSchema;
use llmsession::{CallConfig, CancelToken, Message, Role};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether criterion runs for real (`cargo bench`) rather than as a smoke test.
fn full_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

fn sizes() -> Vec<usize> {
    if full_run() {
        vec![100, 1_000, 10_000, 100_000]
    } else {
        vec![100]
    }
}

/// How many history messages a fixture of `n` may grow by before it is rebuilt.
fn growth_limit(n: usize) -> usize {
    (n / 10).max(10)
}

/// Runs `iters` steady-state iterations on fixtures of `n` messages, rebuilding them (untimed)
/// when they have grown too much; `timed` returns the time of what it measures.
fn steady(slot: &mut Option<Fixture>, n: usize, iters: u64, timed: impl FnMut(&mut Fixture) -> Duration) -> Duration {
    steady_by(slot, n, iters, || Fixture::in_memory(n), timed)
}

/// [`steady`], with fixtures built by `build`.
fn steady_by(
    slot: &mut Option<Fixture>,
    n: usize,
    iters: u64,
    build: impl Fn() -> Fixture,
    mut timed: impl FnMut(&mut Fixture) -> Duration,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        if slot.as_ref().is_none_or(|f| f.grown() + 2 > growth_limit(n)) {
            *slot = None; // drop the old one first
            *slot = Some(build());
        }
        total += timed(slot.as_mut().expect("built"));
    }
    total
}

#[derive(serde::Serialize)]
struct Naive<'a> {
    config: &'a CallConfig,
    system: &'a str,
    tools: &'a [ToolSchema],
    messages: &'a [Message],
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    turn: u64,
    step: u64,
    purpose: &'a str,
}

fn request_build(c: &mut Criterion) {
    for n in sizes() {
        let mut group = c.benchmark_group(format!("request_build/{n}"));
        if n >= 10_000 {
            group.sample_size(20).measurement_time(Duration::from_secs(if n >= 100_000 { 30 } else { 10 }));
        }
        let f = Fixture::in_memory(n);
        let bytes = f.last.json.len() as u64;
        let messages = f.base;
        eprintln!("request_build/{n}: {messages} history messages, request {bytes} bytes");
        group.throughput(Throughput::Bytes(bytes));

        let body = f.last.json.clone().into_bytes();
        group.bench_function("memcpy", |b| b.iter(|| black_box(black_box(&body[..]).to_vec())));
        drop(body);

        // The envelope alone, on the fixture's log as it stands (nothing is appended).
        let (header, id) = f.session.with_log(|l| l.state().headers.current().cloned()).map(|h| (h, f.session.id())).expect("header");
        let prefix = PrefixBytes::of(header.message_prefix.as_ref());
        group.bench_function("envelope", |b| {
            b.iter(|| f.session.with_log(|log| black_box(conversation_envelope(log, &header, &prefix, &id, 1, 99))))
        });

        // The naive design: the whole history re-serialised with serde_json at every step.
        let opts = fixture::options();
        let mut history: Vec<Message> = f.session.history().iter().map(|d| d.message()).collect();
        let base_len = history.len();
        let mut next = f.next;
        group.bench_function("serde_rebuild", |b| {
            b.iter(|| {
                if history.len() + 2 > base_len + growth_limit(n) {
                    history.truncate(base_len);
                }
                history.push(fixture::assistant(next));
                history.push(fixture::result_message(next));
                next += 1;
                let env = Naive {
                    config: &opts.config,
                    system: opts.system.as_deref().unwrap_or(""),
                    tools: &opts.tools,
                    messages: &history,
                    session_id: &id,
                    turn: 1,
                    step: next,
                    purpose: "conversation",
                };
                black_box(serde_json::to_vec(&env).expect("serialises"))
            })
        });
        drop(history);

        let mut slot = Some(f);
        group.bench_function("step", |b| {
            b.iter_custom(|iters| {
                steady(&mut slot, n, iters, |f| {
                    let t = Instant::now();
                    black_box(f.step());
                    t.elapsed()
                })
            })
        });
        group.bench_function("next_request", |b| {
            b.iter_custom(|iters| {
                steady(&mut slot, n, iters, |f| {
                    f.exchange();
                    let t = Instant::now();
                    black_box(f.request());
                    t.elapsed()
                })
            })
        });
        group.finish();
    }
}

fn compaction(c: &mut Criterion) {
    let n = if full_run() { 100_000 } else { 1_000 };
    let mut group = c.benchmark_group(format!("compaction/{n}"));
    if n >= 10_000 {
        group.sample_size(20).measurement_time(Duration::from_secs(20));
    }
    let counter: Arc<dyn TokenCounter> = Arc::new(Estimator);
    let policy = CompactionPolicy::new(128_000);

    let mut slot: Option<Fixture> = None;
    group.bench_function(BenchmarkId::new("next_request", n), |b| {
        b.iter_custom(|iters| {
            steady(&mut slot, n, iters, |f| {
                f.exchange();
                let t = Instant::now();
                black_box(f.request());
                t.elapsed()
            })
        })
    });

    // The gate's bookkeeping after one more exchange: the meter counts the two new messages,
    // the region is selected, the summarisation request is built and digested.
    let mut meter: Option<(Meter, llmsession::Session)> = None;
    group.bench_function(BenchmarkId::new("bookkeeping", n), |b| {
        b.iter_custom(|iters| {
            steady(&mut slot, n, iters, |f| {
                let session = f.session.clone();
                let header = session.with_log(|l| l.state().headers.current().cloned()).expect("header");
                // A new fixture gets a new meter, primed (untimed).
                let fresh = meter.as_ref().is_none_or(|(_, s)| !s.same_as(&session));
                if fresh {
                    let mut m = Meter::new();
                    m.measure(&counter, &session, &header, true).expect("measure");
                    meter = Some((m, session.clone()));
                }
                let (m, _) = meter.as_mut().expect("primed");
                f.exchange();
                let prefix = PrefixBytes::of(header.message_prefix.as_ref());
                let t = Instant::now();
                let measure = m.measure(&counter, &session, &header, true).expect("measure");
                let entries = session.with_log(|l| l.history().entries().to_vec());
                let region = select_region(&entries, m.per_entry(), policy.retained_tokens()).expect("a region");
                let body = compaction_envelope(
                    &header,
                    &prefix,
                    &entries[region.start..=region.end],
                    INSTRUCTION,
                    &header.config.provider,
                    &header.config.model,
                    policy.summary_max_tokens,
                    &session.id(),
                );
                black_box((measure, digest(&body), body));
                let took = t.elapsed();
                black_box(f.request());
                took
            })
        })
    });
    drop(slot);

    // A cold meter: every message of the history counted (an instance's first measurement).
    let f = Fixture::in_memory(n);
    let header = f.session.with_log(|l| l.state().headers.current().cloned()).expect("header");
    group.sample_size(10);
    group.bench_function(BenchmarkId::new("meter_cold", n), |b| {
        b.iter(|| black_box(Meter::new().measure(&counter, &f.session, &header, true).expect("measure")))
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// The provider body (the one-way hot path) against a naive host

/// What a Rust host would write without the library: the OpenAI chat-completions body as typed
/// serde structs (fields in the order the body's keys sort, as the renderer writes them).
mod naive {
    use serde::{Deserialize, Serialize};

    /// The request body.
    #[derive(Serialize, Deserialize, Clone)]
    pub struct ChatBody {
        pub messages: Vec<ChatMessage>,
        pub model: String,
        pub prompt_cache_key: String,
        pub tools: Vec<Tool>,
    }

    /// A wire message: system, user, assistant (with tool calls) or tool.
    #[derive(Serialize, Deserialize, Clone)]
    pub struct ChatMessage {
        pub content: Option<String>,
        pub role: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tool_call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tool_calls: Option<Vec<ToolCall>>,
    }

    #[derive(Serialize, Deserialize, Clone)]
    pub struct ToolCall {
        pub function: FunctionCall,
        pub id: String,
        #[serde(rename = "type")]
        pub kind: String,
    }

    #[derive(Serialize, Deserialize, Clone)]
    pub struct FunctionCall {
        pub arguments: String,
        pub name: String,
    }

    #[derive(Serialize, Deserialize, Clone)]
    pub struct Tool {
        pub function: Function,
        #[serde(rename = "type")]
        pub kind: String,
    }

    #[derive(Serialize, Deserialize, Clone)]
    pub struct Function {
        pub description: String,
        pub name: String,
        pub parameters: serde_json::Value,
    }

    /// The provider's reply (only what the host reads; other fields are skipped).
    #[derive(Deserialize)]
    pub struct ChatResponse {
        pub choices: Vec<Choice>,
    }

    #[derive(Deserialize)]
    pub struct Choice {
        pub message: ChatMessage,
    }

    impl ChatMessage {
        pub fn tool(call_id: String, content: String) -> ChatMessage {
            ChatMessage { content: Some(content), role: "tool".into(), tool_call_id: Some(call_id), tool_calls: None }
        }
    }
}

/// The naive host's message for a library message (the host's own bookkeeping, written once
/// when the fixture is built).
fn naive_messages(m: &Message) -> Vec<naive::ChatMessage> {
    let texts = |blocks: &[llmsession::Block]| -> Vec<String> {
        blocks.iter().filter(|b| b.kind() == "text").map(|b| b.get_str("text").unwrap_or_default().to_string()).collect()
    };
    match m.role {
        Role::Assistant => {
            let calls: Vec<naive::ToolCall> = m
                .tool_calls()
                .map(|(id, name, args)| naive::ToolCall {
                    function: naive::FunctionCall { arguments: args.into(), name: name.into() },
                    id: id.into(),
                    kind: "function".into(),
                })
                .collect();
            let t = texts(&m.content);
            let content = if t.is_empty() && !calls.is_empty() { None } else { Some(t.join("\n")) };
            vec![naive::ChatMessage {
                content,
                role: "assistant".into(),
                tool_call_id: None,
                tool_calls: (!calls.is_empty()).then_some(calls),
            }]
        }
        Role::User if m.content.iter().any(|b| b.kind() == "tool-result") => m
            .content
            .iter()
            .map(|b| naive::ChatMessage::tool(b.tool_result_id().expect("a result").into(), texts(&b.tool_result_content()).join("\n")))
            .collect(),
        Role::User => vec![naive::ChatMessage {
            content: Some(texts(&m.content).join("\n")),
            role: "user".into(),
            tool_call_id: None,
            tool_calls: None,
        }],
        Role::System => vec![naive::ChatMessage {
            content: Some(texts(&m.content).join("\n")),
            role: "system".into(),
            tool_call_id: None,
            tool_calls: None,
        }],
    }
}

/// The naive host's body for the fixture's history as it stands.
fn naive_body_of(f: &Fixture) -> naive::ChatBody {
    let opts = fixture::options();
    let mut messages =
        vec![naive::ChatMessage { content: opts.system.clone(), role: "system".into(), tool_call_id: None, tool_calls: None }];
    for d in f.session.history() {
        messages.extend(naive_messages(&d.message()));
    }
    let tools = opts
        .tools
        .iter()
        .map(|t| naive::Tool {
            function: naive::Function {
                description: t.description.clone().unwrap_or_default(),
                name: t.name.clone(),
                parameters: t.parameters.clone(),
            },
            kind: "function".into(),
        })
        .collect();
    naive::ChatBody { messages, model: opts.config.model.clone(), prompt_cache_key: f.session.id(), tools }
}

/// The provider's raw reply to step `i` in `renderer`'s wire format: the fixture's assistant
/// message of exchange `i` (a sentence and a `read_file` call), with usage.
fn reply(renderer: Renderer, i: u64) -> String {
    let a = fixture::assistant(i);
    let text = a.text();
    let (id, name, args) = a.tool_calls().next().expect("a call");
    let input: serde_json::Value = serde_json::from_str(args).expect("arguments are JSON");
    let model = "deepseek-chat";
    let v = match renderer {
        Renderer::OpenAi => serde_json::json!({
            "id": format!("chatcmpl-{i}"), "object": "chat.completion", "created": 1_700_000_000u64 + i, "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": text,
                "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}}],
            "usage": {"prompt_tokens": 12_000 + i, "completion_tokens": 31, "total_tokens": 12_031 + i,
                      "prompt_tokens_details": {"cached_tokens": 11_904}}
        }),
        Renderer::OpenAiResponses => serde_json::json!({
            "id": format!("resp_{i}"), "object": "response", "status": "completed", "model": model,
            "output": [
                {"type": "message", "id": format!("msg_{i}"), "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]},
                {"type": "function_call", "id": format!("fc_{i}"), "call_id": id, "name": name, "arguments": args, "status": "completed"}],
            "usage": {"input_tokens": 12_000 + i, "output_tokens": 31, "total_tokens": 12_031 + i,
                      "input_tokens_details": {"cached_tokens": 11_904}}
        }),
        Renderer::Anthropic => serde_json::json!({
            "id": format!("msg_{i}"), "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}, {"type": "tool_use", "id": id, "name": name, "input": input}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 96, "output_tokens": 31, "cache_read_input_tokens": 11_904}
        }),
        Renderer::Gemini => serde_json::json!({
            "candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
                {"text": text}, {"functionCall": {"id": id, "name": name, "args": input}}]}}],
            "usageMetadata": {"promptTokenCount": 12_000 + i, "candidatesTokenCount": 31, "totalTokenCount": 12_031 + i,
                              "cachedContentTokenCount": 11_904},
            "modelVersion": model
        }),
        Renderer::GeminiInteractions => serde_json::json!({
            "id": format!("int_{i}"), "status": "requires_action", "model": model,
            "steps": [{"type": "model_output", "content": [{"type": "text", "text": text}]},
                      {"type": "function_call", "id": id, "name": name, "arguments": input}],
            "usage": {"total_input_tokens": 12_000 + i, "total_output_tokens": 31, "total_cached_tokens": 11_904}
        }),
    };
    v.to_string()
}

/// A fixture of `n` messages whose agent renders `renderer` bodies, its cache warm (one body
/// built, so every history message is rendered once) and no step open.
fn body_fixture(n: usize, renderer: Renderer) -> Fixture {
    let mut f = Fixture::in_memory(n);
    f.agent.set_renderer(renderer, RenderOptions::default()).expect("set_renderer");
    f.exchange();
    f.agent.next_body(&CancelToken::new()).expect("next_body");
    let i = f.next;
    f.next += 1;
    f.agent.record_body(&reply(renderer, i)).expect("record_body");
    f.agent.record_tool_result(fixture::result(i)).expect("record_tool_result");
    f
}

/// The first byte where `a` and `b` differ.
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Builds the next body with the library and with the naive host on the same history, and
/// panics unless they are the same bytes (the naive host's reply-parsing path included).
fn check_naive(n: usize) {
    let cancel = CancelToken::new();
    let mut f = body_fixture(n, Renderer::OpenAi);
    let mut host = naive_body_of(&f);
    let ours = f.agent.next_body(&cancel).expect("next_body").json;
    let theirs = serde_json::to_vec(&host).expect("serialises");
    assert!(
        ours.as_bytes() == &theirs[..],
        "body/openai/{n}: the naive host's body differs from next_body's (first difference at byte {} of {} and {})",
        first_difference(ours.as_bytes(), &theirs),
        ours.len(),
        theirs.len()
    );
    // One full step on both sides.
    let i = f.next;
    f.next += 1;
    let raw = reply(Renderer::OpenAi, i);
    f.agent.record_body(&raw).expect("record_body");
    f.agent.record_tool_result(fixture::result(i)).expect("record_tool_result");
    let ours = f.agent.next_body(&cancel).expect("next_body").json;
    let r: naive::ChatResponse = serde_json::from_str(&raw).expect("parses");
    host.messages.push(r.choices.into_iter().next().expect("a choice").message);
    host.messages.push(naive::ChatMessage::tool(format!("call_{i}"), fixture::result_text(i)));
    let theirs = serde_json::to_vec(&host).expect("serialises");
    assert!(
        ours.as_bytes() == &theirs[..],
        "body/openai/{n}: after a step, the naive host's body differs from next_body's (first difference at byte {} of {} and {})",
        first_difference(ours.as_bytes(), &theirs),
        ours.len(),
        theirs.len()
    );
}

fn body_sizes() -> Vec<usize> {
    if full_run() {
        vec![100, 1_000, 10_000]
    } else {
        vec![100]
    }
}

fn provider_body(c: &mut Criterion) {
    let mut runs: Vec<(Renderer, usize)> = body_sizes().into_iter().map(|n| (Renderer::OpenAi, n)).collect();
    let per_renderer = if full_run() { 1_000 } else { 100 };
    runs.extend(
        [Renderer::OpenAiResponses, Renderer::Anthropic, Renderer::Gemini, Renderer::GeminiInteractions].map(|r| (r, per_renderer)),
    );
    let cancel = CancelToken::new();
    for (renderer, n) in runs {
        let mut group = c.benchmark_group(format!("body/{}/{n}", renderer.name()));
        if n >= 10_000 {
            group.sample_size(20).measurement_time(Duration::from_secs(10));
        }
        let mut f = body_fixture(n, renderer);
        let body = f.agent.next_body(&cancel).expect("next_body").json;
        // The naive host's bodies are checked against the library's before anything is timed.
        if renderer == Renderer::OpenAi {
            check_naive(n);
        }
        let bytes = body.len();
        eprintln!("body/{}/{n}: {} history messages, body {bytes} bytes", renderer.name(), f.base);
        group.throughput(Throughput::Bytes(bytes as u64));

        let copy = body.as_bytes().to_vec();
        group.bench_function("body_memcpy", |b| b.iter(|| black_box(black_box(&copy[..]).to_vec())));
        drop(copy);
        drop(body);

        if renderer == Renderer::OpenAi {
            // The naive host on the same history, reset to it when grown by a tenth.
            let base = naive_body_of(&f);
            let base_len = base.messages.len();
            let first = f.next;
            let limit = growth_limit(n);
            let mut host = base.clone();
            let mut next = first;
            let reset = |host: &mut naive::ChatBody, next: &mut u64| {
                if host.messages.len() + 2 > base_len + limit {
                    host.messages.truncate(base_len);
                    *next = first;
                }
            };
            group.bench_function("naive_body", |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        reset(&mut host, &mut next);
                        let a = naive_messages(&fixture::assistant(next)).pop().expect("a message");
                        let r = naive::ChatMessage::tool(format!("call_{next}"), fixture::result_text(next));
                        next += 1;
                        let t = Instant::now();
                        host.messages.push(a);
                        host.messages.push(r);
                        black_box(serde_json::to_vec(&host).expect("serialises"));
                        total += t.elapsed();
                    }
                    total
                })
            });
            group.bench_function("naive_step", |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        reset(&mut host, &mut next);
                        let raw = reply(Renderer::OpenAi, next);
                        let r = naive::ChatMessage::tool(format!("call_{next}"), fixture::result_text(next));
                        next += 1;
                        let t = Instant::now();
                        let parsed: naive::ChatResponse = serde_json::from_str(&raw).expect("parses");
                        host.messages.push(parsed.choices.into_iter().next().expect("a choice").message);
                        host.messages.push(r);
                        black_box(serde_json::to_vec(&host).expect("serialises"));
                        total += t.elapsed();
                    }
                    total
                })
            });
        }

        // The library: `f` has a body built, and is reused until it has grown by a tenth.
        {
            let i = f.next;
            f.next += 1;
            f.agent.record_body(&reply(renderer, i)).expect("record_body");
            f.agent.record_tool_result(fixture::result(i)).expect("record_tool_result");
        }
        let mut slot = Some(f);
        let build = || body_fixture(n, renderer);
        group.bench_function("next_body", |b| {
            b.iter_custom(|iters| {
                steady_by(&mut slot, n, iters, build, |f| {
                    let t = Instant::now();
                    black_box(f.agent.next_body(&cancel).expect("next_body"));
                    let took = t.elapsed();
                    f.exchange();
                    took
                })
            })
        });
        group.bench_function("body_step", |b| {
            b.iter_custom(|iters| {
                steady_by(&mut slot, n, iters, build, |f| {
                    // Built untimed: the reply as the provider sends it, and the tool's result.
                    let i = f.next;
                    f.next += 1;
                    let raw = reply(renderer, i);
                    let result = fixture::result(i);
                    let t = Instant::now();
                    black_box(f.agent.next_body(&cancel).expect("next_body"));
                    f.agent.record_body(&raw).expect("record_body");
                    f.agent.record_tool_result(result).expect("record_tool_result");
                    t.elapsed()
                })
            })
        });
        group.finish();
    }
}

criterion_group!(benches, request_build, provider_body, compaction);

criterion_main!(benches);
