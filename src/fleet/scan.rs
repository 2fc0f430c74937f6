//! A small hand-written reader of Prometheus text exposition lines: what the scrape loop runs
//! a hundred times a second, so it must cost little. It reads `# TYPE` and sample lines into
//! [`Sample`]s (histogram buckets grouped by their other labels, summaries by quantile), the
//! way `prometheus-parse` 0.2.5 (the reader it replaced) did, minus its regexes, its clock
//! read per sample and its loss of every name holding `:`.
//!
//! Pure: lines in, samples out; no I/O. Which lines to read is the caller's choice
//! (`fleet::exposition` filters by family first). A line that is not a sample (bad value,
//! no name) is skipped, as before; reading never fails.

use std::collections::HashMap;

/// One bucket of a histogram: the cumulative count of observations `<= less_than`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramCount {
    pub less_than: f64,
    pub count: f64,
}

/// One quantile of a summary.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryCount {
    pub quantile: f64,
    pub count: f64,
}

/// What one series holds: a number (typed by its family's `# TYPE`), or a histogram's buckets,
/// or a summary's quantiles.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    Untyped(f64),
    Histogram(Vec<HistogramCount>),
    Summary(Vec<SummaryCount>),
}

/// A series' labels, in page order, packed as `name \0 value \0 …` in one string (a page has a
/// handful per series, and a scrape reads hundreds of series: one allocation each, not four).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels(String);

impl Labels {
    /// The value of label `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// Every `(name, value)`, in page order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.0.split_terminator('\0');
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }

    pub(crate) fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Labels {
        let mut packed = String::new();
        for (k, v) in pairs {
            packed.push_str(k.as_ref());
            packed.push('\0');
            packed.push_str(v.as_ref());
            packed.push('\0');
        }
        Labels(packed)
    }

    /// These labels but `name`, and `name`'s value.
    fn without(&self, name: &str) -> (Labels, Option<&str>) {
        let found = self.get(name);
        (Labels::from_pairs(self.iter().filter(|(k, _)| *k != name)), found)
    }

    /// The labels sorted by name: the identity of a series whatever the page's order.
    fn sorted(&self) -> Vec<(&str, &str)> {
        let mut v: Vec<_> = self.iter().collect();
        v.sort();
        v
    }
}

/// One series of a page. A histogram's `_sum` and `_count` are separate untyped samples, and a
/// histogram sample carries its family name (no `_bucket`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: String,
    pub labels: Labels,
    pub value: Value,
}

/// A grouped series' labels (all but `le` or `quantile`), sorted by name.
type SeriesLabels = Vec<(String, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

/// A number as Prometheus writes it (`NaN`, `+Inf`, `-Inf` included).
pub fn number(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().or_else(|| s.to_ascii_lowercase().parse::<f64>().ok())
}

/// `a="x",b="y"` into packed labels; `None` if malformed. Values may hold escaped `\"`, `\\`,
/// `\n`; a label value holding a NUL is not read.
fn labels(mut s: &str) -> Option<Labels> {
    let mut out = String::with_capacity(s.len());
    loop {
        s = s.trim_start_matches([',', ' ', '\t']);
        if s.is_empty() {
            return Some(Labels(out));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mark = out.len();
        if !key.is_empty() {
            out.push_str(key);
            out.push('\0');
        }
        let mut end = None;
        let mut chars = s.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(i);
                    break;
                }
                '\0' => return None,
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, c)) => out.push(c),
                    None => return None,
                },
                c => out.push(c),
            }
        }
        let end = end?;
        if key.is_empty() {
            out.truncate(mark);
        } else {
            out.push('\0');
        }
        s = &s[end + 1..];
    }
}

/// A sample line: name, labels text (inside the braces), value text.
fn sample_line(line: &str) -> Option<(&str, Option<&str>, &str)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let (name, mut rest) = line.split_at(name_end);
    let mut labels = None;
    if let Some(r) = rest.strip_prefix('{') {
        // A `}` inside a quoted value does not close the braces.
        let mut quoted = false;
        let mut escaped = false;
        let close = r.char_indices().find(|&(_, c)| {
            let closes = c == '}' && !quoted;
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = !quoted;
            }
            closes
        })?;
        labels = Some(&r[..close.0]);
        rest = &r[close.0 + 1..];
    }
    let value = rest.split_whitespace().next()?;
    (!name.is_empty()).then_some((name, labels, value))
}

