//! Bounded per-key bucket state for `Distinct` rules: a sharded hash table with a hard cap on
//! keys and batch eviction of least-recently-used idle keys.
//!
//! Hot path: hash once, take the shard's *read* lock, find the slot, consume from its atomic
//! bucket. Only a first sighting of a key takes the write lock. When a shard is full, one insert
//! pays for a sweep that frees an eighth of the shard: first keys whose bucket has refilled
//! (forgetting them loses nothing), then the least recently used ones. The sweep is O(shard), so
//! the amortized cost per insert stays constant and memory never exceeds the cap.

use parking_lot::RwLock;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use hashbrown::{DefaultHashBuilder, HashTable};

/// Default cap: enough for one million distinct clients.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// Last-use timestamps are kept in ~1 ms ticks (`now_nanos >> 20`) to fit in 32 bits.
const TICK_SHIFT: u32 = 20;

/// The distinct part of a key, borrowed from the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// A client address (IPv4 mapped into 16 bytes so both families share one variant).
    Ip([u8; 16]),
    /// Anything else: a header value or several distinct values joined unambiguously.
    Bytes(&'a [u8]),
}

impl KeyRef<'_> {
    pub fn ip(ip: IpAddr) -> Self {
        KeyRef::Ip(match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        })
    }

    fn to_owned_value(self) -> KeyValue {
        match self {
            KeyRef::Ip(b) => KeyValue::Ip(b),
            KeyRef::Bytes(b) => KeyValue::Bytes(b.into()),
        }
    }
}

#[derive(Debug)]
enum KeyValue {
    Ip([u8; 16]),
    Bytes(Box<[u8]>),
}

impl KeyValue {
    fn as_ref(&self) -> KeyRef<'_> {
        match self {
            KeyValue::Ip(b) => KeyRef::Ip(*b),
            KeyValue::Bytes(b) => KeyRef::Bytes(b),
        }
    }
}

struct Entry {
    /// Which rule's bucket this is; stable across reloads for unchanged rules.
    state_id: u32,
    last_used: AtomicU32,
    value: KeyValue,
    tat: AtomicU64,
}

#[repr(align(64))]
struct Shard {
    table: RwLock<HashTable<Entry>>,
}

/// Counters of the table, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    pub keys: usize,
    pub max_keys: usize,
    /// Keys removed to stay under the cap (includes idle ones).
    pub evictions: u64,
    /// Of those, keys whose bucket had not refilled: their clients got a fresh budget.
    pub evictions_active: u64,
    /// Bytes held by the hash tables (excluding out-of-line `Bytes` keys).
    pub table_bytes: usize,
}

pub struct KeyTable {
    shards: Box<[Shard]>,
    shard_cap: usize,
    max_keys: usize,
    hasher: DefaultHashBuilder,
    evictions: AtomicU64,
    evictions_active: AtomicU64,
}

impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyTable")
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl KeyTable {
    /// A table that never holds more than `max_keys` keys (at least 1).
    pub fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        // A hashbrown table of 2^14 buckets holds 7/8 of that before doubling; capping shards
        // just below it keeps every shard's table densely filled (no half-empty doubling).
        const SHARD_TARGET: usize = 16_384 / 8 * 7;
        let shards = max_keys.div_ceil(SHARD_TARGET).clamp(1, 4096);
        let shard_cap = (max_keys / shards).max(1);
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    table: RwLock::new(HashTable::new()),
                })
                .collect(),
            shard_cap,
            max_keys: shard_cap * shards,
            hasher: DefaultHashBuilder::default(),
            evictions: AtomicU64::new(0),
            evictions_active: AtomicU64::new(0),
        }
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    fn hash(&self, state_id: u32, key: KeyRef<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        state_id.hash(&mut h);
        match key {
            KeyRef::Ip(b) => {
                0u8.hash(&mut h);
                b.hash(&mut h);
            }
            KeyRef::Bytes(b) => {
                1u8.hash(&mut h);
                b.hash(&mut h);
            }
        }
        h.finish()
    }

    fn shard(&self, hash: u64) -> &Shard {
        // Range-reduce bits 16..48: hashbrown uses the low bits (bucket index) and the top 7
        // (tag) within a shard, so the shard choice must not consume either.
        let mid = u64::from((hash >> 16) as u32);
        let idx = ((mid * self.shards.len() as u64) >> 32) as usize;
        &self.shards[idx]
    }

    /// Run `f` on the bucket state of (`state_id`, `key`), creating it full if absent.
    #[inline]
    pub fn with_bucket<R>(
        &self,
        state_id: u32,
        key: KeyRef<'_>,
        now: u64,
        f: impl FnOnce(&AtomicU64) -> R,
    ) -> R {
        let hash = self.hash(state_id, key);
        let shard = self.shard(hash);
        let tick = (now >> TICK_SHIFT) as u32;
        let eq = |e: &Entry| e.state_id == state_id && e.value.as_ref() == key;
        {
            let table = shard.table.read();
            if let Some(entry) = table.find(hash, eq) {
                // Avoid writing the shared line when the tick has not moved.
                if entry.last_used.load(Ordering::Relaxed) != tick {
                    entry.last_used.store(tick, Ordering::Relaxed);
                }
                return f(&entry.tat);
            }
        }
        let mut table = shard.table.write();
        if let Some(entry) = table.find(hash, eq) {
            entry.last_used.store(tick, Ordering::Relaxed);
            return f(&entry.tat);
        }
        if table.len() >= self.shard_cap {
            self.evict(&mut table, now, tick);
        }
        let hasher = |e: &Entry| self.hash(e.state_id, e.value.as_ref());
        let entry = table.insert_unique(
            hash,
            Entry {
                state_id,
                last_used: AtomicU32::new(tick),
                value: key.to_owned_value(),
                tat: AtomicU64::new(0),
            },
            hasher,
        );
        f(&entry.get().tat)
    }

    /// Free at least an eighth of a full shard: idle (refilled) keys first, then the least
    /// recently used. The survivors move to a fresh table: erasing in place would leave
    /// tombstones, and hashbrown answers a tombstone-full table by doubling it.
    fn evict(&self, table: &mut HashTable<Entry>, now: u64, tick: u32) {
        let target = self.shard_cap - (self.shard_cap / 8).max(1);
        // A refilled bucket (tat <= now) is indistinguishable from a new key: free to drop.
        let idle = |e: &Entry| e.tat.load(Ordering::Relaxed) <= now;
        let age = |e: &Entry| tick.wrapping_sub(e.last_used.load(Ordering::Relaxed));
        let mut ages: Vec<u32> = table.iter().filter(|e| !idle(e)).map(age).collect();
        let idle_count = table.len() - ages.len();
        // Drop everything older than `threshold`, and `ties` of the keys exactly that old
        // (keys used within the same ~1 ms tick), so that `target` keys remain.
        let (threshold, mut ties) = if ages.len() > target {
            let excess = ages.len() - target;
            let (_, t, _) = ages.select_nth_unstable_by(excess - 1, |a, b| b.cmp(a));
            let t = *t;
            let older = ages.iter().filter(|a| **a > t).count();
            (t, excess - older)
        } else {
            (u32::MAX, 0)
        };
        let mut fresh = HashTable::with_capacity(self.shard_cap);
        let mut active_removed = 0usize;
        for e in std::mem::take(table) {
            if idle(&e) {
                continue;
            }
            let a = age(&e);
            if a > threshold || (a == threshold && ties > 0) {
                if a == threshold {
                    ties -= 1;
                }
                active_removed += 1;
                continue;
            }
            let h = self.hash(e.state_id, e.value.as_ref());
            fresh.insert_unique(h, e, |x: &Entry| self.hash(x.state_id, x.value.as_ref()));
        }
        *table = fresh;
        self.evictions
            .fetch_add((idle_count + active_removed) as u64, Ordering::Relaxed);
        self.evictions_active
            .fetch_add(active_removed as u64, Ordering::Relaxed);
    }

    /// Drop every key whose rule no longer exists (called on reload, off the hot path).
    pub fn retain_states(&self, live: impl Fn(u32) -> bool) {
        for shard in self.shards.iter() {
            shard.table.write().retain(|e| live(e.state_id));
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.table.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> TableStats {
        let mut keys = 0;
        let mut table_bytes = 0;
        for s in self.shards.iter() {
            let t = s.table.read();
            keys += t.len();
            table_bytes += t.allocation_size();
        }
        TableStats {
            keys,
            max_keys: self.max_keys,
            evictions: self.evictions.load(Ordering::Relaxed),
            evictions_active: self.evictions_active.load(Ordering::Relaxed),
            table_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(i: u32) -> KeyRef<'static> {
        KeyRef::ip(IpAddr::V4(Ipv4Addr::from(i)))
    }

    #[test]
    fn same_key_same_state_distinct_keys_distinct_state() {
        let t = KeyTable::new(100);
        t.with_bucket(1, ip(1), 10, |a| a.store(42, Ordering::Relaxed));
        assert_eq!(
            t.with_bucket(1, ip(1), 10, |a| a.load(Ordering::Relaxed)),
            42
        );
        assert_eq!(
            t.with_bucket(1, ip(2), 10, |a| a.load(Ordering::Relaxed)),
            0
        );
        assert_eq!(
            t.with_bucket(2, ip(1), 10, |a| a.load(Ordering::Relaxed)),
            0
        );
        let b = KeyRef::Bytes(b"abc");
        t.with_bucket(1, b, 10, |a| a.store(7, Ordering::Relaxed));
        assert_eq!(
            t.with_bucket(1, KeyRef::Bytes(b"abc"), 10, |a| a.load(Ordering::Relaxed)),
            7
        );
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn cap_is_never_exceeded_and_idle_keys_go_first() {
        let t = KeyTable::new(64);
        let now = 1u64 << 40;
        // 32 busy keys (bucket in debt), used long ago.
        for i in 0..32 {
            t.with_bucket(0, ip(i), now, |a| a.store(now * 2, Ordering::Relaxed));
        }
        // 32 idle keys used recently.
        let later = now + (1 << 30);
        for i in 100..132 {
            t.with_bucket(0, ip(i), later, |_| ());
        }
        assert_eq!(t.len(), 64);
        t.with_bucket(0, ip(1000), later, |_| ());
        assert!(t.len() <= 64);
        let s = t.stats();
        assert_eq!(s.evictions, 32, "all idle keys are evicted first");
        assert_eq!(s.evictions_active, 0);
        // Busy keys kept their state.
        assert_eq!(
            t.with_bucket(0, ip(5), later, |a| a.load(Ordering::Relaxed)),
            now * 2
        );
    }

    #[test]
    fn lru_evicts_the_oldest_busy_keys() {
        let t = KeyTable::new(16);
        let busy = u64::MAX / 2;
        for i in 0..16u32 {
            let now = (u64::from(i) + 1) << 30;
            t.with_bucket(0, ip(i), now, |a| a.store(busy, Ordering::Relaxed));
        }
        let now = 100u64 << 30;
        t.with_bucket(0, ip(999), now, |a| a.store(busy, Ordering::Relaxed));
        let s = t.stats();
        assert_eq!(s.keys, 15, "an eighth (2) freed, then one inserted");
        assert_eq!(s.evictions, 2);
        assert_eq!(s.evictions_active, 2);
        // The two oldest (0 and 1) are gone and come back fresh; 2 kept its state.
        assert_eq!(
            t.with_bucket(0, ip(2), now, |a| a.load(Ordering::Relaxed)),
            busy
        );
        assert_eq!(
            t.with_bucket(0, ip(0), now, |a| a.load(Ordering::Relaxed)),
            0
        );
    }

    #[test]
    fn a_flood_of_distinct_keys_stays_bounded() {
        let t = KeyTable::new(10_000);
        let now = 1u64 << 40;
        for i in 0..200_000u32 {
            t.with_bucket(0, ip(i), now, |a| a.store(u64::MAX / 2, Ordering::Relaxed));
        }
        let s = t.stats();
        assert!(s.keys <= 10_000, "{s:?}");
        assert!(s.evictions >= 190_000, "{s:?}");
    }

    #[test]
    fn memory_stays_at_the_cap_through_repeated_evictions() {
        // Four shards of exactly 7/8 of 2^14 keys.
        let t = KeyTable::new(57_344);
        let busy = u64::MAX / 2;
        let mut now = 1u64 << 40;
        for i in 0..400_000u32 {
            now += 1 << 12;
            t.with_bucket(0, ip(i), now, |a| a.store(busy, Ordering::Relaxed));
        }
        let s = t.stats();
        assert!(s.keys <= s.max_keys && s.max_keys <= 57_344, "{s:?}");
        // 40-byte entries + 1 control byte, at hashbrown's 7/8 load: < 48 B per key of cap.
        let per_key = s.table_bytes as f64 / s.max_keys as f64;
        assert!(per_key < 48.0, "{per_key:.1} B/key: {s:?}");
    }

    #[test]
    fn retain_states_drops_removed_rules() {
        let t = KeyTable::new(100);
        t.with_bucket(1, ip(1), 0, |_| ());
        t.with_bucket(2, ip(1), 0, |_| ());
        t.retain_states(|id| id == 2);
        assert_eq!(t.len(), 1);
    }
}
