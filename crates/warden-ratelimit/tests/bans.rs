//! Escalating bans (warden extension `ban`): the seed 000 attack (one client hammering
//! `/login`, others normal) for an hour of test-clock time against a 2/5/10-minute schedule,
//! on memory and on Redis; two services sharing one Redis; Redis restarted mid-ban; the debug
//! port's listing, lifting and AuthorizationPolicy export; config checks.

mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;
use warden_ratelimit::config::parse_config;
use warden_ratelimit::{ManualClock, RateLimitResponse};
use warden_testkit::RedisServer;

/// A minute boundary (divisible by 60).
const T0: u64 = 1_700_000_040_000;
const LIMIT: u64 = 300;
const SCHEDULE_SECS: [u64; 3] = [120, 300, 600];
const FORGET_SECS: u64 = 3600;
/// The attacker's calls per second (600 a minute: twice the limit).
const ATTACK_RATE: u64 = 10;
const ATTACKER: &str = "203.0.113.66";
const NORMAL: [&str; 3] = ["198.51.100.1", "198.51.100.2", "198.51.100.3"];

const CONFIG: &str = "domain: ratelimit
descriptors:
  - key: remote_address
    descriptors:
      - key: PATH
        value: /login
        rate_limit:
          unit: minute
          requests_per_unit: 300
        ban:
          durations: [2m, 5m, 10m]
          forget_after: 1h
";

fn login(ip: &str) -> warden_ratelimit::RateLimitRequest {
    req(
        "ratelimit",
        vec![desc(&[("remote_address", ip), ("PATH", "/login")])],
    )
}

fn reset_secs(r: &RateLimitResponse) -> i64 {
    r.statuses[0]
        .duration_until_reset
        .as_ref()
        .map_or(-1, |d| d.seconds)
}

/// What the schedule allows an attacker sending `ATTACK_RATE` calls at every second of an hour
/// that starts on a minute boundary, derived from the schedule (not by replaying calls): the
/// limit's worth in the first minute (the offence comes at second LIMIT / rate); each ban of a
/// whole number of minutes then ends at that same second of a minute, leaving the rest of that
/// minute (LIMIT calls again) and the whole next minute (LIMIT more, then the next offence).
fn allowed_per_hour() -> (u64, u32) {
    let hour = 3600;
    let offence_second = LIMIT / ATTACK_RATE;
    let mut admitted = LIMIT.min(ATTACK_RATE * hour);
    let mut offence = offence_second;
    let mut strikes = 0u32;
    while offence < hour {
        strikes += 1;
        let ban = SCHEDULE_SECS[(strikes as usize - 1).min(SCHEDULE_SECS.len() - 1)];
        let free = offence + ban;
        if free >= hour {
            break;
        }
        let next_offence = free + 60;
        admitted += ATTACK_RATE * (next_offence.min(hour) - free);
        offence = next_offence;
    }
    (admitted, strikes)
}

#[test]
fn the_schedule_allows_what_the_arithmetic_says() {
    // 300 in minute 0; then 600 per cycle after each ban of 2, 5, 10, 10, 10, 10 minutes.
    assert_eq!(allowed_per_hour(), (300 + 6 * 600, 7));
}

/// One hour, second by second: the attacker's calls, and each normal client's call every 10 s.
/// Returns (attacker admitted, normal clients admitted, normal refused).
async fn run_hour(limiter: &warden_ratelimit::RateLimiter, clock: &ManualClock) -> (u64, u64, u64) {
    let (mut attacker_ok, mut normal_ok, mut normal_refused) = (0, 0, 0);
    for second in 0..3600u64 {
        clock.set_millis(T0 + second * 1000);
        for _ in 0..ATTACK_RATE {
            let r = limiter.decide(&login(ATTACKER)).await.expect("decide");
            if r.overall_code == OK {
                attacker_ok += 1;
            } else if second == LIMIT / ATTACK_RATE {
                // The offence: banned for the first period from now.
                assert_eq!(reset_secs(&r), SCHEDULE_SECS[0] as i64);
            }
        }
        if second % 10 == 0 {
            for ip in NORMAL {
                match limiter
                    .decide(&login(ip))
                    .await
                    .expect("decide")
                    .overall_code
                {
                    OK => normal_ok += 1,
                    _ => normal_refused += 1,
                }
            }
        }
    }
    (attacker_ok, normal_ok, normal_refused)
}

