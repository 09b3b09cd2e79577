//! The cgroup links of warden's programs, wherever they came from (a proxy holding them, or
//! `warden accel enable` pinning them): found by walking the kernel's link ids, detached with
//! BPF_LINK_DETACH. aya lists links but does not expose a cgroup link's cgroup id, so these
//! few commands are made directly.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// enum bpf_cmd (linux/bpf.h).
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_LINK_GET_NEXT_ID: libc::c_long = 31;
const BPF_LINK_DETACH: libc::c_long = 34;
const BPF_LINK_TYPE_CGROUP: u32 = 3;

/// enum bpf_attach_type values of the cgroup hooks used.
pub mod attach_type {
    pub const SOCK_OPS: u32 = 3;
    pub const INET4_CONNECT: u32 = 10;
    pub const INET6_CONNECT: u32 = 11;
    pub const GETSOCKOPT: u32 = 21;
    pub const SETSOCKOPT: u32 = 22;
    pub const INET4_GETPEERNAME: u32 = 29;
    pub const INET6_GETPEERNAME: u32 = 30;
}

/// Every warden program name starts with this (bpf/accel.bpf.c).
pub const PROGRAM_PREFIX: &str = "wd_";

/// A program of warden's attached to a cgroup through a bpf_link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLink {
    pub link_id: u32,
    pub program: String,
    pub cgroup_id: u64,
    /// The maps the program uses: which bpffs (which node-wide map set) it belongs to.
    pub map_ids: Vec<u32>,
}

/// Zero-padded `union bpf_attr` (the kernel wants unused bytes zero).
#[repr(C, align(8))]
struct Attr([u32; 32]);

fn sys_bpf(cmd: libc::c_long, attr: &mut Attr) -> std::io::Result<i64> {
    // SAFETY: attr is a valid, writable, zeroed bpf_attr-sized buffer for these commands.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            std::mem::size_of::<Attr>() as u32,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn next_link_id(start: u32) -> Option<u32> {
    let mut attr = Attr([0; 32]);
    attr.0[0] = start;
    sys_bpf(BPF_LINK_GET_NEXT_ID, &mut attr).ok()?;
    Some(attr.0[1])
}

fn link_fd(id: u32) -> std::io::Result<OwnedFd> {
    let mut attr = Attr([0; 32]);
    attr.0[0] = id;
    let fd = sys_bpf(BPF_LINK_GET_FD_BY_ID, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `struct bpf_link_info` up to the cgroup member: type, id, prog_id, then the union at 16.
#[repr(C, align(8))]
struct LinkInfo {
    kind: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    cgroup_id: u64,
    attach_type: u32,
    _rest: [u32; 25],
}

fn link_info(fd: &OwnedFd) -> std::io::Result<LinkInfo> {
    // SAFETY: LinkInfo is plain integers; all-zero is a valid value.
    let mut info: LinkInfo = unsafe { std::mem::zeroed() };
    let mut attr = Attr([0; 32]);
    attr.0[0] = fd.as_raw_fd() as u32;
    attr.0[1] = std::mem::size_of::<LinkInfo>() as u32;
    let ptr = &mut info as *mut LinkInfo as u64;
    attr.0[2] = ptr as u32;
    attr.0[3] = (ptr >> 32) as u32;
    sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

/// Name and map ids of each loaded program, by program id.
fn programs() -> std::collections::HashMap<u32, (String, Vec<u32>)> {
    aya::programs::loaded_programs()
        .flatten()
        .filter_map(|p| {
            let name = p.name_as_str()?.to_string();
            let maps = p.map_ids().ok().flatten().unwrap_or_default();
            Some((p.id(), (name, maps)))
        })
        .collect()
}

/// warden's cgroup links on this node (all cgroups when `cgroup_id` is `None`).
pub fn cgroup_links(cgroup_id: Option<u64>) -> Vec<CgroupLink> {
    let programs = programs();
    let mut out = Vec::new();
    let mut id = 0;
    while let Some(next) = next_link_id(id) {
        id = next;
        let Ok(fd) = link_fd(next) else { continue };
        let Ok(info) = link_info(&fd) else { continue };
        // A detached link (BPF_LINK_DETACH, or its cgroup removed) reports cgroup id 0 while
        // its holder still has the fd: it runs nowhere.
        if info.kind != BPF_LINK_TYPE_CGROUP
            || info.cgroup_id == 0
            || cgroup_id.is_some_and(|c| c != info.cgroup_id)
        {
            continue;
        }
        let Some((program, map_ids)) = programs.get(&info.prog_id) else {
            continue;
        };
        if program.starts_with(PROGRAM_PREFIX) {
            out.push(CgroupLink {
                link_id: info.id,
                program: program.clone(),
                cgroup_id: info.cgroup_id,
                map_ids: map_ids.clone(),
            });
        }
    }
    out
}

/// Attach `program` to `cgroup` as a bpf_link (other programs may share the hook). The link
/// lives while the returned fd (or a pin of it) does.
pub fn attach_cgroup(
    program: BorrowedFd<'_>,
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
) -> std::io::Result<OwnedFd> {
    let mut attr = Attr([0; 32]);
    attr.0[0] = program.as_raw_fd() as u32;
    attr.0[1] = cgroup.as_raw_fd() as u32;
    attr.0[2] = attach_type;
    // Cgroup links take no flags: they always share the hook (like BPF_F_ALLOW_MULTI).
    let fd = sys_bpf(BPF_LINK_CREATE, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Pin a link (or any BPF object) at `path` in a bpffs.
pub fn pin(fd: &OwnedFd, path: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path has a NUL byte"))?;
    let mut attr = Attr([0; 32]);
    let ptr = c.as_ptr() as u64;
    attr.0[0] = ptr as u32;
    attr.0[1] = (ptr >> 32) as u32;
    attr.0[2] = fd.as_raw_fd() as u32;
    sys_bpf(BPF_OBJ_PIN, &mut attr).map(|_| ())
}

/// Detach a link (its holder keeps a defunct fd; the program stops running for the cgroup).
pub fn detach(link_id: u32) -> std::io::Result<()> {
    let fd = link_fd(link_id)?;
    let mut attr = Attr([0; 32]);
    attr.0[0] = fd.as_raw_fd() as u32;
    sys_bpf(BPF_LINK_DETACH, &mut attr).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_kernel_abi() {
        // The cgroup member of bpf_link_info's union starts at offset 16.
        assert_eq!(std::mem::offset_of!(LinkInfo, cgroup_id), 16);
        assert_eq!(std::mem::offset_of!(LinkInfo, attach_type), 24);
        assert!(std::mem::size_of::<Attr>() >= 120);
    }
}
