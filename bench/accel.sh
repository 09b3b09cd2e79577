#!/usr/bin/env bash
# eBPF same-node acceleration bench: seed 002's experiment on this machine. A client
# pod and a server pod (network namespaces joined by a veth, each in its own child cgroup2)
# on one "node"; the server pod runs `warden echo` (HTTP 8080, TCP 8078), both pods have
# `warden capture` rules and a sidecar (uid 1337, 1 worker). The seed's fortio runs, as
# `warden load` (fortio's flags; -qps is --qps here):
#   warden load -c 64 --qps 0 -t 30s http://server:8080/echo?size=1024
#   warden load -c 64 --qps 0 -t 30s --payload-size 1024 tcp://server:8078
# in three modes, alternating within each round (the order rotates every round):
#   nomesh  client -> server pod directly (ports 9080/9078, excluded from capture; no sidecar)
#   off     client -> VIP -> iptables -> client sidecar -> server sidecar -> app
#   on      the same sidecars started with --accel --capture ebpf: connect4 captures, sk_msg
#           short-circuits every leg (the iptables rules stay installed, as for off-node callers)
#   onsc    --accel-legs sidecars: only sidecar -> sidecar short-circuited, the apps' sockets
#           stay plain TCP (safe for blocking readers)
# Sidecars are restarted for every run, so no pooled connection crosses from one mode to the
# other. Reports per mode the median over rounds of QPS, average and p99 latency, CPU per
# request (both pods, and the sidecars' part), and per round
# the on/off and on/nomesh ratios of two runs seconds apart (median, bootstrap 90% interval as
# bench/lib/paired.py computes it, verdict against the seed's numbers).
# Env: ROUNDS (3), SECS (30), CONNS (64), CONCURRENCY (1, each sidecar's workers), WARDEN_BIN.
# Root only.
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs python3:python3 iptables:iptables curl:curl pgrep:procps
# WARDEN_BIN: an already built binary (a quick check with a debug build), else a release build.
if [ -n "${WARDEN_BIN:-}" ]; then WARDEN=$WARDEN_BIN; else build_warden; fi
[ "$(id -u)" = 0 ] || { echo "accel.sh needs root (namespaces, cgroups, BPF)" >&2; exit 1; }

ROUNDS=${ROUNDS:-3}
SECS=${SECS:-30}
CONCURRENCY=${CONCURRENCY:-1}
CLI=wdb-acli-$$ SRV=wdb-asrv-$$
CLI_IP=10.233.1.1 SRV_IP=10.233.1.2 VIP=10.96.0.30
CG_ROOT=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
[ -n "$CG_ROOT" ] || { echo "no cgroup2 hierarchy is mounted" >&2; exit 1; }
CG_CLI=$CG_ROOT/wdb-accel-cli-$$ CG_SRV=$CG_ROOT/wdb-accel-srv-$$
# Outside $WORK (mode 0700): the sidecars (uid 1337) mount warden's bpffs here.
BPFFS=/run/wdb-accel-bpffs-$$
CAPS=+bpf,+net_admin,+sys_admin

kill_cgroup() { # CGROUP — kill every process in it, wait until it is empty
  local pid
  for _ in $(seq 50); do
    local pids; pids=$(cat "$1/cgroup.procs" 2>/dev/null) # cgroupfs files have size 0
    [ -n "$pids" ] || return 0
    for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
    sleep 0.05
  done
}
teardown() {
  for cg in "$CG_CLI" "$CG_SRV"; do [ -d "$cg" ] && kill_cgroup "$cg"; done
  [ -n "${WARDEN:-}" ] && "$WARDEN" accel disable --clean --bpffs "$BPFFS" >/dev/null 2>&1 || true
  grep -q " $BPFFS bpf " /proc/mounts && umount -l "$BPFFS" 2>/dev/null || true
  for ns in "$CLI" "$SRV"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rmdir "$CG_CLI" "$CG_SRV" "$BPFFS" 2>/dev/null || true
  cleanup
}
trap teardown EXIT

