#!/usr/bin/python3
"""kvevict's SentencePiece (`tokenizer.ggml.model` = "llama") tokenizer equals
SentencePiece itself.

Trains a SentencePiece BPE model here (vocab 500, byte fallback, identity
normalization, extra whitespace kept, the default dummy prefix) on
model/heldout-sample.txt, exports its pieces, scores and types into a
vocab-only GGUF (tests/model/reference/gguf_io.py's writer: tokenizer.ggml.*
keys, no tensors), and compares `kvevict tokenize --json` with
`[bos] + sp.encode(text)` on every line of the sample, its paragraphs, the
whole sample, unicode (accents, CJK, emoji: byte fallback), runs of spaces,
tabs, newlines and near-empty strings; `--no-bos` drops only the BOS; the
JSON's `bytes` is the text's UTF-8 length.

Usage: tokenizer_spm_test.py KVEVICT   (ctest tokenizer_spm)"""
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import harness  # noqa: E402

harness.need_python_modules("sentencepiece", "numpy")
TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
harness.need_tool(TOOL)

import sentencepiece as spm  # noqa: E402

from reference import gguf_io as G  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE = os.path.join(ROOT, "model", "heldout-sample.txt")
VOCAB = 500

R = harness.Runner()
work = tempfile.TemporaryDirectory(prefix="kvevict-spm-")


def train():
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=SAMPLE, model_writer=buf, vocab_size=VOCAB, model_type="bpe", byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=buf.getvalue())


sp = train()


def token_type(i):
    if sp.is_unknown(i):
        return 2
    if sp.is_control(i):
        return 3
    if sp.is_byte(i):
        return 6
    if sp.is_unused(i):
        return 5
    return 1


def export_gguf(path):
    n = sp.get_piece_size()
    kv = [
        ("tokenizer.ggml.model", G.STRING, "llama"),
        ("tokenizer.ggml.tokens", (G.ARRAY, G.STRING), [sp.id_to_piece(i) for i in range(n)]),
        ("tokenizer.ggml.scores", (G.ARRAY, G.FLOAT32), [float(sp.get_score(i)) for i in range(n)]),
        ("tokenizer.ggml.token_type", (G.ARRAY, G.INT32), [token_type(i) for i in range(n)]),
        ("tokenizer.ggml.bos_token_id", G.UINT32, sp.bos_id()),
        ("tokenizer.ggml.eos_token_id", G.UINT32, sp.eos_id()),
        ("tokenizer.ggml.unknown_token_id", G.UINT32, sp.unk_id()),
    ]
    G.write_gguf(path, kv)


GGUF = os.path.join(work.name, "spm-vocab.gguf")
export_gguf(GGUF)


def vocab_sane():
    n = sp.get_piece_size()
    assert n == VOCAB, n
    types = [token_type(i) for i in range(n)]
    assert types.count(6) == 256 and types.count(2) == 1 and types.count(3) == 2, \
        (types.count(6), types.count(2), types.count(3))
    assert sp.id_to_piece(sp.piece_to_id("<0x0A>")) == "<0x0A>"
    f = G.read_gguf(GGUF)
    assert f.tensors == [] and all(k.startswith("tokenizer.ggml.") for k in f.metadata)
    assert sum(1 for i in range(n) if "\u2581" in sp.id_to_piece(i)[1:]) == 0   # no interior ▁: see tokenizer notes


R.check("trained SentencePiece vocab: 500 pieces, 256 byte pieces, exported GGUF has no tensors", vocab_sane)

_n = [0]


def kvevict_tokenize(text, no_bos=False, via_string=False):
    args = [TOOL, "tokenize", "--model", GGUF, "--json"]
    if via_string:
        args += ["--string", text]
    else:
        _n[0] += 1
        p = os.path.join(work.name, f"t{_n[0]}.txt")
        with open(p, "wb") as fh:
            fh.write(text.encode("utf-8"))
        args += ["--text", p]
    if no_bos:
        args.append("--no-bos")
    out = json.loads(harness.run(args).stdout)
    assert isinstance(out.get("tokenizer"), str), f"no tokenizer name in {out}"
    assert out.get("bytes") == len(text.encode("utf-8")), f"bytes {out.get('bytes')} != {len(text.encode())}"
    return out["tokens"]


def expected(text, bos=True):
    return ([sp.bos_id()] if bos else []) + sp.encode(text)


def show(ids):
    return " ".join(sp.id_to_piece(i) if 0 <= i < sp.get_piece_size() else f"#{i}" for i in ids)


def compare_group(name, texts, **kw):
    """One named check over many texts; reports the first few mismatches."""
    def body():
        bad = []
        for t in texts:
            got = kvevict_tokenize(t, **kw)
            want = expected(t, bos=not kw.get("no_bos"))
            if got != want:
                bad.append(f"{t[:60]!r}: kvevict [{show(got)[:200]}] != sentencepiece [{show(want)[:200]}]")
        assert not bad, f"{len(bad)} of {len(texts)} differ; " + " | ".join(bad[:3])
    R.check(f"{name} ({len(texts)} texts)", body)


with open(SAMPLE, encoding="utf-8") as fh:
    sample = fh.read()
lines = sample.split("\n")
paragraphs = [p for p in sample.split("\n\n") if p.strip()]

compare_group("every line of the sample", [ln for ln in lines if ln])
compare_group("paragraphs (with newlines: byte fallback)", paragraphs)
compare_group("the whole sample", [sample])
compare_group("unicode: accents, CJK, emoji, symbols", [
    "café naïve façade résumé", "Ångström Øresund Ærø", "中文分词测试", "日本語のテキスト", "한국어",
    "emoji 🙂🚀 mixed", "🙂", "Ελληνικά και русский", "math ∑ ∫ ≤ ≥ ≠ → ∞", "e\u0301 combining", "\u00a0nbsp",
    "zero\u200bwidth", "tab\tseparated\tvalues", "CAP_SETUID → ✓", "ümlaut Übung", "\U0001f468\u200d\U0001f469\u200d\U0001f467"])
compare_group("spaces: leading, trailing, runs", [
    " leading", "trailing ", "  two leading", "trailing two  ", "a  b   c    d", "     ", " ", "x", "\n",
    "\n\nnewlines\n\n", " \n \n", "end with newline\n", "\t", "a\r\nb", "the the the the", "UID/GID"])
compare_group("near-empty", ["", ".", "a", "▁", "<0x0A>", "<s>", "</s>", "<unk>"])
compare_group("--no-bos", ["SafeSetID is an LSM module", " leading", "", "中文"], no_bos=True)
compare_group("--string", ["SafeSetID is an LSM module that gates the setid family", "café 🙂", "a  b"],
              via_string=True)

work.cleanup()
R.finish()
