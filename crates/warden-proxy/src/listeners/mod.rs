//! Where connections come in: listener sockets, the worker threads' accept loops, the HTTP/1.1
//! fast path and its framing checks, TLS termination and SNI passthrough (`tls_accept`), a
//! sidecar's captured connections (`captured`), TCP routes (`tcp`), HTTP/2 abuse limits and
//! connection limits.

pub(crate) mod accepted;
pub(crate) mod buffer_pool;
pub(crate) mod capture_plan;
pub(crate) mod captured;
// getrlimit/setrlimit: no safe wrapper in std.
#[allow(unsafe_code)]
pub mod conn_limits;
pub(crate) mod fast_h1;
pub(crate) mod framing_guard;
pub(crate) mod h2_abuse;
pub(crate) mod h2_goaway_code;
pub(crate) mod listen;
pub(crate) mod tcp;
pub mod tls_accept;
pub(crate) mod tls_terminate;
pub(crate) mod worker;
