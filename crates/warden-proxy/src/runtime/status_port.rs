//! Istio's status ports, which the kubelet probes: 15021 (`/healthz/ready`, the sidecar's and
//! the gateway's readiness) and the agent's 15020 (`/healthz/ready`, the apps' rewritten
//! probes under `/app-health/`, and `/stats/prometheus`). Both serve the same paths here. Ready
//! means what Istio's readiness means: the config is loaded and every listener is bound (both
//! true once the proxy has started, before this serves anything), and the proxy is not
//! draining (503 from SIGTERM on, so endpoints are taken out while requests finish).

use crate::core::metrics_exposition::Exposition;
use crate::runtime::app_probers::{self, AppProbers, Probe, Prober};
use crate::runtime::state::Control;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// `ProxyOptions::status`: where the status ports listen and what they probe.
#[derive(Debug, Clone)]
pub struct StatusSettings {
    /// Every address served (Istio: 15021 and 15020).
    pub addrs: Vec<SocketAddr>,
    pub probers: AppProbers,
    /// Where app probes connect: the pod's address (as Istio's agent does, so apps bound to
    /// it alone are reached), else loopback.
    pub app_ip: IpAddr,
}

/// What a path asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Ready,
    AppHealth(&'a str),
    Stats,
    NotFound,
}

fn route(path: &str) -> Route<'_> {
    match path {
        "/healthz/ready" => Route::Ready,
        "/stats/prometheus" => Route::Stats,
        p if p.starts_with(app_probers::PATH_PREFIX) => Route::AppHealth(p),
        _ => Route::NotFound,
    }
}

/// The source address of app probes to a non-loopback address: 127.0.0.6, which the capture
/// rules let through uncaptured (as the inbound passthrough's connections), so a probe does not
/// come back in through the inbound listener and its policies.
const PROBE_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6));

fn source_for(target: IpAddr) -> Option<IpAddr> {
    (target.is_ipv4() && !target.is_loopback()).then_some(PROBE_SOURCE)
}

/// What the app's answer makes of the kubelet's probe: Istio's agent passes an HTTP probe's
/// status code on, answers 200 for a TCP connect, and 500 when the app could not be reached.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Answered(u16),
    Connected,
    Unreachable,
}

fn status_of(outcome: &Outcome) -> StatusCode {
    match outcome {
        Outcome::Answered(code) => {
            StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
        Outcome::Connected => StatusCode::OK,
        Outcome::Unreachable => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Run `prober` against the app at `ip`.
async fn run(prober: &Prober, ip: IpAddr) -> Outcome {
    let port = match &prober.probe {
        Probe::Http { port, .. } | Probe::Tcp { port } => *port,
    };
    let attempt = async {
        let mut stream = crate::upstream::connect::connect(
            &ip.to_string(),
            port,
            source_for(ip),
            prober.timeout,
        )
        .await
        .ok()?;
        let Probe::Http {
            path,
            host,
            headers,
            ..
        } = &prober.probe
        else {
            return Some(Outcome::Connected);
        };
        let authority = host
            .clone()
            .unwrap_or_else(|| SocketAddr::new(ip, port).to_string());
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: kube-probe/1\r\nConnection: close\r\n"
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        // The status line is all that is read.
        let mut buf = vec![0u8; 1024];
        let mut len = 0;
        while len < buf.len() && !buf[..len].contains(&b'\n') {
            let n = stream.read(&mut buf[len..]).await.ok()?;
            if n == 0 {
                break;
            }
            len += n;
        }
        app_probers::status_of(&buf[..len]).map(Outcome::Answered)
    };
    tokio::time::timeout(prober.timeout, attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(Outcome::Unreachable)
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Control>,
    settings: Arc<StatusSettings>,
    draining: watch::Receiver<Option<Instant>>,
) -> Response<Full<Bytes>> {
    match route(req.uri().path()) {
        Route::Ready if draining.borrow().is_some() => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
        }
        Route::Ready => text(StatusCode::OK, ""),
        Route::Stats => {
            let exposition = Exposition::negotiate(
                req.headers().get(header::ACCEPT).map(HeaderValue::as_bytes),
            );
            let mut resp = text(
                StatusCode::OK,
                shared.metrics.encode_as(exposition, |r| {
                    shared.snapshot.load().filters.register_metrics(r)
                }),
            );
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(exposition.content_type()),
            );
            resp
        }
        Route::AppHealth(path) => match settings.probers.get(path) {
            Some(prober) => {
                let outcome = run(prober, settings.app_ip).await;
                if outcome == Outcome::Unreachable {
                    tracing::debug!(path, "app probe: the app did not answer");
                }
                text(status_of(&outcome), "")
            }
            None => text(
                StatusCode::NOT_FOUND,
                format!("no app prober for {path} in {}\n", app_probers::ENV),
            ),
        },
        Route::NotFound => text(
            StatusCode::NOT_FOUND,
            "status: /healthz/ready /app-health/<container>/<livez|readyz|startupz> /stats/prometheus\n",
        ),
    }
}

/// Serve `listeners` until dropped (the accept loops are aborted with it).
pub async fn serve(
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Control>,
    settings: Arc<StatusSettings>,
    draining: watch::Receiver<Option<Instant>>,
) {
    let mut accepting = tokio::task::JoinSet::new();
    for l in listeners {
        let listener = match tokio::net::TcpListener::from_std(l) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot register a status listener");
                continue;
            }
        };
        let (shared, settings, draining) = (shared.clone(), settings.clone(), draining.clone());
        accepting.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, most likely: the admin thread's other work goes on.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let (shared, settings, draining) =
                    (shared.clone(), settings.clone(), draining.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (shared, settings, draining) =
                            (shared.clone(), settings.clone(), draining.clone());
                        async move {
                            Ok::<_, Infallible>(handle(req, shared, settings, draining).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    while accepting.join_next().await.is_some() {}
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let cases = [
            ("/healthz/ready", Route::Ready),
            ("/stats/prometheus", Route::Stats),
            (
                "/app-health/reviews/livez",
                Route::AppHealth("/app-health/reviews/livez"),
            ),
            ("/healthz/readyz", Route::NotFound),
            ("/", Route::NotFound),
        ];
        for (path, want) in cases {
            assert_eq!(route(path), want, "{path}");
        }
    }

    #[test]
    fn outcomes_as_the_kubelet_sees_them() {
        let cases = [
            (Outcome::Answered(200), StatusCode::OK),
            (Outcome::Answered(302), StatusCode::FOUND),
            (Outcome::Answered(503), StatusCode::SERVICE_UNAVAILABLE),
            (Outcome::Connected, StatusCode::OK),
            (Outcome::Unreachable, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (outcome, want) in cases {
            assert_eq!(status_of(&outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn probes_to_the_pod_address_leave_from_127_0_0_6() {
        let cases = [
            ("10.244.1.7", Some(PROBE_SOURCE)),
            ("127.0.0.1", None),
            ("fd00::7", None),
        ];
        for (ip, want) in cases {
            assert_eq!(source_for(ip.parse().unwrap()), want, "{ip}");
        }
    }
}
