//! Tables of (policies, request, expected decision) for every AuthorizationPolicy rule warden
//! implements. Policies are written as users write them and loaded by warden-config.

use http::HeaderMap;
use std::collections::BTreeMap;
use std::net::IpAddr;
use warden_authz::{Authorizer, Decision, HttpAttrs, ProxyScope, TcpAttrs};

fn scope() -> ProxyScope {
    ProxyScope {
        namespace: "default".into(),
        root_namespace: "istio-system".into(),
        labels: BTreeMap::from([("istio".to_string(), "ingressgateway".to_string())]),
        gateway_names: vec!["ingressgateway".into()],
    }
}

fn compile_with(yaml: &str, scope: &ProxyScope) -> Authorizer {
    let loaded = warden_config::load_str("test.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    Authorizer::compile(&loaded.set.authorization_policies, scope).unwrap_or_else(|problems| {
        panic!(
            "{}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

fn compile(yaml: &str) -> Authorizer {
    compile_with(yaml, &scope())
}

/// Every problem text of a policy set that must not compile.
fn errors(yaml: &str) -> String {
    let loaded = warden_config::load_str("test.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    match Authorizer::compile(&loaded.set.authorization_policies, &scope()) {
        Ok(_) => panic!("expected errors for:\n{yaml}"),
        Err(problems) => problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// A request; fields default to a plain GET from 10.0.0.1 to 127.0.0.1:8080.
#[derive(Clone)]
struct Req {
    peer: &'static str,
    client: Option<&'static str>,
    dest: &'static str,
    port: u16,
    host: &'static str,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    sni: Option<&'static str>,
    principal: Option<&'static str>,
    /// A verified JWT's payload (`iss/sub` is its principal).
    jwt: Option<serde_json::Value>,
}

fn req() -> Req {
    Req {
        peer: "10.0.0.1",
        client: None,
        dest: "127.0.0.1",
        port: 8080,
        host: "example.com",
        method: "GET",
        path: "/",
        headers: vec![],
        sni: None,
        principal: None,
        jwt: None,
    }
}

impl Req {
    fn peer(mut self, p: &'static str) -> Self {
        self.peer = p;
        self
    }
    fn client(mut self, c: &'static str) -> Self {
        self.client = Some(c);
        self
    }
    fn port(mut self, p: u16) -> Self {
        self.port = p;
        self
    }
    fn host(mut self, h: &'static str) -> Self {
        self.host = h;
        self
    }
    fn method(mut self, m: &'static str) -> Self {
        self.method = m;
        self
    }
    fn path(mut self, p: &'static str) -> Self {
        self.path = p;
        self
    }
    fn header(mut self, k: &'static str, v: &'static str) -> Self {
        self.headers.push((k, v));
        self
    }
    fn sni(mut self, s: &'static str) -> Self {
        self.sni = Some(s);
        self
    }
    fn principal(mut self, p: &'static str) -> Self {
        self.principal = Some(p);
        self
    }
    fn jwt(mut self, claims: serde_json::Value) -> Self {
        self.jwt = Some(claims);
        self
    }
    fn dest(mut self, d: &'static str) -> Self {
        self.dest = d;
        self
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|_| panic!("bad ip {s}"))
    }

    fn http(&self, a: &Authorizer) -> Decision {
        let mut headers = HeaderMap::new();
        for (k, v) in &self.headers {
            headers.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let claims = self
            .jwt
            .as_ref()
            .and_then(|j| j.as_object().cloned())
            .unwrap_or_default();
        let principal = format!(
            "{}/{}",
            claims.get("iss").and_then(|v| v.as_str()).unwrap_or(""),
            claims.get("sub").and_then(|v| v.as_str()).unwrap_or("")
        );
        a.check_http(&HttpAttrs {
            direct_peer: Self::ip(self.peer),
            client_ip: Self::ip(self.client.unwrap_or(self.peer)),
            dest_ip: Self::ip(self.dest),
            dest_port: self.port,
            host: self.host,
            method: self.method,
            path: self.path,
            headers: &headers,
            sni: self.sni,
            principal: self.principal,
            request_auth: self.jwt.as_ref().map(|_| warden_authz::RequestAuth {
                principal: &principal,
                claims: &claims,
            }),
        })
    }

    fn tcp(&self, a: &Authorizer) -> Decision {
        a.check_tcp(&TcpAttrs {
            direct_peer: Self::ip(self.peer),
            client_ip: Self::ip(self.client.unwrap_or(self.peer)),
            dest_ip: Self::ip(self.dest),
            dest_port: self.port,
            sni: self.sni,
            principal: self.principal,
        })
    }
}

/// `(allow, policy label)` in one comparable value.
fn verdict(d: &Decision) -> (bool, String) {
    (d.allow, d.policy_label().to_string())
}

const ALLOW: (bool, &str) = (true, "");
const MISS: (bool, &str) = (false, "none");

fn check_table(yaml: &str, cases: &[(Req, (bool, &str))]) {
    let a = compile(yaml);
    for (i, (r, (allow, label))) in cases.iter().enumerate() {
        let got = verdict(&r.http(&a));
        assert_eq!(
            got,
            (*allow, label.to_string()),
            "case {i} (peer {}, path {})\n{yaml}",
            r.peer,
            r.path
        );
    }
}

fn policy(name: &str, ns: &str, action: &str, rules: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  action: {action}\n  rules:\n{rules}\n---\n"
    )
}

#[test]
fn seed_001_allowlist_ip_blocks() {
    let yaml = r#"
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: test, namespace: istio-system}
spec:
  action: ALLOW
  selector: {matchLabels: {istio: ingressgateway}}
  rules:
  - from:
    - source:
        ipBlocks: [0.0.0.1, 0.0.1.1, 127.0.0.2, 10.1.0.0/16]
"#;
    check_table(
        yaml,
        &[
            (req().peer("127.0.0.2"), ALLOW),
            (req().peer("127.0.0.1"), MISS),
            (req().peer("10.1.200.3"), ALLOW),
            (req().peer("10.2.0.1"), MISS),
            (req().peer("0.0.1.1"), ALLOW),
            // IPv4-mapped IPv6 peers match IPv4 blocks.
            (req().peer("::ffff:127.0.0.2"), ALLOW),
            (req().peer("::1"), MISS),
            // ipBlocks is the TCP peer: a client address from X-Forwarded-For does not count.
            (req().peer("127.0.0.1").client("127.0.0.2"), MISS),
        ],
    );
}

#[test]
fn twenty_thousand_one_ip_rules_behave_like_one_list() {
    let mut rules = String::new();
    for i in 0..20_000u32 {
        rules.push_str(&format!(
            "  - from: [{{source: {{ipBlocks: [\"10.{}.{}.1\"]}}}}]\n",
            i >> 8,
            i & 255
        ));
    }
    let yaml = policy("many", "istio-system", "ALLOW", &rules);
    let a = compile(&yaml);
    assert_eq!(a.stats().rules, 20_000);
    assert!(req().peer("10.78.31.1").http(&a).allow); // i = 78*256+31
    assert!(req().peer("10.0.0.1").http(&a).allow);
    assert!(!req().peer("10.78.31.2").http(&a).allow);
    assert!(!req().peer("10.200.0.1").http(&a).allow); // i = 51200 > 20k
}

#[test]
fn ipv6_and_not_ip_blocks() {
    let rules = r#"  - from:
    - source:
        ipBlocks: ["2001:db8::/32", 10.0.0.0/8]
        notIpBlocks: ["2001:db8:bad::/48", 10.6.6.6]"#;
    check_table(
        &policy("v6", "default", "ALLOW", rules),
        &[
            (req().peer("2001:db8::1"), ALLOW),
            (req().peer("2001:db8:bad::1"), MISS),
            (req().peer("2001:db9::1"), MISS),
            (req().peer("10.6.6.7"), ALLOW),
            (req().peer("10.6.6.6"), MISS),
        ],
    );
    // Only notIpBlocks: everything except the listed blocks.
    let rules = "  - from: [{source: {notIpBlocks: [\"2001:db8::/32\"]}}]";
    check_table(
        &policy("not-only", "default", "ALLOW", rules),
        &[
            (req().peer("2001:db8::1"), MISS),
            (req().peer("2001:db9::1"), ALLOW),
            (req().peer("1.2.3.4"), ALLOW),
        ],
    );
}

#[test]
fn remote_ip_blocks_use_the_trusted_client_address() {
    let rules = r#"  - from:
    - source: {remoteIpBlocks: [203.0.113.0/24], notRemoteIpBlocks: [203.0.113.9]}"#;
    check_table(
        &policy("remote", "default", "ALLOW", rules),
        &[
            (req().peer("10.0.0.1").client("203.0.113.5"), ALLOW),
            (req().peer("10.0.0.1").client("203.0.113.9"), MISS),
            (req().peer("203.0.113.5").client("10.0.0.1"), MISS),
        ],
    );
}

#[test]
fn deny_takes_precedence_over_allow_and_names_the_policy() {
    let yaml = policy("allow-all", "default", "ALLOW", "  - {}")
        + &policy(
            "block",
            "default",
            "DENY",
            "  - from: [{source: {ipBlocks: [192.0.2.0/24]}}]",
        )
        + &policy(
            "block-admin",
            "istio-system",
            "DENY",
            "  - to: [{operation: {paths: [\"/admin*\"]}}]",
        );
    check_table(
        &yaml,
        &[
            (req(), ALLOW),
            (
                req().peer("192.0.2.7"),
                (false, "ns[default]-policy[block]-rule[0]"),
            ),
            (
                req().path("/admin/x"),
                (false, "ns[istio-system]-policy[block-admin]-rule[0]"),
            ),
            // Both DENY rules match: the first in Envoy's name order is reported.
            (
                req().peer("192.0.2.7").path("/admin"),
                (false, "ns[default]-policy[block]-rule[0]"),
            ),
        ],
    );
}

#[test]
fn no_policy_allows_empty_spec_allows_nothing_and_empty_rule_matches_all() {
    let none = compile("");
    assert!(none.is_empty());
    assert_eq!(verdict(&req().http(&none)), (true, String::new()));

    let empty_spec = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: nothing}\nspec: {}\n";
    check_table(
        empty_spec,
        &[(req(), MISS), (req().peer("127.0.0.2"), MISS)],
    );
    let no_spec =
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: nothing}\n";
    check_table(no_spec, &[(req(), MISS)]);

    check_table(
        &policy("all", "default", "ALLOW", "  - {}"),
        &[(req(), ALLOW)],
    );
    check_table(
        &policy("deny-all", "default", "DENY", "  - {}"),
        &[(req(), (false, "ns[default]-policy[deny-all]-rule[0]"))],
    );
    // A DENY policy with no rules denies nothing.
    let deny_nothing = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: d}\nspec: {action: DENY}\n";
    check_table(deny_nothing, &[(req(), ALLOW)]);
}

