//! How many downstream connections the proxy holds: the open-file limit raised to its hard
//! limit at start ([`raise_nofile`]), a global and a per-listener maximum (Envoy's overload
//! `max_downstream_connection` and listener `max_connections`), and the back-off of an accept
//! loop that ran out of file descriptors.
//!
//! A connection over a maximum is closed as soon as it is accepted (counted in
//! `warden_downstream_cx_overflow_total`), so that the connections already held keep being
//! served instead of every client timing out once the fds are gone.

use std::collections::HashMap;
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
}

impl ConnLimits {
    pub fn new(global_max: usize, per_listener_max: Option<usize>) -> Self {
        ConnLimits {
            global_max,
            per_listener_max,
            global: Arc::default(),
            per_listener: Mutex::default(),
        }
    }

    pub fn global_max(&self) -> usize {
        self.global_max
    }

    /// A permit for one more connection on the listener of config port `port`, or `None` when
    /// a maximum is reached.
    pub fn admit(&self, port: u16) -> Option<ConnPermit> {
        let global = take(&self.global, self.global_max)?;
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
                // `global` is given back when this fails and it drops.
                Some(take(&count, max)?)
            }
        };
        Some(ConnPermit {
            _global: global,
            _listener: listener,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_counted_and_given_back() {
        let limits = ConnLimits::new(3, Some(2));
        let a = limits.admit(80).unwrap();
        let _b = limits.admit(80).unwrap();
        assert!(limits.admit(80).is_none(), "per-listener maximum");
        let _c = limits.admit(81).unwrap();
        assert!(limits.admit(81).is_none(), "global maximum");
        drop(a);
        assert!(limits.admit(81).is_some());
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
