'use strict';
// `npm pack` / `npm publish` (prepack): copies the C++ library's sources from
// the repository into native/, so that the tarball builds the addon on
// `npm install` (scripts/install.js) with nothing but the tarball and
// node-addon-api. native/ mirrors the repository root: its CMakeLists.txt,
// cmake/, include/, src/ and tools/ (the tool's target is declared there, though
// not built); the postpack step (`node scripts/prepack.js --clean`) removes it.
// native/ is not in git (.gitignore).

const fs = require('node:fs');
const path = require('node:path');

const here = path.join(__dirname, '..');
const native = path.join(here, 'native');
const root = path.join(here, '..', '..');
const copied = ['CMakeLists.txt', 'cmake', 'include', 'src', 'tools'];

fs.rmSync(native, { recursive: true, force: true });
if (process.argv[2] === '--clean') process.exit(0);

for (const entry of copied) {
  const from = path.join(root, entry);
  if (!fs.existsSync(from)) {
    console.error(`kvevict-node: error: ${from} is missing: npm pack runs in bindings/node of a kvevict checkout`);
    process.exit(1);
  }
  fs.cpSync(from, path.join(native, entry), { recursive: true });
}
console.log(`kvevict-node: copied ${copied.join(', ')} from ${path.resolve(root)} into native/`);
