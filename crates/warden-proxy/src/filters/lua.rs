//! Envoy's Lua filter (`envoy.filters.http.lua`) as EnvoyFilters configure it: `HTTP_FILTER`
//! patches carrying a `Lua` config (`inline_code` / `inlineCode`, `default_source_code`,
//! `source_codes`), placed where the patch says, and `HTTP_ROUTE` / `VIRTUAL_HOST` patches
//! whose `typed_per_filter_config` holds a `LuaPerRoute` (`disabled`, `name`,
//! `source_code`). The scripts run on warden-lua; this file turns a request into its
//! [`Stream`] and applies what the script did (headers, a local reply, dynamic metadata).
//!
//! As Envoy does: a script error is logged (`script log: ...`) and the stream goes on as the
//! script left it; a runaway or memory-hungry script is stopped by warden-lua's limits and
//! treated the same way.

use super::chain::{
    FilterState, Flow, HttpFilter, Position, RequestEdit, Verdict, VerdictFuture, ROUTER,
};
use super::global_rate_limit::{fits_context, selects};
use super::route_sites::{RouteCatalog, SiteTable};
use crate::core::identity::ProxyIdentity;
use crate::core::local_reply::LocalReply;
use crate::core::metrics::Metrics;
use crate::core::request_attrs::RequestAttrs;
use crate::routing::Route;
use crate::upstream::body::{BoxError, ProxyBody};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use warden_config::kinds::envoy_filter::ConfigPatch;
use warden_config::{ConfigSet, Doc, EnvoyFilter, Location, Problem};
use warden_local_ratelimit::envoy::patches::PatchOrigin;
use warden_lua::{HeaderList, Limits, Phase, Program, Run, Script, Stream, StreamInfo};

/// The filter's name in Envoy (and the older one Istio's docs and the seed use).
pub const LUA: &str = "envoy.filters.http.lua";
pub const LUA_OLD_NAME: &str = "envoy.lua";
pub use warden_local_ratelimit::envoy::patches::{LUA_PER_ROUTE_TYPE, LUA_TYPE};

/// What a route runs: a script, the `filter_context` its `LuaPerRoute` gives it, and the
/// route's metadata for the filter (`metadata()`).
#[derive(Debug, PartialEq)]
struct Choice {
    /// The script's index in the program.
    script: usize,
    context: serde_json::Map<String, Value>,
    metadata: serde_json::Map<String, Value>,
}

/// A request phase a Lua filter ran in `on_request` that goes on in its waiting phase.
#[derive(Debug)]
pub struct LuaRequest {
    /// The filter's key ([`LuaFilter::key`]).
    filter: usize,
    /// Where it stopped (a call to make, a local reply); None: it ended, and the waiting
    /// phase only lets the request go on (the response phase may wait).
    run: Option<Box<Run>>,
}

/// One Lua filter of a chain.
#[derive(Debug)]
pub struct LuaFilter {
    /// The name the patch gave it (positions of later patches refer to it).
    name: String,
    program: Program,
    /// What routes run (`per_route` indexes it).
    choices: Vec<Choice>,
    /// Each route's choice; None: the filter does nothing there (no default script, or
    /// `LuaPerRoute.disabled`).
    per_route: SiteTable<Option<usize>>,
    /// Where `httpCall` reaches the clusters its scripts name.
    calls: Arc<Calls>,
    /// Some script reads the request body (`body()`, `bodyChunks()`): it is buffered first.
    reads_body: bool,
    /// Some script's response phase may wait (it mentions `body` or `httpCall`): responses
    /// of routes that run one take the pipeline's waiting path; otherwise the response phase
    /// runs where the response is made.
    response_may_wait: bool,
    /// `EnvoyFilter/name spec.configPatches[i]: name (N scripts)`, for `warden check`.
    described: String,
}

/// The most of a request body a script's `body()` buffers (Envoy's default connection buffer
/// limit); a longer body is answered 413, as Envoy's buffering filters answer it.
const MAX_BODY: usize = 1 << 20;

/// The clusters scripts call (`httpCall(cluster, ...)`) and a client for them.
#[derive(Debug)]
struct Calls {
    /// Cluster name -> `host:port`, resolved when the config loads.
    addresses: BTreeMap<String, String>,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

/// An answer body a script gets is cut off here (Envoy buffers it whole).
const MAX_CALL_BODY: usize = 1 << 20;

impl Calls {
    /// The cluster names `scripts` mention in string literals, resolved the way the rate
    /// limit service's is (Istio `outbound|PORT||HOST`, a CLUSTER patch's cluster,
    /// `HOST:PORT`), when some script calls out at all.
    fn resolve(set: &ConfigSet, identity: &ProxyIdentity, scripts: &[Script]) -> Calls {
        let mut addresses = BTreeMap::new();
        if scripts.iter().any(|s| s.source.contains("httpCall")) {
            let patches =
                warden_local_ratelimit::envoy::interpret(&set.envoy_filters).unwrap_or_default();
            let clusters: Vec<_> = patches
                .clusters
                .iter()
                .filter(|c| {
                    selects(c.origin.workload_labels.as_ref(), identity)
                        && fits_context(c.origin.context.as_deref(), identity)
                })
                .collect();
            for s in scripts {
                for name in string_literals(&s.source) {
                    let known = clusters.iter().any(|c| c.config.name == name);
                    let shaped = name.contains('|') || name.contains(':');
                    if !(known || shaped) || addresses.contains_key(name) {
                        continue;
                    }
                    let grpc = warden_local_ratelimit::envoy::global_config::EnvoyGrpc {
                        cluster_name: name.to_string(),
                        authority: None,
                    };
                    if let Ok(t) =
                        super::global_rate_limit::rls_address::resolve(set, &grpc, &clusters)
                    {
                        addresses.insert(name.to_string(), t.address);
                    }
                }
            }
        }
        Calls {
            addresses,
            client: hyper_util::client::legacy::Client::builder(
                hyper_util::rt::TokioExecutor::new(),
            )
            .build_http(),
        }
    }

