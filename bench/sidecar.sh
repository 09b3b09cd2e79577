#!/usr/bin/env bash
# Sidecar bench (issue 22): seed 003's experiment on this machine. An nginx service (1 worker,
# 1 KiB responses) in a "server pod" namespace, the load client in a "client pod" namespace,
# joined by a veth. Both pods have `warden capture` rules and a `warden proxy --mode sidecar`
# (1 worker, uid 1337). The same client and nginx are measured two ways in one run:
#   direct:   client -> server pod IP:8081 (a port both pods' capture excludes)
#   sidecars: client -> service VIP:80 -> client sidecar -> server sidecar -> nginx :8080
# Reports max closed-loop QPS (wrk -t1 -c$CONNS, keep-alive and a new connection per request,
# back-to-back pairs), and at a fixed $RATE rps open loop (warden load, latency from the intended
# send time): added p50/p99, each sidecar's CPU per 1000 rps (also with the client on the
# sidecars' core) and RSS (and its private part). Env: PAIRS (8), SECS (3),
# RATE (2000), OPEN_SECS (10), CONNS (64). Root only (namespaces, iptables inside them).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs nginx:nginx wrk:wrk python3:python3 iptables:iptables
build_warden
[ "$(id -u)" = 0 ] || { echo "sidecar.sh needs root (network namespaces)" >&2; exit 1; }

# The sidecars run as uid 1337 and read their config from $WORK.
chmod 755 "$WORK"
PAIRS=${PAIRS:-8}
SECS=${SECS:-3}
RATE=${RATE:-2000}
OPEN_SECS=${OPEN_SECS:-10}
CLI=wdb-cli-$$ SRV=wdb-srv-$$
CLI_IP=10.232.1.1 SRV_IP=10.232.1.2 VIP=10.96.0.20
teardown() {
  for ns in "$CLI" "$SRV"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  cleanup
}
trap teardown EXIT

ip netns add "$CLI"; ip netns add "$SRV"
ip -n "$CLI" link set lo up; ip -n "$SRV" link set lo up
ip link add wdbc$$ netns "$CLI" type veth peer name wdbs$$ netns "$SRV"
ip -n "$CLI" addr add $CLI_IP/24 dev wdbc$$; ip -n "$SRV" addr add $SRV_IP/24 dev wdbs$$
ip -n "$CLI" link set wdbc$$ up; ip -n "$SRV" link set wdbs$$ up
ip -n "$CLI" route add default via $SRV_IP
# A new connection per request makes ~250k conntrack entries (capture is NAT); at the default
# 120 s TIME_WAIT they fill the host-wide table (262144) and new connections are dropped.
for ns in "$CLI" "$SRV"; do
  ip netns exec "$ns" sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_time_wait=2 2>/dev/null || true
done
in_cli() { nsenter --net=/run/netns/"$CLI" -- "$@"; }
in_srv() { nsenter --net=/run/netns/"$SRV" -- "$@"; }

# nginx: 1 worker, 1 KiB body, on 8080 (meshed) and 8081 (direct).
mkdir -p "$WORK/nginx"
body=$(head -c 1024 /dev/zero | tr '\0' 'x')
cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $WORK/nginx/pid; error_log stderr error;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000;
  server { listen 8080 reuseport; listen 8081 reuseport;
    location / { default_type text/plain; return 200 "$body"; } } }
NGX
bg_server nsenter --net=/run/netns/"$SRV" -- nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"

cat >"$WORK/mesh.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: nginx, namespace: default}
spec:
  clusterIP: $VIP
  selector: {app: nginx}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: nginx-1, namespace: default, labels: {app: nginx}}
spec: {containers: [{name: nginx}]}
status: {podIP: $SRV_IP}
YAML
in_cli "$WARDEN" capture --proxy-uid 1337 --exclude-outbound-ports 8081 >/dev/null
in_srv "$WARDEN" capture --proxy-uid 1337 --exclude-inbound-ports 8081 >/dev/null
sidecar() { # NS POD_IP LABEL
  bg_server env RUST_LOG=warn nsenter --net=/run/netns/"$1" --setuid 1337 --setgid 1337 -- \
    "$WARDEN" proxy --mode sidecar -c "$WORK/mesh.yaml" --concurrency 1 --no-watch \
    --admin 127.0.0.1:15000 --pod-ip "$2" --label "$3"
}
sidecar "$SRV" $SRV_IP app=nginx; SRV_SIDECAR=$LAST_PID
sidecar "$CLI" $CLI_IP app=client; CLI_SIDECAR=$LAST_PID
for _ in $(seq 100); do
  in_cli curl -s -o /dev/null "http://$VIP/" && in_cli curl -s -o /dev/null "http://$SRV_IP:8081/" && break
  sleep 0.1
done
DIRECT="http://$SRV_IP:8081/"
MESH="http://$VIP/"
[ "$(in_cli curl -s "$MESH" | wc -c)" = 1024 ] || { echo "no 1 KiB answer through the sidecars" >&2; exit 1; }

echo "# sidecar.sh $(date -u +%FT%TZ): $(nproc) cores, background busy $(background_busy), pinned=$PIN (nginx + sidecars on cpu0, client on cpu1)"
echo "# nginx 1 worker, 1 KiB bodies; sidecars 1 worker each; wrk -t1 -c$CONNS, $PAIRS pairs x ${SECS}s"
PIN_CLIENT=("${CLIENT_CPU[@]}")
# paired_ratio runs wrk through CLIENT_CPU: from the client pod.
CLIENT_CPU=(nsenter --net=/run/netns/"$CLI" -- "${PIN_CLIENT[@]}")

