//! Reading a vLLM node's `/metrics` page, and the NVML agent's beside it, into typed samples.
//!
//! Pure: text in, sample out; no I/O and no clock. The telemetry loop calls it in the
//! background, never on the request path. Prometheus text is parsed by the `prometheus-parse`
//! crate, not by hand. That crate (0.2.5) silently drops every sample whose metric name
//! contains `:`, which is every vLLM series, so names are first rewritten (on metric-name
//! positions only: `# HELP`, `# TYPE` and sample lines; label values may hold `:`) and
//! restored after parsing. Both generations of vLLM's names are read. A series that is absent
//! is `None` (unknown), never 0: a node that stopped exporting a gauge must not look idle.
//! A page that cannot be read is a [`ParseError`].

use std::cell::Cell;
use std::collections::BTreeSet;
use std::io;

use prometheus_parse::{Sample, Scrape, Value};

pub use super::parse_error::ParseError;

/// What stands in for `:` in metric names while `prometheus-parse` reads them. `\w`-only, so
/// the crate accepts it, and unlikely in a real name.
const COLON: &str = "__COLON__";

/// One histogram, summed over engines (and any other label).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramSample {
    /// `(le, cumulative count)`, ascending `le`; `+Inf` included where the page has it.
    pub buckets: Vec<(f64, f64)>,
    /// `_sum`, if the page has it.
    pub sum: Option<f64>,
    /// `_count`, else the `+Inf` bucket; `None` if neither is there.
    pub count: Option<f64>,
}

impl HistogramSample {
    /// Mean observation, when both `sum` and a non-zero `count` are known.
    pub fn mean(&self) -> Option<f64> {
        match (self.sum, self.count) {
            (Some(s), Some(c)) if c > 0.0 => Some(s / c),
            _ => None,
        }
    }
}

/// The labels of `vllm:cache_config_info` that size the KV cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheConfig {
    pub num_gpu_blocks: Option<u64>,
    pub block_size: Option<u64>,
    pub cache_dtype: Option<String>,
}

/// One scrape of a vLLM node. Gauges and counters are summed over the `engine` label (one
/// series per data-parallel engine) and over any other label; KV-cache use is averaged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VllmSample {
    /// Distinct `model_name` labels seen, sorted.
    pub model_names: Vec<String>,
    /// Distinct `engine` labels seen (0 on engines that do not label them).
    pub engines: usize,
    /// The page used the pre-V1 names (`gpu_cache_usage_perc`, `time_per_output_token_seconds`).
    pub legacy_names: bool,
    /// `vllm:num_requests_running`.
    pub running: Option<f64>,
    /// `vllm:num_requests_waiting`.
    pub waiting: Option<f64>,
    /// `vllm:kv_cache_usage_perc`, else `vllm:gpu_cache_usage_perc` (0–1, mean over engines).
    pub kv_cache_usage: Option<f64>,
    /// `vllm:cache_config_info`.
    pub cache: Option<CacheConfig>,
    /// `vllm:time_to_first_token_seconds`.
    pub ttft: Option<HistogramSample>,
    /// `vllm:inter_token_latency_seconds`, else `vllm:time_per_output_token_seconds`.
    pub itl: Option<HistogramSample>,
    /// `vllm:e2e_request_latency_seconds`.
    pub e2e: Option<HistogramSample>,
    /// `vllm:request_queue_time_seconds`.
    pub queue_time: Option<HistogramSample>,
    /// `vllm:request_prefill_time_seconds`.
    pub prefill_time: Option<HistogramSample>,
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens: Option<f64>,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: Option<f64>,
    /// `vllm:prefix_cache_queries_total` (tokens).
    pub prefix_cache_queries: Option<f64>,
    /// `vllm:prefix_cache_hits_total` (tokens).
    pub prefix_cache_hits: Option<f64>,
    /// `vllm:request_success_total`, summed over `finished_reason`.
    pub request_success: Option<f64>,
    /// `vllm:num_preemptions_total`.
    pub preemptions: Option<f64>,
}

/// One GPU as the NVML agent reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuStats {
    /// The `gpu` label.
    pub index: u32,
    /// The `uuid` label (empty if the agent left it out).
    pub uuid: String,
    /// 0–1.
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    pub power_watts: Option<f64>,
    pub temperature_celsius: Option<f64>,
}

