"""Steps that carry more than attention (docs/signals.md) through the binding:
on_step is on_decode_step for an attention policy, a key-aware policy refuses a
step without its key (naming itself), float32 arrays are read in place, and
position 0's key comes through on_origin."""

from __future__ import annotations

import numpy as np
import pytest

import kvevict

# The stale spike (spec): position 0 draws everything at step 1, then little.
SPIKE = [[1.0], [0.9375, 0.0625], [0.0625, 0.5, 0.4375], [0.0625, 0.3125, 0.3125, 0.3125],
         [0.0, 0.25, 0.25, 0.25, 0.25]]


def test_signals_name_what_each_policy_reads():
    listed = {p["name"]: p["signals"] for p in kvevict.policies()}
    for name in ("scissorhands", "h2o", "tova", "snapkv", "pyramidkv"):
        assert listed[name] == ["attention"] and kvevict.policy(name).signals == ("attention",)
    for name in ("sliding-window", "streaming-llm"):
        assert listed[name] == [] and kvevict.policy(name).signals == ()
    assert kvevict.policy("knorm", head_dim=2).signals == ("key",)
    assert listed["knorm"] == ["key"]


@pytest.mark.parametrize("name", ["h2o", "scissorhands", "tova"])
def test_on_step_is_on_decode_step_for_an_attention_policy(name):
    plain = kvevict.policy(name, budget=3, recent_window=1) if name != "tova" else kvevict.policy(name, budget=3)
    stepped = kvevict.policy(name, **plain.params)
    stepped.on_origin(key=[9.0, 9.0])  # read by no attention policy
    for t, w in enumerate(SPIKE, start=1):
        plain.on_decode_step(t, w)
        # A key and value it does not read change nothing.
        stepped.on_step(t, attention=w, key=[1.0, 2.0], value=[3.0])
        assert plain.evict(3) == stepped.evict(3)
        assert plain.kept_count() == stepped.kept_count()
    assert plain.evict(2) == stepped.evict(2) != []


def test_on_step_with_no_attention_is_absent_attention():
    a = kvevict.policy("tova", budget=2)
    b = kvevict.policy("tova", budget=2)
    a.on_decode_step(1, None)
    b.on_step(1)
    a.on_decode_step(2, [0.5, 0.5])
    b.on_step(2, attention=[0.5, 0.5])
    assert a.evict(2) == b.evict(2)


def test_knorm_evicts_the_largest_key_norm():
    # Norms 5, 1, 2 (exact in binary): position 0 goes.
    p = kvevict.policy("knorm", budget=2, head_dim=2)
    p.on_origin(key=np.array([3.0, 4.0], dtype=np.float32))
    p.on_step(1, key=[1.0, 0.0])
    p.on_step(2, key=(0.0, 2.0))
    assert p.key_norm_of(0) == 5.0 and p.key_norm_of(2) == 2.0
    assert p.evict(2) == [0]
    assert p.kept_count() == 2


def test_a_key_aware_policy_refuses_a_step_without_its_key():
    p = kvevict.policy("knorm", budget=2, head_dim=2)
    p.on_step(1, key=[1.0, 0.0])
    with pytest.raises(RuntimeError, match="KNorm") as e:
        p.on_step(2, attention=[0.5, 0.5])
    assert "key" in str(e.value)
    with pytest.raises(RuntimeError, match="KNorm"):
        p.on_step(2, key=[1.0, 0.0, 0.0])  # headDim is 2
    with pytest.raises(RuntimeError, match="KNorm"):
        p.on_decode_step(2, [0.5, 0.5])  # weights alone are not enough
    assert p.kept_count() == 2  # nothing changed
    p.on_step(2, key=[0.0, 0.5])
    assert p.kept_count() == 3


def test_signals_are_read_in_place_and_checked_like_attention():
    p = kvevict.policy("h2o", budget=4, recent_window=1)
    attn = np.array([1.0], dtype=np.float32)
    p.on_step(1, attention=attn, key=np.zeros(4, dtype=np.float32))
    assert not p.last_attention_copied
    assert p.last_attention_address == attn.__array_interface__["data"][0]
    p.on_step(2, attention=[0.5, 0.5])
    assert p.last_attention_copied
    p.on_step(3)
    assert p.last_attention_address == 0
    with pytest.raises(ValueError, match="key must be 1-D"):
        p.on_step(4, key=np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="queries must be real numbers"):
        p.on_step(4, queries=np.array(["a"]))
    with pytest.raises(TypeError, match="value must be None or a 1-D sequence"):
        p.on_origin(value=3.0)
    assert p.kept_count() == 4


def test_knorm_through_a_block_evictor_and_a_layer_budget():
    ev = kvevict.BlockEvictor("knorm", 2, 1, head_dim=2)
    ev.on_origin(key=[3.0, 4.0])
    ev.on_step(1, key=[1.0, 0.0])
    ev.on_step(2, key=[0.0, 2.0])
    assert ev.evict_blocks(2) == [0]
    with pytest.raises(RuntimeError, match="KNorm"):
        ev.on_step(3)
    layer = kvevict.LayerBudget("knorm", 2, 4, 1, head_dim=2)
    for h, keys in enumerate(([1.0, 0.0], [3.0, 4.0])):
        layer.on_origin(h, key=keys)
        layer.on_step(h, 1, key=keys)
        layer.on_step(h, 2, key=[0.0, 0.5])
    assert [layer.kept_count(h) for h in range(2)] == [3, 3]
    with pytest.raises(RuntimeError, match="KNorm"):
        layer.on_step(0, 3, attention=[0.25, 0.25, 0.5])


def test_expected_attention_reads_keys_values_and_queries():
    # No RoPE, mean query (2, 0) over positions 0..2: logits 2 k[0] / sqrt 2,
    # so the key (-1, 0) goes; the softmax over (0.5, 1, -1) x sqrt 2 decides.
    p = kvevict.policy("expected-attention", budget=2, head_dim=2, sinks=0, rope_base=0, covariance=0,
                       value_norm=0)
    assert p.signals == ("key", "value", "queries")
    q = np.array([2.0, 0.0], dtype=np.float32)
    v = [1.0, 0.0]
    p.on_origin(key=[0.5, 0.0], value=v, queries=q)
    p.on_step(1, key=[1.0, 0.0], value=v, queries=q)
    with pytest.raises(RuntimeError, match="ExpectedAttention: the step gives no queries"):
        p.on_step(2, key=[-1.0, 0.0], value=v)
    assert p.kept_count() == 2 and p.modelled_queries() == 2  # nothing changed
    p.on_step(2, key=[-1.0, 0.0], value=v, queries=q)
    assert p.logit_of(2, 0) == pytest.approx(-2 / np.sqrt(2), abs=1e-12)
    assert p.evict(2) == [2]
    # Kept 0 and 1: softmax of (0.5, 1) x sqrt 2.
    e0, e1 = np.exp(0.5 * np.sqrt(2)), np.exp(np.sqrt(2))
    assert p.score_of(0) == pytest.approx(e0 / (e0 + e1), abs=1e-12)