echo
echo "max closed-loop QPS (wrk), sidecars / direct (seed 003: 88% on Istio 1.3.3, 91% on 1.4.8):"
rps_once() { "${CLIENT_CPU[@]}" wrk -t1 -c"$CONNS" -d"${SECS}s" "$@" | awk '/Requests\/sec/ {print $2}'; }
# closed_loop MODE — one pair for scale, then the paired ratio (keepalive, or close: a new
# connection per request through wrk's `Connection: close` header).
closed_loop() {
  local mode=$1 label="keep-alive, sidecars / direct"
  PAIRED_WRK_ARGS=()
  if [ "$mode" = close ]; then
    PAIRED_WRK_ARGS=(-H "Connection: close"); label="new connection per request, sidecars / direct"
  fi
  local d m
  d=$(rps_once "${PAIRED_WRK_ARGS[@]}" "$DIRECT"); m=$(rps_once "${PAIRED_WRK_ARGS[@]}" "$MESH")
  printf '  %-10s direct %9.0f rps   sidecars %9.0f rps (one pair, for scale)\n' "$mode" "$d" "$m"
  paired_ratio "$label" "$DIRECT" "$MESH" "$PAIRS" "$SECS" | paired_verdict - | sed 's/^/  /'
  PAIRED_WRK_ARGS=()
}
closed_loop keepalive

echo
echo "open loop at $RATE rps for ${OPEN_SECS}s (warden load -c 16, keep-alive; latency from intended send time):"
# open_loop NAME URL CPU PIDS... — one run of warden load pinned to CPU; prints the summary line,
# then each PID's CPU per 1000 rps over the run.
open_loop() {
  local name=$1 url=$2 cpu=$3; shift 3
  local t0=() pid
  for pid in "$@"; do t0+=("$(cpu_ticks "$pid")"); done
  in_cli taskset -c "$cpu" "$WARDEN" load "$url" -c 16 --qps "$RATE" -t "${OPEN_SECS}s" --quiet \
    --json "$WORK/$name.json" >/dev/null 2>&1 || true
  python3 - "$WORK/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = {x["Percentile"]: x["Value"] * 1000 for x in r["DurationHistogram"]["Percentiles"]}
codes = r["RetCodes"]
print(f"{sys.argv[2]}\t{r['ActualQPS']:.0f}\t{p.get(50, 0):.3f}\t{p.get(99, 0):.3f}\t{codes}")
PY
  local i=0
  for pid in "$@"; do
    python3 -c "print('cpu\t$pid\t%.4f' % ((($(cpu_ticks "$pid") - ${t0[$i]}) / $(getconf CLK_TCK)) / $OPEN_SECS / ($RATE / 1000.0)))"
    i=$((i + 1))
  done
}
# Latency: the client on its own core (as in the closed-loop runs). CPU is read twice: in that
# run, and with the client on the sidecars' core. On this VM a wakeup of a task sleeping on the
# other core costs the waker ~15 us (an IPI through the hypervisor); with the client apart it
# falls on the client sidecar for every response, as it falls on nginx in the direct run. The
# one-core figure is each sidecar's own work, wherever the scheduler places its peers.
C=1; S=0
[ "$PIN" = 1 ] || { C=0-$(( $(nproc) - 1 )); S=$C; }
D=$(open_loop direct "$DIRECT" "$C")
M=$(open_loop sidecars "$MESH" "$C" "$CLI_SIDECAR" "$SRV_SIDECAR")
O=$(open_loop one-core "$MESH" "$S" "$CLI_SIDECAR" "$SRV_SIDECAR")
python3 - "$D" "$M" "$O" "$CLI_SIDECAR" "$SRV_SIDECAR" <<'PY'
import sys
d = sys.argv[1].split("\t")
def run(text):
    lines = text.splitlines()
    return lines[0].split("\t"), {l.split("\t")[1]: float(l.split("\t")[2]) for l in lines[1:]}
m, cpu_split = run(sys.argv[2])
o, cpu_one = run(sys.argv[3])
cli, srv = sys.argv[4], sys.argv[5]
def mem(pid):
    f = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
    kb = lambda k: int(f[k].split()[0])
    return kb("VmRSS") / 1024, kb("RssAnon") / 1024
print(f"  direct    {d[1]:>6} rps  p50 {d[2]} ms  p99 {d[3]} ms  codes {d[4]}")
print(f"  sidecars  {m[1]:>6} rps  p50 {m[2]} ms  p99 {m[3]} ms  codes {m[4]}")
print(f"  one core  {o[1]:>6} rps  p50 {o[2]} ms  p99 {o[3]} ms  codes {o[4]}  (client on the sidecars' core)")
add50, add99 = float(m[2]) - float(d[2]), float(m[3]) - float(d[3])
v = lambda ok: "PASS" if ok else "FAIL"
print(f"  the pair adds p50 {add50:+.3f} ms, p99 {add99:+.3f} ms  [{v(add99 <= 0.3)} p99 <= +0.3 ms; Envoy +2.65 ms at p90]")
for name, pid in (("client sidecar", cli), ("server sidecar", srv)):
    c1, c2 = cpu_one.get(pid, 0.0), cpu_split.get(pid, 0.0)
    rss, anon = mem(pid)
    print(f"  {name}: {c1:.4f} vCPU per 1000 rps (one core; {c2:.4f} with the client apart) "
          f"[{v(c1 <= 0.03)} <= 0.03; Envoy 0.20, ztunnel 0.06], "
          f"RSS {rss:.1f} MiB of which private {anon:.1f} [{v(rss <= 15)} <= 15 MiB; Envoy 60, ztunnel 12]")
PY

echo
echo "new connection per request (seed 003's vegeta ran with keep-alive off):"
closed_loop close

