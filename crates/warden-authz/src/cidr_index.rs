//! CIDR lists compiled into one lookup structure per address family.
//!
//! Every CIDR list of a policy set (an `ipBlocks` field, a `when` condition's `values`...) is a
//! *predicate* with a numeric id. All predicates of one attribute (direct peer, client address,
//! destination) go into one [`CidrIndex`]:
//! - each distinct prefix becomes a *node* holding the predicate ids that list it and a link to
//!   the node of its enclosing prefix (a predicate already on an enclosing node is not repeated);
//! - the address space is cut into disjoint ranges, each pointing at the innermost node that
//!   covers it.
//!
//! A lookup is one binary search over the range starts, narrowed first by a 16-bit radix bucket;
//! the hits are the predicates on the node chain (as deep as prefixes nest, usually 1). So its
//! cost does not depend on how many CIDRs or rules there are, and memory stays linear even when
//! many lists share a prefix.

use ipnet::IpNet;
use std::net::IpAddr;

/// Range value of addresses no prefix covers; also "no parent".
const NO_NODE: u32 = u32::MAX;
/// A range value with this bit set is a single predicate id with no enclosing prefix, stored
/// inline (the common case), so the lookup touches no node storage.
const INLINE: u32 = 1 << 31;

/// Largest predicate id an index can hold.
pub(crate) const MAX_PREDICATES: u32 = INLINE - 2;

/// The predicates whose CIDRs contain a looked-up address: a chain of prefix nodes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hits<'a> {
    nodes: Option<&'a Nodes>,
    value: u32,
}

impl<'a> Hits<'a> {
    pub(crate) const NONE: Hits<'static> = Hits {
        nodes: None,
        value: NO_NODE,
    };

    pub(crate) fn contains(&self, pred: u32) -> bool {
        let mut v = self.value;
        loop {
            if v == NO_NODE {
                return false;
            }
            if v & INLINE != 0 {
                return v & !INLINE == pred;
            }
            let Some((preds, parent)) = self.nodes.and_then(|n| n.get(v)) else {
                return false;
            };
            if preds.binary_search(&pred).is_ok() {
                return true;
            }
            v = parent;
        }
    }

    /// Every predicate hit (sorted within a node; nodes innermost first).
    pub(crate) fn iter(&self) -> HitIter<'a> {
        HitIter {
            nodes: self.nodes,
            next: self.value,
            current: [].iter(),
        }
    }
}

pub(crate) struct HitIter<'a> {
    nodes: Option<&'a Nodes>,
    next: u32,
    current: std::slice::Iter<'a, u32>,
}

impl Iterator for HitIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            if let Some(&p) = self.current.next() {
                return Some(p);
            }
            let v = std::mem::replace(&mut self.next, NO_NODE);
            if v == NO_NODE {
                return None;
            }
            if v & INLINE != 0 {
                return Some(v & !INLINE);
            }
            let (preds, parent) = self.nodes?.get(v)?;
            self.current = preds.iter();
            self.next = parent;
        }
    }
}

/// Prefix nodes, flattened: node `k` lists `members[offsets[k]..offsets[k+1]]`.
#[derive(Debug)]
struct Nodes {
    offsets: Vec<u32>,
    members: Vec<u32>,
    parents: Vec<u32>,
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes {
            offsets: vec![0],
            members: Vec::new(),
            parents: Vec::new(),
        }
    }
}

impl Nodes {
    fn get(&self, node: u32) -> Option<(&[u32], u32)> {
        let k = node as usize;
        let parent = *self.parents.get(k)?;
        let (a, b) = (*self.offsets.get(k)?, *self.offsets.get(k + 1)?);
        Some((self.members.get(a as usize..b as usize)?, parent))
    }

    fn has_in_chain(&self, value: u32, pred: u32) -> bool {
        Hits {
            nodes: Some(self),
            value,
        }
        .contains(pred)
    }

    /// The range value for a prefix listed by `preds` inside the prefix `parent`.
    fn push(&mut self, preds: &[u32], parent: u32) -> u32 {
        if let ([one], NO_NODE) = (preds, parent) {
            return INLINE | one;
        }
        let id = self.parents.len() as u32;
        self.members.extend_from_slice(preds);
        self.offsets.push(self.members.len() as u32);
        self.parents.push(parent);
        id
    }

    fn heap_bytes(&self) -> usize {
        (self.offsets.capacity() + self.members.capacity() + self.parents.capacity()) * 4
    }
}

