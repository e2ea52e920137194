//! Cache rules: how long a provider keeps a cached prefix (its TTL) and the smallest prompt it
//! caches, per provider and model, as the providers document them (each figure below quotes
//! the documentation's wording). `explain` uses them to charge a lost prefix to **expiry** (the
//! gap since the request that wrote it is longer than the TTL) or to **below-minimum** (the
//! prefix is shorter than the provider caches). A host overrides them where they depend on its
//! settings or the provider changed them: [`CacheRules::from_value`], the explain option
//! `cacheRules`, `llmsession explain --cache-rules FILE`.

use crate::error::{Error, Result};
use crate::types::{Fields, JsonMap};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// The rule in force for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheRule {
    /// How long a cached prefix lives after the request that last used it, in milliseconds;
    /// `None`: the provider documents no TTL (nothing is charged to expiry).
    pub ttl_ms: Option<u64>,
    /// The smallest prefix the provider caches, in its tokens.
    pub min_tokens: u64,
}

/// What a request's log says about the cache settings in force.
#[derive(Clone, Debug, Default)]
pub struct CacheSettings<'a> {
    /// The provider (the call config's `provider`).
    pub provider: &'a str,
    /// The model.
    pub model: &'a str,
    /// The call config's pass-through fields (`prompt_cache_retention`, `prompt_cache_options`).
    pub config: Option<&'a JsonMap>,
    /// The request that wrote the prefix reported 1-hour cache writes (Anthropic `ttl: "1h"`).
    pub wrote_one_hour: bool,
}

/// The built-in rule (see the module docs).
pub fn builtin(s: &CacheSettings<'_>) -> CacheRule {
    let model = s.model.to_ascii_lowercase();
    let field = |k: &str| s.config.and_then(|c| c.get(k));
    match s.provider {
        "anthropic" => CacheRule {
            // "By default, the cache has a 5-minute lifetime. The cache is refreshed for no
            // additional cost each time the cached content is used." and "a 1-hour cache
            // duration" with `ttl: "1h"`.
            ttl_ms: Some(if s.wrote_one_hour { HOUR } else { 5 * MINUTE }),
            // "Minimum cacheable prompt length": 4096 tokens for Claude Opus 4.5 and 4.6 and
            // Claude Haiku 4.5; 2048 for Claude Sonnet 4.6 and Claude Haiku 3.5 and 3; 1024 for
            // the other models (Sonnet 4.5, Opus 4.1, Opus 4, Sonnet 4, Sonnet 3.7).
            min_tokens: if ["opus-4-5", "opus-4-6", "haiku-4-5"].iter().any(|m| model.contains(m)) {
                4096
            } else if ["sonnet-4-6", "3-5-haiku", "3-haiku", "haiku-3"].iter().any(|m| model.contains(m)) {
                2048
            } else {
                1024
            },
        },
        "openai" | "openai-responses" => {
            // `prompt_cache_options.ttl` (gpt-5.6 and later): "The ttl defaults to 30m".
            // `prompt_cache_retention: "24h"`: "extended prompt cache retention ... up to a
            // maximum of 24 hours". In memory (the default): "Cached prefixes generally remain
            // active for 5 to 10 minutes of inactivity, up to a maximum of one hour"; the lower
            // bound is taken, so a longer gap is charged to expiry.
            let options_ttl = field("prompt_cache_options").and_then(|o| o.get("ttl")).and_then(Value::as_str).and_then(duration_ms);
            let retention = field("prompt_cache_retention").and_then(Value::as_str);
            let ttl = options_ttl.or(match retention {
                Some("24h") => Some(24 * HOUR),
                _ if field("prompt_cache_options").is_some() => Some(30 * MINUTE),
                _ => Some(5 * MINUTE),
            });
            // "Caching is available for prompts containing 1024 tokens or more."
            CacheRule { ttl_ms: ttl, min_tokens: 1024 }
        }
        "gemini" => CacheRule {
            // Implicit caching documents no lifetime.
            ttl_ms: None,
            // "The minimum input token count for implicit caching": 1024 for 2.5 Flash, 2048
            // for 2.5 Pro; the issue gives 2048 and 4096 for the newer models (Flash, Pro).
            min_tokens: if model.contains("2.5") {
                if model.contains("pro") {
                    2048
                } else {
                    1024
                }
            } else if model.contains("pro") {
                4096
            } else {
                2048
            },
        },
        // "The minimum unit of cache storage is 64 tokens"; the cache is "automatically cleared,
        // typically within a few hours to a few days" (no TTL to charge).
        "deepseek" => CacheRule { ttl_ms: None, min_tokens: 64 },
        // A local server (llama.cpp, vLLM) keeps its slot's prefix until another prompt evicts it.
        _ => CacheRule { ttl_ms: None, min_tokens: 0 },
    }
}

/// `"30m"`, `"1h"`, `"24h"`, `"90s"` in milliseconds.
fn duration_ms(s: &str) -> Option<u64> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "s" => n * 1000,
        "m" => n * MINUTE,
        "h" => n * HOUR,
        "d" => n * 24 * HOUR,
        _ => return None,
    })
}

