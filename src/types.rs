//! The JSON vocabulary of docs/contract.md §1: content blocks, messages, usage, tool schemas, call config.
//!
//! Every type is read from a `serde_json::Value` by a validator that names the offending
//! field (`messages[2].content[0].text: expected a string`), and keeps unknown fields (and
//! unknown content-block types) untouched in an `extra` map so they round-trip.
//! Optional fields are absent, never `null`: a `null` where a value is optional is rejected.
//!
//! Serialisation is deterministic: known fields in declaration order, then unknown fields in
//! key order. That is what makes a request rebuilt from the log byte-identical.

use crate::error::{Error, Result};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A JSON object.
pub type JsonMap = Map<String, Value>;

/// A field reader over one JSON object whose errors name the path of the field that is wrong
/// (`Error::invalid("config.model", ...)`): the decoder every wire type of the core is written
/// with, and the one the C ABI's argument decoders use.
pub struct Fields<'a> {
    /// The path of the object itself (`""` at the top).
    pub path: &'a str,
    /// The object.
    pub map: &'a JsonMap,
}

/// Whether a count is zero: `#[serde(skip_serializing_if = "crate::types::is_zero")]` leaves
/// out a count that has not happened.
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The value at a JSON pointer (`"/choices/0/message"`), as `Value::pointer` finds it, without
/// allocating: the library's own pointers have no `~` escapes, so each token is looked up as it
/// is (serde_json's `pointer` unescapes every token into a new `String`, which showed in the
/// profile of recording a reply).
pub(crate) fn pointer<'a>(v: &'a Value, ptr: &str) -> Option<&'a Value> {
    debug_assert!(!ptr.contains('~'), "an escaped pointer: {ptr}");
    if ptr.is_empty() {
        return Some(v);
    }
    let mut at = v;
    for token in ptr.strip_prefix('/')?.split('/') {
        at = match at {
            Value::Object(m) => m.get(token)?,
            Value::Array(a) => {
                if (token.len() > 1 && token.starts_with('0')) || token.starts_with('+') {
                    return None;
                }
                a.get(token.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(at)
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn as_object<'a>(v: &'a Value, path: &str) -> Result<&'a JsonMap> {
    v.as_object().ok_or_else(|| Error::invalid(path, format!("expected an object, got {}", kind_of(v))))
}

// Each reader is named after what it reads; `opt_` readers give `None` for a missing field
// (and refuse a field of the wrong type).
#[allow(missing_docs)]
impl<'a> Fields<'a> {
    pub fn of(v: &'a Value, path: &'a str) -> Result<Self> {
        Ok(Fields { path, map: as_object(v, path)? })
    }

    pub fn p(&self, key: &str) -> String {
        join(self.path, key)
    }

    fn present(&self, key: &str) -> Result<Option<&'a Value>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Null) => Err(Error::invalid(self.p(key), "is null; optional fields must be absent, not null")),
            Some(v) => Ok(Some(v)),
        }
    }

    fn required(&self, key: &str) -> Result<&'a Value> {
        self.present(key)?.ok_or_else(|| Error::invalid(self.p(key), "is required"))
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        let v = self.required(key)?;
        v.as_str().ok_or_else(|| Error::invalid(self.p(key), format!("expected a string, got {}", kind_of(v))))
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.present(key)? {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| Error::invalid(self.p(key), format!("expected a string, got {}", kind_of(v)))),
        }
    }

    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.required(key)?;
        v.as_u64().ok_or_else(|| Error::invalid(self.p(key), format!("expected a non-negative integer, got {v}")))
    }

    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.present(key)? {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| Error::invalid(self.p(key), format!("expected a non-negative integer, got {v}"))),
        }
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.present(key)? {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| Error::invalid(self.p(key), format!("expected a number, got {}", kind_of(v)))),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        let v = self.required(key)?;
        v.as_bool().ok_or_else(|| Error::invalid(self.p(key), format!("expected a boolean, got {}", kind_of(v))))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.present(key)? {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| Error::invalid(self.p(key), format!("expected a boolean, got {}", kind_of(v)))),
        }
    }

    pub fn array(&self, key: &str) -> Result<&'a Vec<Value>> {
        let v = self.required(key)?;
        v.as_array().ok_or_else(|| Error::invalid(self.p(key), format!("expected an array, got {}", kind_of(v))))
    }

    pub fn opt_array(&self, key: &str) -> Result<Option<&'a Vec<Value>>> {
        match self.present(key)? {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or_else(|| Error::invalid(self.p(key), format!("expected an array, got {}", kind_of(v)))),
        }
    }

    pub fn value(&self, key: &str) -> Result<&'a Value> {
        self.required(key)
    }

    pub fn opt_value(&self, key: &str) -> Result<Option<&'a Value>> {
        self.present(key)
    }

    /// Every key not in `known`, copied.
    pub fn extra(&self, known: &[&str]) -> JsonMap {
        self.map.iter().filter(|(k, _)| !known.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Implements serde `Deserialize` through the validating `from_value`.
macro_rules! deserialize_via_from_value {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let v = Value::deserialize(d)?;
                <$t>::from_value(&v, "").map_err(|e| D::Error::custom(e.message().to_string()))
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Content blocks

/// One content block. Known types (`text`, `reasoning`, `tool-call`, `tool-result`) are
/// validated; any other type is carried as an opaque object (`image` and `file` blocks are
/// checked by the renderer that sends them: `docs/contract.md` §1.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Block(JsonMap);

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Block {
        let mut m = JsonMap::new();
        m.insert("type".into(), "text".into());
        m.insert("text".into(), Value::String(text.into()));
        Block(m)
    }

    /// A tool-result block.
    pub fn tool_result(call_id: &str, content: Vec<Block>, is_error: bool) -> Block {
        let mut m = JsonMap::new();
        m.insert("type".into(), "tool-result".into());
        m.insert("toolCallId".into(), call_id.into());
        m.insert("content".into(), Value::Array(content.into_iter().map(Block::into_value).collect()));
        m.insert("isError".into(), is_error.into());
        Block(m)
    }

    /// A tool-call block.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Block {
        let mut m = JsonMap::new();
        m.insert("type".into(), "tool-call".into());
        m.insert("id".into(), id.into());
        m.insert("name".into(), name.into());
        m.insert("arguments".into(), arguments.into());
        Block(m)
    }

    /// Validates a block at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<Block> {
        Block::check(v, path)?;
        Ok(Block(v.as_object().expect("checked: an object").clone()))
    }

    /// Validates a block at `path` as [`from_value`](Self::from_value) does, taking the value
    /// rather than copying it.
    pub fn from_owned_value(v: Value, path: &str) -> Result<Block> {
        Block::check(&v, path)?;
        match v {
            Value::Object(m) => Ok(Block(m)),
            _ => unreachable!("checked: an object"),
        }
    }

    /// Checks a block as [`from_value`](Self::from_value) checks its JSON form (the same
    /// errors), without copying it.
    pub fn validate(&self, path: &str) -> Result<()> {
        Block::check_fields(&Fields { path, map: &self.0 })
    }

    /// The checks of [`from_value`](Self::from_value).
    pub(crate) fn check(v: &Value, path: &str) -> Result<()> {
        Block::check_fields(&Fields::of(v, path)?)
    }

    fn check_fields(f: &Fields<'_>) -> Result<()> {
        let ty = f.str("type")?;
        match ty {
            "text" | "reasoning" => {
                f.str("text")?;
            }
            "tool-call" => {
                let id = f.str("id")?;
                if id.is_empty() {
                    return Err(Error::invalid(f.p("id"), "must not be empty"));
                }
                f.str("name")?;
                f.str("arguments")?;
            }
            "tool-result" => {
                let id = f.str("toolCallId")?;
                if id.is_empty() {
                    return Err(Error::invalid(f.p("toolCallId"), "must not be empty"));
                }
                let content = f.array("content")?;
                for (i, b) in content.iter().enumerate() {
                    Block::check(b, &format!("{}[{i}]", f.p("content")))?;
                }
                f.bool("isError")?;
            }
            "" => return Err(Error::invalid(f.p("type"), "must not be empty")),
            _ => {} // opaque block: carried through untouched
        }
        Ok(())
    }

    /// The checks of [`check_fields`](Self::check_fields) on the members of a block's text in
    /// a record that `crate::log::raw::read` found canonical, as a yes or no: a block it refuses
    /// is read the long way, which says why. The two must agree on every block: debug builds
    /// compare them on every record an open reads (`crate::log::load`).
    pub(crate) fn check_canonical(m: &[(&str, &str)]) -> bool {
        use crate::log::raw::{elements, get, members, str_value};
        let is_str = |k: &str| get(m, k).is_some_and(|v| v.starts_with('"'));
        let non_empty = |k: &str| get(m, k).is_some_and(|v| v.starts_with('"') && v != "\"\"");
        let Some(ty) = get(m, "type").and_then(str_value) else { return false };
        match &*ty {
            "text" | "reasoning" => is_str("text"),
            "tool-call" => non_empty("id") && is_str("name") && is_str("arguments"),
            "tool-result" => {
                non_empty("toolCallId")
                    && matches!(get(m, "isError"), Some("true" | "false"))
                    && get(m, "content")
                        .and_then(elements)
                        .is_some_and(|c| c.iter().all(|b| members(b).is_some_and(|bm| Block::check_canonical(&bm))))
            }
            "" => false,
            _ => true,
        }
    }

    /// The block's type.
    pub fn kind(&self) -> &str {
        self.0.get("type").and_then(Value::as_str).unwrap_or("")
    }

    /// A string field of the block.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    /// A field of the block.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// The block as a JSON object.
    pub fn as_map(&self) -> &JsonMap {
        &self.0
    }

    /// The block as a JSON value.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }

    /// The text of a `text` or `reasoning` block.
    pub fn text_content(&self) -> Option<&str> {
        match self.kind() {
            "text" | "reasoning" => self.get_str("text"),
            _ => None,
        }
    }

    /// For a `tool-call` block: (id, name, arguments).
    pub fn as_tool_call(&self) -> Option<(&str, &str, &str)> {
        if self.kind() != "tool-call" {
            return None;
        }
        Some((self.get_str("id")?, self.get_str("name")?, self.get_str("arguments")?))
    }

    /// For a `tool-result` block: the call id it answers.
    pub fn tool_result_id(&self) -> Option<&str> {
        if self.kind() != "tool-result" {
            return None;
        }
        self.get_str("toolCallId")
    }

    /// For a `tool-result` block: its content blocks (validated at construction).
    pub fn tool_result_content(&self) -> Vec<Block> {
        self.0
            .get("content")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|b| b.as_object().map(|m| Block(m.clone()))).collect())
            .unwrap_or_default()
    }

    /// For a `tool-result` block: whether it reports an error.
    pub fn tool_result_is_error(&self) -> bool {
        self.0.get("isError").and_then(Value::as_bool).unwrap_or(false)
    }
}

