"""The real model from Python: Model, Decoder, perplexity(), compare_model(),
record_attention() and persistence().

The model folder is KVEVICT_MODEL_DIR (default <repo>/model), holding
kvevict-tiny.kvm, heldout-sample.txt, reference-prompt.txt and reference.npy.
Without KVEVICT_MODEL_DIR, a folder that lacks them skips this module (the
committed weights may not be there yet); with it, a missing file fails.

Every expected value is worked out here, from the model's shape, the texts
or the decoder's own logits -- never read back from the function under test.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import kvevict
from conftest import SOURCE_ROOT, call_with_weird, ticks_during

MODEL_FILES = ("kvevict-tiny.kvm", "heldout-sample.txt", "reference-prompt.txt", "reference.npy")
MODEL_DIR = Path(os.environ.get("KVEVICT_MODEL_DIR") or SOURCE_ROOT / "model")
_missing = [f for f in MODEL_FILES if not (MODEL_DIR / f).is_file()]
if _missing and not os.environ.get("KVEVICT_MODEL_DIR"):
    pytest.skip(f"the model folder {MODEL_DIR} lacks {', '.join(_missing)} "
                "(set KVEVICT_MODEL_DIR to a complete one)", allow_module_level=True)

KVM = MODEL_DIR / "kvevict-tiny.kvm"


@pytest.fixture(scope="module")
def model() -> kvevict.Model:
    assert not _missing, f"KVEVICT_MODEL_DIR={MODEL_DIR} lacks {', '.join(_missing)}"
    return kvevict.Model(KVM)


@pytest.fixture(scope="module")
def heldout() -> bytes:
    return (MODEL_DIR / "heldout-sample.txt").read_bytes()


@pytest.fixture(scope="module")
def text(heldout) -> bytes:
    """A few hundred bytes: one window, fast."""
    return heldout[:300]


def heads_of(model: kvevict.Model) -> int:
    return model.config["layers"] * model.config["kv_heads"]


def nll(logits: np.ndarray, nxt: int) -> float:
    """-log softmax(logits)[nxt] in nats, in float64."""
    x = logits.astype(np.float64)
    top = x.max()
    return math.log(np.exp(x - top).sum()) + top - x[nxt]


def decoder_perplexity(decoder: kvevict.Decoder, text: bytes) -> float:
    """Perplexity of one window computed in Python from the decoder's logits."""
    total = sum(nll(decoder.step(text[i]), text[i + 1]) for i in range(len(text) - 1))
    return math.exp(total / (len(text) - 1))


# ---- Model ------------------------------------------------------------------------


