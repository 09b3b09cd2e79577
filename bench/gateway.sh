#!/usr/bin/env bash
# Gateway bench: warden (1 worker) vs nginx (1 worker) vs HAProxy (1 thread), as a plain
# reverse proxy to the same backend and as a direct responder (status 333, body "test", as in
# seed 001 of docs/lab.md). One run, loopback only, wrk -t1 -c64, cases interleaved over ROUNDS
# rounds
# (best round shown; SUMMARY=median for the median, see bench/lib/common.sh), then back-to-back
# pairs (PAIRS) whose medians carry the goal's verdicts. Env: DURATION (s per case and round,
# default 5), CONNS, ROUNDS (3), PAIRS (16), PIN (1: the proxies on CPU 0, wrk and the backend on
# CPU 1); see bench/lib/common.sh.
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx haproxy:haproxy wrk:wrk curl:curl python3:python3
build_warden

BACKEND=$(free_port); W_PROXY=$(free_port); W_DIRECT=$(free_port); W_ADMIN=$(free_port)
N_PROXY=$(free_port); N_DIRECT=$(free_port); H_PROXY=$(free_port); H_DIRECT=$(free_port)
N_PROXY_H=$(free_port); H_PROXY_H=$(free_port)

# Backend: nginx, one worker, `return 200` with a small body. Shared by all three proxies.
mkdir -p "$WORK/nginx-backend" "$WORK/nginx-proxy"
cat >"$WORK/nginx-backend/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx-backend/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$BACKEND reuseport; location / { return 200 "hello from backend\n"; } } }
NGX
bg_client_side nginx -p "$WORK/nginx-backend" -c "$WORK/nginx-backend/nginx.conf"

cat >"$WORK/nginx-proxy/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx-proxy/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:$BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$N_PROXY;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$N_DIRECT; location / { default_type text/plain; return 333 "test"; } }
  # The same work as warden, which adds Envoy's forwarding headers to every upstream request.
  server { listen 127.0.0.1:$N_PROXY_H;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$remote_addr; proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Request-Id \$request_id; proxy_set_header X-Envoy-External-Address \$remote_addr; } } }
NGX
bg_server nginx -p "$WORK/nginx-proxy" -c "$WORK/nginx-proxy/nginx.conf"
N_MASTER=$LAST_PID

{ haproxy_head 4096; cat <<HAP; } >"$WORK/haproxy.cfg"
  http-reuse always
frontend proxy
  bind 127.0.0.1:$H_PROXY
  default_backend be
frontend proxy_headers
  bind 127.0.0.1:$H_PROXY_H
  option forwardfor
  unique-id-format %[uuid()]
  unique-id-header x-request-id
  http-request set-header x-forwarded-proto http
  http-request set-header x-envoy-external-address %[src]
  default_backend be
frontend direct
  bind 127.0.0.1:$H_DIRECT
  http-request return status 333 content-type text/plain string test
backend be
  server s1 127.0.0.1:$BACKEND
HAP
bg_server haproxy -f "$WORK/haproxy.cfg"
H_PID=$LAST_PID

cat >"$WORK/warden.yaml" <<YAML
apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: bench, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: $W_PROXY, name: http-proxy, protocol: HTTP}
    hosts: ["*"]
  - port: {number: $W_DIRECT, name: http-direct, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1beta1
kind: ServiceEntry
metadata: {name: backend, namespace: istio-system}
spec:
  hosts: [backend.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {http: $BACKEND}}]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: proxy, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [bench]
  http:
  - match: [{port: $W_PROXY}]
    route: [{destination: {host: backend.local, port: {number: 80}}}]
  - match: [{port: $W_DIRECT}]
    directResponse: {status: 333, body: {string: test}}
YAML
bg_server "$WARDEN" proxy -c "$WORK/warden.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$W_ADMIN"
WPID=$LAST_PID

for url in "http://127.0.0.1:$BACKEND/" "http://127.0.0.1:$N_PROXY/" "http://127.0.0.1:$H_PROXY/" \
           "http://127.0.0.1:$N_PROXY_H/" "http://127.0.0.1:$H_PROXY_H/" \
           "http://127.0.0.1:$W_PROXY/" "http://127.0.0.1:$W_DIRECT/"; do wait_http "$url"; done
sleep 0.5
IDLE_RSS=$(rss_kb "$WPID")
for url in "http://127.0.0.1:$W_PROXY/" "http://127.0.0.1:$W_DIRECT/"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url"); echo "warden $url -> $code" >&2
done