    /// Make `call`; a failure is Envoy's failed-call answer (`:status` 503, no body).
    async fn make(&self, call: &warden_lua::HttpCall) -> warden_lua::HttpReply {
        let Some(address) = self.addresses.get(&call.cluster) else {
            tracing::error!(
                cluster = %call.cluster,
                "script log: http call cluster invalid. Must be configured"
            );
            return warden_lua::HttpReply::failed();
        };
        let header = |n: &str| {
            call.headers
                .first(n)
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        let uri = format!("http://{address}{}", header(":path").unwrap_or("/"));
        let mut request = http::Request::builder()
            .method(header(":method").unwrap_or("GET"))
            .uri(uri);
        for (n, v) in call.headers.iter() {
            let n = if n == ":authority" { "host" } else { n };
            if !n.starts_with(':') {
                request = request.header(n, v);
            }
        }
        let Ok(request) = request.body(http_body_util::Full::new(bytes::Bytes::from(
            call.body.clone(),
        ))) else {
            return warden_lua::HttpReply::failed();
        };
        let exchange = async {
            let response = self.client.request(request).await.ok()?;
            let (parts, body) = response.into_parts();
            let body =
                http_body_util::BodyExt::collect(http_body_util::Limited::new(body, MAX_CALL_BODY))
                    .await
                    .ok()?
                    .to_bytes();
            let mut headers = HeaderList::with_capacity(parts.headers.len() + 1);
            headers.add_bytes(":status", parts.status.as_str().as_bytes());
            for (n, v) in &parts.headers {
                headers.add_bytes(n.as_str(), v.as_bytes());
            }
            Some(warden_lua::HttpReply {
                headers,
                body: (!body.is_empty()).then(|| body.to_vec()),
            })
        };
        let answer = if call.timeout_ms > 0 {
            tokio::time::timeout(std::time::Duration::from_millis(call.timeout_ms), exchange)
                .await
                .ok()
                .flatten()
        } else {
            exchange.await
        };
        answer.unwrap_or_else(warden_lua::HttpReply::failed)
    }
}

/// The string literals of a script (`"..."` and `'...'`, no escapes): the cluster names its
/// `httpCall`s may use.
fn string_literals(source: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(start) = rest.find(['"', '\'']) {
        let quote = &rest[start..start + 1];
        let after = &rest[start + 1..];
        match after.find(quote) {
            Some(end) => {
                out.push(&after[..end]);
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// A Lua filter and where its patch puts it.
#[derive(Debug)]
pub struct PlacedLua {
    pub position: Position,
    pub filter: Arc<LuaFilter>,
    /// `EnvoyFilter/name spec.configPatches[i]` and the scripts' names, for `warden check`.
    pub described: String,
}

/// One `HTTP_FILTER` patch, in the order Istio applies them.
struct FilterPatch<'a> {
    doc: &'a Doc<EnvoyFilter>,
    index: usize,
    patch: &'a ConfigPatch,
    name: String,
    typed: Option<(String, Value, &'static str)>,
}

impl FilterPatch<'_> {
    fn field(&self) -> String {
        format!("spec.configPatches[{}]", self.index)
    }

    fn is_lua(&self) -> bool {
        self.typed.as_ref().is_some_and(|(t, _, _)| t == LUA_TYPE)
    }

    /// The filter an `INSERT_BEFORE` / `INSERT_AFTER` names.
    fn sub_filter(&self) -> Option<&str> {
        self.patch
            .matches
            .as_ref()?
            .listener
            .as_ref()?
            .filter_chain
            .as_ref()?
            .filter
            .as_ref()?
            .sub_filter
            .as_ref()?
            .name
            .as_deref()
    }

    fn position(&self) -> Result<Position, String> {
        let named = || {
            self.sub_filter().map(canonical_filter_name).ok_or_else(|| {
                format!(
                    "{} needs match.listener.filterChain.filter.subFilter.name",
                    self.patch.patch.operation
                )
            })
        };
        Ok(match self.patch.patch.operation.as_str() {
            "INSERT_FIRST" => Position::First,
            "ADD" => Position::Last,
            "INSERT_BEFORE" => Position::Before(named()?),
            "INSERT_AFTER" => Position::After(named()?),
            other => {
                return Err(format!(
                    "operation {other} of a Lua filter is not supported"
                ))
            }
        })
    }
}

/// Envoy's current names for the deprecated ones patches still use.
fn canonical_filter_name(name: &str) -> String {
    match name {
        "envoy.router" => ROUTER.to_string(),
        "envoy.rate_limit" => super::chain::GLOBAL_RATE_LIMIT.to_string(),
        "envoy.lua" => LUA.to_string(),
        other => other.to_string(),
    }
}

/// `typed_config` unwrapped: type URL, fields, and the field path of the fields.
fn typed_of(value: &Value) -> Option<(String, Value, &'static str)> {
    let typed = value
        .get("typed_config")
        .or_else(|| value.get("typedConfig"))?;
    let obj = typed.as_object()?;
    let at_type = obj.get("@type")?.as_str()?;
    if at_type.ends_with("udpa.type.v1.TypedStruct") || at_type.ends_with("xds.type.v3.TypedStruct")
    {
        let url = obj
            .get("type_url")
            .or_else(|| obj.get("typeUrl"))?
            .as_str()?;
        let fields = obj.get("value").cloned().unwrap_or(Value::Null);
        return Some((url.to_string(), fields, ".value"));
    }
    let mut fields = obj.clone();
    fields.remove("@type");
    Some((at_type.to_string(), Value::Object(fields), ""))
}

/// The `HTTP_FILTER` patches that apply to this proxy, in Istio's order (priority, then as
/// loaded).
fn filter_patches<'a>(set: &'a ConfigSet, identity: &ProxyIdentity) -> Vec<FilterPatch<'a>> {
    let mut docs: Vec<&Doc<EnvoyFilter>> = set
        .envoy_filters
        .iter()
        .filter(|d| {
            selects(
                d.spec.workload_selector.as_ref().map(|w| &w.labels),
                identity,
            )
        })
        .collect();
    docs.sort_by_key(|d| d.spec.priority);
    let mut out = Vec::new();
    for doc in docs {
        for (index, patch) in doc.spec.config_patches.iter().enumerate() {
            let context = patch.matches.as_ref().and_then(|m| m.context.as_deref());
            if patch.apply_to != "HTTP_FILTER" || !fits_context(context, identity) {
                continue;
            }
            let Some(value) = patch.patch.value.as_ref() else {
                continue;
            };
            out.push(FilterPatch {
                doc,
                index,
                patch,
                name: value
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                typed: typed_of(value),
            });
        }
    }
    out
}

/// Where a Lua filter patched in at `own` goes, given the filters patched in after it
/// (`later`, in order): applying the patches one by one, a filter inserted before the router
/// (or ADDed) ends up ahead of every later one inserted there too, so it goes before the first
/// of those the chain has (the article's Lua before its ratelimit filter).
fn placed(
    own: Position,
    later: impl Iterator<Item = (String, Position)>,
    chain: &[&str],
) -> Position {
    let at_end =
        |p: &Position| matches!(p, Position::Before(n) if n == ROUTER) || *p == Position::Last;
    if !at_end(&own) {
        return own;
    }
    later
        .filter(|(name, p)| at_end(p) && chain.contains(&name.as_str()))
        .map(|(name, _)| Position::Before(name))
        .next()
        .unwrap_or(own)
}

/// A script from a `DataSource` (`inline_string`; files and environment variables are not
/// read here, as Istio ships only inline code to its proxies).
fn data_source(v: &Value) -> Result<&str, String> {
    for key in ["inline_string", "inlineString"] {
        if let Some(s) = v.get(key).and_then(Value::as_str) {
            return Ok(s);
        }
    }
    if v.get("inline_bytes")
        .or_else(|| v.get("inlineBytes"))
        .is_some()
    {
        return Err("inline_bytes is not supported; use inline_string".into());
    }
    Err("only inline_string sources are supported".into())
}

/// What compiling the scripts of the config found.
struct Compiler<'a> {
    set: &'a ConfigSet,
    scripts: Vec<Script>,
    problems: &'a mut Vec<Problem>,
}

impl Compiler<'_> {
    /// Check one script and add it; a syntax error becomes a problem at `field` (the YAML
    /// line of the code) naming the script's line.
    fn add(
        &mut self,
        doc: &Doc<EnvoyFilter>,
        field: &str,
        name: String,
        code: &str,
    ) -> Option<usize> {
        match Script::compile(&name, code) {
            Ok(s) => {
                self.scripts.push(s);
                Some(self.scripts.len() - 1)
            }
            Err(e) => {
                let location = self.set.locate(doc, field);
                // The field's line is the code's first line (a `|` block's content starts on
                // the line after its key, a one-line string on the key's).
                let message = match (e.line, location.line) {
                    (Some(script), Some(first)) => {
                        format!("{e} (file line {})", first + script as usize - 1)
                    }
                    _ => e.to_string(),
                };
                self.problems.push(Problem {
                    code: None,
                    location,
                    message,
                });
                None
            }
        }
    }
}

fn problem(location: Location, message: String) -> Problem {
    Problem {
        code: None,
        location,
        message,
    }
}

/// Compile every Lua filter patch that applies to this proxy. `chain` names the filters the
/// chain has without them: a Lua filter that goes before the router ahead of a rate limit
/// filter patched in after it is placed before that filter, as applying the patches in
/// order would put it.
pub fn build(
    set: &ConfigSet,
    identity: &ProxyIdentity,
    routes: &RouteCatalog,
    chain: &[&str],
    problems: &mut Vec<Problem>,
) -> Vec<PlacedLua> {
    let patches = filter_patches(set, identity);
    let per_route = route_patches(set, identity, problems);
    let route_metadata = route_metadata_patches(set, identity);
    let mut out = Vec::new();
    for (i, p) in patches.iter().enumerate() {
        if !p.is_lua() {
            continue;
        }
        let Some((_, fields, inner)) = &p.typed else {
            continue;
        };
        let base = format!("{}.patch.value.typed_config{inner}", p.field());
        let position = match p.position() {
            Ok(pos) => pos,
            Err(message) => {
                problems.push(problem(
                    set.locate(p.doc, &format!("{}.patch.operation", p.field())),
                    message,
                ));
                continue;
            }
        };
        let position = placed(
            position,
            patches[i + 1..]
                .iter()
                .filter_map(|q| Some((canonical_filter_name(&q.name), q.position().ok()?))),
            chain,
        );
        let mut compiler = Compiler {
            set,
            scripts: Vec::new(),
            problems,
        };
        let name = if p.name.is_empty() {
            LUA.to_string()
        } else {
            p.name.clone()
        };
        let script_name = format!("{}/{}", p.doc.id(), name);
        // `inline_code` (deprecated, still what Istio's docs use) or `default_source_code`.
        let inline = ["inline_code", "inlineCode"]
            .iter()
            .find_map(|k| fields.get(*k).and_then(Value::as_str).map(|c| (*k, c)));
        let default_source = ["default_source_code", "defaultSourceCode"]
            .iter()
            .find_map(|k| fields.get(*k).map(|v| (*k, v)));
        let default = match (inline, default_source) {
            (Some((k, code)), _) => {
                compiler.add(p.doc, &format!("{base}.{k}"), script_name.clone(), code)
            }
            (None, Some((k, v))) => match data_source(v) {
                Ok(code) => compiler.add(
                    p.doc,
                    &format!("{base}.{k}.inline_string"),
                    script_name.clone(),
                    code,
                ),
                Err(m) => {
                    compiler
                        .problems
                        .push(problem(set.locate(p.doc, &format!("{base}.{k}")), m));
                    None
                }
            },
            (None, None) => None,
        };
        let mut named = BTreeMap::new();
        for key in ["source_codes", "sourceCodes"] {
            let Some(map) = fields.get(key).and_then(Value::as_object) else {
                continue;
            };
            for (code_name, v) in map {
                match data_source(v) {
                    Ok(code) => {
                        if let Some(idx) = compiler.add(
                            p.doc,
                            &format!("{base}.{key}.{code_name}.inline_string"),
                            format!("{script_name}/{code_name}"),
                            code,
                        ) {
                            named.insert(code_name.clone(), idx);
                        }
                    }
                    Err(m) => compiler.problems.push(problem(
                        set.locate(p.doc, &format!("{base}.{key}.{code_name}")),
                        m,
                    )),
                }
            }
        }
        // Route overrides: each per-route patch naming this filter's name lands on routes.
        // (where, the script and context; None: disabled)
        type Landed = (
            super::route_sites::Landing,
            Option<(usize, serde_json::Map<String, Value>)>,
        );
        let mut landed: Vec<Landed> = Vec::new();
        for r in per_route.iter().filter(|r| {
            r.filter_name == name || (is_lua_name(&r.filter_name) && is_lua_name(&name))
        }) {
            let script = match &r.config {
                PerRoute::Disabled => None,
                PerRoute::Named(n) => match named.get(n) {
                    Some(&idx) => Some(idx),
                    None => {
                        compiler.problems.push(problem(
                            Location {
                                field: format!("{}.name", r.config_field),
                                ..r.origin.document.clone()
                            },
                            format!(
                                "LuaPerRoute names {n:?}, which no source_codes of {} defines",
                                p.doc.id()
                            ),
                        ));
                        continue;
                    }
                },
                PerRoute::Source(code) => {
                    match compiler.add(
                        r.doc,
                        &format!("{}.source_code.inline_string", r.config_field),
                        format!("{}/{}", r.origin.filter, r.origin.field),
                        code,
                    ) {
                        Some(idx) => Some(idx),
                        None => continue,
                    }
                }
            };
            let choice = script.map(|script| (script, r.context.clone()));
            let mut landings = Vec::new();
            if let Some(landing) =
                routes.land(&r.origin, "LuaPerRoute", &mut landings, compiler.problems)
            {
                landed.push((landing, choice));
            }
        }
        let scripts = std::mem::take(&mut compiler.scripts);
        let described = format!(
            "{} {}: {} ({} script{})",
            p.doc.id(),
            p.field(),
            name,
            scripts.len(),
            if scripts.len() == 1 { "" } else { "s" }
        );
        // Route metadata under the filter's name, else under its canonical name (Envoy's
        // fallback).
        let mut metadata_landed = Vec::new();
        for m in route_metadata
            .iter()
            .filter(|m| m.key == name || m.key == LUA)
        {
            let mut landings = Vec::new();
            if let Some(landing) = routes.land(&m.origin, "metadata", &mut landings, problems) {
                metadata_landed.push((landing, m));
            }
        }
        let metadata_at = |site, key: &str| {
            let mut merged: Option<serde_json::Map<String, Value>> = None;
            for (l, m) in &metadata_landed {
                if m.key == key && l.covers(site) {
                    // Later merges override earlier fields, as proto merges do.
                    merged
                        .get_or_insert_with(Default::default)
                        .extend(m.fields.clone());
                }
            }
            merged
        };
        let mut choices: Vec<Choice> = Vec::new();
        let per_route = SiteTable::build(&routes.keys(), |site| {
            // The last patch that lands on a route decides, as later merges override.
            let (script, context) = match landed.iter().rev().find(|(l, _)| l.covers(site)) {
                Some((_, choice)) => choice.clone()?,
                None => (default?, serde_json::Map::new()),
            };
            let metadata = metadata_at(site, &name)
                .or_else(|| metadata_at(site, LUA))
                .unwrap_or_default();
            let choice = Choice {
                script,
                context,
                metadata,
            };
            Some(match choices.iter().position(|c| *c == choice) {
                Some(i) => i,
                None => {
                    choices.push(choice);
                    choices.len() - 1
                }
            })
        });
        let calls = Arc::new(Calls::resolve(set, identity, &scripts));
        let reads_body = scripts
            .iter()
            .any(|s| s.source.contains(":body(") || s.source.contains("bodyChunks"));
        let response_may_wait = scripts
            .iter()
            .any(|s| s.source.contains("body") || s.source.contains("httpCall"));
        out.push(PlacedLua {
            position,
            filter: Arc::new(LuaFilter {
                name: canonical_filter_name(&name),
                program: Program::new(scripts, Limits::default()),
                choices,
                per_route,
                calls,
                reads_body,
                response_may_wait,
                described: described.clone(),
            }),
            described,
        });
    }
    out
}

fn is_lua_name(n: &str) -> bool {
    n == LUA || n == LUA_OLD_NAME
}

/// A `LuaPerRoute` config.
#[derive(Debug, Clone)]
enum PerRoute {
    Disabled,
    Named(String),
    Source(String),
}

/// One `typed_per_filter_config` entry holding a `LuaPerRoute`.
struct RoutePatch<'a> {
    doc: &'a Doc<EnvoyFilter>,
    origin: PatchOrigin,
    /// The key under `typed_per_filter_config` (the filter's name).
    filter_name: String,
    config: PerRoute,
    /// `LuaPerRoute.filter_context` (`filterContext()`).
    context: serde_json::Map<String, Value>,
    /// Field path of the LuaPerRoute's fields.
    config_field: String,
}