ip netns add "$CLI"; ip netns add "$SRV"
ip -n "$CLI" link set lo up; ip -n "$SRV" link set lo up
ip link add wdac$$ netns "$CLI" type veth peer name wdas$$ netns "$SRV"
ip -n "$CLI" addr add $CLI_IP/24 dev wdac$$; ip -n "$SRV" addr add $SRV_IP/24 dev wdas$$
ip -n "$CLI" link set wdac$$ up; ip -n "$SRV" link set wdas$$ up
ip -n "$CLI" route add default via $SRV_IP
mkdir "$CG_CLI" "$CG_SRV" "$BPFFS"
chmod 755 "$WORK" # the sidecars (uid 1337) read the config from it
chown 1337:1337 "$BPFFS"
# in_pod CGROUP NS CMD... — into the pod's cgroup first, then its namespace (`ip netns exec`
# would move the process to the cgroup2 root, out of reach of the programs).
in_pod() {
  local cg=$1 ns=$2; shift 2
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" nsenter --net=/run/netns/"$ns" -- "$@"
}

in_pod "$CG_SRV" "$SRV" "$WARDEN" echo --http 0.0.0.0:8080 --tcp 0.0.0.0:8078 >"$WORK/echo.log" 2>&1 &
in_pod "$CG_SRV" "$SRV" "$WARDEN" echo --http 0.0.0.0:9080 --tcp 0.0.0.0:9078 >"$WORK/echo-direct.log" 2>&1 &

cat >"$WORK/mesh.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: server, namespace: default}
spec:
  clusterIP: $VIP
  selector: {app: server}
  ports:
  - {name: http-echo, port: 8080, targetPort: 8080}
  - {name: tcp-echo, port: 8078, targetPort: 8078}
---
apiVersion: v1
kind: Pod
metadata: {name: server-1, namespace: default, labels: {app: server}}
spec: {containers: [{name: server}]}
status: {podIP: $SRV_IP}
---
apiVersion: v1
kind: Pod
metadata: {name: client-1, namespace: default, labels: {app: client}}
spec: {containers: [{name: client}]}
status: {podIP: $CLI_IP}
YAML
nsenter --net=/run/netns/"$CLI" -- "$WARDEN" capture --proxy-uid 1337 --exclude-outbound-ports 9080,9078 >/dev/null
nsenter --net=/run/netns/"$SRV" -- "$WARDEN" capture --proxy-uid 1337 --exclude-inbound-ports 9080,9078 >/dev/null

# sidecars MODE — (re)start both sidecars, accelerated when MODE is on; wait for /ready.
sidecars() {
  kill_sidecars
  local extra=() pod
  case $1 in
    on) extra=(--accel --capture ebpf --bpffs "$BPFFS") ;;
    onsc) extra=(--accel --capture ebpf --bpffs "$BPFFS" --accel-legs sidecars) ;;
  esac
  for pod in "$SRV:$SRV_IP:app=server:$CG_SRV" "$CLI:$CLI_IP:app=client:$CG_CLI"; do
    IFS=: read -r ns ip label cg <<<"$pod"
    RUST_LOG=warn in_pod "$cg" "$ns" setpriv --reuid 1337 --regid 1337 --clear-groups \
      --inh-caps "$CAPS" --ambient-caps "$CAPS" -- \
      "$WARDEN" proxy --mode sidecar -c "$WORK/mesh.yaml" --concurrency "$CONCURRENCY" --no-watch \
      --drain-timeout 1s \
      --admin 127.0.0.1:15000 --pod-ip "$ip" --label "$label" "${extra[@]}" \
      >>"$WORK/sidecar-$ns.log" 2>&1 &
    for _ in $(seq 100); do
      nsenter --net=/run/netns/"$ns" -- curl -s -o /dev/null http://127.0.0.1:15000/ready && break
      sleep 0.05
    done
  done
  if [ "$1" != off ] && grep -q "acceleration off" "$WORK"/sidecar-*.log; then
    grep -h "acceleration off" "$WORK"/sidecar-*.log >&2; exit 1
  fi
}
# sidecar_pids — the running sidecars (uid 1337, this run's config).
sidecar_pids() { pgrep -u 1337 -f "proxy --mode sidecar -c $WORK/mesh.yaml" || true; }
kill_sidecars() {
  local pid
  for pid in $(sidecar_pids); do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do [ -n "$(sidecar_pids)" ] || return 0; sleep 0.05; done
}

