#!/usr/bin/env bash
# AuthorizationPolicy bench, seed 001 on loopback in one run: the gateway answers
# directResponse 333 "test" with
#   (a) no policy, (b) 20k IPs in one rule, (c) 100k IPs in one rule, (d) 20k rules of one IP,
#   (e) 1M CIDRs (1/4 IPv6, some /24 and /64),
# and nginx `geo` / HAProxy `src -f` with the same 100k list (plus each without a list).
# The client (127.0.0.1) is not in the lists, so every list is searched and the answer is 403,
# as in the seed. warden runs one process per case (--concurrency 1), so RSS is comparable.
# Then a reload test: the 100k policy allowing 127.0.0.1 is swapped (file rewrite + SIGHUP)
# several times under load, and no request may fail.
# Goal: every warden case >= 98% of (a) and >= nginx geo and HAProxy acl; the 100k policy adds
# < 20 MiB RSS. All servers run at once (pinned to CPU 0, wrk to CPU 1) and the cases are
# interleaved over ROUNDS rounds, best round shown (SUMMARY, bench/lib/common.sh). Env: DURATION (s per case and round, default 5),
# CONNS (default 64), ROUNDS (3), PIN (1), SKIP_WARDEN=1 to run only the nginx/HAProxy cases.
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx haproxy:haproxy wrk:wrk curl:curl python3:python3
SKIP_WARDEN=${SKIP_WARDEN:-0}
[ "$SKIP_WARDEN" = 1 ] || build_warden
GEN="$ROOT/examples/authz/gen-allowlist.py"

echo "generating lists" >&2
python3 "$GEN" --count 20000 -o "$WORK/allow-20k.yaml"
python3 "$GEN" --count 100000 -o "$WORK/allow-100k.yaml"
python3 "$GEN" --count 20000 --rule-per-ip -o "$WORK/allow-20k-rules.yaml"
python3 "$GEN" --count 1000000 --mixed -o "$WORK/allow-1m.yaml"
python3 "$GEN" --count 100000 --format nginx -o "$WORK/allow-100k.geo"
python3 "$GEN" --count 100000 --format haproxy -o "$WORK/allow-100k.lst"
# For the reload test: two different 100k policies that both allow the client.
python3 "$GEN" --count 100000 --include 127.0.0.1 --name reload-a -o "$WORK/reload-a.yaml"
python3 "$GEN" --count 100000 --include 127.0.0.1 --include 127.0.0.3 --name reload-b -o "$WORK/reload-b.yaml"
: >"$WORK/none.yaml"

# wait_status URL STATUS [seconds] [curl args] — wait until URL answers STATUS (large lists load slowly).
wait_status() {
  local url=$1 want=$2 secs=${3:-60}; shift 3 || true
  local code=""
  for _ in $(seq $((secs * 10))); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$@" "$url" || true)
    [ "$code" = "$want" ] && return 0
    sleep 0.1
  done
  echo "timeout waiting for $url to answer $want (last: $code)" >&2
  return 1
}

# gateway_yaml PORT — seed 001's Gateway + VirtualService (directResponse 333 "test") on PORT.
gateway_yaml() {
  cat <<YAML
apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: $1, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: ingressgateway, namespace: default}
spec:
  gateways: [istio-system/ingressgateway]
  hosts: ["*"]
  http:
  - name: httpbin
    match: [{uri: {prefix: /}}]
    directResponse: {status: 333, body: {string: test}}
YAML
}

# start_warden POLICY_FILE — start a gateway with that policy; sets W_PORT, W_PID.
start_warden() {
  W_PORT=$(free_port)
  local admin; admin=$(free_port)
  gateway_yaml "$W_PORT" >"$WORK/gateway-$W_PORT.yaml"
  bg_server "$WARDEN" proxy -c "$WORK/gateway-$W_PORT.yaml" -c "$1" --concurrency 1 \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$admin" --label istio=ingressgateway --no-watch
  W_PID=$LAST_PID
  W_ADMIN=$admin
}

stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

