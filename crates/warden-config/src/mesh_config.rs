//! `warden proxy --mesh-config FILE`: the proxy's timeouts and connection limits in Istio's
//! MeshConfig shape (the text of the `mesh` key of the `istio` ConfigMap, as
//! `istioctl --meshConfigFile` reads it).
//!
//! MeshConfig fields that say the same as a warden setting are read under their Istio names
//! (`connectTimeout`, `protocolDetectionTimeout`, `defaultConfig.terminationDrainDuration`,
//! `defaultConfig.gatewayTopology`, the XFCC fields of `defaultConfig.proxyHeaders`);
//! the Envoy settings MeshConfig has no field for go in a `warden:` section under Envoy's
//! names. A field that would change what requests get and that warden does not read is an
//! error, never ignored; a few that only concern Istio's control plane or telemetry are
//! warnings. Every problem names file:line and field.

use crate::error::{ConfigErrors, Location, Problem};
use crate::field_path::FieldPath;
use crate::yaml_source;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// What a mesh-config file sets; `None` leaves the flag's default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshConfig {
    /// Upstream connect timeout (MeshConfig `connectTimeout`).
    #[serde(default, deserialize_with = "duration")]
    pub connect_timeout: Option<Duration>,
    /// Sidecar protocol sniffing wait (MeshConfig `protocolDetectionTimeout`).
    #[serde(default, deserialize_with = "duration")]
    pub protocol_detection_timeout: Option<Duration>,
    #[serde(default)]
    pub default_config: ProxyConfig,
    /// `extensionProviders`: the external authorizers CUSTOM AuthorizationPolicies name
    /// ([`crate::ext_authz_provider`]).
    #[serde(default)]
    pub extension_providers: Vec<crate::ext_authz_provider::ExtensionProvider>,
    #[serde(default)]
    pub warden: WardenSection,
    /// `enableTracing`: read for completeness; it gates only Istio's legacy tracers
    /// (`crate::tracing_provider`).
    #[serde(default)]
    pub enable_tracing: Option<bool>,
    /// `defaultProviders`: the tracing provider when no Telemetry resource names one, and the
    /// metrics providers under the Telemetry API's.
    #[serde(default)]
    pub default_providers: crate::tracing_provider::DefaultProviders,
    /// Where requests are logged (`accessLogFile`; empty or unset: not logged).
    #[serde(default)]
    pub access_log_file: Option<String>,
    /// `accessLogEncoding`: TEXT (Istio's default) or JSON.
    #[serde(default)]
    pub access_log_encoding: Option<AccessLogEncoding>,
    /// `accessLogFormat`: an Envoy format string (TEXT) or a JSON object of them (JSON);
    /// unset is Istio's default for the encoding. The proxy parses it.
    #[serde(default)]
    pub access_log_format: Option<String>,
    /// Where `accessLogFormat` is, for the problems the proxy finds in it.
    #[serde(skip)]
    pub access_log_format_at: Option<Location>,
}

/// MeshConfig `accessLogEncoding`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AccessLogEncoding {
    #[default]
    Text,
    Json,
}

/// MeshConfig `defaultConfig` (Istio's ProxyConfig).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfig {
    /// How long a stopping proxy lets in-flight requests finish (`--drain-timeout`).
    #[serde(default, deserialize_with = "duration")]
    pub termination_drain_duration: Option<Duration>,
    /// A gateway's `numTrustedProxies` and `forwardClientCertDetails`; its pod's
    /// `proxy.istio.io/config` annotation wins field by field.
    #[serde(default)]
    pub gateway_topology: crate::proxy_config::GatewayTopology,
    /// A sidecar inbound side's `forwardedClientCert` and `setCurrentClientCertDetails`;
    /// its pod's annotation wins field by field. Other `proxyHeaders` fields are errors.
    #[serde(default)]
    pub proxy_headers: crate::proxy_config::ProxyHeaders,
    /// `tracing.sampling`: the sampling percentage when Telemetry sets none.
    #[serde(default)]
    pub tracing: crate::tracing_provider::ProxyTracing,
}

