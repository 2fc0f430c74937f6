//! The `budgets:` section: request-rate, token-rate and concurrency limits and USD budgets per
//! client key and per team, and what happens to them while the shared counters (Redis) are
//! down. Only what the operator writes; `guard::budget` enforces it and reports read it.
//! Every field is optional: a key or team without a limit on an axis is not limited on it.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range, Says};
use super::Problem;

/// Limits and budgets per client key and per team (`docs/reference.md`, "Limits and budgets").
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// What is enforced while Redis (`state.redis_url`) is unreachable.
    pub when_redis_down: WhenRedisDown,
    /// Whether answers of self-hosted pools count toward USD budgets, at the pool's marginal
    /// GPU cost (one sequence slot of the node for as long as the answer took).
    pub count_self_hosted: bool,
    /// How long a self-hosted answer is assumed to take at most when its worst case is
    /// reserved (seconds, 1 to 3600).
    pub self_hosted_reserve_secs: u64,
    /// Longest a request waits on Redis for its limits (ms, 1 to 5000); past it, Redis counts
    /// as down for this request and `when_redis_down` applies.
    pub redis_timeout_ms: u64,
    /// How long a reservation lives in Redis if its router never settles it (a crashed
    /// replica), in seconds (10 to 86400).
    pub reservation_ttl_secs: u64,
    /// Limits per client key: a static key by its environment variable (in `client_keys_env`),
    /// an issued key by its 12-hex id.
    pub keys: BTreeMap<String, KeyLimits>,
    /// Limits per team (the owner of issued keys), over all of the team's keys together.
    pub teams: BTreeMap<String, KeyLimits>,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            when_redis_down: WhenRedisDown::default(),
            count_self_hosted: true,
            self_hosted_reserve_secs: 60,
            reservation_ttl_secs: 600,
            redis_timeout_ms: 200,
            keys: BTreeMap::new(),
            teams: BTreeMap::new(),
        }
    }
}

/// Fail open (count on this replica alone) or closed (refuse) per kind of limit.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WhenRedisDown {
    /// USD budgets (`usd_per_day`, `usd_per_month`): `closed` refuses a request with a budget
    /// (503 `budget_state_unavailable`), `open` counts it on this replica alone.
    pub budgets: FailMode,
    /// `rpm`, `tpm` and `concurrent`: `open` counts on this replica alone, `closed` refuses.
    pub rate_limits: FailMode,
}

impl Default for WhenRedisDown {
    fn default() -> Self {
        WhenRedisDown { budgets: FailMode::Closed, rate_limits: FailMode::Open }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// Count on this replica alone (N replicas may let up to N times the limit through).
    Open,
    /// Refuse the request.
    Closed,
}

/// The limits of one key or team; each absent one is no limit.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyLimits {
    /// Requests per minute (a fixed window on the UTC minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    /// Tokens per minute: prompt estimate plus `max_tokens` when admitted, corrected to the
    /// reported usage at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Requests in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<u64>,
    /// US dollars per UTC day (exact decimal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub usd_per_day: Option<Decimal>,
    /// US dollars per UTC calendar month (exact decimal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub usd_per_month: Option<Decimal>,
}

impl KeyLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.rpm.is_some()
            || self.tpm.is_some()
            || self.concurrent.is_some()
            || self.usd_per_day.is_some()
            || self.usd_per_month.is_some()
    }

    /// Whether a USD budget is set.
    pub fn has_budget(&self) -> bool {
        self.usd_per_day.is_some() || self.usd_per_month.is_some()
    }

    /// These limits, with each one `over` sets taken from it instead.
    pub fn overridden_by(&self, over: &KeyLimits) -> KeyLimits {
        KeyLimits {
            rpm: over.rpm.or(self.rpm),
            tpm: over.tpm.or(self.tpm),
            concurrent: over.concurrent.or(self.concurrent),
            usd_per_day: over.usd_per_day.or(self.usd_per_day),
            usd_per_month: over.usd_per_month.or(self.usd_per_month),
        }
    }

    /// Range problems, each at `at.FIELD`.
    pub fn check(&self, at: &str) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (field, value) in [("rpm", self.rpm), ("tpm", self.tpm), ("concurrent", self.concurrent)] {
            if value == Some(0) {
                problems.push(Problem::new(format!("{at}.{field}"), "must be at least 1"));
            }
        }
        for (field, value) in [("usd_per_day", self.usd_per_day), ("usd_per_month", self.usd_per_month)] {
            if let Some(usd) = value {
                if usd.is_sign_negative() {
                    problems.push(Problem::new(format!("{at}.{field}"), format!("{usd} is negative")));
                } else if usd > Decimal::from(1_000_000) {
                    problems.push(Problem::new(format!("{at}.{field}"), format!("{usd} is over 1000000")));
                }
            }
        }
        problems
    }
}

