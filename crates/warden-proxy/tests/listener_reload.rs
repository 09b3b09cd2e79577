//! Listeners follow the Gateway ports on reload: added ports are bound and serve,
//! removed ports refuse connections after draining, unchanged ports keep their connections, a
//! protocol change switches the port, and a port that cannot be bound fails the whole reload.
//! Real sockets on 127.0.0.1; ports are fixed free ports because the Gateway config names them.

mod common;

use common::*;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proxy::{ConfigSource, ListenerProtocol, Proxy, ProxyOptions, RunningProxy};
use warden_testkit::{free_port, TempDir};

/// HTTP listeners on `ports`; each port answers `p<port>` on `/` (port 0: `other`), and
/// `/slow/...` goes to `upstream` on every port.
fn http_ports(ports: &[u16], upstream: SocketAddr) -> String {
    let servers: Vec<(u16, &str)> = ports.iter().map(|p| (*p, "HTTP")).collect();
    let mut y = format!(
        "{}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - match: [{{uri: {{prefix: /slow}}}}]\n    route: [{{destination: {{host: up.internal}}}}]\n",
        gateway(&servers)
    );
    for p in ports.iter().filter(|p| **p != 0) {
        y.push_str(&format!(
            "  - match: [{{port: {p}}}]\n    directResponse: {{status: 200, body: {{string: \"p{p}\"}}}}\n"
        ));
    }
    // Port 0 cannot be matched on; it gets the catch-all.
    y.push_str("  - directResponse: {status: 200, body: {string: other}}\n");
    y.push_str(&service_entry("up.internal", &[upstream]));
    y
}

/// Replace the file atomically, as config management tools do.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A proxy with two workers reading `file` (no watching: reloads are explicit).
fn start_from(file: &Path, text: &str) -> Arc<RunningProxy> {
    write_config(file, text);
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![file.to_path_buf()]));
    opts.concurrency = 2;
    Arc::new(Proxy::start(opts).expect("proxy starts"))
}

/// Write `text` and reload, off the test's runtime (reload blocks).
async fn reload_with(
    proxy: &Arc<RunningProxy>,
    file: &Path,
    text: &str,
) -> Result<(), warden_config::ConfigErrors> {
    write_config(file, text);
    let p = proxy.clone();
    tokio::task::spawn_blocking(move || p.reload())
        .await
        .unwrap()
}

