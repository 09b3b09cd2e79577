//! In-process counters: sharded, exact (a mutex per shard), bounded in keys.

use super::memory_bans::MemoryBans;
use super::{BanOutcome, CounterOp, CounterResult, SubjectOf};
use crate::ban::BanCheck;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Slot {
    count: u64,
    expires_millis: u64,
}

/// Sharded counter map. When a shard is full, expired keys are dropped first; if it is still
/// full an arbitrary key is evicted, so a flood of distinct keys cannot exhaust memory.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Vec<Mutex<HashMap<String, Slot>>>,
    hasher: RandomState,
    cap_per_shard: usize,
    bans: MemoryBans,
}

impl MemoryStore {
    /// `max_keys` bounds the number of live counters (at least one per shard).
    pub fn new(max_keys: usize) -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            cap_per_shard: (max_keys / SHARDS).max(1),
            // One ban state per offending client and rule: far fewer than counters.
            bans: MemoryBans::new((max_keys / 8).max(1024)),
        }
    }

    /// The ban states.
    pub fn bans(&self) -> &MemoryBans {
        &self.bans
    }

    /// One op: the ban check first (a banned call is not counted), then the counter, then an
    /// offence when it went over. A ban costs the decision one lookup in [`MemoryBans`].
    fn apply_one(&self, op: &CounterOp, now: u64, subject_of: SubjectOf<'_>) -> CounterResult {
        let Some(ban) = &op.ban else {
            return self.count(op, now);
        };
        let strikes = match self
            .bans
            .check(&ban.key, ban.config.forget_after_ms, ban.now_ms)
        {
            BanCheck::Banned {
                remaining_ms,
                strikes,
            } => {
                return CounterResult {
                    ban: Some(BanOutcome::Refused {
                        remaining_ms,
                        strikes,
                    }),
                    ..CounterResult::default()
                }
            }
            BanCheck::Open { strikes } => strikes,
        };
        let mut result = self.count(op, now);
        if op.hits > 0 && result.after > u64::from(ban.limit) {
            result.ban = Some(self.bans.offend(
                &ban.key,
                &ban.config,
                strikes,
                &subject_of(ban.descriptor),
                ban.now_ms,
            ));
        }
        result
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Slot>> {
        let index = (self.hasher.hash_one(key) as usize) % SHARDS;
        &self.shards[index]
    }

    fn live(slot: Option<&Slot>, now: u64) -> u64 {
        match slot {
            Some(s) if s.expires_millis > now => s.count,
            _ => 0,
        }
    }

    pub fn apply(
        &self,
        ops: &[CounterOp],
        now: u64,
        subject_of: SubjectOf<'_>,
    ) -> Vec<CounterResult> {
        ops.iter()
            .map(|op| self.apply_one(op, now, subject_of))
            .collect()
    }

    fn count(&self, op: &CounterOp, now: u64) -> CounterResult {
        let after = {
            let mut map = self
                .shard(&op.key)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let expires_millis = now + op.ttl_secs * 1000;
            if let Some(slot) = map.get_mut(op.key.as_str()) {
                if slot.expires_millis <= now {
                    slot.count = 0;
                }
                slot.count = slot.count.saturating_add(op.hits);
                slot.expires_millis = expires_millis;
                slot.count
            } else {
                if map.len() >= self.cap_per_shard {
                    map.retain(|_, s| s.expires_millis > now);
                    if map.len() >= self.cap_per_shard {
                        if let Some(victim) = map.keys().next().cloned() {
                            map.remove(&victim);
                        }
                    }
                }
                map.insert(
                    op.key.clone(),
                    Slot {
                        count: op.hits,
                        expires_millis,
                    },
                );
                op.hits
            }
        };
        let prev = op.prev_key.as_deref().map_or(0, |k| {
            let map = self.shard(k).lock().unwrap_or_else(|e| e.into_inner());
            Self::live(map.get(k), now)
        });
        CounterResult {
            after,
            prev,
            ban: None,
        }
    }

    pub fn get(&self, ops: &[CounterOp], now: u64) -> Vec<u64> {
        ops.iter()
            .map(|op| {
                let map = self
                    .shard(&op.key)
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                Self::live(map.get(op.key.as_str()), now)
            })
            .collect()
    }

    /// Number of stored counters (including expired ones not yet dropped).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_subject(_: usize) -> String {
        String::new()
    }

    fn op(key: &str, hits: u64) -> CounterOp {
        CounterOp {
            key: key.into(),
            hits,
            ttl_secs: 60,
            prev_key: None,
            per_second: false,
            ban: None,
        }
    }

    #[test]
    fn counts_and_expires() {
        let store = MemoryStore::new(1000);
        assert_eq!(store.apply(&[op("a", 1)], 0, &no_subject)[0].after, 1);
        assert_eq!(store.apply(&[op("a", 2)], 1000, &no_subject)[0].after, 3);
        assert_eq!(store.get(&[op("a", 0)], 1000), vec![3]);
        // TTL is refreshed on every hit (EXPIRE re-sent), so expiry is 60 s after the last hit.
        assert_eq!(store.apply(&[op("a", 1)], 61_001, &no_subject)[0].after, 1);
    }

    #[test]
    fn bounded_in_keys() {
        let store = MemoryStore::new(SHARDS * 2);
        for i in 0..10_000 {
            store.apply(&[op(&format!("k{i}"), 1)], 0, &no_subject);
        }
        assert!(store.len() <= SHARDS * 2, "len {}", store.len());
    }
}
