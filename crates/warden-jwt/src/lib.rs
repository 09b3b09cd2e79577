//! JWT authentication as Envoy's `jwt_authn` filter does it for Istio's RequestAuthentication:
//! tokens found in headers, parameters and cookies (`extract`), parsed with Envoy's statuses
//! (`token`, `status`), checked against JSON Web Key Sets (`jwks`) for time, audience
//! (`audience`) and signature, remembered once verified (`cache`), and the decision for a
//! request (`authn`) compiled from the policies that select a workload (`compile`). Pure: the
//! proxy fetches jwksUri keys and applies the decision.

#![forbid(unsafe_code)]

pub mod audience;
pub mod authn;
pub mod cache;
pub mod clock;
pub mod compile;
pub mod extract;
pub mod identity;
pub mod jwks;
pub mod stats;
pub mod status;
pub mod token;

pub use authn::{Authenticator, Edits, Keys, Outcome, RemoteKeys};
pub use clock::{Clock, ManualClock, SystemClock};
pub use identity::Verified;
pub use jwks::Jwks;
pub use status::Status;
pub use token::Jwt;
