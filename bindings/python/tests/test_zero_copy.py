"""A float32, C-contiguous numpy array reaches the core without a copy: the
address the core received is the array's own buffer. Anything else is
converted first, and the binding says so."""

from __future__ import annotations

import array

import numpy as np
import pytest

import kvevict


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def fresh(kept: int = 4) -> kvevict.Policy:
    p = kvevict.H2O(budget=16, recent_window=1)
    for pos in range(1, kept):
        p.on_decode_step(pos, None)
    assert p.kept_count() == kept
    return p


def test_float32_array_is_read_in_place():
    p = fresh()
    a = np.array([0.125, 0.25, 0.125, 0.5], dtype=np.float32)
    p.on_decode_step(4, a)
    assert p.last_attention_copied is False
    assert p.last_attention_address == address(a)
    assert [p.score_of(i) for i in range(4)] == [0.125, 0.25, 0.125, 0.5]


def test_read_only_and_sliced_contiguous_arrays_are_read_in_place():
    p = fresh()
    a = np.array([0.25] * 4, dtype=np.float32)
    a.flags.writeable = False  # a copy would have to be made writeable; none is made
    p.on_decode_step(4, a)
    assert not p.last_attention_copied and p.last_attention_address == address(a)
    big = np.arange(10, dtype=np.float32) / 100
    p.on_decode_step(5, big[2:7])  # a contiguous view into a larger buffer
    assert not p.last_attention_copied and p.last_attention_address == address(big) + 8


def test_buffer_shared_with_another_owner_is_read_in_place():
    p = fresh()
    buf = array.array("f", [0.25, 0.25, 0.25, 0.25])  # numpy wraps the buffer, no copy
    p.on_decode_step(4, buf)
    assert not p.last_attention_copied
    assert p.last_attention_address == buf.buffer_info()[0]


@pytest.mark.parametrize("make", [
    lambda: np.array([0.25] * 4, dtype=np.float64),            # other dtype
    lambda: np.array([1, 0, 0, 0], dtype=np.int32),             # integers
    lambda: np.array([0.25] * 8, dtype=np.float32)[::2],        # strided view
    lambda: np.array([0.25] * 4, dtype=">f4"),                  # byte-swapped
    lambda: [0.25, 0.25, 0.25, 0.25],                           # a list
    lambda: (0.25, 0.25, 0.25, 0.25),                           # a tuple
], ids=["float64", "int32", "strided", "big-endian", "list", "tuple"])
def test_other_inputs_are_converted_and_flagged(make):
    p = fresh()
    a = make()
    p.on_decode_step(4, a)
    assert p.last_attention_copied is True
    if isinstance(a, np.ndarray):
        assert p.last_attention_address != address(a)
    scores = [p.score_of(i) for i in range(4)]
    assert scores == [float(x) for x in np.asarray(a, dtype=np.float32)]


def test_none_is_absent_attention():
    p = fresh()
    p.on_decode_step(4, None)
    assert p.last_attention_copied is False and p.last_attention_address == 0
    assert p.score_of(0) == 0.0 and p.kept_count() == 5


def test_no_copy_at_scale():
    """4,096 steps of the trace at budget 1024: every step read in place."""
    p = kvevict.Scissorhands(budget=1024)
    kept = np.zeros(1, dtype=np.int64)
    for t, w in enumerate(kvevict.trace(), start=1):
        attn = w[kept]
        p.on_decode_step(t, attn)
        assert not p.last_attention_copied and p.last_attention_address == address(attn)
        kept = np.append(kept, t)
        if len(kept) > 1024:
            kept = kept[~np.isin(kept, p.evict(1024))]
    assert p.kept_count() == 1024
