"""A Llama-family forward pass (llama, qwen2, mistral) in torch, from the
architecture definition (notes §1.4-§1.6, §3, §5.3-§5.4), independent of
kvevict's C++.

  model = load_model(path)            # a .gguf file or an HF safetensors folder
  logits = forward(model, token_ids)  # ndarray [T, vocab] (float32 by default): the logits after each token
  logits = forward(model, ids, mask=eviction_mask(len(ids), "streaming-llm", budget=16, sinks=4))

The model's configuration comes from the file: GGUF `{arch}.*` keys and
tensors, or config.json. Weights are kept under GGUF names (blk.N.attn_q.weight,
...) in PyTorch order ([out, in]); safetensors names are mapped to them.

RoPE: NORMAL (adjacent pairs) for GGUF llama/mistral, NEOX (half split, HF
rotate_half) for GGUF qwen2 and every safetensors model; theta_i =
pos * base^(-2i/n_rot), divided by rope_freqs.weight[i] (GGUF) or by the HF
llama3 rule's divisor (config.json rope_scaling).
"""
import json
import math
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from . import gguf_io, safetensors_io


@dataclass
class Config:
    arch: str
    source: str                  # "gguf" or "safetensors"
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    eps: float
    rope_base: float
    n_rot: int
    rope_mode: str               # "normal" or "neox"
    freq_divisors: Optional[np.ndarray] = None   # [n_rot/2], or None
    tied: bool = False
    sliding_window: Optional[int] = None         # an HF config's active sliding window, if any
    extra: dict = field(default_factory=dict)


@dataclass
class Model:
    config: Config
    weights: dict                # GGUF names -> float32 ndarray, PyTorch order

    def w(self, name):
        return self.weights[name]


ROPE_MODE_GGUF = {"llama": "normal", "mistral": "normal", "qwen2": "neox"}


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

def load_model(path):
    if os.path.isdir(path) or path.endswith(".safetensors"):
        return load_safetensors(path)
    return load_gguf(path)


def _int(md, key, default=None):
    if key in md:
        return int(md[key])
    if default is None:
        raise KeyError(f"GGUF key {key} missing")
    return default


