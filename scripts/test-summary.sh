# shellcheck shell=bash
# The tally behind scripts/test-all.sh's closing line (sourced, not run).
#
# Each suite's output is folded into three counts and a list of problems:
#
#   tests: N passed, M failed, K skipped
#
# A skip is not a pass: ctest counts a test that exited with its
# SKIP_RETURN_CODE among the passed ones, so the skips are read from its
# "The following tests did not run" list and moved out of N. A skip is allowed
# (a SIMD target the CPU lacks, say) unless the suite is one the README
# promises: those are named by the caller, and one that was skipped, is absent
# from the run, or did not report counts at all is a failure, counted in M with
# a one-line reason printed just above the summary line. CI reads the
# "N passed, M failed" at the start of the last line, so that shape stays.
#
# tests/summary/summary_test.sh feeds canned output through these functions.

sum_passed=0
sum_failed=0
sum_skipped=0
sum_notes=()     # why each allowed skip happened
sum_why=()       # what each failed test printed about its failure
sum_problems=()  # why the run is incomplete or failed, beyond ctest's own list

sum_problem() {
  sum_failed=$((sum_failed + 1))
  sum_problems+=("$1")
}

# skip_reason NAME LASTTEST_LOG: the first line the test printed starting with
# "SKIP" (ctest does not show a skipped test's output; its LastTest.log keeps it).
skip_reason() {
  local name=$1 log=$2 reason=""
  if [[ -f $log ]]; then
    reason=$(awk -v name="$name" '
      $0 ~ /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); inside = ($0 == name); next }
      inside && /^<end of output>/ { inside = 0 }
      inside && /^SKIP/ { print; exit }' "$log")
  fi
  echo "${reason:-no reason printed}"
}

