//! What the rules with HTTP-only fields do to TCP connections, said out loud. Istio builds its
//! TCP filter chains without those fields: an ALLOW rule that has one is left out (it never
//! matches a connection; with no other ALLOW rule left, the connection is denied), and a DENY,
//! AUDIT or CUSTOM rule is built from its other fields alone (it matches more, every connection
//! when nothing else is left). A CUSTOM policy whose provider is an `envoyExtAuthzHttp` one is
//! left out of TCP chains altogether (Istio's network ext_authz speaks gRPC only). Istio only
//! logs this at debug level; the istio.io authz-tcp task shows the RBAC effects. `warden check`
//! reports one located note per such rule of the policies that apply to a proxy serving TCP.

use crate::compile::{dry_run_value, DRY_RUN_ANNOTATION};
use crate::scope::ProxyScope;
use warden_config::kinds::authorization_policy::{Action, Rule};
use warden_config::{ConfigSet, Problem};

/// One note per rule, in a policy that applies to `scope`, that uses HTTP-only fields; `tcp`
/// names the TCP traffic this proxy serves (e.g. `TCP ports 9000, 9001`), for the message.
/// `checks_tcp` says whether a named extension provider is asked about TCP connections (a
/// gRPC one is, an HTTP one is not).
pub fn tcp_notes(
    set: &ConfigSet,
    scope: &ProxyScope,
    tcp: &str,
    checks_tcp: &dyn Fn(&str) -> bool,
) -> Vec<Problem> {
    let mut notes = Vec::new();
    for doc in set
        .authorization_policies
        .iter()
        .filter(|d| scope.selects(d))
    {
        let dry_run = doc
            .metadata
            .annotations
            .get(DRY_RUN_ANNOTATION)
            .is_some_and(|v| dry_run_value(v) == Some(true));
        let action = match (doc.spec.action, dry_run) {
            (Action::Allow, false) => "ALLOW",
            (Action::Allow, true) => "dry-run ALLOW",
            (Action::Deny, false) => "DENY",
            (Action::Deny, true) => "dry-run DENY",
            (Action::Audit, _) => "AUDIT",
            // Dry-run CUSTOM policies send nothing, on HTTP or TCP.
            (Action::Custom, true) => continue,
            (Action::Custom, false) => {
                let provider = doc.spec.provider.as_ref().map_or("", |p| p.name.as_str());
                if !checks_tcp(provider) {
                    notes.push(Problem {
                        code: None,
                        location: set.locate(doc, "spec.provider.name"),
                        message: format!(
                            "CUSTOM with the envoyExtAuthzHttp provider {provider:?} does not \
                             apply to {tcp}: those connections are not checked (Istio leaves \
                             this policy out of TCP filter chains); HTTP requests are"
                        ),
                    });
                    continue;
                }
                "CUSTOM"
            }
        };
        for (i, rule) in doc.spec.rules.iter().enumerate() {
            let http = http_fields(rule);
            if http.is_empty() {
                continue;
            }
            let fields = http.join(", ");
            let message = if doc.spec.action == Action::Allow {
                format!(
                    "uses HTTP-only fields ({fields}): on {tcp} this {action} rule never matches \
                     (Istio leaves it out of TCP filter chains); HTTP requests are unaffected"
                )
            } else {
                let rest = other_fields(rule);
                let matches = if rest.is_empty() {
                    "every connection".to_string()
                } else {
                    format!("by {} alone", rest.join(", "))
                };
                format!(
                    "uses HTTP-only fields ({fields}): on {tcp} they are ignored (as Istio builds \
                     TCP filter chains), so this {action} rule matches {matches}"
                )
            };
            notes.push(Problem {
                code: None,
                location: set.locate(doc, &format!("spec.rules[{i}]")),
                message,
            });
        }
    }
    notes
}

/// The rule's fields that only an HTTP request has, by their YAML names.
fn http_fields(rule: &Rule) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    };
    for src in rule.from.iter().filter_map(|f| f.source.as_ref()) {
        for (values, name) in [
            (&src.request_principals, "requestPrincipals"),
            (&src.not_request_principals, "notRequestPrincipals"),
        ] {
            if !values.is_empty() {
                add(name);
            }
        }
    }
    for op in rule.to.iter().filter_map(|t| t.operation.as_ref()) {
        for (values, name) in [
            (&op.hosts, "hosts"),
            (&op.not_hosts, "notHosts"),
            (&op.methods, "methods"),
            (&op.not_methods, "notMethods"),
            (&op.paths, "paths"),
            (&op.not_paths, "notPaths"),
        ] {
            if !values.is_empty() {
                add(name);
            }
        }
    }
    for cond in &rule.when {
        if is_http_key(cond.key.trim()) {
            add(cond.key.trim());
        }
    }
    out
}

/// Condition keys only an HTTP request has (request headers, and JWT claims, which validation
/// rejects for now).
fn is_http_key(key: &str) -> bool {
    key.starts_with("request.headers[") || key.starts_with("request.auth.")
}

/// The fields a TCP connection is still matched by.
fn other_fields(rule: &Rule) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if !rule.from.is_empty() {
        out.push("from".into());
    }
    // The operations are alternatives: one left with no port field matches every port.
    let ops: Vec<_> = rule
        .to
        .iter()
        .filter_map(|t| t.operation.as_ref())
        .collect();
    if !ops.is_empty()
        && ops
            .iter()
            .all(|op| !op.ports.is_empty() || !op.not_ports.is_empty())
    {
        out.push("ports".into());
    }
    for cond in &rule.when {
        let key = cond.key.trim();
        if !is_http_key(key) && !out.iter().any(|k| k == key) {
            out.push(key.to_string());
        }
    }
    out
}
