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
        let protocol = &server.port.protocol;
        let listener = server.port.listener_protocol();
        if listener.is_none() {
            report.error(
                doc,
                &at.key("port").key("protocol"),
                format!(
                    "unknown protocol {protocol:?} (supported: HTTP, HTTP2, GRPC, TCP, HTTPS, TLS)"
                ),
            );
        }
        check_tls(doc, &at, server, listener, report);
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
                Some((p, _)) if class(*p) == class(protocol) => {}
                Some((p, where_)) => report.error(
                    doc,
                    &here.key("protocol"),
                    format!(
                        "port {number} is {} here but {} in {where_}; a port serves HTTP, TCP or TLS (HTTPS and TLS servers share one by SNI)",
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

/// Which servers may share a port: HTTP ones, TCP ones, or TLS ones (HTTPS and TLS, by SNI).
fn class(p: ListenerProtocol) -> u8 {
    match p {
        ListenerProtocol::Http | ListenerProtocol::Http2 => 0,
        ListenerProtocol::Tcp => 1,
        ListenerProtocol::Https | ListenerProtocol::Tls => 2,
    }
}

/// A server's `tls` block against its protocol: HTTPS/TLS need a mode warden runs and the
/// certificates it reads; an HTTP server takes `httpsRedirect` only.
fn check_tls(
    doc: &Doc<Gateway>,
    at: &FieldPath,
    server: &crate::kinds::gateway::Server,
    listener: Option<ListenerProtocol>,
    report: &mut Report,
) {
    let tls_at = at.key("tls");
    let Some(listener) = listener else { return };
    if !listener.is_tls() {
        if let Some(tls) = &server.tls {
            let set = tls.mode.is_some()
                || tls.server_certificate.is_some()
                || tls.private_key.is_some()
                || tls.ca_certificates.is_some()
                || tls.credential_name.is_some()
                || !tls.cipher_suites.is_empty();
            if set {
                report.error(
                    doc,
                    &tls_at,
                    format!(
                        "protocol {} takes only tls.httpsRedirect; TLS settings need protocol \
                         HTTPS or TLS",
                        server.port.protocol
                    ),
                );
            }
        }
        return;
    }
    let Some(tls) = &server.tls else {
        report.error(
            doc,
            &tls_at,
            format!(
                "protocol {} needs a tls block (mode SIMPLE, MUTUAL, OPTIONAL_MUTUAL or \
                 PASSTHROUGH)",
                server.port.protocol
            ),
        );
        return;
    };
    if tls.https_redirect {
        report.error(
            doc,
            &tls_at.key("httpsRedirect"),
            "httpsRedirect belongs on the plain HTTP server, not the TLS one",
        );
    }
    let Some(mode) = tls.server_mode() else {
        let m = tls.mode.as_deref().unwrap_or_default();
        let why = match m.to_ascii_uppercase().as_str() {
            "AUTO_PASSTHROUGH" => {
                "AUTO_PASSTHROUGH (multi-network SNI routing) is not supported \
                                   yet"
            }
            "ISTIO_MUTUAL" => {
                "ISTIO_MUTUAL on a gateway is not supported (use MUTUAL with the \
                               mesh CA as caCertificates)"
            }
            _ => "unknown mode (SIMPLE, MUTUAL, OPTIONAL_MUTUAL, PASSTHROUGH)",
        };
        report.error(doc, &tls_at.key("mode"), format!("{m}: {why}"));
        return;
    };
    use crate::kinds::gateway::ServerTlsMode;
    if mode == ServerTlsMode::Passthrough {
        for (field, set) in [
            ("serverCertificate", tls.server_certificate.is_some()),
            ("privateKey", tls.private_key.is_some()),
            ("credentialName", tls.credential_name.is_some()),
        ] {
            if set {
                report.error(
                    doc,
                    &tls_at.key(field),
                    "PASSTHROUGH forwards the client's TLS untouched; a certificate here is \
                     never used",
                );
            }
        }
        return;
    }
    let files = tls.server_certificate.is_some() || tls.private_key.is_some();
    match (&tls.credential_name, files) {
        (Some(_), true) => report.error(
            doc,
            &tls_at.key("credentialName"),
            "credentialName and serverCertificate/privateKey both given; use one",
        ),
        (None, false) => report.error(
            doc,
            &tls_at,
            "needs credentialName, or serverCertificate and privateKey",
        ),
        (None, true) => {
            for (field, v) in [
                ("serverCertificate", &tls.server_certificate),
                ("privateKey", &tls.private_key),
            ] {
                if v.as_deref().is_none_or(str::is_empty) {
                    report.error(doc, &tls_at.key(field), "missing (both files are needed)");
                }
            }
        }
        (Some(_), false) => {}
    }
    if mode == ServerTlsMode::Simple && !tls.subject_alt_names.is_empty() {
        report.error(
            doc,
            &tls_at.key("subjectAltNames"),
            "client SANs are checked only under MUTUAL or OPTIONAL_MUTUAL",
        );
    }
}

fn protocol_name(p: ListenerProtocol) -> &'static str {
    match p {
        ListenerProtocol::Http => "HTTP",
        ListenerProtocol::Http2 => "HTTP2",
        ListenerProtocol::Tcp => "TCP",
        ListenerProtocol::Https => "HTTPS",
        ListenerProtocol::Tls => "TLS",
    }
}
