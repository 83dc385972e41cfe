"""Streaming past the context (docs/streaming.md): kvevict.stream() and
kvevict.sink_shares() at parity with `kvevict stream --format json` (the
tool of the same build folder; those checks skip, with a message, when it is
not there), keys at their index in the cache (positions="cache") on Decoder,
Batch and serve_bench, and the decode-bench rows from the library's one
description. Expected values come from the tool or are worked by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kvevict
from conftest import SOURCE_ROOT

MODEL_DIR = Path(os.environ.get("KVEVICT_MODEL_DIR") or SOURCE_ROOT / "model")
KVM = MODEL_DIR / "kvevict-tiny.kvm"
SAMPLE = MODEL_DIR / "heldout-sample.txt"
if not (KVM.is_file() and SAMPLE.is_file()):
    pytest.skip(f"the model folder {MODEL_DIR} lacks kvevict-tiny.kvm or heldout-sample.txt",
                allow_module_level=True)


@pytest.fixture(scope="module")
def model():
    return kvevict.Model(KVM)


def tool(*args) -> dict:
    """The tool's JSON for the same arguments (BUILD/python/kvevict -> BUILD/kvevict)."""
    exe = Path(kvevict.__file__).resolve().parents[2] / "kvevict"
    if not exe.is_file():
        pytest.skip(f"the kvevict tool is not in this build folder ({exe})")
    out = subprocess.run([str(exe), *map(str, args), "--format", "json"], check=True, capture_output=True,
                         text=True, cwd=SOURCE_ROOT)
    return json.loads(out.stdout)


def without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def caches(model) -> int:
    return model.config["layers"] * model.config["kv_heads"]


# ---- stream ------------------------------------------------------------------------------


def test_stream_equals_the_tool(model):
    got = kvevict.stream(model, SAMPLE, policies="sliding-window,streaming-llm:sinks=4", budgets=[64],
                         tokens=1500, segment=500)
    want = tool("stream", "--model", KVM, "--text", SAMPLE, "--policy", "sliding-window,streaming-llm:sinks=4",
                "--budget", 64, "--tokens", 1500, "--segment", 500)
    assert list(got) == list(want) == ["command", "model", "rows"]
    assert got["command"] == "stream" and got["model"] == want["model"] == str(KVM)
    assert without_seconds(got["rows"]) == without_seconds(want["rows"])
    # Worked by hand: the full cache stops at the context (tokens 1 ... 1023
    # predicted); each policy row predicts tokens 1 ... 1499 and evicts one
    # position a cache a step from its 65th token fed (tokens 0 ... 1498).
    rows = got["rows"]
    assert [(r["label"], r["positions"]) for r in rows] == [
        ("full cache", "original"), ("sliding-window", "original"), ("sliding-window", "cache"),
        ("streaming-llm sinks=4", "original"), ("streaming-llm sinks=4", "cache")]
    assert rows[0]["policy"] is None and rows[0]["tokens"] == 1024 and rows[0]["predictions"] == 1023
    assert [s["predictions"] for s in rows[0]["segments"]] == [499, 500, 24]
    for r in rows[1:]:
        assert (r["tokens"], r["predictions"], r["peakPositions"]) == (1500, 1499, 65)
        assert r["evicted"] == (1499 - 64) * caches(model)
        assert [(s["begin"], s["end"], s["predictions"]) for s in r["segments"]] == [
            (0, 500, 499), (500, 1000, 500), (1000, 1500, 500)]
        assert r["pastTrainedContext"] == (r["positions"] == "original")


def test_stream_arguments_as_sequences_and_the_recomputed_window(model):
    text = SAMPLE.read_bytes()
    got = kvevict.stream(model, text, policies=["streaming-llm"], budgets=(32,), positions=["cache"], tokens=300,
                         full_cache=False, recompute=16, recompute_tokens=40, overrides={"streaming-llm.sinks": 2})
    want = tool("stream", "--model", KVM, "--text", SAMPLE, "--policy", "streaming-llm", "--budget", 32,
                "--positions", "cache", "--tokens", 300, "--no-full-cache", "--recompute", 16,
                "--recompute-tokens", 40, "--set", "streaming-llm.sinks=2")
    assert without_seconds(got["rows"]) == without_seconds(want["rows"])
    assert [r["policy"] for r in got["rows"]] == ["streaming-llm", "recompute"]
    assert got["rows"][0]["params"]["sinks"] == 2
    assert got["rows"][1]["predictions"] == 39  # tokens 1 ... 39 of the first 40


def test_stream_refuses_bad_arguments_before_any_work(model):
    text = SAMPLE.read_bytes()
    with pytest.raises(ValueError, match=r"^positions: positions 'middle': expected 'original'"):
        kvevict.stream(model, text, policies="sliding-window", budgets=[64], positions="original,middle")
    with pytest.raises(ValueError, match=r"budget \(1024\) must be 1 ... 1023"):
        kvevict.stream(model, text, policies="sliding-window", budgets=[1024])
    with pytest.raises(ValueError, match="unknown policy 'lru'"):
        kvevict.stream(model, text, policies="lru", budgets=[64])
    with pytest.raises(ValueError, match="nothing to run"):
        kvevict.stream(model, text, policies=None, full_cache=False)
    with pytest.raises(RuntimeError, match="the stream asks for 100000 tokens"):
        kvevict.stream(model, text, policies="sliding-window", budgets=[64], tokens=100000)
    with pytest.raises(TypeError, match="text must be bytes, not str"):
        kvevict.stream(model, "some text")
    with pytest.raises(TypeError, match="full_cache must be a bool"):
        kvevict.stream(model, text, full_cache=1)


