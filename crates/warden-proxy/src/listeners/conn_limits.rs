//! How many downstream connections the proxy holds: the open-file limit raised to its hard
//! limit at start ([`raise_nofile`]), a global and a per-listener maximum (Envoy's overload
//! `max_downstream_connection` and listener `max_connections`), an optional cap per client IP
//! (nginx's `limit_conn $binary_remote_addr`, counted per connection), and the back-off of an
//! accept loop that ran out of file descriptors.
//!
//! A connection over a maximum is closed as soon as it is accepted (counted in
//! `warden_downstream_cx_overflow_total`), so that the connections already held keep being
//! served instead of every client timing out once the fds are gone.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// File descriptors kept back from the connection limit: listeners, upstream pools' spare
/// connections, the access log, the admin endpoint, the RLS.
const RESERVED_FDS: u64 = 64;

/// The soft and hard `RLIMIT_NOFILE` after [`raise_nofile`], and the soft one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoFile {
    pub before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Raise the soft open-file limit to the hard one (distributions default the soft one to 1024,
/// which 1,000 idle clients exhaust).
pub fn raise_nofile() -> std::io::Result<NoFile> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(NoFile {
        before,
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// The current soft open-file limit.
pub fn nofile_soft() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => limit.rlim_cur,
        _ => 1024,
    }
}

/// The default global maximum for `soft` file descriptors: a proxied connection needs one for
/// the client and one for its upstream.
pub fn default_max_connections(soft: u64) -> usize {
    usize::try_from(soft.saturating_sub(RESERVED_FDS) / 2)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// The maxima and the connections counted against them.
#[derive(Debug)]
pub struct ConnLimits {
    global_max: usize,
    per_listener_max: Option<usize>,
    global: Arc<AtomicUsize>,
    per_listener: Mutex<HashMap<u16, Arc<AtomicUsize>>>,
    per_ip: Option<PerIp>,
}

/// Which maximum a refused connection ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    Global,
    Listener,
    PerIp,
}

impl ConnLimits {
    pub fn new(
        global_max: usize,
        per_listener_max: Option<usize>,
        per_ip_max: Option<usize>,
    ) -> Self {
        ConnLimits {
            global_max,
            per_listener_max,
            global: Arc::default(),
            per_listener: Mutex::default(),
            per_ip: per_ip_max.map(|max| PerIp {
                max,
                counts: Arc::default(),
            }),
        }
    }

    pub fn global_max(&self) -> usize {
        self.global_max
    }

    /// A permit for one more connection from `peer` on the listener of config port `port`,
    /// or the maximum that is reached.
    pub fn admit(&self, port: u16, peer: IpAddr) -> Result<ConnPermit, Overflow> {
        // Each slot taken is given back when a later check fails and it drops.
        let global = take(&self.global, self.global_max).ok_or(Overflow::Global)?;
        let listener = match self.per_listener_max {
            None => None,
            Some(max) => {
                let count = self
                    .per_listener
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(port)
                    .or_default()
                    .clone();
                Some(take(&count, max).ok_or(Overflow::Listener)?)
            }
        };
        let ip = match &self.per_ip {
            None => None,
            Some(per_ip) => Some(per_ip.take(peer).ok_or(Overflow::PerIp)?),
        };
        Ok(ConnPermit {
            _global: global,
            _listener: listener,
            _ip: ip,
        })
    }
}

/// Connections held per client address; an address leaves the map with its last connection,
/// so the map never holds more entries than there are connections.
#[derive(Debug)]
struct PerIp {
    max: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerIp {
    fn take(&self, peer: IpAddr) -> Option<IpSlot> {
        // An IPv4 client on a dual-stack socket counts as its IPv4 address.
        let ip = peer.to_canonical();
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            counts: self.counts.clone(),
            ip,
        })
    }
}

#[derive(Debug)]
struct IpSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// One slot of a counter, given back on drop.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
    count
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(count.clone()))
}

/// Held by a connection for its lifetime.
#[derive(Debug)]
pub struct ConnPermit {
    _global: Slot,
    _listener: Option<Slot>,
    _ip: Option<IpSlot>,
}

/// How long an accept loop waits after a failed accept (typically EMFILE / ENFILE, which the
/// pending connection keeps raising until an fd is freed): doubling from 10 ms to 1 s, so a loop
/// out of fds neither spins nor stays deaf long once fds are back.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    pub fn failed(&mut self) -> Duration {
        let wait = Duration::from_millis(10u64 << self.failures.min(7)).min(Duration::from_secs(1));
        self.failures = self.failures.saturating_add(1);
        wait
    }

    pub fn accepted(&mut self) {
        self.failures = 0;
    }
}

/// What limits the downstream side: connection maxima and timeouts.
#[derive(Debug)]
pub struct DownstreamLimits {
    pub connections: ConnLimits,
    pub timeouts: crate::core::timeouts::Timeouts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_counted_and_given_back() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let limits = ConnLimits::new(3, Some(2), None);
        let a = limits.admit(80, ip).unwrap();
        let _b = limits.admit(80, ip).unwrap();
        assert_eq!(limits.admit(80, ip).unwrap_err(), Overflow::Listener);
        let _c = limits.admit(81, ip).unwrap();
        assert_eq!(limits.admit(81, ip).unwrap_err(), Overflow::Global);
        drop(a);
        assert!(limits.admit(81, ip).is_ok());
    }

    #[test]
    fn the_per_ip_cap_counts_each_address_and_forgets_it_with_its_last_connection() {
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let limits = ConnLimits::new(100, None, Some(2));
        let first = limits.admit(80, a).unwrap();
        let _second = limits.admit(81, mapped).unwrap();
        assert_eq!(limits.admit(80, a).unwrap_err(), Overflow::PerIp);
        let _other = limits.admit(80, b).unwrap();
        drop(first);
        let again = limits.admit(80, a).unwrap();
        // A refusal gives back the global slot it took.
        assert_eq!(limits.global.load(Ordering::Relaxed), 3);
        drop((again, _second));
        let per_ip = limits.per_ip.as_ref().unwrap();
        assert_eq!(per_ip.counts.lock().unwrap().len(), 1);
    }

    #[test]
    fn backoff_doubles_up_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let waits: Vec<u64> = (0..10).map(|_| b.failed().as_millis() as u64).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        b.accepted();
        assert_eq!(b.failed(), Duration::from_millis(10));
    }

    #[test]
    fn the_nofile_limit_is_raised_to_the_hard_one() {
        let limit = raise_nofile().unwrap();
        assert_eq!(limit.soft, limit.hard);
        assert_eq!(nofile_soft(), limit.soft);
        assert_eq!(default_max_connections(1024), 480);
    }
}
