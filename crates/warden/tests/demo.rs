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

/// `warden demo --print-config | head`: a reader that stops early must not make it panic.
#[test]
fn print_config_to_a_closed_pipe_does_not_panic() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["demo", "--print-config"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run warden demo --print-config");
    let mut first = [0u8; 64];
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_exact(&mut first).unwrap();
    // Closed with most of the (large) config unread, as `head` does.
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?} {stderr}", out.status);
    assert!(String::from_utf8_lossy(&first).contains("apiVersion"));
}
