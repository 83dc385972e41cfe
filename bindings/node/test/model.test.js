'use strict';
// The real-model API: Model, Decoder, perplexity, compareModel,
// recordAttention, persistence. The model folder is $KVEVICT_MODEL_DIR (default
// <repository>/model) with kvevict-tiny.kvm, heldout-sample.txt,
// reference-prompt.txt and reference.npy; the suite is skipped, with a
// message, when any of them is missing. The expected values are worked out
// from the definitions, not read back from the library.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { kv, repoRoot, readNpy } = require('./support');

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const files = ['kvevict-tiny.kvm', 'heldout-sample.txt', 'reference-prompt.txt', 'reference.npy'];
const missing = files.filter((f) => !fs.existsSync(path.join(modelDir, f)));
const skip = missing.length === 0 ? false : `the model folder ${modelDir} lacks ${missing.join(', ')} (set KVEVICT_MODEL_DIR)`;
if (skip) console.log(`kvevict-node: skipping the real-model suite: ${skip}`);

const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
let model;
let sample;
function setup() {
  if (model === undefined) {
    model = new kv.Model(kvm);
    sample = fs.readFileSync(path.join(modelDir, 'heldout-sample.txt'));
  }
  return model;
}
// The first n bytes of the held-out sample (a Buffer view).
function text(n) {
  setup();
  assert.ok(sample.length >= n, `heldout-sample.txt has ${sample.length} bytes, the test needs ${n}`);
  return sample.subarray(0, n);
}
// Caches (policy instances) per sequence: layers x KV heads, read from the
// file's header (model/FORMAT.md: words at bytes 20 ... 51; a version-1 file
// has 0 in the KV-heads word and one KV head per query head).
function cachesInFile() {
  const header = fs.readFileSync(kvm).subarray(20, 52);
  const layers = header.readUInt32LE(4), heads = header.readUInt32LE(8), kvWord = header.readUInt32LE(24);
  return layers * (kvWord === 0 ? heads : kvWord);
}
const HEADS = skip ? 0 : cachesInFile();

