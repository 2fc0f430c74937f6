//! Registering one page's Prometheus families: every engine's page builds its series through
//! this, so that constant labels, registration and encoding are written once.
//!
//! A [`Families`] is a registry plus the constant labels put on every family made through it;
//! [`Families::with`] gives another set of labels over the same registry (SGLang labels its
//! scheduler's gauges with ranks that its tokenizer's counters lack).

use prometheus::core::Collector;
use prometheus::{
    Counter, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};
use std::collections::HashMap;

/// A registry and the constant labels of the families made through this handle.
#[derive(Clone)]
pub struct Families {
    registry: Registry,
    labels: HashMap<String, String>,
}

impl Families {
    /// A new registry whose families carry `labels`.
    pub fn new(labels: &[(&str, &str)]) -> Families {
        Families { registry: Registry::new(), labels: HashMap::new() }.with(labels)
    }

    /// The same registry; families made through the result carry `labels` instead.
    pub fn with(&self, labels: &[(&str, &str)]) -> Families {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Families { registry: self.registry.clone(), labels }
    }

    fn opts(&self, name: &str, help: &str) -> Opts {
        Opts::new(name, help).const_labels(self.labels.clone())
    }

    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        self.registry.register(Box::new(c.clone())).expect("each family is registered once");
        c
    }

    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.add(Gauge::with_opts(self.opts(name, help)).expect("valid gauge"))
    }

    pub fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::with_opts(self.opts(name, help)).expect("valid gauge"))
    }

    pub fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        self.add(GaugeVec::new(self.opts(name, help), labels).expect("valid gauge"))
    }

    /// A counter of a fractional quantity (seconds).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        self.add(Counter::with_opts(self.opts(name, help)).expect("valid counter"))
    }

    pub fn int_counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::with_opts(self.opts(name, help)).expect("valid counter"))
    }

    pub fn int_counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(self.opts(name, help), labels).expect("valid counter"))
    }

    pub fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let opts = HistogramOpts::from(self.opts(name, help)).buckets(buckets.to_vec());
        self.add(Histogram::with_opts(opts).expect("valid histogram"))
    }

    /// The Prometheus text exposition of every family in the registry.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding cannot fail");
        String::from_utf8(buf).expect("exposition is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::Families;

    #[test]
    fn labels_apply_per_handle_over_one_registry() {
        let f = Families::new(&[("model_name", "m")]);
        f.int_gauge("a:x", "x").set(2);
        f.with(&[]).int_gauge("a:y", "y").set(3);
        let text = f.encode();
        assert!(text.contains("a:x{model_name=\"m\"} 2"), "{text}");
        assert!(text.contains("a:y 3"), "{text}");
    }
}
