//! The ban decisions, shared with the proxy's local limiter: [`warden_config::ban`]. The memory
//! store applies them under its lock; the Redis script (`store::redis::ban_script`) is the same
//! logic in Lua, so that the check, the count and the ban are one atomic round trip.

pub use warden_config::ban::{check, duration_of, keep_ms, offend, BanCheck, BanState};
