//! What an operator asks for when creating a key (CLI flags or the admin API's body), checked
//! before anything is stored: a name and team of printable text, tasks the config has (by name
//! or alias; stored by name), and a lifetime such as `90d`. Pure: the caller supplies the
//! config and the clock.

use std::time::Duration;

use crate::config::{Config, KeyLimits};

/// A checked request for a new key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKey {
    pub name: String,
    pub team: String,
    /// Task names (never aliases); empty: every task open to all keys.
    pub tasks: Vec<String>,
    /// How long the key lives; `None`: until revoked.
    pub expires_in: Option<Duration>,
    /// Limits and budgets of its own (`budgets.keys.<id>` in the config overrides each one set).
    pub limits: KeyLimits,
}

/// Why a key request is refused; the message names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{field} must be 1 to 64 printable characters, got `{value}`")]
    BadText { field: &'static str, value: String },
    #[error("task `{0}` does not exist")]
    UnknownTask(String),
    #[error("expires_in `{0}` is not a duration such as 90d, 12h, 30m or 45s")]
    BadDuration(String),
    /// A limit out of range: its path and why (`limits.rpm: must be at least 1`).
    #[error("{0}")]
    BadLimit(String),
}

impl NewKey {
    /// Check a request against the config's tasks.
    pub fn check(
        config: &Config,
        name: &str,
        team: &str,
        tasks: &[String],
        expires_in: Option<&str>,
        limits: KeyLimits,
    ) -> Result<NewKey, Refusal> {
        let name = text("name", name)?;
        let team = text("team", team)?;
        let mut names: Vec<String> = Vec::new();
        for task in tasks {
            let found = config.task(task.trim()).ok_or_else(|| Refusal::UnknownTask(task.clone()))?;
            if !names.contains(&found.name) {
                names.push(found.name.clone());
            }
        }
        let expires_in = expires_in.map(parse_duration).transpose()?;
        if let Some(problem) = limits.check("limits").into_iter().next() {
            return Err(Refusal::BadLimit(problem.to_string()));
        }
        Ok(NewKey { name, team, tasks: names, expires_in, limits })
    }
}

fn text(field: &'static str, value: &str) -> Result<String, Refusal> {
    let trimmed = value.trim();
    let ok = !trimmed.is_empty() && trimmed.chars().count() <= 64 && !trimmed.chars().any(char::is_control);
    ok.then(|| trimmed.to_string()).ok_or_else(|| Refusal::BadText { field, value: value.to_string() })
}

/// `90d`, `12h`, `30m`, `45s`: a whole positive number and one unit.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, Refusal> {
    let bad = || Refusal::BadDuration(text.to_string());
    let t = text.trim();
    let split = t.len().checked_sub(1).filter(|&i| i > 0 && t.is_char_boundary(i)).ok_or_else(bad)?;
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let secs = n.checked_mul(unit_secs).filter(|&s| s > 0).ok_or_else(bad)?;
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::parse(
            "backends: [{name: a, kind: openai, model: m}]\n\
             tasks: [{name: summarise, aliases: [sum], backends: [a], slo: {ttft_ms: 500}}]\n",
        )
        .unwrap()
    }

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(7_776_000)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_duration(" 45s "), Ok(Duration::from_secs(45)));
        for bad in ["", "d", "0d", "1w", "-1d", "1.5h", "10", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), Err(Refusal::BadDuration(bad.to_string())), "{bad}");
        }
    }

    #[test]
    fn tasks_must_exist_and_are_stored_by_name() {
        let c = config();
        let ok = NewKey::check(
            &c,
            "ci",
            " search ",
            &["sum".into(), "summarise".into()],
            Some("1h"),
            KeyLimits::default(),
        )
        .unwrap();
        assert_eq!(ok.tasks, ["summarise"]);
        assert_eq!(ok.team, "search");
        assert_eq!(ok.expires_in, Some(Duration::from_secs(3_600)));
        let refused =
            NewKey::check(&c, "ci", "search", &["translate".into()], None, KeyLimits::default()).unwrap_err();
        assert_eq!(refused.to_string(), "task `translate` does not exist");
        let limits = KeyLimits {
            rpm: Some(60),
            usd_per_day: Some(rust_decimal::Decimal::from(5)),
            ..KeyLimits::default()
        };
        assert_eq!(NewKey::check(&c, "ci", "search", &[], None, limits.clone()).unwrap().limits, limits);
        let zero = KeyLimits { concurrent: Some(0), ..KeyLimits::default() };
        let refused = NewKey::check(&c, "ci", "search", &[], None, zero).unwrap_err();
        assert_eq!(refused.to_string(), "limits.concurrent: must be at least 1");
    }

    #[test]
    fn names_and_teams_are_short_printable_text() {
        let c = config();
        let err = NewKey::check(&c, "", "search", &[], None, KeyLimits::default()).unwrap_err();
        assert_eq!(err.to_string(), "name must be 1 to 64 printable characters, got ``");
        let long = "x".repeat(65);
        assert!(matches!(
            NewKey::check(&c, "ci", &long, &[], None, KeyLimits::default()),
            Err(Refusal::BadText { field: "team", .. })
        ));
        assert!(NewKey::check(&c, "ci\n", "t", &[], None, KeyLimits::default()).is_ok(), "trimmed");
        assert!(NewKey::check(&c, "c\u{7}i", "t", &[], None, KeyLimits::default()).is_err());
    }
}