/// Every `LuaPerRoute` of `VIRTUAL_HOST` / `HTTP_ROUTE` MERGE patches that select this proxy.
fn route_patches<'a>(
    set: &'a ConfigSet,
    identity: &ProxyIdentity,
    problems: &mut Vec<Problem>,
) -> Vec<RoutePatch<'a>> {
    let mut out = Vec::new();
    for doc in &set.envoy_filters {
        let labels = doc
            .spec
            .workload_selector
            .as_ref()
            .map(|w| w.labels.clone());
        if !selects(labels.as_ref(), identity) {
            continue;
        }
        for (i, patch) in doc.spec.config_patches.iter().enumerate() {
            if !matches!(patch.apply_to.as_str(), "VIRTUAL_HOST" | "HTTP_ROUTE") {
                continue;
            }
            let Some(per_filter) = patch.patch.value.as_ref().and_then(|v| {
                v.get("typed_per_filter_config")
                    .map(|t| ("typed_per_filter_config", t))
                    .or_else(|| {
                        v.get("typedPerFilterConfig")
                            .map(|t| ("typedPerFilterConfig", t))
                    })
            }) else {
                continue;
            };
            let (key, per_filter) = per_filter;
            let Some(per_filter) = per_filter.as_object() else {
                continue;
            };
            for (filter_name, typed) in per_filter {
                let Some((url, fields, inner)) =
                    typed_of(&serde_json::json!({ "typed_config": typed }))
                else {
                    continue;
                };
                if url != LUA_PER_ROUTE_TYPE {
                    continue;
                }
                let field = format!("spec.configPatches[{i}]");
                let config_field = format!("{field}.patch.value.{key}.{filter_name}{inner}");
                let config = if fields.get("disabled").and_then(Value::as_bool) == Some(true) {
                    PerRoute::Disabled
                } else if let Some(n) = fields.get("name").and_then(Value::as_str) {
                    PerRoute::Named(n.to_string())
                } else if let Some(src) = fields
                    .get("source_code")
                    .or_else(|| fields.get("sourceCode"))
                {
                    match data_source(src) {
                        Ok(code) => PerRoute::Source(code.to_string()),
                        Err(m) => {
                            problems.push(problem(
                                set.locate(doc, &format!("{config_field}.source_code")),
                                m,
                            ));
                            continue;
                        }
                    }
                } else {
                    problems.push(problem(
                        set.locate(doc, &config_field),
                        "LuaPerRoute needs one of disabled: true, name or source_code".into(),
                    ));
                    continue;
                };
                out.push(RoutePatch {
                    doc,
                    origin: PatchOrigin {
                        config_field: config_field.clone(),
                        ..PatchOrigin::of(doc, i, patch, set.locate(doc, ""))
                    },
                    filter_name: filter_name.clone(),
                    config,
                    context: fields
                        .get("filter_context")
                        .or_else(|| fields.get("filterContext"))
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                    config_field,
                });
            }
        }
    }
    out
}

