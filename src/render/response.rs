//! The way back: provider responses and usage into the library's vocabulary.
//!
//! [`parse_response`] turns an OpenAI-compatible chat completion (OpenAI, DeepSeek,
//! llama.cpp, vLLM) or an Anthropic Messages response into an assistant [`Message`], its
//! [`Usage`] (disjoint buckets: `inputTokens` is the uncached part) and the finish reason.
//! [`usage_from_provider`] maps a usage object alone. [`is_context_overflow`] recognises the
//! providers' "prompt too long" errors, for `report_provider_error(.., overflow = true)`.

use super::Renderer;
use crate::error::{Error, Result};
use crate::types::{as_object, Block, JsonMap, Message, Provenance, Role, Usage};
use serde::Serialize;
use serde_json::Value;

/// A parsed provider response.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParsedResponse {
    /// The assistant message (with provenance when the response names its model).
    pub message: Message,
    /// The usage, mapped into disjoint buckets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The finish reason normalised: "stop", "tool-calls", "max-tokens", or the provider's word.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

fn u(v: &Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(Value::as_u64)
}

/// Maps a provider usage object. `provider` is a renderer name ("openai", "anthropic") or a
/// provider whose usage shape is known ("deepseek", "llama.cpp").
///
/// - OpenAI / llama.cpp: `prompt_tokens` includes `prompt_tokens_details.cached_tokens`;
///   `completion_tokens_details.reasoning_tokens` is a part of `completion_tokens`.
/// - DeepSeek: `prompt_cache_hit_tokens` + `prompt_cache_miss_tokens` = `prompt_tokens`.
/// - Anthropic: `input_tokens` is already uncached; `cache_read_input_tokens` and
///   `cache_creation_input_tokens` are separate buckets.
pub fn usage_from_provider(provider: &str, usage: &Value) -> Result<Usage> {
    as_object(usage, "usage")?;
    let need = |ptr: &str| {
        u(usage, ptr).ok_or_else(|| Error::invalid(format!("usage{}", ptr.replace('/', ".")), "expected a non-negative integer"))
    };
    let mut out = Usage::default();
    match provider {
        "anthropic" => {
            out.input_tokens = need("/input_tokens")?;
            out.output_tokens = need("/output_tokens")?;
            out.cache_read_tokens = u(usage, "/cache_read_input_tokens");
            out.cache_write_tokens = u(usage, "/cache_creation_input_tokens");
        }
        "deepseek" if usage.get("prompt_cache_hit_tokens").is_some() => {
            let hit = need("/prompt_cache_hit_tokens")?;
            let prompt = need("/prompt_tokens")?;
            out.input_tokens = u(usage, "/prompt_cache_miss_tokens").unwrap_or(prompt.saturating_sub(hit));
            out.cache_read_tokens = Some(hit);
            out.output_tokens = need("/completion_tokens")?;
            out.reasoning_tokens = u(usage, "/completion_tokens_details/reasoning_tokens");
        }
        "openai" | "deepseek" | "llama.cpp" | "vllm" => {
            let prompt = need("/prompt_tokens")?;
            let cached = u(usage, "/prompt_tokens_details/cached_tokens");
            out.input_tokens = prompt.saturating_sub(cached.unwrap_or(0));
            out.cache_read_tokens = cached;
            out.output_tokens = need("/completion_tokens")?;
            out.reasoning_tokens = u(usage, "/completion_tokens_details/reasoning_tokens");
        }
        other => {
            return Err(Error::invalid(
                "provider",
                format!("unknown usage shape {other:?} (expected openai, anthropic, deepseek or llama.cpp)"),
            ))
        }
    }
    Ok(out)
}

/// Parses a provider response body (see the module docs).
pub fn parse_response(renderer: Renderer, body: &Value) -> Result<ParsedResponse> {
    match renderer {
        Renderer::OpenAi => parse_openai(body),
        Renderer::Anthropic => parse_anthropic(body),
    }
}

fn provenance(body: &Value, provider: &str) -> Option<Provenance> {
    body.get("model").and_then(Value::as_str).map(|m| Provenance {
        provider: provider.to_string(),
        model: m.to_string(),
        extra: JsonMap::new(),
    })
}

