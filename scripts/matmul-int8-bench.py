#!/usr/bin/env python3
"""kvevict's two products (--matmul exact and int8) beside llama.cpp, on the
same GGUF files, prompt ids and thread counts (issue 54, docs/performance.md
"8-bit products"): decode (64 tokens after a prompt of 128) and prefill of
128 and 512 tokens, rounds alternating engine by engine, each engine's best
round. Both engines compute the prompt's last logits only (kvevict:
--prompt-logits last). At --simd avx512 the int8 runs take avx512-vnni where
the CPU has it (as make performance does). Prints a markdown table.

Usage: scripts/matmul-int8-bench.py MODEL.gguf [MODEL.gguf ...] [--threads 1,2] [--rounds 2]
       [--simd avx512|avx2] (llama.cpp: its own best build, or haswell for avx2)
Needs build/kvevict and build/bench/llama_cpp_bench (cmake finds deps/llama-cpp)."""
import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOL = ROOT / "build" / "kvevict"
LLAMA = ROOT / "build" / "bench" / "llama_cpp_bench"
TEXT = ROOT / "model" / "heldout-sample.txt"
PASSES = [(128, 64), (512, 1)]


def run(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"matmul-int8-bench: {' '.join(map(str, args[:2]))} failed: {r.stderr.strip()[-300:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--simd", default="avx512", choices=["avx512", "avx2"])
    a = ap.parse_args()
    for exe in (TOOL, LLAMA):
        if not exe.exists():
            sys.exit(f"matmul-int8-bench: {exe} is missing (build it first)")
    variant = [] if a.simd == "avx512" else ["--cpu-variant", "haswell"]
    supported = [r["target"] for r in json.loads(run([TOOL, "simd", "--format", "json"]))["rows"] if r["supported"]]
    int8_simd = "avx512-vnni" if a.simd == "avx512" and "avx512-vnni" in supported else a.simd
    print("| model | threads | decode exact / int8 / llama.cpp tokens/s | int8 ratio | prefill 128 exact / int8 / "
          "llama.cpp | int8 ratio | prefill 512 exact / int8 / llama.cpp | int8 ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in a.models:
        ids = pathlib.Path("/tmp") / (pathlib.Path(model).stem + ".int8-bench.ids")
        ids.write_text(run([TOOL, "tokenize", "--model", model, "--text", TEXT]))
        for threads in a.threads.split(","):
            best = {}
            for r in range(a.rounds):
                for prompt, tokens in PASSES:
                    print(f"{pathlib.Path(model).name}, {threads} thread(s), prompt {prompt}, round {r + 1}/{a.rounds}",
                          file=sys.stderr)
                    for mode in ("exact", "int8"):
                        rows = json.loads(run([TOOL, "bench", "--model", model, "--text", TEXT, "--prompt", prompt,
                                               "--tokens", tokens, "--rounds", 1, "--policies", "none", "--threads",
                                               threads, "--simd", int8_simd if mode == "int8" else a.simd,
                                               "--matmul", mode, "--prompt-logits", "last", "--format", "json"]))["rows"]
                        for row in rows:
                            phase = "decode" if row["mode"] == "decode" else f"prefill{prompt}"
                            if phase == "decode" and prompt != 128:
                                continue
                            best[(mode, phase)] = max(best.get((mode, phase), 0.0), row["tokensPerSecond"])
                    lj = json.loads(run([LLAMA, model, "--ids", ids, "--prompt", prompt, "--tokens", tokens,
                                         "--rounds", 1, "--warmup", 0, "--threads", threads] + variant))["best"]
                    best[("llama", f"prefill{prompt}")] = max(best.get(("llama", f"prefill{prompt}"), 0.0),
                                                              lj["prefillTokensPerSecond"])
                    if prompt == 128:
                        best[("llama", "decode")] = max(best.get(("llama", "decode"), 0.0), lj["decodeTokensPerSecond"])
            cells = []
            for phase in ("decode", "prefill128", "prefill512"):
                e, i, l = (best[(m, phase)] for m in ("exact", "int8", "llama"))
                fmt = "{:.1f}" if max(e, i, l) < 100 else "{:.0f}"
                cells += [" / ".join(fmt.format(v) for v in (e, i, l)), f"{i / l:.2f}x"]
            print(f"| {pathlib.Path(model).name} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
