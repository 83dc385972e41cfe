'use strict';
// The binding at parity with the tool: tasks(), benchModel(), run()/compare()
// replaying recorded keys, values and queries, sweepModel({skipRefused}),
// attentionFromKeys() / ropeNeox() and Batch.stepAll(). Expected values come
// from outside the binding: the tool's JSON for the same arguments (the
// kvevict executable of the addon's build folder; those checks skip, with a
// message, when it is not there), or values worked by hand.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { kv, repoRoot, toolFile, noTool, toolJson: tool, toolRows, withoutSeconds, readNpy } = require('./support');

const kvm = path.join(repoRoot, 'model', 'kvevict-tiny.kvm');
const sampleFile = path.join(repoRoot, 'model', 'heldout-sample.txt');

let model;
let sample;
function setup() {
  if (model === undefined) {
    model = new kv.Model(kvm);
    sample = fs.readFileSync(sampleFile);
  }
}


// ---- ropeNeox, attentionFromKeys -------------------------------------------------

test('ropeNeox is the documented rotation (worked by hand)', () => {
  const x = Float32Array.from([1, 2, 3, 4]);
  assert.deepEqual(kv.ropeNeox(x, 0, 10000), x);
  const one = kv.ropeNeox([1, 0], 1);
  assert.ok(one instanceof Float32Array && one.length === 2);
  assert.ok(Math.abs(one[0] - Math.cos(1)) < 1e-7 && Math.abs(one[1] - Math.sin(1)) < 1e-7);
  // headDim 4, base 100, pos 3: pairs (0, 2) at 3 rad and (1, 3) at 0.3 rad.
  const got = kv.ropeNeox(x, 3, 100);
  const want = [Math.cos(3) - 3 * Math.sin(3), 2 * Math.cos(0.3) - 4 * Math.sin(0.3),
    Math.sin(3) + 3 * Math.cos(3), 2 * Math.sin(0.3) + 4 * Math.cos(0.3)];
  want.forEach((w, i) => assert.ok(Math.abs(got[i] - w) < 1e-6, `${i}: ${got[i]} vs ${w}`));
  assert.deepEqual(Array.from(x), [1, 2, 3, 4]);  // the input is not changed
});

test('attentionFromKeys is the softmax of the scaled dot products, averaged over the heads', () => {
  const queries = Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0]);  // 2 heads of 4
  const keys = Float32Array.from([2, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0]);  // 3 keys
  const softmax = (xs) => { const e = xs.map(Math.exp); const s = e.reduce((a, b) => a + b); return e.map((v) => v / s); };
  const h0 = softmax([2 * 0.5, 0, 0]);
  const h1 = softmax([0, 0, 4 * 0.5]);
  const got = kv.attentionFromKeys(queries, keys, 4);  // scale 1/sqrt(4)
  assert.ok(got instanceof Float32Array && got.length === 3);
  [0, 1, 2].forEach((j) => assert.ok(Math.abs(got[j] - (h0[j] + h1[j]) / 2) < 1e-6));
  const scaled = kv.attentionFromKeys([1, 0, 0, 0], Array.from(keys), 4, 1);
  const s = softmax([2, 0, 0]);
  [0, 1, 2].forEach((j) => assert.ok(Math.abs(scaled[j] - s[j]) < 1e-6));
});

test('the signal functions name the bad argument', () => {
  assert.throws(() => kv.ropeNeox([1, 2, 3], 1), { name: 'RangeError', message: /headDim must be even/ });
  assert.throws(() => kv.ropeNeox([1, 2], 1.5), { name: 'RangeError', message: /ropeNeox: pos must be an integer/ });
  assert.throws(() => kv.ropeNeox([1, 2], 1, 0), { name: 'RangeError', message: /ropeNeox: base must be a positive/ });
  assert.throws(() => kv.ropeNeox(null, 1), { name: 'TypeError', message: /ropeNeox: x must be a Float32Array/ });
  assert.throws(() => kv.attentionFromKeys([1, 2, 3], [1, 2], 2), { name: 'RangeError', message: /queries has 3 floats/ });
  assert.throws(() => kv.attentionFromKeys([1, 2], [1, 2, 3], 2), { name: 'RangeError', message: /keys has 3 floats/ });
  assert.throws(() => kv.attentionFromKeys([1, 2], [1, 2], 0), { name: 'RangeError', message: /headDim \(0\)/ });
  assert.throws(() => kv.attentionFromKeys([1, 2], [1, 2], 2, 'x'), { name: 'TypeError', message: /scale must be a number/ });
  assert.throws(() => kv.attentionFromKeys(['a', 2], [1, 2], 2), { name: 'TypeError', message: /queries\[0\] must be a number/ });
});

