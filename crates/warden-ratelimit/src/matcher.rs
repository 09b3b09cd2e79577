//! The compiled config: a descriptor tree per domain and the reference's `GetLimit` walk
//! (exact `key_value`, then the first matching wildcard in config order, then the default `key`;
//! no backtracking; a limit applies only at the request's depth).

use crate::config::{Algorithm, ConfigSet, DescriptorConfig, RlsConfig, Unit};
use crate::stats::{LimitStats, Stats};
use crate::wildcard::Wildcard;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

/// One descriptor level on the path to a limit: what the cache and stats keys need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// The configured value (`None` for a default key), possibly a wildcard pattern.
    pub config_value: Option<String>,
    pub wildcard: bool,
    pub share_threshold: bool,
    pub value_to_metric: bool,
}

/// A configured (or request-override) limit.
#[derive(Debug)]
pub struct Limit {
    /// `domain.k_v.k2`: the composite key shown by `/rlconfig` and used in stats.
    pub full_key: String,
    pub requests_per_unit: u32,
    /// `None` when unlimited.
    pub unit: Option<Unit>,
    /// `unit_multiplier` (1 when absent): the window is `unit × unit_multiplier`.
    pub unit_multiplier: u32,
    pub unlimited: bool,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub algorithm: Option<Algorithm>,
    pub metadata: Option<serde_json::Value>,
    /// warden extension: escalating bans for clients over this limit.
    pub ban: Option<Arc<crate::config::BanConfig>>,
    pub levels: Vec<Level>,
    pub stats: Arc<LimitStats>,
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<String, Node>,
    /// In config order; the first match wins.
    wildcards: Vec<(Wildcard, Node)>,
    limit: Option<Arc<Limit>>,
}

/// An immutable compiled config; swapped whole on reload.
#[derive(Debug, Default)]
pub struct Snapshot {
    domains: HashMap<String, Node>,
    config: ConfigSet,
}

impl Snapshot {
    /// Compiles a validated config set. Stats counters are resolved here, once.
    pub fn compile(config: ConfigSet, stats: &Stats) -> Snapshot {
        let mut domains = HashMap::new();
        for (name, rls) in &config.domains {
            domains.insert(name.clone(), compile_domain(rls, stats));
        }
        Snapshot { domains, config }
    }

    pub fn config(&self) -> &ConfigSet {
        &self.config
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The reference's `GetLimit` for one descriptor's entries (override handled by the caller).
    /// The limit's path is unique, so `Limit::levels` tells which config node matched each entry.
    pub fn get_limit(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Arc<Limit>> {
        self.get_limit_of(domain, entries.iter().copied())
    }

    /// [`Snapshot::get_limit`] over borrowed entries, without collecting them first.
    pub fn get_limit_of<'a>(
        &self,
        domain: &str,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Arc<Limit>> {
        let mut node = self.domains.get(domain)?;
        let mut result = None;
        let mut lookup = String::new();
        let last = entries.len().checked_sub(1)?;
        for (i, (key, value)) in entries.enumerate() {
            lookup.clear();
            lookup.push_str(key);
            lookup.push('_');
            lookup.push_str(value);
            let next = node
                .children
                .get(lookup.as_str())
                .or_else(|| {
                    node.wildcards
                        .iter()
                        .find(|(w, _)| w.matches(&lookup))
                        .map(|(_, n)| n)
                })
                .or_else(|| node.children.get(key));
            let Some(next) = next else { break };
            if i == last {
                result = next.limit.clone();
            }
            if next.children.is_empty() && next.wildcards.is_empty() {
                break;
            }
            node = next;
        }
        result
    }

    /// `/rlconfig`: one line per limit, as the reference prints it.
    pub fn dump(&self) -> String {
        let mut lines = Vec::new();
        for node in self.domains.values() {
            collect_lines(node, &mut lines);
        }
        lines.sort();
        let mut out = String::new();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}

fn collect_lines(node: &Node, lines: &mut Vec<String>) {
    let children = node
        .children
        .values()
        .chain(node.wildcards.iter().map(|(_, n)| n));
    for child in children {
        if let Some(limit) = &child.limit {
            let unit = limit.unit.map(Unit::upper).unwrap_or("UNKNOWN");
            lines.push(format!(
                "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                limit.full_key, unit, limit.requests_per_unit, limit.shadow_mode, limit.quota_mode
            ));
        }
        collect_lines(child, lines);
    }
}

fn compile_domain(rls: &RlsConfig, stats: &Stats) -> Node {
    let mut root = Node::default();
    add_children(
        &mut root,
        &rls.domain,
        &rls.domain,
        &[],
        &rls.descriptors,
        stats,
    );
    root
}

fn add_children(
    node: &mut Node,
    domain: &str,
    parent_key: &str,
    parent_levels: &[Level],
    descriptors: &[DescriptorConfig],
    stats: &Stats,
) {
    for d in descriptors {
        let composite = match &d.value {
            Some(v) => format!("{}_{}", d.key, v),
            None => d.key.clone(),
        };
        let full_key = format!("{parent_key}.{composite}");
        let wildcard = d.value.as_deref().is_some_and(|v| v.contains('*'));
        let mut levels = parent_levels.to_vec();
        levels.push(Level {
            config_value: d.value.clone(),
            wildcard,
            share_threshold: d.share_threshold,
            value_to_metric: d.value_to_metric,
        });
        let mut child = Node::default();
        if let Some(rl) = &d.rate_limit {
            child.limit = Some(Arc::new(Limit {
                stats: stats.limit_stats(domain, &full_key),
                full_key: full_key.clone(),
                requests_per_unit: rl.requests_per_unit,
                unit: rl.unit,
                unit_multiplier: rl.unit_multiplier.unwrap_or(1).max(1),
                unlimited: rl.unlimited,
                name: rl.name.clone(),
                replaces: rl.replaces.clone(),
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                detailed_metric: d.detailed_metric,
                value_to_metric: d.value_to_metric,
                algorithm: rl.algorithm,
                metadata: d.metadata.clone(),
                ban: d.ban.clone().map(Arc::new),
                levels: levels.clone(),
            }));
        }
        add_children(
            &mut child,
            domain,
            &full_key,
            &levels,
            &d.descriptors,
            stats,
        );
        if wildcard {
            node.wildcards.push((Wildcard::new(composite), child));
        } else {
            node.children.insert(composite, child);
        }
    }
}
