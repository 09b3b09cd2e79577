//! Escalating bans for the local limiter: a per-client ban table beside the token buckets. A
//! client whose bucket runs dry is refused entirely for the next period of a schedule (2 min,
//! then 5, then 10, capped at the last), and forgotten once it stayed quiet for a while after
//! its last ban. The decisions are [`warden_config::ban`]'s, the global limiter's too, in
//! milliseconds of this crate's clock; see `docs/ratelimit-bans.md`.
//!
//! Bounded like the `Distinct` buckets ([`crate::key_table`]): sharded, a hard cap on entries;
//! a full shard first drops entries whose strikes are forgotten, then the one whose ban ends
//! soonest. Pure: the caller passes the time.

use crate::key_table::KeyRef;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;
use warden_config::ban::{check, offend, BanCheck, BanSchedule, BanState};

const SHARDS: usize = 16;

/// The owned key of an entry: the rule and the client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    Ip([u8; 16]),
    Bytes(Box<[u8]>),
}

impl Client {
    fn of(key: KeyRef<'_>) -> Client {
        match key {
            KeyRef::Ip(b) => Client::Ip(b),
            KeyRef::Bytes(b) => Client::Bytes(b.into()),
        }
    }

    fn display(&self) -> String {
        match self {
            Client::Ip(b) => {
                let v6 = std::net::Ipv6Addr::from(*b);
                match v6.to_ipv4_mapped() {
                    Some(v4) => v4.to_string(),
                    None => v6.to_string(),
                }
            }
            Client::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: BanState,
    /// When the strikes are forgotten (ms): the entry is useless after that.
    expires_ms: u64,
}

/// A ban in force, for an admin listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalBan {
    /// The rule's id (the caller's: e.g. the index of the rule in its group).
    pub rule: u32,
    /// The client: an address, or the distinct value(s) as text.
    pub client: String,
    pub remaining: Duration,
    pub strikes: u32,
}

/// The ban table of one limiter.
#[derive(Debug)]
pub struct BanTable {
    shards: Vec<Mutex<HashMap<(u32, Client), Entry>>>,
    hasher: RandomState,
    cap_per_shard: usize,
}

impl BanTable {
    /// At most `max_entries` clients (and rules) remembered (at least one per shard).
    pub fn new(max_entries: usize) -> BanTable {
        BanTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            cap_per_shard: (max_entries / SHARDS).max(1),
        }
    }

    fn shard(&self, rule: u32, client: &Client) -> &Mutex<HashMap<(u32, Client), Entry>> {
        let index = (self.hasher.hash_one((rule, client)) as usize) % SHARDS;
        &self.shards[index]
    }

    /// What the table says of `key` under `rule` at `now_ms` (before the buckets are asked).
    pub fn check(
        &self,
        rule: u32,
        key: KeyRef<'_>,
        schedule: &BanSchedule,
        now_ms: u64,
    ) -> BanCheck {
        let client = Client::of(key);
        let state = self
            .shard(rule, &client)
            .lock()
            .get(&(rule, client))
            .map(|e| e.state)
            .unwrap_or_default();
        check(state, schedule.forget_after_ms, now_ms)
    }

