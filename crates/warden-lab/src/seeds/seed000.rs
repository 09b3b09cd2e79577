//! Seed 000: `ab -c 1000 -n 100000`-shaped load (1000 connections) through the ingress gateway
//! to a backend with no limiter / a local limit / the seed's global EnvoyFilters against a rate
//! limit service with one serving thread / with two / local + global, every request needing a
//! decision (the limits are never reached: the limiter's cost, not its 429s). The setup is
//! bench/global-ratelimit.sh's pass-through shape.

use super::{comparison, missing, ratio_text, Budget, Header};
use crate::load_run::LoadSpec;
use crate::model::{Metric, PublishedRow, SeedResult};
use crate::process::{Core, Lab, Server};
use crate::runner::{Case, ComparisonSpec, Progress};
use std::time::Duration;
use warden_sandbox::free_port;

pub const HEADER: Header = Header {
    id: "seed000",
    title: "Rate limiting abusive clients at the gateway (local and global limits)",
    article: "ab -c 1000 -n 100000 through an Istio gateway: no limiter p99 ~400 ms; global \
              limit with 1 RLS pod ~700 ms; 5 RLS pods ~500 ms; with the Lua path header ~1000 \
              ms; local limit ~400 ms (no cost).",
};

/// ab's -c 1000.
const CONNECTIONS: usize = 1000;
const SEED_FILTERS: &str =
    include_str!("../../../../examples/ratelimit-global/seed-envoyfilter-global.yaml");

fn gateway_yaml(port: u16, backend: u16) -> String {
    format!(
        "{}apiVersion: networking.istio.io/v1beta1\nkind: ServiceEntry\n\
         metadata: {{name: backend, namespace: istio-system}}\n\
         spec:\n  hosts: [backend.local]\n  ports: [{{number: 80, name: http, protocol: HTTP}}]\n\
         \x20 resolution: STATIC\n  endpoints: [{{address: 127.0.0.1, ports: {{http: {backend}}}}}]\n---\n\
         apiVersion: networking.istio.io/v1beta1\nkind: VirtualService\n\
         metadata: {{name: api, namespace: istio-system}}\n\
         spec:\n  hosts: [\"*\"]\n  gateways: [bench]\n  http:\n\
         \x20 - route: [{{destination: {{host: backend.local, port: {{number: 80}}}}}}]\n",
        super::gateway_doc("bench", port)
    )
}

/// A per-client-IP local limit that is never reached (every request takes a token).
const LOCAL_POLICY: &str = "apiVersion: warden.dev/v1alpha1\nkind: RateLimitPolicy\n\
    metadata: {name: per-ip-local, namespace: istio-system}\n\
    spec:\n  local:\n    rules:\n    - clientSelectors:\n      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}\n\
    \x20     limit: {requests: 1000000000, unit: Second}\n";

/// The seed's EnvoyFilters pointed at our RLS, failing open, with the seed's 10 s timeout and
/// the never-reached `pass` domain (as bench/global-ratelimit.sh's `seed_filters pass`).
fn seed_filters(rls_port: u16) -> String {
    SEED_FILTERS
        .replace(
            "outbound|8081||ratelimit.default.svc.cluster.local",
            &format!("outbound|{rls_port}||127.0.0.1"),
        )
        .replace("domain: ratelimit", "domain: pass")
        .replace("failure_mode_deny: true", "failure_mode_deny: false")
}

const RLS_PASS_DOMAIN: &str = "domain: pass\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: PATH\n        rate_limit: {unit: second, requests_per_unit: 1000000000}\n";

/// One gateway case: its config files beside the Gateway and the RLS whose CPU it also costs.
struct Setup {
    id: &'static str,
    label: &'static str,
    files: Vec<(&'static str, String)>,
    rls: Vec<u32>,
}

fn start_rls(
    lab: &Lab,
    name: &str,
    threads: u16,
    redis: Option<u16>,
) -> anyhow::Result<(Server, u16)> {
    let dir = lab.dir().join("seed000/rls");
    let port = free_port()?;
    let mut cmd = lab.warden(Core::Any);
    cmd.arg("ratelimit").arg("--config").arg(&dir);
    cmd.args(["--grpc", &format!("127.0.0.1:{port}")]);
    cmd.args(["--http", &format!("127.0.0.1:{}", free_port()?)]);
    cmd.args(["--debug", &format!("127.0.0.1:{}", free_port()?)]);
    cmd.args(["--grpc-threads", &threads.to_string()]);
    match redis {
        Some(r) => cmd.args([
            "--backend",
            "redis",
            "--redis-url",
            &format!("127.0.0.1:{r}"),
        ]),
        None => cmd.args(["--backend", "memory"]),
    };
    let server = lab.spawn(name, cmd)?;
    // Ready once its gRPC port accepts.
    server.wait_listening(port)?;
    Ok((server, port))
}

/// A private redis-server on a free loopback port, no persistence (as
/// bench/global-ratelimit.sh runs it); killed on drop.
fn start_redis(lab: &Lab) -> anyhow::Result<(Server, u16)> {
    let port = free_port()?;
    let mut cmd = lab.pinned(Core::Any, "redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"]);
    let server = lab.spawn("seed000-redis", cmd)?;
    server.wait_listening(port)?;
    Ok((server, port))
}

