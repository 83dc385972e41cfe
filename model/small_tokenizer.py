#!/usr/bin/python3
"""The text kvevict-small's vocabulary is learned from: every 6th file of the
training split (model/corpus.py), in sorted path order, joined as the split
joins them (about 4 MB).

    /usr/bin/python3 model/small_tokenizer.py OUT.txt

then `kvevict random-model --format gguf --tokenizer-text OUT.txt --merges
3838 --vocab 4096 --out TOK.gguf --force` learns the merges (pre-tokenizer
llama-bpe) and TOK.gguf's tokenizer.* keys become the model's.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import corpus_files, split  # noqa: E402

EVERY = 6

if __name__ == "__main__":
    train, _ = split(corpus_files())
    data = b"".join(train[::EVERY])
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, sys.argv[1])
    print(f"{sys.argv[1]}: {len(data):,} bytes from {len(train[::EVERY])} of {len(train)} training files")
