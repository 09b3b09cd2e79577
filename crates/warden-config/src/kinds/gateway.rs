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
