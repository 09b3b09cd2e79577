//! A connection whose first bytes were already read by the fast path: reads yield those bytes
//! first, then the connection's own. Writes go straight through. This is how hyper takes over a
//! connection mid-stream without the fast path having to un-read anything.

use bytes::{Buf, Bytes};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct ReplayIo<S> {
    replay: Bytes,
    inner: S,
}

impl<S> ReplayIo<S> {
    pub fn new(replay: Bytes, inner: S) -> ReplayIo<S> {
        ReplayIo { replay, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReplayIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.replay.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = this.replay.len().min(buf.remaining());
        buf.put_slice(&this.replay[..n]);
        this.replay.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReplayIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    // hyper writes head and body as one vectored write when the stream supports it.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn replays_the_prefix_then_reads_and_writes_through() {
        let (mut peer, inner) = tokio::io::duplex(64);
        let mut io = ReplayIo::new(Bytes::from_static(b"already "), inner);
        peer.write_all(b"read").await.unwrap();
        peer.shutdown().await.unwrap();
        // A small buffer: the prefix may take several reads.
        let mut got = Vec::new();
        let mut chunk = [0u8; 3];
        loop {
            let n = io.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, b"already read");
        io.write_all(b"reply").await.unwrap();
        io.shutdown().await.unwrap();
        let mut back = Vec::new();
        peer.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"reply");
    }
}
