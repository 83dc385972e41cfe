#!/usr/bin/env bash
# Drives the kvevict tool as a user would: outputs, exit codes and one-line
# errors for bad input. Usage: cli_test.sh PATH/TO/kvevict SOURCE_DIR
set -u
tool=$1
src=$2
# shellcheck source=../shell_checks.sh
source "$(dirname "$0")/../shell_checks.sh"

# usage NAME EXPECTED_SUBSTRING -- ARGS...: a usage error, as the README's "The
# tool" documents it: exit 2 and stderr exactly one "kvevict: error: " line with
# the text.
usage() {
  local name=$1 want=$2; shift 3
  "$tool" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local err
  err=$(cat "$tmp/err")
  if [[ $rc -ne 2 ]]; then fail "$name: exit $rc, not 2 ($err)"; return; fi
  if [[ $(wc -l <"$tmp/err") -ne 1 || "$err" != "kvevict: error: "* ]]; then
    fail "$name: stderr is not one 'kvevict: error: ' line: $err"
    return
  fi
  if [[ "$err" != *"$want"* ]]; then fail "$name: stderr '$err' lacks '$want'"; return; fi
  pass
}

# ok NAME EXPECTED_SUBSTRING -- ARGS...: exit 0 and stdout contains the text.
ok() {
  local name=$1 want=$2; shift 3
  local out
  if out=$("$tool" "$@" 2>"$tmp/err"); then
    if [[ "$out" == *"$want"* ]]; then pass; else fail "$name: output lacks '$want'"; fi
  else
    fail "$name: exit $? ($(head -c 300 "$tmp/err"))"
  fi
}

# bad NAME EXPECTED_SUBSTRING -- ARGS...: non-zero exit, one stderr line with the text.
bad() {
  local name=$1 want=$2; shift 3
  "$tool" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local err
  err=$(cat "$tmp/err")
  if [[ $rc -eq 0 ]]; then fail "$name: exit 0"; return; fi
  if [[ $rc -ge 128 ]]; then fail "$name: crashed (exit $rc)"; return; fi
  if [[ "$err" != *"$want"* ]]; then fail "$name: stderr '$err' lacks '$want'"; return; fi
  if [[ $(wc -l <"$tmp/err") -ne 1 || "$err" != "kvevict: error: "* ]]; then
    fail "$name: stderr is not one 'kvevict: error: ' line: $err"
    return
  fi
  pass
}

# CSV is for a machine (issue 54): one value a cell, the JSON's values.
# cols FILE COL,...: the data lines' cells of those columns (FILE - : stdin);
# without FILE COL,...: the header and lines without them (csv_check.py).
cols() { python3 "$src/tests/cli/csv_check.py" cols "$@"; }
without() { python3 "$src/tests/cli/csv_check.py" without "$@"; }
# csv_ok NAME [--expand KEY] [--vary COLS] [--want COLS] -- ARGS...:
# ARGS' --format csv has the header's cells on every line, no ellipsis, no
# "-" for none, no signed number, unit or separator, intervals as two numeric
# columns, and equals ARGS' --format json field for field (--vary: timings,
# which differ run to run).
csv_ok() {
  local name=$1 out; shift
  # Under the sanitizers (tests/CMakeLists.txt sets KVEVICT_SANITIZED) the
  # one JSON-to-CSV writer runs on the trace commands; the model commands'
  # CSV would only run it again, twice each at sanitizer speed (minutes).
  if [[ -n ${KVEVICT_SANITIZED:-} && " $* " == *" --model "* ]]; then return; fi
  if out=$(python3 "$src/tests/cli/csv_check.py" agree "$tool" "$@" 2>&1); then pass; else fail "$name csv: $out"; fi
}

ok  "hash"             "3136039440" -- trace --hash
# SIMD targets: what runs is reported; KVEVICT_SIMD narrows it; a bad one is one line.
ok  "simd"             "compiled:  baseline, sse4" -- simd
ok  "simd json"        '"active":' -- simd --format json
simd_active=$(KVEVICT_SIMD=baseline "$tool" simd --format json 2>&1)
# A row per target; the one KVEVICT_SIMD names is the one active row.
active=$(printf '%s' "$simd_active" | python3 -c 'import json, sys; print(",".join(r["target"] for r in json.load(sys.stdin)["rows"] if r["active"]))' 2>&1)
if [[ "$active" == "baseline" ]]; then pass; else fail "KVEVICT_SIMD=baseline: $simd_active"; fi
simd_same=$(KVEVICT_SIMD=baseline "$tool" compare --format csv 2>&1 | without - seconds)
if [[ -n "$simd_same" && "$simd_same" == "$("$tool" compare --format csv | without - seconds)" ]]; then pass; else fail "baseline compare differs"; fi
KVEVICT_SIMD=avx1024 "$tool" list >"$tmp/out" 2>"$tmp/err"
simd_rc=$?
if [[ $simd_rc -eq 1 && $(wc -l <"$tmp/err") -eq 1 && "$(cat "$tmp/err")" == *"KVEVICT_SIMD=avx1024: SIMD target 'avx1024' is not one this build has"* ]]; then
  pass
else
  fail "KVEVICT_SIMD=avx1024: exit $simd_rc, stderr $(cat "$tmp/err")"
fi
bad "bench simd"       "SIMD target 'sse9' is not one this build has" -- bench --simd sse9 --policies h2o --budgets 64 --no-compare --bank-instances 0
ok  "hash prefix"      "515340780"  -- trace --steps 10 --hash
ok  "list"             "scissorhands" -- list
ok  "list json"        '"recentWindow"' -- list --format json
ok  "run table"        "retained attention mass" -- run --policy scissorhands --steps 300
ok  "run json"         '"heavyHitterRecall": 0.882339' -- run --policy scissorhands --budget 256 --format json
ok  "run json params"  '"recentWindow": 64' -- run --policy h2o --set recentWindow=64 --steps 100 --format json
ok  "run csv"          "policy,trace,budget,params.budget,steps,metrics.retainedAttentionMass" -- run --policy tova --steps 50 --format csv
csv_ok "run" --vary seconds -- run --policy scissorhands --budget 256 --steps 400
csv_ok "compare" --vary seconds --want params.recentWindow,params.historyWindow -- compare --steps 300 --budgets 64,128
csv_ok "sweep" --vary seconds --want params.recentWindow -- sweep --policy h2o --param recentWindow=16,32 --budgets 64 --steps 300
csv_ok "persistence" -- persistence --lags 1,4,16
ok  "compare subset"   "h2o" -- compare --policies h2o,scissorhands --budgets 64,128 --steps 400
ok  "compare markdown" "| rank | policy |" -- compare --policies h2o --budgets 64 --steps 300 --format markdown
ok  "compare json"     '"rows"' -- compare --policies tova --budgets 64 --steps 300 --format json
ok  "compare set"      '"recentWindow": 48' -- compare --policies h2o --budgets 64 --steps 200 --set h2o.recentWindow=48 --format json
ok  "sweep"            "recentWindow" -- sweep --policy h2o --param recentWindow=16,32 --budgets 64 --steps 300
ok  "vectors"          "passed, 0 failed" -- vectors "$src/vectors"
ok  "schema"           '"name": "memoryBytes"' -- schema
ok  "help"             "compare" -- --help
for cmd in list run compare sweep trace vectors report perplexity record persistence schema tasks serve-bench; do ok "help $cmd" "--help" -- "$cmd" --help; done

# The canonical comparison, every row.
"$tool" compare --format csv >"$tmp/canonical.csv" || fail "canonical compare"
rows=$(($(wc -l <"$tmp/canonical.csv") - 1))
if [[ $rows -eq 21 ]] && cols "$tmp/canonical.csv" policy,trace,budget,metrics.retainedAttentionMass,metrics.heavyHitterRecall,metrics.evictionCalls \
    | grep -q '^scissorhands,decode-4096,512,0.711377,0.906047,3584$'; then pass; else fail "canonical csv ($rows rows)"; fi

