#!/usr/bin/python3
"""model/tasks.py: the benchmark's needle placement (the same rule as
tasks.cpp's needle_cut) puts every asked needle 0 ... 25 bytes past its depth
and starts vartrack's chain at the depth asked; the training placement the
committed model saw is kept apart (as_trained=True) and differs exactly where
the benchmark's was wrong."""
import os
import sys
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "model"))
import tasks  # noqa: E402

TEXT = open(os.path.join(ROOT, "model", "heldout-sample.txt"), "rb").read()


def passkey_offsets(as_trained, samples=1000):
    """(offset past the depth point, depth, at the filler's end) of each
    passkey needle of a grid."""
    rng = np.random.default_rng(1)

    def filler(n):
        s = int(rng.integers(0, len(TEXT) - n - 1))
        return TEXT[s:s + n]

    out = []
    for i in range(samples):
        depth = (i % 10 + 0.5) / 10
        prompt, answer, offsets, _ = tasks.build(rng, "passkey", 1024, filler, depth=depth,
                                                 as_trained=as_trained)
        needle = b"The pass key is " + answer + b". Remember it. " + answer + b" is the pass key."
        assert prompt[offsets[0]:offsets[0] + len(needle)] == needle
        filler_len = prompt.index(b"\nWhat is the pass key?") - (len(needle) + 1)
        out.append((offsets[0] - round(depth * filler_len), depth, offsets[0] == filler_len))
    return out


class Placement(unittest.TestCase):
    def test_every_needle_within_25_bytes_of_its_depth(self):
        moved = [(past, d) for past, d, _ in passkey_offsets(False) if not 0 <= past <= 25]
        self.assertEqual(moved, [])

    def test_the_training_placement_moved_some_to_the_end(self):
        # The old rule: about 2.5 % of needles went to the filler's end.
        moved = [(past, d, end) for past, d, end in passkey_offsets(True) if not 0 <= past <= 25]
        self.assertGreater(len(moved), 5)
        self.assertTrue(all(end for _, _, end in moved), moved[:5])

    def test_the_rule_on_made_fillers(self):
        solid = b"a" * 1000
        self.assertEqual(tasks.needle_cut(solid, 0.1), 100)
        self.assertEqual(tasks.needle_cut_as_trained(solid, 0.1), 1000)
        near = bytearray(solid)
        near[124] = ord(" ")
        self.assertEqual(tasks.needle_cut(bytes(near), 0.1), 125)
        far = bytearray(solid)
        far[125] = ord(" ")
        self.assertEqual(tasks.needle_cut(bytes(far), 0.1), 100)

    def test_vartrack_chain_starts_at_the_depth_asked(self):
        for as_trained, start in ((False, 0.9), (True, 0.7)):
            rng = np.random.default_rng(5)
            prompt, _, offsets, _ = tasks.build(rng, "vartrack", 1024, lambda n: TEXT[1000:1000 + n],
                                                depth=0.9, as_trained=as_trained)
            # The chain's first statement: everything before it is filler
            # and needles; it sits past start x the prompt before the question.
            question = prompt.index(b"\nWhich variables")
            self.assertGreaterEqual(offsets[0], int(start * (question - 200)), as_trained)
            if as_trained:  # the training chain started at 0.7: well before 0.8 of the prompt
                self.assertLess(offsets[0], int(0.8 * question))
            else:
                self.assertGreater(offsets[0], int(0.8 * question))


if __name__ == "__main__":
    unittest.main()
