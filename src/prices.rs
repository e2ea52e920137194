//! Prices: what a request cost, from a host-supplied price table. The library has no prices of
//! its own (they change, and they differ by contract); the host gives them per provider and
//! model, in its currency per million tokens:
//!
//! ```json
//! {"anthropic/claude-sonnet-4-5": {"input": 3, "cachedInput": 0.3,
//!                                  "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15},
//!  "openai": {"input": 1.25, "cachedInput": 0.125, "cacheWrite": 1.5625, "output": 10}}
//! ```
//!
//! A key is `provider/model` or `provider` (for every model of it without its own key).
//! `cacheWrite` is one price for every write, or one per TTL (`"5m"`, `"1h"`, and `"default"`
//! for writes the provider does not split by TTL; without `"default"` those are priced at
//! `"5m"`); a table without `cacheWrite` prices writes as input. `explain` prices every request
//! it has usage for ([`Price::cost`]), splits the uncached part by cause, and says what the
//! request would have cost with no cache (every prompt token at the input price).

use crate::error::{Error, Result};
use crate::types::{Fields, Usage};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The price of cache writes.
#[derive(Clone, Debug, PartialEq)]
pub enum WritePrice {
    /// One price for every write.
    Flat(f64),
    /// One per TTL (`"5m"`, `"1h"`, `"default"`, ...).
    ByTtl(BTreeMap<String, f64>),
}

/// The prices of one provider (or model), per million tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Input read from the cache.
    pub cached_input: f64,
    /// Input written to the cache; `None`: priced as input.
    pub cache_write: Option<WritePrice>,
    /// Output.
    pub output: f64,
}

/// What one request cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Everything: uncached input, cache reads, cache writes, output.
    pub total: f64,
    /// The uncached input (cache writes included): the part the causes split.
    pub uncached: f64,
    /// The cache reads.
    pub cached: f64,
    /// The output.
    pub output: f64,
    /// What the request would have cost with no cache: every prompt token at the input price.
    pub no_cache: f64,
}

const M: f64 = 1_000_000.0;

impl Price {
    /// The price per million tokens of a cache write at `ttl` (`"5m"`, `"1h"`, `"default"`):
    /// the flat `cacheWrite`, the one for that TTL (`"default"` falls back to `"5m"`), else the
    /// input price.
    pub fn write_rate(&self, ttl: &str) -> f64 {
        match &self.cache_write {
            None => self.input,
            Some(WritePrice::Flat(p)) => *p,
            Some(WritePrice::ByTtl(m)) => {
                let key = if ttl == "default" && !m.contains_key("default") { "5m" } else { ttl };
                m.get(key).copied().unwrap_or(self.input)
            }
        }
    }

    fn write(&self, ttl: &str, tokens: u64) -> f64 {
        tokens as f64 * self.write_rate(ttl) / M
    }

    /// The cost of a request with this usage.
    pub fn cost(&self, u: &Usage) -> Cost {
        let writes = u.cache_write_tokens.unwrap_or(0);
        let (w5, w1) = (u.cache_write_5m_tokens.unwrap_or(0), u.cache_write_1h_tokens.unwrap_or(0));
        let unsplit = writes.saturating_sub(w5 + w1);
        let write = self.write("5m", w5) + self.write("1h", w1) + self.write("default", unsplit);
        let uncached = u.input_tokens as f64 * self.input / M + write;
        let cached = u.cache_read_tokens.unwrap_or(0) as f64 * self.cached_input / M;
        let output = u.output_tokens as f64 * self.output / M;
        Cost { total: uncached + cached + output, uncached, cached, output, no_cache: u.prompt_tokens() as f64 * self.input / M + output }
    }
}

/// A host's price table (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable {
    by_key: BTreeMap<String, Price>,
}

fn price_of(v: &Value, path: &str) -> Result<f64> {
    match v.as_f64() {
        Some(p) if p >= 0.0 && p.is_finite() => Ok(p),
        _ => Err(Error::invalid(path, "expected a non-negative number (a price per million tokens)")),
    }
}

