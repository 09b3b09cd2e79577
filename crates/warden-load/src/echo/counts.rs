//! Requests served per source IP.
//!
//! The map is touched once per accepted connection; each connection then increments its own
//! shared atomic, so counting costs one relaxed add per request and no lock.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Default)]
pub struct SourceCounts {
    by_ip: Mutex<HashMap<IpAddr, Arc<AtomicU64>>>,
}

impl SourceCounts {
    /// The counter requests from `ip` increment; the same counter for every connection of `ip`.
    pub fn counter_for(&self, ip: IpAddr) -> Arc<AtomicU64> {
        let mut map = self.by_ip.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(ip).or_default().clone()
    }

    /// Source IPs that were served at least one request since the last reset.
    pub fn snapshot(&self) -> BTreeMap<IpAddr, u64> {
        let map = self.by_ip.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .map(|(ip, n)| (*ip, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub fn total(&self) -> u64 {
        let map = self.by_ip.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// Zero every counter; counters stay registered because live connections hold them.
    pub fn reset(&self) {
        let map = self.by_ip.lock().unwrap_or_else(PoisonError::into_inner);
        for n in map.values() {
            n.store(0, Ordering::Relaxed);
        }
    }

    /// What one connection from `ip` counts with.
    pub(super) fn for_connection(self: &Arc<Self>, ip: IpAddr) -> ConnectionCounts {
        ConnectionCounts {
            own: self.counter_for(ip),
            all: self.clone(),
        }
    }
}

/// One connection's share of the counts: its source IP's counter (bumped per request) and the
/// whole table (read and reset by `/count`). Both the fast path and hyper count through it, so a
/// connection handed from one to the other keeps counting in the same place.
pub(super) struct ConnectionCounts {
    own: Arc<AtomicU64>,
    all: Arc<SourceCounts>,
}

impl ConnectionCounts {
    pub(super) fn count_request(&self) {
        self.own.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn all(&self) -> &SourceCounts {
        &self.all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_ip_and_resets() {
        let counts = SourceCounts::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        counts.counter_for(a).fetch_add(3, Ordering::Relaxed);
        counts.counter_for(a).fetch_add(1, Ordering::Relaxed);
        let held = counts.counter_for(b);
        held.fetch_add(2, Ordering::Relaxed);
        assert_eq!(counts.snapshot(), BTreeMap::from([(a, 4), (b, 2)]));
        assert_eq!(counts.total(), 6);
        counts.reset();
        assert!(counts.snapshot().is_empty());
        held.fetch_add(1, Ordering::Relaxed);
        assert_eq!(counts.snapshot(), BTreeMap::from([(b, 1)]));
    }
}
