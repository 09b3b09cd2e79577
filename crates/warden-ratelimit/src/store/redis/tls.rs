//! TLS to Redis (`REDIS_TLS`): rustls with the ring provider, named explicitly so the choice
//! does not depend on which rustls features other crates of the build turn on.

use super::super::StoreError;
use super::settings::RedisTls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsConnector;

fn tls_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Redis(format!("REDIS_TLS: {what}: {e}"))
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let what = format!("cannot read certificates from {}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(&what, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(&what, e))?;
    if certs.is_empty() {
        return Err(tls_error(&what, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The connector for `settings`; files are read now, so a bad path fails at startup as in the
/// reference.
pub(super) fn connector(settings: &RedisTls) -> Result<TlsConnector, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // The system's roots, plus REDIS_TLS_CACERT's (the reference appends the file to Go's
    // system pool).
    let mut roots = RootCertStore::empty();
    let (system, _unparsable) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = &settings.ca_cert {
        for cert in read_pem_certs(path)? {
            roots
                .add(cert)
                .map_err(|e| tls_error(&format!("bad CA in {}", path.display()), e))?;
        }
    } else if system == 0 {
        return Err(tls_error(
            "no system CA certificates found",
            "set REDIS_TLS_CACERT",
        ));
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?;
    let builder = if settings.skip_hostname_verification {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| tls_error("verifier", e))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName { inner }))
    } else {
        builder.with_root_certificates(roots)
    };
    let config = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => {
            let chain = read_pem_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| tls_error(&format!("cannot read the key in {}", key.display()), e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error("client certificate", e))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(tls_error(
                "client certificate",
                "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together",
            ))
        }
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The server name to verify (and send as SNI) for `host`.
pub(super) fn server_name(host: &str) -> Result<ServerName<'static>, StoreError> {
    ServerName::try_from(host.to_owned()).map_err(|e| tls_error(&format!("host '{host}'"), e))
}

/// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: the chain, validity and signatures are verified;
/// only a name mismatch is accepted.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
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