impl Serialize for Block {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}
deserialize_via_from_value!(Block);

/// Validates an array of blocks at `path`.
pub fn blocks_from_value(v: &Value, path: &str) -> Result<Vec<Block>> {
    let arr = v.as_array().ok_or_else(|| Error::invalid(path, format!("expected an array, got {}", kind_of(v))))?;
    arr.iter().enumerate().map(|(i, b)| Block::from_value(b, &format!("{path}[{i}]"))).collect()
}

// ---------------------------------------------------------------------------------------------
// Messages

/// A message role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A system message (allowed in a session prefix; never produced by the derivation).
    System,
    /// A user message.
    User,
    /// An assistant message.
    Assistant,
}

impl Role {
    pub(crate) fn parse(s: &str, path: &str) -> Result<Role> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            other => Err(Error::invalid(path, format!("expected \"system\", \"user\" or \"assistant\", got {other:?}"))),
        }
    }

    /// The role's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// Which provider and model produced an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Provenance {
    /// The provider name.
    pub provider: String,
    /// The model name.
    pub model: String,
    /// Unknown fields, carried through.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl Provenance {
    /// Validates a provenance object at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<Provenance> {
        let f = Fields::of(v, path)?;
        Ok(Provenance {
            provider: f.str("provider")?.to_string(),
            model: f.str("model")?.to_string(),
            extra: f.extra(&["provider", "model"]),
        })
    }
}
deserialize_via_from_value!(Provenance);

