//! A Gateway TLS port's compiled servers: which server an SNI selects, what it does with the
//! connection (terminate with its rustls config, or pass the bytes through by SNI routes).

use crate::routing::ports::TcpRoute;
use crate::routing::RouteTable;
use std::sync::Arc;
use warden_tls::rustls::ServerConfig;

/// What one server does with a connection whose SNI selected it.
#[derive(Debug)]
pub enum TlsAction {
    /// Terminate, then serve HTTP (`protocol: HTTPS`) or the port's tcp route (`TLS`).
    Terminate {
        config: Arc<ServerConfig>,
        http: bool,
        /// MUTUAL / OPTIONAL_MUTUAL: client certificates are asked for.
        mutual: bool,
        /// MUTUAL: a client certificate must carry one of these SANs (empty: any).
        client_sans: Vec<String>,
        /// The URI SANs of the server's certificate (read when client certificates are asked
        /// for): `By=` of the XFCC element for a client's certificate.
        local_uri_sans: Arc<[String]>,
    },
    /// Forward the bytes untouched by the port's SNI routes.
    Passthrough,
}

#[derive(Debug)]
pub struct TlsServer {
    /// SNI patterns (`*`, `*.example.com`, exact), the server's hosts without namespace.
    pub hosts: Vec<String>,
    pub action: TlsAction,
}

/// A VirtualService `tls[]` route: the SNI hosts it takes and where they go.
#[derive(Debug)]
pub struct SniRoute {
    pub sni_hosts: Vec<String>,
    pub route: TcpRoute,
}

#[derive(Debug, Default)]
pub struct TlsPortRoutes {
    pub servers: Vec<TlsServer>,
    pub http: RouteTable,
    pub tcp: Option<TcpRoute>,
    pub passthrough: Vec<SniRoute>,
}

impl TlsPortRoutes {
    /// The server a ClientHello's SNI selects (see `warden_tls::sni`).
    pub fn server_for(&self, sni: Option<&str>) -> Option<&TlsServer> {
        let i = warden_tls::sni::pick(
            sni,
            self.servers
                .iter()
                .map(|s| s.hosts.iter().map(String::as_str)),
        )?;
        self.servers.get(i)
    }

    /// The first SNI route that takes `sni`.
    pub fn passthrough_route(&self, sni: Option<&str>) -> Option<&TcpRoute> {
        self.passthrough
            .iter()
            .find(|r| {
                r.sni_hosts
                    .iter()
                    .any(|h| warden_tls::sni::specificity(h, sni).is_some())
            })
            .map(|r| &r.route)
    }
}
