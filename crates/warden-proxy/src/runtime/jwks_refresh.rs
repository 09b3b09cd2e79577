//! jwksUri key sets (RequestAuthentication): fetched off the request path through warden's
//! upstream TLS client (`upstream::tls_origination`; HTTPS trusts the system's roots and the
//! mesh CA of `--mesh-credentials`), from the endpoints of the mesh's ServiceEntry for the
//! URI's host and port when there is one (as Istio points Envoy's fetch at that cluster), else
//! from the host itself; refreshed every interval (istiod's default: 20 minutes),
//! retried sooner after a failure, and the last good set kept when a refresh fails, as istiod's
//! JWKS resolver does. Until a first set arrives, tokens of that issuer are refused with
//! Envoy's "Jwks remote fetch is failed"; requests without a token pass. A reload's new
//! snapshot gets the last good set at once.

use crate::pipeline::Shared;
use crate::upstream::body::ProxyBody;
use crate::upstream::tls_origination::UpstreamTls;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use warden_jwt::Jwks;
use warden_tls::rustls::pki_types::ServerName;

/// How often the refresher looks at the snapshot for new jwksUris and due refreshes.
const TICK: Duration = Duration::from_millis(200);
/// Body size a JWKS may have.
const MAX_BODY: usize = 1 << 20;

/// When a fetch is next due: the refresh interval after a success; after failures, a backoff
/// from one second doubling up to the interval.
pub fn next_attempt(ok: bool, failures: u32, interval: Duration) -> Duration {
    if ok {
        return interval;
    }
    let backoff = Duration::from_secs(1u64 << failures.min(32));
    backoff.min(interval)
}

#[derive(Default)]
struct UriState {
    last_good: Option<Arc<Jwks>>,
    due: Option<Instant>,
    failures: u32,
}

/// Keep every jwksUri of the current snapshot fetched; runs until the proxy stops.
pub async fn run(shared: Arc<Shared>, interval: Duration) {
    let tls = tls_client(&shared);
    let plain = plain_client();
    let mut state: HashMap<String, UriState> = HashMap::new();
    loop {
        let snapshot = shared.snapshot.load_full();
        let remotes: Vec<_> = snapshot
            .filters
            .jwt_authn
            .iter()
            .flat_map(|f| f.remote_keys())
            .cloned()
            .collect();
        let now = Instant::now();
        for remote in &remotes {
            let st = state.entry(remote.uri.clone()).or_default();
            if remote.keys.load().is_none() {
                if let Some(good) = &st.last_good {
                    remote.keys.store(Some(good.clone()));
                }
            }
            if st.due.is_some_and(|d| d > now) {
                continue;
            }
            let via = mesh_endpoint(&snapshot.config, &remote.uri);
            let fetched = fetch(&tls, &plain, &remote.uri, via, remote.timeout).await;
            match fetched {
                Ok(jwks) => {
                    let jwks = Arc::new(jwks);
                    st.last_good = Some(jwks.clone());
                    st.failures = 0;
                    // Every rule of the snapshot with this uri.
                    for r in remotes.iter().filter(|r| r.uri == remote.uri) {
                        r.keys.store(Some(jwks.clone()));
                    }
                    tracing::debug!(uri = %remote.uri, keys = jwks.keys.len(), "jwks fetched");
                }
                Err(why) => {
                    st.failures = st.failures.saturating_add(1);
                    tracing::warn!(uri = %remote.uri, %why, kept = st.last_good.is_some(),
                        "jwks fetch failed; the last good key set (if any) stays in use");
                }
            }
            st.due = Some(Instant::now() + next_attempt(st.failures == 0, st.failures, interval));
        }
        state.retain(|uri, _| remotes.iter().any(|r| &r.uri == uri));
        tokio::time::sleep(TICK).await;
    }
}

type PlainClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    ProxyBody,
>;

fn plain_client() -> PlainClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new())
}

