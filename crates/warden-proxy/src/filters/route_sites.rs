//! Where EnvoyFilter VIRTUAL_HOST and HTTP_ROUTE patches land: every (virtual host, route) of
//! this proxy named as Istio names the Envoy config it would generate, and the patches'
//! `match.routeConfiguration` resolved against them.
//!
//! Istio's names: a gateway's route configuration `http.<port>` holds one virtual host
//! `<host>:<port>` per VirtualService host bound to the server on that port, whose routes are
//! named by `http[].name` (plus `.<match name>`); a sidecar's inbound route configuration
//! `inbound|<port>||` holds the virtual host `inbound|http|<port>` with the route `default`.
//! A patch that applies to this proxy (context, workload selector) but lands nowhere is not
//! applied, as in Istio, and is a located warning (`WDN0011`, `warden check --strict` fails on
//! it): Istio drops it silently, which is how a rate limit ends up limiting nothing.

use crate::core::destination::Side;
use crate::core::request_attrs::RequestAttrs;
use crate::routing::ports::{ListenerSpec, PortRoutes};
use crate::routing::sidecar_tables::{PortProtocol, SidecarRoutes};
use crate::routing::{Route, RouteAction, RouteTable};
use std::collections::HashMap;
use std::sync::Arc;
use warden_config::kinds::envoy_filter::RouteConfigurationMatch;
use warden_config::{ConfigSet, Problem};
use warden_local_ratelimit::envoy::PatchOrigin;

/// One (side, port, virtual host, route) a request can be routed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteKey {
    side: u8,
    port: u16,
    vhost: u32,
    /// The route's address: routes live as long as the snapshot that holds this key.
    route: usize,
}

impl SiteKey {
    /// The site a routed request is at.
    #[inline]
    pub fn of(req: &RequestAttrs<'_>, route: &Route) -> SiteKey {
        SiteKey {
            side: side_code(req.side),
            port: req.port,
            vhost: req.vhost,
            route: route as *const Route as usize,
        }
    }
}

fn side_code(side: Side) -> u8 {
    match side {
        Side::Gateway => 0,
        Side::Outbound => 1,
        Side::Inbound => 2,
    }
}

#[derive(Debug)]
struct Site {
    key: SiteKey,
    /// `http.8080`, `inbound|9080||`.
    route_config: String,
    port: u16,
    /// Gateway servers on this port: their port names and `namespace/name` gateways.
    port_names: Vec<String>,
    gateways: Vec<String>,
    vhost_name: String,
    domains: Vec<String>,
    route_names: Box<[Box<str>]>,
    /// `ROUTE`, `REDIRECT`, `DIRECT_RESPONSE`.
    action: &'static str,
    /// warden's name of the route (`namespace/virtualservice/route`).
    label: Arc<str>,
}

/// Every site of this proxy that policies apply to (a gateway's ports, a sidecar's inbound).
#[derive(Debug, Default)]
pub struct RouteCatalog {
    sites: Vec<Site>,
    sidecar: bool,
    /// The warnings for patches that landed nowhere, once each (several filters place the
    /// same `rate_limits` patches); the snapshot takes them ([`RouteCatalog::take_unmatched`]).
    unmatched: std::sync::Mutex<Vec<Problem>>,
}

/// Why a patch has no landing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotLanded {
    /// It asks for what warden cannot do (a context, a route action): an error.
    Invalid(String),
    /// It applies to this proxy but matches none of its routes: not applied, a warning.
    Unmatched(String),
}

/// Where one patch landed.
#[derive(Debug, Clone)]
pub struct Landing {
    /// Every site of the proxy: no lookup needed per request.
    pub everywhere: bool,
    pub keys: Vec<SiteKey>,
    /// `vhost *:8080 route default/bookinfo/api`, for `warden check`.
    pub described: Vec<String>,
}

impl Landing {
    /// Whether the patch applies at `site` (`None`: a site no scoped patch touches).
    pub fn covers(&self, site: Option<SiteKey>) -> bool {
        self.everywhere || site.is_some_and(|k| self.keys.contains(&k))
    }
}

/// A `rate_limits` patch that landed.
#[derive(Debug)]
pub struct LandedRateLimits {
    /// Index in the EnvoyFilters' `route_rate_limits`.
    pub patch: u32,
    /// An HTTP_ROUTE patch (the route's rate limits), else VIRTUAL_HOST.
    pub on_route: bool,
    pub include_vh: bool,
    pub landing: Landing,
}

