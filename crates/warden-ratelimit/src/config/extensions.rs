//! Which warden extensions a config uses: envoyproxy/ratelimit refuses these files (its key
//! check says `config error, unknown key '<key>'`), so `warden ratelimit --check` and every
//! load say so.

use super::model::{DescriptorConfig, RlsConfig};
use super::parse::composite;

/// One line per use: `'<composite key>': <extension> (<what it does>)`.
pub fn warden_extensions(config: &RlsConfig) -> Vec<String> {
    let mut out = Vec::new();
    walk(&config.domain, &config.descriptors, &mut out);
    out
}

fn walk(parent: &str, descriptors: &[DescriptorConfig], out: &mut Vec<String>) {
    for d in descriptors {
        let key = format!("{parent}.{}", composite(d));
        if d.ban.is_some() {
            out.push(format!(
                "'{key}': ban (escalating bans; unknown to envoyproxy/ratelimit)"
            ));
        }
        if d.rate_limit.as_ref().is_some_and(|r| r.algorithm.is_some()) {
            out.push(format!(
                "'{key}': rate_limit.algorithm (unknown to envoyproxy/ratelimit)"
            ));
        }
        walk(&key, &d.descriptors, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    #[test]
    fn lists_bans_and_algorithms() {
        let config = parse_config(
            "c.yaml",
            "domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
    ban: {durations: [2m], forget_after: 1h}
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 2}
",
        )
        .expect("config");
        assert_eq!(
            warden_extensions(&config),
            vec![
                "'d.remote_address': ban (escalating bans; unknown to envoyproxy/ratelimit)",
                "'d.remote_address.path_/login': rate_limit.algorithm (unknown to envoyproxy/ratelimit)",
            ]
        );
    }
}
