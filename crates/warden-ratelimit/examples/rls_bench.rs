//! Load client for `bench/ratelimit.sh`: N concurrent ShouldRateLimit streams over C HTTP/2
//! connections for a bounded time, reporting decisions/s and latency percentiles.
//!
//! `cargo run --release -p warden-ratelimit --example rls_bench -- --addr 127.0.0.1:8081
//!   --connections 4 --streams 64 --seconds 5 [--rate 50000] [--keys 1000] [--warmup 1]`
//!
//! `--warmup` seconds of calls run first and are not counted: every stream's first call opens
//! its HTTP/2 stream state on both sides, and with 1000 streams those first calls wait up to
//! ~100 ms, which a short run would report as the steady state's p99.
//!
//! With `--rate`, each stream sends on a fixed schedule (open loop). A call that is due while
//! the stream's previous call is still out counts from its scheduled time, so a stalled server
//! cannot hide its queueing (coordinated omission). A stream that was idle counts from when its
//! timer woke it: that lateness is the generator's own (tokio's timer rounds up to the next
//! millisecond, and on this VM about 2.5% of wake-ups come more than 2 ms late), reported
//! separately as `wake_late_p99_ms`; `strict_p99_ms` counts every call from its scheduled time
//! (as wrk2 does), generator lateness included.
//!
//! `--client lean` (default) makes the calls with warden's own gRPC client
//! (`warden_ratelimit::grpc_client`, the one the proxy uses: h2, no per-call tasks);
//! `--client tonic` with tonic's generated client, which costs the 2-core machine about as much
//! CPU per call as the server does.
//!
//! `--method health` sends `grpc.health.v1.Health/Check` instead, on the same connections and
//! schedule: a call the service answers without a decision, so its latency is what this client,
//! HTTP/2 and the machine cost by themselves (the floor under the ShouldRateLimit numbers).

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use h2::client::SendRequest;
use hdrhistogram::Histogram;
use http::uri::{Authority, Uri};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use warden_ratelimit::grpc_client;

struct Args {
    addr: String,
    connections: usize,
    streams: usize,
    seconds: f64,
    warmup: f64,
    rate: Option<f64>,
    keys: usize,
    label: String,
    health: bool,
    tonic: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:8081".into(),
        connections: 4,
        streams: 64,
        seconds: 5.0,
        warmup: 0.0,
        rate: None,
        keys: 1000,
        label: "run".into(),
        health: false,
        tonic: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |_| format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--addr" => args.addr = value.clone(),
            "--connections" => args.connections = value.parse().map_err(bad)?,
            "--streams" => args.streams = value.parse().map_err(bad)?,
            "--seconds" => args.seconds = value.parse().map_err(|_| format!("bad {flag}"))?,
            "--warmup" => args.warmup = value.parse().map_err(|_| format!("bad {flag}"))?,
            "--rate" => args.rate = Some(value.parse().map_err(|_| format!("bad {flag}"))?),
            "--keys" => args.keys = value.parse().map_err(bad)?,
            "--label" => args.label = value.clone(),
            "--method" => match value.as_str() {
                "health" => args.health = true,
                "should-rate-limit" => args.health = false,
                _ => {
                    return Err(format!(
                        "unknown method {value} (health, should-rate-limit)"
                    ))
                }
            },
            "--client" => match value.as_str() {
                "lean" => args.tonic = false,
                "tonic" => args.tonic = true,
                _ => return Err(format!("unknown client {value} (lean, tonic)")),
            },
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.connections == 0 || args.streams == 0 || args.keys == 0 {
        return Err("connections, streams and keys must be > 0".into());
    }
    // Bounded: never run longer than a minute.
    args.seconds = args.seconds.clamp(0.5, 60.0);
    args.warmup = args.warmup.clamp(0.0, 10.0);
    Ok(args)
}

/// The seed's descriptor: remote_address + PATH.
fn request(i: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "ratelimit".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "remote_address".into(),
                    value: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
                },
                Entry {
                    key: "PATH".into(),
                    value: "/login".into(),
                },
            ],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// One connection's calls, made by one of the two clients.
#[derive(Clone)]
enum Client {
    Tonic(RateLimitServiceClient<Channel>, HealthClient<Channel>),
    Lean {
        send: SendRequest<Bytes>,
        should_rate_limit: Uri,
        health: Uri,
    },
}

/// What a call came back with.
enum Outcome {
    Ok,
    OverLimit,
    Error,
}

