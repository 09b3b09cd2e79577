//! Istio's standard metrics (istio.io "Istio Standard Metrics"): `istio_requests_total`,
//! `istio_request_duration_milliseconds`, `istio_request_bytes`, `istio_response_bytes` for
//! HTTP and gRPC, `istio_tcp_*` for TCP, with Istio's names, labels and Envoy's default
//! histogram buckets (which Istio keeps).
//!
//! Cost: the labels of one edge (reporter, both workloads, the service, mTLS or not) are
//! resolved once per cluster or peer into an [`Edge`], which keeps the series handles per
//! response code (and response flag) as it first meets them. A request then costs an index
//! into that table and atomic adds: one counter and three histograms of two adds each, no
//! lock, no allocation, no label rendering. Only gRPC requests and codes or flags beyond the
//! table ([`FLAG_SLOTS`]) take the families' lock.

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Envoy's default histogram buckets, which Istio uses for duration (ms) and sizes (bytes).
pub const BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0,
];

/// A workload's labels as Istio's metadata exchange gives them; `unknown` where unknown.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct Workload {
    pub workload: String,
    pub namespace: String,
    pub principal: String,
    pub app: String,
    pub version: String,
    pub canonical_service: String,
    pub canonical_revision: String,
    pub cluster: String,
}

impl Workload {
    pub fn unknown() -> Workload {
        let u = || UNKNOWN.to_owned();
        Workload {
            workload: u(),
            namespace: u(),
            principal: u(),
            app: u(),
            version: u(),
            canonical_service: u(),
            canonical_revision: u(),
            cluster: u(),
        }
    }
}

pub const UNKNOWN: &str = "unknown";

/// The destination service: its host, short name and namespace.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct Service {
    pub host: String,
    pub name: String,
    pub namespace: String,
}

impl Service {
    pub fn unknown() -> Service {
        Service {
            host: UNKNOWN.to_owned(),
            name: UNKNOWN.to_owned(),
            namespace: UNKNOWN.to_owned(),
        }
    }
}

/// Which proxy reports: the client's side (a gateway, a sidecar's outbound) or the server's.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Reporter {
    Source,
    Destination,
}

/// Everything of a series but the request's own labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct EdgeLabels {
    pub reporter: Reporter,
    pub source: Workload,
    pub destination: Workload,
    pub service: Service,
    /// `mutual_tls` or `none` as the destination saw the connection; `unknown` for a source
    /// reporter, as Istio reports it.
    pub security: &'static str,
    /// Labels a Telemetry `tagOverrides` REMOVE drops, by index in [`TAGS`].
    pub removed: u32,
}

/// Istio's labels in the order series carry them: the edge's, then the request's.
pub const TAGS: [&str; 25] = [
    "reporter",
    "source_workload",
    "source_canonical_service",
    "source_canonical_revision",
    "source_workload_namespace",
    "source_principal",
    "source_app",
    "source_version",
    "source_cluster",
    "destination_workload",
    "destination_workload_namespace",
    "destination_principal",
    "destination_app",
    "destination_version",
    "destination_service",
    "destination_canonical_service",
    "destination_canonical_revision",
    "destination_service_name",
    "destination_service_namespace",
    "destination_cluster",
    "connection_security_policy",
    "request_protocol",
    "response_code",
    "grpc_response_status",
    "response_flags",
];

/// The bit of tag `name` in [`EdgeLabels::removed`]; none for a tag Istio does not have.
pub fn tag_bit(name: &str) -> Option<u32> {
    TAGS.iter().position(|t| *t == name).map(|i| 1 << i)
}

/// The request-level tags' bits (normalized away when removed, so series merge).
const REQUEST_TAGS: u32 = 0b1111 << 21;
const REQUEST_PROTOCOL: u32 = 1 << 21;
const RESPONSE_CODE: u32 = 1 << 22;
const GRPC_STATUS: u32 = 1 << 23;
const RESPONSE_FLAGS: u32 = 1 << 24;

