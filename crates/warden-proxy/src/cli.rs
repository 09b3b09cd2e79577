//! Command-line arguments of `warden proxy`, `warden check` and `warden ratelimit-config`.

use crate::core::timeouts::Timeouts;
use crate::runtime::check;
use crate::runtime::options::{ConfigSource, ProxyOptions};
use crate::runtime::proxy::Proxy;
use crate::snapshot::{ProxyIdentity, SidecarSettings, Snapshot};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use warden_config::mesh_config::MeshConfig;

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
    /// Worker threads, at least 1 (default: number of cores).
    #[arg(long, value_parser = parse_concurrency)]
    pub concurrency: Option<usize>,
    /// Admin endpoint address (`/ready`, `/stats/prometheus`, `/config_dump`, `/listeners`):
    /// `IP:PORT` or `NAME:PORT` (the name is resolved at start; an IPv4 address preferred).
    #[arg(long, default_value = "127.0.0.1:15000", value_parser = resolve_addr)]
    pub admin: SocketAddr,
    /// Host the Gateway listeners bind on.
    #[arg(long, default_value = "0.0.0.0")]
    pub listen_host: IpAddr,
    /// Trusted proxies in front of the gateway (x-forwarded-for hops to trust). Default: the
    /// `gatewayTopology.numTrustedProxies` of the `proxy.istio.io/config` annotation of this
    /// proxy's pod in the config (a Pod in the proxy's namespace with all its labels), else 0.
    #[arg(long)]
    pub num_trusted_proxies: Option<u32>,
    /// The proxy's namespace (for policy selectors); default: the `namespace` file of
    /// --pod-info, else `default`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// The proxy's labels, `k=v` (repeatable; for policy workload selectors).
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Serve one Kubernetes Gateway API Gateway, `NAMESPACE/NAME`, as Istio's auto-deployed
    /// gateway does: sets the namespace and the label `gateway.networking.k8s.io/gateway-name`
    /// (Istio Gateways whose selector picks the labels are served too). Default: every Gateway.
    #[arg(long, value_parser = parse_gateway)]
    pub gateway: Option<(String, String)>,
    /// JSON-lines access log: a file path, or `-` for stdout. Off by default.
    #[arg(long)]
    pub access_log: Option<String>,
    /// How long SIGTERM waits for in-flight requests, e.g. `5s` (default 5s; mesh config
    /// `defaultConfig.terminationDrainDuration`).
    #[arg(long, value_parser = parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Do not reload when config files change (SIGHUP still reloads).
    #[arg(long)]
    pub no_watch: bool,
    /// Start from a config that gives this proxy no listener, and apply reloads that come from
    /// an empty config file or leave no listener, or a listener without routes (refused by
    /// default: the start fails; a reload is counted and the running config stays).
    #[arg(long)]
    pub allow_empty_config: bool,
    /// Load without the documents of a kind warden refuses (`RequestAuthentication`,
    /// `WasmPlugin`, Gateway API kinds it does not implement...), `Kind` or `Kind.group`
    /// (repeatable): requests then do not get what those documents would do to them. Each load
    /// logs what it skipped.
    #[arg(long = "skip-kind", value_parser = parse_skip_kind)]
    pub skip_kinds: Vec<String>,
    /// Timeouts and connection limits in Istio's MeshConfig shape (`connectTimeout`,
    /// `protocolDetectionTimeout`, `defaultConfig.terminationDrainDuration`, and a `warden:`
    /// section with Envoy's names: `requestHeadersTimeout`, `idleTimeout`,
    /// `maxConnectionDuration`, `streamIdleTimeout`, `maxConnections`,
    /// `maxConnectionsPerListener`, `maxConnectionsPerIp`, `xffTrustedCidrs`). A flag given on
    /// the command line wins over the file. Read at start.
    #[arg(long)]
    pub mesh_config: Option<PathBuf>,
    /// Downstream connections held at most over all listeners; beyond, new ones are closed at
    /// accept (default: half the open-file limit, which is raised to its hard limit at start).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Downstream connections held at most per listener.
    #[arg(long)]
    pub max_connections_per_listener: Option<usize>,
    /// Connections one client IP may hold at once (all listeners); beyond, new ones from it are
    /// closed at accept. Off by default (clients behind one NAT share an address).
    #[arg(long)]
    pub max_connections_per_ip: Option<usize>,
    /// How often RequestAuthentication `jwksUri` key sets are fetched again (istiod's
    /// `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL`; default 20m).
    #[arg(long, value_parser = parse_duration)]
    pub jwks_refresh_interval: Option<Duration>,
    /// A request head must be complete this long after its first byte (else 408 and close);
    /// `0s` turns it off. Envoy's `request_headers_timeout` (default 10s).
    #[arg(long, value_parser = parse_duration)]
    pub request_headers_timeout: Option<Duration>,
    /// A keep-alive connection with no request in progress is closed after this long; `0s`
    /// turns it off. Envoy's `idle_timeout` (default 1h).
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Connections are closed (between requests, or with a GOAWAY) after this long; off by
    /// default. Envoy's `max_connection_duration`.
    #[arg(long, value_parser = parse_duration)]
    pub max_connection_duration: Option<Duration>,
    /// A request (HTTP/1 or an HTTP/2 stream) whose body stops arriving for this long is ended:
    /// 408 `stream timeout` if nothing was answered yet, else reset; `0s` turns it off.
    /// Envoy's `stream_idle_timeout` (default 5m).
    #[arg(long, value_parser = parse_duration)]
    pub stream_idle_timeout: Option<Duration>,
    /// Istio's status ports, on --listen-host (repeatable; `warden inject` sets 15021 and
    /// 15020): `/healthz/ready` (200 once the config is loaded and the listeners are bound,
    /// 503 while draining), the app probes of --app-probers under `/app-health/`, and
    /// `/stats/prometheus`.
    #[arg(long = "status-port")]
    pub status_ports: Vec<u16>,
    /// The app containers' original probes, by the `/app-health/...` path their rewritten
    /// probes ask for (JSON, as Istio's injector writes it); run against the app on the first
    /// --pod-ip, else 127.0.0.1.
    #[arg(long, env = crate::runtime::app_probers::ENV, hide_env_values = true)]
    pub app_probers: Option<String>,
    #[command(flatten)]
    pub role: RoleArgs,
    #[command(flatten)]
    pub accel: AccelFlags,
}