bad "unknown policy"   "unknown policy 'lru' (known: scissorhands" -- run --policy lru
bad "unknown param"    "H2O: unknown parameter 'window' (known: budget, recentWindow, sinks, normalize)" -- run --policy h2o --set window=3
bad "unknown trace"    "unknown trace 'nope' (known: decode-4096, stale-spike-4096, recalled-fact-4096)" -- run --policy h2o --trace nope
bad "non-integer"      "'abc' is not an integer" -- run --policy h2o --set recentWindow=abc
bad "fraction"         "'1.5' is not an integer" -- run --policy h2o --set recentWindow=1.5
bad "negative"         "H2O: recentWindow (-1) must be at least 0" -- run --policy h2o --set recentWindow=-1
bad "out of range"     "Scissorhands: recentWindow (600) must be smaller than budget (512)" -- run --policy scissorhands --set recentWindow=600
# A vote history over 256 MiB is refused by name, not attempted (it printed
# std::bad_alloc: 8.6 GB at this budget), and the error is one line.
bad "history cap"      "Scissorhands: historyWindow (4096) must be at most 64 at budget 16777216 (the vote history would need more than 256 MiB)" -- run --policy scissorhands --budget 16777216 --set historyWindow=4096
if [[ $(wc -l <"$tmp/err") -eq 1 ]] && ! grep -q bad_alloc "$tmp/err"; then pass; else fail "history cap: stderr is not one line: $(cat "$tmp/err")"; fi
bad "huge"             "out of range for a 64-bit integer" -- run --policy h2o --set budget=99999999999999999999
bad "budget too big"   "budget (100000000) must be at most" -- run --policy h2o --budget 100000000
usage "budget zero"    "--budget: 0 is not a budget: a cache keeps at least 1 position" -- run --policy h2o --budget 0
usage "budget empty"   "--budget: the budget is empty" -- run --policy h2o --budget ""
usage "budgets word"   "--budgets: value 2 of '256,abc' ('abc') is not an integer" -- compare --budgets 256,abc
usage "misspelt flag"  "'--polcy' is not a flag of 'kvevict run': did you mean '--policy'?" -- run --polcy h2o
usage "misspelt value flag" "'--budgt' is not a flag of 'kvevict run': did you mean '--budget'?" -- run --policy h2o --budgt 5
usage "list flag"      "'--policy' is not a flag of 'kvevict compare': did you mean '--policies'?" -- compare --policy h2o
bad "set key typo"     "H2O: unknown parameter 'recnetWindow': did you mean 'recentWindow'?" -- run --policy h2o --set recnetWindow=4
bad "set without ="    "'recentWindow' is not KEY=VALUE (no '=')" -- run --policy h2o --set recentWindow
bad "steps too many"   "steps (5000) must be in 1 ... 4095 for trace decode-4096" -- run --policy h2o --steps 5000
bad "steps zero"       "steps (0) must be in 1 ... 4095" -- trace --steps 0 --hash
bad "bad budgets"      "value 2 of '64,x'" -- compare --budgets 64,x
bad "compare unknown"  "unknown policy 'nope'" -- compare --policies h2o,nope
bad "compare set"      "--set tova.recentWindow: TOVA has no parameter 'recentWindow' (known: budget)" -- compare --policies tova,h2o --set tova.recentWindow=3 --steps 10
bad "sweep values"     "value 3 of '16,32,z'" -- sweep --policy h2o --param recentWindow=16,32,z
bad "sweep param"      "H2O: unknown parameter 'window'" -- sweep --policy h2o --param window=1,2
bad "vectors missing"  "no such file or folder" -- vectors /no/such/file.json

# Usage errors: whatever the argument parser finds, one prefixed line naming
# the command's --help, exit 2 (not CLI11's two lines and 104-106); a mistyped
# command or policy gets the nearest name (the policy's from the library).
usage "bad format"       "--format: xml not in {table,json,csv,markdown} (kvevict compare --help)" -- compare --format xml
usage "no subcommand"    "A subcommand is required (kvevict --help)" --
usage "command typo"     "'lst' is not a kvevict command: did you mean 'list'? (kvevict --help lists them)" -- lst
usage "command swap"     "did you mean 'compare'?" -- comapre --policies h2o
usage "command unknown"  "'frobnicate' is not a kvevict command (kvevict --help lists them)" -- frobnicate
usage "unknown flag"     "'--bogus' is not a flag of 'kvevict run' (kvevict run --help)" -- run --policy h2o --bogus
usage "missing flag"     "--policy is required (kvevict run --help)" -- run
usage "missing value"    "(kvevict run --help)" -- run --policy
usage "not a number"     "(kvevict run --help)" -- run --policy h2o --budget lots
usage "out of range"     "(kvevict bench --help)" -- bench --seconds 100
usage "excluded pair"    "(kvevict perplexity --help)" -- perplexity --model m --text t --kv-memory 100 --budget 8
usage "extra argument"   "stray (kvevict list --help)" -- list stray
bad "policy typo run"    "unknown policy 'snapk': did you mean 'snapkv'? (known: scissorhands" -- run --policy snapk
bad "policy typo list"   "unknown policy 'scisorhands': did you mean 'scissorhands'?" -- compare --policies h2o,scisorhands
bad "policy typo bench"  "unknown policy 'h2oo': did you mean 'h2o'?" -- bench --policies h2oo --no-compare --bank-instances 0
bad "policy far"         "unknown policy 'lru' (known: scissorhands" -- run --policy lru
# A refusal after parsing is one line too, and exits 1.
"$tool" run --policy snapk >/dev/null 2>"$tmp/err"
policy_rc=$?
if [[ $policy_rc -eq 1 && $(wc -l <"$tmp/err") -eq 1 ]]; then pass; else fail "policy typo: exit $policy_rc, $(cat "$tmp/err")"; fi
# --help says what the exit statuses mean; run's help names no --model (run
# replays traces only); --kv-memory's help gives the residual window's reserve.
ok  "help exit status"   "2 a usage error, the command line does not parse" -- --help
if "$tool" run --help | grep -q -- "--model"; then fail "run --help mentions --model"; else pass; fi
ok  "kv-memory help"     "floor((bytes - R x (8d - b)) / b)" -- perplexity --help

# A malformed vector file: named, the run goes on, exit non-zero.
printf '{"policy": "kv-cache/h2o", "version": 1, "cases": [{"name": "c", "steps": [{"call": "votesOf", "args": [0], "expect": 0}]}]}' >"$tmp/bad.vectors.json"
printf '{ nope' >"$tmp/broken.vectors.json"
out=$("$tool" vectors "$tmp" "$src/vectors/h2o.vectors.json" 2>&1); rc=$?
if [[ $rc -ne 0 && "$out" == *"bad.vectors.json: case 'c' step 0: malformed: h2o has no method 'votesOf'"* \
      && "$out" == *"broken.vectors.json: file: is not valid JSON"* && "$out" == *" passed, 2 failed"* ]]; then
  pass
else
  fail "malformed vectors: rc=$rc out=$out"
fi

# report: a small page and its SVG files, then bad input -- a clear error and
# nothing left behind (no page, no half-written .tmp).
ok  "report"           "" -- report --steps 300 --budgets 64,128 --policies h2o,streaming-llm --out "$tmp/r.html" --svg "$tmp/svg"
if [[ -f "$tmp/r.html" ]] && grep -q '^<!DOCTYPE html>' "$tmp/r.html" && grep -q 'data-chart="strip-h2o-64"' "$tmp/r.html" \
    && [[ $(ls "$tmp/svg" | wc -l) -eq 5 && -f "$tmp/svg/strip-streaming-llm-64.svg" ]]; then
  pass
else
  fail "report files: $(ls "$tmp" "$tmp/svg" 2>&1 | tr '\n' ' ')"
fi
# The page's table is compare's.
"$tool" compare --steps 300 --budgets 64,128 --policies h2o,streaming-llm --format csv >"$tmp/cmp.csv"
mass=$(cols "$tmp/cmp.csv" policy,budget,metrics.retainedAttentionMass | grep '^h2o,64,' | cut -d, -f3)
if [[ -n $mass ]] && grep -q "<td>64</td><td>$(printf '%.6f' "$mass")</td>" "$tmp/r.html"; then pass; else fail "report table != compare"; fi
ok  "report help"      "--strip-budget" -- report --help
bad "report exists"    "r.html: already exists (pass --force to replace it)" -- report --steps 50 --budgets 64 --out "$tmp/r.html"
ok  "report force"     "" -- report --steps 50 --budgets 64 --policies tova --out "$tmp/r.html" --force
bad "report unwritable" "/nonexistent/dir/r.html: cannot be written: the folder /nonexistent/dir does not exist" -- report --steps 50 --out /nonexistent/dir/r.html
bad "report folder"    "is a folder, not a file" -- report --steps 50 --out "$tmp"
bad "report policy"    "unknown policy 'lru' (known: scissorhands" -- report --steps 50 --policies h2o,lru --out "$tmp/x.html"
bad "report trace"     "unknown trace 'nope' (known: decode-4096" -- report --trace nope --out "$tmp/x.html"
bad "report no file"   "missing.npy: cannot be opened" -- report --trace "$tmp/missing.npy" --out "$tmp/x.html"
# A shape whose byte count wraps around 2^64 (here 2^64 exactly, in a 192-byte
# file) is refused by its header, not given 8,192 heads of 192 MiB buffers.
{ printf '\x93NUMPY\x01\x00\x76\x00%-117s\n' "{'descr': '<f8', 'fortran_order': False, 'shape': (8192, 16777216, 16777216), }"
  head -c 64 /dev/zero; } >"$tmp/huge.npy"
bad "npy wraps"        "huge.npy: shape (8192, 16777216, 16777216) of 8-byte items is too large" -- run --policy tova --budget 2 --trace "$tmp/huge.npy"
if [[ $(wc -c <"$tmp/huge.npy") -eq 192 && $(wc -l <"$tmp/err") -eq 1 ]]; then pass; else fail "npy wraps: $(wc -c <"$tmp/huge.npy") bytes, stderr $(cat "$tmp/err")"; fi
bad "report empty"     "--policies: the policy list is empty (name at least one policy, or all)" -- report --policies "" --out "$tmp/x.html"
bad "report empty item" "empty policy name in the list 'h2o,'" -- report --policies h2o, --out "$tmp/x.html"
# A trace has attention only: the key-aware policies are refused naming the signal, and "all" is the seven.
bad "compare keys"      "knorm reads the new token's key (key), which a trace (attention weights only) does not supply" -- compare --policies h2o,knorm
ok  "list key-aware"    "keydiff" -- list
ok  "vectors key-aware" "28 passed, 0 failed" -- vectors "$src/vectors/knorm.vectors.json" "$src/vectors/keydiff.vectors.json" "$src/vectors/expected-attention.vectors.json"
ok  "list ten"          "expected-attention" -- list
bad "compare queries"   "expected-attention reads the new token's key (key, value, queries), which a trace (attention weights only) does not supply" -- compare --policies expected-attention
bad "report strip"     "report: the strip budget 100 is not one of the budgets (64, 128)" -- report --steps 50 --budgets 64,128 --strip-budget 100 --out "$tmp/x.html"
bad "report param"     "--set h2o.window: H2O has no parameter 'window'" -- report --steps 50 --set h2o.window=3 --out "$tmp/x.html"
bad "report no out"    "--out" -- report --steps 50
bad "report svg file"  "r.html: is not a folder" -- report --steps 50 --budgets 64 --policies tova --out "$tmp/y.html" --svg "$tmp/r.html"
if [[ ! -e "$tmp/x.html" && ! -e "$tmp/y.html" && -z "$(find "$tmp" -name '*.tmp')" ]]; then
  pass
