//! The return-time model: how long the host stays away after a conversation request, as a
//! distribution the clock takes expectations over (see [`crate::clock`]).
//!
//! It is a weighted set of gap lengths plus the probability that the host never returns: the
//! host's own (`returnModel.gapsMs`), or the documented default prior, blended with the gaps the
//! session itself showed so far (learned). The clock conditions it on the time the host has been
//! away already, so the short gaps of a tool loop drop out by themselves.

use crate::error::{Error, Result};
use crate::types::Fields;
use serde::Serialize;
use serde_json::Value;

/// The default prior: the gaps that followed a request in 154 real Claude Code sessions
/// (9,428 gaps; `docs/caching.md`, "The default prior"), as (gap in milliseconds, how many
/// gaps it stands for): the median gap of each of 18 bins, from under 15 seconds to over 12
/// hours.
pub const DEFAULT_PRIOR: [(u64, u32); 18] = [
    (6000, 5911),
    (20000, 1128),
    (41000, 915),
    (73000, 391),
    (117000, 358),
    (185000, 237),
    (299000, 178),
    (467000, 87),
    (715000, 72),
    (1226000, 40),
    (1788000, 24),
    (2713000, 21),
    (3549000, 11),
    (5348000, 13),
    (8067000, 10),
    (14229000, 10),
    (27053000, 7),
    (69675000, 15),
];

/// How many of those sessions ended after their last request (the host never returned): the
/// default prior's share of never returning is `DEFAULT_PRIOR_ENDS / (DEFAULT_PRIOR_ENDS +
/// gaps)`, 1.6 %.
pub const DEFAULT_PRIOR_ENDS: u32 = 154;

/// The default probability that the host never returns, for a host's own distribution
/// (`returnModel.gapsMs` without `neverReturns`). The default prior carries its own
/// ([`DEFAULT_PRIOR_ENDS`]).
pub const DEFAULT_NEVER_RETURNS: f64 = 0.1;

/// How many of the session's gaps the prior counts as, by default: the prior is thousands of
/// real gaps, so one session's first few gaps move it little.
pub const DEFAULT_PRIOR_WEIGHT: f64 = 100.0;

/// The default prior's probability of never returning.
pub fn default_prior_never_returns() -> f64 {
    let gaps: u32 = DEFAULT_PRIOR.iter().map(|p| p.1).sum();
    f64::from(DEFAULT_PRIOR_ENDS) / f64::from(DEFAULT_PRIOR_ENDS + gaps)
}

/// A distribution of return times (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReturnModel {
    /// Finite gaps in milliseconds, ascending, with their probabilities (they sum to
    /// `1 - never_returns`).
    pub points: Vec<(u64, f64)>,
    /// The probability that the host never returns.
    pub never_returns: f64,
    /// Where it comes from, in words (`the default prior`, `4 gaps of this session + the
    /// default prior`, `the host's distribution`).
    pub source: String,
    /// The session's own gaps, when the model learns them (`None`: the host's distribution
    /// stands alone): a tier choice is priced with them alone ([`ReturnModel::tier_model`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<Vec<u64>>,
}

/// What the host gives as `returnModel` (every field optional): its own gaps (`gapsMs`, with
/// `weights`), the probability it never returns (`neverReturns`), whether the session's own
/// gaps are blended in (`learn`: by default only when no `gapsMs` are given), and how many gaps
/// the prior counts as against them (`priorWeight`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReturnModelSpec {
    /// The host's gaps (ms); `None`: the default prior.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaps_ms: Option<Vec<u64>>,
    /// Their weights (as many as gaps; default equal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<Vec<f64>>,
    /// The probability that the host never returns, in [0, 1): a share of the prior, which the
    /// session's own gaps dilute when they are learned.
    pub never_returns: f64,
    /// Whether the session's own gaps are blended in.
    pub learn: bool,
    /// How many gaps the prior counts as.
    pub prior_weight: f64,
}

impl Default for ReturnModelSpec {
    fn default() -> Self {
        ReturnModelSpec {
            gaps_ms: None,
            weights: None,
            never_returns: default_prior_never_returns(),
            learn: true,
            prior_weight: DEFAULT_PRIOR_WEIGHT,
        }
    }
}

