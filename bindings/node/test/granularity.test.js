'use strict';
// Granularity (docs/paged.md, "Granularity"): which caches share a budget --
// each its own ('head'), a layer's KV heads ('layer') or every cache of the
// sequence ('sequence') -- through the granularity option of perplexity,
// compareModel, stream, tasks and serveBench. The expected values hold by
// construction: a position-only policy evicts the same positions in every
// cache, so one victim set for all changes nothing; at sequence granularity
// every cache holds the same positions, so the positions evicted are a whole
// number of caches' worth. Parity with the tool skips, with a message, when
// it is not beside the addon.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, repoRoot, noTool: toolMissing, toolRows: tool } = require('./support');

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
const sampleFile = path.join(modelDir, 'heldout-sample.txt');
const skip = fs.existsSync(kvm) && fs.existsSync(sampleFile) ? false
  : `the model folder ${modelDir} lacks kvevict-tiny.kvm or heldout-sample.txt (set KVEVICT_MODEL_DIR)`;
const noTool = skip || toolMissing;
const budget = 64;

let model;
let sample;
function setup() {
  if (model === undefined) {
    model = new kv.Model(kvm);
    sample = fs.readFileSync(sampleFile);
  }
}
const caches = () => model.config.layers * model.config.kvHeads;
// Rows without their wall-clock timings, which no two runs share.
const untimed = (rows) => rows.map(({ seconds, tokensPerSecond, ...rest }) => rest);

// ---- perplexity and compareModel ------------------------------------------------------

test('a position-only policy is the same at head and sequence granularity', { skip }, () => {
  setup();
  const head = kv.perplexity(model, sample, [['streaming-llm', budget]], { maxWindows: 1, granularity: 'head' });
  const seq = kv.perplexity(model, sample, [['streaming-llm', budget]], { maxWindows: 1, granularity: 'sequence' });
  assert.equal(seq[1].bitsPerByte, head[1].bitsPerByte);
  assert.ok(head[1].evicted > 0);
  assert.equal(seq[1].evicted, head[1].evicted);
  assert.equal(seq[1].granularity, 'sequence');
  // head is each cache its own, as without the option: no field, no paged store
  assert.ok(!('granularity' in head[1]) && !('peakPositions' in head[1]));
  // the full cache shares nothing
  assert.equal(seq[0].policy, null);
  assert.ok(!('granularity' in seq[0]));
});

test('at sequence granularity every cache evicts the same positions', { skip }, () => {
  setup();
  const n = caches();
  const rows = kv.perplexity(model, sample, [['h2o', budget], ['tova', budget]], { maxWindows: 1, granularity: 'sequence' });
  for (const row of rows.slice(1)) {
    assert.equal(row.granularity, 'sequence');
    assert.ok(row.evicted > 0 && row.evicted % n === 0, `${row.policy}: evicted ${row.evicted}, ${n} caches`);
  }
  const ranked = kv.compareModel(model, sample, { policies: ['h2o'], budgets: [budget], maxWindows: 1, granularity: 'sequence' });
  assert.deepEqual(ranked.map((r) => r.granularity), [undefined, 'sequence']);
  assert.equal(ranked[1].evicted % n, 0);
  // layerBudget true is granularity 'layer': both spellings, and both together, give the same row
  const byName = kv.perplexity(model, sample, [['h2o', budget]], { maxWindows: 1, granularity: 'layer' })[1];
  const byFlag = kv.perplexity(model, sample, [['h2o', budget]], { maxWindows: 1, layerBudget: true })[1];
  const both = kv.perplexity(model, sample, [['h2o', budget]], { maxWindows: 1, layerBudget: true, granularity: 'layer' })[1];
  assert.deepEqual([byName.granularity, byFlag.granularity, both.granularity], ['layer', 'layer', 'layer']);
  assert.equal(byName.bitsPerByte, byFlag.bitsPerByte);
  assert.equal(both.bitsPerByte, byFlag.bitsPerByte);
});

test('perplexity at sequence granularity equals the tool', { skip: noTool }, () => {
  setup();
  const want = tool('perplexity', '--model', kvm, '--text', sampleFile, '--max-windows', 1, '--policy', 'h2o',
    '--budget', budget, '--granularity', 'sequence');
  const got = kv.perplexity(model, sample, [['h2o', budget]], { maxWindows: 1, granularity: 'sequence' });
  assert.deepEqual(untimed(got), untimed(want));
  assert.deepEqual(got.map((r) => Object.keys(r)), want.map((r) => Object.keys(r)));
});

test('bad granularities are clear errors', { skip }, () => {
  setup();
  const run = (options, policy = 'h2o') => kv.perplexity(model, sample, [[policy, budget]], { maxWindows: 1, ...options });
  assert.throws(() => run({ granularity: 'cells' }),
    { name: 'ParameterError', message: /options\.granularity: --granularity \(cells\) must be head, layer or sequence/ });
  assert.throws(() => run({ granularity: 2 }), { name: 'TypeError', message: /options\.granularity must be/ });
  assert.throws(() => run({ granularity: 'sequence', blockSize: 16 }),
    { name: 'ParameterError', message: /--granularity sequence and --block-size/ });
  // PyramidKV's budget differs by layer; at sequence every layer holds the same positions.
  assert.throws(() => run({ granularity: 'sequence' }, 'pyramidkv'), { name: 'ParameterError', message: /pyramidkv/ });
  // the older spelling must agree with the new one
  assert.throws(() => run({ layerBudget: true, granularity: 'sequence' }), { name: 'ParameterError', message: /disagree/ });
  assert.throws(() => run({ layerBudget: false, granularity: 'layer' }), { name: 'ParameterError', message: /disagree/ });
});

