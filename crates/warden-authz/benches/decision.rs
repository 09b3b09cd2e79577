//! Cost of one authorization decision with 1, 20k, 100k and 1M CIDRs (3/4 IPv4, 1/4 IPv6),
//! in one rule and as one rule per CIDR, plus compile time and peak memory for each size.
//!
//! Run: `cargo bench -p warden-authz --bench decision -- --warm-up-time 1 --measurement-time 2`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use warden_authz::{Authorizer, HttpAttrs, ProxyScope};
use warden_config::kinds::authorization_policy::{Action, From, Rule, Source};
use warden_config::{AuthorizationPolicy, Doc, Metadata};

/// Counts live heap bytes and their peak, to report what compiling costs.
struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// xorshift64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` CIDR strings: 3/4 IPv4 (/32 and /24), 1/4 IPv6 (/128 and /64); never 127.0.0.0/8.
fn cidrs(n: usize) -> (Vec<String>, Vec<IpAddr>) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut list = Vec::with_capacity(n);
    let mut members = Vec::new();
    for i in 0..n {
        let r = rng.next();
        let (text, addr) = if i % 4 == 3 {
            let a = Ipv6Addr::from((0x2001_0db8u128 << 96) | (u128::from(r) << 32) | 1);
            let text = if i % 8 == 3 {
                format!("{a}/64")
            } else {
                a.to_string()
            };
            (text, IpAddr::V6(a))
        } else {
            let mut v4 = r as u32;
            if v4 >> 24 == 127 {
                v4 ^= 0x0100_0000;
            }
            let a = Ipv4Addr::from(v4);
            if i % 4 == 1 {
                (
                    format!("{}/24", Ipv4Addr::from(v4 & 0xffff_ff00)),
                    IpAddr::V4(a),
                )
            } else {
                (a.to_string(), IpAddr::V4(a))
            }
        };
        list.push(text);
        if members.len() < 1024 {
            members.push(addr);
        }
    }
    (list, members)
}

/// Turns a CIDR list into policies of one shape.
type BuildDocs = fn(Vec<String>) -> Vec<Doc<AuthorizationPolicy>>;

fn doc(name: &str, rules: Vec<Rule>) -> Doc<AuthorizationPolicy> {
    Doc {
        file: PathBuf::from("bench.yaml"),
        index: 1,
        api_version: "security.istio.io/v1".into(),
        kind: "AuthorizationPolicy".into(),
        metadata: Metadata {
            name: name.into(),
            namespace: Some("istio-system".into()),
            ..Metadata::default()
        },
        spec: AuthorizationPolicy {
            action: Action::Allow,
            rules,
            ..AuthorizationPolicy::default()
        },
    }
}

fn ip_rule(ip_blocks: Vec<String>) -> Rule {
    Rule {
        from: vec![From {
            source: Some(Source {
                ip_blocks,
                ..Source::default()
            }),
        }],
        ..Rule::default()
    }
}

/// Seed 001's shapes: every CIDR in one rule, or one rule per CIDR.
fn one_rule(list: Vec<String>) -> Vec<Doc<AuthorizationPolicy>> {
    vec![doc("allowlist", vec![ip_rule(list)])]
}

fn rule_per_cidr(list: Vec<String>) -> Vec<Doc<AuthorizationPolicy>> {
    vec![doc(
        "allowlist",
        list.into_iter().map(|c| ip_rule(vec![c])).collect(),
    )]
}

/// Compile once, reporting wall time and the heap the compile itself needed.
fn compile_measured(label: &str, docs: &[Doc<AuthorizationPolicy>]) -> Authorizer {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let start = Instant::now();
    let authz =
        Authorizer::compile(docs, &ProxyScope::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let took = start.elapsed();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let kept = LIVE.load(Ordering::Relaxed) - before;
    let stats = authz.stats();
    println!(
        "compile {label:<22} {:>9} cidrs  {:>8.1} ms  peak +{:>6.1} MiB  kept {:>6.1} MiB  (index {:.1} MiB)",
        stats.cidrs,
        took.as_secs_f64() * 1e3,
        peak as f64 / 1048576.0,
        kept as f64 / 1048576.0,
        stats.index_bytes as f64 / 1048576.0,
    );
    authz
}

fn decision(c: &mut Criterion) {
    let headers = http::HeaderMap::new();
    let attrs = |peer: IpAddr| HttpAttrs {
        direct_peer: peer,
        client_ip: peer,
        dest_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        dest_port: 8080,
        host: "example.com",
        method: "GET",
        path: "/",
        headers: &headers,
        sni: None,
        principal: None,
        request_auth: None,
    };
    // Misses: loopback clients, as in seed 001 (the whole list is searched, then 403).
    let mut rng = Rng(7);
    let misses: Vec<IpAddr> = (0..1024)
        .map(|i| {
            let r = rng.next();
            if i % 4 == 3 {
                IpAddr::V6(Ipv6Addr::from(u128::from(r) | 1))
            } else {
                IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | (r as u32 & 0x00ff_ffff)))
            }
        })
        .collect();

    let mut group = c.benchmark_group("check_http");
    let shapes: [(&str, BuildDocs, &[usize]); 2] = [
        ("one_rule", one_rule, &[1, 20_000, 100_000, 1_000_000]),
        ("rule_per_cidr", rule_per_cidr, &[1, 20_000, 100_000]),
    ];
    for (shape, build, sizes) in shapes {
        for &n in sizes {
            let (list, members) = cidrs(n);
            let docs = build(list);
            let authz = compile_measured(&format!("{shape}/{n}"), &docs);
            drop(docs);
            for (what, probes) in [("miss", &misses), ("hit", &members)] {
                assert_eq!(
                    authz.check_http(&attrs(probes[0])).allow,
                    what == "hit",
                    "{shape}/{n} {what}"
                );
                let mut i = 0usize;
                group.bench_with_input(
                    BenchmarkId::new(format!("{shape}/{what}"), n),
                    &n,
                    |b, _| {
                        b.iter(|| {
                            i = (i + 1) % probes.len();
                            black_box(authz.check_http(&attrs(black_box(probes[i]))))
                        })
                    },
                );
            }
        }
    }
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