else
  fail "report left files behind: $(ls "$tmp" | tr '\n' ' ')"
fi

# The real model (KVEVICT_MODEL_DIR may point at a model not yet committed).
model_dir=${KVEVICT_MODEL_DIR:-$src/model}
model=$model_dir/kvevict-tiny.kvm
head -c 400 "$model_dir/heldout-sample.txt" >"$tmp/text.txt"
ok  "perplexity full"  "full cache" -- perplexity --model "$model" --text "$tmp/text.txt"
ok  "perplexity policy" "scissorhands  64" -- perplexity --model "$model" --text "$tmp/text.txt" --policy scissorhands,tova --budget 64,128
ok  "perplexity json"  '"bitsPerByte"' -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --format json
# What a policy costs beside the full cache, with its interval paired by
# window: none from one window, a column once there are two (2,100 bytes: 3).
ok  "perplexity one window" '"extraLow": null' -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --format json
head -c 2100 "$model_dir/heldout-sample.txt" >"$tmp/text3.txt"
ok  "perplexity interval" "95 % interval (paired by window)" -- perplexity --model "$model" --text "$tmp/text3.txt" --policy sliding-window --budget 16
csv_ok "perplexity" --vary seconds --want extraBitsPerByte,extraLow,extraHigh -- perplexity --model "$model" --text "$tmp/text3.txt" --policy sliding-window,tova --budget 16
# A budget at least the text's length: exactly the full cache's perplexity.
"$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy all --budget 400 --format csv >"$tmp/ppl.csv" 2>/dev/null
if [[ $(cols "$tmp/ppl.csv" perplexity | sort -u | wc -l) -eq 1 && $(wc -l <"$tmp/ppl.csv") -eq 12 ]]; then pass; else fail "budget 400: $(cat "$tmp/ppl.csv")"; fi
# Paged: blocks and positions at the peak, measured; derived from the full
# cache's row (caches x 399 positions, in blocks of 16: caches x 25 blocks).
"$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy sliding-window,tova --budget 64 --block-size 16 --format csv >"$tmp/paged.csv" 2>/dev/null
cols "$tmp/paged.csv" policy,blockSize,peakBlocks,peakPositions >"$tmp/paged.cols"
paged_caches=$(( $(head -1 "$tmp/paged.cols" | cut -d, -f4) / 399 ))
if [[ $(head -1 "$tmp/paged.cols") == ",16,$((paged_caches * 25)),$((paged_caches * 399))" && $paged_caches -ge 1 \
      && $(grep -c ",16,$((paged_caches * 4 + 1)),$((paged_caches * 64 + 1))\$" "$tmp/paged.cols") -eq 2 ]]; then
  pass
else
  fail "perplexity --block-size 16: $(cat "$tmp/paged.csv")"
fi
csv_ok "perplexity paged" --vary seconds --want blockSize,peakBlocks,peakPositions -- perplexity --model "$model" --text "$tmp/text.txt" --policy sliding-window,tova --budget 64 --block-size 16
# Blocks of 1 are the token policy: the same perplexity.
if [[ $("$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy h2o,snapkv --budget 64 --block-size 1 --format csv 2>/dev/null | cols - policy,budget,perplexity,bitsPerByte) \
      == $("$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy h2o,snapkv --budget 64 --format csv 2>/dev/null | cols - policy,budget,perplexity,bitsPerByte) ]]; then
  pass
else
  fail "perplexity --block-size 1 differs from the token policy"
fi
ok  "perplexity layer" "peak positions" -- perplexity --model "$model" --text "$tmp/text.txt" --policy tova --budget 64 --layer-budget --head-floor 4
ok  "compare model blocks" "peak blocks of 16" -- compare --model "$model" --text "$tmp/text.txt" --budgets 64,128 --policies sliding-window,tova --block-size 16 --start-blocks 1 --recent-blocks 1 --block-score max
ok  "compare model layer" '"peakPositions"' -- compare --model "$model" --text "$tmp/text.txt" --budgets 64 --policies tova --layer-budget --format json
bad "model block budget" "budget (100) must be a whole number of blocks (--block-size 16)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy tova --budget 100 --block-size 16
bad "model block zero" "--block-size (0) must be at least 1" -- compare --model "$model" --text "$tmp/text.txt" --start-blocks 1
bad "model block large" "--block-size (2000000) is over the model's context" -- perplexity --model "$model" --text "$tmp/text.txt" --block-size 2000000
bad "model both modes" "--layer-budget and --block-size" -- perplexity --model "$model" --text "$tmp/text.txt" --block-size 16 --layer-budget
bad "model floor alone" "--head-floor needs --granularity layer" -- perplexity --model "$model" --text "$tmp/text.txt" --head-floor 2
bad "granularity name" "--granularity (cells) must be head, layer or sequence" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --granularity cells
bad "granularity and layer budget" "--layer-budget is --granularity layer; it cannot be given with --granularity sequence" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --granularity sequence --layer-budget
bad "granularity sequence blocks" "--granularity sequence and --block-size" -- compare --model "$model" --text "$tmp/text.txt" --policies h2o --budgets 64 --granularity sequence --block-size 16
bad "granularity sequence pyramidkv" "pyramidkv: its budget differs by layer" -- perplexity --model "$model" --text "$tmp/text.txt" --policy pyramidkv --budget 64 --granularity sequence
bad "stream granularity layer" "stream: --granularity layer lets one head hold more than the budget" -- stream --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --granularity layer
bad "tasks granularity prefill" "tasks: --granularity sequence applies to the decode moment" -- tasks --model "$model" --text "$tmp/text.txt" --policies h2o --budgets 64 --lengths 256 --granularity sequence --moments prefill
bad "serve-bench granularity blocks" "serve-bench: --granularity sequence shares a budget between caches while decoding" -- serve-bench --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --modes block --granularity sequence
bad "model block score" "normal" -- perplexity --model "$model" --text "$tmp/text.txt" --block-size 16 --block-score normal
bad "model areas" "blockBudget (4) must be at least startBlocks + recentBlocks (0 + 5)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --block-size 16 --recent-blocks 5
# The store's precision (docs/paged.md "Fewer bits a position"). An int4
# window longer than the text never fills: every position stays fp32, so the
# full cache at int4 scores what the fp32 one does, and holds 399 positions of
# 2 x 32 floats a cache -- which its bytes a position say (256, not int4's 44.3).
# int8 holds 32 codes and a scale a row: 72 bytes.
"$tool" perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int4 --kv-residual 1000 --format csv >"$tmp/kv.csv" 2>/dev/null
if [[ $(cols "$tmp/kv.csv" perplexity | sort -u | wc -l) -eq 1 \
      && $(cols "$tmp/kv.csv" kvPrecision,kvResidual,bytesPerPosition,peakCacheBytes | sed -n 2p) == "int4,1000,256.0,$((399 * 256))" && $(wc -l <"$tmp/kv.csv") -eq 3 ]]; then
  pass
else
  fail "perplexity --kv-precision int4 --kv-residual 1000: $(cat "$tmp/kv.csv")"
fi
kv8=$("$tool" perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int8 --format csv 2>/dev/null | cols - kvPrecision,bytesPerPosition,peakCacheBytes)
if [[ $(sed -n 2p <<<"$kv8") == "int8,72.0,$((399 * 72))" ]]; then pass; else fail "kv int8 bytes: $kv8"; fi
ok  "kv json"          '"kvPrecision": "fp16"' -- perplexity --model "$model" --text "$tmp/text.txt" --policy tova --budget 64 --kv-precision fp16 --format json
ok  "kv compare"       "int8" -- compare --model "$model" --text "$tmp/text.txt" --budgets 64 --policies tova,sliding-window --kv-precision int8
# Equal memory: 16 KiB a cache holds 64 fp32 positions (256 bytes each) and
# floor(16384 / 72) = 227 int8 ones.
"$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy sliding-window --kv-memory 16384 --kv-precision fp32,int8 --format csv >"$tmp/mem.csv" 2>/dev/null
cols "$tmp/mem.csv" kvMemory,policy,budget,kvPrecision,bytesPerPosition >"$tmp/mem.cols"
if [[ $(grep -c "^16384,sliding-window,64,fp32,256.0$" "$tmp/mem.cols") -eq 1 && $(grep -c "^16384,sliding-window,227,int8,72.0$" "$tmp/mem.cols") -eq 1 \
      && $(sed -n 2p "$tmp/mem.cols") == ",,,int8,72.0" ]]; then
  pass
else
  fail "perplexity --kv-memory 16384: $(cat "$tmp/mem.csv")"
fi
csv_ok "perplexity kv-memory" --vary seconds --want kvMemory,kvPrecision -- perplexity --model "$model" --text "$tmp/text.txt" --policy sliding-window --kv-memory 16384 --kv-precision fp32,int8
# A residual window longer than any cache the memory allows never fills: the
# memory of 390 fp32 positions holds 390 (it was refused: 1000 rows reserved),
# and the rows say a position costs fp32's 256 bytes, not int4's.
"$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy sliding-window --kv-memory $((390 * 256)) --kv-precision int4 --kv-residual 1000 --format csv >"$tmp/mem4.csv" 2>/dev/null
cols "$tmp/mem4.csv" policy,budget,kvPrecision,kvResidual,bytesPerPosition >"$tmp/mem4.cols"
if [[ $(grep -c "^sliding-window,390,int4,1000,256.0$" "$tmp/mem4.cols") -eq 1 && $(sed -n 2p "$tmp/mem4.cols") == ",,int4,1000,256.0" ]]; then
  pass
