//! A gateway's `gatewayTopology` as it runs: `numTrustedProxies` and
//! `forwardClientCertDetails` from `--num-trusted-proxies` (that one only), else the proxy's
//! pod's `proxy.istio.io/config` annotation, else the mesh config's
//! `defaultConfig.gatewayTopology`, else Istio's defaults (0, SANITIZE_SET). Read once at
//! start, as Istio does (a changed annotation needs a restarted pod there too).

use crate::control::snapshot::Snapshot;
use crate::pipeline::client_cert;
use warden_config::proxy_config::{ForwardClientCertDetails, GatewayTopology};
use warden_config::Problem;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub num_trusted_proxies: u32,
    pub forward_client_cert: ForwardClientCertDetails,
    /// Where each came from, for logs and `warden check`.
    pub trusted_from: String,
    pub xfcc_from: String,
}

/// Resolve the topology of the proxy `snapshot` describes; `mesh` is the mesh config's
/// `defaultConfig.gatewayTopology`, `flag` `--num-trusted-proxies`. An annotation that does
/// not parse is an error naming the pod.
pub fn resolve(
    snapshot: &Snapshot,
    mesh: GatewayTopology,
    flag: Option<u32>,
) -> Result<Topology, Problem> {
    let id = &snapshot.identity;
    let pc = snapshot.config.proxy_config(&id.namespace, &id.labels)?;
    let pod = GatewayTopology {
        num_trusted_proxies: pc.num_trusted_proxies,
        forward_client_cert_details: pc.forward_client_cert_details,
    };
    let merged = pod.over(mesh);
    let annotation = |pod_name: &Option<String>| {
        format!(
            "gatewayTopology of Pod {}'s proxy.istio.io/config",
            pod_name.as_deref().unwrap_or("?")
        )
    };
    let from_pod = |n: Option<u32>| n.filter(|n| *n != 0).is_some();
    let mesh_from = "the mesh config's defaultConfig.gatewayTopology".to_string();
    let (num_trusted_proxies, trusted_from) = match flag {
        Some(n) => (n, "--num-trusted-proxies".to_string()),
        None => match merged.num_trusted_proxies {
            Some(n) if from_pod(pod.num_trusted_proxies) => (n, annotation(&pc.source)),
            Some(n) => (n, mesh_from.clone()),
            None => (0, "default".to_string()),
        },
    };
    let pod_fccd = pod
        .forward_client_cert_details
        .and_then(ForwardClientCertDetails::defined);
    let (forward_client_cert, xfcc_from) = match merged.forward_client_cert_details {
        Some(m) if pod_fccd.is_some() => (m, annotation(&pc.source)),
        Some(m) => (m, mesh_from),
        None => (
            client_cert::GATEWAY_DEFAULT,
            "Istio's gateway default".to_string(),
        ),
    };
    Ok(Topology {
        num_trusted_proxies,
        forward_client_cert,
        trusted_from,
        xfcc_from,
    })
}

impl Topology {
    /// What `warden check` says about it: the gateway's, or a sidecar's fixed modes.
    pub fn describe(&self, sidecar: bool) -> String {
        if sidecar {
            return "x-forwarded-client-cert: inbound APPEND_FORWARD (By, Hash, Subject, URI, DNS \
                    of a mesh peer's certificate), outbound SANITIZE (Istio's sidecar defaults)\n"
                .to_string();
        }
        let details = if client_cert::adds_element(self.forward_client_cert) {
            " (By, Hash, Cert, Subject, URI, DNS of a client certificate)"
        } else {
            ""
        };
        format!(
            "trusted proxies: {} ({}; --num-trusted-proxies overrides)\n\
             x-forwarded-client-cert: {}{details} ({})\n",
            self.num_trusted_proxies,
            self.trusted_from,
            self.forward_client_cert.name(),
            self.xfcc_from,
        )
    }
}