impl ReturnModelSpec {
    /// Parses `{"gapsMs"?: [ms...], "weights"?: [w...], "neverReturns"?: p, "learn"?: bool,
    /// "priorWeight"?: n}` at `path`; errors name the field.
    pub fn from_value(v: &Value, path: &str) -> Result<ReturnModelSpec> {
        let f = Fields::of(v, path)?;
        const KEYS: [&str; 5] = ["gapsMs", "weights", "neverReturns", "learn", "priorWeight"];
        if let Some(k) = f.map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a return-model field (expected gapsMs, weights, neverReturns, learn, priorWeight)"));
        }
        let gaps_ms = match f.opt_array("gapsMs")? {
            None => None,
            Some(a) if a.is_empty() => return Err(Error::invalid(f.p("gapsMs"), "is empty (give at least one gap, or leave it out)")),
            Some(a) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, g)| {
                        g.as_u64()
                            .filter(|g| *g > 0)
                            .ok_or_else(|| Error::invalid(format!("{}[{i}]", f.p("gapsMs")), "expected a positive number of milliseconds"))
                    })
                    .collect::<Result<Vec<u64>>>()?,
            ),
        };
        let weights = match f.opt_array("weights")? {
            None => None,
            Some(a) => {
                let n = gaps_ms.as_ref().map(Vec::len).ok_or_else(|| Error::invalid(f.p("weights"), "needs gapsMs"))?;
                if a.len() != n {
                    return Err(Error::invalid(f.p("weights"), format!("has {} weights for {n} gaps", a.len())));
                }
                Some(
                    a.iter()
                        .enumerate()
                        .map(|(i, w)| {
                            w.as_f64()
                                .filter(|w| w.is_finite() && *w > 0.0)
                                .ok_or_else(|| Error::invalid(format!("{}[{i}]", f.p("weights")), "expected a positive number"))
                        })
                        .collect::<Result<Vec<f64>>>()?,
                )
            }
        };
        let never_returns = match f.opt_f64("neverReturns")? {
            None if gaps_ms.is_some() => DEFAULT_NEVER_RETURNS,
            None => default_prior_never_returns(),
            Some(p) if (0.0..1.0).contains(&p) => p,
            Some(p) => return Err(Error::invalid(f.p("neverReturns"), format!("must be in [0, 1), got {p}"))),
        };
        let prior_weight = match f.opt_f64("priorWeight")? {
            None => DEFAULT_PRIOR_WEIGHT,
            Some(w) if w.is_finite() && w > 0.0 => w,
            Some(w) => return Err(Error::invalid(f.p("priorWeight"), format!("must be a positive number, got {w}"))),
        };
        let learn = f.opt_bool("learn")?.unwrap_or(gaps_ms.is_none());
        Ok(ReturnModelSpec { gaps_ms, weights, never_returns, learn, prior_weight })
    }

    /// The model, with the session's own gaps (`learned`, in ms) when `learn` is on.
    pub fn model(&self, learned: &[u64]) -> ReturnModel {
        let (prior, prior_name): (Vec<(u64, f64)>, &str) = match &self.gaps_ms {
            Some(g) => {
                let w = self.weights.clone().unwrap_or_else(|| vec![1.0; g.len()]);
                (g.iter().copied().zip(w).collect(), "the host's distribution")
            }
            None => (DEFAULT_PRIOR.iter().map(|&(g, n)| (g, f64::from(n))).collect(), "the default prior"),
        };
        let prior_total: f64 = prior.iter().map(|p| p.1).sum();
        let mut points: Vec<(u64, f64)> = Vec::new();
        let learned: Vec<u64> = if self.learn { learned.iter().copied().filter(|g| *g > 0).collect() } else { Vec::new() };
        // In counts of gaps: the prior's points `prior_weight · (1 − neverReturns)`, never
        // returning `prior_weight · neverReturns`, each of the session's gaps 1.
        let returning = self.prior_weight * (1.0 - self.never_returns);
        points.extend(prior.iter().map(|(g, w)| (*g, w / prior_total * returning)));
        points.extend(learned.iter().map(|g| (*g, 1.0)));
        let source = match learned.len() {
            0 => prior_name.to_string(),
            1 => format!("1 gap of this session + {prior_name}"),
            n => format!("{n} gaps of this session + {prior_name}"),
        };
        // The prior, never returning included, counts as `prior_weight` gaps against the
        // session's own: a session whose gaps all ended is evidence that its host comes back,
        // as much as it is evidence about how long it stays away.
        let never = self.never_returns * self.prior_weight / (self.prior_weight + learned.len() as f64);
        let mut m = ReturnModel::new(points, never, source);
        if self.learn {
            m.observed = Some(learned);
        }
        m
    }
}