/// An unsigned integer view of one address family.
pub(crate) trait Bits: Copy + Ord + Eq + std::fmt::Debug {
    const BITS: u32;
    const ZERO: Self;
    /// The last address of the prefix `start/len`.
    fn last_of(start: Self, len: u8) -> Self;
    fn checked_inc(self) -> Option<Self>;
    fn leading_zeros_xor(self, other: Self) -> u32;
    /// The 16 bits that follow the first `skip` bits.
    fn bucket_key(self, skip: u32) -> usize;
}

impl Bits for u32 {
    const BITS: u32 = 32;
    const ZERO: Self = 0;
    fn last_of(start: Self, len: u8) -> Self {
        start | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0)
    }
    fn checked_inc(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn leading_zeros_xor(self, other: Self) -> u32 {
        (self ^ other).leading_zeros()
    }
    fn bucket_key(self, skip: u32) -> usize {
        (self.checked_shl(skip).unwrap_or(0) >> 16) as usize
    }
}

impl Bits for u128 {
    const BITS: u32 = 128;
    const ZERO: Self = 0;
    fn last_of(start: Self, len: u8) -> Self {
        start | u128::MAX.checked_shr(u32::from(len)).unwrap_or(0)
    }
    fn checked_inc(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn leading_zeros_xor(self, other: Self) -> u32 {
        (self ^ other).leading_zeros()
    }
    fn bucket_key(self, skip: u32) -> usize {
        (self.checked_shl(skip).unwrap_or(0) >> 112) as usize
    }
}

/// Disjoint ranges of one family: `(start, value)`, sorted; a range ends where the next begins.
/// Start and value sit side by side so a lookup's last probe also fetches the value.
#[derive(Debug, Default)]
struct RangeTable<A> {
    ranges: Vec<(A, u32)>,
    /// Radix narrowing of the binary search, built only for large tables.
    buckets: Option<Buckets<A>>,
}

#[derive(Debug)]
struct Buckets<A> {
    /// All range starts but the first (the zero address) share their first `skip` bits.
    prefix: A,
    skip: u32,
    /// `first[k]` = first range index `i >= 1` whose start has bucket key `>= k`.
    first: Box<[u32]>,
}

/// Tables smaller than this are searched directly.
const BUCKET_THRESHOLD: usize = 256;
const BUCKET_COUNT: usize = 1 << 16;

impl<A: Bits> RangeTable<A> {
    fn lookup(&self, addr: A) -> u32 {
        let (lo, hi) = match &self.buckets {
            None => (0, self.ranges.len()),
            Some(b) => {
                if addr.leading_zeros_xor(b.prefix) < b.skip {
                    // Outside the shared prefix: before the first start or after the last one.
                    let r = if addr < b.prefix {
                        self.ranges.first()
                    } else {
                        self.ranges.last()
                    };
                    return r.map_or(NO_NODE, |&(_, v)| v);
                }
                let key = addr.bucket_key(b.skip);
                let lo = b.first.get(key).map_or(1, |&i| i as usize);
                let hi = b
                    .first
                    .get(key + 1)
                    .map_or(self.ranges.len(), |&i| i as usize);
                // The range covering the bucket's first addresses starts just before it.
                (lo.saturating_sub(1), hi)
            }
        };
        let Some(window) = self.ranges.get(lo..hi) else {
            return NO_NODE;
        };
        // The window's first start is <= addr (the first range starts at the zero address).
        let n = window.partition_point(|&(s, _)| s <= addr);
        n.checked_sub(1)
            .and_then(|i| window.get(i))
            .map_or(NO_NODE, |&(_, v)| v)
    }

    fn build_buckets(&mut self) {
        if self.ranges.len() < BUCKET_THRESHOLD {
            return;
        }
        let (Some(&(first, _)), Some(&(last, _))) = (self.ranges.get(1), self.ranges.last()) else {
            return;
        };
        let skip = first.leading_zeros_xor(last).min(A::BITS);
        let mut table = vec![0u32; BUCKET_COUNT];
        let mut i = 1usize;
        for (key, slot) in table.iter_mut().enumerate() {
            while i < self.ranges.len() && self.ranges[i].0.bucket_key(skip) < key {
                i += 1;
            }
            *slot = i as u32;
        }
        self.buckets = Some(Buckets {
            prefix: first,
            skip,
            first: table.into_boxed_slice(),
        });
    }

