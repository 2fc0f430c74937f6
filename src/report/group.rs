//! What a report line is grouped by: every ledger row falls in one fine group (task, backend,
//! client key, team), and a line at any asked grouping (`--group-by key,team`, `task,backend`,
//! ...) is the sum of the fine groups that agree on the asked keys. Keeping the fine group
//! typed, not a joined string, is what lets every grouping add up to the same totals. Pure.

use super::query::GroupKey;
use crate::ledger::LedgerRecord;

/// The backend of requests that no backend served.
pub const NO_BACKEND: &str = "(none)";
/// The key or team of a row that has none: no client key (auth off, a synthetic call), or a
/// static key, which has no team.
pub(crate) const NONE: &str = "-";

/// The finest grouping a report keeps: every line, share and series is a sum of these.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Fine {
    pub task: String,
    /// [`NO_BACKEND`] when no backend served.
    pub backend: String,
    /// The client key's name (a static key's variable, an issued key's id), or [`NONE`].
    pub key: String,
    /// The issued key's team, or [`NONE`].
    pub team: String,
    /// The request's priority, or [`NONE`] (rows from before it was kept).
    pub priority: String,
}

impl Fine {
    /// The fine group of a ledger row.
    pub fn of(r: &LedgerRecord) -> Fine {
        let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| NONE.to_string());
        Fine {
            task: r.task.clone(),
            backend: if r.backend.is_empty() { NO_BACKEND.to_string() } else { r.backend.clone() },
            key: or_none(&r.client_key),
            team: or_none(&r.team),
            priority: r.priority.map_or_else(|| NONE.to_string(), |p| p.as_str().to_string()),
        }
    }

    /// The value of one grouping key.
    pub fn get(&self, key: GroupKey) -> &str {
        match key {
            GroupKey::Task => &self.task,
            GroupKey::Backend => &self.backend,
            GroupKey::Key => &self.key,
            GroupKey::Team => &self.team,
            GroupKey::Priority => &self.priority,
        }
    }

    /// The line this fine group adds to at the grouping `keys`: its value for each, in order.
    pub fn pick(&self, keys: &[GroupKey]) -> Vec<String> {
        keys.iter().map(|k| self.get(*k).to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, key: Option<&str>, team: Option<&str>) -> LedgerRecord {
        LedgerRecord {
            id: "0".repeat(32),
            at_ms: 0,
            task: "chat".into(),
            client_key: key.map(str::to_string),
            team: team.map(str::to_string),
            priority: None,
            affinity_hash: None,
            backend: backend.into(),
            model: String::new(),
            node: String::new(),
            attempts: 1,
            outcome: crate::ledger::Outcome::Completed,
            error_class: None,
            input_tokens: 0,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 0,
            ttft_ms: None,
            duration_ms: 0,
            cost_usd: None,
        }
    }

    #[test]
    fn a_row_without_key_team_or_backend_reads_as_dashes() {
        let fine = Fine::of(&row("", None, None));
        assert_eq!(fine.pick(&[GroupKey::Backend, GroupKey::Key, GroupKey::Team]), ["(none)", "-", "-"]);
        let fine = Fine::of(&row("openai", Some("TEAM_A_KEY"), None));
        assert_eq!(
            fine.pick(&[GroupKey::Team, GroupKey::Key]),
            ["-", "TEAM_A_KEY"],
            "a static key has no team"
        );
    }

    #[test]
    fn picks_the_asked_keys_in_the_asked_order() {
        let fine = Fine::of(&row("pool", Some("00000000000a"), Some("search")));
        assert_eq!(fine.pick(&[GroupKey::Key, GroupKey::Team]), ["00000000000a", "search"]);
        assert_eq!(
            fine.pick(&[GroupKey::Team, GroupKey::Task, GroupKey::Backend]),
            ["search", "chat", "pool"]
        );
        assert!(fine.pick(&[]).is_empty());
    }

    #[test]
    fn a_batch_line_groups_under_its_priority() {
        let batch =
            LedgerRecord { priority: Some(crate::config::Priority::Batch), ..row("pool", None, None) };
        assert_eq!(Fine::of(&batch).pick(&[GroupKey::Task, GroupKey::Priority]), ["chat", "batch"]);
        assert_eq!(
            Fine::of(&row("pool", None, None)).get(GroupKey::Priority),
            "-",
            "rows from before it was kept"
        );
    }
}