// ---- tasks ---------------------------------------------------------------------

test('tasks() equals the tool\'s JSON', { skip: noTool }, () => {
  setup();
  const got = kv.tasks(model, sample, { lengths: [256], depths: 1, samples: 2, policies: 'h2o,knorm', budgets: [64],
    moments: ['decode', 'prefill'] });
  assert.deepEqual(got.map((r) => [r.policy, r.moment]),
    [['full', 'full'], ['h2o', 'decode'], ['h2o', 'prefill'], ['knorm', 'decode'], ['knorm', 'prefill']]);
  const want = toolRows('tasks', '--model', kvm, '--text', sampleFile, '--lengths', 256, '--depths', 1, '--samples', 2,
    '--policies', 'h2o,knorm', '--budgets', 64, '--moments', 'decode,prefill');
  assert.deepEqual(got, want);
  assert.deepEqual(got.map(Object.keys), want.map(Object.keys));
  // The one-object form.
  assert.deepEqual(kv.tasks({ model, text: sample, lengths: [256], depths: 1, samples: 2, policies: ['h2o', 'knorm'],
    budgets: [64], moments: 'decode,prefill' }), got);
});

test('tasks() with the full cache only, every task', () => {
  setup();
  const got = kv.tasks(model, sample, { tasks: 'all', lengths: [512], depths: 1, samples: 1, policies: null });
  assert.deepEqual(got.map((r) => r.task), ['passkey', 'multikey', 'multivalue', 'vartrack', 'copy']);
  assert.ok(got.every((r) => r.policy === 'full' && r.samples === 1 && r.length === 512));
});

test('tasks() names the bad argument', () => {
  setup();
  const small = { lengths: [256], depths: 1, samples: 1 };
  assert.throws(() => kv.tasks(model, sample, { ...small, tasks: 'nope' }), { name: 'InputError', message: /unknown task 'nope'/ });
  assert.throws(() => kv.tasks(model, sample, { lengths: [256], depths: 0 }), { name: 'RangeError', message: /options\.depths \(0\) must be in 1 \.\.\. 100/ });
  assert.throws(() => kv.tasks(model, sample, { lengths: [0] }), { name: 'RangeError', message: /options\.lengths: 0 is not a length/ });
  assert.throws(() => kv.tasks(model, sample, { ...small, moments: 'later' }), { name: 'InputError', message: /unknown moment 'later'/ });
  assert.throws(() => kv.tasks(model, sample, { ...small, policies: 'nope' }), { name: 'ParameterError', message: /unknown policy/ });
  assert.throws(() => kv.tasks(model, sample, { ...small, sample: 3 }), { name: 'TypeError', message: /tasks: unknown option 'sample'/ });
  assert.throws(() => kv.tasks(model, 'text', small), { name: 'TypeError', message: /text must be a Buffer/ });
  assert.throws(() => kv.tasks({ text: sample }), { name: 'TypeError', message: /tasks: model must be a kvevict.Model/ });
});

// ---- new Model(path, {context, matmul}) -------------------------------------------