/// `metadata.filter_metadata.KEY` of an `HTTP_ROUTE` MERGE patch: what `metadata()` answers a
/// Lua filter named KEY on the routes it lands on (Envoy reads the route entry's metadata, not
/// the virtual host's).
struct RouteMetadataPatch {
    origin: PatchOrigin,
    key: String,
    fields: serde_json::Map<String, Value>,
}

fn route_metadata_patches(set: &ConfigSet, identity: &ProxyIdentity) -> Vec<RouteMetadataPatch> {
    let mut out = Vec::new();
    for doc in &set.envoy_filters {
        let labels = doc
            .spec
            .workload_selector
            .as_ref()
            .map(|w| w.labels.clone());
        if !selects(labels.as_ref(), identity) {
            continue;
        }
        for (i, patch) in doc.spec.config_patches.iter().enumerate() {
            if patch.apply_to != "HTTP_ROUTE" {
                continue;
            }
            let Some(value) = patch.patch.value.as_ref() else {
                continue;
            };
            let Some((key, filter_metadata)) = value.get("metadata").and_then(|m| {
                m.get("filter_metadata")
                    .map(|f| ("filter_metadata", f))
                    .or_else(|| m.get("filterMetadata").map(|f| ("filterMetadata", f)))
            }) else {
                continue;
            };
            let Some(filter_metadata) = filter_metadata.as_object() else {
                continue;
            };
            let field = format!("spec.configPatches[{i}]");
            for (name, fields) in filter_metadata {
                let Some(fields) = fields.as_object() else {
                    continue;
                };
                out.push(RouteMetadataPatch {
                    origin: PatchOrigin {
                        config_field: format!("{field}.patch.value.metadata.{key}.{name}"),
                        ..PatchOrigin::of(doc, i, patch, set.locate(doc, ""))
                    },
                    key: name.clone(),
                    fields: fields.clone(),
                });
            }
        }
    }
    out
}

impl LuaFilter {
    /// The [`Choice`] `route` runs, if any, and its index.
    fn script_for(&self, req: &RequestAttrs<'_>, route: &Route) -> Option<(usize, &Choice)> {
        let i = (*self.per_route.get(req, route))?;
        Some((i, self.choices.get(i)?))
    }

    /// This filter's key in [`FilterState::response_choices`].
    fn key(&self) -> usize {
        self as *const LuaFilter as usize
    }

    /// Where the filter came from and how many scripts it has.
    pub fn described(&self) -> &str {
        &self.described
    }

    /// Script errors so far.
    pub fn errors(&self) -> u64 {
        self.program.errors()
    }

    /// Run the request phase of `choice` over the request (`body_pending`: the body is
    /// there to read when the script asks).
    fn request_run(
        &self,
        choice: &Choice,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        body_pending: bool,
    ) -> Run {
        state.settle_metadata();
        let mut stream = request_stream(req, route, state);
        // Into the new stream's empty maps; an empty one is left alone (clearing costs).
        if !choice.context.is_empty() {
            stream.filter_context.clone_from(&choice.context);
        }
        if !choice.metadata.is_empty() {
            stream.route_metadata.clone_from(&choice.metadata);
        }
        stream.body_pending = body_pending;
        self.program.run(choice.script, Phase::Request, stream)
    }

    /// The request phase run where the chain decides (no body to read): None when it ended,
    /// its edit left in `state`; else how it stopped (a call to wait for, a local reply),
    /// for [`LuaFilter::request_phase_from`].
    fn request_now(
        &self,
        choice: &Choice,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
    ) -> Option<Run> {
        match self.request_run(choice, req, route, state, false) {
            Run::Continue(s) | Run::Failed(s, _) => {
                self.send_async(&s);
                apply_request(s, req, state);
                None
            }
            other => Some(other),
        }
    }

