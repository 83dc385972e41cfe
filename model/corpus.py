#!/usr/bin/python3
"""The model's corpus and its split by file, shared by the trainer and the docs.

    /usr/bin/python3 model/corpus.py --heldout OUT.txt [--force]

writes the whole held-out split (every 50th file of the Linux kernel
documentation sources, in sorted path order, each followed by a blank line:
63 files, 495,720 bytes) to OUT.txt, so `kvevict perplexity` can score the
model on all of it rather than on model/heldout-sample.txt (its first
16 KiB: two documents). Needs Debian's `linux-doc-6.1` package
(`apt-get install linux-doc-6.1`). Standard library only.
"""
import argparse
import glob
import os
import sys

CORPUS_GLOB = "/usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt"
HOLDOUT_EVERY = 50


class CorpusMissing(Exception):
    pass


def corpus_files():
    files = sorted(glob.glob(CORPUS_GLOB, recursive=True))
    if not files:
        raise CorpusMissing(f"no corpus at {CORPUS_GLOB} (apt-get install linux-doc-6.1)")
    return files


def split(files):
    """(train, held) lists of each file's bytes plus a blank line; file i is
    held out when i % 50 == 49 (the 50th, 100th, ... file)."""
    train, held = [], []
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            data = f.read()
        (held if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1 else train).append(data + b"\n\n")
    return train, held


def main():
    ap = argparse.ArgumentParser(description="Write the model's held-out split (the whole of it) to a file.")
    ap.add_argument("--heldout", required=True, metavar="OUT", help="file to write the held-out bytes to")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = ap.parse_args()
    if os.path.exists(args.heldout) and not args.force:
        sys.exit(f"corpus.py: error: {args.heldout} exists (pass --force to replace it)")
    try:
        files = corpus_files()
    except CorpusMissing as e:
        sys.exit(f"corpus.py: error: {e}")
    _, held = split(files)
    data = b"".join(held)
    tmp = args.heldout + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.heldout)
    print(f"{args.heldout}: {len(data):,} bytes from {len(held)} of {len(files)} files")


if __name__ == "__main__":
    main()
