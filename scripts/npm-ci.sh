#!/usr/bin/env bash
# Installs a folder's npm packages exactly as its package-lock.json pins them
# (npm ci), unless what is installed already matches the lock file.
# node_modules is never in the repository; the Node binding's, the model
# tests' and llama.cpp's (deps/llama-cpp) install-deps.sh call this.
#   npm-ci.sh FOLDER LABEL WHAT [NPM-CI-OPTION...]
# LABEL prefixes the messages ("kvevict-node"), WHAT names the packages; the
# options go to npm ci (deps/llama-cpp: --omit=optional). The lock's entries
# an --omit=optional|dev|peer leaves out are not looked for in node_modules.
set -euo pipefail
cd "$1"
label=$2
what=$3
shift 3
omit=""
for option in "$@"; do
  [[ $option == --omit=* ]] && omit+="${option#--omit=},"
done

command -v node >/dev/null 2>&1 ||
  { echo "$label: error: node is not installed (Debian 12: apt-get install nodejs npm libnode-dev)" >&2; exit 1; }

lock_satisfied() {
  KVEVICT_NPM_OMIT=$omit node -e '
    const fs = require("fs");
    const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"));
    const omit = process.env.KVEVICT_NPM_OMIT.split(",");
    for (const [where, pkg] of Object.entries(lock.packages)) {
      if (!where.startsWith("node_modules/")) continue;
      if (omit.some((kind) => kind && pkg[kind])) continue;
      const file = where + "/package.json";
      if (!fs.existsSync(file) || JSON.parse(fs.readFileSync(file, "utf8")).version !== pkg.version) process.exit(1);
    }'
}
lock_satisfied && exit 0
command -v npm >/dev/null 2>&1 ||
  { echo "$label: error: npm is not installed (Debian 12: apt-get install npm)" >&2; exit 1; }
echo "$label: installing $what: npm ci"
# --ignore-scripts: no package's own install script runs (the Node binding's
# builds the addon only in a packed tarball, scripts/install.js; here the
# project's CMake does).
npm ci --no-audit --no-fund --prefer-offline --ignore-scripts "$@"
