//! YAML alias bombs are refused with a located error before their expansion costs memory: the
//! peak resident set of this process grows by less than 32 MB while one is loaded. (One test in
//! its own binary, so no other test's allocations share the measurement.)

use std::path::PathBuf;

/// A billion-laughs document of `levels` anchors, each aliasing the previous one ten times,
/// after `pad` bytes of an anchored string that the first level aliases.
fn bomb(levels: usize, pad: usize) -> String {
    let mut text = format!("pad: &a0 \"{}\"\n", "x".repeat(pad));
    for i in 1..levels {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text
}

/// Peak resident set size (VmHWM) in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Reset the peak to the current resident set (Linux `clear_refs`, value 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("clear_refs");
}

#[test]
fn alias_bombs_of_1_kb_and_1_mb_are_refused_with_little_memory() {
    let dir = std::env::temp_dir().join(format!("warden-alias-bomb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = bomb(16, 16);
    let large = bomb(12, 1024 * 1024 - 1024);
    assert!((900..=1100).contains(&small.len()), "{}", small.len());
    assert!(
        (1_000_000..=1_100_000).contains(&large.len()),
        "{}",
        large.len()
    );
    for (name, text) in [("small.yaml", small), ("large.yaml", large)] {
        let path: PathBuf = dir.join(name);
        std::fs::write(&path, &text).unwrap();
        drop(text);
        reset_peak();
        let before = peak_rss_kib();
        let result = warden_config::load_paths(std::slice::from_ref(&path));
        let growth_kib = peak_rss_kib().saturating_sub(before);
        let err = result.expect_err("an alias bomb is refused");
        assert_eq!(err.errors.len(), 1, "{err}");
        let e = &err.errors[0];
        assert_eq!(e.location.file, path);
        assert!(e.location.line.is_some(), "{err}");
        assert!(
            e.message
                .starts_with("invalid YAML: YAML aliases here would expand this"),
            "{err}"
        );
        eprintln!(
            "{name}: refused at line {:?}; peak RSS growth {growth_kib} KiB",
            e.location.line
        );
        assert!(
            growth_kib < 32 * 1024,
            "{name}: peak RSS grew by {growth_kib} KiB"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