/// Envoy's downstream settings, under Envoy's names in camelCase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WardenSection {
    #[serde(default, deserialize_with = "duration")]
    pub request_headers_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub max_connection_duration: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub stream_idle_timeout: Option<Duration>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    #[serde(default)]
    pub max_connections_per_listener: Option<usize>,
    #[serde(default)]
    pub max_connections_per_ip: Option<usize>,
    /// Envoy's `xff_trusted_cidrs`: the proxies in front of a gateway named by address
    /// (`numTrustedProxies` counts them); not with a nonzero `numTrustedProxies`.
    #[serde(default)]
    pub xff_trusted_cidrs: Option<XffTrustedCidrs>,
}

/// `warden.xffTrustedCidrs`, Envoy's XffConfig `xff_trusted_cidrs` with CIDRs written as
/// Istio writes them (`10.0.0.0/8`, or one address).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct XffTrustedCidrs {
    #[serde(deserialize_with = "cidrs")]
    pub cidrs: Vec<ipnet::IpNet>,
    /// Walk `x-forwarded-for` past every trusted entry (else only its last entry is read).
    #[serde(default)]
    pub recurse: bool,
}

/// MeshConfig fields warden does not read that change nothing a request gets (the control
/// plane's, telemetry's): a warning each. Any other unread field is an error.
const HARMLESS: &[&str] = &[
    "enablePrometheusMerge",
    "rootNamespace",
    "trustDomain",
    "trustDomainAliases",
    "ingressClass",
    "ingressService",
    "ingressControllerMode",
    "ingressSelector",
    "defaultConfig.discoveryAddress",
    "defaultConfig.proxyMetadata",
    "defaultProviders.accessLogging",
    "defaultConfig.holdApplicationUntilProxyStarts",
    "defaultConfig.statusPort",
    "defaultConfig.proxyStatsMatcher",
];

/// An unread tracing field: a warning (`Ok`) when it changes only what is reported, an error
/// when it would change the trace headers requests get.
fn tracing_field(field: &FieldPath) -> Option<Result<&'static str, &'static str>> {
    use crate::field_path::Segment;
    match field.segments() {
        [Segment::Key(a), Segment::Key(b), ..] if a == "defaultConfig" && b == "tracing" => {
            Some(Ok(
                "Istio's legacy tracer settings; warden traces through extensionProviders and \
                defaultProviders.tracing; ignored",
            ))
        }
        [Segment::Key(top), Segment::Index(_), Segment::Key(kind), Segment::Key(name), ..]
            if top == "extensionProviders" && (kind == "opentelemetry" || kind == "zipkin") =>
        {
            Some(match name.as_str() {
                "dynatraceSampler" | "traceContextOption" => Err(
                    "not supported by warden; it changes which requests are sampled or the \
                     trace headers they carry, so it is an error rather than ignored",
                ),
                _ => Ok("changes only how spans are reported; not used by warden; ignored"),
            })
        }
        _ => None,
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    text.map(|t| crate::duration::parse_duration(&t).map_err(de::Error::custom))
        .transpose()
}

fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ipnet::IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    if texts.is_empty() {
        return Err(de::Error::custom("needs at least one CIDR"));
    }
    texts
        .iter()
        .map(|t| {
            t.parse::<ipnet::IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| de::Error::custom(format!("{t:?} is not a CIDR or an IP address")))
        })
        .collect()
}

/// Read a mesh-config file: the settings, and warnings for the harmless fields it ignored.
pub fn load_mesh_config(path: &Path) -> Result<(MeshConfig, Vec<Problem>), ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors::new(vec![Problem {
            location: Location::file(path, None),
            message: format!("cannot read mesh config: {e}"),
            code: None,
        }])
    })?;
    parse_mesh_config(path, &text)
}

