#!/usr/bin/env python3
"""CSV for a machine (issue 54): checks of kvevict's --format csv, and columns by name.

  csv_check.py agree TOOL [--expand KEY] [--vary COL,...] [--want COL,...] -- ARGS...
      Runs TOOL ARGS --format csv and TOOL ARGS --format json and checks the CSV:
      the header's names are key paths (KEY or KEY.MEMBER, no spaces);
      every line has the header's number of cells; no cell holds an ellipsis,
      a "-" for none, a number with a sign, a unit or a thousands separator;
      a Low/High (or _low/_high) pair is two numeric cells, both or neither;
      and its cells are the JSON's values: a column per scalar field (an
      object's members as KEY.MEMBER, arrays left out but --expand's, a line
      per element, EXPAND.MEMBER), an empty cell where the JSON has null or
      leaves the field out. The JSON is the envelope every command prints,
      {"command", "model", "rows": [...], ...}: its rows are the CSV's lines,
      the members after them are per result and not in the CSV. --vary: columns that are timings,
      which differ run to run (only checked to be numbers). --want: columns
      that must be there.
  csv_check.py cols FILE COL,...
      The data lines' cells of those columns, comma-joined (FILE - : stdin).
  csv_check.py without FILE COL,...
      The header and data lines without those columns.
Prints what is wrong and exits 1; prints nothing and exits 0 when all holds.
"""
import csv
import io
import json
import math
import re
import subprocess
import sys


def read_csv(text):
    # RFC 4180: quoted cells may hold commas and quotes; strict refuses a stray quote.
    return list(csv.reader(io.StringIO(text), strict=True))


def flatten(obj, prefix, out):
    for key, value in obj.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            flatten(value, name, out)
        elif not isinstance(value, list):
            out[name] = value


def json_lines(doc, expand):
    """The CSV lines the envelope's rows make ({"command", "model", "rows", ...}:
    every command's JSON; the members after rows stay in the JSON)."""
    if not isinstance(doc, dict) or list(doc)[:3] != ["command", "model", "rows"]:
        raise ValueError(f"the JSON is not the envelope: {str(doc)[:200]}")
    rows = doc["rows"]
    lines = []
    for row in rows:
        base = {}
        flatten(row, "", base)
        inner = row.get(expand) if expand else None
        if not isinstance(inner, list) or not inner:
            lines.append(base)
            continue
        for element in inner:
            line = dict(base)
            if isinstance(element, dict):
                flatten(element, expand, line)
            lines.append(line)
    return lines


NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# What a table cell holds and a CSV cell must not: ranges, signs, units, separators, "-" for none.
HUMAN = [
    (re.compile(r"…"), "an ellipsis"),
    (re.compile(r"^\+[0-9.]"), "a number with a + sign"),
    (re.compile(r"^-$"), "'-' for none"),
    (re.compile(r"^[-+]?[0-9][0-9.]*\s*(KiB|MiB|GiB|%|x|s)$"), "a number with a unit"),
    (re.compile(r"^[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?$"), "a thousands separator"),
    (re.compile(r"^[0-9.]+\s*[-–]\s*[0-9.]+$"), "a range in one cell"),
]


def is_number(cell):
    return NUMBER.fullmatch(cell) is not None


def check_shape(table, errors):
    header, lines = table[0], table[1:]
    for name in header:  # JSON keys, KEY.MEMBER: no spaces, units or signs
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            errors.append(f"header '{name}' is not a key path")
    if len(set(header)) != len(header):
        errors.append(f"header names a column twice: {header}")
    for i, line in enumerate(lines, 1):
        if len(line) != len(header):
            errors.append(f"line {i} has {len(line)} cells, the header {len(header)}")
        for name, cell in zip(header, line):
            for pattern, what in HUMAN:
                if pattern.search(cell):
                    errors.append(f"line {i}, {name}: '{cell}' holds {what}")
    # An interval is two numeric columns, both there or neither, low <= high.
    for name in header:
        for low_suffix, high_suffix in (("Low", "High"), ("_low", "_high")):
            if not name.endswith(low_suffix):
                continue
            high = name[: -len(low_suffix)] + high_suffix
            if high not in header:
                errors.append(f"{name} has no {high} column")
                continue
            a, b = header.index(name), header.index(high)
            for i, line in enumerate(lines, 1):
                lo, hi = line[a], line[b]
                if (lo == "") != (hi == ""):
                    errors.append(f"line {i}: {name} '{lo}' and {high} '{hi}': one empty")
                elif lo and not (is_number(lo) and is_number(hi) and float(lo) <= float(hi)):
                    errors.append(f"line {i}: {name} '{lo}' and {high} '{hi}' are not an interval")


