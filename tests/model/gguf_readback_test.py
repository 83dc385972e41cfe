#!/usr/bin/python3
"""Three independent GGUF readers agree on kvevict's files: `kvevict inspect
--json`, the npm package @huggingface/gguf (tests/model/gguf_read.mjs) and
tests/model/reference/gguf_io.py.

For `kvevict random-model` GGUF files in several weight types and
architectures, and for files written by the reference writer that hold every
metadata value type (nested arrays, u64/i64/f64, bool arrays, unicode
strings), a v2 file and a 64-byte alignment: every metadata key and value (and
its value type, where a reader reports it), every tensor's name, dims, type
and offset, the version, alignment and data offset must be the same.

Usage: gguf_readback_test.py KVEVICT   (ctest gguf_readback)"""
import json
import math
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import harness  # noqa: E402

harness.need_python_modules("numpy")
TOOL = sys.argv[1] if len(sys.argv) > 1 else ""
harness.need_tool(TOOL)
harness.need_node_packages("@huggingface/gguf")

import numpy as np  # noqa: E402

from reference import gguf_io as G  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
READ_MJS = os.path.join(HERE, "gguf_read.mjs")
SAMPLE = os.path.join(HERE, "..", "..", "model", "heldout-sample.txt")
R = harness.Runner()
work = tempfile.TemporaryDirectory(prefix="kvevict-ggufrb-")
NODE_PSEUDO_KEYS = {"version", "tensor_count", "kv_count"}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b, t, et=None):
    """Is b (another reader's value) the value a (ours) of GGUF type t?"""
    if t == G.ARRAY:
        if et == G.ARRAY:               # arrays of arrays: plain equality (only small integer ones are tested)
            return a == b
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y, et) for x, y in zip(a, b))
    if t == G.BOOL:
        return b is a or (isinstance(b, bool) and b == a)
    if t == G.STRING:
        return isinstance(b, str) and a == b
    if isinstance(b, bool):
        return False
    if t in (G.FLOAT32, G.FLOAT64):
        if not isinstance(b, (int, float)):
            return False
        if math.isnan(a):
            return math.isnan(b)
        return (f32(b) == a) if t == G.FLOAT32 else float(b) == a
    if isinstance(b, str):          # bigints printed as strings
        try:
            b = int(b)
        except ValueError:
            return False
    return isinstance(b, (int, float)) and float(b).is_integer() and int(b) == a


def read_all(path):
    ours = G.read_gguf(path)
    node = json.loads(harness.run(["node", READ_MJS, path]).stdout)
    kv = json.loads(harness.run([TOOL, "inspect", "--model", path, "--json"]).stdout)
    return ours, node, kv


def agree(path, label):
    def body():
        ours, node, kv = read_all(path)
        problems = []

        # header
        if kv.get("format") != "gguf":
            problems.append(f"inspect format {kv.get('format')!r}")
        if kv.get("version") != ours.version or int(node["metadata"]["version"]["value"]) != ours.version:
            problems.append(f"version: ours {ours.version}, inspect {kv.get('version')}, "
                            f"node {node['metadata']['version']['value']}")
        if kv.get("alignment") != ours.alignment:
            problems.append(f"alignment: ours {ours.alignment}, inspect {kv.get('alignment')}")
        if ours.tensors and int(node["tensorDataOffset"]) != ours.data_start:
            problems.append(f"data offset: ours {ours.data_start}, node {node['tensorDataOffset']}")

        # metadata: keys, values, types
        nmeta = {k: v for k, v in node["metadata"].items() if k not in NODE_PSEUDO_KEYS}
        kmeta = kv.get("metadata", {})
        for name, other in (("node", set(nmeta)), ("inspect", set(kmeta))):
            if other != set(ours.metadata):
                problems.append(f"{name} keys differ: missing {sorted(set(ours.metadata) - other)[:5]}, "
                                f"extra {sorted(other - set(ours.metadata))[:5]}")
        for key, value in ours.metadata.items():
            t, et = ours.value_types[key]
            if key in nmeta:
                nv = nmeta[key]
                if nv["type"] != t or (t == G.ARRAY and nv["subType"] != et):
                    problems.append(f"{key}: node type {nv['type']}/{nv['subType']}, ours {t}/{et}")
                elif not same(value, nv["value"], t, et):
                    problems.append(f"{key}: node value {str(nv['value'])[:80]} != ours {str(value)[:80]}")
            if key in kmeta and not same(value, kmeta[key], t, et):
                problems.append(f"{key}: inspect value {str(kmeta[key])[:80]} != ours {str(value)[:80]}")

        # tensors: name, ne, type, offset, in file order
        ktens = kv.get("tensors", [])
        if len(ktens) != len(ours.tensors) or len(node["tensors"]) != len(ours.tensors):
            problems.append(f"tensor counts: ours {len(ours.tensors)}, inspect {len(ktens)}, "
                            f"node {len(node['tensors'])}")
        for o, k, n in zip(ours.tensors, ktens, node["tensors"]):
            mine = (o.name, list(o.ne), o.type_id, o.offset)
            theirs_k = (k.get("name"), [int(x) for x in k.get("ne", [])], k.get("type_id"), k.get("offset"))
            theirs_n = (n["name"], [int(x) for x in n["ne"]], n["type_id"], int(n["offset"]))
            if theirs_k != mine:
                problems.append(f"inspect tensor {theirs_k} != ours {mine}")
            if k.get("type") != G.type_name(o.type_id):
                problems.append(f"{o.name}: inspect type name {k.get('type')!r} != {G.type_name(o.type_id)!r}")
            if theirs_n != mine:
                problems.append(f"node tensor {theirs_n} != ours {mine}")
        assert not problems, f"{len(problems)} disagreements: " + " | ".join(problems[:6])
        return ours
    return R.check(label, body)


