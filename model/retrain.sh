#!/usr/bin/env bash
# Retrains the committed model by its recipe (model/README.md, "Training"):
# stage 2 from the version-1 model of commit 40081a8, replaying its plan
# switches with --stop-at, then stage 3 from stage 2's weights. About two
# hours on 2 cores; each stage checkpoints every 25 steps, so rerunning this
# after an interruption resumes where it stopped.
#
#   bash model/retrain.sh [OUT]        (default: build/model-retrain)
#
# Writes into OUT only (OUT/stage2, OUT/stage3): the committed files in
# model/ are never replaced. To adopt the result, copy OUT/stage3's
# kvevict-tiny.kvm and reference.npy into model/ and rerun
# model/task_reference.py and `make docs`. Needs the repository's history
# (not a shallow clone) for the version-1 weights, and the training packages
# (`bash scripts/install-deps.sh --training`). PyTorch on several threads is
# not bit-reproducible, so the numbers will differ slightly from card.json.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build/model-retrain}
mkdir -p "$out/stage2" "$out/stage3"
say() { echo "retrain: $*"; }

if [[ ! -s $out/v1.kvm ]]; then
  git -C "$root" show 40081a8:model/kvevict-tiny.kvm > "$out/v1.kvm.tmp" ||
    { echo "retrain: error: cannot read the version-1 weights (git show 40081a8:model/kvevict-tiny.kvm): is this a shallow clone?" >&2; exit 1; }
  mv "$out/v1.kvm.tmp" "$out/v1.kvm"
fi

train() { (cd "$here" && /usr/bin/python3 train.py "$@"); }

# Stage 2: the plan changed after steps 50, 425 and 1,025; each --stop-at
# replays one switch. A finished part leaves a marker, so a rerun skips it
# (train.py itself resumes a part from its checkpoint).
p1=300:copypairs:32:128,1000:mix:8:512,250:mix:8:1024
p2=150:copypairs:32:128,600:mix:8:512,150:mix:8:1024
p3=150:copypairs:32:128,275:mix:8:512,250:copypairs:32:128,275:mix:8:512,200:mix:8:1024
p4=150:copypairs:32:128,275:mix:8:512,250:copypairs:32:128,275:mix:8:512,400:mix:8:1024
if [[ ! -s $out/stage2/card.json ]]; then
  say "stage 2 (1,350 steps from the version-1 model)"
  part() {  # part N PLAN [--stop-at S]
    local n=$1; shift
    [[ -e $out/stage2/.part$n-done ]] && return 0
    train --init "$out/v1.kvm" --seed 1234 --out "$out/stage2" --phases "$@"
    touch "$out/stage2/.part$n-done"
  }
  part 1 "$p1" --stop-at 50
  part 2 "$p2" --stop-at 425
  part 3 "$p3" --stop-at 1025
  part 4 "$p4"
fi

# Stage 3: 600 steps at 1,024 from stage 2's weights, a fresh optimiser.
say "stage 3 (600 steps at 1,024 from stage 2)"
train --init "$out/stage2/kvevict-tiny.kvm" --seed 1350 --lr 6e-4 --min-lr 1e-4 --out "$out/stage3" \
  --phases 600:mix:8:1024
say "done: $out/stage3 (kvevict-tiny.kvm, reference.npy, card.json, training-log.csv)"