/// A sidecar's eBPF acceleration (warden-accel).
#[derive(clap::Args, Debug, Default)]
pub struct AccelFlags {
    /// Sidecar: short-circuit same-node socket traffic with eBPF (sockops + sk_msg), attached
    /// to this process's cgroup (or --accel-cgroup) while it runs. Needs CAP_BPF and
    /// CAP_NET_ADMIN, cgroup2 and kernel support; when anything is missing the proxy says
    /// what and runs unaccelerated.
    #[arg(long)]
    pub accel: bool,
    /// Sidecar with --accel: who captures the pod's traffic. `iptables`: `warden capture`'s
    /// rules (only legs whose 4-tuples mirror are short-circuited); `ebpf`: cgroup
    /// connect/getsockopt programs capture the pod's calls and same-node meshed callers
    /// without iptables, every leg short-circuited (callers from other nodes still need
    /// `warden capture`'s inbound rules, which can stay installed).
    #[arg(long, value_enum, default_value_t = warden_accel::Capture::Iptables)]
    pub capture: warden_accel::Capture,
    /// Sidecar with --accel: which legs are short-circuited. `all`: app -> sidecar,
    /// sidecar -> sidecar and sidecar -> app; a *blocking* recv() in the app can then return
    /// EAGAIN when its socket changes state (its own shutdown(SHUT_WR)), a kernel behaviour
    /// of sockets in a sockmap. `sidecars`: only sidecar -> sidecar (needs --capture ebpf);
    /// the app's sockets stay plain TCP.
    #[arg(long, value_enum, default_value_t = warden_accel::Legs::All)]
    pub accel_legs: warden_accel::Legs,
    /// Sidecar with --accel: the pod's cgroup2 directory (default: this process's own; the
    /// cgroup2 root only when named here).
    #[arg(long, requires = "accel")]
    pub accel_cgroup: Option<PathBuf>,
    /// warden's own bpffs, where sidecars of this node share their maps (mounted if needed).
    #[arg(long, default_value = warden_accel::DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
    /// Sidecar with --capture ebpf: what is captured, as `warden capture` takes it (Istio's
    /// traffic.sidecar.istio.io/* annotations).
    #[command(flatten)]
    pub selection: warden_capture::SelectionArgs,
}