    async fn request_phase(
        &self,
        choice: &Choice,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
    ) -> Verdict {
        // The body is read only if the script asks for it (`body()`, `bodyChunks()`), as
        // Envoy suspends the script for it: the request otherwise streams on untouched.
        let body_pending = state
            .request_body
            .as_deref()
            .is_some_and(|b| !matches!(b, ProxyBody::Empty));
        let run = self.request_run(choice, req, route, state, body_pending);
        self.request_phase_from(run, req, state).await
    }

    /// The request phase from `run` on: its waits, then what it left.
    async fn request_phase_from(
        &self,
        mut run: Run,
        req: &RequestAttrs<'_>,
        state: &mut FilterState,
    ) -> Verdict {
        let mut read = false;
        loop {
            match run {
                Run::Continue(mut s) | Run::Failed(mut s, _) => {
                    self.send_async(&s);
                    if read {
                        let body = bytes::Bytes::from(s.body.take().unwrap_or_default());
                        if s.body_changed {
                            // The upstream gets the new body with its length.
                            s.headers.replace("content-length", body.len().to_string());
                            s.headers.remove("transfer-encoding");
                            s.headers_changed = true;
                        }
                        state.request_body = Some(Box::new(match s.trailers.take() {
                            Some(t) if !t.is_empty() => body_with_trailers(body, header_map(&t)),
                            _ => ProxyBody::full(body),
                        }));
                    }
                    apply_request(s, req, state);
                    return Verdict::Continue;
                }
                Run::Respond(s, r) => {
                    self.send_async(&s);
                    keep_metadata(&s, state);
                    return reply(r);
                }
                // The script waits for its call; other requests run on this worker meanwhile.
                Run::Call(pending) => {
                    let answer = self.calls.make(&pending.call).await;
                    run = pending.resume(answer);
                }
                Run::Chunk(wait) => {
                    if let Some(mut s) = wait.stream() {
                        self.send_async(&s);
                        s.async_calls.clear();
                        // Chunks the script changes may change the body's length.
                        s.headers.remove("content-length");
                        s.headers_changed = true;
                        apply_request(s, req, state);
                    }
                    let body = state.request_body.take().map_or(ProxyBody::Empty, |b| *b);
                    state.request_body =
                        Some(Box::new(chunk_stream(body, wait, self.calls.clone())));
                    return Verdict::Continue;
                }
                Run::Body(wait) => {
                    let Some(body) = state.request_body.take() else {
                        run = wait.resume(None, None);
                        continue;
                    };
                    match buffer_body(*body).await {
                        // No body: `body()` is nil, as Envoy has it; no trailers: nil too.
                        Ok((bytes, trailers)) => {
                            read = true;
                            let body = (!bytes.is_empty()).then(|| bytes.to_vec());
                            run = wait.resume(body, trailers.map(|t| header_list(&t)));
                        }
                        // Envoy's answer to a request body over the buffer limit.
                        Err(BodyTrouble::TooLarge) => {
                            return Verdict::Reply(LocalReply::new(
                                StatusCode::PAYLOAD_TOO_LARGE,
                                "Payload Too Large",
                                None,
                            ))
                        }
                        // The client's body broke off.
                        Err(BodyTrouble::Broken(_)) => {
                            return Verdict::Reply(LocalReply::bad_request())
                        }
                    }
                }
            }
        }
    }

    /// The [`Choice`] this filter's request phase made for the response phase, if any.
    fn response_script(&self, state: &FilterState) -> Option<&Choice> {
        let key = self.key();
        state
            .response_choices
            .as_ref()
            .and_then(|c| c.iter().find(|(k, _)| *k == key))
            .and_then(|(_, i)| self.choices.get(*i))
    }