else
  fail "perplexity --kv-memory $((390 * 256)) --kv-residual 1000: $(cat "$tmp/mem4.csv")"
fi
# sweep --model: perplexity rows over value x budget, the value in its own column.
"$tool" sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param recentWindow=8,16 --budgets 32,64 --format csv >"$tmp/sweep.csv" 2>/dev/null
if [[ $(cols "$tmp/sweep.csv" policy,budget,params.recentWindow | tr '\n' ' ') == ",, h2o,32,8 h2o,64,8 h2o,32,16 h2o,64,16 " ]]; then
  pass
else
  fail "sweep --model: $(cat "$tmp/sweep.csv")"
fi
csv_ok "sweep model" --vary seconds --want params.recentWindow -- sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param recentWindow=8,16 --budgets 32,64
# --skip-refused: the pairs the policy's rules refuse are left out, each named on stderr.
"$tool" sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param recentWindow=16,48 --budgets 32,64 --skip-refused --format csv >"$tmp/skip.csv" 2>"$tmp/skip.err"
if [[ $(cols "$tmp/skip.csv" policy,budget,params.recentWindow | tail -n +2 | tr '\n' ' ') == "h2o,32,16 h2o,64,16 h2o,64,48 " \
      && $(grep -c '^sweep: skipped' "$tmp/skip.err") == 1 \
      && $(grep '^sweep: skipped' "$tmp/skip.err") == "sweep: skipped recentWindow=48 at budget 32: H2O: recentWindow (48) must be smaller than budget (32): there would be nothing for the scores to choose between" ]]; then
  pass
else
  fail "sweep --skip-refused: $(cat "$tmp/skip.csv" "$tmp/skip.err")"
fi
bad "sweep refused"     "sweep: recentWindow=48 at budget 32: H2O: recentWindow (48) must be smaller than budget (32): there would be nothing for the scores to choose between (skip the pairs the rules refuse: --skip-refused" -- sweep --policy h2o --param recentWindow=16,48 --budgets 32 --steps 50
bad "sweep all refused" "sweep: the policy's rules refuse every recentWindow x budget pair" -- sweep --policy h2o --param recentWindow=48 --budgets 32 --skip-refused --steps 50
ok  "sweep normalize"   "normalize" -- sweep --policy scissorhands --param normalize=0,1 --budgets 64 --steps 200
bad "normalize rule"    "Scissorhands: historyWindow (8) must be 0 with normalize=1" -- run --policy scissorhands --set normalize=1 --set historyWindow=8 --budget 64 --steps 50
ok  "sweep model json" '"recentWindow": 16' -- sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param recentWindow=16 --budgets 64 --format json
bad "sweep model trace" "--trace and --steps replay a trace; --model runs the model" -- sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param recentWindow=16 --trace decode-4096
bad "sweep model param" "H2O: unknown parameter 'window'" -- sweep --model "$model" --text "$tmp/text.txt" --policy h2o --param window=16
bad "sweep text alone" "--text requires --model" -- sweep --policy h2o --param recentWindow=16 --text "$tmp/text.txt"
bad "kv precision"     "--kv-precision: 'int3' is not a KV precision (fp32, fp16, int8 or int4)" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int3
bad "kv fp32 residual" "--kv-residual (4) needs a quantized --kv-precision (fp16, int8 or int4)" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-residual 4
bad "kv int4 window 0" "--kv-residual 0 with --kv-precision int4" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int4 --kv-residual 0
bad "kv residual < 0"  "--kv-residual (-2) must be at least 0" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int8 --kv-residual -2
bad "kv residual -1"  "--kv-residual (-1) must be at least 0" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-precision int4 --kv-residual -1
bad "kv memory budget" "--budget excludes --kv-memory" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --kv-memory 16384
bad "kv memory small"  "--kv-memory (100 bytes) holds no position at fp32 (256 bytes a position)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --kv-memory 100
bad "kv memory alone"  "--budget, --set and --kv-memory need --policy" -- perplexity --model "$model" --text "$tmp/text.txt" --kv-memory 16384
bad "kv memory prefill" "--kv-memory chooses token budgets for eviction while decoding" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --kv-memory 16384 --prefill 100
bad "kv no model"      "--kv-precision requires --model" -- compare --kv-precision int8
ok  "compare model"    "ranked by perplexity at budget 64" -- compare --model "$model" --text "$tmp/text.txt" --budgets 32,64,128 --policies sliding-window,tova
csv_ok "compare model" --vary seconds --want rank,retainedAttentionMass,heavyHitterRecall -- compare --model "$model" --text "$tmp/text.txt" --budgets 32,64 --policies sliding-window,tova
ok  "record"           "" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/rec.npy" --tokens 200
caches=$(python3 -c "import struct,sys; b=open(sys.argv[1],'rb').read(); w=struct.unpack_from('<8I',b,20); print(w[1]*(w[6] or w[2]))" "$model")
ok  "record replays"   "$caches head(s)" -- trace --trace "$tmp/rec.npy"
ok  "record compare"   "tova" -- compare --trace "$tmp/rec.npy" --budgets 48,64 --policies tova,h2o
ok  "persistence"      "share persisting" -- persistence --trace "$tmp/rec.npy" --lags 1,8,32
bad "record exists"    "rec.npy: already exists (pass --force to replace it)" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/rec.npy"
ok  "record force"     "" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/rec.npy" --tokens 50 --force
bad "record tokens"    "tokens (5000) must be in 2 ... 1024" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/r2.npy" --tokens 5000
bad "model missing"    "no-such.kvm: cannot be opened" -- perplexity --model "$tmp/no-such.kvm" --text "$tmp/text.txt"
head -c 1000 "$model" >"$tmp/cut.kvm"
bad "model truncated"  "cut.kvm: truncated" -- perplexity --model "$tmp/cut.kvm" --text "$tmp/text.txt"
bad "model not one"    "text.txt: not a kvevict model" -- perplexity --model "$tmp/text.txt" --text "$tmp/text.txt"
printf 'a' >"$tmp/one.txt"
bad "text too short"   "one.txt: has 1 bytes; a text needs at least 2" -- perplexity --model "$model" --text "$tmp/one.txt"
bad "text missing"     "nope.txt: not a readable file" -- perplexity --model "$model" --text "$tmp/nope.txt"
bad "budget no policy" "--budget, --set and --kv-memory need --policy" -- perplexity --model "$model" --text "$tmp/text.txt" --budget 64
bad "model budget"     "Scissorhands: recentWindow (32) must be smaller than budget (16)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy scissorhands --budget 16
bad "model and trace"  "--trace and --steps replay a trace; --model runs the model" -- compare --model "$model" --text "$tmp/text.txt" --trace decode-4096
bad "model no text"    "--text" -- compare --model "$model"
bad "persistence lag"  "lags must be in 1 ... 48" -- persistence --trace "$tmp/rec.npy" --lags 49
# Keys, values and queries recorded beside the attention, replayed by the
# key-aware policies (docs/signals.md); each bad input one line naming it.
# mknpy FILE SHAPE VALUES: a float32 .npy, e.g. mknpy k.npy 4,2 "3 4 1 0".
mknpy() {
  python3 - "$@" <<'PY'
import struct, sys
path, shape, values = sys.argv[1], [int(d) for d in sys.argv[2].split(",")], [float(v) for v in sys.argv[3].split()]
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }" % ", ".join(map(str, shape))
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<%df" % len(values), *values))
PY
}
ok  "record signals"   "" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/sig.npy" --tokens 120 --keys "$tmp/keys.npy" --values "$tmp/values.npy" --queries "$tmp/queries.npy"
if [[ "$(cat "$tmp/err")" == *"keys.npy: [$caches, 120, "*"queries.npy: [$caches, 120, "* && -s "$tmp/values.npy" ]]; then pass; else fail "record signals: $(cat "$tmp/err")"; fi
ok  "replay knorm"     '"headDim": 32' -- run --policy knorm --budget 48 --trace "$tmp/sig.npy" --keys "$tmp/keys.npy" --format json
ok  "replay keydiff"   "keydiff" -- compare --trace "$tmp/sig.npy" --keys "$tmp/keys.npy" --values "$tmp/values.npy" --queries "$tmp/queries.npy" --budgets 48,64
ok  "replay all"       "knorm" -- compare --trace "$tmp/sig.npy" --keys "$tmp/keys.npy" --budgets 48,64,96
ok  "replay sweep"     "recentWindow" -- sweep --policy knorm --param recentWindow=0,8 --budgets 48 --trace "$tmp/sig.npy" --keys "$tmp/keys.npy"
# compare --model runs a named key-aware policy, its proxies replaying each
# window's full-cache keys, values and queries: on one window of the same 120
# bytes, exactly the retained mass of replaying the recorded files.
head -c 120 "$tmp/text.txt" >"$tmp/text120.txt"
"$tool" compare --trace "$tmp/sig.npy" --keys "$tmp/keys.npy" --values "$tmp/values.npy" --queries "$tmp/queries.npy" \
  --policies knorm,expected-attention,h2o --budgets 48 --format csv 2>/dev/null | cols - policy,metrics.retainedAttentionMass \
  | awk -F, '{printf "%s,%.6f\n", $1, $2}' | sort >"$tmp/replayed.csv"
