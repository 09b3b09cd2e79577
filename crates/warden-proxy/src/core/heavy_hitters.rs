//! Who is being limited: per limiter (the local rate limit, the global one), the clients it
//! answered 429 most often, in the Space-Saving sketch warden-ratelimit's debug port uses too
//! ([`warden_ratelimit::heavy_hitters`]). Keyed by the JWT principal when the request had one,
//! else the trusted client address. Only limited requests are recorded; each takes a short
//! lock of its limiter's sketch. `/ratelimit/top` reads them.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
pub use warden_ratelimit::heavy_hitters::{Hitter, SpaceSaving, CAPACITY};

/// Who a limited request came from.
#[derive(Debug, Clone)]
pub enum Client {
    Ip(IpAddr),
    /// A verified JWT's `iss/sub` (shared with the request, no copy).
    Principal(Arc<warden_jwt::Verified>),
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Ip(ip) => ip.fmt(f),
            Client::Principal(v) => f.write_str(&v.principal),
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

/// Which limiter answered 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    Local,
    Global,
}

/// The sketches of every limiter, kept across reloads.
#[derive(Debug)]
pub struct LimitedClients {
    local: Mutex<SpaceSaving<Client>>,
    global: Mutex<SpaceSaving<Client>>,
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
    fn sketch(&self, limiter: Limiter) -> &Mutex<SpaceSaving<Client>> {
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
            sketch.top_json(n)
        };
        serde_json::json!({
            "local": one(Limiter::Local),
            "global": one(Limiter::Global),
        })
    }
}