# ctest_tally LABEL CTEST_OUTPUT LASTTEST_LOG [REQUIRED_TEST...]
ctest_tally() {
  local label=$1 out=$2 lastlog=$3
  shift 3
  local line total failed
  line=$(grep -aE '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$out" | tail -1)
  if [[ -z $line ]]; then
    sum_problem "$label: ctest printed no result line (no tests found, or it did not finish)"
    return
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")

  # "\t  12 - name (Skipped)" under "The following tests did not run:". Skipped
  # tests are inside ctest's total (as passes); disabled ones are outside it.
  local -A not_run=()
  local name kind
  while IFS=$'\t' read -r name kind; do
    [[ -n $name ]] && not_run[$name]=$kind
  done < <(awk '
    /^The following tests did not run:/ { inside = 1; next }
    inside && /^[ \t]+[0-9]+ - .* \([A-Za-z ]+\)$/ {
      line = $0
      sub(/^[ \t]+[0-9]+ - /, "", line)
      kind = line; sub(/.* \(/, "", kind); sub(/\)$/, "", kind)
      sub(/ \([A-Za-z ]+\)$/, "", line)
      print line "\t" kind
      next
    }
    inside { inside = 0 }' "$out")

  local skipped_in_total=0 skipped=0
  for name in "${!not_run[@]}"; do
    [[ ${not_run[$name]} == Skipped ]] && skipped_in_total=$((skipped_in_total + 1))
    skipped=$((skipped + 1))
  done
  sum_passed=$((sum_passed + total - failed - skipped_in_total))
  sum_failed=$((sum_failed + failed))

  local required
  for required in "$@"; do
    if [[ -n ${not_run[$required]+x} ]]; then
      # A promised suite that did not run: a failure, not a skip.
      skipped=$((skipped - 1))
      sum_problem "$label: $required did not run (${not_run[$required]}): $(skip_reason "$required" "$lastlog")"
      unset "not_run[$required]"
    elif ! grep -qaE "Test +#[0-9]+: $required \\." "$out"; then
      sum_problem "$label: $required is not in the ctest run (skipped at configure time? see the kvevict: lines of cmake's output)"
    fi
  done
  sum_skipped=$((sum_skipped + skipped))
  for name in $(printf '%s\n' "${!not_run[@]}" | sort); do
    sum_notes+=("skipped: $label/$name: $(skip_reason "$name" "$lastlog")")
  done

  # "\t  5 - name (Failed)" under "The following tests FAILED:": each one's
  # own failure lines, repeated by the summary (a long run's log is read
  # from its end, far from where the test printed them).
  local why
  while IFS= read -r name; do
    [[ -n $name ]] || continue
    why=$(failure_lines "$name" "$lastlog")
    [[ -n $why ]] || why="(it printed no failure line; see its output above)"
    while IFS= read -r line; do sum_why+=("failed: $label/$name: $line"); done <<<"$why"
  done < <(awk '
    /^The following tests FAILED:/ { inside = 1; next }
    inside && /^[ \t]+[0-9]+ - .* \([A-Za-z ]+\)$/ {
      line = $0; sub(/^[ \t]+[0-9]+ - /, "", line); sub(/ \([A-Za-z ]+\)$/, "", line); print line; next
    }
    inside { inside = 0 }' "$out")
}

# failure_lines NAME LASTTEST_LOG: at most 8 lines where the test says what
# failed -- GoogleTest's failures and their next line, a docs check's FAIL line
# and its reason, an error message.
failure_lines() {
  [[ -f $2 ]] || return 0
  test_output "$1" "$2" |
    grep -aE -A1 '^FAIL |^\[  FAILED  \] [A-Za-z]|: Failure$|error:|Error:|^not ok ' |
    grep -avE '^--$' | cut -c1-300 | head -8
}

# test_output NAME LASTTEST_LOG: everything a test printed (ctest keeps a
# passing test's output only in LastTest.log).
test_output() {
  awk -v name="$1" '
    $0 ~ /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); inside = ($0 == name); started = 0; next }
    inside && /^<end of output>/ { inside = 0 }
    inside && started { print }
    inside && /^----------/ { started = 1 }' "$2"
}

# pytest_tally CTEST_OUTPUT LASTTEST_LOG: the ctest entry `python` is one
# pytest run; its cases are counted instead of the one entry, as node's are,
# and its skips are skips, each reason listed. A module that ran no test fails
# the pytest run itself (bindings/python/tests/conftest.py); its line is
# repeated above the summary.
pytest_tally() {
  local out=$1 lastlog=$2 text line passed failed errors skipped
  text=$(test_output python "$lastlog")
  line=$(grep -aE '^=* ?[0-9]+ (passed|failed|skipped|errors?|error)' <<<"$text" | grep -aE ' in [0-9.]+s' | tail -1)
  [[ -n $line ]] || return 0  # not run: ctest_tally's required list says so
  passed=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '^[0-9]+')
  failed=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '^[0-9]+')
  errors=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '^[0-9]+')
  skipped=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '^[0-9]+')
  failed=$((${failed:-0} + ${errors:-0}))
  # ctest counted the whole run as one test; count its cases in its place.
  if grep -qaE 'Test +#[0-9]+: python \.+ +Passed' "$out"; then
    sum_passed=$((sum_passed - 1 + ${passed:-0}))
  else
    # One ctest failure stands for the failing cases (at least one: a run
    # failed for a module that ran nothing has no failing case).
    sum_passed=$((sum_passed + ${passed:-0}))
    [[ $failed -gt 1 ]] && sum_failed=$((sum_failed + failed - 1))
  fi
  sum_skipped=$((sum_skipped + ${skipped:-0}))
  local reason
  while IFS= read -r reason; do
    [[ -n $reason ]] && sum_notes+=("skipped: python: $reason")
  done < <(grep -aE '^SKIPPED \[[0-9]+\] ' <<<"$text" | sed -E 's/^SKIPPED //')
  while IFS= read -r reason; do
    [[ -n $reason ]] && sum_problems+=("$reason")
  done < <(grep -aE '^kvevict: FAILED: python: ' <<<"$text" | sed -E 's/^kvevict: FAILED: //')
}

