//! Who is being limited: per limiter (the local rate limit, the global one), the clients it
//! answered 429 most often, in a Space-Saving sketch (Metwally et al.) of bounded size — the
//! top clients' counts are exact while they stay in it, and a newcomer takes the place of the
//! smallest with that count (its `error`) as its start. Keyed by the JWT principal when the
//! request had one, else the trusted client address. Only limited requests are recorded; each
//! takes a short lock of its limiter's sketch. `/ratelimit/top` reads them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Clients kept per limiter.
pub const CAPACITY: usize = 128;

/// Who a limited request came from.
#[derive(Debug, Clone)]
pub enum Client {
    Ip(IpAddr),
    /// A verified JWT's `iss/sub` (shared with the request, no copy).
    Principal(Arc<warden_jwt::Verified>),
}

impl Client {
    fn text(&self) -> String {
        match self {
            Client::Ip(ip) => ip.to_string(),
            Client::Principal(v) => v.principal.clone(),
        }
    }
}

impl PartialEq for Client {
    fn eq(&self, other: &Client) -> bool {
        match (self, other) {
            (Client::Ip(a), Client::Ip(b)) => a == b,
            (Client::Principal(a), Client::Principal(b)) => a.principal == b.principal,
            _ => false,
        }
    }
}

impl Eq for Client {}

impl std::hash::Hash for Client {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Client::Ip(ip) => ip.hash(state),
            Client::Principal(v) => v.principal.hash(state),
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    client: Client,
    count: u64,
    /// What the count may overstate by (the count of the client it replaced).
    error: u64,
    rule: Option<Arc<str>>,
    last_seen: SystemTime,
}

/// A bounded Space-Saving summary.
#[derive(Debug)]
pub struct SpaceSaving {
    capacity: usize,
    /// foldhash: the index is looked up on every limited request.
    index: HashMap<Client, usize, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
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

impl SpaceSaving {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity: capacity.max(1),
            index: HashMap::default(),
            slots: Vec::new(),
            total: 0,
        }
    }

    /// One limited request of `client` by `rule`, at `now`.
    pub fn offer(&mut self, client: Client, rule: Option<&Arc<str>>, now: SystemTime) {
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
            (Some(new), Some(old)) if Arc::ptr_eq(new, old) => {}
            (rule, _) => slot.rule = rule.cloned(),
        }
    }

    /// The `n` heaviest clients, heaviest first.
    pub fn top(&self, n: usize) -> Vec<Hitter> {
        let mut slots: Vec<&Slot> = self.slots.iter().collect();
        slots.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_seen.cmp(&a.last_seen)));
        slots
            .into_iter()
            .take(n)
            .map(|s| Hitter {
                client: s.client.text(),
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
}

/// Which limiter answered 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    Local,
    Global,
}

/// The sketches of every limiter, kept across reloads.
#[derive(Debug)]
pub struct LimitedClients {
    local: Mutex<SpaceSaving>,
    global: Mutex<SpaceSaving>,
}

impl Default for LimitedClients {
    fn default() -> Self {
        LimitedClients {
            local: Mutex::new(SpaceSaving::new(CAPACITY)),
            global: Mutex::new(SpaceSaving::new(CAPACITY)),
        }
    }
}

impl LimitedClients {
    fn sketch(&self, limiter: Limiter) -> &Mutex<SpaceSaving> {
        match limiter {
            Limiter::Local => &self.local,
            Limiter::Global => &self.global,
        }
    }

    pub fn record(
        &self,
        limiter: Limiter,
        client: Client,
        rule: Option<&Arc<str>>,
        now: SystemTime,
    ) {
        let mut sketch = self
            .sketch(limiter)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sketch.offer(client, rule, now);
    }

    /// `/ratelimit/top`: the `n` heaviest clients of each limiter.
    pub fn top_json(&self, n: usize) -> serde_json::Value {
        let one = |limiter| {
            let sketch = self
                .sketch(limiter)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            serde_json::json!({
                "limited_total": sketch.total(),
                "capacity": CAPACITY,
                "clients": sketch.top(n),
            })
        };
        serde_json::json!({
            "local": one(Limiter::Local),
            "global": one(Limiter::Global),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(n: u8) -> Client {
        Client::Ip(IpAddr::from([127, 0, 0, n]))
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
}
