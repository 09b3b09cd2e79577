//! The proxy's tracing, compiled with its snapshot: the provider `defaultProviders.tracing`
//! names (an `opentelemetry` provider: W3C propagation, spans exported over OTLP/gRPC to its
//! service, resolved through the registry as an ext_authz provider's is; a `zipkin` one: B3
//! propagation, spans not reported), the sampling percentage, and Istio's tags.

use crate::core::identity::ProxyIdentity;
use crate::core::istio_peers;
use crate::core::traces::{Report, TracePlan, DEFAULT_MAX_PATH_TAG_LENGTH};
use crate::filters::global_rate_limit::rls_address;
use std::borrow::Cow;
use std::sync::Arc;
use warden_config::error::{Location, Problem};
use warden_config::tracing_provider::{self, TracingKind, DEFAULT_SAMPLING_PERCENT};
use warden_config::ConfigSet;
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
    let name = identity.tracing.provider.as_deref()?;
    // The mesh config was validated when read: a named provider exists.
    let chosen = tracing_provider::find(&identity.extension_providers, name)?;
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
    let problem = |message: String| Problem {
        location: Location::file("--mesh-config", None),
        message,
        code: None,
    };
    let report = match chosen.kind {
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
    let tags: Vec<(Cow<'static, str>, String)> = vec![
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
    Some(Arc::new(TracePlan {
        provider: name.to_owned(),
        propagation,
        per_ten_thousand: per_ten_thousand(
            identity
                .tracing
                .sampling
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
    }))
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
