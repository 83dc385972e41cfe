#!/usr/bin/env bash
# Trains kvevict-small from scratch by its recipe (model/train_small.py's
# defaults: the plan in model/kvevict-small.json), on one thread, into OUT
# (default build/model-small), then runs model/small_post.sh: copies the
# results into model/ and checks them against the C++ engine.
#
#   bash model/small_train.sh [OUT]       (make model-small)
#
# About 100 minutes on one core of the 2-core development machine. The
# trainer checkpoints every 3 minutes to OUT/checkpoint.pt: rerunning this
# after an interruption resumes there. Needs build/kvevict (or $KVEVICT), the
# training packages (bash scripts/install-deps.sh --training) and the corpus.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build/model-small}
tool=${KVEVICT:-$root/build/kvevict}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
[[ -x $tool ]] || { echo "small_train: error: $tool is not built (make build-run)" >&2; exit 1; }
mkdir -p "$out"

# The vocabulary: kvevict's own BPE trainer (pre-tokenizer llama-bpe) on
# every 6th training file, 3,838 merges: BOS, EOS, 256 bytes, 3,838 tokens.
if [[ ! -s $out/tokenizer.gguf ]]; then
  /usr/bin/python3 "$here/small_tokenizer.py" "$out/tokenizer-text.txt"
  "$tool" random-model --format gguf --type f16 --tied --tokenizer-text "$out/tokenizer-text.txt" \
    --merges 3838 --vocab 4096 --out "$out/tokenizer.gguf" --force >/dev/null
fi
if [[ -s $root/model/kvevict-small.json ]]; then
  /usr/bin/python3 - "$root/model/kvevict-small.json" "$out/tokenizer.gguf" <<'PY' || true
import hashlib, json, sys
want = json.load(open(sys.argv[1])).get("tokenizer", {}).get("sha256_16")
got = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()[:16]
if want and want != got:
    print(f"small_train: note: this tokenizer.gguf ({got}) differs from the committed model's ({want}): "
          "kvevict's BPE trainer changed, so the vocabulary will too")
PY
fi

/usr/bin/python3 "$here/train_small.py" --tokenizer "$out/tokenizer.gguf" --out "$out" --threads 1
bash "$here/small_post.sh" "$out"
