#!/usr/bin/python3
"""PyTorch eager reference: decode speed of a Llama-family model of SmolLM2-135M's shape.

    /usr/bin/python3 scripts/torch_decode_bench.py --dtype float32 --threads 1,2
    /usr/bin/python3 scripts/torch_decode_bench.py --shape tiny --check

The model is written here from the Llama architecture (RMSNorm, RoPE in the
NEOX rotate-half layout, grouped-query attention, SwiGLU MLP, tied output
embedding), with seeded random weights, so the numbers need no download and
measure only the arithmetic and memory traffic that kvevict's decoder does too.
Plain eager torch ops on purpose: this is the baseline a user gets from PyTorch
without compilers. Results go to stdout (JSON or Markdown), progress to stderr.
"""
import argparse
import json
import math
import os
import sys
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F

SHAPES = {
    # HuggingFaceTB/SmolLM2-135M config.json values.
    "smollm2-135m": dict(vocab=49152, layers=30, width=576, heads=9, kv_heads=3, ff=1536,
                         rope_base=100000.0, norm_eps=1e-5),
    # Small enough for tests to run in well under a second.
    "tiny": dict(vocab=256, layers=2, width=64, heads=4, kv_heads=2, ff=128,
                 rope_base=100000.0, norm_eps=1e-5),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SEED = 1234


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_model(shape, dtype, max_positions):
    """Random weights made directly at `dtype`, so a bf16 model never holds an fp32 copy."""
    g = torch.Generator().manual_seed(SEED)
    hd = shape["width"] // shape["heads"]

    def w(*size):
        return torch.empty(*size, dtype=dtype).normal_(0.0, 0.02, generator=g)

    D, F_, H, KV = shape["width"], shape["ff"], shape["heads"], shape["kv_heads"]
    # Norm gains start at one as in Llama; random gains would only rescale activations.
    layers = [SimpleNamespace(attn_norm=torch.ones(D, dtype=dtype), wq=w(H * hd, D),
                              wk=w(KV * hd, D), wv=w(KV * hd, D), wo=w(D, H * hd),
                              ffn_norm=torch.ones(D, dtype=dtype), wg=w(F_, D), wu=w(F_, D),
                              wd=w(D, F_))
              for _ in range(shape["layers"])]
    # RoPE tables computed in float64/float32 then cast: angles reach thousands of
    # radians, which bf16 cannot represent, but cos/sin themselves fit any dtype.
    inv = shape["rope_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1) * inv
    return SimpleNamespace(shape=shape, hd=hd, dtype=dtype, emb=w(shape["vocab"], D),
                           norm=torch.ones(D, dtype=dtype), layers=layers,
                           cos=ang.cos().to(dtype), sin=ang.sin().to(dtype))


def weight_bytes(m):
    """Bytes read per decoded token: every weight once. The embedding row looked up is
    negligible and excluded; the tied output matrix (= embedding) is counted once."""
    tensors = [m.emb, m.norm] + [t for L in m.layers for t in vars(L).values()]
    return sum(t.numel() * t.element_size() for t in tensors)


def new_cache(m, max_positions):
    s = m.shape
    size = (s["layers"], s["kv_heads"], max_positions, m.hd)
    return torch.zeros(size, dtype=m.dtype), torch.zeros(size, dtype=m.dtype)


def rmsnorm(x, gain, eps):
    # Reduce in float32 (as Llama reference code does) so bf16 keeps its accuracy.
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * gain


def rope(x, cos, sin):
    # NEOX layout: the two rotated halves are the first and second half of head_dim.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def forward(m, cache, tokens, pos0):
    """Runs tokens (1-D, T >= 1) at positions pos0.., writes their K/V into the cache
    in place, returns the logits of the last token only (like a decoder that samples)."""
    s, hd = m.shape, m.hd
    T, H, KV = tokens.numel(), s["heads"], s["kv_heads"]
    G, n = H // KV, pos0 + T
    kc, vc = cache
    x = m.emb[tokens]
    cos, sin = m.cos[pos0:n].unsqueeze(1), m.sin[pos0:n].unsqueeze(1)
    # Decode (T == 1) attends to every cached position, so it needs no mask.
    mask = None
    if T > 1:
        mask = torch.arange(n).unsqueeze(0) > torch.arange(pos0, n).unsqueeze(1)  # [T, n]
    scale = 1.0 / math.sqrt(hd)
    for li, L in enumerate(m.layers):
        h = rmsnorm(x, L.attn_norm, s["norm_eps"])
        q = rope(F.linear(h, L.wq).view(T, H, hd), cos, sin) * scale
        k = rope(F.linear(h, L.wk).view(T, KV, hd), cos, sin)
        kc[li, :, pos0:n] = k.transpose(0, 1)
        vc[li, :, pos0:n] = F.linear(h, L.wv).view(T, KV, hd).transpose(0, 1)
        # GQA by reshape, not repeat: query head h uses KV head h // G, so the G query
        # heads of one KV head become G*T rows against that head's cache -- no K/V copy.
        qg = q.view(T, KV, G, hd).permute(1, 2, 0, 3).reshape(KV, G * T, hd)
        sc = torch.matmul(qg, kc[li, :, :n].transpose(1, 2))  # [KV, G*T, n]
        if mask is not None:
            sc = sc.view(KV, G, T, n).masked_fill(mask, float("-inf")).view(KV, G * T, n)
        p = torch.softmax(sc, dim=-1, dtype=torch.float32).to(m.dtype)
        o = torch.matmul(p, vc[li, :, :n]).view(KV, G, T, hd)
        x = x + F.linear(o.permute(2, 0, 1, 3).reshape(T, H * hd), L.wo)
        h = rmsnorm(x, L.ffn_norm, s["norm_eps"])
        x = x + F.linear(F.silu(F.linear(h, L.wg)) * F.linear(h, L.wu), L.wd)
    return F.linear(rmsnorm(x[-1:], m.norm, s["norm_eps"]), m.emb)[0]


def dtype_supported(dtype):
    # torch 1.13's CPU build lacks e.g. float16 addmm; find out before building 135M weights.
    try:
        F.linear(torch.ones(2, 8, dtype=dtype), torch.ones(4, 8, dtype=dtype))
        torch.matmul(torch.ones(2, 2, 8, dtype=dtype), torch.ones(2, 8, 3, dtype=dtype))
        return True
    except RuntimeError:
        return False


def blas_info():
    # Debian's torch runs float32 matmul on the system libblas (often reference netlib,
    # single-threaded) while bf16 goes through oneDNN: record which, so rows compare fairly.
    with open("/proc/self/maps") as f:
        libs = {os.path.realpath(l.split()[-1]) for l in f if "blas" in l.split()[-1]}
    return ",".join(sorted(libs)) or "unknown"


def tokens_for(shape, count, salt):
    g = torch.Generator().manual_seed(SEED + salt)
    return torch.randint(0, shape["vocab"], (count,), generator=g)


def measure(m, args, threads):
    torch.set_num_threads(threads)
    prompt = tokens_for(m.shape, args.prompt, 1)
    steps = tokens_for(m.shape, args.warmup + args.tokens, 2)
    cache = new_cache(m, args.prompt + args.warmup + args.tokens)
    t0 = time.perf_counter()
    forward(m, cache, prompt, 0)
    prefill_s = time.perf_counter() - t0
    for i in range(args.warmup):  # untimed: first calls pay allocator and thread start-up
        forward(m, cache, steps[i:i + 1], args.prompt + i)
    t0 = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.tokens):
        forward(m, cache, steps[i:i + 1], args.prompt + i)
    decode_s = time.perf_counter() - t0
    return {"threads": threads, "decodeTokensPerSecond": args.tokens / decode_s,
            "msPerToken": 1000.0 * decode_s / args.tokens,
            "prefillTokensPerSecond": args.prompt / prefill_s}


def run_check(args):
    """Prefill and decode are two code paths (mask vs none, matrix-matrix vs matrix-vector):
    the last prompt token's logits must agree when the prompt goes either way."""
    m = build_model(SHAPES[args.shape], torch.float32, args.prompt)
    prompt = tokens_for(m.shape, args.prompt, 1)
    a = forward(m, new_cache(m, args.prompt), prompt, 0)
    cache = new_cache(m, args.prompt)
    for i in range(args.prompt):
        b = forward(m, cache, prompt[i:i + 1], i)
    diff, scale = (a - b).abs().max().item(), a.abs().max().item()
    ok = diff <= 1e-4 * scale
    print(f"check {'PASS' if ok else 'FAIL'}: shape={args.shape} prompt={args.prompt} "
          f"max|prefill-decode|={diff:.3e} max|logit|={scale:.3e} (limit 1e-4 relative)")
    return 0 if ok else 1


def positive(name, minimum):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}")
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {v}")
        return v
    return parse


