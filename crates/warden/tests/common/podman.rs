//! buildah and podman with everything of theirs under a temporary directory: image storage,
//! run state, network configs, a containers.conf (runc, the cgroupfs manager, no default
//! ulimits: this host's hybrid cgroups stop crun and systemd's manager), removed on drop with
//! every container, pod and image in it.
//!
//! Containers get no network unless a test asks (`netns = "none"`): podman's default bridge
//! would program the host's firewall. A test that publishes a port uses slirp4netns (user-mode
//! networking, its own port forwarder), one that runs several pods puts them in network
//! namespaces it made (`--network ns:PATH`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use warden_testkit::TempDir;

/// Why container tests cannot run here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    if let Some(why) = warden_testkit::netns::unavailable() {
        return Some(why);
    }
    for (tool, package) in [
        ("buildah", "buildah"),
        ("podman", "podman"),
        ("runc", "runc"),
        ("slirp4netns", "slirp4netns"),
        ("curl", "curl"),
        ("strip", "binutils"),
    ] {
        if !warden_testkit::netns::on_path(tool) {
            return Some(format!(
                "{tool} is not installed (apt-get install {package})"
            ));
        }
    }
    None
}

pub struct Podman {
    dir: TempDir,
}

impl Podman {
    pub fn new() -> Podman {
        // Short: slirp4netns puts its API socket (108 bytes at most) in podman's tmp_dir.
        let dir = TempDir::new("pm").expect("temp dir");
        let root = dir.path().to_path_buf();
        let d = |p: &str| root.join(p).display().to_string();
        dir.write(
            "storage.conf",
            &format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                d("graph"),
                d("run")
            ),
        )
        .expect("storage.conf");
        dir.write(
            "containers.conf",
            &format!(
                "[containers]\ndefault_ulimits = []\nnetns = \"none\"\n\
                 [network]\nnetwork_config_dir = \"{}\"\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
                 events_logger = \"file\"\nevents_logfile_path = \"{}\"\ntmp_dir = \"{}\"\n\
                 volume_path = \"{}\"\n",
                d("networks"),
                d("events.log"),
                d(""),
                d("volumes"),
            ),
        )
        .expect("containers.conf");
        Podman { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `program` (podman, buildah, or a script that runs them) with this storage and config.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .env(
                "CONTAINERS_STORAGE_CONF",
                self.dir.path().join("storage.conf"),
            )
            .env("TMPDIR", self.dir.path())
            .stdin(Stdio::null());
        c
    }

    /// `podman args...` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command("podman")
            .args(args)
            .output()
            .expect("podman runs")
    }

    /// `podman args...`, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// deploy/build-image.sh TARGET (`warden` with this test build's binary, or `redis`); the
    /// image's name and the script's size line.
    pub fn build_image(&self, target: &str) -> (String, String) {
        let script = repo_root().join("deploy/build-image.sh");
        let out = self
            .command(&script)
            .arg(target)
            .env("WARDEN_BIN", env!("CARGO_BIN_EXE_warden"))
            .output()
            .expect("build-image.sh runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "build-image.sh {target}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with("built "))
            .unwrap_or_default()
            .to_string();
        let image = line
            .split_whitespace()
            .nth(1)
            .expect("build-image.sh names the image")
            .to_string();
        (image, line)
    }

    /// A container's log (stdout and stderr), for failure messages.
    pub fn logs(&self, container: &str) -> String {
        let out = self.run(&["logs", container]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let quiet = |program: &str, args: &[&str]| {
            let _ = self
                .command(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet("podman", &["pod", "rm", "--all", "--force", "--time", "0"]);
        quiet("podman", &["rm", "--all", "--force", "--time", "0"]);
        quiet("buildah", &["rm", "--all"]);
        quiet("podman", &["rmi", "--all", "--force"]);
        // Whatever overlay or shm mount is left under the directory would stop its removal.
        let root = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&root))
            .collect();
        under.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in under {
            quiet("umount", &["-l", m]);
        }
    }
}

/// The checkout (crates/warden/../..).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
