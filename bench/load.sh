#!/usr/bin/env bash
# Side-by-side, in one run:
#   1. load generators against the same nginx (`return 200`, 1 worker): warden load, wrk, hey
#      at equal connections and threads (hey: GOMAXPROCS=threads);
#   2. backends driven by the same wrk: nginx `return 200` vs `warden echo` (same thread count).
# Goals: warden load >= wrk and >= 2x hey in req/s; warden echo >= nginx in req/s.
#
# Env: CONNS (64), THREADS (1), DURATION seconds per run (4), ROUNDS (3), WARDEN_BIN (skip the cargo build
# and use this binary), PIN (1: backends on CPU 0, load tools on CPU 1; see bench/lib/common.sh).
# Loopback only; every run is bounded by DURATION; everything it starts is stopped on exit.
DURATION=${DURATION:-4} # before common.sh, whose default is 5
THREADS=${THREADS:-1}
source "$(dirname "$0")/lib/common.sh" # CONNS, ROUNDS, PIN, WORK, cleanup, free_port, wait_http
ensure_pkgs nginx:nginx wrk:wrk hey:hey python3:python3-minimal curl:curl taskset:util-linux
NGINX=$(command -v nginx)
if [[ -n ${WARDEN_BIN:-} ]]; then
    WARDEN=$WARDEN_BIN
else
    build_warden
fi
# Short names for the pinning prefixes of common.sh (backends on CPU 0, load tools on CPU 1).
ON_SERVER_CPU=("${SERVER_CPU[@]}")
ON_CLIENT_CPU=("${CLIENT_CPU[@]}")

NGINX_PORT=$(free_port)
sed -e "s#@PREFIX@#$WORK#g" -e "s#@PORT@#$NGINX_PORT#g" "$ROOT/bench/load-nginx.conf" >"$WORK/nginx.conf"
bg_server "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;'
NGINX_URL=http://127.0.0.1:$NGINX_PORT/
wait_http "$NGINX_URL"

ECHO_PORT=$(free_port)
bg_server "$WARDEN" echo --http "127.0.0.1:$ECHO_PORT" --threads "$THREADS"
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
echo "# background busy $(background_busy); $CONNS connections, $THREADS thread(s), ${DURATION}s per run, $ROUNDS rounds, pinned $PIN; $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2), nginx $("$NGINX" -v 2>&1 | cut -d/ -f2)"

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