    /// `envoy_on_response`: the body is read only when the script asks (`body()`,
    /// `bodyChunks()`), bounded as Envoy bounds it; `httpCall()` waits here as in the request
    /// phase.
    async fn response_phase(
        &self,
        choice: &Choice,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) {
        let mut read = false;
        let mut run = self.response_run(choice, state, response);
        loop {
            match run {
                Run::Continue(s) | Run::Failed(s, _) => {
                    self.send_async(&s);
                    apply_response(s, read, state, response);
                    return;
                }
                Run::Respond(s, _) => {
                    tracing::error!("script log: respond() is not allowed in the response flow");
                    self.send_async(&s);
                    apply_response(s, read, state, response);
                    return;
                }
                Run::Call(pending) => {
                    let answer = self.calls.make(&pending.call).await;
                    run = pending.resume(answer);
                }
                Run::Chunk(wait) => {
                    if let Some(mut s) = wait.stream() {
                        self.send_async(&s);
                        s.async_calls.clear();
                        // Chunks the script changes may change the body's length.
                        s.headers.remove("content-length");
                        s.headers_changed = true;
                        apply_response(s, false, state, response);
                    }
                    let body = std::mem::replace(response.body_mut(), ProxyBody::Empty);
                    *response.body_mut() = chunk_stream(body, wait, self.calls.clone());
                    return;
                }
                Run::Body(wait) => {
                    let body = std::mem::replace(response.body_mut(), ProxyBody::Empty);
                    match buffer_body(body).await {
                        Ok((bytes, trailers)) => {
                            read = true;
                            let body = (!bytes.is_empty()).then(|| bytes.to_vec());
                            run = wait.resume(body, trailers.map(|t| header_list(&t)));
                        }
                        Err(BodyTrouble::TooLarge) => {
                            // Envoy: a response over the buffer limit whose headers were not
                            // sent yet is answered 500 (`response_payload_too_large`).
                            drop(wait);
                            state.notes.replied(None);
                            state.notes.details = Some("response_payload_too_large");
                            *response = LocalReply::new(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "Internal Server Error",
                                None,
                            )
                            .into_response();
                            return;
                        }
                        Err(BodyTrouble::Broken(e)) => {
                            // The upstream broke off mid-body: the client's stream is reset,
                            // as Envoy resets it once the response has begun.
                            drop(wait);
                            *response.body_mut() = failing_body(e);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Run the response phase of `choice` over `response`.
    fn response_run(
        &self,
        choice: &Choice,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) -> Run {
        state.settle_metadata();
        // The upstream's header lines kept as read go into the map: the script sees (and
        // edits) every header.
        crate::upstream::h1_exchange::response_headers_mut(response);
        let mut stream = response_stream(response, state);
        // Into the new stream's empty maps; an empty one is left alone (clearing costs).
        if !choice.context.is_empty() {
            stream.filter_context.clone_from(&choice.context);
        }
        if !choice.metadata.is_empty() {
            stream.route_metadata.clone_from(&choice.metadata);
        }
        stream.body_pending = !matches!(response.body(), ProxyBody::Empty);
        self.program.run(choice.script, Phase::Response, stream)
    }

    /// The response phase of scripts that never mention `body` or `httpCall`, where the
    /// response is made: it cannot wait, and one that tries to (through a method name it
    /// made) is stopped and logged, the response left as it was.
    fn response_now(
        &self,
        choice: &Choice,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) {
        match self.response_run(choice, state, response) {
            Run::Continue(s) | Run::Failed(s, _) => {
                self.send_async(&s);
                apply_response(s, false, state, response);
            }
            Run::Respond(s, _) => {
                tracing::error!("script log: respond() is not allowed in the response flow");
                self.send_async(&s);
                apply_response(s, false, state, response);
            }
            Run::Call(_) | Run::Body(_) | Run::Chunk(_) => tracing::error!(
                "script log: a response script that names neither body nor httpCall tried \
                 to wait; stopped"
            ),
        }
    }

    /// `httpCall(..., asynchronous = true)`: sent, answers dropped.
    fn send_async(&self, s: &Stream) {
        send_async(&self.calls, s);
    }
}

/// `httpCall(..., asynchronous = true)` of `s`: sent, answers dropped.
fn send_async(calls: &Arc<Calls>, s: &Stream) {
    for call in &s.async_calls {
        let calls = calls.clone();
        let call = call.clone();
        tokio::spawn(async move {
            calls.make(&call).await;
        });
    }
}

/// A body streamed through a script's `bodyChunks()` loop: each chunk the body brings is
/// handed to the script, and what the script left of it goes on once the next one comes (the
/// last is held until the body ends, for the script to change after its loop, as Envoy holds
/// the frame that ends the stream). Once the script is done the rest passes through.
struct ChunkFeed {
    inner: ProxyBody,
    /// The script waiting for the next chunk; None once it is done.
    wait: Option<warden_lua::ChunkWait>,
    calls: Arc<Calls>,
    out: std::collections::VecDeque<Result<http_body::Frame<bytes::Bytes>, BoxError>>,
    /// The body ended (nothing comes after `out`).
    ended: bool,
}

fn chunk_stream(inner: ProxyBody, wait: warden_lua::ChunkWait, calls: Arc<Calls>) -> ProxyBody {
    let feed = ChunkFeed {
        inner,
        wait: Some(wait),
        calls,
        out: std::collections::VecDeque::new(),
        ended: false,
    };
    let frames = futures_util::stream::unfold(feed, ChunkFeed::step);
    ProxyBody::Boxed(Box::pin(http_body_util::StreamBody::new(frames)))
}

impl ChunkFeed {
    async fn step(
        mut self,
    ) -> Option<(Result<http_body::Frame<bytes::Bytes>, BoxError>, ChunkFeed)> {
        loop {
            if let Some(frame) = self.out.pop_front() {
                return Some((frame, self));
            }
            if self.ended {
                return None;
            }
            let next = http_body_util::BodyExt::frame(&mut self.inner).await;
            let Some(wait) = self.wait.take() else {
                return next.map(|frame| (frame, self));
            };
            let run = match next {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        // The held chunk goes on as the script left it.
                        self.push(wait.take_chunk());
                        wait.resume(Some(data.to_vec()), None)
                    }
                    Err(frame) => {
                        self.ended = true;
                        let trailers = frame.into_trailers().ok().map(|t| header_list(&t));
                        wait.resume(None, trailers)
                    }
                },
                None => {
                    self.ended = true;
                    wait.resume(None, None)
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some((Err(e), self));
                }
            };
            self.drive(run).await;
        }
    }

    fn push(&mut self, chunk: Option<Vec<u8>>) {
        if let Some(c) = chunk.filter(|c| !c.is_empty()) {
            self.out
                .push_back(Ok(http_body::Frame::data(bytes::Bytes::from(c))));
        }
    }

    /// Run the script to its next wait for a chunk, or its end.
    async fn drive(&mut self, mut run: Run) {
        loop {
            match run {
                Run::Chunk(w) => {
                    self.wait = Some(w);
                    return;
                }
                Run::Call(pending) => {
                    let answer = self.calls.make(&pending.call).await;
                    run = pending.resume(answer);
                }
                // Refused by the script's `body()` once streaming began; answered nil.
                Run::Body(w) => run = w.resume(None, None),
                // Done (or failed: Envoy goes on with the stream as it is): the chunk it had
                // goes on, and at the body's end its trailers.
                Run::Continue(mut s) | Run::Failed(mut s, _) | Run::Respond(mut s, _) => {
                    send_async(&self.calls, &s);
                    self.push(s.body.take());
                    if self.ended {
                        if let Some(t) = s.trailers.take().filter(|t| !t.is_empty()) {
                            self.out
                                .push_back(Ok(http_body::Frame::trailers(header_map(&t))));
                        }
                    }
                    return;
                }
            }
        }
    }
}

/// `warden_lua_errors_total`: script errors (Envoy's `lua.errors`), runaway and
/// memory-hungry scripts stopped included.
pub fn register_metrics(
    registry: &mut prometheus_client::registry::Registry,
    filters: &[Arc<LuaFilter>],
) {
    let errors = prometheus_client::metrics::counter::Counter::<u64>::default();
    errors.inc_by(filters.iter().map(|f| f.errors()).sum());
    registry.sub_registry_with_prefix("lua").register(
        "errors",
        "Lua script errors (runtime errors, instruction and memory limits)",
        errors,
    );
}

/// Why a response body could not be buffered.
enum BodyTrouble {
    TooLarge,
    Broken(crate::upstream::body::BoxError),
}

/// A body, whole, and its trailers (HTTP/2's, or a chunked HTTP/1.1 body's that hyper read).
async fn buffer_body(body: ProxyBody) -> Result<(bytes::Bytes, Option<HeaderMap>), BodyTrouble> {
    match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, MAX_BODY)).await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            Ok((collected.to_bytes(), trailers))
        }
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyTrouble::TooLarge),
        Err(e) => Err(BodyTrouble::Broken(e)),
    }
}

/// A body that fails at once with `e` (the server resets the client's stream).
fn failing_body(e: crate::upstream::body::BoxError) -> ProxyBody {
    let frames = futures_util::stream::once(std::future::ready(Err::<
        http_body::Frame<bytes::Bytes>,
        _,
    >(e)));
    ProxyBody::Boxed(Box::pin(http_body_util::StreamBody::new(frames)))
}

/// A body of `bytes` then `trailers`.
fn body_with_trailers(bytes: bytes::Bytes, trailers: HeaderMap) -> ProxyBody {
    let mut frames = Vec::with_capacity(2);
    if !bytes.is_empty() {
        frames.push(Ok(http_body::Frame::data(bytes)));
    }
    frames.push(Ok(http_body::Frame::trailers(trailers)));
    ProxyBody::Boxed(Box::pin(http_body_util::StreamBody::new(
        futures_util::stream::iter(frames),
    )))
}

fn header_list(map: &HeaderMap) -> HeaderList {
    let mut list = HeaderList::with_capacity(map.len());
    for (n, v) in map {
        list.add_bytes(n.as_str(), v.as_bytes());
    }
    list
}

/// How many header names [`header_name`] keeps.
const KNOWN_NAMES: usize = 16;

thread_local! {
    /// Header names scripts' edits had lately, parsed.
    static KNOWN: std::cell::RefCell<Vec<HeaderName>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A header name of a script's edit: one it had lately is not parsed again (parsing a header
/// the article's script adds, with its copy, cost a request about 600 instructions, callgrind).
fn header_name(n: &str) -> Result<HeaderName, http::header::InvalidHeaderName> {
    KNOWN.with(|known| {
        let Ok(mut known) = known.try_borrow_mut() else {
            return HeaderName::from_bytes(n.as_bytes());
        };
        if let Some(h) = known.iter().find(|h| h.as_str() == n) {
            return Ok(h.clone());
        }
        let h = HeaderName::from_bytes(n.as_bytes())?;
        if known.len() == KNOWN_NAMES {
            known.remove(0);
        }
        known.push(h.clone());
        Ok(h)
    })
}

fn header_map(list: &HeaderList) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(list.len());
    for (n, v) in list.iter() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// `respond()`'s answer: its status, its headers, its body.
fn reply(r: warden_lua::LocalResponse) -> Verdict {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    let mut headers = HeaderMap::new();
    for (n, v) in r.headers.iter() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            headers.append(n, v);
        }
    }
    Verdict::ReplyWithHeaders(
        LocalReply {
            status,
            body: bytes::Bytes::from(r.body),
            flag: None,
        },
        headers,
    )
}

