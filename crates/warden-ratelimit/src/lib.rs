//! Envoy RLS v3 rate limit service: config (envoyproxy/ratelimit format), descriptor matching,
//! stores (memory, Redis), gRPC/HTTP servers, and the client the proxy uses.

pub mod cli;
