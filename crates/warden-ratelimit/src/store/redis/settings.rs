//! One Redis client's settings (`REDIS_*` / `REDIS_PERSECOND_*`) and how they become the
//! addresses and connection settings the dialer and the cluster client use.

use super::super::StoreError;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};
use std::path::PathBuf;
use std::time::Duration;

/// `REDIS_TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisType {
    #[default]
    Single,
    Cluster,
    /// `REDIS_URL` is `master-name,sentinel1:port,...`; the master is found through them.
    Sentinel,
}

/// `REDIS_TLS=true` and the shared `REDIS_TLS_*` files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// `REDIS_TLS_CACERT`: PEM roots trusted besides the system's.
    pub ca_cert: Option<PathBuf>,
    /// `REDIS_TLS_CLIENT_CERT` / `REDIS_TLS_CLIENT_KEY`: PEM client certificate chain and key.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: the chain is still verified, the name is not
    /// (the reference's `VerifyConnection` without `ServerName`).
    pub skip_hostname_verification: bool,
}

/// One Redis client's settings (`REDIS_*` or `REDIS_PERSECOND_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `REDIS_SOCKET_TYPE`: `tcp` or `unix`.
    pub socket_type: String,
    /// `REDIS_URL`: `host:port`, a unix socket path, `redis://...`, (cluster) a comma list,
    /// or (sentinel) `master-name,host:port,...`.
    pub url: String,
    pub redis_type: RedisType,
    /// `REDIS_AUTH`: `pass` or `user:pass`.
    pub auth: Option<String>,
    /// `REDIS_SENTINEL_AUTH`: `pass` or `user:pass`, sent to the sentinels.
    pub sentinel_auth: Option<String>,
    /// `REDIS_TLS` (with the `REDIS_TLS_*` files).
    pub tls: Option<RedisTls>,
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
            sentinel_auth: None,
            tls: None,
            pool_size: 10,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Where one Redis server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Addr {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Addr::Tcp { host, port } => write!(f, "{host}:{port}"),
            Addr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a single or sentinel client connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Fixed(Addr),
    Sentinel {
        master: String,
        sentinels: Vec<Addr>,
    },
}

/// Everything the dialer needs, parsed from [`RedisSettings`].
#[derive(Debug, Clone)]
pub(super) struct DialPlan {
    pub target: Target,
    pub redis: RedisConnectionInfo,
    pub sentinel_redis: RedisConnectionInfo,
    /// TLS to the Redis server (a `rediss://` URL turns it on too).
    pub tls: Option<RedisTls>,
    pub timeout: Duration,
}

/// `pass` or `user:pass` on top of `base`.
fn with_auth(base: RedisConnectionInfo, auth: Option<&str>) -> RedisConnectionInfo {
    match auth.filter(|a| !a.is_empty()) {
        None => base,
        Some(auth) => match auth.split_once(':') {
            Some((user, pass)) => base.set_username(user).set_password(pass),
            None => base.set_password(auth),
        },
    }
}

