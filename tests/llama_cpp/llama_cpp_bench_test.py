#!/usr/bin/env python3
"""bench/llama_cpp_bench.c, the llama.cpp half of make performance's "llama.cpp
side by side" table (scripts/performance.py reads its JSON): on a tiny random
GGUF, the JSON's shape with the defaults and with every setting changed; and
each refusal -- a file llama.cpp will not load, a bad flag, too few ids -- one
line on stderr, nothing on stdout and a non-zero exit. Seconds, not speed:
the timings' values are never checked (these machines are shared).

Usage: llama_cpp_bench_test.py KVEVICT LLAMA_CPP_BENCH TEXT
"""
import json
import math
import pathlib
import subprocess
import sys
import tempfile

KVEVICT, BENCH, TEXT = sys.argv[1:4]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def run(*args):
    return subprocess.run([BENCH, *map(str, args)], capture_output=True, text=True, timeout=60)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def check_result(p, what, prompt, tokens, rounds, expect):
    """A run that worked: exit 0, nothing on stderr (llama.cpp's log is
    silenced), and the JSON performance.py reads."""
    check(p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr.strip()}")
    check(p.stderr == "", f"{what}: stderr is not empty: {p.stderr[:300]!r}")
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        failures.append(f"{what}: stdout is not JSON ({e}): {p.stdout[:300]!r}")
        return
    want = {"engine": "llama.cpp", "prompt": prompt, "tokens": tokens, "threads": 1, **expect}
    for key, value in want.items():
        check(doc.get(key) == value, f"{what}: {key} is {doc.get(key)!r}, not {value!r}")
    for key in ("modelBytes", "parameters", "context", "batch", "ubatch"):
        check(isinstance(doc.get(key), int) and doc[key] > 0, f"{what}: {key} is {doc.get(key)!r}")
    check(doc.get("flashAttnResolved") in ("on", "off"), f"{what}: flashAttnResolved is {doc.get('flashAttnResolved')!r}")
    check(isinstance(doc.get("cpuVariant"), str) and doc["cpuVariant"], f"{what}: cpuVariant is {doc.get('cpuVariant')!r}")
    check(isinstance(doc.get("cpuFeatures"), list), f"{what}: cpuFeatures is {doc.get('cpuFeatures')!r}")
    check(isinstance(doc.get("rounds"), list) and len(doc["rounds"]) == rounds,
          f"{what}: rounds is {doc.get('rounds')!r}, not {rounds} of them")
    for r in doc.get("rounds") or []:
        for key in ("prefillSeconds", "prefillTokensPerSecond", "decodeSeconds", "decodeTokensPerSecond"):
            check(positive(r.get(key)), f"{what}: a round's {key} is {r.get(key)!r}")
    best = doc.get("best") or {}
    for key in ("prefillTokensPerSecond", "decodeTokensPerSecond"):
        check(positive(best.get(key)), f"{what}: best {key} is {best.get(key)!r}")
        rates = [r.get(key) for r in doc.get("rounds") or [] if positive(r.get(key))]
        check(rates and best.get(key) == max(rates), f"{what}: best {key} {best.get(key)!r} is not the best of {rates}")


def check_refusal(p, what, code, says):
    lines = p.stderr.splitlines()
    check(p.returncode == code, f"{what}: exit {p.returncode}, not {code}")
    check(p.stdout == "", f"{what}: something on stdout: {p.stdout[:200]!r}")
    check(len(lines) == 1 and lines[0].startswith("llama_cpp_bench: error: ") and says in lines[0],
          f"{what}: stderr is not one 'llama_cpp_bench: error: ...{says}...' line: {p.stderr[:500]!r}")


with tempfile.TemporaryDirectory(prefix="llama-cpp-bench-test-") as tmp:
    tmp = pathlib.Path(tmp)
    model, ids = tmp / "tiny.gguf", tmp / "ids.txt"
    subprocess.run([KVEVICT, "random-model", "--out", model, "--layers", "2", "--width", "64", "--heads", "2",
                    "--kv-heads", "1", "--ff", "128", "--context", "256", "--tokenizer-text", TEXT],
                   check=True, capture_output=True)
    # The ids as performance.py writes them: kvevict's tokens of the text.
    ids.write_text(subprocess.run([KVEVICT, "tokenize", "--model", model, "--text", TEXT], check=True,
                                  capture_output=True, text=True).stdout)

    # llama.cpp's defaults: F16 caches, flash attention auto.
    check_result(run(model, "--ids", ids, "--prompt", 12, "--tokens", 4, "--rounds", 1), "defaults", 12, 4, 1,
                 {"cacheTypeK": "f16", "cacheTypeV": "f16", "flashAttn": "auto", "warmup": 1, "promptLogits": "last"})
    # Every setting changed, the ids on the command line.
    first = ",".join(ids.read_text().split()[:10])
    check_result(run(model, "--id-list", first, "--prompt", 6, "--tokens", 3, "--rounds", 2, "--warmup", 0,
                     "--threads", 1, "--batch", 4, "--ubatch", 2, "--cache-type-k", "f32", "--cache-type-v", "f32",
                     "--flash-attn", "off", "--prompt-logits", "all"),
                 "settings", 6, 3, 2, {"cacheTypeK": "f32", "cacheTypeV": "f32", "flashAttn": "off",
                                       "flashAttnResolved": "off", "warmup": 0, "batch": 4, "ubatch": 2,
                                       "promptLogits": "all"})

    # Files llama.cpp refuses: its first error line passed on, alone.
    junk = tmp / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all\n" * 4)
    check_refusal(run(junk, "--ids", ids, "--prompt", 4, "--tokens", 1), "junk file", 1, "invalid magic")
    cut = tmp / "cut.gguf"
    cut.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    check_refusal(run(cut, "--ids", ids, "--prompt", 4, "--tokens", 1), "truncated file", 1,
                  f"llama.cpp cannot load {cut}: ")
    check_refusal(run(tmp / "missing.gguf", "--ids", ids), "missing file", 1, "cannot open")
    # Its own refusals.
    check_refusal(run(model, "--ids", ids, "--bogus", 1), "unknown flag", 2, "unknown argument '--bogus'")
    check_refusal(run(model, "--ids", ids, "--id-list", "1,2"), "both id sources", 2, "exactly one of")
    check_refusal(run(model, "--id-list", "1,,2"), "empty item", 2, "empty item")
    check_refusal(run(model, "--id-list", "1,2,3", "--prompt", 3, "--tokens", 1), "too few ids", 1,
                  "holds 3 ids")
    check_refusal(run(model, "--id-list", "1,2,99999", "--prompt", 2, "--tokens", 1), "id past the vocabulary", 1,
                  "outside the model's vocabulary")
    check_refusal(run(model, "--ids", ids, "--flash-attn", "maybe"), "bad --flash-attn", 2, "auto, on or off")
    check_refusal(run(model, "--ids", ids, "--prompt-logits", "some"), "bad --prompt-logits", 2, "last or all")
    check_refusal(run(model, "--ids", ids, "--prompt", 4, "--tokens", 1, "--cache-type-v", "q8_0", "--flash-attn",
                      "off"), "quantized V without flash attention", 1, "flash")

if failures:
    print(f"llama_cpp_bench_test: {len(failures)} failure(s):", *failures, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("llama_cpp_bench_test: the JSON and every refusal as documented")
