//! An app in a pod's network namespace (an echo server, a sidecar's upstream): started, and
//! waited for until every port it should listen on accepts inside that namespace.

use crate::{wait_until, KillOnDrop, NetNs};
use std::net::{Ipv4Addr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Spawn `command` (one that runs inside `ns`, e.g. from [`NetNs::command`]) and wait up to
/// 10 s until each of `ports` accepts on 127.0.0.1 in `ns`; panics naming the ports otherwise
/// (the process is killed then, as on drop).
pub fn spawn_listening(ns: &NetNs, command: Command, ports: &[u16]) -> KillOnDrop {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut app = KillOnDrop::spawn(command).unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let up = ns
        .run_in(|| {
            wait_until(Duration::from_secs(10), || {
                ports
                    .iter()
                    .all(|p| TcpStream::connect((Ipv4Addr::LOCALHOST, *p)).is_ok())
            })
        })
        .unwrap_or(false);
    if !up {
        let exited = app.0.try_wait().ok().flatten();
        panic!(
            "{program} in {} did not listen on {ports:?} within 10 s (exited: {exited:?})",
            ns.name()
        );
    }
    app
}
