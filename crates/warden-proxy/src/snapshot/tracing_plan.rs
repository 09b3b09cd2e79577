//! The proxy's tracing, compiled with its snapshot: the Telemetry `tracing` that applies (the
//! root namespace's, the namespace's and the workload's, merged as Istio merges them), else the
//! mesh config's defaults. The provider it names (or `defaultProviders.tracing`): an
//! `opentelemetry` provider propagates W3C Trace Context and its spans are exported over
//! OTLP/gRPC to its service, resolved through the registry as an ext_authz provider's is; a
//! `zipkin` one propagates B3 and its spans are not reported. Then the sampling percentage
//! (Telemetry's, `defaultConfig.tracing.sampling`, or Istio's 1%), `disableSpanReporting`,
//! and the tags: Istio's and the custom ones.

use crate::core::identity::ProxyIdentity;
use crate::core::istio_peers;
use crate::core::traces::{Report, TracePlan, DEFAULT_MAX_PATH_TAG_LENGTH};
use crate::filters::global_rate_limit::rls_address;
use crate::snapshot::telemetry_logging::ROOT_NAMESPACE;
use std::borrow::Cow;
use std::sync::Arc;
use warden_config::error::{Location, Problem};
use warden_config::telemetry_tracing::{merge, CustomTag, TelemetryTracing, Tracing};
use warden_config::tracing_provider::{self, TracingKind, DEFAULT_SAMPLING_PERCENT};
use warden_config::{ConfigSet, Doc};
use warden_trace::otlp::Exporter;
use warden_trace::sampling::per_ten_thousand;
use warden_trace::Propagation;

/// Istio's default mesh id (the trust domain's default).
const MESH_ID: &str = "cluster.local";

/// The plan, or none when no tracing provider applies.
pub fn build(
    set: &ConfigSet,
    identity: &ProxyIdentity,
    warnings: &mut Vec<Problem>,
) -> Option<Arc<TracePlan>> {
    let (tracing, from) = match applicable(&set.telemetry_tracing, identity) {
        Some((t, from)) => (t, Some(from)),
        None => (Tracing::default(), None),
    };
    let name = match tracing.providers.first() {
        Some(name) => name.as_str(),
        None => identity.tracing.provider.as_deref()?,
    };
    let problem = |message: String| Problem {
        location: Location::file("--mesh-config", None),
        message,
        code: None,
    };
    let Some(chosen) = tracing_provider::find(&identity.extension_providers, name) else {
        // Only a Telemetry's name can be unknown here (the mesh config's were checked).
        warnings.push(problem(format!(
            "{}: tracing provider {name:?} is not an opentelemetry or zipkin provider of the \
             mesh config's extensionProviders; requests are not traced",
            from.as_deref().unwrap_or("Telemetry")
        )));
        return None;
    };
    let own = istio_peers::own(identity, set);
    let propagation = match chosen.kind {
        TracingKind::OpenTelemetry => Propagation {
            w3c: true,
            b3: false,
        },
        TracingKind::Zipkin => Propagation {
            w3c: false,
            b3: true,
        },
    };
    let service = &chosen.provider.service;
    let host = service.split_once('/').map_or(service.as_str(), |(_, h)| h);
    let port = u16::try_from(chosen.provider.port).unwrap_or(0);
    let report = match chosen.kind {
        _ if tracing.disable_span_reporting == Some(true) => None,
        TracingKind::Zipkin => {
            warnings.push(problem(format!(
                "tracing provider {name:?} is a zipkin provider: B3 headers are propagated, \
                 but warden does not report spans to Zipkin"
            )));
            None
        }
        TracingKind::OpenTelemetry => {
            let address = match rls_address::registry_address(set, host, port) {
                Ok(Some((address, _))) => Some(address),
                Ok(None) if host.parse::<std::net::IpAddr>().is_ok() => Some(join(host, port)),
                Ok(None) => {
                    warnings.push(problem(format!(
                        "tracing provider {name:?}: could not find service {host} in the \
                         registry (ServiceEntry or Kubernetes Service); spans are not reported"
                    )));
                    None
                }
                Err(e) => {
                    warnings.push(problem(format!(
                        "tracing provider {name:?}: {e}; spans are not reported"
                    )));
                    None
                }
            };
            address.map(|address| {
                Arc::new(Report {
                    address,
                    exporter: Exporter {
                        // Istio's default `tracingServiceName`: APP_LABEL_AND_NAMESPACE.
                        service_name: format!("{}.{}", own.canonical_service, own.namespace),
                        attributes: Vec::new(),
                    },
                })
            })
        }
    };
    let mut tags: Vec<(Cow<'static, str>, String)> = vec![
        ("component".into(), "proxy".into()),
        (
            "istio.canonical_revision".into(),
            own.canonical_revision.clone(),
        ),
        (
            "istio.canonical_service".into(),
            own.canonical_service.clone(),
        ),
        ("istio.mesh_id".into(), MESH_ID.into()),
        ("istio.namespace".into(), own.namespace.clone()),
        ("istio.cluster_id".into(), own.cluster.clone()),
    ];
    let mut header_tags = Vec::new();
    for (tag, custom) in &tracing.custom_tags {
        match custom {
            CustomTag::Literal(v) => tags.push((tag.clone().into(), v.clone())),
            // The proxy's own environment, read once (Envoy reads it at startup).
            CustomTag::Environment { name, default } => tags.push((
                tag.clone().into(),
                std::env::var(name).unwrap_or_else(|_| default.clone()),
            )),
            CustomTag::Header { name, default } => {
                if let Ok(header) = http::HeaderName::from_bytes(name.as_bytes()) {
                    header_tags.push((Cow::Owned(tag.clone()), header, default.clone()));
                }
            }
        }
    }
    Some(Arc::new(TracePlan {
        provider: name.to_owned(),
        propagation,
        per_ten_thousand: per_ten_thousand(
            tracing
                .random_sampling_percentage
                .or(identity.tracing.sampling)
                .unwrap_or(DEFAULT_SAMPLING_PERCENT),
        ),
        report,
        max_path_tag_length: chosen
            .provider
            .max_tag_length
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_PATH_TAG_LENGTH),
        tags,
        header_tags,
    }))
}

/// The Telemetry `tracing` for this proxy: the root namespace's, its namespace's and the one
/// selecting its labels, merged in that order; and the narrowest one's id.
fn applicable(
    telemetries: &[Doc<TelemetryTracing>],
    identity: &ProxyIdentity,
) -> Option<(Tracing, String)> {
    let ns = |d: &&Doc<TelemetryTracing>| d.metadata.namespace_or_default().to_string();
    let root = telemetries
        .iter()
        .find(|d| ns(d) == ROOT_NAMESPACE && d.spec.match_labels.is_empty());
    let namespace = telemetries
        .iter()
        .find(|d| ns(d) == identity.namespace && d.spec.match_labels.is_empty());
    let workload = telemetries.iter().find(|d| {
        ns(d) == identity.namespace
            && !d.spec.match_labels.is_empty()
            && d.spec
                .match_labels
                .iter()
                .all(|(k, v)| identity.labels.get(k) == Some(v))
    });
    let mut out: Option<(Tracing, String)> = None;
    for doc in [root, namespace, workload].into_iter().flatten() {
        let merged = match &out {
            Some((wider, _)) => merge(wider, &doc.spec.tracing),
            None => doc.spec.tracing.clone(),
        };
        out = Some((merged, doc.id()));
    }
    out
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
