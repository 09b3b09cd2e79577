//! rustls client configs for upstream TLS (DestinationRule `tls`): SIMPLE or MUTUAL (a client
//! certificate), server certificates verified against `caCertificates` (or the system roots),
//! by `subjectAltNames` instead of the host name when given (how Istio pins a SPIFFE identity),
//! or not at all with `insecureSkipVerify`.

use crate::peer_identity::PeerIdentity;
use crate::pem_files;
use crate::provider::provider;
use crate::server::{cert_field, SpecError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

#[derive(Debug, Clone, Default)]
pub struct ClientSpec {
    /// MUTUAL / ISTIO_MUTUAL: the certificate and key presented to the upstream.
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// Trust anchors; `None`: the system's.
    pub ca: Option<PathBuf>,
    /// Trust the system's anchors as well as `ca` (a jwksUri: public issuers or the mesh's).
    pub system_roots_too: bool,
    /// When not empty, the server certificate must carry one of these SANs (URI or DNS); the
    /// host name is not checked then.
    pub subject_alt_names: Vec<String>,
    pub insecure_skip_verify: bool,
    /// Without `subject_alt_names`: accept any SPIFFE identity of this trust domain (a mesh
    /// peer), verified against `ca`, instead of checking the host name.
    pub spiffe_trust_domain: Option<String>,
    /// The chain is verified but not the name (envoyproxy/ratelimit's
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`); ignored with `subject_alt_names`.
    pub skip_name_check: bool,
    pub alpn: Vec<Vec<u8>>,
}

fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            for der in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(der);
            }
            Arc::new(roots)
        })
        .clone()
}

pub fn client_config(
    spec: &ClientSpec,
    now: SystemTime,
) -> Result<Arc<ClientConfig>, Vec<SpecError>> {
    let provider = provider();
    let mut errors = Vec::new();
    let roots = match &spec.ca {
        Some(ca) => pem_files::read_roots(ca, now)
            .map_err(|e| errors.push(SpecError::new("caCertificates", e.to_string())))
            .ok()
            .map(|roots| {
                if !spec.system_roots_too {
                    return roots;
                }
                let mut all = (*system_roots()).clone();
                all.roots.extend(roots.roots.iter().cloned());
                Arc::new(all)
            }),
        None => Some(system_roots()),
    };
    let key = match &spec.cert_key {
        Some((cert, key)) => match pem_files::certified_key(cert, key, &provider, now) {
            Ok(k) => Some(Some(k)),
            Err(e) => {
                errors.push(SpecError::new(
                    cert_field(&e, "clientCertificate", "privateKey"),
                    e.to_string(),
                ));
                None
            }
        },
        None => Some(None),
    };
    let (Some(roots), Some(key)) = (roots, key) else {
        return Err(errors);
    };
    let verifier: Arc<dyn ServerCertVerifier> = if spec.insecure_skip_verify {
        Arc::new(NoVerification(provider.clone()))
    } else {
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| vec![SpecError::new("caCertificates", e.to_string())])?;
        match (&spec.spiffe_trust_domain, spec.subject_alt_names.is_empty()) {
            (_, false) => Arc::new(SanVerifier {
                inner: webpki,
                allowed: Allowed::Sans(spec.subject_alt_names.clone()),
            }),
            (Some(td), true) => Arc::new(SanVerifier {
                inner: webpki,
                allowed: Allowed::TrustDomain(format!("spiffe://{td}/")),
            }),
            (None, true) if spec.skip_name_check => Arc::new(SanVerifier {
                inner: webpki,
                allowed: Allowed::AnyName,
            }),
            (None, true) => webpki,
        }
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| vec![SpecError::new("mode", e.to_string())])?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match key {
        Some(k) => builder.with_client_cert_resolver(Arc::new(FixedClientCert(k))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = spec.alpn.clone();
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct FixedClientCert(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for FixedClientCert {
    fn resolve(
        &self,
        _: &[&[u8]],
        _: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The chain is verified as webpki does; the name check is one of `allowed` among the SANs.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<WebPkiServerVerifier>,
    allowed: Allowed,
}

#[derive(Debug)]
enum Allowed {
    /// One of these SANs.
    Sans(Vec<String>),
    /// A URI SAN with this prefix (`spiffe://<td>/`).
    TrustDomain(String),
    /// Any name (the chain alone decides).
    AnyName,
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // The chain is good (the name may not be the host's): the SAN list decides.
            Ok(_)
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => self.check_sans(end_entity),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

impl SanVerifier {
    fn check_sans(
        &self,
        end_entity: &CertificateDer<'_>,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = PeerIdentity::from_leaf(end_entity).is_some_and(|id| match &self.allowed {
            Allowed::Sans(sans) => id.has_san_in(sans),
            Allowed::TrustDomain(prefix) => id.uri_sans.iter().any(|u| u.starts_with(prefix)),
            Allowed::AnyName => true,
        });
        if ok {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }
}

/// `insecureSkipVerify`: any certificate; the handshake signatures are still checked.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