test.describe('real model', { skip }, () => {
  test('Model: config, parameterCount, path', () => {
    const m = setup();
    assert.ok(m instanceof kv.Model);
    assert.equal(m.path, kvm);
    const c = m.config;
    assert.deepEqual(Object.keys(c), ['vocab', 'layers', 'heads', 'kvHeads', 'width', 'ff', 'context', 'ropeBase', 'normEps']);
    assert.equal(c.vocab, 256);
    assert.equal(c.layers * c.kvHeads, HEADS);
    assert.equal(c.heads % c.kvHeads, 0);
    // Tied embedding + per layer (2 norms, q|k|v, proj, up, down) + the final norm.
    const qkvRows = (c.heads + 2 * c.kvHeads) * (c.width / c.heads);
    const perLayer = 2 * c.width + qkvRows * c.width + c.width * c.width + 2 * c.ff * c.width;
    assert.equal(m.parameterCount, c.vocab * c.width + c.layers * perLayer + c.width);
  });

  test('a truncated .kvm throws an Error naming the file and saying "truncated"', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvevict-node-'));
    try {
      const cut = path.join(dir, 'cut.kvm');
      const bytes = fs.readFileSync(kvm);
      fs.writeFileSync(cut, bytes.subarray(0, Math.floor(bytes.length / 2)));
      assert.throws(() => new kv.Model(cut), (e) => {
        assert.ok(e instanceof Error);
        assert.ok(e instanceof kv.InputError, `${e.name}: ${e.message}`);
        assert.ok(e.message.includes(cut), e.message);
        assert.match(e.message, /truncated/);
        return true;
      });
      const absentFile = path.join(dir, 'absent.kvm');
      assert.throws(() => new kv.Model(absentFile), (e) => e instanceof kv.InputError && e.message.includes(absentFile));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    assert.throws(() => new kv.Model(42), { name: 'TypeError', message: 'Model: path must be a string, got a number' });
  });

  test('every policy with a budget >= the text length gives exactly the full cache\'s perplexity', () => {
    const m = setup();
    const n = 200;
    const t = text(n);
    // 1023 (the most a context of 1,024 takes) >= n for every policy; PyramidKV's smallest layer share, too.
    const budget = 1023;
    assert.ok(kv.pyramidBudget(budget, m.config.layers - 1, m.config.layers, 4) >= n);
    const names = kv.policies().map((p) => p.name);
    const rows = kv.perplexity(m, t, names.map((name) => [name, budget]));
    assert.equal(rows.length, names.length + 1);
    const [full, ...rest] = rows;
    assert.equal(full.policy, null);
    assert.equal(full.budget, null);
    assert.deepEqual(full.params, {});
    assert.equal(full.predictions, n - 1);  // one window: n - 1 predictions
    assert.equal(full.evicted, 0);
    assert.ok(full.perplexity > 1 && Number.isFinite(full.perplexity));
    assert.ok(Math.abs(full.bitsPerByte - Math.log2(full.perplexity)) < 1e-9);
    rest.forEach((row, i) => {
      assert.equal(row.policy, names[i]);
      assert.equal(row.budget, budget);
      assert.equal(row.params.budget, budget);
      assert.equal(row.evicted, 0, row.policy);
      assert.equal(row.predictions, n - 1);
      assert.equal(row.perplexity, full.perplexity, row.policy);
      assert.equal(row.bitsPerByte, full.bitsPerByte, row.policy);
      assert.equal(row.extraBitsPerByte, 0, row.policy);
      assert.equal(row.extraLow, null, 'one window: no interval');
      assert.equal(row.extraHigh, null);
    });
    assert.equal(full.extraBitsPerByte, null);
    assert.deepEqual(Object.keys(full),
      ['policy', 'budget', 'params', 'perplexity', 'bitsPerByte', 'extraBitsPerByte', 'extraLow', 'extraHigh',
        'predictions', 'predictedBytes', 'tokenizer', 'evicted', 'kvPrecision', 'kvResidual', 'bytesPerPosition', 'modelBytesPerPosition', 'peakCacheBytes', 'seconds']);
  });

  test('a budget-8 sliding window evicts exactly 16 * (n - 1 - 8) positions', () => {
    const m = setup();
    for (const n of [40, 300]) {
      const [full, row] = kv.perplexity(m, text(n), [['sliding-window', 8]]);
      // Tokens 0 ... n-2 are fed; from step 8 on every head drops one position a step.
      assert.equal(row.evicted, HEADS * (n - 1 - 8), `n = ${n}`);
      assert.equal(row.predictions, n - 1);
      assert.equal(full.evicted, 0);
      assert.notEqual(row.perplexity, full.perplexity);
    }
    // The same run as a Policy instance, as {policy, budget} and with a Uint8Array.
    const t = new Uint8Array(text(40));
    const rows = kv.perplexity(m, t, [new kv.SlidingWindow({ budget: 8 }), { policy: 'sliding-window', budget: 8 }]);
    assert.equal(rows[1].evicted, HEADS * 31);
    assert.equal(rows[2].evicted, HEADS * 31);
    assert.equal(rows[1].perplexity, rows[2].perplexity);
  });

  test('perplexity at a KV precision: the fp32 full cache, then the full cache at that precision', () => {
    const m = setup();
    const t = text(300);
    const [plain, window] = kv.perplexity(m, t, [['sliding-window', 8]]);
    // An int4 window longer than the 299 positions never fills: every row stays fp32, bit for bit.
    const same = kv.perplexity(m, t, [['sliding-window', 8]], { kvPrecision: 'int4', kvResidual: 1000 });
    assert.equal(same.length, 3);
    assert.equal(same[0].kvPrecision, 'fp32');
    assert.equal(same[0].extraBitsPerByte, null);
    assert.equal(same[1].policy, null);
    assert.equal(same[1].kvPrecision, 'int4');
    assert.equal(same[1].kvResidual, 1000);
    assert.equal(same[1].perplexity, plain.perplexity);
    assert.equal(same[1].extraBitsPerByte, 0);
    assert.equal(same[2].perplexity, window.perplexity);
    // int8: 32 codes and a scale, key and value: 72 bytes a position, measured on the full cache's 299.
    const int8 = kv.perplexity(m, t, [], { kvPrecision: 'int8' });
    assert.equal(int8[1].bytesPerPosition, 72);
    assert.equal(int8[1].peakCacheBytes, 299 * 72);
    assert.equal(int8[0].peakCacheBytes, 299 * 256);
    assert.throws(() => kv.perplexity(m, t, [], { kvPrecision: 'int3' }),
      /perplexity: options.kvPrecision: 'int3' is not a KV precision \(fp32, fp16, int8 or int4\)/);
    assert.throws(() => kv.perplexity(m, t, [], { kvPrecision: 8 }), /options.kvPrecision must be a string/);
    assert.throws(() => kv.perplexity(m, t, [], { kvResidual: 4 }), /needs a quantized --kv-precision/);
    const ranked = kv.compareModel(m, t, { policies: 'sliding-window,tova', budgets: [16, 32], kvPrecision: 'fp16' });
    assert.equal(ranked[1].kvPrecision, 'fp16');
    assert.equal(ranked[1].rank, null);
    assert.deepEqual(ranked.slice(2).map((r) => r.kvPrecision), ['fp16', 'fp16', 'fp16', 'fp16']);
  });

  test('sweepModel: perplexity over each value x budget, value-major', () => {
    const m = setup();
    const t = text(300);
    const rows = kv.sweepModel(m, t, { policy: 'h2o', param: 'recentWindow', values: [4, 12], budgets: [24, 48], params: { sinks: 2 } });
    assert.deepEqual(rows.slice(1).map((r) => [r.budget, r.params.recentWindow, r.params.sinks]),
      [[24, 4, 2], [48, 4, 2], [24, 12, 2], [48, 12, 2]]);
    const [, same] = kv.perplexity(m, t, [['h2o', 48, { recentWindow: 12, sinks: 2 }]]);
    assert.equal(rows[4].perplexity, same.perplexity);
    assert.throws(() => kv.sweepModel(m, t, { policy: 'h2o', param: 'windowSize', values: [1] }), /unknown parameter 'windowSize'/);
    assert.throws(() => kv.sweepModel(m, t, { policy: 'h2o', param: 'recentWindow', values: 8 }),
      /sweepModel: options.values must be an array of numbers/);
  });

  test('perplexity: params, maxWindows and the full cache alone', () => {
    const m = setup();
    const [, row] = kv.perplexity(m, text(100), [['h2o', 24, { recentWindow: 4 }]]);
    assert.deepEqual(row.params, { budget: 24, recentWindow: 4, sinks: 0, normalize: 0 });
    const context = m.config.context;
    const rows = kv.perplexity(m, text(context + 20), undefined, { maxWindows: 1 });
    assert.equal(rows.length, 1);
    assert.equal(rows[0].predictions, context - 1);
    assert.equal(kv.perplexity(m, text(context + 20))[0].predictions, context + 20 - 2);  // two windows
  });

  test('scissorhands at budget 16 throws: recentWindow 32 must be smaller than the budget', () => {
    const m = setup();
    const t = text(60);
    const check = (e) => {
      assert.ok(e instanceof kv.ParameterError, `${e.name}: ${e.message}`);
      assert.match(e.message, /^Scissorhands: recentWindow \(32\) must be smaller than budget \(16\)/);
      return true;
    };
    assert.throws(() => kv.perplexity(m, t, [['scissorhands', 16]]), check);
    assert.throws(() => kv.compareModel(m, t, { policies: ['scissorhands'], budgets: [16, 64] }), check);
  });

  test('compareModel runs a named key-aware policy; "all" is the seven', () => {
    const m = setup();
    const rows = kv.compareModel(m, text(120), { policies: ['knorm', 'h2o'], budgets: [48] });
    const knorm = rows.find((r) => r.policy === 'knorm');
    assert.ok(knorm.retainedAttentionMass > 0 && knorm.retainedAttentionMass < 1);
    assert.ok(knorm.evictionCalls > 0);
    const every = kv.compareModel(m, text(120), { policies: 'all', budgets: [48] });
    assert.equal(every.length, 1 + 7);
    assert.ok(!every.some((r) => r.policy === 'knorm' || r.policy === 'expected-attention'));
  });

  test('compareModel: the full cache first, then ranked rows with the proxies', () => {
    const m = setup();
    const n = 120;
    const rows = kv.compareModel(m, text(n), { policies: 'sliding-window,h2o', budgets: [64, 128], overrides: { recentWindow: 8 } });
    assert.equal(rows.length, 1 + 2 * 2);
    const [full, ...rest] = rows;
    for (const key of ['rank', 'policy', 'budget', 'retainedAttentionMass', 'heavyHitterRecall', 'evictionCalls']) {
      assert.equal(full[key], null, key);
    }
    assert.deepEqual(Object.keys(full), ['rank', 'policy', 'budget', 'params', 'perplexity', 'bitsPerByte',
      'extraBitsPerByte', 'extraLow', 'extraHigh', 'predictions', 'predictedBytes', 'tokenizer', 'evicted', 'retainedAttentionMass', 'heavyHitterRecall', 'evictionCalls', 'kvPrecision', 'kvResidual', 'bytesPerPosition', 'modelBytesPerPosition', 'peakCacheBytes', 'seconds']);
    for (const r of rest) {
      assert.ok(r.rank >= 1 && r.rank <= 2);
      assert.ok(r.retainedAttentionMass > 0 && r.retainedAttentionMass <= 1);
      assert.ok(r.heavyHitterRecall >= 0 && r.heavyHitterRecall <= 1);
      assert.ok(Number.isInteger(r.evictionCalls));
      if (r.policy === 'h2o') assert.equal(r.params.recentWindow, 8);
      // Budget 128 >= the text: nothing evicted, the full cache's perplexity.
      if (r.budget === 128) {
        assert.equal(r.evicted, 0);
        assert.equal(r.perplexity, full.perplexity);
      } else {
        assert.equal(r.evicted, HEADS * (n - 1 - 64), r.policy);  // one position per head per step from step 64
      }
    }
    // Each policy's rows by ascending budget.
    for (const name of ['sliding-window', 'h2o']) {
      const own = rest.filter((r) => r.policy === name);
      assert.deepEqual(own.map((r) => r.budget), [64, 128]);
      assert.ok(own[1].retainedAttentionMass >= own[0].retainedAttentionMass);  // holding everything keeps the most
    }
  });

  test('recordAttention: [16, N, N], rows positive up to t, zero beyond, each summing to < 1', () => {
    const m = setup();
    const n = 48;
    const { shape, data } = kv.recordAttention(m, text(200), n);
    assert.deepEqual(shape, [HEADS, n, n]);
    assert.ok(data instanceof Float32Array);
    assert.equal(data.length, HEADS * n * n);
    for (let h = 0; h < HEADS; h++) {
      for (let t = 0; t < n; t++) {
        const row = data.subarray((h * n + t) * n, (h * n + t + 1) * n);
        let sum = 0;
        for (let j = 0; j < n; j++) {
          if (j < t) {
            assert.ok(row[j] > 0, `head ${h} row ${t} col ${j}: ${row[j]}`);
            sum += row[j];
          } else {
            assert.equal(row[j], 0, `head ${h} row ${t} col ${j}`);
          }
        }
        // The weight on itself is left out: what remains is below 1.
        if (t > 0) assert.ok(sum < 1, `head ${h} row ${t} sums to ${sum}`);
      }
    }
    // tokens omitted: as many as the text (up to the context) holds.
    assert.deepEqual(kv.recordAttention(m, text(30)).shape, [HEADS, 30, 30]);
  });

  test('persistence over recorded attention', () => {
    const m = setup();
    const attention = kv.recordAttention(m, text(64), 64);
    const rows = kv.persistence(attention, [1, 4, 16]);
    assert.deepEqual(rows.map((r) => r.lag), [1, 4, 16]);
    for (const r of rows) {
      assert.deepEqual(Object.keys(r), ['lag', 'important', 'persisted', 'share', 'baseRate']);
      assert.ok(r.persisted <= r.important && r.important > 0);
      assert.ok(r.share >= 0 && r.share <= 1 && r.baseRate > 0 && r.baseRate < 1);
    }
    // One head alone, as [N, N].
    const one = { shape: [64, 64], data: attention.data.subarray(0, 64 * 64) };
    assert.equal(kv.persistence(one, [1]).length, 1);
    assert.throws(() => kv.persistence(attention, [64]), kv.ParameterError);
    assert.throws(() => kv.persistence({ shape: [2, 3], data: new Float32Array(6) }, [1]), RangeError);
    assert.throws(() => kv.persistence({ shape: [4, 4], data: new Float32Array(15) }, [1]), RangeError);
    assert.throws(() => kv.persistence({ shape: [4, 4], data: new Float64Array(16) }, [1]), TypeError);
  });

  test('Decoder: logits match the reference within 1e-4', () => {
    const m = setup();
    const prompt = fs.readFileSync(path.join(modelDir, 'reference-prompt.txt'));
    const reference = readNpy(path.join(modelDir, 'reference.npy'));
    assert.deepEqual(reference.shape, [prompt.length, 256]);
    const d = new kv.Decoder(m);
    assert.equal(d.capacity, m.config.context);
    assert.equal(d.headCount, HEADS);
    let worst = 0;
    let first;
    for (let i = 0; i < prompt.length; i++) {
      const logits = d.step(prompt[i]);
      assert.ok(logits instanceof Float32Array && logits.length === 256);
      if (i === 0) first = { array: logits, copy: Float32Array.from(logits) };
      for (let j = 0; j < 256; j++) worst = Math.max(worst, Math.abs(logits[j] - reference.data[i * 256 + j]));
    }
    // Each result is a copy: the first is unchanged by the later steps.
    assert.deepEqual(first.array, first.copy);
    assert.ok(worst <= 1e-4, `largest |C++ - reference| logit difference ${worst}`);
    assert.equal(d.position, prompt.length);
    assert.equal(d.evicted, 0);
  });

  test('Decoder: policies evict from the real cache; a driven policy is not stepped by hand', () => {
    const m = setup();
    const d = new kv.Decoder(m, 64);
    assert.equal(d.capacity, 64);
    const policies = [];
    for (let h = 0; h < d.headCount; h++) {
      const p = new kv.SlidingWindow({ budget: 8 });
      d.setPolicy(h, p);
      policies.push(p);
    }
    assert.equal(d.policy(3), policies[3]);
    const n = 20;
    for (const b of text(n)) d.step(b);
    assert.equal(d.evicted, HEADS * (n - 8));  // n tokens fed, one eviction per head per step from step 8
    assert.deepEqual(d.held(0), [12, 13, 14, 15, 16, 17, 18, 19]);
    assert.deepEqual(d.attended(5), [11, 12, 13, 14, 15, 16, 17, 18, 19]);  // the 8 held before the step, then the new token
    const w = d.attention(5);
    assert.ok(w instanceof Float32Array && w.length === 9);
    assert.ok(Math.abs(w.reduce((a, b) => a + b, 0) - 1) < 1e-5);
    assert.throws(() => policies[0].evict(4), kv.ContractError);
    assert.throws(() => d.setPolicy(1, policies[0]), kv.ContractError);  // after the first token, and in use
    assert.throws(() => d.step(256), RangeError);
    assert.throws(() => d.held(16), RangeError);
    d.reset();
    assert.equal(d.position, 0);
    assert.equal(d.policy(0), null);
    assert.deepEqual(policies[0].evict(4), [12, 13, 14, 15]);  // released: usable by hand again
    const other = new kv.Decoder(m);
    const shared = new kv.TOVA({ budget: 8 });
    other.setPolicy(0, shared);
    assert.throws(() => other.setPolicy(1, shared), /already serves head 0/);
    assert.throws(() => d.setPolicy(0, shared), /of another Decoder/);
    assert.throws(() => other.setPolicy(2, new kv.TOVA(), -1), RangeError);
    assert.throws(() => other.setPolicy(2, 'tova'), TypeError);
  });

  test('prefill: a budget holding the prefill is the full cache; a window compresses each cache once', () => {
    const m = setup();
    const n = 300, prefill = 200;
    const rows = kv.perplexity(m, text(n), [['snapkv', prefill], ['sliding-window', 64]], { prefill, prefillWindow: 8 });
    const [full, kept, window] = rows;
    // Only the bytes after the prefill are scored, the full cache's too.
    assert.equal(full.predictions, n - 1 - prefill);
    for (const r of rows) {
      assert.equal(r.prefill, prefill);
      assert.deepEqual(Object.keys(r).slice(3, 5), ['prefill', 'perplexity']);
    }
    assert.equal(kept.evicted, 0);
    assert.equal(kept.perplexity, full.perplexity);
    // One compression per cache, from the prefill down to 64 positions.
    assert.equal(window.evicted, HEADS * (prefill - 64));
    assert.notEqual(window.perplexity, full.perplexity);
    // compareModel with a prefill: ranked, no proxies (they replay decode-time eviction).
    const ranked = kv.compareModel(m, text(n), { policies: ['sliding-window'], budgets: [64], prefill, prefillWindow: 8 });
    assert.equal(ranked[0].rank, null);
    assert.equal(ranked[1].rank, 1);
    assert.equal(ranked[1].perplexity, window.perplexity);
    assert.ok(!('retainedAttentionMass' in ranked[1]));
    // Bad prefill options: one clear error each.
    assert.throws(() => kv.perplexity(m, text(n), [], { prefill: -1 }), { name: 'RangeError', message: /options\.prefill \(-1\) must be at least 0/ });
    assert.throws(() => kv.perplexity(m, text(n), [], { prefill: 100, prefillWindow: 0 }), { name: 'RangeError', message: /options\.prefillWindow \(0\) must be at least 1/ });
    assert.throws(() => kv.perplexity(m, text(n), [['tova', 64]], { prefill: 100, blockSize: 16 }), { name: 'ParameterError', message: /does not combine with the paged options/ });
  });

  test('bad arguments: TypeError / RangeError with the binding\'s message', () => {
    const m = setup();
    assert.throws(() => kv.perplexity(m, 'some text'), { name: 'TypeError', message: /not a string: pass Buffer.from\(s\)/ });
    assert.throws(() => kv.perplexity({}, text(10)), { name: 'TypeError', message: 'perplexity: model must be a kvevict.Model, got an object' });
    assert.throws(() => kv.perplexity(m, new Uint16Array(10)), TypeError);
    assert.throws(() => kv.perplexity(m, text(10), 'h2o'), TypeError);
    assert.throws(() => kv.perplexity(m, text(10), [42]), TypeError);
    assert.throws(() => kv.perplexity(m, text(10), [['h2o', -1]]), RangeError);
    assert.throws(() => kv.perplexity(m, text(10), [['nope', 8]]), kv.ParameterError);
    assert.throws(() => kv.perplexity(m, text(10), [], { maxWindows: -1 }), RangeError);
    assert.throws(() => kv.perplexity(m, text(1)), kv.KvevictError);  // nothing to predict
    assert.throws(() => kv.recordAttention(m, text(10), 0.5), RangeError);
    assert.throws(() => kv.compareModel(m, text(10), { budgets: '64' }), TypeError);
  });
});
