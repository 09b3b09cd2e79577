//! Lookups the proxy needs when it compiles a [`ConfigSet`]: which ServiceEntry serves a host,
//! which DestinationRule applies, which Gateways a VirtualService binds to, where a field is.

use crate::document::Doc;
use crate::error::Location;
use crate::field_path::FieldPath;
use crate::gateway_ref::gateway_matches;
use crate::hosts::{host_matches, server_host_admits};
use crate::kinds::destination_rule::{DestinationRule, LbPolicy};
use crate::kinds::gateway::Gateway;
use crate::kinds::service_entry::ServiceEntry;
use crate::kinds::virtual_service::VirtualService;
use crate::ConfigSet;

impl ConfigSet {
    /// The location of `field` (e.g. `spec.rules[0].from`) in `doc`, with its line when known:
    /// for problems found by the crates that compile the documents.
    pub fn locate<T>(&self, doc: &Doc<T>, field: &str) -> Location {
        let path = FieldPath::parse(field);
        Location {
            file: doc.file.clone(),
            line: self.source_lines.line_of(&doc.file, doc.index, &path),
            document: doc.index,
            object: doc.id(),
            field: field.to_owned(),
        }
    }

    /// `problem` with the line of its field filled in, when the loader knows it (problems found
    /// by compiling crates only name the file, document and field).
    pub fn with_line(&self, mut problem: crate::Problem) -> crate::Problem {
        let loc = &mut problem.location;
        if loc.line.is_none() && loc.document > 0 {
            loc.line =
                self.source_lines
                    .line_of(&loc.file, loc.document, &FieldPath::parse(&loc.field));
        }
        problem
    }

    /// The ServiceEntry defining `host`: an exact host (case-insensitive) first, else the most
    /// specific (longest) wildcard host that matches it.
    pub fn service_entry_for_host(&self, host: &str) -> Option<&Doc<ServiceEntry>> {
        let exact = self
            .service_entries
            .iter()
            .find(|se| se.spec.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)));
        exact.or_else(|| {
            self.service_entries
                .iter()
                .flat_map(|se| se.spec.hosts.iter().map(move |h| (h, se)))
                .filter(|(h, _)| h.starts_with('*') && host_matches(h, host))
                .max_by_key(|(h, _)| h.len())
                .map(|(_, se)| se)
        })
    }

    /// The service (ServiceEntry, or Kubernetes Service) a VirtualService or DestinationRule of
    /// `namespace` means by `host`: short names are that namespace's Kubernetes services.
    pub fn service_in(&self, host: &str, namespace: &str) -> Option<&Doc<ServiceEntry>> {
        self.service_entry_for_host(&crate::mesh_registry::expand_host(host, namespace))
    }

    /// The DestinationRule whose `host` is `host` (exact, case-insensitive; else the longest
    /// matching wildcard).
    pub fn destination_rule_for_host(&self, host: &str) -> Option<&Doc<DestinationRule>> {
        // A rule's short host names a service of its own namespace.
        fn full(dr: &Doc<DestinationRule>) -> std::borrow::Cow<'_, str> {
            crate::mesh_registry::expand_host(&dr.spec.host, dr.metadata.namespace_or_default())
        }
        let exact = self
            .destination_rules
            .iter()
            .find(|dr| full(dr).eq_ignore_ascii_case(host));
        exact.or_else(|| {
            self.destination_rules
                .iter()
                .filter(|dr| dr.spec.host.starts_with('*') && host_matches(&dr.spec.host, host))
                .max_by_key(|dr| dr.spec.host.len())
        })
    }

    /// The load balancing policy for upstream `host` (least request without a DestinationRule,
    /// as in Istio).
    pub fn lb_policy_for_host(&self, host: &str) -> LbPolicy {
        self.destination_rule_for_host(host)
            .map(|dr| dr.spec.lb_policy())
            .unwrap_or_default()
    }

    /// Gateways named by the VirtualService's `gateways:` (unresolved names and `mesh` skipped).
    pub fn gateways_of(&self, vs: &Doc<VirtualService>) -> Vec<&Doc<Gateway>> {
        let ns = vs.metadata.namespace_or_default();
        self.gateways
            .iter()
            .filter(|g| vs.spec.gateways.iter().any(|r| gateway_matches(ns, r, g)))
            .collect()
    }

    /// VirtualServices bound to `gateway`, in load order: those naming it in `gateways:` with a
    /// host admitted by one of its servers' hosts.
    pub fn virtual_services_for_gateway(
        &self,
        gateway: &Doc<Gateway>,
    ) -> Vec<&Doc<VirtualService>> {
        let gw_ns = gateway.metadata.namespace_or_default();
        self.virtual_services
            .iter()
            .filter(|vs| {
                let ns = vs.metadata.namespace_or_default();
                vs.spec
                    .gateways
                    .iter()
                    .any(|r| gateway_matches(ns, r, gateway))
                    && gateway.spec.servers.iter().any(|s| {
                        s.hosts.iter().any(|sh| {
                            vs.spec
                                .hosts
                                .iter()
                                .any(|h| server_host_admits(sh, gw_ns, ns, h))
                        })
                    })
            })
            .collect()
    }
}
