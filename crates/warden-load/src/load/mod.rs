//! `warden load`: an HTTP/1.1, h2c and TCP load generator.
//!
//! One task per connection pulls requests from a shared [`schedule::Schedule`]; each records into
//! its own HdrHistogram, merged when the run ends. At a fixed rate latency counts from each
//! request's intended send time, so a stalled server shows in the percentiles.
//!
//! ```no_run
//! # async fn demo() -> Result<(), warden_load::load::LoadError> {
//! use warden_load::load::{run, LoadConfig};
//! let report = run(LoadConfig {
//!     target: "http://127.0.0.1:8080/?size=1024".into(),
//!     requests: Some(1000),
//!     duration: None,
//!     ..LoadConfig::default()
//! })
//! .await?;
//! println!("{}", report.to_text());
//! # Ok(()) }
//! ```

mod connect;
mod driver;
pub mod find_max;
mod h2_client;
mod http1_client;
mod progress;
pub mod schedule;
mod stats;
pub mod target;
mod tcp_client;

pub use target::{Protocol, Target};

use bytes::Bytes;
use h2_client::RequestTemplate;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use progress::Progress;
use schedule::Schedule;
use stats::ConnStats;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use crate::report::Report;

/// Payload of a TCP round trip when none is given (the size the seeds measure with).
pub const DEFAULT_TCP_PAYLOAD: usize = 1024;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `http://host:port/path`, `h2c://host:port/path` or `tcp://host:port`.
    pub target: String,
    /// Speak h2c to an `http://` target.
    pub http2: bool,
    pub connections: usize,
    /// Total requests per second over all connections; 0 = as fast as possible.
    pub qps: f64,
    /// Stop after this long (`None`: only the count stops the run).
    pub duration: Option<Duration>,
    /// Send exactly this many requests (`-n`).
    pub requests: Option<u64>,
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Request body (HTTP) or round-trip payload (TCP; empty = [`DEFAULT_TCP_PAYLOAD`] bytes).
    pub body: Bytes,
    /// Per request, from when it is actually sent (connect included).
    pub timeout: Duration,
    /// Bind client sockets to these addresses, connection `i` to `source_ips[i % len]`.
    pub source_ips: Vec<IpAddr>,
    pub keepalive: bool,
    /// Draw a progress line on stderr.
    pub progress: bool,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            target: String::new(),
            http2: false,
            connections: 16,
            qps: 0.0,
            duration: Some(Duration::from_secs(5)),
            requests: None,
            method: Method::GET,
            headers: Vec::new(),
            body: Bytes::new(),
            timeout: Duration::from_secs(10),
            source_ips: Vec::new(),
            keepalive: true,
            progress: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("target {url:?}: {reason}")]
    Target { url: String, reason: String },
    #[error("invalid load settings: {0}")]
    Config(String),
    #[error("a connection task failed")]
    Worker(#[from] tokio::task::JoinError),
}

/// Why one request failed; [`RequestError::kind`] is the key in the report's error table.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("socket: {0}")]
    Socket(std::io::Error),
    #[error("bind to source address: {0}")]
    Bind(std::io::Error),
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("http: {0}")]
    Http(hyper::Error),
    #[error("io: {0}")]
    Io(std::io::Error),
    #[error("invalid response: {0}")]
    Protocol(String),
}

impl RequestError {
    pub fn kind(&self) -> &'static str {
        use std::io::ErrorKind;
        match self {
            RequestError::Socket(_) => "socket error",
            RequestError::Bind(_) => "bind failed",
            RequestError::Connect(e) if e.kind() == ErrorKind::ConnectionRefused => {
                "connection refused"
            }
            RequestError::Connect(_) => "connect failed",
            RequestError::Http(e) if e.is_closed() || e.is_incomplete_message() => {
                "connection closed"
            }
            RequestError::Http(_) => "http error",
            RequestError::Io(e) if e.kind() == ErrorKind::UnexpectedEof => "connection closed",
            RequestError::Io(e) if e.kind() == ErrorKind::ConnectionReset => "connection reset",
            RequestError::Io(_) => "io error",
            RequestError::Protocol(_) => "invalid response",
        }
    }
}

/// What every connection task shares.
pub(crate) struct Shared {
    target: Target,
    connections: usize,
    schedule: Schedule,
    template: RequestTemplate,
    /// The HTTP/1.1 request as written on the wire.
    encoded_http1: Bytes,
    timeout: Duration,
    keepalive: bool,
    progress: Arc<Progress>,
}

