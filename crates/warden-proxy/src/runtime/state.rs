//! The running proxy's control state: the bound listeners, the config source, and reloads
//! (re-read, compile, bind added ports, swap the snapshot in, retire removed ports).

use crate::listeners::conn_limits::DownstreamLimits;
pub use crate::listeners::listen::ListenerInfo;
use crate::listeners::worker::{ListenerCommand, WorkerListener};
use crate::pipeline::Shared;
use crate::routing::ports::ListenerSpec;
use crate::runtime::options::ConfigSource;
use crate::runtime::reload_guard;
use crate::snapshot::Snapshot;
use arc_swap::ArcSwap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use warden_config::{ConfigErrors, ConfigSet, Location, Problem};

/// The bound listeners, replaced by reloads that change Gateway ports. Serializes as the
/// current list.
pub struct Listeners(ArcSwap<Vec<ListenerInfo>>);

impl Listeners {
    pub fn get(&self) -> Arc<Vec<ListenerInfo>> {
        self.0.load_full()
    }
}

impl serde::Serialize for Listeners {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.load().serialize(s)
    }
}

/// A configured listener and the accept loops serving its sockets (one per worker).
pub(crate) struct RunningListener {
    pub info: ListenerInfo,
    pub loops: Vec<mpsc::UnboundedSender<ListenerCommand>>,
}

impl RunningListener {
    /// Hand one socket per worker to `workers` (index = worker), each with its control channel.
    pub fn hand_out(
        info: ListenerInfo,
        spec: &ListenerSpec,
        sockets: Vec<std::net::TcpListener>,
        mut give: impl FnMut(usize, WorkerListener),
    ) -> Self {
        let mut loops = Vec::with_capacity(sockets.len());
        for (i, socket) in sockets.into_iter().enumerate() {
            let (tx, control) = mpsc::unbounded_channel();
            loops.push(tx);
            give(
                i,
                WorkerListener {
                    socket,
                    spec: spec.clone(),
                    control,
                },
            );
        }
        RunningListener { info, loops }
    }

    fn send(&self, command: impl Fn() -> ListenerCommand) {
        for l in &self.loops {
            // A loop that is gone (its worker stopped) has nothing left to change.
            let _ = l.send(command());
        }
    }
}

/// What a reload needs to change listeners: where they bind, how to reach each worker, and
/// the running ones.
pub(crate) struct ListenerControl {
    pub host: IpAddr,
    pub workers: Vec<mpsc::UnboundedSender<WorkerListener>>,
    pub running: Vec<RunningListener>,
}

/// How long a reload waits for accept loops to confirm a pause or a retirement. They answer
/// within a scheduling round unless their worker is wedged; the reload goes on regardless.
const LISTENER_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The running proxy's state around the request path: what every request reads
/// ([`Shared`], dereferenced to), the config source, the bound listeners and what a reload
/// needs to change them.
pub struct Control {
    pub shared: Arc<Shared>,
    pub source: ConfigSource,
    /// How each reload reads `source` (`--skip-kind`).
    load_options: warden_config::LoadOptions,
    /// `--allow-empty-config`: skip the reload guard.
    allow_empty_config: bool,
    pub listeners: Listeners,
    /// Connection maxima and timeouts of the downstream side.
    pub downstream: Arc<DownstreamLimits>,
    /// Held for a whole reload, so reloads apply one at a time.
    control: Mutex<ListenerControl>,
}

impl std::ops::Deref for Control {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Control {
    pub(crate) fn new(
        shared: Arc<Shared>,
        source: ConfigSource,
        load_options: warden_config::LoadOptions,
        allow_empty_config: bool,
        control: ListenerControl,
        downstream: Arc<DownstreamLimits>,
    ) -> Self {
        let infos = control.running.iter().map(|r| r.info.clone()).collect();
        Control {
            shared,
            source,
            load_options,
            allow_empty_config,
            listeners: Listeners(ArcSwap::from_pointee(infos)),
            downstream,
            control: Mutex::new(control),
        }
    }

    /// Re-read the config, bind the listeners of added Gateway ports, and swap in a new
    /// snapshot; on error (config, or a port that cannot be bound) keep the running config and
    /// listeners. In-flight requests keep the snapshot they started with.
    pub fn reload(&self) -> Result<(), ConfigErrors> {
        let mut control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let guard = !self.allow_empty_config;
        if guard {
            reload_guard::check_source(&self.source).map_err(|r| self.refuse(r))?;
        }
        let previous = self.snapshot.load();
        let result = crate::runtime::config_source::load_with(&self.source, &self.load_options)
            .and_then(|loaded| {
                Snapshot::build_with(loaded, &self.identity, Some(&previous), &self.extensions)
            });
        let snapshot = match result {
            Ok(snapshot) if guard => {
                reload_guard::check_snapshot(&previous, &snapshot).map_err(|r| self.refuse(r))?;
                Ok(snapshot)
            }
            other => other,
        };
        drop(previous);
        let result = snapshot.and_then(|snapshot| self.apply(&mut control, snapshot));
        // Loading ran code that serving does not: let its pages go again.
        crate::runtime::startup_pages::release_logged("reload");
        match result {
            Ok(()) => {
                self.metrics.config_reloads.inc();
                // As at start: every load says what it skipped (`--skip-kind`) or warns about.
                for w in &self.snapshot.load().warnings {
                    tracing::warn!("{w}");
                }
                tracing::info!("config reloaded");
                Ok(())
            }
            Err(errors) => {
                self.metrics.config_reload_errors.inc();
                tracing::error!("config reload rejected, keeping the running config: {errors}");
                Err(errors)
            }
        }
    }