/// A provider message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Message {
    /// The role.
    pub role: Role,
    /// The content blocks.
    pub content: Vec<Block>,
    /// Provenance, on assistant messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Unknown fields, carried through.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message { role: Role::User, content: vec![Block::text(text)], provenance: None, extra: JsonMap::new() }
    }

    /// A message with the given role and blocks.
    pub fn new(role: Role, content: Vec<Block>) -> Message {
        Message { role, content, provenance: None, extra: JsonMap::new() }
    }

    /// Validates a message at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<Message> {
        let f = Fields::of(v, path)?;
        let role = Role::parse(f.str("role")?, &f.p("role"))?;
        let content = blocks_from_value(f.value("content")?, &f.p("content"))?;
        let provenance = match f.opt_value("provenance")? {
            None => None,
            Some(p) => Some(Provenance::from_value(p, &f.p("provenance"))?),
        };
        Ok(Message { role, content, provenance, extra: f.extra(&["role", "content", "provenance"]) })
    }

    /// Validates a message at `path` as [`from_value`](Self::from_value) does (the same checks
    /// in the same order, so the same errors), taking the value rather than copying its blocks.
    pub fn from_owned_value(v: Value, path: &str) -> Result<Message> {
        let (role, provenance) = {
            let f = Fields::of(&v, path)?;
            let role = Role::parse(f.str("role")?, &f.p("role"))?;
            let content = f.array("content")?;
            let at = f.p("content");
            for (i, b) in content.iter().enumerate() {
                Block::check(b, &format!("{at}[{i}]"))?;
            }
            let provenance = match f.opt_value("provenance")? {
                None => None,
                Some(p) => Some(Provenance::from_value(p, &f.p("provenance"))?),
            };
            (role, provenance)
        };
        let Value::Object(mut map) = v else { unreachable!("checked: an object") };
        let content = match map.remove("content") {
            Some(Value::Array(blocks)) => blocks
                .into_iter()
                .map(|b| match b {
                    Value::Object(m) => Block(m),
                    _ => unreachable!("checked: blocks are objects"),
                })
                .collect(),
            _ => unreachable!("checked: an array"),
        };
        map.remove("role");
        map.remove("provenance");
        Ok(Message { role, content, provenance, extra: map })
    }

    /// A message the history derivation wrote (checked when its event was logged, serialised
    /// by this library): its fields are taken as they are, without checking every block again.
    /// A value of another shape is still an error, never a panic.
    pub(crate) fn from_derived_value(v: Value) -> Result<Message> {
        let Value::Object(mut map) = v else {
            return Err(Error::invalid("", format!("a derived message must be an object, got {}", kind_of(&v))));
        };
        let role = match map.remove("role") {
            Some(Value::String(r)) => Role::parse(&r, "role")?,
            other => return Err(Error::invalid("role", format!("expected a string, got {}", other.as_ref().map_or("nothing", kind_of)))),
        };
        let content = match map.remove("content") {
            Some(Value::Array(blocks)) => blocks
                .into_iter()
                .enumerate()
                .map(|(i, b)| match b {
                    Value::Object(m) => Ok(Block(m)),
                    other => Err(Error::invalid(format!("content[{i}]"), format!("expected an object, got {}", kind_of(&other)))),
                })
                .collect::<Result<Vec<Block>>>()?,
            other => {
                return Err(Error::invalid("content", format!("expected an array, got {}", other.as_ref().map_or("nothing", kind_of))))
            }
        };
        let provenance = match map.remove("provenance") {
            None => None,
            Some(p) => Some(Provenance::from_value(&p, "provenance")?),
        };
        Ok(Message { role, content, provenance, extra: map })
    }

    /// Validates an array of messages at `path`.
    pub fn list_from_value(v: &Value, path: &str) -> Result<Vec<Message>> {
        let arr = v.as_array().ok_or_else(|| Error::invalid(path, format!("expected an array of messages, got {}", kind_of(v))))?;
        arr.iter().enumerate().map(|(i, m)| Message::from_value(m, &format!("{path}[{i}]"))).collect()
    }

    /// The tool calls in this message, in order: (id, name, arguments).
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.content.iter().filter_map(Block::as_tool_call)
    }

    /// All text of text blocks, concatenated with newlines.
    pub fn text(&self) -> String {
        let parts: Vec<&str> = self.content.iter().filter(|b| b.kind() == "text").filter_map(|b| b.get_str("text")).collect();
        parts.join("\n")
    }

    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a message always serialises")
    }

    /// The message as a JSON value ([`to_value`](Self::to_value)'s), moving its blocks and
    /// fields into it instead of copying them.
    pub fn into_value(self) -> Value {
        let mut m = self.extra;
        m.insert("role".into(), Value::String(self.role.as_str().to_string()));
        m.insert("content".into(), Value::Array(self.content.into_iter().map(Block::into_value).collect()));
        if let Some(p) = self.provenance {
            m.insert("provenance".into(), serde_json::to_value(p).expect("a provenance always serialises"));
        }
        Value::Object(m)
    }
}
deserialize_via_from_value!(Message);

