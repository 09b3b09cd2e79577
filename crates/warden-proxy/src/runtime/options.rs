//! What a caller hands to [`crate::Proxy::start`]: config source, addresses, identity, logging.

pub use crate::core::access_log::AccessLogTarget;
pub use crate::core::metrics::ExtraMetrics;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Where the YAML comes from. Paths are re-read on every reload; inline text is fixed.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// Files or directories (`*.yaml`/`*.yml` read in name order).
    Paths(Vec<PathBuf>),
    /// Embedded YAML, named for error messages (e.g. `<demo>`).
    Inline { name: String, text: String },
}

#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub config: ConfigSource,
    /// Host every Gateway listener binds on.
    pub listen_host: IpAddr,
    /// Admin endpoint; `None` disables it. Port 0 binds a free port.
    pub admin: Option<SocketAddr>,
    /// Worker threads, each with its own single-threaded runtime and SO_REUSEPORT listeners.
    pub concurrency: usize,
    /// `xff_num_trusted_hops`; the gateway always behaves as `use_remote_address: true`.
    /// `None`: the proxy's pod's `proxy.istio.io/config` annotation says, else 0.
    pub num_trusted_proxies: Option<u32>,
    /// Envoy's `xff_trusted_cidrs` (the mesh config's `warden.xffTrustedCidrs`): trusted
    /// proxies named by address instead of counted; refused with a nonzero
    /// `num_trusted_proxies` from any source, as Envoy refuses both.
    pub xff_trusted_cidrs: Option<crate::core::client_addr::TrustedCidrs>,
    /// The mesh config's `defaultConfig` (its `gatewayTopology` and `proxyHeaders`); the pod's
    /// annotation wins field by field, `num_trusted_proxies` over both
    /// (`control::gateway_topology`).
    pub mesh_defaults: warden_config::mesh_config::ProxyConfig,
    /// `meshConfig.extensionProviders` (CUSTOM AuthorizationPolicy providers).
    pub extension_providers: crate::core::identity::ExtensionProviders,
    /// `meshConfig.defaultProviders.metrics` leaves out `prometheus`.
    pub mesh_metrics_off: bool,
    /// The mesh config's tracing defaults (`defaultProviders.tracing`, sampling).
    pub tracing: crate::core::identity::TracingDefaults,
    /// The proxy's own namespace and labels (workload selectors of later policy kinds).
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub access_log: Option<AccessLogTarget>,
    /// What its lines look like (warden's JSON unless the mesh config names an Envoy format).
    pub access_log_format: crate::core::access_log::LineFormat,
    /// Reload when a config file changes (only for [`ConfigSource::Paths`]).
    pub watch_config: bool,
    /// Let a reload through that comes from an empty file or leaves no listener, or a
    /// listener without routes (refused by default: `control::reload_guard`).
    pub allow_empty_config: bool,
    /// Refuse to start from a config that gives a gateway no listener (the command line,
    /// unless `--allow-empty-config`): such a proxy only answers its admin port, which is more
    /// likely a wrong file, namespace or label than an intent.
    pub require_listener: bool,
    /// How every load reads the config (`--skip-kind`: refused kinds the operator skips).
    pub load: warden_config::LoadOptions,
    /// Upstream connect timeout (Istio's default is 10s).
    pub connect_timeout: Duration,
    /// How often RequestAuthentication jwksUri key sets are fetched again (istiod's
    /// `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL`, 20 minutes by default).
    pub jwks_refresh: Duration,
    /// A sidecar's pod addresses and service account (`--pod-ip`, `--service-account`).
    pub pod_ips: Vec<IpAddr>,
    pub service_account: Option<String>,
    /// `Some`: run as a sidecar (outbound and inbound listeners) instead of a gateway.
    pub sidecar: Option<crate::core::identity::SidecarSettings>,
    /// Downstream connections held at most (all listeners); `None`: half the open-file limit
    /// less a reserve (each proxied connection also needs an upstream fd).
    pub max_connections: Option<usize>,
    /// Downstream connections held at most per listener.
    pub max_connections_per_listener: Option<usize>,
    /// Downstream connections one client IP may hold at once.
    pub max_connections_per_ip: Option<usize>,
    /// Request-head, idle, max-duration and stream idle timeouts of downstream connections.
    pub timeouts: crate::core::timeouts::Timeouts,
    /// Scrape-time metrics of another component (`--accel`'s BPF counters).
    pub extra_metrics: Option<ExtraMetrics>,
    /// `--accel` with eBPF capture: lets same-node apps' sends skip plain TCP relays.
    pub splicer: Option<warden_accel::Splicer>,
    /// HTTP filters added to every chain (gateway, sidecar inbound and outbound), each at its
    /// EnvoyFilter-style position (`filters::chain`).
    pub http_filters: crate::filters::chain::ChainExtensions,
    /// Where Gateway `credentialName`s resolve: one folder per name with `tls.crt`, `tls.key`
    /// and `ca.crt` (the keys of Istio's Kubernetes TLS Secrets).
    pub credentials_dir: Option<PathBuf>,
    /// This proxy's mesh certificate (`--mesh-credentials`): ISTIO_MUTUAL upstreams and the
    /// sidecar's mTLS inbound.
    pub mesh: Option<crate::core::identity::MeshCredentials>,
    /// Istio's status ports (15021, 15020): readiness and the apps' rewritten probes.
    pub status: Option<crate::runtime::status_port::StatusSettings>,
    /// The `proxy.istio.io/config` annotation of the proxy's own pod (`--pod-info`); wins
    /// over a Pod of the config for `gatewayTopology` and `proxyHeaders`.
    pub pod_proxy_config: Option<warden_config::proxy_config::ProxyConfig>,
}