/// Envoy's rate limits at one site: the route's, then the virtual host's unless the route has
/// its own (and does not set `include_vh_rate_limits`). Patch indices, in that order.
pub fn rate_limits_at(landed: &[LandedRateLimits], site: Option<SiteKey>) -> Vec<u32> {
    let here: Vec<&LandedRateLimits> = landed.iter().filter(|l| l.landing.covers(site)).collect();
    let mut out: Vec<u32> = here
        .iter()
        .filter(|l| l.on_route)
        .map(|l| l.patch)
        .collect();
    if out.is_empty() || here.iter().any(|l| l.on_route && l.include_vh) {
        out.extend(here.iter().filter(|l| !l.on_route).map(|l| l.patch));
    }
    out
}

fn action_of(route: &Route) -> &'static str {
    match route.action {
        RouteAction::Forward { .. } => "ROUTE",
        RouteAction::Redirect(_) => "REDIRECT",
        RouteAction::Direct { .. } => "DIRECT_RESPONSE",
    }
}

impl RouteCatalog {
    /// The sites of a snapshot's route tables: `listeners`/`ports` of a gateway, or a
    /// sidecar's inbound table for each HTTP port the registry gives this pod.
    pub fn build(
        set: &ConfigSet,
        listeners: &[ListenerSpec],
        ports: &[PortRoutes],
        sidecar: Option<&SidecarRoutes>,
    ) -> RouteCatalog {
        let mut catalog = RouteCatalog {
            sites: Vec::new(),
            sidecar: sidecar.is_some(),
            unmatched: Default::default(),
        };
        if let Some(s) = sidecar {
            let PortRoutes::Http(table) = &s.inbound_http else {
                return catalog;
            };
            let mut inbound: Vec<u16> = s
                .inbound_protocols()
                .filter(|(_, p)| *p != PortProtocol::Tcp)
                .map(|(port, _)| port)
                .collect();
            inbound.sort_unstable();
            for port in inbound {
                catalog.add_table(Side::Inbound, port, table, |_| {
                    (format!("inbound|{port}||"), format!("inbound|http|{port}"))
                });
            }
            return catalog;
        }
        for (l, routes) in listeners.iter().zip(ports) {
            let PortRoutes::Http(table) = routes else {
                continue;
            };
            let port = l.port;
            let before = catalog.sites.len();
            catalog.add_table(Side::Gateway, port, table, |domain| {
                (format!("http.{port}"), format!("{domain}:{port}"))
            });
            let mut port_names = Vec::new();
            let mut gateways = Vec::new();
            for gw in &set.gateways {
                for server in gw.spec.servers.iter().filter(|s| s.port.number == port) {
                    port_names.extend(server.port.name.clone());
                    gateways.push(format!(
                        "{}/{}",
                        gw.metadata.namespace_or_default(),
                        gw.metadata.name
                    ));
                }
            }
            for site in &mut catalog.sites[before..] {
                site.port_names = port_names.clone();
                site.gateways = gateways.clone();
            }
        }
        catalog
    }

    fn add_table(
        &mut self,
        side: Side,
        port: u16,
        table: &RouteTable,
        names: impl Fn(&str) -> (String, String),
    ) {
        for (vi, vh) in table.vhosts.iter().enumerate() {
            let domain = vh.domains.first().map_or("*", String::as_str);
            let (route_config, vhost_name) = names(domain);
            for route in &vh.routes {
                self.sites.push(Site {
                    key: SiteKey {
                        side: side_code(side),
                        port,
                        vhost: vi as u32,
                        route: Arc::as_ptr(route) as usize,
                    },
                    route_config: route_config.clone(),
                    port,
                    port_names: Vec::new(),
                    gateways: Vec::new(),
                    vhost_name: vhost_name.clone(),
                    domains: vh.domains.clone(),
                    route_names: route.envoy_names.clone(),
                    action: action_of(route),
                    label: route.name.clone(),
                });
            }
        }
    }

