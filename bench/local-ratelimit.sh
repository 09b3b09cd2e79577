#!/usr/bin/env bash
# Local rate limit bench, seed 000's attack shape on loopback in one run: one client IP
# (127.0.0.1) hammering through a proxy whose per-IP limit is 300/min, so almost every request is
# rejected with 429 before it reaches the backend:
#   warden RateLimitPolicy (sourceCIDR Distinct, 300/Minute)
#   nginx  limit_req (zone per $binary_remote_addr, 300r/m, burst 299 nodelay, status 429)
#   HAProxy stick table (track-sc0 src, http_req_rate(60s) > 300 -> deny 429)
# each at wrk -t1 -c$CONNS and at the seed's 1000 connections (-c$SEED_CONNS); the backend
# counts what got through. Then warden with a policy that never triggers vs no policy at all.
# Every proxy runs one worker/thread. Goals: warden attack rps >= nginx and HAProxy; the
# non-triggering policy costs <= 3%. (Memory of 10M distinct keys is measured by the criterion
# bench: cargo bench -p warden-local-ratelimit --bench check.)
# Cases are interleaved over ROUNDS rounds (best round shown; SUMMARY=median for the median, see bench/lib/common.sh); the proxies run on CPU 0, wrk and the
# backend on CPU 1 (PIN, see bench/lib/common.sh).
# Then back-to-back pairs (PAIRS) whose medians carry the goals' verdicts.
# Env: DURATION (s per case and round, default 5), CONNS (64), SEED_CONNS (1000), ROUNDS (3),
# PAIRS (16), PIN (1); see bench/lib/common.sh.
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx haproxy:haproxy wrk:wrk curl:curl python3:python3
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
SEED_CONNS=${SEED_CONNS:-1000}
build_warden

BACKEND=$(free_port); BACKEND_LOGGED=$(free_port)
W_ATTACK=$(free_port); W_LOOSE=$(free_port); W_NONE=$(free_port)
N_ATTACK=$(free_port); H_ATTACK=$(free_port)

# Backend: nginx, one worker. The :BACKEND_LOGGED server (used by the attack cases) writes an
# access log so we can count the requests that reached it; the other does not log.
mkdir -p "$WORK/nginx-backend" "$WORK/nginx-proxy"
cat >"$WORK/nginx-backend/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx-backend/pid; error_log stderr error;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$BACKEND reuseport; location / { return 200 "hello from backend\n"; } }
  server { listen 127.0.0.1:$BACKEND_LOGGED; access_log $WORK/backend-hits.log;
           location / { return 200 "hello from backend\n"; } } }
NGX
bg_client_side nginx -p "$WORK/nginx-backend" -c "$WORK/nginx-backend/nginx.conf"

cat >"$WORK/nginx-proxy/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx-proxy/pid; error_log stderr crit;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=300r/m;
  upstream backend { server 127.0.0.1:$BACKEND_LOGGED; keepalive 128; }
  server { listen 127.0.0.1:$N_ATTACK;
    limit_req zone=perip burst=299 nodelay; limit_req_status 429; limit_req_log_level info;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
bg_server nginx -p "$WORK/nginx-proxy" -c "$WORK/nginx-proxy/nginx.conf"
N_MASTER=$LAST_PID

{ haproxy_head 4000; cat <<HAP; } >"$WORK/haproxy.cfg"
  http-reuse always
frontend attack
  bind 127.0.0.1:$H_ATTACK
$(haproxy_per_ip_limit 300)
  default_backend be
backend be
  server s1 127.0.0.1:$BACKEND_LOGGED
HAP
bg_server haproxy -f "$WORK/haproxy.cfg"
H_PID=$LAST_PID

# warden: one process per case, same gateway and route (gateway_to_backend_yaml); only the
# policy (per_ip_policy_yaml) differs.
mkdir -p "$WORK/w-attack" "$WORK/w-loose" "$WORK/w-none"
gateway_to_backend_yaml "$W_ATTACK" "$BACKEND_LOGGED" >"$WORK/w-attack/gateway.yaml"
per_ip_policy_yaml 300 Minute >"$WORK/w-attack/policy.yaml"
gateway_to_backend_yaml "$W_LOOSE" "$BACKEND" >"$WORK/w-loose/gateway.yaml"
per_ip_policy_yaml 1000000000 Second >"$WORK/w-loose/policy.yaml"
gateway_to_backend_yaml "$W_NONE" "$BACKEND" >"$WORK/w-none/gateway.yaml"
declare -A W_PID
for case in attack loose none; do
  bg_server "$WARDEN" proxy -c "$WORK/w-$case" --concurrency 1 --listen-host 127.0.0.1 \
    --admin "127.0.0.1:$(free_port)" --no-watch
  W_PID[$case]=$LAST_PID
done

for url in "http://127.0.0.1:$BACKEND/" "http://127.0.0.1:$BACKEND_LOGGED/" \
           "http://127.0.0.1:$W_LOOSE/" "http://127.0.0.1:$W_NONE/"; do wait_http "$url"; done
# Readiness probes of the attack proxies would spend their budget: probe with a TCP connect.
for port in "$W_ATTACK" "$N_ATTACK" "$H_ATTACK"; do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
done
sleep 0.5

hits() { wc -l <"$WORK/backend-hits.log" 2>/dev/null || echo 0; }
# attack LABEL URL CONNS — one wrk run; records the backend hits it let through.
attack() {
  local before; before=$(hits)
  CONNS=$3 wrk_run "$1" "$2"
  sleep 0.2
  echo "$1	$(( $(hits) - before ))" >>"$WORK/hits"
}

bench_header
# The server's CPU time per request is recorded too (CPU_PID, see wrk_run): nginx's worker,
# HAProxy, each warden.
N_WORKER=$(pgrep -P "$N_MASTER" | head -1)
run_rounds \
  "CPU_PID=$N_WORKER attack 'attack c$CONNS: nginx limit_req' http://127.0.0.1:$N_ATTACK/api/healthz $CONNS" \
  "CPU_PID=$H_PID attack 'attack c$CONNS: haproxy stick-table' http://127.0.0.1:$H_ATTACK/api/healthz $CONNS" \
  "CPU_PID=${W_PID[attack]} attack 'attack c$CONNS: warden' http://127.0.0.1:$W_ATTACK/api/healthz $CONNS" \
  "CPU_PID=$N_WORKER attack 'attack c$SEED_CONNS: nginx limit_req' http://127.0.0.1:$N_ATTACK/api/healthz $SEED_CONNS" \
  "CPU_PID=$H_PID attack 'attack c$SEED_CONNS: haproxy stick-table' http://127.0.0.1:$H_ATTACK/api/healthz $SEED_CONNS" \
  "CPU_PID=${W_PID[attack]} attack 'attack c$SEED_CONNS: warden' http://127.0.0.1:$W_ATTACK/api/healthz $SEED_CONNS" \
  "CPU_PID=${W_PID[none]} wrk_run 'pass: warden no policy' http://127.0.0.1:$W_NONE/api/healthz" \
  "CPU_PID=${W_PID[loose]} wrk_run 'pass: warden non-triggering policy' http://127.0.0.1:$W_LOOSE/api/healthz"
summarize_rounds

cpu_medians >"$WORK/cpu"
python3 - "$RESULTS" "$WORK/hits" "$CONNS" "$SEED_CONNS" "$WORK/cpu" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
hits = {}
for l in open(sys.argv[2]):
    name, n = l.rstrip("\n").split("\t")
    hits[name] = hits[name] + "/" + n if name in hits else n
rounds = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[1] + ".rounds"))
conns, seed = sys.argv[3], sys.argv[4]
res = {r[0]: (float(r[1] or 0), r[2], r[3]) for r in rows}
print(f"{'case':<42}{'req/s':>11}{'p99':>10}{'429s (non-2xx)':>16}{'reached backend':>20}   req/s per round")
for name, (rps, p99, non) in res.items():
    print(f"{name:<42}{rps:>11.0f}{p99:>10}{non:>16}{hits.get(name, '-'):>20}   {rounds[name]}")
