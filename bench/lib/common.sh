# Shared helpers for the bench scripts: tool installation, free ports, wrk parsing, cleanup.
# Source it; it sets `set -euo pipefail` and a cleanup trap that kills everything started with `bg`.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d /tmp/warden-bench.XXXXXX)
PIDS=()
PAIRED_WRK_ARGS=()

cleanup() {
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  sleep 0.2
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# ensure_pkgs CMD:PKG ... — apt-get install what is missing (apt-get update once).
ensure_pkgs() {
  local missing=() pair
  for pair in "$@"; do command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}"); done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

build_warden() {
  (cd "$ROOT" && cargo build --release -q -p warden)
  WARDEN="${CARGO_TARGET_DIR:-$ROOT/target}/release/warden"
}

# free_port — a TCP port free on 127.0.0.1 right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# bg CMD... — start in the background, remember the pid for cleanup.
bg() { "$@" >"$WORK/bg-$#-$RANDOM.log" 2>&1 & PIDS+=($!); LAST_PID=$!; }

# CPU pinning (PIN=1, the default, on 2+ cores): the servers under comparison (warden, nginx,
# HAProxy as the proxy or responder being measured) run on CPU 0; wrk and the shared backend run
# on CPU 1. Every contender gets the same core, and the scheduler cannot move the client onto the
# server's core mid-run, which was the largest source of run-to-run noise here. PIN=0 disables it.
PIN=${PIN:-1}
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  SERVER_CPU=(taskset -c 0)
  CLIENT_CPU=(taskset -c 1)
else
  PIN=0
  SERVER_CPU=()
  CLIENT_CPU=()
fi
# bg_server CMD... / bg_client_side CMD... — bg, pinned to the server's / the client's core.
bg_server() { bg "${SERVER_CPU[@]}" "$@"; }
bg_client_side() { bg "${CLIENT_CPU[@]}" "$@"; }

# backend_nginx PORT — the benches' backend: nginx, one worker on the client side's CPU,
# answering every request with 200 and a small body, no access log.
backend_nginx() {
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx/pid; error_log stderr error;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$1; location / { return 200 "hello from backend\n"; } } }
NGX
  bg_client_side nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
}

# wait_http URL [expect_status] — wait until the URL answers (any status), at most 10 s.
wait_http() {
  for _ in $(seq 100); do
    if curl -s -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "timeout waiting for $1" >&2; return 1
}

# gateway_to_backend_yaml PORT BACKEND_PORT — a Gateway on PORT (selector istio=ingressgateway)
# whose every request goes to the backend on 127.0.0.1:BACKEND_PORT (ServiceEntry backend.local).
gateway_to_backend_yaml() {
  cat <<YAML
apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: bench, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: $1, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1beta1
kind: ServiceEntry
metadata: {name: backend, namespace: istio-system}
spec:
  hosts: [backend.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {http: $2}}]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: api, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [bench]
  http:
  - route: [{destination: {host: backend.local, port: {number: 80}}}]
YAML
}

# per_ip_policy_yaml REQUESTS UNIT — seed 000's local limit as a RateLimitPolicy: one bucket
# per client IP (sourceCIDR Distinct), REQUESTS per UNIT.
per_ip_policy_yaml() {
  cat <<YAML
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: istio-system}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: $1, unit: $2}
YAML
}

# haproxy_head MAXCONN — the global and defaults sections every bench's HAProxy shares (one
# thread, HTTP mode); a script that proxies adds `  http-reuse always` right after it.
haproxy_head() {
  cat <<HAP
global
  nbthread 1
  maxconn $1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
HAP
}

# haproxy_per_ip_limit REQUESTS — frontend lines for seed 000's limit in HAProxy: a stick table
# of each source address's request rate over 60 s, 429 above REQUESTS.
haproxy_per_ip_limit() {
  cat <<HAP
  stick-table type ip size 1m expire 60s store http_req_rate(60s)
  http-request track-sc0 src
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt $1 }
HAP
}

