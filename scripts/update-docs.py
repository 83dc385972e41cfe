#!/usr/bin/env python3
"""Regenerates every measured table in the docs and the README.

A table is regenerated when the line before it (after one blank line) names
the command that produced it in backticks and ends with a colon, e.g.

    `build/kvevict compare --format markdown`:

    | rank | policy | ...

The command is rerun from the repository root and the table replaced by its
output. A command that takes LONG_SECONDS or more gets its measured time and a
quick variant written into that line, "(takes 4 min 10 s on 2 cores;
`--samples 1 --depths 1` for a quick look)", which scripts/docs-check.py (in
make test) runs instead of the whole command; a quicker rerun drops the mark.
Usage: scripts/update-docs.py [--check] [--only TEXT]...
  --check      exit 1 if any table is stale (rewrites nothing)
  --only TEXT  regenerate only the tables whose command contains TEXT
               (repeatable: any of them), e.g. --only perplexity
"""
import shlex
import subprocess
import sys
import time

from doc_commands import LONG_MARK, LONG_SECONDS, ROOT, TABLE_COMMAND, documents, long_mark


def marked(line: str, seconds: float, command: str) -> str:
    """The table's line with its time mark set, replaced or dropped."""
    line = LONG_MARK.sub("", line).replace(" ()", "")
    if seconds < LONG_SECONDS:
        return line
    head, colon, tail = line.rpartition(":")
    return f"{head.rstrip()} ({long_mark(seconds, command)}){colon}{tail}"


def regenerate(text: str, only: list) -> str:
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = TABLE_COMMAND.search(lines[i])
        wanted = m and (not only or any(o in m.group(1) for o in only))
        if wanted and i + 2 < len(lines) and lines[i + 1] == "" and lines[i + 2].startswith("|"):
            out.append("")
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            print(f"running: {m.group(1)}", file=sys.stderr, flush=True)
            start = time.monotonic()
            table = subprocess.run(shlex.split(m.group(1)), cwd=ROOT, check=True,
                                   capture_output=True, text=True).stdout.rstrip("\n")
            out[-2] = marked(out[-2], time.monotonic() - start, m.group(1))
            out.extend(table.split("\n"))
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
