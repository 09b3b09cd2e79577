//! Istio's app probers. Istio's injector (and `warden inject`) rewrites an app container's
//! httpGet and tcpSocket probes into `GET /app-health/<container>/<livez|readyz|startupz>` on
//! the sidecar's status port, and hands the original probes to the sidecar in the
//! `ISTIO_KUBE_APP_PROBERS` environment variable: JSON, each such path to a probe in the
//! Kubernetes Probe shape (`httpGet` or `tcpSocket`, `timeoutSeconds`), ports as numbers. The
//! sidecar runs the original probe against the app (`runtime::status_port`), so the kubelet's
//! plain-HTTP probe works under STRICT mutual TLS and capture.

use std::collections::BTreeMap;
use std::time::Duration;

pub const ENV: &str = "ISTIO_KUBE_APP_PROBERS";

/// Where every rewritten probe's path starts.
pub const PATH_PREFIX: &str = "/app-health/";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// `GET path` on the app's `port`; `host` is the Host header when the probe set one.
    Http {
        path: String,
        port: u16,
        host: Option<String>,
        headers: Vec<(String, String)>,
    },
    /// A TCP connect to the app's `port`.
    Tcp { port: u16 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prober {
    pub probe: Probe,
    pub timeout: Duration,
}

/// The probers of one sidecar, by the path the kubelet asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppProbers(BTreeMap<String, Prober>);

/// Why the variable cannot be used; the sidecar refuses to start (as Istio's agent does).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ENV}: {0}")]
pub struct ProbersError(String);

/// The kubelet's default `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

impl AppProbers {
    /// The probers of the variable's JSON (empty text: none).
    pub fn parse(json: &str) -> Result<AppProbers, ProbersError> {
        if json.trim().is_empty() {
            return Ok(AppProbers::default());
        }
        let err = |m: String| ProbersError(m);
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| err(format!("not JSON: {e}")))?;
        let entries = value
            .as_object()
            .ok_or_else(|| err("not a JSON object of paths".into()))?;
        let mut out = BTreeMap::new();
        for (path, v) in entries {
            if !path.starts_with(PATH_PREFIX) {
                return Err(err(format!("{path}: paths start with {PATH_PREFIX}")));
            }
            let prober = prober(v).map_err(|m| err(format!("{path}: {m}")))?;
            out.insert(path.clone(), prober);
        }
        Ok(AppProbers(out))
    }

    pub fn get(&self, path: &str) -> Option<&Prober> {
        self.0.get(path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn port(v: &serde_json::Value) -> Result<u16, String> {
    let n = match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    };
    n.and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
        .ok_or_else(|| {
            format!("port {v} is not a port number (named ports are resolved by the injector)")
        })
}

fn prober(v: &serde_json::Value) -> Result<Prober, String> {
    let timeout = match v.get("timeoutSeconds") {
        None => DEFAULT_TIMEOUT,
        Some(t) => match t.as_u64() {
            Some(0) => DEFAULT_TIMEOUT,
            Some(s) => Duration::from_secs(s),
            None => return Err(format!("timeoutSeconds {t} is not a count")),
        },
    };
    let probe = if let Some(h) = v.get("httpGet") {
        match h.get("scheme").and_then(|s| s.as_str()) {
            None | Some("HTTP") | Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "httpGet scheme {other} is not supported (HTTP only)"
                ))
            }
        }
        let headers = h
            .get("httpHeaders")
            .and_then(|l| l.as_array())
            .map(|l| {
                l.iter()
                    .map(|e| {
                        let field = |k: &str| e.get(k).and_then(|v| v.as_str()).unwrap_or_default();
                        (field("name").to_string(), field("value").to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let path = h.get("path").and_then(|p| p.as_str()).unwrap_or("/");
        Probe::Http {
            path: if path.starts_with('/') {
                path.to_string()
            } else {
                format!("/{path}")
            },
            port: port(h.get("port").unwrap_or(&serde_json::Value::Null))?,
            host: h
                .get("host")
                .and_then(|v| v.as_str())
                .filter(|h| !h.is_empty())
                .map(String::from),
            headers,
        }
    } else if let Some(t) = v.get("tcpSocket") {
        Probe::Tcp {
            port: port(t.get("port").unwrap_or(&serde_json::Value::Null))?,
        }
    } else {
        return Err(
            "neither httpGet nor tcpSocket (grpc and exec probes are not rewritten)".into(),
        );
    };
    Ok(Prober { probe, timeout })
}

/// The status code of an HTTP/1.x response's status line (`HTTP/1.1 200 OK`), if `head`
/// starts with one.
pub fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.trim_end_matches('\r');
    (code.len() == 3)
        .then(|| code.parse().ok())
        .flatten()
        .filter(|c| (100..600).contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_as_istio_writes_it() {
        let json = r#"{"/app-health/reviews/livez":{"httpGet":{"path":"/health","port":9080,"scheme":"HTTP","httpHeaders":[{"name":"X-Probe","value":"1"}]},"timeoutSeconds":3},
                      "/app-health/reviews/readyz":{"tcpSocket":{"port":"9080"}}}"#;
        let p = AppProbers::parse(json).unwrap();
        assert_eq!(
            p.get("/app-health/reviews/livez"),
            Some(&Prober {
                probe: Probe::Http {
                    path: "/health".into(),
                    port: 9080,
                    host: None,
                    headers: vec![("X-Probe".into(), "1".into())],
                },
                timeout: Duration::from_secs(3),
            })
        );
        assert_eq!(
            p.get("/app-health/reviews/readyz"),
            Some(&Prober {
                probe: Probe::Tcp { port: 9080 },
                timeout: DEFAULT_TIMEOUT,
            })
        );
        assert_eq!(p.get("/app-health/other/livez"), None);
        assert!(AppProbers::parse("").unwrap().is_empty());
    }

    #[test]
    fn what_the_sidecar_refuses() {
        let cases = [
            ("[]", "not a JSON object"),
            ("{", "not JSON"),
            (
                r#"{"/health":{"tcpSocket":{"port":1}}}"#,
                "paths start with",
            ),
            (
                r#"{"/app-health/a/livez":{"httpGet":{"port":"http"}}}"#,
                "named ports",
            ),
            (
                r#"{"/app-health/a/livez":{"httpGet":{"port":80,"scheme":"HTTPS"}}}"#,
                "HTTPS",
            ),
            (r#"{"/app-health/a/livez":{"grpc":{"port":80}}}"#, "neither"),
            (
                r#"{"/app-health/a/livez":{"tcpSocket":{"port":80},"timeoutSeconds":"2"}}"#,
                "timeoutSeconds",
            ),
        ];
        for (json, want) in cases {
            let e = AppProbers::parse(json).unwrap_err().to_string();
            assert!(e.contains(want), "{json}: {e}");
        }
    }

    #[test]
    fn status_lines() {
        let cases: [(&[u8], Option<u16>); 6] = [
            (b"HTTP/1.1 200 OK\r\n", Some(200)),
            (b"HTTP/1.0 503 Service Unavailable\r\nx: y\r\n", Some(503)),
            (b"HTTP/1.1 204\r\n", Some(204)),
            (b"HTTP/2 200\r\n", None),
            (b"HTTP/1.1 2000 OK\r\n", None),
            (b"SSH-2.0-OpenSSH\r\n", None),
        ];
        for (head, want) in cases {
            assert_eq!(status_of(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }
}
