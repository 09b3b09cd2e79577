//! Table-driven tests of every validation error and warning: each names the file, the line, the
//! document, its kind/name and the field path.

use warden_config::{load_str, Problem};

const GW: &str = "\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  servers:
  - port: {number: 8080, protocol: HTTP, name: http}
    hosts: ['*']
  - port: {number: 9000, protocol: TCP, name: tcp}
    hosts: ['*']
";

const SE: &str = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: backend}
spec:
  hosts: [backend.local]
  ports: [{number: 8081, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
";

/// A VirtualService `vs` bound to the gateway, with `body` appended under `spec:`.
fn vs(body: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\n\
         spec:\n  hosts: ['*']\n  gateways: [istio-system/gw]\n{body}"
    )
}

fn se(body: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: se2}}\n\
         spec:\n{body}"
    )
}

fn dr(body: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: dr}}\n\
         spec:\n{body}"
    )
}

/// A second Gateway `gw2`: the base one with text replacements applied.
fn gw2(edits: &[(&str, &str)]) -> String {
    edits
        .iter()
        .fold(GW.replace("name: gw,", "name: gw2,"), |s, (a, b)| {
            s.replace(a, b)
        })
}

/// The base documents plus `extra`, as one file.
fn with_base(extra: &str) -> String {
    format!("{GW}---\n{SE}---\n{extra}")
}

const ROUTE_OK: &str = "  http:\n  - route: [{destination: {host: backend.local}}]\n";

#[derive(Clone, Copy, Debug)]
enum Severity {
    Error,
    Warning,
}
use Severity::{Error, Warning};

struct Case {
    name: &'static str,
    yaml: String,
    severity: Severity,
    /// `Kind/name`
    object: &'static str,
    field: &'static str,
    message: &'static str,
}

fn case(
    name: &'static str,
    yaml: String,
    severity: Severity,
    object: &'static str,
    field: &'static str,
    message: &'static str,
) -> Case {
    Case {
        name,
        yaml,
        severity,
        object,
        field,
        message,
    }
}

