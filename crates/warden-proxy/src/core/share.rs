//! Percent shares drawn per request (fault injection, mirroring), as Envoy's
//! `runtime_fraction`: each request draws independently.

/// Whether a request draws a share of `share` percent (0..=100).
pub fn draws(share: f64) -> bool {
    share >= 100.0 || fastrand::f64() * 100.0 < share
}

#[cfg(test)]
mod tests {
    use super::draws;

    #[test]
    fn bounds_are_exact() {
        for _ in 0..1000 {
            assert!(draws(100.0));
            assert!(!draws(0.0));
        }
    }
}
