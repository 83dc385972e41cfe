"""The suite fails when a test module runs no test: a module-level skip (Dask
missing, the model folder missing) once left the one ctest entry `python`
passing with the module silently gone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kvevict
from conftest import required_module_problems


def test_a_module_that_ran_nothing_is_named_with_its_reason():
    outcomes = {
        "test_a.py": {"passed": 3, "skipped": ["torch is not installed"], "failed": 0},
        "test_distributed.py": {"passed": 0, "skipped": ["Dask distributed is not installed"], "failed": 0},
        "test_empty.py": {"passed": 0, "skipped": [], "failed": 0},
    }
    assert required_module_problems(outcomes, peer_present=True) == [
        "python: required module test_distributed.py ran no test (skipped: Dask distributed is not installed)",
        "python: required module test_empty.py ran no test (skipped: no test collected)",
    ]


def test_only_the_absent_peer_folder_may_empty_a_module():
    outcomes = {"test_vectors.py": {"passed": 0, "skipped": ["../shared/conformance/policybook is absent"],
                                    "failed": 0}}
    assert required_module_problems(outcomes, peer_present=False) == []
    assert len(required_module_problems(outcomes, peer_present=True)) == 1
    failing = {"test_x.py": {"passed": 0, "skipped": [], "failed": 2}}
    assert required_module_problems(failing, peer_present=True) == []  # failures speak for themselves


def test_a_whole_pytest_run_with_a_skipped_module_fails(tmp_path: Path):
    here = Path(__file__).resolve().parent
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_runs.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    (tmp_path / "test_gone.py").write_text(
        "import pytest\npytest.skip('Dask distributed is not installed', allow_module_level=True)\n")
    # The copied conftest imports the built package: the same one as here.
    package_root = str(Path(kvevict.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                          "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert ("kvevict: FAILED: python: required module test_gone.py ran no test "
            "(skipped: Dask distributed is not installed)") in run.stdout
    assert "1 passed, 1 skipped" in run.stdout
    # A module that collects no test at all is named too.
    (tmp_path / "test_gone.py").write_text("def helper():\n    return 1\n")
    empty = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                            "--rootdir", str(tmp_path), str(tmp_path)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert empty.returncode == 1, empty.stdout + empty.stderr
    assert "required module test_gone.py ran no test (skipped: no test collected)" in empty.stdout
    # -k leaving a module's tests out is not a failure.
    (tmp_path / "test_gone.py").write_text("def test_other():\n    assert True\n")
    picked = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", "test_ok",
                             "--rootdir", str(tmp_path), str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert picked.returncode == 0, picked.stdout + picked.stderr
    # Without the skipping module the same run passes.
    (tmp_path / "test_gone.py").unlink()
    again = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                            "--rootdir", str(tmp_path), str(tmp_path)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
