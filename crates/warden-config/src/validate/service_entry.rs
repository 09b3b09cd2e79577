//! ServiceEntry: the upstream clusters (hosts, ports, resolution, endpoints).

use super::{spec, Report};
use crate::document::Doc;
use crate::hosts::check_host_pattern;
use crate::kinds::service_entry::{Resolution, ServiceEntry};
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

pub(super) fn check(doc: &Doc<ServiceEntry>, report: &mut Report) {
    let se = &doc.spec;
    let hosts = spec().key("hosts");
    if se.hosts.is_empty() {
        report.error(doc, &hosts, "a ServiceEntry needs at least one host");
    }
    for (i, host) in se.hosts.iter().enumerate() {
        if let Err(e) = check_host_pattern(host) {
            report.error(doc, &hosts.index(i), e);
        }
    }

    let ports = spec().key("ports");
    if se.ports.is_empty() {
        report.error(doc, &ports, "a ServiceEntry needs at least one port");
    }
    let mut numbers = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (i, port) in se.ports.iter().enumerate() {
        let at = ports.index(i);
        if port.number == 0 {
            report.error(doc, &at.key("number"), "port number must be 1..=65535");
        } else if !numbers.insert(port.number) {
            report.error(
                doc,
                &at.key("number"),
                format!("port {} is listed twice", port.number),
            );
        }
        if let Some(name) = &port.name {
            if !names.insert(name.as_str()) {
                report.error(
                    doc,
                    &at.key("name"),
                    format!("port name {name:?} is used twice"),
                );
            }
        }
        if port.target_port == Some(0) {
            report.error(doc, &at.key("targetPort"), "targetPort must be 1..=65535");
        }
        if let Some(protocol) = &port.protocol {
            // HTTPS and TLS ports carry the client's own TLS (a TCP or PASSTHROUGH route), or
            // the proxy's when a DestinationRule `tls` originates it.
            let tls = matches!(protocol.to_ascii_uppercase().as_str(), "HTTPS" | "TLS");
            if port.app_protocol().is_none() && !tls {
                let message = format!(
                    "unknown protocol {protocol:?} (supported: HTTP, HTTP2, GRPC, TCP, HTTPS, TLS)"
                );
                report.error(doc, &at.key("protocol"), message);
            }
        }
    }

    if let Some(location) = &se.location {
        if location != "MESH_EXTERNAL" && location != "MESH_INTERNAL" {
            report.error(
                doc,
                &spec().key("location"),
                format!("unknown location {location:?} (MESH_EXTERNAL or MESH_INTERNAL)"),
            );
        }
    }

    let resolution = se.resolution_kind();
    if resolution.is_none() {
        let other = se.resolution.as_deref().unwrap_or_default();
        report.error(
            doc,
            &spec().key("resolution"),
            format!("unknown resolution {other:?} (NONE, STATIC, DNS or DNS_ROUND_ROBIN)"),
        );
    }

    let endpoints = spec().key("endpoints");
    match resolution {
        Some(Resolution::Static) if se.endpoints.is_empty() && se.workload_selector.is_none() => {
            report.error(
                doc,
                &endpoints,
                "resolution STATIC needs endpoints with IP addresses",
            )
        }
        // As Istio's validation: NONE passes connections on to where they were going.
        Some(Resolution::None) if !se.endpoints.is_empty() => report.error(
            doc,
            &endpoints,
            "no endpoints with resolution NONE (the default): connections go to their original \
             destination; set resolution STATIC or DNS to use these endpoints",
        ),
        Some(Resolution::Dns) if se.endpoints.is_empty() => {
            for (i, host) in se.hosts.iter().enumerate() {
                if host.starts_with('*') {
                    report.error(
                        doc,
                        &hosts.index(i),
                        format!("wildcard host {host:?} cannot be resolved by DNS; add endpoints"),
                    );
                }
            }
        }
        _ => {}
    }
    for (i, ep) in se.endpoints.iter().enumerate() {
        let at = endpoints.index(i);
        let is_ip = ep.address.parse::<IpAddr>().is_ok();
        match resolution {
            Some(Resolution::Static) if !is_ip => report.error(
                doc,
                &at.key("address"),
                format!(
                    "{:?} is not an IP address (resolution STATIC); use resolution DNS for \
                     host names",
                    ep.address
                ),
            ),
            Some(Resolution::Dns) if !is_ip => {
                if let Err(e) = check_host_pattern(&ep.address).and_then(|()| {
                    if ep.address.contains('*') {
                        Err(format!(
                            "{:?}: an endpoint cannot be a wildcard",
                            ep.address
                        ))
                    } else {
                        Ok(())
                    }
                }) {
                    report.error(doc, &at.key("address"), e);
                }
            }
            _ => {}
        }
        for (name, number) in &ep.ports {
            let port_at = at.key("ports").key(name.clone());
            if !names.contains(name.as_str()) {
                report.error(
                    doc,
                    &port_at,
                    format!("{name:?} is not the name of a port in spec.ports"),
                );
            }
            if *number == 0 {
                report.error(doc, &port_at, "port must be 1..=65535");
            }
        }
    }
}

/// A host defined twice would make the upstream of a route ambiguous.
pub(super) fn check_duplicate_hosts(entries: &[Doc<ServiceEntry>], report: &mut Report) {
    let mut seen: HashMap<String, String> = HashMap::new();
    for doc in entries {
        for (i, host) in doc.spec.hosts.iter().enumerate() {
            let key = host.to_ascii_lowercase();
            match seen.get(&key) {
                Some(first) if *first != doc.id() => report.error(
                    doc,
                    &spec().key("hosts").index(i),
                    format!("host {host:?} is already defined by {first}"),
                ),
                Some(_) => report.error(
                    doc,
                    &spec().key("hosts").index(i),
                    format!("host {host:?} is listed twice"),
                ),
                None => {
                    seen.insert(key, doc.id());
                }
            }
        }
    }
}
