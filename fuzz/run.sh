#!/usr/bin/env bash
# Runs every fuzz target for a bounded time: fuzz/run.sh SECONDS [TARGET...]
# Installs cargo-fuzz if missing. libFuzzer needs nightly-only flags, so the stable toolchain is
# used with RUSTC_BOOTSTRAP=1. Each target starts from its checked-in seeds (seeds/TARGET) plus
# whatever earlier runs found (corpus/TARGET, not checked in). A crash stops the script with the
# input saved under artifacts/TARGET; make it a regression test in the crate it hit.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz"
  cargo install cargo-fuzz --locked --version 0.13.2
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo fuzz list)
fi

# One build for all targets (debug assertions on: they are invariants worth checking).
# FUZZ_PROFILE=dev (test.sh's): unoptimized but for the YAML path and the HTTP/1 parser
# (fuzz/Cargo.toml), a build of 5 minutes on 2 cores instead of 11, at a tenth to a fortieth of
# release's executions per second; release (the default) for long runs.
profile=()
case ${FUZZ_PROFILE:-release} in
  release) ;;
  dev) profile=(--dev) ;;
  *) echo "fuzz/run.sh: FUZZ_PROFILE is release or dev, not ${FUZZ_PROFILE}" >&2; exit 2 ;;
esac
nice cargo fuzz build "${profile[@]}" --debug-assertions

stats=()
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  log=$(mktemp)
  echo "fuzz/run.sh: $target for ${seconds}s"
  if ! nice cargo fuzz run "${profile[@]}" --debug-assertions "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz/run.sh: $target FAILED (input under fuzz/artifacts/$target)"
    exit 1
  fi
  # libFuzzer's last status line has the coverage and corpus; its final stats the exec count.
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[^ ]+' || true)
  stats+=("$target: ${execs:-?} execs, ${cov:-no status line}")
  rm -f "$log"
done
printf 'fuzz/run.sh: %s\n' "${stats[@]}"
