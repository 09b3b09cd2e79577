//! Which policies apply to this proxy: namespace, `selector.matchLabels`, `targetRefs`.

use std::collections::BTreeMap;
use warden_config::kinds::authorization_policy::{PolicyTargetReference, WorkloadSelector};
use warden_config::{AuthorizationPolicy, Doc};

/// The proxy's identity as policies see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyScope {
    /// The proxy's namespace (`--namespace`, default `default`).
    pub namespace: String,
    /// Policies in this namespace apply mesh-wide (Istio's root namespace, `istio-system`).
    pub root_namespace: String,
    /// The proxy's workload labels (`--label k=v`), matched by `selector.matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// Names of the Gateways this proxy implements, matched by `targetRefs` of kind Gateway.
    pub gateway_names: Vec<String>,
}

impl Default for ProxyScope {
    fn default() -> Self {
        ProxyScope {
            namespace: "default".into(),
            root_namespace: "istio-system".into(),
            labels: BTreeMap::new(),
            gateway_names: Vec::new(),
        }
    }
}

pub(crate) const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

/// The target references of a policy, the deprecated singular one included.
pub(crate) fn target_refs(
    policy: &AuthorizationPolicy,
) -> impl Iterator<Item = &PolicyTargetReference> + Clone {
    policy.target_ref.iter().chain(policy.target_refs.iter())
}

impl ProxyScope {
    /// Whether a (valid) policy applies to this proxy.
    pub fn selects(&self, doc: &Doc<AuthorizationPolicy>) -> bool {
        let spec = &doc.spec;
        self.selects_parts(
            doc.metadata.namespace_or_default(),
            spec.selector.as_ref(),
            target_refs(spec),
        )
    }

    /// Whether a workload policy of namespace `ns` with this selector and these target
    /// references applies to this proxy (Istio selects AuthorizationPolicy and
    /// RequestAuthentication alike).
    pub fn selects_parts<'a>(
        &self,
        ns: &str,
        selector: Option<&WorkloadSelector>,
        refs: impl Iterator<Item = &'a PolicyTargetReference> + Clone,
    ) -> bool {
        if ns != self.root_namespace && ns != self.namespace {
            return false;
        }
        if refs.clone().next().is_some() {
            return refs.clone().any(|r| {
                r.kind == "Gateway"
                    && self.gateway_names.contains(&r.name)
                    && r.namespace.as_deref().is_none_or(|n| n == ns)
            });
        }
        match selector {
            None => true,
            Some(sel) => sel
                .match_labels
                .iter()
                .all(|(k, v)| self.labels.get(k) == Some(v)),
        }
    }
}
