"""The binding at parity with the tool: tasks(), bench_model(), run()/compare()
replaying recorded keys, values and queries, sweep_model(skip_refused=...),
attention_from_keys() / rope_neox() and Batch.step_all().

Expected values come from outside the binding: the tool's JSON for the same
arguments (run through subprocess; those checks skip when the tool is not in
the build folder), NumPy, or values worked by hand."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import kvevict
from conftest import SOURCE_ROOT

MODEL_PATH = SOURCE_ROOT / "model" / "kvevict-tiny.kvm"
TEXT_PATH = SOURCE_ROOT / "model" / "heldout-sample.txt"


@pytest.fixture(scope="module")
def model():
    return kvevict.Model(MODEL_PATH)


@pytest.fixture(scope="module")
def text():
    return TEXT_PATH.read_bytes()


def cli():
    """The tool from the same build (BUILD/python/kvevict -> BUILD/kvevict), or None."""
    tool = Path(kvevict.__file__).resolve().parents[2] / "kvevict"
    return tool if tool.is_file() else None


def tool_json(*args):
    tool = cli()
    if tool is None:
        pytest.skip("the kvevict tool is not in this build folder")
    out = subprocess.run([str(tool), *map(str, args), "--format", "json"], check=True, capture_output=True,
                         text=True, cwd=SOURCE_ROOT)
    return json.loads(out.stdout), out.stderr


def tool_rows(*args):
    """The rows of the tool's JSON, after checking it is the envelope every
    command prints: {"command", "model", "rows", ...}, the model the --model given."""
    doc, stderr = tool_json(*args)
    model = str(args[args.index("--model") + 1]) if "--model" in args else None
    assert list(doc)[:3] == ["command", "model", "rows"] and doc["command"] == args[0] and doc["model"] == model, doc
    return doc["rows"], stderr


def without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


# ---- rope_neox, attention_from_keys --------------------------------------------


def rope_by_hand(x, pos, base):
    """NeoX RoPE as documented: angle pos * base^(-2i/d) in float64, cos and sin rounded to float32."""
    x = np.asarray(x, dtype=np.float32)
    d = x.size
    out = x.copy()
    for i in range(d // 2):
        angle = pos * base ** (-2.0 * i / d)
        c, s = np.float32(np.cos(angle)), np.float32(np.sin(angle))
        a, b = x[i], x[i + d // 2]
        out[i] = a * c - b * s
        out[i + d // 2] = a * s + b * c
    return out


def test_rope_neox_is_the_documented_rotation():
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    # Position 0: no rotation at all.
    assert np.array_equal(kvevict.rope_neox(x, 0, 10000.0), x)
    # head_dim 2, base anything: one pair (x0, x1) turned by pos radians.
    got = kvevict.rope_neox([1.0, 0.0], 1)
    assert got.dtype == np.float32 and got.shape == (2,)
    assert np.allclose(got, [np.cos(1.0), np.sin(1.0)], atol=1e-7)
    # head_dim 4, base 100, pos 3: pairs (0, 2) at 3 rad and (1, 3) at 0.3 rad.
    got = kvevict.rope_neox(x, 3, 100.0)
    want = [1 * np.cos(3) - 3 * np.sin(3), 2 * np.cos(0.3) - 4 * np.sin(0.3),
            1 * np.sin(3) + 3 * np.cos(3), 2 * np.sin(0.3) + 4 * np.cos(0.3)]
    assert np.allclose(got, want, atol=1e-6)
    assert np.array_equal(got, rope_by_hand(x, 3, 100.0))
    assert np.array_equal(x, [1.0, 2.0, 3.0, 4.0])  # the input is not changed
    rng = np.random.default_rng(7)
    v = rng.standard_normal(16).astype(np.float32)
    assert np.array_equal(kvevict.rope_neox(v, 517, 10000.0), rope_by_hand(v, 517, 10000.0))


def softmax_mean(queries, keys, scale):
    q = np.atleast_2d(np.asarray(queries, dtype=np.float64))
    logits = (q * scale) @ np.asarray(keys, dtype=np.float64).T
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)).mean(axis=0)


def test_attention_from_keys_matches_numpy():
    rng = np.random.default_rng(3)
    queries = rng.standard_normal((2, 8)).astype(np.float32)
    keys = rng.standard_normal((5, 8)).astype(np.float32)
    got = kvevict.attention_from_keys(queries, keys)
    assert got.dtype == np.float32 and got.shape == (5,)
    assert np.allclose(got, softmax_mean(queries, keys, 1 / np.sqrt(8)), atol=1e-6)
    assert np.allclose(kvevict.attention_from_keys(queries[0], keys, scale=0.5),
                       softmax_mean(queries[0], keys, 0.5), atol=1e-6)
    # Equal keys share the weight equally, whatever the query.
    assert np.allclose(kvevict.attention_from_keys(np.ones((2, 4)), np.eye(4)), [0.25] * 4, atol=1e-7)
    # Lists and float64 are converted.
    assert np.allclose(kvevict.attention_from_keys(queries.tolist(), keys.astype(np.float64)), got, atol=1e-7)


def test_signal_functions_refuse_bad_arguments():
    with pytest.raises(ValueError, match="head_dim must be even"):
        kvevict.rope_neox([1.0, 2.0, 3.0], 1)
    with pytest.raises(ValueError, match="x must be 1-D"):
        kvevict.rope_neox(np.zeros((2, 4)), 1)
    with pytest.raises(TypeError, match="pos must be an integer"):
        kvevict.rope_neox([1.0, 2.0], 1.5)
    with pytest.raises(ValueError, match="base .* must be a positive finite number"):
        kvevict.rope_neox([1.0, 2.0], 1, 0.0)
    with pytest.raises(TypeError, match="base must be a real number"):
        kvevict.rope_neox([1.0, 2.0], 1, "10000")
    with pytest.raises(TypeError, match="x must be"):
        kvevict.rope_neox(None, 1)
    with pytest.raises(ValueError, match="keys has 3 floats a row and queries 4 a head"):
        kvevict.attention_from_keys(np.ones(4), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"keys must be \[n, head_dim\] floats, got shape \(4,\)"):
        kvevict.attention_from_keys(np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="queries must be"):
        kvevict.attention_from_keys(np.ones((1, 2, 4)), np.ones((2, 4)))
    with pytest.raises(TypeError, match="queries must be real numbers"):
        kvevict.attention_from_keys(np.array(["a", "b"]), np.ones((2, 2)))
    with pytest.raises(TypeError, match="scale must be a real number"):
        kvevict.attention_from_keys(np.ones(4), np.ones((2, 4)), scale="x")
    with pytest.raises(ValueError, match="scale .* must be finite"):
        kvevict.attention_from_keys(np.ones(4), np.ones((2, 4)), scale=float("nan"))


# ---- tasks ----------------------------------------------------------------------


def test_tasks_equal_the_tools_json(model, text):
    got = kvevict.tasks(model, text, lengths=[256], depths=1, samples=2, policies="h2o,knorm", budgets=[64],
                        moments=["decode", "prefill"])
    assert [(r["policy"], r["moment"]) for r in got] == \
        [("full", "full"), ("h2o", "decode"), ("h2o", "prefill"), ("knorm", "decode"), ("knorm", "prefill")]
    assert got[0]["samples"] == 2 and got[0]["length"] == 256 and got[0]["depth"] == 0.5
    want, _ = tool_rows("tasks", "--model", MODEL_PATH, "--text", TEXT_PATH, "--lengths", "256", "--depths", "1",
                        "--samples", "2", "--policies", "h2o,knorm", "--budgets", "64", "--moments",
                        "decode,prefill")
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # the same keys in the same order


def test_tasks_full_cache_only_and_every_task(model, text):
    got = kvevict.tasks(model, TEXT_PATH, tasks="all", lengths=(512,), depths=1, samples=1, policies=None)
    assert [r["task"] for r in got] == ["passkey", "multikey", "multivalue", "vartrack", "copy"]
    assert {r["policy"] for r in got} == {"full"}
    assert kvevict.tasks(model, text, tasks=["passkey"], lengths=[512], depths=1, samples=1, policies="none") == got[:1]


def test_tasks_refuse_bad_arguments(model, text):
    small = dict(lengths=[256], depths=1, samples=1)
    with pytest.raises(ValueError, match="tasks: unknown task 'nope'"):
        kvevict.tasks(model, text, tasks="nope", **small)
    with pytest.raises(ValueError, match=r"depths \(0\) must be in 1 ... 100"):
        kvevict.tasks(model, text, lengths=[256], depths=0)
    with pytest.raises(ValueError, match=r"samples \(0\) must be in 1 ... 100000"):
        kvevict.tasks(model, text, lengths=[256], samples=0)
    with pytest.raises(ValueError, match="lengths: 0 is not a length"):
        kvevict.tasks(model, text, lengths=[0])
    with pytest.raises(ValueError, match="moments: unknown moment 'later'"):
        kvevict.tasks(model, text, moments="later", **small)
    with pytest.raises(ValueError, match="unknown policy"):
        kvevict.tasks(model, text, policies="nope", **small)
    with pytest.raises(TypeError, match="model must be a kvevict.Model"):
        kvevict.tasks("model", text, **small)
    with pytest.raises(TypeError, match="text must be bytes, not str"):
        kvevict.tasks(model, "text", **small)
    with pytest.raises(TypeError, match="depths must be an integer"):
        kvevict.tasks(model, text, lengths=[256], depths=1.5)


# ---- Model(path, context=, matmul=) -------------------------------------------------


@pytest.fixture(scope="module")
def q8_file(tmp_path_factory):
    """A small random Llama Q8_0 GGUF, written by the tool."""
    tool = cli()
    if tool is None:
        pytest.skip("the kvevict tool is not in this build folder")
    path = tmp_path_factory.mktemp("q8") / "q8.gguf"
    subprocess.run([str(tool), "random-model", "--type", "q8_0", "--out", str(path), "--width", "64", "--heads", "4",
                    "--kv-heads", "2", "--ff", "128", "--context", "256"], check=True, capture_output=True,
                   cwd=SOURCE_ROOT)
    return path


def tool_logits(tmp_path, *args):
    out = tmp_path / f"logits-{len(list(tmp_path.iterdir()))}.npy"
    subprocess.run([str(cli()), "logits", *map(str, args), "--out", str(out), "--progress", "off"], check=True,
                   capture_output=True, cwd=SOURCE_ROOT)
    return np.load(out)


def test_model_takes_the_tools_context_and_matmul(q8_file, tmp_path):
    exact = kvevict.Model(q8_file)
    int8 = kvevict.Model(q8_file, context=128, matmul="int8")
    assert (exact.matmul, int8.matmul) == ("exact", "int8")
    assert (exact.config["context"], int8.config["context"]) == (256, 128)
    tokens = [1, 5, 9, 40, 3, 77, 2, 11]
    steps = lambda model: np.stack([d.step(t) for d in [kvevict.Decoder(model)] for t in tokens])
    want_int8 = tool_logits(tmp_path, "--model", q8_file, "--tokens", ",".join(map(str, tokens)), "--context", "128",
                            "--matmul", "int8")
    want_exact = tool_logits(tmp_path, "--model", q8_file, "--tokens", ",".join(map(str, tokens)))
    # The decoder's logits are the tool's to the bit, in each mode...
    np.testing.assert_array_equal(steps(int8), want_int8)
    np.testing.assert_array_equal(steps(exact), want_exact)
    # ...and the modes compute different products (rounded vectors), near each other.
    assert not np.array_equal(want_int8, want_exact)
    assert np.max(np.abs(want_int8 - want_exact)) < 0.5
    # A decoder's capacity is the model's context: 128 here.
    with pytest.raises(RuntimeError, match="capacity"):
        kvevict.Decoder(int8, capacity=129)


def test_model_refuses_bad_options(q8_file):
    with pytest.raises(ValueError, match="matmul: matmul mode 'int4' is not exact or int8"):
        kvevict.Model(q8_file, matmul="int4")
    with pytest.raises(TypeError, match="matmul must be a str"):
        kvevict.Model(q8_file, matmul=8)
    with pytest.raises(ValueError, match=r"context \(-1\) must be at least 0"):
        kvevict.Model(q8_file, context=-1)
    with pytest.raises(RuntimeError, match="q8.gguf"):
        kvevict.Model(q8_file, context=257)  # over the trained context
    # kvevict-tiny multiplies without the weight kernels: no 8-bit products.
    with pytest.raises(ValueError, match=r"matmul mode int8: .*kvevict-tiny\.kvm .*\(only exact applies\)"):
        kvevict.Model(MODEL_PATH, matmul="int8")


# ---- bench_model ------------------------------------------------------------------


def test_bench_model_is_shaped_like_the_tool(model, text, monkeypatch):
    got = kvevict.bench_model(model, text, tokens=80, rounds=1, policies=["h2o", "knorm"], budgets=[48, 64])
    assert [(r["policy"], r["budget"], r["tokens"]) for r in got] == \
        [("full cache", 0, 80), ("h2o", 48, 80), ("h2o", 64, 80), ("knorm", 48, 80), ("knorm", 64, 80)]
    for r in got:
        assert r["tokensPerSecondSpread"]["median"] == r["tokensPerSecond"] > 0
        assert r["tokensPerSecondSpread"]["min"] <= r["tokensPerSecond"] <= r["tokensPerSecondSpread"]["max"]
        assert sum(r["shares"].values()) == pytest.approx(1.0, abs=1e-9)
    want, _ = tool_rows("bench", "--model", MODEL_PATH, "--text", TEXT_PATH, "--tokens", "80", "--rounds", "1",
                        "--policies", "h2o,knorm", "--budgets", "48,64")
    # Timings differ run to run; everything else, and every key in its order, is the tool's.
    shape = lambda rows: [[(k, list(v) if isinstance(v, dict) else v if k in ("policy", "budget", "tokens") else None)
                           for k, v in r.items()] for r in rows]
    assert shape(got) == shape(want)
    # text=None reads the tool's default, model/heldout-sample.txt, from the working folder.
    monkeypatch.chdir(SOURCE_ROOT)
    assert [r["tokens"] for r in kvevict.bench_model(model, tokens=16, rounds=1, policies="h2o")] == [16, 16]


def test_bench_model_refuses_bad_arguments(model, text):
    with pytest.raises(ValueError, match=r"rounds \(0\) must be in 1 ... 1000"):
        kvevict.bench_model(model, text, rounds=0)
    with pytest.raises(ValueError, match=r"tokens \(0\) must be at least 1"):
        kvevict.bench_model(model, text, tokens=0)
    with pytest.raises(ValueError, match="budgets is empty"):
        kvevict.bench_model(model, text, budgets=[])
    with pytest.raises(TypeError, match="budgets must be a sequence of integers"):
        kvevict.bench_model(model, text, budgets=128)
    with pytest.raises(ValueError, match="unknown policy"):
        kvevict.bench_model(model, text, tokens=8, rounds=1, policies="nope")
    with pytest.raises(RuntimeError, match="nowhere.txt"):
        kvevict.bench_model(model, Path("nowhere.txt"), tokens=8, rounds=1)
    with pytest.raises(ValueError, match=r"prefill_chunk \(0\) must be in 1 ... 4096"):
        kvevict.bench_model(model, text, tokens=8, rounds=1, prefill_chunk=0)
    with pytest.raises(ValueError, match="prompt_logits: prompt logits 'first' are not all or last"):
        kvevict.bench_model(model, text, tokens=8, rounds=1, prompt_logits="first")


def test_bench_model_takes_the_prompts_chunk_and_logits(model, text):
    # A prompt of 40 in chunks of 16 with the last logits only: the rows are
    # the tool's for the same flags (the timings aside).
    got = kvevict.bench_model(model, text, tokens=8, rounds=1, policies="h2o", budgets=[48], prompt=40,
                              prefill_chunk=16, prompt_logits="last", threads=[1])
    want, _ = tool_rows("bench", "--model", MODEL_PATH, "--text", TEXT_PATH, "--tokens", "8", "--rounds", "1",
                        "--policies", "h2o", "--budgets", "48", "--prompt", "40", "--prefill-chunk", "16",
                        "--prompt-logits", "last", "--threads", "1")
    keep = ("mode", "policy", "budget", "threads", "prompt", "tokens")
    assert [{k: r[k] for k in keep} for r in got] == [{k: r[k] for k in keep} for r in want]
    assert [(r["mode"], r["policy"], r["prompt"], r["tokens"]) for r in got] == \
        [("prefill", "full cache", 40, 40), ("decode", "full cache", 40, 8), ("decode", "h2o", 40, 8)]


# ---- replay from recorded keys, values and queries ------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A 96-token recording of the model: attention, keys, values and queries (kvevict record)."""
    tool = cli()
    if tool is None:
        pytest.skip("the kvevict tool is not in this build folder (it records the files)")
    d = tmp_path_factory.mktemp("recorded")
    files = {k: d / f"{k}.npy" for k in ("attention", "keys", "values", "queries")}
    subprocess.run([str(tool), "record", "--model", str(MODEL_PATH), "--text", str(TEXT_PATH), "--tokens", "96",
                    "--out", str(files["attention"]), "--keys", str(files["keys"]), "--values", str(files["values"]),
                    "--queries", str(files["queries"])], check=True, capture_output=True)
    return files