def same(value, cell):
    if value is None:
        return cell == ""
    if isinstance(value, bool):
        return cell == ("true" if value else "false")
    if isinstance(value, int):
        return re.fullmatch(r"-?[0-9]+", cell) is not None and int(cell) == value
    if isinstance(value, float):
        if not math.isfinite(value):
            return cell == ""
        return is_number(cell) and float(cell) == value
    return cell == value


def agree(argv):
    expand = None
    vary, want = set(), []
    while argv and argv[0] != "--":
        flag, value = argv[0], argv[1]
        argv = argv[2:]
        if flag == "--expand":
            expand = value
        elif flag == "--vary":
            vary = set(value.split(","))
        elif flag == "--want":
            want = value.split(",")
        else:
            sys.exit(f"csv_check: unknown flag {flag}")
    tool, args = TOOL, argv[1:]
    run = lambda fmt: subprocess.run([tool, *args, "--format", fmt], capture_output=True, text=True)
    got_csv, got_json = run("csv"), run("json")
    if got_csv.returncode or got_json.returncode:
        return [f"exit {got_csv.returncode} (csv), {got_json.returncode} (json): {got_csv.stderr.strip()[-300:]}"]
    errors = []
    table = read_csv(got_csv.stdout)
    if not table:
        return ["no CSV"]
    check_shape(table, errors)
    header, lines = table[0], table[1:]
    for name in want:
        if name not in header:
            errors.append(f"no column {name} (header: {','.join(header)})")
    try:
        expected = json_lines(json.loads(got_json.stdout), expand)
    except ValueError as e:
        return [str(e)]
    if len(expected) != len(lines):
        errors.append(f"{len(lines)} CSV lines, {len(expected)} JSON rows")
    fields = set().union(*expected) if expected else set()
    if set(header) != fields:
        errors.append(f"columns {sorted(set(header) - fields)} not in the JSON, {sorted(fields - set(header))} not in the CSV")
    for i, (row, line) in enumerate(zip(expected, lines), 1):
        for name, cell in zip(header, line):
            value = row.get(name)
            if name in vary:
                if value is not None and not is_number(cell):
                    errors.append(f"line {i}, {name}: '{cell}' is not a number")
            elif not same(value, cell):
                errors.append(f"line {i}, {name}: CSV '{cell}', JSON {json.dumps(value)}")
    return errors


def columns(path, names, keep):
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    table = read_csv(text)
    if not table:
        sys.exit("csv_check: no CSV")
    header = table[0]
    missing = [n for n in names if n not in header]
    if missing:
        sys.exit(f"csv_check: no column {','.join(missing)} (header: {','.join(header)})")
    if keep:
        index = [header.index(n) for n in names]
        out = table[1:]
    else:
        index = [i for i, n in enumerate(header) if n not in names]
        out = table
    for line in out:
        print(",".join(line[i] for i in index))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] in ("cols", "without"):
        columns(sys.argv[2], sys.argv[3].split(","), sys.argv[1] == "cols")
        sys.exit(0)
    if len(sys.argv) >= 3 and sys.argv[1] == "agree":
        TOOL = sys.argv[2]
        problems = agree(sys.argv[3:])
        for p in problems[:20]:
            print(p)
        sys.exit(1 if problems else 0)
    sys.exit(__doc__)