fn assert_hour(result: (u64, u64, u64)) {
    let (attacker_ok, normal_ok, normal_refused) = result;
    let (allowed, _) = allowed_per_hour();
    assert_eq!(
        attacker_ok,
        allowed,
        "attacker admitted per hour: {attacker_ok} (a fixed window alone: {})",
        LIMIT * 60
    );
    assert_eq!(normal_refused, 0, "normal clients are never refused");
    assert_eq!(normal_ok, 3 * 360);
}

#[tokio::test]
async fn seed_000_login_attack_in_memory() {
    let clock = ManualClock::new(T0);
    let h = start_with(
        &[("config.yaml", CONFIG)],
        None,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let limiter = h.server.limiter().clone();
    assert_hour(run_hour(&limiter, &clock).await);
    let stats = limiter
        .stats()
        .limit_stats("ratelimit", "ratelimit.remote_address.PATH_/login");
    assert_eq!(stats.ban_started.get(), u64::from(allowed_per_hour().1));
    assert!(stats.banned.get() > 0);

    // Quiet for the forget period after the last ban: the next offence gets 2 minutes again.
    clock.advance_millis((600 + FORGET_SECS) * 1000);
    let mut last = None;
    for _ in 0..=LIMIT {
        last = Some(limiter.decide(&login(ATTACKER)).await.expect("decide"));
    }
    let last = last.expect("calls");
    assert_eq!(last.overall_code, OVER);
    assert_eq!(
        reset_secs(&last),
        SCHEDULE_SECS[0] as i64,
        "strikes forgotten"
    );
}

#[tokio::test]
async fn seed_000_login_attack_on_redis() {
    let redis = RedisServer::start().expect("redis");
    let clock = ManualClock::new(T0);
    let h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let limiter = h.server.limiter().clone();
    assert_hour(run_hour(&limiter, &clock).await);
}

/// While banned: refused with the ban's remaining time, not counted, the client's other
/// descriptors untouched.
#[tokio::test]
async fn a_banned_call_reports_the_remaining_ban() {
    let clock = ManualClock::new(T0);
    let mut h = start_with(
        &[("config.yaml", CONFIG)],
        None,
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    for _ in 0..LIMIT {
        let r = h
            .client
            .should_rate_limit(login(ATTACKER))
            .await
            .expect("call");
        assert_eq!(r.into_inner().overall_code, OK);
    }
    clock.advance_millis(10_500);
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(reset_secs(&r), 120, "the offence starts a 2-minute ban");
    clock.advance_millis(100_000);
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(reset_secs(&r), 20, "remaining ban, rounded up");
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // Banned in a new minute too, though the new window's count is 0.
    clock.set_millis(T0 + 120_000);
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(reset_secs(&r), 11);
    // After the ban: admitted, and the calls refused during it were not counted.
    clock.set_millis(T0 + 131_000);
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].limit_remaining, LIMIT as u32 - 1);
}