/// A host's override of one rule: either field may be left out (the built-in one stays).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Override {
    /// `Some(None)`: no TTL (`"ttlSeconds": null`).
    ttl_ms: Option<Option<u64>>,
    min_tokens: Option<u64>,
}

/// The host's overrides, keyed by `provider` or `provider/model` (the more specific wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheRules {
    by_key: BTreeMap<String, Override>,
}

impl CacheRules {
    /// Parses `{"<provider>" | "<provider>/<model>": {"ttlSeconds"?: n | null, "minTokens"?: n}}`.
    pub fn from_value(v: &Value) -> Result<CacheRules> {
        let path = "cacheRules";
        let Value::Object(m) = v else { return Err(Error::invalid(path, "expected an object keyed by provider or provider/model")) };
        let mut by_key = BTreeMap::new();
        for (k, r) in m {
            let p = format!("{path}.{k}");
            if k.is_empty() {
                return Err(Error::invalid(p, "the key is empty (expected a provider or provider/model)"));
            }
            let f = Fields::of(r, &p)?;
            if let Some(bad) = f.map.keys().find(|x| !["ttlSeconds", "minTokens"].contains(&x.as_str())) {
                return Err(Error::invalid(f.p(bad), "is not a cache rule field (expected ttlSeconds, minTokens)"));
            }
            let ttl_ms = match f.map.get("ttlSeconds") {
                None => None,
                Some(Value::Null) => Some(None),
                Some(t) => match t.as_u64() {
                    Some(0) | None => return Err(Error::invalid(f.p("ttlSeconds"), "expected a positive integer or null (no TTL)")),
                    Some(s) => Some(Some(s * 1000)),
                },
            };
            by_key.insert(k.clone(), Override { ttl_ms, min_tokens: f.opt_u64("minTokens")? });
        }
        Ok(CacheRules { by_key })
    }

    /// The rule for a request: the built-in one, then the provider's override, then the
    /// model's.
    pub fn rule(&self, s: &CacheSettings<'_>) -> CacheRule {
        let mut rule = builtin(s);
        for key in [s.provider.to_string(), format!("{}/{}", s.provider, s.model)] {
            if let Some(o) = self.by_key.get(&key) {
                if let Some(t) = o.ttl_ms {
                    rule.ttl_ms = t;
                }
                if let Some(m) = o.min_tokens {
                    rule.min_tokens = m;
                }
            }
        }
        rule
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s<'a>(provider: &'a str, model: &'a str) -> CacheSettings<'a> {
        CacheSettings { provider, model, ..Default::default() }
    }

    #[test]
    fn builtin_rules_follow_the_settings() {
        assert_eq!(builtin(&s("anthropic", "claude-sonnet-4-5")), CacheRule { ttl_ms: Some(5 * MINUTE), min_tokens: 1024 });
        assert_eq!(builtin(&s("anthropic", "claude-haiku-4-5")).min_tokens, 4096);
        let one_hour = CacheSettings { wrote_one_hour: true, ..s("anthropic", "claude-opus-4-6") };
        assert_eq!(builtin(&one_hour), CacheRule { ttl_ms: Some(HOUR), min_tokens: 4096 });
        let mut cfg = JsonMap::new();
        cfg.insert("prompt_cache_retention".into(), "24h".into());
        let extended = CacheSettings { config: Some(&cfg), ..s("openai", "gpt-5") };
        assert_eq!(builtin(&extended).ttl_ms, Some(24 * HOUR));
        assert_eq!(builtin(&s("openai", "gpt-5")).ttl_ms, Some(5 * MINUTE));
        assert_eq!(builtin(&s("llama.cpp", "qwen")), CacheRule { ttl_ms: None, min_tokens: 0 });
    }

    #[test]
    fn overrides_replace_the_fields_they_name() {
        let r = CacheRules::from_value(&json!({"openai": {"ttlSeconds": 600}, "openai/gpt-5-mini": {"minTokens": 2048}})).unwrap();
        assert_eq!(r.rule(&s("openai", "gpt-5")), CacheRule { ttl_ms: Some(600_000), min_tokens: 1024 });
        assert_eq!(r.rule(&s("openai", "gpt-5-mini")), CacheRule { ttl_ms: Some(600_000), min_tokens: 2048 });
        let none = CacheRules::from_value(&json!({"anthropic": {"ttlSeconds": null}})).unwrap();
        assert_eq!(none.rule(&s("anthropic", "claude-sonnet-4-5")).ttl_ms, None);
        for (bad, msg) in [
            (json!([]), "cacheRules: expected an object keyed by provider or provider/model"),
            (json!({"openai": {"ttl": 5}}), "cacheRules.openai.ttl: is not a cache rule field (expected ttlSeconds, minTokens)"),
            (json!({"openai": {"ttlSeconds": 0}}), "cacheRules.openai.ttlSeconds: expected a positive integer or null (no TTL)"),
        ] {
            assert_eq!(CacheRules::from_value(&bad).unwrap_err().message(), msg);
        }
    }
}
