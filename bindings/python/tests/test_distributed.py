"""kvevict.distributed on a LocalCluster of 2 worker processes: the rows equal,
field for field (all but the wall-clock `seconds`), the single-process
binding's; a worker killed mid-run loses nothing; a failing cell is named
and the others' rows kept; the command line writes its file and progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kvevict
from conftest import SOURCE_ROOT

try:
    import dask.distributed  # noqa: F401
except ImportError as error:  # install-deps.sh installs it: this is only for other machines
    pytest.skip(f"Dask distributed is not installed (Debian: apt-get install python3-distributed): {error}",
                allow_module_level=True)

import kvevict.distributed as kd

MODEL = SOURCE_ROOT / "model" / "kvevict-tiny.kvm"
HELDOUT = (SOURCE_ROOT / "model" / "heldout-sample.txt").read_bytes()
DOCS = {"doc-a": HELDOUT[:300], "doc-b": HELDOUT[8000:8300]}  # two short held-out documents
MODEL_POLICIES = ["h2o", "tova", "pyramidkv"]  # pyramidkv: per-layer parameters on the workers
MODEL_BUDGETS = [64, 128]


def without_seconds(value):
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


@pytest.fixture(scope="module")
def client():
    c = kd.local_client(2)
    yield c
    cluster = c.cluster
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def model_expected():
    """The single-process rows, one compare_model() per document."""
    model = kvevict.Model(MODEL)
    return {name: kvevict.compare_model(model, text, MODEL_POLICIES, MODEL_BUDGETS) for name, text in DOCS.items()}


def test_workers_are_single_threaded_with_one_omp_thread(client):
    info = client.scheduler_info()["workers"]
    assert len(info) == 2
    assert {w["nthreads"] for w in info.values()} == {1}
    # Read in each worker process (os.environ.get itself would be pickled with the client's environment).
    assert set(client.run(kd.worker_environ, "OMP_NUM_THREADS").values()) == {"1"}
    pids = set(client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids  # separate processes


def test_canonical_compare_equals_single_process(client):
    expected = kvevict.compare()
    done = []
    got = kd.compare(client=client, progress=lambda d, t: done.append((d, t)))
    assert len(got["rows"]) == 21
    assert without_seconds(got) == without_seconds(expected)
    assert [r["policy"] for r in got["rows"]] == [r["policy"] for r in expected["rows"]]  # the ranking
    assert done[0] == (0, 21) and done[-1] == (21, 21) and len(done) == 22


def test_compare_with_overrides_equals_single_process(client):
    overrides = {"h2o.recent_window": 8, "sinks": 2}
    args = dict(policies="h2o,streaming-llm,tova", budgets=[64, 256, 128], overrides=overrides, steps=700)
    expected = kvevict.compare(**args)
    got = kd.compare(**args, client=client)
    assert without_seconds(got) == without_seconds(expected)
    h2o = [r for r in got["rows"] if r["policy"] == "h2o"]
    assert {r["params"]["recentWindow"] for r in h2o} == {8} and {r["params"]["sinks"] for r in h2o} == {2}


def test_sweep_equals_single_process(client):
    values, budgets = [8, 16, 48], [64, 128]
    got = kd.sweep("h2o", "recent_window", values, budgets, params={"sinks": 1}, steps=900, client=client)
    expected = [kvevict.run("h2o", b, steps=900, sinks=1, recent_window=v) for v in values for b in budgets]
    assert without_seconds(got["rows"]) == without_seconds(expected)
    assert [(r["params"]["recentWindow"], r["budget"]) for r in got["rows"]] == \
        [(v, b) for v in values for b in budgets]
    tool = Path(kvevict.__file__).parents[2] / "kvevict"
    if tool.is_file():  # the tool's own sweep: the same rows, the same shape
        out = subprocess.run([str(tool), "sweep", "--policy", "h2o", "--param", "recentWindow=8,16,48",
                              "--budgets", "64,128", "--set", "sinks=1", "--steps", "900", "--format", "json"],
                             check=True, capture_output=True, text=True).stdout
        assert without_seconds(json.loads(out)) == without_seconds(got)


def test_compare_model_equals_single_process(client, model_expected):
    got = kd.compare_model(MODEL, DOCS, MODEL_POLICIES, MODEL_BUDGETS, client=client)
    assert [d["document"] for d in got] == list(DOCS)
    for doc in got:
        expected = model_expected[doc["document"]]
        assert len(doc["rows"]) == 1 + len(MODEL_POLICIES) * len(MODEL_BUDGETS)
        assert without_seconds(doc["rows"]) == without_seconds(expected)
        assert [list(r) for r in doc["rows"]] == [list(r) for r in expected]  # the key order too
    assert without_seconds(got[0]["rows"]) != without_seconds(got[1]["rows"])  # the documents differ


def test_compare_model_policy_cells_equal_single_process(client, model_expected):
    got = kd.compare_model(kvevict.Model(MODEL), DOCS, MODEL_POLICIES, MODEL_BUDGETS, cells="policy",
                           client=client)
    assert {d["document"]: without_seconds(d["rows"]) for d in got} == without_seconds(model_expected)


def test_killed_worker_loses_nothing(client, model_expected):
    killed = []

    def kill_one_busy_worker(done, total):
        if done != 1 or killed:
            return
        busy = [w for w, keys in client.processing().items() if keys]
        assert busy, "no cell in flight to lose"
        pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    got = kd.compare_model(MODEL, DOCS, MODEL_POLICIES, MODEL_BUDGETS, client=client,
                           progress=kill_one_busy_worker)
    assert len(killed) == 1
    assert {d["document"]: without_seconds(d["rows"]) for d in got} == without_seconds(model_expected)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it
    assert killed[0] not in client.run(os.getpid).values()


def test_bad_cell_is_named_and_the_others_are_kept(client):
    # H2O refuses a budget of 32 (its recent window is 32): that one cell fails.
    with pytest.raises(kd.CellsFailed) as caught:
        kd.compare(["tova", "h2o"], [32, 64], steps=500, client=client)
    error = caught.value
    assert [c.describe() for c, _ in error.failures] == ["h2o at budget 32 on trace decode-4096"]
    assert str(error).startswith("1 of 4 cells failed:")
    assert "h2o at budget 32 on trace decode-4096: ValueError: H2O: recentWindow (32)" in str(error)
    rows = error.result["rows"]
    # h2o has no row at the ranking budget (32): it ranks last, as the library ranks such a policy.
    assert [(r["policy"], r["budget"]) for r in rows] == [("tova", 32), ("tova", 64), ("h2o", 64)]
    for r in rows:
        assert without_seconds(r) == without_seconds(kvevict.run(r["policy"], r["budget"], steps=500))


def test_unreadable_document_is_named_and_the_others_are_kept(client, tmp_path, model_expected):
    good = tmp_path / "doc-a"
    good.write_bytes(DOCS["doc-a"])
    missing = tmp_path / "missing.txt"
    with pytest.raises(kd.CellsFailed) as caught:
        kd.compare_model(MODEL, [good, missing], ["tova"], [64], client=client)
    failed = {c.describe(): m for c, m in caught.value.failures}
    assert set(failed) == {f"full cache on document {missing}", f"tova at budget 64 on document {missing}"}
    assert all("not a readable file" in m for m in failed.values())
    docs = caught.value.result
    assert [d["document"] for d in docs] == [str(good), str(missing)] and docs[1]["rows"] == []
    expected = kvevict.compare_model(kvevict.Model(MODEL), DOCS["doc-a"], ["tova"], [64])
    assert without_seconds(docs[0]["rows"]) == without_seconds(expected)


def run_cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(Path(kvevict.__file__).parents[1]))
    return subprocess.run([sys.executable, "-m", "kvevict.distributed", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=240)


def test_cli_local_cluster_writes_rows_and_progress(tmp_path, model_expected):
    texts = tmp_path / "texts"
    texts.mkdir()
    for name, data in DOCS.items():
        (texts / name).write_bytes(data)
    out = tmp_path / "rows.json"
    proc = run_cli("compare-model", "--model", str(MODEL), "--texts", str(texts), "--policies",
                   ",".join(MODEL_POLICIES), "--budgets", ",".join(map(str, MODEL_BUDGETS)), "--workers", "2",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    written = json.loads(out.read_text())
    assert written["failures"] == [] and written["model"] == str(MODEL)
    assert [d["document"] for d in written["documents"]] == [str(texts / n) for n in DOCS]
    for doc in written["documents"]:
        assert without_seconds(doc["rows"]) == without_seconds(model_expected[Path(doc["document"]).name])
    progress = [line for line in proc.stderr.splitlines() if " cells done, " in line]
    assert progress[0].startswith("kvevict.distributed: 0/14 cells done")
    assert progress[-1].startswith("kvevict.distributed: 14/14 cells done") and "about 0:00 left" in progress[-1]
    assert len(progress) == 15  # plain lines (not a terminal): one per cell when few
    assert f"wrote {out} (14 rows)" in proc.stderr


def test_cli_on_a_scheduler_writes_the_good_rows_and_lists_failures(client, tmp_path):
    out = tmp_path / "rows.json"
    proc = run_cli("compare", "--scheduler", client.scheduler.address, "--policies", "tova,h2o",
                   "--budgets", "32,64", "--steps", "500", "--out", str(out), "--no-progress")
    assert proc.returncode == 1
    assert "kvevict.distributed: error: 1 of 4 cells failed:" in proc.stderr
    assert "h2o at budget 32 on trace decode-4096" in proc.stderr
    assert " cells done" not in proc.stderr
    written = json.loads(out.read_text())
    assert len(written["rows"]) == 3 and written["trace"] == "decode-4096"
    assert [f["cell"] for f in written["failures"]] == ["h2o at budget 32 on trace decode-4096"]
    assert written["failures"][0]["error"].startswith("ValueError: H2O: recentWindow (32)")


def test_cli_help_and_usage_errors(tmp_path):
    helped = run_cli("compare-model", "--help")
    assert helped.returncode == 0 and "--scheduler" in helped.stdout and "--texts" in helped.stdout
    bad = run_cli("compare", "--budgets", "64,x", "--workers", "1")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "kvevict.distributed: error: --budgets must be comma-separated integers, got '64,x'"]
    nomodel = run_cli("compare-model", "--model", str(tmp_path / "none.kvm"), "--texts", str(tmp_path / "x.txt"))
    assert nomodel.returncode == 2
    assert nomodel.stderr.strip().splitlines() == [f"kvevict.distributed: error: {tmp_path / 'none.kvm'}: no such model file"]
    unreachable = run_cli("compare", "--scheduler", "tcp://127.0.0.1:1", "--steps", "10")
    assert unreachable.returncode == 2 and len(unreachable.stderr.strip().splitlines()) == 1
    assert unreachable.stderr.startswith("kvevict.distributed: error: cannot reach the scheduler at tcp://127.0.0.1:1")
