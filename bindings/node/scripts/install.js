'use strict';
// `npm install` of the packed package (the install script): builds the addon,
// build/Release/kvevict.node, from the C++ sources the tarball carries in
// native/ (scripts/prepack.js) with CMake -- the same CMakeLists.txt that
// builds it in the repository, so the same flags (Highway's per-target
// dispatch, -ffp-contract=off, OpenMP). Needs cmake, ninja or make, g++ and the
// library's Debian build packages (scripts/install-deps.sh --run in the
// repository), and Node's headers (node_api.h, found beside the node
// executable: NodeSource ships them; Debian's nodejs needs libnode-dev); nothing
// is downloaded. node-addon-api comes from the dependencies.
//
// In a checkout (no native/: `npm ci` of the dev dependencies) there is
// nothing to do here: the project's CMake builds the addon.
//
// Environment: CMAKE_BUILD_PARALLEL_LEVEL (compile jobs; default: the CPU
// count), KVEVICT_KEEP_BUILD=1 keeps the CMake build folder (build-native/),
// KVEVICT_REUSE_BUILD=DIR: a build of the repository already configured with
// the Node addon (the release preset's build/; tests/install/npm_pack_test.sh
// in make test): native/ is still configured (every source its CMakeLists.txt
// names must be in the tarball), but the addon is DIR's kvevict_node target,
// built there (nothing, when it is up to date) instead of compiling the
// library a second time.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const here = path.join(__dirname, '..');
if (!fs.existsSync(path.join(here, 'native', 'CMakeLists.txt'))) {
  console.log('kvevict-node: no native/ folder (a repository checkout): the project\'s CMake builds the addon');
  process.exit(0);
}

function run(command, args) {
  console.log(`kvevict-node: ${command} ${args.join(' ')}`);
  const r = spawnSync(command, args, { stdio: 'inherit' });
  if (r.error) {
    console.error(`kvevict-node: error: cannot run ${command}: ${r.error.message}` +
      (r.error.code === 'ENOENT' ? ' (Debian 12: apt-get install cmake ninja-build g++)' : ''));
    process.exit(1);
  }
  if (r.status !== 0) {
    console.error(`kvevict-node: error: ${command} failed (exit ${r.status}); see its output above`);
    process.exit(1);
  }
}

function has(command) {
  return spawnSync(command, ['--version'], { stdio: 'ignore' }).status === 0;
}

const addonApi = path.dirname(require.resolve('node-addon-api/package.json'));
const build = path.join(here, 'build-native');
const configure = ['-S', here, '-B', build, '-DCMAKE_BUILD_TYPE=Release',
  `-DKVEVICT_NODE_ADDON_API_DIR=${addonApi}`, `-DKVEVICT_NODE_EXECUTABLE=${process.execPath}`];
if (!fs.existsSync(path.join(build, 'CMakeCache.txt')) && has('ninja')) configure.push('-G', 'Ninja');
run('cmake', configure);
const jobs = process.env.CMAKE_BUILD_PARALLEL_LEVEL || String(os.availableParallelism ? os.availableParallelism() : os.cpus().length);
const reuse = process.env.KVEVICT_REUSE_BUILD;
let built = path.join(build, 'kvevict.node');
if (reuse) {
  if (!fs.existsSync(path.join(reuse, 'CMakeCache.txt'))) {
    console.error(`kvevict-node: error: KVEVICT_REUSE_BUILD=${reuse}: not a configured CMake build (no CMakeCache.txt)`);
    process.exit(1);
  }
  run('cmake', ['--build', reuse, '--target', 'kvevict_node', '--parallel', jobs]);
  built = path.join(reuse, 'bindings', 'node', 'kvevict.node');
} else {
  run('cmake', ['--build', build, '--target', 'kvevict_node', '--parallel', jobs]);
}

if (!fs.existsSync(built)) {
  console.error(`kvevict-node: error: CMake built no ${built}: the addon was skipped (see the "kvevict: Node.js binding skipped" line above)`);
  process.exit(1);
}
const dest = path.join(here, 'build', 'Release', 'kvevict.node');
fs.mkdirSync(path.dirname(dest), { recursive: true });
fs.copyFileSync(built, dest);
if (!process.env.KVEVICT_KEEP_BUILD) fs.rmSync(build, { recursive: true, force: true });
console.log(reuse ? `kvevict-node: ${dest} copied from ${built} (KVEVICT_REUSE_BUILD)` : `kvevict-node: built ${dest}`);
