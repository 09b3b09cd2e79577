//! HTTP/2 rapid reset (CVE-2023-44487): a client opening streams and resetting each at once
//! gets a GOAWAY, none of its reset streams reaches the upstream, and a well-behaved client on
//! another connection keeps being served meanwhile. The paced kind too (a few thousand resets
//! per second, one stream at a time, reconnecting after each GOAWAY): at most 1% of its reset
//! streams reach the upstream; and a stream reset while its request is at the upstream has
//! that request given up.

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

/// What a paced attacker saw on one connection: streams it opened and reset, and the GOAWAY's
/// code if one came.
#[derive(Debug)]
struct Paced {
    resets: u32,
    goaway: Option<u32>,
}

/// One HTTP/2 connection on which `per_tick` streams are opened and reset every millisecond
/// (a few thousand per second, one at a time: never many pending at once, so h2's
/// pending-accept limit does not see them), for at most `duration` or until the proxy closes
/// the connection. `gap`: the pause between a stream's HEADERS and its RST_STREAM (`None`: in
/// the same write).
async fn paced_resets(
    addr: std::net::SocketAddr,
    per_tick: u32,
    duration: Duration,
    gap: Option<Duration>,
    path: &str,
) -> Paced {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let (settings_tx, settings_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
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
                0x4 if head[4] & 1 == 0 => {
                    if let Some(tx) = settings_tx.take() {
                        let _ = tx.send(());
                    }
                }
                0x7 if len >= 8 => {
                    return Some(u32::from_be_bytes([
                        payload[4], payload[5], payload[6], payload[7],
                    ]));
                }
                _ => {}
            }
        }
    });
    wr.write_all(&h2_frames::client_hello()).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), settings_rx).await;
    let _ = wr.write_all(&h2_frames::settings_ack()).await;
    let deadline = tokio::time::Instant::now() + duration;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut resets = 0u32;
    let mut closed = false;
    'attack: while tokio::time::Instant::now() < deadline && !reader.is_finished() {
        tick.tick().await;
        for _ in 0..per_tick {
            let id = 2 * resets + 1;
            let headers = h2_frames::request_headers(
                id,
                "GET",
                &format!("{path}/{resets}"),
                "a.example",
                true,
            );
            let reset = h2_frames::rst_stream(id, h2_frames::CANCEL);
            let written = match gap {
                None => wr.write_all(&[headers, reset].concat()).await,
                Some(gap) => {
                    let first = wr.write_all(&headers).await;
                    tokio::time::sleep(gap).await;
                    first.and(wr.write_all(&reset).await)
                }
            };
            if written.is_err() {
                closed = true;
                break 'attack;
            }
            resets += 1;
        }
    }
    // A connection the proxy closed has its GOAWAY on the way; one the attacker ran to its
    // deadline has none coming.
    let wait = if closed || reader.is_finished() {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(50)
    };
    let goaway = tokio::time::timeout(wait, reader)
        .await
        .ok()
        .and_then(|r| r.ok())
        .flatten();
    Paced { resets, goaway }
}

/// A client resetting a few thousand streams per second, one at a time (never many pending at
/// once), each reset right behind its HEADERS, for 20 s (the duration), on one connection and, each time the
/// proxy closes it, on a new one: at most 1% of the reset streams reach the upstream, and a
/// well-behaved client on another connection is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_resets_reach_almost_no_upstream() {
    let (up, seen) = recording_upstream().await;
    let proxy = start(&http_config(up, "", ""));
    let addr = addr(&proxy, 0);
    let attacking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let good = {
        let attacking = attacking.clone();
        tokio::spawn(async move {
            let c = h2_client();
            let (mut ok, mut sent) = (0u32, 0u32);
            while attacking.load(std::sync::atomic::Ordering::Relaxed) || sent < 50 {
                sent += 1;
                match c.get(format!("http://{addr}/good/{sent}")).send().await {
                    Ok(r) if r.status() == 200 => match r.bytes().await {
                        Ok(_) => ok += 1,
                        Err(e) => eprintln!("good request {sent}: {e}"),
                    },
                    other => eprintln!("good request {sent}: {other:?}"),
                }
            }
            (ok, sent)
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (mut resets, mut connections, mut calmed) = (0u32, 0u32, 0u32);
    while tokio::time::Instant::now() < deadline {
        let left = deadline - tokio::time::Instant::now();
        let path = format!("/paced/c{connections}");
        let attack = paced_resets(addr, 3, left, None, &path).await;
        connections += 1;
        resets += attack.resets;
        calmed += u32::from(attack.goaway == Some(0xb));
    }
    attacking.store(false, std::sync::atomic::Ordering::Relaxed);
    let (good_ok, good_sent) = good.await.unwrap();
    let reached = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| r.contains("/paced/"))
        .count() as u32;
    eprintln!(
        "attacker: {resets} reset streams on {connections} connection(s), {calmed} closed with \
         ENHANCE_YOUR_CALM; upstream saw {reached}; good client {good_ok}/{good_sent}"
    );
    assert!(resets >= 1_000, "the attack ran: {resets}");
    assert!(
        reached * 100 <= resets,
        "{reached} of {resets} reset streams reached the upstream"
    );
    assert!(
        good_ok * 100 >= good_sent * 99,
        "well-behaved client: {good_ok}/{good_sent}"
    );
}

/// A stream reset while its request is at the upstream: the proxy gives the upstream request
/// up (closes that upstream connection) instead of waiting for an answer nobody will read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_in_flight_cancels_its_upstream_request() {
    use tokio::io::AsyncReadExt;
    const STREAMS: u32 = 10;
    // An upstream that never answers: it reads a request head, then waits for the proxy to
    // close the connection (counted) or gives up after 10 s (not counted).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let done = done_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                // The head first.
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let closed = tokio::time::timeout(Duration::from_secs(10), async {
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                    }
                })
                .await
                .is_ok();
                let _ = done.send(closed);
            });
        }
    });
    let proxy = start(&http_config(up, "", ""));
    // Each stream's reset comes 100 ms after its HEADERS, when its request is at the upstream.
    let attack = paced_resets(
        addr(&proxy, 0),
        1,
        Duration::from_millis(u64::from(STREAMS) * 100),
        Some(Duration::from_millis(100)),
        "/inflight",
    )
    .await;
    eprintln!("attacker: {attack:?}");
    let mut cancelled = 0;
    for _ in 0..attack.resets {
        match tokio::time::timeout(Duration::from_secs(15), done_rx.recv()).await {
            Ok(Some(true)) => cancelled += 1,
            other => eprintln!("an upstream request was not cancelled: {other:?}"),
        }
    }
    assert!(attack.resets >= STREAMS / 2, "{attack:?}");
    assert_eq!(cancelled, attack.resets, "upstream requests given up");
}
