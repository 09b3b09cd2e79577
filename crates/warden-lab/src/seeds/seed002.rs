//! Seed 002: same-node sidecar acceleration off and on, fortio's HTTP `/echo?size=1024` and TCP
//! 1 KiB echo as `warden load -c 64 --qps 0`, with bench/accel.sh's pods (each in its own child
//! cgroup, where the eBPF programs attach). Sidecars are restarted for every run, so no pooled
//! connection crosses from one mode to the other.

use super::pods::{unavailable, Pods, Side};
use super::{comparison, percent_change, ratio_text, Budget, Header};
use crate::load_run::LoadSpec;
use crate::model::{Metric, PublishedRow, SeedResult};
use crate::process::{Core, Lab, Server};
use crate::runner::{BeforeRun, Case, ComparisonSpec, Progress};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

pub const HEADER: Header = Header {
    id: "seed002",
    title: "Sidecar acceleration with eBPF sockops (same-node short-circuit)",
    article: "fortio -c 64 -qps 0 -t 30s between two pods of one node on ASM: HTTP echo 1 KiB \
              11461 -> 13521 QPS (+18%), avg latency -16%; TCP echo 1 KiB 54565 -> 85665 QPS \
              (+57%), latency 1.172 -> 0.746 ms (-36%).",
};

const VIP: &str = "10.96.0.30";
const CAPS: &str = "+bpf,+net_admin,+sys_admin";
const CONNECTIONS: usize = 64;

/// warden's bpffs for the sidecars (uid 1337 mounts it), unmounted and removed on drop.
struct Bpffs {
    path: PathBuf,
    warden: PathBuf,
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.warden)
            .args(["accel", "disable", "--clean", "--bpffs"])
            .arg(&self.path)
            .output();
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .output();
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    NoMesh,
    Off,
    On,
}

/// Fields drop in order: the sidecars, then the bpffs, then the pods.
struct Sidecars {
    running: RefCell<Vec<Server>>,
    bpffs: Bpffs,
    pods: Pods,
    mesh: PathBuf,
}

impl Sidecars {
    /// (Re)start both sidecars in `mode` (none for NoMesh); the pids whose CPU counts.
    fn start(&self, lab: &Lab, mode: Mode) -> anyhow::Result<Vec<u32>> {
        self.running.borrow_mut().clear();
        if mode == Mode::NoMesh {
            return Ok(Vec::new());
        }
        let bpffs = self.bpffs.path.display().to_string();
        let extra: Vec<&str> = match mode {
            Mode::On => vec!["--accel", "--capture", "ebpf", "--bpffs", &bpffs],
            _ => vec![],
        };
        let mut pids = Vec::new();
        for (side, label) in [(Side::Server, "app=server"), (Side::Client, "app=client")] {
            let name = format!(
                "seed002-sidecar-{}",
                if side == Side::Client {
                    "client"
                } else {
                    "server"
                }
            );
            let s = self
                .pods
                .sidecar(lab, side, &name, &self.mesh, label, Some(CAPS), &extra)?;
            pids.push(s.pid);
            self.running.borrow_mut().push(s);
            lab.wait_status(
                &self.pods.prefix(side),
                "http://127.0.0.1:15000/ready",
                "200",
                Duration::from_secs(10),
            )?;
        }
        if mode == Mode::On {
            for s in self.running.borrow().iter() {
                let log = s.log_tail();
                if let Some(line) = log.lines().find(|l| l.contains("acceleration off")) {
                    anyhow::bail!("the accelerated sidecar runs unaccelerated: {line}");
                }
            }
        }
        Ok(pids)
    }
}

