//! Which `x-forwarded-client-cert` mode each side of a proxy applies, as Istio configures
//! Envoy's `forward_client_cert_details`: a gateway its `gatewayTopology.forwardClientCertDetails`
//! (SANITIZE_SET when unset, `buildGatewayConnectionManager`), a sidecar's inbound side
//! APPEND_FORWARD (Istio's ProxyHeaders default), its outbound side nothing, i.e. Envoy's
//! SANITIZE: an app cannot hand an identity of its own making to the next hop.

use crate::downstream::destination::Side;
use warden_config::proxy_config::ForwardClientCertDetails;

/// A gateway's mode when its topology sets none.
pub const GATEWAY_DEFAULT: ForwardClientCertDetails = ForwardClientCertDetails::SanitizeSet;

/// The mode of the listener on `side`; `gateway` is the gateway's resolved one.
pub fn mode_for(side: Side, gateway: ForwardClientCertDetails) -> ForwardClientCertDetails {
    match side {
        Side::Gateway => gateway,
        Side::Inbound => ForwardClientCertDetails::AppendForward,
        Side::Outbound => ForwardClientCertDetails::Sanitize,
    }
}

/// Whether `mode` adds this hop's element, so that connections build one at the handshake.
pub fn adds_element(mode: ForwardClientCertDetails) -> bool {
    matches!(
        mode,
        ForwardClientCertDetails::AppendForward | ForwardClientCertDetails::SanitizeSet
    )
}
