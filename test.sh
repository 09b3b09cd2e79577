#!/usr/bin/env bash
# Installs what the tests need, then runs formatting, lint and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# redis-cli sets up the cluster and sentinel tests; the sentinels are `redis-server --sentinel`
# (no redis-sentinel package), TLS uses Debian's redis-server (built with TLS) and certificates
# the tests make with rcgen (no openssl CLI).
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
# The eBPF tests plant stale conntrack entries (a remapped source port).
command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
# The hardening probes run the same requests against a private nginx.
command -v nginx >/dev/null 2>&1 || missing+=(nginx)
# `warden lab`'s test renders report.html in headless Chromium (DOM dump + screenshot).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The TLS tests use `openssl s_client` as a client (certificates are made with rcgen).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The container tests build warden's image with buildah and run it (and `podman kube play` of
# deploy/kubernetes) with podman on runc, published ports through slirp4netns; the image build
# strips the binary (binutils).
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
command -v strip >/dev/null 2>&1 || missing+=(binutils)
# The JWT tests mint tokens with PyJWT (Debian's python3-jwt, with cryptography for RSA/EC/EdDSA).
/usr/bin/python3 -c 'import jwt, cryptography' >/dev/null 2>&1 || missing+=(python3-jwt python3-cryptography)
# The Lua filter's trailers test sends HTTP/2 request trailers with python-h2.
/usr/bin/python3 -c 'import h2' >/dev/null 2>&1 || missing+=(python3-h2)
# The test image of Redis gets busybox's sh (redis:alpine has one): redis-sentinel.yaml's
# containers pick their role with it.
command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
# The metrics tests scrape the proxy with a real Prometheus server, query it with PromQL and
# check every exposition with `promtool check metrics` (both in Debian's prometheus).
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if ((${#missing[@]})); then
  echo "test.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Manifests and injected pods are validated against Kubernetes' OpenAPI schemas, which this
# PyPI package ships (offline).
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "test.sh: installing kubernetes-validate (PyPI)"
  python3 -m pip install -q kubernetes-validate
fi
# The ext_authz tests' providers are Python grpcio servers on Envoy's published protos; the
# tracing tests' OTLP receiver uses the OpenTelemetry protos xds-protos ships.
if ! python3 -c 'import grpc; from envoy.service.auth.v3 import external_auth_pb2_grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2' >/dev/null 2>&1; then
  echo "test.sh: installing grpcio and xds-protos (PyPI)"
  python3 -m pip install -q grpcio xds-protos
fi
# Tests start their own redis-server on a free loopback port; a system one is not needed.
if command -v systemctl >/dev/null 2>&1; then systemctl stop redis-server >/dev/null 2>&1 || true; fi

# A fresh CI build gains nothing from incremental compilation's extra bookkeeping.
if [[ "${CI:-}" == true ]]; then export CARGO_INCREMENTAL=0; fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace

# Fuzzing (fuzz/run.sh): 20 s per target in CI (six targets), 10 s locally; FUZZ_SECONDS=0
# skips it. The sanitizer build is most of the cost: test.sh builds it unoptimized
# (FUZZ_PROFILE=dev, 5-6 min on 2 cores; release takes 11 and put CI over 30 minutes). Long
# runs: `fuzz/run.sh 600` (release).
if [[ "${CI:-}" == true ]]; then default_fuzz=20; else default_fuzz=10; fi
fuzz_seconds=${FUZZ_SECONDS:-$default_fuzz}
if ((fuzz_seconds > 0)); then
  FUZZ_PROFILE=${FUZZ_PROFILE:-dev} ./fuzz/run.sh "$fuzz_seconds"
fi
