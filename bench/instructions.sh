#!/usr/bin/env bash
# User-space instructions per request (valgrind callgrind), warden vs nginx vs HAProxy, on the
# paths of bench/gateway.sh and bench/local-ratelimit.sh: plain reverse proxy, direct response
# 333, and seed 000's per-IP limit rejecting with 429; for warden also the direct response
# behind jwt_authn (RequestAuthentication, every request with a valid ES256 token). Unlike req/s on this kind of 2-core VM
# (where even two runs of one binary differ by up to 25%), an instruction count does not move
# between runs, so it shows whether a change made a path cheaper. It leaves out the kernel, which is about 70% of every
# server's CPU time here and the same work for the three (one recvfrom and one send/writev per
# request and direction), and instructions are not cycles: the req/s goals are still measured by
# gateway.sh and local-ratelimit.sh.
# Each server runs alone, single-threaded, under callgrind; `warden load` sends WARMUP requests,
# the counters are zeroed, then exactly N requests over CONNS connections are counted.
# The sidecar path (warden only; root) is seed 003's: client pod -> service VIP -> iptables ->
# client sidecar -> server sidecar -> nginx, in two network namespaces; its count is both
# sidecars' instructions per request. The sidecars run as root here (capture's proxy uid 0) and
# the client as nobody: callgrind_control cannot reach a process whose uid has no user name,
# as Istio's 1337 has none on this host.
# Env: N (default 10000), WARMUP (2000), CONNS (64); KEEP=DIR keeps the callgrind profiles
# there (cg.SERVER-PATH.N, for callgrind_annotate); ONLY=warden skips nginx and HAProxy (a
# before/after comparison of two warden builds), ONLY=sidecar runs the sidecar path alone;
# WARDEN_BIN: an already built binary; PATHS: the warden paths to count (default all: proxy
# direct limit jwt lua lua-response; set, it also skips the sidecar path).
# WARDEN_ARGS: more `warden proxy` flags for the gateway paths (`--mesh-config FILE`: tracing).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx haproxy:haproxy valgrind:valgrind curl:curl python3:python3 iptables:iptables openssl:openssl
/usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null || ensure_pkgs x-python3-jwt:python3-jwt x-python3-cryptography:python3-cryptography
if [ -n "${WARDEN_BIN:-}" ]; then WARDEN=$WARDEN_BIN; else build_warden; fi
N=${N:-10000}; WARMUP=${WARMUP:-2000}
CG=$WORK/cg; mkdir -p "$CG"

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

# count NAME URL PID... — instructions per request of the callgrind'ed servers PID... (summed);
# appends a row. LOAD_IN: a command prefix to run the load from (a namespace).
LOAD_IN=()
# LOAD_ARGS: extra `warden load` arguments (the jwt path's Authorization header).
LOAD_ARGS=()
count() {
  local name=$1 url=$2 out total=0 pid f
  shift 2
  # The proxy's one-off work after start (releasing start-up code pages, 1 s in) is over
  # before anything is counted.
  sleep 3
  "${LOAD_IN[@]}" "$WARDEN" load -n "$WARMUP" -c "$CONNS" --quiet "${LOAD_ARGS[@]}" "$url" >/dev/null
  for pid in "$@"; do callgrind_control -z "$pid" >/dev/null 2>&1; done
  out=$("${LOAD_IN[@]}" "$WARDEN" load -n "$N" -c "$CONNS" --quiet "${LOAD_ARGS[@]}" "$url")
  for pid in "$@"; do callgrind_control -d "$pid" >/dev/null 2>&1; done
  sleep 0.5
  for pid in "$@"; do
    # The dump of the zeroed counters is the newest numbered file of that process.
    f=$(ls -t $(grep -l "^pid: $pid\$" "$CG/cg.$name".*) | head -1)
    total=$((total + $(grep -h '^totals:' "$f" | awk '{print $2}')))
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$f" "$KEEP/"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "$name	$((total / N))	$(grep -o 'Status codes.*' <<<"$out")" >>"$WORK/rows"
}

