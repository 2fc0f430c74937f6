//! What a report is asked for: the period, the grouping and the format, parsed the same way
//! from the command line and from `/admin/reports/cost` so that both give the same messages.

use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::Serialize;

use super::error::ReportError;

/// What a report line is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKey {
    Task,
    Backend,
    /// The client key's name (a static key's variable, an issued key's id).
    Key,
    /// The issued key's team (a static key has none).
    Team,
    /// The request's priority: `batch` is what batch jobs ran.
    Priority,
}

impl GroupKey {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupKey::Task => "task",
            GroupKey::Backend => "backend",
            GroupKey::Key => "key",
            GroupKey::Team => "team",
            GroupKey::Priority => "priority",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReportFormat {
    #[default]
    Table,
    Csv,
    Json,
    /// A self-contained page with charts.
    Html,
}

impl ReportFormat {
    pub fn parse(s: &str) -> Result<ReportFormat, ReportError> {
        match s {
            "table" => Ok(ReportFormat::Table),
            "csv" => Ok(ReportFormat::Csv),
            "json" => Ok(ReportFormat::Json),
            "html" => Ok(ReportFormat::Html),
            other => Err(ReportError::Format(other.to_string())),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            ReportFormat::Table => "text/plain; charset=utf-8",
            ReportFormat::Csv => "text/csv; charset=utf-8",
            ReportFormat::Json => "application/json",
            ReportFormat::Html => "text/html; charset=utf-8",
        }
    }
}

/// A parsed request for a report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportQuery {
    /// Start, inclusive, unix milliseconds (a whole minute).
    pub from_ms: i64,
    /// End, exclusive, unix milliseconds (a whole minute).
    pub to_ms: i64,
    /// At least one key, no repeats, in the asked order.
    pub group_by: Vec<GroupKey>,
    pub format: ReportFormat,
}

/// Parse `--group-by`: task, backend, key, team and priority, comma-separated, in any order, each once.
pub(crate) fn parse_group_by(s: &str) -> Result<Vec<GroupKey>, ReportError> {
    let mut keys = Vec::new();
    for part in s.split(',').map(str::trim) {
        let key = match part {
            "task" => GroupKey::Task,
            "backend" => GroupKey::Backend,
            "key" => GroupKey::Key,
            "team" => GroupKey::Team,
            "priority" => GroupKey::Priority,
            other => return Err(ReportError::GroupKey(other.to_string())),
        };
        if keys.contains(&key) {
            return Err(ReportError::GroupKeyTwice(part.to_string()));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// Parse a point in time: `now`, `today` (UTC midnight), a date (`2026-11-29`, UTC midnight),
/// an RFC 3339 timestamp (`2026-11-29T10:00:00Z`), or an age such as `-90m`, `-24h`, `-7d`.
pub(crate) fn parse_time(what: &'static str, s: &str, now: Timestamp) -> Result<Timestamp, ReportError> {
    let s = s.trim();
    let text = || s.to_string();
    let bad = |source: jiff::Error| ReportError::Time { what, text: text(), source };
    if s == "now" {
        return Ok(now);
    }
    if s == "today" {
        let date = now.to_zoned(jiff::tz::TimeZone::UTC).date();
        return date.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()).map_err(bad);
    }
    if let Some(age) = s.strip_prefix('-') {
        let split = age.find(|c: char| !c.is_ascii_digit()).unwrap_or(age.len());
        let (n, unit) = age.split_at(split);
        let n: i64 = n.parse().map_err(|source| ReportError::AgeNumber { what, text: text(), source })?;
        let secs = match unit {
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(ReportError::AgeUnit { what, text: text() }),
        };
        return now.checked_sub(SignedDuration::from_secs(n.saturating_mul(secs))).map_err(bad);
    }
    if let Ok(t) = s.parse::<Timestamp>() {
        return Ok(t);
    }
    if let Ok(date) = s.parse::<jiff::civil::Date>() {
        return date.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()).map_err(bad);
    }
    Err(ReportError::TimeForm { what, text: text() })
}

impl ReportQuery {
    /// Build a query from its text parts; `from` defaults to 24 hours before `to`, `to` to now.
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        group_by: Option<&str>,
        format: ReportFormat,
        now: Timestamp,
    ) -> Result<ReportQuery, ReportError> {
        let to = match to {
            Some(s) => parse_time("to", s, now)?,
            None => now,
        };
        let from = match from {
            Some(s) => parse_time("from", s, now)?,
            None => to.checked_sub(24.hours()).map_err(|source| ReportError::DefaultFrom { source })?,
        };
        if from >= to {
            return Err(ReportError::Period { from, to });
        }
        // Whole minutes: GPU time is recorded per node-minute.
        let minute = crate::ledger::usage::MINUTE_MS;
        Ok(ReportQuery {
            from_ms: crate::ledger::usage::minute_of(from.as_millisecond()),
            to_ms: crate::ledger::usage::minute_of(to.as_millisecond() + minute - 1),
            group_by: parse_group_by(group_by.unwrap_or("task"))?,
            format,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-29T18:30:00Z".parse().unwrap()
    }

    #[test]
    fn times() {
        let t = |s| parse_time("from", s, now()).map(|t| t.to_string());
        assert_eq!(t("now").unwrap(), "2026-11-29T18:30:00Z");
        assert_eq!(t("today").unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(t("2026-11-01").unwrap(), "2026-11-01T00:00:00Z");
        assert_eq!(t("2026-11-29T10:00:00+01:00").unwrap(), "2026-11-29T09:00:00Z");
        assert_eq!(t("-90m").unwrap(), "2026-11-29T17:00:00Z");
        assert_eq!(t("-7d").unwrap(), "2026-11-22T18:30:00Z");
        assert!(t("yesterday").unwrap_err().to_string().starts_with("from `yesterday`: expected"));
        assert!(t("-3w").unwrap_err().to_string().contains("unit is m, h or d"));
        assert!(matches!(t("-xh"), Err(ReportError::AgeNumber { what: "from", .. })));
    }

    #[test]
    fn queries() {
        let q = ReportQuery::parse(None, None, None, ReportFormat::Csv, now()).unwrap();
        assert_eq!(q.to_ms - q.from_ms, 86_400_000);
        assert_eq!(q.group_by, vec![GroupKey::Task]);
        let q = ReportQuery::parse(Some("today"), Some("now"), Some("task,key"), ReportFormat::Json, now());
        assert_eq!(q.unwrap().group_by, vec![GroupKey::Task, GroupKey::Key]);
        let err = |f, t, g| ReportQuery::parse(f, t, g, ReportFormat::Table, now()).unwrap_err().to_string();
        assert!(err(Some("now"), Some("-1h"), None).contains("must be before"));
        assert!(err(None, None, Some("task,node"))
            .contains("`node` is not one of task, backend, key, team, priority"));
        assert!(err(None, None, Some("task,key,key")).contains("names `key` twice"));
        assert!(err(None, None, Some("team,,key")).contains("`` is not one of"));
        let q = |g| ReportQuery::parse(None, None, Some(g), ReportFormat::Table, now()).unwrap().group_by;
        assert_eq!(q("key,team"), [GroupKey::Key, GroupKey::Team]);
        assert_eq!(q("team"), [GroupKey::Team]);
        assert_eq!(q("task,priority"), [GroupKey::Task, GroupKey::Priority]);
        assert_eq!(q(" backend , task "), [GroupKey::Backend, GroupKey::Task]);
        assert_eq!(q("team,task,key,backend").len(), 4);
        assert!(ReportFormat::parse("pdf").unwrap_err().to_string().contains("table, csv, json, html"));
    }
}
