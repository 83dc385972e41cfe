#!/usr/bin/env bash
# `npm pack` in bindings/node, then `npm install <tarball>` in a fresh npm
# project in a scratch folder, as a user installs the package: the tarball
# must carry the C++ sources (native/, copied by the prepack step, removed from
# the source tree again by postpack), and installing it must build the addon
# (scripts/install.js: CMake over those sources) with node-addon-api from the
# npm cache or registry. Then, with no KVEVICT_NODE_ADDON, `require('kvevict')`
# must load the addon the install built and reproduce pinned results (the
# canonical scissorhands@512 row and trace hash), and tsc (bindings/node's
# typescript, from its lock file) must type-check a small .ts file against
# the installed index.d.ts -- and reject one with a type error.
# Exit 77 (skip) when node or npm is missing: scripts/test-all.sh counts that
# as a failure of this required suite.
#
# What is reused: given BUILD_DIR (ctest passes the Release build/), the
# install script still configures the tarball's native/ with CMake (so a
# source file missing from the tarball fails the install), but compiles
# nothing: it builds BUILD_DIR's kvevict_node target (up to date after the
# build make test just ran) and installs that addon (KVEVICT_REUSE_BUILD,
# scripts/install.js) -- the same sources with the same flags, which the
# pinned results check. Without BUILD_DIR it compiles the library from native/
# (294 s in a make test run, sharing the cores), as a user's npm install does.
# Usage: npm_pack_test.sh SOURCE_DIR [BUILD_DIR]
set -euo pipefail
src=$(cd "$1" && pwd -P)
if [[ -n ${2:-} ]]; then
  export KVEVICT_REUSE_BUILD
  KVEVICT_REUSE_BUILD=$(cd "$2" && pwd -P)
else
  unset KVEVICT_REUSE_BUILD
fi
pkg=$src/bindings/node
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset KVEVICT_NODE_ADDON

for tool in node npm; do
  command -v $tool >/dev/null 2>&1 ||
    { echo "SKIP: $tool is not installed (Debian 12: apt-get install nodejs npm libnode-dev)"; exit 77; }
done
npm=(npm --no-audit --no-fund --no-update-notifier --prefer-offline)

# 1. The tarball.
[[ ! -e $pkg/native ]] || { echo "FAIL: $pkg/native exists before npm pack (a pack interrupted earlier?)"; exit 1; }
tarball=$(cd "$pkg" && "${npm[@]}" pack --silent --pack-destination "$tmp" | tail -1)
tarball=$tmp/$tarball
[[ -f $tarball ]] || { echo "FAIL: npm pack made no tarball ($tarball)"; exit 1; }
[[ ! -e $pkg/native ]] || { echo "FAIL: the postpack step left $pkg/native behind"; exit 1; }
tar -tzf "$tarball" >"$tmp/contents"
for want in package/package.json package/index.js package/index.d.ts package/CMakeLists.txt \
  package/src/addon.cpp package/scripts/install.js package/native/CMakeLists.txt \
  package/native/src/core/registry.cpp package/native/include/kvevict/core/registry.h; do
  grep -qx "$want" "$tmp/contents" || { echo "FAIL: $want is not in the tarball"; exit 1; }
done
if grep -E '(^|/)(node_modules|test|build)/' "$tmp/contents"; then
  echo "FAIL: the tarball holds the files above (dependencies, tests or build output)"; exit 1
fi
echo "npm pack: $(basename "$tarball"), $(wc -l <"$tmp/contents") files, $(du -k "$tarball" | cut -f1) KiB"

# 2. A fresh project installs it: the addon compiles here (with BUILD_DIR:
# native/ configures here, the addon is BUILD_DIR's).
mkdir "$tmp/app"
cd "$tmp/app"
echo '{ "name": "kvevict-consumer", "version": "1.0.0", "private": true }' >package.json
start=$SECONDS
"${npm[@]}" install --foreground-scripts "$tarball"
echo "npm install: $((SECONDS - start)) s"
[[ -f node_modules/kvevict/build/Release/kvevict.node ]] ||
  { echo "FAIL: npm install built no node_modules/kvevict/build/Release/kvevict.node"; exit 1; }