#[test]
fn fields_are_anded_values_ored_sources_ored() {
    let rules = r#"  - from:
    - source: {ipBlocks: [10.0.0.0/8], remoteIpBlocks: [1.1.1.1]}
    - source: {ipBlocks: [192.168.0.0/16]}
    to:
    - operation: {methods: [GET, HEAD], paths: [/public/*, /health]}
    - operation: {ports: ["9090"]}"#;
    check_table(
        &policy("and-or", "default", "ALLOW", rules),
        &[
            (
                req().peer("10.0.0.1").client("1.1.1.1").path("/health"),
                ALLOW,
            ),
            (
                req()
                    .peer("10.0.0.1")
                    .client("1.1.1.1")
                    .method("HEAD")
                    .path("/public/a"),
                ALLOW,
            ),
            (
                req().peer("10.0.0.1").client("1.1.1.2").path("/health"),
                MISS,
            ),
            (req().peer("192.168.3.3").path("/health"), ALLOW),
            (
                req().peer("192.168.3.3").method("POST").path("/health"),
                MISS,
            ),
            (
                req()
                    .peer("192.168.3.3")
                    .method("POST")
                    .path("/x")
                    .port(9090),
                ALLOW,
            ),
            (req().peer("172.16.0.1").port(9090), MISS),
        ],
    );
}

#[test]
fn operations_hosts_ports_methods_paths_and_their_negations() {
    let rules = r#"  - to:
    - operation:
        hosts: [Example.com, "*.example.org", "api.example.net:*"]
        notHosts: [bad.example.org]
        notPorts: ["8443"]
        notMethods: [DELETE]
        notPaths: ["*.php"]"#;
    check_table(
        &policy("ops", "default", "ALLOW", rules),
        &[
            (req().host("example.com"), ALLOW),
            (req().host("EXAMPLE.COM"), ALLOW),
            // The port is part of the host value.
            (req().host("example.com:80"), MISS),
            (req().host("api.example.net:8080"), ALLOW),
            (req().host("api.example.net"), MISS),
            (req().host("a.example.org"), ALLOW),
            (req().host("bad.example.org"), MISS),
            (req().port(8443), MISS),
            (req().method("DELETE"), MISS),
            (req().method("get"), ALLOW),
            (req().path("/index.php"), MISS),
            (req().path("/index.html"), ALLOW),
        ],
    );
    let rules = "  - to: [{operation: {methods: [GET], paths: [\"*\"]}}]";
    check_table(
        &policy("present", "default", "ALLOW", rules),
        &[(req(), ALLOW), (req().method("get"), MISS)],
    );
}

#[test]
fn when_conditions() {
    let rules = r#"  - when:
    - {key: "request.headers[X-Tenant]", values: [acme, "beta-*"], notValues: [beta-bad]}
    - {key: source.ip, notValues: [10.9.0.0/16]}
    - {key: remote.ip, values: [10.0.0.0/8, "2001:db8::/32"]}
    - {key: destination.ip, values: [127.0.0.0/8]}
    - {key: destination.port, values: [8080, "8081"]}"#;
    let base = || req().header("x-tenant", "acme");
    check_table(
        &policy("when", "default", "ALLOW", rules),
        &[
            (base(), ALLOW),
            (req(), MISS),
            (req().header("X-Tenant", "beta-2"), ALLOW),
            (req().header("x-tenant", "beta-bad"), MISS),
            (req().header("x-tenant", "other"), MISS),
            // Multiple values are joined with ',' as Envoy's header matcher sees them.
            (
                req().header("x-tenant", "acme").header("x-tenant", "zzz"),
                MISS,
            ),
            (base().peer("10.9.1.1"), MISS),
            (base().peer("10.8.1.1"), ALLOW),
            (base().client("192.0.2.1"), MISS),
            (base().peer("2001:db8::5"), ALLOW),
            (base().dest("10.0.0.1"), MISS),
            (base().port(8081), ALLOW),
            (base().port(8082), MISS),
        ],
    );
    let rules = r#"  - when:
    - {key: connection.sni, values: ["*.example.com"]}
    - {key: "request.headers[x-debug]", notValues: ["*"]}"#;
    check_table(
        &policy("sni", "default", "ALLOW", rules),
        &[
            (req().sni("a.example.com"), ALLOW),
            (req(), MISS),
            (req().sni("a.example.com").header("x-debug", "1"), MISS),
        ],
    );
}

#[test]
fn dry_run_policies_only_shadow() {
    let yaml = r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: would-deny
  annotations: {istio.io/dry-run: "true"}
spec:
  action: DENY
  rules: [{from: [{source: {ipBlocks: [192.0.2.0/24]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: would-allow-only-10
  annotations: {istio.io/dry-run: "true"}
spec:
  rules: [{from: [{source: {ipBlocks: [10.0.0.0/8]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: enforced-deny
  annotations: {istio.io/dry-run: "false"}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/blocked]}}]}]
"#;
    let a = compile(yaml);
    let shadow = |r: Req| {
        let d = r.http(&a);
        (
            d.allow,
            d.shadow_denied
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(shadow(req().peer("10.0.0.1")), (true, vec![]));
    assert_eq!(
        shadow(req().peer("192.0.2.1")),
        (
            true,
            vec![
                "ns[default]-policy[would-deny]-rule[0]".to_string(),
                "none".to_string()
            ]
        )
    );
    assert_eq!(
        shadow(req().peer("172.16.0.1")),
        (true, vec!["none".to_string()])
    );
    assert_eq!(shadow(req().path("/blocked")), (false, vec![]));
}

#[test]
fn audit_marks_without_enforcing() {
    let yaml = policy(
        "audit",
        "default",
        "AUDIT",
        "  - to: [{operation: {methods: [POST]}}]",
    );
    let a = compile(&yaml);
    let d = req().method("POST").http(&a);
    assert!(d.allow && d.audit);
    let d = req().http(&a);
    assert!(d.allow && !d.audit);
}

#[test]
fn scope_namespace_selector_and_target_refs() {
    let mk = |ns: &str, extra: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: p, namespace: {ns}}}\n\
             spec:\n  action: DENY\n  rules: [{{}}]\n{extra}"
        )
    };
    let denies = |yaml: &str| !req().http(&compile(yaml)).allow;
    assert!(denies(&mk("default", "")));
    assert!(
        denies(&mk("istio-system", "")),
        "root namespace applies everywhere"
    );
    assert!(!denies(&mk("other", "")), "other namespaces do not apply");
    assert!(denies(&mk(
        "istio-system",
        "  selector: {matchLabels: {istio: ingressgateway}}"
    )));
    assert!(!denies(&mk(
        "istio-system",
        "  selector: {matchLabels: {istio: eastwest}}"
    )));
    assert!(!denies(&mk(
        "default",
        "  selector: {matchLabels: {istio: ingressgateway, extra: x}}"
    )));
    let gw =
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: ingressgateway}]";
    assert!(denies(&mk("default", gw)));
    let other = "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: other}]";
    assert!(!denies(&mk("default", other)));
    let custom = ProxyScope {
        namespace: "other".into(),
        root_namespace: "mesh-root".into(),
        ..ProxyScope::default()
    };
    assert!(!req().http(&compile_with(&mk("other", ""), &custom)).allow);
    assert!(
        req()
            .http(&compile_with(&mk("istio-system", ""), &custom))
            .allow
    );
    assert!(
        !req()
            .http(&compile_with(&mk("mesh-root", ""), &custom))
            .allow
    );
}

#[test]
fn tcp_drops_http_allow_rules_and_ignores_http_fields_in_deny_rules() {
    // ALLOW: the rule using paths is dropped, the IP-only rule stays.
    let rules = r#"  - from: [{source: {ipBlocks: [10.0.0.0/8]}}]
    to: [{operation: {paths: [/api]}}]
  - from: [{source: {ipBlocks: [192.168.0.0/16]}}]"#;
    let a = compile(&policy("tcp-allow", "default", "ALLOW", rules));
    assert!(req().peer("10.0.0.1").path("/api").http(&a).allow);
    assert!(
        !req().peer("10.0.0.1").tcp(&a).allow,
        "HTTP-only ALLOW rule must be dropped on TCP"
    );
    assert!(req().peer("192.168.1.1").tcp(&a).allow);
    // An ALLOW policy whose every rule is dropped allows nothing on TCP.
    let a = compile(&policy(
        "http-only",
        "default",
        "ALLOW",
        "  - to: [{operation: {methods: [GET]}}]",
    ));
    assert!(req().http(&a).allow);
    assert!(!req().tcp(&a).allow);

    // DENY: methods is ignored, the port still applies; so all TCP traffic to 8080 is denied.
    let a = compile(&policy(
        "tcp-deny",
        "default",
        "DENY",
        "  - to: [{operation: {methods: [POST], ports: [\"8080\"]}}]",
    ));
    assert!(req().http(&a).allow, "HTTP GET is not denied");
    assert!(!req().method("POST").http(&a).allow);
    let d = req().tcp(&a);
    assert_eq!(
        verdict(&d),
        (false, "ns[default]-policy[tcp-deny]-rule[0]".to_string())
    );
    assert!(req().port(9090).tcp(&a).allow);
    // A header condition in a DENY rule is ignored on TCP too.
    let rules = "  - when: [{key: \"request.headers[x-a]\", values: [b]}]";
    let a = compile(&policy("tcp-deny-hdr", "default", "DENY", rules));
    assert!(req().http(&a).allow);
    assert!(!req().tcp(&a).allow);
}

/// The notes `warden check` prints for rules with HTTP-only fields on a proxy serving TCP: one
/// per such rule of the policies in scope, located, saying what the rule does there.
#[test]
fn tcp_notes_say_what_http_only_rules_do_on_tcp() {
    let yaml = [
        policy(
            "allow-get",
            "default",
            "ALLOW",
            "  - to: [{operation: {methods: [GET], ports: [\"9000\"]}}]\n  - to: [{operation: {ports: [\"9001\"]}}]",
        ),
        policy(
            "deny-get",
            "default",
            "DENY",
            "  - to: [{operation: {methods: [GET]}}]",
        ),
        policy(
            "deny-get-9000",
            "default",
            "DENY",
            "  - to: [{operation: {notPaths: [/x], ports: [\"9000\"]}}]\n    when: [{key: \"request.headers[x-token]\", notValues: [admin]}, {key: source.ip, values: [10.0.0.0/8]}]",
        ),
        // One operation left with no port: every port.
        policy(
            "deny-either",
            "default",
            "DENY",
            "  - to: [{operation: {methods: [GET]}}, {operation: {ports: [\"9000\"]}}]",
        ),
        policy("elsewhere", "other", "DENY", "  - to: [{operation: {methods: [GET]}}]"),
        // A gRPC provider checks connections by the rule's other fields; an HTTP one none.
        policy("ext", "default", "CUSTOM", "  - to: [{operation: {paths: [/x]}}]")
            .replace("  action: CUSTOM\n", "  action: CUSTOM\n  provider: {name: grpc}\n"),
        policy("ext-http", "default", "CUSTOM", "  - {}")
            .replace("  action: CUSTOM\n", "  action: CUSTOM\n  provider: {name: http}\n"),
    ]
    .concat();
    let loaded = warden_config::load_str("tcp.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let notes: Vec<String> =
        warden_authz::tcp_notes(&loaded.set, &scope(), "TCP connections", &|p| p == "grpc")
            .iter()
            .map(ToString::to_string)
            .collect();
    assert_eq!(notes.len(), 6, "{notes:#?}");
    let has = |i: usize, parts: &[&str]| {
        for part in parts {
            assert!(notes[i].contains(part), "{part:?} not in {}", notes[i]);
        }
    };
    has(
        0,
        &[
            "tcp.yaml:",
            "AuthorizationPolicy/allow-get",
            "field spec.rules[0]:",
            "HTTP-only fields (methods)",
            "this ALLOW rule never matches",
        ],
    );
    has(
        1,
        &[
            "deny-get",
            "rules[0]",
            "this DENY rule matches every connection",
        ],
    );
    has(
        2,
        &[
            "deny-get-9000",
            "(notPaths, request.headers[x-token])",
            "matches by ports, source.ip alone",
        ],
    );
    has(3, &["deny-either", "matches every connection"]);
    has(
        4,
        &[
            "AuthorizationPolicy/ext)",
            "field spec.rules[0]",
            "(paths)",
            "this CUSTOM rule matches every connection",
        ],
    );
    has(
        5,
        &[
            "AuthorizationPolicy/ext-http",
            "field spec.provider.name",
            "connections are not checked",
        ],
    );
}

#[test]
fn mapped_and_v6_blocks_in_one_list() {
    let rules =
        "  - from: [{source: {ipBlocks: [\"::ffff:10.0.0.0/104\", \"fe80::/10\", \"::1\"]}}]";
    check_table(
        &policy("mixed", "default", "ALLOW", rules),
        &[
            (req().peer("10.1.2.3"), ALLOW),
            (req().peer("::ffff:10.1.2.3"), ALLOW),
            (req().peer("fe80::1"), ALLOW),
            (req().peer("::1"), ALLOW),
            (req().peer("::2"), MISS),
            (req().peer("11.0.0.1"), MISS),
        ],
    );
}

#[test]
fn invalid_and_unsupported_input_is_a_located_error() {
    let text = errors(&policy(
        "bad",
        "default",
        "ALLOW",
        "  - from: [{source: {ipBlocks: [10.0.0.1, 10.0.0.0/33, nope, \"2001:db8::/129\"]}}]",
    ));
    assert!(text.contains("test.yaml"), "{text}");
    assert!(text.contains("AuthorizationPolicy/bad"), "{text}");
    assert!(
        text.contains("spec.rules[0].from[0].source.ipBlocks[1]"),
        "{text}"
    );
    assert!(
        text.contains("spec.rules[0].from[0].source.ipBlocks[2]"),
        "{text}"
    );
    assert!(
        text.contains("spec.rules[0].from[0].source.ipBlocks[3]"),
        "{text}"
    );
    assert!(!text.contains("ipBlocks[0]"), "{text}");

    let cases = [
        (
            policy("c", "default", "CUSTOM", "  - {}"),
            "spec.provider.name",
            "must specify provider when using CUSTOM action",
        ),
        (
            policy(
                "j",
                "default",
                "ALLOW",
                "  - when: [{key: \"request.auth.claim[iss]\", values: [a]}]",
            ),
            "when[0].key",
            "request.auth.claims[NAME]",
        ),
        (
            policy(
                "w",
                "default",
                "ALLOW",
                "  - when: [{key: \"request.auth.claims[]\", values: [a]}]",
            ),
            "when[0].key",
            "unknown key",
        ),
        (
            policy(
                "w",
                "default",
                "ALLOW",
                "  - when: [{key: foo.bar, values: [a]}]",
            ),
            "when[0].key",
            "unknown condition key",
        ),
        (
            policy("w", "default", "ALLOW", "  - when: [{key: remote.ip}]"),
            "when[0]",
            "values or notValues",
        ),
        (
            policy(
                "w",
                "default",
                "ALLOW",
                "  - when: [{key: remote.ip, values: [x]}]",
            ),
            "when[0].values[0]",
            "not an IP",
        ),
        (
            policy(
                "o",
                "default",
                "ALLOW",
                "  - to: [{operation: {ports: [\"http\"]}}]",
            ),
            "operation.ports[0]",
            "port",
        ),
        (
            policy("o", "default", "ALLOW", "  - to: [{operation: {}}]"),
            "to[0].operation",
            "must not be empty",
        ),
        (
            policy("s", "default", "ALLOW", "  - from: [{source: {}}]"),
            "from[0].source",
            "must not be empty",
        ),
        (
            policy("s", "default", "ALLOW", "  - from: [{}]"),
            "from[0].source",
            "must be set",
        ),
        (
            policy(
                "t",
                "default",
                "ALLOW",
                "  - to: [{operation: {paths: [\"/a/{*}\"]}}]",
            ),
            "paths[0]",
            "template",
        ),
    ];
    for (yaml, field, message) in cases {
        let text = errors(&yaml);
        assert!(
            text.contains(field) && text.contains(message),
            "want {field} / {message}, got: {text}"
        );
    }

    let text = errors(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: d\n  annotations: {istio.io/dry-run: maybe}\nspec: {}\n",
    );
    assert!(
        text.contains(r#"metadata.annotations["istio.io/dry-run"]"#),
        "{text}"
    );
    let text = errors(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetRefs: [{kind: Service, name: x}]\n",
    );
    assert!(
        text.contains("mutually exclusive") && text.contains("spec.targetRefs[0].kind"),
        "{text}"
    );
}

#[test]
fn errors_in_policies_out_of_scope_are_still_reported_all_at_once() {
    let yaml = policy(
        "a",
        "elsewhere",
        "ALLOW",
        "  - from: [{source: {ipBlocks: [bad1]}}]",
    ) + &policy(
        "b",
        "default",
        "DENY",
        "  - from: [{source: {ipBlocks: [bad2]}}]",
    );
    let text = errors(&yaml);
    assert!(
        text.contains("AuthorizationPolicy/a") && text.contains("AuthorizationPolicy/b"),
        "{text}"
    );
}

#[test]
fn many_rules_return_the_first_matching_in_name_order() {
    // rule[10] sorts before rule[2] in Envoy's (string) name order.
    let mut rules = String::new();
    for _ in 0..11 {
        rules.push_str("  - from: [{source: {ipBlocks: [10.0.0.0/8]}}]\n");
    }
    let a = compile(&policy("nsp", "default", "DENY", &rules));
    assert_eq!(
        req().http(&a).policy_label(),
        "ns[default]-policy[nsp]-rule[0]"
    );
    let mut rules = String::new();
    for i in 0..11 {
        let net = if i == 0 { "192.0.2.0/24" } else { "10.0.0.0/8" };
        rules.push_str(&format!("  - from: [{{source: {{ipBlocks: [{net}]}}}}]\n"));
    }
    let a = compile(&policy("nsp", "default", "DENY", &rules));
    assert_eq!(
        req().http(&a).policy_label(),
        "ns[default]-policy[nsp]-rule[10]"
    );
}

#[test]
fn denial_constants_match_envoy() {
    assert_eq!(warden_authz::DENY_STATUS, 403);
    assert_eq!(warden_authz::DENY_BODY, "RBAC: access denied");
    assert_eq!(warden_authz::DENY_BODY.len(), 19);
    assert_eq!(warden_authz::DENY_CONTENT_TYPE, "text/plain");
    let a = compile(&policy(
        "x",
        "default",
        "ALLOW",
        "  - from: [{source: {ipBlocks: [1.1.1.1]}}]",
    ));
    assert_eq!(
        req().http(&a).details().as_deref(),
        Some("rbac_access_denied_matched_policy[none]")
    );
}

#[test]
fn compile_set_reports_line_numbers() {
    let yaml = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: lines}\nspec:\n  rules:\n  - from:\n    - source:\n        ipBlocks:\n        - 10.0.0.1\n        - 10.0.0.300\n";
    let loaded = warden_config::load_str("lines.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    let problems = Authorizer::compile_set(&loaded.set, &scope()).unwrap_err();
    assert_eq!(problems.len(), 1);
    let p = &problems[0];
    assert_eq!(p.location.field, "spec.rules[0].from[0].source.ipBlocks[1]");
    assert_eq!(p.location.line, Some(10), "{p}");
    assert!(p.to_string().starts_with("lines.yaml:10"), "{p}");
}

/// Rules anchored on `when` conditions (one remote.ip per rule) and rules that cannot be
/// anchored (notIpBlocks only) decide like the reference, whatever their number.
#[test]
fn rules_anchored_on_conditions_and_unanchored_rules() {
    let mut rules = String::new();
    for i in 0..2000u32 {
        rules.push_str(&format!(
            "  - when: [{{key: remote.ip, values: [\"192.0.{}.{}\"]}}, {{key: destination.port, values: [\"{}\"]}}]\n",
            i / 250,
            i % 250,
            8000 + i % 2
        ));
    }
    rules.push_str("  - from: [{source: {notIpBlocks: [0.0.0.0/0, \"::/0\"]}}]\n");
    let a = compile(&policy("conds", "default", "DENY", &rules));
    // i = 251: 192.0.1.1, port 8001.
    let d = req().client("192.0.1.1").port(8001).http(&a);
    assert_eq!(d.policy_label(), "ns[default]-policy[conds]-rule[251]");
    assert!(req().client("192.0.1.1").port(8000).http(&a).allow);
    assert!(req().client("192.0.9.1").port(8001).http(&a).allow);
    assert!(req().http(&a).allow);
}

/// Peer identities (the mTLS principal): exact, prefix/suffix and `*` (any authenticated peer);
/// namespaces from the principal; `not*` and `source.*` conditions; a request without a client
/// certificate matches no value, so it satisfies only `not` lists.
#[test]
fn principals_and_namespaces_match_the_peer_identity() {
    let client = "cluster.local/ns/default/sa/client";
    let other = "cluster.local/ns/prod/sa/api";
    check_table(
        &policy(
            "p",
            "default",
            "ALLOW",
            "  - from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]",
        ),
        &[
            (req().principal(client), ALLOW),
            (req().principal(other), MISS),
            (req(), MISS),
        ],
    );
    check_table(
        &policy(
            "any",
            "default",
            "ALLOW",
            "  - from: [{source: {principals: [\"*\"]}}]",
        ),
        &[(req().principal(other), ALLOW), (req(), MISS)],
    );
    check_table(
        &policy(
            "ns",
            "default",
            "ALLOW",
            "  - from: [{source: {namespaces: [prod], notPrincipals: [\"*/sa/admin\"]}}]",
        ),
        &[
            (req().principal(other), ALLOW),
            (req().principal("cluster.local/ns/prod/sa/admin"), MISS),
            (req().principal(client), MISS),
        ],
    );
    check_table(
        &policy(
            "deny-others",
            "default",
            "DENY",
            "  - from: [{source: {notNamespaces: [default]}}]",
        ),
        &[
            (req().principal(client), ALLOW),
            (
                req().principal(other),
                (false, "ns[default]-policy[deny-others]-rule[0]"),
            ),
            (req(), (false, "ns[default]-policy[deny-others]-rule[0]")),
        ],
    );
    check_table(
        &policy(
            "w",
            "default",
            "ALLOW",
            "  - when: [{key: source.principal, values: [\"*/sa/client\"]}, {key: source.namespace, values: [default]}]",
        ),
        &[
            (req().principal(client), ALLOW),
            (req().principal(other), MISS),
        ],
    );
    // TCP: the same fields apply (they are not HTTP-only).
    let a = compile(&policy(
        "t",
        "default",
        "ALLOW",
        "  - from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]",
    ));
    assert!(req().principal(client).tcp(&a).allow);
    assert!(!req().tcp(&a).allow);
}