print()
for c in (conns, seed):
    w = res[f"attack c{c}: warden"]
    best = max(res[f"attack c{c}: nginx limit_req"][0], res[f"attack c{c}: haproxy stick-table"][0])
    note = "" if int(w[2] or 0) > 0 else "  (warden sent no 429: limiter not applied by the proxy?)"
    print(f"attack c{c:<5} warden / best(nginx, haproxy), best rounds = {w[0]/best:.3f}{note}")
base = res["pass: warden no policy"][0]
loose = res["pass: warden non-triggering policy"][0]
applied = all(int(res[f"attack c{c}: warden"][2] or 0) > 0 for c in (conns, seed))
note = "" if applied else "  (n/a: policy not applied)"
print(f"non-triggering policy / no policy, best rounds = {loose/base:.3f}{note}")
# CPU time per request: what each request costs the server, less sensitive than req/s to other
# load on this machine (the goals above are stated in req/s).
cpu = dict((l.split("\t")[0], float(l.split("\t")[1])) for l in open(sys.argv[5]))
print("server CPU per request (user+system, median of rounds):")
for name in res:
    if name in cpu:
        print(f"  {name:<42}{cpu[name]:>8.2f} us")
for c in (conns, seed):
    w = cpu.get(f"attack c{c}: warden")
    others = [cpu.get(f"attack c{c}: nginx limit_req"), cpu.get(f"attack c{c}: haproxy stick-table")]
    others = [o for o in others if o]
    if w and others:
        print(f"attack c{c:<5} CPU per 429: warden / cheapest(nginx, haproxy) = {w / min(others):.3f}")
if cpu.get("pass: warden no policy") and cpu.get("pass: warden non-triggering policy"):
    print(f"non-triggering policy CPU per request / no policy = "
          f"{cpu['pass: warden non-triggering policy'] / cpu['pass: warden no policy']:.3f}")
PY
busy_medians

# The same ratios from back-to-back pairs of short runs (see paired_ratio in bench/lib/common.sh):
# the rounds above are 5 s apart per case and this machine's slowdowns move whole rounds.
PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-16}
echo
noise_floor "noise floor: pass warden / warden" "http://127.0.0.1:$W_NONE/api/healthz" "$PAIRS" "$PAIRED_SECS"
for c in "$CONNS" "$SEED_CONNS"; do
  for other in "nginx $N_ATTACK" "haproxy $H_ATTACK"; do
    CONNS=$c paired_ratio "attack c$c warden / ${other% *}" "http://127.0.0.1:${other#* }/api/healthz" \
      "http://127.0.0.1:$W_ATTACK/api/healthz" "$PAIRS" "$PAIRED_SECS" | paired_verdict 1.0
  done
done
paired_ratio "non-triggering policy / no policy" "http://127.0.0.1:$W_NONE/api/healthz" \
  "http://127.0.0.1:$W_LOOSE/api/healthz" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.97
