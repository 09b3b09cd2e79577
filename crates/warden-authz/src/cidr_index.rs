//! CIDR lists compiled into one lookup structure per address family.
//!
//! Every CIDR list of a policy set (an `ipBlocks` field, a `when` condition's `values`...) is a
//! *predicate* with a numeric id. All predicates of one attribute (direct peer, client address,
//! destination) go into one [`CidrIndex`]: the address space is cut into disjoint ranges, each
//! carrying the sorted set of predicate ids whose CIDRs cover it (nested prefixes are merged at
//! build time). A lookup is one binary search over the range starts, narrowed first by a 16-bit
//! radix bucket, so its cost does not depend on how many CIDRs or rules there are.

use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;

/// Range values: `0` is the empty set, `SINGLE | id` one predicate id (the common case, stored
/// inline), anything else an index into the interned multi-id sets.
const SINGLE: u32 = 1 << 31;

/// Largest predicate id an index can hold.
pub(crate) const MAX_PREDICATES: u32 = SINGLE - 1;

/// The predicate ids whose CIDRs contain a looked-up address, sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hits<'a> {
    None,
    One(u32),
    Many(&'a [u32]),
}

impl Hits<'_> {
    pub(crate) fn contains(&self, pred: u32) -> bool {
        match self {
            Hits::None => false,
            Hits::One(p) => *p == pred,
            Hits::Many(ps) => ps.binary_search(&pred).is_ok(),
        }
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        match self {
            Hits::None => &[],
            Hits::One(p) => std::slice::from_ref(p),
            Hits::Many(ps) => ps,
        }
    }
}

/// An unsigned integer view of one address family.
pub(crate) trait Bits: Copy + Ord + Eq + std::hash::Hash + std::fmt::Debug {
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

/// Disjoint ranges of one family: `starts[i]..starts[i+1]` carries `values[i]`.
#[derive(Debug, Default)]
struct RangeTable<A> {
    starts: Vec<A>,
    values: Vec<u32>,
    /// Radix narrowing of the binary search, built only for large tables.
    buckets: Option<Buckets<A>>,
}

#[derive(Debug)]
struct Buckets<A> {
    /// All starts except `starts[0]` share their first `skip` bits.
    prefix: A,
    skip: u32,
    /// `first[k]` = first index `i >= 1` whose start has bucket key `>= k`.
    first: Box<[u32]>,
}

/// Tables smaller than this are searched directly.
const BUCKET_THRESHOLD: usize = 256;
const BUCKET_COUNT: usize = 1 << 16;

impl<A: Bits> RangeTable<A> {
    fn lookup(&self, addr: A) -> u32 {
        let (lo, hi) = match &self.buckets {
            None => (0, self.starts.len()),
            Some(b) => {
                let diff = addr.leading_zeros_xor(b.prefix);
                if diff < b.skip {
                    // Outside the shared prefix: before the first start or after the last one.
                    if addr < b.prefix {
                        return self.values.first().copied().unwrap_or(0);
                    }
                    return self.values.last().copied().unwrap_or(0);
                }
                let key = addr.bucket_key(b.skip);
                let lo = b.first[key] as usize;
                let hi = b
                    .first
                    .get(key + 1)
                    .map_or(self.starts.len(), |&i| i as usize);
                // The range covering the bucket's first addresses starts just before it.
                (lo - 1, hi)
            }
        };
        let Some(window) = self.starts.get(lo..hi) else {
            return 0;
        };
        let n = window.partition_point(|&s| s <= addr);
        // starts[0] is the zero address, so n >= 1 whenever the window begins at 0; inside a
        // bucket the window's first start is <= addr by construction.
        match n.checked_sub(1) {
            Some(i) => self.values.get(lo + i).copied().unwrap_or(0),
            None => 0,
        }
    }

