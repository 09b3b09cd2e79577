#!/usr/bin/env bash
# External authorization bench: a gateway (one worker, directResponse 200) with an
# AuthorizationPolicy CUSTOM matching every request, its provider the minimal Rust allow-all
# ext_authz server (crates/warden-extauthz/examples/allow_all.rs) on loopback, against the same
# gateway without the policy:
#   - open loop at RATE rps (default 1000, warden load -c 16, latency from intended send time):
#     OPEN_PAIRS back-to-back pairs, order swapped every pair; the median of the per-pair
#     differences is the added p50 / p99. Goal: <= 0.3 ms added p99 at 1,000 rps.
#   - paired closed-loop throughput ratio (bench/lib/common.sh), CUSTOM / none.
# Env: RATE (1000), OPEN_PAIRS (8), OPEN_SECS (5), PAIRS (16), PAIRED_SECS (2), PIN (1);
# WARDEN=path and ALLOW_ALL=path skip the release builds.
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs wrk:wrk curl:curl python3:python3
if [ -n "${WARDEN:-}" ]; then WARDEN=$(realpath "$WARDEN"); else build_warden; fi
if [ -z "${ALLOW_ALL:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p warden-extauthz --example allow_all)
  ALLOW_ALL="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/allow_all"
fi
RATE=${RATE:-1000}; OPEN_PAIRS=${OPEN_PAIRS:-8}; OPEN_SECS=${OPEN_SECS:-5}

PROVIDER=$(free_port)
bg_client_side "$ALLOW_ALL" "127.0.0.1:$PROVIDER"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PROVIDER") 2>/dev/null && break; sleep 0.1; done

cat >"$WORK/mesh.yaml" <<YAML
extensionProviders:
- name: allow-all
  envoyExtAuthzGrpc:
    service: allow-all.bench.svc.cluster.local
    port: 9000
    timeout: 1s
YAML

# gateway_yaml PORT [CUSTOM] — directResponse 200 on PORT, with the CUSTOM policy if asked.
gateway_yaml() {
  cat <<YAML
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers: [{port: {number: $1, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: site}
spec:
  hosts: ["*"]
  gateways: [gw]
  http: [{name: all, directResponse: {status: 200, body: {string: ok}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: allow-all, namespace: bench}
spec:
  hosts: [allow-all.bench.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 9000, name: grpc, protocol: GRPC}]
  endpoints: [{address: 127.0.0.1, ports: {grpc: $PROVIDER}}]
YAML
  if [ -n "${2:-}" ]; then
    cat <<YAML
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext-authz, namespace: istio-system}
spec:
  action: CUSTOM
  provider: {name: allow-all}
  rules: [{to: [{operation: {paths: ["/*"]}}]}]
YAML
  fi
}

# start_gateway NAME [CUSTOM] — sets PORT_<NAME>, PID_<NAME>.
start_gateway() {
  local port admin; port=$(free_port); admin=$(free_port)
  gateway_yaml "$port" "${2:-}" >"$WORK/$1.yaml"
  bg_server "$WARDEN" proxy -c "$WORK/$1.yaml" --mesh-config "$WORK/mesh.yaml" --concurrency 1 \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$admin" --no-watch
  printf -v "PORT_$1" '%s' "$port"
  printf -v "PID_$1" '%s' "$LAST_PID"
  printf -v "ADMIN_$1" '%s' "$admin"
  wait_http "http://127.0.0.1:$port/"
}
start_gateway none
start_gateway custom yes
NONE="http://127.0.0.1:$PORT_none/"; CUSTOM="http://127.0.0.1:$PORT_custom/"
# wait_http's requests were checked too: count the checks one request adds.
ok_checks() { curl -s "http://127.0.0.1:$ADMIN_custom/stats/prometheus" | awk '/^warden_ext_authz_checks_total\{outcome="ok"\}/ {print $2}'; }
before=$(ok_checks)
curl -s -o /dev/null "$CUSTOM"
after=$(ok_checks)
checks=$(( ${after:-0} - ${before:-0} ))
echo "checks: CUSTOM gateway asked the provider $checks time(s) for 1 request" >&2
[ "$checks" = 1 ] || { echo "the CUSTOM gateway does not call its provider" >&2; exit 1; }

bench_header
echo "open loop at $RATE rps, $OPEN_PAIRS pairs of ${OPEN_SECS}s (warden load -c 16):"
open_run() { # NAME URL — prints "NAME QPS P50 P99 CODES"
  "${CLIENT_CPU[@]}" "$WARDEN" load "$2" -c 16 --qps "$RATE" -t "${OPEN_SECS}s" --quiet \
    --json "$WORK/$1.json" >/dev/null 2>&1 || true
  python3 - "$WORK/$1.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = {x["Percentile"]: x["Value"] * 1000 for x in r["DurationHistogram"]["Percentiles"]}
codes = ",".join(f"{k}:{v}" for k, v in sorted(r["RetCodes"].items()))
print(f"{sys.argv[2]}\t{r['ActualQPS']:.0f}\t{p.get(50, 0):.3f}\t{p.get(99, 0):.3f}\t{codes}")
PY
}
: >"$WORK/open"
for i in $(seq "$OPEN_PAIRS"); do
  if ((i % 2)); then order=(none custom); else order=(custom none); fi
  for c in "${order[@]}"; do
    url=$NONE; [ "$c" = custom ] && url=$CUSTOM
    open_run "$c" "$url" | sed "s/^/$i\t/" >>"$WORK/open"
  done
done
python3 - "$WORK/open" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
pairs = {}
for i, name, qps, p50, p99, codes in rows:
    pairs.setdefault(i, {})[name] = (float(qps), float(p50), float(p99), codes)
d50 = [p["custom"][1] - p["none"][1] for p in pairs.values() if len(p) == 2]
d99 = [p["custom"][2] - p["none"][2] for p in pairs.values() if len(p) == 2]
for name in ("none", "custom"):
    v = [p[name] for p in pairs.values() if name in p]
    print(f"  {name:<8} qps {statistics.median(x[0] for x in v):>7.0f}  p50 {statistics.median(x[1] for x in v):.3f} ms"
          f"  p99 {statistics.median(x[2] for x in v):.3f} ms  codes {v[-1][3]}")
a50, a99 = statistics.median(d50), statistics.median(d99)
print(f"added by CUSTOM (median of pair differences): p50 {a50:+.3f} ms, p99 {a99:+.3f} ms  "
      f"[{'PASS' if a99 <= 0.3 else 'FAIL'}, goal <= 0.3 ms added p99]")
PY

PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-16}
echo
noise_floor "noise floor: none / itself" "$NONE" "$PAIRS" "$PAIRED_SECS"
paired_ratio "CUSTOM (allow-all provider) / none" "$NONE" "$CUSTOM" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.5
