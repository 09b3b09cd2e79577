//! The ban decisions, shared with the proxy's local limiter: [`warden_config::ban`]. The memory
//! store applies them under its lock; the Redis store applies them to the state its `GET` read
//! with the count (`store::redis::ban_followup`), and its offence script
//! (`store::redis::ban_script`) is [`offend`] in Lua, atomic against other services.

pub use warden_config::ban::{check, duration_of, keep_ms, offend, BanCheck, BanState};
