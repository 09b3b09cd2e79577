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