impl ReturnModel {
    /// A model of `points` (gap in ms, weight > 0; normalised here) and the probability
    /// `never_returns`.
    pub fn new(mut points: Vec<(u64, f64)>, never_returns: f64, source: impl Into<String>) -> ReturnModel {
        points.retain(|p| p.1 > 0.0 && p.1.is_finite());
        points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        // Equal gaps become one point (sums in a fixed order: deterministic).
        let mut merged: Vec<(u64, f64)> = Vec::with_capacity(points.len());
        for (g, w) in points {
            match merged.last_mut() {
                Some(last) if last.0 == g => last.1 += w,
                _ => merged.push((g, w)),
            }
        }
        let total: f64 = merged.iter().map(|p| p.1).sum();
        let never = if merged.is_empty() { 1.0 } else { never_returns.clamp(0.0, 1.0) };
        if total > 0.0 {
            for p in merged.iter_mut() {
                p.1 = p.1 / total * (1.0 - never);
            }
        }
        ReturnModel { points: merged, never_returns: never, source: source.into(), observed: None }
    }

    /// The probability that a gap is a pause longer than `pause_ms` (the host never returning
    /// included).
    pub fn pause_probability(&self, pause_ms: u64) -> f64 {
        self.never_returns + self.points.iter().filter(|p| p.0 > pause_ms).map(|p| p.1).sum::<f64>()
    }

    /// The model a tier choice is priced with (see [`crate::clock::tier_costs`]): the session's
    /// own gaps alone when the model learns them, with the probability of never returning
    /// this model gives; `None` when the session has not yet paused longer than `pause_ms`
    /// (nothing to bet a tier on). The host's distribution, when it gave one, as it is.
    pub fn tier_model(&self, pause_ms: u64) -> Option<ReturnModel> {
        let Some(gaps) = &self.observed else { return Some(self.clone()) };
        let pauses = gaps.iter().filter(|g| **g > pause_ms).count();
        if pauses == 0 {
            return None;
        }
        let source = format!("{} of this session's {} gaps were pauses", pauses, gaps.len());
        Some(ReturnModel::new(gaps.iter().map(|g| (*g, 1.0)).collect(), self.never_returns, source))
    }

    /// The documented default: [`DEFAULT_PRIOR`] and its share of never returning.
    pub fn default_prior() -> ReturnModel {
        ReturnModelSpec::default().model(&[])
    }

