"""kvevict evaluations on a Dask cluster: one machine or many.

The grid of an evaluation -- (policy, budget, trace or document) -- is split
into independent cells, one deterministic run each, submitted to a
``dask.distributed.Client`` and gathered in request order. The results are
exactly what the single-process functions return (only the wall-clock
``seconds`` fields differ)::

    import kvevict.distributed as kd

    kd.compare()                                   # == kvevict.compare(), on a LocalCluster
    kd.sweep("h2o", "recent_window", [16, 32, 64])  # == [kvevict.run(...) for each cell]
    docs = kd.compare_model("model/kvevict-tiny.kvm", ["a.txt", "b.txt"], budgets=[64, 128])
    docs[0]["rows"]                                # == kvevict.compare_model(model, open("a.txt", "rb").read(), ...)

Every function takes ``client=`` (a ``dask.distributed.Client``; without one a
``LocalCluster`` of ``workers`` single-threaded worker processes is started on
this machine and closed afterwards). Workers should run one thread each with
``OMP_NUM_THREADS=1``; the local cluster is started that way, and a warning
names any connected worker that is not.

Faults: a worker that dies mid-run loses nothing (Dask reruns its cells
elsewhere). A cell that raises (an unknown policy, a bad parameter, an
unreadable document) does not stop the others: the call raises one
:class:`CellsFailed` naming each failed cell, which carries the result built
from every other cell in ``.result``.

Command line (``python3 -m kvevict.distributed --help``)::

    python3 -m kvevict.distributed compare-model --model model/kvevict-tiny.kvm \\
        --texts DIR --policies h2o,tova --budgets 64,128 --workers 2 --out rows.json

See docs/distributed.md for clusters of several machines and Slurm.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

try:
    from dask.distributed import Client, LocalCluster, as_completed
except ImportError as _error:  # pragma: no cover - depends on the machine
    raise ImportError(
        "kvevict.distributed needs Dask distributed (Debian: apt-get install python3-dask "
        f"python3-distributed): {_error}"
    ) from _error

import kvevict

__all__ = ["compare", "sweep", "compare_model", "CellsFailed", "Cell", "local_client", "main"]

# The environment of every worker process the local cluster starts: one
# OpenMP thread, set before the library (and its OpenMP runtime) loads.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

Progress = Callable[[int, int], None]


# ---- cells ---------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One independent unit of work: one run (or, for compare_model with
    ``cells="policy"``, one policy at every budget) on one trace or document."""

    kind: str  # "run" (a trace), "model" (a document), "full" (a document's full cache)
    policy: Optional[str]
    budgets: Tuple[int, ...]
    params: Tuple[Tuple[str, int], ...] = ()
    trace: str = ""
    steps: Optional[int] = None
    document: str = ""  # the document's name (compare_model)
    text: Optional[bytes] = field(default=None, repr=False)  # None: read `document` as a path
    model: str = ""
    max_windows: int = 0

    def describe(self) -> str:
        """A short name for messages: policy, budget(s), trace or document."""
        budgets = ",".join(str(b) for b in self.budgets)
        params = "".join(f" {k}={v}" for k, v in self.params)
        if self.kind == "run":
            return f"{self.policy} at budget {budgets}{params} on trace {self.trace}"
        if self.kind == "full":
            return f"full cache on document {self.document}"
        plural = "s" if len(self.budgets) > 1 else ""
        return f"{self.policy} at budget{plural} {budgets}{params} on document {self.document}"


_MODELS: Dict[str, Any] = {}


def _model(path: str) -> Any:
    """The worker's loaded copy of the model at `path` (loaded once per process)."""
    if path not in _MODELS:
        _MODELS[path] = kvevict.Model(path)
    return _MODELS[path]


def _text(cell: Cell) -> Any:
    return cell.text if cell.text is not None else Path(cell.document)


def _execute(cell: Cell) -> List[Dict[str, Any]]:
    """Runs one cell in this process; returns its rows (raises what the library raises)."""
    if cell.kind == "run":
        params = dict(cell.params)
        return [kvevict.run(cell.policy, b, trace=cell.trace, steps=cell.steps, **params) for b in cell.budgets]
    model = _model(cell.model)
    if cell.kind == "full":
        full = kvevict.perplexity(model, _text(cell), [], max_windows=cell.max_windows)[0]
        return [_full_cache_row(full)]
    overrides = {cell.policy: dict(cell.params)} if cell.params else None
    rows = kvevict.compare_model(model, _text(cell), policies=[cell.policy], budgets=list(cell.budgets),
                                 overrides=overrides, max_windows=cell.max_windows)
    return rows[1:]  # the full cache comes from its own cell


