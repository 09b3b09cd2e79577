# Shared helpers for the bench scripts: tool installation, free ports, wrk parsing, cleanup.
# Source it; it sets `set -euo pipefail` and a cleanup trap that kills everything started with `bg`.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d /tmp/warden-bench.XXXXXX)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  sleep 0.2
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# ensure_pkgs CMD:PKG ... — apt-get install what is missing (apt-get update once).
ensure_pkgs() {
  local missing=() pair
  for pair in "$@"; do command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}"); done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

build_warden() {
  (cd "$ROOT" && cargo build --release -q -p warden)
  WARDEN="$ROOT/target/release/warden"
}

# free_port — a TCP port free on 127.0.0.1 right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# bg CMD... — start in the background, remember the pid for cleanup.
bg() { "$@" >"$WORK/bg-$#-$RANDOM.log" 2>&1 & PIDS+=($!); LAST_PID=$!; }

# wait_http URL [expect_status] — wait until the URL answers (any status), at most 10 s.
wait_http() {
  for _ in $(seq 100); do
    if curl -s -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "timeout waiting for $1" >&2; return 1
}

# wrk_run LABEL URL [extra wrk args] — prints "LABEL rps p99_ms non2xx" and appends to $RESULTS.
DURATION=${DURATION:-8}
CONNS=${CONNS:-64}
RESULTS="$WORK/results"
wrk_run() {
  local label=$1 url=$2; shift 2
  local out; out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$@" "$url" 2>&1)
  local rps p99 non
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non=$(awk '/Non-2xx or 3xx responses/ {print $5}' <<<"$out"); non=${non:-0}
  local errs; errs=$(awk '/Socket errors/ {print $0}' <<<"$out")
  printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$rps" "$p99" "$non" "${errs:-}" >>"$RESULTS"
  printf '  %-40s %10s rps   p99 %8s   non-2xx/3xx %s %s\n' "$label" "$rps" "$p99" "$non" "${errs:-}" >&2
}

rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
