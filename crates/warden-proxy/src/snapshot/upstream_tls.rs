//! A cluster's DestinationRule `tls`: the rustls client config (certificates read and checked
//! here, so a bad file fails the build and a reload keeps the running ones) and the SNI.

use super::Builder;
use crate::upstream::tls_origination::UpstreamTls;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;
use warden_config::kinds::destination_rule::{ClientTls, Subset};
use warden_config::kinds::service_entry::ServiceEntry;
use warden_config::Doc;
use warden_tls::client::ClientSpec;
use warden_tls::rustls::pki_types::ServerName;

/// `Err(())`: the problem is recorded.
pub(super) type Built = Result<Option<Arc<UpstreamTls>>, ()>;

impl Builder<'_> {
    /// Istio's enableAutoMtls (on by default) applies to this proxy: a sidecar with a mesh
    /// certificate.
    pub(super) fn auto_mtls_applies(&self) -> bool {
        self.identity.mesh.is_some() && self.identity.sidecar.is_some()
    }

    /// TLS to an ext_authz provider's service `host`:`port`, as to any upstream cluster of it,
    /// and whether auto mTLS chose it: its DestinationRule's `tls` for the port (DISABLE included)
    /// wins; without one, auto mTLS when every endpoint is a meshed pod.
    pub(super) fn provider_tls(
        &mut self,
        host: &str,
        port: u16,
        http2: bool,
    ) -> Result<Option<(Arc<UpstreamTls>, bool)>, ()> {
        let set = self.set;
        let dr = set.destination_rule_for_host(host);
        let policy = dr.and_then(|d| d.spec.policy_for(None));
        let (built, auto) = match (dr, policy.as_ref().and_then(|p| p.tls_for_port(port))) {
            (Some(dr), Some(tls)) => (self.upstream_tls(dr, tls, host, http2), false),
            _ => match set.service_entry_for_host(host) {
                Some(se)
                    if !se.spec.endpoints.is_empty()
                        && meshed(&se.spec, None)
                        && self.auto_mtls_applies() =>
                {
                    (self.upstream_tls(se, &auto_mtls(), host, http2), true)
                }
                _ => (Ok(None), false),
            },
        };
        Ok(built?.map(|tls| (tls, auto)))
    }

    /// `dr` is where problems are reported: the DestinationRule, or for auto mTLS the service.
    pub(super) fn upstream_tls<T>(
        &mut self,
        dr: &Doc<T>,
        tls: &ClientTls,
        host: &str,
        http2: bool,
    ) -> Built {
        let at = "spec.trafficPolicy.tls";
        let mode = tls
            .mode
            .as_deref()
            .unwrap_or("DISABLE")
            .to_ascii_uppercase();
        let mut spec = ClientSpec {
            ca: tls.ca_certificates.as_ref().map(PathBuf::from),
            subject_alt_names: tls.subject_alt_names.clone(),
            insecure_skip_verify: tls.insecure_skip_verify.unwrap_or(false),
            ..ClientSpec::default()
        };
        let mut sni = tls.sni.clone();
        match mode.as_str() {
            "DISABLE" => return Ok(None),
            "SIMPLE" => {}
            "MUTUAL" => match (
                &tls.credential_name,
                &tls.client_certificate,
                &tls.private_key,
            ) {
                (Some(name), _, _) => {
                    let Some(dir) = self.identity.credentials_dir.clone() else {
                        self.error(
                            dr,
                            format!("{at}.credentialName"),
                            format!("credentialName {name:?} needs --credentials-dir"),
                        );
                        return Err(());
                    };
                    let folder = dir.join(name);
                    spec.cert_key = Some((folder.join("tls.crt"), folder.join("tls.key")));
                    if spec.ca.is_none() && folder.join("ca.crt").exists() {
                        spec.ca = Some(folder.join("ca.crt"));
                    }
                }
                (None, Some(cert), Some(key)) => {
                    spec.cert_key = Some((PathBuf::from(cert), PathBuf::from(key)));
                }
                // Validation reported it.
                _ => return Err(()),
            },
            "ISTIO_MUTUAL" => {
                let Some(mesh) = self.identity.mesh.clone() else {
                    self.error(
                        dr,
                        format!("{at}.mode"),
                        "ISTIO_MUTUAL needs the proxy's mesh certificate (--mesh-credentials, \
                         from `warden ca issue`)",
                    );
                    return Err(());
                };
                spec.cert_key = Some((mesh.dir.join("tls.crt"), mesh.dir.join("tls.key")));
                spec.ca = Some(mesh.dir.join("ca.crt"));
                if spec.subject_alt_names.is_empty() {
                    spec.spiffe_trust_domain = Some(mesh.trust_domain.clone());
                }
                // Peers are verified by SPIFFE identity, not by name; no SNI (Istio sends an
                // `outbound_.port_.subset_.host` one only for its gateways' AUTO_PASSTHROUGH).
                sni = None;
            }
            // Validation reported it.
            _ => return Err(()),
        }
        if let Some((c, k)) = &spec.cert_key {
            self.tls_files.push(c.clone());
            self.tls_files.push(k.clone());
        }
        if let Some(ca) = &spec.ca {
            self.tls_files.push(ca.clone());
        }
        let config = match warden_tls::client::client_config(&spec, SystemTime::now()) {
            Ok(c) => c,
            Err(errors) => {
                for e in errors {
                    let field = match e.field {
                        "clientCertificate" | "privateKey" | "caCertificates"
                            if tls.credential_name.is_some() =>
                        {
                            "credentialName"
                        }
                        f => f,
                    };
                    self.error(dr, format!("{at}.{field}"), e.message);
                }
                return Err(());
            }
        };
        // No `sni`: the service's host name, as Istio's auto SNI (an IP sends none).
        let name = sni.or_else(|| {
            (mode != "ISTIO_MUTUAL" && host.parse::<std::net::IpAddr>().is_err())
                .then(|| host.to_owned())
        });
        let server_name = match name {
            None => None,
            Some(n) => match ServerName::try_from(n.clone()) {
                Ok(s) => Some(s),
                Err(_) => {
                    self.error(
                        dr,
                        format!("{at}.sni"),
                        format!("{n:?} is not a server name"),
                    );
                    return Err(());
                }
            },
        };
        Ok(Some(Arc::new(UpstreamTls::new(config, server_name, http2))))
    }
}

/// Istio's auto mTLS: a sidecar with a mesh certificate speaks ISTIO_MUTUAL to a service whose
/// endpoints all carry the label its injector puts on meshed pods, unless a DestinationRule
/// says otherwise.
pub(super) const TLS_MODE_LABEL: &str = "security.istio.io/tlsMode";

pub(super) fn auto_mtls() -> ClientTls {
    ClientTls {
        mode: Some("ISTIO_MUTUAL".into()),
        ..ClientTls::default()
    }
}

/// Whether every endpoint of `se` (of `subset`, when one is named) carries the meshed-pod
/// label; true for none, so callers check that there are endpoints.
pub(super) fn meshed(se: &ServiceEntry, subset: Option<&Subset>) -> bool {
    se.endpoints
        .iter()
        .filter(|ep| {
            subset.is_none_or(|s| s.labels.iter().all(|(k, v)| ep.labels.get(k) == Some(v)))
        })
        .all(|ep| ep.labels.get(TLS_MODE_LABEL).map(String::as_str) == Some("istio"))
}
