//! The memory store's bans: one state per ban key (a client of one rule), bounded. When full,
//! states whose strikes are already forgotten go first, then the state that ends soonest
//! (a flood of distinct clients cannot grow it without bound; an active ban is dropped only
//! when every entry is an active ban).

use crate::ban::record::{self, BanRecord};
use crate::ban::schedule::{self, BanCheck, BanState};
use crate::config::BanConfig;
use crate::store::BanOutcome;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone)]
struct Entry {
    state: BanState,
    /// When the strikes are forgotten (the entry is useless after that).
    expires_ms: u64,
    subject_json: String,
}

#[derive(Debug)]
pub struct MemoryBans {
    map: Mutex<HashMap<String, Entry>>,
    cap: usize,
}

impl MemoryBans {
    pub fn new(cap: usize) -> Self {
        MemoryBans {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The check for `key` at `now`.
    pub fn check(&self, key: &str, forget_after_ms: u64, now_ms: u64) -> BanCheck {
        let state = self.lock().get(key).map(|e| e.state).unwrap_or_default();
        schedule::check(state, forget_after_ms, now_ms)
    }

    /// Records an offence by a client that had `strikes` when checked. Under the lock the
    /// state is checked again: of concurrent offences only the first starts a ban.
    pub fn offend(
        &self,
        key: &str,
        config: &BanConfig,
        strikes: u32,
        subject_json: &str,
        now_ms: u64,
    ) -> BanOutcome {
        let mut map = self.lock();
        let current = map.get(key).map(|e| e.state).unwrap_or_default();
        if let BanCheck::Banned {
            remaining_ms,
            strikes,
        } = schedule::check(current, config.forget_after_ms, now_ms)
        {
            return BanOutcome::Refused {
                remaining_ms,
                strikes,
            };
        }
        let state = schedule::offend(config, strikes, now_ms);
        if !map.contains_key(key) && map.len() >= self.cap {
            map.retain(|_, e| e.expires_ms > now_ms);
            if map.len() >= self.cap {
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
            key.to_owned(),
            Entry {
                state,
                expires_ms: now_ms.saturating_add(schedule::keep_ms(config, state, now_ms)),
                subject_json: subject_json.to_owned(),
            },
        );
        BanOutcome::Started {
            duration_ms: state.until_ms - now_ms,
            strikes: state.strikes,
        }
    }

    /// Bans in force at `now`.
    pub fn list(&self, now_ms: u64) -> Vec<BanRecord> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.state.until_ms > now_ms)
            .filter_map(|(k, e)| {
                BanRecord::parse(k.clone(), &record::encode(e.state, &e.subject_json))
            })
            .collect()
    }

    /// Lifts (and forgets) the ban of `key`; whether there was one.
    pub fn lift(&self, key: &str) -> bool {
        self.lock().remove(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn config() -> BanConfig {
        BanConfig {
            durations_ms: vec![2 * MIN, 5 * MIN],
            forget_after_ms: 60 * MIN,
        }
    }

    #[test]
    fn offend_check_list_lift() {
        let bans = MemoryBans::new(10);
        assert_eq!(bans.check("a", 60 * MIN, 0), BanCheck::Open { strikes: 0 });
        bans.offend(
            "a",
            &config(),
            0,
            r#"{"domain":"d","entries":[],"rule":"d.k"}"#,
            0,
        );
        assert_eq!(
            bans.check("a", 60 * MIN, MIN),
            BanCheck::Banned {
                remaining_ms: MIN,
                strikes: 1
            }
        );
        assert_eq!(bans.list(MIN).len(), 1);
        assert!(bans.list(2 * MIN).is_empty(), "ended");
        assert!(bans.lift("a"));
        assert_eq!(
            bans.check("a", 60 * MIN, MIN),
            BanCheck::Open { strikes: 0 }
        );
    }

    #[test]
    fn bounded_keeping_active_bans_over_forgotten_ones() {
        let bans = MemoryBans::new(4);
        for i in 0..4 {
            bans.offend(&format!("old{i}"), &config(), 0, "{}", 0);
        }
        // Long after: the old entries are forgotten and make room.
        let later = 3 * 60 * MIN;
        for i in 0..4 {
            bans.offend(&format!("new{i}"), &config(), 0, "{}", later);
        }
        assert_eq!(bans.len(), 4);
        assert_eq!(bans.list(later).len(), 4);
        // Full of active bans: the one ending soonest goes.
        bans.offend("new0", &config(), 1, "{}", later + 1);
        bans.offend("flood", &config(), 0, "{}", later + 2);
        assert_eq!(bans.len(), 4);
    }
}
