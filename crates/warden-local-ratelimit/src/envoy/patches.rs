//! Sorting the configPatches of EnvoyFilter documents into the rate limit pieces warden
//! implements, with errors and warnings that name the file, document and patch field.

use super::actions::RateLimitEntry;
use super::cluster_config::StaticCluster;
use super::global_config::{HttpRateLimit, HTTP_RATELIMIT_TYPE};
use super::local_config::{
    HttpLocalRateLimit, NetworkLocalRateLimit, HTTP_LOCAL_RATELIMIT_TYPE,
    NETWORK_LOCAL_RATELIMIT_TYPE,
};
use super::typed;
use crate::problem::DocSite;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use warden_config::kinds::envoy_filter::{ConfigPatch, RouteConfigurationMatch};
use warden_config::{Doc, EnvoyFilter, Location, Problem};

/// Envoy's Lua filter and its per-route config: warden-proxy's Lua filter reads them.
pub const LUA_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua";
pub const LUA_PER_ROUTE_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute";

/// Where a patch came from and what it was scoped to.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchOrigin {
    /// `EnvoyFilter/<name>`.
    pub filter: String,
    /// `spec.configPatches[i]`.
    pub field: String,
    pub context: Option<String>,
    pub workload_labels: Option<BTreeMap<String, String>>,
    /// `applyTo`: `VIRTUAL_HOST`, `HTTP_ROUTE`, `HTTP_FILTER`, ...
    pub apply_to: String,
    /// `match.routeConfiguration` (default: everything): which route configurations, virtual
    /// hosts and routes a VIRTUAL_HOST / HTTP_ROUTE patch lands on; the proxy resolves it.
    pub route_match: RouteConfigurationMatch,
    /// The EnvoyFilter document (file, index, kind/name; field empty).
    pub document: Location,
    /// Full field path of the interpreted config, e.g.
    /// `spec.configPatches[0].patch.value.typed_config.value`.
    pub config_field: String,
}