    /// Count and log a reload the guard refused; the running config stays.
    fn refuse(&self, refused: reload_guard::Refused) -> ConfigErrors {
        self.metrics.config_reload_errors.inc();
        self.metrics.config_reload_refused(refused.reason.label());
        tracing::error!(
            reason = refused.reason.label(),
            "config reload refused, keeping the running config: {}",
            refused.errors
        );
        refused.errors
    }

    /// Make the listeners follow `snapshot` and swap it in, as Envoy's LDS does: added ports
    /// are bound (all of them before anything changes, so a failure leaves everything as it
    /// was), removed ports stop accepting and drain, a port whose protocol changed keeps its
    /// socket and switches protocol, unchanged ports are not touched.
    fn apply(&self, control: &mut ListenerControl, snapshot: Snapshot) -> Result<(), ConfigErrors> {
        let workers = control.workers.len();
        let mut added = Vec::new();
        let mut bind_errors = Vec::new();
        for spec in &snapshot.listeners {
            if control
                .running
                .iter()
                .any(|r| r.info.port_in_config == spec.port)
            {
                continue;
            }
            let addr = SocketAddr::new(control.host, spec.port);
            match crate::listeners::listen::bind_listener(addr, spec, workers) {
                Ok(bound) => added.push(bound),
                Err(e) => bind_errors.push(Problem {
                    code: None,
                    location: port_location(&snapshot.config, spec.port),
                    message: format!("cannot bind listener {} on {addr}: {e}", spec.name),
                }),
            }
        }
        if !bind_errors.is_empty() {
            // Dropping `added` closes the sockets bound so far.
            return Err(ConfigErrors::new(bind_errors));
        }

        // Stop accepting on removed and switching ports before the new routes are visible,
        // so no connection is accepted there and then served by the wrong (or no) routes.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let mut kept = Vec::with_capacity(control.running.len());
        let mut switched = Vec::new();
        for mut r in control.running.drain(..) {
            match snapshot
                .listeners
                .iter()
                .find(|s| s.port == r.info.port_in_config)
            {
                None => {
                    r.send(|| ListenerCommand::Retire(done_tx.clone()));
                    tracing::info!(listener = %r.info.name, addr = %r.info.addr, "listener removed");
                }
                Some(s) if s.protocol != r.info.protocol => {
                    r.send(|| ListenerCommand::Pause(done_tx.clone()));
                    switched.push((r, s.clone()));
                }
                Some(s) => {
                    r.info.name.clone_from(&s.name);
                    kept.push(r);
                }
            }
        }
        drop(done_tx);
        wait_for_loops(&done_rx);

        self.snapshot.store(Arc::new(snapshot));
        let snapshot = self.snapshot.load();
        for w in &snapshot.warnings {
            tracing::warn!("{w}");
        }
        for (mut r, spec) in switched {
            r.send(|| ListenerCommand::Resume(spec.clone()));
            tracing::info!(listener = %spec.name, addr = %r.info.addr, from = ?r.info.protocol, to = ?spec.protocol, "listener protocol changed");
            r.info.name = spec.name;
            r.info.protocol = spec.protocol;
            kept.push(r);
        }
        for bound in added {
            tracing::info!(listener = %bound.info.name, addr = %bound.info.addr, protocol = ?bound.info.protocol, "listener added");
            let spec = bound.spec;
            let senders = &control.workers;
            kept.push(RunningListener::hand_out(
                bound.info,
                &spec,
                bound.sockets,
                |i, l| {
                    if let Some(w) = senders.get(i) {
                        let _ = w.send(l);
                    }
                },
            ));
        }
        // Config order, as at start.
        kept.sort_by_key(|r| {
            snapshot
                .listeners
                .iter()
                .position(|s| s.port == r.info.port_in_config)
        });
        control.running = kept;
        self.listeners.0.store(Arc::new(
            control.running.iter().map(|r| r.info.clone()).collect(),
        ));
        Ok(())
    }
}

/// Wait until every accept loop asked to pause or retire has done so (each drops its `Done`).
fn wait_for_loops(done: &std::sync::mpsc::Receiver<()>) {
    let deadline = Instant::now() + LISTENER_ACK_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match done.recv_timeout(left) {
            Ok(()) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!("listener changes not confirmed by every worker in time; going on");
                return;
            }
        }
    }
}

/// Where the config declares `port`, for a bind error.
fn port_location(set: &ConfigSet, port: u16) -> Location {
    set.gateways
        .iter()
        .find_map(|gw| {
            let i = gw.spec.servers.iter().position(|s| s.port.number == port)?;
            Some(set.locate(gw, &format!("spec.servers[{i}].port.number")))
        })
        .unwrap_or_default()
}
