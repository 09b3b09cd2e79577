//! All rules of one action (DENY, ALLOW, AUDIT, or a dry-run set) with their CIDR indexes.
//!
//! A request does one index lookup per address kind, then evaluates only the *candidate*
//! rules: those anchored on a CIDR predicate the lookup hit, plus the few rules that cannot be
//! anchored (a rule is anchored when each of its sources requires `ipBlocks` or
//! `remoteIpBlocks`, or it has a `source.ip`/`remote.ip` condition). So 100k IPs in one rule and 100k one-IP rules cost the same as one IP.

use crate::attrs::Request;
use crate::cidr_index::{CidrIndex, CidrIndexBuilder, Hits, MAX_PREDICATES};
use crate::rule::{AddrHits, AddrKind, ConditionMatch, Rule, ADDR_KINDS};
use ipnet::IpNet;

const NO_RULE: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(crate) struct PolicySet {
    /// In Envoy's evaluation order: by rule name.
    rules: Vec<Rule>,
    /// Per rule: uses an HTTP-only field (dropped from ALLOW sets on TCP).
    uses_http: Vec<bool>,
    indexes: [CidrIndex; ADDR_KINDS],
    /// Per predicate of the Direct and Remote indexes: the rule it anchors, or `NO_RULE`.
    anchors: [Vec<u32>; 2],
    /// Rules that must always be evaluated, in order.
    unanchored: Vec<u32>,
    /// Number of policies in the set (a policy may have no rules).
    pub(crate) policies: usize,
}

impl PolicySet {
    pub(crate) fn rule_count(&self) -> usize {
        self.rules.len()
    }

    pub(crate) fn index_bytes(&self) -> usize {
        self.indexes
            .iter()
            .map(CidrIndex::heap_bytes)
            .sum::<usize>()
            + self.anchors.iter().map(|a| a.capacity() * 4).sum::<usize>()
    }

    /// The first rule (in name order) matching the request. With `skip_http_rules`, rules
    /// using HTTP-only fields are treated as absent (ALLOW on TCP).
    pub(crate) fn first_match(&self, req: &Request<'_>, skip_http_rules: bool) -> Option<&Rule> {
        if self.rules.is_empty() {
            return None;
        }
        let lookup = |kind: AddrKind, addr| {
            let index = &self.indexes[kind as usize];
            if index.is_empty() {
                Hits::NONE
            } else {
                index.lookup(addr)
            }
        };
        let hits: AddrHits<'_> = [
            lookup(AddrKind::Direct, req.direct_peer),
            lookup(AddrKind::Remote, req.client_ip),
            lookup(AddrKind::Dest, req.dest_ip),
        ];
        let eligible = |r: u32| !(skip_http_rules && self.uses_http[r as usize]);
        let mut best: Option<u32> = None;
        for (kind, anchors) in self.anchors.iter().enumerate() {
            for pred in hits[kind].iter() {
                let r = anchors.get(pred as usize).copied().unwrap_or(NO_RULE);
                if r != NO_RULE
                    && best.is_none_or(|b| r < b)
                    && eligible(r)
                    && self.rules[r as usize].matches(req, &hits)
                {
                    best = Some(r);
                }
            }
        }
        for &r in &self.unanchored {
            if best.is_some_and(|b| r >= b) {
                break;
            }
            if eligible(r) && self.rules[r as usize].matches(req, &hits) {
                best = Some(r);
                break;
            }
        }
        best.map(|r| &self.rules[r as usize])
    }
}

/// Too many CIDR lists in one policy set for the index's id space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {MAX_PREDICATES} CIDR lists in one policy set")]
pub(crate) struct TooManyPredicates;

#[derive(Debug, Default)]
pub(crate) struct PolicySetBuilder {
    rules: Vec<Rule>,
    indexes: [CidrIndexBuilder; ADDR_KINDS],
    next_pred: [u32; ADDR_KINDS],
    anchors: [Vec<u32>; 2],
    unanchored: Vec<u32>,
    pub(crate) policies: usize,
}

impl PolicySetBuilder {
    /// A fresh CIDR predicate id for one list of `kind`.
    pub(crate) fn new_predicate(&mut self, kind: AddrKind) -> Result<u32, TooManyPredicates> {
        let k = kind as usize;
        let id = self.next_pred[k];
        if id >= MAX_PREDICATES {
            return Err(TooManyPredicates);
        }
        self.next_pred[k] = id + 1;
        if let Some(anchors) = self.anchors.get_mut(k) {
            anchors.push(NO_RULE);
        }
        Ok(id)
    }

    pub(crate) fn add_cidr(&mut self, kind: AddrKind, pred: u32, net: IpNet) {
        self.indexes[kind as usize].insert(net, pred);
    }

    /// Add a rule. It is anchored on its sources' positive CIDR predicates when every source
    /// has one, else on a positive `source.ip`/`remote.ip` condition (conditions are ANDed);
    /// otherwise it is always evaluated.
    pub(crate) fn add_rule(&mut self, rule: Rule) {
        let id = self.rules.len() as u32;
        let from_anchors: Option<Vec<(AddrKind, u32)>> = if rule.from.is_empty() {
            None
        } else {
            rule.from
                .iter()
                .map(|s| match (s.direct.values, s.remote.values) {
                    (Some(p), _) => Some((AddrKind::Direct, p)),
                    (None, Some(p)) => Some((AddrKind::Remote, p)),
                    (None, None) => None,
                })
                .collect()
        };
        let anchors = from_anchors.or_else(|| {
            rule.when.iter().find_map(|c| match c {
                ConditionMatch::Cidr(kind @ (AddrKind::Direct | AddrKind::Remote), pair) => {
                    pair.values.map(|p| vec![(*kind, p)])
                }
                _ => None,
            })
        });
        match anchors {
            Some(list) => {
                for (kind, pred) in list {
                    if let Some(slot) = self
                        .anchors
                        .get_mut(kind as usize)
                        .and_then(|a| a.get_mut(pred as usize))
                    {
                        *slot = id;
                    }
                }
            }
            None => self.unanchored.push(id),
        }
        self.rules.push(rule);
    }

    pub(crate) fn build(self) -> PolicySet {
        let PolicySetBuilder {
            rules,
            indexes,
            anchors,
            unanchored,
            policies,
            ..
        } = self;
        // Envoy evaluates policies in name order; renumber the rules accordingly.
        let mut order: Vec<u32> = (0..rules.len() as u32).collect();
        order.sort_by(|&a, &b| rules[a as usize].name.cmp(&rules[b as usize].name));
        let mut new_id = vec![0u32; rules.len()];
        for (new, &old) in order.iter().enumerate() {
            new_id[old as usize] = new as u32;
        }
        let mut slots: Vec<Option<Rule>> = rules.into_iter().map(Some).collect();
        let rules: Vec<Rule> = order
            .iter()
            .filter_map(|&old| slots[old as usize].take())
            .collect();
        let anchors = anchors.map(|list| {
            list.into_iter()
                .map(|r| {
                    if r == NO_RULE {
                        NO_RULE
                    } else {
                        new_id[r as usize]
                    }
                })
                .collect()
        });
        let mut unanchored: Vec<u32> = unanchored.into_iter().map(|r| new_id[r as usize]).collect();
        unanchored.sort_unstable();
        let uses_http = rules.iter().map(Rule::uses_http).collect();
        PolicySet {
            rules,
            uses_http,
            indexes: indexes.map(CidrIndexBuilder::build),
            anchors,
            unanchored,
            policies,
        }
    }
}
