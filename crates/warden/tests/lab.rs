//! `warden lab --quick` for the seeds that need no root (000 and 001): results.json has its
//! shape, and report.html renders in headless Chromium with its tables and SVG charts (checked
//! through the DOM Chromium dumps); the screenshot stays under target/ for a person to look at.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chromium() -> PathBuf {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| ["/usr/bin", "/usr/local/bin", "/snap/bin"].map(|d| Path::new(d).join(n)))
        .find(|p| p.is_file())
        .expect("headless Chromium is needed (apt-get install chromium; test.sh installs it)")
}

/// Run `cmd` to completion, killed after `limit` (every loop in a test is bounded).
fn run_bounded(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning");
    let deadline = Instant::now() + limit;
    // Drain stdout on a thread: a large DOM would fill the pipe and block the child.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).ok();
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn chromium_cmd(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
    ])
    .args(["--no-first-run", "--hide-scrollbars"])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn lab_quick_writes_results_and_a_report_chromium_renders() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lab-quick");
    let _ = std::fs::remove_dir_all(&out);
    let mut lab = Command::new(env!("CARGO_BIN_EXE_warden"));
    lab.args(["lab", "seed000", "seed001", "--quick", "--out"])
        .arg(&out);
    let done = run_bounded(lab, Duration::from_secs(150));
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "warden lab failed: {stderr}");

    // results.json: every raw number, the machine, the commands.
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let r: serde_json::Value = serde_json::from_str(&text).expect("results.json is JSON");
    assert_eq!(r["quick"], true);
    assert!(
        r["machine"]["cores"].as_u64().unwrap_or(0) >= 1,
        "{}",
        r["machine"]
    );
    assert!(r["machine"]["peers"].is_array() && r["machine"]["missing_peers"].is_array());
    let seeds = r["seeds"].as_array().expect("seeds");
    let ids: Vec<&str> = seeds.iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(ids, ["seed000", "seed001"]);
    for s in seeds {
        let id = s["id"].as_str().unwrap_or("?");
        assert_ne!(s["status"], "skipped", "{id} skipped: {}", s["skip_reason"]);
        assert!(
            !s["verdict"].as_str().unwrap_or("").is_empty(),
            "{id} has no verdict"
        );
        assert!(
            !s["commands"].as_array().expect("commands").is_empty(),
            "{id}: no commands"
        );
        assert!(
            !s["published"].as_array().expect("published").is_empty(),
            "{id}: no article rows"
        );
        let cases = s["cases"].as_array().expect("cases");
        assert!(cases.len() >= 4, "{id}: {} cases", cases.len());
        for c in cases.iter().filter(|c| c["server"] == "warden") {
            let runs = c["runs"].as_array().expect("runs");
            assert!(!runs.is_empty(), "{id} {}: no runs", c["id"]);
            let run = &runs[0];
            assert!(
                run["rps"].as_f64().unwrap_or(0.0) > 0.0,
                "{id} {}: {run}",
                c["id"]
            );
            assert!(run["p99_ms"].as_f64().unwrap_or(0.0) > 0.0);
            assert!(
                run["cdf"].as_array().is_some_and(|p| p.len() > 3),
                "{id}: no CDF"
            );
            assert!(run["cpu_busy_pct"]
                .as_array()
                .is_some_and(|p| !p.is_empty()));
            assert!(run["command"].as_str().unwrap_or("").contains(" load "));
        }
        let cmp = s["comparisons"].as_array().expect("comparisons");
        let floor = cmp
            .iter()
            .find(|c| c["noise_floor"] == true)
            .expect("a noise floor");
        assert!(
            !floor["ratios"].as_array().expect("ratios").is_empty(),
            "{id}: empty noise floor"
        );
        for c in cmp {
            let (lo, m, hi) = (
                c["ci_low"].as_f64(),
                c["median"].as_f64(),
                c["ci_high"].as_f64(),
            );
            assert!(
                lo <= m && m <= hi,
                "{id} {}: interval {lo:?} {m:?} {hi:?}",
                c["name"]
            );
        }
    }
    // seed 001's 100k list answers 403 for the client outside it.
    let s1 = &seeds[1];
    let c = s1["cases"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "c"))
        .expect("case c");
    assert!(
        c["runs"][0]["codes"]["403"].as_u64().unwrap_or(0) > 0,
        "{}",
        c["runs"][0]["codes"]
    );

    // report.html renders: the DOM Chromium builds has the tables and the SVG charts.
    let html = out.join("report.html");
    let url = format!("file://{}", html.display());
    let profile = out.join("chromium-profile");
    let mut dump = chromium_cmd(&profile);
    dump.arg("--dump-dom").arg(&url);
    let dom = run_bounded(dump, Duration::from_secs(60));
    let dom = String::from_utf8_lossy(&dom.stdout);
    for needle in [
        "<section id=\"seed000\"",
        "<section id=\"seed001\"",
        "<table class=\"published\"",
        "<table class=\"comparisons\"",
        "<table class=\"cases\"",
        "<svg class=\"chart bars\"",
        "<svg class=\"chart ratios\"",
        "<svg class=\"chart cdf\"",
        "<polyline",
        "1514-1548 rps",
    ] {
        assert!(dom.contains(needle), "the rendered DOM has no {needle:?}");
    }
    assert!(
        dom.matches("<svg class=\"chart").count() >= 6,
        "fewer than 3 charts per seed"
    );
    assert!(
        !dom.contains("http://") || !dom.contains("<script"),
        "the report is self-contained"
    );

    let png = out.join("report.png");
    let mut shot = chromium_cmd(&profile);
    shot.arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1100,2600")
        .arg(&url);
    let _ = run_bounded(shot, Duration::from_secs(60));
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "screenshot: {} bytes",
        bytes.len()
    );
    let _ = std::fs::remove_dir_all(&profile);
    eprintln!("report: {}\nscreenshot: {}", html.display(), png.display());
}
