//! Which reloads are refused even though the config parses: a config file that is empty (a
//! writer caught mid-write, a broken ConfigMap sync), or a new config that would leave no
//! listener, or a listener without any route, where the running one had some. Each is more
//! likely a fault than an intent, and applying it turns every request into a 404 or a refused
//! connection; `--allow-empty-config` lets such a reload through.

use crate::runtime::options::ConfigSource;
use crate::snapshot::{PortRoutes, Snapshot};
use std::path::Path;
use warden_config::{ConfigErrors, Location, Problem};

/// Why a reload was refused; the label of `warden_config_reload_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    EmptyFile,
    NoListeners,
    ListenerWithoutRoutes,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::EmptyFile => "empty_file",
            Refusal::NoListeners => "no_listeners",
            Refusal::ListenerWithoutRoutes => "listener_without_routes",
        }
    }
}

/// The refusal and what to tell the operator.
pub struct Refused {
    pub reason: Refusal,
    pub errors: ConfigErrors,
}

const OVERRIDE: &str = "(start with --allow-empty-config to allow it)";

/// Refuse a reload from a source that has an empty config file (checked before loading: an
/// empty file is a valid, empty YAML stream).
pub fn check_source(source: &ConfigSource) -> Result<(), Refused> {
    let ConfigSource::Paths(paths) = source else {
        return Ok(());
    };
    let empty: Vec<Problem> = warden_config::config_files(paths)
        .into_iter()
        .filter(|f| is_blank(f))
        .map(|f| Problem {
            code: None,
            location: Location::file(&f, None),
            message: format!(
                "config file is empty; reload refused, running config kept {OVERRIDE}"
            ),
        })
        .collect();
    if empty.is_empty() {
        Ok(())
    } else {
        Err(Refused {
            reason: Refusal::EmptyFile,
            errors: ConfigErrors::new(empty),
        })
    }
}

/// Refuse a compiled reload that would leave no listener, or that empties the route table of
/// a listener that stays, while the running config has them.
pub fn check_snapshot(running: &Snapshot, next: &Snapshot) -> Result<(), Refused> {
    if next.listeners.is_empty() && !running.listeners.is_empty() {
        return Err(refused(
            Refusal::NoListeners,
            format!(
                "the new config has no listener (the running one has {}); reload refused {OVERRIDE}",
                running.listeners.len()
            ),
        ));
    }
    for (spec, routes) in next.listeners.iter().zip(&next.ports) {
        let had = running.routes_for_port(spec.port).map_or(0, route_count);
        if had > 0 && route_count(routes) == 0 {
            return Err(refused(
                Refusal::ListenerWithoutRoutes,
                format!(
                    "the new config leaves listener {} (port {}) without routes (it has {had}); reload refused {OVERRIDE}",
                    spec.name, spec.port
                ),
            ));
        }
    }
    Ok(())
}

fn refused(reason: Refusal, message: String) -> Refused {
    Refused {
        reason,
        errors: ConfigErrors::new(vec![Problem {
            code: None,
            location: Location::default(),
            message,
        }]),
    }
}

fn route_count(routes: &PortRoutes) -> usize {
    match routes {
        PortRoutes::Http(table) => table.route_count(),
        PortRoutes::Tcp(route) => usize::from(route.is_some()),
        PortRoutes::Tls(t) => {
            t.http.route_count() + usize::from(t.tcp.is_some()) + t.passthrough.len()
        }
    }
}

/// 0 bytes, or only whitespace (what a truncate-then-write shows between the two).
fn is_blank(file: &Path) -> bool {
    match std::fs::read(file) {
        Ok(bytes) => bytes.iter().all(u8::is_ascii_whitespace),
        // Unreadable files are the loader's to report.
        Err(_) => false,
    }
}