impl AccelFlags {
    /// Load and attach when asked (a sidecar only); `None`, with the reasons logged, when
    /// acceleration is off. Flags that contradict each other are an error.
    fn start(&self, role: &RoleArgs) -> anyhow::Result<Option<warden_accel::Accelerator>> {
        if self.accel && role.mode == Mode::Sidecar {
            if let Err(e) = self.accel_legs.with(self.capture) {
                anyhow::bail!("--accel-legs: {e}");
            }
        }
        // Selections that would not apply change what gets captured: refused, not ignored.
        let ebpf_capture = self.accel && self.capture == warden_accel::Capture::Ebpf;
        if !ebpf_capture && !self.selection.is_default() {
            anyhow::bail!(
                "the capture selections (--exclude-outbound-ports, ...) are for --accel --capture ebpf; with iptables capture give them to `warden capture`"
            );
        }
        let scope = warden_accel::Scope::from_args(
            &self.selection,
            warden_accel::euid(),
            role.outbound_port,
            role.inbound_port,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(self.attach(role, scope))
    }

    fn attach(
        &self,
        role: &RoleArgs,
        scope: warden_accel::Scope,
    ) -> Option<warden_accel::Accelerator> {
        if !self.accel {
            if self.capture == warden_accel::Capture::Ebpf {
                tracing::warn!(
                    "--capture ebpf needs --accel; the pod's traffic is not captured by eBPF"
                );
            }
            return None;
        }
        if role.mode != Mode::Sidecar {
            tracing::warn!("--accel is for --mode sidecar; ignored");
            return None;
        }
        let req = warden_accel::AccelRequest {
            scope,
            cgroup: self.accel_cgroup.clone(),
            bpffs: self.bpffs.clone(),
            capture: self.capture,
            legs: self.accel_legs,
            // The sidecar's own connect()s are the ones not captured.
            proxy_uid: warden_accel::euid(),
            outbound_port: role.outbound_port,
            inbound_port: role.inbound_port,
            pod_ips: role.pod_ips.clone(),
        };
        match warden_accel::Accelerator::start(&req) {
            Ok(a) => {
                tracing::info!("eBPF acceleration on: {}", a.describe());
                Some(a)
            }
            Err(why) => {
                tracing::warn!("eBPF acceleration off, running unaccelerated; missing: {why}");
                None
            }
        }
    }
}

/// Gateway or sidecar, and who the sidecar is (shared by `warden proxy` and `warden check`).
#[derive(clap::Args, Debug)]
pub struct RoleArgs {
    /// `gateway` serves the Gateway ports; `sidecar` serves captured traffic on the outbound
    /// and inbound ports (see `warden capture`), routing by the service registry and the
    /// VirtualServices bound to `mesh`.
    #[arg(long, value_enum, default_value_t = Mode::Gateway)]
    pub mode: Mode,
    /// Sidecar: the outbound listener's port (Istio's 15001).
    #[arg(long, default_value_t = 15001)]
    pub outbound_port: u16,
    /// Sidecar: the inbound listener's port (Istio's 15006).
    #[arg(long, default_value_t = 15006)]
    pub inbound_port: u16,
    /// Sidecar: this pod's address (repeatable); the registry's endpoints with it are this pod.
    #[arg(long = "pod-ip")]
    pub pod_ips: Vec<IpAddr>,
    /// Sidecar: this pod's service account (Istio's injector sets `SERVICE_ACCOUNT` from
    /// the downward API).
    #[arg(long, env = "SERVICE_ACCOUNT")]
    pub service_account: Option<String>,
    /// A downward-API folder (Istio mounts one at /etc/istio/pod): its `labels` stand in for
    /// --label and its `namespace` for --namespace when those are not given. Read at start.
    #[arg(long)]
    pub pod_info: Option<PathBuf>,
    /// Sidecar: where calls to unknown destinations go (the mesh config's
    /// `outboundTrafficPolicy.mode`; a Sidecar resource for this workload overrides it).
    #[arg(long, default_value = "ALLOW_ANY", value_parser = parse_outbound_mode)]
    pub outbound_traffic_policy: warden_config::kinds::sidecar::OutboundMode,
    /// Sidecar: how long to wait for a client's first bytes on a port whose protocol is not
    /// declared before treating it as TCP (Istio's `protocolDetectionTimeout`; default 0s,
    /// which waits).
    #[arg(long, value_parser = parse_duration)]
    pub protocol_detection_timeout: Option<Duration>,
    /// Where Gateway and DestinationRule `credentialName`s resolve: one folder per name with
    /// `tls.crt`, `tls.key` and `ca.crt` (the keys of Istio's Kubernetes TLS Secrets).
    #[arg(long)]
    pub credentials_dir: Option<PathBuf>,
    /// This workload's mesh certificate: a folder with tls.crt (its SPIFFE identity), tls.key
    /// and the mesh CA's ca.crt (`warden ca issue --out`), reloaded when the files change.
    /// Needed for ISTIO_MUTUAL upstreams and PeerAuthentication STRICT/PERMISSIVE inbound.
    #[arg(long)]
    pub mesh_credentials: Option<PathBuf>,
}

impl RoleArgs {
    /// The proxy's namespace and labels from the flags, else the --pod-info files.
    pub fn identity(
        &self,
        namespace: Option<String>,
        labels: Vec<(String, String)>,
    ) -> anyhow::Result<(String, BTreeMap<String, String>)> {
        Ok(self.pod_info()?.identity(namespace, labels))
    }