// A small random Llama Q8_0 GGUF written by the tool, and the tool's logits
// after `tokens` (an .npy) with the given model flags.
let q8File;
function q8() {
  if (q8File === undefined) {
    q8File = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kvevict-node-q8-')), 'q8.gguf');
    execFileSync(toolFile, ['random-model', '--type', 'q8_0', '--out', q8File, '--width', '64', '--heads', '4',
      '--kv-heads', '2', '--ff', '128', '--context', '256'], { cwd: repoRoot, stdio: 'pipe' });
  }
  return q8File;
}
function toolLogits(tokens, ...flags) {
  const out = path.join(path.dirname(q8()), `logits-${flags.join('_') || 'exact'}.npy`);
  execFileSync(toolFile, ['logits', '--model', q8(), '--tokens', tokens.join(','), '--out', out, '--force',
    '--progress', 'off', ...flags], { cwd: repoRoot, stdio: 'pipe' });
  return readNpy(out).data;
}

test('new Model() takes the tool\'s --context and --matmul: the same logits to the bit', { skip: noTool }, () => {
  const exact = new kv.Model(q8());
  const int8 = new kv.Model(q8(), { context: 128, matmul: 'int8' });
  assert.deepEqual([exact.matmul, int8.matmul], ['exact', 'int8']);
  assert.deepEqual([exact.config.context, int8.config.context], [256, 128]);
  const tokens = [1, 5, 9, 40, 3, 77, 2, 11];
  const steps = (m) => {
    const d = new kv.Decoder(m);
    const rows = tokens.map((t) => d.step(t));
    const out = new Float32Array(rows.length * rows[0].length);
    rows.forEach((r, i) => out.set(r, i * r.length));
    return out;
  };
  const wantInt8 = toolLogits(tokens, '--context', '128', '--matmul', 'int8');
  const wantExact = toolLogits(tokens);
  assert.deepEqual(steps(int8), wantInt8);
  assert.deepEqual(steps(exact), wantExact);
  // The modes compute different products (rounded vectors), near each other.
  assert.notDeepEqual(wantInt8, wantExact);
  assert.ok(wantInt8.every((v, i) => Math.abs(v - wantExact[i]) < 0.5));
  assert.throws(() => new kv.Decoder(int8, 129), /capacity/);
});

test('new Model() names bad options', { skip: noTool }, () => {
  assert.throws(() => new kv.Model(q8(), { matmul: 'int4' }),
    { name: 'ParameterError', message: /Model: options\.matmul: matmul mode 'int4' is not exact or int8/ });
  assert.throws(() => new kv.Model(q8(), { matmul: 8 }), { name: 'TypeError', message: /options\.matmul must be 'exact' or 'int8'/ });
  assert.throws(() => new kv.Model(q8(), { context: -1 }), { name: 'RangeError', message: /options\.context \(-1\) must be at least 0/ });
  assert.throws(() => new kv.Model(q8(), { context: 257 }), { name: 'InputError', message: /q8\.gguf/ });
  assert.throws(() => new kv.Model(q8(), { matmull: 'int8' }), { name: 'TypeError', message: /Model: unknown option 'matmull'/ });
  assert.throws(() => new kv.Model(kvm, { matmul: 'int8' }),
    { name: 'ParameterError', message: /matmul mode int8: .*kvevict-tiny\.kvm .*\(only exact applies\)/ });
});

// ---- benchModel ---------------------------------------------------------------------

test('benchModel() is shaped like the tool\'s JSON', { skip: noTool }, () => {
  setup();
  const got = kv.benchModel(model, sample, { tokens: 80, rounds: 1, policies: ['h2o', 'knorm'], budgets: [48, 64] });
  assert.deepEqual(got.map((r) => [r.policy, r.budget, r.tokens]),
    [['full cache', 0, 80], ['h2o', 48, 80], ['h2o', 64, 80], ['knorm', 48, 80], ['knorm', 64, 80]]);
  for (const r of got) {
    assert.equal(r.tokensPerSecondSpread.median, r.tokensPerSecond);
    assert.ok(r.tokensPerSecondSpread.min <= r.tokensPerSecond && r.tokensPerSecond <= r.tokensPerSecondSpread.max);
    assert.ok(Math.abs(Object.values(r.shares).reduce((a, b) => a + b) - 1) < 1e-9);
  }
  const want = toolRows('bench', '--model', kvm, '--text', sampleFile, '--tokens', 80, '--rounds', 1,
    '--policies', 'h2o,knorm', '--budgets', '48,64');
  // Timings differ run to run; every key, in its order, and the run columns are the tool's.
  const shape = (rows) => rows.map((r) => Object.entries(r).map(([k, v]) =>
    [k, typeof v === 'object' ? Object.keys(v) : ['policy', 'budget', 'tokens'].includes(k) ? v : null]));
  assert.deepEqual(shape(got), shape(want));
});

