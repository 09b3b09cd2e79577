//! HTTP/2 rapid reset (CVE-2023-44487): a client opening streams and resetting each at once
//! gets a GOAWAY, none of its reset streams reaches the upstream, and a well-behaved client on
//! another connection keeps being served meanwhile.

mod common;

use common::*;
use std::time::Duration;
use warden_testkit::h2_frames;

/// Streams the attacker opens at most (it stops at the GOAWAY, well before).
const ATTACK_STREAMS: u32 = 5_000;
const GOOD_REQUESTS: u32 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_gets_goaway_and_reaches_no_upstream() {
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", ""));
    let addr = addr(&proxy, 0);

    let good = tokio::spawn(async move {
        let c = h2_client();
        let mut ok = 0u32;
        for i in 0..GOOD_REQUESTS {
            match c.get(format!("http://{addr}/good/{i}")).send().await {
                Ok(r) if r.status() == 200 => match r.bytes().await {
                    Ok(_) => ok += 1,
                    Err(e) => eprintln!("good request {i}: {e}"),
                },
                other => eprintln!("good request {i}: {other:?}"),
            }
        }
        ok
    });

    let attack = reset_flood(addr, ATTACK_STREAMS, 50, None, "/attack").await;
    let good_ok = good.await.unwrap();
    eprintln!("attacker: {attack:?}");
    let (code, sent) = attack
        .goaway
        .expect("a GOAWAY before the attacker ran out of streams");
    // (How many streams were written before it depends on socket buffers, not on warden.)
    let _ = sent;
    // ENHANCE_YOUR_CALM from h2's own limits or from the premature-reset rule.
    assert_eq!(code, 0xb, "GOAWAY code {code:#x}");
    let attacks = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| r.contains("/attack/"))
        .count();
    assert_eq!(attacks, 0, "reset streams reached the upstream");
    assert!(
        good_ok * 100 >= GOOD_REQUESTS * 99,
        "well-behaved client: {good_ok}/{GOOD_REQUESTS}"
    );
}

/// Resets that come after the stream was accepted (and its request sent on) get past h2's
/// pending-accept limit; the proxy's own premature-reset rule brings the GOAWAY, and its code
/// is ENHANCE_YOUR_CALM (read from the raw frame).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_of_accepted_streams_get_goaway_too() {
    let up = echo_http("slow").await;
    let proxy = start(&http_config(up.addr, "", ""));
    // `/delay/` keeps every stream waiting for its upstream until the client resets it; small
    // batches with a pause let every stream be accepted before its reset (no h2 limit sees it).
    let attack = reset_flood(
        addr(&proxy, 0),
        2_000,
        10,
        Some(Duration::from_millis(30)),
        "/delay/10000",
    )
    .await;
    eprintln!("attacker: {attack:?}");
    let (code, sent) = attack.goaway.expect("a GOAWAY");
    assert!(sent < 2_000, "{sent}");
    // The proxy's own premature-reset rule closed it (these streams were accepted before their
    // reset, past h2's limits), with ENHANCE_YOUR_CALM rather than a graceful NO_ERROR.
    assert_eq!(code, 0xb, "GOAWAY code {code:#x}");
    let metrics = proxy.metrics_text();
    assert!(
        metrics.contains("warden_downstream_cx_too_many_premature_resets_total 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("downstream"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The stream limits are advertised and enforced: more concurrent streams than
/// `max_concurrent_streams` wait for room instead of being served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_advertise_the_stream_limits() {
    let (up, _) = recording_upstream().await;
    let proxy = start(&http_config(up, "", ""));
    let tcp = tokio::net::TcpStream::connect(addr(&proxy, 0))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    // The server's SETTINGS have arrived once a request has been answered.
    let (response, _) = client
        .send_request(http::Request::get("http://a/x").body(()).unwrap(), true)
        .unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    assert_eq!(client.current_max_send_streams(), 100);
}

#[derive(Debug)]
struct Attack {
    /// The GOAWAY's error code, and how many streams had been sent when it came.
    goaway: Option<(u32, u32)>,
}

/// One HTTP/2 connection written frame by frame: HEADERS (a complete GET of `path/N`) and
/// RST_STREAM (CANCEL) for up to `streams` streams, in batches of `batch` (`pause` between a
/// batch's HEADERS and its resets, if any), while a reader watches for the GOAWAY.
/// (Frames by hand rather than the h2 crate's client: that one reports the write error of the
/// closed connection instead of the GOAWAY that came before it.)
async fn reset_flood(
    addr: std::net::SocketAddr,
    streams: u32,
    batch: u32,
    pause: Option<Duration>,
    path: &str,
) -> Attack {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let sent = Arc::new(AtomicU32::new(0));
    let (settings_tx, settings_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = {
        let sent = sent.clone();
        tokio::spawn(async move {
            let mut settings_tx = Some(settings_tx);
            let mut head = [0u8; 9];
            loop {
                if rd.read_exact(&mut head).await.is_err() {
                    return None;
                }
                let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let mut payload = vec![0u8; len];
                if rd.read_exact(&mut payload).await.is_err() {
                    return None;
                }
                match head[3] {
                    // SETTINGS (not an ACK)
                    0x4 if head[4] & 1 == 0 => {
                        if let Some(tx) = settings_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    0x7 if len >= 8 => {
                        let code =
                            u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                        return Some((code, sent.load(Ordering::Relaxed)));
                    }
                    _ => {}
                }
            }
        })
    };
    wr.write_all(&h2_frames::client_hello()).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), settings_rx).await;
    let _ = wr.write_all(&h2_frames::settings_ack()).await;
    for round in 0..streams.div_ceil(batch) {
        let (mut headers, mut resets) = (Vec::new(), Vec::new());
        let ids = round * batch..((round + 1) * batch).min(streams);
        let count = ids.len() as u32;
        for n in ids {
            let id = 2 * n + 1;
            let path = format!("{path}/{n}");
            headers.extend(h2_frames::request_headers(
                id,
                "GET",
                &path,
                "a.example",
                true,
            ));
            resets.extend(h2_frames::rst_stream(id, h2_frames::CANCEL));
        }
        let written = match pause {
            None => {
                headers.extend(resets);
                wr.write_all(&headers).await
            }
            Some(pause) => {
                let first = wr.write_all(&headers).await;
                tokio::time::sleep(pause).await;
                first.and(wr.write_all(&resets).await)
            }
        };
        if written.is_err() || reader.is_finished() {
            break;
        }
        sent.fetch_add(count, Ordering::Relaxed);
    }
    let goaway = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .ok()
        .and_then(|r| r.ok())
        .flatten();
    Attack { goaway }
}
