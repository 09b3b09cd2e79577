//! HTTP/1.1 client for load: the request is encoded once and written as-is; responses are parsed
//! with `httparse` (the parser inside hyper) and their bodies skipped, never collected.
//!
//! Why not hyper's client here: per request it allocates the request, its header map, a oneshot
//! and the response head, which made `warden load` ~25% slower than wrk against nginx on one
//! thread (measured with bench/load.sh). HTTP/2 still goes through hyper.

use super::connect::connect;
use super::driver::{Client, Exchange};
use super::h2_client::RequestTemplate;
use super::{RequestError, Shared};
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::Method;
use std::net::IpAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BUFFER: usize = 32 * 1024;
/// A response head larger than this is refused (hyper's default limit is similar).
const MAX_HEAD: usize = 256 * 1024;
const MAX_HEADERS: usize = 100;

/// Encode the request once: request line, headers, Content-Length when there is a body.
pub fn encode_request(template: &RequestTemplate) -> Bytes {
    let path = template.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Vec::with_capacity(256 + template.body.len());
    out.extend_from_slice(template.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &template.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let needs_length = !template.body.is_empty()
        || matches!(template.method, Method::POST | Method::PUT | Method::PATCH);
    if needs_length && !template.headers.contains_key(CONTENT_LENGTH) {
        out.extend_from_slice(format!("content-length: {}\r\n", template.body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&template.body);
    Bytes::from(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseSummary {
    pub status: u16,
    pub body_bytes: u64,
    pub keep_alive: bool,
}

enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

fn protocol(reason: impl Into<String>) -> RequestError {
    RequestError::Protocol(reason.into())
}

fn closed_early() -> RequestError {
    RequestError::Io(std::io::ErrorKind::UnexpectedEof.into())
}

/// Bytes read from the connection and not yet consumed: `buf[start..end]`.
pub struct ResponseReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ResponseReader {
    fn default() -> Self {
        ResponseReader {
            buf: vec![0; BUFFER],
            start: 0,
            end: 0,
        }
    }
}

impl ResponseReader {
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Read more; returns 0 at EOF.
    async fn fill<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Result<usize, RequestError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Err(protocol("response head too large"));
            }
        }
        let n = stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(RequestError::Io)?;
        self.end += n;
        Ok(n)
    }

    /// Read one response; its body is counted and dropped. 1xx interim responses are skipped.
    pub async fn read_response<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        head_request: bool,
    ) -> Result<ResponseSummary, RequestError> {
        loop {
            let (status, framing, keep_alive) = self.read_head(stream, head_request).await?;
            if (100..200).contains(&status) && status != 101 {
                continue;
            }
            let (body_bytes, keep_alive) = match framing {
                Framing::None => (0, keep_alive),
                Framing::Length(n) => {
                    self.skip(stream, n).await?;
                    (n, keep_alive)
                }
                Framing::Chunked => (self.skip_chunked(stream).await?, keep_alive),
                Framing::UntilClose => (self.skip_to_eof(stream).await?, false),
            };
            return Ok(ResponseSummary {
                status,
                body_bytes,
                keep_alive,
            });
        }
    }

    async fn read_head<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        head_request: bool,
    ) -> Result<(u16, Framing, bool), RequestError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(self.pending()) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let status = response.code.unwrap_or(0);
                    let http11 = response.version == Some(1);
                    let mut length = None;
                    let mut chunked = false;
                    let mut keep_alive = http11;
                    for h in response.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let text = std::str::from_utf8(h.value).unwrap_or("");
                            length = Some(
                                text.trim()
                                    .parse::<u64>()
                                    .map_err(|_| protocol("bad content-length"))?,
                            );
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = h.value.to_ascii_lowercase().ends_with(b"chunked");
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            let value = h.value.to_ascii_lowercase();
                            if value.windows(5).any(|w| w == b"close") {
                                keep_alive = false;
                            } else if value.windows(10).any(|w| w == b"keep-alive") {
                                keep_alive = true;
                            }
                        }
                    }
                    let framing = if head_request
                        || status == 204
                        || status == 304
                        || (100..200).contains(&status)
                    {
                        Framing::None
                    } else if chunked {
                        Framing::Chunked
                    } else if let Some(n) = length {
                        Framing::Length(n)
                    } else {
                        Framing::UntilClose
                    };
                    self.start += head_len;
                    return Ok((status, framing, keep_alive));
                }
                Ok(httparse::Status::Partial) => {
                    if self.fill(stream).await? == 0 {
                        return Err(closed_early());
                    }
                }
                Err(err) => return Err(protocol(format!("invalid response head: {err}"))),
            }
        }
    }

    async fn skip<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        mut n: u64,
    ) -> Result<(), RequestError> {
        loop {
            let take = n.min(self.pending().len() as u64);
            self.start += take as usize;
            n -= take;
            if n == 0 {
                return Ok(());
            }
            if self.fill(stream).await? == 0 {
                return Err(closed_early());
            }
        }
    }

    async fn skip_chunked<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<u64, RequestError> {
        let mut total = 0;
        loop {
            match httparse::parse_chunk_size(self.pending()) {
                Ok(httparse::Status::Complete((used, 0))) => {
                    self.start += used;
                    self.skip_trailers(stream).await?;
                    return Ok(total);
                }
                Ok(httparse::Status::Complete((used, size))) => {
                    self.start += used;
                    // The chunk and its CRLF.
                    self.skip(stream, size + 2).await?;
                    total += size;
                }
                Ok(httparse::Status::Partial) => {
                    if self.fill(stream).await? == 0 {
                        return Err(closed_early());
                    }
                }
                Err(_) => return Err(protocol("invalid chunk size")),
            }
        }
    }

    /// Trailer lines up to and including the empty line.
    async fn skip_trailers<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), RequestError> {
        loop {
            match self.pending().windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.start += 2;
                    return Ok(());
                }
                Some(line) => self.start += line + 2,
                None => {
                    if self.fill(stream).await? == 0 {
                        return Err(closed_early());
                    }
                }
            }
        }
    }

    async fn skip_to_eof<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<u64, RequestError> {
        let mut total = self.pending().len() as u64;
        self.start = self.end;
        loop {
            let n = self.fill(stream).await? as u64;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            self.start = self.end;
        }
    }
}

