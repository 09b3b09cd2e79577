//! Around the request path: the compiled snapshot and the state every worker shares, config
//! loading and reloads, starting and stopping, the admin endpoint, metrics, access log and
//! `warden check`.

pub mod access_log;
pub mod admin;
pub mod check;
mod config_settle;
pub(crate) mod config_source;
pub mod gateway_topology;
pub mod metrics;
pub mod proxy;
pub mod reload_guard;
pub mod snapshot;
pub(crate) mod startup_pages;
pub mod state;
