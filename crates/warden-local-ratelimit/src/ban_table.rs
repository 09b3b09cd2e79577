//! Escalating bans for the local limiter: a per-client ban table beside the token buckets. A
//! client whose bucket runs dry is refused entirely for the next period of a schedule (2 min,
//! then 5, then 10, capped at the last), and forgotten once it stayed quiet for a while after
//! its last ban. The decisions are those of `warden_ratelimit::ban::schedule` (the global
//! limiter's), in this crate's clock (monotonic nanoseconds); see `docs/ratelimit-bans.md`.
//!
//! Bounded like the `Distinct` buckets ([`crate::key_table`]): sharded, a hard cap on entries;
//! a full shard first drops entries whose strikes are forgotten, then the one whose ban ends
//! soonest. Pure: the caller passes the time.

use crate::key_table::KeyRef;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

const SHARDS: usize = 16;

/// A ban schedule, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanSchedule {
    /// Ban length of the 1st, 2nd, ... offence; later offences get the last one. Not empty.
    pub durations: Vec<Duration>,
    /// Strikes are forgotten once a client stayed this long past its last ban's end.
    pub forget_after: Duration,
}

impl BanSchedule {
    /// `None` when `durations` is empty or a duration is zero (a ban must ban).
    pub fn new(durations: Vec<Duration>, forget_after: Duration) -> Option<BanSchedule> {
        (!durations.is_empty() && durations.iter().all(|d| !d.is_zero())).then_some(BanSchedule {
            durations,
            forget_after,
        })
    }

    /// The ban length of offence number `strike` (1-based).
    pub fn duration_of(&self, strike: u32) -> Duration {
        let index = (strike.max(1) as usize - 1).min(self.durations.len().saturating_sub(1));
        self.durations.get(index).copied().unwrap_or_default()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One client's state for one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BanState {
    /// End of the current or last ban (clock nanoseconds; 0: never banned).
    pub until: u64,
    pub strikes: u32,
}

/// What the table says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanVerdict {
    /// Refused for this much longer.
    Banned { remaining: Duration, strikes: u32 },
    /// Decided by the buckets; an offence now would be strike `strikes + 1`.
    Open { strikes: u32 },
}