async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url)
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// Two services on one Redis: banned through one, banned at the other; listed, exported and
/// lifted on either's debug port.
#[tokio::test]
async fn two_services_sharing_redis_ban_together() {
    let redis = RedisServer::start().expect("redis");
    let clock = ManualClock::new(T0);
    let mut a = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let mut b = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    // Half the limit through each: the count is shared.
    for i in 0..LIMIT {
        let h = if i % 2 == 0 { &mut a } else { &mut b };
        let r = h
            .client
            .should_rate_limit(login(ATTACKER))
            .await
            .expect("call");
        assert_eq!(r.into_inner().overall_code, OK, "call {i}");
    }
    let r = a
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 120));
    clock.advance_millis(61_000);
    let r = b
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(
        (r.overall_code, reset_secs(&r)),
        (OVER, 59),
        "banned at the other service, in a new window"
    );
    let r = b
        .client
        .should_rate_limit(login(NORMAL[0]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OK, "others unaffected");

    let listed = get_json(&b.debug("/bans")).await;
    let bans = listed["bans"].as_array().expect("bans");
    assert_eq!(bans.len(), 1, "{listed}");
    let ban = &bans[0];
    assert_eq!(ban["rule"], "ratelimit.remote_address.PATH_/login");
    assert_eq!(ban["descriptor"][0]["value"], ATTACKER);
    assert_eq!(ban["strikes"], 1);
    assert_eq!(ban["remaining_seconds"], 59);
    assert_eq!(ban["until_unix_ms"], T0 + 120_000);
    let key = ban["key"].as_str().expect("key").to_owned();
    assert_eq!(
        key,
        format!("warden_ban:ratelimit_remote_address_{ATTACKER}_PATH_/login_")
    );

    let policy = reqwest::get(a.debug("/bans/authorizationpolicy?namespace=edge"))
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    assert!(policy.contains("action: DENY"), "{policy}");
    assert!(policy.contains("namespace: \"edge\""), "{policy}");
    assert!(policy.contains(&format!("- \"{ATTACKER}\"")), "{policy}");

    // Lifted at A: admitted at A at once, and at B once the ban state B read is older than
    // BAN_STATE_CACHE_MS (a service reads a client's ban state at most that often).
    let lifted = reqwest::Client::new()
        .delete(a.debug(&format!("/bans?key={}", key.replace('/', "%2F"))))
        .send()
        .await
        .expect("delete");
    assert_eq!(lifted.status(), 200);
    let r = a
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OK, "admitted where it was lifted");
    clock.advance_millis(warden_ratelimit::settings::DEFAULT_BAN_STATE_CACHE_MS);
    let r = b
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        get_json(&a.debug("/bans")).await["bans"],
        serde_json::json!([])
    );
    let again = reqwest::Client::new()
        .delete(a.debug(&format!("/bans?key={key}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(again.status(), 404);
}

/// Two services count the same client over its limit at the same moment: the offence script
/// starts one ban (one strike, one `ban_started`), every other call of the burst is refused with
/// it and taken back off the count, so the window holds the limit plus the one offence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_racing_on_one_offence_start_one_ban() {
    let redis = RedisServer::start().expect("redis");
    let clock = ManualClock::new(T0);
    let a = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let b = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |_| {},
        Some(Arc::new(clock.clone())),
    )
    .await;
    let (la, lb) = (a.server.limiter().clone(), b.server.limiter().clone());
    for i in 0..LIMIT {
        let r = la.decide(&login(ATTACKER)).await.expect("decide");
        assert_eq!(r.overall_code, OK, "call {i}");
    }
    const BURST: usize = 40;
    let calls = (0..BURST).map(|i| {
        let limiter = if i % 2 == 0 { la.clone() } else { lb.clone() };
        tokio::spawn(async move { limiter.decide(&login(ATTACKER)).await })
    });
    for call in futures_util::future::join_all(calls).await {
        let r = call.expect("task").expect("decide");
        assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 120));
    }
    let stat = |l: &warden_ratelimit::RateLimiter| {
        l.stats()
            .limit_stats("ratelimit", "ratelimit.remote_address.PATH_/login")
            .ban_started
            .get()
    };
    assert_eq!(stat(&la) + stat(&lb), 1, "one offence, one ban");
    let bans = la.bans().await.expect("bans");
    assert_eq!(bans.len(), 1);
    assert_eq!(bans[0].state.strikes, 1);
    let mut conn = redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("redis");
    let counter = format!(
        "ratelimit_remote_address_{ATTACKER}_PATH_/login_{}",
        T0 / 1000
    );
    let count: u64 = redis::cmd("GET")
        .arg(&counter)
        .query(&mut conn)
        .expect("get");
    assert_eq!(count, LIMIT + 1, "refused calls are not counted");
}

