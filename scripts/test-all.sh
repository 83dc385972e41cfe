#!/usr/bin/env bash
# Every test suite: the Release build (gcc, with the Python suite in ctest),
# the Node.js suite, the C++ suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer (clang), then
# each libFuzzer target briefly (FUZZ_SECONDS each, default 10).
#
# The sanitizer and fuzz builds carry line tables only (-gline-tables-only,
# CMakePresets.json): a report's stack still names file and line, and they
# compile in about two thirds of the time full debug information takes
# (perplexity.cpp 15.0 s -> 9.8 s under ASan+UBSan, same -O2).
#
# The sanitizer build runs each C++ source once, not the Release run again:
# every GoogleTest case at the best SIMD target, the policy suite at the
# baseline target (simd_baseline), every target's kernels against the plain
# loops (SimdTarget.*, which selects each target in turn), the tool's CLI suite
# and the canonical report. It leaves out what would only repeat the Release
# run (tests/CMakeLists.txt: if(NOT KVEVICT_SANITIZE)): the policy suite again
# at SSE4, AVX2 and AVX-512 (the same sources; their kernels are SimdTarget's),
# and the tests of scripts, Python and the repository (corpus split, needle
# placement, the apt lock, layers, vendored packages, this summary), which
# execute no C++ built there. The bindings, the model references and the docs
# check are Release-only already (an instrumented module cannot load into a
# plain interpreter; the rest only reruns the Release tool more slowly).
#
# Ends with one summary line, "tests: N passed, M failed, K skipped", and fails
# when any test failed or any suite the README promises did not run: the
# required lists below (a skipped or missing required suite counts as failed,
# with its reason printed above the summary). Other skips (a SIMD target the
# CPU lacks) are allowed and listed. FUZZ_SECONDS=0 leaves the fuzzers out,
# which therefore fails the run. The tally is scripts/test-summary.sh.
#
# Above the summary it prints the run's own time (from when `make test`
# started, KVEVICT_MAKE_START, so the package check is in it), each stage's
# time and the ten slowest tests by ctest's own times.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
# shellcheck source=test-summary.sh
source scripts/test-summary.sh

# The suites each build must run (ctest names), and the fuzz targets.
required_release=(cli install layers link_cycles function_length architecture_page report_browser python no_vendored_packages simd_baseline pip npm_pack row_schema_agreement json_envelope model_reference_selftest model_reference tokenizer_spm tokenizer_gpt2 gguf_readback llama_cpp_agreement llama_policy llama_c_api llama_stream kvevict_llama llama_example llama_cpp_bench docs_commands docs_check_logic)
required_sanitize=(cli report_browser simd_baseline)
fuzz_targets=8  # scripts/fuzz.sh's default list: vectors params policy npy model task_rows gguf tokenizer

status=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
started=${KVEVICT_MAKE_START:-$(date +%s)}
stage_start=$SECONDS
stages=()  # "how long<TAB>what" for each stage, in order
[[ -z ${KVEVICT_MAKE_START:-} ]] ||
  stages+=("$(time_seconds $(($(date +%s) - started)))"$'\t'"packages (make deps)")
stage_done() {
  stages+=("$(time_seconds $((SECONDS - stage_start)))"$'\t'"$1")
  stage_start=$SECONDS
}

# run_preset PRESET BUILD_DIR REQUIRED...
run_preset() {
  local preset=$1 dir=$2
  shift 2
  echo "== $preset =="
  # The configure output is kept: its "kvevict: ... skipped" lines explain a
  # binding that left the build.
  if ! cmake --preset "$preset" >"$logs/$preset-configure.log" 2>&1 || ! cmake --build --preset "$preset"; then
    cat "$logs/$preset-configure.log"
    sum_problem "$preset: the build failed"
    status=1
    stage_done "$preset: configure and build (failed)"
    return
  fi
  stage_done "$preset: configure and build"
  grep -a 'kvevict:' "$logs/$preset-configure.log"
  ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$logs/$preset.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  stage_done "$preset: ctest -j $jobs"
  ctest_tally "$preset" "$logs/$preset.log" "$dir/Testing/Temporary/LastTest.log" "$@"
  pytest_tally "$logs/$preset.log" "$dir/Testing/Temporary/LastTest.log"
}

run_preset release build "${required_release[@]}"

# The Node.js binding (npm ci when needed, build, tsc, node --test). The Python
# binding's pytest suite runs inside ctest above.
echo "== node =="
bash bindings/node/test.sh build 2>&1 | tee "$logs/node.log"
node_rc=${PIPESTATUS[0]}
[[ $node_rc -eq 0 ]] || status=1
node_tally "$logs/node.log" "$node_rc"
stage_done "node"

ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_preset sanitize build-sanitize "${required_sanitize[@]}"

fuzz_seconds=${FUZZ_SECONDS:-10}
if [[ $fuzz_seconds -gt 0 ]]; then
  echo "== fuzz (${fuzz_seconds}s per target) =="
  bash scripts/fuzz.sh "$fuzz_seconds" 2>&1 | tee "$logs/fuzz.log"
  fuzz_rc=${PIPESTATUS[0]}
  [[ $fuzz_rc -eq 0 ]] || status=1
  fuzz_tally "$logs/fuzz.log" "$fuzz_rc" "$fuzz_targets"
  stage_done "fuzz: build, ${fuzz_seconds} s a target"
else
  sum_problem "fuzz: not run (FUZZ_SECONDS=0)"
fi

echo "== time =="
echo "make test: $(time_seconds $(($(date +%s) - started))) on $jobs cores"
for stage in "${stages[@]}"; do printf '  %12s  %s\n' "${stage%%$'\t'*}" "${stage#*$'\t'}"; done
echo "the ten slowest tests (ctest's times, $jobs at once):"
slowest_tests 10 release="$logs/release.log" sanitize="$logs/sanitize.log"

echo "== summary =="
sum_print || status=1
exit $status