/// The verdict for `state` at `now`.
pub fn verdict(state: BanState, forget_after: Duration, now: u64) -> BanVerdict {
    if state.until > now {
        return BanVerdict::Banned {
            remaining: Duration::from_nanos(state.until - now),
            strikes: state.strikes,
        };
    }
    let forgotten = state.until > 0 && now - state.until >= nanos(forget_after);
    BanVerdict::Open {
        strikes: if forgotten { 0 } else { state.strikes },
    }
}

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
    /// When the strikes are forgotten: the entry is useless after that.
    expires: u64,
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

    /// The verdict for `key` under `rule` at `now` (before the buckets are asked).
    pub fn check(
        &self,
        rule: u32,
        key: KeyRef<'_>,
        schedule: &BanSchedule,
        now: u64,
    ) -> BanVerdict {
        let client = Client::of(key);
        let state = self
            .shard(rule, &client)
            .lock()
            .get(&(rule, client))
            .map(|e| e.state)
            .unwrap_or_default();
        verdict(state, schedule.forget_after, now)
    }

    /// An offence (the buckets refused `key`): starts the next ban and returns its length. Of
    /// concurrent offences only the first starts one; the others get the remaining time.
    pub fn offend(&self, rule: u32, key: KeyRef<'_>, schedule: &BanSchedule, now: u64) -> Duration {
        let client = Client::of(key);
        let mut map = self.shard(rule, &client).lock();
        let current = map
            .get(&(rule, client.clone()))
            .map(|e| e.state)
            .unwrap_or_default();
        let strikes = match verdict(current, schedule.forget_after, now) {
            BanVerdict::Banned { remaining, .. } => return remaining,
            BanVerdict::Open { strikes } => strikes.saturating_add(1),
        };
        let length = schedule.duration_of(strikes);
        let until = now.saturating_add(nanos(length));
        if !map.contains_key(&(rule, client.clone())) && map.len() >= self.cap_per_shard {
            map.retain(|_, e| e.expires > now);
            if map.len() >= self.cap_per_shard {
                if let Some(victim) = map
                    .iter()
                    .min_by_key(|(_, e)| e.state.until)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&victim);
                }
            }
        }
        map.insert(
            (rule, client),
            Entry {
                state: BanState { until, strikes },
                expires: until.saturating_add(nanos(schedule.forget_after)),
            },
        );
        length
    }

    /// Bans in force at `now`.
    pub fn list(&self, now: u64) -> Vec<LocalBan> {
        let mut out = Vec::new();
        for shard in &self.shards {
            for ((rule, client), e) in shard.lock().iter() {
                if e.state.until > now {
                    out.push(LocalBan {
                        rule: *rule,
                        client: client.display(),
                        remaining: Duration::from_nanos(e.state.until - now),
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

    const MIN: u64 = 60_000_000_000;

    fn schedule() -> BanSchedule {
        BanSchedule::new(
            vec![
                Duration::from_secs(120),
                Duration::from_secs(300),
                Duration::from_secs(600),
            ],
            Duration::from_secs(3600),
        )
        .expect("schedule")
    }

    fn ip(last: u8) -> KeyRef<'static> {
        KeyRef::ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, last)))
    }

    #[test]
    fn schedules_must_ban() {
        assert!(BanSchedule::new(vec![], Duration::from_secs(1)).is_none());
        assert!(BanSchedule::new(vec![Duration::ZERO], Duration::from_secs(1)).is_none());
        let s = schedule();
        let rows = [(1, 120), (2, 300), (3, 600), (4, 600), (0, 120)];
        for (strike, secs) in rows {
            assert_eq!(s.duration_of(strike), Duration::from_secs(secs), "{strike}");
        }
    }

    #[test]
    fn verdict_table() {
        let t = 10 * MIN;
        let forget = Duration::from_secs(3600);
        let rows = [
            (BanState::default(), t, BanVerdict::Open { strikes: 0 }),
            (
                BanState {
                    until: t + MIN,
                    strikes: 1,
                },
                t,
                BanVerdict::Banned {
                    remaining: Duration::from_secs(60),
                    strikes: 1,
                },
            ),
            (
                BanState {
                    until: t,
                    strikes: 2,
                },
                t,
                BanVerdict::Open { strikes: 2 },
            ),
            (
                BanState {
                    until: t,
                    strikes: 2,
                },
                t + 60 * MIN - 1,
                BanVerdict::Open { strikes: 2 },
            ),
            (
                BanState {
                    until: t,
                    strikes: 3,
                },
                t + 60 * MIN,
                BanVerdict::Open { strikes: 0 },
            ),
        ];
        for (state, now, want) in rows {
            assert_eq!(verdict(state, forget, now), want, "{state:?} at {now}");
        }
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
                BanVerdict::Open { .. }
            ));
            let length = table.offend(7, ip(66), &s, now);
            lengths.push(length.as_secs());
            assert_eq!(
                table.check(7, ip(66), &s, now + 1),
                BanVerdict::Banned {
                    remaining: length - Duration::from_nanos(1),
                    strikes: lengths.len() as u32
                }
            );
            now += nanos(length);
        }
        assert_eq!(lengths, vec![120, 300, 600, 600]);
        // Other clients and other rules are not banned.
        assert_eq!(
            table.check(7, ip(1), &s, MIN),
            BanVerdict::Open { strikes: 0 }
        );
        assert_eq!(
            table.check(8, ip(66), &s, MIN),
            BanVerdict::Open { strikes: 0 }
        );
        // An hour after the last ban: forgotten.
        assert_eq!(
            table.check(7, ip(66), &s, now + 60 * MIN),
            BanVerdict::Open { strikes: 0 }
        );
        assert_eq!(
            table.offend(7, ip(66), &s, now + 60 * MIN),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn a_second_offence_while_banned_starts_nothing() {
        let table = BanTable::new(1024);
        let s = schedule();
        assert_eq!(table.offend(1, ip(9), &s, MIN), Duration::from_secs(120));
        assert_eq!(
            table.offend(1, ip(9), &s, MIN + 20_000_000_000),
            Duration::from_secs(100),
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
