//! `warden load` as the binary runs it: argument parsing, JSON output, exit codes.

use clap::Parser;
use std::process::ExitCode;
use warden_load::cli::{run_load, LoadArgs};
use warden_load::echo::{EchoConfig, EchoServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    load: LoadArgs,
}

fn load(args: &[&str]) -> ExitCode {
    let cli = Cli::try_parse_from(std::iter::once("load").chain(args.iter().copied())).unwrap();
    run_load(cli.load).unwrap()
}

#[test]
fn json_result_is_written_in_fortio_shape() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let echo = rt
        .block_on(EchoServer::start(EchoConfig::loopback()))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("warden-load-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("result.json");
    let target = format!("http://{}/?status=503:50", echo.http_addr().unwrap());
    let code = load(&[
        &target,
        "-c",
        "2",
        "-n",
        "40",
        "-H",
        "X-Test: 1",
        "--threads",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::SUCCESS));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["RunType"], "HTTP");
    assert_eq!(v["RequestedQPS"], "max");
    assert_eq!(v["Exactly"], 40);
    assert_eq!(v["NumThreads"], 2);
    assert_eq!(v["DurationHistogram"]["Count"], 40);
    let codes = v["RetCodes"].as_object().unwrap();
    let total: u64 = codes.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, 40);
    assert!(codes.keys().all(|k| k == "200" || k == "503"));
    let pcts = v["DurationHistogram"]["Percentiles"].as_array().unwrap();
    assert_eq!(pcts[0]["Percentile"], 50.0);
    assert!(pcts[0]["Value"].as_f64().unwrap() > 0.0);
    assert_eq!(echo.total(), 40);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_request_failing_exits_non_zero() {
    // Free a moment ago: nothing listens there.
    let port = warden_testkit::free_port().unwrap();
    let target = format!("http://127.0.0.1:{port}/");
    let code = load(&[&target, "-n", "3", "-c", "1", "--threads", "1"]);
    assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::FAILURE));
}

#[test]
fn bad_header_is_a_clear_error() {
    let cli = Cli::try_parse_from(["load", "http://127.0.0.1:1/", "-H", "nocolon"]).unwrap();
    let err = run_load(cli.load).unwrap_err().to_string();
    assert!(err.contains("Name: Value"), "{err}");
}
