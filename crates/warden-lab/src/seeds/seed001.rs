//! Seed 001: an ingress gateway answering `directResponse` 333 "test" behind AuthorizationPolicy
//! allowlists of 20k / 100k IPs, 20k one-IP rules and 1M CIDRs, beside nginx `geo` and HAProxy
//! `src -f` with the same 100k list (bench/authz.sh's setup). The client (127.0.0.1) is in no
//! list, so every list is searched and the answer is 403, as in the article.

use super::{allowlist, comparison, missing, percent_change, ratio_text, Budget, Header};
use crate::load_run::LoadSpec;
use crate::machine::rss_mib;
use crate::model::{Metric, PublishedRow, SeedResult};
use crate::process::{Core, Lab, Server};
use crate::runner::{Case, ComparisonSpec, Progress};
use std::time::Duration;
use warden_sandbox::free_port;

pub const HEADER: Header = Header {
    id: "seed001",
    title: "Huge IP allowlists on the ingress gateway (AuthorizationPolicy ipBlocks)",
    article: "hey -z 60s against an Istio ingress gateway answering directResponse 333: \
              no policy 1514-1548 rps; 20k IPs in one rule 1235-1275; 100k IPs 361-367 (-76%); \
              20k one-IP rules 336-385.",
};

/// hey's default concurrency (the article ran `hey -z 60s`).
const CONNECTIONS: usize = 50;

fn gateway_yaml(port: u16) -> String {
    format!(
        "{}apiVersion: networking.istio.io/v1beta1\nkind: VirtualService\n\
         metadata: {{name: ingressgateway, namespace: default}}\n\
         spec:\n  gateways: [istio-system/ingressgateway]\n  hosts: [\"*\"]\n  http:\n\
         \x20 - name: httpbin\n    match: [{{uri: {{prefix: /}}}}]\n\
         \x20   directResponse: {{status: 333, body: {{string: test}}}}\n",
        super::gateway_doc("ingressgateway", port)
    )
}

struct Started {
    server: Server,
    url: String,
    rss: Option<f64>,
}

