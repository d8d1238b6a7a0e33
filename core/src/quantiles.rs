//! Latency quantiles for `stats`: every value kept while a group holds at most `limit` of
//! them (exact nearest-rank percentiles), then a DDSketch (relative error at most
//! [`RELATIVE_ACCURACY`] at each rank); count, min, max and the sum in integer nanoseconds
//! are exact always, so merging partials in any order gives the same figures.
//!
//! The sketch is the `ddsketch` package's `DDSketch` (logarithmic mapping, unbounded dense
//! stores) computed the way that package computes it: the same libm calls in the same
//! order for a key and a bucket's value, counts as floats, the sum of values added in
//! arrival order. So a sketch made here and one made by the Python library from the same
//! values have the same bins, and the state `stats` ships between Spark tasks
//! (`analyzer/sinks/stats.py`, `GroupStats.to_state`) reads the same either way; the Python
//! tests compare the two.

use std::collections::BTreeMap;

/// The sketch's relative accuracy (1 %).
pub const RELATIVE_ACCURACY: f64 = 0.01;
/// Values kept exactly before a group switches to the sketch.
pub const EXACT_LIMIT: usize = 1000;

/// DDSketch's logarithmic key mapping (offset 0), as `ddsketch.mapping.LogarithmicMapping`.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    multiplier: f64,
    gamma: f64,
    /// the smallest value told apart from zero
    min_possible: f64,
}

impl Mapping {
    fn new(relative_accuracy: f64) -> Mapping {
        let mantissa = 2.0 * relative_accuracy / (1.0 - relative_accuracy);
        let gamma = 1.0 + mantissa;
        Mapping {
            multiplier: (1.0 / mantissa.ln_1p()) * 2f64.ln(),
            gamma,
            min_possible: f64::MIN_POSITIVE * gamma,
        }
    }

    /// The bin of a value > `min_possible` (Python: `math.ceil(math.log(v, 2) * m)`).
    fn key(&self, v: f64) -> i64 {
        ((v.ln() / 2f64.ln()) * self.multiplier).ceil() as i64
    }

    /// The value a bin stands for.
    fn value(&self, key: i64) -> f64 {
        2f64.powf(key as f64 / self.multiplier) * (2.0 / (1.0 + self.gamma))
    }
}

/// A dense store's non-empty bins (key -> count) and their total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Store {
    pub bins: BTreeMap<i64, f64>,
    pub count: f64,
}

impl Store {
    /// `n` more in bin `key`.
    pub fn add(&mut self, key: i64, n: f64) {
        *self.bins.entry(key).or_insert(0.0) += n;
        self.count += n;
    }

    fn merge(&mut self, o: &Store) {
        for (&k, &n) in &o.bins {
            self.add(k, n);
        }
    }

    /// `DenseStore.key_at_rank`: the first bin whose running count passes `rank`.
    fn key_at_rank(&self, rank: f64, lower: bool) -> i64 {
        let mut running = 0.0;
        for (&k, &n) in &self.bins {
            running += n;
            if (lower && running > rank) || (!lower && running >= rank + 1.0) {
                return k;
            }
        }
        self.bins.keys().next_back().copied().unwrap_or(0)
    }
}

/// A DDSketch: positive and negative stores, the values too close to zero to tell apart,
/// and its own count and sum (floats, as the Python library keeps them). The default is
/// the empty sketch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    pub positive: Store,
    pub negative: Store,
    pub zero: f64,
    pub count: f64,
    pub sum: f64,
}

impl Sketch {
    /// A sketch from its state; its count is its stores' and its zero count.
    pub fn from_parts(positive: Store, negative: Store, zero: f64, sum: f64) -> Sketch {
        let count = positive.count + negative.count + zero;
        Sketch {
            positive,
            negative,
            zero,
            count,
            sum,
        }
    }

    fn add(&mut self, m: &Mapping, v: f64) {
        if v > m.min_possible {
            self.positive.add(m.key(v), 1.0);
        } else if v < -m.min_possible {
            self.negative.add(m.key(-v), 1.0);
        } else {
            self.zero += 1.0;
        }
        self.count += 1.0;
        self.sum += v;
    }

