//! What the machine is and how busy it is: the description in results.json, "background busy"
//! (bench_header's one-second sample of /proc/stat), per-CPU busy during a run and a process's
//! CPU time (the server's cost per request).

use crate::model::{Machine, Peer};
use std::time::Duration;

/// The peers the seeds compare with, looked up on PATH. (Seed 000's `ab -c 1000` shape is sent
/// by `warden load -c 1000`, whose HdrHistogram the report needs, so ab is not one.)
pub const PEERS: [&str; 4] = ["nginx", "haproxy", "redis-server", "taskset"];

/// Per-CPU jiffies from /proc/stat (`cpuN` lines): (total, idle + iowait).
#[derive(Debug, Clone)]
pub struct CpuSample(Vec<(u64, u64)>);

impl CpuSample {
    pub fn take() -> CpuSample {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CpuSample(
            text.lines()
                .filter(|l| {
                    l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
                })
                .map(|l| {
                    let v: Vec<u64> = l
                        .split_whitespace()
                        .skip(1)
                        .take(8)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                    (v.iter().sum(), idle)
                })
                .collect(),
        )
    }

    /// Busy percent of each CPU since `self`.
    pub fn busy_since(&self) -> Vec<f64> {
        let now = CpuSample::take();
        self.0
            .iter()
            .zip(now.0.iter())
            .map(|((t0, i0), (t1, i1))| {
                let total = t1.saturating_sub(*t0).max(1) as f64;
                let idle = i1.saturating_sub(*i0) as f64;
                (100.0 * (total - idle) / total).clamp(0.0, 100.0)
            })
            .collect()
    }
}

/// Percent of all CPUs busy during one second, before load starts.
pub fn background_busy() -> f64 {
    let before = CpuSample::take();
    std::thread::sleep(Duration::from_secs(1));
    let per_cpu = before.busy_since();
    if per_cpu.is_empty() {
        return 0.0;
    }
    per_cpu.iter().sum::<f64>() / per_cpu.len() as f64
}

/// User + system CPU seconds `pid` has used so far (fields 14 and 15 of /proc/PID/stat, read
/// after the command name, which may hold spaces).
#[allow(unsafe_code)]
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

/// Resident memory of `pid` in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[allow(unsafe_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn first_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            // nginx prints its version on stderr.
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

fn find_on_path(tool: &str) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin"])
        .map(|d| std::path::Path::new(d).join(tool))
        .find(|p| p.is_file());
    found.map(|p| p.display().to_string())
}

/// Describe the machine and look up the peers (their versions as they print them).
pub fn describe(pinned: bool) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let memory_mib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut peers = Vec::new();
    let mut missing_peers = Vec::new();
    for name in PEERS {
        match find_on_path(name) {
            Some(path) => {
                let version = match name {
                    "nginx" => first_line(name, &["-v"]),
                    "haproxy" => first_line(name, &["-v"]),
                    "redis-server" => first_line(name, &["--version"]),
                    _ => first_line(name, &["--version"]),
                };
                peers.push(Peer {
                    name: name.to_string(),
                    path,
                    version,
                });
            }
            None => missing_peers.push(name.to_string()),
        }
    }
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        kernel,
        memory_mib,
        background_busy_pct: background_busy(),
        pinned,
        root: is_root(),
        peers,
        missing_peers,
    }
}