fn parse_openai(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    let choice = body.pointer("/choices/0").ok_or_else(|| Error::invalid("response.choices", "expected at least one choice"))?;
    let msg = choice.get("message").ok_or_else(|| Error::invalid("response.choices[0].message", "is required"))?;
    let mut content = Vec::new();
    // DeepSeek and llama.cpp return reasoning in `reasoning_content`; recent vLLM (and
    // OpenRouter, following OpenAI's guidance for gpt-oss) in `reasoning`. A server sending both
    // during a transition sends the same text twice: one block.
    let reasoning = msg.get("reasoning_content").and_then(Value::as_str).or_else(|| msg.get("reasoning").and_then(Value::as_str));
    if let Some(r) = reasoning {
        let mut b = JsonMap::new();
        b.insert("type".into(), "reasoning".into());
        b.insert("text".into(), r.into());
        content.push(Block::from_value(&Value::Object(b), "reasoning")?);
    }
    match msg.get("content") {
        Some(Value::String(t)) if !t.is_empty() => content.push(Block::text(t.clone())),
        Some(Value::Array(parts)) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    content.push(Block::text(t));
                }
            }
        }
        _ => {}
    }
    if let Some(Value::Array(calls)) = msg.get("tool_calls") {
        for (i, c) in calls.iter().enumerate() {
            let path = format!("response.choices[0].message.tool_calls[{i}]");
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::invalid(format!("{path}.id"), "expected a non-empty string"))?;
            let name = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::invalid(format!("{path}.function.name"), "expected a string"))?;
            let args = match c.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            content.push(Block::tool_call(id, name, &args));
        }
    }
    let finish = choice.get("finish_reason").and_then(Value::as_str).map(|f| match f {
        "tool_calls" => "tool-calls".to_string(),
        "length" => "max-tokens".to_string(),
        other => other.to_string(),
    });
    let usage = match body.get("usage") {
        Some(u) if u.is_object() => {
            let shape = if u.get("prompt_cache_hit_tokens").is_some() { "deepseek" } else { "openai" };
            Some(usage_from_provider(shape, u)?)
        }
        _ => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = provenance(body, "openai-compatible");
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

fn parse_anthropic(body: &Value) -> Result<ParsedResponse> {
    as_object(body, "response")?;
    let blocks = body.get("content").and_then(Value::as_array).ok_or_else(|| Error::invalid("response.content", "expected an array"))?;
    let mut content = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let path = format!("response.content[{i}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => content.push(Block::text(b.get("text").and_then(Value::as_str).unwrap_or(""))),
            Some("thinking") => {
                let mut m = JsonMap::new();
                m.insert("type".into(), "reasoning".into());
                m.insert("text".into(), b.get("thinking").cloned().unwrap_or(Value::from("")));
                if let Some(sig) = b.get("signature") {
                    m.insert("signature".into(), sig.clone());
                }
                content.push(Block::from_value(&Value::Object(m), &path)?);
            }
            Some("tool_use") => {
                let id = b.get("id").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.id"), "expected a string"))?;
                let name =
                    b.get("name").and_then(Value::as_str).ok_or_else(|| Error::invalid(format!("{path}.name"), "expected a string"))?;
                let args = b.get("input").map(|v| v.to_string()).unwrap_or_else(|| "{}".into());
                content.push(Block::tool_call(id, name, &args));
            }
            Some("redacted_thinking") => {
                let mut m = JsonMap::new();
                m.insert("type".into(), "redacted-thinking".into());
                m.insert("data".into(), b.get("data").cloned().unwrap_or(Value::from("")));
                content.push(Block::from_value(&Value::Object(m), &path)?);
            }
            _ => content.push(Block::from_value(b, &path)?),
        }
    }
    let finish = body.get("stop_reason").and_then(Value::as_str).map(|f| match f {
        "end_turn" | "stop_sequence" => "stop".to_string(),
        "tool_use" => "tool-calls".to_string(),
        "max_tokens" => "max-tokens".to_string(),
        other => other.to_string(),
    });
    let usage = match body.get("usage") {
        Some(u) if u.is_object() => Some(usage_from_provider("anthropic", u)?),
        _ => None,
    };
    let mut message = Message::new(Role::Assistant, content);
    message.provenance = provenance(body, "anthropic");
    Ok(ParsedResponse { message, usage, finish_reason: finish })
}

