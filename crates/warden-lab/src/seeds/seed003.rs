//! Seed 003: the maximum rate an nginx service takes directly and through two sidecars (client
//! pod -> client sidecar -> server sidecar -> nginx), with a new connection per request like
//! the article's vegeta run; `warden load --find-max` ramps the rate until errors or the p99
//! bound, as the article did by hand. The pods are bench/sidecar.sh's.

use super::pods::{unavailable, Pods, Side};
use super::{comparison, missing, percent_change, ratio_text, Budget, Header};
use crate::load_run::{FindMax, LoadSpec};
use crate::model::{Metric, PublishedRow, SeedResult};
use crate::process::{Core, Lab, Server};
use crate::runner::{Case, ComparisonSpec, Progress};
use std::time::Duration;

pub const HEADER: Header = Header {
    id: "seed003",
    title: "Maximum QPS of an nginx service with and without sidecars",
    article: "vegeta against nginx on Kubernetes, max QPS before errors: with the Istio sidecar \
              9730 vs 11100 without (88%) on Istio 1.3.3, 10950 vs 12000 (91%) on 1.4.8.",
};

const VIP: &str = "10.96.0.20";
/// Connections the find-max client keeps in flight (each request on a new one).
const CONNECTIONS: usize = 64;
/// A rate passes while p99 stays under this (and nothing fails).
const P99_BOUND: Duration = Duration::from_millis(50);
/// find-max's first rate (x1.5 per step from here).
const START_QPS: f64 = 200.0;

pub fn mesh_yaml(vip: &str, server_ip: &str, client_ip: &str, ports: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: server, namespace: default}}\n\
         spec:\n  clusterIP: {vip}\n  selector: {{app: server}}\n  ports:\n{ports}---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: server-1, namespace: default, labels: {{app: server}}}}\n\
         spec: {{containers: [{{name: server}}]}}\nstatus: {{podIP: {server_ip}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: client-1, namespace: default, labels: {{app: client}}}}\n\
         spec: {{containers: [{{name: client}}]}}\nstatus: {{podIP: {client_ip}}}\n"
    )
}

