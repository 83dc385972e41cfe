#!/usr/bin/python3
"""model/corpus.py: the split by file and the --heldout writer, on a corpus
made here (120 small files), so it runs without the linux-doc package."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "model"))
import corpus  # noqa: E402


class Split(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.files = []
        for i in range(120):
            # Names sort in creation order: a/000 ... a/119 (nested, as the glob is recursive).
            path = os.path.join(self.dir.name, "a", f"{i:03d}.rst.txt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(f"doc {i}".encode())
            self.files.append(path)
        self.old_glob = corpus.CORPUS_GLOB
        corpus.CORPUS_GLOB = os.path.join(self.dir.name, "**", "*.rst.txt")

    def tearDown(self):
        corpus.CORPUS_GLOB = self.old_glob
        self.dir.cleanup()

    def test_every_fiftieth_file_is_held_out_with_a_blank_line_after_it(self):
        files = corpus.corpus_files()
        self.assertEqual(files, self.files)
        train, held = corpus.split(files)
        # Files 50 and 100 (indices 49 and 99), nothing else.
        self.assertEqual(held, [b"doc 49\n\n", b"doc 99\n\n"])
        self.assertEqual(len(train), 118)
        self.assertEqual(train[0], b"doc 0\n\n")
        self.assertNotIn(b"doc 49\n\n", train)

    def test_no_corpus_says_which_package_to_install(self):
        corpus.CORPUS_GLOB = os.path.join(self.dir.name, "nothing", "*.rst.txt")
        with self.assertRaisesRegex(corpus.CorpusMissing, "apt-get install linux-doc-6.1"):
            corpus.corpus_files()


class Writer(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([sys.executable, os.path.join(ROOT, "model", "corpus.py"), *args],
                              capture_output=True, text=True)

    def test_an_existing_file_is_not_replaced_without_force(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "held.txt")
            with open(out, "w") as f:
                f.write("mine")
            r = self.run_tool("--heldout", out)
            self.assertEqual(r.returncode, 1)
            self.assertIn(f"{out} exists (pass --force to replace it)", r.stderr)
            with open(out) as f:
                self.assertEqual(f.read(), "mine")

    def test_the_output_is_required(self):
        r = self.run_tool()
        self.assertEqual(r.returncode, 2)
        self.assertIn("--heldout", r.stderr)


if __name__ == "__main__":
    unittest.main()