    /// An offence (the buckets refused `key`): starts the next ban and returns its length in
    /// ms. Of concurrent offences only the first starts one; the others get the remaining time.
    pub fn offend(&self, rule: u32, key: KeyRef<'_>, schedule: &BanSchedule, now_ms: u64) -> u64 {
        let client = Client::of(key);
        let mut map = self.shard(rule, &client).lock();
        let current = map
            .get(&(rule, client.clone()))
            .map(|e| e.state)
            .unwrap_or_default();
        let strikes = match check(current, schedule.forget_after_ms, now_ms) {
            BanCheck::Banned { remaining_ms, .. } => return remaining_ms,
            BanCheck::Open { strikes } => strikes,
        };
        let state = offend(schedule, strikes, now_ms);
        if !map.contains_key(&(rule, client.clone())) && map.len() >= self.cap_per_shard {
            map.retain(|_, e| e.expires_ms > now_ms);
            if map.len() >= self.cap_per_shard {
                if let Some(victim) = map
                    .iter()
                    .min_by_key(|(_, e)| e.state.until_ms)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&victim);
                }
            }
        }
        map.insert(
            (rule, client),
            Entry {
                state,
                expires_ms: state.until_ms.saturating_add(schedule.forget_after_ms),
            },
        );
        state.until_ms - now_ms
    }

    /// Bans in force at `now_ms`.
    pub fn list(&self, now_ms: u64) -> Vec<LocalBan> {
        let mut out = Vec::new();
        for shard in &self.shards {
            for ((rule, client), e) in shard.lock().iter() {
                if e.state.until_ms > now_ms {
                    out.push(LocalBan {
                        rule: *rule,
                        client: client.display(),
                        remaining: Duration::from_millis(e.state.until_ms - now_ms),
                        strikes: e.state.strikes,
                    });
                }
            }
        }
        out.sort_by_key(|b| (b.remaining, b.rule, b.client.clone()));
        out
    }

    /// Lifts (and forgets) the ban of `key` under `rule`; whether there was one.
    pub fn lift(&self, rule: u32, key: KeyRef<'_>) -> bool {
        let client = Client::of(key);
        self.shard(rule, &client)
            .lock()
            .remove(&(rule, client))
            .is_some()
    }

    /// Entries remembered (bans in force and strikes not yet forgotten).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const MIN: u64 = 60_000;

    fn schedule() -> BanSchedule {
        BanSchedule {
            durations_ms: vec![2 * MIN, 5 * MIN, 10 * MIN],
            forget_after_ms: 60 * MIN,
        }
    }

    fn ip(last: u8) -> KeyRef<'static> {
        KeyRef::ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, last)))
    }

    /// The seed 000 pattern on the table alone: offences at the end of each ban escalate
    /// 2 → 5 → 10 → 10 minutes; a quiet hour resets them.
    #[test]
    fn offences_escalate_and_are_forgotten() {
        let table = BanTable::new(1024);
        let s = schedule();
        let mut now = MIN;
        let mut lengths = Vec::new();
        for _ in 0..4 {
            assert!(matches!(
                table.check(7, ip(66), &s, now),
                BanCheck::Open { .. }
            ));
            let length = table.offend(7, ip(66), &s, now);
            lengths.push(length / 1000);
            assert_eq!(
                table.check(7, ip(66), &s, now + 1),
                BanCheck::Banned {
                    remaining_ms: length - 1,
                    strikes: lengths.len() as u32
                }
            );
            now += length;
        }
        assert_eq!(lengths, vec![120, 300, 600, 600]);
        // Other clients and other rules are not banned.
        assert_eq!(
            table.check(7, ip(1), &s, MIN),
            BanCheck::Open { strikes: 0 }
        );
        assert_eq!(
            table.check(8, ip(66), &s, MIN),
            BanCheck::Open { strikes: 0 }
        );
        // An hour after the last ban: forgotten.
        assert_eq!(
            table.check(7, ip(66), &s, now + 60 * MIN),
            BanCheck::Open { strikes: 0 }
        );
        assert_eq!(table.offend(7, ip(66), &s, now + 60 * MIN), 2 * MIN);
    }

    #[test]
    fn a_second_offence_while_banned_starts_nothing() {
        let table = BanTable::new(1024);
        let s = schedule();
        assert_eq!(table.offend(1, ip(9), &s, MIN), 2 * MIN);
        assert_eq!(
            table.offend(1, ip(9), &s, MIN + 20_000),
            100_000,
            "the remaining time, no new strike"
        );
        assert_eq!(table.list(MIN)[0].strikes, 1);
    }

    #[test]
    fn list_and_lift() {
        let table = BanTable::new(1024);
        let s = schedule();
        table.offend(1, ip(2), &s, 0);
        table.offend(1, KeyRef::Bytes(b"user-42"), &s, 0);
        let listed = table.list(MIN);
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().any(|b| b.client == "203.0.113.2"));
        assert!(listed.iter().any(|b| b.client == "user-42"));
        assert!(table.lift(1, ip(2)));
        assert!(!table.lift(1, ip(2)));
        assert_eq!(table.list(MIN).len(), 1);
        assert!(table.list(3 * MIN).is_empty(), "ended");
    }

    #[test]
    fn bounded_dropping_forgotten_then_soonest_ending() {
        let table = BanTable::new(SHARDS * 2);
        let s = schedule();
        for i in 0..200u8 {
            table.offend(1, ip(i), &s, 0);
        }
        assert!(table.len() <= SHARDS * 2, "{}", table.len());
        // Long after: everything forgotten makes room for new offenders.
        let later = 200 * MIN;
        for i in 0..200u8 {
            table.offend(2, ip(i), &s, later);
        }
        assert!(table.len() <= SHARDS * 2);
        assert!(table.list(later).iter().all(|b| b.rule == 2));
    }
}
