//! TCP round trips: write the payload, read the same number of bytes back (an echo server).

use super::connect::connect;
use super::stats::ConnStats;
use super::{RequestError, Shared};
use std::net::IpAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub async fn run_connection(shared: Arc<Shared>, source: Option<IpAddr>) -> ConnStats {
    let mut stats = ConnStats::new(shared.connections);
    let payload = shared.template.body.clone();
    let mut reply = vec![0u8; payload.len()];
    let mut stream: Option<TcpStream> = None;
    while let Some(slot) = shared.schedule.next() {
        let start = slot.wait().await;
        let outcome = tokio::time::timeout(shared.timeout, async {
            let s = match &mut stream {
                Some(s) => s,
                None => {
                    stats.sockets += 1;
                    stream.insert(connect(shared.target.addr, source).await?)
                }
            };
            s.write_all(&payload).await.map_err(RequestError::Io)?;
            s.read_exact(&mut reply).await.map_err(RequestError::Io)?;
            Ok::<_, RequestError>(())
        })
        .await;
        let latency = Instant::now() - start;
        let n = payload.len() as u64;
        match outcome {
            Ok(Ok(())) => stats.record_ok(None, latency, n, n),
            Ok(Err(err)) => {
                stream = None;
                stats.record_error(err.kind(), latency);
            }
            Err(_) => {
                stream = None;
                stats.record_error("timeout", latency);
            }
        }
        if !shared.keepalive {
            stream = None;
        }
        shared.progress.tick();
    }
    stats
}
