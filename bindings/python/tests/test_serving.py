"""Many sequences on one block pool from Python (docs/serving.md): a Batch
whose sequences match their solo Decoder runs to the bit, prefix sharing
counted by the pool, preemption on an exhausted pool, and serve_bench()
rows shaped as the tool's JSON."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import kvevict
from conftest import SOURCE_ROOT

MODEL_DIR = Path(os.environ.get("KVEVICT_MODEL_DIR") or SOURCE_ROOT / "model")


@pytest.fixture(scope="module")
def model():
    return kvevict.Model(MODEL_DIR / "kvevict-tiny.kvm")


@pytest.fixture(scope="module")
def text():
    return (MODEL_DIR / "heldout-sample.txt").read_bytes()


def caches(model) -> int:
    return model.config["layers"] * model.config["kv_heads"]


def test_two_equal_sequences_share_every_full_block_and_match_a_solo_decoder(model, text):
    n = caches(model)
    batch = kvevict.Batch(model, pool_blocks=4 * n * 8, capacity=64, block_size=8)
    a, b = batch.join(), batch.join()
    solo = kvevict.Decoder(model, 64)
    for t in range(40):
        la, lb = batch.step(a, text[t]), batch.step(b, text[t])
        want = solo.step(text[t])
        assert np.array_equal(la.view(np.uint32), want.view(np.uint32))
        assert np.array_equal(lb.view(np.uint32), want.view(np.uint32))
    s = batch.pool_stats()
    # 40 positions in blocks of 8: 5 full blocks per cache, held once for both.
    assert s["in_use"] == 5 * n and s["references"] == 10 * n and s["shared"] == 5 * n and s["copies"] == 0
    assert batch.sequences == [a, b] and len(batch) == 2
    batch.leave(a)
    batch.leave(b)
    assert batch.pool_stats()["free_blocks"] == 4 * n * 8


def test_a_policy_sequence_holds_its_budget_and_block_mode_needs_a_policy(model, text):
    n = caches(model)
    batch = kvevict.Batch(model, pool_blocks=4 * n * 8, capacity=64, block_size=8)
    w = batch.join("sliding-window", 16, mode="block")
    for t in range(40):
        batch.step(w, text[t])
    assert batch.held(w, 0) == list(range(24, 40))
    with pytest.raises(ValueError, match='mode "block" needs a policy'):
        batch.join(mode="block")
    with pytest.raises(ValueError, match="mode must be"):
        batch.join("h2o", 32, mode="pages")


def test_an_exhausted_pool_preempts_one_sequence_and_the_other_goes_on(model, text):
    n = caches(model)
    batch = kvevict.Batch(model, pool_blocks=2 * n + 1, capacity=64, block_size=4, share_prefix=False)
    a = batch.join()
    b = batch.join("sliding-window", 4)
    solo = kvevict.Decoder(model, 64)
    for h in range(n):
        solo.set_policy(h, kvevict.SlidingWindow(budget=4), 4)
    for t in range(4):
        batch.step(a, text[t])
        assert np.array_equal(batch.step(b, text[t]), solo.step(text[t]))
    with pytest.raises(RuntimeError, match=f"sequence {a}: decoder: the block pool is exhausted at position 4"):
        batch.step(a, text[4])
    with pytest.raises(RuntimeError, match="it left the batch when its step at position 4 failed"):
        batch.step(a, 0)
    for t in range(4, 30):
        assert np.array_equal(batch.step(b, text[t]), solo.step(text[t]))
    with pytest.raises(RuntimeError, match="no sequence has that id"):
        batch.leave(99)


def test_serve_bench_rows_are_the_tools_json(model, text):
    rows = kvevict.serve_bench(model, text, sequences=[2], policies="none,h2o", budget=64,
                               modes=["token", "block"], sharing=[True, False], shared_prefix=64, tokens=128)
    assert [(r["policy"], r["mode"], r["prefixSharing"]) for r in rows] == [
        (None, "full", "on"), (None, "full", "off"), ("h2o", "token", "on"), ("h2o", "block", "on"),
        ("h2o", "token", "off"), ("h2o", "block", "off")]
    n = caches(model)
    full_on, full_off = rows[0], rows[1]
    assert full_off["peakBlocks"] == 2 * n * 8 and full_on["peakBlocks"] == 2 * n * 8 - n * 4
    assert full_on["blocksSavedBySharing"] == n * 4
    assert all(r["leakedBlocks"] == 0 for r in rows)
    assert rows[2]["evicted"] == 2 * n * 64 and rows[2]["peakCachePositions"] == 65
    chunked = kvevict.serve_bench(model, text, sequences=[1], policies=["snapkv"], budget=64, chunks=[32],
                                  window=16, shared_prefix=0, tokens=128)
    assert chunked[0]["mode"] == "chunked" and chunked[0]["chunk"] == 32 and chunked[0]["peakCachePositions"] == 96
    with pytest.raises(ValueError, match="a chunk of 300 positions is larger than the capacity of 128"):
        kvevict.serve_bench(model, text, policies="h2o", budget=64, chunks=[300], shared_prefix=0, tokens=128)
    with pytest.raises(TypeError, match="sharing must be a bool"):
        kvevict.serve_bench(model, text, sharing="yes")