"$tool" compare --model "$model" --text "$tmp/text120.txt" --policies knorm,expected-attention,h2o --budgets 48 \
  --format csv 2>/dev/null | cols - policy,retainedAttentionMass | tail -n +2 | awk -F, '{printf "%s,%.6f\n", $1, $2}' | sort >"$tmp/modelled.csv"
if [[ $(wc -l <"$tmp/replayed.csv") -eq 3 ]] && grep -q "^expected-attention,0\.[0-9]" "$tmp/modelled.csv" &&
  diff "$tmp/replayed.csv" "$tmp/modelled.csv" >/dev/null; then pass
else fail "compare --model key-aware proxies: $(cat "$tmp/replayed.csv" "$tmp/modelled.csv")"; fi
# "all" with --model is still the seven the published tables hold.
"$tool" compare --model "$model" --text "$tmp/text120.txt" --budgets 48 --format csv >"$tmp/all.csv" 2>/dev/null
if [[ $(wc -l <"$tmp/all.csv") -eq 9 ]] && ! grep -q "knorm\|keydiff\|expected" "$tmp/all.csv"; then pass
else fail "compare --model all: $(cat "$tmp/all.csv")"; fi
# By hand: keys with norms 5, 1, 2, 0.5, 1 at budget 3. Step 3 evicts the norm-5
# key (position 0), so step 4 keeps 0.1 + 0.2 + 0.3 of its weight: mass (1+1+1+0.6)/4.
mknpy "$tmp/hand.npy" 5,5 "0 0 0 0 0  1 0 0 0 0  .5 .5 0 0 0  .2 .3 .5 0 0  .4 .1 .2 .3 0"
mknpy "$tmp/handkeys.npy" 5,2 "3 4  1 0  0 2  .5 0  1 0"
ok  "knorm by hand"    '"retainedAttentionMass": 0.9,' -- run --policy knorm --budget 3 --trace "$tmp/hand.npy" --keys "$tmp/handkeys.npy" --format json
bad "replay no keys"   "knorm reads the new token's key (key), which a trace (attention weights only) does not supply: give --keys FILE.npy" -- run --policy knorm --trace "$tmp/sig.npy"
bad "replay no keys cmp" "keydiff reads the new token's key (key), which this trace and its files (attention, value) does not supply: give --keys FILE.npy" -- compare --policies keydiff --trace "$tmp/sig.npy" --values "$tmp/values.npy"
bad "replay missing"   "nokeys.npy: no such file (given as --keys, the keys)" -- run --policy knorm --trace "$tmp/sig.npy" --keys "$tmp/nokeys.npy"
bad "replay heads"     "handkeys.npy: shape (5, 2) has one head; the trace $tmp/sig.npy has $caches" -- run --policy knorm --trace "$tmp/sig.npy" --keys "$tmp/handkeys.npy"
record_short=$("$tool" record --model "$model" --text "$tmp/text.txt" --out "$tmp/sig60.npy" --tokens 60 --keys "$tmp/keys60.npy" 2>&1) || fail "record 60: $record_short"
bad "replay N"         "keys60.npy: N = 60 positions; the trace $tmp/sig.npy has 120" -- run --policy knorm --trace "$tmp/sig.npy" --keys "$tmp/keys60.npy"
mknpy "$tmp/handvalues.npy" 5,3 "0 0 0  0 0 0  0 0 0  0 0 0  0 0 0"
bad "replay dims"      "handvalues.npy: headDim 3 differs from $tmp/handkeys.npy's 2" -- run --policy knorm --budget 3 --trace "$tmp/hand.npy" --keys "$tmp/handkeys.npy" --values "$tmp/handvalues.npy"
bad "replay groups"    "keys.npy: 32 floats per position is not groups x headDim for headDim 64 (from $tmp/queries.npy)" -- run --policy knorm --trace "$tmp/sig.npy" --keys "$tmp/queries.npy" --queries "$tmp/keys.npy"
bad "replay set dim"   "KNorm: headDim 16 is set, but the recorded keys and values have 32 floats" -- run --policy knorm --trace "$tmp/sig.npy" --keys "$tmp/keys.npy" --set headDim=16
bad "replay generated" "give --trace FILE.npy (kvevict record writes both), not the generated trace 'decode-4096'" -- run --policy knorm --keys "$tmp/keys.npy"
bad "replay model"     "--keys, --values and --queries replay a recorded trace; --model runs the model" -- compare --model "$model" --text "$tmp/text.txt" --keys "$tmp/keys.npy"
bad "record keys exist" "keys.npy: already exists (pass --force to replace it)" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/sig2.npy" --tokens 120 --keys "$tmp/keys.npy"
bad "record same file" "--out and --keys both name" -- record --model "$model" --text "$tmp/text.txt" --out "$tmp/sig3.npy" --keys "$tmp/sig3.npy"
if [[ ! -e "$tmp/sig2.npy" && ! -e "$tmp/sig3.npy" ]]; then pass; else fail "record wrote the attention despite a refused target"; fi
# Retrieval tasks: the table, JSON rows, and each bad request one line.
heldout=$model_dir/heldout-sample.txt
ok  "tasks table"      "| passkey | 300 | sliding-window | 32 | decode |" -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 2 --samples 2 --policies sliding-window --budgets 32
ok  "tasks json"       '"moment": "prefill-query"' -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 1 --policies tova --budgets 32 --moments prefill-query --format json
ok  "tasks csv"        "task,policy,budget,moment,length,depth" -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 1 --policies none --format csv
csv_ok "tasks" --want accuracy_low,accuracy_high,granularity -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 2 --samples 1 --policies tova --budgets 32 --granularity sequence
ok  "tasks kv"         "| int8 |" -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 1 --policies sliding-window --budgets 32 --kv-precision int8
ok  "tasks kv json"    '"bytesPerPosition": 72.0' -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 1 --policies none --kv-precision int8 --format json
bad "tasks kv"         "--kv-precision: 'fp8' is not a KV precision" -- tasks --model "$model" --text "$heldout" --kv-precision fp8
bad "tasks unknown"    "unknown task 'haystack' (known: passkey, multikey, multivalue, vartrack, copy)" -- tasks --model "$model" --text "$heldout" --tasks haystack
bad "tasks too long"   "length 5000 is longer than the model's context" -- tasks --model "$model" --text "$heldout" --lengths 5000
bad "tasks budget"     "budget 400 is above the context length 300" -- tasks --model "$model" --text "$heldout" --lengths 300 --budgets 400
bad "tasks moment"     "unknown moment 'later'" -- tasks --model "$model" --text "$heldout" --moments later
bad "tasks filler"     "the filler text has 400 bytes" -- tasks --model "$model" --text "$tmp/text.txt" --lengths 600
ok  "prefill ppl"      "compressed once to the budget" -- compare --model "$model" --text "$tmp/text.txt" --prefill 300 --budgets 48,64 --policies sliding-window,snapkv
bad "prefill paged"    "--prefill compresses once after the prefill; it does not combine with the paged options" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --prefill 300 --block-size 16
bad "prefill long"     "--prefill (1024) must be below the model's context" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --prefill 1024
"$tool" tasks --model "$model" --text "$heldout" --lengths 300 --depths 2 --samples 1 --policies tova --budgets 32,64 --format json >"$tmp/tasks.json" 2>/dev/null
ok  "report tasks"     "" -- report --steps 50 --budgets 64 --policies tova --out "$tmp/t.html" --svg "$tmp/tsvg" --tasks "$tmp/tasks.json"
if [[ -s "$tmp/tsvg/needles-full.svg" && -s "$tmp/tsvg/needles-tova-decode-32.svg" && -s "$tmp/tsvg/task-accuracy-vs-budget-decode.svg" ]] && grep -q 'id="tasks"' "$tmp/t.html"; then pass; else fail "report --tasks: charts missing: $(ls "$tmp/tsvg" | tr '\n' ' ')"; fi
printf '[{"task": 1}]' >"$tmp/bad.json"
bad "report bad tasks" "bad.json: row 0:" -- report --steps 50 --budgets 64 --policies tova --out "$tmp/t2.html" --tasks "$tmp/bad.json"
if [[ ! -e "$tmp/t2.html" ]]; then pass; else fail "report wrote a page despite a bad --tasks file"; fi

