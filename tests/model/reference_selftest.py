#!/usr/bin/python3
"""Self-test of the independent references in tests/model/reference/ (needs
no kvevict): the numpy dequantizers against a plain per-element evaluation of
each block formula on hand-made random blocks; GGUF and safetensors write/read
round trips; the forward pass's RoPE modes (HF weights with NEOX equal the
llama.cpp-permuted weights with NORMAL); the same random model loaded from a
GGUF and from a safetensors folder; the eviction masks against their closed
forms and against a decoder that physically removes evicted keys.

Usage: reference_selftest.py   (ctest model_reference_selftest)"""
import json
import math
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import harness  # noqa: E402

harness.need_python_modules("numpy", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from reference import forward as fw  # noqa: E402
from reference import gguf_io as G  # noqa: E402
from reference import safetensors_io as S  # noqa: E402

torch.set_num_threads(1)
R = harness.Runner()
rng = np.random.default_rng(1234)


# ---------------------------------------------------------------------------
# Dequantizers: plain per-element formulas, byte by byte
# ---------------------------------------------------------------------------

def half(b, off):
    return struct.unpack_from("<e", b, off)[0]


def slow_q8_0(b):
    d = half(b, 0)
    return [d * struct.unpack_from("<b", b, 2 + j)[0] for j in range(32)]


def slow_q4_0(b):
    d = half(b, 0)
    y = [0.0] * 32
    for j in range(16):
        y[j] = d * ((b[2 + j] & 0xF) - 8)
        y[j + 16] = d * ((b[2 + j] >> 4) - 8)
    return y


def slow_q5_0(b):
    d = half(b, 0)
    qh = struct.unpack_from("<I", b, 2)[0]
    y = [0.0] * 32
    for j in range(16):
        x0 = (b[6 + j] & 0xF) | (((qh >> j) & 1) << 4)
        x1 = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)
        y[j] = d * (x0 - 16)
        y[j + 16] = d * (x1 - 16)
    return y


def slow_q4_k(b):
    d, dmin = half(b, 0), half(b, 2)
    scales = b[4:16]
    qs = b[16:144]

    def scale_min(j):
        if j < 4:
            return scales[j] & 63, scales[j + 4] & 63
        return ((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
                (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))

    y = [0.0] * 256
    for g in range(4):
        sc1, m1 = scale_min(2 * g)
        sc2, m2 = scale_min(2 * g + 1)
        for l in range(32):
            y[64 * g + l] = d * sc1 * (qs[32 * g + l] & 0xF) - dmin * m1
            y[64 * g + 32 + l] = d * sc2 * (qs[32 * g + l] >> 4) - dmin * m2
    return y


def slow_q6_k(b):
    ql, qh = b[0:128], b[128:192]
    sc = struct.unpack_from("<16b", b, 192)
    d = half(b, 208)
    y = [0.0] * 256
    for n in range(2):
        for l in range(32):
            L, H = ql[64 * n:], qh[32 * n:]
            q1 = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            for e, q in ((l, q1), (l + 32, q2), (l + 64, q3), (l + 96, q4)):
                y[128 * n + e] = d * sc[(128 * n + e) // 16] * q
    return y


def random_half_bytes(n):
    """n finite f16 values with varied exponents, as bytes."""
    v = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 1, n)).astype("<f2")
    return v.tobytes()


def random_blocks(tid, nb):
    _, blck, size = G.GGML_TYPES[tid]
    out = bytearray(rng.integers(0, 256, nb * size, dtype=np.uint8).tobytes())
    for i in range(nb):
        base = i * size
        if tid in (G.Q8_0, G.Q4_0, G.Q5_0):
            out[base:base + 2] = random_half_bytes(1)
        elif tid == G.Q4_K:
            out[base:base + 4] = random_half_bytes(2)
        elif tid == G.Q6_K:
            out[base + 208:base + 210] = random_half_bytes(1)
    return bytes(out)


SLOW = {G.Q8_0: slow_q8_0, G.Q4_0: slow_q4_0, G.Q5_0: slow_q5_0, G.Q4_K: slow_q4_k, G.Q6_K: slow_q6_k}


