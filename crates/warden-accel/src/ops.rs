//! `warden accel enable|disable|status`: attachments that outlive the command (links pinned
//! in warden's bpffs), removing them (and any proxy's, found by cgroup), and what is attached
//! where with the counters.

use crate::accelerator::imp::{preflight_for, prepare};
use crate::accelerator::{AccelRequest, Unavailable};
use crate::cgroup::{self, CgroupTarget};
use crate::links::{self, CgroupLink};
use crate::{bpffs, loader, maps, Capture};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Attach to `req.cgroup` and pin the links; returns the report lines.
pub fn enable(req: &AccelRequest) -> Result<Vec<String>, Unavailable> {
    let one = |m: String| Unavailable(vec![m]);
    let prepared = prepare(req)?;
    let target = prepared.target.clone();
    let names: Vec<&str> = prepared.attached.iter().map(|a| a.program).collect();
    let names = names.join(" ");
    let dir = bpffs::links_dir(&req.bpffs, target.id);
    loader::pin(&prepared.attached, &dir).map_err(one)?;
    let mut out = vec![format!(
        "enabled on {} (id {}): {names}, pinned in {}",
        target.path.display(),
        target.id,
        dir.display()
    )];
    out.push(format!(
        "capture {}, legs {}: {}",
        req.capture.name(),
        req.legs.name(),
        req.legs.with(req.capture).unwrap_or_default()
    ));
    if req.capture == Capture::Ebpf {
        out.push(prepared.entry.dial_line());
    }
    if req.capture == Capture::Ebpf && !req.pod_ips.is_empty() {
        let mut pods = maps::pods_map_at(&req.bpffs).map_err(one)?;
        maps::register_pods(
            &mut pods,
            &req.pod_ips,
            target.id,
            req.inbound_port,
            &req.scope.inbound,
        )
        .map_err(one)?;
        let ips: Vec<String> = req.pod_ips.iter().map(|i| i.to_string()).collect();
        out.push(format!(
            "same-node sidecars reach pod {} on its inbound port {}",
            ips.join(", "),
            req.inbound_port
        ));
    }
    Ok(out)
}

/// Detach warden's programs from `cgroup` (every cgroup `enable` pinned when `None`),
/// whoever holds them, and forget the pods those cgroups announced. `clean` then removes
/// every pin and unmounts warden's bpffs, unless sockets are still in the map.
pub fn disable(
    cgroup: Option<&Path>,
    bpffs_dir: &Path,
    clean: bool,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let targets: Vec<u64> = match cgroup {
        Some(p) => vec![
            cgroup::resolve(Some(p), cgroup::cgroup2_root().as_deref())
                .map_err(|e| e.to_string())?
                .id,
        ],
        None => bpffs::pinned_cgroups(bpffs_dir),
    };
    for id in &targets {
        let mut detached: Vec<String> = Vec::new();
        for link in links::cgroup_links(Some(*id)) {
            match links::detach(link.link_id) {
                Ok(()) => detached.push(link.program),
                Err(e) => out.push(format!(
                    "cannot detach {} (link {}): {e}",
                    link.program, link.link_id
                )),
            }
        }
        let pinned = loader::unpin(&bpffs::links_dir(bpffs_dir, *id));
        maps::forget_cgroup(bpffs_dir, *id);
        let pods = maps::pods_map_at(bpffs_dir)
            .map(|mut m| maps::unregister_pods(&mut m, *id))
            .unwrap_or_default();
        detached.sort();
        detached.dedup();
        let mut line = format!("cgroup id {id}: ");
        if detached.is_empty() && pinned.is_empty() {
            line.push_str("nothing of warden's was attached");
        } else {
            let _ = write!(line, "detached {}", detached.join(" "));
            if !pinned.is_empty() {
                let _ = write!(line, "; unpinned {}", pinned.join(" "));
            }
        }
        if !pods.is_empty() {
            let ips: Vec<String> = pods.iter().map(|i| i.to_string()).collect();
            let _ = write!(line, "; pod {} no longer announced", ips.join(", "));
        }
        out.push(line);
    }
    if targets.is_empty() {
        out.push("no cgroup has links pinned by `warden accel enable`".into());
    }
    out.push(
        "connections already accelerated keep their short-circuit until they close; new ones use TCP (and iptables capture, if installed)".into(),
    );
    if clean {
        if let Ok(n) = maps::sockets_at(bpffs_dir) {
            if n > 0 {
                return Err(format!(
                    "{n} accelerated sockets are still open; removing the socket map now would drop the data queued on them. Close them (stop their sidecars) and run --clean again"
                ));
            }
        }
        // Only programs of this bpffs (using its maps): other bpffs' sets are not ours.
        let ours = maps::map_ids_at(bpffs_dir);
        let leftovers: Vec<CgroupLink> = links::cgroup_links(None)
            .into_iter()
            .filter(|l| l.map_ids.iter().any(|id| ours.contains(id)))
            .collect();
        for link in &leftovers {
            let _ = links::detach(link.link_id);
        }
        if !leftovers.is_empty() {
            out.push(format!("detached {} leftover links", leftovers.len()));
        }
        let cleaned = bpffs::clean(bpffs_dir).map_err(|e| e.to_string())?;
        if cleaned.is_empty() {
            out.push(format!(
                "{} is not mounted; nothing to clean",
                bpffs_dir.display()
            ));
        }
        out.extend(cleaned);
    }
    Ok(out)
}

