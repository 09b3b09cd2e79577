//! A connection on a Gateway port with HTTPS/TLS servers: its ClientHello is peeked (nothing
//! read off the socket), its SNI picks the server; a PASSTHROUGH server forwards the untouched
//! bytes by the port's SNI routes, a terminating one completes the handshake with that server's
//! rustls config from the running snapshot (so new certificates apply to new connections from
//! the moment a reload swaps them in, and open ones keep theirs), then serves HTTP (HTTP/1.1
//! or, by ALPN, HTTP/2, on hyper's server) or the port's tcp route. Failures before serving are
//! counted by reason (`warden_downstream_tls_handshake_failures_total`).

use crate::core::conn::ConnCtx;
use crate::core::destination::Side;
use crate::core::tls_info::TlsInfo;
use crate::listeners::accepted::Accepted;
use crate::listeners::fast_h1;
use crate::listeners::tcp;
use crate::listeners::tls_terminate::{self, HANDSHAKE_TIMEOUT};
use crate::snapshot::{PortRoutes, TlsAction};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::net::TcpStream;
use warden_tls::client_hello;

/// Serve a connection accepted on the Gateway TLS port `port` (configured number).
pub async fn serve(stream: TcpStream, port: u16, a: Accepted) {
    let shared = a.worker.shared.clone();
    let metrics = &shared.metrics;
    let hello = match client_hello::peek(&stream, HANDSHAKE_TIMEOUT).await {
        Ok(h) => h,
        Err(e) => {
            metrics.tls_handshake_failed(e.reason());
            return;
        }
    };
    let snapshot = shared.snapshot.load_full();
    let Some(PortRoutes::Tls(routes)) = snapshot.routes_for_port(port) else {
        return;
    };
    let sni = hello.sni.as_deref();
    let Some(server) = routes.server_for(sni) else {
        tracing::debug!(?sni, port, "no server for this SNI; closing");
        metrics.tls_handshake_failed("no_matching_server");
        return;
    };
    let (config, http, client_sans, by) = match &server.action {
        TlsAction::Passthrough => {
            let Some(route) = routes.passthrough_route(sni) else {
                tracing::debug!(?sni, port, "no tls route for this SNI; closing");
                metrics.tls_handshake_failed("no_sni_route");
                return;
            };
            return tcp::proxy_passthrough(stream, route, port, &a.worker, a.connect_timeout).await;
        }
        TlsAction::Terminate {
            config,
            http,
            client_sans,
            local_uri_sans,
            ..
        } => (config.clone(), *http, client_sans, local_uri_sans.clone()),
    };
    let local = stream.local_addr().unwrap_or(a.peer);
    let Some(tls) = tls_terminate::handshake(stream, config, metrics, a.peer).await else {
        return;
    };
    let details = shared.client_cert.element_details(Side::Gateway);
    let mut info = TlsInfo::of(tls.get_ref().1, &by, details);
    // The SNI the server was chosen by (rustls reports the same one).
    info.sni = hello.sni.clone();
    if !client_sans.is_empty()
        && !info
            .peer
            .as_ref()
            .is_some_and(|p| p.has_san_in(client_sans))
    {
        tracing::debug!(peer = %a.peer, "client certificate SAN not in subjectAltNames; closing");
        metrics.tls_handshake_failed("client_san_not_allowed");
        return;
    }
    let info = Arc::new(info);
    if !http {
        let Some(route) = routes.tcp.as_ref() else {
            tracing::debug!(port, "no tcp route; closing");
            return;
        };
        return tcp::proxy_decrypted(
            tls,
            a.peer,
            &info,
            route,
            (port, local, None),
            Side::Gateway,
            &a.worker,
            a.connect_timeout,
        )
        .await;
    }
    drop(snapshot);
    let violation = Arc::new(AtomicBool::new(false));
    let conn = ConnCtx::new(a.peer, local, port, violation.clone()).with_tls(info);
    fast_h1::serve_tls(tls, bytes::BytesMut::new(), a.serving(conn, violation)).await;
}