fn start_warden(lab: &Lab, id: &str, policy: &str, expect: &str) -> anyhow::Result<Started> {
    let port = free_port()?;
    let gw = lab.write(&format!("seed001/{id}/gateway.yaml"), &gateway_yaml(port))?;
    let pol = lab.write(&format!("seed001/{id}/policy.yaml"), policy)?;
    let mut cmd = lab.warden(Core::Server);
    cmd.arg("proxy").arg("-c").arg(&gw).arg("-c").arg(&pol);
    cmd.args(["--concurrency", "1", "--listen-host", "127.0.0.1"]);
    cmd.args(["--admin", &format!("127.0.0.1:{}", free_port()?)]);
    cmd.args(["--label", "istio=ingressgateway", "--no-watch"]);
    let mut server = lab.spawn(&format!("seed001-{id}"), cmd)?;
    let url = format!("http://127.0.0.1:{port}/");
    if let Err(e) = lab.wait_status(&[], &url, expect, Duration::from_secs(180)) {
        server.check_alive()?;
        return Err(e);
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss = rss_mib(server.pid);
    Ok(Started { server, url, rss })
}

pub fn run(lab: &Lab, progress: &Progress, busy: f64) -> anyhow::Result<SeedResult> {
    let budget = Budget::of(lab, 5, 3.0);
    progress.say("seed001: generating the allowlists and starting the gateways");
    let e20k = allowlist::entries(20_000, false);
    let e100k = allowlist::entries(100_000, false);
    let mut warden_cases = vec![
        ("a", "warden (a) no policy", String::new(), "333"),
        (
            "b",
            "warden (b) 20k IPs in 1 rule",
            allowlist::istio(&e20k, false),
            "403",
        ),
        (
            "c",
            "warden (c) 100k IPs in 1 rule",
            allowlist::istio(&e100k, false),
            "403",
        ),
        (
            "d",
            "warden (d) 20k rules of 1 IP",
            allowlist::istio(&e20k, true),
            "403",
        ),
    ];
    let mut notes = Vec::new();
    if lab.quick {
        notes.push("--quick leaves out case (e), 1M CIDRs (its list takes long to load)".into());
    } else {
        let e1m = allowlist::entries(1_000_000, true);
        warden_cases.push((
            "e",
            "warden (e) 1M CIDRs (1/4 IPv6)",
            allowlist::istio(&e1m, false),
            "403",
        ));
    }
    let mut servers = Vec::new();
    let mut cases = Vec::new();
    for (id, label, policy, expect) in &warden_cases {
        if lab.stopped() {
            break;
        }
        let s = start_warden(lab, id, policy, expect)?;
        let mut case = Case::new(
            id,
            label,
            "warden",
            LoadSpec::closed_loop(s.url.clone(), CONNECTIONS, budget.run),
            vec![s.server.pid],
        );
        case.rss_mib = s.rss;
        cases.push(case);
        servers.push(s.server);
    }
    let geo = lab.write("seed001/allow-100k.geo", &allowlist::nginx_geo(&e100k))?;
    let lst = lab.write("seed001/allow-100k.lst", &allowlist::haproxy(&e100k))?;
    let missing = missing(&["nginx", "haproxy"]);
    if !missing.contains(&"nginx".to_string()) {
        let (p_none, p_geo) = (free_port()?, free_port()?);
        let text = "default_type text/plain;";
        let conf = super::nginx_conf(
            lab,
            "seed001",
            &format!(
                "  keepalive_requests 1000000;\n  geo $allowed {{ default 0; include {}; }}\n\
                 \x20 server {{ listen 127.0.0.1:{p_none}; location / {{ {text} return 333 \"test\"; }} }}\n\
                 \x20 server {{ listen 127.0.0.1:{p_geo}; location / {{ {text}\n\
                 \x20   if ($allowed = 0) {{ return 403 \"RBAC: access denied\"; }} return 333 \"test\"; }} }}\n",
                geo.display()
            ),
        )?;
        let mut cmd = lab.pinned(Core::Server, "nginx");
        cmd.arg("-p")
            .arg(conf.parent().unwrap_or(lab.dir()))
            .arg("-c")
            .arg(&conf);
        let n = lab.spawn("seed001-nginx", cmd)?;
        for (id, label, port, expect) in [
            ("nginx", "nginx no list", p_none, "333"),
            ("nginx-geo", "nginx geo 100k", p_geo, "403"),
        ] {
            let url = format!("http://127.0.0.1:{port}/");
            lab.wait_status(&[], &url, expect, Duration::from_secs(60))?;
            cases.push(Case::new(
                id,
                label,
                "nginx",
                LoadSpec::closed_loop(url, CONNECTIONS, budget.run),
                vec![n.pid],
            ));
        }
        servers.push(n);
    }
    if !missing.contains(&"haproxy".to_string()) {
        let (p_none, p_acl) = (free_port()?, free_port()?);
        let cfg = format!(
            "global\n  nbthread 1\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend none\n  bind 127.0.0.1:{p_none}\n  http-request return status 333 content-type text/plain string test\n\
             frontend acl\n  bind 127.0.0.1:{p_acl}\n  acl allowed src -f {}\n\
             \x20 http-request return status 403 content-type text/plain string \"RBAC: access denied\" if !allowed\n\
             \x20 http-request return status 333 content-type text/plain string test\n",
            lst.display()
        );
        let cfg_path = lab.write("seed001/haproxy.cfg", &cfg)?;
        let mut cmd = lab.pinned(Core::Server, "haproxy");
        cmd.arg("-f").arg(&cfg_path);
        let h = lab.spawn("seed001-haproxy", cmd)?;
        for (id, label, port, expect) in [
            ("haproxy", "haproxy no list", p_none, "333"),
            ("haproxy-acl", "haproxy src -f 100k", p_acl, "403"),
        ] {
            let url = format!("http://127.0.0.1:{port}/");
            lab.wait_status(&[], &url, expect, Duration::from_secs(60))?;
            cases.push(Case::new(
                id,
                label,
                "haproxy",
                LoadSpec::closed_loop(url, CONNECTIONS, budget.run),
                vec![h.pid],
            ));
        }
        servers.push(h);
    }
    let has = |id: &str| cases.iter().any(|c| c.id == id);
    let mut comparisons = vec![ComparisonSpec::noise_floor("a", "warden (a)", Metric::Rps)];
    for (id, article) in [
        ("b", Some(1255.0 / 1531.0)),
        ("c", Some(364.0 / 1531.0)),
        ("d", Some(360.0 / 1531.0)),
        ("e", None),
    ] {
        if has(id) {
            let mut c = ComparisonSpec::new(&format!("warden ({id}) / (a)"), "a", id, Metric::Rps);
            if let Some(r) = article {
                c = c.article(r);
            }
            comparisons.push(c);
        }
    }
    if has("nginx") {
        comparisons.push(ComparisonSpec::new(
            "nginx geo 100k / nginx no list",
            "nginx",
            "nginx-geo",
            Metric::Rps,
        ));
        comparisons.push(ComparisonSpec::new(
            "warden (c) / nginx geo 100k",
            "nginx-geo",
            "c",
            Metric::Rps,
        ));
    }
    if has("haproxy") {
        comparisons.push(ComparisonSpec::new(
            "haproxy src -f 100k / haproxy no list",
            "haproxy",
            "haproxy-acl",
            Metric::Rps,
        ));
        comparisons.push(ComparisonSpec::new(
            "warden (c) / haproxy src -f 100k",
            "haproxy-acl",
            "c",
            Metric::Rps,
        ));
    }
    let outcome = budget.run(lab, progress, "seed001", cases, comparisons);
    drop(servers);
    let shape = format!(
        "warden load -c {CONNECTIONS} (hey's default) closed loop, keep-alive, {}",
        budget.describe()
    );
    let mut seed = HEADER.ran(lab, outcome, busy, shape, budget.rounds, missing);
    seed.notes.extend(notes);
    seed.notes.push(
        "warden runs one worker (--concurrency 1) per case, as nginx and HAProxy run one; the client is 127.0.0.1, in no list, so every request searches the whole list and gets 403".into(),
    );
    finish(&mut seed);
    Ok(seed)
}

fn finish(seed: &mut SeedResult) {
    let rps = |id: &str| seed.cases.iter().find(|c| c.id == id).map(|c| c.median_rps);
    let fmt = |v: Option<f64>| v.map_or("not measured".into(), |v| format!("{v:.0} rps"));
    let with_ratio = |id: &str| {
        let r = comparison(seed, &format!("warden ({id}) / (a)"));
        match (rps(id), r) {
            (Some(v), Some(c)) if !c.ratios.is_empty() => {
                format!(
                    "{v:.0} rps ({} vs (a); ratio {})",
                    percent_change(c.median),
                    ratio_text(c)
                )
            }
            (v, _) => fmt(v),
        }
    };
    seed.published = vec![
        PublishedRow {
            what: "no policy".into(),
            article: "1514-1548 rps".into(),
            measured: fmt(rps("a")),
            case: Some("a".into()),
        },
        PublishedRow {
            what: "20k IPs in one rule".into(),
            article: "1235-1275 rps (-18%)".into(),
            measured: with_ratio("b"),
            case: Some("b".into()),
        },
        PublishedRow {
            what: "100k IPs in one rule".into(),
            article: "361-367 rps (-76%)".into(),
            measured: with_ratio("c"),
            case: Some("c".into()),
        },
        PublishedRow {
            what: "20k IPs as 20k rules".into(),
            article: "336-385 rps (-76%)".into(),
            measured: with_ratio("d"),
            case: Some("d".into()),
        },
        PublishedRow {
            what: "1M CIDRs".into(),
            article: "not measured".into(),
            measured: with_ratio("e"),
            case: Some("e".into()),
        },
    ];
    let c = comparison(seed, "warden (c) / (a)").filter(|c| !c.ratios.is_empty());
    seed.verdict = match c {
        Some(c) => {
            let noise = if c.within_noise {
                "within this machine's noise of no policy at all"
            } else {
                "a measurable cost"
            };
            let peers: Vec<String> = seed
                .comparisons
                .iter()
                .filter(|x| {
                    x.name.starts_with("warden (c) / ") && x.a != "a" && !x.ratios.is_empty()
                })
                .map(|x| {
                    format!(
                        "{:.2}x {}",
                        x.median,
                        x.name.trim_start_matches("warden (c) / ")
                    )
                })
                .collect();
            format!(
                "With 100k IPs in one rule the article's Envoy lost 76% of its throughput; warden's throughput with the same list changes by {} against no policy (ratio {}), {noise}.{}",
                percent_change(c.median),
                ratio_text(c),
                if peers.is_empty() { String::new() } else { format!(" Against the peers with the same 100k list: {}.", peers.join(", ")) }
            )
        }
        None => "Not enough runs to compare.".into(),
    };
}