// ---------------------------------------------------------------------------------------------
// Usage

/// Provider-reported token usage, in disjoint buckets: `input_tokens` is uncached input only.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (a part of the output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Of `cache_write_tokens`: those written with a 5-minute TTL (Anthropic
    /// `cache_creation.ephemeral_5m_input_tokens`).
    #[serde(rename = "cacheWrite5mTokens", skip_serializing_if = "Option::is_none")]
    pub cache_write_5m_tokens: Option<u64>,
    /// Of `cache_write_tokens`: those written with a 1-hour TTL (Anthropic
    /// `cache_creation.ephemeral_1h_input_tokens`).
    #[serde(rename = "cacheWrite1hTokens", skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_tokens: Option<u64>,
    /// The provider's own cache diagnostics for this request (Anthropic `diagnostics`), when
    /// the request asked for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_diagnostics: Option<CacheDiagnostics>,
    /// The context edits the provider applied to this request before the model saw it
    /// (Anthropic `context_management.applied_edits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_edits: Option<Vec<ContextEdit>>,
    /// Unknown fields, carried through.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// A provider's diagnosis of a prompt-cache miss against the previous request (Anthropic's cache
/// diagnostics: the request names the previous response's id, the response says where the two
/// requests diverged).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheDiagnostics {
    /// The provider's reason, as it words it (`model_changed`, `system_changed`,
    /// `tools_changed`, `messages_changed`, `previous_message_not_found`, `unavailable`), or
    /// `none` (the provider found no divergence) or `pending` (its comparison had not finished).
    pub reason: String,
    /// The provider's estimate of the input tokens after the divergence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_tokens: Option<u64>,
}

