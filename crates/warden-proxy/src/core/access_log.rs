//! JSON-lines access log. Workers format a line and hand it to a writer thread, so a slow disk
//! never blocks a request.

use crate::core::error::ProxyError;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::SystemTime;

/// Where access log lines (JSON, one per request) go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    Stdout,
    File(PathBuf),
}

impl AccessLogTarget {
    /// `-` is stdout, anything else a file path (appended to).
    pub fn parse(text: &str) -> Self {
        if text == "-" {
            AccessLogTarget::Stdout
        } else {
            AccessLogTarget::File(PathBuf::from(text))
        }
    }
}

#[derive(Debug, serde::Serialize)]
pub struct Entry<'a> {
    pub time: String,
    pub client_ip: String,
    pub peer: String,
    pub protocol: &'a str,
    pub method: &'a str,
    pub authority: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub duration_ms: f64,
    pub upstream: Option<&'a str>,
    pub route: Option<&'a str>,
    pub response_flags: &'a str,
    pub request_id: Option<&'a str>,
    /// Envoy's `%RESPONSE_CODE_DETAILS%` for a policy denial, e.g.
    /// `rbac_access_denied_matched_policy[none]` or `local_rate_limited`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_code_details: Option<String>,
    /// The RBAC rule (`none` for an ALLOW miss) or rate limit rule that stopped the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<&'a str>,
    /// A dry-run policy or shadow-mode limit that would have stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_policy: Option<&'a str>,
    /// Envoy's `%DYNAMIC_METADATA%`: what filters (Lua) wrote, by namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_metadata: Option<&'a crate::core::dynamic_metadata::DynamicMetadata>,
}

pub struct AccessLog {
    tx: mpsc::Sender<String>,
}

impl AccessLog {
    pub fn open(target: &AccessLogTarget) -> Result<Self, ProxyError> {
        let mut out: Box<dyn Write + Send> = match target {
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| ProxyError::AccessLog {
                        path: path.clone(),
                        source,
                    })?,
            ),
        };
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("warden-access-log".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut buf = Vec::with_capacity(64 * 1024);
                while let Ok(line) = rx.recv() {
                    buf.extend_from_slice(line.as_bytes());
                    // Batch whatever else is queued, then write once.
                    while let Ok(line) = rx.try_recv() {
                        buf.extend_from_slice(line.as_bytes());
                    }
                    if out.write_all(&buf).and_then(|_| out.flush()).is_err() {
                        tracing::warn!("access log write failed");
                    }
                    buf.clear();
                }
            })
            .map_err(|source| ProxyError::Thread {
                what: "access log writer",
                source,
            })?;
        Ok(AccessLog { tx })
    }

    pub fn log(&self, entry: &Entry<'_>) {
        if let Ok(mut line) = serde_json::to_string(entry) {
            line.push('\n');
            let _ = self.tx.send(line);
        }
    }
}

/// RFC 3339 UTC time with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
