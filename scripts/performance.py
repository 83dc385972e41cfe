#!/usr/bin/env python3
"""Regenerates docs/performance.md from the two benchmark tools, once per SIMD target.

    make performance        (or: python3 scripts/performance.py)

For the two best SIMD targets this CPU runs (AVX-512 and AVX2 on a machine
that has AVX-512; AVX2 and SSE4 on one that has AVX2 only -- the lower one
forced with KVEVICT_SIMD / --simd), runs
`build/kvevict bench --format json` (every policy against its row floor, the
bank, the canonical compare) and `build/bench/kvevict_bench` (Google
Benchmark: the library against the oracle, and the same row floor), then
writes the page. Every ratio on the page comes from one run of one process.

It also puts llama.cpp side by side with `kvevict bench --model`
(bench/llama_cpp_bench.c on node-llama-cpp's prebuilt CPU build): the same
GGUF files, prompt ids and thread counts, rounds alternating engine by engine.

    python3 scripts/performance.py --only llama-cpp [--models smollm2-f16] [--threads 1] [--simd avx512]
        that section alone, put into the page in place of the old one
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
TOOL = BUILD / "kvevict"
GBENCH = BUILD / "bench" / "kvevict_bench"
NAMES = {"scissorhands": "Scissorhands", "h2o": "H2O", "tova": "TOVA", "snapkv": "SnapKV",
         "pyramidkv": "PyramidKV", "streaming-llm": "StreamingLLM", "sliding-window": "SlidingWindow"}
READS = {"scissorhands", "h2o", "tova", "snapkv", "pyramidkv"}


def run(cmd, env=None):
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {}))).stdout


def machine():
    info = pathlib.Path("/proc/cpuinfo").read_text()
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")),
                 "unknown CPU")
    cores = sum(1 for l in info.splitlines() if l.startswith("processor"))
    cache = json.loads((BUILD / "compile_commands.json").read_text())
    compiler = run([cache[0]["command"].split()[0], "--version"]).splitlines()[0]
    return model, cores, compiler


def measure(target):
    print(f"[{target}] kvevict bench ...", file=sys.stderr)
    tool = json.loads(run([str(TOOL), "bench", "--simd", target, "--policies", ",".join(NAMES), "--format", "json"]))
    print(f"[{target}] kvevict_bench (Google Benchmark) ...", file=sys.stderr)
    gb = json.loads(run([str(GBENCH), "--benchmark_format=json", "--benchmark_min_time=0.3"],
                        env={"KVEVICT_SIMD": target}))
    assert gb["context"].get("simd_target") == target, gb["context"]
    by_name = {b["name"]: b for b in gb["benchmarks"]}
    return tool, by_name


KEY_AWARE = ["bench", "--policies",
             "knorm,keydiff,expected-attention,expected-attention:evictEvery=8,expected-attention:evictEvery=16",
             "--budgets", "512,4096", "--no-compare", "--bank-instances", "0"]


def key_aware_section(targets):
    """The key-aware policies against their floor (the step's key plus the
    policy's whole held state), one table per target, under its command."""
    lines = ["## Key-aware policies", "",
             "The floor of a key-aware policy is reading the step's key plus its whole held",
             "state (`memory_bytes()`: for KeyDiff every held key, in float32 and divided by",
             "its norm in float64; for Expected Attention every held key and the query",
             "ring). Each step gives the policy a key drawn from a 64 MiB pool (Expected",
             "Attention also reads a value and the queries: the same row serves). All three",
             "choose exactly the reference's victims (`tests/policies/key_scored_test.cpp`,",
             "`tests/policies/expected_attention_test.cpp`, on every target).", ""]
    for target in targets:
        cmd = ["build/kvevict"] + KEY_AWARE + ["--simd", target]
        print(f"[{target}] kvevict bench (key-aware) ...", file=sys.stderr)
        tool = json.loads(run([str(TOOL)] + KEY_AWARE + ["--simd", target, "--format", "json"]))
        lines += [f"`{' '.join(cmd)}` ({tool['simdTarget']})", "",
                  "| policy | budget | ns/step | floor ns | x floor |", "|---|---:|---:|---:|---:|"]
        for r in tool["rows"]:
            lines.append(f"| {r['policy']} | {r['budget']} | {r['nsPerStep']:.0f} | {r['floorNs']:.0f} | "
                         f"{r['ratioToFloor']:.2f} |")
        lines.append("")
        verdicts = []
        for policy, limit in (("keydiff", 3.0), ("expected-attention", 20.0), ("expected-attention:evictEvery=8", 20.0)):
            for r in (r for r in tool["rows"] if r["policy"] == policy):
                ok = r["ratioToFloor"] <= limit
                verdicts.append(f"{policy} at {r['budget']} <= {limit:g}x: {'met' if ok else '**not met**'} "
                                f"({r['ratioToFloor']:.2f}x)")
        lines += ["Targets: " + "; ".join(verdicts) + ".", ""]
    lines += [
        "KeyDiff's anchor is the sum of every held key over its norm, so each",
        "eviction reads every held key twice (the anchor, then each key's dot product",
        "with it); the quotients are divided once per key, when it is admitted, and",
        "added in the same order, so the sums are the definition's to the bit; the",
        "passes are Highway kernels whose lanes run across keys, never across one sum.",
        "Expected Attention at its default (`evictEvery=1`, every eviction as",
        "published) fits the Gaussian to the query window and scores every held key",
        "with a quadratic form (k'Sigma'k): headDim^2 multiply-adds per key per query",
        "head where the floor reads each key once, so its ratio cannot come near the",
        "others' however fast the kernels run (they keep its decisions to the bit,",
        "`tests/policies/expected_attention_differential_test.cpp`). `evictEvery=k`",
        "refits every k-th eviction and scores only the new keys in between",
        "(docs/policies/expected-attention.md): the rows above say what that buys.",
        "The bench runs fewer steps when a step is slow (its warm-up stops after one",
        "case's time, and each timed batch shrinks to one step).", ""]
    return lines


MODEL_BENCH = ["bench", "--model", "model/kvevict-tiny.kvm", "--threads", "1", "--format", "markdown"]


def model_section():
    """Decoding the committed model: tokens per second and where a step goes."""
    print("kvevict bench --model ...", file=sys.stderr)
    table = run([str(TOOL)] + MODEL_BENCH).rstrip("\n")
    return ["## Decoding the committed model", "",
            "The committed model (`model/kvevict-tiny.kvm`, 4 layers) decoding the first 1,024 bytes of",
            "`model/heldout-sample.txt`, batch 1, one thread, with the full cache and with four policies",
            "at budget 128; five rounds alternate the runs, each timing one pass and profiling another",
            "(`Decoder::set_profile`).", "",
            f"`build/kvevict {' '.join(MODEL_BENCH)}`:", "", table, "",
            "**kvevict-tiny keeps its own arithmetic**: its matrix-vector products stay Eigen's",
            "(compiled for the x86-64 baseline, four lanes, one thread: the logits are the same on",
            "every machine and SIMD target, and within the PyTorch reference's tolerance,",
            "`tests/model_test.cpp`), so every published bits-per-byte figure of it stays reproducible",
            "to the bit. Its prefill and `step_together` run those same products a vector at a time",
            "(`tests/decoder_kernels_test.cpp` checks the bits). The weight kernels above serve the",
            "Llama family (GGUF and safetensors models); `kvevict inspect` says which a model uses.",
            "GELU is libm's `erff` a hidden unit and attention's softmax libm's `expf` a held position.",
            "With a budget the matrices and GELU are about three quarters of a step; with the full",
            "cache at a thousand tokens attention is nearly half. A policy costs a few per cent of a",
            "step (the store's removal of its victims included); the floor column is not a bound for",
            "a model this small (its 1.5 MB of weights stay in cache).", ""]


SMOL = ["--arch", "llama", "--layers", "30", "--width", "576", "--heads", "9", "--kv-heads", "3", "--ff", "1536",
        "--context", "2048", "--vocab", "49152", "--tied"]
SPEED = ["--prompt", "128", "--tokens", "64", "--rounds", "3", "--policies", "none", "--threads", "1,2"]
TORCH = ["scripts/torch_decode_bench.py", "--dtype", "bfloat16", "--threads", "1,2", "--prompt", "128",
         "--tokens", "64"]
BATCH = ["--prompt", "128", "--tokens", "32", "--rounds", "2", "--policies", "h2o,tova,sliding-window",
         "--budgets", "96", "--threads", "2", "--together"]
TINY_BATCH = ["--prompt", "256", "--tokens", "256", "--rounds", "3",
              "--policies", "h2o,tova,sliding-window,snapkv,scissorhands,streaming-llm", "--budgets", "128",
              "--threads", "1", "--together"]
SHARES = ["--prompt", "1100", "--tokens", "16", "--rounds", "1", "--policies", "all", "--budgets", "256,1024",
          "--threads", "2"]


def bench_json(model, args):
    """bench --model's rows (its JSON is the envelope every command prints)."""
    return json.loads(run([str(TOOL), "bench", "--model", str(model)] + args + ["--format", "json"]))["rows"]


def decode_section(tmp):
    """A random model of SmolLM2-135M's shape (generated here, not committed):
    decode against the weights' read floor, prefill, PyTorch eager side by side,
    many runs stepped together, and every policy's share of a step."""
    models = {}
    for t in ("f16", "q8_0"):
        path = pathlib.Path(tmp) / f"smollm2-135m-shape-{t}.gguf"
        print(f"random-model {t} ...", file=sys.stderr)
        run([str(TOOL), "random-model", "--type", t, "--out", str(path)] + SMOL)
        models[t] = path
    speed = {}
    for t, path in models.items():
        print(f"kvevict bench --model ({t}) ...", file=sys.stderr)
        speed[t] = bench_json(path, SPEED)
    print("PyTorch eager (bfloat16) ...", file=sys.stderr)
    torch = json.loads(run(["/usr/bin/python3"] + TORCH + ["--format", "json"]))
    torch_rows = {r["threads"]: r for r in torch["rows"]}
    print("kvevict bench --model --together ...", file=sys.stderr)
    batch = bench_json(models["f16"], BATCH)
    batch_q8 = bench_json(models["q8_0"], BATCH)
    tiny_batch = bench_json("model/kvevict-tiny.kvm", TINY_BATCH)
    print("kvevict bench --model, every policy at 256 and 1024 ...", file=sys.stderr)
    shares = bench_json(models["f16"], SHARES)

    def row(rows, mode, threads):
        return next(r for r in rows if r["mode"] == mode and r["threads"] == threads)

    smol = " ".join(SMOL)
    lines = ["## Decoding a real model's shape", "",
             "A random Llama-family model of SmolLM2-135M's shape (30 layers, width 576, 9 query and 3 KV",
             "heads, feed-forward 1,536, a tied 49,152-row embedding: 134.5 M parameters), written at",
             "bench time in F16 and in Q8_0 and never committed:", "",
             f"`build/kvevict random-model --type f16|q8_0 --out M.gguf {smol}`", "",
             "The weight kernels (`src/model/matmul.cpp`) read each matrix in its file's type and decode",
             "it in registers (F32, F16, BF16, Q4_0, Q4_K, Q6_K; Highway, the best SIMD target chosen at",
             "run time), the rows split over `--threads`, prefetching 8 KiB ahead of each row. Q8_0 is",
             "multiplied in integers instead: the vector split into two int16 parts a 32-element block",
             "(a value and its residual at power-of-two steps: within 2^-29 of the block's largest",
             "element, below float32's rounding of the sum) against the int8 weights, each block's sums",
             "scaled once -- converting every weight to a float had left it compute-bound at a third of",
             "its floor. Its prefill pays for that: the scaling is per block and vector, so a prompt's",
             "chunk gains little from reading a weight once for many tokens (the float kernel's Q8_0",
             "prefill ran at about 6x a decoded token). The *floor* is the weights' bytes a",
             "token (every matrix once, the embedding's one row) over the read bandwidth of as many",
             "threads (a parallel sum of 512 MiB), measured in the same run. Prefill runs the prompt",
             "through each layer as one matrix product (256 tokens a chunk); the chunk's activation is",
             "split over the threads, and with nothing evicting (the full cache) its tokens attend side",
             "by side, each with a decoded token's arithmetic -- a prefill's logits, caches and signals",
             "are token-by-token decoding's to the bit (`tests/decoder_kernels_test.cpp`). PyTorch is",
             "`scripts/torch_decode_bench.py`: the same architecture written in eager torch ops",
             f"({torch['torch']}, BLAS: {torch['blas']}), in bfloat16 (CPU torch has no float16",
             "matmul): the same bytes a token as F16.", "",
             f"`build/kvevict bench --model M.gguf {' '.join(SPEED)}` and "
             f"`/usr/bin/python3 {' '.join(TORCH)}`:", "",
             "| model | threads | decode tokens/s | rounds' range | ms/token | weights MB/token | floor tokens/s | "
             "of floor | prefill tokens/s | prefill / decode | PyTorch bf16 decode tokens/s | x PyTorch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t, rows in speed.items():
        for threads in (1, 2):
            d, p = row(rows, "decode", threads), row(rows, "prefill", threads)
            pt = torch_rows[threads]["decodeTokensPerSecond"]
            lines.append(f"| {t.upper()} | {threads} | {d['tokensPerSecond']:.1f} | "
                         f"{d['tokensPerSecondSpread']['min']:.1f}-{d['tokensPerSecondSpread']['max']:.1f} | "
                         f"{1e3 / d['tokensPerSecond']:.1f} | {d['weightBytesPerToken'] / 1e6:.0f} | "
                         f"{d['floorTokensPerSecond']:.1f} | {100 * d['ofFloor']:.0f}% | {p['tokensPerSecond']:.0f} | "
                         f"{p['speedup']:.1f}x | {pt:.1f} | {d['tokensPerSecond'] / pt:.2f}x |")
    lines += ["", "Many runs, one weight read a token (`Decoder::step_together`: each run its own caches and",
              "policies, the same token): every run's tokens a second stepped together, against the same",
              "runs one at a time. A decoded token needs the one before it, so serving steps this way.", "",
              f"`build/kvevict bench --model M-f16.gguf {' '.join(BATCH)}` and "
              f"`build/kvevict bench --model model/kvevict-tiny.kvm {' '.join(TINY_BATCH)}`:", "",
              "| model | runs | threads | one at a time, tokens/s | together, run-tokens/s | speed-up |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, rows in (("SmolLM2-135M shape, F16", batch), ("kvevict-tiny (Eigen, one thread)", tiny_batch)):
        tog = next(r for r in rows if r["mode"] == "together")
        alone = tog["tokensPerSecond"] / tog["speedup"]
        lines.append(f"| {name} | {tog['runs']} | {tog['threads']} | {alone:.1f} | {tog['tokensPerSecond']:.1f} | "
                     f"{tog['speedup']:.2f}x |")
    lines += ["", "An evaluation knows every token in advance: `perplexity`, `compare --model`, `sweep --model`,",
              "`choose`, the prompts of `tasks` and `stream` feed their runs several tokens a pass",
              "(`Decoder::prefill_together`: about 64 vectors a weight read, `Decoder::together_pass_tokens`;",
              "attention and each run's policies still token by token, in order), with the rows of one at a",
              "time to the bit (`tests/decoder_kernels_test.cpp`). The `prefill together` rows of the same",
              "commands (with the Q8_0 file too): the runs' prompts fed that way, against the same prompts",
              "stepped together a token a pass, as the evaluations did before:", "",
              "| model | runs | threads | a token a pass, run-tokens/s | several a pass, run-tokens/s | speed-up |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, rows in (("SmolLM2-135M shape, F16", batch), ("SmolLM2-135M shape, Q8_0", batch_q8),
                       ("kvevict-tiny (Eigen, one thread)", tiny_batch)):
        fed = next(r for r in rows if r["mode"] == "prefill together")
        stepped = fed["tokensPerSecond"] / fed["speedup"]
        lines.append(f"| {name} | {fed['runs']} | {fed['threads']} | {stepped:.1f} | {fed['tokensPerSecond']:.1f} | "
                     f"{fed['speedup']:.2f}x |")
    lines += ["", "Every policy's share of a decode step on the F16 model, at budgets 256 and 1,024 (the",
              "prompt of 1,100 tokens prefilled first, so every cache is at its budget and evicting):", "",
              f"`build/kvevict bench --model M-f16.gguf {' '.join(SHARES)}`:", "",
              "| policy | budget | tokens/s | ms/token | matrices | attention | policies |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in shares:
        if r["mode"] != "decode":
            continue
        sh = r["shares"]
        lines.append(f"| {r['policy']} | {r['budget'] or '-'} | {r['tokensPerSecond']:.1f} | "
                     f"{1e3 / r['tokensPerSecond']:.1f} | {100 * sh['projections']:.1f}% | "
                     f"{100 * sh['attention']:.1f}% | {100 * sh['policies']:.1f}% |")
    lines.append("")
    return lines, speed, torch_rows, batch


def decode_targets(speed, torch_rows):
    def cell(ok, text):
        return f"{'met' if ok else '**not met**'}: {text}"
    rows = ["| target | F16 | Q8_0 |", "|---|---|---|"]
    d2 = {t: next(r for r in speed[t] if r["mode"] == "decode" and r["threads"] == 2) for t in speed}
    p2 = {t: next(r for r in speed[t] if r["mode"] == "prefill" and r["threads"] == 2) for t in speed}
    pt = torch_rows[2]["decodeTokensPerSecond"]
    rows.append("| decode >= 70% of the read floor, 2 threads | " + " | ".join(
        cell(d2[t]["ofFloor"] >= 0.7, f"{100 * d2[t]['ofFloor']:.0f}% ({d2[t]['tokensPerSecond']:.1f} of "
             f"{d2[t]['floorTokensPerSecond']:.1f} tokens/s)") for t in ("f16", "q8_0")) + " |")
    rows.append("| prefill >= 10x decode a token, 2 threads | " + " | ".join(
        cell(p2[t]["speedup"] >= 10, f"{p2[t]['speedup']:.1f}x") for t in ("f16", "q8_0")) + " |")
    rows.append("| decode >= 3x PyTorch eager (bf16), 2 threads | " + " | ".join(
        cell(d2[t]["tokensPerSecond"] >= 3 * pt, f"{d2[t]['tokensPerSecond'] / pt:.2f}x") for t in ("f16", "q8_0")) + " |")
    return rows


# ---- llama.cpp side by side ------------------------------------------------------
# llama.cpp's prebuilt CPU build (node-llama-cpp 3.21.1 from npm, deps/llama-cpp)
# timed by bench/llama_cpp_bench.c beside `kvevict bench --model` on the same
# GGUF files, prompt ids and thread counts (issue 54).
LLAMA_BENCH = BUILD / "bench" / "llama_cpp_bench"
LLAMA_MODULES = ROOT / "deps" / "llama-cpp" / "node_modules"
TEXT = "model/heldout-sample.txt"
# Llama-3.2-1B's shape as the issue gives it (an untied output: 846 MB in
# Q4_K); --context only so that a 512-token prompt and its decode fit.
LLAMA_1B = ["--arch", "llama", "--layers", "16", "--width", "2048", "--heads", "32", "--kv-heads", "8", "--ff", "8192",
            "--context", "2048", "--vocab", "128256"]
# key: (the page's name, random-model's arguments)
LLAMA_MODELS = {
    "smollm2-f16": ("SmolLM2-135M F16", SMOL + ["--type", "f16"]),
    "smollm2-q8_0": ("SmolLM2-135M Q8_0", SMOL + ["--type", "q8_0"]),
    "llama3.2-1b-q4_k": ("Llama-3.2-1B Q4_K", LLAMA_1B + ["--type", "q4_k"]),
}
# The models whose weights have 8-bit products (`--matmul int8`, llama.cpp's
# rounding of the vectors): measured that way too, their own rows.
LLAMA_INT8 = ("smollm2-q8_0", "llama3.2-1b-q4_k")
LLAMA_THREADS = (1, 2)
LLAMA_ROUNDS = 3
# (prompt, decoded tokens): decode and prefill at 128, prefill at 512 (kvevict
# bench decodes at least one token; it is not reported).
LLAMA_PASSES = ((128, 64), (512, 1))
# The llama.cpp CPU variant matching a kvevict SIMD target below the best one
# (the best target gets llama.cpp's own pick of the best variant).
LLAMA_VARIANT = {"avx2": "haswell", "sse4": "sse42", "baseline": "x64"}
SIMD_NAME = {"avx512": "AVX-512", "avx2": "AVX2", "sse4": "SSE4", "baseline": "baseline"}


def run_or_die(cmd, what):
    """Runs a benchmark; on failure stops with its own one-line reason."""
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        sys.exit(f"performance.py: {what} failed (exit {p.returncode}): {last}\n  command: {' '.join(map(str, cmd))}")
    return p.stdout


def llama_cpp_version():
    """node-llama-cpp's version and the llama.cpp release its build is of."""
    try:
        package = json.loads((LLAMA_MODULES / "node-llama-cpp" / "package.json").read_text())["version"]
        info = json.loads((LLAMA_MODULES / "node-llama-cpp" / "llama" / "llama.cpp.info.json").read_text())
        return f"node-llama-cpp {package}'s prebuilt CPU build (llama.cpp {info['tag']}, {info['llamaCppGithubRepo']})"
    except (OSError, KeyError, ValueError):
        return "node-llama-cpp's prebuilt CPU build"


# Whether this CPU runs kvevict's "avx512-vnni" (set in main): AVX-512 with
# the 8-bit products in VNNI's multiply-adds, which the int8 rows then use.
VNNI = False


def int8_target(target):
    """The target the `--matmul int8` runs of `target` ask for: at AVX-512 on a
    CPU with VNNI, "avx512-vnni" (every other kernel is AVX-512's there)."""
    return "avx512-vnni" if target == "avx512" and VNNI else target


def kvevict_args(model, prompt, tokens, threads, target, matmul="exact"):
    target = int8_target(target) if matmul == "int8" else target
    return ["bench", "--model", str(model), "--text", TEXT, "--prompt", str(prompt), "--tokens", str(tokens),
            "--rounds", "1", "--policies", "none", "--threads", str(threads), "--simd", target, "--matmul", matmul,
            "--prompt-logits", "last"]


def engines(key):
    """The kvevict columns a model gets: exact products, and int8 where it has them."""
    return ("k", "i") if key in LLAMA_INT8 else ("k",)


def llama_args(model, ids, prompt, tokens, threads, variant):
    # --warmup 0: a round is one fresh process on both sides, and kvevict
    # bench's one round is its first pass too; neither engine is warmed up.
    return [str(model), "--ids", str(ids), "--prompt", str(prompt), "--tokens", str(tokens), "--rounds", "1",
            "--warmup", "0", "--threads", str(threads)] + (["--cpu-variant", variant] if variant else [])


def llama_cpp_measure(tmp, targets, best, model_keys, threads_list, rounds):
    """Every model, SIMD target and thread count: `rounds` rounds, each one
    kvevict process then one llama.cpp process per prompt length. Returns
    {(key, target, threads): {"k": {...}, "l": {...}, ...}} with each engine's
    best round and llama.cpp's resolved settings."""
    results = {}
    for key in model_keys:
        name, args = LLAMA_MODELS[key]
        model = pathlib.Path(tmp) / f"{key}.gguf"
        print(f"random-model {name} ...", file=sys.stderr)
        run_or_die([str(TOOL), "random-model", "--out", str(model)] + args, f"random-model ({name})")
        ids = pathlib.Path(tmp) / f"{key}.ids"
        # kvevict's own ids for the text (the BOS first when it adds one):
        # exactly the tokens `kvevict bench --text` prefills and decodes.
        ids.write_text(run_or_die([str(TOOL), "tokenize", "--model", str(model), "--text", TEXT],
                                  f"kvevict tokenize ({name})"))
        have = len(ids.read_text().split())
        need = max(p + t for p, t in LLAMA_PASSES)
        if have < need:
            sys.exit(f"performance.py: {TEXT} makes {have} tokens with {name}'s tokenizer; the passes need {need}")
        for target in targets:
            variant = None if target == best else LLAMA_VARIANT[target]
            for threads in threads_list:
                cell = {"k": {}, "i": {}, "l": {}, "floor": None, "llama": None}
                for r in range(rounds):
                    for prompt, tokens in LLAMA_PASSES:
                        print(f"[{target}] {name}, {threads} thread(s), prompt {prompt}, round {r + 1}/{rounds}: "
                              "kvevict, llama.cpp ...", file=sys.stderr)
                        for engine in engines(key):
                            matmul = "int8" if engine == "i" else "exact"
                            k = json.loads(run_or_die([str(TOOL)] + kvevict_args(model, prompt, tokens, threads,
                                                                                 target, matmul)
                                                      + ["--format", "json"], f"kvevict bench ({name}, {matmul})"))
                            kd = next(x for x in k["rows"] if x["mode"] == "decode")
                            kp = next(x for x in k["rows"] if x["mode"] == "prefill")
                            cell[engine][f"prefill{prompt}"] = max(cell[engine].get(f"prefill{prompt}", 0.0),
                                                                   kp["tokensPerSecond"])
                            if (prompt, tokens) == LLAMA_PASSES[0]:  # the decode reported: 64 after 128
                                cell[engine]["decode"] = max(cell[engine].get("decode", 0.0), kd["tokensPerSecond"])
                                if engine == "k":  # the floor of the round whose read bandwidth measured highest
                                    cell["floor"] = max(cell["floor"] or 0.0, kd["floorTokensPerSecond"])
                        lj = json.loads(run_or_die([str(LLAMA_BENCH)] + llama_args(model, ids, prompt, tokens,
                                                                                      threads, variant),
                                                   f"llama_cpp_bench ({name})"))
                        lbest = lj["best"]
                        cell["l"][f"prefill{prompt}"] = max(cell["l"].get(f"prefill{prompt}", 0.0),
                                                            lbest["prefillTokensPerSecond"])
                        if (prompt, tokens) == LLAMA_PASSES[0]:
                            cell["l"]["decode"] = max(cell["l"].get("decode", 0.0), lbest["decodeTokensPerSecond"])
                        cell["llama"] = lj
                results[(key, target, threads)] = cell
    return results


def ratio_cell(k, l):
    return f"{k:.1f} / {l:.1f}" if max(k, l) < 100 else f"{k:.0f} / {l:.0f}", f"{k / l:.2f}x"


def llama_cpp_section(results, targets, best, model_keys, threads_list, rounds, apart):
    """The side-by-side tables (one per SIMD target) under their commands;
    `apart`: measured by a run of this section alone (--only llama-cpp)."""
    first = next(iter(results.values()))["llama"]
    lines = ["## llama.cpp side by side", "",
             f"kvevict beside llama.cpp -- {llama_cpp_version()},",
             "installed from npm by `deps/llama-cpp` -- on the same random GGUF files of real models' shapes",
             "(written at bench time, never committed: SmolLM2-135M's above, in F16 and Q8_0, and",
             f"`build/kvevict random-model --type q4_k --out M.gguf {' '.join(LLAMA_1B)}`),",
             "with the same prompt ids and thread counts. The ids are kvevict's tokens of the text",
             f"(`build/kvevict tokenize --model M.gguf --text {TEXT} > IDS`, with the BOS where the",
             "vocabulary adds one, as `kvevict bench` reads the text): both",
             "engines prefill the first 128 (or 512) from an empty cache and then decode the next 64 one at a",
             "time, each fed as given. `bench/llama_cpp_bench.c` times llama.cpp through its C API: one",
             "`llama_decode` for the prompt and one a decoded token, each to `llama_synchronize`.",
             "",
             "A round is one process per engine and prompt: kvevict's, then llama.cpp's, at 128 and then at 512;",
             f"{rounds} rounds alternate them, and each cell is the engine's best round. Neither engine is warmed",
             "up: each process loads the file and times its first pass. llama.cpp runs at its defaults:",
             f"{first['cacheTypeK'].upper()} K and V caches, flash attention {first['flashAttn']} "
             f"(resolved: {first['flashAttnResolved'] or 'not logged'}), `n_batch` 2048 and `n_ubatch` 512",
             "(`n_batch` cut to the context, so either prompt is one ubatch), the logits of the prompt's last",
             "token only (`--prompt-logits all` asks for every one's); kvevict at its own: float32 caches, the",
             "prompt in chunks of 256, and as llama.cpp the logits of the prompt's last token only",
             "(`--prompt-logits last`: `Decoder::prefill(tokens, PromptLogits::kLast)`; the output head, a fifth",
             "of both models' weights, once a chunk instead of once a token). The ratio is kvevict's tokens/s",
             "over llama.cpp's. The read",
             "floor is kvevict bench's: the file's weight bytes a token over the read bandwidth of as many",
             "threads, measured in each kvevict process (the highest of the rounds).", ""]
    if apart:
        # The page's other tables come from one run; say that this one did not.
        lines += ["This section comes from a run of its own (`scripts/performance.py --only llama-cpp`), not from",
                  "the run that wrote the rest of the page.", ""]
    for target in targets:
        cells = {(key, t): results[(key, target, t)] for key in model_keys for t in threads_list}
        sample = next(iter(cells.values()))["llama"]
        variant = sample["cpuVariant"] or "?"
        features = " ".join(f for f in sample["cpuFeatures"] if f.startswith(("AVX", "F16C", "FMA", "AMX")))
        pick = "its own pick" if target == best else "`--cpu-variant`"
        kcmd = (f"build/kvevict bench --model M.gguf --text {TEXT} --prompt 128|512 --tokens 64|1 --rounds 1 "
                f"--policies none --threads T --simd {target} --prompt-logits last")
        lcmd = ("build/bench/llama_cpp_bench M.gguf --ids IDS --prompt 128|512 --tokens 64|1 --rounds 1 "
                "--warmup 0 --threads T" + (f" --cpu-variant {LLAMA_VARIANT[target]}" if target != best else ""))
        lines += [f"### {SIMD_NAME[target]}", "",
                  f"kvevict's `{target}` kernels; llama.cpp's `{variant}` CPU build ({pick}; {features}).", "",
                  f"`{kcmd}` and `{lcmd}`, {rounds} rounds alternating"
                  + (f"; the `--matmul int8` rows with `--simd {int8_target(target)}` (this CPU has AVX-512 "
                     "VNNI: the 8-bit products in its 8-bit multiply-adds)" if int8_target(target) != target else "")
                  + ":", "",
                  "| model | threads | decode (64 after 128) kvevict / llama.cpp tokens/s | ratio | "
                  "read floor tokens/s | prefill 128 kvevict / llama.cpp tokens/s | ratio | "
                  "prefill 512 kvevict / llama.cpp tokens/s | ratio |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key in model_keys:
            for engine in engines(key):
                for t in threads_list:
                    c = cells[(key, t)]
                    d = ratio_cell(c[engine]["decode"], c["l"]["decode"])
                    p1 = ratio_cell(c[engine]["prefill128"], c["l"]["prefill128"])
                    p5 = ratio_cell(c[engine]["prefill512"], c["l"]["prefill512"])
                    lines.append(f"| {column_name(key, engine)} | {t} | {d[0]} | {d[1]} | {c['floor']:.1f} | "
                                 f"{p1[0]} | {p1[1]} | {p5[0]} | {p5[1]} |")
        lines.append("")
    return lines


def column_name(key, engine):
    """A model's name, with `--matmul int8` for its 8-bit products' row or column."""
    return LLAMA_MODELS[key][0] + (", `--matmul int8`" if engine == "i" else "")


def llama_cpp_targets(results, targets, model_keys, threads_list):
    """The targets' rows: met or not, and the measured ratio (a column a
    model, and one for its 8-bit products where it has them)."""
    columns = [(key, engine) for key in model_keys for engine in engines(key)]
    rows = ["| target | SIMD | threads | " + " | ".join(column_name(k, e) for k, e in columns) + " |",
            "|---|---|---:|" + "---|" * len(columns)]
    for label, phase in (("decode >= 1.0x llama.cpp", "decode"), ("prefill of 512 >= 1.0x llama.cpp", "prefill512")):
        for target in targets:
            for t in threads_list:
                cells = []
                for key, engine in columns:
                    c = results[(key, target, t)]
                    ratio = c[engine][phase] / c["l"][phase]
                    cells.append(f"{'met' if ratio >= 1.0 else '**not met**'}: {ratio:.2f}x")
                rows.append(f"| {label} | {SIMD_NAME[target]} | {t} | " + " | ".join(cells) + " |")
    return rows


LLAMA_TARGETS_LEAD = "llama.cpp side by side (below: \"llama.cpp side by side\"; kvevict's tokens/s over llama.cpp's, best rounds):"


def llama_cpp_parts(tmp, targets, best, model_keys, threads_list, rounds, apart=False):
    """(the Targets block, the section), or a one-paragraph section saying why
    llama.cpp was not measured."""
    if not LLAMA_BENCH.exists():
        why = (f"`{LLAMA_BENCH.relative_to(ROOT)}` is not built: llama.cpp was not found when the build was "
               "configured (`bash deps/llama-cpp/install-deps.sh`, then `make build`; the configure line "
               "\"kvevict: llama.cpp ... skipped\" says why)")
        print(f"performance.py: llama.cpp side by side skipped: {why}", file=sys.stderr)
        return ([LLAMA_TARGETS_LEAD, "", f"Not measured: {why}."],
                ["## llama.cpp side by side", "", f"Not measured: {why}.", ""])
    results = llama_cpp_measure(tmp, targets, best, model_keys, threads_list, rounds)
    return ([LLAMA_TARGETS_LEAD, ""] + llama_cpp_targets(results, targets, model_keys, threads_list),
            llama_cpp_section(results, targets, best, model_keys, threads_list, rounds, apart))


def splice_llama_cpp(page, targets_block, section):
    """The page with its llama.cpp parts replaced (or added: the targets after
    the Targets section's last table, the section before "Decoding the
    committed model"), the rest as it was."""
    lines = page.split("\n")
    if LLAMA_TARGETS_LEAD in lines:
        at = lines.index(LLAMA_TARGETS_LEAD)
        end = at + 1
        while end < len(lines) and (lines[end] == "" or lines[end].startswith(("|", "Not measured"))):
            end += 1
        lines[at:end] = targets_block + [""]
    else:
        start = lines.index("## Targets")
        at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
        lines[at:at] = targets_block + [""]
    if "## llama.cpp side by side" in lines:
        at = lines.index("## llama.cpp side by side")
        end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[at:end] = section
    else:
        at = lines.index("## Decoding the committed model")
        lines[at:at] = section
    return "\n".join(lines)

def fmt_ratio(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def section(target, tool, gb):
    lines = [f"## {target.upper() if target != 'avx512' else 'AVX-512'}", "",
             f"`build/kvevict bench --simd {target} --policies {','.join(NAMES)}` and "
             f"`KVEVICT_SIMD={target} build/bench/kvevict_bench`; "
             f"both report the target that ran: `{tool['simdTarget']}`.", "",
             "| policy | budget | ns/step (tool) | rounds' range | row floor ns | x floor | rounds' range | "
             "library ns/step (GB) | oracle ns/step (GB) | x faster than oracle |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in tool["rows"]:
        name, budget = row["policy"], row["budget"]
        lib = gb.get(f"BM_Library/{NAMES[name]}/{budget}")
        ora = gb.get(f"BM_Oracle/{NAMES[name]}/{budget}")
        reads = name in READS
        floor = row["floorNs"] if reads else None
        ratio = row["ratioToFloor"] if reads else None
        steps = row["nsPerStepSpread"]
        ratios = row["ratioSpread"]
        step_range = f"{steps['min']:.1f}-{steps['max']:.1f}" if steps["max"] < 100 else f"{steps['min']:.0f}-{steps['max']:.0f}"
        ratio_range = f"{ratios['min']:.2f}-{ratios['max']:.2f}" if reads else "-"
        ns = f"{row['nsPerStep']:.1f}" if row["nsPerStep"] < 100 else f"{row['nsPerStep']:.0f}"
        oracle = (f"{lib['real_time']:.0f} | {ora['real_time']:.0f} | {ora['real_time'] / lib['real_time']:.1f}x"
                  if lib and ora else "- | - | -")
        lines.append(f"| {name} | {budget} | {ns} | {step_range} | {fmt_ratio(floor, 0)} | {fmt_ratio(ratio)} | "
                     f"{ratio_range} | {oracle} |")
    lines += ["", f"Bank ({tool['bank'][0]['threads'] if tool['bank'] else '-'} threads; parallel read "
              f"bandwidth {tool['parallelReadBandwidthGBps']:.2f} GB/s):", "",
              "| policy | instances | budget | ms/step | touched GB/s | same-size read GB/s | share of bandwidth | "
              "rounds' range | separate instances ms/step | bank speed-up |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in tool["bank"]:
        reads = b["touchedGBps"] > 0
        share = f"{100 * b['shareOfBandwidth']:.0f}%" if reads else "- (reads no attention)"
        spread = f"{100 * b['shareSpread']['min']:.0f}-{100 * b['shareSpread']['max']:.0f}%" if reads else "-"
        lines.append(f"| {b['policy']} | {b['instances']} | {b['budget']} | {b['msPerStep']:.2f} | "
                     f"{b['touchedGBps']:.2f} | {b['sameSizeReadGBps']:.2f} | {share} | {spread} | "
                     f"{b['separateMsPerStep']:.2f} | {b['separateMsPerStep'] / b['msPerStep']:.2f}x |")
    lines += ["", f"Canonical compare (21 runs): {tool['compareSharedSeconds']:.3f} s wall and "
              f"{tool['compareSharedCpuSeconds']:.3f} s of CPU in one pass over the trace "
              f"({tool['compareThreads']} threads), {tool['compareSeparateSeconds']:.3f} s run by run (one thread).", ""]
    return lines


def targets_table(results):
    rows = ["| target | " + " | ".join(t for t in results) + " |", "|---|" + "---|" * len(results)]

    def cell(ok, text):
        return f"{'met' if ok else '**not met**'}: {text}"

    def row_of(tool, policy, budget):
        return next(r for r in tool["rows"] if r["policy"] == policy and r["budget"] == budget)

    def ratio_check(policy, budget, limit):
        def f(tool, gb):
            r = row_of(tool, policy, budget)
            spread = r["ratioSpread"]
            return cell(r["ratioToFloor"] <= limit,
                        f"{r['ratioToFloor']:.2f}x floor ({spread['min']:.2f}-{spread['max']:.2f})")
        return (f"{policy} at {budget} <= {limit:g}x the row floor", f)

    checks = []
    for policy in ("snapkv", "pyramidkv"):
        for budget in (512, 4096):
            checks.append(ratio_check(policy, budget, 3.0))
    for policy in ("scissorhands", "h2o", "tova"):
        for budget in (512, 4096):
            checks.append(ratio_check(policy, budget, 2.0))
    for policy in ("sliding-window", "streaming-llm"):
        def f(tool, gb, policy=policy):
            worst = max((r for r in tool["rows"] if r["policy"] == policy), key=lambda r: r["nsPerStep"])
            spread = worst["nsPerStepSpread"]
            return cell(worst["nsPerStep"] <= 4.0,
                        f"{worst['nsPerStep']:.1f} ns ({spread['min']:.1f}-{spread['max']:.1f}) at {worst['budget']}")
        checks.append((f"{policy} <= 4 ns per step at any budget", f))

    def bank_share(tool, gb):
        b = next(b for b in tool["bank"] if b["policy"] == "h2o")
        return cell(b["shareOfBandwidth"] >= 0.7,
                    f"{100 * b['shareOfBandwidth']:.0f}% ({100 * b['shareSpread']['min']:.0f}-"
                    f"{100 * b['shareSpread']['max']:.0f}%)")
    checks.append(("H2O bank >= 70% of the same-size read", bank_share))
    for name, f in checks:
        rows.append(f"| {name} | " + " | ".join(f(*results[t]) for t in results) + " |")
    return rows


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=(
        "With no options (make performance) every table is measured and docs/performance.md rewritten. "
        "--only llama-cpp measures the llama.cpp side-by-side section alone and puts it (and its targets) "
        "into the page in place of the old one; --models, --threads, --simd and --rounds narrow it for a "
        "quick look."))
    parser.add_argument("--only", choices=["llama-cpp"], help="measure this section alone and splice it into the page")
    parser.add_argument("--models", default=",".join(LLAMA_MODELS),
                        help=f"llama.cpp section: comma-separated, of {', '.join(LLAMA_MODELS)} (default: all)")
    parser.add_argument("--threads", default=",".join(map(str, LLAMA_THREADS)),
                        help="llama.cpp section: comma-separated thread counts (default: 1,2)")
    parser.add_argument("--simd", help="llama.cpp section: comma-separated SIMD targets (default: the two best this "
                        "CPU runs, as the rest of the page)")
    parser.add_argument("--rounds", type=int, default=LLAMA_ROUNDS,
                        help=f"llama.cpp section: rounds a cell (default {LLAMA_ROUNDS})")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "performance.md",
                        help="the page to write (default docs/performance.md; with --only, the page read is "
                        "docs/performance.md all the same)")
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in LLAMA_MODELS:
            parser.error(f"--models: '{m}' is not one of {', '.join(LLAMA_MODELS)}")
    try:
        args.threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        parser.error(f"--threads: '{args.threads}' is not comma-separated whole numbers")
    if not args.models or any(t < 1 for t in args.threads) or args.rounds < 1:
        parser.error("--models, --threads and --rounds need at least one model, thread and round")
    return args


def main():
    global VNNI
    args = parse_args()
    supported = [r["target"] for r in json.loads(run([str(TOOL), "simd", "--format", "json"]))["rows"] if r["supported"]]
    VNNI = "avx512-vnni" in supported
    # The two best targets this CPU runs, the higher first.
    order = ["avx512", "avx2", "sse4", "baseline"]
    wanted = [t for t in order if t in supported][:2]
    llama_targets = wanted
    if args.simd:
        llama_targets = [t for t in order if t in args.simd.split(",")]
        unknown = [t for t in args.simd.split(",") if t not in supported]
        if unknown or not llama_targets:
            sys.exit(f"performance.py: --simd: {', '.join(unknown) or args.simd} not among this CPU's targets "
                     f"({', '.join(supported)})")
    if args.only == "llama-cpp":
        with tempfile.TemporaryDirectory(prefix="kvevict-performance-") as tmp:
            llama_targets_block, llama_lines = llama_cpp_parts(tmp, llama_targets, wanted[0], args.models,
                                                               args.threads, args.rounds, apart=True)
        page = splice_llama_cpp((ROOT / "docs" / "performance.md").read_text(), llama_targets_block, llama_lines)
        args.out.write_text(page)
        print(f"wrote {args.out}", file=sys.stderr)
        return
    model, cores, compiler = machine()
    results = {t: measure(t) for t in wanted}
    with tempfile.TemporaryDirectory(prefix="kvevict-performance-") as tmp:
        decode_lines, speed, torch_rows, _ = decode_section(tmp)
        llama_targets_block, llama_lines = llama_cpp_parts(tmp, llama_targets, wanted[0], args.models, args.threads,
                                                           args.rounds)
    body = []
    for t in wanted:
        body += section(t, *results[t])
    missing = [t for t in ("avx512", "avx2") if t not in supported]
    note = (f"\nThis machine cannot run {', '.join(missing)}: the page shows the two best targets it runs; rerun "
            f"`make performance` on one that can.\n" if missing else "")
    page = f"""# Performance

Measured by `make performance`, which reruns both benchmark tools at each SIMD
target this CPU runs and rewrites this page; every ratio below comes from one
run of one process. Speed is never asserted in unit tests (these machines are
shared and noisy); the differential tests (`tests/differential_test.cpp`,
`tests/bank_test.cpp`, `tests/simd_test.cpp`, and the whole policy suite again
at every target, `ctest -R simd_`) prove that every fast path chooses exactly
the victims of the plain implementation, on every target.

- machine: {model}, {cores} cores; {platform.system()} {platform.release()}
- compiler: {compiler}; Release (`-O3`), `-ffp-contract=off`; kernels written
  with Google Highway and compiled for baseline, SSE4, AVX2 and AVX-512, the
  best the CPU runs chosen at run time (`kvevict simd`; `KVEVICT_SIMD=avx2`
  forces a lower one)

A step is `on_decode_step` plus, once the budget binds, `evict`, with the
attention row drawn from a 64 MiB pool so that each step reads it from memory
as a decode step would. The *row floor* is a plain vectorised sum over the
same rows in the same order -- what reading the step's attention costs. Policy
and floor are timed in 7 alternating rounds of equal length, in the thread's
CPU time; each round's ratio is its own steps over its own floor, and every
ratio is printed as the median round with the range of all seven, so a noisy
neighbour hits both sides of a ratio alike and shows as a wide range rather
than a wrong number. The bank's share of bandwidth -- the bytes a step must
read (attention, slot positions, state) over its step time, against a parallel
read of as many bytes timed right after each of its rounds -- is 100 % for a
step no slower than reading its inputs. The
*oracle* is the plainest implementation of the spec (`tests/oracle/oracle.h`),
timed by Google Benchmark in the same process as the library.

These machines are shared: read a cell whose range straddles its target as
"about there", not as a verdict. Every table on this page is written by that
one run of `make performance` (`scripts/performance.py`), under the commands
it ran; being this machine's timings, none is rerun by the docs check but the
committed model's `bench` table (its configuration columns are compared).

## Targets
{note}
{chr(10).join(targets_table(results))}

Decoding (the best target, below: "Decoding a real model's shape"):

{chr(10).join(decode_targets(speed, torch_rows))}

{chr(10).join(llama_targets_block)}

{chr(10).join(body)}
{chr(10).join(key_aware_section(wanted))}
{chr(10).join(decode_lines)}
{chr(10).join(llama_lines)}
{chr(10).join(model_section())}
## What makes them fast

- **Scissorhands**: one pass counts the votes, checks every weight and finds
  the fewest votes over the next eviction's range with the first 64-slot block
  holding it; a refused step is undone exactly (votes are integers); the
  eviction looks at one block.
- **H2O**: the same, except that a float64 sum cannot be undone, so the row is
  checked first (one read from memory) and added second (from cache). The
  bank instead adds into a spare score buffer while checking, and switches
  buffers only when every row was valid: one read.
- **TOVA**: one pass checks the row and writes it into a spare record buffer
  (float32 holds a float32 weight exactly), finding its minimum; the buffers
  switch only when the row was valid, and the evicted record is left as a hole
  that the next pass reads past, so an eviction shifts only the positions.
- **SnapKV / PyramidKV**: each slot keeps a running float64 sum of its
  ring (a step adds the new weight and takes off the one it overwrites), and
  a proven drift bound says which slots could be the spec's victim -- zero when
  the weights' float64 sums are exact; otherwise the few candidates are
  settled by the spec's ring-order sums and mass ties recompute everything.
  Pooling is screened: last step's lowest score, with a margin, bounds the
  windows worth pooling, found by one compare a slot and shifts of a bit array.
  Rings never move on an eviction (the victim's becomes a hole, closed in
  batches). What is left per step is a validation pass, the ring write with
  its running-sum update, the screen and the shifts of two slot arrays.
- **Sliding Window / StreamingLLM**: the steady state is a few compares and a
  store in each call; `Attention` travels in two registers (an optional span
  built just before a call stalled store forwarding), and calls inside the
  shared library stay direct (`-fno-semantic-interposition`). What is left is
  the three virtual calls a caller makes a step (`on_decode_step`,
  `kept_count`, `evict`).
- **The canonical compare**: each trace row and its top-32 set are made once,
  256 steps at a time, while the cores step their share of the 21 runs through
  the previous chunk (balanced by what each run cost in the last one); the
  retained sums of up to eight runs advance together (each still the spec's
  ascending float64 sum).
- Every pass that reads a row from memory asks for it 2 KiB ahead (a decode
  step's row is too short for the hardware prefetcher to ramp up).
"""
    args.out.write_text(page)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