pub struct Http1Client {
    source: Option<IpAddr>,
    conn: Option<(TcpStream, ResponseReader)>,
}

impl Http1Client {
    pub fn new(source: Option<IpAddr>) -> Http1Client {
        Http1Client { source, conn: None }
    }
}

impl Client for Http1Client {
    async fn exchange(
        &mut self,
        shared: &Shared,
        sockets: &mut u64,
    ) -> Result<Exchange, RequestError> {
        let (stream, reader) = match &mut self.conn {
            Some(conn) => conn,
            None => {
                *sockets += 1;
                let stream = connect(shared.target.addr, self.source).await?;
                self.conn.insert((stream, ResponseReader::default()))
            }
        };
        stream
            .write_all(&shared.encoded_http1)
            .await
            .map_err(RequestError::Io)?;
        let head_request = shared.template.method == Method::HEAD;
        let response = reader.read_response(stream, head_request).await?;
        if !response.keep_alive {
            self.conn = None;
        }
        Ok(Exchange {
            status: Some(response.status),
            sent: shared.template.body.len() as u64,
            received: response.body_bytes,
        })
    }

    fn close(&mut self) {
        self.conn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};
    use tokio::io::AsyncWriteExt;

    async fn read_all(wire: &[u8], head: bool) -> Vec<Result<ResponseSummary, String>> {
        let (mut client, mut server) = tokio::io::duplex(7);
        let wire = wire.to_vec();
        let writer = tokio::spawn(async move {
            // Tiny writes: every parser state must survive a split anywhere.
            for chunk in wire.chunks(5) {
                if server.write_all(chunk).await.is_err() {
                    return; // the reader gave up (expected for garbage input)
                }
            }
        });
        let mut reader = ResponseReader::default();
        let mut out = Vec::new();
        loop {
            let r = reader.read_response(&mut client, head).await;
            let done = r.is_err()
                || matches!(
                    r,
                    Ok(ResponseSummary {
                        keep_alive: false,
                        ..
                    })
                );
            out.push(r.map_err(|e| e.kind().to_string()));
            if done {
                break;
            }
        }
        drop(client);
        writer.await.unwrap();
        out
    }

    fn ok(status: u16, body_bytes: u64, keep_alive: bool) -> Result<ResponseSummary, String> {
        Ok(ResponseSummary {
            status,
            body_bytes,
            keep_alive,
        })
    }

    #[tokio::test]
    async fn reads_length_chunked_interim_and_close_delimited_responses() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n\
HTTP/1.1 204 No Content\r\n\r\n\
HTTP/1.0 200 OK\r\n\r\nuntil the end";
        assert_eq!(
            read_all(wire, false).await,
            vec![
                ok(200, 5, true),
                ok(503, 19, true),
                ok(204, 0, true),
                ok(200, 13, false)
            ]
        );
    }

    #[tokio::test]
    async fn connection_close_and_head_requests() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n\
HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(
            read_all(wire, true).await,
            vec![ok(200, 0, true), ok(200, 0, false)]
        );
    }

    #[tokio::test]
    async fn truncated_and_garbage_responses_are_errors() {
        let truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort";
        assert_eq!(
            read_all(truncated, false).await,
            vec![Err("connection closed".to_string())]
        );
        let garbage = b"SSH-2.0-OpenSSH\r\n\r\n";
        assert_eq!(
            read_all(garbage, false).await,
            vec![Err("invalid response".to_string())]
        );
    }

    #[test]
    fn encodes_the_request_once() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("a:1"));
        headers.append("x-k", HeaderValue::from_static("v"));
        let template = RequestTemplate {
            method: Method::POST,
            uri: "/p?q=1".parse().unwrap(),
            headers,
            body: Bytes::from_static(b"data"),
        };
        assert_eq!(
            encode_request(&template),
            &b"POST /p?q=1 HTTP/1.1\r\nhost: a:1\r\nx-k: v\r\ncontent-length: 4\r\n\r\ndata"[..]
        );
    }
}