impl BudgetsConfig {
    /// The ranges of the section's numbers (keys below `budgets`).
    pub const RANGES: &'static [Range] = &[
        Range::between("self_hosted_reserve_secs", 1.0, 3_600.0).says(Says::OutOfRange),
        Range::between("reservation_ttl_secs", 10.0, 86_400.0).says(Says::OutOfRange),
        Range::between("redis_timeout_ms", 1.0, 5_000.0).says(Says::OutOfRange),
    ];
}

/// What types cannot check: ranges, and that a key named is a static key of this config or
/// could be an issued key's id (issued keys live in the store, so only the form is checked).
pub fn check(b: &BudgetsConfig, client_keys_env: &[String]) -> Vec<Problem> {
    let values = [
        ("self_hosted_reserve_secs", b.self_hosted_reserve_secs as f64),
        ("reservation_ttl_secs", b.reservation_ttl_secs as f64),
        ("redis_timeout_ms", b.redis_timeout_ms as f64),
    ];
    let mut problems = range::check("budgets", BudgetsConfig::RANGES, &values);
    for (name, limits) in &b.keys {
        let at = format!("budgets.keys.{name}");
        let known = client_keys_env.contains(name) || crate::canonical::KeyId::parse(name).is_some();
        if !known {
            problems.push(Problem::new(
                at.clone(),
                format!("`{name}` is neither in client_keys_env nor an issued key's 12-hex id"),
            ));
        }
        problems.extend(limits.check(&at));
    }
    for (name, limits) in &b.teams {
        let at = format!("budgets.teams.{name}");
        if name.trim().is_empty() {
            problems.push(Problem::new(at.clone(), "a team name must not be empty"));
        }
        problems.extend(limits.check(&at));
    }
    problems
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_malformed_budget_names_its_key_path() {
        let base = "client_keys_env: [TEAM_A_KEY]\nbackends: [{name: a, kind: openai, model: m}]\n\
                    tasks: [{name: t, backends: [a], slo: {ttft_ms: 500}}]\n";
        let problems = |budgets: &str| -> Vec<String> {
            match crate::config::parse(&format!("{base}budgets: {budgets}\n")) {
                Ok(_) => vec![],
                Err(p) => p.iter().map(|p| p.to_string()).collect(),
            }
        };
        let bad_usd = problems("{keys: {TEAM_A_KEY: {usd_per_day: 'fifty'}}}");
        assert_eq!(bad_usd.len(), 1, "{bad_usd:?}");
        assert!(bad_usd[0].starts_with("budgets.keys.TEAM_A_KEY.usd_per_day: "), "{bad_usd:?}");
        assert_eq!(
            problems("{keys: {TEAM_B_KEY: {rpm: 0}, 0123456789ab: {usd_per_month: '-1'}}, teams: {pay: {tpm: 0}}}"),
            vec![
                "budgets.keys.0123456789ab.usd_per_month: -1 is negative",
                "budgets.keys.TEAM_B_KEY: `TEAM_B_KEY` is neither in client_keys_env nor an issued key's 12-hex id",
                "budgets.keys.TEAM_B_KEY.rpm: must be at least 1",
                "budgets.teams.pay.tpm: must be at least 1",
            ]
        );
        let unknown = problems("{keys: {TEAM_A_KEY: {rpd: 3}}}");
        assert!(unknown[0].starts_with("budgets.keys.TEAM_A_KEY.rpd: unknown field `rpd`"), "{unknown:?}");
        assert_eq!(problems("{when_redis_down: {budgets: ajar}}").len(), 1);
        let ok = crate::config::parse(&format!(
            "{base}budgets: {{when_redis_down: {{budgets: open}}, keys: {{TEAM_A_KEY: {{rpm: 600, usd_per_day: '50.25'}}}}}}\n"
        ))
        .unwrap();
        assert_eq!(ok.budgets.keys["TEAM_A_KEY"].usd_per_day, Some(rust_decimal::Decimal::new(5025, 2)));
        assert_eq!(ok.budgets.when_redis_down.rate_limits, super::FailMode::Open);
        assert_eq!(ok.budgets.when_redis_down.budgets, super::FailMode::Open);
    }
}