/// A client's ban state is read from Redis (a `GET`) once per `BAN_STATE_CACHE_MS` of the
/// limiter's clock, not on every call; with 0 it is read on every call. Counting is not
/// cached: every call still increments the shared counter.
#[tokio::test]
async fn the_ban_state_is_read_once_per_cache_time() {
    let redis = RedisServer::start().expect("redis");
    let mut conn = redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("redis");
    let mut calls_of = |command: &str| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .expect("info");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let cache_ms = warden_ratelimit::settings::DEFAULT_BAN_STATE_CACHE_MS;
    for (setting, want_gets) in [(cache_ms, 2), (0, 20)] {
        let clock = ManualClock::new(T0);
        let mut h = start_with(
            &[("config.yaml", CONFIG)],
            Some(&redis),
            |s| s.ban_state_cache_ms = setting,
            Some(Arc::new(clock.clone())),
        )
        .await;
        let (gets, counts) = (calls_of("get"), calls_of("incrby"));
        for i in 0..20 {
            if i == 10 {
                clock.advance_millis(cache_ms);
            }
            let r = h
                .client
                .should_rate_limit(login(NORMAL[0]))
                .await
                .expect("call")
                .into_inner();
            assert_eq!(r.overall_code, OK, "call {i}");
        }
        assert_eq!(
            (calls_of("get") - gets, calls_of("incrby") - counts),
            (want_gets, 20),
            "BAN_STATE_CACHE_MS={setting}"
        );
    }
}

/// Redis restarted mid-ban (no persistence, as in these tests and Redis's default for a cache):
/// the ban and the strikes are lost with the counters; the client is admitted again and earns
/// a new first-period ban. No call fails once Redis is back and healthy.
#[tokio::test]
async fn redis_restart_mid_ban_loses_the_ban_and_it_is_earned_again() {
    let mut redis = RedisServer::start().expect("redis");
    let clock = ManualClock::new(T0);
    let mut h = start_with(
        &[("config.yaml", CONFIG)],
        Some(&redis),
        |s| s.health_probe_interval = Duration::from_millis(50),
        Some(Arc::new(clock.clone())),
    )
    .await;
    // Two bans (2 and 5 minutes): strikes 2.
    for round in 0..2u64 {
        for _ in 0..=LIMIT {
            h.client
                .should_rate_limit(login(ATTACKER))
                .await
                .expect("call");
        }
        clock.advance_millis(SCHEDULE_SECS[round as usize] * 1000 + 60_000);
    }
    clock.set_millis(T0 + 20 * 60_000);
    for _ in 0..=LIMIT {
        h.client
            .should_rate_limit(login(ATTACKER))
            .await
            .expect("call");
    }
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 600), "third ban");

    redis.stop();
    let healthcheck = async |h: &common::Harness| {
        reqwest::get(h.http("/healthcheck"))
            .await
            .map(|r| r.status().as_u16())
            .ok()
    };
    eventually("unhealthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(500)
    })
    .await;
    // While Redis is down a call fails as the reference's does (Envoy's failure_mode_deny
    // decides what passes).
    assert!(h.client.should_rate_limit(login(ATTACKER)).await.is_err());
    redis.restart().expect("restart");
    eventually("healthy", Duration::from_secs(5), async || {
        healthcheck(&h).await == Some(200)
    })
    .await;

    // The ban is gone with Redis's data: admitted again, and the next offence is a first one.
    for i in 0..LIMIT {
        let r = h
            .client
            .should_rate_limit(login(ATTACKER))
            .await
            .unwrap_or_else(|e| panic!("call {i} after the restart failed: {e}"))
            .into_inner();
        assert_eq!(r.overall_code, OK, "call {i}");
    }
    let r = h
        .client
        .should_rate_limit(login(ATTACKER))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(
        (r.overall_code, reset_secs(&r)),
        (OVER, SCHEDULE_SECS[0] as i64),
        "re-earned from the first period"
    );
}