pub fn run(lab: &Lab, progress: &Progress, busy: f64) -> anyhow::Result<SeedResult> {
    let budget = Budget::of(lab, 5, 3.0);
    progress.say("seed000: starting the backend, the rate limit services and the gateways");
    let missing = missing(&["redis-server"]);
    let mut servers: Vec<Server> = Vec::new();
    let backend = free_port()?;
    let mut echo = lab.warden(Core::Client);
    echo.args([
        "echo",
        "--http",
        &format!("127.0.0.1:{backend}"),
        "--threads",
        "1",
    ]);
    servers.push(lab.spawn("seed000-backend", echo)?);
    let redis_server = if missing.is_empty() {
        Some(start_redis(lab)?)
    } else {
        None
    };
    let redis = redis_server.as_ref().map(|(_, port)| *port);
    lab.write("seed000/rls/pass.yaml", RLS_PASS_DOMAIN)?;
    let (rls1, rls1_port) = start_rls(lab, "seed000-rls-1-thread", 1, redis)?;
    let (rls2, rls2_port) = start_rls(lab, "seed000-rls-2-threads", 2, redis)?;
    let local = || ("local.yaml", LOCAL_POLICY.to_string());
    let global = |port| ("filters.yaml", seed_filters(port));
    let setups = [
        Setup {
            id: "a",
            label: "(a) no limiter",
            files: vec![],
            rls: vec![],
        },
        Setup {
            id: "b",
            label: "(b) local limit",
            files: vec![local()],
            rls: vec![],
        },
        Setup {
            id: "c",
            label: "(c) global, RLS with 1 thread",
            files: vec![global(rls1_port)],
            rls: vec![rls1.pid],
        },
        Setup {
            id: "d",
            label: "(d) global, RLS with 2 threads",
            files: vec![global(rls2_port)],
            rls: vec![rls2.pid],
        },
        Setup {
            id: "e",
            label: "(e) local + global",
            files: vec![local(), global(rls1_port)],
            rls: vec![rls1.pid],
        },
    ];
    let mut cases = Vec::new();
    for Setup {
        id,
        label,
        files,
        rls,
    } in setups
    {
        let port = free_port()?;
        lab.write(
            &format!("seed000/{id}/gateway.yaml"),
            &gateway_yaml(port, backend),
        )?;
        for (name, text) in files {
            lab.write(&format!("seed000/{id}/{name}"), &text)?;
        }
        let mut cmd = lab.warden(Core::Server);
        cmd.arg("proxy")
            .arg("-c")
            .arg(lab.dir().join(format!("seed000/{id}")));
        cmd.args([
            "--concurrency",
            "1",
            "--listen-host",
            "127.0.0.1",
            "--no-watch",
        ]);
        cmd.args(["--admin", &format!("127.0.0.1:{}", free_port()?)]);
        let mut gw = lab.spawn(&format!("seed000-{id}"), cmd)?;
        let url = format!("http://127.0.0.1:{port}/api/healthz?user=1");
        if let Err(e) = lab.wait_status(&[], &url, "200", Duration::from_secs(30)) {
            gw.check_alive()?;
            return Err(e);
        }
        let mut pids = vec![gw.pid];
        pids.extend(rls);
        cases.push(Case::new(
            id,
            label,
            "warden",
            LoadSpec::closed_loop(url, CONNECTIONS, budget.run),
            pids,
        ));
        servers.push(gw);
    }
    servers.push(rls1);
    servers.push(rls2);
    // Warm-up, not measured: every case's 1000 connections are opened once (not in --quick).
    for case in cases.iter().filter(|_| !lab.quick) {
        let mut warm = case.load.clone();
        warm.duration = Duration::from_millis(300);
        let _ = crate::load_run::run_once(lab, &warm, &[], 0);
    }
    let comparisons = vec![
        ComparisonSpec::noise_floor("a", "(a) no limiter", Metric::P99),
        ComparisonSpec::noise_floor("a", "(a) no limiter", Metric::Rps),
        ComparisonSpec::new("p99 (b) local / (a)", "a", "b", Metric::P99).article(1.0),
        ComparisonSpec::new("req/s (b) local / (a)", "a", "b", Metric::Rps),
        ComparisonSpec::new("p99 (c) global 1 thread / (a)", "a", "c", Metric::P99)
            .article(700.0 / 400.0),
        ComparisonSpec::new("req/s (c) global 1 thread / (a)", "a", "c", Metric::Rps),
        ComparisonSpec::new("p99 (d) global 2 threads / (a)", "a", "d", Metric::P99)
            .article(500.0 / 400.0),
        ComparisonSpec::new("req/s (d) global 2 threads / (a)", "a", "d", Metric::Rps),
        ComparisonSpec::new("p99 (e) local + global / (a)", "a", "e", Metric::P99),
        ComparisonSpec::new("req/s (e) local + global / (a)", "a", "e", Metric::Rps),
    ];
    let outcome = budget.run(lab, progress, "seed000", cases, comparisons);
    drop(servers);
    drop(redis_server);
    let shape = format!(
        "warden load -c {CONNECTIONS} (ab -c 1000) closed loop, keep-alive, {}",
        budget.describe()
    );
    let mut seed = HEADER.ran(lab, outcome, busy, shape, budget.rounds, missing.clone());
    seed.notes.push(format!(
        "the limits are never reached (pass-through): every request is decided, locally or by an RLS call; the rate limit service keeps its counters in {}",
        if redis.is_some() { "Redis (redis-server on PATH)" } else { "memory (redis-server is not on PATH)" }
    ));
    seed.notes.push("the article's 5 RLS pods are modelled as one `warden ratelimit` with 2 serving threads instead of 1: the gateway keeps one HTTP/2 connection per worker to one address, so replicas behind one Service would not spread a worker's calls; what 5 pods bought Envoy is RLS capacity".into());
    seed.notes.push("the seed's EnvoyFilters include the Lua filter that builds the method+path header; warden computes that header natively, so cases (c)-(e) already carry the article's \"Lua path hack\" descriptor".into());
    finish(&mut seed);
    Ok(seed)
}

