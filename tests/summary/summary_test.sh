#!/usr/bin/env bash
# scripts/test-summary.sh, the tally behind `make test`'s closing line, fed
# canned ctest / node / fuzz output: skips are reported as skips, not passes;
# an allowed skip passes the run; a required suite that was skipped or absent,
# a node suite that did not run and a fuzzer that did not run each fail it,
# with the reason above the summary line. Also the ten-slowest-tests list
# printed above it.
# Usage: summary_test.sh SOURCE_DIR
set -u
src=$1
# shellcheck source=../shell_checks.sh
source "$(dirname "$0")/../shell_checks.sh"

# A ctest run in ctest 3.25's words: 6 tests, 1 failed, 2 skipped, 1 disabled.
cat >"$tmp/ctest.log" <<'LOG'
Test project /src/build
    Start 1: Bank.Fill
1/7 Test #1: Bank.Fill ........................   Passed    0.01 sec
2/7 Test #2: cli ..............................   Passed    3.20 sec
3/7 Test #3: report_browser ...................***Skipped   0.02 sec
4/7 Test #4: simd_avx512 ......................***Skipped   0.00 sec
5/7 Test #5: Bank.Drain .......................***Failed    0.02 sec
6/7 Test #6: python ...........................   Passed    9.00 sec
7/7 Test #7: old_case .........................***Not Run (Disabled)   0.00 sec

67% tests passed, 1 tests failed out of 6

Total Test time (real) =   0.03 sec

The following tests did not run:
	  3 - report_browser (Skipped)
	  4 - simd_avx512 (Skipped)
	  7 - old_case (Disabled)

The following tests FAILED:
	  5 - Bank.Drain (Failed)
LOG
cat >"$tmp/LastTest.log" <<'LOG'
3/7 Testing: report_browser
3/7 Test: report_browser
Output:
----------------------------------------------------------
browser: 2 passed, 0 failed (browser checks skipped)
SKIP: chromium not found, so the page was not loaded in a browser
<end of output>
Test Passed.
4/7 Testing: simd_avx512
4/7 Test: simd_avx512
Output:
----------------------------------------------------------
SKIP: this CPU has no AVX-512F
<end of output>
Test Passed.
LOG
# The same run with everything passing and only the allowed skip.
sed -e 's/report_browser ...................\*\*\*Skipped/report_browser ...................   Passed /' \
    -e '/^\t  3 - report_browser/d' -e '/^\t  7 - old_case/d' -e '/old_case/d' \
    -e 's/Bank.Drain .......................\*\*\*Failed /Bank.Drain .......................   Passed /' \
    -e 's/67% tests passed, 1 tests failed out of 6/100% tests passed, 0 tests failed out of 6/' \
    -e '/^The following tests FAILED:/,$d' "$tmp/ctest.log" >"$tmp/ctest-ok.log"

# tally NAME EXPECTED_LAST_LINE EXPECTED_STATUS EXPECTED_TEXT... -- COMMANDS (a
# fresh tally in a subshell each time; stdin of the subshell is the script).
tally() {
  local name=$1 last=$2 want=$3
  shift 3
  local expect=()
  while [[ $1 != -- ]]; do expect+=("$1"); shift; done
  shift
  local out rc
  out=$(source "$src/scripts/test-summary.sh"; eval "$*"; sum_print)
  rc=$?
  [[ $(tail -1 <<<"$out") == "$last" ]] || { fail "$name: last line '$(tail -1 <<<"$out")', want '$last'"; return; }
  [[ $rc -eq $want ]] || { fail "$name: status $rc, want $want"; return; }
  local e
  for e in "${expect[@]}"; do
    grep -qF -- "$e" <<<"$out" || { fail "$name: no line with '$e' in: $out"; return; }
  done
  pass
}

# An allowed skip: reported as a skip with its reason, the run passes.
tally "allowed skip" "tests: 5 passed, 0 failed, 1 skipped" 0 \
  "skipped: release/simd_avx512: SKIP: this CPU has no AVX-512F" -- \
  ctest_tally release "$tmp/ctest-ok.log" "$tmp/LastTest.log" cli report_browser python

# ctest's own failure, a required suite skipped (a failure, with why), an
# allowed skip and a disabled test (skips).
tally "required skipped" "tests: 3 passed, 2 failed, 2 skipped" 1 \
  "kvevict: FAILED: release: report_browser did not run (Skipped): SKIP: chromium not found" \
  "skipped: release/simd_avx512: SKIP: this CPU has no AVX-512F" \
  "skipped: release/old_case: no reason printed" -- \
  ctest_tally release "$tmp/ctest.log" "$tmp/LastTest.log" cli report_browser python