    /// The --pod-info files (empty without the flag).
    pub fn pod_info(&self) -> anyhow::Result<warden_config::pod_info::PodInfo> {
        Ok(match &self.pod_info {
            Some(dir) => warden_config::pod_info::PodInfo::read(dir)?,
            None => Default::default(),
        })
    }

    /// `--mesh-credentials` with the trust domain read from its certificate's SPIFFE URI.
    pub fn mesh_credentials(&self) -> anyhow::Result<Option<crate::snapshot::MeshCredentials>> {
        let Some(dir) = &self.mesh_credentials else {
            return Ok(None);
        };
        let trust_domain = crate::snapshot::MeshCredentials::trust_domain_of(dir)?;
        Ok(Some(crate::snapshot::MeshCredentials {
            dir: dir.clone(),
            trust_domain,
        }))
    }
}

impl Default for RoleArgs {
    /// A gateway, with the flags' defaults.
    fn default() -> Self {
        RoleArgs {
            mode: Mode::Gateway,
            outbound_port: 15001,
            inbound_port: 15006,
            pod_ips: Vec::new(),
            service_account: None,
            pod_info: None,
            outbound_traffic_policy: warden_config::kinds::sidecar::OutboundMode::AllowAny,
            protocol_detection_timeout: None,
            credentials_dir: None,
            mesh_credentials: None,
        }
    }
}

impl RoleArgs {
    fn sidecar(&self) -> Option<SidecarSettings> {
        (self.mode == Mode::Sidecar).then(|| SidecarSettings {
            outbound_port: self.outbound_port,
            inbound_port: self.inbound_port,
            outbound_mode: self.outbound_traffic_policy,
            detection_timeout: self.protocol_detection_timeout.and_then(nonzero),
        })
    }
}

/// The `proxy.istio.io/config` annotation of the proxy's pod, from its downward-API files;
/// warns about each of its fields and each of the pod's Istio annotations that nothing in
/// warden acts on. An annotation that does not parse stops the start.
fn own_proxy_config(
    info: &warden_config::pod_info::PodInfo,
) -> anyhow::Result<Option<warden_config::proxy_config::ProxyConfig>> {
    use warden_config::proxy_config::{parse_annotation, ANNOTATION};
    let Some(annotations) = &info.annotations else {
        return Ok(None);
    };
    for name in warden_config::istio_annotations::unused(annotations) {
        tracing::warn!("pod annotation {name} is not supported by warden: ignored");
    }
    let Some(text) = annotations.get(ANNOTATION) else {
        return Ok(None);
    };
    let mut config = parse_annotation(text).map_err(|e| anyhow::anyhow!("--pod-info: {e}"))?;
    for field in &config.unused {
        tracing::warn!("{ANNOTATION}: {field} is not supported by warden: ignored");
    }
    config.source = Some(match (&info.namespace, &info.name) {
        (Some(ns), Some(name)) => format!("{ns}/{name} (--pod-info)"),
        _ => "--pod-info".into(),
    });
    tracing::info!(
        drain = ?config.termination_drain_duration,
        concurrency = ?config.concurrency,
        "{ANNOTATION} of this pod"
    );
    Ok(Some(config))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Gateway,
    Sidecar,
}

fn parse_outbound_mode(text: &str) -> Result<warden_config::kinds::sidecar::OutboundMode, String> {
    warden_config::kinds::sidecar::OutboundMode::parse(text)
}

const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The downstream timeouts: each from its flag, else the mesh config, else the default; `0s`
/// turns one off.
fn downstream_timeouts(args: &ProxyArgs, mesh: &MeshConfig) -> Timeouts {
    let defaults = Timeouts::default();
    let m = &mesh.warden;
    let pick = |flag: Option<Duration>, file: Option<Duration>, default: Option<Duration>| {
        flag.or(file).map_or(default, nonzero)
    };
    Timeouts {
        request_headers: pick(
            args.request_headers_timeout,
            m.request_headers_timeout,
            defaults.request_headers,
        ),
        idle: pick(args.idle_timeout, m.idle_timeout, defaults.idle),
        max_connection_duration: pick(
            args.max_connection_duration,
            m.max_connection_duration,
            defaults.max_connection_duration,
        ),
        stream_idle: pick(
            args.stream_idle_timeout,
            m.stream_idle_timeout,
            defaults.stream_idle,
        ),
    }
}

/// `0s` as "off".
fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// `--gateway NAMESPACE/NAME`.
fn parse_gateway(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("gateway {text:?} must be NAMESPACE/NAME")),
    }
}

