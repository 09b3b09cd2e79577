//! Verified tokens, so a client reusing its token pays the signature once (Envoy's per-provider
//! `jwt_cache`). Keyed by the token; bounded (each shard holds at most its share, making room by
//! dropping expired entries, then any); an entry is never returned past its `exp`, skew
//! included: the caller re-checks time and audience on a hit, as Envoy does.

use crate::identity::Verified;
use hashbrown::HashTable;
use parking_lot::Mutex;
use std::hash::BuildHasher;
use std::sync::Arc;

const SHARDS: usize = 16;

/// A token and what its verification gave.
#[derive(Debug)]
struct Entry {
    hash: u64,
    token: Box<[u8]>,
    jwt: Arc<Verified>,
}

type Shard = Mutex<HashTable<Entry>>;

#[derive(Debug)]
pub struct TokenCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    /// A token is hashed once per lookup, for its shard and its slot: a token is hundreds of
    /// bytes and hashing was most of a hit's cost with SipHash. foldhash (seeded per cache) is
    /// enough: only tokens whose signature verified get in, so clients cannot fill a slot
    /// with colliding entries.
    hasher: foldhash::fast::RandomState,
}

impl TokenCache {
    pub fn new(capacity: usize) -> TokenCache {
        TokenCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The token's hash and its shard (chosen by middle bits: the table places entries by the
    /// low bits and tags them with the top ones).
    /// Only the token's last bytes are hashed: they are its signature's (random, ≥ 192 bits in
    /// 32 base64url characters), and the whole token is compared anyway.
    fn shard(&self, token: &[u8]) -> (u64, &Shard) {
        let tail = token.get(token.len().saturating_sub(32)..).unwrap_or(token);
        let hash = self.hasher.hash_one(tail);
        (hash, &self.shards[(hash >> 32) as usize % SHARDS])
    }

    pub fn get(&self, token: &[u8], now: u64, skew: u64) -> Option<Arc<Verified>> {
        let (hash, shard) = self.shard(token);
        let mut shard = shard.lock();
        let found = shard.find_entry(hash, |e| &*e.token == token).ok()?;
        let jwt = &found.get().jwt;
        if jwt.jwt.exp != 0 && now > jwt.jwt.exp.saturating_add(skew) {
            found.remove();
            return None;
        }
        Some(jwt.clone())
    }

    pub fn insert(&self, token: &[u8], jwt: Arc<Verified>, now: u64, skew: u64) {
        if self.per_shard == 0 {
            return;
        }
        let (hash, shard) = self.shard(token);
        let mut shard = shard.lock();
        if let Ok(mut found) = shard.find_entry(hash, |e| &*e.token == token) {
            found.get_mut().jwt = jwt;
            return;
        }
        if shard.len() >= self.per_shard {
            shard.retain(|e| e.jwt.jwt.exp == 0 || now <= e.jwt.jwt.exp.saturating_add(skew));
            if shard.len() >= self.per_shard {
                // Full of live tokens: any one goes.
                let mut dropped = false;
                shard.retain(|_| std::mem::replace(&mut dropped, true));
            }
        }
        shard.insert_unique(
            hash,
            Entry {
                hash,
                token: token.into(),
                jwt,
            },
            |e| e.hash,
        );
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
        c.insert(b"t", jwt(100), 50, 60);
        let cases = [(50, true), (160, true), (161, false), (100, false)];
        for (now, hit) in cases {
            assert_eq!(c.get(b"t", now, 60).is_some(), hit, "now {now}");
        }
        c.insert(b"forever", jwt(0), 0, 60);
        assert!(c.get(b"forever", u64::MAX, 60).is_some());
    }

    #[test]
    fn the_cache_stays_bounded() {
        let c = TokenCache::new(32);
        for i in 0..10_000 {
            c.insert(format!("token-{i}").as_bytes(), jwt(1_000), 0, 60);
        }
        assert!(c.len() <= 32, "{}", c.len());
        // Expired entries make room first.
        let c = TokenCache::new(16);
        for i in 0..16 {
            c.insert(format!("old-{i}").as_bytes(), jwt(10), 0, 0);
        }
        c.insert(b"new", jwt(1_000), 500, 0);
        assert!(c.get(b"new", 500, 0).is_some());
        assert!(c.len() <= 16);
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let c = TokenCache::new(0);
        c.insert(b"t", jwt(0), 0, 0);
        assert!(c.is_empty());
    }
}