    fn is_empty(&self) -> bool {
        self.ranges.iter().all(|&(_, v)| v == NO_NODE)
    }

    fn heap_bytes(&self) -> usize {
        self.ranges.capacity() * std::mem::size_of::<(A, u32)>()
            + self.buckets.as_ref().map_or(0, |b| b.first.len() * 4)
    }
}

/// The compiled CIDR predicates of one attribute.
#[derive(Debug, Default)]
pub(crate) struct CidrIndex {
    v4: RangeTable<u32>,
    v6: RangeTable<u128>,
    nodes: Nodes,
    empty: bool,
}

impl CidrIndex {
    pub(crate) fn is_empty(&self) -> bool {
        self.empty
    }

    /// All predicates whose CIDRs contain `addr`. IPv4-mapped IPv6 addresses are looked up as IPv4.
    pub(crate) fn lookup(&self, addr: IpAddr) -> Hits<'_> {
        let node = match canonical(addr) {
            IpAddr::V4(a) => self.v4.lookup(u32::from(a)),
            IpAddr::V6(a) => self.v6.lookup(u128::from(a)),
        };
        Hits {
            nodes: Some(&self.nodes),
            value: node,
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.v4.heap_bytes() + self.v6.heap_bytes() + self.nodes.heap_bytes()
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) becomes IPv4, so such peers match IPv4 blocks.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => addr,
        },
        v4 => v4,
    }
}

/// A parsed CIDR normalised like [`canonical`]: host bits cleared, `::ffff:0:0/96`-contained
/// IPv6 prefixes turned into IPv4 ones.
pub fn canonical_net(net: IpNet) -> IpNet {
    let net = net.trunc();
    if let IpNet::V6(v6) = net {
        if v6.prefix_len() >= 96 {
            if let Some(v4) = v6.network().to_ipv4_mapped() {
                if let Ok(n) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                    return IpNet::V4(n);
                }
            }
        }
    }
    net
}

/// Collects `(cidr, predicate)` pairs, then builds the tables.
#[derive(Debug, Default)]
pub(crate) struct CidrIndexBuilder {
    v4: Vec<Entry<u32>>,
    v6: Vec<Entry<u128>>,
}

#[derive(Debug, Clone, Copy)]
struct Entry<A> {
    start: A,
    len: u8,
    pred: u32,
}

impl CidrIndexBuilder {
    pub(crate) fn insert(&mut self, net: IpNet, pred: u32) {
        match canonical_net(net) {
            IpNet::V4(n) => self.v4.push(Entry {
                start: u32::from(n.network()),
                len: n.prefix_len(),
                pred,
            }),
            IpNet::V6(n) => self.v6.push(Entry {
                start: u128::from(n.network()),
                len: n.prefix_len(),
                pred,
            }),
        }
    }

    pub(crate) fn build(self) -> CidrIndex {
        let mut nodes = Nodes::default();
        let v4 = build_table(self.v4, &mut nodes);
        let v6 = build_table(self.v6, &mut nodes);
        nodes.offsets.shrink_to_fit();
        nodes.members.shrink_to_fit();
        nodes.parents.shrink_to_fit();
        let empty = v4.is_empty() && v6.is_empty();
        CidrIndex {
            v4,
            v6,
            nodes,
            empty,
        }
    }
}

/// Sweep state: the prefix nodes open at the cursor (a cover chain, innermost last) and the
/// ranges emitted so far. Prefixes are either nested or disjoint, so a stack is enough.
struct Sweep<'n, A> {
    table: RangeTable<A>,
    /// `(last address, node)` of each open prefix.
    open: Vec<(A, u32)>,
    /// Next address not yet assigned to a range; None once the whole space is covered.
    cursor: Option<A>,
    nodes: &'n mut Nodes,
}