# A failed test's own failure lines are repeated above the summary: a
# GoogleTest failure (with its next line), a docs check's FAIL and its
# reason; a failed test that printed none says so.
cat "$tmp/LastTest.log" >"$tmp/LastTest-fail.log"
cat >>"$tmp/LastTest-fail.log" <<'LOG'
5/7 Testing: Bank.Drain
5/7 Test: Bank.Drain
Output:
----------------------------------------------------------
[ RUN      ] Bank.Drain
tests/bank_test.cpp:41: Failure
Expected equality of these values:
[  FAILED  ] Bank.Drain (2 ms)
FAIL  2 min 31 s  docs/real-model.md:784  build/kvevict tasks --model m.kvm
      took 151 s (150 s of CPU), over 150 s: mark it with its time and a quick variant
docs commands: 3 ran and matched their pages, 1 failed
<end of output>
Test Failed.
LOG
tally "failure lines" "tests: 3 passed, 2 failed, 2 skipped" 1 \
  "failed: release/Bank.Drain: tests/bank_test.cpp:41: Failure" \
  "failed: release/Bank.Drain: Expected equality of these values:" \
  "failed: release/Bank.Drain: [  FAILED  ] Bank.Drain (2 ms)" \
  "failed: release/Bank.Drain: FAIL  2 min 31 s  docs/real-model.md:784" \
  "failed: release/Bank.Drain:       took 151 s (150 s of CPU), over 150 s" -- \
  ctest_tally release "$tmp/ctest.log" "$tmp/LastTest-fail.log" cli report_browser python
tally "failure without lines" "tests: 3 passed, 2 failed, 2 skipped" 1 \
  "failed: release/Bank.Drain: (it printed no failure line; see its output above)" -- \
  ctest_tally release "$tmp/ctest.log" "$tmp/LastTest.log" cli report_browser python

# A required suite missing from the run (the Python binding left at configure).
tally "required absent" "tests: 5 passed, 1 failed, 1 skipped" 1 \
  "kvevict: FAILED: release: install is not in the ctest run" -- \
  ctest_tally release "$tmp/ctest-ok.log" "$tmp/LastTest.log" cli install

# ctest that never printed its result line.
printf 'Test project /src/build\nNo tests were found!!!\n' >"$tmp/ctest-none.log"
tally "no ctest result" "tests: 0 passed, 1 failed, 0 skipped" 1 \
  "kvevict: FAILED: sanitize: ctest printed no result line" -- \
  ctest_tally sanitize "$tmp/ctest-none.log" "$tmp/none" cli

# node --test's spec summary (the info sign is multi-byte: no locale assumed).
printf 'ℹ tests 12\nℹ suites 3\nℹ pass 11\nℹ fail 0\nℹ cancelled 0\nℹ skipped 1\nℹ todo 0\n' >"$tmp/node-ok.log"
tally "node pass" "tests: 11 passed, 0 failed, 1 skipped" 0 "skipped: node: 1 node:test cases" -- \
  node_tally "$tmp/node-ok.log" 0
printf '# tests 12\n# pass 10\n# fail 2\n' >"$tmp/node-fail.log"
tally "node fail" "tests: 10 passed, 2 failed, 0 skipped" 1 -- node_tally "$tmp/node-fail.log" 1
printf 'kvevict-node: error: node is not installed (Debian 12: apt-get install nodejs npm libnode-dev)\n' >"$tmp/node-none.log"
tally "node absent" "tests: 0 passed, 1 failed, 0 skipped" 1 \
  "kvevict: FAILED: node: the suite did not run (bindings/node/test.sh exit 1): kvevict-node: error: node is not installed" -- \
  node_tally "$tmp/node-none.log" 1

# scripts/fuzz.sh: all targets, fewer targets, no result at all.
printf 'fuzz vectors: 60s, no finding\nfuzz: 5 passed, 0 failed\n' >"$tmp/fuzz-ok.log"
tally "fuzz pass" "tests: 5 passed, 0 failed, 0 skipped" 0 -- fuzz_tally "$tmp/fuzz-ok.log" 0 5
printf 'fuzz: 2 passed, 0 failed\n' >"$tmp/fuzz-few.log"
tally "fuzz short" "tests: 2 passed, 1 failed, 0 skipped" 1 "kvevict: FAILED: fuzz: 2 of 5 targets ran" -- \
  fuzz_tally "$tmp/fuzz-few.log" 0 5
printf 'ninja: build stopped\nfuzz: build failed\n' >"$tmp/fuzz-none.log"
tally "fuzz no build" "tests: 0 passed, 1 failed, 0 skipped" 1 \
  "kvevict: FAILED: fuzz: no result (scripts/fuzz.sh exit 1): fuzz: build failed" -- \
  fuzz_tally "$tmp/fuzz-none.log" 1 5