pub fn run(lab: &Lab, progress: &Progress, busy: f64) -> anyhow::Result<SeedResult> {
    if let Some(why) = unavailable(&["iptables", "setpriv", "umount"]) {
        return Ok(HEADER.skipped(
            lab,
            format!("the pods need network namespaces and cgroups: {why}"),
        ));
    }
    if warden_sandbox::Cgroup::root().is_none() {
        return Ok(HEADER.skipped(
            lab,
            "no cgroup2 hierarchy is mounted (the programs attach to the pods' cgroups)".into(),
        ));
    }
    let budget = Budget::of(lab, 3, 3.0);
    progress.say("seed002: making the pods (namespaces, cgroups, capture rules)");
    let pods = Pods::new(lab, "l2", "10.233.7", true)?;
    let mut servers: Vec<Server> = Vec::new();
    for (http, tcp) in [(8080, 8078), (9080, 9078)] {
        let mut inner = lab.warden(Core::Server);
        inner.args([
            "echo",
            "--http",
            &format!("0.0.0.0:{http}"),
            "--tcp",
            &format!("0.0.0.0:{tcp}"),
        ]);
        servers.push(lab.spawn(
            &format!("seed002-echo-{http}"),
            pods.command(Side::Server, &inner),
        )?);
    }
    let mesh = lab.write(
        "seed002/mesh.yaml",
        &super::seed003::mesh_yaml(
            VIP,
            &pods.server_ip,
            &pods.client_ip,
            "  - {name: http-echo, port: 8080, targetPort: 8080}\n  - {name: tcp-echo, port: 8078, targetPort: 8078}\n",
        ),
    )?;
    pods.capture(
        lab,
        Side::Client,
        &["--exclude-outbound-ports", "9080,9078"],
    )?;
    pods.capture(lab, Side::Server, &["--exclude-inbound-ports", "9080,9078"])?;
    let bpffs_path = PathBuf::from(format!("/run/warden-lab-bpffs-{}", std::process::id()));
    std::fs::create_dir_all(&bpffs_path)?;
    let bpffs = Bpffs {
        path: bpffs_path.clone(),
        warden: lab.warden.clone(),
    };
    // The sidecars (uid 1337) mount warden's bpffs here.
    std::os::unix::fs::chown(
        &bpffs_path,
        Some(super::pods::PROXY_UID),
        Some(super::pods::PROXY_UID),
    )?;
    let sidecars = Rc::new(Sidecars {
        running: RefCell::new(Vec::new()),
        bpffs,
        pods,
        mesh,
    });
    let client = sidecars.pods.prefix(Side::Client);
    // Both paths answer 1 KiB, accelerated and not, before measuring; a kernel without the
    // eBPF support makes the section say why.
    for mode in [Mode::On, Mode::Off] {
        if let Err(e) = sidecars.start(lab, mode) {
            let reason = format!("{e:#}");
            drop(servers);
            return Ok(HEADER.skipped(lab, reason));
        }
        lab.wait_status(
            &client,
            &format!("http://{VIP}:8080/echo?size=1024"),
            "200",
            Duration::from_secs(10),
        )?;
    }
    let spec = |url: String, tcp: bool| LoadSpec {
        url,
        connections: CONNECTIONS,
        duration: budget.run,
        keepalive: true,
        payload_size: tcp.then_some(1024),
        find_max: None,
        prefix: client.clone(),
    };
    let mut cases = Vec::new();
    let server_ip = sidecars.pods.server_ip.clone();
    for (proto, tcp) in [("tcp", true), ("http", false)] {
        for (mode, name) in [
            (Mode::NoMesh, "no mesh"),
            (Mode::Off, "sidecars"),
            (Mode::On, "sidecars + eBPF"),
        ] {
            let (host, http, tcpp) = if mode == Mode::NoMesh {
                (server_ip.as_str(), 9080, 9078)
            } else {
                (VIP, 8080, 8078)
            };
            let url = if tcp {
                format!("tcp://{host}:{tcpp}")
            } else {
                format!("http://{host}:{http}/echo?size=1024")
            };
            let id = format!(
                "{proto}-{}",
                match mode {
                    Mode::NoMesh => "nomesh",
                    Mode::Off => "off",
                    Mode::On => "on",
                }
            );
            let mut case = Case::new(
                &id,
                &format!("{} {name}", proto.to_uppercase()),
                "warden",
                spec(url, tcp),
                vec![],
            );
            let sc = sidecars.clone();
            let before: BeforeRun = Box::new(move |lab: &Lab| sc.start(lab, mode));
            case.before_run = Some(before);
            cases.push(case);
        }
    }
    let comparisons = vec![
        ComparisonSpec::noise_floor("tcp-off", "TCP sidecars", Metric::Rps),
        ComparisonSpec::new("TCP QPS on/off", "tcp-off", "tcp-on", Metric::Rps)
            .article(85665.0 / 54565.0),
        ComparisonSpec::new(
            "TCP avg latency on/off",
            "tcp-off",
            "tcp-on",
            Metric::AvgLatency,
        )
        .article(0.746 / 1.172),
        ComparisonSpec::new("HTTP QPS on/off", "http-off", "http-on", Metric::Rps)
            .article(13521.0 / 11461.0),
        ComparisonSpec::new(
            "HTTP avg latency on/off",
            "http-off",
            "http-on",
            Metric::AvgLatency,
        )
        .article(4.732 / 5.583),
        ComparisonSpec::new("TCP QPS on / no mesh", "tcp-nomesh", "tcp-on", Metric::Rps),
        ComparisonSpec::new(
            "HTTP QPS on / no mesh",
            "http-nomesh",
            "http-on",
            Metric::Rps,
        ),
    ];
    let outcome = budget.run(lab, progress, "seed002", cases, comparisons);
    sidecars.running.borrow_mut().clear();
    drop(servers);
    drop(sidecars);
    let shape = format!(
        "warden load -c {CONNECTIONS} --qps 0 (fortio -c 64 -qps 0), HTTP /echo?size=1024 and TCP --payload-size 1024, {}, sidecars restarted for every run",
        budget.describe()
    );
    let mut seed = HEADER.ran(lab, outcome, busy, shape, budget.rounds, Vec::new());
    seed.notes.push("accelerated sidecars run with --accel --capture ebpf (connect4 captures, sk_msg short-circuits every leg); the iptables rules stay installed, as for callers from other nodes".into());
    finish(&mut seed);
    Ok(seed)
}

