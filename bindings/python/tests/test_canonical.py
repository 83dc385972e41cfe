"""The 21 canonical rows (decode-4096, every policy at its defaults, budgets
256/512/1024), pinned: through kvevict.compare(), through kvevict.run(), and
through a harness written in Python that drives the policies step by step."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvevict
from conftest import conformance_dir

# (policy, budget, retained attention mass, heavy-hitter recall, eviction calls):
# facts about decode-4096, as pinned in tests/canonical_test.cpp.
CANONICAL = [
    ("sliding-window", 256, 0.596637, 0.742171, 3840),
    ("sliding-window", 512, 0.655518, 0.774107, 3584),
    ("sliding-window", 1024, 0.754149, 0.833734, 3072),
    ("streaming-llm", 256, 0.736691, 0.859419, 3840),
    ("streaming-llm", 512, 0.786153, 0.88348, 3584),
    ("streaming-llm", 1024, 0.866203, 0.927572, 3072),
    ("h2o", 256, 0.643895, 0.886261, 3840),
    ("h2o", 512, 0.714859, 0.913715, 3584),
    ("h2o", 1024, 0.784413, 0.945091, 3072),
    ("scissorhands", 256, 0.641318, 0.882339, 3840),
    ("scissorhands", 512, 0.711377, 0.906047, 3584),
    ("scissorhands", 1024, 0.784746, 0.945091, 3072),
    ("tova", 256, 0.778128, 0.882339, 3840),
    ("tova", 512, 0.824012, 0.909793, 3584),
    ("tova", 1024, 0.885888, 0.937247, 3072),
    ("snapkv", 256, 0.783378, 0.890183, 3840),
    ("snapkv", 512, 0.82119, 0.901949, 3584),
    ("snapkv", 1024, 0.888049, 0.941169, 3072),
    ("pyramidkv", 256, 0.783378, 0.890183, 3840),
    ("pyramidkv", 512, 0.82119, 0.901949, 3584),
    ("pyramidkv", 1024, 0.888049, 0.941169, 3072),
]
CANONICAL_HASH = 3136039440  # FNV-1a 32 of all 4,095 steps of decode-4096
STEPS = 4095


@pytest.fixture(scope="module")
def canonical():
    return kvevict.compare()


def test_compare_reproduces_all_21_rows_exactly(canonical):
    assert list(canonical) == ["command", "model", "rows", "trace"] and canonical["command"] == "compare"
    assert canonical["trace"] == "decode-4096"
    rows = {(r["policy"], r["budget"]): r for r in canonical["rows"]}
    assert len(canonical["rows"]) == 21 and len(rows) == 21
    for policy, budget, mass, recall, calls in CANONICAL:
        r = rows[(policy, budget)]
        got = (r["metrics"]["retainedAttentionMass"], r["metrics"]["heavyHitterRecall"],
               r["metrics"]["evictionCalls"])
        assert got == (mass, recall, calls), f"{policy}@{budget}"
        assert r["steps"] == STEPS and r["trace"] == "decode-4096"
        assert r["params"]["budget"] == budget


def test_compare_is_ranked_by_mass_at_512(canonical):
    at_512 = [r["metrics"]["retainedAttentionMass"] for r in canonical["rows"] if r["budget"] == 512]
    assert at_512 == sorted(at_512, reverse=True)
    assert canonical["rows"][0]["policy"] == "tova"
    assert canonical["rows"][-1]["policy"] == "sliding-window"


@pytest.mark.parametrize("policy,budget,mass,recall,calls", CANONICAL,
                         ids=[f"{p}@{b}" for p, b, *_ in CANONICAL])
def test_run_reproduces_each_row(policy, budget, mass, recall, calls):
    r = kvevict.run(policy, budget)
    assert (r["metrics"]["retainedAttentionMass"], r["metrics"]["heavyHitterRecall"],
            r["metrics"]["evictionCalls"]) == (mass, recall, calls)
    assert r["evicted"] == calls  # one position per eviction once the cache is full


def round6(x: float) -> float:
    return np.floor(x * 1e6 + 0.5) / 1e6


def test_python_harness_reproduces_all_21_rows():
    """spec/domain.md §2 in Python: one pass over kvevict.trace(); each step,
    measure the held share and the held part of the top 32, then feed the
    policy the held weights (a float32 array, read in place) and evict down to
    the budget. Every figure must equal the C++ harness's, bit for bit."""
    runs = []
    for policy, budget, *_ in CANONICAL:
        runs.append({
            "policy": kvevict.policy(policy, budget=budget), "budget": budget,
            "kept": np.zeros(1, dtype=np.int64), "is_kept": np.zeros(STEPS + 1, dtype=bool),
            "mass": 0.0, "hits": 0, "possible": 0, "calls": 0,
        })
        runs[-1]["is_kept"][0] = True
    for t, w in enumerate(kvevict.trace("decode-4096"), start=1):
        assert w.dtype == np.float32 and w.shape == (t,)
        top = np.argsort(-w, kind="stable")[:32]  # the 32 largest, ties to the lower position
        for run in runs:
            attn = w[run["kept"]]  # held weights, ascending positions: float32, contiguous
            run["mass"] += float(np.cumsum(attn, dtype=np.float64)[-1])  # sequential float64 sum
            run["hits"] += int(run["is_kept"][top].sum())
            run["possible"] += len(top)
            run["policy"].on_decode_step(t, attn)
            assert not run["policy"].last_attention_copied
            run["kept"] = np.append(run["kept"], t)
            run["is_kept"][t] = True
            if len(run["kept"]) > run["budget"]:
                run["calls"] += 1
                victims = np.asarray(run["policy"].evict(run["budget"]), dtype=np.int64)
                assert victims.size and run["is_kept"][victims].all(), "victims must be held"
                run["is_kept"][victims] = False
                run["kept"] = run["kept"][run["is_kept"][run["kept"]]]
                assert len(run["kept"]) <= run["budget"]
                assert run["policy"].kept_count() == len(run["kept"])
    for run, (policy, budget, mass, recall, calls) in zip(runs, CANONICAL):
        got = (round6(run["mass"] / STEPS), round6(run["hits"] / run["possible"]), run["calls"])
        assert got == (mass, recall, calls), f"{policy}@{budget}"


