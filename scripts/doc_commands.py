"""The commands README.md and docs/ show, found the same way by every script.

Two kinds:
  * a table's command (`build/kvevict ... --format markdown`, or `python3
    scripts/NAME.py ...`): a line that names it in backticks and ends with a
    colon, followed by one blank line and the markdown table it printed, e.g.

        Measured with `build/kvevict compare --format markdown`:

        | rank | policy | ...

  * a command in a ```sh block (continued with a trailing backslash), or in a
    block of `$ command` lines followed by what it printed.

A command too slow to rerun on every build carries its measured time and a
quick variant, in the table's line or as the command's trailing comment:

    (takes 6 min 40 s on 2 cores; `--samples 1 --depths 1` for a quick look)
    # takes 6 min 40 s on 2 cores; `--samples 1 --depths 1` for a quick look

The quick variant's flags replace the command's own (or are added). A long
table carries, right under it, a table of its quick variant's own output, with
that command in its line, folded in a <details> element (scripts/update-docs.py
writes both; quick_block):

    <details><summary>The quick variant that make test compares in its place</summary>

    Its quick variant, compared cell by cell by `make test` (`make docs-verify`
    compares the table above in full, outside CI), `build/kvevict tasks ...
    --samples 1 --depths 1`:

    | ...

    </details>

`make test` compares that small table cell by cell in the long one's place;
`make docs-verify` (scripts/docs-check.py --full) compares both in full.
"""
import dataclasses
import pathlib
import re
import shlex

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A table's command: the tool printing markdown, or a script in scripts/ that
# prints the table (docs/models.md's KV bytes).
TABLE_COMMAND = re.compile(r"`(build/kvevict [^`]*--format markdown[^`]*|python3 scripts/[\w.-]+\.py(?: [^`]*)?)`.*:\s*$")
LONG_MARK = re.compile(r"takes ((?:about )?[0-9][^;)`]*?) on 2 cores(?:; `([^`]*)` for a quick look)?")
# Command lines in code blocks: the tool, or Python with the built module.
BLOCK_COMMAND = re.compile(r"^(\$ )?((\./)?build/kvevict\b|PYTHONPATH=\S+ python3 |python3 -m kvevict)")


def documents() -> list:
    """README.md and every page under docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclasses.dataclass
class Command:
    path: pathlib.Path
    line: int                 # 1-based line of the command in the document
    text: str                 # the command as written (continuations joined)
    kind: str                 # "table", "block" or "session" ($ lines)
    expected: list            # the table's lines, or the session's printed lines
    took: str = ""            # the measured time a long command is marked with
    quick: str = ""           # its quick variant's flags
    prose: str = ""           # the line that names a table's command
    quick_table: "Command | None" = None  # a long table's committed quick-variant table
    variant_of: str = ""      # a quick-variant table: where its long table is

    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def _mark(cmd: Command, text: str) -> None:
    m = LONG_MARK.search(text)
    if m:
        cmd.took, cmd.quick = m.group(1), m.group(2) or ""


def _strip_comment(line: str) -> tuple:
    """Splits `command  # comment` outside quotes; returns (command, comment)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def commands(path: pathlib.Path) -> list:
    lines = path.read_text().split("\n")
    found = []
    i = 0
    fence = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            i += 1
            continue
        if fence is None:
            m = TABLE_COMMAND.search(line)
            if m and i + 2 < len(lines) and lines[i + 1] == "" and lines[i + 2].startswith("|"):
                j = i + 2
                while j < len(lines) and lines[j].startswith("|"):
                    j += 1
                cmd = Command(path, i + 1, m.group(1), "table", lines[i + 2:j], prose=line)
                _mark(cmd, line)
                found.append(cmd)
                i = j
                continue
            i += 1
            continue
        if fence not in ("", "sh", "bash", "console") or not BLOCK_COMMAND.match(line):
            i += 1
            continue
        start = i
        text, comment = _strip_comment(line)
        comments = [comment]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            more, comment = _strip_comment(lines[i])
            text = text[:-1].rstrip() + " " + more.strip()
            comments.append(comment)
        i += 1
        session = text.startswith("$ ")
        expected = []
        if session:
            text = text[2:]
            while i < len(lines) and not lines[i].startswith("$ ") and not lines[i].startswith("```"):
                expected.append(lines[i])
                i += 1
        if text.startswith("./"):
            text = text[2:]
        cmd = Command(path, start + 1, text, "session" if session else "block", expected)
        _mark(cmd, " ".join(comments))
        found.append(cmd)
    _link_quick_tables(found)
    return found


def quick_text(cmd: Command) -> str:
    """A long command's quick variant, as its committed table's line names it."""
    return with_flags(cmd.text, cmd.quick) if cmd.took else ""


def is_quick_line(line: str) -> bool:
    """The line of a long table's quick-variant table (quick_line writes it)."""
    return QUICK_PHRASE in line