# wrk_run LABEL URL [extra wrk args] — prints "LABEL rps p99_ms non2xx" and appends to $RESULTS.
# Scripts run their cases ROUNDS times, interleaved (a burst of other work on the machine then
# hits every case), and call summarize_rounds before reporting.
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
RESULTS="$WORK/results"
wrk_run() {
  local label=$1 url=$2; shift 2
  local ticks0=""; [ -n "${CPU_PID:-}" ] && ticks0=$(cpu_ticks "$CPU_PID")
  local stat0; stat0=$(grep '^cpu[0-9]' /proc/stat)
  local out; out=$("${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$@" "$url" 2>&1)
  busy_since "$label" "$stat0" >>"$RESULTS.busy"
  if [ -n "$ticks0" ]; then
    # CPU time the server spent per request (user + system): the cost of a request, less
    # sensitive than req/s to what else the machine runs.
    local ticks1 reqs; ticks1=$(cpu_ticks "$CPU_PID"); reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    python3 -c "print('$label\t%.2f' % (($ticks1 - $ticks0) * 1e6 / $(getconf CLK_TCK) / max(1, ${reqs:-0})))" >>"$RESULTS.cpu"
  fi
  local rps p99 non
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non=$(awk '/Non-2xx or 3xx responses/ {print $5}' <<<"$out"); non=${non:-0}
  local errs; errs=$(awk '/Socket errors/ {print $0}' <<<"$out")
  printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$rps" "$p99" "$non" "${errs:-}" >>"$RESULTS"
  printf '  %-40s %10s rps   p99 %8s   non-2xx/3xx %s %s\n' "$label" "$rps" "$p99" "$non" "${errs:-}" >&2
}

# busy_since LABEL STAT0 — "LABEL<TAB>busy% of cpu0<TAB>busy% of cpu1..." since STAT0 (the
# per-CPU lines of /proc/stat). With PIN=1, cpu0 is the server's core and cpu1 wrk's and the
# backend's: when both are near 100%, req/s is bounded by the client side too, and a cheaper
# server shows in its CPU per request rather than in req/s.
busy_since() {
  python3 - "$1" "$2" <<'PY'
import sys
def parse(text):
    return {l.split()[0]: [int(x) for x in l.split()[1:]] for l in text.splitlines()}
before = parse(sys.argv[2])
per_cpu = [l for l in open("/proc/stat").read().splitlines() if l[:3] == "cpu" and l[3:4].isdigit()]
after = parse("\n".join(per_cpu))
cols = []
for cpu in sorted(before, key=lambda c: int(c[3:])):
    d = [a - b for a, b in zip(after[cpu], before[cpu])]
    total = sum(d[:8]) or 1
    idle = d[3] + d[4]
    cols.append(f"{100 * (total - idle) / total:.0f}")
print("\t".join([sys.argv[1]] + cols))
PY
}

# busy_medians — per case, the median busy % of each CPU over its rounds.
busy_medians() {
  [ -f "$RESULTS.busy" ] || return 0
  python3 - "$RESULTS.busy" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    label, *cols = line.rstrip("\n").split("\t")
    rows.setdefault(label, []).append([float(c) for c in cols])
print("CPU busy during the runs (median of rounds; with PIN=1 cpu0 = server, cpu1 = wrk + backend):")
for label, runs in rows.items():
    med = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
    print(f"  {label:<40} " + "  ".join(f"cpu{i} {m:3.0f}%" for i, m in enumerate(med)))
PY
}

# cpu_ticks PID — user + system CPU ticks the process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# cpu_medians — "LABEL<TAB>median CPU us per request" for every case measured with CPU_PID set.
cpu_medians() {
  [ -f "$RESULTS.cpu" ] || return 0
  python3 - "$RESULTS.cpu" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    label, us = line.rstrip("\n").split("\t")
    rows.setdefault(label, []).append(float(us))
for label, v in rows.items():
    print(f"{label}\t{statistics.median(v):.2f}")
PY
}

# run_rounds CMD... — run every CMD (a string, eval'ed) ROUNDS times, interleaved, each round
# starting one case later than the one before: a burst of other load on this shared machine
# then hits a different case each round instead of always the ones late in the list.
run_rounds() {
  local n=$# round i
  local cases=("$@")
  for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    for ((i = 0; i < n; i++)); do eval "${cases[$(((round - 1 + i) % n))]}"; done
  done
}

