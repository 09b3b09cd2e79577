#!/usr/bin/env bash
# Side-by-side, in one run:
#   1. load generators against the same nginx (`return 200`, 1 worker): warden load, wrk, hey
#      at equal connections and threads (hey: GOMAXPROCS=threads);
#   2. backends driven by the same wrk: nginx `return 200` vs `warden echo` (same thread count).
# Goals (issue 7): warden load >= wrk and >= 2x hey in req/s; warden echo >= nginx in req/s.
#
# Env: CONNS (64), THREADS (1), DURATION seconds per run (4), ROUNDS (3), WARDEN_BIN (skip the cargo build
# and use this binary), PIN (1: backends on CPU 0, load tools on CPU 1, so the scheduler does not move
# them onto each other's core mid-run; 0: no pinning). Loopback only; every run is bounded by DURATION; everything it starts is
# stopped on exit.
set -euo pipefail

CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

need=()
for tool in nginx wrk hey python3 curl; do
    command -v "$tool" >/dev/null || need+=("$tool")
done
if ((${#need[@]})); then
    pkgs=()
    for tool in "${need[@]}"; do
        case $tool in python3) pkgs+=(python3-minimal) ;; *) pkgs+=("$tool") ;; esac
    done
    echo "installing ${pkgs[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >&2
fi
NGINX=$(command -v nginx)
if [[ $PIN == 1 && $(nproc) -ge 2 ]]; then
    ON_SERVER_CPU=(taskset -c 0)
    ON_CLIENT_CPU=(taskset -c 1)
else
    PIN=0
    ON_SERVER_CPU=()
    ON_CLIENT_CPU=()
fi

if [[ -n ${WARDEN_BIN:-} ]]; then
    WARDEN=$WARDEN_BIN
else
    (cd "$ROOT" && cargo build --release -p warden >&2)
    WARDEN=$ROOT/target/release/warden
fi

WORK=$(mktemp -d /tmp/warden-load-bench.XXXXXX)
ECHO_PID=
cleanup() {
    [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null || true
    [[ -f $WORK/nginx.pid ]] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
    sleep 0.2
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() {
    for _ in $(seq 50); do
        curl -s -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "backend at $1 did not come up" >&2
    return 1
}

NGINX_PORT=$(free_port)
sed -e "s#@PREFIX@#$WORK#g" -e "s#@PORT@#$NGINX_PORT#g" "$ROOT/bench/load-nginx.conf" >"$WORK/nginx.conf"
"${ON_SERVER_CPU[@]}" "$NGINX" -p "$WORK" -c "$WORK/nginx.conf"
NGINX_URL=http://127.0.0.1:$NGINX_PORT/
wait_http "$NGINX_URL"

ECHO_PORT=$(free_port)
"${ON_SERVER_CPU[@]}" "$WARDEN" echo --http "127.0.0.1:$ECHO_PORT" --threads "$THREADS" 2>"$WORK/echo.log" &
ECHO_PID=$!
ECHO_URL=http://127.0.0.1:$ECHO_PORT/
wait_http "$ECHO_URL"

# Each measure prints "req/s p50_ms p99_ms".
to_ms() { # wrk latency like 1.23ms / 950.00us / 1.20s
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); print v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); print v + 0 }
        else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000 }
        else print v }'
}

run_wrk() {
    local out
    out=$("${ON_CLIENT_CPU[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$1")
    echo "$out" >>"$WORK/raw.txt"
    local rps p50 p99
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
    p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
    echo "$rps $p50 $p99"
}

run_hey() {
    local out
    out=$(GOMAXPROCS=$THREADS timeout $((DURATION + 30)) "${ON_CLIENT_CPU[@]}" hey -c "$CONNS" -z "${DURATION}s" "$1")
    echo "$out" >>"$WORK/raw.txt"
    local rps p50 p99
    rps=$(awk '/Requests\/sec:/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $3 * 1000}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $3 * 1000}' <<<"$out")
    echo "$rps $p50 $p99"
}

run_warden() {
    "${ON_CLIENT_CPU[@]}" "$WARDEN" load -c "$CONNS" --threads "$THREADS" -t "${DURATION}s" --quiet \
        --json "$WORK/warden.json" "$1" >>"$WORK/raw.txt"
    python3 - "$WORK/warden.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = {x["Percentile"]: x["Value"] for x in r["DurationHistogram"]["Percentiles"]}
print(f'{r["ActualQPS"]:.0f} {p[50.0] * 1000:.3f} {p[99.0] * 1000:.3f}')
PY
}

echo "# bench/load.sh  $(date -u +%FT%TZ)  $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $CONNS connections, $THREADS thread(s), ${DURATION}s per run, $ROUNDS rounds, pinned $PIN; $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2), nginx $("$NGINX" -v 2>&1 | cut -d/ -f2)"

# Warm both backends up so the first measured tool is not penalised.
wrk -t1 -c"$CONNS" -d1s "$NGINX_URL" >/dev/null
wrk -t1 -c"$CONNS" -d1s "$ECHO_URL" >/dev/null

# Rounds interleave the tools so a burst of other work on the machine hits all of them; the
# table shows each tool's median round (by req/s) and the req/s of every round.
: >"$WORK/samples.txt"
for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    echo "warden_load $(run_warden "$NGINX_URL")" >>"$WORK/samples.txt"
    echo "wrk $(run_wrk "$NGINX_URL")" >>"$WORK/samples.txt"
    echo "hey $(run_hey "$NGINX_URL")" >>"$WORK/samples.txt"
    echo "nginx $(run_wrk "$NGINX_URL")" >>"$WORK/samples.txt"
    echo "warden_echo $(run_wrk "$ECHO_URL")" >>"$WORK/samples.txt"
done

python3 - "$WORK/samples.txt" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    runs.setdefault(name, []).append([float(v) for v in vals])
def median(name):
    rs = sorted(runs[name], key=lambda r: r[0])
    return rs[len(rs) // 2]
w, k, h, n, e = (median(x) for x in ["warden_load", "wrk", "hey", "nginx", "warden_echo"])
def row(label, name, m, base):
    every = " ".join(f"{r[0]:.0f}" for r in runs[name])
    print(f"{label:<18} {m[0]:>9.0f} {m[1]:>8.3f} {m[2]:>8.3f} {m[0] / base:>8.2f}   {every}")
print()
print("load generators -> nginx return 200")
print(f"{'tool':<18} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs wrk':>8}   req/s per round")
row("warden load", "warden_load", w, k[0]); row("wrk", "wrk", k, k[0]); row("hey", "hey", h, k[0])
print()
print("backends <- wrk")
print(f"{'backend':<18} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs nginx':>8}   req/s per round")
row("nginx return 200", "nginx", n, n[0]); row("warden echo", "warden_echo", e, n[0])
print()
ok = lambda b: "yes" if b else "NO"
print(f"goal warden load >= wrk:      {ok(w[0] >= k[0])} ({w[0] / k[0]:.2f}x, medians)")
print(f"goal warden load >= 2x hey:   {ok(w[0] >= 2 * h[0])} ({w[0] / h[0]:.2f}x)")
print(f"goal warden echo >= nginx:    {ok(e[0] >= n[0])} ({e[0] / n[0]:.2f}x)")
PY
