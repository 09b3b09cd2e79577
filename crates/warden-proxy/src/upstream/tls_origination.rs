//! TLS to an upstream (DestinationRule `trafficPolicy.tls`): the cluster's rustls client config
//! and SNI, a hyper client over hyper-rustls for its HTTP requests (HTTP/1.1 or HTTP/2 by the
//! cluster's protocol, offered by ALPN), and a TLS connect for its TCP routes.

use crate::upstream::body::ProxyBody;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;
use warden_tls::rustls::pki_types::ServerName;
use warden_tls::rustls::ClientConfig;

pub type TlsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, ProxyBody>;

pub struct UpstreamTls {
    pub config: Arc<ClientConfig>,
    /// DestinationRule `sni`; else the endpoint's host (a name, or an IP: no SNI is sent).
    pub sni: Option<ServerName<'static>>,
    pub http2: bool,
    /// Made at the first request (it needs the worker's connect timeout), shared by workers.
    client: OnceLock<TlsClient>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("sni", &self.sni)
            .field("http2", &self.http2)
            .finish()
    }
}

impl UpstreamTls {
    pub fn new(config: Arc<ClientConfig>, sni: Option<ServerName<'static>>, http2: bool) -> Self {
        UpstreamTls {
            config,
            sni,
            http2,
            client: OnceLock::new(),
        }
    }

    pub fn client(&self, connect_timeout: Duration) -> &TlsClient {
        self.client.get_or_init(|| {
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_nodelay(true);
            http.set_connect_timeout(Some(connect_timeout));
            http.set_keepalive(Some(Duration::from_secs(60)));
            let builder = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*self.config).clone())
                .https_only();
            let builder = match &self.sni {
                Some(name) => builder.with_server_name_resolver(
                    hyper_rustls::FixedServerNameResolver::new(name.clone()),
                ),
                None => builder,
            };
            // HTTP/1.1 goes without ALPN (hyper-rustls sets it only for h2; a mesh peer tells
            // HTTP from TCP by the first decrypted bytes where the port does not say).
            let connector = if self.http2 {
                builder.enable_http2().wrap_connector(http)
            } else {
                builder.enable_http1().wrap_connector(http)
            };
            let mut client = Client::builder(TokioExecutor::new());
            client
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(Duration::from_secs(60));
            if self.http2 {
                client.http2_only(true);
            }
            client.build(connector)
        })
    }

    /// TLS over an open TCP connection to `host` (a TCP route's upstream).
    pub async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<warden_tls::tokio_rustls::client::TlsStream<TcpStream>> {
        let name = match &self.sni {
            Some(n) => n.clone(),
            None => ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        };
        warden_tls::tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
    }
}
