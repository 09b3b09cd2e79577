//! Seed 001's large IP allowlists, the same entries examples/authz/gen-allowlist.py writes
//! (x.y.z.1 in the seed's style, never 127.0.0.0/8, so a client on 127.0.0.1 is searched
//! against the whole list and denied; 127.0.0.2 is allowed). In Rust so the lab needs no
//! Python.

use std::fmt::Write;

/// `count` entries; with `mixed` every 4th is IPv6 and some are /24 and /64 prefixes.
pub fn entries(count: usize, mixed: bool) -> Vec<String> {
    let mut out = Vec::with_capacity(count + 1);
    let mut i: u64 = 0;
    while out.len() < count {
        let (a, b, c) = ((i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF);
        let hi = i >> 24;
        i += 1;
        let produced = out.len();
        if mixed && produced % 4 == 3 {
            let mut e = format!("2001:db8:{:x}:{:x}::", (i >> 16) & 0xFFFF, i & 0xFFFF);
            e.push_str(if produced % 8 == 7 { "/64" } else { "1" });
            out.push(e);
        } else {
            let first = (a + hi * 3) % 224;
            if first == 127 {
                continue;
            }
            if mixed && produced % 8 == 5 {
                out.push(format!("{first}.{b}.{c}.0/24"));
            } else {
                out.push(format!("{first}.{b}.{c}.1"));
            }
        }
    }
    out.push("127.0.0.2".into());
    out
}

/// An ALLOW AuthorizationPolicy for the ingress gateway: all entries in one rule, or one rule
/// per entry (the seed's step 5).
pub fn istio(entries: &[String], rule_per_ip: bool) -> String {
    let mut w = String::with_capacity(entries.len() * 40);
    w.push_str(
        "apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\n\
         metadata:\n  name: test\n  namespace: istio-system\n\
         spec:\n  action: ALLOW\n  selector:\n    matchLabels:\n      istio: ingressgateway\n  rules:\n",
    );
    if rule_per_ip {
        for e in entries {
            let _ = writeln!(
                w,
                "  - from:\n    - source:\n        ipBlocks:\n        - \"{e}\""
            );
        }
    } else {
        w.push_str("  - from:\n    - source:\n        ipBlocks:\n");
        for e in entries {
            let _ = writeln!(w, "        - \"{e}\"");
        }
    }
    w
}

/// nginx `geo` include lines.
pub fn nginx_geo(entries: &[String]) -> String {
    entries.iter().map(|e| format!("{e} 1;\n")).collect()
}

/// HAProxy `src -f` file.
pub fn haproxy(entries: &[String]) -> String {
    entries.iter().map(|e| format!("{e}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_gen_allowlist_py() {
        let e = entries(3, false);
        assert_eq!(e, ["0.0.0.1", "0.0.1.1", "0.0.2.1", "127.0.0.2"]);
        let m = entries(8, true);
        assert_eq!(m[3], "2001:db8:0:4::1");
        assert_eq!(m[5], "0.0.5.0/24");
        assert_eq!(m[7], "2001:db8:0:8::/64");
        assert!(entries(40_000, false)
            .iter()
            .all(|e| !e.starts_with("127.0.0.1")));
    }
}
