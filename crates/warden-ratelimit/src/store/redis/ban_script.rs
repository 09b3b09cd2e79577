//! Bans on Redis. Each decision reads the client's ban state with a plain `GET` in the same
//! pipeline as its counter's `INCRBY` + `EXPIRE` (one round trip, no script); what follows is
//! decided in Rust ([`super::ban_followup`]). Only a call found banned (its count taken back
//! with `DECRBY`: a banned call is not counted) or one over the limit (the offence, [`OFFEND`],
//! a Lua `EVAL` that checks and starts the ban atomically) costs a second round trip.
//!
//! The ban state is one string key per client and rule (see [`crate::ban::record`]), kept
//! (PX) until its strikes would be forgotten. Whether a ban is in force is decided from the
//! stored end time against the caller's clock (`now_ms`), not from the key's TTL, so tests can
//! move time; the TTL only cleans up.
//!
//! Cluster mode: the counter and the ban key hash to different slots, so the `GET` and the
//! count are two pipelines sent at once, and each follow-up goes to its key's node.

use crate::ban::schedule::BanState;
use crate::store::{BanOp, BanOutcome};

/// The offence: KEYS: ban. ARGV: now_ms, forget_ms, subject, durations_ms... Returns
/// {outcome (1 already banned, 2 started), ms, strikes}. Atomic, so when several services
/// count the same client over its limit at once, one starts the ban and the others find it.
pub(super) const OFFEND: &str = r#"
local now = tonumber(ARGV[1])
local forget = tonumber(ARGV[2])
local untl, strikes = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local a, b = string.match(v, '^(%d+) (%d+)')
  untl = tonumber(a) or 0
  strikes = tonumber(b) or 0
end
if untl > now then
  return {1, untl - now, strikes}
end
if untl > 0 and now - untl >= forget then strikes = 0 end
strikes = strikes + 1
local n = #ARGV - 3
local i = strikes
if i > n then i = n end
local d = tonumber(ARGV[3 + i])
redis.call('SET', KEYS[1], string.format('%d %d ', now + d, strikes) .. ARGV[3], 'PX', d + forget)
return {2, d, strikes}
"#;

/// The offence script for `ban`, for the client `subject_json` (see [`crate::ban::record`]).
pub(super) fn offend(ban: &BanOp, subject_json: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(OFFEND)
        .arg(1)
        .arg(&ban.key)
        .arg(ban.now_ms)
        .arg(ban.config.forget_after_ms)
        .arg(subject_json);
    for d in &ban.config.durations_ms {
        cmd.arg(*d);
    }
    cmd
}

fn ints(value: &redis::Value) -> Vec<i64> {
    match value {
        redis::Value::Array(items) => items
            .iter()
            .map(|v| match v {
                redis::Value::Int(i) => *i,
                _ => 0,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn outcome(code: i64, ms: i64, strikes: i64) -> Option<BanOutcome> {
    let (ms, strikes) = (
        ms.max(0) as u64,
        strikes.clamp(0, i64::from(u32::MAX)) as u32,
    );
    match code {
        1 => Some(BanOutcome::Refused {
            remaining_ms: ms,
            strikes,
        }),
        2 => Some(BanOutcome::Started {
            duration_ms: ms,
            strikes,
        }),
        _ => None,
    }
}

/// The offence script's answer.
pub(super) fn parse_offend(value: &redis::Value) -> Option<BanOutcome> {
    match ints(value).as_slice() {
        [code, ms, strikes] => outcome(*code, *ms, *strikes),
        _ => None,
    }
}

/// A stored ban value's state, as the decision's `GET` read it.
pub(super) fn stored_state(value: &redis::Value) -> BanState {
    let text = match value {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        _ => return BanState::default(),
    };
    crate::ban::record::decode(&text)
        .map(|(s, _)| s)
        .unwrap_or_default()
}
