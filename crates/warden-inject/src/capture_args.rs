//! The init container's `warden capture` arguments from a pod's annotations, as Istio's
//! injection template turns them into istio-iptables flags (`-b`, `-d`, `-i`, `-x`, `-o`).

use std::collections::BTreeMap;

pub const INCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeInboundPorts";
pub const EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
pub const INCLUDE_OUTBOUND_CIDRS: &str = "traffic.sidecar.istio.io/includeOutboundIPRanges";
pub const EXCLUDE_OUTBOUND_CIDRS: &str = "traffic.sidecar.istio.io/excludeOutboundIPRanges";
pub const EXCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";
pub const INCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeOutboundPorts";
pub const KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
pub const INTERCEPTION_MODE: &str = "sidecar.istio.io/interceptionMode";
pub const STATUS_PORT: &str = "status.sidecar.istio.io/port";

/// Inbound ports Istio's template always excludes: Prometheus (15090), health (15021) and
/// the agent's status port (15020, or the `status.sidecar.istio.io/port` annotation).
const ALWAYS_EXCLUDED_INBOUND: [&str; 2] = ["15090", "15021"];
const DEFAULT_STATUS_PORT: &str = "15020";

/// An annotation warden cannot honour: injecting would capture differently than asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {message}")]
pub struct Unsupported {
    pub annotation: &'static str,
    pub message: String,
}

/// The sidecar's status port (Istio's agent port, where the apps' rewritten probes go):
/// `status.sidecar.istio.io/port`, default 15020; `"0"` turns it off, as in Istio.
pub fn status_port(annotations: &BTreeMap<String, String>) -> Result<Option<u16>, Unsupported> {
    let Some(text) = annotations.get(STATUS_PORT).map(|v| v.trim()) else {
        return Ok(DEFAULT_STATUS_PORT.parse().ok());
    };
    match text.parse::<u16>() {
        Ok(0) => Ok(None),
        Ok(p) => Ok(Some(p)),
        Err(_) => Err(Unsupported {
            annotation: STATUS_PORT,
            message: format!("{text:?} is not a port"),
        }),
    }
}

/// `capture` and its flags for a pod with `annotations`, the proxy running as `proxy_uid`.
pub fn capture_args(
    annotations: &BTreeMap<String, String>,
    proxy_uid: u32,
) -> Result<Vec<String>, Unsupported> {
    let get = |k: &str| annotations.get(k).map(|v| v.trim().to_string());
    if let Some(mode) = get(INTERCEPTION_MODE) {
        if mode != "REDIRECT" {
            return Err(Unsupported {
                annotation: INTERCEPTION_MODE,
                message: format!("{mode} is not supported (REDIRECT only)"),
            });
        }
    }
    for annotation in [INCLUDE_OUTBOUND_PORTS, KUBEVIRT_INTERFACES] {
        if get(annotation).is_some_and(|v| !v.is_empty()) {
            return Err(Unsupported {
                annotation,
                message: "not supported by warden capture".into(),
            });
        }
    }
    let mut excluded: Vec<String> = ALWAYS_EXCLUDED_INBOUND.map(String::from).to_vec();
    if let Some(port) = status_port(annotations)? {
        excluded.push(port.to_string());
    }
    if let Some(more) = get(EXCLUDE_INBOUND_PORTS) {
        excluded.extend(
            more.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from),
        );
    }
    let flag = |name: &str, value: String| format!("--{name}={value}");
    Ok(vec![
        "capture".to_string(),
        flag("proxy-uid", proxy_uid.to_string()),
        flag(
            "inbound-ports",
            get(INCLUDE_INBOUND_PORTS).unwrap_or_else(|| "*".into()),
        ),
        flag("exclude-inbound-ports", excluded.join(",")),
        flag(
            "include-outbound-cidrs",
            get(INCLUDE_OUTBOUND_CIDRS).unwrap_or_else(|| "*".into()),
        ),
        flag(
            "exclude-outbound-cidrs",
            get(EXCLUDE_OUTBOUND_CIDRS).unwrap_or_default(),
        ),
        flag(
            "exclude-outbound-ports",
            get(EXCLUDE_OUTBOUND_PORTS).unwrap_or_default(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> Result<Vec<String>, Unsupported> {
        let annotations = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        capture_args(&annotations, 1337)
    }

    #[test]
    fn annotations_become_the_flags_istio_iptables_gets() {
        let defaults = [
            "capture",
            "--proxy-uid=1337",
            "--inbound-ports=*",
            "--exclude-inbound-ports=15090,15021,15020",
            "--include-outbound-cidrs=*",
            "--exclude-outbound-cidrs=",
            "--exclude-outbound-ports=",
        ];
        type Case<'a> = (&'a [(&'a str, &'a str)], [&'a str; 7]);
        let cases: &[Case] = &[
            (&[], defaults),
            (
                &[
                    (INCLUDE_INBOUND_PORTS, "9080"),
                    (EXCLUDE_OUTBOUND_PORTS, "6379,9000"),
                ],
                [
                    "capture",
                    "--proxy-uid=1337",
                    "--inbound-ports=9080",
                    "--exclude-inbound-ports=15090,15021,15020",
                    "--include-outbound-cidrs=*",
                    "--exclude-outbound-cidrs=",
                    "--exclude-outbound-ports=6379,9000",
                ],
            ),
            (
                &[
                    (EXCLUDE_INBOUND_PORTS, "8080, 8443"),
                    (STATUS_PORT, "15999"),
                    (INCLUDE_OUTBOUND_CIDRS, "10.96.0.0/12"),
                    (EXCLUDE_OUTBOUND_CIDRS, "10.96.0.1/32"),
                    (INTERCEPTION_MODE, "REDIRECT"),
                ],
                [
                    "capture",
                    "--proxy-uid=1337",
                    "--inbound-ports=*",
                    "--exclude-inbound-ports=15090,15021,15999,8080,8443",
                    "--include-outbound-cidrs=10.96.0.0/12",
                    "--exclude-outbound-cidrs=10.96.0.1/32",
                    "--exclude-outbound-ports=",
                ],
            ),
            // Nothing captured inbound, as Istio's "" means.
            (
                &[(INCLUDE_INBOUND_PORTS, "")],
                [
                    "capture",
                    "--proxy-uid=1337",
                    "--inbound-ports=",
                    "--exclude-inbound-ports=15090,15021,15020",
                    "--include-outbound-cidrs=*",
                    "--exclude-outbound-cidrs=",
                    "--exclude-outbound-ports=",
                ],
            ),
        ];
        for (annotations, want) in cases {
            assert_eq!(args(annotations).unwrap(), want.to_vec(), "{annotations:?}");
        }
    }

    #[test]
    fn the_status_port() {
        let cases = [
            (None, Ok(Some(15020))),
            (Some("15999"), Ok(Some(15999))),
            (Some("0"), Ok(None)),
            (Some("port"), Err(STATUS_PORT)),
        ];
        for (value, want) in cases {
            let annotations = value
                .map(|v| (STATUS_PORT.to_string(), v.to_string()))
                .into_iter()
                .collect();
            assert_eq!(
                status_port(&annotations).map_err(|e| e.annotation),
                want,
                "{value:?}"
            );
        }
    }

    #[test]
    fn what_warden_cannot_capture_is_refused() {
        for (k, v) in [
            (INTERCEPTION_MODE, "TPROXY"),
            (INCLUDE_OUTBOUND_PORTS, "443"),
            (KUBEVIRT_INTERFACES, "net1"),
        ] {
            assert_eq!(args(&[(k, v)]).map_err(|e| e.annotation), Err(k));
        }
    }
}
