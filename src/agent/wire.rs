//! The JSON a host exchanges with an agent: what `lls_agent_*` decode from their arguments and
//! encode as results. Every reader of these shapes (the C ABI, the bindings through it, the
//! scenario runners) goes through the decoders here, so each shape is parsed once, with the
//! same errors everywhere: an unknown key is refused naming it, a missing or mistyped field is
//! refused naming its path (`InvalidInput`, detail `field`).
//!
//! Outputs are `Serialize` types: [`crate::request::RequestInfo`],
//! [`crate::compaction::CompactionOutcome`], [`MeasureReport`] and [`StatsReport`].

use super::{Agent, AgentOptions, AgentStats, ToolResultInput};
use crate::compaction::PolicyTable;
use crate::error::{Error, ErrorKind, Result};
use crate::tokens::meter::Measure;
use crate::types::{blocks_from_value, Block, Fields, Message, Usage};
use serde::Serialize;
use serde_json::Value;

/// Refuses the first key of `f` that is not in `known`, saying what the object is and which
/// keys it takes (`expected`; the known keys, comma-separated, when empty).
fn only(f: &Fields<'_>, known: &[&str], what: &str, expected: &str) -> Result<()> {
    let expected = if expected.is_empty() { known.join(", ") } else { expected.to_string() };
    match f.map.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(Error::invalid(f.p(k), format!("is not {what} (expected {expected})"))),
    }
}

/// What an agent is created with (`lls_agent_new`): the [`AgentOptions`], a compaction policy
/// (table) and a tokenizer file.
#[derive(Debug)]
pub struct AgentSetup {
    /// `config`, `system`, `tools`, `checkRequests`; `None` when no `config` is given: the
    /// agent wakes the session with what its last request carried ([`Agent::wake`]; a child's:
    /// its parent's), with `checkRequests` in [`AgentSetup::check_requests`].
    pub options: Option<AgentOptions>,
    /// `checkRequests` when the options come from the log.
    pub check_requests: bool,
    /// `policy`: a policy or a table `{"default"?, "models"?}`; absent: none.
    pub policy: Option<PolicyTable>,
    /// `tokenizer`: the path of a HuggingFace `tokenizer.json` to count tokens with.
    pub tokenizer: Option<String>,
}

