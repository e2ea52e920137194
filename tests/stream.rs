//! Streamed responses through the public API: for every format, the fixture stream (written
//! from the provider's documented wire format, in `tests/data/stream/`) gives exactly the
//! response that parsing the equivalent non-streamed body gives, whatever the chunking; and
//! broken streams fail clearly.

use llmsession::render::{parse_response, ParsedResponse, Renderer};
use llmsession::stream::{Delta, DeltaKind, StreamAccumulator};
use llmsession::{Agent, AgentOptions, CallConfig, CancelToken, ErrorKind, Message, Session};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::PathBuf;

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/stream").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (format, stream file, equivalent non-streamed body file).
const FIXTURES: &[(Renderer, &str, &str)] = &[
    (Renderer::OpenAi, "openai-chat-tools.sse", "openai-chat-tools.json"),
    (Renderer::OpenAi, "openai-chat-reasoning.sse", "openai-chat-reasoning.json"),
    (Renderer::OpenAi, "openai-chat-refusal.sse", "openai-chat-refusal.json"),
    (Renderer::OpenAiResponses, "openai-responses-tools.sse", "openai-responses-tools.json"),
    (Renderer::Anthropic, "anthropic-tools.sse", "anthropic-tools.json"),
    (Renderer::Anthropic, "anthropic-citations.sse", "anthropic-citations.json"),
    (Renderer::Anthropic, "anthropic-cache.sse", "anthropic-cache.json"),
    (Renderer::Gemini, "gemini-tools.sse", "gemini-tools.json"),
    (Renderer::Gemini, "gemini-array.stream.json", "gemini-array.json"),
    (Renderer::Gemini, "gemini-streamed-args.sse", "gemini-streamed-args.json"),
    (Renderer::GeminiInteractions, "gemini-interactions-tools.sse", "gemini-interactions-tools.json"),
];

/// Feeds `bytes` cut at `cuts` (sorted offsets); returns the response and every delta.
fn run(format: Renderer, bytes: &[u8], cuts: &[usize]) -> (ParsedResponse, Vec<Delta>) {
    let mut s = StreamAccumulator::new(format);
    let mut deltas = Vec::new();
    let mut from = 0;
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let c = c.clamp(from, bytes.len());
        s.feed(&bytes[from..c]).unwrap_or_else(|e| panic!("{}: feed: {}", format.name(), e.message()));
        from = c;
        while let Some(d) = s.next_delta() {
            deltas.push(d);
        }
    }
    let p = s.finish(false).unwrap_or_else(|e| panic!("{}: finish: {}", format.name(), e.message()));
    (p, deltas)
}

fn body_of(name: &str) -> Value {
    serde_json::from_slice(&data(name)).unwrap()
}

#[test]
fn every_stream_gives_the_non_streamed_response() {
    for &(format, stream, body) in FIXTURES {
        let want = parse_response(format, &body_of(body)).unwrap();
        let (got, deltas) = run(format, &data(stream), &[]);
        assert_eq!(got, want, "{stream}");
        assert!(!deltas.is_empty(), "{stream}: no deltas");
        // The text deltas of each index put together give that text block.
        let texts: Vec<&str> = want.message.content.iter().filter(|b| b.kind() == "text").filter_map(|b| b.get_str("text")).collect();
        for (n, t) in texts.iter().enumerate() {
            let joined: String =
                deltas.iter().filter(|d| d.kind == DeltaKind::Text && d.index == n).filter_map(|d| d.text.as_deref()).collect();
            assert_eq!(joined, *t, "{stream}: text {n}");
        }
    }
}

