//! A Redis restart under load against a real redis-server: once Redis accepts connections again
//! and has answered a health probe, no call fails (broken connections are re-made before use,
//! not discovered by failing a call), and no call is counted twice.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis::Commands;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;
use warden_ratelimit::ManualClock;
use warden_testkit::RedisServer;

const T0: u64 = 1_700_000_040_000; // a minute boundary
const LIMIT: u32 = 1_000_000;
const CONFIG: &str = "domain: restart
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
";

/// What one call saw: when it started, and its window's reset and count, or an error.
struct Outcome {
    started: Instant,
    result: Result<(i64, u32), tonic::Status>,
}

async fn call(client: &mut RateLimitServiceClient<Channel>) -> Result<(i64, u32), tonic::Status> {
    let r = req("restart", vec![desc(&[("k", "v")])]);
    let resp = client.should_rate_limit(r).await?.into_inner();
    let status = resp
        .statuses
        .first()
        .ok_or_else(|| tonic::Status::internal("no status"))?;
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(-1, |d| d.seconds);
    Ok((reset, LIMIT - status.limit_remaining))
}

/// One client connection per gRPC serving thread (a new connection goes to the thread with
/// the fewest), so every thread's Redis connections are used.
async fn clients(h: &Harness, n: usize) -> Vec<RateLimitServiceClient<Channel>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", h.server.grpc_addr()))
                .unwrap()
                .timeout(Duration::from_secs(2))
                .connect()
                .await
                .unwrap();
        out.push(RateLimitServiceClient::new(channel));
    }
    out
}

