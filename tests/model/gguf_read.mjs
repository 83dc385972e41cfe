#!/usr/bin/env node
// The reference side of gguf_readback_test.py: a GGUF file's metadata (with
// value types) and tensor infos as @huggingface/gguf reads them, as JSON.
// Usage: node gguf_read.mjs FILE.gguf  ->  {"metadata": {key: {value, type, subType}},
//        "tensors": [{name, ne, type_id, offset}], "tensorDataOffset": N, "littleEndian": bool}
// bigints become decimal strings (exact); typed arrays become lists.
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "npm", "package.json"));
const { gguf } = await import(pathToFileURL(require.resolve("@huggingface/gguf")).href);

const plain = (v) => {
  if (typeof v === "bigint") return v.toString();
  if (Array.isArray(v)) return v.map(plain);
  if (ArrayBuffer.isView(v)) return Array.from(v, plain);
  return v;
};

const file = path.resolve(process.argv[2]);
const out = await gguf(file, { allowLocalFile: true, typedMetadata: true });
const metadata = {};
for (const [k, tv] of Object.entries(out.typedMetadata)) {
  metadata[k] = { value: plain(tv.value), type: tv.type, subType: tv.subType ?? null };
}
const tensors = out.tensorInfos.map((t) => ({ name: t.name, ne: t.shape.map((d) => d.toString()), type_id: t.dtype,
                                              offset: t.offset.toString() }));
console.log(JSON.stringify({ metadata, tensors, tensorDataOffset: out.tensorDataOffset.toString(),
                             littleEndian: out.littleEndian }));
