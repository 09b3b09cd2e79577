//! The fast path against hyper itself: the same requests on one connection served by each must
//! get byte-identical responses (the `date` value aside).

use super::*;
use crate::echo::counts::SourceCounts;
use bytes::Bytes;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use warden_http1::http_date;

/// Send `requests` in one write on a fresh connection served by the fast path or by hyper alone,
/// and return everything written back until the server closes.
async fn exchange(requests: &str, via_hyper: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let counts = Arc::new(SourceCounts::default()).for_connection(peer.ip());
        let hyper = HyperEcho::new();
        if via_hyper {
            hyper
                .serve(ReplayIo::new(Bytes::new(), stream), counts)
                .await;
        } else {
            serve(stream, counts, &hyper).await;
        }
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(requests.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    server.await.unwrap();
    without_dates(&String::from_utf8(got).unwrap())
}

fn without_dates(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\r\ndate: ") {
        let value = at + "\r\ndate: ".len();
        out.push_str(&rest[..value]);
        out.push_str("<date>");
        rest = &rest[value + http_date::DATE_LEN..];
    }
    out.push_str(rest);
    out
}

async fn assert_same_as_hyper(requests: &str) -> String {
    let fast = exchange(requests, false).await;
    let hyper = exchange(requests, true).await;
    assert_eq!(fast, hyper, "requests: {requests:?}");
    fast
}

#[tokio::test]
async fn answers_like_hyper() {
    // Every batch ends with a request that closes the connection, so both servers end it.
    let batches = [
        "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /x?size=10 HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /?status=418&header=X-A:1&header=X-B:2&header=x-a:3 HTTP/1.1\r\n\r\n\
         GET /?status=599&size=2&header=content-type:text/x HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /?status=204&size=5 HTTP/1.1\r\n\r\nGET /?status=304 HTTP/1.1\r\n\r\n\
         GET /?size=0 HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n",
        "HEAD /?size=10 HTTP/1.1\r\n\r\nHEAD / HTTP/1.1\r\n\r\nHEAD /count HTTP/1.1\r\n\r\n\
         GET /?size=100000 HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        "GET /?size=x HTTP/1.1\r\n\r\nGET /?delay=5 HTTP/1.1\r\n\r\n\
         POST /count HTTP/1.1\r\nContent-Length: 0\r\n\r\nGET /count HTTP/1.1\r\n\r\n\
         DELETE /count HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET /?size=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nHEAD / HTTP/1.0\r\n\r\n",
        // Handed to hyper mid-connection: a body, then a delay.
        "GET /?size=5 HTTP/1.1\r\n\r\n\
         POST /e HTTP/1.1\r\nContent-Type: text/x\r\nContent-Length: 5\r\n\r\nhello\
         GET /?delay=1ms HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\nConnection: close\r\n\r\n",
    ];
    for batch in batches {
        assert_same_as_hyper(batch).await;
    }
}

#[tokio::test]
async fn counts_every_request_but_count_itself() {
    let text = assert_same_as_hyper(
        "GET /a HTTP/1.1\r\n\r\nGET /b?size=x HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\n\r\n\
         GET /count HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    let reports: Vec<&str> = text
        .matches(r#"{"by_ip":{"127.0.0.1":2},"total":2}"#)
        .collect();
    assert_eq!(reports.len(), 2, "{text}");
}
