#!/usr/bin/python3
"""kvevict's logits on real-format models equal an independent reference.

For each case, `kvevict random-model` writes a tiny random model (GGUF in every
weight type, or an HF safetensors folder), `kvevict logits` feeds fixed token
ids through it, and tests/model/reference/ (a GGUF/safetensors reader with
numpy dequantizers and a torch forward pass written from the format and
architecture definitions, not from kvevict's C++) computes the same logits
from the files. Asserts max |kvevict - reference| <= TOL_REL * max(1, max
|reference|) for every case, with and without eviction (sliding window,
StreamingLLM: the same positions evicted in both), plus what the file must
hold (types, shapes, config) per the random-model contract.

Prints the reference-match table (format x arch x type -> max abs logit
difference) and writes it as markdown to $KVEVICT_REFERENCE_TABLE when set.

Usage: reference_logits_test.py KVEVICT   (ctest model_reference)"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import harness  # noqa: E402

harness.need_python_modules("numpy", "torch")
TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
harness.need_tool(TOOL)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from reference import forward as fw  # noqa: E402
from reference import gguf_io as G  # noqa: E402
from reference import safetensors_io as S  # noqa: E402

torch.set_num_threads(1)

# kvevict computes in float32, the reference in float64 from the same
# dequantized weights (exact in both), so the difference is kvevict's float32
# rounding alone. Measured: at most 6e-6 absolute on logits of scale ~4
# (1.5e-6 relative) over all 52 comparisons, the same size as the reference's
# own float32-vs-float64 gap (reference_selftest.py). 2e-5 of the scale is
# >10x that, room for another summation order or SIMD path, and far below
# what a real fault does: a wrong RoPE mode, or one dequantizer's elements out
# of order, moves the logits by 4-6 (checked by mutating the reference).
TOL_REL = 2e-5
SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model", "heldout-sample.txt")
N_TOKENS = 48
N_TOKENS_EVICT = 64
DEFAULTS = {"n_layer": 2, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ctx": 256}

R = harness.Runner()
rows = []                       # the reference-match table
WORK = tempfile.TemporaryDirectory(prefix="kvevict-ref-")
_seed = [100]


def tool(*args):
    return harness.run([TOOL, *map(str, args)])


def make_model(fmt, arch, typ, extra=()):
    _seed[0] += 1
    name = f"{arch}-{typ}-{_seed[0]}"
    out = os.path.join(WORK.name, name + (".gguf" if fmt == "gguf" else ""))
    tool("random-model", "--arch", arch, "--format", fmt, "--type", typ, "--out", out, "--seed", _seed[0],
         "--tokenizer-text", SAMPLE, *extra)
    return out


def token_ids(n, vocab, seed):
    return [int(x) for x in np.random.default_rng(seed).integers(0, vocab, n)]


def kvevict_logits(path, ids, policy_args=()):
    out = os.path.join(WORK.name, f"logits-{_seed[0]}-{len(policy_args)}.npy")
    tool("logits", "--model", path, "--tokens", ",".join(map(str, ids)), "--out", out, "--force", *policy_args)
    a = np.load(out)
    assert a.dtype == np.float32, f"logits dtype {a.dtype}"
    return a


def check_file_contract(path, fmt, arch, typ, model, extra):
    """What random-model promises about the file (the brief's contract)."""
    cfg = model.config
    want = dict(DEFAULTS)
    for flag, key in (("--layers", "n_layer"), ("--width", "n_embd"), ("--heads", "n_head"),
                      ("--kv-heads", "n_head_kv"), ("--ff", "n_ff"), ("--context", "n_ctx")):
        if flag in extra:
            want[key] = int(extra[list(extra).index(flag) + 1])
    got = {k: getattr(cfg, k) for k in want}
    assert got == want, f"config {got} != {want}"
    if "--tied" in extra:
        assert cfg.tied, "--tied but the file has an output/lm_head tensor"
    if "--untied" in extra:
        assert not cfg.tied, "--untied but the file has no output/lm_head tensor"
    llama3 = "--rope-scaling" in extra
    assert (cfg.freq_divisors is not None) == llama3, "rope scaling present/absent against --rope-scaling"
    if llama3 and fmt == "safetensors":
        div = cfg.freq_divisors
        assert (div == 1).any() and (div == 8).any() and ((div > 1) & (div < 8)).any(), "llama3 regimes"
    if fmt == "gguf":
        f = G.read_gguf(path)
        assert f.metadata["general.architecture"] in (arch, "llama" if arch == "mistral" else arch)
        for t in f.tensors:
            expect = G.TYPE_BY_NAME[typ.upper()] if len(t.ne) >= 2 and t.ne[1] > 1 else G.F32
            assert t.type_id == expect, f"{t.name}: {G.type_name(t.type_id)}, expected {G.type_name(expect)}"
        biases = [t.name for t in f.tensors if t.name.endswith(".bias")]
        if arch == "qwen2":
            assert len(biases) == 3 * cfg.n_layer, f"qwen2 q/k/v biases: {biases}"
        elif "--biases" in extra:
            assert len(biases) == 7 * cfg.n_layer, f"q/k/v/output/gate/up/down biases: {biases}"
        else:
            assert not biases, f"{arch} has biases {biases}"
    else:
        _, dtypes = S.read_model(path)
        assert set(dtypes.values()) == {typ.upper()}, f"dtypes {set(dtypes.values())}"
        for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            assert os.path.isfile(os.path.join(path, fn)), f"no {fn}"


def compare(label, fmt, arch, typ, variant, extra=(), policies=()):
    def body():
        path = make_model(fmt, arch, typ, extra)
        model = fw.load_model(path)
        check_file_contract(path, fmt, arch, typ, model, list(extra))
        n = N_TOKENS_EVICT if policies else N_TOKENS
        ids = token_ids(n, model.config.n_vocab, 7 + len(rows))
        got = kvevict_logits(path, ids)
        ref = fw.forward(model, ids, dtype=torch.float64)
        assert got.shape == (n, model.config.n_vocab), f"logits shape {got.shape}"
        results = [("full cache", got, ref)]
        for pname, budget, sinks in policies:
            args = ["--policy", pname, "--budget", budget] + (["--param", f"sinks={sinks}"] if pname == "streaming-llm" else [])
            g = kvevict_logits(path, ids, args)
            r = fw.forward(model, ids, mask=fw.eviction_mask(n, pname, budget, sinks), dtype=torch.float64)
            # eviction must matter here, or the comparison proves nothing
            assert np.abs(r[budget + 1:] - ref[budget + 1:]).max() > 100 * TOL_REL * max(1, np.abs(ref).max())
            results.append((f"{pname} budget {budget}" + (f" sinks {sinks}" if pname == "streaming-llm" else ""), g, r))
        bad = []
        for what, g, r in results:
            scale = max(1.0, float(np.abs(r).max()))
            diff = float(np.abs(g.astype(np.float64) - r).max())
            ok = diff <= TOL_REL * scale
            rows.append((fmt, arch, typ, variant if what == "full cache" else f"{variant} {what}".strip(),
                         diff, scale, ok))
            if not ok:
                worst = np.unravel_index(np.argmax(np.abs(g - r)), g.shape)
                bad.append(f"{what}: max |diff| {diff:.3g} > {TOL_REL * scale:.3g} (token {worst[0]}, id {worst[1]})")
        assert not bad, "; ".join(bad)
    R.check(label, body)


TYPES_GGUF = ["f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_k", "q6_k"]
ARCHS = ["llama", "qwen2", "mistral"]

start = time.time()
for arch in ARCHS:
    for typ in TYPES_GGUF:
        compare(f"gguf {arch} {typ}", "gguf", arch, typ, "")
for arch in ARCHS:
    for typ in ("f32", "f16", "bf16"):
        compare(f"safetensors {arch} {typ}", "safetensors", arch, typ, "")
compare("gguf llama f32 --rope-scaling llama3", "gguf", "llama", "f32", "llama3 rope", ["--rope-scaling", "llama3"])
compare("gguf llama q4_k --rope-scaling llama3", "gguf", "llama", "q4_k", "llama3 rope", ["--rope-scaling", "llama3"])
compare("safetensors llama f32 --rope-scaling llama3", "safetensors", "llama", "f32", "llama3 rope",
        ["--rope-scaling", "llama3"])
for fmt, arch, typ in (("gguf", "llama", "q8_0"), ("gguf", "qwen2", "q6_k"), ("safetensors", "qwen2", "bf16"),
                       ("safetensors", "mistral", "f16")):
    for tie in ("--tied", "--untied"):
        compare(f"{fmt} {arch} {typ} {tie}", fmt, arch, typ, tie.lstrip("-"), [tie])
compare("gguf llama f16, 3 layers, width 128, 8 heads over 2 KV heads", "gguf", "llama", "f16",
        "3 layers w128 8/2 heads", ["--layers", "3", "--width", "128", "--heads", "8", "--kv-heads", "2", "--ff", "384"])
compare("safetensors qwen2 f32, 3 layers, width 128, 8 heads over 2 KV heads", "safetensors", "qwen2", "f32",
        "3 layers w128 8/2 heads", ["--layers", "3", "--width", "128", "--heads", "8", "--kv-heads", "2", "--ff", "384"])
# Every bias llama.cpp's llama builder reads (q, k, v, output, gate, up, down),
# as GGUF tensors and as config.json's attention_bias and mlp_bias.
compare("gguf llama f32 --biases", "gguf", "llama", "f32", "biases", ["--biases"])
compare("gguf mistral q8_0 --biases", "gguf", "mistral", "q8_0", "biases", ["--biases"])
compare("safetensors llama f16 --biases", "safetensors", "llama", "f16", "biases", ["--biases"])
EVICT = [("sliding-window", 16, 0), ("streaming-llm", 16, 4)]
compare("gguf llama q8_0 with eviction", "gguf", "llama", "q8_0", "", policies=EVICT)
compare("safetensors qwen2 f32 with eviction", "safetensors", "qwen2", "f32", "", policies=EVICT)
elapsed = time.time() - start


def table_markdown():
    lines = [f"Reference match: `kvevict logits` against tests/model/reference (float64), {N_TOKENS} tokens "
             f"({N_TOKENS_EVICT} with eviction); tolerance {TOL_REL:g} × max(1, max |logit|).", "",
             "| format | arch | type | variant | max abs diff | logit scale | within tolerance |",
             "|---|---|---|---|---:|---:|---|"]
    for fmt, arch, typ, variant, diff, scale, ok in rows:
        lines.append(f"| {fmt} | {arch} | {typ} | {variant or '—'} | {diff:.3g} | {scale:.3g} | {'yes' if ok else '**no**'} |")
    return "\n".join(lines) + "\n"


md = table_markdown()
print()
print(md)
print(f"({len(rows)} comparisons in {elapsed:.1f} s)")
if os.environ.get("KVEVICT_REFERENCE_TABLE"):
    with open(os.environ["KVEVICT_REFERENCE_TABLE"], "w") as fh:
        fh.write(md)
WORK.cleanup()
R.finish()
