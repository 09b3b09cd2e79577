//! DestinationRule: load balancing and connection pool settings of an upstream host.

use super::{check_positive_duration, spec, References, Report};
use crate::document::Doc;
use crate::hosts::check_host_pattern;
use crate::kinds::destination_rule::{DestinationRule, LbPolicy};
use std::collections::HashMap;

pub(super) fn check(doc: &Doc<DestinationRule>, refs: &References, report: &mut Report) {
    let dr = &doc.spec;
    let host = spec().key("host");
    if dr.host.is_empty() {
        report.error(doc, &host, "host is required");
    } else if let Err(e) = check_host_pattern(&dr.host) {
        report.error(doc, &host, e);
    } else if refs.check_service_entries
        && refs
            .set
            .service_in(&dr.host, doc.metadata.namespace_or_default())
            .is_none()
    {
        report.warn(
            doc,
            &host,
            format!(
                "no ServiceEntry defines host {:?}; this rule applies to nothing",
                dr.host
            ),
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, subset) in dr.subsets.iter().enumerate() {
        let at = spec().key("subsets").index(i);
        if subset.name.is_empty() {
            report.error(doc, &at.key("name"), "a subset needs a name");
        } else if !names.insert(subset.name.as_str()) {
            report.error(
                doc,
                &at.key("name"),
                format!("subset {:?} is defined twice", subset.name),
            );
        }
        if let Some(policy) = &subset.traffic_policy {
            check_policy(doc, policy, &at.key("trafficPolicy"), report);
        }
    }
    if let Some(policy) = &dr.traffic_policy {
        check_policy(doc, policy, &spec().key("trafficPolicy"), report);
    }
}

fn check_policy(
    doc: &Doc<DestinationRule>,
    policy: &crate::kinds::destination_rule::TrafficPolicy,
    tp: &crate::FieldPath,
    report: &mut Report,
) {
    if let Some(tls) = &policy.tls {
        check_client_tls(doc, tls, &tp.key("tls"), report);
    }
    for (i, p) in policy.port_level_settings.iter().enumerate() {
        let at = tp.key("portLevelSettings").index(i);
        if p.port.as_ref().and_then(|n| n.number).is_none() {
            report.error(
                doc,
                &at.key("port").key("number"),
                "a port level setting needs a port number",
            );
        }
        if let Some(tls) = &p.tls {
            check_client_tls(doc, tls, &at.key("tls"), report);
        }
    }
    if let Some(simple) = policy
        .load_balancer
        .as_ref()
        .and_then(|lb| lb.simple.as_deref())
    {
        if LbPolicy::parse(simple).is_none() {
            let message = if simple == "PASSTHROUGH" {
                "PASSTHROUGH is not supported (it needs the original destination); use \
                 ROUND_ROBIN, LEAST_REQUEST or RANDOM"
                    .to_owned()
            } else {
                format!("unknown load balancer {simple:?} (ROUND_ROBIN, LEAST_REQUEST or RANDOM)")
            };
            report.error(doc, &tp.key("loadBalancer").key("simple"), message);
        }
    }
    if let Some(od) = &policy.outlier_detection {
        check_outlier(doc, od, &tp.key("outlierDetection"), report);
    }
    let Some(pool) = &policy.connection_pool else {
        return;
    };
    let cp = tp.key("connectionPool");
    // Counts of 0 would block all traffic; Istio rejects them too.
    let positive = |report: &mut Report, at: &crate::FieldPath, field: &str, v: Option<u32>| {
        if v == Some(0) {
            report.error(
                doc,
                &at.key(field),
                format!("{field} must be greater than 0"),
            );
        }
    };
    if let Some(tcp) = &pool.tcp {
        let at = cp.key("tcp");
        positive(report, &at, "maxConnections", tcp.max_connections);
        if let Some(t) = &tcp.connect_timeout {
            check_positive_duration(doc, &at.key("connectTimeout"), "connectTimeout", t, report);
        }
    }
    if let Some(http) = &pool.http {
        let at = cp.key("http");
        let pending = http.http1_max_pending_requests;
        positive(report, &at, "http1MaxPendingRequests", pending);
        positive(report, &at, "http2MaxRequests", http.http2_max_requests);
        // maxRequestsPerConnection 0 means unlimited, as in Istio.
        if let Some(t) = &http.idle_timeout {
            check_positive_duration(doc, &at.key("idleTimeout"), "idleTimeout", t, report);
        }
        if let Some(p) = &http.h2_upgrade_policy {
            if !matches!(p.as_str(), "DEFAULT" | "DO_NOT_UPGRADE" | "UPGRADE") {
                report.error(
                    doc,
                    &at.key("h2UpgradePolicy"),
                    format!("unknown h2UpgradePolicy {p:?} (DEFAULT, DO_NOT_UPGRADE or UPGRADE)"),
                );
            }
        }
    }
}

fn check_outlier(
    doc: &Doc<DestinationRule>,
    od: &crate::kinds::destination_rule::OutlierDetection,
    at: &crate::FieldPath,
    report: &mut Report,
) {
    if od.split_external_local_origin_errors == Some(true) {
        report.error(
            doc,
            &at.key("splitExternalLocalOriginErrors"),
            "not supported: warden counts connect failures, resets and timeouts as 5xx \
             (Envoy's default)",
        );
    }
    if od.consecutive_local_origin_failures.is_some() {
        report.error(
            doc,
            &at.key("consecutiveLocalOriginFailures"),
            "not supported (it needs splitExternalLocalOriginErrors)",
        );
    }
    for (field, value) in [
        ("maxEjectionPercent", od.max_ejection_percent),
        ("minHealthPercent", od.min_health_percent),
    ] {
        if value.is_some_and(|v| v > 100) {
            report.error(
                doc,
                &at.key(field),
                format!("{field} must be between 0 and 100"),
            );
        }
    }
    for (field, value) in [
        ("interval", &od.interval),
        ("baseEjectionTime", &od.base_ejection_time),
    ] {
        if let Some(t) = value {
            check_positive_duration(doc, &at.key(field), field, t, report);
        }
    }
}

/// Two rules for one host would make its policy ambiguous.
pub(super) fn check_duplicate_hosts(rules: &[Doc<DestinationRule>], report: &mut Report) {
    let mut seen: HashMap<String, String> = HashMap::new();
    for doc in rules {
        let key = doc.spec.host.to_ascii_lowercase();
        if key.is_empty() {
            continue;
        }
        if let Some(first) = seen.get(&key) {
            report.error(
                doc,
                &spec().key("host"),
                format!(
                    "host {:?} already has DestinationRule {first}",
                    doc.spec.host
                ),
            );
        } else {
            seen.insert(key, doc.id());
        }
    }
}

/// Upstream TLS: a mode warden runs, and for MUTUAL a client certificate and key.
fn check_client_tls(
    doc: &Doc<DestinationRule>,
    tls: &crate::kinds::destination_rule::ClientTls,
    at: &crate::FieldPath,
    report: &mut Report,
) {
    let mode = tls
        .mode
        .as_deref()
        .unwrap_or("DISABLE")
        .to_ascii_uppercase();
    match mode.as_str() {
        "DISABLE" | "SIMPLE" | "ISTIO_MUTUAL" => {}
        "MUTUAL" => {
            let files = tls.client_certificate.is_some() && tls.private_key.is_some();
            if !files && tls.credential_name.is_none() {
                report.error(
                    doc,
                    at,
                    "mode MUTUAL needs clientCertificate and privateKey, or credentialName",
                );
            }
        }
        other => report.error(
            doc,
            &at.key("mode"),
            format!("unknown mode {other:?} (DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL)"),
        ),
    }
    if mode != "MUTUAL" && (tls.client_certificate.is_some() || tls.private_key.is_some()) {
        report.error(
            doc,
            &at.key("clientCertificate"),
            format!("a client certificate is presented only under MUTUAL (mode is {mode})"),
        );
    }
}