/// [`load_mesh_config`] on text already read (`path` names it in problems).
pub fn parse_mesh_config(
    path: &Path,
    text: &str,
) -> Result<(MeshConfig, Vec<Problem>), ConfigErrors> {
    let whole_file = |line, message: String| {
        ConfigErrors::new(vec![Problem {
            location: Location::file(path, line),
            message,
            code: None,
        }])
    };
    let docs = yaml_source::parse_documents(text)
        .map_err(|e| whole_file(e.line, format!("invalid YAML: {}", e.message)))?;
    let doc = match docs.len() {
        0 => return Ok((MeshConfig::default(), Vec::new())),
        1 => docs
            .into_iter()
            .next()
            .ok_or_else(|| whole_file(None, "no document".into()))?,
        n => {
            return Err(whole_file(
                None,
                format!("a mesh config is one YAML document, not {n}"),
            ))
        }
    };
    let lines = doc.lines;
    let at = |field: &FieldPath, message: String| Problem {
        location: Location {
            file: path.to_path_buf(),
            line: lines.line_of(field),
            document: 1,
            object: "MeshConfig".into(),
            field: field.to_string(),
        },
        message,
        code: None,
    };
    let mut ignored = Vec::new();
    let decoded: Result<MeshConfig, _> = {
        let mut record = |p: serde_ignored::Path<'_>| ignored.push(FieldPath::from_ignored(&p));
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(doc.value, &mut record))
    };
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for field in ignored {
        if crate::ext_authz_provider::is_telemetry_provider(&field) {
            warnings.push(at(
                &field,
                "a telemetry provider (Telemetry resources name it); warden does not read it"
                    .into(),
            ));
        } else if let Some(tracing) = tracing_field(&field) {
            match tracing {
                Ok(message) => warnings.push(at(&field, message.into())),
                Err(message) => errors.push(at(&field, message.into())),
            }
        } else if HARMLESS.contains(&field.to_string().as_str()) {
            warnings.push(at(&field, "not used by warden; ignored".into()));
        } else {
            errors.push(at(
                &field,
                "not supported by warden; it could change what requests get, so it is an error \
                 rather than ignored"
                    .into(),
            ));
        }
    }
    if let Ok(config) = &decoded {
        for (field, message) in crate::ext_authz_provider::validate(&config.extension_providers) {
            errors.push(at(&field, message));
        }
        for (field, message) in crate::tracing_provider::validate(config) {
            errors.push(at(&field, message));
        }
        let metrics = config
            .default_providers
            .metrics
            .as_deref()
            .unwrap_or_default();
        for (i, name) in metrics.iter().enumerate() {
            if name != "prometheus" {
                let field = FieldPath::root()
                    .key("defaultProviders")
                    .key("metrics")
                    .index(i);
                warnings.push(at(
                    &field,
                    format!("metrics provider {name:?}: warden writes the prometheus provider's metrics only; ignored"),
                ));
            }
        }
    }
    match decoded {
        Ok(mut config) if errors.is_empty() => {
            if config.access_log_format.is_some() {
                let field = FieldPath::keys(&["accessLogFormat"]);
                config.access_log_format_at = Some(at(&field, String::new()).location);
            }
            Ok((config, warnings))
        }
        Ok(_) => Err(ConfigErrors::new(errors)),
        Err(e) => {
            let field = FieldPath::from_path_to_error(e.path());
            errors.insert(0, at(&field, e.into_inner().to_string()));
            Err(ConfigErrors::new(errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(MeshConfig, Vec<Problem>), ConfigErrors> {
        parse_mesh_config(Path::new("mesh.yaml"), text)
    }

    #[test]
    fn default_metrics_providers_are_read() {
        let cases = [
            ("", true, 0),
            ("defaultProviders:\n  metrics: [prometheus]\n", true, 0),
            ("defaultProviders:\n  metrics: []\n", false, 0),
            ("defaultProviders: {}\n", true, 0),
            (
                "defaultProviders:\n  metrics: [stackdriver, prometheus]\n",
                true,
                1,
            ),
            ("defaultProviders:\n  metrics: [stackdriver]\n", false, 1),
        ];
        for (text, on, warned) in cases {
            let (config, warnings) = parse(text).unwrap();
            assert_eq!(config.default_providers.prometheus(), on, "{text}");
            assert_eq!(warnings.len(), warned, "{text}");
        }
        let (_, warnings) = parse("defaultProviders:\n  metrics: [prometheus, sd]\n").unwrap();
        assert_eq!(warnings[0].location.field, "defaultProviders.metrics[1]");
        assert_eq!(warnings[0].location.line, Some(2));
    }

    #[test]
    fn istio_and_warden_fields_are_read() {
        let (config, warnings) = parse(
            "connectTimeout: 2s\nenableTracing: true\ndefaultConfig:\n  terminationDrainDuration: 7s\n  \
             discoveryAddress: istiod:15012\nwarden:\n  requestHeadersTimeout: 5s\n  idleTimeout: 10m\n  \
             streamIdleTimeout: 1m\n  maxConnectionsPerIp: 50\n",
        )
        .unwrap();
        assert_eq!(config.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(
            config.default_config.termination_drain_duration,
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            config.warden.request_headers_timeout,
            Some(Duration::from_secs(5))
        );
        assert_eq!(config.warden.idle_timeout, Some(Duration::from_secs(600)));
        assert_eq!(
            config.warden.stream_idle_timeout,
            Some(Duration::from_secs(60))
        );
        assert_eq!(config.warden.max_connections_per_ip, Some(50));
        assert_eq!(config.warden.max_connection_duration, None);
        let warned: Vec<_> = warnings.iter().map(|w| w.location.field.as_str()).collect();
        assert_eq!(warned, ["defaultConfig.discoveryAddress"]);
        assert_eq!(config.enable_tracing, Some(true));
        assert_eq!(parse("").unwrap().0, MeshConfig::default());
        let (config, _) = parse(
            "defaultConfig:\n  gatewayTopology:\n    numTrustedProxies: 2\n    \
             forwardClientCertDetails: ALWAYS_FORWARD_ONLY\n",
        )
        .unwrap();
        let (config2, _) = parse(
            "defaultConfig:\n  proxyHeaders:\n    forwardedClientCert: SANITIZE_SET\n    \
             setCurrentClientCertDetails: {cert: true}\n",
        )
        .unwrap();
        let headers = config2.default_config.proxy_headers;
        assert_eq!(
            headers.forwarded_client_cert,
            Some(crate::proxy_config::ForwardClientCertDetails::SanitizeSet)
        );
        assert_eq!(
            headers.set_current_client_cert_details.unwrap().cert,
            Some(true)
        );
        let err =
            parse("defaultConfig:\n  proxyHeaders:\n    server: {disabled: true}\n").unwrap_err();
        assert!(
            err.to_string().contains("mesh.yaml:3")
                && err
                    .to_string()
                    .contains("field defaultConfig.proxyHeaders.server"),
            "{err}"
        );
        let topology = config.default_config.gateway_topology;
        assert_eq!(topology.num_trusted_proxies, Some(2));
        assert_eq!(
            topology.forward_client_cert_details,
            Some(crate::proxy_config::ForwardClientCertDetails::AlwaysForwardOnly)
        );
    }

    #[test]
    fn access_log_fields_are_read() {
        let (config, warnings) = parse(
            "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: |\n  {\"a\": \"%RESPONSE_CODE%\"}\n",
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.access_log_file.as_deref(), Some("/dev/stdout"));
        assert_eq!(config.access_log_encoding, Some(AccessLogEncoding::Json));
        assert_eq!(
            config.access_log_format.as_deref(),
            Some("{\"a\": \"%RESPONSE_CODE%\"}\n")
        );
        let at = config.access_log_format_at.unwrap();
        // A block scalar is located at its first line of text.
        assert_eq!((at.line, at.field.as_str()), (Some(4), "accessLogFormat"));
        let err = parse("accessLogEncoding: XML\n").unwrap_err().to_string();
        assert!(
            err.contains("mesh.yaml:1") && err.contains("accessLogEncoding"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let err = parse("warden:\n  idleTimeout: 10m\n  streamIdleTimeout: soon\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("mesh.yaml:3: document 1 (MeshConfig), field warden.streamIdleTimeout"),
            "{text}"
        );
        let err =
            parse("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nwarden:\n  idleTimeOut: 1s\n")
                .unwrap_err();
        let text = err.to_string();
        // A field holding a mapping is located where its value starts.
        assert!(
            text.contains("mesh.yaml:2") && text.contains("field outboundTrafficPolicy"),
            "{text}"
        );
        assert!(
            text.contains("mesh.yaml:4") && text.contains("field warden.idleTimeOut"),
            "{text}"
        );
        let err = parse(
            "defaultConfig:\n  gatewayTopology:\n    numTrustedProxies: 1\n    \
             forwardClientCertDetails: SANITISE\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("mesh.yaml:4")
                && text.contains("field defaultConfig.gatewayTopology.forwardClientCertDetails")
                && text.contains("SANITISE"),
            "{text}"
        );
        let err = parse("defaultConfig:\n  gatewayTopology:\n    proxyProtocol: {}\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("field defaultConfig.gatewayTopology.proxyProtocol"),
            "{err}"
        );
        let err = parse("warden:\n  maxConnections: -1\n").unwrap_err();
        assert!(err.to_string().contains("mesh.yaml:2"), "{err}");
        let err = parse("warden: [\n").unwrap_err();
        assert!(err.to_string().contains("invalid YAML"), "{err}");
    }

    #[test]
    fn xff_trusted_cidrs_are_read_and_checked() {
        let (config, _) = parse(
            "warden:\n  xffTrustedCidrs:\n    cidrs: [10.0.0.0/8, 192.168.1.7, \"2001:db8::/32\"]\n    \
             recurse: true\n",
        )
        .unwrap();
        let trusted = config.warden.xff_trusted_cidrs.unwrap();
        let shown: Vec<String> = trusted.cidrs.iter().map(|c| c.to_string()).collect();
        assert_eq!(shown, ["10.0.0.0/8", "192.168.1.7/32", "2001:db8::/32"]);
        assert!(trusted.recurse);
        let (config, _) = parse("warden:\n  xffTrustedCidrs: {cidrs: [10.0.0.0/8]}\n").unwrap();
        assert!(!config.warden.xff_trusted_cidrs.unwrap().recurse);
        for (text, field, says) in [
            (
                "warden:\n  xffTrustedCidrs:\n    cidrs: [10.0.0.0/33]\n",
                "warden.xffTrustedCidrs.cidrs",
                "not a CIDR",
            ),
            (
                "warden:\n  xffTrustedCidrs:\n    cidrs: []\n",
                "warden.xffTrustedCidrs.cidrs",
                "at least one",
            ),
            (
                "warden:\n  xffTrustedCidrs:\n    cidr: [10.0.0.0/8]\n",
                "warden.xffTrustedCidrs",
                "cidrs",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.contains(&format!("field {field}")) && err.contains(says),
                "{text}: {err}"
            );
        }
    }
}

#[cfg(test)]
mod tracing_tests {
    use super::*;

    fn parse(text: &str) -> Result<(MeshConfig, Vec<Problem>), ConfigErrors> {
        parse_mesh_config(Path::new("mesh.yaml"), text)
    }

    #[test]
    fn tracing_providers_defaults_and_sampling_are_read() {
        let (config, warnings) = parse(
            "enableTracing: true\ndefaultProviders:\n  tracing: [otel]\n  metrics: [prometheus]\n\
             defaultConfig:\n  tracing:\n    sampling: 25.5\n    zipkin: {address: z:9411}\n\
             extensionProviders:\n- name: otel\n  opentelemetry:\n    service: otel.observability.svc.cluster.local\n    port: 4317\n    resourceDetectors: {environment: {}}\n\
             - name: zip\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: \"9411\"}\n",
        )
        .unwrap();
        let warned: Vec<_> = warnings.iter().map(|w| w.location.field.as_str()).collect();
        assert_eq!(
            warned,
            [
                "defaultConfig.tracing.zipkin",
                "extensionProviders[0].opentelemetry.resourceDetectors"
            ]
        );
        assert_eq!(config.default_config.tracing.sampling, Some(25.5));
        let chosen = crate::tracing_provider::find(&config.extension_providers, "otel").unwrap();
        assert_eq!(
            chosen.kind,
            crate::tracing_provider::TracingKind::OpenTelemetry
        );
        assert_eq!(chosen.provider.port, 4317);
        let zip = crate::tracing_provider::find(&config.extension_providers, "zip").unwrap();
        assert_eq!(zip.kind, crate::tracing_provider::TracingKind::Zipkin);
        assert_eq!(zip.provider.port, 9411);
    }

    #[test]
    fn tracing_problems_name_their_field() {
        for (text, field, says) in [
            (
                "defaultProviders: {tracing: [nope]}\n",
                "defaultProviders.tracing[0]",
                "not an opentelemetry or zipkin provider",
            ),
            (
                "defaultConfig: {tracing: {sampling: 101}}\n",
                "defaultConfig.tracing.sampling",
                "[0, 100]",
            ),
            (
                "extensionProviders:\n- name: o\n  opentelemetry: {service: c, port: 0}\n",
                "extensionProviders[0].opentelemetry.port",
                "range",
            ),
            (
                "extensionProviders:\n- name: o\n  opentelemetry: {port: 4317}\n",
                "extensionProviders[0].opentelemetry.service",
                "required",
            ),
            (
                "extensionProviders:\n- name: o\n  opentelemetry:\n    service: c\n    port: 4317\n    dynatraceSampler: {tenant: t}\n",
                "extensionProviders[0].opentelemetry.dynatraceSampler",
                "sampled",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.contains(&format!("field {field}")) && err.contains(says),
                "{text}: {err}"
            );
        }
    }
}
