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
"""

from __future__ import annotations

from typing import Any, Dict, Type

from ._kvevict import (
    Policy,
    TraceIterator,
    __version__,
    compare,
    policies,
    pyramid_budget,
    run,
    run_vectors,
    trace,
    trace_hash,
    trace_ids,
)

__all__ = [
    "Policy",
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
    "pyramid_budget",
    "trace",
    "trace_hash",
    "trace_ids",
    "run",
    "compare",
    "run_vectors",
    "__version__",
]


class Scissorhands(Policy):
    """Scissorhands (Liu et al., NeurIPS 2023).

    A position earns a vote on each step its attention beats its fair share
    ``1/len(attn)``; outside the ``recent_window`` newest positions, the fewest
    votes goes (ties: the lower position).
    """

    def __init__(self, budget: int = 512, *, recent_window: int = 32) -> None:
        super().__init__("scissorhands", budget=budget, recent_window=recent_window)

    def votes_of(self, pos: int) -> int:
        """Votes of held position ``pos``; -1 when it is not held."""
        return self.query("votesOf", pos)


class H2O(Policy):
    """H2O, Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023).

    Each position accumulates the attention it receives; outside the
    ``recent_window`` newest positions, the lowest cumulative score goes.
    """

    def __init__(self, budget: int = 512, *, recent_window: int = 32) -> None:
        super().__init__("h2o", budget=budget, recent_window=recent_window)

    def score_of(self, pos: int) -> float:
        """Cumulative attention of held position ``pos``; -1 when it is not held."""
        return self.query("scoreOf", pos)


class StreamingLLM(Policy):
    """StreamingLLM (Xiao et al., ICLR 2024).

    Keeps the first ``sinks`` positions forever and a sliding window of the
    most recent ones; never reads attention.
    """

    def __init__(self, budget: int = 512, *, sinks: int = 4) -> None:
        super().__init__("streaming-llm", budget=budget, sinks=sinks)

    def sink_count(self) -> int:
        """Number of sink positions held."""
        return self.query("sinkCount")


class SlidingWindow(Policy):
    """Sliding Window: keeps the most recent ``budget`` positions; never reads attention."""

    def __init__(self, budget: int = 512) -> None:
        super().__init__("sliding-window", budget=budget)


class TOVA(Policy):
    """TOVA (Oren et al., EMNLP 2024).

    Evicts the position with the lowest weight on the latest step that
    observed it; no recent window.
    """

    def __init__(self, budget: int = 512) -> None:
        super().__init__("tova", budget=budget)

    def last_attention_of(self, pos: int) -> float:
        """Last observed weight of held position ``pos``; -1 when not held or never observed."""
        return self.query("lastAttentionOf", pos)


class SnapKV(Policy):
    """SnapKV (Li et al., NeurIPS 2024), adapted to decode time.

    Scores each position by the attention it got over the last ``obs_window``
    steps, max-pools the scores over ``pool_kernel`` neighbouring held
    positions, and evicts the lowest outside the recent window.
    """

    def __init__(
        self,
        budget: int = 512,
        *,
        recent_window: int = 32,
        obs_window: int = 16,
        pool_kernel: int = 7,
    ) -> None:
        super().__init__(
            "snapkv",
            budget=budget,
            recent_window=recent_window,
            obs_window=obs_window,
            pool_kernel=pool_kernel,
        )

    def window_score_of(self, pos: int) -> float:
        """Unpooled sum of held position ``pos``'s remembered weights; -1 when not held."""
        return self.query("windowScoreOf", pos)


class PyramidKV(Policy):
    """PyramidKV (Cai et al., 2024).

    Shallow layers keep more, deep layers less -- an arithmetic share per
    layer (see :func:`pyramid_budget`) -- and SnapKV's rule picks the victims
    within each layer's share. ``budget`` is the average share per layer.
    """

    def __init__(
        self,
        budget: int = 512,
        *,
        layer: int = 0,
        num_layers: int = 1,
        pyramid_ratio: int = 4,
        recent_window: int = 32,
        obs_window: int = 16,
        pool_kernel: int = 7,
    ) -> None:
        super().__init__(
            "pyramidkv",
            budget=budget,
            layer=layer,
            num_layers=num_layers,
            pyramid_ratio=pyramid_ratio,
            recent_window=recent_window,
            obs_window=obs_window,
            pool_kernel=pool_kernel,
        )

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