    fn merge(&mut self, o: &Sketch) {
        if o.count == 0.0 {
            return;
        }
        if self.count == 0.0 {
            *self = o.clone();
            return;
        }
        self.positive.merge(&o.positive);
        self.negative.merge(&o.negative);
        self.zero += o.zero;
        self.count += o.count;
        self.sum += o.sum;
    }

    /// `DDSketch.get_quantile_value` (q in [0, 1], a sketch not empty).
    fn quantile_value(&self, m: &Mapping, q: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&q) || self.count == 0.0 {
            return None;
        }
        let rank = q * (self.count - 1.0);
        let neg = self.negative.count;
        if rank < neg {
            let key = self.negative.key_at_rank(neg - rank - 1.0, false);
            Some(-m.value(key))
        } else if rank < self.zero + neg {
            Some(0.0)
        } else {
            Some(m.value(self.positive.key_at_rank(rank - self.zero - neg, true)))
        }
    }
}

/// 0-based index of the nearest-rank q-quantile of n sorted values.
pub fn nearest_rank_index(q: f64, n: usize) -> usize {
    let i = (q * n as f64 - 1e-9).ceil() as i64 - 1;
    (i.max(0) as usize).min(n.saturating_sub(1))
}

/// A value in ms as integer nanoseconds (Python: `round(v * 1e6)`, halves to even).
pub fn to_ns(v: f64) -> i128 {
    (v * 1e6).round_ties_even() as i128
}

/// Exact values up to `limit`, then a sketch; exact count, min, max and sum in ns always.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantiles {
    /// the values in arrival order while exact; None once they went to the sketch
    pub values: Option<Vec<f64>>,
    pub sketch: Option<Sketch>,
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub sum_ns: i128,
    pub limit: usize,
}

impl Quantiles {
    pub fn new(limit: usize) -> Quantiles {
        Quantiles {
            values: Some(Vec::new()),
            sketch: None,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum_ns: 0,
            limit,
        }
    }

    fn mapping() -> Mapping {
        Mapping::new(RELATIVE_ACCURACY)
    }

    pub fn exact(&self) -> bool {
        self.values.is_some()
    }

    /// Add values (ms), in arrival order.
    pub fn extend(&mut self, vs: &[f64]) {
        if vs.is_empty() {
            return;
        }
        self.count += vs.len() as u64;
        for &v in vs {
            if v < self.min {
                self.min = v;
            }
            if v > self.max {
                self.max = v;
            }
            self.sum_ns += to_ns(v);
        }
        match &mut self.values {
            Some(values) => {
                values.extend_from_slice(vs);
                if values.len() > self.limit {
                    self.switch_to_sketch();
                }
            }
            None => self.fold(vs),
        }
    }

    fn switch_to_sketch(&mut self) {
        let values = self.values.take().unwrap_or_default();
        self.sketch = Some(Sketch::default());
        self.fold(&values);
    }

    fn fold(&mut self, vs: &[f64]) {
        let m = Self::mapping();
        let sk = self.sketch.get_or_insert_with(Sketch::default);
        for &v in vs {
            sk.add(&m, v);
        }
    }

    pub fn merge(&mut self, o: &Quantiles) {
        if o.count == 0 {
            return;
        }
        self.count += o.count;
        if o.min < self.min {
            self.min = o.min;
        }
        if o.max > self.max {
            self.max = o.max;
        }
        self.sum_ns += o.sum_ns;
        if let (Some(mine), Some(theirs)) = (&mut self.values, &o.values) {
            if mine.len() + theirs.len() <= self.limit {
                mine.extend_from_slice(theirs);
                return;
            }
        }
        if self.values.is_some() {
            self.switch_to_sketch();
        }
        match (&o.values, &o.sketch) {
            (Some(theirs), _) => self.fold(theirs),
            (None, Some(sk)) => self.sketch.get_or_insert_with(Sketch::default).merge(sk),
            (None, None) => {}
        }
    }

    /// The nearest-rank q-quantile of each of `qs`: exact while exact, else from the sketch
    /// (its lowest and highest ranks are the exact min and max; others clamped to them).
    pub fn quantiles(&self, qs: &[f64]) -> Option<Vec<f64>> {
        if self.count == 0 {
            return None;
        }
        if let Some(values) = &self.values {
            let mut sorted = values.clone();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            return Some(
                qs.iter()
                    .map(|&q| sorted[nearest_rank_index(q, sorted.len())])
                    .collect(),
            );
        }
        Some(qs.iter().map(|&q| self.sketch_quantile(q)).collect())
    }