bench_header
# The server's CPU time per request is recorded too (CPU_PID, see wrk_run).
N_WORKER=$(pgrep -P "$N_MASTER" | head -1)
run_rounds \
  "wrk_run 'backend direct' http://127.0.0.1:$BACKEND/" \
  "CPU_PID=$N_WORKER wrk_run 'proxy: nginx' http://127.0.0.1:$N_PROXY/" \
  "CPU_PID=$H_PID wrk_run 'proxy: haproxy' http://127.0.0.1:$H_PROXY/" \
  "CPU_PID=$WPID wrk_run 'proxy: warden' http://127.0.0.1:$W_PROXY/" \
  "CPU_PID=$N_WORKER wrk_run 'direct 333: nginx' http://127.0.0.1:$N_DIRECT/" \
  "CPU_PID=$H_PID wrk_run 'direct 333: haproxy' http://127.0.0.1:$H_DIRECT/" \
  "CPU_PID=$WPID wrk_run 'direct 333: warden' http://127.0.0.1:$W_DIRECT/"
summarize_rounds
LOADED_RSS=$(rss_kb "$WPID")

cpu_medians >"$WORK/cpu"
python3 - "$RESULTS" "$IDLE_RSS" "$LOADED_RSS" "$WORK/cpu" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
res = {r[0]: (float(r[1] or 0), r[2], r[3]) for r in rows}
rounds = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[1] + ".rounds"))
print(f"{'case':<24}{'req/s':>12}{'p99':>12}{'non-2xx/3xx':>14}   req/s per round")
for name, (rps, p99, non) in res.items():
    print(f"{name:<24}{rps:>12.0f}{p99:>12}{non:>14}   {rounds[name]}")
def ratio(kind):
    w = res[f"{kind}: warden"][0]; best = max(res[f"{kind}: nginx"][0], res[f"{kind}: haproxy"][0])
    print(f"{kind:<10} warden / best(nginx, haproxy), best rounds = {w/best:.3f}")
# No verdict here: one round per case and contender is too few on this VM (see noise_floor);
# the goal's verdicts are the paired ones at the end.
print()
ratio("proxy"); ratio("direct 333")
idle = int(sys.argv[2]) / 1024
print(f"warden RSS idle {idle:.1f} MiB [{'PASS' if idle < 20 else 'FAIL'} < 20 MiB], after load {int(sys.argv[3])/1024:.1f} MiB")
# CPU time per request (median of rounds): what a request costs each server, less sensitive
# than req/s to other load on this machine (the goals above are stated in req/s).
cpu = dict((l.split("\t")[0], float(l.split("\t")[1])) for l in open(sys.argv[4]))
print("server CPU per request (user+system, median of rounds):")
for kind in ("proxy", "direct 333"):
    row = {who: cpu.get(f"{kind}: {who}") for who in ("nginx", "haproxy", "warden")}
    if all(row.values()):
        cheapest = min(row["nginx"], row["haproxy"])
        print(f"  {kind:<10} nginx {row['nginx']:.2f} us, haproxy {row['haproxy']:.2f} us, "
              f"warden {row['warden']:.2f} us: warden / cheapest = {row['warden'] / cheapest:.3f}")
PY
busy_medians

# The same comparisons from back-to-back pairs of short runs (paired_ratio, bench/lib/common.sh):
# the rounds above are seconds apart per case and this machine's slowdowns move whole rounds.
# "proxy-same-headers": nginx and HAProxy also add the four headers warden adds upstream
# (x-forwarded-for, x-forwarded-proto, x-request-id, x-envoy-external-address), as Envoy does;
# the plain rows add none, and the backend shares CPU 1 with wrk, so parsing them costs there.
PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-16}
echo
noise_floor "noise floor: proxy warden / warden" "http://127.0.0.1:$W_PROXY/" "$PAIRS" "$PAIRED_SECS"
for kind in "proxy $N_PROXY $H_PROXY $W_PROXY" "proxy-same-headers $N_PROXY_H $H_PROXY_H $W_PROXY" \
  "direct-333 $N_DIRECT $H_DIRECT $W_DIRECT"; do
  read -r name nginx haproxy warden <<<"$kind"
  for other in "nginx $nginx" "haproxy $haproxy"; do
    paired_ratio "$name warden / ${other% *}" "http://127.0.0.1:${other#* }/" \
      "http://127.0.0.1:$warden/" "$PAIRS" "$PAIRED_SECS" | paired_verdict 1.0
  done
done
