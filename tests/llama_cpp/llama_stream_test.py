#!/usr/bin/env python3
"""kvevict-llama stream against kvevict stream (issue 53, items 3-5).

On random F32 GGUFs of each architecture, llama.cpp with an F32 cache and
kvevict's decoder at sequence granularity read the same stream past the
context: for every policy, at original and at cache positions (llama.cpp's
survivors shifted by llama_memory_seq_add, its K-shift), the rows must agree
-- the same tokens, predictions, bytes, evictions and peak, and bits per byte
within 1e-4 in every segment. llama.cpp's own context shift, which kvevict
does not have, is checked against its rule worked out here: how many
positions it drops and when, and that before its first shift it scores as
the full cache does.

  llama_stream_test.py BUILD_DIR SOURCE_DIR
"""
import json
import pathlib
import subprocess
import sys
import tempfile

build, source = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
text = source / "model" / "heldout-sample.txt"
failures = []
checks = 0


def expect(name, ok, detail=""):
    global checks
    checks += 1
    if not ok:
        failures.append(f"{name}: {detail}")


def run(cmd):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))}: {done.stderr.strip()}")
    return json.loads(done.stdout)["rows"]


LAYERS, KV_HEADS, BUDGET, KEEP, TOKENS, SEGMENT, CONTEXT = 2, 2, 48, 4, 400, 40, 128
POLICIES = "streaming-llm:sinks=4,sliding-window,h2o,tova,snapkv,knorm"
common = ["--text", text, "--tokens", TOKENS, "--budget", BUDGET, "--policy", POLICIES, "--segment", SEGMENT,
          "--context", CONTEXT, "--positions", "original,cache", "--format", "json"]

with tempfile.TemporaryDirectory() as tmp:
    for arch in ("llama", "qwen2", "mistral"):
        model = pathlib.Path(tmp) / f"{arch}.gguf"
        subprocess.run([str(build / "kvevict"), "random-model", "--arch", arch, "--type", "f32", "--layers",
                        str(LAYERS), "--kv-heads", str(KV_HEADS), "--context", str(CONTEXT), "--out", str(model)],
                       check=True, capture_output=True, cwd=source)
        ours = run([build / "kvevict", "stream", "--model", model, *common, "--granularity", "sequence",
                    "--threads", "1", "--progress", "off"])
        theirs = run([build / "kvevict-llama", "stream", "--model", model, *common, "--context-shift", KEEP,
                      "--kv-precision", "fp32"])
        key = lambda r: (r["label"], r["budget"], r["positions"])  # noqa: E731
        mine = {key(r): r for r in ours}
        shift = [r for r in theirs if r["policy"] == "context-shift"]
        expect(f"{arch}: one context-shift row", len(shift) == 1, [key(r) for r in theirs])
        for r in theirs:
            if r["policy"] == "context-shift":
                continue
            k = key(r)
            if k not in mine:
                expect(f"{arch} {k}: in kvevict's rows", False, sorted(mine))
                continue
            o = mine[k]
            for field in ("tokens", "predictions", "bytes", "evicted", "peakPositions"):
                expect(f"{arch} {k}: {field}", r[field] == o[field], f"llama.cpp {r[field]}, kvevict {o[field]}")
            expect(f"{arch} {k}: bits per byte", abs(r["bitsPerByte"] - o["bitsPerByte"]) <= 1e-4,
                   f"llama.cpp {r['bitsPerByte']}, kvevict {o['bitsPerByte']}")
            expect(f"{arch} {k}: segments", len(r["segments"]) == len(o["segments"]), "")
            for a, b in zip(r["segments"], o["segments"]):
                expect(f"{arch} {k}: segment {a['begin']}", a["predictions"] == b["predictions"] and
                       abs(a["bitsPerByte"] - b["bitsPerByte"]) <= 1e-4, f"{a} vs {b}")
        expect(f"{arch}: every kvevict row has its llama.cpp row", len(ours) + 1 == len(theirs),
               f"{len(ours)} vs {len(theirs)}")

        # The context shift by its rule: before a token that would make the
        # cache hold more than budget + 1, keep KEEP, drop half of the rest.
        held = evicted = peak = 0
        first_shift = None
        for t in range(TOKENS - 1):
            if held + 1 > BUDGET + 1:
                drop = (held - KEEP) // 2
                held -= drop
                evicted += drop * LAYERS * KV_HEADS
                first_shift = t if first_shift is None else first_shift
            held += 1
            peak = max(peak, held)
        if shift:
            s = shift[0]
            expect(f"{arch} context shift: evicted", s["evicted"] == evicted, f"{s['evicted']} vs {evicted}")
            expect(f"{arch} context shift: peak", s["peakPositions"] == peak == BUDGET + 1, f"{s['peakPositions']}")
            expect(f"{arch} context shift: positions", s["positions"] == "cache" and s["label"] == f"context-shift keep={KEEP}",
                   s)
            # Token t's prediction comes after feeding tokens 0 ... t-1: before
            # the first shift (at token first_shift) the cache is the full one.
            full = next(r for r in theirs if r["policy"] is None)
            expect(f"{arch} context shift: the first shift where the rule puts it", first_shift == BUDGET + 1,
                   first_shift)
            a, b = s["segments"][0], full["segments"][0]
            if SEGMENT <= first_shift:
                expect(f"{arch} context shift: before the shift, the full cache's scores",
                       abs(a["bitsPerByte"] - b["bitsPerByte"]) <= 1e-6, f"{a} vs {b}")

print(f"llama stream: {checks - len(failures)} passed, {len(failures)} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
