'use strict';
// Prefill compression through the JavaScript API (prefill, docs/prefill.md):
// every hand-worked case of vectors/prefill.json, with Float32Array rows and
// with number[] rows, and the binding's own checks of the window's shape.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, ownVectorsDir } = require('./support');

const doc = JSON.parse(fs.readFileSync(path.join(ownVectorsDir, 'prefill.json'), 'utf8'));

describe('prefill vectors (vectors/prefill.json)', () => {
  it('is a version-1 prefill file covering every policy', () => {
    assert.equal(doc.kind, 'kv-cache/prefill');
    assert.equal(doc.version, 1);
    const covered = [...new Set(doc.cases.filter((c) => 'expect' in c).map((c) => c.policy))].sort();
    assert.deepEqual(covered, kv.policies().filter((p) => p.signals.every((s) => s === 'attention')).map((p) => p.name).sort());
  });
  for (const c of doc.cases) {
    for (const typed of [true, false]) {
      it(`${c.name} (${typed ? 'Float32Array' : 'number[]'} rows)`, () => {
        const window = c.window.map((row) => (typed ? Float32Array.from(row) : row));
        const call = () => kv.prefill(c.policy, window, c.budget, c.params);
        if ('expect' in c) {
          assert.deepEqual(call(), c.expect);
        } else {
          assert.throws(call, (e) => {
            assert.equal(e.message, c.error);
            assert.ok(e instanceof kv.KvevictError, `${e.name} is a KvevictError`);
            return true;
          });
        }
      });
    }
  }
});

describe('prefill', () => {
  it('keeps every position when the budget holds the prompt', () => {
    const n = 7;
    const window = [0, 1, 2].map((i) => Array.from({ length: n }, (_, j) => (j <= n - 3 + i ? 0.125 : 0)));
    // The attention and positional policies: the key-aware ones score keys.
    for (const p of kv.policies().filter((q) => q.signals.every((s) => s === 'attention'))) {
      const params = p.name === 'streaming-llm' ? { sinks: 1 } : ['h2o', 'scissorhands', 'snapkv', 'pyramidkv'].includes(p.name) ? { recentWindow: 2 } : {};
      for (const budget of [n, n + 1, 4096]) assert.deepEqual(kv.prefill(p.name, window, budget, params), [0, 1, 2, 3, 4, 5, 6], p.name);
    }
  });
  it('refuses malformed windows with one line', () => {
    assert.throws(() => kv.prefill('tova', [[1], [0.5, 0.5]], 1), { name: 'RangeError', message: "prefill: window[1] has 2 weights and window[0] 1: every row covers the prompt's n positions" });
    assert.throws(() => kv.prefill('tova', new Float32Array([1]), 1), { name: 'TypeError', message: /^prefill: window must be an array of rows/ });
    assert.throws(() => kv.prefill('tova', [[1, 'x']], 1), { name: 'TypeError', message: 'prefill: window[0][1] must be a number, got a string' });
    assert.throws(() => kv.prefill('tova', [new Float64Array([1])], 1), { name: 'TypeError', message: /^prefill: window\[0\] must be a Float32Array or a number\[\]/ });
    assert.throws(() => kv.prefill('tova', [], 1), { name: 'InputError', message: 'prefill: the prompt is empty (length 0)' });
    assert.throws(() => kv.prefill('tova', [[NaN]], 1), { name: 'InputError', message: 'prefill: row 0 column 0 is NaN: weights must be finite and at least 0' });
    assert.throws(() => kv.prefill('tova', [[1]], -1), { name: 'RangeError', message: 'prefill: budget (-1) must be at least 1' });
    assert.throws(() => kv.prefill('tova', [[1]], 1.5), { name: 'RangeError' });
    assert.throws(() => kv.prefill(7, [[1]], 1), { name: 'TypeError' });
  });
});
