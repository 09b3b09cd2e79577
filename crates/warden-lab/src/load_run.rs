//! One measured run: `warden load ... --json FILE` as a child process on the client's core
//! (through a namespace prefix for pods), the server's CPU time around it, per-CPU busy, and
//! the fortio-style JSON read back into a [`RunResult`].

use crate::machine::{cpu_seconds, CpuSample};
use crate::model::{FindMaxStep, RunResult};
use crate::process::{command_line, Lab};
use anyhow::Context;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How to drive a case.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub url: String,
    pub connections: usize,
    pub duration: Duration,
    pub keepalive: bool,
    /// TCP payload size (`--payload-size`).
    pub payload_size: Option<usize>,
    /// `warden load --find-max`: ramp the rate until errors or the p99 bound.
    pub find_max: Option<FindMax>,
    /// Leading argv that puts the client where it must run (e.g. `nsenter --net=... --`).
    pub prefix: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct FindMax {
    pub start_qps: f64,
    pub p99_bound: Duration,
}

impl LoadSpec {
    pub fn closed_loop(url: String, connections: usize, duration: Duration) -> LoadSpec {
        LoadSpec {
            url,
            connections,
            duration,
            keepalive: true,
            payload_size: None,
            find_max: None,
            prefix: Vec::new(),
        }
    }

    fn command(&self, lab: &Lab, json: &std::path::Path) -> Command {
        let mut argv: Vec<String> = self.prefix.clone();
        // The client's core (bench/lib/common.sh's CLIENT_CPU).
        if lab.pinned {
            argv.extend(["taskset", "-c", "1"].map(String::from));
        }
        argv.push(lab.warden.display().to_string());
        argv.extend(["load".into(), self.url.clone()]);
        argv.extend(["-c".into(), self.connections.to_string()]);
        argv.extend([
            "-t".into(),
            format!("{}ms", self.duration.as_millis().max(1)),
        ]);
        argv.extend(["--threads".into(), "1".into()]);
        if !self.keepalive {
            argv.push("--no-keepalive".into());
        }
        if let Some(n) = self.payload_size {
            argv.extend(["--payload-size".into(), n.to_string()]);
        }
        if let Some(f) = self.find_max {
            argv.push("--find-max".into());
            argv.extend(["--qps".into(), format!("{}", f.start_qps)]);
            argv.extend(["--max-p99".into(), format!("{}ms", f.p99_bound.as_millis())]);
        }
        argv.extend([
            "--quiet".into(),
            "--json".into(),
            json.display().to_string(),
        ]);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    }
}

/// Run the load once while sampling `server_pids`' CPU time.
pub fn run_once(
    lab: &Lab,
    spec: &LoadSpec,
    server_pids: &[u32],
    round: usize,
) -> anyhow::Result<RunResult> {
    let json_path = lab.dir().join("run.json");
    let _ = std::fs::remove_file(&json_path);
    let mut cmd = spec.command(lab, &json_path);
    let line = command_line(&cmd);
    lab.record(line.clone());
    let cpu0: Vec<Option<f64>> = server_pids.iter().map(|p| cpu_seconds(*p)).collect();
    let busy0 = CpuSample::take();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {line}"))?;
    let busy = busy0.busy_since();
    let cpu_used: Option<f64> = server_pids
        .iter()
        .zip(cpu0)
        .map(|(p, c0)| Some(cpu_seconds(*p)? - c0?))
        .sum();
    let text = std::fs::read_to_string(&json_path).with_context(|| {
        format!(
            "`{line}` wrote no result ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let json: Value = serde_json::from_str(&text).context("reading warden load's JSON")?;
    let mut run = parse(&json, round)?;
    run.cpu_busy_pct = busy;
    run.command = line;
    // find-max: the CPU of every step, but only the best step's requests; not a per-request cost.
    if !server_pids.is_empty() && run.steps.is_empty() {
        run.cpu_us_per_req = cpu_used.map(|s| s * 1e6 / (run.requests.max(1) as f64));
    }
    Ok(run)
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// A fortio-style result (or `--find-max`'s, whose `Best` is one) as a [`RunResult`].
pub fn parse(json: &Value, round: usize) -> anyhow::Result<RunResult> {
    let (best, max_qps, steps) = match json.get("MaxQPS") {
        Some(max) => {
            let steps = json
                .get("Steps")
                .and_then(Value::as_array)
                .map(|s| {
                    s.iter()
                        .map(|s| FindMaxStep {
                            requested_qps: f(s, "RequestedQPS"),
                            actual_qps: f(s, "ActualQPS"),
                            p99_ms: f(s, "P99") * 1000.0,
                            errors: s.get("Errors").and_then(Value::as_u64).unwrap_or(0),
                            passed: s.get("Passed").and_then(Value::as_bool).unwrap_or(false),
                        })
                        .collect()
                })
                .unwrap_or_default();
            (
                json.get("Best").cloned().unwrap_or(Value::Null),
                max.as_f64(),
                steps,
            )
        }
        None => (json.clone(), None, Vec::new()),
    };
    if best.is_null() && max_qps.is_some() {
        // find-max: not even the first rate passed; the steps say why.
        return Ok(RunResult {
            round,
            rps: 0.0,
            requests: 0,
            errors: steps.iter().map(|s: &FindMaxStep| s.errors).sum(),
            codes: Default::default(),
            p50_ms: 0.0,
            p90_ms: 0.0,
            p99_ms: steps.first().map_or(0.0, |s| s.p99_ms),
            avg_ms: 0.0,
            cdf: Vec::new(),
            cpu_us_per_req: None,
            cpu_busy_pct: Vec::new(),
            steps,
            command: String::new(),
        });
    }
    let hist = best
        .get("DurationHistogram")
        .context("no DurationHistogram in warden load's JSON")?;
    let pct = |p: f64| -> f64 {
        hist.get("Percentiles")
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .find(|x| (f(x, "Percentile") - p).abs() < 1e-9)
                    .map(|x| f(x, "Value") * 1000.0)
            })
            .unwrap_or(0.0)
    };
    let mut cdf: Vec<(f64, f64)> = Vec::new();
    if let Some(data) = hist.get("Data").and_then(Value::as_array) {
        if let Some(first) = data.first() {
            cdf.push((f(first, "Start") * 1000.0, 0.0));
        }
        cdf.extend(data.iter().map(|b| (f(b, "End") * 1000.0, f(b, "Percent"))));
    }
    if let Some(ps) = hist.get("Percentiles").and_then(Value::as_array) {
        cdf.extend(
            ps.iter()
                .map(|x| (f(x, "Value") * 1000.0, f(x, "Percentile"))),
        );
    }
    cdf.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // A CDF never goes down: bucket ends and percentiles interleave.
    let mut top = 0.0f64;
    for p in &mut cdf {
        top = top.max(p.1);
        p.1 = top;
    }
    let codes: std::collections::BTreeMap<String, u64> = best
        .get("RetCodes")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let extras = best.get("Warden").cloned().unwrap_or(Value::Null);
    let requests = extras
        .get("Requests")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| codes.values().sum());
    let errors = extras.get("Failed").and_then(Value::as_u64).unwrap_or(0);
    Ok(RunResult {
        round,
        rps: max_qps.unwrap_or_else(|| f(&best, "ActualQPS")),
        requests,
        errors,
        codes,
        p50_ms: pct(50.0),
        p90_ms: pct(90.0),
        p99_ms: pct(99.0),
        avg_ms: f(hist, "Avg") * 1000.0,
        cdf,
        cpu_us_per_req: None,
        cpu_busy_pct: Vec::new(),
        steps,
        command: String::new(),
    })
}
