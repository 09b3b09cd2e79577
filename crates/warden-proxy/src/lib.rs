//! Listeners, HTTP/TCP proxying, the request pipeline, upstream pools and the admin endpoint.

pub mod cli;
