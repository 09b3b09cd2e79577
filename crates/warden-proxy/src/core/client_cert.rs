//! Which `x-forwarded-client-cert` mode each side of a proxy applies, as Istio configures
//! Envoy's `forward_client_cert_details`: a gateway its `gatewayTopology.forwardClientCertDetails`
//! (SANITIZE_SET when unset, `buildGatewayConnectionManager`), a sidecar's inbound side its
//! `proxyHeaders.forwardedClientCert` (APPEND_FORWARD when unset, with Subject, URI and DNS
//! unless `setCurrentClientCertDetails` says otherwise), its outbound side nothing, i.e.
//! Envoy's SANITIZE: an app cannot hand an identity of its own making to the next hop.

use crate::core::destination::Side;
use warden_config::proxy_config::{ForwardClientCertDetails, SetCurrentClientCertDetails};
use warden_tls::xfcc::CertDetails;

/// A gateway's mode when its topology sets none.
pub const GATEWAY_DEFAULT: ForwardClientCertDetails = ForwardClientCertDetails::SanitizeSet;

/// A sidecar inbound side's mode when its ProxyHeaders set none.
pub const INBOUND_DEFAULT: ForwardClientCertDetails = ForwardClientCertDetails::AppendForward;

/// The modes a proxy runs with (`control::gateway_topology` resolves them at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub gateway: ForwardClientCertDetails,
    pub inbound: ForwardClientCertDetails,
    /// What a sidecar inbound side's element holds.
    pub inbound_details: CertDetails,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            gateway: GATEWAY_DEFAULT,
            inbound: INBOUND_DEFAULT,
            inbound_details: CertDetails::SIDECAR_INBOUND,
        }
    }
}

impl Modes {
    /// The mode of the listener on `side`.
    pub fn for_side(&self, side: Side) -> ForwardClientCertDetails {
        match side {
            Side::Gateway => self.gateway,
            Side::Inbound => self.inbound,
            Side::Outbound => ForwardClientCertDetails::Sanitize,
        }
    }

    /// What the element of a connection on `side` holds; `None` when its mode adds none.
    pub fn element_details(&self, side: Side) -> Option<CertDetails> {
        if !adds_element(self.for_side(side)) {
            return None;
        }
        match side {
            Side::Gateway => Some(CertDetails::GATEWAY),
            Side::Inbound => Some(self.inbound_details),
            Side::Outbound => None,
        }
    }
}

/// Istio's inbound details: Subject, URI and DNS unless set false, Cert and Chain when set
/// true (`buildSidecarInboundHTTPOpts`).
pub fn inbound_details(set: Option<SetCurrentClientCertDetails>) -> CertDetails {
    let set = set.unwrap_or_default();
    CertDetails {
        subject: set.subject.unwrap_or(true),
        uri: set.uri.unwrap_or(true),
        dns: set.dns.unwrap_or(true),
        cert: set.cert.unwrap_or(false),
        chain: set.chain.unwrap_or(false),
    }
}

/// The names of the details an element holds besides By and Hash, in Envoy's order.
pub fn detail_names(d: CertDetails) -> String {
    let mut names = vec!["By", "Hash"];
    for (on, name) in [
        (d.cert, "Cert"),
        (d.chain, "Chain"),
        (d.subject, "Subject"),
        (d.uri, "URI"),
        (d.dns, "DNS"),
    ] {
        if on {
            names.push(name);
        }
    }
    names.join(", ")
}

/// Whether `mode` adds this hop's element, so that connections build one at the handshake.
pub fn adds_element(mode: ForwardClientCertDetails) -> bool {
    matches!(
        mode,
        ForwardClientCertDetails::AppendForward | ForwardClientCertDetails::SanitizeSet
    )
}

/// Whether the request's own `x-forwarded-client-cert` goes under `mode` (`mutual`: the
/// client presented a certificate): what [`Forwarding::client_cert`] removes or replaces
/// (it also removes it under APPEND_FORWARD in the rare case of no element, which this
/// leaves to the upstream side).
/// Routes and policies that read headers see the request without it, as they would behind
/// Envoy, which changes the header before routing: a client's forged XFCC never reaches a
/// header match.
///
/// [`Forwarding::client_cert`]: crate::core::forwarding_headers::Forwarding::client_cert
pub fn drops_clients(mode: ForwardClientCertDetails, mutual: bool) -> bool {
    use ForwardClientCertDetails as M;
    match mode {
        M::AlwaysForwardOnly => false,
        _ if !mutual => true,
        M::Sanitize | M::Undefined | M::SanitizeSet => true,
        M::ForwardOnly | M::AppendForward => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::forwarding_headers::{ip_header_value, Forwarding, X_FORWARDED_CLIENT_CERT};
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn drops_clients_says_what_the_forwarding_does_to_the_clients_header() {
        use ForwardClientCertDetails as M;
        let peer = std::net::IpAddr::from([10, 0, 0, 9]);
        let peer_value = ip_header_value(peer);
        let element = HeaderValue::from_static("Hash=h");
        for mode in [
            M::Undefined,
            M::Sanitize,
            M::ForwardOnly,
            M::AppendForward,
            M::SanitizeSet,
            M::AlwaysForwardOnly,
        ] {
            for mutual in [false, true] {
                let mut h = HeaderMap::new();
                h.insert(&X_FORWARDED_CLIENT_CERT, HeaderValue::from_static("forged"));
                Forwarding::new(peer, &peer_value, peer, 0)
                    .client_cert(mode, mutual, Some(&element))
                    .apply(&mut h);
                let kept = h
                    .get(&X_FORWARDED_CLIENT_CERT)
                    .is_some_and(|v| v.as_bytes().starts_with(b"forged"));
                assert_eq!(drops_clients(mode, mutual), !kept, "{mode:?} {mutual}");
            }
        }
    }
}