impl EdgeLabels {
    fn encode(&self, enc: &mut LabelSetEncoder) -> std::fmt::Result {
        let reporter = match self.reporter {
            Reporter::Source => "source",
            Reporter::Destination => "destination",
        };
        let (s, d) = (&self.source, &self.destination);
        let values: [&str; 21] = [
            reporter,
            &s.workload,
            &s.canonical_service,
            &s.canonical_revision,
            &s.namespace,
            &s.principal,
            &s.app,
            &s.version,
            &s.cluster,
            &d.workload,
            &d.namespace,
            &d.principal,
            &d.app,
            &d.version,
            &self.service.host,
            &d.canonical_service,
            &d.canonical_revision,
            &self.service.name,
            &self.service.namespace,
            &d.cluster,
            self.security,
        ];
        for (i, value) in values.into_iter().enumerate() {
            self.label(enc, i, value)?;
        }
        Ok(())
    }

    /// Tag `i` of [`TAGS`], unless removed.
    fn label(&self, enc: &mut LabelSetEncoder, i: usize, value: &str) -> std::fmt::Result {
        if self.removed & (1 << i) != 0 {
            return Ok(());
        }
        label(enc, (TAGS[i], value))
    }
}

fn label(enc: &mut LabelSetEncoder, pair: (&str, &str)) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeLabel;
    pair.encode(enc.encode_label())
}

/// An HTTP series' labels: the edge's and the request's.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct HttpLabels {
    pub edge: Arc<EdgeLabels>,
    /// `http` or `grpc`.
    pub protocol: &'static str,
    pub code: u16,
    /// gRPC's status code for gRPC requests, empty otherwise.
    pub grpc_status: &'static str,
    /// Envoy's response flags, `-` for none.
    pub flags: &'static str,
}

impl EncodeLabelSet for HttpLabels {
    fn encode(&self, enc: &mut LabelSetEncoder) -> std::fmt::Result {
        self.edge.encode(enc)?;
        // Scrape time only.
        let code = self.code.to_string();
        for (i, value) in [self.protocol, &code, self.grpc_status, self.flags]
            .into_iter()
            .enumerate()
        {
            self.edge.label(enc, 21 + i, value)?;
        }
        Ok(())
    }
}

/// A TCP series' labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct TcpLabels {
    pub edge: Arc<EdgeLabels>,
    pub flags: &'static str,
}

impl EncodeLabelSet for TcpLabels {
    fn encode(&self, enc: &mut LabelSetEncoder) -> std::fmt::Result {
        self.edge.encode(enc)?;
        self.edge.label(enc, 21, "tcp")?;
        self.edge.label(enc, 24, self.flags)
    }
}

/// A histogram of atomic buckets (prometheus-client's takes a lock per observation).
/// Values are integers in `1/scale` of the unit (µs for milliseconds, bytes for bytes).
#[derive(Debug, Clone)]
pub struct AtomicHistogram(Arc<HistogramInner>);

