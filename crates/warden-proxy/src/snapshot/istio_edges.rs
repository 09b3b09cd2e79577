//! The labels of Istio metrics edges against this snapshot's registry
//! ([`crate::core::istio_peers`]): a gateway's or an outbound side's edge per cluster, a
//! sidecar inbound side's per peer and port. Run once per edge, never per request.

use super::Snapshot;
use crate::core::istio_metrics::{Edge, EdgeLabels, Reporter, Service, Workload, UNKNOWN};
use crate::core::{istio_overrides, istio_peers};
use crate::upstream::cluster::Cluster;
use std::sync::Arc;

impl Snapshot {
    /// The Telemetry API's (metrics off, labels removed) for this proxy reporting as the
    /// client (`true`) or the server.
    fn metrics_overrides(&self, client: bool) -> (u16, u32) {
        istio_overrides::overrides(
            &self.config.telemetries,
            &self.identity.namespace,
            &self.identity.labels,
            client,
            !self.identity.mesh_metrics_off,
        )
    }

    /// This proxy calling `cluster` (`None`: answered without one), reported as the source.
    pub fn outbound_edge(&self, cluster: Option<&Cluster>) -> Edge {
        let (off, removed) = self.metrics_overrides(true);
        Edge::new(
            EdgeLabels {
                removed,
                ..self.outbound_edge_labels(cluster)
            },
            off,
        )
    }

    fn outbound_edge_labels(&self, cluster: Option<&Cluster>) -> EdgeLabels {
        let td = istio_peers::trust_domain(&self.identity);
        let host = cluster.and_then(|c| istio_peers::cluster_host(&c.name));
        let destination = cluster
            .and_then(|c| c.endpoints.first())
            .and_then(|e| istio_peers::at_address(&self.config, e.authority.host(), td))
            .unwrap_or_else(Workload::unknown);
        EdgeLabels {
            reporter: Reporter::Source,
            source: istio_peers::own(&self.identity, &self.config),
            destination,
            service: host.map_or_else(Service::unknown, |h| istio_peers::service(&self.config, h)),
            security: UNKNOWN,
            removed: 0,
        }
    }

    /// A peer (its SPIFFE principal when it came over mTLS) calling this pod's `port`,
    /// reported as the destination; cached per snapshot.
    pub fn inbound_edge(&self, principal: Option<&str>, port: u16) -> Arc<Edge> {
        self.istio_edges.by_peer(principal, port, || {
            let (off, removed) = self.metrics_overrides(false);
            Edge::new(
                EdgeLabels {
                    removed,
                    reporter: Reporter::Destination,
                    source: principal.map_or_else(Workload::unknown, |p| {
                        istio_peers::of_principal(&self.config, p)
                    }),
                    destination: istio_peers::own(&self.identity, &self.config),
                    service: istio_peers::own_service(&self.config, &self.identity.pod_ips, port),
                    security: if principal.is_some() {
                        "mutual_tls"
                    } else {
                        "none"
                    },
                },
                off,
            )
        })
    }
}