fn cases() -> Vec<Case> {
    let http = |r: &str| vs(&format!("  http:\n{r}"));
    vec![
        // Gateway
        case(
            "https needs a tls block",
            with_base(
                &gw2(&[("protocol: HTTP,", "protocol: HTTPS,"), ("8080", "8443")]),
            ),
            Error,
            "Gateway/gw2",
            "spec.servers[0].tls",
            "protocol HTTPS needs a tls block",
        ),
        case(
            "unknown gateway protocol",
            with_base(
                &gw2(&[("protocol: HTTP,", "protocol: MONGO,"), ("8080", "27017")]),
            ),
            Error,
            "Gateway/gw2",
            "spec.servers[0].port.protocol",
            "unknown protocol \"MONGO\"",
        ),
        case(
            "port with two protocols",
            with_base(
                &gw2(&[("protocol: HTTP,", "protocol: TCP,")]),
            ),
            Error,
            "Gateway/gw2",
            "spec.servers[0].port.protocol",
            "port 8080 is TCP here but HTTP in Gateway/gw",
        ),
        case(
            "server without hosts",
            with_base(
                &gw2(&[("8080", "8082")])
                    .replace(
                        "    hosts: ['*']\n  - port: {number: 9000",
                        "    hosts: []\n  - port: {number: 9000",
                    ),
            ),
            Error,
            "Gateway/gw2",
            "spec.servers[0].hosts",
            "at least one host",
        ),
        case(
            "bad server host",
            with_base(
                &gw2(&[("8080", "8082")])
                    .replace(
                        "    hosts: ['*']\n  - port: {number: 9000",
                        "    hosts: ['a*.com']\n  - port: {number: 9000",
                    ),
            ),
            Error,
            "Gateway/gw2",
            "spec.servers[0].hosts[0]",
            "wildcard is only allowed",
        ),
        case(
            "gateway without servers",
            with_base(
                "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: empty}\nspec: {}\n",
            ),
            Error,
            "Gateway/empty",
            "spec.servers",
            "at least one server",
        ),
        // VirtualService
        case(
            "no hosts",
            with_base(&vs(ROUTE_OK).replace("  hosts: ['*']\n", "")),
            Error,
            "VirtualService/vs",
            "spec.hosts",
            "at least one host",
        ),
        case(
            "host with namespace",
            with_base(&vs(ROUTE_OK).replace("hosts: ['*']", "hosts: ['ns/a.com']")),
            Error,
            "VirtualService/vs",
            "spec.hosts[0]",
            "take no namespace",
        ),
        case(
            "unknown gateway",
            with_base(&vs(ROUTE_OK).replace("istio-system/gw", "istio-system/nope")),
            Warning,
            "VirtualService/vs",
            "spec.gateways[0]",
            "Referenced gateway not found: \"istio-system/nope\" (istio-system/nope; defined: istio-system/gw)",
        ),
        case(
            "short gateway name resolves in the VirtualService's namespace",
            with_base(&vs(ROUTE_OK).replace("istio-system/gw", "gw")),
            Warning,
            "VirtualService/vs",
            "spec.gateways[0]",
            "Referenced gateway not found: \"gw\" (default/gw;",
        ),
        case(
            "two string match conditions",
            with_base(&http(
                "  - match: [{uri: {exact: /a, prefix: /}}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].uri",
            "exactly one of exact, prefix or regex (2 set)",
        ),
        case(
            "empty string match",
            with_base(&http(
                "  - match: [{method: {}}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].method",
            "(0 set)",
        ),
        case(
            "invalid regex",
            with_base(&http(
                "  - match: [{uri: {regex: '(/a'}}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].uri.regex",
            "invalid regex \"(/a\"",
        ),
        case(
            "bad header name in match",
            with_base(&http(
                "  - match: [{headers: {'bad header': {exact: x}}}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].headers[\"bad header\"]",
            "not a valid HTTP header name",
        ),
        case(
            "match port 0",
            with_base(&http(
                "  - match: [{port: 0}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].port",
            "1..=65535",
        ),
        case(
            "direct response with route",
            with_base(&http(
                "  - directResponse: {status: 200}\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0]",
            "takes one of `route`, `redirect` and `directResponse`",
        ),
        case(
            "neither route nor direct response",
            with_base(&http("  - name: empty\n    timeout: 1s\n")),
            Error,
            "VirtualService/vs",
            "spec.http[0]",
            "needs `route` (destinations), `redirect` or `directResponse`",
        ),
        case(
            "status out of range",
            with_base(&http("  - directResponse: {status: 99}\n")),
            Error,
            "VirtualService/vs",
            "spec.http[0].directResponse.status",
            "status 99 is not in 200..=599",
        ),
        case(
            "body with string and bytes",
            with_base(&http(
                "  - directResponse: {status: 200, body: {string: a, bytes: YQ==}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].directResponse.body",
            "exactly one of string or bytes",
        ),
        case(
            "body bytes not base64",
            with_base(&http(
                "  - directResponse: {status: 200, body: {bytes: '***'}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].directResponse.body.bytes",
            "not valid base64",
        ),
        case(
            "missing weight",
            with_base(&http(
                "  - route:\n    - {destination: {host: backend.local}, weight: 90}\n    - {destination: {host: backend.local}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].route[1].weight",
            "every destination needs a weight",
        ),
        case(
            "weights sum to zero",
            with_base(&http(
                "  - route:\n    - {destination: {host: backend.local}, weight: 0}\n    - {destination: {host: backend.local}, weight: 0}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].route",
            "weights sum to 0",
        ),
        case(
            "bad timeout",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    timeout: 5x\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].timeout",
            "unknown unit \"x\"",
        ),
        case(
            "bad per-try timeout",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    retries: {attempts: 2, perTryTimeout: soon}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].retries.perTryTimeout",
            "invalid duration",
        ),
        case(
            "unknown retry condition",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    retries: {attempts: 2, retryOn: '5xx,sometimes'}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].retries.retryOn",
            "unknown retry condition \"sometimes\"",
        ),
        case(
            "header value with newline",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    headers: {response: {set: {x-a: \"a\\nb\"}}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].headers.response.set.x-a",
            "must not contain CR, LF or NUL",
        ),
        case(
            "destination without service entry",
            with_base(&http("  - route: [{destination: {host: nowhere.local}}]\n")),
            Warning,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.host",
            "Referenced host not found: \"nowhere.local\"",
        ),
        case(
            "destination port not in service entry",
            with_base(&http(
                "  - route: [{destination: {host: backend.local, port: {number: 9}}}]\n",
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.port.number",
            "Referenced host:port not found: \"backend.local:9\"",
        ),
        case(
            "destination port needed with several ports",
            with_base(&format!(
                "{}---\n{}",
                se(
                    "  hosts: [multi.local]\n  ports: [{number: 1, name: a}, {number: 2, name: b}]\n  resolution: DNS\n"
                ),
                http("  - route: [{destination: {host: multi.local}}]\n")
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.port",
            "This VirtualService routes to a service \"multi.local\" that exposes multiple ports [1 2]. Specifying a port in the destination is required to disambiguate.",
        ),
        case(
            "subset",
            with_base(&http(
                "  - route: [{destination: {host: backend.local, subset: v1}}]\n",
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.subset",
            "Referenced host+subset in destinationrule not found: \"backend.local+v1\"",
        ),
        case(
            "redirect with port and derivePort",
            with_base(&http(
                "  - redirect: {uri: /new, port: 8443, derivePort: FROM_REQUEST_PORT}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].redirect.derivePort",
            "redirect takes port or derivePort, not both",
        ),
        case(
            "redirect and route together",
            with_base(&http(
                "  - redirect: {uri: /new}\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0]",
            "takes one of `route`, `redirect` and `directResponse`",
        ),
        case(
            "fault percentage over 100",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    fault: {abort: {httpStatus: 503, percentage: {value: 101}}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].fault.abort.percentage.value",
            "percentage 101 must be between 0 and 100",
        ),
        case(
            "mirror percentage over 100",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    mirror: {host: backend.local}\n    mirrorPercentage: {value: 101}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].mirrorPercentage.value",
            "percentage 101 must be between 0 and 100",
        ),
        case(
            "mirror and mirrors together",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    mirror: {host: backend.local}\n    mirrors: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].mirrors",
            "a route takes mirror or mirrors, not both",
        ),
        case(
            "mirror to an unknown subset",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    mirror: {host: backend.local, subset: v2}\n",
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].mirror.subset",
            "Referenced host+subset in destinationrule not found: \"backend.local+v2\"",
        ),
        case(
            "cors origin with two conditions",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    corsPolicy: {allowOrigins: [{exact: a, prefix: b}]}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].corsPolicy.allowOrigins[0]",
            "needs exactly one of exact, prefix or regex",
        ),
        case(
            "cors unknown unmatchedPreflights",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    corsPolicy: {allowOrigins: [{exact: a}], unmatchedPreflights: DROP}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].corsPolicy.unmatchedPreflights",
            "unknown unmatchedPreflights \"DROP\"",
        ),
        case(
            "fault delay needs a fixed delay",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    fault: {delay: {exponentialDelay: 1s}}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].fault.delay.exponentialDelay",
            "exponentialDelay is not supported",
        ),
        case(
            "subset not in the destination rule",
            with_base(&format!(
                "{}---\n{}",
                http("  - route: [{destination: {host: backend.local, subset: v3}}]\n"),
                dr("  host: backend.local\n  subsets: [{name: v1, labels: {version: v1}}]\n")
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.subset",
            "Referenced host+subset in destinationrule not found: \"backend.local+v3\" (DestinationRule/dr has subsets: v1)",
        ),
        case(
            "missing destination host",
            with_base(&http(
                "  - route: [{destination: {port: {number: 8081}}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].route[0].destination.host",
            "missing field `host`",
        ),
        case(
            "tcp route without destinations",
            with_base(&vs("  tcp:\n  - match: [{port: 9000}]\n")),
            Error,
            "VirtualService/vs",
            "spec.tcp[0].route",
            "at least one destination",
        ),
        case(
            "tcp route with several unweighted destinations",
            with_base(&vs(
                "  tcp:\n  - route: [{destination: {host: backend.local}}, {destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.tcp[0].route[0].weight",
            "every destination needs a weight",
        ),
        // ServiceEntry
        case(
            "resolution NONE with endpoints",
            with_base(&se(
                "  hosts: [x.local]\n  ports: [{number: 80}]\n  resolution: NONE\n  endpoints: [{address: 10.0.0.1}]\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.endpoints",
            "no endpoints with resolution NONE",
        ),
        case(
            "resolution unknown",
            with_base(&se("  hosts: [x.local]\n  ports: [{number: 80}]\n  resolution: MAGIC\n")),
            Error,
            "ServiceEntry/se2",
            "spec.resolution",
            "unknown resolution \"MAGIC\"",
        ),
        case(
            "static endpoint is a host name",
            with_base(&se(
                "  hosts: [x.local]\n  ports: [{number: 80}]\n  resolution: STATIC\n  endpoints: [{address: example.com}]\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.endpoints[0].address",
            "is not an IP address",
        ),
        case(
            "static without endpoints",
            with_base(&se(
                "  hosts: [x.local]\n  ports: [{number: 80}]\n  resolution: STATIC\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.endpoints",
            "needs endpoints",
        ),
        case(
            "no ports",
            with_base(&se("  hosts: [x.local]\n  resolution: DNS\n")),
            Error,
            "ServiceEntry/se2",
            "spec.ports",
            "at least one port",
        ),
        case(
            "dns wildcard without endpoints",
            with_base(&se(
                "  hosts: ['*.x.local']\n  ports: [{number: 80}]\n  resolution: DNS\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.hosts[0]",
            "cannot be resolved by DNS",
        ),
        case(
            "endpoint port name unknown",
            with_base(&se(
                "  hosts: [x.local]\n  ports: [{number: 80, name: http}]\n  resolution: STATIC\n  endpoints: [{address: 127.0.0.1, ports: {web: 8080}}]\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.endpoints[0].ports.web",
            "not the name of a port",
        ),
        case(
            "unknown service entry protocol",
            with_base(&se(
                "  hosts: [x.local]\n  ports: [{number: 443, protocol: HTTPX}]\n  resolution: DNS\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.ports[0].protocol",
            "unknown protocol \"HTTPX\"",
        ),
        case(
            "host defined twice",
            with_base(&se(
                "  hosts: [backend.local]\n  ports: [{number: 80}]\n  resolution: DNS\n",
            )),
            Error,
            "ServiceEntry/se2",
            "spec.hosts[0]",
            "already defined by ServiceEntry/backend",
        ),
        // DestinationRule
        case(
            "passthrough",
            with_base(&dr(
                "  host: backend.local\n  trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}\n",
            )),
            Error,
            "DestinationRule/dr",
            "spec.trafficPolicy.loadBalancer.simple",
            "PASSTHROUGH is not supported",
        ),
        case(
            "unknown lb",
            with_base(&dr(
                "  host: backend.local\n  trafficPolicy: {loadBalancer: {simple: FASTEST}}\n",
            )),
            Error,
            "DestinationRule/dr",
            "spec.trafficPolicy.loadBalancer.simple",
            "unknown load balancer \"FASTEST\"",
        ),
        case(
            "zero max connections",
            with_base(&dr(
                "  host: backend.local\n  trafficPolicy: {connectionPool: {tcp: {maxConnections: 0}}}\n",
            )),
            Error,
            "DestinationRule/dr",
            "spec.trafficPolicy.connectionPool.tcp.maxConnections",
            "greater than 0",
        ),
        case(
            "bad connect timeout",
            with_base(&dr(
                "  host: backend.local\n  trafficPolicy: {connectionPool: {tcp: {connectTimeout: '10'}}}\n",
            )),
            Error,
            "DestinationRule/dr",
            "spec.trafficPolicy.connectionPool.tcp.connectTimeout",
            "lacks a unit",
        ),
        case(
            "two rules for one host",
            with_base(&format!(
                "{}---\n{}",
                dr("  host: backend.local\n"),
                dr("  host: backend.local\n").replace("name: dr", "name: dr2")
            )),
            Error,
            "DestinationRule/dr2",
            "spec.host",
            "already has DestinationRule DestinationRule/dr",
        ),
        case(
            "negative number",
            with_base(&dr(
                "  host: backend.local\n  trafficPolicy: {connectionPool: {http: {http2MaxRequests: -1}}}\n",
            )),
            Error,
            "DestinationRule/dr",
            "spec.trafficPolicy.connectionPool.http.http2MaxRequests",
            "invalid value: integer `-1`",
        ),
        // Envelope
        case(
            "empty name",
            with_base(&vs(ROUTE_OK).replace("{name: vs}", "{name: ''}")),
            Error,
            "VirtualService/",
            "metadata.name",
            "metadata.name is required",
        ),
        case(
            "duplicate name",
            with_base(&format!("{}---\n{}", vs(ROUTE_OK), vs(ROUTE_OK))),
            Error,
            "VirtualService/vs",
            "metadata.name",
            "duplicate VirtualService default/vs: already defined at t.yaml:20 (document 3) in the same file",
        ),
        case(
            "unknown api version",
            with_base(&vs(ROUTE_OK).replace("networking.istio.io/v1", "networking.istio.io/v2")),
            Error,
            "VirtualService/vs",
            "apiVersion",
            "expected networking.istio.io/v1alpha3, networking.istio.io/v1beta1, networking.istio.io/v1",
        ),
        case(
            "missing kind",
            with_base("apiVersion: v1\nmetadata: {name: x}\n"),
            Error,
            "/x",
            "kind",
            "missing kind",
        ),
        // Warnings
        case(
            "unsupported route field",
            with_base(&http(
                "  - route: [{destination: {host: backend.local}}]\n    delegate: {name: other}\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].delegate",
            "not supported by warden yet; it would change what requests get",
        ),
        case(
            "unsupported match condition",
            with_base(&http(
                "  - match: [{statPrefix: x}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].statPrefix",
            "not supported by warden yet",
        ),
        case(
            "a field no one defines is an error with the closest name",
            with_base(&http(
                "  - match: [{sourceIp: 1.2.3.4}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Error,
            "VirtualService/vs",
            "spec.http[0].match[0].sourceIp",
            "unknown field `sourceIp` (fields here: authority, gateways,",
        ),
        case(
            "unsupported informational field",
            with_base(&format!("{}  exportTo: ['.']\n", vs(ROUTE_OK))),
            Warning,
            "VirtualService/vs",
            "spec.exportTo",
            "field not supported by warden; ignored",
        ),
        case(
            "unknown top-level field (the API server refuses it)",
            with_base(&format!("{}sepc: 1\n", vs(ROUTE_OK))),
            Error,
            "VirtualService/vs",
            "sepc",
            "unknown field `sepc`, did you mean `spec`?",
        ),
        case(
            "misspelt metadata field (the object would move to `default`)",
            with_base(&vs(ROUTE_OK).replace("{name: vs}", "{name: vs, namespce: web}")),
            Error,
            "VirtualService/vs",
            "metadata.namespce",
            "unknown field `namespce`, did you mean `namespace`?",
        ),
        case(
            "host not served by gateway",
            with_base(&format!(
                "{}---\n{}",
                gw2(&[("'*'", "a.com"), ("8080", "8082"), ("9000", "9002")]),
                vs(ROUTE_OK)
                    .replace("istio-system/gw", "istio-system/gw2")
                    .replace("'*'", "b.com")
            )),
            Warning,
            "VirtualService/vs",
            "spec.hosts",
            "one or more host [b.com] defined in VirtualService default/vs not found in Gateway istio-system/gw2. (server hosts: a.com, a.com; not bound to it)",
        ),
        case(
            "match port no server listens on",
            with_base(&http(
                "  - match: [{port: 1234}]\n    route: [{destination: {host: backend.local}}]\n",
            )),
            Warning,
            "VirtualService/vs",
            "spec.http[0].match[0].port",
            "listens on port 1234",
        ),
        case(
            "tcp routes on http-only gateway",
            with_base(&format!(
                "{}---\n{}",
                GW.replace("name: gw,", "name: web,")
                    .replace("8080", "8083")
                    .replace("protocol: TCP", "protocol: HTTP")
                    .replace("9000", "8084"),
                vs("  tcp:\n  - route: [{destination: {host: backend.local}}]\n")
                    .replace("istio-system/gw", "istio-system/web")
            )),
            Warning,
            "VirtualService/vs",
            "spec.tcp",
            "tcp routes are used only on TCP servers",
        ),
        case(
            "destination rule for unknown host",
            with_base(&dr("  host: other.local\n")),
            Warning,
            "DestinationRule/dr",
            "spec.host",
            "no ServiceEntry defines host \"other.local\"",
        ),
        case(
            "destination rule subset twice",
            with_base(&dr("  host: backend.local\n  subsets: [{name: v1}, {name: v1}]\n")),
            Error,
            "DestinationRule/dr",
            "spec.subsets[1].name",
            "subset \"v1\" is defined twice",
        ),
    ]
}

fn find<'a>(problems: &'a [Problem], c: &Case) -> Option<&'a Problem> {
    problems.iter().find(|p| {
        p.location.object == c.object
            && p.location.field == c.field
            && p.message.contains(c.message)
    })
}

#[test]
fn every_error_and_warning_names_file_line_document_object_and_field() {
    let mut failures = Vec::new();
    for c in cases() {
        let (problems, others): (Vec<Problem>, String) =
            match (load_str("t.yaml", &c.yaml), c.severity) {
                (Err(e), Error) => (e.errors.clone(), e.to_string()),
                (Ok(l), Warning) => (l.warnings.clone(), format!("{:#?}", l.warnings)),
                (Ok(l), Error) => {
                    failures.push(format!(
                        "{}: loaded without errors; warnings {:#?}",
                        c.name, l.warnings
                    ));
                    continue;
                }
                (Err(e), Warning) => {
                    failures.push(format!("{}: expected a warning, got errors:\n{e}", c.name));
                    continue;
                }
            };
        let Some(p) = find(&problems, &c) else {
            failures.push(format!(
                "{}: no {:?} at {} {}: {:?} in\n{others}",
                c.name, c.severity, c.object, c.field, c.message
            ));
            continue;
        };
        let text = p.to_string();
        let want_prefix = format!(
            "t.yaml:{}: document {} ({}), field {}: ",
            p.location.line.unwrap_or(0),
            p.location.document,
            c.object,
            c.field
        );
        if p.location.line.is_none() || p.location.document == 0 || !text.starts_with(&want_prefix)
        {
            failures.push(format!("{}: badly located: {text}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_base_config_is_valid_and_silent() {
    let loaded = load_str("t.yaml", &with_base(&vs(ROUTE_OK))).unwrap();
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    assert_eq!(loaded.set.gateways.len(), 1);
    assert_eq!(loaded.set.virtual_services.len(), 1);
}

#[test]
fn lines_point_at_the_offending_field() {
    let yaml = with_base(&http_lines());
    let err = load_str("t.yaml", &yaml).unwrap_err();
    let p = &err.errors[0];
    let line = yaml.lines().position(|l| l.contains("status: 99")).unwrap() + 1;
    assert_eq!(p.location.line, Some(line), "{err}");
}

fn http_lines() -> String {
    vs("  http:\n  - directResponse:\n      status: 99\n")
}

#[test]
fn all_errors_of_a_load_are_reported_at_once() {
    let yaml = with_base(&format!(
        "{}---\n{}---\n{}",
        vs(
            "  http:\n  - directResponse: {status: 99}\n  - route: [{destination: {host: nowhere}}]\n  - route: [{destination: {host: backend.local, port: {number: 0}}}]\n"
        ),
        se("  hosts: [x.local]\n  ports: [{number: 80}]\n  resolution: DNSX\n"),
        dr("  host: backend.local\n  trafficPolicy: {loadBalancer: {simple: FASTEST}}\n"),
    ));
    let err = load_str("t.yaml", &yaml).unwrap_err();
    let fields: Vec<&str> = err
        .errors
        .iter()
        .map(|p| p.location.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.http[0].directResponse.status",
            "spec.http[2].route[0].destination.port.number",
            "spec.resolution",
            "spec.trafficPolicy.loadBalancer.simple",
        ],
        "{err}"
    );
    assert!(err.to_string().starts_with("4 config error(s):"), "{err}");
    // The dangling host is a warning next to them, as Istio's analyzer reports it.
    assert!(
        err.warnings.iter().any(
            |w| w.location.field == "spec.http[1].route[0].destination.host"
                && w.message == "Referenced host not found: \"nowhere\""
        ),
        "{err}"
    );
}

#[test]
fn a_kind_that_failed_to_decode_does_not_cause_dangling_reference_errors() {
    // The ServiceEntry has a type error; the VirtualService's destination would otherwise be
    // reported as unresolved too.
    let yaml = format!(
        "{GW}---\n{}---\n{}",
        SE.replace("number: 8081", "number: eighty"),
        vs(ROUTE_OK)
    );
    let err = load_str("t.yaml", &yaml).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].location.field, "spec.ports[0].number");
    assert_eq!(err.errors[0].location.object, "ServiceEntry/backend");
    assert!(err.warnings.is_empty(), "{err}");

    // The same for a DestinationRule and the subsets it would define.
    let yaml = format!(
        "{}---\n{}",
        with_base(&vs(
            "  http:\n  - route: [{destination: {host: backend.local, subset: v1}}]\n"
        )),
        dr("  host: backend.local\n  subsets: [{name: v1, labels: {version: v1}}]\n  trafficPolicy: {connectionPool: {tcp: {maxConnections: many}}}\n")
    );
    let err = load_str("t.yaml", &yaml).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].location.object, "DestinationRule/dr");
    assert!(err.warnings.is_empty(), "{err}");
}

#[test]
fn yaml_syntax_errors_name_file_and_line() {
    let err = load_str("bad.yaml", "kind: Gateway\nspec:\n  servers: [1, 2\n").unwrap_err();
    let p = &err.errors[0];
    assert!(p.location.line.is_some(), "{err}");
    let text = p.to_string();
    assert!(
        text.starts_with(&format!(
            "bad.yaml:{}: invalid YAML",
            p.location.line.unwrap()
        )),
        "{text}"
    );
}

#[test]
fn a_document_that_is_not_a_mapping_is_an_error() {
    let err = load_str("t.yaml", "- a\n- b\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("t.yaml:1: document 1: a document must be a mapping"),
        "{err}"
    );
}

#[test]
fn grpc_servers_are_http2_and_weights_need_not_sum_to_100() {
    let yaml = format!(
        "{}---\n{SE}---\n{}",
        GW.replace("protocol: HTTP,", "protocol: GRPC,"),
        vs(
            "  http:\n  - route:\n    - {destination: {host: backend.local}, weight: 3}\n    - {destination: {host: backend.local}, weight: 1}\n"
        )
    );
    let loaded = load_str("t.yaml", &yaml).unwrap();
    let port = &loaded.set.gateways[0].spec.servers[0].port;
    assert_eq!(
        port.listener_protocol(),
        Some(warden_config::ListenerProtocol::Http2)
    );
    assert_eq!(
        loaded.set.virtual_services[0].spec.http[0].weights(),
        vec![3, 1]
    );
}

#[test]
fn later_stages_can_locate_fields_with_lines() {
    let yaml = with_base(&vs(ROUTE_OK));
    let set = load_str("t.yaml", &yaml).unwrap().set;
    let loc = set.locate(
        &set.virtual_services[0],
        "spec.http[0].route[0].destination.host",
    );
    let line = yaml
        .lines()
        .position(|l| l.contains("backend.local}}]"))
        .unwrap()
        + 1;
    assert_eq!(loc.line, Some(line));
    assert_eq!(
        loc.to_string(),
        format!("t.yaml:{line}: document 3 (VirtualService/vs), field spec.http[0].route[0].destination.host")
    );
}

#[test]
fn http_and_http2_servers_share_a_port() {
    let gw2 = GW
        .replace("name: gw,", "name: gw2,")
        .replace("protocol: HTTP,", "protocol: HTTP2,");
    let loaded = load_str("t.yaml", &format!("{}---\n{gw2}", with_base(&vs(ROUTE_OK))));
    assert!(loaded.is_ok(), "{}", loaded.unwrap_err());
}

#[test]
fn a_malformed_envelope_also_suppresses_dangling_reference_errors() {
    let yaml = format!(
        "{}---\n{SE}---\n{}",
        GW.replace(
            "metadata: {name: gw, namespace: istio-system}",
            "metadata: {name: [gw]}"
        ),
        vs(ROUTE_OK)
    );
    let err = load_str("t.yaml", &yaml).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].location.field, "metadata.name");
}

#[test]
fn warnings_are_reported_next_to_errors() {
    let yaml = with_base(&format!(
        "{}  exportTo: ['.']\n---\n{}",
        vs(ROUTE_OK),
        http_lines().replace("name: vs", "name: broken")
    ));
    let err = load_str("t.yaml", &yaml).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.warnings.len(), 1, "{err}");
    let text = err.to_string();
    assert!(text.contains("1 config error(s):"), "{text}");
    assert!(text.contains("warnings (1):"), "{text}");
    assert!(text.contains("spec.exportTo"), "{text}");
}