impl AgentSetup {
    /// The keys on top of [`AgentOptions::KEYS`].
    pub const EXTRA_KEYS: [&'static str; 2] = ["policy", "tokenizer"];

    /// Parses `{"config"?, "system"?, "tools"?, "checkRequests"?, "policy"?, "tokenizer"?}`:
    /// without `config` (and then without `system` and `tools`), the options are the log's.
    pub fn from_value(v: &Value) -> Result<AgentSetup> {
        let f = Fields::of(v, "")?;
        let known: Vec<&str> = AgentOptions::KEYS.iter().chain(AgentSetup::EXTRA_KEYS.iter()).copied().collect();
        only(&f, &known, "an agent option", "")?;
        let options: serde_json::Map<String, Value> =
            f.map.iter().filter(|(k, _)| AgentOptions::KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        let from_log = !options.contains_key("config") && !options.contains_key("system") && !options.contains_key("tools");
        Ok(AgentSetup {
            check_requests: f.opt_bool("checkRequests")?.unwrap_or(false),
            options: if from_log { None } else { Some(AgentOptions::from_value(&Value::Object(options), "")?) },
            policy: f.opt_value("policy")?.map(|p| PolicyTable::from_value(p, "policy")).transpose()?,
            tokenizer: f.opt_str("tokenizer")?.map(str::to_string),
        })
    }
}

/// What `lls_agent_spawn` takes: `{"callId"?, "directive", "placeholder"?, "id"?,
/// "durability"?, "path"?, "url"?, "cacheTtl"?, "maxTurns"?}` (`directive`: a user message, or
/// its text).
#[derive(Debug)]
pub struct SpawnInput {
    /// The spawn options.
    pub options: super::SpawnOptions,
    /// Where the child lives: a JSONL file (`path`).
    pub path: Option<String>,
    /// Where the child lives: a store URL (`url`).
    pub url: Option<String>,
}

impl SpawnInput {
    /// The keys it takes.
    pub const KEYS: [&'static str; 9] = ["callId", "directive", "placeholder", "id", "durability", "path", "url", "cacheTtl", "maxTurns"];

    /// Parses the spawn options (see the type).
    pub fn from_value(v: &Value) -> Result<SpawnInput> {
        let f = Fields::of(v, "")?;
        only(&f, &SpawnInput::KEYS, "a spawn option", "")?;
        let directive = match f.value("directive")? {
            Value::String(t) => Message::user_text(t.clone()),
            m => Message::from_value(m, "directive")?,
        };
        let call_id = f.opt_str("callId")?.map(str::to_string);
        if call_id.as_deref() == Some("") {
            return Err(Error::invalid("callId", "must not be empty (leave it out to spawn at a turn boundary)"));
        }
        let session_keys: serde_json::Map<String, Value> =
            f.map.iter().filter(|(k, _)| ["id", "durability"].contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        let (session, _) = crate::store::options::session_options(Some(&Value::Object(session_keys)), "", &[])?;
        let cache_ttl = match f.opt_str("cacheTtl")? {
            None => None,
            Some(s) => Some(
                crate::render::CacheTtl::parse(s)
                    .ok_or_else(|| Error::invalid("cacheTtl", format!("expected \"5m\" or \"1h\", got {s:?}")))?,
            ),
        };
        let max_turns = f.opt_u64("maxTurns")?;
        if max_turns == Some(0) {
            return Err(Error::invalid("maxTurns", "must be at least 1 (the child's first request is one)"));
        }
        Ok(SpawnInput {
            options: super::SpawnOptions {
                call_id,
                directive,
                placeholder: f.opt_str("placeholder")?.map(str::to_string),
                session,
                cache_ttl,
                max_turns,
            },
            path: f.opt_str("path")?.map(str::to_string),
            url: f.opt_str("url")?.map(str::to_string),
        })
    }
}

/// What `lls_agent_finish_child` takes: `{"error"?: string}` (the child failed: its open turn
/// ends `error` with it).
pub fn finish_input(v: Option<&Value>) -> Result<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    let f = Fields::of(v, "")?;
    only(&f, &["error"], "a finish option", "")?;
    Ok(f.opt_str("error")?.map(str::to_string))
}

/// A policy argument (`lls_agent_set_policy`): a policy, a table, or `null` for none (an empty
/// table: no automatic compaction).
pub fn policy_table(v: &Value) -> Result<PolicyTable> {
    if v.is_null() {
        return Ok(PolicyTable::default());
    }
    PolicyTable::from_value(v, "policy")
}

/// A provider response to record (`lls_agent_record_response`): `{"message", "usage"?,
/// "finishReason"?}`, the shape `lls_parse_response` produces.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseInput {
    /// The assistant message.
    pub message: Message,
    /// The provider's usage, when it reported one.
    pub usage: Option<Usage>,
}

impl ResponseInput {
    /// Parses `{"message", "usage"?, "finishReason"?}` (`finishReason` is accepted and not
    /// kept: the log records what the message holds).
    pub fn from_value(v: &Value) -> Result<ResponseInput> {
        let f = Fields::of(v, "")?;
        only(&f, &["message", "usage", "finishReason"], "a response field", "")?;
        if f.map.get("finishReason").is_some_and(|r| !r.is_string()) {
            return Err(Error::invalid("finishReason", "must be a string"));
        }
        Ok(ResponseInput {
            message: Message::from_value(f.value("message")?, "message")?,
            usage: f.opt_value("usage")?.map(|u| Usage::from_value(u, "usage")).transpose()?,
        })
    }
}

impl ToolResultInput {
    /// Parses `{"callId", "content" | "text", "isError"?}` (`lls_agent_record_tool_result`):
    /// `content` is a list of blocks, `text` a single text block; one of them, not both.
    pub fn from_value(v: &Value) -> Result<ToolResultInput> {
        let f = Fields::of(v, "")?;
        only(&f, &["callId", "content", "text", "isError"], "a tool result field", "callId, content or text, isError")?;
        let call_id = f.str("callId")?;
        if call_id.is_empty() {
            return Err(Error::invalid("callId", "must not be empty"));
        }
        let content = match (f.opt_value("content")?, f.opt_str("text")?) {
            (Some(_), Some(_)) => return Err(Error::invalid("text", "give content or text, not both")),
            (Some(c), None) => blocks_from_value(c, "content")?,
            (None, Some(t)) => vec![Block::text(t)],
            (None, None) => return Err(Error::invalid("content", "is required (or give text)")),
        };
        Ok(ToolResultInput { call_id: call_id.to_string(), content, is_error: f.opt_bool("isError")?.unwrap_or(false) })
    }
}

/// A provider error to record (`lls_agent_provider_error`): `{"message", "overflow"?}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderErrorInput {
    /// What the provider said.
    pub message: String,
    /// Whether it was a context overflow (recovered by compaction, within the budget).
    pub overflow: bool,
}

impl ProviderErrorInput {
    /// Parses `{"message", "overflow"?}`.
    pub fn from_value(v: &Value) -> Result<ProviderErrorInput> {
        let f = Fields::of(v, "")?;
        only(&f, &["message", "overflow"], "a provider error field", "")?;
        Ok(ProviderErrorInput { message: f.str("message")?.to_string(), overflow: f.opt_bool("overflow")?.unwrap_or(false) })
    }
}

/// Options of a manual compaction (`lls_agent_compact`): `{"span"?: [start, end]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactInput {
    /// The surface positions to compact, inclusive; `None`: what the policy would select.
    pub span: Option<(usize, usize)>,
    /// `trigger: "idle"`: the compaction the cache clock decided (`Agent::compact_idle`).
    pub idle: bool,
}

