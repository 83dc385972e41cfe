#!/usr/bin/env bash
# `pip install ./bindings/python` and `pip wheel ./bindings/python` as a user
# runs them, offline with Debian's tools: a fresh
# `python3 -m venv --system-site-packages` in a scratch folder (numpy,
# setuptools and wheel come from Debian), `pip install --no-build-isolation
# --no-index` (setup.py's CMake build of the module), then, from a folder where the source tree is not importable and with
# `python -I` (no PYTHONPATH), a few calls whose results are pinned: the
# registry, the canonical scissorhands@512 row and trace hash (they change if
# the module was built with other flags), a Policy's step/evict, the stub and
# py.typed installed beside the module. Then `pip wheel` (incremental on the
# same build folder) must produce a wheel holding the module, stub and marker.
# Exit 77 (skip) when venv or pip is missing: scripts/test-all.sh counts that as
# a failure of this required suite.
#
# What is reused: given BUILD_DIR (ctest passes the Release build/), setup.py
# compiles nothing of its own (KVEVICT_REUSE_BUILD): it builds BUILD_DIR's
# kvevict_python target (up to date after the build make test just ran) and
# packs that module -- the one the python suite tested, compiled with the
# project's flags, which the pinned results check. Everything else is pip's
# own path: setup.py and pyproject.toml's metadata, the package's files, the
# venv install, the import from outside the tree, the wheel. Without
# BUILD_DIR setup.py configures and compiles the libraries itself (519 s in a
# make test run, sharing the cores), as a user's pip install does.
# Usage: pip_test.sh SOURCE_DIR [BUILD_DIR]
set -euo pipefail
src=$(cd "$1" && pwd -P)
if [[ -n ${2:-} ]]; then
  export KVEVICT_REUSE_BUILD
  KVEVICT_REUSE_BUILD=$(cd "$2" && pwd -P)
else
  unset KVEVICT_REUSE_BUILD
fi
python=${KVEVICT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "SKIP: $python -m venv is not available (Debian 12: apt-get install python3-venv)"
  exit 77
fi
"$python" -m venv --system-site-packages "$tmp/venv"
venv_python=$tmp/venv/bin/python
"$venv_python" -m pip --version >/dev/null 2>&1 ||
  { echo "SKIP: the venv has no pip (Debian 12: apt-get install python3-venv python3-pip)"; exit 77; }

# setup.py builds here (with BUILD_DIR, only setuptools' own files), not in
# bindings/python/build: the source tree is left as it was (checked at the end).
export KVEVICT_BUILD_DIR=$tmp/build
in_tree_outputs() { (cd "$src/bindings/python" && ls -d build ./*.egg-info 2>/dev/null || true); }
before=$(in_tree_outputs)
pip=("$venv_python" -m pip --disable-pip-version-check --no-input)
start=$SECONDS
"${pip[@]}" install --no-build-isolation --no-index "$src/bindings/python"
echo "pip install: $((SECONDS - start)) s${KVEVICT_REUSE_BUILD:+ (the module of $KVEVICT_REUSE_BUILD)}"

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
env -u PYTHONPATH "$venv_python" -I - "$tmp/venv" "$src" <<'PY'
import pathlib, sys
venv, src = (pathlib.Path(p).resolve() for p in sys.argv[1:3])
import numpy as np
import kvevict

where = pathlib.Path(kvevict.__file__).resolve().parent
assert venv in where.parents, f"kvevict imported from {where}, not from the venv {venv}"
assert src not in where.parents, f"kvevict imported from the source tree: {where}"
assert (where / "__init__.pyi").is_file(), "the stub __init__.pyi is not installed"
assert (where / "py.typed").is_file(), "py.typed is not installed"
assert list(where.glob("_kvevict*.so")), "no compiled module in the installed package"

names = [p["name"] for p in kvevict.policies()]
for name in ("scissorhands", "h2o", "streaming-llm", "sliding-window", "tova", "snapkv", "pyramidkv"):
    assert name in names, f"{name} missing from policies(): {names}"

# Pinned facts about decode-4096 (tests/canonical_test.cpp): they hold only
# for a module compiled as the project compiles it (-ffp-contract=off).
assert kvevict.trace_hash() == 3136039440, kvevict.trace_hash()
row = kvevict.run("scissorhands", 512)
m = row["metrics"]
got = (m["retainedAttentionMass"], m["heavyHitterRecall"], m["evictionCalls"])
assert got == (0.711377, 0.906047, 3584), got
assert row["policy"] == "scissorhands" and row["budget"] == 512 and row["steps"] == 4095, row

# A Policy object in a decode loop (it starts holding position 0): uniform
# attention over what it holds; past the budget, evict names one held
# position, never the newest (recent window 1), and leaves `budget` held.
policy = kvevict.Scissorhands(budget=4, recent_window=1)
held = [0]
evicted = 0
for pos in range(1, 20):
    policy.on_decode_step(pos, np.full(len(held), 1.0 / len(held), dtype=np.float32))
    held.append(pos)
    if policy.kept_count() > 4:
        victims = policy.evict(4)
        assert len(victims) == 1 and victims[0] in held and victims[0] != pos, (pos, victims, held)
        held.remove(victims[0])
        evicted += 1
    assert policy.kept_count() == len(held) <= 4, (pos, policy.kept_count(), held)
assert evicted == 16 and 19 in held, (evicted, held)
try:
    kvevict.policy("no-such-policy")
except ValueError:
    pass
else:
    raise AssertionError("an unknown policy name did not raise ValueError")
print(f"installed kvevict {kvevict.__version__} from {where}: checks passed")
PY

start=$SECONDS
"${pip[@]}" wheel --no-build-isolation --no-index --no-deps -w "$tmp/wheels" "$src/bindings/python"
echo "pip wheel: $((SECONDS - start)) s"
shopt -s nullglob
wheels=("$tmp"/wheels/kvevict-*-cp3*-linux_*.whl)
[[ ${#wheels[@]} -eq 1 ]] || { echo "FAIL: expected one kvevict-*-cp3*-linux_*.whl, got: $(ls "$tmp/wheels")"; exit 1; }
"$venv_python" - "${wheels[0]}" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("kvevict/__init__.py", "kvevict/__init__.pyi", "kvevict/py.typed"):
    assert want in names, f"{want} missing from {sys.argv[1]}: {names}"
assert any(n.startswith("kvevict/_kvevict") and n.endswith(".so") for n in names), names
print(f"wheel {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, module, stub and py.typed included")
PY
after=$(in_tree_outputs)
[[ $after == "$before" ]] ||
  { echo "FAIL: the build wrote into the source tree (KVEVICT_BUILD_DIR ignored?): $after"; exit 1; }
echo "pip: install and wheel passed"
