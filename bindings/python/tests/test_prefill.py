"""Prefill compression through Python (kvevict.prefill, docs/prefill.md): the
hand-worked cases of vectors/prefill.json, each with a float32 numpy window and
with plain lists, and the binding's own checks of the window's shape."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvevict
from conftest import OWN_VECTORS

DOC = json.loads((OWN_VECTORS / "prefill.json").read_text())
CASES = DOC["cases"]


def test_the_file_is_a_prefill_vector_file():
    assert DOC["kind"] == "kv-cache/prefill" and DOC["version"] == 1
    compressing = {c["policy"] for c in CASES if "expect" in c}
    assert compressing == {p["name"] for p in kvevict.policies() if set(p["signals"]) <= {"attention"}}


@pytest.mark.parametrize("mode", ["numpy", "list"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_prefill_vector_case(case, mode):
    window = case["window"]
    if mode == "numpy":
        window = np.asarray(window, dtype=np.float32)
    params = case.get("params", {})
    if "budget" in params:
        # Python cannot pass budget twice: the call itself is refused.
        with pytest.raises(TypeError, match="incompatible function arguments"):
            kvevict.prefill(case["policy"], window, case["budget"], **params)
        return
    if "expect" in case:
        assert kvevict.prefill(case["policy"], window, case["budget"], **params) == case["expect"]
    else:
        with pytest.raises(ValueError) as e:
            kvevict.prefill(case["policy"], window, case["budget"], **params)
        assert str(e.value) == case["error"]


def test_snake_case_parameters_and_other_dtypes():
    # The H2O/Scissorhands case of the vectors, as float64 and with snake_case.
    window = np.array([[0.75, 0.125, 0.0625, 0.0625, 0, 0],
                       [0, 0.25, 0.25, 0.25, 0.25, 0],
                       [0, 0.25, 0.25, 0.125, 0.125, 0.25]])
    assert kvevict.prefill("h2o", window, 3, recent_window=1) == [0, 1, 5]
    assert kvevict.prefill("scissorhands", window, 3, recent_window=1) == [1, 2, 5]
    # A strided view is converted, not misread.
    wide = np.zeros((3, 12), dtype=np.float32)
    wide[:, ::2] = window
    assert kvevict.prefill("h2o", wide[:, ::2], 3, recentWindow=1) == [0, 1, 5]


# The attention and positional policies: the key-aware ones score keys (prefill_signals).
@pytest.mark.parametrize("policy", [p["name"] for p in kvevict.policies() if set(p["signals"]) <= {"attention"}])
def test_a_budget_of_at_least_the_prompt_keeps_everything(policy):
    n = 9
    window = np.tril(np.ones((n, n), dtype=np.float32))[-3:] / 4
    params = {"sinks": 1} if policy == "streaming-llm" else {}
    if policy in ("h2o", "scissorhands", "snapkv", "pyramidkv"):
        params = {"recent_window": 2}
    for budget in (n, n + 1, 4096):
        assert kvevict.prefill(policy, window, budget, **params) == list(range(n))


def test_bad_windows():
    with pytest.raises(ValueError, match=r"window must be 2-D, \[rows, n\].*got shape \(3,\)"):
        kvevict.prefill("tova", [0.5, 0.25, 0.25], 1)
    with pytest.raises(ValueError, match=r"got shape \(1, 1, 2\)"):
        kvevict.prefill("tova", [[[0.5, 0.5]]], 1)
    with pytest.raises(TypeError, match="window must be a \\[rows, n\\] array"):
        kvevict.prefill("tova", None, 1)
    with pytest.raises(TypeError, match="dtype"):
        kvevict.prefill("tova", [["a", "b"]], 1)
    with pytest.raises(ValueError, match=r"^prefill: row 0 column 0 is NaN: weights must be finite and at least 0$"):
        kvevict.prefill("tova", [[float("nan")]], 1)
    with pytest.raises(ValueError, match="^prefill: the window has no rows"):
        kvevict.prefill("tova", np.zeros((0, 4), dtype=np.float32), 1)
    with pytest.raises(TypeError):
        kvevict.prefill("tova", [[1.0]], 1.5)
    with pytest.raises(ValueError, match="^TOVA: unknown parameter 'recent_window'"):
        kvevict.prefill("tova", [[1.0]], 1, recent_window=1)
