//! A Gateway port with HTTPS/TLS servers: each server's rustls config (certificates read and
//! checked here, so a bad file fails the build and a reload keeps the running certificates),
//! the HTTP routes of its HTTPS servers, the tcp route of its terminated TLS servers and the
//! SNI routes (VirtualService `tls[]`) of its PASSTHROUGH servers.

use super::{admitted_hosts, Builder, TcpRoute};
use crate::routing::tls_tables::{SniRoute, TlsAction, TlsPortRoutes, TlsServer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use warden_config::hosts::split_server_host;
use warden_config::kinds::gateway::{ListenerProtocol, Server, ServerTlsMode};
use warden_tls::server::{ServerSpec, SpecError};

/// ALPN of a terminated HTTPS server: HTTP/2 first, as Envoy offers it.
fn http_alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

impl Builder<'_> {
    pub(super) fn tls_port(&mut self, port: u16) -> TlsPortRoutes {
        let set = self.set;
        let mut out = TlsPortRoutes {
            http: self.http_routes(port),
            tcp: self.tcp_route(port),
            ..TlsPortRoutes::default()
        };
        for gw in &set.gateways {
            for (i, server) in gw.spec.servers.iter().enumerate() {
                if server.port.number != port
                    || !server
                        .port
                        .listener_protocol()
                        .is_some_and(ListenerProtocol::is_tls)
                {
                    continue;
                }
                let Some(action) = self.tls_action(gw, i, server) else {
                    continue;
                };
                out.servers.push(TlsServer {
                    hosts: server
                        .hosts
                        .iter()
                        .map(|h| split_server_host(h).1.to_owned())
                        .collect(),
                    action,
                });
            }
        }
        for vs in &set.virtual_services {
            if admitted_hosts(set, vs, port).is_empty() {
                continue;
            }
            for (i, r) in vs.spec.tls.iter().enumerate() {
                let sni_hosts: Vec<String> = r
                    .matches
                    .iter()
                    .filter(|m| m.port.is_none_or(|p| p == port))
                    .flat_map(|m| m.sni_hosts.iter().cloned())
                    .collect();
                if sni_hosts.is_empty() {
                    continue;
                }
                let mut clusters = Vec::new();
                for (j, dest) in r.route.iter().enumerate() {
                    let Some(cluster) = self.cluster(
                        vs,
                        format!("spec.tls[{i}].route[{j}].destination"),
                        &dest.destination,
                    ) else {
                        continue;
                    };
                    let weight = dest
                        .weight
                        .unwrap_or(if r.route.len() == 1 { 100 } else { 0 });
                    clusters.push((cluster, weight));
                }
                let total_weight = clusters.iter().map(|(_, w)| w).sum();
                out.passthrough.push(SniRoute {
                    sni_hosts,
                    route: TcpRoute {
                        name: format!(
                            "{}/{}/tls{}",
                            vs.metadata.namespace_or_default(),
                            vs.metadata.name,
                            i
                        )
                        .into(),
                        clusters,
                        total_weight,
                    },
                });
            }
        }
        out
    }

    fn tls_action(
        &mut self,
        gw: &warden_config::Doc<warden_config::Gateway>,
        i: usize,
        server: &Server,
    ) -> Option<TlsAction> {
        // Validation made sure the block and its mode are there.
        let tls = server.tls.as_ref()?;
        let mode = tls.server_mode()?;
        if mode == ServerTlsMode::Passthrough {
            return Some(TlsAction::Passthrough);
        }
        let at = format!("spec.servers[{i}].tls");
        let mutual = matches!(mode, ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual);
        let (cert, key, ca, from_credential) = match &tls.credential_name {
            Some(name) => {
                let Some(dir) = self.identity.credentials_dir.as_ref() else {
                    self.error(
                        gw,
                        format!("{at}.credentialName"),
                        format!(
                            "credentialName {name:?} needs --credentials-dir (a folder with \
                             {name}/tls.crt, {name}/tls.key and, for MUTUAL, {name}/ca.crt)"
                        ),
                    );
                    return None;
                };
                let folder = dir.join(name);
                (
                    folder.join("tls.crt"),
                    folder.join("tls.key"),
                    Some(folder.join("ca.crt")),
                    true,
                )
            }
            None => (
                PathBuf::from(tls.server_certificate.clone().unwrap_or_default()),
                PathBuf::from(tls.private_key.clone().unwrap_or_default()),
                tls.ca_certificates.as_ref().map(PathBuf::from),
                false,
            ),
        };
        let spec = ServerSpec {
            cert,
            key,
            client_ca: ca.filter(|_| mutual),
            mutual,
            optional_client_cert: mode == ServerTlsMode::OptionalMutual,
            min_version: tls.min_protocol_version.clone(),
            max_version: tls.max_protocol_version.clone(),
            cipher_suites: tls.cipher_suites.clone(),
            alpn: match server.port.listener_protocol() {
                Some(ListenerProtocol::Https) => http_alpn(),
                _ => Vec::new(),
            },
        };
        self.tls_files.extend(
            warden_tls::server::files(&spec)
                .into_iter()
                .map(Path::to_path_buf),
        );
        match warden_tls::server::server_config(&spec, SystemTime::now()) {
            Ok(config) => Some(TlsAction::Terminate {
                config,
                http: server.port.listener_protocol() == Some(ListenerProtocol::Https),
                mutual,
                client_sans: tls.subject_alt_names.clone(),
                local_uri_sans: if mutual {
                    warden_tls::xfcc::local_uri_sans(&spec.cert).into()
                } else {
                    Arc::from(Vec::new())
                },
            }),
            Err(errors) => {
                for SpecError { field, message } in errors {
                    let field = match field {
                        "serverCertificate" | "privateKey" | "caCertificates"
                            if from_credential =>
                        {
                            "credentialName"
                        }
                        f => f,
                    };
                    self.error(gw, format!("{at}.{field}"), message);
                }
                None
            }
        }
    }
}
