//! AuthorizationPolicy evaluation: compiled CIDR sets and rule matching. Pure, no I/O.
//!
//! ```text
//! Authorizer::compile(&set.authorization_policies, &ProxyScope{..})  -> Authorizer (per snapshot)
//! authorizer.check_http(&HttpAttrs{..}) / check_tcp(&TcpAttrs{..})  -> Decision
//! ```
//! Semantics follow Istio/Envoy (shared/reference/envoy-istio-semantics.md §3): DENY before
//! ALLOW, no ALLOW policy means allow, `spec: {}` allows nothing, `rules: [{}]` matches all,
//! `istio.io/dry-run` policies only produce [`Decision::shadow_denied`]. Rules are named like
//! Envoy's RBAC policies, `ns[<namespace>]-policy[<name>]-rule[<index>]`, and evaluated in
//! that name order. CIDR lists are compiled into per-family range indexes, so a check costs the
//! same with one CIDR or a million.

mod attrs;
mod authorizer;
mod cidr_index;
mod compile;
mod decision;
mod policy_set;
mod rule;
mod scope;
mod string_match;

pub use attrs::{HttpAttrs, TcpAttrs};
pub use authorizer::{Authorizer, AuthorizerStats};
pub use cidr_index::{canonical, canonical_net};
pub use compile::DRY_RUN_ANNOTATION;
pub use decision::{Decision, DENY_BODY, DENY_CONTENT_TYPE, DENY_STATUS, NONE_POLICY};
pub use scope::ProxyScope;