# Numbers past 2^62 in the paged flags: the flag the user gave, never a wrapped product.
huge=4611686018427387904
bad "floor huge"       "--head-floor ($huge) must be at most --budget (64)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --layer-budget --head-floor $huge
bad "floor huge trace" "--head-floor ($huge) must be at most --budget (64)" -- compare --steps 50 --policies h2o --budgets 64 --layer-budget --head-floor $huge
bad "floor negative"   "--head-floor (-2) must be at least 0" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --layer-budget --head-floor -2
bad "layer budget huge" "h2o: budget ($huge) must be 1 ... 1023" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget $huge --layer-budget
bad "layer budget trace" "--budget ($huge) times the layer's" -- compare --steps 50 --policies h2o --budgets $huge --layer-budget
bad "areas huge"       "blockBudget (4) must be at least startBlocks + recentBlocks ($huge + $huge)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --block-size 16 --start-blocks $huge --recent-blocks $huge
bad "block size zero"  "--block-size (0) must be at least 1" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --block-size 0
bad "block size zero trace" "--block-size (0) must be at least 1" -- compare --steps 50 --policies h2o --budgets 64 --block-size 0
bad "block size negative" "--block-size (-16) must be at least 1" -- run --steps 50 --policy h2o --budget 64 --block-size -16
# Refused before any work: the error is stderr's only line (no progress line
# of work done first; off a terminal progress prints a line every tenth).
alone() {
  bad "$@"
  if [[ $(wc -l <"$tmp/err") -eq 1 ]]; then pass; else fail "$1: not before the work: $(head -c 300 "$tmp/err")"; fi
}
alone "prefill window"   "SnapKV prefill: the window (32 rows) is larger than the budget (16)" -- perplexity --model "$model" --text "$tmp/text.txt" --policy snapkv --budget 16 --set recentWindow=4 --prefill 100
alone "prefill nothing"  "--prefill (1023) leaves nothing to predict" -- perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --prefill 1023 --max-windows 1
alone "tasks window"     "PyramidKV prefill: the window (32 rows) is larger than layer 3's share" -- tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 1 --policies pyramidkv --budgets 40 --set recentWindow=4 --moments prefill
alone "tasks grid"       "is more than the 100000 samples one run may make" -- tasks --model "$model" --text "$heldout" --depths 100 --samples 100000
# bench --model: the decoder's speed and the split of a step, one line for a
# bad request before any work.
ok  "bench model"      "| decode | h2o | 40 | 1 | 1 | 0 | 48 |" -- bench --model "$model" --text "$heldout" --tokens 48 --rounds 1 --policies h2o --budgets 40 --threads 1 --format markdown
ok  "bench model json" '"attention":' -- bench --model "$model" --text "$heldout" --tokens 8 --rounds 1 --policies tova --budgets 4 --format json
# A prompt prefilled in chunks (a prefill row), two thread counts, every run
# together (a together row, and a prefill together row: the prompts fed together).
"$tool" bench --model "$model" --text "$heldout" --prompt 48 --prefill-chunk 16 --tokens 8 --rounds 1 --policies h2o --budgets 40 \
  --threads 1,2 --together --format json >"$tmp/bench-model.json" 2>/dev/null
rows=$(/usr/bin/python3 - "$tmp/bench-model.json" 2>&1 <<'PY'
import json, sys
print(" ".join(f"{r['mode']}/{r['threads']}/{r['runs']}/{r['prompt']}" for r in json.load(open(sys.argv[1]))["rows"]))
PY
)
if [[ $rows == "prefill/1/1/48 decode/1/1/48 decode/1/1/48 together/1/2/48 prefill together/1/2/48 prefill/2/1/48 decode/2/1/48 decode/2/1/48 together/2/2/48 prefill together/2/2/48" ]]; then
  pass
else
  fail "bench --model --prompt --threads --together: rows $rows"
fi
bad "bench prompt past" "bench --model: a prompt of 5000 tokens leaves none to decode" -- bench --model "$model" --text "$heldout" --prompt 5000 --policies none
bad "bench threads"    "--threads: 2000 is not in 0 ... 1024 (0: every core)" -- bench --model "$model" --text "$heldout" --threads 1,2000
# --policies narrows the bank benchmark too: of the five banks, h2o's alone.
"$tool" bench --policies h2o,snapkv --budgets 64 --seconds 0.01 --no-compare --bank-instances 64 --bank-budget 33 --format json >"$tmp/bench.json" 2>/dev/null
if [[ $(grep -c '"instances":' "$tmp/bench.json") -eq 1 && $(grep -B1 '"instances":' "$tmp/bench.json" | head -1) == *'"policy": "h2o",' ]]; then
  pass
else
  fail "bench --policies h2o,snapkv: bank rows $(grep -c '"instances":' "$tmp/bench.json")"
fi
bad "bench text alone" "bench: --text, --tokens, --rounds, --prompt, --prefill-chunk, --prompt-logits, --threads and --together need --model" -- bench --text "$heldout" --policies h2o --budgets 64 --no-compare --bank-instances 0
ok  "bench item"       '"policy": "expected-attention:evictEvery=8",' -- bench --policies knorm,expected-attention:evictEvery=8 --budgets 64 --seconds 0.01 --no-compare --bank-instances 0 --format json
bad "bench item bad"   "evictEvery" -- bench --policies expected-attention:evictEvery=0 --budgets 64 --seconds 0.01 --no-compare --bank-instances 0
bad "bench model bank" "bench --model times a decoder: --seconds, --no-compare and --bank-* do not apply" -- bench --model "$model" --bank-instances 4
bad "bench model file" "cannot be opened" -- bench --model /nonexistent.kvm
timings=tokensPerSecond,tokensPerSecondSpread.min,tokensPerSecondSpread.median,tokensPerSecondSpread.max,readBandwidthGBps,floorTokensPerSecond,ofFloor,speedup,shares.projections,shares.activation,shares.attention,shares.policies,shares.other
csv_ok "bench model" --vary "$timings" -- bench --model "$model" --text "$heldout" --prompt 16 --tokens 8 --rounds 1 --policies h2o --budgets 40 --threads 1
bad "bench csv"        "bench: --format csv needs --model" -- bench --policies h2o --budgets 64 --no-compare --bank-instances 0 --format csv
csv_ok "choose" --vary tokensPerSecond --want extraLow,extraHigh -- choose --model "$model" --text "$heldout" --budget 64 --windows 2 --samples 1 --policies h2o,tova

# serve-bench: the table and JSON rows, each bad request one line before any work.
ok  "serve table"      "| full cache | full | on |" -- serve-bench --model "$model" --text "$heldout" --sequences 2 --shared-prefix 32 --tokens 96 --policy none,tova --budget 32 --format markdown
ok  "serve json"       '"blocksSavedBySharing": 24' -- serve-bench --model "$model" --text "$heldout" --sequences 2 --shared-prefix 48 --tokens 64 --block-size 16 --format json
ok  "serve chunk"      '"peakCachePositions": 64' -- serve-bench --model "$model" --text "$heldout" --sequences 1 --shared-prefix 0 --tokens 96 --policy h2o --budget 48 --chunk 16 --window 8 --format json
csv_ok "serve" --vary seconds,tokensPerSecond --want blocksSavedBySharing -- serve-bench --model "$model" --text "$heldout" --sequences 2 --shared-prefix 32 --tokens 96 --policy none,tova --budget 32 --chunk 0,16
alone "serve chunk big" "a chunk of 200 positions is larger than the capacity of 96" -- serve-bench --model "$model" --text "$heldout" --tokens 96 --shared-prefix 0 --policy h2o --budget 48 --chunk 200
alone "serve prefix"   "--shared-prefix 512 is longer than the 96 tokens each sequence reads" -- serve-bench --model "$model" --text "$heldout" --tokens 96
alone "serve text"     "serve-bench: the text has 400 bytes; 4 sequences of 1024 bytes sharing 512 need 2560" -- serve-bench --model "$model" --text "$tmp/text.txt"
alone "serve pool"     "serve-bench: a pool of 3 blocks cannot hold one sequence, which needs 8" -- serve-bench --model "$model" --text "$heldout" --tokens 96 --shared-prefix 0 --pool-blocks 3
alone "serve mode"     "serve-bench: mode 'pages' is not token or block" -- serve-bench --model "$model" --text "$heldout" --modes pages
alone "serve sharing"  "--sharing: 'maybe' is not on or off" -- serve-bench --model "$model" --text "$heldout" --sharing maybe
alone "serve both"     "give --sharing or --no-prefix-sharing, not both" -- serve-bench --model "$model" --text "$heldout" --sharing on --no-prefix-sharing
alone "serve full chunk" "--chunk compresses a prompt and needs a policy: the full cache runs with --chunk 0 only" -- serve-bench --model "$model" --text "$heldout" --tokens 96 --shared-prefix 0 --chunk 16
# report --tasks: every field checked, one line, no page written.
bad_rows() {  # NAME JSON EXPECTED
  printf '%s' "$2" >"$tmp/rows.json"
  rm -f "$tmp/t3.html"
  bad "report rows $1" "$3" -- report --steps 50 --budgets 64 --policies tova --out "$tmp/t3.html" --tasks "$tmp/rows.json"
  if [[ ! -e "$tmp/t3.html" ]]; then pass; else fail "report rows $1: wrote a page"; fi
}
row='"task":"passkey","length":300,"depth":0.25,"correct":1,"evicted":0'
bad_rows "samples -1" "[{$row,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":-1}]" "row 0: 'samples' (-1) must be in 1 ... 4294967295"
bad_rows "budget -64" "[{$row,\"policy\":\"tova\",\"budget\":-64,\"moment\":\"decode\",\"samples\":4}]" "row 0: 'budget' (-64) must be in 0 ... 16777216"
bad_rows "budget 0"   "[{$row,\"policy\":\"tova\",\"budget\":0,\"moment\":\"decode\",\"samples\":4}]" "row 0: policy 'tova' with budget 0"
bad_rows "samples 2.5" "[{$row,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":2.5}]" "row 0: 'samples' must be a whole number, not 2.5"
bad_rows "correct"    "[{\"task\":\"passkey\",\"length\":300,\"depth\":0.25,\"correct\":5,\"evicted\":0,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":4}]" "row 0: 'correct' (5) must be in 0 ... 4"
bad_rows "depth"      "[{\"task\":\"passkey\",\"length\":300,\"depth\":1.5,\"correct\":1,\"evicted\":0,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":4}]" "row 0: 'depth' (1.5) must be in 0 ... 1"
bad_rows "evicted"    "[{\"task\":\"passkey\",\"length\":300,\"depth\":0.5,\"correct\":1,\"evicted\":-3,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":4}]" "row 0: 'evicted' (-3) must be in 0 ..."
bad_rows "full moment" "[{$row,\"policy\":\"full\",\"budget\":0,\"moment\":\"decode\",\"samples\":4}]" "row 0: policy 'full' with moment 'decode'"
bad_rows "length 0"   "[{\"task\":\"passkey\",\"length\":0,\"depth\":0.5,\"correct\":1,\"evicted\":0,\"policy\":\"tova\",\"budget\":32,\"moment\":\"decode\",\"samples\":4}]" "row 0: 'length' (0) must be in 1 ... 4294967295"

