#!/usr/bin/env bash
# Lua filter bench, seed 000's global limit path: wrk through a warden gateway (one worker) in
# front of an nginx backend, every request decided by `warden ratelimit` (memory, limit never
# reached) on (remote_address, PATH), with PATH made
#   (lua)    by the article's EnvoyFilters unchanged: its Lua script adds
#            x-envoy-original-limit-rate-path = method .. path, a request_headers action reads it
#   (native) by warden's `path` action: the same EnvoyFilters without the Lua patch
# and (a) no limiter, for scale. Goal: req/s (lua) >= 0.9 x (native), from back-to-back pairs
# (paired_ratio, bench/lib/common.sh); the CPU the proxy spends per request in each case shows
# what the script adds.
# Cases are interleaved over ROUNDS rounds (best round shown); the proxies run on CPU 0, wrk and
# the backend on CPU 1, the RLS where the scheduler puts it (PIN, see bench/lib/common.sh).
# Env: DURATION (s per case and round, default 5), CONNS (default 64), ROUNDS (3), PIN (1),
# PAIRS (10), PAIRED_SECS (2), WARDEN (prebuilt binary: skips the release build).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx wrk:wrk curl:curl python3:python3
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ -z "${WARDEN:-}" ]; then build_warden; fi

BACKEND=$(free_port); RLS=$(free_port)
backend_nginx "$BACKEND"

# The seed's RLS config with a limit no run reaches: every request is one decision.
mkdir -p "$WORK/rls"
printf 'domain: ratelimit\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: PATH\n        rate_limit: {unit: second, requests_per_unit: 1000000000}\n' \
  >"$WORK/rls/config.yaml"
bg "$WARDEN" ratelimit --config "$WORK/rls" --grpc "127.0.0.1:$RLS" \
  --http "127.0.0.1:$(free_port)" --debug "127.0.0.1:$(free_port)" --backend memory

seed_filters() { # the seed's EnvoyFilters pointed at our RLS, 10 s timeout as the seed's
  sed -e "s/outbound|8081||ratelimit.default.svc.cluster.local/outbound|$RLS||127.0.0.1/" \
    "$ROOT/examples/ratelimit-global/seed-envoyfilter-global.yaml"
}
native_filters() { # the same without the Lua patch, PATH from the native `path` action
  seed_filters | python3 -c '
import sys
text = sys.stdin.read()
head, rest = text.split("    - applyTo: HTTP_FILTER", 1)
_, tail = rest.split("    - applyTo: HTTP_FILTER", 1)
text = head + "    - applyTo: HTTP_FILTER" + tail
old = """                - request_headers:
                    header_name: "x-envoy-original-limit-rate-path"
                    descriptor_key: "PATH\""""
assert old in text and "envoy.lua" not in text
print(text.replace(old, "                - path:\n                    descriptor_key: \"PATH\""))'
}

declare -A PORT ADMIN PID
start_case() { # NAME: the config files already in $WORK/NAME
  PORT[$1]=$(free_port)
  ADMIN[$1]=$(free_port)
  gateway_to_backend_yaml "${PORT[$1]}" "$BACKEND" >"$WORK/$1/gateway.yaml"
  bg_server "$WARDEN" proxy -c "$WORK/$1" --concurrency 1 --listen-host 127.0.0.1 \
    --admin "127.0.0.1:${ADMIN[$1]}" --no-watch
  PID[$1]=$LAST_PID
}
for c in a lua native; do mkdir -p "$WORK/$c"; done
seed_filters >"$WORK/lua/filters.yaml"
native_filters >"$WORK/native/filters.yaml"
for c in a lua native; do start_case "$c"; done
wait_http "http://127.0.0.1:$BACKEND/"
for c in a lua native; do wait_http "http://127.0.0.1:${PORT[$c]}/"; done

url() { echo "http://127.0.0.1:${PORT[$1]}/api/healthz?user=1"; }
# Both limited cases must see their descriptor decided (ok), and the Lua header upstream.
for c in lua native; do curl -s -o /dev/null "$(url "$c")"; done
for c in a lua native; do
  "${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d1s "$(url "$c")" >/dev/null 2>&1 || true
done
bench_header
run_rounds \
  "CPU_PID=\${PID[a]} wrk_run '(a) no limiter' $(url a)" \
  "CPU_PID=\${PID[native]} wrk_run '(native) path action' $(url native)" \
  "CPU_PID=\${PID[lua]} wrk_run '(lua) seed script' $(url lua)"
summarize_rounds

python3 - "$RESULTS" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
rounds = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[1] + ".rounds"))
print(f"{'case':<32}{'req/s':>10}{'p99':>10}{'non-2xx':>10}   req/s per round")
for r in rows:
    print(f"{r[0]:<32}{float(r[1] or 0):>10.0f}{r[2]:>10}{r[3]:>10}   {rounds[r[0]]}")
PY
echo
echo "proxy CPU per request (us, median of rounds):"
cpu_medians | awk -F'\t' '{printf "  %-32s %8s\n", $1, $2}'
cpu_medians | python3 -c '
import sys
v = dict(l.rstrip("\n").split("\t") for l in sys.stdin)
lua = [float(x) for k, x in v.items() if k.startswith("(lua)")]
nat = [float(x) for k, x in v.items() if k.startswith("(native)")]
if lua and nat:
    print(f"  Lua adds {lua[0] - nat[0]:+.2f} us of proxy CPU per request")'

echo
PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-10}
paired_ratio "rps (lua) / (native)" "$(url native)" "$(url lua)" "$PAIRS" "$PAIRED_SECS" \
  | paired_verdict 0.9

echo
echo "decisions per case (RLS answered OK / failed), Lua errors:"
for c in lua native; do
  curl -s "http://127.0.0.1:${ADMIN[$c]}/stats/prometheus" | awk -v c="$c" '
    /^warden_ratelimit_ok_total / {ok=$2} /^warden_ratelimit_error_total / {err=$2}
    /^warden_lua_errors_total / {lua=$2}
    END {printf "  %-7s ok %10d  failed %6d  lua errors %d\n", c, ok, err, lua}'
done