/// The most a header list kept for the worker's next request may hold (a request with huge
/// headers does not leave its buffers behind).
const SPARE_LIST_BYTES: usize = 16 << 10;

thread_local! {
    /// A request's header list its phase is done with, cleared for the next request: making
    /// a list's three buffers and freeing them cost a request about 300 instructions
    /// (callgrind).
    static SPARE_LIST: std::cell::Cell<Option<HeaderList>> = const { std::cell::Cell::new(None) };
}

/// An empty header list with room for `n` entries, the worker's spare one if it has it.
fn request_list(n: usize) -> HeaderList {
    match SPARE_LIST.with(std::cell::Cell::take) {
        Some(mut list) => {
            list.clear();
            list
        }
        None => HeaderList::with_capacity(n),
    }
}

/// Keep `list` (a request's, applied) for the worker's next request.
fn spare_list(list: HeaderList) {
    if list.capacity_bytes() <= SPARE_LIST_BYTES {
        SPARE_LIST.with(|s| s.set(Some(list)));
    }
}

/// Envoy's header map of a request: the pseudo-headers, then every header but `host` (its
/// value is `:authority`).
fn request_stream(req: &RequestAttrs<'_>, route: &Route, state: &FilterState) -> Stream {
    let mut headers = request_list(req.headers.len() + 4);
    headers.add_bytes(":authority", req.authority.as_bytes());
    match req.query {
        Some(q) => headers.add_parts(":path", &[req.path.as_bytes(), b"?", q.as_bytes()]),
        None => headers.add_bytes(":path", req.path.as_bytes()),
    }
    headers.add_bytes(":method", req.method.as_str().as_bytes());
    headers.add_bytes(
        ":scheme",
        if req.tls.is_some() {
            &b"https"[..]
        } else {
            &b"http"[..]
        },
    );
    for (n, v) in req.headers {
        if n != http::header::HOST {
            headers.add_bytes(n.as_str(), v.as_bytes());
        }
    }
    headers.mark_original();
    Stream {
        headers,
        info: stream_info(req, route),
        dynamic_metadata: state
            .dynamic_metadata
            .as_deref()
            .cloned()
            .unwrap_or_default(),
        ..Stream::default()
    }
}

fn stream_info(req: &RequestAttrs<'_>, route: &Route) -> StreamInfo {
    StreamInfo {
        protocol: crate::core::request_attrs::protocol_text(req.version),
        downstream_local_address: req.local_addr,
        downstream_direct_remote_address: SocketAddr::new(req.peer_ip, req.peer_port),
        // An address taken from `x-forwarded-for` has no port (Envoy's `:0`).
        downstream_remote_address: SocketAddr::new(
            req.client_ip,
            if req.client_ip == req.peer_ip {
                req.peer_port
            } else {
                0
            },
        ),
        requested_server_name: req.tls.and_then(|t| t.sni.clone()).unwrap_or_default(),
        route_name: route
            .envoy_names
            .first()
            .map_or_else(|| route.name.to_string(), |n| n.to_string()),
        ssl: req.tls.map(|t| {
            Box::new(warden_lua::SslInfo {
                peer_certificate_presented: t.peer.is_some(),
                peer_certificate_validated: t.peer.is_some(),
                uri_san_peer_certificate: t
                    .peer
                    .as_ref()
                    .map(|p| p.uri_sans.clone())
                    .unwrap_or_default(),
                dns_sans_peer_certificate: t
                    .peer
                    .as_ref()
                    .map(|p| p.dns_sans.clone())
                    .unwrap_or_default(),
                subject_peer_certificate: t
                    .peer
                    .as_ref()
                    .map(|p| p.subject.clone())
                    .unwrap_or_default(),
                tls_version: t.version.unwrap_or_default().to_string(),
            })
        }),
    }
}

fn keep_metadata(s: &Stream, state: &mut FilterState) {
    if s.dynamic_metadata_changed {
        state.dynamic_metadata = Some(Box::new(s.dynamic_metadata.clone()));
    }
}

/// What the script changed, for the pipeline to apply before the next filter.
fn apply_request(mut s: Stream, req: &RequestAttrs<'_>, state: &mut FilterState) {
    keep_metadata(&s, state);
    if s.headers_changed || s.clear_route_cache {
        request_edit(&s, req, state);
    }
    spare_list(std::mem::take(&mut s.headers));
}

/// The [`RequestEdit`] of a script's changes.
fn request_edit(s: &Stream, req: &RequestAttrs<'_>, state: &mut FilterState) {
    let mut edit = RequestEdit {
        reroute: s.clear_route_cache,
        ..RequestEdit::default()
    };
    // The common edit (the article's script) only adds headers: append those, no rewrite.
    if let Some(added) = s.headers.appended() {
        let mut append = Vec::with_capacity(1);
        let mut plain = true;
        for (n, v) in added {
            match (header_name(n), HeaderValue::from_bytes(v)) {
                (Ok(n), Ok(v)) if !n.as_str().starts_with(':') => append.push((n, v)),
                _ => plain = false,
            }
        }
        if plain {
            edit.append = append;
            state.request_edit = Some(Box::new(edit));
            return;
        }
    }
    let mut headers = HeaderMap::with_capacity(s.headers.len());
    for (n, v) in s.headers.iter() {
        match n {
            ":authority" => {
                if v != req.authority.as_bytes() {
                    edit.authority = std::str::from_utf8(v).ok().map(str::to_string);
                }
                if let Ok(v) = HeaderValue::from_bytes(v) {
                    headers.insert(http::header::HOST, v);
                }
            }
            ":path" => {
                let same = match req.query {
                    Some(q) => {
                        v.len() == req.path.len() + 1 + q.len()
                            && v.starts_with(req.path.as_bytes())
                    }
                    None => v == req.path.as_bytes(),
                };
                if !same {
                    edit.path_and_query = std::str::from_utf8(v).ok().map(str::to_string);
                }
            }
            ":method" => {
                if v != req.method.as_str().as_bytes() {
                    edit.method = http::Method::from_bytes(v).ok();
                }
            }
            n if n.starts_with(':') => {}
            n => {
                if let (Ok(n), Ok(v)) = (header_name(n), HeaderValue::from_bytes(v)) {
                    headers.append(n, v);
                }
            }
        }
    }
    if !req.headers.contains_key(http::header::HOST) && edit.authority.is_none() {
        headers.remove(http::header::HOST);
    }
    edit.headers = Some(headers);
    state.request_edit = Some(Box::new(edit));
}

/// A response's headers as Envoy's map has them (`:status` first).
fn response_stream(response: &Response<ProxyBody>, state: &FilterState) -> Stream {
    let mut headers = HeaderList::with_capacity(response.headers().len() + 1);
    headers.add_bytes(":status", response.status().as_str().as_bytes());
    for (n, v) in response.headers() {
        headers.add_bytes(n.as_str(), v.as_bytes());
    }
    Stream {
        headers,
        info: state
            .lua_stream_info
            .as_deref()
            .cloned()
            .unwrap_or_default(),
        dynamic_metadata: state
            .dynamic_metadata
            .as_deref()
            .cloned()
            .unwrap_or_default(),
        ..Stream::default()
    }
}

