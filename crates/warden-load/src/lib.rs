//! Load generator and echo server (HTTP/1.1, h2c, TCP) with HdrHistogram reports.
//!
//! - [`echo`]: the echo backend (`warden echo`), embeddable in tests via [`echo::EchoServer`].
//! - [`load`]: the load generator (`warden load`), callable as [`load::run`].
//! - [`report`]: what a run measured, as text or fortio-compatible JSON.
//! - [`duration`]: Go-style durations for flags and the echo's `delay` parameter.

#![forbid(unsafe_code)]

pub mod cli;
pub mod duration;
pub mod echo;
pub mod load;
pub mod report;
