"""Every command's JSON has one shape (issue 54): {"command", "model", "rows":
[...]}, then only the members `kvevict schema` lists for that command; and
every row, and every member after the rows, has the schema's fields -- the
same keys in the schema's order (a field with presentWhen may be left out,
no other), each of its declared type, null only where its description says
null. A field added to a command's JSON without a schema entry fails here,
and so does a command with --format json that this test does not run: the
commands are read from `kvevict --help`.

Usage: envelope_test.py TOOL SOURCE_DIR. kvevict llama's two commands run
when kvevict-llama was built beside TOOL (they need llama.cpp).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

tool, src = sys.argv[1:3]
failures = []
model = os.path.join(src, "model", "kvevict-tiny.kvm")
text = os.path.join(src, "model", "heldout-sample.txt")


def run(*args):
    done = subprocess.run([tool, *args], capture_output=True, text=True)
    if done.returncode != 0:
        failures.append(f"kvevict {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
        return None
    return done.stdout


schema = json.loads(run("schema"))
entries = {(e["command"], e["variant"]): e for e in schema["rows"]}

M = ["--model", model, "--text", text]
# (command, variant): the arguments that print its JSON -- small inputs.
cases = {
    ("list", ""): ["list", "--format", "json"],
    ("run", ""): ["run", "--policy", "h2o", "--budget", "64", "--steps", "100", "--format", "json"],
    ("compare", ""): ["compare", "--policies", "h2o,tova", "--budgets", "64", "--steps", "100", "--format", "json"],
    ("compare", "--model"): ["compare", *M, "--policies", "tova", "--budgets", "64", "--max-windows", "1",
                             "--format", "json"],
    ("perplexity", ""): ["perplexity", *M, "--policy", "h2o", "--budget", "64", "--max-windows", "2",
                         "--format", "json"],
    ("stream", ""): ["stream", *M, "--tokens", "300", "--budget", "64", "--policy", "tova", "--granularity",
                     "sequence", "--format", "json"],
    ("stream", "--sinks"): ["stream", *M, "--sinks", "--tokens", "64", "--format", "json"],
    ("serve-bench", ""): ["serve-bench", *M, "--sequences", "2", "--shared-prefix", "16", "--tokens", "48",
                          "--policy", "none,h2o", "--budget", "40", "--format", "json"],
    ("tasks", ""): ["tasks", *M, "--lengths", "300", "--depths", "1", "--samples", "1", "--policies", "tova",
                    "--budgets", "32", "--granularity", "sequence", "--format", "json"],
    ("choose", ""): ["choose", *M, "--budget", "64", "--windows", "2", "--samples", "1", "--policies", "h2o",
                     "--format", "json"],
    ("persistence", ""): ["persistence", "--lags", "1,4", "--format", "json"],
    ("persistence", "--model"): ["persistence", *M, "--lags", "1", "--format", "json"],
    ("sweep", ""): ["sweep", "--policy", "h2o", "--param", "recentWindow=8,16", "--budgets", "64", "--steps", "100",
                    "--format", "json"],
    ("sweep", "--model"): ["sweep", *M, "--policy", "h2o", "--param", "recentWindow=8", "--budgets", "64",
                           "--max-windows", "1", "--format", "json"],
    ("bench", ""): ["bench", "--policies", "h2o", "--budgets", "64", "--seconds", "0.01", "--no-compare",
                    "--bank-instances", "64", "--bank-budget", "33", "--format", "json"],
    ("bench", "--model"): ["bench", *M, "--tokens", "8", "--rounds", "1", "--policies", "tova", "--budgets", "4",
                           "--format", "json"],
    ("simd", ""): ["simd", "--format", "json"],
    ("schema", ""): ["schema"],
}

# kvevict llama, on a tiny GGUF written here, when kvevict-llama is built.
tmp = tempfile.mkdtemp()
if os.path.isfile(os.path.join(os.path.dirname(tool), "kvevict-llama")):
    gguf = os.path.join(tmp, "tiny.gguf")
    if run("random-model", "--out", gguf, "--tokenizer-text", text) is not None:
        G = ["--model", gguf, "--text", text, "--context", "128"]
        cases[("llama perplexity", "")] = ["llama", "perplexity", *G, "--max-windows", "1", "--policy", "tova",
                                           "--budget", "64", "--format", "json"]
        cases[("llama stream", "")] = ["llama", "stream", *G, "--tokens", "200", "--policy", "sliding-window",
                                       "--budget", "64", "--format", "json"]
else:
    print("note: no kvevict-llama beside the tool: kvevict llama's commands not run")
    for e in ("llama perplexity", "llama stream"):
        entries.pop((e, ""), None)

# Every command --help lists whose --format takes json has a case; so do the
# schema's entries, and only they.
helptext = run("--help")
commands = re.findall(r"^  ([a-z][a-z-]*)\s", helptext.split("SUBCOMMANDS:")[-1], re.M)
if len(commands) < 15:
    failures.append(f"--help lists only {commands}")
for c in commands:
    sub = subprocess.run([tool, c, "--help"], capture_output=True, text=True).stdout
    # The --format option's own lines: its line and the indented lines under it.
    fmt = re.search(r"^\s+--format\b[^\n]*(\n {20,}[^\n]*)*", sub, re.M)
    if fmt and "json" in fmt.group(0) and not any(k[0] == c for k in cases):
        failures.append(f"{c} has --format json, and no case here")
    if fmt and "json" in fmt.group(0) and not any(k[0] == c for k in entries):
        failures.append(f"{c} has --format json, and no entry in kvevict schema")
for key in entries:
    if key not in cases:
        failures.append(f"schema entry {key} has no case here")

TYPES = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
         "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list)}


def check_fields(obj, fields, where):
    """obj's keys are `fields`' names in order, the optional ones maybe left out."""
    if not isinstance(obj, dict):
        failures.append(f"{where}: {obj!r} is not an object")
        return
    names = [f["name"] for f in fields]
    keys = list(obj)
    unknown = [k for k in keys if k not in names]
    if unknown:
        failures.append(f"{where}: {unknown} not in the schema ({names})")
        return
    if keys != [n for n in names if n in keys]:
        failures.append(f"{where}: keys {keys} are not in the schema's order {names}")
    for f in fields:
        name = f["name"]
        if name not in obj:
            if "presentWhen" not in f:
                failures.append(f"{where}: no {name}, which the schema says is always there")
            continue
        value = obj[name]
        if value is None:
            if "null" not in f["description"]:
                failures.append(f"{where}.{name} is null; its description says nothing of null")
            continue
        if not TYPES[f["type"]](value):
            failures.append(f"{where}.{name} is {value!r}, not a {f['type']}")
        elif f["type"] == "object" and "fields" in f:
            check_fields(value, f["fields"], f"{where}.{name}")
        elif f["type"] == "array" and "fields" in f:
            for i, element in enumerate(value):
                check_fields(element, f["fields"], f"{where}.{name}[{i}]")


for key, args in cases.items():
    command, variant = key
    where = f"{command}{' ' + variant if variant else ''}"
    if key not in entries:
        failures.append(f"{where}: no entry in kvevict schema")
        continue
    entry = entries[key]
    out = run(*args)
    if out is None:
        continue
    doc = json.loads(out)
    want = ["command", "model", "rows"] + [f["name"] for f in entry["extra"]]
    if not isinstance(doc, dict) or list(doc) != want:
        failures.append(f"{where}: top-level keys {list(doc) if isinstance(doc, dict) else type(doc)} != {want}")
        continue
    if doc["command"] != command:
        failures.append(f"{where}: command is {doc['command']!r}")
    model_given = args[args.index("--model") + 1] if "--model" in args else None
    if doc["model"] != model_given or entry["model"] != ("path" if model_given else "null"):
        failures.append(f"{where}: model is {doc['model']!r} (schema: {entry['model']}), given {model_given!r}")
    if not doc["rows"]:
        failures.append(f"{where}: no rows")
    for i, row in enumerate(doc["rows"]):
        check_fields(row, entry["rows"], f"{where} rows[{i}]")
    check_fields({k: doc[k] for k in want[3:]}, entry["extra"], f"{where} (after rows)")

for f in failures:
    print("FAIL:", f)
print(f"JSON envelope: {len(cases)} commands, {'ok' if not failures else f'{len(failures)} problem(s)'}")
sys.exit(1 if failures else 0)
