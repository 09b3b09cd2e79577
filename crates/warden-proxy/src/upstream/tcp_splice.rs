//! A sidecar's plain TCP relay under `--accel --capture ebpf`: the same copy both ways with
//! half-close as `copy_bidirectional`, except that each direction tells the eBPF side
//! (warden-accel's `Splicer`) which socket its bytes leave on and how many it has delivered.
//! When the sidecar at the other end of a same-node call does the same, the apps' sends skip
//! both sidecars; this loop then only carries what was in flight and the FINs. Nothing is
//! read or written differently, so a relay whose publish fails is an ordinary relay.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use warden_accel::{Direction, Splicer};

// tokio's copy_bidirectional buffer size.
const BUF: usize = 8 * 1024;

/// Copy until both directions ended (EOF forwarded as a write shutdown) or one failed.
pub async fn copy(
    mut inbound: TcpStream,
    mut outbound: TcpStream,
    splicer: &Splicer,
) -> std::io::Result<()> {
    let (Some(down), Some(up)) = (key(&inbound), key(&outbound)) else {
        tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await?;
        return Ok(());
    };
    let to_up = Direction { at: down, out: up };
    let to_down = Direction { at: up, out: down };
    // Published before the first byte is relayed: 0 delivered is true now.
    let spliced = splicer.publish(&to_up, 0).is_ok() && splicer.publish(&to_down, 0).is_ok();
    let sp = spliced.then_some(splicer);
    let (in_r, in_w) = inbound.split();
    let (out_r, out_w) = outbound.split();
    let result = tokio::try_join!(
        one_way(in_r, out_w, &to_up, sp),
        one_way(out_r, in_w, &to_down, sp)
    );
    if spliced {
        splicer.withdraw(&to_up);
        splicer.withdraw(&to_down);
    }
    result.map(|_| ())
}

fn key(s: &TcpStream) -> Option<warden_accel::Pair> {
    let local: SocketAddr = s.local_addr().ok()?;
    let peer: SocketAddr = s.peer_addr().ok()?;
    warden_accel::key_of(s, local, peer).ok()
}

async fn one_way(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    dir: &Direction,
    splicer: Option<&Splicer>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUF];
    let mut delivered: u64 = 0;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        delivered += n as u64;
        // After the write returned: these bytes are in the next socket's queue, so a send
        // that skips this sidecar now cannot overtake them.
        if let Some(s) = splicer {
            if s.publish(dir, delivered).is_err() {
                // Publishing a stale count only keeps sends on the sidecars: safe.
                tracing::debug!("splice publish failed; the connection stays on the sidecars");
            }
        }
    }
}
