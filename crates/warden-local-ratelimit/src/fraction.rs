//! Envoy's `RuntimeFractionalPercent` for filter_enabled / filter_enforced.
//!
//! Instead of a random draw we spread hits evenly with a counter (exactly `numerator` of every
//! `denominator` requests), which is as fair as sampling and makes tests exact.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Fraction {
    numerator: u64,
    denominator: u64,
    seen: AtomicU64,
}

impl Fraction {
    pub fn new(numerator: u64, denominator: u64) -> Self {
        let denominator = denominator.max(1);
        Self {
            numerator: numerator.min(denominator),
            denominator,
            seen: AtomicU64::new(0),
        }
    }

    pub fn always() -> Self {
        Self::new(1, 1)
    }

    pub fn never() -> Self {
        Self::new(0, 1)
    }

    pub fn is_always(&self) -> bool {
        self.numerator == self.denominator
    }

    /// Percent, for display.
    pub fn percent(&self) -> f64 {
        self.numerator as f64 * 100.0 / self.denominator as f64
    }

    #[inline]
    pub fn sample(&self) -> bool {
        if self.numerator == self.denominator {
            return true;
        }
        if self.numerator == 0 {
            return false;
        }
        let c = self.seen.fetch_add(1, Ordering::Relaxed) % self.denominator;
        (c + 1) * self.numerator / self.denominator > c * self.numerator / self.denominator
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_proportions() {
        let f = Fraction::new(30, 100);
        let hits = (0..1000).filter(|_| f.sample()).count();
        assert_eq!(hits, 300);
        assert!((0..10).all(|_| Fraction::always().sample()));
        assert!(!(0..10).any(|_| Fraction::never().sample()));
    }
}
