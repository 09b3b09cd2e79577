//! What a connection TLS-terminated here carries into the request path.

use warden_tls::PeerIdentity;

/// What a terminated connection carries into the pipeline.
#[derive(Debug, Clone, Default)]
pub struct TlsInfo {
    pub sni: Option<String>,
    /// The client's certificate (MUTUAL / OPTIONAL_MUTUAL, mesh mTLS).
    pub peer: Option<PeerIdentity>,
    /// This hop's `x-forwarded-client-cert` element for the client's certificate, when the
    /// listener's mode adds one (APPEND_FORWARD, SANITIZE_SET): built once per connection.
    pub xfcc: Option<http::HeaderValue>,
    /// The negotiated version as Envoy names it (`TLSv1.2`, `TLSv1.3`), for Lua's `tlsVersion()`.
    pub version: Option<&'static str>,
}

impl TlsInfo {
    /// What a terminated connection carries: `by` this proxy's URI SANs, `details` what its
    /// XFCC element holds, `None` when its mode adds none.
    pub fn of(
        session: &warden_tls::rustls::ServerConnection,
        by: &[String],
        details: Option<warden_tls::xfcc::CertDetails>,
    ) -> TlsInfo {
        let chain = session.peer_certificates().unwrap_or_default();
        let xfcc = details
            .and_then(|d| warden_tls::xfcc::element(by, chain, d))
            .and_then(|e| http::HeaderValue::try_from(e).ok());
        TlsInfo {
            sni: session.server_name().map(str::to_owned),
            peer: chain.first().and_then(PeerIdentity::from_leaf),
            xfcc,
            version: session.protocol_version().and_then(|v| match v {
                warden_tls::rustls::ProtocolVersion::TLSv1_2 => Some("TLSv1.2"),
                warden_tls::rustls::ProtocolVersion::TLSv1_3 => Some("TLSv1.3"),
                _ => None,
            }),
        }
    }
}
