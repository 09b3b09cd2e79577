//! Ban states read from Redis, remembered for a short while (`BAN_STATE_CACHE_MS`, 1 s by
//! default) so a client's every decision does not pay a `GET` of its ban key: within that
//! time the state read (or written by this service's offence script) is taken as current.
//! The cost is staleness, bounded by the same time: a ban started or lifted through another
//! service takes effect here at most that much later (bans last minutes; `Retry-After` counts
//! whole seconds). Counting is never cached: every call still goes to Redis.
//!
//! A fixed table of slots chosen by a keyed hash of the ban key (a new key takes the slot
//! over), so memory is bounded whatever the number of clients; a slot holds the key's full
//! 64-bit hash, so a key is never answered with another's state but by a 2^-64 chance.

use crate::ban::schedule::BanState;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

/// Slots: 64 bytes' worth of state each; enough for the clients that are busy at once.
const SLOTS: usize = 8192;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The key's hash; 0 is an empty slot.
    hash: u64,
    state: BanState,
    /// When the state was read (the limiter's clock).
    read_ms: u64,
}

#[derive(Debug)]
pub(super) struct BanStateCache {
    slots: Box<[Mutex<Slot>]>,
    hasher: RandomState,
    fresh_ms: u64,
}

impl BanStateCache {
    /// `None` when `fresh_ms` is 0: every call reads its ban key.
    pub(super) fn new(fresh_ms: u64) -> Option<BanStateCache> {
        (fresh_ms > 0).then(|| BanStateCache {
            slots: (0..SLOTS).map(|_| Mutex::new(Slot::default())).collect(),
            hasher: RandomState::new(),
            fresh_ms,
        })
    }

    fn slot(&self, key: &str) -> (u64, &Mutex<Slot>) {
        let hash = self.hasher.hash_one(key).max(1);
        (hash, &self.slots[(hash as usize) % SLOTS])
    }

    /// The state of `key` read less than the freshness time before `now_ms`.
    pub(super) fn get(&self, key: &str, now_ms: u64) -> Option<BanState> {
        let (hash, slot) = self.slot(key);
        let slot = *slot.lock().unwrap_or_else(|e| e.into_inner());
        fresh(slot.hash == hash, slot.read_ms, now_ms, self.fresh_ms).then_some(slot.state)
    }

    /// Remembers `state` as read (or written) at `now_ms`.
    pub(super) fn put(&self, key: &str, state: BanState, now_ms: u64) {
        let (hash, slot) = self.slot(key);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Slot {
            hash,
            state,
            read_ms: now_ms,
        };
    }

    /// Forgets every state.
    pub(super) fn clear(&self) {
        for slot in self.slots.iter() {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Slot::default();
        }
    }

    /// Forgets `key` (a ban lifted here is lifted for this service's next call at once).
    pub(super) fn forget(&self, key: &str) {
        let (hash, slot) = self.slot(key);
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.hash == hash {
            *slot = Slot::default();
        }
    }
}

/// Whether a slot's state answers for the key at `now_ms`: the same key, read at most
/// `fresh_ms` before (a clock that went back does not make an old read fresh forever).
fn fresh(same_key: bool, read_ms: u64, now_ms: u64, fresh_ms: u64) -> bool {
    same_key && now_ms >= read_ms && now_ms - read_ms < fresh_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_table() {
        let rows = [
            // (same key, read, now, fresh, answers)
            (true, 1_000, 1_000, 1_000, true),
            (true, 1_000, 1_999, 1_000, true),
            (true, 1_000, 2_000, 1_000, false),
            (false, 1_000, 1_000, 1_000, false),
            // the clock went back: read again
            (true, 1_000, 999, 1_000, false),
        ];
        for (same, read, now, fresh_ms, want) in rows {
            assert_eq!(fresh(same, read, now, fresh_ms), want, "{read} {now}");
        }
    }

    #[test]
    fn a_state_answers_for_its_key_until_stale_and_forget_clears_it() {
        let Some(cache) = BanStateCache::new(1_000) else {
            panic!("a cache with a freshness time");
        };
        let banned = BanState {
            until_ms: 90_000,
            strikes: 1,
        };
        cache.put("warden_ban:a", banned, 10_000);
        assert_eq!(cache.get("warden_ban:a", 10_500), Some(banned));
        assert_eq!(cache.get("warden_ban:b", 10_500), None);
        assert_eq!(cache.get("warden_ban:a", 11_000), None);
        cache.put("warden_ban:a", banned, 20_000);
        cache.forget("warden_ban:a");
        assert_eq!(cache.get("warden_ban:a", 20_001), None);
        cache.put("warden_ban:a", banned, 30_000);
        cache.clear();
        assert_eq!(cache.get("warden_ban:a", 30_001), None);
        assert!(BanStateCache::new(0).is_none());
    }

    #[test]
    fn many_keys_stay_within_the_table_and_never_answer_for_each_other() {
        let Some(cache) = BanStateCache::new(60_000) else {
            panic!("a cache with a freshness time");
        };
        for i in 0..50_000u32 {
            let state = BanState {
                until_ms: u64::from(i),
                strikes: i,
            };
            cache.put(&format!("k{i}"), state, 0);
        }
        for i in 0..50_000u32 {
            if let Some(s) = cache.get(&format!("k{i}"), 1) {
                assert_eq!(s.strikes, i);
            }
        }
        assert_eq!(cache.slots.len(), SLOTS);
    }
}