/// What is attached where, the capture of each cgroup and what it short-circuits, the pods
/// announced, the sockets in the map and the counters.
pub fn status(cgroup: Option<&Path>, bpffs_dir: &Path, capture: Capture) -> String {
    let mut out = String::new();
    let probe_req = AccelRequest {
        cgroup: cgroup.map(Path::to_path_buf),
        bpffs: bpffs_dir.to_path_buf(),
        capture,
        legs: crate::Legs::All,
        proxy_uid: 1337,
        outbound_port: 15001,
        inbound_port: 15006,
        pod_ips: Vec::new(),
        scope: crate::Scope::default(),
    };
    let root = cgroup::cgroup2_root();
    match preflight_for(&probe_req, cgroup.is_some()) {
        Ok(_) => out.push_str("ready: privileges, cgroup2 and kernel features present\n"),
        Err(e) => {
            out.push_str("missing:\n");
            for m in &e.0 {
                let _ = writeln!(out, "  - {m}");
            }
        }
    }
    let _ = writeln!(
        out,
        "BPF object: {} ({} bytes)",
        if crate::OBJECT_FROM == "clang" {
            "built by clang from bpf/accel.bpf.c"
        } else {
            "the checked-in bpf/accel.bpf.o (no clang at build time)"
        },
        loader::OBJECT.len()
    );
    let mounted = bpffs::is_mounted(bpffs_dir);
    let _ = writeln!(
        out,
        "bpffs {}: {}",
        bpffs_dir.display(),
        if mounted { "mounted" } else { "not mounted" }
    );
    let only: Option<CgroupTarget> =
        cgroup.and_then(|p| cgroup::resolve(Some(p), root.as_deref()).ok());
    let mut by_cgroup: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for l in links::cgroup_links(only.as_ref().map(|t| t.id)) {
        by_cgroup.entry(l.cgroup_id).or_default().push(l.program);
    }
    let pinned = bpffs::pinned_cgroups(bpffs_dir);
    if by_cgroup.is_empty() {
        out.push_str("attached: nowhere\n");
    }
    for (id, mut programs) in by_cgroup {
        programs.sort();
        let path: PathBuf = root
            .as_deref()
            .and_then(|r| cgroup::path_of(r, id))
            .unwrap_or_else(|| PathBuf::from(format!("<cgroup id {id}>")));
        let how = if pinned.contains(&id) {
            "pinned by warden accel enable"
        } else {
            "held by a running process (e.g. warden proxy --accel)"
        };
        let _ = writeln!(
            out,
            "cgroup {} (id {id}), {how}: {}",
            path.display(),
            programs.join(" ")
        );
        match maps::cgroup_at(bpffs_dir, id) {
            Some(cfg) => describe_load(&mut out, &cfg),
            // Loaded by a warden that did not note its settings: the programs tell the capture.
            None => {
                let mode = if programs.iter().any(|p| p == "wd_connect4") {
                    Capture::Ebpf
                } else {
                    Capture::Iptables
                };
                let _ = writeln!(out, "  capture {}: {}", mode.name(), mode.legs());
            }
        }
    }
    if mounted {
        match maps::pods_at(bpffs_dir) {
            Ok(pods) if !pods.is_empty() => {
                for (ip, p) in pods {
                    let _ = writeln!(
                        out,
                        "meshed pod {ip}: same-node sidecars connect to its port {} (cgroup id {})",
                        p.inbound_port, p.cgroup
                    );
                }
            }
            _ => {}
        }
        if let Ok(n) = maps::sockets_at(bpffs_dir) {
            let _ = writeln!(out, "sockets in the map: {n}");
        }
        match maps::counters_at(bpffs_dir) {
            Ok(c) => {
                out.push_str("counters (node-wide, since the maps were created):\n");
                out.push_str(&c.table());
            }
            Err(e) => {
                let _ = writeln!(out, "counters: {e}");
            }
        }
    }
    out
}

/// One cgroup's settings as its load noted them: capture, legs and, for eBPF capture, what
/// it captures.
fn describe_load(out: &mut String, cfg: &maps::CgroupEntry) {
    let (capture, legs) = (cfg.capture(), cfg.legs());
    let _ = writeln!(
        out,
        "  capture {}, legs {}: {}",
        capture.name(),
        legs.name(),
        legs.with(capture).unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "  proxy uid {}, outbound listener {}, inbound listener {}",
        cfg.proxy_uid, cfg.outbound_port, cfg.inbound_port
    );
    if capture == Capture::Ebpf {
        let _ = writeln!(out, "  {}", cfg.dial_line());
        let _ = writeln!(out, "  captures outbound: {}", cfg.outbound.describe());
        let _ = writeln!(
            out,
            "  same-node sidecars reach its inbound listener for {}",
            cfg.inbound.describe()
        );
    }
}
