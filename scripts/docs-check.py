#!/usr/bin/env python3
"""Runs every command README.md and docs/ show, as written, and compares what
they print with what the page shows.

Each page's commands run in order in a fresh folder of their own that holds
links to the repository's build/, model/, vectors/, docs/ and scripts/ (so a
page that writes attention.npy and then reads it works, and nothing in the
clone is written). `/tmp/` in a command means that folder's tmp/. A table's command must
print the table the page shows, every cell of every row, except the columns
that measure time or speed (TIME_HEADER); a `bench` table's cells are all
measurements but its configuration columns (BENCH_CONFIG: what ran, budget,
threads, runs, prompt, tokens), which are compared. A `$ command` block must
print the lines under it. A table command marked with its time (see
scripts/doc_commands.py) is not run: the committed table of its quick variant
right under it is compared cell by cell in its place (a long table without one
fails), and --full (`make docs-verify`, outside CI) runs and compares the long
one in full too. A marked command in a code block runs its quick variant, which
must succeed (in full with --full). A command that names a file the reader
brings (a model they serve, their own trace) runs on a stand-in made here --
in a code block, as its quick variant (it has no table to compare, and the
stand-in's time says nothing of the reader's file), in full with --full; one
written with placeholders (`FILE`, `[--flag]`, `...`) is listed, not run.
Without `make heldout`'s build/heldout-split.txt, commands read its first
16 KiB, model/heldout-sample.txt, instead (the same bytes as far as they go);
with --full, a long command that reads the split fails without it.

Pages run side by side (--jobs, default one a core; a page's own commands in
order), each command with OMP_NUM_THREADS set to its share of the cores so
that no two pages' threads fight over one (what a command prints does not
depend on its threads); each page's lines print when it is done, in order.

Usage: scripts/docs-check.py [--build DIR] [--full] [--list] [--only TEXT] [--probe SECONDS] [--keep DIR] [--jobs N]
  --build DIR      the build the pages' build/ means (default: the clone's build/)
  --full           run the long commands in full too and compare their tables
                   cell by cell (hours: make docs-verify, not make test)
  --list           print the commands and what the check does with each; run nothing
  --only TEXT      check only the commands containing TEXT (repeatable)
  --probe SECONDS  run every command in full, long ones too, stopping each at
                   SECONDS, and print how long each took (to mark long ones)
  --keep DIR       work in DIR (kept) instead of a temporary folder
  --jobs N         pages checked at once (default: the cores; 1 with --probe)
Exit status 1 when any command fails or prints something else than its page.
"""
import concurrent.futures
import os
import pathlib
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from doc_commands import (LONG_SECONDS, ROOT, commands, documents, format_seconds,  # noqa: E402
                          parse_seconds, quick_text, quick_variant, with_flags)

# A command running longer than this without a time mark fails: mark it. Its
# time is the lesser of its wall-clock and its CPU seconds: alongside other
# suites (ctest -j) a one-thread command's wall clock stretches with the
# machine's load, its CPU time does not; a command using several threads has
# the wall clock. Past HANG_FACTOR times the limit it is stopped either way.
# Six times the time update-docs.py marks at (LONG_SECONDS, 10 s): a command
# measured just under the mark on an idle machine is not failed by a loaded
# one (make test's other jobs doubled such times), and the commands of a
# page's sh blocks (run on stand-in files, with no table to shorten them by a
# quick variant) measure up to about 50 s on a loaded machine.
UNMARKED_LIMIT_S = 6 * LONG_SECONDS
HANG_FACTOR = 4
LINKS = {"build": ROOT / "build", "model": ROOT / "model", "vectors": ROOT / "vectors", "docs": ROOT / "docs",
         "scripts": ROOT / "scripts"}
