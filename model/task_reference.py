#!/usr/bin/python3
"""PyTorch's greedy answers to a fixed set of task prompts, for the C++ tests.

    /usr/bin/python3 model/task_reference.py [--model-dir model/]

Reads MODEL_DIR/kvevict-tiny.kvm, builds 3 prompts per task (model/tasks.py,
seed 2024, filler from MODEL_DIR/heldout-sample.txt, 512 bytes) and writes
MODEL_DIR/task-reference.json: each prompt (hex), the expected answer, and the
bytes greedy decoding with the full cache produces (as many as the answer
has). tests/tasks_test.cpp checks that the C++ decoder produces the same
bytes. train.py's model definition is the one used.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--per-task", type=int, default=3)
    args = ap.parse_args()
    weights = os.path.join(args.model_dir, "kvevict-tiny.kvm")
    words, _ = train.read_tensors(weights)
    vocab, layers, heads, width, ff, context, kv_word, _ = words
    cfg = train.Config(layers=layers, heads=heads, width=width, ff=ff, context=context,
                       kv_heads=kv_word if kv_word else heads)
    model = train.Model(cfg)
    train.read_weights(model, weights)
    model.eval()
    filler_text = open(os.path.join(args.model_dir, "heldout-sample.txt"), "rb").read()
    rng = np.random.default_rng(2024)

    def filler(n):
        s = int(rng.integers(0, len(filler_text) - n - 1))
        return filler_text[s:s + n]

    cases = []
    with torch.no_grad():
        for task in tasks.TASKS:
            for i in range(args.per_task):
                # The committed task-reference.json was built with the
                # training placement; any prompt serves (the test checks
                # the decoder against PyTorch, not the task).
                prompt, answer, _, _ = tasks.build(rng, task, args.length, filler,
                                                   depth=(i + 0.5) / args.per_task, as_trained=True)
                seq = list(prompt)
                out = []
                for _ in range(len(answer)):
                    logits = model(torch.tensor(seq, dtype=torch.int64)[None])[0, -1]
                    nxt = int(torch.argmax(logits))  # ties: the lowest index, as the C++ argmax
                    out.append(nxt)
                    seq.append(nxt)
                cases.append({"task": task, "prompt_hex": prompt.hex(), "answer": answer.decode(),
                              "greedy_hex": bytes(out).hex()})
    path = os.path.join(args.model_dir, "task-reference.json")
    with open(path, "w") as f:
        json.dump({"model": "kvevict-tiny.kvm", "length": args.length, "cases": cases}, f, indent=1)
    right = sum(c["greedy_hex"] == c["answer"].encode().hex() for c in cases)
    print(f"wrote {path}: {len(cases)} prompts, {right} answered exactly by PyTorch")


if __name__ == "__main__":
    main()
