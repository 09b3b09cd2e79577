//! The policy engines of the pipeline's stages 3-5, adapted to [`crate::pipeline::RequestFilter`].

pub mod authz;
pub mod global_rate_limit;
pub mod local_rate_limit;
