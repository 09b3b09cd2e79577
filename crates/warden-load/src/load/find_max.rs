//! `warden load --find-max`: the highest fixed rate a target takes, found as the articles found
//! it by hand (seed 003's vegeta runs): raise the rate until a step fails, then bisect between
//! the last rate that passed and the first that failed. A step passes when at most 0.1% of its
//! requests fail, its p99 (from intended send times) is within the bound and the client
//! achieved at least 95% of the rate asked for; a failing step gets one retry. Bounded: at
//! most `max_steps` ramp steps plus three bisection steps, each `duration` long (twice when
//! it fails).

use super::{run, LoadConfig, LoadError};
use crate::report::Report;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct FindMaxConfig {
    /// The first rate tried (requests per second).
    pub start_qps: f64,
    /// A step fails when its p99 exceeds this.
    pub p99_bound: Duration,
    /// Ramp steps before giving up on finding a failing rate.
    pub max_steps: usize,
}

/// Each step multiplies the rate by this until one fails.
const RAMP: f64 = 1.5;
const BISECT_STEPS: usize = 3;
const MAX_ERROR_RATIO: f64 = 0.001;
const MIN_ACHIEVED: f64 = 0.95;

#[derive(Debug, Clone)]
pub struct Step {
    pub requested_qps: f64,
    pub report: Report,
    pub passed: bool,
}

#[derive(Debug, Clone)]
pub struct FindMaxReport {
    pub steps: Vec<Step>,
    pub p99_bound: Duration,
}

impl FindMaxReport {
    /// The passing step with the highest achieved rate.
    pub fn best(&self) -> Option<&Step> {
        self.steps
            .iter()
            .filter(|s| s.passed)
            .max_by(|a, b| a.report.achieved_rps().total_cmp(&b.report.achieved_rps()))
    }

    pub fn max_qps(&self) -> f64 {
        self.best().map_or(0.0, |s| s.report.achieved_rps())
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.steps {
            out.push_str(&format!(
                "step {:>9.0} rps: achieved {:>9.0}, p99 {:>9.3} ms, failed {:>6}  {}\n",
                s.requested_qps,
                s.report.achieved_rps(),
                s.report.percentile(99.0).as_secs_f64() * 1000.0,
                s.report.failed(),
                if s.passed { "pass" } else { "FAIL" }
            ));
        }
        out.push_str(&format!(
            "max QPS      {:.0} (no more than {:.1}% errors, p99 <= {:?}, >= {:.0}% of the rate achieved)\n",
            self.max_qps(),
            MAX_ERROR_RATIO * 100.0,
            self.p99_bound,
            MIN_ACHIEVED * 100.0
        ));
        out
    }

    /// `{"MaxQPS", "P99Bound", "Steps": [...], "Best": <the best step's fortio JSON>}`.
    pub fn to_json(&self) -> String {
        let steps: Vec<serde_json::Value> = self
            .steps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "RequestedQPS": s.requested_qps,
                    "ActualQPS": s.report.achieved_rps(),
                    "P99": s.report.percentile(99.0).as_secs_f64(),
                    "Errors": s.report.failed(),
                    "Passed": s.passed,
                })
            })
            .collect();
        let best = self.best().map_or(serde_json::Value::Null, |s| {
            serde_json::to_value(s.report.to_fortio()).unwrap_or_default()
        });
        serde_json::to_string_pretty(&serde_json::json!({
            "MaxQPS": self.max_qps(),
            "P99Bound": self.p99_bound.as_secs_f64(),
            "Steps": steps,
            "Best": best,
        }))
        .unwrap_or_default()
    }
}

fn passed(report: &Report, requested: f64, bound: Duration) -> bool {
    let requests = report.requests().max(1) as f64;
    report.completed() > 0
        && (report.failed() as f64) / requests <= MAX_ERROR_RATIO
        && report.percentile(99.0) <= bound
        && report.achieved_rps() >= MIN_ACHIEVED * requested
}

/// One step: `base` at a fixed `qps`. A failing step is run once more and judged by the
/// second try: on a shared machine a second's slowdown would otherwise end the ramp.
async fn measure(base: &LoadConfig, qps: f64, bound: Duration) -> Result<Step, LoadError> {
    let mut config = base.clone();
    config.qps = qps;
    config.progress = false;
    let mut report = run(config.clone()).await?;
    if !passed(&report, qps, bound) {
        report = run(config).await?;
    }
    Ok(Step {
        requested_qps: qps,
        passed: passed(&report, qps, bound),
        report,
    })
}

/// Run steps of `base` (its duration each) at rising fixed rates.
pub async fn find_max(base: LoadConfig, cfg: FindMaxConfig) -> Result<FindMaxReport, LoadError> {
    if cfg.start_qps.is_nan() || cfg.start_qps <= 0.0 {
        return Err(LoadError::Config(
            "--find-max needs a starting rate (--qps > 0)".into(),
        ));
    }
    if base.duration.is_none() || base.requests.is_some() {
        return Err(LoadError::Config(
            "--find-max runs each step for -t (not -n)".into(),
        ));
    }
    let mut steps: Vec<Step> = Vec::new();
    let (mut lo, mut hi) = (0.0f64, None::<f64>);
    let mut rate = cfg.start_qps;
    for _ in 0..cfg.max_steps.max(1) {
        let step = measure(&base, rate, cfg.p99_bound).await?;
        let ok = step.passed;
        steps.push(step);
        if !ok {
            hi = Some(rate);
            break;
        }
        lo = rate;
        rate *= RAMP;
    }
    if let Some(mut hi) = hi {
        for _ in 0..BISECT_STEPS {
            let mid = (lo + hi) / 2.0;
            if mid <= 0.0 || hi - lo < 0.02 * hi {
                break;
            }
            let step = measure(&base, mid, cfg.p99_bound).await?;
            if step.passed {
                lo = mid;
            } else {
                hi = mid;
            }
            steps.push(step);
        }
    }
    Ok(FindMaxReport {
        steps,
        p99_bound: cfg.p99_bound,
    })
}