/// `host:port` (IPv6 hosts in brackets).
fn tcp_addr(part: &str) -> Result<Addr, StoreError> {
    let (host, port) = part
        .rsplit_once(':')
        .ok_or_else(|| StoreError::Redis(format!("invalid REDIS_URL '{part}': want host:port")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| StoreError::Redis(format!("invalid REDIS_URL '{part}': bad port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(Addr::Tcp {
        host: host.into(),
        port,
    })
}

impl RedisSettings {
    fn parts(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim).filter(|p| !p.is_empty())
    }

    /// One address of `REDIS_URL` (single, cluster) with its URL-given settings, if any.
    fn addr_of(&self, part: &str) -> Result<(Addr, Option<RedisConnectionInfo>, bool), StoreError> {
        let bad = |e: redis::RedisError| StoreError::Redis(format!("invalid REDIS_URL: {e}"));
        if let Some(rest) = part.strip_prefix("rediss://") {
            // Parsed as redis:// (TLS is ours, not redis-rs's); `#insecure` is not honoured:
            // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION says what to verify.
            let plain = format!("redis://{}", rest.split('#').next().unwrap_or(rest));
            let (addr, info, _) = self.addr_of(&plain)?;
            return Ok((addr, info, true));
        }
        if part.contains("://") {
            let info = part.into_connection_info().map_err(bad)?;
            let addr = match info.addr() {
                ConnectionAddr::Tcp(host, port) => Addr::Tcp {
                    host: host.clone(),
                    port: *port,
                },
                ConnectionAddr::Unix(path) => Addr::Unix(path.clone()),
                _ => return Err(StoreError::Redis(format!("invalid REDIS_URL '{part}'"))),
            };
            return Ok((addr, Some(info.redis_settings().clone()), false));
        }
        if self.socket_type.eq_ignore_ascii_case("unix") {
            return Ok((Addr::Unix(part.into()), None, false));
        }
        Ok((tcp_addr(part)?, None, false))
    }

    /// `REDIS_AUTH` over what the URL said (the variable wins when set).
    fn redis_info(&self, from_url: Option<RedisConnectionInfo>) -> RedisConnectionInfo {
        with_auth(from_url.unwrap_or_default(), self.auth.as_deref())
    }

    /// The dialer's plan for a single or sentinel client.
    pub(super) fn dial_plan(&self) -> Result<DialPlan, StoreError> {
        let mut tls = self.tls.clone();
        let (target, redis) = match self.redis_type {
            RedisType::Sentinel => {
                let parts: Vec<&str> = self.parts().collect();
                let [master, sentinels @ ..] = parts.as_slice() else {
                    return Err(sentinel_format_error());
                };
                if sentinels.is_empty() {
                    return Err(sentinel_format_error());
                }
                let sentinels = sentinels
                    .iter()
                    .map(|s| tcp_addr(s))
                    .collect::<Result<Vec<_>, _>>()?;
                let target = Target::Sentinel {
                    master: (*master).to_owned(),
                    sentinels,
                };
                (target, self.redis_info(None))
            }
            RedisType::Single | RedisType::Cluster => {
                let part = self
                    .parts()
                    .next()
                    .ok_or_else(|| StoreError::Redis("REDIS_URL is empty".into()))?;
                let (addr, from_url, url_tls) = self.addr_of(part)?;
                if url_tls && tls.is_none() {
                    tls = Some(RedisTls::default());
                }
                (Target::Fixed(addr), self.redis_info(from_url))
            }
        };
        if tls.is_some() && matches!(target, Target::Fixed(Addr::Unix(_))) {
            return Err(StoreError::Redis(
                "REDIS_TLS needs REDIS_SOCKET_TYPE=tcp (TLS over a unix socket is not supported)"
                    .into(),
            ));
        }
        Ok(DialPlan {
            target,
            redis,
            sentinel_redis: with_auth(
                RedisConnectionInfo::default(),
                self.sentinel_auth.as_deref(),
            ),
            tls,
            timeout: self.timeout,
        })
    }

    /// Connection infos of a cluster's seed nodes.
    pub(super) fn cluster_infos(&self) -> Result<Vec<ConnectionInfo>, StoreError> {
        if self.tls.is_some() {
            return Err(StoreError::Redis(
                "REDIS_TLS with REDIS_TYPE=cluster is not supported (single and sentinel are)"
                    .into(),
            ));
        }
        let bad = |e: redis::RedisError| StoreError::Redis(format!("invalid REDIS_URL: {e}"));
        let mut infos = Vec::new();
        for part in self.parts() {
            let (addr, from_url, url_tls) = self.addr_of(part)?;
            if url_tls {
                return Err(StoreError::Redis(
                    "rediss:// with REDIS_TYPE=cluster is not supported".into(),
                ));
            }
            let addr = match addr {
                Addr::Tcp { host, port } => ConnectionAddr::Tcp(host, port),
                Addr::Unix(path) => ConnectionAddr::Unix(path),
            };
            let info = addr
                .into_connection_info()
                .map_err(bad)?
                .set_redis_settings(self.redis_info(from_url))
                // redis-rs leaves Nagle on: a pipeline written while the previous one is
                // unacked would wait for that ACK, a round trip added to the decision.
                .set_tcp_settings(tcp_settings());
            infos.push(info);
        }
        if infos.is_empty() {
            return Err(StoreError::Redis("REDIS_URL is empty".into()));
        }
        Ok(infos)
    }
}

/// The reference's message for a sentinel `REDIS_URL` without sentinels.
fn sentinel_format_error() -> StoreError {
    StoreError::Redis(
        "Expected master name and a list of urls for the sentinels, in the format: \
         <redis master name>,<sentinel1>,...,<sentineln>"
            .into(),
    )
}

/// TCP options of every cluster connection: `TCP_NODELAY`, as Go's net package (the
/// reference's Redis client) sets by default.
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_connection_disables_nagle() {
        let settings = RedisSettings {
            socket_type: "tcp".into(),
            url: "127.0.0.1:6379, redis://10.0.0.2:6380".into(),
            ..RedisSettings::default()
        };
        let infos = settings.cluster_infos().expect("valid urls");
        assert_eq!(infos.len(), 2);
        assert!(infos.iter().all(|i| i.tcp_settings().nodelay()));
    }

    #[test]
    fn sentinel_urls_are_parsed_as_the_reference_does() {
        let settings = RedisSettings {
            socket_type: "tcp".into(),
            url: "mymaster,host1:26379, [::1]:26380".into(),
            redis_type: RedisType::Sentinel,
            sentinel_auth: Some("s3cret".into()),
            ..RedisSettings::default()
        };
        let plan = settings.dial_plan().expect("valid sentinel url");
        assert_eq!(
            plan.target,
            Target::Sentinel {
                master: "mymaster".into(),
                sentinels: vec![
                    Addr::Tcp {
                        host: "host1".into(),
                        port: 26379
                    },
                    Addr::Tcp {
                        host: "::1".into(),
                        port: 26380
                    },
                ],
            }
        );
        assert_eq!(plan.sentinel_redis.password(), Some("s3cret"));
        for url in ["mymaster", "mymaster,", ""] {
            let settings = RedisSettings {
                url: url.into(),
                ..settings.clone()
            };
            let err = settings.dial_plan().unwrap_err().to_string();
            assert!(err.starts_with("Expected master name"), "{url}: {err}");
        }
    }

    #[test]
    fn auth_and_urls() {
        let settings = RedisSettings {
            socket_type: "tcp".into(),
            url: "redis://u:p@10.0.0.1:6380/2".into(),
            ..RedisSettings::default()
        };
        let plan = settings.dial_plan().expect("url");
        assert_eq!(
            plan.target,
            Target::Fixed(Addr::Tcp {
                host: "10.0.0.1".into(),
                port: 6380
            })
        );
        assert_eq!(plan.redis.db(), 2);
        assert_eq!(plan.redis.username(), Some("u"));
        let plan = RedisSettings {
            url: "rediss://10.0.0.1:6380".into(),
            auth: Some("user:pw".into()),
            ..settings
        }
        .dial_plan()
        .expect("rediss");
        assert!(plan.tls.is_some());
        assert_eq!(plan.redis.username(), Some("user"));
        assert_eq!(plan.redis.password(), Some("pw"));
    }
}
