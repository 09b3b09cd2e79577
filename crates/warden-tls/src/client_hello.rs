//! A ClientHello read without consuming it: the SNI (and ALPN) a connection asks for, decided
//! before anything is read off the socket, so a PASSTHROUGH server forwards the bytes untouched
//! and a terminating one hands the socket to rustls from its first byte. rustls' own parser
//! (`Acceptor`) reads the peeked copy.

use rustls::server::Acceptor;
use std::time::Duration;
use tokio::net::TcpStream;

/// A ClientHello larger than this is refused (rustls' own limit on a handshake message is
/// 64 KiB; real hellos, post-quantum key shares included, are under 2 KiB).
pub const MAX_HELLO: usize = 16 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    pub sni: Option<String>,
    pub alpn: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("not a TLS ClientHello")]
    NotTls,
    #[error("ClientHello larger than {MAX_HELLO} bytes")]
    TooLarge,
    #[error("connection closed before the ClientHello was complete")]
    Eof,
    #[error("no ClientHello within the timeout")]
    Timeout,
}

impl HelloError {
    /// The reason label of the handshake failure counter.
    pub fn reason(&self) -> &'static str {
        match self {
            HelloError::NotTls => "not_tls",
            HelloError::TooLarge => "hello_too_large",
            HelloError::Eof => "eof",
            HelloError::Timeout => "timeout",
        }
    }
}

/// Parse what has arrived so far: `Ok(None)` when the hello is not complete yet.
pub fn parse(bytes: &[u8]) -> Result<Option<Hello>, HelloError> {
    let mut acceptor = Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Err(HelloError::NotTls),
        }
    }
    match acceptor.accept() {
        Ok(None) => Ok(None),
        Ok(Some(accepted)) => {
            let hello = accepted.client_hello();
            Ok(Some(Hello {
                sni: hello.server_name().map(str::to_owned),
                alpn: hello
                    .alpn()
                    .map(|it| it.map(<[u8]>::to_vec).collect())
                    .unwrap_or_default(),
            }))
        }
        Err(_) => Err(HelloError::NotTls),
    }
}

/// Whether the first bytes are a TLS handshake record (PeerAuthentication PERMISSIVE tells TLS
/// from plaintext by this, as Envoy's tls_inspector does).
pub fn looks_like_tls(first: &[u8]) -> bool {
    first.len() >= 3 && first[0] == 0x16 && first[1] == 0x03
}

/// Wait for the whole ClientHello on `stream` (peeked, not read), up to `timeout`.
pub async fn peek(stream: &TcpStream, timeout: Duration) -> Result<Hello, HelloError> {
    let wait = async {
        // Most hellos fit in 2 KiB; the buffer grows to MAX_HELLO only for those that do not.
        let mut buf = vec![0u8; 2048];
        let mut seen = 0;
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return Err(HelloError::Eof),
                Ok(n) => n,
            };
            if n > seen {
                seen = n;
                if let Some(hello) = parse(&buf[..n])? {
                    return Ok(hello);
                }
                if n == buf.len() {
                    if buf.len() >= MAX_HELLO {
                        return Err(HelloError::TooLarge);
                    }
                    buf.resize(MAX_HELLO, 0);
                    continue;
                }
            }
            // Part of the hello is in: peek returns at once until more arrives.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or(Err(HelloError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_is_not_tls() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Err(HelloError::NotTls));
        assert!(!looks_like_tls(b"GET"));
        assert!(looks_like_tls(&[0x16, 0x03, 0x01, 0x02]));
        // A record header alone is not complete yet.
        assert_eq!(parse(&[0x16, 0x03, 0x01, 0x00, 0x40]), Ok(None));
    }
}
