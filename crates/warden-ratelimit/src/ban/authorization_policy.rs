//! The ban list as an Istio `AuthorizationPolicy` with action DENY: the remote addresses of the
//! bans whose descriptor has a `remote_address` entry, in one rule's `remoteIpBlocks`, so an
//! operator can pin repeat offenders at the mesh's edge (and across restarts of the limiter).
//! A DENY policy without rules matches nothing, so an empty ban list denies no one.

use super::record::BanRecord;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Where the policy goes and what it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTarget {
    pub name: String,
    pub namespace: String,
}

impl Default for PolicyTarget {
    fn default() -> Self {
        PolicyTarget {
            name: "warden-ratelimit-bans".into(),
            // The root namespace: a policy there applies mesh-wide (Istio's default).
            namespace: "istio-system".into(),
        }
    }
}

/// The addresses to deny: each banned `remote_address` that is an IP address, once, sorted.
pub fn remote_ip_blocks<'a>(bans: impl IntoIterator<Item = &'a BanRecord>) -> Vec<String> {
    ip_blocks(
        bans.into_iter()
            .filter_map(|b| b.subject.as_ref()?.remote_address()),
    )
}

/// The clients that are IP addresses, once each, sorted (the proxy's local bans name clients
/// by address or by distinct value).
pub fn ip_blocks<'a>(clients: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let set: BTreeSet<IpAddr> = clients.into_iter().filter_map(|c| c.parse().ok()).collect();
    set.into_iter().map(|ip| ip.to_string()).collect()
}

fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The policy as YAML (`kubectl apply -f -`).
pub fn render(target: &PolicyTarget, blocks: &[String]) -> String {
    let mut out = format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: {}\n  \
         namespace: {}\n  labels:\n    app.kubernetes.io/managed-by: warden-ratelimit\nspec:\n  \
         action: DENY\n",
        quote(&target.name),
        quote(&target.namespace)
    );
    if blocks.is_empty() {
        out.push_str("  rules: []\n");
        return out;
    }
    out.push_str("  rules:\n  - from:\n    - source:\n        remoteIpBlocks:\n");
    for block in blocks {
        out.push_str(&format!("        - {}\n", quote(block)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_become_blocks() {
        let blocks = ip_blocks([
            "203.0.113.9",
            "user-1",
            "203.0.113.9",
            "2001:db8::1",
            "10.0.0.1",
        ]);
        assert_eq!(blocks, ["10.0.0.1", "203.0.113.9", "2001:db8::1"]);
    }
    use crate::ban::record::BanSubject;
    use crate::ban::schedule::BanState;

    fn ban(entries: &[(&str, &str)]) -> BanRecord {
        BanRecord {
            key: "k".into(),
            state: BanState::default(),
            subject: Some(BanSubject {
                domain: "d".into(),
                entries: entries
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
                rule: "d.remote_address".into(),
            }),
        }
    }

    #[test]
    fn only_remote_addresses_that_are_ips() {
        let bans = [
            ban(&[("remote_address", "10.0.0.2")]),
            ban(&[("remote_address", "10.0.0.1"), ("path", "/login")]),
            ban(&[("remote_address", "10.0.0.2")]),
            ban(&[("remote_address", "2001:db8::1")]),
            ban(&[("remote_address", "not-an-ip")]),
            ban(&[("user", "alice")]),
        ];
        assert_eq!(
            remote_ip_blocks(&bans),
            vec!["10.0.0.1", "10.0.0.2", "2001:db8::1"]
        );
    }

    #[test]
    fn yaml_with_and_without_bans() {
        let target = PolicyTarget::default();
        let yaml = render(&target, &["10.0.0.1".into()]);
        assert!(yaml.contains("action: DENY"), "{yaml}");
        assert!(
            yaml.contains("remoteIpBlocks:\n        - \"10.0.0.1\"\n"),
            "{yaml}"
        );
        let empty = render(&target, &[]);
        assert!(empty.contains("rules: []"), "{empty}");
        assert!(!empty.contains("remoteIpBlocks"), "{empty}");
    }
}
