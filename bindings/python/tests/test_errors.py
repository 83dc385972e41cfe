"""Bad input never crashes: wrong types are TypeError, bad values ValueError,
broken contracts RuntimeError, each with a clear message -- the core's own,
unchanged, where the core refused it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import kvevict
from conftest import call_with_weird


def known_policies() -> str:
    return ", ".join(p["name"] for p in kvevict.policies())


def test_unknown_policy_is_value_error_with_the_core_message():
    with pytest.raises(ValueError) as e:
        kvevict.policy("nope")
    assert str(e.value) == f"unknown policy 'nope' (known: {known_policies()})"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        kvevict.Policy("nope")
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        kvevict.run("nope")
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        kvevict.compare(["h2o", "nope"])


def test_unknown_parameter_names_it_as_given():
    known = ", ".join(p["name"] for p in kvevict.policies()[0]["params"])
    with pytest.raises(ValueError) as e:
        kvevict.policy("scissorhands", recent_windw=4)
    # The nearest name comes in the registry's spelling, which the binding takes too.
    assert str(e.value) == f"Scissorhands: unknown parameter 'recent_windw': did you mean 'recentWindow'? (known: {known})"
    with pytest.raises(ValueError, match="unknown parameter 'obs_window'"):
        kvevict.H2O(obs_window=4)
    with pytest.raises(ValueError, match="unknown parameter 'foo'"):
        kvevict.run("h2o", foo=1)


def test_parameter_given_twice():
    with pytest.raises(ValueError, match="'recentWindow' given twice"):
        kvevict.policy("h2o", recent_window=4, recentWindow=8)


@pytest.mark.parametrize("budget,message", [
    (0, "H2O: budget (0) must be at least 1"),
    (-5, "H2O: budget (-5) must be at least 1"),
])
def test_bad_budget_values_are_value_errors(budget, message):
    with pytest.raises(ValueError) as e:
        kvevict.H2O(budget=budget)
    assert str(e.value) == message


def test_rule_violations_carry_the_core_message():
    with pytest.raises(ValueError, match=r"^Scissorhands: recentWindow \(32\) must be smaller than budget \(32\)"):
        kvevict.Scissorhands(budget=32)
    with pytest.raises(ValueError, match=r"^PyramidKV: layer \(4\) must be in \[0, numLayers\)"):
        kvevict.PyramidKV(layer=4, num_layers=4)
    with pytest.raises(ValueError, match="PyramidKV: layer"):
        kvevict.pyramid_budget(512, -1, 4, 4)
    with pytest.raises(ValueError, match="out of range for a 64-bit integer"):
        kvevict.H2O(budget=2**70)


@pytest.mark.parametrize("value", [2.5, 512.0, "512", None, True, [512], np.float64(3)],
                         ids=["fraction", "whole-float", "str", "None", "bool", "list", "np.float64"])
def test_non_integer_parameters_are_type_errors(value):
    with pytest.raises(TypeError, match="budget must be an integer"):
        kvevict.H2O(budget=value)
    with pytest.raises(TypeError, match="must be an integer"):
        kvevict.H2O().evict(value)
    with pytest.raises(TypeError, match="must be an integer"):
        kvevict.run("h2o", budget=value) if value is not None else kvevict.run("h2o", recent_window=value)


def test_numpy_integers_are_accepted():
    p = kvevict.H2O(budget=np.int64(8), recent_window=np.int32(2))
    assert p.params["budget"] == 8 and p.evict(np.uint8(8)) == []


def test_evict_budget():
    p = kvevict.SlidingWindow(budget=4)
    with pytest.raises(ValueError) as e:
        p.evict(-1)
    assert re.fullmatch(r"[\w ]+: evict was asked for a budget of -1; it must be at least 0", str(e.value))
    with pytest.raises(TypeError):
        p.evict(1.5)
    assert p.evict(0) == [0] and p.kept_count() == 0


@pytest.mark.parametrize("bad,what", [
    (math.nan, "NaN"), (math.inf, "inf"), (-math.inf, "-inf"), (-0.25, "-0.25"),
])
def test_bad_weights_are_refused_before_anything_changes(bad, what):
    p = kvevict.H2O(budget=8, recent_window=1)
    p.on_decode_step(1, [1.0])
    with pytest.raises(RuntimeError) as e:
        p.on_decode_step(2, np.array([0.5, bad], dtype=np.float32))
    assert re.fullmatch(rf"H2O: attention weight 1 is {re.escape(what)}; weights must be finite and at least 0",
                        str(e.value)), str(e.value)
    assert p.kept_count() == 2 and p.score_of(0) == 1.0  # unchanged
    p.on_decode_step(2, [0.5, 0.5])  # the policy still works
    assert p.kept_count() == 3


def test_contract_violations_are_runtime_errors():
    p = kvevict.H2O(budget=2, recent_window=1)
    p.on_decode_step(1, None)
    with pytest.raises(RuntimeError, match=r"^H2O: position 1 must be greater than every position held \(the newest is 1\)$"):
        p.on_decode_step(1, None)
    with pytest.raises(RuntimeError, match="position -1 is negative"):
        p.on_decode_step(-1, None)
    with pytest.raises(RuntimeError, match="does not fit in 32 bits"):
        p.on_decode_step(2**40, None)
    p.on_decode_step(2, None)
    with pytest.raises(RuntimeError, match="asked to hold 4 positions with a budget of 2"):
        p.on_decode_step(3, None)  # capacity is budget + 1: evict first
    assert p.kept_count() == 3


def test_attention_longer_than_kept_is_accepted_extra_ignored():
    a, b = kvevict.H2O(budget=8, recent_window=1), kvevict.H2O(budget=8, recent_window=1)
    a.on_decode_step(1, [1.0])
    b.on_decode_step(1, [1.0, 7.0, 9.0])  # two entries beyond the one held position
    assert a.kept_count() == b.kept_count() == 2
    assert a.score_of(0) == b.score_of(0) == 1.0 and b.score_of(1) == 0.0
    c = kvevict.H2O(budget=8, recent_window=1)
    c.on_decode_step(1, [1.0, math.nan])  # entries beyond kept are not even read
    assert c.score_of(0) == 1.0


@pytest.mark.parametrize("attn,error,message", [
    (np.zeros((2, 2), dtype=np.float32), ValueError, r"attention must be 1-D .* got a 2-D ndarray of shape \(2, 2\)"),
    ([[0.5], [0.5]], ValueError, "attention must be 1-D"),
    (np.float32(1.0), TypeError, "attention must be None or a 1-D sequence"),
    (np.array(1.0, dtype=np.float32), ValueError, "got a 0-D ndarray"),
    (["0.5"], TypeError, "attention weights must be real numbers"),
    ([0.5, None], TypeError, "attention weights must be real numbers"),
    (np.array([1j]), TypeError, "attention weights must be real numbers"),
    ({"a": 1}, TypeError, "attention must be None or a 1-D sequence"),
    (object(), TypeError, "attention must be None or a 1-D sequence"),
    ([[1.0], [1.0, 2.0]], TypeError, "attention must be None or a 1-D sequence"),
], ids=["2-D", "nested-list", "scalar", "0-D", "str", "None-inside", "complex", "dict", "object", "ragged"])
def test_bad_attention_shapes_and_types(attn, error, message):
    p = kvevict.TOVA(budget=4)
    p.on_decode_step(1, None)
    with pytest.raises(error, match=message):
        p.on_decode_step(2, attn)
    assert p.kept_count() == 2


def test_empty_attention_is_present_but_empty():
    p = kvevict.TOVA(budget=4)
    p.on_decode_step(1, np.zeros(0, dtype=np.float32))
    assert p.kept_count() == 2 and not p.last_attention_copied


def test_missing_queries():
    h = kvevict.H2O()
    with pytest.raises(AttributeError, match=r"^h2o has no votes_of\(\): its queries are score_of$"):
        h.votes_of(0)
    assert not hasattr(h, "votes_of") and hasattr(h, "score_of")
    with pytest.raises(AttributeError, match="object has no attribute 'nonsense'"):
        h.nonsense
    with pytest.raises(ValueError, match=r"^h2o has no query 'votesOf' \(its queries: score_of\)$"):
        h.query("votesOf", 0)
    with pytest.raises(TypeError, match=r"score_of\(\) takes 1 argument \(0 given\)"):
        h.query("scoreOf")
    with pytest.raises(TypeError, match="must be an integer"):
        h.score_of("0")
    with pytest.raises(AttributeError, match="sliding-window has no effective_budget"):
        kvevict.Policy("sliding-window").effective_budget()


def test_trace_errors():
    with pytest.raises(RuntimeError, match="^unknown trace 'nope' \\(known: "):
        kvevict.trace("nope")
    with pytest.raises(RuntimeError, match=r"\(0\) must be in 1 \.\.\. 4095 for trace decode-4096"):
        kvevict.trace_hash(steps=0)
    with pytest.raises(RuntimeError, match=r"\(5000\) must be in 1 \.\.\. 4095"):
        kvevict.run("h2o", steps=5000)
    with pytest.raises(TypeError, match="steps must be an integer"):
        list(kvevict.trace(steps=2.0))
    with pytest.raises(TypeError, match="trace must be a str"):
        kvevict.trace_hash(7)


def test_compare_errors():
    with pytest.raises(ValueError, match="compare: the budget list is empty"):
        kvevict.compare(budgets=[])
    with pytest.raises(ValueError, match="budget"):
        kvevict.compare(["h2o"], budgets=[0], steps=10)
    with pytest.raises(TypeError, match="budgets must be a sequence of integers"):
        kvevict.compare(budgets=512)
    with pytest.raises(TypeError, match="a budget must be an integer"):
        kvevict.compare(budgets=[256.5])
    with pytest.raises(ValueError, match="H2O has no parameter 'obs_window'"):
        kvevict.compare(["h2o"], overrides={"h2o.obs_window": 4}, steps=10)
    with pytest.raises(ValueError, match="no compared policy has a parameter 'nope'"):
        kvevict.compare(overrides={"nope": 1}, steps=10)
    with pytest.raises(ValueError, match="no policies given"):
        kvevict.compare([])
    with pytest.raises(TypeError, match="overrides must be a dict"):
        kvevict.compare(overrides=[("h2o.sinks", 1)])


def test_run_vectors_errors(tmp_path):
    with pytest.raises(RuntimeError, match="no such file or folder"):
        kvevict.run_vectors(tmp_path / "missing.vectors.json")
    with pytest.raises(TypeError):
        kvevict.run_vectors(42)
    bad = tmp_path / "broken.vectors.json"
    bad.write_text("{ not json")
    report = kvevict.run_vectors(bad)
    assert report["failed"] == 1 and "is not valid JSON" in report["failures"][0]


def test_no_crash_on_arbitrary_arguments():
    """Every entry point, every odd argument: an exception of a documented kind
    or a result, never a crash."""
    p = kvevict.TOVA(budget=4)
    entry_points = [
        lambda v: kvevict.policy("h2o", budget=v),
        lambda v: kvevict.policy(v),
        lambda v: kvevict.Policy(v),
        lambda v: p.on_decode_step(v, None),
        lambda v: p.on_decode_step(p.kept_count() + 100, v),
        lambda v: p.evict(v),
        lambda v: p.query(v),
        lambda v: p.query("lastAttentionOf", v),
        lambda v: p.last_attention_of(v),
        lambda v: kvevict.pyramid_budget(v, 0, 1, 1),
        lambda v: kvevict.trace(v),
        lambda v: kvevict.trace("decode-4096", v),
        lambda v: kvevict.trace_hash("decode-4096", v),
        lambda v: kvevict.run(v, steps=5),
        lambda v: kvevict.run("tova", v, steps=5),
        lambda v: kvevict.run("tova", 4, v),
        lambda v: kvevict.compare(v, steps=5),
        lambda v: kvevict.compare(["tova"], v, steps=5),
        lambda v: kvevict.compare(["tova"], [4], v, steps=5),
        lambda v: kvevict.compare(["tova"], [4], {"tova.budget": v}, steps=5),
        lambda v: kvevict.run_vectors(v),
    ]
    call_with_weird(entry_points)


def test_uninitialised_objects_are_refused_not_crashed():
    for cls in (kvevict.Policy, kvevict.Scissorhands, kvevict.TraceIterator):
        o = cls.__new__(cls)
        assert "not initialised" in repr(o) or cls is kvevict.TraceIterator
        for use in (lambda: o.kept_count(), lambda: o.evict(1), lambda: o.on_decode_step(1, None),
                    lambda: o.params, lambda: len(o), lambda: next(o), lambda: kvevict.run(o)):
            with pytest.raises((TypeError, AttributeError)):
                use()
    with pytest.raises(TypeError):
        kvevict.Policy.evict(object(), 1)  # not a Policy at all