def quick_line(command: str) -> str:
    """The line above a long table's quick-variant table."""
    return (f"{QUICK_PHRASE} (`make docs-verify` compares the table above in full, outside CI), "
            f"`{command}`:")


def quick_block(command: str, table: list) -> list:
    """The lines right under a long table (from its blank line on): its quick
    variant's line and table, folded away in a <details> element."""
    return ["", QUICK_OPEN, "", quick_line(command), "", *table, "", QUICK_CLOSE]


def _link_quick_tables(found: list) -> None:
    """Each long table and the quick-variant table right after it: the next
    command, a table in a quick line, running exactly its quick variant."""
    for long, nxt in zip(found, found[1:]):
        if (long.kind == "table" and long.took and nxt.kind == "table" and is_quick_line(nxt.prose)
                and nxt.text == quick_text(long)):
            long.quick_table = nxt
            nxt.variant_of = long.where()


def with_flags(command: str, flags: str) -> str:
    """The command with each `--flag value` of `flags` replacing its own."""
    command, redirect, target = command.partition(" > ")
    words = shlex.split(command)
    extra = shlex.split(flags)
    k = 0
    while k < len(extra):
        flag = extra[k]
        value = extra[k + 1] if k + 1 < len(extra) and not extra[k + 1].startswith("--") else None
        k += 2 if value is not None else 1
        if flag in words:
            at = words.index(flag)
            if value is not None:
                words[at + 1] = value
        else:
            words += [flag] + ([value] if value is not None else [])
    return shlex.join(words) + redirect + target


# A table's command this slow or slower is marked with its time and a quick
# variant (and gets its quick variant's table); a quicker one is compared in
# full by every make test. scripts/docs-check.py fails an unmarked command
# that runs longer.
LONG_SECONDS = 10
QUICK_PHRASE = "Its quick variant, compared cell by cell by `make test`"
QUICK_OPEN = "<details><summary>The quick variant that make test compares in its place</summary>"
QUICK_CLOSE = "</details>"


def quick_variant(command: str) -> str:
    """The flags that make a long command quick, by what the command runs."""
    words = shlex.split(command.partition(" > ")[0])
    if len(words) < 2:
        return ""
    flags = []
    if "build/heldout-split.txt" in words:
        flags.append("--text model/heldout-sample.txt")
    if words[1] == "stream":
        # Half of a stream already at 3,000 tokens or fewer: still past
        # kvevict-tiny's context of 1,024.
        tokens = int(words[words.index("--tokens") + 1]) if "--tokens" in words[:-1] else 0
        quick_tokens = 1500 if 0 < tokens <= 3000 else 3000
        flags.append(f"--tokens {quick_tokens} --budget 128" + (" --recompute-tokens 300" if "--recompute" in words else ""))
    elif words[1] == "choose":
        flags.append("--windows 2 --samples 1")
    elif words[1] == "llama" and "perplexity" in words:
        # One window; a run of one window already: its first policy alone.
        one = "--max-windows" in words[:-1] and words[words.index("--max-windows") + 1] == "1"
        flags.append(f"--policy {words[words.index('--policy') + 1].split(',')[0]}" if one and "--policy" in words[:-1]
                     else "--max-windows 1")
        # And one thread: llama.cpp's threads wait for each other at every
        # operation, so beside make test's other jobs two of them took minutes
        # (the table's cells but its times are the same at any thread count).
        if "--threads" in words[:-1] and words[words.index("--threads") + 1] != "1":
            flags.append("--threads 1")
    elif words[1] == "llama" and "stream" in words:
        flags.append("--tokens 1500")
    elif words[1] == "tasks":
        flags.append("--samples 1 --depths 1")
    elif words[1] in ("perplexity", "compare", "sweep") and "--model" in words:
        flags.append("--max-windows 1")
    elif words[1] in ("compare", "sweep", "report", "run"):
        flags.append("--steps 300")
    elif words[1] == "serve-bench":
        flags.append("--sequences 1 --tokens 256 --shared-prefix 64")
    elif words[1] == "bench":
        flags.append("--rounds 1 --tokens 128" if "--model" in words else "--budgets 512")
    return " ".join(flags)


def long_mark(seconds: float, command: str) -> str:
    """The words a long command is marked with (LONG_MARK reads them back)."""
    quick = quick_variant(command)
    return f"takes {format_seconds(seconds)} on 2 cores" + (f"; `{quick}` for a quick look" if quick else "")


def parse_seconds(took: str) -> float:
    """A time mark's seconds: `about 4 min 10 s`, `1 h 2 min`, `38 s`."""
    units = {"h": 3600, "min": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", took)))


def format_seconds(seconds: float) -> str:
    """`4 min 10 s`, `1 h 2 min`, `38 s`: the time marks' wording."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    if s >= 60:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s} s"
