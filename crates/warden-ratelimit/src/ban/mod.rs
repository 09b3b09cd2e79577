//! Escalating bans (warden extension `ban` on a descriptor, see [`crate::config::BanConfig`]):
//! the decisions ([`schedule`]), how a ban is stored and listed ([`record`]) and its export as
//! an Istio AuthorizationPolicy ([`authorization_policy`]). The stores keep the state
//! (`store::memory_bans`, `store::redis::ban_script`); the check rides in the counter's round
//! trip (one lookup in memory, one `GET` in the Redis pipeline).

pub mod authorization_policy;
pub mod record;
pub mod schedule;

pub use record::{BanRecord, BanSubject};

/// What every ban key starts with, after `CACHE_KEY_PREFIX`: `warden_ban:<domain>_<k>_<v>_...`
/// (the counter key's stem, without its window).
pub const BAN_KEY_PREFIX: &str = "warden_ban:";
pub use schedule::{BanCheck, BanState};
