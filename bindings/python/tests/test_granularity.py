"""Granularity (docs/paged.md, "Granularity"): which caches share a budget --
each its own (head), a layer's KV heads (layer) or every cache of the sequence
(sequence) -- through paged={"granularity": ...} of perplexity and
compare_model, and the granularity argument of stream, tasks and serve_bench.
The expected values hold by construction: a position-only policy evicts the
same positions in every cache, so sharing one victim set changes nothing; at
sequence granularity every cache holds the same positions, so the positions
evicted are a whole number of caches' worth. Parity with the tool skips, with
a message, when the tool is not in the build folder."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import kvevict
from conftest import SOURCE_ROOT

MODEL_DIR = Path(os.environ.get("KVEVICT_MODEL_DIR") or SOURCE_ROOT / "model")
KVM = MODEL_DIR / "kvevict-tiny.kvm"
SAMPLE = MODEL_DIR / "heldout-sample.txt"
if not (KVM.is_file() and SAMPLE.is_file()):
    pytest.skip(f"the model folder {MODEL_DIR} lacks kvevict-tiny.kvm or heldout-sample.txt",
                allow_module_level=True)

BUDGET = 64


@pytest.fixture(scope="module")
def model():
    return kvevict.Model(KVM)


@pytest.fixture(scope="module")
def text():
    return SAMPLE.read_bytes()


def caches(model) -> int:
    return model.config["layers"] * model.config["kv_heads"]


def tool(*args):
    """The rows of the tool's JSON for the same arguments (BUILD/python/kvevict ->
    BUILD/kvevict), after checking it is the envelope {"command", "model", "rows"}."""
    exe = Path(kvevict.__file__).resolve().parents[2] / "kvevict"
    if not exe.is_file():
        pytest.skip(f"the kvevict tool is not in this build folder ({exe})")
    out = subprocess.run([str(exe), *map(str, args), "--format", "json"], check=True, capture_output=True,
                         text=True, cwd=SOURCE_ROOT)
    doc = json.loads(out.stdout)
    assert list(doc)[:3] == ["command", "model", "rows"] and doc["command"] == args[0], doc
    return doc["rows"]


def without_seconds(rows):
    return [{k: v for k, v in r.items() if k not in ("seconds", "tokensPerSecond")} for r in rows]


# ---- perplexity and compare_model: paged={"granularity": ...} ------------------------------


def test_a_position_only_policy_is_the_same_at_head_and_sequence(model, text):
    # streaming-llm keeps the sinks and the newest positions in every cache
    # alike: one victim set for all caches is each cache's own.
    head = kvevict.perplexity(model, text, [("streaming-llm", BUDGET)], max_windows=1, paged={"granularity": "head"})
    seq = kvevict.perplexity(model, text, [("streaming-llm", BUDGET)], max_windows=1,
                             paged={"granularity": "sequence"})
    assert seq[1]["bitsPerByte"] == head[1]["bitsPerByte"]
    assert seq[1]["evicted"] == head[1]["evicted"] > 0
    assert seq[1]["granularity"] == "sequence"
    # head is each cache its own, as without paged: no field, no paged store
    assert "granularity" not in head[1] and "peakPositions" not in head[1]
    # the full cache shares nothing
    assert seq[0]["policy"] is None and "granularity" not in seq[0]


def test_at_sequence_every_cache_evicts_the_same_positions(model, text):
    n = caches(model)
    rows = kvevict.perplexity(model, text, [("h2o", BUDGET), ("tova", BUDGET)], max_windows=1,
                              paged={"granularity": "sequence"})
    for row in rows[1:]:
        assert row["granularity"] == "sequence"
        assert row["evicted"] > 0 and row["evicted"] % n == 0, (row["policy"], row["evicted"], n)
    ranked = kvevict.compare_model(model, text, policies=["h2o"], budgets=[BUDGET], max_windows=1,
                                   paged={"granularity": "sequence"})
    assert [r.get("granularity") for r in ranked] == [None, "sequence"]
    assert ranked[1]["evicted"] % n == 0
    # layer_budget True is granularity "layer": both spellings, and both together, give the same row
    by_name = kvevict.perplexity(model, text, [("h2o", BUDGET)], max_windows=1, paged={"granularity": "layer"})[1]
    by_flag = kvevict.perplexity(model, text, [("h2o", BUDGET)], max_windows=1, paged={"layer_budget": True})[1]
    both = kvevict.perplexity(model, text, [("h2o", BUDGET)], max_windows=1,
                              paged={"layer_budget": True, "granularity": "layer"})[1]
    assert by_name["granularity"] == by_flag["granularity"] == both["granularity"] == "layer"
    assert by_name["bitsPerByte"] == by_flag["bitsPerByte"] == both["bitsPerByte"]


def test_perplexity_at_sequence_equals_the_tool(model, text):
    want = tool("perplexity", "--model", KVM, "--text", SAMPLE, "--max-windows", 1, "--policy", "h2o",
                "--budget", BUDGET, "--granularity", "sequence")
    got = kvevict.perplexity(model, text, [("h2o", BUDGET)], max_windows=1, paged={"granularity": "sequence"})
    assert without_seconds(got) == without_seconds(want)
    assert [list(r) for r in got] == [list(r) for r in want]


def test_bad_granularities_are_clear_errors(model, text):
    run = lambda paged, policy="h2o": kvevict.perplexity(model, text, [(policy, BUDGET)],  # noqa: E731
                                                         max_windows=1, paged=paged)
    with pytest.raises(ValueError, match=r"paged\[granularity\]: --granularity \(cells\) must be head, layer or "
                                         r"sequence"):
        run({"granularity": "cells"})
    with pytest.raises(TypeError, match=r"paged\[granularity\] must be a str"):
        run({"granularity": 2})
    with pytest.raises(ValueError, match=r"--granularity sequence and --block-size"):
        run({"granularity": "sequence", "block_size": 16})
    # PyramidKV's budget differs by layer; at sequence every layer holds the same positions.
    with pytest.raises(ValueError, match=r"pyramidkv"):
        run({"granularity": "sequence"}, "pyramidkv")
    # the older spelling must agree with the new one, whichever order the dict holds them in
    with pytest.raises(ValueError, match=r"disagree"):
        run({"layer_budget": True, "granularity": "sequence"})
    with pytest.raises(ValueError, match=r"disagree"):
        run({"granularity": "layer", "layer_budget": False})
    with pytest.raises(ValueError, match=r"known: .*granularity"):
        run({"granularty": "sequence"})


# ---- stream --------------------------------------------------------------------------------


def test_stream_a_position_only_policy_is_the_same_at_head_and_sequence(model, text):
    args = dict(policies="streaming-llm", budgets=[BUDGET], positions="original", tokens=400, full_cache=False)
    head = kvevict.stream(model, text, **args)["rows"]
    seq = kvevict.stream(model, text, **args, granularity="sequence")["rows"]
    assert len(head) == len(seq) == 1
    assert seq[0]["bitsPerByte"] == head[0]["bitsPerByte"]
    assert seq[0]["segments"] == head[0]["segments"]
    assert seq[0]["granularity"] == "sequence" and "granularity" not in head[0]
    assert seq[0]["evicted"] % caches(model) == 0


def test_stream_refuses_layer_and_bad_names(model, text):
    args = dict(policies="h2o", budgets=[BUDGET], positions="original", tokens=100, full_cache=False)
    with pytest.raises(ValueError, match=r"--granularity layer"):
        kvevict.stream(model, text, **args, granularity="layer")
    with pytest.raises(ValueError, match=r"stream: granularity: --granularity \(cells\)"):
        kvevict.stream(model, text, **args, granularity="cells")
    with pytest.raises(TypeError, match=r"stream: granularity must be a str"):
        kvevict.stream(model, text, **args, granularity=None)


# ---- tasks ---------------------------------------------------------------------------------


def test_tasks_at_sequence(model, text):
    rows = kvevict.tasks(model, text, lengths=[256], depths=1, samples=2, policies="h2o", budgets=[BUDGET],
                         granularity="sequence")
    full, h2o = rows
    assert full["policy"] == "full" and "granularity" not in full
    assert h2o["granularity"] == "sequence"
    assert h2o["evicted"] > 0 and h2o["evicted"] % caches(model) == 0
    plain = kvevict.tasks(model, text, lengths=[256], depths=1, samples=2, policies="h2o", budgets=[BUDGET])
    assert all("granularity" not in r for r in plain)


def test_tasks_refuse_a_shared_budget_at_a_prefill_moment(model, text):
    with pytest.raises(ValueError, match=r"--granularity sequence applies to the decode moment"):
        kvevict.tasks(model, text, lengths=[256], depths=1, samples=1, policies="h2o", budgets=[BUDGET],
                      moments="decode,prefill", granularity="sequence")
    with pytest.raises(ValueError, match=r"tasks: granularity: --granularity \(all\)"):
        kvevict.tasks(model, text, lengths=[256], depths=1, samples=1, policies="h2o", budgets=[BUDGET],
                      granularity="all")


# ---- serve_bench ---------------------------------------------------------------------------


def test_serve_bench_at_sequence(model, text):
    args = dict(sequences=[2], policies="none,h2o", budget=BUDGET, modes="token", chunks=[0], shared_prefix=64,
                tokens=128)
    rows = kvevict.serve_bench(model, text, **args, granularity="sequence")
    assert [r["policy"] for r in rows] == [None, "h2o"]
    # the full cache shares no budget; the policy's row says which caches did
    assert "granularity" not in rows[0]
    assert rows[1]["granularity"] == "sequence"
    assert rows[1]["evicted"] > 0 and rows[1]["evicted"] % caches(model) == 0
    assert all("granularity" not in r for r in kvevict.serve_bench(model, text, **args))
    want = tool("serve-bench", "--model", KVM, "--text", SAMPLE, "--sequences", 2, "--policy", "none,h2o",
                "--budget", BUDGET, "--modes", "token", "--shared-prefix", 64, "--tokens", 128,
                "--granularity", "sequence")
    assert without_seconds(rows) == without_seconds(want)


def test_serve_bench_refuses_blocks_and_chunks_at_sequence(model, text):
    args = dict(sequences=[2], policies="h2o", budget=BUDGET, shared_prefix=64, tokens=128, granularity="sequence")
    with pytest.raises(ValueError, match=r"not for block runs"):
        kvevict.serve_bench(model, text, modes="block", **args)
    with pytest.raises(ValueError, match=r"not for chunked runs"):
        kvevict.serve_bench(model, text, chunks=[32], **args)
    with pytest.raises(TypeError, match=r"serve_bench: granularity must be a str"):
        kvevict.serve_bench(model, text, **{**args, "granularity": 1})
