//! From `AuthorizationPolicy` documents to policy sets, with every error located by field path.

use crate::policy_set::PolicySetBuilder;
use crate::rule::{AddrKind, CidrPair, ConditionMatch, OperationMatch, Pair, Rule, SourceMatch};
use crate::scope::{target_refs, GATEWAY_API_GROUP};
use crate::string_match::Pattern;
use ipnet::IpNet;
use std::net::IpAddr;
use std::sync::Arc;
use warden_config::kinds::authorization_policy::{Action, Condition, Operation, Source};
use warden_config::{AuthorizationPolicy, Doc, Location, Problem};

pub const DRY_RUN_ANNOTATION: &str = "istio.io/dry-run";

/// Which set a policy's rules go into; the value indexes the compiler's array of sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetKind {
    Deny = 0,
    Allow = 1,
    Audit = 2,
    ShadowDeny = 3,
    ShadowAllow = 4,
    /// CUSTOM: matching requests are sent to the policy's provider.
    Custom = 5,
    ShadowCustom = 6,
}

/// Turns a document and a field path into a [`Location`] (with a line number when the caller
/// has the source, see `ConfigSet::locate`).
pub(crate) type Locate<'a> = &'a dyn Fn(&Doc<AuthorizationPolicy>, &str) -> Location;

/// A location without a line number.
pub(crate) fn plain_location(doc: &Doc<AuthorizationPolicy>, field: &str) -> Location {
    Location {
        file: doc.file.clone(),
        document: doc.index,
        object: doc.id(),
        field: field.to_owned(),
        ..Default::default()
    }
}

/// Collects the problems of one document.
pub(crate) struct Problems<'a> {
    doc: &'a Doc<AuthorizationPolicy>,
    locate: Locate<'a>,
    pub(crate) list: Vec<Problem>,
}

impl<'a> Problems<'a> {
    pub(crate) fn new(doc: &'a Doc<AuthorizationPolicy>, locate: Locate<'a>) -> Self {
        Problems {
            doc,
            locate,
            list: Vec::new(),
        }
    }

    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.list.push(Problem {
            code: None,
            location: (self.locate)(self.doc, &field.into()),
            message: message.into(),
        });
    }
}

/// The set a policy belongs to, or None (with problems recorded) when its action or
/// annotations are unusable.
pub(crate) fn set_kind(
    doc: &Doc<AuthorizationPolicy>,
    problems: &mut Problems<'_>,
) -> Option<SetKind> {
    let dry_run = match doc.metadata.annotations.get(DRY_RUN_ANNOTATION) {
        None => false,
        Some(v) => match dry_run_value(v) {
            Some(d) => d,
            None => {
                problems.push(
                    format!("metadata.annotations[\"{DRY_RUN_ANNOTATION}\"]"),
                    format!("must be \"true\" or \"false\", got {v:?}"),
                );
                return None;
            }
        },
    };
    let spec = &doc.spec;
    if spec.provider.is_some() && spec.action != Action::Custom {
        problems.push(
            "spec.provider",
            "provider is only allowed with action CUSTOM",
        );
    }
    if spec.action == Action::Custom && spec.provider.as_ref().is_none_or(|p| p.name.is_empty()) {
        problems.push(
            "spec.provider.name",
            "must specify provider when using CUSTOM action",
        );
        return None;
    }
    match (spec.action, dry_run) {
        (Action::Custom, false) => Some(SetKind::Custom),
        (Action::Custom, true) => Some(SetKind::ShadowCustom),
        (Action::Deny, false) => Some(SetKind::Deny),
        (Action::Deny, true) => Some(SetKind::ShadowDeny),
        (Action::Allow, false) => Some(SetKind::Allow),
        (Action::Allow, true) => Some(SetKind::ShadowAllow),
        // AUDIT never enforces, so dry-run changes nothing.
        (Action::Audit, _) => Some(SetKind::Audit),
    }
}

/// The `istio.io/dry-run` annotation's value: `true`, `1`, `t` or `false`, `0`, `f` (any
/// case); `None` when it is neither.
pub(crate) fn dry_run_value(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "t" => Some(true),
        "false" | "0" | "f" => Some(false),
        _ => None,
    }
}

