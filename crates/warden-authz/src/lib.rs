//! AuthorizationPolicy evaluation: compiled CIDR sets and rule matching. Pure, no I/O.
//!
//! Wiring, per config snapshot and per request:
//! ```text
//! let scope = ProxyScope { namespace, root_namespace: "istio-system", labels, gateway_names };
//! let authz = Authorizer::compile_set(&loaded.set, &scope)?;     // Err(Vec<Problem>)
//! // HTTP, after the route match:
//! let d = authz.check_http(&HttpAttrs { direct_peer, client_ip, dest_ip, dest_port,
//!                                        host, method, path, headers, sni, principal,
//!                                        request_auth });
//! if !d.allow { reply DENY_STATUS, DENY_BODY, DENY_CONTENT_TYPE; log d.details() }
//! // metrics: allowed / denied{policy = d.policy_label()} / shadow_denied{policy} per d.shadow_denied
//! // TCP, on the first byte: if !authz.check_tcp(&TcpAttrs{..}).allow, close writing nothing.
//! ```
//! Semantics follow Istio (istio.io's "Authorization Policy" reference) and Envoy's RBAC
//! filter: DENY before ALLOW, no ALLOW policy means allow, `spec: {}` allows nothing, `rules: [{}]` matches all,
//! `istio.io/dry-run` policies only produce [`Decision::shadow_denied`]. On a TCP connection an
//! ALLOW rule with an HTTP-only field (hosts, methods, paths, their `not` forms, a
//! `request.headers` condition) never matches, and a DENY or AUDIT rule matches on its other
//! fields alone, as Istio builds TCP filter chains; [`tcp_notes`] says so per rule, for
//! `warden check` and the reload log of a proxy that serves TCP. Rules are named like
//! Envoy's RBAC policies, `ns[<namespace>]-policy[<name>]-rule[<index>]`, and evaluated in
//! that name order. CIDR lists are compiled into per-family range indexes, so a check costs the
//! same with one CIDR or a million.

#![forbid(unsafe_code)]

mod attrs;
mod authorizer;
mod cidr_index;
mod compile;
mod decision;
mod policy_set;
mod rule;
mod scope;
mod string_match;
mod tcp_notes;

pub use attrs::{HttpAttrs, RequestAuth, TcpAttrs};
pub use authorizer::{Authorizer, AuthorizerStats, CustomMatch, CustomRules};
pub use cidr_index::{canonical, canonical_net};
pub use compile::DRY_RUN_ANNOTATION;
pub use decision::{Decision, DENY_BODY, DENY_CONTENT_TYPE, DENY_STATUS, NONE_POLICY};
pub use scope::ProxyScope;
pub use tcp_notes::tcp_notes;