def test_run_replays_recorded_keys_as_the_tool_does(recorded):
    f = recorded
    got = kvevict.run("knorm", 32, trace=f["attention"], keys=f["keys"])
    assert got["policy"] == "knorm" and got["params"]["headDim"] == 32
    (want,), _ = tool_rows("run", "--policy", "knorm", "--budget", "32", "--trace", f["attention"], "--keys", f["keys"])
    assert list(got) == list(want)
    assert without_seconds([got]) == without_seconds([want])
    # str paths work as well as pathlib.Path
    assert without_seconds([kvevict.run("knorm", 32, trace=str(f["attention"]), keys=str(f["keys"]))]) == \
        without_seconds([got])


def test_compare_replays_every_policy_the_files_feed(recorded):
    f = recorded
    got = kvevict.compare("all", [64, 80], trace=f["attention"], keys=f["keys"], values=f["values"],
                          queries=f["queries"])
    assert {r["policy"] for r in got["rows"]} == {p["name"] for p in kvevict.policies()}  # all ten
    want, _ = tool_json("compare", "--policies", "all", "--budgets", "64,80", "--trace", f["attention"], "--keys",
                        f["keys"], "--values", f["values"], "--queries", f["queries"])
    assert list(got) == list(want) == ["command", "model", "rows", "trace"]
    assert got["trace"] == want["trace"] and without_seconds(got["rows"]) == without_seconds(want["rows"])
    nine = kvevict.compare("all", [64], trace=f["attention"], keys=f["keys"])
    assert len(nine["rows"]) == 9 and "expected-attention" not in {r["policy"] for r in nine["rows"]}
    named = kvevict.compare(["keydiff", "h2o"], [64], trace=f["attention"], keys=f["keys"])
    assert sorted(r["policy"] for r in named["rows"]) == ["h2o", "keydiff"]


