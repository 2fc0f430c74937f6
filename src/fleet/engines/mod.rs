//! One small pure adapter per self-hosted engine, each turning that engine's `/metrics` page
//! into the same [`NodeSample`] the telemetry consumes: [`Engine`] names the engine, [`read`]
//! reads a page as a given engine's, [`detect`] tells the engine from a page's metric names.
//!
//! Pure: text in, sample out; no I/O, no clock. The Prometheus reading, name rewriting and
//! folds are `fleet::exposition`'s, shared by all; an adapter only says which families it keeps
//! and which of its series fills which field. What an engine does not report stays `None`
//! (unknown), never 0: no adapter derives a signal from another that means something else.
//! Choosing an adapter per node (config `engine:`, `auto`) is the caller's business.

pub mod info;
pub mod llamacpp;
pub mod sglang;
pub mod tgi;
pub mod trtllm;
pub mod vllm;

use crate::fleet::exposition::Sample;

use super::exposition::{metric_names, parse_exposition_where, parse_means_where};
use super::metrics::{NodeSample, ParseError};

pub use crate::canonical::Engine;

/// What each engine's adapter reads.
impl Engine {
    /// Is `name` a line this engine's adapter reads? (Others are not even parsed.)
    fn keeps(self, name: &str) -> bool {
        match self {
            Engine::Vllm => vllm::keeps(name),
            other => other.owns(name),
        }
    }

    fn read_samples(self, samples: &[Sample]) -> Result<NodeSample, ParseError> {
        match self {
            Engine::Vllm => vllm::vllm_from_samples(samples),
            Engine::Sglang => sglang::from_samples(samples),
            Engine::Llamacpp => llamacpp::from_samples(samples),
            Engine::Trtllm => trtllm::from_samples(samples),
            Engine::Tgi => tgi::from_samples(samples),
        }
    }
}

/// Read `page` as `engine`'s `/metrics`. Fails when the page cannot be read, or holds no series
/// of that engine ([`ParseError::NotEngine`]; vLLM keeps its [`ParseError::NotVllm`]).
pub fn read(engine: Engine, page: &str) -> Result<NodeSample, ParseError> {
    engine.read_samples(&parse_exposition_where(page, |n| engine.keeps(n))?)
}

/// [`read`] without histogram buckets (sums and counts only), for the scrape loop.
pub(crate) fn read_means(engine: Engine, page: &str) -> Result<NodeSample, ParseError> {
    engine.read_samples(&parse_means_where(page, |n| engine.keeps(n))?)
}

/// The engine whose metric names appear first in `page`; `None` for a page of no known engine.
pub fn detect(page: &str) -> Option<Engine> {
    metric_names(page).find_map(|n| Engine::ALL.into_iter().find(|e| e.owns(n)))
}

/// `Err(NotEngine)` unless some sample's name starts with one of `engine`'s prefixes.
fn require(engine: Engine, samples: &[Sample]) -> Result<(), ParseError> {
    if samples.iter().any(|s| engine.owns(&s.metric)) {
        Ok(())
    } else {
        Err(ParseError::NotEngine(engine))
    }
}

/// Distinct `model_name` labels, sorted.
fn model_names(samples: &[Sample]) -> Vec<String> {
    let names: std::collections::BTreeSet<String> =
        samples.iter().filter_map(|s| s.labels.get("model_name")).map(str::to_string).collect();
    names.into_iter().collect()
}

#[cfg(test)]
mod reader_tests;

/// `detect` and `read` across every engine's recorded page: each page is told apart by its
/// metric names alone, and each adapter refuses another engine's page.
#[cfg(test)]
mod tests {
    use super::*;
    pub(super) const PAGES: [(Engine, &str); 8] = [
        (Engine::Vllm, include_str!("../../../tests/fixtures/vllm/v0-engine.prom")),
        (Engine::Vllm, include_str!("../../../tests/fixtures/vllm/v1-engine-excerpt.prom")),
        (Engine::Sglang, include_str!("../../../tests/fixtures/engines/sglang.prom")),
        (Engine::Llamacpp, include_str!("../../../tests/fixtures/engines/llamacpp.prom")),
        (Engine::Llamacpp, include_str!("../../../tests/fixtures/engines/llamacpp-real.prom")),
        (Engine::Trtllm, include_str!("../../../tests/fixtures/engines/trtllm.prom")),
        (Engine::Trtllm, include_str!("../../../tests/fixtures/engines/triton_trtllm.prom")),
        (Engine::Tgi, include_str!("../../../tests/fixtures/engines/tgi.prom")),
    ];

    #[test]
    fn detect_picks_the_engine_of_every_fixture() {
        for (engine, page) in PAGES {
            assert_eq!(detect(page), Some(engine), "{engine}");
        }
        assert_eq!(detect(&PAGES[2].1.replace("sglang:", "sglang_")), Some(Engine::Sglang));
    }

    #[test]
    fn detect_knows_no_engine_in_other_pages() {
        assert_eq!(detect(""), None);
        assert_eq!(detect("<html>not found</html>"), None);
        let other = "# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\n\
                     process_cpu_seconds_total 12.5\nnv_inference_count{model=\"resnet\"} 3\n\
                     spillway_nvml_up 1\n# a comment naming vllm:num_requests_running\n";
        assert_eq!(detect(other), None);
    }

    #[test]
    fn each_adapter_reads_its_own_page_and_refuses_the_others() {
        for (engine, page) in PAGES {
            assert!(read(engine, page).is_ok(), "{engine}");
            assert!(read_means(engine, page).is_ok(), "{engine}");
            for other in Engine::ALL.into_iter().filter(|e| *e != engine) {
                let err = read(other, page).unwrap_err();
                match other {
                    Engine::Vllm => assert!(matches!(err, ParseError::NotVllm)),
                    _ => {
                        assert!(matches!(err, ParseError::NotEngine(e) if e == other), "{other} on {engine}")
                    }
                }
            }
        }
    }

    #[test]
    fn reading_vllm_through_the_engine_table_changes_nothing() {
        for page in [PAGES[0].1, PAGES[1].1] {
            assert_eq!(read(Engine::Vllm, page).unwrap(), vllm::parse_vllm(page).unwrap());
            assert_eq!(read_means(Engine::Vllm, page).unwrap(), vllm::parse_vllm_means(page).unwrap());
        }
    }

    #[test]
    fn names_round_trip() {
        for e in Engine::ALL {
            assert_eq!(Engine::from_name(e.name()), Some(e));
            assert_eq!(e.to_string(), e.name());
        }
        assert_eq!(Engine::from_name("auto"), None);
    }
}
