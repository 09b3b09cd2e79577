#!/usr/bin/env bash
# What telemetry costs a gateway's throughput: warden (1 worker) proxying to an nginx backend,
#   (before)   BEFORE, a warden built before Istio's metrics, access logs and traces
#              (e.g. commit e2a4a05, `git worktree add` + `cargo build --release`)
#   (defaults) this warden at Istio's defaults: Istio's standard metrics, traces to an
#              OpenTelemetry collector (a Python OTLP/gRPC receiver on loopback) sampled at
#              1% (`defaultConfig.tracing.sampling`), no access log
#   (metrics)  this warden with Istio's metrics only (no tracing provider)
#   (log)      the defaults plus `accessLogFile` (Istio's default TEXT format, to a file)
#   (off)      this warden with Istio's metrics off (`defaultProviders.metrics: []`) and no
#              tracing: (defaults) / (off) is what the telemetry itself costs on one build, apart
#              from what the proxy path gained or lost since BEFORE (no goal of its own)
# Goals (paired ratios over (before), back-to-back pairs, bench/lib/common.sh): (defaults)
# >= 0.97, (log) >= 0.92; each case's proxy CPU per request too. Env: BEFORE (required), WARDEN
# (else a release build), PAIRS (12), PAIRED_SECS (2), DURATION (5), ROUNDS (3), CONNS (64), PIN (1),
# RECEIVER: `json` (default: the tests' receiver, a JSON line per span, about 40 us of Python per
# span on wrk's core, charged to the traced cases' req/s) or `count` (bench/lib/otlp_count.py:
# the spans counted only, about 9 us per span).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx wrk:wrk curl:curl python3:python3
[ -n "${BEFORE:-}" ] || { echo "BEFORE=<a warden binary built before the telemetry> is required" >&2; exit 2; }
python3 -c 'import grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2' 2>/dev/null \
  || { echo "the OTLP receiver needs grpcio and opentelemetry-proto (./test.sh installs them)" >&2; exit 2; }
if [ -n "${WARDEN:-}" ]; then WARDEN=$(realpath "$WARDEN"); else build_warden; fi
BEFORE=$(realpath "$BEFORE")

BACKEND=$(free_port); COLLECTOR=$(free_port)
backend_nginx "$BACKEND"
# spans_received — how many spans the receiver has.
if [ "${RECEIVER:-json}" = count ]; then
  bg_client_side python3 "$ROOT/bench/lib/otlp_count.py" "$COLLECTOR" "$WORK/spans.count"
  spans_received() { cat "$WORK/spans.count" 2>/dev/null || echo 0; }
else
  bg_client_side python3 "$ROOT/crates/warden-proxy/tests/fixtures/tracing/otlp_receiver.py" \
    "$COLLECTOR" "$WORK/spans.jsonl"
  spans_received() { wc -l <"$WORK/spans.jsonl" 2>/dev/null || echo 0; }
fi

collector_yaml() {
  cat <<YAML
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: otel-collector, namespace: observability}
spec:
  hosts: [otel-collector.observability.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 4317, name: grpc-otlp, protocol: GRPC}]
  endpoints: [{address: 127.0.0.1, ports: {grpc-otlp: $COLLECTOR}}]
YAML
}
# mesh_yaml TRACING LOG [METRICS] — Istio's defaults for tracing (sampling 1%) and, with LOG, a
# file; METRICS=off: no Istio metrics provider.
mesh_yaml() {
  echo "defaultConfig: {tracing: {sampling: 1}}"
  if [ "${3:-on}" = off ]; then echo "defaultProviders: {metrics: []}"; fi
  if [ "$1" = yes ]; then
    printf 'defaultProviders: {tracing: [otel-tracing]}\nextensionProviders:\n- name: otel-tracing\n  opentelemetry: {port: 4317, service: otel-collector.observability.svc.cluster.local}\n'
  fi
  if [ "$2" = yes ]; then echo "accessLogFile: $WORK/access.log"; fi
}