def test_replay_names_the_argument_it_lacks(recorded):
    f = recorded
    with pytest.raises(ValueError, match=r"knorm reads the new token's key .* give keys=FILE.npy"):
        kvevict.run("knorm", 32, trace=f["attention"])
    with pytest.raises(ValueError, match=r"expected-attention reads the new token's value .* give values=FILE.npy"):
        kvevict.compare("expected-attention", [32], trace=f["attention"], keys=f["keys"])
    with pytest.raises(ValueError, match="keys, values and queries go with the attention recorded beside them"):
        kvevict.run("knorm", 32, keys=f["keys"])  # the generated trace has no keys
    with pytest.raises(TypeError, match="keys must be a str or os.PathLike"):
        kvevict.run("knorm", 32, trace=f["attention"], keys=3)
    with pytest.raises(RuntimeError, match="missing.npy"):
        kvevict.run("knorm", 32, trace=f["attention"], keys=f["keys"].parent / "missing.npy")


# ---- sweep_model(skip_refused=...) --------------------------------------------------


def test_sweep_model_skip_refused_as_the_tool(model, text):
    got = kvevict.sweep_model(model, text, "h2o", "recent_window", [8, 96], budgets=[64, 128], max_windows=1,
                              skip_refused=True)
    assert isinstance(got, list) and isinstance(got, kvevict.SweepRows)
    assert [(r["params"] or {}).get("recentWindow") if r["policy"] else None for r in got] == [None, 8, 8, 96]
    assert len(got.skipped) == 1 and got.skipped[0].startswith("recentWindow=96 at budget 64: ")
    want, stderr = tool_rows("sweep", "--model", MODEL_PATH, "--text", TEXT_PATH, "--policy", "h2o", "--param",
                             "recentWindow=8,96", "--budgets", "64,128", "--max-windows", "1", "--skip-refused")
    assert without_seconds(got) == without_seconds(want)
    assert ["sweep: skipped " + line for line in got.skipped] == \
        [line for line in stderr.splitlines() if line.startswith("sweep: skipped ")]
    plain = kvevict.sweep_model(model, text, "h2o", "recent_window", [8], budgets=[64], max_windows=1)
    assert plain.skipped == []
    with pytest.raises(ValueError, match="recentWindow"):
        kvevict.sweep_model(model, text, "h2o", "recent_window", [96], budgets=[64], max_windows=1)
    with pytest.raises(TypeError, match="skip_refused must be a bool"):
        kvevict.sweep_model(model, text, "h2o", "recent_window", [8], budgets=[64], skip_refused=1)