impl CompactInput {
    /// Parses `{"span"?: [start, end], "trigger"?: "manual" | "idle"}` (`idle` takes no span);
    /// no options at all is `None`.
    pub fn from_value(v: Option<&Value>) -> Result<CompactInput> {
        let Some(v) = v else { return Ok(CompactInput::default()) };
        let f = Fields::of(v, "")?;
        only(&f, &["span", "trigger"], "a compaction option", "")?;
        let idle = match f.opt_str("trigger")? {
            None | Some("manual") => false,
            Some("idle") if f.map.contains_key("span") => {
                return Err(Error::invalid("trigger", "an idle compaction takes the head region the clock priced: leave span out"))
            }
            Some("idle") => true,
            Some(other) => return Err(Error::invalid("trigger", format!("expected \"manual\" or \"idle\", got {other:?}"))),
        };
        let Some(span) = f.opt_array("span")? else { return Ok(CompactInput { span: None, idle }) };
        let pos = |i: usize| -> Result<usize> {
            span.get(i)
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .ok_or_else(|| Error::invalid(format!("span[{i}]"), "expected a surface position (a non-negative integer)"))
        };
        if span.len() != 2 {
            return Err(Error::invalid("span", format!("expected [start, end], got {} items", span.len())));
        }
        let (start, end) = (pos(0)?, pos(1)?);
        if start > end {
            return Err(Error::invalid("span", format!("start ({start}) is after end ({end})")));
        }
        Ok(CompactInput { span: Some((start, end)), idle: false })
    }
}

/// A host token counter's reply: a non-negative integer, or `{"tokens": n}`.
pub fn token_count_reply(v: &Value) -> Result<u64> {
    let n = match v {
        Value::Object(m) if m.len() == 1 => m.get("tokens").and_then(Value::as_u64),
        other => other.as_u64(),
    };
    n.ok_or_else(|| {
        Error::new(ErrorKind::Listener, format!("replied with {v}; expected a non-negative integer or {{\"tokens\": n}}"))
            .with("callback", "bad-reply")
    })
}