impl CacheDiagnostics {
    /// Validates cache diagnostics at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<CacheDiagnostics> {
        let f = Fields::of(v, path)?;
        if let Some(k) = f.map.keys().find(|k| !["reason", "missedTokens"].contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a field of cache diagnostics (expected reason, missedTokens)"));
        }
        let reason = f.str("reason")?;
        if reason.is_empty() {
            return Err(Error::invalid(f.p("reason"), "is empty"));
        }
        Ok(CacheDiagnostics { reason: reason.to_string(), missed_tokens: f.opt_u64("missedTokens")? })
    }
}

/// One context edit a provider applied to a request server-side (Anthropic context editing:
/// `clear_tool_uses_20250919`, `clear_thinking_20251015`): the model saw the request with these
/// parts cleared.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextEdit {
    /// The provider's edit type (`clear_tool_uses_20250919`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Input tokens the edit cleared.
    pub cleared_input_tokens: u64,
    /// Tool uses cleared (oldest first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_tool_uses: Option<u64>,
    /// Thinking turns cleared (oldest first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_thinking_turns: Option<u64>,
}

impl ContextEdit {
    /// Validates a context edit at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<ContextEdit> {
        let f = Fields::of(v, path)?;
        const KEYS: &[&str] = &["type", "clearedInputTokens", "clearedToolUses", "clearedThinkingTurns"];
        if let Some(k) = f.map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(
                f.p(k),
                "is not a field of a context edit (expected type, clearedInputTokens, clearedToolUses, clearedThinkingTurns)",
            ));
        }
        Ok(ContextEdit {
            kind: f.str("type")?.to_string(),
            cleared_input_tokens: f.u64("clearedInputTokens")?,
            cleared_tool_uses: f.opt_u64("clearedToolUses")?,
            cleared_thinking_turns: f.opt_u64("clearedThinkingTurns")?,
        })
    }
}

impl Usage {
    /// Validates usage at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<Usage> {
        let f = Fields::of(v, path)?;
        Ok(Usage {
            input_tokens: f.u64("inputTokens")?,
            output_tokens: f.u64("outputTokens")?,
            cache_read_tokens: f.opt_u64("cacheReadTokens")?,
            cache_write_tokens: f.opt_u64("cacheWriteTokens")?,
            reasoning_tokens: f.opt_u64("reasoningTokens")?,
            cache_write_5m_tokens: f.opt_u64("cacheWrite5mTokens")?,
            cache_write_1h_tokens: f.opt_u64("cacheWrite1hTokens")?,
            cache_diagnostics: f
                .opt_value("cacheDiagnostics")?
                .map(|d| CacheDiagnostics::from_value(d, &f.p("cacheDiagnostics")))
                .transpose()?,
            context_edits: match f.opt_array("contextEdits")? {
                None => None,
                Some(a) => Some(
                    a.iter()
                        .enumerate()
                        .map(|(i, e)| ContextEdit::from_value(e, &format!("{}[{i}]", f.p("contextEdits"))))
                        .collect::<Result<Vec<_>>>()?,
                ),
            },
            extra: f.extra(&[
                "inputTokens",
                "outputTokens",
                "cacheReadTokens",
                "cacheWriteTokens",
                "reasoningTokens",
                "cacheWrite5mTokens",
                "cacheWrite1hTokens",
                "cacheDiagnostics",
                "contextEdits",
            ]),
        })
    }

    /// The whole prompt as the provider counted it: uncached + cache read + cache write.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens.unwrap_or(0) + self.cache_write_tokens.unwrap_or(0)
    }
}
deserialize_via_from_value!(Usage);

// ---------------------------------------------------------------------------------------------
// Tool schemas and call config

/// A tool the model may use: a **function tool** (the host runs it: `name`, `description`,
/// `parameters`) or a **provider tool** (the provider runs it server-side: web search, code
/// execution, ...), declared in the provider's own shape and sent verbatim, only to that
/// provider's format (`docs/render.md`, "Tools").
///
/// JSON forms (`docs/contract.md` §1.4):
/// - function tool: `{"name", "description"?, "parameters", ...unknown fields}`; the OpenAI
///   shape `{"type":"function","function":{"name","description"?,"parameters",...}}` and the
///   flat `{"type":"function","name",...}` are read too and stored in the canonical form (the
///   logged header never holds the OpenAI shape). A `description` that is `null` or absent is
///   absent (and not sent).
/// - provider tool: `{"type":"provider","format":<renderer name>,"tool":{...verbatim...}}`.
///
/// `name` is the tool's key in the list (unique; header deltas name tools by it): a function's
/// name, or for a provider tool `"<format>:<key>"`, where the key is the tool's own `name`, else
/// its `type` (with `:<server_label>` when it has one, as a remote MCP tool does), else its one
/// field (Gemini's `{"googleSearch":{}}`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSchema {
    /// The tool's key in the list (see the type's docs).
    pub name: String,
    /// What a function tool does (absent: none is sent); `None` for a provider tool.
    pub description: Option<String>,
    /// The JSON schema of a function tool's arguments; `null` for a provider tool.
    pub parameters: Value,
    /// A function tool's unknown fields, carried through (`strict`, `cache_control`, ...).
    pub extra: JsonMap,
    /// Set for a provider tool: its format and its object, verbatim.
    pub provider: Option<ProviderTool>,
}