#[test]
fn the_fixtures_hold_what_the_issue_asks_for() {
    // Tool calls in many fragments, multi-byte text, reasoning, a usage-only last chunk.
    let (p, deltas) = run(Renderer::OpenAi, &data("openai-chat-tools.sse"), &[]);
    let calls: Vec<_> = p.message.tool_calls().collect();
    assert_eq!(
        calls,
        vec![("call_Qa1", "read_file", "{\"path\": \"café.txt\", \"lines\": 20}"), ("call_Rb2", "list_dir", "{\"dir\": \"ü/\"}"),]
    );
    let frags: Vec<&Delta> = deltas.iter().filter(|d| d.kind == DeltaKind::ToolCall && d.index == 0).collect();
    assert_eq!(frags[0].id.as_deref(), Some("call_Qa1"));
    assert_eq!(frags[0].name.as_deref(), Some("read_file"));
    assert_eq!(frags.iter().filter_map(|d| d.arguments.as_deref()).collect::<String>(), calls[0].2);
    assert!(frags.len() >= 4);
    let u = p.usage.unwrap();
    assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens), (98, Some(1152), 41));
    assert_eq!(p.finish_reason.as_deref(), Some("tool-calls"));

    let (p, deltas) = run(Renderer::OpenAi, &data("openai-chat-reasoning.sse"), &[]);
    assert_eq!(p.message.content[0].kind(), "reasoning");
    assert_eq!(p.message.content[0].get_str("text"), Some("用户想要一个简短的回答。"));
    let reasoning: String = deltas.iter().filter(|d| d.kind == DeltaKind::Reasoning).filter_map(|d| d.text.as_deref()).collect();
    assert_eq!(reasoning, "用户想要一个简短的回答。");

    let (p, deltas) = run(Renderer::OpenAiResponses, &data("openai-responses-tools.sse"), &[]);
    assert_eq!(p.message.content[0].get("item").unwrap()["encrypted_content"], "gAAAAABoq-ENC-1==");
    let reasoning: String = deltas.iter().filter(|d| d.kind == DeltaKind::Reasoning).filter_map(|d| d.text.as_deref()).collect();
    assert_eq!(Some(reasoning.as_str()), p.message.content[0].get_str("text"));
    let args: String = deltas.iter().filter(|d| d.kind == DeltaKind::ToolCall).filter_map(|d| d.arguments.as_deref()).collect();
    assert_eq!(args, "{\"path\":\"café.txt\"}");

    let (p, _) = run(Renderer::Anthropic, &data("anthropic-tools.sse"), &[]);
    assert_eq!(p.message.content[0].get_str("signature"), Some("EqQBCkYIBxgCKkBsig=="));
    assert_eq!(p.message.tool_calls().next().unwrap().2, r#"{"lines":20,"path":"café.txt"}"#);
    let u = p.usage.unwrap();
    assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens), (14, Some(2048), 87));

    let (p, _) = run(Renderer::Gemini, &data("gemini-tools.sse"), &[]);
    assert_eq!(p.message.content[2].get_str("thoughtSignature"), Some("CiQB0e2Kb9sig=="));
    let (p, _) = run(Renderer::Gemini, &data("gemini-array.stream.json"), &[]);
    assert_eq!(p.message.content.len(), 1);
    assert_eq!(p.message.content[0].get_str("thoughtSignature"), Some("Q2lRQjBlMkti"));

    // Interactions: a thought with its signature, text in two deltas, a call's arguments in
    // fragments with its signature, the interaction id carried back.
    let (p, deltas) = run(Renderer::GeminiInteractions, &data("gemini-interactions-tools.sse"), &[]);
    assert_eq!(p.message.content[0].kind(), "reasoning");
    assert_eq!(p.message.content[0].get_str("text"), Some("The user wants the file; \n\nread it first."));
    assert_eq!(p.message.content[0].get("step").unwrap()["signature"], "EpYCCpMCAdHtim9sig==");
    let reasoning: String = deltas.iter().filter(|d| d.kind == DeltaKind::Reasoning).filter_map(|d| d.text.as_deref()).collect();
    assert_eq!(Some(reasoning.as_str()), p.message.content[0].get_str("text"));
    assert_eq!(p.message.tool_calls().next().unwrap(), ("fc_7q2x", "read_file", r#"{"lines":20,"path":"café.txt"}"#));
    assert_eq!(p.message.content[2].get_str("signature"), Some("CiQBfc7sig=="));
    let args: String = deltas.iter().filter(|d| d.kind == DeltaKind::ToolCall).filter_map(|d| d.arguments.as_deref()).collect();
    assert_eq!(args, "{\"path\": \"café.txt\", \"lines\": 20}");
    let u = p.usage.unwrap();
    assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens), (214, Some(4096), 99, Some(61)));
    assert_eq!(p.finish_reason.as_deref(), Some("tool-calls"));
    assert_eq!(p.message.provenance.as_ref().unwrap().extra["interactionId"], "v1_ChdpbnRlcmFjdGlvbi0x");
}

#[test]
fn one_byte_at_a_time() {
    for &(format, stream, body) in FIXTURES {
        let bytes = data(stream);
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        let whole = run(format, &bytes, &[]);
        assert_eq!(run(format, &bytes, &cuts), whole, "{stream}");
        assert_eq!(whole.0, parse_response(format, &body_of(body)).unwrap());
    }
}

#[test]
fn rebuilt_body_carries_provider_extras() {
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    s.feed(&data("openai-chat-reasoning.sse")).unwrap();
    s.finish(false).unwrap();
    let body = s.body();
    assert_eq!(body["timings"]["cache_n"], 800);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 800);
    assert_eq!(body["object"], "chat.completion");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every way of cutting a stream into chunks gives the same response and the same deltas.
    #[test]
    fn every_chunking_gives_the_same_response(which in 0..FIXTURES.len(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40)) {
        let (format, stream, _) = FIXTURES[which];
        let bytes = data(stream);
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(run(format, &bytes, &cuts), run(format, &bytes, &[]));
    }
}

// ---------------------------------------------------------------------------------------------
// Broken streams.

fn field<'a>(e: &'a llmsession::Error, k: &str) -> &'a Value {
    e.detail().get(k).unwrap_or(&Value::Null)
}

