//! The echo server's HTTP/1.1 fast path over raw sockets: pipelining, HEAD, closing, errors,
//! counting, and the hand-over to hyper in the middle of a connection.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_load::echo::{EchoConfig, EchoServer};

async fn start() -> (EchoServer, SocketAddr) {
    let echo = EchoServer::start(EchoConfig::loopback()).await.unwrap();
    let addr = echo.http_addr().unwrap();
    (echo, addr)
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads responses with `content-length` framing (all the echo server sends for these tests).
struct Reader {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    async fn connect(addr: SocketAddr) -> Reader {
        Reader {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// A new connection that has sent `requests`.
    async fn sending(addr: SocketAddr, requests: &str) -> Reader {
        let mut conn = Reader::connect(addr).await;
        conn.send(requests).await;
        conn
    }

    /// A new connection that has sent `requests`, and the response to the first of them.
    async fn first_response(addr: SocketAddr, requests: &str, head: bool) -> (Reader, Response) {
        let mut conn = Reader::sending(addr, requests).await;
        let response = conn.response(head).await;
        (conn, response)
    }

    async fn send(&mut self, bytes: &str) {
        self.stream.write_all(bytes.as_bytes()).await.unwrap();
    }

    async fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
            .await
            .expect("response within 10s")
            .unwrap();
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// The next response; `head_request` when it answers a HEAD (no body follows).
    async fn response(&mut self, head_request: bool) -> Response {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head_len) = parsed.parse(&self.buf).unwrap() {
                let status = parsed.code.unwrap();
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| {
                        let value = String::from_utf8(h.value.to_vec()).unwrap();
                        (h.name.to_ascii_lowercase(), value)
                    })
                    .collect();
                let length = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
                let body_len = if head_request { 0 } else { length };
                while self.buf.len() < head_len + body_len {
                    assert!(self.fill().await > 0, "closed inside a body");
                }
                let body = self.buf[head_len..head_len + body_len].to_vec();
                self.buf.drain(..head_len + body_len);
                return Response {
                    status,
                    headers,
                    body,
                };
            }
            assert!(self.fill().await > 0, "closed before a response");
        }
    }

    /// Whether the server closed the connection with nothing more to read. A reset counts: the
    /// server closes with the unanswered request unread, which the kernel may answer with RST.
    async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut byte))
            .await
            .expect("closed within 10s");
        self.buf.is_empty() && !matches!(read, Ok(1))
    }
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (echo, addr) = start().await;
    let mut conn = Reader::sending(
        addr,
        "GET /?size=1 HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /?size=2&status=201 HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /?size=3&header=X-N:3 HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await;
    let first = conn.response(false).await;
    let second = conn.response(false).await;
    let third = conn.response(false).await;
    assert_eq!((first.status, first.body.as_slice()), (200, &b"0"[..]));
    assert_eq!((second.status, second.body.as_slice()), (201, &b"01"[..]));
    assert_eq!((third.status, third.body.as_slice()), (200, &b"012"[..]));
    assert_eq!(third.header("x-n"), Some("3"));
    assert!(first.header("date").is_some());
    assert_eq!(echo.total(), 3);
}

#[tokio::test]
async fn a_request_body_hands_the_connection_to_hyper() {
    let (echo, addr) = start().await;
    let mut conn = Reader::connect(addr).await;
    // Answered by the fast path, then in one write: fast path, a body (hyper from here on), and
    // a plain GET that hyper now answers on the same connection.
    conn.send("GET /?size=4 HTTP/1.1\r\n\r\n").await;
    assert_eq!(conn.response(false).await.body, b"0123");
    conn.send(
        "GET /?size=2 HTTP/1.1\r\n\r\n\
         POST /echo HTTP/1.1\r\nContent-Type: text/x\r\nContent-Length: 11\r\n\r\nhello there\
         GET /?size=1 HTTP/1.1\r\n\r\n",
    )
    .await;
    assert_eq!(conn.response(false).await.body, b"01");
    let echoed = conn.response(false).await;
    assert_eq!(echoed.body, b"hello there");
    assert_eq!(echoed.header("content-type"), Some("text/x"));
    assert_eq!(conn.response(false).await.body, b"0");
    // And again with the body arriving after the head.
    conn.send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\n")
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    conn.send("later").await;
    assert_eq!(conn.response(false).await.body, b"later");
    assert_eq!(echo.total(), 5);
}

