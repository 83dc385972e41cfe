"""Which policy at a budget (docs/choosing.md, `kvevict choose`): kvevict.choose()
at parity with `kvevict choose --format json` for the same request (the tool of
the same build folder; those checks skip, with a message, when it is not
there), the plan fixed (windows and samples) so that both make the same rows,
and bad requests refused with the tool's message. What no two runs share --
wall-clock seconds and decode tokens/s -- is compared to the printed precision
within one run, not between runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import kvevict
from conftest import SOURCE_ROOT

MODEL_DIR = Path(os.environ.get("KVEVICT_MODEL_DIR") or SOURCE_ROOT / "model")
KVM = MODEL_DIR / "kvevict-tiny.kvm"
SAMPLE = MODEL_DIR / "heldout-sample.txt"
if not (KVM.is_file() and SAMPLE.is_file()):
    pytest.skip(f"the model folder {MODEL_DIR} lacks kvevict-tiny.kvm or heldout-sample.txt",
                allow_module_level=True)

# A few seconds a run: two windows, one passkey sample at each of the two depths.
POLICIES = "h2o,tova,sliding-window"
BUDGET, WINDOWS, SAMPLES = 128, 2, 1
# The plan's timings: the probes are skipped with the plan fixed, but the
# time getting there and the estimate built on it are still measured.
TIMED_PLAN = ("probeSeconds", "plannedSeconds")
# The recommendation prints rank 1's decode speed.
SPEED = re.compile(r"(-?[0-9]+\.[0-9]) tokens/s")


@pytest.fixture(scope="module")
def model():
    return kvevict.Model(KVM)


def tool_exe() -> Path:
    """The tool of this build folder (BUILD/python/kvevict -> BUILD/kvevict)."""
    exe = Path(kvevict.__file__).resolve().parents[2] / "kvevict"
    if not exe.is_file():
        pytest.skip(f"the kvevict tool is not in this build folder ({exe})")
    return exe


def tool(*args) -> dict:
    """The tool's JSON for the same arguments."""
    out = subprocess.run([str(tool_exe()), *map(str, args), "--format", "json"], check=True, capture_output=True,
                         text=True, cwd=SOURCE_ROOT)
    return json.loads(out.stdout)


def tool_error(*args) -> str:
    """The tool's refusal of the same request: its message, without the "kvevict: error: " it prints first."""
    out = subprocess.run([str(tool_exe()), "choose", "--model", KVM, *map(str, args), "--format", "json"],
                         capture_output=True, text=True, cwd=SOURCE_ROOT)
    assert out.returncode == 1, (out.returncode, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.startswith("kvevict: error: ")]
    assert len(lines) == 1, out.stderr
    return lines[0].removeprefix("kvevict: error: ")


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "tokensPerSecond"}


@pytest.fixture(scope="module")
def chosen(model):
    """The binding's answer, the text given as a path (which the narrowing commands then name)."""
    return kvevict.choose(model, SAMPLE, budget=BUDGET, policies=POLICIES, windows=WINDOWS, samples=SAMPLES)


def test_choose_equals_the_tool(chosen):
    want = tool("choose", "--model", KVM, "--text", SAMPLE, "--budget", BUDGET, "--policies", POLICIES,
                "--windows", WINDOWS, "--samples", SAMPLES)
    got = chosen
    assert list(got) == list(want) == ["command", "model", "rows", "plan", "fullCache", "recommendation", "narrow",
                                       "windows", "samples", "seconds"]
    assert got["command"] == "choose" and got["model"] == want["model"] == str(KVM)
    # What ran: the fixed plan, all of it.
    assert (got["windows"], got["samples"]) == (want["windows"], want["samples"]) == (WINDOWS, SAMPLES)
    # The plan: every count exactly; the probes did not run (fixed plan), so
    # their per-window and per-sample timings are 0 on both sides.
    assert list(got["plan"]) == list(want["plan"])
    assert ({k: v for k, v in got["plan"].items() if k not in TIMED_PLAN}
            == {k: v for k, v in want["plan"].items() if k not in TIMED_PLAN})
    assert (got["plan"]["windows"], got["plan"]["samples"], got["plan"]["depths"]) == (WINDOWS, SAMPLES, 2)
    assert got["plan"]["windowSeconds"] == got["plan"]["sampleSeconds"] == 0.0
    # The rows: the same keys in the same order, every number but the decode
    # speed exactly (the same bits per byte, intervals, passkey counts, bytes).
    assert [list(r) for r in got["rows"]] == [list(r) for r in want["rows"]]
    assert [untimed(r) for r in got["rows"]] == [untimed(r) for r in want["rows"]]
    assert untimed(got["fullCache"]) == untimed(want["fullCache"])
    assert got["narrow"] == want["narrow"]
    assert SPEED.sub("<speed> tokens/s", got["recommendation"]) == SPEED.sub("<speed> tokens/s",
                                                                             want["recommendation"])


