#!/usr/bin/env bash
# Builds the libFuzzer targets (in the sanitize preset's build: clang,
# ASan+UBSan, coverage on the sources that read each target's bytes;
# fuzz/CMakeLists.txt), replays every kept regression input, then fuzzes each
# target for SECONDS (default 60).
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: vectors params policy npy model task_rows gguf tokenizer
# Working corpora grow in build-sanitize/corpus/; a crashing input lands in
# build-sanitize/artifacts/ -- copy it to fuzz/regressions/TARGET/ with the fix.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(vectors params policy npy model task_rows gguf tokenizer)

# The targets alone (the libraries they link); in make test the sanitize
# stage has built them already.
cmake --preset sanitize >/dev/null && cmake --build --preset sanitize --target "${targets[@]/#/fuzz_}" ||
  { echo "fuzz: build failed" >&2; exit 1; }

passed=0
failed=0
for t in "${targets[@]}"; do
  bin=build-sanitize/fuzz/fuzz_$t
  corpus=build-sanitize/corpus/$t
  mkdir -p "$corpus" build-sanitize/artifacts
  if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
    if ! "$bin" fuzz/regressions/$t/* >build-sanitize/regress-$t.log 2>&1; then
      echo "fuzz $t: a kept regression input fails again:"; tail -20 build-sanitize/regress-$t.log
      failed=$((failed + 1)); continue
    fi
  fi
  seeds=()
  [[ -d fuzz/seeds/$t ]] && seeds=(fuzz/seeds/$t)
  log=build-sanitize/fuzz-$t.log
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
       -print_final_stats=1 -artifact_prefix="build-sanitize/artifacts/$t-" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    echo "fuzz $t: ${seconds}s, ${execs:-?} executions, $cov, corpus $(ls "$corpus" | wc -l) inputs, no finding"
    passed=$((passed + 1))
  else
    echo "fuzz $t: FINDING (see $log and build-sanitize/artifacts/):"; grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -10
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