# 3. require('kvevict') from the project.
node -e "
const assert = require('node:assert/strict');
const path = require('node:path');
const kv = require('kvevict');
assert.equal(kv.addonPath, path.resolve('node_modules/kvevict/build/Release/kvevict.node'));
const names = kv.policies().map((p) => p.name);
for (const n of ['scissorhands', 'h2o', 'streaming-llm', 'sliding-window', 'tova', 'snapkv', 'pyramidkv'])
  assert.ok(names.includes(n), n + ' missing from policies(): ' + names);
assert.equal(kv.traceHash(), 3136039440);
const row = kv.run({ policy: 'scissorhands', budget: 512 });
const m = row.metrics;
assert.deepEqual([m.retainedAttentionMass, m.heavyHitterRecall, m.evictionCalls], [0.711377, 0.906047, 3584]);
// A decode loop: it starts holding 0; past the budget one held position goes, never the newest.
const p = new kv.Scissorhands({ budget: 4, recentWindow: 1 });
let held = [0];
let evicted = 0;
for (let pos = 1; pos < 20; pos++) {
  p.onDecodeStep(pos, new Float32Array(held.length).fill(1 / held.length));
  held.push(pos);
  if (p.keptCount() > 4) {
    const victims = p.evict(4);
    assert.equal(victims.length, 1);
    assert.ok(held.includes(victims[0]) && victims[0] !== pos, 'bad victim ' + victims + ' at ' + pos);
    held = held.filter((h) => h !== victims[0]);
    evicted++;
  }
  assert.equal(p.keptCount(), held.length);
}
assert.equal(evicted, 16);
assert.ok(held.includes(19) && held.length === 4);
assert.throws(() => kv.policy('no-such-policy'), kv.ParameterError);
console.log('require(\"kvevict\") from ' + kv.addonPath + ': checks passed');
"

# 4. The types, with bindings/node's pinned typescript.
bash "$pkg/install-deps.sh" >/dev/null || { echo "FAIL: npm ci in $pkg (typescript) failed"; exit 1; }
tsc=$pkg/node_modules/.bin/tsc
cat >tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "strict": true, "noEmit": true, "target": "ES2020", "module": "commonjs",
    "moduleResolution": "node", "lib": ["ES2020"], "types": [], "skipLibCheck": false
  },
  "files": ["check.ts"]
}
JSON
cat >check.ts <<'TS'
import * as kv from 'kvevict';
const policy: kv.Scissorhands = new kv.Scissorhands({ budget: 512, recentWindow: 32 });
policy.onDecodeStep(1, new Float32Array([1]));
const victims: number[] = policy.evict(512);
const hash: number = kv.traceHash('decode-4096', 10);
const row = kv.run({ policy: 'h2o', budget: 256 });
const mass: number = row.metrics.retainedAttentionMass;
const names: string[] = kv.policies().map((p) => p.name);
export { victims, hash, mass, names };
TS
"$tsc" -p . || { echo "FAIL: tsc rejected check.ts against the installed index.d.ts"; exit 1; }
# The declarations are really in use: a wrong type must fail.
echo "export const wrong: string = kv.traceHash();" >>check.ts
if "$tsc" -p . >"$tmp/tsc.log" 2>&1; then
  echo "FAIL: tsc accepted a number assigned to a string: the installed types are not in use"; exit 1
fi
grep -q "TS2322" "$tmp/tsc.log" || { echo "FAIL: tsc failed for another reason:"; cat "$tmp/tsc.log"; exit 1; }
echo "tsc: check.ts type-checks against the installed index.d.ts (and a type error is caught)"
echo "npm_pack: pack, install, require and types passed"