/// A provider (server-side) tool: the format it belongs to and the tool object in that
/// provider's own shape, sent verbatim by that format's renderer only.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderTool {
    /// The body format (renderer name) the tool is for: `"anthropic"`, `"openai-responses"`,
    /// `"openai"`, `"gemini"` or `"gemini-interactions"`.
    pub format: String,
    /// The tool object as the provider documents it (`{"type":"web_search_20250305",
    /// "name":"web_search","max_uses":5}`, `{"type":"web_search"}`, `{"googleSearch":{}}`, ...).
    pub tool: JsonMap,
}

/// The formats a provider tool may name (the renderer names).
const TOOL_FORMATS: &[&str] = &["openai", "openai-responses", "anthropic", "gemini", "gemini-interactions"];

impl ToolSchema {
    /// A function tool.
    pub fn function(name: impl Into<String>, description: Option<String>, parameters: Value) -> ToolSchema {
        ToolSchema { name: name.into(), description, parameters, extra: JsonMap::new(), provider: None }
    }

    /// A provider tool of `format` (a renderer name), its object kept verbatim; its key in the
    /// list is derived from the object (see the type's docs).
    pub fn provider_tool(format: &str, tool: JsonMap) -> Result<ToolSchema> {
        let mut m = JsonMap::new();
        m.insert("type".into(), "provider".into());
        m.insert("format".into(), format.into());
        m.insert("tool".into(), Value::Object(tool));
        ToolSchema::from_value(&Value::Object(m), "tool")
    }

    /// Whether this is a provider tool.
    pub fn is_provider(&self) -> bool {
        self.provider.is_some()
    }

    /// Validates a tool at `path` (either form; the OpenAI function shape is converted).
    pub fn from_value(v: &Value, path: &str) -> Result<ToolSchema> {
        let f = Fields::of(v, path)?;
        match f.map.get("type") {
            None => ToolSchema::function_from(&f),
            Some(Value::String(t)) if t == "provider" => ToolSchema::provider_from(&f),
            Some(Value::String(t)) if t == "function" => match f.map.get("function") {
                // OpenAI's shape: {"type":"function","function":{...}}.
                Some(inner) => {
                    if let Some(k) = f.map.keys().find(|k| !["type", "function"].contains(&k.as_str())) {
                        return Err(Error::invalid(
                            f.p(k),
                            "is not a field of an OpenAI function tool ({\"type\":\"function\",\"function\":{...}}); put it inside \"function\"",
                        ));
                    }
                    let at = f.p("function");
                    let g = Fields::of(inner, &at)?;
                    if g.map.contains_key("type") {
                        return Err(Error::invalid(g.p("type"), "is not a field of the function object"));
                    }
                    ToolSchema::function_from(&g)
                }
                // The flat shape of the Responses API: {"type":"function","name",...}.
                None => ToolSchema::function_from(&f),
            },
            Some(Value::String(other)) => Err(Error::invalid(
                f.p("type"),
                format!(
                    "expected \"function\" or \"provider\", got {other:?}; a provider's own tool is declared as \
                     {{\"type\":\"provider\",\"format\":\"anthropic\",\"tool\":{{...the provider's tool object...}}}}"
                ),
            )),
            Some(other) => Err(Error::invalid(f.p("type"), format!("expected a string, got {}", kind_of(other)))),
        }
    }

