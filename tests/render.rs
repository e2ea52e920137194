//! The renderers' prefix property and determinism, through the public API.

use llmsession::render::{render_anthropic, render_gemini, render_interactions, render_openai, render_responses, RenderOptions, Renderer};
use llmsession::ErrorKind;
use proptest::prelude::*;
use serde_json::{json, Value};

fn text(t: &str) -> Value {
    json!({"type":"text","text":t})
}
fn user(t: &str) -> Value {
    json!({"role":"user","content":[text(t)]})
}
fn call(id: &str, name: &str, args: &str) -> Value {
    json!({"type":"tool-call","id":id,"name":name,"arguments":args})
}
fn result(id: &str, out: &str, is_error: bool) -> Value {
    json!({"role":"user","content":[{"type":"tool-result","toolCallId":id,"isError":is_error,"content":[text(out)]}]})
}
fn assistant(blocks: Vec<Value>) -> Value {
    json!({"role":"assistant","content":blocks,"provenance":{"provider":"p","model":"m"}})
}

fn tools() -> Value {
    json!([
        {"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}},
        {"name":"bash","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}
    ])
}

/// Two session prefixes of 2 messages: one with a system-role message, one with an assistant
/// acknowledgement.
fn prefixes() -> Vec<Vec<Value>> {
    vec![
        vec![json!({"role":"system","content":[text("Only edit files under src/.")]}), user("<project>\nA Rust crate.\n</project>")],
        vec![user("<project>\nA Rust crate.\n</project>"), assistant(vec![text("Understood.")])],
    ]
}

/// A multi-step conversation: tool calls, reasoning (signed and unsigned), parallel results,
/// an error result, injected context and an image.
fn history() -> Vec<Value> {
    vec![
        user("Fix the failing test."),
        assistant(vec![
            json!({"type":"reasoning","text":"Look at the test first.","signature":"c2ln"}),
            text("Let me look."),
            call("c1", "read", r#"{"path":"tests/a.rs"}"#),
            call("c2", "bash", r#"{"cmd":"cargo test"}"#),
        ]),
        result("c1", "fn a() { assert!(false) }", false),
        result("c2", "1 failed", false),
        user("<context>CI is red on main.</context>"),
        assistant(vec![json!({"type":"reasoning","text":"Edit it."}), call("c3", "bash", r#"{"cmd":"sed -i s/false/true/ tests/a.rs"}"#)]),
        result("c3", "permission denied", true),
        assistant(vec![call("c4", "bash", r#"{"cmd":"sudo true"}"#)]),
        result("c4", "ok", false),
        // Native state of two providers: each renderer carries its own back and drops the other's.
        assistant(vec![
            json!({"type":"reasoning","text":"Check.","origin":"gemini","thoughtSignature":"Z2VtaW5p"}),
            json!({"type":"reasoning","text":"Done?","origin":"openai-responses",
                   "item":{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Done?"}],"encrypted_content":"ZW5j"}}),
            json!({"type":"opaque","origin":"openai-responses","item":{"type":"compaction","id":"cmp_1","encrypted_content":"Y21w"}}),
            text("Fixed."),
        ]),
        json!({"role":"user","content":[text("Does this screenshot look right?"),
               {"type":"image","mediaType":"image/png","data":"iVBORw0KGgo="}]}),
        assistant(vec![text("Yes.")]),
        user("Thanks."),
    ]
}

fn envelope(prefix: &[Value], history: &[Value], len: usize) -> Value {
    let messages: Vec<Value> = prefix.iter().chain(history).take(len).cloned().collect();
    json!({
        "provider":"p","model":"m","temperature":0.5,"maxTokens":1000,"top_p":0.9,
        "system":"You are a coding agent.","tools":tools(),"messages":messages,
        "sessionId":"s1","purpose":"conversation","turn":0,"step":len
    })
}

fn tool_results_only(m: &Value) -> bool {
    m["role"] == "user" && m["content"].as_array().is_some_and(|c| !c.is_empty() && c.iter().all(|b| b["type"] == "tool-result"))
}

/// `A` (the first `k` messages) ends at a request boundary: it does not stop inside a run of
/// tool results that the next message continues.
fn boundary(all: &[Value], k: usize) -> bool {
    k == 0 || k == all.len() || !(tool_results_only(&all[k - 1]) && tool_results_only(&all[k]))
}

fn count_markers(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.iter().map(|(k, v)| usize::from(k == "cache_control") + count_markers(v)).sum(),
        Value::Array(a) => a.iter().map(count_markers).sum(),
        _ => 0,
    }
}

/// The (message, block) positions of the cache markers in a body's messages.
fn markers(body: &Value) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, m) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (j, b) in m["content"].as_array().unwrap().iter().enumerate() {
            if b.get("cache_control").is_some() {
                out.push((k, j));
            }
        }
    }
    out
}

/// The position of the last block that may carry a marker (thinking blocks may not).
fn last_cacheable(body: &Value) -> Option<(usize, usize)> {
    let msgs = body["messages"].as_array().unwrap();
    msgs.iter().enumerate().rev().find_map(|(k, m)| {
        let blocks = m["content"].as_array().unwrap();
        blocks.iter().rposition(|b| b["type"] != "thinking" && b["type"] != "redacted_thinking").map(|j| (k, j))
    })
}

/// A body's messages with every cache marker removed.
fn unmarked(body: &Value) -> Vec<Value> {
    let mut msgs = body["messages"].as_array().unwrap().clone();
    for m in &mut msgs {
        for b in m["content"].as_array_mut().unwrap() {
            b.as_object_mut().unwrap().remove("cache_control");
        }
    }
    msgs
}

/// An OpenAI body's items (`key`) without `prompt_cache_breakpoint` marks (a marked single text
/// part back to the string it was), and the indices of the marked items.
fn openai_unmarked(body: &Value, key: &str) -> (Vec<Value>, Vec<usize>) {
    let mut items = body[key].as_array().unwrap().clone();
    let mut marked = Vec::new();
    for (k, item) in items.iter_mut().enumerate() {
        let field = if item["type"] == "function_call_output" { "output" } else { "content" };
        let mut hit = false;
        if let Some(parts) = item.get_mut(field).and_then(Value::as_array_mut) {
            for part in parts.iter_mut() {
                hit |= part.as_object_mut().unwrap().remove("prompt_cache_breakpoint").is_some();
            }
        }
        if hit {
            marked.push(k);
            let parts = item[field].as_array().unwrap();
            // Chat completions' string contents and Responses' string outputs became one part.
            let stringy = field == "output" || item.get("type").is_none();
            if stringy && parts.len() == 1 && matches!(parts[0]["type"].as_str(), Some("text" | "input_text")) {
                item[field] = parts[0]["text"].clone();
            }
        }
    }
    (items, marked)
}

/// OpenAI with breakpoints (both formats): every body is the unmarked body with at most three
/// marks; the fixed ones (system prompt, prefix end) stay where they are as the envelope
/// grows, and the unmarked items extend.
fn check_openai_breakpoints(prefix: &[Value], history: &[Value]) {
    let all = prefix.len() + history.len();
    let p = prefix.len();
    let opts = RenderOptions::with_prefix_len(p).with_cache_breakpoints(true);
    for (r, key) in [(Renderer::OpenAi, "messages"), (Renderer::OpenAiResponses, "input")] {
        let plain: Vec<Value> =
            (p..=all).map(|k| r.render(&envelope(prefix, history, k), &RenderOptions::with_prefix_len(p)).unwrap()).collect();
        let marked: Vec<Value> = (p..=all).map(|k| r.render(&envelope(prefix, history, k), &opts).unwrap()).collect();
        for k in p..=all {
            let (a, am) = openai_unmarked(&marked[k - p], key);
            assert_eq!(a, plain[k - p][key].as_array().unwrap()[..], "{} k={k}: marks only add marks", r.name());
            assert!(!am.is_empty() && am.len() <= 3, "{} k={k}: {am:?}", r.name());
            for l in k + 1..=all {
                let (b, bm) = openai_unmarked(&marked[l - p], key);
                assert!(a.len() <= b.len() && a[..] == b[..a.len()], "{} k={k} l={l}", r.name());
                // A's marks but its history mark are B's too.
                for m in &am[..am.len() - 1] {
                    assert!(bm.contains(m), "{} k={k} l={l}: mark {m} moved ({am:?} -> {bm:?})", r.name());
                }
            }
        }
    }
}

fn without_messages(body: &Value) -> Value {
    let mut rest = body.clone();
    rest.as_object_mut().unwrap().remove("messages");
    rest
}

/// Checks that the rendered body of every boundary-ending envelope extends into every longer one.
fn check_prefix_property(prefix: &[Value], history: &[Value]) {
    let all: Vec<Value> = prefix.iter().chain(history).cloned().collect();
    let p = prefix.len();
    let opts = RenderOptions::with_prefix_len(p);
    let oa: Vec<Value> = (p..=all.len()).map(|k| render_openai(&envelope(prefix, history, k)).unwrap()).collect();
    let an: Vec<Value> = (p..=all.len()).map(|k| render_anthropic(&envelope(prefix, history, k), &opts).unwrap()).collect();
    let rs: Vec<Value> = (p..=all.len()).map(|k| render_responses(&envelope(prefix, history, k), &opts).unwrap()).collect();
    let ge: Vec<Value> = (p..=all.len()).map(|k| render_gemini(&envelope(prefix, history, k), &opts).unwrap()).collect();
    let gi: Vec<Value> = (p..=all.len()).map(|k| render_interactions(&envelope(prefix, history, k), &opts).unwrap()).collect();
    // The prefix breakpoint, fixed for the whole instance: where the prefix-only body has its mark.
    let prefix_mark = last_cacheable(&an[0]);
    for k in p..=all.len() {
        let (a_oa, a_an) = (&oa[k - p], &an[k - p]);
        // Anthropic markers: the system prompt's end, the prefix end and the end of history,
        // nowhere else.
        let mut want: Vec<(usize, usize)> = prefix_mark.into_iter().chain(last_cacheable(a_an)).collect();
        want.dedup();
        assert_eq!(markers(a_an), want, "k={k}");
        assert_eq!(a_an["system"][0]["cache_control"], json!({"type":"ephemeral"}), "k={k}");
        // (With only system-role prefix messages, the last hoisted block ends the prefix.)
        let hoisted_mark = usize::from(prefix_mark.is_none() && a_an["system"].as_array().unwrap().len() > 1);
        assert_eq!(count_markers(a_an), want.len() + 1 + hoisted_mark, "k={k}: markers outside messages");
        for l in k + 1..=all.len() {
            let (b_oa, b_an) = (&oa[l - p], &an[l - p]);
            // OpenAI-compatible: every envelope extension is a body extension.
            let (am, bm) = (a_oa["messages"].as_array().unwrap(), b_oa["messages"].as_array().unwrap());
            assert!(am.len() <= bm.len() && am[..] == bm[..am.len()], "openai k={k} l={l}");
            assert_eq!(without_messages(a_oa), without_messages(b_oa), "openai k={k} l={l}");

            // Anthropic: the same apart from the markers (checked above: only the end-of-history
            // one moves), when A ends at a request boundary.
            let (am, bm) = (unmarked(a_an), unmarked(b_an));
            if boundary(&all, k) {
                assert!(am.len() <= bm.len() && am[..] == bm[..am.len()], "anthropic k={k} l={l}\nA={am:#?}\nB={bm:#?}");
            } else {
                // Inside a run of tool results, only A's last (merged) message differs: its
                // blocks are a prefix of the same message in B.
                let n = am.len() - 1;
                assert_eq!(am[..n], bm[..n], "anthropic mid-run k={k} l={l}");
                let (ab, bb) = (am[n]["content"].as_array().unwrap(), bm[n]["content"].as_array().unwrap());
                assert!(ab.len() < bb.len() && ab[..] == bb[..ab.len()], "anthropic mid-run k={k} l={l}");
            }
            assert_eq!(without_messages(a_an), without_messages(b_an), "anthropic k={k} l={l}");

            // Responses API: every input item of A starts B's input; the rest is equal.
            let (a_rs, b_rs) = (&rs[k - p], &rs[l - p]);
            extends(a_rs, b_rs, "input", true, &format!("openai-responses k={k} l={l}"));
            // Gemini: contents extend as Anthropic's messages do (results of a step merge).
            let (a_ge, b_ge) = (&ge[k - p], &ge[l - p]);
            extends(a_ge, b_ge, "contents", boundary(&all, k), &format!("gemini k={k} l={l}"));
            // Gemini Interactions: every input step of A starts B's input; the rest is equal.
            extends(&gi[k - p], &gi[l - p], "input", true, &format!("gemini-interactions k={k} l={l}"));
        }
    }
}

/// B's `key` array extends A's and every other field is equal. When A does not end at a
/// request boundary, A's last entry may instead be a prefix (in `parts`) of B's entry there.
fn extends(a: &Value, b: &Value, key: &str, at_boundary: bool, what: &str) {
    let (am, bm) = (a[key].as_array().unwrap(), b[key].as_array().unwrap());
    assert!(am.len() <= bm.len(), "{what}: A is longer\nA={am:#?}\nB={bm:#?}");
    if at_boundary || am.is_empty() {
        assert_eq!(am[..], bm[..am.len()], "{what}");
    } else {
        let n = am.len() - 1;
        assert_eq!(am[..n], bm[..n], "{what}");
        let (ap, bp) = (am[n]["parts"].as_array().unwrap(), bm[n]["parts"].as_array().unwrap());
        assert!(ap.len() <= bp.len() && ap[..] == bp[..ap.len()], "{what} mid-run");
    }
    let strip = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove(key);
        v
    };
    assert_eq!(strip(a), strip(b), "{what}");
}

#[test]
fn prefix_property_on_a_multi_step_conversation() {
    for prefix in prefixes() {
        check_prefix_property(&prefix, &history());
    }
}

#[test]
fn anthropic_breakpoints_sit_at_system_end_prefix_end_and_history_end() {
    let prefix = &prefixes()[0];
    let h = history();
    let body = render_anthropic(&envelope(prefix, &h, prefix.len() + h.len()), &RenderOptions::with_prefix_len(2)).unwrap();
    // The system-role prefix message was hoisted after the system prompt.
    // It carries the end-of-system mark; the prefix mark is on the prefix's user message.
    let mut marked = text("You are a coding agent.");
    marked["cache_control"] = json!({"type":"ephemeral"});
    assert_eq!(body["system"], json!([marked, text("Only edit files under src/.")]));
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["content"][0]["cache_control"], json!({"type":"ephemeral"}));
    assert_eq!(msgs.last().unwrap()["content"][0]["cache_control"], json!({"type":"ephemeral"}));
    assert_eq!(count_markers(&body), 3);
    // The two parallel results share one user message.
    let merged = msgs.iter().find(|m| m["content"][0]["tool_use_id"] == "c1").unwrap();
    assert_eq!(merged["content"].as_array().unwrap().len(), 2);
    assert_eq!(merged["content"][1]["tool_use_id"], "c2");
    // Unsigned reasoning is dropped; signed reasoning is a thinking block.
    assert_eq!(msgs[2]["content"][0]["type"], "thinking");
    assert!(msgs.iter().all(|m| m["content"].as_array().unwrap().iter().all(|b| b.get("thinking") != Some(&json!("Edit it.")))));
}

#[test]
fn openai_carries_the_whole_conversation() {
    let prefix = &prefixes()[0];
    let h = history();
    let body = render_openai(&envelope(prefix, &h, prefix.len() + h.len())).unwrap();
    let msgs = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "tool",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    assert_eq!(msgs[4]["reasoning_content"], "Look at the test first.");
    assert_eq!(msgs[8]["reasoning_content"], "Edit it.");
    assert_eq!(msgs[8]["content"], Value::Null);
    assert_eq!(body["top_p"], json!(0.9));
}

#[test]
fn equal_input_gives_byte_identical_output() {
    let prefix = &prefixes()[0];
    let h = history();
    let env = envelope(prefix, &h, prefix.len() + h.len());
    // A copy that went through text, with its keys in a different order.
    let text = serde_json::to_string(&env).unwrap();
    let reparsed: Value = serde_json::from_str(&text).unwrap();
    for r in Renderer::ALL {
        let opts = RenderOptions::with_prefix_len(2);
        let a = serde_json::to_vec(&r.render(&env, &opts).unwrap()).unwrap();
        let b = serde_json::to_vec(&r.render(&env, &opts).unwrap()).unwrap();
        let c = serde_json::to_vec(&r.render(&reparsed, &opts).unwrap()).unwrap();
        assert_eq!(a, b, "{}", r.name());
        assert_eq!(a, c, "{}", r.name());
    }
}

#[test]
fn renderer_dispatches_to_the_functions() {
    let prefix = &prefixes()[1];
    let env = envelope(prefix, &history(), 5);
    let opts = RenderOptions::with_prefix_len(2);
    assert_eq!(Renderer::parse("openai").unwrap().render(&env, &opts).unwrap(), render_openai(&env).unwrap());
    assert_eq!(Renderer::parse("anthropic").unwrap().render(&env, &opts).unwrap(), render_anthropic(&env, &opts).unwrap());
    assert_eq!(Renderer::parse("openai-responses").unwrap().render(&env, &opts).unwrap(), render_responses(&env, &opts).unwrap());
    assert_eq!(Renderer::parse("gemini").unwrap().render(&env, &opts).unwrap(), render_gemini(&env, &opts).unwrap());
}

#[test]
fn errors_are_invalid_input_naming_message_and_block() {
    let mut h = history();
    h.push(json!({"role":"user","content":[text("x"),{"type":"audio","data":"AAAA"}]}));
    let env = envelope(&prefixes()[0], &h, 2 + h.len());
    let opts = RenderOptions::with_prefix_len(2);
    for r in Renderer::ALL {
        let e = r.render(&env, &opts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let idx = 2 + h.len() - 1;
        assert_eq!(
            e.message(),
            format!("messages[{idx}].content[1]: block type \"audio\" is not supported in a user message by the {} renderer", r.name())
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Random conversations.

/// One agent step, generated: reasoning (0 none, 1 unsigned, 2 signed), whether there is text,
/// how many tool calls, whether context is injected after the results, whether the user speaks
/// after the step.
#[derive(Debug, Clone)]
struct Step {
    reasoning: u8,
    has_text: bool,
    calls: usize,
    inject: bool,
    user_after: bool,
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (0u8..3, any::<bool>(), 0usize..4, any::<bool>(), any::<bool>()).prop_map(|(reasoning, has_text, calls, inject, user_after)| Step {
        reasoning,
        has_text,
        calls,
        inject,
        user_after,
    })
}

fn build(steps: &[Step]) -> Vec<Value> {
    let mut h = vec![user("start")];
    let mut n = 0;
    for (s_i, s) in steps.iter().enumerate() {
        let mut blocks = Vec::new();
        match s.reasoning {
            1 => blocks.push(json!({"type":"reasoning","text":format!("think {s_i}")})),
            2 => blocks.push(json!({"type":"reasoning","text":format!("think {s_i}"),"signature":"sig"})),
            _ => {}
        }
        if s.has_text || (s.calls == 0 && s.reasoning == 0) {
            blocks.push(text(&format!("answer {s_i}")));
        }
        let ids: Vec<String> = (0..s.calls)
            .map(|_| {
                n += 1;
                format!("call{n}")
            })
            .collect();
        for id in &ids {
            blocks.push(call(id, "read", &format!(r#"{{"n":{n}}}"#)));
        }
        h.push(assistant(blocks));
        for id in &ids {
            h.push(result(id, &format!("out {id}"), false));
        }
        if s.inject {
            h.push(user(&format!("<context>{s_i}</context>")));
        }
        if s.user_after || (ids.is_empty() && !s.inject) {
            h.push(user(&format!("more {s_i}")));
        }
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn prefix_property_on_random_conversations(steps in prop::collection::vec(step_strategy(), 1..5), which in 0usize..2) {
        check_prefix_property(&prefixes()[which], &build(&steps));
        check_openai_breakpoints(&prefixes()[which], &build(&steps));
    }
}

#[test]
fn native_state_goes_back_only_to_its_own_provider() {
    let prefix = &prefixes()[1];
    let h = history();
    let env = envelope(prefix, &h, prefix.len() + h.len());
    let opts = RenderOptions::with_prefix_len(2);
    let text_of = |r: Renderer| serde_json::to_string(&r.render(&env, &opts).unwrap()).unwrap();
    let (oa, an, rs, ge) =
        (text_of(Renderer::OpenAi), text_of(Renderer::Anthropic), text_of(Renderer::OpenAiResponses), text_of(Renderer::Gemini));
    // The Responses API gets its reasoning item and compaction item back, verbatim.
    assert!(rs.contains(r#""encrypted_content":"ZW5j""#) && rs.contains(r#""type":"compaction""#), "{rs}");
    assert!(!rs.contains("Z2VtaW5p") && !rs.contains("c2ln"), "{rs}");
    // Gemini gets its thought with its signature; Anthropic gets its signed thinking.
    assert!(ge.contains(r#""thoughtSignature":"Z2VtaW5p""#) && !ge.contains("ZW5j") && !ge.contains("c2ln"), "{ge}");
    assert!(an.contains(r#""signature":"c2ln""#) && !an.contains("ZW5j") && !an.contains("Z2VtaW5p"), "{an}");
    // Chat completions carry no provider's native state; the text stays everywhere.
    assert!(!oa.contains("ZW5j") && !oa.contains("Z2VtaW5p") && !oa.contains("Check.") && !oa.contains("Done?"), "{oa}");
    for body in [&oa, &an, &rs, &ge] {
        assert!(body.contains("Fixed."));
    }
}

// ---------------------------------------------------------------------------------------------
// Tools: provider tools, optional descriptions, the OpenAI function shape.

fn render(r: Renderer, env: &Value) -> llmsession::Result<Value> {
    r.render(env, &RenderOptions::default())
}

/// A function tool given in OpenAI's shape, with no description.
fn read_tool_openai_shape() -> Value {
    json!({"type":"function","function":{"name":"read","parameters":{"type":"object"},"strict":true}})
}

#[test]
fn provider_tools_go_verbatim_to_their_own_format_only() {
    // Each provider's server-side tools, in its documented shape, beside a function tool.
    let anthropic = [
        json!({"type":"web_search_20250305","name":"web_search","max_uses":5}),
        json!({"type":"web_fetch_20250910","name":"web_fetch"}),
        json!({"type":"code_execution_20250825","name":"code_execution"}),
    ];
    let responses = [
        json!({"type":"web_search"}),
        json!({"type":"file_search","vector_store_ids":["vs_1"]}),
        json!({"type":"code_interpreter","container":{"type":"auto"}}),
        json!({"type":"mcp","server_label":"deepwiki","server_url":"https://mcp.deepwiki.com/mcp","require_approval":"never"}),
    ];
    let gemini = [json!({"googleSearch":{}}), json!({"codeExecution":{}}), json!({"urlContext":{}})];
    let interactions = [json!({"type":"google_search"}), json!({"type":"code_execution"}), json!({"type":"url_context"})];
    for (renderer, provider_tools) in [
        (Renderer::Anthropic, &anthropic[..]),
        (Renderer::OpenAiResponses, &responses[..]),
        (Renderer::Gemini, &gemini[..]),
        (Renderer::GeminiInteractions, &interactions[..]),
    ] {
        let mut list = vec![read_tool_openai_shape()];
        list.extend(provider_tools.iter().map(|t| json!({"type":"provider","format":renderer.name(),"tool":t})));
        let env = json!({"model":"m","messages":[user("search")],"tools":list});
        let body = render(renderer, &env).unwrap();
        let sent: Vec<Value> = match renderer {
            // One tool of function declarations, then the provider tools in list order.
            Renderer::Gemini => {
                assert_eq!(
                    body["tools"][0],
                    json!({"functionDeclarations":[{"name":"read","parametersJsonSchema":{"type":"object"},"strict":true}]})
                );
                body["tools"].as_array().unwrap()[1..].to_vec()
            }
            _ => {
                let tools = body["tools"].as_array().unwrap();
                assert_eq!(tools[0]["name"], "read", "{}", renderer.name());
                assert!(tools[0].get("description").is_none(), "no description is sent: {}", tools[0]);
                tools[1..].iter().map(|t| strip_cache_mark(t.clone())).collect()
            }
        };
        assert_eq!(sent, provider_tools, "{}: verbatim, in order", renderer.name());
        // To any other format: an error naming the tool and both formats.
        for other in Renderer::ALL.into_iter().filter(|o| *o != renderer) {
            let e = render(other, &env).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.detail()["field"], "tools[1]", "{}", e.message());
            let want = format!("tools[1]: the {} provider tool ", renderer.name());
            assert!(e.message().starts_with(&want), "{}", e.message());
            assert!(e.message().contains(&format!("cannot be sent by the {} renderer", other.name())), "{}", e.message());
            // A summarisation request (which calls no tool) leaves it out instead.
            let mut compaction = env.clone();
            compaction["purpose"] = json!("compaction");
            let body = render(other, &compaction).unwrap();
            assert_eq!(body["tools"].as_array().map(Vec::len), Some(1), "{}: {}", other.name(), body["tools"]);
            assert!(body["tools"].to_string().contains("\"read\""), "{}", body);
        }
    }
    // An Anthropic provider tool without a system prompt carries the head breakpoint when last.
    let env = json!({"model":"m","messages":[user("q")],"tools":[{"type":"provider","format":"anthropic","tool":anthropic[0]}]});
    let body = render(Renderer::Anthropic, &env).unwrap();
    assert_eq!(body["tools"][0]["cache_control"], json!({"type":"ephemeral"}));
}

fn strip_cache_mark(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("cache_control");
    }
    v
}

#[test]
fn tool_lists_are_checked_and_canonical() {
    use llmsession::ToolSchema;
    // The OpenAI function shape and the flat one are stored in the canonical form.
    let canonical = json!({"name":"read","description":"Read a file","parameters":{"type":"object"},"strict":true});
    for given in [
        json!({"type":"function","function":{"name":"read","description":"Read a file","parameters":{"type":"object"},"strict":true}}),
        json!({"type":"function","name":"read","description":"Read a file","parameters":{"type":"object"},"strict":true}),
        canonical.clone(),
    ] {
        let t = ToolSchema::from_value(&given, "tools[0]").unwrap();
        assert_eq!(serde_json::to_value(&t).unwrap(), canonical, "{given}");
    }
    // A null or absent description is absent.
    for given in [json!({"name":"n","description":null,"parameters":{}}), json!({"name":"n","parameters":{}})] {
        let t = ToolSchema::from_value(&given, "t").unwrap();
        assert_eq!(t.description, None);
        assert_eq!(serde_json::to_value(&t).unwrap(), json!({"name":"n","parameters":{}}));
    }
    // A provider tool: its key in the list, its canonical form.
    let t = ToolSchema::from_value(
        &json!({"type":"provider","format":"openai-responses","tool":{"type":"mcp","server_label":"deepwiki","server_url":"u"}}),
        "t",
    )
    .unwrap();
    assert_eq!(t.name, "openai-responses:mcp:deepwiki");
    assert!(t.is_provider());
    let t = ToolSchema::from_value(&json!({"type":"provider","format":"gemini","tool":{"googleSearch":{}}}), "t").unwrap();
    assert_eq!(t.name, "gemini:googleSearch");
    assert_eq!(serde_json::to_value(&t).unwrap(), json!({"type":"provider","format":"gemini","tool":{"googleSearch":{}}}));
    let bad = [
        (json!([{"type":"web_search"}]), "tools[0].type: expected \"function\" or \"provider\", got \"web_search\"; a provider's own tool is declared as {\"type\":\"provider\",\"format\":\"anthropic\",\"tool\":{...the provider's tool object...}}"),
        (json!([{"type":"provider","format":"cohere","tool":{"type":"x"}}]), "tools[0].format: expected \"openai\", \"openai-responses\", \"anthropic\", \"gemini\" or \"gemini-interactions\""),
        (json!([{"type":"provider","format":"gemini","tool":{"a":{},"b":{}}}]), "tools[0].tool: names no tool"),
        (json!([{"type":"provider","format":"gemini","tool":{}}]), "tools[0].tool: names no tool"),
        (json!([{"type":"provider","format":"anthropic","tool":{"type":"web_fetch_20250910","name":"web_fetch"},"name":"x"}]), "tools[0].name: is not a field of a provider tool"),
        (json!([{"type":"provider","format":"anthropic","tool":[]}]), "tools[0].tool: expected an object, got an array"),
        (json!([{"type":"function","function":{"name":"a","parameters":{}},"strict":true}]), "tools[0].strict: is not a field of an OpenAI function tool"),
        (json!([{"type":"function","function":"a"}]), "tools[0].function: expected an object, got a string"),
        (json!([{"name":"a","description":3,"parameters":{}}]), "tools[0].description: expected a string or null, got a number"),
        (
            json!([{"type":"provider","format":"anthropic","tool":{"type":"web_search_20250305","name":"web_search"}},
                   {"type":"provider","format":"anthropic","tool":{"type":"web_search_20260101","name":"web_search"}}]),
            "tools[1].tool: duplicate tool name \"anthropic:web_search\"",
        ),
        (json!([read_tool_openai_shape(), {"name":"read","parameters":{}}]), "tools[1].name: duplicate tool name \"read\""),
    ];
    for (tools, want) in bad {
        let e = ToolSchema::list_from_value(&tools, "tools").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().starts_with(want), "{}\nwanted: {want}", e.message());
    }
}

#[test]
fn a_tool_without_a_description_is_sent_without_one() {
    let env = json!({"model":"m","messages":[user("q")],"tools":[{"name":"ls","description":null,"parameters":{"type":"object"}}]});
    for r in Renderer::ALL {
        let body = render(r, &env).unwrap();
        let text = body["tools"].to_string();
        assert!(text.contains("\"ls\"") && !text.contains("description"), "{}: {text}", r.name());
    }
}

// ---------------------------------------------------------------------------------------------
// Media: file blocks, images, empty user messages.

fn file(media_type: &str, source: (&str, &str)) -> Value {
    let mut b = json!({"type":"file","mediaType":media_type});
    b[source.0] = json!(source.1);
    b
}

fn with_block(b: Value) -> Value {
    json!({"model":"m","messages":[{"role":"user","content":[text("look"), b]}]})
}

/// The part a user message's second block renders to, for each format.
fn rendered_part(r: Renderer, body: &Value) -> Value {
    match r {
        Renderer::OpenAi => body["messages"][0]["content"][1].clone(),
        Renderer::OpenAiResponses | Renderer::GeminiInteractions => body["input"][0]["content"][1].clone(),
        Renderer::Anthropic => strip_cache_mark(body["messages"][0]["content"][1].clone()),
        Renderer::Gemini => body["contents"][0]["parts"][1].clone(),
    }
}

#[test]
fn file_blocks_render_in_every_format_that_takes_them() {
    let pdf = "JVBERi0xLjQK";
    let cases: Vec<(Value, [Result<Value, &str>; 5])> = vec![
        // A PDF inline, with its file name.
        (
            json!({"type":"file","mediaType":"application/pdf","data":pdf,"filename":"report.pdf"}),
            [
                Ok(json!({"type":"file","file":{"file_data":format!("data:application/pdf;base64,{pdf}"),"filename":"report.pdf"}})),
                Ok(json!({"type":"input_file","file_data":format!("data:application/pdf;base64,{pdf}"),"filename":"report.pdf"})),
                Ok(json!({"type":"document","source":{"type":"base64","media_type":"application/pdf","data":pdf},"title":"report.pdf"})),
                Ok(json!({"inlineData":{"mimeType":"application/pdf","data":pdf}})),
                Ok(json!({"type":"document","data":pdf,"mime_type":"application/pdf"})),
            ],
        ),
        // A PDF by URL.
        (
            file("application/pdf", ("url", "https://example.com/report.pdf")),
            [
                Err("a file block (application/pdf) cannot be sent by the openai renderer: the file part takes inline data or a file id, not a URL"),
                Ok(json!({"type":"input_file","file_url":"https://example.com/report.pdf"})),
                Ok(json!({"type":"document","source":{"type":"url","url":"https://example.com/report.pdf"}})),
                Ok(json!({"fileData":{"mimeType":"application/pdf","fileUri":"https://example.com/report.pdf"}})),
                Ok(json!({"type":"document","uri":"https://example.com/report.pdf","mime_type":"application/pdf"})),
            ],
        ),
        // A PDF by the provider's file id.
        (
            file("application/pdf", ("fileId", "file-6F2ksmvXxt4VdoqmHRw6kL")),
            [
                Ok(json!({"type":"file","file":{"file_id":"file-6F2ksmvXxt4VdoqmHRw6kL"}})),
                Ok(json!({"type":"input_file","file_id":"file-6F2ksmvXxt4VdoqmHRw6kL"})),
                Ok(json!({"type":"document","source":{"type":"file","file_id":"file-6F2ksmvXxt4VdoqmHRw6kL"}})),
                Ok(json!({"fileData":{"mimeType":"application/pdf","fileUri":"file-6F2ksmvXxt4VdoqmHRw6kL"}})),
                Ok(json!({"type":"document","uri":"file-6F2ksmvXxt4VdoqmHRw6kL","mime_type":"application/pdf"})),
            ],
        ),
        // WAV audio inline.
        (
            file("audio/wav", ("data", "UklGRg==")),
            [
                Ok(json!({"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}})),
                Err("a file block (audio/wav) cannot be sent by the openai-responses renderer: the Responses API takes images and files (input_image, input_file), no audio or video"),
                Err("a file block (audio/wav) cannot be sent by the anthropic renderer: Anthropic takes images and documents (PDF, plain text), no audio or video"),
                Ok(json!({"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}})),
                Ok(json!({"type":"audio","data":"UklGRg==","mime_type":"audio/wav"})),
            ],
        ),
        // A video by its Gemini Files API URI.
        (
            file("video/mp4", ("fileId", "https://generativelanguage.googleapis.com/v1beta/files/abc123")),
            [
                Err("a file block (video/mp4) cannot be sent by the openai renderer: chat completions take no video"),
                Err("a file block (video/mp4) cannot be sent by the openai-responses renderer: the Responses API takes images and files (input_image, input_file), no audio or video"),
                Err("a file block (video/mp4) cannot be sent by the anthropic renderer: Anthropic takes images and documents (PDF, plain text), no audio or video"),
                Ok(json!({"fileData":{"mimeType":"video/mp4","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc123"}})),
                Ok(json!({"type":"video","uri":"https://generativelanguage.googleapis.com/v1beta/files/abc123","mime_type":"video/mp4"})),
            ],
        ),
        // An image as a file, by file id.
        (
            file("image/png", ("fileId", "file-img")),
            [
                Err("a file block (image/png) cannot be sent by the openai renderer: chat completions take an image by URL or inline data, not by file id"),
                Ok(json!({"type":"input_image","file_id":"file-img","detail":"auto"})),
                Ok(json!({"type":"image","source":{"type":"file","file_id":"file-img"}})),
                Ok(json!({"fileData":{"mimeType":"image/png","fileUri":"file-img"}})),
                Ok(json!({"type":"image","uri":"file-img","mime_type":"image/png"})),
            ],
        ),
        // An image by URL naming its media type (refused before, with a misleading message).
        (
            json!({"type":"image","url":"https://example.com/cat.png","mediaType":"image/png"}),
            [
                Ok(json!({"type":"image_url","image_url":{"url":"https://example.com/cat.png"}})),
                Ok(json!({"type":"input_image","image_url":"https://example.com/cat.png","detail":"auto"})),
                Ok(json!({"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}})),
                Ok(json!({"fileData":{"mimeType":"image/png","fileUri":"https://example.com/cat.png"}})),
                Ok(json!({"type":"image","uri":"https://example.com/cat.png","mime_type":"image/png"})),
            ],
        ),
    ];
    let order = [Renderer::OpenAi, Renderer::OpenAiResponses, Renderer::Anthropic, Renderer::Gemini, Renderer::GeminiInteractions];
    for (block, wants) in cases {
        let env = with_block(block.clone());
        for (r, want) in order.iter().zip(wants) {
            match (render(*r, &env), want) {
                (Ok(body), Ok(part)) => assert_eq!(rendered_part(*r, &body), part, "{} {block}", r.name()),
                (Err(e), Err(why)) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidInput);
                    assert_eq!(e.message(), format!("messages[0].content[1]: {why}"), "{} {block}", r.name());
                    assert_eq!(e.detail()["blockType"], block["type"]);
                }
                (got, want) => panic!("{} {block}: got {got:?}, wanted {want:?}", r.name()),
            }
        }
    }
    // A file in a tool result: where the format's tool results take parts.
    let env = json!({"model":"m","messages":[
        {"role":"assistant","content":[call("c1","fetch","{}")]},
        {"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,
            "content":[text("the report"),{"type":"file","mediaType":"application/pdf","fileId":"file-9"}]}]}]});
    let body = render(Renderer::Anthropic, &env).unwrap();
    assert_eq!(body["messages"][1]["content"][0]["content"][1], json!({"type":"document","source":{"type":"file","file_id":"file-9"}}));
    let body = render(Renderer::OpenAiResponses, &env).unwrap();
    assert_eq!(body["input"][1]["output"][1], json!({"type":"input_file","file_id":"file-9"}));
    let body = render(Renderer::GeminiInteractions, &env).unwrap();
    assert_eq!(body["input"][1]["result"][1], json!({"type":"document","uri":"file-9","mime_type":"application/pdf"}));
    for r in [Renderer::OpenAi, Renderer::Gemini] {
        let e = render(r, &env).unwrap_err();
        assert!(e.message().starts_with("messages[1].content[0].content[1]: block type \"file\" inside a tool result"), "{}", e.message());
    }
    // A malformed file block names the field.
    let e = render(Renderer::Gemini, &with_block(json!({"type":"file","data":"x"}))).unwrap_err();
    assert!(e.message().starts_with("messages[0].content[1].mediaType: is required"), "{}", e.message());
}

#[test]
fn an_empty_user_message_is_kept_where_the_format_takes_it() {
    // A request the Gemini API accepted: an empty user text, then the model's function call.
    let env = json!({"model":"m","messages":[
        {"role":"user","content":[text("")]},
        {"role":"assistant","content":[call("c1","read","{\"p\":1}")]},
        result("c1","ok",false)]});
    let body = render(Renderer::Gemini, &env).unwrap();
    assert_eq!(body["contents"][0], json!({"role":"user","parts":[{"text":""}]}));
    assert_eq!(body["contents"][1]["role"], "model");
    let body = render(Renderer::OpenAi, &env).unwrap();
    assert_eq!(body["messages"][0], json!({"role":"user","content":""}));
    let body = render(Renderer::OpenAiResponses, &env).unwrap();
    assert_eq!(body["input"][0], json!({"type":"message","role":"user","content":[{"type":"input_text","text":""}]}));
    let body = render(Renderer::GeminiInteractions, &env).unwrap();
    assert_eq!(body["input"][0], json!({"type":"user_input","content":[{"type":"text","text":""}]}));
    // Anthropic refuses empty text blocks: the message is left out there (docs/render.md).
    let body = render(Renderer::Anthropic, &env).unwrap();
    assert_eq!(body["messages"][0]["role"], "assistant");
    // A user message with no block at all is kept the same way.
    let env = json!({"model":"m","messages":[{"role":"user","content":[]}]});
    assert_eq!(render(Renderer::Gemini, &env).unwrap()["contents"], json!([{"role":"user","parts":[{"text":""}]}]));
}
