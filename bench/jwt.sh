#!/usr/bin/env bash
# JWT authentication bench: a gateway (one worker, directResponse 200) with a
# RequestAuthentication (inline JWKS of an ES256 and an RS256 key) against the same gateway
# without one, every request carrying a valid token:
#   - paired (back-to-back pairs, bench/lib/common.sh): ES256 token and RS256 token, each
#     reused by every request (the verified-token cache answers after the first), over no
#     authentication. Goal: >= 0.95 (at most 5% throughput loss with the cache).
#   - uncached: wrk rotates over TOKENS distinct tokens (default 20000, more than the cache
#     keeps), so most requests pay the signature; the server's CPU per request minus the
#     no-authentication case's is the verification cost, in us of CPU (ES256 and RS256).
# Env: DURATION (s per case and round, default 5), CONNS, ROUNDS (3), PAIRS (16), PAIRED_SECS
# (2), TOKENS (20000), PIN (1); WARDEN=path skips the release build (e.g. a debug binary for a
# smoke run: WARDEN=target/debug/warden PAIRS=1 DURATION=1 ROUNDS=1 TOKENS=200).
source "$(dirname "$0")/lib/common.sh"
ensure_pkgs wrk:wrk curl:curl python3:python3 openssl:openssl
/usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null || ensure_pkgs x-python3-jwt:python3-jwt x-python3-cryptography:python3-cryptography
if [ -n "${WARDEN:-}" ]; then WARDEN=$(realpath "$WARDEN"); else build_warden; fi
TOKENS=${TOKENS:-20000}
MINT="$ROOT/crates/warden-proxy/tests/jwt/mint.py"

# Keys (openssl) and tokens (PyJWT): one reused token per algorithm, then TOKENS distinct ones.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/es.pem" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$WORK/rs.pem" 2>/dev/null
python3 - "$WORK" "$TOKENS" <<'PY'
import json, sys, time
work, n = sys.argv[1], int(sys.argv[2])
exp = int(time.time()) + 7200
claims = lambda sub: {"iss": "https://bench.warden", "sub": sub, "aud": "api", "exp": exp}
tokens = {"es": {"kid": "es", "claims": claims("reused-es")}, "rs": {"kid": "rs", "claims": claims("reused-rs")}}
for alg in ("es", "rs"):
    for i in range(n):
        tokens[f"{alg}{i}"] = {"kid": alg, "claims": claims(f"user-{i}")}
spec = {"keys": {"es": {"alg": "ES256", "pem": f"{work}/es.pem"}, "rs": {"alg": "RS256", "pem": f"{work}/rs.pem"}},
        "jwks": {"all": ["es", "rs"]}, "tokens": tokens}
json.dump(spec, open(f"{work}/spec.json", "w"))
PY
/usr/bin/python3 "$MINT" "$WORK/spec.json" >"$WORK/minted.json"
python3 - "$WORK" "$TOKENS" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
m = json.load(open(f"{work}/minted.json"))
open(f"{work}/jwks.json", "w").write(m["jwks"]["all"])
for alg in ("es", "rs"):
    open(f"{work}/{alg}.jwt", "w").write(m["tokens"][alg])
    # wrk: each request takes the next token of the list.
    toks = [m["tokens"][f"{alg}{i}"] for i in range(n)]
    lua = "local t = {" + ",".join(f'"{t}"' for t in toks) + "}\nlocal i = 0\n" \
          "request = function()\n  i = i % #t + 1\n" \
          "  return wrk.format(nil, nil, {[\"Authorization\"] = \"Bearer \" .. t[i]})\nend\n"
    open(f"{work}/{alg}-rotate.lua", "w").write(lua)
PY