test('benchModel() reads the tool\'s default text and names bad arguments', () => {
  setup();
  const cwd = process.cwd();
  process.chdir(repoRoot);
  try {
    assert.deepEqual(kv.benchModel({ model, tokens: 16, rounds: 1, policies: 'h2o' }).map((r) => r.tokens), [16, 16]);
  } finally {
    process.chdir(cwd);
  }
  assert.throws(() => kv.benchModel(model, sample, { rounds: 0 }), { name: 'RangeError', message: /options\.rounds \(0\) must be in 1 \.\.\. 1000/ });
  assert.throws(() => kv.benchModel(model, sample, { tokens: 0 }), { name: 'RangeError', message: /options\.tokens \(0\) must be at least 1/ });
  assert.throws(() => kv.benchModel(model, sample, { budgets: 128 }), { name: 'TypeError', message: /options\.budgets must be an array/ });
  assert.throws(() => kv.benchModel(model, sample, { round: 1 }), { name: 'TypeError', message: /unknown option 'round'/ });
  assert.throws(() => kv.benchModel(model, sample, { tokens: 8, rounds: 1, prefillChunk: 0 }),
    { name: 'RangeError', message: /options\.prefillChunk \(0\) must be in 1 \.\.\. 4096/ });
  assert.throws(() => kv.benchModel(model, sample, { tokens: 8, rounds: 1, promptLogits: 'first' }),
    { name: 'ParameterError', message: /options\.promptLogits: prompt logits 'first' are not all or last/ });
});

test('benchModel() takes the prompt\'s chunk and logits as the tool does', { skip: noTool }, () => {
  setup();
  const got = kv.benchModel(model, sample, { tokens: 8, rounds: 1, policies: 'h2o', budgets: [48], prompt: 40,
    prefillChunk: 16, promptLogits: 'last', threads: [1] });
  const want = toolRows('bench', '--model', kvm, '--text', sampleFile, '--tokens', 8, '--rounds', 1, '--policies', 'h2o',
    '--budgets', 48, '--prompt', 40, '--prefill-chunk', 16, '--prompt-logits', 'last', '--threads', 1);
  const keep = (rows) => rows.map((r) => [r.mode, r.policy, r.budget, r.threads, r.prompt, r.tokens]);
  assert.deepEqual(keep(got), keep(want));
  assert.deepEqual(keep(got), [['prefill', 'full cache', 0, 1, 40, 40], ['decode', 'full cache', 0, 1, 40, 8],
    ['decode', 'h2o', 48, 1, 40, 8]]);
});

// ---- replay from recorded keys, values and queries ------------------------------------

let recorded;
let recordDir;
// The recorded files serve every test below; removed once the file's tests end.
test.after(() => { if (recordDir !== undefined) fs.rmSync(recordDir, { recursive: true, force: true }); });
function record() {
  if (recorded === undefined) {
    recordDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvevict-node-record-'));
    recorded = Object.fromEntries(['attention', 'keys', 'values', 'queries'].map((k) => [k, path.join(recordDir, `${k}.npy`)]));
    execFileSync(toolFile, ['record', '--model', kvm, '--text', sampleFile, '--tokens', '96', '--out', recorded.attention,
      '--keys', recorded.keys, '--values', recorded.values, '--queries', recorded.queries], { stdio: 'ignore' });
  }
  return recorded;
}

test('run() replays recorded keys as the tool does', { skip: noTool }, () => {
  const f = record();
  const got = kv.run({ policy: 'knorm', budget: 32, trace: f.attention, keys: f.keys });
  assert.equal(got.params.headDim, 32);
  const [want] = toolRows('run', '--policy', 'knorm', '--budget', 32, '--trace', f.attention, '--keys', f.keys);
  assert.deepEqual(Object.keys(got), Object.keys(want));
  assert.deepEqual(withoutSeconds([got]), withoutSeconds([want]));
});