# start_gateway NAME BINARY [TRACING LOG [METRICS]] — sets PORT_<NAME>.
start_gateway() {
  local port admin mesh=(); port=$(free_port); admin=$(free_port)
  { gateway_to_backend_yaml "$port" "$BACKEND"; collector_yaml; } >"$WORK/$1.yaml"
  if [ $# -gt 2 ]; then mesh_yaml "$3" "$4" "${5:-on}" >"$WORK/$1-mesh.yaml"; mesh=(--mesh-config "$WORK/$1-mesh.yaml"); fi
  bg_server "$2" proxy -c "$WORK/$1.yaml" "${mesh[@]}" --concurrency 1 --listen-host 127.0.0.1 \
    --admin "127.0.0.1:$admin" --no-watch --label istio=ingressgateway --namespace istio-system
  printf -v "PORT_$1" '%s' "$port"
  printf -v "ADMIN_$1" '%s' "$admin"
  printf -v "PID_$1" '%s' "$LAST_PID"
  wait_http "http://127.0.0.1:$port/"
}
start_gateway before "$BEFORE"
start_gateway defaults "$WARDEN" yes no
start_gateway metrics "$WARDEN" no no
start_gateway log "$WARDEN" yes yes
start_gateway off "$WARDEN" no no off

# Sanity: the defaults gateway exports sampled spans; the log gateway writes lines.
for _ in $(seq 400); do curl -s -o /dev/null "http://127.0.0.1:$PORT_defaults/"; done
curl -s -o /dev/null "http://127.0.0.1:$PORT_log/"
sleep 6
spans=$(spans_received)
lines=$(wc -l <"$WORK/access.log" 2>/dev/null || echo 0)
echo "checks: $spans spans from 400 requests at 1% (expect a few), $lines access log lines" >&2
[ "$lines" -ge 1 ] || { echo "the access log is not written" >&2; exit 1; }

bench_header
: >"$RESULTS"
url() { local p="PORT_$1"; echo "http://127.0.0.1:${!p}/"; }
# The proxy's CPU per request (user + system), which moves less than req/s with what else
# the machine runs.
run_rounds \
  "CPU_PID=$PID_before wrk_run '(before)' $(url before)" \
  "CPU_PID=$PID_metrics wrk_run '(metrics)' $(url metrics)" \
  "CPU_PID=$PID_defaults wrk_run '(defaults) metrics + traces, 1 in 100' $(url defaults)" \
  "CPU_PID=$PID_log wrk_run '(log) defaults + access log' $(url log)" \
  "CPU_PID=$PID_off wrk_run '(off) no Istio metrics, no tracing' $(url off)"
summarize_rounds
echo
echo "proxy CPU per request (us, median of rounds):"
cpu_medians | while IFS=$'\t' read -r name us; do printf '  %-36s%8s\n' "$name" "$us"; done
PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-12}
echo
noise_floor "noise floor: before / itself" "$(url before)" "$PAIRS" "$PAIRED_SECS"
paired_ratio "Istio metrics only / before" "$(url before)" "$(url metrics)" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.97
paired_ratio "metrics + traces at 1% (Istio defaults) / before" "$(url before)" "$(url defaults)" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.97
paired_ratio "defaults + access log / before" "$(url before)" "$(url log)" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.92
paired_ratio "(off) / before: the proxy path since BEFORE" "$(url before)" "$(url off)" "$PAIRS" "$PAIRED_SECS" | paired_verdict -
paired_ratio "Istio defaults / (off): the telemetry on one build" "$(url off)" "$(url defaults)" "$PAIRS" "$PAIRED_SECS" | paired_verdict -
echo "spans received: $(spans_received); access log lines: $(wc -l <"$WORK/access.log")"
for g in defaults log; do
  a="ADMIN_$g"
  echo "$g: $(curl -s "http://127.0.0.1:${!a}/stats/prometheus" | grep -E '^warden_tracing_spans_(exported|dropped)' | tr '\n' ' ')"
done