def check_quant(tid):
    _, blck, size = G.GGML_TYPES[tid]
    nb = 6
    raw = random_blocks(tid, nb)
    fast = G.dequantize(tid, raw, nb * blck)
    slow = np.concatenate([np.array(SLOW[tid](raw[i * size:(i + 1) * size]), dtype=np.float64) for i in range(nb)])
    assert fast.dtype == np.float32 and fast.shape == (nb * blck,)
    # slow is float64 arithmetic; fast float32: equal to float32 rounding
    err = np.max(np.abs(fast - slow) / (np.abs(slow).max() + 1e-30))
    assert err < 1e-6, f"relative error {err}"
    # every block's layout, not just its scale, matters: a wrong nibble order changes values
    assert np.count_nonzero(fast) > nb * blck // 2


for tid in SLOW:
    R.check(f"dequantize {G.type_name(tid)} == per-element formula", check_quant, tid)


def check_plain_types():
    vals = rng.standard_normal(64).astype(np.float32)
    assert np.array_equal(G.dequantize(G.F32, vals.tobytes(), 64), vals)
    h = vals.astype("<f2")
    assert np.array_equal(G.dequantize(G.F16, h.tobytes(), 64), [struct.unpack("<e", x.tobytes())[0] for x in h])
    bf = (vals.view(np.uint32) >> 16).astype("<u2")
    expect = [struct.unpack("<f", struct.pack("<I", int(x) << 16))[0] for x in bf]
    assert np.array_equal(G.dequantize(G.BF16, bf.tobytes(), 64), np.array(expect, dtype=np.float32))


R.check("dequantize F32/F16/BF16 == struct", check_plain_types)


# ---------------------------------------------------------------------------
# GGUF round trip
# ---------------------------------------------------------------------------

