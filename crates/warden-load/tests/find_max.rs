//! `--find-max` against the in-process echo server: a target that answers in time passes its
//! steps; one that answers slower than the p99 bound (`delay=`) fails from the first step, and
//! the search stays bounded (ramp steps + three bisections).

use std::time::Duration;
use warden_load::echo::{EchoConfig, EchoServer};
use warden_load::load::find_max::{find_max, FindMaxConfig};
use warden_load::load::LoadConfig;

fn config(url: String) -> LoadConfig {
    LoadConfig {
        target: url,
        connections: 8,
        duration: Some(Duration::from_millis(200)),
        ..LoadConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ramps_while_steps_pass_and_reports_the_best() {
    let echo = EchoServer::start(EchoConfig::loopback()).await.unwrap();
    let url = format!("http://{}/", echo.http_addr().unwrap());
    let cfg = FindMaxConfig {
        start_qps: 100.0,
        p99_bound: Duration::from_secs(1),
        max_steps: 3,
    };
    let report = find_max(config(url), cfg).await.unwrap();
    assert!(report.steps.len() >= 3, "{}", report.to_text());
    assert!(report.steps[0].passed, "{}", report.to_text());
    assert!(report.steps[1].requested_qps > report.steps[0].requested_qps);
    assert!(report.max_qps() > 50.0, "{}", report.to_text());
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert!(json["MaxQPS"].as_f64().unwrap() > 0.0);
    assert!(json["Best"]["DurationHistogram"]["Count"].as_u64().unwrap() > 0);
    assert_eq!(json["Steps"].as_array().unwrap().len(), report.steps.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_slower_than_the_bound_fails_every_step() {
    let echo = EchoServer::start(EchoConfig::loopback()).await.unwrap();
    let url = format!("http://{}/?delay=50ms", echo.http_addr().unwrap());
    let cfg = FindMaxConfig {
        start_qps: 100.0,
        p99_bound: Duration::from_millis(5),
        max_steps: 5,
    };
    let report = find_max(config(url), cfg).await.unwrap();
    assert!(
        report.steps.iter().all(|s| !s.passed),
        "{}",
        report.to_text()
    );
    // The first step failed: three bisections below it at most.
    assert!(report.steps.len() <= 4, "{}", report.to_text());
    assert_eq!(report.max_qps(), 0.0);
    assert!(report.best().is_none());
}
