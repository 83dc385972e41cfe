#!/usr/bin/env bash
# Every test suite: the Release build (gcc, with the Python suite in ctest),
# the Node.js suite, the whole C++ suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer (clang), then
# each libFuzzer target briefly (FUZZ_SECONDS each, default 60; 0 skips).
# Ends with one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

total_passed=0
total_failed=0
status=0

run_preset() {
  local preset=$1
  echo "== $preset =="
  if ! cmake --preset "$preset" >/dev/null || ! cmake --build --preset "$preset"; then
    echo "kvevict: the $preset build failed" >&2
    total_failed=$((total_failed + 1))
    status=1
    return
  fi
  local log
  log=$(mktemp)
  ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '[0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  local failed total
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  if [[ -z "$line" ]]; then failed=1; total=1; fi
  total_passed=$((total_passed + total - failed))
  total_failed=$((total_failed + failed))
  [[ $rc -eq 0 ]] || status=1
  rm -f "$log"
}

run_preset release

# The Node.js binding (npm ci when needed, build, tsc, node --test). The Python
# binding's pytest suite runs inside ctest above.
echo "== node =="
node_log=$(mktemp)
bash bindings/node/test.sh build 2>&1 | tee "$node_log"
node_rc=${PIPESTATUS[0]}
node_pass=$(grep -oE '^. pass [0-9]+' "$node_log" | tail -1 | grep -oE '[0-9]+$')
node_fail=$(grep -oE '^. fail [0-9]+' "$node_log" | tail -1 | grep -oE '[0-9]+$')
total_passed=$((total_passed + ${node_pass:-0}))
if [[ $node_rc -ne 0 ]]; then
  status=1
  total_failed=$((total_failed + ${node_fail:-1}))
  [[ ${node_fail:-0} -gt 0 ]] || total_failed=$((total_failed + 1))
fi
rm -f "$node_log"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_preset sanitize

fuzz_seconds=${FUZZ_SECONDS:-60}
if [[ $fuzz_seconds -gt 0 ]]; then
  echo "== fuzz (${fuzz_seconds}s per target) =="
  fuzz_log=$(mktemp)
  bash scripts/fuzz.sh "$fuzz_seconds" 2>&1 | tee "$fuzz_log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  line=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' "$fuzz_log" | tail -1)
  if [[ -n "$line" ]]; then
    total_passed=$((total_passed + $(sed -E 's/fuzz: ([0-9]+) passed.*/\1/' <<<"$line")))
    total_failed=$((total_failed + $(sed -E 's/.* ([0-9]+) failed/\1/' <<<"$line")))
  else
    total_failed=$((total_failed + 1))
  fi
  rm -f "$fuzz_log"
fi

echo "tests: $total_passed passed, $total_failed failed"
exit $status