def _run_cell(cell: Cell) -> Tuple[bool, Any]:
    """The task a worker runs: (True, rows) or (False, "Type: message")."""
    try:
        return True, _execute(cell)
    except Exception as error:  # a bad cell: reported by name, the others go on
        return False, f"{type(error).__name__}: {error}"


def _full_cache_row(row: Dict[str, Any]) -> Dict[str, Any]:
    """perplexity()'s full-cache row in compare_model()'s shape (unranked, no
    proxies): its fields in order, "rank" first and the proxies after
    "evicted", as the perplexity row's one description places them."""
    out: Dict[str, Any] = {"rank": None}
    for key, value in row.items():
        out[key] = value
        if key == "evicted":
            out.update(retainedAttentionMass=None, heavyHitterRecall=None, evictionCalls=None)
    return out


# ---- failures ------------------------------------------------------------------------


class CellsFailed(RuntimeError):
    """Some cells raised. ``failures`` lists (cell, message); ``result`` holds
    what the call would have returned, built from every other cell."""

    def __init__(self, failures: List[Tuple[Cell, str]], total: int, result: Any) -> None:
        self.failures = failures
        self.total = total
        self.result = result
        lines = [f"{len(failures)} of {total} cells failed:"]
        lines += [f"  {cell.describe()}: {message}" for cell, message in failures]
        super().__init__("\n".join(lines))


def failure_records(error: CellsFailed) -> List[Dict[str, Any]]:
    """The failures as JSON-ready dicts: cell (its description), policy, budgets, document, error."""
    out = []
    for cell, message in error.failures:
        record: Dict[str, Any] = {"cell": cell.describe(), "policy": cell.policy, "budgets": list(cell.budgets)}
        record["trace" if cell.kind == "run" else "document"] = cell.trace if cell.kind == "run" else cell.document
        record["error"] = message
        out.append(record)
    return out


# ---- the cluster ---------------------------------------------------------------------


def local_client(workers: Optional[int] = None) -> Client:
    """A Client on a new LocalCluster of `workers` processes (default: one per
    core), one thread each, with OMP_NUM_THREADS=1; no dashboard."""
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise ValueError(f"workers must be at least 1, got {n}")
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, env=dict(WORKER_ENV),
                           dashboard_address=None)
    return Client(cluster)


_WARNED: set = set()


def worker_environ(name: str) -> Optional[str]:
    """os.environ[name] where this runs: client.run(worker_environ, "OMP_NUM_THREADS").
    (client.run(os.environ.get, ...) would ship the client's own os.environ.)"""
    return os.environ.get(name)


def _check_workers(client: Client) -> None:
    """Warns (once per worker) about workers with several threads or without OMP_NUM_THREADS=1."""
    try:
        info = client.scheduler_info().get("workers", {})
        env = client.run(worker_environ, "OMP_NUM_THREADS")
    except Exception:  # the check is advice; the run goes on
        return
    for address, worker in info.items():
        problems = []
        if worker.get("nthreads", 1) != 1:
            problems.append(f"{worker.get('nthreads')} threads (start it with --nthreads 1)")
        if env.get(address) != "1":
            problems.append(f"OMP_NUM_THREADS={env.get(address)} (set OMP_NUM_THREADS=1)")
        if problems and address not in _WARNED:
            _WARNED.add(address)
            print(f"kvevict.distributed: warning: worker {address} has " + " and ".join(problems)
                  + ": the library's OpenMP may oversubscribe its cores", file=sys.stderr)


def _submit_all(cells: Sequence[Cell], client: Optional[Client], workers: Optional[int],
                progress: Optional[Progress]) -> List[Tuple[bool, Any]]:
    """Runs every cell on the cluster; returns their outcomes in cell order."""
    own = client is None
    if own:
        client = local_client(workers)
    try:
        _check_workers(client)
        token = uuid.uuid4().hex[:8]
        futures = [client.submit(_run_cell, cell, key=f"kvevict-{token}-{i}", pure=False)
                   for i, cell in enumerate(cells)]
        index = {f.key: i for i, f in enumerate(futures)}
        outcomes: List[Optional[Tuple[bool, Any]]] = [None] * len(cells)
        done = 0
        if progress:
            progress(0, len(cells))
        for future in as_completed(futures):
            i = index[future.key]
            try:
                outcomes[i] = future.result()
            except Exception as error:  # lost past Dask's retries (KilledWorker), cancelled
                outcomes[i] = (False, f"{type(error).__name__}: {error}")
            future.release()
            done += 1
            if progress:
                progress(done, len(cells))
        return [o for o in outcomes if o is not None]
    finally:
        if own:
            cluster = client.cluster
            client.close()
            if cluster is not None:
                cluster.close()


