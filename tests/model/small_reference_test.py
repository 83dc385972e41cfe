#!/usr/bin/python3
"""kvevict's logits on kvevict-small.gguf equal the training code's forward pass.

model/train_small.py trained the model and wrote, beside the GGUF, the logits
of its own forward pass (computed from the F16-rounded weights) for a fixed
prompt of 64 tokens starting with BOS (model/kvevict-small-reference.npy; the
tokens are `reference_tokens` in model/kvevict-small.json). This test

  * checks the GGUF holds what train_small.py writes: architecture llama,
    F16 matrices, F32 norms, no output.weight (tied), the config in the card;
  * runs `kvevict logits` on the prompt and compares with the committed
    reference;
  * loads the GGUF's weights into train_small.py's Model (the training code's
    forward pass: RMSNorm, SwiGLU, grouped-query attention, NORMAL-layout
    RoPE) and compares its logits with kvevict's on the reference prompt and
    on a held-out window of 256 tokens (the committed reference must also
    equal this fresh forward pass, so a stale .npy is caught);
  * checks that the prompt's tokens are what model/bpe.py and `kvevict
    tokenize` make of the reference text.

Tolerance: max |kvevict - python| <= TOL_REL * max(1, max |python|). kvevict
computes in float32 and so does the forward pass here (the order of the sums
differs, and the training code scales q before the product where llama.cpp
scales the scores).

Usage: small_reference_test.py KVEVICT [DIR]   (DIR holds kvevict-small.gguf,
       kvevict-small-reference.npy and kvevict-small.json; default model/)"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "model"))
from reference import harness  # noqa: E402

TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "model")
GGUF = os.path.join(DIR, "kvevict-small.gguf")
REF = os.path.join(DIR, "kvevict-small-reference.npy")
CARD = os.path.join(DIR, "kvevict-small.json")
SAMPLE = os.path.join(ROOT, "model", "heldout-sample.txt")
if not os.path.isfile(GGUF):
    # Not trained yet: a skip also when CI=true (ctest model_small_reference).
    print(f"SKIP: {GGUF} does not exist yet (make model-small trains it)")
    sys.exit(harness.SKIP)
harness.need_python_modules("numpy", "torch", "regex")
harness.need_tool(TOOL)
if not os.path.isfile(REF):
    harness.missing(REF, "run make model-small (or model/small_post.sh) first")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import train_small as T  # noqa: E402
from reference import gguf_io as G  # noqa: E402

torch.set_num_threads(1)
TOL_REL = 1e-3
R = harness.Runner()
WORK = tempfile.TemporaryDirectory(prefix="kvevict-small-ref-")
g = G.read_gguf(GGUF)
md = g.metadata
card = json.load(open(CARD)) if os.path.isfile(CARD) else {}
enc = T.Encoder.from_gguf_metadata(md)
cfg = T.config_of_gguf(md)


def file_contract():
    assert md["general.architecture"] == "llama", md["general.architecture"]
    assert md["general.file_type"] == 1, md.get("general.file_type")
    assert "output.weight" not in g, "output.weight present: the model is tied"
    assert md["llama.vocab_size"] == len(md["tokenizer.ggml.tokens"])
    assert md["tokenizer.ggml.pre"] == "llama-bpe" and md["tokenizer.ggml.model"] == "gpt2"
    for t in g.tensors:
        want = G.F16 if len(t.ne) == 2 else G.F32
        assert t.type_id == want, f"{t.name}: {G.type_name(t.type_id)}"
    if card.get("config"):
        assert card["config"] == cfg.as_dict(), (card["config"], cfg.as_dict())
    return f"{len(g.tensors)} tensors, {cfg.layers} layers, width {cfg.width}, vocab {cfg.vocab}"


def kvevict_logits(tokens, name):
    out = os.path.join(WORK.name, name + ".npy")
    harness.run([TOOL, "logits", "--model", GGUF, "--tokens", ",".join(map(str, tokens)), "--out", out, "--force"])
    return np.load(out)


model = T.Model(cfg)
T.load_gguf_weights(model, g)
model.eval()


def python_logits(tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.int64)[None])[0].numpy()


def close(name, got, want):
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    diff = float(np.abs(got.astype(np.float64) - want).max())
    scale = max(1.0, float(np.abs(want).max()))
    print(f"     {name}: max |diff| {diff:.3g} (logit scale {scale:.3g}, tolerance {TOL_REL * scale:.3g}); "
          f"argmax agrees at {int((got.argmax(-1) == want.argmax(-1)).sum())} of {len(want)} positions")
    assert diff <= TOL_REL * scale, f"max |diff| {diff} over {TOL_REL * scale}"


R.check("GGUF holds what train_small.py writes", lambda: print("     " + file_contract()))
ref = np.load(REF)
toks = card.get("reference_tokens") or T.reference_tokens(enc)
R.expect("reference prompt = BOS + model/bpe.py's tokens of REFERENCE_TEXT",
         list(toks) == T.reference_tokens(enc), f"{toks[:8]} vs {T.reference_tokens(enc)[:8]}")


def tool_tokens():
    r = harness.run([TOOL, "tokenize", "--model", GGUF, "--json", "--string", T.REFERENCE_TEXT.decode()])
    got = json.loads(r.stdout)["tokens"][:len(toks)]
    assert got == list(toks), f"kvevict tokenize gives {got[:8]}..., the reference {list(toks)[:8]}..."


R.check("reference prompt = kvevict tokenize's tokens (with BOS)", tool_tokens)
kv = R.check("kvevict logits runs on the reference prompt", kvevict_logits, toks, "ref")
if kv is not None:
    R.check("kvevict logits == committed reference (training code, F16-rounded weights)", close, "committed", kv, ref)
    R.check("kvevict logits == training forward pass on the GGUF's weights", close, "fresh",
            kv, python_logits(toks))
held = [enc.bos] + enc.encode(open(SAMPLE, "rb").read())[:255]
kv2 = R.check("kvevict logits runs on 256 held-out tokens", kvevict_logits, held, "held")
if kv2 is not None:
    R.check("kvevict logits == training forward pass on 256 held-out tokens", close, "held-out", kv2,
            python_logits(held))
R.finish()
