#!/usr/bin/python3
"""The attention sink of kvevict-small: per layer, the share of attention that
lands on position 0 (BOS) and on the first 4 positions, against what an even
spread over the positions a query sees would give.

    /usr/bin/python3 model/small_sink.py [--model model/kvevict-small.gguf] [--json OUT]

Runs model/train_small.py's forward pass (the training code) on the GGUF's
weights over held-out windows (BOS + N tokens of the held-out split,
consecutive) of 512, 1,024 and 2,048 tokens, and averages each layer's
attention over its query heads, the windows and the query positions t >= 16
(position t sees t + 1 keys, so an even spread gives 1 / (t + 1) to position
0 and 4 / (t + 1) to the first 4).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "model"))
import train_small as T  # noqa: E402
from corpus import corpus_files, split  # noqa: E402
from reference import gguf_io as G  # noqa: E402

FIRST_QUERY = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "kvevict-small.gguf"))
    ap.add_argument("--lengths", default="512,1024,2048")
    ap.add_argument("--windows", type=int, default=4, help="held-out windows per length")
    ap.add_argument("--json", help="write the table here as JSON too")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = G.read_gguf(args.model)
    cfg = T.config_of_gguf(g.metadata)
    enc = T.Encoder.from_gguf_metadata(g.metadata)
    model = T.Model(cfg)
    T.load_gguf_weights(model, g)
    model.eval()
    _, held = split(corpus_files())
    tokens = np.asarray(enc.encode(b"".join(held)[:400000]), dtype=np.int64)
    out = {"model": os.path.basename(args.model), "first_query": FIRST_QUERY, "windows": args.windows,
           "lengths": {}}
    print(f"{args.model}: {cfg.layers} layers x {cfg.heads} query heads; queries t >= {FIRST_QUERY}, "
          f"{args.windows} held-out windows per length")
    print("| length | layer | on BOS (pos 0) | even spread | ratio | on first 4 | even spread | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for L in (int(x) for x in args.lengths.split(",")):
        t = np.arange(L)
        q = t >= FIRST_QUERY
        even0 = float((1.0 / (t[q] + 1)).mean())
        even4 = float((np.minimum(4, t[q] + 1) / (t[q] + 1)).mean())
        s0 = np.zeros(cfg.layers)
        s4 = np.zeros(cfg.layers)
        for w in range(args.windows):
            row = np.concatenate([[enc.bos], tokens[w * L:(w + 1) * L - 1]])
            keep = []
            with torch.no_grad():
                model(torch.from_numpy(row)[None], keep)
            for layer, att in enumerate(keep):   # [1, H, T, T]
                a = att[0].numpy()
                s0[layer] += a[:, q, 0].mean() / args.windows
                s4[layer] += a[:, q, :4].sum(-1).mean() / args.windows
        rows = []
        for layer in range(cfg.layers):
            print(f"| {L} | {layer} | {s0[layer]:.4f} | {even0:.4f} | {s0[layer] / even0:.1f}x | "
                  f"{s4[layer]:.4f} | {even4:.4f} | {s4[layer] / even4:.1f}x |")
            rows.append({"layer": layer, "bos_share": round(float(s0[layer]), 5),
                         "first4_share": round(float(s4[layer]), 5)})
        out["lengths"][str(L)] = {"even_bos": round(even0, 5), "even_first4": round(even4, 5), "layers": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
