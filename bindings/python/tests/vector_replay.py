"""A test-vector runner written in Python over the binding (spec/vectors.md).

Each step calls the binding's own methods -- onDecodeStep -> on_decode_step,
onStep -> on_step, onOrigin -> on_origin, evict, keptCount -> kept_count, votesOf -> votes_of, ... -- so replaying a file
exercises the Python API, not the C++ runner.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, List

import numpy as np

import kvevict

PREFIX = "kv-cache/"


def snake_case(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)


def equal(expected: Any, actual: Any, tolerance: float) -> bool:
    """spec/vectors.md: numbers exactly or within the tolerance (NaN equals NaN,
    infinities exactly), arrays element by element with equal length, objects
    by key set then values, booleans never equal numbers."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        e, a = float(expected), float(actual)
        if math.isnan(e) or math.isnan(a):
            return math.isnan(e) and math.isnan(a)
        if math.isinf(e) or math.isinf(a):
            return e == a
        return abs(e - a) <= tolerance
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            equal(e, a, tolerance) for e, a in zip(expected, actual)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            equal(v, actual[k], tolerance) for k, v in expected.items()
        )
    return type(expected) is type(actual) and expected == actual


@dataclass
class CaseResult:
    name: str
    failures: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def execute(policy: kvevict.Policy, call: str, args: list, mode: str) -> Any:
    """One step through the binding; returns its result (None for onDecodeStep)."""
    if call == "onDecodeStep":
        if len(args) != 2:
            raise ValueError("onDecodeStep takes [pos, attention|null]")
        pos, weights = args
        if weights is None:
            policy.on_decode_step(pos, None)
        elif mode == "numpy":
            # float32, C-contiguous: the binding must read it in place.
            attn = np.asarray(weights, dtype=np.float32)
            policy.on_decode_step(pos, attn)
            if policy.last_attention_copied:
                raise AssertionError("a float32 numpy array was copied")
            if policy.last_attention_address != attn.__array_interface__["data"][0]:
                raise AssertionError("the core did not receive the caller's buffer")
        else:
            policy.on_decode_step(pos, list(weights))
        return None
    if call == "onStep":
        if len(args) != 2 or not isinstance(args[1], dict):
            raise ValueError("onStep takes [pos, {attention, key, value, queries}]")
        pos, signals = args
        given = signals_of(signals, mode)
        policy.on_step(pos, **given)
        attn = given.get("attention")
        if mode == "numpy" and attn is not None:
            if policy.last_attention_copied:
                raise AssertionError("a float32 numpy array was copied")
            if policy.last_attention_address != attn.__array_interface__["data"][0]:
                raise AssertionError("the core did not receive the caller's buffer")
        return None
    if call == "onOrigin":
        if len(args) != 1 or not isinstance(args[0], dict):
            raise ValueError("onOrigin takes [{key, value, queries}]")
        given = signals_of(args[0], mode)
        if "attention" in given:
            raise ValueError("onOrigin takes no attention")
        policy.on_origin(**given)
        return None
    if call == "evict":
        (budget,) = args
        return policy.evict(budget)
    if call == "keptCount":
        if args:
            raise ValueError("keptCount takes no arguments")
        return policy.kept_count()
    # votesOf -> votes_of, ...: a method the policy lacks raises AttributeError,
    # which fails the case as the spec requires.
    return getattr(policy, snake_case(call))(*args)


def weights_of(weights: Any, mode: str) -> Any:
    if weights is None:
        return None
    return np.asarray(weights, dtype=np.float32) if mode == "numpy" else list(weights)


SIGNALS = ("attention", "key", "value", "queries")


def signals_of(signals: dict, mode: str) -> dict:
    """A step's signals object as keyword arguments of on_step/on_origin: an
    absent field is not passed (not given), a null attention is None."""
    unknown = set(signals) - set(SIGNALS)
    if unknown:
        raise ValueError(f"unknown signal(s) {sorted(unknown)} (known: {', '.join(SIGNALS)})")
    return {name: weights_of(values, mode) for name, values in signals.items()}


def block_subject(policy_name: str, case: dict, mode: str):
    """A case with "blocks" (docs/paged.md): its steps through kvevict.BlockEvictor."""
    b = case["blocks"]
    ev = kvevict.BlockEvictor(policy_name, b.get("blockBudget", 32), b.get("blockSize", 16),
                              b.get("startBlocks", 0), b.get("recentBlocks", 0), b.get("blockScore", "sum"),
                              **case.get("params", {}))

    def run(call: str, args: list) -> Any:
        if call == "onDecodeStep":
            pos, weights = args
            return ev.on_decode_step(pos, weights_of(weights, mode))
        if call == "onStep":
            pos, signals = args
            return ev.on_step(pos, **signals_of(signals, mode))
        if call == "onOrigin":
            return ev.on_origin(**signals_of(args[0], mode))
        if call == "evictBlocks":
            return ev.evict_blocks(*args)
        if call in ("keptCount", "blockCount"):
            return getattr(ev, snake_case(call))
        if call in ("evictedPositions", "removedBefore", "positions", "blockScoreOf"):
            return getattr(ev, snake_case(call))(*args)
        return ev.query(call, *args)
    return run


def layer_subject(policy_name: str, case: dict, mode: str):
    """A case with "layer" (docs/paged.md): its steps through kvevict.LayerBudget."""
    l = case["layer"]
    heads = l.get("heads", 8)
    layer = kvevict.LayerBudget(policy_name, heads, l.get("layerBudget", 4096), l.get("headFloor", -1),
                                **case.get("params", {}))

    def run(call: str, args: list) -> Any:
        if call == "onDecodeStep":
            pos, per_head = args
            for h in range(heads):
                layer.on_decode_step(h, pos, weights_of(per_head[h], mode))
            return None
        if call == "evictLayer":
            layer.evict(*args)
            return [layer.victims(h) for h in range(heads)]
        if call == "keptCount":
            return [layer.kept_count(h) for h in range(heads)]
        if call == "totalKept":
            return sum(layer.kept_count(h) for h in range(heads))
        if call in ("headFloor", "headBudget"):
            return getattr(layer, snake_case(call))
        return layer.query(args[0], call, *args[1:])
    return run


def replay_case(policy_name: str, case: dict, mode: str = "numpy") -> CaseResult:
    """Replays one case; a failed expectation is recorded and the case goes on,
    a step that throws ends it."""
    result = CaseResult(case.get("name", "?"))
    tolerance = case.get("tolerance", 1e-9)
    step_index = -1
    try:
        if "blocks" in case:
            subject = block_subject(policy_name, case, mode)
        elif "layer" in case:
            subject = layer_subject(policy_name, case, mode)
        else:
            policy = kvevict.policy(policy_name, **case.get("params", {}))
            subject = lambda call, args: execute(policy, call, args, mode)  # noqa: E731
        for step_index, step in enumerate(case["steps"]):
            actual = subject(step["call"], step.get("args", []))
            if "expect" in step and not equal(step["expect"], actual, tolerance):
                result.failures.append(
                    f"step {step_index} {step['call']}{step.get('args', [])}: "
                    f"expected {step['expect']!r}, got {actual!r}"
                )
    except Exception as e:  # the spec: a step that throws fails the case and ends it
        result.failures.append(f"step {step_index}: threw {type(e).__name__}: {e}")
    return result


def policy_of(doc: dict) -> str:
    name = doc["policy"]
    if not name.startswith(PREFIX) or doc.get("version") != 1:
        raise ValueError(f"not a version-1 kv-cache vector file: {name!r}")
    return name[len(PREFIX):]