RSS="$WORK/rss"
declare -A CASE_PORT CASE_PID
WARDEN_CASES=()
# warden_case LABEL POLICY_FILE EXPECT — start a gateway for the case, check its answers, record
# its idle RSS; it keeps running for the rounds below.
warden_case() {
  local label=$1 policy=$2 expect=$3
  local t0; t0=$(date +%s.%N)
  start_warden "$policy"
  wait_status "http://127.0.0.1:$W_PORT/" "$expect" 120
  local t1; t1=$(date +%s.%N)
  if [ "$expect" = 403 ]; then
    # The allowlists include 127.0.0.2: a client bound to it passes.
    local ok; ok=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 "http://127.0.0.1:$W_PORT/")
    local body; body=$(curl -s "http://127.0.0.1:$W_PORT/")
    echo "  $label: 127.0.0.1 -> $expect \"$body\", 127.0.0.2 -> $ok (startup $(python3 -c "print(f'{$t1-$t0:.1f}')") s)" >&2
  fi
  sleep 0.5
  printf '%s\t%s\n' "$label" "$(rss_kb "$W_PID")" >>"$RSS"
  CASE_PORT[$label]=$W_PORT
  CASE_PID[$label]=$W_PID
  WARDEN_CASES+=("$label")
}

: >"$RSS"
if [ "$SKIP_WARDEN" != 1 ]; then
  echo "starting the warden cases" >&2
  warden_case "warden (a) no policy" "$WORK/none.yaml" 333
  warden_case "warden (b) 20k in 1 rule" "$WORK/allow-20k.yaml" 403
  warden_case "warden (c) 100k in 1 rule" "$WORK/allow-100k.yaml" 403
  warden_case "warden (d) 20k rules" "$WORK/allow-20k-rules.yaml" 403
  warden_case "warden (e) 1M CIDRs" "$WORK/allow-1m.yaml" 403
fi

N_NONE=$(free_port); N_GEO=$(free_port); H_NONE=$(free_port); H_ACL=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  geo \$allowed { default 0; include $WORK/allow-100k.geo; }
  server { listen 127.0.0.1:$N_NONE; location / { default_type text/plain; return 333 "test"; } }
  server { listen 127.0.0.1:$N_GEO; location / { default_type text/plain;
    if (\$allowed = 0) { return 403 "RBAC: access denied"; } return 333 "test"; } } }
NGX
bg_server nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
{ haproxy_head 4096; cat <<HAP; } >"$WORK/haproxy.cfg"
frontend none
  bind 127.0.0.1:$H_NONE
  http-request return status 333 content-type text/plain string test
frontend acl
  bind 127.0.0.1:$H_ACL
  acl allowed src -f $WORK/allow-100k.lst
  http-request return status 403 content-type text/plain string "RBAC: access denied" if !allowed
  http-request return status 333 content-type text/plain string test
HAP
bg_server haproxy -f "$WORK/haproxy.cfg"
wait_status "http://127.0.0.1:$N_NONE/" 333 30
wait_status "http://127.0.0.1:$N_GEO/" 403 60
wait_status "http://127.0.0.1:$H_NONE/" 333 30
wait_status "http://127.0.0.1:$H_ACL/" 403 60
for port in $N_GEO $H_ACL; do
  echo "  127.0.0.2 -> :$port $(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 "http://127.0.0.1:$port/")" >&2
done
bench_header
CASES=()
for label in "${WARDEN_CASES[@]}"; do
  CASES+=("CPU_PID=${CASE_PID[$label]} wrk_run '$label' http://127.0.0.1:${CASE_PORT[$label]}/")
done
run_rounds "${CASES[@]}" \
  "wrk_run 'nginx no list' http://127.0.0.1:$N_NONE/" \
  "wrk_run 'nginx geo 100k' http://127.0.0.1:$N_GEO/" \
  "wrk_run 'haproxy no list' http://127.0.0.1:$H_NONE/" \
  "wrk_run 'haproxy src -f 100k' http://127.0.0.1:$H_ACL/"
summarize_rounds
for label in "${WARDEN_CASES[@]}"; do stop_pid "${CASE_PID[$label]}"; done

