//! The hand-written reader (`fleet::scan`) against the one it replaced (`prometheus-parse`
//! behind the `:` name rewriting), on every recorded page and every simulated engine's page:
//! the same samples, and every adapter's sample the same, with and without histogram buckets.

use super::*;
use crate::fleet::exposition::{HistogramCount, Labels, SummaryCount, Value};
use crate::sim::pages::{self, Finished, Load, NodeFacts, Token};

/// The old reader, as `fleet::exposition` ran it: names with `:` rewritten for the crate and
/// restored after; its samples in the new types.
fn old_parse<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Sample> {
    const COLON: &str = "__COLON__";
    let rewrite = |line: &str| -> String {
        let t = line.trim_start();
        let (head, rest) = if let Some(r) = t.strip_prefix("# HELP ").or_else(|| t.strip_prefix("# TYPE ")) {
            (&t[..t.len() - r.len()], r)
        } else if t.starts_with('#') {
            return line.to_string();
        } else {
            ("", t)
        };
        let end = rest.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(rest.len());
        format!("{head}{}{}", rest[..end].replace(':', COLON), &rest[end..])
    };
    let scrape = prometheus_parse::Scrape::parse(lines.map(|l| Ok(rewrite(l)))).unwrap();
    scrape
        .samples
        .into_iter()
        .map(|s| Sample {
            metric: s.metric.replace(COLON, ":"),
            labels: Labels::from_pairs(s.labels.iter().map(|(k, v)| (k.clone(), v.clone()))),
            value: match s.value {
                prometheus_parse::Value::Counter(x) => Value::Counter(x),
                prometheus_parse::Value::Gauge(x) => Value::Gauge(x),
                prometheus_parse::Value::Untyped(x) => Value::Untyped(x),
                prometheus_parse::Value::Histogram(h) => Value::Histogram(
                    h.into_iter()
                        .map(|b| HistogramCount { less_than: b.less_than, count: b.count })
                        .collect(),
                ),
                prometheus_parse::Value::Summary(q) => Value::Summary(
                    q.into_iter().map(|b| SummaryCount { quantile: b.quantile, count: b.count }).collect(),
                ),
            },
        })
        .collect()
}

/// Samples in an order that does not depend on either reader (the old one's histograms came
/// out in hash order), labels sorted; `Debug` text so NaN equals NaN.
fn canonical(samples: &[Sample]) -> Vec<String> {
    let mut v: Vec<String> = samples
        .iter()
        .map(|s| {
            let mut labels: Vec<_> = s.labels.iter().collect();
            labels.sort();
            format!("{} {labels:?} {:?}", s.metric, s.value)
        })
        .collect();
    v.sort();
    v
}

/// Every recorded page, and `../shared/fixtures` where it is checked out beside the repository.
fn recorded() -> Vec<(Engine, String, String)> {
    let mut pages: Vec<(Engine, String, String)> =
        tests::PAGES.iter().map(|(e, p)| (*e, format!("{e} fixture"), p.to_string())).collect();
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    for dir in std::fs::read_dir(&shared).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(dir.path()).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(file.path()).unwrap_or_default();
            if let Some(engine) = detect(&text) {
                pages.push((engine, file.path().display().to_string(), text));
            }
        }
    }
    pages
}

/// Each simulated engine's page after some traffic (every histogram has observations).
fn simulated() -> Vec<(Engine, String, String)> {
    let facts = NodeFacts {
        model: "m".into(),
        max_num_seqs: 8,
        num_gpu_blocks: 100,
        block_size: 16,
        prefix_caching: true,
        legacy_names: false,
    };
    Engine::ALL
        .into_iter()
        .map(|engine| {
            let page = pages::page(engine, &facts);
            page.arrived(100, 10);
            page.load(&Load { running: 2, waiting: 1, used_blocks: 20, kv_usage: 0.2 });
            page.token(&Token::First {
                ttft: 0.12,
                prefill_secs: 0.05,
                prompt_tokens: 100,
                cached_tokens: 20,
            });
            page.token(&Token::Next { gap: 0.02 });
            page.finished(&Finished {
                reason: crate::sim::engine::FinishReason::Stop,
                prompt_tokens: 100,
                cached_tokens: 20,
                generated: 10,
                e2e: 0.4,
                queue_secs: 0.01,
                ttft: 0.12,
                decode_secs: 0.28,
            });
            (engine, format!("simulated {engine}"), page.encode())
        })
        .collect()
}

#[test]
fn the_new_reader_reads_every_page_as_the_old_one_did() {
    let pages: Vec<_> = recorded().into_iter().chain(simulated()).collect();
    assert!(pages.len() >= 13, "{} pages", pages.len());
    for (engine, what, page) in &pages {
        let (old, new) = (old_parse(page.lines()), crate::fleet::exposition::parse_exposition(page).unwrap());
        assert!(new.len() > 5, "{what}: {} samples", new.len());
        assert_eq!(canonical(&new), canonical(&old), "{what}: samples");
        let kept = |l: &&str| {
            let name = l.trim_start().trim_start_matches("# TYPE ");
            engine.keeps(&name[..name.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(name.len())])
        };
        let old_read = engine.read_samples(&old_parse(page.lines().filter(kept)));
        assert_eq!(read(*engine, page).unwrap(), old_read.unwrap(), "{what}: read");
        let means: Vec<&str> = page.lines().filter(|l| !l.contains("_bucket")).collect();
        let old_means = engine.read_samples(&old_parse(means.iter().copied().filter(kept)));
        let new_means = read_means(*engine, page).unwrap();
        let old_means = old_means.unwrap();
        assert_eq!(
            format!("{new_means:?}").replace("buckets: [], ", ""),
            format!("{old_means:?}").replace("buckets: [], ", ""),
            "{what}: read_means"
        );
    }
}
