"""kvevict: KV-cache eviction policies for LLM decoding.

A policy sees the attention the newest token paid to each position it still
holds and names positions to evict so that at most ``budget`` remain::

    import numpy as np
    import kvevict

    policy = kvevict.Scissorhands(budget=512, recent_window=32)
    for pos in range(1, 4096):
        attn = np.full(policy.kept_count(), 1.0 / policy.kept_count(), dtype=np.float32)
        policy.on_decode_step(pos, attn)          # float32 arrays are read in place
        if policy.kept_count() > 512:
            for victim in policy.evict(512):      # ascending positions
                ...                               # drop `victim` from the KV cache

Every policy is built through the C++ registry: ``kvevict.policy(name,
**params)`` reaches any registered policy by name, and the named classes below
are thin subclasses of :class:`Policy` with Pythonic signatures. Core errors
keep their messages: a bad parameter is ``ValueError``, a broken contract or
bad input ``RuntimeError``.

The real model (``model/``, a small byte-level transformer) runs the same
policies on a real KV cache, one instance per (layer, head)::

    model = kvevict.Model("model/kvevict-tiny.kvm")
    text = open("model/heldout-sample.txt", "rb").read()
    kvevict.perplexity(model, text, [("scissorhands", 256), ("h2o", 256)])
    kvevict.compare_model(model, text)                # ranked by perplexity
    kvevict.choose(model, text, budget=256)           # which policy, within 15 minutes

    decoder = kvevict.Decoder(model)
    for h in range(decoder.head_count):
        decoder.set_policy(h, kvevict.H2O(budget=64))
    logits = [decoder.step(b) for b in text[:512]]    # float32 arrays of 256
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Type

from ._kvevict import (
    Batch,
    BlockEvictor,
    Decoder,
    LayerBudget,
    Model,
    Policy,
    SweepRows,
    TraceIterator,
    __version__,
    attention_from_keys,
    bench_model,
    choose,
    compare,
    compare_model,
    perplexity,
    persistence,
    policies,
    prefill,
    pyramid_budget,
    record_attention,
    rope_neox,
    row_schema,
    run,
    run_vectors,
    select_simd,
    serve_bench,
    simd,
    sink_shares,
    stream,
    sweep_model,
    tasks,
    trace,
    trace_hash,
    trace_ids,
)

__all__ = [
    "Policy",
    "BlockEvictor",
    "LayerBudget",
    "Scissorhands",
    "H2O",
    "StreamingLLM",
    "SlidingWindow",
    "TOVA",
    "SnapKV",
    "PyramidKV",
    "TraceIterator",
    "policy",
    "policies",
    "simd",
    "select_simd",
    "pyramid_budget",
    "trace",
    "trace_hash",
    "trace_ids",
    "run",
    "compare",
    "row_schema",
    "run_vectors",
    "Model",
    "Decoder",
    "perplexity",
    "compare_model",
    "sweep_model",
    "SweepRows",
    "tasks",
    "bench_model",
    "attention_from_keys",
    "rope_neox",
    "record_attention",
    "persistence",
    "prefill",
    "Batch",
    "serve_bench",
    "stream",
    "sink_shares",
    "choose",
    "__version__",
]


class _NamedPolicy(Policy):
    """Base of the named classes: a registry policy fixed by ``_registry_name``.

    The constructor takes ``budget`` (positionally or by keyword) and the
    policy's other parameters by keyword, snake_case or camelCase; omitted ones
    take the registry's defaults. ``inspect.signature`` and ``help()`` show the
    registry's parameters and defaults.
    """

    _registry_name = ""

    def __init__(self, budget: Any = inspect.Parameter.empty, **params: Any) -> None:
        """Builds the policy; see the class signature for parameters and defaults."""
        if budget is not inspect.Parameter.empty:
            params["budget"] = budget
        super().__init__(self._registry_name, **params)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._registry_name:
            cls.__signature__ = _signature_of(cls._registry_name)


def _snake_case(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _signature_of(registry_name: str) -> inspect.Signature:
    """``(budget=..., *, other=...)`` from the registry's parameters and defaults."""
    info = next(d for d in policies() if d["name"] == registry_name)
    ordered = sorted(info["params"], key=lambda p: p["name"] != "budget")  # budget first
    return inspect.Signature(
        [
            inspect.Parameter(
                _snake_case(p["name"]),
                inspect.Parameter.POSITIONAL_OR_KEYWORD
                if p["name"] == "budget"
                else inspect.Parameter.KEYWORD_ONLY,
                default=p["default"],
                annotation=int,
            )
            for p in ordered
        ],
        return_annotation=None,
    )


