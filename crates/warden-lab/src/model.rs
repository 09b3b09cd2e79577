//! results.json: every raw number a lab run measured, the machine it ran on, the versions of
//! the programs it compared and the commands it ran. The report is rendered from this alone.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabResults {
    /// `warden --version` of the binary that ran the lab.
    pub warden_version: String,
    /// RFC 3339 UTC.
    pub started: String,
    pub finished: String,
    pub quick: bool,
    /// True when Ctrl-C stopped the run: the seeds hold what was measured until then.
    pub interrupted: bool,
    pub machine: Machine,
    pub seeds: Vec<SeedResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub memory_mib: u64,
    /// Percent of all CPUs busy during one second before the lab started (other work on the
    /// machine: numbers taken while it is high are not comparable).
    pub background_busy_pct: f64,
    /// Servers on CPU 0, load generator and backends on CPU 1 (as the benches' PIN=1).
    pub pinned: bool,
    pub root: bool,
    /// Peer programs found on PATH, with the version they print.
    pub peers: Vec<Peer>,
    /// Peer programs looked for and not found (the lab installs nothing).
    pub missing_peers: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peer {
    pub name: String,
    pub path: String,
    pub version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedStatus {
    Ran,
    /// Some cases could not run (missing peers, Ctrl-C); the rest did.
    Partial,
    /// Nothing could run here; `skip_reason` says why.
    Skipped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedResult {
    /// `seed000` .. `seed003`.
    pub id: String,
    pub title: String,
    /// What the article measured, in one sentence.
    pub article: String,
    pub status: SeedStatus,
    pub skip_reason: Option<String>,
    /// Peers this seed would compare with that are not on PATH.
    pub missing_peers: Vec<String>,
    /// The load shape, e.g. "warden load -c 1000, 5 rounds x 3 s".
    pub load_shape: String,
    pub rounds: usize,
    pub background_busy_pct: f64,
    pub cases: Vec<CaseResult>,
    pub comparisons: Vec<Comparison>,
    pub published: Vec<PublishedRow>,
    pub notes: Vec<String>,
    /// Plain-language verdict.
    pub verdict: String,
    /// Every command the seed ran (setup, servers, load), in order.
    pub commands: Vec<String>,
}

/// The metric a comparison's ratio is taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Requests per second (closed loop), or the maximum rate found (find-max).
    Rps,
    P99,
    AvgLatency,
}

impl Metric {
    pub fn of(self, run: &RunResult) -> f64 {
        match self {
            Metric::Rps => run.rps,
            Metric::P99 => run.p99_ms,
            Metric::AvgLatency => run.avg_ms,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Metric::Rps => "req/s",
            Metric::P99 => "p99",
            Metric::AvgLatency => "avg latency",
        }
    }

    /// Whether a larger value is better (req/s) or worse (latency).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Rps)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub label: String,
    /// The program serving this case ("warden", "nginx", "haproxy").
    pub server: String,
    /// One per run, in the order they ran.
    pub runs: Vec<RunResult>,
    /// Medians over `runs`.
    pub median_rps: f64,
    pub median_p50_ms: f64,
    pub median_p99_ms: f64,
    pub median_avg_ms: f64,
    pub median_cpu_us_per_req: Option<f64>,
    /// Resident memory of the case's server once it was ready, when known.
    pub rss_mib: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub round: usize,
    /// Requests per second the client achieved; for find-max runs, the highest rate that met
    /// the bounds.
    pub rps: f64,
    pub requests: u64,
    /// Requests that got no answer (connect errors, timeouts, resets).
    pub errors: u64,
    /// Status code -> count (HTTP) or "OK" (TCP).
    pub codes: std::collections::BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub avg_ms: f64,
    /// Latency CDF from the run's HdrHistogram: (milliseconds, cumulative percent).
    pub cdf: Vec<(f64, f64)>,
    /// User + system CPU time of the case's server processes per request, microseconds.
    pub cpu_us_per_req: Option<f64>,
    /// Busy percent of each CPU during the run.
    pub cpu_busy_pct: Vec<f64>,
    /// find-max: each rate tried (requested, achieved, p99 ms, errors, passed).
    pub steps: Vec<FindMaxStep>,
    pub command: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindMaxStep {
    pub requested_qps: f64,
    pub actual_qps: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub passed: bool,
}

/// B / A over back-to-back pairs of runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub name: String,
    pub a: String,
    pub b: String,
    pub metric: Metric,
    /// One ratio per pair (B's metric over A's, the two runs seconds apart).
    pub ratios: Vec<f64>,
    pub median: f64,
    /// Bootstrap 90% interval of the median.
    pub ci_low: f64,
    pub ci_high: f64,
    /// This comparison is warden against itself: the noise floor the others are read against.
    pub noise_floor: bool,
    /// The difference from 1.0 is within what the noise floor shows.
    pub within_noise: bool,
    /// The article's ratio for the same comparison, if it published one.
    pub article_ratio: Option<f64>,
}

/// One line of the article's table beside the measured number.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishedRow {
    pub what: String,
    /// As the article prints it ("1514-1548 rps").
    pub article: String,
    /// What we measured for the same row, formatted.
    pub measured: String,
    pub case: Option<String>,
}
