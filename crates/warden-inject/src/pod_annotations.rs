//! The sidecar settings a pod's annotations change, as Istio's injection template reads them:
//! the image (`sidecar.istio.io/proxyImage`), resources (`sidecar.istio.io/proxyCPU`,
//! `proxyMemory`, `proxyCPULimit`, `proxyMemoryLimit`), the readiness probe's timing
//! (`readiness.status.sidecar.istio.io/initialDelaySeconds`, `periodSeconds`,
//! `failureThreshold`) and the worker count (`concurrency` of `proxy.istio.io/config`, the
//! `--concurrency` Istio's template passes). The rest of `proxy.istio.io/config` is the running
//! proxy's (it reads the annotation from its downward-API files).

use crate::capture_args::Unsupported;
use std::collections::BTreeMap;

pub const PROXY_IMAGE: &str = "sidecar.istio.io/proxyImage";
pub const PROXY_CPU: &str = "sidecar.istio.io/proxyCPU";
pub const PROXY_MEMORY: &str = "sidecar.istio.io/proxyMemory";
pub const PROXY_CPU_LIMIT: &str = "sidecar.istio.io/proxyCPULimit";
pub const PROXY_MEMORY_LIMIT: &str = "sidecar.istio.io/proxyMemoryLimit";
pub const READINESS_INITIAL_DELAY: &str = "readiness.status.sidecar.istio.io/initialDelaySeconds";
pub const READINESS_PERIOD: &str = "readiness.status.sidecar.istio.io/periodSeconds";
pub const READINESS_FAILURE_THRESHOLD: &str = "readiness.status.sidecar.istio.io/failureThreshold";

/// The sidecar's resources (Istio's defaults: requests 100m / 128Mi, limits 2 / 1Gi).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    pub cpu: String,
    pub memory: String,
    pub cpu_limit: String,
    pub memory_limit: String,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: "100m".into(),
            memory: "128Mi".into(),
            cpu_limit: "2".into(),
            memory_limit: "1Gi".into(),
        }
    }
}

/// The sidecar's readiness probe timing (Istio's defaults: 1 s, every 2 s, 30 failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    pub initial_delay_seconds: i64,
    pub period_seconds: i64,
    pub failure_threshold: i64,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            initial_delay_seconds: 1,
            period_seconds: 2,
            failure_threshold: 30,
        }
    }
}

/// What the annotations set; `None`: the flag's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FromAnnotations {
    pub image: Option<String>,
    pub resources: Resources,
    pub readiness: Readiness,
    /// `Some(0)`: a worker per core (no `--concurrency`).
    pub concurrency: Option<u64>,
    /// `holdApplicationUntilProxyStarts`: the sidecar's postStart hook waits until it is ready.
    pub hold_application: bool,
}

/// Reads `annotations`; a value that is not what the annotation takes is refused.
pub fn read(annotations: &BTreeMap<String, String>) -> Result<FromAnnotations, Unsupported> {
    let get = |k: &str| {
        annotations
            .get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let mut out = FromAnnotations {
        image: get(PROXY_IMAGE),
        ..Default::default()
    };
    for (annotation, field) in [
        (PROXY_CPU, &mut out.resources.cpu),
        (PROXY_MEMORY, &mut out.resources.memory),
        (PROXY_CPU_LIMIT, &mut out.resources.cpu_limit),
        (PROXY_MEMORY_LIMIT, &mut out.resources.memory_limit),
    ] {
        if let Some(v) = get(annotation) {
            if !is_quantity(&v) {
                return Err(Unsupported {
                    annotation,
                    message: format!("{v:?} is not a Kubernetes quantity"),
                });
            }
            *field = v;
        }
    }
    for (annotation, field) in [
        (
            READINESS_INITIAL_DELAY,
            &mut out.readiness.initial_delay_seconds,
        ),
        (READINESS_PERIOD, &mut out.readiness.period_seconds),
        (
            READINESS_FAILURE_THRESHOLD,
            &mut out.readiness.failure_threshold,
        ),
    ] {
        if let Some(v) = get(annotation) {
            *field = v.parse::<u32>().map(i64::from).map_err(|_| Unsupported {
                annotation,
                message: format!("{v:?} is not a count"),
            })?;
        }
    }
    if let Some(text) = get(warden_config::proxy_config::ANNOTATION) {
        let config = warden_config::proxy_config::parse_annotation(&text).map_err(|message| {
            Unsupported {
                annotation: warden_config::proxy_config::ANNOTATION,
                message,
            }
        })?;
        out.concurrency = config.concurrency.map(|n| n as u64);
        out.hold_application = config.hold_application_until_proxy_starts == Some(true);
    }
    Ok(out)
}

/// A Kubernetes resource quantity: a decimal number with an optional SI or binary suffix
/// (`100m`, `0.5`, `128Mi`, `1G`, `2`).
fn is_quantity(text: &str) -> bool {
    let suffix_at = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(suffix_at);
    !number.is_empty()
        && number.parse::<f64>().is_ok()
        && matches!(
            suffix,
            "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_pairs(pairs: &[(&str, &str)]) -> Result<FromAnnotations, &'static str> {
        let annotations = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(&annotations).map_err(|e| e.annotation)
    }

    #[test]
    fn annotations_change_the_sidecar_as_istios_template() {
        assert_eq!(read_pairs(&[]), Ok(FromAnnotations::default()));
        let got = read_pairs(&[
            (PROXY_IMAGE, "registry.example.com/warden:1"),
            (PROXY_CPU, "250m"),
            (PROXY_MEMORY_LIMIT, "512Mi"),
            (READINESS_PERIOD, "5"),
            (READINESS_FAILURE_THRESHOLD, "3"),
            (
                "proxy.istio.io/config",
                "concurrency: 4\nterminationDrainDuration: 30s\nholdApplicationUntilProxyStarts: true",
            ),
        ])
        .unwrap();
        assert_eq!(got.image.as_deref(), Some("registry.example.com/warden:1"));
        assert_eq!(got.resources.cpu, "250m");
        assert_eq!(got.resources.memory, "128Mi");
        assert_eq!(got.resources.memory_limit, "512Mi");
        assert_eq!(
            got.readiness,
            Readiness {
                initial_delay_seconds: 1,
                period_seconds: 5,
                failure_threshold: 3
            }
        );
        assert_eq!(got.concurrency, Some(4));
        assert!(got.hold_application);
    }

    #[test]
    fn values_the_annotations_do_not_take_are_refused() {
        for (k, v) in [
            (PROXY_CPU, "a lot"),
            (PROXY_MEMORY, "128MB"),
            (READINESS_INITIAL_DELAY, "-1"),
            ("proxy.istio.io/config", "concurrency: many"),
        ] {
            assert_eq!(read_pairs(&[(k, v)]), Err(k), "{k}: {v}");
        }
    }

    #[test]
    fn quantities() {
        for (text, ok) in [
            ("100m", true),
            ("0.5", true),
            ("2", true),
            ("128Mi", true),
            ("1G", true),
            ("128MB", false),
            ("", false),
            ("m", false),
            ("1.2.3", false),
        ] {
            assert_eq!(is_quantity(text), ok, "{text}");
        }
    }
}