def fnv1a(arrays) -> int:
    h = 0x811C9DC5
    for a in arrays:
        for byte in np.asarray(a, dtype="<f4").tobytes():
            h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def test_trace_hash_and_iterator():
    assert kvevict.trace_hash() == CANONICAL_HASH
    assert kvevict.trace_hash("decode-4096", STEPS) == CANONICAL_HASH
    assert fnv1a(kvevict.trace(steps=60)) == kvevict.trace_hash(steps=60)
    it = kvevict.trace(steps=3)
    assert (it.id, it.steps, it.step, it.__length_hint__()) == ("decode-4096", 3, 0, 3)
    first = next(it)
    assert first.tolist() == [1.0] and it.step == 1
    assert [a.shape for a in it] == [(2,), (3,)]
    assert sum(1 for _ in kvevict.trace()) == STEPS


def test_peer_canonical_files():
    peer = conformance_dir()
    if peer is None:
        pytest.skip("../shared/conformance/policybook is absent: peer canonical.json and "
                    "trace-prefix.json not checked")
    doc = json.loads((peer / "canonical.json").read_text())
    pinned = {(p, b): (m, r, c) for p, b, m, r, c in CANONICAL}
    assert len(doc["rows"]) == 21
    for r in doc["rows"]:
        assert pinned[(r["policy"], r["budget"])] == (
            r["retainedAttentionMass"], r["heavyHitterRecall"], r["evictionCalls"])
    prefix = json.loads((peer / "trace-prefix.json").read_text())["traces"]["decode-4096"]
    got = [a.view(np.uint32).tolist() for a in kvevict.trace(steps=prefix["steps"])]
    assert got == prefix["firstStepBits"]
    assert kvevict.trace_hash() == prefix["hash"]