RESULTS=$WORK/accel-results
# cpu_now — CPU seconds so far: both pods' cgroups (cpu.stat, exited processes included) and
# the two sidecars (utime + stime of every thread, /proc/PID/stat).
cpu_now() {
  local pods=0 sc=0 cg pid tick
  tick=$(getconf CLK_TCK)
  for cg in "$CG_CLI" "$CG_SRV"; do
    pods=$((pods + $(awk '$1 == "usage_usec" {print $2}' "$cg/cpu.stat")))
  done
  for pid in $(sidecar_pids); do
    sc=$((sc + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  python3 -c "print($pods / 1e6, $sc / $tick)"
}
# misses_now — the node-wide redirect-miss counter (since the shared maps were created; a run
# reports its own delta).
misses_now() {
  local n
  n=$(nsenter --net=/run/netns/"$CLI" -- curl -s http://127.0.0.1:15000/stats/prometheus |
    awk '$1 == "warden_accel_redirect_misses_total" {print $2}')
  echo "${n:-0}"
}
# run PROTO MODE ROUND — one `warden load` run from the client pod; appends a result row.
run() {
  local proto=$1 mode=$2 round=$3 host=$VIP http=8080 tcp=8078
  if [ "$mode" = nomesh ]; then kill_sidecars; host=$SRV_IP http=9080 tcp=9078; else sidecars "$mode"; fi
  local url args=()
  if [ "$proto" = http ]; then url="http://$host:$http/echo?size=1024"
  else url="tcp://$host:$tcp"; args=(--payload-size 1024); fi
  local cpu0 cpu1 misses0=0
  if [ "$mode" = on ] || [ "$mode" = onsc ]; then misses0=$(misses_now); fi
  cpu0=$(cpu_now)
  in_pod "$CG_CLI" "$CLI" "$WARDEN" load -c "$CONNS" --qps 0 -t "${SECS}s" "${args[@]}" --quiet \
    --json "$WORK/run.json" "$url" >/dev/null 2>&1 || true
  cpu1=$(cpu_now)
  local misses=-
  if [ "$mode" = on ] || [ "$mode" = onsc ]; then misses=$(($(misses_now) - misses0)); fi
  python3 - "$WORK/run.json" "$proto" "$mode" "$round" "$misses" "$cpu0" "$cpu1" <<'PY' | tee -a "$RESULTS" >&2
import json, sys
r = json.load(open(sys.argv[1]))
h = r["DurationHistogram"]
p99 = next((p["Value"] for p in h["Percentiles"] if p["Percentile"] == 99), 0)
bad = sum(v for k, v in r["RetCodes"].items() if k not in ("200", "OK"))
# CPU per request (us): everything in the pods, and the sidecars' part of it.
(pods0, sc0), (pods1, sc1) = (map(float, a.split()) for a in sys.argv[6:8])
n = max(1, h["Count"])
pods, sc = (pods1 - pods0) / n * 1e6, (sc1 - sc0) / n * 1e6
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{r['ActualQPS']:.0f}\t{h['Avg'] * 1000:.3f}\t{p99 * 1000:.3f}\t{bad}\t{sys.argv[5]}\t{pods:.1f}\t{sc:.1f}")
if bad:
    # Which answers were not 200 (or which TCP errors), to tell a refused connection from a reset.
    print(f"#   {sys.argv[2]} {sys.argv[3]} round {sys.argv[4]} codes: {r['RetCodes']}", file=sys.stderr)
PY
}

# Sanity before measuring: both paths answer 1 KiB, accelerated and not.
check() { # WHAT
  [ "$(in_pod "$CG_CLI" "$CLI" curl -s -m 5 "http://$VIP:8080/echo?size=1024" | wc -c)" = 1024 ] && return 0
  echo "no 1 KiB answer through the $1 sidecars:" >&2
  in_pod "$CG_CLI" "$CLI" curl -sv -m 5 -o /dev/null "http://$VIP:8080/echo?size=1024" >&2 || true
  tail -n 5 "$WORK"/sidecar-*.log >&2
  exit 1
}
sidecars on; check accelerated
sidecars onsc; check "accelerated (legs sidecars)"
sidecars off; check unaccelerated

echo "# accel.sh $(date -u +%FT%TZ): $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), kernel $(uname -r), background busy $(background_busy)," \
  "warden load -c $CONNS --qps 0 -t ${SECS}s, $ROUNDS rounds, sidecars $CONCURRENCY worker each, nothing pinned"
echo "# columns of the runs (stderr): proto mode round qps avg_ms p99_ms errors redirect_misses cpu_us_per_req sidecars_cpu_us_per_req"
MODES=(nomesh off on onsc)
for round in $(seq "$ROUNDS"); do
  for proto in tcp http; do
    for i in 0 1 2 3; do run "$proto" "${MODES[$(((round - 1 + i) % 4))]}" "$round"; done
  done
done
kill_sidecars

python3 - "$RESULTS" "$ROOT/bench/lib" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[2])
from paired import interval
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
by = {}
for proto, mode, rnd, qps, avg, p99, bad, misses, cpu, sc in rows:
    by.setdefault((proto, mode), {})[rnd] = (float(qps), float(avg), float(p99), int(bad), misses,
                                             float(cpu), float(sc))
med = lambda xs: statistics.median(xs)
print()
# CPU us/req: all of both pods (client, server, sidecars, kernel work charged to them); of which
# sidecars. On 2 busy cores QPS is about 2 s / CPU per request, so these say where a gap comes from.
print(f"{'':14}{'QPS':>9}{'avg ms':>9}{'p99 ms':>9}{'CPU us':>8}{'sidecar':>8}   per round QPS")
for proto in ("tcp", "http"):
    for mode in ("nomesh", "off", "on", "onsc"):
        runs = by[(proto, mode)]
        q = [r[0] for r in runs.values()]
        errs = sum(r[3] for r in runs.values())
        extra = f"  errors {errs}" if errs else ""
        if mode in ("on", "onsc"):
            extra += "  redirect misses " + " ".join(r[4] for r in runs.values())
        col = lambda i: med([r[i] for r in runs.values()])
        print(f"{proto:5}{mode:9}{med(q):9.0f}{col(1):9.3f}{col(2):9.3f}{col(5):8.1f}{col(6):8.1f}"
              f"   {' '.join(f'{x:.0f}' for x in q)}{extra}")

def paired(name, num, den, col, goal, higher):
    """Per-round ratio of two modes' runs (seconds apart), median and 90% interval."""
    rs = [by[num][r][col] / max(1e-9, by[den][r][col]) for r in by[num] if r in by[den]]
    m = med(rs)
    lo, hi = interval(rs)
    rounds = f"90% CI {lo:.3f}-{hi:.3f}; rounds {' '.join(f'{x:.3f}' for x in rs)}"
    if goal is None:
        print(f"  {name:40} {m:.3f} ({rounds})")
        return
    if higher:
        v = "PASS" if lo >= goal else "FAIL" if hi < goal else "TIE (within noise)"
        g = f">= {goal}"
    else:
        v = "PASS" if hi <= goal else "FAIL" if lo > goal else "TIE (within noise)"
        g = f"<= {goal}"
    print(f"  {name:40} {m:.3f} ({rounds})  [{v}, goal {g}]")

print()
print("accelerated / unaccelerated sidecars, per round (seed 002 on ASM: TCP QPS +57%, latency -36%; HTTP QPS +18%, avg latency -16%):")
paired("TCP QPS on/off", ("tcp", "on"), ("tcp", "off"), 0, 1.57, True)
paired("TCP avg latency on/off", ("tcp", "on"), ("tcp", "off"), 1, 0.64, False)
paired("HTTP QPS on/off", ("http", "on"), ("http", "off"), 0, 1.18, True)
paired("HTTP avg latency on/off", ("http", "on"), ("http", "off"), 1, 0.84, False)
print("legs sidecars (apps' sockets stay plain TCP) / unaccelerated, per round (for scale):")
paired("TCP QPS onsc/off", ("tcp", "onsc"), ("tcp", "off"), 0, None, True)
paired("HTTP QPS onsc/off", ("http", "onsc"), ("http", "off"), 0, None, True)
print("accelerated sidecar pair / no mesh (goal: within 10% for TCP):")
paired("TCP QPS on/nomesh", ("tcp", "on"), ("tcp", "nomesh"), 0, 0.90, True)
paired("HTTP QPS on/nomesh (for scale)", ("http", "on"), ("http", "nomesh"), 0, None, True)
paired("TCP QPS off/nomesh (for scale)", ("tcp", "off"), ("tcp", "nomesh"), 0, None, True)
paired("HTTP QPS off/nomesh (for scale)", ("http", "off"), ("http", "nomesh"), 0, None, True)
PY