def gguf_round_trip(version, alignment):
    kv = [
        ("general.architecture", G.STRING, "llama"),
        ("t.u8", G.UINT8, 250), ("t.i8", G.INT8, -100), ("t.u16", G.UINT16, 65000), ("t.i16", G.INT16, -30000),
        ("t.u32", G.UINT32, 4000000000), ("t.i32", G.INT32, -2000000000), ("t.f32", G.FLOAT32, 0.5),
        ("t.bool", G.BOOL, True), ("t.str", G.STRING, "héllo ▁ 世界 🙂"), ("t.u64", G.UINT64, 2 ** 63 + 5),
        ("t.i64", G.INT64, -(2 ** 62)), ("t.f64", G.FLOAT64, math.pi),
        ("t.arr_i32", (G.ARRAY, G.INT32), [1, -2, 3]), ("t.arr_f32", (G.ARRAY, G.FLOAT32), [0.25, -1.5]),
        ("t.arr_str", (G.ARRAY, G.STRING), ["a", "", "<0x0A>", "Ġthe"]),
        ("t.arr_bool", (G.ARRAY, G.BOOL), [True, False]),
        ("t.arr_empty", (G.ARRAY, G.UINT8), []),
        ("t.arr_nested", (G.ARRAY, (G.ARRAY, G.UINT16)), [[1, 2], [], [3]]),
    ]
    if alignment != 32:
        kv.append(("general.alignment", G.UINT32, alignment))
    tensors = []
    for i, tid in enumerate([G.F32, G.Q4_K, G.F16, G.Q8_0, G.Q6_K, G.BF16, G.Q5_0, G.Q4_0]):
        _, blck, size = G.GGML_TYPES[tid]
        ne = [256, 3] if blck == 256 else [64, 5] if i % 2 else [32]
        raw = random_blocks(tid, G.tensor_nbytes(tid, ne) // size) if blck > 1 else \
            rng.standard_normal(int(np.prod(ne))).astype({G.F32: "<f4", G.F16: "<f2"}.get(tid, "<f4")).tobytes()[
                :G.tensor_nbytes(tid, ne)]
        tensors.append((f"t{i}.weight", ne, tid, raw))
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.gguf")
        G.write_gguf(p, kv, tensors, version=version)
        f = G.read_gguf(p)
        assert f.version == version and f.alignment == alignment
        assert f.key_order == [k for k, _, _ in kv]
        for key, t, v in kv:
            got = f.metadata[key]
            if t == G.FLOAT32:
                assert got == struct.unpack("<f", struct.pack("<f", v))[0]
            elif isinstance(t, tuple) and t[1] == G.FLOAT32:
                assert got == [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]
            else:
                assert got == v, (key, got, v)
            exp_t = (t[0], t[1][0] if isinstance(t[1], tuple) else t[1]) if isinstance(t, tuple) else (t, None)
            assert f.value_types[key] == exp_t, (key, f.value_types[key], exp_t)
        assert f.data_start % alignment == 0
        assert [t.name for t in f.tensors] == [t[0] for t in tensors]
        for (name, ne, tid, raw), info in zip(tensors, f.tensors):
            assert info.ne == ne and info.type_id == tid and info.offset % alignment == 0
            assert f.raw(name) == raw
            assert f.tensor(name).shape == tuple(reversed(ne))
        # vocab-only file: no tensors, no padding
        G.write_gguf(p, kv[:3])
        f = G.read_gguf(p)
        assert f.tensors == [] and f.metadata["t.u8"] == 250


for version, alignment in ((3, 32), (3, 64), (2, 32)):
    R.check(f"gguf write/read round trip v{version} alignment {alignment}", gguf_round_trip, version, alignment)


def gguf_rejects():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "bad.gguf")
        with open(p, "wb") as fh:
            fh.write(b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
        try:
            G.read_gguf(p)
        except G.GGUFError:
            pass
        else:
            raise AssertionError("version 1 accepted")
        G.write_gguf(p, [("a", G.UINT8, 1)], [G.f32_tensor("w", np.ones(8, np.float32))])
        with open(p, "r+b") as fh:
            fh.truncate(os.path.getsize(p) - 4)
        try:
            G.read_gguf(p)
        except G.GGUFError:
            pass
        else:
            raise AssertionError("truncated tensor data accepted")


R.check("gguf reader rejects version 1 and truncated data", gguf_rejects)


def safetensors_round_trip():
    with tempfile.TemporaryDirectory() as d:
        a = {"x": rng.standard_normal((3, 4)).astype(np.float32), "y": rng.standard_normal(5).astype(np.float32)}
        for dt in ("F32", "F16", "BF16"):
            S.write_file(os.path.join(d, "model.safetensors"), a, dt, metadata={"format": "pt"})
            t, dts, meta = S.read_file(os.path.join(d, "model.safetensors"))
            assert meta == {"format": "pt"} and dts == {"x": dt, "y": dt}
            for k in a:
                tol = {"F32": 0, "F16": 1e-3, "BF16": 1e-2}[dt]
                assert t[k].shape == a[k].shape and np.allclose(t[k], a[k], rtol=tol, atol=tol), (dt, k)
        os.remove(os.path.join(d, "model.safetensors"))
        S.write_file(os.path.join(d, "model-00001-of-00002.safetensors"), {"x": a["x"]})
        S.write_file(os.path.join(d, "model-00002-of-00002.safetensors"), {"y": a["y"]}, "BF16")
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {"total_size": 0}, "weight_map": {
                "x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}, fh)
        t, dts = S.read_model(d)
        assert np.array_equal(t["x"], a["x"]) and dts["y"] == "BF16"


R.check("safetensors write/read round trip, sharded index", safetensors_round_trip)


# ---------------------------------------------------------------------------
# Forward pass
# ---------------------------------------------------------------------------

def random_hf(arch, n_layer=2, n_embd=64, n_head=4, n_kv=2, n_ff=96, vocab=50, tied=False, seed=0):
    """HF-named random weights (PyTorch order)."""
    g = np.random.default_rng(seed)
    hd = n_embd // n_head
    W = {"model.embed_tokens.weight": g.standard_normal((vocab, n_embd)) * 0.5,
         "model.norm.weight": 1 + 0.1 * g.standard_normal(n_embd)}
    if not tied:
        W["lm_head.weight"] = g.standard_normal((vocab, n_embd)) * 0.2
    for i in range(n_layer):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = 1 + 0.1 * g.standard_normal(n_embd)
        W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * g.standard_normal(n_embd)
        for n, rows in (("q", n_head * hd), ("k", n_kv * hd), ("v", n_kv * hd)):
            W[p + f"self_attn.{n}_proj.weight"] = g.standard_normal((rows, n_embd)) * 0.3
            if arch == "qwen2":
                W[p + f"self_attn.{n}_proj.bias"] = g.standard_normal(rows) * 0.3
        W[p + "self_attn.o_proj.weight"] = g.standard_normal((n_embd, n_head * hd)) * 0.2
        W[p + "mlp.gate_proj.weight"] = g.standard_normal((n_ff, n_embd)) * 0.2
        W[p + "mlp.up_proj.weight"] = g.standard_normal((n_ff, n_embd)) * 0.2
        W[p + "mlp.down_proj.weight"] = g.standard_normal((n_embd, n_ff)) * 0.2
    W = {k: v.astype(np.float32) for k, v in W.items()}
    cfg = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                              "mistral": "MistralForCausalLM"}[arch]],
           "model_type": arch, "hidden_size": n_embd, "intermediate_size": n_ff, "num_hidden_layers": n_layer,
           "num_attention_heads": n_head, "num_key_value_heads": n_kv, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": tied,
           "vocab_size": vocab, "rope_scaling": None}
    return W, cfg