async fn get_text(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn admin_listeners(proxy: &RunningProxy) -> serde_json::Value {
    let url = format!("http://{}/listeners", proxy.admin_addr().unwrap());
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn ports_of(proxy: &RunningProxy) -> Vec<u16> {
    proxy.listeners().iter().map(|l| l.port_in_config).collect()
}

/// One HTTP/1.1 connection kept open across a reload.
async fn h1_conn(
    addr: SocketAddr,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h1_get(
    sender: &mut hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
) -> String {
    sender.ready().await.unwrap();
    let req = http::Request::get("/")
        .header("host", "x")
        .body(empty())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_ports_serve_and_unchanged_port_keeps_its_connections() {
    let up = echo_http("up").await;
    let dir = TempDir::new("add").unwrap();
    let file = dir.path().join("gw.yaml");
    let (a, b) = (
        free_port().expect("a free port"),
        free_port().expect("a free port"),
    );
    let proxy = start_from(&file, &http_ports(&[a], up.addr));
    let a_addr = addr(&proxy, a);
    assert_eq!(a_addr.port(), a);
    let mut kept = h1_conn(a_addr).await;
    assert_eq!(h1_get(&mut kept).await, format!("p{a}"));

    // Add a fixed port and a port-0 listener (a free port, as at start).
    reload_with(&proxy, &file, &http_ports(&[a, b, 0], up.addr))
        .await
        .expect("reload adds ports");
    assert_eq!(ports_of(&proxy), vec![a, b, 0]);
    let b_addr = addr(&proxy, b);
    assert_eq!(b_addr.port(), b);
    assert_eq!(
        get_text(&format!("http://{b_addr}/")).await,
        (200, format!("p{b}"))
    );
    let zero_addr = addr(&proxy, 0);
    assert_ne!(zero_addr.port(), 0);
    assert_eq!(
        get_text(&format!("http://{zero_addr}/")).await,
        (200, "other".to_string())
    );
    // The connection opened before the reload is still served, on the same socket.
    assert_eq!(h1_get(&mut kept).await, format!("p{a}"));
    assert_eq!(addr(&proxy, a), a_addr);

    let listed = admin_listeners(&proxy).await;
    let listed: Vec<(String, u64)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["addr"].as_str().unwrap().to_string(),
                l["port_in_config"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (a_addr.to_string(), a as u64),
            (b_addr.to_string(), b as u64),
            (zero_addr.to_string(), 0),
        ]
    );

    // An unchanged port-0 listener keeps its address on a further reload.
    reload_with(&proxy, &file, &http_ports(&[b, 0], up.addr))
        .await
        .unwrap();
    assert_eq!(addr(&proxy, 0), zero_addr);
    assert_eq!(proxy.metrics().config_reloads, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removed_port_refuses_while_other_port_serves_without_failures() {
    let up = echo_http("up").await;
    let dir = TempDir::new("remove").unwrap();
    let file = dir.path().join("gw.yaml");
    let (a, b) = (
        free_port().expect("a free port"),
        free_port().expect("a free port"),
    );
    let proxy = start_from(&file, &http_ports(&[a, b], up.addr));
    let a_url = format!("http://{}/", addr(&proxy, a));
    let b_addr = addr(&proxy, b);

    // Load on port a for the whole test.
    let failures = Arc::new(AtomicU32::new(0));
    let ok = Arc::new(AtomicU32::new(0));
    let stop_at = Instant::now() + Duration::from_secs(30);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..3 {
        let (c, url, failures, ok, done) = (
            client(),
            a_url.clone(),
            failures.clone(),
            ok.clone(),
            done.clone(),
        );
        load.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) && Instant::now() < stop_at {
                match c.get(&url).send().await {
                    Ok(r) if r.status() == 200 => match r.text().await {
                        Ok(t) if t == format!("p{a}") => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    // A request in flight on port b when b is removed still completes.
    let in_flight = tokio::spawn(async move {
        let r = client()
            .get(format!("http://{b_addr}/slow/delay/600"))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.headers()["x-upstream"].clone())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    reload_with(&proxy, &file, &http_ports(&[a], up.addr))
        .await
        .expect("reload removes a port");
    assert_eq!(ports_of(&proxy), vec![a]);
    let refused = tokio::net::TcpStream::connect(b_addr).await;
    assert!(refused.is_err(), "port {b} still accepts after removal");
    let (status, upstream) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(upstream, "up");

    // Add and remove b a few more times under load; a is never touched.
    for n in 0..6 {
        let ports: &[u16] = if n % 2 == 0 { &[a, b] } else { &[a] };
        reload_with(&proxy, &file, &http_ports(ports, up.addr))
            .await
            .unwrap();
        if n % 2 == 0 {
            assert_eq!(
                get_text(&format!("http://{b_addr}/")).await,
                (200, format!("p{b}"))
            );
        } else {
            assert!(tokio::net::TcpStream::connect(b_addr).await.is_err());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    assert!(ok.load(Ordering::Relaxed) > 0);
    let listed = admin_listeners(&proxy).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["addr"], addr(&proxy, a).to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adding_a_taken_port_keeps_config_and_listeners() {
    let up = echo_http("up").await;
    let dir = TempDir::new("taken").unwrap();
    let file = dir.path().join("gw.yaml");
    let (a, b, taken) = (
        free_port().expect("a free port"),
        free_port().expect("a free port"),
        free_port().expect("a free port"),
    );
    let proxy = start_from(&file, &http_ports(&[a, b], up.addr));
    let before = proxy.listeners();
    let holder = std::net::TcpListener::bind(("127.0.0.1", taken)).unwrap();

    // Removes b, adds a free port and the taken one: nothing of it may happen.
    let c = free_port().expect("a free port");
    let err = reload_with(&proxy, &file, &http_ports(&[a, c, taken], up.addr))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{taken}")), "{text}");
    assert!(text.contains("gw.yaml"), "{text}");
    assert_eq!(proxy.listeners(), before);
    assert_eq!(proxy.metrics().config_reload_errors, 1);
    assert_eq!(proxy.metrics().config_reloads, 0);
    // The running snapshot stays: b still serves, and the routes of the rejected config
    // (a route for port c) are not there.
    assert_eq!(
        get_text(&format!("http://{}/", addr(&proxy, b))).await,
        (200, format!("p{b}"))
    );
    // Nothing of this proxy answers on c. Not "c refuses": c was only free when picked, and a
    // test running alongside may bind it since (seen once in a full run).
    let on_c = client().get(format!("http://127.0.0.1:{c}/")).send().await;
    match on_c {
        Err(_) => {}
        Ok(r) => assert_ne!(r.text().await.unwrap_or_default(), format!("p{c}")),
    }
    let listed = admin_listeners(&proxy).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);

    // Once the port is free the same config applies.
    drop(holder);
    reload_with(&proxy, &file, &http_ports(&[a, c, taken], up.addr))
        .await
        .expect("reload succeeds once the port is free");
    assert_eq!(ports_of(&proxy), vec![a, c, taken]);
    assert_eq!(
        get_text(&format!("http://127.0.0.1:{taken}/")).await,
        (200, format!("p{taken}"))
    );
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", b))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_change_switches_the_port() {
    let up = echo_http("up").await;
    let tcp_up = echo_tcp().await;
    let dir = TempDir::new("proto").unwrap();
    let file = dir.path().join("gw.yaml");
    let (a, b) = (
        free_port().expect("a free port"),
        free_port().expect("a free port"),
    );
    let proxy = start_from(&file, &http_ports(&[a, b], up.addr));
    let b_addr = addr(&proxy, b);
    let mut before = h1_conn(b_addr).await;
    assert_eq!(h1_get(&mut before).await, format!("p{b}"));

    // b becomes a TCP port routed to the TCP echo; a stays HTTP.
    let tcp_config = format!(
        "{}{}",
        http_ports(&[a], up.addr).replace(
            &gateway(&[(a, "HTTP")]),
            &gateway(&[(a, "HTTP"), (b, "TCP")])
        ),
        tcp_route(tcp_up.port())
    );
    reload_with(&proxy, &file, &tcp_config)
        .await
        .expect("reload switches protocol");
    let listeners = proxy.listeners();
    assert_eq!(listeners.len(), 2);
    assert_eq!(listeners[1].protocol, ListenerProtocol::Tcp);
    assert_eq!(listeners[1].addr, b_addr);

    // The HTTP connection from before is closed gracefully (it was idle).
    let mut closed = false;
    for _ in 0..50 {
        if before.is_closed() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        closed,
        "idle HTTP connection on the switched port stays open"
    );

    let mut s = tokio::net::TcpStream::connect(b_addr).await.unwrap();
    s.write_all(b"hello").await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out, b"hellobye");
    assert_eq!(
        get_text(&format!("http://{}/", addr(&proxy, a))).await,
        (200, format!("p{a}"))
    );

    // And back to HTTP.
    reload_with(&proxy, &file, &http_ports(&[a, b], up.addr))
        .await
        .unwrap();
    assert_eq!(proxy.listeners()[1].protocol, ListenerProtocol::Http);
    assert_eq!(
        get_text(&format!("http://{b_addr}/")).await,
        (200, format!("p{b}"))
    );
}
