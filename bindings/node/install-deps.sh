#!/usr/bin/env bash
# Installs the Node binding's npm dependencies (node-addon-api, typescript) into
# bindings/node/node_modules exactly as package-lock.json pins them
# (scripts/npm-ci.sh). scripts/install-deps.sh runs this before the first
# configure (CMake looks for node-addon-api's napi.h then), and test.sh again.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../../scripts/npm-ci.sh" "$here" kvevict-node "the dev dependencies"