# summarize_rounds — replace $RESULTS (one row per case and round) by one row per case, in
# first-seen order: the round with the best req/s (SUMMARY=best, the default) or the median one
# (SUMMARY=median). Best, because on this shared VM other tenants' load comes and goes (a case's
# rounds are typically either ~140k or ~113k rps, nothing between): it only ever slows a round,
# so each contender's best round is its undisturbed capacity, as timeit takes the fastest
# repeat. Every round's req/s goes to $RESULTS.rounds ("LABEL<TAB>rps rps ..."), which the
# reports print next to the summary so the spread stays visible.
SUMMARY=${SUMMARY:-best}
summarize_rounds() {
  python3 - "$RESULTS" "$SUMMARY" <<'PY'
import sys
path, summary = sys.argv[1], sys.argv[2]
rows = {}
for line in open(path):
    r = line.rstrip("\n").split("\t")
    rows.setdefault(r[0], []).append(r)
with open(path, "w") as out, open(path + ".rounds", "w") as rounds:
    for label, rs in rows.items():
        ordered = sorted(rs, key=lambda r: float(r[1] or 0))
        pick = ordered[-1] if summary == "best" else ordered[len(ordered) // 2]
        out.write("\t".join(pick) + "\n")
        rounds.write(label + "\t" + " ".join(f"{float(r[1] or 0):.0f}" for r in rs) + "\n")
PY
}

# paired_ratio NAME URL_A URL_B [PAIRS] [SECS] — "NAME<TAB>median<TAB>r1 r2 ..." of B's req/s
# over A's, from PAIRS back-to-back runs of SECS each (order swapped every pair). This VM's
# slowdowns last seconds and move whole rounds by up to ~45%; two runs seconds apart see nearly
# the same machine, so the median of per-pair ratios estimates a small difference (a 3% cost)
# that best-of-rounds req/s cannot resolve.
paired_ratio() {
  local name=$1 url_a=$2 url_b=$3 pairs=${4:-8} secs=${5:-2} i ra rb ratios=()
  local rps_of='/Requests\/sec/ {print $2}'
  # PAIRED_WRK_ARGS: extra wrk arguments for both sides (e.g. a Host header), as an array.
  local extra=("${PAIRED_WRK_ARGS[@]}")
  for i in $(seq "$pairs"); do
    if ((i % 2)); then
      ra=$("${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${secs}s" "${extra[@]}" "$url_a" | awk "$rps_of")
      rb=$("${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${secs}s" "${extra[@]}" "$url_b" | awk "$rps_of")
    else
      rb=$("${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${secs}s" "${extra[@]}" "$url_b" | awk "$rps_of")
      ra=$("${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${secs}s" "${extra[@]}" "$url_a" | awk "$rps_of")
    fi
    ratios+=("$(python3 -c "print(f'{${rb:-0} / max(1.0, ${ra:-0}):.3f}')")")
  done
  python3 - "$name" "${ratios[@]}" <<'PY'
import statistics, sys
name, ratios = sys.argv[1], [float(r) for r in sys.argv[2:]]
print(f"{name}\t{statistics.median(ratios):.3f}\t{' '.join(f'{r:.3f}' for r in ratios)}")
PY
}

# paired_verdict GOAL — paired_ratio's line on stdin as "NAME, median of N back-to-back pairs =
# X (90% CI LO-HI)  [PASS|FAIL|TIE (within noise)..., goal >= GOAL]" and the per-pair ratios
# under it (bench/lib/paired.py says how the interval and the verdict are made). GOAL "-"
# prints the interval and the pairs' range, no verdict.
paired_verdict() { python3 "$ROOT/bench/lib/paired.py" verdict "$1"; }

# noise_floor NAME URL [PAIRS] [SECS] — paired_ratio of one server against itself: how far apart
# two back-to-back runs of the same thing land here, to read the comparisons next to it against.
noise_floor() { paired_ratio "$1" "$2" "$2" "${3:-8}" "${4:-2}" | paired_verdict -; }

# background_busy — percent of all CPUs busy during one second, before the load starts: other
# work on the machine (a build, another VM) shows up here and the numbers are not comparable.
background_busy() {
  python3 - <<'PY'
import time
def sample():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(v), v[3] + v[4]
t0, i0 = sample(); time.sleep(1); t1, i1 = sample()
print(f"{100 * (1 - (i1 - i0) / max(1, t1 - t0)):.0f}%")
PY
}

# bench_header — one line naming the run's conditions, for the quoted output.
bench_header() {
  echo "# $(basename "$0") $(date -u +%FT%TZ): $(nproc) cores, background busy $(background_busy)," \
    "wrk -t1 -c$CONNS -d${DURATION}s x $ROUNDS rounds ($SUMMARY round shown), pinned=$PIN"
}

rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
