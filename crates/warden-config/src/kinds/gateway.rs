//! `networking.istio.io` Gateway (v1beta1, v1).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    #[serde(default)]
    pub servers: Vec<Server>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    pub port: Port,
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// `httpsRedirect` on an HTTP server; how an HTTPS/TLS server terminates or passes TLS.
    #[serde(default)]
    pub tls: Option<ServerTls>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    pub number: u16,
    /// HTTP | HTTP2 | GRPC | TCP | HTTPS | TLS.
    pub protocol: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub target_port: Option<u16>,
}

/// What a listener speaks, from `port.protocol` (case-insensitive; `GRPC` is HTTP/2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ListenerProtocol {
    /// HTTP/1.1 (the proxy may also accept HTTP/2 prior knowledge, as Envoy does).
    Http,
    /// HTTP/2 (`HTTP2`, `GRPC`).
    Http2,
    Tcp,
    /// HTTP over TLS (terminated, or passed through by SNI with `tls.mode: PASSTHROUGH`).
    Https,
    /// Opaque bytes over TLS (terminated and proxied as TCP, or passed through by SNI).
    Tls,
}

impl ListenerProtocol {
    /// HTTPS and TLS servers share a port (one TLS listener, servers chosen by SNI).
    pub fn is_tls(self) -> bool {
        matches!(self, ListenerProtocol::Https | ListenerProtocol::Tls)
    }
}

impl Port {
    /// The listener protocol, or `None` for a value validation rejects (unknown).
    pub fn listener_protocol(&self) -> Option<ListenerProtocol> {
        match self.protocol.to_ascii_uppercase().as_str() {
            "HTTP" => Some(ListenerProtocol::Http),
            "HTTP2" | "GRPC" => Some(ListenerProtocol::Http2),
            "TCP" => Some(ListenerProtocol::Tcp),
            "HTTPS" => Some(ListenerProtocol::Https),
            "TLS" => Some(ListenerProtocol::Tls),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServerTls {
    /// Answer every request of this server with a 301 to `https://`.
    #[serde(default)]
    pub https_redirect: bool,
    /// SIMPLE | MUTUAL | OPTIONAL_MUTUAL | PASSTHROUGH (AUTO_PASSTHROUGH and ISTIO_MUTUAL are
    /// rejected by validation on a gateway).
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub server_certificate: Option<String>,
    #[serde(default)]
    pub private_key: Option<String>,
    /// MUTUAL: the bundle client certificates must chain to.
    #[serde(default)]
    pub ca_certificates: Option<String>,
    /// A folder of `--credentials-dir` holding `tls.crt`, `tls.key` and (MUTUAL) `ca.crt`.
    #[serde(default)]
    pub credential_name: Option<String>,
    /// MUTUAL: a client certificate must carry one of these SANs.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    #[serde(default)]
    pub min_protocol_version: Option<String>,
    #[serde(default)]
    pub max_protocol_version: Option<String>,
    #[serde(default)]
    pub cipher_suites: Vec<String>,
}

/// How a TLS server treats the connection, from `tls.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ServerTlsMode {
    Simple,
    Mutual,
    /// A client certificate is verified when presented, not required.
    OptionalMutual,
    Passthrough,
}

impl ServerTls {
    /// `None` for a mode validation rejects. No mode is SIMPLE (Istio's default).
    pub fn server_mode(&self) -> Option<ServerTlsMode> {
        match self.mode.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("SIMPLE") => Some(ServerTlsMode::Simple),
            Some("MUTUAL") => Some(ServerTlsMode::Mutual),
            Some("OPTIONAL_MUTUAL") => Some(ServerTlsMode::OptionalMutual),
            Some("PASSTHROUGH") => Some(ServerTlsMode::Passthrough),
            _ => None,
        }
    }
}
