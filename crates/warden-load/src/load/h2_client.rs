//! HTTP/2 (h2c, prior knowledge) through hyper's client connection.
//!
//! The hyper connection future is polled in the same task as the request (not spawned), so a
//! request/response costs no cross-task wake-ups.

use super::connect::connect;
use super::driver::{Client, Exchange};
use super::{RequestError, Shared};
use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

/// The request every send clones: built once, before the run starts.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RequestTemplate {
    fn build(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

struct Connection {
    sender: http2::SendRequest<Full<Bytes>>,
    driver: Driver,
    closed: bool,
}

impl Connection {
    /// False once the server closed the connection (GOAWAY or EOF).
    fn is_usable(&mut self) -> bool {
        if !self.closed && self.driver.as_mut().now_or_never().is_some() {
            self.closed = true;
        }
        !self.closed && !self.sender.is_closed()
    }
}

pub struct H2Client {
    source: Option<IpAddr>,
    conn: Option<Connection>,
}

impl H2Client {
    pub fn new(source: Option<IpAddr>) -> H2Client {
        H2Client { source, conn: None }
    }
}

impl Client for H2Client {
    async fn exchange(
        &mut self,
        shared: &Shared,
        sockets: &mut u64,
    ) -> Result<Exchange, RequestError> {
        if self.conn.as_mut().is_some_and(|c| !c.is_usable()) {
            self.conn = None;
        }
        let conn = match &mut self.conn {
            Some(c) => c,
            None => {
                *sockets += 1;
                let io = TokioIo::new(connect(shared.target.addr, self.source).await?);
                let (sender, driver) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(RequestError::Http)?;
                self.conn.insert(Connection {
                    sender,
                    driver: Box::pin(driver),
                    closed: false,
                })
            }
        };
        let Connection {
            sender,
            driver,
            closed,
        } = conn;
        let request = shared.template.build();
        let exchange = async move {
            sender.ready().await.map_err(RequestError::Http)?;
            let response = sender
                .send_request(request)
                .await
                .map_err(RequestError::Http)?;
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut received = 0u64;
            while let Some(frame) = body.frame().await {
                if let Some(data) = frame.map_err(RequestError::Http)?.data_ref() {
                    received += data.len() as u64;
                }
            }
            Ok((status, received))
        };
        tokio::pin!(exchange);
        let (status, received) = loop {
            tokio::select! {
                biased;
                out = &mut exchange => break out?,
                // The exchange fails by itself once the connection is gone.
                _ = driver.as_mut(), if !*closed => *closed = true,
            }
        };
        Ok(Exchange {
            status: Some(status),
            sent: shared.template.body.len() as u64,
            received,
        })
    }

    fn close(&mut self) {
        self.conn = None;
    }
}