/// istio.io's "Authorization with JWT" task (authz-jwt) and the "JWT authentication" task's
/// ingress policy, their rules as published: `requestPrincipals`, `notRequestPrincipals: ["*"]`,
/// the `groups` claim (a list), plus the other `request.auth.*` keys.
#[test]
fn jwt_identities_match_as_istio_documents() {
    let istio =
        serde_json::json!({"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io"});
    let groups = serde_json::json!({"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io",
        "groups": ["group1", "group2"], "scope": "scope1 scope2", "aud": ["a1", "a2"], "azp": "web",
        "nested": {"key": {"leaf": "v"}}});
    let other = serde_json::json!({"iss": "other", "sub": "x", "groups": "group1"});

    let require_jwt = policy(
        "require-jwt",
        "default",
        "ALLOW",
        "  - from:\n    - source:\n        requestPrincipals: [\"testing@secure.istio.io/testing@secure.istio.io\"]",
    );
    check_table(
        &require_jwt,
        &[
            (req(), MISS),
            (req().jwt(istio.clone()), ALLOW),
            (req().jwt(other.clone()), MISS),
        ],
    );
    let group = policy(
        "require-jwt",
        "default",
        "ALLOW",
        "  - from:\n    - source:\n        requestPrincipals: [\"testing@secure.istio.io/testing@secure.istio.io\"]\n    when:\n    - key: request.auth.claims[groups]\n      values: [\"group1\"]",
    );
    check_table(
        &group,
        &[
            (req().jwt(istio.clone()), MISS),
            (req().jwt(groups.clone()), ALLOW),
        ],
    );
    let deny_anonymous = policy(
        "frontend-ingress",
        "default",
        "DENY",
        "  - from:\n    - source:\n        notRequestPrincipals: [\"*\"]",
    );
    let denied = (false, "ns[default]-policy[frontend-ingress]-rule[0]");
    check_table(
        &deny_anonymous,
        &[(req(), denied), (req().jwt(istio.clone()), ALLOW)],
    );
    let when = |key: &str, values: &str| {
        policy(
            "w",
            "default",
            "ALLOW",
            &format!("  - when: [{{key: \"{key}\", {values}}}]"),
        )
    };
    let cases = [
        (
            "request.auth.principal",
            "values: [\"testing@*\"]",
            &groups,
            true,
        ),
        ("request.auth.principal", "values: [\"*\"]", &other, true),
        ("request.auth.audiences", "values: [a2]", &groups, true),
        ("request.auth.audiences", "values: [a3]", &groups, false),
        ("request.auth.presenter", "values: [web]", &groups, true),
        (
            "request.auth.claims[scope]",
            "values: [scope2]",
            &groups,
            true,
        ),
        (
            "request.auth.claims[nested][key][leaf]",
            "values: [v]",
            &groups,
            true,
        ),
        (
            "request.auth.claims[nested][key]",
            "values: [v]",
            &groups,
            false,
        ),
        (
            "request.auth.claims[groups]",
            "values: [group1]",
            &other,
            true,
        ),
        (
            "request.auth.claims[groups]",
            "notValues: [group1]",
            &groups,
            false,
        ),
        (
            "request.auth.claims[groups]",
            "notValues: [group3]",
            &groups,
            true,
        ),
        (
            "request.auth.claims[missing]",
            "notValues: [x]",
            &groups,
            true,
        ),
        (
            "request.auth.claims[missing]",
            "values: [\"*\"]",
            &groups,
            false,
        ),
    ];
    for (key, values, claims, allowed) in cases {
        let a = compile(&when(key, values));
        assert_eq!(
            req().jwt(claims.clone()).http(&a).allow,
            allowed,
            "{key} {values} {claims}"
        );
        assert!(
            !req().http(&a).allow || values.starts_with("not"),
            "{key} without a token"
        );
    }
}

