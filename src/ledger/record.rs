//! The ledger row and how it is built from what dispatch reports.
//!
//! Every field is portable across SQLite and PostgreSQL: time is unix milliseconds (UTC),
//! counts are `i64`, and money is a [`Decimal`] (stored as text), never `f64`. The affinity
//! key is stored only as a SHA-256 hex digest so that the ledger never holds a raw project key.
//! Building a record does no I/O and never blocks.

use std::time::{SystemTime, UNIX_EPOCH};

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::outcome::{Ending, RequestOutcome};

/// How a request ended, as stored in the `outcome` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    Cancelled,
    Shed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Shed => "shed",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "completed" => Outcome::Completed,
            "failed" => Outcome::Failed,
            "cancelled" => Outcome::Cancelled,
            "shed" => Outcome::Shed,
            _ => return None,
        })
    }
}

/// One row per finished request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRecord {
    /// Unique per request (32 hex digits); makes a retried insert a no-op.
    pub id: String,
    /// When the request arrived, unix milliseconds UTC.
    pub at_ms: i64,
    pub task: String,
    /// The *name* of the client key (a static key's env var, an issued key's id), never the
    /// key itself.
    pub client_key: Option<String>,
    /// The issued key's owner team; `None` for a static key (static keys have no team), for
    /// no key, and for rows written before the column existed.
    pub team: Option<String>,
    /// The request's priority (`interactive`, `standard`, `batch`: a batch job's line); `None`
    /// for rows written before the column existed.
    #[serde(default)]
    pub priority: Option<crate::config::Priority>,
    /// The affinity key's hash ([`crate::canonical::Affinity::hex`]: 16 hex digits, as in the
    /// debug log), never the key.
    pub affinity_hash: Option<String>,
    /// Empty when no backend served.
    pub backend: String,
    /// Empty when no backend served.
    pub model: String,
    /// The node key (`backend/model@url`); empty when no backend served.
    pub node: String,
    pub attempts: i64,
    pub outcome: Outcome,
    /// [`crate::canonical::ErrorClass::as_str`] when the request failed.
    pub error_class: Option<String>,
    pub input_tokens: i64,
    /// Read from the provider's prompt cache: a subset of `input_tokens`.
    pub cached_input_tokens: i64,
    /// Written to the provider's prompt cache: a subset of `input_tokens`, apart from
    /// `cached_input_tokens`.
    pub cache_write_tokens: i64,
    pub output_tokens: i64,
    pub ttft_ms: Option<i64>,
    pub duration_ms: i64,
    /// `None` when unpriced.
    pub cost_usd: Option<Decimal>,
}

/// What the writer stores: a request, or a node's minute of GPU time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "row", rename_all = "snake_case")]
pub enum LedgerRow {
    Request(LedgerRecord),
    NodeMinute(super::usage::NodeMinute),
}

impl From<LedgerRecord> for LedgerRow {
    fn from(r: LedgerRecord) -> Self {
        LedgerRow::Request(r)
    }
}

impl From<super::usage::NodeMinute> for LedgerRow {
    fn from(m: super::usage::NodeMinute) -> Self {
        LedgerRow::NodeMinute(m)
    }
}

impl LedgerRecord {
    /// The ledger row for a finished request, priced elsewhere (`None`: unpriced); `None`
    /// while it is still in flight.
    pub(crate) fn from_outcome(o: &RequestOutcome, cost_usd: Option<Decimal>) -> Option<LedgerRecord> {
        let (outcome, error_class) = match o.ending {
            Ending::InFlight => return None,
            Ending::Completed => (Outcome::Completed, None),
            Ending::Failed(class) => (Outcome::Failed, Some(class.as_str().to_string())),
            Ending::Cancelled => (Outcome::Cancelled, None),
            Ending::Shed => (Outcome::Shed, None),
        };
        Some(LedgerRecord {
            id: new_record_id(),
            at_ms: unix_millis(o.meta.arrived_at),
            task: o.task.clone(),
            client_key: o.meta.client_key.clone(),
            team: o.meta.principal.as_ref().and_then(|p| p.team()).map(str::to_string),
            priority: Some(o.meta.priority),
            affinity_hash: o.meta.affinity.map(|a| a.hex()),
            backend: o.backend.clone(),
            model: o.model.clone(),
            node: o.node.to_string(),
            attempts: i64::from(o.attempts),
            outcome,
            error_class,
            input_tokens: i64::from(o.usage.input_tokens),
            cached_input_tokens: i64::from(o.usage.cached_input_tokens),
            cache_write_tokens: i64::from(o.usage.cache_write_tokens),
            output_tokens: i64::from(o.usage.output_tokens),
            ttft_ms: o.ttft.map(|t| millis_i64(t.as_millis())),
            duration_ms: millis_i64(o.duration.as_millis()),
            cost_usd,
        })
    }
}

