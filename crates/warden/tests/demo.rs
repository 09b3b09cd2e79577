//! `warden demo` runs every scenario end to end and exits 0 only when all checks hold.

use std::process::Command;

#[test]
fn demo_passes_all_checks() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("demo")
        .output()
        .expect("run warden demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("demo: all checks passed"), "{stdout}");
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
}

#[test]
fn every_subcommand_has_help_and_version_works() {
    let bin = env!("CARGO_BIN_EXE_warden");
    for sub in [
        "proxy",
        "check",
        "demo",
        "ratelimit",
        "ratelimit-config",
        "load",
        "echo",
    ] {
        let out = Command::new(bin)
            .args([sub, "--help"])
            .output()
            .expect("run --help");
        assert!(out.status.success(), "{sub} --help failed");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{sub} --help"
        );
    }
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .expect("run --version");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("warden "));
}

/// Run `warden ARGS`, read `first` bytes of its output, then close the pipe as `head` does;
/// returns what was read. A reader that stops early must not make it panic.
fn with_stdout_closed_after(args: &[&str], first: usize) -> Vec<u8> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run warden");
    let mut read = vec![0u8; first];
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_exact(&mut read).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
    read
}

/// `warden demo --print-config | head`: closed with most of the (large) config unread.
#[test]
fn print_config_to_a_closed_pipe_does_not_panic() {
    let first = with_stdout_closed_after(&["demo", "--print-config"], 64);
    assert!(String::from_utf8_lossy(&first).contains("apiVersion"));
}

/// `warden check -c CONFIG | head`: the pipe is closed before anything is read.
#[test]
fn check_to_a_closed_pipe_does_not_panic() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/gateway/reverse-proxy.yaml"
    );
    with_stdout_closed_after(&["check", "-c", config], 0);
}