    /// A function tool from its fields (`type`, when present, is `"function"` and dropped).
    fn function_from(f: &Fields<'_>) -> Result<ToolSchema> {
        let name = f.str("name")?;
        if name.is_empty() {
            return Err(Error::invalid(f.p("name"), "must not be empty"));
        }
        let parameters = f.value("parameters")?;
        as_object(parameters, &f.p("parameters"))?;
        // A tool description may be null or absent (every format lets it out).
        let description = match f.map.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(Error::invalid(f.p("description"), format!("expected a string or null, got {}", kind_of(v)))),
        };
        Ok(ToolSchema {
            name: name.to_string(),
            description,
            parameters: parameters.clone(),
            extra: f.extra(&["type", "name", "description", "parameters"]),
            provider: None,
        })
    }

    /// A provider tool: `{"type":"provider","format","tool"}`.
    fn provider_from(f: &Fields<'_>) -> Result<ToolSchema> {
        if let Some(k) = f.map.keys().find(|k| !["type", "format", "tool"].contains(&k.as_str())) {
            return Err(Error::invalid(
                f.p(k),
                "is not a field of a provider tool (expected type, format and tool: put the provider's own fields inside \"tool\")",
            ));
        }
        let format = f.str("format")?;
        if !TOOL_FORMATS.contains(&format) {
            return Err(Error::invalid(
                f.p("format"),
                format!("expected \"openai\", \"openai-responses\", \"anthropic\", \"gemini\" or \"gemini-interactions\" (the format whose renderer sends the tool), got {format:?}"),
            ));
        }
        let tool = as_object(f.value("tool")?, &f.p("tool"))?;
        let key = provider_tool_key(tool).ok_or_else(|| {
            Error::invalid(
                f.p("tool"),
                "names no tool: a provider tool object needs a \"name\", a \"type\", or a single field (as Gemini's {\"googleSearch\":{}})",
            )
        })?;
        Ok(ToolSchema {
            name: format!("{format}:{key}"),
            description: None,
            parameters: Value::Null,
            extra: JsonMap::new(),
            provider: Some(ProviderTool { format: format.to_string(), tool: tool.clone() }),
        })
    }

    /// Validates a list of tools (their keys, [`ToolSchema::name`], must be unique).
    pub fn list_from_value(v: &Value, path: &str) -> Result<Vec<ToolSchema>> {
        let arr = v.as_array().ok_or_else(|| Error::invalid(path, format!("expected an array of tool schemas, got {}", kind_of(v))))?;
        let tools: Vec<ToolSchema> =
            arr.iter().enumerate().map(|(i, t)| ToolSchema::from_value(t, &format!("{path}[{i}]"))).collect::<Result<_>>()?;
        for (i, t) in tools.iter().enumerate() {
            if tools[..i].iter().any(|u| u.name == t.name) {
                let at = if t.is_provider() { format!("{path}[{i}].tool") } else { format!("{path}[{i}].name") };
                return Err(Error::invalid(at, format!("duplicate tool name {:?}", t.name)));
            }
        }
        Ok(tools)
    }
}

/// The key of a provider tool object: its `name`, else its `type` (with `:<server_label>`),
/// else its one field.
fn provider_tool_key(tool: &JsonMap) -> Option<String> {
    let text = |k: &str| tool.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(n) = text("name") {
        return Some(n.to_string());
    }
    if let Some(t) = text("type") {
        return Some(match text("server_label") {
            Some(label) => format!("{t}:{label}"),
            None => t.to_string(),
        });
    }
    match tool.len() {
        1 => tool.keys().next().cloned(),
        _ => None,
    }
}