# ---- Batch.step_all ----------------------------------------------------------------


def make_batch(model):
    batch = kvevict.Batch(model, pool_blocks=4096, block_size=16)
    ids = [batch.join(), batch.join("h2o", 48), batch.join("scissorhands", 64, mode="block"),
           batch.join("knorm", 40)]
    return batch, ids


def test_step_all_equals_step_bit_for_bit(model, text):
    one, ids = make_batch(model)
    many, same = make_batch(model)
    assert ids == same
    for t in range(120):
        tokens = [text[(t + 37 * k) % len(text)] for k in range(len(ids))]
        rows = many.step_all(ids, tokens)
        assert rows.dtype == np.float32 and rows.shape == (len(ids), 256)
        for k, (i, token) in enumerate(zip(ids, tokens)):
            assert np.array_equal(rows[k].view(np.uint32), one.step(i, token).view(np.uint32))
    # A subset, in another order.
    rows = many.step_all([ids[2], ids[0]], [65, 66])
    assert np.array_equal(rows[0].view(np.uint32), one.step(ids[2], 65).view(np.uint32))
    assert np.array_equal(rows[1].view(np.uint32), one.step(ids[0], 66).view(np.uint32))
    for i in ids:
        for cache in (0, 5):
            assert many.held(i, cache) == one.held(i, cache)
    assert many.step_all([], []).shape == (0, 256)


