//! A lane: the connections one runtime uses to reach one Redis client. redis-rs spawns a
//! connection's driver task on the runtime that first uses it, so each gRPC serving thread gets
//! its own lane, made on that thread: a decision's pipeline is then written, read and answered
//! without a wakeup crossing threads.

use super::super::StoreError;
use super::settings::{RedisSettings, RedisType};
use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What every lane of one client is made from.
// One per Redis client, made once: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum LaneFactory {
    Single {
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    Cluster {
        client: Arc<ClusterClient>,
    },
}

impl LaneFactory {
    pub fn new(settings: &RedisSettings) -> Result<Self, StoreError> {
        let infos = settings.connection_infos()?;
        let redis_error = |e: redis::RedisError| StoreError::Redis(e.to_string());
        Ok(match settings.redis_type {
            RedisType::Single => {
                let info = infos
                    .into_iter()
                    .next()
                    .ok_or_else(|| StoreError::Redis("REDIS_URL is empty".into()))?;
                LaneFactory::Single {
                    client: redis::Client::open(info).map_err(redis_error)?,
                    // No response timeout here: `RedisPool::run` bounds every call already,
                    // and a second timer per call showed in profiles.
                    config: ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(settings.timeout))
                        .set_response_timeout(None)
                        .set_number_of_retries(1)
                        .set_min_delay(Duration::from_millis(10))
                        .set_max_delay(Duration::from_millis(200)),
                }
            }
            RedisType::Cluster => LaneFactory::Cluster {
                client: Arc::new(
                    ClusterClient::builder(infos)
                        .tcp_settings(super::settings::tcp_settings())
                        .connection_timeout(settings.timeout)
                        .response_timeout(settings.timeout)
                        .build()
                        .map_err(redis_error)?,
                ),
            },
        })
    }

    /// A lane of `conns` multiplexed connections (cluster: one cluster connection), made lazily:
    /// nothing connects until the first command, and failed connections are re-made. Must be
    /// called on the runtime that will use the lane.
    pub fn lane(&self, conns: usize) -> Result<Lane, StoreError> {
        Ok(match self {
            LaneFactory::Single { client, config } => Lane::Single {
                conns: (0..conns.max(1))
                    .map(|_| {
                        ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                            .map_err(|e| StoreError::Redis(e.to_string()))
                    })
                    .collect::<Result<_, _>>()?,
                next: AtomicUsize::new(0),
            },
            LaneFactory::Cluster { client } => Lane::Cluster {
                client: client.clone(),
                conn: ArcSwapOption::empty(),
                connecting: tokio::sync::Mutex::new(()),
            },
        })
    }
}

pub(super) enum Lane {
    /// Concurrent requests are pipelined on each connection; requests alternate between them.
    Single {
        conns: Vec<ConnectionManager>,
        next: AtomicUsize,
    },
    /// Connected on first use; dropped after an unrecoverable error so the next call
    /// reconnects.
    Cluster {
        client: Arc<ClusterClient>,
        conn: ArcSwapOption<ClusterConnection>,
        connecting: tokio::sync::Mutex<()>,
    },
}

impl Lane {
    /// Sends `pipe` and reads its replies (no timeout here; the pool applies it).
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        match self {
            Lane::Single { conns, next } => {
                let i = next.fetch_add(1, Ordering::Relaxed) % conns.len().max(1);
                let mut conn = conns
                    .get(i)
                    .cloned()
                    .ok_or_else(|| StoreError::Redis("no redis connection".into()))?;
                pipe.query_async::<T>(&mut conn)
                    .await
                    .map_err(|e| StoreError::Redis(e.to_string()))
            }
            Lane::Cluster { conn, .. } => {
                let mut c = self.cluster_conn().await?;
                let result = pipe.query_async::<T>(&mut c).await;
                if let Err(e) = &result {
                    if e.is_unrecoverable_error() || e.is_connection_dropped() {
                        conn.store(None);
                    }
                }
                result.map_err(|e| StoreError::Redis(e.to_string()))
            }
        }
    }

    async fn cluster_conn(&self) -> Result<ClusterConnection, StoreError> {
        let Lane::Cluster {
            client,
            conn,
            connecting,
        } = self
        else {
            return Err(StoreError::Redis("not a cluster lane".into()));
        };
        if let Some(c) = conn.load_full() {
            return Ok((*c).clone());
        }
        let _guard = connecting.lock().await;
        if let Some(c) = conn.load_full() {
            return Ok((*c).clone());
        }
        let c = client
            .get_async_connection()
            .await
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        conn.store(Some(Arc::new(c.clone())));
        Ok(c)
    }
}