impl Serialize for ToolSchema {
    /// The canonical form: a provider tool as `{"type":"provider","format","tool"}`; a function
    /// tool as `{"name","description"?,"parameters"}` then its unknown fields in key order.
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if let Some(p) = &self.provider {
            let mut m = s.serialize_map(Some(3))?;
            m.serialize_entry("type", "provider")?;
            m.serialize_entry("format", &p.format)?;
            m.serialize_entry("tool", &p.tool)?;
            return m.end();
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        if let Some(d) = &self.description {
            m.serialize_entry("description", d)?;
        }
        m.serialize_entry("parameters", &self.parameters)?;
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}
deserialize_via_from_value!(ToolSchema);

/// Envelope keys that a call config's unknown fields may not shadow.
pub(crate) const ENVELOPE_KEYS: &[&str] = &["messages", "system", "tools", "sessionId", "turn", "step", "purpose", "instance"];

/// The per-call configuration: provider, model and sampling settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallConfig {
    /// The provider name (free-form: "openai", "anthropic", "deepseek", "llama.cpp", ...).
    pub provider: String,
    /// The model name.
    pub model: String,
    /// Reasoning effort, where the provider has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output token limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Unknown fields, carried through into the request envelope.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl CallConfig {
    /// A config with just a provider and a model.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> CallConfig {
        CallConfig {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
            extra: JsonMap::new(),
        }
    }

    /// Validates a call config at `path`.
    pub fn from_value(v: &Value, path: &str) -> Result<CallConfig> {
        let f = Fields::of(v, path)?;
        let provider = f.str("provider")?;
        if provider.is_empty() {
            return Err(Error::invalid(f.p("provider"), "must not be empty"));
        }
        let model = f.str("model")?;
        if model.is_empty() {
            return Err(Error::invalid(f.p("model"), "must not be empty"));
        }
        let stop = match f.opt_array("stop")? {
            None => None,
            Some(a) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        s.as_str().map(str::to_string).ok_or_else(|| {
                            Error::invalid(format!("{}[{i}]", f.p("stop")), format!("expected a string, got {}", kind_of(s)))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        let known = ["provider", "model", "reasoningEffort", "temperature", "maxTokens", "stop"];
        let extra = f.extra(&known);
        if let Some(k) = extra.keys().find(|k| ENVELOPE_KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is reserved for the request envelope"));
        }
        Ok(CallConfig {
            provider: provider.to_string(),
            model: model.to_string(),
            reasoning_effort: f.opt_str("reasoningEffort")?.map(str::to_string),
            temperature: f.opt_f64("temperature")?,
            max_tokens: f.opt_u64("maxTokens")?,
            stop,
            extra,
        })
    }

    /// The config as a JSON object.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a config always serialises")
    }
}
deserialize_via_from_value!(CallConfig);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owned_parse_is_the_borrowed_parse() {
        let ok = json!({"role":"user","content":[{"type":"text","text":"a"},
            {"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"r"}],"isError":false},
            {"type":"image","data":"x"}],"provenance":{"provider":"p","model":"m"},"note":1});
        assert_eq!(Message::from_owned_value(ok.clone(), "m").unwrap(), Message::from_value(&ok, "m").unwrap());
        // The same errors, checked in the same order (content before provenance).
        for bad in [
            json!([1]),
            json!({"role":"robot","content":[]}),
            json!({"role":"user"}),
            json!({"role":"user","content":{}}),
            json!({"role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[{"type":""}],"isError":false}]}),
            json!({"role":"user","content":[{"type":"text"}],"provenance":7}),
            json!({"role":"user","content":[],"provenance":7}),
        ] {
            let a = Message::from_owned_value(bad.clone(), "m").unwrap_err();
            let b = Message::from_value(&bad, "m").unwrap_err();
            assert_eq!((a.kind(), a.message()), (b.kind(), b.message()), "{bad}");
        }
        let block = json!({"type":"tool-call","id":"c","name":"n","arguments":"{}"});
        assert_eq!(Block::from_owned_value(block.clone(), "b").unwrap(), Block::from_value(&block, "b").unwrap());
        let bad = json!({"type":"tool-call","id":"","name":"n","arguments":"{}"});
        assert_eq!(Block::from_owned_value(bad.clone(), "b").unwrap_err().message(), Block::from_value(&bad, "b").unwrap_err().message());
    }

    #[test]
    fn unknown_fields_and_blocks_round_trip() {
        let v = json!({"role":"user","content":[{"type":"image","url":"x","z":1},{"type":"text","text":"hi","cache":true}],"meta":{"a":1}});
        let m = Message::from_value(&v, "m").unwrap();
        assert_eq!(m.to_value(), v);
    }

    #[test]
    fn errors_name_the_field() {
        let v = json!({"role":"user","content":[{"type":"text"}]});
        let e = Message::from_value(&v, "messages[3]").unwrap_err();
        assert_eq!(e.message(), "messages[3].content[0].text: is required");
        let v = json!({"role":"user","content":[],"provenance":null});
        let e = Message::from_value(&v, "").unwrap_err();
        assert!(e.message().starts_with("provenance: is null"), "{}", e.message());
        let v = json!({"role":"robot","content":[]});
        assert!(Message::from_value(&v, "").unwrap_err().message().starts_with("role: expected"));
    }

    #[test]
    fn config_rejects_reserved_keys() {
        let e = CallConfig::from_value(&json!({"provider":"p","model":"m","messages":[]}), "config").unwrap_err();
        assert_eq!(e.message(), "config.messages: is reserved for the request envelope");
    }

    #[test]
    fn pointer_finds_what_serde_json_pointer_finds() {
        let v = json!({"choices": [{"message": {"content": "hi", "tool_calls": [{"id": "c1"}]}}], "usage": {"a": 1}, "": {"x": 2}});
        for p in [
            "",
            "/choices",
            "/choices/0",
            "/choices/0/message/content",
            "/choices/0/message/tool_calls/0/id",
            "/choices/1",
            "/choices/00",
            "/choices/+0",
            "/choices/-1",
            "/choices/x",
            "/usage/a",
            "/usage/a/b",
            "/usage/missing",
            "/",
            "//x",
            "usage",
        ] {
            assert_eq!(pointer(&v, p), v.pointer(p), "pointer {p:?}");
        }
    }

    #[test]
    fn into_value_is_to_value() {
        let plain = Message::user_text("hi");
        let full = Message::from_value(
            &json!({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "tool-call", "id": "c", "name": "n", "arguments": "{}"}, {"type": "image", "data": [1, 2]}],
                "provenance": {"provider": "p", "model": "m", "responseId": "r"}, "zeta": {"k": 1}, "alpha": null}),
            "",
        )
        .unwrap();
        for m in [plain, full] {
            assert_eq!(m.clone().into_value(), m.to_value());
        }
    }
}
