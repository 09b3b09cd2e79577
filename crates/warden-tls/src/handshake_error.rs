//! A failed handshake's reason, as the label of `warden_tls_handshake_failures_total`.

use rustls::{AlertDescription, CertificateError, Error};

/// The reason of an error from tokio-rustls' accept/connect (an `io::Error` wrapping a rustls
/// error, or the socket's own error).
pub fn reason(e: &std::io::Error) -> &'static str {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<Error>()) {
        return tls_reason(tls);
    }
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "eof",
        std::io::ErrorKind::TimedOut => "timeout",
        std::io::ErrorKind::InvalidData => "not_tls",
        _ => "io",
    }
}

pub fn tls_reason(e: &Error) -> &'static str {
    match e {
        Error::NoCertificatesPresented => "no_client_certificate",
        Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "unknown_ca",
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "certificate_expired"
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "certificate_name_mismatch"
            }
            _ => "bad_certificate",
        },
        Error::AlertReceived(a) => match a {
            AlertDescription::UnknownCA => "peer_rejected_certificate",
            AlertDescription::BadCertificate | AlertDescription::CertificateUnknown => {
                "peer_rejected_certificate"
            }
            _ => "peer_alert",
        },
        Error::NoApplicationProtocol => "no_alpn_match",
        Error::PeerIncompatible(_) => "incompatible",
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => "not_tls",
        _ => "other",
    }
}
