#!/usr/bin/python3
"""Train kvevict's small byte-level model, once, on 2 CPU cores.

    /usr/bin/python3 model/train.py [--steps N] [--out model/]

What it does (deterministic from --seed on a given machine and thread count):
  1. reads the corpus: the reStructuredText sources of the Linux kernel
     documentation shipped in Debian's `linux-doc-6.1` package
     (/usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt, 24 MB of
     English technical prose, GPL-2.0);
  2. splits it by file: every 50th file in sorted path order is held out;
  3. trains a 4-layer decoder-only transformer over bytes (RoPE, RMSNorm,
     GELU MLP, tied embeddings, context 1024);
  4. writes model/kvevict-tiny.kvm (weights, format in model/FORMAT.md),
     model/reference.npy (logits for a fixed prompt, used by the C++ tests),
     model/heldout-sample.txt (the first 16 KiB of held-out text),
     model/training-log.csv (loss curve) and model/card.json (the numbers the
     model card quotes).

Not part of CI: it takes about an hour. The weights it wrote are committed.
"""
import argparse
import csv
import json
import math
import os
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402  (model/tasks.py: the task formats, shared with the benchmark)

from corpus import HOLDOUT_EVERY, CorpusMissing, corpus_files, split  # noqa: E402  (model/corpus.py: the split)

REFERENCE_PROMPT = (b"The kernel keeps a cache of recently used pages so that "
                    b"a second read of the same file does not touch the disk.")


class Config:
    def __init__(self, **kw):
        self.vocab = 256
        self.layers = 4
        self.heads = 4
        self.kv_heads = 2  # grouped-query attention: query heads h uses KV head h // (heads / kv_heads)
        self.width = 128
        self.ff = 512
        self.context = 1024
        self.rope_base = 10000.0
        self.norm_eps = 1e-5
        self.__dict__.update(kw)

    @property
    def head_dim(self):
        return self.width // self.heads