#[derive(Debug)]
struct HistogramInner {
    scale: u64,
    /// The buckets' upper bounds in the unit, as exposed.
    unit_bounds: Box<[f64]>,
    /// The same in `1/scale` units, rounded down (an integer is `<= 0.5` iff `<= 0`).
    bounds: Box<[u64]>,
    /// Where a value's bucket search starts, by the value's bit length: the first bucket
    /// whose bound is at least the smallest value of that length ([`start_by_bits`]).
    start_by_bits: [u8; 65],
    /// Per bucket, not cumulative; the last one is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// Buckets `unit_bounds` (ascending, in the unit), values observed in `1/scale` units.
    pub fn new(unit_bounds: impl IntoIterator<Item = f64>, scale: u64) -> Self {
        let unit_bounds: Box<[f64]> = unit_bounds.into_iter().collect();
        let bounds: Box<[u64]> = unit_bounds
            .iter()
            .map(|b| (b * scale as f64) as u64)
            .collect();
        AtomicHistogram(Arc::new(HistogramInner {
            scale,
            start_by_bits: start_by_bits(&bounds),
            bounds,
            counts: (0..=unit_bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            unit_bounds,
            sum: AtomicU64::new(0),
        }))
    }

    /// Istio's milliseconds, observed in microseconds.
    pub fn millis() -> Self {
        Self::new(BUCKETS, 1000)
    }

    pub fn bytes() -> Self {
        Self::new(BUCKETS, 1)
    }

    pub fn observe(&self, value: u64) {
        let i = bucket(&self.0.bounds, &self.0.start_by_bits, value);
        if let Some(c) = self.0.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.0.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// (sum in the unit, count, per-bucket counts with `+Inf` as `f64::MAX`): the encoder
    /// makes them cumulative.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets: Vec<(f64, u64)> = self
            .0
            .unit_bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip(&self.0.counts)
            .map(|(bound, c)| (bound, c.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = self.0.sum.load(Ordering::Relaxed) as f64 / self.0.scale as f64;
        (sum, count, buckets)
    }
}

/// For each bit length `0..=64`, the first bucket whose bound is at least the smallest value
/// of that length: every bucket before it is below any such value, and Envoy's buckets are
/// far enough apart that one or two comparisons from there find the value's.
fn start_by_bits(bounds: &[u64]) -> [u8; 65] {
    std::array::from_fn(|bits| {
        let smallest = if bits == 0 { 0 } else { 1u64 << (bits - 1) };
        let first = bounds.partition_point(|&b| b < smallest);
        u8::try_from(first).unwrap_or(u8::MAX)
    })
}

/// The bucket of `value`: the first whose bound it does not exceed (`bounds.len()`: `+Inf`).
#[inline]
fn bucket(bounds: &[u64], start_by_bits: &[u8; 65], value: u64) -> usize {
    let bits = (u64::BITS - value.leading_zeros()) as usize;
    let mut i = usize::from(start_by_bits[bits]);
    while bounds.get(i).is_some_and(|&b| value > b) {
        i += 1;
    }
    i
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

type HistFamily = Family<HttpLabels, AtomicHistogram, fn() -> AtomicHistogram>;

/// One HTTP series' handles.
#[derive(Debug, Clone)]
pub struct HttpSeries {
    requests: Counter,
    duration: AtomicHistogram,
    request_bytes: AtomicHistogram,
    response_bytes: AtomicHistogram,
}

impl HttpSeries {
    /// Count one response in the metrics not in `off` (a [`Metric`] mask).
    fn record(&self, off: u16, duration_us: u64, request_bytes: u64, response_bytes: u64) {
        if off == 0 {
            self.requests.inc();
            self.duration.observe(duration_us);
            self.request_bytes.observe(request_bytes);
            self.response_bytes.observe(response_bytes);
            return;
        }
        if off & Metric::REQUEST_COUNT == 0 {
            self.requests.inc();
        }
        if off & Metric::REQUEST_DURATION == 0 {
            self.duration.observe(duration_us);
        }
        if off & Metric::REQUEST_SIZE == 0 {
            self.request_bytes.observe(request_bytes);
        }
        if off & Metric::RESPONSE_SIZE == 0 {
            self.response_bytes.observe(response_bytes);
        }
    }
}

/// Istio's standard metrics as bits of an [`Edge`]'s `off` mask (Telemetry `disabled`).
pub struct Metric;

impl Metric {
    pub const REQUEST_COUNT: u16 = 1;
    pub const REQUEST_DURATION: u16 = 1 << 1;
    pub const REQUEST_SIZE: u16 = 1 << 2;
    pub const RESPONSE_SIZE: u16 = 1 << 3;
    pub const TCP_OPENED: u16 = 1 << 4;
    pub const TCP_CLOSED: u16 = 1 << 5;
    pub const TCP_SENT: u16 = 1 << 6;
    pub const TCP_RECEIVED: u16 = 1 << 7;
    pub const GRPC_REQUEST_MESSAGES: u16 = 1 << 8;
    pub const GRPC_RESPONSE_MESSAGES: u16 = 1 << 9;
    pub const HTTP: u16 = 0b1111;
    pub const ALL: u16 = 0x3ff;
}

/// One TCP series' handles, and which of them a Telemetry turned off.
#[derive(Debug, Clone)]
pub struct TcpSeries {
    opened: Counter,
    closed: Counter,
    sent: Counter,
    received: Counter,
    off: u16,
}

impl TcpSeries {
    pub fn opened(&self) {
        if self.off & Metric::TCP_OPENED == 0 {
            self.opened.inc();
        }
    }

    pub fn closed(&self) {
        if self.off & Metric::TCP_CLOSED == 0 {
            self.closed.inc();
        }
    }

    /// Bytes `received` from the client and `sent` to it.
    pub fn bytes(&self, received: u64, sent: u64) {
        if self.off & Metric::TCP_RECEIVED == 0 {
            self.received.inc_by(received);
        }
        if self.off & Metric::TCP_SENT == 0 {
            self.sent.inc_by(sent);
        }
    }
}

/// How many flag slots an [`Edge`] keeps per response code: no flag, then one per
/// [`crate::core::local_reply::ResponseFlag`] by its position (more than warden has, so a
/// flag added later still gets a slot; one beyond goes through the families).
pub const FLAG_SLOTS: usize = 32;

/// One response code's series by flag slot.
type ByFlag = [OnceLock<HttpSeries>; FLAG_SLOTS];

/// Series handles of one edge, by response code and flag, made on first use.
pub struct Edge {
    pub labels: Arc<EdgeLabels>,
    /// The metrics a Telemetry turned off for this edge ([`Metric`] bits).
    pub off: u16,
    /// No request tag is removed: a request's series is found by its own code and flag.
    keeps_request_tags: bool,
    by_code: Box<[OnceLock<Box<ByFlag>>]>,
    tcp: OnceLock<TcpSeries>,
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.labels.fmt(f)
    }
}

/// The edges a snapshot resolves as connections meet them: a sidecar's inbound ones by peer
/// principal and port. Kept with the snapshot, so a reload (a new registry) resolves them
/// again.
/// A peer's principal (none: plaintext) and the port it called.
type PeerKey = (Option<String>, u16);

#[derive(Debug, Default)]
pub struct EdgeCache {
    by_peer: std::sync::Mutex<std::collections::HashMap<PeerKey, Arc<Edge>>>,
}

impl EdgeCache {
    /// The edge of `peer` (its SPIFFE principal) calling port `port`, made by `make` the
    /// first time. Once per connection: callers keep the result for its requests.
    pub fn by_peer(&self, peer: Option<&str>, port: u16, make: impl FnOnce() -> Edge) -> Arc<Edge> {
        let key = (peer.map(str::to_owned), port);
        let mut map = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key).or_insert_with(|| Arc::new(make())).clone()
    }
}

/// HTTP status codes an [`Edge`] indexes (100..=599 in practice; anything else goes through
/// the families).
const CODES: usize = 600;

impl Edge {
    pub fn new(labels: EdgeLabels, off: u16) -> Edge {
        Edge {
            keeps_request_tags: labels.removed & REQUEST_TAGS == 0,
            labels: Arc::new(labels),
            off,
            by_code: (0..CODES).map(|_| OnceLock::new()).collect(),
            tcp: OnceLock::new(),
        }
    }

    /// The series of an HTTP answer with `code` and `flag` when this edge has made it and
    /// keeps the request tags (nothing to normalize): the common case, a few loads.
    #[inline]
    fn made_series(
        &self,
        code: u16,
        flag: Option<crate::core::local_reply::ResponseFlag>,
    ) -> Option<&HttpSeries> {
        if !self.keeps_request_tags {
            return None;
        }
        let slot = flag.map_or(0, |f| f as usize + 1);
        self.by_code.get(usize::from(code))?.get()?.get(slot)?.get()
    }
}

/// A gRPC request's message counters, resolved when its response ends.
pub struct GrpcSeries {
    requests: Family<HttpLabels, Counter>,
    responses: Family<HttpLabels, Counter>,
    labels: HttpLabels,
    off: u16,
    status_removed: bool,
}

impl GrpcSeries {
    /// Add a request's message counts; `trailers_status`: the `grpc-status` its response's
    /// trailers carried (the usual place; a trailers-only answer's is in the labels already).
    pub fn report(mut self, trailers_status: Option<&'static str>, requests: u64, responses: u64) {
        if let Some(status) = trailers_status.filter(|_| !self.status_removed) {
            self.labels.grpc_status = status;
        }
        if self.status_removed {
            self.labels.grpc_status = "";
        }
        if self.off & Metric::GRPC_REQUEST_MESSAGES == 0 {
            self.requests.get_or_create(&self.labels).inc_by(requests);
        }
        if self.off & Metric::GRPC_RESPONSE_MESSAGES == 0 {
            self.responses.get_or_create(&self.labels).inc_by(responses);
        }
    }
}

/// The families, their registry (no prefix: Istio's names), and what the config turned off.
pub struct IstioMetrics {
    registry: Registry,
    requests: Family<HttpLabels, Counter>,
    duration: HistFamily,
    request_bytes: HistFamily,
    response_bytes: HistFamily,
    tcp_opened: Family<TcpLabels, Counter>,
    tcp_closed: Family<TcpLabels, Counter>,
    tcp_sent: Family<TcpLabels, Counter>,
    tcp_received: Family<TcpLabels, Counter>,
    grpc_request_messages: Family<HttpLabels, Counter>,
    grpc_response_messages: Family<HttpLabels, Counter>,
    /// The edge of requests a gateway or an outbound side answers without a cluster (no
    /// route, a direct response): this proxy to `unknown`.
    pub unrouted: OnceLock<Edge>,
}

impl Default for IstioMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl IstioMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = IstioMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(AtomicHistogram::millis),
            request_bytes: Family::new_with_constructor(AtomicHistogram::bytes),
            response_bytes: Family::new_with_constructor(AtomicHistogram::bytes),
            tcp_opened: Family::default(),
            tcp_closed: Family::default(),
            tcp_sent: Family::default(),
            tcp_received: Family::default(),
            grpc_request_messages: Family::default(),
            grpc_response_messages: Family::default(),
            registry: Registry::default(),
            unrouted: OnceLock::new(),
        };
        registry.register(
            "istio_requests",
            "Requests (HTTP and gRPC) by source, destination and response",
            m.requests.clone(),
        );
        registry.register(
            "istio_request_duration_milliseconds",
            "Time from the request's first byte to the response's headers",
            m.duration.clone(),
        );
        registry.register(
            "istio_request_bytes",
            "Request body sizes (declared content-length)",
            m.request_bytes.clone(),
        );
        registry.register(
            "istio_response_bytes",
            "Response body sizes (declared content-length)",
            m.response_bytes.clone(),
        );
        registry.register(
            "istio_tcp_connections_opened",
            "TCP connections opened",
            m.tcp_opened.clone(),
        );
        registry.register(
            "istio_tcp_connections_closed",
            "TCP connections closed",
            m.tcp_closed.clone(),
        );
        registry.register(
            "istio_tcp_sent_bytes",
            "Bytes sent to the client on TCP connections",
            m.tcp_sent.clone(),
        );
        registry.register(
            "istio_tcp_received_bytes",
            "Bytes received from the client on TCP connections",
            m.tcp_received.clone(),
        );
        registry.register(
            "istio_request_messages",
            "gRPC messages the client sent (length-prefixed messages of the request body)",
            m.grpc_request_messages.clone(),
        );
        registry.register(
            "istio_response_messages",
            "gRPC messages the server sent (length-prefixed messages of the response body)",
            m.grpc_response_messages.clone(),
        );
        IstioMetrics { registry, ..m }
    }

    /// OpenMetrics text of the Istio families.
    pub fn encode(&self, out: &mut String) {
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(out, &self.registry);
    }

    /// The handles of a series; a metric that is `off` gets one no family holds (never
    /// counted, never exported).
    fn http_series(&self, labels: &HttpLabels, off: u16) -> HttpSeries {
        let hist = |family: &HistFamily, bit: u16, detached: fn() -> AtomicHistogram| {
            if off & bit == 0 {
                family.get_or_create_owned(labels)
            } else {
                detached()
            }
        };
        HttpSeries {
            requests: if off & Metric::REQUEST_COUNT == 0 {
                self.requests.get_or_create_owned(labels)
            } else {
                Counter::default()
            },
            duration: hist(
                &self.duration,
                Metric::REQUEST_DURATION,
                AtomicHistogram::millis,
            ),
            request_bytes: hist(
                &self.request_bytes,
                Metric::REQUEST_SIZE,
                AtomicHistogram::bytes,
            ),
            response_bytes: hist(
                &self.response_bytes,
                Metric::RESPONSE_SIZE,
                AtomicHistogram::bytes,
            ),
        }
    }

    /// Count a response on `edge`: `flag` is Envoy's flag (`None`: no flag), `grpc_status`
    /// set for gRPC requests; duration in µs, sizes in bytes. The cached handles are used in
    /// place (no reference-count traffic).
    #[allow(clippy::too_many_arguments)]
    pub fn record_http(
        &self,
        edge: &Edge,
        code: u16,
        flag: Option<crate::core::local_reply::ResponseFlag>,
        grpc_status: Option<&'static str>,
        duration_us: u64,
        request_bytes: u64,
        response_bytes: u64,
    ) {
        if let Some(series) = edge
            .made_series(code, flag)
            .filter(|_| grpc_status.is_none())
        {
            series.record(edge.off, duration_us, request_bytes, response_bytes);
            return;
        }
        self.record_http_first(
            edge,
            code,
            flag,
            grpc_status,
            duration_us,
            request_bytes,
            response_bytes,
        );
    }

    /// [`Self::record_http`] for a series not made yet, a gRPC request, or an edge whose
    /// Telemetry removes request tags.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn record_http_first(
        &self,
        edge: &Edge,
        code: u16,
        flag: Option<crate::core::local_reply::ResponseFlag>,
        grpc_status: Option<&'static str>,
        duration_us: u64,
        request_bytes: u64,
        response_bytes: u64,
    ) {
        if edge.off & Metric::HTTP == Metric::HTTP {
            return;
        }
        let (mut code, mut flag, mut grpc_status) = (code, flag, grpc_status);
        let removed = edge.labels.removed;
        // A removed request tag takes one value, so its series merge.
        let protocol = match grpc_status {
            _ if removed & REQUEST_PROTOCOL != 0 => "",
            Some(_) => "grpc",
            None => "http",
        };
        if removed & REQUEST_TAGS != 0 {
            if removed & RESPONSE_CODE != 0 {
                code = 0;
            }
            if removed & RESPONSE_FLAGS != 0 {
                flag = None;
            }
            if removed & GRPC_STATUS != 0 && grpc_status.is_some() {
                grpc_status = Some("");
            }
        }
        let labels = |flags: &'static str| HttpLabels {
            edge: edge.labels.clone(),
            protocol,
            code,
            grpc_status: grpc_status.unwrap_or(""),
            flags,
        };
        let flags = flag.map_or("-", |f| f.code());
        // A fieldless enum's position: an index, no string compared.
        let slot = flag.map_or(0, |f| f as usize + 1);
        match (grpc_status, edge.by_code.get(code as usize)) {
            (None, Some(by_flag)) if slot < FLAG_SLOTS => by_flag
                .get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())))[slot]
                .get_or_init(|| self.http_series(&labels(flags), edge.off))
                .record(edge.off, duration_us, request_bytes, response_bytes),
            _ => self.http_series(&labels(flags), edge.off).record(
                edge.off,
                duration_us,
                request_bytes,
                response_bytes,
            ),
        }
    }

    /// Where a gRPC request's message counts go: its series' labels as the answer starts
    /// (`code`, `flag`, `grpc_status` as [`Self::record_http`] takes them), reported when the
    /// response ends ([`GrpcSeries::report`], with the status its trailers carried). Once per
    /// gRPC request.
    pub fn grpc_series(
        &self,
        edge: &Edge,
        code: u16,
        flag: Option<crate::core::local_reply::ResponseFlag>,
        grpc_status: &'static str,
    ) -> GrpcSeries {
        let removed = edge.labels.removed;
        let mut labels = HttpLabels {
            edge: edge.labels.clone(),
            protocol: if removed & REQUEST_PROTOCOL != 0 {
                ""
            } else {
                "grpc"
            },
            code,
            grpc_status,
            flags: flag.map_or("-", |f| f.code()),
        };
        if removed & REQUEST_TAGS != 0 {
            if removed & RESPONSE_CODE != 0 {
                labels.code = 0;
            }
            if removed & RESPONSE_FLAGS != 0 {
                labels.flags = "-";
            }
        }
        GrpcSeries {
            requests: self.grpc_request_messages.clone(),
            responses: self.grpc_response_messages.clone(),
            labels,
            off: edge.off,
            status_removed: removed & REQUEST_TAGS != 0 && removed & GRPC_STATUS != 0,
        }
    }

    /// The TCP series of `edge` (no flag).
    pub fn tcp(&self, edge: &Edge) -> TcpSeries {
        edge.tcp
            .get_or_init(|| {
                let labels = TcpLabels {
                    edge: edge.labels.clone(),
                    flags: "-",
                };
                let counter = |family: &Family<TcpLabels, Counter>, bit: u16| {
                    if edge.off & bit == 0 {
                        family.get_or_create_owned(&labels)
                    } else {
                        Counter::default()
                    }
                };
                TcpSeries {
                    opened: counter(&self.tcp_opened, Metric::TCP_OPENED),
                    closed: counter(&self.tcp_closed, Metric::TCP_CLOSED),
                    sent: counter(&self.tcp_sent, Metric::TCP_SENT),
                    received: counter(&self.tcp_received, Metric::TCP_RECEIVED),
                    off: edge.off,
                }
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge::new(
            EdgeLabels {
                reporter: Reporter::Source,
                source: Workload::unknown(),
                destination: Workload::unknown(),
                service: Service::unknown(),
                security: UNKNOWN,
                removed: 0,
            },
            0,
        )
    }

    #[test]
    fn buckets_take_values_at_their_bound() {
        let h = AtomicHistogram::millis();
        for us in [0, 500, 501, 1000, 3_600_000_000, 3_600_000_001] {
            h.observe(us);
        }
        let (sum, count, b) = h.snapshot();
        assert_eq!(count, 6);
        assert_eq!(sum, 7_200_002_002.0 / 1000.0);
        assert_eq!(b[0], (0.5, 2), "0 and 500µs are <= 0.5ms");
        assert_eq!(b[1], (1.0, 2));
        assert_eq!(b[18], (3600000.0, 1));
        assert_eq!(b[19], (f64::MAX, 1));
        let bytes = AtomicHistogram::bytes();
        bytes.observe(0);
        bytes.observe(1);
        assert_eq!(
            bytes.snapshot().2[0],
            (0.5, 1),
            "0 bytes <= 0.5, 1 byte is not"
        );
    }

    #[test]
    fn buckets_are_found_as_a_linear_search_finds_them() {
        for scale in [1, 1000] {
            let h = AtomicHistogram::new(BUCKETS, scale);
            let bounds = &h.0.bounds;
            let linear = |v: u64| bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len());
            let mut values: Vec<u64> = vec![0, 1, 2, u64::MAX, u64::MAX - 1];
            for &b in bounds.iter() {
                values.extend([b.saturating_sub(1), b, b + 1]);
            }
            for bits in 0..64 {
                let p = 1u64 << bits;
                values.extend([p - 1, p, p + 1]);
            }
            let mut rng = fastrand::Rng::with_seed(3);
            values.extend((0..10_000).map(|_| rng.u64(..) >> rng.u32(0..64)));
            for v in values {
                assert_eq!(
                    bucket(bounds, &h.0.start_by_bits, v),
                    linear(v),
                    "{v} at scale {scale}"
                );
            }
        }
    }

    use crate::core::local_reply::ResponseFlag;

    #[test]
    fn series_are_shared_by_edge_code_and_flag() {
        let m = IstioMetrics::new();
        let e = edge();
        m.record_http(&e, 200, None, None, 1000, 0, 10);
        m.record_http(&e, 200, None, None, 1000, 0, 10);
        m.record_http(&e, 429, Some(ResponseFlag::RateLimited), None, 1000, 0, 10);
        m.record_http(&e, 200, None, Some("0"), 1000, 0, 10);
        m.record_http(
            &e,
            999,
            Some(ResponseFlag::DelayInjected),
            None,
            1000,
            0,
            10,
        );
        let mut out = String::new();
        m.encode(&mut out);
        let line = |labels: &str| {
            out.lines()
                .find(|l| l.starts_with("istio_requests_total{") && l.contains(labels))
                .unwrap_or_else(|| panic!("{labels} in {out}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            line("request_protocol=\"http\",response_code=\"200\",grpc_response_status=\"\",response_flags=\"-\""),
            "2"
        );
        assert_eq!(
            line("response_code=\"429\",grpc_response_status=\"\",response_flags=\"RL\""),
            "1"
        );
        assert_eq!(
            line("request_protocol=\"grpc\",response_code=\"200\",grpc_response_status=\"0\""),
            "1"
        );
        assert_eq!(
            line("response_code=\"999\",grpc_response_status=\"\",response_flags=\"DI\""),
            "1"
        );
        assert!(
            out.contains(
                "istio_request_duration_milliseconds_bucket{le=\"0.5\",reporter=\"source\""
            ),
            "{out}"
        );
        // 1 ms: above the 0.5 bucket, in the 1 bucket.
        let bucket = |le: &str| {
            out.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "istio_request_duration_milliseconds_bucket{{le=\"{le}\""
                    )) && l.contains("grpc_response_status=\"\",response_flags=\"-\"")
                })
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(bucket("0.5").as_deref(), Some("0"));
        assert_eq!(bucket("1.0").as_deref(), Some("2"));
    }
}
