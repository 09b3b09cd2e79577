//! End to end: a "pod" namespace with capture installed, joined by a veth to a "peer"
//! namespace, and connections that show where the rules send them. The pod's listeners stand
//! in for the proxy (15001 outbound, 15006 inbound) and the app (8080); the peer has the real
//! destination (9999). Clients run as root (the app, captured) or as uid 1337 (the proxy).

mod common;

use common::{
    accept_within, connect, has_pending, in_netns, listen, original_dst, output_within, skip,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Stdio;
use warden_capture::{install, CaptureConfig, InNetns, Outcome};
use warden_testkit::netns::veth_pair;
use warden_testkit::{NetNs, RunAs};

const POD_IP: &str = "10.233.0.1";
const PEER_IP: &str = "10.233.0.2";
const PROXY_UID: u32 = 1337;

struct Pod {
    outbound: TcpListener,
    inbound: TcpListener,
    app: TcpListener,
    /// The real destination, in the peer.
    real: TcpListener,
    pod: NetNs,
    peer: NetNs,
}

/// Namespaces, veth, listeners and the default capture rules; `None` (after saying why) when
/// this host cannot make namespaces.
fn pod_with_capture() -> Option<Pod> {
    if let Some(why) = skip() {
        eprintln!("{why}");
        return None;
    }
    let pod = NetNs::new("cappod").expect("pod namespace");
    let peer = NetNs::new("cappeer").expect("peer namespace");
    veth_pair(
        &pod,
        &format!("{POD_IP}/24"),
        &peer,
        &format!("{PEER_IP}/24"),
    )
    .expect("veth");
    let applied = install(&InNetns::new(pod.path()), &CaptureConfig::default()).expect("install");
    assert_eq!(applied[0].outcome, Outcome::Installed);
    let (outbound, inbound, app) = in_netns(&pod, || {
        (
            listen("0.0.0.0:15001"),
            listen("0.0.0.0:15006"),
            listen(&format!("{POD_IP}:8080")),
        )
    });
    let real = in_netns(&peer, || listen(&format!("{PEER_IP}:9999")));
    Some(Pod {
        outbound,
        inbound,
        app,
        real,
        pod,
        peer,
    })
}

fn addr(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().expect("address")
}

/// `bash` in the pod as the proxy's uid, connecting to `ip:port` and printing what it reads.
fn connect_as_proxy(pod: &NetNs, ip: &str, port: u16) -> std::process::Child {
    // bash on PATH is never staged (every user can reach it), so the guard may go at once.
    let bash = RunAs::new(PROXY_UID, PROXY_UID, "bash").expect("bash for the proxy uid");
    pod.command_as(&bash)
        .arg("-c")
        // `exec` twice: no forked child outlives a kill holding the output pipes.
        .arg(format!("exec 3<>/dev/tcp/{ip}/{port} && exec cat <&3"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash as the proxy uid")
}

#[test]
fn the_apps_outbound_connection_lands_on_15001_with_its_original_destination() {
    let Some(p) = pod_with_capture() else { return };
    let mut client =
        in_netns(&p.pod, || connect(&format!("{PEER_IP}:9999"))).expect("the app's connection");
    let (mut conn, _) =
        accept_within(&p.outbound).expect("the outbound listener got the app's connection");
    assert_eq!(original_dst(&conn), addr(PEER_IP, 9999));
    assert!(
        !has_pending(&p.real),
        "the real destination must not see a captured connection"
    );
    // And it is a working connection: what the "proxy" writes, the app reads.
    conn.write_all(b"from 15001").expect("write");
    drop(conn);
    let mut got = String::new();
    client.read_to_string(&mut got).expect("read");
    assert_eq!(got, "from 15001");
}

#[test]
fn the_proxy_uid_reaches_the_real_destination_without_a_capture_loop() {
    let Some(p) = pod_with_capture() else { return };
    let child = connect_as_proxy(&p.pod, PEER_IP, 9999);
    let accepted = accept_within(&p.real);
    let looped = has_pending(&p.outbound);
    let Some((mut conn, peer)) = accepted else {
        let out = output_within(child);
        panic!(
            "uid {PROXY_UID}'s connection never reached {PEER_IP}:9999 (captured: {looped}); bash: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(peer.ip().to_string(), POD_IP);
    assert!(!looped, "uid {PROXY_UID}'s connection was captured");
    conn.write_all(b"real destination").expect("write");
    drop(conn);
    let out = output_within(child);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "real destination");
}

#[test]
fn an_inbound_connection_lands_on_15006_with_the_pod_address_as_original_destination() {
    let Some(p) = pod_with_capture() else { return };
    let _client =
        in_netns(&p.peer, || connect(&format!("{POD_IP}:8080"))).expect("the peer's connection");
    let (conn, from) =
        accept_within(&p.inbound).expect("the inbound listener got the peer's connection");
    assert_eq!(original_dst(&conn), addr(POD_IP, 8080));
    assert_eq!(
        from.ip().to_string(),
        PEER_IP,
        "REDIRECT keeps the client's address"
    );
    assert!(
        !has_pending(&p.app),
        "the app must not see a captured connection"
    );
}

#[test]
fn the_inbound_passthrough_from_127_0_0_6_and_the_apps_own_calls_reach_the_app() {
    let Some(p) = pod_with_capture() else { return };
    // The proxy's inbound side forwards to the app from 127.0.0.6 (Envoy's passthrough).
    in_netns(&p.pod, || {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket
            .bind(&addr("127.0.0.6", 0).into())
            .expect("bind 127.0.0.6");
        socket
            .connect_timeout(&addr(POD_IP, 8080).into(), common::WAIT)
            .expect("connect from 127.0.0.6");
    });
    let (_, from) = accept_within(&p.app).expect("the app got the passthrough connection");
    assert_eq!(from.ip().to_string(), "127.0.0.6");
    // The app calling itself by the pod's address stays on lo and is not captured either.
    let _own = in_netns(&p.pod, || connect(&format!("{POD_IP}:8080"))).expect("own call");
    let (_, from) = accept_within(&p.app).expect("the app got its own call");
    assert_eq!(from.ip().to_string(), POD_IP);
    assert!(!has_pending(&p.inbound) && !has_pending(&p.outbound));
}

#[test]
fn the_proxy_calling_its_own_pod_goes_through_the_inbound_listener() {
    let Some(p) = pod_with_capture() else { return };
    // app -> outbound proxy -> (the service VIP resolved to this pod) -> inbound proxy -> app.
    let child = connect_as_proxy(&p.pod, POD_IP, 8080);
    let Some((conn, _)) = accept_within(&p.inbound) else {
        let app_got_it = has_pending(&p.app);
        let out = output_within(child);
        panic!(
            "uid {PROXY_UID} -> {POD_IP}:8080 did not reach 15006 (app got it: {app_got_it}); bash: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(original_dst(&conn), addr(POD_IP, 8080));
    assert!(!has_pending(&p.app));
    drop(conn);
    assert!(output_within(child).status.success());
}