# Each command's OpenMP threads: the cores over the pages checked at once.
THREADS_EACH = os.cpu_count() or 1
# Files a page names that the reader brings; made here so the command runs.
STAND_INS = {
    "SmolLM2-135M-Instruct-Q8_0.gguf":
        "build/kvevict random-model --arch llama --type q8_0 --context 2048 --out SmolLM2-135M-Instruct-Q8_0.gguf",
    "Llama-3.2-1B-Q4_K_M.gguf":
        "build/kvevict random-model --arch llama --type q4_k --context 2048 --out Llama-3.2-1B-Q4_K_M.gguf",
    "Qwen2.5-0.5B/":
        "build/kvevict random-model --arch qwen2 --format safetensors --type bf16 --context 2048 --out Qwen2.5-0.5B",
    "my-layer.npy": "build/kvevict trace --steps 300 --out my-layer.npy",
    "corpus/": "mkdir -p corpus && head -c 2048 model/heldout-sample.txt > corpus/a.txt"
               " && tail -c 2048 model/heldout-sample.txt > corpus/b.txt",
}
PLACEHOLDER = re.compile(r"\[--|\.\.\.|\bpath/to/|\b(ID|FILE|HOST|N|S|M|T)\b|SCHEDULER|/shared/|\$SCHED")
TIME_HEADER = re.compile(r"time|second|\bms\b|µs|\bns\b|/s\b|per s|wall|took|speed|bandwidth|GB/s|ratio", re.I)
# A `bench` table's columns that say what ran: compared; every other column of
# it is a measurement (a time, a share of one, a floor read from memory).
BENCH_CONFIG = {"mode", "policy", "model", "budget", "threads", "runs", "prompt", "tokens"}
# Words in printed lines that measure time: compared as "<time>".
TIME_WORD = re.compile(r"\b\d+(\.\d+)?\s*(ms|µs|us|ns|s|min)\b")


def cells(row: str) -> list:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def compare_table(expected: list, printed: list, measured: bool = False) -> str:
    """'' when the printed table equals the page's cell for cell, the columns
    of times aside; else why not. `measured`: a benchmark's table, only its
    configuration columns (BENCH_CONFIG) compared."""
    got = [line for line in printed if line.startswith("|")]
    if not got:
        return "printed no markdown table"
    head = cells(expected[0])
    if cells(got[0]) != head:
        return f"columns differ: page {head}, printed {cells(got[0])}"
    if len(got) != len(expected):
        return f"page shows {len(expected) - 2} rows, command printed {len(got) - 2}"
    timed = {k for k, name in enumerate(head)
             if ((name not in BENCH_CONFIG) if measured else TIME_HEADER.search(name))}
    for n, (want, have) in enumerate(zip(expected[2:], got[2:]), 1):
        w, h = cells(want), cells(have)
        for k, (a, b) in enumerate(zip(w, h)):
            if k not in timed and a != b:
                return f"row {n}, column '{head[k]}': page shows {a!r}, command printed {b!r}"
    return ""


def compare_lines(expected: list, printed: list) -> str:
    want = [TIME_WORD.sub("<time>", line) for line in expected if line.strip()]
    have = [TIME_WORD.sub("<time>", line) for line in printed if line.strip()]
    if want != have:
        return f"page shows {want!r}, command printed {have!r}"
    return ""


