//! Who is being limited: a Space-Saving sketch (Metwally et al.) of bounded size — the top
//! clients' counts are exact while they stay in it, and a newcomer takes the place of the
//! smallest with that count (its `error`) as its start. Shared by the proxy's limiters
//! (`/ratelimit/top` on its admin port, keyed by client address or JWT principal) and this
//! service ([`LimitedDescriptors`]: per domain, keyed by the over-limit descriptor, on the
//! debug port). Only limited requests are recorded; each takes a short lock.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Clients kept per sketch.
pub const CAPACITY: usize = 128;

#[derive(Debug, Clone)]
struct Slot<K> {
    client: K,
    count: u64,
    /// What the count may overstate by (the count of the client it replaced).
    error: u64,
    rule: Option<Arc<str>>,
    last_seen: SystemTime,
}

/// A bounded Space-Saving summary of clients `K`.
#[derive(Debug)]
pub struct SpaceSaving<K> {
    capacity: usize,
    /// foldhash: the index is looked up on every limited request.
    index: HashMap<K, usize, foldhash::fast::RandomState>,
    slots: Vec<Slot<K>>,
    /// Every offer, kept or not.
    total: u64,
}

/// One client of [`SpaceSaving::top`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hitter {
    pub client: String,
    pub count: u64,
    /// The count may overstate by up to this (0: exact).
    pub error: u64,
    pub last_rule: Option<String>,
    /// RFC 3339.
    pub last_seen: String,
}

impl<K: Clone + Eq + Hash + Display> SpaceSaving<K> {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity: capacity.max(1),
            index: HashMap::default(),
            slots: Vec::new(),
            total: 0,
        }
    }

    /// One limited request of `client` by `rule`, at `now`.
    pub fn offer(&mut self, client: K, rule: Option<&Arc<str>>, now: SystemTime) {
        self.total += 1;
        let at = match self.index.get(&client) {
            Some(&at) => at,
            None if self.slots.len() < self.capacity => {
                self.slots.push(Slot {
                    client: client.clone(),
                    count: 0,
                    error: 0,
                    rule: None,
                    last_seen: now,
                });
                self.index.insert(client, self.slots.len() - 1);
                self.slots.len() - 1
            }
            None => {
                // The smallest count gives its place up; a linear scan of a small table, paid
                // by limited requests of clients not in it.
                let Some((at, _)) = self.slots.iter().enumerate().min_by_key(|(_, s)| s.count)
                else {
                    return;
                };
                let slot = &mut self.slots[at];
                self.index.remove(&slot.client);
                slot.error = slot.count;
                slot.client = client.clone();
                self.index.insert(client, at);
                at
            }
        };
        let slot = &mut self.slots[at];
        slot.count += 1;
        slot.last_seen = now;
        match (rule, &slot.rule) {
            (Some(new), Some(old)) if Arc::ptr_eq(new, old) || new == old => {}
            (rule, _) => slot.rule = rule.cloned(),
        }
    }

    /// The `n` heaviest clients, heaviest first.
    pub fn top(&self, n: usize) -> Vec<Hitter> {
        let mut slots: Vec<&Slot<K>> = self.slots.iter().collect();
        slots.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_seen.cmp(&a.last_seen)));
        slots
            .into_iter()
            .take(n)
            .map(|s| Hitter {
                client: s.client.to_string(),
                count: s.count,
                error: s.error,
                last_rule: s.rule.as_deref().map(str::to_string),
                last_seen: humantime::format_rfc3339_millis(s.last_seen).to_string(),
            })
            .collect()
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// `/ratelimit/top`'s object for this sketch.
    pub fn top_json(&self, n: usize) -> serde_json::Value {
        serde_json::json!({
            "limited_total": self.total(),
            "capacity": self.capacity,
            "clients": self.top(n),
        })
    }
}

/// The service's sketches: per domain, the descriptors answered OVER_LIMIT most (their entries,
/// `key=value,...`), with the limit that answered. Domains are the config's (only a configured
/// limit answers OVER_LIMIT), so the map stays as small as the config.
#[derive(Debug, Default)]
pub struct LimitedDescriptors {
    domains: Mutex<HashMap<String, SpaceSaving<String>>>,
}

impl LimitedDescriptors {
    pub fn record(&self, domain: &str, descriptor: String, rule: &Arc<str>, now: SystemTime) {
        let mut domains = self.domains.lock().unwrap_or_else(|e| e.into_inner());
        let sketch = match domains.get_mut(domain) {
            Some(s) => s,
            None => domains
                .entry(domain.to_string())
                .or_insert_with(|| SpaceSaving::new(CAPACITY)),
        };
        sketch.offer(descriptor, Some(rule), now);
    }

    /// The debug port's `/ratelimit/top`: the `n` heaviest of each domain, in the proxy's
    /// admin page's shape per sketch.
    pub fn top_json(&self, n: usize) -> serde_json::Value {
        let domains = self.domains.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<&String> = domains.keys().collect();
        names.sort();
        let by_domain: serde_json::Map<String, serde_json::Value> = names
            .into_iter()
            .filter_map(|d| Some((d.clone(), domains.get(d)?.top_json(n))))
            .collect();
        serde_json::json!({ "domains": by_domain })
    }
}

/// `n=` of a `/ratelimit/top` query (10 when absent).
pub fn top_n(query: Option<&str>) -> usize {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::time::Duration;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn heavy_clients_survive_a_crowd_of_light_ones() {
        let rule: Arc<str> = Arc::from("per-ip");
        let mut s = SpaceSaving::new(4);
        for round in 0..50u64 {
            // Two attackers every round, a new light client every round.
            s.offer(ip(1), Some(&rule), at(round));
            s.offer(ip(2), Some(&rule), at(round));
            s.offer(ip(2), Some(&rule), at(round));
            s.offer(ip(100 + (round % 100) as u8), None, at(round));
        }
        let top = s.top(2);
        assert_eq!(top[0].client, "127.0.0.2");
        assert_eq!((top[0].count, top[0].error), (100, 0));
        assert_eq!(top[1].client, "127.0.0.1");
        assert_eq!((top[1].count, top[1].error), (50, 0));
        assert_eq!(top[1].last_rule.as_deref(), Some("per-ip"));
        assert_eq!(top[1].last_seen, "1970-01-01T00:00:49.000Z");
        assert_eq!(s.total(), 200);
        assert_eq!(s.index.len(), 4);
    }

    #[test]
    fn a_newcomer_takes_the_smallest_place_with_its_count_as_error() {
        let mut s = SpaceSaving::new(2);
        for _ in 0..3 {
            s.offer(ip(1), None, at(0));
        }
        s.offer(ip(2), None, at(1));
        s.offer(ip(3), None, at(2));
        let top = s.top(5);
        let seen: Vec<_> = top
            .iter()
            .map(|h| (h.client.as_str(), h.count, h.error))
            .collect();
        assert_eq!(seen, [("127.0.0.1", 3, 0), ("127.0.0.3", 2, 1)]);
    }

    #[test]
    fn top_takes_n_from_the_query() {
        for (q, n) in [
            (None, 10),
            (Some("n=3"), 3),
            (Some("x=1&n=25"), 25),
            (Some("n=x"), 10),
        ] {
            assert_eq!(top_n(q), n, "{q:?}");
        }
    }
}
