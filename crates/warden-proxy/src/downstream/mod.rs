//! Where connections come in: listener sockets, the worker threads' accept loops, the HTTP/1.1
//! fast path and its framing checks, TLS termination and SNI passthrough (`tls_accept`), HTTP/2 abuse limits, connection limits and timeouts, and the trusted client address.

pub(crate) mod buffer_pool;
pub(crate) mod captured;
pub mod client_addr;
pub mod conn_limits;
pub mod destination;
pub(crate) mod fast_h1;
pub(crate) mod framing_guard;
pub(crate) mod h2_abuse;
pub(crate) mod h2_goaway_code;
pub(crate) mod listen;
pub mod timeouts;
pub mod tls_accept;
pub(crate) mod worker;
