//! Provider-native state on content blocks: which format a block came from, and what a
//! renderer of another format does with it.
//!
//! A response parser that keeps provider-native state on a block (a signature, an encrypted
//! reasoning item, an output item id, a whole item it has no vocabulary for) marks the block
//! with `"origin": <renderer name>` (`"openai-responses"`, `"anthropic"`, `"gemini"`). The
//! rule every renderer applies:
//!
//! - **Same format**: the native state is carried back verbatim.
//! - **Another format**: portable blocks (`text`, `image`, `tool-call`, `tool-result`) are
//!   rendered as usual and their native fields are ignored; every other block (reasoning,
//!   opaque items, redacted thinking) is dropped, since a provider rejects (or misreads)
//!   another provider's signatures and encrypted items.
//! - **No origin**: the block is what it always was (`reasoning` with a `signature` is
//!   Anthropic thinking, `redacted-thinking` is Anthropic's, plain reasoning is reasoning text).
//!
//! Items a parser has no block type for are kept whole in an **opaque block**:
//! `{"type":"opaque","origin":<format>,"item":<the provider's object, verbatim>}` (an OpenAI
//! compaction item, an Anthropic server tool block, a Gemini code-execution part, ...). Only
//! the renderer of `origin` sends it, unchanged.
//! `docs/providers/` has the per-format details.

use crate::error::{Error, Result};
use crate::types::{kind_of, Block, JsonMap};
use serde_json::Value;

/// The block field naming the format a block's native state belongs to.
pub const ORIGIN: &str = "origin";

/// The type of a block that carries one provider item verbatim.
pub const OPAQUE: &str = "opaque";

/// Block types every renderer can express; their native fields are ignored elsewhere.
const PORTABLE: &[&str] = &["text", "image", "tool-call", "tool-result"];

/// The format a block's native state belongs to, when it names one.
pub fn origin_of(b: &Block) -> Option<&str> {
    b.get_str(ORIGIN)
}

/// Whether a block carries native state of the target format (`origin` equals `target`).
pub fn is_native(b: &Block, target: &str) -> bool {
    origin_of(b) == Some(target)
}

/// Whether the renderer of `target` drops this block: it is not portable and its `origin`
/// names another format.
pub fn is_foreign(b: &Block, target: &str) -> bool {
    match origin_of(b) {
        Some(o) => o != target && !PORTABLE.contains(&b.kind()),
        None => false,
    }
}

/// Builds a block from a map, adding `origin`.
pub(crate) fn with_origin(mut m: JsonMap, origin: &str) -> Block {
    m.insert(ORIGIN.into(), origin.into());
    Block::from_value(&Value::Object(m), "").expect("a parser builds valid blocks")
}

/// An opaque block holding `item` verbatim.
pub(crate) fn opaque(origin: &str, item: Value) -> Block {
    let mut m = JsonMap::new();
    m.insert("type".into(), OPAQUE.into());
    m.insert(ORIGIN.into(), origin.into());
    m.insert("item".into(), item);
    Block::from_value(&Value::Object(m), "").expect("an opaque block is a valid block")
}

/// The item of an opaque block at `path` (it must be an object, and the block must name its
/// origin).
pub(crate) fn opaque_item<'a>(b: &'a Block, path: &str) -> Result<&'a Value> {
    match b.get(ORIGIN) {
        Some(Value::String(_)) => {}
        None => return Err(Error::invalid(format!("{path}.origin"), "is required (an opaque block names the format of its item)")),
        Some(v) => return Err(Error::invalid(format!("{path}.origin"), format!("expected a string, got {}", kind_of(v)))),
    }
    match b.get("item") {
        Some(v @ Value::Object(_)) => Ok(v),
        None => Err(Error::invalid(format!("{path}.item"), "is required")),
        Some(v) => Err(Error::invalid(format!("{path}.item"), format!("expected an object, got {}", kind_of(v)))),
    }
}

/// A native string field of a block (`thoughtSignature`, `itemId`, ...): absent, or a string.
pub(crate) fn native_str<'a>(b: &'a Block, key: &str, path: &str) -> Result<Option<&'a str>> {
    match b.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(Error::invalid(format!("{path}.{key}"), format!("expected a string, got {}", kind_of(v)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block(v: Value) -> Block {
        Block::from_value(&v, "").unwrap()
    }

    #[test]
    fn foreign_blocks_are_the_non_portable_ones_of_another_origin() {
        let reasoning = block(json!({"type":"reasoning","text":"t","origin":"gemini","thoughtSignature":"s"}));
        assert!(is_foreign(&reasoning, "anthropic"));
        assert!(!is_foreign(&reasoning, "gemini"));
        assert!(is_native(&reasoning, "gemini"));
        let call = block(json!({"type":"tool-call","id":"c","name":"n","arguments":"{}","origin":"gemini"}));
        assert!(!is_foreign(&call, "openai"));
        let plain = block(json!({"type":"reasoning","text":"t"}));
        assert!(!is_foreign(&plain, "gemini"));
        let item = opaque("openai-responses", json!({"type":"compaction","encrypted_content":"x"}));
        assert!(is_foreign(&item, "anthropic"));
        assert_eq!(opaque_item(&item, "p").unwrap()["type"], "compaction");
    }

    #[test]
    fn opaque_blocks_need_origin_and_item() {
        let e = opaque_item(&block(json!({"type":"opaque","item":{}})), "p").unwrap_err();
        assert_eq!(e.message(), "p.origin: is required (an opaque block names the format of its item)");
        let e = opaque_item(&block(json!({"type":"opaque","origin":"gemini","item":"x"})), "p").unwrap_err();
        assert_eq!(e.message(), "p.item: expected an object, got a string");
        let e = native_str(&block(json!({"type":"text","text":"","itemId":3})), "itemId", "p").unwrap_err();
        assert_eq!(e.message(), "p.itemId: expected a string, got a number");
    }
}