# under_callgrind NAME CMD... — start CMD under callgrind; LAST_PID is valgrind's pid (which is
# the server's: valgrind runs the program in its own process).
under_callgrind() {
  local name=$1; shift
  bg valgrind --tool=callgrind --callgrind-out-file="$CG/cg.$name" "$@"
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
# jwt_yaml — a RequestAuthentication with one inline ES256 key; JWT_TOKEN: a valid token for
# it (minted as bench/jwt.sh does; every request sends it, so the verified-token cache answers).
jwt_setup() {
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/es.pem" 2>/dev/null
  cat >"$WORK/mint.json" <<JSON
{"keys": {"es": {"alg": "ES256", "pem": "$WORK/es.pem"}}, "jwks": {"all": ["es"]},
 "tokens": {"es": {"kid": "es", "claims": {"iss": "https://bench.warden", "sub": "user-1",
   "aud": "api", "exp": $(( $(date +%s) + 86400 ))}}}}
JSON
  /usr/bin/python3 "$ROOT/crates/warden-proxy/tests/jwt/mint.py" "$WORK/mint.json" >"$WORK/minted.json"
  JWT_TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["es"])' "$WORK/minted.json")
  JWT_JWKS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jwks"]["all"])' "$WORK/minted.json")
}
jwt_yaml() {
  cat <<YAML
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: bench}
spec:
  jwtRules:
  - issuer: https://bench.warden
    audiences: [api]
    jwks: '$JWT_JWKS'
YAML
}
# jwt: the direct response behind jwt_authn, every request with a valid token (cached): its
# count minus direct's is what the filter costs a request that uses it.
# lua: the direct response behind seed 000's Lua script (its request phase adds a header);
# lua-response: behind a script whose response phase adds one (the waiting response path).
# Each count minus direct's is what the script costs a request.
lua_yaml() { # ENTRY-POINT HANDLE-NAME BODY
  cat <<YAML
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: bench-lua, namespace: istio-system}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: GATEWAY
      listener:
        filterChain:
          filter:
            name: envoy.filters.network.http_connection_manager
            subFilter: {name: envoy.filters.http.router}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          inlineCode: |
            function $1($2)
$3
            end
YAML
}
SEED_LUA='              local path = request_handle:headers():get(":path")
              local method = request_handle:headers():get(":method")
              local params_start = string.find(path, "?")
              if params_start then
                path = string.sub(path, 1, params_start - 1)
              end
              request_handle:headers():add("x-envoy-original-limit-rate-path", method .. path)'
if [ "${ONLY:-}" = sidecar ]; then WARDEN_PATHS=()
else read -r -a WARDEN_PATHS <<<"${PATHS:-proxy direct limit jwt lua lua-response}"; fi
read -r -a EXTRA_WARDEN_ARGS <<<"${WARDEN_ARGS:-}"
for path in "${WARDEN_PATHS[@]}"; do
  port=$(free_port); mkdir -p "$WORK/w-$path"
  LOAD_ARGS=()
  case $path in
    proxy) gateway_to_backend_yaml "$port" "$BACKEND" >"$WORK/w-$path/gateway.yaml" ;;
    direct) direct_yaml "$port" >"$WORK/w-$path/gateway.yaml" ;;
    jwt) jwt_setup
         { direct_yaml "$port"; jwt_yaml; } >"$WORK/w-$path/gateway.yaml"
         LOAD_ARGS=(-H "Authorization: Bearer $JWT_TOKEN") ;;
    lua) { direct_yaml "$port"; lua_yaml envoy_on_request request_handle "$SEED_LUA"; } >"$WORK/w-$path/gateway.yaml" ;;
    lua-response) { direct_yaml "$port"
                    lua_yaml envoy_on_response response_handle '              response_handle:headers():add("x-lua", "1")'
                  } >"$WORK/w-$path/gateway.yaml" ;;
    limit) gateway_to_backend_yaml "$port" "$BACKEND" >"$WORK/w-$path/gateway.yaml"
           per_ip_policy_yaml 300 Minute >"$WORK/w-$path/policy.yaml" ;;
  esac
  under_callgrind "warden-$path" "$WARDEN" proxy -c "$WORK/w-$path" --concurrency 1 \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$(free_port)" --no-watch "${EXTRA_WARDEN_ARGS[@]}"
  wait_tcp "$port"
  count "warden-$path" "http://127.0.0.1:$port/" "$LAST_PID"
done
LOAD_ARGS=()