impl PriceTable {
    /// Parses the JSON form (see the module docs); every price is a non-negative number, and
    /// `input`, `cachedInput` and `output` are required.
    pub fn from_value(v: &Value) -> Result<PriceTable> {
        let Value::Object(m) = v else { return Err(Error::invalid("prices", "expected an object keyed by provider or provider/model")) };
        let mut by_key = BTreeMap::new();
        for (k, p) in m {
            let path = format!("prices.{k}");
            if k.is_empty() {
                return Err(Error::invalid(path, "the key is empty (expected a provider or provider/model)"));
            }
            let f = Fields::of(p, &path)?;
            const KEYS: &[&str] = &["input", "cachedInput", "cacheWrite", "output"];
            if let Some(bad) = f.map.keys().find(|x| !KEYS.contains(&x.as_str())) {
                return Err(Error::invalid(f.p(bad), "is not a price (expected input, cachedInput, cacheWrite, output)"));
            }
            let need = |key: &str| match f.map.get(key) {
                None => Err(Error::invalid(f.p(key), "is required")),
                Some(v) => price_of(v, &f.p(key)),
            };
            let cache_write = match f.map.get("cacheWrite") {
                None => None,
                Some(Value::Object(w)) => {
                    let mut by_ttl = BTreeMap::new();
                    for (ttl, p) in w {
                        by_ttl.insert(ttl.clone(), price_of(p, &format!("{}.{ttl}", f.p("cacheWrite")))?);
                    }
                    Some(WritePrice::ByTtl(by_ttl))
                }
                Some(p) => Some(WritePrice::Flat(
                    price_of(p, &f.p("cacheWrite"))
                        .map_err(|_| Error::invalid(f.p("cacheWrite"), "expected a non-negative number or an object of prices by TTL"))?,
                )),
            };
            by_key.insert(
                k.clone(),
                Price { input: need("input")?, cached_input: need("cachedInput")?, cache_write, output: need("output")? },
            );
        }
        Ok(PriceTable { by_key })
    }

    /// The price of a model: its own key, else its provider's.
    pub fn price(&self, provider: &str, model: &str) -> Option<&Price> {
        self.by_key.get(&format!("{provider}/{model}")).or_else(|| self.by_key.get(provider))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_is_priced_by_bucket_and_ttl() {
        let t = PriceTable::from_value(&json!({
            "anthropic/claude-sonnet-4-5": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15},
            "anthropic": {"input": 1, "cachedInput": 0.1, "output": 5}}))
        .unwrap();
        let u = Usage {
            input_tokens: 1_000,
            output_tokens: 100,
            cache_read_tokens: Some(10_000),
            cache_write_tokens: Some(3_000),
            cache_write_5m_tokens: Some(2_000),
            cache_write_1h_tokens: Some(1_000),
            ..Default::default()
        };
        let c = t.price("anthropic", "claude-sonnet-4-5").unwrap().cost(&u);
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} != {b}");
        close(c.uncached, (1_000.0 * 3.0 + 2_000.0 * 3.75 + 1_000.0 * 6.0) / 1e6);
        close(c.cached, 10_000.0 * 0.3 / 1e6);
        close(c.output, 100.0 * 15.0 / 1e6);
        close(c.total, c.uncached + c.cached + c.output);
        close(c.no_cache, 14_000.0 * 3.0 / 1e6 + c.output);
        // Another model falls back to the provider's prices; writes without a price are input.
        let c = t.price("anthropic", "claude-haiku-4-5").unwrap().cost(&u);
        close(c.uncached, 4_000.0 / 1e6);
        assert!(t.price("openai", "gpt-5").is_none());
    }

    #[test]
    fn a_bad_table_names_the_field() {
        for (bad, msg) in [
            (json!([]), "prices: expected an object keyed by provider or provider/model"),
            (json!({"openai": {"input": 1, "output": 2}}), "prices.openai.cachedInput: is required"),
            (
                json!({"openai": {"input": -1, "cachedInput": 0, "output": 2}}),
                "prices.openai.input: expected a non-negative number (a price per million tokens)",
            ),
            (
                json!({"openai": {"input": 1, "cachedInput": 0, "output": 2, "write": 3}}),
                "prices.openai.write: is not a price (expected input, cachedInput, cacheWrite, output)",
            ),
            (
                json!({"openai": {"input": 1, "cachedInput": 0, "output": 2, "cacheWrite": "x"}}),
                "prices.openai.cacheWrite: expected a non-negative number or an object of prices by TTL",
            ),
        ] {
            assert_eq!(PriceTable::from_value(&bad).unwrap_err().message(), msg);
        }
    }
}