#[test]
fn provider_error_events_fail_with_the_providers_error() {
    let cases: &[(Renderer, &str, bool, &str)] = &[
        (
            Renderer::OpenAi,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\"}}\n\n",
            false,
            "server_error: The server had an error while processing your request.",
        ),
        (
            Renderer::OpenAiResponses,
            "event: error\ndata: {\"type\":\"error\",\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\",\"param\":\"input\",\"sequence_number\":1}\n\n",
            true,
            "context_length_exceeded: Your input exceeds the context window of this model.",
        ),
        (
            Renderer::OpenAiResponses,
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":3,\"response\":{\"id\":\"r\",\"status\":\"failed\",\"output\":[],\"error\":{\"code\":\"server_error\",\"message\":\"Something went wrong.\"}}}\n\n",
            false,
            "server_error: Something went wrong.",
        ),
        (
            Renderer::Anthropic,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            false,
            "overloaded_error: Overloaded",
        ),
        (
            Renderer::Gemini,
            "data: {\"error\":{\"code\":400,\"message\":\"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).\",\"status\":\"INVALID_ARGUMENT\"}}\n\n",
            true,
            "INVALID_ARGUMENT (400): The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
        ),
        (
            Renderer::GeminiInteractions,
            "event: error\ndata: {\"event_type\":\"error\",\"error\":{\"code\":\"resource_exhausted\",\"message\":\"Quota exceeded for interactions.\"}}\n\n",
            false,
            "resource_exhausted: Quota exceeded for interactions.",
        ),
    ];
    for &(format, text, overflow, quoted) in cases {
        let mut s = StreamAccumulator::new(format);
        let e = s.feed(text.as_bytes()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", format.name());
        // The provider's error type (or status, or code) and message, quoted.
        assert_eq!(e.message(), format!("the provider reported an error in the stream: {quoted}"), "{}", format.name());
        assert_eq!(field(&e, "stream"), "provider-error");
        assert_eq!(field(&e, "overflow"), &Value::Bool(overflow), "{}", e.message());
        assert!(field(&e, "providerError").is_object());
        // Sticky: every later call fails the same way, and nothing is there to record...
        assert_eq!(s.feed(b"data: {}\n\n").unwrap_err(), e);
        assert_eq!(s.finish(false).unwrap_err(), e);
        // ...unless the host asks for the partial message, when some content arrived (only the
        // chat stream's "Hi" here): an empty one is refused, the provider's error kept.
        match s.finish(true) {
            Ok(p) => {
                assert_eq!(format, Renderer::OpenAi);
                assert_eq!(p.finish_reason.as_deref(), Some("incomplete"));
                assert_eq!(p.message.text(), "Hi");
            }
            Err(empty) => {
                assert_ne!(format, Renderer::OpenAi);
                assert_eq!(field(&empty, "partial"), "empty");
                assert_eq!(field(&empty, "stream"), "provider-error");
                assert!(empty.message().starts_with("no content arrived before the stream failed"), "{}", empty.message());
            }
        }
    }
}

#[test]
fn a_cut_connection_is_incomplete_and_the_partial_message_keeps_finished_parts() {
    // Cut inside the second tool call's arguments.
    let bytes = data("openai-chat-tools.sse");
    let text = std::str::from_utf8(&bytes).unwrap();
    let cut = text.find("\\\"dir\\\"").unwrap();
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    s.feed(&bytes[..cut]).unwrap();
    let e = s.finish(false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(&e, "stream"), "incomplete");
    assert!(e.message().starts_with("the stream ended inside an event"), "{}", e.message());
    let p = s.finish(true).unwrap();
    assert_eq!(p.message.text(), "Je vais lire le fichier «\u{a0}café.txt\u{a0}» et lister ü/ 😀");
    assert_eq!(p.message.tool_calls().map(|c| c.0).collect::<Vec<_>>(), vec!["call_Qa1"]);
    assert_eq!(p.finish_reason.as_deref(), Some("incomplete"));
    assert!(p.usage.is_none());
    assert_eq!(s.feed(b"data: [DONE]\n\n").unwrap_err().kind(), ErrorKind::OutOfOrder);

    // Each format, cut before its terminal event at an event boundary.
    for &(format, stream, _) in FIXTURES {
        let bytes = data(stream);
        let text = std::str::from_utf8(&bytes).unwrap();
        let end = match format {
            Renderer::OpenAi => text.find("data: [DONE]").unwrap(),
            Renderer::OpenAiResponses => text.find("event: response.completed").unwrap(),
            Renderer::Anthropic => text.find("event: message_delta").unwrap(),
            Renderer::Gemini => text.find("STOP").map(|i| text[..i].rfind("data: ").or(text[..i].rfind(",\r\n{")).unwrap()).unwrap(),
            Renderer::GeminiInteractions => text.find("event: interaction.completed").unwrap(),
        };
        let mut s = StreamAccumulator::new(format);
        s.feed(&bytes[..end]).unwrap();
        let e = s.finish(false).unwrap_err();
        assert_eq!(field(&e, "stream"), "incomplete", "{stream}: {}", e.message());
        assert!(e.message().contains("the connection was probably cut"), "{}", e.message());
        let p = s.finish(true).unwrap();
        assert_eq!(p.finish_reason.as_deref(), Some("incomplete"), "{stream}");
        assert!(!p.message.content.is_empty(), "{stream}");
    }
}

#[test]
fn malformed_events_are_clear_errors() {
    let mut s = StreamAccumulator::new(Renderer::Anthropic);
    let e =
        s.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\ndata: {oops\n\n").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedJson);
    assert!(e.message().starts_with("a stream event is not valid JSON"), "{}", e.message());
    assert_eq!(field(&e, "stream"), "malformed");
    assert_eq!(field(&e, "event"), 2);
    assert_eq!(s.feed(b"\n").unwrap_err(), e);

    let bad: &[(Renderer, &[u8], &str)] = &[
        (
            Renderer::Anthropic,
            b"data: {\"type\":\"content_block_delta\",\"index\":4,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
            "content block 4 was never started",
        ),
        (
            Renderer::OpenAiResponses,
            b"data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"delta\":\"x\"}\n\n",
            "output item 0 was never added",
        ),
        (Renderer::OpenAi, b"data: [1,2]\n\n", "a chunk must be a JSON object"),
        (Renderer::Gemini, b"data: {\"candidates\":[{\"content\":{\"parts\":{}}}]}\n\n", "`content.parts` must be an array"),
        (Renderer::Gemini, b"[{\"candidates\":[]}, 7]", "stream element 2: expected an object as array element"),
        (Renderer::OpenAi, b"data: \xff\n\n", "stream line 1 is not valid UTF-8"),
        (
            Renderer::GeminiInteractions,
            b"data: {\"event_type\":\"step.delta\",\"index\":3,\"delta\":{\"type\":\"text\",\"text\":\"x\"}}\n\n",
            "step 3 was never started",
        ),
        (Renderer::GeminiInteractions, b"data: {\"event_type\":\"step.start\",\"index\":0}\n\n", "`step.start` needs the `step` object"),
        (
            Renderer::GeminiInteractions,
            b"data: {\"event_type\":\"step.start\",\"index\":0,\"step\":{\"type\":\"function_call\",\"id\":\"f\",\"name\":\"n\"}}\n\ndata: {\"event_type\":\"step.delta\",\"index\":0,\"delta\":{\"type\":\"arguments_delta\",\"arguments\":\"{oops\"}}\n\ndata: {\"event_type\":\"step.stop\",\"index\":0}\n\n",
            "the arguments of function call step 0 are not JSON",
        ),
    ];
    for &(format, text, want) in bad {
        let e = StreamAccumulator::new(format).feed(text).unwrap_err();
        assert!(e.message().contains(want), "{}: {}", format.name(), e.message());
        assert_eq!(field(&e, "stream"), "malformed");
    }
    // The tool input of an Anthropic block must be JSON once the block closes.
    let mut s = StreamAccumulator::new(Renderer::Anthropic);
    let e = s
        .feed(b"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{}}}\n\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
        .unwrap_err();
    assert!(e.message().contains("the input of content block 0 is not valid JSON"), "{}", e.message());
}

#[test]
fn a_streamed_response_records_like_a_parsed_one() {
    let session = Session::in_memory();
    let mut agent = Agent::new(&session, AgentOptions::new(CallConfig::new("openai", "gpt-4.1-mini"))).unwrap();
    agent.start_turn(Message::user_text("Lis café.txt")).unwrap();
    agent.next_request(&CancelToken::new()).unwrap();
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    for chunk in data("openai-chat-tools.sse").chunks(7) {
        s.feed(chunk).unwrap();
    }
    let p = s.finish(false).unwrap();
    agent.record_response(p.message.clone(), p.usage.clone()).unwrap();
    let history: Value = serde_json::from_str(&session.history_json()).unwrap();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"], json!(p.message.content));
    assert_eq!(last["content"][1]["arguments"], "{\"path\": \"café.txt\", \"lines\": 20}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Damaged streams (bytes changed, dropped or inserted) never panic: every call either
    /// succeeds or fails with a stream error or a field error.
    #[test]
    fn damaged_streams_fail_cleanly(
        which in 0..FIXTURES.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        partial in any::<bool>(),
    ) {
        let (format, stream, _) = FIXTURES[which];
        let mut bytes = data(stream);
        for (at, op, b) in edits {
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = b,
                1 => { bytes.remove(i); }
                _ => bytes.insert(i, b),
            }
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut s = StreamAccumulator::new(format);
        let mut from = 0;
        let clean = |e: &llmsession::Error| {
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::MalformedJson)
                && (e.detail().contains_key("stream") || e.detail().contains_key("field"))
        };
        for c in cuts.into_iter().chain(std::iter::once(bytes.len())) {
            if let Err(e) = s.feed(&bytes[from..c]) {
                prop_assert!(clean(&e), "{}", e.message());
            }
            from = c;
            while s.next_delta().is_some() {}
        }
        if let Err(e) = s.finish(partial) {
            prop_assert!(clean(&e), "{}", e.message());
        }
        let _ = s.body();
    }
}

#[test]
fn a_stream_of_another_format_is_refused_at_its_first_event() {
    let names = [
        (Renderer::OpenAi, "an OpenAI chat completions stream"),
        (Renderer::OpenAiResponses, "an OpenAI Responses API stream"),
        (Renderer::Anthropic, "an Anthropic Messages stream"),
        (Renderer::Gemini, "a Gemini streamGenerateContent stream"),
        (Renderer::GeminiInteractions, "a Gemini Interactions API stream"),
    ];
    for &(theirs, stream, _) in FIXTURES {
        let looks = names.iter().find(|(f, _)| *f == theirs).unwrap().1;
        for (ours, _) in names {
            if ours == theirs {
                continue;
            }
            let mut s = StreamAccumulator::new(ours);
            let e = s.feed(&data(stream)).unwrap_err();
            let what = format!("{stream} fed to {}", ours.name());
            assert_eq!(field(&e, "stream"), "malformed", "{what}: {}", e.message());
            assert_eq!(field(&e, "looksLike"), theirs.name(), "{what}");
            assert!(e.message().contains(&format!("this looks like {looks}")), "{what}: {}", e.message());
            assert!(e.message().contains(&format!("the accumulator was created for {}", ours.name())), "{what}: {}", e.message());
            // Refused at the first event (the JSON array is refused before it has one).
            assert!(matches!(field(&e, "event"), Value::Null) || field(&e, "event") == 1, "{what}: {}", e.message());
            assert_eq!(s.finish(false).unwrap_err(), e);
            // Nothing arrived, so there is no partial message either.
            let empty = s.finish(true).unwrap_err();
            assert_eq!(field(&empty, "partial"), "empty", "{what}");
            assert_eq!(field(&empty, "looksLike"), theirs.name(), "{what}");
        }
    }
    // A non-streamed body fed to an accumulator.
    for (format, _) in names {
        let e = StreamAccumulator::new(format).feed(&data("anthropic-tools.json")).unwrap_err();
        assert_eq!(field(&e, "stream"), "malformed");
        assert!(e.message().contains("this looks like a JSON body, not an event stream"), "{}", e.message());
    }
}

#[test]
fn an_empty_partial_message_is_refused_and_nothing_is_recorded() {
    let session = Session::in_memory();
    let mut agent = Agent::new(&session, AgentOptions::new(CallConfig::new("openai", "gpt-4.1-mini"))).unwrap();
    agent.set_renderer(Renderer::OpenAi, llmsession::render::RenderOptions::default()).unwrap();
    agent.start_turn(Message::user_text("Bonjour")).unwrap();
    agent.next_body(&CancelToken::new()).unwrap();
    let before = session.with_log(|l| l.len());
    // An Anthropic stream into the chat completions accumulator...
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    assert!(s.feed(&data("anthropic-tools.sse")).is_err());
    let e = agent.record_stream(&mut s, true).unwrap_err();
    assert_eq!(field(&e, "partial"), "empty");
    assert_eq!(field(&e, "looksLike"), "anthropic");
    // ...and a chat stream cut before its first delta: refused, nothing logged.
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    s.feed(b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
        .unwrap();
    let e = agent.record_stream(&mut s, true).unwrap_err();
    assert_eq!(field(&e, "stream"), "incomplete");
    assert_eq!(field(&e, "partial"), "empty");
    assert_eq!(session.with_log(|l| l.len()), before, "nothing was logged");
    // The step is still open: the real answer records.
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    s.feed(&data("openai-chat-tools.sse")).unwrap();
    agent.record_stream(&mut s, false).unwrap();
}

/// `model` plus a user question and the parsed answer, as an envelope.
fn envelope_with(answer: &Message) -> Value {
    json!({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}, answer.to_value()]})
}

#[test]
fn an_openai_refusal_is_a_marked_text_block_that_goes_back_as_a_refusal() {
    let refusal = "Désolé, je ne peux pas vous aider à ça 🙅.";
    let want = parse_response(Renderer::OpenAi, &body_of("openai-chat-refusal.json")).unwrap();
    assert_eq!(want.message.content.len(), 1);
    assert_eq!(want.message.content[0].clone().into_value(), json!({"type":"text","text":refusal,"refusal":true}));
    assert!(llmsession::render::is_refusal(&want.message.content[0]));
    assert_eq!(want.finish_reason.as_deref(), Some("refusal"));
    // Streamed: the refusal fragments are text deltas of block 0.
    let (got, deltas) = run(Renderer::OpenAi, &data("openai-chat-refusal.sse"), &[]);
    assert_eq!(got, want);
    let texts: String = deltas.iter().filter(|d| d.kind == DeltaKind::Text && d.index == 0).filter_map(|d| d.text.as_deref()).collect();
    assert_eq!(texts, refusal);
    // Back to chat completions where OpenAI put it; to the Responses API as a refusal part;
    // to the others as the assistant's text.
    let env = envelope_with(&want.message);
    let opts = llmsession::render::RenderOptions::default();
    let chat = Renderer::OpenAi.render(&env, &opts).unwrap();
    assert_eq!(chat["messages"][1], json!({"role":"assistant","content":null,"refusal":refusal}));
    let responses = Renderer::OpenAiResponses.render(&env, &opts).unwrap();
    assert_eq!(responses["input"][1], json!({"type":"message","role":"assistant","content":[{"type":"refusal","refusal":refusal}]}));
    let anthropic = Renderer::Anthropic.render(&env, &opts).unwrap();
    assert_eq!(anthropic["messages"][1]["content"][0]["text"], refusal);
    let gemini = Renderer::Gemini.render(&env, &opts).unwrap();
    assert_eq!(gemini["contents"][1]["parts"][0], json!({"text": refusal}));
    // A Responses API refusal part parses to the same block (with its item id).
    let r = parse_response(
        Renderer::OpenAiResponses,
        &json!({"status":"completed","output":[{"type":"message","id":"msg_9","role":"assistant","status":"completed",
            "content":[{"type":"refusal","refusal":refusal}]}]}),
    )
    .unwrap();
    assert!(llmsession::render::is_refusal(&r.message.content[0]));
    assert_eq!(r.finish_reason.as_deref(), Some("refusal"));
    let back = Renderer::OpenAiResponses.render(&envelope_with(&r.message), &opts).unwrap();
    assert_eq!(
        back["input"][1],
        json!({"type":"message","id":"msg_9","role":"assistant","status":"completed","content":[{"type":"refusal","refusal":refusal}]})
    );
}

#[test]
fn anthropic_citations_stay_on_their_text_block_and_go_back_to_anthropic_only() {
    let want = parse_response(Renderer::Anthropic, &body_of("anthropic-citations.json")).unwrap();
    let blocks: Vec<Value> = want.message.content.iter().map(|b| b.clone().into_value()).collect();
    let citations = body_of("anthropic-citations.json")["content"][1]["citations"].clone();
    assert_eq!(citations.as_array().unwrap().len(), 2);
    assert_eq!(
        blocks,
        vec![
            json!({"type":"text","text":"D'après le document, "}),
            json!({"type":"text","text":"l'herbe est verte 🌱","citations":citations,"origin":"anthropic"}),
            json!({"type":"text","text":"."}),
        ]
    );
    // The streamed citations_delta events give the same block.
    assert_eq!(run(Renderer::Anthropic, &data("anthropic-citations.sse"), &[]).0, want);
    let env = envelope_with(&want.message);
    let opts = llmsession::render::RenderOptions::default();
    let body = Renderer::Anthropic.render(&env, &opts).unwrap();
    assert_eq!(body["messages"][1]["content"][1], json!({"type":"text","text":"l'herbe est verte 🌱","citations":citations}));
    for other in [Renderer::OpenAi, Renderer::OpenAiResponses, Renderer::Gemini] {
        let text = other.render(&env, &opts).unwrap().to_string();
        assert!(!text.contains("char_location") && text.contains("l'herbe est verte"), "{}: {text}", other.name());
    }
}

#[test]
fn anthropic_cache_writes_diagnostics_and_context_edits_come_through_a_stream() {
    // message_start carries the diagnostics and the input usage with its TTL split;
    // message_delta the context edits the server applied.
    let (p, _) = run(Renderer::Anthropic, &data("anthropic-cache.sse"), &[]);
    let u = p.usage.unwrap();
    assert_eq!((u.cache_write_tokens, u.cache_write_1h_tokens, u.output_tokens), (Some(4300), Some(4300), 6));
    let d = u.cache_diagnostics.unwrap();
    assert_eq!((d.reason.as_str(), d.missed_tokens), ("tools_changed", Some(4100)));
    let e = u.context_edits.unwrap();
    assert_eq!((e[0].cleared_tool_uses, e[0].cleared_input_tokens), (Some(3), 2600));
}

#[test]
fn a_chat_completion_with_more_than_one_choice_is_refused() {
    let two = json!({"choices":[
        {"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},
        {"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"stop"}]});
    let e = parse_response(Renderer::OpenAi, &two).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(&e, "field"), "response.choices");
    assert_eq!(field(&e, "choices"), 2);
    assert!(e.message().contains("has 2 choices; a response with more than one choice (`n` > 1) cannot be recorded"), "{}", e.message());
    // Streamed: refused at the first chunk of the second choice.
    let mut s = StreamAccumulator::new(Renderer::OpenAi);
    s.feed(b"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n").unwrap();
    let e =
        s.feed(b"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n").unwrap_err();
    assert_eq!(field(&e, "stream"), "malformed");
    assert_eq!(field(&e, "choice"), 1);
    assert!(e.message().contains("choice 1 arrived: a response with more than one choice"), "{}", e.message());
}

#[test]
fn a_gemini_response_with_more_than_one_candidate_is_refused() {
    let two = json!({"candidates":[
        {"index":0,"content":{"role":"model","parts":[{"text":"a"}]},"finishReason":"STOP"},
        {"index":1,"content":{"role":"model","parts":[{"text":"b"}]},"finishReason":"STOP"}]});
    let e = parse_response(Renderer::Gemini, &two).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(&e, "field"), "response.candidates");
    assert_eq!(field(&e, "candidates"), 2);
    assert!(
        e.message().contains("has 2 candidates; a response with more than one candidate (`candidateCount` > 1) cannot be recorded"),
        "{}",
        e.message()
    );
    // One candidate, with or without its index, is as before.
    let one = json!({"candidates":[{"index":0,"content":{"role":"model","parts":[{"text":"a"}]},"finishReason":"STOP"}]});
    assert_eq!(parse_response(Renderer::Gemini, &one).unwrap().finish_reason.as_deref(), Some("stop"));
    // Streamed: refused at the first chunk of the second candidate, whether it comes alone
    // (with its index) or beside the first in one chunk.
    let mut s = StreamAccumulator::new(Renderer::Gemini);
    s.feed(b"data: {\"candidates\":[{\"index\":0,\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"a\"}]}}]}\n\n").unwrap();
    let e =
        s.feed(b"data: {\"candidates\":[{\"index\":1,\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"b\"}]}}]}\n\n").unwrap_err();
    assert_eq!(field(&e, "stream"), "malformed");
    assert_eq!(field(&e, "candidate"), 1);
    assert!(e.message().contains("candidate 1 arrived: a response with more than one candidate"), "{}", e.message());
    let mut s = StreamAccumulator::new(Renderer::Gemini);
    let e = s
        .feed(b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}},{\"content\":{\"parts\":[{\"text\":\"b\"}]}}]}\n\n")
        .unwrap_err();
    assert_eq!(field(&e, "candidate"), 1);
    // A JSON-array stream likewise.
    let mut s = StreamAccumulator::new(Renderer::Gemini);
    let array = format!("[{two}]");
    let e = s.feed(array.as_bytes()).unwrap_err();
    assert_eq!(field(&e, "candidate"), 1);
}

// ---------------------------------------------------------------------------------------------
// Recorded traffic that broke: streamed call arguments (Interactions, Gemini 3) and error
// answers.

#[test]
fn interactions_streamed_call_arguments_are_recorded_never_empty() {
    // `step.delta` {"type":"arguments_delta","arguments":"..."}: the call's arguments, put
    // together, whatever the chunking (the fixture is in FIXTURES, cut at every byte).
    let (p, _) = run(Renderer::GeminiInteractions, &data("gemini-interactions-tools.sse"), &[]);
    let (_, _, args) = p.message.tool_calls().next().unwrap();
    assert_eq!(args, r#"{"lines":20,"path":"café.txt"}"#);
    // Recorded by an agent, and sent back with them.
    let session = Session::in_memory();
    let mut agent = Agent::new(&session, AgentOptions::new(CallConfig::new("gemini", "gemini-3-flash-preview"))).unwrap();
    agent.set_renderer(Renderer::GeminiInteractions, llmsession::render::RenderOptions::default()).unwrap();
    agent.start_turn(Message::user_text("Lis café.txt")).unwrap();
    agent.next_body(&CancelToken::new()).unwrap();
    let mut s = StreamAccumulator::new(Renderer::GeminiInteractions);
    s.feed(&data("gemini-interactions-tools.sse")).unwrap();
    agent.record_stream(&mut s, false).unwrap();
    agent.record_tool_result(llmsession::agent::ToolResultInput { call_id: "fc_7q2x".into(), content: vec![], is_error: false }).unwrap();
    let body: Value = serde_json::from_str(&agent.next_body(&CancelToken::new()).unwrap().json).unwrap();
    let call = body["input"].as_array().unwrap().iter().find(|s| s["type"] == "function_call").unwrap().clone();
    assert_eq!(call["arguments"], json!({"path":"café.txt","lines":20}));
    // A call step takes only its arguments and its signature: anything else (the guessed
    // `arguments` type among them) is refused rather than lost, and a step left open at the end
    // is complete with the interaction.
    let start = "data: {\"event_type\":\"step.start\",\"index\":0,\"step\":{\"type\":\"function_call\",\"id\":\"f\",\"name\":\"n\"}}\n\n";
    for (delta, want) in [
        ("{\"type\":\"arguments\",\"arguments\":\"{}\"}", "a `arguments` delta for function call step 0"),
        ("{\"type\":\"text\",\"text\":\"x\"}", "a `text` delta for function call step 0"),
        ("{\"type\":\"arguments_delta\",\"arguments\":7}", "the `arguments` of an `arguments_delta` must be a string"),
    ] {
        let mut s = StreamAccumulator::new(Renderer::GeminiInteractions);
        let e = s.feed(format!("{start}data: {{\"event_type\":\"step.delta\",\"index\":0,\"delta\":{delta}}}\n\n").as_bytes()).unwrap_err();
        assert_eq!(field(&e, "stream"), "malformed");
        assert!(e.message().contains(want), "{}", e.message());
    }
    let mut s = StreamAccumulator::new(Renderer::GeminiInteractions);
    s.feed(format!("{start}data: {{\"event_type\":\"step.delta\",\"index\":0,\"delta\":{{\"type\":\"arguments_delta\",\"arguments\":\"{{\\\"a\\\":1}}\"}}}}\n\ndata: {{\"event_type\":\"interaction.completed\",\"interaction\":{{\"id\":\"i\",\"status\":\"requires_action\"}}}}\n\n").as_bytes())
        .unwrap();
    assert_eq!(s.finish(false).unwrap().message.tool_calls().next().unwrap().2, r#"{"a":1}"#);
}

#[test]
fn gemini_streamed_function_call_arguments_make_one_call() {
    // Gemini 3 with streamed arguments: the first part names the call (willContinue), the next
    // carry partialArgs without a name, an empty functionCall (or a part without willContinue)
    // completes it. The fixture is in FIXTURES (every cut, both readers' rules).
    let want = parse_response(Renderer::Gemini, &body_of("gemini-streamed-args.json")).unwrap();
    let (got, deltas) = run(Renderer::Gemini, &data("gemini-streamed-args.sse"), &[]);
    assert_eq!(got, want);
    let calls: Vec<_> = got.message.tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1, "get_weather");
    let args: Value = serde_json::from_str(calls[0].2).unwrap();
    assert_eq!(
        args,
        json!({"location":"Boston, MA","unit":"celsius","days":3,"hourly":false,"options":{"lang":"fr"},"stops":["Cambridge","Salem 🌊"],"note":null})
    );
    assert_eq!((calls[1].1, calls[1].2), ("get_time", r#"{"zone":"America/New_York"}"#));
    // The signature of the call's first part stays on the call.
    assert_eq!(got.message.content[1].get_str("thoughtSignature"), Some("Q2FsbFNpZ0dlbWluaTM="));
    // Deltas: the name first, then the arguments as one fragment when the call is complete.
    let of_call = |n: usize| deltas.iter().filter(|d| d.kind == DeltaKind::ToolCall && d.index == n).collect::<Vec<_>>();
    assert_eq!(of_call(0)[0].name.as_deref(), Some("get_weather"));
    assert_eq!(of_call(0).iter().filter_map(|d| d.arguments.as_deref()).collect::<String>(), calls[0].2);
    assert_eq!(of_call(1).iter().filter_map(|d| d.arguments.as_deref()).collect::<String>(), calls[1].2);
    // The same chunks as a JSON array (no alt=sse).
    let text = String::from_utf8(data("gemini-streamed-args.sse")).unwrap();
    let elements: Vec<&str> = text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect();
    let array = format!("[{}]", elements.join(",\r\n"));
    let (got_array, _) = run(Renderer::Gemini, array.as_bytes(), &[]);
    assert_eq!(got_array, want);
    // Cut inside the second call: the first is kept, the cut one left out.
    let cut = text.find("America").unwrap();
    let cut = text[..cut].rfind("data: ").unwrap();
    let mut s = StreamAccumulator::new(Renderer::Gemini);
    s.feed(&text.as_bytes()[..cut]).unwrap();
    let p = s.finish(true).unwrap();
    assert_eq!(p.message.tool_calls().map(|c| c.1).collect::<Vec<_>>(), vec!["get_weather"]);

    // What cannot be put together is refused, never guessed.
    let chunk = |call: Value| format!("data: {}\n\n", json!({"candidates":[{"content":{"role":"model","parts":[{"functionCall":call}]}}]}));
    let open = chunk(json!({"name":"f","willContinue":true}));
    let bad: Vec<(String, &str)> = vec![
        (chunk(json!({"partialArgs":[{"jsonPath":"$.a","stringValue":"x"}]})), "streamed function call 0 ended without its `name`"),
        (format!("{open}{}", chunk(json!({"name":"g","willContinue":true}))), "was streamed as \"f\" and then as \"g\""),
        (
            format!(
                "{open}{}",
                chunk(
                    json!({"partialArgs":[{"jsonPath":"$.a","stringValue":"x"},{"jsonPath":"$.a","stringValue":"y"}],"willContinue":true})
                )
            ),
            "the streamed argument $.a was given twice",
        ),
        (
            format!(
                "{open}{}",
                chunk(json!({"partialArgs":[{"jsonPath":"$.a","numberValue":1},{"jsonPath":"$.a.b","numberValue":2}],"willContinue":true}))
            ),
            "the streamed argument $.a.b goes through a value that is not an object",
        ),
        (format!("{open}{}", chunk(json!({"partialArgs":[{"jsonPath":"a.b","stringValue":"x"}]}))), "cannot read the JSON path \"a.b\""),
        (format!("{open}{}", chunk(json!({"partialArgs":[{"jsonPath":"$.a"}]}))), "has no value"),
        (
            format!("{open}data: {}\n\n", json!({"candidates":[{"content":{"role":"model","parts":[]},"finishReason":"STOP"}]})),
            "the answer finished while function call 0 was still streaming",
        ),
    ];
    for (stream, want) in bad {
        let e = StreamAccumulator::new(Renderer::Gemini).feed(stream.as_bytes()).unwrap_err();
        assert_eq!(field(&e, "stream"), "malformed", "{}", e.message());
        assert!(e.message().contains(want), "{}\nwanted: {want}", e.message());
    }
}

#[test]
fn error_answers_are_refused_in_every_format_and_nothing_is_recorded() {
    // Error bodies as the providers document them (an HTTP 400 or 429 answer's body).
    let cases: &[(Renderer, Value, &str, bool)] = &[
        (
            Renderer::OpenAi,
            json!({"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}),
            "invalid_request_error (context_length_exceeded): This model's maximum context length is 128000 tokens.",
            true,
        ),
        (
            Renderer::OpenAiResponses,
            json!({"error":{"message":"Invalid type for 'input[2].content': expected an array.","type":"invalid_request_error","param":"input[2].content","code":"invalid_type"}}),
            "invalid_request_error (invalid_type): Invalid type for 'input[2].content': expected an array.",
            false,
        ),
        (
            Renderer::OpenAiResponses,
            json!({"error":{"message":"Rate limit reached for gpt-5 on tokens per min (TPM): Limit 30000, Used 29120, Requested 2046.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}),
            "tokens (rate_limit_exceeded): Rate limit reached for gpt-5 on tokens per min (TPM): Limit 30000, Used 29120, Requested 2046.",
            false,
        ),
        (
            Renderer::Anthropic,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}),
            "invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum",
            true,
        ),
        (
            Renderer::Gemini,
            json!({"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}),
            "RESOURCE_EXHAUSTED (429): Resource has been exhausted (e.g. check quota).",
            false,
        ),
        (
            Renderer::GeminiInteractions,
            json!({"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT"}}),
            "INVALID_ARGUMENT (400): Request contains an invalid argument.",
            false,
        ),
    ];
    for (format, body, quoted, overflow) in cases {
        let e = parse_response(*format, body).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", format.name());
        assert_eq!(e.message(), format!("the provider answered with an error, not a message: {quoted}"), "{}", format.name());
        assert_eq!(field(&e, "providerError"), &body["error"]);
        assert_eq!(field(&e, "overflow"), &Value::Bool(*overflow), "{}", format.name());
        // Recorded as a body: refused, and nothing changes in the log; the step stays open.
        let session = Session::in_memory();
        let mut agent = Agent::new(&session, AgentOptions::new(CallConfig::new("p", "m"))).unwrap();
        agent.set_renderer(*format, llmsession::render::RenderOptions::default()).unwrap();
        agent.start_turn(Message::user_text("q")).unwrap();
        agent.next_body(&CancelToken::new()).unwrap();
        let before = session.with_log(|l| l.len());
        let e = agent.record_body(&body.to_string()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(
            e.message().starts_with(&format!("a {} response body: the provider answered with an error", format.name())),
            "{}",
            e.message()
        );
        assert!(e.message().ends_with(quoted), "{}", e.message());
        assert_eq!(session.with_log(|l| l.len()), before, "{}: nothing was logged", format.name());
        agent.report_provider_error(e.message(), *overflow, &CancelToken::new()).ok();
    }
    // A failed Responses or Interactions object quotes its error the same way.
    let e = parse_response(
        Renderer::OpenAiResponses,
        &json!({"id":"r","status":"failed","output":[],"error":{"code":"server_error","message":"The model failed to generate a response."}}),
    )
    .unwrap_err();
    assert_eq!(e.message(), "response.status: the response failed: server_error: The model failed to generate a response.");
    // A successful Responses object has "error": null: not an error.
    let ok = parse_response(Renderer::OpenAiResponses, &json!({"id":"r","status":"completed","error":null,"output":[]})).unwrap();
    assert_eq!(ok.finish_reason.as_deref(), Some("stop"));
}