impl Client {
    async fn connect(addr: &str, tonic: bool) -> Result<Client, Box<dyn std::error::Error>> {
        if tonic {
            let channel = Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .buffer_size(4096)
                .connect()
                .await?;
            return Ok(Client::Tonic(
                RateLimitServiceClient::new(channel.clone()),
                HealthClient::new(channel),
            ));
        }
        let authority: Authority = addr.parse()?;
        let (send, connection) = grpc_client::handshake(TcpStream::connect(addr).await?).await?;
        tokio::spawn(connection);
        Ok(Client::Lean {
            send,
            should_rate_limit: grpc_client::method_uri(&authority, grpc_client::SHOULD_RATE_LIMIT),
            health: grpc_client::method_uri(&authority, grpc_client::HEALTH_CHECK),
        })
    }

    async fn call(&mut self, health: bool, request: &RateLimitRequest) -> Outcome {
        let decision = |code: i32| match code {
            2 => Outcome::OverLimit,
            _ => Outcome::Ok,
        };
        match self {
            Client::Tonic(_, client) if health => {
                match client.check(HealthCheckRequest::default()).await {
                    Ok(_) => Outcome::Ok,
                    Err(_) => Outcome::Error,
                }
            }
            Client::Tonic(client, _) => match client.should_rate_limit(request.clone()).await {
                Ok(resp) => decision(resp.get_ref().overall_code),
                Err(_) => Outcome::Error,
            },
            Client::Lean {
                send, health: uri, ..
            } if health => {
                let check = HealthCheckRequest::default();
                let call = grpc_client::unary::<_, HealthCheckResponse>(send.clone(), uri, &check);
                match call.await {
                    Ok(_) => Outcome::Ok,
                    Err(_) => Outcome::Error,
                }
            }
            Client::Lean {
                send,
                should_rate_limit: uri,
                ..
            } => {
                let call = grpc_client::unary::<_, RateLimitResponse>(send.clone(), uri, request);
                match call.await {
                    Ok(resp) => decision(resp.overall_code),
                    Err(_) => Outcome::Error,
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect(&args.addr, args.tonic).await?);
    }
    let health = args.health;
    let requests: Vec<RateLimitRequest> = (0..args.keys).map(request).collect();
    let requests = std::sync::Arc::new(requests);
    let measured_from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let deadline = measured_from + Duration::from_secs_f64(args.seconds);
    let interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.streams as f64 / r.max(1.0)));
    let mut tasks = Vec::new();
    for s in 0..args.streams {
        let mut client = clients[s % clients.len()].clone();
        let requests = requests.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut late = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut strict = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
            let mut i = s;
            // Spread the open-loop schedule so streams do not fire in lockstep.
            let mut next = interval.map(|iv| Instant::now() + iv.mul_f64(s as f64 / 1000.0 % 1.0));
            loop {
                let mut due = None;
                let scheduled = match (next, interval) {
                    (Some(at), Some(iv)) => {
                        due = Some(at);
                        if at >= deadline {
                            break;
                        }
                        next = Some(at + iv);
                        if Instant::now() >= at {
                            at // already due: the server is behind, count from the due time
                        } else {
                            tokio::time::sleep_until(at.into()).await;
                            let woke = Instant::now();
                            if at >= measured_from {
                                let _ = late.record(((woke - at).as_micros() as u64).max(1));
                            }
                            woke
                        }
                    }
                    _ => {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        now
                    }
                };
                let outcome = client.call(health, &requests[i % requests.len()]).await;
                i += 7;
                if scheduled < measured_from {
                    continue; // warm-up
                }
                match outcome {
                    Outcome::Ok => ok += 1,
                    Outcome::OverLimit => over += 1,
                    Outcome::Error => errors += 1,
                }
                let micros = scheduled.elapsed().as_micros() as u64;
                let _ = hist.record(micros.max(1));
                let from_due = due.map_or(micros, |at| at.elapsed().as_micros() as u64);
                let _ = strict.record(from_due.max(1));
            }
            (hist, strict, late, ok, over, errors)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut late = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut strict = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    for t in tasks {
        let (h, st, l, o, v, e) = t.await?;
        hist.add(h)?;
        strict.add(st)?;
        late.add(l)?;
        ok += o;
        over += v;
        errors += e;
    }
    let elapsed = measured_from.elapsed().as_secs_f64();
    let total = ok + over + errors;
    println!(
        "{label}\tdecisions_per_s={:.0}\tp50_ms={:.3}\tp99_ms={:.3}\tp999_ms={:.3}\tok={ok}\tover={over}\terrors={errors}\twake_late_p99_ms={:.3}\tstrict_p99_ms={:.3}",
        total as f64 / elapsed,
        hist.value_at_quantile(0.50) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.value_at_quantile(0.999) as f64 / 1000.0,
        late.value_at_quantile(0.99) as f64 / 1000.0,
        strict.value_at_quantile(0.99) as f64 / 1000.0,
        label = args.label,
    );
    Ok(())
}