# Llama-family models (docs/models.md): a tiny random one in GGUF and in a
# safetensors folder through every model command, with its own tokenizer.
ok  "random gguf"      "architecture: llama" -- random-model --arch llama --type q4_k --out "$tmp/tiny.gguf" --tokenizer-text "$heldout"
ok  "random st"        "format: safetensors" -- random-model --arch qwen2 --format safetensors --type bf16 --out "$tmp/tiny-hf" --tokenizer-text "$heldout"
bad "random exists"    "exists (--force to replace it)" -- random-model --out "$tmp/tiny.gguf" --tokenizer-text "$heldout"
bad "random blocks"    "--width (80) is not a whole number of Q5_0's 32-element blocks" -- random-model --type q4_k --width 80 --heads 4 --out "$tmp/x.gguf" --tokenizer-text "$heldout"
# Rows of a K type that are not whole 256-element blocks fall back as llama.cpp's quantizer does.
ok  "random fallback"  "Q5_0 (14), F32 (5), Q4_K (2)" -- random-model --type q4_k --width 96 --ff 256 --heads 4 --out "$tmp/fallback.gguf" --tokenizer-text "$heldout"
bad "random st type"   "--type Q8_0: safetensors models hold F32, F16 or BF16" -- random-model --format safetensors --type q8_0 --out "$tmp/x" --tokenizer-text "$heldout"
bad "random type"      "q3_k" -- random-model --type q3_k --out "$tmp/x.gguf" --tokenizer-text "$heldout"
ok  "inspect"          "tokenizer: gpt2" -- inspect --model "$tmp/tiny.gguf"
ok  "inspect json"     '"llama.block_count": 2' -- inspect --model "$tmp/tiny.gguf" --json
ok  "inspect st"       '"model_type": "qwen2"' -- inspect --model "$tmp/tiny-hf" --json
ok  "tokenize"         '"tokens":[0,' -- tokenize --model "$tmp/tiny.gguf" --string "The pass key is 12345." --json
ok  "tokenize st"      "0 " -- tokenize --model "$tmp/tiny-hf" --string "hello world"
ok  "tokenize kvm"     "104 105" -- tokenize --model "$model" --string "hi"
bad "tokenize none"    "give --text FILE or --string TEXT" -- tokenize --model "$tmp/tiny.gguf"
ok  "ppl gguf"         "gpt2 BPE" -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy h2o,streaming-llm --budget 64 --format json
# --matmul int8 (issue 54): the products against 8-bit vectors reach the
# model -- a Q8_0 file's perplexity moves, a little -- and a model the kernels
# do not multiply is refused, as is a mode that does not exist.
"$tool" random-model --arch llama --type q8_0 --out "$tmp/q8.gguf" --tokenizer-text "$heldout" >/dev/null
for mode in exact int8; do
  "$tool" perplexity --model "$tmp/q8.gguf" --text "$tmp/text.txt" --policy h2o --budget 64 --matmul $mode --format json >"$tmp/ppl-$mode.json" 2>/dev/null
done
if python3 - "$tmp/ppl-exact.json" "$tmp/ppl-int8.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["rows"] for f in sys.argv[1:3])
for x, y in zip(a, b):
    assert x["predictions"] == y["predictions"], (x, y)
    assert x["bitsPerByte"] != y["bitsPerByte"], ("int8 did not change the products", x["bitsPerByte"])
    assert abs(x["bitsPerByte"] - y["bitsPerByte"]) < 0.01 * x["bitsPerByte"], (x["bitsPerByte"], y["bitsPerByte"])
PY
then pass; else fail "perplexity --matmul int8 against exact: $(head -c 300 "$tmp/ppl-int8.json")"; fi
bad   "matmul tiny"      "matmul mode int8: $model (kvevict-tiny) multiplies float32 matrices one vector at a time, not by the weight kernels, so it has no 8-bit products (only exact applies)" -- perplexity --model "$model" --text "$tmp/text.txt" --matmul int8
usage "matmul mode"      "--matmul: int4 not in {exact,int8}" -- perplexity --model "$tmp/q8.gguf" --text "$tmp/text.txt" --matmul int4
ok  "ppl gguf paged"   '"peakBlocks"' -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy tova --budget 64 --block-size 16 --format json
ok  "ppl gguf layer"   '"peakPositions"' -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy tova --budget 64 --layer-budget --format json
ok  "ppl gguf int8"    '"kvPrecision": "int8"' -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy snapkv --budget 64 --kv-precision int8 --format json
ok  "ppl gguf memory"  '"kvMemory": 16384' -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy tova --kv-memory 16384 --kv-precision fp32,int4 --format json
ok  "ppl st"           "full cache" -- perplexity --model "$tmp/tiny-hf" --text "$tmp/text.txt" --policy tova --budget 32
ok  "ppl context"      '"predictions"' -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --context 64 --format json
bad "ppl context big"  "--context 512 is over the 256 positions the model was trained on" -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --context 512
ok  "compare gguf"     "ranked by perplexity" -- compare --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --budgets 64,96 --policies h2o,tova
ok  "sweep gguf"       "recentWindow" -- sweep --model "$tmp/tiny.gguf" --text "$tmp/text.txt" --policy h2o --param recentWindow=8,16 --budgets 32
ok  "tasks gguf"       "passkey" -- tasks --model "$tmp/tiny.gguf" --text "$heldout" --lengths 128 --depths 1 --samples 2 --policies h2o --budgets 64
ok  "serve gguf"       '"peakBlocks"' -- serve-bench --model "$tmp/tiny.gguf" --text "$heldout" --sequences 2 --shared-prefix 32 --tokens 64 --format json
ok  "serve st"         "tokens/s" -- serve-bench --model "$tmp/tiny-hf" --text "$heldout" --sequences 2 --shared-prefix 32 --tokens 64 --policy h2o --budget 48
ok  "record gguf"      "" -- record --model "$tmp/tiny.gguf" --text "$heldout" --out "$tmp/att.npy" --keys "$tmp/k.npy" --tokens 64
if [[ -s "$tmp/att.npy" && -s "$tmp/k.npy" ]]; then pass; else fail "record gguf: no files"; fi
ok  "bench gguf"       "tokens/s" -- bench --model "$tmp/tiny.gguf" --text "$heldout" --tokens 64 --rounds 1 --policies h2o --budgets 48
ok  "logits"           "" -- logits --model "$tmp/tiny.gguf" --tokens 0,5,9,300 --out "$tmp/l.npy"
if [[ -s "$tmp/l.npy" ]]; then pass; else fail "logits: no file"; fi
bad "logits token"     "--tokens: 99999 is outside the model's vocabulary of 458" -- logits --model "$tmp/tiny.gguf" --tokens 1,99999 --out "$tmp/l2.npy"
bad "logits exists"    "l.npy" -- logits --model "$tmp/tiny.gguf" --tokens 1 --out "$tmp/l.npy"
# Every weight type through the four model commands the README shows.
for type in f32 f16 bf16 q8_0 q4_0 q5_0 q4_k q6_k; do
  m="$tmp/each-$type.gguf"
  ok "each $type write"   "weights:" -- random-model --type "$type" --out "$m" --context 128 --tokenizer-text "$heldout"
  ok "each $type ppl"     "sliding-window" -- perplexity --model "$m" --text "$tmp/text.txt" --policy sliding-window --budget 32 --max-windows 2
  ok "each $type tasks"   "passkey" -- tasks --model "$m" --text "$heldout" --lengths 96 --depths 1 --samples 1 --policies sliding-window --budgets 48
  ok "each $type serve"   '"peakBlocks"' -- serve-bench --model "$m" --text "$heldout" --sequences 2 --shared-prefix 16 --tokens 48 --format json
  ok "each $type record"  "" -- record --model "$m" --text "$heldout" --tokens 32 --out "$tmp/each-$type.npy"
done

# kvevict's own model as a GGUF: the same rows, to the last digit.
ok  "convert"          "architecture: kvevict-tiny" -- convert --model "$model" --out "$tmp/kvm.gguf"
if [[ $("$tool" perplexity --model "$tmp/kvm.gguf" --text "$tmp/text.txt" --policy h2o --budget 64 --format csv 2>/dev/null | without - seconds) \
      == $("$tool" perplexity --model "$model" --text "$tmp/text.txt" --policy h2o --budget 64 --format csv 2>/dev/null | without - seconds) ]]; then
  pass
else
  fail "convert: the GGUF's perplexity rows differ from the .kvm's"
fi
# A Llama-family GGUF re-quantized (tiny.gguf is Q4_K, with Q5_0 where a row is
# not whole 256-element blocks); kvevict reads what it wrote, and a
# safetensors folder is refused (its q and k rows are in Hugging Face's layout).
ok  "convert llama"    "weights: Q8_0" -- convert --model "$tmp/tiny.gguf" --out "$tmp/again.gguf" --type q8_0
ok  "convert llama ppl" "full cache" -- perplexity --model "$tmp/again.gguf" --text "$tmp/text.txt" --max-windows 1
bad "convert st"       "kvevict converts its own (.kvm) models and Llama-family GGUF files to GGUF" -- convert --model "$tmp/tiny-hf" --out "$tmp/again2.gguf"
head -c 100 "$tmp/tiny.gguf" >"$tmp/cut.gguf"
bad "gguf truncated"   "cut.gguf" -- perplexity --model "$tmp/cut.gguf" --text "$tmp/text.txt"
printf 'GGUF\x01\x00\x00\x00' >"$tmp/v1.gguf"
bad "gguf version"     "v1.gguf" -- inspect --model "$tmp/v1.gguf"

