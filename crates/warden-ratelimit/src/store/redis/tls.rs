//! TLS to Redis (`REDIS_TLS`), with warden-tls's client config: the certificates and keys are
//! read (and errors worded) as everywhere else in warden, with one crypto provider.
//!
//! Trust: `REDIS_TLS_CACERT` alone when set (the reference adds it to the system pool; a Redis
//! behind a private CA is what the variable is for), else the system roots.
//! `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION` verifies the chain but not the name, as the
//! reference's custom `VerifyPeerCertificate` does.

use super::super::StoreError;
use super::settings::RedisTls;
use std::time::SystemTime;
use warden_tls::client::{client_config, ClientSpec};
use warden_tls::rustls::pki_types::ServerName;
use warden_tls::tokio_rustls::TlsConnector;

fn tls_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Redis(format!("REDIS_TLS: {what}: {e}"))
}

/// The connector for `settings`; files are read now, so a bad path fails at startup as in the
/// reference.
pub(super) fn connector(settings: &RedisTls) -> Result<TlsConnector, StoreError> {
    let cert_key = match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        _ => {
            return Err(tls_error(
                "client certificate",
                "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together",
            ))
        }
    };
    let spec = ClientSpec {
        cert_key,
        ca: settings.ca_cert.clone(),
        skip_name_check: settings.skip_hostname_verification,
        ..ClientSpec::default()
    };
    let config = client_config(&spec, SystemTime::now()).map_err(|errors| {
        let text: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        tls_error("cannot set up", text.join("; "))
    })?;
    Ok(TlsConnector::from(config))
}

/// The server name to verify (and send as SNI) for `host`.
pub(super) fn server_name(host: &str) -> Result<ServerName<'static>, StoreError> {
    ServerName::try_from(host.to_owned()).map_err(|e| tls_error(&format!("host '{host}'"), e))
}