// ---- stream ---------------------------------------------------------------------------

test('stream: a position-only policy is the same at head and sequence granularity', { skip }, () => {
  setup();
  const options = { policies: 'streaming-llm', budgets: [budget], positions: 'original', tokens: 400, fullCache: false };
  const head = kv.stream(model, sample, options).rows;
  const seq = kv.stream(model, sample, { ...options, granularity: 'sequence' }).rows;
  assert.equal(head.length, 1);
  assert.equal(seq.length, 1);
  assert.equal(seq[0].bitsPerByte, head[0].bitsPerByte);
  assert.deepEqual(seq[0].segments, head[0].segments);
  assert.equal(seq[0].granularity, 'sequence');
  assert.ok(!('granularity' in head[0]));
  assert.equal(seq[0].evicted % caches(), 0);
});

test('stream refuses layer granularity and bad names', { skip }, () => {
  setup();
  const options = { policies: 'h2o', budgets: [budget], positions: 'original', tokens: 100, fullCache: false };
  assert.throws(() => kv.stream(model, sample, { ...options, granularity: 'layer' }),
    { name: 'ParameterError', message: /--granularity layer/ });
  assert.throws(() => kv.stream(model, sample, { ...options, granularity: 'cells' }),
    { name: 'ParameterError', message: /stream: options\.granularity: --granularity \(cells\)/ });
  // the block options are still no stream option
  assert.throws(() => kv.stream(model, sample, { ...options, blockSize: 16 }), { name: 'TypeError', message: /unknown option 'blockSize'/ });
});

// ---- tasks ----------------------------------------------------------------------------

test('tasks at sequence granularity', { skip }, () => {
  setup();
  const options = { lengths: [256], depths: 1, samples: 2, policies: 'h2o', budgets: [budget] };
  const [full, h2o] = kv.tasks(model, sample, { ...options, granularity: 'sequence' });
  assert.equal(full.policy, 'full');
  assert.ok(!('granularity' in full));
  assert.equal(h2o.granularity, 'sequence');
  assert.ok(h2o.evicted > 0 && h2o.evicted % caches() === 0, `evicted ${h2o.evicted}`);
  assert.ok(kv.tasks(model, sample, options).every((r) => !('granularity' in r)));
});

test('tasks refuse a shared budget at a prefill moment', { skip }, () => {
  setup();
  const options = { lengths: [256], depths: 1, samples: 1, policies: 'h2o', budgets: [budget] };
  assert.throws(() => kv.tasks(model, sample, { ...options, moments: 'decode,prefill', granularity: 'sequence' }),
    { name: 'ParameterError', message: /--granularity sequence applies to the decode moment/ });
  assert.throws(() => kv.tasks(model, sample, { ...options, granularity: 'all' }),
    { name: 'ParameterError', message: /tasks: options\.granularity: --granularity \(all\)/ });
});

// ---- serveBench -----------------------------------------------------------------------

test('serveBench at sequence granularity', { skip }, () => {
  setup();
  const options = { sequences: [2], policies: 'none,h2o', budget, modes: 'token', chunks: [0], sharedPrefix: 64, tokens: 128 };
  const rows = kv.serveBench(model, sample, { ...options, granularity: 'sequence' });
  assert.deepEqual(rows.map((r) => r.policy), [null, 'h2o']);
  // the full cache shares no budget; the policy's row says which caches did
  assert.ok(!('granularity' in rows[0]));
  assert.equal(rows[1].granularity, 'sequence');
  assert.ok(rows[1].evicted > 0 && rows[1].evicted % caches() === 0, `evicted ${rows[1].evicted}`);
  assert.ok(kv.serveBench(model, sample, options).every((r) => !('granularity' in r)));
});

test('serveBench at sequence granularity equals the tool', { skip: noTool }, () => {
  setup();
  const got = kv.serveBench(model, sample, { sequences: [2], policies: 'none,h2o', budget, modes: 'token',
    sharedPrefix: 64, tokens: 128, granularity: 'sequence' });
  const want = tool('serve-bench', '--model', kvm, '--text', sampleFile, '--sequences', 2, '--policy', 'none,h2o',
    '--budget', budget, '--modes', 'token', '--shared-prefix', 64, '--tokens', 128, '--granularity', 'sequence');
  assert.deepEqual(untimed(got), untimed(want));
});

test('serveBench refuses blocks and chunks at sequence granularity', { skip }, () => {
  setup();
  const options = { sequences: [2], policies: 'h2o', budget, sharedPrefix: 64, tokens: 128, granularity: 'sequence' };
  assert.throws(() => kv.serveBench(model, sample, { ...options, modes: 'block' }),
    { name: 'ParameterError', message: /not for block runs/ });
  assert.throws(() => kv.serveBench(model, sample, { ...options, chunks: [32] }),
    { name: 'ParameterError', message: /not for chunked runs/ });
  assert.throws(() => kv.serveBench(model, sample, { ...options, granularity: 1 }),
    { name: 'TypeError', message: /serveBench: options\.granularity must be/ });
});
