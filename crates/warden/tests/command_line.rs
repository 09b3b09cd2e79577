//! What a user running the binary sees at the edges (issue #38's papercuts): a config that
//! gives the proxy no listener is refused unless `--allow-empty-config`, `--concurrency 0` is
//! refused, `--admin NAME:PORT` is resolved, an OS error is printed once, `warden check` points
//! an envoyproxy/ratelimit config to `warden ratelimit --check`, colour codes go to terminals
//! only, and every subcommand's help names its logging variables.

mod common;

use common::{get, run_proxy_to_exit, write_config, WARDEN};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use warden_testkit::{free_port, KillOnDrop, TempDir};

const DIRECT_200: &str = "  - directResponse: {status: 200, body: {string: ok}}\n";

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `warden proxy` started in the background with `args`; ready once `admin` answers `/ready`.
fn start_proxy(args: &[&str], admin: SocketAddr) -> KillOnDrop {
    let child = Command::new(WARDEN)
        .arg("proxy")
        .args(args)
        .args([
            "--no-watch",
            "--concurrency",
            "1",
            "--listen-host",
            "127.0.0.1",
        ])
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("warden proxy starts");
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(admin, "/ready").is_none_or(|r| !r.starts_with("HTTP/1.1 200")) {
        assert!(Instant::now() < deadline, "warden did not get ready");
        assert!(
            matches!(child.0.try_wait(), Ok(None)),
            "warden exited before it was ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn a_config_without_listener_starts_only_with_allow_empty_config() {
    let dir = TempDir::new("cli-empty").unwrap();
    // An empty file, and a config whose only Gateway selects other proxies.
    let empty = dir.write("empty.yaml", "").unwrap();
    let elsewhere = dir
        .write(
            "egress.yaml",
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: egress}\nspec:\n  selector: {istio: egressgateway}\n  servers:\n  - port: {number: 8080, protocol: HTTP, name: http}\n    hosts: [\"*\"]\n",
        )
        .unwrap();
    for (config, skipped) in [(&empty, "0 Gateway(s)"), (&elsewhere, "1 Gateway(s)")] {
        // `warden check` accepts it, and says what the proxy will do.
        let out = Command::new(WARDEN)
            .args(["check", "--label", "istio=ingressgateway", "-c"])
            .arg(config)
            .output()
            .unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            text.contains("no listener") && text.contains("--allow-empty-config"),
            "{text}"
        );
        let out = run_proxy_to_exit(config, &["--label", "istio=ingressgateway"]);
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("no listener")
                && text.contains("--allow-empty-config")
                && text.contains(skipped),
            "{text}"
        );
    }
    // The operator who means it gets a proxy that answers its admin port.
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().unwrap()));
    let _proxy = start_proxy(
        &[
            "-c",
            &empty.display().to_string(),
            "--admin",
            &admin.to_string(),
            "--allow-empty-config",
        ],
        admin,
    );
}

#[test]
fn concurrency_zero_is_refused() {
    let dir = TempDir::new("cli-concurrency").unwrap();
    let (config, _) = write_config(&dir, "", DIRECT_200);
    let out = run_proxy_to_exit(&config, &["--concurrency", "0"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--concurrency") && text.contains("at least 1"),
        "{text}"
    );
}

#[test]
fn admin_accepts_a_host_name() {
    let dir = TempDir::new("cli-admin").unwrap();
    let (config, port) = write_config(&dir, "", DIRECT_200);
    let admin_port = free_port().unwrap();
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, admin_port));
    let _proxy = start_proxy(
        &[
            "-c",
            &config.display().to_string(),
            "--admin",
            &format!("localhost:{admin_port}"),
        ],
        admin,
    );
    let answer = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), "/").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A name that does not resolve is refused before anything starts.
    let out = Command::new(WARDEN)
        .args(["proxy", "-c"])
        .arg(&config)
        .args(["--admin", "no-such-host.invalid:15000"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("cannot resolve"), "{text}");
}

