#!/usr/bin/env python3
"""The KV bytes one position costs the example models of docs/models.md.

kvevict's store reports `bytesPerPosition` for one cache (one layer's KV
head) at each precision; a model holds layers x KV heads caches. This asks
the tool for the per-cache figure at 64-dimension heads (the examples' head
size), from a tiny random model with such heads, and multiplies.

  python3 scripts/models-kv-table.py [build/kvevict]
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TOOL = sys.argv[1] if len(sys.argv) > 1 else "build/kvevict"
ROOT = Path(__file__).resolve().parent.parent
# name, layers, KV heads (head size 64 for all three): their config.json files
SHAPES = [("SmolLM2-135M", 30, 3), ("Qwen2.5-0.5B", 24, 2), ("Llama-3.2-1B", 16, 8)]
PRECISIONS = ["fp32", "fp16", "int8", "int4"]


def per_cache(model: Path, text: Path) -> dict:
    out = {}
    for p in PRECISIONS:
        rows = json.loads(subprocess.run(
            [TOOL, "perplexity", "--model", str(model), "--text", str(text), "--kv-precision", p,
             "--max-windows", "1", "--context", "64", "--format", "json"],
            check=True, capture_output=True, text=True).stdout)["rows"]
        out[p] = rows[-1]["bytesPerPosition"]  # the full cache at that precision
    return out


with tempfile.TemporaryDirectory() as tmp:
    model = Path(tmp) / "heads64.gguf"
    subprocess.run([TOOL, "random-model", "--width", "256", "--heads", "4", "--kv-heads", "2", "--out", str(model),
                    "--tokenizer-text", str(ROOT / "model" / "heldout-sample.txt")],
                   check=True, capture_output=True)
    text = Path(tmp) / "text.txt"
    text.write_bytes((ROOT / "model" / "heldout-sample.txt").read_bytes()[:2000])
    cache = per_cache(model, text)

print("| model | caches (layers x KV heads) | " + " | ".join(f"{p} bytes a position" for p in PRECISIONS)
      + " | fp16, 4,096 positions |")
print("|---|---:|" + "---:|" * len(PRECISIONS) + "---:|")
for name, layers, kv in SHAPES:
    caches = layers * kv
    cells = [f"{cache[p] * caches:,.0f}" for p in PRECISIONS]
    print(f"| {name} | {layers} x {kv} = {caches} | " + " | ".join(cells)
          + f" | {cache['fp16'] * caches * 4096 / 2**20:,.0f} MiB |")
print()
print("Per cache at head size 64: " + ", ".join(f"{p} {cache[p]:g} B" for p in PRECISIONS)
      + " (int4 at its default residual window, its key groups' scales shared out).")
