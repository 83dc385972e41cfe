'use strict';
// The JavaScript API: classes from the registry, the policy methods, traces,
// run/compare results shaped like the tool's JSON, and runVectors.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { kv, ownVectorsDir } = require('./support');

// What index.d.ts declares for each policy; the registry must agree.
const DECLARED = {
  scissorhands: ['Scissorhands', ['votesOf', 'rankOf']],
  h2o: ['H2O', ['scoreOf']],
  'streaming-llm': ['StreamingLLM', ['sinkCount']],
  'sliding-window': ['SlidingWindow', []],
  tova: ['TOVA', ['lastAttentionOf']],
  snapkv: ['SnapKV', ['windowScoreOf']],
  pyramidkv: ['PyramidKV', ['effectiveBudget', 'windowScoreOf']],
  knorm: ['KNorm', ['keyNormOf']],
  keydiff: ['KeyDiff', ['cosineOf', 'keyNormOf']],
  'expected-attention': ['ExpectedAttention', ['logitOf', 'scoreOf', 'modelledQueries']],
};
const QUERIES = ['votesOf', 'rankOf', 'scoreOf', 'sinkCount', 'lastAttentionOf', 'windowScoreOf', 'effectiveBudget',
  'keyNormOf', 'cosineOf', 'logitOf', 'modelledQueries'];

// Every parameter at its default, from the registry.
function defaultsOf(name) {
  const info = kv.policies().find((p) => p.name === name);
  return Object.fromEntries(info.params.map((x) => [x.name, x.default]));
}

describe('registry', () => {
  it('exports one class per registered policy, with exactly its queries', () => {
    const infos = kv.policies();
    assert.deepEqual(infos.map((p) => p.name), Object.keys(DECLARED));
    for (const info of infos) {
      const [title, queries] = DECLARED[info.name];
      assert.equal(info.title, title);
      assert.deepEqual(info.queries.map((q) => q.name).sort(), [...queries].sort(),
        `${info.name}: the registry's queries differ from those index.d.ts declares; update both`);
      const cls = kv[title];
      assert.equal(typeof cls, 'function');
      assert.equal(cls.name, title);
      assert.equal(cls.policyName, info.name);
      assert.equal(kv.policyClasses[info.name], cls);
      for (const q of QUERIES) assert.equal(typeof cls.prototype[q], queries.includes(q) ? 'function' : 'undefined', `${title}.${q}`);
      assert.ok(info.summary.length > 0);
      assert.equal(info.params[0].name, 'budget');
      assert.equal(info.params[0].default, 512);
    }
  });

  it("index.d.ts declares exactly the registry's parameters for each policy", () => {
    const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
    for (const info of kv.policies()) {
      const m = dts.match(new RegExp(`export interface ${info.title}Params \\{([^}]*)\\}`));
      assert.ok(m, `index.d.ts lacks ${info.title}Params`);
      const declared = [...m[1].matchAll(/(\w+)\?: number/g)].map((x) => x[1]).sort();
      assert.deepEqual(declared, info.params.map((x) => x.name).sort(),
        `${info.title}Params in index.d.ts differs from the registry's parameters; update it`);
    }
  });

  it('builds every registered policy by name and by class, at its defaults', () => {
    for (const info of kv.policies()) {
      const byName = kv.policy(info.name);
      const byClass = new kv.policyClasses[info.name]();
      for (const p of [byName, byClass]) {
        assert.ok(p instanceof kv.Policy);
        assert.ok(p instanceof kv.policyClasses[info.name]);
        assert.equal(p.name, info.name);
        assert.deepEqual(p.params, defaultsOf(info.name));
        assert.equal(p.keptCount(), 1, 'every policy starts holding position 0');
        assert.ok(p.memoryBytes() > 0);
      }
    }
  });

  it('reports effective parameters and per-slot memory', () => {
    const p = new kv.H2O({ budget: 64, recentWindow: undefined });
    assert.deepEqual(p.params, { ...defaultsOf('h2o'), budget: 64 });
    assert.equal(p.params.recentWindow, 32);
    assert.ok(new kv.H2O({ budget: 128 }).memoryBytes() > p.memoryBytes());
    assert.equal(new kv.Scissorhands({ budget: 512 }).memoryBytes(), kv.run({ policy: 'scissorhands', budget: 512, steps: 1 }).memoryBytes);
    assert.equal(new kv.SlidingWindow({ budget: 1 }).memoryBytes(), 8, '4 bytes per slot, capacity budget + 1');
    assert.equal(new kv.StreamingLLM({ budget: 8, sinks: 4 }).sinkCount(), 1);
    assert.equal(new kv.PyramidKV({ budget: 512, layer: 3, numLayers: 4 }).effectiveBudget(), 204);
    const q = kv.policy('tova', { budget: 8 });
    assert.ok(q instanceof kv.TOVA);
    assert.equal(q.query('lastAttentionOf', [0]), -1);
  });

  it('pyramidBudget gives the arithmetic per-layer share', () => {
    assert.equal(kv.pyramidBudget(512, 0, 4, 4), 819);
    assert.equal(kv.pyramidBudget(512, 3, 4, 4), 204);
    assert.equal(kv.pyramidBudget(512, 0, 1, 4), 512);
    assert.equal(kv.pyramidBudget(100, 2, 5, 1), 100);
  });
});

