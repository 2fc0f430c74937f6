//! A backend's data terms: what its provider (and plan) does with the data it is sent, as the
//! operator read it in the contract. Each term is optional, and an undeclared term is unknown,
//! never assumed good: `policy` decides what unknown means (a hosted backend is refused by a
//! data class that requires the term; a self-hosted pool keeps the data in-house). Types and
//! their checks only; the filter itself is `policy::terms`.

use schemars::JsonSchema;
use serde::Deserialize;

/// `terms:` of a backend. Unset keys are not declared.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct DataTerms {
    /// Days the provider keeps prompts and answers (abuse monitoring, logs); 0: not kept.
    #[serde(default)]
    pub retention_days: Option<u32>,
    /// Whether the provider may train its models on the data.
    #[serde(default)]
    pub trains_on_data: Option<bool>,
    /// Whether the plan has zero data retention (nothing is stored past the request).
    #[serde(default)]
    pub zero_data_retention: Option<bool>,
    /// Every region the provider may process the data in (beyond `region`, where the endpoint
    /// is); with a data class's `regions`, each must be one of them.
    #[serde(default)]
    pub processing_regions: Option<Vec<String>>,
}

impl DataTerms {
    /// Whether no term is declared.
    pub fn is_empty(&self) -> bool {
        *self == DataTerms::default()
    }

    /// What the types alone cannot refuse, as (key under `terms`, why): an empty region list
    /// or name, and zero data retention beside a retention period.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        match &self.processing_regions {
            Some(regions) if regions.is_empty() => problems.push((
                "processing_regions".to_string(),
                "must name at least one region (leave it out when not known)".to_string(),
            )),
            Some(regions) => {
                for (i, region) in regions.iter().enumerate() {
                    if region.trim().is_empty() {
                        problems.push((format!("processing_regions[{i}]"), "must not be empty".to_string()));
                    }
                }
            }
            None => {}
        }
        if let (Some(true), Some(days @ 1..)) = (self.zero_data_retention, self.retention_days) {
            problems.push((
                "retention_days".to_string(),
                format!("{days} days contradicts zero_data_retention: true (0 or leave it out)"),
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_terms_are_checked_for_contradictions() {
        let terms = DataTerms {
            retention_days: Some(30),
            zero_data_retention: Some(true),
            processing_regions: Some(vec!["eu-west-1".into(), " ".into()]),
            ..DataTerms::default()
        };
        assert_eq!(
            terms.problems(),
            [
                ("processing_regions[1]".to_string(), "must not be empty".to_string()),
                (
                    "retention_days".to_string(),
                    "30 days contradicts zero_data_retention: true (0 or leave it out)".to_string()
                ),
            ]
        );
        let empty = DataTerms { processing_regions: Some(vec![]), ..DataTerms::default() };
        assert_eq!(empty.problems()[0].0, "processing_regions");
        let fine =
            DataTerms { retention_days: Some(0), zero_data_retention: Some(true), ..DataTerms::default() };
        assert!(fine.problems().is_empty());
        assert!(DataTerms::default().is_empty() && !fine.is_empty());
    }

    const BASE: &str = "tasks: [{name: t, backends: [a], slo: {ttft_ms: 800}}]\nbackends:\n  - {name: a, kind: openai, model: m}\n  - {name: b, kind: vllm, endpoints: [\"http://127.0.0.1:1\"], model: m}\n";

    fn problems(third: &str) -> Vec<String> {
        let yaml = format!("{BASE}  - {{name: c, kind: anthropic, model: m, terms: {third}}}\n");
        crate::config::parse(&yaml).unwrap_err().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_malformed_terms_block_names_the_field_path() {
        let wrong_type = problems("{retention_days: thirty}");
        assert_eq!(wrong_type.len(), 1, "{wrong_type:?}");
        assert!(wrong_type[0].starts_with("backends[2].terms.retention_days: "), "{wrong_type:?}");
        let negative = problems("{retention_days: -1}");
        assert!(negative[0].starts_with("backends[2].terms.retention_days: "), "{negative:?}");
        let unknown = problems("{retention: 30}");
        assert!(unknown[0].starts_with("backends[2].terms.retention: unknown"), "{unknown:?}");
        let not_a_flag = problems("{trains_on_data: sometimes}");
        assert!(not_a_flag[0].starts_with("backends[2].terms.trains_on_data: "), "{not_a_flag:?}");
        assert_eq!(
            problems("{retention_days: 30, zero_data_retention: true, processing_regions: []}"),
            [
                "backends[2].terms.processing_regions: must name at least one region (leave it out when not known)",
                "backends[2].terms.retention_days: 30 days contradicts zero_data_retention: true (0 or leave it out)",
            ]
        );
    }

    #[test]
    fn every_kind_takes_terms_and_a_class_takes_its_requirements() {
        let yaml = format!(
            "{BASE}policy: {{data_classes: {{c: {{max_retention_days: 30, no_training: true, zero_data_retention: true}}}}}}\n"
        )
        .replace("model: m}", "model: m, terms: {retention_days: 0, processing_regions: [eu-west-1]}}");
        let config = crate::config::parse(&yaml).unwrap();
        for b in &config.backends {
            assert_eq!(b.terms.retention_days, Some(0), "{}", b.name);
            assert_eq!(b.terms.processing_regions.as_deref(), Some(&["eu-west-1".to_string()][..]));
        }
        let class = &config.policy.data_classes["c"];
        assert_eq!(
            (class.max_retention_days, class.no_training, class.zero_data_retention),
            (Some(30), true, true)
        );
        let bad =
            crate::config::parse(&format!("{BASE}policy: {{data_classes: {{c: {{no_training: maybe}}}}}}\n"))
                .unwrap_err();
        assert!(bad[0].to_string().starts_with("policy.data_classes.c.no_training: "), "{bad:?}");
    }
}
