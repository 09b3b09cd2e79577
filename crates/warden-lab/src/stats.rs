//! The benches' statistics (bench/lib/paired.py), in Rust: the median of per-pair ratios, its
//! bootstrap 90% interval with a fixed seed (the same numbers always give the same interval),
//! and whether a difference is within the noise floor (one server measured against itself).

/// Median of `values` (mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Bootstrap 90% interval of the median of `ratios`: 2000 resamples with replacement, the 5th
/// and 95th percentiles of their medians (paired.py's `interval`).
pub fn interval(ratios: &[f64]) -> (f64, f64) {
    if ratios.is_empty() {
        return (0.0, 0.0);
    }
    let mut rng = fastrand::Rng::with_seed(1);
    let mut boot: Vec<f64> = (0..2000)
        .map(|_| {
            let sample: Vec<f64> = (0..ratios.len())
                .map(|_| ratios[rng.usize(..ratios.len())])
                .collect();
            median(&sample)
        })
        .collect();
    boot.sort_by(f64::total_cmp);
    let lo = boot[(0.05 * boot.len() as f64) as usize];
    let hi = boot[(0.95 * boot.len() as f64) as usize - 1];
    (lo, hi)
}

/// Whether a ratio's difference from 1.0 is within noise: its interval contains 1.0, or it is
/// no farther from 1.0 than the noise floor's own median plus half its interval (how far two
/// back-to-back runs of the same server land apart here).
pub fn within_noise(median: f64, lo: f64, hi: f64, noise: Option<(f64, f64, f64)>) -> bool {
    if lo <= 1.0 && hi >= 1.0 {
        return true;
    }
    match noise {
        Some((n_med, n_lo, n_hi)) => {
            let spread = (n_med - 1.0).abs() + (n_hi - n_lo) / 2.0;
            (median - 1.0).abs() <= spread
        }
        None => false,
    }
}

/// PASS / FAIL / TIE of a ratio against a goal, as paired.py words it: PASS when the whole
/// interval is on the good side, FAIL when all of it is on the bad side, TIE otherwise.
pub fn verdict(lo: f64, hi: f64, goal: f64, higher_is_better: bool) -> &'static str {
    let (good, bad) = if higher_is_better {
        (lo >= goal, hi < goal)
    } else {
        (hi <= goal, lo > goal)
    };
    if good {
        "PASS"
    } else if bad {
        "FAIL"
    } else {
        "TIE (within noise)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn interval_brackets_the_median_and_is_repeatable() {
        let r = [0.95, 1.02, 0.98, 1.01, 0.97, 1.04, 0.99, 1.0];
        let (lo, hi) = interval(&r);
        assert!(lo <= median(&r) && median(&r) <= hi);
        assert_eq!((lo, hi), interval(&r));
        assert_eq!(interval(&[0.5]), (0.5, 0.5));
    }

    #[test]
    fn noise_judgement() {
        assert!(within_noise(1.02, 0.98, 1.05, None));
        assert!(!within_noise(0.8, 0.75, 0.85, None));
        assert!(within_noise(0.93, 0.91, 0.95, Some((1.0, 0.9, 1.1))));
        assert!(!within_noise(0.5, 0.45, 0.55, Some((1.0, 0.9, 1.1))));
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(0.99, 1.05, 0.98, true), "PASS");
        assert_eq!(verdict(0.8, 0.9, 0.98, true), "FAIL");
        assert_eq!(verdict(0.95, 1.0, 0.98, true), "TIE (within noise)");
        assert_eq!(verdict(0.5, 0.6, 0.64, false), "PASS");
    }
}