impl ProxyOptions {
    /// Who the proxy is, for policy selection and the sidecar's registry lookups.
    pub fn identity(&self) -> crate::core::identity::ProxyIdentity {
        crate::core::identity::ProxyIdentity {
            namespace: self.namespace.clone(),
            labels: self.labels.clone(),
            pod_ips: self.pod_ips.clone(),
            service_account: self.service_account.clone(),
            credentials_dir: self.credentials_dir.clone(),
            mesh: self.mesh.clone(),
            sidecar: self.sidecar.clone(),
            extension_providers: self.extension_providers.clone(),
            mesh_metrics_off: self.mesh_metrics_off,
            tracing: self.tracing.clone(),
        }
    }

    /// Defaults as `warden proxy` uses them, except that the admin endpoint and listeners go on
    /// loopback with free ports only when the config says port 0.
    pub fn new(config: ConfigSource) -> Self {
        ProxyOptions {
            config,
            listen_host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 15000))),
            concurrency: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            num_trusted_proxies: None,
            xff_trusted_cidrs: None,
            mesh_defaults: Default::default(),
            extension_providers: Default::default(),
            mesh_metrics_off: false,
            tracing: Default::default(),
            namespace: "default".into(),
            labels: BTreeMap::new(),
            access_log: None,
            access_log_format: Default::default(),
            watch_config: true,
            allow_empty_config: false,
            require_listener: false,
            load: Default::default(),
            connect_timeout: Duration::from_secs(10),
            jwks_refresh: Duration::from_secs(20 * 60),
            pod_ips: Vec::new(),
            service_account: None,
            sidecar: None,
            max_connections: None,
            max_connections_per_listener: None,
            max_connections_per_ip: None,
            timeouts: crate::core::timeouts::Timeouts::default(),
            extra_metrics: None,
            splicer: None,
            http_filters: Default::default(),
            credentials_dir: None,
            mesh: None,
            status: None,
            pod_proxy_config: None,
        }
    }

    /// Options for tests and embedding: loopback listeners, admin on a free loopback port,
    /// one worker, no file watching.
    pub fn loopback(config: ConfigSource) -> Self {
        ProxyOptions {
            listen_host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            concurrency: 1,
            watch_config: false,
            ..ProxyOptions::new(config)
        }
    }
}