/// CUSTOM policies are kept apart from RBAC's sets: only the requests their rules match go to
/// the provider, dry-run ones are only reported, they never make an ALLOW-less workload
/// allow-nothing, and the providers they name are listed (Istio allows one per workload).
#[test]
fn custom_policies_say_which_requests_go_to_the_provider() {
    let custom = |name: &str, provider: &str, extra: &str, rules: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: default{extra}}}\n\
             spec:\n  action: CUSTOM\n  provider: {{name: {provider}}}\n  rules:\n{rules}\n---\n"
        )
    };
    let yaml = custom(
        "ext",
        "authz",
        "",
        "  - to: [{operation: {paths: [\"/headers\"]}}]",
    ) + &custom(
        "shadow",
        "other",
        ", annotations: {\"istio.io/dry-run\": \"true\"}",
        "  - to: [{operation: {methods: [POST]}}]",
    );
    let mut a = compile(&yaml);
    assert!(a.is_empty(), "CUSTOM policies are not RBAC's");
    assert!(verdict(&req().path("/ip").http(&a)).0);
    let custom = a.take_custom().expect("custom rules");
    let attrs = |r: &Req| {
        let headers = HeaderMap::new();
        let m = custom.check_http(&HttpAttrs {
            direct_peer: Req::ip(r.peer),
            client_ip: Req::ip(r.peer),
            dest_ip: Req::ip(r.dest),
            dest_port: r.port,
            host: r.host,
            method: r.method,
            path: r.path,
            headers: &headers,
            sni: None,
            principal: None,
            request_auth: None,
        });
        (
            m.rule.map(|s| s.to_string()),
            m.shadow.map(|s| s.to_string()),
        )
    };
    let rule = Some("ns[default]-policy[ext]-rule[0]".to_string());
    let shadow = Some("ns[default]-policy[shadow]-rule[0]".to_string());
    assert_eq!(attrs(&req().path("/headers")), (rule.clone(), None));
    assert_eq!(attrs(&req().path("/ip")), (None, None));
    assert_eq!(
        attrs(&req().path("/headers").method("POST")),
        (rule, shadow)
    );
    // On a TCP connection the HTTP-only fields are ignored (Istio builds CUSTOM's TCP rules
    // as DENY ones): both rules match every connection.
    let ip = Req::ip("10.0.0.1");
    let tcp = custom.check_tcp(&TcpAttrs {
        direct_peer: ip,
        client_ip: ip,
        dest_ip: ip,
        dest_port: 9000,
        sni: None,
        principal: None,
    });
    assert_eq!(tcp.rule.as_deref(), Some("ns[default]-policy[ext]-rule[0]"));
    assert_eq!(
        tcp.shadow.as_deref(),
        Some("ns[default]-policy[shadow]-rule[0]")
    );
    assert_eq!(
        custom.provider_names(),
        ["authz"],
        "dry-run providers are not used"
    );
    assert!(!custom.is_dry_run_only());
    assert!(compile(&policy("a", "default", "ALLOW", "  - {}"))
        .take_custom()
        .is_none());
}