/// What the token meter measures now (`lls_agent_measure`): the [`Measure`] plus the counter
/// in use and, under a policy, the threshold and the context window.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeasureReport {
    /// The measured surface.
    #[serde(flatten)]
    pub measure: Measure,
    /// The token counter's name (`"estimate"` without one).
    pub counter: String,
    /// The policy's threshold in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    /// The policy's context window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// An instance's statistics (`lls_agent_stats`): its number and its [`AgentStats`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    /// The agent instance.
    pub instance: u64,
    /// Its counters.
    #[serde(flatten)]
    pub stats: AgentStats,
}

impl Agent {
    /// Measures the surface ([`Agent::measure`]) and says against what it is compared.
    pub fn measure_report(&mut self) -> Result<MeasureReport> {
        let measure = self.measure()?;
        let policy = self.policy();
        Ok(MeasureReport {
            measure,
            counter: self.counter_name().to_string(),
            threshold: policy.as_ref().map(|p| p.threshold_tokens()),
            context_window: policy.as_ref().map(|p| p.context_window),
        })
    }

    /// This instance's statistics with its number.
    pub fn stats_report(&self) -> StatsReport {
        StatsReport { instance: self.instance(), stats: self.stats() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::{CompactionOutcome, Outcome, Region, SummaryRequestInfo};
    use crate::request::{Purpose, RequestInfo};
    use serde_json::json;

    fn field(e: &Error) -> String {
        e.detail().get("field").and_then(Value::as_str).unwrap_or("").to_string()
    }

    #[test]
    fn agent_setup_takes_the_options_policy_and_tokenizer_and_refuses_the_rest() {
        let s = AgentSetup::from_value(&json!({"config": {"provider": "p", "model": "m"}, "system": "s"})).unwrap();
        assert_eq!(s.options.unwrap().system.as_deref(), Some("s"));
        // Without config, system and tools: the log's options (waking a session).
        let s = AgentSetup::from_value(&json!({"checkRequests": true})).unwrap();
        assert!(s.options.is_none() && s.check_requests);
        assert!(s.policy.is_none() && s.tokenizer.is_none());
        let e = AgentSetup::from_value(&json!({"config": {"provider": "p", "model": "m"}, "policy": null})).unwrap_err();
        assert_eq!(field(&e), "policy");
        let s = AgentSetup::from_value(&json!({"config": {"provider": "p", "model": "m"}, "policy": {"contextWindow": 100000}})).unwrap();
        assert!(s.policy.unwrap().for_model("m").is_some());
        let e = AgentSetup::from_value(&json!({"config": {"provider": "p", "model": "m"}, "sytem": "s"})).unwrap_err();
        assert_eq!((e.kind(), field(&e)), (ErrorKind::InvalidInput, "sytem".to_string()));
        assert!(e.message().contains("expected config, system, tools, checkRequests, policy, tokenizer"), "{}", e.message());
        let e = AgentSetup::from_value(&json!({"system": "s"})).unwrap_err();
        assert_eq!(field(&e), "config");
    }

    #[test]
    fn tool_results_take_content_or_text_and_a_call_id() {
        let r = ToolResultInput::from_value(&json!({"callId": "c1", "text": "ok", "isError": true})).unwrap();
        assert_eq!((r.call_id.as_str(), r.is_error, r.content.len()), ("c1", true, 1));
        let r = ToolResultInput::from_value(&json!({"callId": "c1", "content": [{"type": "text", "text": "a"}]})).unwrap();
        assert!(!r.is_error);
        for (bad, f) in [
            (json!({"callId": "", "text": "x"}), "callId"),
            (json!({"callId": "c", "text": "x", "content": []}), "text"),
            (json!({"callId": "c"}), "content"),
            (json!({"callId": "c", "text": "x", "error": true}), "error"),
            (json!({"callId": 7, "text": "x"}), "callId"),
        ] {
            let e = ToolResultInput::from_value(&bad).unwrap_err();
            assert_eq!((e.kind(), field(&e)), (ErrorKind::InvalidInput, f.to_string()), "{bad}: {}", e.message());
        }
    }

    #[test]
    fn responses_provider_errors_and_compaction_options_are_checked() {
        let r = ResponseInput::from_value(
            &json!({"message": {"role": "assistant", "content": []}, "usage": {"inputTokens": 3, "outputTokens": 1}, "finishReason": "stop"}),
        )
        .unwrap();
        assert_eq!(r.usage.unwrap().input_tokens, 3);
        let e = ResponseInput::from_value(&json!({"message": {"role": "assistant", "content": []}, "finishReason": 1})).unwrap_err();
        assert_eq!(field(&e), "finishReason");
        let e = ResponseInput::from_value(&json!({"message": {"role": "assistant", "content": []}, "stop": true})).unwrap_err();
        assert_eq!(field(&e), "stop");
        assert_eq!(
            ProviderErrorInput::from_value(&json!({"message": "too long", "overflow": true})).unwrap(),
            ProviderErrorInput { message: "too long".into(), overflow: true }
        );
        assert_eq!(field(&ProviderErrorInput::from_value(&json!({"overflow": true})).unwrap_err()), "message");
        assert_eq!(CompactInput::from_value(None).unwrap().span, None);
        assert_eq!(CompactInput::from_value(Some(&json!({"span": [1, 3]}))).unwrap().span, Some((1, 3)));
        for (bad, f) in [
            (json!({"span": [3, 1]}), "span"),
            (json!({"span": [1]}), "span"),
            (json!({"span": [1, -1]}), "span[1]"),
            (json!({"spam": 1}), "spam"),
        ] {
            assert_eq!(field(&CompactInput::from_value(Some(&bad)).unwrap_err()), f, "{bad}");
        }
        assert!(policy_table(&Value::Null).unwrap().for_model("m").is_none());
    }

    #[test]
    fn token_count_replies_are_a_number_or_an_object() {
        assert_eq!(token_count_reply(&json!(12)).unwrap(), 12);
        assert_eq!(token_count_reply(&json!({"tokens": 5})).unwrap(), 5);
        for bad in [json!(-1), json!("3"), json!({"tokens": 5, "x": 1}), json!(null)] {
            let e = token_count_reply(&bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Listener, "{bad}");
            assert_eq!(e.detail()["callback"], "bad-reply");
        }
    }

    #[test]
    fn outputs_have_their_documented_keys() {
        let info = RequestInfo {
            instance: 1,
            turn: 2,
            step: 3,
            step_seq: 9,
            purpose: Purpose::Conversation,
            prefix_len: 1,
            message_count: 4,
            shared_messages: 2,
            envelope_len: 100,
            digest: "d".into(),
            betas: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(&info).unwrap(),
            json!({"instance": 1, "turn": 2, "step": 3, "stepSeq": 9, "prefixLen": 1, "messageCount": 4, "sharedMessages": 2, "bytes": 100, "digest": "d"})
        );
        let out = CompactionOutcome {
            outcome: Outcome::Failed,
            region: Region { start: 0, end: 2, seqs: vec![4, 5, 6] },
            request: SummaryRequestInfo { digest: "x".into(), shared_messages: 3, message_count: 5 },
            error: Some("no summariser is set".into()),
        };
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!({"outcome": "failed", "span": [0, 2], "seqs": [4, 5, 6], "request": {"digest": "x", "sharedMessages": 3, "messageCount": 5}, "error": "no summariser is set"})
        );
        assert_eq!(Outcome::Landed, "landed");
        let m = MeasureReport {
            measure: Measure { total: 7, ..Default::default() },
            counter: "estimate".into(),
            threshold: None,
            context_window: None,
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"system": 0, "tools": 0, "prefix": 0, "history": 0, "total": 7, "anchored": false, "counter": "estimate"})
        );
        let st = StatsReport { instance: 3, stats: AgentStats { requests: 2, cached_tokens: 5, ..Default::default() } };
        assert_eq!(
            serde_json::to_value(&st).unwrap(),
            json!({"instance": 3, "requests": 2, "compositions": 0, "compactions": 0, "cachedTokens": 5, "promptTokens": 0})
        );
    }
}
