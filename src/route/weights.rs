//! Traffic weights from availabilities, filled in preference order (third seed document):
//! `w1 = a1`, `w2 = min(a2, 1 − w1)`, `w3 = min(a3, 1 − w1 − w2)`, …; scaled up to sum to 1
//! when the availabilities add up to less; equal when every availability is 0.
//!
//! It exists so that the rule is one small pure function with exact tests; the PID in
//! `control::availability` produces its input and `route::chain` consumes its output. It must
//! not reorder backends (the input order *is* the preference order), read any state, or try to
//! create capacity: equal weights when everything is down keep requests flowing, nothing more.

/// Availability as the fill understands it: NaN and anything below 0 count as 0, anything
/// above 1 (including +∞) as 1.
fn clean(a: f64) -> f64 {
    if a.is_nan() {
        0.0
    } else {
        a.clamp(0.0, 1.0)
    }
}

/// Weights for backends given their availabilities in preference order. The result has the
/// same length and order, sums to 1 (up to rounding) unless the input is empty, and every
/// weight is in [0, 1].
pub fn weights(availabilities_in_preference_order: &[f64]) -> Vec<f64> {
    let n = availabilities_in_preference_order.len();
    let mut out = Vec::with_capacity(n);
    let mut total: f64 = 0.0;
    for &a in availabilities_in_preference_order {
        let w = clean(a).min((1.0 - total).max(0.0));
        total += w;
        out.push(w);
    }
    if total <= 0.0 {
        return vec![1.0 / n as f64; n];
    }
    if total < 1.0 {
        for w in &mut out {
            *w /= total;
        }
    }
    out
}

/// An adaptive task's first-choice weights now, by backend: only the backends its
/// policy allows, each local pool counted as having headroom. Empty when nothing is eligible.
pub(crate) fn task_weights(
    task: &crate::config::TaskConfig,
    snap: &super::Snapshot,
) -> Vec<(crate::config::BackendId, f64)> {
    let eligible = crate::policy::eligible(task, snap).unwrap_or_default();
    let avail: Vec<f64> = eligible.iter().map(|&i| snap.backends[i].availability).collect();
    eligible.into_iter().zip(weights(&avail)).collect()
}

#[cfg(test)]
mod tests {
    use super::weights;

    #[track_caller]
    fn assert_near(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn preferred_backends_fill_first_when_capacity_exceeds_demand() {
        // Everyone healthy: all first-choice traffic to the preferred backend.
        assert_eq!(weights(&[1.0, 1.0, 1.0]), [1.0, 0.0, 0.0]);
        // The preferred one is at half capacity: the next takes the rest; the third nothing.
        assert_eq!(weights(&[0.5, 0.75, 1.0]), [0.5, 0.5, 0.0]);
        // The second cannot take all of the rest: the third takes what is left.
        assert_eq!(weights(&[0.5, 0.25, 1.0]), [0.5, 0.25, 0.25]);
        assert_near(&weights(&[0.6, 0.7, 0.5]), &[0.6, 0.4, 0.0]);
        // A backend further down keeps nothing once the sum has reached 1.
        assert_eq!(weights(&[0.25, 0.75, 0.5, 1.0]), [0.25, 0.75, 0.0, 0.0]);
    }

    #[test]
    fn totals_below_one_scale_up_and_all_zero_is_equal() {
        assert_eq!(weights(&[0.25, 0.25]), [0.5, 0.5]);
        // 0.5 + 0.25 + 0.125 = 0.875: weights 4/7, 2/7, 1/7.
        assert_near(&weights(&[0.5, 0.25, 0.125]), &[4.0 / 7.0, 2.0 / 7.0, 1.0 / 7.0]);
        assert_eq!(weights(&[0.0, 0.5, 0.0]), [0.0, 1.0, 0.0]);
        assert_eq!(weights(&[0.0, 0.0, 0.0, 0.0]), [0.25; 4]);
        assert_near(&weights(&[0.0, 0.0, 0.0]), &[1.0 / 3.0; 3]);
    }

    #[test]
    fn edge_cases() {
        assert!(weights(&[]).is_empty());
        // One backend always gets everything, whatever its availability.
        assert_eq!(weights(&[0.3]), [1.0]);
        assert_eq!(weights(&[0.0]), [1.0]);
        assert_eq!(weights(&[1.0]), [1.0]);
        // Out-of-range input is clamped: NaN and negatives to 0, above 1 to 1.
        assert_eq!(weights(&[f64::NAN, 0.5]), [0.0, 1.0]);
        assert_eq!(weights(&[-0.5, 0.25]), [0.0, 1.0]);
        assert_eq!(weights(&[1.5, 0.5]), [1.0, 0.0]);
        assert_eq!(weights(&[f64::INFINITY, 0.5]), [1.0, 0.0]);
        assert_eq!(weights(&[f64::NEG_INFINITY, f64::NAN]), [0.5, 0.5]);
        // Every result sums to 1 and stays in [0, 1].
        for input in [&[0.9, 0.8, 0.7][..], &[0.1, 0.05, 0.2, 0.3], &[0.33, 0.33, 0.33]] {
            let w = weights(input);
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{w:?}");
            assert!(w.iter().all(|w| (0.0..=1.0).contains(w)), "{w:?}");
        }
    }
}