def write_pair(d, arch, W, cfg, llama3=None):
    """Writes W/cfg as a safetensors folder and as a GGUF (F32, llama.cpp
    names, Q/K permuted for llama/mistral, rope_freqs for llama3)."""
    st = os.path.join(d, f"{arch}-st")
    os.makedirs(st, exist_ok=True)
    cfg = dict(cfg)
    if llama3:
        cfg["rope_scaling"] = {"rope_type": "llama3", **llama3}
    with open(os.path.join(st, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    S.write_file(os.path.join(st, "model.safetensors"), W)
    gg_arch = "llama" if arch == "mistral" else arch
    p = gg_arch + "."
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // n_head
    kv = [("general.architecture", G.STRING, gg_arch),
          (p + "context_length", G.UINT32, cfg["max_position_embeddings"]),
          (p + "embedding_length", G.UINT32, cfg["hidden_size"]),
          (p + "block_count", G.UINT32, cfg["num_hidden_layers"]),
          (p + "feed_forward_length", G.UINT32, cfg["intermediate_size"]),
          (p + "attention.head_count", G.UINT32, n_head),
          (p + "attention.head_count_kv", G.UINT32, n_kv),
          (p + "rope.dimension_count", G.UINT32, hd),
          (p + "rope.freq_base", G.FLOAT32, cfg["rope_theta"]),
          (p + "attention.layer_norm_rms_epsilon", G.FLOAT32, cfg["rms_norm_eps"])]
    tensors = []
    if llama3:
        div = fw.llama3_divisors(cfg["rope_theta"], hd, llama3["factor"], llama3["low_freq_factor"],
                                 llama3["high_freq_factor"], llama3["original_max_position_embeddings"])
        tensors.append(G.f32_tensor("rope_freqs.weight", div))
    for name, a in W.items():
        a = a
        if gg_arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            a = fw.permute_for_normal_rope(a, n_head if ".q_proj." in name else n_kv)
        tensors.append(G.f32_tensor(fw.hf_to_gguf_name(name), a))
    gp = os.path.join(d, f"{arch}.gguf")
    G.write_gguf(gp, kv, tensors)
    return st, gp


TOKENS = [3, 17, 0, 42, 8, 8, 31, 5, 49, 12, 1, 27, 33, 2, 19, 44, 7, 23, 38, 11]


def check_gguf_vs_safetensors(arch, tied=False, llama3=None):
    W, cfg = random_hf(arch, tied=tied, seed=hash((arch, tied)) % 1000)
    with tempfile.TemporaryDirectory() as d:
        st, gp = write_pair(d, arch, W, cfg, llama3)
        ms, mg = fw.load_model(st), fw.load_model(gp)
        assert ms.config.rope_mode == "neox"
        assert mg.config.rope_mode == ("neox" if arch == "qwen2" else "normal")
        assert ms.config.tied == tied and mg.config.tied == tied
        assert (ms.config.freq_divisors is not None) == bool(llama3)
        a = fw.forward(ms, TOKENS, dtype=torch.float64)
        b = fw.forward(mg, TOKENS, dtype=torch.float64)
        err = np.abs(a - b).max() / np.abs(a).max()
        # exact but for rope_freqs, which GGUF stores as F32 (config.json's rule is float64 here)
        assert err < (1e-6 if llama3 else 1e-10), f"max |safetensors - gguf| / scale = {err}"
        # the wrong RoPE mode is exact at position 0 only
        c = fw.forward(mg, TOKENS, dtype=torch.float64, rope_mode="neox" if mg.config.rope_mode == "normal" else "normal")
        if arch != "qwen2":
            assert np.abs(c[0] - b[0]).max() < 1e-9 and np.abs(c[1:] - b[1:]).max() > 1e-3
        # float32 agrees with float64 to ~1e-6 of the logits' scale: the reference's own rounding
        f32 = fw.forward(mg, TOKENS)
        rel = np.abs(f32 - b).max() / np.abs(b).max()
        assert rel < 1e-5, f"float32 vs float64: {rel}"


LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
for arch in ("llama", "qwen2", "mistral"):
    R.check(f"{arch}: safetensors (NEOX) == GGUF ({'NEOX' if arch == 'qwen2' else 'NORMAL, Q/K permuted'})",
            check_gguf_vs_safetensors, arch)
R.check("llama tied: safetensors == GGUF", check_gguf_vs_safetensors, "llama", True)
R.check("llama llama3 rope: config.json rope_scaling == GGUF rope_freqs", check_gguf_vs_safetensors, "llama", False, LLAMA3)


def check_llama3_rule():
    div = fw.llama3_divisors(10000.0, 64, 8.0, 1.0, 4.0, 64.0)
    f = 10000.0 ** (-np.arange(32) * 2 / 64)
    wl = 2 * np.pi / f
    assert np.all(div[wl < 16] == 1) and np.all(div[wl > 64] == 8)
    mid = (wl >= 16) & (wl <= 64)
    assert mid.any() and np.all((div[mid] >= 1) & (div[mid] <= 8))
    assert (wl < 16).any() and (wl > 64).any()   # all three regimes occur with L = 64


R.check("llama3 divisors: 1 / factor / smooth in the three wavelength ranges", check_llama3_rule)


def check_rope_on_pair():
    """One pair rotated by hand: NORMAL rotates (x0, x1), NEOX (x0, x_{d/2})."""
    cfg = fw.Config("llama", "gguf", 1, 4, 1, 1, 4, 4, 4, 8, 1e-5, 10000.0, 4, "normal")
    theta = fw.rope_angles(cfg, [3])
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], dtype=torch.float64)
    cos, sin = torch.from_numpy(np.cos(theta)), torch.from_numpy(np.sin(theta))
    n = fw.apply_rope(x, cos, sin, 4, "normal")[0, 0]
    t0, t1 = 3.0, 3.0 * 10000 ** (-0.5)
    exp = [1 * math.cos(t0) - 2 * math.sin(t0), 1 * math.sin(t0) + 2 * math.cos(t0),
           3 * math.cos(t1) - 4 * math.sin(t1), 3 * math.sin(t1) + 4 * math.cos(t1)]
    assert np.allclose(n.numpy(), exp)
    e = fw.apply_rope(x, cos, sin, 4, "neox")[0, 0]
    exp = [1 * math.cos(t0) - 3 * math.sin(t0), 2 * math.cos(t1) - 4 * math.sin(t1),
           1 * math.sin(t0) + 3 * math.cos(t0), 2 * math.sin(t1) + 4 * math.cos(t1)]
    assert np.allclose(e.numpy(), exp)