# stream: one text past the context, rows by segment, the chart, the sink shares.
ok  "stream"           "streaming-llm sinks=4  64      cache" -- stream --model "$model" --text "$heldout" --tokens 2500 --budget 64 --policy sliding-window,streaming-llm:sinks=4
ok  "stream markdown"  "| 0–1024 | 1024–2048 | 2048–2500 |" -- stream --model "$model" --text "$heldout" --tokens 2500 --budget 64 --policy h2o --positions cache --format markdown
ok  "stream json"      '"pastTrainedContext": true' -- stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy tova --positions original --no-full-cache --format json
stream_csv=$("$tool" stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy tova --positions cache --no-full-cache --format csv 2>/dev/null \
  | cols - label,budget,positions,segments.begin,segments.end,segments.predictions,segments.bytes)
if [[ $(tr '\n' ' ' <<<"$stream_csv") == "tova,64,cache,0,1024,1023,1023 tova,64,cache,1024,2048,476,476 " ]]; then pass; else fail "stream csv: $stream_csv"; fi
csv_ok "stream" --expand segments --vary seconds --want segments.bitsPerByte,params.sinks -- stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy tova,streaming-llm:sinks=4
csv_ok "stream sinks" -- stream --model "$model" --text "$heldout" --sinks --tokens 256
ok  "stream recompute" "recompute" -- stream --model "$model" --text "$heldout" --tokens 1500 --policy none --no-full-cache --recompute 32 --recompute-tokens 64
ok  "stream sinks"     "first position" -- stream --model "$model" --text "$heldout" --sinks --tokens 256
ok  "stream svg"       "" -- stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy h2o --svg "$tmp/stream.svg"
if grep -q '<polyline' "$tmp/stream.svg" && grep -q 'context (1024)' "$tmp/stream.svg"; then pass; else fail "stream --svg: no chart in $tmp/stream.svg"; fi
bad "stream svg kept"  "stream.svg: already exists" -- stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy h2o --svg "$tmp/stream.svg"
bad "stream too long"  "the stream asks for 99999 tokens, but the text makes" -- stream --model "$model" --text "$heldout" --tokens 99999
bad "stream budget"    "h2o: budget (1024) must be 1 ... 1023" -- stream --model "$model" --text "$heldout" --policy h2o --budget 1024
bad "stream positions" "positions 'absolute': expected 'original'" -- stream --model "$model" --text "$heldout" --positions absolute
bad "stream param"     "--policy h2o:sink=4: h2o has no parameter 'sink'" -- stream --model "$model" --text "$heldout" --policy h2o:sink=4
bad "stream recompute alone" "--recompute needs --recompute-tokens N" -- stream --model "$model" --text "$heldout" --recompute 32

# serve-bench past the context: a policy holds every cache, so the pool's peak stays where it was at the context.
peak_at() {
  "$tool" serve-bench --model "$model" --text "$heldout" --sequences 2 --shared-prefix 64 --tokens "$1" --policy h2o \
    --budget 64 --positions cache --format csv 2>/dev/null | cols - peakBlocks,peakCachePositions | tail -1
}
if [[ -n $(peak_at 1024) && $(peak_at 1024) == $(peak_at 3000) && $(peak_at 3000) == *",65" ]]; then
  pass
else
  fail "serve-bench past the context: peak blocks, peak per cache at 1024 tokens $(peak_at 1024), at 3000 $(peak_at 3000)"
fi
bad "serve full past"  "the full cache (policy none) stops there" -- serve-bench --model "$model" --text "$heldout" --sequences 2 --tokens 3000 --policy none
bad "serve positions"  "positions 'far': expected 'original'" -- serve-bench --model "$model" --text "$heldout" --positions far

# report --svg DIR/ (a trailing slash) creates the folder, as --svg DIR does.
ok  "report svg slash"  "" -- report --steps 100 --budgets 64 --policies tova --out "$tmp/slash.html" --svg "$tmp/slash-charts/"
if [[ -f "$tmp/slash-charts/mass-over-time.svg" ]]; then pass; else fail "report --svg DIR/: no $tmp/slash-charts/mass-over-time.svg"; fi

# What a new user met (hardening 5): one rule for a budget at the context, errors that name the mistake.
bad "budget at context" "h2o: budget (512) must be 1 ... 255: a cache holds the budget and the new token, within the model's context of 256 positions" -- perplexity --model "$tmp/tiny.gguf" --text "$heldout" --policy h2o
bad "compare model budget" "must be 1 ... 255" -- compare --model "$tmp/tiny.gguf" --text "$heldout" --budgets 64,256 --policies h2o
usage "context zero"   "--context: Value 0 not in range 2 to 16777216" -- perplexity --model "$tmp/tiny.gguf" --text "$heldout" --context 0
bad "config.json path" "is one file of a safetensors model: give its folder ($tmp/tiny-hf)" -- perplexity --model "$tmp/tiny-hf/config.json" --text "$heldout"
bad "text is a folder" "is a folder; the text is one file" -- perplexity --model "$tmp/tiny.gguf" --text "$tmp"
mkdir -p "$tmp/gguf-folder" && cp "$tmp/tiny.gguf" "$tmp/gguf-folder/"
bad "folder of a gguf" "holds no config.json but a GGUF file: give the file ($tmp/gguf-folder/tiny.gguf)" -- perplexity --model "$tmp/gguf-folder" --text "$heldout"
bad "tasks tokens"     "longer than the model's context of 256 tokens" -- tasks --model "$tmp/tiny.gguf" --text "$heldout" --lengths 300 --policies h2o --budgets 64
bad "random vocab"     "random-model: --vocab 10 is below the tokenizer's" -- random-model --vocab 10 --out "$tmp/v.gguf" --tokenizer-text "$heldout"
bad "no heldout split" "\`make heldout\` writes it" -- perplexity --model "$tmp/tiny.gguf" --text "$tmp/nowhere/heldout-split.txt"
ok  "compare skip"     "rank" -- compare --budgets 32,64 --skip-refused --steps 100
if "$tool" compare --budgets 32,64 --skip-refused --steps 100 2>&1 >/dev/null | grep -q "compare: skipped scissorhands at budget 32"; then pass; else fail "compare --skip-refused names no skipped pair"; fi
head -c 600 "$heldout" > "$tmp/latin1.txt" && printf 'caf\xe9 au lait\n' >> "$tmp/latin1.txt"
if "$tool" perplexity --model "$tmp/tiny.gguf" --text "$tmp/latin1.txt" 2>&1 >/dev/null | grep -q "is not UTF-8 text (byte 233 at offset 603"; then pass; else fail "non-UTF-8 text: no warning"; fi
ok  "random file type" '"general.file_type": 14' -- inspect --model "$tmp/tiny.gguf" --json
ok  "random rope"      "base 500000, scaled" -- random-model --rope-theta 500000 --rope-scaling linear --rope-factor 4 --out "$tmp/rope.gguf" --tokenizer-text "$heldout"

# Every model command takes --threads and --progress (issue 54): plain lines off a terminal, with a rate and the time left.
err=$("$tool" perplexity --model "$model" --text "$heldout" --max-windows 2 --policy h2o --budget 64 --progress lines --threads 999 2>&1 >/dev/null)
# In tokens, the first line at once: the full cache and h2o each step 1,023 of
# each 1,024-position window's tokens, two windows: 4,092.
first=$(printf '%s\n' "$err" | grep -v 'note:' | head -1)
if [[ $err == *"note: 999 threads asked for"* && $first == "perplexity: 0/4092 tokens (0%)" && $err == *"/4092 tokens"*"tokens/s"*"left"* && $err == *"4092/4092 tokens (100%)"*"in all"* ]]; then pass; else fail "perplexity --progress lines --threads 999: $err"; fi
# Every command that runs a model counts tokens (stream: 1,500 a run; the full
# cache, which stops at the context, and h2o at both position modes).
err=$("$tool" stream --model "$model" --text "$heldout" --tokens 1500 --budget 64 --policy h2o --positions original,cache --progress lines 2>&1 >/dev/null)
if [[ $err == "stream: 0/4500 tokens (0%)"* && $err == *"4500/4500 tokens (100%)"* ]]; then pass; else fail "stream --progress lines: $err"; fi
err=$("$tool" tasks --model "$model" --text "$heldout" --lengths 300 --depths 1 --samples 2 --policies h2o --budgets 64 --progress lines 2>&1 >/dev/null)
if [[ $err == "tasks: 0/1200 tokens (0%)"* && $err == *"1200/1200 tokens (100%)"* ]]; then pass; else fail "tasks --progress lines: $err"; fi
err=$("$tool" perplexity --model "$model" --text "$heldout" --max-windows 1 --progress off --threads 1 2>&1 >/dev/null)
if [[ -z $err ]]; then pass; else fail "--progress off printed: $err"; fi
for c in "compare --model $model --text $heldout" "sweep --policy h2o --param recentWindow=8 --model $model --text $heldout" "tasks --model $model --text $heldout" "stream --model $model --text $heldout" "serve-bench --model $model --text $heldout" "record --model $model --text $heldout --out $tmp/r.npy" "logits --model $model --tokens 1 --out $tmp/l.npy"; do
  if "$tool" ${c%% *} --help | grep -q -- "--threads" && "$tool" ${c%% *} --help | grep -q -- "--progress"; then pass; else fail "${c%% *}: no --threads or --progress"; fi
done
usage "progress mode"  "--progress: loud not in {auto,lines,off}" -- perplexity --model "$model" --text "$heldout" --progress loud

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
