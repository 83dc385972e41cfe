#!/usr/bin/python3
"""model/bpe.py (kvevict-small's Python encoder) gives exactly the token ids
`kvevict tokenize` gives, with the vocabulary of model/kvevict-small.gguf (or
the GGUF named second), on model/heldout-sample.txt and on the task formats'
questions and answers.

Usage: small_tokenizer_test.py KVEVICT [MODEL.gguf] [TEXT...]"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "model"))
from reference import harness  # noqa: E402

TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
MODEL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "model", "kvevict-small.gguf")
TEXTS = sys.argv[3:] or [os.path.join(ROOT, "model", "heldout-sample.txt")]
if not os.path.isfile(MODEL):
    # Not trained yet: a skip also when CI=true (ctest model_small_tokenizer).
    print(f"SKIP: {MODEL} does not exist yet (make model-small trains it)")
    sys.exit(harness.SKIP)
harness.need_python_modules("numpy", "regex")
harness.need_tool(TOOL)

from bpe import Encoder  # noqa: E402
from reference import gguf_io as G  # noqa: E402

R = harness.Runner()
enc = Encoder.from_gguf_metadata(G.read_gguf(MODEL).metadata)


def kvevict_ids(path):
    r = harness.run([TOOL, "tokenize", "--model", MODEL, "--no-bos", "--json", "--text", path])
    return json.loads(r.stdout)["tokens"]


def same(path):
    want = kvevict_ids(path)
    got = enc.encode(open(path, "rb").read())
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise AssertionError(f"{len(got)} vs {len(want)} tokens; first difference at token {at}: "
                             f"python {got[at:at + 5]} kvevict {want[at:at + 5]}")
    return len(want)


for path in TEXTS:
    n = R.check(f"python encoder == kvevict tokenize on {os.path.basename(path)}", same, path)
    if n:
        print(f"     {n} tokens, {os.path.getsize(path)} bytes")

SNIPPETS = [b"\nWhat is the pass key? The pass key is 48213.\n",
            b"One of the special magic numbers for qwerty is: 1234567. ",
            b"\nWhich variables hold the value 12345? They are: ABCDE FGHIJ KLMNO.\n",
            b"\nRepeat the code: <<a8b7c6d5e4f3g2h1>>\n",
            b"  indented    code();\r\n\ttab caf\xc3\xa9 \xe2\x80\x94 don't I'M we'll 3.14159 x=1000000\n\n\n"]
with tempfile.TemporaryDirectory(prefix="kvevict-small-tok-") as d:
    for i, s in enumerate(SNIPPETS):
        p = os.path.join(d, f"s{i}.txt")
        with open(p, "wb") as f:
            f.write(s)
        R.check(f"python encoder == kvevict tokenize on snippet {i}", same, p)
    # the BOS the tokenizer adds
    r = harness.run([TOOL, "tokenize", "--model", MODEL, "--json", "--string", "Hello"])
    R.expect("BOS first", json.loads(r.stdout)["tokens"][0] == enc.bos, r.stdout)
R.finish()