# gateway_yaml PORT [AUTHN] — directResponse 200 on PORT, with the RequestAuthentication if AUTHN.
gateway_yaml() {
  cat <<YAML
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers: [{port: {number: $1, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: site}
spec:
  hosts: ["*"]
  gateways: [gw]
  http: [{name: all, directResponse: {status: 200, body: {string: ok}}}]
YAML
  if [ -n "${2:-}" ]; then
    cat <<YAML
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: bench}
spec:
  jwtRules:
  - issuer: https://bench.warden
    audiences: [api]
    jwks: '$(cat "$WORK/jwks.json")'
YAML
  fi
}

# start_gateway NAME [AUTHN] — sets PORT_<NAME>, PID_<NAME>.
start_gateway() {
  local port admin; port=$(free_port); admin=$(free_port)
  gateway_yaml "$port" "${2:-}" >"$WORK/$1.yaml"
  bg_server "$WARDEN" proxy -c "$WORK/$1.yaml" --concurrency 1 --listen-host 127.0.0.1 \
    --admin "127.0.0.1:$admin" --no-watch
  printf -v "PORT_$1" '%s' "$port"
  printf -v "PID_$1" '%s' "$LAST_PID"
  wait_http "http://127.0.0.1:$port/"
}
start_gateway none
start_gateway authn yes
ES=$(cat "$WORK/es.jwt"); RS=$(cat "$WORK/rs.jwt")
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ES" "http://127.0.0.1:$PORT_authn/")
bad=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${ES}x" "http://127.0.0.1:$PORT_authn/")
echo "checks: valid ES256 -> $code, forged -> $bad" >&2
[ "$code" = 200 ] && [ "$bad" = 401 ] || { echo "the authenticated gateway does not answer as expected" >&2; exit 1; }

bench_header
: >"$RESULTS"
NONE="http://127.0.0.1:$PORT_none/"; AUTHN="http://127.0.0.1:$PORT_authn/"
run_rounds \
  "CPU_PID=$PID_none wrk_run 'no authentication' $NONE -H 'Authorization: Bearer $ES'" \
  "CPU_PID=$PID_authn wrk_run 'ES256, cached' $AUTHN -H 'Authorization: Bearer $ES'" \
  "CPU_PID=$PID_authn wrk_run 'RS256, cached' $AUTHN -H 'Authorization: Bearer $RS'" \
  "CPU_PID=$PID_authn wrk_run 'ES256, $TOKENS tokens (uncached)' $AUTHN -s $WORK/es-rotate.lua" \
  "CPU_PID=$PID_authn wrk_run 'RS256, $TOKENS tokens (uncached)' $AUTHN -s $WORK/rs-rotate.lua"
summarize_rounds
echo
echo "server CPU per request (user+system, median of rounds) and the verification cost:"
cpu_medians >"$WORK/cpu"
python3 - "$WORK/cpu" "$TOKENS" <<'PY'
import sys
cpu = dict((l.split("\t")[0], float(l.split("\t")[1])) for l in open(sys.argv[1]))
base = cpu.get("no authentication", 0.0)
for name, us in cpu.items():
    print(f"  {name:<36}{us:>8.2f} us")
for alg in ("ES256", "RS256"):
    u = cpu.get(f"{alg}, {sys.argv[2]} tokens (uncached)")
    if u is not None:
        print(f"  {alg} uncached verification: {u - base:.2f} us of CPU per request over no authentication")
PY
busy_medians

PAIRED_SECS=${PAIRED_SECS:-2}; PAIRS=${PAIRS:-16}
echo
noise_floor "noise floor: no authentication / itself" "$NONE" "$PAIRS" "$PAIRED_SECS"
PAIRED_WRK_ARGS=(-H "Authorization: Bearer $ES")
paired_ratio "ES256 token (cache hit) / no authentication" "$NONE" "$AUTHN" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.95
PAIRED_WRK_ARGS=(-H "Authorization: Bearer $RS")
paired_ratio "RS256 token (cache hit) / no authentication" "$NONE" "$AUTHN" "$PAIRS" "$PAIRED_SECS" | paired_verdict 0.95
