use super::*;

fn class(max_retention_days: Option<u32>, no_training: bool, zero_data_retention: bool) -> DataClassPolicy {
    DataClassPolicy {
        regions: None,
        allow_hosted: true,
        max_retention_days,
        no_training,
        zero_data_retention,
    }
}

fn terms(retention: Option<u32>, trains: Option<bool>, zdr: Option<bool>) -> DataTerms {
    DataTerms {
        retention_days: retention,
        trains_on_data: trains,
        zero_data_retention: zdr,
        processing_regions: None,
    }
}

const HOSTED: bool = false;
const LOCAL: bool = true;

#[test]
fn a_class_that_requires_nothing_takes_any_terms_declared_or_not() {
    let open = class(None, false, false);
    assert_eq!(unmet(&open, HOSTED, &DataTerms::default()), []);
    assert_eq!(unmet(&open, HOSTED, &terms(Some(3650), Some(true), Some(false))), []);
}

#[test]
fn retention_is_compared_with_the_class_maximum_in_whole_days() {
    let at_most_30 = class(Some(30), false, false);
    assert_eq!(unmet(&at_most_30, HOSTED, &terms(Some(30), None, None)), []);
    assert_eq!(
        unmet(&at_most_30, HOSTED, &terms(Some(31), None, None)),
        [Unmet::RetentionTooLong { days: 31, max: 30 }]
    );
    assert_eq!(
        unmet(&at_most_30, HOSTED, &terms(None, None, None)),
        [Unmet::RetentionUndeclared { max: 30 }]
    );
    // Zero data retention is a retention of 0 days.
    assert_eq!(unmet(&class(Some(0), false, false), HOSTED, &terms(None, None, Some(true))), []);
    assert_eq!(
        unmet(&class(Some(0), false, false), HOSTED, &terms(Some(1), None, None)),
        [Unmet::RetentionTooLong { days: 1, max: 0 }]
    );
    // A declared retention is what counts: 0 days is 0, even on a plan without the ZDR flag.
    assert_eq!(unmet(&class(Some(0), false, false), HOSTED, &terms(Some(0), None, Some(false))), []);
}

#[test]
fn training_use_must_be_declared_false() {
    let no_training = class(None, true, false);
    assert_eq!(unmet(&no_training, HOSTED, &terms(None, Some(false), None)), []);
    assert_eq!(unmet(&no_training, HOSTED, &terms(None, Some(true), None)), [Unmet::TrainsOnData]);
    assert_eq!(unmet(&no_training, HOSTED, &terms(None, None, None)), [Unmet::TrainingUndeclared]);
}

#[test]
fn zero_data_retention_must_be_declared_true() {
    let zdr = class(None, false, true);
    assert_eq!(unmet(&zdr, HOSTED, &terms(None, None, Some(true))), []);
    assert_eq!(unmet(&zdr, HOSTED, &terms(None, None, Some(false))), [Unmet::NoZeroRetention]);
    // A retention of 0 days is not a zero-data-retention plan: the term itself must be declared.
    assert_eq!(unmet(&zdr, HOSTED, &terms(Some(0), None, None)), [Unmet::ZeroRetentionUndeclared]);
}

#[test]
fn every_unmet_term_is_listed_in_order() {
    let strict = class(Some(0), true, true);
    assert_eq!(
        unmet(&strict, HOSTED, &DataTerms::default()),
        [Unmet::RetentionUndeclared { max: 0 }, Unmet::TrainingUndeclared, Unmet::ZeroRetentionUndeclared]
    );
    assert_eq!(
        unmet(&strict, HOSTED, &terms(Some(30), Some(true), Some(false))),
        [Unmet::RetentionTooLong { days: 30, max: 0 }, Unmet::TrainsOnData, Unmet::NoZeroRetention]
    );
}

#[test]
fn a_local_pool_meets_undeclared_terms_but_is_held_to_declared_ones() {
    let strict = class(Some(0), true, true);
    assert_eq!(unmet(&strict, LOCAL, &DataTerms::default()), []);
    assert_eq!(
        unmet(&strict, LOCAL, &terms(Some(7), Some(true), Some(false))),
        [Unmet::RetentionTooLong { days: 7, max: 0 }, Unmet::TrainsOnData, Unmet::NoZeroRetention]
    );
}

#[test]
fn declared_processing_regions_must_all_be_allowed() {
    let eu = DataClassPolicy {
        regions: Some(vec!["eu-west-1".into(), "eu-central-1".into()]),
        ..class(None, false, false)
    };
    let declared = |regions: &[&str]| DataTerms {
        processing_regions: Some(regions.iter().map(|r| r.to_string()).collect()),
        ..DataTerms::default()
    };
    assert_eq!(unmet(&eu, HOSTED, &declared(&["eu-central-1", "eu-west-1"])), []);
    assert_eq!(
        unmet(&eu, HOSTED, &declared(&["eu-west-1", "us-east-1", "ap-south-1"])),
        [
            Unmet::ProcessingRegion {
                region: "us-east-1".into(),
                allowed: vec!["eu-west-1".into(), "eu-central-1".into()]
            },
            Unmet::ProcessingRegion {
                region: "ap-south-1".into(),
                allowed: vec!["eu-west-1".into(), "eu-central-1".into()]
            },
        ]
    );
    // Undeclared: only the backend's own region counts (checked by the caller).
    assert_eq!(unmet(&eu, HOSTED, &DataTerms::default()), []);
    // A class without regions takes any processing region.
    assert_eq!(unmet(&class(None, false, false), HOSTED, &declared(&["us-east-1"])), []);
}

#[test]
fn each_reason_names_its_term() {
    let reasons: Vec<String> = [
        Unmet::RetentionUndeclared { max: 30 },
        Unmet::RetentionTooLong { days: 31, max: 30 },
        Unmet::TrainingUndeclared,
        Unmet::TrainsOnData,
        Unmet::ZeroRetentionUndeclared,
        Unmet::NoZeroRetention,
        Unmet::ProcessingRegion { region: "us-east-1".into(), allowed: vec!["eu-west-1".into()] },
    ]
    .iter()
    .map(Unmet::to_string)
    .collect();
    assert_eq!(
        reasons,
        [
            "terms.retention_days not declared (data class allows at most 30 days)",
            "terms.retention_days 31 is over the data class's max_retention_days 30",
            "terms.trains_on_data not declared (data class requires no_training)",
            "terms.trains_on_data is true (data class requires no_training)",
            "terms.zero_data_retention not declared (data class requires it)",
            "terms.zero_data_retention is false (data class requires it)",
            "terms.processing_regions includes us-east-1, not in [eu-west-1]",
        ]
    );
}
