//! Latency histogram buckets for the terminal chart and the JSON `Data` array.

use hdrhistogram::Histogram;

#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Microseconds, inclusive.
    pub start: u64,
    /// Microseconds, exclusive (the last bucket includes the maximum).
    pub end: u64,
    pub count: u64,
    /// Share of all values up to the end of this bucket, 0..=100.
    pub cumulative_percent: f64,
}

/// Split `[min, max]` into at most `n` buckets: geometric when the range spans more than a factor
/// of ten (so a 1 s stall does not squash everything else into one bar), linear otherwise.
pub fn buckets(hist: &Histogram<u64>, n: usize) -> Vec<Bucket> {
    if hist.is_empty() || n == 0 {
        return Vec::new();
    }
    let (min, max) = (hist.min().max(1), hist.max().max(1));
    let edges: Vec<u64> = if max <= min {
        vec![min, min + 1]
    } else if max / min > 10 {
        let ratio = (max as f64 / min as f64).powf(1.0 / n as f64);
        let mut edges: Vec<u64> = (0..n)
            .map(|i| (min as f64 * ratio.powi(i as i32)).round() as u64)
            .collect();
        edges.push(max + 1);
        edges.dedup();
        edges
    } else {
        let step = ((max - min) as f64 / n as f64).max(1.0);
        let mut edges: Vec<u64> = (0..n)
            .map(|i| min + (step * i as f64).round() as u64)
            .collect();
        edges.push(max + 1);
        edges.dedup();
        edges
    };
    let mut counts = vec![0u64; edges.len() - 1];
    for value in hist.iter_recorded() {
        let v = value.value_iterated_to().clamp(min, max);
        let i = edges.partition_point(|e| *e <= v).saturating_sub(1);
        let last = counts.len() - 1;
        counts[i.min(last)] += value.count_at_value();
    }
    let total = hist.len().max(1) as f64;
    let mut cumulative = 0;
    edges
        .windows(2)
        .zip(counts)
        .map(|(w, count)| {
            cumulative += count;
            Bucket {
                start: w[0],
                end: w[1],
                count,
                cumulative_percent: cumulative as f64 * 100.0 / total,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [100, 150, 200, 900, 1_000_000] {
            h.record(v).unwrap();
        }
        let b = buckets(&h, 10);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 5);
        assert_eq!(b.first().unwrap().start, 100);
        assert!(b.last().unwrap().end > 1_000_000);
        assert!((b.last().unwrap().cumulative_percent - 100.0).abs() < 1e-9);
        // Geometric: the stall has a bucket of its own, far from the fast ones.
        assert_eq!(b.last().unwrap().count, 1);
    }

    #[test]
    fn single_value_gives_one_bucket() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(42).unwrap();
        h.record(42).unwrap();
        let b = buckets(&h, 10);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].count, 2);
    }
}
