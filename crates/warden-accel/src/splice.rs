//! Splicing a sidecar's plain TCP relay (the `wd_splice` map of bpf/accel.bpf.c): the relay
//! says, per direction, which socket's bytes leave on which and how many it has delivered.
//! When both sidecars between two apps of this node do, sk_msg puts each app's sends
//! straight into the other app's socket, once the far sidecar has delivered every byte
//! sent before (so no send overtakes one still on the old path). The relay keeps running:
//! it still carries the half-closes and closes, and whatever was in flight.
//!
//! Only for relays that copy bytes untouched (no TLS on either side) and only with eBPF
//! capture and the app legs in the map (otherwise no chain of sockets mirrors end to end).

use crate::maps::{ip_key, Pair};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

/// `struct splice`: what arrives on the key's socket leaves on `out`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpliceEntry {
    pub out: Pair,
    pub delivered: u64,
}

/// A socket's key as the programs build it: its own tuple, with the network namespace's
/// cookie when either end is loopback (every pod has its own 127.0.0.1).
pub fn socket_pair(local: SocketAddr, peer: SocketAddr, netns: u64) -> Pair {
    let loopback = |a: &SocketAddr| match a.ip() {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    Pair {
        netns: if loopback(&local) || loopback(&peer) {
            netns
        } else {
            0
        },
        sip: ip_key(local.ip()),
        dip: ip_key(peer.ip()),
        sport: local.port(),
        dport: peer.port(),
        pad: 0,
    }
}

/// The cookie of the network namespace `fd`'s socket lives in (SO_NETNS_COOKIE, 5.14+).
pub fn netns_cookie(fd: RawFd) -> std::io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `cookie`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cookie)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

const SO_NETNS_COOKIE: libc::c_int = 71;

/// The key of a connected socket.
pub fn key_of<S: AsRawFd>(sock: &S, local: SocketAddr, peer: SocketAddr) -> std::io::Result<Pair> {
    Ok(socket_pair(local, peer, netns_cookie(sock.as_raw_fd())?))
}

/// The relay's side of one direction: bytes arriving on `at` leave on `out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direction {
    pub at: Pair,
    pub out: Pair,
}

/// The handle a proxy's relays share (cheap to clone; updates are single syscalls, no lock).
#[derive(Clone)]
pub struct Splicer {
    inner: imp::Map,
}

impl std::fmt::Debug for Splicer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Splicer")
    }
}

impl Splicer {
    /// Say that `dir` has delivered `delivered` bytes (call with 0 before relaying, then
    /// after every write). An error leaves the connection on the sidecars (not spliced).
    pub fn publish(&self, dir: &Direction, delivered: u64) -> std::io::Result<()> {
        self.inner.update(
            &dir.at,
            &SpliceEntry {
                out: dir.out,
                delivered,
            },
        )
    }

    /// The relay ends: its sockets close, and apps stop skipping it.
    pub fn withdraw(&self, dir: &Direction) {
        self.inner.delete(&dir.at);
    }

    #[cfg(warden_ebpf)]
    pub(crate) fn open(bpffs: &std::path::Path) -> Result<Splicer, String> {
        imp::Map::open(bpffs).map(|inner| Splicer { inner })
    }
}

#[cfg(not(warden_ebpf))]
mod imp {
    use super::*;

    #[derive(Clone)]
    pub enum Map {}

    impl Map {
        pub fn update(&self, _: &Pair, _: &SpliceEntry) -> std::io::Result<()> {
            match *self {}
        }
        pub fn delete(&self, _: &Pair) {
            match *self {}
        }
    }
}

#[cfg(warden_ebpf)]
mod imp {
    use super::*;
    use aya::maps::MapData;
    use std::sync::Arc;

    pub const SPLICE: &str = "wd_splice";

    #[derive(Clone)]
    pub struct Map {
        // Kept open for its fd; aya's HashMap wants `&mut` to update, the syscall does not.
        data: Arc<MapData>,
    }

    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;

    // The map-element part of `union bpf_attr`.
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }

    impl Map {
        pub fn open(bpffs: &std::path::Path) -> Result<Map, String> {
            let path = bpffs.join(SPLICE);
            let data = MapData::from_pin(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(Map {
                data: Arc::new(data),
            })
        }

        fn call(&self, cmd: libc::c_long, key: &Pair, value: Option<&SpliceEntry>) -> i64 {
            use std::os::fd::AsFd;
            let attr = ElemAttr {
                map_fd: self.data.fd().as_fd().as_raw_fd() as u32,
                pad: 0,
                key: key as *const Pair as u64,
                value: value.map_or(0, |v| v as *const SpliceEntry as u64),
                flags: 0, // BPF_ANY
            };
            // SAFETY: `attr` points at live, correctly laid-out key and value for the call.
            unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    cmd,
                    &attr as *const ElemAttr,
                    std::mem::size_of::<ElemAttr>(),
                )
            }
        }

        pub fn update(&self, key: &Pair, value: &SpliceEntry) -> std::io::Result<()> {
            if self.call(BPF_MAP_UPDATE_ELEM, key, Some(value)) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }

        pub fn delete(&self, key: &Pair) {
            self.call(BPF_MAP_DELETE_ELEM, key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_has_the_c_layout() {
        assert_eq!(std::mem::size_of::<SpliceEntry>(), 56);
        assert_eq!(std::mem::offset_of!(SpliceEntry, delivered), 48);
    }

    #[test]
    fn loopback_tuples_carry_the_namespace_and_others_do_not() {
        let a: SocketAddr = "127.0.0.6:40000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:8078".parse().unwrap();
        assert_eq!(socket_pair(a, b, 9).netns, 9);
        let c: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        assert_eq!(socket_pair(c, b, 9).netns, 0);
        // A dual-stack socket's v4-mapped loopback counts too, and keys as IPv4 does.
        let m: SocketAddr = "[::ffff:127.0.0.1]:15001".parse().unwrap();
        let v4: SocketAddr = "127.0.0.1:15001".parse().unwrap();
        assert_eq!(socket_pair(m, b, 9), socket_pair(v4, b, 9));
        let p = socket_pair(a, b, 9);
        assert_eq!((p.sport, p.dport), (40000, 8078));
    }
}
