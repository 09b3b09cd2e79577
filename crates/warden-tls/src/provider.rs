//! The crypto provider of every TLS session warden terminates or originates: aws-lc-rs.
//!
//! Why not ring (which warden-ratelimit uses for its Redis client): the gateway's cost is the
//! handshake, and aws-lc-rs signs RSA 2048 several times faster than ring and P-256 somewhat
//! faster (its assembly is OpenSSL's/BoringSSL's), which is what lets one worker keep up with
//! nginx's OpenSSL on new-connection rates. It also has a FIPS build (aws-lc-fips-sys) should a
//! user need one. Its build needs only a C compiler on x86_64/aarch64 Linux (no cmake, no Go,
//! pregenerated bindings), as ring's does. The provider is always passed explicitly: the
//! workspace links both, so rustls' process default would be ambiguous.

use rustls::crypto::CryptoProvider;
use std::sync::{Arc, OnceLock};

/// The provider with every cipher suite and key exchange aws-lc-rs offers rustls.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}