def test_step_all_checks_everything_before_stepping(model, text):
    batch, ids = make_batch(model)
    reference, _ = make_batch(model)
    with pytest.raises(ValueError, match="ids has 2 items and tokens 1"):
        batch.step_all(ids[:2], [65])
    with pytest.raises(ValueError, match=r"tokens\[1\] \(256\) must be in 0 ... 255"):
        batch.step_all(ids[:2], [65, 256])
    with pytest.raises(ValueError, match="sequence 0 is listed twice"):
        batch.step_all([0, 0], [65, 66])
    with pytest.raises(ValueError, match=r"ids\[0\] \(-1\) must be at least 0"):
        batch.step_all([-1], [65])
    with pytest.raises(RuntimeError, match="99"):
        batch.step_all([ids[0], 99], [65, 66])
    with pytest.raises(TypeError, match="ids must be a sequence of integers"):
        batch.step_all("ab", [65, 66])
    with pytest.raises(TypeError, match="an item of tokens must be an integer"):
        batch.step_all([0], [1.5])
    # Nothing stepped: the next tick equals a fresh batch's first.
    assert np.array_equal(batch.step_all(ids, [65] * 4), np.stack([reference.step(i, 65) for i in ids]))


def test_step_all_against_one_call_a_step(model, text):
    """Prints tokens/s both ways (no assertion on time: machines differ)."""
    ticks, tokens = 200, list(text[:200])
    for label, runner in (("step() per sequence", "step"), ("step_all() per tick", "step_all")):
        batch = kvevict.Batch(model, pool_blocks=8192, block_size=16)
        ids = [batch.join("h2o", 64) for _ in range(8)]
        started = time.perf_counter()
        for t in range(ticks):
            if runner == "step":
                for i in ids:
                    batch.step(i, tokens[t])
            else:
                batch.step_all(ids, [tokens[t]] * len(ids))
        seconds = time.perf_counter() - started
        print(f"\n{label}: {ticks * len(ids) / seconds:.0f} tokens/s ({len(ids)} sequences x {ticks} ticks)")
