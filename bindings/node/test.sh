#!/usr/bin/env bash
# Tests the Node.js binding: installs the dev dependencies when they are missing
# (npm ci), builds the addon, type-checks index.d.ts, and runs the node:test
# suites, ending with node's test summary. Exits non-zero on any failure.
#
#   bindings/node/test.sh [BUILD_DIR]     (default: build)
#
# The addon: $KVEVICT_NODE_ADDON when set; else BUILD_DIR's kvevict_node target
# (BUILD_DIR/bindings/node/kvevict.node, configured again first if BUILD_DIR was
# configured before `npm ci`); else, when BUILD_DIR does not include
# bindings/node, a standalone build in BUILD_DIR/node-standalone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
[[ $build == /* ]] || build=$PWD/$build

say() { echo "kvevict-node: $*"; }
die() { echo "kvevict-node: error: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 ||
  die "node is not installed (Debian 12: apt-get install nodejs npm libnode-dev)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian 12: apt-get install npm)"
cd "$here"

# 1. Dev dependencies (node-addon-api, typescript), exactly as package-lock.json
#    pins them (npm ci); nothing is fetched when they are already installed.
bash "$here/install-deps.sh" || die "npm ci failed in $here: the dev dependencies are not installed"

# 2. The addon.
if [[ -n ${KVEVICT_NODE_ADDON:-} ]]; then
  addon=$KVEVICT_NODE_ADDON
  [[ -f $addon ]] || die "KVEVICT_NODE_ADDON=$addon: no such file"
else
  target_dir=$build/bindings/node/CMakeFiles/kvevict_node.dir
  if [[ -f $build/CMakeCache.txt && ! -d $target_dir ]]; then
    # Configured before node-addon-api was installed: the guard skipped the addon.
    say "configuring $build again to pick up the addon"
    cmake "$build" >/dev/null
  fi
  if [[ -d $target_dir ]]; then
    cmake --build "$build" --target kvevict_node
    addon=$build/bindings/node/kvevict.node
  else
    standalone=$build/node-standalone
    say "$build does not build the addon (no add_subdirectory(bindings/node), or skipped there);" \
      "building it standalone in $standalone"
    generator=()
    if [[ ! -f $standalone/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
    cmake -S "$here" -B "$standalone" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
    [[ -d $standalone/CMakeFiles/kvevict_node.dir ]] ||
      die "the addon was skipped (see the kvevict: message above)"
    cmake --build "$standalone" --target kvevict_node
    addon=$standalone/kvevict.node
  fi
fi
export KVEVICT_NODE_ADDON=$addon
say "addon: $addon"

# 3. The declarations.
node_modules/.bin/tsc --noEmit -p .
say "tsc --noEmit: index.d.ts and test/types-check.ts type-check"

# 4. The suites; the spec reporter where this node has it (18.15+).
reporter=()
if node --test-reporter=spec -e 0 >/dev/null 2>&1; then reporter=(--test-reporter=spec); fi
exec node --test "${reporter[@]}" test/*.test.js
