//! Around the request path: the state every worker shares and reloads, starting and stopping,
//! the admin endpoint, config loading and `warden check`.

pub mod admin;
mod admin_bans;
mod admin_pages;
pub mod app_probers;
pub mod check;
mod config_settle;
pub(crate) mod config_source;
pub mod gateway_topology;
mod jwks_refresh;
pub mod options;
pub mod proxy;
pub mod reload_guard;
// madvise on the executable's own pages: no safe wrapper in std.
#[allow(unsafe_code)]
pub(crate) mod startup_pages;
pub mod state;
pub mod status_port;
pub mod wait_ready;