pub fn run(lab: &Lab, progress: &Progress, busy: f64) -> anyhow::Result<SeedResult> {
    if let Some(why) = unavailable(&["iptables", "setpriv"]) {
        return Ok(HEADER.skipped(
            lab,
            format!("the sidecar pods need network namespaces: {why}"),
        ));
    }
    let budget = Budget::of(lab, 3, 1.0);
    progress.say("seed003: making the pods (namespaces, capture rules, sidecars)");
    let pods = Pods::new(lab, "l3", "10.232.7", false)?;
    let missing = missing(&["nginx"]);
    let mut servers: Vec<Server> = Vec::new();
    let app = if missing.is_empty() {
        let body = "x".repeat(1024);
        let conf = super::nginx_conf(
            lab,
            "seed003",
            &format!(
                "  keepalive_requests 1000000;\n  server {{ listen 8080 reuseport; listen 8081 reuseport;\n\
                 \x20   location / {{ default_type text/plain; return 200 \"{body}\"; }} }}\n"
            ),
        )?;
        let mut inner = lab.pinned(Core::Server, "nginx");
        inner
            .arg("-p")
            .arg(conf.parent().unwrap_or(lab.dir()))
            .arg("-c")
            .arg(&conf);
        servers.push(lab.spawn("seed003-nginx", pods.command(Side::Server, &inner))?);
        "nginx (1 worker, 1 KiB body)"
    } else {
        for port in [8080, 8081] {
            let mut inner = lab.warden(Core::Server);
            inner.args([
                "echo",
                "--http",
                &format!("0.0.0.0:{port}"),
                "--threads",
                "1",
            ]);
            servers.push(lab.spawn(
                &format!("seed003-echo-{port}"),
                pods.command(Side::Server, &inner),
            )?);
        }
        "warden echo (nginx is not on PATH), 1 KiB body"
    };
    let mesh = lab.write(
        "seed003/mesh.yaml",
        &mesh_yaml(
            VIP,
            &pods.server_ip,
            &pods.client_ip,
            "  - {name: http, port: 80, targetPort: 8080}\n",
        ),
    )?;
    pods.capture(lab, Side::Client, &["--exclude-outbound-ports", "8081"])?;
    pods.capture(lab, Side::Server, &["--exclude-inbound-ports", "8081"])?;
    let srv_sidecar = pods.sidecar(
        lab,
        Side::Server,
        "seed003-server-sidecar",
        &mesh,
        "app=server",
        None,
        &[],
    )?;
    let cli_sidecar = pods.sidecar(
        lab,
        Side::Client,
        "seed003-client-sidecar",
        &mesh,
        "app=client",
        None,
        &[],
    )?;
    let client = pods.prefix(Side::Client);
    let direct_url = format!("http://{}:8081/echo?size=1024", pods.server_ip);
    let mesh_url = format!("http://{VIP}/echo?size=1024");
    lab.wait_status(&client, &direct_url, "200", Duration::from_secs(20))?;
    lab.wait_status(&client, &mesh_url, "200", Duration::from_secs(20))?;
    let spec = |url: &str| LoadSpec {
        url: url.to_string(),
        connections: CONNECTIONS,
        duration: budget.run,
        keepalive: false,
        payload_size: None,
        find_max: Some(FindMax {
            start_qps: START_QPS,
            p99_bound: P99_BOUND,
        }),
        prefix: client.clone(),
    };
    let sidecar_pids = vec![cli_sidecar.pid, srv_sidecar.pid];
    let cases = vec![
        Case::new(
            "direct",
            "direct (client -> server pod)",
            "nginx",
            spec(&direct_url),
            vec![],
        ),
        Case::new(
            "sidecars",
            "through two warden sidecars",
            "warden",
            spec(&mesh_url),
            sidecar_pids,
        ),
    ];
    let comparisons = vec![
        ComparisonSpec::noise_floor("direct", "direct", Metric::Rps),
        ComparisonSpec::new(
            "max QPS sidecars / direct",
            "direct",
            "sidecars",
            Metric::Rps,
        )
        .article(9730.0 / 11100.0),
    ];
    let outcome = budget.run(lab, progress, "seed003", cases, comparisons);
    servers.push(srv_sidecar);
    servers.push(cli_sidecar);
    drop(servers);
    drop(pods);
    let shape = format!(
        "warden load --find-max -c {CONNECTIONS} --no-keepalive (vegeta's keep-alive off), steps of {:.1} s from {START_QPS} rps x1.5, then bisection; a step passes with at most 0.1% errors, p99 <= {} ms and >= 95% of the rate achieved; {} rounds",
        budget.run.as_secs_f64(),
        P99_BOUND.as_millis(),
        budget.rounds
    );
    let mut seed = HEADER.ran(lab, outcome, busy, shape, budget.rounds, missing);
    seed.notes.push(format!("server app: {app}; the server pod and both sidecars (one worker each) run on CPU 0, the client on CPU 1 when pinned; the direct path uses port 8081, which capture excludes"));
    finish(&mut seed);
    Ok(seed)
}

fn finish(seed: &mut SeedResult) {
    let max = |id: &str| seed.cases.iter().find(|c| c.id == id).map(|c| c.median_rps);
    let fmt = |v: Option<f64>| v.map_or("not measured".into(), |v| format!("{v:.0} rps"));
    let c = comparison(seed, "max QPS sidecars / direct")
        .filter(|c| !c.ratios.is_empty())
        .cloned();
    let ratio = c.as_ref().map_or("not measured".into(), |c| {
        format!("{:.0}% of direct: {}", c.median * 100.0, ratio_text(c))
    });
    seed.published = vec![
        PublishedRow {
            what: "max QPS without sidecar".into(),
            article: "11100 (1.3.3) / 12000 (1.4.8)".into(),
            measured: fmt(max("direct")),
            case: Some("direct".into()),
        },
        PublishedRow {
            what: "max QPS with sidecars".into(),
            article: "9730 (1.3.3) / 10950 (1.4.8)".into(),
            measured: fmt(max("sidecars")),
            case: Some("sidecars".into()),
        },
        PublishedRow {
            what: "with / without".into(),
            article: "88% (1.3.3) / 91% (1.4.8)".into(),
            measured: ratio,
            case: None,
        },
    ];
    seed.verdict = match &c {
        Some(c) => format!(
            "The article's Istio sidecar kept 88-91% of the direct maximum rate. Through two warden sidecars (every request a new connection through both) the maximum is {:.0}% of direct ({}, {} from direct){}.",
            c.median * 100.0,
            ratio_text(c),
            percent_change(c.median),
            if c.within_noise { ", within noise of direct" } else { "" }
        ),
        None => "Not enough runs to compare.".into(),
    };
}
