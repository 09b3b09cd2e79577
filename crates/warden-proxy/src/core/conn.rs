//! One downstream connection's context, made once at accept and read by every request on it.

use crate::core::destination::Side;
use crate::core::tls_info::TlsInfo;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One downstream connection.
pub struct ConnCtx {
    pub peer: SocketAddr,
    /// `peer.ip()` rendered once, for `x-forwarded-for`.
    pub peer_value: http::HeaderValue,
    pub local: SocketAddr,
    /// The listener's port as configured (port 0 in config stays 0 here); for a sidecar's
    /// connections, the original destination's port.
    pub port: u16,
    pub side: Side,
    /// A captured connection's original destination, and as an authority for ORIGINAL_DST
    /// clusters (rendered once per connection).
    pub original_dst: Option<(SocketAddr, http::uri::Authority)>,
    /// Set when the connection was TLS terminated here: SNI and the peer's certificate.
    pub tls: Option<Arc<TlsInfo>>,
    /// A sidecar inbound connection's Istio metrics edge (its peer), resolved at its first
    /// request.
    pub istio: std::sync::OnceLock<Arc<crate::core::istio_metrics::Edge>>,
    /// `peer` as the access log writes it (`ip:port`), rendered at the first logged request.
    peer_text: std::sync::OnceLock<Box<str>>,
    framing_violation: Arc<AtomicBool>,
}

impl ConnCtx {
    pub fn new(
        peer: SocketAddr,
        local: SocketAddr,
        port: u16,
        framing_violation: Arc<AtomicBool>,
    ) -> Self {
        ConnCtx {
            peer,
            peer_value: crate::core::forwarding_headers::ip_header_value(peer.ip()),
            local,
            port,
            side: Side::Gateway,
            original_dst: None,
            tls: None,
            istio: std::sync::OnceLock::new(),
            peer_text: std::sync::OnceLock::new(),
            framing_violation,
        }
    }

    /// `peer` as `Display` writes it, rendered once per connection (for the access log).
    pub fn peer_text(&self) -> &str {
        self.peer_text.get_or_init(|| {
            let mut text = String::new();
            crate::core::access_log::write_text::push_socket_addr(&mut text, self.peer);
            text.into_boxed_str()
        })
    }

    /// The connection was TLS terminated here.
    pub fn with_tls(mut self, tls: Arc<TlsInfo>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The client presented a certificate on this connection (MUTUAL, OPTIONAL_MUTUAL with
    /// one, mesh mTLS): what the XFCC modes that keep a client's header ask.
    pub fn client_presented_cert(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.peer.is_some())
    }

    /// A sidecar connection: `side`, headed to `dst` (its port is the connection's port).
    pub fn captured(mut self, side: Side, dst: SocketAddr) -> Self {
        self.side = side;
        self.port = dst.port();
        // Policies' `destination.ip`/`.port` are where the caller was headed, not 15006.
        self.local = dst;
        self.original_dst = crate::core::destination::authority_of(dst).map(|a| (dst, a));
        self
    }

    /// True once if the connection's first request head carried both Content-Length and
    /// Transfer-Encoding (which hyper would otherwise accept, dropping Content-Length).
    pub fn take_framing_violation(&self) -> bool {
        self.framing_violation.load(Ordering::Relaxed)
            && self.framing_violation.swap(false, Ordering::Relaxed)
    }
}
