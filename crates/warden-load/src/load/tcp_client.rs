//! TCP round trips: write the payload, read the same number of bytes back (an echo server).

use super::connect::connect;
use super::driver::{Client, Exchange};
use super::{RequestError, Shared};
use std::net::IpAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct TcpClient {
    source: Option<IpAddr>,
    stream: Option<TcpStream>,
    reply: Vec<u8>,
}

impl TcpClient {
    pub fn new(source: Option<IpAddr>, payload_len: usize) -> TcpClient {
        TcpClient {
            source,
            stream: None,
            reply: vec![0; payload_len],
        }
    }
}

impl Client for TcpClient {
    async fn exchange(
        &mut self,
        shared: &Shared,
        sockets: &mut u64,
    ) -> Result<Exchange, RequestError> {
        let stream = match &mut self.stream {
            Some(s) => s,
            None => {
                *sockets += 1;
                self.stream
                    .insert(connect(shared.target.addr, self.source).await?)
            }
        };
        let payload = &shared.template.body;
        stream.write_all(payload).await.map_err(RequestError::Io)?;
        stream
            .read_exact(&mut self.reply)
            .await
            .map_err(RequestError::Io)?;
        let n = payload.len() as u64;
        Ok(Exchange {
            status: None,
            sent: n,
            received: n,
        })
    }

    fn close(&mut self) {
        self.stream = None;
    }
}
