#!/usr/bin/env bash
# TLS bench: warden (1 worker) vs nginx (1 worker), same certificates, TLS 1.3,
# both answering 200 "hello" themselves (no upstream). Two measures:
#  - new handshakes/s: `openssl s_time -new` (a full handshake and one GET per connection, no
#    resumption), CLIENTS processes in parallel on the client core, ECDSA P-256 and RSA 2048
#    certificates; with the server's CPU time per handshake (user + system, /proc);
#  - keep-alive HTTPS requests/s: wrk over TLS (ECDSA certificate).
# Pinned (PIN=1), the s_time clients fill their core before the server's is full (the per-pair
# lines say how much of a core each server used), so both servers answer what the clients offer
# and the handshake rates tie; PIN=0 puts all on both cores, where the server that spends less
# CPU per handshake leaves more to the clients and completes more: run both.
# Each comparison is PAIRS back-to-back pairs of short runs (order swapped every pair), the
# median of per-pair ratios with a bootstrap interval (bench/lib/paired.py). Env: PAIRS (8),
# SECS (s per run, 3), CLIENTS (4), CONNS (64), PIN (1: servers on CPU 0, clients on CPU 1).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx wrk:wrk openssl:openssl curl:curl python3:python3
# WARDEN=path benches a binary already built (else it is built here).
if [ -z "${WARDEN:-}" ]; then build_warden; fi
PAIRS=${PAIRS:-8}; SECS=${SECS:-3}; CLIENTS=${CLIENTS:-4}

# Certificates: a CA, and one leaf per key type for bench.local (and 127.0.0.1).
cd "$WORK"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
for kind in ecdsa rsa; do
  if [ $kind = ecdsa ]; then key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256); else key=(-newkey rsa:2048); fi
  openssl req -new "${key[@]}" -nodes -subj /CN=bench.local -keyout $kind.key -out $kind.csr 2>/dev/null
  printf 'subjectAltName=DNS:bench.local,IP:127.0.0.1\n' >san.ext
  openssl x509 -req -in $kind.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext \
    -out $kind.crt 2>/dev/null
done
cd - >/dev/null

W_ECDSA=$(free_port); W_RSA=$(free_port); W_ADMIN=$(free_port)
N_ECDSA=$(free_port); N_RSA=$(free_port)

mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx/pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; ssl_protocols TLSv1.3; ssl_session_tickets off;
  ssl_session_cache off;
  server { listen 127.0.0.1:$N_ECDSA ssl; ssl_certificate $WORK/ecdsa.crt; ssl_certificate_key $WORK/ecdsa.key;
    location / { default_type text/plain; return 200 "hello"; } }
  server { listen 127.0.0.1:$N_RSA ssl; ssl_certificate $WORK/rsa.crt; ssl_certificate_key $WORK/rsa.key;
    location / { default_type text/plain; return 200 "hello"; } } }
NGX
bg_server nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
N_MASTER=$LAST_PID

cat >"$WORK/warden.yaml" <<YAML
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: bench}
spec:
  servers:
  - port: {number: $W_ECDSA, name: https-ecdsa, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, serverCertificate: $WORK/ecdsa.crt, privateKey: $WORK/ecdsa.key, minProtocolVersion: TLSV1_3}
  - port: {number: $W_RSA, name: https-rsa, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, serverCertificate: $WORK/rsa.crt, privateKey: $WORK/rsa.key, minProtocolVersion: TLSV1_3}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: hello}
spec:
  hosts: ["*"]
  gateways: [bench]
  http:
  - directResponse: {status: 200, body: {string: hello}}
YAML
bg_server "$WARDEN" proxy -c "$WORK/warden.yaml" --concurrency 1 --listen-host 127.0.0.1 --admin "127.0.0.1:$W_ADMIN"
WPID=$LAST_PID

for p in $W_ECDSA $W_RSA $N_ECDSA $N_RSA; do
  for _ in $(seq 100); do curl -s -o /dev/null --cacert "$WORK/ca.crt" "https://127.0.0.1:$p/" && break; sleep 0.1; done
  echo "port $p: $(curl -s --cacert "$WORK/ca.crt" -w ' %{http_code} %{http_version}' "https://127.0.0.1:$p/")" >&2
done
N_WORKER=$(pgrep -P "$N_MASTER" | head -1); N_WORKER=${N_WORKER:-$N_MASTER}