class Scissorhands(_NamedPolicy):
    """Scissorhands (Liu et al., NeurIPS 2023).

    A position earns a vote on each step its attention beats its fair share
    ``1/len(attn)``; outside the ``recent_window`` newest positions, the fewest
    votes goes (ties: the lower position).
    """

    _registry_name = "scissorhands"

    def votes_of(self, pos: int) -> int:
        """Votes of held position ``pos``; -1 when it is not held."""
        return self.query("votesOf", pos)

    def rank_of(self, pos: int) -> float:
        """What the eviction ranks ``pos`` by: the vote rate (votes / steps
        that scored it) with ``normalize=1``, else the votes; -1 when not held."""
        return self.query("rankOf", pos)


class H2O(_NamedPolicy):
    """H2O, Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023).

    Each position accumulates the attention it receives; outside the
    ``recent_window`` newest positions, the lowest cumulative score goes.
    """

    _registry_name = "h2o"

    def score_of(self, pos: int) -> float:
        """Cumulative attention of held position ``pos`` (with ``normalize=1``
        divided by the steps that scored it); -1 when it is not held."""
        return self.query("scoreOf", pos)


class StreamingLLM(_NamedPolicy):
    """StreamingLLM (Xiao et al., ICLR 2024).

    Keeps the first ``sinks`` positions forever and a sliding window of the
    most recent ones; never reads attention.
    """

    _registry_name = "streaming-llm"

    def sink_count(self) -> int:
        """Number of sink positions held."""
        return self.query("sinkCount")


class SlidingWindow(_NamedPolicy):
    """Sliding Window: keeps the most recent ``budget`` positions; never reads attention."""

    _registry_name = "sliding-window"


class TOVA(_NamedPolicy):
    """TOVA (Oren et al., EMNLP 2024).

    Evicts the position with the lowest weight on the latest step that
    observed it; no recent window.
    """

    _registry_name = "tova"

    def last_attention_of(self, pos: int) -> float:
        """Last observed weight of held position ``pos``; -1 when not held or never observed."""
        return self.query("lastAttentionOf", pos)


class SnapKV(_NamedPolicy):
    """SnapKV (Li et al., NeurIPS 2024), adapted to decode time.

    Scores each position by the attention it got over the last ``obs_window``
    steps, max-pools the scores over ``pool_kernel`` neighbouring held
    positions, and evicts the lowest outside the recent window.
    """

    _registry_name = "snapkv"

    def window_score_of(self, pos: int) -> float:
        """Unpooled sum of held position ``pos``'s remembered weights; -1 when not held."""
        return self.query("windowScoreOf", pos)


class PyramidKV(_NamedPolicy):
    """PyramidKV (Cai et al., 2024).

    Shallow layers keep more, deep layers less -- an arithmetic share per
    layer (see :func:`pyramid_budget`) -- and SnapKV's rule picks the victims
    within each layer's share. ``budget`` is the average share per layer.
    """

    _registry_name = "pyramidkv"

    def effective_budget(self) -> int:
        """This layer's share: max(pyramid_budget(...), recent_window + 1)."""
        return self.query("effectiveBudget")

    def window_score_of(self, pos: int) -> float:
        """Unpooled sum of held position ``pos``'s remembered weights; -1 when not held."""
        return self.query("windowScoreOf", pos)


# Registry name -> named class; policy() returns instances of these.
_CLASSES: Dict[str, Type[Policy]] = {
    "scissorhands": Scissorhands,
    "h2o": H2O,
    "streaming-llm": StreamingLLM,
    "sliding-window": SlidingWindow,
    "tova": TOVA,
    "snapkv": SnapKV,
    "pyramidkv": PyramidKV,
}


def policy(name: str, /, **params: Any) -> Policy:
    """Builds the registry policy ``name`` with integer ``params``.

    Keys may be snake_case (``recent_window=64``) or camelCase
    (``recentWindow=64``). The result is an instance of the named class
    (``kvevict.policy("h2o")`` is an :class:`H2O`), or a plain :class:`Policy`
    for a registry policy without one. Unknown names or parameters, and values
    that break a rule, raise ``ValueError`` with the core's message.
    """
    cls = _CLASSES.get(name, Policy) if isinstance(name, str) else Policy
    obj = cls.__new__(cls)
    Policy.__init__(obj, name, **params)
    return obj