/// Reject target/selector combinations warden cannot honour.
pub(crate) fn check_targets(doc: &Doc<AuthorizationPolicy>, problems: &mut Problems<'_>) {
    let spec = &doc.spec;
    let has_refs = target_refs(spec).next().is_some();
    if has_refs && spec.selector.is_some() {
        problems.push(
            "spec.selector",
            "selector and targetRefs are mutually exclusive",
        );
    }
    if spec.target_ref.is_some() && !spec.target_refs.is_empty() {
        problems.push(
            "spec.targetRef",
            "targetRef and targetRefs are mutually exclusive",
        );
    }
    let singular = spec
        .target_ref
        .iter()
        .map(|r| (r, "spec.targetRef".to_string()));
    let plural = spec
        .target_refs
        .iter()
        .enumerate()
        .map(|(i, r)| (r, format!("spec.targetRefs[{i}]")));
    for (r, path) in singular.chain(plural) {
        if r.kind != "Gateway" {
            problems.push(
                format!("{path}.kind"),
                format!("targetRefs kind {:?} is not supported: warden policies can target a Gateway only", r.kind),
            );
        } else if !r.group.is_empty() && r.group != GATEWAY_API_GROUP {
            problems.push(
                format!("{path}.group"),
                format!("a Gateway target must have group {GATEWAY_API_GROUP}"),
            );
        }
        if r.name.is_empty() {
            problems.push(format!("{path}.name"), "name is required");
        }
    }
}

/// Compile every rule of a policy into `set`.
pub(crate) fn add_rules(
    doc: &Doc<AuthorizationPolicy>,
    set: &mut PolicySetBuilder,
    problems: &mut Problems<'_>,
) {
    let ns = doc.metadata.namespace_or_default();
    let name = &doc.metadata.name;
    for (r, rule) in doc.spec.rules.iter().enumerate() {
        let path = format!("spec.rules[{r}]");
        let mut compiled = Rule {
            name: Arc::from(format!("ns[{ns}]-policy[{name}]-rule[{r}]")),
            from: Vec::with_capacity(rule.from.len()),
            to: Vec::with_capacity(rule.to.len()),
            when: Vec::with_capacity(rule.when.len()),
        };
        for (f, from) in rule.from.iter().enumerate() {
            let path = format!("{path}.from[{f}].source");
            match &from.source {
                None => problems.push(path, "source must be set"),
                Some(src) => {
                    if let Some(s) = source(src, &path, set, problems) {
                        compiled.from.push(s);
                    }
                }
            }
        }
        for (t, to) in rule.to.iter().enumerate() {
            let path = format!("{path}.to[{t}].operation");
            match &to.operation {
                None => problems.push(path, "operation must be set"),
                Some(op) => compiled.to.push(operation(op, &path, problems)),
            }
        }
        for (w, cond) in rule.when.iter().enumerate() {
            if let Some(c) = condition(cond, &format!("{path}.when[{w}]"), set, problems) {
                compiled.when.push(c);
            }
        }
        set.add_rule(compiled);
    }
}

fn source(
    src: &Source,
    path: &str,
    set: &mut PolicySetBuilder,
    problems: &mut Problems<'_>,
) -> Option<SourceMatch> {
    let unsupported = [
        (
            &src.service_accounts,
            "serviceAccounts",
            "mTLS peer identities by service account (use principals)",
        ),
        (
            &src.not_service_accounts,
            "notServiceAccounts",
            "mTLS peer identities by service account (use notPrincipals)",
        ),
    ];
    let mut empty = true;
    for (values, field, needs) in unsupported {
        if !values.is_empty() {
            empty = false;
            problems.push(
                format!("{path}.{field}"),
                format!("{field} needs {needs}, which warden does not support yet"),
            );
        }
    }
    let patterns = |vs: &[String]| vs.iter().map(|v| Pattern::parse(v)).collect::<Vec<_>>();
    let principals = Pair {
        values: patterns(&src.principals),
        not_values: patterns(&src.not_principals),
    };
    let namespaces = Pair {
        values: patterns(&src.namespaces),
        not_values: patterns(&src.not_namespaces),
    };
    let request_principals = Pair {
        values: patterns(&src.request_principals),
        not_values: patterns(&src.not_request_principals),
    };
    empty &= principals.is_empty() && namespaces.is_empty() && request_principals.is_empty();
    let lists = [
        &src.ip_blocks,
        &src.not_ip_blocks,
        &src.remote_ip_blocks,
        &src.not_remote_ip_blocks,
    ];
    if empty && lists.iter().all(|l| l.is_empty()) {
        problems.push(path, "source must not be empty");
        return None;
    }
    let mut cidrs =
        |values: &Vec<String>, kind: AddrKind, field: &str, problems: &mut Problems<'_>| {
            cidr_list(values, kind, &format!("{path}.{field}"), set, problems)
        };
    let direct = CidrPair {
        values: cidrs(&src.ip_blocks, AddrKind::Direct, "ipBlocks", problems),
        not_values: cidrs(
            &src.not_ip_blocks,
            AddrKind::Direct,
            "notIpBlocks",
            problems,
        ),
    };
    let remote = CidrPair {
        values: cidrs(
            &src.remote_ip_blocks,
            AddrKind::Remote,
            "remoteIpBlocks",
            problems,
        ),
        not_values: cidrs(
            &src.not_remote_ip_blocks,
            AddrKind::Remote,
            "notRemoteIpBlocks",
            problems,
        ),
    };
    Some(SourceMatch {
        direct,
        remote,
        principals,
        namespaces,
        request_principals,
    })
}

