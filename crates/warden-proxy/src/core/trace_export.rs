//! Sampled spans leave the request path through a bounded queue ([`Tracer::push`]: never
//! blocks; a full queue drops the span and counts it) to one exporter thread, which sends them
//! in batches to each span's OTLP collector over gRPC (`TraceService/Export`). A batch the
//! collector does not take (down, slow, refusing) is dropped and counted: spans are never
//! retried at the cost of memory.
//!
//! The request path does not wake the exporter for a span: it takes what is queued every
//! [`DRAIN_EVERY`] (a waiting receiver was woken by every send: a futex call and two context
//! switches per sampled request on the worker's core), and only a full batch's worth of
//! spans wakes it sooner. Between exports its runtime keeps running, so the collectors'
//! connections are served as their events come (a closed connection is seen when it closes,
//! not by the next export sent on it).

use crate::core::traces::{Finished, Report};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use warden_trace::otlp::{self, TraceServiceClient};
use warden_trace::Span;

/// Spans waiting for the exporter; more are dropped (and counted).
const QUEUE: usize = 8 * 1024;
/// Spans per export call at most; this many queued wake the exporter.
const BATCH: usize = 512;
/// How often the exporter takes what is queued (Envoy flushes every 5 s; sooner here so a
/// trace shows up while it is looked for).
const DRAIN_EVERY: Duration = Duration::from_secs(1);
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

/// The queue's sending end, shared by every worker.
pub struct Tracer {
    /// Taken on drop, so the exporter sees the queue closed when it is woken.
    tx: Option<SyncSender<Finished>>,
    metrics: TracingMetrics,
    /// Spans queued since the exporter last drained (approximately: it is reset as a drain
    /// starts); reaching [`BATCH`] wakes it.
    queued: Arc<AtomicUsize>,
    wake: Arc<Notify>,
}

impl Tracer {
    /// Start the exporter thread; it ends when the tracer is dropped (after sending what is
    /// queued).
    pub fn start(metrics: TracingMetrics) -> std::io::Result<Tracer> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let exporter = Exporter {
            rx,
            metrics: metrics.clone(),
            queued: Arc::new(AtomicUsize::new(0)),
            wake: Arc::new(Notify::new()),
        };
        let (queued, wake) = (exporter.queued.clone(), exporter.wake.clone());
        std::thread::Builder::new()
            .name("warden-traces".into())
            .spawn(move || exporter.run())?;
        Ok(Tracer {
            tx: Some(tx),
            metrics,
            queued,
            wake,
        })
    }

    /// Queue a finished span; a full queue drops it.
    pub fn push(&self, finished: Finished) {
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send(finished).is_ok());
        if !sent {
            self.metrics.dropped("queue_full", 1);
        } else if self.queued.fetch_add(1, Ordering::Relaxed) + 1 == BATCH {
            self.wake.notify_one();
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.tx = None;
        self.wake.notify_one();
    }
}

/// The exporter thread's end of the queue.
struct Exporter {
    rx: mpsc::Receiver<Finished>,
    metrics: TracingMetrics,
    queued: Arc<AtomicUsize>,
    wake: Arc<Notify>,
}

impl Exporter {
    fn run(self) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(self.export_loop());
    }

    async fn export_loop(self) {
        let mut clients: HashMap<String, TraceServiceClient<tonic::transport::Channel>> =
            HashMap::new();
        let mut batch: Vec<Finished> = Vec::with_capacity(BATCH);
        loop {
            // Woken early by a full batch or the tracer's drop; else on the interval.
            let _ = tokio::time::timeout(DRAIN_EVERY, self.wake.notified()).await;
            self.queued.store(0, Ordering::Relaxed);
            let open = loop {
                match self.rx.try_recv() {
                    Ok(f) => {
                        batch.push(f);
                        if batch.len() == BATCH {
                            export(&mut clients, &mut batch, &self.metrics).await;
                        }
                    }
                    Err(TryRecvError::Empty) => break true,
                    Err(TryRecvError::Disconnected) => break false,
                }
            };
            if !batch.is_empty() {
                export(&mut clients, &mut batch, &self.metrics).await;
            }
            if !open {
                return;
            }
        }
    }
}

/// Send the batch, one call per collector.
async fn export(
    clients: &mut HashMap<String, TraceServiceClient<tonic::transport::Channel>>,
    batch: &mut Vec<Finished>,
    metrics: &TracingMetrics,
) {
    let mut groups: Vec<(Arc<Report>, Vec<Span>)> = Vec::new();
    for f in batch.drain(..) {
        match groups.iter_mut().find(|(r, _)| Arc::ptr_eq(r, f.report())) {
            Some((_, spans)) => spans.push(f.into_span()),
            None => groups.push((f.report().clone(), vec![f.into_span()])),
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
        let request = otlp::export_request(&report.exporter, spans);
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