# ---- requests --------------------------------------------------------------------------


def _policy_names(policies: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(policies, str):
        if policies == "all":
            # What a trace can feed: the key-aware policies need keys.
            return [d["name"] for d in kvevict.policies() if set(d["signals"]) <= {"attention"}]
        names = [p.strip() for p in policies.split(",") if p.strip()]
    else:
        names = [str(p) for p in policies]
    if not names:
        raise ValueError('no policies given (use "all" for every policy)')
    return names


def _budget_list(budgets: Sequence[int]) -> List[int]:
    if isinstance(budgets, (str, bytes)):
        raise TypeError(f"budgets must be a sequence of integers, got {type(budgets).__name__}")
    out = sorted({int(b) for b in budgets})
    if not out:
        raise ValueError("the budget list is empty")
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _policy_params() -> Dict[str, set]:
    return {d["name"]: {p["name"] for p in d["params"]} for d in kvevict.policies()}


def _per_policy_overrides(names: Sequence[str],
                          overrides: Optional[Mapping[str, Any]]) -> Dict[str, Dict[str, int]]:
    """compare()'s overrides resolved per compared policy: {"h2o.recent_window": 8},
    {"h2o": {"recent_window": 8}} or {"recent_window": 8} (every compared policy
    that has it). Keys that would be ignored are refused, as compare() does; a
    bad value is left to the cell, which names it."""
    out: Dict[str, Dict[str, int]] = {n: {} for n in names}
    if not overrides:
        return out
    if not isinstance(overrides, Mapping):
        raise TypeError(f"overrides must be a dict such as {{\"h2o.recent_window\": 64}}, "
                        f"got {type(overrides).__name__}")
    known = _policy_params()
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            pairs = [(key, k, v) for k, v in value.items()]
        elif "." in key:
            policy, param = key.split(".", 1)
            pairs = [(policy, param, value)]
        else:
            users = [n for n in dict.fromkeys(names) if {key, _camel(key)} & known.get(n, set())]
            if not users:
                raise ValueError(f"no compared policy has a parameter '{key}'")
            pairs = [(n, key, value) for n in users]
        for policy, param, v in pairs:
            if policy not in out:
                raise ValueError(f"'{key}' sets a parameter of {policy}, which is not compared")
            if _camel(param) == "budget":
                raise ValueError("set budgets with budgets=, not overrides")
            out[policy][_camel(param) if _camel(param) in known.get(policy, set()) else param] = v
    return out


def _rank(rows: List[Dict[str, Any]], budgets: Sequence[int], score: Callable[[Dict[str, Any]], float],
          with_rank: bool) -> List[Dict[str, Any]]:
    """The library's ranking (src/eval/ranking.h): each policy scored by its row at
    the middle budget, best first, ties in order of first appearance, each
    policy's rows by budget; competition ranks (1, 2, 2, 4) when with_rank."""
    unique = sorted(set(budgets))
    rank_budget = unique[(len(unique) - 1) // 2]
    keys: Dict[str, List[float]] = {}
    for i, r in enumerate(rows):
        keys.setdefault(r["policy"], [-math.inf, float(i)])
    for r in rows:
        if r["budget"] == rank_budget:
            s = float(score(r))
            keys[r["policy"]][0] = -math.inf if math.isnan(s) else s
    ordered = sorted(rows, key=lambda r: (-keys[r["policy"]][0], keys[r["policy"]][1], r["budget"]))
    if with_rank:
        for r in ordered:
            own = keys[r["policy"]][0]
            r["rank"] = 1 + sum(1 for k in keys.values() if k[0] > own)
    return ordered


def _collect(cells: Sequence[Cell], outcomes: Sequence[Tuple[bool, Any]]) -> Tuple[List[Any], List[Tuple[Cell, str]]]:
    rows, failures = [], []
    for cell, (ok, value) in zip(cells, outcomes):
        if ok:
            rows.extend(value)
        else:
            failures.append((cell, value))
    return rows, failures


def _trace_name(trace: Any) -> str:
    return os.fspath(trace) if hasattr(trace, "__fspath__") else str(trace)


def compare(policies: Union[str, Sequence[str]] = "all", budgets: Sequence[int] = (256, 512, 1024),
            overrides: Optional[Mapping[str, Any]] = None, trace: Any = "decode-4096",
            steps: Optional[int] = None, *, client: Optional[Client] = None, workers: Optional[int] = None,
            progress: Optional[Progress] = None) -> Dict[str, Any]:
    """kvevict.compare() with one cell per (policy, budget): the same
    document, {"command": "compare", "model": None, "rows", "trace"} (the
    tool's envelope), ranked the same way. Raises CellsFailed (with
    ``.result``) when cells fail."""
    names = _policy_names(policies)
    budget_list = _budget_list(budgets)
    per_policy = _per_policy_overrides(names, overrides)
    trace_id = _trace_name(trace)
    cells = [Cell("run", n, (b,), tuple(per_policy[n].items()), trace=trace_id, steps=steps)
             for n in names for b in budget_list]
    rows, failures = _collect(cells, _submit_all(cells, client, workers, progress))
    result = {"command": "compare", "model": None,
              "rows": _rank(rows, budget_list, lambda r: r["metrics"]["retainedAttentionMass"], False),
              "trace": rows[0]["trace"] if rows else trace_id}
    if failures:
        raise CellsFailed(failures, len(cells), result)
    return result


def sweep(policy: str, param: str, values: Sequence[int], budgets: Sequence[int] = (256, 512, 1024),
          params: Optional[Mapping[str, int]] = None, trace: Any = "decode-4096", steps: Optional[int] = None,
          *, client: Optional[Client] = None, workers: Optional[int] = None,
          progress: Optional[Progress] = None) -> Dict[str, Any]:
    """The tool's `sweep`: `policy` with `param` at each of `values`, at each
    budget (param "budget": the values are the budgets), one cell per run.
    Returns the tool's document, {"command": "sweep", "model": None, "rows",
    "trace"}, the rows in the tool's order (values, then budgets); each
    row is kvevict.run(policy, budget, trace, steps, **params, param=value)."""
    if not values:
        raise ValueError("sweep: no values to sweep")
    base = {k: int(v) for k, v in (params or {}).items()}
    trace_id = _trace_name(trace)
    cells = []
    for v in values:
        if _camel(param) == "budget":
            cells.append(Cell("run", policy, (int(v),), tuple(base.items()), trace=trace_id, steps=steps))
            continue
        if not budgets:
            raise ValueError("sweep: the budget list is empty")
        for b in budgets:
            cells.append(Cell("run", policy, (int(b),), tuple({**base, param: int(v)}.items()),
                              trace=trace_id, steps=steps))
    rows, failures = _collect(cells, _submit_all(cells, client, workers, progress))
    result = {"command": "sweep", "model": None, "rows": rows, "trace": rows[0]["trace"] if rows else trace_id}
    if failures:
        raise CellsFailed(failures, len(cells), result)
    return result


def _documents(texts: Any) -> List[Tuple[str, Optional[bytes]]]:
    """(name, bytes or None to read the name as a path) per document, in order."""
    if isinstance(texts, (str, bytes, bytearray, memoryview)) or hasattr(texts, "__fspath__"):
        texts = [texts]
    items = list(texts.items()) if isinstance(texts, Mapping) else [(None, t) for t in texts]
    out = []
    for i, (name, t) in enumerate(items):
        if isinstance(t, (bytes, bytearray, memoryview)):
            out.append((str(name) if name is not None else f"text{i}", bytes(t)))
        elif isinstance(t, str) or hasattr(t, "__fspath__"):
            if name is not None:
                raise TypeError("a mapping of texts must hold bytes; pass a list for paths")
            out.append((os.fspath(t), None))
        else:
            raise TypeError(f"each text must be bytes or a path, got {type(t).__name__}")
    if not out:
        raise ValueError("no texts given")
    return out


def compare_model(model: Any, texts: Any, policies: Union[str, Sequence[str]] = "all",
                  budgets: Sequence[int] = (64, 128, 256, 512), overrides: Optional[Mapping[str, Any]] = None,
                  max_windows: int = 0, *, cells: str = "run", client: Optional[Client] = None,
                  workers: Optional[int] = None, progress: Optional[Progress] = None) -> List[Dict[str, Any]]:
    """kvevict.compare_model() over several documents: returns
    [{"document": name, "rows": rows}] in the order given, each `rows` equal to
    kvevict.compare_model(model, document, policies, budgets, overrides, max_windows).

    model: a kvevict.Model or a .kvm path, readable by every worker.
    texts: paths (read by the workers: shared or copied to each machine),
        bytes, or a {name: bytes} mapping.
    cells: "run" -- one cell per (document, policy, budget), plus one per
        document for the full cache; "policy" -- one per (document, policy) with
        every budget, fewer repeated full-cache passes (each cell also replays the
        full cache once for its proxies) but coarser faults.
    """
    model_path = model.path if isinstance(model, kvevict.Model) else os.fspath(model)
    if not Path(model_path).is_file():
        raise ValueError(f"{model_path}: no such model file")
    if cells not in ("run", "policy"):
        raise ValueError(f'cells must be "run" or "policy", got {cells!r}')
    names = _policy_names(policies)
    budget_list = _budget_list(budgets)
    per_policy = _per_policy_overrides(names, overrides)
    docs = _documents(texts)
    groups = [(b,) for b in budget_list] if cells == "run" else [tuple(budget_list)]
    plan: List[Cell] = []
    for name, data in docs:
        common = dict(document=name, text=data, model=model_path, max_windows=int(max_windows))
        plan.append(Cell("full", None, (), **common))
        plan += [Cell("model", n, g, tuple(per_policy[n].items()), **common) for n in names for g in groups]
    outcomes = _submit_all(plan, client, workers, progress)
    out, failures = [], []
    for name, _ in docs:
        mine = [(c, o) for c, o in zip(plan, outcomes) if c.document == name]
        rows, failed = _collect([c for c, _ in mine], [o for _, o in mine])
        failures += failed
        full = [r for r in rows if r["policy"] is None]
        ranked = _rank([r for r in rows if r["policy"] is not None], budget_list, lambda r: -r["perplexity"], True)
        out.append({"document": name, "rows": full + ranked})
    if failures:
        raise CellsFailed(failures, len(plan), out)
    return out


# ---- the command line ---------------------------------------------------------------------


class ProgressBar:
    """cells done / total, elapsed and an estimate on stderr: one redrawn line on
    a terminal, plain lines otherwise (each cell when few, else every 10% or 10 s)."""

    def __init__(self, stream: Any = None, label: str = "cells") -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.label = label
        self.started = time.monotonic()
        self.last_line = -math.inf
        self.last_decile = -1

    @staticmethod
    def _clock(seconds: float) -> str:
        s = int(round(seconds))
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        elapsed = now - self.started
        eta = "?" if done == 0 else self._clock(elapsed / done * (total - done))
        text = f"{done}/{total} {self.label} done, {self._clock(elapsed)} elapsed, about {eta} left"
        if self.tty:
            width = 30
            filled = width * done // max(total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
            if done == total:
                self.stream.write("\n")
            self.stream.flush()
            return
        decile = 10 * done // max(total, 1)
        if total <= 20 or done in (0, total) or decile > self.last_decile or now - self.last_line >= 10:
            self.stream.write(f"kvevict.distributed: {text}\n")
            self.stream.flush()
            self.last_line = now
            self.last_decile = decile


def _int_list(text: str, what: str) -> List[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be comma-separated integers, got '{text}'") from None
    if not out:
        raise argparse.ArgumentTypeError(f"{what} is empty")
    return out


def _sets(items: Sequence[str]) -> Dict[str, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key] = int(value)
        except ValueError:
            raise ValueError(f"--set {item}: expected POLICY.KEY=VALUE or KEY=VALUE with an integer value") from None
    return out


def _texts_of(paths: Sequence[str]) -> List[str]:
    out: List[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = sorted(str(f) for f in path.iterdir() if f.is_file() and not f.name.startswith("."))
            if not files:
                raise ValueError(f"--texts {p}: the folder holds no files")
            out += files
        else:
            out.append(p)  # a missing file fails as its own cells, named
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m kvevict.distributed",
        description="Run a kvevict evaluation on a Dask cluster, one cell per (policy, budget, trace or "
                    "document), and write the rows as JSON (the Python binding's row schema).",
        epilog="Without --scheduler a local cluster of --workers processes (default: one per core) is "
               "started, one thread each, OMP_NUM_THREADS=1. Exit status: 0 done, 1 some cells failed "
               "(the other rows are written, the failures listed), 2 a usage error. See docs/distributed.md.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--policies", default="all", help="comma-separated names, or all (default: all)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)")

    def cluster(p: argparse.ArgumentParser) -> None:
        p.add_argument("--scheduler", metavar="ADDRESS", help="a running scheduler, e.g. tcp://HOST:8786")
        p.add_argument("--scheduler-file", metavar="FILE",
                       help="a running scheduler's file (dask-scheduler --scheduler-file FILE)")
        p.add_argument("--workers", type=int, metavar="N", help="without --scheduler: local worker processes")
        p.add_argument("--out", metavar="FILE", help="write the JSON here (default: standard output)")
        p.add_argument("--no-progress", action="store_true", help="print no progress on standard error")

    cm = sub.add_parser("compare-model", help="policies x budgets by perplexity of a model over documents",
                        description="kvevict.compare_model over each document, one cell per (document, "
                                    "policy, budget). Output: {\"model\", \"documents\": [{\"document\", "
                                    "\"rows\"}], \"failures\"}.")
    cm.add_argument("--model", required=True, help="model weights (.kvm), readable by every worker")
    cm.add_argument("--texts", required=True, nargs="+", metavar="PATH",
                    help="documents: files, or folders whose files are each a document (paths every worker can read)")
    common(cm)
    cm.add_argument("--budgets", default="64,128,256,512", help="comma-separated budgets (default: 64,128,256,512)")
    cm.add_argument("--max-windows", type=int, default=0, help="use only the first N context windows (0 = all)")
    cm.add_argument("--cells", choices=["run", "policy"], default="run",
                    help="one cell per (document, policy, budget) (run, the default) or per (document, policy)")
    cluster(cm)

    cp = sub.add_parser("compare", help="policies x budgets on a trace, ranked by retained mass",
                        description="kvevict.compare, one cell per (policy, budget). Output: the tool's "
                                    "`compare --format json` shape {\"trace\", \"rows\"}, plus \"failures\".")
    common(cp)
    cp.add_argument("--budgets", default="256,512,1024", help="comma-separated budgets (default: 256,512,1024)")
    cp.add_argument("--trace", default="decode-4096", help="generated trace id or FILE.npy (default: decode-4096)")
    cp.add_argument("--steps", type=int, help="replay only the first N steps")
    cluster(cp)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    prog = "kvevict.distributed"
    try:
        budgets = _int_list(args.budgets, "--budgets")
        overrides = _sets(args.set)
        if args.out and Path(args.out).is_dir():
            raise ValueError(f"--out {args.out}: is a folder")
        if args.out and not Path(args.out).resolve().parent.is_dir():
            raise ValueError(f"--out {args.out}: its folder does not exist")
        if args.scheduler and args.scheduler_file:
            raise ValueError("give --scheduler or --scheduler-file, not both")
        remote = args.scheduler or args.scheduler_file
        if remote and args.workers is not None:
            raise ValueError("--workers starts a local cluster; with a scheduler, start workers with dask-worker")
        if args.scheduler_file and not Path(args.scheduler_file).is_file():
            raise ValueError(f"--scheduler-file {args.scheduler_file}: no such file (is dask-scheduler running?)")
        progress = None if args.no_progress else ProgressBar()
        client = None
        if remote:
            try:
                client = (Client(args.scheduler, timeout=10) if args.scheduler
                          else Client(scheduler_file=args.scheduler_file, timeout=10))
            except Exception as error:
                raise ValueError(f"cannot reach the scheduler at {remote}: {error}") from None
        try:
            if args.command == "compare-model":
                texts = _texts_of(args.texts)
                result: Any = compare_model(args.model, texts, args.policies, budgets, overrides,
                                            args.max_windows, cells=args.cells, client=client,
                                            workers=args.workers, progress=progress)
            else:
                result = compare(args.policies, budgets, overrides, args.trace, args.steps, client=client,
                                 workers=args.workers, progress=progress)
            failures: List[Dict[str, Any]] = []
        except CellsFailed as error:
            result, failures = error.result, failure_records(error)
            first, *rest = str(error).splitlines()
            print(f"{prog}: error: {first}", file=sys.stderr)
            for line in rest:
                print(f"{prog}: {line}", file=sys.stderr)
        finally:
            if client is not None:
                client.close()
    except (ValueError, TypeError, OSError, argparse.ArgumentTypeError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if args.command == "compare-model":
        document = {"model": args.model, "documents": result, "failures": failures}
    else:
        document = {**result, "failures": failures}
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        tmp = Path(args.out + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        rows = sum(len(d["rows"]) for d in result) if args.command == "compare-model" else len(result["rows"])
        failed = f", {len(failures)} failed cells listed" if failures else ""
        print(f"{prog}: wrote {args.out} ({rows} rows{failed})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
