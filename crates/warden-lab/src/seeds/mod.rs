//! One module per source article (the seeds of docs/lab.md): its setup (as bench/*.sh builds
//! it), its cases and comparisons, and the article's published numbers beside ours.

mod allowlist;
mod pods;
mod seed000;
mod seed001;
mod seed002;
mod seed003;

use crate::machine::background_busy;
use crate::model::{Comparison, SeedResult, SeedStatus};
use crate::process::Lab;
use crate::runner::{Outcome, Progress};

pub const ALL: [&str; 4] = ["seed000", "seed001", "seed002", "seed003"];

/// Rounds and seconds per run: `--quick` is a smoke test, the default a measurement.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub rounds: usize,
    pub run: std::time::Duration,
}

impl Budget {
    pub fn of(lab: &Lab, full_rounds: usize, full_secs: f64) -> Budget {
        if lab.quick {
            Budget {
                rounds: 2,
                run: std::time::Duration::from_millis(300),
            }
        } else {
            Budget {
                rounds: full_rounds,
                run: std::time::Duration::from_secs_f64(full_secs),
            }
        }
    }
}

impl Budget {
    /// "5 rounds x 3.0 s per run, back-to-back pairs" for the load shape line.
    pub fn describe(&self) -> String {
        format!(
            "{} rounds x {:.1} s per run, back-to-back pairs",
            self.rounds,
            self.run.as_secs_f64()
        )
    }

    /// Run `cases` and `comparisons` for this budget's rounds.
    pub fn run(
        &self,
        lab: &Lab,
        progress: &Progress,
        seed: &str,
        cases: Vec<crate::runner::Case>,
        comparisons: Vec<crate::runner::ComparisonSpec>,
    ) -> Outcome {
        let plan = crate::runner::Plan {
            seed: seed.into(),
            cases,
            comparisons,
            rounds: self.rounds,
        };
        crate::runner::run(lab, plan, progress)
    }
}

/// The fixed part of a seed's section.
pub struct Header {
    pub id: &'static str,
    pub title: &'static str,
    pub article: &'static str,
}

impl Header {
    /// A section for a seed that could not run here.
    pub fn skipped(&self, lab: &Lab, reason: String) -> SeedResult {
        SeedResult {
            id: self.id.into(),
            title: self.title.into(),
            article: self.article.into(),
            status: SeedStatus::Skipped,
            skip_reason: Some(reason.clone()),
            missing_peers: Vec::new(),
            load_shape: String::new(),
            rounds: 0,
            background_busy_pct: 0.0,
            cases: Vec::new(),
            comparisons: Vec::new(),
            published: Vec::new(),
            notes: Vec::new(),
            verdict: format!("Not run on this machine: {reason}"),
            commands: lab.take_commands(),
        }
    }

    /// A section from the runner's outcome; `missing` are peers not on PATH.
    pub fn ran(
        &self,
        lab: &Lab,
        outcome: Outcome,
        busy: f64,
        load_shape: String,
        rounds: usize,
        missing: Vec<String>,
    ) -> SeedResult {
        let mut notes: Vec<String> = outcome
            .failures
            .iter()
            .map(|f| format!("run failed (its pair is left out): {f}"))
            .collect();
        if outcome.interrupted {
            notes.push("stopped by Ctrl-C: the numbers are the rounds measured so far".into());
        }
        let status = if outcome.interrupted || !missing.is_empty() || !outcome.failures.is_empty() {
            SeedStatus::Partial
        } else {
            SeedStatus::Ran
        };
        SeedResult {
            id: self.id.into(),
            title: self.title.into(),
            article: self.article.into(),
            status,
            skip_reason: None,
            missing_peers: missing,
            load_shape,
            rounds,
            background_busy_pct: busy,
            cases: outcome.cases,
            comparisons: outcome.comparisons,
            published: Vec::new(),
            notes,
            verdict: String::new(),
            commands: lab.take_commands(),
        }
    }
}

/// Run one seed; a setup failure becomes a skipped section naming the error.
pub fn run(id: &str, lab: &Lab, progress: &Progress) -> SeedResult {
    let busy = background_busy();
    let result = match id {
        "seed000" => seed000::run(lab, progress, busy),
        "seed001" => seed001::run(lab, progress, busy),
        "seed002" => seed002::run(lab, progress, busy),
        _ => seed003::run(lab, progress, busy),
    };
    result.unwrap_or_else(|e| {
        let header = match id {
            "seed000" => seed000::HEADER,
            "seed001" => seed001::HEADER,
            "seed002" => seed002::HEADER,
            _ => seed003::HEADER,
        };
        header.skipped(lab, format!("setup failed: {e:#}"))
    })
}

/// An Istio Gateway named `name` in istio-system on `port`, all hosts (both gateway seeds').
pub fn gateway_doc(name: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1beta1\nkind: Gateway\n\
         metadata: {{name: {name}, namespace: istio-system}}\n\
         spec:\n  selector: {{istio: ingressgateway}}\n  servers:\n\
         \x20 - port: {{number: {port}, name: http, protocol: HTTP}}\n    hosts: [\"*\"]\n---\n"
    )
}

/// An nginx config (one process: no daemon, no master, one worker) with `http` inside its
/// `http {}` block, written to `<work>/<dir>/nginx/nginx.conf`; run it with
/// `nginx -p <that dir> -c <path>`.
pub fn nginx_conf(lab: &Lab, dir: &str, http: &str) -> anyhow::Result<std::path::PathBuf> {
    let d = lab.dir().join(dir).join("nginx");
    std::fs::create_dir_all(&d)?;
    let d = d.display();
    lab.write(
        &format!("{dir}/nginx/nginx.conf"),
        &format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 65536;\n\
             error_log {d}/error.log error;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{http}}}\n"
        ),
    )
}

/// Find a comparison by name.
pub fn comparison<'a>(seed: &'a SeedResult, name: &str) -> Option<&'a Comparison> {
    seed.comparisons.iter().find(|c| c.name == name)
}

/// "0.982 (90% CI 0.95-1.01, within noise)".
pub fn ratio_text(c: &Comparison) -> String {
    if c.ratios.is_empty() {
        return "not measured".into();
    }
    format!(
        "{:.3} (90% CI {:.3}-{:.3}{})",
        c.median,
        c.ci_low,
        c.ci_high,
        if c.within_noise && !c.noise_floor {
            ", within noise"
        } else {
            ""
        }
    )
}

/// "-76%" from a ratio.
pub fn percent_change(ratio: f64) -> String {
    format!("{:+.0}%", (ratio - 1.0) * 100.0)
}

/// Peers from `names` that are not on PATH.
pub fn missing(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !warden_sandbox::netns::on_path(n))
        .map(|n| n.to_string())
        .collect()
}
