//! `warden demo`: the source articles' scenarios (docs/demo.md) end to end on loopback, on
//! embedded defaults.
//!
//! Starts an echo upstream (warden-load) and a gateway (warden-proxy) from an embedded config on
//! free loopback ports, drives traffic through it with the load generator, and prints what the
//! clients got next to what reached the upstream. Each capability adds one scenario module.

mod authz;
mod gateway;
mod global_rate_limit;
mod local_rate_limit;
mod traffic;

/// `println!` to a stdout that may be closed early (`warden demo | head`): `println!` panics on
/// the broken pipe, where a command-line tool should stop writing quietly.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::demo::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Write to stdout, ignoring a reader that has gone away (the demo's checks still decide the
/// exit code).
pub fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(text).and_then(|()| out.flush());
}

use std::process::ExitCode;
use std::time::Duration;

use warden_load::echo::{EchoConfig, EchoServer};
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Print the embedded config and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// What every scenario gets: the running gateway and upstream, and where to send traffic.
pub struct Stage {
    pub proxy: RunningProxy,
    pub echo: EchoServer,
    /// `http://127.0.0.1:PORT` of the gateway's HTTP listener.
    pub gateway_url: String,
}

impl Stage {
    /// The value of the gateway's Prometheus sample whose line starts with `line_prefix`
    /// (name and labels, then a space); 0 when absent.
    pub fn metric(&self, line_prefix: &str) -> u64 {
        self.proxy
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(line_prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }
}

/// Outcome of one scenario: a line per check, and whether any failed.
#[derive(Default)]
pub struct Outcome {
    pub lines: Vec<String>,
    failed: bool,
}

impl Outcome {
    pub fn check(&mut self, ok: bool, line: String) {
        self.lines
            .push(format!("  [{}] {line}", if ok { "ok" } else { "FAIL" }));
        self.failed |= !ok;
    }

    pub fn ok(&self) -> bool {
        !self.failed
    }
}

/// The embedded config; `{ECHO}` is replaced by the echo upstream's port.
fn embedded_config(echo_port: u16) -> String {
    [
        gateway::CONFIG,
        global_rate_limit::CONFIG,
        &authz::config(),
        local_rate_limit::CONFIG,
    ]
    .join("\n---\n")
    .replace("{ECHO}", &echo_port.to_string())
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.print_config {
        say!("{}", embedded_config(8081));
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_scenarios())
}

async fn run_scenarios() -> anyhow::Result<ExitCode> {
    let echo = EchoServer::start(EchoConfig {
        http: Some(([127, 0, 0, 1], 0).into()),
        tcp: None,
    })
    .await?;
    let echo_addr = echo
        .http_addr()
        .ok_or_else(|| anyhow::anyhow!("echo server has no HTTP address"))?;
    let mut options = ProxyOptions::loopback(ConfigSource::Inline {
        name: "<demo>".into(),
        text: embedded_config(echo_addr.port()),
    });
    options.concurrency = 1;
    let proxy = Proxy::start(options)?;
    let listener = proxy
        .listeners()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("demo gateway has no listener"))?;
    say!("warden demo: everything on loopback, no external service");
    say!(
        "  gateway  http://{}  (embedded config: `warden demo --print-config`)",
        listener.addr
    );
    say!("  upstream http://{echo_addr}  (warden echo)");
    if let Some(admin) = proxy.admin_addr() {
        say!("  admin    http://{admin}/stats/prometheus");
    }
    let stage = Stage {
        gateway_url: format!("http://{}", listener.addr),
        proxy,
        echo,
    };

    let scenarios: [(&str, &str, Outcome); 4] = [
        (
            "gateway",
            "routing and direct response (seed 001's gateway)",
            gateway::run(&stage).await?,
        ),
        (
            "global-rate-limit",
            "seed 000's global limit per IP on the embedded rate limit service",
            global_rate_limit::run(&stage).await?,
        ),
        (
            "authz",
            "seed 001's 100k-address allowlist (AuthorizationPolicy ipBlocks) on /authz",
            authz::run(&stage).await?,
        ),
        (
            "local-rate-limit",
            "seed 000's local limit: 300 per client IP on /limited, the 301st gets 429",
            local_rate_limit::run(&stage).await?,
        ),
    ];
    let mut all_ok = true;
    for (name, what, outcome) in &scenarios {
        say!("\n[{name}] {what}");
        for line in &outcome.lines {
            say!("{line}");
        }
        all_ok &= outcome.ok();
    }
    let Stage { proxy, echo, .. } = stage;
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(2))).await?;
    echo.shutdown().await;
    say!(
        "\n{}",
        if all_ok {
            "demo: all checks passed"
        } else {
            "demo: SOME CHECKS FAILED"
        }
    );
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
