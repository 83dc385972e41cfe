"""The Pythonic API: construction through the registry, parameters in either
case style, introspection, results shaped exactly like the tool's JSON."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kvevict
from conftest import OWN_VECTORS, SOURCE_ROOT, ticks_during

RUN_KEYS = ["policy", "trace", "budget", "params", "steps", "metrics", "evicted", "memoryBytes", "seconds"]
METRIC_KEYS = ["retainedAttentionMass", "heavyHitterRecall", "evictionCalls"]
NAMED = {
    "scissorhands": kvevict.Scissorhands, "h2o": kvevict.H2O,
    "streaming-llm": kvevict.StreamingLLM, "sliding-window": kvevict.SlidingWindow,
    "tova": kvevict.TOVA, "snapkv": kvevict.SnapKV, "pyramidkv": kvevict.PyramidKV,
}


def snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)


def cli() -> Path | None:
    """The tool from the same build, when it is there (BUILD/python/kvevict -> BUILD/kvevict)."""
    build = Path(kvevict.__file__).resolve().parents[2]
    for candidate in (build / "kvevict", build / "main" / "kvevict"):
        if candidate.is_file():
            return candidate
    return None


def test_version_matches_the_project():
    text = (SOURCE_ROOT / "CMakeLists.txt").read_text()
    assert kvevict.__version__ == re.search(r"project\(kvevict VERSION ([\d.]+)", text).group(1)


def test_policies_lists_the_registry():
    listed = kvevict.policies()
    assert [p["name"] for p in listed][:1] == ["scissorhands"]  # the flagship first
    for p in listed:
        assert set(p) == {"name", "title", "summary", "params", "queries", "signals"}
        assert set(p["signals"]) <= {"attention", "key", "value", "queries"}
        assert p["summary"] and p["title"]
        assert p["params"][0]["name"] == "budget" or any(q["name"] == "budget" for q in p["params"])
        for param in p["params"]:
            assert set(param) == {"name", "default", "help"} and isinstance(param["default"], int)


def test_policies_agree_with_the_tool():
    tool = cli()
    if tool is None:
        pytest.skip("the kvevict tool is not in this build folder")
    out = json.loads(subprocess.run([tool, "list", "--format", "json"], check=True,
                                    capture_output=True, text=True).stdout)
    mine = [{k: p[k] for k in ("name", "summary", "params")} for p in kvevict.policies()]
    assert list(out) == ["command", "model", "rows"] and out["command"] == "list" and out["model"] is None
    assert mine == out["rows"]


@pytest.mark.parametrize("name", [p["name"] for p in kvevict.policies()])
def test_every_registry_policy_is_reachable(name):
    p = kvevict.policy(name)
    info = next(d for d in kvevict.policies() if d["name"] == name)
    assert p.name == name
    assert p.params == {q["name"]: q["default"] for q in info["params"]}
    assert p.queries == info["queries"]
    assert p.signals == tuple(info["signals"])
    assert sorted(set(p.queries) & set(dir(p))) == sorted(p.queries)
    assert kvevict.Policy(name).params == p.params
    if name in NAMED:
        assert type(p) is NAMED[name] and type(NAMED[name]()).__name__ == NAMED[name].__name__
    assert len(p) == p.kept_count() == 1  # position 0 is held before the first step
    assert p.memory_bytes() > 0


@pytest.mark.parametrize("name,cls", NAMED.items())
def test_named_classes_show_the_registry_signature(name, cls):
    info = next(d for d in kvevict.policies() if d["name"] == name)
    sig = inspect.signature(cls)
    assert {k: v.default for k, v in sig.parameters.items()} == {
        snake(q["name"]): q["default"] for q in info["params"]}
    assert list(sig.parameters)[0] == "budget"
    # Queries are real methods on the named classes, exactly the registry's.
    methods = {m for m in vars(cls) if not m.startswith("_")}
    assert methods == set(info["queries"])


def test_snake_and_camel_case_are_the_same_parameter():
    a = kvevict.policy("pyramidkv", num_layers=4, layer=1, pyramid_ratio=2, recent_window=8)
    b = kvevict.policy("pyramidkv", numLayers=4, layer=1, pyramidRatio=2, recentWindow=8)
    c = kvevict.PyramidKV(num_layers=4, layer=1, pyramid_ratio=2, recent_window=8)
    assert a.params == b.params == c.params
    assert a.params["numLayers"] == 4 and a.effective_budget() == b.effective_budget()


def test_repr_round_trips():
    for p in (kvevict.H2O(256, recent_window=64), kvevict.policy("snapkv", obsWindow=8)):
        again = eval(repr(p), vars(kvevict))
        assert type(again) is type(p) and again.params == p.params
    generic = kvevict.Policy("tova", budget=3)
    assert repr(generic) == "Policy('tova', budget=3)"
    assert eval(repr(generic), vars(kvevict)).params == generic.params


def test_normalize_ranks_by_the_mean_and_the_vote_rate():
    # H2O: sums 0: 1.75 over 3 steps, 1: 0.75 over 2, 2: 0.5 over 1 -- the
    # means drop 1 where the sums drop 2 (vectors/h2o.vectors.json).
    for normalize, victim in ((0, [2]), (1, [1])):
        h = kvevict.H2O(budget=3, recent_window=1, normalize=normalize)
        for t, w in ((1, [1.0]), (2, [0.5, 0.5]), (3, [0.25, 0.25, 0.5])):
            h.on_decode_step(t, w)
        assert h.score_of(1) == (0.375 if normalize else 0.75)
        assert h.evict(3) == victim
    s = kvevict.Scissorhands(budget=4, recent_window=1, normalize=1)
    for t, w in ((1, [1.0]), (2, [0.75, 0.25]), (3, [0.125, 0.5, 0.375]), (4, [0.3125, 0.3125, 0.0625, 0.3125])):
        s.on_decode_step(t, w)
    assert s.votes_of(0) == 2 and s.rank_of(0) == 0.5 and s.rank_of(3) == 1.0
    assert s.evict(4) == [0]
    with pytest.raises(ValueError, match=r"^Scissorhands: historyWindow \(8\) must be 0 with normalize=1"):
        kvevict.Scissorhands(budget=4, recent_window=1, normalize=1, history_window=8)


def test_queries_on_the_generic_class_and_the_named_ones():
    g, n = kvevict.Policy("scissorhands", budget=4, recent_window=1), kvevict.Scissorhands(4, recent_window=1)
    for p in (g, n):
        p.on_decode_step(1, [1.0])
        p.on_decode_step(2, [0.75, 0.25])
        # 1.0 is exactly its share 1/1 (no vote); 0.75 beats 1/2 (a vote).
        assert p.votes_of(0) == 1 and p.votes_of(1) == 0 and p.votes_of(99) == -1
        assert isinstance(p.votes_of(0), int)
        assert p.query("votesOf", 0) == p.query("votes_of", 0) == 1
    s = kvevict.StreamingLLM(budget=8, sinks=2)
    assert s.sink_count() == 1 and isinstance(s.sink_count(), int)
    t = kvevict.TOVA(budget=4)
    t.on_decode_step(1, [1.0])
    assert t.last_attention_of(0) == 1.0 and isinstance(t.last_attention_of(0), float)
    assert kvevict.SnapKV(budget=8, recent_window=2).window_score_of(0) == 0.0


def test_evict_returns_ascending_ints():
    p = kvevict.SlidingWindow(budget=6)
    for pos in range(1, 7):
        p.on_decode_step(pos, None)
    victims = p.evict(3)
    assert victims == [0, 1, 2, 3] and all(type(v) is int for v in victims)
    assert p.evict(3) == [] and p.kept_count() == 3


def test_pyramid_budget():
    assert kvevict.pyramid_budget(512, 0, 4, 4) == 819
    assert kvevict.pyramid_budget(512, 3, 4, 4) == 204
    assert kvevict.pyramid_budget(512, 0, 1, 4) == 512
    assert kvevict.PyramidKV(512, layer=3, num_layers=4).effective_budget() == 204
    assert kvevict.PyramidKV(64, layer=3, num_layers=4, recent_window=40).effective_budget() == 41


def test_run_result_is_shaped_like_the_tool():
    r = kvevict.run("scissorhands", 256, steps=700, recent_window=64)
    assert list(r) == RUN_KEYS and list(r["metrics"]) == METRIC_KEYS
    assert r["policy"] == "scissorhands" and r["trace"] == "decode-4096" and r["steps"] == 700
    assert r["budget"] == 256 and r["params"] == kvevict.Scissorhands(256, recent_window=64).params
    assert r["memoryBytes"] == kvevict.Scissorhands(256, recent_window=64).memory_bytes()
    assert isinstance(r["seconds"], float) and r["metrics"]["evictionCalls"] == 700 - 255
    tool = cli()
    if tool is not None:
        out = json.loads(subprocess.run(
            [tool, "run", "--policy", "scissorhands", "--budget", "256", "--steps", "700",
             "--set", "recentWindow=64", "--format", "json"],
            check=True, capture_output=True, text=True).stdout)
        # The envelope; run() returns its one row.
        assert list(out) == ["command", "model", "rows", "trace"] and out["command"] == "run"
        out = out["rows"][0]
        assert list(out) == list(r)
        assert {k: v for k, v in out.items() if k != "seconds"} == {k: v for k, v in r.items() if k != "seconds"}


def test_run_takes_a_policy_object():
    p = kvevict.H2O(300, recent_window=64)
    p.on_decode_step(1, [1.0])
    r = kvevict.run(p, steps=400)
    assert r["budget"] == 300 and r["params"]["recentWindow"] == 64
    assert r == {**r, **kvevict.run("h2o", 300, steps=400, recentWindow=64), "seconds": r["seconds"]}
    assert p.kept_count() == 2  # the given object is not touched
    assert kvevict.run(p, 350, steps=400)["params"]["budget"] == 350
    assert kvevict.run("tova", steps=10)["budget"] == 512  # the registry default


def test_compare_shape_and_overrides():
    c = kvevict.compare(["h2o", "scissorhands"], [128, 256], steps=500)
    # The tool's envelope: {"command", "model", "rows"}, then compare's trace.
    assert list(c) == ["command", "model", "rows", "trace"] and len(c["rows"]) == 4
    assert c["command"] == "compare" and c["model"] is None and c["trace"] == "decode-4096"
    assert all(list(r) == RUN_KEYS for r in c["rows"])
    same = [
        {"h2o.recent_window": 64, "scissorhands.recentWindow": 64},
        {"recent_window": 64},
        {"h2o": {"recent_window": 64}, "scissorhands": {"recentWindow": 64}},
    ]
    results = [kvevict.compare("h2o,scissorhands", (128, 256), o, steps=500) for o in same]
    for res in results:
        assert all(r["params"]["recentWindow"] == 64 for r in res["rows"])
        assert [r["metrics"] for r in res["rows"]] == [r["metrics"] for r in results[0]["rows"]]
    tool = cli()
    if tool is not None:
        out = json.loads(subprocess.run(
            [tool, "compare", "--policies", "h2o,scissorhands", "--budgets", "128,256", "--steps", "500",
             "--set", "recentWindow=64", "--format", "json"],
            check=True, capture_output=True, text=True).stdout)
        strip = lambda d: [{k: v for k, v in r.items() if k != "seconds"} for r in d["rows"]]
        assert list(out) == list(results[0]) and out["trace"] == results[0]["trace"]
        assert strip(out) == strip(results[0])


def test_trace_ids_and_other_traces():
    ids = kvevict.trace_ids()
    assert "decode-4096" in ids
    for trace_id in ids:
        first = next(kvevict.trace(trace_id))
        assert first.dtype == np.float32 and first.shape == (1,)


def test_run_vectors_report():
    report = kvevict.run_vectors([OWN_VECTORS])
    assert set(report) == {"passed", "failed", "failures"}
    assert report["failed"] == 0 and report["passed"] > 0 and report["failures"] == []
    assert kvevict.run_vectors(str(OWN_VECTORS)) == report


def test_everything_public_is_documented():
    for name in kvevict.__all__:
        obj = getattr(kvevict, name)
        if name == "__version__":
            continue
        assert obj.__doc__ and obj.__doc__.strip(), name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") or attr in ("__init__", "__len__", "__next__", "__iter__"):
                    doc = getattr(member, "__doc__", None) or getattr(getattr(member, "fget", None), "__doc__", None)
                    assert doc and doc.strip(), f"{name}.{attr}"


def test_long_evaluations_release_the_gil_and_honour_signals():
    """compare() runs without the GIL (another thread makes progress) and
    stops at a pending signal (Ctrl-C) instead of running to the end."""
    import signal
    import time

    _, ticks = ticks_during(kvevict.compare)
    assert ticks > 5

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            kvevict.compare(budgets=[64, 128, 256, 512, 1024, 2048])
        assert time.monotonic() - start < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
