"""Replays every test-vector file through Python (tests/vector_replay.py):
the project's own vectors/ and, when the folder exists, the peer's
../shared/conformance/policybook. Each case runs twice: with float32 numpy
arrays (the zero-copy path, asserted on every step) and with plain lists (the
conversion path)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import List, Tuple

import pytest

import kvevict
from conftest import OWN_VECTORS, REPLAYED_CASES, conformance_dir
from vector_replay import policy_of, replay_case

MODES = ["numpy", "list"]


def vector_files(folder: Path) -> List[Path]:
    return sorted(folder.rglob("*.vectors.json"))


def cases_in(folder: Path, group: str) -> List[Tuple[str, str, dict]]:
    out = []
    for file in vector_files(folder):
        doc = json.loads(file.read_text())
        name = policy_of(doc)
        for i, case in enumerate(doc["cases"]):
            out.append((f"{group}/{file.name}#{i + 1} {case.get('name', '')}", name, case))
    return out


OWN_CASES = cases_in(OWN_VECTORS, "own")
PEER_DIR = conformance_dir()
PEER_CASES = cases_in(PEER_DIR, "peer") if PEER_DIR else []
# The first plain case (not a block or layer case, docs/paged.md).
FIRST_PLAIN = next(c for c in OWN_CASES if "blocks" not in c[2] and "layer" not in c[2])
REPLAYED_CASES["own"] = len(OWN_CASES)
REPLAYED_CASES["peer"] = len(PEER_CASES)


def test_own_vectors_are_there():
    assert len(vector_files(OWN_VECTORS)) >= len(kvevict.policies()), "one file per policy at least"
    assert len(OWN_CASES) > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_id,policy,case", OWN_CASES, ids=[c[0] for c in OWN_CASES])
def test_own_vector_case(case_id, policy, case, mode):
    result = replay_case(policy, case, mode)
    assert result.passed, f"{case_id}: " + "; ".join(result.failures)


if PEER_CASES:

    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("case_id,policy,case", PEER_CASES, ids=[c[0] for c in PEER_CASES])
    def test_peer_vector_case(case_id, policy, case, mode):
        result = replay_case(policy, case, mode)
        assert result.passed, f"{case_id}: " + "; ".join(result.failures)

else:

    def test_peer_vector_case():
        pytest.skip("../shared/conformance/policybook is absent: the peer's vectors are not replayed")


def test_every_registered_policy_has_vectors():
    covered = {c[1] for c in OWN_CASES}
    assert covered == {p["name"] for p in kvevict.policies()}


@pytest.mark.parametrize(
    "folder", [OWN_VECTORS, PEER_DIR], ids=["own", "peer"]
)
def test_cpp_runner_agrees_file_by_file(folder):
    """kvevict.run_vectors (the C++ runner) passes every case the Python
    replay passes, file by file."""
    if folder is None:
        pytest.skip("../shared/conformance/policybook is absent")
    for file in vector_files(folder):
        doc = json.loads(file.read_text())
        report = kvevict.run_vectors(file)
        assert report == {"passed": len(doc["cases"]), "failed": 0, "failures": []}, file
        assert report == kvevict.run_vectors([str(file)])


def test_replay_detects_a_wrong_expectation():
    """The Python replay is not vacuous: a tampered expectation fails, the
    case goes on, and a missing method ends it."""
    policy, case = FIRST_PLAIN[1], copy.deepcopy(FIRST_PLAIN[2])
    evicts = [s for s in case["steps"] if s["call"] == "evict" and "expect" in s]
    assert evicts, "the first case should end in an eviction"
    evicts[-1]["expect"] = evicts[-1]["expect"] + [10**6]
    result = replay_case(policy, case)
    assert len(result.failures) == 1 and "expected" in result.failures[0]

    case = copy.deepcopy(FIRST_PLAIN[2])
    case["steps"].insert(0, {"call": "noSuchQuery", "args": [], "expect": 0})
    result = replay_case(policy, case)
    assert len(result.failures) == 1 and "AttributeError" in result.failures[0]


def test_the_cpp_runner_reports_failures(tmp_path):
    bad = tmp_path / "bad.vectors.json"
    bad.write_text(json.dumps({
        "policy": "kv-cache/sliding-window", "version": 1,
        "cases": [{"name": "wrong on purpose", "params": {"budget": 1},
                   "steps": [{"call": "onDecodeStep", "args": [1, None]},
                             {"call": "evict", "args": [1], "expect": [1]}]}]}))
    report = kvevict.run_vectors([bad])
    assert report["passed"] == 0 and report["failed"] == 1
    assert len(report["failures"]) == 1 and "wrong on purpose" in report["failures"][0]


def test_paged_replay_detects_a_wrong_expectation():
    """The block and layer replays (docs/paged.md) are not vacuous either."""
    for key, call in (("blocks", "evictBlocks"), ("layer", "evictLayer")):
        policy, case = next((c[1], copy.deepcopy(c[2])) for c in OWN_CASES if key in c[2])
        steps = [s for s in case["steps"] if s["call"] == call and "expect" in s]
        assert steps, f"a {key} case should evict"
        steps[-1]["expect"] = [[10**6]]
        result = replay_case(policy, case)
        assert len(result.failures) == 1 and "expected" in result.failures[0], key