# The ctest entry `python` is one pytest run: its cases are counted in its
# place (6 passed and 2 skipped here) and each skip is listed; a module that
# ran no test failed the pytest run (ctest's failure) and is named; failing
# cases are counted one by one.
cat "$tmp/LastTest.log" >"$tmp/LastTest-py.log"
cat >>"$tmp/LastTest-py.log" <<'LOG'
6/7 Testing: python
6/7 Test: python
Output:
----------------------------------------------------------
......ss                                                                 [100%]
=========================== short test summary info ============================
SKIPPED [1] test_decode_loop.py:53: torch is not installed: PyTorch variant skipped (the NumPy variant ran)
SKIPPED [1] test_model.py:31: the model folder lacks kvevict-tiny.kvm
6 passed, 2 skipped in 3.10s
<end of output>
Test Passed.
LOG
tally "pytest cases" "tests: 10 passed, 0 failed, 3 skipped" 0 \
  "skipped: python: [1] test_decode_loop.py:53: torch is not installed" \
  "skipped: python: [1] test_model.py:31: the model folder lacks kvevict-tiny.kvm" -- \
  'ctest_tally release "$tmp/ctest-ok.log" "$tmp/LastTest-py.log" cli python;
   pytest_tally "$tmp/ctest-ok.log" "$tmp/LastTest-py.log"'
sed -e 's/^6 passed, 2 skipped in 3.10s$/kvevict: FAILED: python: required module test_distributed.py ran no test (skipped: Dask distributed is not installed)\n5 passed, 3 skipped in 3.10s/' \
  "$tmp/LastTest-py.log" | sed 's/\\n/\n/' >"$tmp/LastTest-py-bad.log"
sed -e 's/python ...........................   Passed /python ...........................***Failed /' \
    -e 's/100% tests passed, 0 tests failed out of 6/83% tests passed, 1 tests failed out of 6/' \
    "$tmp/ctest-ok.log" >"$tmp/ctest-py-bad.log"
tally "pytest module skipped" "tests: 9 passed, 1 failed, 4 skipped" 1 \
  "kvevict: FAILED: python: required module test_distributed.py ran no test (skipped: Dask distributed is not installed)" -- \
  'ctest_tally release "$tmp/ctest-py-bad.log" "$tmp/LastTest-py-bad.log" cli python;
   pytest_tally "$tmp/ctest-py-bad.log" "$tmp/LastTest-py-bad.log"'
sed -e 's/^6 passed, 2 skipped in 3.10s$/3 failed, 3 passed, 2 skipped in 3.10s/' "$tmp/LastTest-py.log" >"$tmp/LastTest-py-fail.log"
tally "pytest cases failing" "tests: 7 passed, 3 failed, 3 skipped" 1 -- \
  'ctest_tally release "$tmp/ctest-py-bad.log" "$tmp/LastTest-py-fail.log" cli python;
   pytest_tally "$tmp/ctest-py-bad.log" "$tmp/LastTest-py-fail.log"'

# Suites add up; one missing suite fails a run that is otherwise green.
tally "sum" "tests: 21 passed, 1 failed, 2 skipped" 1 "kvevict: FAILED: fuzz: not run (FUZZ_SECONDS=0)" -- \
  'ctest_tally release "$tmp/ctest-ok.log" "$tmp/LastTest.log" cli python; node_tally "$tmp/node-ok.log" 0;
   fuzz_tally "$tmp/fuzz-ok.log" 0 5; sum_problem "fuzz: not run (FUZZ_SECONDS=0)"'

# The closing time report: the slowest tests of both runs by ctest's own times,
# slowest first, skipped and failed ones included; a run that left no output
# is passed over.
printf '1/3 Test #1: docs_commands ....................   Passed  612.40 sec\n2/3 Test #2: cli ..............................***Failed   75.50 sec\n' >"$tmp/ctest-sanitize.log"
out=$(source "$src/scripts/test-summary.sh"
      slowest_tests 3 release="$tmp/ctest.log" sanitize="$tmp/ctest-sanitize.log" fuzz="$tmp/missing.log")
want=$(printf '  %12s  %s\n' "10 min 12 s" sanitize/docs_commands "1 min 16 s" sanitize/cli "9 s" release/python)
if [[ $out == "$want" ]]; then pass; else fail "slowest tests: got '$out', want '$want'"; fi
out=$(source "$src/scripts/test-summary.sh"; time_seconds 59.6; time_seconds 3600; time_seconds 0.01)
if [[ $out == $'1 min\n60 min\n0 s' ]]; then pass; else fail "time_seconds: got '$out'"; fi

echo "summary: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