/// Read `lines` (already filtered by the caller) into samples: scalars in page order, then
/// histograms and summaries in the order their first line came.
pub fn scan<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Sample> {
    // A page declares a few dozen families: a list beats a hash map.
    let mut types: Vec<(&str, Kind)> = Vec::new();
    let kind_of =
        |types: &[(&str, Kind)], name: &str| types.iter().find(|(n, _)| *n == name).map(|(_, k)| *k);
    let mut samples = Vec::with_capacity(64);
    let mut grouped: Vec<Sample> = Vec::new();
    let mut groups: HashMap<(&str, SeriesLabels), usize> = HashMap::new();
    for line in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(r) = line.strip_prefix('#') {
            let mut words = r.split_whitespace();
            if words.next() != Some("TYPE") {
                continue;
            }
            let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
            let kind = match kind {
                "counter" => Kind::Counter,
                "gauge" => Kind::Gauge,
                "histogram" => Kind::Histogram,
                "summary" => Kind::Summary,
                _ => Kind::Untyped,
            };
            match types.iter_mut().find(|(n, _)| *n == name) {
                Some(t) => t.1 = kind,
                None => types.push((name, kind)),
            }
            continue;
        }
        let Some((name, label_text, value)) = sample_line(line) else { continue };
        let Some(value) = number(value) else { continue };
        let labels = match label_text.map(labels) {
            None => Labels::default(),
            Some(Some(l)) => l,
            Some(None) => continue,
        };
        // A histogram's buckets are `<family>_bucket`; a line named as the family itself is
        // not one of its buckets.
        let family = name.strip_suffix("_bucket").filter(|f| kind_of(&types, f) == Some(Kind::Histogram));
        let (kind, family) = match (family, kind_of(&types, name)) {
            (Some(f), _) => (Kind::Histogram, f),
            (None, Some(Kind::Histogram) | None) => (Kind::Untyped, name),
            (None, Some(k)) => (k, name),
        };
        let grouping = match kind {
            Kind::Histogram => "le",
            Kind::Summary => "quantile",
            _ => "",
        };
        if grouping.is_empty() || label_text.is_none() {
            let value = match kind {
                Kind::Counter => Value::Counter(value),
                Kind::Gauge => Value::Gauge(value),
                _ => Value::Untyped(value),
            };
            samples.push(Sample { metric: name.to_string(), labels, value });
            continue;
        }
        let (labels, bound) = labels.without(grouping);
        let Some(bound) = bound.and_then(number) else { continue };
        let identity = labels.sorted().into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let index = *groups.entry((family, identity)).or_insert_with(|| {
            let value =
                if kind == Kind::Histogram { Value::Histogram(vec![]) } else { Value::Summary(vec![]) };
            grouped.push(Sample { metric: family.to_string(), labels, value });
            grouped.len() - 1
        });
        match &mut grouped[index].value {
            Value::Histogram(h) => h.push(HistogramCount { less_than: bound, count: value }),
            Value::Summary(s) => s.push(SummaryCount { quantile: bound, count: value }),
            _ => {}
        }
    }
    samples.extend(grouped);
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_with_colons_labels_and_special_numbers() {
        let page =
            "# TYPE a:x gauge\na:x{l=\"v:w\",m=\"q\\\"r}\"} 1.5\nb_y NaN 1700000000\nc +Inf\nd{} -2e3\n";
        let s = scan(page.lines());
        assert_eq!(s.len(), 4);
        assert_eq!((s[0].metric.as_str(), &s[0].value), ("a:x", &Value::Gauge(1.5)));
        assert_eq!((s[0].labels.get("l"), s[0].labels.get("m")), (Some("v:w"), Some("q\"r}")));
        assert!(matches!(s[1].value, Value::Untyped(x) if x.is_nan()));
        assert_eq!(s[2].value, Value::Untyped(f64::INFINITY));
        assert_eq!(s[3].value, Value::Untyped(-2000.0));
    }

    #[test]
    fn groups_buckets_by_their_other_labels() {
        let page = "# TYPE h histogram\nh_bucket{e=\"0\",le=\"0.1\"} 1\nh_bucket{le=\"0.1\",e=\"1\"} 2\n\
                    h_bucket{e=\"0\",le=\"+Inf\"} 3\nh_sum{e=\"0\"} 0.5\nh_count{e=\"0\"} 3\n";
        let s = scan(page.lines());
        assert_eq!(s.len(), 4);
        assert_eq!((s[0].metric.as_str(), &s[0].value), ("h_sum", &Value::Untyped(0.5)));
        assert_eq!(s[2].metric, "h");
        assert_eq!(s[2].labels.get("e"), Some("0"));
        assert_eq!(
            s[2].value,
            Value::Histogram(vec![
                HistogramCount { less_than: 0.1, count: 1.0 },
                HistogramCount { less_than: f64::INFINITY, count: 3.0 }
            ])
        );
        assert_eq!(s[3].value, Value::Histogram(vec![HistogramCount { less_than: 0.1, count: 2.0 }]));
    }

    #[test]
    fn skips_what_is_not_a_sample() {
        let page = "# HELP x help text 3\n# just a comment\n\nfoo=2\nx notanumber\nx{a=\"unclosed} 1\nok 7\n";
        let s = scan(page.lines());
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].metric.as_str(), &s[0].value), ("ok", &Value::Untyped(7.0)));
    }
}