impl<A: Bits> Sweep<'_, A> {
    fn top(&self) -> u32 {
        self.open.last().map_or(NO_NODE, |&(_, n)| n)
    }

    /// Start a range at `from` covered by the innermost open node (merged into the previous
    /// range when that is the same node).
    fn emit(&mut self, from: A) {
        let value = self.top();
        if self.table.ranges.last().map(|&(_, v)| v) != Some(value) {
            self.table.ranges.push((from, value));
        }
    }

    /// Close every open prefix that ends before `until` (all of them when `until` is None).
    fn close_before(&mut self, until: Option<A>) {
        while let Some(&(last, _)) = self.open.last() {
            if until.is_some_and(|u| last >= u) {
                break;
            }
            if let Some(c) = self.cursor {
                if c <= last {
                    self.emit(c);
                    self.cursor = last.checked_inc();
                }
            }
            self.open.pop();
        }
    }

    /// Open the prefix `start/len` listed by `preds` (sorted, deduplicated).
    fn open(&mut self, start: A, len: u8, preds: &mut Vec<u32>) {
        self.close_before(Some(start));
        if let Some(c) = self.cursor {
            if c < start {
                self.emit(c);
                self.cursor = Some(start);
            }
        }
        let parent = self.top();
        preds.retain(|&p| !self.nodes.has_in_chain(parent, p));
        if preds.is_empty() {
            // Every list naming this prefix already covers it through an enclosing prefix.
            return;
        }
        let node = self.nodes.push(preds, parent);
        self.open.push((A::last_of(start, len), node));
    }

    fn finish(mut self) -> RangeTable<A> {
        self.close_before(None);
        if let Some(c) = self.cursor {
            self.emit(c);
        }
        let mut table = self.table;
        table.ranges.shrink_to_fit();
        table.build_buckets();
        table
    }
}

