//! Detects a request head carrying both `Content-Length` and `Transfer-Encoding`.
//!
//! hyper accepts such a request (it drops Content-Length and closes the connection afterwards);
//! Envoy rejects it with 400, and so do we. The check scans only the first request head of a
//! connection, as bytes pass to hyper: hyper closes the connection after such a request anyway,
//! so a smuggled second request cannot follow on the same connection.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes of the first head looked at before giving up (hyper's limit applies anyway).
const SCAN_LIMIT: usize = 64 * 1024;
const LINE_PREFIX: usize = 20;

#[derive(Debug, Default)]
struct HeadScan {
    line: [u8; LINE_PREFIX],
    line_len: usize,
    scanned: usize,
    content_length: bool,
    transfer_encoding: bool,
    done: bool,
}

impl HeadScan {
    /// Feed bytes; returns true when the head is complete and had both headers.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            self.scanned += 1;
            if self.scanned > SCAN_LIMIT {
                self.done = true;
                return false;
            }
            if b == b'\n' {
                let n = self.line_len.min(LINE_PREFIX);
                let line = &self.line[..n];
                if self.line_len == 0 || (self.line_len == 1 && line == b"\r") {
                    self.done = true;
                    return self.content_length && self.transfer_encoding;
                }
                self.content_length |= line.starts_with(b"content-length:");
                self.transfer_encoding |= line.starts_with(b"transfer-encoding:");
                self.line_len = 0;
            } else {
                if self.line_len < LINE_PREFIX {
                    self.line[self.line_len] = b.to_ascii_lowercase();
                }
                self.line_len += 1;
            }
        }
        false
    }
}

/// A stream wrapper that runs [`HeadScan`] over the first request head, then gets out of the way.
pub struct FramingGuard<S> {
    inner: S,
    scan: Option<Box<HeadScan>>,
    violation: Arc<AtomicBool>,
}

impl<S> FramingGuard<S> {
    pub fn new(inner: S, violation: Arc<AtomicBool>) -> Self {
        FramingGuard {
            inner,
            scan: Some(Box::default()),
            violation,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FramingGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(scan) = this.scan.as_mut() {
            if scan.feed(&buf.filled()[before..]) {
                this.violation.store(true, Ordering::Relaxed);
            }
            if scan.done {
                this.scan = None;
            }
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FramingGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&str]) -> bool {
        let mut s = HeadScan::default();
        chunks.iter().any(|c| s.feed(c.as_bytes()))
    }

    #[test]
    fn flags_both_headers_in_any_case_and_split_reads() {
        assert!(scan(&[
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Enc",
            "oding: chunked\r\n\r\n"
        ]));
        assert!(scan(&[
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nCONTENT-LENGTH: 3\r\n\r\n"
        ]));
    }

    #[test]
    fn ignores_single_framing_header_and_body_bytes() {
        assert!(!scan(&[
            "POST / HTTP/1.1\r\nContent-Length: 40\r\n\r\nTransfer-Encoding: chunked\r\n\r\n"
        ]));
        assert!(!scan(&["PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]));
    }
}
