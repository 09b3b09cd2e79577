//! Verified tokens, so a client reusing its token pays the signature once (Envoy's per-provider
//! `jwt_cache`). Keyed by the token; bounded (each shard holds at most its share, making room by
//! dropping expired entries, then any); an entry is never returned past its `exp`, skew
//! included: the caller re-checks time and audience on a hit, as Envoy does.

use crate::identity::Verified;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

const SHARDS: usize = 16;

type Shard = Mutex<HashMap<Box<str>, Arc<Verified>>>;

#[derive(Debug)]
pub struct TokenCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: RandomState,
}

impl TokenCache {
    /// A cache of about `capacity` tokens (0: nothing is kept).
    pub fn new(capacity: usize) -> TokenCache {
        TokenCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, token: &str) -> &Shard {
        let i = (self.hasher.hash_one(token) as usize) % SHARDS;
        &self.shards[i]
    }

    /// The verified token, unless absent or past `exp` + `skew` at `now` (then dropped).
    pub fn get(&self, token: &str, now: u64, skew: u64) -> Option<Arc<Verified>> {
        let mut shard = self.shard(token).lock();
        let jwt = shard.get(token)?;
        if jwt.jwt.exp != 0 && now > jwt.jwt.exp.saturating_add(skew) {
            shard.remove(token);
            return None;
        }
        Some(jwt.clone())
    }

    pub fn insert(&self, token: &str, jwt: Arc<Verified>, now: u64, skew: u64) {
        if self.per_shard == 0 {
            return;
        }
        let mut shard = self.shard(token).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(token) {
            shard.retain(|_, j| j.jwt.exp == 0 || now <= j.jwt.exp.saturating_add(skew));
            if shard.len() >= self.per_shard {
                if let Some(k) = shard.keys().next().cloned() {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(token.into(), jwt);
    }

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

    fn jwt(exp: u64) -> Arc<Verified> {
        Arc::new(Verified::new(crate::token::Jwt {
            alg: "ES256",
            kid: String::new(),
            iss: String::new(),
            sub: String::new(),
            nbf: 0,
            exp,
            iat: 0,
            audiences: Vec::new(),
            payload: serde_json::Map::new(),
            payload_b64: String::new(),
            signed: String::new(),
            signature: Vec::new(),
        }))
    }

    #[test]
    fn entries_end_at_exp_plus_skew() {
        let c = TokenCache::new(64);
        c.insert("t", jwt(100), 50, 60);
        let cases = [(50, true), (160, true), (161, false), (100, false)];
        for (now, hit) in cases {
            assert_eq!(c.get("t", now, 60).is_some(), hit, "now {now}");
        }
        c.insert("forever", jwt(0), 0, 60);
        assert!(c.get("forever", u64::MAX, 60).is_some());
    }

    #[test]
    fn the_cache_stays_bounded() {
        let c = TokenCache::new(32);
        for i in 0..10_000 {
            c.insert(&format!("token-{i}"), jwt(1_000), 0, 60);
        }
        assert!(c.len() <= 32, "{}", c.len());
        // Expired entries make room first.
        let c = TokenCache::new(16);
        for i in 0..16 {
            c.insert(&format!("old-{i}"), jwt(10), 0, 0);
        }
        c.insert("new", jwt(1_000), 500, 0);
        assert!(c.get("new", 500, 0).is_some());
        assert!(c.len() <= 16);
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let c = TokenCache::new(0);
        c.insert("t", jwt(0), 0, 0);
        assert!(c.is_empty());
    }
}