    /// Where a VIRTUAL_HOST / HTTP_ROUTE patch lands; `Ok(None)` when its context is another
    /// kind of proxy's. Errors name what the patch asked for and what this proxy has.
    pub fn resolve(&self, origin: &PatchOrigin) -> Result<Option<Landing>, NotLanded> {
        match origin.context.as_deref().unwrap_or("ANY") {
            "ANY" => {}
            "GATEWAY" if self.sidecar => return Ok(None),
            "GATEWAY" => {}
            "SIDECAR_INBOUND" if !self.sidecar => return Ok(None),
            "SIDECAR_INBOUND" => {}
            "SIDECAR_OUTBOUND" if !self.sidecar => return Ok(None),
            "SIDECAR_OUTBOUND" => {
                return Err(NotLanded::Invalid(
                    "a sidecar applies rate limits where requests arrive (SIDECAR_INBOUND), as \
                     Istio applies policies; warden has no SIDECAR_OUTBOUND rate limit stage"
                        .into(),
                ))
            }
            other => {
                return Err(NotLanded::Invalid(format!(
                    "context {other:?} is not ANY, GATEWAY, SIDECAR_INBOUND or SIDECAR_OUTBOUND"
                )))
            }
        }
        let m = &origin.route_match;
        let on_route = origin.apply_to == "HTTP_ROUTE";
        let route_match = m.vhost.as_ref().and_then(|v| v.route.as_ref());
        let action = route_match
            .and_then(|r| r.action.as_deref())
            .unwrap_or("ANY");
        if on_route && !matches!(action, "ANY" | "ROUTE" | "REDIRECT" | "DIRECT_RESPONSE") {
            return Err(NotLanded::Invalid(format!(
                "route action {action:?} is not ANY, ROUTE, REDIRECT or DIRECT_RESPONSE"
            )));
        }
        let want_route = route_match
            .and_then(|r| r.name.as_deref())
            .filter(|n| !n.is_empty());
        let mut landing = Landing {
            everywhere: false,
            keys: Vec::new(),
            described: Vec::new(),
        };
        for site in &self.sites {
            if !route_config_matches(m, site, self.sidecar) || !vhost_matches(m, site) {
                continue;
            }
            if on_route {
                if action != "ANY" && action != site.action {
                    continue;
                }
                if let Some(name) = want_route {
                    let hits = site.route_names.iter().filter(|n| &***n == name).count();
                    if hits == 0 {
                        continue;
                    }
                    if hits != site.route_names.len() {
                        return Err(NotLanded::Invalid(format!(
                            "route {name:?} is only some matches of the route {} (named {}); \
                             warden applies route rate limits to a whole http[] route",
                            site.label,
                            site.route_names.join(", ")
                        )));
                    }
                }
            }
            landing.keys.push(site.key);
            landing
                .described
                .push(format!("vhost {} route {}", site.vhost_name, site.label));
        }
        if landing.keys.is_empty() {
            return Err(NotLanded::Unmatched(format!(
                "{} matches nothing on this proxy (asked: {}; virtual hosts here: {})",
                origin.apply_to,
                describe_match(m, on_route),
                self.vhost_names()
            )));
        }
        landing.everywhere = landing.keys.len() == self.sites.len();
        Ok(Some(landing))
    }

    /// [`Self::resolve`] for a patch of the filter (`what` names what it carries, for
    /// `warden check`): its landing descriptions go to `landings`, an error to `problems`
    /// against the patch's `match.routeConfiguration`.
    pub fn land(
        &self,
        origin: &PatchOrigin,
        what: &str,
        landings: &mut Vec<String>,
        problems: &mut Vec<Problem>,
    ) -> Option<Landing> {
        match self.resolve(origin) {
            Ok(Some(landing)) => {
                for d in &landing.described {
                    landings.push(format!("{} {}: {what} -> {d}", origin.filter, origin.field));
                }
                Some(landing)
            }
            Ok(None) => None,
            Err(not_landed) => {
                let location = warden_config::Location {
                    field: format!("{}.match.routeConfiguration", origin.field),
                    ..origin.document.clone()
                };
                match not_landed {
                    NotLanded::Invalid(message) => problems.push(Problem {
                        code: None,
                        location,
                        message,
                    }),
                    NotLanded::Unmatched(message) => {
                        let warning = Problem {
                            code: Some(warden_config::Code::EnvoyFilterPatchUnmatched),
                            location,
                            message: format!("{message}; not applied (Istio ignores it too)"),
                        };
                        let mut unmatched =
                            self.unmatched.lock().unwrap_or_else(|e| e.into_inner());
                        if !unmatched.contains(&warning) {
                            unmatched.push(warning);
                        }
                    }
                }
                None
            }
        }
    }