fn parse_skip_kind(text: &str) -> Result<String, String> {
    warden_config::check_skip_kind(text).map(|()| text.to_owned())
}

/// `--concurrency`: Istio's `concurrency: 0` means one worker per core, but on the command
/// line 0 is more likely a mistake than a request for the default, which is the flag left out.
fn parse_concurrency(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (leave the flag out for one worker per core)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a number of workers: {e}")),
    }
}

/// `IP:PORT`, or `NAME:PORT` resolved now (`localhost:15000`); of a name's addresses the first
/// IPv4 one, as clients dialing `localhost` mostly try it first.
fn resolve_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if text
        .rsplit_once(':')
        .is_none_or(|(host, _)| host.is_empty())
    {
        return Err(format!("{text:?} must be HOST:PORT"));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| format!("cannot resolve {text:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("label {text:?} must be k=v"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    warden_config::parse_duration(text)
}

/// `warden wait`: Istio's `pilot-agent wait`, a sidecar's postStart hook.
#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// The readiness URL: `http://HOST:PORT/PATH` (an address, not a name).
    #[arg(long, default_value = "http://127.0.0.1:15021/healthz/ready")]
    pub url: String,
    /// Give up (exit 1) after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Time between attempts.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub period: Duration,
}

pub fn run_wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let rest = args
        .url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("--url {}: http:// only", args.url))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let addr: SocketAddr = authority
        .parse()
        .map_err(|e| anyhow::anyhow!("--url {}: {authority}: {e}", args.url))?;
    match crate::runtime::wait_ready::wait_ready(addr, path, args.timeout, args.period) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!("warden wait: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
    /// The proxy's namespace (for policy selectors); default: the `namespace` file of
    /// --pod-info, else `default`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// The proxy's labels, `k=v` (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Istio MeshConfig YAML as `warden proxy --mesh-config` reads it: check it too, and say
    /// which of its settings (`defaultConfig.gatewayTopology`) the proxy would take.
    #[arg(long)]
    pub mesh_config: Option<PathBuf>,
    /// Fail (exit 1) when the config loads with warnings, as `istioctl analyze
    /// --failure-threshold Warning` does: dangling references (IST0101...), replaced
    /// documents, unsupported fields... Kinds skipped with --skip-kind and objects warden does
    /// not read (Deployments...) do not fail it.
    #[arg(long)]
    pub strict: bool,
    /// As `warden proxy --skip-kind`: check the config without the documents of this refused
    /// kind (repeatable); they are reported as skipped.
    #[arg(long = "skip-kind", value_parser = parse_skip_kind)]
    pub skip_kinds: Vec<String>,
    #[command(flatten)]
    pub role: RoleArgs,
}