    fn sketch_quantile(&self, q: f64) -> f64 {
        let Some(sk) = &self.sketch else {
            return self.max;
        };
        let n = sk.count.round_ties_even() as usize;
        let k = nearest_rank_index(q, n);
        if k == 0 {
            return self.min;
        }
        if k >= n.saturating_sub(1) {
            return self.max;
        }
        // DDSketch finds rank r = q' * (n - 1) as the first value whose running count
        // exceeds r: aiming r at k + 0.5 hits index k
        let qq = if n <= 1 {
            1.0
        } else {
            ((k as f64 + 0.5) / (n - 1) as f64).min(1.0)
        };
        match sk.quantile_value(&Self::mapping(), qq) {
            Some(v) => v.max(self.min).min(self.max),
            None => self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles_are_nearest_rank() {
        let mut q = Quantiles::new(EXACT_LIMIT);
        let vs: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        q.extend(&vs);
        assert!(q.exact());
        assert_eq!(
            q.quantiles(&[0.5, 0.9, 0.99, 0.999]).unwrap(),
            vec![50.0, 90.0, 99.0, 100.0]
        );
        assert_eq!(
            (q.count, q.min, q.max, q.sum_ns),
            (100, 1.0, 100.0, 5_050_000_000)
        );
        assert_eq!(Quantiles::new(3).quantiles(&[0.5]), None);
    }

    #[test]
    fn the_sketch_takes_over_past_the_limit_within_its_accuracy() {
        let mut q = Quantiles::new(10);
        let vs: Vec<f64> = (1..=10_000).map(|i| f64::from(i) * 0.01).collect();
        q.extend(&vs[..10]);
        assert!(q.exact());
        q.extend(&vs[10..11]);
        assert!(!q.exact());
        q.extend(&vs[11..]);
        let got = q.quantiles(&[0.0, 0.5, 0.99, 1.0]).unwrap();
        assert_eq!(got[0], 0.01);
        assert_eq!(got[3], 100.0);
        assert!((got[1] - 50.0).abs() <= 0.5 + 1e-9, "{got:?}");
        assert!((got[2] - 99.0).abs() <= 0.99 + 1e-9, "{got:?}");
    }

    #[test]
    fn merging_in_any_split_gives_one_accumulators_figures() {
        let vs: Vec<f64> = (0..3000)
            .map(|i| ((i * 7919) % 1000) as f64 * 0.37 - 20.0)
            .collect();
        let mut one = Quantiles::new(500);
        one.extend(&vs);
        for cut in [0, 100, 499, 500, 1700, 3000] {
            let (mut a, mut b) = (Quantiles::new(500), Quantiles::new(500));
            a.extend(&vs[..cut]);
            b.extend(&vs[cut..]);
            a.merge(&b);
            assert_eq!(a.count, one.count);
            assert_eq!(a.sum_ns, one.sum_ns);
            assert_eq!((a.min, a.max), (one.min, one.max));
            let (sa, so) = (a.sketch.unwrap(), one.sketch.clone().unwrap());
            assert_eq!(sa.positive, so.positive);
            assert_eq!(sa.negative, so.negative);
            assert_eq!((sa.zero, sa.count), (so.zero, so.count));
        }
    }

    #[test]
    fn values_too_close_to_zero_count_as_zero() {
        let mut q = Quantiles::new(0);
        q.extend(&[0.0, -0.0, 1e-310, -1e-310, 2.0, -3.0]);
        let sk = q.sketch.as_ref().unwrap();
        assert_eq!(
            (sk.zero, sk.positive.count, sk.negative.count),
            (4.0, 1.0, 1.0)
        );
        assert_eq!(q.quantiles(&[0.0, 1.0]).unwrap(), vec![-3.0, 2.0]);
    }

    #[test]
    fn ns_round_halves_to_even() {
        assert_eq!(to_ns(0.0000005), 0);
        assert_eq!(to_ns(0.0000015), 2);
        assert_eq!(to_ns(1.25), 1_250_000);
        assert_eq!(to_ns(-2.5e-6), -2);
    }
}