async fn healthcheck(h: &Harness) -> Option<u16> {
    reqwest::get(h.http("/healthcheck"))
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

fn redis_count(redis: &RedisServer, key: &str) -> Option<u64> {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    conn.get(key).unwrap()
}

/// The counts a window's successful calls saw are distinct and, but for `unanswered` counted
/// calls that failed, exactly 1..=n: none lost, none twice.
fn assert_counted_once(what: &str, mut counts: Vec<u32>, unanswered: usize) {
    counts.sort_unstable();
    let n = counts.len() as u32;
    let twice: Vec<u32> = counts
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    let top = n + unanswered as u32;
    let missing: Vec<u32> = (1..=top)
        .filter(|c| counts.binary_search(c).is_err())
        .collect();
    assert!(
        twice.is_empty() && counts.last().is_none_or(|&l| l <= top) && missing.len() == unanswered,
        "{what}: {n} successful calls ({unanswered} counted calls unanswered) did not see the \
         counts 1..={top} (seen twice: {:?}, missing: {:?}, last: {:?})",
        &twice[..twice.len().min(10)],
        &missing[..missing.len().min(10)],
        counts.last()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_fails_no_call_after_the_first_good_probe() {
    let mut redis = RedisServer::start().unwrap();
    // Window 1 (reset 59 s) before the kill, window 2 (reset 58 s) after it: a call's reset
    // says which server counted it.
    let clock = ManualClock::new(T0 + 1_000);
    let h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |s| s.health_probe_interval = Duration::from_millis(100),
        Some(Arc::new(clock.clone())),
    )
    .await;
    let clients = clients(&h, 4).await;
    let outcomes = Arc::new(std::sync::Mutex::new(Vec::<Outcome>::new()));

    // 1,000 calls/s, each on its own task, until told to stop (bounded: 30 s at most).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let load = {
        let outcomes = outcomes.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let mut calls = Vec::new();
            for i in 0..30_000usize {
                tick.tick().await;
                if *stop_rx.borrow() {
                    break;
                }
                let mut client = clients[i % clients.len()].clone();
                let outcomes = outcomes.clone();
                calls.push(tokio::spawn(async move {
                    let started = Instant::now();
                    let result = call(&mut client).await;
                    outcomes.lock().unwrap().push(Outcome { started, result });
                }));
            }
            for c in calls {
                c.await.unwrap();
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(700)).await;
    redis = tokio::task::spawn_blocking(move || {
        redis.stop();
        redis
    })
    .await
    .unwrap();
    clock.set_millis(T0 + 62_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis = tokio::task::spawn_blocking(move || {
        redis.restart().unwrap();
        redis
    })
    .await
    .unwrap();
    let restarted_at = Instant::now();
    // The probe runs every 100 ms; /healthcheck says 200 once one has answered.
    let deadline = Instant::now() + Duration::from_secs(5);
    while healthcheck(&h).await != Some(200) {
        assert!(Instant::now() < deadline, "healthy again within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let healthy_at = Instant::now();
    // 500 calls after the restart, however slow the machine is (bounded: 15 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline
        && outcomes
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.started >= healthy_at)
            .count()
            < 500
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), load)
        .await
        .expect("calls end")
        .unwrap();

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let failed_during_outage = outcomes
        .iter()
        .filter(|o| o.started < healthy_at && o.result.is_err())
        .count();
    assert!(
        failed_during_outage > 0,
        "Redis was down: some calls must have failed"
    );
    let failed_after: Vec<String> = outcomes
        .iter()
        .filter(|o| o.started >= healthy_at)
        .filter_map(|o| o.result.as_ref().err().map(|e| e.message().to_owned()))
        .collect();
    let after = outcomes.iter().filter(|o| o.started >= healthy_at).count();
    assert!(after >= 500, "load kept going after the restart ({after})");
    assert!(
        failed_after.is_empty(),
        "{} of {after} calls after the first good probe failed: {:?}",
        failed_after.len(),
        &failed_after[..failed_after.len().min(5)]
    );

    let window = |reset: i64| -> Vec<u32> {
        outcomes
            .iter()
            .filter_map(|o| o.result.as_ref().ok())
            .filter(|(r, _)| *r == reset)
            .map(|(_, count)| *count)
            .collect()
    };
    let before_kill = window(59);
    let after_restart = window(58);
    assert!(before_kill.len() >= 300, "{}", before_kill.len());
    let counted_after = after_restart.len() as u64;
    assert_counted_once("before the kill", before_kill, 0);
    // Between the restart and the first good probe a call may reach the new server and still
    // fail (its answer lost while the connection is re-made, or past the client's timeout):
    // counted without being answered. Such calls over-count; no answered call is lost or
    // counted twice.
    let failed_after_restart = outcomes
        .iter()
        .filter(|o| o.started >= restarted_at && o.started < healthy_at && o.result.is_err())
        .count() as u64;
    let in_redis = redis_count(&redis, "restart_k_v_1700000100").unwrap_or(0);
    assert!(
        (counted_after..=counted_after + failed_after_restart).contains(&in_redis),
        "the new server counted {in_redis}: the {counted_after} calls it answered and at most \
         the {failed_after_restart} that failed before the first good probe"
    );
    assert_counted_once(
        "after the restart",
        after_restart,
        (in_redis - counted_after) as usize,
    );
    assert_eq!(
        redis_count(&redis, "restart_k_v_1700000040"),
        None,
        "no call of the old window reached the new server"
    );
}

/// Connections left idle across the restart (nothing sent while Redis was down) are dead; the
/// first call on each, after a good probe, re-makes it instead of failing.
#[tokio::test]
async fn idle_connections_do_not_fail_their_first_call_after_a_restart() {
    let mut redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 1_000);
    let h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |s| {
            s.grpc_threads = 2;
            s.redis.pool_size = 4;
            s.health_probe_interval = Duration::from_millis(50);
        },
        Some(Arc::new(clock)),
    )
    .await;
    let mut clients = clients(&h, 2).await;
    // Every connection of every thread carries a call (they alternate per call).
    for _ in 0..3 {
        for c in clients.iter_mut() {
            call(c).await.unwrap();
        }
    }
    redis.stop();
    eventually("unhealthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(500)
    })
    .await;
    redis.restart().unwrap();
    eventually("healthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(200)
    })
    .await;
    let mut counts = Vec::new();
    for round in 0..3 {
        for (i, c) in clients.iter_mut().enumerate() {
            match call(c).await {
                Ok((_, count)) => counts.push(count),
                Err(e) => panic!("call {round} on client {i} failed: {}", e.message()),
            }
        }
    }
    assert_counted_once("after the restart", counts, 0);
}

/// The server closes the connections (`CLIENT KILL`, as an idle `timeout` or a proxy would);
/// the next call on each re-makes its connection instead of failing.
#[tokio::test]
async fn connections_the_server_closed_do_not_fail_the_next_call() {
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(T0 + 1_000);
    let h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock)),
    )
    .await;
    let mut clients = clients(&h, 2).await;
    let mut counts = Vec::new();
    let mut admin = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for round in 0..5 {
        for c in clients.iter_mut() {
            counts.push(call(c).await.unwrap().1);
        }
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut admin)
            .unwrap();
        assert!(killed >= 2, "round {round}: {killed} connections killed");
        for (i, c) in clients.iter_mut().enumerate() {
            match call(c).await {
                Ok((_, count)) => counts.push(count),
                Err(e) => panic!("round {round}, client {i}: {}", e.message()),
            }
        }
    }
    assert_counted_once("across the kills", counts, 0);
}

