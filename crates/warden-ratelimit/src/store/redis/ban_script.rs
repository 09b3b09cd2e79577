//! Bans on Redis: the logic of [`crate::ban::schedule`] in Lua, run by `EVAL` inside the
//! decision's pipeline, so the ban check, the window counter and (when the counter goes over)
//! the new ban are one atomic round trip. A banned request is not counted.
//!
//! The ban state is one string key per client and rule (see [`crate::ban::record`]), kept
//! (PX) until its strikes would be forgotten. Whether a ban is in force is decided from the
//! stored end time against the caller's clock (`now_ms`), not from the key's TTL, so tests can
//! move time; the TTL only cleans up.
//!
//! Cluster mode: the counter and the ban key hash to different slots, so a script cannot touch
//! both; there the check (`GET`), the counter and the offence ([`OFFEND`]) are three steps.

use crate::ban::schedule::BanState;
use crate::store::{BanOp, BanOutcome, CounterOp};

/// KEYS: counter, ban. ARGV: now_ms, hits, ttl_secs, limit, forget_ms, subject, durations_ms...
/// Returns {after, outcome (0 none, 1 refused, 2 started), ms (remaining or duration), strikes}.
pub(super) const CHECK_COUNT_OFFEND: &str = r#"
local now = tonumber(ARGV[1])
local forget = tonumber(ARGV[5])
local untl, strikes = 0, 0
local v = redis.call('GET', KEYS[2])
if v then
  local a, b = string.match(v, '^(%d+) (%d+)')
  untl = tonumber(a) or 0
  strikes = tonumber(b) or 0
end
if untl > now then
  return {0, 1, untl - now, strikes}
end
if untl > 0 and now - untl >= forget then strikes = 0 end
local hits = tonumber(ARGV[2])
local after = redis.call('INCRBY', KEYS[1], hits)
redis.call('EXPIRE', KEYS[1], ARGV[3])
if hits > 0 and after > tonumber(ARGV[4]) then
  strikes = strikes + 1
  local n = #ARGV - 6
  local i = strikes
  if i > n then i = n end
  local d = tonumber(ARGV[6 + i])
  redis.call('SET', KEYS[2], string.format('%d %d ', now + d, strikes) .. ARGV[6], 'PX', d + forget)
  return {after, 2, d, strikes}
end
return {after, 0, 0, strikes}
"#;

/// The offence alone (cluster mode): KEYS: ban. ARGV: now_ms, forget_ms, subject,
/// durations_ms... Returns {outcome (1 already banned, 2 started), ms, strikes}.
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

/// Adds the combined script for `op` (which has a ban) to `pipe`.
pub(super) fn add_check_count_offend(pipe: &mut redis::Pipeline, op: &CounterOp, ban: &BanOp) {
    let cmd = pipe
        .cmd("EVAL")
        .arg(CHECK_COUNT_OFFEND)
        .arg(2)
        .arg(&op.key)
        .arg(&ban.key)
        .arg(ban.now_ms)
        .arg(op.hits)
        .arg(op.ttl_secs)
        .arg(ban.limit)
        .arg(ban.config.forget_after_ms)
        .arg(&ban.subject_json);
    for d in &ban.config.durations_ms {
        cmd.arg(*d);
    }
}

/// Adds the offence script for `ban` to `pipe`.
pub(super) fn add_offend(pipe: &mut redis::Pipeline, ban: &BanOp) {
    let cmd = pipe
        .cmd("EVAL")
        .arg(OFFEND)
        .arg(1)
        .arg(&ban.key)
        .arg(ban.now_ms)
        .arg(ban.config.forget_after_ms)
        .arg(&ban.subject_json);
    for d in &ban.config.durations_ms {
        cmd.arg(*d);
    }
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

/// The combined script's answer: the counter after the call and the ban outcome.
pub(super) fn parse_check_count_offend(value: &redis::Value) -> (u64, Option<BanOutcome>) {
    match ints(value).as_slice() {
        [after, code, ms, strikes] => ((*after).max(0) as u64, outcome(*code, *ms, *strikes)),
        _ => (0, None),
    }
}

/// The offence script's answer.
pub(super) fn parse_offend(value: &redis::Value) -> Option<BanOutcome> {
    match ints(value).as_slice() {
        [code, ms, strikes] => outcome(*code, *ms, *strikes),
        _ => None,
    }
}

/// A stored ban value's state (cluster mode's check is a plain `GET`).
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
