//! A log-bucketed latency histogram with no dependency (HDR-style).
//!
//! Values are nanoseconds. Values below 64 have a bucket each; above, every power of
//! two is split into 32 linear sub-buckets, so a reported percentile is within about
//! 3 % of the true value. The maximum is tracked exactly. Recording is an index
//! computation and an increment; histograms of several workers merge by addition.

/// Linear sub-buckets per power of two (a power of two itself).
const SUB: u64 = 32;
const SUB_BITS: u32 = 5;
/// Enough groups for every u64.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// Counts of values in log-spaced buckets.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    max: u64,
    min: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram { counts: vec![0; BUCKETS], total: 0, sum: 0, max: 0, min: u64::MAX }
    }

    fn index(value: u64) -> usize {
        if value < 2 * SUB {
            return value as usize;
        }
        let msb = 63 - value.leading_zeros(); // >= SUB_BITS + 1
        let shift = msb - SUB_BITS;
        // (value >> shift) is in [SUB, 2 * SUB).
        (shift as usize + 1) * SUB as usize + ((value >> shift) - SUB) as usize
    }

    /// The highest value that falls in bucket `index`.
    fn upper(index: usize) -> u64 {
        let index = index as u64;
        if index < 2 * SUB {
            return index;
        }
        let shift = index / SUB - 1;
        let sub = index % SUB + SUB;
        let up = (u128::from(sub + 1) << shift) - 1;
        up.min(u128::from(u64::MAX)) as u64
    }

    pub fn record(&mut self, value: u64) {
        self.counts[Self::index(value)] += 1;
        self.total += 1;
        self.sum += u128::from(value);
        self.max = self.max.max(value);
        self.min = self.min.min(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        self.min = self.min.min(other.min);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` (0..=1): the upper edge of the bucket holding the
    /// rank-`ceil(q * count)` value, never above the maximum. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..1_000_000u64).step_by(7).chain([u64::MAX / 2, u64::MAX]) {
            let i = Histogram::index(v);
            assert!(i >= last, "index must not decrease");
            last = i;
            let up = Histogram::upper(i);
            assert!(up >= v, "upper {up} < value {v}");
            assert!(up - v <= v / 16 + 1, "bucket of {v} too wide: {up}");
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.04, "{p50}");
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.04, "{p99}");
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.max(), 1_000_000);
        let mut other = Histogram::new();
        other.record(5);
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert_eq!(h.min(), 5);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }
}
