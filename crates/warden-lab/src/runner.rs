//! The measurement method of bench/lib/common.sh: every comparison is a back-to-back pair of
//! runs (A then B, swapped every round, so neither always runs second), the rounds rotate the
//! comparisons' order (a burst of other load hits a different one each round), a ratio per
//! pair, its median and bootstrap interval, and a noise floor (warden against itself) that the
//! other ratios are read against. Progress: one bar per experiment (ETA) and one per round.

use crate::load_run::{run_once, LoadSpec};
use crate::model::{CaseResult, Comparison, Metric, RunResult};
use crate::process::Lab;
use crate::stats::{interval, median, within_noise};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Called before each of a case's runs (e.g. to restart the sidecars in the case's mode);
/// returns the pids whose CPU time is the case's cost.
pub type BeforeRun = Box<dyn Fn(&Lab) -> anyhow::Result<Vec<u32>>>;

pub struct Case {
    pub id: String,
    pub label: String,
    pub server: String,
    pub load: LoadSpec,
    pub pids: Vec<u32>,
    pub before_run: Option<BeforeRun>,
    pub rss_mib: Option<f64>,
}

impl Case {
    pub fn new(id: &str, label: &str, server: &str, load: LoadSpec, pids: Vec<u32>) -> Case {
        Case {
            id: id.into(),
            label: label.into(),
            server: server.into(),
            load,
            pids,
            before_run: None,
            rss_mib: None,
        }
    }
}

pub struct ComparisonSpec {
    pub name: String,
    pub a: String,
    pub b: String,
    pub metric: Metric,
    pub article_ratio: Option<f64>,
}

impl ComparisonSpec {
    pub fn new(name: &str, a: &str, b: &str, metric: Metric) -> ComparisonSpec {
        ComparisonSpec {
            name: name.into(),
            a: a.into(),
            b: b.into(),
            metric,
            article_ratio: None,
        }
    }

    pub fn article(mut self, ratio: f64) -> ComparisonSpec {
        self.article_ratio = Some(ratio);
        self
    }

    /// Case `a` against itself: the noise floor.
    pub fn noise_floor(a: &str, label: &str, metric: Metric) -> ComparisonSpec {
        ComparisonSpec::new(
            &format!("noise floor: {label} / itself ({})", metric.label()),
            a,
            a,
            metric,
        )
    }
}

pub struct Plan {
    pub seed: String,
    pub cases: Vec<Case>,
    pub comparisons: Vec<ComparisonSpec>,
    pub rounds: usize,
}

pub struct Outcome {
    pub cases: Vec<CaseResult>,
    pub comparisons: Vec<Comparison>,
    pub interrupted: bool,
    /// Runs that failed (the pair is left out), as messages.
    pub failures: Vec<String>,
}

/// The bars of a lab run; drawn only on a terminal (plain lines otherwise).
pub struct Progress {
    multi: MultiProgress,
    terminal: bool,
}

impl Progress {
    pub fn new() -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let multi = MultiProgress::new();
        if !terminal {
            multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        Progress { multi, terminal }
    }

