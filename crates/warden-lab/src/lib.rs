//! `warden lab`: every experiment of the source articles (docs/lab.md, "What each seed runs")
//! run on this machine with the article's load shape, side by side with the article's
//! published numbers.
//!
//! - [`model`]: what a lab run measured (results.json), every raw number per round.
//! - [`stats`]: medians, the bootstrap interval of a ratio's median, noise-floor judgement
//!   (the method of bench/lib/common.sh and bench/lib/paired.py).
//! - `runner`: back-to-back pairs of runs, alternating order, with progress bars and Ctrl-C.
//! - `seeds`: one module per article (setups as bench/*.sh make them).
//! - `report`: the self-contained report.html (inline CSS and SVG charts).

// libc calls without safe wrappers (getrlimit/setrlimit in cli.rs, sysconf and geteuid in
// machine.rs), allowed on those functions alone.
#![deny(unsafe_code)]

pub mod cli;
pub mod model;
pub mod stats;

mod load_run;
mod machine;
mod process;
mod report;
mod runner;
mod seeds;