def test_choose_ranks_by_extra_bits_and_recommends_rank_one(chosen):
    rows = chosen["rows"]
    assert sorted(r["policy"] for r in rows) == sorted(POLICIES.split(","))
    assert [r["rank"] for r in rows] == [1, 2, 3]
    extra = [r["extraBitsPerByte"] for r in rows]
    assert extra == sorted(extra)
    for r in rows:
        assert r["budget"] == BUDGET
        # two depths of one sample each
        assert r["passkeySamples"] == 2 * SAMPLES and 0 <= r["passkeyCorrect"] <= r["passkeySamples"]
        assert r["passkeyAccuracy"] == r["passkeyCorrect"] / r["passkeySamples"]
        assert r["extraLow"] <= r["extraBitsPerByte"] <= r["extraHigh"]  # two windows make an interval
        assert r["tokensPerSecond"] > 0
    # Every cache keeps `budget` positions of the same bytes: a sequence holds
    # budget / context of what the full cache holds at the context.
    context = chosen["plan"]["context"]
    assert all(r["kvBytes"] * context == chosen["fullCache"]["kvBytes"] * BUDGET for r in rows)
    # The line names rank 1 and prints its row, to the precision it prints.
    best = rows[0]
    line = chosen["recommendation"]
    assert line.startswith(
        f"{best['policy']}: {best['extraBitsPerByte']:+.4f} bits/byte "
        f"[{best['extraLow']:+.4f}, {best['extraHigh']:+.4f}], passkey {best['passkeyAccuracy']:.2f} "
        f"({best['passkeyCorrect']}/{best['passkeySamples']}), {best['tokensPerSecond']:.1f} tokens/s, ")
    assert SPEED.findall(line) == [f"{best['tokensPerSecond']:.1f}"]


def test_choose_takes_bytes_and_a_list_of_policies(model, chosen):
    got = kvevict.choose(model, SAMPLE.read_bytes(), budget=BUDGET, policies=POLICIES.split(","), windows=WINDOWS,
                         samples=SAMPLES)
    assert [untimed(r) for r in got["rows"]] == [untimed(r) for r in chosen["rows"]]
    # Bytes have no path: the narrowing commands name the text TEXT, the model by its path as given.
    assert got["narrow"] == [c.replace(f"--text {SAMPLE} ", "--text TEXT ") for c in chosen["narrow"]]
    assert all(f"--model {KVM} " in c for c in got["narrow"])


def flags(request: dict) -> list:
    """The tool's arguments for the binding's keywords (budget=128 -> --budget 128)."""
    return [arg for key, value in request.items() for arg in (f"--{key}", value)]


# Each request refused before any work, and the exception the binding raises:
# a ParameterError is ValueError (the core's message unchanged).
REFUSED = [
    dict(policies="lru"),
    dict(policies="h2o", budget=1024),  # at the context
    dict(policies="h2o", budget=1010),  # below it, but no room for a passkey sample that evicts
    dict(granularity="layer"),
    dict(granularity="sequence", policies="pyramidkv"),
    dict(minutes=0.01),
]


@pytest.mark.parametrize("refused", REFUSED, ids=[" ".join(map(str, flags(r))) for r in REFUSED])
def test_choose_refuses_what_the_tool_refuses(model, refused):
    request = {**dict(budget=BUDGET, windows=WINDOWS, samples=SAMPLES), **refused}
    with pytest.raises(ValueError) as error:
        kvevict.choose(model, SAMPLE, **request)
    assert str(error.value) == tool_error("--text", SAMPLE, *flags(request))


def test_choose_refuses_a_text_too_short_for_two_windows(model, tmp_path):
    short = tmp_path / "short.txt"
    short.write_bytes(SAMPLE.read_bytes()[:1000])  # within one window of the context of 1,024
    with pytest.raises(RuntimeError) as refused:
        kvevict.choose(model, short, budget=BUDGET, policies="h2o", windows=WINDOWS, samples=SAMPLES)
    assert str(refused.value).startswith("choose: the text makes 1 window(s) of 1024 positions")
    assert str(refused.value) == tool_error("--text", short, "--budget", BUDGET, "--policies", "h2o", "--windows",
                                            WINDOWS, "--samples", SAMPLES)


def test_choose_refuses_wrong_types(model):
    text = SAMPLE.read_bytes()[:2000]
    with pytest.raises(TypeError, match="text must be bytes, not str"):
        kvevict.choose(model, "some text")
    with pytest.raises(TypeError, match="model must be a kvevict.Model"):
        kvevict.choose(str(KVM), text)
    with pytest.raises(TypeError, match="budget must be an integer"):
        kvevict.choose(model, text, budget=128.0)
    with pytest.raises(TypeError, match="minutes must be a real number"):
        kvevict.choose(model, text, minutes="15")
    with pytest.raises(TypeError, match="windows must be an integer"):
        kvevict.choose(model, text, windows=1.5)
    with pytest.raises(ValueError, match=r"samples \(-1\) must be at least 0"):
        kvevict.choose(model, text, samples=-1)
    with pytest.raises(TypeError, match="choose: granularity must be a str"):
        kvevict.choose(model, text, granularity=1)
    with pytest.raises(ValueError, match="policies is empty"):
        kvevict.choose(model, text, policies=[])