RELOADS=""
if [ "$SKIP_WARDEN" != 1 ]; then
echo "reload test: 100k policy swapped 4 times under load" >&2
cp "$WORK/reload-a.yaml" "$WORK/reload.yaml"
start_warden "$WORK/reload.yaml"
wait_status "http://127.0.0.1:$W_PORT/" 333 120
(
  sleep 1
  for f in reload-b reload-a reload-b reload-a; do
    cp "$WORK/$f.yaml" "$WORK/reload.yaml.tmp" && mv "$WORK/reload.yaml.tmp" "$WORK/reload.yaml"
    kill -HUP "$W_PID"
    sleep "$(python3 -c "print(max(0.5, ($DURATION - 2) / 4))")"
  done
) &
SWAPPER=$!
wrk_run "reload under load (100k)" "http://127.0.0.1:$W_PORT/"
wait "$SWAPPER" || true
RELOADS=$(curl -s "http://127.0.0.1:$W_ADMIN/stats/prometheus" | grep -E '^[a-z_]*config_reload[a-z_]*(_total)? ' || true)
echo "$RELOADS" >&2
stop_pid "$W_PID"
fi

cpu_medians >"$WORK/cpu"
python3 - "$RESULTS" "$RSS" "$RELOADS" "$WORK/cpu" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
res = {r[0]: (float(r[1] or 0), r[2], int(r[3] or 0), r[4] if len(r) > 4 else "") for r in rows}
rss = {l.split("\t")[0]: int(l.split("\t")[1]) / 1024 for l in open(sys.argv[2])}
rounds = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[1] + ".rounds"))
print(f"{'case':<28}{'req/s':>10}{'p99':>10}{'403s':>10}{'RSS MiB':>9}  ratio to (a)   req/s per round")
base = res.get("warden (a) no policy", (0,))[0]
for name, (rps, p99, non, errs) in res.items():
    r = f"{rps / base:6.3f}" if base else "  -"
    m = f"{rss[name]:9.1f}" if name in rss else " " * 9
    print(f"{name:<28}{rps:>10.0f}{p99:>10}{non:>10}{m}  {r}   {rounds.get(name, '')} {errs}")
print()
best = max(res["nginx geo 100k"][0], res["haproxy src -f 100k"][0])
ok_all = True
for name, (rps, *_rest) in res.items():
    if not name.startswith("warden (") or name.startswith("warden (a)"):
        continue
    ok = rps >= 0.98 * base and rps >= best
    ok_all &= ok
    print(f"{name:<28} {rps / base:.3f} of (a), {rps / best:.3f} of best(nginx geo, haproxy acl)  [{'PASS' if ok else 'FAIL'}]")
cpu = dict((l.split("\t")[0], float(l.split("\t")[1])) for l in open(sys.argv[4]) if "\t" in l)
cpu_base = cpu.get("warden (a) no policy")
if cpu_base:
    # The server's own CPU time per request, median of the rounds: what the policy's size costs,
    # without the client's and the machine's noise in req/s.
    print("warden CPU per request (user+system, median of rounds), ratio to (a):")
    for name, us in cpu.items():
        print(f"  {name:<28} {us:6.2f} us  {us / cpu_base:.3f}")
print(f"haproxy src -f / nginx geo with 100k: {res['haproxy src -f 100k'][0] / res['haproxy no list'][0]:.3f} / "
      f"{res['nginx geo 100k'][0] / res['nginx no list'][0]:.3f} of their no-list rate")
if base:
    delta = rss["warden (c) 100k in 1 rule"] - rss["warden (a) no policy"]
    print(f"RSS added by the 100k policy: {delta:.1f} MiB  [{'PASS' if delta < 20 else 'FAIL'} < 20 MiB]")
    _, _, non, errs = res["reload under load (100k)"]
    reload_ok = non == 0 and not errs
    print(f"reload under load: non-2xx/3xx {non}, socket errors: {errs or 'none'}  [{'PASS' if reload_ok else 'FAIL'}]")
    print(f"reload counters: {sys.argv[3].strip() or 'n/a'}".replace("\n", "; "))
PY
busy_medians
