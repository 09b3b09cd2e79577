//! The proxy settings Istio keeps in ProxyConfig, as a proxy runs with them: a gateway's
//! `gatewayTopology` (`numTrustedProxies`, `forwardClientCertDetails`) and a sidecar inbound
//! side's XFCC `proxyHeaders` (`forwardedClientCert`, `setCurrentClientCertDetails`). Each
//! from the proxy's pod's `proxy.istio.io/config` annotation, else the mesh config's
//! `defaultConfig`, else Istio's defaults (0, SANITIZE_SET at a gateway, APPEND_FORWARD with
//! Subject, URI and DNS at a sidecar's inbound side); `--num-trusted-proxies` wins over both.
//! Read once at start, as Istio does (a changed annotation needs a restarted pod there too).

use crate::core::client_cert::{self, Modes};
use crate::snapshot::Snapshot;
use warden_config::mesh_config::ProxyConfig as MeshDefaults;
use warden_config::proxy_config::ForwardClientCertDetails;
use warden_config::Problem;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub num_trusted_proxies: u32,
    pub client_cert: Modes,
    /// Where each came from, for logs and `warden check`.
    pub trusted_from: String,
    pub gateway_xfcc_from: String,
    pub inbound_xfcc_from: String,
}

/// Resolve the settings of the proxy `snapshot` describes; `mesh` is the mesh config's
/// `defaultConfig`, `flag` `--num-trusted-proxies`, `own` the annotation of the proxy's pod
/// from its downward-API files (it wins over a Pod of the config). An annotation that does not
/// parse is an error naming the pod.
// A located problem is large, and this runs once at start.
#[allow(clippy::result_large_err)]
pub fn resolve(
    snapshot: &Snapshot,
    mesh: &MeshDefaults,
    flag: Option<u32>,
    own: Option<&warden_config::proxy_config::ProxyConfig>,
) -> Result<Topology, Problem> {
    let id = &snapshot.identity;
    let pc = match own {
        Some(pc) => pc.clone(),
        None => snapshot.config.proxy_config(&id.namespace, &id.labels)?,
    };
    let pod = warden_config::proxy_config::GatewayTopology {
        num_trusted_proxies: pc.num_trusted_proxies,
        forward_client_cert_details: pc.forward_client_cert_details,
    };
    let merged = pod.over(mesh.gateway_topology);
    let annotation = |what: &str| {
        format!(
            "{what} of Pod {}'s proxy.istio.io/config",
            pc.source.as_deref().unwrap_or("?")
        )
    };
    let from_mesh = |what: &str| format!("the mesh config's defaultConfig.{what}");
    let (num_trusted_proxies, trusted_from) = match flag {
        Some(n) => (n, "--num-trusted-proxies".to_string()),
        None => match merged.num_trusted_proxies {
            Some(n) if pod.num_trusted_proxies.is_some_and(|n| n != 0) => {
                (n, annotation("gatewayTopology"))
            }
            Some(n) => (n, from_mesh("gatewayTopology")),
            None => (0, "default".to_string()),
        },
    };
    let defined =
        |m: Option<ForwardClientCertDetails>| m.and_then(ForwardClientCertDetails::defined);
    let (gateway, gateway_xfcc_from) = match merged.forward_client_cert_details {
        Some(m) if defined(pod.forward_client_cert_details).is_some() => {
            (m, annotation("gatewayTopology"))
        }
        Some(m) => (m, from_mesh("gatewayTopology")),
        None => (
            client_cert::GATEWAY_DEFAULT,
            "Istio's gateway default".into(),
        ),
    };
    let headers = pc.proxy_headers.over(mesh.proxy_headers);
    let pod_set = defined(pc.proxy_headers.forwarded_client_cert).is_some()
        || pc.proxy_headers.set_current_client_cert_details.is_some();
    let mesh_set = defined(mesh.proxy_headers.forwarded_client_cert).is_some()
        || mesh.proxy_headers.set_current_client_cert_details.is_some();
    let inbound_xfcc_from = match (pod_set, mesh_set) {
        (true, _) => annotation("proxyHeaders"),
        (false, true) => from_mesh("proxyHeaders"),
        (false, false) => "Istio's sidecar default".to_string(),
    };
    Ok(Topology {
        num_trusted_proxies,
        client_cert: Modes {
            gateway,
            inbound: defined(headers.forwarded_client_cert).unwrap_or(client_cert::INBOUND_DEFAULT),
            inbound_details: client_cert::inbound_details(headers.set_current_client_cert_details),
        },
        trusted_from,
        gateway_xfcc_from,
        inbound_xfcc_from,
    })
}

impl Topology {
    /// What `warden check` says about it: the gateway's settings, or a sidecar's.
    pub fn describe(&self, sidecar: bool) -> String {
        use crate::core::destination::Side;
        let m = &self.client_cert;
        let details = |side| {
            m.element_details(side).map_or(String::new(), |d| {
                format!(
                    " ({} of a client certificate)",
                    client_cert::detail_names(d)
                )
            })
        };
        if sidecar {
            return format!(
                "x-forwarded-client-cert: inbound {}{} ({}), outbound SANITIZE (Istio's sidecar \
                 outbound)\n",
                m.inbound.name(),
                details(Side::Inbound),
                self.inbound_xfcc_from,
            );
        }
        format!(
            "trusted proxies: {} ({}; --num-trusted-proxies overrides)\n\
             x-forwarded-client-cert: {}{} ({})\n",
            self.num_trusted_proxies,
            self.trusted_from,
            m.gateway.name(),
            details(Side::Gateway),
            self.gateway_xfcc_from,
        )
    }
}
