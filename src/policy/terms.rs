//! Data terms against a data class: the pure check of whether what a backend's provider does
//! with the data (retention, training use, zero data retention, processing regions) meets what
//! the task's data class requires. No I/O; `policy` calls it for every path to a backend.
//!
//! The rule for a term the backend does not declare: unknown is not good. A hosted backend
//! that leaves a required term out is refused for it. A self-hosted pool keeps the data
//! in-house, so an undeclared retention, training or zero-data-retention term is met; a pool
//! that declares one is held to what it declares. Processing regions are checked only where
//! declared (the backend's own `region` is checked by `policy` as before).

use std::fmt;

use crate::config::{DataClassPolicy, DataTerms};

/// One term a backend does not meet, naming the term and what the data class asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmet {
    /// `max_retention_days` is set and the backend declares no retention.
    RetentionUndeclared { max: u32 },
    /// The backend keeps the data longer than `max_retention_days`.
    RetentionTooLong { days: u32, max: u32 },
    /// `no_training` and the backend does not declare `trains_on_data`.
    TrainingUndeclared,
    /// `no_training` and the backend trains on the data.
    TrainsOnData,
    /// `zero_data_retention` and the backend does not declare it.
    ZeroRetentionUndeclared,
    /// `zero_data_retention` and the backend declares it false.
    NoZeroRetention,
    /// A declared processing region outside the data class's `regions`.
    ProcessingRegion { region: String, allowed: Vec<String> },
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::RetentionUndeclared { max } => {
                write!(f, "terms.retention_days not declared (data class allows at most {max} days)")
            }
            Unmet::RetentionTooLong { days, max } => {
                write!(f, "terms.retention_days {days} is over the data class's max_retention_days {max}")
            }
            Unmet::TrainingUndeclared => {
                write!(f, "terms.trains_on_data not declared (data class requires no_training)")
            }
            Unmet::TrainsOnData => {
                write!(f, "terms.trains_on_data is true (data class requires no_training)")
            }
            Unmet::ZeroRetentionUndeclared => {
                write!(f, "terms.zero_data_retention not declared (data class requires it)")
            }
            Unmet::NoZeroRetention => {
                write!(f, "terms.zero_data_retention is false (data class requires it)")
            }
            Unmet::ProcessingRegion { region, allowed } => {
                write!(f, "terms.processing_regions includes {region}, not in [{}]", allowed.join(", "))
            }
        }
    }
}

/// Every term of `terms` that `rule` requires and the backend does not meet, in the order the
/// terms are listed; empty when it meets them all. `local`: a self-hosted pool.
pub fn unmet(rule: &DataClassPolicy, local: bool, terms: &DataTerms) -> Vec<Unmet> {
    let mut unmet = Vec::new();
    if let Some(max) = rule.max_retention_days {
        let zero = (terms.zero_data_retention == Some(true)).then_some(0);
        match terms.retention_days.or(zero) {
            Some(days) if days > max => unmet.push(Unmet::RetentionTooLong { days, max }),
            Some(_) => {}
            None if local => {}
            None => unmet.push(Unmet::RetentionUndeclared { max }),
        }
    }
    if rule.no_training {
        match terms.trains_on_data {
            Some(true) => unmet.push(Unmet::TrainsOnData),
            Some(false) => {}
            None if local => {}
            None => unmet.push(Unmet::TrainingUndeclared),
        }
    }
    if rule.zero_data_retention {
        match terms.zero_data_retention {
            Some(true) => {}
            Some(false) => unmet.push(Unmet::NoZeroRetention),
            None if local => {}
            None => unmet.push(Unmet::ZeroRetentionUndeclared),
        }
    }
    if let (Some(allowed), Some(regions)) = (&rule.regions, &terms.processing_regions) {
        for region in regions.iter().filter(|r| !allowed.contains(r)) {
            unmet.push(Unmet::ProcessingRegion { region: region.clone(), allowed: allowed.clone() });
        }
    }
    unmet
}

#[cfg(test)]
#[path = "terms_tests.rs"]
mod tests;