fn finish(seed: &mut SeedResult) {
    let case = |id: &str| seed.cases.iter().find(|c| c.id == id);
    let qps = |id: &str| {
        case(id).map_or("not measured".into(), |c| {
            format!("{:.0} QPS, avg {:.3} ms", c.median_rps, c.median_avg_ms)
        })
    };
    let ratio = |name: &str| {
        comparison(seed, name)
            .filter(|c| !c.ratios.is_empty())
            .map_or("not measured".into(), |c| {
                format!("{} ({})", percent_change(c.median), ratio_text(c))
            })
    };
    seed.published = vec![
        PublishedRow {
            what: "HTTP, acceleration off".into(),
            article: "11461 QPS, avg 5.583 ms".into(),
            measured: qps("http-off"),
            case: Some("http-off".into()),
        },
        PublishedRow {
            what: "HTTP, acceleration on".into(),
            article: "13521 QPS, avg 4.732 ms".into(),
            measured: qps("http-on"),
            case: Some("http-on".into()),
        },
        PublishedRow {
            what: "HTTP QPS on/off".into(),
            article: "+18%".into(),
            measured: ratio("HTTP QPS on/off"),
            case: None,
        },
        PublishedRow {
            what: "HTTP avg latency on/off".into(),
            article: "-16%".into(),
            measured: ratio("HTTP avg latency on/off"),
            case: None,
        },
        PublishedRow {
            what: "TCP, acceleration off".into(),
            article: "54565 QPS, avg 1.172 ms".into(),
            measured: qps("tcp-off"),
            case: Some("tcp-off".into()),
        },
        PublishedRow {
            what: "TCP, acceleration on".into(),
            article: "85665 QPS, avg 0.746 ms".into(),
            measured: qps("tcp-on"),
            case: Some("tcp-on".into()),
        },
        PublishedRow {
            what: "TCP QPS on/off".into(),
            article: "+57%".into(),
            measured: ratio("TCP QPS on/off"),
            case: None,
        },
        PublishedRow {
            what: "TCP avg latency on/off".into(),
            article: "-36%".into(),
            measured: ratio("TCP avg latency on/off"),
            case: None,
        },
    ];
    let tcp = comparison(seed, "TCP QPS on/off").filter(|c| !c.ratios.is_empty());
    let http = comparison(seed, "HTTP QPS on/off").filter(|c| !c.ratios.is_empty());
    seed.verdict = match (tcp, http) {
        (Some(t), Some(h)) => format!(
            "The article's acceleration raised TCP QPS by 57% and HTTP QPS by 18%. Here it changes TCP QPS by {} ({}) and HTTP QPS by {} ({}).",
            percent_change(t.median),
            ratio_text(t),
            percent_change(h.median),
            ratio_text(h)
        ),
        _ => "Not enough runs to compare.".into(),
    };
}