/// What the response script changed, applied to the response; `read`: the body was
/// buffered (it goes back, as the script left it, with its trailers).
fn apply_response(
    mut s: Stream,
    read: bool,
    state: &mut FilterState,
    response: &mut Response<ProxyBody>,
) {
    keep_metadata(&s, state);
    if let Some(reason) = s.reason_phrase.take() {
        if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes()) {
            response.extensions_mut().insert(reason);
        }
    }
    if read {
        let bytes = bytes::Bytes::from(s.body.take().unwrap_or_default());
        if s.body_changed {
            // Envoy's `setBytes` sets `content-length` to the new length.
            s.headers.replace("content-length", bytes.len().to_string());
            s.headers.remove("transfer-encoding");
            s.headers_changed = true;
        }
        *response.body_mut() = match s.trailers.take() {
            Some(t) if !t.is_empty() => body_with_trailers(bytes, header_map(&t)),
            _ => ProxyBody::full(bytes),
        };
    }
    if !s.headers_changed {
        return;
    }
    let mut headers = HeaderMap::with_capacity(s.headers.len());
    for (n, v) in s.headers.iter() {
        if n == ":status" {
            if let Some(code) = std::str::from_utf8(v)
                .ok()
                .and_then(|c| c.parse::<u16>().ok())
            {
                if let Ok(status) = StatusCode::from_u16(code) {
                    *response.status_mut() = status;
                }
            }
        } else if let (Ok(n), Ok(v)) = (header_name(n), HeaderValue::from_bytes(v)) {
            headers.append(n, v);
        }
    }
    *response.headers_mut() = headers;
}

impl HttpFilter for LuaFilter {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        route: &Route,
        state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        let Some((choice, c)) = self.script_for(req, route) else {
            return Flow::Continue;
        };
        let (requests, responds) = self.program.entry_points(c.script);
        // A response script that may read the body or make a call may wait: the request
        // takes the pipeline's waiting path (also for a direct response), whose response
        // phases can.
        let response_waits = responds && self.response_may_wait;
        if responds {
            state
                .response_choices
                .get_or_insert_with(Box::default)
                .push((self.key(), choice));
            state.response_waits |= response_waits;
            if state.lua_stream_info.is_none() {
                state.lua_stream_info = Some(Box::new(stream_info(req, route)));
            }
        }
        if !requests {
            return if response_waits {
                Flow::Wait
            } else {
                Flow::Continue
            };
        }
        // A script that may read the body runs in the waiting phase, which has it.
        if self.reads_body {
            return Flow::Wait;
        }
        // Otherwise it runs now; one that makes a call or answers goes on in the waiting
        // phase from where it stopped. Its edit is applied by the pipeline before the next
        // filter runs, either way.
        match self.request_now(c, req, route, state) {
            Some(run) => {
                state.lua_request = Some(LuaRequest {
                    filter: self.key(),
                    run: Some(Box::new(run)),
                });
                Flow::Wait
            }
            None if response_waits => {
                state.lua_request = Some(LuaRequest {
                    filter: self.key(),
                    run: None,
                });
                Flow::Wait
            }
            None if state.request_edit.is_some() => Flow::Edited,
            None => Flow::Continue,
        }
    }

    fn on_request_waiting<'a>(
        &'a self,
        req: &'a RequestAttrs<'a>,
        route: &'a Route,
        state: &'a mut FilterState,
        _metrics: &'a Metrics,
    ) -> VerdictFuture<'a> {
        // The request phase that ran in `on_request`: what is left of it.
        match state.lua_request.take() {
            Some(LuaRequest { filter, run }) if filter == self.key() => {
                return match run {
                    Some(run) => Box::pin(self.request_phase_from(*run, req, state)),
                    None => Box::pin(std::future::ready(Verdict::Continue)),
                };
            }
            other => state.lua_request = other,
        }
        match self.script_for(req, route) {
            Some((_, c)) if self.program.has(c.script, Phase::Request) => {
                Box::pin(self.request_phase(c, req, route, state))
            }
            _ => Box::pin(std::future::ready(Verdict::Continue)),
        }
    }

    fn reads_request_body(&self) -> bool {
        self.reads_body
    }

    /// A response phase that cannot wait (see [`LuaFilter::response_now`]); one that may
    /// set [`FilterState::response_waits`] and runs in `on_response_waiting`.
    fn on_response(
        &self,
        _route: &Route,
        state: &mut FilterState,
        response: &mut Response<ProxyBody>,
    ) {
        if let Some(choice) = self.response_script(state) {
            if self.response_may_wait {
                tracing::error!("script log: a Lua response phase ran without waiting; skipped");
                return;
            }
            self.response_now(choice, state, response);
        }
    }

    fn on_response_waiting<'a>(
        &'a self,
        _route: &'a Route,
        state: &'a mut FilterState,
        response: &'a mut Response<ProxyBody>,
    ) -> super::chain::ResponseFuture<'a> {
        match self.response_script(state) {
            Some(choice) => Box::pin(self.response_phase(choice, state, response)),
            None => Box::pin(std::future::ready(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_are_the_cluster_candidates() {
        let cases: &[(&str, &[&str])] = &[
            (
                r#"h:httpCall("lua_cluster", {[":path"] = "/"}, "", 10)"#,
                &["lua_cluster", ":path", "/", ""],
            ),
            ("h:httpCall('outbound|80||a.b', x)", &["outbound|80||a.b"]),
            (r#"local s = "unterminated"#, &[]),
            ("no strings here", &[]),
        ];
        for (src, want) in cases {
            assert_eq!(string_literals(src), *want, "{src}");
        }
    }

    #[test]
    fn a_filter_before_the_router_goes_ahead_of_later_ones_there() {
        use super::super::chain::{CORS, GLOBAL_RATE_LIMIT as RL};
        let chain = [CORS, RL];
        let before = |n: &str| Position::Before(n.to_string());
        // (own position, later patches' filters, the chain, where it goes)
        type Case<'a> = (Position, Vec<(&'a str, Position)>, &'a [&'a str], Position);
        let cases: Vec<Case> = vec![
            (
                before(ROUTER),
                vec![(RL, before(ROUTER))],
                &chain,
                before(RL),
            ),
            (
                Position::Last,
                vec![(RL, Position::Last)],
                &chain,
                before(RL),
            ),
            (
                before(ROUTER),
                vec![(RL, before(ROUTER))],
                &[CORS],
                before(ROUTER),
            ),
            (
                before(ROUTER),
                vec![(RL, Position::After(CORS.into()))],
                &chain,
                before(ROUTER),
            ),
            (
                before(ROUTER),
                vec![("x", before(ROUTER)), (RL, before(ROUTER))],
                &chain,
                before(RL),
            ),
            (
                before(CORS),
                vec![(RL, before(ROUTER))],
                &chain,
                before(CORS),
            ),
            (
                Position::First,
                vec![(RL, Position::First)],
                &chain,
                Position::First,
            ),
        ];
        for (own, later, chain, want) in cases {
            let later_owned = later.iter().map(|(n, p)| (n.to_string(), p.clone()));
            assert_eq!(
                placed(own.clone(), later_owned, chain),
                want,
                "{own:?} {later:?}"
            );
        }
    }

    #[test]
    fn deprecated_filter_names_are_read_as_current_ones() {
        let cases = [
            ("envoy.router", ROUTER),
            ("envoy.filters.http.router", ROUTER),
            ("envoy.rate_limit", super::super::chain::GLOBAL_RATE_LIMIT),
            ("envoy.lua", LUA),
            ("envoy.filters.http.cors", "envoy.filters.http.cors"),
        ];
        for (given, want) in cases {
            assert_eq!(canonical_filter_name(given), want);
        }
    }
}