def rope_tables(cfg, length):
    # GPT-NeoX layout: dimension i pairs with i + head_dim/2.
    half = cfg.head_dim // 2
    inv = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / cfg.head_dim)
    ang = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    # x: [B, H, T, D]; cos/sin: [T, D/2]
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.attn_norm = RMSNorm(cfg.width, cfg.norm_eps)
        self.qkv = nn.Linear(cfg.width, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        self.proj = nn.Linear(cfg.width, cfg.width, bias=False)
        self.mlp_norm = RMSNorm(cfg.width, cfg.norm_eps)
        self.up = nn.Linear(cfg.width, cfg.ff, bias=False)
        self.down = nn.Linear(cfg.ff, cfg.width, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        H, G, D = self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim
        q, k, v = self.qkv(self.attn_norm(x)).split([H * D, G * D, G * D], dim=-1)
        # Scaling q rather than the T x T scores saves a pass over the largest
        # tensor; the C++ engine does the same so rounding matches.
        q = apply_rope(q.view(B, T, H, D).transpose(1, 2), cos, sin) * (1.0 / math.sqrt(D))
        k = apply_rope(k.view(B, T, G, D).transpose(1, 2), cos, sin)
        v = v.view(B, T, G, D).transpose(1, 2)
        if G != H:  # query heads share their group's keys and values
            k = k.repeat_interleave(H // G, dim=1)
            v = v.repeat_interleave(H // G, dim=1)
        att = torch.softmax((q @ k.transpose(-1, -2)).masked_fill_(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.final_norm = RMSNorm(cfg.width, cfg.norm_eps)
        cos, sin = rope_tables(cfg, cfg.context)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("proj.weight") or name.endswith("down.weight"):
                    std = 0.02 / math.sqrt(2 * cfg.layers)
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        T = tokens.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos[:T], self.sin[:T], mask)
        return self.final_norm(x) @ self.embed.weight.t()


# --- the weights file (model/FORMAT.md) ------------------------------------
MAGIC = b"KVEVMODL"
FORMAT_VERSION = 2  # 2: KV heads in the first reserved word (grouped-query attention)


def tensor_list(model):
    cfg = model.cfg
    out = [("embed", model.embed.weight)]
    for i, b in enumerate(model.blocks):
        out += [(f"blocks.{i}.attn_norm", b.attn_norm.weight),
                (f"blocks.{i}.qkv", b.qkv.weight),
                (f"blocks.{i}.proj", b.proj.weight),
                (f"blocks.{i}.mlp_norm", b.mlp_norm.weight),
                (f"blocks.{i}.up", b.up.weight),
                (f"blocks.{i}.down", b.down.weight)]
    out.append(("final_norm", model.final_norm.weight))
    return out


def write_weights(model, path):
    cfg = model.cfg
    body = bytearray()
    body += struct.pack("<8I", cfg.vocab, cfg.layers, cfg.heads, cfg.width, cfg.ff,
                        cfg.context, cfg.kv_heads, 0)
    body += struct.pack("<2f", cfg.rope_base, cfg.norm_eps)
    tensors = tensor_list(model)
    body += struct.pack("<I", len(tensors))
    for name, t in tensors:
        data = t.detach().contiguous().float().numpy()
        enc = name.encode()
        body += struct.pack("<I", len(enc)) + enc
        body += struct.pack("<I", data.ndim) + struct.pack(f"<{data.ndim}I", *data.shape)
        body += data.astype("<f4").tobytes()
    header = MAGIC + struct.pack("<IQ", FORMAT_VERSION, len(body))
    blob = header + bytes(body)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob + struct.pack("<I", zlib.crc32(blob) & 0xFFFFFFFF))
    os.replace(tmp, path)


def read_tensors(path):
    """Every tensor of a .kvm file (version 1 or 2) by name, and its configuration words."""
    blob = open(path, "rb").read()
    if blob[:8] != MAGIC or zlib.crc32(blob[:-4]) & 0xFFFFFFFF != struct.unpack("<I", blob[-4:])[0]:
        sys.exit(f"train.py: {path}: not an intact .kvm file")
    words = struct.unpack_from("<8I", blob, 20)
    at = 8 + 4 + 8 + 8 * 4 + 2 * 4
    (count,) = struct.unpack_from("<I", blob, at)
    at += 4
    out = {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", blob, at)
        name = blob[at + 4: at + 4 + n].decode()
        at += 4 + n
        (ndim,) = struct.unpack_from("<I", blob, at)
        shape = struct.unpack_from(f"<{ndim}I", blob, at + 4)
        at += 4 + 4 * ndim
        size = int(np.prod(shape))
        out[name] = np.frombuffer(blob, dtype="<f4", count=size, offset=at).reshape(shape).copy()
        at += 4 * size
    return words, out


def read_weights(model, path):
    """Loads a .kvm into `model`. A file with one KV head per query head (the
    version-1 model) initialises a grouped model too: KV head g starts from
    query head g * heads / kv_heads's keys and values."""
    cfg = model.cfg
    _, saved = read_tensors(path)
    tensors = dict(tensor_list(model))
    for name, data in saved.items():
        target = tensors[name]
        if name.endswith(".qkv") and tuple(data.shape) != tuple(target.shape):
            H, G, D, W = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.width
            if data.shape != (3 * W, W):
                sys.exit(f"train.py: {path}: {name} has shape {data.shape}, cannot initialise {tuple(target.shape)}")
            q, k, v = data[:W], data[W:2 * W], data[2 * W:]
            pick = [g * (H // G) for g in range(G)]
            k = np.concatenate([k[h * D:(h + 1) * D] for h in pick])
            v = np.concatenate([v[h * D:(h + 1) * D] for h in pick])
            data = np.concatenate([q, k, v])
        with torch.no_grad():
            target.copy_(torch.from_numpy(data))


def write_npy(path, array):
    array = np.ascontiguousarray(array, dtype="<f4")
    np.save(path, array)


# --- data --------------------------------------------------------------------
def load_corpus():
    try:
        files = corpus_files()
    except CorpusMissing as e:
        sys.exit(f"train.py: {e}")
    train, held = split(files)
    return files, np.frombuffer(b"".join(train), dtype=np.uint8), \
        np.frombuffer(b"".join(held), dtype=np.uint8)


def evaluate(model, data, context, max_windows, batch=8):
    """Bits per byte over consecutive, non-overlapping windows of `context`."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        n = min(max_windows, (len(data) - 1) // context)
        for first in range(0, n, batch):
            rows = [data[w * context: w * context + context + 1]
                    for w in range(first, min(n, first + batch))]
            chunk = torch.from_numpy(np.stack(rows).astype(np.int64))
            logits = model(chunk[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, 256), chunk[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += chunk[:, 1:].numel()
    model.train()
    return total / count / math.log(2.0)  # bits per byte


class Batches:
    """Training samples by kind, from one seeded generator (saved in checkpoints)."""

    # Mixture shares (phase kind "mix"): natural text keeps the model a
    # language model; dense copy pairs keep induction heads sharp; the tasks
    # teach it to look far back for a stated fact.
    MIX = (("text", 0.35), ("copypairs", 0.15), ("passkey", 0.16), ("multikey", 0.12),
           ("multivalue", 0.08), ("vartrack", 0.06), ("copy", 0.08))
    ANSWER_WEIGHT = 4.0

    def __init__(self, rng, text):
        self.rng, self.text = rng, text

    def filler(self, n):
        s = int(self.rng.integers(0, len(self.text) - n - 1))
        return bytes(self.text[s:s + n])

    def sample(self, kind, length):
        n = length + 1
        if kind == "text":
            return np.frombuffer(self.filler(n), dtype=np.uint8), np.ones(n, np.float32)
        if kind == "copypairs":
            data, w = tasks.copy_pairs(self.rng, n, self.filler)
            return np.frombuffer(data, dtype=np.uint8), w
        prompt, answer, _, data = tasks.build(self.rng, kind, n, self.filler, as_trained=True)
        w = np.ones(n, np.float32)
        w[len(prompt):len(prompt) + len(answer) + 1] = self.ANSWER_WEIGHT
        return np.frombuffer(data, dtype=np.uint8), w

    def batch(self, kind, count, length):
        kinds = [k for k, _ in self.MIX]
        p = np.array([s for _, s in self.MIX])
        rows, weights = [], []
        for _ in range(count):
            k = kind if kind != "mix" else kinds[int(self.rng.choice(len(kinds), p=p / p.sum()))]
            r, w = self.sample(k, length)
            rows.append(r)
            weights.append(w)
        x = torch.from_numpy(np.stack(rows).astype(np.int64))
        # weights[i] scores predicting byte i, which is target i - 1
        wt = torch.from_numpy(np.stack(weights)[:, 1:])
        return x, wt


def task_accuracy(model, held, task, length, samples, seed):
    """Exact match with the full cache, under teacher forcing: every answer
    byte must be the model's argmax given the true bytes before it (which is
    what greedy decoding produces). Needles at evenly spread depths; filler
    from the held-out split."""
    rng = np.random.default_rng(seed)
    src = Batches(rng, held)
    hits = 0
    model.eval()
    with torch.no_grad():
        for first in range(0, samples, 8):
            rows, spans = [], []
            for i in range(first, min(samples, first + 8)):
                prompt, answer, _, data = tasks.build(rng, task, length, src.filler,
                                                      depth=(i + 0.5) / samples, as_trained=True)
                rows.append(np.frombuffer(data, dtype=np.uint8))
                spans.append((len(prompt), len(answer)))
            x = torch.from_numpy(np.stack(rows).astype(np.int64))
            pred = model(x[:, :-1]).argmax(-1)
            for r, (p, n) in enumerate(spans):
                hits += bool((pred[r, p - 1:p - 1 + n] == x[r, p:p + n]).all())
    model.train()
    return hits / samples


def expand_phases(text, cfg):
    """STEPS:KIND:BATCH:LENGTH,... as one (kind, batch, length) per step."""
    phases = []
    for part in text.split(","):
        try:
            steps_, kind_, batch_, length_ = part.split(":")
            steps_, batch_, length_ = int(steps_), int(batch_), int(length_)
        except ValueError:
            sys.exit(f"train.py: phase {part!r} is not STEPS:KIND:BATCH:LENGTH")
        if length_ > cfg.context:
            sys.exit(f"train.py: phase {part}: length {length_} is over the context {cfg.context}")
        if kind_ not in ("text", "copypairs", "mix"):
            sys.exit(f"train.py: phase {part}: kind {kind_!r} is not text, copypairs or mix")
        phases += [(kind_, batch_, length_)] * steps_
    return phases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # STEPS:KIND:BATCH:LENGTH per phase. kind: text (natural text only),
    # copy (dense copy pairs: the induction bootstrap), mix (text, copy pairs
    # and the long-range tasks of model/tasks.py).
    ap.add_argument("--phases", default="350:copypairs:32:128,1200:mix:8:512,300:mix:8:1024")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--init", help="start from this .kvm (a version-1 file initialises the grouped heads)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--checkpoint-every", type=int, default=25,
                    help="steps between checkpoints (OUT/checkpoint.pt); a rerun resumes from it")
    ap.add_argument("--final-windows", type=int, default=10 ** 9,
                    help="held-out windows in the final evaluation (default: all)")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="checkpoint and stop after this step (0: run the plan to its end); with a later run "
                         "under another plan this replays a plan that changed mid-way (model/README.md)")
    ap.add_argument("--final-samples", type=int, default=96,
                    help="task samples per task and length in the final full-cache accuracy")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    cfg = Config()
    files, train, held = load_corpus()
    print(f"corpus: {len(files)} files, train {len(train)} bytes, held-out {len(held)} bytes",
          flush=True)
    model = Model(cfg)
    if args.init:
        read_weights(model, args.init)
        print(f"initialised from {args.init}", flush=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters", flush=True)

    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    phases = expand_phases(args.phases, cfg)
    args.steps = len(phases)
    warmup = max(1, min(50, args.steps // 30))

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        p = (step - warmup) / max(1, args.steps - warmup)
        return args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * p))

    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    log_path = os.path.join(args.out, "training-log.csv")
    begin, running, elapsed, history = 0, None, 0.0, []
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path)
        # A new plan may continue a checkpoint when the steps already taken
        # are the same in both (the learning-rate schedule follows the new
        # plan's length from here on).
        done_before = expand_phases(state["phases"], cfg)[:state["step"]]
        if done_before != phases[:state["step"]] or state["seed"] != args.seed:
            sys.exit(f"train.py: {ckpt_path} was written for phases {state['phases']} seed "
                     f"{state['seed']}, whose first {state['step']} steps differ from this plan's; "
                     f"move it away to start afresh")
        if state["phases"] != args.phases:
            print(f"continuing {state['phases']} as {args.phases}", flush=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        begin, running, elapsed = state["step"], state["running"], state["elapsed"]
        history = state.get("history", [state["phases"]])
        print(f"resumed from {ckpt_path} at step {begin}", flush=True)
    elif os.path.exists(log_path):
        os.replace(log_path, log_path + ".old")
    new_log = not os.path.exists(log_path)
    log = open(log_path, "a", newline="")
    writer = csv.writer(log)
    if new_log:
        writer.writerow(["step", "seconds", "kind", "length", "train_bits_per_byte",
                         "heldout_bits_per_byte", "passkey_512", "passkey_1024", "multikey_1024"])

    def checkpoint(step):
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                 "torch_rng": torch.get_rng_state(), "step": step, "running": running,
                 "elapsed": elapsed + time.time() - start, "phases": args.phases, "seed": args.seed,
                 "history": history + [args.phases] if not history or history[-1] != args.phases else history}
        torch.save(state, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    batches = Batches(rng, train)
    start = time.time()
    for step in range(begin, args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        kind, nb, L = phases[step]
        x, w = batches.batch(kind, nb, L)
        logits = model(x[:, :-1])
        per = F.cross_entropy(logits.reshape(-1, cfg.vocab), x[:, 1:].reshape(-1), reduction="none")
        loss = (per * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bits = per.mean().item() / math.log(2.0)
        running = bits if running is None else 0.98 * running + 0.02 * bits
        done = step + 1
        el = elapsed + time.time() - start
        if done % 25 == 0 or done == args.steps:
            rate = (time.time() - start) / (done - begin)
            print(f"step {done}/{args.steps} ({kind} {nb}x{L})  train {running:.3f} bits/byte  "
                  f"{el:.0f} s  eta {rate * (args.steps - done):.0f} s", flush=True)
        if done % args.eval_every == 0 or done == args.steps:
            hb = evaluate(model, held, cfg.context, 8)
            pk512 = task_accuracy(model, held, "passkey", 512, 24, 7)
            pk = task_accuracy(model, held, "passkey", cfg.context, 24, 8)
            mk = task_accuracy(model, held, "multikey", cfg.context, 24, 9)
            writer.writerow([done, f"{el:.1f}", kind, L, f"{running:.4f}", f"{hb:.4f}",
                             f"{pk512:.3f}", f"{pk:.3f}", f"{mk:.3f}"])
            log.flush()
            print(f"  held-out {hb:.4f} bits/byte (8 windows); passkey@512 {pk512:.2f} "
                  f"passkey@1024 {pk:.2f} multikey@1024 {mk:.2f}", flush=True)
            write_weights(model, os.path.join(args.out, "kvevict-tiny.kvm"))
        if done % args.checkpoint_every == 0 or done == args.steps or done == args.stop_at:
            checkpoint(done)
        if done == args.stop_at:
            print(f"stopped at step {done} (--stop-at); rerun to continue", flush=True)
            return
    log.close()
    train_seconds = elapsed + time.time() - start

    full_heldout = evaluate(model, held, cfg.context, args.final_windows)
    write_weights(model, os.path.join(args.out, "kvevict-tiny.kvm"))
    model.eval()
    with torch.no_grad():
        prompt = torch.tensor(list(REFERENCE_PROMPT), dtype=torch.int64)[None]
        write_npy(os.path.join(args.out, "reference.npy"), model(prompt)[0].numpy())
    with open(os.path.join(args.out, "reference-prompt.txt"), "wb") as f:
        f.write(REFERENCE_PROMPT)
    with open(os.path.join(args.out, "heldout-sample.txt"), "wb") as f:
        f.write(bytes(held[:16384]))
    accuracy = {f"{t}_{n}": task_accuracy(model, held, t, n, args.final_samples, 100 + i)
                for i, (t, n) in enumerate((t, n) for t in tasks.TASKS for n in (512, 1024))}
    card = {"parameters": params, "steps": args.steps, "phases": args.phases,
            "plans": history if history else [args.phases], "lr": args.lr,
            "min_lr": args.min_lr, "init": os.path.basename(args.init) if args.init else None,
            "seed": args.seed, "threads": args.threads, "train_bytes": int(len(train)),
            "heldout_bytes": int(len(held)), "files": len(files),
            "heldout_files": len(files) // HOLDOUT_EVERY,
            "heads": cfg.heads, "kv_heads": cfg.kv_heads,
            "train_seconds": round(train_seconds, 1),
            "heldout_bits_per_byte": round(full_heldout, 4),
            "full_cache_accuracy_teacher_forced": accuracy,
            "torch": torch.__version__}
    with open(os.path.join(args.out, "card.json"), "w") as f:
        json.dump(card, f, indent=2)
    print(json.dumps(card, indent=2))


if __name__ == "__main__":
    main()