#[test]
fn config_checks() {
    let bad = |yaml: &str, want: &str| {
        let err = parse_config("c.yaml", yaml).expect_err(want).to_string();
        assert!(err.contains(want), "{err} should contain {want}");
    };
    let with = |ban: &str, extra: &str| {
        format!("domain: d\ndescriptors:\n  - key: k\n    {extra}\n    ban: {ban}\n")
    };
    let limit = "rate_limit: {unit: minute, requests_per_unit: 5}";
    bad(
        &with("{durations: [2m], forget_after: 1h}", "value: v"),
        "ban on 'd.k_v' needs a rate_limit",
    );
    bad(
        &with(
            "{durations: [2m], forget_after: 1h}",
            "rate_limit: {unlimited: true}",
        ),
        "unlimited",
    );
    bad(
        &format!(
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    {limit}\n    ban: {{durations: [2m], forget_after: 1h}}\n"
        ),
        "shadow_mode",
    );
    bad(
        &with("{durations: [], forget_after: 1h}", limit),
        "at least one",
    );
    bad(
        &with("{durations: [2x], forget_after: 1h}", limit),
        "'2x' is not a duration",
    );
    bad(
        &with("{durations: [0s], forget_after: 1h}", limit),
        "longer than 0",
    );
    bad(
        &with("{durations: [2m]}", limit),
        "forget_after is required",
    );
    bad(
        &with("{durations: [2m], forget_after: 1h, cap: 3}", limit),
        "unknown key 'cap'",
    );
    bad(&with("[2m]", limit), "must be a map");
    // A good one round-trips, and says it uses a warden extension.
    let config = parse_config(
        "c.yaml",
        &with("{durations: [2m, 5m, 1h30m], forget_after: 1d}", limit),
    )
    .expect("config");
    let ban = config.descriptors[0].ban.as_ref().expect("ban");
    assert_eq!(ban.durations_ms, vec![120_000, 300_000, 5_400_000]);
    assert_eq!(ban.forget_after_ms, 86_400_000);
    let again = parse_config("c.yaml", &warden_ratelimit::to_yaml(&config)).expect("again");
    assert_eq!(again, config);
    assert_eq!(
        warden_ratelimit::config::warden_extensions(&config),
        vec!["'d.k': ban (escalating bans; unknown to envoyproxy/ratelimit)"]
    );
}

/// Redis cluster: the counter and the ban key are on different slots, so the check, the count
/// and the offence are separate steps; the decisions are the same.
#[tokio::test]
async fn bans_on_a_redis_cluster() {
    let cluster = warden_testkit::RedisCluster::start(3).expect("cluster");
    let clock = ManualClock::new(T0);
    let urls = cluster.urls();
    let mut h = start_with(
        &[("config.yaml", CONFIG)],
        None,
        move |s| {
            s.backend = warden_ratelimit::Backend::Redis;
            s.redis.socket_type = "tcp".into();
            s.redis.url = urls;
            s.redis.redis_type = warden_ratelimit::store::RedisType::Cluster;
            s.redis.timeout = Duration::from_secs(2);
        },
        Some(Arc::new(clock.clone())),
    )
    .await;
    // Several clients, so their keys land on different nodes.
    let clients: Vec<String> = (1..=6).map(|i| format!("192.0.2.{i}")).collect();
    for ip in &clients {
        for i in 0..LIMIT {
            let r = h.client.should_rate_limit(login(ip)).await.expect("call");
            assert_eq!(r.into_inner().overall_code, OK, "{ip} call {i}");
        }
        let r = h
            .client
            .should_rate_limit(login(ip))
            .await
            .expect("call")
            .into_inner();
        assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 120), "{ip}");
    }
    clock.advance_millis(60_000);
    let r = h
        .client
        .should_rate_limit(login(&clients[0]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 60), "still banned");
    // After the ban, the next offence is the second: 5 minutes.
    clock.advance_millis(61_000);
    for _ in 0..LIMIT {
        h.client
            .should_rate_limit(login(&clients[0]))
            .await
            .expect("call");
    }
    let r = h
        .client
        .should_rate_limit(login(&clients[0]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!((r.overall_code, reset_secs(&r)), (OVER, 300));
}
