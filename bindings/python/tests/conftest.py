"""Shared paths and helpers of the kvevict Python test suite.

Run it with ``bindings/python/test.sh BUILD_DIR`` (PYTHONPATH=BUILD_DIR/python).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import kvevict

# bindings/python/tests/conftest.py -> the project root.
SOURCE_ROOT = Path(__file__).resolve().parents[3]
OWN_VECTORS = SOURCE_ROOT / "vectors"
PACKAGE_SOURCE = SOURCE_ROOT / "bindings" / "python" / "kvevict"

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
