//! The HTTP/1.1 fast path of the echo server (bench/load.sh compares it with nginx). hyper's
//! h1 dispatcher was most of the echo server's user-space CPU: per request it builds a
//! `Request` with a header map, a `Response` and a body, and moves the bytes through its own
//! buffers. Here body-less requests are parsed straight from the read buffer and answered into
//! one output buffer: every request of one read (pipelined ones too) is answered in order with
//! one write.
//!
//! Everything else is handed to hyper ([`HyperEcho`]) together with the bytes already read: h2c
//! (the connection starts with the HTTP/2 preface), and from the first request on that has a
//! body, a delay, an expectation or anything [`request_head`](warden_http1::request_head) does not vouch for.
//! Responses already answered here are written before hyper takes over.

use super::body::next_pattern_chunk;
use super::counts::ConnectionCounts;
use super::h1_response;
use super::http::HyperEcho;
use super::reply::Plan;
use bytes::{Buf, BytesMut};
use http::Method;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warden_http1::http_date;
use warden_http1::replay_io::ReplayIo;
use warden_http1::request_head::{self, Parsed};
use warden_http1::response_head::Framing;
/// A request head still incomplete at this size goes to hyper, which allows larger ones.
const MAX_HEAD: usize = 64 * 1024;
const READ_SIZE: usize = 8 * 1024;
/// Write the output out mid-batch once it holds this much (many large pipelined responses).
const MAX_BUFFERED_OUTPUT: usize = 64 * 1024;

pub(super) async fn serve<S>(mut stream: S, counts: ConnectionCounts, hyper: &HyperEcho)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut input = BytesMut::with_capacity(READ_SIZE);
    match stream.read_buf(&mut input).await {
        Ok(0) | Err(_) => return,
        Ok(_) => {}
    }
    if warden_http1::starts_like_h2(&input) {
        return hyper
            .serve(ReplayIo::new(input.freeze(), stream), counts)
            .await;
    }
    let mut conn = Connection {
        stream,
        input,
        out: Vec::with_capacity(READ_SIZE),
        counts,
    };
    loop {
        let Ok(next) = conn.answer_buffered().await else {
            return;
        };
        if conn.flush().await.is_err() {
            return;
        }
        match next {
            Next::Read if conn.input.len() < MAX_HEAD => {
                conn.input.reserve(READ_SIZE);
                match conn.stream.read_buf(&mut conn.input).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
            Next::Read | Next::Hyper => {
                let Connection {
                    stream,
                    input,
                    counts,
                    ..
                } = conn;
                return hyper
                    .serve(ReplayIo::new(input.freeze(), stream), counts)
                    .await;
            }
            Next::Close => {
                let _ = conn.stream.shutdown().await;
                return;
            }
        }
    }
}

/// What the connection does once the buffered requests are answered.
enum Next {
    /// Read more: the buffer ends with an incomplete request head, or nothing.
    Read,
    /// Hand the connection to hyper from the first unanswered request on.
    Hyper,
    /// The last answered request closes the connection.
    Close,
}

struct Connection<S> {
    stream: S,
    /// Read and not yet answered.
    input: BytesMut,
    /// Responses not yet written.
    out: Vec<u8>,
    counts: ConnectionCounts,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Answer every complete request in `input`, in order, into `out`.
    async fn answer_buffered(&mut self) -> io::Result<Next> {
        let date = http_date::now();
        loop {
            let mut slots = request_head::header_slots();
            let (reply, framing, len) = match request_head::parse(&self.input, &mut slots) {
                Parsed::Partial => return Ok(Next::Read),
                Parsed::Hyper => return Ok(Next::Hyper),
                Parsed::Fast(request) => {
                    let plan = Plan::new(request.path, request.query);
                    // Decided before counting: hyper counts the request it takes over.
                    if plan.needs_hyper() {
                        return Ok(Next::Hyper);
                    }
                    let framing = Framing {
                        http10: request.http10,
                        keep_alive: request.keep_alive,
                        head: request.method == Method::HEAD,
                    };
                    let reply = plan.reply(&request.method, &self.counts);
                    (reply, framing, request.len)
                }
            };
            self.input.advance(len);
            let large_body = h1_response::encode(&mut self.out, &reply, &framing, &date);
            if large_body > 0 || self.out.len() >= MAX_BUFFERED_OUTPUT {
                self.flush().await?;
                self.write_pattern(large_body).await?;
            }
            if !framing.keep_alive {
                return Ok(Next::Close);
            }
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    async fn write_pattern(&mut self, mut remaining: usize) -> io::Result<()> {
        while let Some(chunk) = next_pattern_chunk(&mut remaining) {
            self.stream.write_all(chunk).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
