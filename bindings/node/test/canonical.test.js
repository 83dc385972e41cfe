'use strict';
// The 21 canonical rows (pinned in tests/canonical_test.cpp: facts about
// decode-4096), reproduced exactly twice: by compare() -- the core's harness --
// and by a harness written here in JavaScript (spec/domain.md §2) that streams
// trace() and drives each policy through onDecodeStep/evict.

const { describe, it, before } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, conformanceDir } = require('./support');

const CANONICAL = [
  ['sliding-window', 256, 0.596637, 0.742171, 3840],
  ['sliding-window', 512, 0.655518, 0.774107, 3584],
  ['sliding-window', 1024, 0.754149, 0.833734, 3072],
  ['streaming-llm', 256, 0.736691, 0.859419, 3840],
  ['streaming-llm', 512, 0.786153, 0.88348, 3584],
  ['streaming-llm', 1024, 0.866203, 0.927572, 3072],
  ['h2o', 256, 0.643895, 0.886261, 3840],
  ['h2o', 512, 0.714859, 0.913715, 3584],
  ['h2o', 1024, 0.784413, 0.945091, 3072],
  ['scissorhands', 256, 0.641318, 0.882339, 3840],
  ['scissorhands', 512, 0.711377, 0.906047, 3584],
  ['scissorhands', 1024, 0.784746, 0.945091, 3072],
  ['tova', 256, 0.778128, 0.882339, 3840],
  ['tova', 512, 0.824012, 0.909793, 3584],
  ['tova', 1024, 0.885888, 0.937247, 3072],
  ['snapkv', 256, 0.783378, 0.890183, 3840],
  ['snapkv', 512, 0.82119, 0.901949, 3584],
  ['snapkv', 1024, 0.888049, 0.941169, 3072],
  ['pyramidkv', 256, 0.783378, 0.890183, 3840],
  ['pyramidkv', 512, 0.82119, 0.901949, 3584],
  ['pyramidkv', 1024, 0.888049, 0.941169, 3072],
].map(([policy, budget, mass, recall, calls]) => ({ policy, budget, mass, recall, calls }));

const round6 = (x) => (Number.isFinite(x) ? Math.floor(x * 1e6 + 0.5) / 1e6 : x);

// spec/domain.md §2, every run over one pass of the trace.
function jsHarness(specs, traceId = 'decode-4096', maxSteps = undefined) {
  const TOP_K = 32;
  const steps = kv.trace(traceId, maxSteps);
  const length = steps.length;
  const runs = specs.map(({ policy, budget, params }) => ({
    name: policy,
    policy: kv.policy(policy, { ...params, budget }),
    budget,
    kept: [0],
    isKept: Uint8Array.from({ length }, (_, i) => (i === 0 ? 1 : 0)),
    attn: new Float32Array(budget + 2),
    steps: 0, retained: 0, hits: 0, possible: 0, calls: 0, evicted: 0,
  }));
  let t = 0;
  const top = [];
  const best = new Float32Array(TOP_K);
  for (const w of steps) {
    t += 1;
    assert.equal(w.length, t);
    // Top-k set: threshold = the k-th largest weight; ties go to lower positions.
    const k = Math.min(TOP_K, t);
    let filled = 0;
    for (let i = 0; i < t; i++) {
      const x = w[i];
      if (filled < k) {
        let j = filled++;
        while (j > 0 && best[j - 1] < x) { best[j] = best[j - 1]; j--; }
        best[j] = x;
      } else if (x > best[k - 1]) {
        let j = k - 1;
        while (j > 0 && best[j - 1] < x) { best[j] = best[j - 1]; j--; }
        best[j] = x;
      }
    }
    const threshold = best[k - 1];
    let above = 0;
    for (let i = 0; i < t; i++) if (w[i] > threshold) above++;
    let tieSlots = k - above;
    top.length = 0;
    for (let i = 0; i < t; i++) {
      if (w[i] > threshold) top.push(i);
      else if (w[i] === threshold && tieSlots > 0) { tieSlots--; top.push(i); }
    }
    for (const r of runs) {
      r.steps += 1;
      const held = r.kept.length;
      let retained = 0;
      for (let i = 0; i < held; i++) {
        r.attn[i] = w[r.kept[i]];
        retained += r.attn[i];
      }
      r.retained += retained;
      r.possible += top.length;
      for (const p of top) r.hits += r.isKept[p];
      r.policy.onDecodeStep(t, r.attn.subarray(0, held));  // a view: read in place
      r.kept.push(t);
      r.isKept[t] = 1;
      if (r.kept.length > r.budget) {
        r.calls += 1;
        const victims = r.policy.evict(r.budget);
        for (const v of victims) {
          assert.ok(Number.isInteger(v) && v >= 0 && v < length, `${r.name}: victim ${v} at step ${t} is outside the sequence`);
          assert.equal(r.isKept[v], 1, `${r.name}: victim ${v} at step ${t} is not held`);
          r.isKept[v] = 0;
        }
        r.evicted += victims.length;
        r.kept = r.kept.filter((p) => r.isKept[p] === 1);
        assert.ok(r.kept.length <= r.budget, `${r.name}: ${r.kept.length} held against a budget of ${r.budget} at step ${t}`);
        assert.equal(r.policy.keptCount(), r.kept.length);
      }
    }
  }
  return runs.map((r) => ({
    policy: r.name,
    budget: r.budget,
    steps: r.steps,
    evicted: r.evicted,
    mass: r.steps === 0 ? 0 : round6(r.retained / r.steps),
    recall: r.possible === 0 ? 0 : round6(r.hits / r.possible),
    calls: r.calls,
  }));
}

