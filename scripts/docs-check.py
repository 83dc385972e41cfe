#!/usr/bin/env python3
"""Runs every command README.md and docs/ show, as written, and compares what
they print with what the page shows.

Each page's commands run in order in a fresh folder of their own that holds
links to the repository's build/, model/, vectors/ and docs/ (so a page that
writes attention.npy and then reads it works, and nothing in the clone is
written). `/tmp/` in a command means that folder's tmp/. A table's command must
print the table the page shows, cell for cell (columns of times excluded); a
`$ command` block must print the lines under it. A command marked with its time
(see scripts/doc_commands.py) runs its quick variant instead, which must succeed
and print a table whose first columns are the page's. A command that names a file the reader
brings (a model they serve, their own trace) runs on a stand-in made here; one
written with placeholders (`FILE`, `[--flag]`, `...`) is listed, not run.
Without `make heldout`'s build/heldout-split.txt, commands read its first
16 KiB, model/heldout-sample.txt, instead (the same bytes as far as they go).

Pages run side by side (--jobs, default one a core; a page's own commands in
order), each command with OMP_NUM_THREADS set to its share of the cores so
that no two pages' threads fight over one (what a command prints does not
depend on its threads); each page's lines print when it is done, in order.

Usage: scripts/docs-check.py [--build DIR] [--list] [--only TEXT] [--probe SECONDS] [--keep DIR] [--jobs N]
  --build DIR      the build the pages' build/ means (default: the clone's build/)
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
from doc_commands import ROOT, commands, documents, format_seconds, with_flags  # noqa: E402

# A command running longer than this without a time mark fails: mark it. Its
# time is the lesser of its wall-clock and its CPU seconds: alongside other
# suites (ctest -j) a one-thread command's wall clock stretches with the
# machine's load, its CPU time does not; a command using several threads has
# the wall clock. Past HANG_FACTOR times the limit it is stopped either way.
UNMARKED_LIMIT_S = 150
HANG_FACTOR = 4
LINKS = {"build": ROOT / "build", "model": ROOT / "model", "vectors": ROOT / "vectors", "docs": ROOT / "docs"}
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
# Words in printed lines that measure time: compared as "<time>".
TIME_WORD = re.compile(r"\b\d+(\.\d+)?\s*(ms|µs|us|ns|s|min)\b")


def cells(row: str) -> list:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def compare_table(expected: list, printed: list, measured: bool = False) -> str:
    """'' when the printed table equals the page's, times aside; else why not.
    `measured`: a benchmark's table, every column after the first two (what
    ran, at which budget) a timing or a share of one."""
    got = [line for line in printed if line.startswith("|")]
    if not got:
        return "printed no markdown table"
    head = cells(expected[0])
    if cells(got[0]) != head:
        return f"columns differ: page {head}, printed {cells(got[0])}"
    if len(got) != len(expected):
        return f"page shows {len(expected) - 2} rows, command printed {len(got) - 2}"
    timed = {k for k, name in enumerate(head) if TIME_HEADER.search(name) or (measured and k >= 2)}
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


def check(cmd, folder: pathlib.Path, probe: float) -> tuple:
    """Returns (status, seconds, detail): status is ok, FAIL or quick."""
    text = cmd.text.replace("/tmp/", str(folder / "tmp") + "/")
    if not (LINKS["build"] / "heldout-split.txt").exists():  # make heldout's, from a Debian package
        text = text.replace("build/heldout-split.txt", "model/heldout-sample.txt")
    for name, make in STAND_INS.items():
        if name in text and not (folder / name.rstrip("/")).exists():
            rc, out, err, _, _ = shell(make, folder, 300)
            if rc != 0:
                return "FAIL", 0.0, f"making the stand-in {name}: {err.strip() or out.strip()}"
    quick = bool(cmd.took) and not probe
    if quick:
        text = with_flags(text, cmd.quick)
    limit = probe or (1800 if quick else UNMARKED_LIMIT_S * HANG_FACTOR)
    rc, out, err, seconds, cpu = shell(text, folder, limit, terminal=bool(probe))
    if rc is None:
        if probe:
            return "probe", seconds, f"still running after {probe:.0f} s; {estimate(err, seconds) or 'no progress shown'}"
        return "FAIL", seconds, (f"still running after {limit} s: mark it with its time and a quick variant"
                                 if not quick else f"the quick variant ran past {limit} s")
    if not quick and not probe and min(seconds, cpu) > UNMARKED_LIMIT_S:
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
        if quick:
            got = [line for line in out.split("\n") if line.startswith("|")]
            # Fewer depths or windows drop columns (per depth, the interval): the rows' keys stay.
            if not got or cells(got[0])[:2] != cells(cmd.expected[0])[:2]:
                why = "the quick variant printed no table that starts with the page's columns"
        else:
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
    counts = {"ok": 0, "quick": 0, "placeholder": 0, "FAIL": 0, "probe": 0}
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
                done.append((None, f"{what:12} {cmd.where()}  {cmd.text}", "", cmd.where()))
                continue
            prepare(folder)
            status, seconds, why = check(cmd, folder, probe)
            took = f" (marked {cmd.took})" if cmd.took and not probe else ""
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
    print(f"docs commands: {counts['ok']} ran and matched their pages, {counts['quick']} long ones ran their "
          f"quick variants, {counts['placeholder']} placeholders not run, {counts['FAIL']} failed"
          + (f", {counts['probe']} probed" if probe else ""))
    for f in failures:
        print(f"kvevict docs: error: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
