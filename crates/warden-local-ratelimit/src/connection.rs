//! L4 local limit: new connections per interval on a listener (Envoy's network
//! `local_ratelimit`, one token per connection). Over the limit, the proxy closes the
//! connection without writing a byte.

use crate::group::{LimitBucket, Scope};
use crate::key_table::KeyTable;
use crate::selector::{canonical, DistinctKey};
use crate::stats::GroupCounters;
use ipnet::IpNet;
use std::net::IpAddr;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct ConnGroup {
    pub name: Arc<str>,
    pub scope: Scope,
    /// Only clients in this network are counted (None = all).
    pub source: Option<IpNet>,
    /// One bucket per client address instead of one shared bucket.
    pub distinct: bool,
    pub bucket: LimitBucket,
    pub counters: Arc<GroupCounters>,
}

impl ConnGroup {
    /// None when the group does not apply; otherwise whether the connection may proceed.
    #[inline]
    pub(crate) fn admit(
        &self,
        gateway: &str,
        client_ip: IpAddr,
        table: &KeyTable,
        now: u64,
    ) -> Option<bool> {
        if !self.scope.applies_to_connection(gateway) {
            return None;
        }
        if let Some(net) = &self.source {
            if !net.contains(&canonical(client_ip)) {
                return None;
            }
        }
        let key = if self.distinct {
            DistinctKey::Ip(client_ip)
        } else {
            DistinctKey::Shared
        };
        let allowed = self.bucket.consume(table, &key, now).allowed;
        GroupCounters::bump(if allowed {
            &self.counters.ok
        } else {
            &self.counters.rate_limited
        });
        Some(allowed)
    }
}