R.check("rope: NORMAL and NEOX pairs on a hand-computed example", check_rope_on_pair)


def check_masks():
    T = 64
    for budget in (1, 5, 16):
        got = fw.held_positions(T, "sliding-window", budget)
        for t in range(T):
            assert got[t] == list(range(max(0, t - budget), t + 1)), (budget, t, got[t])
    for sinks, budget in ((4, 16), (0, 16), (1, 2), (3, 4)):
        got = fw.held_positions(T, "streaming-llm", budget, sinks)
        for t in range(T):
            want = sorted(set(range(min(sinks, t))) | set(range(max(0, t - (budget - sinks)), t + 1)))
            assert got[t] == want, (sinks, budget, t, got[t], want)
            assert len(got[t]) <= budget + 1
    assert fw.held_positions(T, "streaming-llm", 16, 0) == fw.held_positions(T, "sliding-window", 16)


R.check("eviction masks == closed forms (sliding window, StreamingLLM)", check_masks)


def decode_with_physical_eviction(model, tokens, policy, budget, sinks):
    """Token-by-token decode with a real KV cache whose evicted entries are
    removed, independent of eviction_mask: the check that masking equals
    eviction."""
    cfg = model.config
    W = {k: torch.from_numpy(v).double() for k, v in model.weights.items()}
    hd, nh, nkv = cfg.head_dim, cfg.n_head, cfg.n_head_kv
    caches = [{"pos": [], "k": [], "v": []} for _ in range(cfg.n_layer)]
    out = []
    for t, tok in enumerate(tokens):
        theta = fw.rope_angles(cfg, [t])
        cos, sin = torch.from_numpy(np.cos(theta)), torch.from_numpy(np.sin(theta))
        x = W["token_embd.weight"][tok][None, :]
        for layer, cache in enumerate(caches):
            p = f"blk.{layer}."
            h = fw.rms_norm(x, W[p + "attn_norm.weight"], cfg.eps)
            q = (h @ W[p + "attn_q.weight"].T + W.get(p + "attn_q.bias", 0)).reshape(1, nh, hd)
            k = (h @ W[p + "attn_k.weight"].T + W.get(p + "attn_k.bias", 0)).reshape(1, nkv, hd)
            v = (h @ W[p + "attn_v.weight"].T + W.get(p + "attn_v.bias", 0)).reshape(1, nkv, hd)
            q = fw.apply_rope(q, cos, sin, cfg.n_rot, cfg.rope_mode)[0]
            k = fw.apply_rope(k, cos, sin, cfg.n_rot, cfg.rope_mode)[0]
            K = torch.stack(cache["k"] + [k])          # [n, nkv, hd]
            V = torch.stack(cache["v"] + [v[0]])
            heads = []
            for hh in range(nh):
                kvh = hh // (nh // nkv)
                a = torch.softmax(K[:, kvh] @ q[hh] / math.sqrt(hd), dim=0)
                heads.append(a @ V[:, kvh])
            x = x + torch.cat(heads)[None, :] @ W[p + "attn_output.weight"].T
            h = fw.rms_norm(x, W[p + "ffn_norm.weight"], cfg.eps)
            x = x + (torch.nn.functional.silu(h @ W[p + "ffn_gate.weight"].T) * (h @ W[p + "ffn_up.weight"].T)) \
                @ W[p + "ffn_down.weight"].T
            cache["pos"].append(t)
            cache["k"].append(k)
            cache["v"].append(v[0])
            while len(cache["pos"]) > budget:       # the policy's own rule, evicted for real
                i = 0 if policy == "sliding-window" else next(j for j, ps in enumerate(cache["pos"]) if ps >= sinks)
                for key in ("pos", "k", "v"):
                    cache[key].pop(i)
        x = fw.rms_norm(x, W["output_norm.weight"], cfg.eps)
        out.append((x @ W.get("output.weight", W["token_embd.weight"]).T)[0].numpy())
    return np.array(out)


