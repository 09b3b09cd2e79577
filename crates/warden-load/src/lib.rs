//! Load generator and echo server (HTTP/1.1, h2c, TCP) with HdrHistogram reports.

pub mod cli;
