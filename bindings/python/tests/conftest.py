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
    if REPLAYED_CASES:
        parts = ", ".join(f"{group} {n}" for group, n in REPLAYED_CASES.items())
        terminalreporter.write_line(f"vector cases replayed through Python (per mode): {parts}")
