#!/usr/bin/env bash
# Installs the Node binding's npm dependencies (node-addon-api, typescript) into
# bindings/node/node_modules exactly as package-lock.json pins them (npm ci),
# unless what is installed already matches the lock file. node_modules is not
# in the repository: scripts/install-deps.sh runs this before the first
# configure (CMake looks for node-addon-api's napi.h then), and test.sh again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

command -v node >/dev/null 2>&1 ||
  { echo "kvevict-node: error: node is not installed (Debian 12: apt-get install nodejs npm libnode-dev)" >&2; exit 1; }

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
  { echo "kvevict-node: error: npm is not installed (Debian 12: apt-get install npm)" >&2; exit 1; }
echo "kvevict-node: installing the dev dependencies: npm ci"
# --ignore-scripts: the package's own install script builds the addon only in a
# packed tarball (scripts/install.js); here the project's CMake does.
npm ci --no-audit --no-fund --prefer-offline --ignore-scripts