/// Sort the prefixes by (start, length, predicate) and sweep them in address order.
fn build_table<A: Bits>(mut entries: Vec<Entry<A>>, nodes: &mut Nodes) -> RangeTable<A> {
    entries.sort_unstable_by_key(|e| (e.start, e.len, e.pred));
    let mut sweep = Sweep {
        table: RangeTable {
            ranges: Vec::with_capacity(entries.len() * 2 + 1),
            buckets: None,
        },
        open: Vec::new(),
        cursor: Some(A::ZERO),
        nodes,
    };
    let mut preds = Vec::new();
    let mut rest = &entries[..];
    while let Some(first) = rest.first() {
        let same = rest
            .iter()
            .take_while(|e| e.start == first.start && e.len == first.len)
            .count();
        preds.clear();
        preds.extend(rest[..same].iter().map(|e| e.pred));
        preds.dedup();
        sweep.open(first.start, first.len, &mut preds);
        rest = &rest[same..];
    }
    drop(entries);
    // The first range always starts at the zero address (emitted by `open` or `finish`).
    sweep.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(items: &[(&str, u32)]) -> CidrIndex {
        let mut b = CidrIndexBuilder::default();
        for (net, pred) in items {
            let net: IpNet = net
                .parse()
                .unwrap_or_else(|_| IpNet::from(net.parse::<IpAddr>().unwrap()));
            b.insert(net, *pred);
        }
        b.build()
    }

    fn sorted(hits: Hits<'_>) -> Vec<u32> {
        let mut v: Vec<u32> = hits.iter().collect();
        v.sort_unstable();
        v
    }

    fn hits(idx: &CidrIndex, addr: &str) -> Vec<u32> {
        sorted(idx.lookup(addr.parse().unwrap()))
    }

    #[test]
    fn nested_and_disjoint_prefixes_return_every_covering_predicate() {
        let idx = index(&[
            ("10.0.0.0/8", 1),
            ("10.1.0.0/16", 2),
            ("10.1.2.3", 3),
            ("192.168.0.0/24", 4),
            ("10.1.0.0/16", 5),
            ("10.0.0.0/8", 1),
        ]);
        assert_eq!(hits(&idx, "10.1.2.3"), vec![1, 2, 3, 5]);
        assert_eq!(hits(&idx, "10.1.2.4"), vec![1, 2, 5]);
        assert_eq!(hits(&idx, "10.2.0.0"), vec![1]);
        assert_eq!(hits(&idx, "10.255.255.255"), vec![1]);
        assert_eq!(hits(&idx, "11.0.0.0"), Vec::<u32>::new());
        assert_eq!(hits(&idx, "9.255.255.255"), Vec::<u32>::new());
        assert_eq!(hits(&idx, "192.168.0.255"), vec![4]);
        assert_eq!(hits(&idx, "192.168.1.0"), Vec::<u32>::new());
        assert_eq!(hits(&idx, "::1"), Vec::<u32>::new());
    }

    #[test]
    fn edges_of_the_address_space() {
        let idx = index(&[("0.0.0.0/0", 7), ("255.255.255.255", 8), ("::/0", 9)]);
        assert_eq!(hits(&idx, "0.0.0.0"), vec![7]);
        assert_eq!(hits(&idx, "255.255.255.254"), vec![7]);
        assert_eq!(hits(&idx, "255.255.255.255"), vec![7, 8]);
        assert_eq!(hits(&idx, "ffff::1"), vec![9]);
        let idx = index(&[("0.0.0.0/32", 1)]);
        assert_eq!(hits(&idx, "0.0.0.0"), vec![1]);
        assert_eq!(hits(&idx, "0.0.0.1"), Vec::<u32>::new());
    }

    #[test]
    fn ipv4_mapped_ipv6_matches_ipv4_blocks_both_ways() {
        let idx = index(&[
            ("1.2.3.0/24", 1),
            ("::ffff:5.6.7.0/120", 2),
            ("2001:db8::/32", 3),
        ]);
        assert_eq!(hits(&idx, "::ffff:1.2.3.4"), vec![1]);
        assert_eq!(hits(&idx, "5.6.7.8"), vec![2]);
        assert_eq!(hits(&idx, "2001:db8::1"), vec![3]);
        assert_eq!(hits(&idx, "2001:db9::1"), Vec::<u32>::new());
    }

    #[test]
    fn host_bits_are_cleared() {
        let idx = index(&[("10.0.0.1/24", 1)]);
        assert_eq!(hits(&idx, "10.0.0.200"), vec![1]);
    }

    /// Large tables use the radix buckets; compare with a linear scan on pseudo-random data.
    #[test]
    fn bucketed_lookup_agrees_with_a_linear_scan() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut nets = Vec::new();
        for i in 0..5000u32 {
            let r = next();
            let net = if i % 3 == 0 {
                let len = 96 + (r % 33) as u8;
                let addr = 0x2001_0db8u128 << 96 | u128::from(r) << 16;
                IpNet::V6(ipnet::Ipv6Net::new((addr).into(), len).unwrap())
            } else {
                let len = 8 + (r >> 40) as u8 % 25;
                IpNet::V4(ipnet::Ipv4Net::new((r as u32).into(), len).unwrap())
            };
            nets.push((net.trunc(), i));
        }
        let mut b = CidrIndexBuilder::default();
        for (n, p) in &nets {
            b.insert(*n, *p);
        }
        let idx = b.build();
        assert!(idx.v4.buckets.is_some() && idx.v6.buckets.is_some());
        assert!(!idx.is_empty());
        for k in 0..4000 {
            let (probe_net, _) = nets[k % nets.len()];
            let r = next();
            let addr: IpAddr = match probe_net {
                IpNet::V4(n) => {
                    let a = u32::from(n.network()) | (r as u32 & !u32::from(n.netmask()));
                    let a = if k % 2 == 0 { a } else { r as u32 };
                    IpAddr::V4(a.into())
                }
                IpNet::V6(n) => {
                    let a = u128::from(n.network()) | (u128::from(r) & !u128::from(n.netmask()));
                    let a = if k % 2 == 0 { a } else { u128::from(r) << 64 };
                    IpAddr::V6(a.into())
                }
            };
            let mut expected: Vec<u32> = nets
                .iter()
                .filter(|(n, _)| n.contains(&addr))
                .map(|&(_, p)| p)
                .collect();
            expected.sort_unstable();
            assert_eq!(sorted(idx.lookup(addr)), expected, "{addr}");
        }
    }

    /// Many lists naming the same prefix (plus their own addresses inside it) must not make
    /// every range carry every list: memory stays linear and lookups stay exact.
    #[test]
    fn shared_prefixes_are_stored_once() {
        let mut b = CidrIndexBuilder::default();
        let n = 20_000u32;
        for p in 0..n {
            b.insert("10.0.0.0/8".parse().unwrap(), p);
            b.insert(IpNet::from(IpAddr::V4((0x0a00_0000 + p * 7).into())), p);
            b.insert("10.0.0.0/8".parse().unwrap(), p);
        }
        let idx = b.build();
        assert!(idx.heap_bytes() < 2_000_000, "{} bytes", idx.heap_bytes());
        let all: Vec<u32> = (0..n).collect();
        assert_eq!(sorted(idx.lookup("10.0.0.1".parse().unwrap())), all);
        assert_eq!(sorted(idx.lookup("10.0.0.7".parse().unwrap())), all);
        assert!(idx.lookup("10.0.0.7".parse().unwrap()).contains(1));
        assert!(idx
            .lookup("11.0.0.7".parse().unwrap())
            .iter()
            .next()
            .is_none());
    }
}
