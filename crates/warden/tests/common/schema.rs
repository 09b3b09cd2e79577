//! Kubernetes' published OpenAPI schemas, offline: the `kubernetes-validate` package from PyPI
//! ships them (test.sh installs it).

use std::path::Path;
use std::process::Command;

/// Why manifests cannot be validated here, or `None`.
pub fn unavailable() -> Option<String> {
    match Command::new("kubernetes-validate")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => None,
        _ => Some("kubernetes-validate is not installed (pip install kubernetes-validate)".into()),
    }
}

/// `kubernetes-validate --strict` (unknown fields are errors) of every document of `file`:
/// its report when one fails.
pub fn validate(file: &Path) -> Result<(), String> {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(file)
        .output()
        .map_err(|e| e.to_string())?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && !report.contains("ERROR") {
        Ok(())
    } else {
        Err(report)
    }
}
