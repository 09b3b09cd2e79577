//! What acceleration needs from the process and the kernel, checked before anything is
//! loaded, so a missing piece is named instead of failing half-way: privileges
//! (capabilities), then program types, map types and helpers (loading a trivial program for
//! each, as libbpf's probes do). cgroup2 is checked where the target is resolved.

/// Linux capability numbers (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process (`CapEff` in /proc/self/status).
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| capeff_in(&s))
        .unwrap_or(0)
}

pub fn capeff_in(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// What is missing to load and attach the programs, given the effective capabilities.
pub fn missing_privileges(caps: u64, euid: u32) -> Vec<String> {
    let admin = has(caps, CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !(has(caps, CAP_BPF) || admin) {
        missing.push(format!(
            "CAP_BPF (or CAP_SYS_ADMIN) to load BPF programs and maps (uid {euid} has neither)"
        ));
    }
    if !(has(caps, CAP_NET_ADMIN) || admin) {
        missing.push(format!(
            "CAP_NET_ADMIN (or CAP_SYS_ADMIN) for socket programs, socket maps and cgroup attachment (uid {euid} has neither)"
        ));
    }
    missing
}

/// Whether mounting a bpffs is allowed (only needed when warden's is not mounted yet).
pub fn may_mount(caps: u64) -> bool {
    has(caps, CAP_SYS_ADMIN)
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Program types, map types and helpers the object uses that this kernel lacks. Empty when
/// everything is there. Needs the privileges above (probing loads programs).
#[cfg(warden_ebpf)]
pub fn missing_kernel_features(capture: bool) -> Vec<String> {
    use aya::maps::MapType;
    use aya::programs::ProgramType;
    use aya::sys::{is_helper_supported, is_map_supported, is_program_supported, BpfHelper};

    let mut missing = Vec::new();
    let mut programs = vec![
        (ProgramType::SockOps, "sock_ops"),
        (ProgramType::SkMsg, "sk_msg"),
        (ProgramType::CgroupSockopt, "cgroup_sockopt"),
    ];
    if capture {
        programs.push((ProgramType::CgroupSockAddr, "cgroup_sock_addr"));
    }
    for (t, name) in &programs {
        match is_program_supported(*t) {
            Ok(true) => {}
            Ok(false) => missing.push(format!("program type {name}")),
            Err(e) => missing.push(format!("program type {name} (probe failed: {e})")),
        }
    }
    for (t, name) in [
        (MapType::SockHash, "sockhash"),
        (MapType::LruHash, "lru_hash"),
        (MapType::Hash, "hash"),
        (MapType::Array, "array"),
    ] {
        match is_map_supported(t) {
            Ok(true) => {}
            Ok(false) => missing.push(format!("map type {name}")),
            Err(e) => missing.push(format!("map type {name} (probe failed: {e})")),
        }
    }
    let mut helpers = vec![
        (
            ProgramType::SockOps,
            BpfHelper::BPF_FUNC_sock_hash_update,
            "sock_ops",
            "bpf_sock_hash_update",
        ),
        (
            ProgramType::SockOps,
            BpfHelper::BPF_FUNC_get_socket_cookie,
            "sock_ops",
            "bpf_get_socket_cookie",
        ),
        (
            ProgramType::SockOps,
            BpfHelper::BPF_FUNC_get_netns_cookie,
            "sock_ops",
            "bpf_get_netns_cookie",
        ),
        (
            ProgramType::SockOps,
            BpfHelper::BPF_FUNC_sock_ops_cb_flags_set,
            "sock_ops",
            "bpf_sock_ops_cb_flags_set",
        ),
        (
            ProgramType::SkMsg,
            BpfHelper::BPF_FUNC_msg_redirect_hash,
            "sk_msg",
            "bpf_msg_redirect_hash",
        ),
        (
            ProgramType::SkMsg,
            BpfHelper::BPF_FUNC_get_netns_cookie,
            "sk_msg",
            "bpf_get_netns_cookie",
        ),
        (
            ProgramType::CgroupSockopt,
            BpfHelper::BPF_FUNC_get_netns_cookie,
            "cgroup_sockopt",
            "bpf_get_netns_cookie",
        ),
    ];
    if capture {
        helpers.extend([
            (
                ProgramType::CgroupSockAddr,
                BpfHelper::BPF_FUNC_get_socket_cookie,
                "cgroup_sock_addr",
                "bpf_get_socket_cookie",
            ),
            (
                ProgramType::CgroupSockAddr,
                BpfHelper::BPF_FUNC_get_current_uid_gid,
                "cgroup_sock_addr",
                "bpf_get_current_uid_gid",
            ),
        ]);
    }
    for (t, helper, prog, name) in helpers {
        match is_helper_supported(t, helper) {
            Ok(true) => {}
            Ok(false) => missing.push(format!("helper {name} in {prog} programs")),
            Err(e) => missing.push(format!(
                "helper {name} in {prog} programs (probe failed: {e})"
            )),
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_capeff() {
        let status = "Name:\twarden\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(capeff_in(status), Some(0x1ff_ffff_ffff));
    }

    #[test]
    fn names_each_missing_capability() {
        let none = missing_privileges(0, 1337);
        assert_eq!(none.len(), 2, "{none:?}");
        assert!(none[0].starts_with("CAP_BPF") && none[0].contains("uid 1337"));
        assert!(none[1].starts_with("CAP_NET_ADMIN"));
        let bpf_only = missing_privileges(1 << CAP_BPF, 1337);
        assert_eq!(bpf_only.len(), 1);
        assert!(bpf_only[0].starts_with("CAP_NET_ADMIN"));
        assert!(missing_privileges(1 << CAP_SYS_ADMIN, 0).is_empty());
        assert!(missing_privileges((1 << CAP_BPF) | (1 << CAP_NET_ADMIN), 1337).is_empty());
    }
}
