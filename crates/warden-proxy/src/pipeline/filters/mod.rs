//! The policy engines of the pipeline's stages 3-5. Authz and the local limiter are concrete
//! types (the TCP path needs them too, and they report into metrics and the access log);
//! the global limiter is an [`crate::pipeline::AsyncRequestFilter`].

pub mod authz;
pub mod global_rate_limit;
pub mod local_rate_limit;
pub mod route_sites;
