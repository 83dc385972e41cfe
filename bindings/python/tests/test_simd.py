"""SIMD targets from Python: what the build holds, what the CPU runs, selecting
one (KVEVICT_SIMD at import, or select_simd), and the same decisions on each."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kvevict


@pytest.fixture
def restore_target():
    before = kvevict.simd()["active"]
    yield
    kvevict.select_simd(before)


def test_the_baseline_is_compiled_and_supported():
    info = kvevict.simd()
    assert info["compiled"][0] == "baseline"
    assert info["supported"][0] == "baseline"
    assert set(info["supported"]) <= set(info["compiled"])
    assert info["active"] in info["supported"]


def test_every_supported_target_decides_alike(restore_target):
    rows = {}
    for target in kvevict.simd()["supported"]:
        kvevict.select_simd(target)
        assert kvevict.simd()["active"] == target
        row = kvevict.run("scissorhands", budget=300, steps=700)
        rows[target] = (row["metrics"], row["evicted"])
    assert len(set(map(repr, rows.values()))) == 1, rows


def test_an_unknown_target_is_refused(restore_target):
    with pytest.raises(ValueError, match="'avx1024' is not one this build has"):
        kvevict.select_simd("avx1024")


def _import_with(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KVEVICT_SIMD=value)
    return subprocess.run([sys.executable, "-c", "import kvevict; print(kvevict.simd()['active'])"],
                          env=env, capture_output=True, text=True, timeout=120)


def test_kvevict_simd_is_read_at_import():
    done = _import_with("baseline")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "baseline"


def test_a_bad_kvevict_simd_fails_the_import_with_the_reason():
    done = _import_with("avx1024")
    assert done.returncode != 0
    assert "KVEVICT_SIMD=avx1024: SIMD target 'avx1024' is not one this build has" in done.stderr
