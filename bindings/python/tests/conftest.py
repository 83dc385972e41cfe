"""Shared paths and helpers of the kvevict Python test suite.

Run it with ``bindings/python/test.sh BUILD_DIR`` (PYTHONPATH=BUILD_DIR/python).
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

import kvevict

# bindings/python/tests/conftest.py -> the project root.
SOURCE_ROOT = Path(__file__).resolve().parents[3]
OWN_VECTORS = SOURCE_ROOT / "vectors"
PACKAGE_SOURCE = SOURCE_ROOT / "bindings" / "python" / "kvevict"

# Odd arguments every entry point must answer with one of ALLOWED (or a
# result), never a crash: tests/test_errors.py and tests/test_model.py.
WEIRD = [None, True, -1, 0, 2**63, -(2**63) - 1, 1.5, math.nan, "x", "", b"", b"1", [], [1.5], [[1]], {},
         {"a": 1}, object(), np.float32(1), np.zeros((2, 2)), np.array(["a"]), kvevict.Policy]
ALLOWED = (TypeError, ValueError, RuntimeError, AttributeError, OverflowError)


def call_with_weird(entry_points: Iterable[Callable]) -> None:
    for call in entry_points:
        for v in WEIRD:
            try:
                call(v)
            except ALLOWED:
                pass


def ticks_during(call: Callable) -> tuple:
    """Runs `call` while another thread counts millisecond ticks; returns
    (seconds `call` took, ticks). Many ticks mean the GIL was released."""
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    worker = threading.Thread(target=tick)
    worker.start()
    try:
        started = time.monotonic()
        call()
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        worker.join()
    return elapsed, len(ticks)


# Filled in by test_vectors.py while collecting, reported at the end.
REPLAYED_CASES: dict = {}


def conformance_dir() -> Optional[Path]:
    """The peer's policybook folder, ../shared/conformance/policybook relative to
    the source tree (KVEVICT_CONFORMANCE_DIR overrides), or None when absent."""
    override = os.environ.get("KVEVICT_CONFORMANCE_DIR")
    path = Path(override) if override else SOURCE_ROOT.parent / "shared" / "conformance" / "policybook"
    return path if path.is_dir() else None


def pytest_report_header(config):
    peer = conformance_dir()
    return [
        f"kvevict {kvevict.__version__} from {Path(kvevict.__file__).parent}",
        f"peer conformance data: {peer if peer else 'absent (those tests are skipped)'}",
    ]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _report_required(terminalreporter, config)
    if REPLAYED_CASES:
        parts = ", ".join(f"{group} {n}" for group, n in REPLAYED_CASES.items())
        terminalreporter.write_line(f"vector cases replayed through Python (per mode): {parts}")


# ---- required modules ---------------------------------------------------------
# Every test module must run at least one test. A module-level skip (Dask, the
# model folder, an import) once left the whole pytest run -- one ctest entry --
# passing with that module silently gone. The one skip allowed to empty a
# module is the absent peer conformance folder (../shared/conformance), which
# the project's tests skip with a message by design.
_MODULE_OUTCOMES: dict = {}  # module file name -> {"passed": n, "skipped": [reasons], "failed": n}
_ALLOWED_EMPTY = "shared/conformance"


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def _record(nodeid: str, outcome: str, reason: str = "") -> None:
    entry = _MODULE_OUTCOMES.setdefault(_module_of(nodeid), {"passed": 0, "skipped": [], "failed": 0})
    if outcome == "passed":
        entry["passed"] += 1
    elif outcome == "skipped":
        entry["skipped"].append(reason)
    else:
        entry["failed"] += 1


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


_DESELECTED: set = set()  # modules with a test left out by -k or -m: not required to run one


def pytest_collectreport(report):
    # Every module collected gets an entry, so one that collected no test is
    # seen; a module-level pytest.skip(..., allow_module_level=True) arrives
    # here as a skipped report.
    if not report.nodeid.endswith(".py"):
        return
    _MODULE_OUTCOMES.setdefault(_module_of(report.nodeid), {"passed": 0, "skipped": [], "failed": 0})
    if report.skipped:
        _record(report.nodeid, "skipped", _skip_reason(report))
    elif report.failed:
        _record(report.nodeid, "failed")


def pytest_deselected(items):
    for item in items:
        _DESELECTED.add(_module_of(item.nodeid))


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _record(report.nodeid, report.outcome, _skip_reason(report) if report.skipped else "")


def required_module_problems(outcomes: dict, peer_present: bool) -> list:
    """The modules that ran no test, each with why: one line each."""
    problems = []
    for module in sorted(outcomes):
        entry = outcomes[module]
        if entry["passed"] > 0 or entry["failed"] > 0:
            continue
        reasons = sorted(set(entry["skipped"])) or ["no test collected"]
        if not peer_present and all(_ALLOWED_EMPTY in r for r in reasons):
            continue
        problems.append(f"python: required module {module} ran no test (skipped: {'; '.join(reasons)})")
    return problems


def pytest_sessionfinish(session, exitstatus):
    outcomes = {m: o for m, o in _MODULE_OUTCOMES.items()
                if not (m in _DESELECTED and o["passed"] == 0 and not o["skipped"] and o["failed"] == 0)}
    session.config._kvevict_required_problems = required_module_problems(outcomes, conformance_dir() is not None)
    if session.config._kvevict_required_problems and session.exitstatus == 0:
        session.exitstatus = 1


def _report_required(terminalreporter, config) -> None:
    for line in getattr(config, "_kvevict_required_problems", []):
        terminalreporter.write_line(f"kvevict: FAILED: {line}")