/// Whether a provider error (HTTP status and body text) reports that the prompt does not fit
/// in the context window.
pub fn is_context_overflow(status: u16, body: &str) -> bool {
    if !(status == 400 || status == 413 || status == 422 || status == 500 || status == 0) {
        return false;
    }
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "prompt is too long",
        "exceeds the available context size",
        "exceed_context_size_error",
        "too many tokens",
        "input is too long",
        "context window",
    ]
    .iter()
    .any(|p| b.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_response_with_cache_and_tool_calls() {
        let body = json!({"model":"gpt-x","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}}]}}],
            "usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":96}}});
        let r = parse_response(Renderer::OpenAi, &body).unwrap();
        assert_eq!(r.message.tool_calls().collect::<Vec<_>>(), vec![("call_1", "read", "{\"p\":1}")]);
        let u = r.usage.unwrap();
        assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens, u.prompt_tokens()), (4, Some(96), 7, 100));
        assert_eq!(r.finish_reason.as_deref(), Some("tool-calls"));
        assert_eq!(r.message.provenance.unwrap().model, "gpt-x");
    }

    #[test]
    fn reasoning_and_reasoning_content_are_both_parsed() {
        let reply = |msg: Value| json!({"choices":[{"finish_reason":"stop","message":msg}]});
        for key in ["reasoning_content", "reasoning"] {
            let r = parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4", key: "2+2=4"}))).unwrap();
            assert_eq!(r.message.content.len(), 2, "{key}");
            assert_eq!(r.message.content[0].kind(), "reasoning");
            assert_eq!(r.message.content[0].get_str("text"), Some("2+2=4"));
            assert_eq!(r.message.content[1].get_str("text"), Some("4"));
        }
        let both =
            parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4","reasoning_content":"a","reasoning":"a"})))
                .unwrap();
        assert_eq!(both.message.content.iter().filter(|b| b.kind() == "reasoning").count(), 1);
        let none = parse_response(Renderer::OpenAi, &reply(json!({"role":"assistant","content":"4"}))).unwrap();
        assert_eq!(none.message.content.len(), 1);
    }

    #[test]
    fn deepseek_and_anthropic_usage_are_disjoint_buckets() {
        let d = usage_from_provider(
            "deepseek",
            &json!({"prompt_tokens":50,"completion_tokens":3,"prompt_cache_hit_tokens":40,"prompt_cache_miss_tokens":10}),
        )
        .unwrap();
        assert_eq!((d.input_tokens, d.cache_read_tokens), (10, Some(40)));
        let a = usage_from_provider(
            "anthropic",
            &json!({"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":900,"cache_creation_input_tokens":30}),
        )
        .unwrap();
        assert_eq!((a.input_tokens, a.cache_read_tokens, a.cache_write_tokens, a.prompt_tokens()), (5, Some(900), Some(30), 935));
        let e = usage_from_provider("openai", &json!({"completion_tokens":1})).unwrap_err();
        assert_eq!(e.message(), "usage.prompt_tokens: expected a non-negative integer");
        assert!(usage_from_provider("mystery", &json!({})).is_err());
    }

    #[test]
    fn anthropic_response_blocks() {
        let body = json!({"model":"claude-x","stop_reason":"tool_use","content":[{"type":"thinking","thinking":"hmm","signature":"s"},
            {"type":"text","text":"let me look"},{"type":"tool_use","id":"tu_1","name":"read","input":{"p":1}}],
            "usage":{"input_tokens":3,"output_tokens":9,"cache_read_input_tokens":500}});
        let r = parse_response(Renderer::Anthropic, &body).unwrap();
        assert_eq!(r.message.content.len(), 3);
        assert_eq!(r.message.content[0].get_str("signature"), Some("s"));
        assert_eq!(r.message.tool_calls().next(), Some(("tu_1", "read", "{\"p\":1}")));
        assert_eq!(r.finish_reason.as_deref(), Some("tool-calls"));
    }

    #[test]
    fn bad_responses_name_the_field() {
        let e = parse_response(Renderer::OpenAi, &json!({"choices":[]})).unwrap_err();
        assert_eq!(e.message(), "response.choices: expected at least one choice");
        let e = parse_response(Renderer::Anthropic, &json!({"content":"x"})).unwrap_err();
        assert_eq!(e.message(), "response.content: expected an array");
    }

    #[test]
    fn overflow_errors_are_recognised() {
        assert!(is_context_overflow(400, r#"{"error":{"code":"context_length_exceeded"}}"#));
        assert!(is_context_overflow(400, r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#));
        assert!(is_context_overflow(
            400,
            r#"{"error":{"type":"exceed_context_size_error","message":"the request exceeds the available context size"}}"#
        ));
        assert!(!is_context_overflow(429, "rate limited: too many tokens per minute"));
        assert!(!is_context_overflow(400, "invalid tool schema"));
    }
}
