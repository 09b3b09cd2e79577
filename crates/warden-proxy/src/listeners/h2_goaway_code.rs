//! The error code of the GOAWAY an abusive HTTP/2 client gets: ENHANCE_YOUR_CALM (0xb), as
//! Envoy and h2's own reset limits send, rather than the NO_ERROR of a graceful shutdown.
//!
//! hyper can only shut a connection down gracefully (GOAWAY NO_ERROR, a PING, the final
//! GOAWAY); it has no way to pick the code. So the connection's writes pass through
//! [`GoawayCode`], which follows the frame boundaries of the server's byte stream and, once
//! [`Calm::set`] was called, turns the NO_ERROR of every GOAWAY it writes into
//! ENHANCE_YOUR_CALM. Only the four code bytes change; frame lengths stay, so nothing else in
//! the stream moves.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const FRAME_HEADER: usize = 9;
const GOAWAY: u8 = 0x7;
const ENHANCE_YOUR_CALM: u8 = 0xb;

/// Set once the connection is judged abusive; read by its [`GoawayCode`].
#[derive(Debug, Default, Clone)]
pub struct Calm(Arc<AtomicBool>);

impl Calm {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Where the written byte stream is: in a frame header (how many of its bytes), or in a
/// payload (its type, the offset in it, the bytes left).
#[derive(Debug, Clone, Copy)]
struct FrameCursor {
    header: [u8; FRAME_HEADER],
    have: usize,
    kind: u8,
    offset: usize,
    left: usize,
    /// The GOAWAY code bytes seen so far are all zero (NO_ERROR).
    no_error: bool,
}

impl FrameCursor {
    fn new() -> Self {
        FrameCursor {
            header: [0; FRAME_HEADER],
            have: 0,
            kind: 0,
            offset: 0,
            left: 0,
            no_error: true,
        }
    }

    /// Move over `bytes`; with `calm`, `rewrite(i)` is called for each byte `i` of them that
    /// is the last byte of a NO_ERROR GOAWAY code (the code is 4 bytes at payload offset 4).
    fn advance(&mut self, bytes: &[u8], calm: bool, mut rewrite: impl FnMut(usize)) {
        let mut i = 0;
        while i < bytes.len() {
            if self.left == 0 && self.have < FRAME_HEADER {
                self.header[self.have] = bytes[i];
                self.have += 1;
                i += 1;
                if self.have == FRAME_HEADER {
                    let h = self.header;
                    self.left =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    self.kind = h[3];
                    self.offset = 0;
                    self.no_error = true;
                    if self.left == 0 {
                        self.have = 0;
                    }
                }
                continue;
            }
            // In a payload: only a GOAWAY's code bytes are looked at one by one.
            let code = 4..8;
            if self.kind == GOAWAY && code.contains(&self.offset) {
                let b = bytes[i];
                if self.offset < 7 {
                    self.no_error &= b == 0;
                } else if calm && self.no_error && b == 0 {
                    rewrite(i);
                }
                self.step(1);
                i += 1;
            } else {
                let until = if self.kind == GOAWAY && self.offset < code.start {
                    code.start - self.offset
                } else {
                    self.left
                };
                let n = until.min(self.left).min(bytes.len() - i);
                self.step(n);
                i += n;
            }
        }
    }

    fn step(&mut self, n: usize) {
        self.offset += n;
        self.left -= n;
        if self.left == 0 {
            self.have = 0;
        }
    }
}

/// The write side of a downstream HTTP/2 connection, rewriting GOAWAY codes once calm is set
/// (see the module doc). `cursor` is `None` for HTTP/1 connections, which pass untouched.
pub struct GoawayCode<S> {
    inner: S,
    cursor: Option<FrameCursor>,
    calm: Calm,
}

impl<S> GoawayCode<S> {
    pub fn new(inner: S, h2: bool, calm: Calm) -> Self {
        GoawayCode {
            inner,
            cursor: h2.then(FrameCursor::new),
            calm,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for GoawayCode<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GoawayCode<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let Some(cursor) = this.cursor.as_mut() else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        let calm = this.calm.is_set();
        // Find what to rewrite on a copy of the cursor: the inner write may take only part of
        // `buf`, and the cursor moves over what it took.
        let mut rewritten: Option<Vec<u8>> = None;
        if calm {
            let mut ahead = *cursor;
            ahead.advance(buf, true, |i| {
                rewritten.get_or_insert_with(|| buf.to_vec())[i] = ENHANCE_YOUR_CALM;
            });
        }
        let out = rewritten.as_deref().unwrap_or(buf);
        let written = Pin::new(&mut this.inner).poll_write(cx, out);
        if let Poll::Ready(Ok(n)) = written {
            cursor.advance(&buf[..n], calm, |_| {});
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let Some(cursor) = this.cursor.as_mut() else {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        };
        if this.calm.is_set() {
            // Rare (the connection is being closed): one slice at a time, through the rewrite.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return self.poll_write(cx, first);
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = written {
            for b in bufs {
                let take = n.min(b.len());
                cursor.advance(&b[..take], false, |_| {});
                n -= take;
                if n == 0 {
                    break;
                }
            }
        }
        written
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

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, 0, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// Feed `stream` in pieces of `piece` bytes; the bytes as rewritten.
    fn rewrite(stream: &[u8], piece: usize, calm: bool) -> Vec<u8> {
        let mut cursor = FrameCursor::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(piece) {
            let mut copy = chunk.to_vec();
            cursor.advance(chunk, calm, |i| copy[i] = ENHANCE_YOUR_CALM);
            out.extend(copy);
        }
        out
    }

    #[test]
    fn only_no_error_goaway_codes_change_whatever_the_write_sizes() {
        let goaway = |code: u32| {
            let mut p = 0x7fff_ffffu32.to_be_bytes().to_vec();
            p.extend_from_slice(&code.to_be_bytes());
            p.extend_from_slice(b"debug");
            frame(GOAWAY, &p)
        };
        // A DATA frame whose payload looks like a GOAWAY header, an empty SETTINGS, a GOAWAY
        // with NO_ERROR, one with PROTOCOL_ERROR, a PING.
        let mut stream = frame(0x0, &goaway(0));
        stream.extend(frame(0x4, &[]));
        stream.extend(goaway(0));
        stream.extend(goaway(1));
        stream.extend(frame(0x6, &[0; 8]));
        let mut want = frame(0x0, &goaway(0));
        want.extend(frame(0x4, &[]));
        want.extend(goaway(0xb));
        want.extend(goaway(1));
        want.extend(frame(0x6, &[0; 8]));
        for piece in [1, 2, 3, 5, 9, 13, stream.len()] {
            assert_eq!(rewrite(&stream, piece, true), want, "piece {piece}");
            assert_eq!(rewrite(&stream, piece, false), stream, "piece {piece}");
        }
    }
}