test('compare() replays every policy the files feed', { skip: noTool }, () => {
  const f = record();
  const got = kv.compare({ policies: 'all', budgets: [64, 80], trace: f.attention, keys: f.keys, values: f.values,
    queries: f.queries });
  assert.equal(new Set(got.rows.map((r) => r.policy)).size, kv.policies().length);
  const want = tool('compare', '--policies', 'all', '--budgets', '64,80', '--trace', f.attention, '--keys', f.keys,
    '--values', f.values, '--queries', f.queries);
  // The same envelope: {command, model: null, rows, trace}.
  assert.deepEqual(Object.keys(got), Object.keys(want));
  assert.deepEqual([got.command, got.model, got.trace], ['compare', null, want.trace]);
  assert.deepEqual(withoutSeconds(got.rows), withoutSeconds(want.rows));
  const nine = kv.compare({ budgets: [64], trace: f.attention, keys: f.keys, policies: 'all' });
  assert.equal(nine.rows.length, 9);
  assert.throws(() => kv.run({ policy: 'knorm', budget: 32, trace: f.attention }),
    { name: 'ParameterError', message: /run: knorm reads the new token's key .* give keys: 'FILE\.npy'/ });
  assert.throws(() => kv.compare({ policies: ['expected-attention'], budgets: [32], trace: f.attention, keys: f.keys }),
    { name: 'ParameterError', message: /compare: expected-attention reads the new token's value .* give values:/ });
  assert.throws(() => kv.run({ policy: 'knorm', budget: 32, keys: f.keys }),
    { name: 'ParameterError', message: /go with the attention recorded beside them/ });
  assert.throws(() => kv.run({ policy: 'knorm', budget: 32, trace: f.attention, keys: 3 }),
    { name: 'TypeError', message: /run: options\.keys must be a string/ });
});

// ---- sweepModel({skipRefused}) -----------------------------------------------------

test('sweepModel({skipRefused}) leaves out what the tool leaves out', { skip: noTool }, () => {
  setup();
  const got = kv.sweepModel(model, sample, { policy: 'h2o', param: 'recentWindow', values: [8, 96], budgets: [64, 128],
    maxWindows: 1, skipRefused: true });
  assert.equal(got.length, 4);
  assert.equal(got.skipped.length, 1);
  assert.match(got.skipped[0], /^recentWindow=96 at budget 64: /);
  assert.ok(!Object.keys(got).includes('skipped'));  // not enumerable: the rows stay a plain array
  const out = execFileSync(toolFile, ['sweep', '--model', kvm, '--text', sampleFile, '--policy', 'h2o', '--param',
    'recentWindow=8,96', '--budgets', '64,128', '--max-windows', '1', '--skip-refused', '--format', 'json'],
  { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  assert.deepEqual(withoutSeconds(got), withoutSeconds(JSON.parse(out).rows));
  assert.deepEqual(kv.sweepModel(model, sample, { policy: 'h2o', param: 'recentWindow', values: [8], budgets: [64],
    maxWindows: 1 }).skipped, []);
  assert.throws(() => kv.sweepModel(model, sample, { policy: 'h2o', param: 'recentWindow', values: [96], budgets: [64],
    maxWindows: 1 }), { name: 'ParameterError', message: /recentWindow/ });
  assert.throws(() => kv.sweepModel(model, sample, { policy: 'h2o', param: 'recentWindow', values: [8], budgets: [64],
    skipRefused: 1 }), { name: 'TypeError', message: /options\.skipRefused must be a boolean/ });
});

test('sweepModel() skipped lines are the tool\'s stderr lines', { skip: noTool }, () => {
  setup();
  const got = kv.sweepModel(model, sample, { policy: 'h2o', param: 'recentWindow', values: [96], budgets: [64, 128],
    maxWindows: 1, skipRefused: true });
  const { spawnSync } = require('node:child_process');
  const run = spawnSync(toolFile, ['sweep', '--model', kvm, '--text', sampleFile, '--policy', 'h2o', '--param',
    'recentWindow=96', '--budgets', '64,128', '--max-windows', '1', '--skip-refused', '--format', 'json'],
  { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(run.status, 0);
  const lines = run.stderr.split('\n').filter((l) => l.startsWith('sweep: skipped '));
  assert.deepEqual(got.skipped.map((l) => `sweep: skipped ${l}`), lines);
});

// ---- Batch.stepAll ----------------------------------------------------------------

function makeBatch() {
  const batch = new kv.Batch(model, { poolBlocks: 4096, blockSize: 16 });
  const ids = [batch.join(), batch.join('h2o', 48), batch.join('scissorhands', 64, null, 'block'), batch.join('knorm', 40)];
  return { batch, ids };
}
const bits = (f) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));

test('Batch.stepAll equals step() per sequence, bit for bit', () => {
  setup();
  const one = makeBatch();
  const many = makeBatch();
  for (let t = 0; t < 100; t++) {
    const tokens = one.ids.map((_, k) => sample[(t + 37 * k) % sample.length]);
    const rows = many.batch.stepAll(many.ids, tokens);
    assert.equal(rows.length, one.ids.length);
    rows.forEach((row, k) => {
      assert.ok(row instanceof Float32Array && row.length === 256);
      assert.deepEqual(bits(row), bits(one.batch.step(one.ids[k], tokens[k])));
    });
  }
  const rows = many.batch.stepAll([many.ids[2], many.ids[0]], [65, 66]);
  assert.deepEqual(bits(rows[0]), bits(one.batch.step(one.ids[2], 65)));
  assert.deepEqual(bits(rows[1]), bits(one.batch.step(one.ids[0], 66)));
  for (const id of one.ids) assert.deepEqual(many.batch.held(id, 5), one.batch.held(id, 5));
  assert.deepEqual(many.batch.stepAll([], []), []);
});

test('Batch.stepAll checks every id and token before any step', () => {
  setup();
  const { batch, ids } = makeBatch();
  const reference = makeBatch();
  assert.throws(() => batch.stepAll(ids.slice(0, 2), [65]), { name: 'RangeError', message: /ids has 2 items and tokens 1/ });
  assert.throws(() => batch.stepAll(ids.slice(0, 2), [65, 256]), { name: 'RangeError', message: /tokens\[1\] \(256\) must be in 0 \.\.\. 255/ });
  assert.throws(() => batch.stepAll([0, 0], [65, 66]), { name: 'RangeError', message: /sequence 0 is listed twice/ });
  assert.throws(() => batch.stepAll([-1], [65]), { name: 'RangeError', message: /ids\[0\] \(-1\) must be at least 0/ });
  assert.throws(() => batch.stepAll([ids[0], 99], [65, 66]), /99/);
  assert.throws(() => batch.stepAll('ab', [65, 66]), { name: 'TypeError', message: /Batch\.stepAll: ids must be an array/ });
  assert.throws(() => batch.stepAll([0], [1.5]), { name: 'RangeError', message: /Batch\.stepAll: tokens\[0\] must be an integer/ });
  // Nothing stepped: the next tick equals a fresh batch's first.
  batch.stepAll(ids, [65, 65, 65, 65]).forEach((row, k) => assert.deepEqual(bits(row), bits(reference.batch.step(ids[k], 65))));
});

test('Batch.stepAll against one call a step (prints tokens/s; no assertion on time)', () => {
  setup();
  const ticks = 200;
  for (const how of ['step() per sequence', 'stepAll() per tick']) {
    const batch = new kv.Batch(model, { poolBlocks: 8192, blockSize: 16 });
    const ids = Array.from({ length: 8 }, () => batch.join('h2o', 64));
    const started = process.hrtime.bigint();
    for (let t = 0; t < ticks; t++) {
      if (how.startsWith('step()')) {
        for (const id of ids) batch.step(id, sample[t]);
      } else {
        batch.stepAll(ids, ids.map(() => sample[t]));
      }
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    console.log(`kvevict-node: ${how}: ${Math.round((ticks * ids.length) / seconds)} tokens/s (${ids.length} sequences x ${ticks} ticks)`);
  }
});