describe('canonical comparison through compare()', () => {
  let result;
  before(() => { result = kv.compare(); });

  it('has 21 rows on decode-4096, shaped like `kvevict compare --format json`', () => {
    assert.deepEqual(Object.keys(result), ['command', 'model', 'rows', 'trace']);
    assert.equal(result.trace, 'decode-4096');
    assert.equal(result.rows.length, 21);
    for (const row of result.rows) {
      assert.deepEqual(Object.keys(row), ['policy', 'trace', 'budget', 'params', 'steps', 'metrics', 'evicted', 'memoryBytes', 'seconds']);
      assert.deepEqual(Object.keys(row.metrics), ['retainedAttentionMass', 'heavyHitterRecall', 'evictionCalls']);
      assert.equal(row.steps, 4095);
      assert.equal(row.params.budget, row.budget);
    }
  });

  it('reproduces all 21 canonical rows exactly', () => {
    for (const c of CANONICAL) {
      const row = result.rows.find((r) => r.policy === c.policy && r.budget === c.budget);
      assert.ok(row, `${c.policy}@${c.budget} missing`);
      assert.equal(row.metrics.retainedAttentionMass, c.mass, `${c.policy}@${c.budget} mass`);
      assert.equal(row.metrics.heavyHitterRecall, c.recall, `${c.policy}@${c.budget} recall`);
      assert.equal(row.metrics.evictionCalls, c.calls, `${c.policy}@${c.budget} calls`);
    }
  });

  it('ranks by retained mass at 512: TOVA first, Sliding Window last', () => {
    const at512 = result.rows.filter((r) => r.budget === 512).map((r) => r.metrics.retainedAttentionMass);
    assert.deepEqual(at512, [...at512].sort((a, b) => b - a));
    assert.equal(result.rows[0].policy, 'tova');
    assert.equal(result.rows[20].policy, 'sliding-window');
  });

  it('agrees row by row with the peer canonical.json when present', (t) => {
    const file = path.join(conformanceDir, 'canonical.json');
    if (!fs.existsSync(file)) { t.skip(`${file} is absent: the peer's canonical rows are not compared`); return; }
    const peer = JSON.parse(fs.readFileSync(file, 'utf8')).rows;
    assert.equal(peer.length, 21);
    for (const p of peer) {
      const row = result.rows.find((r) => r.policy === p.policy && r.budget === p.budget);
      assert.equal(row.metrics.retainedAttentionMass, p.retainedAttentionMass);
      assert.equal(row.metrics.heavyHitterRecall, p.heavyHitterRecall);
      assert.equal(row.metrics.evictionCalls, p.evictionCalls);
    }
  });
});

describe('canonical comparison through a JavaScript harness', () => {
  it('trace() streams decode-4096 with the parity hash 3136039440', (t) => {
    assert.equal(kv.traceHash(), 3136039440);
    assert.equal(kv.traceHash('decode-4096', 4095), 3136039440);
    const file = path.join(conformanceDir, 'trace-prefix.json');
    if (!fs.existsSync(file)) { t.diagnostic('trace-prefix.json absent: first steps not compared bit for bit'); return; }
    const prefix = JSON.parse(fs.readFileSync(file, 'utf8')).traces['decode-4096'];
    const steps = [...kv.trace('decode-4096', prefix.steps)];
    assert.equal(steps.length, prefix.steps);
    steps.forEach((w, i) => assert.deepEqual([...new Uint32Array(w.buffer, w.byteOffset, w.length)], prefix.firstStepBits[i]));
  });

  it('reproduces all 21 canonical rows exactly, driving onDecodeStep/evict from JS', () => {
    const rows = jsHarness(CANONICAL);
    for (const [i, c] of CANONICAL.entries()) {
      const r = rows[i];
      assert.equal(r.steps, 4095);
      assert.equal(r.mass, c.mass, `${c.policy}@${c.budget} mass`);
      assert.equal(r.recall, c.recall, `${c.policy}@${c.budget} recall`);
      assert.equal(r.calls, c.calls, `${c.policy}@${c.budget} calls`);
      assert.equal(r.evicted, c.calls, `${c.policy}@${c.budget} evicted`);
    }
  });

  it('agrees with run() on a deep PyramidKV layer (batched evictions)', () => {
    const params = { layer: 3, numLayers: 4 };
    const [js] = jsHarness([{ policy: 'pyramidkv', budget: 128, params }], 'decode-4096', 600);
    const core = kv.run({ policy: 'pyramidkv', budget: 128, params, steps: 600 });
    assert.ok(core.metrics.evictionCalls < core.evicted);
    assert.equal(js.mass, core.metrics.retainedAttentionMass);
    assert.equal(js.recall, core.metrics.heavyHitterRecall);
    assert.equal(js.calls, core.metrics.evictionCalls);
    assert.equal(js.evicted, core.evicted);
  });
});