    fn build_buckets(&mut self) {
        if self.starts.len() < BUCKET_THRESHOLD {
            return;
        }
        let (Some(&first), Some(&last)) = (self.starts.get(1), self.starts.last()) else {
            return;
        };
        let skip = first.leading_zeros_xor(last).min(A::BITS);
        let mut table = vec![0u32; BUCKET_COUNT];
        let mut i = 1usize;
        for (key, slot) in table.iter_mut().enumerate() {
            while i < self.starts.len() && self.starts[i].bucket_key(skip) < key {
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

    fn heap_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<A>()
            + self.values.capacity() * 4
            + self.buckets.as_ref().map_or(0, |b| b.first.len() * 4)
    }
}

/// The compiled CIDR predicates of one attribute.
#[derive(Debug, Default)]
pub(crate) struct CidrIndex {
    v4: RangeTable<u32>,
    v6: RangeTable<u128>,
    /// Multi-id sets, flattened: set `k` is `members[offsets[k]..offsets[k+1]]`. Set 0 is empty.
    offsets: Vec<u32>,
    members: Vec<u32>,
}

impl CidrIndex {
    pub(crate) fn is_empty(&self) -> bool {
        self.v4.starts.len() <= 1
            && self.v6.starts.len() <= 1
            && self.v4.values.iter().all(|&v| v == 0)
            && self.v6.values.iter().all(|&v| v == 0)
    }

    /// All predicates whose CIDRs contain `addr`. IPv4-mapped IPv6 addresses are looked up as IPv4.
    pub(crate) fn lookup(&self, addr: IpAddr) -> Hits<'_> {
        let value = match canonical(addr) {
            IpAddr::V4(a) => self.v4.lookup(u32::from(a)),
            IpAddr::V6(a) => self.v6.lookup(u128::from(a)),
        };
        self.decode(value)
    }

    fn decode(&self, value: u32) -> Hits<'_> {
        if value == 0 {
            Hits::None
        } else if value & SINGLE != 0 {
            Hits::One(value & !SINGLE)
        } else {
            let k = value as usize;
            match (self.offsets.get(k), self.offsets.get(k + 1)) {
                (Some(&a), Some(&b)) => {
                    Hits::Many(self.members.get(a as usize..b as usize).unwrap_or(&[]))
                }
                _ => Hits::None,
            }
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.v4.heap_bytes() + self.v6.heap_bytes() + (self.offsets.len() + self.members.len()) * 4
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

/// Collects `(cidr, predicate)` pairs, then builds the disjoint-range tables.
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
        let mut interner = SetInterner::default();
        let v4 = build_table(self.v4, &mut interner);
        let v6 = build_table(self.v6, &mut interner);
        CidrIndex {
            v4,
            v6,
            offsets: interner.offsets,
            members: interner.members,
        }
    }
}

/// Interns the multi-id sets so identical sets share storage.
struct SetInterner {
    ids: HashMap<Vec<u32>, u32>,
    offsets: Vec<u32>,
    members: Vec<u32>,
}

impl Default for SetInterner {
    fn default() -> Self {
        SetInterner {
            ids: HashMap::new(),
            // Set 0 is the empty set: offsets [0, 0].
            offsets: vec![0, 0],
            members: Vec::new(),
        }
    }
}

impl SetInterner {
    /// The range value for a sorted, deduplicated id set.
    fn value_of(&mut self, set: &[u32]) -> u32 {
        match set {
            [] => 0,
            [one] => SINGLE | one,
            many => {
                if let Some(&id) = self.ids.get(many) {
                    return id;
                }
                let id = (self.offsets.len() - 1) as u32;
                self.members.extend_from_slice(many);
                self.offsets.push(self.members.len() as u32);
                self.ids.insert(many.to_vec(), id);
                id
            }
        }
    }
}

/// Sweep state: the prefixes open at the cursor (a cover chain, innermost last) and the ranges
/// emitted so far. Prefixes are either nested or disjoint, so a stack is enough.
struct Sweep<'i, A> {
    table: RangeTable<A>,
    /// `(last address, predicate)` of each open prefix.
    open: Vec<(A, u32)>,
    /// Next address not yet assigned to a range; None once the whole space is covered.
    cursor: Option<A>,
    scratch: Vec<u32>,
    interner: &'i mut SetInterner,
}

impl<A: Bits> Sweep<'_, A> {
    /// Start a range at `from` carrying the open predicates (merged into the previous range
    /// when the set is the same).
    fn emit(&mut self, from: A) {
        self.scratch.clear();
        self.scratch.extend(self.open.iter().map(|&(_, p)| p));
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let value = self.interner.value_of(&self.scratch);
        if self.table.values.last() != Some(&value) {
            self.table.starts.push(from);
            self.table.values.push(value);
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

    fn open(&mut self, e: Entry<A>) {
        self.close_before(Some(e.start));
        if let Some(c) = self.cursor {
            if c < e.start {
                self.emit(c);
                self.cursor = Some(e.start);
            }
        }
        self.open.push((A::last_of(e.start, e.len), e.pred));
    }

    fn finish(mut self) -> RangeTable<A> {
        self.close_before(None);
        if let Some(c) = self.cursor {
            self.emit(c);
        }
        let mut table = self.table;
        table.starts.shrink_to_fit();
        table.values.shrink_to_fit();
        table.build_buckets();
        table
    }
}

/// Sort the prefixes by (start, length) and sweep them in address order.
fn build_table<A: Bits>(mut entries: Vec<Entry<A>>, interner: &mut SetInterner) -> RangeTable<A> {
    entries.sort_unstable_by_key(|e| (e.start, e.len));
    let mut sweep = Sweep {
        table: RangeTable {
            starts: Vec::with_capacity(entries.len() * 2 + 1),
            values: Vec::with_capacity(entries.len() * 2 + 1),
            buckets: None,
        },
        open: Vec::new(),
        cursor: Some(A::ZERO),
        scratch: Vec::new(),
        interner,
    };
    for e in entries {
        sweep.open(e);
    }
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

    fn hits(idx: &CidrIndex, addr: &str) -> Vec<u32> {
        idx.lookup(addr.parse().unwrap()).as_slice().to_vec()
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
            assert_eq!(idx.lookup(addr).as_slice(), &expected[..], "{addr}");
        }
    }
}