def prepare(folder: pathlib.Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    for name, target in LINKS.items():
        link = folder / name
        if not link.exists():
            link.symlink_to(target)


def environment(folder: pathlib.Path) -> dict:
    env = dict(os.environ)
    # The docs' python3 is Debian's, with numpy and the built module.
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    env["PYTHONPATH"] = str(folder / "build" / "python")
    env.pop("NO_COLOR", None)
    env["OMP_NUM_THREADS"] = str(THREADS_EACH)
    return env


def shell(text: str, folder: pathlib.Path, timeout: float, terminal: bool = False) -> tuple:
    """(exit status or None when stopped at `timeout`, stdout, stderr, seconds,
    CPU seconds of the command and everything it waited for).

    With `terminal`, stderr is a pseudo-terminal, where the tool's progress
    line is redrawn at every step (a probe reads the last one)."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        master = slave = None
        chunks = []
        if terminal:
            master, slave = pty.openpty()

            def drain() -> None:
                while True:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        return
                    if not data:
                        return
                    chunks.append(data)
            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
        proc = subprocess.Popen(["bash", "-c", text], cwd=folder, env=environment(folder), stdout=out,
                                stderr=slave if terminal else err, start_new_session=True)
        # os.wait4, not proc.wait: its resource usage is the CPU time.
        rc, usage = None, None
        while usage is None:
            pid, status, used = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc, usage = os.waitstatus_to_exitcode(status), used
            elif time.monotonic() - start > timeout:
                os.killpg(proc.pid, 9)
                usage = os.wait4(proc.pid, 0)[2]
            else:
                time.sleep(0.05)
        proc.returncode = -9 if rc is None else rc  # reaped here: Popen must not wait again
        seconds = time.monotonic() - start
        cpu = usage.ru_utime + usage.ru_stime
        out.seek(0)
        err.seek(0)
        errors = err.read()
        if terminal:
            os.close(slave)
            reader.join(timeout=5)
            os.close(master)
            errors = b"".join(chunks).decode(errors="replace").replace("\r", "\n")
        return rc, out.read(), errors, seconds, cpu


def estimate(err: str, seconds: float) -> str:
    """A stopped command's whole time from its last progress line ("k/n")."""
    found = re.findall(r"(\d+)/(\d+) ", err)
    if not found:
        return ""
    done, total = (int(x) for x in found[-1])
    return f"about {format_seconds(seconds * total / done)} (at {done}/{total} after {seconds:.0f} s)" if done else ""


def check(cmd, folder: pathlib.Path, probe: float, full: bool = False) -> tuple:
    """Returns (status, seconds, detail): status is ok, FAIL, quick or long.

    A long table (marked with its time) is not run unless `full`: its
    committed quick-variant table, checked as a table of its own, stands in
    for it; without one it fails."""
    if cmd.kind == "table" and cmd.took and not (probe or full):
        if cmd.quick_table is None:
            return "FAIL", 0.0, (f"a long table without the table of its quick variant under it "
                                 f"(`{quick_text(cmd)}`): scripts/update-docs.py --only '{cmd.text}' writes it")
        return "long", 0.0, f"compared by its quick variant's table, line {cmd.quick_table.line}"
    text = cmd.text.replace("/tmp/", str(folder / "tmp") + "/")
    if not (LINKS["build"] / "heldout-split.txt").exists():  # make heldout's, from a Debian package
        if full and cmd.took and "build/heldout-split.txt" in text:
            return "FAIL", 0.0, "reads the whole held-out split, build/heldout-split.txt: make heldout first"
        text = text.replace("build/heldout-split.txt", "model/heldout-sample.txt")
    for name, make in STAND_INS.items():
        if name in text and not (folder / name.rstrip("/")).exists():
            rc, out, err, _, _ = shell(make, folder, 300)
            if rc != 0:
                return "FAIL", 0.0, f"making the stand-in {name}: {err.strip() or out.strip()}"
    quick = bool(cmd.took) and not probe and not full
    if quick:
        text = with_flags(text, cmd.quick)
    elif (cmd.kind == "block" and not probe and not full and any(name in cmd.text for name in STAND_INS)
          and quick_variant(cmd.text)):
        # The reader's own file, made up here: the command must work, and its
        # quick variant shows that as well (the stand-in's time is nobody's).
        quick = True
        text = with_flags(text, quick_variant(cmd.text))
    if full and cmd.took:  # past its marked time HANG_FACTOR times over, it hangs
        limit = probe or max(parse_seconds(cmd.took) * HANG_FACTOR, UNMARKED_LIMIT_S * HANG_FACTOR)
    else:
        limit = probe or (1800 if quick else UNMARKED_LIMIT_S * HANG_FACTOR)
    rc, out, err, seconds, cpu = shell(text, folder, limit, terminal=bool(probe))
    if rc is None:
        if probe:
            return "probe", seconds, f"still running after {probe:.0f} s; {estimate(err, seconds) or 'no progress shown'}"
        return "FAIL", seconds, (f"still running after {limit} s: mark it with its time and a quick variant"
                                 if not quick else f"the quick variant ran past {limit} s")
    if not cmd.took and not probe and min(seconds, cpu) > UNMARKED_LIMIT_S:
        return "FAIL", seconds, (f"took {seconds:.0f} s ({cpu:.0f} s of CPU), over {UNMARKED_LIMIT_S} s: "
                                 "mark it with its time and a quick variant")
    refusal = any("kvevict: error:" in line for line in cmd.expected)
    if (rc != 0) != refusal:
        last = (err.strip() or out.strip()).split("\n")[-1]
        return "FAIL", seconds, f"exit status {rc}: {last}"
    if probe:
        return "probe", seconds, ""
    why = ""
    if cmd.kind == "table":
        why = compare_table(cmd.expected, out.split("\n"), measured=cmd.text.split()[1] == "bench")
    elif cmd.kind == "session":
        why = compare_lines(cmd.expected, (out + err).split("\n"))
    return ("FAIL" if why else ("quick" if quick else "ok")), seconds, why


def main() -> int:
    args = sys.argv[1:]
    only = [args[i + 1] for i, a in enumerate(args) if a == "--only" and i + 1 < len(args)]
    probe = float(args[args.index("--probe") + 1]) if "--probe" in args else 0.0
    keep = pathlib.Path(args[args.index("--keep") + 1]).resolve() if "--keep" in args else None
    listing = "--list" in args
    full = "--full" in args
    if "--build" in args:
        LINKS["build"] = pathlib.Path(args[args.index("--build") + 1]).resolve()
    if not (LINKS["build"] / "kvevict").is_file():
        sys.exit(f"kvevict docs: error: {LINKS['build']}/kvevict: not built (cmake --build --preset release)")
    jobs = int(args[args.index("--jobs") + 1]) if "--jobs" in args else (1 if probe or listing else os.cpu_count() or 1)
    if jobs < 1:
        sys.exit("kvevict docs: error: --jobs must be at least 1")
    global THREADS_EACH
    THREADS_EACH = max(1, (os.cpu_count() or 1) // jobs)
    work = keep or pathlib.Path(tempfile.mkdtemp(prefix="kvevict-docs-"))
    counts = {"ok": 0, "quick": 0, "long": 0, "placeholder": 0, "FAIL": 0, "probe": 0}
    failures = []

    def page(doc) -> list:
        """One page's commands in order: [(status or None, line, why, where)]."""
        folder = work / doc.relative_to(ROOT).with_suffix("").as_posix().replace("/", "-")
        done = []
        for cmd in commands(doc):
            if only and not any(o in cmd.text for o in only):
                continue
            if PLACEHOLDER.search(cmd.text):
                done.append(("placeholder", f"placeholder  {cmd.where()}  {cmd.text}", "", cmd.where()))
                if jobs == 1:
                    print(done[-1][1], flush=True)
                continue
            if listing:
                what = f"long ({cmd.took}; quick: {cmd.quick or 'none'})" if cmd.took else cmd.kind
                if cmd.kind == "table" and cmd.took:
                    what += (f"; its quick table: line {cmd.quick_table.line}" if cmd.quick_table
                             else "; NO quick table")
                elif cmd.variant_of:
                    what = f"quick table of {cmd.variant_of}"
                done.append((None, f"{what:12} {cmd.where()}  {cmd.text}", "", cmd.where()))
                continue
            prepare(folder)
            status, seconds, why = check(cmd, folder, probe, full)
            took = f" (marked {cmd.took})" if cmd.took and not probe else ""
            if status == "long":  # not run: where its stand-in is, on the same line
                took, why = f"{took}: {why}", ""
            done.append((status, f"{status:5} {format_seconds(seconds):>10}  {cmd.where()}  {cmd.text}{took}",
                         why, cmd.where()))
            if jobs == 1:  # one page at a time: each line as it comes
                print(done[-1][1], flush=True)
                if why:
                    print(f"      {why}", flush=True)
        return done

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(page, doc) for doc in documents()]:
                for status, line, why, where in future.result():
                    if status is not None:
                        counts[status] += 1
                    if jobs > 1 or status is None:
                        print(line, flush=True)
                        if why:
                            print(f"      {why}", flush=True)
                    if status == "FAIL":
                        failures.append(f"{where}: {why}")
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if listing:
        return 0
    print(f"docs commands: {counts['ok']} ran and matched their pages, {counts['long']} long tables compared by "
          f"their quick variants' tables (in full: make docs-verify), {counts['quick']} long commands ran their "
          f"quick variants, {counts['placeholder']} placeholders not run, {counts['FAIL']} failed"
          + (f", {counts['probe']} probed" if probe else ""))
    for f in failures:
        print(f"kvevict docs: error: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
