//! TLS for warden: certificates and keys read from PEM files (errors name the file and the
//! problem), rustls server configs for Gateway servers (SIMPLE / MUTUAL, versions, cipher suites,
//! ALPN), the SNI of a ClientHello read without consuming it (server choice and PASSTHROUGH),
//! client configs for upstreams (SIMPLE / MUTUAL / ISTIO_MUTUAL), peer identities (subject,
//! SANs, SPIFFE principal), the `x-forwarded-client-cert` element of a client certificate
//! and the local mesh CA behind `warden ca`.
//!
//! One crypto provider for all of it, chosen in [`provider`].

#![forbid(unsafe_code)]

pub mod ca_cli;
pub mod client;
pub mod client_hello;
pub mod file_stamps;
pub mod handshake_error;
pub mod local_ca;
pub mod peer_identity;
pub mod pem_files;
pub mod protocol;
pub mod provider;
pub mod server;
pub mod sni;
pub mod xfcc;

pub use peer_identity::PeerIdentity;
pub use pem_files::CertError;
pub use rustls;
pub use tokio_rustls;