def config_from_gguf(f):
    md = f.metadata
    arch = md["general.architecture"]
    if arch not in ROPE_MODE_GGUF:
        raise NotImplementedError(f"architecture {arch}")
    p = arch + "."
    n_embd = _int(md, p + "embedding_length")
    n_head = _int(md, p + "attention.head_count")
    head_dim = _int(md, p + "attention.key_length", n_embd // n_head)
    if _int(md, p + "attention.value_length", head_dim) != head_dim:
        raise NotImplementedError("value_length != key_length")
    scaling = md.get(p + "rope.scaling.type", "none")
    if scaling not in ("none", ""):
        raise NotImplementedError(f"rope scaling {scaling}")
    emb = f.by_name["token_embd.weight"]
    divisors = f.tensor("rope_freqs.weight").astype(np.float64) if "rope_freqs.weight" in f else None
    return Config(
        arch=arch, source="gguf",
        n_layer=_int(md, p + "block_count"), n_embd=n_embd, n_head=n_head,
        n_head_kv=_int(md, p + "attention.head_count_kv", n_head), head_dim=head_dim,
        n_ff=_int(md, p + "feed_forward_length"), n_vocab=int(emb.ne[1]),
        n_ctx=_int(md, p + "context_length"),
        eps=float(md[p + "attention.layer_norm_rms_epsilon"]),
        rope_base=float(md.get(p + "rope.freq_base", 10000.0)),
        n_rot=_int(md, p + "rope.dimension_count", head_dim),
        rope_mode=ROPE_MODE_GGUF[arch], freq_divisors=divisors,
        tied="output.weight" not in f)


def load_gguf(path):
    f = gguf_io.read_gguf(path)
    cfg = config_from_gguf(f)
    weights = {t.name: f.tensor(t.name) for t in f.tensors}
    return Model(cfg, weights)


def llama3_divisors(base, dim, factor, low, high, original_context):
    """HF's llama3 rope rule (notes §3.3) as the divisor of each inverse frequency."""
    out = np.empty(dim // 2)
    low_wavelen = original_context / low
    high_wavelen = original_context / high
    for i in range(dim // 2):
        f = base ** (-2.0 * i / dim)
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out[i] = 1.0
        elif wavelen > low_wavelen:
            out[i] = factor
        else:
            s = (original_context / wavelen - low) / (high - low)
            out[i] = 1.0 / ((1 - s) / factor + s)
    return out


HF_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral"}


def config_from_hf(cfg, tensors):
    arch = cfg.get("model_type") or HF_ARCHS[cfg["architectures"][0]]
    if arch not in ("llama", "qwen2", "mistral"):
        raise NotImplementedError(f"model_type {arch}")
    n_embd = int(cfg["hidden_size"])
    n_head = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or n_embd // n_head)
    base = float(cfg.get("rope_theta", 10000.0))
    divisors = None
    rs = cfg.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "llama3":
            divisors = llama3_divisors(base, head_dim, float(rs["factor"]), float(rs["low_freq_factor"]),
                                       float(rs["high_freq_factor"]), float(rs["original_max_position_embeddings"]))
        elif kind not in (None, "default"):
            raise NotImplementedError(f"rope_scaling {kind}")
    tied = bool(cfg.get("tie_word_embeddings", False))
    if "lm_head.weight" not in tensors and not tied:
        raise ValueError("no lm_head.weight and tie_word_embeddings is false")
    sw = None
    if arch == "qwen2" and cfg.get("use_sliding_window"):
        sw = cfg.get("sliding_window")
    elif arch == "mistral":
        sw = cfg.get("sliding_window")
    return Config(
        arch=arch, source="safetensors",
        n_layer=int(cfg["num_hidden_layers"]), n_embd=n_embd, n_head=n_head,
        n_head_kv=int(cfg.get("num_key_value_heads") or n_head), head_dim=head_dim,
        n_ff=int(cfg["intermediate_size"]), n_vocab=int(tensors["model.embed_tokens.weight"].shape[0]),
        n_ctx=int(cfg.get("max_position_embeddings", 0)), eps=float(cfg["rms_norm_eps"]),
        rope_base=base, n_rot=head_dim, rope_mode="neox", freq_divisors=divisors,
        tied=tied, sliding_window=int(sw) if sw else None)


_HF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate_proj.bias": "ffn_gate.bias", "mlp.up_proj.bias": "ffn_up.bias", "mlp.down_proj.bias": "ffn_down.bias",
}
_HF_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}


def hf_to_gguf_name(name):
    if name in _HF_TOP:
        return _HF_TOP[name]
    parts = name.split(".")
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        if rest in _HF_LAYER:
            return f"blk.{parts[2]}.{_HF_LAYER[rest]}"
    raise KeyError(f"unknown HF tensor {name}")


def load_safetensors(path):
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    tensors, _ = safetensors_io.read_model(path)
    cfg = config_from_hf(hf, tensors)
    weights = {hf_to_gguf_name(k): v for k, v in tensors.items()}
    if cfg.tied:
        weights.pop("output.weight", None)     # HF ties lm_head to the embedding
    return Model(cfg, weights)


# --------------------------------------------------------------------------
# Eviction masks
# --------------------------------------------------------------------------

def held_positions(n_tokens, policy=None, budget=None, sinks=0):
    """For each step t, the positions the query of token t attends to: the
    positions the cache held after step t-1, plus t. Simulates the decoder's
    order (attend, admit t, evict down to budget) with the policies' own rules
    (docs/policies/sliding-window.md, streaming-llm.md): sliding-window pops
    the oldest until at most `budget` are held; streaming-llm never evicts a
    position < sinks and pops the oldest other one."""
    held = []
    out = []
    for t in range(n_tokens):
        out.append(held + [t])
        held.append(t)
        if policy is None:
            continue
        if policy == "sliding-window":
            while len(held) > budget:
                held.pop(0)
        elif policy == "streaming-llm":
            if not 0 <= sinks < budget:
                raise ValueError("streaming-llm needs 0 <= sinks < budget")
            while len(held) > budget:
                victim = next(i for i, p in enumerate(held) if p >= sinks)
                held.pop(victim)
        else:
            raise ValueError(f"no mask for policy {policy}")
    return out


def eviction_mask(n_tokens, policy=None, budget=None, sinks=0):
    """bool [T, T]: mask[t, s] is true when token t's query attends to position s."""
    m = torch.zeros((n_tokens, n_tokens), dtype=torch.bool)
    for t, ps in enumerate(held_positions(n_tokens, policy, budget, sinks)):
        m[t, ps] = True
    return m


# --------------------------------------------------------------------------
# The forward pass
# --------------------------------------------------------------------------

def rope_angles(cfg, positions):
    """theta[pos, i] = pos * base^(-2i/n_rot) / divisor[i], in float64."""
    i = np.arange(cfg.n_rot // 2, dtype=np.float64)
    inv = cfg.rope_base ** (-2.0 * i / cfg.n_rot)
    if cfg.freq_divisors is not None:
        if len(cfg.freq_divisors) != cfg.n_rot // 2:
            raise ValueError(f"{len(cfg.freq_divisors)} rope frequency factors for n_rot {cfg.n_rot}")
        inv = inv / np.asarray(cfg.freq_divisors, dtype=np.float64)
    return np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]


def apply_rope(x, cos, sin, n_rot, mode):
    """x [T, heads, hd]; cos/sin [T, n_rot/2]. Rotates the first n_rot dims."""
    c = cos[:, None, :]
    s = sin[:, None, :]
    rot, rest = x[..., :n_rot], x[..., n_rot:]
    if mode == "normal":
        pairs = rot.reshape(*rot.shape[:-1], n_rot // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = torch.stack([a * c - b * s, a * s + b * c], dim=-1).reshape(rot.shape)
    elif mode == "neox":
        a, b = rot[..., :n_rot // 2], rot[..., n_rot // 2:]
        out = torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    else:
        raise ValueError(mode)
    return torch.cat([out, rest], dim=-1)


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def forward(model, tokens, mask=None, dtype=torch.float32, rope_mode=None):
    """Logits after each token, ndarray [T, vocab] in dtype. mask: bool [T, T]
    (eviction_mask), default causal. rope_mode overrides the file's (tests)."""
    cfg = model.config
    T = len(tokens)
    if cfg.sliding_window is not None and cfg.sliding_window < T:
        raise NotImplementedError(f"the config's sliding window {cfg.sliding_window} binds at {T} tokens")
    if mask is None:
        mask = torch.tril(torch.ones((T, T), dtype=torch.bool))
    if bool((mask & ~torch.tril(torch.ones((T, T), dtype=torch.bool))).any()):
        raise ValueError("mask attends to the future")
    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in model.weights.items()}
    mode = rope_mode or cfg.rope_mode
    hd, nh, nkv = cfg.head_dim, cfg.n_head, cfg.n_head_kv
    group = nh // nkv
    theta = rope_angles(cfg, np.arange(T))
    cos = torch.from_numpy(np.cos(theta)).to(dtype)
    sin = torch.from_numpy(np.sin(theta)).to(dtype)
    ids = torch.as_tensor(list(tokens), dtype=torch.long)
    x = W["token_embd.weight"][ids]
    scale = 1.0 / math.sqrt(hd)
    kv_of_head = torch.arange(nh) // group
    neg = torch.tensor(float("-inf"), dtype=dtype)

    def lin(h, name):
        y = h @ W[name + ".weight"].T
        if name + ".bias" in W:
            y = y + W[name + ".bias"]
        return y

    for layer in range(cfg.n_layer):
        p = f"blk.{layer}."
        h = rms_norm(x, W[p + "attn_norm.weight"], cfg.eps)
        q = lin(h, p + "attn_q").reshape(T, nh, hd)
        k = lin(h, p + "attn_k").reshape(T, nkv, hd)
        v = lin(h, p + "attn_v").reshape(T, nkv, hd)
        q = apply_rope(q, cos, sin, cfg.n_rot, mode)
        k = apply_rope(k, cos, sin, cfg.n_rot, mode)
        kh = k[:, kv_of_head, :]                          # [T, nh, hd]: query head h uses KV head h // group
        vh = v[:, kv_of_head, :]
        scores = torch.einsum("thd,shd->hts", q, kh) * scale
        scores = torch.where(mask[None, :, :], scores, neg)
        probs = torch.softmax(scores, dim=-1)
        att = torch.einsum("hts,shd->thd", probs, vh).reshape(T, nh * hd)
        x = x + lin(att, p + "attn_output")
        h = rms_norm(x, W[p + "ffn_norm.weight"], cfg.eps)
        gate = lin(h, p + "ffn_gate")
        up = lin(h, p + "ffn_up")
        x = x + lin(torch.nn.functional.silu(gate) * up, p + "ffn_down")
    x = rms_norm(x, W["output_norm.weight"], cfg.eps)
    out_w = W["output.weight"] if "output.weight" in W else W["token_embd.weight"]
    return (x @ out_w.T).numpy()


def permute_for_normal_rope(w, n_heads):
    """llama.cpp's converter permutation (notes §3.2): within each head of hd
    rows, new row 2j + h takes old row h*hd/2 + j. Works on [rows, in] weights
    and [rows] biases."""
    w = np.asarray(w)
    rows = w.shape[0]
    hd = rows // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(rows, *rest)
