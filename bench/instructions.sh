#!/usr/bin/env bash
# User-space instructions per request (valgrind callgrind), warden vs nginx vs HAProxy, on the
# paths of bench/gateway.sh and bench/local-ratelimit.sh: plain reverse proxy, direct response
# 333, and seed 000's per-IP limit rejecting with 429. Unlike req/s on this kind of 2-core VM
# (where even two runs of one binary differ by up to 25%), an instruction count does not move
# between runs, so it shows whether a change made a path cheaper. It leaves out the kernel, which is about 70% of every
# server's CPU time here and the same work for the three (one recvfrom and one send/writev per
# request and direction), and instructions are not cycles: the req/s goals are still measured by
# gateway.sh and local-ratelimit.sh.
# Each server runs alone, single-threaded, under callgrind; `warden load` sends WARMUP requests,
# the counters are zeroed, then exactly N requests over CONNS connections are counted.
# Env: N (default 10000), WARMUP (2000), CONNS (64); KEEP=DIR keeps the callgrind profiles
# there (cg.SERVER-PATH.N, for callgrind_annotate).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx haproxy:haproxy valgrind:valgrind curl:curl python3:python3
build_warden
N=${N:-10000}; WARMUP=${WARMUP:-2000}

BACKEND=$(free_port)
mkdir -p "$WORK/nginx-backend"
cat >"$WORK/nginx-backend/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx-backend/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$BACKEND; location / { return 200 "hello from backend\n"; } } }
NGX
bg nginx -p "$WORK/nginx-backend" -c "$WORK/nginx-backend/nginx.conf"
wait_http "http://127.0.0.1:$BACKEND/"

# count NAME URL PID — instructions per request of the callgrind'ed server PID; appends a row.
count() {
  local name=$1 url=$2 pid=$3 out total
  "$WARDEN" load -n "$WARMUP" -c "$CONNS" --quiet "$url" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  out=$("$WARDEN" load -n "$N" -c "$CONNS" --quiet "$url")
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 0.5
  # The dump of the zeroed counters is the newest numbered file of this run.
  total=$(grep -h '^totals:' "$(ls -t "$WORK/cg.$name".* | head -1)" | awk '{print $2}')
  echo "$name	$((total / N))	$(grep -o 'Status codes.*' <<<"$out")" >>"$WORK/rows"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$(ls -t "$WORK/cg.$name".* | head -1)" "$KEEP/"; fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# under_callgrind NAME CMD... — start CMD under callgrind; LAST_PID is valgrind's pid (which is
# the server's: valgrind runs the program in its own process).
under_callgrind() {
  local name=$1; shift
  bg valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$name" "$@"
}

# wait_tcp PORT — until something accepts on 127.0.0.1:PORT (60 s: valgrind starts slowly).
wait_tcp() {
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "timeout waiting for port $1" >&2; return 1
}

# warden: one process per path, so each count holds only that path's requests.
direct_yaml() { # PORT
  gateway_to_backend_yaml "$1" "$BACKEND" | python3 -c '
import sys
text = sys.stdin.read()
print(text.replace("  - route: [{destination: {host: backend.local, port: {number: 80}}}]",
                   "  - directResponse: {status: 333, body: {string: test}}"))'
}
for path in proxy direct limit; do
  port=$(free_port); mkdir -p "$WORK/w-$path"
  case $path in
    proxy) gateway_to_backend_yaml "$port" "$BACKEND" >"$WORK/w-$path/gateway.yaml" ;;
    direct) direct_yaml "$port" >"$WORK/w-$path/gateway.yaml" ;;
    limit) gateway_to_backend_yaml "$port" "$BACKEND" >"$WORK/w-$path/gateway.yaml"
           per_ip_policy_yaml 300 Minute >"$WORK/w-$path/policy.yaml" ;;
  esac
  under_callgrind "warden-$path" "$WARDEN" proxy -c "$WORK/w-$path" --concurrency 1 \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$(free_port)" --no-watch
  wait_tcp "$port"
  count "warden-$path" "http://127.0.0.1:$port/" "$LAST_PID"
done

N_PROXY=$(free_port); N_DIRECT=$(free_port); N_LIMIT=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1; master_process off; daemon off; pid $WORK/nginx/pid; error_log stderr crit;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=300r/m;
  upstream backend { server 127.0.0.1:$BACKEND; keepalive 128; }
  server { listen 127.0.0.1:$N_PROXY;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$N_DIRECT; location / { default_type text/plain; return 333 "test"; } }
  server { listen 127.0.0.1:$N_LIMIT;
    limit_req zone=perip burst=299 nodelay; limit_req_status 429; limit_req_log_level info;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
for path in proxy direct limit; do
  under_callgrind "nginx-$path" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
  case $path in proxy) port=$N_PROXY ;; direct) port=$N_DIRECT ;; limit) port=$N_LIMIT ;; esac
  wait_tcp "$port"
  count "nginx-$path" "http://127.0.0.1:$port/" "$LAST_PID"
done

H_PROXY=$(free_port); H_DIRECT=$(free_port); H_LIMIT=$(free_port)
{ haproxy_head 4096; cat <<HAP; } >"$WORK/haproxy.cfg"
  http-reuse always
frontend proxy
  bind 127.0.0.1:$H_PROXY
  default_backend be
frontend direct
  bind 127.0.0.1:$H_DIRECT
  http-request return status 333 content-type text/plain string test
frontend limit
  bind 127.0.0.1:$H_LIMIT
$(haproxy_per_ip_limit 300)
  default_backend be
backend be
  server s1 127.0.0.1:$BACKEND
HAP
for path in proxy direct limit; do
  under_callgrind "haproxy-$path" haproxy -db -f "$WORK/haproxy.cfg"
  case $path in proxy) port=$H_PROXY ;; direct) port=$H_DIRECT ;; limit) port=$H_LIMIT ;; esac
  wait_tcp "$port"
  count "haproxy-$path" "http://127.0.0.1:$port/" "$LAST_PID"
done

echo "# instructions.sh $(date -u +%FT%TZ): user-space instructions per request (callgrind), $N requests over $CONNS connections after $WARMUP warm-up"
python3 - "$WORK/rows" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, ir, codes = line.rstrip("\n").split("\t")
    rows[name] = (int(ir), codes)
print(f"{'path':<8}{'warden':>10}{'nginx':>10}{'haproxy':>10}{'warden/best':>13}   status codes (warden | nginx | haproxy)")
for path in ("proxy", "direct", "limit"):
    w, n, h = (rows.get(f"{who}-{path}", (0, "?")) for who in ("warden", "nginx", "haproxy"))
    best = min(n[0], h[0]) or 1
    print(f"{path:<8}{w[0]:>10}{n[0]:>10}{h[0]:>10}{w[0] / best:>13.3f}   {w[1]} | {n[1]} | {h[1]}")
PY