fn finish(seed: &mut SeedResult) {
    let p99 = |id: &str| {
        seed.cases
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.median_p99_ms)
    };
    let row = |what: &str, article: &str, id: &str, cmp: Option<&str>| {
        let mut measured = p99(id).map_or("not measured".into(), |v| format!("{v:.1} ms"));
        if let Some(c) = cmp
            .and_then(|n| comparison(seed, n))
            .filter(|c| !c.ratios.is_empty())
        {
            measured.push_str(&format!(
                " ({}x (a): {})",
                format_args!("{:.2}", c.median),
                ratio_text(c)
            ));
        }
        PublishedRow {
            what: what.into(),
            article: article.into(),
            measured,
            case: Some(id.into()),
        }
    };
    seed.published = vec![
        row("no limiter", "p99 ~400 ms", "a", None),
        row(
            "local limit",
            "p99 ~400 ms (1.0x)",
            "b",
            Some("p99 (b) local / (a)"),
        ),
        row(
            "global, 1 RLS pod",
            "p99 ~700 ms (1.75x)",
            "c",
            Some("p99 (c) global 1 thread / (a)"),
        ),
        row(
            "global, 5 RLS pods",
            "p99 ~500 ms (1.25x)",
            "d",
            Some("p99 (d) global 2 threads / (a)"),
        ),
        row(
            "global + Lua path header",
            "p99 ~1000 ms (2.5x)",
            "c",
            Some("p99 (c) global 1 thread / (a)"),
        ),
        row(
            "local + global",
            "not measured",
            "e",
            Some("p99 (e) local + global / (a)"),
        ),
    ];
    let c = comparison(seed, "p99 (c) global 1 thread / (a)").filter(|c| !c.ratios.is_empty());
    let rps = comparison(seed, "req/s (c) global 1 thread / (a)").filter(|c| !c.ratios.is_empty());
    seed.verdict = match (c, rps) {
        (Some(c), Some(r)) => format!(
            "In the article a global limit with one RLS pod raised p99 from ~400 to ~700 ms (1.75x). Here, with every one of 1000 connections' requests decided by `warden ratelimit`, p99 is {:.2}x that of no limiter ({}), throughput {:.2}x ({}){}. A local limit costs {}.",
            c.median,
            ratio_text(c),
            r.median,
            ratio_text(r),
            if c.within_noise { ": the difference is within noise" } else { "" },
            comparison(seed, "p99 (b) local / (a)")
                .filter(|x| !x.ratios.is_empty())
                .map_or("not measured".into(), |x| format!("{:.2}x p99 ({})", x.median, ratio_text(x)))
        ),
        _ => "Not enough runs to compare.".into(),
    };
}
