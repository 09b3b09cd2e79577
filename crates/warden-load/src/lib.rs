//! Load generator and echo server (HTTP/1.1, h2c, TCP) with HdrHistogram reports.
//!
//! - [`echo`]: the echo backend (`warden echo`), embeddable in tests via [`echo::EchoServer`].
//! - [`load`]: the load generator (`warden load`), callable as [`load::run`].
//! - [`report`]: what a run measured, as text or fortio-compatible JSON.

pub mod cli;
pub mod echo;
pub mod load;
pub mod report;
