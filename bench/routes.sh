#!/usr/bin/env bash
# Routing at scale: one Gateway with 1,000 VirtualServices of 10 routes each (prefix
# and regex mixed, one host each) against the same Gateway with a single route. Both answer
# with a direct response, so the difference is what routing costs. The request goes to the
# 1,000th VirtualService's host (a hash lookup among 1,000 hosts) and matches its last route
# (nine prefix/regex conditions checked first): the worst case of the table. One run, back-to-
# back pairs (bench/lib/common.sh: paired_ratio), a noise floor of the single-route proxy
# against itself first. Goal: 1,000 VS >= 0.95 x single route.
# The same in the Kubernetes Gateway API's form: 1,000 HTTPRoutes of 10 rules each (one
# hostname each, the request matching the 1,000th route's last rule) against one HTTPRoute,
# both forwarding to one `warden echo` (a Gateway API route has no direct response). Goal:
# 1,000 HTTPRoutes >= 0.95 x one HTTPRoute. Env: PAIRS (16), SECS (2), CONNS (64), PIN (1),
# GATEWAY_API (1; 0 runs the VirtualService pair only).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs wrk:wrk curl:curl python3:python3
build_warden
PAIRS=${PAIRS:-16}
SECS=${SECS:-2}
ONE=$(free_port); MANY=$(free_port); ADMIN_ONE=$(free_port); ADMIN_MANY=$(free_port)

gateway() { # PORT
  cat <<YAML
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: bench, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: $1, name: http, protocol: HTTP}
    hosts: ["*"]
YAML
}

{ gateway "$ONE"; cat <<YAML
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: one, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [bench]
  http:
  - directResponse: {status: 200, body: {string: ok}}
YAML
} >"$WORK/one.yaml"

{ gateway "$MANY"; python3 - <<'PY'
for i in range(1000):
    print(f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: svc-{i:04}, namespace: istio-system}}
spec:
  hosts: [svc-{i:04}.example.com]
  gateways: [bench]
  http:""")
    for j in range(9):
        if j % 2:
            cond = f"{{uri: {{regex: '/items/[0-9]+/r{j}(/.*)?'}}}}"
        else:
            cond = f"{{uri: {{prefix: /api/v{j}/}}}}"
        print(f"  - name: r{j}\n    match: [{cond}]\n    directResponse: {{status: 200, body: {{string: r{j}}}}}")
    print("  - name: last\n    match: [{uri: {prefix: /}}]\n    directResponse: {status: 200, body: {string: ok}}")
PY
} >"$WORK/many.yaml"

bg_server "$WARDEN" proxy -c "$WORK/one.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN_ONE"
bg_server "$WARDEN" proxy -c "$WORK/many.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN_MANY"
HOST=svc-0999.example.com
PAIRED_WRK_ARGS=(-H "Host: $HOST")
for port in "$ONE" "$MANY"; do wait_http "http://127.0.0.1:$port/"; done
body=$(curl -s -H "Host: $HOST" "http://127.0.0.1:$MANY/items/42/x")
[ "$body" = ok ] || { echo "the 1,000-VS proxy answered '$body', not its last route" >&2; exit 1; }
"$WARDEN" check -c "$WORK/many.yaml" | head -2

echo "# routes.sh $(date -u +%FT%TZ): $(nproc) cores, background busy $(background_busy), pinned=$PIN; wrk -t1 -c$CONNS, $PAIRS pairs x ${SECS}s"
noise_floor "noise floor: single route / single route" "http://127.0.0.1:$ONE/items/42/x" "$PAIRS" "$SECS"
paired_ratio "1,000 VirtualServices x 10 routes (last route) / single route" \
  "http://127.0.0.1:$ONE/items/42/x" "http://127.0.0.1:$MANY/items/42/x" "$PAIRS" "$SECS" | paired_verdict 0.95

[ "${GATEWAY_API:-1}" = 1 ] || exit 0
ECHO=$(free_port); API_ONE=$(free_port); API_MANY=$(free_port)
bg_client_side "$WARDEN" echo --http "127.0.0.1:$ECHO"
api_gateway() { # PORT
  cat <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: bench, namespace: bench}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: $1, protocol: HTTP}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: bench}
spec:
  ports: [{name: http, port: 8080, targetPort: $ECHO}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: bench, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
ports: [{name: http, port: $ECHO}]
YAML
}
{ api_gateway "$API_ONE"; cat <<YAML
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: one, namespace: bench}
spec:
  parentRefs: [{name: bench}]
  rules:
  - backendRefs: [{name: echo, port: 8080}]
YAML
} >"$WORK/api-one.yaml"
{ api_gateway "$API_MANY"; python3 - <<'PY'
for i in range(1000):
    print(f"""---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: svc-{i:04}, namespace: bench}}
spec:
  parentRefs: [{{name: bench}}]
  hostnames: [svc-{i:04}.example.com]
  rules:""")
    for j in range(9):
        if j % 2:
            path = f"{{type: RegularExpression, value: '/items/[0-9]+/r{j}(/.*)?'}}"
        else:
            path = f"{{type: PathPrefix, value: /api/v{j}}}"
        print(f"  - matches: [{{path: {path}}}]\n    backendRefs: [{{name: echo, port: 8080}}]")
    print("  - backendRefs: [{name: echo, port: 8080}]")
PY
} >"$WORK/api-many.yaml"
bg_server "$WARDEN" proxy -c "$WORK/api-one.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$(free_port)"
bg_server "$WARDEN" proxy -c "$WORK/api-many.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$(free_port)"
for port in "$API_ONE" "$API_MANY"; do wait_http "http://127.0.0.1:$port/"; done
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $HOST" "http://127.0.0.1:$API_MANY/items/42/x")
[ "$code" = 200 ] || { echo "the 1,000-HTTPRoute proxy answered $code" >&2; exit 1; }
"$WARDEN" check -c "$WORK/api-many.yaml" | head -2
noise_floor "noise floor: one HTTPRoute / one HTTPRoute" "http://127.0.0.1:$API_ONE/items/42/x" "$PAIRS" "$SECS"
paired_ratio "1,000 HTTPRoutes x 10 rules (last rule) / one HTTPRoute" \
  "http://127.0.0.1:$API_ONE/items/42/x" "http://127.0.0.1:$API_MANY/items/42/x" "$PAIRS" "$SECS" | paired_verdict 0.95
