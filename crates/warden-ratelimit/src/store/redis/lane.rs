//! A lane: the connections one runtime uses to reach one Redis client. A connection's driver
//! task runs on the runtime that first uses it, so each gRPC serving thread gets its own lane,
//! made on that thread: a decision's pipeline is then written, read and answered without a
//! wakeup crossing threads.

use super::super::StoreError;
use super::conn_slot::ConnSlot;
use super::dial::Dialer;
use super::settings::{RedisSettings, RedisType};
use arc_swap::ArcSwapOption;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// What every lane of one client is made from.
pub(super) enum LaneFactory {
    /// One server, or the master the sentinels name.
    Single {
        dialer: Arc<Dialer>,
        /// Shared by every slot of the client; bumped when a health probe fails.
        generation: Arc<AtomicU64>,
    },
    Cluster {
        client: Arc<ClusterClient>,
    },
}

impl LaneFactory {
    pub fn new(settings: &RedisSettings) -> Result<Self, StoreError> {
        let redis_error = |e: redis::RedisError| StoreError::Redis(e.to_string());
        Ok(match settings.redis_type {
            RedisType::Single | RedisType::Sentinel => LaneFactory::Single {
                dialer: Arc::new(Dialer::new(settings.dial_plan()?)?),
                generation: Arc::new(AtomicU64::new(0)),
            },
            RedisType::Cluster => LaneFactory::Cluster {
                client: Arc::new(
                    ClusterClient::builder(settings.cluster_infos()?)
                        .tcp_settings(super::settings::tcp_settings())
                        .connection_timeout(settings.timeout)
                        .response_timeout(settings.timeout)
                        .build()
                        .map_err(redis_error)?,
                ),
            },
        })
    }

    /// Marks every connection made so far as suspect: each is re-made before its next use.
    pub fn distrust_connections(&self) {
        if let LaneFactory::Single { generation, .. } = self {
            generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A lane of `conns` multiplexed connections (cluster: one cluster connection), made lazily:
    /// nothing connects until the first command, and broken connections are re-made. Must be
    /// called on the runtime that will use the lane.
    pub fn lane(&self, conns: usize) -> Lane {
        match self {
            LaneFactory::Single { dialer, generation } => Lane::Single {
                conns: (0..conns.max(1))
                    .map(|_| ConnSlot::new(dialer.clone(), generation.clone()))
                    .collect(),
                next: AtomicUsize::new(0),
            },
            LaneFactory::Cluster { client } => Lane::Cluster {
                client: client.clone(),
                conn: ArcSwapOption::empty(),
                connecting: tokio::sync::Mutex::new(()),
            },
        }
    }
}

pub(super) enum Lane {
    /// Concurrent requests are pipelined on each connection; requests alternate between them.
    Single {
        conns: Vec<ConnSlot>,
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
                let slot = conns
                    .get(i)
                    .ok_or_else(|| StoreError::Redis("no redis connection".into()))?;
                slot.query(pipe).await
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