# handshakes PORT PID — "rate<TAB>server CPU us per handshake" from CLIENTS parallel s_time runs.
handshakes() {
  local port=$1 pid=$2 t0 t1 i total=0
  t0=$(cpu_ticks "$pid")
  for i in $(seq "$CLIENTS"); do
    "${CLIENT_CPU[@]}" openssl s_time -connect "127.0.0.1:$port" -new -tls1_3 -time "$SECS" \
      -CAfile "$WORK/ca.crt" -www / >"$WORK/stime.$i" 2>&1 &
  done
  wait
  t1=$(cpu_ticks "$pid")
  for i in $(seq "$CLIENTS"); do
    n=$(awk '/connections in [0-9]+ real seconds/ {print $1; exit}' "$WORK/stime.$i")
    total=$((total + ${n:-0}))
  done
  python3 -c "print(f'{$total / $SECS:.1f}\t{($t1 - $t0) * 1e6 / $(getconf CLK_TCK) / max(1, $total):.1f}')"
}

# busy_share "RATE<TAB>US" — how much of one core the server used: under 100% when pinned means
# the clients' core ran out first and the rate measures the clients.
busy_share() { python3 -c "print(f'server {${1%%$'\t'*} * ${1#*$'\t'} / 1e4:.0f}% of a core')"; }

# paired_handshakes NAME NGINX_PORT WARDEN_PORT — paired_ratio's line for handshakes/s (warden /
# nginx), and the CPU per handshake of each (medians) to $WORK/cpu.WARDEN_PORT.
paired_handshakes() {
  local name=$1 np=$2 wp=$3 i rn rw ratios=() cn=() cw=()
  for i in $(seq "$PAIRS"); do
    if ((i % 2)); then rn=$(handshakes "$np" "$N_WORKER"); rw=$(handshakes "$wp" "$WPID")
    else rw=$(handshakes "$wp" "$WPID"); rn=$(handshakes "$np" "$N_WORKER"); fi
    ratios+=("$(python3 -c "print(f'{${rw%%$'\t'*} / max(1.0, ${rn%%$'\t'*}):.3f}')")")
    cn+=("${rn#*$'\t'}"); cw+=("${rw#*$'\t'}")
    echo "  $name pair $i: nginx ${rn%%$'\t'*}/s (${rn#*$'\t'} us CPU each, $(busy_share "$rn")), warden ${rw%%$'\t'*}/s (${rw#*$'\t'} us, $(busy_share "$rw"))" >&2
  done
  python3 - "$name" "${cn[*]}" "${cw[*]}" >"$WORK/cpu.$wp" <<'PY'
import statistics, sys
name, cn, cw = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
n, w = statistics.median(cn), statistics.median(cw)
print(f"{name}: server CPU per handshake, median of pairs: nginx {n:.1f} us, warden {w:.1f} us, "
      f"warden / nginx = {w / n:.3f}  [{'PASS' if w <= n else 'FAIL'}: goal <= 1.0]")
PY
  python3 - "$name" "${ratios[@]}" <<'PY'
import statistics, sys
name, ratios = sys.argv[1], [float(r) for r in sys.argv[2:]]
print(f"{name}\t{statistics.median(ratios):.3f}\t{' '.join(f'{r:.3f}' for r in ratios)}")
PY
}

bench_header
echo "# s_time: $CLIENTS clients in parallel, ${SECS}s per run, $PAIRS pairs; wrk -c$CONNS ${SECS}s runs"
paired_handshakes "TLS 1.3 new handshakes/s ECDSA P-256, warden / nginx" "$N_ECDSA" "$W_ECDSA" | paired_verdict 1.0
cat "$WORK/cpu.$W_ECDSA"
paired_handshakes "TLS 1.3 new handshakes/s RSA 2048, warden / nginx" "$N_RSA" "$W_RSA" | paired_verdict 1.0
cat "$WORK/cpu.$W_RSA"
paired_ratio "keep-alive HTTPS req/s (ECDSA), warden / nginx" "https://127.0.0.1:$N_ECDSA/" \
  "https://127.0.0.1:$W_ECDSA/" "$PAIRS" "$SECS" | paired_verdict 1.0
echo "one run each, for scale:"
CPU_PID=$N_WORKER wrk_run "keep-alive HTTPS: nginx" "https://127.0.0.1:$N_ECDSA/"
CPU_PID=$WPID wrk_run "keep-alive HTTPS: warden" "https://127.0.0.1:$W_ECDSA/"
cpu_medians | sed 's/^/  server CPU us per request: /'