/// One scrape of the NVML agent (`spillway agent`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSample {
    /// `spillway_nvml_up == 1`.
    pub up: bool,
    /// `spillway_nvml_info{reason}`, present when NVML is down.
    pub reason: Option<String>,
    /// By ascending index.
    pub gpus: Vec<GpuStats>,
}

/// What kind of line this is, for the rewriting and filtering done before parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Help,
    Type,
    Sample,
    Other,
}

/// Split a line into (text before the metric name, the name, the rest) and its kind.
fn split_line(line: &str) -> (LineKind, &str, &str, &str) {
    let trimmed = line.trim_start();
    let (kind, head, rest) = if let Some(r) = trimmed.strip_prefix('#') {
        let r2 = r.trim_start();
        let (kind, kw) = if r2.starts_with("HELP") {
            (LineKind::Help, "HELP")
        } else if r2.starts_with("TYPE") {
            (LineKind::Type, "TYPE")
        } else {
            return (LineKind::Other, "", "", line);
        };
        let after_kw = &r2[kw.len()..];
        let name_start = after_kw.len() - after_kw.trim_start().len();
        let prefix_len = trimmed.len() - after_kw.len() + name_start;
        (kind, &trimmed[..prefix_len], &trimmed[prefix_len..])
    } else if trimmed.is_empty() {
        return (LineKind::Other, "", "", line);
    } else {
        (LineKind::Sample, "", trimmed)
    };
    let name_end = rest.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(rest.len());
    (kind, head, &rest[..name_end], &rest[name_end..])
}

/// Rewrite `:` in the metric name of a `# HELP`, `# TYPE` or sample line; other lines as is.
pub fn normalise_line(line: &str) -> String {
    let (kind, head, name, rest) = split_line(line);
    if kind == LineKind::Other || !name.contains(':') {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len() + 16);
    out.push_str(head);
    for (i, part) in name.split(':').enumerate() {
        if i > 0 {
            out.push_str(COLON);
        }
        out.push_str(part);
    }
    out.push_str(rest);
    out
}

/// The original metric name of a normalised one.
fn restore(name: &str) -> String {
    name.replace(COLON, ":")
}

/// Parse a Prometheus text exposition with `prometheus-parse`, keeping names that contain
/// `:`. Histogram samples carry their family name (no `_bucket`); `_sum` and `_count` come as
/// separate untyped samples.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, ParseError> {
    parse_exposition_where(text, |_| true)
}

/// [`parse_exposition`] of the `# TYPE` and sample lines whose metric name passes `keep`
/// (`# HELP` text is never used, so it is skipped). Parsing costs about 2 µs a line, so
/// leaving out families nobody reads is the cheapest speed-up there is.
pub fn parse_exposition_where(text: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<Sample>, ParseError> {
    read_lines(text, |line| match split_line(line) {
        (LineKind::Help | LineKind::Other, ..) => false,
        (_, _, name, _) => keep(name),
    })
}

/// Parse the lines of `text` that `keep` passes, names with `:` restored; an error names the
/// page's line read last.
fn read_lines(text: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<Sample>, ParseError> {
    let last = Cell::new(0);
    let lines = text.lines().enumerate().filter(|(_, l)| keep(l)).map(|(i, l)| {
        last.set(i + 1);
        Ok::<_, io::Error>(normalise_line(l))
    });
    let scrape = Scrape::parse(lines).map_err(|source| ParseError::Read { line: last.get(), source })?;
    Ok(scrape
        .samples
        .into_iter()
        .map(|mut s| {
            if s.metric.contains(COLON) {
                s.metric = restore(&s.metric);
            }
            s
        })
        .collect())
}

/// Families [`parse_vllm`] reads, without `_total`; a line is parsed when its metric name
/// starts with one of them (so `_bucket`, `_sum`, `_count`, `_total` all pass).
pub const VLLM_FAMILIES: &[&str] = &[
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:request_success",
    "vllm:num_preemptions",
];

fn is_read_by_parse_vllm(name: &str) -> bool {
    name.starts_with("vllm:") && VLLM_FAMILIES.iter().any(|f| name.starts_with(f))
}

fn scalar(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        _ => None,
    }
}

/// Sum of every series named `name`, `None` if there is none.
fn sum_of(samples: &[Sample], name: &str) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.metric == name)
        .filter_map(|s| scalar(&s.value))
        .fold(None, |acc, x| Some(acc.unwrap_or(0.0) + x))
}