/// A CIDR list becomes one predicate of the set's index for `kind`; None when the list is empty.
fn cidr_list(
    values: &[String],
    kind: AddrKind,
    path: &str,
    set: &mut PolicySetBuilder,
    problems: &mut Problems<'_>,
) -> Option<u32> {
    if values.is_empty() {
        return None;
    }
    let pred = match set.new_predicate(kind) {
        Ok(p) => p,
        Err(e) => {
            problems.push(path, e.to_string());
            return None;
        }
    };
    for (i, v) in values.iter().enumerate() {
        match parse_cidr(v) {
            Some(net) => set.add_cidr(kind, pred, net),
            None => problems.push(
                format!("{path}[{i}]"),
                format!("{v:?} is not an IP address or CIDR (e.g. 10.0.0.0/8, 2001:db8::/32, 192.0.2.1)"),
            ),
        }
    }
    Some(pred)
}

/// `a.b.c.d/len`, `v6/len`, or a bare address meaning /32 or /128.
pub(crate) fn parse_cidr(text: &str) -> Option<IpNet> {
    let t = text.trim();
    if t.contains('/') {
        t.parse::<IpNet>().ok()
    } else {
        t.parse::<IpAddr>().ok().map(IpNet::from)
    }
}

fn operation(op: &Operation, path: &str, problems: &mut Problems<'_>) -> OperationMatch {
    let all_empty = op.hosts.is_empty()
        && op.not_hosts.is_empty()
        && op.ports.is_empty()
        && op.not_ports.is_empty()
        && op.methods.is_empty()
        && op.not_methods.is_empty()
        && op.paths.is_empty()
        && op.not_paths.is_empty();
    if all_empty {
        problems.push(path, "operation must not be empty");
    }
    let mut check_paths = |values: &[String], field: &str| {
        for (i, v) in values.iter().enumerate() {
            if v.contains('{') || v.contains('}') {
                problems.push(
                    format!("{path}.{field}[{i}]"),
                    "path templates ({*}, {**}) are not supported yet",
                );
            } else if v.contains('?') {
                problems.push(
                    format!("{path}.{field}[{i}]"),
                    "paths are matched without the query; remove '?...'",
                );
            }
        }
    };
    check_paths(&op.paths, "paths");
    check_paths(&op.not_paths, "notPaths");
    OperationMatch {
        hosts: Pair {
            values: op.hosts.iter().map(|h| Pattern::parse_host(h)).collect(),
            not_values: op
                .not_hosts
                .iter()
                .map(|h| Pattern::parse_host(h))
                .collect(),
        },
        ports: Pair {
            values: ports(&op.ports, &format!("{path}.ports"), problems),
            not_values: ports(&op.not_ports, &format!("{path}.notPorts"), problems),
        },
        methods: Pair {
            values: op.methods.iter().map(|m| m.as_str().into()).collect(),
            not_values: op.not_methods.iter().map(|m| m.as_str().into()).collect(),
        },
        paths: Pair {
            values: op.paths.iter().map(|p| Pattern::parse(p)).collect(),
            not_values: op.not_paths.iter().map(|p| Pattern::parse(p)).collect(),
        },
    }
}

fn ports(values: &[String], path: &str, problems: &mut Problems<'_>) -> Vec<u16> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match v.trim().parse::<u16>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                problems.push(
                    format!("{path}[{i}]"),
                    format!("{v:?} is not a port number (1-65535)"),
                );
                None
            }
        })
        .collect()
}

/// Claims whose string values Istio also matches word by word (`spaceDelimitedClaims`'
/// defaults).
const SPACE_DELIMITED_CLAIMS: [&str; 2] = ["scope", "permission"];