impl PatchOrigin {
    /// Patch `index` of `doc`, found in `document`; `config_field` is left for the caller.
    pub fn of(
        doc: &Doc<EnvoyFilter>,
        index: usize,
        patch: &ConfigPatch,
        document: Location,
    ) -> PatchOrigin {
        PatchOrigin {
            filter: doc.id(),
            field: format!("spec.configPatches[{index}]"),
            context: patch.matches.as_ref().and_then(|m| m.context.clone()),
            workload_labels: doc
                .spec
                .workload_selector
                .as_ref()
                .map(|w| w.labels.clone()),
            apply_to: patch.apply_to.clone(),
            route_match: patch
                .matches
                .as_ref()
                .and_then(|m| m.route_configuration.clone())
                .unwrap_or_default(),
            document,
            config_field: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Patched<T> {
    pub origin: PatchOrigin,
    pub config: T,
}

/// Everything rate-limit related found in a set of EnvoyFilters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvoyRateLimitPatches {
    /// HTTP_FILTER `envoy.filters.http.local_ratelimit` (filter-level config).
    pub http_local: Vec<Patched<HttpLocalRateLimit>>,
    /// `typed_per_filter_config` for the local filter on a VIRTUAL_HOST / HTTP_ROUTE.
    pub route_local: Vec<Patched<HttpLocalRateLimit>>,
    /// NETWORK_FILTER `envoy.filters.network.local_ratelimit` (connections per interval).
    pub network_local: Vec<Patched<NetworkLocalRateLimit>>,
    /// HTTP_FILTER `envoy.filters.http.ratelimit` (the global limiter's filter).
    pub http_global: Vec<Patched<HttpRateLimit>>,
    /// `rate_limits` merged into a VIRTUAL_HOST, or into an HTTP_ROUTE's `route` action.
    pub route_rate_limits: Vec<Patched<RouteRateLimits>>,
    /// CLUSTER patches ADDing a static cluster (a rate limit service's address).
    pub clusters: Vec<Patched<StaticCluster>>,
    /// Unsupported patches and ignored fields.
    pub warnings: Vec<Problem>,
}

/// The `rate_limits` of one VIRTUAL_HOST or HTTP_ROUTE patch.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteRateLimits {
    pub entries: Vec<RateLimitEntry>,
    /// `route.include_vh_rate_limits` of an HTTP_ROUTE patch: the virtual host's rate limits
    /// apply too (by default a route's own rate limits replace them, as in Envoy).
    pub include_vh_rate_limits: bool,
}

/// Interpret every patch of every EnvoyFilter; all errors are returned together.
pub fn interpret(filters: &[Doc<EnvoyFilter>]) -> Result<EnvoyRateLimitPatches, Vec<Problem>> {
    let mut out = EnvoyRateLimitPatches::default();
    let mut errors = Vec::new();
    for doc in filters {
        let site = DocSite::of(doc);
        for (i, patch) in doc.spec.config_patches.iter().enumerate() {
            let origin = PatchOrigin::of(doc, i, patch, site.location().clone());
            let mut cx = Cx {
                site: &site,
                origin,
                out: &mut out,
                errors: &mut errors,
            };
            cx.patch(patch);
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

struct Cx<'a> {
    site: &'a DocSite,
    origin: PatchOrigin,
    out: &'a mut EnvoyRateLimitPatches,
    errors: &'a mut Vec<Problem>,
}

impl Cx<'_> {
    fn origin_at(&self, path: &str) -> PatchOrigin {
        PatchOrigin {
            config_field: self.field(path),
            ..self.origin.clone()
        }
    }

    fn field(&self, rest: &str) -> String {
        format!("{}{rest}", self.origin.field)
    }

    fn unsupported(&mut self, rest: &str, what: String) {
        let field = self.field(rest);
        self.out.warnings.push(self.site.problem(
            field,
            format!("unsupported EnvoyFilter patch ({what}); warden ignores it"),
        ));
    }

    fn error(&mut self, rest: &str, message: impl Into<String>) {
        let field = self.field(rest);
        self.errors.push(self.site.problem(field, message));
    }

    fn patch(&mut self, patch: &ConfigPatch) {
        let op = patch.patch.operation.as_str();
        let Some(value) = patch.patch.value.as_ref() else {
            return self.unsupported(".patch", format!("{} {op} without a value", patch.apply_to));
        };
        match patch.apply_to.as_str() {
            "HTTP_FILTER" | "NETWORK_FILTER" => {
                let inserting = matches!(
                    op,
                    "INSERT_BEFORE" | "INSERT_AFTER" | "INSERT_FIRST" | "ADD" | "REPLACE"
                );
                if !inserting {
                    let name = value.get("name").and_then(Value::as_str).unwrap_or("?");
                    return self.unsupported(
                        ".patch.operation",
                        format!("{op} of {} {name}", patch.apply_to),
                    );
                }
                self.filter(&patch.apply_to, value);
            }
            "VIRTUAL_HOST" | "HTTP_ROUTE" => {
                if op != "MERGE" {
                    return self
                        .unsupported(".patch.operation", format!("{op} on {}", patch.apply_to));
                }
                self.route_merge(&patch.apply_to, value);
            }
            "CLUSTER" if op == "ADD" => {
                let path = ".patch.value";
                if let Some(config) = self.decode::<StaticCluster>(value.clone(), path) {
                    if let Err((f, m)) = config.check() {
                        return self.error(&format!("{path}{f}"), m);
                    }
                    let origin = self.origin_at(path);
                    self.out.clusters.push(Patched { origin, config });
                }
            }
            other => self.unsupported(".applyTo", format!("applyTo {other} {op}")),
        }
    }

    fn filter(&mut self, apply_to: &str, value: &Value) {
        let name = value.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(typed_config) = value
            .get("typed_config")
            .or_else(|| value.get("typedConfig"))
        else {
            return self.unsupported(
                ".patch.value",
                format!("filter {name:?} without typed_config"),
            );
        };
        let (type_url, fields, inner) = match typed::unwrap(typed_config) {
            Ok(t) => t,
            Err(e) => return self.error(".patch.value.typed_config", e),
        };
        let path = format!(".patch.value.typed_config{inner}");
        match (apply_to, type_url.as_str()) {
            ("HTTP_FILTER", HTTP_LOCAL_RATELIMIT_TYPE) => {
                if let Some(config) = self.decode::<HttpLocalRateLimit>(fields, &path) {
                    self.push_http_local(config, &path, false);
                }
            }
            ("HTTP_FILTER", HTTP_RATELIMIT_TYPE) => {
                if let Some(config) = self.decode::<HttpRateLimit>(fields, &path) {
                    if config.domain.is_empty() {
                        return self.error(&format!("{path}.domain"), "domain must not be empty");
                    }
                    if config.rate_limit_service.grpc_service.envoy_grpc.is_none() {
                        return self.error(
                            &format!("{path}.rate_limit_service.grpc_service"),
                            "only envoy_grpc {cluster_name} is supported",
                        );
                    }
                    let origin = self.origin_at(&path);
                    self.out.http_global.push(Patched { origin, config });
                }
            }
            ("NETWORK_FILTER", NETWORK_LOCAL_RATELIMIT_TYPE) => {
                if let Some(config) = self.decode::<NetworkLocalRateLimit>(fields, &path) {
                    if let Err((f, m)) = super::patches::check_bucket(&config.token_bucket) {
                        return self.error(&format!("{path}.token_bucket{f}"), m);
                    }
                    let origin = self.origin_at(&path);
                    self.out.network_local.push(Patched { origin, config });
                }
            }
            // Interpreted by the proxy's Lua filter.
            ("HTTP_FILTER", LUA_TYPE) => {}
            _ => {
                let what = if name.is_empty() {
                    type_url.clone()
                } else {
                    format!("{name}, {type_url}")
                };
                self.unsupported(".patch.value", format!("{apply_to} {what}"))
            }
        }
    }

    fn push_http_local(&mut self, config: HttpLocalRateLimit, path: &str, per_route: bool) {
        if let Some(tb) = &config.token_bucket {
            if let Err((f, m)) = check_bucket(tb) {
                return self.error(&format!("{path}.token_bucket{f}"), m);
            }
        } else if per_route {
            return self.error(
                &format!("{path}.token_bucket"),
                "a per-route local_ratelimit config requires token_bucket",
            );
        }
        if config.local_rate_limit_per_downstream_connection {
            self.out.warnings.push(self.site.problem(
                self.field(&format!(
                    "{path}.local_rate_limit_per_downstream_connection"
                )),
                "per-connection buckets are not supported; buckets are shared by the proxy",
            ));
        }
        let origin = self.origin_at(path);
        let patched = Patched { origin, config };
        if per_route {
            self.out.route_local.push(patched);
        } else {
            self.out.http_local.push(patched);
        }
    }

    /// MERGE into a VirtualHost (`rate_limits`, `typed_per_filter_config`) or a Route
    /// (`route.rate_limits` of its action, `typed_per_filter_config`), as Envoy's protos have them.
    fn route_merge(&mut self, apply_to: &str, value: &Value) {
        let Some(obj) = value.as_object() else {
            return self.error(".patch.value", "must be an object");
        };
        let on_route = apply_to == "HTTP_ROUTE";
        for (key, v) in obj {
            match key.as_str() {
                "rate_limits" | "rateLimits" if !on_route => {
                    self.rate_limits(&format!(".patch.value.{key}"), v, false);
                }
                "rate_limits" | "rateLimits" => self.error(
                    &format!(".patch.value.{key}"),
                    "a Route has no rate_limits: they belong to its action, \
                     `route: {rate_limits: [...]}` (Envoy's RouteAction)",
                ),
                "route" if on_route => {
                    let Some(action) = v.as_object() else {
                        self.error(".patch.value.route", "must be an object");
                        continue;
                    };
                    let include_vh = action
                        .get("include_vh_rate_limits")
                        .or_else(|| action.get("includeVhRateLimits"));
                    let include_vh = match include_vh {
                        None => false,
                        Some(Value::Bool(b)) => *b,
                        Some(_) => {
                            self.error(
                                ".patch.value.route.include_vh_rate_limits",
                                "must be true or false",
                            );
                            false
                        }
                    };
                    for (k, rl) in action {
                        match k.as_str() {
                            "rate_limits" | "rateLimits" => {
                                self.rate_limits(&format!(".patch.value.route.{k}"), rl, include_vh)
                            }
                            "include_vh_rate_limits" | "includeVhRateLimits" => {}
                            other => self.unsupported(
                                &format!(".patch.value.route.{other}"),
                                format!("route action field {other}"),
                            ),
                        }
                    }
                }
                "typed_per_filter_config" | "typedPerFilterConfig" => {
                    let Some(per_filter) = v.as_object() else {
                        self.error(&format!(".patch.value.{key}"), "must be an object");
                        continue;
                    };
                    for (filter_name, typed_config) in per_filter {
                        let base = format!(".patch.value.{key}.{filter_name}");
                        match typed::unwrap(typed_config) {
                            Ok((t, fields, inner)) if t == HTTP_LOCAL_RATELIMIT_TYPE => {
                                let path = format!("{base}{inner}");
                                if let Some(c) = self.decode::<HttpLocalRateLimit>(fields, &path) {
                                    self.push_http_local(c, &path, true);
                                }
                            }
                            // Interpreted by the proxy's Lua filter.
                            Ok((t, _, _)) if t == LUA_PER_ROUTE_TYPE => {}
                            Ok((t, _, _)) => {
                                self.unsupported(&base, format!("per-filter config {t}"))
                            }
                            Err(e) => self.error(&base, e),
                        }
                    }
                }
                other => self.unsupported(
                    &format!(".patch.value.{other}"),
                    format!("{} field {other}", apply_to.to_ascii_lowercase()),
                ),
            }
        }
    }

    /// A `rate_limits` list at `path`, checked entry by entry.
    fn rate_limits(&mut self, path: &str, v: &Value, include_vh_rate_limits: bool) {
        let Some(entries) = self.decode::<Vec<RateLimitEntry>>(v.clone(), path) else {
            return;
        };
        let start = self.errors.len();
        for (i, e) in entries.iter().enumerate() {
            if let Err((f, m)) = super::actions::CompiledEntry::compile(e) {
                self.error(&format!("{path}[{i}].{f}"), m);
            }
        }
        if self.errors.len() != start {
            return;
        }
        let origin = self.origin_at(path);
        self.out.route_rate_limits.push(Patched {
            origin,
            config: RouteRateLimits {
                entries,
                include_vh_rate_limits,
            },
        });
    }

    /// Decode protobuf JSON into `T`; errors carry the field path, ignored fields warn.
    fn decode<T: DeserializeOwned>(&mut self, value: Value, path: &str) -> Option<T> {
        let mut ignored = Vec::new();
        let result: Result<T, _> = {
            let mut record = |p: serde_ignored::Path<'_>| ignored.push(p.to_string());
            let de = serde_ignored::Deserializer::new(value, &mut record);
            serde_path_to_error::deserialize(de)
        };
        for p in ignored {
            let field = self.field(&format!("{path}.{p}"));
            self.out.warnings.push(
                self.site
                    .problem(field, "field not supported by warden; ignored"),
            );
        }
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                let p = e.path().to_string();
                let rest = if p == "." {
                    path.to_string()
                } else {
                    format!("{path}.{p}")
                };
                self.error(&rest, e.into_inner().to_string());
                None
            }
        }
    }
}

/// Envoy's bucket validation: non-zero tokens, fill interval of at least 50 ms.
pub(crate) fn check_bucket(
    tb: &super::local_config::TokenBucket,
) -> Result<(), (&'static str, String)> {
    if tb.max_tokens.0 == 0 {
        return Err((".max_tokens", "max_tokens must be greater than 0".into()));
    }
    if tb.tokens_per_fill.is_some_and(|t| t.0 == 0) {
        return Err((
            ".tokens_per_fill",
            "tokens_per_fill must be greater than 0".into(),
        ));
    }
    if tb.fill_interval.0 < crate::token_bucket::MIN_FILL_INTERVAL {
        return Err((
            ".fill_interval",
            format!(
                "fill_interval {:?} is shorter than Envoy's minimum of 50ms",
                tb.fill_interval.0
            ),
        ));
    }
    Ok(())
}