/// Mean of every series named `name`, `None` if there is none.
fn mean_of(samples: &[Sample], name: &str) -> Option<f64> {
    let xs: Vec<f64> = samples.iter().filter(|s| s.metric == name).filter_map(|s| scalar(&s.value)).collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Histogram `name` (family name), buckets matched by `le` and summed over series.
fn histogram(samples: &[Sample], name: &str) -> Option<HistogramSample> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let mut found = false;
    for s in samples.iter().filter(|s| s.metric == name) {
        if let Value::Histogram(hs) = &s.value {
            found = true;
            for h in hs {
                match buckets.iter_mut().find(|(le, _)| *le == h.less_than) {
                    Some((_, c)) => *c += h.count,
                    None => buckets.push((h.less_than, h.count)),
                }
            }
        }
    }
    let sum = sum_of(samples, &format!("{name}_sum"));
    let count = sum_of(samples, &format!("{name}_count"));
    if !found && sum.is_none() && count.is_none() {
        return None;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let inf = buckets.last().filter(|(le, _)| le.is_infinite()).map(|(_, c)| *c);
    Some(HistogramSample { buckets, sum, count: count.or(inf) })
}

/// Read a vLLM `/metrics` page. Fails only when the text holds no `vllm:` series at all (not
/// a vLLM page); anything missing from a vLLM page is `None`.
pub fn parse_vllm(text: &str) -> Result<VllmSample, ParseError> {
    vllm_from_samples(&parse_exposition_where(text, is_read_by_parse_vllm)?)
}

/// [`parse_vllm`] without histogram buckets, for the scrape loop: routing reads only each
/// histogram's sum and count (recent means), and buckets are most of a vLLM page, so skipping
/// them cuts the parse cost several times over. The `# TYPE` line of a histogram is dropped
/// with them, so its `_sum` and `_count` are read as plain samples.
pub fn parse_vllm_means(text: &str) -> Result<VllmSample, ParseError> {
    let histograms: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# TYPE ") && l.ends_with(" histogram"))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let samples = read_lines(text, |line| match split_line(line) {
        (LineKind::Help | LineKind::Other, ..) => false,
        (LineKind::Type, _, name, _) => is_read_by_parse_vllm(name) && !histograms.contains(&name),
        (_, _, name, _) => is_read_by_parse_vllm(name) && !name.ends_with("_bucket"),
    })?;
    vllm_from_samples(&samples)
}

/// [`parse_vllm`] over already parsed samples (any superset of [`VLLM_FAMILIES`]).
pub fn vllm_from_samples(samples: &[Sample]) -> Result<VllmSample, ParseError> {
    if !samples.iter().any(|s| s.metric.starts_with("vllm:")) {
        return Err(ParseError::NotVllm);
    }
    let mut models = BTreeSet::new();
    let mut engines = BTreeSet::new();
    for s in samples.iter().filter(|s| s.metric.starts_with("vllm:")) {
        if let Some(m) = s.labels.get("model_name") {
            models.insert(m.to_string());
        }
        if let Some(e) = s.labels.get("engine") {
            engines.insert(e.to_string());
        }
    }
    let new_kv = mean_of(samples, "vllm:kv_cache_usage_perc");
    let new_itl = histogram(samples, "vllm:inter_token_latency_seconds");
    let old_kv = mean_of(samples, "vllm:gpu_cache_usage_perc");
    let old_itl = histogram(samples, "vllm:time_per_output_token_seconds");
    let legacy_names = (new_kv.is_none() && old_kv.is_some()) || (new_itl.is_none() && old_itl.is_some());
    let cache = samples.iter().find(|s| s.metric == "vllm:cache_config_info").map(|s| CacheConfig {
        num_gpu_blocks: s.labels.get("num_gpu_blocks").and_then(|v| v.parse().ok()),
        block_size: s.labels.get("block_size").and_then(|v| v.parse().ok()),
        cache_dtype: s.labels.get("cache_dtype").map(str::to_string),
    });
    Ok(VllmSample {
        model_names: models.into_iter().collect(),
        engines: engines.len(),
        legacy_names,
        running: sum_of(samples, "vllm:num_requests_running"),
        waiting: sum_of(samples, "vllm:num_requests_waiting"),
        kv_cache_usage: new_kv.or(old_kv),
        cache,
        ttft: histogram(samples, "vllm:time_to_first_token_seconds"),
        itl: new_itl.or(old_itl),
        e2e: histogram(samples, "vllm:e2e_request_latency_seconds"),
        queue_time: histogram(samples, "vllm:request_queue_time_seconds"),
        prefill_time: histogram(samples, "vllm:request_prefill_time_seconds"),
        prompt_tokens: sum_of(samples, "vllm:prompt_tokens_total"),
        generation_tokens: sum_of(samples, "vllm:generation_tokens_total"),
        prefix_cache_queries: sum_of(samples, "vllm:prefix_cache_queries_total"),
        prefix_cache_hits: sum_of(samples, "vllm:prefix_cache_hits_total"),
        request_success: sum_of(samples, "vllm:request_success_total"),
        preemptions: sum_of(samples, "vllm:num_preemptions_total"),
    })
}

