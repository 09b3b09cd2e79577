//! Command-line arguments of `warden load` and `warden echo`.

use crate::duration::parse_duration;
use crate::echo::{EchoConfig, EchoServer, COUNT_PATH};
use crate::load::{self, LoadConfig};
use anyhow::Context;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Target URL: http://host:port/path, h2c://host:port/path or tcp://host:port
    pub target: String,
    /// Connections (each sends one request at a time)
    #[arg(short = 'c', long, default_value_t = 16)]
    pub connections: usize,
    /// Total requests per second over all connections; 0 = as fast as possible
    #[arg(short = 'q', long, default_value_t = 0.0)]
    pub qps: f64,
    /// Duration (5s, 1m...); default 5s unless -n is given
    #[arg(short = 't', long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Send exactly this many requests
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// HTTP method (default GET, or POST when a body is given)
    #[arg(short = 'X', long)]
    pub method: Option<String>,
    /// Request header "Name: Value" (repeatable)
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body (HTTP) or payload (TCP)
    #[arg(short = 'd', long = "data", conflicts_with = "payload_size")]
    pub data: Option<String>,
    /// Body/payload of this many bytes
    #[arg(long)]
    pub payload_size: Option<usize>,
    /// Per-request timeout
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Worker threads (default: number of cores)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Bind client sockets to this source address; a comma list or repeats spread connections
    #[arg(long = "source-ip", value_delimiter = ',')]
    pub source_ips: Vec<IpAddr>,
    /// Open a new connection for every request
    #[arg(long)]
    pub no_keepalive: bool,
    /// Speak HTTP/2 (h2c, prior knowledge) to an http:// target
    #[arg(long)]
    pub http2: bool,
    /// Write the fortio-compatible JSON result to this file ("-" = stdout)
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress line
    #[arg(long)]
    pub quiet: bool,
    /// Find the highest fixed rate that passes: steps of -t each from --qps, x1.5 until one
    /// fails (over 0.1% errors, p99 over --max-p99, or under 95% of the rate achieved), then
    /// bisect
    #[arg(long)]
    pub find_max: bool,
    /// --find-max: the p99 bound a step must stay within
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub max_p99: Duration,
}

#[derive(clap::Args, Debug)]
pub struct EchoArgs {
    /// HTTP (h1 + h2c) listen address
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http: Option<SocketAddr>,
    /// TCP echo listen address (off unless given)
    #[arg(long)]
    pub tcp: Option<SocketAddr>,
    /// Worker threads (default: number of cores)
    #[arg(long)]
    pub threads: Option<usize>,
}

/// One thread: a current-thread runtime (no work-stealing overhead, like one nginx worker or one
/// wrk thread); otherwise a multi-thread runtime with `threads` workers (default: cores).
fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = match threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    builder
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

fn parse_header(text: &str) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let (name, value) = text
        .split_once(':')
        .with_context(|| format!("header {text:?} is not \"Name: Value\""))?;
    let name = HeaderName::try_from(name.trim())
        .with_context(|| format!("header name {name:?} is invalid"))?;
    let value = HeaderValue::try_from(value.trim())
        .with_context(|| format!("header value {value:?} is invalid"))?;
    Ok((name, value))
}

impl LoadArgs {
    fn to_config(&self) -> anyhow::Result<LoadConfig> {
        let body = match (&self.data, self.payload_size) {
            (Some(data), _) => Bytes::from(data.clone()),
            (None, Some(n)) => Bytes::from(vec![b'x'; n]),
            (None, None) => Bytes::new(),
        };
        let method = match &self.method {
            Some(m) => {
                Method::from_bytes(m.as_bytes()).with_context(|| format!("invalid method {m:?}"))?
            }
            None if !body.is_empty() => Method::POST,
            None => Method::GET,
        };
        let headers = self
            .headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<anyhow::Result<_>>()?;
        let duration = match (self.duration, self.requests) {
            (None, None) => Some(Duration::from_secs(5)),
            (d, _) => d,
        };
        Ok(LoadConfig {
            target: self.target.clone(),
            http2: self.http2,
            connections: self.connections,
            qps: self.qps,
            duration,
            requests: self.requests,
            method,
            headers,
            body,
            timeout: self.timeout,
            source_ips: self.source_ips.clone(),
            keepalive: !self.no_keepalive,
            progress: !self.quiet && std::io::stderr().is_terminal(),
        })
    }
}

pub fn run_load(args: LoadArgs) -> anyhow::Result<ExitCode> {
    let config = args.to_config()?;
    let rt = runtime(args.threads)?;
    if args.find_max {
        return run_find_max(&args, config, rt);
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let report = rt.block_on(load::run(config))?;
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    let text = format!("{}Threads      {threads}\n", report.to_text());
    if json_to_stdout {
        eprint!("{text}");
        println!("{}", report.to_json());
    } else {
        print!("{text}");
        if let Some(path) = &args.json {
            std::fs::write(path, report.to_json() + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if report.all_failed() {
        eprintln!("error: every request failed");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_find_max(
    args: &LoadArgs,
    config: LoadConfig,
    rt: tokio::runtime::Runtime,
) -> anyhow::Result<ExitCode> {
    let cfg = load::find_max::FindMaxConfig {
        start_qps: if args.qps > 0.0 { args.qps } else { 100.0 },
        p99_bound: args.max_p99,
        max_steps: 20,
    };
    let report = rt.block_on(load::find_max::find_max(config, cfg))?;
    match args.json.as_deref() {
        Some(p) if p == std::path::Path::new("-") => {
            eprint!("{}", report.to_text());
            println!("{}", report.to_json());
        }
        Some(p) => {
            print!("{}", report.to_text());
            std::fs::write(p, report.to_json() + "\n")
                .with_context(|| format!("writing {}", p.display()))?;
        }
        None => print!("{}", report.to_text()),
    }
    Ok(if report.best().is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn run_echo(args: EchoArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.http.is_some() || args.tcp.is_some(),
        "give --http and/or --tcp"
    );
    let rt = runtime(args.threads)?;
    rt.block_on(async {
        let server = EchoServer::start(EchoConfig {
            http: args.http,
            tcp: args.tcp,
        })
        .await
        .context("binding the echo listeners")?;
        if let Some(addr) = server.http_addr() {
            eprintln!("echo: http (h1 + h2c) on http://{addr}/  (counts: {COUNT_PATH})");
        }
        if let Some(addr) = server.tcp_addr() {
            eprintln!("echo: tcp on tcp://{addr}");
        }
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        server.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
