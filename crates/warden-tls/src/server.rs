//! A rustls server config for one Gateway server: its certificate, SIMPLE or MUTUAL (client
//! certificates verified against a CA bundle), protocol versions, cipher suites and ALPN.
//! Several servers on one port each get their own config; the proxy picks one by SNI before
//! the handshake (see `client_hello` and `sni`), so MUTUAL and SIMPLE hosts can share a port.

use crate::pem_files::{self, CertError};
use crate::protocol;
use crate::provider::provider;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// What a Gateway server's `tls` block asks for, with its files already resolved (from the
/// file path fields or a `credentialName` folder).
#[derive(Debug, Clone, Default)]
pub struct ServerSpec {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// MUTUAL: client certificates must chain to this bundle.
    pub client_ca: Option<PathBuf>,
    pub mutual: bool,
    /// OPTIONAL_MUTUAL: a client certificate is verified when presented, not required.
    pub optional_client_cert: bool,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub cipher_suites: Vec<String>,
    /// Offered in this order (`h2`, `http/1.1` for an HTTPS server; none for TLS).
    pub alpn: Vec<Vec<u8>>,
}

/// One problem of a spec, by the Istio field it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// `serverCertificate`, `privateKey`, `caCertificates`, `minProtocolVersion`,
    /// `cipherSuites`, `mode`.
    pub field: &'static str,
    pub message: String,
}

impl SpecError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        SpecError {
            field,
            message: message.into(),
        }
    }
}

pub(crate) fn cert_field(e: &CertError, cert: &str, key: &str) -> &'static str {
    match e {
        CertError::NoKey { .. } | CertError::BadKey { .. } | CertError::KeyMismatch { .. } => {
            if key == "privateKey" {
                "privateKey"
            } else {
                "clientCertificate"
            }
        }
        _ => {
            if cert == "serverCertificate" {
                "serverCertificate"
            } else {
                "clientCertificate"
            }
        }
    }
}

/// The provider restricted to the suites `names` allows.
pub(crate) fn provider_with_suites(names: &[String]) -> Result<Arc<CryptoProvider>, Vec<String>> {
    let base = provider();
    if names.is_empty() {
        return Ok(base);
    }
    let suites = protocol::cipher_suites(names, &base.cipher_suites)?;
    Ok(Arc::new(CryptoProvider {
        cipher_suites: suites,
        ..(*base).clone()
    }))
}

/// The one certificate of a server (SNI was decided before the handshake).
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Build the config; every problem is reported (all of them, not the first).
pub fn server_config(
    spec: &ServerSpec,
    now: SystemTime,
) -> Result<Arc<ServerConfig>, Vec<SpecError>> {
    let mut errors = Vec::new();
    let versions = protocol::versions(spec.min_version.as_deref(), spec.max_version.as_deref())
        .map_err(|e| errors.push(SpecError::new("minProtocolVersion", e)))
        .ok();
    let provider = provider_with_suites(&spec.cipher_suites)
        .map_err(|es| {
            errors.extend(es.into_iter().map(|e| SpecError::new("cipherSuites", e)));
        })
        .ok();
    let key =
        match pem_files::certified_key(&spec.cert, &spec.key, &crate::provider::provider(), now) {
            Ok(k) => Some(k),
            Err(e) => {
                errors.push(SpecError::new(
                    cert_field(&e, "serverCertificate", "privateKey"),
                    e.to_string(),
                ));
                None
            }
        };
    let client_roots = match (&spec.client_ca, spec.mutual) {
        (Some(ca), true) => match pem_files::read_roots(ca, now) {
            Ok(r) => Some(r),
            Err(e) => {
                errors.push(SpecError::new("caCertificates", e.to_string()));
                None
            }
        },
        (None, true) => {
            errors.push(SpecError::new(
                "caCertificates",
                "mode MUTUAL needs caCertificates (or ca.crt in the credentialName folder) to \
                 verify client certificates against",
            ));
            None
        }
        (_, false) => None,
    };
    let (Some(versions), Some(provider), Some(key)) = (versions, provider, key) else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let builder = match ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
    {
        Ok(b) => b,
        Err(e) => return Err(vec![SpecError::new("cipherSuites", e.to_string())]),
    };
    let builder = match client_roots {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if spec.optional_client_cert {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            match verifier.build() {
                Ok(v) => builder.with_client_cert_verifier(v),
                Err(e) => return Err(vec![SpecError::new("caCertificates", e.to_string())]),
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(FixedCert(key)));
    config.alpn_protocols = spec.alpn.clone();
    Ok(Arc::new(config))
}

/// The files a spec reads (watched for changes).
pub fn files(spec: &ServerSpec) -> Vec<&Path> {
    let mut out = vec![spec.cert.as_path(), spec.key.as_path()];
    if let Some(ca) = &spec.client_ca {
        out.push(ca);
    }
    out
}
