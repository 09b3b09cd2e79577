#!/usr/bin/env bash
# Which of a gateway's threads pays for the access log: warden (1 worker, CPU 0) proxying to an
# nginx backend (CPU 1) under wrk (CPU 1), without and with Istio's default TEXT access log to a
# file, alternated over ROUNDS rounds; each thread's user and system CPU (/proc/PID/task/*/stat)
# per request. Shows whether the log writer thread or the kernel's file writes cost the worker's
# core anything beyond the rendering the worker does (bench/instructions.sh counts that).
# Env: DURATION (s per case and round, default 8), ROUNDS (3), CONNS (64), WARDEN (prebuilt binary).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx wrk:wrk curl:curl
if [ -z "${WARDEN:-}" ]; then build_warden; fi
DURATION=${DURATION:-8}; ROUNDS=${ROUNDS:-3}; CONNS=${CONNS:-64}

BACKEND=$(free_port)
backend_nginx "$BACKEND"

# start MODE — a gateway without (nolog) or with (log) the access log; sets PORT_MODE, PID_MODE.
start() {
  local port; port=$(free_port)
  gateway_to_backend_yaml "$port" "$BACKEND" >"$WORK/$1.yaml"
  if [ "$1" = log ]; then echo "accessLogFile: $WORK/access.log"; else echo "{}"; fi >"$WORK/$1-mesh.yaml"
  bg_server "$WARDEN" proxy -c "$WORK/$1.yaml" --mesh-config "$WORK/$1-mesh.yaml" --concurrency 1 \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$(free_port)" --no-watch --label istio=ingressgateway \
    --namespace istio-system
  printf -v "PORT_$1" '%s' "$port"; printf -v "PID_$1" '%s' "$LAST_PID"
  wait_http "http://127.0.0.1:$port/"
}
start nolog; start log

# ticks PID — "thread-name user system" per thread, in clock ticks.
ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" "$(awk '{print $14, $15}' "$t/stat")"
  done | sort
}
hz=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
  for mode in nolog log; do
    p="PORT_$mode"; pid="PID_$mode"
    ticks "${!pid}" >"$WORK/before"
    "${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:${!p}/" >"$WORK/wrk"
    ticks "${!pid}" >"$WORK/after"
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk")
    echo "round $round, $mode: $reqs requests (user / system CPU per request, us)"
    join "$WORK/before" "$WORK/after" | awk -v r="$reqs" -v hz="$hz" '{
      u = $4 - $2; s = $5 - $3
      if (u + s > 0) printf "  %-20s %7.2f %7.2f\n", $1, u * 1e6 / hz / r, s * 1e6 / hz / r }'
  done
done
