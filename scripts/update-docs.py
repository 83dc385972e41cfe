#!/usr/bin/env python3
"""Regenerates every measured table in the docs and the README.

A table is regenerated when the line before it (after one blank line) names
the command that produced it in backticks and ends with a colon, e.g.

    `build/kvevict compare --format markdown`:

    | rank | policy | ...

The command is rerun from the repository root and the table replaced by its
output. A command that takes LONG_SECONDS (10 s) or more gets its measured
time and a quick variant written into that line, "(takes 4 min 10 s on 2
cores; `--samples 1 --depths 1` for a quick look)", and right under its table
a second one: the quick variant's own output, in a line that names it and says
that `make test` compares it cell by cell while `make docs-verify` compares
the long table in full (doc_commands.quick_line). scripts/docs-check.py (make
test) compares that small table in the long one's place. A quicker rerun
drops the mark and the quick variant's table.
Usage: scripts/update-docs.py [--check] [--only TEXT]...
  --check      exit 1 if any table is stale (rewrites nothing)
  --only TEXT  regenerate only the tables whose command contains TEXT
               (repeatable: any of them), e.g. --only perplexity; a long
               table's quick-variant table is regenerated with it
"""
import shlex
import subprocess
import sys
import time

from doc_commands import (LONG_MARK, LONG_SECONDS, QUICK_CLOSE, QUICK_OPEN, ROOT, TABLE_COMMAND, documents,
                          is_quick_line, long_mark, quick_block, quick_variant, with_flags)


def marked(line: str, seconds: float, command: str) -> str:
    """The table's line with its time mark set, replaced or dropped."""
    line = LONG_MARK.sub("", line).replace(" ()", "")
    if seconds < LONG_SECONDS:
        return line
    head, colon, tail = line.rpartition(":")
    return f"{head.rstrip()} ({long_mark(seconds, command)}){colon}{tail}"


def run_table(command: str) -> tuple:
    """(the table a command prints, its seconds), run from the repository root."""
    print(f"running: {command}", file=sys.stderr, flush=True)
    start = time.monotonic()
    table = subprocess.run(shlex.split(command), cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.rstrip("\n")
    return table, time.monotonic() - start


def table_end(lines: list, start: int) -> int:
    """The index after the table (the lines starting with |) from `start`."""
    j = start
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return j


def quick_block_end(lines: list, j: int) -> int:
    """After a table ending at `j`: the end of the quick-variant table that
    follows it (doc_commands.quick_block), or `j` when none does."""
    if not (j + 4 < len(lines) and lines[j] == "" and lines[j + 1] == QUICK_OPEN and lines[j + 2] == ""
            and is_quick_line(lines[j + 3]) and TABLE_COMMAND.search(lines[j + 3]) and lines[j + 4] == ""):
        return j
    k = table_end(lines, j + 5)
    if k + 1 < len(lines) and lines[k] == "" and lines[k + 1] == QUICK_CLOSE:
        return k + 2
    return j


def regenerate(text: str, only: list, run=run_table) -> str:
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = TABLE_COMMAND.search(lines[i])
        wanted = m and (not only or any(o in m.group(1) for o in only))
        if wanted and i + 2 < len(lines) and lines[i + 1] == "" and lines[i + 2].startswith("|"):
            out.append("")
            j = table_end(lines, i + 2)
            table, seconds = run(m.group(1))
            out[-2] = marked(out[-2], seconds, m.group(1))
            out.extend(table.split("\n"))
            if not is_quick_line(lines[i]):
                # A long table's quick-variant table is rewritten with it (or dropped).
                j = quick_block_end(lines, j)
                if seconds >= LONG_SECONDS:
                    quick = with_flags(m.group(1), quick_variant(m.group(1)))
                    table, _ = run(quick)
                    out.extend(quick_block(quick, table.split("\n")))
            i = j
            continue
        i += 1
    return "\n".join(out)


def main() -> int:
    args = sys.argv[1:]
    check = "--check" in args
    only = [args[i + 1] for i, a in enumerate(args) if a == "--only" and i + 1 < len(args)]
    if args.count("--only") != len(only):
        sys.exit("update-docs.py: error: --only needs a TEXT after it")
    stale = []
    for path in documents():
        old = path.read_text()
        new = regenerate(old, only)
        if new != old:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    for p in stale:
        print(f"{'stale' if check else 'updated'}: {p}")
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