/// Each command fails on a path that does not exist; its message says so once. (An error that
/// formats its source and also chains it printed "No such file or directory (os error 2): No
/// such file or directory (os error 2)".)
#[test]
fn an_os_error_is_printed_once() {
    let dir = TempDir::new("cli-os-error").unwrap();
    let (config, _) = write_config(&dir, "", DIRECT_200);
    let config = config.display().to_string();
    let missing = dir.path().join("missing").display().to_string();
    let missing_file = format!("{missing}/file");
    let runs: Vec<Vec<&str>> = vec![
        vec!["proxy", "-c", &missing, "--admin", "127.0.0.1:0"],
        vec!["check", "-c", &missing],
        vec![
            "proxy",
            "-c",
            &config,
            "--admin",
            "127.0.0.1:0",
            "--access-log",
            &missing_file,
        ],
        vec![
            "proxy",
            "-c",
            &config,
            "--admin",
            "127.0.0.1:0",
            "--mesh-config",
            &missing,
        ],
        vec!["ratelimit", "--check", "--config", &missing],
        vec![
            "ca",
            "issue",
            "--dir",
            &missing,
            "--namespace",
            "default",
            "--service-account",
            "app",
            "--out",
            &missing_file,
        ],
        vec!["ratelimit-config", "-c", &config, "-o", &missing_file],
    ];
    for args in runs {
        let out = Command::new(WARDEN)
            .args(&args)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .output()
            .expect("warden runs");
        let text = output_text(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {text}");
        assert_eq!(
            text.matches("(os error 2)").count(),
            1,
            "{args:?} should say the OS error once:\n{text}"
        );
    }
}

#[test]
fn check_points_a_ratelimit_service_config_to_warden_ratelimit() {
    let dir = TempDir::new("cli-rls-config").unwrap();
    let rls = dir
        .write(
            "config.yaml",
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
        )
        .unwrap();
    let out = Command::new(WARDEN)
        .args(["check", "-c"])
        .arg(&rls)
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("envoyproxy/ratelimit") && text.contains("warden ratelimit --check"),
        "{text}"
    );
    // And that command takes it.
    let out = Command::new(WARDEN)
        .args(["ratelimit", "--check", "--config"])
        .arg(&rls)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
}

/// The same start (one that logs, then is refused) with stderr on a pipe and on a terminal
/// (`script` gives it a pseudo-terminal): colour codes only on the terminal.
#[test]
fn log_colours_only_on_a_terminal() {
    let dir = TempDir::new("cli-colour").unwrap();
    let empty = dir.write("empty.yaml", "").unwrap();
    let line = format!(
        "{WARDEN} proxy -c {} --admin 127.0.0.1:0 --no-watch",
        empty.display()
    );
    let piped = Command::new("sh")
        .args(["-c", &line])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let piped = output_text(&piped);
    assert!(piped.contains("proxy identity"), "{piped}");
    assert!(
        !piped.contains('\u{1b}'),
        "colour codes on a pipe: {piped:?}"
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the terminal half: no `script` (util-linux)");
        return;
    }
    let terminal = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let terminal = output_text(&terminal);
    assert!(terminal.contains("proxy identity"), "{terminal}");
    assert!(
        terminal.contains('\u{1b}'),
        "no colour on a terminal: {terminal:?}"
    );
    let plain = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let plain = output_text(&plain);
    assert!(plain.contains("proxy identity"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR: {plain:?}");
}

#[test]
fn every_subcommand_documents_its_logging() {
    let top = Command::new(WARDEN).arg("--help").output().unwrap();
    let top = output_text(&top);
    let subcommands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(subcommands.len() > 10, "{top}");
    // Nested ones too (`warden ca issue`, `warden accel enable`).
    let mut runs: Vec<Vec<&str>> = subcommands.iter().map(|s| vec![*s]).collect();
    runs.extend([vec!["ca", "issue"], vec!["accel", "enable"]]);
    for args in runs {
        let out = Command::new(WARDEN)
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        let help = output_text(&out);
        assert!(
            help.contains("LOG_FORMAT=json") && help.contains("LOG_LEVEL"),
            "warden {args:?} --help:\n{help}"
        );
    }
}