def thread_list(text):
    parts = text.split(",")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--threads must be positive integers like 1,2; got {text!r}")
    return [int(p) for p in parts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=list(DTYPES),
                    help="weight/activation dtype (required unless --check, which uses float32)")
    ap.add_argument("--threads", type=thread_list,
                    help="comma list of torch thread counts, one row each (required unless --check)")
    ap.add_argument("--tokens", type=positive("--tokens", 1), default=64,
                    help="timed decode steps (default 64)")
    ap.add_argument("--warmup", type=positive("--warmup", 0), default=4,
                    help="untimed decode steps before timing (default 4)")
    ap.add_argument("--prompt", type=positive("--prompt", 1), default=256,
                    help="prefill length in tokens (default 256)")
    ap.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m",
                    help="model shape (default smollm2-135m)")
    ap.add_argument("--format", choices=["json", "markdown"], default="json",
                    help="stdout format (default json)")
    ap.add_argument("--check", action="store_true",
                    help="verify prefill logits == token-by-token decode logits (float32) and exit")
    args = ap.parse_args()
    if args.check:
        if args.dtype not in (None, "float32"):
            ap.error("--check always runs in float32; drop --dtype or pass float32")
        with torch.inference_mode():
            return run_check(args)
    if args.dtype is None or args.threads is None:
        ap.error("--dtype and --threads are required (or pass --check)")
    dtype = DTYPES[args.dtype]
    if not dtype_supported(dtype):
        print(f"error: dtype {args.dtype} is not supported for matmul by this torch "
              f"{torch.__version__} CPU build", file=sys.stderr)
        return 2
    shape = SHAPES[args.shape]
    positions = args.prompt + args.warmup + args.tokens
    m = build_model(shape, dtype, positions)
    rows = []
    with torch.inference_mode():
        forward(m, new_cache(m, 2), tokens_for(shape, 2, 3), 0)  # touch every weight once
        for t in args.threads:
            log(f"torch_decode_bench: {args.shape} {args.dtype} threads={t} "
                f"prompt={args.prompt} warmup={args.warmup} tokens={args.tokens}")
            rows.append(measure(m, args, t))
            r = rows[-1]
            log(f"  decode {r['decodeTokensPerSecond']:.2f} tok/s ({r['msPerToken']:.2f} ms/token), "
                f"prefill {r['prefillTokensPerSecond']:.1f} tok/s")
    result = {"shape": dict(shape, name=args.shape, head_dim=m.hd), "dtype": args.dtype,
              "weightBytes": weight_bytes(m), "prompt": args.prompt, "warmup": args.warmup,
              "tokens": args.tokens, "rows": rows, "torch": torch.__version__, "blas": blas_info()}
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print(f"PyTorch {torch.__version__} eager, {args.shape}, {args.dtype}, "
              f"{result['weightBytes'] / 2**20:.1f} MiB of weights, prompt {args.prompt}, "
              f"{args.tokens} timed tokens\n")
        print("| threads | decode tok/s | ms/token | prefill tok/s |\n|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['threads']} | {r['decodeTokensPerSecond']:.2f} | {r['msPerToken']:.2f} "
                  f"| {r['prefillTokensPerSecond']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
