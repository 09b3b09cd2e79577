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
    /// Only `httpsRedirect` on plain HTTP servers until TLS lands; any other TLS setting is an
    /// error (validation).
    #[serde(default)]
    pub tls: Option<ServerTls>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    pub number: u16,
    /// HTTP | HTTP2 | TCP (HTTPS/GRPC/TLS are rejected by validation until TLS lands).
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
}

impl Port {
    /// The listener protocol, or `None` for a value validation rejects (HTTPS, TLS, unknown).
    pub fn listener_protocol(&self) -> Option<ListenerProtocol> {
        match self.protocol.to_ascii_uppercase().as_str() {
            "HTTP" => Some(ListenerProtocol::Http),
            "HTTP2" | "GRPC" => Some(ListenerProtocol::Http2),
            "TCP" => Some(ListenerProtocol::Tcp),
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
    /// Anything else a TLS block holds (mode, certificates...): kept to be rejected by name.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}
