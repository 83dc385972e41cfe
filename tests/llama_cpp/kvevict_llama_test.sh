#!/usr/bin/env bash
# kvevict-llama's bad input (issue 53, item 6): each refusal one line,
# "kvevict-llama: error: ...", naming what was wrong, a non-zero exit, and
# nothing written on stdout; and a run that works, through `kvevict llama`.
#   kvevict_llama_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
src=$2
tool=$build/kvevict-llama
text=$src/model/heldout-sample.txt
small=$src/model/kvevict-small.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
passed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# bad NAME WANT-EXIT WANT-TEXT -- ARGS...
bad() {
  local name=$1 want_rc=$2 want=$3
  shift 4
  "$tool" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? err
  err=$(cat "$tmp/err")
  if [[ $rc -ne $want_rc ]]; then fail "$name: exit $rc, not $want_rc ($err)"; return; fi
  if [[ $err != *"$want"* ]]; then fail "$name: stderr '$err' lacks '$want'"; return; fi
  if [[ $(wc -l <"$tmp/err") -ne 1 || $err != "kvevict-llama: error: "* ]]; then
    fail "$name: stderr is not one 'kvevict-llama: error: ' line: $err"
    return
  fi
  if [[ -s $tmp/out ]]; then fail "$name: wrote to stdout"; return; fi
  passed=$((passed + 1))
}

run=(perplexity --text "$text" --max-windows 1 --context 256)
# kvevict reads the .kvm (its own format); llama.cpp refuses it, and its reason is passed on.
bad "llama.cpp refuses the model" 1 "llama.cpp cannot load $src/model/kvevict-tiny.kvm" -- "${run[@]}" --model "$src/model/kvevict-tiny.kvm"
bad "missing model" 1 "kvevict-llama: error:" -- "${run[@]}" --model "$tmp/none.gguf"
bad "queries" 1 "expected-attention needs the queries before RoPE" -- "${run[@]}" --model "$small" --policy expected-attention --budget 64
bad "pyramidkv" 1 "pyramidkv's budget differs by layer" -- "${run[@]}" --model "$small" --policy pyramidkv --budget 64
bad "flash attention" 1 "h2o reads the attention weights, which llama.cpp's graph shows only with flash attention off" -- "${run[@]}" --model "$small" --policy h2o --budget 64 --flash-attn
bad "budget past the context" 1 "budget (256) must be 1 ... 255" -- "${run[@]}" --model "$small" --policy h2o --budget 256
bad "precision" 1 "--kv-precision (int8) must be fp32 or fp16" -- "${run[@]}" --model "$small" --policy h2o --budget 64 --kv-precision int8
bad "unknown policy" 1 "unknown policy 'h3o'" -- "${run[@]}" --model "$small" --policy h3o --budget 64
bad "unknown flag" 2 "--polcy" -- "${run[@]}" --model "$small" --polcy h2o

stream=(stream --model "$small" --text "$text" --context 256)
bad "stream: a context shift keeping the budget" 1 "--context-shift (64) must be 0 ... 63" -- "${stream[@]}" --policy none --budget 64 --context-shift 64
bad "stream: a position mode" 1 "middle" -- "${stream[@]}" --policy h2o --budget 64 --positions middle
bad "stream: past the text" 1 "the stream asks for 999999 tokens" -- "${stream[@]}" --tokens 999999 --policy h2o --budget 64
bad "stream: flash attention" 1 "tova reads the attention weights" -- "${stream[@]}" --policy tova --budget 64 --flash-attn
bad "stream: budget past the context" 1 "budget (256)" -- "${stream[@]}" --policy h2o --budget 256
bad "stream: a context past the trained one" 1 "--context (99999) must be 2 ..." -- stream --model "$small" --text "$text" --context 99999
bad "stream: nothing to run" 1 "nothing to run" -- "${stream[@]}" --policy none --no-full-cache

# Through kvevict llama: the rows, the full cache first.
out=$("$build/kvevict" llama perplexity --model "$small" --text "$text" --max-windows 1 --context 256 --policy tova \
  --budget 64 --format json 2>"$tmp/err")
if [[ $? -ne 0 ]]; then
  fail "kvevict llama perplexity: $(cat "$tmp/err")"
elif ! /usr/bin/python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
assert list(doc) == ["command", "model", "rows"] and doc["command"] == "llama perplexity", doc
assert doc["model"] == sys.argv[2], doc
rows = doc["rows"]
assert [r["policy"] for r in rows] == [None, "tova"], rows
assert rows[0]["evicted"] == 0 and rows[1]["evicted"] > 0, rows
assert rows[1]["granularity"] == "sequence" and rows[1]["budget"] == 64, rows
' "$out" "$small"; then
  fail "kvevict llama perplexity: rows not as expected: $out"
else
  passed=$((passed + 1))
fi

# kvevict llama stream: the full cache, the policy at both position modes, the context shift.
out=$("$build/kvevict" llama stream --model "$small" --text "$text" --tokens 300 --context 256 --policy sliding-window \
  --budget 64 --context-shift 4 --format json 2>"$tmp/err")
if [[ $? -ne 0 ]]; then
  fail "kvevict llama stream: $(cat "$tmp/err")"
elif ! /usr/bin/python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
assert list(doc) == ["command", "model", "rows"] and doc["command"] == "llama stream", doc
rows = doc["rows"]
assert [(r["label"], r["positions"]) for r in rows] == [("full cache", "original"), ("sliding-window", "original"),
    ("sliding-window", "cache"), ("context-shift keep=4", "cache")], rows
assert rows[0]["tokens"] == 256 and all(r["tokens"] == 300 for r in rows[1:]), rows
assert all(r["peakPositions"] == 65 for r in rows[1:]), rows
' "$out"; then
  fail "kvevict llama stream: rows not as expected: $out"
else
  passed=$((passed + 1))
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