#[tokio::test]
async fn head_gets_headers_without_a_body() {
    let (_echo, addr) = start().await;
    // Had the HEAD response carried a body, the GET's status line would read pattern bytes.
    let (mut conn, head) = Reader::first_response(
        addr,
        "HEAD /?size=100 HTTP/1.1\r\n\r\nGET /?size=2 HTTP/1.1\r\n\r\n",
        true,
    )
    .await;
    assert_eq!(head.header("content-length"), Some("100"));
    let get = conn.response(false).await;
    assert_eq!((get.status, get.body.as_slice()), (200, &b"01"[..]));
}

#[tokio::test]
async fn connection_close_and_http10_close_after_the_response() {
    let (_echo, addr) = start().await;
    let requests = "GET /?size=1 HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    let (mut conn, r) = Reader::first_response(addr, requests, false).await;
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        conn.closed().await,
        "the request after Connection: close is not answered"
    );

    let requests = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let (mut conn, r) = Reader::first_response(addr, requests, false).await;
    assert_eq!(r.header("connection"), Some("keep-alive"));
    conn.send("GET /?size=1 HTTP/1.0\r\n\r\n").await;
    assert_eq!(conn.response(false).await.body, b"0");
    assert!(conn.closed().await);
}

#[tokio::test]
async fn bad_parameter_gets_400() {
    let (echo, addr) = start().await;
    let mut conn = Reader::sending(addr, "GET /?status=42 HTTP/1.1\r\n\r\n").await;
    let r = conn.response(false).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let text = String::from_utf8(r.body).unwrap();
    assert_eq!(
        text,
        "bad echo parameter status: 42 is not a final status code (200..=999)\n"
    );
    assert_eq!(echo.total(), 1);
}

#[tokio::test]
async fn count_endpoint_counts_fast_path_requests_but_not_itself() {
    let (echo, addr) = start().await;
    let mut conn = Reader::sending(
        addr,
        "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\n\r\n\
         HEAD /c HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\n\r\n",
    )
    .await;
    conn.response(false).await;
    conn.response(false).await;
    let first: serde_json::Value =
        serde_json::from_slice(&conn.response(false).await.body).unwrap();
    conn.response(true).await;
    let second: serde_json::Value =
        serde_json::from_slice(&conn.response(false).await.body).unwrap();
    assert_eq!(first["by_ip"]["127.0.0.1"], 2);
    assert_eq!(first["total"], 2);
    assert_eq!(second["by_ip"]["127.0.0.1"], 3);
    conn.send("DELETE /count HTTP/1.1\r\n\r\nPUT /count HTTP/1.1\r\n\r\n")
        .await;
    let before_reset: serde_json::Value =
        serde_json::from_slice(&conn.response(false).await.body).unwrap();
    assert_eq!(before_reset["total"], 3);
    let refused = conn.response(false).await;
    assert_eq!(refused.status, 405);
    assert_eq!(refused.header("allow"), Some("GET, HEAD, DELETE"));
    assert_eq!(echo.total(), 0);
}

#[tokio::test]
async fn h2c_after_a_split_preface_is_served_by_hyper() {
    let (echo, addr) = start().await;
    // The first read may end inside the preface; that alone must send the connection to hyper.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"PRI * HT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream
        .write_all(b"TP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    // hyper's h2 server answers the preface and the empty SETTINGS with its own SETTINGS frame.
    let mut frame_head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut frame_head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frame_head[3], 0x4, "a SETTINGS frame");
    assert_eq!(echo.total(), 0);
}
