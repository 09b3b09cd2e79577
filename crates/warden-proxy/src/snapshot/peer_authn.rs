//! A sidecar's inbound mutual TLS: the PeerAuthentication mode of each of this workload's
//! ports (workload policy, else namespace, else mesh-wide in `istio-system`, else PERMISSIVE,
//! as Istio resolves them; `portLevelMtls` of the workload policy per port) and the rustls
//! config that terminates the peers' ISTIO_MUTUAL (this workload's mesh certificate, client
//! certificates required and verified against the mesh CA).

use super::Builder;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;
use warden_config::kinds::peer_authentication::{PeerAuthentication, PeerMode};
use warden_config::Doc;
use warden_tls::rustls::ServerConfig;
use warden_tls::server::ServerSpec;

/// Istio's root namespace: its selector-less PeerAuthentication is the mesh default.
const ROOT_NAMESPACE: &str = "istio-system";

#[derive(Debug)]
pub struct InboundTls {
    /// `None` without `--mesh-credentials` (then only plaintext is served).
    pub config: Option<Arc<ServerConfig>>,
    /// The URI SANs of this workload's mesh certificate: `By=` of the XFCC element its
    /// inbound side adds.
    pub local_uri_sans: Arc<[String]>,
    default: PeerMode,
    ports: BTreeMap<u16, PeerMode>,
}

impl InboundTls {
    /// The mode for connections to this workload's `port` (never `Unset`).
    pub fn mode(&self, port: u16) -> PeerMode {
        match self.ports.get(&port) {
            Some(m) if *m != PeerMode::Unset => *m,
            _ => self.default,
        }
    }
}

fn mode_of(doc: &Doc<PeerAuthentication>) -> PeerMode {
    doc.spec
        .mtls
        .as_ref()
        .and_then(|m| m.peer_mode())
        .unwrap_or(PeerMode::Unset)
}

impl Builder<'_> {
    pub(super) fn inbound_tls(&mut self) -> InboundTls {
        let identity = self.identity;
        let set = self.set;
        let selects = |d: &&Doc<PeerAuthentication>| {
            d.spec.selector.as_ref().is_some_and(|s| {
                !s.match_labels.is_empty()
                    && s.match_labels
                        .iter()
                        .all(|(k, v)| identity.labels.get(k) == Some(v))
            })
        };
        let in_ns =
            |d: &&Doc<PeerAuthentication>| d.metadata.namespace_or_default() == identity.namespace;
        let no_selector = |d: &&Doc<PeerAuthentication>| {
            d.spec
                .selector
                .as_ref()
                .is_none_or(|s| s.match_labels.is_empty())
        };
        let docs = &set.peer_authentications;
        let workload = docs.iter().filter(in_ns).find(selects);
        let namespace = docs.iter().filter(in_ns).find(no_selector);
        let mesh = docs
            .iter()
            .filter(|d| d.metadata.namespace_or_default() == ROOT_NAMESPACE)
            .find(no_selector);
        let default = [workload, namespace, mesh]
            .into_iter()
            .flatten()
            .map(mode_of)
            .find(|m| *m != PeerMode::Unset)
            .unwrap_or(PeerMode::Permissive);
        let mut ports = BTreeMap::new();
        if let Some(w) = workload {
            for (port, m) in &w.spec.port_level_mtls {
                // Validation checked both.
                if let (Ok(p), Some(mode)) = (port.parse::<u16>(), m.peer_mode()) {
                    ports.insert(p, mode);
                }
            }
        }
        let strict = default == PeerMode::Strict || ports.values().any(|m| *m == PeerMode::Strict);
        let mut local_uri_sans: Arc<[String]> = Arc::from(Vec::new());
        let config = match &identity.mesh {
            None => {
                if strict {
                    let doc = workload.or(namespace).or(mesh);
                    if let Some(doc) = doc {
                        self.error(
                            doc,
                            "spec.mtls.mode".into(),
                            "STRICT needs this sidecar's mesh certificate (--mesh-credentials, \
                             from `warden ca issue`)",
                        );
                    }
                }
                None
            }
            Some(mesh) => {
                let spec = ServerSpec {
                    cert: mesh.dir.join("tls.crt"),
                    key: mesh.dir.join("tls.key"),
                    client_ca: Some(mesh.dir.join("ca.crt")),
                    mutual: true,
                    alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
                    ..ServerSpec::default()
                };
                self.tls_files.extend(
                    warden_tls::server::files(&spec)
                        .into_iter()
                        .map(|p| p.to_path_buf()),
                );
                match warden_tls::server::server_config(&spec, SystemTime::now()) {
                    Ok(c) => {
                        local_uri_sans = warden_tls::xfcc::local_uri_sans(&spec.cert).into();
                        Some(c)
                    }
                    Err(errors) => {
                        for e in errors {
                            self.errors.push(warden_config::Problem {
                                code: None,
                                location: warden_config::Location {
                                    file: mesh.dir.clone(),
                                    line: None,
                                    document: 0,
                                    object: "--mesh-credentials".into(),
                                    field: e.field.into(),
                                },
                                message: e.message,
                            });
                        }
                        None
                    }
                }
            }
        };
        InboundTls {
            config,
            local_uri_sans,
            default,
            ports,
        }
    }
}
