//! How a sidecar serves one captured connection, decided from the snapshot alone: its original
//! destination picks the service and port (outbound: the registry's VIP:port, then the port's
//! HTTP virtual hosts or TCP route; inbound: the pod's port and its declared protocol), and
//! with it the protocol (declared, or sniffed from the first bytes) and the route.

use crate::core::destination::Side;
use crate::routing::ports::TcpRoute;
use crate::routing::sidecar_tables::{Outbound, PortProtocol};
use crate::snapshot::Snapshot;
use std::net::SocketAddr;

/// How one connection is served.
#[derive(Debug)]
pub enum Plan<'a> {
    /// Headed for the listener itself (dialed directly, or conntrack lost the redirect):
    /// serving it would send it here again, in a loop (Istio's 15001/15006 blackholes).
    Loop,
    /// HTTP: the side's route tables route each request.
    Http,
    /// TCP on this route.
    Tcp(&'a TcpRoute),
    /// Undeclared: HTTP if the first bytes say so, else TCP on this route.
    Detect(&'a TcpRoute),
    /// Nothing serves it (REGISTRY_ONLY, or not a sidecar).
    Close,
}

/// The plan for a connection accepted on `listener` (its local address) by `side`, headed for
/// `dst`.
pub fn plan(snapshot: &Snapshot, side: Side, listener: SocketAddr, dst: SocketAddr) -> Plan<'_> {
    if listener == dst {
        return Plan::Loop;
    }
    let Some(sidecar) = snapshot.sidecar.as_ref() else {
        return Plan::Close;
    };
    match side {
        Side::Outbound | Side::Gateway => match sidecar.outbound(dst) {
            Outbound::Http => Plan::Http,
            Outbound::Tcp(r) => Plan::Tcp(r),
            Outbound::Detect(r) => Plan::Detect(r),
            Outbound::Refuse => Plan::Close,
        },
        Side::Inbound => match (sidecar.inbound(dst.port()), sidecar.inbound_tcp_route()) {
            (PortProtocol::Http, _) => Plan::Http,
            (PortProtocol::Tcp, Some(r)) => Plan::Tcp(r),
            (PortProtocol::Detect, Some(r)) => Plan::Detect(r),
            (_, None) => Plan::Close,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conn::ConnCtx;
    use crate::core::identity::{ProxyIdentity, SidecarSettings};
    use crate::routing::host_of;
    use crate::routing::RouteInput;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use warden_config::kinds::sidecar::OutboundMode;

    /// A mesh as a namespace dump gives it: an HTTP service, a TCP service, a service with an
    /// undeclared port, a mesh VirtualService splitting `reviews`, an external ServiceEntry,
    /// and this pod (10.1.0.5) serving 9080 (http) and 5432 (tcp).
    const MESH: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.10
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: 10.96.0.20
  selector: {app: db}
  ports: [{name: tcp-pg, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: default}
spec:
  clusterIP: 10.96.0.30
  selector: {app: legacy}
  ports: [{port: 7000}]
---
apiVersion: v1
kind: Service
metadata: {name: me, namespace: default}
spec:
  clusterIP: 10.96.0.40
  selector: {app: me}
  ports: [{name: http-web, port: 80, targetPort: 9080}, {name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: me-1, namespace: default, labels: {app: me}}
status: {podIP: 10.1.0.5}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /v2}}]
    name: to-v2
    route: [{destination: {host: reviews}}]
  - name: default
    route: [{destination: {host: reviews}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [api.example.com]
  addresses: [192.0.2.10]
  ports: [{number: 443, name: tls, protocol: TLS}, {number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.11}]
"#;

    fn snapshot(mode: OutboundMode) -> Snapshot {
        let loaded = warden_config::load_str("mesh.yaml", MESH).expect("mesh loads");
        let identity = ProxyIdentity {
            namespace: "default".into(),
            labels: [("app".to_string(), "me".to_string())].into(),
            pod_ips: vec!["10.1.0.5".parse().expect("ip")],
            sidecar: Some(SidecarSettings {
                outbound_mode: mode,
                ..SidecarSettings::default()
            }),
            ..ProxyIdentity::default()
        };
        Snapshot::build(loaded, &identity, None).expect("mesh compiles")
    }

    /// The plan in words: `loop`, `close`, `tcp <route>`, `detect <route>`, or `http` with the
    /// route a request for `host` + `path` gets.
    fn describe(s: &Snapshot, side: Side, dst: &str, host: &str, path: &str) -> String {
        let dst: SocketAddr = dst.parse().expect("dst");
        let listener: SocketAddr = match side {
            Side::Inbound => "10.1.0.5:15006",
            _ => "10.1.0.5:15001",
        }
        .parse()
        .expect("listener");
        match plan(s, side, listener, dst) {
            Plan::Loop => "loop".into(),
            Plan::Close => "close".into(),
            Plan::Tcp(r) => format!("tcp {}", r.name),
            Plan::Detect(r) => format!("detect {}", r.name),
            Plan::Http => {
                let conn = ConnCtx::new(
                    "10.1.0.9:40000".parse().expect("peer"),
                    listener,
                    dst.port(),
                    Arc::new(AtomicBool::new(false)),
                )
                .captured(side, dst);
                let Some(table) = s.http_routes(&conn) else {
                    return "http (no table)".into();
                };
                let route = table.find(&RouteInput {
                    method: &http::Method::GET,
                    host: host_of(host),
                    authority: host,
                    path,
                    query: None,
                    headers: &http::HeaderMap::new(),
                    port: dst.port(),
                });
                match route {
                    Some(r) => format!("http {}", r.name),
                    None => "http 404".into(),
                }
            }
        }
    }

    #[test]
    fn captured_connections_are_planned_by_their_original_destination() {
        use Side::{Inbound, Outbound};
        let allow = snapshot(OutboundMode::AllowAny);
        let strict = snapshot(OutboundMode::RegistryOnly);
        #[rustfmt::skip]
        let cases: &[(&Snapshot, Side, &str, &str, &str, &str)] = &[
            // outbound: service VIPs
            (&allow, Outbound, "10.96.0.10:9080", "reviews", "/v2/x", "http default/reviews/to-v2"),
            (&allow, Outbound, "10.96.0.10:9080", "reviews.default.svc.cluster.local", "/", "http default/reviews/default"),
            (&allow, Outbound, "10.96.0.10:9080", "reviews:9080", "/", "http default/reviews/default"),
            (&allow, Outbound, "10.96.0.20:5432", "", "", "tcp outbound|5432||db.default.svc.cluster.local"),
            (&allow, Outbound, "10.96.0.30:7000", "", "", "detect outbound|7000||legacy.default.svc.cluster.local"),
            (&allow, Outbound, "192.0.2.10:443", "", "", "tcp outbound|443||api.example.com"),
            (&allow, Outbound, "192.0.2.10:8080", "api.example.com:8080", "/", "http api.example.com:8080"),
            // outbound: unknown destinations (ALLOW_ANY relays them as TCP to the original destination)
            (&allow, Outbound, "198.51.100.1:9999", "", "", "tcp PassthroughCluster"),
            (&allow, Outbound, "10.96.0.10:9999", "", "", "tcp PassthroughCluster"),
            (&strict, Outbound, "198.51.100.1:9999", "", "", "close"),
            (&strict, Outbound, "10.96.0.20:5432", "", "", "tcp outbound|5432||db.default.svc.cluster.local"),
            (&strict, Outbound, "10.96.0.10:9080", "reviews", "/v2", "http default/reviews/to-v2"),
            // an HTTP port of the mesh: an unknown host goes where the mode says
            (&allow, Outbound, "10.96.0.10:9080", "unknown.example", "/", "http allow_any"),
            (&strict, Outbound, "10.96.0.10:9080", "unknown.example", "/", "http block_all"),
            // the listener itself
            (&allow, Outbound, "10.1.0.5:15001", "", "", "loop"),
            (&allow, Inbound, "10.1.0.5:15006", "", "", "loop"),
            // inbound: this pod's ports
            (&allow, Inbound, "10.1.0.5:9080", "me", "/", "http inbound"),
            (&allow, Inbound, "10.1.0.5:5432", "", "", "tcp inbound|tcp"),
            (&allow, Inbound, "10.1.0.5:8000", "", "", "detect inbound|tcp"),
            (&strict, Inbound, "10.1.0.5:9080", "anything", "/x", "http inbound"),
            (&strict, Inbound, "10.1.0.5:7777", "", "", "detect inbound|tcp"),
        ];
        let mut failures = Vec::new();
        for (i, (s, side, dst, host, path, want)) in cases.iter().enumerate() {
            let got = describe(s, *side, dst, host, path);
            if got != *want {
                failures.push(format!(
                    "case {i} ({side:?} {dst} {host}{path}): got `{got}`, want `{want}`"
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn a_gateway_snapshot_plans_nothing() {
        let loaded = warden_config::load_str("mesh.yaml", MESH).expect("mesh loads");
        let s = Snapshot::build(loaded, &ProxyIdentity::default(), None).expect("compiles");
        assert_eq!(
            describe(&s, Side::Outbound, "10.96.0.10:9080", "reviews", "/"),
            "close"
        );
    }
}
