#!/usr/bin/env python3
"""scripts/docs-check.py's comparison and scripts/update-docs.py's quick-variant
tables, on tables and pages written here (no command of the tool runs):

  * every cell of a table with a command is compared, a changed number in any
    column fails naming its row and column, and only the columns of times are
    left out; a `bench` table compares its configuration columns only;
  * a long table (marked with its time) is checked through the committed table
    of its quick variant right under it, and fails without one;
  * update-docs.py writes that table under a long one (with the line saying
    what make test and make docs-verify compare), replaces it on a rerun and
    drops it with the mark when the command got quick.
Ends with "docs check logic: N passed, M failed".
"""
import importlib.util
import pathlib
import sys
import tempfile

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import doc_commands  # noqa: E402


def load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = load("docs_check", "docs-check.py")
update = load("update_docs", "update-docs.py")

passed = 0
failed = 0


def expect(name: str, ok: bool, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {name}{': ' + detail if detail else ''}")


PAGE = ["| rank | policy | budget | perplexity | 95 % interval | ns/step | evicted |",
        "|---|---|---:|---:|---:|---:|---:|",
        "| 1 | h2o | 64 | 4.0635 | +0.0224 … +0.0483 | 812 | 122752 |",
        "| 2 | tova | 64 | 4.0894 | +0.0294 … +0.0596 | 790 | 122752 |"]


def changed(lines: list, row: int, column: int, value: str) -> list:
    out = list(lines)
    cells = out[row].strip("|").split("|")
    cells[column] = f" {value} "
    out[row] = "|" + "|".join(cells) + "|"
    return out


# 1. Every cell but the times.
expect("same table", check.compare_table(PAGE, PAGE) == "")
expect("printed lines around the table", check.compare_table(PAGE, ["progress 3/3", *PAGE, ""]) == "")
for column, name in [(3, "perplexity"), (4, "95 % interval"), (6, "evicted"), (2, "budget"), (1, "policy")]:
    why = check.compare_table(PAGE, changed(PAGE, 3, column, "9.9999"))
    expect(f"a changed {name} fails", why.startswith(f"row 2, column '{name}'"), why)
why = check.compare_table(PAGE, changed(PAGE, 2, 5, "9999"))
expect("a changed time (ns/step) passes", why == "", why)
expect("a missing row fails", "rows" in check.compare_table(PAGE, PAGE[:3]))
expect("other columns fail", "columns differ" in check.compare_table(PAGE, [PAGE[0].replace("rank", "#"), *PAGE[1:]]))
expect("no table fails", check.compare_table(PAGE, ["nothing"]) == "printed no markdown table")

# 2. bench: what ran is compared, the measurements are not.
BENCH = ["| mode | policy | budget | threads | runs | prompt | tokens | tokens/s | rounds' range | of floor | matrices |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
         "| decode | h2o | 128 | 1 | 1 | 0 | 1024 | 9303 | 7161-9657 | 1.34 | 49.0% |"]
for column, name in [(2, "budget"), (3, "threads"), (4, "runs"), (5, "prompt"), (6, "tokens"), (1, "policy")]:
    why = check.compare_table(BENCH, changed(BENCH, 2, column, "7"), measured=True)
    expect(f"bench: a changed {name} fails", why.startswith(f"row 1, column '{name}'"), why)
for column, name in [(7, "tokens/s"), (8, "rounds' range"), (9, "of floor"), (10, "matrices")]:
    why = check.compare_table(BENCH, changed(BENCH, 2, column, "7"), measured=True)
    expect(f"bench: a changed {name} passes", why == "", why)

# 3. A long table and the committed table of its quick variant.
LONG = "build/kvevict tasks --model m.kvm --text t.txt --samples 12 --depths 4 --format markdown"
QUICK = doc_commands.with_flags(LONG, "--samples 1 --depths 1")
TABLE = ["| policy | accuracy |", "|---|---:|", "| h2o | 0.25 |"]
SMALL = ["| policy | accuracy |", "|---|---:|", "| h2o | 1.00 |"]

# Each kind of long command has a quick variant that really is smaller.
for long, quick in [
        ("build/kvevict stream --model m.kvm --text build/heldout-split.txt --tokens 32768",
         "--text model/heldout-sample.txt --tokens 3000 --budget 128"),
        ("build/kvevict stream --model m.kvm --text t.txt --tokens 3000 --budget 128", "--tokens 1500 --budget 128"),
        ("build/kvevict choose --model m.kvm --budget 128 --windows 8 --samples 4", "--windows 2 --samples 1"),
        ("build/kvevict llama perplexity --model m.gguf --text t.txt --max-windows 4", "--max-windows 1"),
        ("build/kvevict llama perplexity --model m.gguf --text t.txt --policy h2o,tova --max-windows 1", "--policy h2o"),
        ("build/kvevict llama perplexity --model m.gguf --text t.txt --policy h2o,tova --max-windows 1 --threads 2",
         "--policy h2o --threads 1"),
        ("build/kvevict llama stream --model m.gguf --text t.txt --tokens 8192", "--tokens 1500"),
        ("build/kvevict compare --model m.kvm --text t.txt --max-windows 8", "--max-windows 1")]:
    got = doc_commands.quick_variant(long)
    expect(f"quick variant of {long.split()[1]} {long.split()[-1]}", got == quick, got)
    expect(f"the quick variant of {long.split()[1]} differs", doc_commands.with_flags(long, got) != long, got)


def page(text: str) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "page.md"
        path.write_text(text)
        return doc_commands.commands(path)


marked_line = f"`{LONG}` (takes 4 min 10 s on 2 cores; `--samples 1 --depths 1` for a quick look):"
with_quick = "\n".join(["# Page", "", marked_line, "", *TABLE, *doc_commands.quick_block(QUICK, SMALL), "",
                        "Prose."])
found = page(with_quick)
expect("two table commands", [c.kind for c in found] == ["table", "table"], repr(found))
long_cmd, quick_cmd = found
expect("the long one is marked", long_cmd.took == "4 min 10 s" and long_cmd.quick == "--samples 1 --depths 1")
expect("its quick table is linked", long_cmd.quick_table is quick_cmd and quick_cmd.variant_of == long_cmd.where())
expect("the quick table runs the quick variant", quick_cmd.text == QUICK and not quick_cmd.took, quick_cmd.text)
status, _, why = check.check(long_cmd, pathlib.Path("/nonexistent"), 0.0)
expect("make test: the long table stands on its quick table", status == "long" and f"line {quick_cmd.line}" in why,
       f"{status}: {why}")

alone = page("\n".join([marked_line, "", *TABLE, "", "Prose."]))[0]
status, _, why = check.check(alone, pathlib.Path("/nonexistent"), 0.0)
expect("make test: a long table without its quick table fails",
       status == "FAIL" and "without the table of its quick variant" in why and QUICK in why, f"{status}: {why}")

other = doc_commands.with_flags(LONG, "--samples 2 --depths 1")
wrong = page("\n".join([marked_line, "", *TABLE, *doc_commands.quick_block(other, SMALL)]))[0]
expect("a quick table of another command is not linked", wrong.quick_table is None)

# A code block's command on a stand-in for the reader's file runs its quick
# variant in make test, as written with --full (the shell is a stand-in too).
ran = []
real_shell = check.shell
check.shell = lambda text, folder, limit, terminal=False: (ran.append(text), (0, "", "", 0.1, 0.1))[1]
STAND_IN_CMD = "build/kvevict tasks --model SmolLM2-135M-Instruct-Q8_0.gguf --text t.txt --lengths 1024"
with tempfile.TemporaryDirectory() as tmp:
    (pathlib.Path(tmp) / "SmolLM2-135M-Instruct-Q8_0.gguf").write_text("made")
    block = page("\n".join(["```sh", STAND_IN_CMD, "```"]))[0]
    status, _, why = check.check(block, pathlib.Path(tmp), 0.0)
    expect("a stand-in's block runs its quick variant", status == "quick" and ran[-1].endswith(
        "--lengths 1024 --samples 1 --depths 1"), f"{status}: {why} {ran}")
    status, _, why = check.check(block, pathlib.Path(tmp), 0.0, full=True)
    expect("with --full, as written", status == "ok" and ran[-1] == STAND_IN_CMD, f"{status}: {why} {ran}")
    own = page("\n".join(["```sh", STAND_IN_CMD.replace("SmolLM2-135M-Instruct-Q8_0.gguf", "model/m.kvm"), "```"]))[0]
    status, _, why = check.check(own, pathlib.Path(tmp), 0.0)
    expect("a block on the project's own files runs as written", status == "ok" and "--samples" not in ran[-1],
           f"{status}: {why} {ran}")
check.shell = real_shell

# 4. update-docs.py writes, replaces and drops the quick table.
runs = []


def runner(seconds: float):
    def run(command: str) -> tuple:
        runs.append(command)
        return "\n".join(SMALL if command == QUICK else TABLE), seconds
    return run


source = "\n".join(["# Page", "", f"`{LONG}`:", "", "| policy | accuracy |", "|---|---:|", "| h2o | 0.10 |", "",
                    "Prose."])
written = update.regenerate(source, [], run=runner(200))
expect("update-docs: both commands ran", runs == [LONG, QUICK], repr(runs))
expect("update-docs: the long table and its quick table",
       written == with_quick.replace("takes 4 min 10 s", "takes 3 min 20 s"), written)
runs.clear()
again = update.regenerate(written, [], run=runner(200))
expect("update-docs: a rerun replaces the quick table", again == written and runs == [LONG, QUICK], again)
quick_again = update.regenerate(written, ["--samples 1 --depths 1"], run=runner(3))
expect("update-docs: --only the quick variant rewrites it alone", quick_again == written, quick_again)
runs.clear()
dropped = update.regenerate(written, [], run=runner(5))
expect("update-docs: a quick rerun drops the mark and the quick table",
       dropped == source.replace("0.10", "0.25") and runs == [LONG], dropped)

print(f"docs check logic: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
