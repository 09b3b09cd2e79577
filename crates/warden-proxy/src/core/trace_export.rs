//! Sampled spans leave the request path through a bounded queue ([`Tracer::push`]: never
//! blocks; a full queue drops the span and counts it) to one exporter thread, which sends them
//! in batches to each span's OTLP collector over gRPC (`TraceService/Export`). A batch the
//! collector does not take (down, slow, refusing) is dropped and counted: spans are never
//! retried at the cost of memory.

use crate::core::traces::Report;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_trace::otlp::{self, TraceServiceClient};
use warden_trace::Span;

/// Spans waiting for the exporter; more are dropped (and counted).
const QUEUE: usize = 8 * 1024;
/// Spans per export call at most.
const BATCH: usize = 512;
/// How long a span waits for its batch to fill (Envoy flushes every 5 s; sooner here so a
/// trace shows up while it is looked for).
const FLUSH: Duration = Duration::from_secs(1);
/// One export call's limit, connecting included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The exporter's counters (`warden_tracing_*`, also in `/stats`).
#[derive(Debug, Clone, Default)]
pub struct TracingMetrics {
    pub spans_exported: Counter,
    /// By reason: `queue_full`, `export_failed`.
    pub spans_dropped: Family<crate::core::metrics::ReasonLabels, Counter>,
}

impl TracingMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let sub = registry.sub_registry_with_prefix("tracing");
        sub.register(
            "spans_exported",
            "Spans a collector accepted",
            self.spans_exported.clone(),
        );
        sub.register(
            "spans_dropped",
            "Spans not exported: the queue was full or the collector did not take them",
            self.spans_dropped.clone(),
        );
    }

    fn dropped(&self, reason: &'static str, n: usize) {
        self.spans_dropped
            .get_or_create(&crate::core::metrics::ReasonLabels { reason })
            .inc_by(n as u64);
    }
}

struct Finished {
    span: Span,
    report: Arc<Report>,
}

/// The queue's sending end, shared by every worker.
pub struct Tracer {
    tx: SyncSender<Finished>,
    metrics: TracingMetrics,
}

impl Tracer {
    /// Start the exporter thread; it ends when the tracer is dropped (after sending what is
    /// queued).
    pub fn start(metrics: TracingMetrics) -> std::io::Result<Tracer> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread_metrics = metrics.clone();
        std::thread::Builder::new()
            .name("warden-traces".into())
            .spawn(move || export_loop(rx, thread_metrics))?;
        Ok(Tracer { tx, metrics })
    }

    /// Queue a finished span; a full queue drops it.
    pub fn push(&self, span: Span, report: Arc<Report>) {
        if self.tx.try_send(Finished { span, report }).is_err() {
            self.metrics.dropped("queue_full", 1);
        }
    }
}

fn export_loop(rx: mpsc::Receiver<Finished>, metrics: TracingMetrics) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let mut clients: HashMap<String, TraceServiceClient<tonic::transport::Channel>> =
        HashMap::new();
    let mut batch: Vec<Finished> = Vec::with_capacity(BATCH);
    loop {
        let open = match rx.recv() {
            Ok(first) => {
                batch.push(first);
                fill(&rx, &mut batch)
            }
            Err(_) => false,
        };
        if !batch.is_empty() {
            runtime.block_on(export(&mut clients, &mut batch, &metrics));
        }
        if !open {
            return;
        }
    }
}

/// Fill the batch until it is full or [`FLUSH`] has passed; `false` once the queue is closed.
fn fill(rx: &mpsc::Receiver<Finished>, batch: &mut Vec<Finished>) -> bool {
    let deadline = Instant::now() + FLUSH;
    while batch.len() < BATCH {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(f) => batch.push(f),
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
    true
}

/// Send the batch, one call per collector.
async fn export(
    clients: &mut HashMap<String, TraceServiceClient<tonic::transport::Channel>>,
    batch: &mut Vec<Finished>,
    metrics: &TracingMetrics,
) {
    let mut groups: Vec<(Arc<Report>, Vec<Span>)> = Vec::new();
    for f in batch.drain(..) {
        match groups.iter_mut().find(|(r, _)| Arc::ptr_eq(r, &f.report)) {
            Some((_, spans)) => spans.push(f.span),
            None => groups.push((f.report, vec![f.span])),
        }
    }
    for (report, spans) in groups {
        let n = spans.len();
        let client = match clients.get(&report.address) {
            Some(c) => c.clone(),
            None => match channel(&report.address) {
                Some(channel) => {
                    let c = TraceServiceClient::new(channel);
                    clients.insert(report.address.clone(), c.clone());
                    c
                }
                None => {
                    metrics.dropped("export_failed", n);
                    continue;
                }
            },
        };
        let request = otlp::export_request(&report.exporter, &spans);
        let mut client = client;
        match tokio::time::timeout(EXPORT_TIMEOUT, client.export(request)).await {
            Ok(Ok(_)) => {
                metrics.spans_exported.inc_by(n as u64);
            }
            Ok(Err(status)) => {
                tracing::debug!(address = %report.address, %status, "span export failed");
                metrics.dropped("export_failed", n);
            }
            Err(_) => metrics.dropped("export_failed", n),
        }
    }
}

/// A lazily connected channel to `host:port` (reconnects after failures by itself).
fn channel(address: &str) -> Option<tonic::transport::Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .ok()?
        .connect_timeout(EXPORT_TIMEOUT)
        .timeout(EXPORT_TIMEOUT);
    Some(endpoint.connect_lazy())
}
