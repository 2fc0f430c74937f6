//! A fixed-size log-linear histogram of times in whole microseconds, so that a run's TTFT
//! percentiles (in total and per chart bucket) cost a few kilobytes however many requests it
//! serves, instead of one `f64` per request.
//!
//! Values below 128 µs have a bucket each (exact); above, every power of two is split into 64
//! equal buckets, so a bucket is at most 1/64 of its lower edge wide. A percentile is the
//! nearest-rank rule over the buckets (the bucket holding the `ceil(n × q)`-th smallest value),
//! reported as that bucket's midpoint and clamped to the smallest and largest values seen, so
//! it is within 1/128 (0.78 %) of the exact nearest-rank value. Values are clamped to 2^30 µs
//! (about 17.9 minutes); a simulated first token never comes later than that.

/// Values below this have a bucket each.
const LINEAR: u64 = 128;
/// Buckets per power of two above `LINEAR`.
const SUB: u64 = 64;
/// log2(SUB).
const SUB_BITS: u32 = 6;
/// The largest value kept, in microseconds (larger ones count as this).
pub(crate) const MAX_US: u64 = (1 << 30) - 1;
/// 128 exact buckets, then 64 for each power of two from 2^7 to 2^29.
const BUCKETS: usize = (LINEAR + (30 - 7) * SUB) as usize;

#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    counts: Box<[u64]>,
    n: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS].into_boxed_slice(), n: 0, min: u64::MAX, max: 0 }
    }
}

/// The bucket of a value in microseconds.
fn index(us: u64) -> usize {
    let us = us.min(MAX_US);
    if us < LINEAR {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // 7..=29
    let sub = (us >> (exp - SUB_BITS)) - SUB; // 0..64
    (LINEAR + u64::from(exp - 7) * SUB + sub) as usize
}

/// The lowest value of a bucket and its width.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, 1);
    }
    let exp = 7 + (i - LINEAR) / SUB;
    let sub = (i - LINEAR) % SUB;
    let width = 1u64 << (exp - u64::from(SUB_BITS));
    ((SUB + sub) * width, width)
}

impl Histogram {
    /// Count one value, in microseconds.
    pub fn record(&mut self, us: u64) {
        let us = us.min(MAX_US);
        self.counts[index(us)] += 1;
        self.n += 1;
        self.min = self.min.min(us);
        self.max = self.max.max(us);
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// The `q` quantile by nearest rank, in microseconds (see the module's doc for the
    /// precision); `None` when nothing was recorded.
    pub(crate) fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((self.n as f64 * q).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        let i = self
            .counts
            .iter()
            .position(|c| {
                seen += c;
                seen >= rank
            })
            .expect("the counts add up to n");
        let (low, width) = bounds(i);
        let mid = low as f64 + (width as f64 - 1.0) / 2.0;
        Some(mid.clamp(self.min as f64, self.max as f64))
    }

    /// The `q` quantile in milliseconds.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.quantile_us(q).map(|us| us / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        assert_eq!(BUCKETS, 1600);
        assert_eq!((index(0), index(127), index(128), index(129)), (0, 127, 128, 128));
        assert_eq!(bounds(128), (128, 2));
        assert_eq!((index(255), index(256), bounds(192)), (191, 192, (256, 4)));
        assert_eq!(index(MAX_US), BUCKETS - 1);
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        for i in 0..BUCKETS - 1 {
            let (low, width) = bounds(i);
            assert_eq!(bounds(i + 1).0, low + width, "bucket {i}");
            assert_eq!((index(low), index(low + width - 1)), (i, i));
            assert!(width * 64 <= low.max(64), "bucket {i}: {width} wide at {low}");
        }
    }

    #[test]
    fn nearest_rank_over_buckets() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        // 1, 2, …, 100 µs: exact buckets, so exactly the nearest rank.
        (1..=100).for_each(|v| h.record(v));
        assert_eq!(h.quantile_us(0.5), Some(50.0));
        assert_eq!(h.quantile_us(0.95), Some(95.0));
        assert_eq!(h.quantile_us(0.951), Some(96.0), "rank ceil(95.1) = 96");
        assert_eq!(h.quantile_us(0.0), Some(1.0), "rank at least 1");
        assert_eq!(h.quantile_us(1.0), Some(100.0));
    }

    #[test]
    fn wide_buckets_report_their_midpoint_within_the_values_seen() {
        let mut h = Histogram::default();
        // 1,000,000 µs lies in [999,424, 1,015,808): 2^19 = 524,288 split in 64 of 8,192.
        h.record(1_000_000);
        assert_eq!(h.quantile_us(0.5), Some(1_000_000.0), "one value: clamped to it");
        h.record(1_003_000);
        h.record(1_010_000);
        let (low, width) = bounds(index(1_000_000));
        assert_eq!((low, width), (999_424, 8_192));
        assert_eq!(index(1_003_000), index(1_000_000));
        assert_eq!(h.quantile_us(0.5), Some(1_003_519.5), "rank 2 of 3: the midpoint of its bucket");
        // Rank 3 lies in [1,007,616, 1,015,808), whose midpoint is above the largest value seen.
        assert_eq!(h.quantile_ms(1.0), Some(1_010.0));
        // A value past the range counts as the largest kept, in the last bucket
        // [1,065,353,216, 1,073,741,824).
        h.record(u64::MAX);
        assert_eq!(bounds(BUCKETS - 1), (1_065_353_216, 8_388_608));
        assert_eq!(h.quantile_us(1.0), Some(1_069_547_519.5));
        assert_eq!(h.count(), 4);
    }

    #[test]
    fn every_percentile_within_one_128th_of_the_exact_one() {
        // A deterministic spread from 1 ms to 10 minutes.
        let values: Vec<u64> = (0..20_000u64).map(|i| 1_000 + (i * i * 7_919) % 600_000_000).collect();
        let mut h = Histogram::default();
        values.iter().for_each(|v| h.record(*v));
        let mut sorted = values.clone();
        sorted.sort_unstable();
        for q in [0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999] {
            let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
            let exact = sorted[rank - 1] as f64;
            let got = h.quantile_us(q).unwrap();
            assert!((got - exact).abs() <= exact / 128.0, "q {q}: {got} vs {exact}");
        }
    }
}