/// The claim path of a `request.auth.*` key other than `principal`: `audiences` is `aud`,
/// `presenter` is `azp`, `claims[a][b]` is `a` then `b`. `None` for anything else.
pub(crate) fn auth_claim_path(key: &str) -> Option<Box<[Box<str>]>> {
    let rest = key.strip_prefix("request.auth.")?;
    match rest {
        "audiences" => return Some(Box::new(["aud".into()])),
        "presenter" => return Some(Box::new(["azp".into()])),
        _ => {}
    }
    let mut rest = rest.strip_prefix("claims")?;
    let mut path = Vec::new();
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[')?;
        let end = inner.find(']')?;
        let name = &inner[..end];
        if name.is_empty() {
            return None;
        }
        path.push(name.into());
        rest = &inner[end + 1..];
    }
    (!path.is_empty()).then(|| path.into_boxed_slice())
}

fn condition(
    cond: &Condition,
    path: &str,
    set: &mut PolicySetBuilder,
    problems: &mut Problems<'_>,
) -> Option<ConditionMatch> {
    let key = cond.key.trim();
    if key.is_empty() {
        problems.push(format!("{path}.key"), "key must be set");
        return None;
    }
    if cond.values.is_empty() && cond.not_values.is_empty() {
        problems.push(path, "at least one of values or notValues must be set");
        return None;
    }
    let cidrs = |kind: AddrKind, set: &mut PolicySetBuilder, problems: &mut Problems<'_>| {
        let pair = CidrPair {
            values: cidr_list(&cond.values, kind, &format!("{path}.values"), set, problems),
            not_values: cidr_list(
                &cond.not_values,
                kind,
                &format!("{path}.notValues"),
                set,
                problems,
            ),
        };
        Some(ConditionMatch::Cidr(kind, pair))
    };
    let strings = |vs: &[String]| vs.iter().map(|v| Pattern::parse(v)).collect::<Vec<_>>();
    match key {
        "source.ip" => cidrs(AddrKind::Direct, set, problems),
        "remote.ip" => cidrs(AddrKind::Remote, set, problems),
        "destination.ip" => cidrs(AddrKind::Dest, set, problems),
        "destination.port" => Some(ConditionMatch::Port(Pair {
            values: ports(&cond.values, &format!("{path}.values"), problems),
            not_values: ports(&cond.not_values, &format!("{path}.notValues"), problems),
        })),
        "connection.sni" => Some(ConditionMatch::Sni(Pair {
            values: strings(&cond.values),
            not_values: strings(&cond.not_values),
        })),
        "source.principal" => Some(ConditionMatch::Principal(Pair {
            values: strings(&cond.values),
            not_values: strings(&cond.not_values),
        })),
        "source.namespace" => Some(ConditionMatch::Namespace(Pair {
            values: strings(&cond.values),
            not_values: strings(&cond.not_values),
        })),
        "source.serviceAccount" => {
            problems.push(
                format!("{path}.key"),
                format!("{key} is not supported yet (use source.principal)"),
            );
            None
        }
        "request.auth.principal" => Some(ConditionMatch::RequestPrincipal(Pair {
            values: strings(&cond.values),
            not_values: strings(&cond.not_values),
        })),
        k if k.starts_with("request.auth.") => {
            let Some(path) = auth_claim_path(k) else {
                problems.push(
                    format!("{path}.key"),
                    format!(
                        "unknown key {key:?} (request.auth.principal, request.auth.audiences, \
                         request.auth.presenter, request.auth.claims[NAME] or \
                         request.auth.claims[NAME][NESTED])"
                    ),
                );
                return None;
            };
            let split = path.len() == 1 && SPACE_DELIMITED_CLAIMS.contains(&&*path[0]);
            Some(ConditionMatch::Claim {
                path,
                split,
                pair: Pair {
                    values: strings(&cond.values),
                    not_values: strings(&cond.not_values),
                },
            })
        }
        k if k.starts_with("request.headers[") => {
            let Some(name) = k
                .strip_prefix("request.headers[")
                .and_then(|r| r.strip_suffix(']'))
            else {
                problems.push(
                    format!("{path}.key"),
                    format!("{key:?} must look like request.headers[Name]"),
                );
                return None;
            };
            match http::HeaderName::from_bytes(name.as_bytes()) {
                Ok(h) => Some(ConditionMatch::Header(
                    h,
                    Pair {
                        values: strings(&cond.values),
                        not_values: strings(&cond.not_values),
                    },
                )),
                Err(_) => {
                    problems.push(
                        format!("{path}.key"),
                        format!("{name:?} is not a valid header name"),
                    );
                    None
                }
            }
        }
        other => {
            problems.push(
                format!("{path}.key"),
                format!(
                    "unknown condition key {other:?} (supported: source.ip, remote.ip, destination.ip, \
                     destination.port, connection.sni, source.principal, source.namespace, request.headers[NAME], \
                     request.auth.principal, request.auth.audiences, request.auth.presenter, \
                     request.auth.claims[NAME])"
                ),
            );
            None
        }
    }
}