fn millis_i64(ms: u128) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch (negative before it).
pub fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => millis_i64(d.as_millis()),
        Err(e) => -millis_i64(e.duration().as_millis()),
    }
}

/// Unix milliseconds as an RFC 3339 timestamp (UTC), or the number when out of range.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}

/// A fresh record id: 32 lowercase hex digits, the first 12 the unix milliseconds now and the
/// rest random. Ids made later sort later, so the store's id index grows at its end instead of
/// touching a random page for every row (as UUIDv7 does).
pub fn new_record_id() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    format!("{:012x}{:020x}", ms & 0xffff_ffff_ffff, rand::random::<u128>() >> 48)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::canonical::{Affinity, AffinitySource, ErrorClass};
    use crate::outcome::RequestMeta;

    fn meta() -> RequestMeta {
        RequestMeta {
            arrived_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            client_key: Some("TEAM_A_KEY".into()),
            affinity: Some(Affinity { source: AffinitySource::Project, hash: 0x42 }),
            ..RequestMeta::default()
        }
    }

    #[test]
    fn completed_outcome_becomes_a_row() {
        let start = tokio::time::Instant::now();
        let mut o = RequestOutcome::started(
            "summarise",
            "fleet",
            &"node-1".into(),
            2,
            Duration::from_millis(87),
            start,
        )
        .with_meta(&meta());
        o.model = "llama-3.1-8b".into();
        o.usage.input_tokens = 1200;
        o.usage.cached_input_tokens = 1000;
        o.usage.cache_write_tokens = 150;
        o.usage.output_tokens = 40;
        o.finish(None, start + Duration::from_millis(950));
        let r = LedgerRecord::from_outcome(&o, Some("0.0012".parse().unwrap())).unwrap();
        assert_eq!((r.at_ms, r.model.as_str()), (1_700_000_000_123, "llama-3.1-8b"));
        assert_eq!((r.client_key.as_deref(), r.team.as_deref()), (Some("TEAM_A_KEY"), None));
        assert_eq!((r.outcome, r.error_class.as_deref()), (Outcome::Completed, None));
        assert_eq!((r.attempts, r.ttft_ms, r.duration_ms), (2, Some(87), 950));
        assert_eq!((r.input_tokens, r.cached_input_tokens, r.output_tokens), (1200, 1000, 40));
        assert_eq!(r.cache_write_tokens, 150);
        assert_eq!(r.affinity_hash.as_deref(), Some("0000000000000042"));
        assert_eq!(r.priority, Some(meta().priority));
        assert_eq!(r.id.len(), 32);
    }

    #[test]
    fn an_issued_keys_row_names_its_id_and_team() {
        use crate::canonical::{IssuedKey, KeyId, Principal};
        let key = IssuedKey {
            id: KeyId::parse("00000000c0de").unwrap(),
            name: "ci".into(),
            team: "search".into(),
            tasks: vec![],
        };
        let meta = RequestMeta {
            client_key: Some("00000000c0de".into()),
            principal: Some(Principal::Issued(std::sync::Arc::new(key))),
            ..meta()
        };
        let start = tokio::time::Instant::now();
        let o =
            RequestOutcome::failed("summarise", "openai", 1, ErrorClass::Overloaded, start).with_meta(&meta);
        let r = LedgerRecord::from_outcome(&o, None).unwrap();
        assert_eq!((r.client_key.as_deref(), r.team.as_deref()), (Some("00000000c0de"), Some("search")));
    }

    #[test]
    fn failed_and_in_flight_outcomes() {
        let start = tokio::time::Instant::now();
        let o = RequestOutcome::failed("summarise", "openai", 3, ErrorClass::Overloaded, start);
        let r = LedgerRecord::from_outcome(&o, None).unwrap();
        assert_eq!((r.outcome, r.error_class.as_deref()), (Outcome::Failed, Some("overloaded")));
        assert_eq!((r.ttft_ms, r.cost_usd), (None, None));
        let in_flight = RequestOutcome::started("t", "b", &"n".into(), 1, Duration::ZERO, start);
        assert!(LedgerRecord::from_outcome(&in_flight, None).is_none());
    }

    #[test]
    fn record_ids_are_32_hex_digits_and_sort_by_when_they_were_made() {
        let first = new_record_id();
        std::thread::sleep(Duration::from_millis(2));
        let ids: Vec<String> = (0..100).map(|_| new_record_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{id}");
            assert!(*id > first, "{id} was made after {first}");
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}
