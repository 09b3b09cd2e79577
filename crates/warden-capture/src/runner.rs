//! Where the iptables tools run: [`Host`] runs them in the caller's network namespace,
//! [`InNetns`] inside another one (through `nsenter`), which is how tests keep their hands
//! off the host's rules.

use crate::error::CaptureError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs one tool to completion.
pub trait Runner {
    /// Run `program args...`, feeding it `stdin`; its stdout on success, its stderr in the
    /// error otherwise.
    fn run(
        &self,
        program: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, CaptureError>;

    /// Where `tool` is installed, if it is.
    fn locate(&self, tool: &str) -> Option<PathBuf> {
        locate(tool)
    }
}

/// The current network namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host;

impl Runner for Host {
    fn run(
        &self,
        program: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, CaptureError> {
        let mut command = Command::new(program);
        command.args(args);
        finish(command, describe(program, args), stdin)
    }
}

/// The network namespace at `path` (e.g. `/run/netns/NAME`), entered with `nsenter --net`.
#[derive(Debug, Clone)]
pub struct InNetns {
    path: PathBuf,
}

impl InNetns {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        InNetns { path: path.into() }
    }
}

impl Runner for InNetns {
    fn run(
        &self,
        program: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, CaptureError> {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.path.display()))
            .arg("--")
            .arg(program)
            .args(args);
        finish(command, describe(program, args), stdin)
    }
}

/// `tool` on `PATH`, or in the sbin directories where Debian puts iptables (not on every
/// user's `PATH`, e.g. under `su`).
pub fn locate(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

fn describe(program: &Path, args: &[&str]) -> String {
    let name = program.file_name().unwrap_or(program.as_os_str());
    std::iter::once(name.to_string_lossy().into_owned())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn finish(
    mut command: Command,
    described: String,
    stdin: Option<&str>,
) -> Result<String, CaptureError> {
    let spawn_error = |source| CaptureError::Spawn {
        command: described.clone(),
        source,
    };
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(spawn_error)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Dropping the pipe after writing is the end of input iptables-restore waits for.
        pipe.write_all(text.as_bytes()).map_err(spawn_error)?;
    }
    let out = child.wait_with_output().map_err(spawn_error)?;
    if !out.status.success() {
        return Err(CaptureError::Command {
            command: described,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