/// Read the NVML agent's `/metrics` page. Fails when `spillway_nvml_up` is missing (not an
/// agent page).
pub fn parse_agent(text: &str) -> Result<AgentSample, ParseError> {
    let samples = parse_exposition(text)?;
    let up = sum_of(&samples, "spillway_nvml_up").ok_or(ParseError::NotAgent)?;
    let reason = samples
        .iter()
        .find(|s| s.metric == "spillway_nvml_info")
        .and_then(|s| s.labels.get("reason"))
        .map(str::to_string);
    let mut gpus: Vec<GpuStats> = Vec::new();
    for s in samples.iter().filter(|s| s.metric.starts_with("spillway_gpu_")) {
        let (Some(index), Some(v)) =
            (s.labels.get("gpu").and_then(|g| g.parse::<u32>().ok()), scalar(&s.value))
        else {
            continue;
        };
        let pos = match gpus.iter().position(|g| g.index == index) {
            Some(p) => p,
            None => {
                let uuid = s.labels.get("uuid").unwrap_or_default().to_string();
                gpus.push(GpuStats { index, uuid, ..GpuStats::default() });
                gpus.len() - 1
            }
        };
        let g = &mut gpus[pos];
        if g.uuid.is_empty() {
            g.uuid = s.labels.get("uuid").unwrap_or_default().to_string();
        }
        let slot = match s.metric.as_str() {
            "spillway_gpu_utilization_ratio" => &mut g.utilization,
            "spillway_gpu_memory_used_bytes" => &mut g.memory_used_bytes,
            "spillway_gpu_memory_total_bytes" => &mut g.memory_total_bytes,
            "spillway_gpu_power_watts" => &mut g.power_watts,
            "spillway_gpu_temperature_celsius" => &mut g.temperature_celsius,
            _ => continue,
        };
        *slot = Some(v);
    }
    gpus.sort_by_key(|g| g.index);
    Ok(AgentSample { up: up >= 1.0, reason, gpus })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_names_only() {
        assert_eq!(normalise_line("# TYPE vllm:x gauge"), "# TYPE vllm__COLON__x gauge");
        assert_eq!(
            normalise_line("# HELP vllm:x Help: with colon"),
            "# HELP vllm__COLON__x Help: with colon"
        );
        assert_eq!(normalise_line(r#"vllm:x{a="b:c"} 1"#), r#"vllm__COLON__x{a="b:c"} 1"#);
        assert_eq!(normalise_line("vllm:x 1"), "vllm__COLON__x 1");
        assert_eq!(normalise_line(r#"plain{a="b:c"} 1"#), r#"plain{a="b:c"} 1"#);
        assert_eq!(normalise_line("# SOURCE: a:b"), "# SOURCE: a:b");
        assert_eq!(normalise_line("a:b:c 1"), "a__COLON__b__COLON__c 1");
        assert_eq!(normalise_line(""), "");
    }

    #[test]
    fn the_family_filter_changes_nothing_parse_vllm_reads() {
        let all = vllm_from_samples(&parse_exposition(TWO_ENGINES).unwrap()).unwrap();
        assert_eq!(parse_vllm(TWO_ENGINES).unwrap(), all);
        let extra = format!("{TWO_ENGINES}# TYPE vllm:other gauge\nvllm:other{{engine=\"0\"}} 9\n");
        let kept = parse_exposition_where(&extra, is_read_by_parse_vllm).unwrap();
        assert!(kept.iter().all(|s| s.metric != "vllm:other"));
        assert_eq!(parse_vllm(&extra).unwrap(), all);
    }

    const TWO_ENGINES: &str = r#"# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1.5
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 4.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 5.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2.0
"#;

    #[test]
    fn sums_over_engines() {
        let s = parse_vllm(TWO_ENGINES).unwrap();
        assert_eq!(s.engines, 2);
        assert_eq!(s.model_names, vec!["m".to_string()]);
        assert_eq!(s.running, Some(7.0));
        assert_eq!(s.waiting, Some(3.0));
        assert_eq!(s.kv_cache_usage, Some(0.5));
        assert_eq!(s.request_success, Some(8.0));
        let t = s.ttft.unwrap();
        assert_eq!(t.buckets, vec![(0.1, 4.0), (f64::INFINITY, 6.0)]);
        assert_eq!(t.sum, Some(2.0));
        assert_eq!(t.count, Some(6.0));
        // Missing is unknown, not zero.
        assert_eq!(s.prompt_tokens, None);
        assert_eq!(s.itl, None);
        assert_eq!(s.cache, None);
        assert!(!s.legacy_names);
    }

    #[test]
    fn rejects_a_page_without_vllm_series() {
        assert!(matches!(parse_vllm("<html>nope</html>"), Err(ParseError::NotVllm)));
        assert!(matches!(parse_vllm("up 1\n"), Err(ParseError::NotVllm)));
        assert!(matches!(parse_vllm_means("up 1\n"), Err(ParseError::NotVllm)));
        assert!(matches!(parse_agent("vllm:x 1\n"), Err(ParseError::NotAgent)));
    }

    #[test]
    fn reads_the_agent() {
        let text = r#"# TYPE spillway_nvml_up gauge
spillway_nvml_up 1
# TYPE spillway_gpu_utilization_ratio gauge
spillway_gpu_utilization_ratio{gpu="1",uuid="GPU-b"} 0.5
spillway_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.25
spillway_gpu_memory_used_bytes{gpu="0",uuid="GPU-a"} 1000
spillway_gpu_memory_total_bytes{gpu="0",uuid="GPU-a"} 4000
spillway_gpu_power_watts{gpu="0",uuid="GPU-a"} 300.5
spillway_gpu_temperature_celsius{gpu="0",uuid="GPU-a"} 61
"#;
        let a = parse_agent(text).unwrap();
        assert!(a.up);
        assert_eq!(a.reason, None);
        assert_eq!(a.gpus.len(), 2);
        assert_eq!(
            a.gpus[0],
            GpuStats {
                index: 0,
                uuid: "GPU-a".into(),
                utilization: Some(0.25),
                memory_used_bytes: Some(1000.0),
                memory_total_bytes: Some(4000.0),
                power_watts: Some(300.5),
                temperature_celsius: Some(61.0),
            }
        );
        assert_eq!(a.gpus[1].index, 1);
        assert_eq!(a.gpus[1].uuid, "GPU-b");
        assert_eq!(a.gpus[1].utilization, Some(0.5));
        assert_eq!(a.gpus[1].power_watts, None);

        let down =
            parse_agent("spillway_nvml_up 0\nspillway_nvml_info{reason=\"NVML: driver not loaded\"} 1\n")
                .unwrap();
        assert!(!down.up);
        assert_eq!(down.reason.as_deref(), Some("NVML: driver not loaded"));
        assert!(down.gpus.is_empty());
    }
}

#[cfg(test)]
mod means_tests {
    use super::*;

    /// The scrape loop's bucket-free parse reads the same values routing uses.
    #[test]
    fn means_only_parse_agrees_with_the_full_parse_on_both_fixtures() {
        for page in [
            include_str!("../../tests/fixtures/vllm/v0-engine.prom"),
            include_str!("../../tests/fixtures/vllm/v1-engine-excerpt.prom"),
        ] {
            let full = parse_vllm(page).unwrap();
            let means = parse_vllm_means(page).unwrap();
            assert_eq!(
                (means.running, means.waiting, means.kv_cache_usage),
                (full.running, full.waiting, full.kv_cache_usage)
            );
            assert_eq!(means.cache, full.cache);
            assert_eq!(
                (means.prompt_tokens, means.generation_tokens),
                (full.prompt_tokens, full.generation_tokens)
            );
            assert_eq!(means.request_success, full.request_success);
            for (m, f) in [
                (&means.ttft, &full.ttft),
                (&means.itl, &full.itl),
                (&means.e2e, &full.e2e),
                (&means.queue_time, &full.queue_time),
            ] {
                assert_eq!(m.as_ref().map(|h| (h.sum, h.count)), f.as_ref().map(|h| (h.sum, h.count)));
                assert!(m.as_ref().is_none_or(|h| h.buckets.is_empty()));
            }
        }
    }
}
