//! The one Prometheus text reader every engine adapter (`fleet::engines`) and the NVML agent's
//! parser share: a family filter that runs before any parsing, the bucket-free variant the
//! scrape loop uses, and the folds (sum, mean, histogram) that turn samples into sample fields.
//!
//! Pure: text in, samples out; no I/O and no clock. The line reading itself is `fleet::scan`'s
//! (names with `:`, every vLLM, SGLang and llama.cpp series, read as they are). A fold over a
//! series that is absent is `None`, never 0. No engine-specific name belongs here.

use super::parse_error::ParseError;
pub use super::scan::{HistogramCount, Labels, Sample, SummaryCount, Value};

/// One histogram, summed over engines (and any other label).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HistogramSample {
    /// `(le, cumulative count)`, ascending `le`; `+Inf` included where the page has it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<(f64, f64)>,
    /// `_sum`, if the page has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    /// `_count`, else the `+Inf` bucket; `None` if neither is there.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// The metric names of a page's `# TYPE` and sample lines, in page order (repeats included).
/// Cheap: no parsing, for telling engines apart.
pub fn metric_names(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|l| match split_line(l) {
        (LineKind::Type | LineKind::Sample, _, name, _) => Some(name),
        _ => None,
    })
}

/// Parse a Prometheus text exposition. Histogram samples carry their family name (no `_bucket`); `_sum` and `_count` come as
/// separate untyped samples.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, ParseError> {
    parse_exposition_where(text, |_| true)
}

/// [`parse_exposition`] of the `# TYPE` and sample lines whose metric name passes `keep`
/// (`# HELP` text is never used, so it is skipped). Parsing costs about 2 µs a line, so
/// leaving out families nobody reads is the cheapest speed-up there is.
pub(crate) fn parse_exposition_where(
    text: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<Sample>, ParseError> {
    read_lines(text, |line| match split_line(line) {
        (LineKind::Help | LineKind::Other, ..) => false,
        (_, _, name, _) => keep(name),
    })
}

/// [`parse_exposition_where`] without histogram buckets: routing reads only each histogram's
/// sum and count (recent means), and buckets are most of a page, so skipping them cuts the
/// parse cost several times over. The `# TYPE` line of a histogram is dropped with them, so its
/// `_sum` and `_count` are read as plain samples.
pub(crate) fn parse_means_where(text: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<Sample>, ParseError> {
    let histograms: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# TYPE ") && l.ends_with(" histogram"))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    read_lines(text, |line| match split_line(line) {
        (LineKind::Help | LineKind::Other, ..) => false,
        (LineKind::Type, _, name, _) => keep(name) && !histograms.contains(&name),
        (_, _, name, _) => keep(name) && !name.ends_with("_bucket"),
    })
}

/// Parse the lines of `text` that `keep` passes (reading a page never fails: a line that is
/// not a sample is skipped; the `Result` is the adapters' contract).
fn read_lines(text: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<Sample>, ParseError> {
    Ok(super::scan::scan(text.lines().filter(|l| keep(l))))
}

/// The number a counter, gauge or untyped sample holds.
pub(crate) fn scalar(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        _ => None,
    }
}

/// Sum of every series named `name` whose labels pass `pick`, `None` if there is none.
pub(crate) fn sum_where(samples: &[Sample], name: &str, pick: impl Fn(&Sample) -> bool) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.metric == name && pick(s))
        .filter_map(|s| scalar(&s.value))
        .fold(None, |acc, x| Some(acc.unwrap_or(0.0) + x))
}

/// Sum of every series named `name`, `None` if there is none.
pub fn sum_of(samples: &[Sample], name: &str) -> Option<f64> {
    sum_where(samples, name, |_| true)
}

/// Sum of the series named `name` whose label `label` is `value` (Triton's one-family-many-
/// gauges style), `None` if there is none.
pub(crate) fn sum_labelled(samples: &[Sample], name: &str, label: &str, value: &str) -> Option<f64> {
    sum_where(samples, name, |s| s.labels.get(label) == Some(value))
}

/// Mean of every series named `name`, `None` if there is none.
pub(crate) fn mean_of(samples: &[Sample], name: &str) -> Option<f64> {
    let xs: Vec<f64> = samples.iter().filter(|s| s.metric == name).filter_map(|s| scalar(&s.value)).collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Histogram `name` (family name), buckets matched by `le` and summed over series.
pub fn histogram(samples: &[Sample], name: &str) -> Option<HistogramSample> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_colons_are_read_as_they_are() {
        let page = "# HELP vllm:x Help: with colon\n# TYPE vllm:x gauge\nvllm:x{a=\"b:c\"} 1\na:b:c 2\n";
        let s = parse_exposition(page).unwrap();
        assert_eq!(s.iter().map(|s| s.metric.as_str()).collect::<Vec<_>>(), vec!["vllm:x", "a:b:c"]);
        assert_eq!(s[0].labels.get("a"), Some("b:c"));
        assert_eq!(s[0].value, Value::Gauge(1.0));
    }

    #[test]
    fn names_come_from_type_and_sample_lines_only() {
        let page = "# HELP a:x help\n# TYPE a:x gauge\na:x{l=\"v\"} 1\n# comment b_y\n\nc_z 2\n";
        assert_eq!(metric_names(page).collect::<Vec<_>>(), vec!["a:x", "a:x", "c_z"]);
    }

    #[test]
    fn labelled_sums_pick_one_gauge_of_a_family() {
        let page = "f{t=\"max\"} 8\nf{t=\"used\"} 3\nf{t=\"used\",m=\"b\"} 1\n";
        let s = parse_exposition(page).unwrap();
        assert_eq!(sum_labelled(&s, "f", "t", "used"), Some(4.0));
        assert_eq!(sum_labelled(&s, "f", "t", "max"), Some(8.0));
        assert_eq!(sum_labelled(&s, "f", "t", "free"), None);
        assert_eq!(sum_of(&s, "g"), None);
    }
}
