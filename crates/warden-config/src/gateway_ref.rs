//! References from a VirtualService's `gateways:` to Gateway documents.
//!
//! Forms: `name` (the VirtualService's own namespace), `namespace/name`, and the reserved `mesh`
//! (sidecars; not served by the gateway proxy).

use crate::document::Doc;
use crate::kinds::gateway::Gateway;

/// A parsed `gateways:` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayRef<'a> {
    Mesh,
    Named { namespace: &'a str, name: &'a str },
}

impl<'a> GatewayRef<'a> {
    /// Parse `reference` as written in a VirtualService in `vs_namespace`.
    pub fn parse(vs_namespace: &'a str, reference: &'a str) -> Self {
        if reference == "mesh" {
            return GatewayRef::Mesh;
        }
        match reference.split_once('/') {
            Some((namespace, name)) => GatewayRef::Named { namespace, name },
            None => GatewayRef::Named {
                namespace: vs_namespace,
                name: reference,
            },
        }
    }
}

impl std::fmt::Display for GatewayRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayRef::Mesh => f.write_str("mesh"),
            GatewayRef::Named { namespace, name } => write!(f, "{namespace}/{name}"),
        }
    }
}

/// Does `reference`, written in a VirtualService in `vs_namespace`, name `gateway`?
pub fn gateway_matches(vs_namespace: &str, reference: &str, gateway: &Doc<Gateway>) -> bool {
    match GatewayRef::parse(vs_namespace, reference) {
        GatewayRef::Mesh => false,
        GatewayRef::Named { namespace, name } => {
            name == gateway.metadata.name && namespace == gateway.metadata.namespace_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Metadata;

    fn gw(ns: Option<&str>, name: &str) -> Doc<Gateway> {
        Doc {
            file: "t.yaml".into(),
            index: 1,
            api_version: "networking.istio.io/v1".into(),
            kind: "Gateway".into(),
            metadata: Metadata {
                name: name.into(),
                namespace: ns.map(Into::into),
                ..Metadata::default()
            },
            spec: Gateway::default(),
        }
    }

    #[test]
    fn resolves_short_qualified_and_mesh_references() {
        let g = gw(Some("istio-system"), "ingressgateway");
        assert!(gateway_matches(
            "default",
            "istio-system/ingressgateway",
            &g
        ));
        assert!(!gateway_matches("default", "ingressgateway", &g));
        assert!(gateway_matches("istio-system", "ingressgateway", &g));
        assert!(!gateway_matches("istio-system", "mesh", &g));
        let d = gw(None, "gw");
        assert!(gateway_matches("default", "gw", &d));
        assert!(gateway_matches("x", "default/gw", &d));
        assert_eq!(GatewayRef::parse("ns", "gw").to_string(), "ns/gw");
    }
}
