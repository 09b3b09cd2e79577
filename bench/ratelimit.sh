#!/usr/bin/env bash
# warden ratelimit throughput/latency on loopback, memory vs Redis backend, next to
# redis-benchmark INCR (the physical limit of a Redis-backed limiter). Bounded in time:
# about 6 phases x SECONDS (default 5) + builds.
#
#   bench/ratelimit.sh [SECONDS]
#
# Load: crates/warden-ratelimit/examples/rls_bench.rs (tonic client, N streams over C HTTP/2
# connections, hdrhistogram percentiles). Descriptor: the seed's remote_address + PATH over
# 1000 client IPs, limit high enough that every decision counts in the store.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "bench: installing redis-server redis-tools" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq redis-server redis-tools >/dev/null
fi
command -v curl >/dev/null || { echo "bench: curl is required" >&2; exit 1; }

echo "bench: building (release)..." >&2
cargo build --release -q -p warden
cargo build --release -q -p warden-ratelimit --example rls_bench
TARGET="${CARGO_TARGET_DIR:-target}"
WARDEN="$TARGET/release/warden"
CLIENT="$TARGET/release/examples/rls_bench"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

TMP="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

cat >"$TMP/config.yaml" <<'YAML'
domain: ratelimit
descriptors:
  - key: remote_address
    descriptors:
      - key: PATH
        rate_limit:
          unit: minute
          requests_per_unit: 100000000
YAML

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --loglevel warning &
PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

RESULTS="$TMP/results.tsv"
: >"$RESULTS"

run_backend() { # backend
  local backend="$1" grpc http debug pid
  grpc="$(free_port)"; http="$(free_port)"; debug="$(free_port)"
  local extra=()
  if [[ "$backend" == redis ]]; then extra=(--redis-url "127.0.0.1:$REDIS_PORT"); fi
  env -i PATH="$PATH" RUST_LOG=warn REDIS_TIMEOUT=1s \
    "$WARDEN" ratelimit --config "$TMP/config.yaml" --backend "$backend" "${extra[@]}" \
    --grpc "127.0.0.1:$grpc" --http "127.0.0.1:$http" --debug "127.0.0.1:$debug" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 200); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/healthcheck")" == 200 ]] && break
    sleep 0.05
  done
  "$CLIENT" --addr "127.0.0.1:$grpc" --seconds 1 --streams 16 --label warmup >/dev/null
  "$CLIENT" --addr "127.0.0.1:$grpc" --seconds "$SECS" --connections 4 --streams 64 \
    --label "$backend	64 streams, closed loop" >>"$RESULTS"
  "$CLIENT" --addr "127.0.0.1:$grpc" --seconds "$SECS" --connections 8 --streams 1000 \
    --label "$backend	1000 streams, closed loop" >>"$RESULTS"
  "$CLIENT" --addr "127.0.0.1:$grpc" --seconds "$SECS" --connections 8 --streams 1000 --rate 20000 \
    --label "$backend	1000 streams, open loop 20k/s" >>"$RESULTS"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

run_backend memory
run_backend redis

incr_plain="$(redis-benchmark -p "$REDIS_PORT" -t incr -c 50 -n 300000 -q | tr '\r' '\n' | grep -Eo '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1)"
incr_p16="$(redis-benchmark -p "$REDIS_PORT" -t incr -c 50 -n 2000000 -P 16 -q | tr '\r' '\n' | grep -Eo '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1)"

field() { grep -Eo "$1=[0-9.]+" | cut -d= -f2; }
printf '\n%-8s %-30s %12s %9s %9s %9s %8s\n' backend load decisions/s p50_ms p99_ms p999_ms errors
while IFS=$'\t' read -r backend load rest; do
  printf '%-8s %-30s %12s %9s %9s %9s %8s\n' "$backend" "$load" \
    "$(field decisions_per_s <<<"$rest")" "$(field p50_ms <<<"$rest")" \
    "$(field p99_ms <<<"$rest")" "$(field p999_ms <<<"$rest")" "$(field errors <<<"$rest")"
done <"$RESULTS"
printf '%-8s %-30s %12s\n' redis "redis-benchmark INCR -c 50" "$incr_plain"
printf '%-8s %-30s %12s\n' redis "redis-benchmark INCR -c 50 -P 16" "$incr_p16"

mem="$(grep -P '^memory\t64 streams' "$RESULTS" | field decisions_per_s)"
red="$(grep -P '^redis\t64 streams' "$RESULTS" | field decisions_per_s)"
python3 - "$mem" "$red" "$incr_plain" <<'PY'
import sys
mem, red, incr = (float(x) for x in sys.argv[1:4])
print(f"\nredis backend / memory backend: {red / mem:.2f}")
print(f"memory backend decisions / unpipelined INCR/s: {mem / incr:.2f}")
print(f"redis backend decisions / unpipelined INCR/s: {red / incr:.2f} (each decision = INCRBY + EXPIRE)")
print("note: closed-loop latency at N streams is N / throughput (Little's law); the open-loop rows")
print("      measure latency at a fixed offered rate, from each request's scheduled send time.")
PY
