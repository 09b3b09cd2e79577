//! The README's example, run as written: the first ```console block of README.md is read, its
//! `warden proxy ...` line started with this build's binary (from the repository root, so the
//! config path is the README's), and every other `$ ` command run with `sh` and compared with
//! the output the README shows (the 403 of the DENY policy, then 200s and the 429 of the local
//! limit). So the front door cannot promise what the binary does not do.
//!
//! The example names port 8080 and the default admin port 15000, so it runs in a network
//! namespace of its own (root; skipped with the reason where namespaces cannot be made),
//! removed after, also on failure (the guard's drop).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use warden_testkit::netns::{self, NetNs};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One `$ command` of the README and the lines it prints.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    output: Vec<String>,
}

/// The steps of the first ```console block of `markdown`.
fn console_steps(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in markdown
        .lines()
        .skip_while(|l| l.trim_end() != "```console")
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
    {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push(Step {
                command: command.to_string(),
                output: Vec::new(),
            }),
            None => {
                if let Some(step) = steps.last_mut() {
                    step.output.push(line.to_string());
                }
            }
        }
    }
    steps
}

#[test]
fn console_steps_are_commands_with_their_output() {
    let md = "text\n```sh\n$ not this\n```\n```console\n$ a &\n$ b\nout 1\nout 2\n```\n$ c\n";
    assert_eq!(
        console_steps(md),
        vec![
            Step {
                command: "a &".into(),
                output: vec![]
            },
            Step {
                command: "b".into(),
                output: vec!["out 1".into(), "out 2".into()]
            },
        ]
    );
}

/// The proxy the README starts in the background, killed on drop.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `warden proxy ARGS &` from the README, started in `ns` from the repository root.
fn start_proxy(ns: &NetNs, command: &str) -> Proxy {
    let args: Vec<&str> = command.trim_end_matches('&').split_whitespace().collect();
    assert_eq!(args.first(), Some(&"warden"), "{command}");
    let child = ns
        .command(common::WARDEN)
        .args(&args[1..])
        .current_dir(repo_root())
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("warden proxy starts");
    Proxy(child)
}

/// Waits for the admin `/ready` (the default admin address); asking the listener itself would
/// spend the example's rate-limit tokens.
fn wait_ready(ns: &NetNs, proxy: &mut Proxy) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = ns
            .command("curl")
            .args(["-s", "-m", "2", "http://127.0.0.1:15000/ready"])
            .output()
            .expect("curl");
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("LIVE") {
            return;
        }
        assert!(
            matches!(proxy.0.try_wait(), Ok(None)),
            "warden proxy exited before it was ready"
        );
        assert!(Instant::now() < deadline, "warden proxy not ready in time");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn readme_example_gets_403_and_429() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    if !netns::on_path("curl") {
        eprintln!("skipped: curl is not installed (apt-get install curl; test.sh does)");
        return;
    }
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let steps = console_steps(&readme);
    let (first, rest) = steps
        .split_first()
        .expect("a ```console block in README.md");
    assert!(
        first
            .command
            .starts_with("warden proxy -c examples/quickstart/gateway.yaml"),
        "the README's example starts the proxy on its example file: {first:?}"
    );
    assert!(
        rest.iter()
            .flat_map(|s| &s.output)
            .any(|l| l.ends_with(" 403"))
            && rest
                .iter()
                .flat_map(|s| &s.output)
                .any(|l| l.ends_with(" 429")),
        "the README's example shows a 403 and a 429: {rest:?}"
    );

    let ns = NetNs::new("readme").expect("netns");
    let mut proxy = start_proxy(&ns, &first.command);
    wait_ready(&ns, &mut proxy);
    for step in rest {
        let out = ns
            .command("sh")
            .args(["-c", &step.command])
            .current_dir(repo_root())
            .output()
            .expect("sh");
        let got = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            step.output,
            "`{}` printed what the README does not show (stderr: {})",
            step.command,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
