//! MeshConfig's tracing: the `opentelemetry` and `zipkin` `extensionProviders`, which one
//! reports (`defaultProviders.tracing`), and the sampling percentage
//! (`defaultConfig.tracing.sampling`; Istio's default is 1%). As in Istio, the Telemetry API's
//! settings (and `defaultProviders`) decide when present; `enableTracing` only gates the
//! legacy `defaultConfig.tracing` tracers, which warden does not have.

use crate::field_path::FieldPath;
use serde::Deserialize;

/// Istio's sampling percentage when neither Telemetry nor `defaultConfig.tracing.sampling`
/// sets one (`PILOT_TRACE_SAMPLING`'s default).
pub const DEFAULT_SAMPLING_PERCENT: f64 = 1.0;

/// `extensionProviders[].opentelemetry` / `.zipkin`: the collector's registry service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracingProvider {
    /// `host` or `namespace/host` of a registry service.
    #[serde(default)]
    pub service: String,
    #[serde(default, deserialize_with = "crate::ext_authz_provider::port")]
    pub port: u32,
    /// The longest `http.url` tag (Envoy's `max_path_tag_length`, 256 when unset).
    #[serde(default)]
    pub max_tag_length: Option<u32>,
}

/// MeshConfig `defaultProviders`: the providers used when no Telemetry resource names one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultProviders {
    #[serde(default)]
    pub tracing: Vec<String>,
    /// Unset: Istio's installed mesh config (`[prometheus]`).
    #[serde(default)]
    pub metrics: Option<Vec<String>>,
}

impl DefaultProviders {
    /// Whether Istio's metrics are on where no Telemetry says otherwise (warden writes the
    /// `prometheus` provider's).
    pub fn prometheus(&self) -> bool {
        self.metrics
            .as_ref()
            .is_none_or(|m| m.iter().any(|p| p == "prometheus"))
    }
}

/// ProxyConfig `tracing` (`defaultConfig.tracing`): only `sampling` is read; the legacy
/// tracers under it (`zipkin`, `lightstep`, ...) are warnings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyTracing {
    #[serde(default)]
    pub sampling: Option<f64>,
}

/// How a tracing provider's spans are propagated and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TracingKind {
    /// W3C Trace Context; spans exported over OTLP/gRPC.
    OpenTelemetry,
    /// B3 headers (Envoy's Zipkin tracer); spans are not reported by warden.
    Zipkin,
}

/// A named tracing provider, found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen<'a> {
    pub name: &'a str,
    pub kind: TracingKind,
    pub provider: &'a TracingProvider,
}

/// The tracing provider named `name`, if it is one.
pub fn find<'a>(
    providers: &'a [crate::ext_authz_provider::ExtensionProvider],
    name: &str,
) -> Option<Chosen<'a>> {
    let p = providers.iter().find(|p| p.name == name)?;
    let (kind, provider) = match (&p.opentelemetry, &p.zipkin) {
        (Some(o), _) => (TracingKind::OpenTelemetry, o),
        (None, Some(z)) => (TracingKind::Zipkin, z),
        (None, None) => return None,
    };
    Some(Chosen {
        name: &p.name,
        kind,
        provider,
    })
}

/// istiod's checks of the tracing settings: (field, message) per problem.
pub fn validate(mesh: &crate::mesh_config::MeshConfig) -> Vec<(FieldPath, String)> {
    let mut problems = Vec::new();
    for (i, p) in mesh.extension_providers.iter().enumerate() {
        let at = FieldPath::root().key("extensionProviders").index(i);
        for (kind, t) in [("opentelemetry", &p.opentelemetry), ("zipkin", &p.zipkin)] {
            let Some(t) = t else { continue };
            let kinds = [
                p.envoy_ext_authz_grpc.is_some(),
                p.envoy_ext_authz_http.is_some(),
                p.opentelemetry.is_some(),
                p.zipkin.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() > 1 {
                problems.push((at.clone(), "a provider has one kind".into()));
            }
            let at = at.key(kind);
            if t.service.trim().is_empty() {
                problems.push((at.key("service"), "service is required".into()));
            }
            if !(1..=65535).contains(&t.port) {
                problems.push((
                    at.key("port"),
                    format!("port must be in the range [1, 65535], found: {}", t.port),
                ));
            }
        }
    }
    let names = &mesh.default_providers.tracing;
    let at = FieldPath::root().key("defaultProviders").key("tracing");
    if names.len() > 1 {
        // Istio reports to the first and logs the rest as unsupported; one is what works.
        problems.push((
            at.clone(),
            format!("only one tracing provider is supported, found {names:?}"),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if find(&mesh.extension_providers, name).is_none() {
            problems.push((
                at.index(i),
                format!(
                    "{name:?} is not an opentelemetry or zipkin provider of extensionProviders"
                ),
            ));
        }
    }
    if let Some(s) = mesh.default_config.tracing.sampling {
        if !(0.0..=100.0).contains(&s) {
            problems.push((
                FieldPath::root()
                    .key("defaultConfig")
                    .key("tracing")
                    .key("sampling"),
                format!("sampling must be in the range [0, 100], found: {s}"),
            ));
        }
    }
    problems
}
