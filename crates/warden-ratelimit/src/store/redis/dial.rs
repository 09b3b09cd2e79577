//! Opening one Redis connection: TCP (no Nagle), a unix socket or TLS, then redis-rs's
//! multiplexed connection over it, its driver spawned on the calling runtime. Sentinel clients
//! ask the sentinels for the master first and check that it says it is one.
//!
//! Each connection carries a [`ConnState`]: the driver flags its end (the server closed, a
//! read failed), so a dead connection is seen before a request is written to it, and the
//! stream counts the bytes it accepts, so a failed request that never reached the socket can be
//! told from one that may have been executed.

use super::super::StoreError;
use super::settings::{Addr, DialPlan, Target};
use super::tls;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use redis::{RedisConnectionInfo, Value};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use warden_tls::tokio_rustls::TlsConnector;

/// What is known about one connection.
#[derive(Debug)]
pub(super) struct ConnState {
    /// False once the driver ended: nothing sent on the connection can be written any more.
    alive: AtomicBool,
    /// Set when a request or the health probe found the connection unusable.
    broken: AtomicBool,
    /// Bytes the stream accepted so far.
    written: AtomicU64,
    /// The pool's probe generation when the connection was made (see `ConnSlot`).
    pub generation: u64,
}

impl ConnState {
    pub fn usable(&self) -> bool {
        self.alive() && !self.broken.load(Ordering::Relaxed)
    }

    pub fn mark_broken(&self) {
        self.broken.store(true, Ordering::Relaxed);
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Hides the driver's end, as when a request is queued just before the driver sees it.
    #[cfg(test)]
    pub fn pretend_alive(&self) {
        self.alive.store(true, Ordering::Release);
    }
}

/// A connection and what is known about it.
#[derive(Clone)]
pub(super) struct Conn {
    pub conn: MultiplexedConnection,
    pub state: Arc<ConnState>,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The stream under redis-rs's codec, counting accepted bytes.
struct Counted {
    inner: Box<dyn Io>,
    state: Arc<ConnState>,
}

impl Counted {
    fn count(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result {
            self.state.written.fetch_add(*n as u64, Ordering::Release);
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError::Redis(e.to_string())
}

/// Opens connections for one single or sentinel client.
pub(super) struct Dialer {
    plan: DialPlan,
    tls: Option<TlsConnector>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("target", &self.plan.target)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Dialer {
    pub fn new(plan: DialPlan) -> Result<Self, StoreError> {
        let tls = plan.tls.as_ref().map(tls::connector).transpose()?;
        Ok(Dialer { plan, tls })
    }

    /// A new connection to the server (for sentinel: the current master), within the timeout.
    /// Must run on the runtime that will use it: the driver is spawned there.
    pub async fn connect(&self, generation: u64) -> Result<Conn, StoreError> {
        let timeout = self.plan.timeout;
        match tokio::time::timeout(timeout, self.connect_inner(generation)).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(timeout.as_millis())),
        }
    }

    async fn connect_inner(&self, generation: u64) -> Result<Conn, StoreError> {
        match &self.plan.target {
            Target::Fixed(addr) => {
                self.open(addr, &self.plan.redis, self.tls.as_ref(), generation)
                    .await
            }
            Target::Sentinel { master, sentinels } => {
                let addr = self.master_addr(master, sentinels).await?;
                let mut c = self
                    .open(&addr, &self.plan.redis, self.tls.as_ref(), generation)
                    .await?;
                // Sentinels can name a master that has just been demoted.
                let role: Value = redis::cmd("ROLE")
                    .query_async(&mut c.conn)
                    .await
                    .map_err(redis_error)?;
                match role_name(&role).as_deref() {
                    Some("master") => Ok(c),
                    other => Err(StoreError::Redis(format!(
                        "sentinel master '{master}' at {addr} reports role {}",
                        other.unwrap_or("?")
                    ))),
                }
            }
        }
    }

    /// Asks the sentinels in order; the first answer wins. Sentinels are reached as the
    /// reference's sentinel dialer reaches them: with `REDIS_SENTINEL_AUTH`, and over TLS when
    /// `REDIS_TLS` is set.
    async fn master_addr(&self, master: &str, sentinels: &[Addr]) -> Result<Addr, StoreError> {
        let mut last = None;
        for sentinel in sentinels {
            match self.ask_sentinel(master, sentinel).await {
                Ok(addr) => return Ok(addr),
                Err(e) => {
                    tracing::debug!(%sentinel, error = %e, "sentinel did not name a master");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Redis("no sentinel configured".into())))
    }

    async fn ask_sentinel(&self, master: &str, sentinel: &Addr) -> Result<Addr, StoreError> {
        let mut c = self
            .open(sentinel, &self.plan.sentinel_redis, self.tls.as_ref(), 0)
            .await?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut c.conn)
            .await
            .map_err(|e| StoreError::Redis(format!("sentinel {sentinel}: {e}")))?;
        let (host, port) = reply.ok_or_else(|| {
            StoreError::Redis(format!(
                "sentinel {sentinel} does not know master '{master}'"
            ))
        })?;
        Ok(Addr::Tcp { host, port })
    }

    async fn open(
        &self,
        addr: &Addr,
        info: &RedisConnectionInfo,
        tls: Option<&TlsConnector>,
        generation: u64,
    ) -> Result<Conn, StoreError> {
        let io_error = |e: io::Error| StoreError::Redis(format!("{addr}: {e}"));
        let stream: Box<dyn Io> = match (addr, tls) {
            (Addr::Tcp { host, port }, tls) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(io_error)?;
                // Go's net package (the reference's client) disables Nagle too: a pipeline
                // written while the previous one is unacked would otherwise wait a round trip.
                tcp.set_nodelay(true).map_err(io_error)?;
                match tls {
                    None => Box::new(tcp),
                    Some(connector) => Box::new(
                        connector
                            .connect(tls::server_name(host)?, tcp)
                            .await
                            .map_err(io_error)?,
                    ),
                }
            }
            (Addr::Unix(path), _) => Box::new(
                tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(io_error)?,
            ),
        };
        let state = Arc::new(ConnState {
            alive: AtomicBool::new(true),
            broken: AtomicBool::new(false),
            written: AtomicU64::new(0),
            generation,
        });
        let counted = Counted {
            inner: stream,
            state: state.clone(),
        };
        // No response timeout here: the pool bounds every call already.
        let config = AsyncConnectionConfig::new().set_response_timeout(None::<Duration>);
        let (conn, driver) = MultiplexedConnection::new_with_config(info, counted, config)
            .await
            .map_err(redis_error)?;
        let driver_state = state.clone();
        tokio::spawn(async move {
            driver.await;
            driver_state.alive.store(false, Ordering::Release);
        });
        Ok(Conn { conn, state })
    }
}

/// The first element of a `ROLE` reply.
fn role_name(role: &Value) -> Option<String> {
    let Value::Array(items) = role else {
        return None;
    };
    match items.first()? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
