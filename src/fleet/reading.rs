//! One node's reading as replicas share it: what a scrape read (the engine, the bucket-free
//! sample, the side page's limits), when, and by which replica, in a compact text form (JSON
//! without the unknown fields, behind the scrape time so a reader can skip a reading it has
//! seen without decoding it).
//!
//! Pure: values in, text out and back; no I/O. Time is Unix milliseconds as the scraping
//! replica's clock said (replicas are assumed NTP-synchronised; a reader clamps a reading from
//! its future to age 0).

use serde::{Deserialize, Serialize};

use super::engines::info::EngineInfo;
use super::metrics::NodeSample;
use super::rendezvous::ReplicaId;
use crate::canonical::Engine;

/// One shared reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub engine: Engine,
    pub sample: NodeSample,
    pub info: EngineInfo,
    /// When the scrape landed, Unix milliseconds.
    pub scraped_at_ms: u64,
    pub by: ReplicaId,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    e: Engine,
    s: NodeSample,
    #[serde(default, skip_serializing_if = "is_default")]
    i: EngineInfo,
    by: String,
}

fn is_default(i: &EngineInfo) -> bool {
    *i == EngineInfo::default()
}

/// Why a shared reading could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadingError {
    #[error("a shared reading must start with its scrape time and `|`")]
    NoTime,
    #[error("shared reading: {0}")]
    Body(#[from] serde_json::Error),
}

impl Reading {
    /// `<scraped_at_ms>|<json>`.
    pub fn encode(&self) -> String {
        let wire =
            Wire { e: self.engine, s: self.sample.clone(), i: self.info.clone(), by: self.by.to_string() };
        // The wire types hold only numbers, strings and lists: serialising cannot fail.
        let json = serde_json::to_string(&wire).unwrap_or_default();
        format!("{}|{json}", self.scraped_at_ms)
    }

    /// The scrape time of an encoded reading, without decoding the rest.
    pub(crate) fn time_of(text: &str) -> Option<u64> {
        text.split_once('|')?.0.parse().ok()
    }

    pub fn decode(text: &str) -> Result<Reading, ReadingError> {
        let (time, json) = text.split_once('|').ok_or(ReadingError::NoTime)?;
        let scraped_at_ms = time.parse().map_err(|_| ReadingError::NoTime)?;
        let w: Wire = serde_json::from_str(json)?;
        Ok(Reading { engine: w.e, sample: w.s, info: w.i, scraped_at_ms, by: ReplicaId::new(w.by) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engines::read_means;

    #[test]
    fn a_reading_round_trips_compactly() {
        let page = include_str!("../../tests/fixtures/vllm/v1-engine-excerpt.prom");
        let sample = read_means(Engine::Vllm, page).unwrap();
        let r = Reading {
            engine: Engine::Vllm,
            sample,
            info: EngineInfo { max_running: Some(8.0), ..EngineInfo::default() },
            scraped_at_ms: 1_767_000_000_123,
            by: ReplicaId::new("router-a-1f2e"),
        };
        let text = r.encode();
        assert!(text.starts_with("1767000000123|{\"e\":\"vllm\""), "{text}");
        assert!(!text.contains("null"), "unknown fields are left out: {text}");
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert_eq!(Reading::time_of(&text), Some(1_767_000_000_123));
        assert_eq!(Reading::decode(&text).unwrap(), r);
    }

    #[test]
    fn a_damaged_reading_is_an_error_not_a_panic() {
        assert!(matches!(Reading::decode("no time"), Err(ReadingError::NoTime)));
        assert!(matches!(Reading::decode("12|{\"e\":\"vllm\"}"), Err(ReadingError::Body(_))));
        assert!(matches!(Reading::decode("x|{}"), Err(ReadingError::NoTime)));
        assert_eq!(Reading::time_of("garbage"), None);
    }
}