describe('policy methods', () => {
  it('normalize=1: H2O ranks by the mean, Scissorhands by the vote rate', () => {
    // vectors/h2o.vectors.json: the means drop 1 where the sums drop 2.
    for (const [normalize, victim] of [[0, 2], [1, 1]]) {
      const h = new kv.H2O({ budget: 3, recentWindow: 1, normalize });
      h.onDecodeStep(1, new Float32Array([1]));
      h.onDecodeStep(2, new Float32Array([0.5, 0.5]));
      h.onDecodeStep(3, new Float32Array([0.25, 0.25, 0.5]));
      assert.equal(h.scoreOf(1), normalize ? 0.375 : 0.75);
      assert.deepEqual(h.evict(3), [victim]);
    }
    const s = new kv.Scissorhands({ budget: 4, recentWindow: 1, normalize: 1 });
    [[1], [0.75, 0.25], [0.125, 0.5, 0.375], [0.3125, 0.3125, 0.0625, 0.3125]].forEach((w, i) =>
      s.onDecodeStep(i + 1, new Float32Array(w)));
    assert.equal(s.votesOf(0), 2);
    assert.equal(s.rankOf(0), 0.5);
    assert.equal(s.rankOf(3), 1);
    assert.deepEqual(s.evict(4), [0]);
    assert.throws(() => new kv.Scissorhands({ budget: 4, recentWindow: 1, normalize: 1, historyWindow: 8 }),
      /^ParameterError: Scissorhands: historyWindow \(8\) must be 0 with normalize=1/);
  });

  it('Scissorhands: the spec example, votes and the tie-break', () => {
    const p = new kv.Scissorhands({ budget: 3, recentWindow: 1 });
    p.onDecodeStep(1, new Float32Array([1]));
    p.onDecodeStep(2, new Float32Array([0.5, 0.5]));
    p.onDecodeStep(3, new Float32Array([0.25, 0.25, 0.5]));
    assert.equal(p.votesOf(1), 0);
    assert.equal(p.votesOf(2), 1);
    assert.equal(p.votesOf(99), -1);
    assert.equal(p.keptCount(), 4);
    assert.deepEqual(p.evict(3), [0]);
    assert.equal(p.votesOf(0), -1);
    assert.equal(p.keptCount(), 3);
    assert.deepEqual(p.evict(3), []);
  });

  it('reads a Float32Array view in place, honouring its byte offset (also shared memory)', () => {
    const backing = new Float32Array(new SharedArrayBuffer(4 * 4));
    backing.set([7, 0.25, 0.75, 9]);
    const p = new kv.H2O({ budget: 4, recentWindow: 1 });
    p.onDecodeStep(1, backing.subarray(1, 2));
    p.onDecodeStep(2, backing.subarray(1, 3));
    assert.equal(p.scoreOf(0), 0.5);
    assert.equal(p.scoreOf(1), 0.75);
  });

  it('accepts plain number arrays, converted to float32', () => {
    const p = new kv.TOVA({ budget: 4 });
    p.onDecodeStep(1, [0.1]);
    assert.equal(p.lastAttentionOf(0), Math.fround(0.1));
  });

  it('null or omitted attention is "no information": state untouched', () => {
    const p = new kv.H2O({ budget: 8, recentWindow: 1 });
    p.onDecodeStep(1, [0.5]);
    p.onDecodeStep(2, null);
    p.onDecodeStep(3);
    p.onDecodeStep(4, undefined);
    assert.equal(p.scoreOf(0), 0.5);
    assert.equal(p.scoreOf(1), 0);
    assert.equal(p.keptCount(), 5);
    const s = new kv.SnapKV({ budget: 8, recentWindow: 1, obsWindow: 1 });
    s.onDecodeStep(1, [0.5]);
    s.onDecodeStep(2, null);
    assert.equal(s.windowScoreOf(0), 0.5, 'an absent step does not advance the ring');
  });

  it('attention longer than the kept set is accepted; the extra weights are ignored', () => {
    const p = new kv.H2O({ budget: 4, recentWindow: 1 });
    p.onDecodeStep(1, new Float32Array([0.25, 0.5, 0.25, Infinity, NaN]));
    assert.equal(p.scoreOf(0), 0.25);
    assert.equal(p.scoreOf(1), 0);
    assert.equal(p.keptCount(), 2);
  });

  it('shorter attention is accepted too (only the given weights are read)', () => {
    const p = new kv.H2O({ budget: 4, recentWindow: 1 });
    p.onDecodeStep(1, [1]);
    p.onDecodeStep(2, [0.5]);
    assert.equal(p.scoreOf(0), 1.5);
    assert.equal(p.scoreOf(1), 0);
  });

  it('a detached buffer reads as empty attention, without a crash', () => {
    const buffer = new ArrayBuffer(8);
    const view = new Float32Array(buffer);
    structuredClone(buffer, { transfer: [buffer] });
    const p = new kv.H2O({ budget: 4, recentWindow: 1 });
    p.onDecodeStep(1, view);
    assert.equal(p.scoreOf(0), 0);
    assert.equal(p.keptCount(), 2);
  });

  it('evict returns a fresh array the caller owns', () => {
    const p = new kv.SlidingWindow({ budget: 3 });
    for (const t of [1, 2, 3]) p.onDecodeStep(t, null);
    const first = p.evict(1);
    assert.ok(Array.isArray(first));
    assert.deepEqual(first, [0, 1, 2]);
    first.push(99);
    for (const t of [4, 5, 6]) p.onDecodeStep(t, null);
    assert.deepEqual(p.evict(1), [3, 4, 5]);
    assert.deepEqual(first, [0, 1, 2, 99], 'an earlier result is not overwritten');
  });

  it('PyramidKV evicts down to its own share even below the budget', () => {
    const p = new kv.PyramidKV({ budget: 8, layer: 1, numLayers: 2, pyramidRatio: 3, recentWindow: 1 });
    assert.equal(p.effectiveBudget(), kv.pyramidBudget(8, 1, 2, 3));
    for (let t = 1; t <= 6; t++) p.onDecodeStep(t, new Float32Array(p.keptCount()).fill(1 / p.keptCount()));
    const victims = p.evict(8);
    assert.equal(p.keptCount(), p.effectiveBudget());
    assert.equal(victims.length, 7 - p.effectiveBudget());
  });

  it('dropped policies are collected: their native storage is freed', async () => {
    // Each SnapKV at budget 1024 holds ~87 kB natively: 20,000 of them kept
    // alive would take ~1.7 GB. Finalizers run once the job yields to the loop.
    const before = process.memoryUsage().rss;
    let kept = 0;
    for (let chunk = 0; chunk < 100; chunk++) {
      for (let i = 0; i < 200; i++) {
        const p = kv.policy('snapkv', { budget: 1024 });
        p.onDecodeStep(1, [1]);
        kept += p.keptCount();
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.equal(kept, 40000);
    const grown = process.memoryUsage().rss - before;
    assert.ok(grown < 600e6, `resident memory grew by ${Math.round(grown / 1e6)} MB`);
  });

  it('works in worker threads too (per-thread addon state)', async () => {
    const { Worker } = require('node:worker_threads');
    const code = `
      const { parentPort } = require('node:worker_threads');
      const kv = require(${JSON.stringify(path.join(__dirname, '..'))});
      const p = new kv.Scissorhands({ budget: 2, recentWindow: 1 });
      let name = '';
      try { p.evict(-1); } catch (e) { name = e.name; }
      try { new kv.H2O({ budget: 0 }); } catch (e) { name += ' ' + (e instanceof kv.ParameterError); }
      parentPort.postMessage([p.keptCount(), kv.traceHash('decode-4096', 10), name]);`;
    const result = await new Promise((resolve, reject) => {
      const w = new Worker(code, { eval: true });
      w.once('message', resolve);
      w.once('error', reject);
    });
    assert.deepEqual(result, [1, kv.traceHash('decode-4096', 10), 'RangeError true']);
  });

  it('shows its class, parameters and size when inspected', () => {
    const p = new kv.Scissorhands({ budget: 8, recentWindow: 2 });
    assert.equal(require('node:util').inspect(p), `Scissorhands ${JSON.stringify({ ...defaultsOf('scissorhands'), budget: 8, recentWindow: 2 })} (kept 1)`);
  });
});

describe('traces', () => {
  it('trace() yields a new Float32Array per step, t weights at step t', () => {
    const steps = kv.trace('decode-4096', 5);
    assert.equal(steps.id, 'decode-4096');
    assert.equal(steps.length, 4096);
    assert.equal(steps.steps, 5);
    const all = [...steps];
    assert.deepEqual(all.map((w) => w.length), [1, 2, 3, 4, 5]);
    for (const w of all) assert.ok(w instanceof Float32Array);
    assert.equal(all[0][0], 1);
    assert.equal(kv.trace().steps, 4095);
  });

  it('traceHash is the FNV-1a parity hash of a prefix', () => {
    assert.equal(kv.traceHash(), 3136039440);
    assert.equal(kv.traceHash('decode-4096', 10), kv.traceHash('decode-4096', 10));
    assert.notEqual(kv.traceHash('decode-4096', 10), kv.traceHash('decode-4096', 11));
  });
});

describe('run and compare', () => {
  const KEYS = ['policy', 'trace', 'budget', 'params', 'steps', 'metrics', 'evicted', 'memoryBytes', 'seconds'];

  it('run() returns the object `kvevict run --format json` prints', () => {
    const r = kv.run({ policy: 'scissorhands', budget: 256, params: { recentWindow: 64 }, steps: 300 });
    assert.deepEqual(Object.keys(r), KEYS);
    assert.equal(r.policy, 'scissorhands');
    assert.equal(r.trace, 'decode-4096');
    assert.deepEqual(r.params, { ...defaultsOf('scissorhands'), budget: 256, recentWindow: 64 });
    assert.equal(r.steps, 300);
    assert.equal(r.metrics.evictionCalls, 300 - 256 + 1);
    assert.equal(r.evicted, 45);
    assert.equal(r.memoryBytes, new kv.Scissorhands({ budget: 256, recentWindow: 64 }).memoryBytes());
    assert.ok(r.seconds >= 0);
  });

  it('run() takes the budget from options, else params, else the default', () => {
    assert.equal(kv.run({ policy: 'h2o', steps: 10 }).budget, 512);
    assert.equal(kv.run({ policy: 'h2o', params: { budget: 64 }, steps: 10 }).budget, 64);
    assert.equal(kv.run({ policy: 'h2o', budget: 32, params: { budget: 64, recentWindow: 8 }, steps: 10 }).budget, 32);
  });

  it('a budget that never binds keeps every weight', () => {
    const r = kv.run({ policy: 'tova', budget: 4096, steps: 200 });
    assert.equal(r.metrics.retainedAttentionMass, 1);
    assert.equal(r.metrics.evictionCalls, 0);
  });

  it('compare() returns the object `kvevict compare --format json` prints, overrides applied', () => {
    const c = kv.compare({
      policies: ['h2o', 'scissorhands', 'streaming-llm'],
      budgets: [256, 128],
      overrides: { recentWindow: 64, 'h2o.recentWindow': 16, 'streaming-llm': { sinks: 8 } },
      steps: 400,
    });
    assert.deepEqual(Object.keys(c), ['command', 'model', 'rows', 'trace']);
    assert.deepEqual([c.command, c.model], ['compare', null]);
    assert.equal(c.rows.length, 6);
    for (const row of c.rows) assert.deepEqual(Object.keys(row), KEYS);
    const params = (name) => c.rows.find((r) => r.policy === name).params;
    assert.equal(params('h2o').recentWindow, 16);
    assert.equal(params('scissorhands').recentWindow, 64);
    assert.equal(params('streaming-llm').sinks, 8);
    // Each policy's rows ascend by budget; policies are ranked by mass at the middle budget (128).
    for (let i = 0; i < 6; i += 2) {
      assert.equal(c.rows[i].policy, c.rows[i + 1].policy);
      assert.deepEqual([c.rows[i].budget, c.rows[i + 1].budget], [128, 256]);
    }
    const masses = [0, 2, 4].map((i) => c.rows[i].metrics.retainedAttentionMass);
    assert.deepEqual(masses, [...masses].sort((a, b) => b - a));
  });

  it('compare() accepts "a,b" and "all"', () => {
    assert.equal(kv.compare({ policies: 'tova,h2o', budgets: [64], steps: 100 }).rows.length, 2);
    // "all" over a trace is the seven policies a trace can feed (attention or
    // nothing): knorm and keydiff read keys, which a trace does not have.
    const all = kv.compare({ policies: 'all', budgets: [64], steps: 100 }).rows;
    assert.equal(all.length, 7);
    assert.ok(!all.some((r) => r.policy === 'knorm' || r.policy === 'keydiff' || r.policy === 'expected-attention'));
  });
});

describe('ExpectedAttention', () => {
  it('reads keys, values and queries; refuses a step without queries, changing nothing', () => {
    // No RoPE, mean query (2, 0): logits 2 k[0] / sqrt 2, so the key (-1, 0) goes.
    const p = new kv.ExpectedAttention({ budget: 2, headDim: 2, sinks: 0, ropeBase: 0, covariance: 0, valueNorm: 0 });
    assert.deepEqual(p.signals, ['key', 'value', 'queries']);
    const q = new Float32Array([2, 0]);
    const value = [1, 0];
    p.onOrigin({ key: [0.5, 0], value, queries: q });
    p.onStep(1, { key: [1, 0], value, queries: q });
    assert.throws(() => p.onStep(2, { key: [-1, 0], value }), /ExpectedAttention: the step gives no queries/);
    assert.equal(p.keptCount(), 2);
    assert.equal(p.modelledQueries(), 2);
    p.onStep(2, { key: [-1, 0], value, queries: q });
    assert.ok(Math.abs(p.logitOf(2, 0) + 2 / Math.SQRT2) < 1e-12);
    assert.deepEqual(p.evict(2), [2]);
    const e0 = Math.exp(0.5 * Math.SQRT2);
    const e1 = Math.exp(Math.SQRT2);
    assert.ok(Math.abs(p.scoreOf(0) - e0 / (e0 + e1)) < 1e-12);
  });
});

describe('runVectors', () => {
  it('replays a folder or files through the C++ runner', () => {
    const folder = kv.runVectors(ownVectorsDir);
    assert.equal(folder.failed, 0);
    assert.ok(folder.passed > 0);
    const one = kv.runVectors(path.join(ownVectorsDir, 'scissorhands.vectors.json'));
    assert.equal(one.failed, 0);
  });

  it('reports a failed expectation with file, case, step, expected and actual', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvevict-node-'));
    const file = path.join(dir, 'wrong.vectors.json');
    fs.writeFileSync(file, JSON.stringify({
      policy: 'kv-cache/sliding-window',
      version: 1,
      cases: [
        { name: 'right', params: { budget: 1 }, steps: [{ call: 'onDecodeStep', args: [1, null] }, { call: 'evict', args: [1], expect: [0] }] },
        { name: 'wrong', params: { budget: 1 }, steps: [{ call: 'onDecodeStep', args: [1, null] }, { call: 'evict', args: [1], expect: [1] }] },
      ],
    }));
    try {
      const report = kv.runVectors([file]);
      assert.equal(report.passed, 1);
      assert.equal(report.failed, 1);
      assert.equal(report.failures.length, 1);
      const f = report.failures[0];
      assert.equal(f.file, file);
      assert.equal(f.caseName, 'wrong');
      assert.equal(f.step, 1);
      assert.equal(f.expected, '[1]');
      assert.equal(f.actual, '[0]');
      assert.equal(f.description, `${file}: case 'wrong' step 1: evict did not match; expected [1], got [0]`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
