#!/usr/bin/env bash
# After model/train_small.py: copies its files into model/ and checks them.
#
#   bash model/small_post.sh [OUT]              the finished run in OUT (default
#                                               build/model-small) -> model/, then the checks
#   bash model/small_post.sh OUT --partial DIR  a run still going (or stopped): exports
#                                               OUT/checkpoint.pt into DIR (never model/),
#                                               then the same checks on DIR
#
# The checks (their output also in DEST-checks/ under OUT):
#   tests/model/small_tokenizer_test.py   model/bpe.py == kvevict tokenize
#   tests/model/small_reference_test.py   kvevict logits == the training code's forward pass
#   kvevict perplexity                    full cache, model/heldout-sample.txt
#   kvevict tasks                         full cache, all five tasks at 512, 1,024, 2,048 tokens
#   model/small_sink.py                   attention on BOS / the first 4 positions per layer
# Runs on one thread (OMP_NUM_THREADS=1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build/model-small}
tool=${KVEVICT:-$root/build/kvevict}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
py=/usr/bin/python3
say() { echo "small_post: $*"; }

if [[ ${2:-} == --partial ]]; then
  dest=${3:-$out/partial}
  checks=$out/partial-checks
  $py "$here/train_small.py" --tokenizer "$out/tokenizer.gguf" --out "$out" --export-only --export-to "$dest"
else
  if [[ ! -s $out/kvevict-small.json ]] || grep -q '"partial"' "$out/kvevict-small.json"; then
    echo "small_post: error: $out/kvevict-small.json is missing: the training has not finished (--partial DIR checks a checkpoint)" >&2
    exit 1
  fi
  dest=$root/model
  checks=$out/checks
  for f in kvevict-small.gguf kvevict-small-reference.npy kvevict-small-log.csv kvevict-small.json; do
    cp "$out/$f" "$dest/$f"
  done
  say "copied kvevict-small.{gguf,json}, kvevict-small-reference.npy, kvevict-small-log.csv into $dest"
fi
mkdir -p "$checks"
gguf=$dest/kvevict-small.gguf
say "$gguf: $(stat -c %s "$gguf") bytes"

status=0
run_check() {  # run_check NAME CMD...: output to $checks/NAME.txt and the terminal
  local name=$1; shift
  say "== $name: $*"
  if "$@" 2>&1 | tee "$checks/$name.txt"; then :; else say "$name FAILED"; status=1; fi
}
run_check tokenizer $py "$root/tests/model/small_tokenizer_test.py" "$tool" "$gguf" "$root/model/heldout-sample.txt"
run_check logits $py "$root/tests/model/small_reference_test.py" "$tool" "$dest"
run_check perplexity "$tool" perplexity --model "$gguf" --text "$root/model/heldout-sample.txt"
run_check tasks "$tool" tasks --model "$gguf" --text "$root/model/heldout-sample.txt" --tasks all \
  --lengths 512,1024,2048 --policies none --depths 5 --samples 4
run_check sink $py "$here/small_sink.py" --model "$gguf" --json "$checks/sink.json"
if [[ $dest == "$root/model" && -s $checks/sink.json ]]; then
  # the sink table joins the card
  $py - "$dest/kvevict-small.json" "$checks/sink.json" <<'PY'
import json, sys
card = json.load(open(sys.argv[1]))
card["attention_sink"] = json.load(open(sys.argv[2]))
with open(sys.argv[1], "w") as f:
    json.dump(card, f, indent=2)
PY
fi
say "checks written to $checks (status $status)"
exit $status
