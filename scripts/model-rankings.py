#!/usr/bin/env python3
"""Do the proxies rank the policies as perplexity does? (docs/real-model.md §4)

Runs build/kvevict three ways and prints one Markdown table: each policy's rank
by (a) retained mass on the synthetic canonical trace at its ranking budget,
(b) retained mass and (c) heavy-hitter recall on the real model's own attention,
and (d) perplexity with the model really evicting -- (b)-(d) at each --budget
given -- plus Spearman's rank correlation of each proxy with perplexity.

Usage: scripts/model-rankings.py [--model FILE] [--text FILE] [--budgets 64,128,256,512]
"""
import argparse
import json
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOL = str(ROOT / "build" / "kvevict")


def ranks(values, higher_is_better):
    """Competition ranks (1 = best; ties share the best rank)."""
    order = sorted(values, key=lambda k: -values[k] if higher_is_better else values[k])
    out = {}
    for i, k in enumerate(order):
        prev = order[i - 1] if i else None
        out[k] = out[prev] if prev is not None and values[prev] == values[k] else i + 1
    return out


def spearman(a, b):
    keys = sorted(a)
    n = len(keys)
    ma = sum(a[k] for k in keys) / n
    mb = sum(b[k] for k in keys) / n
    cov = sum((a[k] - ma) * (b[k] - mb) for k in keys)
    va = sum((a[k] - ma) ** 2 for k in keys) ** 0.5
    vb = sum((b[k] - mb) ** 2 for k in keys) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="model/kvevict-tiny.kvm")
    ap.add_argument("--text", default="model/heldout-sample.txt")
    ap.add_argument("--budgets", default="64,128,256,512")
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]

    synth = json.loads(subprocess.run([TOOL, "compare", "--format", "json"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout)
    synth_mass = {r["policy"]: r["metrics"]["retainedAttentionMass"]
                  for r in synth["rows"] if r["budget"] == 512}
    model = json.loads(subprocess.run(
        [TOOL, "compare", "--model", args.model, "--text", args.text, "--budgets", args.budgets,
         "--format", "json"], cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    rows = [r for r in model["rows"] if r["policy"] is not None]
    policies = sorted({r["policy"] for r in rows})
    r_synth = ranks(synth_mass, True)

    print("| budget | policy | synthetic mass rank | real-attention mass rank | real-attention recall rank "
          "| perplexity rank | perplexity |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    summary = []
    for b in budgets:
        at = {r["policy"]: r for r in rows if r["budget"] == b}
        mass = ranks({p: at[p]["retainedAttentionMass"] for p in policies}, True)
        recall = ranks({p: at[p]["heavyHitterRecall"] for p in policies}, True)
        ppl = ranks({p: at[p]["perplexity"] for p in policies}, False)
        for p in sorted(policies, key=lambda p: (ppl[p], p)):
            print(f"| {b} | {p} | {r_synth[p]} | {mass[p]} | {recall[p]} | {ppl[p]} | "
                  f"{at[p]['perplexity']:.4f} |")
        summary.append((b, spearman(r_synth, ppl), spearman(mass, ppl), spearman(recall, ppl)))
    print()
    print("| budget | Spearman ρ: synthetic mass vs perplexity | real-attention mass vs perplexity "
          "| real-attention recall vs perplexity |")
    print("|---:|---:|---:|---:|")
    for b, s, m, r in summary:
        print(f"| {b} | {s:+.3f} | {m:+.3f} | {r:+.3f} |")


if __name__ == "__main__":
    main()