# 1. kvevict random-model files
_seed = [0]
for arch, typ, extra in (("llama", "q4_k", []), ("qwen2", "q6_k", []), ("mistral", "q5_0", ["--untied"]),
                         ("llama", "q8_0", ["--rope-scaling", "llama3"]), ("qwen2", "q4_0", ["--tied"]),
                         ("llama", "f16", []), ("llama", "bf16", []), ("qwen2", "f32", [])):
    _seed[0] += 1
    path = os.path.join(work.name, f"{arch}-{typ}.gguf")

    def make(path=path, arch=arch, typ=typ, extra=extra):
        harness.run([TOOL, "random-model", "--arch", arch, "--format", "gguf", "--type", typ, "--out", path,
                     "--seed", str(_seed[0]), "--tokenizer-text", SAMPLE, "--force", *extra])
        return True
    if R.check(f"random-model {arch} {typ} {' '.join(extra)}".strip(), make):
        ours = agree(path, f"{arch} {typ}: inspect, @huggingface/gguf and the reference reader agree")
        if ours is not None:
            R.expect(f"{arch} {typ}: holds a tokenizer and {arch} keys",
                     "tokenizer.ggml.tokens" in ours.metadata and any(k.endswith(".block_count") for k in ours.metadata),
                     f"keys {sorted(ours.metadata)[:12]}")

# 2. reference-written files with every value type
rng = np.random.default_rng(5)
EVERY_TYPE = [
    ("general.architecture", G.STRING, "llama"),
    ("general.name", G.STRING, "héllo ▁ 世界 🙂 \"quoted\" \\ back\nslash"),
    ("t.u8", G.UINT8, 250), ("t.i8", G.INT8, -100), ("t.u16", G.UINT16, 65000), ("t.i16", G.INT16, -30000),
    ("t.u32", G.UINT32, 4000000000), ("t.i32", G.INT32, -2000000000), ("t.f32", G.FLOAT32, f32(0.1)),
    ("t.f32_small", G.FLOAT32, f32(1e-6)), ("t.bool_true", G.BOOL, True), ("t.bool_false", G.BOOL, False),
    ("t.u64", G.UINT64, 2 ** 62 + 5), ("t.i64", G.INT64, -(2 ** 62) - 3), ("t.f64", G.FLOAT64, math.pi),
    ("t.arr_u8", (G.ARRAY, G.UINT8), [0, 1, 255]), ("t.arr_i32", (G.ARRAY, G.INT32), [1, -2, 3]),
    ("t.arr_f32", (G.ARRAY, G.FLOAT32), [f32(0.25), f32(-1.5), f32(1 / 3)]),
    ("t.arr_str", (G.ARRAY, G.STRING), ["a", "", "<0x0A>", "Ġthe", "▁é"]),
    ("t.arr_bool", (G.ARRAY, G.BOOL), [True, False]), ("t.arr_u64", (G.ARRAY, G.UINT64), [2 ** 40, 7]),
    ("t.arr_empty", (G.ARRAY, G.INT32), []),
]
# Valid GGUF that a reader built on signed 64-bit integers loses: checked on its own.
BIG_U64 = [("general.architecture", G.STRING, "llama"), ("t.u64_max", G.UINT64, 2 ** 64 - 1),
           ("t.u64_over_i64", G.UINT64, 2 ** 63 + 5), ("t.arr_u64", (G.ARRAY, G.UINT64), [2 ** 63, 1])]
NESTED = [("t.arr_nested", (G.ARRAY, (G.ARRAY, G.UINT16)), [[1, 2], [], [3]])]


def tensors_every_type():
    out = []
    for i, tid in enumerate([G.F32, G.F16, G.BF16, G.Q8_0, G.Q4_0, G.Q5_0, G.Q4_K, G.Q6_K]):
        _, blck, size = G.GGML_TYPES[tid]
        ne = [256, 2] if blck == 256 else [64, 3] if i % 2 else [96]
        out.append((f"t{i}.weight", ne, tid, rng.integers(0, 256, G.tensor_nbytes(tid, ne), dtype=np.uint8).tobytes()))
    return out


cases = [("every value type and tensor type, v3", EVERY_TYPE, tensors_every_type(), 3),
         ("v2 file", EVERY_TYPE[:6], tensors_every_type()[:3], 2),
         ("alignment 64", EVERY_TYPE[:4] + [("general.alignment", G.UINT32, 64)], tensors_every_type(), 3),
         ("metadata only, no tensors", EVERY_TYPE, [], 3),
         ("u64 values above 2^63 - 1", BIG_U64, [], 3)]
for label, kvs, tens, version in cases:
    p = os.path.join(work.name, "".join(c if c.isalnum() else "_" for c in label) + ".gguf")
    G.write_gguf(p, kvs, tens, version=version)
    agree(p, f"reference-written: {label}")
p = os.path.join(work.name, "nested.gguf")
G.write_gguf(p, EVERY_TYPE[:2] + NESTED + [("t.after", G.UINT32, 7)], [])


def nested_inspect():
    kv = json.loads(harness.run([TOOL, "inspect", "--model", p, "--json"]).stdout)
    assert kv["metadata"].get("t.after") == 7, "the key after the nested array"
    assert kv["metadata"]["t.arr_nested"] == [[1, 2], [], [3]], f"t.arr_nested: {kv['metadata'].get('t.arr_nested')}"


R.check("reference-written: an array of arrays, through kvevict inspect", nested_inspect)

work.cleanup()
R.finish()
