'use strict';
// SIMD targets from Node: what the build holds, what the CPU runs, selecting
// one (KVEVICT_SIMD at load, or selectSimd), and the same decisions on each.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { kv } = require('./support');

const initial = kv.simd().active;
after(() => kv.selectSimd(initial));

describe('simd', () => {
  it('holds and supports the baseline', () => {
    const info = kv.simd();
    assert.equal(info.compiled[0], 'baseline');
    assert.equal(info.supported[0], 'baseline');
    for (const t of info.supported) assert.ok(info.compiled.includes(t), t);
    assert.ok(info.supported.includes(info.active));
  });

  it('decides alike on every supported target', () => {
    const seen = new Set();
    for (const target of kv.simd().supported) {
      kv.selectSimd(target);
      assert.equal(kv.simd().active, target);
      const row = kv.run({ policy: 'h2o', budget: 300, steps: 700 });
      seen.add(JSON.stringify([row.metrics, row.evicted]));
    }
    assert.equal(seen.size, 1, [...seen].join('\n'));
  });

  it('refuses an unknown target with a ParameterError', () => {
    assert.throws(() => kv.selectSimd('avx1024'), (e) => e instanceof kv.ParameterError &&
      /'avx1024' is not one this build has/.test(e.message));
  });

  const load = (value) => spawnSync(process.execPath,
    ['-e', `console.log(require(${JSON.stringify(path.resolve(__dirname, '..'))}).simd().active)`],
    { env: { ...process.env, KVEVICT_SIMD: value }, encoding: 'utf8' });

  it('reads KVEVICT_SIMD at load', () => {
    const done = load('baseline');
    assert.equal(done.status, 0, done.stderr);
    assert.equal(done.stdout.trim(), 'baseline');
  });

  it('fails the load on a bad KVEVICT_SIMD, naming it', () => {
    const done = load('avx1024');
    assert.notEqual(done.status, 0);
    assert.match(done.stderr, /KVEVICT_SIMD=avx1024: .*'avx1024' is not one this build has/);
  });
});