fn validate(config: &LoadConfig) -> Result<(), LoadError> {
    let bad = |m: &str| Err(LoadError::Config(m.to_string()));
    if config.connections == 0 {
        return bad("connections must be at least 1");
    }
    if !config.qps.is_finite() || config.qps < 0.0 {
        return bad("qps must be a number >= 0 (0 = as fast as possible)");
    }
    if config.duration.is_none() && config.requests.is_none() {
        return bad("give a duration or a request count");
    }
    if config.duration.is_some_and(|d| d.is_zero()) {
        return bad("duration must be > 0");
    }
    if config.timeout.is_zero() {
        return bad("timeout must be > 0");
    }
    Ok(())
}

fn request_template(config: &LoadConfig, target: &Target) -> Result<RequestTemplate, LoadError> {
    let bad = |e: http::Error| LoadError::Target {
        url: target.url.clone(),
        reason: e.to_string(),
    };
    let uri: Uri = match target.protocol {
        // h2 needs scheme and authority for its pseudo-headers; h1 sends origin-form plus Host.
        Protocol::Http2 => format!("http://{}{}", target.authority, target.path_and_query)
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(e.into()))?,
        Protocol::Tcp => Uri::default(),
        Protocol::Http1 => target
            .path_and_query
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(e.into()))?,
    };
    let mut headers = HeaderMap::new();
    if target.protocol == Protocol::Http1 {
        let host = HeaderValue::try_from(target.authority.as_str()).map_err(|e| bad(e.into()))?;
        headers.insert(HOST, host);
        if !config.keepalive {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
    }
    headers.insert(USER_AGENT, HeaderValue::from_static("warden-load"));
    for (name, value) in &config.headers {
        // A user's Host / User-Agent replaces ours; other names may repeat.
        if name == HOST || name == USER_AGENT {
            headers.insert(name.clone(), value.clone());
        } else {
            headers.append(name.clone(), value.clone());
        }
    }
    let body = if target.protocol == Protocol::Tcp && config.body.is_empty() {
        Bytes::from(vec![b'x'; DEFAULT_TCP_PAYLOAD])
    } else {
        config.body.clone()
    };
    Ok(RequestTemplate {
        method: config.method.clone(),
        uri,
        headers,
        body,
    })
}

/// Run the load described by `config` on the current tokio runtime and report what happened.
pub async fn run(config: LoadConfig) -> Result<Report, LoadError> {
    validate(&config)?;
    let target = Target::resolve(&config.target, config.http2).await?;
    if let Some(ip) = config
        .source_ips
        .iter()
        .find(|ip| ip.is_ipv4() != target.addr.is_ipv4())
    {
        return Err(LoadError::Config(format!(
            "source address {ip} and target {} are of different IP families",
            target.addr
        )));
    }
    let template = request_template(&config, &target)?;
    let start_time = SystemTime::now();
    let start = Instant::now();
    let schedule = Schedule::new(start, config.qps, config.requests, config.duration);
    let expected = schedule.expected();
    let progress = Arc::new(Progress::new(config.progress));
    let shared = Arc::new(Shared {
        target: target.clone(),
        connections: config.connections,
        schedule,
        encoded_http1: http1_client::encode_request(&template),
        template,
        timeout: config.timeout,
        keepalive: config.keepalive,
        progress: progress.clone(),
    });
    let bar = progress::spawn(progress, start, expected, config.duration);
    let tasks: Vec<_> = (0..config.connections)
        .map(|i| {
            let source = (!config.source_ips.is_empty())
                .then(|| config.source_ips[i % config.source_ips.len()]);
            let shared = shared.clone();
            match target.protocol {
                Protocol::Tcp => {
                    let client = tcp_client::TcpClient::new(source, shared.template.body.len());
                    tokio::spawn(driver::run_connection(shared, client))
                }
                Protocol::Http1 => {
                    let client = http1_client::Http1Client::new(source);
                    tokio::spawn(driver::run_connection(shared, client))
                }
                Protocol::Http2 => {
                    let client = h2_client::H2Client::new(source);
                    tokio::spawn(driver::run_connection(shared, client))
                }
            }
        })
        .collect();
    let mut total = ConnStats::new(config.connections);
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(stats) => total.merge(&stats),
            Err(err) => failure = Some(err),
        }
    }
    let duration = start.elapsed();
    if let Some(bar) = bar {
        bar.abort();
        progress::clear();
    }
    if let Some(err) = failure {
        return Err(err.into());
    }
    Ok(Report {
        target: target.url,
        protocol: target.protocol,
        connections: config.connections,
        requested_qps: config.qps,
        requested_duration: config.duration,
        requested_requests: config.requests,
        start_time,
        duration,
        latency: total.latency,
        error_latency: total.error_latency,
        status_codes: total.status_codes,
        errors: total
            .errors
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        bytes_sent: total.bytes_sent,
        bytes_received: total.bytes_received,
        sockets: total.sockets,
        latency_corrected: config.qps > 0.0,
    })
}
