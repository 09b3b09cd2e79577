//! Gateway: listener ports, protocols and server hosts.

use super::{spec, Report};
use crate::document::Doc;
use crate::field_path::FieldPath;
use crate::hosts::{check_host_pattern, split_server_host};
use crate::kinds::gateway::{Gateway, ListenerProtocol};
use std::collections::HashMap;

pub(super) fn check(doc: &Doc<Gateway>, report: &mut Report) {
    let servers = spec().key("servers");
    if doc.spec.servers.is_empty() {
        report.error(doc, &servers, "a Gateway needs at least one server");
    }
    for (i, server) in doc.spec.servers.iter().enumerate() {
        let at = servers.index(i);
        if let Some(tls) = &server.tls {
            for key in tls.other.keys() {
                report.error(
                    doc,
                    &at.key("tls").key(key.clone()),
                    "TLS is not supported yet (only httpsRedirect on an HTTP server)",
                );
            }
        }
        let protocol = &server.port.protocol;
        if server.port.listener_protocol().is_none() {
            let message = match protocol.to_ascii_uppercase().as_str() {
                "HTTPS" | "TLS" => format!(
                    "protocol {protocol} is not supported yet (no TLS termination); \
                     use HTTP, HTTP2, GRPC or TCP"
                ),
                _ => format!("unknown protocol {protocol:?} (supported: HTTP, HTTP2, GRPC, TCP)"),
            };
            report.error(doc, &at.key("port").key("protocol"), message);
        }
        if server.hosts.is_empty() {
            report.error(doc, &at.key("hosts"), "a server needs at least one host");
        }
        for (h, host) in server.hosts.iter().enumerate() {
            let (ns, name) = split_server_host(host);
            let ns_ok = ns.is_none_or(|ns| !ns.is_empty() && !ns.contains(char::is_whitespace));
            let result = if ns_ok {
                check_host_pattern(name)
            } else {
                Err(format!(
                    "{host:?}: the namespace before '/' is empty or invalid"
                ))
            };
            if let Err(e) = result {
                report.error(doc, &at.key("hosts").index(h), e);
            }
        }
    }
}

/// One listener per port: two servers (in any Gateways) on the same port must both be HTTP
/// (HTTP, HTTP2 and GRPC share one HTTP listener) or both TCP. Port 0 (a free port per server)
/// never conflicts.
pub(super) fn check_port_conflicts(gateways: &[Doc<Gateway>], report: &mut Report) {
    let mut first: HashMap<u16, (ListenerProtocol, String)> = HashMap::new();
    for doc in gateways {
        for (i, server) in doc.spec.servers.iter().enumerate() {
            let number = server.port.number;
            let Some(protocol) = server.port.listener_protocol() else {
                continue;
            };
            if number == 0 {
                continue;
            }
            let here: FieldPath = spec().key("servers").index(i).key("port");
            match first.get(&number) {
                Some((p, _)) if is_tcp(*p) == is_tcp(protocol) => {}
                Some((p, where_)) => report.error(
                    doc,
                    &here.key("protocol"),
                    format!(
                        "port {number} is {} here but {} in {where_}; a port serves either HTTP or TCP",
                        server.port.protocol,
                        protocol_name(*p)
                    ),
                ),
                None => {
                    let where_ = format!("{} ({})", doc.id(), here);
                    first.insert(number, (protocol, where_));
                }
            }
        }
    }
}

fn is_tcp(p: ListenerProtocol) -> bool {
    p == ListenerProtocol::Tcp
}

fn protocol_name(p: ListenerProtocol) -> &'static str {
    match p {
        ListenerProtocol::Http => "HTTP",
        ListenerProtocol::Http2 => "HTTP2",
        ListenerProtocol::Tcp => "TCP",
    }
}
