"""The paged option of run, compare, perplexity and compare_model: block size 1
is the token policy itself, a sliding window gains nothing from a shared layer
budget, the store is measured, and bad options are clear errors."""
import pathlib

import pytest

import kvevict

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODEL = ROOT / "model"


def test_block_size_one_is_the_token_policy():
    plain = kvevict.run("h2o", 128, steps=600)
    blocks = kvevict.run("h2o", 128, steps=600, paged={"block_size": 1})
    assert blocks["metrics"] == plain["metrics"]
    assert blocks["evicted"] == plain["evicted"] > 0


def test_coarser_blocks_change_what_h2o_keeps():
    plain = kvevict.run("h2o", 128, steps=600)
    blocks = kvevict.run("h2o", 128, steps=600, paged={"block_size": 16, "block_score": "max"})
    assert blocks["metrics"]["retainedAttentionMass"] != plain["metrics"]["retainedAttentionMass"]


def test_compare_takes_the_same_options():
    plain = kvevict.compare(["tova", "sliding-window"], [64, 128], steps=400)
    layer = kvevict.compare(["tova", "sliding-window"], [64, 128], steps=400, paged={"layer_budget": True})
    by = lambda doc: {(r["policy"], r["budget"]): r["metrics"] for r in doc["rows"]}  # noqa: E731
    # One head: a layer budget over one head is that head's budget.
    assert by(layer) == by(plain)


@pytest.mark.skipif(not (MODEL / "kvevict-tiny.kvm").exists(), reason="no committed model")
def test_perplexity_reports_the_measured_store():
    model = kvevict.Model(MODEL / "kvevict-tiny.kvm")
    text = (MODEL / "heldout-sample.txt").read_bytes()[:300]
    caches = model.config["layers"] * model.config["kv_heads"]
    rows = kvevict.perplexity(model, text, [("sliding-window", 64)], paged={"block_size": 16})
    assert "peakBlocks" not in kvevict.perplexity(model, text, [("sliding-window", 64)])[1]
    full, window = rows
    assert full["blockSize"] == window["blockSize"] == 16
    # The full cache holds all 299 fed positions: ceil(299 / 16) = 19 blocks a cache.
    assert full["peakBlocks"] == caches * 19
    # Each cache holds its 4 blocks after an eviction; one cache at a time is a block over.
    assert window["peakBlocks"] == caches * 4 + 1
    token = kvevict.perplexity(model, text, [("sliding-window", 64)], paged={"block_size": 1})[1]
    plain = kvevict.perplexity(model, text, [("sliding-window", 64)])[1]
    assert token["perplexity"] == plain["perplexity"]


def test_bad_paged_options_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown paged option 'blocks' \(known: block_size"):
        kvevict.run("h2o", 128, steps=50, paged={"blocks": 16})
    with pytest.raises(TypeError, match=r"paged must be a dict"):
        kvevict.compare(["h2o"], [128], steps=50, paged=16)
    with pytest.raises(TypeError, match=r"layer_budget\] must be a bool"):
        kvevict.run("h2o", 128, steps=50, paged={"layer_budget": 1})
    with pytest.raises(ValueError):
        kvevict.run("h2o", 128, steps=50, paged={"block_score": "median"})
    with pytest.raises(ValueError):
        kvevict.run("h2o", 128, steps=50, paged={"block_size": 16, "layer_budget": True})
    # A given block size of 0 once ran token-level eviction silently.
    with pytest.raises(ValueError, match=r"paged\[block_size\] \(0\) must be at least 1"):
        kvevict.run("h2o", 128, steps=50, paged={"block_size": 0})
    with pytest.raises(ValueError, match=r"\(-4\) must be at least 1"):
        kvevict.compare(["h2o"], [128], steps=50, paged={"blockSize": -4})
    # Numbers past 2^62: the option named, never a wrapped product.
    with pytest.raises(ValueError, match=r"--head-floor \(4611686018427387904\) must be at most --budget \(64\)"):
        kvevict.run("h2o", 64, steps=50, paged={"layer_budget": True, "head_floor": 2**62})
    with pytest.raises(ValueError, match=r"--budget \(4611686018427387904\) times the layer's"):
        kvevict.run("h2o", 2**62, steps=50, paged={"layer_budget": True})


def test_layer_budgets_too_large_or_wrapping_are_refused():
    # 1,024 heads of 2^18 positions (~15 GB) once met bad_alloc or the OOM killer.
    with pytest.raises(ValueError, match=r"bytes one layer may hold"):
        kvevict.LayerBudget("h2o", 1024, 2**18, 0)
    with pytest.raises(ValueError, match=r"headFloor \(4611686018427387904\) times heads \(2\)"):
        kvevict.LayerBudget("h2o", 2, 128, 2**62)