    /// The warnings for patches that landed nowhere (each once), taken.
    pub fn take_unmatched(&self) -> Vec<Problem> {
        std::mem::take(&mut *self.unmatched.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Where each selected `rate_limits` patch of `patches` landed.
    pub fn land_rate_limits(
        &self,
        patches: &warden_local_ratelimit::envoy::EnvoyRateLimitPatches,
        selected: impl Fn(&PatchOrigin) -> bool,
        landings: &mut Vec<String>,
        problems: &mut Vec<Problem>,
    ) -> Vec<LandedRateLimits> {
        let mut out = Vec::new();
        for (i, p) in (0u32..).zip(&patches.route_rate_limits) {
            if !selected(&p.origin) {
                continue;
            }
            if let Some(landing) = self.land(&p.origin, "rate_limits", landings, problems) {
                out.push(LandedRateLimits {
                    patch: i,
                    on_route: p.origin.apply_to == "HTTP_ROUTE",
                    include_vh: p.config.include_vh_rate_limits,
                    landing,
                });
            }
        }
        out
    }

    fn vhost_names(&self) -> String {
        let mut names: Vec<String> = Vec::new();
        for s in &self.sites {
            let routes = s
                .route_names
                .iter()
                .map(|n| if n.is_empty() { "\"\"" } else { n })
                .collect::<Vec<_>>()
                .join("|");
            let entry = format!("{} (route {routes})", s.vhost_name);
            if !names.contains(&entry) {
                names.push(entry);
            }
        }
        if names.is_empty() {
            return "none".into();
        }
        let more = names.len().saturating_sub(8);
        names.truncate(8);
        let mut text = names.join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    }
}

fn route_config_matches(m: &RouteConfigurationMatch, site: &Site, sidecar: bool) -> bool {
    if m.name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != site.route_config)
    {
        return false;
    }
    if m.port_number
        .is_some_and(|p| p != 0 && p != u32::from(site.port))
    {
        return false;
    }
    // Port names and gateways are gateway-only match fields (Istio ignores them elsewhere).
    if !sidecar {
        if let Some(name) = m.port_name.as_deref().filter(|n| !n.is_empty()) {
            if !site.port_names.iter().any(|p| p == name) {
                return false;
            }
        }
        if let Some(gw) = m.gateway.as_deref().filter(|g| !g.is_empty()) {
            if !site.gateways.iter().any(|g| g == gw) {
                return false;
            }
        }
    }
    true
}

fn vhost_matches(m: &RouteConfigurationMatch, site: &Site) -> bool {
    let Some(v) = &m.vhost else {
        return true;
    };
    let name_ok = v
        .name
        .as_deref()
        .is_none_or(|n| n.is_empty() || n == site.vhost_name);
    let domain_ok = v
        .domain_name
        .as_deref()
        .is_none_or(|d| d.is_empty() || site.domains.iter().any(|x| x.eq_ignore_ascii_case(d)));
    name_ok && domain_ok
}

fn describe_match(m: &RouteConfigurationMatch, on_route: bool) -> String {
    let mut parts = Vec::new();
    if let Some(n) = m.name.as_deref().filter(|n| !n.is_empty()) {
        parts.push(format!("route configuration {n:?}"));
    }
    if let Some(p) = m.port_number.filter(|p| *p != 0) {
        parts.push(format!("port {p}"));
    }
    if let Some(p) = m.port_name.as_deref().filter(|n| !n.is_empty()) {
        parts.push(format!("port name {p:?}"));
    }
    if let Some(g) = m.gateway.as_deref().filter(|n| !n.is_empty()) {
        parts.push(format!("gateway {g:?}"));
    }
    if let Some(v) = &m.vhost {
        if let Some(n) = v.name.as_deref().filter(|n| !n.is_empty()) {
            parts.push(format!("vhost {n:?}"));
        }
        if let Some(d) = v.domain_name.as_deref().filter(|n| !n.is_empty()) {
            parts.push(format!("domain {d:?}"));
        }
        if let (true, Some(r)) = (on_route, &v.route) {
            if let Some(n) = r.name.as_deref().filter(|n| !n.is_empty()) {
                parts.push(format!("route {n:?}"));
            }
            if let Some(a) = r.action.as_deref().filter(|a| *a != "ANY") {
                parts.push(format!("action {a}"));
            }
        }
    }
    if parts.is_empty() {
        "any route".into()
    } else {
        parts.join(", ")
    }
}

/// Per-site values with one shared value for sites no scoped patch touches, so a config
/// whose patches land everywhere costs no lookup per request.
#[derive(Debug)]
pub struct SiteTable<T> {
    everywhere: T,
    by_site: HashMap<SiteKey, T>,
}

impl<T: PartialEq> SiteTable<T> {
    /// `value_at(None)` is the value of a site no scoped patch touches; `value_at(Some(k))`
    /// the value at site `k` (one of `sites`).
    pub fn build(sites: &[SiteKey], mut value_at: impl FnMut(Option<SiteKey>) -> T) -> Self {
        let everywhere = value_at(None);
        let mut by_site = HashMap::new();
        for &k in sites {
            let v = value_at(Some(k));
            if v != everywhere {
                by_site.insert(k, v);
            }
        }
        SiteTable {
            everywhere,
            by_site,
        }
    }

    #[inline]
    pub fn get(&self, req: &RequestAttrs<'_>, route: &Route) -> &T {
        if self.by_site.is_empty() {
            return &self.everywhere;
        }
        self.by_site
            .get(&SiteKey::of(req, route))
            .unwrap_or(&self.everywhere)
    }
}

impl RouteCatalog {
    /// Every site key, for [`SiteTable::build`].
    pub fn keys(&self) -> Vec<SiteKey> {
        self.sites.iter().map(|s| s.key).collect()
    }
}
