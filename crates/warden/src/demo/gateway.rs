//! Scenario: the gateway of seed 001 (docs/lab.md; directResponse 333 "test") plus a routed
//! upstream.

use super::traffic::{count, describe, send};
use super::{Outcome, Stage};
use std::net::{IpAddr, Ipv4Addr};

pub const CONFIG: &str = r#"apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 0, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1beta1
kind: ServiceEntry
metadata: {name: echo, namespace: istio-system}
spec:
  hosts: [echo.demo.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {http: {ECHO}}}]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  gateways: [istio-system/ingressgateway]
  hosts: ["*"]
  http:
  - name: direct
    match: [{uri: {prefix: /direct}}]
    directResponse: {status: 333, body: {string: test}}
  - name: echo
    match: [{uri: {prefix: /}}]
    route: [{destination: {host: echo.demo.local, port: {number: 80}}}]"#;

pub async fn run(stage: &Stage) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
    stage.echo.reset_counts();

    let codes = send(&format!("{}/direct", stage.gateway_url), local, 200, 8, &[]).await?;
    out.check(
        count(&codes, 333) == 200 && stage.echo.total() == 0,
        format!(
            "200 x GET /direct -> {} ; upstream saw {} (direct response never leaves the gateway)",
            describe(&codes),
            stage.echo.total()
        ),
    );

    let codes = send(&format!("{}/hello", stage.gateway_url), local, 500, 8, &[]).await?;
    out.check(
        count(&codes, 200) == 500 && stage.echo.total() == 500,
        format!(
            "500 x GET /hello  -> {} ; upstream saw {}",
            describe(&codes),
            stage.echo.total()
        ),
    );
    Ok(out)
}
