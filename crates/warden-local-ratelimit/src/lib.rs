//! Local (per-proxy) rate limiting: token buckets, bounded per-key state, policy compilation. Pure, no I/O.
