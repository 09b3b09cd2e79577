//! Who this proxy is: its namespace, labels, pod addresses and service account (which
//! policies select it), its mesh credentials, and a sidecar's settings.

use std::collections::BTreeMap;
use std::time::Duration;
use warden_config::kinds::sidecar::OutboundMode;

/// The proxy's own identity, used by policies with workload selectors, and its role.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ProxyIdentity {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// A sidecar's pod addresses (which registry endpoints are this pod) and service account.
    pub pod_ips: Vec<std::net::IpAddr>,
    pub service_account: Option<String>,
    /// Where `credentialName`s are folders (`--credentials-dir`).
    pub credentials_dir: Option<std::path::PathBuf>,
    /// This proxy's mesh certificate (ISTIO_MUTUAL, PeerAuthentication): `--mesh-credentials`.
    pub mesh: Option<MeshCredentials>,
    /// `None`: an ingress gateway serving Gateway ports.
    pub sidecar: Option<SidecarSettings>,
    /// The mesh config's `extensionProviders` (the external authorizers CUSTOM policies name).
    #[serde(skip)]
    pub extension_providers: ExtensionProviders,
    /// The mesh config's `defaultProviders.metrics` leaves out `prometheus`: Istio's metrics
    /// are written only where a Telemetry names it.
    #[serde(skip)]
    pub mesh_metrics_off: bool,
    /// The mesh config's tracing defaults (`defaultProviders.tracing`,
    /// `defaultConfig.tracing.sampling`).
    #[serde(skip)]
    pub tracing: TracingDefaults,
}

/// The mesh config's tracing defaults.
#[derive(Debug, Clone, Default)]
pub struct TracingDefaults {
    /// The provider of `defaultProviders.tracing` (none: not traced unless Telemetry says).
    pub provider: Option<String>,
    /// `defaultConfig.tracing.sampling` (none: Istio's 1%).
    pub sampling: Option<f64>,
}

impl TracingDefaults {
    pub fn of(mesh: &warden_config::mesh_config::MeshConfig) -> Self {
        TracingDefaults {
            provider: mesh.default_providers.tracing.first().cloned(),
            sampling: mesh.default_config.tracing.sampling,
        }
    }
}

/// `meshConfig.extensionProviders`, shared by every snapshot of a proxy.
pub type ExtensionProviders =
    std::sync::Arc<Vec<warden_config::ext_authz_provider::ExtensionProvider>>;

/// A folder with this workload's `tls.crt`, `tls.key` and the mesh CA's `ca.crt`, and the
/// trust domain peers' SPIFFE identities must be in.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MeshCredentials {
    pub dir: std::path::PathBuf,
    pub trust_domain: String,
}

impl MeshCredentials {
    /// The trust domain of `dir/tls.crt`'s SPIFFE identity.
    pub fn trust_domain_of(dir: &std::path::Path) -> anyhow::Result<String> {
        let path = dir.join("tls.crt");
        let chain = warden_tls::pem_files::read_chain(&path, std::time::SystemTime::now())?;
        let principal = chain
            .first()
            .and_then(warden_tls::PeerIdentity::from_leaf)
            .and_then(|id| id.principal)
            .ok_or_else(|| anyhow::anyhow!("{}: no spiffe:// URI SAN", path.display()))?;
        Ok(principal.split('/').next().unwrap_or_default().to_owned())
    }
}

/// What `warden proxy --mode sidecar` was started with.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SidecarSettings {
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// The mesh config's `outboundTrafficPolicy.mode` (a Sidecar resource for this workload
    /// overrides it).
    pub outbound_mode: OutboundMode,
    /// How long to wait for a client's first bytes on a port whose protocol is not declared
    /// (Istio's `protocolDetectionTimeout`); then it is TCP. `None` waits as long as it takes.
    pub detection_timeout: Option<Duration>,
}

impl Default for SidecarSettings {
    fn default() -> Self {
        SidecarSettings {
            outbound_port: 15001,
            inbound_port: 15006,
            outbound_mode: OutboundMode::AllowAny,
            detection_timeout: None,
        }
    }
}
