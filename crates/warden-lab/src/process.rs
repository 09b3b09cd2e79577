//! The processes a lab run starts: servers killed on drop (also when Ctrl-C stops the run),
//! CPU pinning as the benches pin (servers on CPU 0, the client and backends on CPU 1),
//! readiness probes, and the list of commands run (results.json's `commands`). Free ports come
//! from `warden_sandbox::free_port`.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which core a process runs on when pinning is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Core {
    /// The servers under comparison (warden, nginx, HAProxy).
    Server,
    /// The load generator and the shared backends.
    Client,
    /// Wherever the scheduler puts it (RLS, Redis: as bench/global-ratelimit.sh leaves them).
    Any,
}

/// Shared state of one lab run.
pub struct Lab {
    pub warden: PathBuf,
    pub work: warden_sandbox::TempDir,
    pub pinned: bool,
    pub quick: bool,
    pub stop: Arc<AtomicBool>,
    commands: Mutex<Vec<String>>,
}

/// `program arg arg...` as a shell would show it.
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let s = a.to_string_lossy();
            if s.contains([' ', '|', '"']) {
                format!("'{s}'")
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Lab {
    pub fn new(warden: PathBuf, quick: bool, stop: Arc<AtomicBool>) -> anyhow::Result<Lab> {
        let pinned = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
            && warden_sandbox::netns::on_path("taskset");
        Ok(Lab {
            warden,
            work: warden_sandbox::TempDir::new("lab").context("creating the lab's work dir")?,
            pinned,
            quick,
            stop,
            commands: Mutex::new(Vec::new()),
        })
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn dir(&self) -> &Path {
        self.work.path()
    }

    /// Record a command in the run's list (what the report prints under "commands run"); a
    /// command run again (every round's load) is listed once.
    pub fn record(&self, line: String) {
        if let Ok(mut c) = self.commands.lock() {
            if !c.contains(&line) {
                c.push(line);
            }
        }
    }

    /// The commands recorded since the last call (one seed's).
    pub fn take_commands(&self) -> Vec<String> {
        self.commands
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }

    /// `taskset -c N` in front of `inner` when pinning, else `inner` as is.
    pub fn pinned(&self, core: Core, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let cpu = match core {
            Core::Server => Some("0"),
            Core::Client => Some("1"),
            Core::Any => None,
        };
        match cpu {
            Some(cpu) if self.pinned => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpu).arg(program);
                c
            }
            _ => Command::new(program),
        }
    }

    /// `warden ARGS` pinned to `core`.
    pub fn warden(&self, core: Core) -> Command {
        self.pinned(core, &self.warden)
    }

    /// Start a long-running server; its output goes to `<work>/<name>.log`.
    pub fn spawn(&self, name: &str, mut cmd: Command) -> anyhow::Result<Server> {
        let log_path = self.dir().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let line = command_line(&cmd);
        self.record(line.clone());
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {line}"))?;
        Ok(Server {
            name: name.to_string(),
            pid: child.id(),
            child,
            log: log_path,
        })
    }

    /// Run a setup command to completion; a failure carries its stderr.
    pub fn run(&self, mut cmd: Command) -> anyhow::Result<String> {
        let line = command_line(&cmd);
        self.record(line.clone());
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {line}"))?;
        anyhow::ensure!(
            out.status.success(),
            "`{line}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Write `contents` under the work dir and return its path.
    pub fn write(&self, relative: &str, contents: &str) -> anyhow::Result<PathBuf> {
        self.work
            .write(relative, contents)
            .with_context(|| format!("writing {relative}"))
    }

    /// Wait until `url` answers `status` (one `warden load -n 1` probe every 100 ms, run through
    /// `prefix`, e.g. nsenter into the client pod), at most `timeout`.
    pub fn wait_status(
        &self,
        prefix: &[String],
        url: &str,
        status: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline && !self.stopped() {
            let mut cmd = match prefix.split_first() {
                Some((first, rest)) => {
                    let mut c = Command::new(first);
                    c.args(rest).arg(&self.warden);
                    c
                }
                None => Command::new(&self.warden),
            };
            cmd.args([
                "load",
                url,
                "-n",
                "1",
                "-c",
                "1",
                "--timeout",
                "2s",
                "--quiet",
            ])
            .args(["--json", "-"])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
            if let Ok(out) = cmd.output() {
                let json: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                if let Some(codes) = json.get("RetCodes").and_then(|c| c.as_object()) {
                    if codes.contains_key(status) {
                        return Ok(());
                    }
                    last = format!("{codes:?}");
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        anyhow::bail!("{url} did not answer {status} within {timeout:?} (last answer: {last})")
    }
}

/// A server the lab started; killed (and reaped) on drop.
pub struct Server {
    pub name: String,
    pub pid: u32,
    child: Child,
    log: PathBuf,
}

impl Server {
    /// The last lines of its log, for an error message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// Wait (up to 10 s) until the server accepts connections on 127.0.0.1:`port`; Err with
    /// its log tail when it does not.
    pub fn wait_listening(&self, port: u16) -> anyhow::Result<()> {
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        anyhow::bail!(
            "{} did not listen on {port}:\n{}",
            self.name,
            self.log_tail()
        )
    }

    /// Err with the log tail when the process has already exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            anyhow::bail!("{} exited ({status}):\n{}", self.name, self.log_tail());
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
