"""The long-range tasks kvevict's model is trained on and tested with, in bytes.

The formats here are the ones `kvevict tasks` builds (docs/tasks.md): a task
sample is natural filler text with one or more *needles* inserted, then a
question whose answer can only be read from a needle. Only the answer bytes
are scored. Keep the two in step: a change here is a change to the benchmark.

Every generator takes a numpy Generator and a filler source and returns
(prompt bytes, answer bytes, needle offsets); the sample is prompt + answer.
"""
import numpy as np

DIGITS = b"0123456789"
LOWER = b"abcdefghijklmnopqrstuvwxyz"
UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ALNUM = LOWER + DIGITS

TASKS = ("passkey", "multikey", "multivalue", "vartrack", "copy")


def rand_bytes(rng, alphabet, n):
    return bytes(alphabet[i] for i in rng.integers(0, len(alphabet), size=n))


def number(rng, lo=5, hi=7):
    n = int(rng.integers(lo, hi + 1))
    first = rand_bytes(rng, DIGITS[1:], 1)
    return first + rand_bytes(rng, DIGITS, n - 1)


def distinct(rng, make, count):
    out = []
    while len(out) < count:
        v = make()
        if v not in out:
            out.append(v)
    return out


NEEDLE_SHIFT = 25  # the most a needle sits past its depth (C++: kNeedleShift)


def needle_cut(filler, depth):
    """Where a needle at `depth` goes: the start of the next word when one
    starts within NEEDLE_SHIFT bytes of round(depth * len(filler)), else
    exactly there, inside a word (tasks.cpp's needle_cut)."""
    at = int(round(depth * len(filler)))
    nxt = filler.find(b" ", at)
    return at if nxt < 0 or nxt - at >= NEEDLE_SHIFT else nxt + 1


def needle_cut_as_trained(filler, depth):
    """The committed model's training placement: with no space near, the
    needle went to the filler's end (kept so model/retrain.sh replays the
    recipe; the benchmark uses needle_cut)."""
    at = int(round(depth * len(filler)))
    nxt = filler.find(b" ", at)
    return len(filler) if nxt < 0 or nxt - at > 24 else nxt + 1


def insert(filler, needles, depths, cut=needle_cut):
    """Puts each needle (then a space) at fraction `depth` of the filler, by
    `cut`; returns the text and each needle's byte offset."""
    cuts = [cut(filler, d) for d in depths]
    order = sorted(range(len(needles)), key=lambda i: (cuts[i], i))
    out, offsets, last = bytearray(), [0] * len(needles), 0
    for i in order:
        out += filler[last:cuts[i]]
        offsets[i] = len(out)
        out += needles[i] + b" "
        last = cuts[i]
    out += filler[last:]
    return bytes(out), offsets


def build(rng, task, length, filler_at, depth=None, as_trained=False):
    """One sample of exactly `length` bytes (prompt + answer).

    filler_at(n) returns n bytes of natural text. depth in [0, 1] places the
    asked needle (multivalue: one of its values; vartrack: the chain's
    start); None draws it uniformly. as_trained=True builds the samples the
    committed model was trained on: a needle with no space near its depth
    went to the filler's end, and vartrack's chain started at min(depth, 0.7)
    (train.py passes it so model/retrain.sh replays the recipe)."""
    if depth is None:
        depth = float(rng.random())
    if task == "passkey":
        key = number(rng)
        needles = [b"The pass key is " + key + b". Remember it. " + key + b" is the pass key."]
        depths = [depth]
        question = b"\nWhat is the pass key? The pass key is "
        answer = key
    elif task == "multikey":
        k = int(rng.integers(2, 5))
        keys = distinct(rng, lambda: rand_bytes(rng, LOWER, 6), k)
        values = distinct(rng, lambda: number(rng, 6, 7), k)
        needles = [b"One of the special magic numbers for " + keys[i] + b" is: " + values[i] + b"."
                   for i in range(k)]
        depths = [depth] + [float(rng.random()) for _ in range(k - 1)]
        question = (b"\nWhat is the special magic number for " + keys[0] +
                    b"? The special magic number for " + keys[0] + b" is: ")
        answer = values[0]
    elif task == "multivalue":
        k = int(rng.integers(2, 4))
        key = rand_bytes(rng, LOWER, 6)
        values = distinct(rng, lambda: number(rng, 6, 7), k)
        needles = [b"One of the special magic numbers for " + key + b" is: " + v + b"." for v in values]
        depths = sorted([depth] + [float(rng.random()) for _ in range(k - 1)])
        question = (b"\nWhat are all the special magic numbers for " + key +
                    b"? The special magic numbers for " + key + b" are: ")
        # In the order they appear; insert() keeps that order for sorted depths.
        answer = b", ".join(values)
    elif task == "vartrack":
        hops = int(rng.integers(1, 4))
        names = distinct(rng, lambda: rand_bytes(rng, UPPER, 5), hops + 1 + 2)
        value, other = distinct(rng, lambda: number(rng, 5, 5), 2)
        chain = [b"VAR " + names[0] + b" = " + value + b"."]
        chain += [b"VAR " + names[i + 1] + b" = VAR " + names[i] + b"." for i in range(hops)]
        decoy = [b"VAR " + names[hops + 1] + b" = " + other + b".",
                 b"VAR " + names[hops + 2] + b" = VAR " + names[hops + 1] + b"."]
        needles = chain + decoy
        first = min(depth, 0.7) if as_trained else depth
        cds = sorted([first] + [float(rng.uniform(first, 1.0)) for _ in range(hops)])
        depths = cds + sorted(float(rng.random()) for _ in range(2))
        question = b"\nWhich variables hold the value " + value + b"? They are: "
        answer = b" ".join(names[:hops + 1])
    elif task == "copy":
        n = int(rng.integers(16, 49))
        code = rand_bytes(rng, ALNUM, n)
        needles = [b"Code: <<" + code + b">>"]
        depths = [depth]
        question = b"\nRepeat the code: <<"
        answer = code
    else:
        raise ValueError(f"unknown task {task!r}")
    tail = question + answer + b">>\n" if task == "copy" else question + answer + b".\n"
    room = length - len(tail) - sum(len(n) + 1 for n in needles)
    if room < 16:
        raise ValueError(f"{task}: {length} bytes cannot hold the needles and the question")
    text, offsets = insert(filler_at(room), needles, depths,
                           needle_cut_as_trained if as_trained else needle_cut)
    prompt = text + question
    sample = prompt + answer + tail[len(question) + len(answer):]
    assert len(sample) == length, (task, len(sample), length)
    return prompt, answer, offsets, sample


def copy_pairs(rng, length, filler_at):
    """Dense copying for the induction bootstrap: random codes, each stated
    and repeated later in the same window. Returns (sample, weights) where the
    repeated codes weigh 3."""
    out, w = bytearray(), []
    while len(out) < length:
        n = int(rng.integers(8, 33))
        code = rand_bytes(rng, ALNUM, n)
        gap = int(rng.integers(0, max(1, length // 3)))
        first = b"<<" + code + b">> "
        filler = filler_at(gap) + b" "
        second = b"<<" + code + b">>\n"
        out += first + filler + second
        w += [1.0] * (len(first) + len(filler)) + [1.0, 1.0] + [3.0] * n + [3.0, 1.0, 1.0]
    return bytes(out[:length]), np.asarray(w[:length], dtype=np.float32)