def test_model_loads_with_the_documented_shape(model):
    c = model.config
    assert set(c) == {"vocab", "layers", "heads", "kv_heads", "width", "ff", "context", "rope_base", "norm_eps"}
    assert (c["vocab"], c["layers"], c["heads"], c["width"], c["ff"]) == (256, 4, 4, 128, 512)
    assert c["context"] >= 1024
    assert isinstance(c["rope_base"], float) and c["norm_eps"] > 0
    # FORMAT.md's tensors: the tied embedding, per layer two norms, qkv, proj,
    # up and down, and the final norm.
    w, ff, v = c["width"], c["ff"], c["vocab"]
    qkv_rows = (c["heads"] + 2 * c["kv_heads"]) * (w // c["heads"])
    per_layer = w + qkv_rows * w + w * w + w + ff * w + w * ff
    assert model.parameter_count == v * w + c["layers"] * per_layer + w
    assert model.path == str(KVM)
    assert str(KVM) in repr(model) and "layers=4" in repr(model)
    c["layers"] = 99  # a new dict each time
    assert model.config["layers"] == 4
    assert kvevict.Model(str(KVM)).parameter_count == model.parameter_count  # str or PathLike


def test_bad_model_files_raise_naming_the_file(tmp_path):
    truncated = tmp_path / "truncated.kvm"
    truncated.write_bytes(KVM.read_bytes()[:1000])
    with pytest.raises(RuntimeError) as e:
        kvevict.Model(truncated)
    assert str(truncated) in str(e.value)
    corrupt = tmp_path / "corrupt.kvm"
    data = bytearray(KVM.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped weight: the CRC catches it
    corrupt.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=str(corrupt)):
        kvevict.Model(corrupt)
    missing = tmp_path / "missing.kvm"
    with pytest.raises(RuntimeError, match=str(missing)):
        kvevict.Model(missing)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        kvevict.Model(42)


# ---- Decoder -----------------------------------------------------------------------


def test_decoder_logits_match_pytorch_on_the_reference_prompt(model):
    prompt = (MODEL_DIR / "reference-prompt.txt").read_bytes()
    reference = np.load(MODEL_DIR / "reference.npy")
    assert reference.shape == (len(prompt), 256)
    decoder = kvevict.Decoder(model)
    first = decoder.step(prompt[0])
    assert first.dtype == np.float32 and first.shape == (256,)
    logits = [first] + [decoder.step(b) for b in prompt[1:]]
    # Each array is a copy: the first is unchanged by the later steps.
    assert np.array_equal(logits[0], first) and not np.shares_memory(logits[0], logits[1])
    worst = np.abs(np.stack(logits) - reference).max()
    assert worst <= 1e-4, f"largest |C++ - PyTorch| logit difference {worst}"
    assert decoder.position == len(prompt) and decoder.evicted == 0
    assert decoder.capacity == model.config["context"] and decoder.head_count == heads_of(model)


def test_decoder_state_after_steps(model, text):
    n = 20
    decoder = kvevict.Decoder(model, capacity=64)
    for b in text[:n]:
        decoder.step(b)
    for h in (0, decoder.head_count - 1):
        assert decoder.held(h) == list(range(n))
        assert decoder.attended(h) == list(range(n))
        w = decoder.attention(h)
        assert w.dtype == np.float32 and w.shape == (n,)
        assert np.all(w > 0) and abs(float(w.sum(dtype=np.float64)) - 1.0) < 1e-5
    assert "position=20" in repr(decoder)


def test_decoder_perplexity_equals_perplexity(model, text):
    """perplexity() agrees with Python arithmetic over Decoder.step's logits,
    for the full cache and with a policy at every head."""
    rows = kvevict.perplexity(model, text, [("sliding-window", 8)])
    full = decoder_perplexity(kvevict.Decoder(model), text)
    assert rows[0]["perplexity"] == pytest.approx(full, rel=1e-12)
    decoder = kvevict.Decoder(model)
    for h in range(decoder.head_count):
        decoder.set_policy(h, kvevict.SlidingWindow(budget=8))
    assert rows[1]["perplexity"] == pytest.approx(decoder_perplexity(decoder, text), rel=1e-12)
    assert rows[1]["evicted"] == decoder.evicted
    assert rows[0]["bitsPerByte"] == pytest.approx(math.log2(rows[0]["perplexity"]), rel=1e-12)


def test_evicted_positions_leave_the_cache(model, text):
    """A budget-8 sliding window at every head: the logits equal the full
    cache's until a token attends over an evicted cache (position 9: the
    eviction at position 8 follows its attention), differ from then on, and
    each head holds exactly the 8 newest positions."""
    full, evicting = kvevict.Decoder(model, 64), kvevict.Decoder(model, 64)
    for h in range(evicting.head_count):
        evicting.set_policy(h, kvevict.SlidingWindow(budget=8))
    for t in range(30):
        a, b = full.step(text[t]), evicting.step(text[t])
        if t <= 8:
            assert np.array_equal(a, b), t
        else:
            assert not np.array_equal(a, b), t
        if t >= 8:
            assert evicting.held(3) == list(range(t - 7, t + 1))
            assert evicting.attended(3) == list(range(t - 8, t + 1))  # 8 held + the new token
    assert evicting.evicted == evicting.head_count * (30 - 8)


def test_decoder_keeps_its_policies_alive_and_refuses_sharing(model, text):
    decoder = kvevict.Decoder(model, 64)
    p = kvevict.H2O(budget=16, recent_window=4)
    before = sys.getrefcount(p)
    decoder.set_policy(0, p)
    assert sys.getrefcount(p) == before + 1 and decoder.policy(0) is p and decoder.policy(1) is None
    decoder.set_policy(0, p)  # the same head again: fine, no extra reference
    assert sys.getrefcount(p) == before + 1
    with pytest.raises(ValueError, match="already serves head 0: give each head its own policy"):
        decoder.set_policy(1, p)
    with pytest.raises(ValueError, match="of another Decoder"):
        kvevict.Decoder(model, 64).set_policy(0, p)
    decoder.set_policy(2, kvevict.H2O(budget=16, recent_window=4))  # a temporary
    gc.collect()
    for b in text[:40]:
        decoder.step(b)
    assert len(decoder.held(0)) == 16 and decoder.policy(2).kept_count() == 16
    assert p.kept_count() == 16 and p.score_of(39) >= 0  # queries are allowed
    with pytest.raises(RuntimeError, match=r"driven by a Decoder \(head 0\)"):
        p.on_decode_step(100, None)
    with pytest.raises(RuntimeError, match="driven by a Decoder"):
        p.evict(1)
    del decoder
    gc.collect()
    assert sys.getrefcount(p) == before
    p.on_decode_step(100, None)  # released: usable by hand again
    assert p.kept_count() == 17


def test_reset_detaches_the_policies_and_replays_identically(model, text):
    decoder = kvevict.Decoder(model, 64)
    p = kvevict.SlidingWindow(budget=4)
    decoder.set_policy(5, p)
    first = [decoder.step(b) for b in text[:10]]
    with pytest.raises(RuntimeError, match="before the first token"):
        decoder.set_policy(6, kvevict.SlidingWindow(budget=4))
    with pytest.raises(RuntimeError, match="before the first token"):
        decoder.set_policy(5, None)
    decoder.reset()
    assert decoder.position == 0 and decoder.evicted == 0 and decoder.policy(5) is None
    p.on_decode_step(50, None)  # detached
    decoder.set_policy(5, kvevict.SlidingWindow(budget=4))
    again = [decoder.step(b) for b in text[:10]]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert decoder.evicted == 10 - 4


def test_decoder_budget_defaults_to_the_policys(model, text):
    decoder = kvevict.Decoder(model, 64)
    decoder.set_policy(0, kvevict.SlidingWindow(budget=6))        # budget None: 6
    decoder.set_policy(1, kvevict.SlidingWindow(budget=12), 10)   # given: the decoder holds 10
    for b in text[:20]:
        decoder.step(b)
    assert len(decoder.held(0)) == 6 and len(decoder.held(1)) == 10
    assert decoder.evicted == (20 - 6) + (20 - 10)


def test_decoder_errors(model):
    context = model.config["context"]
    with pytest.raises(RuntimeError, match=f"capacity {context + 1} is over the model's context"):
        kvevict.Decoder(model, context + 1)
    with pytest.raises(ValueError, match="capacity"):
        kvevict.Decoder(model, -1)
    with pytest.raises(TypeError, match="model must be a kvevict.Model"):
        kvevict.Decoder("model.kvm")
    decoder = kvevict.Decoder(model, 2)
    for bad, error in [(256, ValueError), (-1, ValueError), (1.0, TypeError), (b"a", TypeError)]:
        with pytest.raises(error):
            decoder.step(bad)
    heads = decoder.head_count
    with pytest.raises(ValueError, match=rf"head \({heads}\) must be in 0 \.\.\. {heads - 1}"):
        decoder.held(heads)
    with pytest.raises(ValueError, match="head"):
        decoder.set_policy(-1, kvevict.TOVA())
    with pytest.raises(TypeError, match="policy must be a kvevict.Policy or None"):
        decoder.set_policy(0, "tova")
    with pytest.raises(ValueError, match=r"budget \(0\) must be at least 1"):
        decoder.set_policy(0, kvevict.TOVA(), 0)
    assert decoder.policy(0) is None  # nothing changed
    decoder.step(1)
    decoder.step(2)
    with pytest.raises(RuntimeError, match="past the capacity of 2 positions"):
        decoder.step(3)


# ---- perplexity ----------------------------------------------------------------------


ROW_KEYS = {"policy", "budget", "params", "perplexity", "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh",
            "predictions", "predictedBytes", "tokenizer", "evicted", "kvPrecision", "kvResidual", "bytesPerPosition", "modelBytesPerPosition", "peakCacheBytes", "seconds"}


def test_a_budget_that_never_binds_is_exactly_the_full_cache(model, text):
    names = [p["name"] for p in kvevict.policies()]
    runs = [(name, b) for name in names for b in (len(text), 1023)]  # 1023: the most a context of 1,024 takes
    rows = kvevict.perplexity(model, text, runs)
    assert len(rows) == len(runs) + 1
    full = rows[0]
    assert full["policy"] is None and full["budget"] is None and full["params"] == {}
    assert full["predictions"] == len(text) - 1 and full["evicted"] == 0
    for (name, budget), row in zip(runs, rows[1:]):
        assert set(row) == ROW_KEYS
        assert (row["policy"], row["budget"]) == (name, budget)
        assert row["perplexity"] == full["perplexity"], (name, budget)
        assert row["bitsPerByte"] == full["bitsPerByte"] and row["evicted"] == 0
        assert row["extraBitsPerByte"] == 0.0
        assert row["extraLow"] is None and row["extraHigh"] is None  # one window: no interval
    assert full["extraBitsPerByte"] is None and full["extraLow"] is None and full["extraHigh"] is None


@pytest.mark.parametrize("n", [100, 300])
def test_sliding_window_evicts_one_position_per_head_per_step(model, heldout, n):
    """Tokens 0 ... n-2 are fed; from position 8 on each step evicts one per head."""
    rows = kvevict.perplexity(model, heldout[:n], [("sliding-window", 8)])
    caches = model.config["layers"] * model.config["kv_heads"]
    assert heads_of(model) == caches
    assert rows[1]["evicted"] == caches * (n - 1 - 8)
    assert rows[1]["predictions"] == rows[0]["predictions"] == n - 1
    assert rows[1]["perplexity"] != rows[0]["perplexity"]


def test_runs_and_their_parameters(model, text):
    rows = kvevict.perplexity(model, bytearray(text), [
        kvevict.Scissorhands(64, recent_window=16),     # a Policy: its parameters, its budget
        ("h2o", 48, {"recent_window": 8, "sinks": 2}),  # name, budget, params
        ["tova", None],                                 # None: the default budget
        "snapkv",                                       # a name alone
        ("pyramidkv", 64),                              # layer and depth from the model
    ])
    assert [(r["policy"], r["budget"]) for r in rows[1:]] == [
        ("scissorhands", 64), ("h2o", 48), ("tova", 512), ("snapkv", 512), ("pyramidkv", 64)]
    assert rows[1]["params"]["recentWindow"] == 16 and rows[1]["params"]["budget"] == 64
    assert rows[2]["params"] == {"budget": 48, "recentWindow": 8, "sinks": 2, "normalize": 0}
    assert rows[5]["params"]["numLayers"] == 4 and rows[5]["params"]["layer"] == 0
    # Budgets of 512 never bind on 300 bytes; 64 and 48 do.
    assert rows[3]["perplexity"] == rows[4]["perplexity"] == rows[0]["perplexity"]
    assert rows[1]["evicted"] > 0 and rows[2]["evicted"] > 0 and rows[5]["evicted"] > 0


def test_text_forms_give_the_same_result(model, text, tmp_path):
    file = tmp_path / "text.bin"
    file.write_bytes(text)
    want = kvevict.perplexity(model, text)[0]["perplexity"]
    for form in (bytearray(text), memoryview(text), np.frombuffer(text, dtype=np.uint8), file):
        assert kvevict.perplexity(model, form)[0]["perplexity"] == want, type(form)
    strided = memoryview(text + text)[::2]  # a non-contiguous view: its own bytes
    assert kvevict.perplexity(model, strided)[0]["perplexity"] == \
        kvevict.perplexity(model, (text + text)[::2])[0]["perplexity"]


def test_windows_and_max_windows(model, heldout):
    context = model.config["context"]
    long = heldout[:context + 200]
    assert len(long) == context + 200, "heldout-sample.txt is too short"
    rows = kvevict.perplexity(model, long)
    assert rows[0]["predictions"] == len(long) - 2  # two windows
    first = kvevict.perplexity(model, long, max_windows=1)
    assert first[0]["predictions"] == context - 1
    assert first[0]["perplexity"] == kvevict.perplexity(model, long[:context])[0]["perplexity"]


def test_perplexity_at_a_kv_precision(model, text):
    """The fp32 full cache first, then the full cache at the precision; an
    int4 window longer than the text never fills, so nothing changes; int8
    costs 32 codes and a scale per key and value (72 bytes a position)."""
    plain = kvevict.perplexity(model, text, [("sliding-window", 8)])
    same = kvevict.perplexity(model, text, [("sliding-window", 8)], kv_precision="int4", kv_residual=1000)
    assert [r["kvPrecision"] for r in same] == ["fp32", "int4", "int4"]
    assert same[0]["extraBitsPerByte"] is None and same[1]["policy"] is None
    assert same[1]["perplexity"] == plain[0]["perplexity"] and same[1]["extraBitsPerByte"] == 0
    assert same[2]["perplexity"] == plain[1]["perplexity"]
    # What a position really costs: its row stays fp32, 2 x 32 floats, not int4's 44 + 256 / 1000.
    assert same[1]["kvResidual"] == 1000 and same[1]["bytesPerPosition"] == 256
    int8 = kvevict.perplexity(model, text, kv_precision="int8")
    assert int8[1]["bytesPerPosition"] == 72 and int8[1]["peakCacheBytes"] == (len(text) - 1) * 72
    assert int8[0]["peakCacheBytes"] == (len(text) - 1) * 256
    with pytest.raises(ValueError, match=r"perplexity: kv_precision: 'int3' is not a KV precision"):
        kvevict.perplexity(model, text, kv_precision="int3")
    with pytest.raises(TypeError, match="kv_precision must be a str"):
        kvevict.perplexity(model, text, kv_precision=8)
    with pytest.raises(ValueError, match="needs a quantized --kv-precision"):
        kvevict.perplexity(model, text, kv_residual=4)
    ranked = kvevict.compare_model(model, text, ["sliding-window", "tova"], [16, 32], kv_precision="fp16")
    assert ranked[1]["kvPrecision"] == "fp16" and ranked[1]["rank"] is None
    assert {r["kvPrecision"] for r in ranked[2:]} == {"fp16"}


def test_sweep_model_is_perplexity_over_each_value(model, text):
    """sweep_model's rows are perplexity()'s over value x budget, value-major,
    the value in each row's params."""
    rows = kvevict.sweep_model(model, text, "h2o", "recent_window", [4, 12], budgets=[24, 48], params={"sinks": 2})
    assert [(r["budget"], r["params"].get("recentWindow")) for r in rows[1:]] == [(24, 4), (48, 4), (24, 12), (48, 12)]
    assert all(r["params"]["sinks"] == 2 for r in rows[1:])
    same = kvevict.perplexity(model, text, [("h2o", 48, {"recentWindow": 12, "sinks": 2})])
    assert rows[4]["perplexity"] == same[1]["perplexity"] and rows[0]["perplexity"] == same[0]["perplexity"]
    budgets = kvevict.sweep_model(model, text, "sliding-window", "budget", [16, 32], kv_precision="int8")
    assert [r["budget"] for r in budgets[2:]] == [16, 32] and budgets[1]["kvPrecision"] == "int8"
    with pytest.raises(ValueError, match="unknown parameter 'window_size'"):
        kvevict.sweep_model(model, text, "h2o", "window_size", [1])
    with pytest.raises(TypeError, match="values must be a sequence of integers"):
        kvevict.sweep_model(model, text, "h2o", "recent_window", 8)


def test_perplexity_errors(model, text):
    with pytest.raises(ValueError, match=r"Scissorhands: recentWindow \(32\) must be smaller than budget \(16\)"):
        kvevict.perplexity(model, text, [("scissorhands", 16)])
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        kvevict.perplexity(model, text, [("h2o", 64), ("nope", 64)])
    with pytest.raises(ValueError, match="unknown parameter 'foo'"):
        kvevict.perplexity(model, text, [("h2o", 64, {"foo": 1})])
    with pytest.raises(ValueError, match=r"budget \(0\) must be at least 1"):
        kvevict.perplexity(model, text, [("tova", 0)])
    with pytest.raises(TypeError, match="text must be bytes, not str"):
        kvevict.perplexity(model, text.decode("latin-1"))
    with pytest.raises(TypeError, match="1-D buffer of bytes"):
        kvevict.perplexity(model, np.zeros(8, dtype=np.int32))
    with pytest.raises(RuntimeError, match="fewer than 2 bytes"):
        kvevict.perplexity(model, b"a")
    with pytest.raises(RuntimeError, match="not a readable file"):
        kvevict.perplexity(model, Path("/nonexistent/text.txt"))
    with pytest.raises(TypeError, match="runs must be a list"):
        kvevict.perplexity(model, text, "h2o")
    with pytest.raises(ValueError, match="a run is a policy"):
        kvevict.perplexity(model, text, [("h2o",)])
    with pytest.raises(TypeError, match="a run is a policy"):
        kvevict.perplexity(model, text, [42])
    with pytest.raises(TypeError, match="params must be a dict"):
        kvevict.perplexity(model, text, [("h2o", 64, [1])])
    with pytest.raises(ValueError, match="max_windows"):
        kvevict.perplexity(model, text, max_windows=-1)
    with pytest.raises(TypeError, match="model must be a kvevict.Model"):
        kvevict.perplexity(str(KVM), text)


def test_perplexity_releases_the_gil(model, heldout):
    elapsed, ticks = ticks_during(
        lambda: kvevict.perplexity(model, heldout[:600], [("h2o", 64), ("tova", 64), ("sliding-window", 64)]))
    assert elapsed < 0.05 or ticks >= 5, (elapsed, ticks)


# ---- compare_model -------------------------------------------------------------------


def test_compare_model(model, text):
    policies, budgets = ["sliding-window", "tova", "h2o"], [40, 64]
    rows = kvevict.compare_model(model, text, policies, budgets, overrides={"recent_window": 16})
    assert len(rows) == 1 + len(policies) * len(budgets)
    full = rows[0]
    assert full["policy"] is None and full["rank"] is None and full["retainedAttentionMass"] is None
    assert set(full) == ROW_KEYS | {"rank", "retainedAttentionMass", "heavyHitterRecall", "evictionCalls"}
    # The same perplexities as perplexity() over the same runs.
    plain = kvevict.perplexity(model, text, [(p, b, {"recent_window": 16} if p == "h2o" else {})
                                             for p in policies for b in budgets])
    by_run = {(r["policy"], r["budget"]): r for r in plain[1:]}
    assert full["perplexity"] == plain[0]["perplexity"]
    for r in rows[1:]:
        assert r["perplexity"] == by_run[(r["policy"], r["budget"])]["perplexity"]
        assert r["evicted"] == by_run[(r["policy"], r["budget"])]["evicted"]
        assert 0 < r["retainedAttentionMass"] < 1 and 0 < r["heavyHitterRecall"] <= 1
    assert all(r["params"]["recentWindow"] == 16 for r in rows if r["policy"] == "h2o")
    # Ranked by perplexity at the lower middle budget (40), ties sharing a rank;
    # each policy's rows together, by ascending budget.
    at = {r["policy"]: r["perplexity"] for r in rows[1:] if r["budget"] == 40}
    ordered = sorted(at.values())
    for r in rows[1:]:
        assert r["rank"] == ordered.index(at[r["policy"]]) + 1
    assert [r["rank"] for r in rows[1:]] == sorted(r["rank"] for r in rows[1:])
    for p in policies:
        assert [r["budget"] for r in rows if r["policy"] == p] == budgets
    # The proxies replay the recorded attention through the harness: a
    # sliding window evicts once per step from step `budget` on, per head.
    for r in rows[1:]:
        if r["policy"] == "sliding-window":
            assert r["evictionCalls"] == heads_of(model) * (len(text) - r["budget"])


def test_compare_model_runs_a_named_key_aware_policy(model, text):
    # Its perplexity is perplexity()'s; its proxies replay the window's keys.
    rows = kvevict.compare_model(model, text, ["knorm", "h2o"], [48], max_windows=1)
    knorm = next(r for r in rows if r["policy"] == "knorm")
    assert 0.0 < knorm["retainedAttentionMass"] < 1.0 and knorm["evictionCalls"] > 0
    plain = kvevict.perplexity(model, text, [("knorm", 48)], max_windows=1)
    assert knorm["perplexity"] == plain[1]["perplexity"]
    # "all" is still the seven attention and positional policies.
    every = kvevict.compare_model(model, text, "all", [48], max_windows=1)
    assert len(every) == 1 + 7 and all(r["policy"] not in ("knorm", "keydiff", "expected-attention") for r in every)


def test_compare_model_errors(model, text):
    with pytest.raises(ValueError, match=r"recentWindow \(32\) must be smaller than budget \(16\)"):
        kvevict.compare_model(model, text, ["scissorhands"], [16, 64])
    with pytest.raises(ValueError, match="the budget list is empty"):
        kvevict.compare_model(model, text, budgets=[])
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        kvevict.compare_model(model, text, ["nope"])


# ---- the prefill moment --------------------------------------------------------------


def test_prefill_with_a_budget_that_holds_it_is_the_full_cache(model, text):
    prefill = 200
    rows = kvevict.perplexity(model, text, [("snapkv", prefill), ("tova", 256)], prefill=prefill)
    full = rows[0]
    # Only the bytes after the prefill are scored: len(text) - 1 - prefill predictions.
    assert full["predictions"] == len(text) - 1 - prefill
    for r in rows:
        assert r["prefill"] == prefill
        assert list(r)[list(r).index("params") + 1] == "prefill"
    for r in rows[1:]:
        assert r["evicted"] == 0
        assert r["perplexity"] == full["perplexity"]


def test_prefill_compresses_every_cache_once(model, text):
    prefill, budget = 200, 64
    full, window = kvevict.perplexity(model, text, [("sliding-window", budget)], prefill=prefill,
                                      prefill_window=8)
    # One compression per cache, from the prefill down to the budget; nothing after.
    assert window["evicted"] == heads_of(model) * (prefill - budget)
    assert window["predictions"] == full["predictions"] == len(text) - 1 - prefill
    assert window["perplexity"] != full["perplexity"]
    # Decode-time eviction of the same window scores every byte and evicts once a step past the budget.
    decode = kvevict.perplexity(model, text, [("sliding-window", budget)])[1]
    assert "prefill" not in decode
    assert decode["predictions"] == len(text) - 1
    assert decode["evicted"] == heads_of(model) * (len(text) - 1 - budget)


def test_compare_model_with_a_prefill_has_no_proxies(model, text):
    rows = kvevict.compare_model(model, text, ["snapkv", "sliding-window"], [64, 128], prefill=200)
    assert [r["rank"] for r in rows][0] is None
    for r in rows:
        assert r["prefill"] == 200
        assert "retainedAttentionMass" not in r and "evictionCalls" not in r
    plain = kvevict.perplexity(model, text, [("snapkv", 64), ("snapkv", 128), ("sliding-window", 64),
                                             ("sliding-window", 128)], prefill=200)
    by_run = {(r["policy"], r["budget"]): r["perplexity"] for r in plain[1:]}
    for r in rows[1:]:
        assert r["perplexity"] == by_run[(r["policy"], r["budget"])]


def test_prefill_errors(model, text):
    context = model.config["context"]
    with pytest.raises(ValueError, match=rf"--prefill \({context}\) must be below the model's context"):
        kvevict.perplexity(model, text, prefill=context)
    with pytest.raises(ValueError, match="does not combine with the paged options"):
        kvevict.perplexity(model, text, [("tova", 64)], prefill=100, paged={"block_size": 16})
    with pytest.raises(ValueError, match=r"prefill_window \(0\) must be at least 1"):
        kvevict.perplexity(model, text, prefill=100, prefill_window=0)
    with pytest.raises(ValueError, match=r"prefill \(-1\) must be at least 0"):
        kvevict.compare_model(model, text, prefill=-1)
    with pytest.raises(RuntimeError, match="leaves nothing to predict"):
        kvevict.perplexity(model, text[:100], prefill=100)


# ---- record_attention and persistence ------------------------------------------------


def test_record_attention(model, text):
    n = 120
    a = kvevict.record_attention(model, text, tokens=n)
    assert a.dtype == np.float32 and a.shape == (heads_of(model), n, n)
    assert np.all(a[:, 0, :] == 0)
    assert np.all(a >= 0)
    for t in range(1, n):
        assert np.all(a[:, t, t:] == 0), t
    sums = a[:, 1:, :].sum(axis=2, dtype=np.float64)
    assert np.all(sums < 1) and np.all(sums > 0)  # the weight on itself is left out
    # Row t is what the decoder's head gave positions 0 ... t-1 at step t.
    decoder = kvevict.Decoder(model, n)
    for t in range(n):
        decoder.step(text[t])
        if t in (1, 50, n - 1):
            for h in (0, 7, decoder.head_count - 1):
                assert np.array_equal(a[h, t, :t], decoder.attention(h)[:t])
    # tokens=0: as much as the context holds, here the whole text.
    assert kvevict.record_attention(model, text[:40]).shape == (heads_of(model), 40, 40)
    context = model.config["context"]
    for bad in (1, context + 1):
        with pytest.raises(ValueError, match=rf"tokens \({bad}\) must be in 2 \.\.\. {context}"):
            kvevict.record_attention(model, text, bad)
    with pytest.raises(ValueError, match="tokens"):
        kvevict.record_attention(model, text, -1)


def test_persistence_of_a_known_pattern():
    """Head 0 puts all its weight on position 0 (important from step 2 on,
    forever); head 1 gives nothing any weight (never important)."""
    n = 10
    a = np.zeros((2, n, n), dtype=np.float32)
    a[0, 1:, 0] = 1.0
    rows = kvevict.persistence(a, [3, 1, 3, 8])
    assert [r["lag"] for r in rows] == [1, 3, 8]
    steps = n - 1
    for r in rows:
        k = r["lag"]
        important = max(steps - k - 1, 0)  # steps t - k >= 2 with t <= steps
        assert r["important"] == r["persisted"] == important
        assert r["share"] == pytest.approx(((1.0 if important else 0.0) + 0.0) / 2)
        base = np.mean([1.0 / t for t in range(k + 1, steps + 1)])
        assert r["baseRate"] == pytest.approx(base / 2)
    one = kvevict.persistence(a[0].astype(np.float64).tolist(), [1])  # [N, N], any real dtype
    assert one[0]["share"] == 1.0 and one[0]["important"] == steps - 2


def test_persistence_of_recorded_attention(model, text):
    a = kvevict.record_attention(model, text, tokens=64)
    rows = kvevict.persistence(a, [1, 4, 16])
    assert [r["lag"] for r in rows] == [1, 4, 16]
    for r in rows:
        assert 0 <= r["persisted"] <= r["important"] and 0 <= r["share"] <= 1 and 0 < r["baseRate"] < 1
    assert rows[0]["important"] > 0


def test_persistence_errors():
    a = np.zeros((1, 10, 10), dtype=np.float32)
    for lags in ([0], [9], []):
        with pytest.raises(ValueError, match="persistence"):
            kvevict.persistence(a, lags)
    with pytest.raises(ValueError, match="N >= 2"):
        kvevict.persistence(np.zeros((2, 3, 4)), [1])
    with pytest.raises(ValueError, match="N >= 2"):
        kvevict.persistence(np.zeros(5), [1])
    with pytest.raises(TypeError, match="real numbers"):
        kvevict.persistence(np.array([["a", "b"], ["c", "d"]]), [1])
    with pytest.raises(TypeError, match="lags must be a sequence"):
        kvevict.persistence(a, 1)
    with pytest.raises(ValueError, match="no trace heads"):
        kvevict.persistence(np.zeros((0, 4, 4)), [1])


# ---- robustness ----------------------------------------------------------------------


def test_no_crash_on_arbitrary_arguments(model, text):
    decoder = kvevict.Decoder(model, 8)
    short = text[:20]
    entry_points = [
        lambda v: kvevict.Model(v),
        lambda v: kvevict.Decoder(v),
        lambda v: kvevict.Decoder(model, v),
        lambda v: decoder.step(v),
        lambda v: decoder.held(v),
        lambda v: decoder.attended(v),
        lambda v: decoder.attention(v),
        lambda v: decoder.policy(v),
        lambda v: decoder.set_policy(v, None),
        lambda v: decoder.set_policy(0, v),
        lambda v: decoder.set_policy(0, kvevict.TOVA(4), v),
        lambda v: kvevict.perplexity(v, short),
        lambda v: kvevict.perplexity(model, v),
        lambda v: kvevict.perplexity(model, short, v),
        lambda v: kvevict.perplexity(model, short, [v]),
        lambda v: kvevict.perplexity(model, short, [("tova", v)]),
        lambda v: kvevict.perplexity(model, short, [("tova", 4, v)]),
        lambda v: kvevict.perplexity(model, short, None, v),
        lambda v: kvevict.compare_model(model, short, v, [4]),
        lambda v: kvevict.compare_model(model, short, ["tova"], v),
        lambda v: kvevict.compare_model(model, short, ["tova"], [4], v),
        lambda v: kvevict.record_attention(model, v),
        lambda v: kvevict.record_attention(model, short, v),
        lambda v: kvevict.persistence(v, [1]),
        lambda v: kvevict.persistence(np.zeros((4, 4)), v),
    ]
    call_with_weird(entry_points)


def test_uninitialised_objects_are_refused_not_crashed(model):
    for cls in (kvevict.Model, kvevict.Decoder):
        o = cls.__new__(cls)
        assert "not initialised" in repr(o)
    m = kvevict.Model.__new__(kvevict.Model)
    for use in (lambda: m.config, lambda: m.path, lambda: kvevict.Decoder(m),
                lambda: kvevict.perplexity(m, b"ab"), lambda: kvevict.record_attention(m, b"ab")):
        with pytest.raises(TypeError, match="not initialised"):
            use()
    d = kvevict.Decoder.__new__(kvevict.Decoder)
    for use in (lambda: d.step(1), lambda: d.position, lambda: d.held(0), lambda: d.reset(),
                lambda: d.set_policy(0, None)):
        with pytest.raises(TypeError, match="not initialised"):
            use()