#[derive(clap::Args, Debug)]
pub struct RatelimitConfigArgs {
    /// Config file or directory (repeatable).
    #[arg(short = 'c', long = "config", required = true)]
    pub config: Vec<PathBuf>,
    /// Write the envoyproxy/ratelimit config here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

pub fn run_proxy(mut args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let mesh = match &args.mesh_config {
        None => MeshConfig::default(),
        Some(path) => match warden_config::mesh_config::load_mesh_config(path) {
            Ok((mesh, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                mesh
            }
            Err(errors) => {
                eprintln!("{errors}");
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    // A flag given on the command line wins over the mesh config.
    args.role.protocol_detection_timeout = args
        .role
        .protocol_detection_timeout
        .or(mesh.protocol_detection_timeout);
    let timeouts = downstream_timeouts(&args, &mesh);
    let info = args.role.pod_info()?;
    let own = own_proxy_config(&info)?;
    // A flag wins over the pod's annotation, which wins over the mesh config (as Istio merges
    // a pod's ProxyConfig over the mesh's defaultConfig).
    let drain_timeout = args
        .drain_timeout
        .or(own.as_ref().and_then(|c| c.termination_drain_duration))
        .or(mesh.default_config.termination_drain_duration)
        .unwrap_or(DEFAULT_DRAIN_TIMEOUT);
    let mut opts = ProxyOptions::new(ConfigSource::Paths(args.config));
    // Istio's concurrency 0 is a worker per core, the default.
    if let Some(n) = args
        .concurrency
        .or(own.as_ref().and_then(|c| c.concurrency).filter(|n| *n != 0))
    {
        opts.concurrency = n.max(1);
    }
    opts.pod_proxy_config = own;
    opts.admin = Some(args.admin);
    opts.listen_host = args.listen_host;
    opts.num_trusted_proxies = args.num_trusted_proxies;
    opts.xff_trusted_cidrs =
        mesh.warden
            .xff_trusted_cidrs
            .as_ref()
            .map(|t| crate::core::client_addr::TrustedCidrs {
                cidrs: t.cidrs.clone(),
                recurse: t.recurse,
            });
    opts.mesh_defaults = mesh.default_config.clone();
    opts.extension_providers = std::sync::Arc::new(mesh.extension_providers.clone());
    opts.mesh_metrics_off = !mesh.default_providers.prometheus();
    opts.tracing = crate::core::identity::TracingDefaults::of(&mesh);
    let (namespace, labels) = info.identity(args.namespace, args.labels);
    tracing::info!(%namespace, ?labels, "proxy identity");
    opts.namespace = namespace;
    opts.labels = labels;
    if let Some((namespace, name)) = args.gateway {
        opts.namespace = namespace;
        opts.labels.insert(
            warden_config::gateway_api::selection::GATEWAY_NAME_LABEL.into(),
            name,
        );
    }
    match crate::core::access_log::from_mesh(args.access_log.as_deref(), &mesh) {
        Ok(Some((target, format))) => {
            opts.access_log = Some(target);
            opts.access_log_format = format;
        }
        Ok(None) => {}
        Err(problem) => {
            eprintln!("{problem}");
            return Ok(ExitCode::FAILURE);
        }
    }
    opts.watch_config = !args.no_watch;
    opts.sidecar = args.role.sidecar();
    opts.mesh = args.role.mesh_credentials()?;
    let mut accel = args.accel.start(&args.role)?;
    let probers =
        crate::runtime::app_probers::AppProbers::parse(args.app_probers.as_deref().unwrap_or(""))?;
    if !probers.is_empty() && args.status_ports.is_empty() {
        anyhow::bail!(
            "{} is set but no --status-port serves the probes",
            crate::runtime::app_probers::ENV
        );
    }
    if !args.status_ports.is_empty() {
        opts.status = Some(crate::runtime::status_port::StatusSettings {
            addrs: args
                .status_ports
                .iter()
                .map(|p| SocketAddr::new(args.listen_host, *p))
                .collect(),
            probers,
            app_ip: args
                .role
                .pod_ips
                .first()
                .copied()
                .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
        });
    }
    opts.pod_ips = args.role.pod_ips;
    opts.extra_metrics = accel
        .as_ref()
        .map(|a| crate::runtime::options::ExtraMetrics(a.metrics()));
    opts.splicer = accel.as_ref().and_then(|a| a.splicer());
    opts.service_account = args.role.service_account;
    opts.credentials_dir = args.role.credentials_dir.clone();
    opts.allow_empty_config = args.allow_empty_config;
    opts.require_listener = !args.allow_empty_config;
    opts.load.skip_kinds = args.skip_kinds;
    if let Some(t) = mesh.connect_timeout {
        opts.connect_timeout = t;
    }
    if let Some(t) = args.jwks_refresh_interval.filter(|t| !t.is_zero()) {
        opts.jwks_refresh = t;
    }
    let limits = &mesh.warden;
    opts.max_connections = args.max_connections.or(limits.max_connections);
    opts.max_connections_per_listener = args
        .max_connections_per_listener
        .or(limits.max_connections_per_listener);
    opts.max_connections_per_ip = args
        .max_connections_per_ip
        .or(limits.max_connections_per_ip);
    opts.timeouts = timeouts;
    // Before anything opens files: a proxy holds one per connection.
    match crate::listeners::conn_limits::raise_nofile() {
        Ok(limit) => tracing::info!(
            soft = limit.soft,
            hard = limit.hard,
            was = limit.before,
            "open-file limit (RLIMIT_NOFILE)"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-file limit"),
    }
    let proxy = Proxy::start(opts)?;
    // Same-node sidecars connect straight to our inbound port only once it listens.
    if let Some(a) = accel.as_mut() {
        a.announce();
    }
    for l in proxy.listeners() {
        tracing::info!(listener = %l.name, addr = %l.addr, protocol = ?l.protocol, "listening");
    }
    if let Some(a) = proxy.admin_addr() {
        tracing::info!(addr = %a, "admin endpoint");
    }
    for a in proxy.status_addrs() {
        tracing::info!(addr = %a, "status port");
    }
    // Signals are handled on a tiny runtime of their own; the proxy runs on its own threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading config");
                    let _ = proxy.reload();
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        anyhow::Ok(())
    })?;
    tracing::info!(deadline = ?drain_timeout, "draining");
    if let Some(a) = accel.as_mut() {
        a.withdraw();
    }
    proxy.shutdown(drain_timeout);
    // Detaches the programs (connections they short-circuited keep working).
    drop(accel);
    Ok(ExitCode::SUCCESS)
}

pub fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let (mesh_defaults, xff_trusted_cidrs, extension_providers, tracing) = match &args.mesh_config {
        None => Default::default(),
        Some(path) => match warden_config::mesh_config::load_mesh_config(path) {
            Ok((mesh, warnings)) => {
                for w in warnings {
                    eprintln!("warning: {w}");
                }
                (
                    mesh.default_config.clone(),
                    mesh.warden.xff_trusted_cidrs.clone(),
                    std::sync::Arc::new(mesh.extension_providers.clone()),
                    crate::core::identity::TracingDefaults::of(&mesh),
                )
            }
            Err(errors) => {
                eprintln!("{errors}");
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let source = ConfigSource::Paths(args.config);
    let mesh = args.role.mesh_credentials()?;
    let (namespace, labels) = args.role.identity(args.namespace, args.labels)?;
    let identity = ProxyIdentity {
        namespace,
        labels,
        sidecar: args.role.sidecar(),
        pod_ips: args.role.pod_ips,
        service_account: args.role.service_account,
        credentials_dir: args.role.credentials_dir.clone(),
        mesh,
        extension_providers,
        mesh_metrics_off: false,
        tracing,
    };
    let options = warden_config::LoadOptions {
        skip_kinds: args.skip_kinds,
    };
    let built = crate::runtime::config_source::load_with(&source, &options)
        .and_then(|l| Snapshot::build(l, &identity, None));
    match built {
        Ok(snapshot) => {
            // A closed stdout (`warden check | head`) ends the output, not the process.
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let text = check::describe_with(&snapshot, &mesh_defaults);
            let failing = snapshot
                .warnings
                .iter()
                .filter(|w| check::fails_strict(w))
                .count();
            if args.strict && failing > 0 {
                let _ = write!(out, "{text}");
                eprintln!(
                    "config has {failing} warning(s) that fail --strict (listed under \
                     warnings above)"
                );
                return Ok(ExitCode::FAILURE);
            }
            let _ = write!(out, "{text}");
            if let Some(trusted) = &xff_trusted_cidrs {
                // As `warden proxy` refuses it: trusted proxies named and counted.
                let hops = crate::runtime::gateway_topology::resolve(
                    &snapshot,
                    &mesh_defaults,
                    None,
                    None,
                )
                .map_or(0, |t| t.num_trusted_proxies);
                if hops > 0 {
                    eprintln!(
                        "error: the mesh config's warden.xffTrustedCidrs and numTrustedProxies \
                         {hops} both say which proxies to trust; Envoy refuses both, so keep one"
                    );
                    return Ok(ExitCode::FAILURE);
                }
                let cidrs: Vec<String> = trusted.cidrs.iter().map(|c| c.to_string()).collect();
                let _ = writeln!(
                    out,
                    "trusted proxies by address: {} ({}; the mesh config's \
                     warden.xffTrustedCidrs, instead of the count above)",
                    cidrs.join(", "),
                    if trusted.recurse {
                        "recurse: the last x-forwarded-for entry outside them"
                    } else {
                        "the last x-forwarded-for entry"
                    }
                );
            }
            let _ = writeln!(out, "config OK");
            if snapshot.listeners.is_empty() {
                eprintln!(
                    "note: no listener for this proxy; `warden proxy` starts from this config \
                     only with --allow-empty-config"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{errors}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Writes the envoyproxy/ratelimit config enforcing the RateLimitPolicies' global rules, for
/// an external `warden ratelimit` (or the reference service).
pub fn run_ratelimit_config(args: RatelimitConfigArgs) -> anyhow::Result<ExitCode> {
    let source = ConfigSource::Paths(args.config);
    let config = match crate::runtime::config_source::load(&source) {
        Ok(loaded) => crate::filters::global_rate_limit::rls_config(&loaded.set)
            .map_err(warden_config::ConfigErrors::new),
        Err(e) => Err(e),
    };
    let config = match config {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if config.descriptors.is_empty() {
        eprintln!("warning: no RateLimitPolicy has spec.global rules; the config is empty");
    }
    let yaml = warden_ratelimit::to_yaml(&config);
    match args.output {
        Some(path) => std::fs::write(&path, yaml)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => print!("{yaml}"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_at_least_one() {
        for (text, ok) in [
            ("1", Some(1)),
            ("8", Some(8)),
            ("0", None),
            ("-1", None),
            ("", None),
        ] {
            assert_eq!(parse_concurrency(text).ok(), ok, "{text:?}");
        }
        assert!(parse_concurrency("0").unwrap_err().contains("at least 1"));
    }

    #[test]
    fn addresses_are_ip_port_or_a_resolvable_name() {
        for (text, want) in [
            ("127.0.0.1:15000", Some("127.0.0.1:15000")),
            ("[::1]:9", Some("[::1]:9")),
            ("localhost:15000", Some("127.0.0.1:15000")),
            ("localhost", None),
            (":15000", None),
            ("localhost:http-ish", None),
            ("no-such-host.invalid:1", None),
        ] {
            let got = resolve_addr(text).ok().map(|a| a.to_string());
            assert_eq!(got.as_deref(), want, "{text:?}");
        }
    }
}