def test_sink_shares_equal_the_tool(model):
    got = kvevict.sink_shares(model, SAMPLE, tokens=128)
    assert got == tool("stream", "--model", KVM, "--text", SAMPLE, "--sinks", "--tokens", 128)["rows"]
    assert [s["layer"] for s in got] == list(range(model.config["layers"]))
    for s in got:
        assert 0.0 <= s["first"] <= s["firstFour"] <= 1.0


# ---- positions on Decoder, Batch, serve_bench ------------------------------------------


def test_cache_positions_without_eviction_are_the_original_logits_to_the_bit(model):
    text = SAMPLE.read_bytes()[:200]
    original = kvevict.Decoder(model, 256)
    cache = kvevict.Decoder(model, 256, positions="cache")
    for byte in text:
        a, b = original.step(byte), cache.step(byte)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_sliding_window_decoder_runs_past_its_capacity_and_the_context(model):
    context = model.config["context"]
    text = SAMPLE.read_bytes()[:1500]
    assert len(text) == 1500 > context
    for positions in ("original", "cache"):
        d = kvevict.Decoder(model, 17, positions=positions)
        for h in range(d.head_count):
            d.set_policy(h, kvevict.Policy("sliding-window"), budget=16)
        for byte in text:
            logits = d.step(byte)
        assert d.position == 1500 and d.capacity == 17
        assert np.isfinite(logits).all()
        assert d.held(0) == list(range(1500 - 16, 1500))
        assert d.evicted == (1500 - 16) * d.head_count


def test_the_full_cache_still_stops_at_its_capacity(model):
    d = kvevict.Decoder(model, 4, positions="cache")
    for byte in b"abcd":
        d.step(byte)
    with pytest.raises(RuntimeError):
        d.step(ord("e"))


def test_a_bad_position_mode_is_one_clear_error(model):
    with pytest.raises(ValueError, match=r"^positions: positions 'absolute': expected 'original'"):
        kvevict.Decoder(model, positions="absolute")
    with pytest.raises(TypeError, match="positions must be a str"):
        kvevict.Decoder(model, positions=1)
    with pytest.raises(ValueError, match="positions 'rope'"):
        kvevict.Batch(model, pool_blocks=64, positions="rope")
    with pytest.raises(ValueError, match="serve_bench: positions: positions 'x'"):
        kvevict.serve_bench(model, SAMPLE, positions="x")


def test_batch_with_cache_positions(model):
    n = caches(model)
    text = SAMPLE.read_bytes()[:64]
    a = kvevict.Batch(model, pool_blocks=n * 8, capacity=64, block_size=8, share_prefix=False)
    b = kvevict.Batch(model, pool_blocks=n * 8, capacity=64, block_size=8, share_prefix=False, positions="cache")
    sa, sb = a.join(), b.join()
    for byte in text:
        assert np.array_equal(a.step(sa, byte), b.step(sb, byte))
    # A window of 16 in a capacity of 17 steps on past the context of 1024.
    w = kvevict.Batch(model, pool_blocks=n * 3, capacity=17, block_size=8, positions="cache")
    s = w.join("sliding-window", 16)
    for t, byte in enumerate(SAMPLE.read_bytes()[:1100]):
        w.step(s, byte)
    assert w.held(s, 0) == list(range(1100 - 16, 1100))


def test_serve_bench_takes_positions(model):
    args = dict(sequences=[2], policies="sliding-window", budget=32, shared_prefix=16, tokens=64, block_size=8)
    rows = kvevict.serve_bench(model, SAMPLE, positions="cache", **args)
    assert len(rows) == 1 and rows[0]["tokens"] == 64 and rows[0]["leakedBlocks"] == 0
    assert rows[0]["evicted"] == 2 * (64 - 32) * caches(model)


# ---- bench_model: the library's row description --------------------------------------------


def test_bench_model_rows_have_the_tools_keys(model):
    rows = kvevict.bench_model(model, SAMPLE, tokens=32, rounds=1, policies="sliding-window", budgets=[16])
    want = tool("bench", "--model", KVM, "--text", SAMPLE, "--tokens", 32, "--rounds", 1, "--policies",
                "sliding-window", "--budgets", 16)["rows"]
    assert len(rows) == len(want) == 2

    def shape(value):
        return {k: shape(v) for k, v in value.items()} if isinstance(value, dict) else type(value).__name__

    assert [shape(r) for r in rows] == [shape(r) for r in want]
    assert [list(r) for r in rows] == [list(r) for r in want]
    assert [(r["policy"], r["budget"], r["tokens"]) for r in rows] == [
        (r["policy"], r["budget"], r["tokens"]) for r in want]