/// The system's roots and, with `--mesh-credentials`, the mesh CA.
fn tls_client(shared: &Shared) -> Option<UpstreamTls> {
    let spec = warden_tls::client::ClientSpec {
        ca: shared.identity.mesh.as_ref().map(|m| m.dir.join("ca.crt")),
        system_roots_too: true,
        ..Default::default()
    };
    match warden_tls::client::client_config(&spec, SystemTime::now()) {
        Ok(config) => Some(UpstreamTls::new(config, None, false)),
        Err(errors) => {
            for e in errors {
                tracing::warn!(field = e.field, error = %e.message, "jwks TLS client");
            }
            None
        }
    }
}

/// The endpoint of a STATIC ServiceEntry that defines the URI's host and port (its first
/// endpoint, on the port's name or target port), if the mesh has one.
fn mesh_endpoint(set: &warden_config::ConfigSet, uri: &str) -> Option<SocketAddr> {
    let parsed: http::Uri = uri.parse().ok()?;
    let host = parsed.host()?;
    let port = parsed
        .port_u16()
        .unwrap_or(if parsed.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    set.service_entries.iter().find_map(|se| {
        if !se.spec.hosts.iter().any(|h| h == host) {
            return None;
        }
        let sp = se.spec.ports.iter().find(|p| p.number == port)?;
        let ep = se.spec.endpoints.first()?;
        let ip: std::net::IpAddr = ep.address.parse().ok()?;
        let target = sp
            .name
            .as_ref()
            .and_then(|n| ep.ports.get(n).copied())
            .or(sp.target_port)
            .unwrap_or(port);
        Some(SocketAddr::new(ip, target))
    })
}

async fn fetch(
    tls: &Option<UpstreamTls>,
    plain: &PlainClient,
    uri: &str,
    via: Option<SocketAddr>,
    timeout: Duration,
) -> Result<Jwks, String> {
    let parsed: http::Uri = uri.parse().map_err(|e| format!("bad uri: {e}"))?;
    let host = parsed.host().unwrap_or_default().to_owned();
    // To a mesh endpoint: connect there, with the URI's host as SNI and Host.
    let target = match via {
        Some(addr) => {
            let pq = parsed.path_and_query().map_or("/", |p| p.as_str());
            format!("{}://{addr}{pq}", parsed.scheme_str().unwrap_or("http"))
                .parse::<http::Uri>()
                .map_err(|e| e.to_string())?
        }
        None => parsed.clone(),
    };
    let request = http::Request::get(target)
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::HOST,
            parsed.authority().map_or(host.as_str(), |a| a.as_str()),
        )
        .body(ProxyBody::from(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let sni_client = match (tls, via) {
        (Some(t), Some(_)) => ServerName::try_from(host.clone())
            .ok()
            .map(|name| UpstreamTls::new(t.config.clone(), Some(name), false)),
        _ => None,
    };
    let call = async {
        let response = match parsed.scheme_str() {
            Some("https") => match (&sni_client, tls) {
                (Some(c), _) => c.client(timeout).request(request).await,
                (None, Some(t)) => t.client(timeout).request(request).await,
                (None, None) => return Err("no TLS client".to_owned()),
            },
            _ => plain.request(request).await,
        }
        .map_err(|e| format!("request failed: {e}"))?;
        if response.status() != http::StatusCode::OK {
            return Err(format!("status {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        let text = std::str::from_utf8(&body).map_err(|_| "body is not UTF-8".to_owned())?;
        Jwks::parse(text).map_err(|s| s.message().to_owned())
    };
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| format!("timed out after {timeout:?}"))?
}

#[cfg(test)]
mod tests {
    use super::next_attempt;
    use std::time::Duration;

    #[test]
    fn refreshes_wait_the_interval_and_failures_back_off_up_to_it() {
        let i = Duration::from_secs(1200);
        let cases = [
            (true, 0, i),
            (false, 1, Duration::from_secs(2)),
            (false, 3, Duration::from_secs(8)),
            (false, 30, i),
        ];
        for (ok, failures, want) in cases {
            assert_eq!(next_attempt(ok, failures, i), want, "{ok} {failures}");
        }
        assert_eq!(
            next_attempt(false, 5, Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