def check_mask_equals_eviction(arch, policy, budget, sinks):
    W, cfg = random_hf(arch, seed=7)
    with tempfile.TemporaryDirectory() as d:
        st, gp = write_pair(d, arch, W, cfg)
        m = fw.load_model(gp if arch == "llama" else st)
        toks = [int(x) for x in np.random.default_rng(3).integers(0, 50, 40)]
        a = fw.forward(m, toks, mask=fw.eviction_mask(len(toks), policy, budget, sinks), dtype=torch.float64)
        b = decode_with_physical_eviction(m, toks, policy, budget, sinks)
        assert np.abs(a - b).max() < 1e-9, np.abs(a - b).max()
        full = fw.forward(m, toks, dtype=torch.float64)
        assert np.abs(a[:budget + 1] - full[:budget + 1]).max() < 1e-9   # nothing evicted yet
        assert np.abs(a[budget + 1:] - full[budget + 1:]).max() > 1e-3   # eviction changes the rest
        big = fw.forward(m, toks, mask=fw.eviction_mask(len(toks), policy, 64, sinks), dtype=torch.float64)
        assert np.abs(big - full).max() < 1e-9


R.check("llama GGUF: sliding-window mask == decode with physical eviction",
        check_mask_equals_eviction, "llama", "sliding-window", 8, 0)
R.check("qwen2 safetensors: streaming-llm mask == decode with physical eviction",
        check_mask_equals_eviction, "qwen2", "streaming-llm", 10, 4)


def check_permutation_is_the_notes():
    w = np.arange(8)[:, None] * np.ones((1, 2))       # one head of 8 rows
    p = fw.permute_for_normal_rope(w, 1)[:, 0]
    # new row 2j + h takes old row h*4 + j
    assert list(p) == [0, 4, 1, 5, 2, 6, 3, 7]


R.check("llama.cpp Q/K permutation: new row 2j+h = old row h*hd/2+j", check_permutation_is_the_notes)

R.finish()
