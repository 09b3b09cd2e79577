//! Shared by the tests that run `warden proxy` as a process: start it on free loopback ports
//! with a generated config, wait until ready, read its metrics and RSS; killed on drop.
#![allow(dead_code)]

pub mod atomic_writer;
pub mod kube_play;
pub mod podman;
pub mod pods;
pub mod schema;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use warden_testkit::{free_port, TempDir};

pub const WARDEN: &str = env!("CARGO_BIN_EXE_warden");

/// A Gateway on a free port whose VirtualService has the `routes` entries (`http:` items),
/// after the `extra` documents, written to `dir`; the file and the port.
pub fn write_config(dir: &TempDir, extra: &str, routes: &str) -> (std::path::PathBuf, u16) {
    let port = free_port().expect("a free port");
    let config = format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  servers:\n  - port: {{number: {port}, protocol: HTTP, name: http}}\n    hosts: [\"*\"]\n{extra}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n{routes}"
    );
    (
        dir.write("config.yaml", &config).expect("config written"),
        port,
    )
}

/// `warden proxy` with `args` that is expected to exit by itself (a refused start).
pub fn run_proxy_to_exit(config: &Path, args: &[&str]) -> Output {
    Command::new(WARDEN)
        .args(["proxy", "-c"])
        .arg(config)
        .args(["--admin", "127.0.0.1:0", "--no-watch"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("warden proxy runs")
}

/// A `warden proxy` child process, killed on drop.
pub struct Warden {
    child: Child,
    pub listener: SocketAddr,
    pub admin: SocketAddr,
    pub dir: TempDir,
}

impl Warden {
    /// Start with a Gateway on a free port whose routes are `routes` (VirtualService `http:`
    /// entries) after the `extra` documents; `args` are more flags.
    pub fn start(extra: &str, routes: &str, args: &[&str]) -> Warden {
        let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().expect("a free port")));
        let dir = TempDir::new("warden-proc").expect("temp dir");
        let (path, port) = write_config(&dir, extra, routes);
        let child = Command::new(WARDEN)
            .args(["proxy", "-c"])
            .arg(&path)
            .args(["--listen-host", "127.0.0.1", "--admin", &admin.to_string()])
            .args(["--concurrency", "2", "--no-watch"])
            .args(args)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("warden proxy starts");
        let w = Warden {
            child,
            listener: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            admin,
            dir,
        };
        let mut w = w;
        let deadline = Instant::now() + Duration::from_secs(20);
        while get(w.admin, "/ready").is_none_or(|r| !r.starts_with("HTTP/1.1 200")) {
            assert!(Instant::now() < deadline, "warden did not get ready");
            assert!(
                matches!(w.child.try_wait(), Ok(None)),
                "warden exited before it was ready"
            );
            thread::sleep(Duration::from_millis(50));
        }
        w
    }

    pub fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }

    /// The metric once it reaches `at_least`, or its value after `within`.
    pub fn metric_reaching(&self, series: &str, at_least: f64, within: Duration) -> f64 {
        let deadline = Instant::now() + within;
        loop {
            let v = self.metric(series);
            if v >= at_least || Instant::now() >= deadline {
                return v;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// A counter or gauge from `/stats/prometheus` (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        metric_in(
            &get(self.admin, "/stats/prometheus").unwrap_or_default(),
            series,
        )
    }
}

/// The value of `series` (its name and labels as printed) in a Prometheus text page; 0 when
/// absent.
pub fn metric_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

impl Drop for Warden {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One GET on a fresh connection (`Connection: close`); the whole response text.
pub fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