    /// The probability that the host, away for `away_ms` already, returns within `within_ms`
    /// more.
    pub fn returns_within(&self, away_ms: u64, within_ms: u64) -> f64 {
        let (mut inside, mut all) = (0.0, self.never_returns);
        for &(g, w) in &self.points {
            if g > away_ms {
                all += w;
                if g <= away_ms.saturating_add(within_ms) {
                    inside += w;
                }
            }
        }
        if all > 0.0 {
            inside / all
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_prior_is_documented_and_normalised() {
        let m = ReturnModel::default_prior();
        assert_eq!(m.points.len(), 18);
        assert_eq!(m.points[0].0, 6_000);
        let gaps: u32 = DEFAULT_PRIOR.iter().map(|p| p.1).sum();
        assert_eq!((gaps, DEFAULT_PRIOR_ENDS), (9_428, 154), "the counts docs/caching.md gives");
        let total: f64 = m.points.iter().map(|p| p.1).sum::<f64>() + m.never_returns;
        assert!((total - 1.0).abs() < 1e-12);
        assert!((m.never_returns - 154.0 / 9_582.0).abs() < 1e-12, "{}", m.never_returns);
        assert_eq!(m.source, "the default prior");
        // Away 5 minutes (past the 240 to 390 s bin's median, 299 s): of the 310 gaps longer
        // than that and the 154 ends, the 255 gaps up to 59 minutes (3,549 s) return within the
        // next hour.
        let p = m.returns_within(300_000, 3_600_000);
        let later: u32 = DEFAULT_PRIOR.iter().filter(|g| g.0 > 300_000).map(|g| g.1).sum();
        let within: u32 = DEFAULT_PRIOR.iter().filter(|g| g.0 > 300_000 && g.0 <= 3_900_000).map(|g| g.1).sum();
        assert!((p - f64::from(within) / f64::from(later + 154)).abs() < 1e-12, "{p}");
        // A host given its own gaps without neverReturns keeps the documented 0.1.
        let host = ReturnModelSpec::from_value(&json!({"gapsMs": [60000]}), "returnModel").unwrap();
        assert_eq!(host.never_returns, DEFAULT_NEVER_RETURNS);
    }

    #[test]
    fn learned_gaps_weigh_against_the_prior() {
        let spec = ReturnModelSpec { prior_weight: 3.0, never_returns: 0.1, ..ReturnModelSpec::default() };
        let m = spec.model(&[1_000, 2_000, 600_000, 600_000]);
        assert_eq!(m.source, "4 gaps of this session + the default prior");
        // 600000 is one point of weight 2 (of 4 + 3 prior); never returning is part of the
        // prior: 0.1 of its 3.
        let ten = m.points.iter().find(|p| p.0 == 600_000).unwrap().1;
        assert!((ten - 2.0 / 7.0).abs() < 1e-12, "{ten}");
        assert!((m.never_returns - 0.3 / 7.0).abs() < 1e-12, "{}", m.never_returns);
        assert_eq!(m.observed.as_deref(), Some(&[1_000, 2_000, 600_000, 600_000][..]));
        // A tier is bet on the session's own gaps: 2 of its 4 were pauses longer than 5 minutes.
        let t = m.tier_model(300_000).unwrap();
        assert!((t.pause_probability(300_000) - (0.5 * (1.0 - 0.3 / 7.0) + 0.3 / 7.0)).abs() < 1e-12);
        assert!(spec.model(&[1_000, 2_000]).tier_model(300_000).is_none(), "no pause yet: nothing to bet a tier on");
        // By default the prior counts as 100 gaps: four of the session's move it little.
        let d = ReturnModelSpec::default().model(&[1_000, 2_000, 600_000, 600_000]);
        let never = default_prior_never_returns() * 100.0 / 104.0;
        assert!((d.never_returns - never).abs() < 1e-12, "{}", d.never_returns);
        let host = ReturnModelSpec::from_value(&json!({"gapsMs": [60000, 7200000], "neverReturns": 0.5}), "returnModel").unwrap();
        assert!(!host.learn);
        let m = host.model(&[5]);
        assert_eq!(m.source, "the host's distribution");
        assert_eq!(m.points, vec![(60_000, 0.25), (7_200_000, 0.25)]);
    }

    #[test]
    fn a_bad_model_names_the_field() {
        for (v, msg) in [
            (
                json!({"gaps": []}),
                "returnModel.gaps: is not a return-model field (expected gapsMs, weights, neverReturns, learn, priorWeight)",
            ),
            (json!({"gapsMs": []}), "returnModel.gapsMs: is empty (give at least one gap, or leave it out)"),
            (json!({"gapsMs": [1, -2]}), "returnModel.gapsMs[1]: expected a positive number of milliseconds"),
            (json!({"gapsMs": [1], "weights": [1, 2]}), "returnModel.weights: has 2 weights for 1 gaps"),
            (json!({"weights": [1]}), "returnModel.weights: needs gapsMs"),
            (json!({"neverReturns": 1}), "returnModel.neverReturns: must be in [0, 1), got 1"),
            (json!({"priorWeight": 0}), "returnModel.priorWeight: must be a positive number, got 0"),
        ] {
            assert_eq!(ReturnModelSpec::from_value(&v, "returnModel").unwrap_err().message(), msg);
        }
    }
}
