"""One request through the tool (--format json), the Python binding and the
Node binding: the three results agree field for field -- the same keys in the
same order, the same values -- except "seconds" (wall time). Both bindings and
the tool build their rows from the one row schema (include/kvevict/eval/row_schema.h),
and this is the check that they do: a binding that builds a field by hand, drops
one, reorders them or converts a value differently fails here.

Requests: compare h2o,tova at budgets 128,256 over 600 steps of decode-4096;
run tova at budget 64 on a generated two-head .npy (so "heads" and "perHead"
are compared too); the schema itself (`kvevict schema`, row_schema(),
rowSchema()); and the committed model's perplexity rows over one window
(perplexity, compare --model, a paged store, a prefill), which come from the
perplexity row's description (include/kvevict/model/evaluation/perplexity_rows.h).

Usage: agreement_test.py TOOL BUILD_DIR SOURCE_DIR. Exit 77 (skip, saying why)
when the Python module or the Node addon is not in BUILD_DIR.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

tool, build, src = sys.argv[1:4]
addon = os.path.join(build, "bindings", "node", "kvevict.node")
if not glob.glob(os.path.join(build, "python", "kvevict", "_kvevict*.so")):
    print(f"SKIP: {build}/python has no compiled kvevict module (the kvevict_python target was skipped)")
    sys.exit(77)
if not os.path.isfile(addon) or shutil.which("node") is None:
    print(f"SKIP: no Node addon at {addon} or no node (run bash bindings/node/install-deps.sh, then configure again)")
    sys.exit(77)

sys.path.insert(0, os.path.join(build, "python"))
import numpy as np  # noqa: E402  (after the skip checks)
import kvevict  # noqa: E402

failures = []


def same(a, b, where, node):
    """a (the tool's) and b agree, keys in order; the timings ("seconds",
    "tokensPerSecond") are not compared.
    Against Python the types must match too (int stays int); JavaScript has one
    number type, so against Node only the values must."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            failures.append(f"{where}: keys {list(a)} != {list(b) if isinstance(b, dict) else b!r}")
            return
        for k in a:
            if k not in ("seconds", "tokensPerSecond"):
                same(a[k], b[k], f"{where}.{k}", node)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            failures.append(f"{where}: {len(a)} items != {b!r}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]", node)
    elif node and isinstance(a, (int, float)) and not isinstance(a, bool):
        if not (isinstance(b, (int, float)) and not isinstance(b, bool) and a == b):
            failures.append(f"{where}: {a!r} != {b!r}")
    elif type(a) is not type(b) or a != b:
        failures.append(f"{where}: {a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})")


def tool_json(*args):
    return json.loads(subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout)


