//! One Redis client's settings (`REDIS_*` / `REDIS_PERSECOND_*`) and how they become
//! connection infos.

use super::super::StoreError;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};
use std::time::Duration;

/// `REDIS_TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisType {
    #[default]
    Single,
    Cluster,
}

/// One Redis client's settings (`REDIS_*` or `REDIS_PERSECOND_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `REDIS_SOCKET_TYPE`: `tcp` or `unix`.
    pub socket_type: String,
    /// `REDIS_URL`: `host:port`, a unix socket path, `redis://...`, or (cluster) a comma list.
    pub url: String,
    pub redis_type: RedisType,
    /// `REDIS_AUTH`: `pass` or `user:pass`.
    pub auth: Option<String>,
    /// `REDIS_POOL_SIZE`: multiplexed connections, capped at the number of cores and split
    /// over the gRPC serving threads (see `RedisPool::new`).
    pub pool_size: usize,
    pub timeout: Duration,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            socket_type: "unix".into(),
            url: "/var/run/nutcracker/ratelimit.sock".into(),
            redis_type: RedisType::Single,
            auth: None,
            pool_size: 10,
            timeout: Duration::from_secs(10),
        }
    }
}

impl RedisSettings {
    pub(super) fn connection_infos(&self) -> Result<Vec<ConnectionInfo>, StoreError> {
        let bad = |e: redis::RedisError| StoreError::Redis(format!("invalid REDIS_URL: {e}"));
        let mut infos = Vec::new();
        for part in self.url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let info = if part.contains("://") {
                part.into_connection_info().map_err(bad)?
            } else if self.socket_type.eq_ignore_ascii_case("unix") {
                ConnectionAddr::Unix(part.into())
                    .into_connection_info()
                    .map_err(bad)?
            } else {
                let (host, port) = part.rsplit_once(':').ok_or_else(|| {
                    StoreError::Redis(format!("invalid REDIS_URL '{part}': want host:port"))
                })?;
                let port: u16 = port.parse().map_err(|_| {
                    StoreError::Redis(format!("invalid REDIS_URL '{part}': bad port"))
                })?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ConnectionAddr::Tcp(host.into(), port)
                    .into_connection_info()
                    .map_err(bad)?
            };
            let info = match &self.auth {
                Some(auth) if !auth.is_empty() => {
                    let redis = match auth.split_once(':') {
                        Some((user, pass)) => RedisConnectionInfo::default()
                            .set_username(user)
                            .set_password(pass),
                        None => RedisConnectionInfo::default().set_password(auth),
                    };
                    info.set_redis_settings(redis)
                }
                _ => info,
            };
            // redis-rs leaves Nagle on: a pipeline written while the previous one is unacked
            // would wait for that ACK, a round trip added to the decision.
            infos.push(info.set_tcp_settings(tcp_settings()));
        }
        if infos.is_empty() {
            return Err(StoreError::Redis("REDIS_URL is empty".into()));
        }
        Ok(infos)
    }
}

/// TCP options of every Redis connection: `TCP_NODELAY`, as Go's net package (the reference's
/// Redis client) sets by default.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tcp_connection_disables_nagle() {
        let settings = RedisSettings {
            socket_type: "tcp".into(),
            url: "127.0.0.1:6379, redis://10.0.0.2:6380".into(),
            ..RedisSettings::default()
        };
        let infos = settings.connection_infos().expect("valid urls");
        assert_eq!(infos.len(), 2);
        assert!(infos.iter().all(|i| i.tcp_settings().nodelay()));
    }
}
