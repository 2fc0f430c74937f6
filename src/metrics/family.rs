//! A metric family whose label set is a type. The label names are written once, with the
//! type; a family is registered with them and read only through a value of that type, so a
//! call site cannot pass label values in the wrong order, or the wrong number of them.
//!
//! Families are registered into [`Registry`], which keeps what each one is (name, help, type,
//! labels) beside Prometheus' own registry: the reference table of families is rendered from
//! it and compared with the docs by a test.

use std::marker::PhantomData;
use std::sync::Mutex;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

/// The router's registry: Prometheus' own, plus a description of each family as it is
/// registered. The exposition leaves out a family with no series yet; the reference table of
/// families (`docs/reference.md`, checked by a test) needs every one.
#[derive(Default)]
pub(crate) struct Registry {
    inner: prometheus::Registry,
    described: Mutex<Vec<FamilyDoc>>,
}

/// What one family is: its name, help, type and label names (in registration order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyDoc {
    pub name: String,
    pub help: String,
    pub kind: &'static str,
    pub labels: Vec<String>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub(crate) fn register(&self, c: Box<dyn Collector>) -> prometheus::Result<()> {
        let labels: Vec<String> = c.desc().iter().flat_map(|d| d.variable_labels.clone()).collect();
        let kind = c.collect().first().map_or("untyped", |f| match f.get_field_type() {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "untyped",
        });
        let docs: Vec<FamilyDoc> = c
            .desc()
            .iter()
            .map(|d| FamilyDoc {
                name: d.fq_name.clone(),
                help: d.help.clone(),
                kind,
                labels: labels.clone(),
            })
            .collect();
        self.inner.register(c)?;
        self.described.lock().unwrap_or_else(|e| e.into_inner()).extend(docs);
        Ok(())
    }

    pub(crate) fn gather(&self) -> Vec<MetricFamily> {
        self.inner.gather()
    }

    /// Every family registered, in registration order.
    pub fn families(&self) -> Vec<FamilyDoc> {
        self.described.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The label names of a label set, in registration order.
pub(crate) trait LabelNames {
    const NAMES: &'static [&'static str];
}

/// One family of `V` (a Prometheus vector) labelled by `L` (a [`label_set!`] type).
pub(crate) struct Family<V, L> {
    pub(super) vec: V,
    labels: PhantomData<fn(L)>,
}

impl<B: MetricVecBuilder, L> Family<MetricVec<B>, L> {
    /// Drop every series (state gauges are rebuilt from scratch at each scrape).
    pub fn reset(&self) {
        self.vec.reset();
    }
}

fn register<V: Collector + Clone + 'static, L>(r: &Registry, vec: V) -> Family<V, L> {
    r.register(Box::new(vec.clone())).expect("each family is registered once");
    Family { vec, labels: PhantomData }
}

pub fn counter<L: LabelNames>(r: &Registry, name: &str, help: &str) -> Family<IntCounterVec, L> {
    register(r, IntCounterVec::new(Opts::new(name, help), L::NAMES).expect("static metric definition"))
}

pub(crate) fn float_counter<L: LabelNames>(r: &Registry, name: &str, help: &str) -> Family<CounterVec, L> {
    register(r, CounterVec::new(Opts::new(name, help), L::NAMES).expect("static metric definition"))
}

pub fn gauge<L: LabelNames>(r: &Registry, name: &str, help: &str) -> Family<GaugeVec, L> {
    register(r, GaugeVec::new(Opts::new(name, help), L::NAMES).expect("static metric definition"))
}

pub(crate) fn int_gauge<L: LabelNames>(r: &Registry, name: &str, help: &str) -> Family<IntGaugeVec, L> {
    register(r, IntGaugeVec::new(Opts::new(name, help), L::NAMES).expect("static metric definition"))
}

pub fn histogram<L: LabelNames>(
    r: &Registry,
    name: &str,
    help: &str,
    buckets: Vec<f64>,
) -> Family<HistogramVec, L> {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    register(r, HistogramVec::new(opts, L::NAMES).expect("static metric definition"))
}

/// `label_set!(Name { a, b })`: a struct of borrowed label values whose field names are the
/// label names, and the accessor `get` on every family labelled by it.
macro_rules! label_set {
    ($(#[$doc:meta])* $name:ident { $($field:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<'a> {
            $(pub $field: &'a str),+
        }

        impl $crate::metrics::family::LabelNames for $name<'static> {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),+];
        }

        impl<B: prometheus::core::MetricVecBuilder>
            $crate::metrics::family::Family<prometheus::core::MetricVec<B>, $name<'static>>
        {
            /// The series of these label values (created at zero on first use).
            pub fn get(&self, labels: $name<'_>) -> B::M {
                self.vec.with_label_values(&[$(labels.$field),+])
            }
        }
    };
}

pub(crate) use label_set;

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    label_set!(
        /// A test label set.
        TaskOutcome { task, outcome }
    );

    #[test]
    fn labels_are_named_by_their_fields_in_order() {
        let r = Registry::new();
        let family: Family<IntCounterVec, TaskOutcome> = counter(&r, "t_total", "Test.");
        family.get(TaskOutcome { task: "summarise", outcome: "completed" }).inc_by(3);
        let mut text = Vec::new();
        prometheus::TextEncoder::new().encode(&r.gather(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains(r#"t_total{outcome="completed",task="summarise"} 3"#), "{text}");
        family.reset();
        assert_eq!(family.get(TaskOutcome { task: "summarise", outcome: "completed" }).get(), 0);
    }
}