def node_json(expression):
    script = f"const kv = require({json.dumps(os.path.join(src, 'bindings', 'node'))});\n" \
             f"process.stdout.write(JSON.stringify({expression}));"
    env = dict(os.environ, KVEVICT_NODE_ADDON=addon)
    out = subprocess.run(["node", "-e", script], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def agree(name, from_tool, from_python, from_node):
    same(from_tool, from_python, f"{name} (python)", node=False)
    same(from_tool, from_node, f"{name} (node)", node=True)


# 1. compare
cmp_tool = tool_json("compare", "--policies", "h2o,tova", "--budgets", "128,256", "--steps", "600", "--format", "json")
agree("compare", cmp_tool,
      kvevict.compare(["h2o", "tova"], budgets=[128, 256], steps=600),
      node_json("kv.compare({policies: ['h2o', 'tova'], budgets: [128, 256], steps: 600})"))
if len(cmp_tool["rows"]) != 4:
    failures.append(f"compare: {len(cmp_tool['rows'])} rows, expected 4")

# 2. run on two heads: a causal trace, each row t a softmax over positions 0..t.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "two-heads.npy")
    rng = np.random.default_rng(7)
    n = 160
    logits = rng.standard_normal((2, n, n))
    mask = np.tril(np.ones((n, n), dtype=bool))
    weights = np.where(mask, np.exp(logits), 0.0)
    np.save(path, np.ascontiguousarray(weights / weights.sum(axis=2, keepdims=True), dtype=np.float32))
    run_doc = tool_json("run", "--policy", "tova", "--budget", "64", "--trace", path, "--format", "json")
    run_tool = run_doc["rows"][0]  # run() returns the row alone
    agree("run two heads", run_tool, kvevict.run("tova", 64, trace=path),
          node_json(f"kv.run({{policy: 'tova', budget: 64, trace: {json.dumps(path)}}})"))
    if run_tool.get("heads") != 2 or len(run_tool.get("perHead", [])) != 2:
        failures.append(f"run two heads: expected heads 2 and two perHead entries, got {run_tool!r}")

# 3. the schema, and the rows' keys are its names
schema = tool_json("schema")
agree("schema", schema, kvevict.row_schema(), node_json("kv.rowSchema()"))
entries = {(e["command"], e["variant"]): e for e in schema["rows"]}
names = [f["name"] for f in entries[("run", "")]["rows"]]
always = [f["name"] for f in entries[("run", "")]["rows"] if "presentWhen" not in f]
if list(cmp_tool) != ["command", "model", "rows", "trace"] or cmp_tool["command"] != "compare" \
        or cmp_tool["model"] is not None:
    failures.append(f"compare: not the envelope: {list(cmp_tool)}, {cmp_tool.get('command')!r}")
for row in cmp_tool["rows"]:
    if list(row) != always:
        failures.append(f"compare row keys {list(row)} != the schema's {always}")
if list(run_tool) != names:
    failures.append(f"two-head row keys {list(run_tool)} != the schema's {names}")

# 4. the real model's rows (one window of the held-out sample): perplexity,
# compare --model (ranked, with the proxies), a paged store, and a prefill --
# all from the perplexity row's one description (kvevict/model/evaluation/perplexity_rows.h).
model_path = os.path.join(src, "model", "kvevict-tiny.kvm")
text_path = os.path.join(src, "model", "heldout-sample.txt")
model = kvevict.Model(model_path)
with open(text_path, "rb") as f:
    text = f.read()
node_model = f"new kv.Model({json.dumps(model_path)}), require('fs').readFileSync({json.dumps(text_path)})"
ppl_names = [f["name"] for f in entries[("perplexity", "")]["rows"]]


def model_case(name, tool_args, from_python, node_call, expect_keys):
    doc = tool_json(*tool_args, "--model", model_path, "--text", text_path, "--max-windows", "1",
                    "--format", "json")
    if list(doc) != ["command", "model", "rows"] or doc["command"] != tool_args[0] or doc["model"] != model_path:
        failures.append(f"{name}: not the envelope of {tool_args[0]} on {model_path}: {list(doc)}")
    from_tool = doc["rows"]  # perplexity() and compare_model() return the rows
    agree(name, from_tool, from_python, node_json(node_call))
    for i, row in enumerate(from_tool):
        keys = list(row)
        if [k for k in ppl_names if k in keys] != keys:
            failures.append(f"{name}[{i}]: keys {keys} are not in the schema's order {ppl_names}")
        want = expect_keys(row)
        if keys != want:
            failures.append(f"{name}[{i}]: keys {keys} != {want}")
    return from_tool


base = ["policy", "budget", "params", "perplexity", "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh",
        "predictions", "predictedBytes", "tokenizer", "evicted"]
kv = ["kvPrecision", "kvResidual", "bytesPerPosition", "modelBytesPerPosition", "peakCacheBytes"]
plain = base + kv + ["seconds"]
proxies = ["retainedAttentionMass", "heavyHitterRecall", "evictionCalls"]
rows = model_case("perplexity", ["perplexity", "--policy", "h2o,tova", "--budget", "128"],
                  kvevict.perplexity(model, text, runs=[("h2o", 128), ("tova", 128)], max_windows=1),
                  f"kv.perplexity({node_model}, [['h2o', 128], ['tova', 128]], {{maxWindows: 1}})",
                  lambda row: plain)
if len(rows) != 3 or rows[0]["policy"] is not None or rows[1]["policy"] != "h2o":
    failures.append(f"perplexity: expected the full cache, h2o, tova; got {[r['policy'] for r in rows]}")
rows = model_case("compare --model", ["compare", "--policies", "snapkv,tova", "--budgets", "64,128"],
                  kvevict.compare_model(model, text, policies=["snapkv", "tova"], budgets=[64, 128], max_windows=1),
                  f"kv.compareModel({node_model}, {{policies: ['snapkv', 'tova'], budgets: [64, 128], maxWindows: 1}})",
                  lambda row: ["rank"] + base + proxies + kv + ["seconds"])
if rows[0]["rank"] is not None or rows[0]["retainedAttentionMass"] is not None or \
        any(not isinstance(r["rank"], int) or not isinstance(r["retainedAttentionMass"], float) for r in rows[1:]):
    failures.append(f"compare --model: rank/proxies should be null on the full cache only: {rows!r}")
model_case("perplexity paged", ["perplexity", "--policy", "tova", "--budget", "128", "--block-size", "16"],
           kvevict.perplexity(model, text, runs=[("tova", 128)], max_windows=1, paged={"block_size": 16}),
           f"kv.perplexity({node_model}, [['tova', 128]], {{maxWindows: 1, blockSize: 16}})",
           lambda row: base + ["blockSize", "peakBlocks", "peakPositions"] + kv + ["seconds"])
rows = model_case("perplexity int8", ["perplexity", "--policy", "tova", "--budget", "128", "--kv-precision", "int8"],
                  kvevict.perplexity(model, text, runs=[("tova", 128)], max_windows=1, kv_precision="int8"),
                  f"kv.perplexity({node_model}, [['tova', 128]], {{maxWindows: 1, kvPrecision: 'int8'}})",
                  lambda row: plain)
if [r["kvPrecision"] for r in rows] != ["fp32", "int8", "int8"]:
    failures.append(f"perplexity int8: expected the fp32 full cache, then int8 rows; got {rows!r}")
model_case("compare --model --prefill",
           ["compare", "--policies", "snapkv", "--budgets", "64,128", "--prefill", "512", "--window", "16"],
           kvevict.compare_model(model, text, policies=["snapkv"], budgets=[64, 128], max_windows=1, prefill=512,
                                 prefill_window=16),
           f"kv.compareModel({node_model}, {{policies: ['snapkv'], budgets: [64, 128], maxWindows: 1, prefill: 512, "
           "prefillWindow: 16})",
           lambda row: ["rank", "policy", "budget", "params", "prefill"] + plain[3:])

# 5. serve-bench rows (docs/serving.md), from the serve row's one description.
serve_tool = tool_json("serve-bench", "--model", model_path, "--text", text_path, "--sequences", "2",
                       "--policy", "none,h2o", "--budget", "64", "--modes", "token,block", "--shared-prefix", "64",
                       "--tokens", "128", "--format", "json")["rows"]
agree("serve-bench", serve_tool,
      kvevict.serve_bench(model, text, sequences=[2], policies="none,h2o", budget=64, modes=["token", "block"],
                          shared_prefix=64, tokens=128),
      node_json(f"kv.serveBench({node_model}, {{sequences: [2], policies: 'none,h2o', budget: 64, "
                "modes: ['token', 'block'], sharedPrefix: 64, tokens: 128})"))
serve_names = [f["name"] for f in entries[("serve-bench", "")]["rows"]]
for i, row in enumerate(serve_tool):
    if list(row) != [n for n in serve_names if n not in ("granularity", "chunk", "prompt")]:
        failures.append(f"serve-bench[{i}]: keys {list(row)} are not the schema's {serve_names}")
if [r["mode"] for r in serve_tool] != ["full", "token", "block"]:
    failures.append(f"serve-bench: expected the full cache, token and block modes, got {serve_tool!r}")

# 6. the documents the bindings return whole (stream(), choose()) are the
# tool's envelope; a model's path is the one it was opened with.
stream_args = ["--tokens", "300", "--budget", "64", "--policy", "tova", "--positions", "original"]
stream_tool = tool_json("stream", "--model", model_path, "--text", text_path, *stream_args, "--format", "json")
agree("stream", stream_tool,
      kvevict.stream(model, text, policies="tova", budgets=[64], positions="original", tokens=300),
      node_json(f"kv.stream({node_model}, {{policies: 'tova', budgets: [64], positions: 'original', tokens: 300}})"))
if list(stream_tool)[:3] != ["command", "model", "rows"] or stream_tool["model"] != model_path:
    failures.append(f"stream: not the envelope: {list(stream_tool)}, model {stream_tool.get('model')!r}")
sinks_tool = tool_json("stream", "--model", model_path, "--text", text_path, "--sinks", "--tokens", "64",
                       "--format", "json")
agree("sinks", sinks_tool["rows"], kvevict.sink_shares(model, text, tokens=64),
      node_json(f"kv.sinkShares({node_model}, {{tokens: 64}})"))
tasks_args = ["--lengths", "300", "--depths", "1", "--samples", "1", "--policies", "tova", "--budgets", "32"]
tasks_tool = tool_json("tasks", "--model", model_path, "--text", text_path, *tasks_args, "--format", "json")
agree("tasks", tasks_tool["rows"],
      kvevict.tasks(model, text, lengths=[300], depths=1, samples=1, policies=["tova"], budgets=[32]),
      node_json(f"kv.tasks({node_model}, {{lengths: [300], depths: 1, samples: 1, policies: ['tova'], "
                "budgets: [32]})"))

for f in failures:
    print("FAIL:", f)
print(f"row schema agreement: {'ok' if not failures else f'{len(failures)} difference(s)'}")
sys.exit(1 if failures else 0)