# The sidecar path: two pods joined by a veth, capture in both, both sidecars under callgrind.
sidecar_path() {
  local cli=wdi-cli-$$ srv=wdi-srv-$$ cli_ip=10.233.1.1 srv_ip=10.233.1.2 vip=10.96.0.21
  SIDECAR_NS=("$cli" "$srv")
  ip netns add "$cli"; ip netns add "$srv"
  ip -n "$cli" link set lo up; ip -n "$srv" link set lo up
  ip link add wdic$$ netns "$cli" type veth peer name wdis$$ netns "$srv"
  ip -n "$cli" addr add $cli_ip/24 dev wdic$$; ip -n "$srv" addr add $srv_ip/24 dev wdis$$
  ip -n "$cli" link set wdic$$ up; ip -n "$srv" link set wdis$$ up
  ip -n "$cli" route add default via $srv_ip
  mkdir -p "$WORK/pod-nginx"
  cat >"$WORK/pod-nginx/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/pod-nginx/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 8080; location / { return 200 "hello from backend\n"; } } }
NGX
  bg nsenter --net=/run/netns/"$srv" -- nginx -p "$WORK/pod-nginx" -c "$WORK/pod-nginx/nginx.conf"
  cat >"$WORK/mesh.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: default}
spec:
  clusterIP: $vip
  selector: {app: backend}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: backend-1, namespace: default, labels: {app: backend}}
spec: {containers: [{name: backend}]}
status: {podIP: $srv_ip}
YAML
  nsenter --net=/run/netns/"$cli" -- "$WARDEN" capture --proxy-uid 0 >/dev/null
  nsenter --net=/run/netns/"$srv" -- "$WARDEN" capture --proxy-uid 0 >/dev/null
  local pids=() pod
  # pod: namespace, IP, label
  for pod in "$srv $srv_ip app=backend" "$cli $cli_ip app=client"; do
    set -- $pod
    bg env RUST_LOG=warn nsenter --net=/run/netns/"$1" -- \
      valgrind --tool=callgrind --callgrind-out-file="$CG/cg.warden-sidecar.%p" \
      "$WARDEN" proxy --mode sidecar -c "$WORK/mesh.yaml" --concurrency 1 --no-watch \
      --admin 127.0.0.1:15000 --pod-ip "$2" --label "$3"
    pids+=("$LAST_PID")
  done
  LOAD_IN=(nsenter --net=/run/netns/"$cli" --setuid 65534 --setgid 65534 --)
  for _ in $(seq 600); do "${LOAD_IN[@]}" curl -sf -o /dev/null "http://$vip/" && break; sleep 0.1; done
  count warden-sidecar "http://$vip/" "${pids[@]}"
  LOAD_IN=()
}
SIDECAR_NS=()
teardown() {
  for ns in "${SIDECAR_NS[@]:-}"; do
    [ -n "$ns" ] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  cleanup
}
trap teardown EXIT
if [ -n "${PATHS:-}" ] && [ "${ONLY:-}" != sidecar ]; then :
elif [ "$(id -u)" = 0 ]; then sidecar_path; else echo "sidecar path skipped: needs root (namespaces)" >&2; fi

if [ -z "${ONLY:-}" ]; then
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

fi

echo "# instructions.sh $(date -u +%FT%TZ): user-space instructions per request (callgrind), $N requests over $CONNS connections after $WARMUP warm-up"
python3 - "$WORK/rows" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, ir, codes = line.rstrip("\n").split("\t")
    rows[name] = (int(ir), codes)
print(f"{'path':<14}{'warden':>10}{'nginx':>10}{'haproxy':>10}{'warden/best':>13}   status codes (warden | nginx | haproxy)")
for path in ("proxy", "direct", "limit", "jwt", "lua", "lua-response", "sidecar"):
    w, n, h = (rows.get(f"{who}-{path}", (0, "-")) for who in ("warden", "nginx", "haproxy"))
    best = min(x[0] for x in (n, h)) if n[0] and h[0] else 0
    ratio = f"{w[0] / best:.3f}" if best else "-"
    cell = lambda x: str(x[0]) if x[0] else "-"
    print(f"{path:<14}{cell(w):>10}{cell(n):>10}{cell(h):>10}{ratio:>13}   {w[1]} | {n[1]} | {h[1]}")
PY
