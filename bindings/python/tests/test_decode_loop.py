"""How an inference loop uses the binding: one policy per (layer, head), fed
the attention row of the newest token each step, its victims dropped from the
KV cache. The PyTorch variant runs only when torch is installed (it is not
required); the NumPy variant always runs."""

from __future__ import annotations

import numpy as np
import pytest

import kvevict

BUDGET, STEPS, DIM = 64, 300, 16


def decode(policy, attention_row, keys):
    """Drives `policy` over STEPS tokens; `attention_row(q, K)` returns the
    softmax row as a float32 numpy array. Returns the cache's final positions."""
    rng = np.random.default_rng(0)
    cache = {0: keys(rng)}  # position -> key vector; position 0 exists before step 1
    for pos in range(1, STEPS + 1):
        held = sorted(cache)
        assert len(held) == policy.kept_count()
        row = attention_row(keys(rng), np.stack([cache[p] for p in held]))
        policy.on_decode_step(pos, row)
        assert not policy.last_attention_copied, "the attention row was copied"
        cache[pos] = keys(rng)
        if policy.kept_count() > BUDGET:
            for victim in policy.evict(BUDGET):
                del cache[victim]
        assert len(cache) == policy.kept_count() <= BUDGET
    return sorted(cache)


def numpy_row(q, K):
    logits = (K @ q) / np.sqrt(DIM)
    e = np.exp(logits - logits.max())
    return (e / e.sum()).astype(np.float32)


@pytest.mark.parametrize("cls", [kvevict.Scissorhands, kvevict.H2O, kvevict.TOVA, kvevict.SnapKV])
def test_numpy_decode_loop(cls):
    policy = cls(budget=BUDGET) if cls is kvevict.TOVA else cls(budget=BUDGET, recent_window=8)
    kept = decode(policy, numpy_row, lambda rng: rng.standard_normal(DIM).astype(np.float32))
    assert len(kept) == BUDGET and kept[-1] == STEPS
    assert kept[-8:] == list(range(STEPS - 7, STEPS + 1)) or cls is kvevict.TOVA


def test_torch_decode_loop():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed: PyTorch variant skipped (the NumPy variant ran)")
    torch.manual_seed(0)

    def torch_row(q, K):
        logits = torch.from_numpy(K) @ torch.from_numpy(q) / DIM ** 0.5
        return torch.softmax(logits, dim=-1).numpy()  # float32, contiguous: read in place

    policy = kvevict.Scissorhands(budget=BUDGET, recent_window=8)
    kept = decode(policy, torch_row, lambda rng: rng.standard_normal(DIM).astype(np.float32))
    assert len(kept) == BUDGET and kept[-1] == STEPS
    # A tensor itself is accepted too (numpy takes it through __array__).
    p = kvevict.TOVA(budget=4)
    p.on_decode_step(1, torch.softmax(torch.zeros(1), dim=-1))
    assert p.last_attention_of(0) == 1.0


def test_layers_and_heads():
    """PyramidKV: one policy per layer, each with its own share."""
    layers = 4
    policies = [kvevict.PyramidKV(256, layer=i, num_layers=layers) for i in range(layers)]
    shares = [p.effective_budget() for p in policies]
    assert shares == [kvevict.pyramid_budget(256, i, layers, 4) for i in range(layers)]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 256 * layers
    held = [np.zeros(1, dtype=np.int64) for _ in policies]
    for pos, w in enumerate(kvevict.trace(steps=600), start=1):
        for i, p in enumerate(policies):
            attn = w[held[i]]  # the weights of this layer's held positions
            p.on_decode_step(pos, attn)
            assert not p.last_attention_copied
            held[i] = np.append(held[i], pos)
            victims = p.evict(p.effective_budget())
            held[i] = held[i][~np.isin(held[i], victims)]
    assert [p.kept_count() for p in policies] == [len(h) for h in held] == shares