/// A TCP forwarder whose connections can be frozen: bytes are swallowed and nothing is closed,
/// like a peer that vanished without a FIN (a half-open connection). Connections made after a
/// freeze are forwarded normally.
struct Freezer {
    addr: std::net::SocketAddr,
    epoch: Arc<std::sync::atomic::AtomicU64>,
}

impl Freezer {
    async fn start(upstream: String) -> Freezer {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let epoch = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let accept_epoch = epoch.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = accept_epoch.load(Ordering::SeqCst);
                let epoch = accept_epoch.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let pump =
                        |mut from: tokio::net::tcp::OwnedReadHalf,
                         mut to: tokio::net::tcp::OwnedWriteHalf,
                         epoch: Arc<std::sync::atomic::AtomicU64>| async move {
                            use tokio::io::{AsyncReadExt, AsyncWriteExt};
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                let n = match from.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => n,
                                };
                                if epoch.load(Ordering::SeqCst) != born {
                                    continue; // frozen: swallow, keep the socket open
                                }
                                if to.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        };
                    tokio::join!(pump(cr, sw, epoch.clone()), pump(sr, cw, epoch));
                });
            }
        });
        Freezer { addr, epoch }
    }

    /// Freezes every connection open now.
    fn freeze(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Half-open connections never see a close; the failed health probe marks them, and every
/// connection made before it is re-made before its next call.
#[tokio::test]
async fn a_failed_probe_replaces_half_open_connections() {
    let redis = RedisServer::start().unwrap();
    let freezer = Freezer::start(redis.addr()).await;
    let clock = ManualClock::new(T0 + 1_000);
    let proxy = freezer.addr.to_string();
    let h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        move |s| {
            s.redis.url = proxy;
            s.redis.timeout = Duration::from_millis(300);
            s.health_probe_interval = Duration::from_millis(50);
        },
        Some(Arc::new(clock)),
    )
    .await;
    let mut clients = clients(&h, 2).await;
    let mut counts = Vec::new();
    for c in clients.iter_mut() {
        counts.push(call(c).await.unwrap().1);
    }
    eventually("healthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(200)
    })
    .await;
    freezer.freeze();
    // The probe's PING times out on its frozen connection: unhealthy, every connection made
    // so far distrusted; the next probe connects anew (not frozen) and answers.
    eventually("unhealthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(500)
    })
    .await;
    eventually("healthy again", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(200)
    })
    .await;
    for round in 0..3 {
        for (i, c) in clients.iter_mut().enumerate() {
            match call(c).await {
                Ok((_, count)) => counts.push(count),
                Err(e) => panic!("round {round}, client {i}: {}", e.message()),
            }
        }
    }
    assert_counted_once("across the freeze", counts, 0);
}

/// A forwarder that passes the first `INCRBY` it sees to Redis and then closes that connection
/// before the reply comes back: Redis executed the request, the client saw the connection die
/// after writing it.
async fn cut_after_first_incrby(upstream: String) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let cut_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        while let Ok((client, _)) = listener.accept().await {
            let cut_done = cut_done.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let (seen_tx, mut seen_rx) = tokio::sync::watch::channel(false);
                let up = async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        let incrby = buf[..n]
                            .windows(6)
                            .any(|w| w.eq_ignore_ascii_case(b"INCRBY"));
                        if incrby && !cut_done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                            let _ = seen_tx.send(true);
                            return;
                        }
                    }
                };
                let down = async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = tokio::select! {
                            r = sr.read(&mut buf) => match r {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            },
                            _ = seen_rx.wait_for(|s| *s) => return,
                        };
                        if cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                // Both halves dropped when either ends: the client's connection closes.
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
            });
        }
    });
    addr
}

/// A request that reached Redis before its connection died is not sent again: the call fails,
/// and Redis counted it once.
#[tokio::test]
async fn a_request_that_may_have_been_executed_is_not_resent() {
    let redis = RedisServer::start().unwrap();
    let proxy = cut_after_first_incrby(redis.addr()).await.to_string();
    let clock = ManualClock::new(T0 + 1_000);
    let mut h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        move |s| s.redis.url = proxy,
        Some(Arc::new(clock)),
    )
    .await;
    let err = call(&mut h.client).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown, "{err:?}");
    assert_eq!(
        redis_count(&redis, "restart_k_v_1700000040"),
        Some(1),
        "executed once, not resent"
    );
    let (_, count) = call(&mut h.client).await.unwrap();
    assert_eq!(count, 2, "the next call counts on a new connection");
}
