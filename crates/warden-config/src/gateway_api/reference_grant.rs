//! Cross-namespace references: a route (or a Gateway's certificate ref) may name an object
//! of another namespace only when a `ReferenceGrant` in that namespace allows it.

use super::kinds::ReferenceGrantSpec;
use crate::document::Doc;

/// The referring side: the kind of object (`HTTPRoute`, `Gateway`...) and its namespace.
#[derive(Debug, Clone, Copy)]
pub struct From<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
}

/// The referred object.
#[derive(Debug, Clone, Copy)]
pub struct To<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// Whether `from` may reference `to`: same namespace, or a grant in `to`'s namespace lists
/// `from`'s group, kind and namespace and `to`'s group, kind and (if it names one) name.
pub fn permitted(grants: &[Doc<ReferenceGrantSpec>], from: From<'_>, to: To<'_>) -> bool {
    if from.namespace == to.namespace {
        return true;
    }
    grants
        .iter()
        .filter(|g| g.metadata.namespace_or_default() == to.namespace)
        .any(|g| {
            g.spec.from.iter().any(|f| {
                f.group == from.group && f.kind == from.kind && f.namespace == from.namespace
            }) && g.spec.to.iter().any(|t| {
                t.group == to.group
                    && t.kind == to.kind
                    && t.name.as_deref().is_none_or(|n| n == to.name)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Metadata;
    use crate::gateway_api::kinds::{GrantFrom, GrantTo};

    fn grant(
        ns: &str,
        from_ns: &str,
        from_kind: &str,
        to_kind: &str,
        name: Option<&str>,
    ) -> Doc<ReferenceGrantSpec> {
        Doc {
            file: "t.yaml".into(),
            index: 1,
            api_version: "gateway.networking.k8s.io/v1beta1".into(),
            kind: "ReferenceGrant".into(),
            metadata: Metadata {
                name: "g".into(),
                namespace: Some(ns.into()),
                ..Metadata::default()
            },
            spec: ReferenceGrantSpec {
                from: vec![GrantFrom {
                    group: "gateway.networking.k8s.io".into(),
                    kind: from_kind.into(),
                    namespace: from_ns.into(),
                }],
                to: vec![GrantTo {
                    group: String::new(),
                    kind: to_kind.into(),
                    name: name.map(Into::into),
                }],
            },
        }
    }

    #[test]
    fn cross_namespace_needs_a_matching_grant_in_the_target_namespace() {
        let route = |ns| From {
            group: "gateway.networking.k8s.io",
            kind: "HTTPRoute",
            namespace: ns,
        };
        let svc = |ns, name| To {
            group: "",
            kind: "Service",
            namespace: ns,
            name,
        };
        let any = [grant("backend", "prod", "HTTPRoute", "Service", None)];
        let named = [grant(
            "backend",
            "prod",
            "HTTPRoute",
            "Service",
            Some("api"),
        )];
        let elsewhere = [grant("prod", "prod", "HTTPRoute", "Service", None)];
        let grpc = [grant("backend", "prod", "GRPCRoute", "Service", None)];
        type Case<'a> = (
            &'a [Doc<ReferenceGrantSpec>],
            From<'a>,
            To<'a>,
            bool,
            &'a str,
        );
        let cases: [Case; 7] = [
            (
                &[],
                route("prod"),
                svc("prod", "api"),
                true,
                "same namespace",
            ),
            (&[], route("prod"), svc("backend", "api"), false, "no grant"),
            (
                &any,
                route("prod"),
                svc("backend", "api"),
                true,
                "grant for every Service",
            ),
            (
                &named,
                route("prod"),
                svc("backend", "web"),
                false,
                "grant names another Service",
            ),
            (
                &named,
                route("prod"),
                svc("backend", "api"),
                true,
                "grant names it",
            ),
            (
                &elsewhere,
                route("prod"),
                svc("backend", "api"),
                false,
                "grant in the wrong namespace",
            ),
            (
                &grpc,
                route("prod"),
                svc("backend", "api"),
                false,
                "grant for another route kind",
            ),
        ];
        for (grants, from, to, want, why) in cases {
            assert_eq!(permitted(grants, from, to), want, "{why}");
        }
    }
}