    /// A line above the bars (or on stderr when there are none).
    pub fn say(&self, line: &str) {
        if self.terminal {
            let _ = self.multi.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn bar(&self, len: u64, template: &str) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new(len));
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

/// Run the plan's rounds; stops early (keeping what was measured) when Ctrl-C was pressed.
pub fn run(lab: &Lab, mut plan: Plan, progress: &Progress) -> Outcome {
    // Comparisons on the same two cases (say req/s and latency) share their runs.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for c in &plan.comparisons {
        if !pairs.iter().any(|(a, b)| *a == c.a && *b == c.b) {
            pairs.push((c.a.clone(), c.b.clone()));
        }
    }
    let n_pairs = pairs.len().max(1);
    let per_round = (pairs.len() * 2) as u64;
    let total = per_round * plan.rounds as u64;
    let exp = progress.bar(
        total,
        "{prefix:>8} [{bar:30}] {pos}/{len} runs  elapsed {elapsed}  ETA {eta}",
    );
    exp.set_prefix(plan.seed.clone());
    let round_bar = progress.bar(per_round, "   round {prefix} [{bar:30}] {msg}");
    let mut runs: Vec<Vec<RunResult>> = plan.cases.iter().map(|_| Vec::new()).collect();
    let mut ratios: Vec<Vec<f64>> = plan.comparisons.iter().map(|_| Vec::new()).collect();
    let mut failures = Vec::new();
    let index = |id: &str, cases: &[Case]| cases.iter().position(|c| c.id == id);
    let mut interrupted = false;
    'rounds: for round in 0..plan.rounds {
        round_bar.set_prefix(format!("{}/{}", round + 1, plan.rounds));
        round_bar.set_position(0);
        for k in 0..pairs.len() {
            let (a, b) = &pairs[(round + k) % n_pairs];
            let (Some(ia), Some(ib)) = (index(a, &plan.cases), index(b, &plan.cases)) else {
                continue;
            };
            let order = if round % 2 == 0 { [ia, ib] } else { [ib, ia] };
            let mut pair: [Option<RunResult>; 2] = [None, None];
            for (slot, &i) in order.iter().enumerate() {
                if lab.stopped() {
                    interrupted = true;
                    break 'rounds;
                }
                let case = &mut plan.cases[i];
                round_bar.set_message(case.label.clone());
                let result = match &case.before_run {
                    Some(before) => before(lab).map(|pids| case.pids = pids),
                    None => Ok(()),
                }
                .and_then(|()| run_once(lab, &case.load, &case.pids, round + 1));
                exp.inc(1);
                round_bar.inc(1);
                match result {
                    Ok(r) => {
                        if !progress.terminal {
                            progress.say(&format!(
                                "  {} round {}: {:<36} {:>10.0} req/s  p99 {:>8.2} ms  errors {}",
                                plan.seed,
                                round + 1,
                                case.label,
                                r.rps,
                                r.p99_ms,
                                r.errors
                            ));
                        }
                        pair[slot] = Some(r);
                    }
                    Err(e) => {
                        let msg = format!("{} round {}: {:#}", case.label, round + 1, e);
                        progress.say(&format!("  run failed: {msg}"));
                        failures.push(msg);
                    }
                }
            }
            let [first, second] = pair;
            let (ra, rb) = if order[0] == ia {
                (first, second)
            } else {
                (second, first)
            };
            if let (Some(ra), Some(rb)) = (&ra, &rb) {
                for (spec, r) in plan.comparisons.iter().zip(ratios.iter_mut()) {
                    if spec.a == *a && spec.b == *b {
                        let (va, vb) = (spec.metric.of(ra), spec.metric.of(rb));
                        if va > 0.0 {
                            r.push(vb / va);
                        }
                    }
                }
            }
            for (i, r) in [(ia, ra), (ib, rb)] {
                if let Some(r) = r {
                    runs[i].push(r);
                }
            }
        }
    }
    exp.finish_and_clear();
    round_bar.finish_and_clear();
    let cases = plan
        .cases
        .iter()
        .zip(runs)
        .map(|(c, runs)| summarize(c, runs))
        .collect();
    let comparisons = compare(&plan.comparisons, ratios);
    Outcome {
        cases,
        comparisons,
        interrupted,
        failures,
    }
}

fn summarize(case: &Case, runs: Vec<RunResult>) -> CaseResult {
    let m = |f: fn(&RunResult) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_us_per_req).collect();
    CaseResult {
        id: case.id.clone(),
        label: case.label.clone(),
        server: case.server.clone(),
        median_rps: m(|r| r.rps),
        median_p50_ms: m(|r| r.p50_ms),
        median_p99_ms: m(|r| r.p99_ms),
        median_avg_ms: m(|r| r.avg_ms),
        median_cpu_us_per_req: (!cpu.is_empty()).then(|| median(&cpu)),
        rss_mib: case.rss_mib,
        runs,
    }
}

fn compare(specs: &[ComparisonSpec], ratios: Vec<Vec<f64>>) -> Vec<Comparison> {
    // The noise floor on the same metric (two runs of one server spread differently in req/s
    // and in p99).
    let noise_for = |metric: Metric| {
        specs
            .iter()
            .zip(&ratios)
            .find(|(s, r)| s.a == s.b && s.metric == metric && !r.is_empty())
            .map(|(_, r)| {
                let (lo, hi) = interval(r);
                (median(r), lo, hi)
            })
    };
    let noise: Vec<_> = specs.iter().map(|s| noise_for(s.metric)).collect();
    specs
        .iter()
        .zip(ratios.iter())
        .zip(noise)
        .map(|((s, r), noise)| {
            let (lo, hi) = interval(r);
            let med = median(r);
            let floor = s.a == s.b;
            Comparison {
                name: s.name.clone(),
                a: s.a.clone(),
                b: s.b.clone(),
                metric: s.metric,
                median: med,
                ci_low: lo,
                ci_high: hi,
                noise_floor: floor,
                within_noise: !r.is_empty() && (floor || within_noise(med, lo, hi, noise)),
                article_ratio: s.article_ratio,
                ratios: r.clone(),
            }
        })
        .collect()
}
