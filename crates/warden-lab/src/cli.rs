//! `warden lab [seed000|seed001|seed002|seed003|all]... [--quick] [--out DIR]`.

use crate::model::LabResults;
use crate::process::Lab;
use crate::runner::Progress;
use crate::{machine, report, seeds};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    /// Which articles' experiments to run (default: all). seed002 and seed003 need root.
    #[arg(value_parser = ["seed000", "seed001", "seed002", "seed003", "all"])]
    pub seeds: Vec<String>,
    /// Short rounds: a smoke test of the setup and the report, not a measurement
    #[arg(long)]
    pub quick: bool,
    /// Where results.json and report.html go (created if missing)
    #[arg(long, default_value = "lab-results")]
    pub out: PathBuf,
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The ab-shaped seed opens 1000 connections at once: raise the open-file limit to the hard
/// limit (the servers and the load generator inherit it).
#[allow(unsafe_code)]
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// results.json and report.html, rewritten after every seed so an interrupted run keeps them.
fn write_outputs(out: &Path, results: &LabResults) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(results).context("serialising the results")?;
    std::fs::write(out.join("results.json"), json + "\n")
        .with_context(|| format!("writing {}", out.join("results.json").display()))?;
    std::fs::write(out.join("report.html"), report::render(results))
        .with_context(|| format!("writing {}", out.join("report.html").display()))?;
    Ok(())
}

pub fn run(args: LabArgs) -> anyhow::Result<ExitCode> {
    let ids: Vec<&str> = if args.seeds.is_empty() || args.seeds.iter().any(|s| s == "all") {
        seeds::ALL.to_vec()
    } else {
        seeds::ALL
            .iter()
            .copied()
            .filter(|id| args.seeds.iter().any(|s| s.as_str() == *id))
            .collect()
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    raise_nofile();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Ctrl-C: finish nothing new, drop the guards (servers killed, namespaces and cgroups
    // removed) and write what was measured.
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    let warden = std::env::current_exe().context("finding the warden binary")?;
    let lab = Lab::new(warden, args.quick, stop.clone())?;
    let progress = Progress::new();
    progress.say(&format!(
        "warden lab: {} into {}{}",
        ids.join(", "),
        args.out.display(),
        if args.quick { " (--quick)" } else { "" }
    ));
    let mut results = LabResults {
        warden_version: format!("warden {}", env!("CARGO_PKG_VERSION")),
        started: now(),
        finished: String::new(),
        quick: args.quick,
        interrupted: false,
        machine: machine::describe(lab.pinned),
        seeds: Vec::new(),
    };
    progress.say(&format!(
        "machine: {} cores, background busy {:.0}%, peers missing: {}",
        results.machine.cores,
        results.machine.background_busy_pct,
        if results.machine.missing_peers.is_empty() {
            "none".into()
        } else {
            results.machine.missing_peers.join(", ")
        }
    ));
    for id in ids {
        if lab.stopped() {
            break;
        }
        let seed = seeds::run(id, &lab, &progress);
        progress.say(&format!("{id}: {}", seed.verdict));
        results.seeds.push(seed);
        results.finished = now();
        results.interrupted = lab.stopped();
        write_outputs(&args.out, &results)?;
    }
    results.finished = now();
    results.interrupted = lab.stopped();
    write_outputs(&args.out, &results)?;
    println!(
        "{}\n{}",
        args.out.join("results.json").display(),
        args.out.join("report.html").display()
    );
    Ok(if results.interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}