# node_tally OUTPUT EXIT_STATUS: node --test's "pass N" / "fail N" / "skipped N"
# summary lines ("ℹ pass 3" from the spec reporter, "# pass 3" from TAP).
node_tally() {
  local out=$1 rc=$2 pass fail skip
  pass=$(grep -aE '^[^ a-z]+ pass [0-9]+$' "$out" | tail -1 | grep -oE '[0-9]+$')
  fail=$(grep -aE '^[^ a-z]+ fail [0-9]+$' "$out" | tail -1 | grep -oE '[0-9]+$')
  skip=$(grep -aE '^[^ a-z]+ skipped [0-9]+$' "$out" | tail -1 | grep -oE '[0-9]+$')
  sum_passed=$((sum_passed + ${pass:-0}))
  sum_failed=$((sum_failed + ${fail:-0}))
  sum_skipped=$((sum_skipped + ${skip:-0}))
  [[ ${skip:-0} -eq 0 ]] || sum_notes+=("skipped: node: ${skip} node:test cases")
  if [[ -z $pass ]]; then
    local why
    why=$(grep -aE 'error' "$out" | tail -1)
    sum_problem "node: the suite did not run (bindings/node/test.sh exit $rc): ${why:-$(grep -a . "$out" | tail -1)}"
  elif [[ $rc -ne 0 && ${fail:-0} -eq 0 ]]; then
    sum_problem "node: bindings/node/test.sh exit $rc with no failing case"
  elif [[ $pass -eq 0 ]]; then
    sum_problem "node: no test passed (0 pass)"
  fi
}

# fuzz_tally OUTPUT EXIT_STATUS TARGETS: scripts/fuzz.sh's "fuzz: P passed, F
# failed"; every one of TARGETS must have run.
fuzz_tally() {
  local out=$1 rc=$2 targets=$3 line p f
  line=$(grep -aE '^fuzz: [0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
  if [[ -z $line ]]; then
    local why
    why=$(grep -aE 'fail|error' "$out" | tail -1)
    sum_problem "fuzz: no result (scripts/fuzz.sh exit $rc): ${why:-$(grep -a . "$out" | tail -1)}"
    return
  fi
  p=$(sed -E 's/fuzz: ([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  sum_passed=$((sum_passed + p))
  sum_failed=$((sum_failed + f))
  if [[ $((p + f)) -lt $targets ]]; then
    sum_problem "fuzz: $((p + f)) of $targets targets ran"
  fi
}

# time_seconds SECONDS: "12 min 5 s", "3 min", "38 s" (whole seconds, rounded).
time_seconds() {
  local s
  s=$(printf '%.0f' "$1")
  if [[ $s -lt 60 ]]; then echo "$s s"
  elif [[ $((s % 60)) -eq 0 ]]; then echo "$((s / 60)) min"
  else echo "$((s / 60)) min $((s % 60)) s"; fi
}

# slowest_tests N LABEL=CTEST_OUTPUT...: the N tests that took longest, by
# ctest's own time of each ("1/7 Test #1: name ....   Passed   12.34 sec"),
# slowest first, one a line: "  12 min 5 s  LABEL/name".
slowest_tests() {
  local n=$1 arg label
  shift
  for arg in "$@"; do
    label=${arg%%=*}
    [[ -f ${arg#*=} ]] || continue
    awk -v label="$label" '
      /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / && / sec$/ {
        name = $0; sub(/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /, "", name); sub(/ .*/, "", name)
        print $(NF - 1) "\t" label "/" name
      }' "${arg#*=}"
  done | sort -t$'\t' -k1,1 -rn | head -"$n" | while IFS=$'\t' read -r secs name; do
    printf '  %12s  %s\n' "$(time_seconds "$secs")" "$name"
  done
}

# sum_print: the notes, the failed tests' own lines, the problems, then the
# summary line last. Returns 1 when anything failed.
sum_print() {
  local line
  for line in "${sum_notes[@]}"; do echo "$line"; done
  for line in "${sum_why[@]}"; do echo "$line"; done
  for line in "${sum_problems[@]}"; do echo "kvevict: FAILED: $line"; done
  echo "tests: $sum_passed passed, $sum_failed failed, $sum_skipped skipped"
  [[ $sum_failed -eq 0 ]]
}
